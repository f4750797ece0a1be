//! The generic placement controller driven one step at a time, on a paused clock (Tokio's:
//! time advances only when every task waits, so the suite takes a fraction of a second and
//! no wait depends on the machine's speed): the store kept in memory
//! (`Store::in_memory`: fenced transactions, watches, leases and locks as etcd keeps them,
//! held to etcd's behaviour by `store_contract.rs`; no testbed needed) and a fake
//! management API server that records every write, with
//! the real CrossClusterScalePolicy and FederatedKafkaTopic plug-ins and a toy kind defined
//! only here ([`toy`]). What is checked is what the controller writes and how often:
//! records in etcd, status patches, Events and finalizers.

mod fake_api;

use std::sync::Arc;
use std::time::Duration;

use accord_common::distribution::PlacedKind;
use accord_common::distribution::{Observed, PlacementState, ScaleObserved};
use accord_hub::connections::Connections;
use accord_hub::controllers::placement::{PlacementKind, Placements, Watched};
use accord_hub::controllers::{
    ClusterObject, ControllerContext, ControllerDeps, ControllerOptions, ReconcileError,
};
use accord_hub::distribution::select::{ClusterIndex, ClusterIndexWriter};
use accord_hub::distribution::{Hold, PlacementRecord};
use accord_hub::http::{Readiness, ReadinessGates};
use accord_hub::kafka_topic::controller::KafkaTopics;
use accord_hub::metrics::Metrics;
use accord_hub::scale::ScaleDecision;
use accord_hub::scale::controller::Scale;
use accord_hub::store::{Keyspace, LeaderElection, PrefixCache, StatusRecord, Store, WriteOutcome};
use fake_api::FakeApi;
use http::Method;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use serde_json::{Value, json};

const POLICIES: &str = "/apis/accord.io/v1beta1/namespaces/default/crossclusterscalepolicies";
const TOPICS: &str = "/apis/accord.io/v1beta1/namespaces/team/federatedkafkatopics";
/// The leader's lease.
const TTL: Duration = Duration::from_secs(2);

/// A store of its own for `test`, in memory.
fn store(test: &str) -> Store {
    Store::in_memory(Keyspace::new(&format!("/placement-test/{test}/")))
}

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
    let store = store(test);
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
        self.cluster_with(name, available, json!({}));
    }

    /// Sets ManagedCluster `name`'s availability and `spec`.
    fn cluster_with(&mut self, name: &str, available: bool, spec: Value) {
        self.cluster_labeled(name, available, spec, json!({}));
    }

    /// Sets ManagedCluster `name`'s availability, `spec` and labels.
    fn cluster_labeled(&mut self, name: &str, available: bool, spec: Value, labels: Value) {
        let mc = ClusterObject::from_value(json!({
            "apiVersion": "accord.io/v1beta1", "kind": "ManagedCluster",
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
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
            PlacedKind::CrossClusterScalePolicy.as_str(),
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
                fitting_replicas: None,
            }),
        };
        let key = self.store.keys().status(
            cluster,
            PlacedKind::CrossClusterScalePolicy.as_str(),
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
                PlacedKind::CrossClusterScalePolicy.as_str(),
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

#[tokio::test(start_paused = true)]
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

#[tokio::test(start_paused = true)]
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

#[tokio::test(start_paused = true)]
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

#[tokio::test(start_paused = true)]
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

#[tokio::test(start_paused = true)]
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

#[tokio::test(start_paused = true)]
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

#[tokio::test(start_paused = true)]
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
        PlacedKind::CrossClusterScalePolicy.as_str(),
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

#[tokio::test(start_paused = true)]
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
            PlacedKind::CrossClusterScalePolicy.as_str(),
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

#[tokio::test(start_paused = true)]
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

/// A kind defined only here, as "Adding a kind" in docs/architecture.md asks of a new one:
/// its CRD, status and decision types, a `PlacementKind` of a few lines, and the
/// framework's capabilities it opts into — an exclusive name (`NameClaims`) and a deletion
/// that waits for the members (`Tombstoned`). Its keys borrow the FederatedResource kind's
/// name (the kinds the protocol names are a closed list) and no FederatedResource
/// controller runs here.
mod toy {
    use std::sync::Arc;
    use std::time::Duration;

    use accord_common::distribution::{AssignmentSpec, FederatedResourceSpec, PlacedKind};
    use accord_crds::{PlacementState, PlacementSummary};
    use accord_hub::controllers::name_claims::NameClaims;
    use accord_hub::controllers::placement::{
        DecideInput, Decided, Note, PlacementKind, Reported, Started, StatusInput, Trigger,
        Watched, object_name,
    };
    use accord_hub::controllers::tombstones::{self, Removal, Tombstoned};
    use accord_hub::controllers::{ControllerContext, ReconcileError};
    use accord_hub::distribution::claim::{self, Claim};
    use accord_hub::distribution::{PlacementRecord, ShareRecord, reported};
    use accord_hub::store::StatusRecord;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use kube::CustomResource;
    use kube::runtime::reflector::Store as Reflector;
    use serde::{Deserialize, Serialize};

    pub const FINALIZER: &str = "toy.accord.io/members";
    pub const PATH: &str = "/apis/toy.accord.io/v1/namespaces/default/toys";

    /// Claims `name` in `clusters`.
    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq)]
    #[kube(
        group = "toy.accord.io",
        version = "v1",
        kind = "Toy",
        namespaced,
        status = "ToyStatus",
        schema = "disabled"
    )]
    pub struct ToySpec {
        pub name: String,
        pub clusters: Vec<String>,
        /// What the members are sent (a new one is a new revision).
        #[serde(default)]
        pub version: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub rollout: Option<accord_crds::rollout::Rollout>,
    }

    #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
    pub struct ToyStatus {
        #[serde(default)]
        pub placements: Vec<ToyPlacement>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub summary: Option<PlacementSummary>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub selection: Option<accord_crds::SelectionSummary>,
        #[serde(default, rename = "traceID", skip_serializing_if = "Option::is_none")]
        pub trace_id: Option<String>,
        #[serde(default)]
        pub conditions: Vec<Condition>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub rollout: Option<accord_crds::rollout::RolloutStatus>,
    }

    #[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
    pub struct ToyPlacement {
        pub cluster: String,
        pub state: PlacementState,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub message: Option<String>,
    }

    accord_crds::placed_status! {
        Toy => ToyStatus, ToyPlacement;
    }

    #[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
    pub struct ToyDecision {
        pub name: String,
        pub remove: bool,
    }

    pub struct Toys {
        ctx: Arc<ControllerContext>,
        objects: Reflector<Watched<Toys>>,
        claims: NameClaims<Toys>,
    }

    fn name_of(toy: &Watched<Toys>) -> String {
        toy.pointer("/spec/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    }

    fn claim_of(toy: &Toy) -> Claim {
        Claim {
            object: object_name(toy),
            created_unix_millis: toy
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_millisecond()),
            name: toy.spec.name.clone(),
            clusters: toy.spec.clusters.clone(),
        }
    }

    /// What a member is sent: the toy's version (in a field of the borrowed spec).
    fn sent(remove: bool, version: &str) -> AssignmentSpec {
        AssignmentSpec::FederatedResource(FederatedResourceSpec {
            remove,
            namespace: version.to_owned(),
            ..FederatedResourceSpec::default()
        })
    }

    /// The version a share sends, if it sends one.
    pub fn version_of(share: &ShareRecord) -> Option<&str> {
        match &share.assignment {
            Some(AssignmentSpec::FederatedResource(spec)) => Some(&spec.namespace),
            _ => None,
        }
    }

    impl PlacementKind for Toys {
        type Object = Toy;
        type Status = ToyStatus;
        type Decision = ToyDecision;
        type Facts = ();
        type Options = ();

        const CONTROLLER: &'static str = "Toy controller";
        const KIND: PlacedKind = PlacedKind::FederatedResource;
        const DECISION_TAG: &'static str = "toy";

        fn start(
            ctx: &Arc<ControllerContext>,
            objects: Reflector<Watched<Self>>,
            _trigger: Trigger<Self>,
            _options: &(),
        ) -> Started<Self> {
            Started {
                kind: Self {
                    ctx: ctx.clone(),
                    objects,
                    claims: NameClaims::new(name_of, FINALIZER),
                },
                tasks: Vec::new(),
                listed: Box::pin(async { true }),
            }
        }

        /// A toy places by its own list of clusters.
        fn placement(_toy: &Toy) -> Option<&accord_crds::ClusterPlacement> {
            None
        }

        fn rollout(toy: &Toy) -> Option<&accord_crds::rollout::Rollout> {
            toy.spec.rollout.as_ref()
        }

        fn rollout_status(
            status: &mut ToyStatus,
        ) -> Option<&mut Option<accord_crds::rollout::RolloutStatus>> {
            Some(&mut status.rollout)
        }

        fn decide(&self, toy: &Toy, input: &DecideInput<'_, ToyDecision>) -> Decided<Self> {
            if toy.spec.name.is_empty() {
                return Decided::Invalid("spec.name: must not be empty".into());
            }
            let others: Vec<Claim> = self
                .claims
                .live(&self.objects, &toy.spec.name, |o| Some(claim_of(o)))
                .into_iter()
                .filter(|c| c.object != object_name(toy))
                .collect();
            let lost = claim::conflicts(&claim_of(toy), &others);
            let shares = toy
                .spec
                .clusters
                .iter()
                .filter(|c| input.clusters.contains_key(*c))
                .map(|c| match lost.get(c) {
                    Some(owner) => ShareRecord {
                        since: None,
                        cluster: c.clone(),
                        assignment: None,
                        held_reason: Some(format!(
                            "Conflict: {} belongs to {owner}",
                            toy.spec.name
                        )),
                        hold: None,
                    },
                    None => ShareRecord {
                        since: None,
                        cluster: c.clone(),
                        assignment: Some(sent(false, &toy.spec.version)),
                        held_reason: None,
                        hold: None,
                    },
                })
                .collect();
            Decided::Record {
                shares,
                decision: ToyDecision {
                    name: toy.spec.name.clone(),
                    remove: false,
                },
                facts: (),
                recheck_after: None,
            }
        }

        async fn status_of(
            &self,
            _toy: &Toy,
            input: StatusInput<'_, Self>,
        ) -> Result<Reported<ToyStatus>, ReconcileError> {
            let placements = input.placed().each(|share, report, cluster| {
                let (state, message) =
                    reported::state(share, input.revision, report, cluster, "agent disconnected");
                ToyPlacement {
                    cluster: share.cluster.clone(),
                    state,
                    message,
                }
            });
            Ok(Reported {
                status: ToyStatus {
                    placements,
                    ..ToyStatus::default()
                },
                notes: Vec::new(),
                retry: None,
            })
        }

        tombstones::tombstoned!();

        fn on_object(&self, toy: &Watched<Self>, gone: bool) {
            let _ = self.claims.observe(toy, gone);
        }
    }

    impl Tombstoned for Toys {
        const FINALIZER: &'static str = FINALIZER;
        const DELETING: Option<&'static str> = Some("removing the toy in every member");

        fn context(&self) -> &ControllerContext {
            &self.ctx
        }

        fn is_tombstone(record: &PlacementRecord<ToyDecision>) -> bool {
            record.decision.remove
        }

        fn tombstone(
            record: &PlacementRecord<ToyDecision>,
        ) -> Option<PlacementRecord<ToyDecision>> {
            accord_hub::distribution::deletion::tombstone(
                record,
                |_: &FederatedResourceSpec| FederatedResourceSpec {
                    remove: true,
                    ..FederatedResourceSpec::default()
                },
                ToyDecision {
                    remove: true,
                    ..record.decision.clone()
                },
            )
        }

        fn is_gone(report: &StatusRecord) -> bool {
            report.state == PlacementState::Synced && report.message == "removed"
        }

        fn deletion_timeout(&self) -> Duration {
            Duration::from_secs(3600)
        }

        fn removal(
            &self,
            _toy: &Watched<Self>,
            tombstone: &PlacementRecord<ToyDecision>,
        ) -> Removal {
            Removal {
                subject: format!("toy {} was", tombstone.decision.name),
                gone: "removed",
                it: "the toy",
                done: Note::normal(
                    "Deleted",
                    format!("toy {} removed in every member", tombstone.decision.name),
                ),
            }
        }
    }
}

/// Stores toy `name` claiming `claimed` in clusters a and b, created at `created`.
fn put_toy(h: &Harness, name: &str, claimed: &str, created: &str) -> String {
    let path = format!("{}/{name}", toy::PATH);
    h.fake.put(
        &path,
        json!({
            "apiVersion": "toy.accord.io/v1", "kind": "Toy",
            "metadata": {"name": name, "namespace": "default", "generation": 1,
                         "uid": format!("uid-{name}"), "resourceVersion": "1",
                         "creationTimestamp": created},
            "spec": {"name": claimed, "clusters": ["a", "b"]}
        }),
    );
    path
}

fn toy_record(h: &Harness, name: &str) -> Option<(PlacementRecord<toy::ToyDecision>, i64)> {
    let key = h
        .store
        .keys()
        .placements(toy::Toys::KIND.as_str(), "default", name);
    let (record, revision) = h.ctx.placements.get(&key)?;
    record.typed(toy::Toys::DECISION_TAG).map(|r| (r, revision))
}

/// Stores cluster `cluster`'s report on toy `name` for `revision`, saying `message`.
async fn toy_report(h: &Harness, cluster: &str, name: &str, revision: i64, message: &str) {
    toy_report_state(h, cluster, name, revision, PlacementState::Synced, message).await;
}

/// [`toy_report`] in `state`.
async fn toy_report_state(
    h: &Harness,
    cluster: &str,
    name: &str,
    revision: i64,
    state: PlacementState,
    message: &str,
) {
    let kind = toy::Toys::KIND.as_str();
    let key = h.store.keys().status(cluster, kind, "default", name);
    let expected = h.ctx.statuses.get(&key).map_or(0, |(_, version)| version);
    let record = StatusRecord {
        resource_version: "1".into(),
        generation: 1,
        applied_revision: revision,
        state,
        message: message.to_owned(),
        api_server_unavailable: false,
        observed_unix_millis: 1,
        observed: Observed::Nothing,
    };
    let outcome = h
        .store
        .write_status(cluster, kind, "default", name, &record, expected, None)
        .await
        .expect("writing a report");
    let WriteOutcome::Accepted { version } = outcome else {
        panic!("report refused: {outcome:?}")
    };
    h.ctx.statuses.wait_for_revision(version).await;
}

#[tokio::test(start_paused = true)]
async fn a_kind_defined_only_in_a_test_gets_decisions_name_claims_and_a_deletion_that_waits() {
    let h = harness("pc-toy").await;
    let (controller, mut objects) = h.controller::<toy::Toys>();
    let see = |objects: &mut Writer<Watched<toy::Toys>>, path: &str| {
        let watched = h.watched::<toy::Toys>(path);
        objects.apply_watcher_event(&watcher::Event::Apply((*watched).clone()));
        controller.observe(&watched, false);
        watched
    };

    // A spec the kind refuses: InvalidSpec, nothing placed.
    let broken = put_toy(&h, "broken", "", "2026-01-01T00:00:00Z");
    let watched = see(&mut objects, &broken);
    controller.reconcile(watched).await.expect("reconciling");
    h.flush().await;
    let patches = h.patches(&format!("{broken}/status"));
    assert_eq!(patches.len(), 1, "{patches:?}");
    assert_eq!(
        patches[0]["status"]["conditions"][0]["reason"],
        "InvalidSpec"
    );
    assert!(toy_record(&h, "broken").is_none());

    // Two toys claim one name: the older keeps it in both clusters, the younger is held.
    let older = put_toy(&h, "older", "shared", "2026-01-01T00:00:00Z");
    let younger = put_toy(&h, "younger", "shared", "2026-01-02T00:00:00Z");
    let (older_w, younger_w) = (see(&mut objects, &older), see(&mut objects, &younger));
    controller.reconcile(older_w).await.expect("reconciling");
    controller.reconcile(younger_w).await.expect("reconciling");
    let (kept, revision) = toy_record(&h, "older").expect("the older toy's record");
    assert!(
        kept.shares.iter().all(|s| s.assignment.is_some()),
        "{kept:?}"
    );
    let (held, _) = toy_record(&h, "younger").expect("the younger toy's record");
    assert!(
        held.shares.iter().all(|s| s.assignment.is_none()
            && s.held_reason
                .as_deref()
                .is_some_and(|r| r.contains("default/older"))),
        "{held:?}"
    );
    assert_eq!(
        h.fake.get(&older).expect("the toy")["metadata"]["finalizers"],
        json!([toy::FINALIZER])
    );

    // The older toy is deleted: the tombstone goes out and the object waits for both
    // members; each reports it removed, and then the finalizer goes with one Event.
    let mut deleting = h.fake.get(&older).expect("the toy");
    deleting["metadata"]["deletionTimestamp"] =
        json!(k8s_openapi::jiff::Timestamp::now().to_string());
    h.fake.put(&older, deleting);
    let watched = see(&mut objects, &older);
    controller.reconcile(watched).await.expect("deleting");
    let (tombstone, tomb_revision) = toy_record(&h, "older").expect("the tombstone");
    assert!(tombstone.decision.remove && tomb_revision > revision);
    assert_eq!(
        h.fake.get(&older).expect("the toy")["metadata"]["finalizers"],
        json!([toy::FINALIZER]),
        "held while the members work"
    );
    toy_report(&h, "a", "older", tomb_revision, "removed").await;
    controller
        .reconcile(see(&mut objects, &older))
        .await
        .expect("deleting");
    assert_eq!(
        h.fake.get(&older).expect("the toy")["metadata"]["finalizers"],
        json!([toy::FINALIZER]),
        "b has not reported"
    );
    // Meanwhile the status shows the tombstone as each member reports it (the kind's own
    // status of it) and Ready=False/Deleting naming the member left.
    h.flush().await;
    let shown = h.patches(&format!("{older}/status"));
    let last = &shown.last().expect("the deleting status")["status"];
    let ready = last["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .expect("Ready");
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("False"), &json!("Deleting"))
    );
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("removing the toy in every member; waiting for b"),
        "{message}"
    );
    assert_eq!(
        last["placements"],
        json!([
            {"cluster": "a", "state": "Synced", "message": "removed"},
            {"cluster": "b", "state": "Pending", "message": accord_hub::distribution::reported::WAITING_FOR_AGENT}
        ])
    );
    toy_report(&h, "b", "older", tomb_revision, "removed").await;
    controller
        .reconcile(see(&mut objects, &older))
        .await
        .expect("deleting");
    let released = h.fake.get(&older).expect("the toy")["metadata"]["finalizers"].clone();
    assert!(
        released.as_array().is_none_or(Vec::is_empty),
        "released: {released}"
    );
    assert!(
        h.event_notes()
            .await
            .iter()
            .any(|n| n == "toy shared removed in every member"),
        "{:?}",
        h.event_notes().await
    );
    assert!(toy_record(&h, "older").is_none(), "its record went");

    // Gone, its claim goes too: the younger toy now gets the name.
    let gone = h.watched::<toy::Toys>(&older);
    objects.apply_watcher_event(&watcher::Event::Delete((*gone).clone()));
    controller.observe(&gone, true);
    controller
        .reconcile(h.watched::<toy::Toys>(&younger))
        .await
        .expect("reconciling");
    let (now, _) = toy_record(&h, "younger").expect("the younger toy's record");
    assert!(now.shares.iter().all(|s| s.assignment.is_some()), "{now:?}");
}

/// Shares of toy `name`: cluster → the hold, or `None` where something was sent.
fn toy_holds(h: &Harness, name: &str) -> Vec<(String, Option<Hold>)> {
    let (record, _) = toy_record(h, name).expect("the toy's record");
    record
        .shares
        .iter()
        .map(|s| {
            (
                s.cluster.clone(),
                s.assignment.is_none().then_some(s.hold).flatten(),
            )
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn taints_and_the_drain_switch_keep_every_kind_out_of_a_cluster_unless_tolerated() {
    let mut h = harness("pc-taints").await;
    let (controller, mut objects) = h.controller::<toy::Toys>();
    let taint = |effect: &str| json!({"taints": [{"key": "maintenance", "effect": effect}]});
    let decide = |h: &Harness, objects: &mut Writer<Watched<toy::Toys>>, path: &str| {
        let watched = h.watched::<toy::Toys>(path);
        objects.apply_watcher_event(&watcher::Event::Apply((*watched).clone()));
        controller.reconcile(watched)
    };
    let a = || ("a".to_owned(), None);

    // A NoSchedule taint keeps a new placement out of b.
    h.cluster_with("b", true, taint("NoSchedule"));
    let first = put_toy(&h, "first", "one", "2026-01-01T00:00:00Z");
    decide(&h, &mut objects, &first).await.expect("reconciling");
    assert_eq!(
        toy_holds(&h, "first"),
        [a(), ("b".to_owned(), Some(Hold::Tainted))]
    );
    let (record, _) = toy_record(&h, "first").expect("the record");
    assert!(
        record.shares[1]
            .held_reason
            .as_deref()
            .is_some_and(|r| r.contains("maintenance:NoSchedule")),
        "{record:?}"
    );

    // Untainted, b gets it; tainted NoSchedule again, b keeps what it holds.
    h.cluster("b", true);
    decide(&h, &mut objects, &first).await.expect("reconciling");
    assert_eq!(toy_holds(&h, "first"), [a(), ("b".to_owned(), None)]);
    h.cluster_with("b", true, taint("NoSchedule"));
    decide(&h, &mut objects, &first).await.expect("reconciling");
    assert_eq!(toy_holds(&h, "first"), [a(), ("b".to_owned(), None)]);

    // NoExecute takes it away, unless the object tolerates it.
    h.cluster_with("b", true, taint("NoExecute"));
    decide(&h, &mut objects, &first).await.expect("reconciling");
    assert_eq!(
        toy_holds(&h, "first"),
        [a(), ("b".to_owned(), Some(Hold::Tainted))]
    );
    let tolerant = put_toy(&h, "tolerant", "two", "2026-01-01T00:00:00Z");
    let mut object = h.fake.get(&tolerant).expect("the toy");
    object["spec"]["placement"] = json!({"tolerations": [
        {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}]});
    h.fake.put(&tolerant, object);
    decide(&h, &mut objects, &tolerant)
        .await
        .expect("reconciling");
    assert_eq!(toy_holds(&h, "tolerant"), [a(), ("b".to_owned(), None)]);

    // A drained cluster gets nothing new; what it holds stays.
    h.cluster_with("a", true, json!({"unschedulable": true}));
    let third = put_toy(&h, "third", "three", "2026-01-01T00:00:00Z");
    decide(&h, &mut objects, &third).await.expect("reconciling");
    assert_eq!(
        toy_holds(&h, "third")[0],
        ("a".to_owned(), Some(Hold::Unschedulable))
    );
    decide(&h, &mut objects, &tolerant)
        .await
        .expect("reconciling");
    assert_eq!(toy_holds(&h, "tolerant"), [a(), ("b".to_owned(), None)]);
}

/// Each cluster's version in toy `name`'s record (`None`: sent nothing), and the record's
/// revision.
fn toy_versions(h: &Harness, name: &str) -> (Vec<(String, Option<String>)>, i64) {
    let (record, revision) = toy_record(h, name).expect("the toy's record");
    let versions = record
        .shares
        .iter()
        .map(|s| (s.cluster.clone(), toy::version_of(s).map(str::to_owned)))
        .collect();
    (versions, revision)
}

#[tokio::test(start_paused = true)]
async fn a_progressive_rollout_goes_group_by_group_pauses_and_takes_a_failure_back() {
    let mut h = harness("pc-rollout").await;
    for (name, ring) in [("a", "0"), ("b", "1"), ("c", "2")] {
        h.cluster_labeled(name, true, json!({}), json!({"ring": ring}));
    }
    let (controller, mut objects) = h.controller::<toy::Toys>();
    let path = format!("{}/web", toy::PATH);
    let put_with = |h: &Harness, generation: i64, version: &str, strategy: &str, paused: bool| {
        h.fake.update(
            &path,
            json!({
                "apiVersion": "toy.accord.io/v1", "kind": "Toy",
                "metadata": {"name": "web", "namespace": "default", "generation": generation,
                             "uid": "uid-web", "resourceVersion": "1",
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"name": "web", "clusters": ["a", "b", "c"], "version": version,
                         "rollout": {"strategy": strategy,
                                     "groups": {"byLabel": "ring"},
                                     "progressDeadline": "50ms", "paused": paused}}
            }),
        );
    };
    let put = |h: &Harness, generation: i64, version: &str, paused: bool| {
        put_with(h, generation, version, "ProgressivePerGroup", paused);
    };
    let reconcile = async |objects: &mut Writer<Watched<toy::Toys>>| {
        let watched = h.watched::<toy::Toys>(&path);
        objects.apply_watcher_event(&watcher::Event::Apply((*watched).clone()));
        controller.observe(&watched, false);
        controller.reconcile(watched).await.expect("reconciling");
    };
    let v = |c: &str, version: Option<&str>| (c.to_owned(), version.map(str::to_owned));
    // Every version a member was ever sent, in order, as watches on the members would see.
    let mut seen: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut record = |h: &Harness| {
        let (versions, revision) = toy_versions(h, "web");
        for (c, version) in &versions {
            if let Some(version) = version {
                let sent = seen.entry(c.clone()).or_default();
                if sent.last() != Some(version) {
                    sent.push(version.clone());
                }
            }
        }
        (versions, revision)
    };

    // A new toy: nothing ran before, so the clusters the rollout has not reached get
    // nothing; ring 0 first, then ring 1 once a is healthy on it, then ring 2.
    put(&h, 1, "v1", false);
    reconcile(&mut objects).await;
    let (versions, revision) = record(&h);
    assert_eq!(versions, [v("a", Some("v1")), v("b", None), v("c", None)]);
    toy_report(&h, "a", "web", revision, "").await;
    reconcile(&mut objects).await;
    let (versions, revision) = record(&h);
    assert_eq!(
        versions,
        [v("a", Some("v1")), v("b", Some("v1")), v("c", None)]
    );
    toy_report(&h, "a", "web", revision, "").await;
    toy_report(&h, "b", "web", revision, "").await;
    reconcile(&mut objects).await;
    let (versions, revision) = record(&h);
    assert_eq!(
        versions,
        [v("a", Some("v1")), v("b", Some("v1")), v("c", Some("v1"))]
    );
    for c in ["a", "b", "c"] {
        toy_report(&h, c, "web", revision, "").await;
    }
    reconcile(&mut objects).await;
    h.flush().await;
    let shown = h.patches(&format!("{path}/status"));
    let last = &shown.last().expect("a status")["status"];
    assert_eq!(last["rollout"]["phase"], "Succeeded", "{last}");
    assert_eq!(last["rollout"]["succeeded"], 3, "{last}");

    // v2, paused: nobody gets it; resumed, ring 0 does and the others keep v1.
    put(&h, 2, "v2", true);
    reconcile(&mut objects).await;
    let (versions, _) = record(&h);
    assert_eq!(
        versions,
        [v("a", Some("v1")), v("b", Some("v1")), v("c", Some("v1"))]
    );
    h.flush().await;
    let shown = h.patches(&format!("{path}/status"));
    assert_eq!(
        shown.last().expect("a status")["status"]["rollout"]["phase"],
        "Paused"
    );
    put(&h, 3, "v2", false);
    reconcile(&mut objects).await;
    let (versions, revision) = record(&h);
    assert_eq!(
        versions,
        [v("a", Some("v2")), v("b", Some("v1")), v("c", Some("v1"))]
    );

    // a fails on v2 and is not healthy by the deadline: it goes back to v1, and no other
    // cluster ever gets v2. (The hub judges deadlines by the wall clock.)
    toy_report_state(
        &h,
        "a",
        "web",
        revision,
        PlacementState::Error,
        "crash loop",
    )
    .await;
    reconcile(&mut objects).await;
    assert_eq!(record(&h).0[0], v("a", Some("v2")), "within the deadline");
    std::thread::sleep(Duration::from_millis(60));
    reconcile(&mut objects).await;
    let (versions, _) = record(&h);
    assert_eq!(
        versions,
        [v("a", Some("v1")), v("b", Some("v1")), v("c", Some("v1"))]
    );
    reconcile(&mut objects).await;
    assert_eq!(record(&h).0, versions, "stopped: nothing more is sent");
    h.flush().await;
    let shown = h.patches(&format!("{path}/status"));
    let last = &shown.last().expect("a status")["status"];
    assert_eq!(last["rollout"]["phase"], "RolledBack", "{last}");
    assert_eq!(last["rollout"]["failedClusters"][0]["cluster"], "a");
    let rolled_back = last["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "RolledBack"))
        .expect("RolledBack");
    assert_eq!(rolled_back["status"], "True");
    let message = rolled_back["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("a (") && message.contains("crash loop"),
        "{message}"
    );
    let notes = h.event_notes().await;
    assert!(notes.iter().any(|n| n.contains("failed on a")), "{notes:?}");
    assert!(notes.iter().any(|n| n.contains("sent to b")), "{notes:?}");
    assert_eq!(
        seen,
        [
            (
                "a".to_owned(),
                vec!["v1".to_owned(), "v2".to_owned(), "v1".to_owned()]
            ),
            ("b".to_owned(), vec!["v1".to_owned()]),
            ("c".to_owned(), vec!["v1".to_owned()]),
        ]
        .into_iter()
        .collect()
    );

    // The progress is in the store, where a replica taking over reads it.
    let key = h
        .store
        .keys()
        .rollout(toy::Toys::KIND.as_str(), "default", "web");
    let (kept, _) = h.ctx.rollouts.get(&key).expect("the rollout's progress");
    assert_eq!(
        kept.progress.phase,
        accord_hub::distribution::rollout::Phase::RolledBack
    );

    // Switched to `All`, v2 goes everywhere at once and the rollout is forgotten; made
    // progressive again with the same v2, it starts afresh from what the clusters run:
    // nobody is taken back to v1.
    put_with(&h, 4, "v2", "All", false);
    reconcile(&mut objects).await;
    let all_v2 = [v("a", Some("v2")), v("b", Some("v2")), v("c", Some("v2"))];
    assert_eq!(toy_versions(&h, "web").0, all_v2);
    assert!(
        h.ctx.rollouts.get(&key).is_none(),
        "the rollout is forgotten"
    );
    put(&h, 5, "v2", false);
    reconcile(&mut objects).await;
    reconcile(&mut objects).await;
    assert_eq!(toy_versions(&h, "web").0, all_v2);
    let (kept, _) = h.ctx.rollouts.get(&key).expect("a rollout of its own");
    assert_eq!(
        kept.progress.phase,
        accord_hub::distribution::rollout::Phase::Progressing
    );
}
