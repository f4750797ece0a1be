//! Upgrading a management cluster from accord.io/v1alpha1 to v1beta1, as an operator does it,
//! against a real kube-apiserver and the real `accord-hub` binary:
//!
//! 1. The old CRDs (`crds/v1alpha1/`, v1alpha1 only) hold one object of every kind, written
//!    as v1alpha1 (a FederatedKafkaTopic with `spec.clusters`, a FederatedKafkaUser with
//!    `spec.username`, ...).
//! 2. A hub starts (its conversion webhook on loopback) and the new CRDs (`crds/yaml/`,
//!    v1beta1 stored, v1alpha1 served and deprecated) are applied with
//!    `spec.conversion.webhook.clientConfig` pointing at it by URL with the hub CA. The test
//!    holds the hub's leadership itself, so the hub's controllers write nothing: every
//!    object is still stored as v1alpha1 in etcd, which the test reads directly.
//! 3. `accord-hub migrate-storage --dry-run` changes nothing; `accord-hub migrate-storage`
//!    rewrites every object (etcd then holds only v1beta1) and trims every CRD's
//!    `status.storedVersions` to `[v1beta1]`; a second run has nothing to do.
//! 4. `kubectl get` lists every object in both versions, v1beta1 showing the moved fields
//!    (`spec.placement.clusters`, `spec.userName`); `kubectl apply` of an old v1alpha1
//!    manifest updates the object and prints the deprecation warning.
//! 5. With the hub killed, reading v1alpha1 fails with the API server's conversion webhook
//!    error while v1beta1 and core objects still read; a restarted hub (same CA, from its
//!    Secret) makes v1alpha1 readable again, and the time that took is printed.
//! 6. The test lets go of the leadership: the upgraded hub reconciles every object the old
//!    CRDs held (each kind's `status.observedGeneration` reaches its generation).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use accord_e2e::Testbed;
use accord_e2e::hub::{HubProcess, WebhookOnlyHub};
use accord_e2e::installed::{output_text, run_binary};
use accord_e2e::wait::{Check, until};
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;

const NAMESPACE: &str = "upgrade";
const OLD: &str = "v1alpha1";
const NEW: &str = "v1beta1";
const ETCD_PREFIX: &str = "/api-upgrade/";
const WAIT: Duration = Duration::from_secs(60);

/// Every Accord kind: (kind, plural, namespaced), from the one list of kinds.
fn kinds() -> Vec<(String, String, bool)> {
    accord_crds::kinds::all()
        .iter()
        .map(|k| {
            let crd = k.crd();
            (
                k.name(),
                crd.spec.names.plural,
                crd.spec.scope == "Namespaced",
            )
        })
        .collect()
}

const TOPIC_CLUSTERS: [&str; 2] = ["us-central1", "eu-west1"];

/// One object of every kind as a v1alpha1 client wrote them, valid per the frozen
/// v1alpha1 schemas.
fn old_objects() -> Vec<Value> {
    let meta = |name: &str| json!({ "name": name, "namespace": NAMESPACE });
    vec![
        json!({
            "apiVersion": "accord.io/v1alpha1", "kind": "ManagedCluster",
            "metadata": { "name": "us-central1", "labels": { "tier": "prod" } },
            "spec": { "weight": 60 },
        }),
        json!({
            "apiVersion": "accord.io/v1alpha1", "kind": "CrossClusterScalePolicy",
            "metadata": meta("web"),
            "spec": {
                "targetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "web" },
                "desiredReplicas": 4,
                "distribution": [
                    { "cluster": "us-central1", "weight": 3 },
                    { "cluster": "eu-west1", "weight": 1, "minReplicas": 1 },
                ],
            },
        }),
        json!({
            "apiVersion": "accord.io/v1alpha1", "kind": "FederatedKafkaTopic",
            "metadata": meta("orders"),
            "spec": {
                "topicName": "orders", "partitions": 3, "replicationFactor": 1,
                "config": { "retention.ms": "604800000" },
                "clusters": TOPIC_CLUSTERS,
            },
        }),
        json!({
            "apiVersion": "accord.io/v1alpha1", "kind": "KafkaTopicPolicy",
            "metadata": { "name": "upgrade-min-partitions" },
            "spec": {
                "namespaceSelector": { "matchLabels": { "compliance": "pci" } },
                "minPartitions": 3,
                "enforcement": "Audit",
            },
        }),
        json!({
            "apiVersion": "accord.io/v1alpha1", "kind": "PrometheusFederation",
            "metadata": meta("team-a"),
            "spec": {
                "clusterSelector": { "matchLabels": { "tier": "prod" } },
                "tenantSelector": { "namespaces": ["team-a"] },
                "match": ["{job=\"prometheus\"}"],
            },
        }),
        json!({
            "apiVersion": "accord.io/v1alpha1", "kind": "FederatedResource",
            "metadata": meta("frontend"),
            "spec": {
                "clusters": ["us-central1"],
                "manifests": [{
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": { "name": "frontend-config" },
                    "data": { "GREETING": "hello" },
                }],
            },
        }),
        json!({
            "apiVersion": "accord.io/v1alpha1", "kind": "FederatedKafkaUser",
            "metadata": meta("orders-writer"),
            "spec": {
                "username": "orders-app",
                "authentication": { "type": "scram-sha-512" },
                "acls": [{
                    "resource": { "type": "topic", "name": "orders" },
                    "operations": ["Write"],
                }],
                "clusters": ["us-central1"],
            },
        }),
    ]
}

/// The API of `kind` in `version`, in [`NAMESPACE`] when namespaced.
fn api(client: &kube::Client, kind: &str, version: &str) -> Result<Api<DynamicObject>> {
    let (_, plural, namespaced) = kinds()
        .into_iter()
        .find(|(k, _, _)| k == kind)
        .with_context(|| format!("unknown kind {kind}"))?;
    let gvk = GroupVersionKind::gvk("accord.io", version, kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
    Ok(if namespaced {
        Api::namespaced_with(client.clone(), NAMESPACE, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    })
}

/// `kubectl` with `args` on the management cluster.
async fn kubectl(testbed: &Testbed, args: &[&str]) -> Result<Output> {
    Ok(testbed.kubectl(testbed.mgmt()).args(args).output().await?)
}

/// `kubectl get <plural>.<version>.accord.io` in the kind's scope, as JSON; fails with
/// kubectl's output.
async fn kubectl_list(testbed: &Testbed, plural: &str, version: &str) -> Result<Vec<Value>> {
    let resource = format!("{plural}.{version}.accord.io");
    let out = kubectl(testbed, &["get", &resource, "-A", "-o", "json"]).await?;
    ensure!(
        out.status.success(),
        "kubectl get {resource} failed: {}",
        output_text(&out)
    );
    let list: Value = serde_json::from_slice(&out.stdout)?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

/// `kubectl apply -f -` of `object` on the management cluster.
async fn kubectl_apply(testbed: &Testbed, object: &Value) -> Result<Output> {
    let mut child = testbed
        .kubectl(testbed.mgmt())
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().context("kubectl's stdin")?;
    stdin.write_all(&serde_json::to_vec(object)?).await?;
    drop(stdin);
    Ok(child.wait_with_output().await?)
}

/// The apiVersion each Accord object is stored in, by etcd key, read from the management
/// API server's etcd (custom resources are stored as JSON).
async fn stored_api_versions(testbed: &Testbed) -> Result<BTreeMap<String, String>> {
    let prefix = format!("{}/accord.io/", accord_e2e::etcd::cluster_prefix("mgmt"));
    let mut etcd = etcd_client::Client::connect([testbed.etcd_endpoint()], None).await?;
    let found = etcd
        .get(
            prefix.as_str(),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await?;
    let mut versions = BTreeMap::new();
    for kv in found.kvs() {
        let key = kv.key_str()?.to_owned();
        let object: Value = serde_json::from_slice(kv.value())
            .with_context(|| format!("{key} does not hold JSON"))?;
        versions.insert(key, object["apiVersion"].as_str().unwrap_or("?").to_owned());
    }
    Ok(versions)
}

/// `status.storedVersions` of every Accord CRD, by name.
async fn stored_versions(client: &kube::Client) -> Result<BTreeMap<String, Vec<String>>> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut all = BTreeMap::new();
    for (_, plural, _) in kinds() {
        let name = format!("{plural}.accord.io");
        let crd = crds.get(&name).await?;
        let stored = crd
            .status
            .and_then(|s| s.stored_versions)
            .unwrap_or_default();
        all.insert(name, stored);
    }
    Ok(all)
}

/// The new CRDs from `dir` with their conversion webhook at `url`, trusting `ca`; each
/// serves both versions.
fn new_crds(dir: &Path, url: &str, ca: &ByteString) -> Result<Vec<CustomResourceDefinition>> {
    let crds = accord_e2e::crds::converting_at(accord_e2e::crds::read_dir(dir)?, url, ca)?;
    ensure!(
        crds.len() == kinds().len(),
        "{} CRDs in {}",
        crds.len(),
        dir.display()
    );
    for crd in &crds {
        let versions: Vec<&str> = crd.spec.versions.iter().map(|v| v.name.as_str()).collect();
        ensure!(
            versions.contains(&OLD) && versions.contains(&NEW),
            "{:?} in {} serves {versions:?}, not {OLD} and {NEW}",
            crd.metadata.name,
            dir.display()
        );
    }
    Ok(crds)
}

/// Whether reading the topics in v1alpha1 works (it needs the conversion webhook); the
/// failure's text otherwise.
async fn old_version_reads(testbed: &Testbed) -> Result<std::result::Result<(), String>> {
    let out = kubectl(
        testbed,
        &[
            "get",
            // One object by name, read from etcd and converted on the request: a list
            // may be answered from the version's watch cache, which holds objects
            // converted when they were written. Whole objects: `-o name` asks for
            // metadata only, which needs no conversion.
            "federatedkafkatopics.v1alpha1.accord.io",
            "orders",
            "-n",
            NAMESPACE,
            "-o",
            "json",
        ],
    )
    .await?;
    Ok(if out.status.success() {
        Ok(())
    } else {
        Err(output_text(&out))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_written_as_v1alpha1_are_migrated_to_v1beta1_and_read_in_both_versions()
-> Result<()> {
    let root = accord_e2e::binaries::repo_root();
    let testbed = Testbed::builder()
        .members(0)
        .without_mgmt_controller_manager()
        .without_crds()
        .start()
        .await?;
    let _logs = testbed.logs_on_panic();
    let client = testbed.mgmt().client();

    // a) The old CRDs: v1alpha1 only.
    let old_crds = accord_e2e::crds::read_dir(&root.join("crds").join(OLD))?;
    accord_e2e::crds::install(&client, &old_crds).await?;

    // b) One object of every kind, written as v1alpha1.
    accord_e2e::fleet::ensure_namespace(testbed.mgmt(), NAMESPACE).await?;
    let objects = old_objects();
    for object in &objects {
        let kind = object["kind"].as_str().context("kind")?;
        let typed: DynamicObject = serde_json::from_value(object.clone())?;
        api(&client, kind, OLD)?
            .create(&PostParams::default(), &typed)
            .await
            .with_context(|| format!("creating the v1alpha1 {kind}"))?;
    }
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let config: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "plain", "namespace": NAMESPACE }, "data": { "k": "v" },
    }))?;
    configs.create(&PostParams::default(), &config).await?;

    // c) A hub whose conversion webhook listens on loopback. The test holds the leadership,
    // so this replica only serves webhooks: nothing rewrites the objects but the migration.
    let WebhookOnlyHub {
        holder,
        options: hub_options,
        process: hub,
        url,
        ca,
    } = WebhookOnlyHub::start(&testbed, ETCD_PREFIX, "upgrade-hub").await?;
    let url = format!("{url}/convert");
    let crds = new_crds(&accord_e2e::crds::default_dir(), &url, &ca)?;
    accord_e2e::crds::install(&client, &crds).await?;

    let before = stored_api_versions(&testbed).await?;
    eprintln!("stored before the migration: {before:#?}");
    ensure!(
        before.len() == objects.len() && before.values().all(|v| v == "accord.io/v1alpha1"),
        "before the migration every object should be stored as v1alpha1: {before:#?}"
    );
    let versions = stored_versions(&client).await?;
    ensure!(
        versions.values().all(|v| v == &[OLD, NEW]),
        "storedVersions after installing the new CRDs: {versions:#?}"
    );

    // d) The migration: a dry run changes nothing, the run rewrites every object.
    let kubeconfig = testbed
        .mgmt()
        .kubeconfig_path()
        .to_str()
        .context("kubeconfig path")?
        .to_owned();
    let dry = run_binary(
        "accord-hub",
        &["migrate-storage", "--kubeconfig", &kubeconfig, "--dry-run"],
    )
    .await?;
    eprintln!("dry run:\n{}", output_text(&dry));
    ensure!(
        dry.status.success(),
        "dry run failed:\n{}",
        output_text(&dry)
    );
    let dry_out = String::from_utf8_lossy(&dry.stdout);
    ensure!(
        dry_out.contains("FederatedKafkaTopic: would rewrite 1 objects"),
        "{dry_out}"
    );
    ensure!(
        stored_api_versions(&testbed).await? == before,
        "the dry run changed what is stored"
    );
    ensure!(
        stored_versions(&client).await? == versions,
        "the dry run changed storedVersions"
    );

    let started = Instant::now();
    let run = run_binary(
        "accord-hub",
        &["migrate-storage", "--kubeconfig", &kubeconfig],
    )
    .await?;
    eprintln!(
        "migrate-storage took {:.1?}:\n{}",
        started.elapsed(),
        output_text(&run)
    );
    ensure!(
        run.status.success(),
        "migrate-storage failed:\n{}",
        output_text(&run)
    );
    let run_out = String::from_utf8_lossy(&run.stdout);
    for (kind, _, _) in kinds() {
        ensure!(
            run_out.contains(&format!("{kind}: 1/1 rewritten")),
            "no final line for {kind}:\n{run_out}"
        );
    }
    let after = stored_api_versions(&testbed).await?;
    ensure!(
        after.len() == objects.len() && after.values().all(|v| v == "accord.io/v1beta1"),
        "after the migration every object should be stored as v1beta1: {after:#?}"
    );
    let versions = stored_versions(&client).await?;
    ensure!(
        versions.values().all(|v| v == &[NEW]),
        "storedVersions after the migration: {versions:#?}"
    );
    let again = run_binary(
        "accord-hub",
        &["migrate-storage", "--kubeconfig", &kubeconfig],
    )
    .await?;
    ensure!(
        again.status.success(),
        "second run failed:\n{}",
        output_text(&again)
    );
    ensure!(
        String::from_utf8_lossy(&again.stdout)
            .matches("nothing to do")
            .count()
            == kinds().len(),
        "a second run should find nothing to do:\n{}",
        output_text(&again)
    );

    // e) Every object reads in both versions, v1beta1 with the fields moved.
    for (kind, plural, _) in kinds() {
        for version in [OLD, NEW] {
            let items = kubectl_list(&testbed, &plural, version).await?;
            let expected = objects.iter().filter(|o| o["kind"] == kind).count();
            ensure!(
                items.len() == expected
                    && items
                        .iter()
                        .all(|i| i["apiVersion"] == format!("accord.io/{version}")),
                "kubectl get {plural}.{version}.accord.io: {items:#?}"
            );
            for item in &items {
                let annotations = &item["metadata"]["annotations"];
                ensure!(
                    annotations.get("accord.io/v1beta1-fields").is_none(),
                    "the conversion annotation leaked into {kind} {version}: {annotations}"
                );
            }
        }
    }
    let topic = &kubectl_list(&testbed, "federatedkafkatopics", NEW).await?[0];
    ensure!(
        topic["spec"]["placement"]["clusters"] == json!(TOPIC_CLUSTERS)
            && topic["spec"].get("clusters").is_none(),
        "the v1beta1 topic: {topic:#}"
    );
    let old_topic = &kubectl_list(&testbed, "federatedkafkatopics", OLD).await?[0];
    ensure!(
        old_topic["spec"]["clusters"] == json!(TOPIC_CLUSTERS)
            && old_topic["spec"].get("placement").is_none(),
        "the v1alpha1 topic: {old_topic:#}"
    );
    let user = &kubectl_list(&testbed, "federatedkafkausers", NEW).await?[0];
    ensure!(
        user["spec"]["userName"] == "orders-app"
            && user["spec"].get("username").is_none()
            && user["spec"]["placement"]["clusters"] == json!(["us-central1"]),
        "the v1beta1 user: {user:#}"
    );

    // f) An old manifest still applies, with the deprecation warning.
    let mut manifest = objects
        .iter()
        .find(|o| o["kind"] == "FederatedKafkaTopic")
        .cloned()
        .context("the topic")?;
    manifest["spec"]["config"]["retention.ms"] = json!("86400000");
    let applied = kubectl_apply(&testbed, &manifest).await?;
    let applied_text = output_text(&applied);
    eprintln!("kubectl apply of the v1alpha1 manifest:\n{applied_text}");
    ensure!(applied.status.success(), "{applied_text}");
    ensure!(
        applied_text.contains(
            "accord.io/v1alpha1 FederatedKafkaTopic is deprecated; use accord.io/v1beta1 \
             FederatedKafkaTopic"
        ),
        "no deprecation warning:\n{applied_text}"
    );
    let updated = api(&client, "FederatedKafkaTopic", NEW)?
        .get("orders")
        .await?;
    ensure!(
        updated.data["spec"]["config"]["retention.ms"] == "86400000"
            && updated.data["spec"]["placement"]["clusters"] == json!(TOPIC_CLUSTERS),
        "the topic after the v1alpha1 apply: {:#}",
        updated.data
    );

    // g) Without the hub, v1alpha1 cannot be read; v1beta1 (stored as is) and core objects
    // can.
    let ca_before = ca.clone();
    accord_e2e::fleet::kill9(&testbed, hub.id)?;
    drop(hub);
    let failure = until("v1alpha1 reads fail without the hub", WAIT, || async {
        Ok(match old_version_reads(&testbed).await? {
            Ok(()) => Check::NotYet("v1alpha1 still reads".into()),
            Err(text) => Check::Ready(text),
        })
    })
    .await?;
    eprintln!("v1alpha1 read without the hub:\n{failure}");
    ensure!(failure.contains("conversion webhook"), "{failure}");
    let plain = kubectl(&testbed, &["get", "configmap", "plain", "-n", NAMESPACE]).await?;
    ensure!(plain.status.success(), "{}", output_text(&plain));
    ensure!(
        kubectl_list(&testbed, "federatedkafkatopics", NEW)
            .await?
            .len()
            == 1,
        "v1beta1 should read without the hub"
    );

    // The hub comes back on the same address with the same CA (kept in its Secret): the
    // CRDs' caBundle still fits, and v1alpha1 reads again.
    let restarted = Instant::now();
    let (hub, recovered) = tokio::join!(
        HubProcess::start(&testbed, &hub_options),
        until(
            "v1alpha1 reads again after the hub restarted",
            WAIT,
            || async {
                Ok(match old_version_reads(&testbed).await? {
                    Ok(()) => Check::Ready(restarted.elapsed()),
                    Err(text) => Check::NotYet(text),
                })
            }
        )
    );
    let hub = hub?;
    let recovered = recovered?;
    println!("v1alpha1 reads recovered {recovered:.2?} after the hub was restarted");
    ensure!(
        accord_e2e::hub::hub_ca(&client, WAIT).await? == ca_before,
        "the restarted hub made a new CA"
    );

    // h) The test lets go of the leadership: the upgraded hub, which reads only v1beta1,
    // reconciles every object the old one wrote (its status observes the generation).
    drop(holder);
    let reconciled = Instant::now();
    until(
        "every object reconciled by the upgraded hub",
        Duration::from_secs(90),
        || async {
            let mut waiting = Vec::new();
            for (kind, _, _) in kinds() {
                // A ManagedCluster's status is its agent's report; none runs here.
                if kind == "ManagedCluster" {
                    continue;
                }
                for item in api(&client, &kind, NEW)?.list(&Default::default()).await? {
                    let generation = item.metadata.generation;
                    let observed = item.data["status"]["observedGeneration"].as_i64();
                    if observed.is_none() || observed != generation {
                        waiting.push(format!(
                            "{kind} {}: observedGeneration {observed:?} of {generation:?}",
                            item.metadata.name.as_deref().unwrap_or_default()
                        ));
                    }
                }
            }
            Ok(if waiting.is_empty() {
                Check::Ready(())
            } else {
                Check::NotYet(waiting.join("; "))
            })
        },
    )
    .await?;
    println!(
        "every object reconciled {:.2?} after the hub took the leadership over",
        reconciled.elapsed()
    );
    drop(hub);
    Ok(())
}
