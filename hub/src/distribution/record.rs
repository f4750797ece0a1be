//! The placements record of a placed object (`placements/<kind>/<ns>/<name>`, one etcd key per
//! placed object): every cluster's typed assignment, and the kind's own decision data beside it.
//!
//! The record is kind-neutral: what a cluster is asked to do is an
//! [`AssignmentSpec`](accord_common::distribution::AssignmentSpec), and what only one kind
//! needs to explain its decision (a scale policy's total and request id, say) is opaque
//! here: stored as `{"<tag>": {...}}` under `decision`, read and written by the kind in its
//! own type ([`PlacementRecord::typed`], [`PlacementRecord::stored`]).

use accord_common::distribution::{AssignmentSpec, PlacedRef};
use accord_proto::v1::Assignment;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// One cluster's part of a decision.
#[derive(Serialize, Deserialize, Clone, Debug)]
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
    /// The revision of the record that first sent this share as it is, when that was an
    /// earlier record than the one holding it ([`PlacementRecord::sent_since`]): the
    /// cluster's agent has it already, so the fan-out does not send it again, and a report
    /// of that revision or later is current for it. `None` for a share this record sends.
    /// Not part of what the share is: two shares that differ only here are equal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<i64>,
}

impl PartialEq for ShareRecord {
    fn eq(&self, other: &Self) -> bool {
        self.cluster == other.cluster
            && self.assignment == other.assignment
            && self.held_reason == other.held_reason
            && self.hold == other.hold
    }
}

impl Eq for ShareRecord {}

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
    /// The cluster has a taint the object does not tolerate (or no longer does).
    Tainted,
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
    /// Another placed object owns what this one would write there (e.g. an older topic of the
    /// same name).
    Conflict,
    /// A policy of the hub does not allow sending it (e.g. a Deny KafkaTopicPolicy).
    Refused,
    /// A progressive rollout has not reached the cluster, and it ran no revision that
    /// succeeded before ([`crate::distribution::rollout`]).
    AwaitingRollout,
}

impl ShareRecord {
    /// Whether the cluster holds a placement by this share: sent something, not held back,
    /// and not a removal (`remove: true`).
    pub fn places(&self) -> bool {
        self.hold.is_none() && self.assignment.as_ref().is_some_and(|a| !a.removes())
    }

    /// The revision a report must be of (or later) to be about this share, in a record
    /// stored at `revision`.
    pub fn current_from(&self, revision: i64) -> i64 {
        self.since.unwrap_or(revision)
    }

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

/// A placed object's decision, as stored in etcd; `D` is the kind's own decision data (opaque
/// JSON, `{"<tag>": {...}}`, where the record is read kind-neutrally).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRecord<D = serde_json::Value> {
    /// The placed object (stored under its first name, `policy`, so that every stored
    /// record stays readable).
    #[serde(rename = "policy")]
    pub placed: PlacedRef,
    /// `metadata.generation` of the placed object the decision was made for.
    pub generation: i64,
    /// When it was decided, Unix milliseconds.
    pub decided_unix_millis: i64,
    /// Every cluster's share, in the placed object's order.
    pub shares: Vec<ShareRecord>,
    /// The kind's own decision data.
    pub decision: D,
    /// W3C traceparent of the change that wrote this record (the hub's span of it), sent
    /// with every assignment of the record; empty when the hub does not trace. Not part of
    /// the decision: [`PlacementKind::same_intent`](crate::controllers::placement::PlacementKind::same_intent)
    /// ignores it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub traceparent: String,
}

impl<D> PlacementRecord<D> {
    /// This record's share for `cluster`.
    pub fn share(&self, cluster: &str) -> Option<&ShareRecord> {
        self.shares.iter().find(|s| s.cluster == cluster)
    }

    /// The assignment `cluster` gets from this record (stored at `revision`), if any.
    pub fn assignment_for(&self, cluster: &str, revision: i64) -> Option<Assignment> {
        self.assignment_of(self.share(cluster)?, revision)
    }

    /// The assignment `share` (one of this record's) carries, at `revision`, if any.
    pub fn assignment_of(&self, share: &ShareRecord, revision: i64) -> Option<Assignment> {
        let spec = share.assignment.as_ref()?;
        Some(Assignment {
            placed: Some(self.placed.to_proto()),
            revision,
            spec: Some(spec.to_proto()),
            traceparent: self.traceparent.clone(),
        })
    }

    /// Marks each share that `previous` (stored at `previous_revision`) already sent as it
    /// is with the revision it was first sent at, and clears the mark of every other: what
    /// the fan-out sends of this record is only what changed.
    pub fn sent_since<E>(&mut self, previous: Option<(&PlacementRecord<E>, i64)>) {
        let before: std::collections::HashMap<&str, &ShareRecord> = previous
            .map(|(p, _)| p.shares.iter().map(|s| (s.cluster.as_str(), s)).collect())
            .unwrap_or_default();
        for share in &mut self.shares {
            share.since = match (before.get(share.cluster.as_str()), previous) {
                (Some(old), Some((_, revision))) if *old == share && share.assignment.is_some() => {
                    Some(old.current_from(revision))
                }
                _ => None,
            };
        }
    }

    /// The same record with other decision data.
    fn with_decision<E>(&self, decision: E) -> PlacementRecord<E> {
        PlacementRecord {
            placed: self.placed.clone(),
            generation: self.generation,
            decided_unix_millis: self.decided_unix_millis,
            shares: self.shares.clone(),
            decision,
            traceparent: self.traceparent.clone(),
        }
    }
}

impl PlacementRecord {
    /// The record with its decision data read as a kind's `D` stored under `tag`; `None`
    /// when the record holds another kind's decision (or one that does not decode).
    pub fn typed<D: DeserializeOwned>(&self, tag: &str) -> Option<PlacementRecord<D>> {
        let data = self.decision.get(tag)?;
        serde_json::from_value(data.clone())
            .ok()
            .map(|d| self.with_decision(d))
    }
}

impl<D: Serialize> PlacementRecord<D> {
    /// The record as stored: the decision data under `tag`.
    pub fn stored(&self, tag: &str) -> PlacementRecord {
        let data = serde_json::to_value(&self.decision).unwrap_or_default();
        self.with_decision(serde_json::json!({ tag: data }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::distribution::{PlacedKind, ScaleSpec};
    use accord_proto::v1::assignment;

    /// A kind's decision data, as any kind defines its own.
    #[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Made {
        total: i32,
        request_id: String,
    }

    fn record(shares: &[(&str, i32)]) -> PlacementRecord<Made> {
        PlacementRecord {
            placed: PlacedRef::new(PlacedKind::CrossClusterScalePolicy, "default", "web"),
            generation: 1,
            decided_unix_millis: 0,
            shares: shares
                .iter()
                .map(|(c, r)| ShareRecord {
                    since: None,
                    cluster: (*c).into(),
                    assignment: Some(AssignmentSpec::Scale(ScaleSpec::deployment(
                        "prod", "frontend", *r, "01ABC",
                    ))),
                    held_reason: None,
                    hold: None,
                })
                .collect(),
            decision: Made {
                total: shares.iter().map(|s| s.1).sum(),
                request_id: "01ABC".into(),
            },
            traceparent: String::new(),
        }
    }

    #[test]
    fn a_share_sent_before_as_it_is_keeps_the_revision_it_was_sent_at() {
        let first = record(&[("a", 1), ("b", 1)]);
        let mut second = record(&[("a", 2), ("b", 1), ("c", 1)]);
        second.sent_since(Some((&first, 10)));
        let since: Vec<Option<i64>> = second.shares.iter().map(|s| s.since).collect();
        assert_eq!(since, [None, Some(10), None], "only b is unchanged");
        // Unchanged again: still the revision that first sent it; changed: sent again.
        let mut third = record(&[("a", 2), ("b", 1), ("c", 3)]);
        third.sent_since(Some((&second, 20)));
        let since: Vec<Option<i64>> = third.shares.iter().map(|s| s.since).collect();
        assert_eq!(since, [Some(20), Some(10), None]);
        assert_eq!(third.shares[1].current_from(30), 10);
        assert_eq!(third.shares[2].current_from(30), 30);
        // The mark is not part of what a share is, and a first record sends everything.
        assert_eq!(third.shares, record(&[("a", 2), ("b", 1), ("c", 3)]).shares);
        third.sent_since(None::<(&PlacementRecord<Made>, i64)>);
        assert!(third.shares.iter().all(|s| s.since.is_none()));
    }

    #[test]
    fn a_cluster_with_a_share_gets_its_assignment_at_the_record_revision() {
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
        assert!(record(&[("a", 7)]).assignment_for("c", 42).is_none());
    }

    #[test]
    fn a_records_trace_travels_with_its_assignments_and_an_untraced_one_stores_none() {
        let untraced = record(&[("a", 1)]);
        let json = serde_json::to_value(untraced.stored("scale")).unwrap();
        assert!(json.get("traceparent").is_none(), "{json}");
        assert_eq!(untraced.assignment_for("a", 3).unwrap().traceparent, "");
        let mut traced = record(&[("a", 1)]);
        traced.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into();
        let stored = traced.stored("scale");
        let back: PlacementRecord =
            serde_json::from_str(&serde_json::to_string(&stored).unwrap()).unwrap();
        assert_eq!(back.traceparent, traced.traceparent);
        assert_eq!(
            back.assignment_for("a", 3).unwrap().traceparent,
            traced.traceparent
        );
    }

    #[test]
    fn the_decision_data_is_stored_under_the_kinds_tag_and_read_back_only_by_that_tag() {
        let typed = record(&[("a", 7), ("b", 5)]);
        let stored = typed.stored("scale");
        assert_eq!(
            stored.decision,
            serde_json::json!({"scale": {"total": 12, "requestId": "01ABC"}})
        );
        assert_eq!(stored.typed::<Made>("scale"), Some(typed.clone()));
        assert_eq!(
            stored.typed::<Made>("kafkaTopic"),
            None,
            "another kind's tag"
        );
        let json = serde_json::to_string(&stored).unwrap();
        let back: PlacementRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back, stored, "the stored form survives its JSON");
        assert_eq!(back.typed::<Made>("scale"), Some(typed));
    }

    #[test]
    fn a_record_written_before_the_decision_became_opaque_still_reads() {
        let json = r#"{"policy":{"kind":"CrossClusterScalePolicy","namespace":"default","name":"web"},
            "generation":3,"decidedUnixMillis":5,
            "shares":[{"cluster":"a","heldReason":"unavailable"}],
            "decision":{"scale":{"total":0,"requestId":"01X"}}}"#;
        let stored: PlacementRecord = serde_json::from_str(json).unwrap();
        let typed = stored.typed::<Made>("scale").unwrap();
        assert_eq!(typed.decision.request_id, "01X");
        assert_eq!(typed.shares[0].held_reason.as_deref(), Some("unavailable"));
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
}
