//! One enforcer for every kind of Kafka object ([`KafkaEnforcer`]), and what a kind
//! supplies to it ([`KafkaResource`]): its spec and names, what a look asks Kafka and sees,
//! its judge, its plans and the requests that carry them out — and nothing else.
//!
//! The enforcer keeps the objects assigned to this cluster (one placed object per object name:
//! the first manages it, the others are `Conflict`), its connection to the member's Kafka
//! ([`KafkaLink`], from the connection Secret), and while anything is assigned its tasks:
//! the observer ([`observe::run`]), the applier ([`apply_rounds`] of the kind's requests)
//! and the liveness probe. Nothing runs — no watch, no connection, no probe, no look —
//! while nothing is assigned.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};

use accord_common::distribution::{KindSpec, Observed, PlacedRef, PlacementState};
use accord_kafka::{Admin, KafkaError};
use futures::future::BoxFuture;
use tokio::sync::{Notify, mpsc, watch};
use tracing::info;

use super::batch::{Request, apply_rounds};
use super::link::{KafkaLink, Link};
use super::observe::{self, LookFailure, Observations, Seen, Shared, Target, lock};
use super::probe::Probe;
use super::tasks::{Crew, Tasks};
use super::{KafkaOptions, concerned, conflict, reowned};
use crate::assignments::Assigned;
use crate::enforce::{
    Action, ApplyError, ApplyErrorKind, EventSink, Judgement, KindEnforcer, Mine, WatchEvent,
};
use crate::metrics::Metrics;
use crate::report::Report;

/// What one kind of Kafka object (topics, users) brings to [`KafkaEnforcer`].
pub trait KafkaResource: Sized + Send + Sync + 'static {
    /// The kind's assignment spec.
    type Spec: KindSpec + Send + Sync + 'static;
    /// What a look sees of one object; its default is what is seen of an object Kafka's
    /// answer leaves out (absent, nothing held).
    type Seen: Clone + Debug + Default + PartialEq + Send + Sync + 'static;
    /// What an apply does to one object.
    type Plan: Clone + Debug + Send + Sync + 'static;
    /// What a look asks Kafka about one object besides its name (`()` for nothing).
    type Ask: Clone + Debug + PartialEq + Send + Sync + 'static;
    /// Why a look failed, as the kind tells it.
    type Failure: LookFailure;
    /// What the observations keep besides what was seen, through one connection (`()` for
    /// nothing).
    type Kept: Debug + Default + Send + 'static;

    /// The enforcer's short name, for logs and for routing its watch events.
    const NAME: &'static str;
    /// The resource name of these objects in watch events.
    const RESOURCE: &'static str;
    /// What one object is called in messages and logs (`topic`).
    const ITEM: &'static str;
    /// What a conflict's message calls the object before its name (`topic`, `Kafka user`).
    const WHAT: &'static str;
    /// Whether looks between two full ones cover only the objects applied to and those
    /// newly assigned (rather than every object each time).
    const PARTIAL_LOOKS: bool;
    /// How many times the looks an applied plan may take to show double, each time in a
    /// row it did not show within them.
    const MAX_DOUBLINGS: u32;

    /// The object's name in Kafka (empty: the spec names none, and nothing is kept).
    fn name(spec: &Self::Spec) -> &str;

    /// What looks ask Kafka about each assigned object besides its name (empty for kinds
    /// that ask nothing more). An object asked about differently from the last look is
    /// forgotten until a look asked for the new things.
    fn asks(mine: &Mine<'_, Self::Spec>) -> BTreeMap<String, Self::Ask>;

    /// The judgement of a spec that cannot be followed at all, if it is one.
    fn invalid(spec: &Self::Spec, revision: i64) -> Option<Judgement>;

    /// What the status shows of the object, from what was last `seen` of it.
    fn observed(spec: &Self::Spec, seen: &Self::Seen, kept: &Self::Kept) -> Observed;

    /// Judges the object assigned at `revision` from the last look at it, the last probe of
    /// Kafka and the last apply error (while it stands): what to report and whether to
    /// apply.
    fn judge(
        revision: i64,
        spec: &Self::Spec,
        seen: &Seen<Self::Seen>,
        kept: &Self::Kept,
        probe: &Probe,
        apply_error: Option<&ApplyError>,
    ) -> Judgement;

    /// What to apply to the object, if anything.
    fn plan(spec: &Self::Spec, seen: &Self::Seen, kept: &Self::Kept) -> Option<Self::Plan>;

    /// Whether what was `seen` shows the effect of `plan`.
    fn shows(plan: &Self::Plan, seen: &Self::Seen) -> bool;

    /// Keeps in `kept` only what concerns the `assigned` objects.
    fn retain(kept: &mut Self::Kept, assigned: &BTreeSet<&String>);

    /// A look saw `now` of object `name` where the last one saw `before` (not after an
    /// apply of this agent's): logs what is worth logging.
    fn noticed(name: &str, before: Option<&Self::Seen>, now: &Self::Seen);

    /// Asks Kafka about the objects `names` (with what `asks` says of each).
    fn look(
        admin: &Admin,
        names: &[String],
        asks: &BTreeMap<String, Self::Ask>,
        metrics: &Metrics,
    ) -> impl Future<Output = Result<BTreeMap<String, Self::Seen>, KafkaError>> + Send;

    /// Carries out one round of plans in as few requests as Kafka's protocol allows,
    /// answers each, and notes in the observations what was applied.
    fn execute(
        admin: &Admin,
        round: Vec<Request<Self::Plan>>,
        shared: &Shared<Self>,
        metrics: &Metrics,
    ) -> impl Future<Output = ()> + Send;
}

/// What runs while objects are assigned (besides the Secret watch): the observer, the
/// applier and the probe.
type Running<K> = Tasks<Target<K>, Request<<K as KafkaResource>::Plan>>;

/// Keeps the Kafka objects of kind `K`.
pub struct KafkaEnforcer<K: KafkaResource> {
    options: KafkaOptions,
    metrics: Metrics,
    /// Assigned placed objects by object name; the first one owns the object.
    claimants: BTreeMap<String, BTreeSet<PlacedRef>>,
    /// Placed objects [`KindEnforcer::reassigned`] hands the engine: claimants of a name whose
    /// owner changed at the last assignment.
    reowned: Vec<PlacedRef>,
    /// What looks ask about each assigned object ([`KafkaResource::asks`]).
    asks: observe::Asks<K>,
    link: KafkaLink,
    shared: Shared<K>,
    nudge: Arc<Notify>,
    running: Option<Running<K>>,
}

impl<K: KafkaResource> KafkaEnforcer<K> {
    /// An enforcer reading its connection Secret (`options.secret`) in `namespace` through
    /// `client`, counting its Kafka requests in `metrics`.
    pub fn new(
        client: kube::Client,
        namespace: String,
        options: KafkaOptions,
        metrics: Metrics,
    ) -> Self {
        Self {
            link: KafkaLink::new(client, namespace, &options, K::NAME),
            options,
            metrics,
            claimants: BTreeMap::new(),
            reowned: Vec::new(),
            asks: Arc::default(),
            shared: Arc::new(Mutex::new(Observations::default())),
            nudge: Arc::new(Notify::new()),
            running: None,
        }
    }

    fn all_placed(&self) -> Vec<PlacedRef> {
        self.claimants.values().flatten().cloned().collect()
    }

    fn target(&self) -> Target<K> {
        Target {
            admin: self.link.admin(),
            config: self.link.config(),
            names: Arc::new(self.claimants.keys().cloned().collect()),
            asks: self.asks.clone(),
            epoch: self.link.epoch(),
        }
    }

    fn start(&mut self, events: &EventSink) -> Running<K> {
        self.link.watch(events);
        let crew = Crew {
            shared: self.shared.clone(),
            nudge: self.nudge.clone(),
            options: self.options.clone(),
            metrics: self.metrics.clone(),
        };
        Tasks::spawn(self.target(), events, crew, observe::run::<K>, apply::<K>)
    }

    /// Tells the observer, the applier and the probe the current connection and objects.
    fn publish(&self) {
        if let Some(running) = &self.running {
            running.publish(self.target());
        }
    }

    /// The report of an object that cannot be looked at now (in `state`, saying `message`),
    /// with what was last seen of it.
    fn unlooked(
        &self,
        spec: &K::Spec,
        state: PlacementState,
        message: String,
        revision: i64,
    ) -> Judgement {
        let observations = lock(&self.shared);
        let observed = observations
            .item(K::name(spec))
            .map_or(Observed::Nothing, |s| {
                K::observed(spec, &s.seen, observations.kept())
            });
        Judgement {
            report: Report {
                observed,
                ..Report::without_object(state, message, revision)
            },
            action: Action::Unknown,
        }
    }
}

impl<K: KafkaResource> KindEnforcer for KafkaEnforcer<K> {
    type Spec = K::Spec;

    const NAME: &'static str = K::NAME;

    fn assign(&mut self, mine: &Mine<'_, K::Spec>, events: &EventSink) {
        let mut claimants: BTreeMap<String, BTreeSet<PlacedRef>> = BTreeMap::new();
        for &(placed, spec, _) in mine {
            let name = K::name(spec);
            if !name.is_empty() {
                claimants
                    .entry(name.to_owned())
                    .or_default()
                    .insert(placed.clone());
            }
        }
        let asks = K::asks(mine);
        let asks_changed = asks != *self.asks;
        if asks_changed {
            let mut observations = lock(&self.shared);
            for (name, now) in &asks {
                if self.asks.get(name).is_some_and(|was| was != now) {
                    observations.forget(name);
                }
            }
        }
        // Other specs of the same objects need no look unless they ask Kafka other things;
        // an object added or gone does.
        let changed = asks_changed || claimants.keys().ne(self.claimants.keys());
        self.reowned = reowned(&self.claimants, &claimants);
        self.claimants = claimants;
        self.asks = Arc::new(asks);
        if self.claimants.is_empty() {
            self.running = None;
            if self.link.close() {
                info!(
                    "no Kafka {}s assigned; closing the Kafka connection",
                    K::ITEM
                );
            }
            lock(&self.shared).reset(self.link.epoch());
            return;
        }
        if self.running.is_none() {
            info!(count = self.claimants.len(), "Kafka {}s assigned", K::ITEM);
            self.running = Some(self.start(events));
        } else if changed {
            self.publish();
        }
    }

    fn reassigned(&mut self) -> Vec<PlacedRef> {
        std::mem::take(&mut self.reowned)
    }

    fn event(&mut self, event: WatchEvent) -> Vec<PlacedRef> {
        match concerned(K::RESOURCE, &self.claimants, event) {
            Ok(placed) => placed,
            // The connection Secret's watch.
            Err(secret) => {
                if self.link.event(secret) {
                    // Every object is looked at afresh through the new connection.
                    lock(&self.shared).reset(self.link.epoch());
                    self.publish();
                    self.all_placed()
                } else {
                    Vec::new()
                }
            }
        }
    }

    fn look(
        &self,
        placed: &PlacedRef,
        spec: &K::Spec,
        assigned: &Assigned,
        apply_error: Option<&ApplyError>,
    ) -> Option<Judgement> {
        let revision = assigned.revision;
        if let Some(invalid) = K::invalid(spec, revision) {
            return Some(invalid);
        }
        // Another placed object got to this object first: only one may manage it.
        let name = K::name(spec);
        if let Some(conflict) = conflict(
            self.claimants.get(name),
            placed,
            &format!("{} {name}", K::WHAT),
            revision,
        ) {
            return Some(conflict);
        }
        match self.link.state() {
            Link::Waiting => return None,
            Link::Broken(message) => {
                let state = PlacementState::Unavailable;
                return Some(self.unlooked(spec, state, message.clone(), revision));
            }
            Link::Ready { .. } => {}
        }
        let observations = lock(&self.shared);
        if let Some(failure) = observations.error() {
            let (state, message) = (failure.state(), failure.message().to_owned());
            drop(observations);
            return Some(self.unlooked(spec, state, message, revision));
        }
        let seen = observations.item(name)?;
        Some(K::judge(
            revision,
            spec,
            seen,
            observations.kept(),
            observations.probe(),
            apply_error,
        ))
    }

    fn apply(
        &self,
        _placed: &PlacedRef,
        spec: &K::Spec,
        _assigned: &Assigned,
    ) -> BoxFuture<'static, Result<String, ApplyError>> {
        let ready = |result| -> BoxFuture<'static, Result<String, ApplyError>> {
            Box::pin(std::future::ready(result))
        };
        let Some(running) = &self.running else {
            return ready(Err(ApplyError::new(
                ApplyErrorKind::Unavailable,
                "no Kafka connection",
            )));
        };
        let name = K::name(spec);
        let (plan, version) = {
            let observations = lock(&self.shared);
            let Some(seen) = observations.item(name) else {
                return ready(Err(ApplyError::new(
                    ApplyErrorKind::Unavailable,
                    format!("the {} has not been looked at in Kafka yet", K::ITEM),
                )));
            };
            match K::plan(spec, &seen.seen, observations.kept()) {
                Some(plan) => (plan, seen.version),
                // Nothing to do after all: the same version, so the engine judges again.
                None => return ready(Ok(seen.version.to_string())),
            }
        };
        let name = name.to_owned();
        running.apply(|reply| Request { name, plan, reply }, version)
    }
}

/// Applies the plans arriving on `requests` through the target's admin, a round at a time
/// ([`KafkaResource::execute`]), until the enforcer is gone.
async fn apply<K: KafkaResource>(
    requests: mpsc::UnboundedReceiver<Request<K::Plan>>,
    target: watch::Receiver<Target<K>>,
    shared: Shared<K>,
    nudge: Arc<Notify>,
    metrics: Metrics,
) {
    apply_rounds(
        requests,
        target,
        |t| t.admin.clone(),
        nudge,
        |admin, round| {
            let (shared, metrics) = (shared.clone(), metrics.clone());
            async move { K::execute(&admin, round, &shared, &metrics).await }
        },
    )
    .await;
}
