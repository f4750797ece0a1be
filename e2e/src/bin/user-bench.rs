//! FederatedKafkaUsers at scale on real parts: N FederatedKafkaUsers (default 500), each with
//! its own password Secret, three ACL bindings (a prefixed topic ACL with Write and Describe,
//! a group Read) and a producer quota, for every one of the members (default 3), applied to
//! the management kube-apiserver → hub (which derives each SCRAM credential) → agents → each
//! member's Kafka (single broker, SASL_SSL, KRaft's ACL authorizer).
//!
//! Figures:
//! - per member, how long until every user's placement is `Synced` in the status, and users
//!   per second;
//! - the Kafka requests each agent sent over that time (its `/metrics`,
//!   `accord_agent_kafka_requests_total{request}`), per user;
//! - each agent's and the hub's resident memory and CPU time;
//! - the writes the management kube-apiserver served from the first apply until every user
//!   was Synced (its own `/metrics`), per user, the benchmark's own applies apart;
//! - then, as a sanity check, one user's ACLs and quotas in the first member as Kafka's own
//!   `kafka-acls` and `kafka-configs` list them.
//!
//! For comparison, Strimzi's User Operator publishes 10/100/200/500 KafkaUsers ready in
//! about 10/33/55/134 s on one cluster.
//!
//! ```text
//! cargo build --release --bin accord-hub --bin accord-agent --bin user-bench
//! $CARGO_TARGET_DIR/release/user-bench --users 500 --members 3
//! ```
//!
//! With `--backlog` every user is applied while the hub is stopped and the clock starts when
//! it starts. Figures: docs/benchmarks.md.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use accord_common::runtime::AbortOnDrop;
use accord_crds::PlacementState;
use accord_crds::kafka_user::{DEFAULT_SCRAM_ITERATIONS, FederatedKafkaUser};
use accord_e2e::apiserver_writes::{Meter, Report, WriteKind, series};
use accord_e2e::fleet::agent_metrics;
use accord_e2e::kafka::{ClusterOptions, KafkaCluster, KafkaOptions, TEST_HEAP_MIB};
use accord_e2e::kafka_topic_scenario::{
    self as ks, KafkaMember, KafkaScenario, KafkaScenarioOptions,
};
use accord_e2e::kafka_user_scenario as us;
use accord_e2e::stats::pct;
use accord_e2e::testbed::{cpu_seconds, rss_bytes};
use accord_e2e::{ProcessId, Testbed};
use anyhow::{Context as _, Result, bail, ensure};
use clap::builder::RangedU64ValueParser;
use clap::{Parser, value_parser};
use futures::StreamExt as _;
use kube::Api;
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;

/// FederatedKafkaUsers at scale on real parts: N users (each with a password Secret, three
/// ACL bindings and a quota) for every member, applied to the management kube-apiserver,
/// delivered by the hub and agents to each member's Kafka (SASL_SSL, ACL authorizer).
#[derive(Debug, Parser)]
#[command(name = "user-bench", args_override_self = true)]
struct Args {
    /// Number of FederatedKafkaUsers (and password Secrets) to apply.
    #[arg(long, value_name = "N", default_value_t = 500, value_parser = positive())]
    users: usize,
    /// Member clusters, each with its own single-broker Kafka; every user goes to all.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = positive())]
    members: usize,
    /// PBKDF2 iterations of each user's SCRAM credential (the hub derives one per
    /// password; the CRD's default is 8192).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 4096,
        value_parser = value_parser!(i32).range(4096..=16384)
    )]
    iterations: i32,
    /// Users (each a Secret and a FederatedKafkaUser) applied at once.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = positive())]
    concurrency: usize,
    /// Apply every user while the hub is stopped and time from its start.
    #[arg(long)]
    backlog: bool,
    /// The agents' `--kafka-resync`, in seconds.
    #[arg(long, value_name = "S", default_value_t = 30, value_parser = value_parser!(u64).range(1..))]
    resync: u64,
    /// Run the brokers with the JVM's full JIT instead of the tests' first-tier JIT.
    #[arg(long)]
    full_jit: bool,
    /// Heap of each Kafka broker, in MiB (at least 128).
    #[arg(
        long = "broker-heap-mib",
        value_name = "MIB",
        default_value_t = TEST_HEAP_MIB,
        value_parser = value_parser!(u32).range(128..)
    )]
    heap_mib: u32,
}

/// A count of at least one.
fn positive() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..)
}

const NS: &str = "bench-users";
const PREFIX: &str = "bench-u";
/// Strimzi's User Operator: KafkaUsers ready in about this many seconds, one cluster.
const STRIMZI: [(usize, f64); 4] = [(10, 10.0), (100, 33.0), (200, 55.0), (500, 134.0)];
/// The aim: 500 users on every member within this.
const AIM: Duration = Duration::from_secs(30);
/// How long every user may take to be Synced everywhere before the bench gives up.
const DEADLINE: Duration = Duration::from_secs(900);
/// The agent's metric of its requests to Kafka, by `kind`.
const KAFKA_REQUESTS: &str = "accord_agent_kafka_requests_total";
/// Agent counters printed beside the Kafka requests: how many rounds it took.
const AGENT_ROUNDS: [&str; 2] = [
    "accord_agent_assignments_applied_total",
    "accord_agent_status_reports_sent_total",
];

/// Object name (and Kafka username) of user `i`.
fn user_name(i: usize) -> String {
    format!("{PREFIX}-{i:05}")
}

/// The spec of user `i`: three ACL bindings (Write and Describe on the topics prefixed
/// `<username>.`, Read on group `<username>-app`) and one quota, password from its own
/// Secret.
fn user_spec(i: usize, iterations: i32, clusters: &[String]) -> serde_json::Value {
    let username = user_name(i);
    json!({
        "userName": username,
        "authentication": {
            "type": "scram-sha-512",
            "iterations": iterations,
            "passwordSecretRef": {"name": format!("{username}-password"), "key": "password"},
        },
        "acls": [
            {"resource": {"type": "topic", "name": format!("{username}."), "patternType": "prefixed"},
             "operations": ["Write", "Describe"]},
            {"resource": {"type": "group", "name": format!("{username}-app")}, "operations": ["Read"]},
        ],
        "quotas": {"producerByteRate": 1048576},
        "placement": {"clusters": clusters},
    })
}

/// An agent's counters: Kafka requests by kind, and [`AGENT_ROUNDS`].
#[derive(Debug, Clone, Default)]
struct AgentCounts {
    kafka: BTreeMap<String, f64>,
    rounds: BTreeMap<&'static str, f64>,
}

impl AgentCounts {
    async fn scrape(testbed: &Testbed, http: &str) -> Result<Self> {
        let text = agent_metrics(testbed, http).await?;
        let mut kafka = BTreeMap::new();
        for (labels, value) in series(&text, KAFKA_REQUESTS) {
            let kind = labels.get("request").cloned().unwrap_or_default();
            *kafka.entry(kind).or_insert(0.0) += value;
        }
        let rounds = AGENT_ROUNDS
            .iter()
            .map(|name| (*name, series(&text, name).iter().map(|s| s.1).sum()))
            .collect();
        Ok(Self { kafka, rounds })
    }

    /// What grew since `before`.
    fn since(&self, before: &Self) -> Self {
        let grew = |after: f64, before: Option<&f64>| after - before.copied().unwrap_or(0.0);
        Self {
            kafka: self
                .kafka
                .iter()
                .map(|(k, v)| (k.clone(), grew(*v, before.kafka.get(k))))
                .filter(|(_, v)| *v != 0.0)
                .collect(),
            rounds: self
                .rounds
                .iter()
                .map(|(k, v)| (*k, grew(*v, before.rounds.get(k))))
                .collect(),
        }
    }
}

/// Per member, while timing: when its first and its last user were Synced.
#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    first: Option<Duration>,
    all: Option<Duration>,
}

async fn run(testbed: &Testbed, args: &Args) -> Result<()> {
    let started = Instant::now();
    let mut kafkas: Vec<KafkaCluster> = Vec::new();
    for member in 0..args.members {
        kafkas.push(
            ks::start_kafka(
                testbed,
                member,
                ClusterOptions {
                    shape: KafkaOptions {
                        brokers: 1,
                        sasl_ssl: true,
                        full_jit: args.full_jit,
                        heap_mib: args.heap_mib,
                    },
                    authorizer: true,
                },
            )
            .await?,
        );
    }
    eprintln!("Kafka clusters up in {:.1?}", started.elapsed());
    let mut s = KafkaScenario::start(
        testbed,
        KafkaScenarioOptions {
            name: "ubench",
            members: kafkas
                .iter()
                .enumerate()
                .map(|(member, kafka)| KafkaMember {
                    member,
                    kafka,
                    sasl: true,
                })
                .collect(),
            resync: Duration::from_secs(args.resync),
            deletion_timeout: None,
            webhook: false,
        },
    )
    .await?;
    let clusters = s.clusters.clone();
    s.namespace(NS, &[("bench", "users")]).await?;
    let seed: u64 = rand::random();
    let password = |i: usize| format!("user-bench-{seed:016x}-{i:05}");

    let agent_http: Vec<String> = clusters
        .iter()
        .map(|c| s.fleet.agents[c].http.clone())
        .collect();
    let mut agents_before = Vec::new();
    for http in &agent_http {
        agents_before.push(AgentCounts::scrape(testbed, http).await?);
    }
    let agent_pids = (0..clusters.len())
        .map(|i| s.agent_pid(i))
        .collect::<Result<Vec<_>>>()?;
    let agents_cpu_before: Vec<f64> = agent_pids.iter().map(|p| cpu_seconds(*p)).collect();
    let mut hub_cpu_before = cpu_seconds(testbed.process_info(s.fleet.hub.id).pid);

    let mut meter = Meter::start(
        testbed.mgmt().client(),
        testbed.http(),
        Some(format!("{}/metrics", s.fleet.hub.http)),
    )
    .await?;
    let measured = Instant::now();
    if args.backlog {
        testbed.stop_process(s.fleet.hub.id);
    }
    // Apply every user (its Secret first, so the hub finds the password at once),
    // `concurrency` at a time, while watching the status.
    let mut t0 = Instant::now();
    let apply = async {
        let applied = futures::stream::iter(0..args.users)
            .map(|i| {
                let name = user_name(i);
                let spec = user_spec(i, args.iterations, &clusters);
                let password = password(i);
                async move {
                    let start = Instant::now();
                    us::put_password(testbed, NS, &format!("{name}-password"), &password)
                        .await
                        .with_context(|| format!("writing the Secret of user {i}"))?;
                    us::apply_user(testbed, NS, &name, spec).await?;
                    anyhow::Ok(start.elapsed())
                }
            })
            .buffer_unordered(args.concurrency)
            .collect::<Vec<_>>()
            .await;
        let latencies = applied.into_iter().collect::<Result<Vec<_>>>()?;
        let took = t0.elapsed();
        eprintln!(
            "{} Secrets and FederatedKafkaUsers applied in {took:.1?}",
            args.users
        );
        anyhow::Ok((took, latencies))
    };

    // The status is followed by a watch: listing every user each poll would load the API
    // server whose throughput is being measured.
    let api: Api<FederatedKafkaUser> = Api::namespaced(testbed.mgmt().client(), NS);
    let (users, users_writer) = reflector::store::<FederatedKafkaUser>();
    let _watch = AbortOnDrop(tokio::spawn(
        watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(users_writer)
            .for_each(|_| futures::future::ready(())),
    ));
    // Fail at once when the hub (whose id changes with a restart) or an agent exits.
    let agent_ids: Vec<ProcessId> = s.fleet.agents.values().filter_map(|a| a.process).collect();
    let (clusters_ref, users_ref, agent_ids) = (&clusters, &users, &agent_ids);
    let poll = |t0: Instant, hub: ProcessId| async move {
        let (clusters, users) = (clusters_ref, users_ref);
        let mut progress = vec![Progress::default(); clusters.len()];
        let mut first_status: Option<Duration> = None;
        let mut printed = Instant::now();
        loop {
            for id in std::iter::once(&hub).chain(agent_ids) {
                testbed.ensure_running(*id)?;
            }
            let mut per_cluster: BTreeMap<&str, usize> = BTreeMap::new();
            let mut with_status = 0;
            let state = users.state();
            for user in state.iter().filter(|u| {
                u.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(PREFIX))
            }) {
                let Some(status) = &user.status else {
                    continue;
                };
                with_status += 1;
                if status.observed_generation != user.metadata.generation {
                    continue;
                }
                for p in &status.placements {
                    if p.state == PlacementState::Synced {
                        *per_cluster.entry(p.cluster.as_str()).or_default() += 1;
                    }
                }
            }
            if with_status > 0 && first_status.is_none() {
                first_status = Some(t0.elapsed());
            }
            for (i, cluster) in clusters.iter().enumerate() {
                let synced = per_cluster.get(cluster.as_str()).copied().unwrap_or(0);
                if synced > 0 && progress[i].first.is_none() {
                    progress[i].first = Some(t0.elapsed());
                }
                if synced >= args.users && progress[i].all.is_none() {
                    progress[i].all = Some(t0.elapsed());
                }
            }
            let done = progress.iter().all(|p| p.all.is_some());
            if done || printed.elapsed() >= Duration::from_secs(1) {
                printed = Instant::now();
                eprintln!(
                    "{:>6.1}s: with a status {with_status}; Synced {per_cluster:?}",
                    t0.elapsed().as_secs_f64(),
                );
            }
            if done {
                break;
            }
            if t0.elapsed() > DEADLINE {
                bail!("not every user Synced within {DEADLINE:?}: {progress:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::Ok((first_status, progress))
    };
    let (applied, polled) = if args.backlog {
        let applied = apply.await;
        s.fleet.restart_hub().await?;
        meter.hub_restarted(format!("{}/metrics", s.fleet.hub.http));
        hub_cpu_before = 0.0;
        t0 = Instant::now();
        (applied, poll(t0, s.fleet.hub.id).await)
    } else {
        tokio::join!(apply, poll(t0, s.fleet.hub.id))
    };
    let (apply_time, mut apply_latencies) = applied?;
    let (first_status, progress) = polled?;
    // Counters and memory as they were when the last user was Synced.
    let mut agents = Vec::new();
    for (http, before) in agent_http.iter().zip(&agents_before) {
        agents.push(AgentCounts::scrape(testbed, http).await?.since(before));
    }
    let agents_rss: Vec<u64> = agent_pids.iter().map(|p| rss_bytes(*p)).collect();
    let agents_cpu: Vec<f64> = agent_pids
        .iter()
        .zip(&agents_cpu_before)
        .map(|(p, before)| cpu_seconds(*p) - before)
        .collect();
    let hub_pid = testbed.process_info(s.fleet.hub.id).pid;
    let (hub_rss, hub_cpu) = (rss_bytes(hub_pid), cpu_seconds(hub_pid) - hub_cpu_before);
    let seconds = measured.elapsed().as_secs_f64();
    // Count the hub's writes that trail the last Synced the bench saw.
    let trailing = meter
        .settle(Duration::from_secs(2), Duration::from_secs(60))
        .await?;
    let writes = meter.finish().await?;

    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let n = args.users as f64;
    println!(
        "FederatedKafkaUsers: {} users × {} members (3 ACL bindings and 1 quota each, own \
         password Secret; SCRAM-SHA-512 with {} iterations{}; 1 broker per member, SASL_SSL, \
         ACL authorizer, {} JIT, {} MiB heap; agents' resync {} s; {} concurrent applies{}; \
         applying took {:.1}s)",
        args.users,
        clusters.len(),
        args.iterations,
        if args.iterations == DEFAULT_SCRAM_ITERATIONS {
            ", the CRD's default"
        } else {
            ""
        },
        if args.full_jit { "full" } else { "first-tier" },
        args.heap_mib,
        args.resync,
        args.concurrency,
        if args.backlog {
            ", --backlog: applied with the hub stopped, clock from its start"
        } else {
            ", clock from the first apply"
        },
        apply_time.as_secs_f64()
    );
    println!(
        "  the first status written by the hub after {:.1}s",
        first_status.unwrap_or_default().as_secs_f64()
    );
    for (i, cluster) in clusters.iter().enumerate() {
        let p = progress[i];
        let all = p.all.unwrap_or_default();
        let requests: f64 = agents[i].kafka.values().sum();
        let by_kind: Vec<String> = agents[i]
            .kafka
            .iter()
            .map(|(k, v)| format!("{k} {v:.0}"))
            .collect();
        println!(
            "  {cluster}: first user Synced after {:.1}s, every user Synced after {:.1}s \
             ({:.1} users/s); Kafka requests {requests:.0} ({:.3}/user: {}); assignments \
             applied {:.0}, status reports sent {:.0}; agent RSS {:.1} MiB, CPU {:.1}s",
            p.first.unwrap_or_default().as_secs_f64(),
            all.as_secs_f64(),
            n / all.as_secs_f64().max(1e-3),
            requests / n,
            by_kind.join(", "),
            agents[i].rounds[AGENT_ROUNDS[0]],
            agents[i].rounds[AGENT_ROUNDS[1]],
            mib(agents_rss[i]),
            agents_cpu[i],
        );
    }
    println!(
        "  hub: RSS {:.1} MiB, CPU {:.1}s{}",
        mib(hub_rss),
        hub_cpu,
        if args.backlog {
            " (since its start)"
        } else {
            ""
        }
    );
    apply_latencies.sort();
    println!(
        "  one user applied (Secret + FederatedKafkaUser, server-side apply): p50={:.1}ms \
         p99={:.1}ms",
        pct(&apply_latencies, 0.5).as_secs_f64() * 1000.0,
        pct(&apply_latencies, 0.99).as_secs_f64() * 1000.0
    );
    let end_to_end = progress
        .iter()
        .filter_map(|p| p.all)
        .max()
        .unwrap_or_default();
    println!(
        "  end to end (every placement of every user Synced): {:.1}s ({:.1} users/s per \
         member); the aim, 500 users on every member within {} s: {}",
        end_to_end.as_secs_f64(),
        n / end_to_end.as_secs_f64().max(1e-3),
        AIM.as_secs(),
        if args.users < 500 {
            "not measured (fewer than 500 users)"
        } else if end_to_end <= AIM {
            "met"
        } else {
            "NOT met"
        }
    );
    let strimzi: Vec<String> = STRIMZI
        .iter()
        .map(|(users, s)| format!("{users} in ~{s:.0} s"))
        .collect();
    println!(
        "  for comparison, Strimzi's User Operator (one cluster): {}",
        strimzi.join(", ")
    );
    println!(
        "  the hub's last write after every placement was Synced: {:.1}s later (counted below; \
         the rate per second is over the time to Synced)",
        trailing.as_secs_f64()
    );
    print!(
        "{}",
        writes.render(&Report {
            phase: "applying every user until each was Synced everywhere, and the hub's writes \
                    that trailed it",
            objects: n,
            unit: "user",
            seconds: Some(seconds),
            user: &[
                (WriteKind::new("federatedkafkausers", "APPLY"), n),
                (WriteKind::new("secrets", "APPLY"), n),
            ],
        })
    );

    // A sanity check in Kafka itself: one user's bindings and quota as Kafka's own tools
    // list them.
    let sample = user_name(args.users / 2);
    let acls = us::acls(testbed, &kafkas[0], &format!("User:{sample}")).await?;
    let quotas = us::quotas(testbed, &kafkas[0], &sample).await?;
    println!(
        "  {}: kafka-acls lists for User:{sample} {acls:?}; kafka-configs {quotas:?}",
        clusters[0]
    );
    ensure!(
        acls.len() == 3,
        "User:{sample}: 3 ACL bindings, not {acls:?}"
    );
    ensure!(
        quotas.get("producer_byte_rate") == Some(&1_048_576.0) && quotas.len() == 1,
        "{sample}: producer_byte_rate 1048576 only, not {quotas:?}"
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let testbed = Testbed::builder().members(args.members).start().await?;
    let result = run(&testbed, &args).await;
    if result.is_err() {
        eprintln!("{}", testbed.log_tails(30));
    }
    result
}
