//! When the hub's placement record of one placed object reached each generation, seen by a
//! watch on its key in the hub's own etcd (the bench's etcd client, TLS and the hub's user,
//! as the testbed gives them). The benches use it to split a change's time at the hub: the
//! CR change → the record written, and the record → the members.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use accord_hub::distribution::record::PlacementRecord;
use anyhow::{Context as _, Result};
use tokio::sync::watch;

use crate::Testbed;

/// A placements record as the hub stores it: JSON, gzip-compressed when large.
pub fn decode(value: &[u8]) -> Result<PlacementRecord> {
    let json = if accord_common::compress::is_gzip(value) {
        accord_common::compress::gunzip(value)?
    } else {
        value.to_vec()
    };
    Ok(serde_json::from_slice(&json)?)
}

/// When the record of each generation was first seen; dropping it stops the watch.
pub struct RecordWatch {
    seen: watch::Receiver<BTreeMap<i64, Instant>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RecordWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RecordWatch {
    /// Starts watching the placement record at `key`.
    pub async fn start(testbed: &Testbed, key: String) -> Result<Self> {
        let (tx, seen) = watch::channel(BTreeMap::new());
        let record = move |value: &[u8]| {
            let at = Instant::now();
            if let Ok(r) = decode(value) {
                tx.send_modify(|m| {
                    m.entry(r.generation).or_insert(at);
                });
            }
        };
        let task = testbed.watch_hub_key(&key, record).await?;
        Ok(Self { seen, task })
    }

    /// Waits (up to 30 s) until the record of `generation` (or a later one) was seen; when.
    pub async fn wait_for(&mut self, generation: i64) -> Result<Instant> {
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                if let Some(at) = self
                    .seen
                    .borrow()
                    .range(generation..)
                    .map(|(_, at)| *at)
                    .min()
                {
                    return Ok(at);
                }
                if self.seen.changed().await.is_err() {
                    anyhow::bail!("the hub's etcd watch ended");
                }
            }
        })
        .await
        .with_context(|| format!("no placement record of generation {generation} seen"))?
    }
}

/// A change's time split at the hub's placement record, measured from outside the hub and
/// agents, per change: (a) the change sent → the record seen in the hub's etcd, (b) the
/// record → the first member showing the change, (c) the first member → the last. The
/// three add up to the change's total.
#[derive(Debug, Default)]
pub struct Stages {
    /// (a) per change.
    pub to_record: Vec<Duration>,
    /// (b) per change.
    pub to_first: Vec<Duration>,
    /// (c) per change.
    pub to_last: Vec<Duration>,
}

impl Stages {
    /// Records one change sent at `sent`, its record seen at `recorded`, the first member
    /// at `first` and the last at `last`; returns its (a), (b) and (c).
    pub fn record(
        &mut self,
        sent: Instant,
        recorded: Instant,
        first: Instant,
        last: Instant,
    ) -> (Duration, Duration, Duration) {
        let a = recorded.saturating_duration_since(sent);
        let b = first.saturating_duration_since(recorded);
        let c = last.saturating_duration_since(first);
        self.to_record.push(a);
        self.to_first.push(b);
        self.to_last.push(c);
        (a, b, c)
    }
}
