//! The [`Backend`] kept in this process: etcd's data model (revisions, create and mod
//! revisions, versions, leases that expire on the Tokio clock, watches from any past
//! revision, the election and lock recipes) without etcd.
//!
//! For tests: the controllers run on it with a paused clock and no testbed, and
//! `hub/tests/store_contract.rs` holds it and the etcd backend to the same tests. Nothing is
//! compacted, so memory grows with every write; it is not meant to carry a hub.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::kv::{
    Backend, Compare, CompareOp, EventType, KeepAlive, KeyValue, KvError, KvFuture, LeaderKey,
    PutOptions, Range, RangeResponse, Txn, TxnOp, TxnOpResponse, TxnResponse, WatchEvent,
    WatchRequest, WatchResponse, WatchStream, prefix_end,
};

/// etcd's answer for a lease that does not exist.
const LEASE_NOT_FOUND: &str = "etcdserver: requested lease not found";

fn status(code: tonic::Code, message: &str) -> KvError {
    etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
}

fn lease_not_found() -> KvError {
    status(tonic::Code::NotFound, LEASE_NOT_FOUND)
}

/// An in-memory etcd (see the module's documentation). Cheap to clone; clones share the
/// data.
#[derive(Clone)]
pub struct MemoryBackend {
    state: Arc<Mutex<State>>,
    /// The latest revision, for callers waiting on a change (elections, locks).
    revisions: watch::Sender<i64>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("revision", &*self.revisions.borrow())
            .finish_non_exhaustive()
    }
}

struct Lease {
    ttl: i64,
    deadline: Instant,
}

struct Watcher {
    key: Vec<u8>,
    /// The first key after the watched range (empty: `key` alone).
    end: Vec<u8>,
    progress_notify: bool,
    sender: mpsc::UnboundedSender<Result<WatchResponse, KvError>>,
}

impl Watcher {
    fn covers(&self, key: &[u8]) -> bool {
        in_range(key, &self.key, &self.end)
    }
}

#[derive(Default)]
struct State {
    revision: i64,
    /// Every version of every key: `(revision, the key then or None once deleted)`.
    versions: BTreeMap<Vec<u8>, Vec<(i64, Option<KeyValue>)>>,
    /// Every change, in revision order (for watches that start in the past).
    log: Vec<WatchEvent>,
    leases: HashMap<i64, Lease>,
    next_lease: i64,
    watchers: Vec<Watcher>,
}

/// Whether `key` lies in `[start, end)` (`end` empty: `start` alone; `[0]`: no end).
fn in_range(key: &[u8], start: &[u8], end: &[u8]) -> bool {
    if end.is_empty() {
        return key == start;
    }
    key >= start && (end == [0] || key < end)
}

impl State {
    fn current(&self, key: &[u8]) -> Option<&KeyValue> {
        self.versions
            .get(key)
            .and_then(|v| v.last())
            .and_then(|(_, kv)| kv.as_ref())
    }

    fn at(&self, key: &[u8], revision: i64) -> Option<&KeyValue> {
        self.versions.get(key).and_then(|versions| {
            versions
                .iter()
                .rev()
                .find(|(rev, _)| *rev <= revision)
                .and_then(|(_, kv)| kv.as_ref())
        })
    }

    fn range(&self, range: &Range) -> Result<RangeResponse, KvError> {
        if range.revision > self.revision {
            return Err(status(
                tonic::Code::OutOfRange,
                "etcdserver: mvcc: required revision is a future revision",
            ));
        }
        let revision = if range.revision > 0 {
            range.revision
        } else {
            self.revision
        };
        let keys: Box<dyn Iterator<Item = &Vec<u8>>> = if range.end.is_empty() {
            Box::new(
                self.versions
                    .get_key_value(&range.key)
                    .map(|(k, _)| k)
                    .into_iter(),
            )
        } else if range.end == [0] {
            Box::new(self.versions.range(range.key.clone()..).map(|(k, _)| k))
        } else if range.end <= range.key {
            Box::new(std::iter::empty())
        } else {
            Box::new(
                self.versions
                    .range(range.key.clone()..range.end.clone())
                    .map(|(k, _)| k),
            )
        };
        let mut kvs = Vec::new();
        let mut more = false;
        for key in keys {
            let Some(kv) = self.at(key, revision) else {
                continue;
            };
            if range.limit > 0 && kvs.len() as i64 >= range.limit {
                more = true;
                break;
            }
            let mut kv = kv.clone();
            if range.keys_only {
                kv.value.clear();
            }
            kvs.push(kv);
        }
        Ok(RangeResponse {
            kvs,
            more,
            revision: self.revision,
        })
    }

    /// Chooses every branch of `txn` against the state before it, checking that each put
    /// names a live lease (or keeps one), as etcd does before applying anything.
    fn plan<'t>(&self, txn: &'t Txn, plan: &mut Vec<&'t TxnOp>) -> Result<bool, KvError> {
        let succeeded = txn.compares.iter().all(|c| c.holds(self.current(&c.key)));
        let branch = if succeeded {
            &txn.success
        } else {
            &txn.failure
        };
        for op in branch {
            match op {
                TxnOp::Txn(inner) => {
                    self.plan(inner, plan)?;
                }
                TxnOp::Put { key, options, .. } => {
                    if options.ignore_lease {
                        if self.current(key).is_none() {
                            return Err(status(
                                tonic::Code::InvalidArgument,
                                "etcdserver: key not found",
                            ));
                        }
                    } else if options.lease != 0 && !self.leases.contains_key(&options.lease) {
                        return Err(lease_not_found());
                    }
                    if plan.iter().any(|p| matches!(p, TxnOp::Put { key: k, .. } | TxnOp::Delete { key: k } if k == key))
                    {
                        return Err(status(
                            tonic::Code::InvalidArgument,
                            "etcdserver: duplicate key given in txn request",
                        ));
                    }
                    plan.push(op);
                }
                TxnOp::Delete { .. } | TxnOp::Get { .. } => plan.push(op),
            }
        }
        Ok(succeeded)
    }

    /// Applies `txn` (already planned) at `revision`, recording its changes in `changes`.
    fn apply(&mut self, txn: &Txn, revision: i64, changes: &mut Vec<WatchEvent>) -> TxnResponse {
        let succeeded = txn
            .compares
            .iter()
            .all(|c| c.holds(self.pre(&c.key, changes)));
        let branch = if succeeded {
            &txn.success
        } else {
            &txn.failure
        };
        let responses = branch
            .iter()
            .map(|op| match op {
                TxnOp::Txn(inner) => TxnOpResponse::Txn(self.apply(inner, revision, changes)),
                TxnOp::Get { key } => {
                    TxnOpResponse::Get(self.current(key).cloned().into_iter().collect())
                }
                TxnOp::Put {
                    key,
                    value,
                    options,
                } => {
                    let before = self.current(key).cloned();
                    let lease = if options.ignore_lease {
                        before.as_ref().map_or(0, |kv| kv.lease)
                    } else {
                        options.lease
                    };
                    let kv = KeyValue {
                        key: key.clone(),
                        value: value.clone(),
                        create_revision: before.as_ref().map_or(revision, |kv| kv.create_revision),
                        mod_revision: revision,
                        version: before.as_ref().map_or(0, |kv| kv.version) + 1,
                        lease,
                    };
                    self.record(kv.clone(), Some(kv.clone()), changes, EventType::Put);
                    TxnOpResponse::Put
                }
                TxnOp::Delete { key } if self.current(key).is_some() => {
                    let gone = KeyValue {
                        key: key.clone(),
                        mod_revision: revision,
                        ..KeyValue::default()
                    };
                    self.record(gone, None, changes, EventType::Delete);
                    TxnOpResponse::Delete(1)
                }
                TxnOp::Delete { .. } => TxnOpResponse::Delete(0),
            })
            .collect();
        TxnResponse {
            succeeded,
            revision: 0,
            responses,
        }
    }

    /// The key as it was before the transaction being applied (its compares see that).
    fn pre<'s>(&'s self, key: &[u8], changes: &[WatchEvent]) -> Option<&'s KeyValue> {
        if changes.iter().any(|c| c.kv.key == key) {
            // Written earlier in this transaction: the version before it.
            let versions = self.versions.get(key)?;
            let revision = changes[0].kv.mod_revision;
            return versions
                .iter()
                .rev()
                .find(|(rev, _)| *rev < revision)
                .and_then(|(_, kv)| kv.as_ref());
        }
        self.current(key)
    }

    fn record(
        &mut self,
        event_kv: KeyValue,
        now: Option<KeyValue>,
        changes: &mut Vec<WatchEvent>,
        event_type: EventType,
    ) {
        let revision = event_kv.mod_revision;
        self.versions
            .entry(event_kv.key.clone())
            .or_default()
            .push((revision, now));
        changes.push(WatchEvent {
            event_type,
            kv: event_kv,
        });
    }

    /// Ends a transaction at `revision` that changed `changes`: logs them and tells the
    /// watchers.
    fn commit(&mut self, revision: i64, changes: Vec<WatchEvent>) {
        if changes.is_empty() {
            return;
        }
        self.revision = revision;
        self.watchers.retain(|w| {
            let events: Vec<WatchEvent> = changes
                .iter()
                .filter(|c| w.covers(&c.kv.key))
                .cloned()
                .collect();
            if events.is_empty() && !w.progress_notify {
                return !w.sender.is_closed();
            }
            // A watch with progress notifications hears of every revision, so that its
            // reader learns it has seen everything up to it.
            w.sender
                .send(Ok(WatchResponse {
                    revision,
                    events,
                    ..WatchResponse::default()
                }))
                .is_ok()
        });
        self.log.extend(changes);
    }

    fn txn(&mut self, txn: &Txn) -> Result<TxnResponse, KvError> {
        let mut plan = Vec::new();
        self.plan(txn, &mut plan)?;
        let revision = self.revision + 1;
        let mut changes = Vec::new();
        let mut response = self.apply(txn, revision, &mut changes);
        self.commit(revision, changes);
        response.revision = self.revision;
        Ok(response)
    }

    /// Deletes every key attached to `lease` and forgets the lease.
    fn expire(&mut self, lease: i64) {
        self.leases.remove(&lease);
        let keys: Vec<Vec<u8>> = self
            .versions
            .iter()
            .filter(|(_, v)| {
                v.last()
                    .and_then(|(_, kv)| kv.as_ref())
                    .is_some_and(|kv| kv.lease == lease)
            })
            .map(|(k, _)| k.clone())
            .collect();
        if keys.is_empty() {
            return;
        }
        let deletes = Txn::new().and_then(
            keys.into_iter()
                .map(|key| TxnOp::Delete { key })
                .collect::<Vec<_>>(),
        );
        let _ = self.txn(&deletes);
    }
}

impl MemoryBackend {
    /// An empty store at revision 1 (etcd's first revision), with a task that expires
    /// leases on the Tokio clock. Call within a Tokio runtime.
    pub fn new() -> Self {
        let state = State {
            revision: 1,
            next_lease: 0x694d_0000_0000,
            ..State::default()
        };
        let (revisions, _) = watch::channel(1);
        let backend = Self {
            state: Arc::new(Mutex::new(state)),
            revisions,
        };
        tokio::spawn(reap(
            Arc::downgrade(&backend.state),
            backend.revisions.clone(),
        ));
        backend
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on the state and announces the revision it leaves.
    fn change<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self.state();
        let answer = f(&mut state);
        let revision = state.revision;
        drop(state);
        announce(&self.revisions, revision);
        answer
    }

    /// The key of `name` with the lowest create revision (the leader, the lock's holder).
    fn first_under(&self, name: &[u8]) -> Option<KeyValue> {
        let prefix = [name, b"/"].concat();
        let end = prefix_end(&prefix);
        let state = self.state();
        let listed = state.range(&Range {
            key: prefix,
            end,
            ..Range::default()
        });
        listed
            .ok()?
            .kvs
            .into_iter()
            .min_by_key(|kv| kv.create_revision)
    }

    /// etcd's election and lock recipe: put `<name>/<lease hex>` on `lease` (unless it
    /// exists), then wait until no key of `name` was created before it.
    async fn queue(&self, name: Vec<u8>, value: Vec<u8>, lease: i64) -> Result<KeyValue, KvError> {
        let key = [name.as_slice(), format!("/{lease:x}").as_bytes()].concat();
        let mut revisions = self.revisions.subscribe();
        let mine = self.change(|state| {
            if let Some(existing) = state.current(&key) {
                return Ok::<_, KvError>(existing.clone());
            }
            let put = Txn::new().and_then(vec![TxnOp::put(
                key.clone(),
                value,
                Some(PutOptions::new().with_lease(lease)),
            )]);
            state.txn(&put)?;
            Ok(state.current(&key).cloned().unwrap_or_default())
        })?;
        loop {
            let current = self.state().current(&key).cloned();
            match current {
                Some(kv) if kv.create_revision == mine.create_revision => {}
                _ => {
                    return Err(status(
                        tonic::Code::Aborted,
                        "the candidate key was deleted while waiting",
                    ));
                }
            }
            if self
                .first_under(&name)
                .is_some_and(|first| first.key == key)
            {
                return Ok(mine);
            }
            if revisions.changed().await.is_err() {
                return Err(status(tonic::Code::Unavailable, "the store ended"));
            }
        }
    }

    fn delete(&self, key: Vec<u8>) {
        self.change(|state| {
            let _ = state.txn(&Txn::new().and_then(vec![TxnOp::Delete { key }]));
        });
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// Expires leases whose deadline passed; ends when the store is dropped.
async fn reap(state: Weak<Mutex<State>>, revisions: watch::Sender<i64>) {
    const TICK: Duration = Duration::from_millis(100);
    loop {
        tokio::time::sleep(TICK).await;
        let Some(state) = state.upgrade() else {
            return;
        };
        let mut state = state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let expired: Vec<i64> = state
            .leases
            .iter()
            .filter(|(_, l)| l.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            state.expire(id);
        }
        let revision = state.revision;
        drop(state);
        announce(&revisions, revision);
    }
}

/// Tells the callers waiting on a change (elections, locks) that the store is at
/// `revision`, when it moved.
fn announce(revisions: &watch::Sender<i64>, revision: i64) {
    revisions.send_if_modified(|r| {
        let changed = *r != revision;
        *r = revision;
        changed
    });
}

/// When a lease of `ttl` seconds refreshed now expires.
fn expiry(ttl: i64) -> Instant {
    Instant::now() + Duration::from_secs(ttl.unsigned_abs())
}

struct MemoryKeepAlive {
    backend: MemoryBackend,
    id: i64,
}

impl MemoryBackend {
    fn refresh(&self, id: i64) -> i64 {
        let mut state = self.state();
        match state.leases.get_mut(&id) {
            Some(lease) => {
                lease.deadline = expiry(lease.ttl);
                lease.ttl
            }
            None => 0,
        }
    }
}

impl KeepAlive for MemoryKeepAlive {
    fn refresh(&mut self) -> KvFuture<'_, i64> {
        Box::pin(async move { Ok(self.backend.refresh(self.id)) })
    }
}

impl Backend for MemoryBackend {
    fn range(&self, range: Range) -> KvFuture<'_, RangeResponse> {
        Box::pin(async move { self.state().range(&range) })
    }

    fn txn(&self, txn: Txn) -> KvFuture<'_, TxnResponse> {
        Box::pin(async move { self.change(|state| state.txn(&txn)) })
    }

    fn watch(&self, request: WatchRequest) -> KvFuture<'_, WatchStream> {
        Box::pin(async move {
            let (sender, receiver) = mpsc::unbounded_channel();
            let end = if request.prefix {
                prefix_end(&request.key)
            } else {
                Vec::new()
            };
            let mut state = self.state();
            let revision = state.revision;
            let _ = sender.send(Ok(WatchResponse {
                created: true,
                revision,
                ..WatchResponse::default()
            }));
            if request.start_revision > 0 && request.start_revision <= revision {
                // The changes since the start revision, one message per revision.
                let mut past: Vec<&WatchEvent> = state
                    .log
                    .iter()
                    .filter(|e| {
                        e.kv.mod_revision >= request.start_revision
                            && in_range(&e.kv.key, &request.key, &end)
                    })
                    .collect();
                while !past.is_empty() {
                    let at = past[0].kv.mod_revision;
                    let split = past.iter().position(|e| e.kv.mod_revision != at);
                    let rest = past.split_off(split.unwrap_or(past.len()));
                    let _ = sender.send(Ok(WatchResponse {
                        revision,
                        events: past.into_iter().cloned().collect(),
                        ..WatchResponse::default()
                    }));
                    past = rest;
                }
            }
            state.watchers.push(Watcher {
                key: request.key,
                end,
                progress_notify: request.progress_notify,
                sender,
            });
            Ok(UnboundedReceiverStream::new(receiver).boxed())
        })
    }

    fn grant(&self, ttl: i64) -> KvFuture<'_, (i64, i64)> {
        Box::pin(async move {
            let ttl = ttl.max(1);
            let mut state = self.state();
            state.next_lease += 1;
            let id = state.next_lease;
            state.leases.insert(
                id,
                Lease {
                    ttl,
                    deadline: expiry(ttl),
                },
            );
            Ok((id, ttl))
        })
    }

    fn keep_alive(&self, id: i64) -> KvFuture<'_, Box<dyn KeepAlive>> {
        Box::pin(async move {
            if self.refresh(id) <= 0 {
                return Err(lease_not_found());
            }
            Ok(Box::new(MemoryKeepAlive {
                backend: self.clone(),
                id,
            }) as Box<dyn KeepAlive>)
        })
    }

    fn revoke(&self, id: i64) -> KvFuture<'_, ()> {
        Box::pin(async move {
            self.change(|state| {
                if !state.leases.contains_key(&id) {
                    return Err(lease_not_found());
                }
                state.expire(id);
                Ok(())
            })
        })
    }

    fn campaign(&self, name: Vec<u8>, value: Vec<u8>, lease: i64) -> KvFuture<'_, LeaderKey> {
        Box::pin(async move {
            let kv = self.queue(name.clone(), value, lease).await?;
            Ok(LeaderKey {
                name,
                key: kv.key,
                revision: kv.create_revision,
                lease: kv.lease,
            })
        })
    }

    fn leader(&self, name: Vec<u8>) -> KvFuture<'_, Option<KeyValue>> {
        Box::pin(async move { Ok(self.first_under(&name)) })
    }

    fn resign(&self, leader: LeaderKey) -> KvFuture<'_, ()> {
        Box::pin(async move {
            self.change(|state| {
                let ours = Txn::new()
                    .when(vec![Compare::create_revision(
                        leader.key.clone(),
                        CompareOp::Equal,
                        leader.revision,
                    )])
                    .and_then(vec![TxnOp::Delete { key: leader.key }]);
                state.txn(&ours).map(|_| ())
            })
        })
    }

    fn lock(&self, name: Vec<u8>, lease: i64) -> KvFuture<'_, Vec<u8>> {
        Box::pin(async move { Ok(self.queue(name, Vec::new(), lease).await?.key) })
    }

    fn unlock(&self, key: Vec<u8>) -> KvFuture<'_, ()> {
        Box::pin(async move {
            self.delete(key);
            Ok(())
        })
    }

    fn status(&self) -> KvFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }
}
