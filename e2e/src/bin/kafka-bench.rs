//! FederatedKafkaTopics at scale on real parts: N FederatedKafkaTopics (default 1,000), each
//! for every one of three members, applied to the management kube-apiserver (through the
//! hub's admission webhook) → hub → agents → each member's Kafka.
//!
//! Figures:
//! - per member, how long until its Kafka (read independently, with rdkafka) holds every
//!   topic, and topics per second from the first apply;
//! - end to end, how long until every placement of every topic is `Synced` in the status;
//! - each agent's resident memory once it manages every topic, and how many topics it named
//!   in CreateTopics per topic (`accord_agent_kafka_topic_creates_total`: a create is sent
//!   again while a broker does not list a topic it acknowledged);
//! - the writes the management kube-apiserver served from the first apply until every topic
//!   was Synced (its own `/metrics`), per topic, the benchmark's own applies apart;
//! - the webhook's latency at a fixed rate (default 50 requests/s, open loop): straight to
//!   the hub's HTTPS endpoint with an AdmissionReview, and as seen through the kube-apiserver
//!   (a server-side dry-run create, which calls the webhook).
//!
//! For comparison, Strimzi's Topic Operator publishes about 3,300 KafkaTopics Ready in about
//! 160 s (roughly 20 per second, one cluster) with a full resync every 120 s.
//!
//! ```text
//! cargo run --release -p accord-e2e --bin kafka-bench -- --topics 1000 --rate 50
//! ```
//!
//! With `--floor` it also measures what a perfect federation could not beat: the same topics
//! created directly in every member's broker as they would reach it (at once with
//! `--backlog`, else at `--floor-pace` topics a second), and every status rewritten with the
//! hub stopped; the floor's topics also warm the brokers' JIT before the clock starts.
//! The floor for end to end is the sum of the two (Kafka alone: its slowest member; then
//! the status writes alone): Accord's end to end time over it is printed last as
//! "ratio N.NN× (aim ≤ 1.3×)".
//! Brokers run with the JVM's full JIT (`--quick-start-jit` for the tests' first-tier JIT)
//! and Kafka's default 1 GiB heap (`--broker-heap-mib` to change it; the tests' 384 MiB
//! leaves a broker with thousands of partitions collecting garbage most of the time).
//! Figures: docs/benchmarks.md.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use accord_common::runtime::AbortOnDrop;
use accord_crds::{FederatedKafkaTopic, PlacementState};
use accord_e2e::Testbed;
use accord_e2e::apiserver_writes::{Meter, Report, WriteKind};
use accord_e2e::fleet::agent_metrics;
use accord_e2e::kafka::{KAFKA_DEFAULT_HEAP_MIB, KafkaOptions};
use accord_e2e::kafka_topic_scenario::{
    self as ks, KafkaMember, KafkaScenario, KafkaScenarioOptions, WEBHOOK_PATH,
};
use accord_e2e::stats::pct;
use accord_e2e::testbed::rss_bytes;
use anyhow::{Context as _, Result, bail};
use clap::builder::{PossibleValuesParser, RangedU64ValueParser, TypedValueParser as _};
use clap::{Parser, value_parser};
use futures::StreamExt as _;
use kube::Api;
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;

/// FederatedKafkaTopics at scale on real parts: N topics for every one of three members,
/// applied to the management kube-apiserver, delivered by the hub and agents to each member's
/// Kafka; then the admission webhook's latency at a fixed rate.
#[derive(Debug, Parser)]
#[command(name = "kafka-bench", args_override_self = true)]
struct Args {
    /// Number of FederatedKafkaTopics to apply.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = positive())]
    topics: usize,
    /// Partitions of each topic.
    #[arg(long, value_name = "N", default_value_t = 3)]
    partitions: i32,
    /// Kafka brokers in each member.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = PossibleValuesParser::new(["1", "3"]).try_map(|n| n.parse::<usize>())
    )]
    brokers: usize,
    /// Applies in flight at once.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = positive())]
    concurrency: usize,
    /// Webhook requests per second (open loop) in the latency measurement.
    #[arg(
        long,
        value_name = "REQ_PER_S",
        default_value_t = 50,
        value_parser = value_parser!(u32).range(1..)
    )]
    rate: u32,
    /// Seconds each webhook latency measurement (straight to the hub, through the
    /// kube-apiserver) lasts.
    #[arg(long, value_name = "S", default_value_t = 20)]
    webhook_seconds: u64,
    /// Register no admission webhook, and skip its latency measurement.
    #[arg(long)]
    without_webhook: bool,
    /// Apply every topic while the hub is stopped and time from its start (implies
    /// --without-webhook: the webhook would refuse applies while the hub is down).
    #[arg(long)]
    backlog: bool,
    /// Also measure the floor: the same topics created straight in every member's Kafka, and
    /// every status rewritten with the hub stopped.
    #[arg(long)]
    floor: bool,
    /// Topics per second the Kafka floor hands each broker without --backlog, in one
    /// CreateTopics every 200 ms of what arrived meanwhile, as applies reach an agent (the
    /// default is the per-member aim with applies included: a federation that keeps that
    /// pace cannot be faster than Kafka fed at it).
    #[arg(
        long,
        value_name = "TOPICS_PER_S",
        default_value_t = 40,
        value_parser = value_parser!(u32).range(1..)
    )]
    floor_pace: u32,
    /// Run the brokers with the tests' first-tier JIT instead of the JVM's full JIT.
    #[arg(long)]
    quick_start_jit: bool,
    /// Heap of each Kafka broker, in MiB (at least 128).
    #[arg(
        long = "broker-heap-mib",
        value_name = "MIB",
        default_value_t = KAFKA_DEFAULT_HEAP_MIB,
        value_parser = value_parser!(u32).range(128..)
    )]
    heap_mib: u32,
}

impl Args {
    /// Whether the hub's admission webhook is registered.
    fn webhook(&self) -> bool {
        !self.without_webhook && !self.backlog
    }
}

/// A count of at least one.
fn positive() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..)
}

const NS: &str = "bench-kafka";
const PREFIX: &str = "bench-t";

fn topic_spec(i: usize, partitions: i32, clusters: &[String]) -> serde_json::Value {
    json!({
        "topicName": format!("{PREFIX}-{i:05}"),
        "partitions": partitions,
        "replicationFactor": 1,
        "config": {"retention.ms": "86400000"},
        "placement": {"clusters": clusters},
    })
}

fn latencies(what: &str, mut samples: Vec<Duration>, errors: usize) {
    samples.sort();
    if samples.is_empty() {
        println!("{what}: no samples ({errors} errors)");
        return;
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{what}: n={} p50={:.2}ms p90={:.2}ms p99={:.2}ms max={:.2}ms errors={errors}",
        samples.len(),
        ms(pct(&samples, 0.5)),
        ms(pct(&samples, 0.9)),
        ms(pct(&samples, 0.99)),
        ms(samples[samples.len() - 1]),
    );
}

/// Sends `make(i)` at `rate` per second for `seconds` (each request its own task, so a slow
/// answer never delays the next send); returns the latencies and the number of errors.
async fn open_loop<F, Fut>(rate: u32, seconds: u64, make: F) -> (Vec<Duration>, usize)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let mut ticker = tokio::time::interval(Duration::from_secs(1) / rate);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let total = rate as usize * seconds as usize;
    let mut tasks = Vec::with_capacity(total);
    for i in 0..total {
        ticker.tick().await;
        let request = make(i);
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            request.await.map(|()| start.elapsed())
        }));
    }
    let mut samples = Vec::new();
    let mut errors = 0;
    for task in tasks {
        match task.await {
            Ok(Ok(latency)) => samples.push(latency),
            Ok(Err(e)) => {
                if errors == 0 {
                    eprintln!("first error: {e:#}");
                }
                errors += 1;
            }
            Err(_) => errors += 1,
        }
    }
    (samples, errors)
}

const FLOOR_PREFIX: &str = "floor-t";

/// How often the bench asks each member's Kafka for its topics while timing: the figures
/// "every topic in Kafka" are upper bounds by up to this much.
const KAFKA_POLL: Duration = Duration::from_millis(500);

/// How many of `probe`'s topics start with `prefix`.
async fn count_topics(probe: &ks::KafkaProbe, prefix: &str) -> Result<usize> {
    Ok(probe
        .topics()
        .await?
        .keys()
        .filter(|t| t.starts_with(prefix))
        .count())
}

/// The agent's `accord_agent_kafka_topic_creates_total` by result, from its `/metrics` text:
/// every topic it named in a CreateTopics, by Kafka's answer (a create sent again while the
/// broker did not list the topic yet is answered `already_exists`).
fn topic_creates(metrics: &str) -> BTreeMap<String, f64> {
    metrics
        .lines()
        .filter_map(|line| line.strip_prefix("accord_agent_kafka_topic_creates_total{result=\""))
        .filter_map(|rest| {
            let (result, value) = rest.split_once("\"} ")?;
            Some((result.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// How often the paced Kafka floor hands a broker the topics that arrived meanwhile.
const FLOOR_TICK: Duration = Duration::from_millis(200);

/// Kafka alone, the way a perfect federation would use it: every member's broker is given
/// the same topics as they would reach its agent — with `--backlog` all at once, in one
/// CreateTopics request (as the agent batches them); otherwise at `--floor-pace` topics a
/// second, one CreateTopics per [`FLOOR_TICK`] — timed until its own Metadata lists every
/// one; then they are deleted again. Accord's end to end time cannot beat the slowest
/// member here.
async fn kafka_floor(probes: &[ks::KafkaProbe], args: &Args) -> Result<Duration> {
    let names: Vec<String> = (0..args.topics)
        .map(|i| format!("{FLOOR_PREFIX}-{i:05}"))
        .collect();
    let deadline = Duration::from_secs(600);
    let configs = [("retention.ms", "86400000")];
    let start = Instant::now();
    let times = futures::future::try_join_all(probes.iter().map(|probe| {
        let (names, configs) = (&names, &configs);
        async move {
            if args.backlog {
                probe.create_all(names, args.partitions, configs).await?;
            } else {
                let mut created = 0;
                let mut tick = tokio::time::interval(FLOOR_TICK);
                while created < names.len() {
                    tick.tick().await;
                    let due = (start.elapsed().as_secs_f64() * f64::from(args.floor_pace)) as usize;
                    let due = due.min(names.len());
                    if due > created {
                        probe
                            .create_all(&names[created..due], args.partitions, configs)
                            .await?;
                        created = due;
                    }
                }
            }
            let answered = start.elapsed();
            loop {
                if count_topics(probe, FLOOR_PREFIX).await? >= names.len() {
                    break;
                }
                if start.elapsed() > deadline {
                    bail!(
                        "{}: not every floor topic listed within {deadline:?}",
                        probe.bootstrap
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            anyhow::Ok((answered, start.elapsed()))
        }
    }))
    .await?;
    let fed = if args.backlog {
        "created at once, one CreateTopics per member".to_owned()
    } else {
        format!(
            "handed to each broker at {} topics/s, one CreateTopics per {FLOOR_TICK:?}",
            args.floor_pace
        )
    };
    println!(
        "Kafka alone (no Accord; {} topics × {} members {fed}, {} partitions):",
        args.topics,
        probes.len(),
        args.partitions
    );
    for (i, (answered, listed)) in times.iter().enumerate() {
        println!(
            "  member {i}: CreateTopics answered after {:.1}s, every topic in Metadata after \
             {:.1}s ({:.0} topics/s)",
            answered.as_secs_f64(),
            listed.as_secs_f64(),
            args.topics as f64 / listed.as_secs_f64().max(1e-3)
        );
    }
    let slowest = times.iter().map(|t| t.1).max().unwrap_or_default();
    println!(
        "  the floor for end to end: {:.1}s ({:.0} topics/s per member)",
        slowest.as_secs_f64(),
        args.topics as f64 / slowest.as_secs_f64().max(1e-3)
    );
    let start = Instant::now();
    futures::future::try_join_all(probes.iter().map(|probe| {
        let names = &names;
        async move {
            probe.delete_all(names).await?;
            while count_topics(probe, FLOOR_PREFIX).await? > 0 {
                if start.elapsed() > deadline {
                    bail!(
                        "{}: floor topics still listed after {deadline:?}",
                        probe.bootstrap
                    );
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            anyhow::Ok(())
        }
    }))
    .await?;
    eprintln!("floor topics deleted in {:.1?}", start.elapsed());
    Ok(slowest)
}

async fn run(testbed: &Testbed, args: &Args) -> Result<()> {
    let started = Instant::now();
    let mut kafkas = Vec::new();
    for member in 0..3 {
        kafkas.push(
            ks::start_kafka(
                testbed,
                member,
                KafkaOptions {
                    brokers: args.brokers,
                    sasl_ssl: false,
                    full_jit: !args.quick_start_jit,
                    heap_mib: args.heap_mib,
                },
            )
            .await?,
        );
    }
    eprintln!("Kafka clusters up in {:.1?}", started.elapsed());
    let kafka_alone = if args.floor {
        let probes = kafkas
            .iter()
            .map(|kafka| ks::KafkaProbe::new(&kafka.bootstrap))
            .collect::<Result<Vec<_>>>()?;
        Some(kafka_floor(&probes, args).await?)
    } else {
        None
    };
    let mut s = KafkaScenario::start(
        testbed,
        KafkaScenarioOptions {
            name: "kbench",
            members: kafkas
                .iter()
                .enumerate()
                .map(|(member, kafka)| KafkaMember {
                    member,
                    kafka,
                    sasl: false,
                })
                .collect(),
            resync: Duration::from_secs(30),
            deletion_timeout: None,
            webhook: args.webhook(),
        },
    )
    .await?;
    let clusters = s.clusters.clone();
    s.namespace(NS, &[("bench", "kafka")]).await?;
    // A policy every topic keeps, so that the webhook and the hub evaluate one.
    ks::apply_policy(
        testbed,
        "bench-kafka",
        json!({"namespaceSelector": {"matchLabels": {"bench": "kafka"}}, "minPartitions": 1}),
    )
    .await?;
    let probes = s.probes()?;
    // The webhook registered and answering before the clock starts.
    ks::try_apply_topic(
        testbed,
        NS,
        "warm-up",
        topic_spec(99_999, 1, &clusters),
        true,
    )
    .await
    .context("a dry-run create (through the webhook, if registered)")?;

    // With --backlog, every topic is applied while the hub is stopped, and the clock starts
    // when it starts again: what the hub, the agents and Kafka sustain, whatever the API
    // server's write rate.
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
    // Apply every topic, `concurrency` at a time, while watching Kafka and the status.
    let mut t0 = Instant::now();
    let apply = async {
        let applied = futures::stream::iter(0..args.topics)
            .map(|i| {
                let spec = topic_spec(i, args.partitions, &clusters);
                async move {
                    let start = Instant::now();
                    ks::try_apply_topic(testbed, NS, &format!("{PREFIX}-{i:05}"), spec, false)
                        .await
                        .with_context(|| format!("applying topic {i}"))?;
                    anyhow::Ok(start.elapsed())
                }
            })
            .buffer_unordered(args.concurrency)
            .collect::<Vec<_>>()
            .await;
        let latencies = applied.into_iter().collect::<Result<Vec<_>>>()?;
        let took = t0.elapsed();
        eprintln!("{} FederatedKafkaTopics applied in {took:.1?}", args.topics);
        anyhow::Ok((took, latencies))
    };

    // Poll Kafka and the status until every member has every topic and every placement is
    // Synced. The status is followed by a watch: listing a thousand topics every poll would
    // load the API server whose throughput is being measured.
    let api: Api<FederatedKafkaTopic> = Api::namespaced(testbed.mgmt().client(), NS);
    let (topics, topics_writer) = reflector::store::<FederatedKafkaTopic>();
    let _watch = AbortOnDrop(tokio::spawn(
        watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(topics_writer)
            .for_each(|_| futures::future::ready(())),
    ));
    let (clusters_ref, probes_ref, topics_ref) = (&clusters, &probes, &topics);
    let poll = |t0: Instant| async move {
        let (clusters, probes, topics) = (clusters_ref, probes_ref, topics_ref);
        let mut first_in_kafka: Vec<Option<Duration>> = vec![None; clusters.len()];
        let mut in_kafka: Vec<Option<Duration>> = vec![None; clusters.len()];
        let mut synced: Vec<Option<Duration>> = vec![None; clusters.len()];
        let mut counts = vec![0; clusters.len()];
        let deadline = Instant::now() + Duration::from_secs(900);
        let mut kafka_polled: Option<Instant> = None;
        loop {
            // Kafka is asked at most every KAFKA_POLL: a Metadata request for a thousand
            // topics costs a broker enough CPU that asking ten times a second slowed the
            // very topic creations being timed.
            let poll_kafka = kafka_polled.is_none_or(|at| at.elapsed() >= KAFKA_POLL);
            if poll_kafka {
                kafka_polled = Some(Instant::now());
            }
            for (i, probe) in probes.iter().enumerate() {
                if poll_kafka && in_kafka[i].is_none() {
                    let count = probe
                        .topics()
                        .await?
                        .keys()
                        .filter(|t| t.starts_with(PREFIX))
                        .count();
                    counts[i] = count;
                    if count > 0 && first_in_kafka[i].is_none() {
                        first_in_kafka[i] = Some(t0.elapsed());
                    }
                    if count >= args.topics {
                        in_kafka[i] = Some(t0.elapsed());
                    }
                }
            }
            if synced.iter().any(Option::is_none) {
                let list = topics.state();
                let mut per_cluster: BTreeMap<String, usize> = BTreeMap::new();
                for topic in list.iter().filter(|t| {
                    t.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with(PREFIX))
                }) {
                    let generation = topic.metadata.generation;
                    let Some(status) = &topic.status else {
                        continue;
                    };
                    if status.observed_generation != generation {
                        continue;
                    }
                    for p in &status.placements {
                        if p.state == PlacementState::Synced {
                            *per_cluster.entry(p.cluster.clone()).or_default() += 1;
                        }
                    }
                }
                for (i, cluster) in clusters.iter().enumerate() {
                    if synced[i].is_none()
                        && per_cluster.get(cluster.as_str()).copied().unwrap_or(0) >= args.topics
                    {
                        synced[i] = Some(t0.elapsed());
                    }
                }
                eprintln!(
                    "{:>6.1}s: Synced {per_cluster:?}; in Kafka {counts:?}",
                    t0.elapsed().as_secs_f64(),
                );
            }
            if in_kafka.iter().chain(&synced).all(Option::is_some) {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "not every topic Synced within 900 s: in Kafka {in_kafka:?}, Synced {synced:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::Ok((first_in_kafka, in_kafka, synced))
    };
    let (applied, polled) = if args.backlog {
        let applied = apply.await;
        s.fleet.restart_hub().await?;
        meter.hub_restarted(format!("{}/metrics", s.fleet.hub.http));
        t0 = Instant::now();
        (applied, poll(t0).await)
    } else {
        tokio::join!(apply, poll(t0))
    };
    let (apply_time, mut apply_latencies) = applied?;
    let (first_in_kafka, in_kafka, synced) = polled?;
    let seconds = measured.elapsed().as_secs_f64();
    // Count the hub's writes that trail the last Synced the bench saw.
    let trailing = meter
        .settle(Duration::from_secs(2), Duration::from_secs(60))
        .await?;
    let writes = meter.finish().await?;

    println!(
        "FederatedKafkaTopics: {} topics × {} members ({} partitions, RF 1, {} broker(s) per \
         member with a {} MiB heap, {} concurrent applies; applying took {:.1}s)",
        args.topics,
        clusters.len(),
        args.partitions,
        args.brokers,
        args.heap_mib,
        args.concurrency,
        apply_time.as_secs_f64()
    );
    for (i, cluster) in clusters.iter().enumerate() {
        let kafka = in_kafka[i].unwrap_or_default();
        let status = synced[i].unwrap_or_default();
        let agent = s
            .fleet
            .agents
            .get(cluster)
            .and_then(|a| a.process)
            .map(|id| rss_bytes(testbed.process_info(id).pid))
            .unwrap_or(0);
        let first = first_in_kafka[i].unwrap_or_default();
        // Kafka is polled every KAFKA_POLL: a span shorter than that has no rate.
        let from_first = if kafka - first < KAFKA_POLL {
            "every topic in one poll".to_owned()
        } else {
            format!(
                "{:.0} topics/s",
                args.topics as f64 / (kafka - first).as_secs_f64()
            )
        };
        println!(
            "  {cluster}: every topic in Kafka after {:.1}s ({:.0} topics/s from the first apply, \
             {from_first} from the first topic at {:.1}s); every placement Synced after {:.1}s \
             ({:.0} topics/s); agent RSS {:.1} MiB",
            kafka.as_secs_f64(),
            args.topics as f64 / kafka.as_secs_f64().max(1e-3),
            first.as_secs_f64(),
            status.as_secs_f64(),
            args.topics as f64 / status.as_secs_f64().max(1e-3),
            agent as f64 / (1024.0 * 1024.0),
        );
    }
    for cluster in &clusters {
        let Some(agent) = s.fleet.agents.get(cluster) else {
            continue;
        };
        let text = agent_metrics(testbed, &agent.http).await?;
        let creates = topic_creates(&text);
        let sent: f64 = creates.values().sum();
        println!(
            "  {cluster}: topics sent in CreateTopics {sent:.0} ({:.2} per topic; by Kafka's \
             answer {creates:?})",
            sent / args.topics as f64
        );
    }
    apply_latencies.sort();
    println!(
        "  one apply (server-side apply): p50={:.1}ms p99={:.1}ms",
        pct(&apply_latencies, 0.5).as_secs_f64() * 1000.0,
        pct(&apply_latencies, 0.99).as_secs_f64() * 1000.0
    );
    let end_to_end = synced
        .iter()
        .chain(&in_kafka)
        .flatten()
        .max()
        .copied()
        .unwrap_or_default();
    println!(
        "  end to end (first apply → every placement of every topic Synced): {:.1}s",
        end_to_end.as_secs_f64()
    );
    println!(
        "  for comparison, Strimzi's published figure: about 3,300 KafkaTopics Ready in about \
         160 s (≈20 topics/s, one cluster), full resync every 120 s"
    );
    println!(
        "  the hub's last write after every placement was Synced: {:.1}s later (counted below; \
         the rate per second is over the time to Synced)",
        trailing.as_secs_f64()
    );
    print!(
        "{}",
        writes.render(&Report {
            phase: "applying every topic until each was in Kafka and Synced everywhere, and the \
                    hub's writes that trailed it",
            objects: args.topics as f64,
            unit: "topic",
            seconds: Some(seconds),
            user: &[(
                WriteKind::new("federatedkafkatopics", "APPLY"),
                args.topics as f64
            )],
        })
    );

    if let Some(webhook) = s.webhook.as_ref() {
        webhook_latency(testbed, args, webhook, &clusters).await?;
    }
    ks::delete_policy(testbed, "bench-kafka").await?;
    if let Some(kafka_alone) = kafka_alone {
        testbed.stop_process(s.fleet.hub.id);
        let writes_alone = api_floor(testbed, &topics).await?;
        let floor = kafka_alone + writes_alone;
        println!(
            "End to end against the floor: Accord {:.1}s / (Kafka alone {:.1}s + status writes \
             alone {:.1}s = {:.1}s): ratio {:.2}× (aim ≤ 1.3×)",
            end_to_end.as_secs_f64(),
            kafka_alone.as_secs_f64(),
            writes_alone.as_secs_f64(),
            floor.as_secs_f64(),
            end_to_end.as_secs_f64() / floor.as_secs_f64().max(1e-9)
        );
    }
    Ok(())
}

/// The management API server alone: every topic's status rewritten once (each condition's
/// message changed, the rest as the hub wrote it), [`MAX_STATUS_IN_FLIGHT`] at a time as the
/// hub's status writer does, with the hub stopped. Accord writes each topic's outcome once,
/// so its end to end time cannot beat this either. Returns how long the writes took.
async fn api_floor(
    testbed: &Testbed,
    topics: &reflector::Store<FederatedKafkaTopic>,
) -> Result<Duration> {
    let api: Api<FederatedKafkaTopic> = Api::namespaced(testbed.mgmt().client(), NS);
    let statuses: Vec<(String, serde_json::Value)> = topics
        .state()
        .iter()
        .filter_map(|t| {
            let name = t.metadata.name.clone()?;
            let mut status = serde_json::to_value(t.status.as_ref()?).ok()?;
            for condition in status["conditions"].as_array_mut()? {
                let message = condition["message"].as_str().unwrap_or_default();
                condition["message"] = json!(format!("{message} (floor)"));
            }
            name.starts_with(PREFIX).then_some((name, status))
        })
        .collect();
    let start = Instant::now();
    let written = futures::stream::iter(statuses)
        .map(|(name, status)| {
            let api = api.clone();
            async move {
                api.patch_status(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"status": status})),
                )
                .await
                .with_context(|| format!("patching the status of {name}"))
            }
        })
        .buffer_unordered(MAX_STATUS_IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    let took = start.elapsed();
    let count = written.into_iter().collect::<Result<Vec<_>>>()?.len();
    println!(
        "The management API server alone (hub stopped): {count} status PATCHes, \
         {MAX_STATUS_IN_FLIGHT} at a time, in {:.1}s ({:.0} writes/s)",
        took.as_secs_f64(),
        count as f64 / took.as_secs_f64().max(1e-3)
    );
    Ok(took)
}

/// As many status writes as the hub's writer has under way at once.
const MAX_STATUS_IN_FLIGHT: usize = 8;

/// Webhook latency at a fixed rate, with every topic in the hub's reflectors.
async fn webhook_latency(
    testbed: &Testbed,
    args: &Args,
    webhook: &ks::Webhook,
    clusters: &[String],
) -> Result<()> {
    let clusters = clusters.to_vec();
    let url = format!("https://{}{WEBHOOK_PATH}", webhook.addr);
    let ca = ks::hub_ca_pem(testbed).await?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca)?)
        .timeout(Duration::from_secs(10))
        .build()?;
    let http = Arc::new(http);
    let clusters = Arc::new(clusters);
    let (direct, direct_errors) = open_loop(args.rate, args.webhook_seconds, |i| {
        let http = http.clone();
        let url = url.clone();
        let review = admission_review(i, args.partitions, &clusters);
        async move {
            let answer: serde_json::Value = http
                .post(&url)
                .json(&review)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            if answer["response"]["allowed"] != json!(true) {
                bail!("refused: {answer}");
            }
            Ok(())
        }
    })
    .await;
    latencies(
        &format!(
            "webhook, straight to the hub ({} req/s, {} topics present)",
            args.rate, args.topics
        ),
        direct,
        direct_errors,
    );
    let client = testbed.mgmt().client();
    let (through, through_errors) = open_loop(args.rate, args.webhook_seconds, |i| {
        let client = client.clone();
        let clusters = clusters.clone();
        let partitions = args.partitions;
        async move {
            let api: Api<FederatedKafkaTopic> = Api::namespaced(client, NS);
            let name = format!("probe-{i:06}");
            let object =
                ks::topic_object(NS, &name, topic_spec(100_000 + i, partitions, &clusters));
            let mut params = kube::api::PatchParams::apply(ks::FIELD_MANAGER).force();
            params.dry_run = true;
            api.patch(&name, &params, &kube::api::Patch::Apply(&object))
                .await?;
            Ok(())
        }
    })
    .await;
    latencies(
        &format!(
            "dry-run create through the kube-apiserver, webhook included ({} req/s)",
            args.rate
        ),
        through,
        through_errors,
    );
    Ok(())
}

/// An AdmissionReview for creating a fresh topic, as the kube-apiserver sends it.
fn admission_review(i: usize, partitions: i32, clusters: &[String]) -> serde_json::Value {
    let name = format!("review-{i:06}");
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("00000000-0000-0000-0000-{i:012}"),
            "kind": {"group": "accord.io", "version": "v1beta1", "kind": "FederatedKafkaTopic"},
            "resource": {"group": "accord.io", "version": "v1beta1", "resource": "federatedkafkatopics"},
            "requestKind": {"group": "accord.io", "version": "v1beta1", "kind": "FederatedKafkaTopic"},
            "requestResource": {"group": "accord.io", "version": "v1beta1", "resource": "federatedkafkatopics"},
            "name": name,
            "namespace": NS,
            "operation": "CREATE",
            "userInfo": {"username": "kafka-bench"},
            "object": ks::topic_object(NS, &name, topic_spec(200_000 + i, partitions, clusters)),
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        }
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let testbed = Testbed::builder().members(3).start().await?;
    let result = run(&testbed, &args).await;
    if result.is_err() {
        eprintln!("{}", testbed.log_tails(30));
    }
    result
}
