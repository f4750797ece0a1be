//! The agent's engine against a real member kube-apiserver (with controller manager,
//! scheduler and a kwok node, so Deployments become Ready), driven by a hub the test plays.
//! Each test works in its own namespaces.

mod support;

use std::time::Duration;

use accord_agent::enforce::kafka::KafkaOptions;
use accord_agent::engine::{self, CoreConfig, EngineTask};
use accord_agent::metrics::Metrics;
use accord_agent::persist::{
    COMPRESSED_KEY, CONFIGMAP_NAME, ConfigMapStore, DATA_KEY, SavedState, StateStore as _,
};
use accord_common::distribution::AssignmentSpec;
use accord_crds::AGENT_FIELD_MANAGER;
use accord_e2e::hub::parse_metric;
use accord_e2e::{SharedTestbed, Testbed};
use accord_proto::v1::{PlacementState, StatusReport, status_ack};
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use support::*;

static TESTBED: SharedTestbed = SharedTestbed::new(|b| {
    b.members(1)
        .without_crds()
        .without_mgmt_controller_manager()
});

/// Starts an engine on member-1 whose saved state lives in `agent_ns`.
async fn engine(testbed: &Testbed, agent_ns: &str) -> Result<(EngineTask, Metrics)> {
    let client = testbed.members()[0].client();
    namespace(&client, agent_ns).await?;
    let metrics = Metrics::new();
    let task = engine::start_with(
        CoreConfig {
            cluster: "member-1".to_owned(),
            report_debounce: Duration::from_millis(50),
        },
        std::sync::Arc::new(ConfigMapStore::new(client.clone(), agent_ns)),
        accord_agent::run::enforcers(
            &client,
            &metrics,
            agent_ns,
            &KafkaOptions::default(),
            &Default::default(),
        ),
        metrics.clone(),
    );
    tokio::time::timeout(WAIT, task.handle().wait_loaded())
        .await
        .context("the engine did not load its saved state")?;
    Ok((task, metrics))
}

#[test]
fn a_long_saved_state_is_stored_compressed_and_a_short_one_replaces_it() {
    TESTBED.run(|testbed| async move {
        let client = testbed.members()[0].client();
        let ns = "t-compressed-agent";
        namespace(&client, ns).await?;
        let store = ConfigMapStore::new(client.clone(), ns);
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        // Ten thousand topics' worth of assignments: more than the 1 MiB a ConfigMap may
        // hold, so only the compressed form fits.
        let long = format!(
            "{{\"version\":2,\"policies\":[{}]}}",
            (0..10_000)
                .map(|i| format!(
                    "{{\"policy\":\"FederatedKafkaTopic/team/topic-{i:05}\",\"revision\":{i},\
                     \"spec\":{{\"kafkaTopic\":{{\"topicName\":\"topic-{i:05}\",\"partitions\":3}}}}}}"
                ))
                .collect::<Vec<_>>()
                .join(",")
        );
        ensure!(long.len() > 1024 * 1024, "{} bytes", long.len());
        store.save(long.clone()).await?;
        let cm = cms.get(CONFIGMAP_NAME).await?;
        ensure!(cm.data.is_none(), "{:?}", cm.data);
        let stored = cm.binary_data.as_ref().and_then(|d| d.get(COMPRESSED_KEY));
        ensure!(
            stored.is_some_and(|b| b.0.len() * 10 < long.len()),
            "stored {:?} bytes",
            stored.map(|b| b.0.len())
        );
        ensure!(store.load().await?.as_deref() == Some(long.as_str()));

        // A short document replaces it in `data`, and the compressed one is gone.
        let short = r#"{"version":2,"policies":[]}"#.to_owned();
        store.save(short.clone()).await?;
        let cm = cms.get(CONFIGMAP_NAME).await?;
        ensure!(cm.binary_data.is_none(), "{:?}", cm.binary_data.map(|d| d.len()));
        ensure!(cm.data.as_ref().and_then(|d| d.get(DATA_KEY)) == Some(&short));
        ensure!(store.load().await?.as_deref() == Some(short.as_str()));
        Ok(())
    });
}

#[test]
fn an_assignment_takes_replicas_from_an_earlier_user_apply_and_reports_synced_then_ready() {
    TESTBED.run(|testbed| async move {
        let client = testbed.members()[0].client();
        let ns = "t-apply";
        namespace(&client, ns).await?;
        user_deployment(&client, ns, "web", 1).await?;
        let (engine, metrics) = engine(testbed, "t-apply-agent").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;

        hub.assign(
            10,
            true,
            vec![scale_item("web", 10, ns, "web", 3, "req-1")],
            vec![],
        )
        .await;
        hub.ack_until(10).await?;
        let synced = hub
            .report_until("web", "Synced with 3 replicas", |r| {
                r.state() == PlacementState::Synced && desired(r) == Some(3)
            })
            .await?;
        ensure!(reported_request_id(&synced) == Some("req-1"), "{synced:?}");
        ensure!(synced.applied_revision == 10, "{synced:?}");
        ensure!(!synced.resource_version.is_empty(), "{synced:?}");

        let d =
            deployment_until(&client, ns, "web", "3 replicas", |d| replicas(d) == Some(3)).await?;
        ensure!(
            request_id(&d) == Some("req-1"),
            "annotation {:?}",
            request_id(&d)
        );
        let owners = replicas_owners(&d);
        ensure!(
            owners == vec![AGENT_FIELD_MANAGER.to_owned()],
            "spec.replicas must be owned by the agent alone, owners: {owners:?}"
        );

        // kwok runs the pods: the agent reports them ready, each report expecting the
        // version the hub accepted last. If the pods were ready before the first report
        // went out, everything was said in it and no further report is bound to come: a
        // change to the Deployment makes one.
        let ready_report = if ready(&synced) != Some(3) {
            hub.report_until("web", "3 ready", |r| ready(r) == Some(3))
                .await?
        } else if synced.expected_version >= 100 {
            synced.clone()
        } else {
            annotate(&client, ns, "web", "touched", "1").await?;
            hub.report_until("web", "3 ready after a change", |r| ready(r) == Some(3))
                .await?
        };
        ensure!(
            ready_report.expected_version >= 100,
            "expected the last accepted version, got {}",
            ready_report.expected_version
        );
        let applies = parse_metric(&metrics.encode(), "accord_agent_scale_applies_total");
        ensure!(applies == Some(1.0), "one apply expected, got {applies:?}");
        Ok(())
    });
}

#[test]
fn an_hpa_on_the_deployment_is_a_conflict_and_its_replicas_stay() {
    TESTBED.run(|testbed| async move {
        let client = testbed.members()[0].client();
        let ns = "t-hpa";
        namespace(&client, ns).await?;
        user_deployment(&client, ns, "api", 2).await?;
        let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), ns);
        let hpa = serde_json::json!({
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "api-hpa", "namespace": ns},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
                "minReplicas": 1,
                "maxReplicas": 10,
            },
        });
        hpas.patch(
            "api-hpa",
            &PatchParams::apply(USER_MANAGER),
            &Patch::Apply(&hpa),
        )
        .await?;
        let (engine, metrics) = engine(testbed, "t-hpa-agent").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;

        hub.assign(
            5,
            true,
            vec![scale_item("api", 5, ns, "api", 5, "req-h")],
            vec![],
        )
        .await;
        let conflict = hub
            .report_until("api", "Conflict", |r| r.state() == PlacementState::Conflict)
            .await?;
        ensure!(conflict.message.contains("api-hpa"), "{}", conflict.message);
        ensure!(desired(&conflict) == Some(2), "{conflict:?}");
        let d = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), ns)
            .get("api")
            .await?;
        ensure!(
            replicas(&d) == Some(2),
            "replicas changed to {:?}",
            replicas(&d)
        );
        ensure!(request_id(&d).is_none(), "annotated despite the HPA");
        let applies = parse_metric(&metrics.encode(), "accord_agent_scale_applies_total");
        ensure!(applies == Some(0.0), "applied despite the HPA: {applies:?}");

        // Without the HPA the policy owns the replicas again.
        hpas.delete("api-hpa", &Default::default()).await?;
        hub.report_until("api", "Synced after the HPA went", |r| {
            r.state() == PlacementState::Synced && desired(r) == Some(5)
        })
        .await?;
        Ok(())
    });
}

#[test]
fn a_missing_deployment_is_target_not_found_until_it_is_created() {
    TESTBED.run(|testbed| async move {
        let client = testbed.members()[0].client();
        let ns = "t-missing";
        namespace(&client, ns).await?;
        let (engine, _metrics) = engine(testbed, "t-missing-agent").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;

        hub.assign(
            3,
            true,
            vec![scale_item("late", 3, ns, "late", 4, "req-l")],
            vec![],
        )
        .await;
        let missing = hub
            .report_until("late", "TargetNotFound", |r| {
                r.state() == PlacementState::TargetNotFound
            })
            .await?;
        ensure!(
            missing.message.contains("t-missing/late"),
            "{}",
            missing.message
        );
        ensure!(missing.observed.is_none(), "{missing:?}");

        user_deployment(&client, ns, "late", 1).await?;
        hub.report_until("late", "Synced with 4", |r| {
            r.state() == PlacementState::Synced && desired(r) == Some(4)
        })
        .await?;
        deployment_until(&client, ns, "late", "4 replicas", |d| {
            replicas(d) == Some(4)
        })
        .await?;
        Ok(())
    });
}

#[test]
fn a_replica_count_changed_by_hand_is_set_back() {
    TESTBED.run(|testbed| async move {
        let client = testbed.members()[0].client();
        let ns = "t-manual";
        namespace(&client, ns).await?;
        user_deployment(&client, ns, "cart", 1).await?;
        let (engine, _metrics) = engine(testbed, "t-manual-agent").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        hub.assign(
            7,
            true,
            vec![scale_item("cart", 7, ns, "cart", 2, "req-m")],
            vec![],
        )
        .await;
        hub.report_until("cart", "Synced", |r| r.state() == PlacementState::Synced)
            .await?;

        scale_by_hand(&client, ns, "cart", 9).await?;
        // The watch sees the change and the agent applies 2 again.
        // Generations: 1 created, 2 the agent's 2, 3 the manual 9, 4 the agent's 2 again.
        deployment_until(&client, ns, "cart", "back at 2 after a manual 9", |d| {
            replicas(d) == Some(2) && d.metadata.generation.unwrap_or(0) >= 4
        })
        .await?;
        hub.report_until("cart", "Synced again", |r| {
            r.state() == PlacementState::Synced && desired(r) == Some(2) && r.generation >= 4
        })
        .await?;
        Ok(())
    });
}

#[test]
fn conflicts_take_the_hubs_version_and_an_older_report_is_not_repeated() {
    TESTBED.run(|testbed| async move {
        let client = testbed.members()[0].client();
        let ns = "t-occ";
        namespace(&client, ns).await?;
        user_deployment(&client, ns, "occ", 1).await?;
        let (engine, metrics) = engine(testbed, "t-occ-agent").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        hub.auto_accept = false;
        let policy = policy("occ");

        hub.assign(
            2,
            true,
            vec![scale_item("occ", 2, ns, "occ", 1, "req-o")],
            vec![],
        )
        .await;
        let first = hub.report_until("occ", "a first report", |_| true).await?;
        ensure!(first.expected_version == 0, "{first:?}");

        // Stale expectation: the hub holds version 50.
        hub.answer(&policy, status_ack::Result::Conflict(50)).await;
        let second = hub.report_until("occ", "a resend", |_| true).await?;
        ensure!(second.expected_version == 50, "{second:?}");
        ensure!(second.observed_unix_millis >= first.observed_unix_millis);

        // Version current but the report older than the record: no resend until
        // something changes. Then the change is reported with version 50.
        hub.answer(&policy, status_ack::Result::Conflict(50)).await;
        scale_by_hand(&client, ns, "occ", 3).await?;
        let third = hub
            .report_until("occ", "a report after the change", |_| true)
            .await?;
        ensure!(third.expected_version == 50, "{third:?}");
        ensure!(
            third.resource_version != second.resource_version,
            "resent the refused observation: {third:?}"
        );
        hub.answer(&policy, status_ack::Result::Accepted(51)).await;
        hub.auto_accept = true;
        // The agent sets the replicas back to 1 on its own, but its observations may all
        // have been coalesced into the report just accepted, leaving nothing more to say.
        // A further change is bound to be reported, and the first report after the accept
        // expects 51. It is another writer's: a second repair against the same one within
        // a minute would be held by the fight guard (Conflict), not restored.
        scale_by_hand_as(&client, "another-hand", ns, "occ", 4).await?;
        let next = hub
            .report_until("occ", "the first report after 51", |_| true)
            .await?;
        ensure!(next.expected_version == 51, "{next:?}");
        // The agent puts the count back to 1; that may already be in `next` (the hand edit
        // and the agent's own apply coalesced), or it comes in a later report.
        let synced_again =
            |r: &StatusReport| r.state() == PlacementState::Synced && desired(r) == Some(1);
        let later = if synced_again(&next) {
            next
        } else {
            hub.report_until("occ", "Synced again after the change", synced_again)
                .await?
        };
        ensure!(later.expected_version >= 51, "{later:?}");
        let text = metrics.encode();
        ensure!(
            text.contains("accord_agent_status_acks_total{result=\"conflict\"} 2"),
            "{text}"
        );
        Ok(())
    });
}

#[test]
fn the_latest_report_is_sent_again_after_a_reconnect() {
    TESTBED.run(|testbed| async move {
        let client = testbed.members()[0].client();
        let ns = "t-reconnect";
        namespace(&client, ns).await?;
        user_deployment(&client, ns, "re", 1).await?;
        let (engine, _metrics) = engine(testbed, "t-reconnect-agent").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        hub.assign(
            4,
            true,
            vec![scale_item("re", 4, ns, "re", 1, "req-r")],
            vec![],
        )
        .await;
        let synced = hub
            .report_until("re", "Synced", |r| {
                r.state() == PlacementState::Synced && ready(r) == Some(1)
            })
            .await?;
        let accepted = hub.next_version - 1;

        hub.reconnect().await;
        let again = hub.report_until("re", "the report again", |_| true).await?;
        ensure!(again.state() == PlacementState::Synced, "{again:?}");
        ensure!(
            again.applied_revision == synced.applied_revision,
            "{again:?}"
        );
        ensure!(
            again.expected_version == accepted,
            "expected {accepted}, got {}",
            again.expected_version
        );
        Ok(())
    });
}

#[test]
fn assignments_are_saved_and_a_fresh_agent_enforces_them_without_a_hub() {
    TESTBED.run(|testbed| async move {
        let client = testbed.members()[0].client();
        let ns = "t-persist";
        let agent_ns = "t-persist-agent";
        namespace(&client, ns).await?;
        user_deployment(&client, ns, "kept", 1).await?;
        {
            let (engine, _metrics) = engine(testbed, agent_ns).await?;
            let mut hub = ScriptedHub::connect(engine.handle()).await;
            hub.assign(
                21,
                true,
                vec![scale_item("kept", 20, ns, "kept", 3, "req-p")],
                vec![],
            )
            .await;
            hub.ack_until(21).await?;
            hub.report_until("kept", "Synced", |r| r.state() == PlacementState::Synced)
                .await?;
            engine.stop().await;
        }
        // The ack came after the save.
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), agent_ns);
        let cm = cms.get(CONFIGMAP_NAME).await?;
        let document = cm
            .data
            .as_ref()
            .and_then(|d| d.get(DATA_KEY))
            .context("no saved state")?;
        let saved = SavedState::decode(document)?.state;
        ensure!(saved.cluster == "member-1", "{saved:?}");
        ensure!(saved.last_applied_revision == 21, "{saved:?}");
        ensure!(
            saved.assignments.len() == 1
                && matches!(&*saved.assignments[0].spec, AssignmentSpec::Scale(s) if s.replicas == 3),
            "{saved:?}"
        );

        // Cut off from the hub, someone scales by hand; a fresh agent sets it back.
        scale_by_hand(&client, ns, "kept", 8).await?;
        let (engine, _metrics) = engine(testbed, agent_ns).await?;
        ensure!(engine.handle().last_applied_revision() == 21);
        deployment_until(
            &client,
            ns,
            "kept",
            "3 replicas from the saved state",
            |d| replicas(d) == Some(3),
        )
        .await?;

        // A full set without the policy ends management and forgets it.
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        hub.assign(30, true, vec![], vec![]).await;
        hub.ack_until(30).await?;
        let saved = SavedState::decode(
            cms.get(CONFIGMAP_NAME)
                .await?
                .data
                .as_ref()
                .and_then(|d| d.get(DATA_KEY))
                .context("no saved state")?,
        )?
        .state;
        ensure!(
            saved.assignments.is_empty() && saved.last_applied_revision == 30,
            "{saved:?}"
        );
        Ok(())
    });
}

#[test]
fn a_configmap_in_the_first_format_is_enforced_and_rewritten_in_the_current_one() {
    TESTBED.run(|testbed| async move {
        let client = testbed.members()[0].client();
        let ns = "t-migrate";
        let agent_ns = "t-migrate-agent";
        namespace(&client, ns).await?;
        namespace(&client, agent_ns).await?;
        user_deployment(&client, ns, "old", 1).await?;
        // What agents wrote before the document had a version.
        let legacy = serde_json::json!({
            "cluster": "member-1",
            "lastAppliedRevision": 12,
            "policies": [{
                "policy": {"kind": "CrossClusterScalePolicy", "namespace": "default", "name": "old"},
                "revision": 11,
                "scale": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": ns,
                          "name": "old", "replicas": 3, "scaleRequestId": "req-v1"},
            }],
        });
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), agent_ns);
        cms.patch(
            CONFIGMAP_NAME,
            &PatchParams::apply(AGENT_FIELD_MANAGER),
            &Patch::Apply(serde_json::json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CONFIGMAP_NAME, "namespace": agent_ns},
                "data": {DATA_KEY: legacy.to_string()},
            })),
        )
        .await?;

        let (engine, _metrics) = engine(testbed, agent_ns).await?;
        ensure!(engine.handle().last_applied_revision() == 12);
        deployment_until(&client, ns, "old", "3 replicas from the old document", |d| {
            replicas(d) == Some(3) && request_id(d) == Some("req-v1")
        })
        .await?;
        // Rewritten in the current format without waiting for the hub.
        let rewritten = tokio::time::timeout(
            WAIT,
            kube::runtime::wait::await_condition(cms.clone(), CONFIGMAP_NAME, |cm: Option<&ConfigMap>| {
                cm.and_then(|cm| cm.data.as_ref())
                    .and_then(|d| d.get(DATA_KEY))
                    .is_some_and(|doc| doc.contains("\"version\":2"))
            }),
        )
        .await
        .context("the old document was not rewritten")??
        .context("the ConfigMap vanished")?;
        let document = rewritten
            .data
            .as_ref()
            .and_then(|d| d.get(DATA_KEY))
            .context("no saved state")?;
        let saved = SavedState::decode(document)?;
        ensure!(!saved.migrated, "{document}");
        ensure!(saved.state.last_applied_revision == 12, "{document}");
        ensure!(
            matches!(&saved.state.assignments[..], [p] if p.revision == 11
                && matches!(&*p.spec, AssignmentSpec::Scale(s) if s.replicas == 3)),
            "{document}"
        );
        Ok(())
    });
}

#[test]
fn the_identity_is_read_from_a_secret_in_the_member_cluster() {
    TESTBED.run(|testbed| async move {
        use accord_agent::identity::{self, IdentitySource};
        use k8s_openapi::api::core::v1::Secret;
        let client = testbed.members()[0].client();
        let ns = "t-identity";
        namespace(&client, ns).await?;
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
        let secret = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "accord-agent-identity", "namespace": ns},
            "stringData": {
                identity::HUB_URL_KEY: "https://127.0.0.1:7443",
                identity::CLUSTER_NAME_KEY: "member-1",
                identity::CA_CERT_KEY: ck.cert.pem(),
                identity::TLS_CERT_KEY: ck.cert.pem(),
                identity::TLS_KEY_KEY: ck.signing_key.serialize_pem(),
            },
        });
        Api::<Secret>::namespaced(client.clone(), ns)
            .patch(
                "accord-agent-identity",
                &PatchParams::apply(USER_MANAGER),
                &Patch::Apply(&secret),
            )
            .await?;
        let source = IdentitySource::Secret {
            namespace: ns.into(),
            name: "accord-agent-identity".into(),
        };
        let id = source.load(&client).await?;
        ensure!(id.cluster == "member-1", "{id:?}");
        ensure!(id.server_name == "localhost", "{id:?}");
        let missing = IdentitySource::Secret {
            namespace: ns.into(),
            name: "absent".into(),
        };
        let err = missing.load(&client).await.unwrap_err();
        ensure!(err.to_string().contains("t-identity/absent"), "{err}");
        Ok(())
    });
}
