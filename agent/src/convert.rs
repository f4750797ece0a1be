//! Translation between the `accord.v1` messages and the agent's domain types, at the edge.

use accord_proto::v1::{
    Assignments, ObjectRef, ReplicaStatus, StatusReport, assignment, status_report,
};

use crate::assignments::{Incoming, PolicyKey, ScaleTarget, Update, Work};
use crate::observe::Report;

/// A policy key from its reference.
pub fn policy_key(r: &ObjectRef) -> PolicyKey {
    PolicyKey::new(&r.kind, &r.namespace, &r.name)
}

/// A policy reference from its key.
pub fn object_ref(key: &PolicyKey) -> ObjectRef {
    ObjectRef {
        kind: key.kind.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    }
}

/// An Assignments message as an [`Update`]; items without a policy are dropped.
pub fn update(message: Assignments) -> Update {
    let items = message
        .items
        .into_iter()
        .filter_map(|item| {
            let policy = policy_key(item.policy.as_ref()?);
            let work = match item.spec {
                Some(assignment::Spec::Scale(s)) => Work::Scale(ScaleTarget {
                    api_version: s.api_version,
                    kind: s.kind,
                    namespace: s.namespace,
                    name: s.name,
                    replicas: s.replicas,
                    scale_request_id: s.scale_request_id,
                }),
                Some(assignment::Spec::Topic(_)) => Work::Unhandled("Kafka topic"),
                Some(assignment::Spec::Federation(_)) => Work::Unhandled("Prometheus federation"),
                None => Work::Unhandled("empty assignment"),
            };
            Some(Incoming {
                policy,
                revision: item.revision,
                work,
            })
        })
        .collect();
    Update {
        revision: message.revision,
        full: message.full,
        items,
        removed: message.removed.iter().map(policy_key).collect(),
    }
}

/// The StatusReport of `report` about `policy`.
pub fn status_report(
    policy: &PolicyKey,
    report: &Report,
    expected_version: i64,
    observed_unix_millis: i64,
) -> StatusReport {
    StatusReport {
        policy: Some(object_ref(policy)),
        resource_version: report.resource_version.clone(),
        generation: report.generation,
        expected_version,
        state: accord_common::distribution::state_to_proto(report.state) as i32,
        message: report.message.clone(),
        observed: report.replicas.map(|r| {
            status_report::Observed::Replicas(ReplicaStatus {
                desired_replicas: r.desired,
                ready_replicas: r.ready,
                updated_replicas: r.updated,
                observed_generation: r.observed_generation,
                scale_request_id: report.scale_request_id.clone(),
            })
        }),
        applied_revision: report.applied_revision,
        observed_unix_millis,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::{PlacementState, ReplicaCounts};
    use accord_proto::v1::{Assignment, ScaleAssignment, TopicAssignment};

    #[test]
    fn scale_items_become_scale_work_and_others_are_unhandled() {
        let policy = ObjectRef {
            kind: "CrossClusterScalePolicy".into(),
            namespace: "default".into(),
            name: "web".into(),
        };
        let message = Assignments {
            revision: 12,
            full: false,
            items: vec![
                Assignment {
                    policy: Some(policy.clone()),
                    revision: 11,
                    spec: Some(assignment::Spec::Scale(ScaleAssignment {
                        api_version: "apps/v1".into(),
                        kind: "Deployment".into(),
                        namespace: "prod".into(),
                        name: "frontend".into(),
                        replicas: 7,
                        scale_request_id: "01J".into(),
                    })),
                },
                Assignment {
                    policy: Some(ObjectRef {
                        kind: "FederatedKafkaTopic".into(),
                        ..policy.clone()
                    }),
                    revision: 12,
                    spec: Some(assignment::Spec::Topic(TopicAssignment::default())),
                },
                Assignment {
                    policy: None,
                    revision: 12,
                    spec: None,
                },
            ],
            removed: vec![policy.clone()],
        };
        let u = update(message);
        assert_eq!(u.revision, 12);
        assert_eq!(u.items.len(), 2);
        assert!(matches!(&u.items[0].work, Work::Scale(s) if s.replicas == 7));
        assert!(matches!(u.items[1].work, Work::Unhandled(_)));
        assert_eq!(u.removed, vec![policy_key(&policy)]);
    }

    #[test]
    fn a_report_carries_every_observed_field() {
        let key = PolicyKey::new("CrossClusterScalePolicy", "default", "web");
        let report = Report {
            state: PlacementState::Synced,
            message: String::new(),
            resource_version: "881".into(),
            generation: 5,
            replicas: Some(ReplicaCounts {
                desired: 7,
                ready: 6,
                updated: 7,
                observed_generation: 5,
            }),
            applied_revision: 11,
            scale_request_id: "01J".into(),
        };
        let s = status_report(&key, &report, 40, 1_700_000_000_000);
        assert_eq!(s.policy, Some(object_ref(&key)));
        assert_eq!(s.state, accord_proto::v1::PlacementState::Synced as i32);
        assert_eq!(s.expected_version, 40);
        assert_eq!(s.resource_version, "881");
        assert_eq!(s.applied_revision, 11);
        assert_eq!(s.observed_unix_millis, 1_700_000_000_000);
        assert_eq!(
            s.observed,
            Some(status_report::Observed::Replicas(ReplicaStatus {
                desired_replicas: 7,
                ready_replicas: 6,
                updated_replicas: 7,
                observed_generation: 5,
                scale_request_id: "01J".into(),
            }))
        );
    }
}
