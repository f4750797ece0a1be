//! What a FederatedKafkaUser asks of its member clusters: one [`KafkaUserSpec`], the same
//! for every selected cluster that is known and where no older FederatedKafkaUser owns the
//! user name, in Kafka's own names: one ACL binding per operation (`Topic`, `Prefixed`,
//! `Write`, `Allow`) and the quotas by Kafka's keys (`producer_byte_rate`, ...).

use std::collections::{BTreeMap, BTreeSet};

use accord_common::distribution::{AssignmentSpec, KafkaAcl, KafkaUserSpec, ScramCredential};
use accord_crds::kafka_user::FederatedKafkaUser;

use super::KafkaUserDecision;
use crate::distribution::ShareRecord;
use crate::distribution::claim;
use crate::distribution::select::SelectedCluster;

/// Every ACL binding of `user`'s principal: one per ACL and operation, in a stable order
/// and without repeats.
pub fn acls(user: &FederatedKafkaUser) -> Vec<KafkaAcl> {
    let mut bindings = BTreeSet::new();
    for acl in &user.spec.acls {
        for operation in &acl.operations {
            bindings.insert(KafkaAcl {
                resource_type: acl.resource.resource_type.kafka_name().to_owned(),
                resource_name: acl.resource.name.clone(),
                pattern_type: acl.resource.pattern_type().kafka_name().to_owned(),
                operation: operation.kafka_name().to_owned(),
                host: acl.host().to_owned(),
                permission: acl.permission().kafka_name().to_owned(),
            });
        }
    }
    bindings.into_iter().collect()
}

/// `user`'s quotas by Kafka's keys (only those the spec sets).
pub fn quotas(user: &FederatedKafkaUser) -> BTreeMap<String, f64> {
    user.spec
        .quotas
        .as_ref()
        .map(|q| {
            q.by_kafka_key()
                .into_iter()
                .filter(|(_, v)| v.is_finite())
                .map(|(k, v)| (k.to_owned(), v))
                .collect()
        })
        .unwrap_or_default()
}

/// The assignment for `user` with its decided `credential`.
pub fn assignment(user: &FederatedKafkaUser, credential: ScramCredential) -> KafkaUserSpec {
    KafkaUserSpec {
        username: user.user_name().to_owned(),
        credential: Some(credential),
        acls: acls(user),
        quotas: quotas(user),
        remove: false,
    }
}

/// What a placement conflicted over user `username` says.
pub fn conflict_message(username: &str, owner: &str) -> String {
    claim::message(
        &format!("Kafka user {username}"),
        "FederatedKafkaUser",
        owner,
    )
}

/// One share per selected cluster and the decision: `spec` for every known cluster whose
/// user name no older FederatedKafkaUser owns; nothing (and why) elsewhere.
pub fn decide(
    selected: &[SelectedCluster],
    spec: &KafkaUserSpec,
    conflicts: &BTreeMap<String, String>,
) -> (Vec<ShareRecord>, KafkaUserDecision) {
    let (shares, conflicts) = claim::uniform_shares(
        selected,
        &AssignmentSpec::KafkaUser(spec.clone()),
        conflicts,
        |owner| conflict_message(&spec.username, owner),
    );
    (
        shares,
        KafkaUserDecision {
            spec: spec.clone(),
            conflicts,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(spec: serde_json::Value) -> FederatedKafkaUser {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "accord.io/v1beta1", "kind": "FederatedKafkaUser",
            "metadata": {"name": "orders-writer", "namespace": "team"},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn acls_become_one_binding_per_operation_in_kafkas_names() {
        let u = user(serde_json::json!({
            "authentication": {"type": "scram-sha-512"},
            "acls": [
                {"resource": {"type": "topic", "name": "orders.", "patternType": "prefixed"},
                 "operations": ["Write", "Describe", "Write"], "host": "*", "type": "allow"},
                {"resource": {"type": "transactionalId", "name": "tx"},
                 "operations": ["Write"], "type": "deny"},
            ],
            "placement": {"clusters": ["east"]},
        }));
        let bindings = acls(&u);
        let shown: Vec<String> = bindings
            .iter()
            .map(|a| {
                format!(
                    "{}:{}:{} {} {} {}",
                    a.resource_type,
                    a.pattern_type,
                    a.resource_name,
                    a.operation,
                    a.permission,
                    a.host
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                "Topic:Prefixed:orders. Describe Allow *",
                "Topic:Prefixed:orders. Write Allow *",
                "TransactionalId:Literal:tx Write Deny *",
            ]
        );
    }

    #[test]
    fn quotas_take_kafkas_keys_and_only_those_set() {
        let u = user(serde_json::json!({
            "authentication": {"type": "scram-sha-512"},
            "quotas": {"producerByteRate": 1048576, "requestPercentage": 50},
            "placement": {"clusters": ["east"]},
        }));
        assert_eq!(
            quotas(&u),
            BTreeMap::from([
                ("producer_byte_rate".to_owned(), 1_048_576.0),
                ("request_percentage".to_owned(), 50.0),
            ])
        );
    }

    #[test]
    fn a_conflicted_cluster_gets_nothing_and_names_the_owner() {
        let selected = [
            SelectedCluster {
                name: "east".into(),
                known: true,
            },
            SelectedCluster {
                name: "west".into(),
                known: true,
            },
        ];
        let spec = KafkaUserSpec {
            username: "orders-writer".into(),
            ..Default::default()
        };
        let conflicts = BTreeMap::from([("west".to_owned(), "other/owner".to_owned())]);
        let (shares, decision) = decide(&selected, &spec, &conflicts);
        assert!(shares[0].assignment.is_some());
        assert!(shares[1].assignment.is_none());
        let why = shares[1].held_reason.as_deref().unwrap();
        assert!(why.contains("Kafka user orders-writer"), "{why}");
        assert!(why.contains("FederatedKafkaUser other/owner"), "{why}");
        assert_eq!(decision.conflicts, conflicts);
    }
}
