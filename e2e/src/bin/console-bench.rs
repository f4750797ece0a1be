//! Console benchmark: page load times of the fleet console through the real HTTP server of a
//! real `accord-hub serve`, with `--clusters` ManagedClusters and `--objects`
//! FederatedResources (spread over `--namespaces` namespaces, each placed in three clusters)
//! in the hub's caches, on a real management kube-apiserver.
//!
//! For two users — a reader of every namespace and one who may read FederatedResources in
//! half of the namespaces (so the console reviews each namespace) — it loads the fleet
//! page, the FederatedResource list and object pages `--views` times each, one after the
//! other, and prints p50/p99/max per page and the page's size. It then prints how many
//! access reviews (TokenReview, SubjectAccessReview) the console sent to the management API
//! server per page view once its reviews were cached (`accord_hub_console_reviews_total`):
//! the console sends no other request per page view.
//!
//! ```text
//! cargo run --release -p accord-e2e --bin console-bench -- --clusters 1000 --objects 1000
//! ```

use std::time::{Duration, Instant};

use accord_e2e::Testbed;
use accord_e2e::console::{
    fetch, grant_cluster_wide, grant_in_namespace, reader_rules, service_account_token,
};
use accord_e2e::fleet::ensure_namespace;
use accord_e2e::hub::{HubOptions, HubProcess, parse_metric};
use accord_e2e::ports::free_port;
use accord_e2e::resource_scenario::resource_object;
use accord_e2e::stats::pct;
use accord_e2e::wait::{Check, until};
use anyhow::{Context as _, Result, ensure};
use clap::Parser;
use futures::{StreamExt, TryStreamExt, stream};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

/// Console benchmark: page load p50/p99 through the hub's real HTTP server with many
/// clusters and objects in its caches, and the access reviews sent per page view.
#[derive(Debug, Parser)]
#[command(name = "console-bench")]
struct Args {
    /// ManagedClusters in the caches.
    #[arg(long, default_value_t = 1000)]
    clusters: usize,
    /// FederatedResources in the caches.
    #[arg(long, default_value_t = 1000)]
    objects: usize,
    /// Namespaces the objects are spread over.
    #[arg(long, default_value_t = 10)]
    namespaces: usize,
    /// Loads of each page per user.
    #[arg(long, default_value_t = 200)]
    views: usize,
}

const FM: &str = "accord-console-bench";
const PARALLEL: usize = 16;

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(
        args.clusters >= 3 && args.objects >= 1 && args.namespaces >= 2,
        "--clusters ≥ 3, --objects ≥ 1, --namespaces ≥ 2"
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    let testbed = Testbed::builder()
        .members(0)
        .without_mgmt_controller_manager()
        .start()
        .await?;
    let client = testbed.mgmt().client();
    let console_addr = format!("127.0.0.1:{}", free_port()?);
    let hub = HubProcess::start(
        &testbed,
        &HubOptions {
            replica: "console-bench".into(),
            etcd_prefix: "/console-bench/".into(),
            extra_args: vec![format!("--console-addr={console_addr}")],
        },
    )
    .await?;
    let console = format!("http://{console_addr}");

    // The fleet: ManagedClusters with a status as agents leave it.
    let started = Instant::now();
    let clusters: Api<accord_crds::ManagedCluster> = Api::all(client.clone());
    let names: Vec<String> = (0..args.clusters)
        .map(|i| format!("bench-{i:04}"))
        .collect();
    stream::iter(names.iter().cloned())
        .map(|name| {
            let clusters = clusters.clone();
            async move {
                clusters
                    .patch(&name, &PatchParams::apply(FM).force(), &Patch::Apply(json!({
                        "apiVersion": "accord.io/v1beta1", "kind": "ManagedCluster",
                        "metadata": {"name": name, "labels": {"region": format!("r{}", name.len() % 3)}},
                        "spec": {"taints": [{"key": "bench", "value": "yes", "effect": "PreferNoSchedule"}]},
                    })))
                    .await?;
                clusters
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": {
                        "agentVersion": "0.1.0", "kubernetesVersion": "v1.34.4",
                        "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                        "capacity": {"nodes": "3", "allocatable.cpu": "12", "allocatable.memory": "48Gi",
                                     "allocatable.pods": "330", "unrequested.cpu": "8",
                                     "unrequested.memory": "30Gi", "unrequested.pods": "300"},
                    }})))
                    .await?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<_>>()
        .await?;
    // The objects, each placed in three clusters.
    let namespaces: Vec<String> = (0..args.namespaces)
        .map(|i| format!("bench-ns-{i}"))
        .collect();
    for ns in &namespaces {
        ensure_namespace(testbed.mgmt(), ns).await?;
    }
    stream::iter(0..args.objects)
        .map(|i| {
            let client = client.clone();
            let ns = namespaces[i % namespaces.len()].clone();
            let placed: Vec<String> = (0..3)
                .map(|k| names[(i * 3 + k) % names.len()].clone())
                .collect();
            async move {
                let api: Api<accord_crds::FederatedResource> = Api::namespaced(client, &ns);
                let name = format!("object-{i:04}");
                api.patch(
                    &name,
                    &PatchParams::apply(FM).force(),
                    &Patch::Apply(resource_object(&ns, &name, &placed, "v1")),
                )
                .await?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<_>>()
        .await?;
    println!(
        "created {} ManagedClusters and {} FederatedResources in {} namespaces in {:.1} s",
        args.clusters,
        args.objects,
        args.namespaces,
        started.elapsed().as_secs_f64()
    );

    // Users: a reader of everything, and one who may read FederatedResources in half the
    // namespaces.
    ensure_namespace(testbed.mgmt(), "bench-users").await?;
    grant_cluster_wide(
        &client,
        "bench-reader",
        "bench-users",
        "reader",
        reader_rules(),
    )
    .await?;
    grant_cluster_wide(
        &client,
        "bench-fleet",
        "bench-users",
        "limited",
        json!([{"apiGroups": ["accord.io"], "resources": ["managedclusters"], "verbs": ["get", "list"]}]),
    )
    .await?;
    for ns in namespaces.iter().step_by(2) {
        grant_in_namespace(
            &client,
            ns,
            "bench-open",
            "bench-users",
            "limited",
            reader_rules(),
        )
        .await?;
    }
    let reader = service_account_token(&client, "bench-users", "reader").await?;
    let limited = service_account_token(&client, "bench-users", "limited").await?;

    // Until the console's caches hold everything, and every object has a status.
    let http = reqwest::Client::new();
    let total_objects = args.objects;
    until(
        "the console lists every cluster and object",
        Duration::from_secs(300),
        || async {
            let (_, fleet) = fetch(&http, &format!("{console}/"), Some(&reader)).await?;
            let (_, kind) = fetch(
                &http,
                &format!("{console}/kinds/federatedresources"),
                Some(&reader),
            )
            .await?;
            let rows = fleet.matches("data-cluster=").count();
            let objects = kind.matches("data-object=").count();
            let placed = kind.matches("Pending").count() + kind.matches("Unavailable").count();
            Ok(
                if rows == args.clusters && objects == total_objects && placed >= total_objects {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!(
                        "{rows} clusters, {objects} objects, {placed} placement states"
                    ))
                },
            )
        },
    )
    .await?;

    let mut failures = Vec::new();
    for (user, token) in [("reader", &reader), ("limited", &limited)] {
        let pages: Vec<(&str, Vec<String>)> = vec![
            ("fleet", vec![format!("{console}/")]),
            (
                "federatedresources",
                vec![format!("{console}/kinds/federatedresources")],
            ),
            (
                "object",
                (0..args.objects)
                    .filter(|i| user == "reader" || (i % namespaces.len()).is_multiple_of(2))
                    .map(|i| {
                        format!(
                            "{console}/kinds/federatedresources/{}/object-{i:04}",
                            namespaces[i % namespaces.len()]
                        )
                    })
                    .collect(),
            ),
        ];
        // Warm the review cache, then measure.
        for (_, urls) in &pages {
            for url in urls.iter().take(args.views) {
                fetch(&http, url, Some(token)).await?;
            }
        }
        let reviews_before = reviews(&hub, &http).await?;
        let mut views = 0;
        let measured = Instant::now();
        for (page, urls) in &pages {
            let mut times = Vec::with_capacity(args.views);
            let mut size = 0;
            for v in 0..args.views {
                let url = &urls[v % urls.len()];
                let t = Instant::now();
                let (code, body) = fetch(&http, url, Some(token)).await?;
                times.push(t.elapsed());
                ensure!(code == 200, "{user} {url}: {code}");
                size = body.len();
                views += 1;
            }
            times.sort();
            let p99 = pct(&times, 0.99);
            println!(
                "{user:8} {page:20} p50 {:7.2} ms  p99 {:7.2} ms  max {:7.2} ms  ({} KiB)",
                ms(pct(&times, 0.5)),
                ms(p99),
                ms(*times.last().unwrap()),
                size / 1024
            );
            if p99 > Duration::from_millis(200) {
                failures.push(format!("{user} {page}: p99 {:.1} ms > 200 ms", ms(p99)));
            }
        }
        let sent = reviews(&hub, &http).await? - reviews_before;
        println!(
            "{user:8} {views} page views in {:.1} s: {sent} access reviews sent to the API server ({:.3} per view; cached {} s per token)",
            measured.elapsed().as_secs_f64(),
            sent / views as f64,
            accord_hub::console::access::REVIEW_TTL.as_secs()
        );
    }
    ensure!(
        failures.is_empty(),
        "pages over 200 ms p99: {}",
        failures.join("; ")
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Access reviews the console has sent (every kind).
async fn reviews(hub: &HubProcess<'_>, http: &reqwest::Client) -> Result<f64> {
    let text = http
        .get(format!("{}/metrics", hub.http))
        .send()
        .await?
        .text()
        .await?;
    parse_metric(&text, "accord_hub_console_reviews_total")
        .context("no accord_hub_console_reviews_total")
}
