//! The Kafka topic enforcer (FederatedKafkaTopic): keeps each assigned topic in the member's
//! Kafka as its assignment says — created with its partitions, replication factor and
//! configs, partitions raised, configs changed incrementally, deleted when asked — and
//! reports what the brokers hold.
//!
//! It is the Kafka enforcer ([`KafkaEnforcer`]) of [`Topics`]: what is here is only what
//! topics have of their own. The connection comes from one Secret in the agent's namespace
//! ([`connection`](super::kafka::connection)), watched by name
//! ([`KafkaLink`](super::kafka::link::KafkaLink)): a change reconnects without a restart; of
//! it only the bootstrap addresses are ever logged, never a credential. The parts, as for
//! every enforcer: the observer ([`observe`]) looks at every assigned topic in one Metadata
//! and one DescribeConfigs request each resync and right after applies (between two full
//! looks, only at the topics applied to and those newly assigned), and feeds a cache;
//! [`judge`] decides from it, purely; the applier ([`apply`]) gathers the plans of many
//! topics into one request of each kind. Between looks, a liveness
//! [`probe`](super::kafka::probe) asks Kafka a cheap question every few seconds, so a broker
//! that stops answering makes its topics `Unavailable` within seconds rather than at the
//! next look. Nothing runs — no watch, no connection, no probe — while no topic is assigned.
//! The enforcer, the connection, the probe and the classification of Kafka's errors are
//! shared with the user enforcer ([`super::kafka`]).

pub mod apply;
pub mod judge;
pub mod observe;

use std::collections::{BTreeMap, BTreeSet};

use accord_common::distribution::{KafkaTopicSpec, Observed};
use accord_kafka::{Admin, KafkaError};
use tracing::warn;

use self::judge::{Plan, TopicSeen, Verdict};
use super::kafka::batch::Request;
use super::kafka::observe::{Seen, Shared};
use super::kafka::probe::Probe;
use super::kafka::resource::{KafkaEnforcer, KafkaResource};
use super::{Action, ApplyError, Judgement, Mine};
use crate::metrics::Metrics;

/// Keeps Kafka topics.
pub type KafkaTopicEnforcer = KafkaEnforcer<Topics>;

/// Kafka topics, as the Kafka enforcer keeps them.
#[derive(Debug)]
pub struct Topics;

impl KafkaResource for Topics {
    type Spec = KafkaTopicSpec;
    type Seen = TopicSeen;
    type Plan = Plan;
    /// The config keys the specs of a topic name (set or removed), sorted: the only keys a
    /// look asks Kafka for.
    type Ask = Vec<String>;
    type Failure = String;
    type Kept = ();

    const NAME: &'static str = "kafka_topic";
    const RESOURCE: &'static str = observe::TOPICS;
    const ITEM: &'static str = "topic";
    const WHAT: &'static str = "topic";
    const PARTIAL_LOOKS: bool = true;
    /// Each time a topic's plan was judged again without showing, it waits twice the looks
    /// before the next time, up to `SETTLING_LOOKS << 3`: a broker slow to list
    /// acknowledged topics (20–48 s measured on cold brokers) gets each CreateTopics a
    /// handful of times, not one every few seconds.
    const MAX_DOUBLINGS: u32 = 3;

    fn name(spec: &KafkaTopicSpec) -> &str {
        &spec.topic_name
    }

    fn asks(mine: &Mine<'_, KafkaTopicSpec>) -> BTreeMap<String, Vec<String>> {
        let mut keys: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for &(_, spec, _) in mine {
            if !spec.topic_name.is_empty() {
                keys.entry(spec.topic_name.clone())
                    .or_default()
                    .extend(spec.config.keys().chain(&spec.removed_config).cloned());
            }
        }
        // One entry per assigned topic: a topic added or gone changes the keys too.
        keys.into_iter()
            .map(|(topic, keys)| (topic, keys.into_iter().collect()))
            .collect()
    }

    fn invalid(spec: &KafkaTopicSpec, revision: i64) -> Option<Judgement> {
        let verdict = Verdict::Invalid(judge::invalid(spec)?);
        Some(Judgement {
            report: judge::report(revision, &verdict, &TopicSeen::Absent, None),
            action: Action::Settled,
        })
    }

    fn observed(_spec: &KafkaTopicSpec, seen: &TopicSeen, _kept: &()) -> Observed {
        Observed::KafkaTopic(seen.observed())
    }

    fn judge(
        revision: i64,
        spec: &KafkaTopicSpec,
        seen: &Seen<TopicSeen>,
        _kept: &(),
        probe: &Probe,
        apply_error: Option<&ApplyError>,
    ) -> Judgement {
        judge::judge(revision, spec, &seen.seen, seen.version, probe, apply_error)
    }

    fn plan(spec: &KafkaTopicSpec, seen: &TopicSeen, _kept: &()) -> Option<Plan> {
        match judge::verdict(spec, seen) {
            Verdict::Apply(plan) => Some(plan),
            _ => None,
        }
    }

    fn shows(plan: &Plan, seen: &TopicSeen) -> bool {
        judge::shows(plan, seen)
    }

    fn retain(_kept: &mut (), _assigned: &BTreeSet<&String>) {}

    fn noticed(name: &str, before: Option<&TopicSeen>, now: &TopicSeen) {
        if matches!(before, Some(TopicSeen::Present { .. })) && *now == TopicSeen::Absent {
            // Not by this agent (its own deletions are applied plans).
            warn!(topic = %name, "the topic disappeared from Kafka (deleted outside Accord)");
        }
    }

    async fn look(
        admin: &Admin,
        names: &[String],
        asks: &BTreeMap<String, Vec<String>>,
        metrics: &Metrics,
    ) -> Result<BTreeMap<String, TopicSeen>, KafkaError> {
        observe::look(admin, names, asks, metrics).await
    }

    async fn execute(
        admin: &Admin,
        round: Vec<Request<Plan>>,
        shared: &Shared<Self>,
        metrics: &Metrics,
    ) {
        apply::execute(admin, round, shared, metrics).await;
    }
}
