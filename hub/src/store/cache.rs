//! An in-memory copy of one key prefix, fed by an etcd watch.
//!
//! The cache lists the prefix at revision R, then watches from R+1, so no change is missed
//! or seen twice. A broken watch stream is re-opened from the last revision seen; when etcd
//! has compacted that revision away, the cache lists the prefix again and emits the
//! differences as events. A value that fails to decode is logged and treated as absent: one
//! malformed record never stalls the watch.

use std::sync::Arc;
use std::time::Duration;

use accord_common::runtime::{AbortOnDrop, Retry, backoff};
use dashmap::DashMap;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};

use super::kv::{EventType, KeyValue, WatchRequest};
use super::{Store, StoreError, decode, log_error};

/// Events buffered per subscriber before it lags.
const EVENT_BUFFER: usize = 4096;
/// Longest pause between two attempts at re-opening the watch or re-listing.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);

/// A change seen by a [`PrefixCache`].
#[derive(Clone, Debug, PartialEq)]
pub enum CacheEvent<T> {
    /// `key` was created or changed.
    Put {
        /// The full key.
        key: String,
        /// Its decoded value.
        value: T,
        /// Its `mod_revision`.
        mod_revision: i64,
    },
    /// `key` was deleted (or its value no longer decodes).
    Delete {
        /// The full key.
        key: String,
    },
}

/// A watch-fed copy of every key under one prefix, with JSON values decoded as `T`. Keys are
/// full etcd keys (as [`Keyspace`](super::Keyspace) builds them). Cheap to clone; the watch
/// stops when the last clone is dropped.
pub struct PrefixCache<T> {
    shared: Arc<CacheState<T>>,
    _task: Arc<AbortOnDrop>,
}

impl<T> Clone for PrefixCache<T> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            _task: self._task.clone(),
        }
    }
}

impl<T> std::fmt::Debug for PrefixCache<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixCache")
            .field("prefix", &self.shared.prefix)
            .field("entries", &self.shared.entries.len())
            .field("revision", &*self.shared.revision.borrow())
            .finish()
    }
}

struct CacheState<T> {
    prefix: String,
    entries: DashMap<String, (T, i64)>,
    events: broadcast::Sender<CacheEvent<T>>,
    revision: watch::Sender<i64>,
}

impl<T> PrefixCache<T>
where
    T: DeserializeOwned + Clone + Send + Sync + 'static,
{
    /// Lists `prefix` and starts following it. Returns once the initial contents are
    /// loaded.
    pub async fn start(store: Store, prefix: String) -> Result<Self, StoreError> {
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let shared = Arc::new(CacheState {
            prefix,
            entries: DashMap::new(),
            events,
            revision: watch::channel(0).0,
        });
        let revision = relist(&store, &shared).await?;
        let task = tokio::spawn(follow_forever(store, shared.clone(), revision));
        Ok(Self {
            shared,
            _task: Arc::new(AbortOnDrop(task)),
        })
    }

    /// The prefix this cache follows.
    pub fn prefix(&self) -> &str {
        &self.shared.prefix
    }

    /// The value at `key` (a full key) and its `mod_revision`.
    pub fn get(&self, key: &str) -> Option<(T, i64)> {
        self.shared.entries.get(key).map(|entry| entry.clone())
    }

    /// Calls `f` with the value at `key` and its `mod_revision`, without copying the value
    /// (as [`Self::visit`]); `None` when there is none.
    pub fn read<R>(&self, key: &str, f: impl FnOnce(&T, i64) -> R) -> Option<R> {
        self.shared.entries.get(key).map(|entry| {
            let (value, revision) = entry.value();
            f(value, *revision)
        })
    }

    /// Calls `f` with every entry (`key`, value, `mod_revision`) in no particular order,
    /// without copying a value: for large values read often (a placement record naming
    /// every cluster of a fleet, read at every connect).
    pub fn visit(&self, mut f: impl FnMut(&str, &T, i64)) {
        for entry in self.shared.entries.iter() {
            let (value, revision) = entry.value();
            f(entry.key(), value, *revision);
        }
    }

    /// Every entry as `(key, value, mod_revision)`, sorted by key.
    pub fn snapshot(&self) -> Vec<(String, T, i64)> {
        let mut entries: Vec<(String, T, i64)> = self
            .shared
            .entries
            .iter()
            .map(|entry| {
                let (value, revision) = entry.value();
                (entry.key().clone(), value.clone(), *revision)
            })
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.shared.entries.len()
    }

    /// Whether the cache holds no entry.
    pub fn is_empty(&self) -> bool {
        self.shared.entries.is_empty()
    }

    /// Changes from now on. A subscriber that falls more than a few thousand events behind
    /// gets `RecvError::Lagged` and should take a fresh [`PrefixCache::snapshot`].
    pub fn subscribe(&self) -> broadcast::Receiver<CacheEvent<T>> {
        self.shared.events.subscribe()
    }

    /// The etcd revision the cache reflects: every change up to it has been applied.
    pub fn revision(&self) -> i64 {
        *self.shared.revision.borrow()
    }

    /// Waits until the cache reflects `revision` — the revision of a write under this
    /// prefix, say — so a read afterwards sees it. (The cache only learns of revisions
    /// through changes under its prefix and etcd's occasional progress notifications.)
    pub async fn wait_for_revision(&self, revision: i64) {
        let mut current = self.shared.revision.subscribe();
        // The sender lives in `shared`, which `self` keeps alive.
        let _ = current.wait_for(|seen| *seen >= revision).await;
    }
}

impl<T: DeserializeOwned + Clone> CacheState<T> {
    /// Applies a put to the map and returns the event to announce (announced by the
    /// caller once the revision has advanced, so a subscriber that reads `revision()` on an
    /// event never sees it lag behind).
    fn apply_put(&self, kv: &KeyValue) -> Option<CacheEvent<T>> {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        match decode::<T>(kv) {
            Ok(value) => {
                self.entries
                    .insert(key.clone(), (value.clone(), kv.mod_revision()));
                Some(CacheEvent::Put {
                    key,
                    value,
                    mod_revision: kv.mod_revision(),
                })
            }
            Err(e) => {
                log_error("cache ignores a malformed value", &e);
                self.apply_delete(key)
            }
        }
    }

    /// Applies a delete to the map; the event to announce, if the key was there.
    fn apply_delete(&self, key: String) -> Option<CacheEvent<T>> {
        self.entries
            .remove(&key)
            .map(|_| CacheEvent::Delete { key })
    }

    fn announce(&self, events: Vec<CacheEvent<T>>) {
        for event in events {
            let _ = self.events.send(event);
        }
    }

    fn advance(&self, revision: i64) {
        self.revision.send_if_modified(|current| {
            if revision > *current {
                *current = revision;
                true
            } else {
                false
            }
        });
    }
}

/// Lists the prefix, brings the entries in line with it (emitting the differences) and
/// returns the listing's revision.
async fn relist<T: DeserializeOwned + Clone>(
    store: &Store,
    shared: &CacheState<T>,
) -> Result<i64, StoreError> {
    let (kvs, revision) = store.list_prefix(&shared.prefix, false).await?;
    let mut listed = std::collections::HashSet::with_capacity(kvs.len());
    let mut announced = Vec::new();
    for kv in &kvs {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        let unchanged = shared
            .entries
            .get(&key)
            .is_some_and(|entry| entry.1 == kv.mod_revision());
        if !unchanged {
            announced.extend(shared.apply_put(kv));
        }
        listed.insert(key);
    }
    let gone: Vec<String> = shared
        .entries
        .iter()
        .filter(|entry| !listed.contains(entry.key()))
        .map(|entry| entry.key().clone())
        .collect();
    for key in gone {
        announced.extend(shared.apply_delete(key));
    }
    shared.advance(revision);
    shared.announce(announced);
    Ok(revision)
}

/// How a watch ended.
enum WatchEnd {
    /// etcd compacted the revisions the watch needed: list again.
    Compacted,
    /// The stream broke: re-open it from the last revision seen.
    Broken(StoreError),
}

async fn follow_forever<T: DeserializeOwned + Clone>(
    store: Store,
    shared: Arc<CacheState<T>>,
    mut revision: i64,
) {
    let mut delays = retry_delays();
    loop {
        match follow(&store, &shared, &mut revision).await {
            WatchEnd::Compacted => {
                tracing::info!(prefix = %shared.prefix, revision, "cache watch compacted; listing again");
                loop {
                    match relist(&store, &shared).await {
                        Ok(listed) => {
                            revision = listed;
                            delays = retry_delays();
                            break;
                        }
                        Err(e) => {
                            log_error("cache re-list failed", &e);
                            tokio::time::sleep(delays.next_delay()).await;
                        }
                    }
                }
            }
            WatchEnd::Broken(e) => {
                log_error("cache watch broke; re-opening", &e);
                tokio::time::sleep(delays.next_delay()).await;
            }
        }
    }
}

/// Follows the prefix from `revision + 1`, advancing `revision` as responses arrive.
async fn follow<T: DeserializeOwned + Clone>(
    store: &Store,
    shared: &CacheState<T>,
    revision: &mut i64,
) -> WatchEnd {
    let request = WatchRequest {
        key: shared.prefix.clone().into_bytes(),
        prefix: true,
        start_revision: *revision + 1,
        progress_notify: true,
    };
    let mut stream = match store.backend().watch(request).await {
        Ok(stream) => stream,
        Err(e) => return WatchEnd::Broken(e.into()),
    };
    loop {
        let response = match stream.next().await {
            Some(Ok(response)) => response,
            None => {
                return WatchEnd::Broken(StoreError::Unexpected("watch stream ended".into()));
            }
            Some(Err(e)) => return WatchEnd::Broken(e.into()),
        };
        if response.canceled {
            if response.compact_revision > 0 {
                return WatchEnd::Compacted;
            }
            return WatchEnd::Broken(StoreError::Unexpected(format!(
                "watch canceled: {}",
                response.cancel_reason
            )));
        }
        let mut seen = *revision;
        let mut announced = Vec::new();
        for event in &response.events {
            let kv = &event.kv;
            announced.extend(match event.event_type {
                EventType::Put => shared.apply_put(kv),
                EventType::Delete => {
                    shared.apply_delete(String::from_utf8_lossy(kv.key()).into_owned())
                }
            });
            seen = seen.max(kv.mod_revision());
        }
        // Only a progress notification (no events, not the creation answer) vouches that
        // every change up to its header revision was delivered: while a watch catches up,
        // event batches carry the store's current revision in their header.
        if response.events.is_empty() && !response.created {
            seen = seen.max(response.revision);
        }
        *revision = seen;
        shared.advance(seen);
        shared.announce(announced);
    }
}

fn retry_delays() -> Retry {
    backoff(Duration::from_millis(50), MAX_RETRY_DELAY)
}
