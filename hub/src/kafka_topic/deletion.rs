//! Deleting a FederatedKafkaTopic with `deletionPolicy: Delete`: its placements record is
//! rewritten as a tombstone (every cluster that was sent the topic is now sent
//! `delete: true`), and the deletion is complete when every such cluster reported the
//! topic gone (`exists=false`) for the tombstone's revision, or no longer exists. A member
//! that is gone or unreachable does not hold the object forever: after the bound the
//! finalizer goes with what was left behind named.

use accord_common::distribution::{KafkaTopicSpec, Observed, PlacementState};

use super::KafkaTopicDecision;
use crate::distribution::PlacementRecord;
use crate::store::StatusRecord;

/// The tombstone of `record`: only the clusters that were sent the topic, each now sent
/// `delete: true`. `None` when no cluster was sent it (nothing to delete anywhere).
pub fn tombstone(
    record: &PlacementRecord<KafkaTopicDecision>,
) -> Option<PlacementRecord<KafkaTopicDecision>> {
    let delete = |spec: &KafkaTopicSpec| KafkaTopicSpec {
        delete: true,
        ..spec.clone()
    };
    crate::distribution::deletion::tombstone(
        record,
        delete,
        KafkaTopicDecision {
            spec: delete(&record.decision.spec),
            conflicts: Default::default(),
        },
    )
}

/// Whether `record` is a tombstone already.
pub fn is_tombstone(record: &PlacementRecord<KafkaTopicDecision>) -> bool {
    record.decision.spec.delete
}

/// Whether `report` says the topic is gone (`exists=false`).
pub fn is_gone(report: &StatusRecord) -> bool {
    report.state == PlacementState::Synced
        && matches!(&report.observed, Observed::KafkaTopic(t) if !t.exists)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::ShareRecord;
    use crate::distribution::deletion::remaining;
    use accord_common::distribution::AssignmentSpec;
    use accord_common::distribution::{KafkaTopicObserved, KafkaTopicSpec, PlacedKind, PlacedRef};
    use std::collections::HashMap;

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
            placed: PlacedRef::new(PlacedKind::FederatedKafkaTopic, "ns", "events"),
            generation: 1,
            decided_unix_millis: 0,
            shares: vec![
                ShareRecord {
                    since: None,
                    cluster: "a".into(),
                    assignment: Some(AssignmentSpec::KafkaTopic(spec())),
                    held_reason: None,
                    hold: None,
                },
                ShareRecord {
                    since: None,
                    cluster: "b".into(),
                    assignment: Some(AssignmentSpec::KafkaTopic(spec())),
                    held_reason: None,
                    hold: None,
                },
                ShareRecord {
                    since: None,
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
            traceparent: String::new(),
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
            remaining(&t, 10, &reports, exists, is_gone),
            ["b"],
            "a report about an earlier revision does not count"
        );
        reports.insert("b".into(), report(11, true));
        assert_eq!(
            remaining(&t, 10, &reports, exists, is_gone),
            ["b"],
            "still exists"
        );
        reports.insert("b".into(), report(11, false));
        assert!(remaining(&t, 10, &reports, exists, is_gone).is_empty());
    }

    #[test]
    fn a_cluster_that_no_longer_exists_does_not_hold_the_deletion() {
        let t = tombstone(&record()).unwrap();
        let reports = HashMap::from([("a".to_owned(), report(10, false))]);
        assert!(remaining(&t, 10, &reports, |c| c != "b", is_gone).is_empty());
    }
}
