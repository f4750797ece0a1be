//! The Kafka topic enforcer (FederatedKafkaTopic): keeps each assigned topic in the member's
//! Kafka as its assignment says — created with its partitions, replication factor and
//! configs, partitions raised, configs changed incrementally, deleted when asked — and
//! reports what the brokers hold.
//!
//! The connection comes from one Secret in the agent's namespace
//! ([`connection`](super::kafka::connection)), watched by name ([`KafkaLink`]): a change
//! reconnects without a restart; of it only the bootstrap addresses are ever logged, never a
//! credential. The parts, as for every enforcer: the observer ([`observe`]) looks at every
//! assigned topic in one Metadata and one DescribeConfigs request each resync and right
//! after applies, and feeds a cache; [`judge`] decides from it, purely; the applier
//! ([`apply`]) gathers the plans of many topics into one request of each kind. Between
//! looks, a liveness [`probe`](super::kafka::probe) asks Kafka a cheap question every few seconds, so a broker
//! that stops answering makes its topics `Unavailable` within seconds rather than at the
//! next look. Nothing runs — no watch, no connection, no probe — while no topic is assigned.
//! The connection, the probe and the classification of Kafka's errors are shared with the
//! user enforcer ([`super::kafka`]).

pub mod apply;
pub mod judge;
pub mod observe;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use accord_common::distribution::{
    AssignmentSpec, KafkaTopicSpec, Observed, PlacementState, PolicyRef,
};
use futures::future::BoxFuture;
use tokio::sync::Notify;
use tracing::info;

use self::judge::Verdict;
use self::observe::{Shared, TOPICS, Target};
use super::kafka::KafkaOptions;
use super::kafka::link::{KafkaLink, Link};
use super::kafka::tasks::{Crew, Tasks};
use super::kafka::{conflict, reowned};
use super::{
    Action, ApplyError, ApplyErrorKind, EventSink, Judgement, KindEnforcer, Mine, WatchEvent,
};
use crate::assignments::Assigned;
use crate::metrics::Metrics;
use crate::report::Report;

/// What runs while topics are assigned (besides the Secret watch): the observer, the
/// applier and the probe.
type Running = Tasks<Target, apply::Request>;

/// Keeps Kafka topics.
pub struct KafkaTopicEnforcer {
    options: KafkaOptions,
    metrics: Metrics,
    /// Assigned policies by topic name; the first one owns the topic.
    topics: BTreeMap<String, BTreeSet<PolicyRef>>,
    /// Policies [`Enforcer::reassigned`] hands the engine: claimants of a name whose owner
    /// changed at the last assignment.
    reowned: Vec<PolicyRef>,
    /// The config keys the specs name for each assigned topic (set or removed), sorted.
    keys: Arc<BTreeMap<String, Vec<String>>>,
    link: KafkaLink,
    shared: Shared,
    nudge: Arc<Notify>,
    running: Option<Running>,
}

impl KafkaTopicEnforcer {
    /// An enforcer reading its connection Secret in `namespace` through `client`.
    pub fn new(
        client: kube::Client,
        namespace: String,
        options: KafkaOptions,
        metrics: Metrics,
    ) -> Self {
        Self {
            link: KafkaLink::new(client, namespace, &options, "kafka_topic"),
            options,
            metrics,
            topics: BTreeMap::new(),
            reowned: Vec::new(),
            keys: Arc::default(),
            shared: Arc::new(Mutex::new(observe::Observations::default())),
            nudge: Arc::new(Notify::new()),
            running: None,
        }
    }

    fn all_policies(&self) -> Vec<PolicyRef> {
        self.topics.values().flatten().cloned().collect()
    }

    fn target(&self) -> Target {
        Target {
            admin: self.link.admin(),
            config: self.link.config(),
            topics: Arc::new(self.topics.keys().cloned().collect()),
            keys: self.keys.clone(),
            epoch: self.link.epoch(),
        }
    }

    fn start(&mut self, events: &EventSink) -> Running {
        self.link.watch(events);
        let crew = Crew {
            shared: self.shared.clone(),
            nudge: self.nudge.clone(),
            options: self.options.clone(),
            metrics: self.metrics.clone(),
        };
        Tasks::spawn(self.target(), events, crew, observe::run, apply::run)
    }

    /// The connection changed: every topic is looked at afresh through the new one.
    fn relinked(&self) {
        observe::lock(&self.shared).reset(self.link.epoch());
        self.publish();
    }

    /// Tells the observer and the applier the current connection and topics.
    fn publish(&self) {
        if let Some(running) = &self.running {
            running.publish(self.target());
        }
    }

    /// The report of a topic that cannot be looked at now, with what was last seen of it.
    fn unavailable(&self, spec: &KafkaTopicSpec, message: String, revision: i64) -> Judgement {
        let observed = observe::lock(&self.shared)
            .topic(&spec.topic_name)
            .map_or(Observed::Nothing, |s| {
                Observed::KafkaTopic(s.seen.observed())
            });
        Judgement {
            report: Report {
                observed,
                ..Report::without_object(PlacementState::Unavailable, message, revision)
            },
            action: Action::Unknown,
        }
    }
}

impl KindEnforcer for KafkaTopicEnforcer {
    type Spec = KafkaTopicSpec;

    const NAME: &'static str = "kafka_topic";

    fn spec(spec: &AssignmentSpec) -> Option<&KafkaTopicSpec> {
        match spec {
            AssignmentSpec::KafkaTopic(s) => Some(s),
            _ => None,
        }
    }

    fn assign(&mut self, mine: &Mine<'_, KafkaTopicSpec>, events: &EventSink) {
        let before = std::mem::take(&mut self.topics);
        let mut keys: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for &(policy, spec, _) in mine {
            if !spec.topic_name.is_empty() {
                self.topics
                    .entry(spec.topic_name.clone())
                    .or_default()
                    .insert(policy.clone());
                keys.entry(spec.topic_name.clone())
                    .or_default()
                    .extend(spec.config.keys().chain(&spec.removed_config).cloned());
            }
        }
        self.reowned = reowned(&before, &self.topics);
        let keys: BTreeMap<String, Vec<String>> = keys
            .into_iter()
            .map(|(topic, keys)| (topic, keys.into_iter().collect()))
            .collect();
        // One entry per assigned topic: a topic added or gone changes the keys too.
        let keys_changed = keys != *self.keys;
        if keys_changed {
            let mut observations = observe::lock(&self.shared);
            for (topic, now) in &keys {
                if self.keys.get(topic).is_some_and(|was| was != now) {
                    observations.forget(topic);
                }
            }
        }
        self.keys = Arc::new(keys);
        if self.topics.is_empty() {
            self.running = None;
            if self.link.close() {
                info!("no Kafka topics assigned; closing the Kafka connection");
            }
            observe::lock(&self.shared).reset(self.link.epoch());
            return;
        }
        if self.running.is_none() {
            info!("Kafka topics assigned");
            self.running = Some(self.start(events));
        } else if keys_changed {
            self.publish();
        }
    }

    fn reassigned(&mut self) -> Vec<PolicyRef> {
        std::mem::take(&mut self.reowned)
    }

    fn event(&mut self, event: WatchEvent) -> Vec<PolicyRef> {
        match super::kafka::concerned(TOPICS, &self.topics, event) {
            Ok(policies) => policies,
            // The connection Secret's watch.
            Err(secret) => {
                if self.link.event(secret) {
                    self.relinked();
                    self.all_policies()
                } else {
                    Vec::new()
                }
            }
        }
    }

    fn look(
        &self,
        policy: &PolicyRef,
        spec: &KafkaTopicSpec,
        assigned: &Assigned,
        apply_error: Option<&ApplyError>,
    ) -> Option<Judgement> {
        let revision = assigned.revision;
        if let Some(message) = judge::invalid(spec) {
            let verdict = Verdict::Invalid(message);
            return Some(Judgement {
                report: judge::report(revision, &verdict, &judge::TopicSeen::Absent, None),
                action: Action::Settled,
            });
        }
        // Another policy got to this topic first: only one may manage it.
        let what = format!("topic {}", spec.topic_name);
        if let Some(conflict) = conflict(self.topics.get(&spec.topic_name), policy, &what, revision)
        {
            return Some(conflict);
        }
        match self.link.state() {
            Link::Waiting => return None,
            Link::Broken(message) => {
                return Some(self.unavailable(spec, message.clone(), revision));
            }
            Link::Ready { .. } => {}
        }
        let observations = observe::lock(&self.shared);
        if let Some(error) = observations.error() {
            let message = error.to_owned();
            drop(observations);
            return Some(self.unavailable(spec, message, revision));
        }
        let seen = observations.topic(&spec.topic_name)?;
        Some(judge::judge(
            revision,
            spec,
            &seen.seen,
            seen.version,
            observations.probe(),
            apply_error,
        ))
    }

    fn apply(
        &self,
        _policy: &PolicyRef,
        spec: &KafkaTopicSpec,
        _assigned: &Assigned,
    ) -> BoxFuture<'static, Result<String, ApplyError>> {
        let Some(running) = &self.running else {
            return Box::pin(std::future::ready(Err(ApplyError::new(
                ApplyErrorKind::Unavailable,
                "no Kafka connection",
            ))));
        };
        let Some(seen) = observe::lock(&self.shared).topic(&spec.topic_name).cloned() else {
            return Box::pin(std::future::ready(Err(ApplyError::new(
                ApplyErrorKind::Unavailable,
                "the topic has not been looked at in Kafka yet",
            ))));
        };
        let Verdict::Apply(plan) = judge::verdict(spec, &seen.seen) else {
            // Nothing to do after all: the same version, so the engine judges again.
            return Box::pin(std::future::ready(Ok(seen.version.to_string())));
        };
        let topic = spec.topic_name.clone();
        running.apply(
            |reply| apply::Request {
                name: topic,
                plan,
                reply,
            },
            seen.version,
        )
    }
}
