//! Accord's custom resources: group `accord.io`, version `v1beta1` (the storage version;
//! `v1alpha1` is still served, deprecated, and converted by the hub's webhook: see
//! [`versions`]).
//!
//! Each kind is a `kube::CustomResource` whose doc comments become `kubectl explain` text and
//! whose `x-kubernetes-validations` (CEL) rules let the API server itself reject bad input
//! with a message a user understands. The same rules have Rust-side counterparts in
//! [`validate`], which the hub applies before acting on an object (in case it reached the
//! store some other way, e.g. with validation disabled or from an older CRD version).
//!
//! The generated CRD YAML is committed under `crds/yaml/` (`accord-hub crds --out-dir
//! crds/yaml`); `tests/drift.rs` fails when it no longer matches these types.

#![forbid(unsafe_code)]
// kube's `printcolumn(...)` repeats `type_ = ".."` per column, which this lint misreads.
#![allow(clippy::duplicated_attributes)]

pub mod bounds;
pub mod conditions;
pub mod conversion;
pub mod duration;
pub mod federated_resource;
pub mod kafka_topic;
pub mod kafka_user;
pub mod kinds;
pub mod managed_cluster;
pub mod messages;
pub mod placement;
pub mod promfed;
pub mod reference;
pub mod rollout;
pub mod scale;
pub mod summary;
pub mod validate;
pub mod versions;

pub use federated_resource::{
    FederatedResource, FederatedResourceSpec, FederatedResourceStatus, ResourcePlacement,
};
pub use kafka_topic::{
    FederatedKafkaTopic, FederatedKafkaTopicSpec, FederatedKafkaTopicStatus, KafkaTopicPolicy,
    KafkaTopicPolicySpec, KafkaTopicPolicyStatus, TopicPlacement,
};
pub use kafka_user::{
    FederatedKafkaUser, FederatedKafkaUserSpec, FederatedKafkaUserStatus, KafkaUserPlacement,
};
pub use managed_cluster::{ManagedCluster, ManagedClusterSpec, ManagedClusterStatus};
pub use placement::ClusterPlacement;
pub use promfed::{
    FederationPlacement, PrometheusFederation, PrometheusFederationSpec, PrometheusFederationStatus,
};
pub use scale::{
    CrossClusterScalePolicy, CrossClusterScalePolicySpec, CrossClusterScalePolicyStatus, Placement,
    PlacementState,
};
pub use summary::{
    HasPlacedStatus, LeftOut, LeftOutReason, PlacedStatus, PlacementSummary, SelectionSummary,
    StatusLimits,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// API group of every Accord resource.
pub const GROUP: &str = "accord.io";
/// API version of every Accord resource the hub reads and writes: the storage version.
pub const VERSION: &str = "v1beta1";
/// Category shared by every Accord kind, so `kubectl get accord` lists them all.
pub const CATEGORY: &str = "accord";

/// Annotation stamped on every member object an agent scales: the id of the scaling decision.
pub const SCALE_REQUEST_ANNOTATION: &str = "accord.io/scale-request-id";
/// Label on objects Accord creates in member clusters, naming the placed object that owns them.
pub const OWNED_BY_LABEL: &str = "accord.io/owned-by";
/// Label that marks a tenant's Prometheus Service as a federation source.
pub const FEDERATION_SOURCE_LABEL: &str = "accord.io/federation-source";
/// Server-side apply field manager of the agent.
pub const AGENT_FIELD_MANAGER: &str = "accord-agent";
/// Value of [`OWNED_BY_LABEL`] on objects a FederatedResource delivered (and namespaces it
/// created for them).
pub const DELIVERED_BY_FEDERATED_RESOURCE: &str = "federatedresource";
/// Annotation on a delivered object naming its FederatedResource: `<namespace>/<name>` on
/// the management cluster.
pub const FEDERATED_RESOURCE_ANNOTATION: &str = "accord.io/federated-resource";
/// Annotation on a delivered object: its FederatedResource's `creationTimestamp` (RFC 3339).
/// Of two FederatedResources delivering one object to a cluster, the older keeps it.
pub const FEDERATED_RESOURCE_CREATED_ANNOTATION: &str = "accord.io/federated-resource-created";
/// Annotation on a delivered object: SHA-256 of the manifest last applied to it.
pub const MANIFEST_HASH_ANNOTATION: &str = "accord.io/manifest-hash";
/// Server-side apply field manager of delivered objects (FederatedResource).
pub const DELIVERY_FIELD_MANAGER: &str = "accord";
/// Server-side apply field manager of the hub.
pub const HUB_FIELD_MANAGER: &str = "accord-hub";

/// Every CRD Accord defines, in a stable order, each serving v1beta1 (storage) and the
/// deprecated v1alpha1 ([`versions::with_served_versions`]).
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    kinds::all()
        .iter()
        .map(kinds::Kind::crd)
        .map(versions::with_served_versions)
        .collect()
}

/// [`all_crds`] with `spec.conversion` naming the hub's webhook Service in `namespace` at
/// `port` (what `accord-hub crds --namespace --webhook-port` prints; `install` renders the
/// same Service from its own options).
pub fn all_crds_served_at(namespace: &str, port: i32) -> Vec<CustomResourceDefinition> {
    all_crds()
        .into_iter()
        .map(|mut crd| {
            crd.spec.conversion = Some(versions::webhook_conversion(
                versions::service_client_config(namespace, versions::DEFAULT_SERVICE_NAME, port),
            ));
            crd
        })
        .collect()
}

/// File name under `crds/yaml/` for a CRD: `<plural>.<group>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// Renders one CRD as YAML, the exact bytes committed under `crds/yaml/`.
pub fn render_crd_yaml(
    crd: &CustomResourceDefinition,
) -> Result<String, serde_saphyr::SerializeError> {
    let body = serde_saphyr::to_string(crd)?;
    Ok(format!(
        "# Generated by `accord-hub crds --out-dir crds/yaml`; do not edit.\n{body}"
    ))
}

/// Renders every CRD as one multi-document YAML stream.
pub fn render_all_crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    render_crds_yaml(&all_crds())
}

/// Renders `crds` as one multi-document YAML stream (what `accord-hub crds` prints).
pub fn render_crds_yaml(
    crds: &[CustomResourceDefinition],
) -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for crd in crds {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(crd)?);
    }
    Ok(out)
}

#[cfg(feature = "testdata")]
pub mod testdata;
