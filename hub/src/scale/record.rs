//! The placements record of a policy (`placements/<kind>/<ns>/<name>`, one etcd key per
//! policy) and how it turns into each cluster's assignment.

use accord_proto::v1::{Assignment, ObjectRef, ScaleAssignment, assignment};
use serde::{Deserialize, Serialize};

/// Kind name of scale policies in keys and object references.
pub const SCALE_KIND: &str = "CrossClusterScalePolicy";

/// Identifies a policy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct PolicyRef {
    /// Kind, e.g. `CrossClusterScalePolicy`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl PolicyRef {
    /// As a protocol object reference.
    pub fn to_proto(&self) -> ObjectRef {
        ObjectRef {
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// The workload a policy scales.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// API version, `apps/v1`.
    pub api_version: String,
    /// Kind, `Deployment`.
    pub kind: String,
    /// Name in every member cluster.
    pub name: String,
}

/// One cluster's share.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ShareRecord {
    /// Member cluster.
    pub cluster: String,
    /// Namespace of the workload there.
    pub namespace: String,
    /// Replicas it should run.
    pub replicas: i32,
    /// Why the cluster gets nothing now (unavailable, unschedulable, returning after
    /// failover), if that is the case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_reason: Option<String>,
}

/// A policy's scaling decision, as stored in etcd.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRecord {
    /// The policy.
    pub policy: PolicyRef,
    /// `metadata.generation` of the policy the decision was made for.
    pub generation: i64,
    /// Id of the decision, stamped on every member object.
    pub scale_request_id: String,
    /// When it was decided, Unix milliseconds.
    pub decided_unix_millis: i64,
    /// The workload.
    pub target: Target,
    /// The global count divided.
    pub desired_replicas: i32,
    /// Every distribution cluster's share, in distribution order.
    pub shares: Vec<ShareRecord>,
    /// Why the total could not be placed exactly, if it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infeasible: Option<String>,
}

impl PlacementRecord {
    /// True when `other` asks member clusters for exactly the same thing.
    pub fn same_decision(&self, other: &PlacementRecord) -> bool {
        self.target == other.target
            && self.shares == other.shares
            && self.desired_replicas == other.desired_replicas
            && self.infeasible == other.infeasible
    }

    /// This record's share for `cluster`.
    pub fn share(&self, cluster: &str) -> Option<&ShareRecord> {
        self.shares.iter().find(|s| s.cluster == cluster)
    }

    /// The assignment `cluster` gets from this record (stored at `revision`), if any.
    pub fn assignment_for(&self, cluster: &str, revision: i64) -> Option<Assignment> {
        let share = self.share(cluster)?;
        Some(Assignment {
            policy: Some(self.policy.to_proto()),
            revision,
            spec: Some(assignment::Spec::Scale(ScaleAssignment {
                api_version: self.target.api_version.clone(),
                kind: self.target.kind.clone(),
                namespace: share.namespace.clone(),
                name: self.target.name.clone(),
                replicas: share.replicas,
                scale_request_id: self.scale_request_id.clone(),
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(shares: &[(&str, i32)]) -> PlacementRecord {
        PlacementRecord {
            policy: PolicyRef {
                kind: SCALE_KIND.into(),
                namespace: "default".into(),
                name: "web".into(),
            },
            generation: 1,
            scale_request_id: "01ABC".into(),
            decided_unix_millis: 0,
            target: Target {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "frontend".into(),
            },
            desired_replicas: shares.iter().map(|s| s.1).sum(),
            shares: shares
                .iter()
                .map(|(c, r)| ShareRecord {
                    cluster: (*c).into(),
                    namespace: "prod".into(),
                    replicas: *r,
                    held_reason: None,
                })
                .collect(),
            infeasible: None,
        }
    }

    #[test]
    fn a_cluster_with_a_share_gets_a_scale_assignment_at_the_record_revision() {
        let a = record(&[("a", 7), ("b", 5)])
            .assignment_for("b", 42)
            .unwrap();
        assert_eq!(a.revision, 42);
        let Some(assignment::Spec::Scale(s)) = a.spec else {
            panic!("not a scale assignment")
        };
        assert_eq!(
            (s.replicas, s.name.as_str(), s.namespace.as_str()),
            (5, "frontend", "prod")
        );
        assert_eq!(s.scale_request_id, "01ABC");
        assert!(record(&[("a", 7)]).assignment_for("c", 42).is_none());
    }

    #[test]
    fn a_new_request_id_alone_is_not_a_new_decision() {
        let a = record(&[("a", 7), ("b", 5)]);
        let mut b = a.clone();
        b.scale_request_id = "01XYZ".into();
        b.generation = 2;
        assert!(a.same_decision(&b));
        b.shares[0].replicas = 8;
        assert!(!a.same_decision(&b));
    }
}
