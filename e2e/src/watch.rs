//! What a member's API server shows of one object over time, as a watch sees it: the
//! record of claims such as "ring 1 never carried the failing revision" or "ring 0 got it
//! before ring 1".

use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures::StreamExt as _;
use kube::runtime::WatchStreamExt as _;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// What a watch saw, in order, with when: each value once, when it changed.
pub type SeenAt = Arc<Mutex<Vec<(Option<String>, Instant)>>>;

/// A running watch of one object; dropping it stops the watch.
pub struct Watched {
    /// What it saw so far.
    pub seen: SeenAt,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watched {
    /// Every value `of` reads from object `name` of `api`, as a watch sees them, in order
    /// and with when (a deleted object reads as `None`), for as long as `self` lives.
    pub fn start<K>(api: Api<K>, name: &str, of: fn(&K) -> Option<String>) -> Self
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let seen: SeenAt = Arc::new(Mutex::new(Vec::new()));
        let config =
            kube::runtime::watcher::Config::default().fields(&format!("metadata.name={name}"));
        let record = seen.clone();
        let task = tokio::spawn(async move {
            let mut events = kube::runtime::watcher(api, config)
                .applied_objects()
                .boxed();
            while let Some(event) = events.next().await {
                let Ok(object) = event else { continue };
                let value = of(&object);
                let mut seen = record.lock().unwrap_or_else(PoisonError::into_inner);
                if seen.last().map(|(v, _)| v) != Some(&value) {
                    seen.push((value, Instant::now()));
                }
            }
        });
        Self { seen, task }
    }

    /// The values seen so far, in order.
    pub fn values(&self) -> Vec<Option<String>> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(v, _)| v.clone())
            .collect()
    }
}
