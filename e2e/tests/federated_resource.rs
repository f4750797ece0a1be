//! FederatedResource end to end: `kubectl apply`-style objects on the management cluster →
//! real hub → real agents → objects in three real member clusters (pods made Ready by
//! kwok), checked on the members' API servers as well as through status.
//!
//! Each test runs its own hub (own etcd prefix) and agents with cluster names of its own,
//! against the shared three member clusters, in a namespace of its own.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use accord_crds::{
    DELIVERY_FIELD_MANAGER, FEDERATED_RESOURCE_ANNOTATION, FederatedResource, LeftOutReason,
    PlacementState,
};
use accord_e2e::fleet::{Fleet, ensure_namespace};
use accord_e2e::kafka_topic_scenario::wait_event;
use accord_e2e::leaks;
use accord_e2e::wait::{Check, until};
use accord_e2e::watch::Watched;
use accord_e2e::{SharedTestbed, Testbed};
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

/// Four members: the rollout tests use all of them (three rings, the last of two);
/// the others three.
static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(4));
/// The scenarios are heavy for two cores; run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());
/// Generous for a loaded machine; each step normally takes a second or two.
const STEP: Duration = Duration::from_secs(60);
const FM: &str = "accord-e2e-tests";

/// A hub and three agents, clusters `<prefix>-0..2` on members 0..2.
async fn fleet<'t>(testbed: &'t Testbed, prefix: &str, hub_args: &[&str]) -> Result<Fleet<'t>> {
    fleet_of(testbed, prefix, 3, hub_args).await
}

/// A hub and `n` agents, clusters `<prefix>-0..n-1` on members 0..n-1.
async fn fleet_of<'t>(
    testbed: &'t Testbed,
    prefix: &str,
    n: usize,
    hub_args: &[&str],
) -> Result<Fleet<'t>> {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    let agents: Vec<(&str, usize)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    Fleet::start(
        testbed,
        &format!("hub-{prefix}"),
        &format!("/t-{prefix}/"),
        hub_args,
        &agents,
    )
    .await
}

async fn apply(testbed: &Testbed, ns: &str, object: &Value) -> Result<()> {
    ensure_namespace(testbed.mgmt(), ns).await?;
    let api: Api<FederatedResource> = Api::namespaced(testbed.mgmt().client(), ns);
    let name = object["metadata"]["name"].as_str().context("name")?;
    api.patch(name, &PatchParams::apply(FM).force(), &Patch::Apply(object))
        .await?;
    Ok(())
}

fn resources(testbed: &Testbed, ns: &str) -> Api<FederatedResource> {
    Api::namespaced(testbed.mgmt().client(), ns)
}

/// Waits until `check` accepts the object's status.
async fn wait_status<T>(
    testbed: &Testbed,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(&accord_crds::FederatedResourceStatus) -> Option<T>,
) -> Result<T> {
    let api = resources(testbed, ns);
    until(what, STEP, || async {
        let status = api.get(name).await?.status.unwrap_or_default();
        Ok(match check(&status) {
            Some(t) => Check::Ready(t),
            None => Check::NotYet(serde_json::to_string(&status)?),
        })
    })
    .await
}

fn condition(status: &accord_crds::FederatedResourceStatus, type_: &str) -> Option<String> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

fn config_maps(testbed: &Testbed, member: usize, ns: &str) -> Api<ConfigMap> {
    Api::namespaced(testbed.members()[member].client(), ns)
}

fn widgets(testbed: &Testbed, member: usize, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    Api::namespaced_with(
        testbed.members()[member].client(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, "widgets"),
    )
}

/// Waits until `get` on every member is `Some` and passes `check`.
async fn on_every_member<T, F, Fut>(what: &str, get: F) -> Result<Vec<T>>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let mut out = Vec::new();
    for m in 0..3 {
        out.push(
            until(&format!("{what} on member {m}"), STEP, || async {
                Ok(match get(m).await? {
                    Some(t) => Check::Ready(t),
                    None => Check::NotYet("not yet".into()),
                })
            })
            .await?,
        );
    }
    Ok(out)
}

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    })
}

fn bundle(ns: &str, prefix: &str) -> Value {
    json!({
        "apiVersion": "accord.io/v1beta1", "kind": "FederatedResource",
        "metadata": {"name": "app", "namespace": ns},
        "spec": {
            "placement": {"clusters": [format!("{prefix}-0"), format!("{prefix}-1"), format!("{prefix}-2")]},
            "manifests": [
                {"apiVersion": "example.com/v1", "kind": "Widget",
                 "metadata": {"name": "main"}, "spec": {"size": 3}},
                {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "app-config"}, "data": {"mode": "fast"}},
                {"apiVersion": "apps/v1", "kind": "Deployment",
                 "metadata": {"name": "app"},
                 "spec": {"replicas": 2,
                    "selector": {"matchLabels": {"app": "app"}},
                    "template": {"metadata": {"labels": {"app": "app"}},
                        "spec": {"containers": [{"name": "app", "image": "app:1"}]}}}},
                {"apiVersion": "v1", "kind": "Service",
                 "metadata": {"name": "app"},
                 "spec": {"selector": {"app": "app"}, "ports": [{"port": 80}]}},
                widget_crd(),
            ],
            "overrides": [{
                "clusterSelector": {"matchLabels": {"fres-region": "eu"}},
                "target": {"kind": "Deployment", "name": "app"},
                "jsonPatch": [{"op": "replace",
                    "path": "/spec/template/spec/containers/0/image", "value": "eu/app:1"}]
            }],
            "feedback": [{"kind": "Deployment", "name": "app",
                "jsonPath": ".status.readyReplicas", "as": "ready"}],
            "secretRefs": [{"name": "app-credentials"}]
        }
    })
}

/// A password no other test or component uses, to look for.
const PASSWORD: &str = "fres-e2e-password-5d1c9a7e";

async fn put_secret(testbed: &Testbed, ns: &str, password: &str) -> Result<()> {
    ensure_namespace(testbed.mgmt(), ns).await?;
    let api: Api<Secret> = Api::namespaced(testbed.mgmt().client(), ns);
    api.patch(
        "app-credentials",
        &PatchParams::apply(FM).force(),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "app-credentials"},
            "stringData": {"password": password}})),
    )
    .await?;
    Ok(())
}

/// Waits until the member's copy of the delivered Secret holds `password`.
async fn member_password(testbed: &Testbed, member: usize, ns: &str, password: &str) -> Result<()> {
    let api: Api<Secret> = Api::namespaced(testbed.members()[member].client(), ns);
    until(&format!("the Secret in member {member}"), STEP, || async {
        let value = api
            .get_opt("app-credentials")
            .await?
            .and_then(|s| s.data)
            .and_then(|d| d.get("password").cloned());
        Ok(match value {
            Some(v) if v.0 == password.as_bytes() => Check::Ready(()),
            other => Check::NotYet(format!("{} bytes", other.map_or(0, |v| v.0.len()))),
        })
    })
    .await
}

async fn label_cluster(testbed: &Testbed, cluster: &str, labels: Value) -> Result<()> {
    accord_e2e::fleet::patch_managed_cluster(
        testbed,
        cluster,
        json!({"metadata": {"labels": labels}}),
    )
    .await
}

#[test]
fn a_bundle_reaches_every_member_in_order_with_its_override_feedback_and_drift_repair() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    TESTBED.run(|testbed| async move {
        let prefix = "fres-a";
        let ns = "fres-bundle";
        let fleet = fleet(testbed, prefix, &[]).await?;
        label_cluster(
            testbed,
            &format!("{prefix}-1"),
            json!({"fres-region": "eu"}),
        )
        .await?;
        put_secret(testbed, ns, PASSWORD).await?;
        apply(testbed, ns, &bundle(ns, prefix)).await?;

        // Everything applied and healthy everywhere: the CRD was established before the
        // Widget (which could not be applied otherwise), the Deployment's pods run on kwok.
        let status = wait_status(testbed, ns, "app", "Available=True", |s| {
            (condition(s, "Available").as_deref() == Some("True")
                && condition(s, "Applied").as_deref() == Some("True"))
            .then(|| s.clone())
        })
        .await?;
        ensure!(status.clusters == Some(3), "{status:?}");
        for p in &status.placements {
            ensure!(p.state == PlacementState::Synced, "{p:?}");
            ensure!((p.applied, p.available) == (Some(6), Some(6)), "{p:?}");
            ensure!(
                p.feedback.get("ready").map(String::as_str) == Some("2"),
                "{p:?}"
            );
        }
        let overrides: BTreeMap<&str, &[i32]> = status
            .placements
            .iter()
            .map(|p| (p.cluster.as_str(), p.overrides.as_slice()))
            .collect();
        ensure!(
            overrides[format!("{prefix}-1").as_str()] == [0],
            "{overrides:?}"
        );
        ensure!(
            overrides[format!("{prefix}-0").as_str()].is_empty(),
            "{overrides:?}"
        );

        // On the members themselves: the Widget, the image (overridden in the EU member only).
        for m in 0..3 {
            let w = widgets(testbed, m, ns).get("main").await?;
            ensure!(w.data["spec"]["size"] == 3, "member {m}: {w:?}");
            let d: Deployment = Api::namespaced(testbed.members()[m].client(), ns)
                .get("app")
                .await?;
            let image = d
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .map(|s| s.containers[0].image.clone());
            let want = if m == 1 { "eu/app:1" } else { "app:1" };
            ensure!(
                image.flatten().as_deref() == Some(want),
                "member {m}: image {d:?}"
            );
            let annotations = d.metadata.annotations.unwrap_or_default();
            ensure!(
                annotations
                    .get(FEDERATED_RESOURCE_ANNOTATION)
                    .map(String::as_str)
                    == Some(&format!("{ns}/app")[..]),
                "member {m}: {annotations:?}"
            );
        }

        // The Secret named in secretRefs is in every member; its value is in no key of the
        // hub's etcd and in no component's log.
        for m in 0..3 {
            member_password(testbed, m, ns, PASSWORD).await?;
        }
        let dump = leaks::hub_etcd_dump(testbed, &format!("/t-{prefix}/")).await?;
        ensure!(
            dump.iter().any(|(k, _)| k.contains("FederatedResource")),
            "no record in the dump"
        );
        let leaked: Vec<&String> = dump
            .iter()
            .filter(|(_, v)| v.contains(PASSWORD))
            .map(|(k, _)| k)
            .collect();
        ensure!(leaked.is_empty(), "the password is stored under {leaked:?}");
        let logged_lines = leaks::logged(testbed, PASSWORD)?;
        ensure!(
            logged_lines.is_empty(),
            "the password is logged: {logged_lines:?}"
        );
        // Rotated on the management cluster: delivered again.
        let rotated = format!("{PASSWORD}-rotated");
        put_secret(testbed, ns, &rotated).await?;
        for m in 0..3 {
            member_password(testbed, m, ns, &rotated).await?;
        }

        // A member-side label (another field manager) survives; an owned field changed out
        // of band (as `kubectl edit` does, an update by another manager) is restored and
        // counted.
        let cms = config_maps(testbed, 0, ns);
        cms.patch(
            "app-config",
            &PatchParams::apply("member-team"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "app-config", "labels": {"team": "shop"}}})),
        )
        .await?;
        let edited = Instant::now();
        cms.patch(
            "app-config",
            &PatchParams {
                field_manager: Some("kubectl-edit".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"data": {"mode": "slow"}})),
        )
        .await?;
        until("the owned field restored", STEP, || async {
            let cm = cms.get("app-config").await?;
            let mode = cm.data.as_ref().and_then(|d| d.get("mode")).cloned();
            Ok(if mode.as_deref() == Some("fast") {
                Check::Ready(())
            } else {
                Check::NotYet(format!("mode {mode:?}"))
            })
        })
        .await?;
        println!("drift restored after {:.1?}", edited.elapsed());
        let cm = cms.get("app-config").await?;
        ensure!(
            cm.metadata
                .labels
                .unwrap_or_default()
                .get("team")
                .map(String::as_str)
                == Some("shop"),
            "the member's label went"
        );
        ensure!(
            cm.metadata
                .managed_fields
                .unwrap_or_default()
                .iter()
                .any(|f| f.manager.as_deref() == Some(DELIVERY_FIELD_MANAGER)),
            "not applied by field manager {DELIVERY_FIELD_MANAGER}"
        );
        let repaired = wait_status(testbed, ns, "app", "the drift repair counted", |s| {
            s.placements
                .iter()
                .find(|p| p.cluster == format!("{prefix}-0"))
                .and_then(|p| {
                    p.drift_repairs
                        .filter(|n| *n >= 1)
                        .map(|n| (n, p.last_drift_time.clone()))
                })
        })
        .await?;
        ensure!(repaired.1.is_some(), "no lastDriftTime");
        wait_event(testbed, ns, "app", "Normal", "DriftRepaired", STEP).await?;
        // `kubectl describe` tells the delivery too: the generation applied in every member.
        let applied = wait_event(testbed, ns, "app", "Normal", "Applied", STEP).await?;
        ensure!(applied.contains("applied in 3 clusters"), "{applied}");

        // What a mutating webhook or `kubectl edit` adds in a member (a label, a sidecar
        // container: a strategic merge patch by another manager) survives a reapply of a
        // changed manifest, which changes the field Accord owns beside them.
        let deployments: Api<Deployment> = Api::namespaced(testbed.members()[0].client(), ns);
        deployments
            .patch(
                "app",
                &PatchParams {
                    field_manager: Some("mesh-injector".into()),
                    ..Default::default()
                },
                &Patch::Strategic(json!({
                    "metadata": {"labels": {"mesh": "injected"}},
                    "spec": {"template": {"spec": {"containers": [
                        {"name": "mesh-proxy", "image": "proxy:1"}]}}}
                })),
            )
            .await?;
        let mut v2 = bundle(ns, prefix);
        v2["spec"]["manifests"][2]["spec"]["template"]["spec"]["containers"][0]["image"] =
            json!("app:2");
        apply(testbed, ns, &v2).await?;
        let images = |d: &Deployment| -> BTreeMap<String, String> {
            d.spec
                .iter()
                .flat_map(|s| s.template.spec.iter())
                .flat_map(|p| p.containers.iter())
                .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
                .collect()
        };
        let reapplied = until("the changed image applied in member 0", STEP, || async {
            let d = deployments.get("app").await?;
            Ok(
                if images(&d).get("app").map(String::as_str) == Some("app:2") {
                    Check::Ready(d)
                } else {
                    Check::NotYet(format!("{:?}", images(&d)))
                },
            )
        })
        .await?;
        ensure!(
            images(&reapplied).get("mesh-proxy").map(String::as_str) == Some("proxy:1"),
            "the injected sidecar went: {:?}",
            images(&reapplied)
        );
        ensure!(
            reapplied
                .metadata
                .labels
                .unwrap_or_default()
                .get("mesh")
                .map(String::as_str)
                == Some("injected"),
            "the injected label went"
        );

        // A manifest removed from the spec goes from every member.
        let mut smaller = bundle(ns, prefix);
        smaller["spec"]["manifests"]
            .as_array_mut()
            .unwrap()
            .retain(|m| m["kind"] != "Service");
        apply(testbed, ns, &smaller).await?;
        on_every_member("the Service removed", |m| async move {
            let services: Api<k8s_openapi::api::core::v1::Service> =
                Api::namespaced(testbed.members()[m].client(), ns);
            Ok(services.get_opt("app").await?.is_none().then_some(()))
        })
        .await?;

        // Deleted with deletionPolicy Delete: everything goes from every member, then the
        // object.
        resources(testbed, ns)
            .delete("app", &DeleteParams::default())
            .await?;
        until("the FederatedResource gone", STEP, || async {
            Ok(match resources(testbed, ns).get_opt("app").await? {
                None => Check::Ready(()),
                Some(o) => Check::NotYet(format!("{:?}", o.status)),
            })
        })
        .await?;
        for m in 0..3 {
            ensure!(
                config_maps(testbed, m, ns)
                    .get_opt("app-config")
                    .await?
                    .is_none(),
                "member {m}: ConfigMap left"
            );
            let crds: Api<CustomResourceDefinition> = Api::all(testbed.members()[m].client());
            ensure!(
                crds.get_opt("widgets.example.com").await?.is_none(),
                "member {m}: CRD left"
            );
        }
        drop(fleet);
        Ok(())
    });
}

#[test]
fn existing_objects_conflicts_orphans_and_a_stopped_member_are_handled() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    TESTBED.run(|testbed| async move {
        let prefix = "fres-b";
        let ns = "fres-conflict";
        let mut fleet = fleet(testbed, prefix, &["--resource-deletion-timeout", "8s"]).await?;
        // Member 0 already holds a ConfigMap that Accord did not create.
        ensure_namespace(&testbed.members()[0], ns).await?;
        config_maps(testbed, 0, ns)
            .patch(
                "shared",
                &PatchParams::apply(FM).force(),
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "shared"}, "data": {"owner": "someone"}})),
            )
            .await?;
        let object = |resolution: &str, deletion: &str, name: &str| {
            json!({
                "apiVersion": "accord.io/v1beta1", "kind": "FederatedResource",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "placement": {"clusters": [format!("{prefix}-0"), format!("{prefix}-1"), format!("{prefix}-2")]},
                    "manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "shared"}, "data": {"owner": "accord"}}],
                    "conflictResolution": resolution,
                    "deletionPolicy": deletion,
                }
            })
        };
        apply(testbed, ns, &object("Abort", "Orphan", "shared")).await?;
        let conflict = wait_status(testbed, ns, "shared", "Conflict in member 0", |s| {
            s.placements
                .iter()
                .find(|p| p.cluster == format!("{prefix}-0") && p.state == PlacementState::Conflict)
                .cloned()
        })
        .await?;
        ensure!(
            conflict.manifests.iter().any(|m| m.state == PlacementState::Conflict
                && m.message.as_deref().unwrap_or_default().contains("Adopt")),
            "{conflict:?}"
        );
        let told = wait_event(testbed, ns, "shared", "Warning", "Conflict", STEP).await?;
        ensure!(told.contains(&format!("cluster {prefix}-0: ")), "{told}");
        ensure!(
            conflict.applied == Some(0) && conflict.available == Some(0),
            "the object Abort left alone counts as neither applied nor available: {conflict:?}"
        );
        let cm = config_maps(testbed, 0, ns).get("shared").await?;
        ensure!(cm.data.unwrap_or_default()["owner"] == "someone", "an Abort touched it");

        // Adopt: taken over.
        apply(testbed, ns, &object("Adopt", "Orphan", "shared")).await?;
        wait_status(testbed, ns, "shared", "Applied everywhere", |s| {
            (condition(s, "Applied").as_deref() == Some("True")).then_some(())
        })
        .await?;
        let cm = config_maps(testbed, 0, ns).get("shared").await?;
        ensure!(cm.data.unwrap_or_default()["owner"] == "accord", "not adopted");

        // Orphan: the objects stay, without Accord's marks.
        resources(testbed, ns).delete("shared", &DeleteParams::default()).await?;
        until("the orphaning FederatedResource gone", STEP, || async {
            Ok(resources(testbed, ns).get_opt("shared").await?.map_or(Check::Ready(()), |o| Check::NotYet(format!("{:?}", o.status))))
        })
        .await?;
        let told = wait_event(testbed, ns, "shared", "Normal", "Orphaned", STEP).await?;
        ensure!(told.contains("left in every member"), "{told}");
        for m in 0..3 {
            let cm = config_maps(testbed, m, ns).get("shared").await?;
            let annotations = cm.metadata.annotations.unwrap_or_default();
            let labels = cm.metadata.labels.unwrap_or_default();
            let marks: Vec<&String> = annotations.keys().chain(labels.keys()).filter(|k| k.starts_with("accord.io/")).collect();
            ensure!(marks.is_empty(), "member {m}: still marked {marks:?}");
            ensure!(cm.data.unwrap_or_default()["owner"] == "accord", "member {m}: changed");
        }
        // A later Abort finds an object nobody delivers, not a ghost owner.
        apply(testbed, ns, &object("Abort", "Orphan", "later")).await?;
        let conflicts = wait_status(testbed, ns, "later", "Conflict in every member", |s| {
            (s.placements.len() == 3 && s.placements.iter().all(|p| p.state == PlacementState::Conflict)).then(|| s.placements.clone())
        })
        .await?;
        for p in &conflicts {
            let messages: Vec<&str> = p.manifests.iter().filter_map(|m| m.message.as_deref()).collect();
            ensure!(messages.iter().any(|m| m.contains("Accord did not create it")), "{}: {messages:?}", p.cluster);
            ensure!(p.available == Some(0), "{p:?}");
        }
        resources(testbed, ns).delete("later", &DeleteParams::default()).await?;
        until("the aborted FederatedResource gone", STEP, || async {
            Ok(resources(testbed, ns).get_opt("later").await?.map_or(Check::Ready(()), |o| Check::NotYet(format!("{:?}", o.status))))
        })
        .await?;

        // One member's agent stopped: deletion completes after the bound, with a Warning
        // naming the member left behind.
        apply(testbed, ns, &object("Adopt", "Delete", "bounded")).await?;
        wait_status(testbed, ns, "bounded", "Applied everywhere", |s| {
            (condition(s, "Applied").as_deref() == Some("True")).then_some(())
        })
        .await?;
        let stopped = format!("{prefix}-2");
        fleet.kill_agent(&stopped)?;
        resources(testbed, ns).delete("bounded", &DeleteParams::default()).await?;
        until("the bounded FederatedResource gone", STEP, || async {
            Ok(resources(testbed, ns).get_opt("bounded").await?.map_or(Check::Ready(()), |o| Check::NotYet(format!("{:?}", o.metadata.finalizers))))
        })
        .await?;
        let warning = wait_event(testbed, ns, "bounded", "Warning", "DeletionIncomplete", STEP).await?;
        ensure!(warning.contains(&stopped), "{warning}");
        ensure!(config_maps(testbed, 0, ns).get_opt("shared").await?.is_none(), "member 0 kept it");
        ensure!(config_maps(testbed, 2, ns).get_opt("shared").await?.is_some(), "the stopped member lost it");
        Ok(())
    });
}

#[test]
fn bad_input_fails_only_where_it_is_and_says_why() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    TESTBED.run(|testbed| async move {
        let prefix = "fres-c";
        let ns = "fres-bad";
        let _fleet = fleet(testbed, prefix, &[]).await?;
        label_cluster(testbed, &format!("{prefix}-1"), json!({"fres-bad": "yes"})).await?;
        let object = json!({
            "apiVersion": "accord.io/v1beta1", "kind": "FederatedResource",
            "metadata": {"name": "bad", "namespace": ns},
            "spec": {
                "placement": {"clusters": [format!("{prefix}-0"), format!("{prefix}-1")]},
                "manifests": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "good"}, "data": {"a": "b"}},
                    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "refused"},
                     "spec": {"ports": [{"port": 99999}]}},
                ],
                "overrides": [{"clusterSelector": {"matchLabels": {"fres-bad": "yes"}},
                    "target": {"kind": "ConfigMap"},
                    "jsonPatch": [{"op": "replace", "path": "/spec/nothing", "value": 1}]}]
            }
        });
        apply(testbed, ns, &object).await?;
        // Member 0: the ConfigMap applied, the Service refused by the member's API server
        // with its message. Member 1: the override fails there, named, with its path.
        let status = wait_status(testbed, ns, "bad", "both placements in Error", |s| {
            let p0 = s.placements.iter().find(|p| p.cluster == format!("{prefix}-0"))?;
            let p1 = s.placements.iter().find(|p| p.cluster == format!("{prefix}-1"))?;
            (p0.state == PlacementState::Error && p1.state == PlacementState::Error).then(|| s.clone())
        })
        .await?;
        let p0 = &status.placements[0];
        ensure!(p0.applied == Some(1), "{p0:?}");
        let refused = p0.manifests.iter().find(|m| m.name == "refused").context("no Service entry")?;
        ensure!(refused.state == PlacementState::Error, "{refused:?}");
        ensure!(refused.message.as_deref().unwrap_or_default().contains("99999"), "{refused:?}");
        ensure!(config_maps(testbed, 0, ns).get_opt("good").await?.is_some(), "the good ConfigMap was not applied");
        let p1 = &status.placements[1];
        let message = p1.message.as_deref().unwrap_or_default();
        ensure!(message.contains("spec.overrides[0]") && message.contains("/spec/nothing"), "{message}");
        wait_event(testbed, ns, "bad", "Warning", "PlacementError", STEP).await?;

        // A spec the API server cannot refuse but the hub can (two manifests for one
        // object): InvalidSpec, with the rule.
        let mut duplicate = object.clone();
        duplicate["metadata"]["name"] = "duplicate".into();
        duplicate["spec"]["manifests"] = json!([
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}},
        ]);
        apply(testbed, ns, &duplicate).await?;
        let api = resources(testbed, ns);
        until("InvalidSpec", STEP, || async {
            let s = api.get("duplicate").await?.status.unwrap_or_default();
            Ok(match s.conditions.iter().find(|c| c.reason == "InvalidSpec") {
                Some(c) if c.message.contains("two manifests name the same object") => Check::Ready(()),
                _ => Check::NotYet(format!("{:?}", s.conditions)),
            })
        })
        .await?;
        // spread.maxSkew is for divided replicas: a delivery of whole copies refuses it.
        let mut skewed = object.clone();
        skewed["metadata"]["name"] = "skewed".into();
        skewed["spec"]["placement"]["spread"] = json!({"byLabel": "region", "maxSkew": 1});
        apply(testbed, ns, &skewed).await?;
        until("InvalidSpec for maxSkew", STEP, || async {
            let s = api.get("skewed").await?.status.unwrap_or_default();
            Ok(match s.conditions.iter().find(|c| c.reason == "InvalidSpec") {
                Some(c) if c.message.contains("spread.maxSkew applies to divided replicas") => {
                    Check::Ready(())
                }
                _ => Check::NotYet(format!("{:?}", s.conditions)),
            })
        })
        .await?;

        // Two FederatedResources delivering one object to one cluster: the older keeps it,
        // the younger is Conflict there naming it — even with Adopt — whichever applied
        // first. "elder" is the oldest but selects the cluster only once it is labelled.
        let contested = |name: &str, selection: Value| {
            let mut object = json!({
                "apiVersion": "accord.io/v1beta1", "kind": "FederatedResource",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "contested"}, "data": {"by": name}}],
                    "conflictResolution": "Adopt",
                }
            });
            object["spec"]
                .as_object_mut()
                .expect("a spec")
                .extend(selection.as_object().cloned().unwrap_or_default());
            object
        };
        let member0 = json!({"placement": {"clusters": [format!("{prefix}-0")]}});
        apply(
            testbed,
            ns,
            &contested("elder", json!({"placement": {"clusterSelector": {"matchLabels": {"fres-contest": "yes"}}}})),
        )
        .await?;
        apply(testbed, ns, &contested("first", member0.clone())).await?;
        wait_status(testbed, ns, "first", "first Applied", |s| {
            (condition(s, "Applied").as_deref() == Some("True")).then_some(())
        })
        .await?;
        apply(testbed, ns, &contested("second", member0)).await?;
        let in_conflict_naming = |name: &'static str, owner: &'static str| async move {
            let conflict = wait_status(testbed, ns, name, &format!("{name} in Conflict"), |s| {
                s.placements
                    .iter()
                    .find(|p| p.state == PlacementState::Conflict)
                    .cloned()
            })
            .await?;
            let named = conflict
                .manifests
                .iter()
                .filter_map(|m| m.message.as_deref())
                .any(|m| m.contains(&format!("{ns}/{owner}")));
            ensure!(named, "{name}: the owner {owner} is not named: {conflict:?}");
            anyhow::Ok(())
        };
        in_conflict_naming("second", "first").await?;
        let cm = config_maps(testbed, 0, ns).get("contested").await?;
        ensure!(cm.data.unwrap_or_default()["by"] == "first", "the second took it over");
        // The oldest now selects the cluster: it takes the object over, and "first" is the
        // one in Conflict.
        label_cluster(testbed, &format!("{prefix}-0"), json!({"fres-contest": "yes"})).await?;
        until("the elder's value in the member", STEP, || async {
            let cm = config_maps(testbed, 0, ns).get("contested").await?;
            let by = cm.data.unwrap_or_default().get("by").cloned();
            Ok(if by.as_deref() == Some("elder") {
                Check::Ready(())
            } else {
                Check::NotYet(format!("by {by:?}"))
            })
        })
        .await?;
        in_conflict_naming("first", "elder").await?;
        wait_status(testbed, ns, "elder", "elder Applied", |s| {
            (condition(s, "Applied").as_deref() == Some("True")).then_some(())
        })
        .await?;
        Ok(())
    });
}

#[test]
fn the_mysql_example_reaches_every_member_in_order_with_its_override_and_feedback() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    TESTBED.run(|testbed| async move {
        let prefix = "fres-d";
        let _fleet = fleet(testbed, prefix, &[]).await?;
        label_cluster(testbed, &format!("{prefix}-1"), json!({"region": "eu"})).await?;
        let mut mysql = accord_crds::testdata::example("federatedresource-mysql.yaml");
        let ns = mysql["metadata"]["namespace"]
            .as_str()
            .context("namespace")?
            .to_owned();
        let ns = ns.as_str();
        mysql["spec"]["placement"]["clusters"] =
            json!((0..3).map(|i| format!("{prefix}-{i}")).collect::<Vec<_>>());
        let api: Api<Secret> = Api::namespaced(testbed.mgmt().client(), ns);
        ensure_namespace(testbed.mgmt(), ns).await?;
        api.patch(
            "mysql-credentials",
            &PatchParams::apply(FM).force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "mysql-credentials"}, "stringData": {"password": "x"}})),
        )
        .await?;
        apply(testbed, ns, &mysql).await?;

        let status = wait_status(testbed, ns, "mysql", "Available=True", |s| {
            (condition(s, "Available").as_deref() == Some("True")).then(|| s.clone())
        })
        .await?;
        for p in &status.placements {
            ensure!(
                p.feedback.get("readyReplicas").map(String::as_str) == Some("3"),
                "{p:?}"
            );
            ensure!(
                p.feedback.get("instances").map(String::as_str) == Some("3"),
                "{p:?}"
            );
            let eu = p.cluster == format!("{prefix}-1");
            ensure!(p.overrides == if eu { vec![0] } else { vec![] }, "{p:?}");
        }
        for m in 0..3 {
            let sts: Api<k8s_openapi::api::apps::v1::StatefulSet> =
                Api::namespaced(testbed.members()[m].client(), ns);
            let s = sts.get("mysql").await?;
            let image = s
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|p| p.containers[0].image.clone());
            let want = if m == 1 {
                "eu.registry.example.com/mysql:8.4"
            } else {
                "registry.example.com/mysql:8.4"
            };
            ensure!(image.as_deref() == Some(want), "member {m}: {image:?}");
            ensure!(
                s.status.and_then(|s| s.ready_replicas) == Some(3),
                "member {m}: not 3 ready"
            );
            // The definition was Established before the custom resource was created.
            let crds: Api<CustomResourceDefinition> = Api::all(testbed.members()[m].client());
            let crd = crds.get("mysqlclusters.mysql.example.com").await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "Established" && c.status == "True")
                .and_then(|c| c.last_transition_time)
                .context("not Established")?;
            let gvk = GroupVersionKind::gvk("mysql.example.com", "v1", "MySQLCluster");
            let clusters: Api<DynamicObject> = Api::namespaced_with(
                testbed.members()[m].client(),
                ns,
                &ApiResource::from_gvk_with_plural(&gvk, "mysqlclusters"),
            );
            let created = clusters
                .get("main")
                .await?
                .metadata
                .creation_timestamp
                .context("no creationTimestamp")?;
            ensure!(
                created.0 >= established.0,
                "member {m}: MySQLCluster created {created:?} before Established {established:?}"
            );
        }
        Ok(())
    });
}

#[test]
fn neither_a_member_hpa_nor_a_scale_policy_fights_the_delivery() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    TESTBED.run(|testbed| async move {
        let prefix = "fres-e";
        let ns = "fres-replicas";
        let _fleet = fleet(testbed, prefix, &[]).await?;
        let clusters: Vec<String> = (0..3).map(|i| format!("{prefix}-{i}")).collect();
        // `web` is divided by a scale policy: its manifest names replicas, which the hub
        // leaves out. `api` has a member HPA: its manifest names none.
        let mut web = accord_e2e::fleet::pause_deployment("web", 1);
        web["metadata"]["namespace"] = json!(ns);
        let mut api_deployment = accord_e2e::fleet::pause_deployment("api", 1);
        api_deployment["spec"].as_object_mut().unwrap().remove("replicas");
        let object = |generation: u32| {
            json!({
                "apiVersion": "accord.io/v1beta1", "kind": "FederatedResource",
                "metadata": {"name": "apps", "namespace": ns},
                "spec": {
                    "placement": {"clusters": clusters},
                    "manifests": [web, api_deployment,
                        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "resync"},
                         "data": {"generation": generation.to_string()}}],
                }
            })
        };
        ensure_namespace(testbed.mgmt(), ns).await?;
        let policies: Api<accord_crds::CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), ns);
        policies
            .patch(
                "web",
                &PatchParams::apply(FM).force(),
                &Patch::Apply(json!({
                    "apiVersion": "accord.io/v1beta1", "kind": "CrossClusterScalePolicy",
                    "metadata": {"name": "web", "namespace": ns},
                    "spec": {"targetRef": {"name": "web"}, "desiredReplicas": 6,
                        "distribution": clusters.iter().map(|c| json!({"cluster": c, "weight": 1})).collect::<Vec<_>>()}
                })),
            )
            .await?;
        apply(testbed, ns, &object(0)).await?;
        let status = wait_status(testbed, ns, "apps", "Applied=True", |s| {
            (condition(s, "Applied").as_deref() == Some("True")).then(|| s.clone())
        })
        .await?;
        for p in &status.placements {
            let m = p.message.as_deref().unwrap_or_default();
            ensure!(m.contains(&format!("spec.replicas of Deployment {ns}/web is left to CrossClusterScalePolicy {ns}/web")), "{m}");
        }
        // The scale policy's 2 each; a member HPA (another field manager, as the HPA
        // controller writes through the scale subresource) sets api to 4 in every member.
        for m in 0..3 {
            let deployments: Api<Deployment> = Api::namespaced(testbed.members()[m].client(), ns);
            until(&format!("web divided in member {m}"), STEP, || async {
                let r = deployments.get("web").await?.spec.and_then(|s| s.replicas);
                Ok(if r == Some(2) { Check::Ready(()) } else { Check::NotYet(format!("{r:?}")) })
            })
            .await?;
            let hpas: Api<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler> =
                Api::namespaced(testbed.members()[m].client(), ns);
            hpas.patch(
                "api",
                &PatchParams::apply(FM).force(),
                &Patch::Apply(json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                    "metadata": {"name": "api"},
                    "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
                        "minReplicas": 4, "maxReplicas": 8}})),
            )
            .await?;
            deployments
                .patch_scale(
                    "api",
                    &PatchParams {
                        field_manager: Some("horizontal-pod-autoscaler".into()),
                        ..Default::default()
                    },
                    &Patch::Merge(json!({"spec": {"replicas": 4}})),
                )
                .await?;
        }
        let snapshot = || async {
            let mut out = Vec::new();
            for m in 0..3 {
                let deployments: Api<Deployment> = Api::namespaced(testbed.members()[m].client(), ns);
                for name in ["web", "api"] {
                    let d = deployments.get(name).await?;
                    out.push((m, name, d.metadata.generation, d.spec.and_then(|s| s.replicas)));
                }
            }
            anyhow::Ok(out)
        };
        let before = snapshot().await?;
        // 20 resyncs: each a new decision the agents apply in full.
        for generation in 1..=20u32 {
            apply(testbed, ns, &object(generation)).await?;
            on_every_member(&format!("resync {generation}"), |m| async move {
                let cm = config_maps(testbed, m, ns).get_opt("resync").await?;
                let seen = cm.and_then(|c| c.data).and_then(|d| d.get("generation").cloned());
                Ok((seen == Some(generation.to_string())).then_some(()))
            })
            .await?;
        }
        let after = snapshot().await?;
        ensure!(before == after, "replicas or generations changed across 20 resyncs:\nbefore {before:?}\nafter  {after:?}");
        for (m, name, _, replicas) in &after {
            let want = if *name == "web" { 2 } else { 4 };
            ensure!(*replicas == Some(want), "member {m} {name}: {replicas:?}");
        }
        Ok(())
    });
}

/// Sets ManagedCluster `cluster`'s `spec.taints` and `spec.unschedulable`.
async fn taint_cluster(
    testbed: &Testbed,
    cluster: &str,
    taints: Value,
    drained: bool,
) -> Result<()> {
    let patch = json!({"spec": {"taints": taints, "unschedulable": drained}});
    accord_e2e::fleet::patch_managed_cluster(testbed, cluster, patch).await
}

/// Waits until member `member` holds ConfigMap `name` in `ns` (`present`) or not.
async fn config_map_on(
    testbed: &Testbed,
    member: usize,
    ns: &str,
    name: &str,
    present: bool,
) -> Result<()> {
    let what = format!(
        "ConfigMap {ns}/{name} {} member {member}",
        if present { "on" } else { "gone from" }
    );
    until(&what, STEP, || async {
        let found = config_maps(testbed, member, ns)
            .get_opt(name)
            .await?
            .is_some();
        Ok(if found == present {
            Check::Ready(())
        } else {
            Check::NotYet(format!("present: {found}"))
        })
    })
    .await
}

#[test]
fn taints_and_the_drain_switch_keep_deliveries_out_and_no_execute_takes_them_away_after_the_toleration()
 {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    TESTBED.run(|testbed| async move {
        let prefix = "fres-t";
        let ns = "fres-taints";
        let _fleet = fleet(testbed, prefix, &[]).await?;
        let cluster = |i: usize| format!("{prefix}-{i}");
        let object = |name: &str, tolerations: Value| {
            json!({
                "apiVersion": "accord.io/v1beta1", "kind": "FederatedResource",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "placement": {"clusters": [cluster(0), cluster(1), cluster(2)],
                                  "tolerations": tolerations},
                    "manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": name}, "data": {"a": "b"}}],
                }
            })
        };
        let placement_of = |s: &accord_crds::FederatedResourceStatus, i: usize| {
            s.placements
                .iter()
                .find(|p| p.cluster == cluster(i))
                .cloned()
        };

        // A NoSchedule taint on member 1: a new delivery goes to 0 and 2 only, and the
        // status says why not to 1.
        let no_schedule = json!([{"key": "accord.io/maintenance", "effect": "NoSchedule"}]);
        taint_cluster(testbed, &cluster(1), no_schedule.clone(), false).await?;
        apply(testbed, ns, &object("first", json!([]))).await?;
        config_map_on(testbed, 0, ns, "first", true).await?;
        config_map_on(testbed, 2, ns, "first", true).await?;
        let held = wait_status(testbed, ns, "first", "member 1 held by its taint", |s| {
            placement_of(s, 1).filter(|p| {
                p.state == PlacementState::Pending
                    && p.message
                        .as_deref()
                        .is_some_and(|m| m.contains("accord.io/maintenance:NoSchedule"))
            })
        })
        .await?;
        ensure!(
            config_maps(testbed, 1, ns)
                .get_opt("first")
                .await?
                .is_none(),
            "{held:?}"
        );

        // Tolerating it, the delivery reaches member 1 too.
        let tolerate = json!([{"key": "accord.io/maintenance", "operator": "Exists"}]);
        apply(testbed, ns, &object("first", tolerate)).await?;
        config_map_on(testbed, 1, ns, "first", true).await?;

        // Without the toleration again, NoSchedule leaves what member 1 holds alone; NoExecute
        // takes it away (the default deletionPolicy Delete removes the ConfigMap).
        apply(testbed, ns, &object("first", json!([]))).await?;
        wait_status(testbed, ns, "first", "the new generation applied", |s| {
            (condition(s, "Applied").as_deref() == Some("True")
                && placement_of(s, 1).is_some_and(|p| p.state == PlacementState::Synced))
            .then_some(())
        })
        .await?;
        config_map_on(testbed, 1, ns, "first", true).await?;
        // "patient" tolerates the NoSchedule taint, and NoExecute for 5 s.
        let patient = json!([
            {"key": "accord.io/maintenance", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "accord.io/maintenance", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 5},
        ]);
        apply(testbed, ns, &object("patient", patient)).await?;
        config_map_on(testbed, 1, ns, "patient", true).await?;
        let no_execute = json!([{"key": "accord.io/maintenance", "effect": "NoExecute"}]);
        let tainted_at = std::time::Instant::now();
        taint_cluster(testbed, &cluster(1), no_execute, false).await?;
        config_map_on(testbed, 1, ns, "first", false).await?;
        config_map_on(testbed, 1, ns, "patient", false).await?;
        // The hub counts whole seconds from when it saw the taint, which is after the patch.
        let stayed = tainted_at.elapsed();
        ensure!(
            stayed >= Duration::from_secs(4),
            "a NoExecute toleration of 5 s kept the delivery only {stayed:?}"
        );
        println!("patient's ConfigMap left member 1 {stayed:?} after the NoExecute taint");
        ensure!(
            config_maps(testbed, 0, ns)
                .get_opt("patient")
                .await?
                .is_some(),
            "the untainted member keeps it"
        );

        // A drained member 2 gets no new delivery and keeps what it holds.
        taint_cluster(testbed, &cluster(2), json!([]), true).await?;
        apply(testbed, ns, &object("second", json!([]))).await?;
        config_map_on(testbed, 0, ns, "second", true).await?;
        wait_status(testbed, ns, "second", "member 2 held as drained", |s| {
            placement_of(s, 2).filter(|p| {
                p.state == PlacementState::Pending
                    && p.message
                        .as_deref()
                        .is_some_and(|m| m.contains("unschedulable"))
            })
        })
        .await?;
        ensure!(
            config_maps(testbed, 2, ns)
                .get_opt("second")
                .await?
                .is_none(),
            "drained, yet delivered"
        );
        ensure!(
            config_maps(testbed, 2, ns)
                .get_opt("first")
                .await?
                .is_some(),
            "a drain took away what member 2 held"
        );

        taint_cluster(testbed, &cluster(1), json!([]), false).await?;
        taint_cluster(testbed, &cluster(2), json!([]), false).await?;
        config_map_on(testbed, 1, ns, "first", true).await?;
        config_map_on(testbed, 1, ns, "patient", true).await?;
        config_map_on(testbed, 2, ns, "second", true).await?;
        Ok(())
    });
}

/// `spec.placement.preferences`: a delivery goes to the first region with an eligible
/// cluster, moves to the next when every cluster of the first is unavailable, and comes
/// back when one returns; the status names the clusters left out and why.
#[test]
fn preferences_move_a_delivery_to_the_next_region_and_back() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    TESTBED.run(|testbed| async move {
        let prefix = "fres-p";
        let ns = "fres-preferences";
        let mut fleet = fleet(testbed, prefix, &[]).await?;
        let cluster = |i: usize| format!("{prefix}-{i}");
        for (i, region) in [(0, "us"), (1, "eu"), (2, "ap")] {
            label_cluster(
                testbed,
                &cluster(i),
                json!({"region": region, "e2e": prefix}),
            )
            .await?;
        }
        let object = json!({
            "apiVersion": "accord.io/v1beta1", "kind": "FederatedResource",
            "metadata": {"name": "regional", "namespace": ns},
            "spec": {
                "placement": {
                    "clusterSelector": {"matchLabels": {"e2e": prefix}},
                    "preferences": [
                        {"name": "us", "clusterSelector": {"matchLabels": {"region": "us"}}},
                        {"name": "eu", "clusterSelector": {"matchLabels": {"region": "eu"}}},
                    ],
                },
                "manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "regional"}, "data": {"a": "b"}}],
            }
        });
        apply(testbed, ns, &object).await?;
        config_map_on(testbed, 0, ns, "regional", true).await?;
        let left_out = |s: &accord_crds::FederatedResourceStatus, reason: LeftOutReason| {
            s.selection.as_ref().and_then(|sel| {
                sel.left_out
                    .iter()
                    .find(|l| l.reason == reason)
                    .map(|l| l.clusters.clone())
            })
        };
        wait_status(
            testbed,
            ns,
            "regional",
            "eu named as the fallback not reached",
            |s| (left_out(s, LeftOutReason::FallbackNotReached)? == [cluster(1)]).then_some(()),
        )
        .await?;
        ensure!(
            config_maps(testbed, 1, ns)
                .get_opt("regional")
                .await?
                .is_none()
                && config_maps(testbed, 2, ns)
                    .get_opt("regional")
                    .await?
                    .is_none(),
            "delivered outside the first region"
        );

        // The only us cluster goes away: eu takes the delivery, ap never does.
        fleet.kill_agent(&cluster(0))?;
        config_map_on(testbed, 1, ns, "regional", true).await?;
        wait_status(testbed, ns, "regional", "us named as unavailable", |s| {
            (left_out(s, LeftOutReason::Unavailable)? == [cluster(0)]).then_some(())
        })
        .await?;

        // It returns: the delivery goes back to us and leaves eu.
        fleet.start_agent(&cluster(0))?;
        config_map_on(testbed, 1, ns, "regional", false).await?;
        config_map_on(testbed, 0, ns, "regional", true).await?;
        ensure!(
            config_maps(testbed, 2, ns)
                .get_opt("regional")
                .await?
                .is_none(),
            "ap is in no preference group"
        );
        Ok(())
    });
}

/// FederatedResource `web` in `ns` delivering `web` to the test's clusters (`prefix`, as
/// [`label_rings`] labels them), ring by ring, with `soak` and `deadline`.
fn ring_rollout(prefix: &str, ns: &str, web: Value, soak: &str, deadline: &str) -> Value {
    let ring = ring_label(prefix);
    json!({
        "apiVersion": "accord.io/v1beta1", "kind": "FederatedResource",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "placement": {"clusterSelector": {"matchExpressions": [
                {"key": ring, "operator": "Exists"}]}},
            "manifests": [web],
            "rollout": {"strategy": "ProgressivePerGroup", "groups": {"byLabel": ring},
                        "minSuccessTime": soak, "progressDeadline": deadline},
        }
    })
}

/// Applies `object` (a first revision) paused until the hub selects every ring, then
/// as it is: the hub may see the rings' labels one by one, and a ring it has not seen yet
/// would be a ring of its own in the wrong place.
async fn apply_when_selected(testbed: &Testbed, ns: &str, object: &Value) -> Result<()> {
    let mut paused = object.clone();
    paused["spec"]["rollout"]["paused"] = json!(true);
    apply(testbed, ns, &paused).await?;
    let name = object["metadata"]["name"].as_str().context("name")?;
    wait_status(testbed, ns, name, "every ring selected", |s| {
        (s.clusters == Some(RING_MEMBERS as i32)).then_some(())
    })
    .await?;
    apply(testbed, ns, object).await
}

/// The ring label of a test's clusters: a key of its own, as the management cluster's
/// ManagedClusters outlive each test.
fn ring_label(prefix: &str) -> String {
    format!("ring-{prefix}")
}

/// Members of the rollout tests: three rings, the last of two.
const RING_MEMBERS: usize = 4;

/// The ring of member `m`: 0, 1, 2, 2.
fn ring_of(m: usize) -> usize {
    m.min(2)
}

/// Labels clusters `<prefix>-0..3` with their rings.
async fn label_rings(testbed: &Testbed, prefix: &str) -> Result<()> {
    for i in 0..RING_MEMBERS {
        let labels = json!({ ring_label(prefix): ring_of(i).to_string() });
        label_cluster(testbed, &format!("{prefix}-{i}"), labels).await?;
    }
    Ok(())
}

/// A pod template's `nodeSelector` (`None` without one), as text.
fn node_selector(d: &Deployment) -> Option<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.node_selector.as_ref())
        .map(|s| format!("{s:?}"))
}

/// A watch of Deployment `name` in member `m`, reading `of` from its pod template.
fn watch_template(
    testbed: &Testbed,
    m: usize,
    ns: &str,
    name: &str,
    of: fn(&Deployment) -> Option<String>,
) -> Watched {
    Watched::start(Api::namespaced(testbed.members()[m].client(), ns), name, of)
}

#[test]
fn a_progressive_rollout_goes_ring_by_ring_and_a_change_that_breaks_the_first_ring_comes_back() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    TESTBED.run(|testbed| async move {
        let prefix = "fres-r";
        let ns = "fres-rollout";
        let fleet = fleet_of(testbed, prefix, RING_MEMBERS, &[]).await?;
        label_rings(testbed, prefix).await?;
        let object = |node_selector: Option<Value>| {
            let mut web = accord_e2e::fleet::pause_deployment("web", 2);
            if let Some(s) = node_selector {
                web["spec"]["template"]["spec"]["nodeSelector"] = s;
            }
            ring_rollout(prefix, ns, web, "3s", "20s")
        };

        // (a) The first revision: ring 0, then ring 1 once ring 0 was healthy for the
        // soak, then ring 2 — recorded by each member's API server as the creation time.
        apply_when_selected(testbed, ns, &object(None)).await?;
        let status = wait_status(testbed, ns, "web", "the rollout Succeeded", |s| {
            s.rollout
                .as_ref()
                .filter(|r| r.phase == "Succeeded" && r.succeeded == RING_MEMBERS as i32)
                .map(|_| s.clone())
        })
        .await?;
        let rollout = status.rollout.clone().context("status.rollout")?;
        ensure!(
            rollout.succeeded == RING_MEMBERS as i32 && rollout.failed == 0,
            "{rollout:?}"
        );
        // Each placement names the revision it runs: the one rolled out.
        ensure!(
            status
                .placements
                .iter()
                .all(|p| p.revision.as_deref() == Some(rollout.revision.as_str())),
            "{:?}",
            status.placements
        );
        let mut created = Vec::new();
        for m in 0..RING_MEMBERS {
            let deployments: Api<Deployment> = Api::namespaced(testbed.members()[m].client(), ns);
            let d = deployments.get("web").await?;
            created.push(
                d.metadata
                    .creation_timestamp
                    .context("created")?
                    .0
                    .as_second(),
            );
        }
        ensure!(
            created[0] < created[1] && created[1] < created[2] && created[1] < created[3],
            "rings out of order: created at {created:?}"
        );
        eprintln!("rollout: rings created at {created:?} (unix seconds; soak 3 s)");

        // (b) A change no node of any member can schedule: only ring 0 ever carries it, and
        // at the deadline it goes back to the template before.
        let watches: Vec<_> = (0..RING_MEMBERS)
            .map(|m| watch_template(testbed, m, ns, "web", node_selector))
            .collect();
        let before = status.rollout.map(|r| r.revision).unwrap_or_default();
        let edited = Instant::now();
        apply(
            testbed,
            ns,
            &object(Some(json!({"accord-e2e/nowhere": "true"}))),
        )
        .await?;
        let status = wait_status(testbed, ns, "web", "RolledBack", |s| {
            s.rollout
                .as_ref()
                .filter(|r| r.phase == "RolledBack" && r.revision != before)
                .map(|_| s.clone())
        })
        .await?;
        let rolled_back = status
            .conditions
            .iter()
            .find(|c| c.type_ == "RolledBack")
            .context("the RolledBack condition")?;
        ensure!(rolled_back.status == "True", "{rolled_back:?}");
        ensure!(
            rolled_back.message.contains(&format!("{prefix}-0 (")),
            "{}",
            rolled_back.message
        );
        let failed: Vec<&str> = status
            .rollout
            .iter()
            .flat_map(|r| &r.failed_clusters)
            .map(|f| f.cluster.as_str())
            .collect();
        ensure!(failed == [format!("{prefix}-0")], "{failed:?}");
        // Ring 0's Deployment is back on the template without the selector.
        let deployments: Api<Deployment> = Api::namespaced(testbed.members()[0].client(), ns);
        until("ring 0 back on the previous template", STEP, || async {
            let d = deployments.get("web").await?;
            let selector = d
                .spec
                .and_then(|s| s.template.spec)
                .and_then(|p| p.node_selector);
            Ok(match selector {
                None => Check::Ready(()),
                Some(s) => Check::NotYet(format!("{s:?}")),
            })
        })
        .await?;
        eprintln!(
            "rollout: edit → ring 0 back on the previous template in {:.1} s (deadline 20 s)",
            edited.elapsed().as_secs_f64()
        );
        // Every placement names the revision before as the one it runs.
        wait_status(
            testbed,
            ns,
            "web",
            "every line on the revision before",
            |s| {
                s.placements
                    .iter()
                    .all(|p| p.revision.as_deref() == Some(before.as_str()))
                    .then_some(())
            },
        )
        .await?;
        wait_event(testbed, ns, "web", "Warning", "RolledBack", STEP).await?;
        // Counted by the hub: one rollout ended RolledBack, the first Succeeded (once, or
        // twice when the hub decided before it saw the rings' labels: nothing selected is a
        // rollout that succeeded), and at least their four steps (a ring whose label the
        // hub saw late is a step of its own).
        let metrics = testbed
            .http()
            .get(format!("{}/metrics", fleet.hub.http))
            .send()
            .await?
            .text()
            .await?;
        for series in [
            r#"accord_hub_rollouts_ended_total{kind="FederatedResource",phase="RolledBack"} 1"#,
            r#"accord_hub_rollouts_ended_total{kind="FederatedResource",phase="Succeeded"}"#,
            "accord_hub_rollback_delay_seconds_count 1",
        ] {
            ensure!(
                metrics.contains(series),
                "no {series} in the hub's metrics:\n{metrics}"
            );
        }
        let steps = accord_e2e::hub::parse_metric(&metrics, "accord_hub_rollout_steps_total");
        ensure!(steps.is_some_and(|n| n >= 4.0), "rollout steps {steps:?}");
        // Ring 0's watch saw the failing template and then the one before; the other rings'
        // watches never saw it.
        until(
            "ring 0's watch sees the template come back",
            STEP,
            || async {
                let seen = watches[0].values();
                Ok(
                    if seen.iter().any(Option::is_some) && seen.last() == Some(&None) {
                        Check::Ready(())
                    } else {
                        Check::NotYet(format!("{seen:?}"))
                    },
                )
            },
        )
        .await?;
        for (m, watch) in watches.iter().enumerate().skip(1) {
            let seen = watch.values();
            ensure!(
                seen.iter().all(Option::is_none),
                "member {m} (ring {}) carried the failing template: {seen:?}",
                ring_of(m)
            );
        }

        // (c) Through kubectl's plugin: a good change paused right away holds before the
        // next ring, and resumed it goes on; `rollout status -w` ends 0 once it succeeded.
        let plugin = accord_e2e::hub::accord_binary("kubectl-accord")?;
        let path = format!(
            "{}:{}",
            plugin.parent().context("the plugin's directory")?.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let kubectl_accord = |args: &[&str]| {
            let mut command = testbed.kubectl(testbed.mgmt());
            command
                .env("PATH", &path)
                .arg("accord")
                .args(args)
                .args(["-n", ns]);
            command
        };
        let mut good = object(None);
        good["spec"]["manifests"][0]["spec"]["template"]["metadata"]["annotations"] =
            json!({"accord-e2e/revision": "3"});
        apply(testbed, ns, &good).await?;
        let out = kubectl_accord(&["rollout", "pause", "fres/web"])
            .output()
            .await?;
        ensure!(
            out.status.success(),
            "pause: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let revision_of = |m: usize| async move {
            let deployments: Api<Deployment> = Api::namespaced(testbed.members()[m].client(), ns);
            anyhow::Ok(revision_annotation(&deployments.get("web").await?))
        };
        // Paused with nothing updating: ring 0 done with the revision when the pause came
        // after the first step, nothing sent when before it.
        let held = wait_status(testbed, ns, "web", "Paused between rings", |s| {
            s.rollout
                .as_ref()
                .filter(|r| r.phase == "Paused" && r.updating == 0)
                .cloned()
        })
        .await?;
        let out = kubectl_accord(&["rollout", "status", "fres/web"])
            .output()
            .await?;
        let printed = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success() && printed.contains(": Paused, step"),
            "{printed}"
        );
        for m in 1..RING_MEMBERS {
            ensure!(
                revision_of(m).await?.is_none(),
                "member {m} got the paused revision ({held:?})"
            );
        }
        let out = kubectl_accord(&["rollout", "resume", "fres/web"])
            .output()
            .await?;
        ensure!(
            out.status.success(),
            "resume: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let watched = tokio::time::timeout(
            STEP,
            kubectl_accord(&["rollout", "status", "-w", "fres/web"]).output(),
        )
        .await
        .context("rollout status -w ended within a minute")??;
        let printed = String::from_utf8_lossy(&watched.stdout);
        println!("kubectl accord rollout status -w:\n{printed}");
        ensure!(
            watched.status.success() && printed.contains(": Succeeded, step"),
            "{printed}{}",
            String::from_utf8_lossy(&watched.stderr)
        );
        for m in 0..RING_MEMBERS {
            ensure!(
                revision_of(m).await?.as_deref() == Some("3"),
                "member {m} after the resume"
            );
        }
        // The history: three revisions, the nodeSelector one RolledBack; undo to the first
        // writes its spec back, rolled out as any change.
        let out = kubectl_accord(&["rollout", "history", "fres/web"])
            .output()
            .await?;
        let printed = String::from_utf8_lossy(&out.stdout).into_owned();
        println!("kubectl accord rollout history:\n{printed}");
        let outcomes: Vec<&str> = printed
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().nth(4).unwrap_or_default())
            .collect();
        ensure!(
            out.status.success() && outcomes == ["Succeeded", "RolledBack", "Succeeded"],
            "{printed}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = kubectl_accord(&["rollout", "undo", "fres/web", "--to-revision", "1"])
            .output()
            .await?;
        ensure!(
            out.status.success(),
            "undo: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let first = printed
            .lines()
            .nth(1)
            .and_then(|l| l.split_whitespace().nth(1))
            .context("revision 1's hash")?
            .to_owned();
        wait_status(testbed, ns, "web", "revision 1 rolled out again", |s| {
            s.rollout
                .as_ref()
                .filter(|r| r.revision == first && r.phase == "Succeeded")
                .map(|_| ())
        })
        .await?;
        for m in 0..RING_MEMBERS {
            ensure!(revision_of(m).await?.is_none(), "member {m} after the undo");
        }
        let out = kubectl_accord(&["rollout", "pause", "fres/absent"])
            .output()
            .await?;
        ensure!(
            out.status.code() == Some(1)
                && String::from_utf8_lossy(&out.stderr).contains("not found"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    });
}

/// The pod template's `accord-e2e/revision` annotation.
fn revision_annotation(d: &Deployment) -> Option<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get("accord-e2e/revision").cloned())
}

#[test]
fn a_leader_killed_during_a_soak_is_followed_by_one_that_goes_on_from_the_same_step() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    TESTBED.run(|testbed| async move {
        use accord_e2e::hub::{HubOptions, HubProcess};
        const SOAK: u64 = 15;
        let prefix = "fres-d";
        let ns = "fres-failover";
        // The leader holds no agent streams (the agents talk to the fleet's replica), so
        // killing it moves only leadership.
        let ttl = ["--election-ttl", "2s"];
        let leader = HubProcess::start(
            testbed,
            &HubOptions {
                replica: format!("hub-{prefix}-leader"),
                etcd_prefix: format!("/t-{prefix}/"),
                extra_args: ttl.iter().map(|s| (*s).to_owned()).collect(),
            },
        )
        .await?;
        until("the first replica leads", STEP, || async {
            Ok(match leader.metric(testbed.http(), "accord_hub_is_leader").await? {
                Some(1.0) => Check::Ready(()),
                other => Check::NotYet(format!("is_leader {other:?}")),
            })
        })
        .await?;
        let fleet = fleet_of(testbed, prefix, RING_MEMBERS, &ttl).await?;
        label_rings(testbed, prefix).await?;
        let object = |revision: &str, soak: &str| {
            let mut web = accord_e2e::fleet::pause_deployment("web", 2);
            web["spec"]["template"]["metadata"]["annotations"] =
                json!({"accord-e2e/revision": revision});
            ring_rollout(prefix, ns, web, soak, "2m")
        };
        apply_when_selected(testbed, ns, &object("1", "1s")).await?;
        wait_status(testbed, ns, "web", "revision 1 Succeeded", |s| {
            s.rollout.as_ref().filter(|r| r.phase == "Succeeded" && r.succeeded == RING_MEMBERS as i32).map(|_| ())
        })
        .await?;

        // Revision 2 with a 15 s soak: once ring 0 runs it healthy, 8 s into the soak,
        // kill -9 the leader.
        let watches: Vec<_> = (0..RING_MEMBERS)
            .map(|m| watch_template(testbed, m, ns, "web", revision_annotation))
            .collect();
        apply(testbed, ns, &object("2", &format!("{SOAK}s"))).await?;
        let ring0: Api<Deployment> = Api::namespaced(testbed.members()[0].client(), ns);
        until("ring 0 healthy on revision 2", STEP, || async {
            let Some(d) = ring0.get_opt("web").await? else {
                return Ok(Check::NotYet("no Deployment yet".into()));
            };
            let on_it = revision_annotation(&d);
            let status = d.status.unwrap_or_default();
            let healthy = on_it.as_deref() == Some("2")
                && status.updated_replicas == Some(2)
                && status.available_replicas == Some(2)
                && status.replicas == Some(2);
            Ok(if healthy { Check::Ready(()) } else { Check::NotYet(format!("{on_it:?} {status:?}")) })
        })
        .await?;
        let healthy = Instant::now();
        tokio::time::sleep(Duration::from_secs(8)).await;
        accord_e2e::fleet::kill9(testbed, leader.id)?;
        let killed = Instant::now();
        until("the fleet's replica leads", STEP, || async {
            Ok(match fleet.hub.metric(testbed.http(), "accord_hub_is_leader").await? {
                Some(1.0) => Check::Ready(()),
                other => Check::NotYet(format!("is_leader {other:?}")),
            })
        })
        .await?;
        let status = wait_status(testbed, ns, "web", "revision 2 Succeeded", |s| {
            s.rollout.as_ref().filter(|r| r.phase == "Succeeded" && r.succeeded == RING_MEMBERS as i32).cloned()
        })
        .await?;
        // One step per ring: the new leader repeated none.
        ensure!(status.step == 3, "{status:?}");
        // Each member saw revision 2 once, after revision 1, never back; in ring order.
        let mut reached = Vec::new();
        for (m, watch) in watches.iter().enumerate() {
            let seen = watch.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            let order: Vec<Option<String>> = seen.iter().map(|(v, _)| v.clone()).collect();
            ensure!(order == [Some("1".to_owned()), Some("2".to_owned())], "member {m} saw {order:?}");
            reached.push(seen[1].1);
        }
        ensure!(
            reached[0] < reached[1] && reached[1] < reached[2] && reached[1] < reached[3],
            "rings out of order"
        );
        // The soak was not started again by the new leader: ring 1 got revision 2 about a
        // soak after ring 0 was healthy, sooner than a soak after the kill.
        let ring1_after_healthy = reached[1].duration_since(healthy).as_secs_f64();
        let ring1_after_kill = reached[1].duration_since(killed).as_secs_f64();
        println!(
            "leader killed 8 s into a {SOAK} s soak: ring 1 got the revision {ring1_after_healthy:.1} s \
             after ring 0 was healthy, {ring1_after_kill:.1} s after the kill"
        );
        ensure!(
            ring1_after_healthy >= SOAK as f64 - 1.0 && ring1_after_kill < SOAK as f64 - 2.0,
            "ring 1 got it {ring1_after_healthy:.1} s after ring 0 was healthy and \
             {ring1_after_kill:.1} s after the kill: the soak was started again"
        );
        Ok(())
    });
}
