//! FederatedResource admission (served by [`crate::webhook`]).
//!
//! CEL sees neither the embedded manifests' metadata nor an override's untyped `value`,
//! so the API server alone admits duplicates, a patch operation without its value and a
//! spec over 512 KiB. The webhook runs the spec's own checks (the ones the controller
//! applies before acting, [`Validate`]) on a CREATE, or an UPDATE that changes the spec,
//! and refuses what fails with reason [`INVALID_SPEC_REASON`] and every failed rule with
//! its field, so `kubectl apply` says what to fix instead of the object being stored and
//! reported `InvalidSpec` afterwards.

use accord_crds::validate::Validate as _;

use accord_crds::FederatedResource;
use futures::future::BoxFuture;

use crate::webhook::review::{Review, Verdict};
use crate::webhook::{Admission, Answer, Webhook};

use crate::webhook::review::INVALID_SPEC_REASON;

/// A review of a FederatedResource.
pub type ResourceReview = Review<FederatedResource>;

/// Decides one review.
pub fn decide_resource(review: &ResourceReview) -> Verdict {
    let Some(resource) = review.spec_to_decide(|r| &r.spec) else {
        return Verdict::allow();
    };
    match resource.spec.validate() {
        Ok(()) => Verdict::allow(),
        Err(errors) => Verdict::invalid(INVALID_SPEC_REASON, errors.to_string()),
    }
}

/// The FederatedResource webhook.
pub const WEBHOOK: Webhook = Webhook {
    name: "federatedresources.accord.io",
    path: "/validate-federatedresources",
    resource: "federatedresources",
};

/// The FederatedResource admission: decided from the object alone.
pub struct ResourceAdmission;

impl Admission for ResourceAdmission {
    fn webhook(&self) -> Webhook {
        WEBHOOK
    }

    fn review(&self, body: axum::body::Bytes) -> BoxFuture<'_, Answer> {
        Box::pin(std::future::ready(Answer::of::<FederatedResource>(
            &body,
            decide_resource,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::review::Operation;
    use accord_crds::FederatedResource;
    use accord_crds::messages;
    use serde_json::{Value, json};

    fn resource(manifests: Value) -> FederatedResource {
        serde_json::from_value(json!({
            "apiVersion": "accord.io/v1beta1",
            "kind": "FederatedResource",
            "metadata": {"name": "app", "namespace": "shop"},
            "spec": {"placement": {"clusters": ["east"]}, "manifests": manifests},
        }))
        .expect("a FederatedResource")
    }

    fn config_map(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
    }

    fn review(object: FederatedResource, old: Option<FederatedResource>) -> ResourceReview {
        ResourceReview {
            uid: "u".into(),
            operation: if old.is_some() {
                Operation::Update
            } else {
                Operation::Create
            },
            dry_run: false,
            object: Some(object),
            old,
        }
    }

    #[test]
    fn a_duplicate_manifest_is_refused_naming_it() {
        let verdict = decide_resource(&review(
            resource(json!([config_map("a"), config_map("a")])),
            None,
        ));
        let refusal = verdict.refusal.expect("refused");
        assert_eq!(refusal.code, 422);
        assert_eq!(refusal.reason, INVALID_SPEC_REASON);
        assert!(
            refusal.message.contains("spec.manifests[1]")
                && refusal.message.contains(messages::MANIFEST_DUPLICATE),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn a_spec_over_the_limit_is_refused_with_the_limit() {
        let mut big = config_map("big");
        big["data"] = json!({"blob": "x".repeat(accord_crds::federated_resource::MAX_SPEC_BYTES)});
        let refusal = decide_resource(&review(resource(json!([big])), None))
            .refusal
            .expect("refused");
        assert!(
            refusal.message.contains(messages::SPEC_TOO_LARGE),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn a_valid_spec_is_allowed() {
        let verdict = decide_resource(&review(
            resource(json!([config_map("a"), config_map("b")])),
            None,
        ));
        assert_eq!(verdict, Verdict::allow());
    }

    #[test]
    fn an_update_keeping_an_invalid_spec_is_allowed_and_one_changing_it_is_checked() {
        let stored = resource(json!([config_map("a"), config_map("a")]));
        let mut relabelled = stored.clone();
        relabelled.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
        assert!(decide_resource(&review(relabelled, Some(stored.clone()))).allowed());
        let changed = resource(json!([config_map("b"), config_map("b")]));
        assert!(!decide_resource(&review(changed, Some(stored))).allowed());
    }
}
