//! The hub's FederatedKafkaTopic controller end to end: a real `accord-hub serve` against a
//! real etcd and management kube-apiserver, with simulated agents that join through the
//! real token flow, hold real mTLS streams, and play a member's Kafka by reporting every
//! topic assignment they receive as applied (partitions and replication factor as asked,
//! `exists=false` once asked to delete). The real agents and brokers are exercised by the
//! e2e acceptance; this proves the hub's side: placements and status per cluster, the
//! older topic keeping a name, policies stopping propagation, and both deletion policies
//! including the bound.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use accord_crds::ManagedCluster;
use accord_crds::conditions;
use accord_crds::kafka_topic::{FederatedKafkaTopic, KafkaTopicPolicy};
use accord_e2e::agent_sim::{self, AgentStream};
use accord_e2e::fleet::ensure_namespace;
use accord_e2e::hub::{HubOptions, HubProcess, create_token};
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use accord_hub::store::{Keyspace, Store};
use accord_proto::v1::{
    KafkaTopicAssignment, KafkaTopicStatus, PlacementState as PbState, StatusReport, assignment,
    hub_message, status_ack, status_report,
};
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

static TESTBED: SharedTestbed =
    SharedTestbed::new(|b| b.members(0).without_mgmt_controller_manager());
/// One hub at a time: every hub's leader reconciles every FederatedKafkaTopic on the
/// management cluster, as the one hub of a real deployment does.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Generous for a loaded machine; each step normally takes well under a second.
const STEP: Duration = Duration::from_secs(30);
/// The hub's `--topic-deletion-timeout` in these tests.
const DELETION_BOUND: Duration = Duration::from_secs(8);
const KIND: &str = "FederatedKafkaTopic";

async fn start_hub<'t>(testbed: &'t Testbed, name: &str) -> Result<HubProcess<'t>> {
    start_hub_with(testbed, name, &[]).await
}

async fn start_hub_with<'t>(
    testbed: &'t Testbed,
    name: &str,
    extra: &[&str],
) -> Result<HubProcess<'t>> {
    let mut extra_args = vec![
        "--topic-deletion-timeout".into(),
        format!("{}s", DELETION_BOUND.as_secs()),
    ];
    extra_args.extend(extra.iter().map(|a| (*a).to_owned()));
    HubProcess::start(
        testbed,
        &HubOptions {
            replica: name.into(),
            etcd_prefix: format!("/t-{name}/"),
            extra_args,
        },
    )
    .await
}

/// What a simulated agent was sent for one topic object.
#[derive(Clone, Debug)]
struct Received {
    topic: KafkaTopicAssignment,
}

/// A member cluster's agent playing its Kafka: every topic assignment is reported applied.
struct TopicAgent {
    cluster: String,
    /// Every topic assignment received, by `<namespace>/<name>` of the topic object.
    received: Arc<Mutex<BTreeMap<String, Vec<Received>>>>,
    /// Topic objects whose assignment was removed.
    removed: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
    heartbeats: tokio::task::JoinHandle<()>,
}

impl Drop for TopicAgent {
    fn drop(&mut self) {
        self.task.abort();
        self.heartbeats.abort();
    }
}

impl TopicAgent {
    /// Joins `cluster` (labelled `labels`) and plays its agent until dropped or stopped.
    async fn join(
        testbed: &Testbed,
        hub: &HubProcess<'_>,
        cluster: &str,
        labels: &[(&str, &str)],
    ) -> Result<Self> {
        let prefix = format!("/t-{}/", hub.replica);
        let (token, hash) = create_token(testbed, &prefix, "10m").await?;
        let identity = agent_sim::register(&hub.grpc, &token, &hash, cluster, true).await?;
        if !labels.is_empty() {
            let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
            Api::<ManagedCluster>::all(testbed.mgmt().client())
                .patch(
                    cluster,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": labels}})),
                )
                .await?;
        }
        let stream =
            AgentStream::open(agent_sim::connect(&hub.grpc, &identity).await?, cluster).await?;
        let heartbeats = stream.spawn_heartbeats(Duration::from_millis(500));
        let received = Arc::new(Mutex::new(BTreeMap::new()));
        let removed = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(play(stream, received.clone(), removed.clone()));
        let agent = Self {
            cluster: cluster.to_owned(),
            received,
            removed,
            task,
            heartbeats,
        };
        until(&format!("{cluster} Available"), STEP, || async {
            let mc = Api::<ManagedCluster>::all(testbed.mgmt().client())
                .get(cluster)
                .await?;
            let conds = mc.status.map(|s| s.conditions).unwrap_or_default();
            Ok(if conditions::is_true(&conds, "Available") {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{conds:?}"))
            })
        })
        .await?;
        Ok(agent)
    }

    /// The agent goes away: its stream ends and nothing more is reported.
    fn stop(&self) {
        self.task.abort();
        self.heartbeats.abort();
    }

    fn received(&self, object: &str) -> Vec<Received> {
        self.received
            .lock()
            .unwrap()
            .get(object)
            .cloned()
            .unwrap_or_default()
    }

    fn was_removed(&self, object: &str) -> bool {
        self.removed.lock().unwrap().iter().any(|r| r == object)
    }
}

/// The agent's loop: report each topic assignment as applied, tracking each report's
/// version through the hub's acknowledgements.
async fn play(
    mut stream: AgentStream,
    received: Arc<Mutex<BTreeMap<String, Vec<Received>>>>,
    removed: Arc<Mutex<Vec<String>>>,
) {
    let mut versions: BTreeMap<String, i64> = BTreeMap::new();
    let mut last: BTreeMap<String, StatusReport> = BTreeMap::new();
    while let Some(Ok(msg)) = stream.next().await {
        match msg.body {
            Some(hub_message::Body::Assignments(a)) => {
                for r in a.removed.into_iter().filter_map(|r| r.placed) {
                    removed
                        .lock()
                        .unwrap()
                        .push(format!("{}/{}", r.namespace, r.name));
                }
                for item in a.items {
                    let (Some(policy), Some(assignment::Spec::KafkaTopic(topic))) =
                        (item.placed, item.spec)
                    else {
                        continue;
                    };
                    let object = format!("{}/{}", policy.namespace, policy.name);
                    received
                        .lock()
                        .unwrap()
                        .entry(object.clone())
                        .or_default()
                        .push(Received {
                            topic: topic.clone(),
                        });
                    let report = StatusReport {
                        placed: Some(policy),
                        expected_version: versions.get(&object).copied().unwrap_or(0),
                        state: PbState::Synced as i32,
                        message: if topic.delete {
                            "deleted".into()
                        } else {
                            String::new()
                        },
                        applied_revision: item.revision,
                        observed: Some(status_report::Observed::KafkaTopic(KafkaTopicStatus {
                            partitions: topic.partitions,
                            replication_factor: topic.replication_factor,
                            exists: !topic.delete,
                        })),
                        ..Default::default()
                    };
                    last.insert(object, report.clone());
                    if stream.report(report).await.is_err() {
                        return;
                    }
                }
            }
            Some(hub_message::Body::StatusAck(ack)) => {
                let Some(policy) = ack.placed else { continue };
                let object = format!("{}/{}", policy.namespace, policy.name);
                match ack.result {
                    Some(status_ack::Result::Accepted(v)) => {
                        versions.insert(object, v);
                    }
                    Some(status_ack::Result::Conflict(v)) => {
                        // Another version is stored: send the last report again on top of it.
                        versions.insert(object.clone(), v);
                        if let Some(mut report) = last.get(&object).cloned() {
                            report.expected_version = v;
                            if stream.report(report).await.is_err() {
                                return;
                            }
                        }
                    }
                    None => {}
                }
            }
            _ => {}
        }
    }
}

fn topic(name: &str, ns: &str, spec: serde_json::Value) -> Result<FederatedKafkaTopic> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "accord.io/v1beta1", "kind": KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))?)
}

/// Waits until `name`'s status satisfies `check` (which says what it saw otherwise).
async fn wait_status<T>(
    api: &Api<FederatedKafkaTopic>,
    name: &str,
    what: &str,
    check: impl Fn(&FederatedKafkaTopic) -> Option<T>,
) -> Result<T> {
    until(what, STEP, || async {
        let t = api.get(name).await?;
        Ok(match check(&t) {
            Some(v) => Check::Ready(v),
            None => Check::NotYet(format!("{:?}", t.status)),
        })
    })
    .await
}

/// The condition `type_` of a topic, as (status, reason, message).
fn condition(t: &FederatedKafkaTopic, type_: &str) -> Option<(String, String, String)> {
    let c = conditions::find(&t.status.as_ref()?.conditions, type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Every placement `Synced` with `partitions`, for exactly `clusters`, at the current
/// generation.
fn synced_everywhere(t: &FederatedKafkaTopic, clusters: &[&str], partitions: i32) -> bool {
    let Some(status) = &t.status else {
        return false;
    };
    status.observed_generation == t.metadata.generation
        && status.placements.len() == clusters.len()
        && status.placements.iter().all(|p| {
            clusters.contains(&p.cluster.as_str())
                && p.state == accord_crds::PlacementState::Synced
                && p.partitions == Some(partitions)
        })
}

/// Waits for an Event about `object` with `reason`; returns its note.
async fn wait_event(testbed: &Testbed, ns: &str, object: &str, reason: &str) -> Result<String> {
    let events: Api<Event> = Api::namespaced(testbed.mgmt().client(), ns);
    until(&format!("Event {reason} about {object}"), STEP, || async {
        let list = events.list(&ListParams::default()).await?;
        let found = list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object)
        });
        Ok(match found {
            Some(e) => Check::Ready(e.note.unwrap_or_default()),
            None => Check::NotYet("no such Event".into()),
        })
    })
    .await
}

async fn wait_gone(api: &Api<FederatedKafkaTopic>, name: &str) -> Result<()> {
    until(&format!("{name} gone"), STEP, || async {
        Ok(match api.get_opt(name).await? {
            None => Check::Ready(()),
            Some(t) => Check::NotYet(format!(
                "finalizers {:?}, status {:?}",
                t.metadata.finalizers, t.status
            )),
        })
    })
    .await
}

async fn record_exists(store: &Store, ns: &str, name: &str) -> Result<bool> {
    let key = store.keys().placements(KIND, ns, name);
    Ok(store.get(key.as_str()).await?.is_some())
}

/// Waits until the placement record of `ns/name` is gone: the hub forgets an object when
/// its watch sees the deletion, which may be a moment after the API server says it is gone.
async fn wait_record_gone(store: &Store, ns: &str, name: &str) -> Result<()> {
    until(
        &format!("the record of {ns}/{name} removed"),
        STEP,
        || async {
            Ok(if record_exists(store, ns, name).await? {
                Check::NotYet("record left".into())
            } else {
                Check::Ready(())
            })
        },
    )
    .await
}

#[test]
fn every_selected_cluster_gets_the_topic_and_an_older_topic_keeps_a_duplicate_name() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let hub = start_hub(testbed, "kafka-place").await?;
        let store = Store::from_client(
            testbed.hub_etcd_client().await?,
            Keyspace::new("/t-kafka-place/"),
        );
        let a = TopicAgent::join(testbed, &hub, "kt-a", &[("kafka-e2e", "place")]).await?;
        let b = TopicAgent::join(testbed, &hub, "kt-b", &[("kafka-e2e", "place")]).await?;
        let (ns, other_ns) = ("kt-place", "kt-place-2");
        ensure_namespace(testbed.mgmt(), ns).await?;
        ensure_namespace(testbed.mgmt(), other_ns).await?;
        let api: Api<FederatedKafkaTopic> = Api::namespaced(testbed.mgmt().client(), ns);
        let other: Api<FederatedKafkaTopic> = Api::namespaced(testbed.mgmt().client(), other_ns);

        // Selected by label: both members get 12 partitions, RF 3 and both configs.
        api.create(
            &PostParams::default(),
            &topic(
                "events",
                ns,
                json!({
                    "partitions": 12, "replicationFactor": 3,
                    "config": {"retention.ms": "604800000", "cleanup.policy": "delete"},
                    "placement": {"clusterSelector": {"matchLabels": {"kafka-e2e": "place"}}},
                }),
            )?,
        )
        .await?;
        let synced = wait_status(&api, "events", "events Synced in kt-a and kt-b", |t| {
            synced_everywhere(t, &["kt-a", "kt-b"], 12).then(|| t.clone())
        })
        .await?;
        let status = synced.status.clone().context("no status")?;
        ensure!(
            status
                .placements
                .iter()
                .all(|p| p.replication_factor == Some(3)),
            "{status:?}"
        );
        ensure!(
            condition(&synced, "Ready").map(|c| c.0).as_deref() == Some("True"),
            "{status:?}"
        );
        ensure!(
            condition(&synced, "Degraded").map(|c| c.0).as_deref() == Some("False"),
            "{status:?}"
        );
        let first = a.received(&format!("{ns}/events"));
        let sent = &first.last().context("kt-a was sent nothing")?.topic;
        ensure!(
            sent.topic_name == "events"
                && sent.config.get("cleanup.policy").map(String::as_str) == Some("delete")
                && sent.removed_config.is_empty(),
            "{sent:?}"
        );
        wait_event(testbed, ns, "events", "Applied").await?;

        // A key dropped from the spec is sent as removed, for the agents to reset.
        api.patch(
            "events",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"cleanup.policy": null}}})),
        )
        .await?;
        until("kt-b sent cleanup.policy as removed", STEP, || async {
            let got = b.received(&format!("{ns}/events"));
            Ok(match got.last() {
                Some(r) if r.topic.removed_config == ["cleanup.policy"] => {
                    ensure!(!r.topic.config.contains_key("cleanup.policy"), "{r:?}");
                    Check::Ready(())
                }
                last => Check::NotYet(format!("{last:?}")),
            })
        })
        .await?;

        // A newer topic of the same name in kt-a: Conflict there, naming the owner, and
        // nothing sent for it; kt-b (not contested) is unaffected. Creation timestamps
        // have whole seconds (and a tie goes to namespace/name order), so the newer one
        // is created in a later second.
        let created = synced
            .metadata
            .creation_timestamp
            .as_ref()
            .context("no creationTimestamp")?
            .0;
        until("a second after events was created", STEP, || async {
            let now = k8s_openapi::jiff::Timestamp::now();
            Ok(if now.as_second() > created.as_second() {
                Check::Ready(())
            } else {
                Check::NotYet(format!("now {now}, created {created}"))
            })
        })
        .await?;
        other
            .create(
                &PostParams::default(),
                &topic(
                    "dup",
                    other_ns,
                    json!({"topicName": "events", "partitions": 24, "replicationFactor": 3,
                           "placement": {"clusters": ["kt-a"]}}),
                )?,
            )
            .await?;
        let conflicted = wait_status(&other, "dup", "dup Conflict in kt-a", |t| {
            let p = t.status.as_ref()?.placements.first()?.clone();
            (p.state == accord_crds::PlacementState::Conflict).then_some(p)
        })
        .await?;
        let message = conflicted.message.clone().unwrap_or_default();
        ensure!(message.contains(&format!("{ns}/events")), "{message}");
        ensure!(conflicted.partitions.is_none(), "{conflicted:?}");
        let note = wait_event(testbed, other_ns, "dup", "Conflict").await?;
        ensure!(note.contains(&format!("{ns}/events")), "{note}");
        let dup = other.get("dup").await?;
        ensure!(
            condition(&dup, "Degraded").map(|c| c.0).as_deref() == Some("True"),
            "{:?}",
            dup.status
        );
        ensure!(
            a.received(&format!("{other_ns}/dup")).is_empty(),
            "a conflicted topic was sent"
        );

        // The owner goes (Retain: released at once); the newer topic takes the name over.
        api.delete("events", &DeleteParams::default()).await?;
        wait_gone(&api, "events").await?;
        wait_record_gone(&store, ns, "events").await?;
        wait_status(
            &other,
            "dup",
            "dup Synced in kt-a after the owner went",
            |t| synced_everywhere(t, &["kt-a"], 24).then_some(()),
        )
        .await?;
        ensure!(
            a.was_removed(&format!("{ns}/events")),
            "kt-a was not told the old topic ended"
        );
        ensure!(
            a.received(&format!("{ns}/events"))
                .iter()
                .all(|r| !r.topic.delete),
            "Retain must never ask for a deletion"
        );
        other.delete("dup", &DeleteParams::default()).await?;
        wait_gone(&other, "dup").await?;
        drop((a, b, hub));
        Ok(())
    });
}

/// Waits until policy `kt-min-12` is Ready at its generation and counts `count` topics.
async fn wait_violating(policies: &Api<KafkaTopicPolicy>, count: i32) -> Result<()> {
    until(
        &format!("the policy counting {count} violating topics"),
        STEP,
        || async {
            let p = policies.get("kt-min-12").await?;
            let st = p.status.clone().unwrap_or_default();
            let ready = conditions::is_true(&st.conditions, "Ready");
            Ok(
                if st.violating_topics == Some(count)
                    && ready
                    && st.observed_generation == p.metadata.generation
                {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("{st:?}"))
                },
            )
        },
    )
    .await
}

#[test]
fn a_deny_policy_stops_propagation_and_an_audit_policy_only_warns() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let hub = start_hub(testbed, "kafka-policy").await?;
        let store = Store::from_client(
            testbed.hub_etcd_client().await?,
            Keyspace::new("/t-kafka-policy/"),
        );
        let c = TopicAgent::join(testbed, &hub, "kt-c", &[]).await?;
        let ns = "kt-policy";
        ensure_namespace(testbed.mgmt(), ns).await?;
        // The policy governs only this test's namespace (policies are cluster-wide).
        Api::<Namespace>::all(testbed.mgmt().client())
            .patch(
                ns,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"kafka-policy-e2e": "yes"}}})),
            )
            .await?;
        let api: Api<FederatedKafkaTopic> = Api::namespaced(testbed.mgmt().client(), ns);
        let policies: Api<KafkaTopicPolicy> = Api::all(testbed.mgmt().client());
        let policy: KafkaTopicPolicy = serde_json::from_value(json!({
            "apiVersion": "accord.io/v1beta1", "kind": "KafkaTopicPolicy",
            "metadata": {"name": "kt-min-12"},
            "spec": {"minPartitions": 12, "replicationFactor": 3,
                     "namespaceSelector": {"matchLabels": {"kafka-policy-e2e": "yes"}}},
        }))?;
        policies.create(&PostParams::default(), &policy).await?;
        // The hub has seen the policy once it has written its status; a topic created
        // before that could be propagated first (the admission webhook, not tested here,
        // is what refuses it up front).
        wait_violating(&policies, 0).await?;

        // Deny: the topic (as if the webhook had been bypassed) is not propagated.
        api.create(
            &PostParams::default(),
            &topic(
                "small",
                ns,
                json!({"partitions": 6, "replicationFactor": 1, "placement": {"clusters": ["kt-c"]}}),
            )?,
        )
        .await?;
        let (_, reason, message) = wait_status(&api, "small", "small PolicyViolated", |t| {
            condition(t, "PolicyViolation").filter(|c| c.0 == "True")
        })
        .await?;
        ensure!(reason == "PolicyViolated", "{reason}");
        ensure!(
            message.contains("spec.partitions: must be at least 12 (is 6)")
                && message.contains("spec.replicationFactor: must be 3 (is 1)"),
            "{message}"
        );
        let small = api.get("small").await?;
        let ready = condition(&small, "Ready").context("no Ready")?;
        ensure!(
            ready.0 == "False" && ready.1 == "PolicyViolated",
            "{ready:?}"
        );
        ensure!(
            !record_exists(&store, ns, "small").await?,
            "a denied topic was propagated"
        );
        ensure!(c.received(&format!("{ns}/small")).is_empty());
        wait_event(testbed, ns, "small", "PolicyViolation").await?;
        wait_violating(&policies, 1).await?;

        // Audit: propagated, with reason AuditOnly.
        policies
            .patch(
                "kt-min-12",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"enforcement": "Audit"}})),
            )
            .await?;
        wait_status(&api, "small", "small AuditOnly and Synced", |t| {
            let pv = condition(t, "PolicyViolation")?;
            (pv.1 == "AuditOnly" && synced_everywhere(t, &["kt-c"], 6)).then_some(())
        })
        .await?;
        ensure!(c.received(&format!("{ns}/small")).len() == 1);

        // Deny again, then a change to the topic: it is not sent, the record stays.
        policies
            .patch(
                "kt-min-12",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"enforcement": "Deny"}})),
            )
            .await?;
        wait_status(&api, "small", "small PolicyViolated again", |t| {
            condition(t, "PolicyViolation").filter(|c| c.1 == "PolicyViolated")
        })
        .await?;
        let edited = api
            .patch(
                "small",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"partitions": 8}})),
            )
            .await?;
        wait_status(
            &api,
            "small",
            "small PolicyViolated at the new generation",
            |t| {
                let st = t.status.as_ref()?;
                let pv = condition(t, "PolicyViolation")?;
                (pv.1 == "PolicyViolated" && st.observed_generation == edited.metadata.generation)
                    .then_some(())
            },
        )
        .await?;
        let key = store.keys().placements(KIND, ns, "small");
        let stored = store.get(key.as_str()).await?;
        let record: serde_json::Value =
            serde_json::from_slice(stored.context("record gone")?.value())?;
        ensure!(
            record["decision"]["topic"]["spec"]["partitions"] == 6,
            "the record changed: {record}"
        );
        ensure!(
            c.received(&format!("{ns}/small"))
                .iter()
                .all(|r| r.topic.partitions == 6),
            "a change was sent under a Deny policy"
        );

        // The policy goes: the change is propagated.
        policies
            .delete("kt-min-12", &DeleteParams::default())
            .await?;
        wait_status(&api, "small", "small Synced with 8 partitions", |t| {
            let pv = condition(t, "PolicyViolation")?;
            (pv.0 == "False" && synced_everywhere(t, &["kt-c"], 8)).then_some(())
        })
        .await?;
        api.delete("small", &DeleteParams::default()).await?;
        wait_gone(&api, "small").await?;
        drop((c, hub));
        Ok(())
    });
}

#[test]
fn delete_removes_the_topic_everywhere_and_a_silent_member_holds_it_only_until_the_bound() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let hub = start_hub(testbed, "kafka-delete").await?;
        let store = Store::from_client(
            testbed.hub_etcd_client().await?,
            Keyspace::new("/t-kafka-delete/"),
        );
        let d = TopicAgent::join(testbed, &hub, "kt-d", &[]).await?;
        let e = TopicAgent::join(testbed, &hub, "kt-e", &[]).await?;
        let ns = "kt-delete";
        ensure_namespace(testbed.mgmt(), ns).await?;
        let api: Api<FederatedKafkaTopic> = Api::namespaced(testbed.mgmt().client(), ns);
        let both = json!(["kt-d", "kt-e"]);

        // Delete: every member is asked to delete, reports it gone, and the object goes.
        api.create(
            &PostParams::default(),
            &topic(
                "drop",
                ns,
                json!({"partitions": 3, "replicationFactor": 1, "placement": {"clusters": both},
                       "deletionPolicy": "Delete"}),
            )?,
        )
        .await?;
        wait_status(&api, "drop", "drop Synced", |t| {
            synced_everywhere(t, &["kt-d", "kt-e"], 3).then_some(())
        })
        .await?;
        api.delete("drop", &DeleteParams::default()).await?;
        wait_gone(&api, "drop").await?;
        for agent in [&d, &e] {
            let asked = agent.received(&format!("{ns}/drop"));
            ensure!(
                asked.last().is_some_and(|r| r.topic.delete),
                "{} was not asked to delete: {asked:?}",
                agent.cluster
            );
        }
        wait_record_gone(&store, ns, "drop").await?;
        let note = wait_event(testbed, ns, "drop", "Deleted").await?;
        ensure!(note.contains("deleted in every member"), "{note}");

        // A member whose agent is gone: the object waits for it until the bound, then goes
        // with a Warning Event naming it.
        api.create(
            &PostParams::default(),
            &topic(
                "stuck",
                ns,
                json!({"partitions": 3, "replicationFactor": 1, "placement": {"clusters": both},
                       "deletionPolicy": "Delete"}),
            )?,
        )
        .await?;
        wait_status(&api, "stuck", "stuck Synced", |t| {
            synced_everywhere(t, &["kt-d", "kt-e"], 3).then_some(())
        })
        .await?;
        e.stop();
        let asked_at = Instant::now();
        api.delete("stuck", &DeleteParams::default()).await?;
        until("kt-d asked to delete stuck", STEP, || async {
            Ok(
                if d.received(&format!("{ns}/stuck"))
                    .last()
                    .is_some_and(|r| r.topic.delete)
                {
                    Check::Ready(())
                } else {
                    Check::NotYet("not yet".into())
                },
            )
        })
        .await?;
        let (_, _, message) = wait_status(&api, "stuck", "stuck Deleting, waiting for kt-e", |t| {
            condition(t, "Ready").filter(|c| c.1 == "Deleting" && !c.2.contains("kt-d"))
        })
        .await?;
        ensure!(message.contains("waiting for kt-e"), "{message}");
        wait_gone(&api, "stuck").await?;
        let waited = asked_at.elapsed();
        // The deletion timestamp is the API server's (whole seconds), hence the slack.
        ensure!(
            waited + Duration::from_secs(1) >= DELETION_BOUND,
            "released after {waited:?}, before the bound of {DELETION_BOUND:?}"
        );
        let note = wait_event(testbed, ns, "stuck", "DeletionIncomplete").await?;
        ensure!(note.contains("kt-e") && !note.contains("kt-d"), "{note}");
        wait_record_gone(&store, ns, "stuck").await?;

        // Retain: released at once; the member is told to stop managing it, never to
        // delete it.
        api.create(
            &PostParams::default(),
            &topic(
                "keep",
                ns,
                json!({"partitions": 3, "replicationFactor": 1, "placement": {"clusters": ["kt-d"]}}),
            )?,
        )
        .await?;
        wait_status(&api, "keep", "keep Synced", |t| {
            synced_everywhere(t, &["kt-d"], 3).then_some(())
        })
        .await?;
        api.delete("keep", &DeleteParams::default()).await?;
        wait_gone(&api, "keep").await?;
        until("kt-d told keep ended", STEP, || async {
            Ok(if d.was_removed(&format!("{ns}/keep")) {
                Check::Ready(())
            } else {
                Check::NotYet("no removal".into())
            })
        })
        .await?;
        ensure!(
            d.received(&format!("{ns}/keep"))
                .iter()
                .all(|r| !r.topic.delete),
            "Retain asked for a deletion"
        );
        drop((d, e, hub));
        Ok(())
    });
}

/// `accord-hub placements OBJECT` (with `--explain`) against `hub`'s HTTP endpoint.
async fn placements_cli(
    hub: &HubProcess<'_>,
    object: &str,
    explain: bool,
) -> Result<std::process::Output> {
    let mut cmd = tokio::process::Command::new(accord_e2e::hub::accord_binary("accord-hub")?);
    cmd.args(["placements", object, "--hub-http", &hub.http]);
    if explain {
        cmd.arg("--explain");
    }
    Ok(cmd.output().await?)
}

/// Above `--status-placements-threshold` the status counts placements by state and lists
/// only those not Synced (at most `--status-placements-listed`); `accord-hub placements`
/// prints every one from the leader's view.
#[test]
fn above_the_threshold_the_status_counts_placements_and_the_hub_lists_them_all() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let hub = start_hub_with(
            testbed,
            "kafka-summary",
            &[
                "--status-placements-threshold",
                "2",
                "--status-placements-listed",
                "1",
            ],
        )
        .await?;
        let label = [("kafka-e2e", "summary")];
        let a = TopicAgent::join(testbed, &hub, "ks-a", &label).await?;
        let _b = TopicAgent::join(testbed, &hub, "ks-b", &label).await?;
        let _c = TopicAgent::join(testbed, &hub, "ks-c", &label).await?;
        let ns = "kt-summary";
        ensure_namespace(testbed.mgmt(), ns).await?;
        let api: Api<FederatedKafkaTopic> = Api::namespaced(testbed.mgmt().client(), ns);
        api.create(
            &PostParams::default(),
            &topic(
                "wide",
                ns,
                json!({
                    "partitions": 3, "replicationFactor": 1,
                    "placement": {"clusterSelector": {"matchLabels": {"kafka-e2e": "summary"}}},
                }),
            )?,
        )
        .await?;
        // Three placements, all Synced: counted, none listed, and Ready.
        let states = |t: &FederatedKafkaTopic| {
            t.status
                .as_ref()
                .and_then(|s| s.summary.as_ref())
                .map(|s| (s.total, s.listed, s.states.clone()))
        };
        wait_status(&api, "wide", "3 Synced counted, none listed", |t| {
            let synced = accord_crds::summary::StateCounts {
                synced: Some(3),
                ..Default::default()
            };
            (states(t) == Some((3, 0, synced))
                && t.status.as_ref()?.placements.is_empty()
                && condition(t, "Ready")?.0 == "True")
                .then_some(())
        })
        .await?;

        // One agent goes: its placement (Unavailable) is the one listed.
        a.stop();
        let listed = wait_status(&api, "wide", "ks-a listed as Unavailable", |t| {
            let counts = accord_crds::summary::StateCounts {
                synced: Some(2),
                unavailable: Some(1),
                ..Default::default()
            };
            let status = t.status.as_ref()?;
            (states(t) == Some((3, 1, counts))).then(|| status.placements.clone())
        })
        .await?;
        ensure!(
            listed.len() == 1
                && listed[0].cluster == "ks-a"
                && listed[0].state == accord_crds::PlacementState::Unavailable,
            "{listed:?}"
        );

        // The hub's view has all three, as the CLI prints them.
        let out = placements_cli(&hub, &format!("fkt/{ns}/wide"), false).await?;
        let printed = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success(),
            "accord-hub placements failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(
            printed.starts_with("3 placements: Synced 2, Unavailable 1"),
            "{printed}"
        );
        for cluster in ["ks-a", "ks-b", "ks-c"] {
            ensure!(
                printed.lines().any(|l| l.starts_with(cluster)),
                "{cluster} missing: {printed}"
            );
        }
        // An object the hub does not place is a clear error, not an empty table.
        let out = placements_cli(&hub, &format!("fkt/{ns}/absent"), false).await?;
        let said = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success() && said.contains("404") && said.contains("not placed"),
            "{said}"
        );

        // One cluster away and one tainted: the status says both, and so do
        // `kubectl describe` and `accord-hub placements --explain`.
        accord_e2e::fleet::patch_managed_cluster(
            testbed,
            "ks-b",
            json!({"spec": {"taints": [{"key": "accord.io/maintenance", "effect": "NoExecute"}]}}),
        )
        .await?;
        let selection = wait_status(&api, "wide", "both reasons in status.selection", |t| {
            let s = t.status.as_ref()?.selection.clone()?;
            let named = |reason: accord_crds::LeftOutReason, cluster: &str| {
                s.left_out
                    .iter()
                    .any(|l| l.reason == reason && l.clusters.iter().any(|c| c == cluster))
            };
            (s.placed == 1
                && named(accord_crds::LeftOutReason::Unavailable, "ks-a")
                && named(accord_crds::LeftOutReason::Tainted, "ks-b"))
            .then_some(s)
        })
        .await?;
        ensure!(
            selection.message.contains("1 unavailable")
                && selection
                    .message
                    .contains("1 tainted (accord.io/maintenance:NoExecute)"),
            "{selection:?}"
        );
        let described = testbed
            .kubectl(testbed.mgmt())
            .args(["describe", "federatedkafkatopic", "wide", "-n", ns])
            .output()
            .await?;
        let described = String::from_utf8_lossy(&described.stdout);
        for said in [
            "Unavailable",
            "Tainted",
            "accord.io/maintenance:NoExecute",
            "ks-a",
            "ks-b",
        ] {
            ensure!(
                described.contains(said),
                "describe lacks {said}: {described}"
            );
        }
        let out = placements_cli(&hub, &format!("fkt/{ns}/wide"), true).await?;
        let printed = String::from_utf8_lossy(&out.stdout);
        ensure!(
            printed.contains("Unavailable: 1: ks-a")
                && printed.contains("Tainted (accord.io/maintenance:NoExecute): 1: ks-b"),
            "{printed}"
        );
        // The same from kubectl, through its plugin: the hub's full view when it is
        // reachable, the object's status (and a line saying so) when it is not — the
        // testbed's hub has no Service for the API server to proxy to.
        let plugin = accord_e2e::hub::accord_binary("kubectl-accord")?;
        let path = format!(
            "{}:{}",
            plugin.parent().context("the plugin's directory")?.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        for hub_flag in [vec!["--hub-http", hub.http.as_str()], vec![]] {
            let out = testbed
                .kubectl(testbed.mgmt())
                .env("PATH", &path)
                .args(["accord", "placements", "fkt/wide", "-n", ns, "--explain"])
                .args(&hub_flag)
                .output()
                .await?;
            let printed = String::from_utf8_lossy(&out.stdout);
            println!("kubectl accord placements fkt/wide {hub_flag:?}:\n{printed}");
            ensure!(
                out.status.success()
                    && printed.contains("Unavailable: 1: ks-a")
                    && printed.contains("Tainted (accord.io/maintenance:NoExecute): 1: ks-b")
                    && printed.contains("from the object's status") == hub_flag.is_empty(),
                "kubectl accord placements {hub_flag:?}: {printed}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let out = testbed
            .kubectl(testbed.mgmt())
            .env("PATH", &path)
            .args(["accord", "placements", "fkt/absent", "-n", ns])
            .output()
            .await?;
        let said = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.code() == Some(1) && said.contains("not found"),
            "{said}"
        );
        accord_e2e::fleet::patch_managed_cluster(testbed, "ks-b", json!({"spec": {"taints": []}}))
            .await?;
        Ok(())
    });
}
