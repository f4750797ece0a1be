//! `accord-sandbox status`: the daemon, the hub, each member's ManagedCluster conditions
//! and agent, and the example policies, read from the state file, `/proc` and the
//! management cluster.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use accord_crds::{CrossClusterScalePolicy, ManagedCluster, PlacementState, conditions};
use anyhow::Result;
use kube::{Api, ResourceExt as _};
use serde::Serialize;

use super::procs;
use super::state::{self, State};

/// How long status waits for the management cluster to answer.
const API_TIMEOUT: Duration = Duration::from_secs(10);

/// What `status` reports (also its `--json` form).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The sandbox directory.
    pub dir: PathBuf,
    /// Whether the daemon is alive.
    pub running: bool,
    /// Whether start-up finished.
    pub ready: bool,
    /// The daemon's process id, if a state file names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// When the daemon started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// Kubeconfig of the management cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mgmt_kubeconfig: Option<PathBuf>,
    /// The hub.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hub: Option<HubReport>,
    /// The members.
    pub members: Vec<MemberReport>,
    /// Every CrossClusterScalePolicy on the management cluster.
    pub policies: Vec<PolicyReport>,
    /// Why part of the report is missing (e.g. the management cluster did not answer).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// The hub's part of the report.
#[derive(Debug, Clone, Serialize)]
pub struct HubReport {
    /// gRPC URL agents dial.
    pub grpc_url: String,
    /// HTTP base URL (`/metrics`, `/readyz`).
    pub http_url: String,
    /// Process id.
    pub pid: u32,
    /// Whether the process is alive.
    pub alive: bool,
}

/// One member's part of the report.
#[derive(Debug, Clone, Serialize)]
pub struct MemberReport {
    /// Cluster name.
    pub name: String,
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// The agent's process id.
    pub agent_pid: u32,
    /// Whether the agent process is alive.
    pub agent_alive: bool,
    /// Status of the ManagedCluster's `Joined` condition (`True`, `False`, `Unknown`).
    pub joined: Option<String>,
    /// Status of the ManagedCluster's `Available` condition.
    pub available: Option<String>,
}

/// One scale policy's part of the report.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyReport {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Whether every placement is Synced (and there is at least one).
    pub synced: bool,
    /// Per cluster: `cluster`, state, desired and ready replicas.
    pub placements: Vec<PlacementReport>,
}

/// One placement of a policy.
#[derive(Debug, Clone, Serialize)]
pub struct PlacementReport {
    /// Member cluster.
    pub cluster: String,
    /// Placement state.
    pub state: String,
    /// Replicas assigned.
    pub desired_replicas: i32,
    /// Replicas ready, as last reported.
    pub ready_replicas: Option<i32>,
}

/// Gathers the report for the sandbox in `dir`.
pub async fn gather(dir: &Path) -> Result<Report> {
    let mut report = Report {
        dir: dir.to_path_buf(),
        running: false,
        ready: false,
        pid: None,
        started_at: None,
        mgmt_kubeconfig: None,
        hub: None,
        members: Vec::new(),
        policies: Vec::new(),
        problems: Vec::new(),
    };
    let Some(state) = state::read(dir)? else {
        return Ok(report);
    };
    report.pid = Some(state.pid);
    report.running = procs::is_daemon(state.pid);
    report.ready = report.running && state.ready;
    report.started_at = Some(state.started_at.clone());
    report.mgmt_kubeconfig = Some(state.mgmt_kubeconfig.clone());
    if !report.running {
        report
            .problems
            .push(format!("the daemon (pid {}) is not running", state.pid));
        return Ok(report);
    }
    if state.hub_pid != 0 {
        report.hub = Some(HubReport {
            grpc_url: state.hub_grpc_url.clone(),
            http_url: state.hub_http_url.clone(),
            pid: state.hub_pid,
            alive: procs::alive(state.hub_pid),
        });
    }
    report.members = state
        .members
        .iter()
        .map(|m| MemberReport {
            name: m.name.clone(),
            kubeconfig: m.kubeconfig.clone(),
            agent_pid: m.agent_pid,
            agent_alive: procs::alive(m.agent_pid),
            joined: None,
            available: None,
        })
        .collect();
    if state.hub_pid != 0 {
        match tokio::time::timeout(API_TIMEOUT, read_cluster(&state, &mut report)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => report
                .problems
                .push(format!("reading the management cluster: {e:#}")),
            Err(_) => report.problems.push(format!(
                "the management cluster did not answer within {API_TIMEOUT:?}"
            )),
        }
    }
    Ok(report)
}

async fn read_cluster(state: &State, report: &mut Report) -> Result<()> {
    let client = crate::kubeconfig::client(&state.mgmt_kubeconfig).await?;
    let clusters: Api<ManagedCluster> = Api::all(client.clone());
    for member in &mut report.members {
        let conds = clusters
            .get_opt(&member.name)
            .await?
            .and_then(|m| m.status)
            .map(|s| s.conditions)
            .unwrap_or_default();
        let of = |t: &str| conditions::find(&conds, t).map(|c| c.status.clone());
        member.joined = of("Joined");
        member.available = of("Available");
    }
    let policies: Api<CrossClusterScalePolicy> = Api::all(client);
    for policy in policies.list(&Default::default()).await? {
        let placements: Vec<PlacementReport> = policy
            .status
            .as_ref()
            .map(|s| s.placements.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|p| PlacementReport {
                cluster: p.cluster.clone(),
                state: p.state.to_string(),
                desired_replicas: p.desired_replicas,
                ready_replicas: p.ready_replicas,
            })
            .collect();
        report.policies.push(PolicyReport {
            namespace: policy.namespace().unwrap_or_default(),
            name: policy.name_any(),
            synced: !placements.is_empty()
                && placements
                    .iter()
                    .all(|p| p.state == PlacementState::Synced.as_str()),
            placements,
        });
    }
    Ok(())
}

/// The report for people.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let dir = report.dir.display();
    match (report.running, report.ready, report.pid) {
        (false, _, None) => {
            let _ = writeln!(
                out,
                "no sandbox in {dir} (start one with `accord-sandbox up`)"
            );
        }
        (false, _, Some(pid)) => {
            let _ = writeln!(
                out,
                "no sandbox running in {dir}: the daemon (pid {pid}) is gone; \
                 `accord-sandbox down` cleans up"
            );
        }
        (true, false, Some(pid)) => {
            let _ = writeln!(out, "sandbox in {dir} is starting (daemon pid {pid})");
        }
        (true, _, pid) => {
            let _ = writeln!(
                out,
                "sandbox in {dir} is running (daemon pid {}, since {})",
                pid.unwrap_or_default(),
                report.started_at.as_deref().unwrap_or("?")
            );
        }
    }
    if let Some(hub) = &report.hub {
        let _ = writeln!(
            out,
            "  hub      {} (pid {}, {}), http {}",
            hub.grpc_url,
            hub.pid,
            alive(hub.alive),
            hub.http_url
        );
    }
    if let Some(kubeconfig) = &report.mgmt_kubeconfig
        && report.running
        && kubeconfig.exists()
    {
        let _ = writeln!(out, "  mgmt     {}", kubeconfig.display());
    }
    for m in &report.members {
        let _ = writeln!(
            out,
            "  {:<8} Joined={} Available={} agent pid {} ({}), {}",
            m.name,
            m.joined.as_deref().unwrap_or("-"),
            m.available.as_deref().unwrap_or("-"),
            m.agent_pid,
            alive(m.agent_alive),
            m.kubeconfig.display()
        );
    }
    for p in &report.policies {
        let placements = p
            .placements
            .iter()
            .map(|pl| {
                format!(
                    "{} {} {}/{}",
                    pl.cluster,
                    pl.state,
                    pl.ready_replicas.map_or("-".to_owned(), |r| r.to_string()),
                    pl.desired_replicas
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "  ccsp {}/{}: {} [{}]",
            p.namespace,
            p.name,
            if p.synced { "Synced" } else { "not Synced" },
            placements
        );
    }
    for problem in &report.problems {
        let _ = writeln!(out, "  ! {problem}");
    }
    out
}

fn alive(alive: bool) -> &'static str {
    if alive { "alive" } else { "NOT RUNNING" }
}
