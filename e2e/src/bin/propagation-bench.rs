//! Propagation and failover benchmark on three real member clusters: a real hub, three real
//! agents, a CrossClusterScalePolicy on the management cluster.
//!
//! - propagation: time from the CR change (the API server accepting the patch) until every
//!   member's Deployment has its new `spec.replicas`, seen through watches on the members;
//!   and the writes the management kube-apiserver served meanwhile (its own `/metrics`),
//!   per change;
//! - the floor, measured in the same run (each Accord change is followed by one): the same
//!   change applied straight to a Deployment of every member, in parallel, as a perfect
//!   federation would, until the same watches see it; Accord's figures are printed beside
//!   it with their ratio;
//! - where Accord's time goes, per change and summarized (p50/p99), measured from outside
//!   the hub and agents: (a) the CR patch sent → the hub's placement record for the policy
//!   (`<prefix>placements/CrossClusterScalePolicy/<ns>/<name>` in the hub's own etcd) at the
//!   change's `metadata.generation`, seen by a watch on that key (the bench's etcd client,
//!   TLS and the hub's user, as the testbed gives them); (b) the record seen → the first
//!   member's Deployment seen with its new `spec.replicas`; (c) the first member → the last
//!   member. The three add up to the propagation time. The floor's own first member and
//!   first → last are printed beside them. Each stage includes its watch's delivery to the
//!   bench (the API server's patch response, etcd's and the members' watch fan-out);
//! - failover: time from `kill -9` of one agent until its share is on the other clusters.
//!
//! Tracing is off, as by default (no `--otlp-endpoint`); `--with-tracing` starts Jaeger on
//! the testbed and points the hub and agents at it, to see what exporting costs.
//!
//! ```text
//! cargo run --release -p accord-e2e --bin propagation-bench -- --changes 100 --failovers 5
//! ```

use accord_common::distribution::PlacedKind;
use accord_crds::CrossClusterScalePolicy;
use accord_e2e::Testbed;
use accord_e2e::apiserver_writes::{Meter, Report, WriteKind};
use accord_e2e::fleet::{Fleet, ensure_namespace};
use accord_e2e::placement_record::{RecordWatch, Stages};
use accord_e2e::stats::pct;
use accord_hub::store::Keyspace;
use anyhow::{Context as _, Result};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, watch};

const NS: &str = "bench";
const FM: &str = "accord-bench";
/// The members' Deployment the floor is measured on.
const FLOOR: &str = "floor";
/// The hub's etcd key prefix in this bench.
const HUB_PREFIX: &str = "/bench/";

/// Times propagation and failover on three real member clusters: a CrossClusterScalePolicy
/// change until every member's Deployment runs it (beside the floor, the same change applied
/// straight to every member), and `kill -9` of an agent until its share runs elsewhere.
#[derive(Debug, Parser)]
#[command(name = "propagation-bench", args_override_self = true)]
struct Args {
    /// Number of desiredReplicas changes to time (each followed by the same change to the floor).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    changes: u64,
    /// Number of agent kills (kill -9) to time until the agent's share runs elsewhere.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    failovers: u64,
    /// Export traces: Jaeger on the testbed, the hub and agents with `--otlp-endpoint`.
    #[arg(long)]
    with_tracing: bool,
}

/// Latest `spec.replicas` per member and when the watch first saw that value, fed by a
/// watch on each member's Deployment `name`.
type Replicas = HashMap<usize, (i32, Instant)>;

/// Latest `spec.replicas` per member, fed by a watch on each member's Deployment `name`.
async fn watch_members(testbed: &Testbed, name: &str) -> watch::Receiver<Replicas> {
    let (tx, rx) = watch::channel(HashMap::new());
    let tx = Arc::new(Mutex::new(tx));
    for (i, member) in testbed.members().iter().enumerate() {
        let api: Api<Deployment> = Api::namespaced(member.client(), NS);
        let tx = tx.clone();
        let selector = format!("metadata.name={name}");
        tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default().fields(&selector))
                .applied_objects()
                .boxed();
            while let Some(Ok(d)) = events.next().await {
                let replicas = d.spec.and_then(|s| s.replicas).unwrap_or_default();
                let at = Instant::now();
                tx.lock().await.send_modify(|m| {
                    // A status update keeps the moment the value was first seen.
                    if m.get(&i).is_none_or(|(r, _)| *r != replicas) {
                        m.insert(i, (replicas, at));
                    }
                });
            }
        });
    }
    rx
}

/// Waits until every member of `want` has its replicas; when the first and the last of
/// them were first seen with it.
async fn wait_for(
    rx: &mut watch::Receiver<Replicas>,
    want: &[(usize, i32)],
) -> Result<(Instant, Instant)> {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let seen: Option<Vec<Instant>> = want
                .iter()
                .map(|(m, r)| {
                    rx.borrow()
                        .get(m)
                        .filter(|(have, _)| have == r)
                        .map(|(_, at)| *at)
                })
                .collect();
            if let Some(seen) = seen {
                let first = seen.iter().min().copied();
                let last = seen.iter().max().copied();
                if let (Some(first), Some(last)) = (first, last) {
                    return Ok((first, last));
                }
            }
            if rx.changed().await.is_err() {
                anyhow::bail!("the member watches ended");
            }
        }
    })
    .await
    .with_context(|| format!("members never reached {want:?}: {:?}", rx.borrow()))?
}

/// `d` in milliseconds.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `title`, then the p50/p90/p99/max of `sorted`.
fn print_spread(title: &str, sorted: &[Duration]) {
    println!("{title}, n = {}", sorted.len());
    println!(
        "  p50 {:?}  p90 {:?}  p99 {:?}  max {:?}",
        pct(sorted, 0.5),
        pct(sorted, 0.9),
        pct(sorted, 0.99),
        pct(sorted, 1.0)
    );
}

#[tokio::main]
async fn main() -> Result<()> {
    let Args {
        changes,
        failovers,
        with_tracing,
    } = Args::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let testbed = Testbed::builder().members(3).start().await?;
    let otlp = if with_tracing {
        let jaeger = accord_e2e::jaeger::Jaeger::start(&testbed).await?;
        println!("tracing on: exporting to {}", jaeger.otlp_endpoint());
        vec![
            "--otlp-endpoint".to_owned(),
            jaeger.otlp_endpoint().to_owned(),
        ]
    } else {
        println!("tracing off (no --otlp-endpoint)");
        Vec::new()
    };
    let otlp: Vec<&str> = otlp.iter().map(String::as_str).collect();
    let mut fed = Fleet::start_with_agent_args(
        &testbed,
        "hub-bench",
        HUB_PREFIX,
        &otlp,
        &otlp,
        &[("m1", 0), ("m2", 1), ("m3", 2)],
    )
    .await?;
    for member in testbed.members() {
        ensure_namespace(member, NS).await?;
        let api: Api<Deployment> = Api::namespaced(member.client(), NS);
        // `web` is Accord's to scale; `floor` is the bench's own, changed directly.
        for name in ["web", FLOOR] {
            let d = accord_e2e::fleet::pause_deployment(name, 1);
            api.patch(name, &PatchParams::apply(FM), &Patch::Apply(&d))
                .await?;
        }
    }
    let mut floor_members = watch_members(&testbed, FLOOR).await;
    let floor_apis: Vec<Api<Deployment>> = testbed
        .members()
        .iter()
        .map(|m| Api::namespaced(m.client(), NS))
        .collect();
    ensure_namespace(testbed.mgmt(), NS).await?;
    let policies: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), NS);
    let policy = |desired: i32| {
        serde_json::json!({
        "apiVersion": "accord.io/v1beta1", "kind": "CrossClusterScalePolicy", "metadata": {"name": "web"},
        "spec": {"targetRef": {"name": "web"}, "desiredReplicas": desired,
                 "distribution": [{"cluster": "m1", "weight": 1}, {"cluster": "m2", "weight": 1}, {"cluster": "m3", "weight": 1}],
                 "failover": {"enabled": true, "returnCooldownSeconds": 2}}})
    };
    let mut members = watch_members(&testbed, "web").await;
    let key = Keyspace::new(HUB_PREFIX).placements(
        PlacedKind::CrossClusterScalePolicy.as_str(),
        NS,
        "web",
    );
    let mut records = RecordWatch::start(&testbed, key).await?;
    policies
        .patch(
            "web",
            &PatchParams::apply(FM).force(),
            &Patch::Apply(&policy(3)),
        )
        .await?;
    wait_for(&mut members, &[(0, 1), (1, 1), (2, 1)]).await?;

    // Propagation: desiredReplicas 6, 9, 6, 9, ... (2 or 3 per cluster); after each, the
    // same change straight to every member's `floor`.
    let mut samples = Vec::new();
    let mut floor = Vec::new();
    // Per change: (a) patch → record, (b) record → first member, (c) first → last member;
    // the floor's patch → first member and first → last member.
    let mut stages = Stages::default();
    let (mut floor_first, mut floor_last) = (Vec::new(), Vec::new());
    println!(
        "per change (ms): total = (a) patch → hub's placement record + (b) record → first \
         member + (c) first → last member; floor: total = first member + first → last"
    );
    let meter = Meter::start(
        testbed.mgmt().client(),
        testbed.http(),
        Some(format!("{}/metrics", fed.hub.http)),
    )
    .await?;
    let measured = Instant::now();
    for i in 0..changes {
        let desired = if i % 2 == 0 { 6 } else { 9 };
        let each = desired / 3;
        let started = Instant::now();
        let patched = policies
            .patch(
                "web",
                &PatchParams::apply(FM).force(),
                &Patch::Apply(&policy(desired)),
            )
            .await?;
        let generation = patched.metadata.generation.unwrap_or_default();
        let (first, last) = wait_for(&mut members, &[(0, each), (1, each), (2, each)]).await?;
        let total = started.elapsed();
        samples.push(total);
        let recorded = records.wait_for(generation).await?;
        let (a, b, c) = stages.record(started, recorded, first, last);

        let started = Instant::now();
        let d = Patch::Apply(accord_e2e::fleet::pause_deployment(FLOOR, each));
        let params = PatchParams::apply(FM);
        futures::future::try_join_all(floor_apis.iter().map(|api| api.patch(FLOOR, &params, &d)))
            .await?;
        let (first, last) =
            wait_for(&mut floor_members, &[(0, each), (1, each), (2, each)]).await?;
        let floor_total = started.elapsed();
        floor.push(floor_total);
        floor_first.push(first.saturating_duration_since(started));
        floor_last.push(last.saturating_duration_since(first));
        println!(
            "  change {i:>3}: Accord {:>6.1} = (a) {:>6.1} + (b) {:>6.1} + (c) {:>6.1}; floor \
             {:>6.1} = {:>6.1} + {:>6.1}",
            ms(total),
            ms(a),
            ms(b),
            ms(c),
            ms(floor_total),
            ms(first.saturating_duration_since(started)),
            ms(last.saturating_duration_since(first)),
        );
    }
    drop(records);
    let seconds = measured.elapsed().as_secs_f64();
    let writes = meter.finish().await?;
    floor.sort();
    samples.sort();
    print_spread(
        "propagation (CR change → all 3 member Deployments updated)",
        &samples,
    );
    print_spread(
        "floor (the same change applied straight to all 3 member Deployments in parallel)",
        &floor,
    );
    let ratio = |q: f64| pct(&samples, q).as_secs_f64() / pct(&floor, q).as_secs_f64().max(1e-6);
    println!(
        "Accord / floor: p50 {:.2}×  p99 {:.2}×  (Accord beyond the floor at p99: {:?})",
        ratio(0.5),
        ratio(0.99),
        pct(&samples, 0.99).saturating_sub(pct(&floor, 0.99))
    );
    for v in [
        &mut stages.to_record,
        &mut stages.to_first,
        &mut stages.to_last,
        &mut floor_first,
        &mut floor_last,
    ] {
        v.sort();
    }
    let spread = |v: &[Duration]| {
        format!(
            "p50 {:>6.1} ms  p99 {:>6.1} ms",
            ms(pct(v, 0.5)),
            ms(pct(v, 0.99))
        )
    };
    println!("where Accord's time goes (each stage's own quantiles; they need not add up):");
    println!(
        "  (a) CR patch sent → the hub's placement record in its etcd: {}",
        spread(&stages.to_record)
    );
    println!(
        "  (b) record → first member's Deployment updated:            {}",
        spread(&stages.to_first)
    );
    println!(
        "  (c) first member → last member:                            {}",
        spread(&stages.to_last)
    );
    println!(
        "  floor: patches sent → first member updated:                {}",
        spread(&floor_first)
    );
    println!(
        "  floor: first member → last member:                         {}",
        spread(&floor_last)
    );
    print!(
        "{}",
        writes.render(&Report {
            phase: "changing desiredReplicas, each change until every member ran it",
            objects: changes as f64,
            unit: "change",
            seconds: Some(seconds),
            user: &[(
                WriteKind::new("crossclusterscalepolicies", "APPLY"),
                changes as f64
            )],
        })
    );

    // Failover: kill m3's agent; its share (3 of 9) moves to m1/m2 (5 and 4).
    policies
        .patch(
            "web",
            &PatchParams::apply(FM).force(),
            &Patch::Apply(&policy(9)),
        )
        .await?;
    wait_for(&mut members, &[(0, 3), (1, 3), (2, 3)]).await?;
    let mut failover = Vec::new();
    for _ in 0..failovers {
        let killed = Instant::now();
        fed.kill_agent("m3")?;
        wait_for(&mut members, &[(0, 5), (1, 4)]).await?;
        failover.push(killed.elapsed());
        fed.start_agent("m3")?;
        wait_for(&mut members, &[(0, 3), (1, 3), (2, 3)]).await?;
    }
    failover.sort();
    println!(
        "failover (kill -9 of an agent → its share running elsewhere), n = {}",
        failover.len()
    );
    println!(
        "  p50 {:?}  max {:?}",
        pct(&failover, 0.5),
        pct(&failover, 1.0)
    );
    Ok(())
}
