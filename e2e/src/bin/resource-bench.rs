//! FederatedResources at scale on real parts: N FederatedResources (default 1,000), each a
//! Deployment of one pause pod, a headless Service and a ConfigMap for every one of three
//! members, applied to the management kube-apiserver → hub → agents → each member's
//! kube-apiserver (kwok makes the pods Ready).
//!
//! Figures, each as measured (nothing is asserted):
//! - per member, how long until its API server (watched) holds every object, in objects per
//!   second from the first apply, and until every placement there is `Synced`;
//! - how long until every FederatedResource is `Applied=True`, and `Available=True`;
//! - the writes the management kube-apiserver served meanwhile, per FederatedResource,
//!   the benchmark's own applies apart; the hub's and agents' memory and CPU;
//! - one edit (a ConfigMap value, by server-side apply of the FederatedResource) until that
//!   ConfigMap holds the new value in every member, watched: p50/p99/max over `--edits`;
//! - the hub stopped and started again with N present, and one new FederatedResource
//!   applied as it starts: how long from the hub's start until its ConfigMap is in every
//!   member.
//!
//! With `--floor`, the same work done without Accord in the same run, in a namespace of its
//! own (`bench-fres-floor`, same object names) so that neither sees the other's objects:
//! - before Accord's phase (hub and agents started, idle): the same N bundles (the
//!   Deployment, headless Service and ConfigMap each FederatedResource delivers) applied
//!   server-side straight to every member's API server, 16 bundles at a time per member as
//!   the agent applies (its `MAX_CONCURRENT_APPLIES`), the members in parallel, timed by
//!   the same kind of watches ([`DeliveryWatch`] on that namespace) until each member holds
//!   every object: objects/s per member beside Accord's, and the ratio Accord / floor (aim
//!   ≥ 0.8×). Accord's clock starts once every floor Deployment is Available in every
//!   member, so the controllers have finished the floor's pods;
//! - during Accord's edits, each edit followed by the floor's: the same ConfigMap value
//!   applied straight to the floor's ConfigMap in every member in parallel, until the watches
//!   see it in all of them; p50/p99 beside Accord's and the ratios (aim p99 ≤ 1.5×).
//!
//! ```text
//! cargo build --release --bin accord-hub --bin accord-agent --bin resource-bench
//! $CARGO_TARGET_DIR/release/resource-bench --objects 1000 --members 3 --edits 50 --floor
//! ```
//!
//! Figures: docs/benchmarks.md.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use accord_common::distribution::PlacedKind;
use accord_common::runtime::AbortOnDrop;
use accord_e2e::apiserver_writes::{Meter, Report, WriteKind, Writes};
use accord_e2e::fleet::{Fleet, ensure_namespace};
use accord_e2e::placement_record::{RecordWatch, Stages};
use accord_e2e::resource_scenario::{
    DeliveryWatch, MANIFESTS, Seen, SeenReader, apply_bundle_directly, apply_config_map_directly,
    apply_resource, config_map, deployments_available, resource_object,
};
use accord_e2e::stats::pct;
use accord_e2e::testbed::{cpu_seconds, rss_bytes};
use accord_e2e::{Cluster, Testbed};
use accord_hub::store::Keyspace;
use anyhow::Result;
use clap::Parser;
use clap::builder::RangedU64ValueParser;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Event;

/// FederatedResources at scale on real parts: N FederatedResources (a Deployment, a headless
/// Service and a ConfigMap each) applied to the management kube-apiserver, delivered by the
/// hub and agents to every member; then one edit at a time, and the hub restarted with all N
/// present. Prints the figures as measured (nothing is asserted).
#[derive(Debug, Parser)]
#[command(name = "resource-bench", args_override_self = true)]
struct Args {
    /// Number of FederatedResources to apply.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = positive())]
    objects: usize,
    /// Number of member clusters; every FederatedResource is placed in each.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = positive())]
    members: usize,
    /// Number of ConfigMap edits to time, one at a time, after the applies.
    #[arg(long, value_name = "N", default_value_t = 50)]
    edits: usize,
    /// Server-side applies of FederatedResources in flight at once.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = positive())]
    concurrency: usize,
    /// Seconds to wait for every FederatedResource to be Available in every member.
    #[arg(long, value_name = "SECONDS", default_value_t = 1200)]
    timeout: u64,
    /// Stop the hub with SIGKILL rather than SIGTERM before restarting it (the new hub then
    /// waits out the election TTL).
    #[arg(long)]
    kill_hub: bool,
    /// Also measure the floor in the same run: the same bundles and edits applied straight
    /// to every member, without Accord.
    #[arg(long)]
    floor: bool,
}

/// A count of at least one.
fn positive() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..)
}

const NS: &str = "bench-fres";
/// The floor's namespace: the same object names, apart from Accord's.
const FLOOR_NS: &str = "bench-fres-floor";
/// Bundles the floor applies at once per member, as the agent does.
const FLOOR_CONCURRENCY: usize = 16;
const PREFIX: &str = "app-";
/// The hub's etcd key prefix in this bench.
const HUB_PREFIX: &str = "/bench-rbench/";
const PROBE: &str = "probe-restart";

fn name(i: usize) -> String {
    format!("{PREFIX}{i:05}")
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// `at - t0`, when `at` is known.
fn since(t0: Instant, at: Option<Instant>) -> Option<Duration> {
    at.map(|at| at.saturating_duration_since(t0))
}

fn print_latencies(what: &str, samples: &mut [Duration]) {
    samples.sort();
    if samples.is_empty() {
        println!("  {what}: no samples");
        return;
    }
    println!(
        "  {what}: n={} p50={:.1}ms p90={:.1}ms p99={:.1}ms max={:.1}ms",
        samples.len(),
        ms(pct(samples, 0.5)),
        ms(pct(samples, 0.9)),
        ms(pct(samples, 0.99)),
        ms(samples[samples.len() - 1]),
    );
}

/// The hub's and each agent's name, resident memory and CPU seconds so far.
fn processes(testbed: &Testbed, fleet: &Fleet<'_>) -> Vec<(String, u64, f64)> {
    let one = |name: String, id| {
        let pid = testbed.process_info(id).pid;
        (name, rss_bytes(pid), cpu_seconds(pid))
    };
    let mut out = vec![one("hub".to_owned(), fleet.hub.id)];
    for (cluster, agent) in &fleet.agents {
        if let Some(id) = agent.process {
            out.push(one(format!("agent {cluster}"), id));
        }
    }
    out
}

/// Each process's RSS now and the CPU seconds it used since `before` (the same processes).
fn usage(now: &[(String, u64, f64)], before: &[(String, u64, f64)]) -> String {
    now.iter()
        .map(|(name, rss, cpu)| {
            let earlier = before
                .iter()
                .find(|(n, _, _)| n == name)
                .map_or(0.0, |b| b.2);
            format!(
                "{name} {:.1} MiB RSS, {:.1} CPU s",
                mib(*rss),
                (cpu - earlier).max(0.0)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// CPU seconds each of the testbed's processes (API servers, their etcd, controllers,
/// kwok, the hub and the agents) used so far, by name.
fn cpu_by_process(testbed: &Testbed) -> BTreeMap<String, f64> {
    testbed
        .processes()
        .into_iter()
        .map(|p| (p.name, cpu_seconds(p.pid)))
        .collect()
}

/// The CPU seconds each process used between two readings, largest first, and their sum,
/// in one line.
fn cpu_line(now: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> String {
    let mut used: Vec<(&str, f64)> = now
        .iter()
        .map(|(name, cpu)| {
            let earlier = before.get(name).copied().unwrap_or(0.0);
            (name.as_str(), (cpu - earlier).max(0.0))
        })
        .filter(|(_, cpu)| *cpu >= 0.05)
        .collect();
    used.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = used.iter().map(|(_, cpu)| cpu).sum();
    let each: Vec<String> = used
        .iter()
        .map(|(name, cpu)| format!("{name} {cpu:.1}"))
        .collect();
    format!("{total:.1} CPU s: {}", each.join(", "))
}

/// Every request (watches apart) each member's API server served so far.
async fn member_requests(members: &[&Cluster]) -> Result<Vec<Writes>> {
    futures::future::try_join_all(
        members
            .iter()
            .map(|m| async move { Writes::scrape_requests(&m.client()).await }),
    )
    .await
}

/// What the testbed used so far: every process's CPU seconds and every member API
/// server's requests. Two readings tell a phase's use.
struct Used {
    cpu: BTreeMap<String, f64>,
    requests: Vec<Writes>,
}

impl Used {
    async fn read(testbed: &Testbed, members: &[&Cluster]) -> Result<Self> {
        let cpu = cpu_by_process(testbed);
        Ok(Self {
            cpu,
            requests: member_requests(members).await?,
        })
    }

    /// Prints what was used between `before` and this reading, for `bundles` bundles.
    fn print_since(&self, before: &Self, clusters: &[String], bundles: f64) {
        println!(
            "  CPU until every object was in every member: {}",
            cpu_line(&self.cpu, &before.cpu)
        );
        println!("  the members' API servers served meanwhile (every client):");
        print_requests(clusters, &self.requests, &before.requests, bundles);
    }
}

/// Per member, the requests its API server served between two readings, per bundle, by
/// resource and verb (the largest), from every client: the applier's (Accord's agent or
/// the floor's bench) and the member's own controllers'.
fn print_requests(clusters: &[String], now: &[Writes], before: &[Writes], bundles: f64) {
    for ((cluster, now), before) in clusters.iter().zip(now).zip(before) {
        let made = now.since(before);
        let mut kinds: Vec<_> = made.0.iter().collect();
        kinds.sort_by(|a, b| b.1.total_cmp(a.1));
        let top: Vec<String> = kinds
            .iter()
            .filter(|(_, n)| **n / bundles >= 0.05)
            .map(|(k, n)| format!("{} {} {:.2}", k.resource, k.verb, *n / bundles))
            .collect();
        println!(
            "    {cluster}: {:.2} requests per bundle ({})",
            made.total() / bundles,
            top.join(", ")
        );
    }
}

/// Prints where the edits' time went ([`Stages`]).
fn print_stages(stages: &mut Stages) {
    println!("  where each edit's time went (stages add up to the edit's total):");
    print_latencies(
        "  (a) apply sent → the hub's placement record in its etcd",
        &mut stages.to_record,
    );
    print_latencies(
        "  (b) record → the new value in the first member",
        &mut stages.to_first,
    );
    print_latencies("  (c) first member → last member", &mut stages.to_last);
}

/// One progress line: how far the delivery got.
fn progress_line(seen: &Seen, t0: Instant) -> String {
    let members: Vec<String> = (0..seen.members.len())
        .map(|m| seen.present_in(m).to_string())
        .collect();
    format!(
        "{:>6.1}s: objects in members [{}] of {}; Synced {:?}; Applied {}, Available {} of {}",
        secs(t0.elapsed()),
        members.join(", "),
        seen.expected * MANIFESTS,
        seen.synced.values().collect::<Vec<_>>(),
        seen.applied,
        seen.available,
        seen.expected
    )
}

async fn run(testbed: &Testbed, args: &Args) -> Result<()> {
    let clusters: Vec<String> = (0..args.members).map(|i| format!("rbench-{i}")).collect();
    let agents: Vec<(&str, usize)> = clusters
        .iter()
        .enumerate()
        .map(|(i, c)| (c.as_str(), i))
        .collect();
    // The agents' default Lease (15 s), not the tests' 2 s: a member API server this busy
    // answers a renewal late, and an agent that lost its Lease stops writing.
    let mut fleet = Fleet::start_with_agent_args(
        testbed,
        "rbench",
        HUB_PREFIX,
        &[],
        &["--lease-duration", "15s"],
        &agents,
    )
    .await?;
    for cluster in std::iter::once(testbed.mgmt()).chain(testbed.members()) {
        ensure_namespace(cluster, NS).await?;
        if args.floor {
            ensure_namespace(cluster, FLOOR_NS).await?;
        }
    }
    let members: Vec<_> = testbed.members().iter().collect();
    let watch = DeliveryWatch::start(
        testbed.mgmt(),
        &members,
        &clusters,
        NS,
        PREFIX,
        args.objects,
    );
    let floor_watch = args.floor.then(|| {
        DeliveryWatch::start(
            testbed.mgmt(),
            &members,
            &clusters,
            FLOOR_NS,
            PREFIX,
            args.objects,
        )
    });
    // Every watch listed (empty) before the clock starts.
    watch.listed(Duration::from_secs(60)).await?;
    if let Some(floor) = &floor_watch {
        floor.listed(Duration::from_secs(60)).await?;
    }
    let client = testbed.mgmt().client();
    let hub_metrics = |fleet: &Fleet<'_>| format!("{}/metrics", fleet.hub.http);
    let running = |fleet: &Fleet<'_>| -> Result<()> {
        testbed.ensure_running(fleet.hub.id)?;
        for agent in fleet.agents.values() {
            if let Some(id) = agent.process {
                testbed.ensure_running(id)?;
            }
        }
        Ok(())
    };
    println!(
        "FederatedResource bench: {} FederatedResources × {MANIFESTS} manifests (Deployment of \
         1 pause pod, headless Service, ConfigMap) × {} members, {} concurrent applies; \
         release hub and agents (agent Lease 15 s); kwok members",
        args.objects, args.members, args.concurrency
    );

    // 0. The floor: the same bundles straight to every member, before Accord's phase.
    let floor_rates = match &floor_watch {
        Some(floor_watch) => Some(floor(testbed, args, floor_watch, &members, &clusters).await?),
        None => None,
    };

    // 1. Apply every FederatedResource; follow members and status by watch.
    let meter = Meter::start(client.clone(), testbed.http(), Some(hub_metrics(&fleet))).await?;
    let cpu_before = processes(testbed, &fleet);
    let used_before = Used::read(testbed, &members).await?;
    let t0 = Instant::now();
    let progress = print_progress(watch.reader(), t0);
    let apply = async {
        let results = futures::stream::iter(0..args.objects)
            .map(|i| {
                let client = client.clone();
                let object = resource_object(NS, &name(i), &clusters, "v0");
                async move {
                    let start = Instant::now();
                    apply_resource(&client, &object).await?;
                    anyhow::Ok(start.elapsed())
                }
            })
            .buffer_unordered(args.concurrency)
            .collect::<Vec<_>>()
            .await;
        let latencies = results.into_iter().collect::<Result<Vec<_>>>()?;
        anyhow::Ok((t0.elapsed(), latencies))
    };
    // What every process used, and the members served, until every object was in every
    // member (as the floor's are read).
    let delivered = async {
        watch
            .wait_for(
                "every object in every member",
                Duration::from_secs(args.timeout),
                || running(&fleet),
                |s| s.members.iter().all(|m| m.all.is_some()).then_some(()),
            )
            .await?;
        Used::read(testbed, &members).await
    };
    let (applied, used, ()) = tokio::try_join!(apply, delivered, async {
        watch
            .wait_for(
                "every FederatedResource Available and every object in every member",
                Duration::from_secs(args.timeout),
                || running(&fleet),
                |s| {
                    (s.all_available.is_some()
                        && s.all_applied.is_some()
                        && s.all_synced.len() == args.members
                        && s.members.iter().all(|m| m.all.is_some()))
                    .then_some(())
                },
            )
            .await
    })?;
    drop(progress);
    let (apply_took, mut apply_latencies) = applied;
    let done = watch.read(|s| {
        [s.all_applied, s.all_available]
            .into_iter()
            .chain(s.all_synced.values().copied().map(Some))
            .chain(s.members.iter().map(|m| m.all))
            .flatten()
            .max()
    });
    let seconds = secs(since(t0, done).unwrap_or_default());
    let trailing = meter
        .settle(Duration::from_secs(2), Duration::from_secs(60))
        .await?;
    let writes = meter.finish().await?;
    let n = args.objects as f64;
    let objects = n * MANIFESTS as f64;

    println!(
        "1. Apply {} FederatedResources ({:.0} objects per member): the applies took {:.1}s",
        args.objects,
        objects,
        secs(apply_took)
    );
    watch.read(|s| {
        for (m, cluster) in clusters.iter().enumerate() {
            let member = &s.members[m];
            let all = since(t0, member.all).unwrap_or_default();
            let first = since(t0, member.first).unwrap_or_default();
            let synced = since(t0, s.all_synced.get(cluster).copied()).unwrap_or_default();
            println!(
                "  {cluster}: every object in the member's API server after {:.1}s \
                 ({:.0} objects/s from the first apply; first object after {:.2}s); every \
                 placement Synced after {:.1}s ({:.0} objects/s)",
                secs(all),
                objects / secs(all).max(1e-3),
                secs(first),
                secs(synced),
                objects / secs(synced).max(1e-3),
            );
        }
        let applied = since(t0, s.all_applied).unwrap_or_default();
        let available = since(t0, s.all_available).unwrap_or_default();
        println!(
            "  every FederatedResource Applied=True after {:.1}s ({:.0} FederatedResources/s, \
             {:.0} objects/s per member); Available=True after {:.1}s",
            secs(applied),
            n / secs(applied).max(1e-3),
            objects / secs(applied).max(1e-3),
            secs(available),
        );
    });
    print_latencies(
        "one apply (server-side apply of a new FederatedResource)",
        &mut apply_latencies,
    );
    used.print_since(&used_before, &clusters, n);
    if let Some(floor_rates) = &floor_rates {
        println!(
            "  against the floor (measured before this phase, same run; objects/s per member \
             until its API server held every object):"
        );
        watch.read(|s| {
            for ((m, cluster), floor) in clusters.iter().enumerate().zip(floor_rates) {
                let all = secs(since(t0, s.members[m].all).unwrap_or_default());
                let accord = objects / all.max(1e-3);
                println!(
                    "    {cluster}: floor {floor:.0} objects/s, Accord {accord:.0} objects/s, \
                     ratio {:.2}× (aim ≥ 0.8×)",
                    accord / floor.max(1e-9)
                );
            }
        });
    }
    println!(
        "  at the end (CPU over the phase): {}",
        usage(&processes(testbed, &fleet), &cpu_before)
    );
    println!(
        "  the hub's last write after everything was Available: {:.1}s later (counted below)",
        secs(trailing)
    );
    let user = n;
    let beyond = writes.apiserver.total() - user;
    println!(
        "  management API-server writes beyond the bench's {} applies: {:.0} ({:.2} per \
         FederatedResource: status PATCH {:.2}, object PATCH {:.2}, Events {:.2})",
        args.objects,
        beyond,
        beyond / n,
        writes.apiserver.get("federatedresources/status", "PATCH") / n,
        writes.apiserver.get("federatedresources", "PATCH") / n,
        (writes.apiserver.get("events", "POST") + writes.apiserver.get("events", "PATCH")) / n,
    );
    println!("  {}", events_by_reason(&client).await?);
    print!(
        "{}",
        writes.render(&Report {
            phase: "applying every FederatedResource until each was Available everywhere, and \
                    the hub's writes that trailed it",
            objects: n,
            unit: "FederatedResource",
            seconds: Some(seconds),
            user: &[(WriteKind::new("federatedresources", "APPLY"), user)],
        })
    );

    // 2. One edit at a time: a ConfigMap value, until every member holds it.
    let meter = Meter::start(client.clone(), testbed.http(), Some(hub_metrics(&fleet))).await?;
    let mut to_members = Vec::new();
    let mut to_status = Vec::new();
    let mut apply_calls = Vec::new();
    let mut floor_edits = Vec::new();
    let mut stages = Stages::default();
    let targets: Vec<String> = (0..args.edits)
        .map(|e| name(e * args.objects / args.edits.max(1)))
        .collect();
    // The hub's placement record of each edited FederatedResource, watched from before its
    // edit (one watch each, in the hub's etcd).
    let keyspace = Keyspace::new(HUB_PREFIX);
    let mut records = Vec::new();
    for target in &targets {
        let key = keyspace.placements(PlacedKind::FederatedResource.as_str(), NS, target);
        records.push(RecordWatch::start(testbed, key).await?);
    }
    for (e, target) in targets.iter().enumerate() {
        let target = target.clone();
        let value = format!("edit-{e}");
        let start = Instant::now();
        let stored =
            apply_resource(&client, &resource_object(NS, &target, &clusters, &value)).await?;
        apply_calls.push(start.elapsed());
        let generation = stored.metadata.generation.unwrap_or(0);
        let everywhere = watch
            .wait_for(
                &format!("{target}'s ConfigMap = {value} in every member"),
                Duration::from_secs(60),
                || running(&fleet),
                |s| s.value_everywhere(&target, &value),
            )
            .await?;
        to_members.push(everywhere.saturating_duration_since(start));
        let first = watch
            .read(|s| s.value_first(&target, &value))
            .unwrap_or(everywhere);
        let recorded = records[e].wait_for(generation).await?;
        stages.record(start, recorded, first, everywhere);
        let applied = watch
            .wait_for(
                &format!("{target} Applied at generation {generation}"),
                Duration::from_secs(60),
                || running(&fleet),
                |s| {
                    s.resources
                        .get(&target)?
                        .applied
                        .filter(|(g, _)| *g >= generation)
                        .map(|(_, at)| at)
                },
            )
            .await?;
        to_status.push(applied.saturating_duration_since(start));
        if let Some(floor_watch) = &floor_watch {
            floor_edits.push(floor_edit(floor_watch, &members, &target, &value).await?);
        }
    }
    println!(
        "2. {} edits, one at a time, each a ConfigMap value changed by server-side apply of \
         its FederatedResource ({} present):",
        args.edits, args.objects
    );
    print_latencies(
        "edit → the new value in every member (watched)",
        &mut to_members,
    );
    print_stages(&mut stages);
    print_latencies("edit → Applied=True for the new generation", &mut to_status);
    print_latencies("the apply call itself", &mut apply_calls);
    if args.floor {
        print_latencies(
            "floor, after each edit: the same value applied straight to the ConfigMap in \
             every member in parallel → seen in every member (watched)",
            &mut floor_edits,
        );
        if !floor_edits.is_empty() && !to_members.is_empty() {
            let ratio = |q: f64| secs(pct(&to_members, q)) / secs(pct(&floor_edits, q)).max(1e-9);
            println!(
                "  edit latency, Accord / floor: p50 {:.2}×, p99 {:.2}× (aim p99 ≤ 1.5×)",
                ratio(0.5),
                ratio(0.99)
            );
        }
    }
    meter
        .settle(Duration::from_secs(2), Duration::from_secs(30))
        .await?;
    let writes = meter.finish().await?;
    print!(
        "{}",
        writes.render(&Report {
            phase: "the edits",
            objects: args.edits as f64,
            unit: "edit",
            seconds: None,
            user: &[(
                WriteKind::new("federatedresources", "APPLY"),
                args.edits as f64
            )],
        })
    );

    // 3. The hub stopped and started again with N present; one new FederatedResource
    // applied as it starts.
    let mut meter = Meter::start(client.clone(), testbed.http(), Some(hub_metrics(&fleet))).await?;
    // The new hub's CPU counts from its start; the agents' from here.
    let mut before_restart = processes(testbed, &fleet);
    before_restart.retain(|(name, _, _)| name != "hub");
    let stopping = Instant::now();
    if args.kill_hub {
        fleet.kill_hub()?;
    } else {
        testbed.stop_process(fleet.hub.id);
    }
    let stopped = stopping.elapsed();
    let started = Instant::now();
    let probe = async {
        apply_resource(&client, &resource_object(NS, PROBE, &clusters, "probe")).await?;
        let created = started.elapsed();
        let everywhere = watch
            .wait_for(
                "the probe's ConfigMap in every member",
                Duration::from_secs(300),
                || Ok(()),
                |s| s.value_everywhere(PROBE, "probe"),
            )
            .await?;
        let applied = watch
            .wait_for(
                "the probe Applied",
                Duration::from_secs(300),
                || Ok(()),
                |s| s.resources.get(PROBE)?.applied.map(|(_, at)| at),
            )
            .await?;
        anyhow::Ok((created, everywhere, applied))
    };
    let restart = async {
        fleet.restart_hub().await?;
        anyhow::Ok(started.elapsed())
    };
    let (ready, (created, everywhere, applied)) = tokio::try_join!(restart, probe)?;
    meter.hub_restarted(hub_metrics(&fleet));
    println!(
        "3. Hub {} (took {:.1}s) and started again with {} FederatedResources present:",
        if args.kill_hub {
            "killed (SIGKILL)"
        } else {
            "stopped (SIGTERM)"
        },
        secs(stopped),
        args.objects
    );
    println!(
        "  hub ready (/readyz) after {:.2}s; the new FederatedResource created after {:.2}s; \
         its ConfigMap in every member after {:.2}s; it is Applied=True after {:.2}s (all \
         since the hub's start)",
        secs(ready),
        secs(created),
        secs(everywhere.saturating_duration_since(started)),
        secs(applied.saturating_duration_since(started)),
    );
    let settled = meter
        .settle(Duration::from_secs(3), Duration::from_secs(120))
        .await?;
    let writes = meter.finish().await?;
    println!(
        "  the restarted hub's writes settled {:.1}s after the probe was Applied; \
         processes (CPU since the hub's start): {}",
        secs(settled),
        usage(&processes(testbed, &fleet), &before_restart)
    );
    print!(
        "{}",
        writes.render(&Report {
            phase: "the hub's restart with every FederatedResource present, and the probe",
            objects: n,
            unit: "FederatedResource",
            seconds: None,
            user: &[(WriteKind::new("federatedresources", "APPLY"), 1.0)],
        })
    );
    println!(
        "For comparison: Karmada's ResourceBinding → Work sync, about 200 Works/s in total \
         (karmada#7062); a Karmada controller restart with many objects took ~20 min to \
         apply a new one (karmada#5978)."
    );
    Ok(())
}

/// The floor of phase 1: every bundle applied straight to every member ([`FLOOR_NS`]),
/// [`FLOOR_CONCURRENCY`] at a time per member, the members in parallel, timed by
/// `floor_watch`; then waits until every floor Deployment is Available (the controllers
/// done with its pods) so that Accord's phase starts on quiet members. Prints the figures;
/// returns each member's objects/s (`clusters` name the members as the hub does).
async fn floor(
    testbed: &Testbed,
    args: &Args,
    floor_watch: &DeliveryWatch,
    members: &[&Cluster],
    clusters: &[String],
) -> Result<Vec<f64>> {
    let used_before = Used::read(testbed, members).await?;
    let t0 = Instant::now();
    let progress = print_progress(floor_watch.reader(), t0);
    let apply = futures::future::try_join_all(members.iter().map(|member| {
        let client = member.client();
        async move {
            futures::stream::iter(0..args.objects)
                .map(|i| {
                    let client = client.clone();
                    async move { apply_bundle_directly(&client, FLOOR_NS, &name(i), "v0").await }
                })
                .buffer_unordered(FLOOR_CONCURRENCY)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<_>>>()?;
            anyhow::Ok(t0.elapsed())
        }
    }));
    let (calls, ()) = tokio::try_join!(apply, async {
        floor_watch
            .wait_for(
                "every floor object in every member",
                Duration::from_secs(args.timeout),
                || Ok(()),
                |s| s.members.iter().all(|m| m.all.is_some()).then_some(()),
            )
            .await
    })?;
    let used = Used::read(testbed, members).await?;
    drop(progress);
    let objects = (args.objects * MANIFESTS) as f64;
    println!(
        "0. Floor (before Accord's phase; no Accord): the same {} bundles ({objects:.0} objects \
         per member) applied server-side straight to each member, {FLOOR_CONCURRENCY} at a \
         time per member, members in parallel, namespace {FLOOR_NS}:",
        args.objects
    );
    let rates = floor_watch.read(|s| {
        s.members
            .iter()
            .zip(&calls)
            .zip(clusters)
            .map(|((member, calls), cluster)| {
                let all = secs(since(t0, member.all).unwrap_or_default());
                let rate = objects / all.max(1e-3);
                println!(
                    "  {cluster} (its member): every object in its API server after {all:.1}s ({rate:.0} \
                     objects/s; the applies returned after {:.1}s)",
                    secs(*calls)
                );
                rate
            })
            .collect::<Vec<_>>()
    });
    used.print_since(&used_before, clusters, args.objects as f64);
    let available = deployments_available(
        members,
        FLOOR_NS,
        PREFIX,
        args.objects,
        Duration::from_secs(args.timeout),
    )
    .await?;
    println!(
        "  every floor Deployment Available in every member after {:.1}s (Accord's clock \
         starts after this)",
        secs(available.saturating_duration_since(t0))
    );
    Ok(rates)
}

/// One floor edit: ConfigMap `target`'s `value` applied straight to every member in
/// parallel ([`FLOOR_NS`]), until `floor_watch` sees it in all of them.
async fn floor_edit(
    floor_watch: &DeliveryWatch,
    members: &[&Cluster],
    target: &str,
    value: &str,
) -> Result<Duration> {
    let object = config_map(target, value);
    let start = Instant::now();
    futures::future::try_join_all(members.iter().map(|m| {
        let (client, object) = (m.client(), &object);
        async move { apply_config_map_directly(&client, FLOOR_NS, object).await }
    }))
    .await?;
    let everywhere = floor_watch
        .wait_for(
            &format!("floor {target}'s ConfigMap = {value} in every member"),
            Duration::from_secs(60),
            || Ok(()),
            |s| s.value_everywhere(target, value),
        )
        .await?;
    Ok(everywhere.saturating_duration_since(start))
}

/// The Events about FederatedResources in the bench's namespace, by type and reason, with
/// their counts (an aggregated Event counts each occurrence).
async fn events_by_reason(client: &kube::Client) -> Result<String> {
    let api: kube::Api<Event> = kube::Api::namespaced(client.clone(), NS);
    let mut by: BTreeMap<(String, String), (usize, i64)> = BTreeMap::new();
    for e in api.list(&Default::default()).await?.items {
        if e.involved_object.kind.as_deref() != Some("FederatedResource") {
            continue;
        }
        let entry = by
            .entry((e.type_.unwrap_or_default(), e.reason.unwrap_or_default()))
            .or_default();
        entry.0 += 1;
        entry.1 += i64::from(e.count.unwrap_or(1));
    }
    let parts: Vec<String> = by
        .iter()
        .map(|((type_, reason), (events, count))| {
            format!("{type_} {reason}: {events} Events, {count} occurrences")
        })
        .collect();
    Ok(format!(
        "Events about the FederatedResources: {}",
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join("; ")
        }
    ))
}

/// Prints a progress line every 5 s (on stderr) until dropped.
fn print_progress(seen: SeenReader, t0: Instant) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        tick.tick().await;
        loop {
            tick.tick().await;
            eprintln!("{}", seen.read(|s| progress_line(s, t0)));
        }
    }))
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
