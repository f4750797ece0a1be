//! Per-object decision locks (`locks/<kind>/<ns>/<name>`) through etcd's Lock API, each on its own lease: when the holder
//! dies its lease expires and etcd frees the lock.

use std::time::Duration;

use super::kv::{Compare, CompareOp};

use super::lease::Lease;
use super::{Store, StoreError, check_segment};

/// A held scaling lock. Release it with [`PlacementLock::unlock`]; dropping it revokes its
/// lease from a spawned task (best effort — otherwise the lease expires after its TTL).
#[derive(Debug)]
pub struct PlacementLock {
    key: Vec<u8>,
    store: Store,
    lease: Option<Lease>,
}

impl Store {
    /// Waits until this process holds the decision lock of object `kind/ns/name`, on a fresh
    /// lease of `ttl` that is kept alive while the lock is held.
    ///
    /// The wait has no deadline of its own; wrap the call in `tokio::time::timeout` to
    /// bound it. Cancelling the wait leaves the queue (its lease is revoked).
    pub async fn lock_placement(
        &self,
        kind: &str,
        ns: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<PlacementLock, StoreError> {
        check_segment("kind", kind)?;
        check_segment("namespace", ns)?;
        check_segment("name", name)?;
        let lease = Lease::grant(self, ttl).await?;
        // Revokes the lease if this future is dropped while waiting in the queue.
        let mut pending = PlacementLock {
            key: Vec::new(),
            store: self.clone(),
            lease: Some(lease),
        };
        let lease_id = pending.lease_id();
        let name = self.keys().lock(kind, ns, name);
        let backend = self.backend().clone();
        let locked = tokio::select! {
            locked = backend.lock(name.into_bytes(), lease_id) => locked?,
            () = pending.lease().lost() => return Err(StoreError::LeaseLost { lease: lease_id }),
        };
        pending.key = locked;
        Ok(pending)
    }
}

impl PlacementLock {
    /// The lock's key in etcd (`<lock name>/<lease hex>`); it exists exactly while the lock
    /// is held.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The id of the lease the lock hangs on.
    pub fn lease_id(&self) -> i64 {
        self.lease().id()
    }

    /// Whether the lock's lease is known or presumed to be gone; another process may then
    /// hold the lock.
    pub fn is_lost(&self) -> bool {
        self.lease().is_lost()
    }

    /// Resolves once the lock's lease is lost.
    pub async fn lost(&self) {
        self.lease().lost().await;
    }

    /// The etcd comparison that holds while this lock is held. Add it to a transaction
    /// (for example [`Store::fenced_txn`]) whose writes must only apply under the lock.
    pub fn compare(&self) -> Compare {
        Compare::lease(self.key.clone(), CompareOp::Equal, self.lease_id())
    }

    /// Releases the lock: deletes its key and revokes its lease.
    pub async fn unlock(mut self) -> Result<(), StoreError> {
        let lease = self
            .lease
            .take()
            .expect("a PlacementLock always holds its lease");
        let unlocked = self.store.backend().unlock(self.key.clone()).await;
        // Revoking the lease frees the lock as well, so try it even when unlock failed.
        let revoked = lease.revoke().await;
        unlocked?;
        revoked
    }

    /// Releases the lock without waiting: its lease is revoked from a spawned task, which
    /// deletes the lock's key (as dropping it does; this says so where it is meant).
    pub fn release_in_background(self) {
        drop(self);
    }

    fn lease(&self) -> &Lease {
        self.lease
            .as_ref()
            .expect("a PlacementLock always holds its lease")
    }
}

impl Drop for PlacementLock {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            lease.revoke_in_background();
        }
    }
}
