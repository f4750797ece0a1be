//! The agent streams this hub replica holds, and their liveness.
//!
//! Liveness lives in memory: a heartbeat only stamps an atomic. A sweeper closes streams
//! whose last heartbeat is older than the timeout, and the connect/disconnect edges are the
//! only etcd writes (`connected/<cluster>` on this replica's lease), so 10,000 agents
//! heartbeating every second cost etcd nothing.
//!
//! Each stream remembers the certificate key it was opened with, so that a registry change
//! (a revoke, a `--force` re-registration) can end exactly the streams whose key the record
//! no longer accepts ([`crate::revocation`]).

use accord_proto::v1::HubMessage;
use dashmap::DashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tonic::Status;

/// Sender half of a stream's outgoing messages.
pub type Outbox = mpsc::Sender<Result<HubMessage, Status>>;

/// One agent stream.
pub struct Connection {
    /// Unique id of this stream (a cluster that reconnects gets a new one).
    pub id: u64,
    /// Messages to the agent.
    pub outbox: Outbox,
    started: Instant,
    /// Milliseconds since `started` of the last heartbeat (or any message).
    last_seen_ms: AtomicU64,
    /// Highest assignment revision the agent acknowledged.
    pub acked_revision: AtomicI64,
    /// Hex SHA-256 of the public key of the client certificate the stream was opened with.
    pub spki_sha256: String,
    /// Set once when the hub ends the stream (see [`Connection::end`]).
    ending: watch::Sender<Option<Status>>,
    /// The agent fell behind: its outbox was full when an assignment change came, and
    /// the changes since are not queued; the full set follows once it has room.
    pub behind: AtomicBool,
}

/// `last_seen_ms` of a stream being set up: it cannot be silent yet.
const SETTING_UP: u64 = u64::MAX;

impl Connection {
    /// Records that the agent is alive (the first call also ends the stream's set-up).
    pub fn touch(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_seen_ms.store(ms, Ordering::Relaxed);
    }

    /// Time since the agent was last heard from; zero while the stream is being set up
    /// (the hub is recording it, not yet reading what the agent sends).
    pub fn silence(&self, now: Instant) -> Duration {
        if self.last_seen_ms.load(Ordering::Relaxed) == SETTING_UP {
            return Duration::ZERO;
        }
        let last = self.started + Duration::from_millis(self.last_seen_ms.load(Ordering::Relaxed));
        now.saturating_duration_since(last)
    }

    /// Ends the stream with `status`: the session stops reading the agent's messages and
    /// sends `status` as the stream's end. Only the first call counts; returns whether this
    /// one did.
    pub fn end(&self, status: Status) -> bool {
        self.ending.send_if_modified(|ending| {
            if ending.is_some() {
                return false;
            }
            *ending = Some(status);
            true
        })
    }

    /// Whether [`Connection::end`] was called.
    pub fn is_ending(&self) -> bool {
        self.ending.borrow().is_some()
    }

    /// Waits until [`Connection::end`] is called and returns its status.
    pub async fn ended(&self) -> Status {
        let mut ending = self.ending.subscribe();
        // The sender lives in `self`, so the wait cannot fail while `self` is borrowed.
        let status = ending
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|status| status.clone());
        match status {
            Some(status) => status,
            None => std::future::pending().await,
        }
    }
}

/// All streams of this replica, by cluster name.
#[derive(Clone, Default)]
pub struct Connections {
    by_cluster: Arc<DashMap<String, Arc<Connection>>>,
    next_id: Arc<AtomicU64>,
}

impl Connections {
    /// Registers a new stream for `cluster`, opened with a client certificate whose key
    /// hashes to `spki_sha256`, returning it and the stream it replaced (an agent that
    /// reconnected before its old stream was noticed dead).
    pub fn open(
        &self,
        cluster: &str,
        spki_sha256: &str,
        outbox: Outbox,
    ) -> (Arc<Connection>, Option<Arc<Connection>>) {
        let conn = Arc::new(Connection {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            outbox,
            started: Instant::now(),
            last_seen_ms: AtomicU64::new(SETTING_UP),
            acked_revision: AtomicI64::new(0),
            spki_sha256: spki_sha256.to_owned(),
            ending: watch::Sender::new(None),
            behind: AtomicBool::new(false),
        });
        let old = self.by_cluster.insert(cluster.to_owned(), conn.clone());
        (conn, old)
    }

    /// Removes `cluster`'s stream if it is still the one with `id`; true when removed.
    pub fn close(&self, cluster: &str, id: u64) -> bool {
        self.by_cluster
            .remove_if(cluster, |_, c| c.id == id)
            .is_some()
    }

    /// Whether this replica holds a stream of `cluster`.
    pub fn holds(&self, cluster: &str) -> bool {
        self.by_cluster.contains_key(cluster)
    }

    /// The stream of `cluster`, if connected here.
    pub fn get(&self, cluster: &str) -> Option<Arc<Connection>> {
        self.by_cluster.get(cluster).map(|c| c.clone())
    }

    /// Number of open streams.
    pub fn len(&self) -> usize {
        self.by_cluster.len()
    }

    /// True when no stream is open.
    pub fn is_empty(&self) -> bool {
        self.by_cluster.is_empty()
    }

    /// Streams silent for longer than `timeout`, as (cluster, stream id).
    pub fn silent(&self, timeout: Duration) -> Vec<(String, u64)> {
        let now = Instant::now();
        self.by_cluster
            .iter()
            .filter(|e| e.value().silence(now) > timeout)
            .map(|e| (e.key().clone(), e.value().id))
            .collect()
    }

    /// Every connected cluster with its stream.
    pub fn all(&self) -> Vec<(String, Arc<Connection>)> {
        self.by_cluster
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reconnect_replaces_the_old_stream_and_the_old_close_is_ignored() {
        let conns = Connections::default();
        let (tx, _rx) = mpsc::channel(1);
        let (first, _) = conns.open("a", "k1", tx.clone());
        let (second, replaced) = conns.open("a", "k2", tx);
        assert_eq!(replaced.unwrap().id, first.id);
        assert!(
            !conns.close("a", first.id),
            "the stale stream must not remove the new one"
        );
        assert_eq!(conns.get("a").unwrap().id, second.id);
        assert!(conns.close("a", second.id));
        assert!(conns.is_empty());
    }

    #[test]
    fn only_streams_silent_past_the_timeout_are_reported() {
        let conns = Connections::default();
        let (tx, _rx) = mpsc::channel(1);
        let (c, _) = conns.open("a", "k", tx);
        c.touch();
        assert!(conns.silent(Duration::from_secs(3)).is_empty());
        assert_eq!(conns.silent(Duration::ZERO).len(), 1);
    }

    #[test]
    fn a_stream_being_set_up_is_never_silent_and_counts_from_its_first_touch() {
        let conns = Connections::default();
        let (tx, _rx) = mpsc::channel(1);
        let (c, _) = conns.open("a", "k", tx);
        assert!(
            conns.silent(Duration::ZERO).is_empty(),
            "still being set up"
        );
        assert_eq!(
            c.silence(Instant::now() + Duration::from_secs(60)),
            Duration::ZERO
        );
        c.touch();
        assert_eq!(conns.silent(Duration::ZERO).len(), 1);
        assert!(c.silence(Instant::now() + Duration::from_secs(60)) >= Duration::from_secs(60));
    }

    #[test]
    fn a_stream_remembers_the_key_it_was_opened_with() {
        let conns = Connections::default();
        let (tx, _rx) = mpsc::channel(1);
        let (c, _) = conns.open("a", "abc123", tx);
        assert_eq!(conns.get("a").unwrap().spki_sha256, "abc123");
        assert_eq!(c.spki_sha256, "abc123");
    }

    #[tokio::test]
    async fn only_the_first_end_counts_and_a_waiting_session_sees_it() {
        let conns = Connections::default();
        let (tx, _rx) = mpsc::channel(1);
        let (c, _) = conns.open("a", "k", tx);
        assert!(!c.is_ending());
        let waiter = tokio::spawn({
            let c = c.clone();
            async move { c.ended().await }
        });
        assert!(c.end(Status::permission_denied("revoked")));
        assert!(!c.end(Status::aborted("later")));
        assert!(c.is_ending());
        let status = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiting session was woken")
            .unwrap();
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        // A session that starts waiting after the end still sees it.
        assert_eq!(c.ended().await.message(), "revoked");
    }
}
