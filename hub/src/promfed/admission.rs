//! PrometheusFederation admission (served by [`crate::webhook`]).
//!
//! The webhook's decision on a PrometheusFederation, pure: a [`PromfedReview`] in, a
//! [`Verdict`] out.
//!
//! Every `spec.match` entry must be a series selector the agent can narrow to a tenant;
//! whether it is takes a parser ([`check_selector`], the one the agent renders with), which
//! a CEL rule in the CRD cannot express. A CREATE, or an UPDATE that changes the spec, with
//! a selector the parser refuses is refused with reason [`INVALID_MATCH_REASON`] and the
//! parser's message for each such entry. An UPDATE that leaves the spec alone and any
//! change to an object being deleted are allowed, so an object stored before the webhook
//! existed can still be cleaned up.

use accord_common::promfed::check_selector;

use accord_crds::PrometheusFederation;
use futures::future::BoxFuture;

use crate::webhook::review::{Review, Verdict};
use crate::webhook::{Admission, Answer, Webhook};

/// A review of a PrometheusFederation.
pub type PromfedReview = Review<PrometheusFederation>;

/// `status.reason` of a refusal for a `match[]` entry that is not a series selector.
pub const INVALID_MATCH_REASON: &str = "INVALID_MATCH_SELECTOR";

/// Decides one review.
pub fn decide_promfed(review: &PromfedReview) -> Verdict {
    let Some(federation) = review.spec_to_decide(|f| &f.spec) else {
        return Verdict::allow();
    };
    let problems: Vec<String> = federation
        .spec
        .match_
        .iter()
        .enumerate()
        .filter_map(|(i, selector)| {
            check_selector(selector)
                .err()
                .map(|e| format!("spec.match[{i}]: {e}"))
        })
        .collect();
    if problems.is_empty() {
        return Verdict::allow();
    }
    Verdict::invalid(INVALID_MATCH_REASON, problems.join("; "))
}

/// The PrometheusFederation webhook.
pub const WEBHOOK: Webhook = Webhook {
    name: "prometheusfederations.accord.io",
    path: "/validate-prometheusfederations",
    resource: "prometheusfederations",
};

/// The PrometheusFederation admission: decided from the object alone.
pub struct PromfedAdmission;

impl Admission for PromfedAdmission {
    fn webhook(&self) -> Webhook {
        WEBHOOK
    }

    fn review(&self, body: axum::body::Bytes) -> BoxFuture<'_, Answer> {
        Box::pin(std::future::ready(Answer::of::<PrometheusFederation>(
            &body,
            decide_promfed,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::review::Operation;
    use accord_crds::PrometheusFederation;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn federation(matchers: &[&str]) -> PrometheusFederation {
        serde_json::from_value(json!({
            "apiVersion": "accord.io/v1beta1",
            "kind": "PrometheusFederation",
            "metadata": { "name": "tenants", "namespace": "monitoring" },
            "spec": {
                "placement": {"clusters": ["east"]},
                "tenantSelector": { "namespaces": ["team-a"] },
                "match": matchers,
            },
        }))
        .expect("a PrometheusFederation")
    }

    fn review(
        operation: Operation,
        object: PrometheusFederation,
        old: Option<PrometheusFederation>,
    ) -> PromfedReview {
        PromfedReview {
            uid: "u".into(),
            operation,
            dry_run: false,
            object: Some(object),
            old,
        }
    }

    #[test]
    fn a_selector_the_parser_refuses_is_refused_with_the_parsers_message() {
        let verdict = decide_promfed(&review(
            Operation::Create,
            federation(&["up", "{job=}"]),
            None,
        ));
        let refusal = verdict.refusal.expect("refused");
        assert_eq!(refusal.code, 422);
        assert_eq!(refusal.reason, "INVALID_MATCH_SELECTOR");
        assert_eq!(
            refusal.message,
            format!(
                "spec.match[1]: {}",
                check_selector("{job=}").expect_err("invalid")
            )
        );
        assert!(
            refusal.message.contains("expected a quoted string"),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn every_bad_selector_is_named() {
        let verdict = decide_promfed(&review(
            Operation::Create,
            federation(&["rate(up[5m])", "up", "{job=}"]),
            None,
        ));
        let message = verdict.refusal.expect("refused").message;
        assert!(
            message.starts_with("spec.match[0]: invalid series selector \"rate(up[5m])\"")
                && message.contains("; spec.match[2]: invalid series selector \"{job=}\""),
            "{message}"
        );
    }

    #[test]
    fn valid_selectors_are_allowed() {
        let verdict = decide_promfed(&review(
            Operation::Create,
            federation(&["up", r#"{job="api",code!~"5.."}"#, "{__name__=~'.+'}"]),
            None,
        ));
        assert_eq!(verdict, Verdict::allow());
    }

    #[test]
    fn an_update_that_changes_the_spec_is_checked() {
        let verdict = decide_promfed(&review(
            Operation::Update,
            federation(&["{job=}"]),
            Some(federation(&["up"])),
        ));
        assert!(!verdict.allowed());
    }

    #[test]
    fn an_update_that_keeps_the_spec_or_of_an_object_being_deleted_is_allowed() {
        let stored = federation(&["{job=}"]);
        let mut relabelled = stored.clone();
        relabelled.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
        assert!(
            decide_promfed(&review(Operation::Update, relabelled, Some(stored.clone()))).allowed()
        );
        let mut deleted = federation(&["{job=}", "{x=}"]);
        deleted.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(decide_promfed(&review(Operation::Update, deleted, Some(stored))).allowed());
    }

    #[test]
    fn other_operations_are_allowed_without_looking() {
        let delete = PromfedReview {
            uid: "u".into(),
            operation: Operation::Other("DELETE".into()),
            dry_run: false,
            object: None,
            old: None,
        };
        assert!(decide_promfed(&delete).allowed());
    }
}
