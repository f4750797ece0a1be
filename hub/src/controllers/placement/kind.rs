//! The contract a kind plugs into: [`PlacementKind`] and what its steps take and give.

use super::*;

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
    /// The clusters the object's `spec.placement` chooses ([`PlacementKind::placement`]),
    /// or why they cannot be told; `None` for an object without one.
    pub choice: Option<&'a Result<Choice, SelectorError>>,
}

impl<D> DecideInput<'_, D> {
    /// The clusters `spec.placement` chooses (none without a placement), or why the
    /// selection cannot be evaluated (a `Decided::Invalid` message).
    pub fn selected(&self) -> Result<Vec<SelectedCluster>, SelectorError> {
        match self.choice {
            Some(Ok(choice)) => Ok(choice.selected.clone()),
            Some(Err(e)) => Err(e.clone()),
            None => Ok(Vec::new()),
        }
    }
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

    /// What a kind's status aggregation reads for `object`: the placed shares, the stored
    /// decision, the decision's facts, and the object's generation and current status.
    pub fn of<'a>(&'a self, object: &'a K::Object) -> Aggregation<'a, K> {
        Aggregation {
            placed: self.placed(),
            decision: self.record.map(|r| &r.decision),
            facts: &self.facts,
            generation: object.meta().generation,
            old: K::status(object),
            now: self.now,
        }
    }
}

/// The status `aggregate` computes for `object` from `input`, with the Events `notes` tells
/// of its change from the status shown: a kind's [`PlacementKind::status_of`] when it
/// needs no I/O.
pub fn aggregated<K: PlacementKind>(
    object: &K::Object,
    input: &StatusInput<'_, K>,
    aggregate: impl FnOnce(&Aggregation<'_, K>) -> K::Status,
    notes: impl FnOnce(Option<&K::Status>, &K::Status, Option<i64>) -> Vec<Note>,
) -> Reported<K::Status> {
    let inputs = input.of(object);
    let status = aggregate(&inputs);
    Reported::new(notes(inputs.old, &status, inputs.generation), status)
}

/// Everything a kind's status aggregation is computed from ([`StatusInput::of`]; built
/// directly in a kind's unit tests).
pub struct Aggregation<'a, K: PlacementKind> {
    /// The shares, the reports and the clusters.
    pub placed: Placed<'a>,
    /// The stored decision, if any.
    pub decision: Option<&'a K::Decision>,
    /// What the decision left for the status.
    pub facts: &'a K::Facts,
    /// `metadata.generation` of the object.
    pub generation: Option<i64>,
    /// The status the object shows now.
    pub old: Option<&'a K::Status>,
    /// The time to stamp on conditions that change now.
    pub now: &'a Time,
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

impl<S> Reported<S> {
    /// `status`, with the Events `notes`, and nothing to retry.
    pub fn new(notes: Vec<Note>, status: S) -> Self {
        Self {
            status,
            notes,
            retry: None,
        }
    }
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
        + accord_crds::HasPlacedStatus<Status = Self::Status>
        + Send
        + Sync
        + 'static;
    /// Its status.
    type Status: accord_crds::PlacedStatus
        + Clone
        + Debug
        + PartialEq
        + Serialize
        + Send
        + Sync
        + 'static;
    /// The kind's own decision data in the placements record (opaque to distribution).
    type Decision: Clone + Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync + 'static;
    /// What the decision hands the status aggregation beyond the record.
    type Facts: Send + Default;
    /// The kind's own settings (its `serve` flags).
    type Options: Clone + Send + Sync + 'static;

    /// The controller's name, for logs and supervision.
    const CONTROLLER: &'static str;
    /// Kind name in keys and placed object references.
    const KIND: PlacedKind;
    /// Key of the decision data in the stored record.
    const DECISION_TAG: &'static str;
    /// Finalizers earlier hub versions put on every object of the kind, released when such
    /// an object is deleted.
    const LEGACY_FINALIZERS: &'static [&'static str] = &[];
    /// Whether a decision is written under the placed object's etcd lock
    /// (`locks/<kind>/<ns>/<name>`). Scaling decisions are (DESIGN: locks serialise them
    /// per placed object). A kind whose records only this controller writes does without
    /// (the default): the leadership fence keeps a deposed leader out and kube-runtime never
    /// reconciles one object twice at once, while the lock costs four more etcd requests
    /// per decision (grant, lock, unlock, revoke), which bounded a thousand new topics to
    /// about 80 decisions a second.
    const DECISION_LOCK: bool = false;

    /// Whether the framework holds back, after the kind decided, the shares of clusters
    /// whose taints or drain switch do not allow a placement of the object
    /// ([`crate::distribution::taints::hold_tainted`], reading `spec.placement.tolerations`
    /// as stored): right for a kind that sends every selected cluster its own copy. A kind
    /// that divides something among the clusters (CrossClusterScalePolicy) says `false`
    /// and reads [`crate::distribution::taints::judge`] in its division, so that what a held
    /// cluster would have had goes to the others.
    const HOLDS_TAINTED: bool = true;

    /// Starts the kind: `objects` is the controller's reflector of its objects, `trigger`
    /// reconciles one of them.
    fn start(
        ctx: &Arc<ControllerContext>,
        objects: Reflector<Watched<Self>>,
        trigger: Trigger<Self>,
        options: &Self::Options,
    ) -> Started<Self>;

    /// The object's status, as read.
    fn status(object: &Self::Object) -> Option<&Self::Status> {
        accord_crds::HasPlacedStatus::placed_status(object)
    }

    /// The status's conditions.
    fn conditions(status: &mut Self::Status) -> &mut Vec<Condition> {
        accord_crds::PlacedStatus::conditions_mut(status)
    }

    /// Cuts the status's placements down to what `limits` lets it list, setting its summary
    /// ([`StatusLimits::apply`]); the full status stays available as the object's view.
    fn summarize(status: &mut Self::Status, limits: &StatusLimits) {
        accord_crds::PlacedStatus::summarize(status, limits);
    }

    /// True when `new` differs from `old` in anything worth a write: by default in
    /// anything but the conditions' timestamps.
    fn status_changed(old: Option<&Self::Status>, new: &Self::Status) -> bool {
        accord_crds::conditions::status_changed(old, new, Self::conditions)
    }

    /// Whether a cluster's line of the status says the object is healthy there, as a
    /// rollout counts success ([`crate::distribution::rollout::heard`]): by default
    /// `Synced`. The line is computed against the record the cluster was last sent, so a
    /// report of an older revision never counts.
    fn healthy(line: &<Self::Status as accord_crds::PlacedStatus>::Placement) -> bool {
        accord_crds::summary::HasState::state(line) == accord_crds::PlacementState::Synced
    }

    /// The object's `spec.rollout`, for a kind that delivers content: a progressive one
    /// steps the clusters through each new revision ([`super::rollout`]). `None` by
    /// default: every change reaches every cluster at once.
    fn rollout(_object: &Self::Object) -> Option<&accord_crds::rollout::Rollout> {
        None
    }

    /// The status's `rollout`, for a kind whose objects may roll out progressively.
    fn rollout_status(
        _status: &mut Self::Status,
    ) -> Option<&mut Option<accord_crds::rollout::RolloutStatus>> {
        None
    }

    /// Sets the revision a cluster's line names (`revision`: the rollout's revision hash
    /// the cluster runs, as `status.rollout.revision` names the one rolled out), for a
    /// kind whose objects may roll out progressively.
    fn set_revision(
        _line: &mut <Self::Status as accord_crds::PlacedStatus>::Placement,
        _revision: Option<String>,
    ) {
    }

    /// Whether a change of ManagedCluster `cluster` may concern `object`: by default when
    /// it names the cluster in `spec.placement.clusters` or selects by
    /// `spec.placement.clusterSelector`. Read from the stored spec, so an object that does
    /// not decode costs nothing here.
    fn may_select(object: &Watched<Self>, cluster: &str) -> bool {
        selection_may_include(object, cluster)
    }

    /// The object's `spec.placement`, which the framework chooses clusters by
    /// ([`crate::distribution::choose::choose`]) before [`Self::decide`] and explains in
    /// `status.selection`; `None` when the object places by other means.
    fn placement(object: &Self::Object) -> Option<&ClusterPlacement>;

    /// The decision: validation, the shares of the clusters chosen (`input.choice`) and the
    /// kind's own data, without I/O.
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
    /// delivery must leave to it ([`super::super::field_owners`]), read from the object as stored
    /// (so an object that no longer decodes keeps its claims). A kind that claims fields is
    /// listed in `crate::kinds::FIELD_CLAIMANTS`.
    fn field_claims(_object: &Watched<Self>) -> Vec<super::super::field_owners::FieldClaim> {
        Vec::new()
    }
}

/// The clusters chosen for an object (`input.choice`), once its spec passes its
/// validation; otherwise why it cannot be acted on (`Decided::Invalid`'s message).
pub fn valid_selection<D>(
    spec: &impl accord_crds::validate::Validate,
    input: &DecideInput<'_, D>,
) -> Result<Vec<SelectedCluster>, String> {
    spec.validate().map_err(|errors| errors.to_string())?;
    input.selected().map_err(|e| e.to_string())
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

/// The placed object reference of an object of kind `K`.
pub fn placed_ref<K: PlacementKind>(o: &impl ResourceExt) -> PlacedRef {
    PlacedRef::new(K::KIND, &o.namespace().unwrap_or_default(), &o.name_any())
}
