//! `FederatedResource`: any Kubernetes objects delivered to selected member clusters with
//! server-side apply, per-cluster overrides, drift repair and status read back.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use schemars::{Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::validate::{Validate, ValidationErrors, check_cluster_selection};
use crate::{bounds, messages};

/// Most manifests one FederatedResource delivers.
pub const MAX_MANIFESTS: usize = 100;
/// Largest `spec` (its JSON), well under etcd's 1.5 MiB request limit.
pub const MAX_SPEC_BYTES: usize = 512 * 1024;

/// Kinds that are cluster-scoped in every Kubernetes cluster: a manifest of one of these
/// names no namespace and gets none. Any other kind is namespaced unless the member's API
/// says otherwise (the agent asks it).
pub const CLUSTER_SCOPED_KINDS: &[&str] = &[
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "StorageClass",
    "PriorityClass",
    "PersistentVolume",
    "IngressClass",
    "RuntimeClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "APIService",
];

/// Delivers Kubernetes objects to selected member clusters: each agent applies the
/// manifests (after its cluster's overrides) with server-side apply, field manager
/// `accord`, owning exactly the fields they name; an owned field changed out of band is
/// restored. CustomResourceDefinitions and Namespaces go first.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "accord.io",
    version = "v1beta1",
    kind = "FederatedResource",
    namespaced,
    shortname = "fres",
    category = "accord",
    status = "FederatedResourceStatus",
    doc = "Kubernetes objects delivered to selected member clusters with per-cluster overrides, drift repair and status feedback.",
    printcolumn(name = "Clusters", type_ = "integer", json_path = ".status.clusters"),
    printcolumn(
        name = "Applied",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Applied")].status"#
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Available")].status"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FederatedResourceSpec {
    /// The objects to deliver, 1 to 100, each a whole Kubernetes object (`apiVersion`,
    /// `kind`, `metadata.name`; `metadata.namespace` defaults to this object's namespace for
    /// namespaced kinds). Applied in dependency order: CustomResourceDefinitions and
    /// Namespaces first. Secrets are not accepted (their data would rest in the hub's etcd
    /// in the clear; use secretRefs), nor are two manifests for the same object.
    #[schemars(schema_with = "manifests_schema")]
    #[x_kube(
        validation = Rule::new("self.all(m, m.kind != 'Secret')").message(messages::SECRET_MANIFEST),
        validation = Rule::new("self.all(m, has(m.metadata) && has(m.metadata.name) && size(m.metadata.name) > 0)").message(messages::MANIFEST_NAME)
    )]
    pub manifests: Vec<serde_json::Value>,
    /// Secrets of this namespace on the management cluster, delivered as Secrets of the
    /// same name (and type) to this object's namespace in each selected member. Their data
    /// never rests in the hub's etcd: the placement record holds a hash of it, and the data
    /// travels only on the agents' mTLS streams. A changed Secret is delivered again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub secret_refs: Vec<SecretRef>,
    /// The member clusters it goes to: `clusters` (by name) or `clusterSelector` (by
    /// ManagedCluster labels, re-resolved when labels change).
    pub placement: crate::ClusterPlacement,
    /// How a change reaches the clusters: every cluster at once (unset, `All`) or step by
    /// step with health checks and automatic rollback (`Progressive`,
    /// `ProgressivePerGroup`). Changing only this field is not a new revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::Rollout>,
    /// Per-cluster changes: each applies its RFC 6902 JSON patch to the manifests it
    /// targets (every manifest unless `target` says which) in the clusters it selects, in
    /// order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub overrides: Vec<Override>,
    /// What to do when an object to deliver already exists in a member and Accord did not
    /// create it: `Abort` (default) leaves it untouched and reports `Conflict`; `Adopt`
    /// takes it over. An object another FederatedResource delivers is never adopted: of
    /// two delivering one object to a cluster, the older keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict_resolution: Option<ConflictResolution>,
    /// What leaving (the object deleted, a manifest removed, a cluster no longer selected)
    /// does to the delivered objects: `Delete` (default) removes them; `Orphan` leaves them
    /// running without Accord's marks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<ResourceDeletionPolicy>,
    /// Values read back from delivered objects into each placement's `feedback`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub feedback: Vec<Feedback>,
}

/// The schema of `spec.manifests`: 1 to 100 embedded Kubernetes objects.
fn manifests_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_MANIFESTS,
        "items": {
            "type": "object",
            "x-kubernetes-embedded-resource": true,
            "x-kubernetes-preserve-unknown-fields": true
        }
    })
}

/// A Secret of the FederatedResource's namespace on the management cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SecretRef {
    /// Its name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// How an existing object Accord did not create is treated (one another FederatedResource
/// delivers is never adopted: the older of the two keeps it).
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum ConflictResolution {
    /// Leave it untouched; its placement reports `Conflict`.
    #[default]
    Abort,
    /// Take it over: Accord applies its fields and marks it as its own.
    Adopt,
}

/// What leaving does to delivered objects.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum ResourceDeletionPolicy {
    /// Remove what Accord created.
    #[default]
    Delete,
    /// Leave it running; drop Accord's labels and annotations.
    Orphan,
}

/// One per-cluster override.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("has(self.clusters) != has(self.clusterSelector)").message(messages::CLUSTERS_XOR_SELECTOR))]
#[serde(rename_all = "camelCase")]
pub struct Override {
    /// The clusters it applies to, by name. Set this or clusterSelector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(max = 63)))]
    pub clusters: Option<Vec<String>>,
    /// The clusters it applies to, by ManagedCluster labels. Set this or clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// The manifests it changes (default: every manifest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<OverrideTarget>,
    /// RFC 6902 operations applied to each targeted manifest, in order.
    #[schemars(length(min = 1, max = 100))]
    pub json_patch: Vec<PatchOperation>,
}

/// Which manifests an override changes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OverrideTarget {
    /// Kind of the manifests.
    #[schemars(length(min = 1, max = 253))]
    pub kind: String,
    /// Name of the manifest (default: every manifest of the kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub name: Option<String>,
}

/// One RFC 6902 operation.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
// `value` may be anything, so CEL cannot see it: the hub's admission webhook checks that
// one (`Validate`; the controller reports `InvalidSpec` for what got in without it).
#[x_kube(
    validation = Rule::new("!(self.op in ['move', 'copy']) || has(self.from)").message(messages::PATCH_FROM)
)]
#[serde(rename_all = "camelCase")]
pub struct PatchOperation {
    /// `add`, `remove`, `replace`, `move`, `copy` or `test`.
    pub op: PatchOp,
    /// JSON pointer into the manifest, e.g. `/spec/template/spec/containers/0/image`.
    #[schemars(length(max = 1024))]
    #[x_kube(validation = Rule::new("self == '' || self.startsWith('/')").message(messages::JSON_POINTER))]
    pub path: String,
    /// The value (`add`, `replace`, `test`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub value: Option<serde_json::Value>,
    /// The source pointer (`move`, `copy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub from: Option<String>,
}

fn any_value(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// An RFC 6902 operation name.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum PatchOp {
    /// Add a value.
    Add,
    /// Remove a value.
    Remove,
    /// Replace a value.
    Replace,
    /// Move a value.
    Move,
    /// Copy a value.
    Copy,
    /// Fail unless the value equals.
    Test,
}

/// A value read back from one delivered object.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Feedback {
    /// Kind of the delivered object.
    #[schemars(length(min = 1, max = 253))]
    pub kind: String,
    /// Its name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// JSONPath into it, e.g. `.status.readyReplicas`.
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = Rule::new("self.startsWith('.') || self.startsWith('$')").message(messages::FEEDBACK_PATH))]
    pub json_path: String,
    /// The value's name in status.
    #[serde(rename = "as")]
    #[schemars(length(min = 1, max = 63))]
    pub as_: String,
}

/// Observed state of a FederatedResource.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FederatedResourceStatus {
    /// Generation of the spec this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_GENERATION))]
    pub observed_generation: Option<i64>,
    /// Clusters selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub clusters: Option<i32>,
    /// The delivery in each selected cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<ResourcePlacement>,
    /// Every placement counted by state, when there are more than the hub lists in full
    /// (`--status-placements-threshold`, default 100): `placements` then shows only those
    /// not `Synced`, up to `--status-placements-listed`; `accord-hub placements` shows all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<crate::PlacementSummary>,
    /// How many clusters were considered, where the object is placed and why the others
    /// are not: counts by reason, at most 20 clusters named per reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<crate::SelectionSummary>,
    /// Trace id (32 hex) of the latest change's trace: its decision, its record write and
    /// every member's apply, when the hub exports traces (`--otlp-endpoint`). Look it up in
    /// the trace backend; absent when the latest change was not traced.
    #[serde(default, rename = "traceID", skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The rollout of the latest revision, with `spec.rollout` progressive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::RolloutStatus>,
    /// `Applied`, `Available`, `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "bounds::conditions")]
    pub conditions: Vec<Condition>,
}

/// The delivery in one cluster, as its agent last reported it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourcePlacement {
    /// Member cluster.
    pub cluster: String,
    /// Synced when every manifest is applied; Pending, Conflict, Unavailable or Error
    /// otherwise.
    pub state: crate::PlacementState,
    /// Manifests applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub applied: Option<i32>,
    /// Manifests healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub available: Option<i32>,
    /// Each manifest's state, when not every one is applied and healthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<ManifestStatus>,
    /// Indexes of the overrides (in `spec.overrides`) that apply to this cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(range(min = 0, max = 99)))]
    pub overrides: Vec<i32>,
    /// Feedback values by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub feedback: BTreeMap<String, String>,
    /// Owned fields changed out of band and restored (since the agent started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_GENERATION))]
    pub drift_repairs: Option<i64>,
    /// When the last drift was repaired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drift_time: Option<Time>,
    /// Detail for the state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The revision the cluster runs, while `spec.rollout` is progressive: the one
    /// `status.rollout.revision` names once the rollout reached the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub revision: Option<String>,
}

/// One delivered object in one cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ManifestStatus {
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace (none for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Pending, Synced, Conflict or Error.
    pub state: crate::PlacementState,
    /// Healthy, Progressing or Missing.
    pub health: String,
    /// Detail for the state (the member API server's words on an error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl FederatedResourceSpec {
    /// `spec.conflictResolution`, defaulted.
    pub fn conflict_resolution(&self) -> ConflictResolution {
        self.conflict_resolution.unwrap_or_default()
    }

    /// `spec.deletionPolicy`, defaulted.
    pub fn deletion_policy(&self) -> ResourceDeletionPolicy {
        self.deletion_policy.unwrap_or_default()
    }
}

/// The identity of a manifest: (kind, namespace as written, name), or why it has none.
pub fn manifest_identity(m: &serde_json::Value) -> Option<(&str, &str, &str)> {
    let kind = m.get("kind")?.as_str()?;
    let meta = m.get("metadata")?;
    let name = meta.get("name")?.as_str().filter(|n| !n.is_empty())?;
    let namespace = meta
        .get("namespace")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("");
    Some((kind, namespace, name))
}

impl Validate for FederatedResourceSpec {
    fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errs = ValidationErrors::default();
        check_cluster_selection(&mut errs, &self.placement);
        crate::rollout::check_rollout(&mut errs, self.rollout.as_ref());
        errs.check(
            !self.manifests.is_empty(),
            "spec.manifests",
            messages::MANIFESTS_COUNT,
        );
        errs.check(
            self.manifests.len() <= MAX_MANIFESTS,
            "spec.manifests",
            messages::MANIFESTS_COUNT,
        );
        let mut seen = BTreeSet::new();
        for (i, m) in self.manifests.iter().enumerate() {
            let field = format!("spec.manifests[{i}]");
            let api_version = m.get("apiVersion").and_then(serde_json::Value::as_str);
            errs.check(
                api_version.is_some_and(|v| !v.is_empty()),
                format!("{field}.apiVersion"),
                messages::MANIFEST_TYPE,
            );
            match manifest_identity(m) {
                None => errs.check(
                    false,
                    format!("{field}.metadata.name"),
                    messages::MANIFEST_NAME,
                ),
                Some((kind, namespace, name)) => {
                    errs.check(
                        kind != "Secret",
                        format!("{field}.kind"),
                        messages::SECRET_MANIFEST,
                    );
                    errs.check(
                        seen.insert((kind, namespace, name)),
                        field,
                        messages::MANIFEST_DUPLICATE,
                    );
                }
            }
        }
        let mut names = BTreeSet::new();
        for (i, r) in self.secret_refs.iter().enumerate() {
            let field = format!("spec.secretRefs[{i}]");
            errs.check(
                !r.name.is_empty(),
                format!("{field}.name"),
                messages::SECRET_REF_NAME,
            );
            errs.check(
                names.insert(r.name.as_str()),
                field,
                messages::SECRET_REF_DUPLICATE,
            );
        }
        for (i, o) in self.overrides.iter().enumerate() {
            let field = format!("spec.overrides[{i}]");
            errs.check(
                o.clusters.is_some() != o.cluster_selector.is_some(),
                field.clone(),
                messages::CLUSTERS_XOR_SELECTOR,
            );
            errs.check(
                !o.json_patch.is_empty(),
                format!("{field}.jsonPatch"),
                messages::PATCH_EMPTY,
            );
            for (j, p) in o.json_patch.iter().enumerate() {
                let field = format!("{field}.jsonPatch[{j}]");
                errs.check(
                    p.path.is_empty() || p.path.starts_with('/'),
                    format!("{field}.path"),
                    messages::JSON_POINTER,
                );
                errs.check(
                    !matches!(p.op, PatchOp::Add | PatchOp::Replace | PatchOp::Test)
                        || p.value.is_some(),
                    field.clone(),
                    messages::PATCH_VALUE,
                );
                errs.check(
                    !matches!(p.op, PatchOp::Move | PatchOp::Copy) || p.from.is_some(),
                    field,
                    messages::PATCH_FROM,
                );
            }
        }
        for (i, f) in self.feedback.iter().enumerate() {
            errs.check(
                f.json_path.starts_with('.') || f.json_path.starts_with('$'),
                format!("spec.feedback[{i}].jsonPath"),
                messages::FEEDBACK_PATH,
            );
        }
        let size = serde_json::to_vec(self).map_or(usize::MAX, |b| b.len());
        errs.check(size <= MAX_SPEC_BYTES, "spec", messages::SPEC_TOO_LARGE);
        errs.into_result()
    }
}

crate::placed_status! {
    FederatedResource => FederatedResourceStatus, ResourcePlacement;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> FederatedResourceSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    const CM: &str = "{apiVersion: v1, kind: ConfigMap, metadata: {name: c}, data: {k: v}}";

    #[test]
    fn a_bundle_with_an_override_is_valid_and_defaults_to_abort_and_delete() {
        let s = spec(&format!(
            "placement: {{clusters: [east]}}\nmanifests: [{CM}]\noverrides:\n- clusters: [east]\n  \
             target: {{kind: ConfigMap}}\n  jsonPatch: [{{op: replace, path: /data/k, value: w}}]\n"
        ));
        s.validate().unwrap();
        assert_eq!(s.conflict_resolution(), ConflictResolution::Abort);
        assert_eq!(s.deletion_policy(), ResourceDeletionPolicy::Delete);
    }

    #[test]
    fn every_bad_manifest_is_named_with_its_rule() {
        let s = spec(&format!(
            "placement: {{clusters: [east]}}\nmanifests:\n- {CM}\n- {CM}\n\
             - {{apiVersion: v1, kind: Secret, metadata: {{name: s}}}}\n\
             - {{apiVersion: v1, kind: ConfigMap, metadata: {{}}}}\n\
             - {{kind: ConfigMap, metadata: {{name: x}}}}\n"
        ));
        let errs = s.validate().unwrap_err();
        let fields: Vec<(&str, &str)> = errs
            .0
            .iter()
            .map(|e| (e.field.as_str(), e.message))
            .collect();
        assert_eq!(
            fields,
            vec![
                ("spec.manifests[1]", messages::MANIFEST_DUPLICATE),
                ("spec.manifests[2].kind", messages::SECRET_MANIFEST),
                ("spec.manifests[3].metadata.name", messages::MANIFEST_NAME),
                ("spec.manifests[4].apiVersion", messages::MANIFEST_TYPE),
            ]
        );
        assert!(messages::SECRET_MANIFEST.contains("secretRefs"));
    }

    #[test]
    fn the_same_name_in_two_namespaces_or_kinds_is_not_a_duplicate() {
        let s = spec(
            "placement: {clusterSelector: {}}\nmanifests:\n\
             - {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: a}}\n\
             - {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: b}}\n\
             - {apiVersion: v1, kind: Service, metadata: {name: c, namespace: a}}\n",
        );
        s.validate().unwrap();
    }

    #[test]
    fn overrides_need_a_selection_and_well_formed_operations() {
        let s = spec(&format!(
            "placement: {{clusters: [east]}}\nmanifests: [{CM}]\noverrides:\n\
             - jsonPatch: [{{op: replace, path: data/k}}]\n\
             - clusters: [a]\n  jsonPatch: [{{op: copy, path: /x}}]\n"
        ));
        let errs = s.validate().unwrap_err();
        assert_eq!(
            errs.messages(),
            vec![
                messages::CLUSTERS_XOR_SELECTOR,
                messages::JSON_POINTER,
                messages::PATCH_VALUE,
                messages::PATCH_FROM,
            ]
        );
    }

    #[test]
    fn secret_refs_need_a_name_each_once() {
        let s = spec(&format!(
            "placement: {{clusters: [east]}}\nmanifests: [{CM}]\nsecretRefs: [{{name: db}}, {{name: db}}, {{name: ''}}]\n"
        ));
        assert_eq!(
            s.validate().unwrap_err().messages(),
            vec![messages::SECRET_REF_DUPLICATE, messages::SECRET_REF_NAME]
        );
    }

    #[test]
    fn a_spec_over_512_kib_is_refused() {
        let big = "x".repeat(MAX_SPEC_BYTES);
        let s = spec(&format!(
            "placement: {{clusters: [east]}}\nmanifests: [{{apiVersion: v1, kind: ConfigMap, metadata: {{name: c}}, data: {{k: {big}}}}}]\n"
        ));
        assert_eq!(
            s.validate().unwrap_err().messages(),
            vec![messages::SPEC_TOO_LARGE]
        );
    }
}
