//! A FederatedKafkaTopic's status from its placements record, the agents' reports and the
//! KafkaTopicPolicy check: one placement per selected cluster (with the partitions and
//! replication factor the broker reports), and the `Ready`, `Degraded` and
//! `PolicyViolation` conditions. Also a KafkaTopicPolicy's status.

use accord_common::distribution::{Observed, PlacementState};
use accord_crds::conditions::{self, Desired, Status, reasons as common, types};
use accord_crds::kafka_topic::{FederatedKafkaTopicStatus, KafkaTopicPolicyStatus, TopicPlacement};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::controller::KafkaTopics;
use super::policy::{self, Violation};
use super::{KafkaTopicDecision, plan, reasons};
use crate::controllers::placement::{Aggregation, Note};
use crate::controllers::transitions::{self, Meaning};
use crate::distribution::ShareRecord;
use crate::distribution::reported::{self, shown};
use crate::distribution::select::ClusterInfo;
use crate::store::StatusRecord;

pub use crate::distribution::reported::{WAITING_FOR_AGENT, WAITING_FOR_CHANGE};
/// Message of a placement whose cluster's agent is not connected.
pub const AGENT_DISCONNECTED: &str = "the cluster's agent is not connected; the topic is \
     as last reported";

/// What a topic's decision leaves for its status.
#[derive(Debug, Default)]
pub struct TopicFacts {
    /// Every KafkaTopicPolicy rule the topic breaks now.
    pub violations: Vec<Violation>,
}

/// The status a topic should show.
pub fn aggregate(inputs: &Aggregation<'_, KafkaTopics>) -> FederatedKafkaTopicStatus {
    let violations = inputs.facts.violations.as_slice();
    let revision = inputs.placed.revision;
    let placements: Vec<TopicPlacement> = inputs.placed.each(|share, report, cluster| {
        placement(share, inputs.decision, revision, report, cluster)
    });
    let denied = !policy::denying(violations).is_empty();
    let mut desired = topic_conditions(&placements, violations);
    if denied {
        desired[0] = Desired::new(
            types::READY,
            Status::False,
            reasons::POLICY_VIOLATED,
            format!(
                "not propagated: {}",
                policy::message(&policy::denying(violations))
            ),
        );
    }
    let old_conditions = inputs
        .old
        .map(|o| o.conditions.as_slice())
        .unwrap_or_default();
    FederatedKafkaTopicStatus {
        rollout: None,
        observed_generation: inputs.generation,
        conditions: conditions::merge(old_conditions, &desired, inputs.generation, inputs.now),
        placements,
        summary: None,
        selection: None,
        trace_id: None,
    }
}

/// One cluster's placement: `Conflict` where an older topic owns the name, else what its
/// agent last reported about the current assignment, or why there is nothing to show yet.
pub fn placement(
    share: &ShareRecord,
    decision: Option<&KafkaTopicDecision>,
    revision: i64,
    report: Option<&StatusRecord>,
    cluster: Option<&ClusterInfo>,
) -> TopicPlacement {
    let observed = report.and_then(|r| match &r.observed {
        Observed::KafkaTopic(t) if t.exists => Some(t),
        _ => None,
    });
    let owner = decision.and_then(|d| d.conflicts.get(&share.cluster));
    let (state, message) = if let Some(owner) = owner {
        let name = decision.map_or("", |d| d.spec.topic_name.as_str());
        (
            PlacementState::Conflict,
            Some(plan::conflict_message(name, owner)),
        )
    } else {
        reported::state(share, revision, report, cluster, AGENT_DISCONNECTED)
    };
    let conflicted = state == PlacementState::Conflict;
    TopicPlacement {
        cluster: share.cluster.clone(),
        state,
        // A conflicted cluster's topic is another object's: show nothing of it.
        partitions: observed.filter(|_| !conflicted).map(|o| o.partitions),
        replication_factor: observed
            .filter(|_| !conflicted)
            .map(|o| o.replication_factor),
        message,
        revision: None,
    }
}

/// `Ready` (every placement Synced), `Degraded` (some placement in trouble, naming them)
/// and `PolicyViolation` (which rules are broken; reason `PolicyViolated` when a `Deny`
/// policy is among them, else `AuditOnly`).
pub fn topic_conditions(placements: &[TopicPlacement], violations: &[Violation]) -> Vec<Desired> {
    let [ready, degraded] = reported::ready_and_degraded(
        &shown(placements),
        format!(
            "the topic is as specified in {}",
            reported::clusters(placements.len())
        ),
        "not synced yet",
    );
    vec![ready, degraded, policy_condition(violations)]
}

/// The `PolicyViolation` condition for `violations`.
pub fn policy_condition(violations: &[Violation]) -> Desired {
    if violations.is_empty() {
        Desired::new(
            types::POLICY_VIOLATION,
            Status::False,
            reasons::COMPLIANT,
            "",
        )
    } else if policy::denying(violations).is_empty() {
        Desired::new(
            types::POLICY_VIOLATION,
            Status::True,
            reasons::AUDIT_ONLY,
            policy::message(violations),
        )
    } else {
        Desired::new(
            types::POLICY_VIOLATION,
            Status::True,
            reasons::POLICY_VIOLATED,
            policy::message(violations),
        )
    }
}

/// How the Events read a topic's status: `Applied` is told when the topic is sent (one
/// Event per change), `Degraded` says whether it is healthy.
const MEANING: Meaning = Meaning {
    applied: None,
    healthy: (types::DEGRADED, false),
};

/// The Events the move from `old` to `new` tells: every kind's transitions (a placement
/// newly in `Error` or `Conflict`, unhealthy and healthy again), and a newly broken (or
/// differently broken) policy.
pub fn notes(
    old: Option<&FederatedKafkaTopicStatus>,
    new: &FederatedKafkaTopicStatus,
    generation: Option<i64>,
) -> Vec<Note> {
    let mut notes = transitions::of_statuses(old, new, generation, MEANING);
    let violation = |s: &FederatedKafkaTopicStatus| {
        conditions::find(&s.conditions, types::POLICY_VIOLATION)
            .filter(|c| c.status == "True")
            .map(|c| c.message.clone())
    };
    if let Some(message) = violation(new)
        && old.and_then(violation) != Some(message.clone())
    {
        notes.push(Note::warning(reasons::POLICY_VIOLATION_EVENT, message));
    }
    notes
}

/// A KafkaTopicPolicy's status: how many topics break it, and `Ready` (`False` with
/// `problem` when the policy itself cannot be evaluated).
pub fn policy_status(
    old: Option<&KafkaTopicPolicyStatus>,
    generation: Option<i64>,
    violating: usize,
    problem: Option<String>,
    now: &Time,
) -> KafkaTopicPolicyStatus {
    let ready = match problem {
        Some(problem) => Desired::new(types::READY, Status::False, common::INVALID_SPEC, problem),
        None => Desired::new(
            types::READY,
            Status::True,
            reasons::EVALUATED,
            format!(
                "{violating} FederatedKafkaTopic{} break{} this policy",
                if violating == 1 { "" } else { "s" },
                if violating == 1 { "s" } else { "" }
            ),
        ),
    };
    let old_conditions = old.map(|o| o.conditions.as_slice()).unwrap_or_default();
    KafkaTopicPolicyStatus {
        observed_generation: generation,
        violating_topics: Some(i32::try_from(violating).unwrap_or(i32::MAX)),
        conditions: conditions::merge(old_conditions, &[ready], generation, now),
    }
}

/// Whether a policy's `new` status differs from `old` in anything but timestamps.
pub fn policy_status_changed(
    old: Option<&KafkaTopicPolicyStatus>,
    new: &KafkaTopicPolicyStatus,
) -> bool {
    conditions::status_changed(old, new, |s| &mut s.conditions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::reported::Placed;
    use crate::distribution::select::Clusters;
    use crate::distribution::select::available;
    use accord_common::distribution::{AssignmentSpec, KafkaTopicObserved, KafkaTopicSpec};
    use accord_crds::kafka_topic::Enforcement;
    use k8s_openapi::jiff::Timestamp;
    use std::collections::HashMap;

    fn spec() -> KafkaTopicSpec {
        KafkaTopicSpec {
            topic_name: "events".into(),
            partitions: 12,
            replication_factor: 3,
            ..Default::default()
        }
    }

    fn share(cluster: &str) -> ShareRecord {
        ShareRecord {
            since: None,
            cluster: cluster.into(),
            assignment: Some(AssignmentSpec::KafkaTopic(spec())),
            held_reason: None,
            hold: None,
        }
    }

    fn held(cluster: &str, reason: &str) -> ShareRecord {
        ShareRecord {
            since: None,
            cluster: cluster.into(),
            assignment: None,
            held_reason: Some(reason.into()),
            hold: Some(crate::distribution::Hold::Refused),
        }
    }

    fn report(
        state: PlacementState,
        revision: i64,
        partitions: i32,
        message: &str,
    ) -> StatusRecord {
        StatusRecord {
            resource_version: String::new(),
            generation: 0,
            applied_revision: revision,
            state,
            message: message.into(),
            observed_unix_millis: 1_000,
            observed: Observed::KafkaTopic(KafkaTopicObserved {
                partitions,
                replication_factor: 3,
                exists: true,
            }),
            api_server_unavailable: false,
        }
    }

    fn violation(enforcement: Enforcement) -> Violation {
        Violation {
            policy: "min-12".into(),
            enforcement,
            field: "spec.partitions",
            rule: "must be at least 12 (is 6)".into(),
        }
    }

    struct Case<'a> {
        shares: &'a [ShareRecord],
        decision: Option<&'a KafkaTopicDecision>,
        reports: &'a [(&'a str, StatusRecord)],
        clusters: Clusters,
        violations: &'a [Violation],
        old: Option<&'a FederatedKafkaTopicStatus>,
    }

    fn status(case: Case<'_>) -> FederatedKafkaTopicStatus {
        let reports: HashMap<String, StatusRecord> = case
            .reports
            .iter()
            .map(|(c, r)| ((*c).to_owned(), r.clone()))
            .collect();
        let now = Time(Timestamp::from_second(1_000).unwrap());
        aggregate(&Aggregation {
            placed: Placed {
                shares: case.shares,
                revision: 10,
                reports: &reports,
                clusters: &case.clusters,
            },
            decision: case.decision,
            facts: &TopicFacts {
                violations: case.violations.to_vec(),
            },
            generation: Some(4),
            old: case.old,
            now: &now,
        })
    }

    fn decision(conflicts: &[(&str, &str)]) -> KafkaTopicDecision {
        KafkaTopicDecision {
            spec: spec(),
            conflicts: conflicts
                .iter()
                .map(|(c, o)| ((*c).to_owned(), (*o).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn every_placement_synced_with_the_brokers_numbers_makes_the_topic_ready() {
        let d = decision(&[]);
        let st = status(Case {
            shares: &[share("a"), share("b")],
            decision: Some(&d),
            reports: &[
                ("a", report(PlacementState::Synced, 10, 12, "")),
                ("b", report(PlacementState::Synced, 12, 12, "")),
            ],
            clusters: available(&["a", "b"]),
            violations: &[],
            old: None,
        });
        assert_eq!(st.observed_generation, Some(4));
        assert_eq!(st.placements[0].state, PlacementState::Synced);
        assert_eq!(st.placements[0].partitions, Some(12));
        assert_eq!(st.placements[0].replication_factor, Some(3));
        assert_eq!(st.placements[0].message, None);
        assert!(conditions::is_true(&st.conditions, types::READY));
        assert!(!conditions::is_true(&st.conditions, types::DEGRADED));
        let pv = conditions::find(&st.conditions, types::POLICY_VIOLATION).unwrap();
        assert_eq!(
            (pv.status.as_str(), pv.reason.as_str()),
            ("False", "Compliant")
        );
    }

    #[test]
    fn unreported_and_outdated_placements_are_pending_and_unknown_clusters_say_why() {
        let d = decision(&[]);
        let st = status(Case {
            shares: &[
                share("a"),
                share("b"),
                held("mars", "no ManagedCluster mars"),
            ],
            decision: Some(&d),
            reports: &[("a", report(PlacementState::Synced, 9, 6, ""))],
            clusters: available(&["a", "b"]),
            violations: &[],
            old: None,
        });
        assert_eq!(st.placements[0].state, PlacementState::Pending);
        assert_eq!(
            st.placements[0].message.as_deref(),
            Some(WAITING_FOR_CHANGE)
        );
        assert_eq!(st.placements[0].partitions, Some(6), "as last reported");
        assert_eq!(st.placements[1].state, PlacementState::Pending);
        assert_eq!(st.placements[1].message.as_deref(), Some(WAITING_FOR_AGENT));
        assert_eq!(st.placements[2].state, PlacementState::Pending);
        assert_eq!(
            st.placements[2].message.as_deref(),
            Some("no ManagedCluster mars")
        );
        let ready = conditions::find(&st.conditions, types::READY).unwrap();
        assert_eq!(ready.status, "False");
        assert!(ready.message.contains("a (Pending)"), "{}", ready.message);
    }

    #[test]
    fn a_conflict_names_the_owner_degrades_the_topic_and_shows_nothing_of_its_topic() {
        let d = decision(&[("b", "team-a/events")]);
        let st = status(Case {
            shares: &[share("a"), held("b", "held")],
            decision: Some(&d),
            reports: &[
                ("a", report(PlacementState::Synced, 10, 12, "")),
                ("b", report(PlacementState::Synced, 10, 24, "")),
            ],
            clusters: available(&["a", "b"]),
            violations: &[],
            old: None,
        });
        let b = &st.placements[1];
        assert_eq!(b.state, PlacementState::Conflict);
        assert!(
            b.message.as_deref().unwrap().contains("team-a/events"),
            "{b:?}"
        );
        assert_eq!(b.partitions, None);
        let degraded = conditions::find(&st.conditions, types::DEGRADED).unwrap();
        assert_eq!(degraded.status, "True");
        assert!(
            degraded.message.starts_with("b: Conflict: topic events"),
            "{}",
            degraded.message
        );
        assert!(!conditions::is_true(&st.conditions, types::READY));
        let warnings = notes(None, &st, Some(1));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(warnings[0].reason, transitions::reasons::CONFLICT);
        assert!(notes(Some(&st), &st, Some(1)).is_empty(), "announced once");
    }

    #[test]
    fn errors_and_disconnected_clusters_degrade_the_topic() {
        let d = decision(&[]);
        let mut clusters = available(&["a"]);
        clusters.insert("b".into(), ClusterInfo::default());
        let st = status(Case {
            shares: &[share("a"), share("b")],
            decision: Some(&d),
            reports: &[
                (
                    "a",
                    report(
                        PlacementState::Error,
                        10,
                        24,
                        "NotSupported: partitions is 24 in Kafka and 12 in the spec; Kafka cannot lower a partition count",
                    ),
                ),
                ("b", report(PlacementState::Synced, 10, 12, "")),
            ],
            clusters,
            violations: &[],
            old: None,
        });
        assert_eq!(st.placements[0].state, PlacementState::Error);
        assert_eq!(st.placements[0].partitions, Some(24));
        assert_eq!(st.placements[1].state, PlacementState::Unavailable);
        assert_eq!(st.placements[1].partitions, Some(12));
        let degraded = conditions::find(&st.conditions, types::DEGRADED).unwrap();
        assert!(
            degraded
                .message
                .contains("a: Error: NotSupported: partitions is 24"),
            "{}",
            degraded.message
        );
        assert!(
            degraded.message.contains("b: Unavailable"),
            "{}",
            degraded.message
        );
        let warnings = notes(None, &st, Some(1));
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].reason, transitions::reasons::PLACEMENT_ERROR);
    }

    #[test]
    fn a_deny_violation_says_not_propagated_and_an_audit_one_only_warns() {
        let d = decision(&[]);
        let reports = [("a", report(PlacementState::Synced, 10, 12, ""))];
        let deny = [violation(Enforcement::Deny)];
        let st = status(Case {
            shares: &[share("a")],
            decision: Some(&d),
            reports: &reports,
            clusters: available(&["a"]),
            violations: &deny,
            old: None,
        });
        let pv = conditions::find(&st.conditions, types::POLICY_VIOLATION).unwrap();
        assert_eq!(
            (pv.status.as_str(), pv.reason.as_str()),
            ("True", "PolicyViolated")
        );
        assert!(
            pv.message
                .contains("spec.partitions: must be at least 12 (is 6)"),
            "{}",
            pv.message
        );
        let ready = conditions::find(&st.conditions, types::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "PolicyViolated")
        );
        assert!(
            ready.message.starts_with("not propagated: "),
            "{}",
            ready.message
        );
        let warnings: Vec<(String, String)> = notes(None, &st, Some(1))
            .into_iter()
            .map(|n| (n.reason, n.message))
            .collect();
        assert_eq!(
            warnings,
            vec![(reasons::POLICY_VIOLATION_EVENT.into(), pv.message.clone())]
        );
        assert!(notes(Some(&st), &st, Some(1)).is_empty());

        let audit = [violation(Enforcement::Audit)];
        let st = status(Case {
            shares: &[share("a")],
            decision: Some(&d),
            reports: &reports,
            clusters: available(&["a"]),
            violations: &audit,
            old: None,
        });
        let pv = conditions::find(&st.conditions, types::POLICY_VIOLATION).unwrap();
        assert_eq!(
            (pv.status.as_str(), pv.reason.as_str()),
            ("True", "AuditOnly")
        );
        assert!(
            conditions::is_true(&st.conditions, types::READY),
            "propagated"
        );
        assert_eq!(notes(None, &st, Some(1)).len(), 1);
    }

    #[test]
    fn an_unchanged_status_is_not_rewritten_and_a_state_change_is() {
        let d = decision(&[]);
        let shares = [share("a")];
        let with = |reports: &[(&str, StatusRecord)], old: Option<&FederatedKafkaTopicStatus>| {
            status(Case {
                shares: &shares,
                decision: Some(&d),
                reports,
                clusters: available(&["a"]),
                violations: &[],
                old,
            })
        };
        let synced = [("a", report(PlacementState::Synced, 10, 12, ""))];
        let first = with(&synced, None);
        let again = with(&synced, Some(&first));
        assert!(!conditions::status_changed(Some(&first), &again, |s| {
            &mut s.conditions
        }));
        let down = [(
            "a",
            report(PlacementState::Unavailable, 10, 12, "Kafka unreachable: x"),
        )];
        let later = with(&down, Some(&first));
        assert!(conditions::status_changed(Some(&first), &later, |s| &mut s.conditions));
        assert!(conditions::status_changed(None, &first, |s| &mut s.conditions));
    }

    #[test]
    fn a_policy_counts_the_topics_that_break_it_and_says_when_it_cannot_be_evaluated() {
        let now = Time(Timestamp::from_second(1_000).unwrap());
        let st = policy_status(None, Some(2), 3, None, &now);
        assert_eq!(st.violating_topics, Some(3));
        assert_eq!(st.observed_generation, Some(2));
        let ready = conditions::find(&st.conditions, types::READY).unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(ready.message, "3 FederatedKafkaTopics break this policy");
        assert!(!policy_status_changed(
            Some(&st),
            &policy_status(Some(&st), Some(2), 3, None, &now)
        ));
        let bad = policy_status(Some(&st), Some(3), 0, Some("bad pattern".into()), &now);
        assert!(policy_status_changed(Some(&st), &bad));
        let ready = conditions::find(&bad.conditions, types::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "InvalidSpec")
        );
    }
}
