//! The engine: one task that owns the assignments, has its [enforcers](crate::enforce) make
//! the member cluster match them, and decides what to report to the hub. Kind-neutral: what
//! an assignment asks for is the enforcers' business.
//!
//! Everything reaches it as an [`Input`] on one channel — hub messages, stream
//! connects/disconnects, watch events, finished applies, finished saves — so its state
//! needs no locks. Side effects run in spawned tasks that answer with another input: the
//! enforcers' applies, the writer of the saved state. The hub connection is not part of the
//! engine: without one it keeps enforcing what it holds, and tests drive it directly.
//!
//! The rules it keeps, whatever the kind:
//! - save, then acknowledge: an Ack for a revision goes out only once the state holding it
//!   is saved ([`StateStore`]), so an agent restarted after an Ack enforces what it acked;
//! - per placed object: the enforcer judges → apply if needed (one at a time, with backoff on
//!   errors and on fights with another writer) → the report, debounced and sent under
//!   optimistic concurrency ([`ReportTracker`]);
//! - an assignment no enforcer takes is held, saved, acknowledged and reported as an error;
//! - while the member's API server fails its `/readyz` probe ([`crate::probe`], fed in
//!   with [`EngineHandle::health_changed`]), the hub is
//!   told so (`MemberHealth`), and every placement not synced reports `Unavailable` with
//!   the probe's error, so the hub can say why it waits. Nothing else changes: what is
//!   held stays enforced.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use accord_common::distribution::{AssignmentSpec, PlacedRef};
use accord_common::runtime::{AbortOnDrop, Retry, backoff, unix_millis};
use accord_common::telemetry;
use accord_proto::v1::{
    AgentMessage, HubMessage, MemberCapacity, MemberHealth, RefusalReason, StatusAck,
    agent_message, hub_message, status_ack,
};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{Instrument, Span, debug, info, warn};

use crate::assignments::{Assigned, AssignmentBook};
use crate::convert;
use crate::enforce::fight::{FightGuard, Guard};
use crate::enforce::{self, Action, ApplyError, Enforcer, EventSink, WatchEvent};
use crate::metrics::{Metrics, ResultLabel};
use crate::persist::{PersistError, SavedState, StateStore};
use crate::report::{AfterConflict, Report, ReportTracker};

/// Default delay between a change and the report about it; changes within it coalesce.
pub const DEFAULT_REPORT_DEBOUNCE: Duration = Duration::from_millis(100);

/// Start of the message a placement reports while the member's API server is unavailable.
pub const API_SERVER_UNAVAILABLE: &str = "member API server unavailable";

/// Inputs buffered before senders wait on the engine.
const INPUT_CAPACITY: usize = 1024;

/// Retries of a failing apply, and of re-applying against another writer.
fn apply_backoff() -> Retry {
    backoff(Duration::from_millis(200), Duration::from_secs(30))
}

/// Retries of loading and saving the state.
fn persist_backoff() -> Retry {
    backoff(Duration::from_millis(100), Duration::from_secs(5))
}

/// What the kind-neutral core needs besides its store and enforcers.
#[derive(Clone, Debug)]
pub struct CoreConfig {
    /// Cluster the agent speaks for.
    pub cluster: String,
    /// Delay between a change and the report about it.
    pub report_debounce: Duration,
}

/// Everything that reaches the engine.
#[derive(Debug)]
pub enum Input {
    /// A message from the hub.
    Hub(HubMessage),
    /// A stream to the hub opened; messages for the hub go to `outbox`.
    Connected {
        /// Id of the stream.
        id: u64,
        /// The stream's outgoing messages (after Hello, which the connection sends).
        outbox: mpsc::UnboundedSender<AgentMessage>,
    },
    /// The stream `id` ended.
    Disconnected {
        /// Id of the stream.
        id: u64,
    },
    /// An enforcer's watch saw something.
    Watch {
        /// The enforcer's name.
        enforcer: &'static str,
        /// What it saw.
        event: WatchEvent,
    },
    /// An apply finished.
    Applied {
        /// The placed object applied.
        placed: PlacedRef,
        /// What was applied (boxed: the largest input by far).
        spec: Arc<AssignmentSpec>,
        /// Version of the object the apply was decided on.
        from_version: String,
        /// The object's version afterwards, or the error.
        result: Result<String, Box<ApplyError>>,
    },
    /// The saved state up to `seq` is stored.
    Persisted {
        /// Sequence number of the saved snapshot.
        seq: u64,
    },
    /// The member API server's health changed (from its `/readyz` probe).
    Health(MemberHealth),
    /// The member's capacity changed beyond the threshold (from its count of nodes and
    /// pods, [`crate::capacity`]).
    Capacity(MemberCapacity),
}

/// What the engine publishes to its handles.
struct EngineStatus {
    last_applied_revision: AtomicI64,
    store_epoch: AtomicU64,
    health: std::sync::Mutex<Option<MemberHealth>>,
    next_stream: AtomicU64,
    loaded: watch::Sender<bool>,
    ready: AtomicBool,
}

/// Talks to a running engine.
#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<Input>,
    status: Arc<EngineStatus>,
}

impl EngineHandle {
    /// Passes a message from the hub.
    pub async fn hub_message(&self, message: HubMessage) {
        let _ = self.tx.send(Input::Hub(message)).await;
    }

    /// Tells the engine a stream opened; returns the stream id for [`Self::disconnected`].
    pub async fn connected(&self, outbox: mpsc::UnboundedSender<AgentMessage>) -> u64 {
        let id = self.status.next_stream.fetch_add(1, Ordering::Relaxed);
        let _ = self.tx.send(Input::Connected { id, outbox }).await;
        id
    }

    /// Tells the engine stream `id` ended.
    pub async fn disconnected(&self, id: u64) {
        let _ = self.tx.send(Input::Disconnected { id }).await;
    }

    /// Highest hub revision applied, for Hello.
    pub fn last_applied_revision(&self) -> i64 {
        self.status.last_applied_revision.load(Ordering::Relaxed)
    }

    /// Store epoch of the held revisions (0: none yet), for Hello.
    pub fn store_epoch(&self) -> u64 {
        self.status.store_epoch.load(Ordering::Relaxed)
    }

    /// The member's health as last probed (`None` before the first probe), for Hello.
    pub fn member_health(&self) -> Option<MemberHealth> {
        self.status
            .health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Tells the engine the member API server's health (the probe does this on every
    /// change).
    pub async fn health_changed(&self, health: MemberHealth) {
        let _ = self.tx.send(Input::Health(health)).await;
    }

    /// Tells the engine the member's capacity (the counter does this on every change
    /// worth a report).
    pub async fn capacity_changed(&self, capacity: MemberCapacity) {
        let _ = self.tx.send(Input::Capacity(capacity)).await;
    }

    /// Whether the saved assignments have been loaded (and are being enforced).
    pub fn is_loaded(&self) -> bool {
        self.status.ready.load(Ordering::Relaxed)
    }

    /// Waits until the saved assignments have been loaded.
    pub async fn wait_loaded(&self) {
        let mut loaded = self.status.loaded.subscribe();
        let _ = loaded.wait_for(|l| *l).await;
    }
}

/// A running engine; dropping it stops the engine and its watches.
pub struct EngineTask {
    handle: EngineHandle,
    task: JoinHandle<()>,
}

impl EngineTask {
    /// A handle to the engine.
    pub fn handle(&self) -> &EngineHandle {
        &self.handle
    }

    /// Stops the engine and waits until it (and with it its watches) is gone.
    pub async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }

    /// Waits for the engine to end (it ends only when aborted or on a panic).
    pub async fn join(mut self) -> Result<(), tokio::task::JoinError> {
        (&mut self.task).await
    }
}

impl Drop for EngineTask {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts the engine with the given store and enforcers: it loads the saved assignments,
/// enforces them, and then follows its inputs.
pub fn start_with(
    config: CoreConfig,
    store: Arc<dyn StateStore>,
    enforcers: Vec<Box<dyn Enforcer>>,
    metrics: Metrics,
) -> EngineTask {
    let (tx, rx) = mpsc::channel(INPUT_CAPACITY);
    let (loaded, _) = watch::channel(false);
    let status = Arc::new(EngineStatus {
        last_applied_revision: AtomicI64::new(0),
        store_epoch: AtomicU64::new(0),
        health: std::sync::Mutex::new(None),
        next_stream: AtomicU64::new(1),
        loaded,
        ready: AtomicBool::new(false),
    });
    let (persist_tx, persist_rx) = watch::channel(Snapshot::default());
    let engine = Engine {
        config,
        metrics: metrics.clone(),
        status: status.clone(),
        rx,
        tx: tx.clone(),
        book: AssignmentBook::default(),
        placed: BTreeMap::new(),
        enforcers,
        stream: None,
        timers: BinaryHeap::new(),
        fights: FightGuard::default(),
        persist_tx,
        persist_seq: 0,
        unacked: Vec::new(),
        pending_reports: 0,
        health: None,
        capacity: None,
    };
    let handle = EngineHandle {
        tx: tx.clone(),
        status: status.clone(),
    };
    let task = tokio::spawn(async move {
        let writer = tokio::spawn(persist_loop(
            store.clone(),
            persist_rx,
            engine.tx.clone(),
            metrics,
        ));
        let _writer = AbortOnDrop(writer);
        engine.run(store.as_ref()).await;
    });
    EngineTask { handle, task }
}

/// A state to save, numbered so acknowledgements can wait for it.
#[derive(Clone, Default)]
struct Snapshot {
    seq: u64,
    state: Arc<SavedState>,
    store_epoch: u64,
}

/// Writes the latest snapshot to the store, retrying with backoff; newer snapshots replace
/// older ones that were not written yet.
async fn persist_loop(
    store: Arc<dyn StateStore>,
    mut rx: watch::Receiver<Snapshot>,
    tx: mpsc::Sender<Input>,
    metrics: Metrics,
) {
    while rx.changed().await.is_ok() {
        let mut retry = persist_backoff();
        loop {
            let snapshot = rx.borrow_and_update().clone();
            // Encoding every held assignment takes milliseconds: off the runtime's workers.
            let (state, epoch) = (snapshot.state.clone(), snapshot.store_epoch);
            let encoded = tokio::task::spawn_blocking(move || state.encode_with_epoch(epoch))
                .await
                .unwrap_or_else(|e| Err(PersistError::Encode(serde::ser::Error::custom(e))));
            let saved = match encoded {
                Ok(document) => store.save(document).await,
                Err(e) => Err(e),
            };
            match saved {
                Ok(()) => {
                    if tx
                        .send(Input::Persisted { seq: snapshot.seq })
                        .await
                        .is_err()
                    {
                        return;
                    }
                    break;
                }
                Err(e) => {
                    metrics.error(e.kind());
                    let delay = retry.next_delay();
                    warn!(error = %e, "could not save the assignments; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
}

/// Per-object state of the engine.
#[derive(Default)]
struct PlacedRuntime {
    /// An apply is running.
    applying: bool,
    /// Version the object had when the last successful apply was decided: while the
    /// enforcer's cache still shows it, its watch has not delivered the result yet.
    awaiting_version: Option<String>,
    /// The last apply's error, until an apply succeeds or the judgement settles.
    apply_error: Option<ApplyError>,
    /// No apply before this instant.
    retry_at: Option<Instant>,
    /// Applies since the object was last judged settled.
    unsynced_applies: u32,
    retry: Option<Retry>,
    /// The latest observation.
    latest: Option<Report>,
    /// When the debounced report goes out.
    debounce_at: Option<Instant>,
    /// Whether the hub lacks the latest observation (for the pending gauge).
    pending: bool,
    tracker: ReportTracker,
    /// When the current assignment arrived, until its first successful apply (the
    /// receive → applied stage).
    received: Option<Instant>,
    /// The current assignment's change, when it came with a trace (tracing on).
    traced: Option<Box<Traced>>,
}

/// A change of one placed object being traced in this cluster: its apply span, open until
/// the apply is done, and the reports that follow (children of it) until one tells the
/// hub the outcome.
struct Traced {
    /// Revision of the assignment traced.
    revision: i64,
    /// The apply span while the apply runs (dropped: ended).
    span: Option<Span>,
    /// W3C traceparent of the apply span.
    traceparent: String,
}

impl PlacedRuntime {
    fn delay(&mut self) -> Duration {
        self.retry.get_or_insert_with(apply_backoff).next_delay()
    }

    fn settled(&mut self) {
        self.apply_error = None;
        self.retry_at = None;
        self.awaiting_version = None;
        self.unsynced_applies = 0;
        self.retry = None;
    }
}

impl Traced {
    /// Opens the apply span of an assignment of `placed` at `revision` sent with
    /// `traceparent`, its child.
    fn start(placed: &PlacedRef, revision: i64, traceparent: &str, cluster: &str) -> Self {
        let span = tracing::info_span!(
            target: telemetry::TARGET,
            parent: None,
            "apply",
            accord.cluster = cluster,
            accord.placed = %placed,
            accord.revision = revision,
        );
        telemetry::set_parent(&span, traceparent);
        Self {
            revision,
            traceparent: telemetry::traceparent(&span),
            span: Some(span),
        }
    }

    /// A report span (child of the apply span) for `report`; its traceparent, sent with
    /// the report.
    fn report(&self, placed: &PlacedRef, report: &Report, cluster: &str) -> String {
        let span = tracing::info_span!(
            target: telemetry::TARGET,
            parent: None,
            "report",
            accord.cluster = cluster,
            accord.placed = %placed,
            accord.state = %report.state,
            accord.applied_revision = report.applied_revision,
        );
        telemetry::set_parent(&span, &self.traceparent);
        telemetry::traceparent(&span)
    }
}

/// Observes the receive → applied stage of an assignment.
fn observe_applied(metrics: &Metrics, traced: Option<&Traced>, took: Duration) {
    accord_common::metrics::observe_traced(
        &metrics.change_applied_seconds,
        took.as_secs_f64(),
        traced.map_or("", |t| t.traceparent.as_str()),
    );
}

/// The open stream to the hub.
struct Stream {
    id: u64,
    outbox: mpsc::UnboundedSender<AgentMessage>,
}

struct Engine {
    config: CoreConfig,
    metrics: Metrics,
    status: Arc<EngineStatus>,
    rx: mpsc::Receiver<Input>,
    tx: mpsc::Sender<Input>,
    book: AssignmentBook,
    placed: BTreeMap<PlacedRef, PlacedRuntime>,
    enforcers: Vec<Box<dyn Enforcer>>,
    stream: Option<Stream>,
    timers: BinaryHeap<Reverse<(Instant, PlacedRef)>>,
    /// Repairs made, and fights held off ([`crate::enforce::fight`]).
    fights: FightGuard,
    persist_tx: watch::Sender<Snapshot>,
    persist_seq: u64,
    /// Revisions to acknowledge once the snapshot numbered with them is saved.
    unacked: Vec<(u64, i64)>,
    pending_reports: i64,
    /// The member API server's health as last probed (`None`: not probed yet).
    health: Option<MemberHealth>,
    /// The member's capacity as last counted (`None`: not counted yet).
    capacity: Option<MemberCapacity>,
}

impl Engine {
    async fn run(mut self, store: &dyn StateStore) {
        self.load(store).await;
        loop {
            let next = self.timers.peek().map(|Reverse((at, _))| *at);
            tokio::select! {
                input = self.rx.recv() => match input {
                    Some(input) => self.handle_queued(input),
                    None => return,
                },
                () = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                    self.fire_timers();
                }
            }
        }
    }

    /// Loads the saved assignments (retrying while the store does not answer) and starts
    /// enforcing them. A document written in an older format is saved again in the current
    /// one right away.
    async fn load(&mut self, store: &dyn StateStore) {
        let mut retry = persist_backoff();
        let document = loop {
            match store.load().await {
                Ok(document) => break document,
                Err(e) => {
                    self.metrics.error(e.kind());
                    let delay = retry.next_delay();
                    warn!(error = %e, "could not load the saved assignments; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                }
            }
        };
        let loaded = match document.as_deref().map(SavedState::decode) {
            None => {
                debug!("no saved assignments");
                None
            }
            Some(Ok(loaded)) => Some(loaded),
            Some(Err(e)) => {
                self.metrics.error(e.kind());
                warn!(error = %e, "ignoring the saved assignments; the hub will resend them");
                None
            }
        };
        match loaded {
            Some(loaded)
                if loaded.state.cluster == self.config.cluster
                    || loaded.state.cluster.is_empty() =>
            {
                info!(
                    placed = loaded.state.assignments.len(),
                    revision = loaded.state.last_applied_revision,
                    store_epoch = loaded.store_epoch,
                    migrated = loaded.migrated,
                    "enforcing the saved assignments"
                );
                self.book = loaded
                    .state
                    .into_book()
                    .with_store_epoch(loaded.store_epoch);
                if loaded.migrated {
                    self.save();
                }
            }
            Some(loaded) => warn!(
                saved_for = %loaded.state.cluster,
                cluster = %self.config.cluster,
                "ignoring saved assignments made for another cluster"
            ),
            None => {}
        }
        let keys: Vec<PlacedRef> = self.book.placed().keys().cloned().collect();
        for key in &keys {
            self.placed.insert(key.clone(), PlacedRuntime::default());
        }
        self.book_changed();
        for key in &keys {
            self.reconcile(key);
        }
        self.metrics.reports_pending.set(self.pending_reports);
        self.status.ready.store(true, Ordering::Relaxed);
        self.status.loaded.send_replace(true);
    }

    /// Handles `first` and whatever is queued behind it already, taking consecutive
    /// Assignments messages together: the hub sends one message per changed placed object, and a
    /// thousand placed objects changed at once would otherwise tell the enforcers, save the state
    /// and judge the book a thousand times over.
    fn handle_queued(&mut self, first: Input) {
        let mut batch = Vec::new();
        let mut next = Some(first);
        let mut taken = 0;
        while let Some(input) = next {
            taken += 1;
            match input {
                Input::Hub(HubMessage {
                    body: Some(hub_message::Body::Assignments(assignments)),
                }) => batch.push(assignments),
                other => {
                    if !batch.is_empty() {
                        self.assignments(std::mem::take(&mut batch));
                    }
                    self.handle(other);
                }
            }
            next = if taken < INPUT_CAPACITY {
                self.rx.try_recv().ok()
            } else {
                None
            };
        }
        if !batch.is_empty() {
            self.assignments(batch);
        }
    }

    fn handle(&mut self, input: Input) {
        match input {
            Input::Hub(message) => match message.body {
                Some(hub_message::Body::Assignments(assignments)) => {
                    self.assignments(vec![assignments]);
                }
                Some(hub_message::Body::StatusAck(ack)) => self.status_ack(ack),
                Some(hub_message::Body::Renewed(_)) => debug!("certificate renewal answer"),
                None => debug!("empty message from the hub"),
            },
            Input::Connected { id, outbox } => self.connected(id, outbox),
            Input::Disconnected { id } => {
                if self.stream.as_ref().is_some_and(|s| s.id == id) {
                    self.stream = None;
                }
            }
            Input::Watch { enforcer, event } => self.watch_event(enforcer, event),
            Input::Applied {
                placed,
                spec,
                from_version,
                result,
            } => self.applied(placed, &spec, from_version, result),
            Input::Persisted { seq } => self.persisted(seq),
            Input::Health(health) => self.health_changed(health),
            Input::Capacity(capacity) => {
                self.capacity = Some(capacity);
                self.send(agent_message::Body::MemberCapacity(capacity));
                let again: Vec<PlacedRef> = self
                    .enforcers
                    .iter_mut()
                    .flat_map(|e| e.capacity_counted())
                    .collect();
                for key in again {
                    self.reconcile(&key);
                }
            }
        }
    }

    // ---- assignments ----------------------------------------------------------------

    /// Applies Assignments messages received one after another, in order; the enforcers
    /// are told, the state saved and the upserted placed objects judged once for all of them.
    fn assignments(&mut self, messages: Vec<accord_proto::v1::Assignments>) {
        let Some(last_revision) = messages.iter().map(|m| m.revision).max() else {
            return;
        };
        let before = self.book.last_applied_revision();
        let mut changed = false;
        let mut upserted = BTreeSet::new();
        let received = Instant::now();
        // The traceparent of each traced item (none when the hub does not trace).
        let mut traces: Vec<(PlacedRef, i64, String)> = Vec::new();
        for message in messages {
            let revision = message.revision;
            if telemetry::enabled() {
                traces.extend(message.items.iter().filter_map(|item| {
                    if item.traceparent.is_empty() {
                        return None;
                    }
                    let placed = PlacedRef::from_proto(item.placed.as_ref()?).ok()?;
                    Some((placed, item.revision, item.traceparent.clone()))
                }));
            }
            let (update, malformed) = convert::update(message);
            if malformed > 0 {
                warn!(
                    revision,
                    malformed,
                    "ignoring assignments without a placed object of a known kind or a spec"
                );
            }
            let full = update.full;
            let epoch_before = self.book.store_epoch();
            let applied = self.book.apply(update);
            if applied.epoch_changed && epoch_before == 0 {
                debug!(
                    store_epoch = self.book.store_epoch(),
                    "took the hub's store epoch"
                );
            } else if applied.epoch_changed {
                info!(
                    from = epoch_before,
                    to = self.book.store_epoch(),
                    "the hub's store epoch changed (its store was restored); revisions held \
                     before no longer compare, the new epoch's assignments replace them"
                );
            }
            self.metrics.assignments_applied.inc();
            debug!(
                revision,
                full,
                upserted = applied.upserted.len(),
                removed = applied.removed.len(),
                stale = applied.stale,
                "applied assignments"
            );
            for key in &applied.removed {
                upserted.remove(key);
                if let Some(rt) = self.placed.remove(key)
                    && rt.pending
                {
                    self.pending_reports -= 1;
                }
            }
            for key in &applied.upserted {
                let rt = self.placed.entry(key.clone()).or_default();
                // A new assignment starts over: no old error or backoff applies to it.
                rt.settled();
                rt.received = Some(received);
                rt.traced = None;
            }
            changed |= applied.changed();
            upserted.extend(applied.upserted);
        }
        info!(
            revision = last_revision,
            upserted = upserted.len(),
            placed = self.book.placed().len(),
            "applied assignments"
        );
        for (key, revision, traceparent) in traces {
            let taken = self.book.get(&key).is_some_and(|a| a.revision == revision);
            if let Some(rt) = self.placed.get_mut(&key).filter(|_| taken) {
                rt.traced = Some(Box::new(Traced::start(
                    &key,
                    revision,
                    &traceparent,
                    &self.config.cluster,
                )));
            }
        }
        let book_changed = changed || self.book.last_applied_revision() != before;
        if book_changed {
            self.book_changed();
        }
        for key in &upserted {
            self.reconcile(key);
        }
        // Saved after the applies started: copying the whole book need not delay them.
        if book_changed {
            let seq = self.save();
            self.unacked.push((seq, last_revision));
        } else {
            self.ack(last_revision);
        }
        self.metrics.reports_pending.set(self.pending_reports);
    }

    /// Hands the book to the writer; returns the snapshot's sequence number.
    fn save(&mut self) -> u64 {
        self.persist_seq += 1;
        self.persist_tx.send_replace(Snapshot {
            seq: self.persist_seq,
            state: Arc::new(SavedState::of(&self.config.cluster, &self.book)),
            store_epoch: self.book.store_epoch(),
        });
        self.persist_seq
    }

    /// Publishes the revision, tells every enforcer what it now enforces and looks again at
    /// the unchanged placed objects that this changed for all the same.
    fn book_changed(&mut self) {
        self.status
            .last_applied_revision
            .store(self.book.last_applied_revision(), Ordering::Relaxed);
        self.status
            .store_epoch
            .store(self.book.store_epoch(), Ordering::Relaxed);
        self.metrics
            .managed_objects
            .set(i64::try_from(self.book.placed().len()).unwrap_or(i64::MAX));
        let mut reassigned = Vec::new();
        for enforcer in &mut self.enforcers {
            let events = EventSink::new(self.tx.clone(), enforcer.name());
            enforcer.assign(self.book.placed(), &events);
            reassigned.extend(enforcer.reassigned());
        }
        for key in &reassigned {
            self.reconcile(key);
        }
    }

    fn persisted(&mut self, seq: u64) {
        let (done, waiting): (Vec<_>, Vec<_>) =
            self.unacked.drain(..).partition(|(s, _)| *s <= seq);
        self.unacked = waiting;
        if let Some(revision) = done.iter().map(|(_, r)| *r).max() {
            self.ack(revision);
        }
    }

    fn ack(&mut self, revision: i64) {
        self.send(agent_message::Body::Ack(accord_proto::v1::Ack { revision }));
    }

    // ---- watches --------------------------------------------------------------------

    fn watch_event(&mut self, enforcer: &'static str, event: WatchEvent) {
        if let WatchEvent::Failed { message, .. } = &event {
            self.metrics.error("watch");
            warn!(enforcer, error = %message, "watch failed; retrying");
        }
        let Some(e) = self.enforcers.iter_mut().find(|e| e.name() == enforcer) else {
            return;
        };
        for key in e.event(event) {
            self.reconcile(&key);
        }
        self.metrics.reports_pending.set(self.pending_reports);
    }

    // ---- reconcile ------------------------------------------------------------------

    /// Has the placed object's enforcer judge it, applies if needed, and updates its report.
    fn reconcile(&mut self, key: &PlacedRef) {
        let Some(assigned) = self.book.get(key).cloned() else {
            return;
        };
        let now = Instant::now();
        let Some(index) = self
            .enforcers
            .iter()
            .position(|e| e.enforces(&assigned.spec))
        else {
            let report = enforce::unenforced_report(key, &assigned);
            self.observed(key, report, now);
            return;
        };
        let Some(rt) = self.placed.get_mut(key) else {
            return;
        };
        let Some(judgement) = self.enforcers[index].look(key, &assigned, rt.apply_error.as_ref())
        else {
            return;
        };
        let mut apply_from = None;
        let mut report = judgement.report;
        let (action, repair) = match judgement.action {
            Action::Repair {
                from_version,
                repair,
            } => (Action::Apply { from_version }, Some(repair)),
            other => (other, None),
        };
        let placed = key.to_string();
        let held = repair
            .as_ref()
            .and_then(|r| self.fights.held(&placed, r, now));
        if let Some((until, message)) = held {
            // Not fighting: say so, and look again when the hold ends.
            report.state = accord_common::distribution::PlacementState::Conflict;
            report.message = message;
            if rt.retry_at != Some(until) {
                rt.retry_at = Some(until);
                self.timers.push(Reverse((until, key.clone())));
            }
            self.observed(key, report, now);
            return;
        }
        match action {
            Action::Apply { from_version } => {
                if rt.awaiting_version.as_deref() == Some(from_version.as_str()) {
                    // The watch has not delivered the result of the last apply yet.
                } else if rt.applying {
                    // One apply at a time; its result triggers the next look.
                } else if rt.retry_at.is_some_and(|at| at > now) {
                    // Waiting out a backoff; the timer comes back here.
                } else if rt.unsynced_applies > 0 && rt.retry_at.is_none() {
                    // Applied before and something changed it back: do not fight in a
                    // tight loop.
                    let at = now + rt.delay();
                    rt.retry_at = Some(at);
                    self.timers.push(Reverse((at, key.clone())));
                } else {
                    let guard = match &repair {
                        Some(r) => self.fights.repair(&placed, r, now),
                        None => Guard::Restore,
                    };
                    if repair.is_some() {
                        let result = match guard {
                            Guard::Restore => "restored",
                            Guard::Hold { .. } => "held",
                        };
                        self.metrics
                            .field_repairs
                            .get_or_create(&ResultLabel::of(result))
                            .inc();
                    }
                    match guard {
                        Guard::Hold { until, message } => {
                            warn!(placed = %key, %message, "not restoring fields another writer keeps changing");
                            report.state = accord_common::distribution::PlacementState::Conflict;
                            report.message = message;
                            rt.retry_at = Some(until);
                            self.timers.push(Reverse((until, key.clone())));
                        }
                        Guard::Restore => {
                            rt.awaiting_version = None;
                            rt.retry_at = None;
                            rt.applying = true;
                            rt.unsynced_applies += 1;
                            apply_from = Some(from_version);
                        }
                    }
                }
            }
            Action::Settled => {
                rt.settled();
                // Nothing to apply: the member holds it already.
                if let Some(t) = rt.traced.as_mut() {
                    t.span = None;
                }
                if let Some(at) = rt.received.take() {
                    observe_applied(&self.metrics, rt.traced.as_deref(), now - at);
                }
            }
            Action::Unknown | Action::Repair { .. } => {}
        }
        if let Some(from_version) = apply_from {
            let span = rt
                .traced
                .as_ref()
                .and_then(|t| t.span.clone())
                .unwrap_or_else(Span::none);
            self.spawn_apply(index, key.clone(), assigned, from_version, span);
        }
        self.observed(key, report, now);
    }

    fn spawn_apply(
        &self,
        enforcer: usize,
        placed: PlacedRef,
        assigned: Assigned,
        from_version: String,
        span: Span,
    ) {
        // The kind's own steps are spans of the apply span (when traced).
        let apply = span.in_scope(|| self.enforcers[enforcer].apply(&placed, &assigned));
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let result = apply.instrument(span).await.map_err(Box::new);
            let _ = tx
                .send(Input::Applied {
                    placed,
                    spec: assigned.spec,
                    from_version,
                    result,
                })
                .await;
        });
    }

    fn applied(
        &mut self,
        key: PlacedRef,
        spec: &Arc<AssignmentSpec>,
        from_version: String,
        result: Result<String, Box<ApplyError>>,
    ) {
        // `Arc` equality of an `Eq` type looks at the pointer first: an unchanged
        // assignment costs no comparison of what it holds.
        let same = self.book.get(&key).is_some_and(|a| a.spec == *spec);
        let Some(rt) = self.placed.get_mut(&key) else {
            return;
        };
        rt.applying = false;
        if !same {
            // The assignment changed while applying; judge the new one.
            self.reconcile(&key);
            return;
        }
        match result {
            Ok(version) => {
                rt.apply_error = None;
                if let Some(t) = rt.traced.as_mut() {
                    t.span = None;
                }
                if let Some(at) = rt.received.take() {
                    observe_applied(&self.metrics, rt.traced.as_deref(), at.elapsed());
                }
                // If the apply changed nothing, there is no watch event to wait for.
                rt.awaiting_version = (version != from_version).then_some(from_version);
            }
            Err(e) => {
                self.metrics.error(e.kind.as_str());
                rt.awaiting_version = None;
                let at = Instant::now() + rt.delay();
                rt.retry_at = Some(at);
                self.timers.push(Reverse((at, key.clone())));
                if e.is_not_found() {
                    // Deleted under the apply: the watch reports it.
                    rt.apply_error = None;
                } else {
                    warn!(placed = %key, error = %e, "apply failed; retrying with backoff");
                    rt.apply_error = Some(*e);
                }
            }
        }
        self.reconcile(&key);
    }

    // ---- reports --------------------------------------------------------------------

    /// Takes a fresh observation of `key` and schedules its report if the hub lacks it.
    fn observed(&mut self, key: &PlacedRef, mut report: Report, now: Instant) {
        let debounce = self.config.report_debounce;
        if let Some(down) = self.health.as_ref().filter(|h| !h.api_server_available)
            && report.state != accord_common::distribution::PlacementState::Synced
        {
            // What the enforcer sees is its cache of a server that does not answer: say
            // why nothing moves instead.
            report.state = accord_common::distribution::PlacementState::Unavailable;
            report.message = format!("{API_SERVER_UNAVAILABLE}: {}", down.message);
            report.api_server_unavailable = true;
        }
        let Some(rt) = self.placed.get_mut(key) else {
            return;
        };
        let wants = rt.tracker.wants(&report);
        rt.latest = Some(report);
        if wants && rt.debounce_at.is_none() && !rt.tracker.in_flight() {
            let at = now + debounce;
            rt.debounce_at = Some(at);
            self.timers.push(Reverse((at, key.clone())));
        }
        self.update_pending(key);
    }

    fn update_pending(&mut self, key: &PlacedRef) {
        let Some(rt) = self.placed.get_mut(key) else {
            return;
        };
        let pending = rt
            .latest
            .as_ref()
            .is_some_and(|r| rt.tracker.in_flight() || rt.tracker.wants(r));
        if pending != rt.pending {
            rt.pending = pending;
            self.pending_reports += if pending { 1 } else { -1 };
        }
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        let mut due = BTreeSet::new();
        while let Some(Reverse((at, _))) = self.timers.peek() {
            if *at > now {
                break;
            }
            if let Some(Reverse((_, key))) = self.timers.pop() {
                due.insert(key);
            }
        }
        for key in due {
            let Some(rt) = self.placed.get_mut(&key) else {
                continue;
            };
            if rt.retry_at.is_some_and(|at| at <= now) {
                self.reconcile(&key);
            }
            let Some(rt) = self.placed.get_mut(&key) else {
                continue;
            };
            if rt.debounce_at.is_some_and(|at| at <= now) {
                rt.debounce_at = None;
                self.flush_report(&key);
            }
        }
        self.metrics.reports_pending.set(self.pending_reports);
    }

    /// Sends the latest observation of `key` if connected, nothing is in flight and the
    /// hub lacks it.
    fn flush_report(&mut self, key: &PlacedRef) {
        let Some(stream) = &self.stream else {
            return;
        };
        let Some(rt) = self.placed.get_mut(key) else {
            return;
        };
        if rt.tracker.in_flight() {
            return;
        }
        let Some(report) = rt.latest.clone() else {
            return;
        };
        if !rt.tracker.wants(&report) {
            return;
        }
        let expected = rt.tracker.sent(report.clone());
        let traceparent = match &rt.traced {
            Some(t) => {
                let outcome = t.span.is_none()
                    && report.applied_revision >= t.revision
                    && report.state != accord_common::distribution::PlacementState::Pending;
                let traceparent = t.report(key, &report, &self.config.cluster);
                if outcome {
                    // The hub hears the outcome: the change's trace ends here.
                    rt.traced = None;
                }
                traceparent
            }
            None => String::new(),
        };
        let message = AgentMessage {
            cluster: self.config.cluster.clone(),
            body: Some(agent_message::Body::StatusReport(convert::status_report(
                key,
                &report,
                expected,
                unix_millis(),
                traceparent,
            ))),
        };
        if stream.outbox.send(message).is_ok() {
            self.metrics.reports_sent.inc();
            debug!(placed = %key, state = %report.state, expected, "sent status report");
        }
        self.update_pending(key);
    }

    fn status_ack(&mut self, ack: StatusAck) {
        let Some(placed) = ack
            .placed
            .as_ref()
            .and_then(|p| PlacedRef::from_proto(p).ok())
        else {
            debug!("StatusAck without a placed object of a known kind");
            return;
        };
        match ack.result {
            Some(status_ack::Result::Accepted(_)) => self.metrics.ack("accepted"),
            Some(status_ack::Result::Conflict(_)) => self.metrics.ack("conflict"),
            None => {}
        }
        let reason = RefusalReason::try_from(ack.reason).unwrap_or_default();
        let Some(rt) = self.placed.get_mut(&placed) else {
            // No longer managed: nothing to follow up.
            return;
        };
        match ack.result {
            Some(status_ack::Result::Accepted(version)) => {
                rt.tracker.accepted_at(version);
                self.flush_report(&placed);
            }
            Some(status_ack::Result::Conflict(current)) => {
                match reason {
                    // Dropped: the tracker remembers the refused report, so only a fresh
                    // observation that differs from it goes out.
                    RefusalReason::OlderReport => {
                        debug!(%placed, current, "the hub holds a newer report; dropped this one");
                    }
                    RefusalReason::StaleVersion => {
                        debug!(%placed, current, "the hub's record changed; reporting again");
                    }
                    RefusalReason::Unspecified => {}
                }
                match rt.tracker.conflict(current) {
                    AfterConflict::Resend | AfterConflict::ResendIfNewer => {
                        // A fresh observation, stamped with the current time.
                        self.reconcile(&placed);
                        self.flush_report(&placed);
                    }
                    AfterConflict::GiveUp => warn!(
                        %placed,
                        current,
                        "the hub keeps refusing this placed object's reports; waiting for the next change"
                    ),
                }
            }
            None => debug!(%placed, "StatusAck without a result"),
        }
        self.update_pending(&placed);
        self.metrics.reports_pending.set(self.pending_reports);
    }

    // ---- stream ---------------------------------------------------------------------

    fn connected(&mut self, id: u64, outbox: mpsc::UnboundedSender<AgentMessage>) {
        self.stream = Some(Stream { id, outbox });
        // Hello carried the health as it was then; it may have changed since.
        if let Some(health) = self.health.clone() {
            self.send(agent_message::Body::MemberHealth(health));
        }
        if let Some(capacity) = self.capacity {
            self.send(agent_message::Body::MemberCapacity(capacity));
        }
        // Acknowledgements are implied by Hello's last applied revision.
        let keys: Vec<PlacedRef> = self.placed.keys().cloned().collect();
        for key in keys {
            if let Some(rt) = self.placed.get_mut(&key) {
                rt.tracker.reconnected();
                rt.debounce_at = None;
            }
            self.flush_report(&key);
        }
        self.metrics.reports_pending.set(self.pending_reports);
    }

    fn send(&mut self, body: agent_message::Body) {
        if let Some(stream) = &self.stream {
            let message = AgentMessage {
                cluster: self.config.cluster.clone(),
                body: Some(body),
            };
            if stream.outbox.send(message).is_err() {
                self.stream = None;
            }
        }
    }

    // ---- member health --------------------------------------------------------------

    fn health_changed(&mut self, health: MemberHealth) {
        let same = self.health.as_ref().is_some_and(|h| {
            h.api_server_available == health.api_server_available && h.message == health.message
        });
        if same {
            return;
        }
        let became = self
            .health
            .as_ref()
            .is_none_or(|h| h.api_server_available != health.api_server_available);
        if health.api_server_available {
            if self.health.is_some() {
                info!("the member API server answers its readiness probe again");
            }
        } else {
            warn!(error = %health.message, "the member API server fails its readiness probe");
        }
        *self
            .status
            .health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(health.clone());
        self.health = Some(health.clone());
        self.send(agent_message::Body::MemberHealth(health));
        if became {
            // Every placement's report depends on it.
            let keys: Vec<PlacedRef> = self.placed.keys().cloned().collect();
            for key in &keys {
                self.reconcile(key);
            }
            self.metrics.reports_pending.set(self.pending_reports);
        }
    }
}
