//! FederatedKafkaUser: a SCRAM-SHA-512 user, its ACLs and its quotas kept alike in the
//! Kafka of every selected member cluster. The pure parts of its controller
//! ([`controller`]): the credential the hub derives from the management cluster's Secret
//! ([`credential`]: only a salt, the iteration count and the salted password ever leave
//! the management cluster, and the salted password only on an agent's stream), the one
//! assignment every selected cluster gets ([`plan`]), and the status from the agents'
//! reports ([`status`]). Two FederatedKafkaUsers naming one user in one cluster: the older
//! keeps it ([`crate::distribution::claim`]). The admission webhook checks the ACLs and
//! the KafkaTopicPolicies' rules for users ([`admission`]).
//!
//! Deletion with `deletionPolicy: Delete` (the default) waits for the members: the record
//! becomes a tombstone (`remove: true`) and the finalizer goes once each member reported
//! the user's credential, ACLs and quotas gone, or after the bound
//! ([`crate::distribution::deletion`]).

pub mod admission;
pub mod controller;
pub mod credential;
pub mod plan;
pub mod status;

use std::collections::BTreeMap;

use accord_common::distribution::KafkaUserSpec;
use serde::{Deserialize, Serialize};

/// The finalizer of a FederatedKafkaUser with `deletionPolicy: Delete`: its deletion waits
/// for the members to remove the user.
pub const FINALIZER: &str = "accord.io/kafka-user";

/// Event and condition reasons (those every kind tells are
/// `controllers::transitions::reasons`).
pub mod reasons {
    /// Normal Event: the hub generated the password Secret.
    pub const PASSWORD_GENERATED: &str = "PasswordGenerated";
    /// Ready=False: the password Secret is not there (yet).
    pub const WAITING_FOR_PASSWORD: &str = "WaitingForPassword";
    /// Degraded=True: some clusters' brokers keep no ACLs (no authorizer); the credential
    /// and quotas are kept there.
    pub const ACLS_UNKEPT: &str = "AclsNotKept";
}

/// A FederatedKafkaUser's decision data.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KafkaUserDecision {
    /// The assignment every selected cluster that is known and not in conflict gets (its
    /// credential without the salted password); the next decision keeps its salt while
    /// the password and iteration count stay the same.
    pub spec: KafkaUserSpec,
    /// Clusters where an older FederatedKafkaUser owns the user name: cluster →
    /// `<namespace>/<name>` of the owner. Nothing is sent to them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub conflicts: BTreeMap<String, String>,
}
