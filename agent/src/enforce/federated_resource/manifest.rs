//! From an assignment's manifests to the objects the agent applies, without I/O: which
//! object each one is ([`ManifestKey`]), in which order they go, what is stripped, which
//! namespace they get, Accord's marks and the hash that tells a changed manifest.

use accord_common::distribution::{DeliveredSecret, FederatedResourceSpec, ManifestKey, PlacedRef};
use accord_crds::federated_resource::CLUSTER_SCOPED_KINDS;
use accord_crds::{
    DELIVERED_BY_FEDERATED_RESOURCE, FEDERATED_RESOURCE_ANNOTATION,
    FEDERATED_RESOURCE_CREATED_ANNOTATION, MANIFEST_HASH_ANNOTATION, OWNED_BY_LABEL,
};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Kind of CustomResourceDefinitions, applied first.
pub const CRD_KIND: &str = "CustomResourceDefinition";
/// Kind of Namespaces, applied right after CustomResourceDefinitions.
pub const NAMESPACE_KIND: &str = "Namespace";

/// Identifies a resource type by what manifests name: `apiVersion` and `kind`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvk {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// e.g. `Deployment`.
    pub kind: String,
}

impl Gvk {
    /// The type `api_version` `kind`.
    pub fn new(api_version: &str, kind: &str) -> Self {
        Self {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    /// The type of the object `key` names.
    pub fn of(key: &ManifestKey) -> Self {
        Self::new(&key.api_version, &key.kind)
    }

    /// The API group ("" for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    /// The version, e.g. `v1`.
    pub fn version(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or(self.api_version.as_str(), |(_, v)| v)
    }

    /// Whether the type is cluster-scoped in every cluster (a hint for when the member's
    /// API has not been asked).
    pub fn cluster_scoped_by_hint(&self) -> bool {
        CLUSTER_SCOPED_KINDS.contains(&self.kind.as_str())
    }
}

impl std::fmt::Display for Gvk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.api_version, self.kind)
    }
}

/// One manifest ready to apply.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    /// The object it is.
    pub key: ManifestKey,
    /// What is applied: the manifest stripped, with its namespace and Accord's marks.
    pub object: Value,
    /// SHA-256 (hex) of the manifest as applied, also in its [`MANIFEST_HASH_ANNOTATION`].
    pub hash: String,
}

impl Desired {
    /// Its type.
    pub fn gvk(&self) -> Gvk {
        Gvk::of(&self.key)
    }
}

/// A manifest that names no object the agent can apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    /// As much of the object as it names.
    pub key: ManifestKey,
    /// Why it cannot be applied.
    pub message: String,
}

/// One manifest of an assignment, prepared.
#[derive(Clone, Debug, PartialEq)]
pub enum Prepared {
    /// Ready to apply.
    Valid(Desired),
    /// Not applicable as it is.
    Invalid(Invalid),
}

impl Prepared {
    /// The object it names.
    pub fn key(&self) -> &ManifestKey {
        match self {
            Self::Valid(d) => &d.key,
            Self::Invalid(i) => &i.key,
        }
    }

    /// The manifest ready to apply, if it is valid.
    pub fn valid(&self) -> Option<&Desired> {
        match self {
            Self::Valid(d) => Some(d),
            Self::Invalid(_) => None,
        }
    }
}

/// The value of [`FEDERATED_RESOURCE_ANNOTATION`] on what `placed` delivers:
/// `<hub namespace>/<name>`.
pub fn placed_mark(placed: &PlacedRef) -> String {
    format!("{}/{}", placed.namespace, placed.name)
}

/// Where a manifest goes in the apply order: CustomResourceDefinitions, then Namespaces,
/// then everything else as given.
fn rank(kind: &str) -> u8 {
    match kind {
        CRD_KIND => 0,
        NAMESPACE_KIND => 1,
        _ => 2,
    }
}

/// The type a manifest names, if it names one.
pub fn gvk_of(manifest: &Value) -> Option<Gvk> {
    let api_version = manifest.get("apiVersion")?.as_str()?;
    let kind = manifest.get("kind")?.as_str()?;
    (!api_version.is_empty() && !kind.is_empty()).then(|| Gvk::new(api_version, kind))
}

/// Every manifest of `spec` prepared for `placed`, in apply order; `namespaced` says
/// whether a type is namespaced (the member's discovery, or a hint before it answered).
pub fn prepare_all(
    spec: &FederatedResourceSpec,
    placed: &PlacedRef,
    namespaced: impl Fn(&Gvk) -> bool,
) -> Vec<Prepared> {
    // Delivered Secrets go before the other namespaced objects, which may refer to them.
    let secrets = spec.secrets.iter().map(|secret| {
        if secret.has_data() {
            prepare(
                usize::MAX,
                &secret_manifest(secret),
                &spec.namespace,
                placed,
                &spec.created,
                true,
            )
        } else {
            Prepared::Invalid(Invalid {
                key: ManifestKey {
                    api_version: "v1".into(),
                    kind: "Secret".into(),
                    namespace: spec.namespace.clone(),
                    name: secret.name.clone(),
                },
                message: "waiting for the Secret's data from the hub (it is never saved; \
                          the hub sends it on the stream)"
                    .into(),
            })
        }
    });
    let mut prepared: Vec<Prepared> = secrets
        .chain(spec.manifests.iter().enumerate().map(|(index, manifest)| {
            let scope = gvk_of(manifest).map(|gvk| namespaced(&gvk));
            prepare(
                index,
                manifest,
                &spec.namespace,
                placed,
                &spec.created,
                scope.unwrap_or(true),
            )
        }))
        .collect();
    // Stable: within a rank the hub's order stands.
    prepared.sort_by_key(|p| rank(&p.key().kind));
    prepared
}

/// A delivered Secret as the object to apply.
fn secret_manifest(secret: &DeliveredSecret) -> Value {
    let object = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(secret.name.clone()),
            ..Default::default()
        },
        type_: Some(secret.type_.clone()).filter(|t| !t.is_empty()),
        data: Some(
            secret
                .data
                .iter()
                .map(|(k, v)| (k.clone(), k8s_openapi::ByteString(v.clone())))
                .collect(),
        ),
        ..Default::default()
    };
    let mut value = serde_json::to_value(object).unwrap_or_default();
    if let Some(o) = value.as_object_mut() {
        o.insert("apiVersion".into(), "v1".into());
        o.insert("kind".into(), "Secret".into());
    }
    value
}

/// Prepares manifest number `index`: strips what the server owns, sets its namespace
/// (`default_namespace` when a namespaced manifest names none; none for a cluster-scoped
/// one), adds Accord's marks for `placed` (created at `created`, RFC 3339, when known) and
/// the hash.
pub fn prepare(
    index: usize,
    manifest: &Value,
    default_namespace: &str,
    placed: &PlacedRef,
    created: &str,
    namespaced: bool,
) -> Prepared {
    let invalid = |key: ManifestKey, message: String| Prepared::Invalid(Invalid { key, message });
    let text = |v: &Value, pointer: &str| {
        v.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let Value::Object(_) = manifest else {
        let what = match manifest {
            Value::String(s) => format!("is not JSON: {}", truncate(s, 80)),
            other => format!("is not an object but {}", json_type(other)),
        };
        return invalid(
            ManifestKey {
                name: format!("#{index}"),
                ..ManifestKey::default()
            },
            format!("manifest #{index} {what}"),
        );
    };
    let mut key = ManifestKey {
        api_version: text(manifest, "/apiVersion"),
        kind: text(manifest, "/kind"),
        namespace: String::new(),
        name: text(manifest, "/metadata/name"),
    };
    let missing: Vec<&str> = [
        ("apiVersion", key.api_version.is_empty()),
        ("kind", key.kind.is_empty()),
        ("metadata.name", key.name.is_empty()),
    ]
    .into_iter()
    .filter_map(|(field, absent)| absent.then_some(field))
    .collect();
    if !missing.is_empty() {
        if key.name.is_empty() {
            key.name = format!("#{index}");
        }
        return invalid(
            key,
            format!("manifest #{index} lacks {}", missing.join(" and ")),
        );
    }
    let mut object = manifest.clone();
    strip(&mut object);
    let metadata = object
        .as_object_mut()
        .and_then(|o| {
            o.entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
        })
        .expect("metadata.name was read from an object");
    if namespaced {
        let namespace = metadata
            .get("namespace")
            .and_then(Value::as_str)
            .filter(|ns| !ns.is_empty())
            .unwrap_or(default_namespace)
            .to_owned();
        metadata.insert("namespace".into(), Value::String(namespace.clone()));
        key.namespace = namespace;
    } else {
        metadata.remove("namespace");
    }
    insert_str(
        metadata,
        "labels",
        OWNED_BY_LABEL,
        DELIVERED_BY_FEDERATED_RESOURCE,
    );
    insert_str(
        metadata,
        "annotations",
        FEDERATED_RESOURCE_ANNOTATION,
        &placed_mark(placed),
    );
    // A manifest may not forge the marks only Accord sets.
    if let Some(annotations) = metadata
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove(MANIFEST_HASH_ANNOTATION);
        annotations.remove(FEDERATED_RESOURCE_CREATED_ANNOTATION);
    }
    if !created.is_empty() {
        insert_str(
            metadata,
            "annotations",
            FEDERATED_RESOURCE_CREATED_ANNOTATION,
            created,
        );
    }
    let hash = hash(&object);
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        insert_str(metadata, "annotations", MANIFEST_HASH_ANNOTATION, &hash);
    }
    Prepared::Valid(Desired { key, object, hash })
}

/// Every label the delivery stamps on an object.
pub const MARK_LABELS: &[&str] = &[OWNED_BY_LABEL];
/// Every annotation the delivery stamps on an object.
pub const MARK_ANNOTATIONS: &[&str] = &[
    FEDERATED_RESOURCE_ANNOTATION,
    FEDERATED_RESOURCE_CREATED_ANNOTATION,
    MANIFEST_HASH_ANNOTATION,
];

/// The merge patch that takes every mark of the delivery off an object (orphaning it): it
/// is left as if Accord had never delivered it.
pub fn unmark_patch() -> Value {
    let nulls = |keys: &[&str]| -> serde_json::Map<String, Value> {
        keys.iter()
            .map(|k| ((*k).to_owned(), Value::Null))
            .collect()
    };
    serde_json::json!({
        "metadata": {
            "labels": nulls(MARK_LABELS),
            "annotations": nulls(MARK_ANNOTATIONS),
        }
    })
}

/// Drops what the API server owns and a manifest must not carry.
fn strip(object: &mut Value) {
    if let Some(o) = object.as_object_mut() {
        o.remove("status");
    }
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "resourceVersion",
            "uid",
            "managedFields",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            metadata.remove(field);
        }
    }
}

/// Sets `metadata[map][key] = value`, creating the map if needed (a `null` map, too).
fn insert_str(metadata: &mut Map<String, Value>, map: &str, key: &str, value: &str) {
    let entry = metadata
        .entry(map)
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    if let Some(m) = entry.as_object_mut() {
        m.insert(key.to_owned(), Value::String(value.to_owned()));
    }
}

/// SHA-256 (hex) of the JSON text of `object` (serde_json writes object keys sorted, so
/// equal objects hash equal).
pub fn hash(object: &Value) -> String {
    hex::encode(Sha256::digest(object.to_string().as_bytes()))
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::distribution::PlacedKind;
    use serde_json::json;

    fn placed() -> PlacedRef {
        PlacedRef::new(PlacedKind::FederatedResource, "team", "bundle")
    }

    fn spec(manifests: Vec<Value>) -> FederatedResourceSpec {
        FederatedResourceSpec {
            manifests,
            namespace: "team".into(),
            ..FederatedResourceSpec::default()
        }
    }

    fn hinted(gvk: &Gvk) -> bool {
        !gvk.cluster_scoped_by_hint()
    }

    #[test]
    fn crds_and_namespaces_go_first_and_the_rest_keep_the_hubs_order() {
        let manifests = vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "b"}}),
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "metadata": {"name": "dbs.example.com"}}),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "c"}}),
        ];
        let order: Vec<String> = prepare_all(&spec(manifests), &placed(), hinted)
            .iter()
            .map(|p| p.key().name.clone())
            .collect();
        assert_eq!(order, ["dbs.example.com", "ns", "a", "b", "c"]);
    }

    #[test]
    fn a_namespaced_manifest_without_a_namespace_gets_the_federated_resources_and_a_cluster_scoped_one_none()
     {
        let manifests = vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "other"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "r", "namespace": "team"}}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
        ];
        // The member says Widgets are cluster-scoped, which no hint knows.
        let namespaced = |gvk: &Gvk| gvk.kind != "Widget" && hinted(gvk);
        let prepared = prepare_all(&spec(manifests), &placed(), namespaced);
        let namespaces: Vec<(&str, Option<&Value>)> = prepared
            .iter()
            .map(|p| {
                let d = p.valid().unwrap();
                (
                    d.key.namespace.as_str(),
                    d.object.pointer("/metadata/namespace"),
                )
            })
            .collect();
        assert_eq!(
            namespaces,
            [
                ("team", Some(&json!("team"))),
                ("other", Some(&json!("other"))),
                ("", None),
                ("", None)
            ]
        );
    }

    #[test]
    fn orphaning_takes_off_every_mark_the_delivery_stamps() {
        let manifest = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"app": "a"}, "annotations": {"note": "kept"}},
        });
        let Prepared::Valid(d) = prepare(
            0,
            &manifest,
            "team",
            &placed(),
            "2026-01-02T03:04:05Z",
            true,
        ) else {
            panic!("valid");
        };
        let mut object = d.object.clone();
        json_patch::merge(&mut object, &unmark_patch());
        let accords = |field: &str| -> Vec<String> {
            object["metadata"][field]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .filter(|k| k.starts_with("accord.io/"))
                .collect()
        };
        assert!(accords("labels").is_empty(), "{object}");
        assert!(accords("annotations").is_empty(), "{object}");
        assert_eq!(object["metadata"]["labels"], json!({"app": "a"}));
        assert_eq!(object["metadata"]["annotations"], json!({"note": "kept"}));
        // Every mark prepare stamps is one unmark_patch removes.
        let stamped = |field: &str| d.object["metadata"][field].as_object().unwrap().len();
        assert_eq!(stamped("labels"), 1 + MARK_LABELS.len());
        assert_eq!(stamped("annotations"), 1 + MARK_ANNOTATIONS.len());
    }

    #[test]
    fn server_owned_fields_are_stripped_and_accords_marks_added() {
        let manifest = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "resourceVersion": "7", "uid": "u",
                         "creationTimestamp": "2024-01-01T00:00:00Z",
                         "managedFields": [{"manager": "x"}],
                         "labels": {"app": "web"},
                         "annotations": {MANIFEST_HASH_ANNOTATION: "forged",
                                         FEDERATED_RESOURCE_CREATED_ANNOTATION: "1970-01-01T00:00:00Z"}},
            "spec": {"replicas": 2},
            "status": {"readyReplicas": 2}
        });
        let created = "2026-01-02T03:04:05Z";
        let Prepared::Valid(d) = prepare(0, &manifest, "team", &placed(), created, true) else {
            panic!("valid");
        };
        assert_eq!(
            d.object,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "team",
                             "labels": {"app": "web", OWNED_BY_LABEL: DELIVERED_BY_FEDERATED_RESOURCE},
                             "annotations": {FEDERATED_RESOURCE_ANNOTATION: "team/bundle",
                                             FEDERATED_RESOURCE_CREATED_ANNOTATION: created,
                                             MANIFEST_HASH_ANNOTATION: d.hash.clone()}},
                "spec": {"replicas": 2}
            })
        );
        assert_eq!(d.hash.len(), 64);
    }

    #[test]
    fn the_hash_follows_the_manifest_and_ignores_what_is_stripped() {
        let a = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "1"}});
        let mut same = a.clone();
        same["metadata"]["resourceVersion"] = json!("9");
        same["status"] = json!({"x": 1});
        let mut changed = a.clone();
        changed["data"]["k"] = json!("2");
        let h = |m: &Value| {
            prepare(0, m, "team", &placed(), "", true)
                .valid()
                .unwrap()
                .hash
                .clone()
        };
        assert_eq!(h(&a), h(&same));
        assert_ne!(h(&a), h(&changed));
        // Another FederatedResource's marks make another object to apply.
        let other = PlacedRef::new(PlacedKind::FederatedResource, "team", "other");
        let h_other = prepare(0, &a, "team", &other, "", true)
            .valid()
            .unwrap()
            .hash
            .clone();
        assert_ne!(h(&a), h_other);
    }

    #[test]
    fn a_manifest_that_names_no_object_is_invalid_with_a_reason() {
        let cases = [
            (json!("{not json"), "manifest #0 is not JSON: {not json"),
            (json!([1]), "manifest #0 is not an object but an array"),
            (
                json!({"kind": "ConfigMap", "metadata": {"name": "a"}}),
                "manifest #0 lacks apiVersion",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap"}),
                "manifest #0 lacks metadata.name",
            ),
        ];
        for (manifest, message) in cases {
            match prepare(0, &manifest, "team", &placed(), "", true) {
                Prepared::Invalid(i) => assert_eq!(i.message, message),
                Prepared::Valid(d) => panic!("{d:?}"),
            }
        }
    }

    #[test]
    fn a_type_reads_its_group_and_version() {
        let apps = Gvk::new("apps/v1", "Deployment");
        assert_eq!((apps.group(), apps.version()), ("apps", "v1"));
        let core = Gvk::new("v1", "ConfigMap");
        assert_eq!((core.group(), core.version()), ("", "v1"));
        assert!(Gvk::new("v1", "Namespace").cluster_scoped_by_hint());
        assert!(!core.cluster_scoped_by_hint());
    }
}
