//! The one placement controller: every kind that places something in member clusters is a
//! [`PlacementKind`] plug-in, and this module does the rest once.
//!
//! For each object of the kind: lenient decode (one that does not decode gets
//! `Ready=False`/`InvalidSpec` and never stops the others) → the kind's pure decision from
//! the spec, the ManagedClusters and the stored record → same-decision check → a new
//! decision written fenced by leadership and under the policy's lock, then read back from
//! the cache → the agents' reports → the kind's status aggregation → one coalesced status
//! write when it changed, and Events on transitions only.
//!
//! Deletion needs no finalizer unless the kind says so for an object
//! ([`PlacementKind::finalizer`]): when an object is gone, its placements record, the
//! agents' status records and whatever the kind keeps ([`PlacementKind::forget`]) are
//! removed, and every (re)list sweeps the records of objects that went while no replica
//! led. A kind whose deletion must wait for the members (a Kafka topic with
//! `deletionPolicy: Delete`) asks for a finalizer and finishes in
//! [`PlacementKind::finalize`]; finalizers earlier hub versions put on every object
//! ([`PlacementKind::LEGACY_FINALIZERS`]) are released at deletion.
//!
//! Triggers: the objects themselves, ManagedCluster changes of labels, availability,
//! schedulability or spec (every object that may select the cluster), the agents' status
//! records of the kind, and whatever the kind adds ([`Started::tasks`] send to its
//! [`Trigger`]).

use accord_common::distribution::PolicyKind;
use accord_crds::StatusLimits;
use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use accord_common::distribution::PolicyRef;
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, Store as Reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tracing::{debug, info};

use super::field_owners::FieldOwners;
use super::lenient::invalid_status;
use super::reconcile_pace::ReconcilePace;
use super::{
    ClusterEvents, ControllerContext, ControllerError, Decoded, Lenient, Listed, ReconcileError,
    decode_or_invalid, error_policy, trace_result,
};
use crate::distribution::reported::Placed;
use crate::distribution::select::{ClusterInfo, Clusters};
use crate::distribution::{PlacementRecord, ShareRecord};
use crate::store::{StatusRecord, StoreError};
use crate::writes::Pace;
use accord_common::metrics::KindLabel;

/// Re-check every object this often even without events.
pub const RESYNC: Duration = Duration::from_secs(300);
/// Events a kind's shared reflector buffers for its controller.
const EVENT_BUFFER: usize = 1024;
/// TTL of a policy's lock; a hub that dies holding it frees it within this.
const LOCK_TTL: Duration = Duration::from_secs(5);
/// Longest wait for a policy's lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// An object of kind `K` as watched: it always decodes this far.
pub type Watched<K> = Lenient<<K as PlacementKind>::Object>;
/// Sends an object of kind `K` to be reconciled.
pub type Trigger<K> = mpsc::UnboundedSender<ObjectRef<Watched<K>>>;

/// An Event to publish about an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Normal or Warning.
    pub type_: EventType,
    /// The Event's reason (CamelCase).
    pub reason: String,
    /// The Event's message.
    pub message: String,
}

impl Note {
    /// A Normal Event.
    pub fn normal(reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_: EventType::Normal,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }

    /// A Warning Event.
    pub fn warning(reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_: EventType::Warning,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }
}

/// What a kind decides from.
pub struct DecideInput<'a, D> {
    /// Every ManagedCluster by name.
    pub clusters: &'a Clusters,
    /// The stored record, if the object has one.
    pub previous: Option<&'a PlacementRecord<D>>,
    /// Now, Unix milliseconds.
    pub now_millis: i64,
}

/// A kind's decision about one object.
pub enum Decided<K: PlacementKind> {
    /// These shares and this decision data; written when they differ from the stored
    /// record. `recheck_after`: reconcile again then even without events (a cooldown).
    Record {
        /// Every cluster's share.
        shares: Vec<ShareRecord>,
        /// The kind's own decision data.
        decision: K::Decision,
        /// What the status aggregation needs beyond the record.
        facts: K::Facts,
        /// Reconcile again after this even without events.
        recheck_after: Option<Duration>,
    },
    /// Nothing new is sent: the members keep what they were last sent. `shown` are the
    /// shares the status shows when nothing was ever stored.
    Hold {
        /// Shares to show when there is no stored record.
        shown: Vec<ShareRecord>,
        /// What the status aggregation needs.
        facts: K::Facts,
    },
    /// The spec cannot be acted on: `Ready=False`/`InvalidSpec` with this message.
    Invalid(String),
}

/// What a kind's status is computed from.
pub struct StatusInput<'a, K: PlacementKind> {
    /// The record the members were sent (`None` when nothing was ever stored).
    pub record: Option<&'a PlacementRecord<K::Decision>>,
    /// The record's etcd revision (0 without one): a report that applied it or later is
    /// current.
    pub revision: i64,
    /// The shares to show: the record's, or the held ones.
    pub shares: &'a [ShareRecord],
    /// The agents' last reports on this object, by cluster.
    pub reports: &'a HashMap<String, StatusRecord>,
    /// Every ManagedCluster by name.
    pub clusters: &'a Clusters,
    /// What the decision left for the status.
    pub facts: K::Facts,
    /// When the record was decided (now, without one).
    pub decided_at: &'a Time,
    /// The time to stamp on conditions that change now.
    pub now: &'a Time,
}

impl<K: PlacementKind> StatusInput<'_, K> {
    /// The shares with their reports and clusters, as the status shows them.
    pub fn placed(&self) -> Placed<'_> {
        Placed {
            shares: self.shares,
            revision: self.revision,
            reports: self.reports,
            clusters: self.clusters,
        }
    }
}

/// A kind's status and the Events its change calls for.
pub struct Reported<S> {
    /// The status the object should show.
    pub status: S,
    /// Events about what changed (new errors, warnings), published once each.
    pub notes: Vec<Note>,
    /// A failure the status already shows that should be retried (with backoff) after the
    /// status is written.
    pub retry: Option<ReconcileError>,
}

/// What a kind's deletion work says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finalized {
    /// Done: the controller removes the records and releases the object.
    Done,
    /// Not yet: reconcile again after this (or on the next event).
    Waiting(Duration),
}

/// A kind's start: itself, the tasks that feed its triggers and own reflectors, and the
/// future that resolves (true) once everything it watches is listed.
pub struct Started<K> {
    /// The kind.
    pub kind: K,
    /// Tasks that run for as long as the controller does (extra triggers, the kind's own
    /// watches and small controllers); one ending ends the controller.
    pub tasks: Vec<BoxFuture<'static, ()>>,
    /// Resolves once the kind's own watches have listed (`true`), or never did (`false`).
    pub listed: BoxFuture<'static, bool>,
}

/// One kind of placement, plugged into the generic controller.
pub trait PlacementKind: Sized + Send + Sync + 'static {
    /// The CRD type.
    type Object: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Serialize
        + Send
        + Sync
        + 'static;
    /// Its status.
    type Status: Clone + Debug + PartialEq + Serialize + Send + Sync + 'static;
    /// The kind's own decision data in the placements record (opaque to distribution).
    type Decision: Clone + Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync + 'static;
    /// What the decision hands the status aggregation beyond the record.
    type Facts: Send + Default;
    /// The kind's own settings (its `serve` flags).
    type Options: Clone + Send + Sync + 'static;

    /// The controller's name, for logs and supervision.
    const CONTROLLER: &'static str;
    /// Kind name in keys and policy references.
    const KIND: PolicyKind;
    /// Key of the decision data in the stored record.
    const DECISION_TAG: &'static str;
    /// Finalizers earlier hub versions put on every object of the kind, released when such
    /// an object is deleted.
    const LEGACY_FINALIZERS: &'static [&'static str] = &[];
    /// Whether a decision is written under the policy's etcd lock (`locks/<kind>/<ns>/<name>`).
    /// Scaling decisions are (DESIGN: locks serialise them per policy). A kind whose records
    /// only this controller writes may do without: the leadership fence keeps a deposed
    /// leader out and kube-runtime never reconciles one object twice at once, while the
    /// lock costs four more etcd requests per decision (grant, lock, unlock, revoke), which
    /// bounded a thousand new topics to about 80 decisions a second.
    const DECISION_LOCK: bool = true;

    /// Starts the kind: `objects` is the controller's reflector of its objects, `trigger`
    /// reconciles one of them.
    fn start(
        ctx: &Arc<ControllerContext>,
        objects: Reflector<Watched<Self>>,
        trigger: Trigger<Self>,
        options: &Self::Options,
    ) -> Started<Self>;

    /// The object's status, as read.
    fn status(object: &Self::Object) -> Option<&Self::Status>;

    /// The status's conditions.
    fn conditions(status: &mut Self::Status) -> &mut Vec<Condition>;

    /// Cuts the status's placements down to what `limits` lets it list, setting its summary
    /// ([`StatusLimits::apply`]); the full status stays available as the object's view.
    fn summarize(status: &mut Self::Status, limits: &StatusLimits);

    /// True when `new` differs from `old` in anything worth a write: by default in
    /// anything but the conditions' timestamps.
    fn status_changed(old: Option<&Self::Status>, new: &Self::Status) -> bool {
        accord_crds::conditions::status_changed(old, new, Self::conditions)
    }

    /// Whether a change of ManagedCluster `cluster` may concern `object`: by default when
    /// it names the cluster in `spec.placement.clusters` or selects by `spec.placement.clusterSelector`. Read
    /// from the stored spec, so an object that does not decode costs nothing here.
    fn may_select(object: &Watched<Self>, cluster: &str) -> bool {
        selection_may_include(object, cluster)
    }

    /// The decision: validation, cluster selection and the shares, without I/O.
    fn decide(
        &self,
        object: &Self::Object,
        input: &DecideInput<'_, Self::Decision>,
    ) -> Decided<Self>;

    /// True when `a` and `b` ask the members for the same thing. By default: equal shares
    /// and equal decision data.
    fn same_intent(
        a: &PlacementRecord<Self::Decision>,
        b: &PlacementRecord<Self::Decision>,
    ) -> bool {
        a.shares == b.shares && a.decision == b.decision
    }

    /// Names a new decision `id` (e.g. a scale request id stamped on every assignment).
    fn name_decision(_record: &mut PlacementRecord<Self::Decision>, _id: &str) {}

    /// The Event a new decision (stored at `revision`) is announced with, if any.
    fn announce(
        &self,
        _object: &Self::Object,
        _record: &PlacementRecord<Self::Decision>,
        _revision: i64,
    ) -> Option<Note> {
        None
    }

    /// The status the object should show, and Events about what changed in it.
    fn status_of(
        &self,
        object: &Self::Object,
        input: StatusInput<'_, Self>,
    ) -> impl Future<Output = Result<Reported<Self::Status>, ReconcileError>> + Send;

    /// Work after the object was found invalid (e.g. drop its part of a shared config).
    fn invalid(
        &self,
        _object: &Watched<Self>,
    ) -> impl Future<Output = Result<(), ReconcileError>> + Send {
        async { Ok(()) }
    }

    /// The finalizer `object` needs, if its deletion needs work the hub must do while the
    /// object still exists. None by default: records are removed once it is gone.
    fn finalizer(_object: &Watched<Self>) -> Option<&'static str> {
        None
    }

    /// The deletion work of an object that holds [`PlacementKind::finalizer`].
    fn finalize(
        &self,
        _object: &Watched<Self>,
        _record: Option<(PlacementRecord<Self::Decision>, i64)>,
    ) -> impl Future<Output = Result<Finalized, ReconcileError>> + Send {
        async { Ok(Finalized::Done) }
    }

    /// What the kind keeps beyond the placements and status records, removed once the
    /// object is gone (the controller removes those two).
    fn forget(
        &self,
        _namespace: &str,
        _name: &str,
    ) -> impl Future<Output = Result<(), ReconcileError>> + Send {
        async { Ok(()) }
    }

    /// Sees every watch event of the kind's objects after the reflector has it (e.g. to
    /// re-check other objects that depend on this one).
    fn on_object(&self, _object: &Watched<Self>, _gone: bool) {}

    /// Whether the kind's decisions read other kinds' field claims
    /// ([`ControllerContext::field_owners`]): its objects are then not decided before every
    /// claiming kind has listed, and its `start` triggers them on every change of the claims.
    const READS_FIELD_CLAIMS: bool = false;

    /// The fields of objects in member clusters this object sets, which another kind's
    /// delivery must leave to it ([`super::field_owners`]), read from the object as stored
    /// (so an object that no longer decodes keeps its claims). A kind that claims fields is
    /// listed in [`super::FIELD_CLAIMANTS`].
    fn field_claims(_object: &Watched<Self>) -> Vec<super::field_owners::FieldClaim> {
        Vec::new()
    }
}

/// The clusters a spec's `placement` selects, once the spec passes its validation;
/// otherwise why it cannot be acted on (`Decided::Invalid`'s message).
pub fn valid_selection(
    spec: &impl accord_crds::validate::Validate,
    placement: &accord_crds::ClusterPlacement,
    clusters: &Clusters,
) -> Result<Vec<crate::distribution::select::SelectedCluster>, String> {
    spec.validate().map_err(|errors| errors.to_string())?;
    crate::distribution::select::select_clusters(placement, clusters).map_err(|e| e.to_string())
}

/// Whether the stored spec of `object` names `cluster` in `spec.placement.clusters` or
/// selects by `spec.placement.clusterSelector` (the default [`PlacementKind::may_select`]).
pub fn selection_may_include<T>(object: &Lenient<T>, cluster: &str) -> bool {
    let names_it = object
        .pointer("/spec/placement/clusters")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c == cluster));
    names_it || object.pointer("/spec/placement/clusterSelector").is_some()
}

/// `namespace/name` of an object.
pub fn object_name(o: &impl ResourceExt) -> String {
    match o.namespace() {
        Some(ns) => format!("{ns}/{}", o.name_any()),
        None => o.name_any(),
    }
}

/// The policy reference of an object of kind `K`.
pub fn policy_ref<K: PlacementKind>(o: &impl ResourceExt) -> PolicyRef {
    PolicyRef::new(K::KIND, &o.namespace().unwrap_or_default(), &o.name_any())
}

/// Every ManagedCluster as the controllers see it.
pub fn clusters(ctx: &ControllerContext) -> Clusters {
    ctx.cluster_index.snapshot()
}

/// The stored record of `policy`, read as kind `K`'s, with its revision.
pub fn stored_record<K: PlacementKind>(
    ctx: &ControllerContext,
    policy: &PolicyRef,
) -> Option<(PlacementRecord<K::Decision>, i64)> {
    let key = ctx
        .store
        .keys()
        .placements(policy.kind.as_str(), &policy.namespace, &policy.name);
    let (record, revision) = ctx.placements.get(&key)?;
    record.typed(K::DECISION_TAG).map(|typed| (typed, revision))
}

/// Writes `record` as kind `K`'s, fenced by leadership (and under the policy's lock where
/// the kind asks for it, [`PlacementKind::DECISION_LOCK`]), and waits until the cache has
/// it; returns its revision.
pub async fn write_record<K: PlacementKind>(
    ctx: &ControllerContext,
    record: &PlacementRecord<K::Decision>,
) -> Result<i64, ReconcileError> {
    let fence = ctx.election.fence().ok_or(ReconcileError::NotLeader)?;
    let p = &record.policy;
    let key = ctx
        .store
        .keys()
        .placements(p.kind.as_str(), &p.namespace, &p.name);
    let value = crate::store::encode_large(&record.stored(K::DECISION_TAG))?;
    let put = vec![etcd_client::TxnOp::put(key, value, None)];
    let (response, revision) = if K::DECISION_LOCK {
        let lock = tokio::time::timeout(
            LOCK_WAIT,
            ctx.store
                .lock_policy(p.kind.as_str(), &p.namespace, &p.name, LOCK_TTL),
        )
        .await
        .map_err(|_| ReconcileError::LockTimeout(format!("{}/{}", p.namespace, p.name)))??;
        let written = ctx
            .store
            .fenced_txn_with_revision(&fence, vec![lock.compare()], put)
            .await;
        // The decision does not wait for the release (two more etcd round trips on its
        // path): revoking the lock's lease deletes its key, and a next decision of the same
        // policy queues behind it until then.
        lock.release_in_background();
        written?
    } else {
        ctx.store
            .fenced_txn_with_revision(&fence, Vec::new(), put)
            .await?
    };
    if !response.succeeded() {
        return Err(ReconcileError::Store(StoreError::Unexpected(format!(
            "the lock of {p} was lost during the write"
        ))));
    }
    // Read our own write before anything is computed from the cache.
    ctx.placements.wait_for_revision(revision).await;
    Ok(revision)
}

/// The agents' last reports on `record`'s policy, by cluster.
pub fn reports<D>(
    ctx: &ControllerContext,
    record: &PlacementRecord<D>,
) -> HashMap<String, StatusRecord> {
    reports_of(ctx, &record.policy, &record.shares)
}

fn reports_of(
    ctx: &ControllerContext,
    p: &PolicyRef,
    shares: &[ShareRecord],
) -> HashMap<String, StatusRecord> {
    shares
        .iter()
        .filter_map(|s| {
            let key = ctx
                .store
                .keys()
                .status(&s.cluster, p.kind.as_str(), &p.namespace, &p.name);
            ctx.statuses.get(&key).map(|(r, _)| (s.cluster.clone(), r))
        })
        .collect()
}

/// Removes `policy`'s placements record and every status record about it.
pub async fn remove_records(
    ctx: &ControllerContext,
    policy: &PolicyRef,
) -> Result<(), ReconcileError> {
    let fence = ctx.election.fence().ok_or(ReconcileError::NotLeader)?;
    let key = ctx
        .store
        .keys()
        .placements(policy.kind.as_str(), &policy.namespace, &policy.name);
    ctx.store.fenced_delete(&fence, &key).await?;
    ctx.store
        .delete_policy_status(policy.kind.as_str(), &policy.namespace, &policy.name)
        .await?;
    ctx.views.remove(policy);
    Ok(())
}

/// The generic controller of kind `K`: its steps, which [`run`] drives from the watches
/// (public so that they can be driven one at a time against a fake API server).
pub struct Placements<K: PlacementKind> {
    ctx: Arc<ControllerContext>,
    kind: K,
    objects: Reflector<Watched<K>>,
    /// The record revision each object's last submitted status showed: a status for a
    /// different one shows a new decision, written promptly.
    shown: dashmap::DashMap<(String, String), i64>,
    /// Each object's last reconcile, which paces the ones reports and clusters ask for.
    pace: Arc<ReconcilePace<ObjectRef<Watched<K>>>>,
    /// Objects (by uid) whose finalizer this controller added, and when, while the
    /// reflector has not shown it: a reconcile of the older copy meanwhile must not add it
    /// again (the second add fails its test and costs a write and a retry). Trusted for
    /// [`FINALIZER_ADDED_TRUST`], so a finalizer removed by hand before the reflector
    /// caught up is still put back.
    finalizer_added: dashmap::DashMap<String, std::time::Instant>,
}

/// How long a finalizer this controller added is taken as held while the reflector does
/// not show it yet.
const FINALIZER_ADDED_TRUST: std::time::Duration = std::time::Duration::from_secs(30);

/// The uid in `metadata` ("" when there is none).
fn uid_of(metadata: &kube::api::ObjectMeta) -> &str {
    metadata.uid.as_deref().unwrap_or_default()
}

/// Whether a placement the status shows with an outcome (any state but `Pending`) is
/// `Pending` in `desired`: news to write promptly, not progress (a stale `Synced` must not
/// linger while a member repairs drift).
fn fell_back<K>(watched: &Lenient<K>, desired: &serde_json::Value) -> bool {
    let states = |status: &serde_json::Value| -> HashMap<String, String> {
        status["placements"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p["cluster"].as_str()?.to_owned(),
                    p["state"].as_str()?.to_owned(),
                ))
            })
            .collect()
    };
    let shown = states(&current_status(watched));
    states(desired)
        .iter()
        .any(|(c, st)| st == "Pending" && shown.get(c).is_some_and(|was| was != "Pending"))
}

/// The status as the API server holds it (from the watch), as JSON.
fn current_status<K>(object: &Lenient<K>) -> serde_json::Value {
    object
        .data
        .get("status")
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}))
}

impl<K: PlacementKind> Placements<K> {
    /// The controller of `kind` over `objects` (the reflector the kind was started with).
    pub fn new(ctx: Arc<ControllerContext>, kind: K, objects: Reflector<Watched<K>>) -> Self {
        Self {
            ctx,
            kind,
            objects,
            shown: dashmap::DashMap::new(),
            pace: Arc::default(),
            finalizer_added: dashmap::DashMap::new(),
        }
    }

    /// Reconciles one object: its deletion, or its decision, record and status.
    pub async fn reconcile(&self, watched: Arc<Watched<K>>) -> Result<Action, ReconcileError> {
        let holds: Vec<&str> = self.finalizers_held(&watched);
        if watched.metadata.deletion_timestamp.is_some() {
            self.finalizer_added.remove(uid_of(&watched.metadata));
            if holds.is_empty() {
                return Ok(Action::await_change());
            }
            return self.delete(&watched, &holds).await;
        }
        let watched = match K::finalizer(&watched) {
            Some(f) if holds.contains(&f) => {
                self.finalizer_added.remove(uid_of(&watched.metadata));
                watched
            }
            Some(f) => {
                let recently_added = self
                    .finalizer_added
                    .get(uid_of(&watched.metadata))
                    .is_some_and(|at| at.elapsed() < FINALIZER_ADDED_TRUST);
                if recently_added {
                    // The reflector is behind: the stored object holds it.
                    watched
                } else {
                    let added = self.add_finalizer(&watched, f).await?;
                    self.finalizer_added.insert(
                        uid_of(&watched.metadata).to_owned(),
                        std::time::Instant::now(),
                    );
                    Arc::new(added)
                }
            }
            None => watched,
        };
        if K::READS_FIELD_CLAIMS && !self.ctx.field_owners.ready() {
            // Decided once every claiming kind has listed: the kind triggers its objects
            // then (see PlacementKind::READS_FIELD_CLAIMS).
            return Ok(Action::await_change());
        }
        let now = Time(Timestamp::now());
        match decode_or_invalid(&watched, &now) {
            Decoded::Valid(object) => self.apply(&watched, &object, &now).await,
            Decoded::Invalid {
                message,
                status_patch,
            } => self.invalid(&watched, message, status_patch).await,
        }
    }

    /// This kind's finalizers (current and legacy) that `object` holds.
    fn finalizers_held<'a>(&self, object: &'a Watched<K>) -> Vec<&'a str> {
        object
            .finalizers()
            .iter()
            .map(String::as_str)
            .filter(|f| K::finalizer(object) == Some(*f) || K::LEGACY_FINALIZERS.contains(f))
            .collect()
    }

    async fn apply(
        &self,
        watched: &Watched<K>,
        object: &K::Object,
        now: &Time,
    ) -> Result<Action, ReconcileError> {
        let ctx = &self.ctx;
        let p = policy_ref::<K>(object);
        let clusters = clusters(ctx);
        let previous = stored_record::<K>(ctx, &p);
        let decided = self.kind.decide(
            object,
            &DecideInput {
                clusters: &clusters,
                previous: previous.as_ref().map(|(r, _)| r),
                now_millis: now.0.as_millisecond(),
            },
        );
        let (shown, facts, recheck) = match decided {
            Decided::Invalid(message) => {
                let status_patch = invalid_status(watched, &message, now);
                return self.invalid(watched, message, status_patch).await;
            }
            Decided::Hold { shown, facts } => match previous {
                Some(stored) => (Ok(stored), facts, None),
                None => (Err(shown), facts, None),
            },
            Decided::Record {
                shares,
                decision,
                facts,
                recheck_after,
            } => {
                let mut record = PlacementRecord {
                    policy: p.clone(),
                    generation: object.meta().generation.unwrap_or_default(),
                    decided_unix_millis: now.0.as_millisecond(),
                    shares,
                    decision,
                };
                let stored = match previous {
                    Some((prev, revision)) if K::same_intent(&prev, &record) => (prev, revision),
                    _ => {
                        K::name_decision(&mut record, &ulid::Ulid::new().to_string());
                        let revision = write_record::<K>(ctx, &record).await?;
                        debug!(policy = %p, revision, "placements written");
                        if let Some(note) = self.kind.announce(object, &record, revision) {
                            ctx.note(&object.object_ref(&()), note);
                        }
                        (record, revision)
                    }
                };
                (Ok(stored), facts, recheck_after)
            }
        };
        let (record, revision, shares) = match &shown {
            Ok((record, revision)) => (Some(record), *revision, record.shares.as_slice()),
            Err(held) => (None, 0, held.as_slice()),
        };
        let reports = reports_of(ctx, &p, shares);
        let decided_at = record
            .and_then(|r| accord_common::runtime::time_from_millis(r.decided_unix_millis))
            .unwrap_or_else(|| now.clone());
        let Reported {
            mut status,
            notes,
            retry,
        } = self
            .kind
            .status_of(
                object,
                StatusInput {
                    record,
                    revision,
                    shares,
                    reports: &reports,
                    clusters: &clusters,
                    facts,
                    decided_at: &decided_at,
                    now,
                },
            )
            .await?;
        for note in notes {
            ctx.note(&object.object_ref(&()), note);
        }
        ctx.views.set(&p, status.clone());
        K::summarize(&mut status, &ctx.status_limits);
        if K::status_changed(K::status(object), &status) {
            let desired = serde_json::to_value(&status).map_err(StoreError::Encode)?;
            // An outcome, and a decision that replaces one the status showed, are shown
            // within the window; progress towards an outcome (members still working) at
            // most once per progress interval. The first decision of an object is progress
            // too: members that finish within the interval cost one write, not two.
            let key = (p.namespace.clone(), p.name.clone());
            let replaced = self
                .shown
                .insert(key, revision)
                .is_some_and(|shown| shown != revision);
            let settled = || {
                Placed {
                    shares,
                    revision,
                    reports: &reports,
                    clusters: &clusters,
                }
                .settled()
            };
            let pace = if replaced || record.is_none() || fell_back(watched, &desired) || settled()
            {
                Pace::Prompt
            } else {
                Pace::Progress
            };
            ctx.submit_status::<K::Object>(watched, current_status(watched), desired, pace);
        }
        if let Some(e) = retry {
            return Err(e);
        }
        Ok(Action::requeue(recheck.map_or(RESYNC, |r| r.min(RESYNC))))
    }

    /// Says in the status (when it does not already) and in an Event that the object
    /// cannot be acted on; waits for a change.
    async fn invalid(
        &self,
        watched: &Watched<K>,
        message: String,
        status_patch: Option<serde_json::Value>,
    ) -> Result<Action, ReconcileError> {
        // Nothing is placed for it any more: no view to serve.
        self.ctx.views.remove(&policy_ref::<K>(watched));
        if let Some(patch) = status_patch {
            let current = current_status(watched);
            let mut desired = current.clone();
            if let (Some(d), Some(p)) = (desired.as_object_mut(), patch["status"].as_object()) {
                d.extend(p.clone());
            }
            self.ctx
                .submit_status::<K::Object>(watched, current, desired, Pace::Prompt);
            self.ctx.metrics.error("invalid_spec");
            self.ctx.note(
                &watched.object_ref(&()),
                Note::warning(accord_crds::conditions::reasons::INVALID_SPEC, message),
            );
        }
        self.kind.invalid(watched).await?;
        Ok(Action::await_change())
    }

    /// An object being deleted that holds one of the kind's finalizers: the kind's work
    /// first (when it asked for the finalizer), then the records, then the release.
    async fn delete(&self, watched: &Watched<K>, holds: &[&str]) -> Result<Action, ReconcileError> {
        let p = policy_ref::<K>(watched);
        if K::finalizer(watched).is_some_and(|f| holds.contains(&f)) {
            let record = stored_record::<K>(&self.ctx, &p);
            if let Finalized::Waiting(after) = self.kind.finalize(watched, record).await? {
                return Ok(Action::requeue(after.min(RESYNC)));
            }
        }
        remove_records(&self.ctx, &p).await?;
        self.kind.forget(&p.namespace, &p.name).await?;
        self.shown.remove(&(p.namespace.clone(), p.name.clone()));
        for f in holds {
            self.remove_finalizer(watched, f).await?;
        }
        info!(policy = %p, "deleted: its placements and reports are removed");
        Ok(Action::await_change())
    }

    /// Removes the records of an object that is gone (and not back under the same name).
    pub async fn forget(&self, namespace: &str, name: &str) -> Result<(), ReconcileError> {
        let back = self
            .objects
            .get(&ObjectRef::new(name).within(namespace))
            .is_some_and(|o| o.metadata.deletion_timestamp.is_none());
        if back {
            return Ok(());
        }
        self.shown.remove(&(namespace.to_owned(), name.to_owned()));
        let p = PolicyRef::new(K::KIND, namespace, name);
        remove_records(&self.ctx, &p).await?;
        self.kind.forget(namespace, name).await?;
        info!(policy = %p, "gone: its placements and reports are removed");
        Ok(())
    }

    /// Forgets every object of the kind that has a placements record but no object.
    pub async fn sweep(&self) {
        let prefix = self
            .ctx
            .store
            .keys()
            .placements(K::KIND.as_str(), "", "")
            .trim_end_matches('/')
            .to_owned();
        let prefix = format!("{prefix}/");
        let orphans: Vec<(String, String)> = self
            .ctx
            .placements
            .snapshot()
            .into_iter()
            .filter_map(|(key, _, _)| {
                let (ns, name) = key.strip_prefix(&prefix)?.split_once('/')?;
                let gone = self.objects.get(&ObjectRef::new(name).within(ns)).is_none();
                gone.then(|| (ns.to_owned(), name.to_owned()))
            })
            .collect();
        for (ns, name) in orphans {
            if let Err(e) = self.forget(&ns, &name).await {
                super::report_error(&self.ctx.metrics, &format!("{ns}/{name}"), &e);
            }
        }
    }

    async fn add_finalizer(
        &self,
        object: &Watched<K>,
        finalizer: &str,
    ) -> Result<Watched<K>, ReconcileError> {
        let patch = if object.finalizers().is_empty() {
            serde_json::json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
            ])
        } else {
            serde_json::json!([
                {"op": "test", "path": "/metadata/resourceVersion",
                 "value": object.resource_version()},
                {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
            ])
        };
        self.json_patch(object, patch).await
    }

    async fn remove_finalizer(
        &self,
        object: &Watched<K>,
        finalizer: &str,
    ) -> Result<(), ReconcileError> {
        let Some(i) = object.finalizers().iter().position(|f| f == finalizer) else {
            return Ok(());
        };
        // The test makes the removal fail rather than remove another finalizer if the list
        // changed meanwhile (the change reconciles the object again).
        let patch = serde_json::json!([
            {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": finalizer},
            {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
        ]);
        match self.json_patch(object, patch).await {
            Err(ReconcileError::Kube(kube::Error::Api(s))) if s.code == 404 => Ok(()),
            other => other.map(drop),
        }
    }

    async fn json_patch(
        &self,
        object: &Watched<K>,
        patch: serde_json::Value,
    ) -> Result<Watched<K>, ReconcileError> {
        let patch =
            serde_json::from_value(patch).map_err(|e| ReconcileError::Finalizer(e.to_string()))?;
        let api: Api<Watched<K>> = Api::namespaced(
            self.ctx.kube.clone(),
            &object.namespace().unwrap_or_default(),
        );
        api.patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
        .map_err(|e| match e {
            // A failed `test` operation: the object changed since the cache saw it (the
            // cache lags behind a write of ours, or someone else's). Retried shortly from
            // the fresher object, never left waiting for a change that already happened.
            kube::Error::Api(s) if s.code == 422 => {
                ReconcileError::Finalizer(format!("the object changed meanwhile ({})", s.message))
            }
            e => e.into(),
        })
    }
}

/// The object a watch event is about, and whether it is gone.
pub fn changed<K>(event: &Result<watcher::Event<K>, watcher::Error>) -> Option<(&K, bool)> {
    match event {
        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => Some((o, false)),
        Ok(watcher::Event::Delete(o)) => Some((o, true)),
        _ => None,
    }
}

/// Sends every object of `objects` to `trigger` whenever the field claims change (and once
/// they are ready): a task for the `start` of a kind that [`PlacementKind::READS_FIELD_CLAIMS`].
pub fn trigger_on_claims<K: PlacementKind>(
    ctx: &ControllerContext,
    objects: Reflector<Watched<K>>,
    trigger: Trigger<K>,
) -> impl Future<Output = ()> + Send + 'static {
    let mut changes = ctx.field_owners.subscribe();
    async move {
        while changes.changed().await.is_ok() {
            trigger_all(&objects, &trigger);
        }
    }
}

/// Sends every object of `store` to `trigger`.
pub fn trigger_all<T>(store: &Reflector<T>, trigger: &mpsc::UnboundedSender<ObjectRef<T>>)
where
    T: Resource<DynamicType = ()> + Clone + 'static,
{
    for o in store.state() {
        let _ = trigger.send(ObjectRef::from_obj(&*o));
    }
}

/// What the cleanup task is told.
enum Cleanup {
    /// This object is gone.
    Gone(String, String),
    /// The objects were (re)listed: sweep every record without an object.
    Sweep,
}

/// Runs kind `K`'s controller until it fails; `clusters` is its subscription to the shared
/// ManagedCluster reflector, and `listed` is told once its objects (and whatever the kind
/// watches) are listed.
pub async fn run<K: PlacementKind>(
    ctx: Arc<ControllerContext>,
    clusters: ClusterEvents,
    listed: Listed,
    options: K::Options,
) -> Result<(), ControllerError> {
    let (objects, writer) = reflector::store_shared::<Watched<K>>(EVENT_BUFFER);
    let subscription = writer
        .subscribe()
        .ok_or(ControllerError::Ended(K::CONTROLLER))?;
    let (trigger, triggers) = mpsc::unbounded_channel::<ObjectRef<Watched<K>>>();
    let Started {
        kind,
        tasks,
        listed: kind_listed,
    } = K::start(&ctx, objects.clone(), trigger.clone(), &options);
    let placements = Arc::new(Placements::new(ctx.clone(), kind, objects.clone()));
    // Reports and ManagedCluster changes ask for reconciles through the pace (see
    // controllers::reconcile_pace); the objects' own events and the kind's triggers do not.
    let (paced, paced_triggers) = mpsc::unbounded_channel::<ObjectRef<Watched<K>>>();
    let pacing = placements
        .pace
        .clone()
        .forward(paced_triggers, trigger.clone());

    // The objects' own events: the kind sees each, and one that is gone is forgotten.
    let (cleanup, mut cleanups) = mpsc::unbounded_channel::<Cleanup>();
    let object_events = {
        let placements = placements.clone();
        let cleanup = cleanup.clone();
        accord_common::watch::watcher(
            Api::<Watched<K>>::all(ctx.kube.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect_shared(writer)
        .for_each(move |event| {
            if let Some((o, gone)) = changed(&event) {
                let claims = if gone { Vec::new() } else { K::field_claims(o) };
                placements.ctx.field_owners.claim(
                    K::KIND,
                    FieldOwners::claimant(K::KIND, &object_name(o)),
                    claims,
                );
                placements.kind.on_object(o, gone);
                if gone {
                    placements.pace.forget(&ObjectRef::from_obj(o));
                    let _ = cleanup.send(Cleanup::Gone(
                        o.namespace().unwrap_or_default(),
                        o.name_any(),
                    ));
                }
            }
            if matches!(event, Ok(watcher::Event::InitDone)) {
                let present = placements
                    .objects
                    .state()
                    .iter()
                    .map(|o| FieldOwners::claimant(K::KIND, &object_name(&**o)))
                    .collect();
                placements.ctx.field_owners.listed(K::KIND, &present);
                let _ = cleanup.send(Cleanup::Sweep);
            }
            futures::future::ready(())
        })
    };
    let cleaning = {
        let placements = placements.clone();
        async move {
            let mut resync = tokio::time::interval(RESYNC);
            resync.tick().await;
            loop {
                let next = tokio::select! {
                    next = cleanups.recv() => next,
                    _ = resync.tick() => Some(Cleanup::Sweep),
                };
                match next {
                    Some(Cleanup::Gone(ns, name)) => {
                        if let Err(e) = placements.forget(&ns, &name).await {
                            super::report_error(
                                &placements.ctx.metrics,
                                &format!("{ns}/{name}"),
                                &e,
                            );
                        }
                    }
                    Some(Cleanup::Sweep) => placements.sweep().await,
                    None => return,
                }
            }
        }
    };

    // ManagedCluster changes that matter → every object that may select the cluster.
    let cluster_changes = {
        let objects = objects.clone();
        let t = paced.clone();
        let mut seen: HashMap<String, ClusterInfo> = HashMap::new();
        clusters.for_each(move |mc| {
            let name = mc.name_any();
            let info = ClusterInfo::of(&mc);
            if seen.get(&name) != Some(&info) {
                seen.insert(name.clone(), info);
                for o in objects.state() {
                    if K::may_select(&o, &name) {
                        let _ = t.send(ObjectRef::from_obj(&*o));
                    }
                }
            }
            futures::future::ready(())
        })
    };

    // Agents' reports → the object they are about.
    let report_changes = trigger_on_changes(
        ctx.statuses.subscribe(),
        ctx.store.keys().status_prefix(),
        objects.clone(),
        paced,
        |rest| {
            StatusKey::parse(rest)
                .filter(|key| key.kind == K::KIND.as_str())
                .map(|key| (key.namespace, key.name))
        },
    );

    let report_listed = {
        let objects = objects.clone();
        async move {
            if objects.wait_until_ready().await.is_ok() && kind_listed.await {
                let _ = listed.send(());
            }
            std::future::pending::<()>().await;
        }
    };
    let reconciling = Controller::for_shared_stream(subscription, objects)
        .reconcile_on(UnboundedReceiverStream::new(triggers))
        .run(
            |object, p: Arc<Placements<K>>| async move {
                let name = object_name(&*object);
                let _running = p.pace.running(ObjectRef::from_obj(&*object));
                p.ctx
                    .metrics
                    .reconciles
                    .get_or_create(&KindLabel::of(K::KIND.as_str()))
                    .inc();
                let action = p.reconcile(object).await?;
                p.ctx.succeeded(&name);
                Ok(action)
            },
            |object, error: &ReconcileError, p: Arc<Placements<K>>| {
                error_policy(&p.ctx, &object_name(&*object), error)
            },
            placements,
        )
        .for_each(trace_result);
    let kind_tasks = futures::future::select_all(
        tasks
            .into_iter()
            .chain([Box::pin(std::future::pending()) as BoxFuture<'static, ()>]),
    );
    // One task on purpose: a shared-stream subscription that finds its object already
    // deleted returns Pending without a wake-up, and the other branches' activity polls it
    // again.
    tokio::select! {
        () = reconciling => {}
        () = object_events => {}
        () = cleaning => {}
        () = cluster_changes => {}
        () = report_changes => {}
        () = report_listed => {}
        () = pacing => {}
        _ = kind_tasks => {}
    }
    Err(ControllerError::Ended(K::CONTROLLER))
}

/// Reconciles the object each changed key of an etcd cache names (`object_of` reads
/// `(namespace, name)` from the key after `prefix`), until the cache ends. Changes missed
/// because this fell behind the cache reconcile every object of `objects` (a burst of
/// reports must not leave statuses stale until the next resync).
pub async fn trigger_on_changes<T: Clone, O>(
    mut events: tokio::sync::broadcast::Receiver<crate::store::CacheEvent<T>>,
    prefix: String,
    objects: Reflector<O>,
    trigger: mpsc::UnboundedSender<ObjectRef<O>>,
    object_of: impl Fn(&str) -> Option<(&str, &str)>,
) where
    O: Resource<DynamicType = ()> + Clone + 'static,
{
    use crate::store::CacheEvent;
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match events.recv().await {
            Ok(CacheEvent::Put { key, .. } | CacheEvent::Delete { key }) => {
                if let Some((ns, name)) = object_of(key.trim_start_matches(&prefix)) {
                    let _ = trigger.send(ObjectRef::new(name).within(ns));
                }
            }
            Err(RecvError::Lagged(missed)) => {
                debug!(missed, "fell behind the cache; reconciling every object");
                trigger_all(&objects, &trigger);
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// The parts of a status key after its prefix: `<cluster>/<kind>/<namespace>/<name>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusKey<'a> {
    /// The reporting cluster.
    pub cluster: &'a str,
    /// The policy's kind.
    pub kind: &'a str,
    /// The policy's namespace.
    pub namespace: &'a str,
    /// The policy's name.
    pub name: &'a str,
}

impl<'a> StatusKey<'a> {
    /// Parses a status key after its prefix; `None` for anything else.
    pub fn parse(rest: &'a str) -> Option<Self> {
        let mut parts = rest.split('/');
        let key = Self {
            cluster: parts.next()?,
            kind: parts.next()?,
            namespace: parts.next()?,
            name: parts.next()?,
        };
        parts.next().is_none().then_some(key)
    }
}

/// `object`'s claim on `name` in the clusters its `placement` selects, ordered by its
/// `creationTimestamp`; `None` when its selection cannot be evaluated.
pub fn claim_of(
    object: &impl ResourceExt,
    name: &str,
    placement: &accord_crds::ClusterPlacement,
    clusters: &Clusters,
) -> Option<crate::distribution::claim::Claim> {
    let selected = crate::distribution::select::select_clusters(placement, clusters).ok()?;
    Some(crate::distribution::claim::Claim {
        object: object_name(object),
        created_unix_millis: object
            .meta()
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond()),
        name: name.to_owned(),
        clusters: selected.into_iter().map(|c| c.name).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_key_names_its_cluster_kind_and_object_and_nothing_else_parses() {
        assert_eq!(
            StatusKey::parse("east/FederatedKafkaTopic/team/events"),
            Some(StatusKey {
                cluster: "east",
                kind: "FederatedKafkaTopic",
                namespace: "team",
                name: "events"
            })
        );
        assert_eq!(StatusKey::parse("east/FederatedKafkaTopic/team"), None);
        assert_eq!(StatusKey::parse("east/K/ns/name/extra"), None);
    }
}
