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
//! object's status said `Ready`, and the status's size. With `--kill-etcd-leader` (and
//! `--etcd-members 3`) the hub's etcd leader is SIGKILLed just after the edit is accepted,
//! and every agent must still end with the edit.
//!
//! With `--replicas 2` the agents are spread over two hub replicas (agent i on replica
//! i mod 2, as a Service would spread them), and RSS is printed per replica. With
//! `--kill-replica leader` (or `follower`) that replica is then SIGKILLed: its agents
//! reconnect to the others (after a jittered delay, as a real agent does), and the
//! benchmark prints how long until every one was counted there, how many ManagedClusters
//! stopped being `Available` meanwhile (the goal is none), and whether every agent got the
//! fan-out topic's last assignment on its new stream.
//!
//! ```text
//! cargo run --release -p accord-e2e --bin hub-bench -- --agents 1000 --duration 30 [--fanout]
//!     [--replicas 2 [--kill-replica leader|follower]] [--etcd-members 3 [--kill-etcd-leader]]
//!     [--progressive STEPS [--rollback-clusters N]]
//! ```

use accord_crds::{FederatedKafkaTopic, ManagedCluster};
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
use clap::builder::RangedU64ValueParser;
use clap::error::ErrorKind;
use clap::{CommandFactory as _, Parser, ValueEnum};
use futures::{StreamExt, stream};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// Hub scale benchmark: N simulated agents (one process, N real mTLS streams) against one real
/// `accord-hub serve`, real etcd and a real management kube-apiserver. Prints hub RSS and CPU,
/// heartbeats/s, status reports/s and report-to-ack latency; optionally times a fan-out to
/// every agent and the loss of a hub replica or of the hub's etcd leader.
#[derive(Debug, Parser)]
#[command(name = "hub-bench", args_override_self = true)]
struct Args {
    /// Simulated agents, each joining through the real token flow.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    agents: usize,
    /// Seconds the steady state (heartbeats and status reports) is measured for.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    duration: u64,
    /// Seconds between each agent's status reports.
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    report_every: u64,
    /// Agents joining, or opening their streams, at once.
    #[arg(long, value_name = "N", default_value_t = 32)]
    concurrency: usize,
    /// Keep the hub's state in the API servers' plain etcd instead of the hub's own
    /// (TLS, client certificates, authentication).
    #[arg(long)]
    plain_etcd: bool,
    /// After the steady state, place one FederatedKafkaTopic in every agent and time it.
    #[arg(long)]
    fanout: bool,
    /// Hub replicas the agents are spread over.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..)
    )]
    replicas: usize,
    /// SIGKILL a replica at the end (the leader, or the last follower) and watch its agents
    /// move.
    #[arg(long, value_enum, value_name = "WHICH")]
    kill_replica: Option<Victim>,
    /// Members of the hub's etcd.
    #[arg(long, value_name = "N", default_value_t = 1)]
    etcd_members: usize,
    /// SIGKILL the hub's etcd leader just after the fan-out edit is accepted.
    #[arg(long)]
    kill_etcd_leader: bool,
    /// After the fan-out, roll a config change out to every agent in this many steps
    /// (`spec.rollout` Progressive, no soak), then a change every agent fails on to the
    /// first `--rollback-clusters`, which the hub takes back at a 2 s deadline.
    #[arg(long, value_name = "STEPS")]
    progressive: Option<usize>,
    /// Clusters the failing change reaches before it is taken back (with --progressive).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    rollback_clusters: usize,
}

impl Args {
    /// Parses the command line; flags that do not fit together end the process with a usage
    /// error, as a bad flag does.
    fn parse_checked() -> Self {
        let args = Self::parse();
        if let Err(message) = args.check() {
            Self::command()
                .error(ErrorKind::ArgumentConflict, message)
                .exit();
        }
        args
    }

    /// What one flag alone cannot check: the flags that need others.
    fn check(&self) -> Result<(), &'static str> {
        if self.kill_replica.is_some() && self.replicas < 2 {
            return Err(
                "--kill-replica needs --replicas 2 or more (its agents need somewhere to go)",
            );
        }
        if self.kill_etcd_leader && !(self.fanout && self.etcd_members >= 3) {
            return Err(
                "--kill-etcd-leader needs --fanout and --etcd-members 3 or more (a quorum must \
                 survive)",
            );
        }
        if self.progressive.is_some() && !self.fanout {
            return Err("--progressive needs --fanout (it rolls the fan-out topic out)");
        }
        if self.progressive == Some(0) {
            return Err("--progressive needs at least one step");
        }
        if self.plain_etcd && self.etcd_members > 1 {
            return Err(
                "--plain-etcd uses the API servers' single etcd; it excludes --etcd-members",
            );
        }
        Ok(())
    }
}

/// Which replica `--kill-replica` kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Victim {
    /// The replica that leads.
    Leader,
    /// The last replica that does not lead.
    Follower,
}

/// Name (and namespace) of the fan-out topic object.
const FANOUT_TOPIC: &str = "fanout";
/// A config key the simulated agents cannot keep: they report the topic `Error`.
const BENCH_FAIL: &str = "bench.fail";
const BENCH_NAMESPACE: &str = "bench";

/// The fan-out topic as each agent saw it: the revision of the last assignment received
/// and of the last report the hub stored, with when.
#[derive(Default)]
struct Seen {
    by_agent: std::sync::Mutex<HashMap<String, AgentSeen>>,
}

#[derive(Default, Clone)]
struct AgentSeen {
    received: Option<(i64, Instant)>,
    stored: Option<(i64, Instant)>,
    /// Streams this agent has opened.
    streams: u32,
    /// The stream (by [`AgentSeen::streams`]) and revision of the last fan-out assignment
    /// received, however often.
    latest: Option<(u32, i64)>,
    /// Each change of the fan-out topic's `retention.ms` this agent received, with the
    /// record revision it came in and when.
    retention: Vec<(String, i64, Instant)>,
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

    /// After a reconnect: the report whose ack the old stream lost, sent again.
    fn reconnected(&mut self) -> Option<AgentMessage> {
        self.in_flight.take()?;
        let last = self.last.take()?;
        Some(self.send(last))
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

    fn snapshot_of(&self, cluster: &str) -> Option<AgentSeen> {
        self.by_agent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(cluster)
            .cloned()
    }

    fn snapshot(&self) -> HashMap<String, AgentSeen> {
        self.by_agent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

fn percentile(sorted: &[u64], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    Duration::from_micros(sorted[i])
}

/// What the agents record for the measurements: report→ack latencies and acks while
/// `measuring`, what each saw of the fan-out topic, and their reconnects.
#[derive(Clone, Default)]
struct Probes {
    latencies: Arc<Mutex<Vec<u64>>>,
    acks: Arc<AtomicU64>,
    measuring: Arc<std::sync::atomic::AtomicBool>,
    seen: Arc<Seen>,
    reconnects: Arc<AtomicU64>,
    /// Streams down on the agents' side now, with why (cluster → reason).
    down: Down,
}

/// Streams down on the agents' side, with why (cluster → reason).
type Down = Arc<std::sync::Mutex<HashMap<String, String>>>;

/// An agent's state across its streams, as a real agent keeps it across reconnects.
#[derive(Default)]
struct AgentState {
    /// Heartbeats sent.
    ticks: u64,
    /// The version of the bench report the hub stored last.
    expected: i64,
    /// Revision of the last bench report.
    applied: i64,
    /// When the bench report awaiting its ack was sent: one at a time, as a real agent
    /// has one report per policy in flight.
    in_flight: Option<Instant>,
    reports: TopicReports,
}

/// One simulated agent: a heartbeat every second and a status report every `report_every`
/// heartbeats, timing each report until its ack; the fan-out topic applied at once and
/// reported. When its stream ends it reconnects after 100 ms plus up to a second of
/// jitter, to the next replica in `replicas` (as a Service would send it to a live one),
/// backing off to 5 s between failed attempts, and carries on with the same state.
async fn run_agent(
    id: agent_sim::AgentIdentity,
    first: AgentStream,
    replicas: Arc<Vec<String>>,
    mut replica: usize,
    offset: Duration,
    report_every: u64,
    probes: Probes,
) {
    let cluster = id.cluster.clone();
    let mut state = AgentState::default();
    let mut stream = Some(first);
    tokio::time::sleep(offset).await;
    loop {
        let s = match stream.take() {
            Some(s) => s,
            None => {
                let mut delay = Duration::from_millis(100 + rand::random_range(0..1000));
                loop {
                    tokio::time::sleep(delay).await;
                    replica = (replica + 1) % replicas.len();
                    let opened = async {
                        let channel = agent_sim::connect(&replicas[replica], &id).await?;
                        Ok::<_, anyhow::Error>(AgentStream::open(channel, &cluster).await?)
                    };
                    match opened.await {
                        Ok(s) => break s,
                        Err(e) => {
                            probes.set_down(&cluster, format!("reconnecting: {e:#}"));
                            delay = (delay * 2).min(Duration::from_secs(5));
                        }
                    }
                }
            }
        };
        probes.seen.update(&cluster, |s| s.streams += 1);
        let why = session(&cluster, s, &mut state, report_every, &probes).await;
        probes.reconnects.fetch_add(1, Ordering::Relaxed);
        probes.set_down(&cluster, why);
    }
}

impl Probes {
    fn set_down(&self, cluster: &str, why: String) {
        self.down
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(cluster.to_owned(), why);
    }
}

/// One stream of an agent, until it ends (returns why).
async fn session(
    cluster: &str,
    s: AgentStream,
    state: &mut AgentState,
    report_every: u64,
    probes: &Probes,
) -> String {
    probes
        .down
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(cluster);
    let (tx, mut rx) = s.split();
    let stream_no = probes.seen.snapshot_of(cluster).map_or(0, |s| s.streams);
    // The bench report awaiting its ack on the old stream is lost with it; the topic's
    // report in flight is sent again.
    state.in_flight = None;
    if let Some(message) = state.reports.reconnected()
        && tx.send(message).await.is_err()
    {
        return "the stream closed (report)".into();
    }
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    // Heartbeats go on while a report awaits its ack, as a real agent's do (its ticker is
    // apart from its reports): a hub slow to store a report must not make the agent look
    // silent.
    loop {
        tokio::select! {
            _ = tick.tick() => {
                state.ticks += 1;
                let hb = AgentMessage {
                    cluster: String::new(),
                    body: Some(agent_message::Body::Heartbeat(Heartbeat::default())),
                };
                if tx.send(hb).await.is_err() {
                    return "the stream closed (heartbeat)".into();
                }
                if !state.ticks.is_multiple_of(report_every) || state.in_flight.is_some() {
                    continue;
                }
                state.applied += 1;
                let report = AgentMessage {
                    cluster: String::new(),
                    body: Some(agent_message::Body::StatusReport(StatusReport {
                        placed: Some(policy("CrossClusterScalePolicy", "bench", "web")),
                        resource_version: state.applied.to_string(),
                        generation: 1,
                        expected_version: state.expected,
                        state: accord_proto::v1::PlacementState::Synced as i32,
                        applied_revision: state.applied,
                        ..Default::default()
                    })),
                };
                state.in_flight = Some(Instant::now());
                if tx.send(report).await.is_err() {
                    return "the stream closed (report)".into();
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
                                    (item.placed, item.spec)
                                else {
                                    continue;
                                };
                                if p.name != FANOUT_TOPIC {
                                    continue;
                                }
                                let now = Instant::now();
                                let retention =
                                    topic.config.get("retention.ms").cloned().unwrap_or_default();
                                probes.seen.update(cluster, |s| {
                                    if s.received.is_none_or(|(r, _)| item.revision > r) {
                                        s.received = Some((item.revision, now));
                                    }
                                    s.latest = Some((stream_no, item.revision));
                                    if s.retention.last().map(|(r, _, _)| r) != Some(&retention) {
                                        s.retention.push((retention, item.revision, now));
                                    }
                                });
                                // `bench.fail` in the config: the topic cannot be kept.
                                let kept = if topic.config.contains_key(BENCH_FAIL) {
                                    accord_proto::v1::PlacementState::Error
                                } else {
                                    accord_proto::v1::PlacementState::Synced
                                };
                                let report = StatusReport {
                                    placed: Some(p),
                                    state: kept as i32,
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
                                if let Some(message) = state.reports.offer(report)
                                    && tx.send(message).await.is_err()
                                {
                                    return "the stream closed (report)".into();
                                }
                            }
                            continue;
                        }
                        _ => continue,
                    };
                    if a.placed.as_ref().is_some_and(|p| p.name == FANOUT_TOPIC) {
                        let (stored, next) = state.reports.answered(a.result);
                        if let Some(revision) = stored {
                            let now = Instant::now();
                            probes.seen.update(cluster, |s| s.stored = Some((revision, now)));
                        }
                        if let Some(message) = next
                            && tx.send(message).await.is_err()
                        {
                            return "the stream closed (report)".into();
                        }
                        continue;
                    }
                    if let Some(status_ack::Result::Accepted(v) | status_ack::Result::Conflict(v)) =
                        a.result
                    {
                        state.expected = v;
                    }
                    if let Some(sent) = state.in_flight.take()
                        && probes.measuring.load(Ordering::Relaxed)
                    {
                        probes
                            .latencies
                            .lock()
                            .await
                            .push(sent.elapsed().as_micros() as u64);
                        probes.acks.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(None) => return "the hub ended the stream".into(),
                Err(status) => return format!("the hub ended the stream: {status}"),
            },
        }
    }
}

/// Says which agents the hub does not count as connected (no `connected/` key in its
/// store) and why: the hub ended their stream (with the status it gave), or their stream
/// is open on the agents' side and the hub does not know it.
async fn explain_missing(store: &Store, agents: usize, down: &Down) -> Result<()> {
    let prefix = store.keys().connected_prefix();
    let (listed, _) = store.list_prefix(&prefix, true).await?;
    let connected: std::collections::BTreeSet<String> = listed
        .iter()
        .filter_map(|kv| {
            std::str::from_utf8(kv.key())
                .ok()?
                .strip_prefix(prefix.as_str())
                .map(str::to_owned)
        })
        .collect();
    let ended = down
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
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

/// The hub replicas under test, with their processes.
struct Hubs<'t> {
    hubs: Vec<HubProcess<'t>>,
    pids: Vec<u32>,
    http: reqwest::Client,
}

impl Hubs<'_> {
    /// The sum of metric `name` over the replicas in `which`.
    async fn sum(&self, which: &[usize], name: &str) -> Result<f64> {
        let mut total = 0.0;
        for &i in which {
            total += self.hubs[i].metric(&self.http, name).await?.unwrap_or(0.0);
        }
        Ok(total)
    }

    fn all(&self) -> Vec<usize> {
        (0..self.hubs.len()).collect()
    }

    /// The replica leading now.
    async fn leader(&self) -> Result<usize> {
        for i in self.all() {
            if self.sum(&[i], "accord_hub_is_leader").await? == 1.0 {
                return Ok(i);
            }
        }
        anyhow::bail!("no replica leads")
    }

    /// Waits until the replicas in `which` have written no ManagedCluster status for 3 s
    /// (a connect storm, or a new leader's round over the fleet, has settled).
    async fn until_status_writes_stop(&self, which: &[usize]) -> Result<()> {
        let mut last = -1.0;
        loop {
            tokio::time::sleep(Duration::from_secs(3)).await;
            let writes = self
                .sum(which, "accord_hub_managedcluster_status_writes_total")
                .await?;
            if writes == last {
                return Ok(());
            }
            last = writes;
        }
    }

    fn cpu(&self) -> f64 {
        self.pids.iter().map(|&p| cpu_seconds(p)).sum()
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse_checked();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let testbed = Testbed::builder()
        .members(0)
        .without_mgmt_controller_manager()
        .etcd_members(args.etcd_members)
        .start()
        .await?;
    let prefix = "/bench/";
    // Started one after the other, so the first leads.
    let mut hubs = Vec::new();
    for r in 0..args.replicas {
        let replica = if args.replicas == 1 {
            "hub-bench".to_owned()
        } else {
            format!("hub-bench-{r}")
        };
        hubs.push(
            HubProcess::start(
                &testbed,
                &HubOptions {
                    replica,
                    etcd_prefix: prefix.into(),
                    extra_args: if args.plain_etcd {
                        vec![format!("--etcd-endpoints={}", testbed.etcd_endpoint())]
                    } else {
                        vec![]
                    },
                },
            )
            .await?,
        );
    }
    let pids: Vec<u32> = hubs
        .iter()
        .map(|h| testbed.process_info(h.id).pid)
        .collect();
    let rss_idle: Vec<u64> = pids.iter().map(|&p| rss_bytes(p)).collect();
    let hubs = Hubs {
        hubs,
        pids,
        http: testbed.http().clone(),
    };
    let replicas: Arc<Vec<String>> = Arc::new(hubs.hubs.iter().map(|h| h.grpc.clone()).collect());

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

    // Join every agent through the real token flow, spread over the replicas.
    let joined_at = Instant::now();
    let identities: Vec<_> = stream::iter(0..args.agents)
        .map(|i| {
            let store = store.clone();
            let hash = hash.clone();
            let grpc = replicas[i % replicas.len()].clone();
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
    // Each agent starts heartbeating as soon as its stream is open: the hub closes a stream
    // that stays silent past the heartbeat timeout.
    let tasks: Vec<tokio::task::JoinHandle<()>> = stream::iter(identities.into_iter().enumerate())
        .map(|(i, id)| {
            let replicas = replicas.clone();
            let probes = probes.clone();
            let report_every = args.report_every;
            async move {
                let replica = i % replicas.len();
                let channel = agent_sim::connect(&replicas[replica], &id).await?;
                let s = AgentStream::open(channel, &id.cluster).await?;
                let offset = Duration::from_millis((i as u64 * 997) % 1000);
                Ok::<_, anyhow::Error>(tokio::spawn(run_agent(
                    id,
                    s,
                    replicas,
                    replica,
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

    let every_counted = |which: Vec<usize>| {
        let hubs = &hubs;
        until(
            "every agent connected",
            Duration::from_secs(300),
            move || {
                let which = which.clone();
                async move {
                    // A replica busy with a reconnect storm may answer late: not yet.
                    let n = match hubs.sum(&which, "accord_hub_connected_agents").await {
                        Ok(n) => n as usize,
                        Err(e) => return Ok(Check::NotYet(format!("{e:#}"))),
                    };
                    Ok(if n >= args.agents {
                        Check::Ready(())
                    } else {
                        Check::NotYet(format!("{n} connected"))
                    })
                }
            },
        )
    };
    if let Err(e) = every_counted(hubs.all()).await {
        eprintln!("{e:#}");
        // A fresh client: the first one's etcd auth token may have expired meanwhile.
        let store = Store::from_client(etcd_client().await?, Keyspace::new(prefix));
        explain_missing(&store, args.agents, &probes.down).await?;
        return Err(e);
    }
    // Measure the steady state: wait until the leader has written every cluster's
    // Available status (the connect storm) and the writes have stopped.
    hubs.until_status_writes_stop(&hubs.all()).await?;
    let settle_secs = joined_at.elapsed().as_secs_f64() - join_secs - connect_secs;
    let bench_cpu0 = cpu_seconds(std::process::id());

    let hb0 = hubs.sum(&hubs.all(), "accord_hub_heartbeats_total").await?;
    let rep0 = hubs
        .sum(&hubs.all(), "accord_hub_status_reports_total")
        .await?;
    let cpu0 = hubs.cpu();
    probes.measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    probes.measuring.store(false, Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64();
    let cpu = hubs.cpu() - cpu0;
    let bench_cpu = cpu_seconds(std::process::id()) - bench_cpu0;
    let hb = hubs.sum(&hubs.all(), "accord_hub_heartbeats_total").await? - hb0;
    let rep = hubs
        .sum(&hubs.all(), "accord_hub_status_reports_total")
        .await?
        - rep0;
    let mut lat = probes.latencies.lock().await.clone();
    lat.sort_unstable();

    println!("agents                    {}", args.agents);
    println!("hub replicas              {}", args.replicas);
    println!("hub etcd members          {}", args.etcd_members);
    println!(
        "join (token+CSR+register) {:.1} s ({:.0}/s)",
        join_secs,
        args.agents as f64 / join_secs
    );
    for (i, hub) in hubs.hubs.iter().enumerate() {
        let rss = rss_bytes(hubs.pids[i]);
        let held = hubs.sum(&[i], "accord_hub_connected_agents").await? as usize;
        println!(
            "hub RSS {:<17} {:.1} MiB (idle {:.1} MiB, {:.1} KiB per agent over {held} agents)",
            hub.replica,
            rss as f64 / 1048576.0,
            rss_idle[i] as f64 / 1048576.0,
            (rss.saturating_sub(rss_idle[i])) as f64 / 1024.0 / held.max(1) as f64
        );
    }
    println!(
        "hub CPU                   {:.1} s over {:.0} s ({:.0}% of one core, all replicas)",
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
        fanout(
            &testbed,
            &hubs,
            args.agents,
            &probes.seen,
            args.kill_etcd_leader,
        )
        .await?;
    }
    if let Some(steps) = args.progressive {
        let key = store
            .keys()
            .placements("FederatedKafkaTopic", BENCH_NAMESPACE, FANOUT_TOPIC);
        progressive(
            &testbed,
            &hubs,
            (etcd_client().await?, key),
            args.agents,
            &probes.seen,
            steps,
            args.rollback_clusters.min(args.agents),
        )
        .await?;
    }
    if let Some(victim) = args.kill_replica {
        kill_replica(
            &testbed,
            &hubs,
            victim,
            args.agents,
            &probes,
            &every_counted,
        )
        .await?;
    }
    for t in tasks {
        t.abort();
    }
    Ok(())
}

/// SIGKILLs the leader or the last follower and follows its agents to the others: how
/// long until every agent was counted again, how many ManagedClusters stopped being
/// `Available` meanwhile, and whether each moved agent got the fan-out topic's last
/// assignment on its new stream.
async fn kill_replica<F, Fut>(
    testbed: &Testbed,
    hubs: &Hubs<'_>,
    which: Victim,
    agents: usize,
    probes: &Probes,
    every_counted: &F,
) -> Result<()>
where
    F: Fn(Vec<usize>) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let leader = hubs.leader().await?;
    let victim = match which {
        Victim::Leader => leader,
        Victim::Follower => (0..hubs.hubs.len())
            .rev()
            .find(|&i| i != leader)
            .context("no follower")?,
    };
    let survivors: Vec<usize> = (0..hubs.hubs.len()).filter(|&i| i != victim).collect();
    let held = hubs.sum(&[victim], "accord_hub_connected_agents").await? as usize;
    let before = probes.seen.snapshot();
    let reconnects0 = probes.reconnects.load(Ordering::Relaxed);

    // Every ManagedCluster that is not Available from the kill on.
    let clusters: Api<ManagedCluster> = Api::all(testbed.mgmt().client());
    let unavailable = Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let watch = {
        let unavailable = unavailable.clone();
        let mut events = watcher(clusters, watcher::Config::default())
            .applied_objects()
            .boxed();
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                let Ok(mc) = event else { continue };
                let available = mc
                    .status
                    .as_ref()
                    .is_some_and(|s| accord_crds::conditions::is_true(&s.conditions, "Available"));
                if !available {
                    unavailable
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(mc.metadata.name.unwrap_or_default());
                }
            }
        })
    };
    // Let the watch list every object first: what is unavailable before the kill counts too.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let killed = Instant::now();
    accord_e2e::fleet::kill9(testbed, hubs.hubs[victim].id)?;
    every_counted(survivors.clone()).await?;
    let moved_secs = killed.elapsed().as_secs_f64();
    // The dead replica's presence leases must run out (15 s), a killed leader must have
    // been replaced (its election lease, 15 s) and the new leader must have looked at every
    // cluster; then any cluster counted as lost would show.
    let presence_ttl = Duration::from_secs(15);
    tokio::time::sleep((presence_ttl + Duration::from_secs(10)).saturating_sub(killed.elapsed()))
        .await;
    let new_leader = until("a leader", Duration::from_secs(60), || async {
        for &i in &survivors {
            if hubs.sum(&[i], "accord_hub_is_leader").await.ok() == Some(1.0) {
                return Ok(Check::Ready(i));
            }
        }
        Ok(Check::NotYet("no survivor leads".into()))
    })
    .await?;
    if victim == leader {
        // The new leader writes every ManagedCluster whose status names the dead replica;
        // wait until those writes stop.
        hubs.until_status_writes_stop(&[new_leader]).await?;
    }
    let now = probes.seen.snapshot();
    let last_revision = now
        .values()
        .filter_map(|s| s.latest.map(|(_, r)| r))
        .max()
        .unwrap_or(0);
    let moved: Vec<&String> = now
        .iter()
        .filter(|(c, s)| before.get(*c).is_some_and(|b| s.streams > b.streams))
        .map(|(c, _)| c)
        .collect();
    let resynced = moved
        .iter()
        .filter(|c| {
            now[**c]
                .latest
                .is_some_and(|(stream, r)| stream == now[**c].streams && r == last_revision)
        })
        .count();
    watch.abort();
    let unavailable = unavailable
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    println!(
        "replica killed             {} (SIGKILL; {} led, {} leads now), holding {held} agents",
        hubs.hubs[victim].replica, hubs.hubs[leader].replica, hubs.hubs[new_leader].replica
    );
    println!(
        "every agent counted again  after {moved_secs:.1} s ({} reconnects, {} agents moved)",
        probes.reconnects.load(Ordering::Relaxed) - reconnects0,
        moved.len()
    );
    println!(
        "clusters not Available     {} of {agents}{}",
        unavailable.len(),
        if unavailable.is_empty() {
            String::new()
        } else {
            format!(
                " (e.g. {})",
                unavailable
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    if last_revision > 0 {
        println!(
            "moved agents resynced      {resynced} of {} got the fan-out topic's last assignment (revision {last_revision}) on their new stream",
            moved.len()
        );
    }
    for i in survivors {
        let rss = rss_bytes(hubs.pids[i]);
        let held = hubs.sum(&[i], "accord_hub_connected_agents").await? as usize;
        println!(
            "hub RSS {:<17} {:.1} MiB with {held} agents ({:.1} KiB per agent)",
            hubs.hubs[i].replica,
            rss as f64 / 1048576.0,
            rss as f64 / 1024.0 / held.max(1) as f64
        );
    }
    anyhow::ensure!(
        unavailable.is_empty(),
        "{} clusters stopped being Available when a replica died",
        unavailable.len()
    );
    anyhow::ensure!(
        last_revision == 0 || resynced == moved.len(),
        "{} moved agents did not get the last assignment",
        moved.len() - resynced
    );
    Ok(())
}

/// Places one FederatedKafkaTopic in every agent, then edits it, timing each change. With
/// `kill_etcd_leader`, the hub's etcd leader is SIGKILLed as soon as the edit is accepted.
async fn fanout(
    testbed: &Testbed,
    hubs: &Hubs<'_>,
    agents: usize,
    seen: &Seen,
    kill_etcd_leader: bool,
) -> Result<()> {
    accord_e2e::fleet::ensure_namespace(testbed.mgmt(), BENCH_NAMESPACE).await?;
    let api: Api<FederatedKafkaTopic> = Api::namespaced(testbed.mgmt().client(), BENCH_NAMESPACE);
    let topic: FederatedKafkaTopic = serde_json::from_value(serde_json::json!({
        "apiVersion": "accord.io/v1beta1", "kind": "FederatedKafkaTopic",
        "metadata": {"name": FANOUT_TOPIC, "namespace": BENCH_NAMESPACE},
        "spec": {
            "partitions": 1, "replicationFactor": 1,
            "placement": {"clusterSelector": {"matchLabels": {"bench": FANOUT_TOPIC}}},
        },
    }))?;
    for change in ["create", "edit"] {
        // The steady state's own CPU rate (heartbeats, periodic reports), so that what the
        // change costs can be told apart from what the fleet costs meanwhile.
        let steady = Duration::from_secs(3);
        let (idle0, idle_at) = (hubs.cpu(), Instant::now());
        tokio::time::sleep(steady).await;
        let steady_rate = (hubs.cpu() - idle0) / idle_at.elapsed().as_secs_f64();
        let before = seen.snapshot();
        let reconciles0 = hubs.sum(&hubs.all(), "accord_hub_reconciles_total").await?;
        let cpu0 = hubs.cpu();
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
        if kill_etcd_leader && change == "edit" {
            let etcd = testbed.hub_etcd();
            let leader = etcd.leader().await?;
            accord_e2e::fleet::kill9(testbed, etcd.members[leader].process)?;
            println!(
                "fan-out {change}: etcd leader {} SIGKILLed {:?} after the edit was accepted",
                etcd.members[leader].name,
                accepted.elapsed()
            );
        }
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
        let (cpu, window) = (hubs.cpu() - cpu0, accepted.elapsed());
        let beyond = cpu - steady_rate * window.as_secs_f64();
        let reconciles = hubs.sum(&hubs.all(), "accord_hub_reconciles_total").await? - reconciles0;
        let spread = |d: Vec<Duration>| spread(d.iter().map(|d| d.as_micros() as u64).collect());
        println!(
            "fan-out {change}: assignment received  {}",
            spread(received)
        );
        println!("fan-out {change}: report stored        {}", spread(stored));
        println!(
            "fan-out {change}: status Ready after   {:?} ({} bytes of status), hub CPU {cpu:.2} s ({beyond:.2} s beyond the steady state's {:.0} % of a core), {reconciles} reconciles, hub RSS {:.1} MiB",
            ready.0,
            ready.1,
            steady_rate * 100.0,
            hubs.pids.iter().map(|&p| rss_bytes(p)).sum::<u64>() as f64 / 1048576.0
        );
    }
    Ok(())
}

/// When each agent last came to `retention.ms` = `value`, and in which record revision,
/// from `seen`.
fn received_value(
    seen: &HashMap<String, AgentSeen>,
    value: &str,
) -> HashMap<String, (i64, Instant)> {
    seen.iter()
        .filter_map(|(c, s)| {
            s.retention
                .iter()
                .rev()
                .find(|(v, _, _)| v == value)
                .map(|(_, revision, at)| (c.clone(), (*revision, *at)))
        })
        .collect()
}

/// `decidedUnixMillis` of the placements record at `key` as etcd revision `revision` held it.
async fn decided_unix_millis(
    etcd: &mut etcd_client::Client,
    key: &str,
    revision: i64,
) -> Result<i64> {
    let response = etcd
        .get(
            key,
            Some(etcd_client::GetOptions::new().with_revision(revision)),
        )
        .await?;
    let value = response
        .kvs()
        .first()
        .with_context(|| format!("no record at {key} at revision {revision}"))?
        .value();
    Ok(accord_e2e::placement_record::decode(value)?.decided_unix_millis)
}

/// Waits until `count` agents got `retention.ms` = `value`; when each got it.
async fn until_received(
    seen: &Seen,
    value: &str,
    count: usize,
) -> Result<HashMap<String, (i64, Instant)>> {
    until(
        &format!("{count} agents with retention.ms {value}"),
        Duration::from_secs(600),
        || async {
            let got = received_value(&seen.snapshot(), value);
            Ok(if got.len() >= count {
                Check::Ready(got)
            } else {
                Check::NotYet(format!("{} of {count}", got.len()))
            })
        },
    )
    .await
}

/// "p50 …  p99 …  max …" of `micros`.
fn spread(mut micros: Vec<u64>) -> String {
    micros.sort_unstable();
    format!(
        "p50 {:?}  p99 {:?}  max {:?}",
        percentile(&micros, 0.50),
        percentile(&micros, 0.99),
        percentile(&micros, 1.0)
    )
}

/// `--progressive`: a config change rolled out to every agent in `steps` steps without a
/// soak, each step (the agents sent the value in one record write) timed from its first
/// agent receiving it to its last; then a change the agents fail on, sent to the first
/// `rollback` clusters and taken back at its deadline.
async fn progressive(
    testbed: &Testbed,
    hubs: &Hubs<'_>,
    (mut etcd, key): (etcd_client::Client, String),
    agents: usize,
    seen: &Seen,
    steps: usize,
    rollback: usize,
) -> Result<()> {
    let api: Api<FederatedKafkaTopic> = Api::namespaced(testbed.mgmt().client(), BENCH_NAMESPACE);
    let patch = |body: serde_json::Value| {
        let api = api.clone();
        async move {
            api.patch(FANOUT_TOPIC, &PatchParams::default(), &Patch::Merge(body))
                .await
        }
    };
    let phase = |want: &'static str| {
        let api = api.clone();
        async move {
            until(
                &format!("the rollout {want}"),
                Duration::from_secs(600),
                || async {
                    let t = api.get(FANOUT_TOPIC).await?;
                    let rollout = t.status.and_then(|s| s.rollout);
                    Ok(match rollout {
                        Some(r) if r.phase == want => Check::Ready(r),
                        other => Check::NotYet(format!("{other:?}")),
                    })
                },
            )
            .await
        }
    };
    // A first value everywhere at once (no rollout yet): the rollback target.
    patch(serde_json::json!({"spec": {"config": {"retention.ms": "1000"}}})).await?;
    until_received(seen, "1000", agents).await?;

    let per_step = agents.div_ceil(steps);
    let all = hubs.all();
    let writes = || hubs.sum(&all, "accord_hub_kube_writes_total");
    let writes0 = writes().await?;
    let accepted = Instant::now();
    patch(serde_json::json!({"spec": {
        "config": {"retention.ms": "2000"},
        "rollout": {"strategy": "Progressive", "maxConcurrency": per_step,
                    "minSuccessTime": "0s", "progressDeadline": "5m"},
    }}))
    .await?;
    let got = until_received(seen, "2000", agents).await?;
    let total = accepted.elapsed();
    let done = phase("Succeeded").await?;
    let rollout_writes = writes().await? - writes0;
    // One step is one record write: the agents that got the value in one revision.
    let mut by_step: std::collections::BTreeMap<i64, Vec<Instant>> = Default::default();
    for (revision, at) in got.values() {
        by_step.entry(*revision).or_default().push(*at);
    }
    let mut spreads = Vec::new();
    let mut sizes = Vec::new();
    let mut gaps = Vec::new();
    let mut decided = Vec::new();
    let mut last_end: Option<Instant> = None;
    // The agents' receipt times on the wall clock the hub stamps its decisions with.
    let (wall, now) = (std::time::SystemTime::now(), Instant::now());
    let unix_millis = |at: Instant| {
        let wall = wall - now.saturating_duration_since(at);
        wall.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    };
    for (revision, times) in &by_step {
        let first = *times.iter().min().context("a step")?;
        let last = *times.iter().max().context("a step")?;
        spreads.push(last.saturating_duration_since(first).as_micros() as u64);
        let at = decided_unix_millis(&mut etcd, &key, *revision).await?;
        decided.push(u64::try_from(unix_millis(last) - at).unwrap_or(0) * 1000);
        sizes.push(times.len());
        if let Some(end) = last_end {
            gaps.push(first.saturating_duration_since(end).as_micros() as u64);
        }
        last_end = Some(last);
    }
    println!(
        "progressive: {agents} agents, maxConcurrency {per_step}: {} steps (status says {}) of {:?} agents, the whole rollout {total:?} from the edit",
        by_step.len(),
        done.step,
        sizes
    );
    println!(
        "progressive: writes to the management API server for the rollout (status, Events, ControllerRevisions, steady state included): {rollout_writes:.0}"
    );
    println!(
        "progressive: a step's decision (its record's decidedUnixMillis) → its last agent   {}",
        spread(decided)
    );
    println!(
        "progressive: a step's first agent → its last   {}",
        spread(spreads)
    );
    println!(
        "progressive: a step's last agent → the next's first (reports heard, next step decided)   {}",
        spread(gaps)
    );

    // A change every agent fails on, `rollback` clusters in its first step, a 2 s deadline.
    let deadline = Duration::from_secs(2);
    patch(serde_json::json!({"spec": {
        "config": {"retention.ms": "3000", BENCH_FAIL: "true"},
        "rollout": {"strategy": "Progressive", "maxConcurrency": rollback,
                    "minSuccessTime": "0s", "progressDeadline": "2s"},
    }}))
    .await?;
    let reached = until_received(seen, "3000", rollback).await?;
    let back = until(
        &format!("the {rollback} clusters back on retention.ms 2000"),
        Duration::from_secs(600),
        || async {
            let back = received_value(&seen.snapshot(), "2000");
            let back: Vec<(Instant, Instant)> = reached
                .iter()
                .filter_map(|(c, (_, sent))| {
                    let (_, at) = back.get(c)?;
                    (at > sent).then_some((*sent, *at))
                })
                .collect();
            Ok(if back.len() >= reached.len() {
                Check::Ready(back)
            } else {
                Check::NotYet(format!("{} of {}", back.len(), reached.len()))
            })
        },
    )
    .await?;
    let rolled_back = phase("RolledBack").await?;
    let first_sent = back.iter().map(|(s, _)| *s).min().context("a cluster")?;
    let after_deadline: Vec<u64> = back
        .iter()
        .map(|(_, at)| {
            at.saturating_duration_since(first_sent + deadline)
                .as_micros() as u64
        })
        .collect();
    let after_sent: Vec<u64> = back
        .iter()
        .map(|(sent, at)| at.saturating_duration_since(*sent).as_micros() as u64)
        .collect();
    println!(
        "progressive: rollback, each updated cluster's receipt of the failing value → back   {}",
        spread(after_sent)
    );
    let never = received_value(&seen.snapshot(), "3000").len() - reached.len();
    println!(
        "progressive: rollback of {} updated clusters ({} failed in status), the deadline (2 s after the first got it) → back on the last good value   {}; {never} other clusters ever got the failing value",
        reached.len(),
        rolled_back.failed,
        spread(after_deadline)
    );
    Ok(())
}
