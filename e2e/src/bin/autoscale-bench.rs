//! Autoscaling benchmark on real member clusters: a test-controlled exporter, a real
//! Prometheus, a real hub and real agents.
//!
//! - step latency: time from the exporter's value changing until every member Deployment
//!   runs its share of the new count, over many steps, at a 1 s and at a 15 s poll (each
//!   step starts at a random moment of the poll interval, so the figures include the wait
//!   for the next poll as a real load change would);
//! - cost: hub CPU and RSS, the management kube-apiserver's CPU, and the writes it served
//!   (per policy and per second, from its own `/metrics`) with N autoscaled policies (15 s
//!   poll) against one Prometheus, measured over a fixed period once every policy is polling.
//!
//! ```text
//! cargo run --release -p accord-e2e --bin autoscale-bench -- --steps 20 --slow-steps 10 --policies 1000 --measure 60
//! ```

use accord_crds::CrossClusterScalePolicy;
use accord_e2e::Testbed;
use accord_e2e::apiserver_writes::{Meter, Report};
use accord_e2e::autoscale_scenario::{
    FIELD_MANAGER, MetricSource, Scenario, ScenarioOptions, no_failover,
};
use accord_e2e::stats::pct;
use accord_e2e::testbed::{cpu_seconds, rss_bytes};
use anyhow::{Context as _, Result, bail};
use clap::Parser;
use futures::{StreamExt as _, stream};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::watch;

const LATENCY_NS: &str = "bench-autoscale";
const SCALE_NS: &str = "bench-autoscale-many";

/// Autoscaling benchmark on real member clusters (a test-controlled exporter, a real
/// Prometheus, a real hub and real agents): the latency from a metric step until every member
/// runs its share, at a 1 s and a 15 s poll; then the hub's and the management
/// kube-apiserver's cost with many autoscaled policies polling one Prometheus.
#[derive(Debug, Parser)]
#[command(name = "autoscale-bench", args_override_self = true)]
struct Args {
    /// Metric steps to time at pollSeconds 1 (0 skips them).
    #[arg(long, value_name = "N", default_value_t = 20)]
    steps: usize,
    /// Metric steps to time at pollSeconds 15 (0 skips them).
    #[arg(long, value_name = "N", default_value_t = 10)]
    slow_steps: usize,
    /// Autoscaled policies (pollSeconds 15) in the cost measurement.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    policies: usize,
    /// Seconds over which the cost is measured once every policy is polling.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    measure: u64,
    /// How often Prometheus scrapes the test-controlled exporter, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    scrape_ms: u64,
    /// Skip the step-latency measurement.
    #[arg(long)]
    skip_latency: bool,
    /// Skip the cost measurement.
    #[arg(long)]
    skip_cost: bool,
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

async fn latency(testbed: &Testbed, args: &Args) -> Result<()> {
    let source = MetricSource::start(
        testbed,
        "bench-latency",
        Duration::from_millis(args.scrape_ms),
    )
    .await?;
    let s = Scenario::start(
        testbed,
        source,
        ScenarioOptions {
            name: "hub-autoscale-bench",
            namespace: LATENCY_NS,
            clusters: &["as-1", "as-2", "as-3"],
            hub_args: &[],
            deployments: &["web"],
        },
    )
    .await?;
    let policies: Api<CrossClusterScalePolicy> =
        Api::namespaced(testbed.mgmt().client(), LATENCY_NS);
    let query = MetricSource::query("web");
    let policy = |poll: i32| {
        s.policy(
            "web",
            "web",
            10,
            eager_autoscaling(&s.source.prometheus.url, &query, poll),
            no_failover(),
        )
    };
    let mut members = watch_members(testbed);
    s.source.set("web", 1000.0);
    s.apply_policy(&policy(1)).await?;
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
        s.apply_policy(&policy(poll)).await?;
        // Three polls at the new interval before timing steps: the old schedule is gone
        // and the window holds enough samples for a threshold (a step before that would
        // wait for the trend rule and measure the warm-up instead).
        let from = samples_of(&s, "web").await?;
        let deadline = Instant::now() + Duration::from_secs(10 * poll as u64 + 30);
        while samples_of(&s, "web").await? < from + 3 {
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
            s.source.set("web", value);
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

/// Answered polls of policy `name` so far (0 before the first), from the hub's state.
async fn samples_of(s: &Scenario<'_>, name: &str) -> Result<u64> {
    Ok(s.engine_state(name).await?.map_or(0, |st| st.samples))
}

/// Sum of the answered polls over the scenario's policies, and how many have one.
async fn polled(s: &Scenario<'_>) -> Result<(u64, usize)> {
    let samples: Vec<u64> = s
        .engine_states()
        .await?
        .values()
        .map(|st| st.samples)
        .filter(|n| *n > 0)
        .collect();
    Ok((samples.iter().sum(), samples.len()))
}

async fn cost(testbed: &Testbed, args: &Args) -> Result<()> {
    let source =
        MetricSource::start(testbed, "bench-cost", Duration::from_millis(args.scrape_ms)).await?;
    let s = Scenario::start(
        testbed,
        source,
        ScenarioOptions {
            name: "hub-autoscale-many",
            namespace: SCALE_NS,
            clusters: &["many-1"],
            hub_args: &[],
            deployments: &[],
        },
    )
    .await?;
    let api: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), SCALE_NS);
    // Every policy its own series at twice the target: a steady count of 2, so the cost
    // measured is polling and status, not operations.
    let names: Vec<String> = (0..args.policies).map(|i| format!("p{i:04}")).collect();
    for name in &names {
        s.source.set(name, 200.0);
    }
    let created = Instant::now();
    let results: Vec<Result<()>> = stream::iter(names.iter().cloned())
        .map(|name| {
            let api = api.clone();
            let url = s.source.prometheus.url.clone();
            let s = &s;
            async move {
                let mut a = eager_autoscaling(&url, &MetricSource::query(&name), 15);
                a["dynamicThreshold"] = serde_json::json!({"ewmaAlpha": 0.3, "windowSeconds": 1800, "stddevFactor": 2.0, "floorRatio": 0.8});
                a["behavior"]["cooldownSeconds"] = 60.into();
                let policy = s.policy(&name, &name, 2, a, no_failover());
                api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&policy))
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
        let (_, polling) = polled(&s).await?;
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
    // Two more minutes, so every policy's window holds a threshold and its first cooldown
    // is over: the figures are those of a steady load, not of each policy's first polls
    // (whose one-time transitions are each a status write).
    tokio::time::sleep(Duration::from_secs(120)).await;

    let hub_pid = testbed.process_info(s.hub().id).pid;
    let prometheus_pid = s
        .source
        .prometheus
        .process()
        .map(|id| testbed.process_info(id).pid)
        .context("Prometheus is not running")?;
    let apiserver_pid = testbed
        .process("mgmt/kube-apiserver")
        .map(|id| testbed.process_info(id).pid);
    let (samples0, _) = polled(&s).await?;
    let meter = Meter::start(
        testbed.mgmt().client(),
        testbed.http(),
        Some(format!("{}/metrics", s.hub().http)),
    )
    .await?;
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
    let writes = meter.finish().await?;
    let (samples1, _) = polled(&s).await?;
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
        "  management kube-apiserver CPU {} beside the hub's {hub_cpu:.1} s; Prometheus CPU {prom_cpu:.1} s ({:.1} %)",
        api_cpu.map_or("n/a".into(), |c| format!(
            "{c:.1} s ({:.1} % of one core)",
            100.0 * c / secs
        )),
        100.0 * prom_cpu / secs,
    );
    print!(
        "{}",
        writes.render(&Report {
            phase: "every policy polled at a steady load (no scale operations)",
            objects: args.policies as f64,
            unit: "policy",
            seconds: Some(secs),
            user: &[],
        })
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let testbed = Testbed::builder().members(3).start().await?;
    let result = async {
        if !args.skip_latency {
            latency(&testbed, &args).await?;
        }
        if !args.skip_cost {
            cost(&testbed, &args).await?;
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    if result.is_err() {
        eprintln!("{}", testbed.log_tails(30));
    }
    result
}
