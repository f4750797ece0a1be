//! The leader's controllers, in one shape: each gets the same [`ControllerContext`]
//! (clients, store, connections, metrics, Event recorder, election) and a subscription to
//! the one ManagedCluster reflector they share, reports errors through [`report_error`]
//! and retries through [`error_policy`].
//!
//! Every controller watches its kind as [`Lenient`] objects and decodes each one in
//! reconcile ([`decode_or_invalid`]), so one object that does not fit its Rust type gets
//! `Ready=False`/`InvalidSpec` and never stops the others. A controller that ends while
//! leading ends [`run`] with an error, and the hub's supervisor stops the process.
//!
//! Every kind that places something in member clusters is a plug-in of the one generic
//! controller ([`placement`]). The controllers know no kind: the kinds are registered at the
//! top (`crate::kinds`), which hands them over as [`Registered`]. See docs/architecture.md,
//! "Adding a kind".

pub mod cluster_status;
pub mod field_owners;
pub mod lenient;
pub mod name_claims;
pub mod placement;
pub mod reconcile_pace;
pub mod secret_changes;
pub mod tombstones;
pub mod transitions;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use accord_common::runtime::{Retry, backoff};
use accord_crds::StatusLimits;
use dashmap::DashMap;
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use kube::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ReflectHandle, Store as Reflector};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::oneshot;
use tracing::{info, warn};

use crate::connections::Connections;
use crate::distribution::PlacementRecord;
use crate::distribution::secrets::Secrets;
use crate::distribution::select::ClusterIndex;
use crate::http::ReadinessGates;
use crate::metrics::Metrics;
use crate::store::election::LeaderElection;
use crate::store::{PrefixCache, StatusRecord, Store, error_chain};
use crate::supervisor::{Supervisor, SupervisorError};
use crate::writes::{Pace, Writes};
pub use lenient::{Decoded, Lenient, decode_or_invalid};

pub use crate::distribution::select::ClusterObject;
/// One controller's subscription to the shared ManagedCluster reflector.
pub type ClusterEvents = ReflectHandle<ClusterObject>;

/// Events the shared ManagedCluster reflector buffers for a slow subscriber.
const CLUSTER_EVENT_BUFFER: usize = 1024;
/// Shortest and longest wait before a transient error is retried.
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// Errors that end the controllers' work.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// A controller (or the shared reflector) stopped while this replica led.
    #[error("a controller stopped while leading")]
    Stopped(#[source] SupervisorError),
    /// A controller's own streams ended (it should run until stopped).
    #[error("{0} stopped")]
    Ended(&'static str),
    /// etcd could not be followed.
    #[error("following etcd")]
    Store(#[source] crate::store::StoreError),
    /// The leader election ended.
    #[error("the leader election ended")]
    ElectionEnded,
}

/// Errors of one reconcile, for every controller of a placement-writing kind.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The Kubernetes API refused or failed a call.
    #[error("kubernetes")]
    Kube(#[from] kube::Error),
    /// etcd failed, or this replica lost leadership mid-way.
    #[error("etcd")]
    Store(#[from] crate::store::StoreError),
    /// The placed object's lock could not be taken in time.
    #[error("timed out waiting for the lock of {0}")]
    LockTimeout(String),
    /// This replica is not the leader.
    #[error("not the leader")]
    NotLeader,
    /// The finalizer could not be added or removed (or the object changed meanwhile).
    #[error("finalizer: {0}")]
    Finalizer(String),
    /// A kind's own step failed in a way that retrying cannot mend until something
    /// changes (e.g. a shared config that does not render): `category` is its metric label.
    #[error("{category}: {message}")]
    Kind {
        /// A short, stable name of what failed (a metric label).
        category: &'static str,
        /// What failed.
        message: String,
    },
}

impl ErrorCategory for ReconcileError {
    fn category(&self) -> &'static str {
        match self {
            Self::Kube(_) => "kubernetes",
            Self::Store(e) => e.kind(),
            Self::LockTimeout(_) => "lock_timeout",
            Self::NotLeader => "not_leader",
            Self::Finalizer(_) => "finalizer",
            Self::Kind { category, .. } => category,
        }
    }

    fn is_transient(&self) -> bool {
        match self {
            // A request the API server refuses as malformed repeats until the object
            // changes; conflicts, throttling and server errors pass.
            Self::Kube(kube::Error::Api(status)) => {
                !(400..500).contains(&status.code) || matches!(status.code, 409 | 429)
            }
            Self::Kube(_) | Self::LockTimeout(_) | Self::Finalizer(_) => true,
            Self::Store(e) => e.is_transient(),
            // A new term restarts every controller; nothing to retry in this one.
            Self::NotLeader | Self::Kind { .. } => false,
        }
    }
}

/// An error's category (a metric label, an Event reason) and whether retrying may help.
pub trait ErrorCategory: std::error::Error + 'static {
    /// A short, stable name, e.g. `kubernetes`, `etcd`, `lock_timeout`.
    fn category(&self) -> &'static str;
    /// True when the same call may succeed later by itself (requeue with backoff); false
    /// when it repeats until the object or the world changes (wait for a change).
    fn is_transient(&self) -> bool;
}

/// The one place a controller error is reported: logged once with its whole chain, and
/// counted by category.
pub fn report_error<E: ErrorCategory>(metrics: &Metrics, object: &str, error: &E) {
    metrics.error(error.category());
    warn!(
        object,
        category = error.category(),
        transient = error.is_transient(),
        error = %error_chain(error),
        "reconcile failed"
    );
}

/// What every controller works with.
pub struct ControllerContext {
    /// The management cluster.
    pub kube: kube::Client,
    /// etcd state.
    pub store: Store,
    /// The election whose fence guards every write.
    pub election: Arc<LeaderElection>,
    /// Agent streams this replica holds.
    pub connections: Connections,
    /// Metrics.
    pub metrics: Metrics,
    /// Every write to the management API server beyond the placements: aggregated Events
    /// and coalesced status writes.
    pub writes: Writes,
    /// Every placed object's placements record.
    pub placements: PrefixCache<PlacementRecord>,
    /// Every cluster's last report on every placed object.
    pub statuses: PrefixCache<StatusRecord>,
    /// Where every progressive rollout is.
    pub rollouts: PrefixCache<crate::distribution::rollout::RolloutRecord>,
    /// What the registered kinds keep for the term beyond this context
    /// ([`Registered::extensions`]), by type.
    pub extensions: Extensions,
    /// The shared ManagedCluster reflector's store.
    pub clusters: Reflector<ClusterObject>,
    /// The same ManagedClusters as the controllers read them, kept from the same watch.
    pub cluster_index: ClusterIndex,
    /// The hub's own namespace.
    pub namespace: String,
    /// How many placements a status lists.
    pub status_limits: StatusLimits,
    /// Every placed object's full status (what the status would list without the limits).
    pub views: crate::placements::Views,
    /// The management cluster's Secrets (`secretRefs` of the kinds that deliver them).
    pub secrets: Secrets,
    /// Which placed object owns a field that more than one kind could set in a member.
    pub field_owners: field_owners::FieldOwners,
    /// Backoff state of objects whose last reconcile failed transiently.
    retries: DashMap<String, Retry>,
}

impl ControllerContext {
    /// The context of one term: `deps`, the caches of the agents' reports and of the
    /// autoscaler's state (followed from now on), the writers, and `clusters`, the shared
    /// ManagedCluster reflector's store.
    pub async fn start(
        deps: &ControllerDeps,
        options: &ControllerOptions,
        clusters: Reflector<ClusterObject>,
        cluster_index: ClusterIndex,
    ) -> Result<Self, ControllerError> {
        let writes = Writes::with_intervals(
            deps.kube.clone(),
            Reporter {
                controller: "accord-hub".into(),
                instance: Some(deps.replica.clone()),
            },
            &deps.metrics,
            crate::writes::events::DEFAULT_REPEAT_INTERVAL,
            options.status_window,
            options.status_progress_interval,
        );
        let statuses = PrefixCache::<StatusRecord>::start(
            deps.store.clone(),
            deps.store.keys().status_prefix(),
        )
        .await
        .map_err(ControllerError::Store)?;
        let rollouts = PrefixCache::start(deps.store.clone(), deps.store.keys().rollouts_prefix())
            .await
            .map_err(ControllerError::Store)?;
        let mut extensions = Extensions::default();
        for start in &deps.kinds.extensions {
            extensions.insert(
                start(deps.store.clone())
                    .await
                    .map_err(ControllerError::Store)?,
            );
        }
        Ok(Self {
            kube: deps.kube.clone(),
            store: deps.store.clone(),
            election: deps.election.clone(),
            connections: deps.connections.clone(),
            metrics: deps.metrics.clone(),
            writes,
            placements: deps.placements.clone(),
            statuses,
            rollouts,
            extensions,
            clusters,
            cluster_index,
            namespace: deps.namespace.clone(),
            status_limits: options.status_limits,
            views: deps.views.clone(),
            secrets: deps.secrets.clone(),
            field_owners: field_owners::FieldOwners::new(deps.kinds.field_claimants),
            retries: DashMap::new(),
        })
    }

    /// The wait before `object` is retried after a transient error (growing while it keeps
    /// failing).
    pub fn retry_delay(&self, object: &str) -> Duration {
        self.retries
            .entry(object.to_owned())
            .or_insert_with(|| backoff(RETRY_MIN, RETRY_MAX))
            .next_delay()
    }

    /// Forgets `object`'s backoff after a successful reconcile.
    pub fn succeeded(&self, object: &str) {
        self.retries.remove(object);
    }

    /// Publishes `note` as an Event about `object` (a repeat of the same note is counted
    /// on the Event already there), written in the background so that it never holds up
    /// a reconcile; a failure to publish is only logged.
    pub fn note(
        &self,
        object: &k8s_openapi::api::core::v1::ObjectReference,
        note: placement::Note,
    ) {
        self.writes
            .events
            .publish(object, note.type_, &note.reason, "Reconcile", note.message);
    }

    /// Writes `object`'s status from `current` (as the API server holds it) to `desired`,
    /// coalesced: at most one write per object per window (per progress interval for
    /// [`Pace::Progress`]), nothing when they are equal.
    pub fn submit_status<K>(
        &self,
        object: &Lenient<K>,
        current: serde_json::Value,
        desired: serde_json::Value,
        pace: Pace,
    ) where
        K: kube::Resource<DynamicType = ()>,
    {
        self.writes.status.submit_paced::<K>(
            object.metadata.namespace.as_deref(),
            &kube::ResourceExt::name_any(object),
            current,
            desired,
            pace,
        );
    }
}

/// The shared `error_policy`: report once; wait for the next change on a permanent error,
/// requeue with backoff on a transient one.
pub fn error_policy<E: ErrorCategory>(ctx: &ControllerContext, object: &str, error: &E) -> Action {
    report_error(&ctx.metrics, object, error);
    if error.is_transient() {
        Action::requeue(ctx.retry_delay(object))
    } else {
        Action::await_change()
    }
}

/// Tells the hub's readiness that a controller has listed what it watches.
pub type Listed = oneshot::Sender<()>;

pub use crate::writes::merge_patch;

/// Writes a CR's status as the merge patch from `old` (what the controller read) to `new`,
/// so that fields that became empty are removed.
pub async fn patch_status<K, S>(
    api: &Api<K>,
    name: &str,
    old: Option<&S>,
    new: &S,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: serde::Serialize,
{
    let value = |s: &S| serde_json::to_value(s).unwrap_or(serde_json::Value::Null);
    let old = old.map_or_else(|| serde_json::json!({}), value);
    let patch = merge_patch(&old, &value(new));
    api.patch_status(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({ "status": patch })),
    )
    .await?;
    Ok(())
}

/// What a controller does with each result of its reconcile stream: errors were reported
/// by its error policy already, so they are only traced here.
pub fn trace_result<T, E: std::fmt::Display>(result: Result<T, E>) -> futures::future::Ready<()> {
    if let Err(e) = result {
        tracing::debug!(error = %e, "controller event");
    }
    futures::future::ready(())
}

/// How a controller starts: with the term's context, its subscription to the shared
/// ManagedCluster reflector and the sender that tells readiness it has listed. It runs
/// until it fails (it should not end while leading).
pub type StartController = Arc<
    dyn Fn(
            Arc<ControllerContext>,
            ClusterEvents,
            Listed,
        ) -> BoxFuture<'static, Result<(), ControllerError>>
        + Send
        + Sync,
>;

/// One controller the leader runs.
#[derive(Clone)]
pub struct Controller {
    /// Its name, for logs and supervision.
    pub name: &'static str,
    start: StartController,
}

impl Controller {
    /// A controller of its own shape, started by `start`.
    pub fn new(
        name: &'static str,
        start: impl Fn(
            Arc<ControllerContext>,
            ClusterEvents,
            Listed,
        ) -> BoxFuture<'static, Result<(), ControllerError>>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self {
            name,
            start: Arc::new(start),
        }
    }

    /// The generic placement controller ([`placement::run`]) of kind `K` with `options`.
    pub fn placement<K: placement::PlacementKind>(options: K::Options) -> Self {
        Self::new(K::CONTROLLER, move |ctx, clusters, listed| {
            Box::pin(placement::run::<K>(ctx, clusters, listed, options.clone()))
        })
    }
}

/// Starts something a kind keeps for a leader's term beyond the [`ControllerContext`]
/// (e.g. a cache of its own etcd prefix), found by its type in
/// [`ControllerContext::extensions`].
pub type StartExtension =
    fn(Store) -> BoxFuture<'static, Result<Box<dyn Any + Send + Sync>, crate::store::StoreError>>;

/// Values of distinct types, found by type: what the registered kinds keep for a term.
#[derive(Default)]
pub struct Extensions(HashMap<TypeId, Box<dyn Any + Send + Sync>>);

impl Extensions {
    /// Keeps `value` under its own type (replacing one of the same type).
    pub fn insert(&mut self, value: Box<dyn Any + Send + Sync>) {
        self.0.insert((*value).type_id(), value);
    }

    /// The value of type `T`; `None` when no registered kind keeps one.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.get(&TypeId::of::<T>())?.downcast_ref()
    }
}

/// What the registered kinds bring to the controllers (built by `crate::kinds`).
#[derive(Clone, Default)]
pub struct Registered {
    /// Every kind's controllers, in start order (the ManagedCluster status writer, which
    /// is no kind's, runs beside them).
    pub controllers: Vec<Controller>,
    /// The kinds whose objects claim fields of other kinds' deliveries
    /// ([`placement::PlacementKind::field_claims`]).
    pub field_claimants: &'static [accord_common::distribution::PlacedKind],
    /// What the kinds keep for a term beyond the context.
    pub extensions: Vec<StartExtension>,
}

impl Registered {
    /// Every controller a term runs: the kinds' and the ManagedCluster status writer.
    fn all(&self) -> Vec<Controller> {
        let mut all = self.controllers.clone();
        all.push(Controller::new(
            "ManagedCluster status writer",
            |ctx, clusters, listed| Box::pin(cluster_status::run(ctx, clusters, listed)),
        ));
        all
    }
}

/// Default of [`ControllerOptions::status_window`] (`--status-coalesce-window`).
pub const DEFAULT_STATUS_WINDOW: Duration = Duration::from_millis(200);

/// Settings of the controllers beyond their dependencies, each with the default of its
/// `serve` flag.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// `--status-coalesce-window`: an object's status is written at most once per window,
    /// however many members report within it.
    pub status_window: Duration,
    /// `--status-progress-interval`: a status that only shows progress (members that have
    /// not reported on the current decision yet) is written at most once per interval; an
    /// outcome or a new decision is written within the window.
    pub status_progress_interval: Duration,
    /// `--status-placements-threshold` and `--status-placements-listed`: how many
    /// placements an object's status lists.
    pub status_limits: StatusLimits,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        Self {
            status_window: DEFAULT_STATUS_WINDOW,
            status_progress_interval: crate::writes::status::DEFAULT_PROGRESS_INTERVAL,
            status_limits: StatusLimits::default(),
        }
    }
}

/// What the controllers are started with.
#[derive(Clone)]
pub struct ControllerDeps {
    /// The management cluster.
    pub kube: kube::Client,
    /// etcd state.
    pub store: Store,
    /// This replica's election.
    pub election: Arc<LeaderElection>,
    /// Agent streams.
    pub connections: Connections,
    /// Metrics.
    pub metrics: Metrics,
    /// Placements records.
    pub placements: PrefixCache<PlacementRecord>,
    /// This replica's name (the Events' reporting instance).
    pub replica: String,
    /// The hub's readiness.
    pub gates: ReadinessGates,
    /// The hub's own namespace.
    pub namespace: String,
    /// Every placed object's full status, served by the HTTP endpoint.
    pub views: crate::placements::Views,
    /// The management cluster's Secrets (`secretRefs` of the kinds that deliver them).
    pub secrets: Secrets,
    /// The kinds: their controllers and what they keep for a term.
    pub kinds: Registered,
}

/// Runs every controller while this replica leads. Returns an error — and so stops the
/// hub — when a controller or the shared reflector ends while leading: a leader never
/// keeps leading with a dead controller. Being deposed stops them and waits for the next
/// term.
pub async fn run(deps: ControllerDeps) -> Result<(), ControllerError> {
    run_with(deps, ControllerOptions::default()).await
}

/// [`run`] with `options` instead of the defaults.
pub async fn run_with(
    deps: ControllerDeps,
    options: ControllerOptions,
) -> Result<(), ControllerError> {
    let mut leadership = deps.election.subscribe();
    loop {
        let leading = leadership.borrow_and_update().is_some();
        deps.metrics.is_leader.set(i64::from(leading));
        if !leading {
            deps.gates.set_controllers_listed(true);
            leadership
                .changed()
                .await
                .map_err(|_| ControllerError::ElectionEnded)?;
            continue;
        }
        info!("leading: starting the controllers");
        let deposed = async {
            while leadership.changed().await.is_ok() {
                if leadership.borrow().is_none() {
                    return;
                }
            }
            std::future::pending::<()>().await;
        };
        tokio::select! {
            result = lead(&deps, &options) => return result,
            () = deposed => {
                deps.views.clear();
                info!("no longer leading: controllers stopped");
            }
        }
    }
}

/// Drops an object's `managedFields` before a reflector keeps it: nothing in the hub reads
/// them, and in a ManagedCluster they were a third of what each of a fleet's objects cost
/// in memory.
pub fn without_managed_fields<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// One term: the shared ManagedCluster reflector, every controller, and readiness once
/// they all listed. Returns only when one of them ends.
async fn lead(deps: &ControllerDeps, options: &ControllerOptions) -> Result<(), ControllerError> {
    deps.gates.set_controllers_listed(false);
    let (clusters, writer) = reflector::store_shared::<ClusterObject>(CLUSTER_EVENT_BUFFER);
    let controllers = deps.kinds.all();
    let subscriptions: Vec<ClusterEvents> = controllers
        .iter()
        .map(|_| {
            writer
                .subscribe()
                .expect("a shared store can be subscribed")
        })
        .collect();
    let cluster_index = ClusterIndex::default();
    let mut index_writer = cluster_index.writer();
    let ctx =
        Arc::new(ControllerContext::start(deps, options, clusters.clone(), cluster_index).await?);
    let mut term = Supervisor::new();
    let api: Api<ClusterObject> = Api::all(deps.kube.clone());
    term.spawn_forever(
        "ManagedCluster reflector",
        accord_common::watch::watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(without_managed_fields)
            // The index before the reflector: a reconcile that a reflector event triggers
            // reads the change already.
            .inspect_ok(move |event| index_writer.apply(event))
            .reflect_shared(writer)
            .for_each(|_| futures::future::ready(())),
    );
    // Controllers start once the ManagedCluster list is in: a placed object reconciled by a new
    // leader against an empty list counts every cluster as unregistered and moves its whole
    // share away (to 0 everywhere) until the list arrives a moment later.
    if clusters.wait_until_ready().await.is_err() {
        return Err(ControllerError::Stopped(term.next_exit().await));
    }
    let mut listed = Vec::new();
    for (controller, events) in controllers.iter().zip(subscriptions) {
        let (tx, rx) = oneshot::channel();
        listed.push(rx);
        term.spawn(controller.name, (controller.start)(ctx.clone(), events, tx));
    }
    let gates = deps.gates.clone();
    term.spawn_forever("controller readiness", async move {
        let clusters_ready = clusters.wait_until_ready().await.is_ok();
        let all_listed = futures::future::join_all(listed)
            .await
            .into_iter()
            .all(|r| r.is_ok());
        if clusters_ready && all_listed {
            info!("every controller has listed its objects");
            gates.set_controllers_listed(true);
        }
        // Stay in the set: this task ending is not a failure.
        std::future::pending::<()>().await;
    });
    Err(ControllerError::Stopped(term.next_exit().await))
}

#[cfg(test)]
mod tests {
    use super::{ErrorCategory as _, ReconcileError, merge_patch};
    use serde_json::json;

    fn api_error(code: u16) -> ReconcileError {
        ReconcileError::Kube(kube::Error::Api(Box::new(
            kube::core::Status::failure("refused", "Test").with_code(code),
        )))
    }

    #[test]
    fn refused_requests_wait_for_a_change_and_passing_trouble_is_retried() {
        assert!(!api_error(422).is_transient(), "an invalid patch repeats");
        assert!(!api_error(403).is_transient(), "missing RBAC repeats");
        assert!(
            !api_error(404).is_transient(),
            "a missing namespace repeats"
        );
        assert!(api_error(409).is_transient(), "a conflict passes");
        assert!(api_error(429).is_transient(), "throttling passes");
        assert!(
            api_error(503).is_transient(),
            "an unavailable API server passes"
        );
        assert!(ReconcileError::LockTimeout("ns/p".into()).is_transient());
        assert!(ReconcileError::Finalizer("x".into()).is_transient());
        assert!(!ReconcileError::NotLeader.is_transient());
        let kind = || ReconcileError::Kind {
            category: "render",
            message: "x".into(),
        };
        assert!(!kind().is_transient());
        assert!(!ReconcileError::Store(crate::store::StoreError::Fenced).is_transient());
        assert_eq!(api_error(500).category(), "kubernetes");
        assert_eq!(ReconcileError::NotLeader.category(), "not_leader");
        assert_eq!(kind().category(), "render");
        assert_eq!(
            ReconcileError::LockTimeout("ns/p".into()).category(),
            "lock_timeout"
        );
    }

    #[test]
    fn a_merge_patch_removes_what_became_empty_at_any_depth_and_leaves_the_rest() {
        let old = json!({
            "observedGeneration": 3,
            "global": {"state": "Pending", "message": "waiting", "jobs": 2},
            "message": "infeasible",
            "placements": [{"cluster": "a", "message": "x"}],
        });
        let new = json!({
            "observedGeneration": 4,
            "global": {"state": "Synced", "jobs": 2},
            "placements": [{"cluster": "a"}],
        });
        assert_eq!(
            merge_patch(&old, &new),
            json!({
                "observedGeneration": 4,
                "global": {"state": "Synced", "message": null},
                "message": null,
                "placements": [{"cluster": "a"}],
            })
        );
        assert_eq!(merge_patch(&json!({}), &new), new);
        assert_eq!(merge_patch(&new, &new), json!({}));
    }
}
