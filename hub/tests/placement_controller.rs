//! The generic placement controller driven one step at a time: a real etcd (the store,
//! the fence, the locks) and a fake management API server that records every write, with
//! the real CrossClusterScalePolicy and FederatedKafkaTopic plug-ins. What is checked is
//! what the controller writes and how often: records in etcd, status patches, Events and
//! finalizers.

mod fake_api;
mod store_support;

use std::sync::Arc;
use std::time::Duration;

use accord_common::distribution::PolicyKind;
use accord_common::distribution::{Observed, PlacementState, ScaleObserved};
use accord_hub::connections::Connections;
use accord_hub::controllers::placement::{PlacementKind, Placements, Watched};
use accord_hub::controllers::{
    ClusterObject, ControllerContext, ControllerDeps, ControllerOptions, ReconcileError,
};
use accord_hub::distribution::PlacementRecord;
use accord_hub::distribution::select::{ClusterIndex, ClusterIndexWriter};
use accord_hub::http::{Readiness, ReadinessGates};
use accord_hub::kafka_topic::controller::KafkaTopics;
use accord_hub::metrics::Metrics;
use accord_hub::scale::ScaleDecision;
use accord_hub::scale::controller::Scale;
use accord_hub::store::{LeaderElection, PrefixCache, StatusRecord, Store, WriteOutcome};
use fake_api::FakeApi;
use http::Method;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use serde_json::{Value, json};
use store_support::{TTL, store};

const POLICIES: &str = "/apis/accord.io/v1beta1/namespaces/default/crossclusterscalepolicies";
const TOPICS: &str = "/apis/accord.io/v1beta1/namespaces/team/federatedkafkatopics";

/// One leading hub's context against the fake API, and the ManagedClusters it sees.
struct Harness {
    fake: FakeApi,
    store: Store,
    election: Arc<LeaderElection>,
    ctx: Arc<ControllerContext>,
    clusters: Writer<ClusterObject>,
    index: ClusterIndexWriter,
}

/// A harness whose progress (members still working) is written after a second, so tests
/// that flush do not wait the default interval.
async fn harness(test: &str) -> Harness {
    let options = ControllerOptions {
        status_progress_interval: Duration::from_secs(1),
        ..ControllerOptions::default()
    };
    harness_with(test, options).await
}

async fn harness_with(test: &str, options: ControllerOptions) -> Harness {
    let store = store(test).await;
    let election = Arc::new(
        LeaderElection::start(store.clone(), "hub-a".into(), TTL)
            .await
            .expect("campaigning"),
    );
    election.wait_for_leadership().await;
    let placements = PrefixCache::start(store.clone(), store.keys().placements_prefix())
        .await
        .expect("following placements");
    let fake = FakeApi::default();
    let deps = ControllerDeps {
        kube: fake.client(),
        store: store.clone(),
        election: election.clone(),
        connections: Connections::default(),
        metrics: Metrics::new(),
        placements,
        replica: "hub-a".into(),
        gates: ReadinessGates::new(Readiness::default()),
        namespace: "accord-system".into(),
        views: Default::default(),
        secrets: accord_hub::distribution::secrets::Secrets::none(),
        kinds: accord_hub::kinds::registered(&Default::default()),
    };
    let (reader, clusters) = reflector::store::<ClusterObject>();
    let cluster_index = ClusterIndex::default();
    let index = cluster_index.writer();
    let ctx = ControllerContext::start(&deps, &options, reader, cluster_index)
        .await
        .expect("the controllers' context");
    let mut h = Harness {
        fake,
        store,
        election,
        ctx: Arc::new(ctx),
        clusters,
        index,
    };
    h.cluster("a", true);
    h.cluster("b", true);
    h
}

impl Harness {
    /// Sets ManagedCluster `name`'s availability.
    fn cluster(&mut self, name: &str, available: bool) {
        let mc = ClusterObject::from_value(json!({
            "apiVersion": "accord.io/v1beta1", "kind": "ManagedCluster",
            "metadata": {"name": name},
            "spec": {},
            "status": {"conditions": [{
                "type": "Available", "status": if available { "True" } else { "False" },
                "reason": "Test", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"
            }]}
        }))
        .expect("a ManagedCluster");
        // As the hub's watch does: the index first, then the reflector.
        let event = watcher::Event::Apply(mc);
        self.index.apply(&event);
        self.clusters.apply_watcher_event(&event);
    }

    /// The controller of kind `K` and its objects' reflector writer.
    fn controller<K: PlacementKind>(&self) -> (Placements<K>, Writer<Watched<K>>)
    where
        K::Options: Default,
    {
        let (objects, writer) = reflector::store::<Watched<K>>();
        let (trigger, _) = tokio::sync::mpsc::unbounded_channel();
        let started = K::start(&self.ctx, objects.clone(), trigger, &K::Options::default());
        (
            Placements::new(self.ctx.clone(), started.kind, objects),
            writer,
        )
    }

    /// The object at `path` as the fake API server holds it now, as watched.
    fn watched<K: PlacementKind>(&self, path: &str) -> Arc<Watched<K>> {
        let value = self.fake.get(path).expect("the object is stored");
        Arc::new(Watched::<K>::from_value(value).expect("a watched object"))
    }

    /// Waits for every pending status write and Event.
    async fn flush(&self) {
        tokio::time::timeout(Duration::from_secs(10), async {
            self.ctx.writes.status.flush().await;
            self.ctx.writes.events.flush().await;
        })
        .await
        .expect("status writes and Events done within 10 s");
    }

    fn patches(&self, path: &str) -> Vec<Value> {
        self.fake
            .requests(Method::PATCH)
            .into_iter()
            .filter(|r| r.path == path)
            .map(|r| r.body)
            .collect()
    }

    /// The notes of the Events created so far, once the ones published are written.
    async fn event_notes(&self) -> Vec<String> {
        self.ctx.writes.events.flush().await;
        self.fake
            .requests(Method::POST)
            .into_iter()
            .filter(|r| r.path.ends_with("/events"))
            .map(|r| r.body["note"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    fn scale_record(&self, name: &str) -> Option<(PlacementRecord<ScaleDecision>, i64)> {
        let key = self.store.keys().placements(
            PolicyKind::CrossClusterScalePolicy.as_str(),
            "default",
            name,
        );
        let (record, revision) = self.ctx.placements.get(&key)?;
        record.typed(Scale::DECISION_TAG).map(|r| (r, revision))
    }

    /// Stores cluster `cluster`'s report on policy `name` and waits until the cache has it.
    async fn report(&self, cluster: &str, name: &str, revision: i64, ready: i32) {
        let record = StatusRecord {
            resource_version: "1".into(),
            generation: 1,
            applied_revision: revision,
            state: PlacementState::Synced,
            message: String::new(),
            api_server_unavailable: false,
            observed_unix_millis: 1,
            observed: Observed::Scale(ScaleObserved {
                desired: ready,
                ready,
                updated: ready,
                observed_generation: 1,
                scale_request_id: String::new(),
            }),
        };
        let key = self.store.keys().status(
            cluster,
            PolicyKind::CrossClusterScalePolicy.as_str(),
            "default",
            name,
        );
        let expected = self
            .ctx
            .statuses
            .get(&key)
            .map_or(0, |(_, version)| version);
        let outcome = self
            .store
            .write_status(
                cluster,
                PolicyKind::CrossClusterScalePolicy.as_str(),
                "default",
                name,
                &record,
                expected,
                None,
            )
            .await
            .expect("writing a report");
        let WriteOutcome::Accepted { version } = outcome else {
            panic!("report refused: {outcome:?}")
        };
        self.ctx.statuses.wait_for_revision(version).await;
    }
}

fn policy(name: &str, desired: Value) -> Value {
    json!({
        "apiVersion": "accord.io/v1beta1", "kind": "CrossClusterScalePolicy",
        "metadata": {"name": name, "namespace": "default", "generation": 1, "uid": format!("uid-{name}")},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "frontend"},
            "desiredReplicas": desired,
            "distribution": [{"cluster": "a", "weight": 60}, {"cluster": "b", "weight": 40}]
        }
    })
}

/// Stores a scale policy in the fake and returns its path.
fn put_policy(h: &Harness, name: &str, desired: Value) -> String {
    let path = format!("{POLICIES}/{name}");
    h.fake.put(&path, policy(name, desired));
    path
}

fn replicas(record: &PlacementRecord<ScaleDecision>) -> Vec<i32> {
    record
        .shares
        .iter()
        .map(|s| accord_hub::scale::plan::scale_spec(s).map_or(-1, |s| s.replicas))
        .collect()
}

#[tokio::test]
async fn an_object_that_does_not_decode_says_so_once_in_its_status_and_one_event() {
    let h = harness("pc-undecodable").await;
    let (controller, _) = h.controller::<Scale>();
    let path = put_policy(&h, "broken", json!("many"));
    controller
        .reconcile(h.watched::<Scale>(&path))
        .await
        .expect("an undecodable object is not an error");
    h.flush().await;
    let patches = h.patches(&format!("{path}/status"));
    assert_eq!(patches.len(), 1, "one status write: {patches:?}");
    let ready = &patches[0]["status"]["conditions"][0];
    assert_eq!(
        (&ready["type"], &ready["reason"]),
        (&json!("Ready"), &json!("InvalidSpec"))
    );
    assert_eq!(h.event_notes().await.len(), 1, "one Event");
    assert!(h.scale_record("broken").is_none(), "nothing placed");

    // Seen again with the status it now has: nothing more to write or say.
    controller
        .reconcile(h.watched::<Scale>(&path))
        .await
        .expect("reconciling again");
    h.flush().await;
    assert_eq!(
        h.patches(&format!("{path}/status")).len(),
        1,
        "no second write"
    );
    assert_eq!(h.event_notes().await.len(), 1, "no second Event");
}

#[tokio::test]
async fn a_decision_is_written_once_announced_once_and_an_unchanged_status_costs_nothing() {
    let h = harness("pc-once").await;
    let (controller, _) = h.controller::<Scale>();
    let path = put_policy(&h, "web", json!(12));
    controller
        .reconcile(h.watched::<Scale>(&path))
        .await
        .expect("reconciling");
    h.flush().await;
    let (record, revision) = h.scale_record("web").expect("a record");
    assert_eq!(replicas(&record), [7, 5]);
    assert_eq!(h.patches(&format!("{path}/status")).len(), 1);
    let notes = h.event_notes().await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains(&record.decision.scale_request_id),
        "{notes:?}"
    );

    // The same world again, the object showing the status written: nothing is written.
    controller
        .reconcile(h.watched::<Scale>(&path))
        .await
        .expect("reconciling again");
    h.flush().await;
    assert_eq!(
        h.scale_record("web").map(|(_, r)| r),
        Some(revision),
        "record untouched"
    );
    assert_eq!(
        h.patches(&format!("{path}/status")).len(),
        1,
        "status untouched"
    );
    assert_eq!(h.event_notes().await.len(), 1, "no new Event");
}

#[tokio::test]
async fn a_selection_change_is_a_new_decision_with_an_event_of_its_own() {
    let mut h = harness("pc-selection").await;
    let (controller, _) = h.controller::<Scale>();
    let path = put_policy(&h, "web", json!(12));
    controller
        .reconcile(h.watched::<Scale>(&path))
        .await
        .expect("reconciling");
    let (first, _) = h.scale_record("web").expect("a record");
    h.cluster("b", false);
    controller
        .reconcile(h.watched::<Scale>(&path))
        .await
        .expect("reconciling after b went away");
    let (second, _) = h.scale_record("web").expect("a record");
    assert_eq!(replicas(&second)[0], 12, "a takes the whole count");
    assert_ne!(
        first.decision.scale_request_id,
        second.decision.scale_request_id
    );
    let notes = h.event_notes().await;
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[0].contains(&first.decision.scale_request_id));
    assert!(
        notes[1].contains(&second.decision.scale_request_id),
        "{notes:?}"
    );
}

#[tokio::test]
async fn many_reports_within_the_window_make_one_status_write() {
    let h = harness("pc-coalesce").await;
    let (controller, _) = h.controller::<Scale>();
    let path = put_policy(&h, "web", json!(12));
    controller
        .reconcile(h.watched::<Scale>(&path))
        .await
        .expect("reconciling");
    h.flush().await;
    let before = h.patches(&format!("{path}/status")).len();
    let (_, revision) = h.scale_record("web").expect("a record");
    // Each member reports (twice: first ready, then all ready), and each report wakes a
    // reconcile; all of it within one window.
    for (cluster, ready) in [("a", 3), ("b", 2), ("a", 7), ("b", 5)] {
        h.report(cluster, "web", revision, ready).await;
        controller
            .reconcile(h.watched::<Scale>(&path))
            .await
            .expect("reconciling on a report");
    }
    h.flush().await;
    let after = h.patches(&format!("{path}/status"));
    assert_eq!(after.len() - before, 1, "one write for four reports");
    let stored = h.fake.get(&path).expect("the policy");
    assert_eq!(
        stored["status"]["readyReplicas"], 12,
        "the last reports are what is written"
    );
}

#[tokio::test]
async fn progress_waits_for_the_outcome_and_a_replaced_decision_does_not() {
    // A progress interval no test run reaches: only an outcome or a replaced decision can
    // end the wait.
    let options = ControllerOptions {
        status_progress_interval: Duration::from_secs(600),
        ..ControllerOptions::default()
    };
    let h = harness_with("pc-progress", options).await;
    let (controller, _) = h.controller::<Scale>();
    let path = put_policy(&h, "web", json!(12));
    let status = format!("{path}/status");
    let reconcile = || async {
        controller
            .reconcile(h.watched::<Scale>(&path))
            .await
            .expect("reconciling")
    };
    let held = || async {
        tokio::time::timeout(Duration::from_secs(1), h.ctx.writes.status.flush())
            .await
            .is_err()
    };
    // The first decision, then one member's report: members still working, held.
    reconcile().await;
    let (_, revision) = h.scale_record("web").expect("a record");
    assert!(held().await, "the first decision waits for its members");
    h.report("a", "web", revision, 7).await;
    reconcile().await;
    assert!(held().await, "progress is not written within the window");
    assert!(h.patches(&status).is_empty());

    // The last member reports: the outcome is written at once, in one write.
    h.report("b", "web", revision, 5).await;
    reconcile().await;
    h.flush().await;
    assert_eq!(
        h.patches(&status).len(),
        1,
        "one write for the whole rollout"
    );
    let stored = h.fake.get(&path).expect("the policy");
    assert_eq!(stored["status"]["readyReplicas"], 12);

    // A new decision replaces the one shown: written at once, though nobody reported yet.
    put_policy(&h, "web", json!(20));
    reconcile().await;
    h.flush().await;
    assert_eq!(h.patches(&status).len(), 2);
    let stored = h.fake.get(&path).expect("the policy");
    assert_eq!(stored["status"]["desiredReplicas"], 20);
}

#[tokio::test]
async fn a_replica_that_no_longer_leads_writes_no_record() {
    let h = harness("pc-fenced").await;
    let (controller, _) = h.controller::<Scale>();
    let path = put_policy(&h, "web", json!(12));
    h.election.resign().await;
    let result = controller.reconcile(h.watched::<Scale>(&path)).await;
    assert!(
        matches!(
            result,
            Err(ReconcileError::NotLeader | ReconcileError::Store(_))
        ),
        "{result:?}"
    );
    assert!(h.scale_record("web").is_none(), "nothing written");
    assert!(h.event_notes().await.is_empty(), "nothing announced");
}

#[tokio::test]
async fn a_deleted_object_holding_an_old_finalizer_loses_its_records_then_the_finalizer() {
    let h = harness("pc-legacy-finalizer").await;
    let (controller, _) = h.controller::<Scale>();
    let path = put_policy(&h, "web", json!(12));
    controller
        .reconcile(h.watched::<Scale>(&path))
        .await
        .expect("reconciling");
    assert!(h.scale_record("web").is_some());
    assert!(
        h.patches(&path).is_empty(),
        "a scale policy gets no finalizer"
    );
    let mut deleting = h.fake.get(&path).expect("the policy");
    deleting["metadata"]["finalizers"] = json!(["other.io/keep", "accord.io/placements"]);
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    h.fake.put(&path, deleting);
    controller
        .reconcile(h.watched::<Scale>(&path))
        .await
        .expect("deleting");
    h.ctx
        .placements
        .wait_for_revision(h.ctx.placements.revision())
        .await;
    let key = h.store.keys().placements(
        PolicyKind::CrossClusterScalePolicy.as_str(),
        "default",
        "web",
    );
    assert!(
        h.store
            .get_json::<Value>(&key)
            .await
            .expect("reading etcd")
            .is_none(),
        "the record went"
    );
    assert_eq!(
        h.fake.get(&path).expect("the policy")["metadata"]["finalizers"],
        json!(["other.io/keep"]),
        "only the hub's finalizer was removed"
    );
}

#[tokio::test]
async fn records_of_objects_that_are_gone_are_swept() {
    let h = harness("pc-sweep").await;
    let (controller, mut objects) = h.controller::<Scale>();
    for name in ["kept", "gone"] {
        let path = put_policy(&h, name, json!(4));
        let watched = h.watched::<Scale>(&path);
        objects.apply_watcher_event(&watcher::Event::Apply((*watched).clone()));
        controller.reconcile(watched).await.expect("reconciling");
    }
    let gone = h.watched::<Scale>(&format!("{POLICIES}/gone"));
    objects.apply_watcher_event(&watcher::Event::Delete((*gone).clone()));
    controller.sweep().await;
    let key = |name| {
        h.store.keys().placements(
            PolicyKind::CrossClusterScalePolicy.as_str(),
            "default",
            name,
        )
    };
    assert!(
        h.store
            .get_json::<Value>(&key("gone"))
            .await
            .expect("etcd")
            .is_none()
    );
    assert!(
        h.store
            .get_json::<Value>(&key("kept"))
            .await
            .expect("etcd")
            .is_some()
    );
}

#[tokio::test]
async fn only_a_topic_whose_deletion_deletes_in_the_members_gets_a_finalizer() {
    let h = harness("pc-topic-finalizer").await;
    let (controller, _) = h.controller::<KafkaTopics>();
    for (name, policy) in [("kept", "Retain"), ("deleted", "Delete")] {
        let path = format!("{TOPICS}/{name}");
        h.fake.put(
            &path,
            json!({
                "apiVersion": "accord.io/v1beta1", "kind": "FederatedKafkaTopic",
                "metadata": {"name": name, "namespace": "team", "generation": 1,
                             "resourceVersion": "1"},
                "spec": {"partitions": 3, "replicationFactor": 1, "placement": {"clusters": ["a", "b"]},
                         "deletionPolicy": policy}
            }),
        );
        controller
            .reconcile(h.watched::<KafkaTopics>(&path))
            .await
            .expect("reconciling");
    }
    h.flush().await;
    assert!(
        h.patches(&format!("{TOPICS}/kept")).is_empty(),
        "Retain: no finalizer"
    );
    assert_eq!(
        h.fake.get(&format!("{TOPICS}/deleted")).expect("the topic")["metadata"]["finalizers"],
        json!(["accord.io/kafka-topic"])
    );
    // One Applied Event per topic, one status write each.
    assert_eq!(
        h.event_notes().await.len(),
        2,
        "{:?}",
        h.event_notes().await
    );
    for name in ["kept", "deleted"] {
        assert_eq!(
            h.patches(&format!("{TOPICS}/{name}/status")).len(),
            1,
            "{name}"
        );
    }
}
