//! Which hub replica holds which cluster's stream, at no etcd cost per heartbeat.
//!
//! Each replica keeps ONE lease alive; `connected/<cluster>` keys name the replica and hang
//! on that lease. A replica writes only when a stream opens or closes. When a replica dies
//! its lease expires and all of its clusters' keys vanish together — one event per cluster
//! for the other replicas' watches. When a live replica's lease is lost (a long pause, a
//! partition) it takes a new one and writes its clusters' keys again.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use accord_common::runtime::backoff;
use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use tokio::sync::RwLock;
use tokio::task::JoinHandle;

use super::lease::Lease;
use super::{Store, StoreError, check_segment, log_error};

/// Longest pause between two attempts at re-granting a lost lease.
const MAX_REGRANT_DELAY: Duration = Duration::from_secs(2);
/// Attempts at re-writing one cluster's key on a new lease.
const REANNOUNCE_ATTEMPTS: usize = 3;

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
}

impl ReplicaPresence {
    /// Grants this replica's lease (`ttl`) and keeps it alive.
    pub async fn start(store: Store, replica: String, ttl: Duration) -> Result<Self, StoreError> {
        let lease = Lease::grant(&store.client(), ttl).await?;
        let shared = Arc::new(PresenceState {
            store,
            replica,
            lease_id: AtomicI64::new(lease.id()),
            clusters: DashMap::new(),
            rewrite: RwLock::new(()),
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
        tracing::warn!(
            replica = %shared.replica,
            lease = lease.id(),
            "presence lease lost; re-granting and re-announcing connected clusters"
        );
        let mut delays = backoff(Duration::from_millis(50), MAX_REGRANT_DELAY);
        lease = loop {
            match Lease::grant(&shared.store.client(), ttl).await {
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
        for (cluster, value) in clusters {
            let key = shared.store.keys().connected(&cluster);
            for attempt in 1..=REANNOUNCE_ATTEMPTS {
                match shared
                    .store
                    .put_with_lease(&key, value.clone(), lease.id())
                    .await
                {
                    Ok(_) => break,
                    Err(e) if attempt == REANNOUNCE_ATTEMPTS => {
                        log_error("re-announcing a connected cluster failed", &e);
                    }
                    Err(_) => {
                        tokio::time::sleep(delays.next_delay()).await;
                    }
                }
            }
        }
    }
}
