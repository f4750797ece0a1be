//! FederatedKafkaTopic as a [`PlacementKind`]: validate → select clusters → check the
//! KafkaTopicPolicies → resolve name conflicts → the one assignment every selected cluster
//! gets. A topic that breaks a `Deny` policy sends nothing new (its record stays as it was)
//! and shows `PolicyViolation=True`/`PolicyViolated`; one that breaks only `Audit` policies
//! is propagated with reason `AuditOnly` and a Warning Event. Two topics naming the same
//! topic in the same cluster: the older keeps it, the newer gets `Conflict` there and
//! nothing is sent for it ([`super::conflict`]).
//!
//! Deletion: with `deletionPolicy: Retain` (the default) the topic needs no finalizer — its
//! records go once it is gone and the topics stay in every member's Kafka. With `Delete` it
//! holds the finalizer `accord.io/kafka-topic`: the record is rewritten as a tombstone and
//! the object is released once every member reported the topic gone, or after
//! `--topic-deletion-timeout` with a Warning Event naming the members left.
//!
//! Triggers beyond the generic ones: a topic's name or generation change (or deletion)
//! re-checks every other topic of its old and new name (a conflict ends when its owner
//! goes); a KafkaTopicPolicy change re-evaluates every topic; a namespace's label change
//! the topics there. The KafkaTopicPolicy status writer ([`super::policy_status`]) shares
//! this kind's reflectors.

use accord_common::distribution::PlacedKind;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use accord_crds::conditions::types;
use accord_crds::kafka_topic::{
    DeletionPolicy, FederatedKafkaTopic, FederatedKafkaTopicStatus, KafkaTopicPolicy,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store as Reflector};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tracing::info;

use super::deletion;
use super::policy;
use super::status::{TopicFacts, aggregate, notes};
use super::{FINALIZER, KafkaTopicDecision, plan, policy_status};
use crate::controllers::name_claims::NameClaims;
use crate::controllers::placement::{
    self, DecideInput, Decided, Note, PlacementKind, Reported, Started, StatusInput, Trigger,
    Watched, changed, object_name, trigger_all,
};
use crate::controllers::tombstones::{self, Removal, Tombstoned};
use crate::controllers::transitions;
use crate::controllers::{ControllerContext, Lenient, ReconcileError};
use crate::distribution::PlacementRecord;
use crate::distribution::claim::{self, Claim};
use crate::distribution::select::Clusters;
use crate::store::StatusRecord;

/// Events the KafkaTopicPolicy reflector buffers for its status writer.
const EVENT_BUFFER: usize = 1024;
/// What the placements of a topic that breaks a `Deny` policy and was never sent say.
const HELD_BY_POLICY: &str =
    "not propagated: the topic breaks a Deny KafkaTopicPolicy (see condition PolicyViolation)";

tombstones::deletion_options! {
    /// The FederatedKafkaTopic settings of `serve`.
    pub struct KafkaTopicOptions;
    /// How long deleting a FederatedKafkaTopic with `deletionPolicy: Delete` waits for
    /// every member to delete its topic; after it, the object goes anyway with a Warning
    /// Event naming the members left behind.
    flag = "topic-deletion-timeout",
    id = "topic_deletion_timeout",
    value_name = "TOPIC_DELETION_TIMEOUT";
}

/// A KafkaTopicPolicy as watched: it always decodes this far.
pub type WatchedPolicy = Lenient<KafkaTopicPolicy>;

/// The FederatedKafkaTopic plug-in: the topics, policies and namespaces it reads.
pub struct KafkaTopics {
    ctx: Arc<ControllerContext>,
    options: KafkaTopicOptions,
    topics: Reflector<Watched<Self>>,
    policies: Reflector<WatchedPolicy>,
    namespaces: Reflector<Namespace>,
    trigger: Trigger<Self>,
    policy_trigger: mpsc::UnboundedSender<ObjectRef<WatchedPolicy>>,
    /// Each topic's claimed name and generation as last seen, and the objects claiming each
    /// name.
    seen: NameClaims<KafkaTopics>,
}

/// The topic name a watched topic claims, read without decoding the whole object.
fn watched_topic_name(topic: &Watched<KafkaTopics>) -> String {
    topic
        .pointer("/spec/topicName")
        .and_then(serde_json::Value::as_str)
        .map_or_else(|| topic.name_any(), str::to_owned)
}

/// `creationTimestamp`-ordered claim of a decoded topic on its name in the clusters it
/// selects (`None` when its selection cannot be evaluated).
fn claim(topic: &FederatedKafkaTopic, clusters: &Clusters) -> Option<Claim> {
    placement::claim_of(topic, topic.topic_name(), &topic.spec.placement, clusters)
}

/// The deletion policy of a watched topic, read without decoding the whole object.
fn deletion_policy(topic: &Watched<KafkaTopics>) -> DeletionPolicy {
    topic
        .pointer("/spec/deletionPolicy")
        .and_then(|v| serde_json::from_value::<DeletionPolicy>(v.clone()).ok())
        .unwrap_or_default()
}

impl KafkaTopics {
    /// Every decodable KafkaTopicPolicy (one that does not decode says so in its own
    /// status and governs nothing until it does).
    fn decoded_policies(&self) -> Vec<KafkaTopicPolicy> {
        self.policies
            .state()
            .iter()
            .filter_map(|p| p.decode().ok())
            .collect()
    }

    fn namespace_labels(&self, ns: &str) -> BTreeMap<String, String> {
        self.namespaces
            .get(&ObjectRef::new(ns))
            .map(|n| n.labels().clone())
            .unwrap_or_default()
    }

    /// The claims of every topic that names `topic_name`, except those whose deletion has
    /// already released them.
    fn claims(&self, topic_name: &str, clusters: &Clusters) -> Vec<Claim> {
        self.seen
            .live(&self.topics, topic_name, |t| claim(t, clusters))
    }
}

/// Shows each member's placement as its agent reports the tombstone; whether a policy is
/// broken no longer matters.
impl Tombstoned for KafkaTopics {
    const FINALIZER: &'static str = FINALIZER;
    const DELETING: Option<&'static str> = Some("deleting the topic in every member");
    const DELETING_DROPS: &'static [&'static str] = &[types::POLICY_VIOLATION];

    fn context(&self) -> &ControllerContext {
        &self.ctx
    }

    fn waits(topic: &Watched<Self>) -> bool {
        deletion_policy(topic) == DeletionPolicy::Delete
    }

    fn is_tombstone(record: &PlacementRecord<KafkaTopicDecision>) -> bool {
        deletion::is_tombstone(record)
    }

    fn tombstone(
        record: &PlacementRecord<KafkaTopicDecision>,
    ) -> Option<PlacementRecord<KafkaTopicDecision>> {
        deletion::tombstone(record)
    }

    fn is_gone(report: &StatusRecord) -> bool {
        deletion::is_gone(report)
    }

    fn deletion_timeout(&self) -> Duration {
        self.options.deletion_timeout
    }

    fn nothing_sent(&self, _topic: &Watched<Self>) -> Option<Note> {
        Some(Note::normal(
            transitions::reasons::DELETED,
            "the topic was not sent to any member",
        ))
    }

    fn removal(
        &self,
        _topic: &Watched<Self>,
        tombstone: &PlacementRecord<KafkaTopicDecision>,
    ) -> Removal {
        let name = &tombstone.decision.spec.topic_name;
        Removal {
            subject: format!("topic {name} was"),
            gone: "deleted",
            it: "the topic",
            done: Note::normal(
                transitions::reasons::DELETED,
                format!("topic {name} deleted in every member"),
            ),
        }
    }
}

impl PlacementKind for KafkaTopics {
    type Object = FederatedKafkaTopic;
    type Status = FederatedKafkaTopicStatus;
    type Decision = KafkaTopicDecision;
    type Facts = TopicFacts;
    type Options = KafkaTopicOptions;

    const CONTROLLER: &'static str = "FederatedKafkaTopic controller";
    const KIND: PlacedKind = PlacedKind::FederatedKafkaTopic;
    // The stored name of this kind's decision data (records written by earlier versions
    // carry it).
    const DECISION_TAG: &'static str = "topic";
    const LEGACY_FINALIZERS: &'static [&'static str] = &[FINALIZER];

    fn start(
        ctx: &Arc<ControllerContext>,
        topics: Reflector<Watched<Self>>,
        trigger: Trigger<Self>,
        options: &KafkaTopicOptions,
    ) -> Started<Self> {
        let (policy_trigger, policy_triggers) = mpsc::unbounded_channel();
        let (policies, policy_writer) = reflector::store_shared::<WatchedPolicy>(EVENT_BUFFER);
        let policy_subscription = policy_writer.subscribe();
        let (namespaces, namespace_writer) = reflector::store::<Namespace>();

        // Policy events: a new, changed or deleted policy re-evaluates every topic.
        let policy_changes = {
            let topics = topics.clone();
            let tt = trigger.clone();
            let mut seen: HashMap<String, Option<i64>> = HashMap::new();
            accord_common::watch::watcher(
                Api::<WatchedPolicy>::all(ctx.kube.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .reflect_shared(policy_writer)
            .for_each(move |event| {
                if let Some((p, gone)) = changed(&event) {
                    let key = object_name(p);
                    let before = if gone {
                        seen.remove(&key)
                    } else {
                        seen.insert(key, p.metadata.generation)
                    };
                    if gone || before != Some(p.metadata.generation) {
                        trigger_all(&topics, &tt);
                    }
                }
                futures::future::ready(())
            })
        };

        // Namespace label changes: the topics there and every policy (namespaceSelector).
        let namespace_changes = {
            let (topics, policies) = (topics.clone(), policies.clone());
            let (tt, pt) = (trigger.clone(), policy_trigger.clone());
            let mut seen: HashMap<String, BTreeMap<String, String>> = HashMap::new();
            accord_common::watch::watcher(
                Api::<Namespace>::all(ctx.kube.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .reflect(namespace_writer)
            .for_each(move |event| {
                if let Some((ns, gone)) = changed(&event) {
                    let name = ns.name_any();
                    let labels = ns.labels().clone();
                    let before = if gone {
                        seen.remove(&name)
                    } else {
                        seen.insert(name.clone(), labels.clone())
                    };
                    if before.as_ref() != Some(&labels) {
                        for t in topics.state() {
                            if t.namespace().as_deref() == Some(name.as_str()) {
                                let _ = tt.send(ObjectRef::from_obj(&*t));
                            }
                        }
                        trigger_all(&policies, &pt);
                    }
                }
                futures::future::ready(())
            })
        };

        let kind = Self {
            ctx: ctx.clone(),
            options: options.clone(),
            topics: topics.clone(),
            policies: policies.clone(),
            namespaces: namespaces.clone(),
            trigger,
            policy_trigger,
            seen: NameClaims::new(watched_topic_name, FINALIZER),
        };
        let policy_status = policy_status::run(
            ctx.clone(),
            policy_subscription,
            policies.clone(),
            topics,
            namespaces,
            policy_triggers,
        );
        let listed = {
            let policies = policies.clone();
            async move { policies.wait_until_ready().await.is_ok() }
        };
        Started {
            kind,
            tasks: vec![
                Box::pin(policy_changes),
                Box::pin(namespace_changes),
                Box::pin(policy_status),
            ],
            listed: Box::pin(listed),
        }
    }

    fn rollout(object: &FederatedKafkaTopic) -> Option<&accord_crds::rollout::Rollout> {
        object.spec.rollout.as_ref()
    }

    fn rollout_status(
        status: &mut FederatedKafkaTopicStatus,
    ) -> Option<&mut Option<accord_crds::rollout::RolloutStatus>> {
        Some(&mut status.rollout)
    }

    fn set_revision(line: &mut accord_crds::TopicPlacement, revision: Option<String>) {
        line.revision = revision;
    }

    fn placement(topic: &FederatedKafkaTopic) -> Option<&accord_crds::ClusterPlacement> {
        Some(&topic.spec.placement)
    }

    fn decide(
        &self,
        topic: &FederatedKafkaTopic,
        input: &DecideInput<'_, KafkaTopicDecision>,
    ) -> Decided<Self> {
        let selected = match placement::valid_selection(&topic.spec, input) {
            Ok(s) => s,
            Err(why) => return Decided::Invalid(why),
        };
        let violations = policy::violations(
            topic,
            &self.namespace_labels(&topic.namespace().unwrap_or_default()),
            &self.decoded_policies(),
        );
        if !policy::denying(&violations).is_empty() {
            // Nothing new is sent: the members keep what they were last sent.
            return Decided::Hold {
                shown: claim::held(&selected, HELD_BY_POLICY),
                facts: TopicFacts { violations },
            };
        }
        let before = input
            .previous
            .map(|r| &r.decision.spec)
            .filter(|s| !s.delete);
        let spec = plan::assignment(topic, before);
        let conflicts = match claim(topic, input.clusters) {
            Some(me) => claim::conflicts(&me, &self.claims(&spec.topic_name, input.clusters)),
            None => BTreeMap::new(),
        };
        let (shares, decision) = plan::decide(&selected, &spec, &conflicts);
        Decided::Record {
            shares,
            decision,
            facts: TopicFacts { violations },
            recheck_after: None,
        }
    }

    fn announce(
        &self,
        _topic: &FederatedKafkaTopic,
        record: &PlacementRecord<KafkaTopicDecision>,
        revision: i64,
    ) -> Option<Note> {
        let sent: Vec<&str> = record
            .shares
            .iter()
            .filter(|s| s.assignment.is_some())
            .map(|s| s.cluster.as_str())
            .collect();
        // The clusters are counted, not named: a topic may be sent to thousands.
        info!(topic = %record.placed, clusters = sent.len(), revision, "topic placements");
        let spec = &record.decision.spec;
        (!sent.is_empty()).then(|| {
            Note::normal(
                transitions::reasons::APPLIED,
                format!(
                    "topic {} ({} partitions, replication factor {}) sent to {} at revision {revision}",
                    spec.topic_name,
                    spec.partitions,
                    spec.replication_factor,
                    crate::distribution::reported::named(&sent, ", ")
                ),
            )
        })
    }

    async fn status_of(
        &self,
        topic: &FederatedKafkaTopic,
        input: StatusInput<'_, Self>,
    ) -> Result<Reported<FederatedKafkaTopicStatus>, ReconcileError> {
        Ok(placement::aggregated(topic, &input, aggregate, notes))
    }

    tombstones::tombstoned!();

    /// A topic's name or generation change, or its deletion, re-checks every other topic
    /// of its old and new name and recounts the policies.
    fn on_object(&self, topic: &Watched<Self>, gone: bool) {
        if let Some(others) = self.seen.observe(topic, gone) {
            for other in others {
                let _ = self.trigger.send(other);
            }
            trigger_all(&self.policies, &self.policy_trigger);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched(value: serde_json::Value) -> Watched<KafkaTopics> {
        Watched::<KafkaTopics>::from_value(value).unwrap()
    }

    #[test]
    fn the_claimed_name_and_deletion_policy_are_read_without_decoding_the_object() {
        let named = watched(serde_json::json!({
            "apiVersion": "accord.io/v1beta1", "kind": "FederatedKafkaTopic",
            "metadata": {"name": "events", "namespace": "team"},
            "spec": {"topicName": "fraud.events", "partitions": 3_000_000_000_i64,
                     "deletionPolicy": "Delete"},
        }));
        assert!(named.decode().is_err(), "the fixture must not decode");
        assert_eq!(watched_topic_name(&named), "fraud.events");
        assert_eq!(KafkaTopics::finalizer(&named), Some(FINALIZER));
        let unnamed = watched(serde_json::json!({
            "apiVersion": "accord.io/v1beta1", "kind": "FederatedKafkaTopic",
            "metadata": {"name": "events", "namespace": "team"},
            "spec": {"placement": {"clusterSelector": {}}},
        }));
        assert_eq!(watched_topic_name(&unnamed), "events");
        assert_eq!(
            KafkaTopics::finalizer(&unnamed),
            None,
            "Retain needs no finalizer"
        );
        assert!(KafkaTopics::may_select(&unnamed, "anything"));
        assert!(!KafkaTopics::may_select(&named, "a"));
    }

    #[test]
    fn a_topic_claims_its_name_in_the_clusters_it_selects_by_age() {
        let topic: FederatedKafkaTopic = serde_json::from_value(serde_json::json!({
            "apiVersion": "accord.io/v1beta1", "kind": "FederatedKafkaTopic",
            "metadata": {"name": "events", "namespace": "team",
                         "creationTimestamp": "2026-01-01T00:00:10Z"},
            "spec": {"partitions": 3, "replicationFactor": 1, "placement": {"clusters": ["a", "mars"]}},
        }))
        .unwrap();
        let c = claim(&topic, &Clusters::new()).unwrap();
        assert_eq!(c.object, "team/events");
        assert_eq!(c.name, "events");
        assert_eq!(c.clusters, ["a", "mars"], "unknown names still claim");
        assert_eq!(c.created_unix_millis, Some(1_767_225_610_000));
    }
}
