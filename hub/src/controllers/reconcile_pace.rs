//! Pacing of the reconciles that agents' reports and ManagedCluster changes ask for.
//!
//! During a fan-out each of N agents reports within seconds, and every report asks for its
//! object's reconcile. kube-runtime runs those back to back (one pending while one runs),
//! and each costs O(N) (the decision and the status over every placement), so a change to N
//! clusters cost a number of reconciles that grew with N, each O(N): superlinear, and it
//! took the CPU the deliveries and the reports' writes needed. Here an object whose last
//! reconcile took `d` runs again for such a trigger no sooner than [`FACTOR`] × `d` after
//! it ended (and never more than [`MAX_WAIT`] later): the reconciles per fan-out stay about
//! constant, they take at most 1 / (1 + [`FACTOR`]) of a core, and an object that reconciles
//! in microseconds waits microseconds. An object's own changes (a user's edit) and its
//! requeues are not paced: they reach the controller directly.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

/// How many times its own duration an object waits after a reconcile before a paced
/// trigger runs it again.
pub const FACTOR: u32 = 4;
/// The longest a paced trigger waits, however long the last reconcile took.
pub const MAX_WAIT: Duration = Duration::from_secs(1);

/// The last reconcile of each object, shared by the controller (which records them) and
/// the forwarding task (which paces by them).
pub struct ReconcilePace<K> {
    timings: Mutex<HashMap<K, Timing>>,
}

#[derive(Clone, Copy, Debug)]
struct Timing {
    running: bool,
    took: Duration,
    ended: Instant,
}

impl<K: Clone + Eq + Hash> Default for ReconcilePace<K> {
    fn default() -> Self {
        Self {
            timings: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> ReconcilePace<K> {
    /// Marks `key`'s reconcile as running until the returned guard is dropped (which
    /// records how long it took, whether it succeeded or not).
    pub fn running(self: &Arc<Self>, key: K) -> Running<K> {
        let started = Instant::now();
        self.update(&key, |t| t.running = true);
        Running {
            pace: self.clone(),
            key,
            started,
        }
    }

    /// Forgets a deleted object.
    pub fn forget(&self, key: &K) {
        self.lock().remove(key);
    }

    /// When a paced trigger for `key` may run: `None` for now.
    fn due(&self, key: &K, now: Instant) -> Option<Instant> {
        let timing = *self.lock().get(key)?;
        if timing.running {
            // Look again about when it will have ended; it is queued after it then.
            return Some(now + timing.took.clamp(Duration::from_millis(1), MAX_WAIT));
        }
        let due = timing.ended + (timing.took * FACTOR).min(MAX_WAIT);
        (due > now).then_some(due)
    }

    /// Forwards paced triggers from `paced` to `trigger` until `paced` closes: each key at
    /// most once while it waits.
    pub async fn forward(
        self: Arc<Self>,
        mut paced: mpsc::UnboundedReceiver<K>,
        trigger: mpsc::UnboundedSender<K>,
    ) {
        let mut waiting: HashMap<K, Instant> = HashMap::new();
        loop {
            let next = waiting.values().min().copied();
            let woke = tokio::select! {
                got = paced.recv() => match got {
                    Some(key) => vec![key],
                    None => return,
                },
                () = sleep_until(next) => {
                    let now = Instant::now();
                    let due: Vec<K> = waiting
                        .iter()
                        .filter(|(_, at)| **at <= now)
                        .map(|(k, _)| k.clone())
                        .collect();
                    for key in &due {
                        waiting.remove(key);
                    }
                    due
                }
            };
            let now = Instant::now();
            for key in woke {
                if waiting.contains_key(&key) {
                    continue;
                }
                match self.due(&key, now) {
                    None => {
                        if trigger.send(key).is_err() {
                            return;
                        }
                    }
                    Some(at) => {
                        waiting.insert(key, at);
                    }
                }
            }
        }
    }

    fn update(&self, key: &K, change: impl FnOnce(&mut Timing)) {
        let mut timings = self.lock();
        let timing = timings.entry(key.clone()).or_insert(Timing {
            running: false,
            took: Duration::ZERO,
            ended: Instant::now(),
        });
        change(timing);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, Timing>> {
        self.timings.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A reconcile in progress (see [`ReconcilePace::running`]).
pub struct Running<K: Clone + Eq + Hash + Send + 'static> {
    pace: Arc<ReconcilePace<K>>,
    key: K,
    started: Instant,
}

impl<K: Clone + Eq + Hash + Send + 'static> Drop for Running<K> {
    fn drop(&mut self) {
        let ended = Instant::now();
        let took = ended - self.started;
        self.pace.update(&self.key, |t| {
            *t = Timing {
                running: false,
                took,
                ended,
            };
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn next(rx: &mut mpsc::UnboundedReceiver<&'static str>) -> (&'static str, Instant) {
        let key = rx.recv().await.unwrap();
        (key, Instant::now())
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_object_waits_four_times_its_reconcile_and_its_triggers_merge() {
        let pace = Arc::new(ReconcilePace::<&'static str>::default());
        let (paced, paced_rx) = mpsc::unbounded_channel();
        let (trigger, mut triggers) = mpsc::unbounded_channel();
        tokio::spawn(pace.clone().forward(paced_rx, trigger));

        // Never reconciled: straight through.
        paced.send("slow").unwrap();
        let (_, first) = next(&mut triggers).await;

        // A reconcile of 100 ms; five triggers during it and after it become one, 400 ms
        // after it ended.
        let running = pace.running("slow");
        paced.send("slow").unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(running);
        let ended = Instant::now();
        for _ in 0..4 {
            paced.send("slow").unwrap();
        }
        // Another object is not held up by it.
        paced.send("fast").unwrap();
        assert_eq!(next(&mut triggers).await.0, "fast");
        let (key, at) = next(&mut triggers).await;
        assert_eq!(key, "slow");
        assert!(at >= ended + Duration::from_millis(400), "{:?}", at - ended);
        assert!(at < ended + Duration::from_millis(420), "{:?}", at - ended);
        assert!(first < ended);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(triggers.try_recv().is_err(), "the triggers were merged");

        // A reconcile longer than the bound waits the bound, not four times it.
        let running = pace.running("slow");
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(running);
        let ended = Instant::now();
        paced.send("slow").unwrap();
        let (_, at) = next(&mut triggers).await;
        assert!(at - ended >= MAX_WAIT && at - ended < MAX_WAIT + Duration::from_millis(20));
    }
}
