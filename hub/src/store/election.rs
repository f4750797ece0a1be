//! Leader election among hub replicas through etcd's Election API, and the fence that keeps
//! a deposed leader from writing.
//!
//! Each replica campaigns with its own lease. The winner's candidate key
//! (`election/hub/<lease>`) and its create revision form a [`Fence`]; writes made with
//! [`Store::fenced_txn`](super::Store::fenced_txn) compare that create revision, so once the
//! key is gone (lease expired, leader resigned, key deleted) the old leader's writes fail
//! with [`StoreError::Fenced`] even if it has not noticed yet.

use std::time::Duration;

use accord_common::runtime::{Retry, backoff};
use futures::StreamExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::kv::{Compare, CompareOp, EventType, LeaderKey, Range, WatchRequest, WatchStream};
use super::lease::Lease;
use super::{Store, StoreError, log_error};

/// Longest pause between two campaigns after failures.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);

/// Proof of leadership for one term: the winner's election key and its create revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The leader's candidate key (`<prefix>election/hub/<lease hex>`).
    pub key: Vec<u8>,
    /// The key's create revision; a re-created key has another one.
    pub revision: i64,
    /// The lease the key is attached to.
    pub lease: i64,
}

impl Fence {
    /// The etcd comparison that holds while this term lasts. Add it to any transaction
    /// that must only apply while this replica leads.
    pub fn compare(&self) -> Compare {
        Compare::create_revision(self.key.clone(), CompareOp::Equal, self.revision)
    }
}

/// This replica's participation in the hub's leader election.
///
/// A background task campaigns until elected, holds leadership while its lease lives and
/// its key exists, and campaigns again after losing it. Dropping the value stops the task
/// without resigning — as a crash would: the lease then expires after its TTL and another
/// replica takes over. [`LeaderElection::resign`] hands leadership over at once.
#[derive(Debug)]
pub struct LeaderElection {
    identity: String,
    state: watch::Receiver<Option<Fence>>,
    shutdown: watch::Sender<bool>,
    task: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl LeaderElection {
    /// Starts campaigning as `identity` (the value other replicas see as the leader) with
    /// a lease of `ttl`. Returns at once; leadership is reported through
    /// [`LeaderElection::subscribe`].
    pub async fn start(store: Store, identity: String, ttl: Duration) -> Result<Self, StoreError> {
        let (state_tx, state) = watch::channel(None);
        let (shutdown, shutdown_rx) = watch::channel(false);
        let task = tokio::spawn(campaign_forever(
            store,
            identity.clone(),
            ttl,
            state_tx,
            shutdown_rx,
        ));
        Ok(Self {
            identity,
            state,
            shutdown,
            task: std::sync::Mutex::new(Some(task)),
        })
    }

    /// The identity this replica campaigns with.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this replica leads right now.
    pub fn is_leader(&self) -> bool {
        self.state.borrow().is_some()
    }

    /// The fence of the current term while this replica leads.
    pub fn fence(&self) -> Option<Fence> {
        self.state.borrow().clone()
    }

    /// Leadership changes: `Some(fence)` when a term starts, `None` when it ends.
    pub fn subscribe(&self) -> watch::Receiver<Option<Fence>> {
        self.state.clone()
    }

    /// Waits until this replica leads and returns the term's fence.
    pub async fn wait_for_leadership(&self) -> Fence {
        let mut state = self.state.clone();
        loop {
            if let Some(fence) = state.borrow_and_update().clone() {
                return fence;
            }
            if state.changed().await.is_err() {
                // The task is gone for good; nothing will ever change again.
                std::future::pending::<()>().await;
            }
        }
    }

    /// The identity of the current leader, if there is one.
    pub async fn current_leader(store: &Store) -> Result<Option<String>, StoreError> {
        let leader = store
            .backend()
            .leader(store.keys().election().into_bytes())
            .await?;
        Ok(leader.map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
    }

    /// Gives up leadership (or candidacy) at once and stops campaigning. Takes `&self` so
    /// a replica shutting down can resign while its controllers still hold the election.
    pub async fn resign(&self) {
        let _ = self.shutdown.send(true);
        let task = self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(task) = task
            && let Err(e) = task.await
            && e.is_panic()
        {
            tracing::error!("leader election task panicked");
        }
    }
}

/// How long a dropped election may take to resign before its task is stopped.
const RESIGN_ON_DROP: Duration = Duration::from_secs(5);

/// Dropping resigns, as [`LeaderElection::resign`] does but in the background: the lease is
/// revoked (another replica leads at once instead of after the TTL) unless that takes over
/// [`RESIGN_ON_DROP`] (etcd unreachable), when the task is stopped and the lease lapses
/// after its TTL. Outside a Tokio runtime the task is stopped at once.
impl Drop for LeaderElection {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        let task = self
            .task
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let Some(task) = task else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let abort = task.abort_handle();
                runtime.spawn(async move {
                    if tokio::time::timeout(RESIGN_ON_DROP, task).await.is_err() {
                        abort.abort();
                    }
                });
            }
            Err(_) => task.abort(),
        }
    }
}

/// Why a term (a campaign and, if won, the leadership that followed) ended.
enum TermEnd {
    /// [`LeaderElection::resign`] was called; clean-up is done.
    Shutdown,
    /// The lease or the election key went away; campaign again.
    Lost,
}

async fn campaign_forever(
    store: Store,
    identity: String,
    ttl: Duration,
    state: watch::Sender<Option<Fence>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut delays = retry_delays();
    loop {
        match term(&store, &identity, ttl, &state, &mut shutdown).await {
            Ok(TermEnd::Shutdown) => return,
            Ok(TermEnd::Lost) => delays = retry_delays(),
            Err(e) => {
                state.send_replace(None);
                log_error("leader election failed; campaigning again", &e);
                let delay = delays.next_delay();
                tokio::select! {
                    () = stopped(&mut shutdown) => return,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

/// One term: grant a lease, campaign, lead until the lease or the key goes.
async fn term(
    store: &Store,
    identity: &str,
    ttl: Duration,
    state: &watch::Sender<Option<Fence>>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<TermEnd, StoreError> {
    let lease = tokio::select! {
        () = stopped(shutdown) => return Ok(TermEnd::Shutdown),
        lease = Lease::grant(store, ttl) => lease?,
    };
    let name = store.keys().election();
    let backend = store.backend().clone();
    let campaign = backend.campaign(
        name.clone().into_bytes(),
        identity.as_bytes().to_vec(),
        lease.id(),
    );
    let leader = tokio::select! {
        () = stopped(shutdown) => {
            // Revoking the lease deletes the candidate key, leaving the queue.
            if let Err(e) = lease.revoke().await {
                log_error("revoking the election lease failed", &e);
            }
            return Ok(TermEnd::Shutdown);
        }
        () = lease.lost() => return Ok(TermEnd::Lost),
        won = campaign => match won {
            Ok(won) => won,
            Err(e) => return abandon(&lease, e.into()),
        },
    };
    let fence = Fence {
        key: leader.key.clone(),
        revision: leader.revision,
        lease: leader.lease,
    };
    // Watch the key from just after its creation, so a deletion that happened before the
    // watch started is still seen.
    let mut watch = match KeyWatch::open(store, &fence).await {
        Ok(watch) => watch,
        Err(e) => return abandon(&lease, e),
    };
    tracing::info!(identity, key = %String::from_utf8_lossy(&fence.key), "became the hub leader");
    state.send_replace(Some(fence.clone()));

    let end = tokio::select! {
        () = stopped(shutdown) => {
            state.send_replace(None);
            resign(store, leader).await;
            if let Err(e) = lease.revoke().await {
                log_error("revoking the election lease failed", &e);
            }
            tracing::info!(identity, "resigned hub leadership");
            return Ok(TermEnd::Shutdown);
        }
        () = lease.lost() => "the election lease was lost",
        deleted = watch.deleted(store, &fence) => match deleted {
            Ok(()) => "the election key was deleted",
            Err(e) => {
                state.send_replace(None);
                return abandon(&lease, e);
            }
        },
    };
    state.send_replace(None);
    tracing::warn!(identity, reason = end, "lost hub leadership");
    lease.revoke_in_background();
    Ok(TermEnd::Lost)
}

/// Ends a term that failed half-way: revokes its lease (from a spawned task) so that its
/// candidate key does not block the next campaign until the TTL runs out.
fn abandon(lease: &Lease, e: StoreError) -> Result<TermEnd, StoreError> {
    lease.revoke_in_background();
    Err(e)
}

async fn resign(store: &Store, leader: LeaderKey) {
    if let Err(e) = store.backend().resign(leader).await {
        log_error(
            "resigning leadership failed; revoking the lease instead",
            &e.into(),
        );
    }
}

/// A watch on the leader's own election key that reports its deletion, re-opening the watch
/// when the stream breaks.
struct KeyWatch {
    stream: WatchStream,
}

impl KeyWatch {
    async fn open(store: &Store, fence: &Fence) -> Result<Self, StoreError> {
        Self::open_from(store, fence, fence.revision + 1).await
    }

    async fn open_from(store: &Store, fence: &Fence, from: i64) -> Result<Self, StoreError> {
        let stream = store
            .backend()
            .watch(WatchRequest {
                key: fence.key.clone(),
                start_revision: from,
                ..WatchRequest::default()
            })
            .await?;
        Ok(Self { stream })
    }

    /// Resolves once the key has been deleted; errors when etcd cannot be reached.
    async fn deleted(&mut self, store: &Store, fence: &Fence) -> Result<(), StoreError> {
        loop {
            match self.stream.next().await {
                Some(Ok(response)) if response.canceled => {}
                Some(Ok(response)) => {
                    if response
                        .events
                        .iter()
                        .any(|e| e.event_type == EventType::Delete)
                    {
                        return Ok(());
                    }
                    continue;
                }
                None => {}
                Some(Err(e)) => log_error("watch on the election key broke", &e.into()),
            }
            // The watch ended (compaction, a broken stream): look at the key itself and
            // watch again from there.
            let current = store.backend().range(Range::key(fence.key.clone())).await?;
            let still_ours = current
                .kvs
                .first()
                .is_some_and(|kv| kv.create_revision() == fence.revision);
            if !still_ours {
                return Ok(());
            }
            let from = current.revision + 1;
            *self = Self::open_from(store, fence, from).await?;
        }
    }
}

/// Resolves once [`LeaderElection::resign`] asks the task to stop (or the handle is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await.map(|_| ());
}

fn retry_delays() -> Retry {
    backoff(Duration::from_millis(100), MAX_RETRY_DELAY)
}
