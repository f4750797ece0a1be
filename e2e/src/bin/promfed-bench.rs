//! Prometheus federation config propagation on real parts: a PrometheusFederation edit on
//! the management cluster → hub → agents → ConfigMap in each member → reloader → the member's
//! federation Prometheus loads it and confirms → status; and the same for the global tier on
//! the management side.
//!
//! Each edit changes `match[]`; the time runs from the API server accepting the edit until
//! every member's placement is `Synced` with the hash of the config holding that edit (what
//! the reloader confirmed from Prometheus itself), and until the global tier is. Over the
//! edits, the writes the management kube-apiserver served (its own `/metrics`) per policy.
//!
//! ```text
//! cargo run --release -p accord-e2e --bin promfed-bench -- --edits 50 --debounce-ms 1000
//! ```

use std::time::{Duration, Instant};

use accord_e2e::Testbed;
use accord_e2e::apiserver_writes::{Meter, Report, WriteKind};
use accord_e2e::promfed::{FederationOptions, ReloaderOptions};
use accord_e2e::promfed_scenario::{self, Scenario, ScenarioOptions, TENANTS};
use accord_e2e::stats::pct;
use accord_e2e::wait::Check;
use anyhow::{Result, bail};
use clap::Parser;

/// Times Prometheus federation config propagation on real parts: each PrometheusFederation
/// edit until every member's federation Prometheus and the global tier have loaded and
/// confirmed it, and counts the writes the management kube-apiserver served per policy.
#[derive(Debug, Parser)]
#[command(name = "promfed-bench", args_override_self = true)]
struct Args {
    /// Number of PrometheusFederation edits to time, one after the other.
    #[arg(long, value_name = "N", default_value_t = 50)]
    edits: u32,
    /// The reloader's debounce, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    debounce_ms: u64,
}

fn summary(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    if samples.is_empty() {
        println!("{what}: no samples");
        return;
    }
    println!(
        "{what}: n={} p50={:.2}s p90={:.2}s p99={:.2}s max={:.2}s",
        samples.len(),
        pct(&samples, 0.5).as_secs_f64(),
        pct(&samples, 0.9).as_secs_f64(),
        pct(&samples, 0.99).as_secs_f64(),
        samples[samples.len() - 1].as_secs_f64(),
    );
}

fn spec(clusters: &[String], edit: u32) -> serde_json::Value {
    serde_json::json!({
        "placement": {"clusters": clusters},
        "tenantSelector": {"namespaces": TENANTS},
        "match": [format!("{{job=\"tenant\",edit_{edit}_=\"\"}}")],
        "scrapeInterval": "5s",
        "scrapeTimeout": "5s",
        "global": {"enabled": true},
    })
}

/// Polls `check` every 20 ms (finer than the figures measured) until it is ready.
async fn poll<F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Check<accord_crds::PrometheusFederationStatus>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let reason = match check().await? {
            Check::Ready(_) => return Ok(()),
            Check::NotYet(reason) => reason,
        };
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}: {reason}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn run(testbed: &Testbed, args: &Args) -> Result<()> {
    let reloader = ReloaderOptions {
        debounce: Duration::from_millis(args.debounce_ms),
        log_filter: "info".to_owned(),
        ..ReloaderOptions::default()
    };
    let s = Scenario::start(
        testbed,
        ScenarioOptions {
            name: "bench",
            members: &[0, 1, 2],
            tenants: ScenarioOptions::tenant_defaults(),
            federation: FederationOptions::with_reloader(reloader),
            global: true,
        },
    )
    .await?;
    let (ns, name) = ("bench-pfed", "tenants");
    promfed_scenario::apply(testbed, ns, name, spec(&s.clusters, 0)).await?;
    let marker = |edit: u32| format!("edit_{edit}_=");
    s.wait_confirmed(ns, name, &marker(0), true, Duration::from_secs(120))
        .await?;
    let timeout = Duration::from_secs(60);
    let (mut members, mut global) = (Vec::new(), Vec::new());
    let meter = Meter::start(
        testbed.mgmt().client(),
        testbed.http(),
        Some(format!("{}/metrics", s.fleet.hub.http)),
    )
    .await?;
    let measured = Instant::now();
    for edit in 1..=args.edits {
        let start = Instant::now();
        promfed_scenario::apply(testbed, ns, name, spec(&s.clusters, edit)).await?;
        let want = marker(edit);
        poll("members", timeout, || s.confirmed(ns, name, &want, false)).await?;
        members.push(start.elapsed());
        poll("global tier", timeout, || {
            s.confirmed(ns, name, &want, true)
        })
        .await?;
        global.push(start.elapsed());
    }
    let seconds = measured.elapsed().as_secs_f64();
    let writes = meter.finish().await?;
    println!(
        "PrometheusFederation edit → loaded and confirmed ({} members, 2 tenants each, reloader debounce {} ms):",
        s.clusters.len(),
        args.debounce_ms
    );
    summary("  every member Synced with the new config", members);
    summary("  global tier Synced with the new config", global);
    let phase = format!(
        "one PrometheusFederation was edited {} times, each until confirmed everywhere",
        args.edits
    );
    print!(
        "{}",
        writes.render(&Report {
            phase: &phase,
            objects: 1.0,
            unit: "policy",
            seconds: Some(seconds),
            user: &[(
                WriteKind::new("prometheusfederations", "APPLY"),
                f64::from(args.edits)
            )],
        })
    );
    Ok(())
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
