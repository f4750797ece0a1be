//! The leader's autoscaler: one task per CrossClusterScalePolicy with `spec.autoscaling`,
//! polling its PromQL query every `pollSeconds`, deciding with [`engine::step`] and storing
//! the state at `autoscale/<ns>/<name>` (optimistic concurrency on the key's revision,
//! fenced by leadership).
//!
//! The autoscaler never writes the policy: the scale controller follows the stored state
//! (its cache of `autoscale/`), divides the effective count and renders
//! `status.autoscaling`. A new leader starts from the stored state, so EWMA, window,
//! cooldown, rate limit and breaker go on where they were, and the next poll is due one
//! interval after the last one, whoever made it.

use crate::store::{Compare, CompareOp, TxnOp};
use accord_common::runtime::{AbortOnDrop, backoff, unix_millis};
use accord_crds::CrossClusterScalePolicy;
use accord_crds::PlacementState;
use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Api, Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::controllers::placement::Note;
use crate::controllers::{
    ClusterEvents, ControllerContext, ControllerError, ErrorCategory, Lenient, Listed, report_error,
};
use crate::metrics::{DecisionLabel, PolicyLabel};
use crate::scale::autoscale::engine::{self, Breaker, Config, Poll, Rollout, State};
use crate::scale::autoscale::query;
use crate::store::StoreError;

/// Longest query timeout; shorter polls time out at their interval.
const MAX_QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors of one poll.
#[derive(Debug, thiserror::Error)]
pub enum AutoscaleError {
    /// etcd failed.
    #[error("etcd")]
    Store(#[from] StoreError),
    /// This replica does not lead (any more).
    #[error("not the leader")]
    NotLeader,
    /// Another write changed the state first; read it again.
    #[error("the autoscaling state changed under this write")]
    Conflict,
}

impl ErrorCategory for AutoscaleError {
    fn category(&self) -> &'static str {
        match self {
            Self::Store(e) => e.kind(),
            Self::NotLeader => "not_leader",
            Self::Conflict => "conflict",
        }
    }

    fn is_transient(&self) -> bool {
        match self {
            Self::Store(e) => e.is_transient(),
            Self::NotLeader => false,
            Self::Conflict => true,
        }
    }
}

type WatchedPolicy = Lenient<CrossClusterScalePolicy>;

/// One policy's task and the channel that tells it of changes to the policy.
struct Running {
    updates: watch::Sender<Arc<CrossClusterScalePolicy>>,
    _task: AbortOnDrop<()>,
}

/// Runs the autoscaler until the policy watch ends; `listed` is told once the policies
/// are listed.
pub async fn run(
    ctx: Arc<ControllerContext>,
    clusters: ClusterEvents,
    listed: Listed,
) -> Result<(), ControllerError> {
    // The autoscaler does not follow clusters; an unread subscription would hold up the
    // shared reflector.
    drop(clusters);
    let http = reqwest::Client::builder()
        .build()
        .map_err(|_| ControllerError::Ended("CrossClusterScalePolicy autoscaler"))?;
    let api: Api<WatchedPolicy> = Api::all(ctx.kube.clone());
    let mut events = accord_common::watch::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut running: HashMap<(String, String), Running> = HashMap::new();
    let mut listing: Vec<(String, String)> = Vec::new();
    let mut listed = Some(listed);
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                debug!(error = %e, "policy watch (retried)");
                continue;
            }
        };
        match event {
            WatchEvent::Init => listing.clear(),
            WatchEvent::InitApply(p) => {
                listing.push(id(&p));
                follow(&ctx, &http, &mut running, &p);
            }
            WatchEvent::InitDone => {
                // Policies gone while the watch was re-listing.
                running.retain(|k, _| listing.contains(k));
                if let Some(tx) = listed.take() {
                    let _ = tx.send(());
                }
            }
            WatchEvent::Apply(p) => follow(&ctx, &http, &mut running, &p),
            WatchEvent::Delete(p) => {
                running.remove(&id(&p));
            }
        }
    }
    Err(ControllerError::Ended("CrossClusterScalePolicy autoscaler"))
}

fn id(p: &WatchedPolicy) -> (String, String) {
    (p.namespace().unwrap_or_default(), p.name_any())
}

/// Starts, updates or stops the task of `object` as its spec says.
fn follow(
    ctx: &Arc<ControllerContext>,
    http: &reqwest::Client,
    running: &mut HashMap<(String, String), Running>,
    object: &WatchedPolicy,
) {
    let key = id(object);
    // A policy that does not decode is the scale controller's to report; one being deleted
    // or without autoscaling has no task.
    let policy = match object.decode() {
        Ok(p) if p.spec.autoscaling.is_some() && p.meta().deletion_timestamp.is_none() => p,
        _ => {
            if running.remove(&key).is_some() {
                forget(ctx, &key.0, &key.1);
            }
            return;
        }
    };
    let policy = Arc::new(policy);
    if let Some(r) = running.get(&key) {
        let _ = r.updates.send(policy);
        return;
    }
    let (updates, rx) = watch::channel(policy);
    let task = tokio::spawn(autoscale(
        ctx.clone(),
        http.clone(),
        key.0.clone(),
        key.1.clone(),
        rx,
    ));
    running.insert(
        key,
        Running {
            updates,
            _task: AbortOnDrop(task),
        },
    );
}

/// Removes the state of a policy whose autoscaling was switched off: it scales by
/// `spec.desiredReplicas` again, and a later switch-on starts afresh.
fn forget(ctx: &Arc<ControllerContext>, ns: &str, name: &str) {
    let ctx = ctx.clone();
    let key = ctx.store.keys().autoscale(ns, name);
    tokio::spawn(async move {
        if let Some(fence) = ctx.election.fence()
            && let Err(e) = ctx.store.fenced_delete(&fence, &key).await
        {
            warn!(key, error = %crate::store::error_chain(&e), "could not remove the autoscaling state");
        }
    });
}

/// One policy's poll loop; ends when this replica stops leading or the task is dropped.
async fn autoscale(
    ctx: Arc<ControllerContext>,
    http: reqwest::Client,
    ns: String,
    name: String,
    mut policies: watch::Receiver<Arc<CrossClusterScalePolicy>>,
) {
    let key = ctx.store.keys().autoscale(&ns, &name);
    let object = format!("{ns}/{name}");
    let mut retry = backoff(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        let policy = policies.borrow_and_update().clone();
        let Some(spec) = policy.spec.autoscaling.as_ref() else {
            return;
        };
        let cfg = Config::from_spec(spec);
        let (state, revision) = match crate::scale::autoscale_states(&ctx).get(&key) {
            Some((s, r)) => (s, Some(r)),
            None => (State::default(), None),
        };
        let now = unix_millis();
        let due = match state.breaker {
            Breaker::Open { until_ms, .. } => until_ms,
            _ => state.last_poll_ms.map_or(now, |t| t + cfg.poll_ms),
        };
        if due > now {
            let wait = Duration::from_millis(u64::try_from(due - now).unwrap_or(0));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                changed = policies.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
            continue;
        }
        let poll = if state.wants_query(now) {
            let metric = &spec.metric;
            let timeout = MAX_QUERY_TIMEOUT.min(Duration::from_millis(
                u64::try_from(cfg.poll_ms).unwrap_or(1000),
            ));
            match query::instant(
                &http,
                &metric.prometheus.url,
                &metric.prometheus.query,
                timeout,
            )
            .await
            {
                Ok(v) => Poll::Value(v),
                Err(e) => Poll::Failed(e.to_string()),
            }
        } else {
            Poll::Skipped
        };
        // The policy as it is now: its status tells whether the last operation converged.
        let current = policies.borrow().clone();
        let rollout = rollout(&current, state.desired);
        let start = current.spec.desired_replicas;
        let (next, decision) = engine::step(&state, &cfg, start, poll, rollout, now);
        match write(&ctx, &key, revision, &next).await {
            Ok(written) => {
                retry = backoff(Duration::from_millis(500), Duration::from_secs(30));
                // Read our own write before the next round reads the cache.
                crate::scale::autoscale_states(&ctx)
                    .wait_for_revision(written)
                    .await;
            }
            Err(AutoscaleError::NotLeader | AutoscaleError::Store(StoreError::Fenced)) => return,
            Err(e) => {
                report_error(&ctx.metrics, &object, &e);
                tokio::time::sleep(retry.next_delay()).await;
                continue;
            }
        }
        record(&ctx, &current, &object, &state, &next, &decision).await;
    }
}

/// Whether the count the state holds is applied everywhere it can be: the policy's status
/// divides it and every available placement with replicas is Synced.
fn rollout(policy: &CrossClusterScalePolicy, desired: Option<i32>) -> Rollout {
    let Some(status) = policy.status.as_ref() else {
        return Rollout::Pending;
    };
    let divided = desired.is_some() && status.desired_replicas == desired;
    let synced = status
        .placements
        .iter()
        .filter(|p| p.state != PlacementState::Unavailable && p.desired_replicas > 0)
        .all(|p| p.state == PlacementState::Synced);
    if divided && synced {
        Rollout::Converged
    } else {
        Rollout::Pending
    }
}

/// Writes the state if its key still has `revision` (absent when `None`), while leading.
async fn write(
    ctx: &ControllerContext,
    key: &str,
    revision: Option<i64>,
    state: &State,
) -> Result<i64, AutoscaleError> {
    let fence = ctx.election.fence().ok_or(AutoscaleError::NotLeader)?;
    let unchanged = match revision {
        Some(r) => Compare::mod_revision(key, CompareOp::Equal, r),
        None => Compare::version(key, CompareOp::Equal, 0),
    };
    let value = serde_json::to_vec(state).expect("the autoscaling state always serialises");
    let (response, written) = ctx
        .store
        .fenced_txn_with_revision(&fence, vec![unchanged], vec![TxnOp::put(key, value, None)])
        .await?;
    if response.succeeded() {
        Ok(written)
    } else {
        Err(AutoscaleError::Conflict)
    }
}

/// Metrics, log lines and Events of one poll.
async fn record(
    ctx: &ControllerContext,
    policy: &CrossClusterScalePolicy,
    object: &str,
    before: &State,
    after: &State,
    decision: &engine::Decision,
) {
    let m = &ctx.metrics;
    m.autoscale_decisions
        .get_or_create(&DecisionLabel {
            action: decision.action.clone(),
            reason: decision.reason.clone(),
        })
        .inc();
    let label = PolicyLabel {
        policy: object.to_owned(),
    };
    if let Some(v) = after.value {
        m.autoscale_value.get_or_create(&label).set(v);
    }
    if let Some(t) = after.threshold {
        m.autoscale_threshold.get_or_create(&label).set(t);
    }
    m.autoscale_breaker_open
        .get_or_create(&label)
        .set(i64::from(after.breaker != Breaker::Closed));

    let reference = policy.object_ref(&());
    if decision.scaled() {
        info!(policy = object, from = decision.from, to = decision.to, reason = %decision.reason, "{}", decision.message);
        ctx.note(
            &reference,
            Note::normal(&decision.action, decision.message.clone()),
        );
    }
    // Opened now: from closed, or again after a failed probe (a new `since`).
    let opened = matches!(after.breaker, Breaker::Open { since_ms, .. }
        if !matches!(before.breaker, Breaker::Open { since_ms: s, .. } if s == since_ms));
    let closed = before.breaker != Breaker::Closed && after.breaker == Breaker::Closed;
    if opened {
        warn!(policy = object, "{}", decision.message);
        ctx.note(
            &reference,
            Note::warning("BreakerOpened", decision.message.clone()),
        );
    } else if closed {
        let note = format!(
            "the probe answered {}; breaker closed, scaling resumes",
            after.value.map_or_else(String::new, engine::num)
        );
        info!(policy = object, "{note}");
        ctx.note(&reference, Note::normal("BreakerClosed", note));
    }
}
