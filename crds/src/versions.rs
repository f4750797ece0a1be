//! The versions every Accord CRD serves, and how the API server converts between them.
//!
//! - `v1beta1` ([`crate::VERSION`]) is served and is the storage version: the Rust types of
//!   this crate are its schema, and the hub reads and writes nothing else.
//! - `v1alpha1` ([`DEPRECATED_VERSION`]) is still served, deprecated (`kubectl` prints the
//!   [`deprecation_warning`] on every request for it). Its schema is frozen: it is the
//!   CRD of the last release that stored v1alpha1 (`crds/v1alpha1/`), never regenerated,
//!   so an old manifest means what it meant.
//!
//! The API server converts between them by calling the hub's conversion webhook
//! ([`CONVERSION_PATH`], [`crate::conversion`]); `spec.conversion` names it through the
//! Service `accord-system/accord-hub` by default. `accord-hub install` renders it for the
//! namespace and port installed, and every hub replica keeps its `caBundle` equal to the
//! hub CA (as for the admission webhooks).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, CustomResourceDefinitionVersion,
    ServiceReference, WebhookClientConfig, WebhookConversion,
};

/// The served, deprecated version.
pub const DEPRECATED_VERSION: &str = "v1alpha1";
/// Path of the hub's conversion webhook.
pub const CONVERSION_PATH: &str = "/convert";
/// Namespace of the Service that `spec.conversion` names by default.
pub const DEFAULT_SERVICE_NAMESPACE: &str = "accord-system";
/// Name of the Service that `spec.conversion` names by default (the hub's webhook Service).
pub const DEFAULT_SERVICE_NAME: &str = "accord-hub";
/// Port of the Service that `spec.conversion` names by default (the hub's webhook port).
pub const DEFAULT_SERVICE_PORT: i32 = 9443;

/// The frozen v1alpha1 CRDs, by CRD name.
const FROZEN_V1ALPHA1: [(&str, &str); 7] = [
    (
        "managedclusters.accord.io",
        include_str!("../v1alpha1/managedclusters.accord.io.yaml"),
    ),
    (
        "crossclusterscalepolicies.accord.io",
        include_str!("../v1alpha1/crossclusterscalepolicies.accord.io.yaml"),
    ),
    (
        "federatedkafkatopics.accord.io",
        include_str!("../v1alpha1/federatedkafkatopics.accord.io.yaml"),
    ),
    (
        "kafkatopicpolicies.accord.io",
        include_str!("../v1alpha1/kafkatopicpolicies.accord.io.yaml"),
    ),
    (
        "prometheusfederations.accord.io",
        include_str!("../v1alpha1/prometheusfederations.accord.io.yaml"),
    ),
    (
        "federatedresources.accord.io",
        include_str!("../v1alpha1/federatedresources.accord.io.yaml"),
    ),
    (
        "federatedkafkausers.accord.io",
        include_str!("../v1alpha1/federatedkafkausers.accord.io.yaml"),
    ),
];

/// The frozen CRD of `name` as it was when v1alpha1 was its only version, if there is one.
pub fn frozen_v1alpha1(name: &str) -> Option<CustomResourceDefinition> {
    let (_, yaml) = FROZEN_V1ALPHA1.iter().find(|(n, _)| *n == name)?;
    // Compiled in and parsed by this crate's tests: an error here is a build defect.
    Some(serde_saphyr::from_str(yaml).expect("a frozen v1alpha1 CRD parses"))
}

/// The text `kubectl` prints for a request in the deprecated version of `kind`.
pub fn deprecation_warning(kind: &str) -> String {
    format!(
        "accord.io/{DEPRECATED_VERSION} {kind} is deprecated; use accord.io/{} {kind}",
        crate::VERSION
    )
}

/// `crd` (the storage version, generated from this crate's types) with the frozen
/// v1alpha1 served beside it and conversion by the webhook at the default Service.
pub fn with_served_versions(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let name = crd.metadata.name.clone().unwrap_or_default();
    if let Some(frozen) = frozen_v1alpha1(&name)
        && let Some(mut old) = frozen.spec.versions.into_iter().next()
    {
        old.served = true;
        old.storage = false;
        old.deprecated = Some(true);
        old.deprecation_warning = Some(deprecation_warning(&crd.spec.names.kind));
        crd.spec.versions.push(old);
    }
    crd.spec.conversion = Some(webhook_conversion(service_client_config(
        DEFAULT_SERVICE_NAMESPACE,
        DEFAULT_SERVICE_NAME,
        DEFAULT_SERVICE_PORT,
    )));
    crd
}

/// `spec.conversion` that sends ConversionReview v1 to `client_config`.
pub fn webhook_conversion(client_config: WebhookClientConfig) -> CustomResourceConversion {
    CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            client_config: Some(client_config),
            conversion_review_versions: vec!["v1".into()],
        }),
    }
}

/// A client config naming the conversion path of the Service `namespace/name:port`.
pub fn service_client_config(namespace: &str, name: &str, port: i32) -> WebhookClientConfig {
    WebhookClientConfig {
        service: Some(ServiceReference {
            namespace: namespace.into(),
            name: name.into(),
            path: Some(CONVERSION_PATH.into()),
            port: Some(port),
        }),
        ..WebhookClientConfig::default()
    }
}

/// The served versions of `crd`, storage version first.
pub fn served(crd: &CustomResourceDefinition) -> Vec<&CustomResourceDefinitionVersion> {
    let mut versions: Vec<_> = crd.spec.versions.iter().filter(|v| v.served).collect();
    versions.sort_by_key(|v| !v.storage);
    versions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crd_serves_v1beta1_as_storage_and_the_frozen_v1alpha1_deprecated() {
        for crd in crate::all_crds() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let versions = served(&crd);
            assert_eq!(versions.len(), 2, "{name}");
            assert_eq!(versions[0].name, crate::VERSION, "{name}");
            assert!(versions[0].storage, "{name}");
            assert_eq!(versions[1].name, DEPRECATED_VERSION, "{name}");
            assert!(!versions[1].storage, "{name}");
            assert_eq!(versions[1].deprecated, Some(true), "{name}");
            assert!(
                versions[1]
                    .deprecation_warning
                    .as_deref()
                    .is_some_and(|w| w.contains(&crd.spec.names.kind)),
                "{name}"
            );
            let conversion = crd.spec.conversion.as_ref().expect("conversion");
            assert_eq!(conversion.strategy, "Webhook");
            let webhook = conversion.webhook.as_ref().expect("webhook");
            assert_eq!(webhook.conversion_review_versions, ["v1"]);
            let service = webhook.client_config.as_ref().unwrap().service.as_ref();
            assert_eq!(
                service.and_then(|s| s.path.as_deref()),
                Some(CONVERSION_PATH)
            );
        }
    }

    #[test]
    fn the_frozen_v1alpha1_schema_is_the_old_one_not_the_generated_one() {
        let frozen = frozen_v1alpha1("federatedkafkatopics.accord.io").expect("frozen");
        let old = &frozen.spec.versions[0];
        assert_eq!(old.name, DEPRECATED_VERSION);
        let spec = &old
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap()
            .properties
            .as_ref()
            .unwrap()["spec"];
        let properties = spec.properties.as_ref().unwrap();
        assert!(properties.contains_key("clusters"));
        assert!(!properties.contains_key("placement"));
    }

    #[test]
    fn every_kind_has_a_frozen_v1alpha1() {
        for (name, _) in FROZEN_V1ALPHA1 {
            let crd = frozen_v1alpha1(name).expect(name);
            assert_eq!(crd.metadata.name.as_deref(), Some(name));
            assert_eq!(crd.spec.versions.len(), 1);
        }
        assert_eq!(FROZEN_V1ALPHA1.len(), crate::all_crds().len());
    }
}
