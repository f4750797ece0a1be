//! Enforcers: one per kind of assignment, each making the member cluster match what its
//! placed objects ask, behind the one [`Enforcer`] trait the kind-neutral engine drives.
//!
//! An enforcer has three parts, with I/O only at the ends:
//! - what it watches for what it is assigned ([`Enforcer::assign`], [`Enforcer::event`]):
//!   its watches feed caches it owns and tell the engine, through an [`EventSink`], which
//!   of its placed objects to look at again;
//! - a pure judgement of one placed object from those caches ([`Enforcer::look`]): what to report
//!   and whether an apply is needed;
//! - an async apply ([`Enforcer::apply`]), whose result comes back to the engine.
//!
//! The engine owns everything else: the assignment book, save-then-ack, the stream,
//! debounced reports under optimistic concurrency, timers and apply backoff. An assignment
//! of a kind no enforcer takes is held, saved and acknowledged like any other, and reported
//! as `Error` saying that this agent version does not enforce it (see
//! [`unenforced_report`]); once the agent is upgraded it enforces it from the saved state.
//!
//! Adding a kind: a module here with a type implementing [`Enforcer`], and one line where
//! the agent is wired (`crate::run`). This module and the engine know no kind; Kafka
//! enforcers share [`kafka`].

pub mod federated_resource;
pub mod fight;
pub mod kafka;
pub mod kafka_topic;
pub mod kafka_user;
pub mod promfed;
pub mod scale;
pub mod watch;

use std::collections::BTreeMap;
use tracing::Instrument;

use accord_common::distribution::{AssignmentSpec, KindSpec, PlacedRef, PlacementState};
use futures::future::BoxFuture;
use tokio::sync::mpsc;

use crate::assignments::Assigned;
use crate::engine::Input;
use crate::report::Report;

/// Makes the member cluster match the assignments of one kind.
pub trait Enforcer: Send + 'static {
    /// Short name, for logs and for routing its watch events.
    fn name(&self) -> &'static str;

    /// Whether this enforcer takes assignments like `spec`.
    fn enforces(&self, spec: &AssignmentSpec) -> bool;

    /// The book is now `assigned` (every placed object of every kind, each time the book changes;
    /// it takes those it [`enforces`](Self::enforces)): start what needs watching, stop what
    /// no longer does. Watches report through `events`. The engine looks at every new or
    /// changed placed object afterwards.
    fn assign(&mut self, assigned: &BTreeMap<PlacedRef, Assigned>, events: &EventSink);

    /// After [`assign`](Self::assign): the unchanged placed objects whose judgement the new book
    /// changed all the same — those naming an object (a topic, a Kafka user) whose owner
    /// went or came, so that a `Conflict` left behind takes the object over. The engine
    /// looks at them again.
    fn reassigned(&mut self) -> Vec<PlacedRef> {
        Vec::new()
    }

    /// One of its watches saw something; returns the placed objects to look at again.
    fn event(&mut self, event: WatchEvent) -> Vec<PlacedRef>;

    /// The member's capacity was counted anew and moved beyond the counter's threshold;
    /// returns the placed objects whose judgement reads it, to look at again.
    fn capacity_counted(&mut self) -> Vec<PlacedRef> {
        Vec::new()
    }

    /// Judges one placed object from what the watches hold, without I/O. `apply_error` is the
    /// last failed apply, while it stands. `None` while its caches are not
    /// filled yet: an event follows when they are.
    fn look(
        &self,
        placed: &PlacedRef,
        assigned: &Assigned,
        apply_error: Option<&ApplyError>,
    ) -> Option<Judgement>;

    /// Makes the cluster match `assigned`; answers the object's version afterwards (equal to
    /// the one the apply was decided on when it changed nothing).
    fn apply(
        &self,
        placed: &PlacedRef,
        assigned: &Assigned,
    ) -> BoxFuture<'static, Result<String, ApplyError>>;
}

/// The assignments of one kind in the book: each placed object, its spec of the kind, and the
/// whole assignment (revision, the shared spec).
pub type Mine<'a, S> = [(&'a PlacedRef, &'a S, &'a Assigned)];

/// An enforcer written against its own kind's spec. The engine drives it as an
/// [`Enforcer`] (the implementation below), which hands each method only assignments of
/// its kind: no enforcer checks the kind of what it is given.
pub trait KindEnforcer: Send + 'static {
    /// The kind's spec.
    type Spec: KindSpec;

    /// Short name, for logs and for routing its watch events.
    const NAME: &'static str;

    /// [`Enforcer::assign`] with the book's assignments of this kind.
    fn assign(&mut self, mine: &Mine<'_, Self::Spec>, events: &EventSink);

    /// [`Enforcer::reassigned`].
    fn reassigned(&mut self) -> Vec<PlacedRef> {
        Vec::new()
    }

    /// [`Enforcer::event`].
    fn event(&mut self, event: WatchEvent) -> Vec<PlacedRef>;

    /// [`Enforcer::capacity_counted`].
    fn capacity_counted(&mut self) -> Vec<PlacedRef> {
        Vec::new()
    }

    /// [`Enforcer::look`] at a placed object whose spec is `spec`.
    fn look(
        &self,
        placed: &PlacedRef,
        spec: &Self::Spec,
        assigned: &Assigned,
        apply_error: Option<&ApplyError>,
    ) -> Option<Judgement>;

    /// [`Enforcer::apply`] of a placed object whose spec is `spec`.
    fn apply(
        &self,
        placed: &PlacedRef,
        spec: &Self::Spec,
        assigned: &Assigned,
    ) -> BoxFuture<'static, Result<String, ApplyError>>;
}

impl<E: KindEnforcer> Enforcer for E {
    fn name(&self) -> &'static str {
        E::NAME
    }

    fn enforces(&self, spec: &AssignmentSpec) -> bool {
        E::Spec::of(spec).is_some()
    }

    fn assign(&mut self, assigned: &BTreeMap<PlacedRef, Assigned>, events: &EventSink) {
        let mine: Vec<_> = assigned
            .iter()
            .filter_map(|(placed, a)| Some((placed, E::Spec::of(&a.spec)?, a)))
            .collect();
        KindEnforcer::assign(self, &mine, events);
    }

    fn reassigned(&mut self) -> Vec<PlacedRef> {
        KindEnforcer::reassigned(self)
    }

    fn event(&mut self, event: WatchEvent) -> Vec<PlacedRef> {
        KindEnforcer::event(self, event)
    }

    fn capacity_counted(&mut self) -> Vec<PlacedRef> {
        KindEnforcer::capacity_counted(self)
    }

    fn look(
        &self,
        placed: &PlacedRef,
        assigned: &Assigned,
        apply_error: Option<&ApplyError>,
    ) -> Option<Judgement> {
        let spec = E::Spec::of(&assigned.spec)?;
        KindEnforcer::look(self, placed, spec, assigned, apply_error)
    }

    fn apply(
        &self,
        placed: &PlacedRef,
        assigned: &Assigned,
    ) -> BoxFuture<'static, Result<String, ApplyError>> {
        match E::Spec::of(&assigned.spec) {
            Some(spec) => KindEnforcer::apply(self, placed, spec, assigned),
            // The engine routes only the kind's assignments here.
            None => Box::pin(std::future::ready(Ok(String::new()))),
        }
    }
}

/// What an enforcer makes of one placed object.
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
    /// Apply the assignment to restore fields another writer changed: an [`Self::Apply`]
    /// the engine makes only while the [`fight::FightGuard`] sees no fight over them.
    Repair {
        /// Version of the object judged.
        from_version: String,
        /// What is restored, and from whom.
        repair: Repair,
    },
}

/// Fields of an object that another field manager changed and an apply restores.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Repair {
    /// The object (`Deployment prod/frontend`).
    pub object: String,
    /// The fields (`spec.replicas`).
    pub fields: Vec<String>,
    /// The field manager that changed them (`another manager` when none shows).
    pub by: String,
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

/// What kind of failure an apply met: what the judges decide the placement's state from,
/// and the label of `accord_agent_apply_errors_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApplyErrorKind {
    /// What the apply needs cannot be reached or used right now (the member's API server,
    /// its Kafka, the agent's credentials there).
    Unavailable,
    /// The member refused the agent's identity the operation.
    Forbidden,
    /// The member refused what was asked as invalid.
    Invalid,
    /// What was asked collides with the object's current state.
    Conflict,
    /// The object vanished under the apply (its watch then says so).
    NotFound,
    /// The member cannot do what was asked at all (an API or operation it lacks).
    NotSupported,
    /// Anything else; worth retrying as it is.
    Transient,
}

impl ApplyErrorKind {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unavailable => "unavailable",
            Self::Forbidden => "forbidden",
            Self::Invalid => "invalid",
            Self::Conflict => "conflict",
            Self::NotFound => "not_found",
            Self::NotSupported => "not_supported",
            Self::Transient => "transient",
        }
    }

    /// The kind of a Kubernetes API error, by its status code (or the transport failing).
    pub fn of_kube(error: &kube::Error) -> Self {
        match error {
            kube::Error::Api(status) => match status.code {
                404 => Self::NotFound,
                401 | 403 => Self::Forbidden,
                409 => Self::Conflict,
                400 | 422 => Self::Invalid,
                405 | 415 | 501 => Self::NotSupported,
                503 => Self::Unavailable,
                _ => Self::Transient,
            },
            kube::Error::HyperError(_) | kube::Error::Service(_) => Self::Unavailable,
            _ => Self::Transient,
        }
    }
}

/// Why an apply failed: its kind, and a short message for the status report (never a
/// credential).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApplyError {
    /// What kind of failure it is.
    pub kind: ApplyErrorKind,
    /// What to tell the hub.
    pub message: String,
}

impl ApplyError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ApplyErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// A failed server-side apply.
    pub fn of_kube(error: &kube::Error) -> Self {
        let message = match error {
            kube::Error::Api(status) => format!("server-side apply failed: {}", status.message),
            other => format!("server-side apply failed: {other}"),
        };
        Self::new(ApplyErrorKind::of_kube(error), message)
    }

    /// Whether the object vanished under the apply (its watch then says so).
    pub fn is_not_found(&self) -> bool {
        self.kind == ApplyErrorKind::NotFound
    }
}

/// Server-side applies `patch` to object `name` of `api` as the agent (forcing its fields),
/// and answers the object's `resourceVersion` afterwards; `object` names it in the error
/// (e.g. `Deployment prod/web`) in the log.
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
        .instrument(accord_common::telemetry::step("server-side apply"))
        .await
        .map_err(|source| {
            tracing::debug!(%object, error = %source, "server-side apply failed");
            ApplyError::of_kube(&source)
        })?;
    Ok(applied.meta().resource_version.clone().unwrap_or_default())
}

/// The report on an assignment no enforcer of this agent version takes: held, and said so.
pub fn unenforced_report(placed: &PlacedRef, assigned: &Assigned) -> Report {
    Report::without_object(
        PlacementState::Error,
        format!(
            "accord-agent {} does not enforce {} assignments ({} work); it holds the \
             assignment and enforces it once upgraded",
            env!("CARGO_PKG_VERSION"),
            placed.kind,
            assigned.spec.work()
        ),
        assigned.revision,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("refused", "Reason").with_code(code),
        ))
    }

    #[test]
    fn kube_api_errors_are_classified_by_status_code() {
        for (code, kind) in [
            (404, ApplyErrorKind::NotFound),
            (401, ApplyErrorKind::Forbidden),
            (403, ApplyErrorKind::Forbidden),
            (409, ApplyErrorKind::Conflict),
            (400, ApplyErrorKind::Invalid),
            (422, ApplyErrorKind::Invalid),
            (405, ApplyErrorKind::NotSupported),
            (503, ApplyErrorKind::Unavailable),
            (500, ApplyErrorKind::Transient),
            (429, ApplyErrorKind::Transient),
        ] {
            assert_eq!(ApplyErrorKind::of_kube(&api(code)), kind, "{code}");
        }
        let e = ApplyError::of_kube(&api(422));
        assert_eq!(e.message, "server-side apply failed: refused");
        assert!(!e.is_not_found());
        assert!(ApplyError::of_kube(&api(404)).is_not_found());
    }
}
