//! The admin client: topic metadata, topic configs, and creating, growing, reconfiguring
//! and deleting topics, each as one batched request with per-topic results.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, DescribeConfigsRequest,
    IncrementalAlterConfigsRequest, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::{Request, StrBytes};

use crate::config::KafkaConfig;
use crate::conn::{Connection, tls_config};
use crate::error::{ItemError, KafkaError};

/// DescribeConfigs/IncrementalAlterConfigs resource type of a topic.
const RESOURCE_TOPIC: i8 = 2;
/// IncrementalAlterConfigs operation codes.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
/// Kafka's error code for an out-of-range replication factor.
const INVALID_REPLICATION_FACTOR: i16 = 38;
/// Kafka's error code for a malformed request (here: an item the response left out).
const UNKNOWN_SERVER_ERROR: i16 = -1;

/// Per-item results of one operation, keyed by the item's name (a topic, a user).
pub(crate) type ItemResults<T> = BTreeMap<String, Result<T, ItemError>>;

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

/// A connection slot per broker address; a request holds its slot while it runs.
type Slot = Arc<tokio::sync::Mutex<Option<Connection>>>;

struct Inner {
    config: KafkaConfig,
    /// The TLS client configuration, or why the configured CA is unusable.
    tls: Result<Option<Arc<rustls::ClientConfig>>, String>,
    /// Broker addresses from the last metadata, in node id order.
    brokers: Mutex<Vec<String>>,
    /// The broker that answered last: tried first.
    preferred: Mutex<Option<String>>,
    slots: Mutex<HashMap<String, Slot>>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("bootstrap", &self.inner.config.bootstrap)
            .field("brokers", &self.brokers())
            .finish_non_exhaustive()
    }
}

impl Admin {
    /// A client for this configuration; nothing is contacted until the first request.
    pub fn new(config: KafkaConfig) -> Self {
        let tls = tls_config(&config.security).map_err(|e| match e {
            KafkaError::Tls { message, .. } => message,
            other => other.to_string(),
        });
        Self {
            inner: Arc::new(Inner {
                config,
                tls,
                brokers: Mutex::new(Vec::new()),
                preferred: Mutex::new(None),
                slots: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Metadata for these topics (one request). Missing topics are absent from the map.
    pub async fn describe_topics(
        &self,
        names: &[String],
    ) -> Result<BTreeMap<String, TopicDescription>, KafkaError> {
        let topics: Vec<MetadataRequestTopic> = unique(names)
            .into_iter()
            .map(|name| MetadataRequestTopic::default().with_name(Some(topic_name(name))))
            .collect();
        let (_, response) = self
            .call(None, |_| {
                MetadataRequest::default()
                    .with_topics(Some(topics.clone()))
                    .with_allow_auto_topic_creation(false)
            })
            .await?;
        if let Some(e) = KafkaError::from_code(response.error_code, None) {
            return Err(e);
        }
        self.remember_brokers(&response);
        Ok(describe_metadata(&response))
    }

    /// Topic configs, every key (one DescribeConfigs request for all names; per-topic
    /// results).
    pub async fn describe_configs(
        &self,
        names: &[String],
    ) -> Result<ItemResults<BTreeMap<String, ConfigEntry>>, KafkaError> {
        let wanted: BTreeMap<&str, Option<&[String]>> =
            unique(names).into_iter().map(|n| (n, None)).collect();
        self.describe_wanted_configs(&wanted).await
    }

    /// Only the named config keys of each topic (one DescribeConfigs request; per-topic
    /// results holding those of the keys the topic has). A broker builds every config of a
    /// topic it is asked about in full, so a thousand topics described whole cost it seconds
    /// where their few managed keys cost milliseconds. A topic with no keys is not asked
    /// about (Kafka answers an empty key list with every key).
    pub async fn describe_config_keys(
        &self,
        keys: &BTreeMap<String, Vec<String>>,
    ) -> Result<ItemResults<BTreeMap<String, ConfigEntry>>, KafkaError> {
        let wanted: BTreeMap<&str, Option<&[String]>> = keys
            .iter()
            .filter(|(_, k)| !k.is_empty())
            .map(|(n, k)| (n.as_str(), Some(k.as_slice())))
            .collect();
        let mut results = self.describe_wanted_configs(&wanted).await?;
        for (name, k) in keys {
            if k.is_empty() {
                results.insert(name.clone(), Ok(BTreeMap::new()));
            }
        }
        Ok(results)
    }

    async fn describe_wanted_configs(
        &self,
        wanted: &BTreeMap<&str, Option<&[String]>>,
    ) -> Result<ItemResults<BTreeMap<String, ConfigEntry>>, KafkaError> {
        let names: Vec<&str> = wanted.keys().copied().collect();
        let (addr, mut results) = self.describe_configs_once(wanted, &names, None).await?;
        let retry = retriable(&results);
        if !retry.is_empty()
            && let Ok((_, again)) = self
                .describe_configs_once(wanted, &retry, Some(&addr))
                .await
        {
            results.extend(again);
        }
        Ok(results)
    }

    async fn describe_configs_once(
        &self,
        wanted: &BTreeMap<&str, Option<&[String]>>,
        names: &[&str],
        exclude: Option<&str>,
    ) -> Result<(String, ItemResults<BTreeMap<String, ConfigEntry>>), KafkaError> {
        if names.is_empty() {
            return Ok((String::new(), BTreeMap::new()));
        }
        let resources: Vec<DescribeConfigsResource> = names
            .iter()
            .map(|name| {
                let keys = wanted.get(name).copied().flatten().map(|keys| {
                    keys.iter()
                        .map(|k| StrBytes::from_string(k.clone()))
                        .collect()
                });
                DescribeConfigsResource::default()
                    .with_resource_type(RESOURCE_TOPIC)
                    .with_resource_name(StrBytes::from_string(name.to_string()))
                    .with_configuration_keys(keys)
            })
            .collect();
        let (addr, response) = self
            .call(exclude, |_| {
                DescribeConfigsRequest::default().with_resources(resources.clone())
            })
            .await?;
        let mut results = BTreeMap::new();
        for result in response.results {
            let name = result.resource_name.to_string();
            let value = match ItemError::from_code(
                result.error_code,
                result.error_message.map(|m| m.to_string()),
            ) {
                Some(e) => Err(e),
                None => Ok(result
                    .configs
                    .into_iter()
                    .map(|c| {
                        (
                            c.name.to_string(),
                            ConfigEntry {
                                value: c.value.map(|v| v.to_string()),
                                source: ConfigSource::from_code(c.config_source),
                                read_only: c.read_only,
                                sensitive: c.is_sensitive,
                            },
                        )
                    })
                    .collect()),
            };
            results.insert(name, value);
        }
        Ok((addr, complete(names, results)))
    }

    /// Creates topics (one request); per-topic results.
    pub async fn create_topics(&self, topics: &[NewTopic]) -> Result<ItemResults<()>, KafkaError> {
        let mut seen = BTreeSet::new();
        let topics: Vec<&NewTopic> = topics
            .iter()
            .filter(|t| seen.insert(t.name.as_str()))
            .collect();
        let (addr, mut results) = self.create_topics_once(&topics, None).await?;
        let retry = retriable(&results);
        if !retry.is_empty() {
            let again: Vec<&NewTopic> = topics
                .iter()
                .copied()
                .filter(|t| retry.contains(&t.name.as_str()))
                .collect();
            if let Ok((_, again)) = self.create_topics_once(&again, Some(&addr)).await {
                results.extend(again);
            }
        }
        Ok(results)
    }

    async fn create_topics_once(
        &self,
        topics: &[&NewTopic],
        exclude: Option<&str>,
    ) -> Result<(String, ItemResults<()>), KafkaError> {
        let mut results = BTreeMap::new();
        let mut creatable = Vec::new();
        for topic in topics {
            let Ok(replication_factor) = i16::try_from(topic.replication_factor) else {
                results.insert(
                    topic.name.clone(),
                    Err(ItemError {
                        code: INVALID_REPLICATION_FACTOR,
                        name: crate::error::error_name(INVALID_REPLICATION_FACTOR),
                        message: Some(format!(
                            "replication factor {} is out of range",
                            topic.replication_factor
                        )),
                    }),
                );
                continue;
            };
            creatable.push(
                CreatableTopic::default()
                    .with_name(topic_name(&topic.name))
                    .with_num_partitions(topic.partitions)
                    .with_replication_factor(replication_factor)
                    .with_configs(
                        topic
                            .config
                            .iter()
                            .map(|(k, v)| {
                                CreatableTopicConfig::default()
                                    .with_name(StrBytes::from_string(k.clone()))
                                    .with_value(Some(StrBytes::from_string(v.clone())))
                            })
                            .collect(),
                    ),
            );
        }
        if creatable.is_empty() {
            return Ok((String::new(), results));
        }
        let timeout_ms = self.timeout_ms();
        let (addr, response) = self
            .call(exclude, |_| {
                CreateTopicsRequest::default()
                    .with_topics(creatable.clone())
                    .with_timeout_ms(timeout_ms)
            })
            .await?;
        for topic in response.topics {
            results.insert(
                topic.name.0.to_string(),
                unit_result(topic.error_code, topic.error_message),
            );
        }
        let names: Vec<&str> = topics.iter().map(|t| t.name.as_str()).collect();
        Ok((addr, complete(&names, results)))
    }

    /// Raises topics' partition counts to the given new totals (one request).
    pub async fn create_partitions(
        &self,
        topics: &[(String, i32)],
    ) -> Result<ItemResults<()>, KafkaError> {
        let mut seen = BTreeSet::new();
        let topics: Vec<&(String, i32)> = topics
            .iter()
            .filter(|(n, _)| seen.insert(n.as_str()))
            .collect();
        let (addr, mut results) = self.create_partitions_once(&topics, None).await?;
        let retry = retriable(&results);
        if !retry.is_empty() {
            let again: Vec<&(String, i32)> = topics
                .iter()
                .copied()
                .filter(|(n, _)| retry.contains(&n.as_str()))
                .collect();
            if let Ok((_, again)) = self.create_partitions_once(&again, Some(&addr)).await {
                results.extend(again);
            }
        }
        Ok(results)
    }

    async fn create_partitions_once(
        &self,
        topics: &[&(String, i32)],
        exclude: Option<&str>,
    ) -> Result<(String, ItemResults<()>), KafkaError> {
        if topics.is_empty() {
            return Ok((String::new(), BTreeMap::new()));
        }
        let request_topics: Vec<CreatePartitionsTopic> = topics
            .iter()
            .map(|(name, count)| {
                CreatePartitionsTopic::default()
                    .with_name(topic_name(name))
                    .with_count(*count)
                    .with_assignments(None)
            })
            .collect();
        let timeout_ms = self.timeout_ms();
        let (addr, response) = self
            .call(exclude, |_| {
                CreatePartitionsRequest::default()
                    .with_topics(request_topics.clone())
                    .with_timeout_ms(timeout_ms)
            })
            .await?;
        let results = response
            .results
            .into_iter()
            .map(|r| {
                (
                    r.name.0.to_string(),
                    unit_result(r.error_code, r.error_message),
                )
            })
            .collect();
        let names: Vec<&str> = topics.iter().map(|(n, _)| n.as_str()).collect();
        Ok((addr, complete(&names, results)))
    }

    /// Changes topic-level configs key by key with IncrementalAlterConfigs (never the
    /// legacy AlterConfigs, which would reset every key not named); one request. Topics
    /// with no changes succeed without being sent.
    pub async fn incremental_alter_configs(
        &self,
        changes: &[(String, Vec<ConfigOp>)],
    ) -> Result<ItemResults<()>, KafkaError> {
        let mut seen = BTreeSet::new();
        let mut results = BTreeMap::new();
        let mut send = Vec::new();
        for change in changes {
            if !seen.insert(change.0.as_str()) {
                continue;
            }
            if change.1.is_empty() {
                results.insert(change.0.clone(), Ok(()));
            } else {
                send.push(change);
            }
        }
        let (addr, sent) = self.alter_configs_once(&send, None).await?;
        results.extend(sent);
        let retry = retriable(&results);
        if !retry.is_empty() {
            let again: Vec<&(String, Vec<ConfigOp>)> = send
                .iter()
                .copied()
                .filter(|(n, _)| retry.contains(&n.as_str()))
                .collect();
            if let Ok((_, again)) = self.alter_configs_once(&again, Some(&addr)).await {
                results.extend(again);
            }
        }
        Ok(results)
    }

    async fn alter_configs_once(
        &self,
        changes: &[&(String, Vec<ConfigOp>)],
        exclude: Option<&str>,
    ) -> Result<(String, ItemResults<()>), KafkaError> {
        if changes.is_empty() {
            return Ok((String::new(), BTreeMap::new()));
        }
        let resources: Vec<AlterConfigsResource> = changes
            .iter()
            .map(|(name, ops)| {
                AlterConfigsResource::default()
                    .with_resource_type(RESOURCE_TOPIC)
                    .with_resource_name(StrBytes::from_string(name.clone()))
                    .with_configs(ops.iter().map(alterable).collect())
            })
            .collect();
        let (addr, response) = self
            .call(exclude, |_| {
                IncrementalAlterConfigsRequest::default().with_resources(resources.clone())
            })
            .await?;
        let results = response
            .responses
            .into_iter()
            .map(|r| {
                (
                    r.resource_name.to_string(),
                    unit_result(r.error_code, r.error_message),
                )
            })
            .collect();
        let names: Vec<&str> = changes.iter().map(|(n, _)| n.as_str()).collect();
        Ok((addr, complete(&names, results)))
    }

    /// Deletes topics (one request); per-topic results.
    pub async fn delete_topics(&self, names: &[String]) -> Result<ItemResults<()>, KafkaError> {
        let names = unique(names);
        let (addr, mut results) = self.delete_topics_once(&names, None).await?;
        let retry = retriable(&results);
        if !retry.is_empty()
            && let Ok((_, again)) = self.delete_topics_once(&retry, Some(&addr)).await
        {
            results.extend(again);
        }
        Ok(results)
    }

    async fn delete_topics_once(
        &self,
        names: &[&str],
        exclude: Option<&str>,
    ) -> Result<(String, ItemResults<()>), KafkaError> {
        if names.is_empty() {
            return Ok((String::new(), BTreeMap::new()));
        }
        let timeout_ms = self.timeout_ms();
        let (addr, response) = self
            .call(exclude, |version| {
                let request = DeleteTopicsRequest::default().with_timeout_ms(timeout_ms);
                // Version 6 names topics in `topics` (name or id); older ones in `topic_names`.
                if version >= 6 {
                    request.with_topics(
                        names
                            .iter()
                            .map(|n| DeleteTopicState::default().with_name(Some(topic_name(n))))
                            .collect(),
                    )
                } else {
                    request.with_topic_names(names.iter().map(|n| topic_name(n)).collect())
                }
            })
            .await?;
        let results = response
            .responses
            .into_iter()
            .filter_map(|r| {
                let name = r.name?.0.to_string();
                Some((name, unit_result(r.error_code, r.error_message)))
            })
            .collect();
        Ok((addr, complete(names, results)))
    }

    /// Broker addresses from the last metadata (for status and logs; never credentials).
    pub fn brokers(&self) -> Vec<String> {
        lock(&self.inner.brokers).clone()
    }

    /// How long the broker may work on a request (`timeout_ms`): four fifths of ours, so
    /// its answer (per-topic REQUEST_TIMED_OUT at worst) arrives before we give up on it.
    fn timeout_ms(&self) -> i32 {
        let ours = self.inner.config.request_timeout.as_millis() * 4 / 5;
        i32::try_from(ours).unwrap_or(i32::MAX)
    }

    fn remember_brokers(&self, response: &MetadataResponse) {
        let mut brokers: Vec<(i32, String)> = response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format_addr(b.host.as_str(), b.port)))
            .collect();
        brokers.sort();
        *lock(&self.inner.brokers) = brokers.into_iter().map(|(_, addr)| addr).collect();
    }

    /// Where to send a request: the broker that answered last, the brokers from the last
    /// metadata, then the bootstrap list; without `exclude` unless it is the only one.
    fn candidates(&self, exclude: Option<&str>) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        let preferred = lock(&self.inner.preferred).clone();
        for addr in preferred
            .into_iter()
            .chain(lock(&self.inner.brokers).iter().cloned())
            .chain(self.inner.config.bootstrap.iter().cloned())
        {
            if !all.contains(&addr) {
                all.push(addr);
            }
        }
        let others: Vec<String> = all
            .iter()
            .filter(|a| Some(a.as_str()) != exclude)
            .cloned()
            .collect();
        if others.is_empty() { all } else { others }
    }

    fn slot(&self, addr: &str) -> Slot {
        lock(&self.inner.slots)
            .entry(addr.to_string())
            .or_default()
            .clone()
    }

    /// Sends one request to the first broker that answers, connecting (and authenticating)
    /// as needed. Unreachable brokers, timeouts and protocol failures move on to the next
    /// candidate; authentication and TLS failures end the attempt at once (every broker
    /// would say the same). Returns the answering broker's address with the response.
    pub(crate) async fn call<R: Request>(
        &self,
        exclude: Option<&str>,
        build: impl Fn(i16) -> R,
    ) -> Result<(String, R::Response), KafkaError> {
        let tls = match &self.inner.tls {
            Ok(tls) => tls.as_ref(),
            Err(message) => {
                return Err(KafkaError::Tls {
                    addr: self.inner.config.bootstrap.join(","),
                    message: message.clone(),
                });
            }
        };
        let mut last_error = None;
        for addr in self.candidates(exclude) {
            let slot = self.slot(&addr);
            let mut connection = slot.lock().await;
            // A kept connection may have died quietly (broker restarted, idle timeout):
            // its first failure earns one fresh connection to the same broker.
            let mut reused = connection.is_some();
            loop {
                if connection.is_none() {
                    match Connection::open(&addr, &self.inner.config, tls).await {
                        Ok(mut opened) => {
                            tracing::debug!(broker = %addr, "connected to Kafka");
                            // Learn the other brokers once, so later requests can fail
                            // over to them even with one bootstrap address configured.
                            if lock(&self.inner.brokers).is_empty()
                                && let Ok(metadata) = opened.send(|_| brokers_only()).await
                            {
                                self.remember_brokers(&metadata);
                            }
                            *connection = Some(opened);
                        }
                        Err(e) if moves_on(&e) => {
                            tracing::debug!(broker = %addr, error = %e, "Kafka broker failed; trying the next");
                            last_error = Some(e);
                            break;
                        }
                        Err(e) => return Err(e),
                    }
                }
                let Some(open) = connection.as_mut() else {
                    break;
                };
                match open.send(&build).await {
                    Ok(response) => {
                        *lock(&self.inner.preferred) = Some(addr.clone());
                        return Ok((addr, response));
                    }
                    Err(e) => {
                        // The connection's state is unknown after a failure: start afresh.
                        *connection = None;
                        if !moves_on(&e) {
                            return Err(e);
                        }
                        if std::mem::take(&mut reused)
                            && matches!(e, KafkaError::Unreachable { .. })
                        {
                            tracing::debug!(broker = %addr, error = %e, "kept Kafka connection broke; reconnecting");
                            continue;
                        }
                        tracing::debug!(broker = %addr, error = %e, "Kafka request failed; trying the next broker");
                        last_error = Some(e);
                        break;
                    }
                }
            }
        }
        Err(last_error.unwrap_or_else(|| KafkaError::Unreachable {
            addr: "(no bootstrap servers)".to_string(),
            error: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no broker address configured",
            ),
        }))
    }
}

/// Whether a failure on one broker is worth trying the next broker for.
fn moves_on(error: &KafkaError) -> bool {
    error.is_retriable() || matches!(error, KafkaError::Protocol { .. })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// `host:port`, with brackets around IPv6 hosts.
fn format_addr(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A metadata request for the broker list alone.
fn brokers_only() -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(Some(Vec::new()))
        .with_allow_auto_topic_creation(false)
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

pub(crate) fn unique(names: &[String]) -> Vec<&str> {
    let mut seen = BTreeSet::new();
    names
        .iter()
        .map(String::as_str)
        .filter(|n| seen.insert(*n))
        .collect()
}

fn unit_result(code: i16, message: Option<StrBytes>) -> Result<(), ItemError> {
    match ItemError::from_code(code, message.map(|m| m.to_string())) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn alterable(op: &ConfigOp) -> AlterableConfig {
    match op {
        ConfigOp::Set(key, value) => AlterableConfig::default()
            .with_name(StrBytes::from_string(key.clone()))
            .with_config_operation(OP_SET)
            .with_value(Some(StrBytes::from_string(value.clone()))),
        ConfigOp::Delete(key) => AlterableConfig::default()
            .with_name(StrBytes::from_string(key.clone()))
            .with_config_operation(OP_DELETE)
            .with_value(None),
    }
}

/// Names whose error is worth one more try on another broker.
pub(crate) fn retriable<T>(results: &ItemResults<T>) -> Vec<&str> {
    results
        .iter()
        .filter(|(_, r)| r.as_ref().is_err_and(ItemError::is_retriable))
        .map(|(n, _)| n.as_str())
        .collect()
}

/// Every requested name gets a result, even one the broker left out of its response.
pub(crate) fn complete<T>(names: &[&str], mut results: ItemResults<T>) -> ItemResults<T> {
    for name in names {
        results
            .entry(name.to_string())
            .or_insert_with(|| Err(left_out()));
    }
    results
}

/// The error of an item (a topic, a user, an ACL) the broker's response left out.
pub(crate) fn left_out() -> ItemError {
    ItemError {
        code: UNKNOWN_SERVER_ERROR,
        name: crate::error::error_name(UNKNOWN_SERVER_ERROR),
        message: Some("the broker's response left this out".into()),
    }
}

/// The topics a metadata response describes. A topic the broker does not know, or one
/// without partition information yet, is absent.
fn describe_metadata(response: &MetadataResponse) -> BTreeMap<String, TopicDescription> {
    let mut topics = BTreeMap::new();
    for topic in &response.topics {
        let Some(name) = &topic.name else { continue };
        let unknown =
            ItemError::from_code(topic.error_code, None).is_some_and(|e| e.is_unknown_topic());
        if unknown || topic.partitions.is_empty() {
            continue;
        }
        let replication_factor = topic
            .partitions
            .iter()
            .find(|p| p.partition_index == 0)
            .unwrap_or(&topic.partitions[0])
            .replica_nodes
            .len();
        topics.insert(
            name.0.to_string(),
            TopicDescription {
                name: name.0.to_string(),
                partitions: i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX),
                replication_factor: i32::try_from(replication_factor).unwrap_or(i32::MAX),
            },
        );
    }
    topics
}

#[cfg(test)]
mod tests {
    //! Pure helpers, and the routing (failover, NOT_CONTROLLER retry, timeouts) against
    //! scripted fake brokers on loopback; the real protocol is proven against real
    //! brokers in the end-to-end tests.

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use bytes::{BufMut as _, Bytes, BytesMut};
    use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{
        ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, CreateTopicsResponse,
        api_versions_response::ApiVersion,
    };
    use kafka_protocol::protocol::{
        Decodable, Encodable, HeaderVersion, Message, decode_request_header_from_buffer,
    };
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::error::NOT_CONTROLLER;

    fn partition(index: i32, replicas: &[i32]) -> MetadataResponsePartition {
        MetadataResponsePartition::default()
            .with_partition_index(index)
            .with_replica_nodes(replicas.iter().map(|r| BrokerId(*r)).collect())
    }

    #[test]
    fn metadata_gives_partitions_and_the_replicas_of_partition_zero() {
        let response = MetadataResponse::default().with_topics(vec![
            MetadataResponseTopic::default()
                .with_name(Some(topic_name("orders")))
                .with_partitions(vec![partition(1, &[1, 2]), partition(0, &[1, 2, 3])]),
            MetadataResponseTopic::default()
                .with_name(Some(topic_name("missing")))
                .with_error_code(3),
            MetadataResponseTopic::default()
                .with_name(Some(topic_name("no-partitions-yet")))
                .with_error_code(5),
        ]);
        let topics = describe_metadata(&response);
        assert_eq!(topics.len(), 1, "{topics:?}");
        assert_eq!(
            topics["orders"],
            TopicDescription {
                name: "orders".into(),
                partitions: 2,
                replication_factor: 3
            }
        );
    }

    #[test]
    fn topics_left_out_of_a_response_get_an_error_and_retriable_ones_are_found() {
        let mut results: ItemResults<()> = BTreeMap::new();
        results.insert("a".into(), Ok(()));
        results.insert(
            "b".into(),
            Err(ItemError::from_code(NOT_CONTROLLER, None).unwrap()),
        );
        results.insert("c".into(), Err(ItemError::from_code(36, None).unwrap()));
        let results = complete(&["a", "b", "c", "d"], results);
        assert_eq!(results.len(), 4);
        assert_eq!(
            results["d"].as_ref().unwrap_err().name,
            "UNKNOWN_SERVER_ERROR"
        );
        assert_eq!(retriable(&results), ["b"]);
    }

    #[test]
    fn candidates_start_with_the_last_good_broker_and_skip_the_excluded_one() {
        let admin = Admin::new(KafkaConfig::plaintext(["b1:9092", "b2:9092"]));
        *lock(&admin.inner.brokers) = vec!["b2:9092".into(), "b3:9092".into()];
        *lock(&admin.inner.preferred) = Some("b3:9092".into());
        assert_eq!(admin.candidates(None), ["b3:9092", "b2:9092", "b1:9092"]);
        assert_eq!(admin.candidates(Some("b3:9092")), ["b2:9092", "b1:9092"]);
        let lone = Admin::new(KafkaConfig::plaintext(["b1:9092"]));
        assert_eq!(lone.candidates(Some("b1:9092")), ["b1:9092"]);
        assert_eq!(format_addr("::1", 9092), "[::1]:9092");
    }

    #[test]
    fn ops_map_to_set_and_delete_codes() {
        let set = alterable(&ConfigOp::Set("retention.ms".into(), "1".into()));
        assert_eq!(
            (set.config_operation, set.value.as_deref()),
            (OP_SET, Some("1"))
        );
        let delete = alterable(&ConfigOp::Delete("retention.ms".into()));
        assert_eq!((delete.config_operation, delete.value), (OP_DELETE, None));
    }

    /// How a fake broker answers CreateTopics.
    #[derive(Clone, Copy)]
    enum Script {
        /// Every topic fails with NOT_CONTROLLER.
        NotController,
        /// Every topic is created.
        Create,
        /// Never answers anything after accepting.
        Silent,
    }

    struct FakeBroker {
        addr: String,
        create_requests: Arc<AtomicUsize>,
    }

    async fn fake_broker(script: Script, peers: Arc<Mutex<Vec<String>>>) -> FakeBroker {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let create_requests = Arc::new(AtomicUsize::new(0));
        let counter = create_requests.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, script, peers.clone(), counter.clone()));
            }
        });
        FakeBroker {
            addr,
            create_requests,
        }
    }

    async fn serve(
        mut stream: TcpStream,
        script: Script,
        peers: Arc<Mutex<Vec<String>>>,
        create_requests: Arc<AtomicUsize>,
    ) {
        loop {
            let Ok(size) = stream.read_i32().await else {
                return;
            };
            let mut body = vec![0u8; size as usize];
            if stream.read_exact(&mut body).await.is_err() {
                return;
            }
            if let Script::Silent = script {
                continue;
            }
            let mut body = Bytes::from(body);
            let header = decode_request_header_from_buffer(&mut body).unwrap();
            let version = header.request_api_version;
            let id = header.correlation_id;
            let frame = match ApiKey::try_from(header.request_api_key).unwrap() {
                ApiKey::ApiVersions => {
                    let _ = ApiVersionsRequest::decode(&mut body, version).unwrap();
                    let keys = [
                        (ApiKey::ApiVersions, ApiVersionsRequest::VERSIONS),
                        (ApiKey::Metadata, MetadataRequest::VERSIONS),
                        (ApiKey::CreateTopics, CreateTopicsRequest::VERSIONS),
                    ];
                    let response = ApiVersionsResponse::default().with_api_keys(
                        keys.iter()
                            .map(|(key, range)| {
                                ApiVersion::default()
                                    .with_api_key(*key as i16)
                                    .with_min_version(range.min)
                                    .with_max_version(range.max)
                            })
                            .collect(),
                    );
                    frame(&response, version, id)
                }
                ApiKey::Metadata => {
                    let brokers = lock(&peers)
                        .iter()
                        .enumerate()
                        .map(|(i, addr)| {
                            let (host, port) = addr.rsplit_once(':').unwrap();
                            MetadataResponseBroker::default()
                                .with_node_id(BrokerId(i as i32 + 1))
                                .with_host(StrBytes::from_string(host.into()))
                                .with_port(port.parse().unwrap())
                        })
                        .collect();
                    frame(
                        &MetadataResponse::default().with_brokers(brokers),
                        version,
                        id,
                    )
                }
                ApiKey::CreateTopics => {
                    create_requests.fetch_add(1, Ordering::SeqCst);
                    let request = CreateTopicsRequest::decode(&mut body, version).unwrap();
                    let code = match script {
                        Script::NotController => NOT_CONTROLLER,
                        _ => 0,
                    };
                    let topics = request
                        .topics
                        .iter()
                        .map(|t| {
                            CreatableTopicResult::default()
                                .with_name(t.name.clone())
                                .with_error_code(code)
                        })
                        .collect();
                    frame(
                        &CreateTopicsResponse::default().with_topics(topics),
                        version,
                        id,
                    )
                }
                other => panic!("unexpected {other:?}"),
            };
            if stream.write_all(&frame).await.is_err() {
                return;
            }
        }
    }

    fn frame<R: Encodable + HeaderVersion>(response: &R, version: i16, id: i32) -> Vec<u8> {
        let mut out = BytesMut::new();
        out.put_i32(0);
        kafka_protocol::messages::ResponseHeader::default()
            .with_correlation_id(id)
            .encode(&mut out, R::header_version(version))
            .unwrap();
        response.encode(&mut out, version).unwrap();
        let size = (out.len() - 4) as i32;
        out[..4].copy_from_slice(&size.to_be_bytes());
        out.to_vec()
    }

    #[tokio::test]
    async fn not_controller_is_retried_once_on_another_broker() {
        let peers = Arc::new(Mutex::new(Vec::new()));
        let refusing = fake_broker(Script::NotController, peers.clone()).await;
        let creating = fake_broker(Script::Create, peers.clone()).await;
        *lock(&peers) = vec![refusing.addr.clone(), creating.addr.clone()];

        let admin = Admin::new(KafkaConfig::plaintext([refusing.addr.clone()]));
        let topic = NewTopic {
            name: "orders".into(),
            partitions: 1,
            replication_factor: 1,
            config: BTreeMap::new(),
        };
        let results = admin.create_topics(&[topic]).await.unwrap();
        assert_eq!(results["orders"], Ok(()));
        assert_eq!(refusing.create_requests.load(Ordering::SeqCst), 1);
        assert_eq!(creating.create_requests.load(Ordering::SeqCst), 1);
        assert_eq!(admin.brokers(), [refusing.addr, creating.addr]);
    }

    #[tokio::test]
    async fn an_unreachable_bootstrap_broker_is_skipped_for_the_next() {
        let peers = Arc::new(Mutex::new(Vec::new()));
        let creating = fake_broker(Script::Create, peers.clone()).await;
        *lock(&peers) = vec![creating.addr.clone()];
        // A port that was free a moment ago: nothing listens there.
        let dead = {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            listener.local_addr().unwrap().to_string()
        };
        let admin = Admin::new(KafkaConfig::plaintext([dead, creating.addr.clone()]));
        assert!(admin.describe_topics(&[]).await.unwrap().is_empty());
        assert_eq!(admin.brokers(), [creating.addr]);
    }

    #[tokio::test]
    async fn a_silent_broker_is_passed_over_for_the_next_within_twice_the_request_timeout() {
        // The agent's liveness probe gives each broker half its timeout, so one broker
        // that accepts connections and never answers (a frozen JVM) leaves the next one
        // time to answer the same probe.
        let peers = Arc::new(Mutex::new(Vec::new()));
        let silent = fake_broker(Script::Silent, peers.clone()).await;
        let answering = fake_broker(Script::Create, peers.clone()).await;
        *lock(&peers) = vec![silent.addr.clone(), answering.addr.clone()];
        let mut config = KafkaConfig::plaintext([silent.addr.clone(), answering.addr.clone()]);
        config.request_timeout = Duration::from_millis(500);
        let admin = Admin::new(config);
        let answered = tokio::time::timeout(Duration::from_secs(1), admin.describe_topics(&[]))
            .await
            .expect("no answer within twice the request timeout");
        assert!(answered.unwrap().is_empty());
        assert_eq!(
            admin.candidates(None)[0],
            answering.addr,
            "the broker that answered is asked first next time"
        );
    }

    #[tokio::test]
    async fn a_broker_that_never_answers_times_out_naming_it() {
        let silent = fake_broker(Script::Silent, Arc::new(Mutex::new(Vec::new()))).await;
        let mut config = KafkaConfig::plaintext([silent.addr.clone()]);
        config.request_timeout = Duration::from_millis(200);
        let err = Admin::new(config).describe_topics(&[]).await.unwrap_err();
        assert!(matches!(err, KafkaError::Timeout { .. }), "{err:?}");
        assert!(err.to_string().contains(&silent.addr), "{err}");
    }

    #[test]
    fn an_admin_prints_no_credentials() {
        let admin = Admin::new(KafkaConfig {
            bootstrap: vec!["b:9093".into()],
            security: crate::Security::SaslSsl {
                ca_pem: None,
                mechanism: crate::SaslMechanism::ScramSha512,
                username: "accord".into(),
                password: crate::Password::new("hunter2-secret"),
            },
            request_timeout: Duration::from_secs(1),
        });
        let debug = format!("{admin:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
    }
}
