//! The placements record of a policy (`placements/<kind>/<ns>/<name>`, one etcd key per
//! policy): every cluster's typed assignment, and the kind's own decision data beside it.
//!
//! The record is kind-neutral: what a cluster is asked to do is an
//! [`AssignmentSpec`](accord_common::distribution::AssignmentSpec), and what only one kind
//! needs to explain its decision (a scale policy's total and request id, say) lives in one
//! variant of [`Decision`]. A new kind adds one variant there.

use accord_common::distribution::{AssignmentSpec, PolicyRef, ScaleSpec};
use accord_proto::v1::Assignment;
use serde::{Deserialize, Serialize};

use crate::kafka_topic::KafkaTopicDecision;
use crate::promfed::PromfedDecision;
use crate::scale::ScaleDecision;

/// One cluster's part of a decision.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ShareRecord {
    /// Member cluster.
    pub cluster: String,
    /// What the cluster is asked to do; `None` when it is named but gets nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment: Option<AssignmentSpec>,
    /// Why the cluster gets nothing (or less) now — unavailable, unschedulable, returning
    /// after failover — if that is the case, for humans; [`ShareRecord::hold`] says the
    /// same for decisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_reason: Option<String>,
    /// What holds the cluster's share back, if something does. Records written before it
    /// existed have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<Hold>,
}

/// What holds a cluster's share back: the state the next decision reads (the share's
/// `held_reason` says it in words).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Hold {
    /// No ManagedCluster of that name: the cluster gets nothing.
    NotRegistered,
    /// The cluster is unavailable; its share moved to the others.
    Unavailable,
    /// The cluster is unschedulable (drained): it gets nothing.
    Unschedulable,
    /// The cluster returned after its share moved away and waits out the return cooldown
    /// before its share moves back.
    #[serde(rename_all = "camelCase")]
    ReturnCooldown {
        /// When the cooldown ends, seconds since the Unix epoch.
        until_unix: i64,
    },
    /// No cluster was available, so the cluster kept the count it was last told: its
    /// share never moved away.
    KeptLastCount,
    /// Another policy owns what this one would write there (e.g. an older topic of the
    /// same name).
    Conflict,
    /// A policy of the hub does not allow sending it (e.g. a Deny KafkaTopicPolicy).
    Refused,
}

impl ShareRecord {
    /// Whether the cluster had its share in this decision: nothing held it back, or it
    /// kept its last count because no cluster was available.
    pub fn had_share(&self) -> bool {
        match self.hold {
            None => self.held_reason.is_none(),
            Some(hold) => hold == Hold::KeptLastCount,
        }
    }

    /// Whether this decision held the cluster for its return cooldown.
    pub fn in_return_cooldown(&self) -> bool {
        matches!(self.hold, Some(Hold::ReturnCooldown { .. }))
    }
}

/// What one kind records about its decision beyond the per-cluster assignments.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Decision {
    /// CrossClusterScalePolicy.
    Scale(ScaleDecision),
    /// PrometheusFederation.
    // stored name; renaming it would orphan stored records
    #[serde(rename = "federation")]
    Promfed(PromfedDecision),
    /// FederatedKafkaTopic.
    // stored name; renaming it would orphan stored records
    #[serde(rename = "topic")]
    KafkaTopic(KafkaTopicDecision),
}

impl Decision {
    /// True when `other` decides the same thing, ignoring ids that only name a decision.
    fn same_intent(&self, other: &Decision) -> bool {
        match (self, other) {
            (Decision::Scale(a), Decision::Scale(b)) => a.same_intent(b),
            (Decision::Promfed(a), Decision::Promfed(b)) => a == b,
            (Decision::KafkaTopic(a), Decision::KafkaTopic(b)) => a == b,
            _ => false,
        }
    }
}

/// A policy's decision, as stored in etcd.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRecord {
    /// The policy.
    pub policy: PolicyRef,
    /// `metadata.generation` of the policy the decision was made for.
    pub generation: i64,
    /// When it was decided, Unix milliseconds.
    pub decided_unix_millis: i64,
    /// Every cluster's share, in the policy's order.
    pub shares: Vec<ShareRecord>,
    /// The kind's own decision data.
    pub decision: Decision,
}

/// True when two assignments ask for the same thing, ignoring ids that only name the
/// decision (a new scale request id alone changes nothing in a member cluster).
fn same_assignment(a: Option<&AssignmentSpec>, b: Option<&AssignmentSpec>) -> bool {
    match (a, b) {
        (Some(AssignmentSpec::Scale(a)), Some(AssignmentSpec::Scale(b))) => {
            let unnamed = |s: &ScaleSpec| ScaleSpec {
                scale_request_id: String::new(),
                ..s.clone()
            };
            unnamed(a) == unnamed(b)
        }
        _ => a == b,
    }
}

impl PlacementRecord {
    /// True when `other` asks member clusters for exactly the same thing.
    pub fn same_decision(&self, other: &PlacementRecord) -> bool {
        self.decision.same_intent(&other.decision)
            && self.shares.len() == other.shares.len()
            && self.shares.iter().zip(&other.shares).all(|(a, b)| {
                a.cluster == b.cluster
                    && a.held_reason == b.held_reason
                    && a.hold == b.hold
                    && same_assignment(a.assignment.as_ref(), b.assignment.as_ref())
            })
    }

    /// This record's share for `cluster`.
    pub fn share(&self, cluster: &str) -> Option<&ShareRecord> {
        self.shares.iter().find(|s| s.cluster == cluster)
    }

    /// The scale decision, when this record is a scale policy's.
    pub fn scale(&self) -> Option<&ScaleDecision> {
        match &self.decision {
            Decision::Scale(d) => Some(d),
            Decision::Promfed(_) | Decision::KafkaTopic(_) => None,
        }
    }

    /// The topic decision, when this record is a FederatedKafkaTopic's.
    pub fn topic(&self) -> Option<&KafkaTopicDecision> {
        match &self.decision {
            Decision::KafkaTopic(d) => Some(d),
            Decision::Scale(_) | Decision::Promfed(_) => None,
        }
    }

    /// The assignment `cluster` gets from this record (stored at `revision`), if any.
    pub fn assignment_for(&self, cluster: &str, revision: i64) -> Option<Assignment> {
        let spec = self.share(cluster)?.assignment.as_ref()?;
        Some(Assignment {
            policy: Some(self.policy.to_proto()),
            revision,
            spec: Some(spec.to_proto()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::distribution::PolicyKind;
    use accord_proto::v1::assignment;

    fn record(shares: &[(&str, i32)]) -> PlacementRecord {
        PlacementRecord {
            policy: PolicyRef::new(PolicyKind::CrossClusterScalePolicy, "default", "web"),
            generation: 1,
            decided_unix_millis: 0,
            shares: shares
                .iter()
                .map(|(c, r)| ShareRecord {
                    cluster: (*c).into(),
                    assignment: Some(AssignmentSpec::Scale(ScaleSpec::deployment(
                        "prod", "frontend", *r, "01ABC",
                    ))),
                    held_reason: None,
                    hold: None,
                })
                .collect(),
            decision: Decision::Scale(ScaleDecision {
                desired_replicas: shares.iter().map(|s| s.1).sum(),
                scale_request_id: "01ABC".into(),
                infeasible: None,
                moved_away: Vec::new(),
            }),
        }
    }

    fn with_request_id(mut r: PlacementRecord, id: &str) -> PlacementRecord {
        for s in &mut r.shares {
            if let Some(AssignmentSpec::Scale(spec)) = &mut s.assignment {
                spec.scale_request_id = id.into();
            }
        }
        if let Decision::Scale(d) = &mut r.decision {
            d.scale_request_id = id.into();
        }
        r
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
        let mut b = with_request_id(a.clone(), "01XYZ");
        b.generation = 2;
        assert!(a.same_decision(&b));
        if let Some(AssignmentSpec::Scale(s)) = &mut b.shares[0].assignment {
            s.replicas = 8;
        }
        assert!(!a.same_decision(&b));
    }

    #[test]
    fn a_planned_share_without_an_id_matches_the_stored_decision() {
        let stored = record(&[("a", 7), ("b", 5)]);
        let planned = with_request_id(stored.clone(), "");
        assert!(planned.same_decision(&stored));
    }

    #[test]
    fn records_of_different_kinds_never_decide_the_same() {
        let scale = record(&[("a", 7)]);
        let federation = PlacementRecord {
            decision: Decision::Promfed(PromfedDecision::default()),
            ..scale.clone()
        };
        assert!(!scale.same_decision(&federation));
        assert!(federation.same_decision(&federation.clone()));
        assert!(federation.scale().is_none());
        let json = serde_json::to_string(&federation).unwrap();
        assert_eq!(
            serde_json::from_str::<PlacementRecord>(&json).unwrap(),
            federation
        );
    }

    #[test]
    fn a_share_without_a_hold_keeps_its_stored_form_and_a_hold_round_trips() {
        let old = r#"{"cluster":"c","heldReason":"the cluster returned; ..."}"#;
        let share: ShareRecord = serde_json::from_str(old).unwrap();
        assert_eq!(share.hold, None);
        assert!(!share.had_share());
        assert_eq!(serde_json::to_string(&share).unwrap(), old);
        let held = ShareRecord {
            hold: Some(Hold::ReturnCooldown { until_unix: 230 }),
            ..share
        };
        let json = serde_json::to_string(&held).unwrap();
        assert!(
            json.contains(r#""hold":{"returnCooldown":{"untilUnix":230}}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<ShareRecord>(&json).unwrap(), held);
        assert!(held.in_return_cooldown() && !held.had_share());
    }

    #[test]
    fn decisions_keep_the_names_stored_records_were_written_with() {
        let name = |d: Decision| {
            let v = serde_json::to_value(d).unwrap();
            v.as_object().unwrap().keys().next().unwrap().clone()
        };
        assert_eq!(
            name(Decision::Promfed(PromfedDecision::default())),
            "federation"
        );
        assert_eq!(
            name(Decision::KafkaTopic(KafkaTopicDecision::default())),
            "topic"
        );
    }

    #[test]
    fn a_topic_record_survives_its_json_form_and_differs_from_other_kinds() {
        use accord_common::distribution::KafkaTopicSpec;
        let spec = KafkaTopicSpec {
            topic_name: "events".into(),
            partitions: 12,
            replication_factor: 3,
            ..Default::default()
        };
        let topic = PlacementRecord {
            decision: Decision::KafkaTopic(KafkaTopicDecision {
                spec: spec.clone(),
                conflicts: [("b".to_owned(), "team/older".to_owned())].into(),
            }),
            shares: vec![ShareRecord {
                cluster: "a".into(),
                assignment: Some(AssignmentSpec::KafkaTopic(spec)),
                held_reason: None,
                hold: None,
            }],
            ..record(&[])
        };
        let json = serde_json::to_string(&topic).unwrap();
        assert_eq!(
            serde_json::from_str::<PlacementRecord>(&json).unwrap(),
            topic
        );
        assert!(topic.topic().is_some() && topic.scale().is_none());
        assert!(!topic.same_decision(&record(&[("a", 1)])));
        let mut other = topic.clone();
        if let Decision::KafkaTopic(d) = &mut other.decision {
            d.conflicts.clear();
        }
        assert!(
            !topic.same_decision(&other),
            "a new conflict is a new decision"
        );
    }

    #[test]
    fn a_record_survives_its_json_form() {
        let r = record(&[("a", 7)]);
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<PlacementRecord>(&json).unwrap(), r);
    }
}
