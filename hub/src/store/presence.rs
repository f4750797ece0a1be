//! Which hub replica holds which cluster's stream, at no etcd cost per heartbeat.
//!
//! Each replica keeps ONE lease alive; `connected/<cluster>` keys name the replica and hang
//! on that lease. A replica writes only when a stream opens or closes. When a replica dies
//! its lease expires and all of its clusters' keys vanish together — one event per cluster
//! for the other replicas' watches. When a live replica's lease is lost (a long pause, a
//! partition) it takes a new one and writes its clusters' keys again.
//!
//! A replica that stops on purpose (a rolling restart) hands its clusters over instead of
//! deleting their keys: [`ReplicaPresence::hand_over`] moves each key onto a short lease of
//! its own, a grace covering one reconnect. An agent that reconnects to another replica
//! within it overwrites the key, so its cluster never counts as disconnected and no share
//! moves; one that does not come back loses its key when the grace runs out. A stream that
//! ends because its agent switches to a renewed certificate gets the same grace for its one
//! key ([`ReplicaPresence::mark_reconnecting`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use accord_common::runtime::backoff;
use dashmap::DashMap;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio::sync::RwLock;
use tokio::task::JoinHandle;

use super::lease::Lease;
use super::{Store, StoreError, check_segment, log_error, ttl_seconds};

/// Longest pause between two attempts at re-granting a lost lease.
const MAX_REGRANT_DELAY: Duration = Duration::from_secs(2);
/// Attempts at re-writing a batch of clusters' keys on a new lease.
const REANNOUNCE_ATTEMPTS: usize = 3;
/// Keys re-written per transaction (etcd's default `--max-txn-ops` is 128).
const REANNOUNCE_BATCH: usize = 100;
/// Transactions of re-written keys under way at once.
const REANNOUNCE_CONCURRENCY: usize = 4;
/// How long a stopping replica's clusters (or a cluster whose agent reconnects with a
/// renewed certificate) stay connected for their agents to reconnect to another replica: covers the agent's first reconnect attempts (100 ms, then a backoff
/// with jitter), one that lands on the stopping replica before it leaves its Service, and
/// a TLS handshake. An agent that never comes back counts as disconnected once it passes.
pub const RECONNECT_GRACE: Duration = Duration::from_secs(5);

/// The value of `connected/<cluster>`: who holds the stream and what the agent said in its
/// Hello, so the leader can show it in the ManagedCluster status without asking the agent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ConnectedRecord {
    /// Hub replica holding the stream.
    pub replica: String,
    /// Agent version from Hello.
    pub agent_version: String,
    /// Member cluster's Kubernetes version from Hello.
    pub kubernetes_version: String,
    /// When the stream opened, Unix milliseconds.
    pub connected_unix_millis: i64,
}

/// This replica's presence: its lease and the clusters whose streams it holds.
///
/// Dropping it stops refreshing the lease without revoking it (as a crash would): the keys
/// vanish when the TTL runs out. [`ReplicaPresence::revoke`] removes them at once.
#[derive(Debug)]
pub struct ReplicaPresence {
    shared: Arc<PresenceState>,
    task: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct PresenceState {
    store: Store,
    replica: String,
    lease_id: AtomicI64,
    /// Connected clusters and the exact value written for each.
    clusters: DashMap<String, Vec<u8>>,
    /// Held for reading by single marks, for writing while all keys are re-written on a
    /// new lease, so a disconnect cannot be undone by a concurrent re-write.
    rewrite: RwLock<()>,
    /// Set by [`ReplicaPresence::hand_over`]: the keys now hang on the handover lease and
    /// a stream ending must not delete them.
    handed_over: AtomicBool,
}

impl ReplicaPresence {
    /// Grants this replica's lease (`ttl`) and keeps it alive.
    pub async fn start(store: Store, replica: String, ttl: Duration) -> Result<Self, StoreError> {
        let lease = Lease::grant(&store.lease_connection(), ttl).await?;
        let shared = Arc::new(PresenceState {
            store,
            replica,
            lease_id: AtomicI64::new(lease.id()),
            clusters: DashMap::new(),
            rewrite: RwLock::new(()),
            handed_over: AtomicBool::new(false),
        });
        let task = tokio::spawn(keep_present(shared.clone(), lease, ttl));
        Ok(Self {
            shared,
            task: Some(task),
        })
    }

    /// This replica's name (the value of its `connected/` keys).
    pub fn replica(&self) -> &str {
        &self.shared.replica
    }

    /// The id of the lease the keys currently hang on.
    pub fn lease_id(&self) -> i64 {
        self.shared.lease_id.load(Ordering::Acquire)
    }

    /// Records that this replica holds `cluster`'s stream: `connected/<cluster>` =
    /// `record` (JSON), on the replica's lease.
    ///
    /// The cluster is remembered even when the write fails, and written again whenever the
    /// lease is re-granted; a failed call may simply be retried.
    pub async fn mark_connected(
        &self,
        cluster: &str,
        record: &ConnectedRecord,
    ) -> Result<(), StoreError> {
        check_segment("cluster", cluster)?;
        let value = serde_json::to_vec(record).expect("a ConnectedRecord always serialises");
        self.shared
            .clusters
            .insert(cluster.to_owned(), value.clone());
        let _gate = self.shared.rewrite.read().await;
        self.shared
            .store
            .put_with_lease(
                &self.shared.store.keys().connected(cluster),
                value,
                self.lease_id(),
            )
            .await?;
        Ok(())
    }

    /// Records that this replica no longer holds `cluster`'s stream: deletes
    /// `connected/<cluster>` if it still names this replica (another replica may have
    /// taken the cluster over meanwhile).
    pub async fn mark_disconnected(&self, cluster: &str) -> Result<(), StoreError> {
        check_segment("cluster", cluster)?;
        let Some((_, value)) = self.shared.clusters.remove(cluster) else {
            return Ok(());
        };
        if self.shared.handed_over.load(Ordering::Acquire) {
            // The key waits on the handover lease for the agent to reconnect elsewhere.
            return Ok(());
        }
        let _gate = self.shared.rewrite.read().await;
        self.shared
            .store
            .delete_if_value(&self.shared.store.keys().connected(cluster), &value)
            .await?;
        Ok(())
    }

    /// The replica currently holding `cluster`'s stream, if any.
    pub async fn connected_replica(
        store: &Store,
        cluster: &str,
    ) -> Result<Option<String>, StoreError> {
        check_segment("cluster", cluster)?;
        let response = store
            .client()
            .kv_client()
            .get(store.keys().connected(cluster), None)
            .await?;
        Ok(response
            .kvs()
            .first()
            .and_then(|kv| serde_json::from_slice::<ConnectedRecord>(kv.value()).ok())
            .map(|r| r.replica))
    }

    /// Hands this replica's clusters over before it stops on purpose: every `connected/`
    /// key it wrote moves onto a new lease of `grace` that nobody refreshes, and from now
    /// on a stream that ends leaves its key alone. Each agent then has `grace` to reconnect
    /// to another replica (whose connect overwrites the key) before its cluster counts as
    /// disconnected. A key another replica has taken over meanwhile is left as it is.
    ///
    /// Returns how many keys were handed over. On error (etcd unreachable) the keys stay
    /// on the replica's own lease and vanish when it expires, as after a crash.
    pub async fn hand_over(&self, grace: Duration) -> Result<usize, StoreError> {
        let _gate = self.shared.rewrite.write().await;
        self.shared.handed_over.store(true, Ordering::Release);
        let clusters: Vec<(String, Vec<u8>)> = self
            .shared
            .clusters
            .iter()
            .map(|c| (c.key().clone(), c.value().clone()))
            .collect();
        if clusters.is_empty() {
            return Ok(0);
        }
        let grace_lease = self.grant_grace(grace).await?;
        let mut handed = 0;
        for (cluster, value) in clusters {
            if self.move_to_lease(&cluster, value, grace_lease).await? {
                handed += 1;
            }
        }
        Ok(handed)
    }

    /// Records that `cluster`'s stream on this replica ended because its agent is
    /// reconnecting on purpose (it switches to a renewed certificate): like
    /// [`ReplicaPresence::mark_disconnected`], except that the key moves onto a lease of
    /// `grace` instead of being deleted. The agent's next stream, on any replica,
    /// overwrites it, so the cluster never counts as disconnected and no share moves; an
    /// agent that does not come back loses its key when the grace runs out.
    ///
    /// Returns whether the key was moved (false: it was not this replica's any more).
    pub async fn mark_reconnecting(
        &self,
        cluster: &str,
        grace: Duration,
    ) -> Result<bool, StoreError> {
        check_segment("cluster", cluster)?;
        let Some((_, value)) = self.shared.clusters.remove(cluster) else {
            return Ok(false);
        };
        if self.shared.handed_over.load(Ordering::Acquire) {
            return Ok(false);
        }
        let _gate = self.shared.rewrite.read().await;
        let grace_lease = self.grant_grace(grace).await?;
        self.move_to_lease(cluster, value, grace_lease).await
    }

    /// A new lease of `grace` that nobody refreshes.
    async fn grant_grace(&self, grace: Duration) -> Result<i64, StoreError> {
        let granted = self
            .shared
            .store
            .client()
            .lease_client()
            .grant(ttl_seconds(grace), None)
            .await?;
        Ok(granted.id())
    }

    /// Re-puts `connected/<cluster>` on `lease` if it still holds `value` (the record this
    /// replica wrote); returns whether it did.
    async fn move_to_lease(
        &self,
        cluster: &str,
        value: Vec<u8>,
        lease: i64,
    ) -> Result<bool, StoreError> {
        let key = self.shared.store.keys().connected(cluster);
        let txn = Txn::new()
            .when(vec![Compare::value(
                key.as_str(),
                CompareOp::Equal,
                value.clone(),
            )])
            .and_then(vec![TxnOp::put(
                key.as_str(),
                value,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let response = self.shared.store.client().kv_client().txn(txn).await?;
        Ok(response.succeeded())
    }

    /// Stops and revokes the lease: every `connected/` key of this replica vanishes now.
    pub async fn revoke(mut self) -> Result<(), StoreError> {
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        task.abort();
        let id = self.lease_id();
        // The task owned the lease; revoke it by id.
        match self.shared.store.client().lease_client().revoke(id).await {
            Ok(_) => Ok(()),
            Err(e) if super::lease::is_lease_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

impl Drop for ReplicaPresence {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Waits for the lease to be lost, then takes a new one and re-writes every key.
async fn keep_present(shared: Arc<PresenceState>, mut lease: Lease, ttl: Duration) {
    loop {
        lease.lost().await;
        if shared.handed_over.load(Ordering::Acquire) {
            // Stopping: the keys hang on the handover lease now; re-writing them on a new
            // lease of this replica would outlast the grace.
            return;
        }
        tracing::warn!(
            replica = %shared.replica,
            lease = lease.id(),
            "presence lease lost; re-granting and re-announcing connected clusters"
        );
        let mut delays = backoff(Duration::from_millis(50), MAX_REGRANT_DELAY);
        lease = loop {
            match Lease::grant(&shared.store.lease_connection(), ttl).await {
                Ok(lease) => break lease,
                Err(e) => {
                    log_error("re-granting the presence lease failed", &e);
                    tokio::time::sleep(delays.next_delay()).await;
                }
            }
        };
        let _gate = shared.rewrite.write().await;
        shared.lease_id.store(lease.id(), Ordering::Release);
        let clusters: Vec<(String, Vec<u8>)> = shared
            .clusters
            .iter()
            .map(|c| (c.key().clone(), c.value().clone()))
            .collect();
        // In transactions of REANNOUNCE_BATCH puts, several at once: one put after another
        // held every connect and disconnect behind this gate for minutes with thousands of
        // clusters on a loaded etcd.
        let lease_id = lease.id();
        let shared_ref = &shared;
        futures::stream::iter(clusters.chunks(REANNOUNCE_BATCH))
            .for_each_concurrent(REANNOUNCE_CONCURRENCY, |batch| async move {
                let mut delays = backoff(Duration::from_millis(50), MAX_REGRANT_DELAY);
                for attempt in 1..=REANNOUNCE_ATTEMPTS {
                    match reannounce(&shared_ref.store, batch, lease_id).await {
                        Ok(()) => break,
                        Err(e) if attempt == REANNOUNCE_ATTEMPTS => {
                            log_error("re-announcing connected clusters failed", &e);
                        }
                        Err(_) => tokio::time::sleep(delays.next_delay()).await,
                    }
                }
            })
            .await;
    }
}

/// Puts every `connected/<cluster>` key of `batch` on `lease`, in one transaction.
async fn reannounce(
    store: &Store,
    batch: &[(String, Vec<u8>)],
    lease: i64,
) -> Result<(), StoreError> {
    let puts = batch
        .iter()
        .map(|(cluster, value)| {
            TxnOp::put(
                store.keys().connected(cluster),
                value.clone(),
                Some(PutOptions::new().with_lease(lease)),
            )
        })
        .collect::<Vec<_>>();
    store
        .client()
        .kv_client()
        .txn(Txn::new().and_then(puts))
        .await?;
    Ok(())
}
