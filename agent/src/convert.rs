//! Translation between the `accord.v1` messages and the agent's domain types, at the edge.
//! Kind-neutral: the shared vocabulary (`accord_common::distribution`) translates each
//! kind's spec and observation.

use accord_common::distribution::{AssignmentSpec, PlacedRef, state_to_proto};
use accord_proto::v1::{Assignments, StatusReport};

use crate::assignments::{Incoming, Removed, Update};
use crate::report::Report;

/// An Assignments message as an [`Update`], and how many items were dropped because they
/// name no placed object, a placed object of a kind this agent does not know, or carry no
/// spec (the hub never sends such items to an agent of its own version; a kind added later
/// arrives with a spec this agent cannot decode either). Removals of unknown kinds are
/// dropped too: nothing of theirs is held.
pub fn update(message: Assignments) -> (Update, usize) {
    let total = message.items.len();
    let items: Vec<Incoming> = message
        .items
        .into_iter()
        .filter_map(|item| {
            Some(Incoming {
                placed: PlacedRef::from_proto(item.placed.as_ref()?).ok()?,
                revision: item.revision,
                spec: AssignmentSpec::from_proto(item.spec?),
            })
        })
        .collect();
    let malformed = total - items.len();
    let update = Update {
        revision: message.revision,
        full: message.full,
        items,
        removed: message
            .removed
            .iter()
            .filter_map(|r| {
                Some(Removed {
                    placed: PlacedRef::from_proto(r.placed.as_ref()?).ok()?,
                    revision: r.revision,
                })
            })
            .collect(),
        store_epoch: message.store_epoch,
    };
    (update, malformed)
}

/// The StatusReport of `report` about `placed`.
pub fn status_report(
    placed: &PlacedRef,
    report: &Report,
    expected_version: i64,
    observed_unix_millis: i64,
    traceparent: String,
) -> StatusReport {
    StatusReport {
        placed: Some(placed.to_proto()),
        resource_version: report.resource_version.clone(),
        generation: report.generation,
        expected_version,
        state: state_to_proto(report.state) as i32,
        message: report.message.clone(),
        observed: report.observed.to_proto(),
        applied_revision: report.applied_revision,
        observed_unix_millis,
        api_server_unavailable: report.api_server_unavailable,
        traceparent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::distribution::PlacedKind;
    use accord_common::distribution::{Observed, PlacementState, ScaleObserved, ScaleSpec};
    use accord_proto::v1::{
        Assignment, KafkaTopicAssignment, ObjectRef, ScaleStatus, assignment, status_report,
    };

    #[test]
    fn items_of_every_kind_become_specs_and_items_without_a_placed_object_or_spec_are_dropped() {
        let placed = ObjectRef {
            kind: "CrossClusterScalePolicy".into(),
            namespace: "default".into(),
            name: "web".into(),
        };
        let message = Assignments {
            revision: 12,
            full: false,
            items: vec![
                Assignment {
                    placed: Some(placed.clone()),
                    revision: 11,
                    spec: Some(
                        AssignmentSpec::Scale(ScaleSpec::deployment("prod", "frontend", 7, "01J"))
                            .to_proto(),
                    ),
                    traceparent: String::new(),
                },
                Assignment {
                    placed: Some(ObjectRef {
                        kind: "FederatedKafkaTopic".into(),
                        ..placed.clone()
                    }),
                    revision: 12,
                    spec: Some(assignment::Spec::KafkaTopic(KafkaTopicAssignment::default())),
                    traceparent: String::new(),
                },
                Assignment {
                    placed: None,
                    revision: 12,
                    spec: None,
                    traceparent: String::new(),
                },
                Assignment {
                    placed: Some(placed.clone()),
                    revision: 12,
                    spec: None,
                    traceparent: String::new(),
                },
            ],
            removed: vec![accord_proto::v1::Removal {
                placed: Some(placed.clone()),
                revision: 10,
            }],
            store_epoch: 0xfeed,
        };
        let (u, malformed) = update(message);
        assert_eq!(u.revision, 12);
        assert_eq!(u.items.len(), 2);
        assert_eq!(malformed, 2);
        assert!(matches!(&u.items[0].spec, AssignmentSpec::Scale(s) if s.replicas == 7));
        assert!(matches!(u.items[1].spec, AssignmentSpec::KafkaTopic(_)));
        assert_eq!(
            u.removed,
            vec![Removed {
                placed: PlacedRef::from_proto(&placed).unwrap(),
                revision: 10,
            }]
        );
        assert_eq!(u.store_epoch, 0xfeed);
    }

    #[test]
    fn items_and_removals_of_a_kind_this_agent_does_not_know_are_dropped_not_held() {
        let unknown = ObjectRef {
            kind: "FederatedKafkaGroup".into(),
            namespace: "default".into(),
            name: "app".into(),
        };
        let message = Assignments {
            revision: 3,
            items: vec![Assignment {
                placed: Some(unknown.clone()),
                revision: 3,
                spec: Some(assignment::Spec::KafkaTopic(KafkaTopicAssignment::default())),
                traceparent: String::new(),
            }],
            removed: vec![accord_proto::v1::Removal {
                placed: Some(unknown),
                revision: 2,
            }],
            ..Assignments::default()
        };
        let (u, malformed) = update(message);
        assert!(u.items.is_empty() && u.removed.is_empty());
        assert_eq!(malformed, 1);
    }

    #[test]
    fn a_report_carries_every_observed_field() {
        let key = PlacedRef::new(PlacedKind::CrossClusterScalePolicy, "default", "web");
        let report = Report {
            state: PlacementState::Synced,
            message: String::new(),
            resource_version: "881".into(),
            generation: 5,
            observed: Observed::Scale(ScaleObserved {
                desired: 7,
                ready: 6,
                updated: 7,
                observed_generation: 5,
                scale_request_id: "01J".into(),
                fitting_replicas: None,
            }),
            applied_revision: 11,
            api_server_unavailable: false,
        };
        let s = status_report(&key, &report, 40, 1_700_000_000_000, String::new());
        assert_eq!(s.placed, Some(key.to_proto()));
        assert_eq!(s.state, accord_proto::v1::PlacementState::Synced as i32);
        assert_eq!(s.expected_version, 40);
        assert_eq!(s.resource_version, "881");
        assert_eq!(s.applied_revision, 11);
        assert_eq!(s.observed_unix_millis, 1_700_000_000_000);
        assert_eq!(
            s.observed,
            Some(status_report::Observed::Scale(ScaleStatus {
                desired_replicas: 7,
                ready_replicas: 6,
                updated_replicas: 7,
                observed_generation: 5,
                scale_request_id: "01J".into(),
                fitting_replicas: None,
            }))
        );
        assert!(!s.api_server_unavailable);
        let down = Report {
            api_server_unavailable: true,
            ..Report::without_object(PlacementState::Unavailable, "down".into(), 11)
        };
        assert!(status_report(&key, &down, 40, 0, String::new()).api_server_unavailable);
    }
}
