//! Accord's kinds, listed once. A new kind is one line in [`all`]; the CRDs
//! ([`crate::all_crds`]), the install's RBAC on them, the validation and decoding tests and
//! the fuzz tests derive their lists from it.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::object::HasSpec;
use kube::{CustomResourceExt, Resource};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::validate::{Validate, ValidationErrors};

/// One kind: its name, its CRD and how to decode and validate its objects untyped.
#[derive(Clone, Copy)]
pub struct Kind {
    name: fn() -> String,
    crd: fn() -> CustomResourceDefinition,
    validate_object: fn(&Value) -> Result<Result<(), ValidationErrors>, serde_json::Error>,
    validate_spec: fn(Value) -> Result<Result<(), ValidationErrors>, serde_json::Error>,
}

impl std::fmt::Debug for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Kind").field(&self.name()).finish()
    }
}

impl Kind {
    /// The kind of `K`.
    pub fn of<K>() -> Self
    where
        K: CustomResourceExt + Resource<DynamicType = ()> + HasSpec + DeserializeOwned,
        K::Spec: Validate + DeserializeOwned,
    {
        Self {
            name: || K::kind(&()).into_owned(),
            crd: K::crd,
            validate_object: |object| {
                serde_json::from_value::<K>(object.clone()).map(|o| o.spec().validate())
            },
            validate_spec: |spec| serde_json::from_value::<K::Spec>(spec).map(|s| s.validate()),
        }
    }

    /// The kind's name (`FederatedResource`).
    pub fn name(&self) -> String {
        (self.name)()
    }

    /// Its CRD, as the type declares it (every version it serves is added by
    /// [`crate::all_crds`]).
    pub fn crd(&self) -> CustomResourceDefinition {
        (self.crd)()
    }

    /// Decodes `object` (spec and status) as this kind and validates its spec: the
    /// validation's answer, or the decoding error.
    pub fn validate_object(
        &self,
        object: &Value,
    ) -> Result<Result<(), ValidationErrors>, serde_json::Error> {
        (self.validate_object)(object)
    }

    /// Decodes `spec` as this kind's spec and validates it: the validation's answer, or the
    /// decoding error.
    pub fn validate_spec(
        &self,
        spec: Value,
    ) -> Result<Result<(), ValidationErrors>, serde_json::Error> {
        (self.validate_spec)(spec)
    }
}

/// Every kind, in the order the CRDs are listed.
pub fn all() -> [Kind; 7] {
    [
        Kind::of::<crate::ManagedCluster>(),
        Kind::of::<crate::CrossClusterScalePolicy>(),
        Kind::of::<crate::FederatedKafkaTopic>(),
        Kind::of::<crate::KafkaTopicPolicy>(),
        Kind::of::<crate::PrometheusFederation>(),
        Kind::of::<crate::FederatedResource>(),
        Kind::of::<crate::FederatedKafkaUser>(),
    ]
}

/// The kind named `name`, if it is one of ours.
pub fn named(name: &str) -> Option<Kind> {
    all().into_iter().find(|k| k.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_once_by_its_crds_name() {
        let names: Vec<String> = all().iter().map(Kind::name).collect();
        let crds: Vec<String> = all().iter().map(|k| k.crd().spec.names.kind).collect();
        assert_eq!(names, crds);
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        assert!(named("FederatedResource").is_some());
        assert!(named("FederatedKafkaGroup").is_none());
    }
}
