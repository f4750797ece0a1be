//! FederatedKafkaTopic and KafkaTopicPolicy: the pure decisions of the Kafka controller
//! ([`controller`]) and the admission webhook — which KafkaTopicPolicy rules
//! a topic breaks ([`policy`]), which FederatedKafkaTopic owns a topic name in a cluster
//! when two name the same one ([`crate::distribution::claim`], [`plan::conflict_message`]), the one assignment every selected cluster
//! gets ([`plan`]), the topic's and the policy's status ([`status`]), and when a deletion
//! with `deletionPolicy: Delete` is complete ([`deletion`]).
//!
//! Like federation, topics have no failover: every selected cluster gets the same
//! assignment, and a disconnected cluster keeps it.

pub mod admission;
pub mod controller;
pub mod deletion;
pub mod plan;
pub mod policy;
pub mod policy_status;
pub mod status;

use std::collections::BTreeMap;

use accord_common::distribution::KafkaTopicSpec;
use serde::{Deserialize, Serialize};

/// Finalizer that removes a topic's placements (and, with `deletionPolicy: Delete`, the
/// topics in every member's Kafka) before the object goes.
pub const FINALIZER: &str = "accord.io/kafka-topic";

/// Condition reasons and Event reasons of the Kafka controller (those every kind tells are
/// `controllers::transitions::reasons`).
pub mod reasons {
    /// PolicyViolation=True: a `Deny` policy is broken; nothing new is propagated.
    pub const POLICY_VIOLATED: &str = "PolicyViolated";
    /// PolicyViolation=True: only `Audit` policies are broken; the topic is propagated.
    pub const AUDIT_ONLY: &str = "AuditOnly";
    /// PolicyViolation=False: no policy is broken.
    pub const COMPLIANT: &str = "Compliant";
    /// Warning Event: a KafkaTopicPolicy is broken.
    pub const POLICY_VIOLATION_EVENT: &str = "PolicyViolation";
    /// KafkaTopicPolicy Ready=True: the policy is evaluated.
    pub const EVALUATED: &str = "Evaluated";
}

/// A FederatedKafkaTopic's decision data (stored under its tag, `topic`, in its placements
/// record).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct KafkaTopicDecision {
    /// The assignment every selected cluster that is known and not in conflict gets; the
    /// next decision's `removedConfig` is computed from it.
    pub spec: KafkaTopicSpec,
    /// Clusters where an older FederatedKafkaTopic owns the topic name: cluster →
    /// `<namespace>/<name>` of the owner. Nothing is sent to them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub conflicts: BTreeMap<String, String>,
}
