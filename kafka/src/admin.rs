//! The admin client: topic metadata, topic configs, and creating, growing, reconfiguring
//! and deleting topics, each as one batched request with per-topic results.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::config::KafkaConfig;
use crate::error::{ItemError, KafkaError};

/// A topic as the cluster's metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    /// The topic's name.
    pub name: String,
    /// How many partitions it has.
    pub partitions: i32,
    /// How many replicas partition 0 has (Kafka has no per-topic factor).
    pub replication_factor: i32,
}

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    /// The topic's name.
    pub name: String,
    /// Its partition count.
    pub partitions: i32,
    /// Its replication factor.
    pub replication_factor: i32,
    /// Topic-level config overrides.
    pub config: BTreeMap<String, String>,
}

/// One change of IncrementalAlterConfigs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOp {
    /// Set key to value as a topic-level override.
    Set(String, String),
    /// Remove the topic-level override of key (back to the broker's value).
    Delete(String),
}

/// One config entry of a topic, as DescribeConfigs returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// The value (`None` when sensitive or unset).
    pub value: Option<String>,
    /// Where the value comes from.
    pub source: ConfigSource,
    /// Whether it cannot be changed.
    pub read_only: bool,
    /// Whether the broker hides its value.
    pub sensitive: bool,
}

/// Where a config value comes from (DescribeConfigs `config_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// A topic-level override.
    DynamicTopic,
    /// A per-broker dynamic value.
    DynamicBroker,
    /// A cluster-wide dynamic broker default.
    DynamicDefaultBroker,
    /// The broker's `server.properties`.
    StaticBroker,
    /// Kafka's built-in default.
    Default,
    /// Any other source code.
    Other(i8),
}

impl ConfigSource {
    /// The source for DescribeConfigs' `config_source` code.
    pub fn from_code(code: i8) -> Self {
        match code {
            1 => Self::DynamicTopic,
            2 => Self::DynamicBroker,
            3 => Self::DynamicDefaultBroker,
            4 => Self::StaticBroker,
            5 => Self::Default,
            other => Self::Other(other),
        }
    }
}

/// A Kafka admin client. Cheap to clone (clones share connections); connects lazily,
/// reconnects after failures, and tries every bootstrap and known broker before failing.
#[derive(Clone)]
pub struct Admin {
    inner: Arc<Inner>,
}

struct Inner {
    config: KafkaConfig,
    brokers: Mutex<Vec<String>>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("bootstrap", &self.inner.config.bootstrap)
            .finish_non_exhaustive()
    }
}

fn not_yet() -> KafkaError {
    KafkaError::Protocol {
        addr: String::new(),
        message: "not implemented yet".into(),
    }
}

impl Admin {
    /// A client for this configuration; nothing is contacted until the first request.
    pub fn new(config: KafkaConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                brokers: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Metadata for these topics (one request). Missing topics are absent from the map.
    pub async fn describe_topics(
        &self,
        names: &[String],
    ) -> Result<BTreeMap<String, TopicDescription>, KafkaError> {
        let _ = names;
        Err(not_yet())
    }

    /// Topic configs (one DescribeConfigs request for all names; per-topic results).
    #[allow(clippy::type_complexity)]
    pub async fn describe_configs(
        &self,
        names: &[String],
    ) -> Result<BTreeMap<String, Result<BTreeMap<String, ConfigEntry>, ItemError>>, KafkaError>
    {
        let _ = names;
        Err(not_yet())
    }

    /// Creates topics (one request); per-topic results.
    pub async fn create_topics(
        &self,
        topics: &[NewTopic],
    ) -> Result<BTreeMap<String, Result<(), ItemError>>, KafkaError> {
        let _ = topics;
        Err(not_yet())
    }

    /// Raises topics' partition counts to the given new totals (one request).
    pub async fn create_partitions(
        &self,
        topics: &[(String, i32)],
    ) -> Result<BTreeMap<String, Result<(), ItemError>>, KafkaError> {
        let _ = topics;
        Err(not_yet())
    }

    /// Changes topic-level configs key by key with IncrementalAlterConfigs (never the
    /// legacy AlterConfigs, which would reset every key not named); one request.
    pub async fn incremental_alter_configs(
        &self,
        changes: &[(String, Vec<ConfigOp>)],
    ) -> Result<BTreeMap<String, Result<(), ItemError>>, KafkaError> {
        let _ = changes;
        Err(not_yet())
    }

    /// Deletes topics (one request); per-topic results.
    pub async fn delete_topics(
        &self,
        names: &[String],
    ) -> Result<BTreeMap<String, Result<(), ItemError>>, KafkaError> {
        let _ = names;
        Err(not_yet())
    }

    /// Broker addresses from the last metadata (for status and logs; never credentials).
    pub fn brokers(&self) -> Vec<String> {
        self.inner.brokers.lock().unwrap().clone()
    }
}
