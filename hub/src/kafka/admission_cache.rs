//! The Kafka admissions' own reflectors — FederatedKafkaTopics, KafkaTopicPolicies,
//! Namespaces and ManagedClusters (metadata only for the last two) — run on every replica,
//! leader or not, so that answering a review never calls the API server. The topic and user
//! admissions share them.
//!
//! Topics and policies are watched as [`Lenient`] objects: one stored object that does not
//! fit the Rust type must not stop the watch (it is skipped when a review reads it).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accord_crds::ManagedCluster;
use accord_crds::kafka_topic::{FederatedKafkaTopic, KafkaTopicPolicy};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::controllers::Lenient;

/// Stored topics, as the reflector keeps them.
pub type TopicObject = Lenient<FederatedKafkaTopic>;
/// Stored policies, as the reflector keeps them.
pub type PolicyObject = Lenient<KafkaTopicPolicy>;

/// A reflector of the webhook stopped; the hub stops with it.
#[derive(Debug, thiserror::Error)]
#[error("the webhook's {kind} reflector stopped")]
pub struct CacheStopped {
    /// Which kind.
    pub kind: &'static str,
}

/// Read side of the webhook's reflectors.
#[derive(Clone)]
pub struct Caches {
    topics: Store<TopicObject>,
    policies: Store<PolicyObject>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    clusters: Store<PartialObjectMeta<ManagedCluster>>,
    /// Bumped on every topic event, so an Event can wait for a topic to be stored.
    topic_changes: watch::Receiver<u64>,
}

impl Caches {
    /// Starts nothing: returns the read side and the future that runs the four watches
    /// (it ends only when one of them does).
    pub fn new(
        kube: kube::Client,
    ) -> (
        Self,
        impl std::future::Future<Output = Result<(), CacheStopped>> + Send + 'static,
    ) {
        let (topics, topics_writer) = reflector::store();
        let (policies, policies_writer) = reflector::store();
        let (namespaces, namespaces_writer) = reflector::store();
        let (clusters, clusters_writer) = reflector::store();
        let (bump, topic_changes) = watch::channel(0u64);
        let config = watcher::Config::default;
        let topic_watch =
            accord_common::watch::watcher(Api::<TopicObject>::all(kube.clone()), config())
                .default_backoff()
                .reflect(topics_writer)
                .for_each(move |event| {
                    log_watch_error("FederatedKafkaTopic", event.err());
                    bump.send_modify(|n| *n = n.wrapping_add(1));
                    futures::future::ready(())
                });
        let policy_watch =
            accord_common::watch::watcher(Api::<PolicyObject>::all(kube.clone()), config())
                .default_backoff()
                .reflect(policies_writer)
                .for_each(|event| {
                    log_watch_error("KafkaTopicPolicy", event.err());
                    futures::future::ready(())
                });
        let namespace_watch = accord_common::watch::watcher(
            Api::<PartialObjectMeta<Namespace>>::all(kube.clone()),
            config(),
        )
        .default_backoff()
        .reflect(namespaces_writer)
        .for_each(|event| {
            log_watch_error("Namespace", event.err());
            futures::future::ready(())
        });
        let cluster_watch = accord_common::watch::watcher(
            Api::<PartialObjectMeta<ManagedCluster>>::all(kube),
            config(),
        )
        .default_backoff()
        .modify(crate::controllers::without_managed_fields)
        .reflect(clusters_writer)
        .for_each(|event| {
            log_watch_error("ManagedCluster", event.err());
            futures::future::ready(())
        });
        let run = async move {
            let kind = tokio::select! {
                () = topic_watch => "FederatedKafkaTopic",
                () = policy_watch => "KafkaTopicPolicy",
                () = namespace_watch => "Namespace",
                () = cluster_watch => "ManagedCluster",
            };
            Err(CacheStopped { kind })
        };
        (
            Self {
                topics,
                policies,
                namespaces,
                clusters,
                topic_changes,
            },
            run,
        )
    }

    /// Caches holding exactly these objects, listed and never changing: for tests and
    /// benchmarks of the server without a cluster.
    pub fn fixed(
        topics: Vec<TopicObject>,
        policies: Vec<PolicyObject>,
        namespaces: Vec<PartialObjectMeta<Namespace>>,
        clusters: Vec<PartialObjectMeta<ManagedCluster>>,
    ) -> Self {
        fn listed<K>(objects: Vec<K>) -> Store<K>
        where
            K: kube::Resource + Clone + 'static,
            K::DynamicType: Default + Eq + std::hash::Hash + Clone,
        {
            let mut writer = reflector::store::Writer::default();
            writer.apply_watcher_event(&watcher::Event::Init);
            for object in objects {
                writer.apply_watcher_event(&watcher::Event::InitApply(object));
            }
            writer.apply_watcher_event(&watcher::Event::InitDone);
            writer.as_reader()
        }
        let (_bump, topic_changes) = watch::channel(0u64);
        Self {
            topics: listed(topics),
            policies: listed(policies),
            namespaces: listed(namespaces),
            clusters: listed(clusters),
            topic_changes,
        }
    }

    /// Whether every reflector has listed its kind once.
    pub async fn wait_until_ready(&self) {
        let _ = futures::join!(
            self.topics.wait_until_ready(),
            self.policies.wait_until_ready(),
            self.namespaces.wait_until_ready(),
            self.clusters.wait_until_ready(),
        );
    }

    /// Every KafkaTopicPolicy that decodes (one that does not is skipped: its own status
    /// says why). FederatedKafkaTopic and FederatedKafkaUser reviews both judge by these.
    pub fn policies(&self) -> Vec<KafkaTopicPolicy> {
        self.policies
            .state()
            .iter()
            .filter_map(|p| p.decode().ok())
            .collect()
    }

    /// The labels of `namespace` (empty when it is not cached, or for no namespace): what a
    /// policy's namespaceSelector is matched against.
    pub fn namespace_labels(&self, namespace: Option<&str>) -> BTreeMap<String, String> {
        namespace
            .and_then(|ns| self.namespaces.get(&ObjectRef::new(ns)))
            .and_then(|ns| ns.metadata.labels.clone())
            .unwrap_or_default()
    }

    /// The stored FederatedKafkaTopics (that decode) whose Kafka topic name is `name`.
    pub fn topics_named(&self, name: &str) -> Vec<FederatedKafkaTopic> {
        self.topics
            .state()
            .iter()
            .filter(|t| stored_topic_name(t) == Some(name))
            .filter_map(|t| t.decode().ok())
            .collect()
    }

    /// Every ManagedCluster's labels, by cluster name.
    pub fn cluster_labels(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.clusters
            .state()
            .iter()
            .map(|c| {
                (
                    c.metadata.name.clone().unwrap_or_default(),
                    c.metadata.labels.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Waits up to `timeout` until topic `namespace/name` is stored; returns its reference
    /// for an Event, or `None` (it never appeared: refused later, or a dry run).
    pub async fn wait_for_topic(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Option<Arc<TopicObject>> {
        let key = ObjectRef::new(name).within(namespace);
        let mut changes = self.topic_changes.clone();
        tokio::time::timeout(timeout, async {
            loop {
                if let Some(found) = self.topics.get(&key) {
                    return Some(found);
                }
                if changes.changed().await.is_err() {
                    return None;
                }
            }
        })
        .await
        .ok()
        .flatten()
    }
}

/// A failed watch call is retried with backoff; until its kind has listed, reviews are
/// answered 503 (and admitted by `failurePolicy: Ignore`), so say why.
fn log_watch_error(kind: &'static str, error: Option<watcher::Error>) {
    if let Some(e) = error {
        tracing::warn!(kind, error = %e, "the webhook's watch failed; retrying");
    }
}

/// `spec.topicName`, else `metadata.name`, read without decoding the whole object (this
/// runs over every stored topic on every review).
fn stored_topic_name(topic: &TopicObject) -> Option<&str> {
    topic
        .data
        .get("spec")
        .and_then(|spec| spec.get("topicName"))
        .and_then(serde_json::Value::as_str)
        .or(topic.metadata.name.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_stored_topic_name_is_the_spec_name_else_the_object_name() {
        let named = TopicObject::from_value(json!({
            "metadata": { "name": "orders", "namespace": "a" },
            "spec": { "topicName": "orders.v2", "partitions": 1, "replicationFactor": 1 },
        }))
        .unwrap();
        assert_eq!(stored_topic_name(&named), Some("orders.v2"));
        let plain = TopicObject::from_value(json!({
            "metadata": { "name": "orders", "namespace": "a" },
            "spec": { "partitions": 1, "replicationFactor": 1 },
        }))
        .unwrap();
        assert_eq!(stored_topic_name(&plain), Some("orders"));
    }
}
