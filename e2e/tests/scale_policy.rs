//! CrossClusterScalePolicy end to end: `kubectl apply`-style changes on the management
//! cluster → real hub → real agents → Deployments in three real member clusters (pods made
//! Ready by kwok) → status back in the CR.
//!
//! Each test runs its own hub (own etcd prefix) and its own agents, with cluster names of
//! its own, against the shared three member clusters; tests use separate namespaces.

use accord_crds::managed_cluster::UNREACHABLE_TAINT;
use accord_crds::{
    CrossClusterScalePolicy, ManagedCluster, PlacementState, SCALE_REQUEST_ANNOTATION,
};
use accord_e2e::fleet::{Fleet, wait_hub_taint};
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{Patch, PatchParams};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(3));
/// The scenarios are heavy for two cores; run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());
const FM: &str = "accord-e2e-tests";

async fn apply_deployment(
    testbed: &Testbed,
    member: usize,
    ns: &str,
    name: &str,
    replicas: i32,
) -> Result<()> {
    let cluster = &testbed.members()[member];
    accord_e2e::fleet::ensure_namespace(cluster, ns).await?;
    let api: Api<Deployment> = Api::namespaced(cluster.client(), ns);
    let d = accord_e2e::fleet::pause_deployment(name, replicas);
    api.patch(name, &PatchParams::apply(FM).force(), &Patch::Apply(&d))
        .await?;
    Ok(())
}

async fn apply_policy(testbed: &Testbed, ns: &str, policy: serde_json::Value) -> Result<()> {
    accord_e2e::fleet::ensure_namespace(testbed.mgmt(), ns).await?;
    let api: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), ns);
    let name = policy["metadata"]["name"]
        .as_str()
        .context("name")?
        .to_owned();
    api.patch(
        &name,
        &PatchParams::apply(FM).force(),
        &Patch::Apply(&policy),
    )
    .await?;
    Ok(())
}

/// (spec.replicas, scale request id, ready replicas) of a member Deployment.
async fn observe(
    testbed: &Testbed,
    member: usize,
    ns: &str,
    name: &str,
) -> Result<Option<(i32, String, i32)>> {
    let api: Api<Deployment> = Api::namespaced(testbed.members()[member].client(), ns);
    Ok(api.get_opt(name).await?.map(|d| {
        let id = d
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SCALE_REQUEST_ANNOTATION))
            .cloned()
            .unwrap_or_default();
        let spec = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or_default();
        let ready = d
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or_default();
        (spec, id, ready)
    }))
}

/// Waits until the members' Deployments have `expected` replicas (by member index) under
/// one shared scale request id, and returns that id.
async fn wait_replicas(
    testbed: &Testbed,
    ns: &str,
    name: &str,
    expected: &[(usize, i32)],
    timeout: Duration,
) -> Result<String> {
    until(
        &format!("{ns}/{name} replicas {expected:?}"),
        timeout,
        || async {
            let mut ids = Vec::new();
            let mut seen = Vec::new();
            for (member, want) in expected {
                let got = observe(testbed, *member, ns, name).await?;
                seen.push(got.clone());
                match got {
                    Some((spec, id, _)) if spec == *want && !id.is_empty() => ids.push(id),
                    _ => return Ok(Check::NotYet(format!("{seen:?}"))),
                }
            }
            ids.dedup();
            Ok(if ids.len() == 1 {
                Check::Ready(ids.remove(0))
            } else {
                Check::NotYet(format!("ids differ: {ids:?}"))
            })
        },
    )
    .await
}

async fn policy_status(
    testbed: &Testbed,
    ns: &str,
    name: &str,
) -> Result<Option<accord_crds::CrossClusterScalePolicyStatus>> {
    let api: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), ns);
    Ok(api.get_opt(name).await?.and_then(|p| p.status))
}

/// Waits until the policy's placements have the given states (by cluster name).
async fn wait_states(
    testbed: &Testbed,
    ns: &str,
    name: &str,
    expected: &[(&str, PlacementState)],
    timeout: Duration,
) -> Result<accord_crds::CrossClusterScalePolicyStatus> {
    until(
        &format!("{ns}/{name} placement states {expected:?}"),
        timeout,
        || async {
            let Some(status) = policy_status(testbed, ns, name).await? else {
                return Ok(Check::NotYet("no status".into()));
            };
            let states: BTreeMap<&str, PlacementState> = status
                .placements
                .iter()
                .map(|p| (p.cluster.as_str(), p.state))
                .collect();
            let ok = expected.iter().all(|(c, s)| states.get(c) == Some(s));
            Ok(if ok {
                Check::Ready(status.clone())
            } else {
                Check::NotYet(format!("{states:?}"))
            })
        },
    )
    .await
}

fn policy(
    name: &str,
    ns: &str,
    target: &str,
    desired: i32,
    dist: serde_json::Value,
    extra: serde_json::Value,
) -> serde_json::Value {
    let mut spec = serde_json::json!({"targetRef": {"name": target}, "desiredReplicas": desired, "distribution": dist});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    serde_json::json!({"apiVersion": "accord.io/v1beta1", "kind": "CrossClusterScalePolicy",
                       "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

#[test]
fn sixty_forty_of_twelve_runs_seven_and_five_ready_pods_and_changes_converge() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let ns = "ccsp-basic";
        let fed = Fleet::start(testbed, "hub-basic", "/e2e-basic/", &[], &[("basic-1", 0), ("basic-2", 1), ("basic-3", 2)]).await?;
        for m in 0..3 {
            apply_deployment(testbed, m, ns, "frontend", 1).await?;
        }
        let dist = serde_json::json!([{"cluster": "basic-1", "weight": 60}, {"cluster": "basic-2", "weight": 40}]);
        apply_policy(testbed, ns, policy("web", ns, "frontend", 12, dist, serde_json::json!({}))).await?;
        let id1 = wait_replicas(testbed, ns, "frontend", &[(0, 7), (1, 5)], Duration::from_secs(60)).await?;
        let status = wait_states(testbed, ns, "web", &[("basic-1", PlacementState::Synced), ("basic-2", PlacementState::Synced)], Duration::from_secs(60)).await?;
        ensure!(status.scale_request_id.as_deref() == Some(id1.as_str()));
        // All pods Ready and the CR says so.
        until("readyReplicas 12 in the CR", Duration::from_secs(90), || async {
            let s = policy_status(testbed, ns, "web").await?.unwrap_or_default();
            Ok(if s.ready_replicas == Some(12) && accord_crds::conditions::is_true(&s.conditions, "Ready") {
                Check::Ready(())
            } else {
                Check::NotYet(format!("ready {:?}", s.ready_replicas))
            })
        })
        .await?;
        ensure!(observe(testbed, 0, ns, "frontend").await?.map(|o| o.2) == Some(7));
        ensure!(observe(testbed, 1, ns, "frontend").await?.map(|o| o.2) == Some(5));
        // The third member was not in the distribution: untouched.
        ensure!(observe(testbed, 2, ns, "frontend").await?.map(|o| (o.0, o.1)) == Some((1, String::new())));

        // Weights change → new decision.
        let dist = serde_json::json!([{"cluster": "basic-1", "weight": 1}, {"cluster": "basic-2", "weight": 1}, {"cluster": "basic-3", "weight": 2}]);
        apply_policy(testbed, ns, policy("web", ns, "frontend", 12, dist.clone(), serde_json::json!({}))).await?;
        let id2 = wait_replicas(testbed, ns, "frontend", &[(0, 3), (1, 3), (2, 6)], Duration::from_secs(60)).await?;
        ensure!(id2 != id1, "a new scaleRequestID is stamped");
        // desiredReplicas changes.
        apply_policy(testbed, ns, policy("web", ns, "frontend", 8, dist, serde_json::json!({}))).await?;
        let id3 = wait_replicas(testbed, ns, "frontend", &[(0, 2), (1, 2), (2, 4)], Duration::from_secs(60)).await?;
        ensure!(id3 != id2);
        // min/max change.
        let dist = serde_json::json!([{"cluster": "basic-1", "weight": 1, "minReplicas": 4}, {"cluster": "basic-2", "weight": 1}, {"cluster": "basic-3", "weight": 2, "maxReplicas": 2}]);
        apply_policy(testbed, ns, policy("web", ns, "frontend", 8, dist, serde_json::json!({}))).await?;
        let id4 = wait_replicas(testbed, ns, "frontend", &[(0, 4), (1, 2), (2, 2)], Duration::from_secs(60)).await?;
        ensure!(id4 != id3);

        // Deleting the policy leaves the replicas and stops managing them.
        let api: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), ns);
        api.delete("web", &Default::default()).await?;
        until("policy gone", Duration::from_secs(30), || async {
            Ok(if api.get_opt("web").await?.is_none() { Check::Ready(()) } else { Check::NotYet("still there".into()) })
        })
        .await?;
        // The CR is gone before its removal reaches the agents: wait until no agent manages
        // it any more, or a hand-set count could still be put back by the last assignment.
        for agent in fed.agents.values() {
            until(&format!("{} manages no policy", agent.name), Duration::from_secs(30), || async {
                let text = accord_e2e::fleet::agent_metrics(testbed, &agent.http).await?;
                Ok(match accord_e2e::hub::parse_metric(&text, "accord_agent_managed_objects") {
                    Some(0.0) => Check::Ready(()),
                    other => Check::NotYet(format!("managed policies {other:?}")),
                })
            })
            .await?;
        }
        apply_deployment(testbed, 0, ns, "frontend", 9).await?;
        until("a hand-set replica count stays once unmanaged", Duration::from_secs(10), || async {
            Ok(match observe(testbed, 0, ns, "frontend").await? {
                Some((9, _, _)) => Check::Ready(()),
                other => Check::NotYet(format!("{other:?}")),
            })
        })
        .await?;
        drop(fed);
        Ok(())
    });
}

#[test]
fn a_missing_target_and_an_hpa_are_reported_while_the_other_placement_stays_synced() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let ns = "ccsp-problems";
        let _fed = Fleet::start(testbed, "hub-problems", "/e2e-problems/", &[], &[("prob-1", 0), ("prob-2", 1), ("prob-3", 2)]).await?;
        apply_deployment(testbed, 0, ns, "api", 1).await?;
        apply_deployment(testbed, 2, ns, "api", 1).await?;
        // member-2 has no Deployment "api"; member-3 has an HPA on it.
        let hpa = serde_json::json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "api"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
                     "minReplicas": 1, "maxReplicas": 5}
        });
        let hpas: Api<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler> =
            Api::namespaced(testbed.members()[2].client(), ns);
        hpas.patch("api", &PatchParams::apply(FM), &Patch::Apply(&hpa)).await?;
        let dist = serde_json::json!([{"cluster": "prob-1", "weight": 1}, {"cluster": "prob-2", "weight": 1}, {"cluster": "prob-3", "weight": 1}]);
        apply_policy(testbed, ns, policy("api", ns, "api", 6, dist, serde_json::json!({}))).await?;
        let status = wait_states(testbed, ns, "api", &[
            ("prob-1", PlacementState::Synced),
            ("prob-2", PlacementState::TargetNotFound),
            ("prob-3", PlacementState::Conflict),
        ], Duration::from_secs(60)).await?;
        let conflict = status.placements.iter().find(|p| p.cluster == "prob-3").context("prob-3")?;
        ensure!(conflict.message.as_deref().unwrap_or_default().contains("api"), "{conflict:?}");
        ensure!(observe(testbed, 2, ns, "api").await?.map(|o| o.0) == Some(1), "replicas left alone under an HPA");
        ensure!(accord_crds::conditions::is_true(&status.conditions, "Degraded"));
        // The target appears → applied.
        apply_deployment(testbed, 1, ns, "api", 1).await?;
        wait_states(testbed, ns, "api", &[("prob-2", PlacementState::Synced)], Duration::from_secs(60)).await?;
        ensure!(observe(testbed, 1, ns, "api").await?.map(|o| o.0) == Some(2));
        Ok(())
    });
}

#[test]
fn a_killed_agents_share_moves_within_five_seconds_and_returns_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let ns = "ccsp-failover";
        let mut fed = Fleet::start(testbed, "hub-failover", "/e2e-failover/", &[], &[("fo-1", 0), ("fo-2", 1), ("fo-3", 2)]).await?;
        for m in 0..3 {
            apply_deployment(testbed, m, ns, "web", 1).await?;
        }
        let dist = serde_json::json!([{"cluster": "fo-1", "weight": 1}, {"cluster": "fo-2", "weight": 1}, {"cluster": "fo-3", "weight": 1}]);
        apply_policy(testbed, ns, policy("web", ns, "web", 9, dist, serde_json::json!({"failover": {"enabled": true, "returnCooldownSeconds": 5}}))).await?;
        wait_replicas(testbed, ns, "web", &[(0, 3), (1, 3), (2, 3)], Duration::from_secs(60)).await?;
        let pods_before = ready_pods(testbed, 2, ns, "web", 3).await?;

        fed.kill_agent("fo-3")?;
        let killed = Instant::now();
        wait_replicas(testbed, ns, "web", &[(0, 5), (1, 4)], Duration::from_secs(5)).await
            .context("the killed cluster's share did not move to the others within 5 s")?;
        println!("failover: share moved {:?} after kill -9 of the agent", killed.elapsed());
        let status = wait_states(testbed, ns, "web", &[("fo-3", PlacementState::Unavailable)], Duration::from_secs(10)).await?;
        // Its share is on the others, but it is told to keep the 3 it runs, never 0.
        ensure!(status.placements.iter().find(|p| p.cluster == "fo-3").map(|p| p.desired_replicas) == Some(3));
        // The hub says so on the cluster: its own taint, cleared when the agent is back.
        wait_hub_taint(testbed, "fo-3", UNREACHABLE_TAINT, true, Duration::from_secs(30)).await?;

        // Back: shares return once after the 5 s cooldown, then stay.
        fed.start_agent("fo-3")?;
        wait_hub_taint(testbed, "fo-3", UNREACHABLE_TAINT, false, Duration::from_secs(30)).await?;
        let returned = wait_replicas(testbed, ns, "web", &[(0, 3), (1, 3), (2, 3)], Duration::from_secs(30)).await?;
        let api: Api<Deployment> = Api::namespaced(testbed.members()[0].client(), ns);
        let generation = api.get("web").await?.metadata.generation;
        // No flapping: over the next seconds nothing changes (the id and generation stay).
        let settle = until("no further change for 3 s", Duration::from_secs(20), || async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            let now = api.get("web").await?;
            let id = now.metadata.annotations.as_ref().and_then(|a| a.get(SCALE_REQUEST_ANNOTATION)).cloned();
            Ok(if id.as_deref() == Some(returned.as_str()) && now.metadata.generation == generation {
                Check::Ready(())
            } else {
                Check::NotYet(format!("changed again: {id:?}"))
            })
        })
        .await;
        settle?;
        // fo-3 kept its pods through its absence and its return: none killed and recreated.
        let pods_after = ready_pods(testbed, 2, ns, "web", 3).await?;
        ensure!(pods_after == pods_before, "fo-3's pods were replaced: {pods_before:?} → {pods_after:?}");
        Ok(())
    });
}

/// The uids of the ready pods of Deployment `name` in `member`, once there are `count`.
async fn ready_pods(
    testbed: &Testbed,
    member: usize,
    ns: &str,
    name: &str,
    count: usize,
) -> Result<Vec<String>> {
    let api: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(testbed.members()[member].client(), ns);
    until(
        &format!("{count} ready pods of {ns}/{name}"),
        Duration::from_secs(30),
        || async {
            let pods = api
                .list(&kube::api::ListParams::default().labels(&format!("app={name}")))
                .await?;
            let mut ready: Vec<String> = pods
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                })
                .filter_map(|p| p.metadata.uid.clone())
                .collect();
            ready.sort();
            Ok(if ready.len() == count && pods.items.len() == count {
                Check::Ready(ready)
            } else {
                Check::NotYet(format!("{} pods, {} ready", pods.items.len(), ready.len()))
            })
        },
    )
    .await
}

#[test]
fn a_hub_killed_mid_change_converges_after_restart_without_reapplying_a_decision() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let ns = "ccsp-hub-crash";
        let mut fed = Fleet::start(testbed, "hub-crash", "/e2e-crash/", &[], &[("crash-1", 0), ("crash-2", 1)]).await?;
        for m in 0..2 {
            apply_deployment(testbed, m, ns, "web", 1).await?;
        }
        let dist = serde_json::json!([{"cluster": "crash-1", "weight": 1}, {"cluster": "crash-2", "weight": 1}]);
        apply_policy(testbed, ns, policy("web", ns, "web", 4, dist.clone(), serde_json::json!({}))).await?;
        let before = wait_replicas(testbed, ns, "web", &[(0, 2), (1, 2)], Duration::from_secs(60)).await?;
        // Change and kill the hub at once, while the change is in flight.
        apply_policy(testbed, ns, policy("web", ns, "web", 10, dist, serde_json::json!({}))).await?;
        fed.kill_hub()?;
        fed.restart_hub().await?;
        let after = wait_replicas(testbed, ns, "web", &[(0, 5), (1, 5)], Duration::from_secs(60)).await?;
        ensure!(after != before);
        wait_states(testbed, ns, "web", &[("crash-1", PlacementState::Synced), ("crash-2", PlacementState::Synced)], Duration::from_secs(60)).await?;
        // Each member applied each decision at most once: the agents log one
        // "applied" line per (policy, scale request id).
        for name in ["crash-1", "crash-2"] {
            let log = std::fs::read_to_string(testbed.process_info(fed.agents[name].process.context("running")?).log)?;
            for id in [&before, &after] {
                let applied = log.lines().filter(|l| l.contains("applied scale request") && l.contains(id.as_str())).count();
                ensure!(applied == 1, "{name} applied scale request {id} {applied} times");
            }
        }
        Ok(())
    });
}

/// Objects of kind `K` as untyped objects, which decode whatever the API server holds
/// (`ns` empty: cluster-scoped).
fn untyped<K>(testbed: &Testbed, ns: &str) -> Api<kube::core::DynamicObject>
where
    K: kube::Resource<DynamicType = ()>,
{
    let resource = kube::core::ApiResource::erase::<K>(&());
    if ns.is_empty() {
        Api::all_with(testbed.mgmt().client(), &resource)
    } else {
        Api::namespaced_with(testbed.mgmt().client(), ns, &resource)
    }
}

/// Scale policies as untyped objects.
fn dynamic_policies(testbed: &Testbed, ns: &str) -> Api<kube::core::DynamicObject> {
    untyped::<CrossClusterScalePolicy>(testbed, ns)
}

/// Drops every bound and CEL rule below `schema`, so an object the real schema refuses can
/// be stored (as one stored before a schema change, or written around validation, would be).
fn relax(schema: &mut serde_json::Value) {
    if let Some(object) = schema.as_object_mut() {
        for key in ["minimum", "maximum", "format", "x-kubernetes-validations"] {
            object.remove(key);
        }
        for value in object.values_mut() {
            relax(value);
        }
    } else if let Some(items) = schema.as_array_mut() {
        items.iter_mut().for_each(relax);
    }
}

/// Replaces the spec of CRD `crd` with `spec` (keeping its current resourceVersion).
async fn replace_crd_spec(testbed: &Testbed, crd: &str, spec: &serde_json::Value) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(testbed.mgmt().client());
    let mut current = serde_json::to_value(api.get(crd).await?)?;
    current["spec"] = spec.clone();
    api.replace(crd, &Default::default(), &serde_json::from_value(current)?)
        .await?;
    Ok(())
}

/// Creates `object` of kind `K` under a relaxed schema, retrying until the API server
/// serves the relaxed schema, and restores the real one afterwards whatever happened.
async fn create_around_validation<K>(testbed: &Testbed, object: serde_json::Value) -> Result<()>
where
    K: kube::Resource<DynamicType = ()>,
{
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd = format!("{}.{}", K::plural(&()), K::group(&()));
    let crds: Api<CustomResourceDefinition> = Api::all(testbed.mgmt().client());
    let original = serde_json::to_value(crds.get(&crd).await?)?["spec"].clone();
    let mut relaxed = original.clone();
    for version in relaxed["versions"].as_array_mut().context("versions")? {
        relax(&mut version["schema"]["openAPIV3Schema"]["properties"]["spec"]);
    }
    replace_crd_spec(testbed, &crd, &relaxed).await?;
    let ns = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let created = until(
        &format!("the relaxed {crd} schema admits the object"),
        Duration::from_secs(30),
        || {
            let object = object.clone();
            // Untyped: the typed client could not decode what it gets back.
            let api = untyped::<K>(testbed, &ns);
            async move {
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                let applied = api
                    .patch(
                        name,
                        &PatchParams::apply(FM).force(),
                        &Patch::Apply(&object),
                    )
                    .await;
                Ok(match applied {
                    Ok(_) => Check::Ready(()),
                    Err(e) => Check::NotYet(e.to_string()),
                })
            }
        },
    )
    .await;
    let restored = replace_crd_spec(testbed, &crd, &original).await;
    created?;
    restored
}

/// The condition `type_` of an untyped object, as (status, reason, message).
async fn untyped_condition(
    api: &Api<kube::core::DynamicObject>,
    name: &str,
    type_: &str,
) -> Result<Option<(String, String, String)>> {
    let object = api.get(name).await?;
    let conditions = object.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(conditions.iter().find(|c| c["type"] == type_).map(|c| {
        let text = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
        (text("status"), text("reason"), text("message"))
    }))
}

/// Waits for a Warning Event with `reason` about object `name` in `ns` ("default" for
/// cluster-scoped objects, where the recorder puts their Events).
async fn warning_event(testbed: &Testbed, ns: &str, name: &str, reason: &str) -> Result<()> {
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(testbed.mgmt().client(), ns);
    until(
        &format!("a Warning {reason} Event about {name}"),
        Duration::from_secs(30),
        || async {
            let list = events.list(&Default::default()).await?;
            let about: Vec<_> = list
                .items
                .iter()
                .filter(|e| e.involved_object.name.as_deref() == Some(name))
                .map(|e| (e.type_.clone(), e.reason.clone()))
                .collect();
            let found = about
                .iter()
                .any(|(t, r)| t.as_deref() == Some("Warning") && r.as_deref() == Some(reason));
            Ok(if found {
                Check::Ready(())
            } else {
                Check::NotYet(format!("events about {name}: {about:?}"))
            })
        },
    )
    .await
}

#[test]
fn an_undecodable_policy_says_invalid_spec_and_never_stops_the_others_even_after_a_restart() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let ns = "ccsp-poison";
        let mut fed = Fleet::start(testbed, "hub-poison", "/e2e-poison/", &[], &[("poison-1", 0), ("poison-2", 1)]).await?;
        for m in 0..2 {
            apply_deployment(testbed, m, ns, "web", 1).await?;
        }
        let dist = serde_json::json!([{"cluster": "poison-1", "weight": 1}, {"cluster": "poison-2", "weight": 1}]);
        apply_policy(testbed, ns, policy("good", ns, "web", 2, dist.clone(), serde_json::json!({}))).await?;
        wait_replicas(testbed, ns, "web", &[(0, 1), (1, 1)], Duration::from_secs(60)).await?;

        // The real schema refuses 3,000,000,000 replicas (more than an int32 holds).
        let mut bad = policy("bad", ns, "other", 2, dist.clone(), serde_json::json!({}));
        bad["spec"]["desiredReplicas"] = serde_json::json!(3_000_000_000_i64);
        let refused = dynamic_policies(testbed, ns).patch("bad", &PatchParams::apply(FM).force(), &Patch::Apply(&bad)).await;
        ensure!(
            matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422),
            "the API server should refuse 3,000,000,000 replicas, got {refused:?}"
        );
        create_around_validation::<CrossClusterScalePolicy>(testbed, bad).await?;

        // The hub cannot decode it: it says so in the status and in an Event.
        let policies = dynamic_policies(testbed, ns);
        let invalid_spec = || async {
            Ok(match untyped_condition(&policies, "bad", "Ready").await? {
                Some((status, reason, message)) if status == "False" && reason == "InvalidSpec" => {
                    Check::Ready(message)
                }
                other => Check::NotYet(format!("Ready {other:?}")),
            })
        };
        let message = until("bad shows InvalidSpec", Duration::from_secs(30), invalid_spec).await?;
        ensure!(message.contains("3000000000") || message.to_lowercase().contains("desiredreplicas"), "the message should say what does not decode: {message}");
        warning_event(testbed, ns, "bad", "InvalidSpec").await?;

        // Every kind the hub watches: a ManagedCluster whose weight no int32 holds is
        // Degraded with the reason, and does not stop the shared cluster watch.
        let bad_cluster = serde_json::json!({"apiVersion": "accord.io/v1beta1", "kind": "ManagedCluster",
            "metadata": {"name": "poison-bad-weight"}, "spec": {"weight": 3_000_000_000_i64}});
        create_around_validation::<ManagedCluster>(testbed, bad_cluster).await?;
        let clusters = untyped::<ManagedCluster>(testbed, "");
        let degraded = until("poison-bad-weight shows Degraded/InvalidSpec", Duration::from_secs(30), || async {
            Ok(match untyped_condition(&clusters, "poison-bad-weight", "Degraded").await? {
                Some((status, reason, message)) if status == "True" && reason == "InvalidSpec" => Check::Ready(message),
                other => Check::NotYet(format!("Degraded {other:?}")),
            })
        })
        .await?;
        ensure!(degraded.contains("3000000000"), "the message should say what does not decode: {degraded}");
        warning_event(testbed, "default", "poison-bad-weight", "InvalidSpec").await?;

        // Another policy keeps converging, before and after a hub restart — on a machine
        // whose two cores are busy (it once failed there one run in three).
        apply_policy(testbed, ns, policy("good", ns, "web", 4, dist.clone(), serde_json::json!({}))).await?;
        wait_replicas(testbed, ns, "web", &[(0, 2), (1, 2)], Duration::from_secs(60)).await?;
        let load = accord_e2e::load::BusyLoops::start(2);
        fed.kill_hub()?;
        fed.restart_hub().await?;
        apply_policy(testbed, ns, policy("good", ns, "web", 6, dist, serde_json::json!({}))).await?;
        wait_replicas(testbed, ns, "web", &[(0, 3), (1, 3)], Duration::from_secs(60)).await?;
        wait_states(testbed, ns, "good", &[("poison-1", PlacementState::Synced), ("poison-2", PlacementState::Synced)], Duration::from_secs(60)).await?;
        drop(load);
        until("bad still shows InvalidSpec after the restart", Duration::from_secs(30), invalid_spec).await?;

        // Deleting the undecodable objects completes (no finalizer is left hanging).
        clusters.delete("poison-bad-weight", &Default::default()).await?;
        policies.delete("bad", &Default::default()).await?;
        until("bad is gone", Duration::from_secs(30), || async {
            Ok(match policies.get_opt("bad").await? {
                None => Check::Ready(()),
                Some(o) => Check::NotYet(format!("finalizers {:?}", o.metadata.finalizers)),
            })
        })
        .await?;
        Ok(())
    });
}

/// The `note` of every `ScaleDecision` Event (events.k8s.io/v1) about policy `ns/name`.
async fn scale_decision_notes(testbed: &Testbed, ns: &str, name: &str) -> Result<Vec<String>> {
    let api: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(testbed.mgmt().client(), ns);
    let about = kube::api::ListParams::default().fields(&format!("regarding.name={name}"));
    let list = match api.list(&about).await {
        Ok(list) => list,
        // Should the field not be selectable, the filter below does the same.
        Err(kube::Error::Api(s)) if s.code == 400 => api.list(&Default::default()).await?,
        Err(e) => return Err(e.into()),
    };
    Ok(list
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("ScaleDecision")
                && e.regarding.as_ref().is_some_and(|r| {
                    r.name.as_deref() == Some(name)
                        && r.kind.as_deref() == Some("CrossClusterScalePolicy")
                })
        })
        .filter_map(|e| e.note)
        .collect())
}

#[test]
fn each_of_three_decisions_has_a_scale_decision_event_naming_its_own_request_id() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let ns = "ccsp-events";
        let fed = Fleet::start(testbed, "hub-events", "/e2e-events/", &[], &[("ev-1", 0), ("ev-2", 1), ("ev-3", 2)]).await?;
        for m in 0..3 {
            apply_deployment(testbed, m, ns, "web", 1).await?;
        }
        let dist = serde_json::json!([{"cluster": "ev-1", "weight": 1}, {"cluster": "ev-2", "weight": 1}, {"cluster": "ev-3", "weight": 1}]);
        // 12 → 20 → 30, each time waiting for the decision in the status.
        let mut ids: Vec<String> = Vec::new();
        for desired in [12, 20, 30] {
            apply_policy(testbed, ns, policy("web", ns, "web", desired, dist.clone(), serde_json::json!({}))).await?;
            let id = until(&format!("the decision for {desired} in the status"), Duration::from_secs(60), || async {
                let s = policy_status(testbed, ns, "web").await?.unwrap_or_default();
                Ok(match s.scale_request_id {
                    Some(id) if s.desired_replicas == Some(desired) && !ids.contains(&id) => Check::Ready(id),
                    other => Check::NotYet(format!("desired {:?}, scaleRequestID {other:?}", s.desired_replicas)),
                })
            })
            .await?;
            ids.push(id);
        }

        // Three distinct Events, each note naming its own decision's request id.
        let found = until("a ScaleDecision Event naming each scaleRequestID", Duration::from_secs(30), || async {
            let notes = scale_decision_notes(testbed, ns, "web").await?;
            let missing: Vec<&String> = ids.iter().filter(|id| !notes.iter().any(|n| n.contains(id.as_str()))).collect();
            Ok(if missing.is_empty() {
                Check::Ready(notes)
            } else {
                Check::NotYet(format!("no Event names {missing:?}; ScaleDecision notes: {notes:?}"))
            })
        })
        .await;
        let notes = match found {
            Ok(notes) => notes,
            Err(e) => {
                let describe = testbed
                    .kubectl(testbed.mgmt())
                    .args(["describe", "crossclusterscalepolicy", "web", "-n", ns])
                    .output()
                    .await
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_else(|e| format!("kubectl describe failed: {e}"));
                return Err(e.context(format!("scale request ids {ids:?}; kubectl describe:\n{describe}")));
            }
        };
        for id in &ids {
            let naming = notes.iter().filter(|n| n.contains(id.as_str())).count();
            let others = ids.iter().filter(|other| *other != id).count();
            ensure!(naming >= 1, "no ScaleDecision Event names {id}: {notes:?}");
            ensure!(
                notes.iter().filter(|n| n.contains(id.as_str())).all(|n| ids.iter().filter(|o| n.contains(o.as_str())).count() == 1),
                "an Event naming {id} names another of the {others} other decisions too: {notes:?}"
            );
        }
        println!("ScaleDecision Events: {notes:?}");
        drop(fed);
        Ok(())
    });
}

/// Sets ManagedCluster `cluster`'s `spec.taints`.
async fn taint_cluster(testbed: &Testbed, cluster: &str, taints: serde_json::Value) -> Result<()> {
    accord_e2e::fleet::patch_managed_cluster(
        testbed,
        cluster,
        serde_json::json!({"spec": {"taints": taints}}),
    )
    .await
}

#[test]
fn a_no_execute_taint_moves_a_share_unless_tolerated_and_its_removal_brings_it_back() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let ns = "ccsp-taints";
        let fed = Fleet::start(testbed, "hub-taints", "/e2e-taints/", &[], &[("taint-1", 0), ("taint-2", 1)]).await?;
        for m in 0..2 {
            apply_deployment(testbed, m, ns, "frontend", 1).await?;
        }
        let dist = serde_json::json!([{"cluster": "taint-1", "weight": 60}, {"cluster": "taint-2", "weight": 40}]);
        apply_policy(testbed, ns, policy("web", ns, "frontend", 12, dist.clone(), serde_json::json!({}))).await?;
        wait_replicas(testbed, ns, "frontend", &[(0, 7), (1, 5)], Duration::from_secs(60)).await?;

        // NoExecute on taint-2: its share goes to taint-1 and the status says why.
        taint_cluster(testbed, "taint-2", serde_json::json!([{"key": "accord.io/maintenance", "effect": "NoExecute"}])).await?;
        wait_replicas(testbed, ns, "frontend", &[(0, 12), (1, 0)], Duration::from_secs(60)).await?;
        until("taint-2's placement names the taint", Duration::from_secs(60), || async {
            let status = policy_status(testbed, ns, "web").await?.unwrap_or_default();
            let held = status.placements.iter().find(|p| p.cluster == "taint-2").context("no taint-2 placement")?;
            Ok(if held.message.as_deref().is_some_and(|m| m.contains("accord.io/maintenance:NoExecute")) {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{held:?}"))
            })
        })
        .await?;

        // Tolerated (through spec.placement), the share comes back.
        let tolerant = serde_json::json!({"placement": {"clusters": ["taint-1", "taint-2"],
            "tolerations": [{"key": "accord.io/maintenance", "operator": "Exists", "effect": "NoExecute"}]}});
        apply_policy(testbed, ns, policy("web", ns, "frontend", 12, dist.clone(), tolerant)).await?;
        wait_replicas(testbed, ns, "frontend", &[(0, 7), (1, 5)], Duration::from_secs(60)).await?;

        // Without the toleration again it leaves; the taint removed, it returns.
        apply_policy(testbed, ns, policy("web", ns, "frontend", 12, dist, serde_json::json!({}))).await?;
        wait_replicas(testbed, ns, "frontend", &[(0, 12), (1, 0)], Duration::from_secs(60)).await?;
        taint_cluster(testbed, "taint-2", serde_json::json!([])).await?;
        wait_replicas(testbed, ns, "frontend", &[(0, 7), (1, 5)], Duration::from_secs(60)).await?;
        drop(fed);
        Ok(())
    });
}
