//! Hub scale benchmark: N simulated agents (one process, N real mTLS streams) against one
//! real `accord-hub serve`, real etcd and a real management kube-apiserver.
//!
//! Every agent joins through the real token flow, heartbeats every second and sends a
//! status report every `--report-every`; the benchmark prints hub RSS, hub CPU seconds,
//! heartbeats/s, status reports/s and report-to-ack latency percentiles.
//!
//! ```text
//! cargo run --release -p accord-e2e --bin hub-bench -- --agents 1000 --duration 30
//! ```

use accord_e2e::Testbed;
use accord_e2e::agent_sim::{self, AgentStream, policy};
use accord_e2e::hub::{HUB_NAMESPACE, HubOptions, HubProcess};
use accord_e2e::testbed::{cpu_seconds, rss_bytes};
use accord_e2e::wait::{Check, until};
use accord_hub::store::{Keyspace, Store};
use accord_proto::v1::{
    AgentMessage, Heartbeat, StatusReport, agent_message, hub_message, status_ack,
};
use anyhow::{Context as _, Result};
use futures::{StreamExt, stream};
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
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        agents: 1000,
        duration: 30,
        report_every: 5,
        concurrency: 32,
        plain_etcd: false,
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
            other => anyhow::bail!(
                "unknown flag {other}; flags: --agents N --duration SECS --report-every SECS --concurrency N --plain-etcd"
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
/// Streams that ended on the agents' side, with why (cluster, reason).
type Ended = Arc<std::sync::Mutex<Vec<(String, String)>>>;

async fn run_agent(
    s: AgentStream,
    ended: Ended,
    offset: Duration,
    report_every: u64,
    latencies: Arc<Mutex<Vec<u64>>>,
    acks: Arc<AtomicU64>,
    measuring: Arc<std::sync::atomic::AtomicBool>,
) {
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
                    let Some(hub_message::Body::StatusAck(a)) = m.body else {
                        continue;
                    };
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
                agent_sim::register(&grpc, &token.to_string(), &hash, &cluster, true)
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
    let latencies = Arc::new(Mutex::new(Vec::<u64>::new()));
    let acks = Arc::new(AtomicU64::new(0));
    let measuring = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ended = Ended::default();
    // Each agent starts heartbeating as soon as its stream is open: the hub closes a stream
    // that stays silent past the heartbeat timeout.
    let tasks: Vec<tokio::task::JoinHandle<()>> = stream::iter(identities.into_iter().enumerate())
        .map(|(i, id)| {
            let grpc = hub.grpc.clone();
            let latencies = latencies.clone();
            let acks = acks.clone();
            let measuring = measuring.clone();
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
                    latencies,
                    acks,
                    measuring,
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
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    measuring.store(false, Ordering::Relaxed);
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
    let mut lat = latencies.lock().await.clone();
    lat.sort_unstable();
    for t in tasks {
        t.abort();
    }

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
    Ok(())
}
