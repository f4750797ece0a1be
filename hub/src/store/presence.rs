//! Which hub replica holds which cluster's stream, at no etcd cost per heartbeat.
//!
//! Each replica keeps a few leases alive, one per shard of its clusters ([`SHARDS`], by a
//! hash of the cluster's name); `connected/<cluster>` keys name the replica and hang on
//! their shard's lease. A replica writes only when a stream opens or closes. When a replica
//! dies its leases expire and all of its clusters' keys vanish together — one event per
//! cluster for the other replicas' watches. When a live replica's lease is lost (a long
//! pause, a partition) it takes a new one and writes that shard's keys again.
//!
//! Why shards and not one lease: with authentication on, etcd checks a non-root user's
//! right to every key already on a lease before it attaches another one, so each connect
//! cost a check per connected cluster — at 10,000 clusters on one lease a connect storm
//! took etcd minutes of applies and lost every lease (docs/benchmarks.md).
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

use super::kv::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use accord_common::runtime::backoff;
use dashmap::DashMap;
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio::sync::RwLock;
use tokio::task::JoinHandle;

use super::lease::Lease;
use super::{Store, StoreError, check_segment, log_error, ttl_seconds};

/// Leases per replica; a shard's lease holds about 1/SHARDS of the replica's clusters.
pub const SHARDS: usize = 64;
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

/// This replica's presence: its leases and the clusters whose streams it holds.
///
/// Dropping it stops refreshing the leases without revoking them (as a crash would): the
/// keys vanish when the TTL runs out. [`ReplicaPresence::revoke`] removes them at once.
#[derive(Debug)]
pub struct ReplicaPresence {
    shared: Arc<PresenceState>,
    /// One keepalive task per shard.
    tasks: Vec<JoinHandle<()>>,
}

#[derive(Debug)]
struct PresenceState {
    store: Store,
    replica: String,
    shards: Vec<Shard>,
    /// Connected clusters and the exact value written for each.
    clusters: DashMap<String, Vec<u8>>,
    /// Set by [`ReplicaPresence::hand_over`]: the keys now hang on the handover leases and
    /// a stream ending must not delete them.
    handed_over: AtomicBool,
}

/// One shard of a replica's clusters: the lease their keys hang on.
#[derive(Debug)]
struct Shard {
    lease_id: AtomicI64,
    /// Held for reading by single marks, for writing while the shard's keys are re-written
    /// on a new lease, so a disconnect cannot be undone by a concurrent re-write.
    rewrite: RwLock<()>,
}

/// The shard of `cluster` (a stable hash of its name).
fn shard_of(cluster: &str) -> usize {
    // FNV-1a: stable across processes and versions, unlike std's hasher.
    let hash = cluster.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    usize::try_from(hash % SHARDS as u64).unwrap_or_default()
}

impl ReplicaPresence {
    /// Grants this replica's leases (`ttl`) and keeps them alive.
    pub async fn start(store: Store, replica: String, ttl: Duration) -> Result<Self, StoreError> {
        let leases: Vec<Lease> =
            futures::future::try_join_all((0..SHARDS).map(|_| Lease::grant(&store, ttl))).await?;
        let shared = Arc::new(PresenceState {
            store,
            replica,
            shards: leases
                .iter()
                .map(|l| Shard {
                    lease_id: AtomicI64::new(l.id()),
                    rewrite: RwLock::new(()),
                })
                .collect(),
            clusters: DashMap::new(),
            handed_over: AtomicBool::new(false),
        });
        let tasks = leases
            .into_iter()
            .enumerate()
            .map(|(shard, lease)| tokio::spawn(keep_present(shared.clone(), shard, lease, ttl)))
            .collect();
        Ok(Self { shared, tasks })
    }

    /// This replica's name (the value of its `connected/` keys).
    pub fn replica(&self) -> &str {
        &self.shared.replica
    }

    /// The id of the lease `cluster`'s key hangs on (its shard's).
    pub fn lease_of(&self, cluster: &str) -> i64 {
        self.shared.shards[shard_of(cluster)]
            .lease_id
            .load(Ordering::Acquire)
    }

    /// The ids of every lease of this replica, one per shard.
    pub fn leases(&self) -> Vec<i64> {
        self.shared
            .shards
            .iter()
            .map(|s| s.lease_id.load(Ordering::Acquire))
            .collect()
    }

    /// Records that this replica holds `cluster`'s stream: `connected/<cluster>` =
    /// `record` (JSON), on its shard's lease.
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
        let _gate = self.shared.shards[shard_of(cluster)].rewrite.read().await;
        self.shared
            .store
            .put_with_lease(
                &self.shared.store.keys().connected(cluster),
                value,
                self.lease_of(cluster),
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
        let _gate = self.shared.shards[shard_of(cluster)].rewrite.read().await;
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
        Ok(store
            .get(store.keys().connected(cluster))
            .await?
            .and_then(|kv| serde_json::from_slice::<ConnectedRecord>(kv.value()).ok())
            .map(|r| r.replica))
    }

    /// Hands this replica's clusters over before it stops on purpose: every `connected/`
    /// key it wrote moves onto a new lease of `grace` that nobody refreshes (one per shard,
    /// for the reason shards exist), and from now
    /// on a stream that ends leaves its key alone. Each agent then has `grace` to reconnect
    /// to another replica (whose connect overwrites the key) before its cluster counts as
    /// disconnected. A key another replica has taken over meanwhile is left as it is.
    ///
    /// Returns how many keys were handed over. On error (etcd unreachable) the keys stay
    /// on the replica's own lease and vanish when it expires, as after a crash.
    pub async fn hand_over(&self, grace: Duration) -> Result<usize, StoreError> {
        let mut gates = Vec::with_capacity(SHARDS);
        for shard in &self.shared.shards {
            gates.push(shard.rewrite.write().await);
        }
        self.shared.handed_over.store(true, Ordering::Release);
        let mut by_shard: Vec<Vec<(String, Vec<u8>)>> = vec![Vec::new(); SHARDS];
        for c in self.shared.clusters.iter() {
            by_shard[shard_of(c.key())].push((c.key().clone(), c.value().clone()));
        }
        let mut handed = 0;
        for clusters in by_shard.into_iter().filter(|c| !c.is_empty()) {
            let grace_lease = self.grant_grace(grace).await?;
            for (cluster, value) in clusters {
                if self.move_to_lease(&cluster, value, grace_lease).await? {
                    handed += 1;
                }
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
        let _gate = self.shared.shards[shard_of(cluster)].rewrite.read().await;
        let grace_lease = self.grant_grace(grace).await?;
        self.move_to_lease(cluster, value, grace_lease).await
    }

    /// A new lease of `grace` that nobody refreshes.
    async fn grant_grace(&self, grace: Duration) -> Result<i64, StoreError> {
        let (granted, _) = self
            .shared
            .store
            .backend()
            .grant(ttl_seconds(grace))
            .await?;
        Ok(granted)
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
        let response = self.shared.store.txn(txn).await?;
        Ok(response.succeeded())
    }

    /// Stops and revokes the leases: every `connected/` key of this replica vanishes now.
    pub async fn revoke(mut self) -> Result<(), StoreError> {
        for task in self.tasks.drain(..) {
            task.abort();
        }
        // The tasks owned the leases; revoke them by id.
        let backend = self.shared.store.backend();
        for id in self.leases() {
            match backend.revoke(id).await {
                Ok(_) => {}
                Err(e) if super::lease::is_lease_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

impl Drop for ReplicaPresence {
    fn drop(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

/// Waits for shard `shard`'s lease to be lost, then takes a new one and re-writes the
/// shard's keys.
async fn keep_present(shared: Arc<PresenceState>, shard: usize, mut lease: Lease, ttl: Duration) {
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
            match Lease::grant(&shared.store, ttl).await {
                Ok(lease) => break lease,
                Err(e) => {
                    log_error("re-granting the presence lease failed", &e);
                    tokio::time::sleep(delays.next_delay()).await;
                }
            }
        };
        let _gate = shared.shards[shard].rewrite.write().await;
        shared.shards[shard]
            .lease_id
            .store(lease.id(), Ordering::Release);
        let clusters: Vec<(String, Vec<u8>)> = shared
            .clusters
            .iter()
            .filter(|c| shard_of(c.key()) == shard)
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
    store.txn(Txn::new().and_then(puts)).await?;
    Ok(())
}
