//! The KafkaTopicPolicy status writer, a small controller of its own beside the
//! FederatedKafkaTopic plug-in whose reflectors it shares: decode → validate → count the
//! topics that break the policy → write status only when it changed.
//!
//! Triggers: the policies themselves, every topic change (sent by the topic plug-in), and
//! namespace label changes. Recounts are debounced while topics keep changing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accord_crds::conditions::reasons as common_reasons;
use accord_crds::kafka_topic::{FederatedKafkaTopic, KafkaTopicPolicy};
use accord_crds::validate::Validate;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, ReflectHandle, Store as Reflector};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::controller::WatchedPolicy;
use super::policy;
use super::status::{policy_status, policy_status_changed};
use crate::controllers::placement::{Note, RESYNC, object_name};
use crate::controllers::{
    ControllerContext, Decoded, Lenient, ReconcileError, decode_or_invalid, error_policy,
    trace_result,
};
use crate::store::StoreError;
use crate::writes::Pace;

/// Policies are recounted at most this often while topics keep changing.
const POLICY_DEBOUNCE: Duration = Duration::from_secs(1);

/// What the writer reads.
struct PolicyStatus {
    ctx: Arc<ControllerContext>,
    topics: Reflector<Lenient<FederatedKafkaTopic>>,
    namespaces: Reflector<Namespace>,
}

/// Why `policy` cannot be evaluated as written, if it cannot: its spec fails validation,
/// or its namespace selector uses an operator or values the hub cannot evaluate (such a
/// policy fails closed: every topic it could govern counts as breaking it).
pub fn policy_problem(policy: &KafkaTopicPolicy) -> Option<String> {
    if let Err(e) = policy.spec.validate() {
        return Some(e.to_string());
    }
    let selector = policy.spec.namespace_selector.as_ref()?;
    crate::distribution::select::matches(selector, &BTreeMap::new(), "spec.namespaceSelector")
        .err()
        .map(|e| e.to_string())
}

impl PolicyStatus {
    fn namespace_labels(&self, ns: &str) -> BTreeMap<String, String> {
        self.namespaces
            .get(&ObjectRef::new(ns))
            .map(|n| n.labels().clone())
            .unwrap_or_default()
    }

    /// Recounts the topics that break `policy` and writes its status when it changed.
    async fn reconcile(&self, watched: &WatchedPolicy) -> Result<Action, ReconcileError> {
        let now = Time(Timestamp::now());
        let current = watched.data.get("status").cloned().unwrap_or_default();
        let decoded = match decode_or_invalid(watched, &now) {
            Decoded::Valid(p) => p,
            Decoded::Invalid {
                message,
                status_patch,
            } => {
                if let Some(patch) = status_patch {
                    let mut desired = current.clone();
                    if let (Some(d), Some(p)) =
                        (desired.as_object_mut(), patch["status"].as_object())
                    {
                        d.extend(p.clone());
                    } else {
                        desired = patch["status"].clone();
                    }
                    self.ctx
                        .submit_status(watched, current, desired, Pace::Prompt);
                    self.ctx.metrics.error("invalid_spec");
                    self.ctx.note(
                        &kube::Resource::object_ref(watched, &()),
                        Note::warning(common_reasons::INVALID_SPEC, message),
                    );
                }
                return Ok(Action::await_change());
            }
        };
        let problem = policy_problem(&decoded);
        let one = std::slice::from_ref(&*decoded);
        let violating = self
            .topics
            .state()
            .iter()
            .filter(|t| t.metadata.deletion_timestamp.is_none())
            .filter_map(|t| t.decode().ok())
            .filter(|t| {
                let labels = self.namespace_labels(&t.namespace().unwrap_or_default());
                !policy::violations(t, &labels, one).is_empty()
            })
            .count();
        let old = decoded.status.as_ref();
        let new = policy_status(old, decoded.metadata.generation, violating, problem, &now);
        if policy_status_changed(old, &new) {
            let desired = serde_json::to_value(&new).map_err(StoreError::Encode)?;
            self.ctx
                .submit_status(watched, current, desired, Pace::Prompt);
        }
        Ok(Action::requeue(RESYNC))
    }
}

/// Runs the writer until its streams end.
pub async fn run(
    ctx: Arc<ControllerContext>,
    subscription: Option<ReflectHandle<WatchedPolicy>>,
    policies: Reflector<WatchedPolicy>,
    topics: Reflector<Lenient<FederatedKafkaTopic>>,
    namespaces: Reflector<Namespace>,
    triggers: mpsc::UnboundedReceiver<ObjectRef<WatchedPolicy>>,
) {
    let Some(subscription) = subscription else {
        return;
    };
    let writer = Arc::new(PolicyStatus {
        ctx,
        topics,
        namespaces,
    });
    Controller::for_shared_stream(subscription, policies)
        .with_config(ControllerConfig::default().debounce(POLICY_DEBOUNCE))
        .reconcile_on(UnboundedReceiverStream::new(triggers))
        .run(
            |policy, w: Arc<PolicyStatus>| async move {
                let action = w.reconcile(&policy).await?;
                w.ctx.succeeded(&object_name(&*policy));
                Ok(action)
            },
            |policy, error: &ReconcileError, w: Arc<PolicyStatus>| {
                error_policy(&w.ctx, &object_name(&*policy), error)
            },
            writer,
        )
        .for_each(trace_result)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_that_cannot_be_evaluated_says_why() {
        let policy = |spec: serde_json::Value| -> KafkaTopicPolicy {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "accord.io/v1beta1", "kind": "KafkaTopicPolicy",
                "metadata": {"name": "p"}, "spec": spec,
            }))
            .unwrap()
        };
        assert_eq!(
            policy_problem(&policy(serde_json::json!({"minPartitions": 12}))),
            None
        );
        let bad_selector = policy(serde_json::json!({"namespaceSelector": {
            "matchExpressions": [{"key": "tier", "operator": "Matches", "values": ["x"]}]}}));
        let problem = policy_problem(&bad_selector).unwrap();
        assert!(
            problem.contains("spec.namespaceSelector") && problem.contains("unknown operator"),
            "{problem}"
        );
        let bad_pattern = policy(serde_json::json!({"topicNamePattern": "("}));
        assert!(
            policy_problem(&bad_pattern)
                .unwrap()
                .contains("spec.topicNamePattern")
        );
    }
}
