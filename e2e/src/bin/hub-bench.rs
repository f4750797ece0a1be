//! Hub scale benchmark: N simulated agents (one process, N real mTLS streams) against one
//! real `accord-hub serve`, real etcd and a real management kube-apiserver.
//!
//! Every agent joins through the real token flow, heartbeats every second and sends a
//! status report every `--report-every`; the benchmark prints hub RSS, hub CPU seconds,
//! heartbeats/s, status reports/s and report-to-ack latency percentiles.
//!
//! With `--fanout`, one FederatedKafkaTopic then selects every agent by label (they are
//! registered with `bench=fanout`), is edited once, and for each of the two changes the
//! benchmark prints when every agent received its assignment and when every agent's report
//! was stored (p50/p99/max over agents, from the API server accepting the change), when the
//! object's status said `Ready`, and the status's size.
//!
//! ```text
//! cargo run --release -p accord-e2e --bin hub-bench -- --agents 1000 --duration 30 [--fanout]
//! ```

use accord_crds::FederatedKafkaTopic;
use accord_e2e::Testbed;
use accord_e2e::agent_sim::{self, AgentStream, policy};
use accord_e2e::hub::{HUB_NAMESPACE, HubOptions, HubProcess};
use accord_e2e::testbed::{cpu_seconds, rss_bytes};
use accord_e2e::wait::{Check, until};
use accord_hub::store::{Keyspace, Store};
use accord_proto::v1::{
    AgentMessage, Heartbeat, KafkaTopicStatus, StatusReport, agent_message, assignment,
    hub_message, status_ack, status_report,
};
use anyhow::{Context as _, Result};
use futures::{StreamExt, stream};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

struct Args {
    agents: usize,
    duration: u64,
    report_every: u64,
    concurrency: usize,
    /// Keep the hub's state in the API servers' plain etcd instead of the hub's own
    /// (TLS, client certificates, authentication).
    plain_etcd: bool,
    /// After the steady state, place one FederatedKafkaTopic in every agent and time it.
    fanout: bool,
}

/// Name (and namespace) of the fan-out topic object.
const FANOUT_TOPIC: &str = "fanout";
const BENCH_NAMESPACE: &str = "bench";

/// The fan-out topic as each agent saw it: the revision of the last assignment received
/// and of the last report the hub stored, with when.
#[derive(Default)]
struct Seen {
    by_agent: std::sync::Mutex<HashMap<String, AgentSeen>>,
}

#[derive(Default, Clone, Copy)]
struct AgentSeen {
    received: Option<(i64, Instant)>,
    stored: Option<(i64, Instant)>,
}

/// One agent's reports on the fan-out topic: one in flight at a time, as a real agent has
/// per policy.
#[derive(Default)]
struct TopicReports {
    /// The version the hub stored last.
    version: i64,
    /// Revision of the report awaiting its ack.
    in_flight: Option<i64>,
    /// The last report sent (sent again on a conflict).
    last: Option<StatusReport>,
    /// A report waiting for the one in flight.
    next: Option<StatusReport>,
}

impl TopicReports {
    /// The message to send `report` in now, or None when it waits for the ack in flight.
    fn offer(&mut self, report: StatusReport) -> Option<AgentMessage> {
        if self.in_flight.is_some() {
            self.next = Some(report);
            return None;
        }
        Some(self.send(report))
    }

    fn send(&mut self, report: StatusReport) -> AgentMessage {
        let report = StatusReport {
            expected_version: self.version,
            ..report
        };
        self.in_flight = Some(report.applied_revision);
        self.last = Some(report.clone());
        AgentMessage {
            cluster: String::new(),
            body: Some(agent_message::Body::StatusReport(report)),
        }
    }

    /// The hub's answer: the revision it stored (when accepted) and what to send next (the
    /// waiting report, or after a conflict the same one on the stored version).
    fn answered(
        &mut self,
        result: Option<status_ack::Result>,
    ) -> (Option<i64>, Option<AgentMessage>) {
        let accepted = matches!(result, Some(status_ack::Result::Accepted(_)));
        if let Some(status_ack::Result::Accepted(v) | status_ack::Result::Conflict(v)) = result {
            self.version = v;
        }
        let Some(revision) = self.in_flight.take() else {
            return (None, None);
        };
        let again = if accepted {
            self.next.take()
        } else {
            self.last.clone()
        };
        (accepted.then_some(revision), again.map(|r| self.send(r)))
    }
}

impl Seen {
    fn update(&self, cluster: &str, f: impl FnOnce(&mut AgentSeen)) {
        let mut map = self
            .by_agent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(map.entry(cluster.to_owned()).or_default());
    }

    fn snapshot(&self) -> HashMap<String, AgentSeen> {
        self.by_agent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        agents: 1000,
        duration: 30,
        report_every: 5,
        concurrency: 32,
        plain_etcd: false,
        fanout: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--agents" => a.agents = value()?.parse()?,
            "--duration" => a.duration = value()?.parse()?,
            "--report-every" => a.report_every = value()?.parse()?,
            "--concurrency" => a.concurrency = value()?.parse()?,
            "--plain-etcd" => a.plain_etcd = true,
            "--fanout" => a.fanout = true,
            other => anyhow::bail!(
                "unknown flag {other}; flags: --agents N --duration SECS --report-every SECS --concurrency N --plain-etcd --fanout"
            ),
        }
    }
    Ok(a)
}

fn percentile(sorted: &[u64], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    Duration::from_micros(sorted[i])
}

/// One simulated agent: a heartbeat every second and a status report every
/// `report_every` heartbeats, timing each report until its ack.
/// What the agents record for the measurements: report→ack latencies and acks while
/// `measuring`, and what each saw of the fan-out topic.
#[derive(Clone, Default)]
struct Probes {
    latencies: Arc<Mutex<Vec<u64>>>,
    acks: Arc<AtomicU64>,
    measuring: Arc<std::sync::atomic::AtomicBool>,
    seen: Arc<Seen>,
}

/// Streams that ended on the agents' side, with why (cluster, reason).
type Ended = Arc<std::sync::Mutex<Vec<(String, String)>>>;

async fn run_agent(
    s: AgentStream,
    ended: Ended,
    offset: Duration,
    report_every: u64,
    probes: Probes,
) {
    let Probes {
        latencies,
        acks,
        measuring,
        seen,
    } = probes;
    let cluster = s.cluster.clone();
    let end = |reason: String| {
        ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((cluster.clone(), reason));
    };
    let (tx, mut rx) = s.split();
    tokio::time::sleep(offset).await;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut expected = 0i64;
    let mut applied = 0i64;
    let mut n = 0u64;
    // When the report awaiting its ack was sent: one at a time, as a real agent has one
    // report per policy in flight. Heartbeats go on meanwhile, as a real agent's do (its
    // ticker is apart from its reports): a hub slow to store a report must not make the
    // agent look silent.
    let mut in_flight: Option<Instant> = None;
    let mut reports = TopicReports::default();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                n += 1;
                let hb = AgentMessage {
                    cluster: String::new(),
                    body: Some(agent_message::Body::Heartbeat(Heartbeat::default())),
                };
                if tx.send(hb).await.is_err() {
                    return end("the stream closed (heartbeat)".into());
                }
                if !n.is_multiple_of(report_every) || in_flight.is_some() {
                    continue;
                }
                applied += 1;
                let report = AgentMessage {
                    cluster: String::new(),
                    body: Some(agent_message::Body::StatusReport(StatusReport {
                        policy: Some(policy("CrossClusterScalePolicy", "bench", "web")),
                        resource_version: applied.to_string(),
                        generation: 1,
                        expected_version: expected,
                        state: accord_proto::v1::PlacementState::Synced as i32,
                        applied_revision: applied,
                        ..Default::default()
                    })),
                };
                in_flight = Some(Instant::now());
                if tx.send(report).await.is_err() {
                    return end("the stream closed (report)".into());
                }
            }
            // Cancel-safe: the stream keeps what it has read of a message.
            message = rx.message() => match message {
                Ok(Some(m)) => {
                    let a = match m.body {
                        Some(hub_message::Body::StatusAck(a)) => a,
                        Some(hub_message::Body::Assignments(assignments)) => {
                            // Apply instantly: report the topic as asked.
                            for item in assignments.items {
                                let (Some(p), Some(assignment::Spec::KafkaTopic(topic))) =
                                    (item.policy, item.spec)
                                else {
                                    continue;
                                };
                                if p.name != FANOUT_TOPIC {
                                    continue;
                                }
                                let now = Instant::now();
                                seen.update(&cluster, |s| s.received = Some((item.revision, now)));
                                let report = StatusReport {
                                    policy: Some(p),
                                    state: accord_proto::v1::PlacementState::Synced as i32,
                                    applied_revision: item.revision,
                                    observed: Some(status_report::Observed::KafkaTopic(
                                        KafkaTopicStatus {
                                            partitions: topic.partitions,
                                            replication_factor: topic.replication_factor,
                                            exists: true,
                                        },
                                    )),
                                    ..Default::default()
                                };
                                if let Some(message) = reports.offer(report)
                                    && tx.send(message).await.is_err()
                                {
                                    return end("the stream closed (report)".into());
                                }
                            }
                            continue;
                        }
                        _ => continue,
                    };
                    if a.policy.as_ref().is_some_and(|p| p.name == FANOUT_TOPIC) {
                        let (stored, next) = reports.answered(a.result);
                        if let Some(revision) = stored {
                            let now = Instant::now();
                            seen.update(&cluster, |s| s.stored = Some((revision, now)));
                        }
                        if let Some(message) = next
                            && tx.send(message).await.is_err()
                        {
                            return end("the stream closed (report)".into());
                        }
                        continue;
                    }
                    if let Some(status_ack::Result::Accepted(v) | status_ack::Result::Conflict(v)) =
                        a.result
                    {
                        expected = v;
                    }
                    if let Some(sent) = in_flight.take()
                        && measuring.load(Ordering::Relaxed)
                    {
                        latencies
                            .lock()
                            .await
                            .push(sent.elapsed().as_micros() as u64);
                        acks.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(None) => return end("the hub ended the stream".into()),
                Err(status) => return end(format!("the hub ended the stream: {status}")),
            },
        }
    }
}

/// Says which agents the hub does not count as connected (no `connected/` key in its
/// store) and why: the hub ended their stream (with the status it gave), or their stream
/// is open on the agents' side and the hub does not know it.
async fn explain_missing(store: &Store, agents: usize, ended: &Ended) -> Result<()> {
    let prefix = store.keys().connected_prefix();
    let response = store
        .client()
        .kv_client()
        .get(
            prefix.as_str(),
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_keys_only(),
            ),
        )
        .await?;
    let connected: std::collections::BTreeSet<String> = response
        .kvs()
        .iter()
        .filter_map(|kv| {
            kv.key_str()
                .ok()?
                .strip_prefix(prefix.as_str())
                .map(str::to_owned)
        })
        .collect();
    let ended: std::collections::BTreeMap<String, String> = ended
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .cloned()
        .collect();
    let mut by_reason: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for cluster in (0..agents).map(|i| format!("bench-{i:05}")) {
        if connected.contains(&cluster) {
            continue;
        }
        let reason = ended.get(&cluster).map_or(
            "open on the agent's side, unknown to the hub",
            String::as_str,
        );
        by_reason.entry(reason).or_default().push(cluster);
    }
    let missing: usize = by_reason.values().map(Vec::len).sum();
    eprintln!(
        "{missing} of {agents} agents are not connected for the hub ({} connected/ keys):",
        connected.len()
    );
    for (reason, clusters) in &by_reason {
        eprintln!(
            "  {} — {reason}: {}{}",
            clusters.len(),
            clusters
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            if clusters.len() > 10 { ", …" } else { "" }
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let testbed = Testbed::builder()
        .members(0)
        .without_mgmt_controller_manager()
        .start()
        .await?;
    let prefix = "/bench/";
    let hub = HubProcess::start(
        &testbed,
        &HubOptions {
            replica: "hub-bench".into(),
            etcd_prefix: prefix.into(),
            extra_args: if args.plain_etcd {
                vec![format!("--etcd-endpoints={}", testbed.etcd_endpoint())]
            } else {
                vec![]
            },
        },
    )
    .await?;
    let hub_pid = testbed
        .processes()
        .into_iter()
        .find(|p| p.name == "hub/hub-bench")
        .context("hub process")?
        .pid;
    let rss_idle = rss_bytes(hub_pid);

    let etcd_client = || async {
        if args.plain_etcd {
            Ok(etcd_client::Client::connect([testbed.etcd_endpoint()], None).await?)
        } else {
            testbed.hub_etcd_client().await
        }
    };
    let store = Store::from_client(etcd_client().await?, Keyspace::new(prefix));
    let ca = accord_hub::token::read_ca(testbed.mgmt().client(), HUB_NAMESPACE).await?;
    let hash = ca.ca_cert_hash();

    // Join every agent through the real token flow.
    let joined_at = Instant::now();
    let identities: Vec<_> = stream::iter(0..args.agents)
        .map(|i| {
            let store = store.clone();
            let hash = hash.clone();
            let grpc = hub.grpc.clone();
            async move {
                let token = store
                    .create_token(Duration::from_secs(600), "bench")
                    .await?;
                let cluster = format!("bench-{i:05}");
                let labels = HashMap::from([("bench".to_owned(), FANOUT_TOPIC.to_owned())]);
                agent_sim::register_labelled(
                    &grpc,
                    &token.to_string(),
                    &hash,
                    &cluster,
                    true,
                    labels,
                )
                .await
                .map_err(|s| anyhow::anyhow!("register {cluster}: {s}"))
            }
        })
        .buffer_unordered(args.concurrency)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let join_secs = joined_at.elapsed().as_secs_f64();
    eprintln!("joined {} agents in {join_secs:.1}s", args.agents);

    // Open every stream; heartbeat each second, report every report_every seconds.
    let probes = Probes::default();
    let ended = Ended::default();
    // Each agent starts heartbeating as soon as its stream is open: the hub closes a stream
    // that stays silent past the heartbeat timeout.
    let tasks: Vec<tokio::task::JoinHandle<()>> = stream::iter(identities.into_iter().enumerate())
        .map(|(i, id)| {
            let grpc = hub.grpc.clone();
            let probes = probes.clone();
            let ended = ended.clone();
            let report_every = args.report_every;
            async move {
                let channel = agent_sim::connect(&grpc, &id).await?;
                let s = AgentStream::open(channel, &id.cluster).await?;
                let offset = Duration::from_millis((i as u64 * 997) % 1000);
                Ok::<_, anyhow::Error>(tokio::spawn(run_agent(
                    s,
                    ended,
                    offset,
                    report_every,
                    probes,
                )))
            }
        })
        .buffer_unordered(args.concurrency)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let connect_secs = joined_at.elapsed().as_secs_f64() - join_secs;
    eprintln!("opened {} streams in {connect_secs:.1}s", args.agents);

    let http = testbed.http().clone();
    let counted = until(
        "every agent connected",
        Duration::from_secs(300),
        || async {
            let n = hub
                .metric(&http, "accord_hub_connected_agents")
                .await?
                .unwrap_or(0.0) as usize;
            Ok(if n >= args.agents {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{n} connected"))
            })
        },
    )
    .await;
    if let Err(e) = counted {
        eprintln!("{e:#}");
        // A fresh client: the first one's etcd auth token may have expired meanwhile.
        let store = Store::from_client(etcd_client().await?, Keyspace::new(prefix));
        explain_missing(&store, args.agents, &ended).await?;
        return Err(e);
    }
    // Measure the steady state: wait until the leader has written every cluster's
    // Available status (the connect storm) and the writes have stopped.
    let mut last = -1.0;
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let writes = hub
            .metric(&http, "accord_hub_managedcluster_status_writes_total")
            .await?
            .unwrap_or(0.0);
        if writes == last {
            break;
        }
        last = writes;
    }
    let settle_secs = joined_at.elapsed().as_secs_f64() - join_secs - connect_secs;
    let bench_cpu0 = cpu_seconds(std::process::id());

    let hb0 = hub
        .metric(&http, "accord_hub_heartbeats_total")
        .await?
        .unwrap_or(0.0);
    let rep0 = hub
        .metric(&http, "accord_hub_status_reports_total")
        .await?
        .unwrap_or(0.0);
    let cpu0 = cpu_seconds(hub_pid);
    probes.measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    probes.measuring.store(false, Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds(hub_pid) - cpu0;
    let bench_cpu = cpu_seconds(std::process::id()) - bench_cpu0;
    let hb = hub
        .metric(&http, "accord_hub_heartbeats_total")
        .await?
        .unwrap_or(0.0)
        - hb0;
    let rep = hub
        .metric(&http, "accord_hub_status_reports_total")
        .await?
        .unwrap_or(0.0)
        - rep0;
    let rss = rss_bytes(hub_pid);
    let mut lat = probes.latencies.lock().await.clone();
    lat.sort_unstable();

    println!("agents                    {}", args.agents);
    println!(
        "join (token+CSR+register) {:.1} s ({:.0}/s)",
        join_secs,
        args.agents as f64 / join_secs
    );
    println!(
        "hub RSS                   {:.1} MiB (idle {:.1} MiB, {:.1} KiB per agent)",
        rss as f64 / 1048576.0,
        rss_idle as f64 / 1048576.0,
        (rss.saturating_sub(rss_idle)) as f64 / 1024.0 / args.agents as f64
    );
    println!(
        "hub CPU                   {:.1} s over {:.0} s ({:.0}% of one core)",
        cpu,
        secs,
        100.0 * cpu / secs
    );
    println!("status storm settled in   {settle_secs:.1} s (every ManagedCluster Available)");
    println!(
        "agents' CPU (this process) {:.1} s ({:.0}% of one core)",
        bench_cpu,
        100.0 * bench_cpu / secs
    );
    println!("heartbeats/s              {:.0}", hb / secs);
    println!("status reports/s          {:.0}", rep / secs);
    println!(
        "report→ack latency        p50 {:?}  p99 {:?}  max {:?}  (n = {})",
        percentile(&lat, 0.50),
        percentile(&lat, 0.99),
        percentile(&lat, 1.0),
        lat.len()
    );
    if args.fanout {
        fanout(&testbed, hub_pid, args.agents, &probes.seen).await?;
    }
    for t in tasks {
        t.abort();
    }
    Ok(())
}

/// Places one FederatedKafkaTopic in every agent, then edits it, timing each change.
async fn fanout(testbed: &Testbed, hub_pid: u32, agents: usize, seen: &Seen) -> Result<()> {
    accord_e2e::fleet::ensure_namespace(testbed.mgmt(), BENCH_NAMESPACE).await?;
    let api: Api<FederatedKafkaTopic> = Api::namespaced(testbed.mgmt().client(), BENCH_NAMESPACE);
    let topic: FederatedKafkaTopic = serde_json::from_value(serde_json::json!({
        "apiVersion": "accord.io/v1alpha1", "kind": "FederatedKafkaTopic",
        "metadata": {"name": FANOUT_TOPIC, "namespace": BENCH_NAMESPACE},
        "spec": {
            "partitions": 1, "replicationFactor": 1,
            "clusterSelector": {"matchLabels": {"bench": FANOUT_TOPIC}},
        },
    }))?;
    for change in ["create", "edit"] {
        let before = seen.snapshot();
        let cpu0 = cpu_seconds(hub_pid);
        let generation = if change == "create" {
            api.create(&PostParams::default(), &topic).await?
        } else {
            api.patch(
                FANOUT_TOPIC,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"partitions": 2}})),
            )
            .await?
        }
        .metadata
        .generation;
        let accepted = Instant::now();
        let newer = |now: &HashMap<String, AgentSeen>, stored: bool| -> Vec<Duration> {
            now.iter()
                .filter_map(|(cluster, s)| {
                    let pick = |s: &AgentSeen| if stored { s.stored } else { s.received };
                    let (revision, at) = pick(s)?;
                    let old = before.get(cluster).and_then(pick).map_or(0, |(r, _)| r);
                    (revision > old).then(|| at.saturating_duration_since(accepted))
                })
                .collect()
        };
        let every = |stored: bool, what: &'static str| {
            let newer = &newer;
            until(what, Duration::from_secs(300), move || async move {
                let got = newer(&seen.snapshot(), stored);
                Ok(if got.len() >= agents {
                    Check::Ready(got)
                } else {
                    Check::NotYet(format!("{} of {agents}", got.len()))
                })
            })
        };
        let received = every(false, "every agent received the change").await?;
        let stored = every(true, "every agent's report stored").await?;
        let ready = until("the status Ready", Duration::from_secs(300), || async {
            let t = api.get(FANOUT_TOPIC).await?;
            let status = t.status.clone().unwrap_or_default();
            let ready = status.observed_generation == generation
                && accord_crds::conditions::is_true(&status.conditions, "Ready");
            Ok(if ready {
                Check::Ready((accepted.elapsed(), serde_json::to_vec(&status)?.len()))
            } else {
                Check::NotYet(format!("{:?}", status.summary))
            })
        })
        .await?;
        let cpu = cpu_seconds(hub_pid) - cpu0;
        let spread = |mut d: Vec<Duration>| {
            d.sort_unstable();
            let micros: Vec<u64> = d.iter().map(|d| d.as_micros() as u64).collect();
            format!(
                "p50 {:?}  p99 {:?}  max {:?}",
                percentile(&micros, 0.50),
                percentile(&micros, 0.99),
                percentile(&micros, 1.0)
            )
        };
        println!(
            "fan-out {change}: assignment received  {}",
            spread(received)
        );
        println!("fan-out {change}: report stored        {}", spread(stored));
        println!(
            "fan-out {change}: status Ready after   {:?} ({} bytes of status), hub CPU {cpu:.1} s, hub RSS {:.1} MiB",
            ready.0,
            ready.1,
            rss_bytes(hub_pid) as f64 / 1048576.0
        );
    }
    Ok(())
}
