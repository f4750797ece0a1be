//! Deleting a FederatedKafkaTopic with `deletionPolicy: Delete`: its placements record is
//! rewritten as a tombstone (every cluster that was sent the topic is now sent
//! `delete: true`), and the deletion is complete when every such cluster reported the
//! topic gone (`exists=false`) for the tombstone's revision, or no longer exists. A member
//! that is gone or unreachable does not hold the object forever: after the bound the
//! finalizer goes with what was left behind named.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use accord_common::distribution::{AssignmentSpec, Observed, PlacementState};

use super::KafkaTopicDecision;
use crate::distribution::PlacementRecord;
use crate::store::StatusRecord;

/// The tombstone of `record`: only the clusters that were sent the topic, each now sent
/// `delete: true`. `None` when no cluster was sent it (nothing to delete anywhere).
pub fn tombstone(
    record: &PlacementRecord<KafkaTopicDecision>,
) -> Option<PlacementRecord<KafkaTopicDecision>> {
    let shares: Vec<_> = record
        .shares
        .iter()
        .filter_map(|s| match &s.assignment {
            Some(AssignmentSpec::KafkaTopic(spec)) => {
                let mut share = s.clone();
                share.assignment = Some(AssignmentSpec::KafkaTopic(
                    accord_common::distribution::KafkaTopicSpec {
                        delete: true,
                        ..spec.clone()
                    },
                ));
                Some(share)
            }
            _ => None,
        })
        .collect();
    if shares.is_empty() {
        return None;
    }
    let mut spec = record.decision.spec.clone();
    spec.delete = true;
    Some(PlacementRecord {
        shares,
        decision: KafkaTopicDecision {
            spec,
            conflicts: Default::default(),
        },
        ..record.clone()
    })
}

/// Whether `record` is a tombstone already.
pub fn is_tombstone(record: &PlacementRecord<KafkaTopicDecision>) -> bool {
    record.decision.spec.delete
}

/// The clusters of `tombstone` (stored at `revision`) where the topic is not known to be
/// gone yet: no report for that revision saying `exists=false`, and the ManagedCluster
/// still exists (`cluster_exists`).
pub fn remaining(
    tombstone: &PlacementRecord<KafkaTopicDecision>,
    revision: i64,
    reports: &HashMap<String, StatusRecord>,
    cluster_exists: impl Fn(&str) -> bool,
) -> Vec<String> {
    tombstone
        .shares
        .iter()
        .filter(|s| s.assignment.is_some())
        .map(|s| s.cluster.as_str())
        .filter(|c| cluster_exists(c))
        .filter(|c| !reports.get(*c).is_some_and(|r| is_gone(r, revision)))
        .map(str::to_owned)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn is_gone(report: &StatusRecord, revision: i64) -> bool {
    report.applied_revision >= revision
        && report.state == PlacementState::Synced
        && matches!(&report.observed, Observed::KafkaTopic(t) if !t.exists)
}

/// Where a deletion stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Every member's topic is gone: release the finalizer.
    Done,
    /// Some members still have it; look again after `recheck` at the latest.
    Waiting {
        /// The clusters left.
        left: Vec<String>,
        /// Time until the bound.
        recheck: Duration,
    },
    /// The bound passed with topics left in these clusters: release the finalizer anyway,
    /// with a Warning Event naming them.
    TimedOut {
        /// The clusters left.
        left: Vec<String>,
    },
}

/// Where a deletion that began at `since_unix_millis` (the object's
/// `deletionTimestamp`) stands at `now_unix_millis`, with `left` clusters still holding the
/// topic and a bound of `timeout`.
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

/// The Warning Event's note when the bound passed.
pub fn incomplete_message(topic_name: &str, left: &[String], timeout: Duration) -> String {
    format!(
        "topic {topic_name} was not confirmed deleted within {}s in cluster{} {}; the \
         FederatedKafkaTopic is released and the topic may remain there",
        timeout.as_secs(),
        if left.len() == 1 { "" } else { "s" },
        crate::distribution::reported::named(left, ", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::ShareRecord;
    use accord_common::distribution::{KafkaTopicObserved, KafkaTopicSpec, PolicyKind, PolicyRef};

    fn spec() -> KafkaTopicSpec {
        KafkaTopicSpec {
            topic_name: "events".into(),
            partitions: 3,
            replication_factor: 1,
            ..Default::default()
        }
    }

    fn record() -> PlacementRecord<KafkaTopicDecision> {
        PlacementRecord {
            policy: PolicyRef::new(PolicyKind::FederatedKafkaTopic, "ns", "events"),
            generation: 1,
            decided_unix_millis: 0,
            shares: vec![
                ShareRecord {
                    cluster: "a".into(),
                    assignment: Some(AssignmentSpec::KafkaTopic(spec())),
                    held_reason: None,
                    hold: None,
                },
                ShareRecord {
                    cluster: "b".into(),
                    assignment: Some(AssignmentSpec::KafkaTopic(spec())),
                    held_reason: None,
                    hold: None,
                },
                ShareRecord {
                    cluster: "c".into(),
                    assignment: None,
                    held_reason: Some("Conflict: owned by ns/older".into()),
                    hold: Some(crate::distribution::Hold::Conflict),
                },
            ],
            decision: KafkaTopicDecision {
                spec: spec(),
                conflicts: [("c".to_owned(), "ns/older".to_owned())].into(),
            },
        }
    }

    fn report(revision: i64, exists: bool) -> StatusRecord {
        StatusRecord {
            resource_version: String::new(),
            generation: 0,
            applied_revision: revision,
            state: PlacementState::Synced,
            message: if exists { "" } else { "deleted" }.into(),
            observed_unix_millis: 0,
            observed: Observed::KafkaTopic(KafkaTopicObserved {
                partitions: 3,
                replication_factor: 1,
                exists,
            }),
            api_server_unavailable: false,
        }
    }

    #[test]
    fn the_tombstone_deletes_only_where_the_topic_was_sent() {
        let t = tombstone(&record()).unwrap();
        assert!(is_tombstone(&t));
        assert!(!is_tombstone(&record()));
        let clusters: Vec<_> = t.shares.iter().map(|s| s.cluster.as_str()).collect();
        assert_eq!(clusters, ["a", "b"], "never the cluster another topic owns");
        for s in &t.shares {
            let Some(AssignmentSpec::KafkaTopic(spec)) = &s.assignment else {
                panic!("no topic assignment")
            };
            assert!(spec.delete);
            assert_eq!(spec.topic_name, "events");
        }
    }

    #[test]
    fn nothing_sent_anywhere_needs_no_tombstone() {
        let mut r = record();
        r.shares.retain(|s| s.assignment.is_none());
        assert!(tombstone(&r).is_none());
    }

    #[test]
    fn a_deletion_completes_when_every_cluster_reports_the_topic_gone_at_the_tombstone() {
        let t = tombstone(&record()).unwrap();
        let exists = |_: &str| true;
        let mut reports = HashMap::from([
            ("a".to_owned(), report(10, false)),
            ("b".to_owned(), report(9, false)),
        ]);
        assert_eq!(
            remaining(&t, 10, &reports, exists),
            ["b"],
            "a report about an earlier revision does not count"
        );
        reports.insert("b".into(), report(11, true));
        assert_eq!(remaining(&t, 10, &reports, exists), ["b"], "still exists");
        reports.insert("b".into(), report(11, false));
        assert!(remaining(&t, 10, &reports, exists).is_empty());
    }

    #[test]
    fn a_cluster_that_no_longer_exists_does_not_hold_the_deletion() {
        let t = tombstone(&record()).unwrap();
        let reports = HashMap::from([("a".to_owned(), report(10, false))]);
        assert!(remaining(&t, 10, &reports, |c| c != "b").is_empty());
    }

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
        let m = incomplete_message("events", &["b".into(), "c".into()], timeout);
        assert!(m.contains("clusters b, c") && m.contains("300s"), "{m}");
    }
}
