//! `accord-sandbox status`: the daemon, the hub, each member's ManagedCluster conditions,
//! agent and Kafka broker, the example policies, federations, Kafka topics and
//! FederatedResources (their state in each member), and the global Prometheus with a query
//! showing what it federates, read from the state file, `/proc` and the management cluster.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use accord_crds::{
    CrossClusterScalePolicy, FederatedKafkaTopic, FederatedResource, ManagedCluster,
    PlacementState, PrometheusFederation, conditions,
};
use accord_hub::federated_resource::status as fres_status;
use anyhow::Result;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::{Api, ResourceExt as _};
use serde::Serialize;

use super::procs;
use super::state::{self, State};

/// How long status waits for the management cluster to answer.
const API_TIMEOUT: Duration = Duration::from_secs(10);
/// A query on the global Prometheus that shows federated series from every member: how
/// many tenant targets are `up` per (cluster, tenant). The `tenant` matcher leaves out the
/// global Prometheus's own `up` series of its federation jobs, which carry neither label.
pub const FEDERATED_QUERY: &str = r#"count by (cluster, tenant) (up{tenant!=""})"#;

/// Why the hub's in-cluster Services are not the way to reach it here: `accord-hub install`
/// renders them for a hub running as a pod, and the sandbox runs it on this host.
pub const IN_CLUSTER_SERVICES_NOTE: &str = "(the hub runs on this host: Services \
    accord-system/accord-hub and accord-hub-metrics have no pods; use these addresses)";

/// A `curl` command running instant query `query` on the Prometheus at `url`.
pub fn query_command(url: &str, query: &str) -> String {
    format!("curl -s '{url}/api/v1/query' --data-urlencode 'query={query}'")
}

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
    /// The hub's fleet console.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub console: Option<ConsoleReport>,
    /// The members.
    pub members: Vec<MemberReport>,
    /// Every CrossClusterScalePolicy on the management cluster.
    pub policies: Vec<PolicyReport>,
    /// The global tier's Prometheus, with `--with-prometheus`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub global_prometheus: Option<GlobalPrometheusReport>,
    /// Jaeger's UI and query API, with `--with-tracing`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jaeger_url: Option<String>,
    /// Every PrometheusFederation on the management cluster.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub federations: Vec<FederationReport>,
    /// Every FederatedKafkaTopic on the management cluster.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub topics: Vec<TopicReport>,
    /// Every FederatedResource on the management cluster.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceReport>,
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
    /// Where the hub serves its admission webhook; the ValidatingWebhookConfiguration
    /// names it with each webhook's path appended.
    pub webhook_url: String,
    /// The URLs the ValidatingWebhookConfiguration `accord-hub` on the management cluster
    /// sends reviews to, as read from it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub webhook_registered: Vec<String>,
    /// Process id.
    pub pid: u32,
    /// Whether the process is alive.
    pub alive: bool,
    /// Where the hub keeps its state: its etcd endpoints and key prefix.
    pub etcd: String,
}

/// The console's part of the report.
#[derive(Debug, Clone, Serialize)]
pub struct ConsoleReport {
    /// Its URL.
    pub url: String,
    /// The file holding a token to sign in with.
    pub token_file: Option<PathBuf>,
    /// That token (printed for people; never in the JSON report).
    #[serde(skip)]
    pub token: Option<String>,
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
    /// The member's federation Prometheus, with `--with-prometheus`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub federation_url: Option<String>,
    /// The member's Kafka bootstrap address, with `--with-kafka` or `--with-kafka-sasl`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka_bootstrap: Option<String>,
    /// Its `security.protocol` (`PLAINTEXT` or `SASL_SSL`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka_protocol: Option<String>,
    /// Client properties for Kafka's tools, with `--with-kafka-sasl`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka_client_config: Option<PathBuf>,
}

/// One FederatedKafkaTopic's part of the report.
#[derive(Debug, Clone, Serialize)]
pub struct TopicReport {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The topic's name in Kafka.
    pub topic: String,
    /// Whether its `Ready` condition is True.
    pub ready: bool,
    /// The topic in each member, as its agent last saw it.
    pub placements: Vec<TopicPlacementReport>,
}

/// One member's placement of a FederatedKafkaTopic.
#[derive(Debug, Clone, Serialize)]
pub struct TopicPlacementReport {
    /// Member cluster.
    pub cluster: String,
    /// Placement state.
    pub state: String,
    /// Partitions the broker reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions: Option<i32>,
    /// Replication factor the broker reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication_factor: Option<i32>,
    /// Detail for the state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One FederatedResource's part of the report.
#[derive(Debug, Clone, Serialize)]
pub struct ResourceReport {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Whether its `Applied` condition is True (every manifest applied everywhere).
    pub applied: bool,
    /// Whether its `Available` condition is True (and every manifest healthy).
    pub available: bool,
    /// What each override of `spec.overrides` selects, by index: `clusters a,b` or its
    /// label selector (`region=eu`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub override_selections: Vec<String>,
    /// The delivery in each member, as its agent last reported it.
    pub placements: Vec<ResourcePlacementReport>,
}

/// One member's placement of a FederatedResource.
#[derive(Debug, Clone, Serialize)]
pub struct ResourcePlacementReport {
    /// Member cluster.
    pub cluster: String,
    /// Placement state.
    pub state: String,
    /// Manifests applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied: Option<i32>,
    /// Manifests healthy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available: Option<i32>,
    /// Feedback values by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub feedback: BTreeMap<String, String>,
    /// Indexes (in `spec.overrides`) of the overrides that applied there.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<i32>,
    /// Owned fields changed out of band and restored there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift_repairs: Option<i64>,
    /// Manifests not applied or not healthy, with why (`kind name: state/health`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_ready: Vec<String>,
    /// Detail for the state (e.g. which `spec.replicas` a scale policy sets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The global Prometheus's part of the report.
#[derive(Debug, Clone, Serialize)]
pub struct GlobalPrometheusReport {
    /// Its URL (`http://ADDRESS:9090`).
    pub url: String,
    /// A query showing federated series from every member ([`FEDERATED_QUERY`]).
    pub query: String,
    /// The `curl` command running it.
    pub command: String,
}

/// One PrometheusFederation's part of the report.
#[derive(Debug, Clone, Serialize)]
pub struct FederationReport {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Whether its `Ready` condition is True (every placement Synced, and the global tier
    /// when enabled).
    pub ready: bool,
    /// Per cluster: the placement's state and message.
    pub placements: Vec<FederationPlacementReport>,
    /// The global tier's state, when enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub global: Option<FederationPlacementReport>,
}

/// One placement of a PrometheusFederation (or its global tier, as cluster `global`).
#[derive(Debug, Clone, Serialize)]
pub struct FederationPlacementReport {
    /// Member cluster, or `global`.
    pub cluster: String,
    /// Placement state.
    pub state: String,
    /// Federation jobs rendered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobs: Option<i32>,
    /// Detail for the state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
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
        console: None,
        members: Vec::new(),
        policies: Vec::new(),
        global_prometheus: None,
        jaeger_url: None,
        federations: Vec::new(),
        topics: Vec::new(),
        resources: Vec::new(),
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
    if let Some(url) = &state.console_url {
        report.console = Some(ConsoleReport {
            url: url.clone(),
            token_file: state.console_token_file.clone(),
            token: state
                .console_token_file
                .as_ref()
                .and_then(|f| std::fs::read_to_string(f).ok())
                .map(|t| t.trim().to_owned()),
        });
    }
    if state.hub_pid != 0 {
        report.hub = Some(HubReport {
            grpc_url: state.hub_grpc_url.clone(),
            http_url: state.hub_http_url.clone(),
            webhook_url: state.hub_webhook_url.clone(),
            webhook_registered: Vec::new(),
            pid: state.hub_pid,
            alive: procs::alive(state.hub_pid),
            etcd: state.hub_etcd.clone(),
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
            federation_url: m.federation_url.clone(),
            kafka_bootstrap: m.kafka_bootstrap.clone(),
            kafka_protocol: m.kafka_protocol.clone(),
            kafka_client_config: m.kafka_client_config.clone(),
        })
        .collect();
    report.jaeger_url = state.jaeger_url.clone();
    report.global_prometheus =
        state
            .global_prometheus_url
            .as_ref()
            .map(|url| GlobalPrometheusReport {
                url: url.clone(),
                query: FEDERATED_QUERY.to_owned(),
                command: query_command(url, FEDERATED_QUERY),
            });
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
    if let Some(hub) = &mut report.hub {
        let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        hub.webhook_registered = configs
            .get_opt(accord_hub::webhook::CONFIGURATION_NAME)
            .await?
            .and_then(|c| c.webhooks)
            .into_iter()
            .flatten()
            .map(|w| match (w.client_config.url, w.client_config.service) {
                (Some(url), _) => url,
                (None, Some(service)) => format!(
                    "Service {}/{}:{}{}",
                    service.namespace,
                    service.name,
                    service.port.unwrap_or(443),
                    service.path.unwrap_or_default()
                ),
                (None, None) => "nowhere".to_owned(),
            })
            .collect();
    }
    let policies: Api<CrossClusterScalePolicy> = Api::all(client.clone());
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
    let topics: Api<FederatedKafkaTopic> = Api::all(client.clone());
    for topic in topics.list(&Default::default()).await? {
        let status = topic.status.clone().unwrap_or_default();
        report.topics.push(TopicReport {
            namespace: topic.namespace().unwrap_or_default(),
            name: topic.name_any(),
            topic: topic.topic_name().to_owned(),
            ready: conditions::is_true(&status.conditions, "Ready"),
            placements: status
                .placements
                .iter()
                .map(|p| TopicPlacementReport {
                    cluster: p.cluster.clone(),
                    state: p.state.to_string(),
                    partitions: p.partitions,
                    replication_factor: p.replication_factor,
                    message: p.message.clone(),
                })
                .collect(),
        });
    }
    let resources: Api<FederatedResource> = Api::all(client.clone());
    for resource in resources.list(&Default::default()).await? {
        let status = resource.status.clone().unwrap_or_default();
        report.resources.push(ResourceReport {
            namespace: resource.namespace().unwrap_or_default(),
            name: resource.name_any(),
            applied: conditions::is_true(&status.conditions, fres_status::APPLIED),
            available: conditions::is_true(&status.conditions, fres_status::AVAILABLE),
            override_selections: resource
                .spec
                .overrides
                .iter()
                .map(override_selection)
                .collect(),
            placements: status
                .placements
                .iter()
                .map(|p| ResourcePlacementReport {
                    cluster: p.cluster.clone(),
                    state: p.state.to_string(),
                    applied: p.applied,
                    available: p.available,
                    feedback: p.feedback.clone(),
                    overrides: p.overrides.clone(),
                    drift_repairs: p.drift_repairs,
                    not_ready: p
                        .manifests
                        .iter()
                        .filter(|m| {
                            m.state != PlacementState::Synced
                                || m.health != accord_common::distribution::health::HEALTHY
                        })
                        .map(|m| {
                            let mut text =
                                format!("{} {}: {}/{}", m.kind, m.name, m.state, m.health);
                            if let Some(message) = &m.message {
                                let _ = write!(text, " ({message})");
                            }
                            text
                        })
                        .collect(),
                    message: p.message.clone(),
                })
                .collect(),
        });
    }
    let federations: Api<PrometheusFederation> = Api::all(client);
    for federation in federations.list(&Default::default()).await? {
        let status = federation.status.clone().unwrap_or_default();
        report.federations.push(FederationReport {
            namespace: federation.namespace().unwrap_or_default(),
            name: federation.name_any(),
            ready: conditions::is_true(&status.conditions, "Ready"),
            placements: status
                .placements
                .iter()
                .map(|p| FederationPlacementReport {
                    cluster: p.cluster.clone(),
                    state: p.state.to_string(),
                    jobs: p.jobs,
                    message: p.message.clone(),
                })
                .collect(),
            global: status.global.as_ref().map(|g| FederationPlacementReport {
                cluster: "global".to_owned(),
                state: g.state.to_string(),
                jobs: g.jobs,
                message: g.message.clone(),
            }),
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
        let registered = if hub.webhook_registered.is_empty() {
            String::new()
        } else {
            format!(" (registered: {})", hub.webhook_registered.join(", "))
        };
        let _ = writeln!(out, "           webhook {}{registered}", hub.webhook_url);
        let _ = writeln!(out, "           etcd {}", hub.etcd);
        let _ = writeln!(out, "           {IN_CLUSTER_SERVICES_NOTE}");
    }
    if let Some(console) = &report.console {
        let _ = writeln!(
            out,
            "  console  {} (sign in with the token below: ServiceAccount {} of {}, reads every Accord kind)",
            console.url,
            state::CONSOLE_VIEWER,
            crate::hub::HUB_NAMESPACE
        );
        match (&console.token, &console.token_file) {
            (Some(token), _) => {
                let _ = writeln!(out, "           {token}");
            }
            (None, Some(file)) => {
                let _ = writeln!(out, "           (token file {} unreadable)", file.display());
            }
            (None, None) => {}
        }
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
        if let Some(url) = &m.federation_url {
            let _ = writeln!(out, "  {:<8} federation Prometheus {url}", "");
        }
        if let Some(bootstrap) = &m.kafka_bootstrap {
            let _ = writeln!(
                out,
                "  {:<8} Kafka {bootstrap}{}",
                "",
                kafka_detail(
                    m.kafka_protocol.as_deref(),
                    m.kafka_client_config.as_deref()
                )
            );
        }
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
    if let Some(global) = &report.global_prometheus {
        let _ = writeln!(
            out,
            "  global   Prometheus {} (federates every member's federation Prometheus)",
            global.url
        );
        let _ = writeln!(out, "           {}", global.command);
    }
    if let Some(jaeger) = &report.jaeger_url {
        let _ = writeln!(
            out,
            "  jaeger   {jaeger} (traces of changes: {jaeger}/api/traces/<status.traceID>)"
        );
    }
    for f in &report.federations {
        let placement = |p: &FederationPlacementReport| {
            let mut text = format!("{} {}", p.cluster, p.state);
            if let Some(jobs) = p.jobs {
                let _ = write!(text, " ({jobs} jobs)");
            }
            if p.state != PlacementState::Synced.as_str()
                && let Some(message) = &p.message
            {
                let _ = write!(text, ": {message}");
            }
            text
        };
        let mut placements: Vec<String> = f.placements.iter().map(placement).collect();
        placements.extend(f.global.iter().map(placement));
        let _ = writeln!(
            out,
            "  pfed {}/{}: {} [{}]",
            f.namespace,
            f.name,
            if f.ready { "Ready" } else { "not Ready" },
            placements.join(", ")
        );
    }
    for t in &report.topics {
        let placements: Vec<String> = t
            .placements
            .iter()
            .map(|p| {
                let mut text = format!("{} {}", p.cluster, p.state);
                if let (Some(partitions), Some(rf)) = (p.partitions, p.replication_factor) {
                    let _ = write!(text, " {partitions}/{rf}");
                }
                if p.state != PlacementState::Synced.as_str()
                    && let Some(message) = &p.message
                {
                    let _ = write!(text, ": {message}");
                }
                text
            })
            .collect();
        let _ = writeln!(
            out,
            "  fkt {}/{} (topic {}): {} [{}]",
            t.namespace,
            t.name,
            t.topic,
            if t.ready { "Ready" } else { "not Ready" },
            placements.join(", ")
        );
    }
    for r in &report.resources {
        let _ = writeln!(
            out,
            "  fres {}/{}: {}",
            r.namespace,
            r.name,
            match (r.applied, r.available) {
                (true, true) => "Applied, Available",
                (true, false) => "Applied, not Available",
                (false, _) => "not Applied",
            }
        );
        for p in &r.placements {
            let _ = writeln!(out, "    {}", resource_placement(p, &r.override_selections));
        }
    }
    for problem in &report.problems {
        let _ = writeln!(out, "  ! {problem}");
    }
    out
}

/// What an override selects: `clusters a,b`, its labels (`region=eu`), or `selector`
/// when it has expressions.
fn override_selection(o: &accord_crds::federated_resource::Override) -> String {
    if let Some(clusters) = &o.clusters {
        return format!("clusters {}", clusters.join(","));
    }
    let selector = o.cluster_selector.clone().unwrap_or_default();
    if selector
        .match_expressions
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        return "selector".to_owned();
    }
    let labels: Vec<String> = selector
        .match_labels
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    labels.join(",")
}

/// One member's delivery of a FederatedResource, on one line: state, manifests applied and
/// healthy, the overrides that applied (with what they select, from `selections`),
/// feedback, drift repairs, then what is not ready and, when not Synced, the message.
fn resource_placement(p: &ResourcePlacementReport, selections: &[String]) -> String {
    let mut text = format!("{} {}", p.cluster, p.state);
    if let (Some(applied), Some(available)) = (p.applied, p.available) {
        let _ = write!(text, ", {applied} applied, {available} available");
    }
    if !p.overrides.is_empty() {
        let overrides: Vec<String> = p
            .overrides
            .iter()
            .map(|i| {
                let selection = usize::try_from(*i).ok().and_then(|i| selections.get(i));
                match selection {
                    Some(s) => format!("{i} ({s})"),
                    None => i.to_string(),
                }
            })
            .collect();
        let _ = write!(text, ", overrides {}", overrides.join(", "));
    }
    if !p.feedback.is_empty() {
        let values: Vec<String> = p.feedback.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = write!(text, ", {}", values.join(" "));
    }
    if let Some(repairs) = p.drift_repairs {
        let _ = write!(text, ", {repairs} drift repair(s)");
    }
    if !p.not_ready.is_empty() {
        let _ = write!(text, "; not ready: {}", p.not_ready.join(", "));
    }
    if p.state != PlacementState::Synced.as_str()
        && let Some(message) = &p.message
    {
        let _ = write!(text, ": {message}");
    }
    text
}

/// What follows a member's Kafka address: its protocol unless PLAINTEXT, and the client
/// configuration for Kafka's tools.
pub fn kafka_detail(protocol: Option<&str>, client_config: Option<&Path>) -> String {
    match (protocol, client_config) {
        (Some(protocol), Some(config)) if protocol != "PLAINTEXT" => format!(
            " ({protocol}, SCRAM-SHA-512; client config {})",
            config.display()
        ),
        (Some(protocol), None) if protocol != "PLAINTEXT" => format!(" ({protocol})"),
        _ => String::new(),
    }
}

fn alive(alive: bool) -> &'static str {
    if alive { "alive" } else { "NOT RUNNING" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running_report() -> Report {
        Report {
            dir: PathBuf::from("/sandbox"),
            running: true,
            ready: true,
            pid: Some(1),
            started_at: Some("2026-01-01T00:00:00Z".into()),
            mgmt_kubeconfig: None,
            hub: None,
            console: None,
            members: vec![MemberReport {
                name: "member-1".into(),
                kubeconfig: PathBuf::from("/sandbox/member-1.kubeconfig"),
                agent_pid: 2,
                agent_alive: true,
                joined: Some("True".into()),
                available: Some("True".into()),
                federation_url: Some("http://127.70.0.2:9090".into()),
                kafka_bootstrap: None,
                kafka_protocol: None,
                kafka_client_config: None,
            }],
            policies: Vec::new(),
            global_prometheus: None,
            federations: Vec::new(),
            topics: Vec::new(),
            resources: Vec::new(),
            problems: Vec::new(),
            jaeger_url: None,
        }
    }

    #[test]
    fn the_query_command_runs_the_query_on_the_global_prometheus() {
        assert_eq!(
            query_command("http://127.70.0.1:9090", FEDERATED_QUERY),
            "curl -s 'http://127.70.0.1:9090/api/v1/query' --data-urlencode \
             'query=count by (cluster, tenant) (up{tenant!=\"\"})'"
        );
    }

    #[test]
    fn status_prints_the_global_prometheus_its_query_and_the_federation_placements() {
        let mut report = running_report();
        report.global_prometheus = Some(GlobalPrometheusReport {
            url: "http://127.70.0.1:9090".into(),
            query: FEDERATED_QUERY.into(),
            command: query_command("http://127.70.0.1:9090", FEDERATED_QUERY),
        });
        report.federations.push(FederationReport {
            namespace: "monitoring".into(),
            name: "team-a".into(),
            ready: false,
            placements: vec![FederationPlacementReport {
                cluster: "member-1".into(),
                state: "Error".into(),
                jobs: Some(1),
                message: Some("invalid config".into()),
            }],
            global: Some(FederationPlacementReport {
                cluster: "global".into(),
                state: "Synced".into(),
                jobs: Some(1),
                message: Some("all members".into()),
            }),
        });
        let text = render(&report);
        assert!(
            text.contains("federation Prometheus http://127.70.0.2:9090"),
            "{text}"
        );
        assert!(
            text.contains("global   Prometheus http://127.70.0.1:9090"),
            "{text}"
        );
        assert!(
            text.contains(&query_command("http://127.70.0.1:9090", FEDERATED_QUERY)),
            "{text}"
        );
        assert!(
            text.contains(
                "pfed monitoring/team-a: not Ready [member-1 Error (1 jobs): invalid config, \
                 global Synced (1 jobs)]"
            ),
            "{text}"
        );
    }

    #[test]
    fn status_prints_each_members_broker_and_the_topic_in_each_member() {
        let mut report = running_report();
        report.members[0].kafka_bootstrap = Some("127.0.0.1:9092".into());
        let placement = |cluster: &str, state: &str, message: Option<&str>| TopicPlacementReport {
            cluster: cluster.into(),
            state: state.into(),
            partitions: Some(12),
            replication_factor: Some(1),
            message: message.map(Into::into),
        };
        report.topics.push(TopicReport {
            namespace: "default".into(),
            name: "fraud-transaction-events".into(),
            topic: "fraud-transaction-events".into(),
            ready: false,
            placements: vec![
                placement("member-1", "Synced", Some("ignored when Synced")),
                placement(
                    "member-2",
                    "Unavailable",
                    Some("Kafka unreachable: connection refused"),
                ),
            ],
        });
        let text = render(&report);
        assert!(text.contains("Kafka 127.0.0.1:9092"), "{text}");
        assert!(
            text.contains(
                "fkt default/fraud-transaction-events (topic fraud-transaction-events): \
                 not Ready [member-1 Synced 12/1, member-2 Unavailable 12/1: Kafka \
                 unreachable: connection refused]"
            ),
            "{text}"
        );
    }

    #[test]
    fn status_prints_the_webhook_address_and_where_it_is_registered() {
        let mut report = running_report();
        report.hub = Some(HubReport {
            grpc_url: "https://127.0.0.1:7443".into(),
            http_url: "http://127.0.0.1:8080".into(),
            webhook_url: "https://127.0.0.1:9443".into(),
            webhook_registered: vec!["https://127.0.0.1:9443/validate-federatedkafkatopics".into()],
            pid: 3,
            alive: true,
            etcd: "https://127.0.0.1:2379 (prefix /accord/)".into(),
        });
        let text = render(&report);
        assert!(
            text.contains("etcd https://127.0.0.1:2379 (prefix /accord/)"),
            "{text}"
        );
        assert!(
            text.contains(
                "webhook https://127.0.0.1:9443 (registered: \
                 https://127.0.0.1:9443/validate-federatedkafkatopics)"
            ),
            "{text}"
        );
        assert!(text.contains(IN_CLUSTER_SERVICES_NOTE), "{text}");
    }

    #[test]
    fn status_says_a_sasl_member_speaks_scram_and_where_its_client_config_is() {
        let mut report = running_report();
        report.members[0].kafka_bootstrap = Some("127.0.0.1:9094".into());
        report.members[0].kafka_protocol = Some("SASL_SSL".into());
        report.members[0].kafka_client_config =
            Some(PathBuf::from("/sandbox/member-1-kafka.properties"));
        let text = render(&report);
        assert!(
            text.contains(
                "Kafka 127.0.0.1:9094 (SASL_SSL, SCRAM-SHA-512; client config \
                 /sandbox/member-1-kafka.properties)"
            ),
            "{text}"
        );
    }

    #[test]
    fn status_prints_each_members_delivery_of_a_federated_resource() {
        let mut report = running_report();
        let placement = |cluster: &str, overrides: Vec<i32>| ResourcePlacementReport {
            cluster: cluster.into(),
            state: "Synced".into(),
            applied: Some(6),
            available: Some(6),
            feedback: [
                ("instances".to_owned(), "3".to_owned()),
                ("readyReplicas".to_owned(), "3".to_owned()),
            ]
            .into(),
            overrides,
            drift_repairs: None,
            not_ready: Vec::new(),
            message: None,
        };
        let mut eu = placement("member-2", vec![0]);
        eu.state = "Synced".into();
        eu.available = Some(5);
        eu.drift_repairs = Some(1);
        eu.not_ready = vec!["StatefulSet mysql: Synced/Progressing".into()];
        report.resources.push(ResourceReport {
            namespace: "databases".into(),
            name: "mysql".into(),
            applied: true,
            available: false,
            override_selections: vec!["region=eu".into()],
            placements: vec![placement("member-1", Vec::new()), eu],
        });
        let mut stuck = placement("member-3", Vec::new());
        stuck.state = "Conflict".into();
        stuck.message = Some("Deployment frontend exists and Accord did not create it".into());
        report.resources.push(ResourceReport {
            namespace: "default".into(),
            name: "frontend".into(),
            applied: false,
            available: false,
            override_selections: Vec::new(),
            placements: vec![stuck],
        });
        let text = render(&report);
        assert!(
            text.contains(
                "  fres databases/mysql: Applied, not Available\n    member-1 Synced, 6 applied, \
                 6 available, instances=3 readyReplicas=3\n    member-2 Synced, 6 applied, 5 \
                 available, overrides 0 (region=eu), instances=3 readyReplicas=3, 1 drift \
                 repair(s); not ready: StatefulSet mysql: Synced/Progressing\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  fres default/frontend: not Applied\n    member-3 Conflict, 6 applied, 6 \
                 available, instances=3 readyReplicas=3: Deployment frontend exists and Accord \
                 did not create it\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn without_prometheus_status_prints_no_federation_lines() {
        let mut report = running_report();
        report.members[0].federation_url = None;
        let text = render(&report);
        assert!(!text.contains("Prometheus"), "{text}");
        assert!(!text.contains("pfed"), "{text}");
    }
}
