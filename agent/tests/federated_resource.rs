//! The FederatedResource enforcer against a real member kube-apiserver (with controller
//! manager, scheduler and a kwok node, so Deployments become ready), driven through the
//! engine by a hub the test plays. What it delivered is checked on the member with the
//! admin client. Each test works in its own namespaces.

mod support;

use std::sync::Arc;
use std::time::Duration;

use accord_agent::enforce::federated_resource::FederatedResourceEnforcer;
use accord_agent::engine::{self, CoreConfig, EngineTask};
use accord_agent::metrics::Metrics;
use accord_agent::persist::ConfigMapStore;
use accord_common::distribution::{
    AssignmentSpec, FederatedResourceObserved, FederatedResourceSpec, FeedbackRule, ManifestKey,
    Observed, health,
};
use accord_crds::{
    DELIVERED_BY_FEDERATED_RESOURCE, FEDERATED_RESOURCE_ANNOTATION, MANIFEST_HASH_ANNOTATION,
    OWNED_BY_LABEL,
};
use accord_e2e::{SharedTestbed, Testbed};
use accord_proto::v1::{Assignment, ObjectRef, PlacementState, StatusReport};
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use support::*;

static TESTBED: SharedTestbed = SharedTestbed::new(|b| {
    b.members(1)
        .without_crds()
        .without_mgmt_controller_manager()
});

/// Runs one test against the shared testbed, with the agent's logs in its output.
fn run<F, Fut>(test: F)
where
    F: FnOnce(&'static Testbed) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "accord_agent=debug".into()),
        )
        .with_test_writer()
        .try_init();
    TESTBED.run(test);
}

/// An engine with only the FederatedResource enforcer, its state in `agent_ns`.
async fn engine(client: &kube::Client, agent_ns: &str) -> Result<EngineTask> {
    namespace(client, agent_ns).await?;
    let task = engine::start_with(
        CoreConfig {
            cluster: "member-1".to_owned(),
            report_debounce: Duration::from_millis(50),
        },
        Arc::new(ConfigMapStore::new(client.clone(), agent_ns)),
        vec![Box::new(FederatedResourceEnforcer::new(client.clone()))],
        Metrics::new(),
    );
    tokio::time::timeout(WAIT, task.handle().wait_loaded())
        .await
        .context("the engine did not load its saved state")?;
    Ok(task)
}

fn policy_ref(name: &str) -> ObjectRef {
    ObjectRef {
        kind: "FederatedResource".into(),
        namespace: "hub-team".into(),
        name: name.into(),
    }
}

/// The assignment of FederatedResource `hub-team/<name>` delivering `spec`.
fn item(name: &str, revision: i64, spec: FederatedResourceSpec) -> Assignment {
    Assignment {
        placed: Some(policy_ref(name)),
        revision,
        spec: Some(AssignmentSpec::FederatedResource(spec).to_proto()),
        traceparent: String::new(),
    }
}

fn bundle(namespace: &str, manifests: Vec<Value>) -> FederatedResourceSpec {
    FederatedResourceSpec {
        manifests,
        namespace: namespace.into(),
        ..FederatedResourceSpec::default()
    }
}

fn config_map(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": value}})
}

fn deployment(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "pause:3.10"}]},
            },
        },
    })
}

fn key(api_version: &str, kind: &str, namespace: &str, name: &str) -> ManifestKey {
    ManifestKey {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
    }
}

/// What a report observed of the FederatedResource's objects.
fn observed(report: &StatusReport) -> FederatedResourceObserved {
    match Observed::from_proto(report.observed.clone()) {
        Observed::FederatedResource(o) => o,
        _ => FederatedResourceObserved::default(),
    }
}

fn synced_and_healthy(report: &StatusReport, manifests: usize) -> bool {
    let o = observed(report);
    report.state() == PlacementState::Synced
        && o.manifests.len() == manifests
        && o.manifests.iter().all(|m| m.health == health::HEALTHY)
}

async fn config_map_data(client: &kube::Client, ns: &str, name: &str) -> Result<Option<ConfigMap>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    Ok(api.get_opt(name).await?)
}

/// Waits until ConfigMap `ns/name` satisfies `cond` (`None`: absent).
async fn config_map_until(
    client: &kube::Client,
    ns: &str,
    name: &str,
    what: &str,
    cond: impl Fn(Option<&ConfigMap>) -> bool,
) -> Result<Option<ConfigMap>> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let cm = config_map_data(client, ns, name).await?;
        if cond(cm.as_ref()) {
            return Ok(cm);
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "ConfigMap {ns}/{name} did not reach {what}: {cm:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn value(cm: Option<&ConfigMap>) -> Option<&str> {
    cm?.data.as_ref()?.get("k").map(String::as_str)
}

fn annotation<'a>(cm: &'a ConfigMap, key: &str) -> Option<&'a str> {
    cm.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn label<'a>(cm: &'a ConfigMap, key: &str) -> Option<&'a str> {
    cm.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

#[test]
fn a_bundle_is_delivered_into_a_namespace_accord_creates_and_reported_healthy_with_feedback() {
    run(|testbed| async move {
        let client = testbed.members()[0].client();
        let ns = "t-fr-bundle";
        let engine = engine(&client, "t-fr-bundle-agent").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        let mut spec = bundle(ns, vec![deployment("web"), config_map("settings", "v")]);
        spec.feedback = vec![FeedbackRule {
            kind: "Deployment".into(),
            name: "web".into(),
            json_path: ".status.readyReplicas".into(),
            as_: "ready".into(),
        }];
        hub.assign(1, true, vec![item("bundle", 1, spec)], vec![])
            .await;
        let report = hub
            .report_until(
                "bundle",
                "both objects synced and healthy, feedback ready=1",
                |r| {
                    synced_and_healthy(r, 2)
                        && observed(r).feedback.get("ready").map(String::as_str) == Some("1")
                },
            )
            .await?;
        let o = observed(&report);
        ensure!(
            o.manifests
                .iter()
                .map(|m| m.object.clone())
                .collect::<Vec<_>>()
                == [
                    key("apps/v1", "Deployment", ns, "web"),
                    key("v1", "ConfigMap", ns, "settings")
                ],
            "{o:?}"
        );
        ensure!(
            report.message == "2 of 2 manifests applied, 2 healthy",
            "{report:?}"
        );
        ensure!(o.drift_repairs == 0, "{report:?}");

        let cm = config_map_data(&client, ns, "settings")
            .await?
            .context("the ConfigMap")?;
        ensure!(value(Some(&cm)) == Some("v"));
        ensure!(label(&cm, OWNED_BY_LABEL) == Some(DELIVERED_BY_FEDERATED_RESOURCE));
        ensure!(annotation(&cm, FEDERATED_RESOURCE_ANNOTATION) == Some("hub-team/bundle"));
        ensure!(annotation(&cm, MANIFEST_HASH_ANNOTATION).is_some_and(|h| h.len() == 64));
        let owners: Vec<_> = cm
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|m| m.manager.clone())
            .collect();
        ensure!(owners.contains(&"accord".to_owned()), "{owners:?}");
        let created = Api::<Namespace>::all(client.clone()).get(ns).await?;
        ensure!(
            created
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(OWNED_BY_LABEL))
                == Some(&DELIVERED_BY_FEDERATED_RESOURCE.to_owned()),
            "the namespace Accord created carries its marks: {:?}",
            created.metadata
        );
        engine.stop().await;
        Ok(())
    });
}

#[test]
fn an_existing_config_map_accord_did_not_create_is_a_conflict_left_untouched_until_adopted() {
    run(|testbed| async move {
        let client = testbed.members()[0].client();
        let ns = "t-fr-conflict";
        namespace(&client, ns).await?;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        api.patch(
            "settings",
            &PatchParams::apply(USER_MANAGER),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "settings"}, "data": {"k": "user"}})),
        )
        .await?;
        let engine = engine(&client, "t-fr-conflict-agent").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        let spec = bundle(
            ns,
            vec![config_map("settings", "accord"), config_map("other", "x")],
        );
        hub.assign(1, true, vec![item("takeover", 1, spec.clone())], vec![])
            .await;
        let report = hub
            .report_until("takeover", "Conflict", |r| {
                r.state() == PlacementState::Conflict
            })
            .await?;
        ensure!(
            report.message
                == format!(
                    "1 of 2 manifests applied; ConfigMap {ns}/settings: ConfigMap {ns}/settings \
                     exists and Accord did not create it; conflictResolution: Adopt takes it over"
                ),
            "{report:?}"
        );
        let cm = config_map_data(&client, ns, "settings").await?;
        ensure!(value(cm.as_ref()) == Some("user"), "left untouched: {cm:?}");
        ensure!(
            config_map_data(&client, ns, "other").await?.is_some(),
            "the other manifest is applied"
        );

        let adopting = FederatedResourceSpec {
            adopt: true,
            ..spec
        };
        hub.assign(2, true, vec![item("takeover", 2, adopting)], vec![])
            .await;
        hub.report_until("takeover", "Synced after adopting", |r| {
            r.state() == PlacementState::Synced && r.applied_revision == 2
        })
        .await?;
        let cm = config_map_data(&client, ns, "settings")
            .await?
            .context("the ConfigMap")?;
        ensure!(value(Some(&cm)) == Some("accord"), "{cm:?}");
        ensure!(annotation(&cm, FEDERATED_RESOURCE_ANNOTATION) == Some("hub-team/takeover"));
        engine.stop().await;
        Ok(())
    });
}

#[test]
fn a_field_another_manager_changed_is_restored_and_counted_and_unnamed_fields_are_kept() {
    run(|testbed| async move {
        let client = testbed.members()[0].client();
        let ns = "t-fr-drift";
        let engine = engine(&client, "t-fr-drift-agent").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        hub.assign(
            1,
            true,
            vec![item(
                "drift",
                1,
                bundle(ns, vec![config_map("settings", "v")]),
            )],
            vec![],
        )
        .await;
        hub.report_until("drift", "Synced", |r| synced_and_healthy(r, 1))
            .await?;
        // Let the apply recorded after the first look settle before editing.
        config_map_until(&client, ns, "settings", "delivered", |cm| {
            value(cm) == Some("v")
        })
        .await?;

        // `kubectl edit` of an owned field, and `kubectl label` of a field Accord does not
        // name.
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        api.patch(
            "settings",
            &PatchParams {
                field_manager: Some("kubectl-edit".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"data": {"k": "edited"}, "metadata": {"labels": {"team": "a"}}})),
        )
        .await?;
        let report = hub
            .report_until("drift", "a drift repair counted", |r| {
                observed(r).drift_repairs >= 1 && r.state() == PlacementState::Synced
            })
            .await?;
        ensure!(observed(&report).last_drift_unix_millis > 0, "{report:?}");
        let cm = config_map_until(&client, ns, "settings", "restored", |cm| {
            value(cm) == Some("v")
        })
        .await?
        .context("the ConfigMap")?;
        ensure!(
            label(&cm, "team") == Some("a"),
            "kept: {:?}",
            cm.metadata.labels
        );
        engine.stop().await;
        Ok(())
    });
}

#[test]
fn a_pruned_object_is_deleted_and_removal_with_orphan_leaves_objects_without_marks() {
    run(|testbed| async move {
        let client = testbed.members()[0].client();
        let ns = "t-fr-prune";
        namespace(&client, ns).await?;
        let engine = engine(&client, "t-fr-prune-agent").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        hub.assign(
            1,
            true,
            vec![item(
                "prune",
                1,
                bundle(ns, vec![config_map("keep", "1"), config_map("old", "2")]),
            )],
            vec![],
        )
        .await;
        hub.report_until("prune", "Synced", |r| synced_and_healthy(r, 2))
            .await?;

        let mut pruning = bundle(ns, vec![config_map("keep", "1")]);
        pruning.prune = vec![key("v1", "ConfigMap", ns, "old")];
        hub.assign(2, true, vec![item("prune", 2, pruning.clone())], vec![])
            .await;
        config_map_until(&client, ns, "old", "deleted", |cm| cm.is_none()).await?;
        hub.report_until("prune", "Synced at revision 2", |r| {
            r.applied_revision == 2 && synced_and_healthy(r, 1)
        })
        .await?;

        let removing = FederatedResourceSpec {
            remove: true,
            orphan: true,
            ..pruning
        };
        hub.assign(3, true, vec![item("prune", 3, removing)], vec![])
            .await;
        let report = hub
            .report_until("prune", "removed", |r| observed(r).removed)
            .await?;
        ensure!(report.state() == PlacementState::Synced, "{report:?}");
        let cm = config_map_data(&client, ns, "keep")
            .await?
            .context("orphaned, not deleted")?;
        ensure!(label(&cm, OWNED_BY_LABEL).is_none(), "{:?}", cm.metadata);
        ensure!(annotation(&cm, FEDERATED_RESOURCE_ANNOTATION).is_none());
        ensure!(annotation(&cm, MANIFEST_HASH_ANNOTATION).is_none());
        ensure!(value(Some(&cm)) == Some("1"));
        engine.stop().await;
        Ok(())
    });
}

#[test]
fn a_crd_and_its_custom_resource_in_one_bundle_are_delivered_in_order() {
    run(|testbed| async move {
        let client = testbed.members()[0].client();
        let ns = "t-fr-crd";
        namespace(&client, ns).await?;
        let engine = engine(&client, "t-fr-crd-agent").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.fr.example.com"},
            "spec": {
                "group": "fr.example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}},
                }],
            },
        });
        let widget = json!({"apiVersion": "fr.example.com/v1", "kind": "Widget",
                            "metadata": {"name": "w"}, "spec": {"size": 3}});
        // The custom resource comes first in the hub's list: the agent orders them.
        hub.assign(
            1,
            true,
            vec![item("crd", 1, bundle(ns, vec![widget, crd]))],
            vec![],
        )
        .await;
        let report = hub
            .report_until("crd", "both synced", |r| {
                r.state() == PlacementState::Synced && observed(r).manifests.len() == 2
            })
            .await?;
        let o = observed(&report);
        ensure!(
            o.manifests[0].object.kind == "CustomResourceDefinition"
                && o.manifests[1].object == key("fr.example.com/v1", "Widget", ns, "w"),
            "{o:?}"
        );
        engine.stop().await;
        Ok(())
    });
}

#[test]
fn a_namespace_deleted_under_a_delivered_bundle_is_created_again_with_its_objects() {
    // The agent remembers the namespaces it saw exist (one read per namespace, not one per
    // object); a namespace deleted behind its back must not stay remembered.
    run(|testbed| async move {
        let client = testbed.members()[0].client();
        let ns = "t-fr-ns-gone";
        let engine = engine(&client, "t-fr-ns-gone-agent").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        hub.assign(
            1,
            true,
            vec![item("gone", 1, bundle(ns, vec![config_map("kept", "1")]))],
            vec![],
        )
        .await;
        hub.report_until("gone", "Synced", |r| synced_and_healthy(r, 1))
            .await?;

        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces.delete(ns, &Default::default()).await?;
        let deadline = tokio::time::Instant::now() + WAIT;
        while namespaces
            .get_opt(ns)
            .await?
            .is_some_and(|n| n.metadata.deletion_timestamp.is_some())
        {
            ensure!(
                tokio::time::Instant::now() < deadline,
                "namespace {ns} was not deleted"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The ConfigMap went with its namespace; the agent puts both back.
        config_map_until(&client, ns, "kept", "delivered again", |cm| {
            value(cm) == Some("1")
        })
        .await?;
        let again = namespaces.get(ns).await?;
        ensure!(
            again
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(OWNED_BY_LABEL))
                == Some(&DELIVERED_BY_FEDERATED_RESOURCE.to_owned()),
            "the namespace created again carries Accord's marks: {:?}",
            again.metadata
        );
        hub.report_until("gone", "Synced again", |r| synced_and_healthy(r, 1))
            .await?;
        engine.stop().await;
        Ok(())
    });
}

#[test]
fn a_policy_that_leaves_the_cluster_takes_what_it_delivered_and_only_the_namespace_it_created() {
    run(|testbed| async move {
        let client = testbed.members()[0].client();
        let created = "t-fr-leave";
        let users = "t-fr-leave-user";
        namespace(&client, users).await?;
        let engine = engine(&client, "t-fr-leave-agent").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        let mut elsewhere = config_map("elsewhere", "2");
        elsewhere["metadata"]["namespace"] = json!(users);
        hub.assign(
            1,
            true,
            vec![item(
                "leave",
                1,
                bundle(created, vec![config_map("here", "1"), elsewhere]),
            )],
            vec![],
        )
        .await;
        hub.report_until("leave", "Synced", |r| synced_and_healthy(r, 2))
            .await?;

        // The cluster left the policy's selection: the full set no longer lists it.
        hub.assign(2, true, vec![], vec![]).await;
        config_map_until(&client, created, "here", "deleted", |cm| cm.is_none()).await?;
        config_map_until(&client, users, "elsewhere", "deleted", |cm| cm.is_none()).await?;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let ns = namespaces.get_opt(created).await?;
            if ns
                .as_ref()
                .is_none_or(|n| n.metadata.deletion_timestamp.is_some())
            {
                break;
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "the namespace Accord created was not deleted: {ns:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let user_ns = namespaces.get(users).await?;
        ensure!(
            user_ns.metadata.deletion_timestamp.is_none(),
            "a namespace Accord did not create stays"
        );
        engine.stop().await;
        Ok(())
    });
}

/// A client of member-1's API server acting as ServiceAccount `namespace/name`.
async fn client_as_service_account(
    testbed: &Testbed,
    namespace: &str,
    name: &str,
) -> Result<kube::Client> {
    let path = testbed.members()[0].kubeconfig_path();
    let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    config.proxy_url = None;
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{namespace}:{name}"));
    Ok(kube::Client::try_from(config)?)
}

#[test]
fn the_agent_delivers_the_default_kinds_with_the_rbac_join_renders_and_says_how_to_grant_more() {
    run(|testbed| async move {
        let admin = testbed.members()[0].client();
        let agent_ns = "t-fr-rbac-agent";
        let ns = "t-fr-rbac";
        let options = accord_agent::join::AgentManifestOptions {
            namespace: agent_ns.into(),
            ..Default::default()
        };
        for object in accord_agent::join::render(&options) {
            if object["kind"] != "Deployment" {
                accord_common::apply::apply(&admin, USER_MANAGER, &object)
                    .await
                    .with_context(|| format!("applying {}", object["kind"]))?;
            }
        }
        let agent = client_as_service_account(testbed, agent_ns, "accord-agent").await?;
        let engine = engine(&agent, agent_ns).await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        // Roles are not among the defaults. (One without rules: granting it needs no
        // permission it grants.)
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                          "metadata": {"name": "empty"}, "rules": []});
        hub.assign(
            1,
            true,
            vec![item(
                "rbac",
                1,
                bundle(ns, vec![config_map("allowed", "1"), role]),
            )],
            vec![],
        )
        .await;
        let report = hub
            .report_until("rbac", "the ConfigMap synced, the Role refused", |r| {
                let o = observed(r);
                r.state() == PlacementState::Error
                    && o.manifests.len() == 2
                    && o.manifests[0].state == accord_common::distribution::PlacementState::Synced
                    && o.manifests[1].message.contains(
                        "roles.rbac.authorization.k8s.io; grant it with a ClusterRole labelled \
                         accord.io/aggregate-to-agent: \"true\"",
                    )
            })
            .await?;
        ensure!(
            report
                .message
                .starts_with("1 of 2 manifests applied; Role t-fr-rbac/empty: "),
            "{report:?}"
        );
        ensure!(config_map_data(&admin, ns, "allowed").await?.is_some());

        // Granted as the message says: the delivery role aggregates it.
        let grant = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "t-fr-rbac-roles",
                         "labels": {"accord.io/aggregate-to-agent": "true"}},
            "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"],
                       "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}],
        });
        accord_common::apply::apply(&admin, USER_MANAGER, &grant).await?;
        hub.report_until("rbac", "Synced once granted", |r| {
            r.state() == PlacementState::Synced
        })
        .await?;
        engine.stop().await;
        Ok(())
    });
}
