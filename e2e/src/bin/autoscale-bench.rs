//! Autoscaling benchmark on real member clusters: a test-controlled exporter, a real
//! Prometheus, a real hub and real agents.
//!
//! - step latency: time from the exporter's value changing until every member Deployment
//!   runs its share of the new count, over many steps, at a 1 s and at a 15 s poll (each
//!   step starts at a random moment of the poll interval, so the figures include the wait
//!   for the next poll as a real load change would);
//! - cost: hub CPU and RSS with N autoscaled policies (15 s poll) against one Prometheus,
//!   measured over a fixed period once every policy is polling.
//!
//! ```text
//! cargo run --release -p accord-e2e --bin autoscale-bench -- --steps 20 --slow-steps 10 --policies 1000 --measure 60
//! ```

use accord_crds::CrossClusterScalePolicy;
use accord_e2e::Testbed;
use accord_e2e::exporter::Exporter;
use accord_e2e::federation::{Federation, ensure_namespace, pause_deployment};
use accord_e2e::prometheus::ScrapingPrometheus;
use accord_e2e::stats::pct;
use accord_e2e::testbed::{cpu_seconds, rss_bytes};
use anyhow::{Context as _, Result, bail};
use futures::{StreamExt as _, stream};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::watch;

const FM: &str = "accord-bench";
const LATENCY_NS: &str = "bench-autoscale";
const SCALE_NS: &str = "bench-autoscale-many";
const LOAD: &str = "accord_bench_load";

struct Args {
    steps: usize,
    slow_steps: usize,
    policies: usize,
    measure: u64,
    scrape_ms: u64,
    skip_latency: bool,
    skip_cost: bool,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        steps: 20,
        slow_steps: 10,
        policies: 1000,
        measure: 60,
        scrape_ms: 1000,
        skip_latency: false,
        skip_cost: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--steps" => a.steps = value()?.parse()?,
            "--slow-steps" => a.slow_steps = value()?.parse()?,
            "--policies" => a.policies = value()?.parse()?,
            "--measure" => a.measure = value()?.parse()?,
            "--scrape-ms" => a.scrape_ms = value()?.parse()?,
            "--skip-latency" => a.skip_latency = true,
            "--skip-cost" => a.skip_cost = true,
            other => bail!(
                "unknown flag {other}; flags: --steps N --slow-steps N --policies N --measure SECS --scrape-ms MS --skip-latency --skip-cost"
            ),
        }
    }
    Ok(a)
}

/// Latest `spec.replicas` per member, fed by a watch on each member's Deployment `web`.
fn watch_members(testbed: &Testbed) -> watch::Receiver<HashMap<usize, i32>> {
    let (tx, rx) = watch::channel(HashMap::new());
    let tx = std::sync::Arc::new(tx);
    for (i, member) in testbed.members().iter().enumerate() {
        let api: Api<Deployment> = Api::namespaced(member.client(), LATENCY_NS);
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default().fields("metadata.name=web"))
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = events.next().await {
                let Ok(d) = event else { continue };
                let replicas = d.spec.and_then(|s| s.replicas).unwrap_or_default();
                tx.send_modify(|m| {
                    m.insert(i, replicas);
                });
            }
        });
    }
    rx
}

/// Waits until the members' counts add up to `total` and every member's count differs
/// from `before`.
async fn wait_members(
    rx: &mut watch::Receiver<HashMap<usize, i32>>,
    members: usize,
    total: i32,
    before: &HashMap<usize, i32>,
    timeout: Duration,
) -> Result<HashMap<usize, i32>> {
    let done = |m: &HashMap<usize, i32>| {
        m.len() == members
            && m.values().sum::<i32>() == total
            && m.iter().all(|(k, v)| before.get(k) != Some(v))
    };
    tokio::time::timeout(timeout, async {
        loop {
            if done(&rx.borrow_and_update()) {
                return Ok(rx.borrow().clone());
            }
            if rx.changed().await.is_err() {
                bail!("member watches ended");
            }
        }
    })
    .await
    .with_context(|| format!("members never reached {total}: {:?}", rx.borrow()))?
}

/// The autoscaling block of a benchmark policy: every rise is a surge, every fall is
/// followed at once, and the rate limit allows one operation a second, so that what is
/// measured is the path from the metric to the members rather than the guards.
fn eager_autoscaling(url: &str, query: &str, poll: i32) -> serde_json::Value {
    serde_json::json!({
        "minReplicas": 1, "maxReplicas": 100,
        "metric": {"prometheus": {"url": url, "query": query}, "targetPerReplica": 100.0, "pollSeconds": poll},
        "dynamicThreshold": {"ewmaAlpha": 1.0, "windowSeconds": 1800, "stddevFactor": 0.0, "floorRatio": 0.0},
        "behavior": {"debounceMillis": 0, "cooldownSeconds": 0, "maxScaleOperationsPerMinute": 60,
                     "failureThreshold": 3, "breakerOpenSeconds": 5}
    })
}

async fn latency(
    testbed: &Testbed,
    exporter: &Exporter,
    prometheus: &ScrapingPrometheus,
    args: &Args,
) -> Result<()> {
    let clusters = ["as-1", "as-2", "as-3"];
    let _fed = Federation::start(
        testbed,
        "hub-autoscale-bench",
        "/bench-autoscale/",
        &[],
        &[(clusters[0], 0), (clusters[1], 1), (clusters[2], 2)],
    )
    .await?;
    for member in testbed.members() {
        ensure_namespace(member, LATENCY_NS).await?;
        let api: Api<Deployment> = Api::namespaced(member.client(), LATENCY_NS);
        api.patch(
            "web",
            &PatchParams::apply(FM).force(),
            &Patch::Apply(&pause_deployment("web", 1)),
        )
        .await?;
    }
    ensure_namespace(testbed.mgmt(), LATENCY_NS).await?;
    let policies: Api<CrossClusterScalePolicy> =
        Api::namespaced(testbed.mgmt().client(), LATENCY_NS);
    let query = format!("{LOAD}{{policy=\"web\"}}");
    let policy = |poll: i32| {
        let distribution: Vec<_> = clusters
            .iter()
            .map(|c| serde_json::json!({"cluster": c, "weight": 1}))
            .collect();
        serde_json::json!({
            "apiVersion": "accord.io/v1alpha1", "kind": "CrossClusterScalePolicy",
            "metadata": {"name": "web"},
            "spec": {"targetRef": {"name": "web"}, "desiredReplicas": 10, "distribution": distribution,
                     "failover": {"enabled": false},
                     "autoscaling": eager_autoscaling(&prometheus.url, &query, poll)}
        })
    };
    let mut members = watch_members(testbed);
    exporter.set(LOAD, &[("policy", "web")], 1000.0);
    policies
        .patch(
            "web",
            &PatchParams::apply(FM).force(),
            &Patch::Apply(&policy(1)),
        )
        .await?;
    // The starting count (10) divided, and a few samples so the threshold exists.
    let mut current = wait_members(
        &mut members,
        3,
        10,
        &HashMap::from([(0, 1), (1, 1), (2, 1)]),
        Duration::from_secs(60),
    )
    .await?;
    let mut rng = StdRng::seed_from_u64(0x00A5_CA1E);
    let mut high = false;
    for (poll, steps) in [(1, args.steps), (15, args.slow_steps)] {
        if steps == 0 {
            continue;
        }
        policies
            .patch(
                "web",
                &PatchParams::apply(FM).force(),
                &Patch::Apply(&policy(poll)),
            )
            .await?;
        // Three polls at the new interval before timing steps: the old schedule is gone
        // and the window holds enough samples for a threshold (a step before that would
        // wait for the trend rule and measure the warm-up instead).
        let from = samples_of(&policies, "web").await?;
        let deadline = Instant::now() + Duration::from_secs(10 * poll as u64 + 30);
        while samples_of(&policies, "web").await? < from + 3 {
            if Instant::now() > deadline {
                bail!("the policy did not poll three times at pollSeconds {poll}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut samples = Vec::new();
        for _ in 0..steps {
            // A random phase of the poll interval, as a real load change would have.
            tokio::time::sleep(Duration::from_secs_f64(
                rng.random::<f64>() * f64::from(poll),
            ))
            .await;
            high = !high;
            let (value, total) = if high { (2000.0, 20) } else { (1000.0, 10) };
            let started = Instant::now();
            exporter.set(LOAD, &[("policy", "web")], value);
            current = wait_members(
                &mut members,
                3,
                total,
                &current,
                Duration::from_secs(30 + 3 * poll as u64),
            )
            .await?;
            samples.push(started.elapsed());
        }
        samples.sort();
        println!(
            "metric step → all 3 member Deployments changed, pollSeconds {poll}, scrape {} ms, n = {}",
            args.scrape_ms,
            samples.len()
        );
        println!(
            "  min {:.2?}  p50 {:.2?}  p90 {:.2?}  p99 {:.2?}  max {:.2?}",
            pct(&samples, 0.0),
            pct(&samples, 0.5),
            pct(&samples, 0.9),
            pct(&samples, 0.99),
            pct(&samples, 1.0)
        );
    }
    policies.delete("web", &Default::default()).await?;
    Ok(())
}

/// `status.autoscaling.samples` of policy `name` (0 before the first answer).
async fn samples_of(api: &Api<CrossClusterScalePolicy>, name: &str) -> Result<i64> {
    let policy = api.get(name).await?;
    Ok(policy
        .status
        .and_then(|s| s.autoscaling)
        .and_then(|a| a.samples)
        .unwrap_or(0))
}

/// Sum of `status.autoscaling.samples` over the policies, and how many have one.
async fn polled(api: &Api<CrossClusterScalePolicy>) -> Result<(i64, usize)> {
    let list = api.list(&ListParams::default()).await?;
    let samples: Vec<i64> = list
        .items
        .iter()
        .filter_map(|p| p.status.as_ref()?.autoscaling.as_ref()?.samples)
        .filter(|s| *s > 0)
        .collect();
    Ok((samples.iter().sum(), samples.len()))
}

async fn cost(
    testbed: &Testbed,
    exporter: &Exporter,
    prometheus: &ScrapingPrometheus,
    args: &Args,
) -> Result<()> {
    let fed = Federation::start(
        testbed,
        "hub-autoscale-many",
        "/bench-autoscale-many/",
        &[],
        &[("many-1", 0)],
    )
    .await?;
    ensure_namespace(testbed.mgmt(), SCALE_NS).await?;
    let api: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), SCALE_NS);
    // Every policy its own series at twice the target: a steady count of 2, so the cost
    // measured is polling and status, not operations.
    let names: Vec<String> = (0..args.policies).map(|i| format!("p{i:04}")).collect();
    for name in &names {
        exporter.set(LOAD, &[("policy", name)], 200.0);
    }
    let created = Instant::now();
    let results: Vec<Result<()>> = stream::iter(names.iter().cloned())
        .map(|name| {
            let api = api.clone();
            let url = prometheus.url.clone();
            async move {
                let mut a = eager_autoscaling(&url, &format!("{LOAD}{{policy=\"{name}\"}}"), 15);
                a["dynamicThreshold"] = serde_json::json!({"ewmaAlpha": 0.3, "windowSeconds": 1800, "stddevFactor": 2.0, "floorRatio": 0.8});
                a["behavior"]["cooldownSeconds"] = 60.into();
                let policy = serde_json::json!({
                    "apiVersion": "accord.io/v1alpha1", "kind": "CrossClusterScalePolicy",
                    "metadata": {"name": name},
                    "spec": {"targetRef": {"name": name}, "desiredReplicas": 2,
                             "distribution": [{"cluster": "many-1", "weight": 1}],
                             "failover": {"enabled": false}, "autoscaling": a}
                });
                api.patch(&name, &PatchParams::apply(FM).force(), &Patch::Apply(&policy))
                    .await?;
                Ok(())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<_>>>()?;
    println!(
        "{} autoscaled policies created in {:.1?}",
        args.policies,
        created.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (_, polling) = polled(&api).await?;
        if polling == args.policies {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "only {polling} of {} policies polled within 5 minutes",
                args.policies
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    println!(
        "all polling {:.1?} after the first was created",
        created.elapsed()
    );

    let hub_pid = testbed.process_info(fed.hub.id).pid;
    let prometheus_pid = prometheus
        .process()
        .map(|id| testbed.process_info(id).pid)
        .context("Prometheus is not running")?;
    let apiserver_pid = testbed
        .process("mgmt/kube-apiserver")
        .map(|id| testbed.process_info(id).pid);
    let (samples0, _) = polled(&api).await?;
    let (hub0, prom0) = (cpu_seconds(hub_pid), cpu_seconds(prometheus_pid));
    let api0 = apiserver_pid.map(cpu_seconds);
    let started = Instant::now();
    let mut peak_rss = 0;
    while started.elapsed() < Duration::from_secs(args.measure) {
        peak_rss = peak_rss.max(rss_bytes(hub_pid));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let hub_cpu = cpu_seconds(hub_pid) - hub0;
    let prom_cpu = cpu_seconds(prometheus_pid) - prom0;
    let api_cpu = apiserver_pid.map(cpu_seconds).zip(api0).map(|(b, a)| b - a);
    let (samples1, _) = polled(&api).await?;
    let polls = samples1 - samples0;
    println!(
        "{} policies, pollSeconds 15, over {secs:.0} s: {polls} polls answered ({:.1}/s; {:.1}/s expected)",
        args.policies,
        polls as f64 / secs,
        args.policies as f64 / 15.0
    );
    println!(
        "  hub CPU {hub_cpu:.1} s ({:.1} % of one core), RSS {} MiB (peak {} MiB)",
        100.0 * hub_cpu / secs,
        rss_bytes(hub_pid) / (1024 * 1024),
        peak_rss / (1024 * 1024)
    );
    println!(
        "  Prometheus CPU {prom_cpu:.1} s ({:.1} %); management kube-apiserver CPU {}",
        100.0 * prom_cpu / secs,
        api_cpu.map_or("n/a".into(), |c| format!(
            "{c:.1} s ({:.1} %)",
            100.0 * c / secs
        ))
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let testbed = Testbed::builder().members(3).start().await?;
    let exporter = Exporter::start().await?;
    let mut prometheus = ScrapingPrometheus::start(
        &testbed,
        "bench",
        &testbed.dir().join("bench-prometheus"),
        Duration::from_millis(args.scrape_ms),
        &[exporter.address().to_string()],
    )
    .await?;
    let result = async {
        if !args.skip_latency {
            latency(&testbed, &exporter, &prometheus, &args).await?;
        }
        if !args.skip_cost {
            cost(&testbed, &exporter, &prometheus, &args).await?;
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    prometheus.stop(&testbed);
    if result.is_err() {
        eprintln!("{}", testbed.log_tails(30));
    }
    result
}
