//! Deletion that waits for the members, for kinds whose objects hold a finalizer until
//! every member removed what it was sent (FederatedKafkaTopic with `deletionPolicy:
//! Delete`, FederatedResource): which clusters are left, and whether the bound has passed.
//! A member that is gone or unreachable does not hold the object forever: after the bound
//! the finalizer goes, with what was left behind named in a Warning Event.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use accord_common::distribution::KindSpec;

use super::{PlacementRecord, ShareRecord};
use crate::store::StatusRecord;

/// The tombstone of `record`: only the clusters that were sent a spec of kind `S`, each now
/// sent what `remove` makes of it, with the kind's `decision`. `None` when no cluster was
/// sent anything (nothing to remove anywhere).
pub fn tombstone<S: KindSpec, D: Clone>(
    record: &PlacementRecord<D>,
    remove: impl Fn(&S) -> S,
    decision: D,
) -> Option<PlacementRecord<D>> {
    let shares: Vec<ShareRecord> = record
        .shares
        .iter()
        .filter_map(|s| {
            let sent = S::of(s.assignment.as_ref()?)?;
            Some(ShareRecord {
                assignment: Some(remove(sent).assignment()),
                held_reason: None,
                ..s.clone()
            })
        })
        .collect();
    (!shares.is_empty()).then(|| PlacementRecord {
        shares,
        decision,
        ..record.clone()
    })
}

/// The clusters of `tombstone` (stored at `revision`) that were sent something and are not
/// known to be done yet: no report for that revision (or later) that `gone` accepts, and
/// the ManagedCluster still exists (`cluster_exists`).
pub fn remaining<D>(
    tombstone: &PlacementRecord<D>,
    revision: i64,
    reports: &HashMap<String, StatusRecord>,
    cluster_exists: impl Fn(&str) -> bool,
    gone: impl Fn(&StatusRecord) -> bool,
) -> Vec<String> {
    tombstone
        .shares
        .iter()
        .filter(|s| s.assignment.is_some() && cluster_exists(&s.cluster))
        .filter(|s| {
            !reports
                .get(&s.cluster)
                .is_some_and(|r| r.applied_revision >= s.current_from(revision) && gone(r))
        })
        .map(|s| s.cluster.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Where a deletion stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Every member is done: release the finalizer.
    Done,
    /// Some members are not; look again after `recheck` at the latest.
    Waiting {
        /// The clusters left.
        left: Vec<String>,
        /// Time until the bound.
        recheck: Duration,
    },
    /// The bound passed with these clusters left: release the finalizer anyway, with a
    /// Warning Event naming them.
    TimedOut {
        /// The clusters left.
        left: Vec<String>,
    },
}

/// Where a deletion that began at `since_unix_millis` (the object's `deletionTimestamp`)
/// stands at `now_unix_millis`, with `left` clusters not done and a bound of `timeout`.
pub fn progress(
    left: Vec<String>,
    since_unix_millis: i64,
    now_unix_millis: i64,
    timeout: Duration,
) -> Progress {
    if left.is_empty() {
        return Progress::Done;
    }
    let bound = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
    let elapsed = now_unix_millis.saturating_sub(since_unix_millis).max(0);
    if elapsed >= bound {
        Progress::TimedOut { left }
    } else {
        Progress::Waiting {
            left,
            recheck: Duration::from_millis(u64::try_from(bound - elapsed).unwrap_or(u64::MAX)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_releases_a_deletion_with_the_clusters_left() {
        let timeout = Duration::from_secs(300);
        assert_eq!(progress(vec![], 0, 1, timeout), Progress::Done);
        assert_eq!(
            progress(vec!["b".into()], 1_000, 61_000, timeout),
            Progress::Waiting {
                left: vec!["b".into()],
                recheck: Duration::from_secs(240)
            }
        );
        assert_eq!(
            progress(vec!["b".into()], 1_000, 301_000, timeout),
            Progress::TimedOut {
                left: vec!["b".into()]
            }
        );
    }
}
