//! The Kafka user enforcer (FederatedKafkaUser): keeps each assigned user in the member's
//! Kafka as its assignment says — its SCRAM-SHA-512 credential, the ACLs of its principal
//! `User:<name>`, its client quotas; all of them removed when asked — and reports what the
//! brokers hold.
//!
//! It reaches Kafka as the topic enforcer does, through the same connection Secret and
//! options ([`KafkaOptions`], [`KafkaLink`]), with its own watch of that Secret, its own
//! liveness [`probe`](super::kafka::probe) and its own client. The parts: the observer
//! ([`observe`]) looks at every user in three requests whatever their number, each resync
//! and right after applies, and feeds a cache; [`judge`] decides from it, purely; the
//! applier ([`apply`]) gathers the plans of many users into at most one request of each
//! kind per round. Nothing runs — no watch, no connection, no probe, no look — while no user
//! is assigned.
//!
//! One policy per user name: a second policy naming a user another already manages in this
//! cluster is `Conflict`, as for topics.

pub mod apply;
pub mod judge;
pub mod observe;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use accord_common::distribution::{
    AssignmentSpec, KafkaUserSpec, Observed, PlacementState, PolicyRef,
};
use futures::future::BoxFuture;
use tokio::sync::Notify;
use tracing::info;

use self::observe::{Shared, Target, USERS};
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

/// What runs while users are assigned (besides the Secret watch): the observer, the
/// applier and the probe.
type Running = Tasks<Target, apply::Request>;

/// Keeps Kafka users.
pub struct KafkaUserEnforcer {
    options: KafkaOptions,
    metrics: Metrics,
    /// Assigned policies by user name; the first one owns the user.
    users: BTreeMap<String, BTreeSet<PolicyRef>>,
    /// Policies [`Enforcer::reassigned`] hands the engine: claimants of a name whose owner
    /// changed at the last assignment.
    reowned: Vec<PolicyRef>,
    link: KafkaLink,
    shared: Shared,
    nudge: Arc<Notify>,
    running: Option<Running>,
}

impl KafkaUserEnforcer {
    /// An enforcer reading its connection Secret (`options.secret`) in `namespace` through
    /// `client`, counting its Kafka requests in `metrics`.
    pub fn new(
        client: kube::Client,
        namespace: String,
        options: KafkaOptions,
        metrics: Metrics,
    ) -> Self {
        Self {
            link: KafkaLink::new(client, namespace, &options, "kafka_user"),
            options,
            metrics,
            users: BTreeMap::new(),
            reowned: Vec::new(),
            shared: Arc::new(Mutex::new(observe::Observations::default())),
            nudge: Arc::new(Notify::new()),
            running: None,
        }
    }

    fn all_policies(&self) -> Vec<PolicyRef> {
        self.users.values().flatten().cloned().collect()
    }

    fn target(&self) -> Target {
        Target {
            admin: self.link.admin(),
            config: self.link.config(),
            users: Arc::new(self.users.keys().cloned().collect()),
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

    /// Tells the observer, the applier and the probe the current connection and users.
    fn publish(&self) {
        if let Some(running) = &self.running {
            running.publish(self.target());
        }
    }

    /// The report of a user that cannot be looked at now, with what was last seen of it:
    /// `Unavailable` when Kafka cannot be reached, `Error` when it refused (`error` says
    /// which and why).
    fn unlooked(&self, spec: &KafkaUserSpec, error: &ApplyError, revision: i64) -> Judgement {
        let state = match error.kind {
            ApplyErrorKind::Unavailable => PlacementState::Unavailable,
            _ => PlacementState::Error,
        };
        let observations = observe::lock(&self.shared);
        let observed = observations
            .user(&spec.username)
            .map_or(Observed::Nothing, |s| {
                Observed::KafkaUser(judge::observed(
                    spec,
                    &s.seen,
                    observations.upserted(&spec.username),
                ))
            });
        Judgement {
            report: Report {
                observed,
                ..Report::without_object(state, error.message.clone(), revision)
            },
            action: Action::Unknown,
        }
    }
}

impl KindEnforcer for KafkaUserEnforcer {
    type Spec = KafkaUserSpec;

    const NAME: &'static str = "kafka_user";

    fn spec(spec: &AssignmentSpec) -> Option<&KafkaUserSpec> {
        match spec {
            AssignmentSpec::KafkaUser(s) => Some(s),
            _ => None,
        }
    }

    fn assign(&mut self, mine: &Mine<'_, KafkaUserSpec>, events: &EventSink) {
        let before: Vec<&String> = self.users.keys().collect();
        let mut users: BTreeMap<String, BTreeSet<PolicyRef>> = BTreeMap::new();
        for &(policy, spec, _) in mine {
            if !spec.username.is_empty() {
                users
                    .entry(spec.username.clone())
                    .or_default()
                    .insert(policy.clone());
            }
        }
        // Spec changes need no look (every binding and quota of an assigned user is in the
        // cache); a user added or gone does.
        let users_changed = users.keys().ne(before);
        self.reowned = reowned(&self.users, &users);
        self.users = users;
        if self.users.is_empty() {
            self.running = None;
            if self.link.close() {
                info!("no Kafka users assigned; closing the Kafka connection");
            }
            observe::lock(&self.shared).reset(self.link.epoch());
            return;
        }
        if self.running.is_none() {
            info!(users = self.users.len(), "Kafka users assigned");
            self.running = Some(self.start(events));
        } else if users_changed {
            self.publish();
        }
    }

    fn reassigned(&mut self) -> Vec<PolicyRef> {
        std::mem::take(&mut self.reowned)
    }

    fn event(&mut self, event: WatchEvent) -> Vec<PolicyRef> {
        match super::kafka::concerned(USERS, &self.users, event) {
            Ok(policies) => policies,
            // The connection Secret's watch.
            Err(secret) => {
                if self.link.event(secret) {
                    // Every user is looked at afresh through the new connection.
                    observe::lock(&self.shared).reset(self.link.epoch());
                    self.publish();
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
        spec: &KafkaUserSpec,
        assigned: &Assigned,
        apply_error: Option<&ApplyError>,
    ) -> Option<Judgement> {
        let revision = assigned.revision;
        if let Some(message) = judge::invalid(spec) {
            return Some(Judgement {
                report: Report::without_object(PlacementState::Error, message, revision),
                action: Action::Settled,
            });
        }
        // Another policy got to this user first: only one may manage it.
        let what = format!("Kafka user {}", spec.username);
        if let Some(conflict) = conflict(self.users.get(&spec.username), policy, &what, revision) {
            return Some(conflict);
        }
        match self.link.state() {
            Link::Waiting => return None,
            Link::Broken(message) => {
                let error = ApplyError::new(ApplyErrorKind::Unavailable, message.clone());
                return Some(self.unlooked(spec, &error, revision));
            }
            Link::Ready { .. } => {}
        }
        let observations = observe::lock(&self.shared);
        if let Some(error) = observations.error().cloned() {
            drop(observations);
            return Some(self.unlooked(spec, &error, revision));
        }
        let seen = observations.user(&spec.username)?;
        Some(judge::judge(
            revision,
            spec,
            &seen.seen,
            seen.version,
            observations.upserted(&spec.username),
            observations.probe(),
            apply_error,
        ))
    }

    fn apply(
        &self,
        _policy: &PolicyRef,
        spec: &KafkaUserSpec,
        _assigned: &Assigned,
    ) -> BoxFuture<'static, Result<String, ApplyError>> {
        let ready = |result| -> BoxFuture<'static, Result<String, ApplyError>> {
            Box::pin(std::future::ready(result))
        };
        let Some(running) = &self.running else {
            return ready(Err(ApplyError::new(
                ApplyErrorKind::Unavailable,
                "no Kafka connection",
            )));
        };
        let (plan, version) = {
            let observations = observe::lock(&self.shared);
            let Some(seen) = observations.user(&spec.username) else {
                return ready(Err(ApplyError::new(
                    ApplyErrorKind::Unavailable,
                    "the user has not been looked at in Kafka yet",
                )));
            };
            let upserted = observations.upserted(&spec.username);
            match judge::verdict(spec, &seen.seen, upserted) {
                Ok(verdict) if !verdict.plan.is_empty() => (verdict.plan, seen.version),
                // Nothing to do after all: the same version, so the engine judges again.
                _ => return ready(Ok(seen.version.to_string())),
            }
        };
        let user = spec.username.clone();
        running.apply(
            |reply| apply::Request {
                name: user,
                plan,
                reply,
            },
            version,
        )
    }
}
