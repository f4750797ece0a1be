//! The agent's view of what a Kafka enforcer keeps, for any kind of Kafka object: one task
//! that looks at the assigned objects — every resync interval, right after applies, and as
//! soon as the connection or what is assigned changes — and keeps what it saw where the
//! enforcer's judge reads it ([`Observations`]), telling the engine which objects changed
//! through the same [`WatchEvent`]s a Kubernetes watch sends.
//!
//! Kafka has no watch, so out-of-band drift is seen at the next resync at the latest. A
//! failed look marks every object `Unavailable` or `Error` with the reason
//! ([`LookFailure`]) and is retried with backoff, bounded by the resync interval. What a
//! look asks Kafka, and what an object's plan must show, is the kind's
//! ([`KafkaResource`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use accord_common::distribution::PlacementState;
use accord_common::runtime::Retry;
use accord_kafka::{Admin, KafkaConfig, KafkaError};
use tokio::sync::{Notify, watch};
use tracing::debug;

use super::errors::{error_kind, failure_message};
use super::looks::{self, SETTLING, SETTLING_LOOKS};
use super::probe::{Endpoint, Probe, ProbeState, Probed};
use super::resource::KafkaResource;
use crate::enforce::{ApplyError, ApplyErrorKind, EventSink, WatchEvent};
use crate::metrics::Metrics;

/// Why a look failed, as a kind keeps it: what the report says and which error it counts.
pub trait LookFailure: Clone + Debug + PartialEq + Send + Sync + 'static {
    /// The failure of a look that `error` ended.
    fn of(error: &KafkaError) -> Self;
    /// The state of every object while the failure stands.
    fn state(&self) -> PlacementState;
    /// What the report says.
    fn message(&self) -> &str;
    /// The label of `accord_agent_errors_total` it counts as.
    fn metric(&self) -> &'static str;
}

/// A failure that only says why: Kafka could not be looked at (`Unavailable`).
impl LookFailure for String {
    fn of(error: &KafkaError) -> Self {
        failure_message(error)
    }

    fn state(&self) -> PlacementState {
        PlacementState::Unavailable
    }

    fn message(&self) -> &str {
        self
    }

    fn metric(&self) -> &'static str {
        "kafka_unavailable"
    }
}

/// A failure that tells Kafka unreachable (`Unavailable`) from Kafka refusing (`Error`).
impl LookFailure for ApplyError {
    fn of(error: &KafkaError) -> Self {
        ApplyError::new(error_kind(error), failure_message(error))
    }

    fn state(&self) -> PlacementState {
        match self.kind {
            ApplyErrorKind::Unavailable => PlacementState::Unavailable,
            _ => PlacementState::Error,
        }
    }

    fn message(&self) -> &str {
        &self.message
    }

    fn metric(&self) -> &'static str {
        match self.kind {
            ApplyErrorKind::Unavailable => "kafka_unavailable",
            other => other.as_str(),
        }
    }
}

/// What the observer looks at: the connection and the assigned objects.
pub struct Target<K: KafkaResource> {
    /// The admin client, when there is a connection.
    pub admin: Option<Admin>,
    /// The connection's configuration, when there is one: the probe makes a client of its
    /// own from it, so that it never waits behind a long look or apply.
    pub config: Option<Arc<KafkaConfig>>,
    /// Every assigned object's name, sorted.
    pub names: Arc<Vec<String>>,
    /// What a look asks Kafka about each assigned object, for kinds that ask more than
    /// its name (a topic's config keys).
    pub asks: Asks<K>,
    /// Bumped when the connection changes: looks made through an older one are dropped.
    pub epoch: u64,
}

/// What a look asks Kafka about each assigned object.
pub type Asks<K> = Arc<BTreeMap<String, <K as KafkaResource>::Ask>>;

impl<K: KafkaResource> Clone for Target<K> {
    fn clone(&self) -> Self {
        Self {
            admin: self.admin.clone(),
            config: self.config.clone(),
            names: self.names.clone(),
            asks: self.asks.clone(),
            epoch: self.epoch,
        }
    }
}

impl<K: KafkaResource> Endpoint for Target<K> {
    /// The connection, while objects are assigned.
    fn endpoint(&self) -> Option<(u64, Arc<KafkaConfig>)> {
        let config = self.config.clone().filter(|_| !self.names.is_empty())?;
        Some((self.epoch, config))
    }
}

/// One object as last seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen<S> {
    /// Changes whenever what was seen changes, or an apply to the object completed and
    /// shows (or never will): the version an apply is decided on.
    pub version: u64,
    /// What was seen.
    pub seen: S,
}

/// Plans applied to objects, by name, with how many looks did not show each yet.
pub type Applied<K> = BTreeMap<String, (<K as KafkaResource>::Plan, u32)>;

/// What the observer last saw, shared with the enforcer, the applier and the probe (locked
/// only briefly, never across an await).
#[derive(Debug)]
pub struct Observations<K: KafkaResource> {
    items: HashMap<String, Seen<K::Seen>>,
    /// Why the last look failed, while it stands.
    error: Option<K::Failure>,
    /// Whether a look through the current connection succeeded yet.
    looked: bool,
    /// What the last probes through the current connection said.
    probe: ProbeState,
    epoch: u64,
    next_version: u64,
    /// Objects applied to since the last look began. A look that shows the plan's effect
    /// reports the object (even if nothing else changed, so the engine stops waiting for
    /// the apply's result); until then the object keeps its version, so the engine does
    /// not apply the same plan again, and the observer looks again soon.
    applied: Applied<K>,
    /// Objects whose applied plan did not show within its bound, with how many times in a
    /// row (each doubles the next bound, [`KafkaResource::MAX_DOUBLINGS`] times at most);
    /// forgotten once the object's plan shows.
    unshown: HashMap<String, u32>,
    /// What the kind keeps besides what was seen, through this connection.
    kept: K::Kept,
}

impl<K: KafkaResource> Default for Observations<K> {
    fn default() -> Self {
        Self {
            items: HashMap::new(),
            error: None,
            looked: false,
            probe: ProbeState::default(),
            epoch: 0,
            next_version: 0,
            applied: BTreeMap::new(),
            unshown: HashMap::new(),
            kept: K::Kept::default(),
        }
    }
}

/// Which objects a look covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Look {
    /// Every assigned object (at the resync interval, when the connection changes, after a
    /// failure; always, for kinds without [`KafkaResource::PARTIAL_LOOKS`]).
    Every,
    /// Only the objects waiting for an apply to show: the looks that follow applies, so
    /// that a thousand topics created while a thousand others settle do not make Kafka
    /// describe every topic's configs several times a second.
    Applied,
    /// The objects waiting for an apply to show and these, newly assigned (or asked about
    /// differently) since the last look: assignments that arrive a few at a time are
    /// looked at a few at a time, not by describing every assigned object again each time.
    Added(Vec<String>),
}

impl Look {
    /// The objects this look covers, of the assigned `names` and those `applied` to.
    pub fn covers<T>(&self, names: &[String], applied: &BTreeMap<String, T>) -> Vec<String> {
        match self {
            Look::Every => names.to_vec(),
            Look::Applied => applied.keys().cloned().collect(),
            Look::Added(added) => {
                let mut covered: BTreeSet<String> = applied.keys().cloned().collect();
                covered.extend(added.iter().cloned());
                covered.into_iter().collect()
            }
        }
    }
}

impl<K: KafkaResource> Probed for Observations<K> {
    fn probe_state(&mut self) -> &mut ProbeState {
        &mut self.probe
    }
}

/// [`Observations`] shared between the observer, the applier, the probe and the enforcer.
pub type Shared<K> = Arc<Mutex<Observations<K>>>;

/// Locks the observations; a panic elsewhere while holding the lock leaves them usable.
pub fn lock<K: KafkaResource>(shared: &Shared<K>) -> MutexGuard<'_, Observations<K>> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K: KafkaResource> Observations<K> {
    /// What was last seen of object `name` (`None` before the first look that included it
    /// since it was assigned).
    pub fn item(&self, name: &str) -> Option<&Seen<K::Seen>> {
        self.items.get(name)
    }

    /// What the kind keeps besides what was seen.
    pub fn kept(&self) -> &K::Kept {
        &self.kept
    }

    /// What the kind keeps besides what was seen, to change it.
    pub fn kept_mut(&mut self) -> &mut K::Kept {
        &mut self.kept
    }

    /// Why the last look failed, while it stands.
    pub fn error(&self) -> Option<&K::Failure> {
        self.error.as_ref()
    }

    /// Whether a look through the current connection succeeded yet.
    pub fn looked(&self) -> bool {
        self.looked
    }

    /// What the last probe through the current connection said.
    pub fn probe(&self) -> &Probe {
        self.probe.probe()
    }

    /// Records a probe through connection `epoch` that answered (`Ok`) or failed with a
    /// message; answers whether that changes any judgement (Kafka stopped answering,
    /// answers again, or fails differently): every object is then judged again.
    pub fn probed(&mut self, epoch: u64, outcome: Result<(), String>) -> bool {
        self.probe.probed(epoch, outcome)
    }

    /// Forgets everything but the versions handed out (an apply decided before is never
    /// mistaken for one decided after): the connection changed to `epoch` (another Kafka,
    /// perhaps, where nothing this agent did is known to be in place).
    pub fn reset(&mut self, epoch: u64) {
        *self = Self {
            epoch,
            next_version: self.next_version,
            ..Self::default()
        };
        self.probe.reset(epoch);
    }

    /// Forgets what was seen of object `name`: a look now asks Kafka other things about it
    /// than the last one did, so it is judged only once a look has asked for these.
    pub fn forget(&mut self, name: &str) {
        self.items.remove(name);
    }

    /// Notes that `plan` was applied to object `name`.
    pub fn applied(&mut self, name: String, plan: K::Plan) {
        self.applied.insert(name, (plan, 0));
    }

    /// A look begins: takes the objects applied to so far.
    pub fn begin(&mut self) -> Applied<K> {
        std::mem::take(&mut self.applied)
    }

    /// Whether an applied change waits to show in Kafka (the next look comes soon).
    pub fn settling(&self) -> bool {
        !self.applied.is_empty()
    }

    /// Whether the next look must cover every object rather than only those applied to:
    /// no look succeeded yet through this connection, the last one failed, or Kafka answers
    /// its probe again after failing it (taken: asked once per look).
    pub fn wants_every_item(&mut self) -> bool {
        !self.looked || self.error.is_some() || self.probe.take_stale()
    }

    /// The looks object `name`'s applied plan may take to show before it is judged again.
    pub fn settling_looks(&self, name: &str) -> u32 {
        let doublings = self.unshown.get(name).copied().unwrap_or(0);
        SETTLING_LOOKS << doublings.min(K::MAX_DOUBLINGS)
    }

    fn bump(&mut self) -> u64 {
        self.next_version += 1;
        self.next_version
    }

    /// Records a look at every object in `names` (all assigned) through connection `epoch`,
    /// begun with `applied` (from [`Self::begin`]); answers what to tell the engine.
    pub fn record(
        &mut self,
        epoch: u64,
        names: &[String],
        outcome: Result<BTreeMap<String, K::Seen>, K::Failure>,
        applied: Applied<K>,
    ) -> Vec<WatchEvent> {
        self.record_look(epoch, names, Look::Every, outcome, applied)
    }

    /// Records a look that covered `look` of the assigned `names` (with [`Look::Applied`],
    /// only the objects in `applied`, with [`Look::Added`] those and the added ones; every
    /// other object keeps what the last full look saw). An object a look covered that
    /// Kafka's answer leaves out is seen as the default of [`KafkaResource::Seen`].
    pub fn record_look(
        &mut self,
        epoch: u64,
        names: &[String],
        look: Look,
        outcome: Result<BTreeMap<String, K::Seen>, K::Failure>,
        mut applied: Applied<K>,
    ) -> Vec<WatchEvent> {
        if epoch != self.epoch {
            // Made through a connection that has been replaced since.
            return Vec::new();
        }
        let mut seen = match outcome {
            Err(failure) => {
                for (name, entry) in applied {
                    // A plan applied while this look ran is the newer one.
                    self.applied.entry(name).or_insert(entry);
                }
                if self.error.as_ref() == Some(&failure) {
                    return Vec::new();
                }
                let message = failure.message().to_owned();
                self.error = Some(failure);
                return vec![WatchEvent::Failed {
                    resource: K::RESOURCE,
                    namespace: String::new(),
                    message,
                }];
            }
            Ok(seen) => seen,
        };
        let wanted: BTreeSet<&String> = names.iter().collect();
        applied.retain(|name, _| wanted.contains(name));
        let looked = look.covers(names, &applied);
        let recovered = match look {
            Look::Every => {
                let recovered = self.error.take().is_some() || !self.looked;
                self.looked = true;
                recovered
            }
            Look::Applied | Look::Added(_) => false,
        };
        // Objects no longer assigned are forgotten, so one assigned again is looked at anew.
        self.items.retain(|name, _| wanted.contains(name));
        self.unshown.retain(|name, _| wanted.contains(name));
        K::retain(&mut self.kept, &wanted);
        let looked: Vec<String> = looked
            .into_iter()
            .filter(|name| wanted.contains(name))
            .collect();
        let mut changed = Vec::new();
        for name in &looked {
            let now = seen.remove(name).unwrap_or_default();
            if self.applied.contains_key(name) {
                // Applied to while this look ran: it may not show that yet; the next look
                // (soon) tells.
                continue;
            }
            if let Some((plan, looks)) = applied.remove(name) {
                let shown = K::shows(&plan, &now);
                if !recovered && !shown && looks + 1 < self.settling_looks(name) {
                    // Not visible yet: keep the version the apply was decided on.
                    if let Some(s) = self.items.get_mut(name) {
                        s.seen = now;
                    }
                    self.applied.insert(name.clone(), (plan, looks + 1));
                    continue;
                }
                // Shows (or never will): the engine waits for this object's next version.
                if shown || recovered {
                    self.unshown.remove(name);
                } else {
                    *self.unshown.entry(name.clone()).or_default() += 1;
                }
                let version = self.bump();
                self.items.insert(name.clone(), Seen { version, seen: now });
                changed.push(name.clone());
                continue;
            }
            let before = self.items.get(name).map(|s| &s.seen);
            K::noticed(name, before, &now);
            if recovered || before != Some(&now) {
                let version = self.bump();
                self.items.insert(name.clone(), Seen { version, seen: now });
                changed.push(name.clone());
            }
        }
        if recovered {
            // Every object is to be judged again (each got a new version).
            return vec![WatchEvent::Synced {
                resource: K::RESOURCE,
                namespace: String::new(),
            }];
        }
        changed
            .into_iter()
            .map(|name| WatchEvent::Changed {
                resource: K::RESOURCE,
                namespace: String::new(),
                name,
            })
            .collect()
    }
}

/// The look to make now at target `t`, of which `known` (the connection epoch and what was
/// asked) was looked at last; `every_due` when a full look is due anyway.
fn next_look<K: KafkaResource>(
    observations: &mut Observations<K>,
    t: &Target<K>,
    known: Option<&(u64, Asks<K>)>,
    every_due: bool,
) -> Look {
    if !K::PARTIAL_LOOKS || observations.wants_every_item() || every_due {
        return Look::Every;
    }
    match known.filter(|(epoch, _)| *epoch == t.epoch) {
        None => Look::Every,
        // Compared whether or not a change was signalled: the target read above may hold
        // a change that arrived while the last look ran. New objects, and objects asked
        // about differently now.
        Some((_, before)) => Look::Added(
            t.names
                .iter()
                .filter(|name| before.get(*name) != t.asks.get(*name))
                .cloned()
                .collect(),
        ),
    }
}

/// Looks at the target's objects whenever `resync` passes, `nudge` is notified or the
/// target changes, until the engine is gone.
pub async fn run<K: KafkaResource>(
    mut target: watch::Receiver<Target<K>>,
    nudge: Arc<Notify>,
    shared: Shared<K>,
    events: EventSink,
    resync: Duration,
    metrics: Metrics,
) {
    let mut retry: Option<Retry> = None;
    // When every object was last looked at. A look covers every object once per resync
    // interval, when the connection changed and when the observations ask for it; the
    // looks in between (for kinds that make them) cover the objects applied to (while they
    // settle) and those assigned since the look before.
    let mut every_looked: Option<Instant> = None;
    // The connection epoch and what was asked of the target the last look was made for.
    let mut known: Option<(u64, Asks<K>)> = None;
    loop {
        let t = target.borrow_and_update().clone();
        let mut delay = resync;
        if let Some(admin) = t.admin.as_ref().filter(|_| !t.names.is_empty()) {
            let (which, applied) = {
                let mut observations = lock(&shared);
                let every_due = every_looked.is_none_or(|at| at.elapsed() >= resync);
                let which = next_look(&mut observations, &t, known.as_ref(), every_due);
                (which, observations.begin())
            };
            known = Some((t.epoch, t.asks.clone()));
            let every = which == Look::Every;
            let looked = which.covers(&t.names, &applied);
            let outcome = if looked.is_empty() {
                Ok(BTreeMap::new())
            } else {
                K::look(admin, &looked, &t.asks, &metrics)
                    .await
                    .map_err(|e| K::Failure::of(&e))
            };
            if every && outcome.is_ok() {
                every_looked = Some(Instant::now());
            }
            match &outcome {
                Ok(seen) => {
                    retry = None;
                    debug!(
                        kind = K::NAME,
                        looked = looked.len(),
                        seen = seen.len(),
                        every,
                        "looked at Kafka"
                    );
                    // The next full look is one resync interval after the last.
                    if let Some(at) = every_looked {
                        delay = resync.saturating_sub(at.elapsed());
                    }
                }
                Err(failure) => {
                    metrics.error(failure.metric());
                    delay = looks::after_failure(&mut retry, resync);
                }
            }
            let (out, settling) = {
                let mut observations = lock(&shared);
                let out = observations.record_look(t.epoch, &t.names, which, outcome, applied);
                (out, observations.settling())
            };
            if settling {
                delay = delay.min(SETTLING);
            }
            if !looks::tell(&events, out).await {
                return;
            }
        }
        if !looks::until_next(&mut target, &nudge, delay).await {
            return;
        }
    }
}

/// What the tests of every kind's observations share.
#[cfg(test)]
pub mod testing {
    use super::*;

    /// Owned names.
    pub fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    /// The objects `events` say changed.
    pub fn changed(events: &[WatchEvent]) -> Vec<String> {
        events
            .iter()
            .filter_map(|e| match e {
                WatchEvent::Changed { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect()
    }

    /// Notes `plan` applied to `name` (one of the assigned `names`), then looks — Kafka's
    /// answer never showing it — until a look tells the engine something (fewer than
    /// `at_most` looks): how many looks that took, and what it was told.
    pub fn looks_until_told<K: KafkaResource>(
        o: &mut Observations<K>,
        names: &[String],
        name: &str,
        plan: K::Plan,
        at_most: u32,
    ) -> (u32, Vec<WatchEvent>) {
        o.applied(name.to_owned(), plan);
        let mut looks = 0;
        loop {
            looks += 1;
            let applied = o.begin();
            let events = o.record(0, names, Ok(BTreeMap::new()), applied);
            if !events.is_empty() {
                return (looks, events);
            }
            assert!(looks < at_most, "never told after {looks} looks");
        }
    }
}
