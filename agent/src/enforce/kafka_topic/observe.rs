//! The agent's view of its Kafka: one task that describes every assigned topic in one
//! Metadata and one DescribeConfigs request — every resync interval, right after applies,
//! and as soon as the connection or the list of topics changes — and keeps what it saw
//! where the enforcer's judge reads it ([`Observations`]), telling the engine which topics
//! changed through the same [`WatchEvent`]s a Kubernetes watch sends.
//!
//! Kafka has no watch for topic metadata or configs, so out-of-band drift (a managed key
//! changed, the topic deleted) is seen at the next resync at the latest. A failed look
//! (unreachable, authentication refused) marks every topic `Unavailable` with the reason
//! and is retried with backoff, bounded by the resync interval.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use accord_common::runtime::Retry;
use accord_kafka::{Admin, KafkaConfig, KafkaError};
use tokio::sync::{Notify, watch};
use tracing::{debug, warn};

use super::judge::{Plan, TopicSeen, shows, topic_settings};
pub use crate::enforce::kafka::errors::failure_message;
use crate::enforce::kafka::looks::{self, SETTLING, SETTLING_LOOKS};
use crate::enforce::kafka::probe::Probe;
use crate::enforce::kafka::probe::{Endpoint, ProbeState, Probed};
use crate::enforce::{EventSink, WatchEvent};
use crate::metrics::Metrics;

/// The resource name of Kafka topics in watch events.
pub const TOPICS: &str = "kafkatopics";

/// Each time a topic's plan was judged again without showing, it waits twice the looks
/// before the next time, up to `SETTLING_LOOKS << MAX_DOUBLINGS`: a broker slow to list
/// acknowledged topics (20–48 s measured on cold brokers) gets each CreateTopics a handful
/// of times, not one every few seconds.
const MAX_DOUBLINGS: u32 = 3;

/// What the observer looks at: the connection and the assigned topics.
#[derive(Clone, Default)]
pub struct Target {
    /// The admin client, when there is a connection.
    pub admin: Option<Admin>,
    /// The connection's configuration, when there is one: the probe makes a client of its
    /// own from it, so that it never waits behind a long look or apply.
    pub config: Option<Arc<KafkaConfig>>,
    /// Every assigned topic name, sorted.
    pub topics: Arc<Vec<String>>,
    /// For each assigned topic, the config keys its spec names (set or removed), sorted:
    /// the only keys a look asks Kafka for.
    pub keys: Keys,
    /// Bumped when the connection changes: looks made through an older one are dropped.
    pub epoch: u64,
}

impl Endpoint for Target {
    /// The connection, while topics are assigned.
    fn endpoint(&self) -> Option<(u64, Arc<KafkaConfig>)> {
        let config = self.config.clone().filter(|_| !self.topics.is_empty())?;
        Some((self.epoch, config))
    }
}

/// For each assigned topic, the config keys its spec names.
pub type Keys = Arc<BTreeMap<String, Vec<String>>>;

/// One topic as last seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// Changes whenever what was seen changes, or an apply to the topic completed since
    /// the look before: the version an apply is decided on.
    pub version: u64,
    /// What was seen.
    pub seen: TopicSeen,
}

/// What the observer last saw, shared with the enforcer (locked only briefly, never
/// across an await).
#[derive(Debug, Default)]
pub struct Observations {
    topics: HashMap<String, Seen>,
    /// Why the last look failed, while it stands.
    error: Option<String>,
    /// Whether a look through the current connection succeeded yet.
    looked: bool,
    /// What the last probes through the current connection said.
    probe: ProbeState,
    epoch: u64,
    next_version: u64,
    /// Topics applied to since the last look began, with what was applied and how many
    /// looks did not show it yet. A look that shows the plan's effect reports the topic
    /// (even if nothing else changed, so the engine stops waiting for the apply's
    /// result); until then the topic keeps its version, so the engine does not apply the
    /// same plan again, and the observer looks again soon.
    applied: BTreeMap<String, (Plan, u32)>,
    /// Topics whose applied plan did not show within its bound, with how many times in a
    /// row (each doubles the next bound); forgotten once the topic's plan shows.
    unshown: HashMap<String, u32>,
}

/// Which topics a look covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Look {
    /// Every assigned topic (at the resync interval, when the connection changes, after a
    /// failure).
    Every,
    /// Only the topics waiting for an apply to show: the looks that follow applies, so
    /// that a thousand topics created while a thousand others settle do not make Kafka
    /// describe every topic's configs several times a second.
    Applied,
    /// The topics waiting for an apply to show and these, newly assigned since the last
    /// look: assignments that arrive a few at a time are looked at a few at a time, not
    /// by describing every assigned topic again each time.
    Added(Vec<String>),
}

impl Look {
    /// The topics this look covers, of the assigned `topics` and those `applied` to.
    pub fn covers<T>(&self, topics: &[String], applied: &BTreeMap<String, T>) -> Vec<String> {
        match self {
            Look::Every => topics.to_vec(),
            Look::Applied => applied.keys().cloned().collect(),
            Look::Added(added) => {
                let mut names: BTreeSet<String> = applied.keys().cloned().collect();
                names.extend(added.iter().cloned());
                names.into_iter().collect()
            }
        }
    }
}

impl Probed for Observations {
    fn probe_state(&mut self) -> &mut ProbeState {
        &mut self.probe
    }
}

/// [`Observations`] shared between the observer, the applier and the enforcer.
pub type Shared = Arc<Mutex<Observations>>;

impl Observations {
    /// What was last seen of `topic` (`None` before the first look that included it).
    pub fn topic(&self, topic: &str) -> Option<&Seen> {
        self.topics.get(topic)
    }

    /// Why the last look failed, while it stands.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
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
    /// answers again, or fails differently): every topic is then judged again.
    pub fn probed(&mut self, epoch: u64, outcome: Result<(), String>) -> bool {
        self.probe.probed(epoch, outcome)
    }

    /// Forgets everything: the connection changed to `epoch`.
    pub fn reset(&mut self, epoch: u64) {
        self.topics.clear();
        self.error = None;
        self.looked = false;
        self.probe.reset(epoch);
        self.epoch = epoch;
        self.applied.clear();
        self.unshown.clear();
    }

    /// Forgets what was seen of `topic`: its spec now names other config keys than the
    /// last look asked for, so it is judged only once a look has asked for these.
    pub fn forget(&mut self, topic: &str) {
        self.topics.remove(topic);
    }

    /// Notes that `plan` was applied to `topic`.
    pub fn applied(&mut self, topic: String, plan: Plan) {
        self.applied.insert(topic, (plan, 0));
    }

    /// A look begins: takes the topics applied to so far.
    pub fn begin(&mut self) -> BTreeMap<String, (Plan, u32)> {
        std::mem::take(&mut self.applied)
    }

    /// Whether an applied change waits to show in Kafka (the next look comes soon).
    pub fn settling(&self) -> bool {
        !self.applied.is_empty()
    }

    /// Whether the next look must cover every topic rather than only those applied to: no
    /// look succeeded yet through this connection, the last one failed, or Kafka answers
    /// its probe again after failing it (taken: asked once per look).
    pub fn wants_every_topic(&mut self) -> bool {
        !self.looked || self.error.is_some() || self.probe.take_stale()
    }

    /// The looks `topic`'s applied plan may take to show before it is judged again.
    fn settling_looks(&self, topic: &str) -> u32 {
        let doublings = self.unshown.get(topic).copied().unwrap_or(0);
        SETTLING_LOOKS << doublings.min(MAX_DOUBLINGS)
    }

    fn bump(&mut self) -> u64 {
        self.next_version += 1;
        self.next_version
    }

    /// Records a look at every topic in `topics` (all assigned) through connection `epoch`,
    /// begun with `applied` (from [`Self::begin`]); answers what to tell the engine.
    pub fn record(
        &mut self,
        epoch: u64,
        topics: &[String],
        outcome: Result<BTreeMap<String, TopicSeen>, String>,
        applied: BTreeMap<String, (Plan, u32)>,
    ) -> Vec<WatchEvent> {
        self.record_look(epoch, topics, Look::Every, outcome, applied)
    }

    /// Records a look that covered `look` of the assigned `topics` (with [`Look::Applied`],
    /// only the topics in `applied`, with [`Look::Added`] those and the added ones; every
    /// other topic keeps what the last full look saw).
    pub fn record_look(
        &mut self,
        epoch: u64,
        topics: &[String],
        look: Look,
        outcome: Result<BTreeMap<String, TopicSeen>, String>,
        mut applied: BTreeMap<String, (Plan, u32)>,
    ) -> Vec<WatchEvent> {
        if epoch != self.epoch {
            // Made through a connection that has been replaced since.
            return Vec::new();
        }
        let mut seen = match outcome {
            Err(message) => {
                for (name, entry) in applied {
                    // A plan applied while this look ran is the newer one.
                    self.applied.entry(name).or_insert(entry);
                }
                if self.error.as_deref() == Some(message.as_str()) {
                    return Vec::new();
                }
                self.error = Some(message.clone());
                return vec![WatchEvent::Failed {
                    resource: TOPICS,
                    namespace: String::new(),
                    message,
                }];
            }
            Ok(seen) => seen,
        };
        let wanted: BTreeSet<&String> = topics.iter().collect();
        applied.retain(|name, _| wanted.contains(name));
        let looked = look.covers(topics, &applied);
        let recovered = match look {
            Look::Every => {
                let recovered = self.error.take().is_some() || !self.looked;
                self.looked = true;
                recovered
            }
            Look::Applied | Look::Added(_) => false,
        };
        // Topics no longer assigned are forgotten, so one assigned again is looked at anew.
        self.topics.retain(|name, _| wanted.contains(name));
        self.unshown.retain(|name, _| wanted.contains(name));
        let looked: Vec<String> = looked
            .into_iter()
            .filter(|name| wanted.contains(name))
            .collect();
        let mut changed = Vec::new();
        for name in &looked {
            let now = seen.remove(name).unwrap_or(TopicSeen::Absent);
            if self.applied.contains_key(name) {
                // Applied to while this look ran: it may not show that yet; the next look
                // (soon) tells.
                continue;
            }
            if let Some((plan, looks)) = applied.remove(name) {
                let shown = shows(&plan, &now);
                if !recovered && !shown && looks + 1 < self.settling_looks(name) {
                    // Not visible yet: keep the version the apply was decided on.
                    if let Some(s) = self.topics.get_mut(name) {
                        s.seen = now;
                    }
                    self.applied.insert(name.clone(), (plan, looks + 1));
                    continue;
                }
                if shown || recovered {
                    self.unshown.remove(name);
                } else {
                    *self.unshown.entry(name.clone()).or_default() += 1;
                }
                let version = self.bump();
                self.topics
                    .insert(name.clone(), Seen { version, seen: now });
                changed.push(name.clone());
                continue;
            }
            let before = self.topics.get(name).map(|s| &s.seen);
            if matches!(before, Some(TopicSeen::Present { .. })) && now == TopicSeen::Absent {
                // Not by this agent (its own deletions are applied plans, above).
                warn!(topic = %name, "the topic disappeared from Kafka (deleted outside Accord)");
            }
            let same = before == Some(&now);
            if recovered || !same {
                let version = self.bump();
                self.topics
                    .insert(name.clone(), Seen { version, seen: now });
                changed.push(name.clone());
            }
        }
        if recovered {
            // Every topic is to be judged again (each got a new version).
            return vec![WatchEvent::Synced {
                resource: TOPICS,
                namespace: String::new(),
            }];
        }
        changed
            .into_iter()
            .map(|name| WatchEvent::Changed {
                resource: TOPICS,
                namespace: String::new(),
                name,
            })
            .collect()
    }
}

/// Describes `topics`: one Metadata request, then one DescribeConfigs for those that exist,
/// asking only for the config keys in `keys` (a topic without keys is not asked about).
pub async fn look(
    admin: &Admin,
    topics: &[String],
    keys: &BTreeMap<String, Vec<String>>,
    metrics: &Metrics,
) -> Result<BTreeMap<String, TopicSeen>, KafkaError> {
    metrics.kafka_request("metadata");
    let started = Instant::now();
    let described = admin.describe_topics(topics).await?;
    let metadata = started.elapsed();
    let present: BTreeMap<String, Vec<String>> = described
        .keys()
        .map(|name| (name.clone(), keys.get(name).cloned().unwrap_or_default()))
        .collect();
    if present.values().any(|keys| !keys.is_empty()) {
        metrics.kafka_request("describe_configs");
    }
    let mut configs = admin.describe_config_keys(&present).await?;
    debug!(
        topics = topics.len(),
        present = present.len(),
        metadata_ms = metadata.as_millis(),
        configs_ms = (started.elapsed() - metadata).as_millis(),
        "described the Kafka topics"
    );
    Ok(described
        .into_iter()
        .filter_map(|(name, d)| {
            let configs = match configs.remove(&name) {
                Some(Ok(entries)) => Ok(topic_settings(&entries)),
                // Deleted between the two requests.
                Some(Err(e)) if e.is_unknown_topic() => return None,
                Some(Err(e)) => Err(e.to_string()),
                None => Err("Kafka described no configs for the topic".to_owned()),
            };
            let seen = TopicSeen::Present {
                partitions: d.partitions,
                replication_factor: d.replication_factor,
                configs,
            };
            Some((name, seen))
        })
        .collect())
}

/// Looks at the target's topics whenever `resync` passes, `nudge` is notified or the target
/// changes, until the engine is gone.
pub async fn run(
    mut target: watch::Receiver<Target>,
    nudge: Arc<Notify>,
    shared: Shared,
    events: EventSink,
    resync: Duration,
    metrics: Metrics,
) {
    let mut retry: Option<Retry> = None;
    // When every topic was last looked at. A look covers every topic once per resync
    // interval, when the connection changed and when the observations ask for it; the
    // looks in between cover the topics applied to (while they settle) and those assigned
    // since the look before.
    let mut every_looked: Option<Instant> = None;
    // The connection epoch and the topics (with their keys) of the target the last look
    // was made for.
    let mut known: Option<(u64, Keys)> = None;
    loop {
        let t = target.borrow_and_update().clone();
        let mut delay = resync;
        if let Some(admin) = t.admin.as_ref().filter(|_| !t.topics.is_empty()) {
            let (which, applied) = {
                let mut observations = lock(&shared);
                let resync_due = every_looked.is_none_or(|at| at.elapsed() >= resync);
                let before = known.as_ref().filter(|(epoch, _)| *epoch == t.epoch);
                let which = match before {
                    _ if observations.wants_every_topic() || resync_due => Look::Every,
                    None => Look::Every,
                    // Compared whether or not a change was signalled: the target read
                    // above may hold a change that arrived while the last look ran.
                    // New topics, and topics whose spec names other keys now.
                    Some((_, before)) => Look::Added(
                        t.topics
                            .iter()
                            .filter(|name| before.get(*name) != t.keys.get(*name))
                            .cloned()
                            .collect(),
                    ),
                };
                (which, observations.begin())
            };
            known = Some((t.epoch, t.keys.clone()));
            let every = which == Look::Every;
            let looked = which.covers(&t.topics, &applied);
            let outcome = if looked.is_empty() {
                Ok(BTreeMap::new())
            } else {
                look(admin, &looked, &t.keys, &metrics)
                    .await
                    .map_err(|e| failure_message(&e))
            };
            if every && outcome.is_ok() {
                every_looked = Some(Instant::now());
            }
            match &outcome {
                Ok(seen) => {
                    retry = None;
                    debug!(
                        topics = looked.len(),
                        present = seen.len(),
                        every,
                        "looked at the Kafka topics"
                    );
                    // The next full look is one resync interval after the last.
                    if let Some(at) = every_looked {
                        delay = resync.saturating_sub(at.elapsed());
                    }
                }
                Err(_) => {
                    metrics.error("kafka_unavailable");
                    delay = looks::after_failure(&mut retry, resync);
                }
            }
            let (out, settling) = {
                let mut observations = lock(&shared);
                let out = observations.record_look(t.epoch, &t.topics, which, outcome, applied);
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

/// Locks the observations; a panic elsewhere while holding the lock leaves them usable.
pub fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Observations> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn present(partitions: i32) -> TopicSeen {
        TopicSeen::Present {
            partitions,
            replication_factor: 1,
            configs: Ok(BTreeMap::new()),
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn changed(events: &[WatchEvent]) -> Vec<String> {
        events
            .iter()
            .filter_map(|e| match e {
                WatchEvent::Changed { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_first_look_reports_every_topic_and_absent_ones_as_absent() {
        let mut o = Observations::default();
        let topics = names(&["a", "b"]);
        let events = o.record(
            0,
            &topics,
            Ok(BTreeMap::from([("a".to_owned(), present(3))])),
            BTreeMap::new(),
        );
        assert!(matches!(events.as_slice(), [WatchEvent::Synced { .. }]));
        assert!(o.looked());
        assert_eq!(o.topic("a").unwrap().seen, present(3));
        assert_eq!(o.topic("b").unwrap().seen, TopicSeen::Absent);
    }

    #[test]
    fn later_looks_report_only_changed_topics_with_new_versions() {
        let mut o = Observations::default();
        let topics = names(&["a", "b"]);
        let seen = BTreeMap::from([("a".to_owned(), present(3)), ("b".to_owned(), present(1))]);
        o.record(0, &topics, Ok(seen.clone()), BTreeMap::new());
        let (va, vb) = (o.topic("a").unwrap().version, o.topic("b").unwrap().version);
        let mut next = seen.clone();
        next.insert("b".to_owned(), present(2));
        let events = o.record(0, &topics, Ok(next), BTreeMap::new());
        assert_eq!(changed(&events), vec!["b"]);
        assert_eq!(o.topic("a").unwrap().version, va);
        assert_ne!(o.topic("b").unwrap().version, vb);
        // Nothing changed: nothing to tell.
        let mut same = seen;
        same.insert("b".to_owned(), present(2));
        assert!(o.record(0, &topics, Ok(same), BTreeMap::new()).is_empty());
    }

    fn create() -> Plan {
        Plan::Create(accord_kafka::NewTopic {
            name: "a".into(),
            partitions: 3,
            replication_factor: 1,
            config: BTreeMap::new(),
        })
    }

    #[test]
    fn an_applied_topic_keeps_its_version_until_kafka_shows_the_change_then_is_reported() {
        let mut o = Observations::default();
        let topics = names(&["a"]);
        o.record(0, &topics, Ok(BTreeMap::new()), BTreeMap::new());
        let before = o.topic("a").unwrap().version;
        o.applied("a".into(), create());
        assert!(o.settling());
        // Kafka's metadata does not list the new topic yet.
        let applied = o.begin();
        assert!(o.begin().is_empty(), "taken once");
        let events = o.record(0, &topics, Ok(BTreeMap::new()), applied);
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(o.topic("a").unwrap().version, before);
        assert!(o.settling(), "looks again soon");
        // Now it does.
        let applied = o.begin();
        let seen = BTreeMap::from([("a".to_owned(), present(3))]);
        let events = o.record(0, &topics, Ok(seen.clone()), applied);
        assert_eq!(changed(&events), vec!["a"]);
        assert_ne!(o.topic("a").unwrap().version, before);
        assert!(!o.settling());
        // A plan whose effect is already there is reported by the next look, unchanged.
        let before = o.topic("a").unwrap().version;
        o.applied("a".into(), create());
        let applied = o.begin();
        assert_eq!(changed(&o.record(0, &topics, Ok(seen), applied)), vec!["a"]);
        assert_ne!(o.topic("a").unwrap().version, before);
    }

    #[test]
    fn a_look_at_added_topics_reports_them_and_forgets_topics_no_longer_assigned() {
        let mut o = Observations::default();
        let topics = names(&["a", "b"]);
        o.record(
            0,
            &topics,
            Ok(BTreeMap::from([("a".to_owned(), present(1))])),
            BTreeMap::new(),
        );
        let va = o.topic("a").unwrap().version;
        // "c" is assigned and "b" is not any more: the look covers only "c".
        let topics = names(&["a", "c"]);
        let look = Look::Added(names(&["c"]));
        assert_eq!(
            look.covers(&topics, &BTreeMap::<String, ()>::new()),
            names(&["c"])
        );
        let events = o.record_look(0, &topics, look, Ok(BTreeMap::new()), BTreeMap::new());
        assert_eq!(changed(&events), vec!["c"]);
        assert_eq!(o.topic("c").unwrap().seen, TopicSeen::Absent);
        assert_eq!(o.topic("a").unwrap().version, va, "a was not looked at");
        assert!(o.topic("b").is_none(), "b is no longer assigned");
        // A topic forgotten (its spec names other keys now) waits for the next look.
        o.forget("a");
        assert!(o.topic("a").is_none());
        // Added topics and applied ones are looked at together, each once.
        o.applied("c".into(), create());
        let applied = o.begin();
        assert_eq!(
            Look::Added(names(&["a", "c"])).covers(&topics, &applied),
            names(&["a", "c"])
        );
    }

    #[test]
    fn a_look_at_the_applied_topics_reports_them_and_leaves_every_other_topic_as_it_was() {
        let mut o = Observations::default();
        let topics = names(&["a", "b", "c"]);
        let seen = BTreeMap::from([("b".to_owned(), present(1)), ("c".to_owned(), present(1))]);
        o.record(0, &topics, Ok(seen), BTreeMap::new());
        assert!(!o.wants_every_topic(), "a look succeeded");
        let (vb, vc) = (o.topic("b").unwrap().version, o.topic("c").unwrap().version);
        o.applied("a".into(), create());
        // The look covered only "a": "b" and "c", missing from its answer, are not absent.
        let applied = o.begin();
        let only_a = BTreeMap::from([("a".to_owned(), present(3))]);
        let events = o.record_look(0, &topics, Look::Applied, Ok(only_a), applied);
        assert_eq!(changed(&events), vec!["a"]);
        assert_eq!(o.topic("a").unwrap().seen, present(3));
        assert_eq!(o.topic("b").unwrap().seen, present(1));
        assert_eq!(
            (o.topic("b").unwrap().version, o.topic("c").unwrap().version),
            (vb, vc)
        );
        // Not showing yet: it keeps settling, like after a full look.
        o.applied("a".into(), create());
        let applied = o.begin();
        let events = o.record_look(0, &topics, Look::Applied, Ok(BTreeMap::new()), applied);
        assert!(events.is_empty(), "{events:?}");
        assert!(o.settling());
    }

    #[test]
    fn a_failed_look_or_kafka_answering_again_asks_for_a_look_at_every_topic() {
        let mut o = Observations::default();
        let topics = names(&["a"]);
        assert!(o.wants_every_topic(), "nothing looked at yet");
        o.record(0, &topics, Ok(BTreeMap::new()), BTreeMap::new());
        assert!(!o.wants_every_topic());
        o.record(
            0,
            &topics,
            Err("Kafka unreachable: x".into()),
            BTreeMap::new(),
        );
        assert!(o.wants_every_topic(), "the last look failed");
        o.record(0, &topics, Ok(BTreeMap::new()), BTreeMap::new());
        o.probed(0, Err("Kafka unreachable: x".into()));
        assert!(!o.wants_every_topic(), "still failing: nothing new to see");
        o.probed(0, Ok(()));
        assert!(
            o.wants_every_topic(),
            "answers again: what was seen may be stale"
        );
        assert!(!o.wants_every_topic(), "asked once");
    }

    #[test]
    fn an_applied_change_that_never_shows_is_judged_again_after_a_bounded_number_of_looks() {
        let mut o = Observations::default();
        let topics = names(&["a"]);
        o.record(0, &topics, Ok(BTreeMap::new()), BTreeMap::new());
        o.applied("a".into(), create());
        let mut looks = 0;
        loop {
            looks += 1;
            let applied = o.begin();
            let events = o.record(0, &topics, Ok(BTreeMap::new()), applied);
            if !events.is_empty() {
                assert_eq!(changed(&events), vec!["a"]);
                break;
            }
            assert!(looks < 100, "never reported");
        }
        assert_eq!(looks, SETTLING_LOOKS);
    }

    #[test]
    fn a_create_that_keeps_not_showing_waits_twice_as_long_each_time_up_to_a_bound() {
        let mut o = Observations::default();
        let topics = names(&["a"]);
        o.record(0, &topics, Ok(BTreeMap::new()), BTreeMap::new());
        // Looks until the topic is judged again, the create sent again each time.
        let until_judged = |o: &mut Observations| {
            o.applied("a".into(), create());
            let mut looks = 0;
            loop {
                looks += 1;
                let applied = o.begin();
                if !o
                    .record(0, &topics, Ok(BTreeMap::new()), applied)
                    .is_empty()
                {
                    return looks;
                }
                assert!(looks < 1000, "never judged again");
            }
        };
        let bounds: Vec<u32> = (0..6).map(|_| until_judged(&mut o)).collect();
        assert_eq!(bounds, [25, 50, 100, 200, 200, 200]);
        // Shown at last: the next change waits the first bound again.
        o.applied("a".into(), create());
        let applied = o.begin();
        let seen = BTreeMap::from([("a".to_owned(), present(3))]);
        assert_eq!(changed(&o.record(0, &topics, Ok(seen), applied)), vec!["a"]);
        o.applied("a".into(), create());
        let applied = o.begin();
        o.record(0, &topics, Ok(BTreeMap::new()), applied);
        assert_eq!(o.settling_looks("a"), SETTLING_LOOKS);
    }

    #[test]
    fn a_topic_applied_to_during_a_look_waits_for_the_next_look() {
        let mut o = Observations::default();
        let topics = names(&["a"]);
        o.record(0, &topics, Ok(BTreeMap::new()), BTreeMap::new());
        let before = o.topic("a").unwrap().version;
        let applied = o.begin();
        o.applied("a".into(), create());
        let seen = BTreeMap::from([("a".to_owned(), present(3))]);
        assert!(o.record(0, &topics, Ok(seen.clone()), applied).is_empty());
        assert_eq!(o.topic("a").unwrap().version, before);
        let applied = o.begin();
        assert_eq!(changed(&o.record(0, &topics, Ok(seen), applied)), vec!["a"]);
    }

    #[test]
    fn a_failed_look_is_told_once_and_keeps_what_was_seen_and_what_was_applied() {
        let mut o = Observations::default();
        let topics = names(&["a"]);
        let seen = BTreeMap::from([("a".to_owned(), present(3))]);
        o.record(0, &topics, Ok(seen.clone()), BTreeMap::new());
        o.applied("a".into(), Plan::Delete);
        let applied = o.begin();
        let e = o.record(0, &topics, Err("Kafka unreachable: x".into()), applied);
        assert!(
            matches!(e.as_slice(), [WatchEvent::Failed { message, .. }] if message == "Kafka unreachable: x")
        );
        assert_eq!(o.error(), Some("Kafka unreachable: x"));
        assert_eq!(o.topic("a").unwrap().seen, present(3));
        let applied = o.begin();
        assert_eq!(applied.len(), 1, "the applied topic waits for a good look");
        assert!(
            o.record(0, &topics, Err("Kafka unreachable: x".into()), applied)
                .is_empty()
        );
        // Recovery: every topic is judged again.
        let before = o.topic("a").unwrap().version;
        let applied = o.begin();
        let e = o.record(0, &topics, Ok(seen), applied);
        assert!(matches!(e.as_slice(), [WatchEvent::Synced { .. }]));
        assert_eq!(o.error(), None);
        assert_ne!(o.topic("a").unwrap().version, before);
    }

    #[test]
    fn a_look_through_a_replaced_connection_is_dropped() {
        let mut o = Observations::default();
        o.reset(2);
        let topics = names(&["a"]);
        let seen = BTreeMap::from([("a".to_owned(), present(3))]);
        assert!(
            o.record(1, &topics, Ok(seen.clone()), BTreeMap::new())
                .is_empty()
        );
        assert!(o.topic("a").is_none());
        assert!(!o.record(2, &topics, Ok(seen), BTreeMap::new()).is_empty());
    }

    #[test]
    fn topics_no_longer_assigned_are_forgotten() {
        let mut o = Observations::default();
        let seen = BTreeMap::from([("a".to_owned(), present(3)), ("b".to_owned(), present(3))]);
        o.record(0, &names(&["a", "b"]), Ok(seen.clone()), BTreeMap::new());
        o.record(0, &names(&["a"]), Ok(seen), BTreeMap::new());
        assert!(o.topic("b").is_none());
        assert!(o.topic("a").is_some());
    }

    #[test]
    fn only_a_failing_probe_or_its_end_changes_a_judgement() {
        let mut o = Observations::default();
        assert_eq!(o.probe(), &Probe::NotYet);
        assert!(
            !o.probed(0, Ok(())),
            "answering from the start changes nothing"
        );
        assert_eq!(o.probe(), &Probe::Answered);
        assert!(!o.probed(0, Ok(())));
        assert!(
            o.probed(0, Err("Kafka unreachable: x".into())),
            "stopped answering"
        );
        assert!(
            !o.probed(0, Err("Kafka unreachable: x".into())),
            "still the same"
        );
        assert!(
            o.probed(0, Err("Kafka unreachable: y".into())),
            "fails differently"
        );
        assert_eq!(o.probe(), &Probe::Failed("Kafka unreachable: y".into()));
        assert!(o.probed(0, Ok(())), "answers again");
        assert_eq!(o.probe(), &Probe::Answered);
        // A first probe that fails is a change too.
        let mut o = Observations::default();
        assert!(o.probed(0, Err("Kafka unreachable: x".into())));
    }

    #[test]
    fn a_probe_through_a_replaced_connection_is_dropped_and_a_new_one_starts_unprobed() {
        let mut o = Observations::default();
        assert!(o.probed(0, Err("Kafka unreachable: x".into())));
        o.reset(1);
        assert_eq!(o.probe(), &Probe::NotYet);
        assert!(!o.probed(0, Err("Kafka unreachable: old".into())));
        assert_eq!(o.probe(), &Probe::NotYet);
        assert!(o.probed(1, Err("Kafka unreachable: new".into())));
    }
}
