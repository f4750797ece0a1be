//! The I/O end of the FederatedResource enforcer: applies one assignment's manifests with
//! server-side apply (field manager [`DELIVERY_FIELD_MANAGER`], forced), creating missing
//! namespaces, checking for objects Accord did not create before taking any, and removes
//! (or orphans) what an earlier spec delivered or what the assignment asks to remove.
//!
//! Each manifest has its own outcome: one refused object does not stop the others. The
//! outcomes go to the enforcer's memory, from which its judge reports them; the apply
//! fails as a whole (so the engine retries with backoff) when any manifest failed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tracing::Instrument;

use accord_common::distribution::{FederatedResourceSpec, ManifestKey, PlacedRef};
use accord_common::runtime::{backoff, unix_millis};
use accord_crds::{
    DELIVERED_BY_FEDERATED_RESOURCE, DELIVERY_FIELD_MANAGER, FEDERATED_RESOURCE_ANNOTATION,
    OWNED_BY_LABEL,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::core::ApiResource;
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use super::discovery::{Discovery, Resolution, permission_hint, rbac_name};
use super::health::health;
use super::judge::{
    Claim, Memory, Outcome, Recorded, Verdict, View, accord_fields, claim, delivered_by,
    not_served_message, verdict, version, version_keys,
};
use super::manifest::{
    CRD_KIND, Desired, Gvk, NAMESPACE_KIND, Prepared, placed_mark, prepare_all, unmark_patch,
};
use crate::enforce::{ApplyError, ApplyErrorKind};

/// What the enforcer remembers of its FederatedResources, shared by its applies and looks.
pub type SharedMemory = Arc<Mutex<HashMap<PlacedRef, Memory>>>;

/// How long an apply waits for a CRD it applied to be established before applying the
/// manifests of its kinds (they are `Pending` and retried if it takes longer).
const CRD_ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(20);

/// Types whose objects keep a namespace Accord created from being deleted with the
/// FederatedResource (besides the types the FederatedResource delivers): what usually lives
/// in a namespace.
const NAMESPACE_CONTENT: &[(&str, &str)] = &[
    ("v1", "ConfigMap"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("v1", "PersistentVolumeClaim"),
    ("v1", "Pod"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "ReplicaSet"),
    ("batch/v1", "Job"),
    ("batch/v1", "CronJob"),
];

/// Objects the API server puts in every namespace: they do not keep one alive.
const NAMESPACE_DEFAULTS: &[(&str, &str)] = &[
    ("ConfigMap", "kube-root-ca.crt"),
    ("ServiceAccount", "default"),
];

/// One apply of one FederatedResource's assignment.
#[derive(Clone)]
pub struct ApplyJob {
    /// Client of the member cluster.
    pub client: kube::Client,
    /// The shared discovery cache.
    pub discovery: Discovery,
    /// The namespaces this agent has seen exist, shared by every apply.
    pub namespaces: KnownNamespaces,
    /// The FederatedResource.
    pub placed: PlacedRef,
    /// Its assignment.
    pub spec: FederatedResourceSpec,
    /// What the watches showed when the apply was decided.
    pub view: View,
    /// What was remembered of the FederatedResource then.
    pub before: Memory,
    /// Where to record the outcomes (`None`: a removal after the FederatedResource left).
    pub memory: Option<SharedMemory>,
}

/// The namespaces the agent has seen exist (read or created), shared by every apply, so a
/// bundle's objects do not each read their namespace first: one read per namespace while
/// it stays. A namespace leaves the set when Accord deletes it and when an apply in it
/// answers 404 (someone else deleted it), and is then ensured again.
#[derive(Clone, Default)]
pub struct KnownNamespaces(Arc<Mutex<HashSet<String>>>);

impl KnownNamespaces {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn contains(&self, name: &str) -> bool {
        self.lock().contains(name)
    }

    fn insert(&self, name: &str) {
        self.lock().insert(name.to_owned());
    }

    /// Forgets `name`; whether it was known.
    fn forget(&self, name: &str) -> bool {
        self.lock().remove(name)
    }
}

/// A manifest or removal that failed.
struct Failure {
    key: ManifestKey,
    kind: ApplyErrorKind,
    message: String,
}

/// What one manifest's apply did, and the object's version afterwards.
struct Applied {
    outcome: Outcome,
    version: Option<String>,
    failure: Option<ApplyErrorKind>,
}

impl Applied {
    /// A failed call: the manifest's `Error` when the member refused it, `Pending` when the
    /// member could not be asked (its API server unreachable or overloaded, this replica
    /// not holding the agent Lease at the moment): retried with backoff, never reported as
    /// the manifest's fault.
    fn failed(kind: ApplyErrorKind, message: String) -> Self {
        let outcome = match kind {
            ApplyErrorKind::Unavailable | ApplyErrorKind::Transient => Outcome::Pending(message),
            _ => Outcome::Error(message),
        };
        Self {
            outcome,
            version: None,
            failure: Some(kind),
        }
    }
}

/// The message of a refused API call: the server's, plus which permission to grant when
/// it was forbidden.
fn refusal(error: &kube::Error, verb: &str, resource: &str) -> (ApplyErrorKind, String) {
    let kind = ApplyErrorKind::of_kube(error);
    let message = match error {
        kube::Error::Api(status) if status.code == 403 => {
            format!("{}; {}", status.message, permission_hint(verb, resource))
        }
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    };
    (kind, message)
}

impl ApplyJob {
    /// Applies the assignment (or removes what it delivered); answers the version of its
    /// objects afterwards, or an error when any manifest failed.
    pub async fn run(self) -> Result<String, ApplyError> {
        let mark = placed_mark(&self.placed);
        let mut versions: HashMap<ManifestKey, Option<String>> = HashMap::new();
        let mut failures = Vec::new();
        let mut outcomes = BTreeMap::new();
        let mut drift_repairs = 0;
        let manifests = self.prepared().await;
        if self.spec.remove {
            // Dependents before what they depend on: custom resources before their CRDs,
            // namespaced objects before their namespaces.
            for desired in manifests.iter().rev().filter_map(Prepared::valid) {
                self.remove(&desired.key, &mark, &mut versions, &mut failures)
                    .await;
            }
            if failures.is_empty() {
                self.remove_created_namespaces(&manifests, &mark).await;
            }
        } else {
            let mut manifests = manifests;
            let crds = manifests
                .iter()
                .take_while(|p| p.key().kind == CRD_KIND)
                .count();
            let mut index = 0;
            while index < manifests.len() {
                if index == crds && crds > 0 {
                    // The CRDs are in: their kinds may be served now, with their scope.
                    manifests = self.prepared().await;
                }
                if let Prepared::Valid(desired) = &manifests[index] {
                    let recorded = self.before.outcomes.get(&desired.key);
                    let live = self.view.object(&desired.key);
                    let judged = verdict(desired, live, recorded, &mark, self.spec.adopt);
                    if let (Verdict::Synced, Some(recorded)) = (&judged, recorded) {
                        // Applied as it is and unchanged since: only the others are sent
                        // (an edit of one manifest of a bundle applies that one).
                        outcomes.insert(desired.key.clone(), recorded.clone());
                        index += 1;
                        continue;
                    }
                    let drift = judged.is_drift();
                    let applied = self.apply_one(desired, &mark).await;
                    if let Some(kind) = applied.failure {
                        let message = match &applied.outcome {
                            Outcome::Error(m)
                            | Outcome::Pending(m)
                            | Outcome::Conflict { message: m, .. } => m.clone(),
                            _ => String::new(),
                        };
                        failures.push(Failure {
                            key: desired.key.clone(),
                            kind,
                            message,
                        });
                    }
                    if matches!(applied.outcome, Outcome::Applied { .. }) {
                        if drift {
                            drift_repairs += 1;
                            info!(placed = %self.placed, object = %desired.key, "restored fields changed out of band");
                        }
                        versions.insert(desired.key.clone(), applied.version);
                    }
                    let recorded = Recorded {
                        hash: desired.hash.clone(),
                        outcome: applied.outcome,
                    };
                    // Recorded at once: the object's watch event may come before this
                    // apply ends, and the judge must not take Accord's own apply for drift.
                    self.record(|m| {
                        m.outcomes.insert(desired.key.clone(), recorded.clone());
                    });
                    outcomes.insert(desired.key.clone(), recorded);
                }
                index += 1;
            }
            let delivered: BTreeSet<&ManifestKey> = manifests
                .iter()
                .filter_map(Prepared::valid)
                .map(|d| &d.key)
                .collect();
            for key in self.spec.prune.iter().filter(|k| !delivered.contains(k)) {
                self.remove(key, &mark, &mut versions, &mut failures).await;
            }
        }
        self.record(|m| {
            // Outcomes of objects no manifest names any more are dropped.
            m.outcomes = outcomes;
            if drift_repairs > 0 {
                m.drift_repairs += drift_repairs;
                m.last_drift_unix_millis = unix_millis();
            }
        });
        let manifests = self.prepared_cached();
        let keys = version_keys(&manifests, &self.spec);
        let after = version(keys.iter().map(|k| {
            let rv = match versions.get(*k) {
                Some(changed) => changed.as_deref(),
                None => self
                    .view
                    .object(k)
                    .and_then(|o| o.metadata.resource_version.as_deref()),
            };
            (*k, rv)
        }));
        match failures.first() {
            None => Ok(after),
            Some(first) => {
                let more = match failures.len() - 1 {
                    0 => String::new(),
                    n => format!(" (and {n} more)"),
                };
                Err(ApplyError::new(
                    first.kind,
                    format!("{}: {}{more}", first.key, first.message),
                ))
            }
        }
    }

    /// Changes what the enforcer remembers of the FederatedResource (nothing for a removal
    /// after the FederatedResource left).
    fn record(&self, change: impl FnOnce(&mut Memory)) {
        if let Some(memory) = &self.memory {
            let mut memory = memory.lock().unwrap_or_else(PoisonError::into_inner);
            change(memory.entry(self.placed.clone()).or_default());
        }
    }

    /// The manifests prepared with what the member's discovery says of their types (asked
    /// where not known yet).
    async fn prepared(&self) -> Vec<Prepared> {
        let types: BTreeSet<Gvk> = self
            .spec
            .manifests
            .iter()
            .filter_map(super::manifest::gvk_of)
            .collect();
        for gvk in &types {
            // A failure shows again, per manifest, when it is applied.
            let _ = self.discovery.resolve(&self.client, gvk).await;
        }
        self.prepared_cached()
    }

    /// The manifests prepared with what the discovery cache holds.
    fn prepared_cached(&self) -> Vec<Prepared> {
        prepare_all(&self.spec, &self.placed, |gvk| {
            self.discovery.namespaced(gvk)
        })
    }

    /// The API of `key`'s objects, or what keeps it from being used.
    async fn api(
        &self,
        key: &ManifestKey,
    ) -> Result<Option<(Api<DynamicObject>, ApiResource)>, (ApplyErrorKind, String)> {
        let gvk = Gvk::of(key);
        match self.discovery.resolve(&self.client, &gvk).await {
            Ok(Resolution::Served {
                resource,
                namespaced,
            }) => {
                let api = if namespaced {
                    Api::namespaced_with(self.client.clone(), &key.namespace, &resource)
                } else {
                    Api::all_with(self.client.clone(), &resource)
                };
                Ok(Some((api, resource)))
            }
            Ok(Resolution::NotServed) => Ok(None),
            Err(e) => Err((
                ApplyErrorKind::of_kube(&e),
                format!("discovering {gvk}: {e}"),
            )),
        }
    }

    /// Applies one manifest.
    async fn apply_one(&self, desired: &Desired, mark: &str) -> Applied {
        let key = &desired.key;
        let gvk = desired.gvk();
        let (api, resource) = match self.api(key).await {
            Ok(Some(found)) => found,
            Ok(None) => {
                return Applied {
                    outcome: Outcome::Pending(not_served_message(&gvk)),
                    version: None,
                    failure: None,
                };
            }
            Err((kind, message)) => return Applied::failed(kind, message),
        };
        let plural = rbac_name(&resource);
        if let Err((kind, message)) = self.ensure_namespace(&key.namespace, mark).await {
            return Applied::failed(kind, message);
        }
        // Before taking an object not seen with this FederatedResource's marks: is it
        // someone else's?
        let seen_ours = self
            .view
            .object(key)
            .is_some_and(|o| delivered_by(o) == mark);
        let mut exists = seen_ours;
        if !seen_ours {
            match api.get_opt(&key.name).await {
                Ok(Some(existing)) => {
                    exists = true;
                    if delivered_by(&existing) != mark {
                        match claim(desired, &existing, mark, self.spec.adopt) {
                            Claim::Conflict(message) => {
                                debug!(placed = %self.placed, object = %key, "{message}");
                                return Applied {
                                    outcome: Outcome::Conflict {
                                        message,
                                        health: health(Some(&existing)),
                                    },
                                    version: None,
                                    failure: Some(ApplyErrorKind::Conflict),
                                };
                            }
                            Claim::Take { from } if from.is_empty() => {
                                info!(placed = %self.placed, object = %key, "adopting an existing object");
                            }
                            Claim::Take { from } => {
                                info!(placed = %self.placed, object = %key, from = %from, "taking the object over from a younger FederatedResource");
                            }
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    let (kind, message) = refusal(&e, "get", &plural);
                    return Applied::failed(kind, message);
                }
            }
        }
        let params = PatchParams::apply(DELIVERY_FIELD_MANAGER).force();
        let patch = Patch::Apply(&desired.object);
        let apply = || {
            api.patch(&key.name, &params, &patch)
                .instrument(accord_common::telemetry::step("server-side apply"))
        };
        let mut applied = apply().await;
        if matches!(&applied, Err(kube::Error::Api(status)) if status.code == 404)
            && !key.namespace.is_empty()
            && self.namespaces.forget(&key.namespace)
        {
            // The namespace was known to exist: deleted since? Ensured again, once.
            if let Err((kind, message)) = self.ensure_namespace(&key.namespace, mark).await {
                return Applied::failed(kind, message);
            }
            applied = apply().await;
        }
        match applied {
            Ok(applied) => {
                if key.kind == CRD_KIND {
                    self.await_established(&key.name).await;
                }
                debug!(placed = %self.placed, object = %key, "applied");
                Applied {
                    outcome: Outcome::Applied {
                        fields: accord_fields(&applied).cloned(),
                    },
                    version: applied.metadata.resource_version.clone(),
                    failure: None,
                }
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                // The type went away under the apply (its CRD was deleted)?
                self.discovery.forget(&gvk);
                match self.discovery.resolve(&self.client, &gvk).await {
                    Ok(Resolution::NotServed) => Applied {
                        outcome: Outcome::Pending(not_served_message(&gvk)),
                        version: None,
                        failure: None,
                    },
                    _ => Applied::failed(ApplyErrorKind::NotFound, status.message.clone()),
                }
            }
            Err(e) => {
                let verb = if exists { "patch" } else { "create" };
                let (kind, message) = refusal(&e, verb, &plural);
                warn!(placed = %self.placed, object = %key, error = %message, "apply refused");
                Applied::failed(kind, message)
            }
        }
    }

    /// Waits (a while) for CRD `name` to be established, so its kinds can be applied next.
    async fn await_established(&self, name: &str) {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let established = kube::runtime::wait::await_condition(
            api,
            name,
            kube::runtime::wait::conditions::is_crd_established(),
        );
        if tokio::time::timeout(CRD_ESTABLISHED_TIMEOUT, established)
            .await
            .is_err()
        {
            debug!(crd = name, "not established yet; its kinds wait");
        }
    }

    /// Creates namespace `name` with Accord's marks when it does not exist (nothing for a
    /// cluster-scoped object's empty namespace, or one already known to exist).
    async fn ensure_namespace(
        &self,
        name: &str,
        mark: &str,
    ) -> Result<(), (ApplyErrorKind, String)> {
        if name.is_empty() || self.namespaces.contains(name) {
            return Ok(());
        }
        let api: Api<Namespace> = Api::all(self.client.clone());
        match api.get_metadata_opt(name).await {
            Ok(Some(_)) => {
                self.namespaces.insert(name);
                return Ok(());
            }
            Ok(None) => {}
            Err(e) => return Err(refusal(&e, "get", "namespaces")),
        }
        let namespace = json!({
            "apiVersion": "v1",
            "kind": NAMESPACE_KIND,
            "metadata": {
                "name": name,
                "labels": { OWNED_BY_LABEL: DELIVERED_BY_FEDERATED_RESOURCE },
                "annotations": { FEDERATED_RESOURCE_ANNOTATION: mark },
            },
        });
        let params = PatchParams::apply(DELIVERY_FIELD_MANAGER).force();
        api.patch(name, &params, &Patch::Apply(&namespace))
            .await
            .map_err(|e| {
                let (kind, message) = refusal(&e, "create", "namespaces");
                (kind, format!("creating namespace {name}: {message}"))
            })?;
        info!(placed = %self.placed, namespace = name, "created namespace");
        self.namespaces.insert(name);
        Ok(())
    }

    /// Deletes (or orphans) object `key` if it carries this FederatedResource's annotation.
    async fn remove(
        &self,
        key: &ManifestKey,
        mark: &str,
        versions: &mut HashMap<ManifestKey, Option<String>>,
        failures: &mut Vec<Failure>,
    ) {
        let mut fail = |kind, message| {
            failures.push(Failure {
                key: key.clone(),
                kind,
                message,
            });
        };
        let (api, resource) = match self.api(key).await {
            Ok(Some(found)) => found,
            // Nothing of a type the member does not serve.
            Ok(None) => return,
            Err((kind, message)) => return fail(kind, message),
        };
        let plural = rbac_name(&resource);
        let object = match api.get_opt(&key.name).await {
            Ok(Some(object)) => object,
            Ok(None) => {
                versions.insert(key.clone(), None);
                return;
            }
            // Its type is no longer served (its CRD went first): nothing of it is left.
            Err(kube::Error::Api(s)) if s.code == 404 => {
                versions.insert(key.clone(), None);
                return;
            }
            Err(e) => {
                let (kind, message) = refusal(&e, "get", &plural);
                return fail(kind, message);
            }
        };
        if delivered_by(&object) != mark || object.metadata.deletion_timestamp.is_some() {
            return;
        }
        let result = if self.spec.orphan {
            let patch = unmark_patch();
            let params = PatchParams {
                field_manager: Some(DELIVERY_FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            };
            api.patch(&key.name, &params, &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| refusal(&e, "patch", &plural))
        } else {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: object.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::background()
            };
            match api.delete(&key.name, &params).await {
                Ok(_) => Ok(()),
                // Gone already, or replaced by another object of the same name.
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
                Err(e) => Err(refusal(&e, "delete", &plural)),
            }
        };
        match result {
            Ok(()) => {
                let verb = if self.spec.orphan {
                    "orphaned"
                } else {
                    "deleted"
                };
                info!(placed = %self.placed, object = %key, "{verb}");
                versions.insert(key.clone(), None);
            }
            Err((kind, message)) => fail(kind, message),
        }
    }

    /// Deletes the namespaces this FederatedResource's objects live in that Accord created for it
    /// (they carry its marks and are not manifests themselves) once nothing is left in
    /// them. Best effort: a namespace whose content cannot be listed stays.
    async fn remove_created_namespaces(&self, manifests: &[Prepared], mark: &str) {
        let declared: BTreeSet<&str> = manifests
            .iter()
            .filter_map(Prepared::valid)
            .filter(|d| d.key.kind == NAMESPACE_KIND)
            .map(|d| d.key.name.as_str())
            .collect();
        let used: BTreeSet<&str> = manifests
            .iter()
            .filter_map(Prepared::valid)
            .map(|d| d.key.namespace.as_str())
            .filter(|ns| !ns.is_empty() && !declared.contains(ns))
            .collect();
        if used.is_empty() {
            return;
        }
        let mut types: BTreeSet<Gvk> = NAMESPACE_CONTENT
            .iter()
            .map(|(v, k)| Gvk::new(v, k))
            .collect();
        types.extend(
            manifests
                .iter()
                .filter_map(Prepared::valid)
                .filter(|d| !d.key.namespace.is_empty())
                .map(Desired::gvk),
        );
        let api: Api<Namespace> = Api::all(self.client.clone());
        for name in used {
            let Ok(Some(namespace)) = api.get_metadata_opt(name).await else {
                continue;
            };
            let marked = namespace
                .labels()
                .get(OWNED_BY_LABEL)
                .is_some_and(|v| v == DELIVERED_BY_FEDERATED_RESOURCE)
                && namespace.annotations().get(FEDERATED_RESOURCE_ANNOTATION)
                    == Some(&mark.to_owned());
            if !marked || namespace.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if !self.is_empty(name, &types).await {
                debug!(
                    namespace = name,
                    "keeping the namespace Accord created: it is not empty"
                );
                continue;
            }
            match api.delete(name, &DeleteParams::background()).await {
                Ok(_) => {
                    self.namespaces.forget(name);
                    info!(placed = %self.placed, namespace = name, "deleted the namespace Accord created")
                }
                Err(e) => {
                    debug!(namespace = name, error = %e, "could not delete the namespace Accord created")
                }
            }
        }
    }

    /// Whether namespace `name` holds nothing of `types` but what the API server puts in
    /// every namespace, objects other objects own, and objects being deleted (false when
    /// that cannot be told).
    async fn is_empty(&self, name: &str, types: &BTreeSet<Gvk>) -> bool {
        for gvk in types {
            let resource = match self.discovery.resolve(&self.client, gvk).await {
                Ok(Resolution::Served {
                    resource,
                    namespaced: true,
                }) => resource,
                Ok(_) => continue,
                Err(_) => return false,
            };
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), name, &resource);
            let Ok(list) = api.list_metadata(&Default::default()).await else {
                return false;
            };
            let remaining = list.items.iter().any(|o| {
                let default = NAMESPACE_DEFAULTS
                    .iter()
                    .any(|(kind, n)| *kind == gvk.kind && o.metadata.name.as_deref() == Some(n));
                !default
                    && o.metadata.deletion_timestamp.is_none()
                    && o.metadata
                        .owner_references
                        .as_ref()
                        .is_none_or(Vec::is_empty)
            });
            if remaining {
                return false;
            }
        }
        true
    }
}

/// Removes (or orphans) what `job`'s FederatedResource delivered, retrying with backoff until done:
/// the FederatedResource left this cluster's assignments, so nothing else will ask again (the task
/// is aborted if it comes back).
pub async fn remove_in_background(job: ApplyJob) {
    let mut retry = backoff(Duration::from_secs(1), Duration::from_secs(60));
    let placed = job.placed.clone();
    loop {
        match job.clone().run().await {
            Ok(_) => {
                info!(%placed, "removed what the FederatedResource delivered: it left this cluster");
                return;
            }
            Err(e) => {
                let delay = retry.next_delay();
                warn!(%placed, error = %e, "removing what the FederatedResource delivered failed; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_that_cannot_be_asked_leaves_the_manifest_pending_not_in_error() {
        for kind in [ApplyErrorKind::Unavailable, ApplyErrorKind::Transient] {
            let a = Applied::failed(
                kind,
                "refused POST: this agent replica does not hold the agent Lease".into(),
            );
            assert!(matches!(a.outcome, Outcome::Pending(_)), "{kind:?}");
            assert_eq!(a.failure, Some(kind));
        }
        for kind in [ApplyErrorKind::Invalid, ApplyErrorKind::Forbidden] {
            let a = Applied::failed(kind, "refused".into());
            assert!(matches!(a.outcome, Outcome::Error(_)), "{kind:?}");
        }
    }
}
