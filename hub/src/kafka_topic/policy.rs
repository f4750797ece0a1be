//! Which KafkaTopicPolicy rules a FederatedKafkaTopic breaks: one pure check, used by the
//! admission webhook (to refuse or warn) and by the controller before it propagates a
//! topic (for topics that got in while the webhook was down or before the policy existed).

use std::collections::BTreeMap;
use std::fmt;

use accord_crds::kafka_topic::{
    Enforcement, FederatedKafkaTopic, FederatedKafkaTopicSpec, KafkaTopicPolicy,
    compile_topic_pattern,
};
use kube::ResourceExt as _;

use crate::distribution::select::matches;

/// One rule of one policy that a topic breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Name of the KafkaTopicPolicy.
    pub policy: String,
    /// What the policy does about it.
    pub enforcement: Enforcement,
    /// The topic's field the rule is about, e.g. `spec.partitions`.
    pub field: &'static str,
    /// The rule and the value that breaks it, e.g. `must be at least 12 (is 6)`.
    pub rule: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} (KafkaTopicPolicy {})",
            self.field, self.rule, self.policy
        )
    }
}

/// Every rule of every policy governing `topic`'s namespace (whose labels are
/// `namespace_labels`) that the topic breaks, in policy-name order. A policy whose own
/// spec cannot be evaluated (an invalid namespace selector or name pattern) is reported as
/// a violation of that policy, so that a broken policy fails closed rather than silently.
pub fn violations(
    topic: &FederatedKafkaTopic,
    namespace_labels: &BTreeMap<String, String>,
    policies: &[KafkaTopicPolicy],
) -> Vec<Violation> {
    let mut sorted: Vec<&KafkaTopicPolicy> = policies.iter().collect();
    sorted.sort_by_key(|p| p.name_any());
    let mut found = Vec::new();
    for policy in sorted {
        let name = policy.name_any();
        let spec = &policy.spec;
        let enforcement = spec.enforcement();
        let mut add = |field: &'static str, rule: String| {
            found.push(Violation {
                policy: name.clone(),
                enforcement,
                field,
                rule,
            })
        };
        if let Some(selector) = &spec.namespace_selector {
            match matches(selector, namespace_labels, "spec.namespaceSelector") {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    add(
                        "metadata.namespace",
                        format!("the policy's namespaceSelector cannot be evaluated: {e}"),
                    );
                    continue;
                }
            }
        }
        check_spec(&topic.spec, topic.topic_name(), spec, &mut add);
    }
    found
}

fn check_spec(
    topic: &FederatedKafkaTopicSpec,
    topic_name: &str,
    policy: &accord_crds::kafka_topic::KafkaTopicPolicySpec,
    add: &mut impl FnMut(&'static str, String),
) {
    if let Some(min) = policy.min_partitions
        && topic.partitions < min
    {
        add(
            "spec.partitions",
            format!("must be at least {min} (is {})", topic.partitions),
        );
    }
    if let Some(max) = policy.max_partitions
        && topic.partitions > max
    {
        add(
            "spec.partitions",
            format!("must be at most {max} (is {})", topic.partitions),
        );
    }
    if let Some(rf) = policy.replication_factor
        && topic.replication_factor != rf
    {
        add(
            "spec.replicationFactor",
            format!("must be {rf} (is {})", topic.replication_factor),
        );
    }
    for key in &policy.forbidden_configs {
        if topic.config.contains_key(key) {
            add(
                "spec.config",
                format!("must not set {key} (forbidden config)"),
            );
        }
    }
    if let Some(pattern) = &policy.topic_name_pattern {
        match compile_topic_pattern(pattern) {
            Ok(re) if re.is_match(topic_name) => {}
            Ok(_) => add(
                "spec.topicName",
                format!("must match {pattern:?} (is {topic_name:?})"),
            ),
            Err(e) => add(
                "spec.topicName",
                format!(
                    "the policy's topicNamePattern {pattern:?} is not a regular expression: {e}"
                ),
            ),
        }
    }
}

/// The violations that stop a topic (those of `Deny` policies).
pub fn denying(violations: &[Violation]) -> Vec<Violation> {
    violations
        .iter()
        .filter(|v| v.enforcement == Enforcement::Deny)
        .cloned()
        .collect()
}

/// One message naming every violated rule with its field and limit, e.g.
/// `topic breaks 2 KafkaTopicPolicy rules: spec.partitions: must be at least 12 (is 6)
/// (KafkaTopicPolicy min-12); spec.replicationFactor: must be 3 (is 1) (KafkaTopicPolicy
/// min-12)`. Empty when there are none.
pub fn message(violations: &[Violation]) -> String {
    match violations {
        [] => String::new(),
        [one] => format!("topic breaks a KafkaTopicPolicy rule: {one}"),
        many => format!(
            "topic breaks {} KafkaTopicPolicy rules: {}",
            many.len(),
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_crds::kafka_topic::KafkaTopicPolicySpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn topic(partitions: i32, rf: i32, config: &[(&str, &str)]) -> FederatedKafkaTopic {
        FederatedKafkaTopic::new(
            "events",
            FederatedKafkaTopicSpec {
                rollout: None,
                topic_name: None,
                partitions,
                replication_factor: rf,
                config: config
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                placement: accord_crds::ClusterPlacement::clusters(["a"]),
                deletion_policy: None,
            },
        )
    }

    fn policy(name: &str, spec: KafkaTopicPolicySpec) -> KafkaTopicPolicy {
        KafkaTopicPolicy::new(name, spec)
    }

    fn strict() -> KafkaTopicPolicySpec {
        KafkaTopicPolicySpec {
            min_partitions: Some(12),
            replication_factor: Some(3),
            ..Default::default()
        }
    }

    #[test]
    fn a_topic_below_the_minimum_and_with_the_wrong_replication_factor_breaks_both_rules() {
        let found = violations(
            &topic(6, 1, &[]),
            &BTreeMap::new(),
            &[policy("p", strict())],
        );
        assert_eq!(found.len(), 2, "{found:?}");
        let msg = message(&found);
        assert!(
            msg.contains("spec.partitions: must be at least 12 (is 6)"),
            "{msg}"
        );
        assert!(
            msg.contains("spec.replicationFactor: must be 3 (is 1)"),
            "{msg}"
        );
        assert!(
            msg.starts_with("topic breaks 2 KafkaTopicPolicy rules"),
            "{msg}"
        );
    }

    #[test]
    fn a_compliant_topic_breaks_nothing() {
        let found = violations(
            &topic(12, 3, &[]),
            &BTreeMap::new(),
            &[policy("p", strict())],
        );
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(message(&found), "");
    }

    #[test]
    fn forbidden_configs_maximum_and_name_pattern_are_checked() {
        let spec = KafkaTopicPolicySpec {
            max_partitions: Some(8),
            forbidden_configs: vec!["unclean.leader.election.enable".into()],
            topic_name_pattern: Some("team-a\\..*".into()),
            ..Default::default()
        };
        let found = violations(
            &topic(12, 3, &[("unclean.leader.election.enable", "true")]),
            &BTreeMap::new(),
            &[policy("p", spec)],
        );
        let fields: Vec<_> = found.iter().map(|v| v.field).collect();
        assert_eq!(
            fields,
            ["spec.partitions", "spec.config", "spec.topicName"],
            "{found:?}"
        );
    }

    #[test]
    fn the_name_pattern_must_match_the_whole_name() {
        let spec = KafkaTopicPolicySpec {
            topic_name_pattern: Some("event".into()),
            ..Default::default()
        };
        assert_eq!(
            violations(&topic(1, 1, &[]), &BTreeMap::new(), &[policy("p", spec)]).len(),
            1
        );
    }

    #[test]
    fn a_policy_applies_only_to_namespaces_its_selector_matches() {
        let spec = KafkaTopicPolicySpec {
            namespace_selector: Some(LabelSelector {
                match_labels: Some([("tier".to_owned(), "prod".to_owned())].into()),
                ..Default::default()
            }),
            ..strict()
        };
        let policies = [policy("prod-only", spec)];
        let dev = BTreeMap::from([("tier".to_owned(), "dev".to_owned())]);
        let prod = BTreeMap::from([("tier".to_owned(), "prod".to_owned())]);
        assert!(violations(&topic(6, 1, &[]), &dev, &policies).is_empty());
        assert_eq!(violations(&topic(6, 1, &[]), &prod, &policies).len(), 2);
    }

    #[test]
    fn audit_violations_are_reported_but_do_not_deny() {
        let audit = KafkaTopicPolicySpec {
            enforcement: Some(Enforcement::Audit),
            ..strict()
        };
        let found = violations(&topic(6, 3, &[]), &BTreeMap::new(), &[policy("a", audit)]);
        assert_eq!(found.len(), 1);
        assert!(denying(&found).is_empty());
    }

    #[test]
    fn a_policy_with_a_broken_pattern_fails_closed_with_a_message() {
        let spec = KafkaTopicPolicySpec {
            topic_name_pattern: Some("(".into()),
            ..Default::default()
        };
        let found = violations(&topic(1, 1, &[]), &BTreeMap::new(), &[policy("p", spec)]);
        assert_eq!(found.len(), 1);
        assert!(
            found[0].rule.contains("not a regular expression"),
            "{found:?}"
        );
    }
}
