//! The Kafka topic enforcer (FederatedKafkaTopic): keeps each assigned topic in the member's
//! Kafka as its assignment says — created with its partitions, replication factor and
//! configs, partitions raised, configs changed incrementally, deleted when asked — and
//! reports what the brokers hold.
//!
//! The connection comes from one Secret in the agent's namespace ([`connection`]), watched
//! by name: a change reconnects without a restart; of it only the bootstrap addresses are
//! ever logged, never a credential. The parts, as for every enforcer: the observer
//! ([`observe`]) looks at every assigned topic in one Metadata and one DescribeConfigs
//! request each resync and right after applies, and feeds a cache; [`judge`] decides from
//! it, purely; the applier ([`apply`]) gathers the plans of many topics into one request of
//! each kind. Between looks, a liveness [`probe`] asks Kafka a cheap question every few
//! seconds, so a broker that stops answering makes its topics `Unavailable` within seconds
//! rather than at the next look. Nothing runs — no watch, no connection, no probe — while no
//! topic is assigned.

pub mod apply;
pub mod connection;
pub mod judge;
pub mod observe;
pub mod probe;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accord_common::distribution::{
    AssignmentSpec, KafkaTopicSpec, Observed, PlacementState, PolicyRef,
};
use accord_common::runtime::AbortOnDrop;
use accord_kafka::{Admin, KafkaConfig};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tracing::{info, warn};

use self::connection::ConnectionError;
use self::judge::Verdict;
use self::observe::{Shared, TOPICS, Target};
pub use self::probe::{DEFAULT_PROBE_INTERVAL, DEFAULT_PROBE_TIMEOUT, PROBES, ProbeOptions};
use super::watch::ResourceWatch;
use super::{Action, ApplyError, ApplyErrorKind, Enforcer, EventSink, Judgement, WatchEvent};
use crate::assignments::Assigned;
use crate::metrics::Metrics;
use crate::report::Report;

/// Default name of the connection Secret in the agent's namespace.
pub const DEFAULT_SECRET: &str = "accord-kafka";
/// Default interval between two looks at every assigned topic.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(30);
/// Plural name of the Secrets resource, in watch events.
pub const SECRETS: &str = "secrets";

/// How the agent reaches its cluster's Kafka.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaOptions {
    /// Name of the connection Secret in the agent's namespace.
    pub secret: String,
    /// Interval between two looks at every assigned topic (drift is repaired within it).
    pub resync: Duration,
    /// How often and how patiently Kafka's liveness is probed between looks.
    pub probe: ProbeOptions,
}

impl Default for KafkaOptions {
    fn default() -> Self {
        Self {
            secret: DEFAULT_SECRET.to_owned(),
            resync: DEFAULT_RESYNC,
            probe: ProbeOptions::default(),
        }
    }
}

/// The state of the connection, from the Secret.
enum Link {
    /// The Secret has not been listed yet.
    Waiting,
    /// No usable connection; the message says why.
    Broken(String),
    /// Connected (lazily) with this configuration.
    Ready {
        config: Arc<KafkaConfig>,
        admin: Admin,
    },
}

/// What runs while topics are assigned: the Secret watch, the observer and the applier.
struct Running {
    secret: ResourceWatch<Secret>,
    secret_synced: bool,
    target: watch::Sender<Target>,
    /// Unbounded: at most one plan per assigned policy is ever waiting (the engine applies
    /// one at a time per policy), and queuing without waiting lets the applies of one
    /// engine pass join the same requests.
    applies: mpsc::UnboundedSender<apply::Request>,
    _observer: AbortOnDrop,
    _applier: AbortOnDrop,
    _prober: AbortOnDrop,
}

/// Keeps Kafka topics.
pub struct KafkaTopicEnforcer {
    client: kube::Client,
    namespace: String,
    options: KafkaOptions,
    metrics: Metrics,
    /// Assigned policies by topic name; the first one owns the topic.
    topics: BTreeMap<String, BTreeSet<PolicyRef>>,
    /// The config keys the specs name for each assigned topic (set or removed), sorted.
    keys: Arc<BTreeMap<String, Vec<String>>>,
    link: Link,
    epoch: u64,
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
            client,
            namespace,
            options,
            metrics,
            topics: BTreeMap::new(),
            keys: Arc::default(),
            link: Link::Waiting,
            epoch: 0,
            shared: Arc::new(Mutex::new(observe::Observations::default())),
            nudge: Arc::new(Notify::new()),
            running: None,
        }
    }

    fn all_policies(&self) -> Vec<PolicyRef> {
        self.topics.values().flatten().cloned().collect()
    }

    fn target(&self) -> Target {
        let (admin, config) = match &self.link {
            Link::Ready { admin, config } => (Some(admin.clone()), Some(config.clone())),
            Link::Waiting | Link::Broken(_) => (None, None),
        };
        Target {
            admin,
            config,
            topics: Arc::new(self.topics.keys().cloned().collect()),
            keys: self.keys.clone(),
            epoch: self.epoch,
        }
    }

    fn start(&mut self, events: &EventSink) -> Running {
        let config =
            watcher::Config::default().fields(&format!("metadata.name={}", self.options.secret));
        let secret = ResourceWatch::start_with(
            Api::namespaced(self.client.clone(), &self.namespace),
            config,
            SECRETS,
            &self.namespace,
            connection::slim_secret,
            events.clone(),
        );
        let (target, target_rx) = watch::channel(self.target());
        let (applies, applies_rx) = mpsc::unbounded_channel();
        let observer = tokio::spawn(observe::run(
            target_rx.clone(),
            self.nudge.clone(),
            self.shared.clone(),
            events.clone(),
            self.options.resync,
            self.metrics.clone(),
        ));
        let prober = tokio::spawn(probe::run(
            target_rx.clone(),
            self.shared.clone(),
            self.nudge.clone(),
            events.clone(),
            self.options.probe,
            self.metrics.clone(),
        ));
        let applier = tokio::spawn(apply::run(
            applies_rx,
            target_rx,
            self.shared.clone(),
            self.nudge.clone(),
            self.metrics.clone(),
        ));
        Running {
            secret,
            secret_synced: false,
            target,
            applies,
            _observer: AbortOnDrop(observer),
            _applier: AbortOnDrop(applier),
            _prober: AbortOnDrop(prober),
        }
    }

    /// Sets the connection to `next`; true when it changed (every topic is then looked at
    /// afresh through the new one).
    fn relink(&mut self, next: Result<KafkaConfig, ConnectionError>) -> bool {
        let link = match next {
            Ok(config) => {
                if let Link::Ready {
                    config: current, ..
                } = &self.link
                    && **current == config
                {
                    return false;
                }
                info!(
                    secret = %format!("{}/{}", self.namespace, self.options.secret),
                    bootstrap = %config.bootstrap.join(","),
                    "Kafka connection configured"
                );
                Link::Ready {
                    admin: Admin::new(config.clone()),
                    config: Arc::new(config),
                }
            }
            Err(e) => {
                let message = e.to_string();
                if matches!(&self.link, Link::Broken(m) if *m == message) {
                    return false;
                }
                warn!(error = %message, "no Kafka connection");
                Link::Broken(message)
            }
        };
        self.link = link;
        self.epoch += 1;
        observe::lock(&self.shared).reset(self.epoch);
        self.publish();
        true
    }

    /// Tells the observer and the applier the current connection and topics.
    fn publish(&self) {
        if let Some(running) = &self.running {
            running.target.send_replace(self.target());
        }
    }

    /// The connection the Secret in the watch's cache describes.
    fn read_secret(&self) -> Option<Result<KafkaConfig, ConnectionError>> {
        let running = self.running.as_ref()?;
        let secret = running
            .secret
            .cache
            .get(&ObjectRef::new(&self.options.secret).within(&self.namespace));
        Some(connection::config_of(
            &self.namespace,
            &self.options.secret,
            secret.as_deref(),
        ))
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

impl Enforcer for KafkaTopicEnforcer {
    fn name(&self) -> &'static str {
        "kafka_topic"
    }

    fn enforces(&self, spec: &AssignmentSpec) -> bool {
        matches!(spec, AssignmentSpec::KafkaTopic(_))
    }

    fn assign(&mut self, assigned: &BTreeMap<PolicyRef, Assigned>, events: &EventSink) {
        self.topics.clear();
        let mut keys: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (policy, a) in assigned {
            if let AssignmentSpec::KafkaTopic(spec) = &a.spec
                && !spec.topic_name.is_empty()
            {
                self.topics
                    .entry(spec.topic_name.clone())
                    .or_default()
                    .insert(policy.clone());
                keys.entry(spec.topic_name.clone())
                    .or_default()
                    .extend(spec.config.keys().chain(&spec.removed_config).cloned());
            }
        }
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
            if self.running.take().is_some() {
                info!("no Kafka topics assigned; closing the Kafka connection");
            }
            self.link = Link::Waiting;
            self.epoch += 1;
            observe::lock(&self.shared).reset(self.epoch);
            return;
        }
        if self.running.is_none() {
            info!(
                secret = %format!("{}/{}", self.namespace, self.options.secret),
                "Kafka topics assigned; watching the Kafka connection Secret"
            );
            self.running = Some(self.start(events));
        } else if keys_changed {
            self.publish();
        }
    }

    fn event(&mut self, event: WatchEvent) -> Vec<PolicyRef> {
        match event {
            WatchEvent::Changed {
                resource: TOPICS,
                name,
                ..
            } => self
                .topics
                .get(&name)
                .map(|set| set.iter().cloned().collect())
                .unwrap_or_default(),
            WatchEvent::Synced {
                resource: TOPICS, ..
            }
            | WatchEvent::Failed {
                resource: TOPICS, ..
            }
            // The probe's verdict changed: it bears on every topic.
            | WatchEvent::Changed {
                resource: PROBES, ..
            } => self.all_policies(),
            WatchEvent::Synced { .. } | WatchEvent::Changed { .. } => {
                if let Some(running) = self.running.as_mut()
                    && matches!(event, WatchEvent::Synced { .. })
                {
                    running.secret_synced = true;
                }
                if !self.running.as_ref().is_some_and(|r| r.secret_synced) {
                    return Vec::new();
                }
                let changed = self.read_secret().is_some_and(|next| self.relink(next));
                if changed {
                    self.all_policies()
                } else {
                    Vec::new()
                }
            }
            WatchEvent::Failed { message, .. } => {
                // Once listed, the cache stays valid while the watch retries.
                if self.running.as_ref().is_none_or(|r| r.secret_synced) {
                    return Vec::new();
                }
                if self.relink(Err(ConnectionError::Watch { message })) {
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
        assigned: &Assigned,
        apply_error: Option<&ApplyError>,
    ) -> Option<Judgement> {
        let AssignmentSpec::KafkaTopic(spec) = &assigned.spec else {
            return None;
        };
        let revision = assigned.revision;
        if let Some(message) = judge::invalid(spec) {
            let verdict = Verdict::Invalid(message);
            return Some(Judgement {
                report: judge::report(revision, &verdict, &judge::TopicSeen::Absent, None),
                action: Action::Settled,
            });
        }
        // Another policy got to this topic first: only one may manage it.
        if let Some(owner) = self
            .topics
            .get(&spec.topic_name)
            .and_then(|set| set.first())
            .filter(|owner| *owner != policy)
        {
            return Some(Judgement {
                report: Report::without_object(
                    PlacementState::Conflict,
                    format!(
                        "policy {owner} already manages topic {} in this cluster",
                        spec.topic_name
                    ),
                    revision,
                ),
                action: Action::Settled,
            });
        }
        match &self.link {
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
        assigned: &Assigned,
    ) -> BoxFuture<'static, Result<String, ApplyError>> {
        let AssignmentSpec::KafkaTopic(spec) = &assigned.spec else {
            // The engine routes only topic assignments here.
            return Box::pin(std::future::ready(Ok(String::new())));
        };
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
        let stopped = || ApplyError::new(ApplyErrorKind::Unavailable, "the Kafka applier stopped");
        // Queued now, while the engine is still issuing the applies of this pass.
        let (reply, answer) = oneshot::channel();
        let request = apply::Request {
            topic: spec.topic_name.clone(),
            plan,
            reply,
        };
        if running.applies.send(request).is_err() {
            return Box::pin(std::future::ready(Err(stopped())));
        }
        Box::pin(async move {
            answer.await.map_err(|_| stopped())??;
            // Not a version the observer hands out: the engine waits for its next look.
            Ok(format!("applied-after-{}", seen.version))
        })
    }
}
