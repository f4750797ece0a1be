//! Keeps the `caBundle` of the ValidatingWebhookConfiguration `accord-hub` equal to the hub
//! CA, so that plain manifests and the Helm chart (which cannot know the CA the hub creates
//! on first start) end up with a working webhook, and a re-applied configuration that lost
//! its `caBundle` gets it back.
//!
//! Watches that one object by name and, when the `caBundle` of one of the Accord webhooks in
//! it ([`WEBHOOKS`]) differs, merge-patches
//! its `webhooks` with the observed `resourceVersion` (a concurrent change makes the patch
//! fail and the next event retries). Every replica does it; they all write the same CA.
//! An absent configuration (the hub run outside a cluster, a test registering its own) is
//! left alone.

use accord_crds::HUB_FIELD_MANAGER;
use futures::StreamExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Patch, PatchParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, watcher};
use kube::{Api, ResourceExt as _};
use serde_json::json;
use tracing::{info, warn};

use super::{CONFIGURATION_NAME, WEBHOOKS};

/// The merge patch that sets `caBundle` of every Accord webhook in `config`, or `None` when
/// they all have it (or the configuration has no Accord webhook). A merge patch replaces
/// the whole `webhooks` list, so the patch carries every webhook, others unchanged.
pub fn ca_bundle_patch(
    config: &ValidatingWebhookConfiguration,
    ca_pem: &str,
) -> Option<serde_json::Value> {
    let mut webhooks = config.webhooks.clone().unwrap_or_default();
    let mut changed = false;
    for ours in webhooks
        .iter_mut()
        .filter(|w| WEBHOOKS.iter().any(|ours| ours.name == w.name))
    {
        if ours
            .client_config
            .ca_bundle
            .as_ref()
            .is_some_and(|b| b.0 == ca_pem.as_bytes())
        {
            continue;
        }
        ours.client_config.ca_bundle = Some(ByteString(ca_pem.as_bytes().to_vec()));
        changed = true;
    }
    if !changed {
        return None;
    }
    Some(json!({
        "metadata": { "resourceVersion": config.resource_version() },
        "webhooks": webhooks,
    }))
}

/// Runs until the watch ends (it retries with backoff, so: never).
pub async fn keep_ca_bundle(kube: kube::Client, ca_pem: String) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(kube);
    let config = watcher::Config::default().fields(&format!("metadata.name={CONFIGURATION_NAME}"));
    let params = PatchParams {
        field_manager: Some(format!("{HUB_FIELD_MANAGER}-webhook")),
        ..PatchParams::default()
    };
    let mut objects = std::pin::pin!(
        watcher(api.clone(), config)
            .default_backoff()
            .applied_objects()
    );
    while let Some(next) = objects.next().await {
        let object = match next {
            Ok(object) => object,
            Err(e) => {
                // Forbidden when the RBAC lacks the rule: the webhook still serves, the
                // configuration just has to carry the CA itself (`accord-hub install`).
                warn!(error = %e, "watching ValidatingWebhookConfiguration {CONFIGURATION_NAME}");
                continue;
            }
        };
        let Some(patch) = ca_bundle_patch(&object, &ca_pem) else {
            continue;
        };
        match api
            .patch(CONFIGURATION_NAME, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => info!(
                "set the hub CA as caBundle of ValidatingWebhookConfiguration {CONFIGURATION_NAME}"
            ),
            Err(e) => {
                warn!(error = %e, "setting caBundle of ValidatingWebhookConfiguration {CONFIGURATION_NAME}; retried on its next change")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(ca_bundle: Option<&str>) -> ValidatingWebhookConfiguration {
        serde_json::from_value(json!({
            "metadata": { "name": "accord-hub", "resourceVersion": "42" },
            "webhooks": [{
                "name": "federatedkafkatopics.accord.io",
                "clientConfig": { "service": { "name": "accord-hub", "namespace": "accord-system", "port": 9443 } },
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }],
        }))
        .map(|mut c: ValidatingWebhookConfiguration| {
            if let Some(b) = ca_bundle {
                c.webhooks.as_mut().unwrap()[0].client_config.ca_bundle =
                    Some(ByteString(b.as_bytes().to_vec()));
            }
            c
        })
        .unwrap()
    }

    #[test]
    fn a_missing_ca_bundle_is_patched_in_with_the_observed_resource_version() {
        let patch = ca_bundle_patch(&config(None), "PEM").expect("a patch");
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        // Base64 of "PEM", as the API expects bytes.
        assert_eq!(patch["webhooks"][0]["clientConfig"]["caBundle"], "UEVN");
        assert_eq!(
            patch["webhooks"][0]["clientConfig"]["service"]["port"],
            9443
        );
    }

    #[test]
    fn a_stale_ca_bundle_is_replaced_and_a_current_one_left_alone() {
        assert!(ca_bundle_patch(&config(Some("OLD")), "PEM").is_some());
        assert!(ca_bundle_patch(&config(Some("PEM")), "PEM").is_none());
    }

    #[test]
    fn both_accord_webhooks_get_the_ca_and_another_one_keeps_its_own() {
        let mut c = config(Some("PEM"));
        let webhooks = c.webhooks.as_mut().unwrap();
        let mut federation = webhooks[0].clone();
        federation.name = "prometheusfederations.accord.io".into();
        federation.client_config.ca_bundle = None;
        let mut other = webhooks[0].clone();
        other.name = "other.example.com".into();
        other.client_config.ca_bundle = Some(ByteString(b"THEIRS".to_vec()));
        webhooks.push(federation);
        webhooks.push(other);
        let patch = ca_bundle_patch(&c, "PEM").expect("a patch");
        let bundles: Vec<&serde_json::Value> = patch["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| &w["clientConfig"]["caBundle"])
            .collect();
        // Base64 of "PEM" for both Accord webhooks; "THEIRS" stays.
        assert_eq!(
            bundles,
            [&json!("UEVN"), &json!("UEVN"), &json!("VEhFSVJT")]
        );
        c.webhooks.as_mut().unwrap()[1].client_config.ca_bundle = Some(ByteString(b"PEM".to_vec()));
        assert!(ca_bundle_patch(&c, "PEM").is_none());
    }

    #[test]
    fn a_configuration_without_the_accord_webhook_is_left_alone() {
        let mut c = config(None);
        c.webhooks.as_mut().unwrap()[0].name = "other.example.com".into();
        assert!(ca_bundle_patch(&c, "PEM").is_none());
    }
}
