//! etcd leases kept alive by a background task, with a signal for when one is lost.
//!
//! Leader election, scaling locks and replica presence all hang keys on a lease: while the
//! process lives the task refreshes it; when the process dies the refreshes stop, the lease
//! expires and etcd deletes its keys. A lease counts as lost as soon as etcd says it is
//! gone, or when no refresh got through before its deadline — the process then must assume
//! that etcd already expired it.

use std::sync::Arc;
use std::time::Duration;

use accord_common::runtime::{Retry, backoff};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::kv::{Backend, KeepAlive};
use super::{Store, StoreError, error_chain, ttl_seconds};

/// Shortest pause between two refreshes.
const MIN_REFRESH_INTERVAL: Duration = Duration::from_millis(100);

/// A lease kept alive until it is revoked or this value is dropped.
///
/// Dropping it stops the refreshes without revoking the lease, as a crash would: its keys
/// stay until the TTL runs out. Call [`Lease::revoke`] to release them at once.
pub struct Lease {
    id: i64,
    ttl: Duration,
    lost: watch::Receiver<bool>,
    backend: Arc<dyn Backend>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("id", &format_args!("{:x}", self.id))
            .field("ttl", &self.ttl)
            .field("lost", &*self.lost.borrow())
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// Grants a lease of `ttl` (rounded up to whole seconds; etcd may raise it to its own
    /// minimum) and starts keeping it alive.
    pub async fn grant(store: &Store, ttl: Duration) -> Result<Self, StoreError> {
        let backend = store.backend().clone();
        let asked_at = Instant::now();
        let (id, granted) = backend.grant(ttl_seconds(ttl)).await?;
        let ttl = Duration::from_secs(u64::try_from(granted).unwrap_or(1));
        let (lost_tx, lost) = watch::channel(false);
        let task = tokio::spawn(keep_alive(
            backend.clone(),
            id,
            ttl,
            asked_at + ttl,
            lost_tx,
        ));
        Ok(Self {
            id,
            ttl,
            lost,
            backend,
            task,
        })
    }

    /// The lease id.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The TTL etcd granted.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Whether the lease is known or presumed to be gone.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Resolves once the lease is lost.
    pub async fn lost(&self) {
        let mut lost = self.lost.clone();
        // An error means the keepalive task ended, which it only does once the lease is lost
        // (or the task was aborted because this value is being dropped).
        let _ = lost.wait_for(|lost| *lost).await;
    }

    /// Stops refreshing and revokes the lease, deleting every key attached to it.
    pub async fn revoke(self) -> Result<(), StoreError> {
        self.task.abort();
        match self.backend.revoke(self.id).await {
            Ok(_) => Ok(()),
            Err(e) if is_lease_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Stops refreshing and revokes the lease from a spawned task, for `Drop` impls that
    /// cannot wait. Does nothing outside a Tokio runtime (the lease then simply expires).
    pub(crate) fn revoke_in_background(&self) {
        self.task.abort();
        let id = self.id;
        let backend = self.backend.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = backend.revoke(id).await
                    && !is_lease_not_found(&e)
                {
                    tracing::debug!(lease = id, error = %error_chain(&e), "revoking lease failed; it expires by itself");
                }
            });
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether etcd answered that the lease does not exist (expired or revoked).
pub(crate) fn is_lease_not_found(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => status.message().contains("lease not found"),
        etcd_client::Error::LeaseKeepAliveError(message) => message.contains("lease not found"),
        _ => false,
    }
}

/// Refreshes lease `id` until it is lost; then flips `lost` to `true`.
async fn keep_alive(
    leases: Arc<dyn Backend>,
    id: i64,
    ttl: Duration,
    mut deadline: Instant,
    lost: watch::Sender<bool>,
) {
    let interval = (ttl / 3).max(MIN_REFRESH_INTERVAL);
    let mut reconnect_delays = reconnect_backoff(interval);
    'reconnect: loop {
        let opened_at = Instant::now();
        let opened = tokio::time::timeout_at(deadline, leases.keep_alive(id)).await;
        let mut keeper = match opened {
            Err(_elapsed) => break 'reconnect,
            Ok(Ok(keeper)) => {
                // Opening the stream sent a refresh that etcd accepted.
                deadline = opened_at + ttl;
                reconnect_delays = reconnect_backoff(interval);
                keeper
            }
            Ok(Err(e)) if is_lease_not_found(&e) => break 'reconnect,
            Ok(Err(e)) => {
                tracing::debug!(lease = id, error = %error_chain(&e), "lease keepalive stream failed to open");
                let delay = reconnect_delays.next_delay();
                if Instant::now() + delay >= deadline {
                    tokio::time::sleep_until(deadline).await;
                    break 'reconnect;
                }
                tokio::time::sleep(delay).await;
                continue 'reconnect;
            }
        };
        loop {
            tokio::time::sleep(interval).await;
            match refresh(keeper.as_mut(), deadline).await {
                Refresh::Renewed { sent_at, ttl } => deadline = sent_at + ttl,
                Refresh::Gone => break 'reconnect,
                Refresh::Failed(reason) => {
                    tracing::debug!(lease = id, %reason, "lease keepalive failed; reopening");
                    if Instant::now() >= deadline {
                        break 'reconnect;
                    }
                    continue 'reconnect;
                }
            }
        }
    }
    tracing::info!(lease = id, "etcd lease lost");
    let _ = lost.send(true);
}

/// What one refresh attempt found.
enum Refresh {
    /// etcd renewed the lease for `ttl` from `sent_at`.
    Renewed { sent_at: Instant, ttl: Duration },
    /// etcd says the lease no longer exists.
    Gone,
    /// The stream broke or no answer came before the deadline.
    Failed(String),
}

async fn refresh(keeper: &mut dyn KeepAlive, deadline: Instant) -> Refresh {
    let sent_at = Instant::now();
    match tokio::time::timeout_at(deadline, keeper.refresh()).await {
        Err(_elapsed) => Refresh::Failed("no keepalive answer before the lease deadline".into()),
        Ok(Err(e)) => Refresh::Failed(error_chain(&e)),
        Ok(Ok(ttl)) if ttl <= 0 => Refresh::Gone,
        Ok(Ok(ttl)) => Refresh::Renewed {
            sent_at,
            ttl: Duration::from_secs(u64::try_from(ttl).unwrap_or(0)),
        },
    }
}

fn reconnect_backoff(max: Duration) -> Retry {
    backoff(Duration::from_millis(50), max)
}
