//! The hub's state in etcd: keyspace, leader election with fencing, per-object locks,
//! optimistic-concurrency status records, bootstrap tokens, the cluster registry, replica
//! presence and watch-fed caches.
//!
//! Every value is JSON. Every key lives under the [`Keyspace`] prefix, so several hubs (or
//! a hub and its tests) can share one etcd.

mod batch;
pub mod cache;
pub mod capacity;
pub mod connection;
pub mod election;
pub mod epoch;
pub mod etcd;
pub mod health;
pub mod keys;
pub mod kv;
pub mod lease;
pub mod lock;
pub mod members;
pub mod memory;
pub mod presence;
pub mod registry;
pub mod reported;
pub mod status;
pub mod tokens;

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use cache::{CacheEvent, PrefixCache};
pub use connection::{
    ConnectFailure, ConnectionError, EtcdConnection, EtcdFiles, EtcdTls, EtcdUser,
};
pub use election::{Fence, LeaderElection};
pub use etcd::EtcdBackend;
pub use keys::Keyspace;
pub use kv::{
    Backend, Compare, CompareOp, KeyValue, PutOptions, Range, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
pub use lease::Lease;
pub use lock::PlacementLock;
pub use memory::MemoryBackend;
pub use presence::ReplicaPresence;
pub use registry::ClusterRecord;
pub use status::{Refusal, ReportOrder, StatusRecord, WriteOutcome};
pub use tokens::{BootstrapToken, TokenError, TokenRecord};

/// How long establishing a connection to an etcd endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 keepalive ping interval and timeout: a dead etcd connection is noticed within
/// seconds even while a call (a campaign, a lock, a watch) is blocked on it.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(3);

/// Errors of the etcd store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A write carried a leader [`Fence`] whose election key is gone or was re-created: the
    /// replica that made it is no longer the leader, so the write was not applied.
    #[error("write refused: this hub replica is no longer the leader")]
    Fenced,
    /// etcd refused a request or could not be reached.
    #[error("etcd request failed")]
    Etcd(#[source] etcd_client::Error),
    /// A stored value is not valid JSON for the type expected under its key.
    #[error("the value stored at {key} could not be decoded")]
    Decode {
        /// The key whose value is malformed.
        key: String,
        /// What the JSON decoder said.
        #[source]
        source: serde_json::Error,
    },
    /// A value could not be encoded as JSON.
    #[error("a value could not be encoded as JSON")]
    Encode(#[source] serde_json::Error),
    /// A lease this store relied on expired or was revoked (its keys are gone).
    #[error("etcd lease {lease:x} expired or was revoked")]
    LeaseLost {
        /// The lease's id.
        lease: i64,
    },
    /// A name used as a key segment is empty or contains `/`, which would escape its
    /// place in the keyspace.
    #[error("invalid {what} {value:?}: must be non-empty and must not contain '/'")]
    InvalidName {
        /// What the name is (cluster, kind, namespace, ...).
        what: &'static str,
        /// The offending name.
        value: String,
    },
    /// No etcd endpoint was given.
    #[error("no etcd endpoint given")]
    NoEndpoints,
    /// The etcd connection settings are unusable (a file missing, flags that do not fit).
    #[error("etcd connection settings")]
    Settings(#[from] ConnectionError),
    /// etcd refused the connection or could not be reached; the message names the
    /// endpoints and the cause, never the password.
    #[error("etcd at {endpoints}: {failure}")]
    Connect {
        /// The endpoints tried, comma-separated.
        endpoints: String,
        /// The cause, classified.
        failure: ConnectFailure,
        /// What etcd-client said.
        #[source]
        source: etcd_client::Error,
    },
    /// etcd answered in a way the store does not expect (a missing response part).
    #[error("unexpected etcd response: {0}")]
    Unexpected(String),
}

impl StoreError {
    /// A short, stable category for metric labels and Kubernetes events.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Fenced => "fenced",
            StoreError::Etcd(_) => "etcd",
            StoreError::Decode { .. } => "decode",
            StoreError::Encode(_) => "encode",
            StoreError::LeaseLost { .. } => "lease_lost",
            StoreError::InvalidName { .. } => "invalid_name",
            StoreError::NoEndpoints => "no_endpoints",
            StoreError::Settings(_) => "settings",
            StoreError::Connect { .. } => "connect",
            StoreError::Unexpected(_) => "unexpected",
        }
    }

    /// Whether retrying the same call later may succeed (etcd unreachable, a lease that
    /// can be re-granted); `false` for errors that repeat until something else changes.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Etcd(_) | StoreError::LeaseLost { .. } | StoreError::Unexpected(_)
        )
    }
}

impl From<etcd_client::Error> for StoreError {
    fn from(e: etcd_client::Error) -> Self {
        StoreError::Etcd(e)
    }
}

pub use accord_common::runtime::error_chain;

/// Checks that `value` can be one segment of a key.
pub(crate) fn check_segment(what: &'static str, value: &str) -> Result<(), StoreError> {
    if value.is_empty() || value.contains('/') {
        return Err(StoreError::InvalidName {
            what,
            value: value.to_owned(),
        });
    }
    Ok(())
}

/// Decodes the JSON value of `kv`, compressed or not (see [`encode_large`]).
pub(crate) fn decode<T: DeserializeOwned>(kv: &KeyValue) -> Result<T, StoreError> {
    decode_value(kv.key(), kv.value())
}

/// Decodes `value` (stored at `key`) as [`decode`] does.
fn decode_value<T: DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T, StoreError> {
    let key = || String::from_utf8_lossy(key).into_owned();
    if !accord_common::compress::is_gzip(value) {
        return serde_json::from_slice(value)
            .map_err(|source| StoreError::Decode { key: key(), source });
    }
    let json = accord_common::compress::gunzip(value).map_err(|e| StoreError::Decode {
        key: key(),
        source: serde::de::Error::custom(format!("a compressed value does not inflate: {e}")),
    })?;
    serde_json::from_slice(&json).map_err(|source| StoreError::Decode { key: key(), source })
}

/// Encodes `value` as JSON.
pub(crate) fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(StoreError::Encode)
}

/// Values longer than this are stored compressed by [`encode_large`].
pub const COMPRESS_ABOVE_BYTES: usize = 64 * 1024;

/// Encodes `value` as JSON, gzip-compressed when longer than [`COMPRESS_ABOVE_BYTES`].
///
/// For the one record a placement keeps per object: with every cluster of a fleet in it,
/// its JSON passes etcd's request limit (1.5 MiB by default) at about 12,000 clusters, and
/// shares that differ only in the cluster's name compress to a few bytes each. One key
/// keeps the decision all-or-nothing for every reader. [`decode`] reads both forms.
pub fn encode_large<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, StoreError> {
    let json = encode(value)?;
    if json.len() <= COMPRESS_ABOVE_BYTES {
        return Ok(json);
    }
    accord_common::compress::gzip(&json)
        .map_err(|e| StoreError::Encode(serde::ser::Error::custom(e)))
}

/// Which batcher a batched write goes through: reports and leased writes never share a
/// transaction (a lost lease fails every write of its transaction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// The agents' status reports.
    Reports = 0,
    /// Writes hung on a lease (`connected/` keys).
    Leased = 1,
}

/// Keys a listing asks etcd for at once (see [`Store::list_prefix`]).
pub const LIST_PAGE_KEYS: i64 = 1000;

/// Seconds of a TTL as etcd leases take them: rounded up, at least one.
pub(crate) fn ttl_seconds(ttl: Duration) -> i64 {
    let millis = ttl.as_millis().max(1);
    i64::try_from(millis.div_ceil(1000)).unwrap_or(i64::MAX)
}

/// The hub's handle on etcd: a [`Backend`] (etcd, or memory in tests) and the keyspace it
/// works in. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
    /// The same backend when it is etcd's, for its member rotation (see [`members`]).
    etcd: Option<EtcdBackend>,
    keys: Keyspace,
    /// The endpoints connected to, as given (see [`members`]); empty for a wrapped client.
    endpoints: std::sync::Arc<[String]>,
    /// Those of them that did not answer when the store connected (left out of its
    /// connections until they answer).
    unreached: std::sync::Arc<[String]>,
    /// Gather the agents' status writes and their streams' `connected/` writes into shared
    /// transactions, one batcher per [`Lane`]; each started on first use (see [`batch`]).
    batchers: std::sync::Arc<[std::sync::OnceLock<batch::Batcher>; 2]>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("prefix", &self.keys.prefix())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Connects to etcd at `endpoints` (`http://host:port`), without TLS or credentials.
    /// The connection is made lazily: an unreachable etcd surfaces as
    /// [`StoreError::Etcd`] on the first call (see [`Store::ping`]), so a hub can start
    /// while etcd is still coming up.
    pub async fn connect(endpoints: &[String], keys: Keyspace) -> Result<Self, StoreError> {
        Self::connect_with(&EtcdConnection::plain(endpoints.iter().cloned()), keys).await
    }

    /// Connects to etcd as `connection` says. Without TLS or credentials this is
    /// [`Store::connect`]. With them, the connection is checked at once by reading the
    /// keyspace's prefix: a wrong CA, a refused client certificate, a wrong password or
    /// an unreachable endpoint fails here with [`StoreError::Connect`], which names the
    /// endpoints and the cause, since none of them heals by waiting for etcd to come up.
    pub async fn connect_with(
        connection: &EtcdConnection,
        keys: Keyspace,
    ) -> Result<Self, StoreError> {
        if connection.endpoints.is_empty() {
            return Err(StoreError::NoEndpoints);
        }
        connection.check()?;
        let base = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_keep_alive(KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT)
            .with_keep_alive_while_idle(true);
        // A request whose auth token expired (etcd's `--auth-token-ttl`, or a JWT's
        // lifetime) is retried once with a fresh token instead of failing until a restart.
        let options = connection.options(base).with_auto_token_refresh(true);
        let failed = |source: etcd_client::Error| StoreError::Connect {
            endpoints: connection.endpoints_text(),
            failure: ConnectFailure::classify(&source),
            source,
        };
        // With credentials, connecting authenticates at once (and fails here).
        let live = members::answering(&connection.endpoints).await;
        let named = |e: &str| match (e.contains("://"), &connection.tls) {
            (true, _) => e.to_owned(),
            (false, Some(_)) => format!("https://{e}"),
            (false, None) => format!("http://{e}"),
        };
        let client = Client::connect(&live, Some(options.clone()))
            .await
            .map_err(failed)?;
        let leases = Client::connect(&live, Some(options))
            .await
            .map_err(failed)?;
        if connection.is_secured() {
            let probe = GetOptions::new().with_count_only();
            client
                .kv_client()
                .get(keys.prefix(), Some(probe))
                .await
                .map_err(failed)?;
        }
        let etcd = EtcdBackend::new(client, leases);
        Ok(Self {
            backend: Arc::new(etcd.clone()),
            etcd: Some(etcd),
            keys,
            // As the client names them (it adds a scheme where there is none).
            endpoints: connection.endpoints.iter().map(|e| named(e)).collect(),
            unreached: connection
                .endpoints
                .iter()
                .filter(|e| !live.contains(e))
                .map(|e| named(e))
                .collect(),
            batchers: Default::default(),
        })
    }

    /// Wraps an existing client (leases share its connection).
    pub fn from_client(client: Client, keys: Keyspace) -> Self {
        Self::with_backend(Arc::new(EtcdBackend::new(client.clone(), client)), keys)
    }

    /// A store on `backend` (for example a [`MemoryBackend`] in tests).
    pub fn with_backend(backend: Arc<dyn Backend>, keys: Keyspace) -> Self {
        Self {
            backend,
            etcd: None,
            keys,
            endpoints: std::sync::Arc::new([]),
            unreached: std::sync::Arc::new([]),
            batchers: Default::default(),
        }
    }

    /// A store kept in this process's memory (see [`MemoryBackend`]); for tests.
    pub fn in_memory(keys: Keyspace) -> Self {
        Self::with_backend(Arc::new(MemoryBackend::new()), keys)
    }

    /// The keyspace this store works in.
    pub fn keys(&self) -> &Keyspace {
        &self.keys
    }

    /// The backend, for reads and writes the store has no method for (tools, tests).
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Applies `txn` (which writes `key` only) batched with other callers' transactions of
    /// `lane` and `group`: its response and the revision it was applied at.
    pub(crate) async fn batched_txn(
        &self,
        lane: Lane,
        group: i64,
        key: String,
        txn: Txn,
    ) -> Result<(TxnResponse, i64), StoreError> {
        self.batchers[lane as usize]
            .get_or_init(|| batch::Batcher::start(self.backend.clone()))
            .txn(key, group, txn)
            .await
    }

    /// Asks etcd for its status: `Ok` when the cluster answers (for `/readyz`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.backend.status().await?;
        Ok(())
    }

    /// Reads `key`: its value and revisions, if it exists.
    pub async fn get(&self, key: impl Into<Vec<u8>>) -> Result<Option<KeyValue>, StoreError> {
        Ok(self
            .backend
            .range(Range::key(key))
            .await?
            .kvs
            .into_iter()
            .next())
    }

    /// Applies `txn` as it is (no fence, no batching).
    pub async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        Ok(self.backend.txn(txn).await?)
    }

    /// Waits until etcd answers, retrying with backoff and logging each failure: a hub
    /// started before its etcd (or while etcd restarts) waits instead of exiting.
    pub async fn wait_until_answering(&self) {
        let mut delays = accord_common::runtime::backoff(
            std::time::Duration::from_millis(200),
            std::time::Duration::from_secs(5),
        );
        while let Err(e) = self.ping().await {
            let delay = delays.next_delay();
            tracing::warn!(error = %error_chain(&e), retry_in = ?delay, "etcd does not answer yet");
            tokio::time::sleep(delay).await;
        }
    }

    /// Reads and decodes the JSON value at `key`, with its `mod_revision`.
    pub async fn get_json<T: DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<(T, i64)>, StoreError> {
        match self.get(key).await? {
            Some(kv) => Ok(Some((decode(&kv)?, kv.mod_revision()))),
            None => Ok(None),
        }
    }

    /// Every key under `prefix` (with its value unless `keys_only`), sorted by key, and the
    /// revision the listing was taken at. Read in pages of [`LIST_PAGE_KEYS`] at that one
    /// revision, as Kubernetes pages a LIST: one response for a fleet's worth of keys
    /// passed the client's 4 MiB message limit (20,000 status records were 4.8 MB) and the
    /// new leader that listed them stopped.
    pub async fn list_prefix(
        &self,
        prefix: &str,
        keys_only: bool,
    ) -> Result<(Vec<KeyValue>, i64), StoreError> {
        let end = kv::prefix_end(prefix.as_bytes());
        let mut from = prefix.as_bytes().to_vec();
        let mut revision = 0;
        let mut kvs = Vec::new();
        loop {
            let page = self
                .backend
                .range(Range {
                    key: from,
                    end: end.clone(),
                    limit: LIST_PAGE_KEYS,
                    revision,
                    keys_only,
                })
                .await?;
            if revision == 0 {
                revision = page.revision;
            }
            let more = page.more;
            let taken = page.kvs;
            let Some(last) = taken.last() else {
                break;
            };
            from = [last.key(), &[0]].concat();
            kvs.extend(taken);
            if !more {
                break;
            }
        }
        Ok((kvs, revision))
    }

    /// Reads and decodes every value under `prefix`, sorted by key, each with its
    /// `mod_revision`, plus the revision the listing was taken at. A value that fails to
    /// decode is logged and skipped: one malformed record must not hide all the others.
    pub async fn list_json<T: DeserializeOwned>(
        &self,
        prefix: &str,
    ) -> Result<(Vec<(String, T, i64)>, i64), StoreError> {
        let (kvs, revision) = self.list_prefix(prefix, false).await?;
        let items = kvs
            .iter()
            .filter_map(|kv| match decode(kv) {
                Ok(value) => Some((
                    String::from_utf8_lossy(kv.key()).into_owned(),
                    value,
                    kv.mod_revision(),
                )),
                Err(e) => {
                    log_error("skipping a malformed value", &e);
                    None
                }
            })
            .collect();
        Ok((items, revision))
    }

    /// Writes `value` as JSON at `key` (no lease, no precondition); returns the revision
    /// of the write.
    pub async fn put_json<T: Serialize + ?Sized>(
        &self,
        key: &str,
        value: &T,
    ) -> Result<i64, StoreError> {
        let put = Txn::new().and_then(vec![TxnOp::put(key, encode(value)?, None)]);
        Ok(self.txn(put).await?.revision)
    }

    /// Deletes `key`; returns whether it existed.
    pub async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        let response = self
            .txn(Txn::new().and_then(vec![TxnOp::delete(key)]))
            .await?;
        Ok(deleted(&response))
    }

    /// A transaction that applies `ops` only while `fence` is current: its election key
    /// still exists with the create revision it had when this replica was elected. A
    /// deposed leader's call fails with [`StoreError::Fenced`] and changes nothing.
    ///
    /// `compares` and `ops` form an inner transaction: the returned response is the inner
    /// one, so `succeeded()` tells whether the caller's own `compares` held (when they did
    /// not, nothing was applied). etcd leaves the revision in a nested response's header at
    /// 0; use [`Store::fenced_txn_with_revision`] to learn the commit revision.
    pub async fn fenced_txn(
        &self,
        fence: &Fence,
        compares: Vec<Compare>,
        ops: Vec<TxnOp>,
    ) -> Result<TxnResponse, StoreError> {
        Ok(self.fenced_txn_with_revision(fence, compares, ops).await?.0)
    }

    /// [`Store::fenced_txn`], also returning the revision the transaction committed at
    /// (the new `mod_revision` of every key it wrote, when the inner compares held).
    pub async fn fenced_txn_with_revision(
        &self,
        fence: &Fence,
        compares: Vec<Compare>,
        ops: Vec<TxnOp>,
    ) -> Result<(TxnResponse, i64), StoreError> {
        let inner = Txn::new().when(compares).and_then(ops);
        let txn = Txn::new()
            .when(vec![fence.compare()])
            .and_then(vec![TxnOp::txn(inner)]);
        let response = self.txn(txn).await?;
        if !response.succeeded() {
            return Err(StoreError::Fenced);
        }
        let revision = response.revision;
        match response.responses.into_iter().next() {
            Some(TxnOpResponse::Txn(inner)) => Ok((inner, revision)),
            other => Err(StoreError::Unexpected(format!(
                "fenced txn answered {other:?} instead of a nested txn response"
            ))),
        }
    }

    /// Writes `value` at `key` only while `fence` is current; returns the revision of the
    /// write. A deposed leader's call fails with [`StoreError::Fenced`].
    pub async fn fenced_put(
        &self,
        fence: &Fence,
        key: &str,
        value: Vec<u8>,
    ) -> Result<i64, StoreError> {
        let txn = Txn::new()
            .when(vec![fence.compare()])
            .and_then(vec![TxnOp::put(key, value, None)]);
        let response = self.txn(txn).await?;
        if !response.succeeded() {
            return Err(StoreError::Fenced);
        }
        Ok(response.revision)
    }

    /// Deletes `key` only while `fence` is current; returns whether it existed.
    pub async fn fenced_delete(&self, fence: &Fence, key: &str) -> Result<bool, StoreError> {
        let txn = Txn::new()
            .when(vec![fence.compare()])
            .and_then(vec![TxnOp::delete(key)]);
        let response = self.txn(txn).await?;
        if !response.succeeded() {
            return Err(StoreError::Fenced);
        }
        Ok(deleted(&response))
    }

    /// Puts `value` at `key` attached to `lease`.
    pub(crate) async fn put_with_lease(
        &self,
        key: &str,
        value: impl Into<Vec<u8>>,
        lease: i64,
    ) -> Result<i64, StoreError> {
        // A connect storm's writes share transactions (those on one lease only).
        let put = TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease)));
        let (_, revision) = self
            .batched_txn(
                Lane::Leased,
                lease,
                key.to_owned(),
                Txn::new().and_then(vec![put]),
            )
            .await?;
        Ok(revision)
    }

    /// Deletes `key` only when its value equals `value`; returns whether it did.
    pub(crate) async fn delete_if_value(
        &self,
        key: &str,
        value: &[u8],
    ) -> Result<bool, StoreError> {
        let txn = Txn::new()
            .when(vec![Compare::value(key, CompareOp::Equal, value)])
            .and_then(vec![TxnOp::delete(key)]);
        Ok(self.txn(txn).await?.succeeded())
    }
}

/// Whether a delete of `response` removed a key.
fn deleted(response: &TxnResponse) -> bool {
    response
        .responses
        .iter()
        .any(|r| matches!(r, TxnOpResponse::Delete(n) if *n > 0))
}

/// Logs a background failure with its whole error chain.
pub(crate) fn log_error(what: &str, e: &StoreError) {
    tracing::warn!(error = %error_chain(e), kind = e.kind(), "{what}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ttls_round_up_to_whole_seconds() {
        assert_eq!(ttl_seconds(Duration::ZERO), 1);
        assert_eq!(ttl_seconds(Duration::from_millis(1)), 1);
        assert_eq!(ttl_seconds(Duration::from_secs(2)), 2);
        assert_eq!(ttl_seconds(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn key_segments_must_be_non_empty_and_free_of_slashes() {
        assert!(check_segment("cluster", "eu-west1").is_ok());
        assert!(check_segment("cluster", "").is_err());
        let err = check_segment("namespace", "a/b").unwrap_err();
        assert_eq!(err.kind(), "invalid_name");
        assert!(err.to_string().contains("namespace"), "{err}");
    }

    #[test]
    fn error_chains_include_every_source() {
        let source = serde_json::from_str::<u8>("x").unwrap_err();
        let err = StoreError::Decode {
            key: "/accord/clusters/a".into(),
            source,
        };
        let chain = error_chain(&err);
        assert!(
            chain.starts_with("the value stored at /accord/clusters/a"),
            "{chain}"
        );
        assert!(chain.contains("expected value"), "{chain}");
        assert_eq!(err.kind(), "decode");
        assert!(!err.is_transient());
        assert!(StoreError::LeaseLost { lease: 1 }.is_transient());
    }

    #[test]
    fn a_large_value_is_stored_compressed_and_read_back_as_a_small_one_is() {
        #[derive(Serialize, serde::Deserialize, PartialEq, Debug)]
        struct Share {
            cluster: String,
            partitions: u32,
        }
        let large: Vec<Share> = (0..40_000)
            .map(|i| Share {
                cluster: format!("cluster-{i:05}"),
                partitions: 3,
            })
            .collect();
        let stored = encode_large(&large).unwrap();
        let json = encode(&large).unwrap();
        assert!(json.len() > 1_500_000, "{} bytes of JSON", json.len());
        assert!(accord_common::compress::is_gzip(&stored));
        assert!(
            stored.len() * 10 < json.len(),
            "{} bytes stored",
            stored.len()
        );
        let back: Vec<Share> = decode_value(b"/k", &stored).unwrap();
        assert_eq!(back, large);

        let small = vec![Share {
            cluster: "a".into(),
            partitions: 1,
        }];
        let stored = encode_large(&small).unwrap();
        assert_eq!(
            stored,
            encode(&small).unwrap(),
            "a small value stays plain JSON"
        );
        assert_eq!(decode_value::<Vec<Share>>(b"/k", &stored).unwrap(), small);

        let corrupt = [&accord_common::compress::GZIP_MAGIC[..], b"not gzip"].concat();
        let err = decode_value::<Vec<Share>>(b"/k", &corrupt).unwrap_err();
        assert!(
            error_chain(&err).contains("does not inflate"),
            "{}",
            error_chain(&err)
        );
    }
}
