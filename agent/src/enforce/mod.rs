//! Enforcers: one per kind of assignment, each making the member cluster match what its
//! policies ask, behind the one [`Enforcer`] trait the kind-neutral engine drives.
//!
//! An enforcer has three parts, with I/O only at the ends:
//! - what it watches for what it is assigned ([`Enforcer::assign`], [`Enforcer::event`]):
//!   its watches feed caches it owns and tell the engine, through an [`EventSink`], which
//!   of its policies to look at again;
//! - a pure judgement of one policy from those caches ([`Enforcer::look`]): what to report
//!   and whether an apply is needed;
//! - an async apply ([`Enforcer::apply`]), whose result comes back to the engine.
//!
//! The engine owns everything else: the assignment book, save-then-ack, the stream,
//! debounced reports under optimistic concurrency, timers and apply backoff. An assignment
//! of a kind no enforcer takes is held, saved and acknowledged like any other, and reported
//! as `Error` saying that this agent version does not enforce it (see
//! [`unenforced_report`]); once the agent is upgraded it enforces it from the saved state.
//!
//! Adding a kind: a module here with a type implementing [`Enforcer`], and one line in
//! [`enforcers`].

pub mod kafka_topic;
pub mod promfed;
pub mod scale;
pub mod watch;

use std::collections::BTreeMap;

use accord_common::distribution::{AssignmentSpec, PlacementState, PolicyRef};
use futures::future::BoxFuture;
use tokio::sync::mpsc;

use crate::assignments::Assigned;
use crate::engine::Input;
use crate::metrics::{Metrics, kube_error_kind};
use crate::report::Report;

/// The enforcers of this agent version, one per kind it enforces; `namespace` is the
/// agent's own. Kafka topics use the default connection Secret and resync interval
/// ([`enforcers_with`] takes others).
pub fn enforcers(
    client: &kube::Client,
    metrics: &Metrics,
    namespace: &str,
) -> Vec<Box<dyn Enforcer>> {
    enforcers_with(
        client,
        metrics,
        namespace,
        &kafka_topic::KafkaOptions::default(),
    )
}

/// The enforcers of this agent version, with the Kafka connection Secret and resync
/// interval of `kafka`.
pub fn enforcers_with(
    client: &kube::Client,
    metrics: &Metrics,
    namespace: &str,
    kafka: &kafka_topic::KafkaOptions,
) -> Vec<Box<dyn Enforcer>> {
    vec![
        Box::new(scale::ScaleEnforcer::new(client.clone(), metrics.clone())),
        Box::new(promfed::PromfedEnforcer::new(
            client.clone(),
            namespace.to_owned(),
        )),
        Box::new(kafka_topic::KafkaTopicEnforcer::new(
            client.clone(),
            namespace.to_owned(),
            kafka.clone(),
            metrics.clone(),
        )),
    ]
}

/// Makes the member cluster match the assignments of one kind.
pub trait Enforcer: Send + 'static {
    /// Short name, for logs and for routing its watch events.
    fn name(&self) -> &'static str;

    /// Whether this enforcer takes assignments like `spec`.
    fn enforces(&self, spec: &AssignmentSpec) -> bool;

    /// The assignments it enforces are now `assigned` (all of them, each time the book
    /// changes): start what needs watching, stop what no longer does. Watches report
    /// through `events`. The engine looks at every new or changed policy afterwards.
    fn assign(&mut self, assigned: &BTreeMap<PolicyRef, Assigned>, events: &EventSink);

    /// One of its watches saw something; returns the policies to look at again.
    fn event(&mut self, event: WatchEvent) -> Vec<PolicyRef>;

    /// Judges one policy from what the watches hold, without I/O. `apply_error` is the
    /// message of the last failed apply, while it stands. `None` while its caches are not
    /// filled yet: an event follows when they are.
    fn look(
        &self,
        policy: &PolicyRef,
        assigned: &Assigned,
        apply_error: Option<&str>,
    ) -> Option<Judgement>;

    /// Makes the cluster match `assigned`; answers the object's version afterwards (equal to
    /// the one the apply was decided on when it changed nothing).
    fn apply(
        &self,
        policy: &PolicyRef,
        assigned: &Assigned,
    ) -> BoxFuture<'static, Result<String, ApplyError>>;
}

/// What an enforcer makes of one policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    /// What to tell the hub.
    pub report: Report,
    /// What to do about it.
    pub action: Action,
}

/// What the engine is to do after a [`Judgement`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing to apply (synced, or nothing the agent may do): apply errors and backoff
    /// are forgotten.
    Settled,
    /// Apply the assignment; the decision was made on the object at `from_version`.
    Apply {
        /// Version of the object judged (`resourceVersion` for Kubernetes objects).
        from_version: String,
    },
    /// The object cannot be looked at right now (its watch fails): keep whatever apply
    /// state there is.
    Unknown,
}

/// A change seen by an enforcer's watch; the same shape for any watched resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// An object was added, changed or deleted.
    Changed {
        /// Which resource (e.g. `deployments`).
        resource: &'static str,
        /// Its namespace ("" for cluster-scoped ones or outside Kubernetes).
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A (re)list completed: the cache holds the current objects.
    Synced {
        /// Which resource.
        resource: &'static str,
        /// The namespace listed.
        namespace: String,
    },
    /// The watch failed; it is retried with backoff.
    Failed {
        /// Which resource.
        resource: &'static str,
        /// The namespace watched.
        namespace: String,
        /// The error.
        message: String,
    },
}

/// Where an enforcer's watches send what they see: the engine's inputs, labelled with the
/// enforcer.
#[derive(Clone, Debug)]
pub struct EventSink {
    tx: mpsc::Sender<Input>,
    enforcer: &'static str,
}

impl EventSink {
    pub(crate) fn new(tx: mpsc::Sender<Input>, enforcer: &'static str) -> Self {
        Self { tx, enforcer }
    }

    /// Passes `event` to the engine; false once the engine is gone.
    pub async fn send(&self, event: WatchEvent) -> bool {
        self.tx
            .send(Input::Watch {
                enforcer: self.enforcer,
                event,
            })
            .await
            .is_ok()
    }
}

/// Why an apply failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The API server refused or failed the server-side apply.
    #[error("applying to {object}: {source}")]
    Kube {
        /// What was applied, e.g. `Deployment prod/web`.
        object: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A request to a system outside Kubernetes (e.g. the member's Kafka) failed.
    #[error("{message}")]
    External {
        /// The metric label of the error.
        kind: &'static str,
        /// What the status says (never a credential).
        message: String,
    },
}

impl ApplyError {
    /// The metric label of the error.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Kube { source, .. } => kube_error_kind(source),
            Self::External { kind, .. } => kind,
        }
    }

    /// Whether the object vanished under the apply (its watch then says so).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Kube { source: kube::Error::Api(s), .. } if s.code == 404)
    }

    /// A short message for the status report.
    pub fn status_message(&self) -> String {
        match self {
            Self::Kube {
                source: kube::Error::Api(status),
                ..
            } => format!("server-side apply failed: {}", status.message),
            Self::Kube { source, .. } => format!("server-side apply failed: {source}"),
            Self::External { message, .. } => message.clone(),
        }
    }
}

/// Server-side applies `patch` to object `name` of `api` as the agent (forcing its fields),
/// and answers the object's `resourceVersion` afterwards; `object` names it in the error
/// (e.g. `Deployment prod/web`).
pub async fn server_side_apply<K>(
    api: kube::Api<K>,
    name: &str,
    patch: &serde_json::Value,
    object: String,
) -> Result<String, ApplyError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = kube::api::PatchParams::apply(accord_crds::AGENT_FIELD_MANAGER).force();
    let applied = api
        .patch(name, &params, &kube::api::Patch::Apply(patch))
        .await
        .map_err(|source| ApplyError::Kube { object, source })?;
    Ok(applied.meta().resource_version.clone().unwrap_or_default())
}

/// The report on an assignment no enforcer of this agent version takes: held, and said so.
pub fn unenforced_report(policy: &PolicyRef, assigned: &Assigned) -> Report {
    Report::without_object(
        PlacementState::Error,
        format!(
            "accord-agent {} does not enforce {} assignments ({} work); it holds the \
             assignment and enforces it once upgraded",
            env!("CARGO_PKG_VERSION"),
            policy.kind,
            assigned.spec.work()
        ),
        assigned.revision,
    )
}
