//! Kubernetes-style status conditions, computed as pure values.
//!
//! The hub computes the conditions it wants, merges them with the current ones here, and
//! writes status only when [`equal_ignoring_time`] says something changed. A condition's
//! `lastTransitionTime` moves only when its `status` changes; a new reason or message alone
//! keeps the old transition time.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Condition types Accord writes.
pub mod types {
    /// The object's intent holds everywhere it should.
    pub const READY: &str = "Ready";
    /// A change is being applied.
    pub const PROGRESSING: &str = "Progressing";
    /// Something keeps the object from its intent (see the reason).
    pub const DEGRADED: &str = "Degraded";
    /// ManagedCluster: an agent has registered for the cluster.
    pub const JOINED: &str = "Joined";
    /// ManagedCluster: the agent is connected and heartbeating.
    pub const AVAILABLE: &str = "Available";
    /// FederatedKafkaTopic: a KafkaTopicPolicy is violated.
    pub const POLICY_VIOLATION: &str = "PolicyViolation";
    /// CrossClusterScalePolicy with autoscaling: the metric is read and decisions are made
    /// (False while the circuit breaker is open or the metric fails).
    pub const SCALING_ACTIVE: &str = "ScalingActive";
}

/// Condition reasons Accord writes (CamelCase, machine-readable).
pub mod reasons {
    /// Ready: every placement is synced and ready.
    pub const ALL_PLACEMENTS_SYNCED: &str = "AllPlacementsSynced";
    /// Ready: some placement is not synced or not ready yet.
    pub const NOT_ALL_PLACEMENTS_READY: &str = "NotAllPlacementsReady";
    /// Ready: the hub cannot act on the spec (it fails validation or cannot be decoded).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// Event: the object's `accord.io/traceparent` annotation is not a W3C traceparent; the
    /// change is traced without the user's parent.
    pub const INVALID_TRACEPARENT: &str = "InvalidTraceparent";
    /// Event: the placement asks for what the fleet cannot give now (a spread's
    /// `minGroups`); nothing new is placed until it can.
    pub const PLACEMENT_UNSATISFIED: &str = "PlacementUnsatisfied";
    /// ScalingActive: the metric answers and decisions are made.
    pub const METRIC_AVAILABLE: &str = "MetricAvailable";
    /// ScalingActive: the last query failed; the count holds.
    pub const METRIC_FAILED: &str = "MetricFailed";
    /// ScalingActive: the circuit breaker is open; the count holds where it is.
    pub const BREAKER_OPEN: &str = "BreakerOpen";
    /// ScalingActive: no sample read yet.
    pub const AWAITING_METRIC: &str = "AwaitingMetric";
    /// Progressing: a decision is being applied.
    pub const ROLLING_OUT: &str = "RollingOut";
    /// Progressing: nothing in flight.
    pub const SETTLED: &str = "Settled";
    /// Degraded: the total cannot be placed within the bounds.
    pub const INFEASIBLE: &str = "Infeasible";
    /// Degraded: some placement is in trouble.
    pub const PLACEMENT_PROBLEMS: &str = "PlacementProblems";
    /// Degraded: nothing wrong.
    pub const HEALTHY: &str = "Healthy";
    /// Joined: the agent registered.
    pub const REGISTERED: &str = "Registered";
    /// Joined: no agent registered yet.
    pub const NOT_REGISTERED: &str = "NotRegistered";
    /// Available: the agent's stream is up.
    pub const AGENT_CONNECTED: &str = "AgentConnected";
    /// Available: no heartbeat within the timeout.
    pub const AGENT_DISCONNECTED: &str = "AgentDisconnected";
}

/// Whether status `new` differs from `old` (none yet: it does) in anything but the
/// conditions' timestamps, so that status is written only when something changed.
/// `conditions` reaches a status's conditions.
pub fn status_changed<S: Clone + PartialEq>(
    old: Option<&S>,
    new: &S,
    conditions: fn(&mut S) -> &mut Vec<Condition>,
) -> bool {
    let Some(old) = old else { return true };
    let (mut old, mut new) = (old.clone(), new.clone());
    let (old_conditions, new_conditions) = (
        std::mem::take(conditions(&mut old)),
        std::mem::take(conditions(&mut new)),
    );
    !equal_ignoring_time(&old_conditions, &new_conditions) || old != new
}

/// Condition status values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known, e.g. the agent stopped reporting.
    Unknown,
}

impl Status {
    /// As written in `status` of a Condition.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

/// A condition the caller wants to hold, without timestamps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// Condition type, e.g. `Ready`.
    pub type_: String,
    /// Its status.
    pub status: Status,
    /// CamelCase machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl Desired {
    /// Shorthand constructor.
    pub fn new(
        type_: impl Into<String>,
        status: Status,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Merges `desired` into `old`: conditions of types not in `desired` are kept untouched (so
/// several writers may own different types); a desired condition keeps the old
/// `lastTransitionTime` when its status did not change and takes `now` otherwise.
/// `observed_generation` is set on every desired condition. Order: old conditions in their
/// order, then new types in the order given.
pub fn merge(
    old: &[Condition],
    desired: &[Desired],
    observed_generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = old.to_vec();
    for d in desired {
        let status = d.status.as_str();
        match out.iter_mut().find(|c| c.type_ == d.type_) {
            Some(existing) => {
                if existing.status != status {
                    existing.last_transition_time = now.clone();
                }
                existing.status = status.to_owned();
                existing.reason = d.reason.clone();
                existing.message = d.message.clone();
                existing.observed_generation = observed_generation;
            }
            None => out.push(Condition {
                type_: d.type_.clone(),
                status: status.to_owned(),
                reason: d.reason.clone(),
                message: d.message.clone(),
                observed_generation,
                last_transition_time: now.clone(),
            }),
        }
    }
    out
}

/// True when both lists hold the same conditions (by type, in any order), comparing
/// everything but `lastTransitionTime`. Equal means "no status write needed".
pub fn equal_ignoring_time(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len()
        && a.iter().all(|x| {
            b.iter().any(|y| {
                x.type_ == y.type_
                    && x.status == y.status
                    && x.reason == y.reason
                    && x.message == y.message
                    && x.observed_generation == y.observed_generation
            })
        })
}

/// The condition of `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// True when the condition of `type_` is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn ready(status: Status, reason: &str) -> Desired {
        Desired::new("Ready", status, reason, format!("because {reason}"))
    }

    #[test]
    fn new_condition_takes_now_as_transition_time() {
        let out = merge(&[], &[ready(Status::True, "AllSynced")], Some(2), &at(100));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].status, "True");
        assert_eq!(out[0].last_transition_time, at(100));
        assert_eq!(out[0].observed_generation, Some(2));
    }

    #[test]
    fn transition_time_stays_when_only_reason_or_message_changes() {
        let old = merge(&[], &[ready(Status::True, "AllSynced")], Some(1), &at(100));
        let out = merge(
            &old,
            &[ready(Status::True, "StillSynced")],
            Some(2),
            &at(200),
        );
        assert_eq!(out[0].last_transition_time, at(100));
        assert_eq!(out[0].reason, "StillSynced");
        assert_eq!(out[0].observed_generation, Some(2));
    }

    #[test]
    fn transition_time_moves_when_status_changes() {
        let old = merge(&[], &[ready(Status::True, "AllSynced")], Some(1), &at(100));
        let out = merge(&old, &[ready(Status::False, "Degraded")], Some(1), &at(200));
        assert_eq!(out[0].status, "False");
        assert_eq!(out[0].last_transition_time, at(200));
    }

    #[test]
    fn conditions_of_other_types_are_kept() {
        let old = merge(
            &[],
            &[Desired::new("Joined", Status::True, "Registered", "joined")],
            None,
            &at(1),
        );
        let out = merge(&old, &[ready(Status::True, "AllSynced")], None, &at(2));
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].type_, "Joined");
        assert_eq!(out[0].last_transition_time, at(1));
        assert_eq!(out[1].type_, "Ready");
    }

    #[test]
    fn recomputing_the_same_conditions_later_needs_no_write() {
        let old = merge(&[], &[ready(Status::True, "AllSynced")], Some(1), &at(100));
        let again = merge(&old, &[ready(Status::True, "AllSynced")], Some(1), &at(999));
        assert!(equal_ignoring_time(&old, &again));
        assert_eq!(again, old, "nothing at all changed, not even the timestamp");
    }

    #[test]
    fn equality_ignores_time_and_order_but_not_content() {
        let a = merge(
            &[],
            &[
                ready(Status::True, "A"),
                Desired::new("Degraded", Status::False, "Ok", "ok"),
            ],
            None,
            &at(1),
        );
        let mut b = a.clone();
        b.reverse();
        b[0].last_transition_time = at(50);
        assert!(equal_ignoring_time(&a, &b));
        b[0].message = "changed".into();
        assert!(!equal_ignoring_time(&a, &b));
        assert!(!equal_ignoring_time(&a, &a[..1]));
    }

    #[test]
    fn generation_change_alone_is_a_change() {
        let a = merge(&[], &[ready(Status::True, "A")], Some(1), &at(1));
        let b = merge(&a, &[ready(Status::True, "A")], Some(2), &at(2));
        assert!(!equal_ignoring_time(&a, &b));
        assert_eq!(b[0].last_transition_time, at(1));
    }

    #[test]
    fn lookups_find_conditions_by_type() {
        let c = merge(&[], &[ready(Status::True, "A")], None, &at(1));
        assert!(is_true(&c, "Ready"));
        assert!(!is_true(&c, "Available"));
        assert!(find(&c, "Ready").is_some());
    }
}
