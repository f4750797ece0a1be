//! The one writer of the hub's status subresources: however many callers submit a status
//! for an object, it is written at most once per window, as a merge patch from what the
//! API server holds, and only when it differs from that.
//!
//! The rules, per object:
//!
//! - The latest submitted status wins.
//! - The first submit for an idle object opens a window; the write happens when the window
//!   closes (trailing edge), with the latest status. A write is always followed by a quiet
//!   window, so writes are at least a window apart.
//! - Progress waits longer: while the latest status is submitted as [`Pace::Progress`] (some
//!   members have not reported on the current decision yet), the write waits until the
//!   progress interval has passed since the window opened, or until a [`Pace::Prompt`]
//!   status (an outcome, a new decision) is submitted, whichever comes first. Members that
//!   finish seconds apart then cost one write for their progress, not one each, and the
//!   outcome is never held back.
//! - Nothing is written when the status equals what the API server holds: the latest
//!   `current` a caller passed (from its cache), or what this writer last wrote while the
//!   cache has not caught up with it yet.
//! - A write failing with 409, 429, 5xx or a connection error is retried with jittered
//!   exponential backoff, each attempt with the newest status; it is never dropped. A 404
//!   (object gone) drops the object's pending status; any other refusal is logged once and
//!   the status waits for the next submit.
//! - At most [`MAX_IN_FLIGHT`] writes are under way at once across objects; an object whose
//!   window closed waits for its turn and writes its newest status then, so a slow API
//!   server gets fewer, fuller writes rather than a queue of stale ones.
//! - Progress yields to outcomes: at most [`MAX_PROGRESS_IN_FLIGHT`] of those writes show
//!   progress. After a burst of new decisions (a thousand objects applied at once), their
//!   progress statuses queue for these few turns while the outcomes that arrive meanwhile
//!   take the others; an object whose outcome arrives while it waits writes once, the
//!   outcome, instead of progress and then the outcome.
//! - Progress has a rate, shared by every object: at most [`MAX_PROGRESS_PER_SECOND`]
//!   progress writes a second. A thousand objects whose members take minutes would
//!   otherwise rewrite their progress every interval each (200 writes a second at 5 s);
//!   under the rate each shows its progress less often, and outcomes are never held back.
//! - An object's entry is removed once its status is written and no submit came for
//!   [`IDLE_LINGER`], so memory follows the objects being written, not every object seen.
//!
//! Each object with something to write has a task of its own, which lingers while idle
//! and then ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accord_common::runtime::{Retry, backoff};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::Value;
use tokio::sync::{Notify, watch};

use crate::metrics::Metrics;

/// Default coalescing window.
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(200);
/// Default interval between writes of a status that only shows progress.
pub const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// How soon a submitted status should be written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pace {
    /// An outcome or a new decision: written when the window closes.
    #[default]
    Prompt,
    /// Progress towards an outcome (members still working): written at most once per
    /// progress interval, unless a prompt status comes first.
    Progress,
}
/// How long an object's entry is kept after its last write, to tell a stale cache from a
/// status someone else changed.
pub const IDLE_LINGER: Duration = Duration::from_secs(30);
/// Longest wait between two attempts of a failing write.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Whether two JSON values say the same: numbers are compared by value, so the `200` the
/// API server returns equals the `200.0` a controller renders (serde_json tells them
/// apart, and every such field would otherwise be rewritten on each status change).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// The JSON merge patch (RFC 7386) that turns `old` into `new`: changed values as they are
/// now, and `null` for every key `new` no longer has, at any depth. Serialising `new` alone
/// would leave a field that became empty (skipped when serialised) at its old value.
pub fn merge_patch(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = serde_json::Map::new();
            for (key, value) in new {
                match old.get(key) {
                    Some(before) if same(before, value) => {}
                    Some(before) => {
                        patch.insert(key.clone(), merge_patch(before, value));
                    }
                    None => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            for key in old.keys().filter(|k| !new.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
}

/// Writes status subresources, coalesced per object; cheap to clone (clones share their
/// state).
#[derive(Clone)]
pub struct StatusWriter {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    window: Duration,
    progress_interval: Duration,
    metrics: Metrics,
    objects: Mutex<HashMap<ObjectKey, Entry>>,
    /// Objects with a status still to write (their window open, or a write under way).
    busy: watch::Sender<usize>,
    /// Successful writes.
    written: AtomicU64,
    /// Writes under way, at most [`MAX_IN_FLIGHT`]: an object whose window closed waits
    /// for a turn, and what it is asked to write meanwhile joins its write.
    in_flight: tokio::sync::Semaphore,
    /// Turns of writes that show only progress, at most [`MAX_PROGRESS_IN_FLIGHT`].
    progress_in_flight: tokio::sync::Semaphore,
    /// The earliest time the next progress write may start (see
    /// [`MAX_PROGRESS_PER_SECOND`]).
    next_progress: Mutex<tokio::time::Instant>,
}

/// Status writes under way at once, across objects. When the API server slows down, each
/// object waits longer for its turn and carries more of its changes in one write, so the
/// write rate follows what the API server sustains instead of piling requests onto it.
pub const MAX_IN_FLIGHT: usize = 8;
/// Of the writes under way, those that show only progress (see [`Pace::Progress`]).
pub const MAX_PROGRESS_IN_FLIGHT: usize = 2;
/// Progress writes a second, across objects.
pub const MAX_PROGRESS_PER_SECOND: u32 = 20;

/// An object: its resource, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ObjectKey {
    group: String,
    version: String,
    plural: String,
    namespace: Option<String>,
    name: String,
}

struct Entry {
    resource: ApiResource,
    /// The status as the caller's cache last showed it.
    current: Value,
    /// The status to write.
    desired: Value,
    /// What this writer last wrote, and the `current` it was written over.
    written: Option<Written>,
    /// True from the submit that opens a window until nothing is left to write.
    busy: bool,
    /// How soon `desired` should be written.
    pace: Pace,
    /// Wakes the object's idle task.
    wake: Arc<Notify>,
}

struct Written {
    over: Value,
    value: Value,
}

/// One write: the patch and what it makes the status.
struct Job {
    resource: ApiResource,
    over: Value,
    desired: Value,
    patch: Value,
}

/// How writing an object's latest status ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Written.
    Written,
    /// Nothing (more) to write for now: the status is held already, or was refused.
    Settled,
    /// The object is gone.
    Gone,
}

/// What a failed write leads to.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// Conflict, throttling, server or connection trouble: try again.
    Transient,
    /// The object is gone: drop its status.
    Gone,
    /// Refused as it is: wait for the next submit.
    Refused,
}

impl Entry {
    /// What the API server holds, as far as this writer can tell: the caller's `current`,
    /// unless this writer wrote over that very `current` (the cache has not caught up).
    fn held(&self) -> &Value {
        match &self.written {
            Some(written) if same(&written.over, &self.current) => &written.value,
            _ => &self.current,
        }
    }

    fn job(&self) -> Option<Job> {
        let held = self.held();
        (!same(held, &self.desired)).then(|| Job {
            resource: self.resource.clone(),
            over: self.current.clone(),
            desired: self.desired.clone(),
            patch: merge_patch(held, &self.desired),
        })
    }
}

impl StatusWriter {
    /// A writer through `client` writing each object's status at most once per `window`
    /// (see [`DEFAULT_WINDOW`]), and a status that shows progress at most once per
    /// `progress_interval`. Failed writes count in `metrics`' errors. Must be used within a
    /// Tokio runtime.
    pub fn new(
        client: kube::Client,
        window: Duration,
        progress_interval: Duration,
        metrics: Metrics,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                window,
                progress_interval: progress_interval.max(window),
                metrics,
                objects: Mutex::default(),
                busy: watch::Sender::new(0),
                written: AtomicU64::new(0),
                in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
                progress_in_flight: tokio::sync::Semaphore::new(MAX_PROGRESS_IN_FLIGHT),
                next_progress: Mutex::new(tokio::time::Instant::now()),
            }),
        }
    }

    /// Submits `desired` as the status of `K` `namespace/name`, whose status the API server
    /// holds as `current` (from the caller's cache; `null` when it has none). Returns at
    /// once; the write happens when the object's window closes, if the status differs.
    pub fn submit<K>(&self, namespace: Option<&str>, name: &str, current: Value, desired: Value)
    where
        K: kube::Resource<DynamicType = ()>,
    {
        self.submit_paced::<K>(namespace, name, current, desired, Pace::Prompt);
    }

    /// [`StatusWriter::submit`] at `pace`.
    pub fn submit_paced<K>(
        &self,
        namespace: Option<&str>,
        name: &str,
        current: Value,
        desired: Value,
        pace: Pace,
    ) where
        K: kube::Resource<DynamicType = ()>,
    {
        let resource = ApiResource::erase::<K>(&());
        let key = ObjectKey {
            group: resource.group.clone(),
            version: resource.version.clone(),
            plural: resource.plural.clone(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        };
        let inner = &self.inner;
        let mut objects = inner.lock();
        match objects.get_mut(&key) {
            Some(entry) => {
                entry.current = current;
                entry.desired = desired;
                let hurried = entry.pace == Pace::Progress && pace == Pace::Prompt;
                entry.pace = pace;
                if !entry.busy && !same(entry.held(), &entry.desired) {
                    entry.busy = true;
                    inner.busy.send_modify(|n| *n += 1);
                    entry.wake.notify_one();
                } else if entry.busy && hurried {
                    // Cut short a progress wait.
                    entry.wake.notify_one();
                }
            }
            None if same(&current, &desired) => {}
            None => {
                let wake = Arc::new(Notify::new());
                objects.insert(
                    key.clone(),
                    Entry {
                        resource,
                        current,
                        desired,
                        written: None,
                        busy: true,
                        pace,
                        wake: wake.clone(),
                    },
                );
                inner.busy.send_modify(|n| *n += 1);
                tokio::spawn(Inner::run(inner.clone(), key, wake));
            }
        }
    }

    /// Waits until no object has a status left to write. A write that keeps failing
    /// transiently keeps this waiting: bound it with a timeout on shutdown.
    pub async fn flush(&self) {
        let mut busy = self.inner.busy.subscribe();
        let _ = busy.wait_for(|n| *n == 0).await;
    }

    /// Objects with a status still to write.
    pub fn pending(&self) -> usize {
        *self.inner.busy.borrow()
    }

    /// Status writes that succeeded since this writer was made.
    pub fn written(&self) -> u64 {
        self.inner.written.load(Ordering::Relaxed)
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Entry>> {
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks `entry` as having nothing to write.
    fn settle(&self, entry: &mut Entry) {
        if entry.busy {
            entry.busy = false;
            self.busy.send_modify(|n| *n -= 1);
        }
    }

    /// Forgets `key`.
    fn forget(&self, key: &ObjectKey) {
        if let Some(mut entry) = self.lock().remove(key) {
            self.settle(&mut entry);
        }
    }

    /// One object's task: a window, then writes until nothing is left to write, then idle
    /// until the next submit or [`IDLE_LINGER`].
    async fn run(this: Arc<Inner>, key: ObjectKey, wake: Arc<Notify>) {
        loop {
            let opened = tokio::time::Instant::now();
            tokio::time::sleep(this.window).await;
            this.hold_progress(&key, &wake, opened + this.progress_interval)
                .await;
            match this.write_latest(&key, &wake).await {
                Outcome::Gone => {
                    this.forget(&key);
                    return;
                }
                // Another window before anything newer is written.
                Outcome::Written => continue,
                Outcome::Settled => {}
            }
            // Idle until a submit wakes the object, or forgotten after lingering (a submit
            // racing the timer finds the entry busy under the lock).
            tokio::select! {
                () = wake.notified() => {}
                () = tokio::time::sleep(IDLE_LINGER) => {
                    let mut objects = this.lock();
                    match objects.get(&key) {
                        Some(entry) if entry.busy => {}
                        Some(_) => {
                            objects.remove(&key);
                            return;
                        }
                        None => return,
                    }
                }
            }
        }
    }

    /// Whether the object's latest status only shows progress.
    fn shows_progress(&self, key: &ObjectKey) -> bool {
        self.lock()
            .get(key)
            .is_some_and(|entry| entry.pace == Pace::Progress)
    }

    /// Waits while the object's latest status only shows progress, until `until` or until
    /// a prompt status is submitted.
    async fn hold_progress(&self, key: &ObjectKey, wake: &Notify, until: tokio::time::Instant) {
        while self.shows_progress(key) {
            tokio::select! {
                () = wake.notified() => {}
                () = tokio::time::sleep_until(until) => return,
            }
        }
    }

    /// A progress turn while the object's latest status only shows progress (held for the
    /// write); none once a prompt status is submitted, even while waiting for the turn.
    async fn progress_turn(
        &self,
        key: &ObjectKey,
        wake: &Notify,
    ) -> Option<tokio::sync::SemaphorePermit<'_>> {
        while self.shows_progress(key) {
            tokio::select! {
                turn = self.progress_in_flight.acquire() => {
                    let turn = turn.expect("the semaphore is never closed");
                    // The turn's slot in the progress rate every object shares.
                    self.hold_progress(key, wake, self.progress_slot()).await;
                    return self.shows_progress(key).then_some(turn);
                }
                () = wake.notified() => {}
            }
        }
        None
    }

    /// Reserves the next slot of the progress rate ([`MAX_PROGRESS_PER_SECOND`]).
    fn progress_slot(&self) -> tokio::time::Instant {
        let mut next = self.next_progress.lock().unwrap_or_else(|e| e.into_inner());
        let at = (*next).max(tokio::time::Instant::now());
        *next = at + Duration::from_secs(1) / MAX_PROGRESS_PER_SECOND;
        at
    }

    /// Writes the object's latest status, retrying transient failures with the newest
    /// status each time. A settled object is marked as such.
    async fn write_latest(&self, key: &ObjectKey, wake: &Notify) -> Outcome {
        let mut retry: Option<Retry> = None;
        loop {
            let progress_turn = self.progress_turn(key, wake).await;
            // The job is taken once it is this object's turn, so it is the newest status.
            let turn = self
                .in_flight
                .acquire()
                .await
                .expect("the semaphore is never closed");
            let job = {
                let mut objects = self.lock();
                let Some(entry) = objects.get_mut(key) else {
                    return Outcome::Gone;
                };
                match entry.job() {
                    Some(job) => job,
                    None => {
                        self.settle(entry);
                        return Outcome::Settled;
                    }
                }
            };
            let written = self.write(key, &job).await;
            drop(turn);
            drop(progress_turn);
            let error = match written {
                Ok(()) => {
                    self.written.fetch_add(1, Ordering::Relaxed);
                    if let Some(entry) = self.lock().get_mut(key) {
                        entry.written = Some(Written {
                            over: job.over,
                            value: job.desired,
                        });
                    }
                    return Outcome::Written;
                }
                Err(error) => error,
            };
            match classify(&error) {
                Failure::Transient => {
                    let delay = retry
                        .get_or_insert_with(|| backoff(self.window, RETRY_MAX))
                        .next_delay();
                    tracing::debug!(
                        object = %key.name, resource = %key.plural, %error, ?delay,
                        "status write failed; retrying"
                    );
                    tokio::time::sleep(delay).await;
                }
                Failure::Gone => {
                    tracing::debug!(
                        object = %key.name, resource = %key.plural,
                        "object gone; its status is dropped"
                    );
                    return Outcome::Gone;
                }
                Failure::Refused => {
                    self.metrics.error("status_write");
                    tracing::warn!(
                        object = %key.name, resource = %key.plural,
                        error = %accord_common::runtime::error_chain(&error),
                        "status write refused; waiting for the next status"
                    );
                    if let Some(entry) = self.lock().get_mut(key) {
                        self.settle(entry);
                    }
                    return Outcome::Settled;
                }
            }
        }
    }

    async fn write(&self, key: &ObjectKey, job: &Job) -> Result<(), kube::Error> {
        tracing::debug!(
            object = %key.name, resource = %key.plural, patch = %job.patch,
            "writing status"
        );
        let api: Api<DynamicObject> = match &key.namespace {
            Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, &job.resource),
            None => Api::all_with(self.client.clone(), &job.resource),
        };
        api.patch_status(
            &key.name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": job.patch })),
        )
        .await
        .map(drop)
    }
}

/// What a failed write leads to.
fn classify(error: &kube::Error) -> Failure {
    match error {
        kube::Error::Api(status) => match status.code {
            404 => Failure::Gone,
            409 | 429 => Failure::Transient,
            code if code >= 500 => Failure::Transient,
            _ => Failure::Refused,
        },
        // The request could not be built or the answer read: sending it again changes
        // nothing.
        kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) => Failure::Refused,
        _ => Failure::Transient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writes::fake::FakeApi;
    use accord_crds::ManagedCluster;
    use http::Method;
    use serde_json::json;

    const WINDOW: Duration = DEFAULT_WINDOW;
    const PROGRESS: Duration = DEFAULT_PROGRESS_INTERVAL;

    fn writer(api: &FakeApi) -> StatusWriter {
        StatusWriter::new(api.client(), WINDOW, PROGRESS, Metrics::new())
    }

    /// The fake's path of `name`, and the object stored there with `status`.
    fn seed(api: &FakeApi, name: &str, status: Value) -> String {
        let path = format!("/apis/accord.io/v1beta1/managedclusters/{name}");
        api.put(
            &path,
            json!({
                "apiVersion": "accord.io/v1beta1", "kind": "ManagedCluster",
                "metadata": {"name": name}, "status": status,
            }),
        );
        path
    }

    fn submit(writer: &StatusWriter, name: &str, current: &Value, desired: Value) {
        writer.submit::<ManagedCluster>(None, name, current.clone(), desired);
    }

    #[tokio::test(start_paused = true)]
    async fn submits_within_a_window_make_one_write_with_the_last_status() {
        let api = FakeApi::default();
        let path = seed(&api, "eu-1", json!({"phase": "Pending"}));
        let writer = writer(&api);
        let current = json!({"phase": "Pending"});
        for i in 0..10 {
            submit(
                &writer,
                "eu-1",
                &current,
                json!({"phase": "Ready", "seen": i}),
            );
            tokio::time::sleep(WINDOW / 11).await;
        }
        writer.flush().await;
        let patches = api.requests(Method::PATCH);
        assert_eq!(patches.len(), 1);
        assert_eq!(patches[0].path, format!("{path}/status"));
        assert_eq!(
            patches[0].body,
            json!({"status": {"phase": "Ready", "seen": 9}})
        );
        assert_eq!(api.get(&path).unwrap()["status"]["seen"], 9);
        assert_eq!(writer.written(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn progress_is_written_once_per_progress_interval_and_an_outcome_at_once() {
        let api = FakeApi::default();
        let path = seed(&api, "eu-1", json!({}));
        let writer = writer(&api);
        let progress = |n: i32| {
            writer.submit_paced::<ManagedCluster>(
                None,
                "eu-1",
                json!({}),
                json!({"synced": n}),
                Pace::Progress,
            );
        };
        let start = tokio::time::Instant::now();
        // Members finishing one by one, a second apart: one write for all of them.
        for n in 1..=3 {
            progress(n);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert!(api.requests(Method::PATCH).is_empty(), "progress waits");
        writer.flush().await;
        let patches = api.requests(Method::PATCH);
        assert_eq!(patches.len(), 1);
        assert_eq!(patches[0].body, json!({"status": {"synced": 3}}));
        assert!(start.elapsed() >= PROGRESS);

        // More progress, then the outcome before the interval is over: written within a
        // window of the outcome, once.
        progress(4);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let outcome_at = tokio::time::Instant::now();
        submit(&writer, "eu-1", &json!({}), json!({"synced": 5}));
        writer.flush().await;
        assert!(outcome_at.elapsed() <= WINDOW, "{:?}", outcome_at.elapsed());
        let patches = api.requests(Method::PATCH);
        assert_eq!(patches.len(), 2);
        assert_eq!(api.get(&path).unwrap()["status"], json!({"synced": 5}));
    }

    /// Seeds each of `names` with an empty status and submits progress for it.
    fn submit_progress(api: &FakeApi, writer: &StatusWriter, names: &[String]) {
        for name in names {
            seed(api, name, json!({}));
            writer.submit_paced::<ManagedCluster>(
                None,
                name,
                json!({}),
                json!({"phase": "Applying"}),
                Pace::Progress,
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn progress_across_objects_keeps_to_its_rate_and_outcomes_do_not_wait_for_it() {
        let api = FakeApi::default();
        let writer = writer(&api);
        let objects = 2 * MAX_PROGRESS_PER_SECOND as usize;
        let names: Vec<String> = (0..objects).map(|i| format!("member-{i}")).collect();
        submit_progress(&api, &writer, &names);
        // Every object's progress interval is over at once; a second later at most a
        // second's worth of progress is written.
        tokio::time::sleep(PROGRESS + Duration::from_secs(1)).await;
        let written = api.requests(Method::PATCH).len();
        assert!(
            written <= MAX_PROGRESS_PER_SECOND as usize + 1,
            "{written} progress writes in a second"
        );
        assert!(written > 0, "progress is written at its rate");
        // An outcome meanwhile is written within its window, ahead of the queued progress.
        let last = names.last().unwrap();
        let outcome_at = tokio::time::Instant::now();
        submit(&writer, last, &json!({}), json!({"phase": "Ready"}));
        tokio::time::sleep(WINDOW + Duration::from_millis(10)).await;
        let path = format!("/apis/accord.io/v1beta1/managedclusters/{last}");
        assert_eq!(api.get(&path).unwrap()["status"], json!({"phase": "Ready"}));
        assert!(outcome_at.elapsed() < Duration::from_secs(1));
        // The rest follows at the rate, each object written once.
        writer.flush().await;
        assert_eq!(api.requests(Method::PATCH).len(), objects);
    }

    #[tokio::test(start_paused = true)]
    async fn progress_yields_to_outcomes_on_a_slow_api_server() {
        let api = FakeApi::default();
        api.set_latency(Duration::from_secs(1));
        let writer = writer(&api);
        let names: Vec<String> = (0..20).map(|i| format!("member-{i}")).collect();
        submit_progress(&api, &writer, &names);
        // The progress statuses come due together; their outcomes arrive while the
        // first of them are being written.
        tokio::time::sleep(PROGRESS + Duration::from_millis(500)).await;
        for name in &names {
            submit(&writer, name, &json!({}), json!({"phase": "Ready"}));
        }
        writer.flush().await;
        // Only the progress writes under way when the outcomes came are written twice.
        let patches = api.requests(Method::PATCH);
        assert!(
            patches.len() <= names.len() + MAX_PROGRESS_IN_FLIGHT,
            "{} writes",
            patches.len()
        );
        for name in &names {
            let path = format!("/apis/accord.io/v1beta1/managedclusters/{name}");
            assert_eq!(api.get(&path).unwrap()["status"], json!({"phase": "Ready"}));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_status_equal_to_the_held_one_is_not_written() {
        let api = FakeApi::default();
        seed(&api, "eu-1", json!({"phase": "Ready"}));
        let writer = writer(&api);
        let current = json!({"phase": "Ready"});
        for _ in 0..3 {
            submit(&writer, "eu-1", &current, current.clone());
        }
        writer.flush().await;
        tokio::time::sleep(WINDOW * 5).await;
        assert!(api.requests(Method::PATCH).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_cache_does_not_rewrite_what_was_written_and_patches_from_it() {
        let api = FakeApi::default();
        let path = seed(&api, "eu-1", json!({}));
        let writer = writer(&api);
        let stale = json!({});
        submit(
            &writer,
            "eu-1",
            &stale,
            json!({"phase": "Ready", "reason": "Joined"}),
        );
        writer.flush().await;
        // The cache still shows the status from before the write.
        submit(
            &writer,
            "eu-1",
            &stale,
            json!({"phase": "Ready", "reason": "Joined"}),
        );
        writer.flush().await;
        assert_eq!(api.requests(Method::PATCH).len(), 1);
        // A change is patched from what was written: the dropped key becomes null.
        submit(&writer, "eu-1", &stale, json!({"phase": "Lost"}));
        writer.flush().await;
        let patches = api.requests(Method::PATCH);
        assert_eq!(patches.len(), 2);
        assert_eq!(
            patches[1].body,
            json!({"status": {"phase": "Lost", "reason": null}})
        );
        assert_eq!(api.get(&path).unwrap()["status"], json!({"phase": "Lost"}));
    }

    #[tokio::test(start_paused = true)]
    async fn a_status_someone_else_changed_is_written_again() {
        let api = FakeApi::default();
        seed(&api, "eu-1", json!({}));
        let writer = writer(&api);
        submit(&writer, "eu-1", &json!({}), json!({"phase": "Ready"}));
        writer.flush().await;
        // The cache caught up, then another writer changed the status.
        submit(
            &writer,
            "eu-1",
            &json!({"phase": "Lost"}),
            json!({"phase": "Ready"}),
        );
        writer.flush().await;
        assert_eq!(api.requests(Method::PATCH).len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_conflict_is_retried_and_the_newest_status_lands() {
        let api = FakeApi::default();
        let path = seed(&api, "eu-1", json!({}));
        let writer = writer(&api);
        api.fail_next(&[409]);
        submit(&writer, "eu-1", &json!({}), json!({"phase": "Joining"}));
        tokio::time::sleep(WINDOW + Duration::from_millis(1)).await;
        assert_eq!(
            api.requests(Method::PATCH).len(),
            1,
            "the first attempt failed"
        );
        assert_eq!(writer.pending(), 1, "and waits to be retried");
        submit(&writer, "eu-1", &json!({}), json!({"phase": "Ready"}));
        writer.flush().await;
        let patches = api.requests(Method::PATCH);
        assert_eq!(patches.len(), 2);
        assert_eq!(patches[1].body, json!({"status": {"phase": "Ready"}}));
        assert_eq!(api.get(&path).unwrap()["status"], json!({"phase": "Ready"}));
        assert_eq!(writer.written(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn server_errors_are_retried_until_the_write_lands() {
        let api = FakeApi::default();
        let path = seed(&api, "eu-1", json!({}));
        let writer = writer(&api);
        api.fail_next(&[503, 429, 500]);
        submit(&writer, "eu-1", &json!({}), json!({"phase": "Ready"}));
        writer.flush().await;
        assert_eq!(api.requests(Method::PATCH).len(), 4);
        assert_eq!(api.get(&path).unwrap()["status"], json!({"phase": "Ready"}));
    }

    #[tokio::test(start_paused = true)]
    async fn a_gone_object_drops_its_status_without_retrying() {
        let api = FakeApi::default();
        let writer = writer(&api);
        submit(&writer, "gone", &json!({}), json!({"phase": "Ready"}));
        writer.flush().await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(api.requests(Method::PATCH).len(), 1);
        assert_eq!(writer.tracked(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_status_waits_for_the_next_submit() {
        let api = FakeApi::default();
        let path = seed(&api, "eu-1", json!({}));
        let metrics = Metrics::new();
        let writer = StatusWriter::new(api.client(), WINDOW, PROGRESS, metrics.clone());
        api.fail_next(&[422]);
        submit(&writer, "eu-1", &json!({}), json!({"phase": "Ready"}));
        writer.flush().await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            api.requests(Method::PATCH).len(),
            1,
            "not retried by itself"
        );
        assert!(metrics.encode().contains(r#"category="status_write"} 1"#));
        submit(&writer, "eu-1", &json!({}), json!({"phase": "Ready"}));
        writer.flush().await;
        assert_eq!(api.requests(Method::PATCH).len(), 2);
        assert_eq!(api.get(&path).unwrap()["status"], json!({"phase": "Ready"}));
    }

    #[tokio::test(start_paused = true)]
    async fn writes_of_one_object_are_a_window_apart_and_objects_do_not_wait_for_each_other() {
        let api = FakeApi::default();
        seed(&api, "eu-1", json!({}));
        seed(&api, "us-1", json!({}));
        let writer = writer(&api);
        let start = tokio::time::Instant::now();
        submit(&writer, "eu-1", &json!({}), json!({"n": 1}));
        submit(&writer, "us-1", &json!({}), json!({"n": 1}));
        tokio::time::sleep(WINDOW + Duration::from_millis(1)).await;
        assert_eq!(api.requests(Method::PATCH).len(), 2);
        submit(&writer, "eu-1", &json!({"n": 1}), json!({"n": 2}));
        writer.flush().await;
        assert_eq!(api.requests(Method::PATCH).len(), 3);
        assert!(start.elapsed() >= WINDOW * 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_object_is_forgotten() {
        let api = FakeApi::default();
        seed(&api, "eu-1", json!({}));
        let writer = writer(&api);
        submit(&writer, "eu-1", &json!({}), json!({"phase": "Ready"}));
        writer.flush().await;
        assert_eq!(writer.tracked(), 1);
        tokio::time::sleep(IDLE_LINGER + WINDOW * 2).await;
        assert_eq!(writer.tracked(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn namespaced_objects_are_patched_at_their_namespaced_path() {
        use accord_crds::FederatedKafkaTopic;
        let api = FakeApi::default();
        let path = "/apis/accord.io/v1beta1/namespaces/team/federatedkafkatopics/orders";
        api.put(path, json!({"metadata": {"name": "orders"}, "status": {}}));
        let writer = writer(&api);
        writer.submit::<FederatedKafkaTopic>(
            Some("team"),
            "orders",
            json!({}),
            json!({"phase": "Ready"}),
        );
        writer.flush().await;
        assert_eq!(
            api.requests(Method::PATCH)[0].path,
            format!("{path}/status")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_number_the_api_server_shows_without_decimals_is_not_rewritten() {
        let api = FakeApi::default();
        seed(&api, "eu-1", json!({"value": 200, "ewma": 200.5}));
        let writer = writer(&api);
        let held = json!({"value": 200, "ewma": 200.5});
        submit(
            &writer,
            "eu-1",
            &held,
            json!({"value": 200.0, "ewma": 200.5}),
        );
        writer.flush().await;
        assert!(api.requests(Method::PATCH).is_empty());
        submit(
            &writer,
            "eu-1",
            &held,
            json!({"value": 201.0, "ewma": 200.5}),
        );
        writer.flush().await;
        let patches = api.requests(Method::PATCH);
        assert_eq!(patches.len(), 1);
        assert_eq!(patches[0].body, json!({"status": {"value": 201.0}}));
    }

    #[test]
    fn a_merge_patch_nulls_what_went_away_and_replaces_what_is_not_an_object() {
        let old = json!({"a": {"b": 1, "c": 2}, "list": [1, 2], "gone": true});
        let new = json!({"a": {"b": 1}, "list": [2], "added": "x"});
        assert_eq!(
            merge_patch(&old, &new),
            json!({"a": {"c": null}, "list": [2], "gone": null, "added": "x"})
        );
        assert_eq!(merge_patch(&Value::Null, &new), new);
    }

    impl StatusWriter {
        /// Objects remembered.
        fn tracked(&self) -> usize {
            self.inner.lock().len()
        }
    }
}
