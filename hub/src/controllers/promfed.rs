//! The leader's PrometheusFederation controller: decode → validate → select clusters →
//! (fenced write of the placements key when it changed) → global tier → aggregate status →
//! write status only when it changed.
//!
//! Every selected cluster gets the same assignment; there is no failover, so a
//! disconnected cluster keeps its assignment and its placement shows `Unavailable`.
//!
//! The global tier is one ConfigMap (`prometheus-federation-global` in the hub's federation
//! namespace) rendered from every policy with `spec.global.enabled`. Any policy's reconcile
//! renders it again from the stores ([`Federation::sync_global`], serialised, written with
//! server-side apply only when its hash changed, deleted when no global-enabled policy is
//! left) and reads the reloader's annotations back into its own `status.global`.
//!
//! Triggers: the policies themselves; ManagedCluster changes of labels, availability or
//! `spec.federationEndpoint` (every policy naming the cluster or selecting by label); the
//! agents' status records; and any change of the global ConfigMap (every global-enabled
//! policy). Deleting a policy removes its placements key (agents drop its jobs) and its
//! global jobs through a finalizer.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use accord_common::distribution::{PlacementState, PolicyKind, PolicyRef};
use accord_crds::conditions::{self, reasons, types};
use accord_crds::promfed::GlobalTierStatus;
use accord_crds::validate::Validate;
use accord_crds::{HUB_FIELD_MANAGER, PrometheusFederation, PrometheusFederationStatus};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store as Reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio::sync::{Mutex, mpsc};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tracing::{debug, info};

use super::{
    ClusterEvents, ClusterObject, ControllerContext, ControllerError, Decoded, Lenient, Listed,
    ReconcileError, decode_or_invalid, error_policy, patch_status, signal_when_listed,
    trace_result, trigger_on_changes,
};
use crate::distribution::{Decision, PlacementRecord};
use crate::promfed::PromfedDecision;
use crate::promfed::global::{self, GlobalMember, GlobalPolicy, PolicyPart};
use crate::promfed::plan::{self, PlanError};
use crate::promfed::select::{ClusterInfo, select_clusters};
use crate::promfed::status::{StatusInputs, aggregate, new_errors, status_changed};
use crate::store::{StatusRecord, StoreError};
use accord_common::promfed::{self, ReloadStatus};

/// Finalizer that removes a policy's placements and global jobs before the policy goes
/// (the same name the scale controller uses: it means the same thing).
pub const FINALIZER: &str = super::scale::FINALIZER;
/// Re-check every policy this often even without events.
const RESYNC: Duration = Duration::from_secs(300);
/// Labels of the global ConfigMap.
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "accord-hub");
const OWNED_BY: (&str, &str) = ("accord.io/owned-by", "prometheusfederation");
/// Event reason of a placement (or the global tier) going to `Error`.
const PLACEMENT_ERROR: &str = "PlacementError";

/// A policy as watched: it always decodes this far.
type WatchedPolicy = Lenient<PrometheusFederation>;

/// The controller's state: the shared context, its own stores, and the lock that
/// serialises renderings of the global tier.
struct Federation {
    ctx: Arc<ControllerContext>,
    namespace: String,
    policies: Reflector<WatchedPolicy>,
    global: Reflector<ConfigMap>,
    global_lock: Mutex<()>,
}

/// The global tier as one rendering left it.
struct GlobalView {
    /// Hash of the config written (`None`: no global-enabled policy, no ConfigMap).
    hash: Option<String>,
    /// Each global-enabled policy's part.
    parts: BTreeMap<PolicyRef, PolicyPart>,
    /// What the reloader last said.
    reload: ReloadStatus,
}

/// What the controller needs of a ManagedCluster, read field by field so that a cluster
/// whose spec does not decode still counts by its labels and status.
fn cluster_info(mc: &ClusterObject) -> ClusterInfo {
    let conditions = mc.conditions();
    ClusterInfo {
        labels: mc.labels().clone(),
        available: conditions::is_true(&conditions, types::AVAILABLE),
        federation_endpoint: mc
            .pointer("/spec/federationEndpoint")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
    }
}

fn cluster_infos(ctx: &ControllerContext) -> BTreeMap<String, ClusterInfo> {
    ctx.clusters
        .state()
        .iter()
        .map(|mc| (mc.name_any(), cluster_info(mc)))
        .collect()
}

fn object_name(policy: &WatchedPolicy) -> String {
    format!(
        "{}/{}",
        policy.namespace().unwrap_or_default(),
        policy.name_any()
    )
}

fn policy_ref(policy: &impl ResourceExt) -> PolicyRef {
    PolicyRef::new(
        PolicyKind::PrometheusFederation,
        &policy.namespace().unwrap_or_default(),
        &policy.name_any(),
    )
}

fn global_enabled(policy: &WatchedPolicy) -> bool {
    policy
        .pointer("/spec/global/enabled")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

async fn reconcile(
    policy: Arc<WatchedPolicy>,
    fed: Arc<Federation>,
) -> Result<Action, ReconcileError> {
    let ns = policy.namespace().unwrap_or_default();
    let api: Api<WatchedPolicy> = Api::namespaced(fed.ctx.kube.clone(), &ns);
    let object = object_name(&policy);
    let action = finalizer(&api, FINALIZER, policy, |event| async {
        match event {
            Finalizer::Apply(p) => match decode_or_invalid(&p, &Time(Timestamp::now())) {
                Decoded::Valid(policy) => fed.apply(&policy).await,
                Decoded::Invalid {
                    message,
                    status_patch,
                } => fed.undecodable(&p, &message, status_patch).await,
            },
            // Cleanup needs only the name, so an object that does not decode is cleaned
            // up and its deletion completes.
            Finalizer::Cleanup(p) => fed.cleanup(&p).await,
        }
    })
    .await
    .map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(e)
        | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => ReconcileError::Finalizer(other.to_string()),
    })?;
    fed.ctx.succeeded(&object);
    Ok(action)
}

impl Federation {
    /// Says in the status and an Event that the object cannot be read; its global jobs (if
    /// an earlier version had any) go; waits for a change.
    async fn undecodable(
        &self,
        policy: &WatchedPolicy,
        message: &str,
        status_patch: Option<serde_json::Value>,
    ) -> Result<Action, ReconcileError> {
        let Some(patch) = status_patch else {
            self.sync_global().await?;
            return Ok(Action::await_change());
        };
        let ns = policy.namespace().unwrap_or_default();
        let api: Api<WatchedPolicy> = Api::namespaced(self.ctx.kube.clone(), &ns);
        api.patch_status(
            &policy.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
        self.ctx.metrics.error("invalid_spec");
        self.ctx
            .publish(
                &policy.object_ref(&()),
                EventType::Warning,
                reasons::INVALID_SPEC,
                message.to_owned(),
            )
            .await;
        // Its global jobs, if an earlier version had any, go.
        self.sync_global().await?;
        Ok(Action::await_change())
    }

    /// `Ready=False`/`InvalidSpec` with `message`, for a spec the hub cannot act on.
    async fn invalid_spec(
        &self,
        policy: &PrometheusFederation,
        message: String,
    ) -> Result<Action, ReconcileError> {
        let api: Api<PrometheusFederation> = Api::namespaced(
            self.ctx.kube.clone(),
            &policy.namespace().unwrap_or_default(),
        );
        let old = policy.status.as_ref();
        let mut status = old.cloned().unwrap_or_default();
        let generation = policy.metadata.generation;
        status.observed_generation = generation;
        status.conditions = conditions::merge(
            &status.conditions,
            &[conditions::Desired::new(
                types::READY,
                conditions::Status::False,
                reasons::INVALID_SPEC,
                message,
            )],
            generation,
            &Time(Timestamp::now()),
        );
        write_status(&api, &policy.name_any(), old, &status).await?;
        // Its global jobs, if an earlier version had any, go.
        self.sync_global().await?;
        Ok(Action::await_change())
    }

    async fn apply(&self, policy: &PrometheusFederation) -> Result<Action, ReconcileError> {
        let ctx = &self.ctx;
        let p = policy_ref(policy);
        if let Err(errors) = policy.spec.validate() {
            return self.invalid_spec(policy, errors.to_string()).await;
        }
        let clusters = cluster_infos(ctx);
        let planned = select_clusters(
            policy.spec.clusters.as_deref(),
            policy.spec.cluster_selector.as_ref(),
            &clusters,
        )
        .map_err(PlanError::from)
        .and_then(|selected| Ok((selected, plan::assignment(&policy.spec)?)));
        let (selected, assignment) = match planned {
            Ok(planned) => planned,
            Err(e) => return self.invalid_spec(policy, e.to_string()).await,
        };

        let key = ctx
            .store
            .keys()
            .placements(p.kind.as_str(), &p.namespace, &p.name);
        let record = PlacementRecord {
            policy: p.clone(),
            generation: policy.metadata.generation.unwrap_or_default(),
            decided_unix_millis: Timestamp::now().as_millisecond(),
            shares: plan::shares(&selected, &assignment),
            decision: Decision::Promfed(PromfedDecision::default()),
        };
        let (record, revision) = match ctx.placements.get(&key) {
            Some((previous, revision)) if previous.same_decision(&record) => (previous, revision),
            _ => {
                let fence = ctx.election.fence().ok_or(ReconcileError::NotLeader)?;
                let value = serde_json::to_vec(&record).map_err(StoreError::Encode)?;
                let revision = ctx.store.fenced_put(&fence, &key, value).await?;
                // Read our own write before anything is computed from the cache.
                ctx.placements.wait_for_revision(revision).await;
                let clusters: Vec<&str> =
                    record.shares.iter().map(|s| s.cluster.as_str()).collect();
                info!(policy = %p, ?clusters, revision, "federation placements");
                (record, revision)
            }
        };

        let reports: HashMap<String, StatusRecord> = record
            .shares
            .iter()
            .filter_map(|s| {
                let key =
                    ctx.store
                        .keys()
                        .status(&s.cluster, p.kind.as_str(), &p.namespace, &p.name);
                ctx.statuses.get(&key).map(|(r, _)| (s.cluster.clone(), r))
            })
            .collect();

        let global = self.sync_global().await;
        let enabled = policy.spec.global.as_ref().is_some_and(|g| g.enabled);
        let global_status = enabled.then(|| match &global {
            Ok(view) => view_status(&p, view),
            Err(e) => GlobalTierStatus {
                state: PlacementState::Error,
                jobs: None,
                config_hash: None,
                message: Some(format!(
                    "the hub cannot write ConfigMap {}/{}: {}",
                    self.namespace,
                    promfed::GLOBAL_CONFIG_MAP_NAME,
                    crate::store::error_chain(e)
                )),
            },
        });

        let old = policy.status.as_ref();
        let status = aggregate(&StatusInputs {
            shares: &record.shares,
            revision,
            reports: &reports,
            clusters: &clusters,
            global: global_status.as_ref(),
            generation: policy.metadata.generation,
            old,
            now: &Time(Timestamp::now()),
        });
        for note in new_errors(old, &status) {
            ctx.publish(
                &policy.object_ref(&()),
                EventType::Warning,
                PLACEMENT_ERROR,
                note,
            )
            .await;
        }
        let api: Api<PrometheusFederation> = Api::namespaced(ctx.kube.clone(), &p.namespace);
        write_status(&api, &p.name, old, &status).await?;
        global?;
        Ok(Action::requeue(RESYNC))
    }

    async fn cleanup(&self, policy: &WatchedPolicy) -> Result<Action, ReconcileError> {
        let ctx = &self.ctx;
        let p = policy_ref(policy);
        let fence = ctx.election.fence().ok_or(ReconcileError::NotLeader)?;
        let key = ctx
            .store
            .keys()
            .placements(p.kind.as_str(), &p.namespace, &p.name);
        ctx.store.fenced_delete(&fence, &key).await?;
        ctx.store
            .delete_policy_status(p.kind.as_str(), &p.namespace, &p.name)
            .await?;
        // The policy is being deleted, so this rendering leaves its jobs out.
        self.sync_global().await?;
        info!(policy = %p, "federation policy deleted; agents drop its jobs");
        Ok(Action::await_change())
    }

    /// Renders the global tier from every global-enabled policy in the store (skipping any
    /// being deleted or that the hub cannot act on), writes the ConfigMap when its hash
    /// changed, deletes it when no such policy is left, and returns what the reloader last
    /// said about it.
    async fn sync_global(&self) -> Result<GlobalView, ReconcileError> {
        let _serialised = self.global_lock.lock().await;
        let clusters = cluster_infos(&self.ctx);
        let policies: Vec<GlobalPolicy> = self
            .policies
            .state()
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && global_enabled(p))
            .filter_map(|p| global_policy(p, &clusters))
            .collect();
        let planned = global::plan(&policies);
        let rendered =
            global::render(&planned).map_err(|e| ReconcileError::Render(e.to_string()))?;
        let api: Api<ConfigMap> = Api::namespaced(self.ctx.kube.clone(), &self.namespace);
        let current = self.current_global(&api).await?;
        let Some(rendered) = rendered else {
            if current.is_some() {
                match api
                    .delete(promfed::GLOBAL_CONFIG_MAP_NAME, &DeleteParams::default())
                    .await
                {
                    Ok(_) => info!("no policy enables the global tier: its ConfigMap is deleted"),
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
            return Ok(GlobalView {
                hash: None,
                parts: planned.parts,
                reload: ReloadStatus::default(),
            });
        };
        let annotations = current
            .as_ref()
            .and_then(|cm| cm.metadata.annotations.clone())
            .unwrap_or_default();
        let labelled = current.as_ref().is_some_and(|cm| {
            let labels = cm.labels();
            labels.get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1)
                && labels.get(OWNED_BY.0).map(String::as_str) == Some(OWNED_BY.1)
        });
        if annotations.get(promfed::ANN_CONFIG_HASH) != Some(&rendered.hash) || !labelled {
            api.patch(
                promfed::GLOBAL_CONFIG_MAP_NAME,
                &PatchParams::apply(HUB_FIELD_MANAGER).force(),
                &Patch::Apply(global_config_map(&self.namespace, &rendered)),
            )
            .await?;
            info!(hash = %rendered.hash, jobs = rendered.jobs, "global tier config written");
        }
        Ok(GlobalView {
            hash: Some(rendered.hash),
            parts: planned.parts,
            reload: ReloadStatus::from_annotations(&annotations),
        })
    }

    /// The global ConfigMap as last seen: from the watch once it has listed, read directly
    /// until then (so that a watch that cannot list never stalls the policies).
    async fn current_global(&self, api: &Api<ConfigMap>) -> Result<Option<ConfigMap>, kube::Error> {
        // Polled once: ready at once when the watch has listed.
        let listed = tokio::time::timeout(Duration::ZERO, self.global.wait_until_ready())
            .await
            .is_ok_and(|r| r.is_ok());
        if listed {
            let key = ObjectRef::new(promfed::GLOBAL_CONFIG_MAP_NAME).within(&self.namespace);
            return Ok(self.global.get(&key).map(|cm| (*cm).clone()));
        }
        api.get_opt(promfed::GLOBAL_CONFIG_MAP_NAME).await
    }
}

/// A global-enabled policy as the global tier needs it; `None` for one the hub cannot act
/// on (its own reconcile says why in its status).
fn global_policy(
    policy: &WatchedPolicy,
    clusters: &BTreeMap<String, ClusterInfo>,
) -> Option<GlobalPolicy> {
    let decoded: PrometheusFederation = policy.decode().ok()?;
    decoded.spec.validate().ok()?;
    let selected = select_clusters(
        decoded.spec.clusters.as_deref(),
        decoded.spec.cluster_selector.as_ref(),
        clusters,
    )
    .ok()?;
    let spec = plan::assignment(&decoded.spec).ok()?;
    Some(GlobalPolicy {
        policy: policy_ref(policy),
        spec,
        members: selected
            .into_iter()
            .filter(|c| c.known)
            .map(|c| GlobalMember {
                endpoint: clusters
                    .get(&c.name)
                    .and_then(|i| i.federation_endpoint.clone()),
                cluster: c.name,
            })
            .collect(),
    })
}

/// A global-enabled policy's `status.global` from one rendering.
fn view_status(policy: &PolicyRef, view: &GlobalView) -> GlobalTierStatus {
    match (view.parts.get(policy), &view.hash) {
        (Some(part), Some(hash)) => global::tier_status(policy, part, hash, &view.reload),
        // The store has not caught up with this policy yet; its next reconcile will.
        _ => GlobalTierStatus {
            state: PlacementState::Pending,
            jobs: None,
            config_hash: None,
            message: Some(global::WAITING_FOR_RELOADER.to_owned()),
        },
    }
}

/// The global ConfigMap as server-side applied: the config, its hash, the owner labels.
fn global_config_map(namespace: &str, rendered: &promfed::Rendered) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(promfed::GLOBAL_CONFIG_MAP_NAME.to_owned());
    cm.metadata.namespace = Some(namespace.to_owned());
    cm.metadata.labels = Some(BTreeMap::from([
        (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
        (OWNED_BY.0.to_owned(), OWNED_BY.1.to_owned()),
    ]));
    cm.metadata.annotations = Some(BTreeMap::from([(
        promfed::ANN_CONFIG_HASH.to_owned(),
        rendered.hash.clone(),
    )]));
    cm.data = Some(BTreeMap::from([(
        promfed::CONFIG_KEY.to_owned(),
        rendered.yaml.clone(),
    )]));
    cm
}

async fn write_status(
    api: &Api<PrometheusFederation>,
    name: &str,
    old: Option<&PrometheusFederationStatus>,
    new: &PrometheusFederationStatus,
) -> Result<(), kube::Error> {
    if !status_changed(old, new) {
        return Ok(());
    }
    patch_status(api, name, old, new).await
}

/// Runs the controller until it fails; `clusters` is its subscription to the shared
/// ManagedCluster reflector, and `listed` is told once the policies are listed.
pub async fn run(
    ctx: Arc<ControllerContext>,
    clusters: ClusterEvents,
    listed: Listed,
) -> Result<(), ControllerError> {
    let namespace = ctx.federation_namespace.clone();
    let policies: Api<WatchedPolicy> = Api::all(ctx.kube.clone());
    let controller = Controller::new(policies, watcher::Config::default());
    let policy_store = controller.store();
    let (trigger, triggers) = mpsc::unbounded_channel::<ObjectRef<WatchedPolicy>>();

    // The global ConfigMap, watched by name: the reloader's answers arrive here.
    let (global_store, global_writer) = reflector::store::<ConfigMap>();
    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.kube.clone(), &namespace);
    let t = trigger.clone();
    let ps = policy_store.clone();
    let global_changes = watcher(
        config_maps,
        watcher::Config::default().fields(&format!(
            "metadata.name={}",
            promfed::GLOBAL_CONFIG_MAP_NAME
        )),
    )
    .default_backoff()
    .reflect(global_writer)
    .for_each(move |event| {
        match event {
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                for p in ps.state().iter().filter(|p| global_enabled(p)) {
                    let _ = t.send(ObjectRef::from_obj(&**p));
                }
            }
            Ok(_) => {}
            Err(e) => debug!(error = %e, "watching the global tier's ConfigMap"),
        }
        futures::future::ready(())
    });

    // ManagedCluster changes that matter here → every policy naming the cluster or
    // selecting by label, read from the stored spec.
    let t = trigger.clone();
    let ps = policy_store.clone();
    let mut seen: HashMap<String, ClusterInfo> = HashMap::new();
    let cluster_changes = clusters.for_each(move |mc| {
        let name = mc.name_any();
        let info = cluster_info(&mc);
        if seen.get(&name) != Some(&info) {
            seen.insert(name.clone(), info);
            for p in ps.state() {
                let names_it = p
                    .pointer("/spec/clusters")
                    .and_then(serde_json::Value::as_array)
                    .is_some_and(|c| c.iter().any(|c| c == name.as_str()));
                if names_it || p.pointer("/spec/clusterSelector").is_some() {
                    let _ = t.send(ObjectRef::from_obj(&*p));
                }
            }
        }
        futures::future::ready(())
    });

    // Agents' reports → the policy they are about.
    let report_changes = trigger_on_changes(
        ctx.statuses.subscribe(),
        ctx.store.keys().status_prefix(),
        trigger.clone(),
        |rest| match rest.split('/').collect::<Vec<_>>().as_slice() {
            [_cluster, kind, ns, name] if *kind == PolicyKind::PrometheusFederation.as_str() => {
                Some((ns, name))
            }
            _ => None,
        },
    );

    let report_listed = signal_when_listed(policy_store.clone(), listed);
    let fed = Arc::new(Federation {
        ctx,
        namespace,
        policies: policy_store,
        global: global_store,
        global_lock: Mutex::new(()),
    });
    let reconciling = controller
        .reconcile_on(UnboundedReceiverStream::new(triggers))
        .run(reconcile, policy_error, fed)
        .for_each(trace_result);
    // One task on purpose, as in the scale controller: a shared-stream subscription that
    // finds its object already deleted returns Pending without a wake-up, and the other
    // branches' activity polls it again.
    tokio::select! {
        () = reconciling => {}
        () = cluster_changes => {}
        () = report_changes => {}
        () = global_changes => {}
        () = report_listed => {}
    }
    Err(ControllerError::Ended("PrometheusFederation controller"))
}

fn policy_error(
    policy: Arc<WatchedPolicy>,
    error: &ReconcileError,
    fed: Arc<Federation>,
) -> Action {
    error_policy(&fed.ctx, &object_name(&policy), error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::ErrorCategory as _;

    #[test]
    fn a_cluster_whose_spec_does_not_decode_still_counts_by_labels_status_and_endpoint() {
        let mc = ClusterObject::from_value(serde_json::json!({
            "apiVersion": "accord.io/v1alpha1", "kind": "ManagedCluster",
            "metadata": {"name": "a", "labels": {"tier": "prod"}},
            "spec": {"weight": 3_000_000_000_i64, "federationEndpoint": "http://a:9090"},
            "status": {"conditions": [{
                "type": "Available", "status": "True", "reason": "AgentConnected",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:10Z"
            }]}
        }))
        .unwrap();
        assert!(
            mc.decode().is_err(),
            "the fixture must not decode as a whole"
        );
        let info = cluster_info(&mc);
        assert!(info.available);
        assert_eq!(info.labels["tier"], "prod");
        assert_eq!(info.federation_endpoint.as_deref(), Some("http://a:9090"));
    }

    #[test]
    fn only_decodable_valid_global_policies_join_the_global_tier() {
        let clusters: BTreeMap<String, ClusterInfo> = [
            (
                "east".to_owned(),
                ClusterInfo {
                    federation_endpoint: Some("http://east:9090".into()),
                    ..Default::default()
                },
            ),
            ("west".to_owned(), ClusterInfo::default()),
        ]
        .into();
        let object = |spec: serde_json::Value| {
            WatchedPolicy::from_value(serde_json::json!({
                "apiVersion": "accord.io/v1alpha1", "kind": "PrometheusFederation",
                "metadata": {"name": "p", "namespace": "monitoring"},
                "spec": spec,
            }))
            .unwrap()
        };
        let good = object(serde_json::json!({
            "clusters": ["east", "west", "mars"],
            "tenantSelector": {"namespaces": ["a"]},
            "match": ["up"],
            "global": {"enabled": true},
        }));
        assert!(global_enabled(&good));
        let g = global_policy(&good, &clusters).unwrap();
        assert_eq!(
            g.policy,
            PolicyRef::new(PolicyKind::PrometheusFederation, "monitoring", "p")
        );
        assert_eq!(
            g.members,
            vec![
                GlobalMember {
                    cluster: "east".into(),
                    endpoint: Some("http://east:9090".into())
                },
                GlobalMember {
                    cluster: "west".into(),
                    endpoint: None
                },
            ],
            "unknown clusters are left out"
        );
        let invalid = object(serde_json::json!({
            "clusters": ["east"],
            "tenantSelector": {"namespaces": ["a"]},
            "match": [],
            "global": {"enabled": true},
        }));
        assert!(global_policy(&invalid, &clusters).is_none());
        let undecodable = object(serde_json::json!({
            "clusters": ["east"], "match": ["up"], "global": {"enabled": true},
        }));
        assert!(global_policy(&undecodable, &clusters).is_none());
    }

    #[test]
    fn the_global_config_map_carries_the_config_its_hash_and_the_owner_labels() {
        let rendered = promfed::Rendered {
            yaml: "scrape_configs: []\n".into(),
            hash: "abc".into(),
            jobs: 0,
        };
        let cm = global_config_map("accord-system", &rendered);
        assert_eq!(
            cm.metadata.name.as_deref(),
            Some(promfed::GLOBAL_CONFIG_MAP_NAME)
        );
        assert_eq!(cm.metadata.namespace.as_deref(), Some("accord-system"));
        assert_eq!(cm.annotations()[promfed::ANN_CONFIG_HASH], "abc");
        assert_eq!(cm.labels()["app.kubernetes.io/managed-by"], "accord-hub");
        assert_eq!(cm.labels()["accord.io/owned-by"], "prometheusfederation");
        assert_eq!(
            cm.data.unwrap()[promfed::CONFIG_KEY],
            "scrape_configs: []\n"
        );
    }

    fn api_error(code: u16) -> ReconcileError {
        ReconcileError::Kube(kube::Error::Api(Box::new(
            kube::core::Status::failure("refused", "Test").with_code(code),
        )))
    }

    #[test]
    fn refused_requests_wait_for_a_change_and_passing_trouble_is_retried() {
        assert!(!api_error(403).is_transient(), "missing RBAC repeats");
        assert!(
            !api_error(404).is_transient(),
            "a missing namespace repeats"
        );
        assert!(api_error(409).is_transient());
        assert!(api_error(503).is_transient());
        assert!(!ReconcileError::NotLeader.is_transient());
        assert!(!ReconcileError::Render("x".into()).is_transient());
        assert_eq!(ReconcileError::Render("x".into()).category(), "render");
    }
}
