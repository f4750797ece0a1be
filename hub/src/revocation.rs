//! Ends the streams of identities the cluster registry no longer accepts, on every replica.
//!
//! A cluster's certificate is checked against its registry record when its stream opens;
//! this task keeps that check true for as long as the stream lasts. Every replica follows
//! the `clusters/` prefix, and when a record is deleted (`accord-hub cluster revoke`, or a
//! deleted ManagedCluster) or replaced (a `--force` re-registration), each stream this
//! replica holds for that cluster whose certificate key the record no longer
//! [`accepts`](ClusterRecord::accepts) ends with `PERMISSION_DENIED`. The next connect is
//! refused by the same check at the door.
//!
//! The watch event is the fast path (milliseconds after the write). A sweep every
//! [`SWEEP_INTERVAL`] compares every stream with the registry as well, which covers a
//! stream that opened just after the event went by, a lagging subscriber, and a renewed
//! key whose old certificate has since expired. Before ending a stream the task reads the
//! record from etcd itself, so a registry copy that has not yet seen a fresh registration
//! never ends the new identity's stream.

use std::sync::Arc;
use std::time::Duration;

use accord_common::runtime::unix_millis;
use tokio::sync::broadcast::error::RecvError;
use tonic::Status;
use tracing::{debug, info, warn};

use crate::connections::Connection;
use crate::grpc::AgentFacing;
use crate::store::cache::CacheEvent;
use crate::store::error_chain;
use crate::store::registry::ClusterRecord;

/// How often every stream is compared with the registry, besides the watch events.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Why a stream's certificate no longer speaks for its cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The cluster has no registry record: it was revoked (or never joined).
    Revoked,
    /// The record names another key: the cluster was registered again with `--force`.
    Replaced,
    /// The key is the one a renewal replaced, and its certificate has expired.
    Expired,
}

impl Verdict {
    /// The status the stream ends with, worded for the agent's user.
    pub fn status(self, cluster: &str) -> Status {
        Status::permission_denied(match self {
            Self::Revoked => format!(
                "cluster {cluster:?} was revoked on the hub; its certificate is no longer \
                 accepted (join it again with a new bootstrap token)"
            ),
            Self::Replaced => format!(
                "cluster {cluster:?} was registered again with another identity; this \
                 certificate no longer speaks for it"
            ),
            Self::Expired => format!(
                "this certificate for cluster {cluster:?} was renewed and has expired; \
                 reconnect with the renewed one"
            ),
        })
    }

    /// A short label for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Revoked => "revoked",
            Self::Replaced => "replaced",
            Self::Expired => "expired",
        }
    }
}

/// Whether a stream opened with key `spki_sha256` may go on at `now_unix` given the
/// cluster's record: `None` when it may, else why not.
pub fn verdict(
    record: Option<&ClusterRecord>,
    spki_sha256: &str,
    now_unix: i64,
) -> Option<Verdict> {
    let record = match record {
        None => return Some(Verdict::Revoked),
        Some(r) if r.accepts(spki_sha256, now_unix) => return None,
        Some(r) => r,
    };
    let renewed_away = record
        .previous
        .as_ref()
        .is_some_and(|p| p.spki_sha256 == spki_sha256);
    Some(if renewed_away {
        Verdict::Expired
    } else {
        Verdict::Replaced
    })
}

/// The task that ends streams the registry no longer accepts; one per replica.
pub struct Revoker {
    shared: AgentFacing,
}

impl Revoker {
    /// Follows the registry the agent-facing services watch (`shared.registry`).
    pub fn new(shared: AgentFacing) -> Self {
        Self { shared }
    }

    /// Runs until the process ends.
    pub async fn run(self) {
        let mut events = self.shared.registry.subscribe();
        let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Ok(CacheEvent::Put { key, .. } | CacheEvent::Delete { key }) => {
                        if let Some(cluster) = self.cluster_of(&key) {
                            self.check(&cluster).await;
                        }
                    }
                    Err(RecvError::Lagged(_)) => self.check_all().await,
                    // The cache lives in `self`; its sender cannot close while we run.
                    Err(RecvError::Closed) => return,
                },
                _ = sweep.tick() => self.check_all().await,
            }
        }
    }

    fn cluster_of(&self, key: &str) -> Option<String> {
        key.strip_prefix(self.shared.registry.prefix())
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
    }

    async fn check_all(&self) {
        for (cluster, conn) in self.shared.connections.all() {
            self.check_stream(&cluster, &conn).await;
        }
    }

    async fn check(&self, cluster: &str) {
        if let Some(conn) = self.shared.connections.get(cluster) {
            self.check_stream(cluster, &conn).await;
        }
    }

    async fn check_stream(&self, cluster: &str, conn: &Arc<Connection>) {
        if conn.is_ending() {
            return;
        }
        let key = self.shared.store.keys().cluster(cluster);
        let cached = self.shared.registry.get(&key).map(|(record, _)| record);
        if verdict(cached.as_ref(), &conn.spki_sha256, now_unix()).is_none() {
            return;
        }
        // The copy may lag a registration that just happened (the agent connected with its
        // new certificate before this replica's watch delivered the record): etcd decides.
        let verdict = match self.shared.store.get_cluster(cluster).await {
            Ok(fresh) => verdict(fresh.as_ref(), &conn.spki_sha256, now_unix()),
            Err(e) => {
                // What the copy saw was written to etcd, so it is not a guess; a revoked
                // identity must not outlive a store outage.
                self.shared.metrics.error(e.kind());
                warn!(cluster, error = %error_chain(&e), "could not confirm a revocation in etcd; going by the watched registry");
                verdict(cached.as_ref(), &conn.spki_sha256, now_unix())
            }
        };
        let Some(verdict) = verdict else {
            debug!(
                cluster,
                "the watched registry lags etcd; the stream's key is accepted"
            );
            return;
        };
        if conn.end(verdict.status(cluster)) {
            self.shared.metrics.stream_revoked(verdict.as_str());
            info!(
                cluster,
                reason = verdict.as_str(),
                "ended a stream whose certificate the cluster registry no longer accepts"
            );
        }
    }
}

fn now_unix() -> i64 {
    unix_millis() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::registry::PreviousKey;
    use std::collections::BTreeMap;

    fn record(key: &str, previous: Option<(&str, i64)>) -> ClusterRecord {
        ClusterRecord {
            name: "east".into(),
            spki_sha256: key.into(),
            labels: BTreeMap::new(),
            registered_unix: 0,
            previous: previous.map(|(k, not_after)| PreviousKey {
                spki_sha256: k.into(),
                not_after_unix: not_after,
            }),
        }
    }

    #[test]
    fn a_stream_whose_record_is_gone_is_revoked() {
        assert_eq!(verdict(None, "k", 0), Some(Verdict::Revoked));
    }

    #[test]
    fn a_stream_with_the_current_key_goes_on() {
        assert_eq!(verdict(Some(&record("k", None)), "k", 0), None);
    }

    #[test]
    fn a_stream_whose_key_was_replaced_by_a_forced_registration_ends() {
        assert_eq!(
            verdict(Some(&record("new", None)), "old", 0),
            Some(Verdict::Replaced)
        );
    }

    #[test]
    fn a_renewed_key_goes_on_until_its_certificate_expires_then_ends() {
        let r = record("new", Some(("old", 100)));
        assert_eq!(verdict(Some(&r), "old", 99), None);
        assert_eq!(verdict(Some(&r), "old", 100), Some(Verdict::Expired));
        assert_eq!(verdict(Some(&r), "other", 99), Some(Verdict::Replaced));
    }

    #[test]
    fn every_verdict_ends_the_stream_with_permission_denied_naming_the_cluster() {
        for v in [Verdict::Revoked, Verdict::Replaced, Verdict::Expired] {
            let status = v.status("east");
            assert_eq!(status.code(), tonic::Code::PermissionDenied);
            assert!(
                status.message().contains("\"east\""),
                "{}",
                status.message()
            );
        }
    }
}
