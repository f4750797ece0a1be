//! The one way the hub and the agent watch the Kubernetes API: only types whose every
//! stored object decodes.
//!
//! A kube-runtime watch of a typed kind fails as a whole — its list never completes, its
//! cache stays empty — when a single stored object does not fit the Rust type (an int32
//! field holding 3000000000, written while the CRD's schema allowed it). A controller that
//! reads such a cache acts as if the kind had no objects at all. So every watch goes through
//! [`watcher`], which accepts only [`AlwaysDecodes`] types: the built-in kinds (the API server
//! validates them against the very schema the Rust types are generated from), objects kept
//! as JSON ([`DynamicObject`], the hub's `Lenient`) and metadata alone. Accord's own kinds
//! do not implement it, so watching one typed does not compile; clippy's
//! `disallowed-methods` (clippy.toml) keeps kube-runtime's own `watcher` out of the code.

use std::fmt::Debug;

use futures::Stream;
use kube::Api;
use kube::Resource;
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher as kube_watcher;
use serde::de::DeserializeOwned;

/// A type every object the API server returns for it decodes into.
pub trait AlwaysDecodes {}

impl AlwaysDecodes for DynamicObject {}

impl<K: Resource> AlwaysDecodes for PartialObjectMeta<K> {}

/// Built-in kinds: the API server validates them against the OpenAPI schema the
/// k8s-openapi types are generated from.
macro_rules! built_in {
    ($($ty:ty),* $(,)?) => {
        $(impl AlwaysDecodes for $ty {})*
    };
}

built_in!(
    k8s_openapi::api::apps::v1::Deployment,
    k8s_openapi::api::apps::v1::StatefulSet,
    k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler,
    k8s_openapi::api::core::v1::ConfigMap,
    k8s_openapi::api::core::v1::Event,
    k8s_openapi::api::core::v1::Namespace,
    k8s_openapi::api::core::v1::Secret,
    k8s_openapi::api::core::v1::Service,
    k8s_openapi::api::coordination::v1::Lease,
    k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
);

/// Watches what `api` and `config` select (kube-runtime's watcher, for a type that always
/// decodes).
pub fn watcher<K>(
    api: Api<K>,
    config: kube_watcher::Config,
) -> impl Stream<Item = kube_watcher::Result<kube_watcher::Event<K>>> + Send
where
    K: AlwaysDecodes + Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    #[allow(clippy::disallowed_methods)]
    kube_watcher::watcher(api, config)
}
