//! The enforcement engine: one task that owns the assignments, makes the member cluster
//! match them and decides what to report to the hub.
//!
//! Everything reaches it as an [`Input`] on one channel — hub messages, stream
//! connects/disconnects, watch events, finished applies, finished saves — so its state
//! needs no locks. Side effects run in spawned tasks that answer with another input:
//! server-side applies of replicas, the ConfigMap writer. The hub connection is not part of
//! the engine: without one it keeps enforcing what it holds, and tests drive it directly.
//!
//! Per policy the pipeline is: read the cached Deployment and HPAs → [`observe::verdict`]
//! → apply if needed (with backoff on errors and on fights with another writer) →
//! [`observe::report`] → debounced StatusReport under optimistic concurrency
//! ([`ReportTracker`]).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use accord_crds::AGENT_FIELD_MANAGER;
use accord_proto::v1::{
    AgentMessage, HubMessage, StatusAck, agent_message, hub_message, status_ack,
};
use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::assignments::{AssignmentBook, PolicyKey, ScaleTarget};
use crate::convert;
use crate::metrics::{Metrics, kube_error_kind};
use crate::observe::{self, PlacementState, Report, Verdict};
use crate::persist::{PersistError, SavedState, StateStore};
use crate::report::{AfterConflict, ReportTracker};
use crate::watch::{NamespaceWatch, WatchEvent};

/// Default delay between a change and the report about it; changes within it coalesce.
pub const DEFAULT_REPORT_DEBOUNCE: Duration = Duration::from_millis(100);

/// Inputs buffered before senders wait on the engine.
const INPUT_CAPACITY: usize = 1024;

/// Retries of a failing apply, and of re-applying against another writer.
fn apply_backoff() -> ExponentialBackoff {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(30))
        .with_jitter()
        .without_max_times()
        .build()
}

/// Retries of loading and saving the ConfigMap.
fn persist_backoff() -> ExponentialBackoff {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
        .build()
}

fn next_delay(backoff: &mut ExponentialBackoff) -> Duration {
    // Built without a limit, so the iterator never ends; the fallback is for form's sake.
    backoff.next().unwrap_or(Duration::from_secs(5))
}

/// What the engine needs.
#[derive(Clone)]
pub struct EngineConfig {
    /// Client of the member cluster.
    pub client: kube::Client,
    /// The agent's namespace, holding the ConfigMap of saved assignments.
    pub namespace: String,
    /// Cluster the agent speaks for.
    pub cluster: String,
    /// Delay between a change and the report about it.
    pub report_debounce: Duration,
}

/// Why an apply failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The API server refused or failed the server-side apply.
    #[error("applying replicas to Deployment {namespace}/{name}: {source}")]
    Kube {
        /// Namespace of the Deployment.
        namespace: String,
        /// Name of the Deployment.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl ApplyError {
    /// The metric label of the error.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Kube { source, .. } => kube_error_kind(source),
        }
    }

    fn is_not_found(&self) -> bool {
        matches!(self, Self::Kube { source: kube::Error::Api(s), .. } if s.code == 404)
    }

    /// A short message for the status report.
    fn status_message(&self) -> String {
        match self {
            Self::Kube {
                source: kube::Error::Api(status),
                ..
            } => format!("server-side apply failed: {}", status.message),
            Self::Kube { source, .. } => format!("server-side apply failed: {source}"),
        }
    }
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
    /// A watch saw something.
    Watch(WatchEvent),
    /// A server-side apply finished.
    Applied {
        /// The policy applied.
        policy: PolicyKey,
        /// What was applied.
        target: ScaleTarget,
        /// `resourceVersion` of the Deployment the apply was decided on.
        from_rv: String,
        /// The Deployment's `resourceVersion` afterwards, or the error.
        result: Result<String, Box<ApplyError>>,
    },
    /// The saved state up to `seq` is in the ConfigMap.
    Persisted {
        /// Sequence number of the saved snapshot.
        seq: u64,
    },
}

/// State shared between the engine and its handles.
struct Shared {
    last_applied_revision: AtomicI64,
    next_stream: AtomicU64,
    loaded: watch::Sender<bool>,
    ready: AtomicBool,
}

/// Talks to a running engine.
#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<Input>,
    shared: Arc<Shared>,
}

impl EngineHandle {
    /// Passes a message from the hub.
    pub async fn hub_message(&self, message: HubMessage) {
        let _ = self.tx.send(Input::Hub(message)).await;
    }

    /// Tells the engine a stream opened; returns the stream id for [`Self::disconnected`].
    pub async fn connected(&self, outbox: mpsc::UnboundedSender<AgentMessage>) -> u64 {
        let id = self.shared.next_stream.fetch_add(1, Ordering::Relaxed);
        let _ = self.tx.send(Input::Connected { id, outbox }).await;
        id
    }

    /// Tells the engine stream `id` ended.
    pub async fn disconnected(&self, id: u64) {
        let _ = self.tx.send(Input::Disconnected { id }).await;
    }

    /// Highest hub revision applied, for Hello.
    pub fn last_applied_revision(&self) -> i64 {
        self.shared.last_applied_revision.load(Ordering::Relaxed)
    }

    /// Whether the saved assignments have been loaded (and are being enforced).
    pub fn is_loaded(&self) -> bool {
        self.shared.ready.load(Ordering::Relaxed)
    }

    /// Waits until the saved assignments have been loaded.
    pub async fn wait_loaded(&self) {
        let mut loaded = self.shared.loaded.subscribe();
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

/// Starts the engine: it loads the saved assignments, enforces them, and then follows its
/// inputs.
pub fn start(config: EngineConfig, metrics: Metrics) -> EngineTask {
    let (tx, rx) = mpsc::channel(INPUT_CAPACITY);
    let (loaded, _) = watch::channel(false);
    let shared = Arc::new(Shared {
        last_applied_revision: AtomicI64::new(0),
        next_stream: AtomicU64::new(1),
        loaded,
        ready: AtomicBool::new(false),
    });
    let store = StateStore::new(config.client.clone(), &config.namespace);
    let (persist_tx, persist_rx) = watch::channel(Snapshot::default());
    let engine = Engine {
        config,
        metrics: metrics.clone(),
        shared: shared.clone(),
        rx,
        tx: tx.clone(),
        book: AssignmentBook::default(),
        policies: BTreeMap::new(),
        targets: HashMap::new(),
        namespaces: HashMap::new(),
        stream: None,
        timers: BinaryHeap::new(),
        persist_tx,
        persist_seq: 0,
        unacked: Vec::new(),
        pending_reports: 0,
    };
    let task = tokio::spawn(async move {
        let writer = tokio::spawn(persist_loop(
            store.clone(),
            persist_rx,
            engine.tx.clone(),
            metrics,
        ));
        let _writer = AbortOnDrop(writer);
        engine.run(store).await;
    });
    EngineTask {
        handle: EngineHandle { tx, shared },
        task,
    }
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A state to save, numbered so acknowledgements can wait for it.
#[derive(Clone, Default)]
struct Snapshot {
    seq: u64,
    state: Arc<SavedState>,
}

/// Writes the latest snapshot to the ConfigMap, retrying with backoff; newer snapshots
/// replace older ones that were not written yet.
async fn persist_loop(
    store: StateStore,
    mut rx: watch::Receiver<Snapshot>,
    tx: mpsc::Sender<Input>,
    metrics: Metrics,
) {
    while rx.changed().await.is_ok() {
        let mut backoff = persist_backoff();
        loop {
            let snapshot = rx.borrow_and_update().clone();
            match store.save(&snapshot.state).await {
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
                    let delay = next_delay(&mut backoff);
                    warn!(error = %e, "could not save the assignments; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
}

/// Per-policy state of the engine.
#[derive(Default)]
struct PolicyRuntime {
    /// An apply is running.
    applying: bool,
    /// `resourceVersion` the Deployment had when the last successful apply was decided:
    /// while the cache still shows it, the watch has not delivered the result yet.
    awaiting_rv: Option<String>,
    /// The last apply's error, until an apply succeeds or the verdict changes.
    apply_error: Option<String>,
    /// No apply before this instant.
    retry_at: Option<Instant>,
    /// Applies since the Deployment was last seen synced.
    unsynced_applies: u32,
    backoff: Option<ExponentialBackoff>,
    /// The latest observation.
    latest: Option<Report>,
    /// When the debounced report goes out.
    debounce_at: Option<Instant>,
    /// Whether the hub lacks the latest observation (for the pending gauge).
    pending: bool,
    tracker: ReportTracker,
}

impl PolicyRuntime {
    fn delay(&mut self) -> Duration {
        next_delay(self.backoff.get_or_insert_with(apply_backoff))
    }

    fn settled(&mut self) {
        self.apply_error = None;
        self.retry_at = None;
        self.awaiting_rv = None;
        self.unsynced_applies = 0;
        self.backoff = None;
    }
}

/// The open stream to the hub.
struct Stream {
    id: u64,
    outbox: mpsc::UnboundedSender<AgentMessage>,
}

struct Engine {
    config: EngineConfig,
    metrics: Metrics,
    shared: Arc<Shared>,
    rx: mpsc::Receiver<Input>,
    tx: mpsc::Sender<Input>,
    book: AssignmentBook,
    policies: BTreeMap<PolicyKey, PolicyRuntime>,
    /// Managed policies by target Deployment (namespace, name).
    targets: HashMap<(String, String), BTreeSet<PolicyKey>>,
    namespaces: HashMap<String, NamespaceWatch>,
    stream: Option<Stream>,
    timers: BinaryHeap<Reverse<(Instant, PolicyKey)>>,
    persist_tx: watch::Sender<Snapshot>,
    persist_seq: u64,
    /// Revisions to acknowledge once the snapshot numbered with them is saved.
    unacked: Vec<(u64, i64)>,
    pending_reports: i64,
}

fn unix_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Engine {
    async fn run(mut self, store: StateStore) {
        self.load(&store).await;
        loop {
            let next = self.timers.peek().map(|Reverse((at, _))| *at);
            tokio::select! {
                input = self.rx.recv() => match input {
                    Some(input) => self.handle(input),
                    None => return,
                },
                () = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                    self.fire_timers();
                }
            }
        }
    }

    /// Loads the saved assignments (retrying while the API server does not answer) and
    /// starts enforcing them.
    async fn load(&mut self, store: &StateStore) {
        let mut backoff = persist_backoff();
        let saved = loop {
            match store.load().await {
                Ok(saved) => break saved,
                Err(e @ PersistError::Decode { .. }) => {
                    self.metrics.error(e.kind());
                    warn!(error = %e, "ignoring the saved assignments; the hub will resend them");
                    break None;
                }
                Err(e) => {
                    self.metrics.error(e.kind());
                    let delay = next_delay(&mut backoff);
                    warn!(error = %e, "could not load the saved assignments; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                }
            }
        };
        match saved {
            Some(state) if state.cluster == self.config.cluster || state.cluster.is_empty() => {
                info!(
                    policies = state.policies.len(),
                    revision = state.last_applied_revision,
                    "enforcing the saved assignments"
                );
                self.book = state.into_book();
            }
            Some(state) => warn!(
                saved_for = %state.cluster,
                cluster = %self.config.cluster,
                "ignoring saved assignments made for another cluster"
            ),
            None => debug!("no saved assignments"),
        }
        let keys: Vec<PolicyKey> = self.book.policies().keys().cloned().collect();
        for key in keys {
            self.policies.insert(key, PolicyRuntime::default());
        }
        self.book_changed();
        self.shared.ready.store(true, Ordering::Relaxed);
        self.shared.loaded.send_replace(true);
    }

    fn handle(&mut self, input: Input) {
        match input {
            Input::Hub(message) => match message.body {
                Some(hub_message::Body::Assignments(assignments)) => {
                    self.assignments(assignments);
                }
                Some(hub_message::Body::StatusAck(ack)) => self.status_ack(ack),
                None => debug!("empty message from the hub"),
            },
            Input::Connected { id, outbox } => self.connected(id, outbox),
            Input::Disconnected { id } => {
                if self.stream.as_ref().is_some_and(|s| s.id == id) {
                    self.stream = None;
                }
            }
            Input::Watch(event) => self.watch_event(event),
            Input::Applied {
                policy,
                target,
                from_rv,
                result,
            } => self.applied(policy, &target, from_rv, result),
            Input::Persisted { seq } => self.persisted(seq),
        }
    }

    // ---- assignments ----------------------------------------------------------------

    fn assignments(&mut self, message: accord_proto::v1::Assignments) {
        let revision = message.revision;
        let before = self.book.last_applied_revision();
        let update = convert::update(message);
        let full = update.full;
        let applied = self.book.apply(update);
        for (policy, what) in &applied.unhandled {
            debug!(%policy, what, "ignoring an assignment this agent does not handle yet");
        }
        self.metrics.assignments_applied.inc();
        info!(
            revision,
            full,
            upserted = applied.upserted.len(),
            removed = applied.removed.len(),
            stale = applied.stale,
            "applied assignments"
        );
        for key in &applied.removed {
            if let Some(rt) = self.policies.remove(key)
                && rt.pending
            {
                self.pending_reports -= 1;
            }
        }
        for key in &applied.upserted {
            let rt = self.policies.entry(key.clone()).or_default();
            // A new assignment starts over: no old error or backoff applies to it.
            rt.settled();
        }
        let changed = applied.changed() || self.book.last_applied_revision() != before;
        if changed {
            self.book_changed();
            self.persist_seq += 1;
            self.unacked.push((self.persist_seq, revision));
            self.persist_tx.send_replace(Snapshot {
                seq: self.persist_seq,
                state: Arc::new(SavedState::of(&self.config.cluster, &self.book)),
            });
        } else {
            self.ack(revision);
        }
        for key in applied.upserted {
            self.reconcile(&key);
        }
        self.metrics.reports_pending.set(self.pending_reports);
    }

    /// Rebuilds the target index and the set of watched namespaces.
    fn book_changed(&mut self) {
        self.shared
            .last_applied_revision
            .store(self.book.last_applied_revision(), Ordering::Relaxed);
        self.metrics
            .managed_policies
            .set(i64::try_from(self.book.policies().len()).unwrap_or(i64::MAX));
        self.targets.clear();
        for (key, assigned) in self.book.policies() {
            let s = &assigned.scale;
            if s.is_deployment() && !s.namespace.is_empty() && !s.name.is_empty() {
                self.targets
                    .entry((s.namespace.clone(), s.name.clone()))
                    .or_default()
                    .insert(key.clone());
            }
        }
        let needed: BTreeSet<String> = self.targets.keys().map(|(ns, _)| ns.clone()).collect();
        self.namespaces.retain(|ns, _| needed.contains(ns));
        for ns in needed {
            if !self.namespaces.contains_key(&ns) {
                debug!(namespace = %ns, "watching namespace");
                let watch =
                    NamespaceWatch::start(&self.config.client, &ns, self.tx.clone(), Input::Watch);
                self.namespaces.insert(ns, watch);
            }
        }
        // Targets that need no watch are judged right away.
        let unwatched: Vec<PolicyKey> = self
            .book
            .policies()
            .iter()
            .filter(|(_, a)| {
                let s = &a.scale;
                !s.is_deployment() || s.namespace.is_empty() || s.name.is_empty()
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in unwatched {
            self.reconcile(&key);
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

    fn watch_event(&mut self, event: WatchEvent) {
        match event {
            WatchEvent::Changed {
                kind: crate::watch::WatchedKind::Deployments,
                namespace,
                name,
            } => {
                let keys: Vec<PolicyKey> = self
                    .targets
                    .get(&(namespace, name))
                    .map(|set| set.iter().cloned().collect())
                    .unwrap_or_default();
                for key in keys {
                    self.reconcile(&key);
                }
            }
            WatchEvent::Changed {
                kind: crate::watch::WatchedKind::Hpas,
                namespace,
                ..
            } => self.reconcile_namespace(&namespace),
            WatchEvent::Synced { kind, namespace } => {
                if let Some(watch) = self.namespaces.get_mut(&namespace) {
                    watch.mark_synced(kind);
                    if watch.synced() {
                        self.reconcile_namespace(&namespace);
                    }
                }
            }
            WatchEvent::Failed {
                namespace, message, ..
            } => {
                self.metrics.error("watch");
                warn!(error = %message, "watch failed; retrying");
                if let Some(watch) = self.namespaces.get_mut(&namespace)
                    && !watch.synced()
                {
                    watch.error = Some(message);
                    self.reconcile_namespace(&namespace);
                }
            }
        }
        self.metrics.reports_pending.set(self.pending_reports);
    }

    fn reconcile_namespace(&mut self, namespace: &str) {
        let keys: Vec<PolicyKey> = self
            .targets
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .flat_map(|(_, set)| set.iter().cloned())
            .collect();
        for key in keys {
            self.reconcile(&key);
        }
    }

    // ---- reconcile ------------------------------------------------------------------

    /// Judges one policy against the cache, applies if needed, and updates its report.
    fn reconcile(&mut self, key: &PolicyKey) {
        let Some(assigned) = self.book.get(key).cloned() else {
            return;
        };
        let target = &assigned.scale;
        let now = Instant::now();

        // Another policy got to this Deployment first: only one may own its replicas.
        let owner = self
            .targets
            .get(&(target.namespace.clone(), target.name.clone()))
            .and_then(|set| set.first())
            .filter(|owner| *owner != key)
            .cloned();

        let watched =
            target.is_deployment() && !target.namespace.is_empty() && !target.name.is_empty();
        let (verdict, deployment) = if !watched {
            (observe::verdict(target, None, []), None)
        } else {
            let Some(watch) = self.namespaces.get(&target.namespace) else {
                return;
            };
            if !watch.synced() {
                if let Some(message) = watch.error.clone() {
                    let report = Report::without_object(
                        PlacementState::Unavailable,
                        message,
                        assigned.revision,
                    );
                    self.observed(key, report, now);
                }
                return;
            }
            let deployment = watch
                .deployments
                .get(&ObjectRef::new(&target.name).within(&target.namespace));
            let hpas = watch.hpas.state();
            let verdict = match &owner {
                Some(owner) if deployment.is_some() => Verdict::Conflict(format!(
                    "policy {owner} already sets the replicas of Deployment {}/{}",
                    target.namespace, target.name
                )),
                _ => observe::verdict(
                    target,
                    deployment.as_deref(),
                    hpas.iter().map(AsRef::as_ref),
                ),
            };
            (verdict, deployment)
        };

        let Some(rt) = self.policies.get_mut(key) else {
            return;
        };
        let mut apply_from = None;
        match &verdict {
            Verdict::NeedsApply => {
                let rv = deployment
                    .as_ref()
                    .and_then(|d| d.metadata.resource_version.clone())
                    .unwrap_or_default();
                if rt.awaiting_rv.as_deref() == Some(rv.as_str()) {
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
                    rt.awaiting_rv = None;
                    rt.retry_at = None;
                    rt.applying = true;
                    rt.unsynced_applies += 1;
                    apply_from = Some(rv);
                }
            }
            Verdict::Synced
            | Verdict::TargetNotFound
            | Verdict::Conflict(_)
            | Verdict::Unsupported(_) => rt.settled(),
        }
        let apply_error = rt.apply_error.clone();
        if let Some(rv) = apply_from {
            self.spawn_apply(key.clone(), target.clone(), rv);
        }
        let report = observe::report(
            &assigned,
            &verdict,
            deployment.as_deref(),
            apply_error.as_deref(),
        );
        self.observed(key, report, now);
    }

    fn spawn_apply(&self, policy: PolicyKey, target: ScaleTarget, from_rv: String) {
        let api: Api<Deployment> = Api::namespaced(self.config.client.clone(), &target.namespace);
        let tx = self.tx.clone();
        debug!(%policy, namespace = %target.namespace, name = %target.name, replicas = target.replicas, "applying replicas");
        tokio::spawn(async move {
            let patch = observe::scale_patch(&target);
            let result = api
                .patch(
                    &target.name,
                    &PatchParams::apply(AGENT_FIELD_MANAGER).force(),
                    &Patch::Apply(&patch),
                )
                .await
                .map(|d| d.metadata.resource_version.unwrap_or_default())
                .map_err(|source| {
                    Box::new(ApplyError::Kube {
                        namespace: target.namespace.clone(),
                        name: target.name.clone(),
                        source,
                    })
                });
            let _ = tx
                .send(Input::Applied {
                    policy,
                    target,
                    from_rv,
                    result,
                })
                .await;
        });
    }

    fn applied(
        &mut self,
        key: PolicyKey,
        target: &ScaleTarget,
        from_rv: String,
        result: Result<String, Box<ApplyError>>,
    ) {
        let current = self.book.get(&key).map(|a| &a.scale);
        let Some(rt) = self.policies.get_mut(&key) else {
            return;
        };
        rt.applying = false;
        if current != Some(target) {
            // The assignment changed while applying; judge the new one.
            self.reconcile(&key);
            return;
        }
        match result {
            Ok(rv) => {
                self.metrics.scale_applies.inc();
                rt.apply_error = None;
                // If the apply changed nothing, there is no watch event to wait for.
                rt.awaiting_rv = (rv != from_rv).then_some(from_rv);
                info!(policy = %key, namespace = %target.namespace, name = %target.name, replicas = target.replicas, scale_request_id = %target.scale_request_id, "applied scale request");
            }
            Err(e) => {
                self.metrics.error(e.kind());
                rt.awaiting_rv = None;
                let at = Instant::now() + rt.delay();
                rt.retry_at = Some(at);
                self.timers.push(Reverse((at, key.clone())));
                if e.is_not_found() {
                    // Deleted under the apply: the watch reports TargetNotFound.
                    rt.apply_error = None;
                } else {
                    warn!(policy = %key, error = %e, "apply failed; retrying with backoff");
                    rt.apply_error = Some(e.status_message());
                }
            }
        }
        self.reconcile(&key);
    }

    // ---- reports --------------------------------------------------------------------

    /// Takes a fresh observation of `key` and schedules its report if the hub lacks it.
    fn observed(&mut self, key: &PolicyKey, report: Report, now: Instant) {
        let debounce = self.config.report_debounce;
        let Some(rt) = self.policies.get_mut(key) else {
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

    fn update_pending(&mut self, key: &PolicyKey) {
        let Some(rt) = self.policies.get_mut(key) else {
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
            let Some(rt) = self.policies.get_mut(&key) else {
                continue;
            };
            if rt.retry_at.is_some_and(|at| at <= now) {
                self.reconcile(&key);
            }
            let Some(rt) = self.policies.get_mut(&key) else {
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
    fn flush_report(&mut self, key: &PolicyKey) {
        let Some(stream) = &self.stream else {
            return;
        };
        let Some(rt) = self.policies.get_mut(key) else {
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
        let message = AgentMessage {
            cluster: self.config.cluster.clone(),
            body: Some(agent_message::Body::StatusReport(convert::status_report(
                key,
                &report,
                expected,
                unix_millis(),
            ))),
        };
        if stream.outbox.send(message).is_ok() {
            self.metrics.reports_sent.inc();
            debug!(policy = %key, state = %report.state, expected, "sent status report");
        }
        self.update_pending(key);
    }

    fn status_ack(&mut self, ack: StatusAck) {
        let Some(policy) = ack.policy.as_ref().map(convert::policy_key) else {
            debug!("StatusAck without a policy");
            return;
        };
        match ack.result {
            Some(status_ack::Result::Accepted(_)) => self.metrics.ack("accepted"),
            Some(status_ack::Result::Conflict(_)) => self.metrics.ack("conflict"),
            None => {}
        }
        let Some(rt) = self.policies.get_mut(&policy) else {
            // No longer managed: nothing to follow up.
            return;
        };
        match ack.result {
            Some(status_ack::Result::Accepted(version)) => {
                rt.tracker.accepted_at(version);
                self.flush_report(&policy);
            }
            Some(status_ack::Result::Conflict(current)) => {
                match rt.tracker.conflict(current) {
                    AfterConflict::Resend | AfterConflict::ResendIfNewer => {
                        // A fresh observation of the cache, stamped with the current time.
                        self.reconcile(&policy);
                        self.flush_report(&policy);
                    }
                    AfterConflict::GiveUp => warn!(
                        %policy,
                        current,
                        "the hub keeps refusing this policy's reports; waiting for the next change"
                    ),
                }
            }
            None => debug!(%policy, "StatusAck without a result"),
        }
        self.update_pending(&policy);
        self.metrics.reports_pending.set(self.pending_reports);
    }

    // ---- stream ---------------------------------------------------------------------

    fn connected(&mut self, id: u64, outbox: mpsc::UnboundedSender<AgentMessage>) {
        self.stream = Some(Stream { id, outbox });
        // Acknowledgements are implied by Hello's last applied revision.
        let keys: Vec<PolicyKey> = self.policies.keys().cloned().collect();
        for key in keys {
            if let Some(rt) = self.policies.get_mut(&key) {
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
}
