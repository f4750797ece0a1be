//! Conversion of Accord objects between `accord.io/v1alpha1` (still served, deprecated) and
//! `accord.io/v1beta1` (the storage version), for the hub's conversion webhook.
//!
//! The conversion works on JSON ([`serde_json::Value`]), never on the Rust types: the hub
//! has no v1alpha1 types, and a field this code does not know (one added by a later
//! version, or a status field) must pass through untouched rather than be dropped by a
//! decode/encode cycle.
//!
//! # What differs between the versions (the complete list)
//!
//! 1. `apiVersion`: `accord.io/v1alpha1` ↔ `accord.io/v1beta1`, for every kind.
//! 2. FederatedKafkaTopic, PrometheusFederation, FederatedResource, FederatedKafkaUser:
//!    `spec.clusters` ↔ `spec.placement.clusters` and `spec.clusterSelector` ↔
//!    `spec.placement.clusterSelector`. A FederatedResource's `spec.overrides[].clusters`
//!    and `spec.overrides[].clusterSelector` are an override's own filter and do not move.
//! 3. FederatedKafkaUser: `spec.username` ↔ `spec.userName` (named like a
//!    FederatedKafkaTopic's `topicName`).
//! 4. CrossClusterScalePolicy: v1beta1 has an optional `spec.placement` and
//!    `spec.weighting`, which v1alpha1 cannot hold.
//! 5. ManagedCluster, KafkaTopicPolicy: the apiVersion only.
//!
//! `status` is the same in both versions.
//!
//! # Lossless round trips
//!
//! The API server may read a v1beta1 object through v1alpha1 and write it back, so nothing
//! may be lost on the way. Down (to v1alpha1), what v1alpha1 cannot hold is kept as JSON in
//! annotation [`LOSSLESS_ANNOTATION`], shaped like the object (`{"spec":{"placement":…}}`):
//! a CrossClusterScalePolicy's whole `spec.placement` and its `spec.weighting`, and of the four placement kinds' every
//! key of `spec.placement` other than `clusters`/`clusterSelector` (the whole value when it is
//! not an object). Up (to v1beta1) the fields move back, the annotation is removed, and each
//! field it holds that is absent after the move is restored: fields present in the object win,
//! so an edit made through v1alpha1 is kept.
//!
//! Object → other version → back is the same JSON for every object the API server can hold
//! in that version. Three rules make it exact rather than nearly so:
//!
//! - A field moves only when it is present and its target is absent; otherwise both stay
//!   where they are (a v1alpha1 object carrying an unknown `spec.placement` keeps it, and
//!   `clusters` joins it only where it has none). Objects from server-side apply may hold any
//!   subset of fields; an object without `spec` converts fine.
//! - The annotation also records what writing it replaces: an earlier value of the same
//!   annotation, and an empty (or non-object) `metadata.annotations` or an empty `metadata`,
//!   which up-conversion removes once the annotation is gone.
//! - A request for the version the object already has returns it unchanged.
//!
//! (What the annotation keeps passes through JSON text, where serde_json, without its
//! `float_roundtrip` feature, may change the last bit of a float; a placement holds none.)
//!
//! Bad input — not an object, an apiVersion or kind that is not Accord's, an unknown desired
//! version, an annotation that is not a JSON object — is a [`ConversionError`] naming the
//! object, never a panic.

use std::fmt;

use serde_json::{Map, Value};

use crate::GROUP;

/// Annotation in which a v1alpha1 object keeps the v1beta1 fields v1alpha1 cannot hold, as
/// JSON shaped like the object.
pub const LOSSLESS_ANNOTATION: &str = "accord.io/v1beta1-fields";
/// The version objects are stored in, and the one the hub reads and writes.
pub const STORAGE_VERSION: &str = "v1beta1";
/// The version still served, deprecated, for clients that have not moved on.
pub const DEPRECATED_VERSION: &str = "v1alpha1";

/// The keys of `spec.placement` that v1alpha1 holds at the top of `spec`.
const PLACEMENT_KEYS: [&str; 2] = ["clusters", "clusterSelector"];
/// FederatedKafkaUser's renamed field: (v1alpha1 name, v1beta1 name).
const USER_NAME: (&str, &str) = ("username", "userName");

/// Why an object could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum ConversionError {
    /// The value to convert is not a JSON object at all.
    #[error("an object to convert is not a JSON object but {found}")]
    NotAnObject {
        /// What it is instead (`null`, `an array`, ...).
        found: &'static str,
    },
    /// The object is of another API group or version.
    #[error(
        "{object}: apiVersion {api_version} is neither accord.io/v1alpha1 nor accord.io/v1beta1"
    )]
    ForeignApiVersion {
        /// The object.
        object: ObjectName,
        /// Its `apiVersion`, quoted, or `(none)`.
        api_version: String,
    },
    /// The object's `kind` is not one of Accord's seven kinds.
    #[error("{object}: kind {kind} is not an accord.io kind")]
    UnknownKind {
        /// The object.
        object: ObjectName,
        /// Its `kind`, quoted, or `(none)`.
        kind: String,
    },
    /// The version asked for is not one Accord serves.
    #[error(
        "{object}: cannot convert to {desired:?}: the versions are accord.io/v1alpha1 and accord.io/v1beta1"
    )]
    UnknownDesiredVersion {
        /// The object.
        object: ObjectName,
        /// The desired apiVersion as asked.
        desired: String,
    },
    /// The lossless annotation is not JSON.
    #[error("{object}: annotation {LOSSLESS_ANNOTATION} is not valid JSON: {source}")]
    AnnotationNotJson {
        /// The object.
        object: ObjectName,
        /// What the JSON parser said.
        #[source]
        source: serde_json::Error,
    },
    /// The lossless annotation is JSON (or not even a string) but not a JSON object.
    #[error("{object}: annotation {LOSSLESS_ANNOTATION} does not hold a JSON object")]
    AnnotationNotAnObject {
        /// The object.
        object: ObjectName,
    },
    /// `metadata` is not an object, so the annotation cannot be written.
    #[error(
        "{object}: metadata is not an object, so the v1beta1 fields cannot be kept in annotation {LOSSLESS_ANNOTATION}"
    )]
    MetadataNotAnObject {
        /// The object.
        object: ObjectName,
    },
}

/// An object as error messages name it: `Kind namespace/name`, `Kind name` for a
/// cluster-scoped object, with what is unknown left out (`object` for a missing kind).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectName {
    /// `kind`, when it is a string.
    pub kind: Option<String>,
    /// `metadata.namespace`, when it is a string.
    pub namespace: Option<String>,
    /// `metadata.name`, when it is a string.
    pub name: Option<String>,
}

impl ObjectName {
    /// Reads the name of `object` from what it has of `kind` and `metadata`.
    pub fn of(object: &Map<String, Value>) -> Self {
        let metadata = object.get("metadata");
        let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
        Self {
            kind: text(object.get("kind")),
            namespace: text(metadata.and_then(|m| m.get("namespace"))),
            name: text(metadata.and_then(|m| m.get("name"))),
        }
    }
}

impl fmt::Display for ObjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.as_deref().unwrap_or("object"))?;
        match (&self.namespace, &self.name) {
            (Some(namespace), Some(name)) => write!(f, " {namespace}/{name}"),
            (None, Some(name)) => write!(f, " {name}"),
            (Some(namespace), None) => write!(f, " in namespace {namespace} without a name"),
            (None, None) => f.write_str(" without a name"),
        }
    }
}

/// The two versions of the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    V1alpha1,
    V1beta1,
}

impl Version {
    /// The version of a full apiVersion (`accord.io/v1beta1`); `None` for any other.
    fn of_api_version(api_version: &str) -> Option<Self> {
        match api_version.strip_prefix(GROUP)?.strip_prefix('/')? {
            DEPRECATED_VERSION => Some(Self::V1alpha1),
            STORAGE_VERSION => Some(Self::V1beta1),
            _ => None,
        }
    }

    fn api_version(self) -> String {
        let version = match self {
            Self::V1alpha1 => DEPRECATED_VERSION,
            Self::V1beta1 => STORAGE_VERSION,
        };
        format!("{GROUP}/{version}")
    }
}

/// How a kind's spec differs between the versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// ManagedCluster, KafkaTopicPolicy: the same.
    Same,
    /// CrossClusterScalePolicy: v1beta1 adds an optional `spec.placement`.
    OptionalPlacement,
    /// FederatedKafkaTopic, PrometheusFederation, FederatedResource: `clusters` and
    /// `clusterSelector` move into `spec.placement`.
    Placement,
    /// FederatedKafkaUser: as [`Shape::Placement`], and `username` becomes `userName`.
    PlacementAndUserName,
}

impl Shape {
    fn of_kind(kind: &str) -> Option<Self> {
        match kind {
            "ManagedCluster" | "KafkaTopicPolicy" => Some(Self::Same),
            "CrossClusterScalePolicy" => Some(Self::OptionalPlacement),
            "FederatedKafkaTopic" | "PrometheusFederation" | "FederatedResource" => {
                Some(Self::Placement)
            }
            "FederatedKafkaUser" => Some(Self::PlacementAndUserName),
            _ => None,
        }
    }

    fn moves_placement(self) -> bool {
        matches!(self, Self::Placement | Self::PlacementAndUserName)
    }
}

/// Converts one Accord object to `desired_api_version` (`accord.io/v1alpha1` or
/// `accord.io/v1beta1`), as the module documentation describes. An object already in that
/// version comes back unchanged.
pub fn convert(object: Value, desired_api_version: &str) -> Result<Value, ConversionError> {
    let mut object = match object {
        Value::Object(object) => object,
        other => {
            return Err(ConversionError::NotAnObject {
                found: json_type(&other),
            });
        }
    };
    let name = ObjectName::of(&object);
    let api_version = object.get("apiVersion");
    let Some(current) = api_version
        .and_then(Value::as_str)
        .and_then(Version::of_api_version)
    else {
        return Err(ConversionError::ForeignApiVersion {
            api_version: quoted_or_none(api_version),
            object: name,
        });
    };
    let kind = object.get("kind");
    let Some(shape) = kind.and_then(Value::as_str).and_then(Shape::of_kind) else {
        return Err(ConversionError::UnknownKind {
            kind: quoted_or_none(kind),
            object: name,
        });
    };
    let Some(desired) = Version::of_api_version(desired_api_version) else {
        return Err(ConversionError::UnknownDesiredVersion {
            object: name,
            desired: desired_api_version.to_owned(),
        });
    };
    match (current, desired) {
        (Version::V1alpha1, Version::V1beta1) => up(&mut object, shape, name)?,
        (Version::V1beta1, Version::V1alpha1) => down(&mut object, shape, name)?,
        _ => {}
    }
    Ok(Value::Object(object))
}

/// v1alpha1 → v1beta1: move the fields, then restore what the annotation kept.
fn up(
    object: &mut Map<String, Value>,
    shape: Shape,
    name: ObjectName,
) -> Result<(), ConversionError> {
    let kept = take_lossless_annotation(object, name)?;
    object.insert("apiVersion".into(), Version::V1beta1.api_version().into());
    if let Some(Value::Object(spec)) = object.get_mut("spec") {
        if shape.moves_placement() {
            lift_placement(spec);
        }
        if shape == Shape::PlacementAndUserName {
            move_key(spec, USER_NAME.0, USER_NAME.1);
        }
    }
    if let Some(kept) = kept {
        restore_absent(object, kept);
    }
    Ok(())
}

/// v1beta1 → v1alpha1: move the fields back and keep what v1alpha1 cannot hold in the
/// annotation.
fn down(
    object: &mut Map<String, Value>,
    shape: Shape,
    name: ObjectName,
) -> Result<(), ConversionError> {
    object.insert("apiVersion".into(), Version::V1alpha1.api_version().into());
    let mut kept_spec = Map::new();
    if let Some(Value::Object(spec)) = object.get_mut("spec") {
        match shape {
            Shape::Same => {}
            Shape::OptionalPlacement => {
                for field in ["placement", "weighting"] {
                    if let Some(value) = spec.remove(field) {
                        kept_spec.insert(field.into(), value);
                    }
                }
            }
            Shape::Placement | Shape::PlacementAndUserName => {
                if let Some(rest) = lower_placement(spec) {
                    kept_spec.insert("placement".into(), rest);
                }
            }
        }
        if shape == Shape::PlacementAndUserName {
            move_key(spec, USER_NAME.1, USER_NAME.0);
        }
    }
    let mut kept = Map::new();
    if !kept_spec.is_empty() {
        kept.insert("spec".into(), Value::Object(kept_spec));
    }
    write_lossless_annotation(object, kept, name)
}

/// Up: moves `spec.clusters` and `spec.clusterSelector` into `spec.placement`, each only
/// where `spec.placement` (an object, created if absent) does not have it yet.
fn lift_placement(spec: &mut Map<String, Value>) {
    for key in PLACEMENT_KEYS {
        let Some(value) = spec.remove(key) else {
            continue;
        };
        match spec.entry("placement").or_insert_with(empty_object) {
            Value::Object(placement) if !placement.contains_key(key) => {
                placement.insert(key.into(), value);
            }
            // `placement` (unknown to v1alpha1) has the key already, or is not an object:
            // the value stays where it was.
            _ => {
                spec.insert(key.into(), value);
            }
        }
    }
}

/// Down: moves `spec.placement.clusters` and `.clusterSelector` to the top of `spec` (each
/// only where `spec` does not have it yet) and returns what is left of `spec.placement` for
/// the annotation: its other keys, the whole value when it is not an object, or an empty
/// object when nothing moved out of an empty one (else up-conversion would not recreate it).
/// `None` when nothing is left to keep.
fn lower_placement(spec: &mut Map<String, Value>) -> Option<Value> {
    let mut placement = match spec.remove("placement")? {
        Value::Object(placement) => placement,
        other => return Some(other),
    };
    let mut moved = false;
    for key in PLACEMENT_KEYS {
        if !spec.contains_key(key)
            && let Some(value) = placement.remove(key)
        {
            spec.insert(key.into(), value);
            moved = true;
        }
    }
    let (unmoved, rest): (Map<String, Value>, Map<String, Value>) = placement
        .into_iter()
        .partition(|(key, _)| PLACEMENT_KEYS.contains(&key.as_str()));
    let emptied = !moved && unmoved.is_empty();
    if !unmoved.is_empty() {
        // Its keys collide with unknown ones at the top of `spec`: left where they were,
        // as up-conversion leaves them.
        spec.insert("placement".into(), Value::Object(unmoved));
    }
    (!rest.is_empty() || emptied).then_some(Value::Object(rest))
}

/// Renames `spec.<from>` to `spec.<to>` when `from` is present and `to` absent.
fn move_key(spec: &mut Map<String, Value>, from: &str, to: &str) {
    if spec.contains_key(to) {
        return;
    }
    if let Some(value) = spec.remove(from) {
        spec.insert(to.into(), value);
    }
}

/// Up: removes the lossless annotation and returns what it holds. `metadata.annotations`
/// and `metadata` are removed when that leaves them empty (down-conversion recorded them in
/// the annotation if they existed empty).
fn take_lossless_annotation(
    object: &mut Map<String, Value>,
    name: ObjectName,
) -> Result<Option<Map<String, Value>>, ConversionError> {
    let Some(Value::Object(metadata)) = object.get_mut("metadata") else {
        return Ok(None);
    };
    let Some(Value::Object(annotations)) = metadata.get_mut("annotations") else {
        return Ok(None);
    };
    let Some(text) = annotations.remove(LOSSLESS_ANNOTATION) else {
        return Ok(None);
    };
    if annotations.is_empty() {
        metadata.remove("annotations");
    }
    if metadata.is_empty() {
        object.remove("metadata");
    }
    let Value::String(text) = text else {
        return Err(ConversionError::AnnotationNotAnObject { object: name });
    };
    match serde_json::from_str(&text) {
        Ok(Value::Object(kept)) => Ok(Some(kept)),
        Ok(_) => Err(ConversionError::AnnotationNotAnObject { object: name }),
        Err(source) => Err(ConversionError::AnnotationNotJson {
            object: name,
            source,
        }),
    }
}

/// Down: writes `kept` as the lossless annotation when there is anything to keep or the
/// object already carries the annotation, adding to `kept` what writing it replaces so that
/// up-conversion can put it back.
fn write_lossless_annotation(
    object: &mut Map<String, Value>,
    mut kept: Map<String, Value>,
    name: ObjectName,
) -> Result<(), ConversionError> {
    let metadata = match object.get("metadata") {
        None => None,
        Some(Value::Object(metadata)) => Some(metadata),
        Some(_) if kept.is_empty() => return Ok(()),
        Some(_) => return Err(ConversionError::MetadataNotAnObject { object: name }),
    };
    let annotations = metadata.and_then(|m| m.get("annotations"));
    let earlier = annotations.and_then(|a| a.get(LOSSLESS_ANNOTATION));
    if kept.is_empty() && earlier.is_none() {
        return Ok(());
    }
    if let Some(replaced) = replaced_metadata(metadata, annotations, earlier) {
        kept.insert("metadata".into(), replaced);
    }
    let text = Value::Object(kept).to_string();
    // `metadata` is an object or absent here, and `annotations` is made one.
    if let Value::Object(metadata) = object.entry("metadata").or_insert_with(empty_object) {
        let annotations = metadata.entry("annotations").or_insert_with(empty_object);
        if !annotations.is_object() {
            *annotations = empty_object();
        }
        if let Value::Object(annotations) = annotations {
            annotations.insert(LOSSLESS_ANNOTATION.into(), Value::String(text));
        }
    }
    Ok(())
}

/// What of `metadata` writing the annotation replaces or up-conversion would remove, shaped
/// like `metadata`: `{}` for an empty `metadata`; for `annotations`, its value when it is
/// empty or not an object, or `{LOSSLESS_ANNOTATION: earlier}` when it holds one already.
fn replaced_metadata(
    metadata: Option<&Map<String, Value>>,
    annotations: Option<&Value>,
    earlier: Option<&Value>,
) -> Option<Value> {
    let metadata = metadata?;
    if metadata.is_empty() {
        return Some(empty_object());
    }
    let annotations = match (annotations?, earlier) {
        (Value::Object(annotations), None) if !annotations.is_empty() => return None,
        (_, Some(earlier)) => Value::Object(Map::from_iter([(
            LOSSLESS_ANNOTATION.into(),
            earlier.clone(),
        )])),
        (other, None) => other.clone(),
    };
    Some(Value::Object(Map::from_iter([(
        "annotations".into(),
        annotations,
    )])))
}

/// Puts every field of `kept` that `target` lacks into `target`, descending into objects
/// both have; a field `target` has wins.
fn restore_absent(target: &mut Map<String, Value>, kept: Map<String, Value>) {
    for (key, value) in kept {
        match (target.get_mut(&key), value) {
            (None, value) => {
                target.insert(key, value);
            }
            (Some(Value::Object(present)), Value::Object(kept)) => restore_absent(present, kept),
            (Some(_), _) => {}
        }
    }
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

fn quoted_or_none(value: Option<&Value>) -> String {
    value.map_or_else(|| "(none)".to_owned(), Value::to_string)
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const ALPHA: &str = "accord.io/v1alpha1";
    const BETA: &str = "accord.io/v1beta1";

    /// The four kinds whose `clusters`/`clusterSelector` move into `spec.placement`.
    const PLACEMENT_KINDS: [&str; 4] = [
        "FederatedKafkaTopic",
        "PrometheusFederation",
        "FederatedResource",
        "FederatedKafkaUser",
    ];

    fn object(api_version: &str, kind: &str, spec: Value) -> Value {
        json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": spec,
        })
    }

    fn up(object: &Value) -> Value {
        convert(object.clone(), BETA).unwrap()
    }

    fn down(object: &Value) -> Value {
        convert(object.clone(), ALPHA).unwrap()
    }

    fn lossless(object: &Value) -> Option<Value> {
        let text = object["metadata"]["annotations"][LOSSLESS_ANNOTATION].as_str()?;
        Some(serde_json::from_str(text).unwrap())
    }

    fn with_annotation(mut object: Value, text: &str) -> Value {
        object["metadata"]["annotations"] = json!({ LOSSLESS_ANNOTATION: text });
        object
    }

    #[test]
    fn managed_cluster_and_kafka_topic_policy_change_only_their_api_version() {
        for (kind, spec) in [
            (
                "ManagedCluster",
                json!({"weight": 60, "clusters": ["kept"]}),
            ),
            (
                "KafkaTopicPolicy",
                json!({"minPartitions": 12, "clusterSelector": {}, "placement": {"x": 1}}),
            ),
        ] {
            let alpha = object(ALPHA, kind, spec.clone());
            let beta = object(BETA, kind, spec);
            assert_eq!(up(&alpha), beta, "{kind}");
            assert_eq!(down(&beta), alpha, "{kind}");
        }
    }

    #[test]
    fn placement_kinds_move_clusters_into_placement_and_back() {
        for kind in PLACEMENT_KINDS {
            let alpha = object(ALPHA, kind, json!({"clusters": ["a", "b"], "other": 1}));
            let beta = object(
                BETA,
                kind,
                json!({"placement": {"clusters": ["a", "b"]}, "other": 1}),
            );
            assert_eq!(up(&alpha), beta, "{kind}");
            assert_eq!(down(&beta), alpha, "{kind}");
        }
    }

    #[test]
    fn placement_kinds_move_the_cluster_selector_into_placement_and_back() {
        let selector = json!({"matchLabels": {"tier": "prod"}});
        for kind in PLACEMENT_KINDS {
            let alpha = object(ALPHA, kind, json!({"clusterSelector": selector}));
            let beta = object(
                BETA,
                kind,
                json!({"placement": {"clusterSelector": selector}}),
            );
            assert_eq!(up(&alpha), beta, "{kind}");
            assert_eq!(down(&beta), alpha, "{kind}");
        }
    }

    #[test]
    fn a_placement_with_only_clusters_or_selector_leaves_no_annotation() {
        for placement in [json!({"clusters": ["a"]}), json!({"clusterSelector": {}})] {
            for kind in PLACEMENT_KINDS {
                let beta = object(BETA, kind, json!({ "placement": placement }));
                let alpha = down(&beta);
                assert_eq!(
                    alpha["metadata"],
                    json!({"name": "orders", "namespace": "shop"})
                );
                assert!(alpha["spec"].get("placement").is_none(), "{kind}");
            }
        }
    }

    #[test]
    fn federated_resource_overrides_keep_their_own_cluster_filters() {
        let overrides = json!([
            {"clusters": ["a"], "jsonPatch": []},
            {"clusterSelector": {"matchLabels": {"region": "eu"}}, "jsonPatch": []},
        ]);
        let alpha = object(
            ALPHA,
            "FederatedResource",
            json!({"clusters": ["a"], "overrides": overrides}),
        );
        let beta = up(&alpha);
        assert_eq!(beta["spec"]["overrides"], overrides);
        assert_eq!(beta["spec"]["placement"], json!({"clusters": ["a"]}));
        assert_eq!(down(&beta), alpha);
    }

    #[test]
    fn federated_kafka_user_username_becomes_user_name_and_back() {
        let alpha = object(
            ALPHA,
            "FederatedKafkaUser",
            json!({"username": "orders-writer", "clusters": ["a"]}),
        );
        let beta = object(
            BETA,
            "FederatedKafkaUser",
            json!({"userName": "orders-writer", "placement": {"clusters": ["a"]}}),
        );
        assert_eq!(up(&alpha), beta);
        assert_eq!(down(&beta), alpha);
    }

    #[test]
    fn only_federated_kafka_user_renames_username() {
        let alpha = object(ALPHA, "FederatedKafkaTopic", json!({"username": "x"}));
        assert_eq!(up(&alpha)["spec"], json!({"username": "x"}));
    }

    #[test]
    fn scale_policy_placement_is_kept_in_the_annotation_and_restored() {
        let placement = json!({"clusterSelector": {"matchLabels": {"tier": "prod"}}});
        let beta = object(
            BETA,
            "CrossClusterScalePolicy",
            json!({"placement": placement, "distribution": [], "desiredReplicas": 3,
                   "weighting": "AvailableCapacity"}),
        );
        let alpha = down(&beta);
        assert_eq!(alpha["apiVersion"], ALPHA);
        assert_eq!(
            alpha["spec"],
            json!({"distribution": [], "desiredReplicas": 3})
        );
        assert_eq!(
            lossless(&alpha),
            Some(json!({"spec": {"placement": placement, "weighting": "AvailableCapacity"}}))
        );
        assert_eq!(up(&alpha), beta);
    }

    #[test]
    fn scale_policy_without_placement_converts_without_annotation() {
        let beta = object(
            BETA,
            "CrossClusterScalePolicy",
            json!({"desiredReplicas": 3}),
        );
        let alpha = down(&beta);
        assert_eq!(
            alpha,
            object(
                ALPHA,
                "CrossClusterScalePolicy",
                json!({"desiredReplicas": 3})
            )
        );
        assert_eq!(up(&alpha), beta);
    }

    #[test]
    fn other_placement_keys_are_kept_in_the_annotation_and_restored() {
        for kind in PLACEMENT_KINDS {
            let beta = object(
                BETA,
                kind,
                json!({"placement": {"clusters": ["a"], "spread": {"max": 2}}}),
            );
            let alpha = down(&beta);
            assert_eq!(alpha["spec"], json!({"clusters": ["a"]}), "{kind}");
            assert_eq!(
                lossless(&alpha),
                Some(json!({"spec": {"placement": {"spread": {"max": 2}}}})),
                "{kind}"
            );
            assert_eq!(up(&alpha), beta, "{kind}");
        }
    }

    #[test]
    fn a_placement_that_is_not_an_object_is_kept_whole() {
        for placement in [json!(null), json!("everywhere"), json!(["a"])] {
            let beta = object(
                BETA,
                "FederatedKafkaTopic",
                json!({ "placement": placement }),
            );
            let alpha = down(&beta);
            assert_eq!(alpha["spec"], json!({}));
            assert_eq!(
                lossless(&alpha),
                Some(json!({"spec": {"placement": placement}}))
            );
            assert_eq!(up(&alpha), beta);
        }
    }

    #[test]
    fn an_empty_placement_survives_the_round_trip() {
        let beta = object(BETA, "FederatedResource", json!({"placement": {}}));
        let alpha = down(&beta);
        assert_eq!(alpha["spec"], json!({}));
        assert_eq!(up(&alpha), beta);
    }

    #[test]
    fn an_object_without_spec_converts() {
        for kind in [
            "FederatedKafkaTopic",
            "CrossClusterScalePolicy",
            "ManagedCluster",
        ] {
            let alpha = json!({"apiVersion": ALPHA, "kind": kind, "metadata": {"name": "x"}});
            let beta = json!({"apiVersion": BETA, "kind": kind, "metadata": {"name": "x"}});
            assert_eq!(up(&alpha), beta, "{kind}");
            assert_eq!(down(&beta), alpha, "{kind}");
        }
    }

    #[test]
    fn a_spec_without_placement_only_changes_the_api_version() {
        let alpha = object(ALPHA, "FederatedKafkaTopic", json!({"partitions": 3}));
        let beta = object(BETA, "FederatedKafkaTopic", json!({"partitions": 3}));
        assert_eq!(up(&alpha), beta);
        assert_eq!(down(&beta), alpha);
    }

    #[test]
    fn a_spec_that_is_not_an_object_passes_through() {
        let alpha = object(ALPHA, "FederatedKafkaTopic", json!(null));
        assert_eq!(up(&alpha), object(BETA, "FederatedKafkaTopic", json!(null)));
    }

    #[test]
    fn the_annotation_is_added_to_metadata_without_annotations_and_removed_again() {
        let beta = object(
            BETA,
            "CrossClusterScalePolicy",
            json!({"placement": {"clusters": ["a"]}}),
        );
        let alpha = down(&beta);
        assert_eq!(
            alpha["metadata"]["annotations"].as_object().map(Map::len),
            Some(1)
        );
        let back = up(&alpha);
        assert_eq!(
            back["metadata"],
            json!({"name": "orders", "namespace": "shop"})
        );
        assert_eq!(back, beta);
    }

    #[test]
    fn the_annotation_joins_existing_annotations_and_leaves_them_alone() {
        let mut beta = object(
            BETA,
            "CrossClusterScalePolicy",
            json!({"placement": {"clusters": ["a"]}}),
        );
        beta["metadata"]["annotations"] = json!({"team": "payments"});
        let alpha = down(&beta);
        assert_eq!(alpha["metadata"]["annotations"]["team"], "payments");
        assert_eq!(up(&alpha), beta);
    }

    #[test]
    fn an_object_without_metadata_survives_the_round_trip() {
        let beta = json!({
            "apiVersion": BETA,
            "kind": "CrossClusterScalePolicy",
            "spec": {"placement": {"clusters": ["a"]}},
        });
        let alpha = down(&beta);
        assert!(lossless(&alpha).is_some());
        assert_eq!(up(&alpha), beta);
    }

    #[test]
    fn empty_metadata_and_empty_or_null_annotations_survive_the_round_trip() {
        let spec = json!({"placement": {"clusters": ["a"]}});
        let base = json!({"apiVersion": BETA, "kind": "CrossClusterScalePolicy", "spec": spec});
        for metadata in [
            json!({}),
            json!({"name": "x", "annotations": {}}),
            json!({"name": "x", "annotations": null}),
        ] {
            let mut beta = base.clone();
            beta["metadata"] = metadata.clone();
            let alpha = down(&beta);
            assert!(lossless(&alpha).is_some(), "{metadata}");
            assert_eq!(up(&alpha), beta, "{metadata}");
        }
    }

    #[test]
    fn an_earlier_value_of_the_annotation_survives_the_round_trip() {
        for spec in [json!({}), json!({"placement": {"clusters": ["a"]}})] {
            let beta = with_annotation(object(BETA, "CrossClusterScalePolicy", spec), "not json");
            let alpha = down(&beta);
            let kept = lossless(&alpha).unwrap();
            assert_eq!(
                kept["metadata"],
                json!({"annotations": {LOSSLESS_ANNOTATION: "not json"}})
            );
            assert_eq!(up(&alpha), beta);
        }
    }

    #[test]
    fn converting_to_the_same_version_returns_the_object_unchanged() {
        let alpha = with_annotation(
            object(
                ALPHA,
                "FederatedKafkaUser",
                json!({"username": "u", "clusters": ["a"]}),
            ),
            "not json",
        );
        assert_eq!(down(&alpha), alpha);
        let beta = object(
            BETA,
            "CrossClusterScalePolicy",
            json!({"placement": {"clusters": ["a"]}}),
        );
        assert_eq!(up(&beta), beta);
    }

    #[test]
    fn cluster_edits_made_through_v1alpha1_win_over_the_annotation() {
        let beta = object(
            BETA,
            "FederatedKafkaTopic",
            json!({"placement": {"clusters": ["a"], "spread": 2}}),
        );
        let mut alpha = down(&beta);
        alpha["spec"] = json!({"clusterSelector": {"matchLabels": {"tier": "prod"}}});
        assert_eq!(
            up(&alpha)["spec"],
            json!({"placement": {"clusterSelector": {"matchLabels": {"tier": "prod"}}, "spread": 2}})
        );
    }

    #[test]
    fn fields_present_in_the_object_win_over_the_annotation() {
        let alpha = with_annotation(
            object(
                ALPHA,
                "CrossClusterScalePolicy",
                json!({"desiredReplicas": 5, "placement": {"clusters": ["b"]}}),
            ),
            r#"{"spec": {"desiredReplicas": 1, "placement": {"clusters": ["a"], "extra": 1}}}"#,
        );
        assert_eq!(
            up(&alpha)["spec"],
            json!({"desiredReplicas": 5, "placement": {"clusters": ["b"], "extra": 1}})
        );
    }

    #[test]
    fn an_unknown_v1alpha1_placement_is_kept_and_only_gains_what_it_lacks() {
        let alpha = object(
            ALPHA,
            "PrometheusFederation",
            json!({
                "clusters": ["a"],
                "clusterSelector": {},
                "placement": {"clusters": ["b"], "x": 1},
            }),
        );
        assert_eq!(
            up(&alpha)["spec"],
            json!({"clusters": ["a"], "placement": {"clusters": ["b"], "clusterSelector": {}, "x": 1}})
        );
        let odd = object(
            ALPHA,
            "PrometheusFederation",
            json!({"clusters": ["a"], "placement": 7}),
        );
        assert_eq!(up(&odd)["spec"], json!({"clusters": ["a"], "placement": 7}));
    }

    #[test]
    fn colliding_keys_stay_where_they_are_both_ways() {
        let alpha = object(
            ALPHA,
            "FederatedKafkaUser",
            json!({"username": "old", "userName": "new", "clusters": ["a"], "placement": {"clusters": ["b"]}}),
        );
        let beta = up(&alpha);
        assert_eq!(
            beta["spec"],
            json!({
                "username": "old", "userName": "new", "clusters": ["a"], "placement": {"clusters": ["b"]},
            })
        );
        assert_eq!(down(&beta), alpha);
    }

    #[test]
    fn an_annotation_that_is_not_json_is_an_error_naming_the_object() {
        let alpha = with_annotation(object(ALPHA, "FederatedKafkaTopic", json!({})), "{oops");
        let error = convert(alpha, BETA).unwrap_err();
        assert!(
            matches!(error, ConversionError::AnnotationNotJson { .. }),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(message.starts_with("FederatedKafkaTopic shop/orders: annotation accord.io/v1beta1-fields is not valid JSON"), "{message}");
    }

    #[test]
    fn an_annotation_that_is_not_a_json_object_is_an_error() {
        let array = with_annotation(object(ALPHA, "FederatedKafkaTopic", json!({})), "[1]");
        let mut number = object(ALPHA, "FederatedKafkaTopic", json!({}));
        number["metadata"]["annotations"] = json!({ LOSSLESS_ANNOTATION: 3 });
        for alpha in [array, number] {
            let error = convert(alpha, BETA).unwrap_err();
            assert!(
                matches!(error, ConversionError::AnnotationNotAnObject { .. }),
                "{error:?}"
            );
        }
    }

    #[test]
    fn a_value_that_is_not_an_object_is_an_error() {
        let error = convert(json!(["a"]), BETA).unwrap_err();
        assert_eq!(
            error.to_string(),
            "an object to convert is not a JSON object but an array"
        );
    }

    #[test]
    fn a_foreign_api_version_is_an_error_naming_the_object() {
        for api_version in [
            json!("apps/v1"),
            json!("accord.io/v2"),
            json!("accord.io"),
            json!(1),
        ] {
            let mut alpha = object(ALPHA, "FederatedKafkaTopic", json!({}));
            alpha["apiVersion"] = api_version.clone();
            let error = convert(alpha, BETA).unwrap_err();
            assert!(
                matches!(error, ConversionError::ForeignApiVersion { .. }),
                "{error:?}"
            );
            assert!(
                error
                    .to_string()
                    .starts_with("FederatedKafkaTopic shop/orders: apiVersion ")
            );
        }
        let error = convert(
            json!({"kind": "ManagedCluster", "metadata": {"name": "a"}}),
            BETA,
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "ManagedCluster a: apiVersion (none) is neither accord.io/v1alpha1 nor accord.io/v1beta1"
        );
    }

    #[test]
    fn an_unknown_kind_is_an_error_naming_the_object() {
        let error = convert(object(ALPHA, "Deployment", json!({})), BETA).unwrap_err();
        assert_eq!(
            error.to_string(),
            "Deployment shop/orders: kind \"Deployment\" is not an accord.io kind"
        );
        let error = convert(json!({"apiVersion": ALPHA}), BETA).unwrap_err();
        assert_eq!(
            error.to_string(),
            "object without a name: kind (none) is not an accord.io kind"
        );
    }

    #[test]
    fn an_unknown_desired_version_is_an_error_naming_the_object() {
        for desired in ["accord.io/v1", "v1beta1", "apps/v1", ""] {
            let error =
                convert(object(ALPHA, "FederatedResource", json!({})), desired).unwrap_err();
            assert!(
                matches!(error, ConversionError::UnknownDesiredVersion { .. }),
                "{error:?}"
            );
            assert!(
                error
                    .to_string()
                    .starts_with("FederatedResource shop/orders: cannot convert to")
            );
        }
    }

    #[test]
    fn metadata_that_is_not_an_object_is_an_error_only_when_the_annotation_is_needed() {
        let mut beta = object(
            BETA,
            "CrossClusterScalePolicy",
            json!({"desiredReplicas": 1}),
        );
        beta["metadata"] = json!("odd");
        assert_eq!(down(&beta)["metadata"], "odd");
        beta["spec"]["placement"] = json!({"clusters": ["a"]});
        let error = convert(beta, ALPHA).unwrap_err();
        assert!(
            matches!(error, ConversionError::MetadataNotAnObject { .. }),
            "{error:?}"
        );
    }

    #[test]
    fn object_names_leave_out_what_is_unknown() {
        let name = |kind: Option<&str>, namespace: Option<&str>, name: Option<&str>| {
            ObjectName {
                kind: kind.map(Into::into),
                namespace: namespace.map(Into::into),
                name: name.map(Into::into),
            }
            .to_string()
        };
        assert_eq!(
            name(Some("ManagedCluster"), None, Some("us")),
            "ManagedCluster us"
        );
        assert_eq!(
            name(Some("FederatedResource"), Some("ns"), Some("web")),
            "FederatedResource ns/web"
        );
        assert_eq!(
            name(None, Some("ns"), None),
            "object in namespace ns without a name"
        );
    }
}
