//! Keeps the `caBundle` of the ValidatingWebhookConfiguration `accord-hub` equal to the hub
//! CA, so that plain manifests and the Helm chart (which cannot know the CA the hub creates
//! on first start) end up with a working webhook, and a re-applied configuration that lost
//! its `caBundle` gets it back.
//!
//! Watches that one object by name and, when the `caBundle` of one of the Accord webhooks in
//! it ([`Webhook::is_accords`]) differs, merge-patches
//! its `webhooks` with the observed `resourceVersion` (a concurrent change makes the patch
//! fail and the next event retries). Every replica does it; they all write the same CA.
//! An absent configuration (the hub run outside a cluster, a test registering its own) is
//! left alone.
//!
//! The same holds for the conversion webhook of Accord's CRDs ([`keep_crd_ca_bundles`]):
//! each CRD is watched by name and its `spec.conversion.webhook.clientConfig.caBundle`
//! merge-patched to the hub CA when it differs. A CRD that does not convert by webhook
//! (or does not exist) is left alone.

use accord_crds::HUB_FIELD_MANAGER;
use futures::StreamExt as _;
use futures::future::join_all;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher;
use kube::{Api, ResourceExt as _};
use serde_json::json;
use tracing::{info, warn};

use super::{CONFIGURATION_NAME, Webhook};
use crate::http::ReadinessGates;

/// The merge patch that sets `caBundle` of every Accord webhook in `config`, or `None` when
/// they all have it (or the configuration has no Accord webhook). A merge patch replaces
/// the whole `webhooks` list, so the patch carries every webhook, others unchanged.
pub fn ca_bundle_patch(
    config: &ValidatingWebhookConfiguration,
    ca_pem: &str,
) -> Option<serde_json::Value> {
    let mut webhooks = config.webhooks.clone().unwrap_or_default();
    let mut changed = false;
    for ours in webhooks.iter_mut().filter(|w| Webhook::is_accords(&w.name)) {
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
pub async fn keep_ca_bundle(kube: kube::Client, ca_pem: String, gates: ReadinessGates) {
    keep(
        Api::all(kube),
        CONFIGURATION_NAME,
        "ValidatingWebhookConfiguration",
        |config| ca_bundle_patch(config, &ca_pem),
        &gates,
    )
    .await;
}

/// Watches the object `name` of `api` and merge-patches it with `patch_for` of every version
/// seen that needs one (a patch carries the observed `resourceVersion`, so a concurrent
/// change makes it fail and the next event retries). Runs until the watch ends (it retries
/// with backoff, so: never). A watch error (Forbidden when the RBAC lacks the rule) is
/// logged: the webhook still serves, the object just has to carry the CA itself. While
/// the object lacks the CA and cannot be given it, `/readyz` warns about it (see
/// [`crate::http`]); a warning never makes the replica unready.
async fn keep<K>(
    api: Api<K>,
    name: &str,
    what: &str,
    patch_for: impl Fn(&K) -> Option<serde_json::Value>,
    gates: &ReadinessGates,
) where
    K: accord_common::watch::AlwaysDecodes
        + kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let params = PatchParams {
        field_manager: Some(format!("{HUB_FIELD_MANAGER}-webhook")),
        ..PatchParams::default()
    };
    let mut objects = std::pin::pin!(
        accord_common::watch::watcher(api.clone(), config)
            .default_backoff()
            .applied_objects()
    );
    let subject = format!("{what} {name}");
    while let Some(next) = objects.next().await {
        let object = match next {
            Ok(object) => object,
            Err(e) => {
                warn!(error = %e, "watching {subject}");
                gates.set_warning(
                    &subject,
                    Some(format!(
                        "cannot watch it to keep its caBundle at the hub CA: {e}"
                    )),
                );
                continue;
            }
        };
        let Some(patch) = patch_for(&object) else {
            gates.set_warning(&subject, None);
            continue;
        };
        match api.patch(name, &params, &Patch::Merge(&patch)).await {
            Ok(_) => {
                info!("set the hub CA as caBundle of {subject}");
                gates.set_warning(&subject, None);
            }
            Err(e) => {
                warn!(error = %e, "setting caBundle of {subject}; retried on its next change");
                gates.set_warning(
                    &subject,
                    Some(format!(
                        "its caBundle is not the hub CA and setting it failed ({e}); the API \
                         server cannot call this webhook until it is"
                    )),
                );
            }
        }
    }
}

/// The merge patch that sets the `caBundle` of `crd`'s conversion webhook to `ca_pem`, or
/// `None` when it has it or the CRD does not convert by webhook.
pub fn crd_ca_bundle_patch(
    crd: &CustomResourceDefinition,
    ca_pem: &str,
) -> Option<serde_json::Value> {
    let conversion = crd.spec.conversion.as_ref()?;
    let config = conversion.webhook.as_ref()?.client_config.as_ref()?;
    if conversion.strategy != "Webhook"
        || config
            .ca_bundle
            .as_ref()
            .is_some_and(|b| b.0 == ca_pem.as_bytes())
    {
        return None;
    }
    Some(json!({
        "metadata": { "resourceVersion": crd.resource_version() },
        "spec": { "conversion": { "webhook": { "clientConfig": {
            "caBundle": ByteString(ca_pem.as_bytes().to_vec()),
        } } } },
    }))
}

/// Keeps the conversion `caBundle` of every Accord CRD at `ca_pem`; runs until the watches
/// end (they retry with backoff, so: never).
pub async fn keep_crd_ca_bundles(kube: kube::Client, ca_pem: String, gates: ReadinessGates) {
    let api: Api<CustomResourceDefinition> = Api::all(kube);
    join_all(
        accord_crds::all_crds()
            .into_iter()
            .filter_map(|crd| crd.metadata.name)
            .map(|name| {
                let api = api.clone();
                let ca_pem = &ca_pem;
                let gates = &gates;
                async move {
                    keep(
                        api,
                        &name,
                        "CustomResourceDefinition",
                        |crd| crd_ca_bundle_patch(crd, ca_pem),
                        gates,
                    )
                    .await;
                }
            }),
    )
    .await;
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

    #[test]
    fn a_crd_converting_by_webhook_gets_the_ca_and_one_that_has_it_nothing() {
        let mut crd = accord_crds::all_crds().remove(0);
        crd.metadata.resource_version = Some("7".into());
        let patch = crd_ca_bundle_patch(&crd, "PEM").expect("a patch");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        assert_eq!(
            patch["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"],
            "UEVN"
        );
        let webhook = crd
            .spec
            .conversion
            .as_mut()
            .unwrap()
            .webhook
            .as_mut()
            .unwrap();
        webhook.client_config.as_mut().unwrap().ca_bundle = Some(ByteString(b"PEM".to_vec()));
        assert_eq!(crd_ca_bundle_patch(&crd, "PEM"), None);
        crd.spec.conversion.as_mut().unwrap().strategy = "None".into();
        assert_eq!(crd_ca_bundle_patch(&crd, "OTHER"), None);
    }
}
