//! The distribution path's vocabulary, shared by hub and agent: which placed object an
//! assignment comes from, what it asks of one member cluster (one variant per kind), what the agent
//! observed there, and where the placement stands — with their translation to and from the
//! `accord.v1` messages at the edge.
//!
//! Adding a kind adds one variant to [`AssignmentSpec`] and one to [`Observed`] (and their
//! protocol messages); nothing else here changes.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use accord_proto::v1 as pb;
use serde::{Deserialize, Serialize};

/// Placement state, as the CRD status, the hub's records and the protocol spell it.
pub use accord_crds::PlacementState;

/// The kinds of object the hub places (a "placed object" is an object of one of these kinds;
/// "placed object" names KafkaTopicPolicy only). Serialises (and reads) as the kind's name, as
/// in etcd keys (`placements/<kind>/…`), stored records and the protocol's `ObjectRef.kind`.
///
/// A name that is none of these is an [`UnknownPlacedKind`] error where it is read: the
/// protocol's edges refuse or skip it, and a stored document holding one is unreadable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PlacedKind {
    /// `CrossClusterScalePolicy`.
    CrossClusterScalePolicy,
    /// `FederatedKafkaTopic`.
    FederatedKafkaTopic,
    /// `PrometheusFederation`.
    PrometheusFederation,
    /// `FederatedResource`.
    FederatedResource,
    /// `FederatedKafkaUser`.
    FederatedKafkaUser,
}

impl PlacedKind {
    /// Every kind.
    pub const ALL: [PlacedKind; 5] = [
        Self::CrossClusterScalePolicy,
        Self::FederatedKafkaTopic,
        Self::PrometheusFederation,
        Self::FederatedResource,
        Self::FederatedKafkaUser,
    ];

    /// The kind's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::CrossClusterScalePolicy => "CrossClusterScalePolicy",
            Self::FederatedKafkaTopic => "FederatedKafkaTopic",
            Self::PrometheusFederation => "PrometheusFederation",
            Self::FederatedResource => "FederatedResource",
            Self::FederatedKafkaUser => "FederatedKafkaUser",
        }
    }
}

impl fmt::Display for PlacedKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kind name that is none of [`PlacedKind`]'s.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown placed kind {0:?}")]
pub struct UnknownPlacedKind(pub String);

impl FromStr for PlacedKind {
    type Err = UnknownPlacedKind;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == name)
            .ok_or_else(|| UnknownPlacedKind(name.to_owned()))
    }
}

/// Identifies a placed object on the hub (and hence its placements key and status records).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PlacedRef {
    /// Kind.
    pub kind: PlacedKind,
    /// Namespace on the hub (empty for cluster-scoped kinds).
    pub namespace: String,
    /// Name on the hub.
    pub name: String,
}

impl PlacedRef {
    /// A reference from its parts.
    pub fn new(kind: PlacedKind, namespace: &str, name: &str) -> Self {
        Self {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// As a protocol object reference.
    pub fn to_proto(&self) -> pb::ObjectRef {
        pb::ObjectRef {
            kind: self.kind.as_str().to_owned(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// From a protocol object reference; an error when its kind is not one of ours.
    pub fn from_proto(r: &pb::ObjectRef) -> Result<Self, UnknownPlacedKind> {
        Ok(Self::new(r.kind.parse()?, &r.namespace, &r.name))
    }
}

impl fmt::Display for PlacedRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.kind, self.name)
        } else {
            write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// Set a workload's replicas (CrossClusterScalePolicy).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleSpec {
    /// Workload apiVersion, e.g. `apps/v1`.
    pub api_version: String,
    /// Workload kind, e.g. `Deployment`.
    pub kind: String,
    /// Namespace of the workload in the member cluster.
    pub namespace: String,
    /// Name of the workload.
    pub name: String,
    /// Replicas this cluster should run.
    pub replicas: i32,
    /// Id of the scaling decision, stamped on the workload.
    pub scale_request_id: String,
}

impl ScaleSpec {
    /// Sets the replicas of `apps/v1` Deployment `namespace/name`.
    pub fn deployment(namespace: &str, name: &str, replicas: i32, scale_request_id: &str) -> Self {
        Self {
            api_version: "apps/v1".to_owned(),
            kind: "Deployment".to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            replicas,
            scale_request_id: scale_request_id.to_owned(),
        }
    }

    /// Whether the workload is an `apps/v1` Deployment (the one kind agents scale).
    pub fn is_deployment(&self) -> bool {
        self.kind == "Deployment" && self.api_version == "apps/v1"
    }
}

/// Keep a Kafka topic as specified (FederatedKafkaTopic).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaTopicSpec {
    /// Topic name.
    pub topic_name: String,
    /// Partitions (may only grow).
    pub partitions: i32,
    /// Replication factor (fixed at creation).
    pub replication_factor: i32,
    /// Topic configs, e.g. `retention.ms`, set with IncrementalAlterConfigs SET.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Keys an earlier spec of this topic set and the current one does not: deleted on
    /// the broker (back to its default) where they are still set. Keys no spec ever named
    /// are never touched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_config: Vec<String>,
    /// Delete the topic from this cluster's Kafka (deletionPolicy `Delete`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delete: bool,
}

/// Render a Prometheus federation config (PrometheusFederation).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromfedSpec {
    /// Namespaces whose Prometheus endpoints are federated.
    #[serde(default)]
    pub tenant_namespaces: Vec<String>,
    /// Label selector (matchLabels) alternative to `tenant_namespaces`.
    #[serde(default)]
    pub tenant_labels: BTreeMap<String, String>,
    /// `match[]` selectors.
    #[serde(default)]
    pub matchers: Vec<String>,
    /// Scrape interval, Prometheus duration syntax.
    pub scrape_interval: String,
    /// Scrape timeout, Prometheus duration syntax.
    pub scrape_timeout: String,
    /// Per-scrape sample limit (0: none).
    pub sample_limit: i64,
    /// URL to POST to reload Prometheus.
    pub reload_url: String,
    /// Namespace of the member's ConfigMap `prometheus-federation` ("": the agent's own).
    #[serde(default)]
    pub config_map_namespace: String,
}

/// Identifies one object a FederatedResource delivers.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestKey {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// e.g. `Deployment`.
    pub kind: String,
    /// Namespace ("" for a cluster-scoped object).
    #[serde(default)]
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ManifestKey {
    fn to_proto(&self) -> pb::ManifestKey {
        pb::ManifestKey {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    fn from_proto(k: pb::ManifestKey) -> Self {
        Self {
            api_version: k.api_version,
            kind: k.kind,
            namespace: k.namespace,
            name: k.name,
        }
    }
}

impl fmt::Display for ManifestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// A value read back from a delivered object into the FederatedResource's status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FeedbackRule {
    /// Kind of the delivered object.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// JSONPath into it, e.g. `.status.readyReplicas`.
    pub json_path: String,
    /// The value's name in status.
    #[serde(rename = "as")]
    pub as_: String,
}

/// A Secret a FederatedResource delivers (`spec.secretRefs`). Stored (in the hub's
/// placement record, in the agent's saved assignments) as its name, type and content hash
/// only: the hub adds the data when it sends the assignment on the agent's stream, and
/// neither `Debug` nor serde ever shows it.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveredSecret {
    /// Name (the same on the management cluster and in the member).
    pub name: String,
    /// The Secret's `type` (e.g. `Opaque`).
    #[serde(default, rename = "type")]
    pub type_: String,
    /// SHA-256 of the type and data, hex: a change delivers it again.
    pub hash: String,
    /// The data; present only on the wire from the hub, never stored.
    #[serde(skip)]
    pub data: BTreeMap<String, Vec<u8>>,
}

impl fmt::Debug for DeliveredSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeliveredSecret")
            .field("name", &self.name)
            .field("type", &self.type_)
            .field("hash", &self.hash)
            .field(
                "data",
                &format_args!("<{} keys, redacted>", self.data.len()),
            )
            .finish()
    }
}

impl DeliveredSecret {
    /// SHA-256 (hex) of a Secret's type and data, as [`DeliveredSecret::hash`] holds it.
    pub fn hash_of(type_: &str, data: &BTreeMap<String, Vec<u8>>) -> String {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(type_.as_bytes());
        for (k, v) in data {
            h.update([0]);
            h.update(k.as_bytes());
            h.update([0]);
            h.update((v.len() as u64).to_be_bytes());
            h.update(v);
        }
        hex::encode(h.finalize())
    }

    /// Whether the data the hash names is here (the hub sent it since this agent started).
    pub fn has_data(&self) -> bool {
        !self.data.is_empty() || self.hash == Self::hash_of(&self.type_, &self.data)
    }
}

/// Deliver objects (FederatedResource): the manifests after this cluster's overrides.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FederatedResourceSpec {
    /// The objects, in apply order (CustomResourceDefinitions and Namespaces first).
    pub manifests: Vec<serde_json::Value>,
    /// Namespace of namespaced manifests that name none: the FederatedResource's.
    pub namespace: String,
    /// Take over existing objects Accord did not create (`conflictResolution: Adopt`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt: bool,
    /// Leave removed objects running without Accord's marks (`deletionPolicy: Orphan`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub orphan: bool,
    /// Values read back into status.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feedback: Vec<FeedbackRule>,
    /// Secrets to deliver (`spec.secretRefs`), with their data only on the wire.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<DeliveredSecret>,
    /// Objects an earlier spec delivered and this one does not: removed (or orphaned).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prune: Vec<ManifestKey>,
    /// Remove everything delivered (the FederatedResource is being deleted).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remove: bool,
    /// The FederatedResource's `creationTimestamp` (RFC 3339; "" when unknown): of two
    /// delivering one object to a cluster, the older keeps it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub created: String,
}

/// SCRAM mechanism name of the credentials FederatedKafkaUsers hold.
pub const SCRAM_SHA_512: &str = "SCRAM-SHA-512";

/// A SCRAM credential the hub derived from a FederatedKafkaUser's password. Stored (in the
/// hub's placement record, in the agent's saved assignments) without the salted password:
/// each hub replica derives it again when it sends the assignment on the agent's stream,
/// and neither `Debug` nor serde ever shows it. The password itself never leaves the
/// management cluster.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScramCredential {
    /// [`SCRAM_SHA_512`].
    pub mechanism: String,
    /// PBKDF2 iterations.
    pub iterations: i32,
    /// The salt (random per change of the password or iterations).
    #[serde(with = "base64_bytes")]
    pub salt: Vec<u8>,
    /// `Hi(password, salt, iterations)`: only on the wire from the hub, never stored.
    #[serde(skip)]
    pub salted_password: Vec<u8>,
    /// SHA-256 of mechanism, iterations, salt and salted password, hex: the agent upserts
    /// the credential when it changes, and only then.
    pub hash: String,
    /// The Secret (in the placed object's namespace of the management cluster) holding the
    /// password, and its key: where a hub replica reads it to derive the salted password.
    pub secret_name: String,
    /// The key in that Secret.
    pub secret_key: String,
}

impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .field("hash", &self.hash)
            .field(
                "secret",
                &format_args!("{}/{}", self.secret_name, self.secret_key),
            )
            .field(
                "salted_password",
                &format_args!("<{} bytes, redacted>", self.salted_password.len()),
            )
            .finish()
    }
}

impl ScramCredential {
    /// The hash [`ScramCredential::hash`] holds for these values.
    pub fn hash_of(
        mechanism: &str,
        iterations: i32,
        salt: &[u8],
        salted_password: &[u8],
    ) -> String {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(mechanism.as_bytes());
        h.update([0]);
        h.update(iterations.to_be_bytes());
        h.update((salt.len() as u64).to_be_bytes());
        h.update(salt);
        h.update(salted_password);
        hex::encode(h.finalize())
    }

    /// Whether the salted password the hash names is here (the hub sent it since this
    /// agent started).
    pub fn has_salted_password(&self) -> bool {
        !self.salted_password.is_empty()
            && self.hash
                == Self::hash_of(
                    &self.mechanism,
                    self.iterations,
                    &self.salt,
                    &self.salted_password,
                )
    }
}

/// Bytes as base64 in stored documents.
mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

/// One Kafka ACL binding of a FederatedKafkaUser's principal, in Kafka's own names
/// (`Topic`, `Prefixed`, `Write`, `Allow`).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaAcl {
    /// `Topic`, `Group`, `Cluster`, `TransactionalId`, `DelegationToken` or `User`.
    pub resource_type: String,
    /// The resource's name (or prefix).
    pub resource_name: String,
    /// `Literal` or `Prefixed`.
    pub pattern_type: String,
    /// `Read`, `Write`, `All`, ...
    pub operation: String,
    /// The host the binding applies to (`*`: any).
    pub host: String,
    /// `Allow` or `Deny`.
    pub permission: String,
}

/// Keep a Kafka user, its ACLs and quotas as specified (FederatedKafkaUser).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaUserSpec {
    /// The user name; its principal is `User:<username>`.
    pub username: String,
    /// Its SCRAM credential (`None` when removing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<ScramCredential>,
    /// Every ACL binding of the principal; the principal's others are deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acls: Vec<KafkaAcl>,
    /// Quotas by Kafka's key (`producer_byte_rate`, ...); the user's others are removed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub quotas: BTreeMap<String, f64>,
    /// Remove the credential, ACLs and quotas (`deletionPolicy: Delete`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remove: bool,
}

// Quotas are finite numbers (the CRD bounds them), so equality is total here.
impl Eq for KafkaUserSpec {}

/// What one placed object asks of one member cluster: one variant per kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AssignmentSpec {
    /// CrossClusterScalePolicy.
    Scale(ScaleSpec),
    /// FederatedKafkaTopic.
    // stored name; renaming it would orphan stored records
    #[serde(rename = "topic")]
    KafkaTopic(KafkaTopicSpec),
    /// PrometheusFederation.
    // stored name; renaming it would orphan stored records
    #[serde(rename = "federation")]
    Promfed(PromfedSpec),
    /// FederatedResource.
    FederatedResource(FederatedResourceSpec),
    /// FederatedKafkaUser.
    KafkaUser(KafkaUserSpec),
}

/// A kind's spec as one variant of [`AssignmentSpec`]: what an agent's enforcer receives,
/// typed.
pub trait KindSpec: Sized {
    /// The kind's spec in `spec`, when it is an assignment of this kind.
    fn of(spec: &AssignmentSpec) -> Option<&Self>;

    /// The assignment of this spec.
    fn assignment(self) -> AssignmentSpec;
}

macro_rules! kind_specs {
    ($($variant:ident($spec:ty),)*) => {
        $(
            impl KindSpec for $spec {
                fn of(spec: &AssignmentSpec) -> Option<&Self> {
                    match spec {
                        AssignmentSpec::$variant(s) => Some(s),
                        _ => None,
                    }
                }

                fn assignment(self) -> AssignmentSpec {
                    AssignmentSpec::$variant(self)
                }
            }
        )*
    };
}

kind_specs! {
    Scale(ScaleSpec),
    KafkaTopic(KafkaTopicSpec),
    Promfed(PromfedSpec),
    FederatedResource(FederatedResourceSpec),
    KafkaUser(KafkaUserSpec),
}

impl AssignmentSpec {
    /// A short name of the kind of work, for logs and metric labels.
    pub fn work(&self) -> &'static str {
        match self {
            Self::Scale(_) => "scale",
            Self::KafkaTopic(_) => "kafka_topic",
            Self::Promfed(_) => "promfed",
            Self::FederatedResource(_) => "federated_resource",
            Self::KafkaUser(_) => "kafka_user",
        }
    }

    /// Whether it tells the member to remove what an earlier assignment put there
    /// (`remove: true`): a removal, not a placement.
    pub fn removes(&self) -> bool {
        match self {
            Self::FederatedResource(r) => r.remove,
            Self::KafkaUser(u) => u.remove,
            _ => false,
        }
    }

    /// Whether it carries data that is never stored (a delivered Secret's), so the same
    /// revision read back from storage lacks something this one has.
    pub fn encloses_data(&self) -> bool {
        match self {
            Self::FederatedResource(r) => r.secrets.iter().any(|s| !s.data.is_empty()),
            Self::KafkaUser(u) => u
                .credential
                .as_ref()
                .is_some_and(|c| !c.salted_password.is_empty()),
            _ => false,
        }
    }

    /// As the protocol's `Assignment.spec`.
    pub fn to_proto(&self) -> pb::assignment::Spec {
        match self {
            Self::Scale(s) => pb::assignment::Spec::Scale(pb::ScaleAssignment {
                api_version: s.api_version.clone(),
                kind: s.kind.clone(),
                namespace: s.namespace.clone(),
                name: s.name.clone(),
                replicas: s.replicas,
                scale_request_id: s.scale_request_id.clone(),
            }),
            Self::KafkaTopic(t) => pb::assignment::Spec::KafkaTopic(pb::KafkaTopicAssignment {
                topic_name: t.topic_name.clone(),
                partitions: t.partitions,
                replication_factor: t.replication_factor,
                config: t.config.clone().into_iter().collect(),
                removed_config: t.removed_config.clone(),
                delete: t.delete,
            }),
            Self::Promfed(f) => pb::assignment::Spec::Promfed(pb::PromfedAssignment {
                tenant_namespaces: f.tenant_namespaces.clone(),
                tenant_labels: f.tenant_labels.clone().into_iter().collect(),
                r#match: f.matchers.clone(),
                scrape_interval: f.scrape_interval.clone(),
                scrape_timeout: f.scrape_timeout.clone(),
                sample_limit: f.sample_limit,
                reload_url: f.reload_url.clone(),
                config_map_namespace: f.config_map_namespace.clone(),
            }),
            Self::FederatedResource(r) => {
                pb::assignment::Spec::FederatedResource(pb::FederatedResourceAssignment {
                    manifests: r.manifests.iter().map(|m| m.to_string()).collect(),
                    namespace: r.namespace.clone(),
                    adopt: r.adopt,
                    orphan: r.orphan,
                    feedback: r
                        .feedback
                        .iter()
                        .map(|f| pb::FeedbackRule {
                            kind: f.kind.clone(),
                            name: f.name.clone(),
                            json_path: f.json_path.clone(),
                            r#as: f.as_.clone(),
                        })
                        .collect(),
                    prune: r.prune.iter().map(ManifestKey::to_proto).collect(),
                    remove: r.remove,
                    created: r.created.clone(),
                    secrets: r
                        .secrets
                        .iter()
                        .map(|s| pb::SecretPayload {
                            name: s.name.clone(),
                            r#type: s.type_.clone(),
                            hash: s.hash.clone(),
                            data: s.data.clone().into_iter().collect(),
                        })
                        .collect(),
                })
            }
            Self::KafkaUser(u) => pb::assignment::Spec::KafkaUser(pb::KafkaUserAssignment {
                username: u.username.clone(),
                credential: u.credential.as_ref().map(|c| pb::ScramCredential {
                    mechanism: c.mechanism.clone(),
                    iterations: c.iterations,
                    salt: c.salt.clone(),
                    salted_password: c.salted_password.clone(),
                    hash: c.hash.clone(),
                    secret_name: c.secret_name.clone(),
                    secret_key: c.secret_key.clone(),
                }),
                acls: u
                    .acls
                    .iter()
                    .map(|a| pb::KafkaAcl {
                        resource_type: a.resource_type.clone(),
                        resource_name: a.resource_name.clone(),
                        pattern_type: a.pattern_type.clone(),
                        operation: a.operation.clone(),
                        host: a.host.clone(),
                        permission: a.permission.clone(),
                    })
                    .collect(),
                quotas: u.quotas.clone().into_iter().collect(),
                remove: u.remove,
            }),
        }
    }

    /// From the protocol's `Assignment.spec`.
    pub fn from_proto(spec: pb::assignment::Spec) -> Self {
        match spec {
            pb::assignment::Spec::Scale(s) => Self::Scale(ScaleSpec {
                api_version: s.api_version,
                kind: s.kind,
                namespace: s.namespace,
                name: s.name,
                replicas: s.replicas,
                scale_request_id: s.scale_request_id,
            }),
            pb::assignment::Spec::KafkaTopic(t) => Self::KafkaTopic(KafkaTopicSpec {
                topic_name: t.topic_name,
                partitions: t.partitions,
                replication_factor: t.replication_factor,
                config: t.config.into_iter().collect(),
                removed_config: t.removed_config,
                delete: t.delete,
            }),
            pb::assignment::Spec::Promfed(f) => Self::Promfed(PromfedSpec {
                tenant_namespaces: f.tenant_namespaces,
                tenant_labels: f.tenant_labels.into_iter().collect(),
                matchers: f.r#match,
                scrape_interval: f.scrape_interval,
                scrape_timeout: f.scrape_timeout,
                sample_limit: f.sample_limit,
                reload_url: f.reload_url,
                config_map_namespace: f.config_map_namespace,
            }),
            pb::assignment::Spec::FederatedResource(r) => {
                Self::FederatedResource(FederatedResourceSpec {
                    // A manifest that is not JSON arrives as a string, which the agent
                    // reports as an invalid manifest instead of losing it.
                    manifests: r
                        .manifests
                        .into_iter()
                        .map(|m| serde_json::from_str(&m).unwrap_or(serde_json::Value::String(m)))
                        .collect(),
                    namespace: r.namespace,
                    adopt: r.adopt,
                    orphan: r.orphan,
                    feedback: r
                        .feedback
                        .into_iter()
                        .map(|f| FeedbackRule {
                            kind: f.kind,
                            name: f.name,
                            json_path: f.json_path,
                            as_: f.r#as,
                        })
                        .collect(),
                    prune: r.prune.into_iter().map(ManifestKey::from_proto).collect(),
                    remove: r.remove,
                    created: r.created,
                    secrets: r
                        .secrets
                        .into_iter()
                        .map(|s| DeliveredSecret {
                            name: s.name,
                            type_: s.r#type,
                            hash: s.hash,
                            data: s.data.into_iter().collect(),
                        })
                        .collect(),
                })
            }
            pb::assignment::Spec::KafkaUser(u) => Self::KafkaUser(KafkaUserSpec {
                username: u.username,
                credential: u.credential.map(|c| ScramCredential {
                    mechanism: c.mechanism,
                    iterations: c.iterations,
                    salt: c.salt,
                    salted_password: c.salted_password,
                    hash: c.hash,
                    secret_name: c.secret_name,
                    secret_key: c.secret_key,
                }),
                acls: u
                    .acls
                    .into_iter()
                    .map(|a| KafkaAcl {
                        resource_type: a.resource_type,
                        resource_name: a.resource_name,
                        pattern_type: a.pattern_type,
                        operation: a.operation,
                        host: a.host,
                        permission: a.permission,
                    })
                    .collect(),
                // NaN and infinities are no quota: dropped at the edge.
                quotas: u
                    .quotas
                    .into_iter()
                    .filter(|(_, v)| v.is_finite())
                    .collect(),
                remove: u.remove,
            }),
        }
    }
}

/// Observed replica counts of a Deployment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleObserved {
    /// `spec.replicas`.
    pub desired: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.updatedReplicas`.
    pub updated: i32,
    /// `status.observedGeneration`.
    pub observed_generation: i64,
    /// Scale request id stamped on the Deployment ("" when none).
    pub scale_request_id: String,
    /// Replicas of the Deployment's pod template that fit in the member now, as its agent
    /// estimates them (its own pods counted as room); `None` before the agent's first count
    /// of its nodes and pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitting_replicas: Option<i64>,
}

/// Observed state of a Kafka topic.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaTopicObserved {
    /// Partition count the broker reports.
    pub partitions: i32,
    /// Replication factor the broker reports.
    pub replication_factor: i32,
    /// Whether the topic exists (false once a deletion completed).
    #[serde(default)]
    pub exists: bool,
}

/// Observed state of a rendered Prometheus federation config.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromfedObserved {
    /// SHA-256 of the rendered config, hex.
    pub config_hash: String,
    /// Number of federation jobs (tenants).
    pub jobs: i32,
    /// Whether Prometheus confirmed loading it.
    pub reloaded: bool,
}

/// Health of a delivered object.
pub mod health {
    /// Healthy by its kind's rule.
    pub const HEALTHY: &str = "Healthy";
    /// There, not healthy yet.
    pub const PROGRESSING: &str = "Progressing";
    /// Not in the cluster.
    pub const MISSING: &str = "Missing";
}

/// One delivered object as the agent found it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestObserved {
    /// Which object.
    pub object: ManifestKey,
    /// Its state.
    pub state: PlacementState,
    /// [`health`]: Healthy, Progressing or Missing.
    pub health: String,
    /// Detail for the state.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// What an agent observed of a FederatedResource's objects in its cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FederatedResourceObserved {
    /// Every manifest of the assignment, in apply order.
    pub manifests: Vec<ManifestObserved>,
    /// Feedback values by their `as` name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub feedback: BTreeMap<String, String>,
    /// Owned fields changed out of band and restored, since the agent started.
    #[serde(default)]
    pub drift_repairs: i64,
    /// When the last drift was repaired, Unix milliseconds (0: never).
    #[serde(default)]
    pub last_drift_unix_millis: i64,
    /// The assignment asked for removal and nothing of it is left.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
}

/// What an agent observed of a Kafka user.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaUserObserved {
    /// Hash of the credential the agent last upserted and the brokers hold ("": none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub credential_hash: String,
    /// ACL bindings of the principal on the brokers that the assignment names.
    #[serde(default)]
    pub acls: i32,
    /// Quota keys set on the brokers for the user.
    #[serde(default)]
    pub quotas: i32,
    /// The assignment asked for removal and nothing of the user is left.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
    /// Why the brokers cannot keep the user's ACLs ("": they can), e.g. no authorizer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub acls_unkept: String,
}

/// What an agent observed of an assigned object: one variant per kind, or nothing (no
/// object to look at).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Observed {
    /// No object, or nothing observed.
    #[default]
    Nothing,
    /// A scaled Deployment (CrossClusterScalePolicy).
    // stored name; renaming it would orphan stored records
    #[serde(rename = "replicas")]
    Scale(ScaleObserved),
    /// A Kafka topic (FederatedKafkaTopic).
    // stored name; renaming it would orphan stored records
    #[serde(rename = "topic")]
    KafkaTopic(KafkaTopicObserved),
    /// A Prometheus federation config (PrometheusFederation).
    // stored name; renaming it would orphan stored records
    #[serde(rename = "federationConfig")]
    Promfed(PromfedObserved),
    /// The objects of a FederatedResource.
    FederatedResource(FederatedResourceObserved),
    /// A Kafka user (FederatedKafkaUser).
    KafkaUser(KafkaUserObserved),
}

impl Observed {
    /// As the protocol's `StatusReport.observed`.
    pub fn to_proto(&self) -> Option<pb::status_report::Observed> {
        Some(match self {
            Self::Nothing => return None,
            Self::Scale(r) => pb::status_report::Observed::Scale(pb::ScaleStatus {
                desired_replicas: r.desired,
                ready_replicas: r.ready,
                updated_replicas: r.updated,
                observed_generation: r.observed_generation,
                scale_request_id: r.scale_request_id.clone(),
                fitting_replicas: r.fitting_replicas,
            }),
            Self::KafkaTopic(t) => pb::status_report::Observed::KafkaTopic(pb::KafkaTopicStatus {
                partitions: t.partitions,
                replication_factor: t.replication_factor,
                exists: t.exists,
            }),
            Self::Promfed(f) => pb::status_report::Observed::Promfed(pb::PromfedStatus {
                config_hash: f.config_hash.clone(),
                jobs: f.jobs,
                reloaded: f.reloaded,
            }),
            Self::FederatedResource(r) => {
                pb::status_report::Observed::FederatedResource(pb::FederatedResourceStatus {
                    manifests: r
                        .manifests
                        .iter()
                        .map(|m| pb::ManifestStatus {
                            object: Some(m.object.to_proto()),
                            state: state_to_proto(m.state) as i32,
                            health: m.health.clone(),
                            message: m.message.clone(),
                        })
                        .collect(),
                    feedback: r.feedback.clone().into_iter().collect(),
                    drift_repairs: r.drift_repairs,
                    last_drift_unix_millis: r.last_drift_unix_millis,
                    removed: r.removed,
                })
            }
            Self::KafkaUser(u) => pb::status_report::Observed::KafkaUser(pb::KafkaUserStatus {
                credential_hash: u.credential_hash.clone(),
                acls: u.acls,
                quotas: u.quotas,
                removed: u.removed,
                acls_unkept: u.acls_unkept.clone(),
            }),
        })
    }

    /// From the protocol's `StatusReport.observed`.
    pub fn from_proto(observed: Option<pb::status_report::Observed>) -> Self {
        match observed {
            None => Self::Nothing,
            Some(pb::status_report::Observed::Scale(r)) => Self::Scale(ScaleObserved {
                desired: r.desired_replicas,
                ready: r.ready_replicas,
                updated: r.updated_replicas,
                observed_generation: r.observed_generation,
                scale_request_id: r.scale_request_id,
                fitting_replicas: r.fitting_replicas,
            }),
            Some(pb::status_report::Observed::KafkaTopic(t)) => {
                Self::KafkaTopic(KafkaTopicObserved {
                    partitions: t.partitions,
                    replication_factor: t.replication_factor,
                    exists: t.exists,
                })
            }
            Some(pb::status_report::Observed::Promfed(f)) => Self::Promfed(PromfedObserved {
                config_hash: f.config_hash,
                jobs: f.jobs,
                reloaded: f.reloaded,
            }),
            Some(pb::status_report::Observed::FederatedResource(r)) => {
                Self::FederatedResource(FederatedResourceObserved {
                    manifests: r
                        .manifests
                        .into_iter()
                        .map(|m| ManifestObserved {
                            object: m.object.map(ManifestKey::from_proto).unwrap_or_default(),
                            state: state_from_proto(m.state).unwrap_or(PlacementState::Pending),
                            health: m.health,
                            message: m.message,
                        })
                        .collect(),
                    feedback: r.feedback.into_iter().collect(),
                    drift_repairs: r.drift_repairs,
                    last_drift_unix_millis: r.last_drift_unix_millis,
                    removed: r.removed,
                })
            }
            Some(pb::status_report::Observed::KafkaUser(u)) => Self::KafkaUser(KafkaUserObserved {
                credential_hash: u.credential_hash,
                acls: u.acls,
                quotas: u.quotas,
                removed: u.removed,
                acls_unkept: u.acls_unkept,
            }),
        }
    }

    /// The replica counts, when this observes a Deployment.
    pub fn scale(&self) -> Option<&ScaleObserved> {
        match self {
            Self::Scale(r) => Some(r),
            _ => None,
        }
    }
}

/// The protocol's spelling of a placement state.
pub fn state_to_proto(state: PlacementState) -> pb::PlacementState {
    match state {
        PlacementState::Pending => pb::PlacementState::Pending,
        PlacementState::Synced => pb::PlacementState::Synced,
        PlacementState::TargetNotFound => pb::PlacementState::TargetNotFound,
        PlacementState::Conflict => pb::PlacementState::Conflict,
        PlacementState::Unavailable => pb::PlacementState::Unavailable,
        PlacementState::Error => pb::PlacementState::Error,
    }
}

/// A placement state from the protocol; `None` for an unset or unknown value.
pub fn state_from_proto(state: i32) -> Option<PlacementState> {
    Some(match pb::PlacementState::try_from(state).ok()? {
        pb::PlacementState::Unspecified => return None,
        pb::PlacementState::Pending => PlacementState::Pending,
        pb::PlacementState::Synced => PlacementState::Synced,
        pb::PlacementState::TargetNotFound => PlacementState::TargetNotFound,
        pb::PlacementState::Conflict => PlacementState::Conflict,
        pb::PlacementState::Unavailable => PlacementState::Unavailable,
        pb::PlacementState::Error => PlacementState::Error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placed_kinds_read_and_write_the_names_keys_and_records_use() {
        for kind in PlacedKind::ALL {
            assert_eq!(kind.as_str().parse::<PlacedKind>(), Ok(kind));
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::Value::String(kind.as_str().to_owned())
            );
        }
        let r = PlacedRef::new(PlacedKind::FederatedKafkaTopic, "ns", "events");
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"kind":"FederatedKafkaTopic","namespace":"ns","name":"events"}"#
        );
        assert_eq!(PlacedRef::from_proto(&r.to_proto()), Ok(r));
    }

    #[test]
    fn an_unknown_placed_kind_is_an_error_from_the_wire_and_from_storage() {
        assert_eq!(
            "FederatedKafkaGroup".parse::<PlacedKind>(),
            Err(UnknownPlacedKind("FederatedKafkaGroup".into()))
        );
        let wire = pb::ObjectRef {
            kind: "FederatedKafkaGroup".into(),
            namespace: "ns".into(),
            name: "app".into(),
        };
        assert!(PlacedRef::from_proto(&wire).is_err());
        let stored = r#"{"kind":"FederatedKafkaGroup","namespace":"ns","name":"app"}"#;
        assert!(serde_json::from_str::<PlacedRef>(stored).is_err());
    }

    #[test]
    fn every_assignment_spec_survives_the_wire() {
        let specs = [
            AssignmentSpec::Scale(ScaleSpec::deployment("prod", "web", 7, "01J")),
            AssignmentSpec::KafkaTopic(KafkaTopicSpec {
                topic_name: "events".into(),
                partitions: 12,
                replication_factor: 3,
                config: [("retention.ms".to_owned(), "1000".to_owned())].into(),
                removed_config: vec!["segment.ms".into()],
                delete: true,
            }),
            AssignmentSpec::Promfed(PromfedSpec {
                tenant_namespaces: vec!["team-a".into()],
                tenant_labels: [("tier".to_owned(), "gold".to_owned())].into(),
                matchers: vec!["{job=\"x\"}".into()],
                scrape_interval: "30s".into(),
                scrape_timeout: "10s".into(),
                sample_limit: 5,
                reload_url: "http://p:9090/-/reload".into(),
                config_map_namespace: "monitoring".into(),
            }),
            AssignmentSpec::FederatedResource(FederatedResourceSpec {
                manifests: vec![serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "c"}, "data": {"k": "v"}
                })],
                namespace: "team".into(),
                adopt: true,
                orphan: true,
                feedback: vec![FeedbackRule {
                    kind: "StatefulSet".into(),
                    name: "db".into(),
                    json_path: ".status.readyReplicas".into(),
                    as_: "ready".into(),
                }],
                prune: vec![ManifestKey {
                    api_version: "v1".into(),
                    kind: "Service".into(),
                    namespace: "team".into(),
                    name: "old".into(),
                }],
                remove: true,
                secrets: vec![DeliveredSecret {
                    name: "db".into(),
                    type_: "Opaque".into(),
                    hash: "ab".into(),
                    data: [("password".to_owned(), b"s3cret".to_vec())].into(),
                }],
                created: "2026-01-02T03:04:05Z".into(),
            }),
            AssignmentSpec::KafkaUser(user_spec()),
        ];
        for spec in specs {
            assert_eq!(AssignmentSpec::from_proto(spec.to_proto()), spec);
        }
    }

    #[test]
    fn every_observation_survives_the_wire() {
        let all = [
            Observed::Nothing,
            Observed::Scale(ScaleObserved {
                desired: 3,
                ready: 2,
                updated: 3,
                observed_generation: 4,
                scale_request_id: "01J".into(),
                fitting_replicas: Some(17),
            }),
            Observed::KafkaTopic(KafkaTopicObserved {
                partitions: 12,
                replication_factor: 3,
                exists: true,
            }),
            Observed::Promfed(PromfedObserved {
                config_hash: "ab".into(),
                jobs: 2,
                reloaded: true,
            }),
            Observed::FederatedResource(FederatedResourceObserved {
                manifests: vec![ManifestObserved {
                    object: ManifestKey {
                        api_version: "apps/v1".into(),
                        kind: "Deployment".into(),
                        namespace: "team".into(),
                        name: "web".into(),
                    },
                    state: PlacementState::Conflict,
                    health: health::PROGRESSING.into(),
                    message: "exists".into(),
                }],
                feedback: [("ready".to_owned(), "3".to_owned())].into(),
                drift_repairs: 2,
                last_drift_unix_millis: 17,
                removed: true,
            }),
            Observed::KafkaUser(KafkaUserObserved {
                credential_hash: "ab12".into(),
                acls: 3,
                quotas: 2,
                removed: true,
                acls_unkept: "no authorizer".into(),
            }),
        ];
        for o in all {
            assert_eq!(Observed::from_proto(o.to_proto()), o);
        }
    }

    fn user_spec() -> KafkaUserSpec {
        let (salt, salted) = (b"salt".to_vec(), b"salted-password-bytes".to_vec());
        KafkaUserSpec {
            username: "orders-writer".into(),
            credential: Some(ScramCredential {
                mechanism: SCRAM_SHA_512.into(),
                iterations: 8192,
                hash: ScramCredential::hash_of(SCRAM_SHA_512, 8192, &salt, &salted),
                salt,
                salted_password: salted,
                secret_name: "orders-writer".into(),
                secret_key: "password".into(),
            }),
            acls: vec![KafkaAcl {
                resource_type: "Topic".into(),
                resource_name: "orders.".into(),
                pattern_type: "Prefixed".into(),
                operation: "Write".into(),
                host: "*".into(),
                permission: "Allow".into(),
            }],
            quotas: [("producer_byte_rate".to_owned(), 1048576.0)].into(),
            remove: true,
        }
    }

    #[test]
    fn a_salted_password_is_never_stored_nor_shown_and_its_hash_checks_it() {
        let spec = AssignmentSpec::KafkaUser(user_spec());
        assert!(spec.encloses_data());
        let shown = format!("{spec:?}");
        assert!(!shown.contains("salted-password-bytes"), "{shown}");
        assert!(
            !shown.contains(&format!("{:?}", b"salted-password-bytes")),
            "{shown}"
        );
        let stored = serde_json::to_string(&spec).unwrap();
        assert!(!stored.contains("salted"), "{stored}");
        let read: AssignmentSpec = serde_json::from_str(&stored).unwrap();
        assert!(!read.encloses_data());
        let AssignmentSpec::KafkaUser(read) = read else {
            unreachable!()
        };
        let credential = read.credential.unwrap();
        assert_eq!(credential.salt, b"salt");
        assert!(!credential.has_salted_password());
        let AssignmentSpec::KafkaUser(mut sent) = spec else {
            unreachable!()
        };
        let sent = sent.credential.as_mut().unwrap();
        assert!(sent.has_salted_password());
        sent.salted_password[0] ^= 1;
        assert!(
            !sent.has_salted_password(),
            "a changed salted password fails the hash"
        );
    }

    #[test]
    fn a_user_quota_that_is_not_a_number_is_dropped_at_the_edge() {
        let mut wire = AssignmentSpec::KafkaUser(user_spec()).to_proto();
        let pb::assignment::Spec::KafkaUser(u) = &mut wire else {
            unreachable!()
        };
        u.quotas.insert("request_percentage".into(), f64::NAN);
        let AssignmentSpec::KafkaUser(read) = AssignmentSpec::from_proto(wire) else {
            unreachable!()
        };
        assert_eq!(
            read.quotas.keys().collect::<Vec<_>>(),
            ["producer_byte_rate"]
        );
    }

    #[test]
    fn variants_keep_the_names_stored_records_were_written_with() {
        let topic = AssignmentSpec::KafkaTopic(KafkaTopicSpec {
            topic_name: "events".into(),
            partitions: 1,
            replication_factor: 1,
            config: BTreeMap::new(),
            removed_config: Vec::new(),
            delete: false,
        });
        let promfed = AssignmentSpec::Promfed(PromfedSpec::default());
        let key = |v: serde_json::Value| v.as_object().unwrap().keys().next().unwrap().clone();
        assert_eq!(key(serde_json::to_value(&topic).unwrap()), "topic");
        assert_eq!(key(serde_json::to_value(&promfed).unwrap()), "federation");
        let observed = [
            (Observed::Scale(ScaleObserved::default()), "replicas"),
            (Observed::KafkaTopic(KafkaTopicObserved::default()), "topic"),
            (
                Observed::Promfed(PromfedObserved::default()),
                "federationConfig",
            ),
        ];
        for (o, name) in observed {
            assert_eq!(key(serde_json::to_value(&o).unwrap()), name);
        }
    }

    #[test]
    fn a_delivered_secrets_data_is_never_stored_nor_shown() {
        let data = BTreeMap::from([("password".to_owned(), b"s3cret-value".to_vec())]);
        let secret = DeliveredSecret {
            name: "db".into(),
            type_: "Opaque".into(),
            hash: DeliveredSecret::hash_of("Opaque", &data),
            data,
        };
        let spec = AssignmentSpec::FederatedResource(FederatedResourceSpec {
            secrets: vec![secret.clone()],
            ..Default::default()
        });
        assert!(spec.encloses_data());
        let stored = serde_json::to_string(&spec).unwrap();
        assert!(
            !stored.contains("s3cret") && stored.contains(&secret.hash),
            "{stored}"
        );
        let read: AssignmentSpec = serde_json::from_str(&stored).unwrap();
        assert!(!read.encloses_data());
        assert!(!format!("{spec:?}").contains("s3cret"));
        assert!(secret.has_data());
        let AssignmentSpec::FederatedResource(r) = read else {
            unreachable!()
        };
        assert!(!r.secrets[0].has_data());
        assert_ne!(
            DeliveredSecret::hash_of("Opaque", &secret.data),
            DeliveredSecret::hash_of("kubernetes.io/basic-auth", &secret.data)
        );
    }

    #[test]
    fn every_state_survives_the_wire_and_unset_is_none() {
        for s in [
            PlacementState::Pending,
            PlacementState::Synced,
            PlacementState::TargetNotFound,
            PlacementState::Conflict,
            PlacementState::Unavailable,
            PlacementState::Error,
        ] {
            assert_eq!(state_from_proto(state_to_proto(s) as i32), Some(s));
        }
        assert_eq!(state_from_proto(0), None);
        assert_eq!(state_from_proto(99), None);
    }
}
