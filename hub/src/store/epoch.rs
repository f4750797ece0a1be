//! The store epoch: one random number at `<prefix>epoch` that names the current generation
//! of the hub's etcd keyspace.
//!
//! Agents compare assignment revisions (etcd `mod_revision`s) to ignore anything older
//! than what they hold. An etcd restored from a snapshot (without `--bump-revision`) starts
//! again from the snapshot's revision, so every later change would look old to them. The
//! epoch makes revisions comparable only within one generation: the hub sets it in every
//! Assignments message, and an agent that sees another epoch forgets its revision
//! high-water marks and takes the full set.
//!
//! A restore brings the old epoch back with the old data, so the hub has to notice it:
//! - every replica remembers the highest store revision it has seen (checked every
//!   [`CHECK_INTERVAL`]); a current revision below it means the store went backwards;
//! - an agent that says (in Hello) it applied a revision of the current epoch that the
//!   store has not reached yet proves the same after the hub replicas restarted.
//!
//! Either way the replica replaces the epoch with a fresh random one, with a transaction
//! on the epoch key's version so that concurrent detections make one new epoch, not
//! several.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use super::kv::{Compare, CompareOp, Range, Txn, TxnOp, TxnOpResponse};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tracing::{info, warn};

use super::{Store, StoreError, decode, encode, log_error};

/// How often a replica compares the store's revision with the highest it has seen.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// The value at `<prefix>epoch`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EpochRecord {
    /// The epoch (never 0: agents read 0 as "no epoch").
    pub epoch: u64,
    /// When it was made, Unix milliseconds.
    pub created_unix_millis: i64,
    /// The epoch it replaced (0 for the first).
    #[serde(default)]
    pub replaced: u64,
    /// Why it was made.
    #[serde(default)]
    pub reason: String,
}

/// The epoch as read from etcd, with where the store stood when it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochReading {
    /// The epoch.
    pub epoch: u64,
    /// `mod_revision` of the epoch key (the version a replacement compares).
    pub version: i64,
    /// The store's revision at the read.
    pub store_revision: i64,
}

/// A fresh non-zero random epoch.
fn random_epoch() -> u64 {
    loop {
        let epoch: u64 = rand::random();
        if epoch != 0 {
            return epoch;
        }
    }
}

impl Store {
    /// `<prefix>epoch`.
    pub fn epoch_key(&self) -> String {
        format!("{}epoch", self.keys().prefix())
    }

    /// Reads the epoch, creating the first one when there is none (or when what is stored
    /// does not decode).
    pub async fn read_or_create_epoch(&self) -> Result<EpochReading, StoreError> {
        let key = self.epoch_key();
        let response = self.backend().range(Range::key(key.as_str())).await?;
        let store_revision = response.revision;
        if let Some(kv) = response.kvs.first() {
            match decode::<EpochRecord>(kv) {
                Ok(record) if record.epoch != 0 => {
                    return Ok(EpochReading {
                        epoch: record.epoch,
                        version: kv.mod_revision(),
                        store_revision,
                    });
                }
                Ok(_) => {}
                Err(e) => log_error("replacing an unreadable store epoch", &e),
            }
            let seen = EpochReading {
                epoch: 0,
                version: kv.mod_revision(),
                store_revision,
            };
            return self
                .replace_epoch(&seen, "the stored epoch was unreadable")
                .await;
        }
        let seen = EpochReading {
            epoch: 0,
            version: 0,
            store_revision,
        };
        self.replace_epoch(&seen, "first start of this keyspace")
            .await
    }

    /// Replaces the epoch read as `seen` with a fresh one, unless it changed since (then
    /// the current one is returned: another replica replaced it first).
    pub async fn replace_epoch(
        &self,
        seen: &EpochReading,
        reason: &str,
    ) -> Result<EpochReading, StoreError> {
        let key = self.epoch_key();
        let record = EpochRecord {
            epoch: random_epoch(),
            created_unix_millis: accord_common::runtime::unix_millis(),
            replaced: seen.epoch,
            reason: reason.to_owned(),
        };
        let txn = Txn::new()
            .when(vec![Compare::mod_revision(
                key.as_str(),
                CompareOp::Equal,
                seen.version,
            )])
            .and_then(vec![TxnOp::put(key.as_str(), encode(&record)?, None)])
            .or_else(vec![TxnOp::get(key.as_str())]);
        let response = self.txn(txn).await?;
        let store_revision = response.revision;
        if response.succeeded() {
            info!(
                epoch = record.epoch,
                replaced = seen.epoch,
                reason,
                "new store epoch"
            );
            return Ok(EpochReading {
                epoch: record.epoch,
                version: store_revision,
                store_revision,
            });
        }
        let current = response.responses.into_iter().find_map(|op| match op {
            TxnOpResponse::Get(kvs) => kvs.into_iter().next(),
            _ => None,
        });
        match current {
            Some(kv) => match decode::<EpochRecord>(&kv) {
                Ok(r) if r.epoch != 0 => Ok(EpochReading {
                    epoch: r.epoch,
                    version: kv.mod_revision(),
                    store_revision,
                }),
                // Replaced by something unreadable, or deleted, meanwhile: start over.
                _ => Box::pin(self.read_or_create_epoch()).await,
            },
            None => Box::pin(self.read_or_create_epoch()).await,
        }
    }
}

/// This replica's view of the store epoch: the current value for outgoing Assignments,
/// and the highest store revision seen, to notice a restore. Cheap to clone.
#[derive(Clone)]
pub struct StoreEpoch {
    store: Store,
    current: Arc<watch::Sender<u64>>,
    high_water: Arc<AtomicI64>,
    /// Serializes checks, so two of them never replace the epoch one after the other.
    checking: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for StoreEpoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreEpoch")
            .field("current", &*self.current.borrow())
            .field("high_water", &self.high_water.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl StoreEpoch {
    /// Reads (or creates) the epoch.
    pub async fn start(store: Store) -> Result<Self, StoreError> {
        let reading = store.read_or_create_epoch().await?;
        info!(epoch = reading.epoch, "store epoch");
        Ok(Self {
            store,
            current: Arc::new(watch::channel(reading.epoch).0),
            high_water: Arc::new(AtomicI64::new(reading.store_revision)),
            checking: Arc::default(),
        })
    }

    /// The current epoch.
    pub fn current(&self) -> u64 {
        *self.current.borrow()
    }

    /// Follows the current epoch.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.current.subscribe()
    }

    /// The highest store revision this replica has seen in the current epoch.
    pub fn high_water(&self) -> i64 {
        self.high_water.load(Ordering::Relaxed)
    }

    /// Reads the epoch and the store's revision: adopts an epoch another replica made, and
    /// replaces the epoch when the store's revision is below the highest seen. Returns the
    /// current epoch.
    pub async fn check(&self) -> Result<u64, StoreError> {
        let _one = self.checking.lock().await;
        let reading = self.store.read_or_create_epoch().await?;
        if reading.epoch != self.current() {
            return Ok(self.adopt(reading));
        }
        let high = self.high_water();
        if reading.store_revision < high {
            warn!(
                store_revision = reading.store_revision,
                highest_seen = high,
                "the hub's store went back in revisions (restored from a snapshot?)"
            );
            let fresh = self
                .store
                .replace_epoch(&reading, "the store's revision went backwards")
                .await?;
            return Ok(self.adopt(fresh));
        }
        self.high_water
            .fetch_max(reading.store_revision, Ordering::Relaxed);
        Ok(reading.epoch)
    }

    /// Checks what an agent says in Hello: it applied `agent_revision` in `agent_epoch`.
    /// An agent of the current epoch ahead of the store saw revisions the store no longer
    /// has, so the store was restored: the epoch is replaced. Returns the current epoch.
    pub async fn check_agent(
        &self,
        agent_epoch: u64,
        agent_revision: i64,
    ) -> Result<u64, StoreError> {
        // Most agents prove nothing: one that holds no epoch, or one of the current epoch
        // that applied no revision beyond the highest this replica has seen (which the
        // store reached). They are answered without reading etcd and without waiting for
        // other checks: every agent connecting at once (10,000 after a hub restart) would
        // otherwise wait for one etcd read after another before its stream was served.
        if agent_epoch == 0
            || (agent_epoch == self.current() && agent_revision <= self.high_water())
        {
            return Ok(self.current());
        }
        let _one = self.checking.lock().await;
        let reading = self.store.read_or_create_epoch().await?;
        if reading.epoch != self.current() {
            self.adopt(reading);
        } else {
            self.high_water
                .fetch_max(reading.store_revision, Ordering::Relaxed);
        }
        if agent_epoch != reading.epoch || agent_revision <= reading.store_revision {
            return Ok(self.current());
        }
        warn!(
            agent_revision,
            store_revision = reading.store_revision,
            "an agent applied a revision this store has not reached (restored from a snapshot?)"
        );
        let fresh = self
            .store
            .replace_epoch(&reading, "an agent was ahead of the store's revision")
            .await?;
        Ok(self.adopt(fresh))
    }

    /// Makes `reading` the current epoch; revisions restart from its store revision.
    fn adopt(&self, reading: EpochReading) -> u64 {
        self.high_water
            .store(reading.store_revision, Ordering::Relaxed);
        self.current.send_if_modified(|current| {
            let changed = *current != reading.epoch;
            *current = reading.epoch;
            changed
        });
        reading.epoch
    }

    /// Checks every [`CHECK_INTERVAL`] until dropped; failures are logged and retried.
    pub async fn run(self) {
        let mut tick = tokio::time::interval(CHECK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = self.check().await {
                log_error("could not check the store epoch", &e);
            }
        }
    }
}
