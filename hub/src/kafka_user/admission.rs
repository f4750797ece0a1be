//! FederatedKafkaUser admission (served by [`crate::webhook`]).
//!
//! The webhook's decision, pure: a [`UserReview`] and a [`UserSnapshot`] of the webhook's caches
//! in, a [`Verdict`] out, so every rule is tested without a cluster. On a CREATE, or an
//! UPDATE that changes the spec of an object not being deleted:
//!
//! - The spec's own checks ([`Validate`]): what CEL cannot say, chiefly which operations a
//!   Kafka resource type has (`Write` on a group would be refused by every broker). A spec
//!   that fails is refused with reason [`INVALID_SPEC_REASON`] naming every failed rule
//!   with its field, before any policy is looked at: a policy judges a valid spec.
//! - The `users` rules of every KafkaTopicPolicy that governs the user's namespace
//!   ([`violations`]): an `allow` ACL may not grant operation `All` unless the policy's
//!   `users.allowAllOperations`, nor name resource `*` unless
//!   `users.allowWildcardResources`. A `deny` ACL only narrows access, so it may name
//!   either. `Deny` policies refuse (reason [`DENY_REASON`], the topic policies' reason,
//!   naming the policy, the ACL and the rule); `Audit` policies admit with one warning
//!   each and an audit annotation. No Event is recorded: the webhook watches no
//!   FederatedKafkaUsers to wait for the admitted one to be stored.
//!
//! Anything else (a relabel, the controller's finalizer, any change to an object being
//! deleted) is allowed, so a user admitted before a policy existed can still be cleaned up.

use std::collections::BTreeMap;
use std::fmt;

use accord_crds::kafka_topic::{Enforcement, KafkaTopicPolicy};
use accord_crds::kafka_user::{
    AclOperation, AclPermission, FederatedKafkaUser, FederatedKafkaUserSpec, WILDCARD_RESOURCE,
};
use accord_crds::validate::Validate as _;
use kube::ResourceExt as _;

use crate::distribution::select::{SelectorError, matches};
use futures::future::BoxFuture;

use crate::kafka::admission_cache::Caches;
use crate::webhook::review::{Refusal, Review, Verdict};
use crate::webhook::{Admission, Answer, Webhook, decode_once_listed};

use crate::kafka::{AUDIT_ANNOTATION, DENY_REASON};
use crate::webhook::review::INVALID_SPEC_REASON;

/// A review of a FederatedKafkaUser.
pub type UserReview = Review<FederatedKafkaUser>;

/// HTTP-like code of a policy refusal (as for topics: the object is valid, the policy
/// forbids it).
const FORBIDDEN: u16 = 403;

/// What the webhook's caches hold that a decision needs.
#[derive(Clone, Debug, Default)]
pub struct UserSnapshot {
    /// Every KafkaTopicPolicy that decodes.
    pub policies: Vec<KafkaTopicPolicy>,
    /// Labels of the user's namespace (empty when the namespace is not cached yet).
    pub namespace_labels: BTreeMap<String, String>,
}

/// Which `users` rule an ACL breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UserRule {
    /// It grants operation `All` (`users.allowAllOperations` is false).
    AllOperations,
    /// It names resource `*` (`users.allowWildcardResources` is false).
    WildcardResource,
    /// The policy's namespaceSelector cannot be evaluated, so whether it governs the
    /// namespace is unknown: it fails closed.
    UnreadableSelector(String),
}

/// One rule of one KafkaTopicPolicy that a FederatedKafkaUser breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserViolation {
    /// Name of the KafkaTopicPolicy.
    pub policy: String,
    /// What the policy does about it.
    pub enforcement: Enforcement,
    /// Index of the offending entry in `spec.acls` (none for an unreadable selector).
    pub acl: Option<usize>,
    /// The rule.
    pub rule: UserRule,
}

impl fmt::Display for UserViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let policy = &self.policy;
        let at = self
            .acl
            .map(|i| format!("spec.acls[{i}]"))
            .unwrap_or_else(|| "spec.acls".to_owned());
        match &self.rule {
            UserRule::AllOperations => write!(
                f,
                "KafkaTopicPolicy {policy} forbids operation All in {at} (users.allowAllOperations is false)"
            ),
            UserRule::WildcardResource => write!(
                f,
                "KafkaTopicPolicy {policy} forbids resource name {WILDCARD_RESOURCE} in {at} (users.allowWildcardResources is false)"
            ),
            UserRule::UnreadableSelector(why) => write!(
                f,
                "KafkaTopicPolicy {policy} cannot tell whether it governs this namespace, so it refuses every user here: {why}"
            ),
        }
    }
}

/// Whether `policy` governs a namespace with `namespace_labels`: every namespace when it
/// has no namespaceSelector, else those its selector matches (the topic rules'
/// semantics).
pub fn governs(
    policy: &KafkaTopicPolicy,
    namespace_labels: &BTreeMap<String, String>,
) -> Result<bool, SelectorError> {
    match &policy.spec.namespace_selector {
        None => Ok(true),
        Some(selector) => matches(selector, namespace_labels, "spec.namespaceSelector"),
    }
}

/// Every `users` rule of every policy governing the user's namespace (labels
/// `namespace_labels`) that `spec`'s ACLs break, by policy name then ACL.
pub fn violations(
    spec: &FederatedKafkaUserSpec,
    namespace_labels: &BTreeMap<String, String>,
    policies: &[KafkaTopicPolicy],
) -> Vec<UserViolation> {
    let mut sorted: Vec<&KafkaTopicPolicy> = policies.iter().collect();
    sorted.sort_by_key(|p| p.name_any());
    let mut found = Vec::new();
    for policy in sorted {
        let name = policy.name_any();
        let enforcement = policy.spec.enforcement();
        let violation = |acl, rule| UserViolation {
            policy: name.clone(),
            enforcement,
            acl,
            rule,
        };
        match governs(policy, namespace_labels) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                found.push(violation(None, UserRule::UnreadableSelector(e.to_string())));
                continue;
            }
        }
        let rules = policy.spec.users();
        for (i, acl) in spec.acls.iter().enumerate() {
            if acl.permission() == AclPermission::Deny {
                continue;
            }
            if !rules.allow_all_operations && acl.operations.contains(&AclOperation::All) {
                found.push(violation(Some(i), UserRule::AllOperations));
            }
            if !rules.allow_wildcard_resources && acl.resource.name == WILDCARD_RESOURCE {
                found.push(violation(Some(i), UserRule::WildcardResource));
            }
        }
    }
    found
}

/// Every violation, one after the other.
fn joined(violations: &[&UserViolation]) -> String {
    violations
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Decides one review.
pub fn decide_user(review: &UserReview, snapshot: &UserSnapshot) -> Verdict {
    let Some(user) = review.spec_to_decide(|u| &u.spec) else {
        return Verdict::allow();
    };
    if let Err(errors) = user.spec.validate() {
        return Verdict::invalid(INVALID_SPEC_REASON, errors.to_string());
    }
    let found = violations(&user.spec, &snapshot.namespace_labels, &snapshot.policies);
    let (denying, audited): (Vec<&UserViolation>, Vec<&UserViolation>) = found
        .iter()
        .partition(|v| v.enforcement == Enforcement::Deny);
    if !denying.is_empty() {
        return Verdict {
            refusal: Some(Refusal {
                code: FORBIDDEN,
                reason: DENY_REASON.to_owned(),
                message: joined(&denying),
            }),
            ..Verdict::default()
        };
    }
    if audited.is_empty() {
        return Verdict::allow();
    }
    Verdict {
        refusal: None,
        warnings: audited
            .iter()
            .map(|v| format!("{v} [Audit: admitted]"))
            .collect(),
        audit_annotations: [(AUDIT_ANNOTATION.to_owned(), joined(&audited))].into(),
    }
}

/// The FederatedKafkaUser webhook.
pub const WEBHOOK: Webhook = Webhook {
    name: "federatedkafkausers.accord.io",
    path: "/validate-federatedkafkausers",
    resource: "federatedkafkausers",
};

/// The FederatedKafkaUser admission: decided over the KafkaTopicPolicies and namespace
/// labels of the webhook's caches (shared with the topic admission).
pub struct UserAdmission {
    caches: Caches,
}

impl UserAdmission {
    /// The admission reading `caches`.
    pub fn new(caches: Caches) -> Self {
        Self { caches }
    }
}

impl Admission for UserAdmission {
    fn webhook(&self) -> Webhook {
        WEBHOOK
    }

    fn review(&self, body: axum::body::Bytes) -> BoxFuture<'_, Answer> {
        Box::pin(async move {
            let review = match decode_once_listed::<FederatedKafkaUser>(
                &body,
                self.caches.wait_until_ready(),
            )
            .await
            {
                Ok(review) => review,
                Err(answer) => return answer,
            };
            let snapshot = match &review.object {
                Some(user) => UserSnapshot {
                    policies: self.caches.policies(),
                    namespace_labels: self
                        .caches
                        .namespace_labels(user.metadata.namespace.as_deref()),
                },
                None => UserSnapshot::default(),
            };
            Answer::Decided {
                verdict: decide_user(&review, &snapshot),
                uid: review.uid,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::review::Operation;
    use accord_crds::kafka_topic::{KafkaTopicPolicySpec, UserRules};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
    use serde_json::{Value, json};

    fn user(acls: Value) -> FederatedKafkaUser {
        serde_json::from_value(json!({
            "apiVersion": "accord.io/v1beta1",
            "kind": "FederatedKafkaUser",
            "metadata": {"name": "orders-writer", "namespace": "team-a"},
            "spec": {
                "authentication": {"type": "scram-sha-512"},
                "placement": {"clusters": ["east"]},
                "acls": acls,
            },
        }))
        .expect("a FederatedKafkaUser")
    }

    /// An entry granting `operations` on topic `name`.
    fn topic_acl(name: &str, operations: &[&str]) -> Value {
        json!({"resource": {"type": "topic", "name": name}, "operations": operations})
    }

    fn create(user: FederatedKafkaUser) -> UserReview {
        UserReview {
            uid: "u".into(),
            operation: Operation::Create,
            dry_run: false,
            object: Some(user),
            old: None,
        }
    }

    fn update(old: FederatedKafkaUser, new: FederatedKafkaUser) -> UserReview {
        UserReview {
            operation: Operation::Update,
            old: Some(old),
            ..create(new)
        }
    }

    fn policy(name: &str, enforcement: Enforcement, users: Option<UserRules>) -> KafkaTopicPolicy {
        KafkaTopicPolicy::new(
            name,
            KafkaTopicPolicySpec {
                enforcement: Some(enforcement),
                users,
                ..KafkaTopicPolicySpec::default()
            },
        )
    }

    fn snapshot(policies: Vec<KafkaTopicPolicy>) -> UserSnapshot {
        UserSnapshot {
            policies,
            namespace_labels: BTreeMap::new(),
        }
    }

    fn refusal(verdict: &Verdict) -> &Refusal {
        verdict.refusal.as_ref().expect("refused")
    }

    #[test]
    fn a_deny_policy_refuses_all_and_a_wildcard_naming_the_policy_the_acl_and_the_rule() {
        let verdict = decide_user(
            &create(user(json!([
                topic_acl("orders.events", &["Read"]),
                topic_acl("*", &["All"]),
            ]))),
            &snapshot(vec![policy("team-a", Enforcement::Deny, None)]),
        );
        let r = refusal(&verdict);
        assert_eq!(
            (r.code, r.reason.as_str()),
            (403, "TOPIC_CREATION_POLICY_VIOLATION")
        );
        assert_eq!(
            r.message,
            "KafkaTopicPolicy team-a forbids operation All in spec.acls[1] (users.allowAllOperations is false); \
             KafkaTopicPolicy team-a forbids resource name * in spec.acls[1] (users.allowWildcardResources is false)"
        );
        assert!(verdict.warnings.is_empty());
    }

    #[test]
    fn the_users_block_allows_each_rule_separately() {
        let wildcard_all = create(user(json!([topic_acl("*", &["All"])])));
        let all_ops = UserRules {
            allow_all_operations: true,
            ..UserRules::default()
        };
        let r = decide_user(
            &wildcard_all,
            &snapshot(vec![policy("ops", Enforcement::Deny, Some(all_ops))]),
        );
        assert!(
            refusal(&r).message.contains("forbids resource name *"),
            "{r:?}"
        );
        assert!(!refusal(&r).message.contains("operation All"), "{r:?}");
        let both = UserRules {
            allow_all_operations: true,
            allow_wildcard_resources: true,
        };
        assert_eq!(
            decide_user(
                &wildcard_all,
                &snapshot(vec![policy("open", Enforcement::Deny, Some(both))])
            ),
            Verdict::allow()
        );
    }

    #[test]
    fn an_audit_policy_admits_with_one_warning_per_rule_and_an_annotation() {
        let verdict = decide_user(
            &create(user(json!([topic_acl("*", &["All"])]))),
            &snapshot(vec![policy("watch", Enforcement::Audit, None)]),
        );
        assert!(verdict.allowed());
        assert_eq!(
            verdict.warnings,
            [
                "KafkaTopicPolicy watch forbids operation All in spec.acls[0] (users.allowAllOperations is false) [Audit: admitted]",
                "KafkaTopicPolicy watch forbids resource name * in spec.acls[0] (users.allowWildcardResources is false) [Audit: admitted]",
            ]
        );
        let annotation = &verdict.audit_annotations[AUDIT_ANNOTATION];
        assert!(annotation.contains("operation All") && annotation.contains("resource name *"));
    }

    #[test]
    fn deny_wins_over_audit_and_names_only_the_denying_policy() {
        let verdict = decide_user(
            &create(user(json!([topic_acl("*", &["Read"])]))),
            &snapshot(vec![
                policy("lenient", Enforcement::Audit, None),
                policy("strict", Enforcement::Deny, None),
            ]),
        );
        let r = refusal(&verdict);
        assert!(r.message.contains("KafkaTopicPolicy strict"), "{r:?}");
        assert!(!r.message.contains("lenient"), "{r:?}");
    }

    #[test]
    fn a_deny_acl_may_name_all_and_a_wildcard() {
        let acl = json!({"resource": {"type": "topic", "name": "*"}, "operations": ["All"], "type": "deny"});
        assert_eq!(
            decide_user(
                &create(user(json!([acl]))),
                &snapshot(vec![policy("strict", Enforcement::Deny, None)])
            ),
            Verdict::allow()
        );
    }

    #[test]
    fn a_policy_governs_only_the_namespaces_its_selector_matches() {
        let mut prod_only = policy("prod-only", Enforcement::Deny, None);
        prod_only.spec.namespace_selector = Some(LabelSelector {
            match_labels: Some([("tier".to_owned(), "prod".to_owned())].into()),
            ..LabelSelector::default()
        });
        let review = create(user(json!([topic_acl("orders.", &["All"])])));
        let in_ns = |tier: &str| UserSnapshot {
            policies: vec![prod_only.clone()],
            namespace_labels: [("tier".to_owned(), tier.to_owned())].into(),
        };
        assert!(decide_user(&review, &in_ns("dev")).allowed());
        assert!(!decide_user(&review, &in_ns("prod")).allowed());
        // No policy at all: no such rule.
        assert_eq!(
            decide_user(&review, &UserSnapshot::default()),
            Verdict::allow()
        );
    }

    #[test]
    fn a_policy_whose_selector_cannot_be_evaluated_fails_closed() {
        let mut broken = policy("broken", Enforcement::Deny, None);
        broken.spec.namespace_selector = Some(LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec![]),
                },
            ]),
            ..LabelSelector::default()
        });
        let verdict = decide_user(
            &create(user(json!([topic_acl("orders.", &["Read"])]))),
            &snapshot(vec![broken]),
        );
        let r = refusal(&verdict);
        assert!(
            r.message
                .starts_with("KafkaTopicPolicy broken cannot tell whether it governs"),
            "{r:?}"
        );
    }

    #[test]
    fn an_invalid_spec_is_refused_naming_every_field_before_any_policy() {
        let verdict = decide_user(
            &create(user(json!([
                {"resource": {"type": "group", "name": "orders-app"}, "operations": ["Read", "Write"]},
                topic_acl("*", &["All"]),
            ]))),
            &snapshot(vec![policy("strict", Enforcement::Deny, None)]),
        );
        let r = refusal(&verdict);
        assert_eq!((r.code, r.reason.as_str()), (422, "INVALID_SPEC"));
        assert_eq!(
            r.message,
            "spec.acls[0].operations[1]: Write is not an operation on a group (valid: All, Read, Describe, Delete)"
        );
    }

    #[test]
    fn an_update_keeping_the_spec_or_of_an_object_being_deleted_is_allowed() {
        let strict = snapshot(vec![policy("strict", Enforcement::Deny, None)]);
        let stored = user(json!([topic_acl("*", &["All"])]));
        let mut relabelled = stored.clone();
        relabelled.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
        assert!(decide_user(&update(stored.clone(), relabelled), &strict).allowed());
        let mut deleting = user(json!([topic_acl("*", &["All"]), topic_acl("x", &["Read"])]));
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(decide_user(&update(stored.clone(), deleting), &strict).allowed());
        let widened = user(json!([topic_acl("*", &["All"]), topic_acl("x", &["Read"])]));
        assert!(!decide_user(&update(stored, widened), &strict).allowed());
    }

    #[test]
    fn other_operations_are_allowed_without_looking() {
        let review = UserReview {
            uid: "u".into(),
            operation: Operation::Other("DELETE".into()),
            dry_run: false,
            object: None,
            old: None,
        };
        let strict = snapshot(vec![policy("strict", Enforcement::Deny, None)]);
        assert_eq!(decide_user(&review, &strict), Verdict::allow());
    }
}
