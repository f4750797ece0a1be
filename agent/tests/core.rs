//! The engine's kind-neutral core without an API server: a fake enforcer stands in for a
//! kind (its "cluster" is a map the test holds), a memory store for the ConfigMap, and the
//! test plays the hub. Time is tokio's paused clock, so debounces and backoffs take no
//! real time and waits for something that must not happen are exact.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accord_agent::assignments::Assigned;
use accord_agent::enforce::{Action, ApplyError, Enforcer, EventSink, Judgement, WatchEvent};
use accord_agent::engine::{self, CoreConfig, EngineTask};
use accord_agent::metrics::Metrics;
use accord_agent::persist::{PersistError, SavedState, StateStore};
use accord_agent::report::Report;
use accord_common::distribution::{
    AssignmentSpec, KafkaTopicSpec, Observed, PlacedKind, PlacedRef, PlacementState, ScaleObserved,
    ScaleSpec,
};
use accord_proto::v1::{
    self as pb, AgentMessage, Assignment, Assignments, HubMessage, StatusAck, StatusReport,
    agent_message, hub_message, status_ack,
};
use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, timeout};

/// Longest any wait for something bound to happen may take (virtual time).
const WAIT: Duration = Duration::from_secs(60);
/// How long the tests watch for something that must not happen (virtual time).
const QUIET: Duration = Duration::from_secs(10);
const DEBOUNCE: Duration = Duration::from_millis(100);
const CLUSTER: &str = "member-1";

// ---- the fake kind ---------------------------------------------------------------------

/// An object of the fake kind.
#[derive(Clone, Debug, Default)]
struct Object {
    replicas: i32,
    ready: i32,
    version: u64,
}

/// The fake cluster: objects by name, the applies made, and where watch events go.
#[derive(Default)]
struct World {
    objects: HashMap<String, Object>,
    sink: Option<EventSink>,
    applied: Option<mpsc::UnboundedSender<(String, i32)>>,
    /// How many times the engine told the enforcer what it enforces.
    assigns: usize,
}

type SharedWorld = Arc<Mutex<World>>;

fn world(objects: &[(&str, i32)]) -> (SharedWorld, mpsc::UnboundedReceiver<(String, i32)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let world = World {
        objects: objects
            .iter()
            .map(|(name, replicas)| {
                (
                    (*name).to_owned(),
                    Object {
                        replicas: *replicas,
                        ready: 0,
                        version: 1,
                    },
                )
            })
            .collect(),
        sink: None,
        applied: Some(tx),
        assigns: 0,
    };
    (Arc::new(Mutex::new(world)), rx)
}

/// Changes object `name` as another writer would, and lets its watch tell the engine.
async fn change(world: &SharedWorld, name: &str, edit: impl FnOnce(&mut Object)) {
    let sink = {
        let mut w = world.lock().unwrap();
        let object = w.objects.get_mut(name).expect("no such object");
        edit(object);
        object.version += 1;
        w.sink
            .clone()
            .expect("the enforcer was never assigned anything")
    };
    sink.send(changed(name)).await;
}

fn changed(name: &str) -> WatchEvent {
    WatchEvent::Changed {
        resource: "fakes",
        namespace: String::new(),
        name: name.to_owned(),
    }
}

/// Enforces scale assignments on the fake cluster.
struct FakeEnforcer {
    world: SharedWorld,
    assigned: BTreeMap<PlacedRef, Assigned>,
}

fn scale_of(assigned: &Assigned) -> &ScaleSpec {
    match &*assigned.spec {
        AssignmentSpec::Scale(s) => s,
        other => panic!("the fake enforcer got {other:?}"),
    }
}

impl Enforcer for FakeEnforcer {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn enforces(&self, spec: &AssignmentSpec) -> bool {
        matches!(spec, AssignmentSpec::Scale(_))
    }

    fn assign(&mut self, assigned: &BTreeMap<PlacedRef, Assigned>, events: &EventSink) {
        let mut world = self.world.lock().unwrap();
        world.sink = Some(events.clone());
        world.assigns += 1;
        self.assigned = assigned.clone();
    }

    fn event(&mut self, event: WatchEvent) -> Vec<PlacedRef> {
        let WatchEvent::Changed { name, .. } = event else {
            return Vec::new();
        };
        self.assigned
            .iter()
            .filter(|(_, a)| scale_of(a).name == name)
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn look(
        &self,
        _placed: &PlacedRef,
        assigned: &Assigned,
        _apply_error: Option<&ApplyError>,
    ) -> Option<Judgement> {
        let spec = scale_of(assigned);
        let world = self.world.lock().unwrap();
        let Some(object) = world.objects.get(&spec.name) else {
            return Some(Judgement {
                report: Report::without_object(
                    PlacementState::TargetNotFound,
                    "no such object".into(),
                    assigned.revision,
                ),
                action: Action::Settled,
            });
        };
        let synced = object.replicas == spec.replicas;
        Some(Judgement {
            report: Report {
                state: if synced {
                    PlacementState::Synced
                } else {
                    PlacementState::Pending
                },
                message: String::new(),
                resource_version: object.version.to_string(),
                generation: 0,
                observed: Observed::Scale(ScaleObserved {
                    desired: object.replicas,
                    ready: object.ready,
                    ..Default::default()
                }),
                applied_revision: assigned.revision,
                api_server_unavailable: false,
            },
            action: if synced {
                Action::Settled
            } else {
                Action::Apply {
                    from_version: object.version.to_string(),
                }
            },
        })
    }

    fn apply(
        &self,
        _placed: &PlacedRef,
        assigned: &Assigned,
    ) -> BoxFuture<'static, Result<String, ApplyError>> {
        let world = self.world.clone();
        let spec = scale_of(assigned).clone();
        Box::pin(async move {
            let (sink, version) = {
                let mut w = world.lock().unwrap();
                let object = w.objects.entry(spec.name.clone()).or_default();
                object.replicas = spec.replicas;
                object.version += 1;
                let version = object.version;
                if let Some(applied) = &w.applied {
                    let _ = applied.send((spec.name.clone(), spec.replicas));
                }
                (w.sink.clone(), version)
            };
            if let Some(sink) = sink {
                sink.send(changed(&spec.name)).await;
            }
            Ok(version.to_string())
        })
    }
}

// ---- the memory store ------------------------------------------------------------------

/// A save waiting for the test's verdict: true stores it, false fails it.
type SaveRequest = (String, oneshot::Sender<bool>);

/// Keeps the document in memory; optionally every save waits for the test's verdict.
#[derive(Default)]
struct MemoryStore {
    document: Mutex<Option<String>>,
    gate: Option<mpsc::UnboundedSender<SaveRequest>>,
    saved: Option<mpsc::UnboundedSender<String>>,
}

impl MemoryStore {
    fn holding(document: &str) -> Self {
        Self {
            document: Mutex::new(Some(document.to_owned())),
            ..Self::default()
        }
    }

    fn state(&self) -> SavedState {
        let document = self
            .document
            .lock()
            .unwrap()
            .clone()
            .expect("nothing saved");
        SavedState::decode(&document).expect("undecodable").state
    }
}

impl StateStore for MemoryStore {
    fn load(&self) -> BoxFuture<'_, Result<Option<String>, PersistError>> {
        let document = self.document.lock().unwrap().clone();
        Box::pin(std::future::ready(Ok(document)))
    }

    fn save(&self, document: String) -> BoxFuture<'_, Result<(), PersistError>> {
        Box::pin(async move {
            if let Some(gate) = &self.gate {
                let (verdict, answer) = oneshot::channel();
                let _ = gate.send((document.clone(), verdict));
                if !answer.await.unwrap_or(false) {
                    return Err(PersistError::Store("the test failed this save".into()));
                }
            }
            *self.document.lock().unwrap() = Some(document.clone());
            if let Some(saved) = &self.saved {
                let _ = saved.send(document);
            }
            Ok(())
        })
    }
}

// ---- the hub the test plays ------------------------------------------------------------

fn start(store: Arc<MemoryStore>, world: &SharedWorld) -> EngineTask {
    engine::start_with(
        CoreConfig {
            cluster: CLUSTER.into(),
            report_debounce: DEBOUNCE,
        },
        store,
        vec![Box::new(FakeEnforcer {
            world: world.clone(),
            assigned: BTreeMap::new(),
        })],
        Metrics::new(),
    )
}

struct Hub {
    engine: EngineTask,
    outbox: mpsc::UnboundedReceiver<AgentMessage>,
}

impl Hub {
    async fn connect(engine: EngineTask) -> Self {
        timeout(WAIT, engine.handle().wait_loaded())
            .await
            .expect("the engine did not load");
        let (tx, outbox) = mpsc::unbounded_channel();
        engine.handle().connected(tx).await;
        Self { engine, outbox }
    }

    async fn send(&self, body: hub_message::Body) {
        self.engine
            .handle()
            .hub_message(HubMessage { body: Some(body) })
            .await;
    }

    async fn assign(&self, revision: i64, items: Vec<Assignment>) {
        self.send(hub_message::Body::Assignments(Assignments {
            revision,
            full: true,
            items,
            ..Default::default()
        }))
        .await;
    }

    async fn accept(&self, report: &StatusReport, version: i64) {
        self.send(hub_message::Body::StatusAck(StatusAck {
            placed: report.placed.clone(),
            result: Some(status_ack::Result::Accepted(version)),
            ..Default::default()
        }))
        .await;
    }

    async fn next(&mut self, what: &str) -> agent_message::Body {
        timeout(WAIT, self.outbox.recv())
            .await
            .unwrap_or_else(|_| panic!("nothing from the engine while waiting for {what}"))
            .expect("the engine closed the stream")
            .body
            .expect("an empty message")
    }

    async fn ack(&mut self, revision: i64) {
        loop {
            if let agent_message::Body::Ack(ack) = self.next(&format!("Ack {revision}")).await
                && ack.revision >= revision
            {
                assert_eq!(ack.revision, revision);
                return;
            }
        }
    }

    async fn report(
        &mut self,
        what: &str,
        matches: impl Fn(&StatusReport) -> bool,
    ) -> StatusReport {
        loop {
            if let agent_message::Body::StatusReport(r) = self.next(what).await
                && matches(&r)
            {
                return r;
            }
        }
    }

    /// Everything the engine sends within [`QUIET`].
    async fn quiet(&mut self) -> Vec<agent_message::Body> {
        let mut seen = Vec::new();
        let until = Instant::now() + QUIET;
        while let Ok(Some(message)) = tokio::time::timeout_at(until, self.outbox.recv()).await {
            seen.extend(message.body);
        }
        seen
    }
}

fn placed(name: &str) -> PlacedRef {
    PlacedRef::new(PlacedKind::CrossClusterScalePolicy, "default", name)
}

fn scale(name: &str, revision: i64, replicas: i32) -> Assignment {
    Assignment {
        placed: Some(placed(name).to_proto()),
        revision,
        spec: Some(
            AssignmentSpec::Scale(ScaleSpec::deployment(
                "prod",
                name,
                replicas,
                &format!("req-{replicas}"),
            ))
            .to_proto(),
        ),
        traceparent: String::new(),
    }
}

fn observed(report: &StatusReport) -> Observed {
    Observed::from_proto(report.observed.clone())
}

fn replicas_in(state: &SavedState, name: &str) -> Option<(i64, i32)> {
    state
        .assignments
        .iter()
        .find(|p| p.placed == placed(name))
        .map(|p| match &*p.spec {
            AssignmentSpec::Scale(s) => (p.revision, s.replicas),
            other => panic!("{other:?}"),
        })
}

// ---- the tests -------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn an_ack_goes_out_only_after_the_save_completed_and_waits_through_failed_saves() {
    let (gate, mut saves) = mpsc::unbounded_channel();
    let store = Arc::new(MemoryStore {
        gate: Some(gate),
        ..MemoryStore::default()
    });
    let (world, _applied) = world(&[("web", 3)]);
    let mut hub = Hub::connect(start(store.clone(), &world)).await;

    hub.assign(5, vec![scale("web", 5, 3)]).await;
    let (document, verdict) = timeout(WAIT, saves.recv()).await.unwrap().unwrap();
    assert!(document.contains("\"lastAppliedRevision\":5"), "{document}");
    // The save hangs: reports may go out, an Ack must not.
    let meanwhile = hub.quiet().await;
    assert!(
        !meanwhile
            .iter()
            .any(|m| matches!(m, agent_message::Body::Ack(_))),
        "acked before the save completed: {meanwhile:?}"
    );
    assert!(
        meanwhile
            .iter()
            .any(|m| matches!(m, agent_message::Body::StatusReport(_))),
        "reports do not wait for the save: {meanwhile:?}"
    );

    // The save fails; the retry waits for the test again, and still nothing is acked.
    verdict.send(false).unwrap();
    let (_, verdict) = timeout(WAIT, saves.recv()).await.unwrap().unwrap();
    let meanwhile = hub.quiet().await;
    assert!(
        !meanwhile
            .iter()
            .any(|m| matches!(m, agent_message::Body::Ack(_))),
        "acked after a failed save: {meanwhile:?}"
    );
    assert!(store.document.lock().unwrap().is_none());

    verdict.send(true).unwrap();
    hub.ack(5).await;
    assert_eq!(replicas_in(&store.state(), "web"), Some((5, 3)));
}

#[tokio::test(start_paused = true)]
async fn deltas_queued_together_are_taken_together_and_acked_once_saved() {
    let (saved, mut saves) = mpsc::unbounded_channel();
    let store = Arc::new(MemoryStore {
        saved: Some(saved),
        ..MemoryStore::default()
    });
    let names: Vec<String> = (0..50).map(|i| format!("web-{i}")).collect();
    let objects: Vec<(&str, i32)> = names.iter().map(|n| (n.as_str(), 1)).collect();
    let (world, _applied) = world(&objects);
    let mut hub = Hub::connect(start(store.clone(), &world)).await;
    let assigns_before = world.lock().unwrap().assigns;

    // Fifty deltas, one placed object each, queued before the engine runs again (as a hub sends
    // a thousand placements written at once).
    for (i, name) in names.iter().enumerate() {
        let revision = 10 + i64::try_from(i).unwrap();
        hub.send(hub_message::Body::Assignments(Assignments {
            revision,
            full: false,
            items: vec![scale(name, revision, 2)],
            ..Default::default()
        }))
        .await;
    }
    hub.ack(59).await;
    assert_eq!(
        world.lock().unwrap().assigns - assigns_before,
        1,
        "the enforcer was told once for the fifty deltas"
    );
    let document = timeout(WAIT, saves.recv()).await.unwrap().unwrap();
    assert!(
        document.contains("\"lastAppliedRevision\":59"),
        "{document}"
    );
    assert!(saves.try_recv().is_err(), "saved more than once");
    let state = store.state();
    for (i, name) in names.iter().enumerate() {
        let revision = 10 + i64::try_from(i).unwrap();
        assert_eq!(replicas_in(&state, name), Some((revision, 2)), "{name}");
    }
    // Every placed object is judged and reported.
    let mut unreported: BTreeSet<String> = names.iter().cloned().collect();
    while !unreported.is_empty() {
        let report = hub.report("a report of each policy", |_| true).await;
        if let Some(p) = &report.placed {
            unreported.remove(&p.name);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_message_that_changes_nothing_is_acked_without_a_save() {
    let (gate, mut saves) = mpsc::unbounded_channel();
    let store = Arc::new(MemoryStore {
        gate: Some(gate),
        ..MemoryStore::default()
    });
    let (world, _applied) = world(&[("web", 3)]);
    let mut hub = Hub::connect(start(store, &world)).await;
    hub.assign(5, vec![scale("web", 5, 3)]).await;
    let (_, verdict) = timeout(WAIT, saves.recv()).await.unwrap().unwrap();
    verdict.send(true).unwrap();
    hub.ack(5).await;

    hub.assign(5, vec![scale("web", 5, 3)]).await;
    hub.ack(5).await;
    assert!(saves.try_recv().is_err(), "saved although nothing changed");
}

#[tokio::test(start_paused = true)]
async fn only_a_newer_revision_of_an_assignment_replaces_what_is_held() {
    let store = Arc::new(MemoryStore::default());
    let (world, mut applied) = world(&[("web", 1)]);
    let mut hub = Hub::connect(start(store.clone(), &world)).await;

    hub.assign(5, vec![scale("web", 5, 3)]).await;
    hub.ack(5).await;
    assert_eq!(
        timeout(WAIT, applied.recv()).await.unwrap(),
        Some(("web".into(), 3))
    );

    // An older and then an equal revision of the placed object, in newer messages: both ignored.
    hub.assign(6, vec![scale("web", 4, 9)]).await;
    hub.ack(6).await;
    hub.assign(7, vec![scale("web", 5, 9)]).await;
    hub.ack(7).await;
    let held = store.state();
    assert_eq!(held.last_applied_revision, 7);
    assert_eq!(replicas_in(&held, "web"), Some((5, 3)));

    // A newer revision is taken and enforced.
    hub.assign(8, vec![scale("web", 8, 9)]).await;
    hub.ack(8).await;
    assert_eq!(
        timeout(WAIT, applied.recv()).await.unwrap(),
        Some(("web".into(), 9)),
        "the first apply after 3 sets the newer revision's replicas"
    );
    assert_eq!(replicas_in(&store.state(), "web"), Some((8, 9)));
    assert!(applied.try_recv().is_err(), "no other apply");
}

#[tokio::test(start_paused = true)]
async fn changes_within_the_debounce_coalesce_into_one_report() {
    let store = Arc::new(MemoryStore::default());
    let (world, _applied) = world(&[("web", 2)]);
    let mut hub = Hub::connect(start(store, &world)).await;
    hub.assign(3, vec![scale("web", 3, 2)]).await;
    let first = hub
        .report("the first report", |r| {
            r.state() == pb::PlacementState::Synced
        })
        .await;
    hub.accept(&first, 100).await;
    assert!(
        hub.quiet()
            .await
            .iter()
            .all(|m| !matches!(m, agent_message::Body::StatusReport(_))),
        "nothing changed, nothing to report"
    );

    let changed_at = Instant::now();
    change(&world, "web", |o| o.ready = 1).await;
    change(&world, "web", |o| o.ready = 2).await;
    let report = hub.report("the coalesced report", |_| true).await;
    assert!(
        changed_at.elapsed() >= DEBOUNCE,
        "sent {:?} after the change, before the debounce",
        changed_at.elapsed()
    );
    assert_eq!(observed(&report).scale().map(|r| r.ready), Some(2));
    assert_eq!(report.expected_version, 100);
    hub.accept(&report, 101).await;
    let after = hub.quiet().await;
    assert!(
        after.is_empty(),
        "the first change was reported on its own: {after:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn saved_assignments_are_enforced_by_a_restarted_engine_without_a_hub() {
    let store = Arc::new(MemoryStore::default());
    let (world, mut applied) = world(&[("web", 1)]);
    {
        let mut hub = Hub::connect(start(store.clone(), &world)).await;
        hub.assign(9, vec![scale("web", 9, 4)]).await;
        hub.ack(9).await;
        assert_eq!(
            timeout(WAIT, applied.recv()).await.unwrap(),
            Some(("web".into(), 4))
        );
        hub.engine.stop().await;
    }
    // While no agent runs, someone scales by hand.
    world
        .lock()
        .unwrap()
        .objects
        .get_mut("web")
        .unwrap()
        .replicas = 1;

    let engine = start(store.clone(), &world);
    timeout(WAIT, engine.handle().wait_loaded()).await.unwrap();
    assert_eq!(engine.handle().last_applied_revision(), 9);
    assert_eq!(
        timeout(WAIT, applied.recv()).await.unwrap(),
        Some(("web".into(), 4)),
        "the saved assignment is enforced again"
    );
    assert_eq!(replicas_in(&store.state(), "web"), Some((9, 4)));
}

#[tokio::test(start_paused = true)]
async fn a_document_in_the_first_format_is_enforced_and_saved_again_in_the_current_one() {
    let legacy = r#"{"cluster":"member-1","lastAppliedRevision":9,"policies":[
        {"policy":{"kind":"CrossClusterScalePolicy","namespace":"default","name":"web"},
         "revision":8,
         "scale":{"apiVersion":"apps/v1","kind":"Deployment","namespace":"prod","name":"web",
                  "replicas":7,"scaleRequestId":"01J"}}]}"#;
    let (saved_tx, mut saved) = mpsc::unbounded_channel();
    let store = Arc::new(MemoryStore {
        saved: Some(saved_tx),
        ..MemoryStore::holding(legacy)
    });
    let (world, mut applied) = world(&[("web", 1)]);
    let engine = start(store.clone(), &world);
    timeout(WAIT, engine.handle().wait_loaded()).await.unwrap();
    assert_eq!(engine.handle().last_applied_revision(), 9);
    assert_eq!(
        timeout(WAIT, applied.recv()).await.unwrap(),
        Some(("web".into(), 7))
    );
    let document = timeout(WAIT, saved.recv()).await.unwrap().unwrap();
    let value: serde_json::Value = serde_json::from_str(&document).unwrap();
    assert_eq!(value["version"], 2, "{document}");
    assert_eq!(
        value["policies"][0]["spec"]["scale"]["replicas"], 7,
        "{document}"
    );
    assert_eq!(value["policies"][0]["revision"], 8, "{document}");
    assert_eq!(value["lastAppliedRevision"], 9, "{document}");
}

#[tokio::test(start_paused = true)]
async fn an_unreadable_document_is_ignored_and_the_hub_resends() {
    let store = Arc::new(MemoryStore::holding(r#"{"version":99,"policies":"?"}"#));
    let (world, mut applied) = world(&[("web", 1)]);
    let mut hub = Hub::connect(start(store.clone(), &world)).await;
    assert_eq!(hub.engine.handle().last_applied_revision(), 0);
    hub.assign(4, vec![scale("web", 4, 2)]).await;
    hub.ack(4).await;
    assert_eq!(
        timeout(WAIT, applied.recv()).await.unwrap(),
        Some(("web".into(), 2))
    );
    assert_eq!(replicas_in(&store.state(), "web"), Some((4, 2)));
}

#[tokio::test(start_paused = true)]
async fn an_assignment_of_a_kind_without_an_enforcer_is_held_acked_and_reported_as_an_error() {
    let store = Arc::new(MemoryStore::default());
    let (world, _applied) = world(&[]);
    let mut hub = Hub::connect(start(store.clone(), &world)).await;
    let topic = PlacedRef::new(PlacedKind::FederatedKafkaTopic, "default", "events");
    hub.assign(
        6,
        vec![Assignment {
            placed: Some(topic.to_proto()),
            revision: 6,
            spec: Some(
                AssignmentSpec::KafkaTopic(KafkaTopicSpec {
                    topic_name: "events".into(),
                    partitions: 3,
                    replication_factor: 1,
                    config: Default::default(),
                    ..Default::default()
                })
                .to_proto(),
            ),
            traceparent: String::new(),
        }],
    )
    .await;
    hub.ack(6).await;
    let report = hub.report("the error report", |_| true).await;
    assert_eq!(report.placed, Some(topic.to_proto()));
    assert_eq!(report.state(), pb::PlacementState::Error);
    assert!(
        report
            .message
            .contains("does not enforce FederatedKafkaTopic assignments"),
        "{}",
        report.message
    );
    assert_eq!(report.applied_revision, 6);
    assert_eq!(observed(&report), Observed::Nothing);
    let held = store.state();
    assert_eq!(held.assignments.len(), 1);
    assert_eq!(held.assignments[0].placed, topic);
}

// ---- store epochs and member health ----------------------------------------------------

async fn assign_in_epoch(
    hub: &Hub,
    store_epoch: u64,
    revision: i64,
    full: bool,
    items: Vec<Assignment>,
) {
    hub.send(hub_message::Body::Assignments(Assignments {
        revision,
        full,
        items,
        store_epoch,
        ..Default::default()
    }))
    .await;
}

#[tokio::test(start_paused = true)]
async fn after_a_store_restore_lower_revisions_of_the_new_epoch_are_applied_and_survive_a_restart()
{
    let store = Arc::new(MemoryStore::default());
    let (world, mut applied) = world(&[("web", 1), ("api", 1)]);
    {
        let mut hub = Hub::connect(start(store.clone(), &world)).await;
        assign_in_epoch(
            &hub,
            7,
            120,
            true,
            vec![scale("web", 110, 4), scale("api", 120, 2)],
        )
        .await;
        hub.ack(120).await;
        // Without a new epoch, an older revision changes nothing.
        assign_in_epoch(&hub, 7, 121, false, vec![scale("web", 60, 9)]).await;
        hub.ack(121).await;
        assert_eq!(replicas_in(&store.state(), "web"), Some((110, 4)));
        assert_eq!(hub.engine.handle().store_epoch(), 7);

        // The hub's store was restored to an earlier snapshot: revisions went backwards,
        // and the hub says so with a new epoch and the full set.
        assign_in_epoch(&hub, 8, 70, true, vec![scale("web", 60, 9)]).await;
        hub.ack(70).await;
        let state = store.state();
        assert_eq!(replicas_in(&state, "web"), Some((60, 9)));
        assert_eq!(
            replicas_in(&state, "api"),
            None,
            "not in the new epoch's full set"
        );
        assert_eq!(hub.engine.handle().last_applied_revision(), 70);
        assert_eq!(hub.engine.handle().store_epoch(), 8);
        // The new epoch's deltas are taken at their own, lower, revisions.
        assign_in_epoch(&hub, 8, 71, false, vec![scale("web", 71, 5)]).await;
        hub.ack(71).await;
        let mut last = None;
        while let Ok(Some(a)) = timeout(QUIET, applied.recv()).await {
            last = Some(a);
        }
        assert_eq!(last, Some(("web".into(), 5)));
        hub.engine.stop().await;
    }
    // The epoch is saved with the assignments: a restarted engine says it in Hello.
    let engine = start(store.clone(), &world);
    timeout(WAIT, engine.handle().wait_loaded()).await.unwrap();
    assert_eq!(engine.handle().store_epoch(), 8);
    assert_eq!(engine.handle().last_applied_revision(), 71);
    assert_eq!(replicas_in(&store.state(), "web"), Some((71, 5)));
}

#[tokio::test(start_paused = true)]
async fn a_removal_older_than_the_held_assignment_is_ignored() {
    let store = Arc::new(MemoryStore::default());
    let (world, _applied) = world(&[("web", 1)]);
    let mut hub = Hub::connect(start(store.clone(), &world)).await;
    hub.assign(10, vec![scale("web", 10, 4)]).await;
    hub.ack(10).await;
    let removal = |revision| {
        hub_message::Body::Assignments(Assignments {
            revision: 12,
            full: false,
            removed: vec![pb::Removal {
                placed: Some(placed("web").to_proto()),
                revision,
            }],
            ..Default::default()
        })
    };
    // Delivered late: the assignment ended at 9, before the one held was made.
    hub.send(removal(9)).await;
    hub.ack(12).await;
    assert_eq!(replicas_in(&store.state(), "web"), Some((10, 4)));
    hub.send(removal(11)).await;
    // Acknowledged only once the book without it is saved.
    hub.ack(12).await;
    assert_eq!(replicas_in(&store.state(), "web"), None);
}

#[tokio::test(start_paused = true)]
async fn an_unavailable_api_server_is_told_to_the_hub_and_explains_placements_not_synced() {
    let store = Arc::new(MemoryStore::default());
    let (world, _applied) = world(&[("web", 1)]);
    let mut hub = Hub::connect(start(store.clone(), &world)).await;
    let down = pb::MemberHealth {
        api_server_available: false,
        message: "GET /readyz did not answer within 2s".into(),
        since_unix_millis: 1_000,
    };
    hub.engine.handle().health_changed(down.clone()).await;
    loop {
        if let agent_message::Body::MemberHealth(h) = hub.next("MemberHealth").await {
            assert_eq!(h, down);
            break;
        }
    }
    assert_eq!(hub.engine.handle().member_health(), Some(down.clone()));
    // The same result again is no change: nothing is sent.
    hub.engine.handle().health_changed(down.clone()).await;
    // An assignment that cannot be confirmed (its object is not in the enforcer's view,
    // which nothing refreshes while the server is down): its report says why.
    hub.assign(5, vec![scale("gone", 5, 3)]).await;
    let report = hub
        .report("an Unavailable report", |r| {
            r.applied_revision == 5 && r.state != pb::PlacementState::Pending as i32
        })
        .await;
    assert_eq!(report.state, pb::PlacementState::Unavailable as i32);
    assert!(report.api_server_unavailable, "{report:?}");
    assert!(
        report.message.starts_with(engine::API_SERVER_UNAVAILABLE)
            && report.message.contains("did not answer within 2s"),
        "{}",
        report.message
    );
    hub.accept(&report, 10).await;
    assert!(
        !hub.quiet()
            .await
            .iter()
            .any(|m| matches!(m, agent_message::Body::MemberHealth(_))),
        "an unchanged health is not sent again"
    );
    // Back: the hub hears it and the placement reports what it sees again.
    let up = pb::MemberHealth {
        api_server_available: true,
        message: String::new(),
        since_unix_millis: 9_000,
    };
    hub.engine.handle().health_changed(up.clone()).await;
    let mut told = false;
    loop {
        match hub.next("MemberHealth and a fresh report").await {
            agent_message::Body::MemberHealth(h) => {
                assert_eq!(h, up);
                told = true;
            }
            agent_message::Body::StatusReport(r)
                if r.state != pb::PlacementState::Unavailable as i32 =>
            {
                assert!(told, "health goes out before the reports it changes");
                assert!(!r.api_server_unavailable, "{r:?}");
                assert!(
                    !r.message.starts_with(engine::API_SERVER_UNAVAILABLE),
                    "{}",
                    r.message
                );
                break;
            }
            _ => {}
        }
    }
}
