//! The key-value contract the store is written against, and its vocabulary.
//!
//! [`Backend`] is what the rest of the store asks of etcd: ranges read at one revision,
//! transactions of compares and operations (nested ones included), watches from a
//! revision, leases with keepalives, the election and lock recipes. [`super::etcd`] keeps it
//! with a real etcd; [`super::memory`] keeps it in this process, for tests that exercise the
//! controllers without an etcd (`hub/tests/store_contract.rs` holds both to the same tests).
//!
//! The types mirror etcd-client's request builders (`Txn::new().when(..).and_then(..)`,
//! `Compare::mod_revision(..)`, `TxnOp::put(..)`), so the code that builds transactions reads
//! as etcd's own documentation does. Errors stay etcd-client's: the memory backend answers
//! with the gRPC statuses etcd sends (`lease not found`, `no leader`, a compacted watch), so
//! the callers' error handling is exercised by both.

use futures::future::BoxFuture;
use futures::stream::BoxStream;

/// What a backend call fails with: etcd's error, also for the memory backend.
pub type KvError = etcd_client::Error;

/// A backend call's future.
pub type KvFuture<'a, T> = BoxFuture<'a, Result<T, KvError>>;

/// One key with its value and its revisions, as etcd stores it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: Vec<u8>,
    /// The value (empty for a keys-only read).
    pub value: Vec<u8>,
    /// The revision that created the key (its latest creation).
    pub create_revision: i64,
    /// The revision of the key's latest write.
    pub mod_revision: i64,
    /// Writes since the key was created (1 after its creation).
    pub version: i64,
    /// The lease the key is attached to (0: none).
    pub lease: i64,
}

impl KeyValue {
    /// The key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The value.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The revision that created the key.
    pub fn create_revision(&self) -> i64 {
        self.create_revision
    }

    /// The revision of the key's latest write.
    pub fn mod_revision(&self) -> i64 {
        self.mod_revision
    }

    /// Writes since the key was created.
    pub fn version(&self) -> i64 {
        self.version
    }

    /// The lease the key is attached to (0: none).
    pub fn lease(&self) -> i64 {
        self.lease
    }
}

/// How a [`Compare`] compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareOp {
    /// The key's field equals the operand.
    Equal,
    /// The key's field differs from the operand.
    NotEqual,
    /// The key's field is greater than the operand.
    Greater,
    /// The key's field is less than the operand.
    Less,
}

/// What a [`Compare`] looks at, with its operand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompareTarget {
    /// The key's version (0: the key does not exist).
    Version(i64),
    /// The key's create revision (0: the key does not exist).
    CreateRevision(i64),
    /// The key's mod revision (0: the key does not exist).
    ModRevision(i64),
    /// The key's value (a missing key fails every value comparison, as in etcd).
    Value(Vec<u8>),
    /// The key's lease (0: none, or the key does not exist).
    Lease(i64),
}

/// One condition of a transaction, on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compare {
    /// The key compared.
    pub key: Vec<u8>,
    /// The comparison.
    pub op: CompareOp,
    /// The field and its operand.
    pub target: CompareTarget,
}

impl Compare {
    fn new(key: impl Into<Vec<u8>>, op: CompareOp, target: CompareTarget) -> Self {
        Self {
            key: key.into(),
            op,
            target,
        }
    }

    /// Compares the key's version.
    pub fn version(key: impl Into<Vec<u8>>, op: CompareOp, version: i64) -> Self {
        Self::new(key, op, CompareTarget::Version(version))
    }

    /// Compares the key's create revision.
    pub fn create_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: i64) -> Self {
        Self::new(key, op, CompareTarget::CreateRevision(revision))
    }

    /// Compares the key's mod revision.
    pub fn mod_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: i64) -> Self {
        Self::new(key, op, CompareTarget::ModRevision(revision))
    }

    /// Compares the key's value.
    pub fn value(key: impl Into<Vec<u8>>, op: CompareOp, value: impl Into<Vec<u8>>) -> Self {
        Self::new(key, op, CompareTarget::Value(value.into()))
    }

    /// Compares the key's lease.
    pub fn lease(key: impl Into<Vec<u8>>, op: CompareOp, lease: i64) -> Self {
        Self::new(key, op, CompareTarget::Lease(lease))
    }

    /// Whether the comparison holds for `kv` (`None`: the key does not exist).
    pub fn holds(&self, kv: Option<&KeyValue>) -> bool {
        use std::cmp::Ordering;
        let ordering = match (&self.target, kv) {
            (CompareTarget::Value(_), None) => return false,
            (CompareTarget::Value(v), Some(kv)) => kv.value.as_slice().cmp(v.as_slice()),
            (CompareTarget::Version(n), kv) => kv.map_or(0, |kv| kv.version).cmp(n),
            (CompareTarget::CreateRevision(n), kv) => kv.map_or(0, |kv| kv.create_revision).cmp(n),
            (CompareTarget::ModRevision(n), kv) => kv.map_or(0, |kv| kv.mod_revision).cmp(n),
            (CompareTarget::Lease(n), kv) => kv.map_or(0, |kv| kv.lease).cmp(n),
        };
        match self.op {
            CompareOp::Equal => ordering == Ordering::Equal,
            CompareOp::NotEqual => ordering != Ordering::Equal,
            CompareOp::Greater => ordering == Ordering::Greater,
            CompareOp::Less => ordering == Ordering::Less,
        }
    }
}

/// Options of a put.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PutOptions {
    /// The lease to attach the key to (0: none).
    pub lease: i64,
    /// Keep the key's current lease instead of setting one.
    pub ignore_lease: bool,
}

impl PutOptions {
    /// No lease.
    pub fn new() -> Self {
        Self::default()
    }

    /// Attaches the key to `lease`.
    pub fn with_lease(mut self, lease: i64) -> Self {
        self.lease = lease;
        self
    }

    /// Keeps the key's current lease.
    pub fn with_ignore_lease(mut self) -> Self {
        self.ignore_lease = true;
        self
    }
}

/// One operation of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnOp {
    /// Writes a key.
    Put {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
        /// Its lease handling.
        options: PutOptions,
    },
    /// Reads one key.
    Get {
        /// The key.
        key: Vec<u8>,
    },
    /// Deletes one key.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
    /// A nested transaction: its compares decide its own branch only.
    Txn(Txn),
}

impl TxnOp {
    /// Writes `value` at `key`.
    pub fn put(
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        options: Option<PutOptions>,
    ) -> Self {
        TxnOp::Put {
            key: key.into(),
            value: value.into(),
            options: options.unwrap_or_default(),
        }
    }

    /// Reads `key`.
    pub fn get(key: impl Into<Vec<u8>>) -> Self {
        TxnOp::Get { key: key.into() }
    }

    /// Deletes `key`.
    pub fn delete(key: impl Into<Vec<u8>>) -> Self {
        TxnOp::Delete { key: key.into() }
    }

    /// A nested transaction.
    pub fn txn(txn: Txn) -> Self {
        TxnOp::Txn(txn)
    }
}

/// A transaction: when every compare holds, `success` is applied, else `failure`; all at
/// one new revision (or none, when nothing is written).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Txn {
    /// The conditions.
    pub compares: Vec<Compare>,
    /// Applied when every condition holds.
    pub success: Vec<TxnOp>,
    /// Applied otherwise.
    pub failure: Vec<TxnOp>,
}

impl Txn {
    /// An empty transaction.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the conditions.
    pub fn when(mut self, compares: impl Into<Vec<Compare>>) -> Self {
        self.compares = compares.into();
        self
    }

    /// Sets what is applied when the conditions hold.
    pub fn and_then(mut self, ops: impl Into<Vec<TxnOp>>) -> Self {
        self.success = ops.into();
        self
    }

    /// Sets what is applied otherwise.
    pub fn or_else(mut self, ops: impl Into<Vec<TxnOp>>) -> Self {
        self.failure = ops.into();
        self
    }
}

/// The answer to one [`TxnOp`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnOpResponse {
    /// A put was applied.
    Put,
    /// A read: the key, if it exists.
    Get(Vec<KeyValue>),
    /// A delete: how many keys it removed.
    Delete(i64),
    /// A nested transaction's answer.
    Txn(TxnResponse),
}

/// The answer to a [`Txn`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnResponse {
    /// Whether the conditions held.
    pub succeeded: bool,
    /// The store's revision after the transaction (0 in a nested answer, as etcd does).
    pub revision: i64,
    /// One answer per operation of the branch applied.
    pub responses: Vec<TxnOpResponse>,
}

impl TxnResponse {
    /// Whether the conditions held.
    pub fn succeeded(&self) -> bool {
        self.succeeded
    }

    /// The answers of the branch applied.
    pub fn op_responses(&self) -> Vec<TxnOpResponse> {
        self.responses.clone()
    }
}

/// A read of one key or of a range of keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Range {
    /// The key, or the first key of the range.
    pub key: Vec<u8>,
    /// The first key after the range (empty: `key` alone).
    pub end: Vec<u8>,
    /// Most keys returned (0: no limit).
    pub limit: i64,
    /// The revision to read at (0: the latest).
    pub revision: i64,
    /// Return keys and revisions without values.
    pub keys_only: bool,
}

impl Range {
    /// `key` alone.
    pub fn key(key: impl Into<Vec<u8>>) -> Self {
        Self {
            key: key.into(),
            ..Self::default()
        }
    }
}

/// The answer to a [`Range`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeResponse {
    /// The keys read, sorted by key.
    pub kvs: Vec<KeyValue>,
    /// Whether the limit left keys out.
    pub more: bool,
    /// The revision read at.
    pub revision: i64,
}

/// A watch on a key or a prefix.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchRequest {
    /// The key, or the prefix.
    pub key: Vec<u8>,
    /// Watch every key that starts with `key`.
    pub prefix: bool,
    /// The first revision to report (0: from now).
    pub start_revision: i64,
    /// Send progress notifications (an empty response vouching for its revision).
    pub progress_notify: bool,
}

/// What happened to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Written.
    Put,
    /// Deleted (its lease expired or was revoked, or it was deleted).
    Delete,
}

/// One change seen by a watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    /// What happened.
    pub event_type: EventType,
    /// The key after the change (for a delete: the key, with the deleting revision as
    /// its mod revision).
    pub kv: KeyValue,
}

/// One message of a watch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchResponse {
    /// The first message, answering the watch's creation.
    pub created: bool,
    /// The watch ended (see `compact_revision` and `cancel_reason`).
    pub canceled: bool,
    /// When canceled because its start revision was compacted: the compaction revision.
    pub compact_revision: i64,
    /// Why the watch was canceled.
    pub cancel_reason: String,
    /// The store's revision when the message was sent.
    pub revision: i64,
    /// The changes, in revision order.
    pub events: Vec<WatchEvent>,
}

/// A watch's messages; dropping it cancels the watch.
pub type WatchStream = BoxStream<'static, Result<WatchResponse, KvError>>;

/// A lease keepalive channel (see [`Backend::keep_alive`]).
pub trait KeepAlive: Send {
    /// Refreshes the lease; the TTL it now has, 0 or less when it no longer exists.
    fn refresh(&mut self) -> KvFuture<'_, i64>;
}

/// A won election: the leader's key (`<name>/<lease hex>`) and its create revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderKey {
    /// The election's name.
    pub name: Vec<u8>,
    /// The leader's key.
    pub key: Vec<u8>,
    /// The key's create revision.
    pub revision: i64,
    /// The key's lease.
    pub lease: i64,
}

/// What the store asks of etcd (see the module's documentation).
pub trait Backend: Send + Sync + 'static {
    /// Reads a key or a range of keys.
    fn range(&self, range: Range) -> KvFuture<'_, RangeResponse>;

    /// Applies a transaction.
    fn txn(&self, txn: Txn) -> KvFuture<'_, TxnResponse>;

    /// Opens a watch.
    fn watch(&self, request: WatchRequest) -> KvFuture<'_, WatchStream>;

    /// Grants a lease of `ttl` seconds: its id and the TTL granted.
    fn grant(&self, ttl: i64) -> KvFuture<'_, (i64, i64)>;

    /// Opens a keepalive channel for lease `id` (refreshing it once).
    fn keep_alive(&self, id: i64) -> KvFuture<'_, Box<dyn KeepAlive>>;

    /// Revokes lease `id`, deleting its keys.
    fn revoke(&self, id: i64) -> KvFuture<'_, ()>;

    /// Campaigns in election `name` with `value` on `lease`; resolves once elected.
    fn campaign(&self, name: Vec<u8>, value: Vec<u8>, lease: i64) -> KvFuture<'_, LeaderKey>;

    /// The current leader's key of election `name`, if there is one.
    fn leader(&self, name: Vec<u8>) -> KvFuture<'_, Option<KeyValue>>;

    /// Gives up leadership held with `leader`.
    fn resign(&self, leader: LeaderKey) -> KvFuture<'_, ()>;

    /// Waits until lock `name` is held on `lease`; the lock's key (`<name>/<lease hex>`).
    fn lock(&self, name: Vec<u8>, lease: i64) -> KvFuture<'_, Vec<u8>>;

    /// Releases the lock held with `key`.
    fn unlock(&self, key: Vec<u8>) -> KvFuture<'_, ()>;

    /// Answers when the backend is reachable.
    fn status(&self) -> KvFuture<'_, ()>;
}

/// The first key after every key that starts with `prefix` (etcd's range end for it).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff: the range runs to the end of the keyspace.
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_at_the_next_key_after_all_it_covers() {
        assert_eq!(prefix_end(b"/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }
}
