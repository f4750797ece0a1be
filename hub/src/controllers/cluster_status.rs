//! Writes `ManagedCluster` status: `Joined` from the cluster registry, `Available` from the
//! `connected/` keys, and the agent's versions and hub replica from its Hello.
//!
//! Only the leader runs this; every replica only records connects and disconnects in etcd.
//! Status is computed as a value ([`desired_status`]) and written only when it differs from
//! what the object shows, ignoring timestamps. `lastHeartbeatTime` is refreshed once per
//! [`heartbeat_refresh_interval`] while a cluster stays available: every
//! [`HEARTBEAT_REFRESH_INTERVAL`] (OCM's lease cadence), stretched for large fleets so that
//! refreshes never cost the management API server more than
//! [`HEARTBEAT_REFRESH_WRITES_PER_SECOND`] writes a second in total. Liveness itself is the
//! `Available` condition, which moves within seconds of a connect or a loss.
//!
//! Deleting a ManagedCluster revokes the cluster: the object carries
//! [`REGISTRATION_FINALIZER`], and on deletion this controller deletes the registry record
//! (every replica then ends the cluster's stream, see [`crate::revocation`]) before it
//! removes the finalizer. A registered cluster whose object is missing gets it back (a
//! registration that could not write it), but only while etcd still has the record, so a
//! revoked cluster is not brought back by a registry copy that lags.
//!
//! `status.capacity` is the agent's last count of its schedulable nodes (`capacity/<cluster>`,
//! stored as `health/` is): allocatable and unrequested CPU, memory and pods.
//!
//! `APIServerAvailable` comes from the member health the agent reports (its API server's
//! `/readyz` probe), stored at `health/<cluster>` by the replica holding its stream. It
//! only informs: a member whose API server is down keeps its placements (its workloads
//! still run).

use accord_crds::conditions::{self, Desired, Status as CondStatus, reasons, types};
use accord_crds::managed_cluster::{API_SERVER_UNAVAILABLE_TAINT, UNREACHABLE_TAINT, is_hub_taint};
use accord_crds::{HUB_FIELD_MANAGER, ManagedClusterStatus};
use dashmap::DashSet;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector;
use kube::{Resource, ResourceExt};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tracing::{debug, info};

use super::{
    ClusterEvents, ClusterObject, ControllerContext, ControllerError, ErrorCategory, Listed,
    report_error,
};
use crate::store::cache::{CacheEvent, PrefixCache};
use crate::store::capacity::CapacityRecord;
use crate::store::health::HealthRecord;
use crate::store::presence::ConnectedRecord;
use crate::store::registry::ClusterRecord;

/// Finalizer on every ManagedCluster the hub writes: deleting the object revokes the
/// cluster (its registry record goes first, then the finalizer).
pub const REGISTRATION_FINALIZER: &str = "accord.io/cluster-registration";
/// How often `lastHeartbeatTime` is rewritten for a cluster that stays available, in a
/// fleet small enough for [`HEARTBEAT_REFRESH_WRITES_PER_SECOND`].
pub const HEARTBEAT_REFRESH_INTERVAL: Duration = Duration::from_secs(60);
/// The most heartbeat refreshes a second the hub spends on the whole fleet (a quiet
/// neighbour on the management API server): past 300 clusters the interval grows with it.
pub const HEARTBEAT_REFRESH_WRITES_PER_SECOND: u32 = 5;

/// How often a cluster's `lastHeartbeatTime` is refreshed in a fleet of `clusters`:
/// [`HEARTBEAT_REFRESH_INTERVAL`], or longer where the fleet would otherwise take more than
/// [`HEARTBEAT_REFRESH_WRITES_PER_SECOND`] writes a second.
pub fn heartbeat_refresh_interval(clusters: usize) -> Duration {
    let budgeted =
        Duration::from_secs_f64(clusters as f64 / f64::from(HEARTBEAT_REFRESH_WRITES_PER_SECOND));
    HEARTBEAT_REFRESH_INTERVAL.max(budgeted)
}
/// Condition type: whether the member's kube-apiserver answers its agent's `/readyz` probe.
pub const API_SERVER_AVAILABLE: &str = "APIServerAvailable";
/// Reason of `APIServerAvailable=True`.
pub const READYZ_OK: &str = "ReadyzOK";
/// Reason of `APIServerAvailable=False`.
pub const READYZ_FAILED: &str = "ReadyzFailed";
/// Reason of `APIServerAvailable=Unknown` while the agent is not connected.
pub const HEALTH_UNKNOWN_DISCONNECTED: &str = "AgentDisconnected";
/// Reason of `APIServerAvailable=Unknown` while a connected agent has not reported it.
pub const HEALTH_NOT_REPORTED: &str = "NotReported";

/// The `APIServerAvailable` condition of a cluster whose agent is `connected` (or not)
/// and last reported `health`.
pub fn api_server_condition(
    connected: Option<&ConnectedRecord>,
    health: Option<&HealthRecord>,
) -> Desired {
    match (connected, health) {
        (None, _) => Desired::new(
            API_SERVER_AVAILABLE,
            CondStatus::Unknown,
            HEALTH_UNKNOWN_DISCONNECTED,
            "the agent is not connected, so the member API server's health is unknown",
        ),
        (Some(_), None) => Desired::new(
            API_SERVER_AVAILABLE,
            CondStatus::Unknown,
            HEALTH_NOT_REPORTED,
            "the agent has not reported its API server's health (yet)",
        ),
        (Some(_), Some(h)) if h.api_server_available => Desired::new(
            API_SERVER_AVAILABLE,
            CondStatus::True,
            READYZ_OK,
            "the member API server answers the agent's /readyz probe",
        ),
        (Some(_), Some(h)) => Desired::new(
            API_SERVER_AVAILABLE,
            CondStatus::False,
            READYZ_FAILED,
            h.message.clone(),
        ),
    }
}

/// How often every cluster is re-checked even without events (from caches; a write only
/// when something is due), which bounds how late a heartbeat refresh can be.
const RESYNC_INTERVAL: Duration = Duration::from_secs(15);

/// The status a cluster should have, or `None` when `current` already says it (ignoring
/// timestamps) and the heartbeat time is recent enough. `spec_error` is why the object's
/// spec does not decode, if it does not: `Degraded=True`, reason `InvalidSpec`.
pub fn desired_status(
    registered: bool,
    connected: Option<&ConnectedRecord>,
    spec_error: Option<&str>,
    current: Option<&ManagedClusterStatus>,
    generation: Option<i64>,
    now: &Time,
) -> Option<ManagedClusterStatus> {
    desired_status_with(
        registered,
        connected,
        spec_error,
        &MemberReports::default(),
        current,
        generation,
        now,
        HEARTBEAT_REFRESH_INTERVAL,
    )
}

/// What the agent reported of its member, as the status shows it.
#[derive(Clone, Debug, Default)]
pub struct MemberReports {
    /// `APIServerAvailable` (see [`api_server_condition`]); `None` leaves the condition as
    /// it is.
    pub api_server: Option<Desired>,
    /// `status.capacity` from the agent's last count; `None` leaves it as it is (the last
    /// count stays while the agent is away, a hint, not a promise).
    pub capacity: Option<CapacityRecord>,
}

/// [`desired_status`], also setting what the agent `reported`, and refreshing the
/// heartbeat time once it is `heartbeat_refresh` old.
#[allow(clippy::too_many_arguments)]
pub fn desired_status_with(
    registered: bool,
    connected: Option<&ConnectedRecord>,
    spec_error: Option<&str>,
    reported: &MemberReports,
    current: Option<&ManagedClusterStatus>,
    generation: Option<i64>,
    now: &Time,
    heartbeat_refresh: Duration,
) -> Option<ManagedClusterStatus> {
    let empty = ManagedClusterStatus::default();
    let current = current.unwrap_or(&empty);
    let joined = if registered {
        Desired::new(
            types::JOINED,
            CondStatus::True,
            reasons::REGISTERED,
            "the agent registered with a bootstrap token",
        )
    } else {
        Desired::new(
            types::JOINED,
            CondStatus::False,
            reasons::NOT_REGISTERED,
            "no agent has registered for this cluster yet",
        )
    };
    let available = match connected {
        Some(c) => Desired::new(
            types::AVAILABLE,
            CondStatus::True,
            reasons::AGENT_CONNECTED,
            format!(
                "the agent is connected to hub replica {} and heartbeating",
                c.replica
            ),
        ),
        None => Desired::new(
            types::AVAILABLE,
            CondStatus::False,
            reasons::AGENT_DISCONNECTED,
            "no heartbeat from the agent within the timeout; its placements are treated as unavailable",
        ),
    };
    let degraded = match spec_error {
        Some(error) => Desired::new(
            types::DEGRADED,
            CondStatus::True,
            reasons::INVALID_SPEC,
            format!("the hub cannot read this object's spec: {error}"),
        ),
        None => Desired::new(
            types::DEGRADED,
            CondStatus::False,
            reasons::HEALTHY,
            "the object's spec is readable",
        ),
    };
    let mut next = current.clone();
    let mut desired = vec![joined, available, degraded];
    desired.extend(reported.api_server.clone());
    if let Some(capacity) = &reported.capacity {
        next.capacity = capacity.shown();
    }
    next.conditions = conditions::merge(&current.conditions, &desired, generation, now);
    if let Some(c) = connected {
        next.agent_version = Some(c.agent_version.clone()).filter(|v| !v.is_empty());
        next.kubernetes_version = Some(c.kubernetes_version.clone()).filter(|v| !v.is_empty());
        next.hub_replica = Some(c.replica.clone());
    } else {
        next.hub_replica = None;
    }
    let heartbeat_stale = connected.is_some()
        && current.last_heartbeat_time.as_ref().is_none_or(|t| {
            now.0.duration_since(t.0).as_secs_f64() >= heartbeat_refresh.as_secs_f64()
        });
    let just_connected =
        connected.is_some() && !conditions::is_true(&current.conditions, types::AVAILABLE);
    if heartbeat_stale || just_connected {
        next.last_heartbeat_time = Some(now.clone());
    }
    let unchanged = conditions::equal_ignoring_time(&current.conditions, &next.conditions)
        && ManagedClusterStatus {
            conditions: Vec::new(),
            ..current.clone()
        } == ManagedClusterStatus {
            conditions: Vec::new(),
            ..next.clone()
        };
    (!unchanged).then_some(next)
}

/// Why a status write (or a revocation through deletion) failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusWriteError {
    /// The Kubernetes API refused or failed the write.
    #[error("writing ManagedCluster status")]
    Kube(#[from] kube::Error),
    /// etcd failed while reading or deleting the cluster's registry record.
    #[error("cluster registry")]
    Store(#[from] crate::store::StoreError),
    /// A JSON patch (the finalizer, the hub's taints) could not be built.
    #[error("JSON patch: {0}")]
    JsonPatch(String),
}

impl ErrorCategory for StatusWriteError {
    fn category(&self) -> &'static str {
        match self {
            Self::Kube(_) => "kubernetes",
            Self::Store(e) => e.kind(),
            Self::JsonPatch(_) => "json_patch",
        }
    }

    fn is_transient(&self) -> bool {
        // Status is recomputed from the registry and the connections on every pass, so a
        // failed write is always worth another try.
        true
    }
}

fn cluster_of(key: &str, prefix: &str) -> Option<String> {
    key.strip_prefix(prefix)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
}

/// Runs the status writer until it fails; `clusters` is its subscription to the shared
/// ManagedCluster reflector, and `listed` is told once the registry and the connections
/// are loaded.
pub async fn run(
    ctx: Arc<ControllerContext>,
    clusters: ClusterEvents,
    listed: Listed,
) -> Result<(), ControllerError> {
    let store = &ctx.store;
    let keys = store.keys().clone();
    let registry = PrefixCache::<ClusterRecord>::start(store.clone(), keys.clusters_prefix())
        .await
        .map_err(ControllerError::Store)?;
    let connected = PrefixCache::<ConnectedRecord>::start(store.clone(), keys.connected_prefix())
        .await
        .map_err(ControllerError::Store)?;
    let health =
        PrefixCache::<HealthRecord>::start(store.clone(), store.report_prefix::<HealthRecord>())
            .await
            .map_err(ControllerError::Store)?;
    let capacity = PrefixCache::<CapacityRecord>::start(
        store.clone(),
        store.report_prefix::<CapacityRecord>(),
    )
    .await
    .map_err(ControllerError::Store)?;
    // Lenient: the API server's answers hold the object's spec, which may not decode.
    let api: Api<ClusterObject> = Api::all(ctx.kube.clone());
    let queue = WorkQueue::new();

    // Object changes (someone edited or deleted status, a new object) → recheck.
    let q = queue.clone();
    let objects = clusters.for_each(move |o| {
        q.push(o.name_any());
        futures::future::ready(())
    });
    let _ = listed.send(());

    let feeders = [
        spawn_feeder(
            registry.subscribe(),
            keys.clusters_prefix(),
            queue.clone(),
            registry_names(&registry, &keys),
        ),
        spawn_feeder(
            connected.subscribe(),
            keys.connected_prefix(),
            queue.clone(),
            registry_names(&registry, &keys),
        ),
        spawn_feeder(
            health.subscribe(),
            store.report_prefix::<HealthRecord>(),
            queue.clone(),
            registry_names(&registry, &keys),
        ),
        spawn_feeder(
            capacity.subscribe(),
            store.report_prefix::<CapacityRecord>(),
            queue.clone(),
            registry_names(&registry, &keys),
        ),
    ];
    let q = queue.clone();
    let names = registry_names(&registry, &keys);
    let resync = async move {
        let mut tick = tokio::time::interval(RESYNC_INTERVAL);
        loop {
            tick.tick().await;
            for n in names() {
                q.push(n);
            }
        }
    };

    let work = async {
        while let Some(name) = queue.pop().await {
            let record = registry.get(&keys.cluster(&name)).map(|(r, _)| r);
            let conn = connected.get(&keys.connected(&name)).map(|(c, _)| c);
            let reported_health = store
                .report_key::<HealthRecord>(&name)
                .ok()
                .and_then(|k| health.get(&k))
                .map(|(h, _)| h);
            let reported = MemberReports {
                api_server: Some(api_server_condition(
                    conn.as_ref(),
                    reported_health.as_ref(),
                )),
                capacity: store
                    .report_key::<CapacityRecord>(&name)
                    .ok()
                    .and_then(|k| capacity.get(&k))
                    .map(|(c, _)| c),
            };
            let refresh = heartbeat_refresh_interval(registry.len());
            match reconcile(
                &ctx,
                &api,
                &name,
                record.as_ref(),
                conn.as_ref(),
                &reported,
                refresh,
            )
            .await
            {
                Ok(()) => ctx.succeeded(&name),
                Err(e) => {
                    report_error(&ctx.metrics, &name, &e);
                    let delay = ctx.retry_delay(&name);
                    let q = queue.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        q.push(name);
                    });
                }
            }
        }
    };
    tokio::select! {
        () = work => {}
        () = objects => {}
        () = resync => {}
    }
    for f in feeders {
        f.abort();
    }
    Err(ControllerError::Ended("ManagedCluster status writer"))
}

fn registry_names(
    registry: &PrefixCache<ClusterRecord>,
    keys: &crate::store::Keyspace,
) -> impl Fn() -> Vec<String> + Send + Sync + 'static {
    let registry = registry.clone();
    let prefix = keys.clusters_prefix();
    move || {
        registry
            .snapshot()
            .into_iter()
            .filter_map(|(k, _, _)| cluster_of(&k, &prefix))
            .collect()
    }
}

fn spawn_feeder<T: Clone + Send + 'static>(
    mut events: broadcast::Receiver<CacheEvent<T>>,
    prefix: String,
    queue: WorkQueue,
    all: impl Fn() -> Vec<String> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for n in all() {
            queue.push(n);
        }
        loop {
            match events.recv().await {
                Ok(CacheEvent::Put { key, .. } | CacheEvent::Delete { key }) => {
                    if let Some(n) = cluster_of(&key, &prefix) {
                        queue.push(n);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    for n in all() {
                        queue.push(n);
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    })
}

async fn reconcile(
    ctx: &ControllerContext,
    api: &Api<ClusterObject>,
    name: &str,
    record: Option<&ClusterRecord>,
    connected: Option<&ConnectedRecord>,
    reported: &MemberReports,
    heartbeat_refresh: Duration,
) -> Result<(), StatusWriteError> {
    let object = ctx.clusters.get(&reflector::ObjectRef::new(name));
    // The current status and generation, read leniently: a status that does not decode is
    // simply rewritten.
    let status_of = |o: &ClusterObject| {
        o.pointer("/status")
            .and_then(|s| serde_json::from_value::<ManagedClusterStatus>(s.clone()).ok())
    };
    if let Some(o) = &object {
        if o.metadata.deletion_timestamp.is_some() {
            return revoke_on_deletion(ctx, api, name, o).await;
        }
        if record.is_some() && !has_registration_finalizer(o) {
            // Objects written before deletion revoked (or by hand) get the finalizer too.
            add_registration_finalizer(api, o).await?;
        }
    }
    let (current, generation, spec_error) = match (&object, record) {
        (Some(o), _) => (
            status_of(o),
            o.metadata.generation,
            // Availability never depends on the spec, so a cluster whose spec does not
            // decode keeps its placements; the condition says what to fix.
            o.without_status().decode().err().map(|e| e.to_string()),
        ),
        (None, Some(r)) => {
            // Registered but the object is missing (registration could not write it):
            // recreate it from the registry — if etcd still has the record. Deleting the
            // object removes the record before the object goes, but this copy of the
            // registry may learn of that after the reflector learns the object is gone.
            if ctx.store.get_cluster(name).await?.is_none() {
                return Ok(());
            }
            let obj = serde_json::json!({
                "apiVersion": "accord.io/v1beta1", "kind": "ManagedCluster",
                "metadata": {
                    "name": name,
                    "labels": r.labels,
                    "finalizers": [REGISTRATION_FINALIZER],
                },
                "spec": {},
            });
            let created = api
                .patch(
                    name,
                    &PatchParams::apply(HUB_FIELD_MANAGER),
                    &Patch::Apply(&obj),
                )
                .await?;
            (status_of(&created), created.metadata.generation, None)
        }
        (None, None) => return Ok(()),
    };
    let now = Time(Timestamp::now());
    let spec = object.as_ref().and_then(|o| o.pointer("/spec").cloned());
    let status = desired_status_with(
        record.is_some(),
        connected,
        spec_error.as_deref(),
        reported,
        current.as_ref(),
        generation,
        &now,
        heartbeat_refresh,
    );
    let Some(status) = status else {
        if let Some(shown) = &current {
            write_hub_taints(api, name, spec.as_ref(), shown).await?;
        }
        return Ok(());
    };
    let newly_invalid = spec_error.is_some()
        && !current.as_ref().is_some_and(|c| {
            conditions::find(&c.conditions, types::DEGRADED)
                .is_some_and(|d| d.reason == reasons::INVALID_SPEC)
        });
    debug!(cluster = name, "writing ManagedCluster status");
    super::patch_status(api, name, current.as_ref(), &status).await?;
    ctx.metrics.status_writes.inc();
    write_hub_taints(api, name, spec.as_ref(), &status).await?;
    if let (true, Some(object), Some(error)) = (newly_invalid, &object, &spec_error) {
        ctx.metrics.error("invalid_spec");
        ctx.note(
            &object.object_ref(&()),
            super::placement::Note::warning(
                reasons::INVALID_SPEC,
                format!("the hub cannot read this ManagedCluster's spec: {error}"),
            ),
        );
    }
    Ok(())
}

/// The `spec.taints` a cluster whose status is `status` carries: its own as they are, then
/// the hub's — `accord.io/unreachable:NoExecute` while `Available` is not `True` (once its
/// agent has connected at all),
/// `accord.io/api-server-unavailable:NoExecute` while `APIServerAvailable` is `False`; `None`
/// when `spec` says so already. (Placement reads the hub's taints from the conditions
/// themselves; these are for people and tools to see.)
pub fn hub_taints(
    spec: Option<&serde_json::Value>,
    status: &ManagedClusterStatus,
) -> Option<Vec<serde_json::Value>> {
    let current: Vec<serde_json::Value> = spec
        .and_then(|s| s.get("taints"))
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut next: Vec<serde_json::Value> = current
        .iter()
        .filter(|t| {
            !t.get("key")
                .and_then(serde_json::Value::as_str)
                .is_some_and(is_hub_taint)
        })
        .cloned()
        .collect();
    let hub_taint = |key: &str| serde_json::json!({"key": key, "effect": "NoExecute"});
    // A cluster whose agent never connected is left untainted here (its conditions say so,
    // and placement reads them): a join storm of thousands would write every cluster's spec
    // twice in its first second.
    let connected_once = status.last_heartbeat_time.is_some();
    if connected_once && !conditions::is_true(&status.conditions, types::AVAILABLE) {
        next.push(hub_taint(UNREACHABLE_TAINT));
    }
    if conditions::find(&status.conditions, API_SERVER_AVAILABLE)
        .is_some_and(|c| c.status == "False")
    {
        next.push(hub_taint(API_SERVER_UNAVAILABLE_TAINT));
    }
    (next != current).then_some(next)
}

/// Sets the hub's own taints in `spec.taints` ([`hub_taints`]), if they are not there yet,
/// with a test of the list it read so that a concurrent edit of the taints is never lost
/// (the write fails and the next reconcile reads again).
async fn write_hub_taints(
    api: &Api<ClusterObject>,
    name: &str,
    spec: Option<&serde_json::Value>,
    status: &ManagedClusterStatus,
) -> Result<(), StatusWriteError> {
    let Some(next) = hub_taints(spec, status) else {
        return Ok(());
    };
    let ops = match spec {
        Some(spec) => match spec.get("taints") {
            Some(taints) if next.is_empty() => serde_json::json!([
                {"op": "test", "path": "/spec/taints", "value": taints},
                {"op": "remove", "path": "/spec/taints"},
            ]),
            Some(taints) => serde_json::json!([
                {"op": "test", "path": "/spec/taints", "value": taints},
                {"op": "replace", "path": "/spec/taints", "value": next},
            ]),
            None => serde_json::json!([
                {"op": "test", "path": "/spec", "value": spec},
                {"op": "add", "path": "/spec/taints", "value": next},
            ]),
        },
        None => serde_json::json!([{"op": "add", "path": "/spec", "value": {"taints": next}}]),
    };
    debug!(cluster = name, taints = ?next, "writing the hub's taints");
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Json::<()>(json_patch_of(ops)?),
    )
    .await?;
    Ok(())
}

fn has_registration_finalizer(object: &ClusterObject) -> bool {
    object
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == REGISTRATION_FINALIZER))
}

/// A ManagedCluster being deleted: revokes the cluster (deletes its registry record, so
/// every replica ends its stream and refuses its certificate), then lets the object go.
async fn revoke_on_deletion(
    ctx: &ControllerContext,
    api: &Api<ClusterObject>,
    name: &str,
    object: &ClusterObject,
) -> Result<(), StatusWriteError> {
    let Some(index) = object
        .metadata
        .finalizers
        .as_ref()
        .and_then(|f| f.iter().position(|f| f == REGISTRATION_FINALIZER))
    else {
        return Ok(());
    };
    let removed = ctx.store.delete_cluster(name).await?;
    if removed {
        info!(
            cluster = name,
            "ManagedCluster deleted: cluster revoked (registry record removed)"
        );
    }
    // The test makes the removal fail rather than remove another finalizer if the list
    // changed meanwhile (the change reconciles the object again).
    let patch = json_patch_of(serde_json::json!([
        {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": REGISTRATION_FINALIZER},
        {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
    ]))?;
    match api
        .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn add_registration_finalizer(
    api: &Api<ClusterObject>,
    object: &ClusterObject,
) -> Result<(), StatusWriteError> {
    let patch = if object
        .metadata
        .finalizers
        .as_ref()
        .is_none_or(Vec::is_empty)
    {
        serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion",
             "value": object.metadata.resource_version},
            {"op": "add", "path": "/metadata/finalizers", "value": [REGISTRATION_FINALIZER]},
        ])
    } else {
        serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion",
             "value": object.metadata.resource_version},
            {"op": "add", "path": "/metadata/finalizers/-", "value": REGISTRATION_FINALIZER},
        ])
    };
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Json::<()>(json_patch_of(patch)?),
    )
    .await?;
    Ok(())
}

fn json_patch_of<P: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<P, StatusWriteError> {
    serde_json::from_value(value).map_err(|e| StatusWriteError::JsonPatch(e.to_string()))
}

/// A deduplicating queue of cluster names.
#[derive(Clone)]
struct WorkQueue {
    pending: Arc<DashSet<String>>,
    tx: mpsc::UnboundedSender<String>,
    rx: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>>,
}

impl WorkQueue {
    fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            pending: Arc::default(),
            tx,
            rx: Arc::new(tokio::sync::Mutex::new(rx)),
        }
    }

    fn push(&self, name: String) {
        if self.pending.insert(name.clone()) {
            let _ = self.tx.send(name);
        }
    }

    async fn pop(&self) -> Option<String> {
        let name = self.rx.lock().await.recv().await?;
        self.pending.remove(&name);
        Some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn conn() -> ConnectedRecord {
        ConnectedRecord {
            replica: "hub-0".into(),
            agent_version: "0.1.0".into(),
            kubernetes_version: "v1.34.4".into(),
            connected_unix_millis: 0,
        }
    }

    #[test]
    fn a_connecting_cluster_becomes_joined_and_available() {
        let s = desired_status(true, Some(&conn()), None, None, Some(1), &at(100)).unwrap();
        assert!(conditions::is_true(&s.conditions, "Joined"));
        assert!(conditions::is_true(&s.conditions, "Available"));
        assert_eq!(s.hub_replica.as_deref(), Some("hub-0"));
        assert_eq!(s.kubernetes_version.as_deref(), Some("v1.34.4"));
        assert_eq!(s.last_heartbeat_time, Some(at(100)));
    }

    #[test]
    fn the_hub_sets_and_clears_its_own_taints_and_keeps_the_users() {
        let up = desired_status(true, Some(&conn()), None, None, Some(1), &at(100)).unwrap();
        let away = desired_status(true, None, None, Some(&up), Some(1), &at(200)).unwrap();
        let mine = serde_json::json!({"key": "accord.io/maintenance", "effect": "NoSchedule"});
        let spec = serde_json::json!({"weight": 3, "taints": [mine]});
        // Away: the unreachable taint after the user's own.
        let tainted = hub_taints(Some(&spec), &away).unwrap();
        assert_eq!(
            tainted,
            [
                mine.clone(),
                serde_json::json!({"key": UNREACHABLE_TAINT, "effect": "NoExecute"})
            ]
        );
        let spec_tainted = serde_json::json!({"weight": 3, "taints": tainted});
        assert_eq!(hub_taints(Some(&spec_tainted), &away), None, "written once");
        // Back: cleared, the user's kept.
        assert_eq!(hub_taints(Some(&spec_tainted), &up), Some(vec![mine]));
        assert_eq!(hub_taints(Some(&spec), &up), None);
        assert_eq!(hub_taints(None, &up), None);
        // Never connected: not written (placement reads the conditions all the same).
        let never = desired_status(true, None, None, None, Some(1), &at(100)).unwrap();
        assert_eq!(hub_taints(None, &never), None);
        // The member API server down while the agent is connected.
        let reports = MemberReports {
            api_server: Some(api_server_condition(
                Some(&conn()),
                Some(&health(false, "GET /readyz: timed out")),
            )),
            capacity: None,
        };
        let frozen = desired_status_with(
            true,
            Some(&conn()),
            None,
            &reports,
            Some(&up),
            Some(1),
            &at(300),
            HEARTBEAT_REFRESH_INTERVAL,
        )
        .unwrap();
        assert_eq!(
            hub_taints(None, &frozen),
            Some(vec![
                serde_json::json!({"key": API_SERVER_UNAVAILABLE_TAINT, "effect": "NoExecute"})
            ])
        );
    }

    #[test]
    fn nothing_is_written_while_a_healthy_cluster_stays_healthy() {
        let s = desired_status(true, Some(&conn()), None, None, Some(1), &at(100)).unwrap();
        assert_eq!(
            desired_status(true, Some(&conn()), None, Some(&s), Some(1), &at(150)),
            None
        );
    }

    #[test]
    fn heartbeat_time_is_refreshed_only_after_the_refresh_interval() {
        let s = desired_status(true, Some(&conn()), None, None, Some(1), &at(100)).unwrap();
        let later = 100 + HEARTBEAT_REFRESH_INTERVAL.as_secs() as i64;
        let refreshed =
            desired_status(true, Some(&conn()), None, Some(&s), Some(1), &at(later)).unwrap();
        assert_eq!(refreshed.last_heartbeat_time, Some(at(later)));
        assert_eq!(
            refreshed.conditions, s.conditions,
            "conditions keep their transition times"
        );
    }

    #[test]
    fn a_healthy_clusters_heartbeat_is_never_left_65_seconds_old_in_a_small_fleet() {
        // The column said "65s" for a cluster heartbeating every second (a 300 s interval).
        let s = desired_status(true, Some(&conn()), None, None, Some(1), &at(100)).unwrap();
        let refresh = heartbeat_refresh_interval(3);
        let refreshed = desired_status_with(
            true,
            Some(&conn()),
            None,
            &MemberReports::default(),
            Some(&s),
            Some(1),
            &at(165),
            refresh,
        )
        .expect("a 65 s old heartbeat time is refreshed");
        assert_eq!(refreshed.last_heartbeat_time, Some(at(165)));
    }

    #[test]
    fn heartbeat_refreshes_stay_within_their_write_budget_in_a_large_fleet() {
        assert_eq!(heartbeat_refresh_interval(0), HEARTBEAT_REFRESH_INTERVAL);
        assert_eq!(heartbeat_refresh_interval(300), HEARTBEAT_REFRESH_INTERVAL);
        for clusters in [301, 1_000, 10_000, 20_000] {
            let per_second = clusters as f64 / heartbeat_refresh_interval(clusters).as_secs_f64();
            assert!(
                per_second <= f64::from(HEARTBEAT_REFRESH_WRITES_PER_SECOND) + 1e-9,
                "{clusters} clusters: {per_second} refreshes/s"
            );
        }
    }

    #[test]
    fn a_disconnected_cluster_turns_unavailable_and_keeps_its_last_heartbeat() {
        let up = desired_status(true, Some(&conn()), None, None, Some(1), &at(100)).unwrap();
        let down = desired_status(true, None, None, Some(&up), Some(1), &at(103)).unwrap();
        let available = conditions::find(&down.conditions, "Available").unwrap();
        assert_eq!(available.status, "False");
        assert_eq!(available.last_transition_time, at(103));
        assert_eq!(down.last_heartbeat_time, Some(at(100)));
        assert_eq!(down.hub_replica, None);
        let back =
            desired_status(true, Some(&conn()), None, Some(&down), Some(1), &at(110)).unwrap();
        assert!(conditions::is_true(&back.conditions, "Available"));
        assert_eq!(back.last_heartbeat_time, Some(at(110)));
    }

    #[test]
    fn a_spec_that_does_not_decode_is_degraded_with_the_error_and_the_cluster_stays_available() {
        let error = "invalid value: integer `3000000000`, expected i32";
        let s = desired_status(true, Some(&conn()), Some(error), None, Some(2), &at(100)).unwrap();
        let degraded = conditions::find(&s.conditions, types::DEGRADED).unwrap();
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", reasons::INVALID_SPEC)
        );
        assert!(degraded.message.contains(error), "{}", degraded.message);
        assert!(conditions::is_true(&s.conditions, types::AVAILABLE));
        // Fixed: back to healthy, with a transition.
        let fixed = desired_status(true, Some(&conn()), None, Some(&s), Some(3), &at(120)).unwrap();
        let degraded = conditions::find(&fixed.conditions, types::DEGRADED).unwrap();
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("False", reasons::HEALTHY)
        );
        assert_eq!(degraded.last_transition_time, at(120));
    }

    fn health(available: bool, message: &str) -> HealthRecord {
        HealthRecord {
            api_server_available: available,
            message: message.into(),
            since_unix_millis: 0,
        }
    }

    #[test]
    fn a_frozen_member_api_server_shows_as_a_condition_and_the_cluster_stays_available() {
        let up = api_server_condition(Some(&conn()), Some(&health(true, "")));
        let s = desired_status_with(
            true,
            Some(&conn()),
            None,
            &MemberReports {
                api_server: Some(up),
                ..MemberReports::default()
            },
            None,
            Some(1),
            &at(100),
            HEARTBEAT_REFRESH_INTERVAL,
        )
        .unwrap();
        let c = conditions::find(&s.conditions, API_SERVER_AVAILABLE).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", READYZ_OK));
        let error = "GET /readyz did not answer within 2s";
        let down = api_server_condition(Some(&conn()), Some(&health(false, error)));
        let s = desired_status_with(
            true,
            Some(&conn()),
            None,
            &MemberReports {
                api_server: Some(down),
                ..MemberReports::default()
            },
            Some(&s),
            Some(1),
            &at(105),
            HEARTBEAT_REFRESH_INTERVAL,
        )
        .unwrap();
        let c = conditions::find(&s.conditions, API_SERVER_AVAILABLE).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            ("False", READYZ_FAILED, error)
        );
        assert_eq!(c.last_transition_time, at(105));
        assert!(
            conditions::is_true(&s.conditions, types::AVAILABLE),
            "nothing moves"
        );
    }

    #[test]
    fn without_a_connected_agent_the_api_server_health_is_unknown() {
        let c = api_server_condition(None, Some(&health(true, "")));
        assert_eq!(c.status, CondStatus::Unknown);
        assert_eq!(c.reason, HEALTH_UNKNOWN_DISCONNECTED);
        let c = api_server_condition(Some(&conn()), None);
        assert_eq!(
            (c.status, c.reason.as_str()),
            (CondStatus::Unknown, HEALTH_NOT_REPORTED)
        );
    }

    #[test]
    fn the_status_without_health_leaves_an_existing_api_server_condition_alone() {
        let down = api_server_condition(Some(&conn()), Some(&health(false, "refused")));
        let s = desired_status_with(
            true,
            Some(&conn()),
            None,
            &MemberReports {
                api_server: Some(down),
                ..MemberReports::default()
            },
            None,
            Some(1),
            &at(100),
            HEARTBEAT_REFRESH_INTERVAL,
        )
        .unwrap();
        assert_eq!(
            desired_status(true, Some(&conn()), None, Some(&s), Some(1), &at(110)),
            None
        );
    }
}
