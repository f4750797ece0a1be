//! The leader's CrossClusterScalePolicy controller: compile → plan → (lock, fenced write of
//! the placements key) → aggregate status → write status only when it changed.
//!
//! Triggers: the policies themselves, ManagedCluster changes (availability drives
//! failover), agents' status records in etcd, and the return cooldown of a recovered
//! cluster. Deleting a policy removes its placements key (agents stop managing the
//! workload and leave its replicas as they are) through a finalizer.

use accord_crds::scale::CrossClusterScalePolicyStatus;
use accord_crds::validate::Validate;
use accord_crds::{CrossClusterScalePolicy, ManagedCluster, conditions};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store as Reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tracing::{info, warn};

use super::plan::{ClusterView, aggregate, plan, status_changed};
use super::record::{PlacementRecord, PolicyRef, SCALE_KIND, Target};
use crate::metrics::Metrics;
use crate::store::election::LeaderElection;
use crate::store::{CacheEvent, PrefixCache, StatusRecord, Store, StoreError};

/// Finalizer that removes a policy's placements before the policy goes.
pub const FINALIZER: &str = "accord.io/placements";
/// TTL of a policy's scaling lock; a hub that dies holding it frees it within this.
const LOCK_TTL: Duration = Duration::from_secs(5);
/// Longest wait for a policy's scaling lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// Re-check every policy this often even without events.
const RESYNC: Duration = Duration::from_secs(300);

/// Errors of one reconcile.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The Kubernetes API refused or failed a call.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// etcd failed, or this replica lost leadership mid-way.
    #[error("etcd: {0}")]
    Store(#[from] StoreError),
    /// The policy's lock could not be taken in time.
    #[error("timed out waiting for the scaling lock of {0}")]
    LockTimeout(String),
    /// This replica is not the leader.
    #[error("not the leader")]
    NotLeader,
    /// The finalizer helper failed.
    #[error("finalizer: {0}")]
    Finalizer(String),
}

impl ReconcileError {
    fn kind(&self) -> &'static str {
        match self {
            Self::Kube(_) => "kubernetes",
            Self::Store(e) => e.kind(),
            Self::LockTimeout(_) => "lock_timeout",
            Self::NotLeader => "not_leader",
            Self::Finalizer(_) => "finalizer",
        }
    }
}

/// What reconciles share.
pub struct Context {
    store: Store,
    kube: kube::Client,
    election: Arc<LeaderElection>,
    placements: PrefixCache<PlacementRecord>,
    statuses: PrefixCache<StatusRecord>,
    clusters: Reflector<ManagedCluster>,
    recorder: Recorder,
    metrics: Metrics,
}

fn now_unix() -> i64 {
    Timestamp::now().as_second()
}

/// Each ManagedCluster's availability, for planning.
fn cluster_views(clusters: &Reflector<ManagedCluster>) -> HashMap<String, ClusterView> {
    clusters
        .state()
        .iter()
        .map(|mc| {
            let available = mc
                .status
                .as_ref()
                .and_then(|s| conditions::find(&s.conditions, "Available"))
                .map(|c| (c.status == "True", c.last_transition_time.0.as_second()));
            (
                mc.name_any(),
                ClusterView {
                    available: available.is_some_and(|a| a.0),
                    available_since_unix: available.map_or(0, |a| a.1),
                    unschedulable: mc.spec.unschedulable,
                },
            )
        })
        .collect()
}

async fn reconcile(
    policy: Arc<CrossClusterScalePolicy>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let ns = policy.namespace().unwrap_or_default();
    let api: Api<CrossClusterScalePolicy> = Api::namespaced(ctx.kube.clone(), &ns);
    finalizer(&api, FINALIZER, policy, |event| async {
        match event {
            Finalizer::Apply(p) => apply(&p, &ctx).await,
            Finalizer::Cleanup(p) => cleanup(&p, &ctx).await,
        }
    })
    .await
    .map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(e)
        | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => ReconcileError::Finalizer(other.to_string()),
    })
}

async fn apply(policy: &CrossClusterScalePolicy, ctx: &Context) -> Result<Action, ReconcileError> {
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
                "Ready",
                conditions::Status::False,
                "InvalidSpec",
                errors.to_string(),
            )],
            generation,
            &now,
        );
        write_status(&api, &name, old_status, &status).await?;
        return Ok(Action::await_change());
    }

    let key = ctx.store.keys().placements(SCALE_KIND, &ns, &name);
    let previous = ctx.placements.get(&key);
    let views = cluster_views(&ctx.clusters);
    let planned = plan(
        &policy.spec,
        &ns,
        &views,
        previous.as_ref().map(|(r, _)| r),
        now_unix(),
    );
    let target = Target {
        api_version: policy.spec.target_ref.api_version.clone(),
        kind: policy.spec.target_ref.kind.clone(),
        name: policy.spec.target_ref.name.clone(),
    };
    let mut record = PlacementRecord {
        policy: PolicyRef {
            kind: SCALE_KIND.into(),
            namespace: ns.clone(),
            name: name.clone(),
        },
        generation: generation.unwrap_or_default(),
        scale_request_id: String::new(),
        decided_unix_millis: Timestamp::now().as_millisecond(),
        target,
        desired_replicas: policy.spec.desired_replicas,
        shares: planned.shares,
        infeasible: planned.infeasible,
    };
    let record = match previous {
        Some((prev, _)) if prev.same_decision(&record) => prev,
        _ => {
            record.scale_request_id = ulid::Ulid::new().to_string();
            write_placement(ctx, &key, &record).await?;
            info!(policy = %format!("{ns}/{name}"), id = %record.scale_request_id, shares = ?record.shares.iter().map(|s| (&s.cluster, s.replicas)).collect::<Vec<_>>(), "scaling decision");
            let note = record
                .shares
                .iter()
                .map(|s| format!("{}={}", s.cluster, s.replicas))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = ctx
                .recorder
                .publish(
                    &Event {
                        type_: if record.infeasible.is_some() {
                            EventType::Warning
                        } else {
                            EventType::Normal
                        },
                        reason: "ScaleDecision".into(),
                        note: Some(format!(
                            "{} replicas: {note} (scale request {})",
                            record.desired_replicas, record.scale_request_id
                        )),
                        action: "Scale".into(),
                        secondary: None,
                    },
                    &policy.object_ref(&()),
                )
                .await;
            record
        }
    };

    let reports: HashMap<String, StatusRecord> = record
        .shares
        .iter()
        .filter_map(|s| {
            let key = ctx.store.keys().status(&s.cluster, SCALE_KIND, &ns, &name);
            ctx.statuses.get(&key).map(|(r, _)| (s.cluster.clone(), r))
        })
        .collect();
    let decided = Timestamp::from_millisecond(record.decided_unix_millis)
        .map(Time)
        .unwrap_or_else(|_| now.clone());
    let status = aggregate(
        &record, &reports, &views, generation, old_status, &decided, &now,
    );
    write_status(&api, &name, old_status, &status).await?;
    Ok(match planned.recheck_after {
        Some(after) => Action::requeue(after),
        None => Action::requeue(RESYNC),
    })
}

/// Writes the placements key under the policy's lock, fenced by leadership.
async fn write_placement(
    ctx: &Context,
    key: &str,
    record: &PlacementRecord,
) -> Result<(), ReconcileError> {
    let fence = ctx.election.fence().ok_or(ReconcileError::NotLeader)?;
    let p = &record.policy;
    let lock = tokio::time::timeout(
        LOCK_WAIT,
        ctx.store
            .lock_policy(&p.kind, &p.namespace, &p.name, LOCK_TTL),
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
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": new })),
    )
    .await?;
    Ok(())
}

async fn cleanup(
    policy: &CrossClusterScalePolicy,
    ctx: &Context,
) -> Result<Action, ReconcileError> {
    let ns = policy.namespace().unwrap_or_default();
    let name = policy.name_any();
    let fence = ctx.election.fence().ok_or(ReconcileError::NotLeader)?;
    let key = ctx.store.keys().placements(SCALE_KIND, &ns, &name);
    ctx.store.fenced_delete(&fence, &key).await?;
    ctx.store
        .delete_policy_status(SCALE_KIND, &ns, &name)
        .await?;
    info!(policy = %format!("{ns}/{name}"), "policy deleted; member workloads keep their replicas and are no longer managed");
    Ok(Action::await_change())
}

fn error_policy(
    _policy: Arc<CrossClusterScalePolicy>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    ctx.metrics.error(error.kind());
    warn!(%error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(1))
}

/// Runs the controller whenever this replica leads.
pub async fn run(
    store: Store,
    kube: kube::Client,
    election: Arc<LeaderElection>,
    placements: PrefixCache<PlacementRecord>,
    metrics: Metrics,
    replica: String,
) {
    crate::leadership::while_leading(
        &election,
        "reconciling CrossClusterScalePolicies",
        |_| {},
        || {
            lead(
                store.clone(),
                kube.clone(),
                election.clone(),
                placements.clone(),
                metrics.clone(),
                replica.clone(),
            )
        },
    )
    .await;
}

async fn lead(
    store: Store,
    kube: kube::Client,
    election: Arc<LeaderElection>,
    placements: PrefixCache<PlacementRecord>,
    metrics: Metrics,
    replica: String,
) -> anyhow::Result<()> {
    let statuses =
        PrefixCache::<StatusRecord>::start(store.clone(), store.keys().status_prefix()).await?;
    let (clusters, writer) = reflector::store();
    let policies: Api<CrossClusterScalePolicy> = Api::all(kube.clone());
    let controller = Controller::new(policies, watcher::Config::default());
    let policy_store = controller.store();
    let (trigger, triggers) = mpsc::unbounded_channel::<ObjectRef<CrossClusterScalePolicy>>();

    // ManagedCluster changes (availability) → every policy naming the cluster.
    let mc_api: Api<ManagedCluster> = Api::all(kube.clone());
    let t = trigger.clone();
    let ps = policy_store.clone();
    let cluster_watch = tokio::spawn(
        reflector::reflector(writer, watcher(mc_api, watcher::Config::default()))
            .applied_objects()
            .for_each(move |mc| {
                if let Ok(mc) = mc {
                    let name = mc.name_any();
                    for p in ps.state() {
                        if p.spec.distribution.iter().any(|d| d.cluster == name) {
                            let _ = t.send(ObjectRef::from_obj(&*p));
                        }
                    }
                }
                futures::future::ready(())
            }),
    );
    clusters.wait_until_ready().await?;

    // Agents' reports → the policy they are about.
    let status_prefix = store.keys().status_prefix();
    let mut events = statuses.subscribe();
    let t = trigger.clone();
    let status_watch = tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(CacheEvent::Put { key, .. } | CacheEvent::Delete { key }) => {
                    let parts: Vec<&str> =
                        key.trim_start_matches(&status_prefix).split('/').collect();
                    if let [_cluster, kind, ns, name] = parts.as_slice()
                        && *kind == SCALE_KIND
                    {
                        let _ = t.send(ObjectRef::new(name).within(ns));
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });

    let recorder = Recorder::new(
        kube.clone(),
        Reporter {
            controller: "accord-hub".into(),
            instance: Some(replica),
        },
    );
    let ctx = Arc::new(Context {
        store,
        kube,
        election,
        placements,
        statuses,
        clusters,
        recorder,
        metrics,
    });
    controller
        .reconcile_on(UnboundedReceiverStream::new(triggers))
        .run(reconcile, error_policy, ctx)
        .for_each(|r| {
            if let Err(e) = r {
                tracing::debug!(error = %e, "controller event");
            }
            futures::future::ready(())
        })
        .await;
    cluster_watch.abort();
    status_watch.abort();
    Ok(())
}
