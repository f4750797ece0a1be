//! The leader's CrossClusterScalePolicy controller: decode → validate → plan → (lock,
//! fenced write of the placements key) → aggregate status → write status only when it
//! changed.
//!
//! Triggers: the policies themselves, ManagedCluster changes (availability drives
//! failover), agents' status records in etcd, and the return cooldown of a recovered
//! cluster. Deleting a policy removes its placements key (agents stop managing the
//! workload and leave its replicas as they are) through a finalizer.
//!
//! Policies are watched as [`Lenient`] objects: one that does not decode gets
//! `Ready=False`/`InvalidSpec` and an Event, and the others keep reconciling. Its finalizer
//! is handled like any other's — cleanup needs only the name — so deleting it completes
//! and removes whatever placements an earlier, valid version of it left.

use accord_common::distribution::{AssignmentSpec, PolicyKind, PolicyRef};
use accord_common::runtime::time_from_millis;
use accord_crds::CrossClusterScalePolicy;
use accord_crds::conditions::{self, reasons, types};
use accord_crds::scale::CrossClusterScalePolicyStatus;
use accord_crds::validate::Validate;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tracing::info;

use super::{
    ClusterEvents, ClusterObject, ControllerContext, ControllerError, Decoded, Lenient, Listed,
    ReconcileError, decode_or_invalid, error_policy, patch_status, signal_when_listed,
    trace_result, trigger_on_changes,
};
use crate::autoscale::engine::Config;
use crate::distribution::{Decision, PlacementRecord};
use crate::scale::ScaleDecision;
use crate::scale::plan::{AggregateInputs, ClusterView, aggregate, plan, status_changed};
use crate::store::{StatusRecord, StoreError};

/// Finalizer that removes a policy's placements before the policy goes.
pub const FINALIZER: &str = "accord.io/placements";
/// TTL of a policy's scaling lock; a hub that dies holding it frees it within this.
const LOCK_TTL: Duration = Duration::from_secs(5);
/// Longest wait for a policy's scaling lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// Re-check every policy this often even without events.
const RESYNC: Duration = Duration::from_secs(300);

/// A policy as watched: it always decodes this far.
type WatchedPolicy = Lenient<CrossClusterScalePolicy>;

fn now_unix() -> i64 {
    Timestamp::now().as_second()
}

/// Each ManagedCluster's availability, for planning. Read from the stored fields, so a
/// cluster object whose spec does not decode still counts by its status.
fn cluster_views(ctx: &ControllerContext) -> HashMap<String, ClusterView> {
    ctx.clusters
        .state()
        .iter()
        .map(|mc| (mc.name_any(), cluster_view(mc)))
        .collect()
}

/// What planning needs of one ManagedCluster: its `Available` condition and whether it is
/// drained, each read on its own so that nothing else in the object can hide them.
fn cluster_view(mc: &ClusterObject) -> ClusterView {
    let conditions = mc.conditions();
    let available = conditions::find(&conditions, types::AVAILABLE)
        .map(|c| (c.status == "True", c.last_transition_time.0.as_second()));
    ClusterView {
        available: available.is_some_and(|a| a.0),
        available_since_unix: available.map_or(0, |a| a.1),
        unschedulable: mc
            .pointer("/spec/unschedulable")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false),
    }
}

fn object_name(policy: &WatchedPolicy) -> String {
    format!(
        "{}/{}",
        policy.namespace().unwrap_or_default(),
        policy.name_any()
    )
}

async fn reconcile(
    policy: Arc<WatchedPolicy>,
    ctx: Arc<ControllerContext>,
) -> Result<Action, ReconcileError> {
    let ns = policy.namespace().unwrap_or_default();
    let api: Api<WatchedPolicy> = Api::namespaced(ctx.kube.clone(), &ns);
    let object = object_name(&policy);
    let action = finalizer(&api, FINALIZER, policy, |event| async {
        match event {
            Finalizer::Apply(p) => match decode_or_invalid(&p, &Time(Timestamp::now())) {
                Decoded::Valid(policy) => apply(&policy, &ctx).await,
                Decoded::Invalid {
                    message,
                    status_patch,
                } => invalid(&p, &message, status_patch, &ctx).await,
            },
            // Cleanup needs only the name, so an object that does not decode is cleaned
            // up and its deletion completes.
            Finalizer::Cleanup(p) => cleanup(&p, &ctx).await,
        }
    })
    .await
    .map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(e)
        | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => ReconcileError::Finalizer(other.to_string()),
    })?;
    ctx.succeeded(&object);
    Ok(action)
}

/// Says in the object's status and in an Event that it cannot be read; waits for a change.
async fn invalid(
    policy: &WatchedPolicy,
    message: &str,
    status_patch: Option<serde_json::Value>,
    ctx: &ControllerContext,
) -> Result<Action, ReconcileError> {
    let Some(patch) = status_patch else {
        return Ok(Action::await_change());
    };
    let ns = policy.namespace().unwrap_or_default();
    let api: Api<WatchedPolicy> = Api::namespaced(ctx.kube.clone(), &ns);
    api.patch_status(
        &policy.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await?;
    ctx.metrics.error("invalid_spec");
    ctx.publish(
        &policy.object_ref(&()),
        EventType::Warning,
        reasons::INVALID_SPEC,
        message.to_owned(),
    )
    .await;
    Ok(Action::await_change())
}

async fn apply(
    policy: &CrossClusterScalePolicy,
    ctx: &ControllerContext,
) -> Result<Action, ReconcileError> {
    let ns = policy.namespace().unwrap_or_default();
    let name = policy.name_any();
    let api: Api<CrossClusterScalePolicy> = Api::namespaced(ctx.kube.clone(), &ns);
    let generation = policy.metadata.generation;
    let now = Time(Timestamp::now());
    let old_status = policy.status.as_ref();

    if let Err(errors) = policy.spec.validate() {
        let mut status = old_status.cloned().unwrap_or_default();
        status.observed_generation = generation;
        status.conditions = conditions::merge(
            &status.conditions,
            &[conditions::Desired::new(
                types::READY,
                conditions::Status::False,
                reasons::INVALID_SPEC,
                errors.to_string(),
            )],
            generation,
            &now,
        );
        write_status(&api, &name, old_status, &status).await?;
        return Ok(Action::await_change());
    }

    // With autoscaling, the count divided is the one the autoscaler holds (spec is never
    // written); `spec.desiredReplicas` until it has decided one.
    let autoscaled = policy.spec.autoscaling.as_ref().map(|a| {
        let state = ctx
            .autoscale
            .get(&ctx.store.keys().autoscale(&ns, &name))
            .map(|(s, _)| s);
        (Config::from_spec(a), state)
    });
    let mut spec = policy.spec.clone();
    if let Some((cfg, Some(state))) = &autoscaled
        && let Some(count) = state.desired
    {
        spec.desired_replicas = count.clamp(cfg.min, cfg.max);
    }
    let key = ctx
        .store
        .keys()
        .placements(PolicyKind::CrossClusterScalePolicy.as_str(), &ns, &name);
    let previous = ctx.placements.get(&key);
    let views = cluster_views(ctx);
    let planned = plan(
        &spec,
        &ns,
        &views,
        previous.as_ref().map(|(r, _)| r),
        now_unix(),
    );
    let mut record = PlacementRecord {
        policy: PolicyRef::new(PolicyKind::CrossClusterScalePolicy, &ns, &name),
        generation: generation.unwrap_or_default(),
        decided_unix_millis: Timestamp::now().as_millisecond(),
        shares: planned.shares,
        decision: Decision::Scale(ScaleDecision {
            desired_replicas: spec.desired_replicas,
            scale_request_id: String::new(),
            infeasible: planned.infeasible,
            moved_away: planned.moved_away,
        }),
    };
    let record = match previous {
        Some((prev, _)) if prev.same_decision(&record) => prev,
        _ => {
            name_decision(&mut record, &ulid::Ulid::new().to_string());
            write_placement(ctx, &key, &record).await?;
            announce(ctx, policy, &record).await;
            record
        }
    };
    let Some(decision) = record.scale() else {
        return Err(ReconcileError::Store(StoreError::Unexpected(format!(
            "the placements record at {key} is not a scale decision"
        ))));
    };

    let reports: HashMap<String, StatusRecord> = record
        .shares
        .iter()
        .filter_map(|s| {
            let key = ctx.store.keys().status(
                &s.cluster,
                PolicyKind::CrossClusterScalePolicy.as_str(),
                &ns,
                &name,
            );
            ctx.statuses.get(&key).map(|(r, _)| (s.cluster.clone(), r))
        })
        .collect();
    let decided = time_from_millis(record.decided_unix_millis).unwrap_or_else(|| now.clone());
    let mut status = aggregate(&AggregateInputs {
        shares: &record.shares,
        decision,
        reports: &reports,
        clusters: &views,
        generation,
        old: old_status,
        decided_at: &decided,
        now: &now,
    });
    status.autoscaling = autoscaled.as_ref().map(|(cfg, state)| {
        state.as_ref().map_or_else(Default::default, |s| {
            crate::autoscale::status(s, cfg, policy.spec.desired_replicas)
        })
    });
    status.conditions = match &autoscaled {
        Some((_, state)) => conditions::merge(
            &status.conditions,
            &[crate::autoscale::scaling_active(state.as_ref())],
            generation,
            &now,
        ),
        None => {
            let mut c = status.conditions;
            c.retain(|c| c.type_ != types::SCALING_ACTIVE);
            c
        }
    };
    write_status(&api, &name, old_status, &status).await?;
    Ok(match planned.recheck_after {
        Some(after) => Action::requeue(after),
        None => Action::requeue(RESYNC),
    })
}

/// Stamps a new decision's id on the record and on every share's assignment.
fn name_decision(record: &mut PlacementRecord, id: &str) {
    if let Decision::Scale(decision) = &mut record.decision {
        decision.scale_request_id = id.to_owned();
    }
    for share in &mut record.shares {
        if let Some(AssignmentSpec::Scale(spec)) = &mut share.assignment {
            spec.scale_request_id = id.to_owned();
        }
    }
}

/// Logs a new scaling decision and publishes it as an Event.
async fn announce(
    ctx: &ControllerContext,
    policy: &CrossClusterScalePolicy,
    record: &PlacementRecord,
) {
    let Some(decision) = record.scale() else {
        return;
    };
    let counts: Vec<(String, i32)> = record
        .shares
        .iter()
        .map(|s| {
            let replicas = crate::scale::plan::scale_spec(s).map_or(0, |spec| spec.replicas);
            (s.cluster.clone(), replicas)
        })
        .collect();
    info!(policy = %record.policy, id = %decision.scale_request_id, shares = ?counts, "scaling decision");
    let note = counts
        .iter()
        .map(|(c, r)| format!("{c}={r}"))
        .collect::<Vec<_>>()
        .join(", ");
    ctx.publish(
        &policy.object_ref(&()),
        if decision.infeasible.is_some() {
            EventType::Warning
        } else {
            EventType::Normal
        },
        "ScaleDecision",
        format!(
            "{} replicas: {note} (scale request {})",
            decision.desired_replicas, decision.scale_request_id
        ),
    )
    .await;
}

/// Writes the placements key under the policy's lock, fenced by leadership.
async fn write_placement(
    ctx: &ControllerContext,
    key: &str,
    record: &PlacementRecord,
) -> Result<(), ReconcileError> {
    let fence = ctx.election.fence().ok_or(ReconcileError::NotLeader)?;
    let p = &record.policy;
    let lock = tokio::time::timeout(
        LOCK_WAIT,
        ctx.store
            .lock_policy(p.kind.as_str(), &p.namespace, &p.name, LOCK_TTL),
    )
    .await
    .map_err(|_| ReconcileError::LockTimeout(format!("{}/{}", p.namespace, p.name)))??;
    let value = serde_json::to_vec(record).expect("a PlacementRecord always serialises");
    let result = ctx
        .store
        .fenced_txn_with_revision(
            &fence,
            vec![lock.compare()],
            vec![etcd_client::TxnOp::put(key, value, None)],
        )
        .await;
    let unlocked = lock.unlock().await;
    let (response, revision) = result?;
    unlocked?;
    if !response.succeeded() {
        return Err(ReconcileError::Store(StoreError::Unexpected(
            "the scaling lock was lost during the write".into(),
        )));
    }
    // Read our own write before the status is computed from the cache.
    ctx.placements.wait_for_revision(revision).await;
    Ok(())
}

async fn write_status(
    api: &Api<CrossClusterScalePolicy>,
    name: &str,
    old: Option<&CrossClusterScalePolicyStatus>,
    new: &CrossClusterScalePolicyStatus,
) -> Result<(), kube::Error> {
    if !status_changed(old, new) {
        return Ok(());
    }
    patch_status(api, name, old, new).await
}

async fn cleanup(
    policy: &WatchedPolicy,
    ctx: &ControllerContext,
) -> Result<Action, ReconcileError> {
    let ns = policy.namespace().unwrap_or_default();
    let name = policy.name_any();
    let fence = ctx.election.fence().ok_or(ReconcileError::NotLeader)?;
    let key = ctx
        .store
        .keys()
        .placements(PolicyKind::CrossClusterScalePolicy.as_str(), &ns, &name);
    ctx.store.fenced_delete(&fence, &key).await?;
    ctx.store
        .fenced_delete(&fence, &ctx.store.keys().autoscale(&ns, &name))
        .await?;
    ctx.store
        .delete_policy_status(PolicyKind::CrossClusterScalePolicy.as_str(), &ns, &name)
        .await?;
    info!(policy = %format!("{ns}/{name}"), "policy deleted; member workloads keep their replicas and are no longer managed");
    Ok(Action::await_change())
}

/// Runs the controller until it fails; `clusters` is its subscription to the shared
/// ManagedCluster reflector, and `listed` is told once the policies are listed.
pub async fn run(
    ctx: Arc<ControllerContext>,
    clusters: ClusterEvents,
    listed: Listed,
) -> Result<(), ControllerError> {
    let policies: Api<WatchedPolicy> = Api::all(ctx.kube.clone());
    let controller = Controller::new(policies, watcher::Config::default());
    let policy_store = controller.store();
    let (trigger, triggers) = mpsc::unbounded_channel::<ObjectRef<WatchedPolicy>>();

    // ManagedCluster changes (availability) → every policy naming the cluster, read from
    // the stored spec so that a policy that does not decode costs nothing here.
    let t = trigger.clone();
    let ps = policy_store.clone();
    let cluster_changes = clusters.for_each(move |mc| {
        let name = mc.name_any();
        for p in ps.state() {
            let names_it = p
                .pointer("/spec/distribution")
                .and_then(serde_json::Value::as_array)
                .is_some_and(|d| d.iter().any(|d| d["cluster"] == name.as_str()));
            if names_it {
                let _ = t.send(ObjectRef::from_obj(&*p));
            }
        }
        futures::future::ready(())
    });

    // Agents' reports and the autoscaler's decisions → the policy they are about.
    let report_changes = trigger_on_changes(
        ctx.statuses.subscribe(),
        ctx.store.keys().status_prefix(),
        trigger.clone(),
        |rest| match rest.split('/').collect::<Vec<_>>().as_slice() {
            [_cluster, kind, ns, name] if *kind == PolicyKind::CrossClusterScalePolicy.as_str() => {
                Some((ns, name))
            }
            _ => None,
        },
    );
    let autoscale_changes = trigger_on_changes(
        ctx.autoscale.subscribe(),
        ctx.store.keys().autoscale_prefix(),
        trigger.clone(),
        |rest| rest.split_once('/'),
    );

    let report_listed = signal_when_listed(policy_store.clone(), listed);
    let reconciling = controller
        .reconcile_on(UnboundedReceiverStream::new(triggers))
        .run(reconcile, policy_error, ctx)
        .for_each(trace_result);
    // Each of these runs for as long as the controller does; whichever ends first ends it.
    // They share one task on purpose: a shared-stream subscription that finds its object
    // already deleted returns Pending without a wake-up, and the other branches' activity
    // polls it again.
    tokio::select! {
        () = reconciling => {}
        () = cluster_changes => {}
        () = report_changes => {}
        () = autoscale_changes => {}
        () = report_listed => {}
    }
    Err(ControllerError::Ended("CrossClusterScalePolicy controller"))
}

fn policy_error(
    policy: Arc<WatchedPolicy>,
    error: &ReconcileError,
    ctx: Arc<ControllerContext>,
) -> Action {
    error_policy(&ctx, &object_name(&policy), error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::ErrorCategory as _;

    #[test]
    fn a_cluster_whose_spec_does_not_decode_still_counts_by_its_status() {
        let mc = ClusterObject::from_value(serde_json::json!({
            "apiVersion": "accord.io/v1alpha1", "kind": "ManagedCluster",
            "metadata": {"name": "a"},
            "spec": {"weight": 3_000_000_000_i64, "unschedulable": true},
            "status": {"agentVersion": 7, "conditions": [{
                "type": "Available", "status": "True", "reason": "AgentConnected",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:10Z"
            }]}
        }))
        .unwrap();
        assert!(
            mc.decode().is_err(),
            "the fixture must not decode as a whole"
        );
        assert_eq!(
            cluster_view(&mc),
            ClusterView {
                available: true,
                available_since_unix: 1_767_225_610,
                unschedulable: true,
            }
        );
    }

    fn api_error(code: u16) -> ReconcileError {
        ReconcileError::Kube(kube::Error::Api(Box::new(
            kube::core::Status::failure("refused", "Test").with_code(code),
        )))
    }

    #[test]
    fn refused_requests_wait_for_a_change_and_passing_trouble_is_retried() {
        assert!(!api_error(422).is_transient(), "an invalid patch repeats");
        assert!(!api_error(403).is_transient(), "missing RBAC repeats");
        assert!(api_error(409).is_transient(), "a conflict passes");
        assert!(api_error(429).is_transient(), "throttling passes");
        assert!(
            api_error(503).is_transient(),
            "an unavailable API server passes"
        );
        assert!(ReconcileError::LockTimeout("ns/p".into()).is_transient());
        assert!(!ReconcileError::NotLeader.is_transient());
        assert!(!ReconcileError::Store(StoreError::Fenced).is_transient());
        assert_eq!(api_error(500).category(), "kubernetes");
        assert_eq!(
            ReconcileError::LockTimeout("ns/p".into()).category(),
            "lock_timeout"
        );
    }
}
