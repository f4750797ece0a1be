//! Kubernetes Events (`events.k8s.io/v1`) for the hub's controllers, recorded the way
//! client-go's recorder and correlator do, with the note part of an Event's identity.
//!
//! kube-runtime's `Recorder` keys Events by reason and keeps the first note, so a second,
//! different decision about an object reads as a repeat of the first. Here:
//!
//! - An Event's identity is the object it is about (uid, kind, namespace, name), its type,
//!   reason and note. A new identity creates a new Event, at once.
//! - A repeat of an identity counts in the Event's `series` (the first repeat makes the
//!   series, with count 2), written by a merge patch.
//! - Repeats are coalesced per object: at most one round of repeat writes per object per
//!   [`EventRecorder::with_repeat_interval`] (one patch per Event that repeated). A repeat
//!   arriving sooner is counted in memory and written when the interval is over, by a
//!   timer, whether or not anything else is published.
//! - Memory is bounded: identities not seen for [`FORGET_AFTER`] are forgotten, and at most
//!   [`MAX_EVENTS`] are kept (the least recently seen goes first).
//! - Publishing never fails the caller: a failed write is logged at debug.
//! - At most [`MAX_IN_FLIGHT`] Event writes are under way at once. [`EventRecorder::publish`]
//!   decides what to write at once (so an object's Events keep their order) and writes in
//!   the background: an Event never holds up a reconcile, and a thousand new decisions do
//!   not send a thousand Event creates at the API server at once, ahead of the status
//!   writes that show them (its priority and fairness queues serve one client's requests
//!   in turn).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tokio::time::Instant;

pub use kube::runtime::events::{EventType, Reporter};

/// Default shortest time between two rounds of repeat writes for one object.
pub const DEFAULT_REPEAT_INTERVAL: Duration = Duration::from_secs(10);
/// How long an identity not seen again is remembered (the API server keeps Events for an
/// hour by default; a repeat after this creates a new Event).
pub const FORGET_AFTER: Duration = Duration::from_secs(30 * 60);
/// Most Event writes under way at once.
pub const MAX_IN_FLIGHT: usize = 4;
/// Most identities one recorder remembers.
pub const MAX_EVENTS: usize = 4096;
/// How often forgotten identities are swept out.
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// The API server's limit on an Event's note.
const MAX_NOTE_BYTES: usize = 1024;
/// Longest object name kept in an Event's name, leaving room for `.` and 16 hex digits
/// within the 253 characters of a name.
const MAX_NAME_PREFIX: usize = 253 - 17;

/// Publishes Events about objects; cheap to clone (clones share their memory of Events).
#[derive(Clone)]
pub struct EventRecorder {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    reporter: Reporter,
    repeat_interval: Duration,
    forget_after: Duration,
    capacity: usize,
    state: Mutex<State>,
    /// The last unique suffix handed out (nanoseconds of the wall clock, kept increasing).
    last_suffix: AtomicU64,
    /// Turns for writes, at most [`MAX_IN_FLIGHT`].
    turns: tokio::sync::Semaphore,
    /// Writes handed to the background by [`EventRecorder::publish`] and not done.
    later: tokio::sync::watch::Sender<usize>,
}

/// The object an Event is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ObjectKey {
    uid: String,
    kind: String,
    namespace: String,
    name: String,
}

/// What tells two Events about one object apart.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EventKey {
    type_: EventType,
    reason: String,
    note: String,
}

#[derive(Default)]
struct State {
    objects: HashMap<ObjectKey, ObjectEvents>,
    /// Identities remembered, over every object.
    events: usize,
    last_sweep: Option<Instant>,
}

/// One object's Events and the rate limit of their repeats.
struct ObjectEvents {
    /// Where its Events live.
    namespace: String,
    last_repeat_write: Option<Instant>,
    flush_scheduled: bool,
    events: HashMap<EventKey, Series>,
}

/// One identity: its Event and how often it was seen.
struct Series {
    /// The Event's name.
    name: String,
    /// False until the Event's create succeeded.
    created: bool,
    /// Times seen.
    count: i32,
    /// The count last written (or being written).
    written: i32,
    last_seen: Instant,
    last_observed: Timestamp,
}

impl Series {
    fn pending(&self) -> bool {
        self.count > self.written
    }
}

/// A series count to write.
struct SeriesWrite {
    namespace: String,
    name: String,
    count: i32,
    last_observed: Timestamp,
}

/// What one publish writes.
enum Step {
    Create(Box<Event>),
    Repeat(SeriesWrite),
    Nothing,
}

impl EventRecorder {
    /// A recorder writing through `client` as `reporter` (its `instance` defaults to the
    /// controller's name), with [`DEFAULT_REPEAT_INTERVAL`].
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                reporter,
                repeat_interval: DEFAULT_REPEAT_INTERVAL,
                forget_after: FORGET_AFTER,
                capacity: MAX_EVENTS,
                state: Mutex::default(),
                last_suffix: AtomicU64::new(0),
                turns: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
                later: tokio::sync::watch::Sender::new(0),
            }),
        }
    }

    /// The same recorder with repeats of one object's Events written at most once per
    /// `interval`. Call before cloning.
    #[must_use]
    pub fn with_repeat_interval(self, interval: Duration) -> Self {
        self.reconfigure(|inner| inner.repeat_interval = interval)
    }

    /// The same recorder remembering at most `capacity` identities, each for `forget_after`
    /// since it was last seen. Call before cloning.
    #[must_use]
    pub fn with_limits(self, capacity: usize, forget_after: Duration) -> Self {
        self.reconfigure(|inner| {
            inner.capacity = capacity.max(1);
            inner.forget_after = forget_after;
        })
    }

    fn reconfigure(self, change: impl FnOnce(&mut Inner)) -> Self {
        let inner = match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                change(&mut inner);
                inner
            }
            // Already shared: configure a fresh recorder with the same client and reporter.
            Err(shared) => {
                let mut inner = shared.clone_config();
                change(&mut inner);
                inner
            }
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Records that `reason` (a CamelCase word) happened to `regarding`, with `action` (what
    /// was done or tried) and a human-readable `note`. Creates an Event for a new
    /// (object, type, reason, note), or counts a repeat; never fails (a failed write is
    /// logged at debug). Returns as soon as it is decided what to write, so the order of
    /// an object's Events is the order of the calls; the write happens in the background,
    /// in its turn, and [`flush`](Self::flush) waits for it.
    pub fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let (object, key, step) = self.step(regarding, type_, reason, action, note);
        if matches!(step, Step::Nothing) {
            return;
        }
        self.inner.later.send_modify(|n| *n += 1);
        let this = self.clone();
        tokio::spawn(async move {
            this.write(&object, &key, step).await;
            this.inner.later.send_modify(|n| *n -= 1);
        });
    }

    /// Waits until every write [`publish`](Self::publish) handed to the background is
    /// done (repeats the interval holds back are written by their timer).
    pub async fn flush(&self) {
        let mut later = self.inner.later.subscribe();
        let _ = later.wait_for(|n| *n == 0).await;
    }

    async fn write(&self, object: &ObjectKey, key: &EventKey, step: Step) {
        match step {
            Step::Create(event) => self.create(object, key, *event).await,
            Step::Repeat(write) => self.inner.write_series(object, key, write).await,
            Step::Nothing => {}
        }
    }

    /// Counts a publish in memory and says what it writes.
    fn step(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) -> (ObjectKey, EventKey, Step) {
        let inner = &self.inner;
        let now = Instant::now();
        let observed = Timestamp::now();
        let object = ObjectKey::of(regarding);
        let key = EventKey {
            type_,
            reason: reason.to_owned(),
            note: truncate(note, MAX_NOTE_BYTES),
        };
        let step = {
            let mut state = inner.state.lock().unwrap_or_else(|e| e.into_inner());
            inner.sweep(&mut state, now);
            let known = state
                .objects
                .get(&object)
                .is_some_and(|o| o.events.contains_key(&key));
            if !known && state.events >= inner.capacity {
                state.evict_least_recent();
            }
            let namespace = regarding
                .namespace
                .clone()
                .filter(|ns| !ns.is_empty())
                .unwrap_or_else(|| "default".to_owned());
            let events = &mut state
                .objects
                .entry(object.clone())
                .or_insert_with(|| ObjectEvents {
                    namespace,
                    last_repeat_write: None,
                    flush_scheduled: false,
                    events: HashMap::new(),
                });
            let step = match events.events.get_mut(&key) {
                None => {
                    let name = inner.event_name(&object.name, observed);
                    let event = inner.event(regarding, &events.namespace, &name, action, &key);
                    events.events.insert(
                        key.clone(),
                        Series {
                            name,
                            created: false,
                            count: 1,
                            written: 1,
                            last_seen: now,
                            last_observed: observed,
                        },
                    );
                    Step::Create(Box::new(event))
                }
                Some(series) => {
                    series.count = series.count.saturating_add(1);
                    series.last_seen = now;
                    series.last_observed = observed;
                    let allowed = !events.flush_scheduled
                        && events
                            .last_repeat_write
                            .is_none_or(|at| now >= at + inner.repeat_interval);
                    if series.created && allowed {
                        series.written = series.count;
                        events.last_repeat_write = Some(now);
                        Step::Repeat(SeriesWrite {
                            namespace: events.namespace.clone(),
                            name: series.name.clone(),
                            count: series.count,
                            last_observed: observed,
                        })
                    } else {
                        // Written by the flush, or once the create is in.
                        if series.created {
                            inner.schedule_flush(&self.inner, &object, events, now);
                        }
                        Step::Nothing
                    }
                }
            };
            if matches!(step, Step::Create(_)) {
                state.events += 1;
            }
            step
        };
        (object, key, step)
    }

    async fn create(&self, object: &ObjectKey, key: &EventKey, event: Event) {
        let inner = &self.inner;
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let result = {
            let _turn = inner.turn().await;
            Api::<Event>::namespaced(inner.client.clone(), &namespace)
                .create(&PostParams::default(), &event)
                .await
        };
        let mut state = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(events) = state.objects.get_mut(object) else {
            return;
        };
        match result {
            Ok(_) => {
                let Some(series) = events.events.get_mut(key) else {
                    return;
                };
                series.created = true;
                if series.pending() {
                    inner.schedule_flush(&self.inner, object, events, Instant::now());
                }
            }
            Err(error) => {
                tracing::debug!(
                    object = %object.name, reason = %key.reason, %error,
                    "could not create an Event"
                );
                // The next publish of this identity tries to create it again.
                if events.events.remove(key).is_some() {
                    state.events -= 1;
                }
            }
        }
    }
}

impl Inner {
    /// A copy of the settings, with fresh memory.
    fn clone_config(&self) -> Self {
        Self {
            client: self.client.clone(),
            reporter: self.reporter.clone(),
            repeat_interval: self.repeat_interval,
            forget_after: self.forget_after,
            capacity: self.capacity,
            state: Mutex::default(),
            last_suffix: AtomicU64::new(0),
            turns: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
            later: tokio::sync::watch::Sender::new(0),
        }
    }

    /// A turn to write, at most [`MAX_IN_FLIGHT`] at once.
    async fn turn(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.turns
            .acquire()
            .await
            .expect("the semaphore is never closed")
    }

    /// `<object-name>.<hex>`, unique within this recorder.
    fn event_name(&self, object: &str, now: Timestamp) -> String {
        let nanos = u64::try_from(now.as_nanosecond()).unwrap_or_default();
        let previous = self
            .last_suffix
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                Some(nanos.max(last + 1))
            })
            .unwrap_or_default();
        let prefix = truncate(object.to_owned(), MAX_NAME_PREFIX);
        let prefix = if prefix.is_empty() {
            &self.reporter.controller
        } else {
            &prefix
        };
        format!("{prefix}.{:x}", nanos.max(previous + 1))
    }

    fn event(
        &self,
        regarding: &ObjectReference,
        namespace: &str,
        name: &str,
        action: &str,
        key: &EventKey,
    ) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(Timestamp::now())),
            action: Some(action.to_owned()),
            reason: Some(key.reason.clone()),
            note: Some(key.note.clone()),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            type_: Some(
                match key.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_owned(),
            ),
            ..Event::default()
        }
    }

    /// Makes sure `object`'s pending repeats are written once its interval is over.
    fn schedule_flush(
        &self,
        this: &Arc<Inner>,
        object: &ObjectKey,
        events: &mut ObjectEvents,
        now: Instant,
    ) {
        if events.flush_scheduled {
            return;
        }
        events.flush_scheduled = true;
        let at = events
            .last_repeat_write
            .map_or(now, |last| (last + self.repeat_interval).max(now));
        tokio::spawn(Self::flush_at(this.clone(), object.clone(), at));
    }

    /// Writes every pending repeat of `object` at `at`.
    async fn flush_at(this: Arc<Inner>, object: ObjectKey, at: Instant) {
        tokio::time::sleep_until(at).await;
        let writes = {
            let mut state = this.state.lock().unwrap_or_else(|e| e.into_inner());
            let Some(events) = state.objects.get_mut(&object) else {
                return;
            };
            events.flush_scheduled = false;
            let mut writes = Vec::new();
            for (key, series) in &mut events.events {
                if series.created && series.pending() {
                    series.written = series.count;
                    writes.push((
                        key.clone(),
                        SeriesWrite {
                            namespace: events.namespace.clone(),
                            name: series.name.clone(),
                            count: series.count,
                            last_observed: series.last_observed,
                        },
                    ));
                }
            }
            if !writes.is_empty() {
                events.last_repeat_write = Some(Instant::now());
            }
            writes
        };
        for (key, write) in writes {
            this.write_series(&object, &key, write).await;
        }
    }

    async fn write_series(&self, object: &ObjectKey, key: &EventKey, write: SeriesWrite) {
        let patch = serde_json::json!({
            "series": {
                "count": write.count,
                "lastObservedTime": MicroTime(write.last_observed),
            }
        });
        let result = {
            let _turn = self.turn().await;
            Api::<Event>::namespaced(self.client.clone(), &write.namespace)
                .patch(&write.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
        };
        if let Err(error) = result {
            tracing::debug!(
                object = %object.name, event = %write.name, %error,
                "could not count a repeated Event"
            );
            // An Event the API server no longer has (expired) is created anew next time.
            if matches!(&error, kube::Error::Api(status) if status.code == 404) {
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(events) = state.objects.get_mut(object)
                    && events.events.remove(key).is_some()
                {
                    state.events -= 1;
                }
            }
        }
    }

    /// Forgets identities not seen for `forget_after` (unless a repeat is still to be
    /// written) and objects left with none.
    fn sweep(&self, state: &mut State, now: Instant) {
        if state
            .last_sweep
            .is_some_and(|at| now < at + SWEEP_EVERY.min(self.forget_after))
        {
            return;
        }
        state.last_sweep = Some(now);
        let forget_after = self.forget_after;
        let mut removed = 0;
        state.objects.retain(|_, events| {
            let before = events.events.len();
            events
                .events
                .retain(|_, s| s.pending() || now < s.last_seen + forget_after);
            removed += before - events.events.len();
            !events.events.is_empty() || events.flush_scheduled
        });
        state.events -= removed;
    }
}

impl State {
    /// Forgets the identity seen least recently.
    fn evict_least_recent(&mut self) {
        let oldest = self
            .objects
            .iter()
            .flat_map(|(object, events)| {
                events
                    .events
                    .iter()
                    .map(move |(key, series)| (series.last_seen, object, key))
            })
            .min_by_key(|(seen, _, _)| *seen)
            .map(|(_, object, key)| (object.clone(), key.clone()));
        if let Some((object, key)) = oldest
            && let Some(events) = self.objects.get_mut(&object)
        {
            events.events.remove(&key);
            self.events -= 1;
            if events.events.is_empty() && !events.flush_scheduled {
                self.objects.remove(&object);
            }
        }
    }
}

impl ObjectKey {
    fn of(reference: &ObjectReference) -> Self {
        let text = |s: &Option<String>| s.clone().unwrap_or_default();
        Self {
            uid: text(&reference.uid),
            kind: text(&reference.kind),
            namespace: text(&reference.namespace),
            name: text(&reference.name),
        }
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writes::fake::FakeApi;
    use http::Method;

    const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/team/events";

    fn topic(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("accord.io/v1beta1".into()),
            kind: Some("FederatedKafkaTopic".into()),
            namespace: Some("team".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    fn recorder(api: &FakeApi) -> EventRecorder {
        EventRecorder::new(
            api.client(),
            Reporter {
                controller: "accord-hub".into(),
                instance: Some("hub-0".into()),
            },
        )
    }

    /// Publishes and waits for the write.
    async fn publish(recorder: &EventRecorder, object: &ObjectReference, note: &str) {
        recorder.publish(
            object,
            EventType::Normal,
            "Placed",
            "Reconcile",
            note.to_owned(),
        );
        recorder.flush().await;
    }

    fn count_of(event: &serde_json::Value) -> i64 {
        event["series"]["count"].as_i64().unwrap_or(1)
    }

    #[tokio::test(start_paused = true)]
    async fn distinct_notes_are_distinct_events() {
        let api = FakeApi::default();
        let recorder = recorder(&api);
        let object = topic("orders");
        for note in ["2 of 3 clusters", "3 of 3 clusters", "1 of 3 clusters"] {
            publish(&recorder, &object, note).await;
        }
        let creates = api.requests(Method::POST);
        assert_eq!(creates.len(), 3);
        let notes: Vec<&str> = creates
            .iter()
            .map(|r| r.body["note"].as_str().unwrap())
            .collect();
        assert_eq!(
            notes,
            ["2 of 3 clusters", "3 of 3 clusters", "1 of 3 clusters"]
        );
        let names: std::collections::HashSet<&str> = creates
            .iter()
            .map(|r| r.body["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 3, "each Event has its own name");
        assert!(names.iter().all(|n| n.starts_with("orders.")));
        assert!(creates.iter().all(|r| r.path == EVENTS));
        assert_eq!(creates[0].body["reportingController"], "accord-hub");
        assert_eq!(creates[0].body["reportingInstance"], "hub-0");
        assert_eq!(creates[0].body["regarding"]["name"], "orders");
        assert!(api.requests(Method::PATCH).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn repeats_within_the_interval_are_coalesced_and_flushed_by_the_timer() {
        let api = FakeApi::default();
        let recorder = recorder(&api);
        let object = topic("orders");
        for _ in 0..5 {
            publish(&recorder, &object, "placed on 3 clusters").await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(api.requests(Method::POST).len(), 1);
        assert!(api.requests(Method::PATCH).len() <= 1);

        tokio::time::sleep(DEFAULT_REPEAT_INTERVAL).await;
        let patches = api.requests(Method::PATCH);
        assert_eq!(patches.len(), 2, "one leading repeat, one flush");
        let events = api.objects_under(EVENTS);
        assert_eq!(events.len(), 1);
        assert_eq!(count_of(&events[0]), 5);
        assert!(events[0]["series"]["lastObservedTime"].is_string());

        // Nothing pending: no further writes.
        tokio::time::sleep(DEFAULT_REPEAT_INTERVAL * 3).await;
        assert_eq!(api.requests(Method::PATCH).len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_repeat_makes_the_series_with_count_two() {
        let api = FakeApi::default();
        let recorder = recorder(&api);
        let object = topic("orders");
        publish(&recorder, &object, "placed").await;
        publish(&recorder, &object, "placed").await;
        let patches = api.requests(Method::PATCH);
        assert_eq!(patches.len(), 1);
        assert_eq!(patches[0].body["series"]["count"], 2);
    }

    #[tokio::test(start_paused = true)]
    async fn objects_do_not_share_a_repeat_interval() {
        let api = FakeApi::default();
        let recorder = recorder(&api);
        let (orders, payments) = (topic("orders"), topic("payments"));
        for object in [&orders, &payments, &orders, &payments] {
            publish(&recorder, object, "placed").await;
        }
        let patches = api.requests(Method::PATCH);
        assert_eq!(
            patches.len(),
            2,
            "each object's first repeat is written at once"
        );
        assert!(
            patches[0].path.ends_with(
                api.requests(Method::POST)[0].body["metadata"]["name"]
                    .as_str()
                    .unwrap()
            )
        );
        assert!(patches[1].path.contains("/payments."));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_create_is_not_an_error_and_is_tried_again() {
        let api = FakeApi::default();
        let recorder = recorder(&api);
        let object = topic("orders");
        api.fail_next(&[500]);
        publish(&recorder, &object, "placed").await;
        assert!(api.objects_under(EVENTS).is_empty());
        publish(&recorder, &object, "placed").await;
        assert_eq!(api.requests(Method::POST).len(), 2);
        assert_eq!(api.objects_under(EVENTS).len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn cluster_scoped_objects_get_their_events_in_default() {
        let api = FakeApi::default();
        let recorder = recorder(&api);
        let cluster = ObjectReference {
            kind: Some("ManagedCluster".into()),
            name: Some("eu-1".into()),
            uid: Some("uid-eu-1".into()),
            ..ObjectReference::default()
        };
        publish(&recorder, &cluster, "joined").await;
        assert_eq!(
            api.requests(Method::POST)[0].path,
            "/apis/events.k8s.io/v1/namespaces/default/events"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn memory_is_bounded_by_capacity_and_age() {
        let api = FakeApi::default();
        let recorder = recorder(&api).with_limits(2, Duration::from_secs(60));
        let object = topic("orders");
        for note in ["a", "b", "c"] {
            publish(&recorder, &object, note).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(recorder.remembered(), 2);
        // "a" was forgotten: publishing it again creates a new Event.
        publish(&recorder, &object, "a").await;
        assert_eq!(api.requests(Method::POST).len(), 4);

        tokio::time::sleep(Duration::from_secs(61)).await;
        publish(&recorder, &topic("payments"), "x").await;
        assert_eq!(
            recorder.remembered(),
            1,
            "identities unseen for a minute are gone"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn events_are_written_in_the_background_a_few_at_a_time() {
        let api = FakeApi::default();
        api.set_latency(Duration::from_millis(100));
        let recorder = recorder(&api);
        for i in 0..10 {
            recorder.publish(
                &topic(&format!("t{i}")),
                EventType::Normal,
                "Placed",
                "Reconcile",
                "placed on 3 clusters".to_owned(),
            );
        }
        // Returned at once; the first turns are under way.
        assert!(api.requests(Method::POST).is_empty());
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(
            api.requests(Method::POST).len(),
            MAX_IN_FLIGHT,
            "at most {MAX_IN_FLIGHT} writes at once"
        );
        recorder.flush().await;
        assert_eq!(api.objects_under(EVENTS).len(), 10);
        // A repeat published later is counted on the Event that is there.
        recorder.publish(
            &topic("t0"),
            EventType::Normal,
            "Placed",
            "Reconcile",
            "placed on 3 clusters".to_owned(),
        );
        recorder.flush().await;
        assert_eq!(api.requests(Method::POST).len(), 10);
        assert_eq!(api.requests(Method::PATCH).len(), 1);
    }

    #[test]
    fn notes_are_cut_at_a_character_boundary() {
        assert_eq!(truncate("héllo".to_owned(), 2), "h");
        assert_eq!(truncate("hello".to_owned(), 10), "hello");
    }

    impl EventRecorder {
        /// Identities remembered.
        fn remembered(&self) -> usize {
            self.inner.state.lock().unwrap().events
        }
    }
}
