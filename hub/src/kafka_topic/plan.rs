//! What a FederatedKafkaTopic asks of its member clusters: one [`KafkaTopicSpec`], the same for
//! every selected cluster that is known and where no older topic owns the name, and the
//! placements record's shares.
//!
//! `removedConfig` carries the keys an earlier spec set and the current one does not, so
//! that agents put exactly those back to the broker default: the previous decision's
//! `removedConfig` and config keys, minus the keys the spec has now. A key no spec ever
//! named is never in it, so the agents never touch it.

use std::collections::{BTreeMap, BTreeSet};

use accord_common::distribution::{AssignmentSpec, KafkaTopicSpec};
use accord_crds::kafka_topic::FederatedKafkaTopic;

use super::KafkaTopicDecision;
use crate::distribution::ShareRecord;
use crate::distribution::claim;
use crate::distribution::select::SelectedCluster;

/// The assignment for `topic`, given the previous decision's assignment (if any).
pub fn assignment(
    topic: &FederatedKafkaTopic,
    previous: Option<&KafkaTopicSpec>,
) -> KafkaTopicSpec {
    let topic_name = topic.topic_name().to_owned();
    let config = topic.spec.config.clone();
    // Keys set for another topic name say nothing about this one.
    let removed_config = previous
        .filter(|p| p.topic_name == topic_name)
        .map(|p| {
            p.removed_config
                .iter()
                .chain(p.config.keys())
                .filter(|k| !config.contains_key(*k))
                .cloned()
                .collect::<BTreeSet<String>>()
                .into_iter()
                .collect()
        })
        .unwrap_or_default();
    KafkaTopicSpec {
        topic_name,
        partitions: topic.spec.partitions,
        replication_factor: topic.spec.replication_factor,
        config,
        removed_config,
        delete: false,
    }
}

/// What a placement conflicted over topic `topic_name` says.
pub fn conflict_message(topic_name: &str, owner: &str) -> String {
    crate::distribution::claim::message(
        &format!("topic {topic_name}"),
        "FederatedKafkaTopic",
        owner,
    )
}

/// One share per selected cluster, in selection order, and the decision: `spec` for every
/// known cluster whose topic name no older topic owns; nothing (and why) for a cluster in
/// `conflicts` (cluster → owner) or with no ManagedCluster.
pub fn decide(
    selected: &[SelectedCluster],
    spec: &KafkaTopicSpec,
    conflicts: &BTreeMap<String, String>,
) -> (Vec<ShareRecord>, KafkaTopicDecision) {
    let (shares, conflicts) = claim::uniform_shares(
        selected,
        &AssignmentSpec::KafkaTopic(spec.clone()),
        conflicts,
        |owner| conflict_message(&spec.topic_name, owner),
    );
    let decision = KafkaTopicDecision {
        spec: spec.clone(),
        conflicts,
    };
    (shares, decision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_crds::kafka_topic::FederatedKafkaTopicSpec;

    fn topic(name: Option<&str>, config: &[(&str, &str)]) -> FederatedKafkaTopic {
        FederatedKafkaTopic::new(
            "events",
            FederatedKafkaTopicSpec {
                rollout: None,
                topic_name: name.map(str::to_owned),
                partitions: 12,
                replication_factor: 3,
                config: config
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                placement: accord_crds::ClusterPlacement::clusters(["a"]),
                deletion_policy: None,
            },
        )
    }

    fn selected(list: &[(&str, bool)]) -> Vec<SelectedCluster> {
        list.iter()
            .map(|(n, known)| SelectedCluster {
                name: (*n).to_owned(),
                known: *known,
            })
            .collect()
    }

    #[test]
    fn the_assignment_carries_the_spec_and_defaults_the_name_to_the_object() {
        let a = assignment(&topic(None, &[("retention.ms", "1000")]), None);
        assert_eq!(a.topic_name, "events");
        assert_eq!((a.partitions, a.replication_factor), (12, 3));
        assert_eq!(a.config["retention.ms"], "1000");
        assert!(a.removed_config.is_empty() && !a.delete);
        let named = assignment(&topic(Some("fraud.events"), &[]), None);
        assert_eq!(named.topic_name, "fraud.events");
    }

    #[test]
    fn keys_dropped_from_the_spec_are_removed_and_stay_removed_until_set_again() {
        let first = assignment(
            &topic(None, &[("retention.ms", "1"), ("cleanup.policy", "delete")]),
            None,
        );
        let second = assignment(&topic(None, &[("retention.ms", "2")]), Some(&first));
        assert_eq!(second.removed_config, ["cleanup.policy"]);
        let third = assignment(&topic(None, &[("segment.ms", "9")]), Some(&second));
        assert_eq!(
            third.removed_config,
            ["cleanup.policy", "retention.ms"],
            "accumulated, sorted"
        );
        let fourth = assignment(&topic(None, &[("cleanup.policy", "compact")]), Some(&third));
        assert_eq!(
            fourth.removed_config,
            ["retention.ms", "segment.ms"],
            "a key set again is no longer removed"
        );
    }

    #[test]
    fn a_new_topic_name_starts_without_removed_keys() {
        let first = assignment(&topic(None, &[("retention.ms", "1")]), None);
        let renamed = assignment(&topic(Some("other"), &[]), Some(&first));
        assert!(renamed.removed_config.is_empty());
    }

    #[test]
    fn conflicted_and_unknown_clusters_get_nothing_and_say_why() {
        let spec = assignment(&topic(None, &[]), None);
        let conflicts = BTreeMap::from([
            ("b".to_owned(), "team/older".to_owned()),
            ("elsewhere".to_owned(), "team/x".to_owned()),
        ]);
        let (shares, decision) = decide(
            &selected(&[("a", true), ("b", true), ("mars", false)]),
            &spec,
            &conflicts,
        );
        assert_eq!(
            shares[0].assignment,
            Some(AssignmentSpec::KafkaTopic(spec.clone()))
        );
        assert_eq!(shares[1].assignment, None);
        assert!(
            shares[1]
                .held_reason
                .as_deref()
                .is_some_and(|r| r.starts_with("Conflict:") && r.contains("team/older")),
            "{:?}",
            shares[1]
        );
        assert_eq!(shares[2].assignment, None);
        assert_eq!(
            shares[2].held_reason.as_deref(),
            Some("no ManagedCluster mars")
        );
        assert_eq!(decision.spec, spec);
        assert_eq!(
            decision.conflicts,
            BTreeMap::from([("b".to_owned(), "team/older".to_owned())]),
            "only selected clusters"
        );
    }

    #[test]
    fn held_shares_send_nothing() {
        let shares = claim::held(&selected(&[("a", true)]), "policy");
        assert_eq!(shares[0].assignment, None);
        assert_eq!(shares[0].held_reason.as_deref(), Some("policy"));
    }
}
