//! The real `accord-agent` binary against the real `accord-hub serve`: the agent joins
//! through the token flow (identity from Registration), enforces its saved assignments
//! while the hub is out of reach, then connects over mTLS, heartbeats, and its status
//! report is stored by the hub under optimistic concurrency.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use accord_agent::identity;
use accord_agent::persist::{ConfigMapStore, SavedAssignment, SavedState};
use accord_common::distribution::{AssignmentSpec, PlacedKind, PlacedRef, ScaleSpec};
use accord_crds::ManagedCluster;
use accord_crds::conditions;
use accord_e2e::agent_sim;
use accord_e2e::hub::{HubOptions, HubProcess, accord_binary, create_token, parse_metric};
use accord_e2e::ports::free_port;
use accord_e2e::testbed::rss_bytes;
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use accord_hub::store::{Keyspace, Store};
use anyhow::{Context as _, Result, ensure};
use kube::Api;
use support::*;

static TESTBED: SharedTestbed =
    SharedTestbed::new(|b| b.members(1).without_mgmt_controller_manager());

const CLUSTER: &str = "member-1";
const PREFIX: &str = "/t-agent-e2e/";

/// Writes one identity file atomically, so the agent never reads half a file.
fn write_key(dir: &Path, key: &str, value: &str) -> Result<()> {
    let tmp = dir.join(format!(".{key}.tmp"));
    std::fs::write(&tmp, value)?;
    std::fs::rename(&tmp, dir.join(key))?;
    Ok(())
}

/// Value of metric `name` (summed over labels) served at `url`.
async fn metric(testbed: &Testbed, url: &str, name: &str) -> Result<Option<f64>> {
    let text = testbed.http().get(url).send().await?.text().await?;
    Ok(parse_metric(&text, name))
}

async fn metric_until(
    testbed: &Testbed,
    url: &str,
    name: &str,
    what: &str,
    ok: impl Fn(f64) -> bool,
) -> Result<f64> {
    until(what, WAIT, || async {
        let value = metric(testbed, url, name).await.unwrap_or(None);
        Ok(match value {
            Some(v) if ok(v) => Check::Ready(v),
            other => Check::NotYet(format!("{name} = {other:?}")),
        })
    })
    .await
}

/// User plus system CPU time of a process, in clock ticks (10 ms on Linux).
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let rest = stat.rsplit_once(')').context("odd /proc stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11).context("no utime")?.parse()?;
    let stime: u64 = fields.get(12).context("no stime")?.parse()?;
    Ok(utime + stime)
}

#[test]
fn the_agent_enforces_while_cut_off_then_connects_heartbeats_and_gets_its_report_stored() {
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let member = &testbed.members()[0];
        let client = member.client();

        // Hub, token, registration: the identity a `join` would store.
        let hub = HubProcess::start(
            testbed,
            &HubOptions {
                replica: "hub-e2e".into(),
                etcd_prefix: PREFIX.into(),
                extra_args: Vec::new(),
            },
        )
        .await?;
        let (token, hash) = create_token(testbed, PREFIX, "10m").await?;
        let joined = agent_sim::register(&hub.grpc, &token, &hash, CLUSTER, false).await?;
        let dir = tempfile::tempdir()?;
        let unreachable = format!("https://127.0.0.1:{}", free_port()?);
        write_key(dir.path(), identity::HUB_URL_KEY, &unreachable)?;
        write_key(dir.path(), identity::CLUSTER_NAME_KEY, CLUSTER)?;
        write_key(dir.path(), identity::CA_CERT_KEY, &joined.ca_pem)?;
        write_key(dir.path(), identity::TLS_CERT_KEY, &joined.cert_pem)?;
        write_key(dir.path(), identity::TLS_KEY_KEY, &joined.key_pem)?;

        // What the agent applied before a restart: one Deployment at 2 replicas.
        let ns = "t-e2e";
        let agent_ns = "t-e2e-agent";
        namespace(&client, ns).await?;
        namespace(&client, agent_ns).await?;
        user_deployment(&client, ns, "web", 1).await?;
        ConfigMapStore::new(client.clone(), agent_ns)
            .save_state(&SavedState {
                cluster: CLUSTER.into(),
                last_applied_revision: 1,
                assignments: vec![SavedAssignment {
                    placed: PlacedRef::new(PlacedKind::CrossClusterScalePolicy, "default", "e2e-web"),
                    revision: 1,
                    spec: AssignmentSpec::Scale(ScaleSpec::deployment(ns, "web", 2, "req-e2e")).into(),
                }],
            })
            .await?;

        let http_addr = format!("127.0.0.1:{}", free_port()?);
        let metrics_url = format!("http://{http_addr}/metrics");
        let mut cmd = Command::new(accord_binary("accord-agent")?);
        cmd.arg("run")
            .arg("--kubeconfig")
            .arg(member.kubeconfig_path())
            .arg("--identity-dir")
            .arg(dir.path())
            .args(["--http-addr", &http_addr, "--namespace", agent_ns])
            .args(["--heartbeat-interval", "1s"])
            .env("RUST_LOG", "info,accord_agent=debug")
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .env_remove("ALL_PROXY");
        let agent = testbed.spawn("agent/member-1", cmd)?;

        // Cut off from the hub, the agent enforces what it saved and holds the report.
        deployment_until(&client, ns, "web", "2 replicas from the saved state", |d| {
            replicas(d) == Some(2) && request_id(d) == Some("req-e2e")
        })
        .await?;
        metric_until(
            testbed,
            &metrics_url,
            "accord_agent_status_reports_pending",
            "a report waiting for the hub",
            |v| v == 1.0,
        )
        .await?;
        testbed.ensure_running(agent)?;
        // The first attempt may come after the report is held (the agent connects once its
        // Lease fence is open); it fails against the unreachable address, and is counted.
        metric_until(
            testbed,
            &metrics_url,
            "accord_agent_reconnects_total",
            "a failed connection attempt",
            |v| v >= 1.0,
        )
        .await?;
        ensure!(
            metric(testbed, &metrics_url, "accord_agent_connected").await? == Some(0.0),
            "connected to nothing?"
        );

        // The hub becomes reachable: the identity is re-read before each attempt.
        let pointed = Instant::now();
        write_key(
            dir.path(),
            identity::HUB_URL_KEY,
            &format!("https://{}", hub.grpc),
        )?;
        let hub_metrics = format!("{}/metrics", hub.http);
        metric_until(
            testbed,
            &hub_metrics,
            "accord_hub_connected_agents",
            "the hub to count the agent",
            |v| v == 1.0,
        )
        .await?;
        let connected_after = pointed.elapsed();
        ensure!(
            connected_after < Duration::from_secs(15),
            "reconnect backoff is capped at ~5 s, took {connected_after:?}"
        );
        metric_until(testbed, &metrics_url, "accord_agent_connected", "agent connected", |v| {
            v == 1.0
        })
        .await?;
        metric_until(
            testbed,
            &metrics_url,
            "accord_agent_status_acks_total",
            "a StatusAck for the held report",
            |v| v >= 1.0,
        )
        .await?;
        metric_until(
            testbed,
            &hub_metrics,
            "accord_hub_status_reports_total",
            "the hub to store the report",
            |v| v >= 1.0,
        )
        .await?;

        let store = Store::from_client(testbed.hub_etcd_client().await?, Keyspace::new(PREFIX));
        let (record, version) = store
            .read_status(CLUSTER, "CrossClusterScalePolicy", "default", "e2e-web")
            .await?
            .context("no status record in the hub's store")?;
        ensure!(version > 0);
        ensure!(
            record.state == accord_crds::PlacementState::Synced,
            "{record:?}"
        );
        let seen = record
            .observed
            .scale()
            .context("the record holds no replica counts")?;
        ensure!(seen.scale_request_id == "req-e2e", "{record:?}");
        ensure!(seen.desired == 2, "{record:?}");

        // Heartbeats keep the cluster Available.
        let api: Api<ManagedCluster> = Api::all(testbed.mgmt().client());
        until("ManagedCluster Available", WAIT, || {
            let api = api.clone();
            async move {
                let mc = api.get_opt(CLUSTER).await?;
                let available = mc
                    .as_ref()
                    .and_then(|m| m.status.as_ref())
                    .is_some_and(|s| conditions::is_true(&s.conditions, "Available"));
                Ok(if available {
                    Check::Ready(())
                } else {
                    Check::NotYet("not Available".into())
                })
            }
        })
        .await?;
        let pid = testbed
            .processes()
            .into_iter()
            .find(|p| p.name == "agent/member-1")
            .context("agent process")?
            .pid;

        // Idle: only heartbeats flow. Measure the agent's CPU over a few of them.
        let heartbeats_before = metric(testbed, &hub_metrics, "accord_hub_heartbeats_total")
            .await?
            .unwrap_or(0.0);
        let (cpu_before, wall_before) = (cpu_ticks(pid)?, Instant::now());
        metric_until(
            testbed,
            &hub_metrics,
            "accord_hub_heartbeats_total",
            "five more heartbeats",
            |v| v >= heartbeats_before + 5.0,
        )
        .await?;
        let cpu = Duration::from_millis((cpu_ticks(pid)? - cpu_before) * 10);
        let wall = wall_before.elapsed();
        println!(
            "agent connected {connected_after:?} after the hub became reachable; idle: {cpu:?} CPU in {wall:.1?}; RSS {:.1} MiB",
            rss_bytes(pid) as f64 / (1024.0 * 1024.0)
        );
        testbed.ensure_running(agent)?;
        testbed.stop_process(agent);
        Ok(())
    });
}
