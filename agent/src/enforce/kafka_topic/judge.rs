//! Pure decisions about one Kafka topic: what the broker's state means against the topic's
//! assignment, what to apply (create, raise partitions, incremental config changes, delete)
//! and what to report. No Kafka requests happen here.
//!
//! The rules (issue #11): configs change only incrementally — SET for a spec key whose
//! value the topic does not hold as its own (topic-level, `DynamicTopic`) setting, DELETE
//! for a key an earlier spec named (`removed_config`) while the topic still sets it itself —
//! and no other key is ever touched, so a key someone else set on the broker survives every
//! reconcile. Kafka cannot lower a partition count or change a replication factor in
//! place: such a spec is refused with both numbers and nothing is applied to the topic.
//!
//! While the member's Kafka fails its liveness [`Probe`], every topic is `Unavailable` with
//! the probe's message and nothing is applied; once Kafka answers again the topic is judged
//! from what was seen as before. A probe changes what is reported, never what is applied.

use std::collections::BTreeMap;

use accord_common::distribution::{KafkaTopicObserved, KafkaTopicSpec, Observed, PlacementState};
use accord_kafka::{ConfigEntry, ConfigOp, ConfigSource, NewTopic};

use crate::enforce::kafka::probe::Probe;
use crate::enforce::{Action, ApplyError, ApplyErrorKind, Judgement};
use crate::report::Report;

/// How messages of a spec that Kafka cannot follow begin (`Error`).
pub const NOT_SUPPORTED_PREFIX: &str = "NotSupported: ";
/// The message of a topic whose deletion completed.
pub const DELETED_MESSAGE: &str = "deleted";

/// What the agent saw of one topic in its last look at Kafka (a topic Kafka's answer left
/// out is absent).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TopicSeen {
    /// Kafka has no topic of that name.
    #[default]
    Absent,
    /// The topic exists.
    Present {
        /// Its partition count.
        partitions: i32,
        /// Its replication factor (replicas of partition 0).
        replication_factor: i32,
        /// The configs the topic sets itself (source `DynamicTopic`) — the only ones the
        /// rules compare against — or why they could not be read.
        configs: Result<BTreeMap<String, Option<String>>, String>,
    },
}

impl TopicSeen {
    /// What the status shows of it.
    pub fn observed(&self) -> KafkaTopicObserved {
        match self {
            Self::Absent => KafkaTopicObserved {
                partitions: 0,
                replication_factor: 0,
                exists: false,
            },
            Self::Present {
                partitions,
                replication_factor,
                ..
            } => KafkaTopicObserved {
                partitions: *partitions,
                replication_factor: *replication_factor,
                exists: true,
            },
        }
    }
}

/// The topic-level settings among a topic's described configs: those whose source is
/// `DynamicTopic` (set on the topic itself, by this agent or anyone else). Inherited values
/// (broker settings, defaults) are not the topic's own and are left out.
pub fn topic_settings(entries: &BTreeMap<String, ConfigEntry>) -> BTreeMap<String, Option<String>> {
    entries
        .iter()
        .filter(|(_, e)| matches!(e.source, ConfigSource::DynamicTopic))
        .map(|(k, e)| (k.clone(), e.value.clone()))
        .collect()
}

/// The changes that make an existing topic match its spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alter {
    /// The new partition count, when it has to grow.
    pub partitions: Option<i32>,
    /// The config changes, in key order: SETs and DELETEs.
    pub config: Vec<ConfigOp>,
}

/// What to apply to Kafka for one topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Create the topic (CreateTopics) with its partitions, replication factor and configs.
    Create(NewTopic),
    /// Raise partitions (CreatePartitions) and/or change configs (IncrementalAlterConfigs).
    Alter(Alter),
    /// Delete the topic (DeleteTopics).
    Delete,
}

/// What the agent makes of a topic against its assignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The topic matches the spec.
    Synced,
    /// The spec asks for deletion and Kafka has no such topic.
    Deleted,
    /// Something has to be applied.
    Apply(Plan),
    /// Kafka cannot do what the spec asks; nothing is applied. The message begins with
    /// `NotSupported: ` and names both numbers.
    NotSupported(String),
    /// The topic's configs could not be read, so they cannot be compared.
    ConfigsUnreadable(String),
    /// The assignment itself cannot be followed (no topic name, no partitions…).
    Invalid(String),
}

/// Why the assignment cannot be followed whatever Kafka holds, if it cannot.
pub fn invalid(spec: &KafkaTopicSpec) -> Option<String> {
    if spec.topic_name.is_empty() {
        return Some("the assignment names no topic".to_owned());
    }
    if !spec.delete && (spec.partitions < 1 || spec.replication_factor < 1) {
        return Some(format!(
            "the assignment asks for {} partitions and replication factor {}; both must be \
             at least 1",
            spec.partitions, spec.replication_factor
        ));
    }
    None
}

/// Judges what Kafka holds (`seen`) against `spec`.
pub fn verdict(spec: &KafkaTopicSpec, seen: &TopicSeen) -> Verdict {
    if let Some(message) = invalid(spec) {
        return Verdict::Invalid(message);
    }
    if spec.delete {
        return match seen {
            TopicSeen::Absent => Verdict::Deleted,
            TopicSeen::Present { .. } => Verdict::Apply(Plan::Delete),
        };
    }
    let (partitions, replication_factor, configs) = match seen {
        TopicSeen::Absent => {
            return Verdict::Apply(Plan::Create(NewTopic {
                name: spec.topic_name.clone(),
                partitions: spec.partitions,
                replication_factor: spec.replication_factor,
                config: spec.config.clone(),
            }));
        }
        TopicSeen::Present {
            partitions,
            replication_factor,
            configs,
        } => (*partitions, *replication_factor, configs),
    };
    if replication_factor != spec.replication_factor {
        return Verdict::NotSupported(format!(
            "{NOT_SUPPORTED_PREFIX}replicationFactor is {replication_factor} in Kafka and {} in \
             the spec; Kafka cannot change a topic's replication factor in place",
            spec.replication_factor
        ));
    }
    if partitions > spec.partitions {
        return Verdict::NotSupported(format!(
            "{NOT_SUPPORTED_PREFIX}partitions is {partitions} in Kafka and {} in the spec; Kafka \
             cannot lower a partition count",
            spec.partitions
        ));
    }
    let settings = match configs {
        Ok(settings) => settings,
        Err(message) => return Verdict::ConfigsUnreadable(message.clone()),
    };
    let alter = Alter {
        partitions: (partitions < spec.partitions).then_some(spec.partitions),
        config: config_ops(spec, settings),
    };
    if alter.partitions.is_none() && alter.config.is_empty() {
        Verdict::Synced
    } else {
        Verdict::Apply(Plan::Alter(alter))
    }
}

/// The incremental config changes for `spec` against the topic's own `settings`: SET every
/// spec key the topic does not set to the spec's value itself, DELETE every removed key the
/// topic still sets itself (a key in both lists is the spec's). Nothing else.
pub fn config_ops(
    spec: &KafkaTopicSpec,
    settings: &BTreeMap<String, Option<String>>,
) -> Vec<ConfigOp> {
    let mut ops = Vec::new();
    for (key, value) in &spec.config {
        if settings.get(key).and_then(Option::as_ref) != Some(value) {
            ops.push(ConfigOp::Set(key.clone(), value.clone()));
        }
    }
    let mut removed: Vec<&String> = spec
        .removed_config
        .iter()
        .filter(|k| !spec.config.contains_key(*k) && settings.contains_key(*k))
        .collect();
    removed.sort();
    removed.dedup();
    ops.extend(removed.into_iter().map(|k| ConfigOp::Delete(k.clone())));
    ops
}

/// Whether what Kafka shows (`seen`) carries the effect of `plan`, applied successfully
/// just before: Kafka's metadata follows a change a moment after the request returns, and
/// until it does, judging again would apply the same plan twice (and a second
/// CreatePartitions to the same count fails).
pub fn shows(plan: &Plan, seen: &TopicSeen) -> bool {
    match (plan, seen) {
        (Plan::Delete, TopicSeen::Absent) | (Plan::Create(_), TopicSeen::Present { .. }) => true,
        (Plan::Delete, TopicSeen::Present { .. }) | (Plan::Create(_), TopicSeen::Absent) => false,
        // Deleted under the apply: there is something new to judge.
        (Plan::Alter(_), TopicSeen::Absent) => true,
        (
            Plan::Alter(alter),
            TopicSeen::Present {
                partitions,
                configs,
                ..
            },
        ) => {
            let raised = alter.partitions.is_none_or(|p| *partitions >= p);
            let configured = match configs {
                Ok(settings) => alter.config.iter().all(|op| match op {
                    ConfigOp::Set(k, v) => settings.get(k).and_then(Option::as_ref) == Some(v),
                    ConfigOp::Delete(k) => !settings.contains_key(k),
                }),
                // Nothing to compare with: judged (as unreadable) right away.
                Err(_) => true,
            };
            raised && configured
        }
    }
}

/// A short description of what `plan` does, for the `Pending` message.
pub fn describe(plan: &Plan) -> String {
    match plan {
        Plan::Create(topic) => format!(
            "creating the topic with {} partitions and replication factor {}",
            topic.partitions, topic.replication_factor
        ),
        Plan::Delete => "deleting the topic".to_owned(),
        Plan::Alter(alter) => {
            let mut parts = Vec::new();
            if let Some(p) = alter.partitions {
                parts.push(format!("raising partitions to {p}"));
            }
            let set: Vec<&str> = alter
                .config
                .iter()
                .filter_map(|op| match op {
                    ConfigOp::Set(k, _) => Some(k.as_str()),
                    ConfigOp::Delete(_) => None,
                })
                .collect();
            let deleted: Vec<&str> = alter
                .config
                .iter()
                .filter_map(|op| match op {
                    ConfigOp::Delete(k) => Some(k.as_str()),
                    ConfigOp::Set(..) => None,
                })
                .collect();
            if !set.is_empty() {
                parts.push(format!("setting {}", set.join(", ")));
            }
            if !deleted.is_empty() {
                parts.push(format!("deleting {}", deleted.join(", ")));
            }
            parts.join("; ")
        }
    }
}

/// Judges a topic assigned at `applied_revision` from the last look at it (`seen`, whose
/// version is `version`), the last probe of Kafka and the last apply error (while it
/// stands): what to report and whether to apply.
///
/// While the probe fails, what was seen may no longer hold and an apply could not arrive:
/// the topic is `Unavailable` with the probe's message (and what was last seen of it), and
/// the apply state is kept as it is ([`Action::Unknown`]), so nothing is applied because of
/// the probe, and nothing that was due is forgotten.
pub fn judge(
    applied_revision: i64,
    spec: &KafkaTopicSpec,
    seen: &TopicSeen,
    version: u64,
    probe: &Probe,
    apply_error: Option<&ApplyError>,
) -> Judgement {
    if let Probe::Failed(message) = probe {
        return Judgement {
            report: Report {
                observed: Observed::KafkaTopic(seen.observed()),
                ..Report::without_object(
                    PlacementState::Unavailable,
                    message.clone(),
                    applied_revision,
                )
            },
            action: Action::Unknown,
        };
    }
    let verdict = verdict(spec, seen);
    let action = match verdict {
        Verdict::Apply(_) => Action::Apply {
            from_version: version.to_string(),
        },
        Verdict::ConfigsUnreadable(_) => Action::Unknown,
        Verdict::Synced | Verdict::Deleted | Verdict::NotSupported(_) | Verdict::Invalid(_) => {
            Action::Settled
        }
    };
    Judgement {
        report: report(applied_revision, &verdict, seen, apply_error),
        action,
    }
}

/// What to tell the hub about a topic assigned at `applied_revision`, from the verdict,
/// what was seen, and the last apply error (while it stands). `Unavailable` when that
/// error is of kind [`ApplyErrorKind::Unavailable`] (Kafka could not be reached or refused
/// the credentials), `Error` for any other kind.
pub fn report(
    applied_revision: i64,
    verdict: &Verdict,
    seen: &TopicSeen,
    apply_error: Option<&ApplyError>,
) -> Report {
    let (state, message) = match verdict {
        Verdict::Synced => (PlacementState::Synced, String::new()),
        Verdict::Deleted => (PlacementState::Synced, DELETED_MESSAGE.to_owned()),
        Verdict::Apply(plan) => match apply_error {
            Some(error) if error.kind == ApplyErrorKind::Unavailable => {
                (PlacementState::Unavailable, error.message.clone())
            }
            Some(error) => (PlacementState::Error, error.message.clone()),
            None => (PlacementState::Pending, describe(plan)),
        },
        Verdict::NotSupported(message) | Verdict::Invalid(message) => {
            (PlacementState::Error, message.clone())
        }
        Verdict::ConfigsUnreadable(message) => (
            PlacementState::Error,
            format!("reading the topic's configs: {message}"),
        ),
    };
    Report {
        state,
        message,
        resource_version: String::new(),
        generation: 0,
        observed: Observed::KafkaTopic(seen.observed()),
        applied_revision,
        api_server_unavailable: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(partitions: i32, rf: i32, config: &[(&str, &str)]) -> KafkaTopicSpec {
        KafkaTopicSpec {
            topic_name: "orders".into(),
            partitions,
            replication_factor: rf,
            config: config
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            removed_config: Vec::new(),
            delete: false,
        }
    }

    fn present(partitions: i32, rf: i32, settings: &[(&str, &str)]) -> TopicSeen {
        TopicSeen::Present {
            partitions,
            replication_factor: rf,
            configs: Ok(settings
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Some((*v).to_owned())))
                .collect()),
        }
    }

    fn set(k: &str, v: &str) -> ConfigOp {
        ConfigOp::Set(k.into(), v.into())
    }

    fn delete(k: &str) -> ConfigOp {
        ConfigOp::Delete(k.into())
    }

    fn entry(value: &str, source: ConfigSource) -> ConfigEntry {
        ConfigEntry {
            value: Some(value.into()),
            source,
            read_only: false,
            sensitive: false,
        }
    }

    #[test]
    fn an_absent_topic_is_created_with_partitions_replication_factor_and_configs() {
        let s = spec(
            12,
            3,
            &[("retention.ms", "604800000"), ("cleanup.policy", "delete")],
        );
        let v = verdict(&s, &TopicSeen::Absent);
        assert_eq!(
            v,
            Verdict::Apply(Plan::Create(NewTopic {
                name: "orders".into(),
                partitions: 12,
                replication_factor: 3,
                config: s.config.clone(),
            }))
        );
        let r = report(7, &v, &TopicSeen::Absent, None);
        assert_eq!(r.state, PlacementState::Pending);
        assert!(r.message.contains("12 partitions"), "{}", r.message);
        assert_eq!(
            r.observed,
            Observed::KafkaTopic(KafkaTopicObserved {
                partitions: 0,
                replication_factor: 0,
                exists: false
            })
        );
        assert_eq!(r.applied_revision, 7);
    }

    #[test]
    fn a_matching_topic_is_synced_and_reports_what_kafka_holds() {
        let s = spec(12, 3, &[("retention.ms", "1000")]);
        let seen = present(12, 3, &[("retention.ms", "1000"), ("segment.ms", "5")]);
        let v = verdict(&s, &seen);
        assert_eq!(v, Verdict::Synced);
        let r = report(3, &v, &seen, None);
        assert_eq!(r.state, PlacementState::Synced);
        assert_eq!(r.message, "");
        assert_eq!(
            r.observed,
            Observed::KafkaTopic(KafkaTopicObserved {
                partitions: 12,
                replication_factor: 3,
                exists: true
            })
        );
    }

    #[test]
    fn fewer_partitions_in_kafka_are_raised_to_the_spec() {
        let v = verdict(&spec(24, 3, &[]), &present(12, 3, &[]));
        assert_eq!(
            v,
            Verdict::Apply(Plan::Alter(Alter {
                partitions: Some(24),
                config: vec![],
            }))
        );
        assert_eq!(
            report(1, &v, &present(12, 3, &[]), None).message,
            "raising partitions to 24"
        );
    }

    #[test]
    fn lowering_partitions_is_not_supported_with_both_numbers_and_nothing_applied() {
        // Even with a config to change, nothing is applied to the topic.
        let s = spec(12, 3, &[("retention.ms", "1")]);
        let seen = present(24, 3, &[]);
        let v = verdict(&s, &seen);
        assert_eq!(
            v,
            Verdict::NotSupported(
                "NotSupported: partitions is 24 in Kafka and 12 in the spec; Kafka cannot lower \
                 a partition count"
                    .into()
            )
        );
        let r = report(1, &v, &seen, None);
        assert_eq!(r.state, PlacementState::Error);
        assert!(r.message.starts_with("NotSupported: "), "{}", r.message);
        assert_eq!(r.observed, Observed::KafkaTopic(seen.observed()));
    }

    #[test]
    fn a_different_replication_factor_is_not_supported_with_both_numbers() {
        let v = verdict(&spec(24, 2, &[]), &present(12, 3, &[]));
        assert_eq!(
            v,
            Verdict::NotSupported(
                "NotSupported: replicationFactor is 3 in Kafka and 2 in the spec; Kafka cannot \
                 change a topic's replication factor in place"
                    .into()
            )
        );
    }

    #[test]
    fn a_spec_key_is_set_unless_the_topic_itself_holds_that_value() {
        let s = spec(
            1,
            1,
            &[("a", "1"), ("b", "2"), ("c", "3"), ("retention.ms", "10")],
        );
        // a matches; b differs; c is absent from the topic's own settings.
        let seen = present(1, 1, &[("a", "1"), ("b", "9")]);
        let Verdict::Apply(Plan::Alter(alter)) = verdict(&s, &seen) else {
            panic!("expected an alter");
        };
        assert_eq!(alter.partitions, None);
        assert_eq!(
            alter.config,
            vec![set("b", "2"), set("c", "3"), set("retention.ms", "10")]
        );
    }

    #[test]
    fn a_value_the_topic_only_inherits_is_still_set_on_the_topic() {
        // The broker default equals the spec, but the topic does not set it: the spec says
        // the topic should hold it, so a later broker default change does not move it.
        let mut entries = BTreeMap::new();
        entries.insert(
            "retention.ms".to_owned(),
            entry("604800000", ConfigSource::Default),
        );
        entries.insert(
            "segment.ms".to_owned(),
            entry("5", ConfigSource::DynamicBroker),
        );
        entries.insert(
            "cleanup.policy".to_owned(),
            entry("compact", ConfigSource::DynamicTopic),
        );
        let settings = topic_settings(&entries);
        assert_eq!(
            settings,
            BTreeMap::from([("cleanup.policy".to_owned(), Some("compact".to_owned()))])
        );
        let s = spec(1, 1, &[("retention.ms", "604800000")]);
        let seen = TopicSeen::Present {
            partitions: 1,
            replication_factor: 1,
            configs: Ok(settings),
        };
        assert_eq!(
            verdict(&s, &seen),
            Verdict::Apply(Plan::Alter(Alter {
                partitions: None,
                config: vec![set("retention.ms", "604800000")],
            }))
        );
    }

    #[test]
    fn removed_keys_are_deleted_only_where_the_topic_sets_them_itself() {
        let mut s = spec(1, 1, &[("a", "1")]);
        s.removed_config = vec!["gone".into(), "never.set".into(), "gone".into()];
        // "gone" is the topic's own setting; "never.set" is not set on the topic.
        let seen = present(1, 1, &[("a", "1"), ("gone", "5")]);
        assert_eq!(
            verdict(&s, &seen),
            Verdict::Apply(Plan::Alter(Alter {
                partitions: None,
                config: vec![delete("gone")],
            }))
        );
        // Once deleted it is back to the default and nothing is left to do.
        assert_eq!(verdict(&s, &present(1, 1, &[("a", "1")])), Verdict::Synced);
    }

    #[test]
    fn a_removed_key_that_inherits_a_broker_value_is_not_deleted() {
        let mut entries = BTreeMap::new();
        entries.insert("gone".to_owned(), entry("5", ConfigSource::StaticBroker));
        let mut s = spec(1, 1, &[]);
        s.removed_config = vec!["gone".into()];
        let seen = TopicSeen::Present {
            partitions: 1,
            replication_factor: 1,
            configs: Ok(topic_settings(&entries)),
        };
        assert_eq!(verdict(&s, &seen), Verdict::Synced);
    }

    #[test]
    fn keys_that_no_spec_named_are_never_touched() {
        let mut s = spec(1, 1, &[("a", "2")]);
        s.removed_config = vec!["b".into()];
        let seen = present(
            1,
            1,
            &[
                ("a", "1"),
                ("b", "1"),
                ("someone.elses", "x"),
                ("other", "y"),
            ],
        );
        let Verdict::Apply(Plan::Alter(alter)) = verdict(&s, &seen) else {
            panic!("expected an alter");
        };
        let touched: Vec<&str> = alter
            .config
            .iter()
            .map(|op| match op {
                ConfigOp::Set(k, _) | ConfigOp::Delete(k) => k.as_str(),
            })
            .collect();
        assert_eq!(touched, vec!["a", "b"]);
        // And with only foreign keys on the topic, it is synced.
        let seen = present(1, 1, &[("a", "2"), ("someone.elses", "x")]);
        assert_eq!(verdict(&s, &seen), Verdict::Synced);
    }

    #[test]
    fn a_key_both_in_the_spec_and_removed_is_the_specs() {
        let mut s = spec(1, 1, &[("a", "1")]);
        s.removed_config = vec!["a".into()];
        assert_eq!(verdict(&s, &present(1, 1, &[("a", "1")])), Verdict::Synced);
        assert_eq!(
            config_ops(
                &s,
                &BTreeMap::from([("a".to_owned(), Some("0".to_owned()))])
            ),
            vec![set("a", "1")]
        );
    }

    #[test]
    fn a_sensitive_setting_without_a_value_is_set_again() {
        let s = spec(1, 1, &[("a", "1")]);
        let seen = TopicSeen::Present {
            partitions: 1,
            replication_factor: 1,
            configs: Ok(BTreeMap::from([("a".to_owned(), None)])),
        };
        assert_eq!(
            config_ops(
                &s,
                match &seen {
                    TopicSeen::Present { configs, .. } => configs.as_ref().unwrap(),
                    TopicSeen::Absent => unreachable!(),
                }
            ),
            vec![set("a", "1")]
        );
    }

    #[test]
    fn partitions_and_configs_change_in_one_plan_and_the_message_says_both() {
        let mut s = spec(24, 3, &[("a", "1")]);
        s.removed_config = vec!["b".into()];
        let seen = present(12, 3, &[("b", "2")]);
        let v = verdict(&s, &seen);
        assert_eq!(
            v,
            Verdict::Apply(Plan::Alter(Alter {
                partitions: Some(24),
                config: vec![set("a", "1"), delete("b")],
            }))
        );
        assert_eq!(
            report(1, &v, &seen, None).message,
            "raising partitions to 24; setting a; deleting b"
        );
    }

    #[test]
    fn a_topic_to_delete_is_deleted_while_it_exists_and_then_reports_deleted() {
        let mut s = spec(12, 3, &[]);
        s.delete = true;
        // Whatever it holds (even a partition count the spec would refuse).
        let seen = present(24, 1, &[]);
        let v = verdict(&s, &seen);
        assert_eq!(v, Verdict::Apply(Plan::Delete));
        assert_eq!(report(1, &v, &seen, None).message, "deleting the topic");
        let v = verdict(&s, &TopicSeen::Absent);
        assert_eq!(v, Verdict::Deleted);
        let r = report(9, &v, &TopicSeen::Absent, None);
        assert_eq!(r.state, PlacementState::Synced);
        assert_eq!(r.message, "deleted");
        assert_eq!(
            r.observed,
            Observed::KafkaTopic(KafkaTopicObserved {
                partitions: 0,
                replication_factor: 0,
                exists: false
            })
        );
    }

    #[test]
    fn unreadable_configs_are_an_error_and_nothing_is_applied() {
        let s = spec(1, 1, &[("a", "1")]);
        let seen = TopicSeen::Present {
            partitions: 1,
            replication_factor: 1,
            configs: Err("TOPIC_AUTHORIZATION_FAILED".into()),
        };
        let v = verdict(&s, &seen);
        assert!(matches!(v, Verdict::ConfigsUnreadable(_)), "{v:?}");
        let r = report(1, &v, &seen, None);
        assert_eq!(r.state, PlacementState::Error);
        assert!(
            r.message.contains("TOPIC_AUTHORIZATION_FAILED"),
            "{}",
            r.message
        );
    }

    #[test]
    fn an_assignment_without_a_name_or_partitions_is_invalid() {
        let mut s = spec(1, 1, &[]);
        s.topic_name.clear();
        assert!(matches!(
            verdict(&s, &TopicSeen::Absent),
            Verdict::Invalid(_)
        ));
        let s = spec(0, 1, &[]);
        let v = verdict(&s, &TopicSeen::Absent);
        assert!(matches!(v, Verdict::Invalid(_)), "{v:?}");
        assert_eq!(
            report(1, &v, &TopicSeen::Absent, None).state,
            PlacementState::Error
        );
    }

    #[test]
    fn a_failed_apply_is_unavailable_by_its_kind_and_an_error_otherwise() {
        let v = verdict(&spec(1, 1, &[]), &TopicSeen::Absent);
        let refused = ApplyError::new(
            ApplyErrorKind::Invalid,
            "creating topic orders: POLICY_VIOLATION",
        );
        let r = report(1, &v, &TopicSeen::Absent, Some(&refused));
        assert_eq!(r.state, PlacementState::Error);
        assert_eq!(r.message, "creating topic orders: POLICY_VIOLATION");
        let down = ApplyError::new(
            ApplyErrorKind::Unavailable,
            "Kafka unreachable: Kafka at 127.0.0.1:9092 is unreachable",
        );
        let r = report(1, &v, &TopicSeen::Absent, Some(&down));
        assert_eq!(r.state, PlacementState::Unavailable);
        assert_eq!(r.message, down.message);
        // The kind decides, not how the message reads.
        let forbidden = ApplyError::new(ApplyErrorKind::Forbidden, "Kafka unreachable: no");
        assert_eq!(
            report(1, &v, &TopicSeen::Absent, Some(&forbidden)).state,
            PlacementState::Error
        );
        let refused_credentials = ApplyError::new(ApplyErrorKind::Unavailable, "bad password");
        assert_eq!(
            report(1, &v, &TopicSeen::Absent, Some(&refused_credentials)).state,
            PlacementState::Unavailable
        );
    }

    #[test]
    fn an_applied_plan_shows_once_kafka_carries_its_effect() {
        let mut s = spec(24, 3, &[("a", "1")]);
        s.removed_config = vec!["b".into()];
        let before = present(12, 3, &[("b", "2")]);
        let Verdict::Apply(plan) = verdict(&s, &before) else {
            panic!("expected an alter");
        };
        assert!(!shows(&plan, &before));
        assert!(
            !shows(&plan, &present(24, 3, &[("b", "2")])),
            "configs not yet"
        );
        assert!(
            !shows(&plan, &present(12, 3, &[("a", "1")])),
            "partitions not yet"
        );
        assert!(shows(&plan, &present(24, 3, &[("a", "1")])));
        assert!(shows(&plan, &TopicSeen::Absent), "gone: judge anew");

        let Verdict::Apply(create) = verdict(&s, &TopicSeen::Absent) else {
            panic!("expected a create");
        };
        assert!(!shows(&create, &TopicSeen::Absent));
        assert!(shows(&create, &present(1, 1, &[])));
        assert!(!shows(&Plan::Delete, &before));
        assert!(shows(&Plan::Delete, &TopicSeen::Absent));
    }

    #[test]
    fn a_synced_topic_is_unavailable_while_kafka_fails_its_probe_and_nothing_is_applied() {
        let s = spec(12, 3, &[("retention.ms", "1000")]);
        let seen = present(12, 3, &[("retention.ms", "1000")]);
        let message = "Kafka unreachable: no answer to the liveness probe within 2s";
        let j = judge(4, &s, &seen, 7, &Probe::Failed(message.into()), None);
        assert_eq!(j.report.state, PlacementState::Unavailable);
        assert_eq!(j.report.message, message);
        assert_eq!(j.report.applied_revision, 4);
        assert_eq!(
            j.report.observed,
            Observed::KafkaTopic(seen.observed()),
            "what was last seen of the topic stays in the status"
        );
        assert_eq!(j.action, Action::Unknown, "the apply state is left alone");
    }

    #[test]
    fn a_topic_that_needs_an_apply_waits_while_kafka_fails_its_probe() {
        // Drift seen before Kafka stopped answering: no apply into a broker that does not
        // answer, and the report says why it waits (not Pending, not an apply error).
        let s = spec(24, 3, &[]);
        let seen = present(12, 3, &[]);
        let failed = Probe::Failed("Kafka unreachable: x".into());
        let timeout = ApplyError::new(ApplyErrorKind::Transient, "creating topic: TIMEOUT");
        let j = judge(1, &s, &seen, 3, &failed, Some(&timeout));
        assert_eq!(j.report.state, PlacementState::Unavailable);
        assert_eq!(j.report.message, "Kafka unreachable: x");
        assert_eq!(j.action, Action::Unknown);
        // Once Kafka answers, the apply that was due is due again.
        let j = judge(1, &s, &seen, 3, &Probe::Answered, None);
        assert_eq!(
            j.action,
            Action::Apply {
                from_version: "3".into()
            }
        );
        assert_eq!(j.report.state, PlacementState::Pending);
    }

    #[test]
    fn a_topic_is_synced_again_without_an_apply_once_kafka_answers_its_probe() {
        let s = spec(12, 3, &[("retention.ms", "1000")]);
        let seen = present(12, 3, &[("retention.ms", "1000")]);
        let down = judge(
            2,
            &s,
            &seen,
            9,
            &Probe::Failed("Kafka unreachable: x".into()),
            None,
        );
        assert_eq!(down.report.state, PlacementState::Unavailable);
        for probe in [Probe::Answered, Probe::NotYet] {
            let up = judge(2, &s, &seen, 9, &probe, None);
            assert_eq!(up.report, report(2, &Verdict::Synced, &seen, None));
            assert_eq!(up.report.state, PlacementState::Synced);
            assert_eq!(up.action, Action::Settled, "nothing to apply: {probe:?}");
        }
    }

    #[test]
    fn the_judgement_with_an_answering_probe_is_the_verdict_and_its_report() {
        let s = spec(1, 1, &[("a", "1")]);
        for (seen, action) in [
            (present(1, 1, &[("a", "1")]), Action::Settled),
            (
                present(1, 1, &[]),
                Action::Apply {
                    from_version: "5".into(),
                },
            ),
            (present(2, 1, &[]), Action::Settled),
            (
                TopicSeen::Present {
                    partitions: 1,
                    replication_factor: 1,
                    configs: Err("denied".into()),
                },
                Action::Unknown,
            ),
        ] {
            let j = judge(1, &s, &seen, 5, &Probe::Answered, None);
            assert_eq!(j.report, report(1, &verdict(&s, &seen), &seen, None));
            assert_eq!(j.action, action, "{seen:?}");
        }
    }

    #[test]
    fn an_apply_error_does_not_hide_a_synced_topic() {
        let seen = present(1, 1, &[]);
        let old = ApplyError::new(ApplyErrorKind::Transient, "old error");
        let r = report(1, &Verdict::Synced, &seen, Some(&old));
        assert_eq!(r.state, PlacementState::Synced);
    }
}
