//! Conversion latency through a real kube-apiserver: N FederatedKafkaTopics (default 1,000)
//! stored in v1beta1, then `kubectl get` of all of them, repeated, in the storage version
//! (no conversion) and in v1alpha1 (every object converted by the hub's webhook), p50/p99/max
//! of each printed side by side.
//!
//! The CRDs are the repository's (`crds/yaml/`) with their conversion webhook pointed at a
//! real `accord-hub` on loopback (its CA as caBundle). The benchmark holds the hub's
//! leadership itself, so the hub only serves webhooks and writes nothing while it measures.
//! Beside the latencies: the conversion requests the API server sent the hub during each
//! phase and the seconds they took (its own `/metrics`,
//! `apiserver_conversion_webhook_request_total` and
//! `apiserver_conversion_webhook_duration_seconds`), which shows where conversion happens:
//! the API server's watch cache keeps each served version's objects converted when they
//! were written, so a list answered from it needs no webhook call per request. Then one
//! GET per object by name in each version (read from etcd, converted on the request: one
//! webhook call per object in v1alpha1), total and per-GET quantiles.
//!
//! ```text
//! cargo build --release --bin accord-hub --bin conversion-bench
//! $CARGO_TARGET_DIR/release/conversion-bench --objects 1000 --gets 30
//! ```
//!
//! Figures: docs/benchmarks.md "API versions: conversion (conversion-bench)".

use std::time::{Duration, Instant};

use accord_e2e::Testbed;
use accord_e2e::apiserver_writes::series;
use accord_e2e::hub::WebhookOnlyHub;
use accord_e2e::stats::pct;
use anyhow::{Context as _, Result, ensure};
use clap::Parser;
use futures::{StreamExt as _, TryStreamExt as _};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;
use tracing_subscriber::EnvFilter;

const NAMESPACE: &str = "conversion-bench";
const ETCD_PREFIX: &str = "/conversion-bench/";
const PLURAL: &str = "federatedkafkatopics";
/// The API server's counter of conversion webhook requests and its duration histogram.
const CONVERSION_REQUESTS: &str = "apiserver_conversion_webhook_request_total";
const CONVERSION_SECONDS: &str = "apiserver_conversion_webhook_duration_seconds_sum";

/// `kubectl get` of N objects in the storage and in the converted version.
#[derive(Debug, Parser)]
#[command(name = "conversion-bench", args_override_self = true)]
struct Args {
    /// FederatedKafkaTopics to create (in v1beta1, the storage version).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    objects: usize,
    /// Timed `kubectl get`s per version (after one untimed warm-up each).
    #[arg(long, value_name = "N", default_value_t = 30)]
    gets: usize,
}

/// The API server's conversion webhook requests and the seconds they took, so far.
async fn conversions(client: &kube::Client) -> Result<(f64, f64)> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    let sum = |name| series(&text, name).iter().map(|(_, v)| v).sum::<f64>();
    Ok((sum(CONVERSION_REQUESTS), sum(CONVERSION_SECONDS)))
}

/// Times `gets` runs of `kubectl get federatedkafkatopics.<version>.accord.io -o json`,
/// checking each returns every object in that version.
async fn time_gets(
    testbed: &Testbed,
    version: &str,
    objects: usize,
    gets: usize,
) -> Result<Vec<Duration>> {
    let resource = format!("{PLURAL}.{version}.accord.io");
    let mut took = Vec::with_capacity(gets);
    for run in 0..=gets {
        let started = Instant::now();
        let out = testbed
            .kubectl(testbed.mgmt())
            .args(["get", &resource, "-n", NAMESPACE, "-o", "json"])
            .output()
            .await?;
        let elapsed = started.elapsed();
        ensure!(
            out.status.success(),
            "kubectl get {resource}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let list: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let items = list["items"].as_array().context("no items")?;
        ensure!(
            items.len() == objects
                && items
                    .iter()
                    .all(|i| i["apiVersion"] == format!("accord.io/{version}")),
            "kubectl get {resource} returned {} objects (of {objects}) or another version",
            items.len()
        );
        // The first run warms kubectl's discovery cache and the API server up.
        if run > 0 {
            took.push(elapsed);
        }
    }
    took.sort();
    Ok(took)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .init();
    ensure!(
        args.objects > 0 && args.gets > 0,
        "--objects and --gets must be at least 1"
    );

    let testbed = Testbed::builder()
        .members(0)
        .without_mgmt_controller_manager()
        .without_crds()
        .start()
        .await?;
    let client = testbed.mgmt().client();

    // A hub serving the conversion webhook on loopback; the benchmark holds the leadership.
    let hub = WebhookOnlyHub::start(&testbed, ETCD_PREFIX, "conversion-bench-hub").await?;
    let crds = accord_e2e::crds::converting_at(
        accord_e2e::crds::read_dir(&accord_e2e::crds::default_dir())?,
        &format!("{}/convert", hub.url),
        &hub.ca,
    )?;
    accord_e2e::crds::install(&client, &crds).await?;

    // N topics in the storage version.
    accord_e2e::fleet::ensure_namespace(testbed.mgmt(), NAMESPACE).await?;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("accord.io", accord_crds::VERSION, "FederatedKafkaTopic"),
        PLURAL,
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &resource);
    let created_before = conversions(&client).await?;
    let started = Instant::now();
    futures::stream::iter(0..args.objects)
        .map(|i| {
            let api = api.clone();
            async move {
                let object: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": format!("accord.io/{}", accord_crds::VERSION),
                    "kind": "FederatedKafkaTopic",
                    "metadata": { "name": format!("topic-{i:05}"), "namespace": NAMESPACE },
                    "spec": {
                        "partitions": 6,
                        "replicationFactor": 3,
                        "config": { "retention.ms": "604800000", "cleanup.policy": "delete" },
                        "placement": { "clusters": ["us-central1", "eu-west1"] },
                    },
                }))?;
                api.create(&PostParams::default(), &object)
                    .await
                    .with_context(|| format!("creating topic-{i:05}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await?;
    let created = started.elapsed();
    let created_after = conversions(&client).await?;
    println!(
        "created {} FederatedKafkaTopics in {} in {created:.1?}; conversion requests meanwhile: {} ({:.3} s in the webhook)",
        args.objects,
        accord_crds::VERSION,
        created_after.0 - created_before.0,
        created_after.1 - created_before.1,
    );

    println!(
        "kubectl get {PLURAL}.VERSION.accord.io -n {NAMESPACE} -o json, {} objects, {} timed runs each:",
        args.objects, args.gets
    );
    println!(
        "{:<26} {:>9} {:>9} {:>9} {:>16} {:>15}",
        "version", "p50", "p99", "max", "conversion reqs", "webhook seconds"
    );
    for (version, what) in [
        (accord_crds::VERSION, "(storage)"),
        ("v1alpha1", "(converted)"),
    ] {
        let before = conversions(&client).await?;
        let took = time_gets(&testbed, version, args.objects, args.gets).await?;
        let after = conversions(&client).await?;
        println!(
            "{:<26} {:>9.1?} {:>9.1?} {:>9.1?} {:>16} {:>15.3}",
            format!("{version} {what}"),
            pct(&took, 0.5),
            pct(&took, 0.99),
            took[took.len() - 1],
            after.0 - before.0,
            after.1 - before.1,
        );
    }

    // One GET per object by name: read from etcd and converted on the request, one
    // webhook call each in v1alpha1.
    println!(
        "GET of each of the {} objects by name (through the API, one at a time):",
        args.objects
    );
    println!(
        "{:<26} {:>9} {:>9} {:>9} {:>9} {:>16} {:>15}",
        "version", "total", "p50", "p99", "max", "conversion reqs", "webhook seconds"
    );
    for (version, what) in [
        (accord_crds::VERSION, "(storage)"),
        ("v1alpha1", "(converted)"),
    ] {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("accord.io", version, "FederatedKafkaTopic"),
            PLURAL,
        );
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &resource);
        let before = conversions(&client).await?;
        let started = Instant::now();
        let mut took = Vec::with_capacity(args.objects);
        for i in 0..args.objects {
            let one = Instant::now();
            let object = api.get(&format!("topic-{i:05}")).await?;
            took.push(one.elapsed());
            ensure!(
                object.types.as_ref().map(|t| t.api_version.as_str())
                    == Some(format!("accord.io/{version}").as_str()),
                "topic-{i:05} came back in {:?}",
                object.types
            );
        }
        let total = started.elapsed();
        let after = conversions(&client).await?;
        took.sort();
        println!(
            "{:<26} {:>9.1?} {:>9.1?} {:>9.1?} {:>9.1?} {:>16} {:>15.3}",
            format!("{version} {what}"),
            total,
            pct(&took, 0.5),
            pct(&took, 0.99),
            took[took.len() - 1],
            after.0 - before.0,
            after.1 - before.1,
        );
    }
    drop(hub);
    testbed.stop();
    Ok(())
}
