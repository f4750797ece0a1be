//! Two writers of one field never fight: a real hub and real agents against real member
//! API servers, with a generation counter on the Deployment they share.
//!
//! - An undecodable CrossClusterScalePolicy (stored while the CRD's schema was loosened)
//!   and a hub restart: the FederatedResource that delivers a divided Deployment still
//!   leaves `spec.replicas` to the policy, so the agent's delivery (`accord`) and its scale
//!   enforcer (`accord-agent`) never set it in turn.
//! - A scaler that is not an HPA (a second field manager setting `spec.replicas` every 3 s,
//!   as KEDA or a person does): the agent restores the field once, then reports `Conflict`
//!   naming the other manager and the field, and backs off instead of rewriting the
//!   Deployment every few seconds.
//!
//! Each case watches the Deployment for 60 s and allows a handful of generations; the fight
//! these guard against made dozens (17 a second in the first case). Both are fault-suite
//! cases (ignored by the default test command; `bash e2e/faults.sh` runs them and prints
//! their `fight <case>:` lines); the fight guard and the field claims have unit tests in
//! the default suite.

use std::time::{Duration, Instant};

use accord_crds::{CrossClusterScalePolicy, FederatedResource, PlacementState};
use accord_e2e::fleet::{Fleet, ensure_namespace, pause_deployment};
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(1));
/// One hub at a time: every hub reconciles (and writes the status of) every policy on the
/// shared management cluster.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
const STEP: Duration = Duration::from_secs(90);
/// How long each case counts the Deployment's generations.
const WATCHED: Duration = Duration::from_secs(60);
/// Generations allowed in [`WATCHED`] beyond the changes the case itself makes.
const HANDFUL: i64 = 4;
const FM: &str = "accord-e2e-tests";
const CCSP_CRD: &str = "crossclusterscalepolicies.accord.io";

async fn apply_to<K>(api: &Api<K>, object: &Value) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = object["metadata"]["name"].as_str().context("name")?;
    api.patch(name, &PatchParams::apply(FM).force(), &Patch::Apply(object))
        .await?;
    Ok(())
}

fn policy(ns: &str, name: &str, target: &str, desired: Value, cluster: &str) -> Value {
    json!({
        "apiVersion": "accord.io/v1beta1", "kind": "CrossClusterScalePolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"targetRef": {"name": target}, "desiredReplicas": desired,
                 "distribution": [{"cluster": cluster, "weight": 1}]}
    })
}

fn policies(testbed: &Testbed, ns: &str) -> Api<CrossClusterScalePolicy> {
    Api::namespaced(testbed.mgmt().client(), ns)
}

fn member_deployments(testbed: &Testbed, ns: &str) -> Api<Deployment> {
    Api::namespaced(testbed.members()[0].client(), ns)
}

/// Waits until the member's Deployment `name` has `replicas`; answers its generation.
async fn wait_replicas(testbed: &Testbed, ns: &str, name: &str, replicas: i32) -> Result<i64> {
    let api = member_deployments(testbed, ns);
    until(&format!("{name} at {replicas} replicas"), STEP, || async {
        let d = api.get_opt(name).await?;
        let r = d.as_ref().and_then(|d| d.spec.as_ref()?.replicas);
        Ok(match d {
            Some(d) if r == Some(replicas) => Check::Ready(d.metadata.generation.unwrap_or(0)),
            _ => Check::NotYet(format!("replicas {r:?}")),
        })
    })
    .await
}

async fn generation(testbed: &Testbed, ns: &str, name: &str) -> Result<i64> {
    let d = member_deployments(testbed, ns).get(name).await?;
    Ok(d.metadata.generation.unwrap_or(0))
}

/// The field managers that own `spec.replicas` of the member's Deployment `name`.
async fn replicas_owners(testbed: &Testbed, ns: &str, name: &str) -> Result<Vec<String>> {
    let d = member_deployments(testbed, ns).get(name).await?;
    Ok(d.metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:spec/f:replicas").is_some())
        })
        .filter_map(|e| e.manager)
        .collect())
}

/// `schema` (a CRD version's openAPIV3Schema) without the bounds, format and rules of
/// `spec.desiredReplicas`: what lets a client store 3000000000 in it.
fn loosened(mut crd: Value) -> Value {
    for version in crd["spec"]["versions"].as_array_mut().into_iter().flatten() {
        let field = version
            .pointer_mut("/schema/openAPIV3Schema/properties/spec/properties/desiredReplicas")
            .and_then(Value::as_object_mut);
        if let Some(field) = field {
            for key in ["maximum", "minimum", "format", "x-kubernetes-validations"] {
                field.remove(key);
            }
        }
    }
    crd
}

#[test]
#[ignore = "fault suite (bash e2e/faults.sh): watches a Deployment for 60 s"]
fn an_undecodable_scale_policy_and_a_hub_restart_never_set_two_accord_writers_fighting() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    TESTBED.run(|testbed| async move {
        let (ns, cluster) = ("fight-undecodable", "fight-a-0");
        let mut fleet = Fleet::start(testbed, "hub-fight-a", "/t-fight-a/", &[], &[(cluster, 0)]).await?;
        ensure_namespace(testbed.mgmt(), ns).await?;
        let mut frontend = pause_deployment("frontend", 1);
        frontend["metadata"]["namespace"] = json!(ns);
        let resources: Api<FederatedResource> = Api::namespaced(testbed.mgmt().client(), ns);
        apply_to(&resources, &json!({
            "apiVersion": "accord.io/v1beta1", "kind": "FederatedResource",
            "metadata": {"name": "frontend", "namespace": ns},
            "spec": {"placement": {"clusters": [cluster]}, "manifests": [frontend]}
        }))
        .await?;
        apply_to(&policies(testbed, ns), &policy(ns, "frontend-scale", "frontend", json!(2), cluster)).await?;
        wait_replicas(testbed, ns, "frontend", 2).await?;

        // A policy stored around the schema: the CRD loosened, the object created, the CRD
        // restored (the object stays as stored).
        let crds: Api<CustomResourceDefinition> = Api::all(testbed.mgmt().client());
        let original = crds.get(CCSP_CRD).await?;
        let loose: CustomResourceDefinition =
            serde_json::from_value(loosened(serde_json::to_value(&original)?))?;
        crds.replace(CCSP_CRD, &PostParams::default(), &loose).await?;
        let gvk = GroupVersionKind::gvk("accord.io", "v1beta1", "CrossClusterScalePolicy");
        let raw: Api<DynamicObject> =
            Api::namespaced_with(testbed.mgmt().client(), ns, &ApiResource::from_gvk(&gvk));
        let huge = policy(ns, "huge", "another", json!(3_000_000_000_u64), cluster);
        until("a policy of 3000000000 replicas is stored", STEP, || async {
            Ok(match raw.patch("huge", &PatchParams::apply(FM).force(), &Patch::Apply(&huge)).await {
                Ok(_) => Check::Ready(()),
                Err(e) => Check::NotYet(e.to_string()),
            })
        })
        .await?;
        let mut restore = original.clone();
        restore.metadata.resource_version = crds.get(CCSP_CRD).await?.metadata.resource_version;
        crds.replace(CCSP_CRD, &PostParams::default(), &restore).await?;
        let probe = policy(ns, "probe", "another", json!(3_000_000_000_u64), cluster);
        until("the restored schema refuses 3000000000 again", STEP, || async {
            let dry = PatchParams { dry_run: true, ..PatchParams::apply(FM).force() };
            Ok(match raw.patch("probe", &dry, &Patch::Apply(&probe)).await {
                Err(kube::Error::Api(s)) if s.code == 422 => Check::Ready(()),
                other => Check::NotYet(format!("{:?}", other.map(|_| "admitted"))),
            })
        })
        .await?;

        fleet.kill_hub()?;
        fleet.restart_hub().await?;
        apply_to(&policies(testbed, ns), &policy(ns, "frontend-scale", "frontend", json!(3), cluster)).await?;
        wait_replicas(testbed, ns, "frontend", 3).await?;
        let start = generation(testbed, ns, "frontend").await?;
        let since = Instant::now();
        tokio::time::sleep(WATCHED).await;
        let grew = generation(testbed, ns, "frontend").await? - start;
        println!("fight undecodable: frontend's generation grew {grew} in {:?}", since.elapsed());
        ensure!(grew <= HANDFUL, "frontend's generation grew {grew} in {WATCHED:?}: two writers fight");
        let owners = replicas_owners(testbed, ns, "frontend").await?;
        ensure!(owners == ["accord-agent"], "spec.replicas is owned by {owners:?}");
        let status = resources.get("frontend").await?.status.unwrap_or_default();
        let message = status.placements.first().and_then(|p| p.message.clone()).unwrap_or_default();
        ensure!(
            message.contains(&format!("spec.replicas of Deployment {ns}/frontend is left to CrossClusterScalePolicy {ns}/frontend-scale")),
            "{message}"
        );
        // The undecodable policy says so, and nothing else stopped.
        let huge = raw.get("huge").await?;
        let ready = huge.data.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
        ensure!(
            ready.iter().any(|c| c["type"] == "Ready" && c["reason"] == "InvalidSpec"),
            "{ready:?}"
        );
        raw.delete("huge", &DeleteParams::default()).await?;
        Ok(())
    });
}

#[test]
#[ignore = "fault suite (bash e2e/faults.sh): watches a Deployment for 60 s"]
fn a_scaler_that_is_not_an_hpa_gets_one_repair_then_a_conflict_naming_it() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    TESTBED.run(|testbed| async move {
        let (ns, cluster) = ("fight-scaler", "fight-b-0");
        let _fleet = Fleet::start(testbed, "hub-fight-b", "/t-fight-b/", &[], &[(cluster, 0)]).await?;
        ensure_namespace(testbed.mgmt(), ns).await?;
        ensure_namespace(&testbed.members()[0], ns).await?;
        let deployments = member_deployments(testbed, ns);
        apply_to(&deployments, &pause_deployment("web", 1)).await?;
        apply_to(&policies(testbed, ns), &policy(ns, "web", "web", json!(2), cluster)).await?;
        wait_replicas(testbed, ns, "web", 2).await?;
        until("the policy is Synced", STEP, || async {
            let p = policies(testbed, ns).get("web").await?;
            let states: Vec<_> = p.status.unwrap_or_default().placements.iter().map(|p| p.state).collect();
            Ok(if states == [PlacementState::Synced] { Check::Ready(()) } else { Check::NotYet(format!("{states:?}")) })
        })
        .await?;

        // Another field manager sets spec.replicas to 5 every 3 s for a minute.
        let start = generation(testbed, ns, "web").await?;
        let since = Instant::now();
        let scaler = PatchParams::apply("keda-operator").force();
        let patch = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                           "metadata": {"name": "web"}, "spec": {"replicas": 5}});
        let mut conflict = None;
        let mut patches = 0;
        while since.elapsed() < WATCHED {
            deployments.patch("web", &scaler, &Patch::Apply(&patch)).await?;
            patches += 1;
            let tick = Instant::now();
            while tick.elapsed() < Duration::from_secs(3) {
                let p = policies(testbed, ns).get("web").await?;
                if let Some(placement) = p.status.unwrap_or_default().placements.into_iter().find(|p| p.state == PlacementState::Conflict) {
                    conflict.get_or_insert(placement.message.unwrap_or_default());
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        let grew = generation(testbed, ns, "web").await? - start;
        println!("fight scaler: {patches} patches by keda-operator, web's generation grew {grew} in {:?}", since.elapsed());
        ensure!(grew <= HANDFUL, "web's generation grew {grew} in {WATCHED:?} against {patches} patches: the agent fights");
        let message = conflict.context("the policy never showed a Conflict")?;
        ensure!(message.contains("keda-operator") && message.contains("spec.replicas"), "{message}");
        Ok(())
    });
}
