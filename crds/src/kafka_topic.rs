//! `FederatedKafkaTopic` (a topic kept alike across clusters' Kafka) and `KafkaTopicPolicy`
//! (compliance rules for such topics).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::{bounds, messages};

/// CEL rule: a topic name Kafka accepts.
const TOPIC_NAME_RULE: &str =
    "self.matches('^[a-zA-Z0-9._-]{1,249}$') && self != '.' && self != '..'";

/// A Kafka topic kept alike in the Kafka of every selected member cluster. Agents create
/// it, raise its partitions and alter its configs; lowering partitions or changing the
/// replication factor is refused with a status message, never attempted.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "accord.io",
    version = "v1beta1",
    kind = "FederatedKafkaTopic",
    namespaced,
    shortname = "fkt",
    category = "accord",
    status = "FederatedKafkaTopicStatus",
    doc = "A Kafka topic kept alike (partitions, replication factor, configs) in the Kafka of every selected member cluster. Partitions are only ever raised; a lower count or a new replication factor is refused with a status message.",
    printcolumn(name = "Topic", type_ = "string", json_path = ".spec.topicName"),
    printcolumn(name = "Partitions", type_ = "integer", json_path = ".spec.partitions"),
    printcolumn(name = "RF", type_ = "integer", json_path = ".spec.replicationFactor"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FederatedKafkaTopicSpec {
    /// Topic name in Kafka (default: metadata.name). A name an older FederatedKafkaTopic
    /// already has in one of the same clusters is refused by the hub's admission webhook
    /// (reason `TOPIC_ALREADY_MANAGED`, naming the owner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 249))]
    #[x_kube(validation = Rule::new(TOPIC_NAME_RULE).message(messages::TOPIC_NAME))]
    pub topic_name: Option<String>,
    /// Number of partitions; may be raised later, never lowered. 1 to 10,000.
    #[schemars(range(min = 1, max = bounds::MAX_PARTITIONS))]
    #[x_kube(
        validation = Rule::new("self >= 1").message(messages::PARTITIONS_MIN),
        validation = Rule::new(format!("self <= {}", bounds::MAX_PARTITIONS)).message(messages::PARTITIONS_MAX)
    )]
    pub partitions: i32,
    /// Replication factor; fixed once the topic exists. 1 to 32, and at most the number of
    /// brokers in each member's Kafka.
    #[schemars(range(min = 1, max = bounds::MAX_REPLICATION_FACTOR))]
    #[x_kube(
        validation = Rule::new("self >= 1").message(messages::REPLICATION_FACTOR_MIN),
        validation = Rule::new(format!("self <= {}", bounds::MAX_REPLICATION_FACTOR)).message(messages::REPLICATION_FACTOR_MAX)
    )]
    pub replication_factor: i32,
    /// Topic configs, e.g. `retention.ms: "604800000"`, `cleanup.policy: delete`. At most
    /// 100 keys of up to 255 characters; values up to 4,096 characters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 100))]
    #[x_kube(validation = Rule::new("self.all(k, size(k) >= 1 && size(k) <= 255 && size(self[k]) <= 4096)").message(messages::TOPIC_CONFIG))]
    pub config: BTreeMap<String, String>,
    /// The member clusters it goes to: `clusters` (by name) or `clusterSelector` (by
    /// ManagedCluster labels).
    pub placement: crate::ClusterPlacement,
    /// How a change reaches the clusters: every cluster at once (unset, `All`) or step by
    /// step with health checks and automatic rollback (`Progressive`,
    /// `ProgressivePerGroup`). Changing only this field is not a new revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::Rollout>,
    /// What deleting this object does to the topics: `Retain` (default) leaves them and
    /// their data in every member's Kafka; `Delete` deletes them in every member first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
}

/// What deleting a FederatedKafkaTopic does to its topics.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum DeletionPolicy {
    /// Leave the topics and their data in Kafka (the default: a `kubectl delete` never
    /// deletes data unless asked).
    #[default]
    Retain,
    /// Delete the topic in every member before the object goes.
    Delete,
}

/// How a KafkaTopicPolicy treats a topic that breaks it.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum Enforcement {
    /// Refuse it at admission, and do not propagate it if it got in anyway (the default).
    #[default]
    Deny,
    /// Admit it with a warning, an audit annotation and an Event; propagate it.
    Audit,
}

impl FederatedKafkaTopicSpec {
    /// `spec.deletionPolicy`, defaulted.
    pub fn deletion_policy(&self) -> DeletionPolicy {
        self.deletion_policy.unwrap_or_default()
    }
}

impl FederatedKafkaTopic {
    /// The topic's name in Kafka: `spec.topicName`, else `metadata.name`.
    pub fn topic_name(&self) -> &str {
        self.spec
            .topic_name
            .as_deref()
            .or(self.metadata.name.as_deref())
            .unwrap_or_default()
    }
}

/// Observed state of a federated topic.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FederatedKafkaTopicStatus {
    /// Generation of the spec this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_GENERATION))]
    pub observed_generation: Option<i64>,
    /// The topic in each selected cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<TopicPlacement>,
    /// Every placement counted by state, when there are more than the hub lists in full
    /// (`--status-placements-threshold`, default 100): `placements` then shows only those
    /// not `Synced`, up to `--status-placements-listed`; `accord-hub placements` shows all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<crate::PlacementSummary>,
    /// How many clusters were considered, where the object is placed and why the others
    /// are not: counts by reason, at most 20 clusters named per reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<crate::SelectionSummary>,
    /// Trace id (32 hex) of the latest change's trace: its decision, its record write and
    /// every member's apply, when the hub exports traces (`--otlp-endpoint`). Look it up in
    /// the trace backend; absent when the latest change was not traced.
    #[serde(default, rename = "traceID", skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The rollout of the latest revision, with `spec.rollout` progressive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::RolloutStatus>,
    /// `Ready`, `Degraded`, `PolicyViolation`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "bounds::conditions")]
    pub conditions: Vec<Condition>,
}

/// The topic as one cluster's agent last saw it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TopicPlacement {
    /// Member cluster.
    pub cluster: String,
    /// Pending, Synced, Conflict, Unavailable or Error.
    pub state: crate::PlacementState,
    /// Partition count the broker reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub partitions: Option<i32>,
    /// Replication factor the broker reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub replication_factor: Option<i32>,
    /// Detail, e.g. why a change was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The revision the cluster runs, while `spec.rollout` is progressive: the one
    /// `status.rollout.revision` names once the rollout reached the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub revision: Option<String>,
}

/// Compliance rules for FederatedKafkaTopics, enforced by the hub's validating admission
/// webhook (reason `TOPIC_CREATION_POLICY_VIOLATION`, also when the topic's name is taken as
/// well) and again before propagation, and for FederatedKafkaUsers' ACLs (`users`, same
/// reason, at admission).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "accord.io",
    version = "v1beta1",
    kind = "KafkaTopicPolicy",
    shortname = "ktp",
    category = "accord",
    status = "KafkaTopicPolicyStatus",
    doc = "Compliance rules that FederatedKafkaTopics, and FederatedKafkaUsers' ACLs, in the selected namespaces must follow.",
    printcolumn(
        name = "Min-Partitions",
        type_ = "integer",
        json_path = ".spec.minPartitions"
    ),
    printcolumn(name = "RF", type_ = "integer", json_path = ".spec.replicationFactor"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("!has(self.minPartitions) || !has(self.maxPartitions) || self.minPartitions <= self.maxPartitions").message(messages::MIN_PARTITIONS_LE_MAX))]
#[serde(rename_all = "camelCase")]
pub struct KafkaTopicPolicySpec {
    /// Namespaces whose topics (and users) this policy governs, by namespace label (all
    /// when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Topics must have at least this many partitions. 1 to 10,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = bounds::MAX_PARTITIONS))]
    #[x_kube(validation = Rule::new(format!("self >= 1 && self <= {}", bounds::MAX_PARTITIONS)).message(messages::MIN_PARTITIONS_RANGE))]
    pub min_partitions: Option<i32>,
    /// Topics may have at most this many partitions. 1 to 10,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = bounds::MAX_PARTITIONS))]
    #[x_kube(validation = Rule::new(format!("self >= 1 && self <= {}", bounds::MAX_PARTITIONS)).message(messages::MAX_PARTITIONS_RANGE))]
    pub max_partitions: Option<i32>,
    /// Topics must have exactly this replication factor. 1 to 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = bounds::MAX_REPLICATION_FACTOR))]
    #[x_kube(
        validation = Rule::new("self >= 1").message(messages::REPLICATION_FACTOR_MIN),
        validation = Rule::new(format!("self <= {}", bounds::MAX_REPLICATION_FACTOR)).message(messages::REPLICATION_FACTOR_MAX)
    )]
    pub replication_factor: Option<i32>,
    /// Config keys topics may not set, e.g. `unclean.leader.election.enable`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(max = 255)))]
    pub forbidden_configs: Vec<String>,
    /// Regular expression every topic name must match (the whole name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub topic_name_pattern: Option<String>,
    /// `Deny` (default) refuses breaking topics (and users); `Audit` admits them with a
    /// warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<Enforcement>,
    /// What FederatedKafkaUsers in the selected namespaces may grant. Also when unset: a
    /// policy that governs a namespace's topics governs its users' ACLs too, so an `allow`
    /// ACL with operation `All` or resource name `*` breaks it unless allowed here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users: Option<UserRules>,
}

/// The rules a KafkaTopicPolicy sets for FederatedKafkaUsers' `allow` ACLs (a `deny` ACL
/// only narrows access, so it may name anything). Enforced by the hub's admission webhook
/// for FederatedKafkaUsers with the policy's `enforcement`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UserRules {
    /// Whether an ACL may grant operation `All` (default false: name the operations).
    #[serde(default)]
    pub allow_all_operations: bool,
    /// Whether an ACL may name resource `*`, every resource of its type (default false).
    #[serde(default)]
    pub allow_wildcard_resources: bool,
}

/// Compiles a `topicNamePattern` so that it must match the whole topic name, with a size
/// limit so that a hostile pattern cannot make the hub build a huge automaton.
pub fn compile_topic_pattern(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(1 << 20)
        .build()
}

impl KafkaTopicPolicySpec {
    /// `spec.enforcement`, defaulted.
    pub fn enforcement(&self) -> Enforcement {
        self.enforcement.unwrap_or_default()
    }

    /// `spec.users`, defaulted (nothing allowed beyond named operations and resources).
    pub fn users(&self) -> UserRules {
        self.users.unwrap_or_default()
    }
}

/// Observed state of a topic policy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KafkaTopicPolicyStatus {
    /// Generation of the spec this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_GENERATION))]
    pub observed_generation: Option<i64>,
    /// Topics currently violating this policy (they were created before it, or bypassed
    /// the webhook); the hub does not propagate them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub violating_topics: Option<i32>,
    /// `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "bounds::conditions")]
    pub conditions: Vec<Condition>,
}

crate::placed_status! {
    FederatedKafkaTopic => FederatedKafkaTopicStatus, TopicPlacement;
}
