//! What can go wrong talking to Kafka: transport, TLS, authentication and request-level
//! errors ([`KafkaError`]), and the per-item (topic, user, ACL) errors inside a successful
//! response ([`ItemError`]). Messages never contain credentials, and a refusal by Kafka's
//! authorizer names the ACL that is missing.

use std::fmt;
use std::time::Duration;

/// Kafka's error code for a topic that exists already.
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
/// Kafka's error code for a topic (or partition) the broker does not know.
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// Kafka's error code for a topic id the broker does not know.
pub const UNKNOWN_TOPIC_ID: i16 = 100;
/// Kafka's error code for a request sent to a broker that cannot act as the controller.
pub const NOT_CONTROLLER: i16 = 41;
/// Kafka's error code for a request that timed out inside the cluster.
pub const REQUEST_TIMED_OUT: i16 = 7;
/// Kafka's error code for a request the ACLs on the cluster resource do not allow.
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
/// Kafka's error code for a thing that does not exist (a user's SCRAM credential, say).
pub const RESOURCE_NOT_FOUND: i16 = 91;

/// The admin APIs Kafka's authorizer checks against an ACL on the cluster resource
/// (`kafka-cluster`), each with the operation it needs. Kafka answers a refusal with a bare
/// CLUSTER_AUTHORIZATION_FAILED; naming the operation, and every API the same grant opens,
/// tells an operator the one `kafka-acls --add --cluster --operation …` that fixes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClusterApi {
    DescribeUserScramCredentials,
    AlterUserScramCredentials,
    DescribeAcls,
    CreateAcls,
    DeleteAcls,
    DescribeClientQuotas,
    AlterClientQuotas,
}

impl ClusterApi {
    const ALL: [Self; 7] = [
        Self::AlterUserScramCredentials,
        Self::CreateAcls,
        Self::DeleteAcls,
        Self::DescribeAcls,
        Self::DescribeUserScramCredentials,
        Self::AlterClientQuotas,
        Self::DescribeClientQuotas,
    ];

    /// Kafka's name for the API.
    fn name(self) -> &'static str {
        match self {
            Self::DescribeUserScramCredentials => "DescribeUserScramCredentials",
            Self::AlterUserScramCredentials => "AlterUserScramCredentials",
            Self::DescribeAcls => "DescribeAcls",
            Self::CreateAcls => "CreateAcls",
            Self::DeleteAcls => "DeleteAcls",
            Self::DescribeClientQuotas => "DescribeClientQuotas",
            Self::AlterClientQuotas => "AlterClientQuotas",
        }
    }

    /// The operation the broker checks on the cluster resource, as `kafka-acls
    /// --operation` spells it (Kafka's `AclApis`, `ControllerApis` and `KafkaApis`).
    fn cluster_operation(self) -> &'static str {
        match self {
            Self::AlterUserScramCredentials | Self::CreateAcls | Self::DeleteAcls => "Alter",
            Self::DescribeUserScramCredentials | Self::DescribeAcls => "Describe",
            Self::AlterClientQuotas => "AlterConfigs",
            Self::DescribeClientQuotas => "DescribeConfigs",
        }
    }

    /// What to grant, e.g. "the agent's Kafka user needs the Alter ACL on the cluster
    /// (AlterUserScramCredentials / CreateAcls / DeleteAcls)".
    pub(crate) fn missing_acl(self) -> String {
        let operation = self.cluster_operation();
        let apis: Vec<&str> = Self::ALL
            .iter()
            .filter(|api| api.cluster_operation() == operation)
            .map(|api| api.name())
            .collect();
        format!(
            "the agent's Kafka user needs the {operation} ACL on the cluster ({})",
            apis.join(" / ")
        )
    }

    /// The message for `code` in this API's answer: the missing ACL for a refusal by the
    /// authorizer (whose own message says no more than the code), else the broker's.
    fn message(self, code: i16, message: Option<String>) -> Option<String> {
        if code == CLUSTER_AUTHORIZATION_FAILED {
            Some(self.missing_acl())
        } else {
            message
        }
    }
}

/// A failed request: the cluster could not be reached, refused us, or answered with a
/// request-level error.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    /// No TCP connection (or the connection broke).
    // The I/O error is part of the message and deliberately not a `#[source]`: an error
    // chain would print it twice.
    #[error("Kafka at {addr} is unreachable: {error}")]
    Unreachable {
        /// The broker address tried last.
        addr: String,
        /// The I/O error.
        error: std::io::Error,
    },
    /// SASL authentication failed, or the broker refused the TLS client.
    #[error("authentication failed: {message}")]
    Authentication {
        /// What the broker (or TLS) said.
        message: String,
    },
    /// The TLS handshake failed (e.g. the broker's certificate is not trusted), or the TLS
    /// configuration is unusable.
    #[error("TLS with Kafka at {addr} failed: {message}")]
    Tls {
        /// The broker address.
        addr: String,
        /// Why.
        message: String,
    },
    /// The broker's answer could not be understood, or it lacks a needed API version.
    #[error("Kafka protocol error with {addr}: {message}")]
    Protocol {
        /// The broker address.
        addr: String,
        /// Why.
        message: String,
    },
    /// The broker did not answer in time.
    #[error("Kafka at {addr} did not answer within {after:?}")]
    Timeout {
        /// The broker address.
        addr: String,
        /// The request timeout.
        after: Duration,
    },
    /// The whole request failed with a Kafka error code.
    #[error("Kafka refused the request: {name} ({code}){}", message_suffix(.message))]
    Broker {
        /// Kafka's error code.
        code: i16,
        /// Kafka's name for it, e.g. `CLUSTER_AUTHORIZATION_FAILED`.
        name: &'static str,
        /// The broker's message, if any.
        message: Option<String>,
    },
}

impl KafkaError {
    /// Whether the brokers refused because security is off: `SECURITY_DISABLED` (54), e.g.
    /// an ACL request to brokers without an authorizer.
    pub fn is_security_disabled(&self) -> bool {
        matches!(self, Self::Broker { code: 54, .. })
    }

    /// Whether credentials (or the TLS client) were refused.
    pub fn is_authentication(&self) -> bool {
        matches!(self, Self::Authentication { .. })
    }

    /// Whether trying again on another broker may succeed.
    pub(crate) fn is_retriable(&self) -> bool {
        match self {
            Self::Unreachable { .. } | Self::Timeout { .. } => true,
            Self::Broker { code, .. } => is_retriable_code(*code),
            Self::Authentication { .. } | Self::Tls { .. } | Self::Protocol { .. } => false,
        }
    }

    /// A request-level error from a Kafka error code (`None` for 0).
    pub(crate) fn from_code(code: i16, message: Option<String>) -> Option<Self> {
        (code != 0).then(|| Self::Broker {
            code,
            name: error_name(code),
            message,
        })
    }

    /// A request-level error in `api`'s answer (`None` for 0); a refusal by the authorizer
    /// names the missing ACL.
    pub(crate) fn from_api_code(
        api: ClusterApi,
        code: i16,
        message: Option<String>,
    ) -> Option<Self> {
        Self::from_code(code, api.message(code, message))
    }
}

/// Errors worth one more try on another broker.
pub(crate) fn is_retriable_code(code: i16) -> bool {
    matches!(code, NOT_CONTROLLER | REQUEST_TIMED_OUT)
}

fn message_suffix(message: &Option<String>) -> String {
    match message {
        Some(m) if !m.is_empty() => format!(": {m}"),
        _ => String::new(),
    }
}

/// One topic's (or config resource's) error inside an otherwise successful response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemError {
    /// Kafka's error code.
    pub code: i16,
    /// Kafka's name for it, e.g. `TOPIC_ALREADY_EXISTS`.
    pub name: &'static str,
    /// The broker's message, if any.
    pub message: Option<String>,
}

impl ItemError {
    /// An item error from a Kafka error code and message (`None` for code 0).
    pub fn from_code(code: i16, message: Option<String>) -> Option<Self> {
        (code != 0).then(|| Self {
            code,
            name: error_name(code),
            message: message.filter(|m| !m.is_empty()),
        })
    }

    /// An item error in `api`'s answer (`None` for code 0); a refusal by the authorizer
    /// names the missing ACL.
    pub(crate) fn from_api_code(
        api: ClusterApi,
        code: i16,
        message: Option<String>,
    ) -> Option<Self> {
        Self::from_code(code, api.message(code, message))
    }

    /// The thing does not exist (e.g. deleting a SCRAM credential the user lacks).
    pub fn is_resource_not_found(&self) -> bool {
        self.code == RESOURCE_NOT_FOUND
    }

    /// Kafka's authorizer refused the request: the message names the missing ACL.
    pub fn is_cluster_authorization_failed(&self) -> bool {
        self.code == CLUSTER_AUTHORIZATION_FAILED
    }

    /// The topic exists already (CreateTopics).
    pub fn is_already_exists(&self) -> bool {
        self.code == TOPIC_ALREADY_EXISTS
    }

    /// The topic does not exist.
    pub fn is_unknown_topic(&self) -> bool {
        matches!(self.code, UNKNOWN_TOPIC_OR_PARTITION | UNKNOWN_TOPIC_ID)
    }

    /// Whether trying again on another broker may succeed.
    pub(crate) fn is_retriable(&self) -> bool {
        is_retriable_code(self.code)
    }
}

impl fmt::Display for ItemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.name, message_suffix(&self.message))
    }
}

impl std::error::Error for ItemError {}

/// Kafka's name for an error code (as in the protocol guide), `UNKNOWN` for codes this
/// client does not know.
pub fn error_name(code: i16) -> &'static str {
    match code {
        0 => "NONE",
        -1 => "UNKNOWN_SERVER_ERROR",
        1 => "OFFSET_OUT_OF_RANGE",
        2 => "CORRUPT_MESSAGE",
        3 => "UNKNOWN_TOPIC_OR_PARTITION",
        4 => "INVALID_FETCH_SIZE",
        5 => "LEADER_NOT_AVAILABLE",
        6 => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        8 => "BROKER_NOT_AVAILABLE",
        9 => "REPLICA_NOT_AVAILABLE",
        10 => "MESSAGE_TOO_LARGE",
        11 => "STALE_CONTROLLER_EPOCH",
        12 => "OFFSET_METADATA_TOO_LARGE",
        13 => "NETWORK_EXCEPTION",
        14 => "COORDINATOR_LOAD_IN_PROGRESS",
        15 => "COORDINATOR_NOT_AVAILABLE",
        16 => "NOT_COORDINATOR",
        17 => "INVALID_TOPIC_EXCEPTION",
        18 => "RECORD_LIST_TOO_LARGE",
        19 => "NOT_ENOUGH_REPLICAS",
        20 => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        21 => "INVALID_REQUIRED_ACKS",
        22 => "ILLEGAL_GENERATION",
        23 => "INCONSISTENT_GROUP_PROTOCOL",
        24 => "INVALID_GROUP_ID",
        25 => "UNKNOWN_MEMBER_ID",
        26 => "INVALID_SESSION_TIMEOUT",
        27 => "REBALANCE_IN_PROGRESS",
        28 => "INVALID_COMMIT_OFFSET_SIZE",
        29 => "TOPIC_AUTHORIZATION_FAILED",
        30 => "GROUP_AUTHORIZATION_FAILED",
        31 => "CLUSTER_AUTHORIZATION_FAILED",
        32 => "INVALID_TIMESTAMP",
        33 => "UNSUPPORTED_SASL_MECHANISM",
        34 => "ILLEGAL_SASL_STATE",
        35 => "UNSUPPORTED_VERSION",
        36 => "TOPIC_ALREADY_EXISTS",
        37 => "INVALID_PARTITIONS",
        38 => "INVALID_REPLICATION_FACTOR",
        39 => "INVALID_REPLICA_ASSIGNMENT",
        40 => "INVALID_CONFIG",
        41 => "NOT_CONTROLLER",
        42 => "INVALID_REQUEST",
        43 => "UNSUPPORTED_FOR_MESSAGE_FORMAT",
        44 => "POLICY_VIOLATION",
        45 => "OUT_OF_ORDER_SEQUENCE_NUMBER",
        46 => "DUPLICATE_SEQUENCE_NUMBER",
        47 => "INVALID_PRODUCER_EPOCH",
        48 => "INVALID_TXN_STATE",
        49 => "INVALID_PRODUCER_ID_MAPPING",
        50 => "INVALID_TRANSACTION_TIMEOUT",
        51 => "CONCURRENT_TRANSACTIONS",
        52 => "TRANSACTION_COORDINATOR_FENCED",
        53 => "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        54 => "SECURITY_DISABLED",
        55 => "OPERATION_NOT_ATTEMPTED",
        56 => "KAFKA_STORAGE_ERROR",
        57 => "LOG_DIR_NOT_FOUND",
        58 => "SASL_AUTHENTICATION_FAILED",
        59 => "UNKNOWN_PRODUCER_ID",
        60 => "REASSIGNMENT_IN_PROGRESS",
        61 => "DELEGATION_TOKEN_AUTH_DISABLED",
        62 => "DELEGATION_TOKEN_NOT_FOUND",
        63 => "DELEGATION_TOKEN_OWNER_MISMATCH",
        64 => "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
        65 => "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
        66 => "DELEGATION_TOKEN_EXPIRED",
        67 => "INVALID_PRINCIPAL_TYPE",
        68 => "NON_EMPTY_GROUP",
        69 => "GROUP_ID_NOT_FOUND",
        70 => "FETCH_SESSION_ID_NOT_FOUND",
        71 => "INVALID_FETCH_SESSION_EPOCH",
        72 => "LISTENER_NOT_FOUND",
        73 => "TOPIC_DELETION_DISABLED",
        74 => "FENCED_LEADER_EPOCH",
        75 => "UNKNOWN_LEADER_EPOCH",
        76 => "UNSUPPORTED_COMPRESSION_TYPE",
        77 => "STALE_BROKER_EPOCH",
        78 => "OFFSET_NOT_AVAILABLE",
        79 => "MEMBER_ID_REQUIRED",
        80 => "PREFERRED_LEADER_NOT_AVAILABLE",
        81 => "GROUP_MAX_SIZE_REACHED",
        82 => "FENCED_INSTANCE_ID",
        83 => "ELIGIBLE_LEADERS_NOT_AVAILABLE",
        84 => "ELECTION_NOT_NEEDED",
        85 => "NO_REASSIGNMENT_IN_PROGRESS",
        86 => "GROUP_SUBSCRIBED_TO_TOPIC",
        87 => "INVALID_RECORD",
        88 => "UNSTABLE_OFFSET_COMMIT",
        89 => "THROTTLING_QUOTA_EXCEEDED",
        90 => "PRODUCER_FENCED",
        91 => "RESOURCE_NOT_FOUND",
        92 => "DUPLICATE_RESOURCE",
        93 => "UNACCEPTABLE_CREDENTIAL",
        94 => "INCONSISTENT_VOTER_SET",
        95 => "INVALID_UPDATE_VERSION",
        96 => "FEATURE_UPDATE_FAILED",
        97 => "PRINCIPAL_DESERIALIZATION_FAILURE",
        98 => "SNAPSHOT_NOT_FOUND",
        99 => "POSITION_OUT_OF_RANGE",
        100 => "UNKNOWN_TOPIC_ID",
        101 => "DUPLICATE_BROKER_REGISTRATION",
        102 => "BROKER_ID_NOT_REGISTERED",
        103 => "INCONSISTENT_TOPIC_ID",
        104 => "INCONSISTENT_CLUSTER_ID",
        105 => "TRANSACTIONAL_ID_NOT_FOUND",
        106 => "FETCH_SESSION_TOPIC_ID_ERROR",
        107 => "INELIGIBLE_REPLICA",
        108 => "NEW_LEADER_ELECTED",
        109 => "OFFSET_MOVED_TO_TIERED_STORAGE",
        110 => "FENCED_MEMBER_EPOCH",
        111 => "UNRELEASED_INSTANCE_ID",
        112 => "UNSUPPORTED_ASSIGNOR",
        113 => "STALE_MEMBER_EPOCH",
        114 => "MISMATCHED_ENDPOINT_TYPE",
        115 => "UNSUPPORTED_ENDPOINT_TYPE",
        116 => "UNKNOWN_CONTROLLER_ID",
        117 => "UNKNOWN_SUBSCRIPTION_ID",
        118 => "TELEMETRY_TOO_LARGE",
        119 => "INVALID_REGISTRATION",
        120 => "TRANSACTION_ABORTABLE",
        121 => "INVALID_RECORD_STATE",
        122 => "SHARE_SESSION_NOT_FOUND",
        123 => "INVALID_SHARE_SESSION_EPOCH",
        124 => "FENCED_STATE_EPOCH",
        125 => "INVALID_VOTER_KEY",
        126 => "DUPLICATE_VOTER",
        127 => "VOTER_NOT_FOUND",
        128 => "INVALID_REGULAR_EXPRESSION",
        129 => "REBOOTSTRAP_REQUIRED",
        130 => "STREAMS_INVALID_TOPOLOGY",
        131 => "STREAMS_INVALID_TOPOLOGY_EPOCH",
        132 => "STREAMS_TOPOLOGY_FENCED",
        133 => "SHARE_SESSION_LIMIT_REACHED",
        _ => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_map_to_kafka_names() {
        assert_eq!(error_name(36), "TOPIC_ALREADY_EXISTS");
        assert_eq!(error_name(41), "NOT_CONTROLLER");
        assert_eq!(error_name(40), "INVALID_CONFIG");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(error_name(i16::MAX), "UNKNOWN");
    }

    #[test]
    fn item_errors_classify_existing_and_unknown_topics() {
        assert_eq!(ItemError::from_code(0, Some("x".into())), None);
        let exists = ItemError::from_code(36, Some("Topic 'a' already exists.".into())).unwrap();
        assert!(exists.is_already_exists());
        assert!(!exists.is_unknown_topic());
        assert_eq!(
            exists.to_string(),
            "TOPIC_ALREADY_EXISTS: Topic 'a' already exists."
        );
        assert!(ItemError::from_code(3, None).unwrap().is_unknown_topic());
        assert!(ItemError::from_code(100, None).unwrap().is_unknown_topic());
        assert_eq!(
            ItemError::from_code(37, Some(String::new()))
                .unwrap()
                .to_string(),
            "INVALID_PARTITIONS"
        );
    }

    #[test]
    fn a_refusal_by_the_authorizer_names_the_missing_cluster_acl() {
        let alter = KafkaError::from_api_code(
            ClusterApi::AlterUserScramCredentials,
            CLUSTER_AUTHORIZATION_FAILED,
            Some("Cluster authorization failed.".into()),
        )
        .unwrap();
        assert_eq!(
            alter.to_string(),
            "Kafka refused the request: CLUSTER_AUTHORIZATION_FAILED (31): the agent's Kafka \
             user needs the Alter ACL on the cluster (AlterUserScramCredentials / CreateAcls / \
             DeleteAcls)"
        );
        let describe =
            ItemError::from_api_code(ClusterApi::DescribeAcls, CLUSTER_AUTHORIZATION_FAILED, None)
                .unwrap();
        assert!(describe.is_cluster_authorization_failed());
        assert_eq!(
            describe.to_string(),
            "CLUSTER_AUTHORIZATION_FAILED: the agent's Kafka user needs the Describe ACL on the \
             cluster (DescribeAcls / DescribeUserScramCredentials)"
        );
        for (api, operation) in [
            (ClusterApi::AlterClientQuotas, "AlterConfigs ACL"),
            (ClusterApi::DescribeClientQuotas, "DescribeConfigs ACL"),
            (ClusterApi::CreateAcls, "Alter ACL"),
            (ClusterApi::DeleteAcls, "Alter ACL"),
            (ClusterApi::DescribeUserScramCredentials, "Describe ACL"),
        ] {
            let message = api.missing_acl();
            assert!(
                message.contains(operation) && message.contains(api.name()),
                "{message}"
            );
        }
        // Other codes keep the broker's own message.
        let other = ItemError::from_api_code(
            ClusterApi::AlterUserScramCredentials,
            RESOURCE_NOT_FOUND,
            Some("no such credential".into()),
        )
        .unwrap();
        assert!(other.is_resource_not_found());
        assert_eq!(other.to_string(), "RESOURCE_NOT_FOUND: no such credential");
        assert_eq!(
            ItemError::from_api_code(ClusterApi::CreateAcls, 0, Some("x".into())),
            None
        );
    }

    #[test]
    fn only_controller_moves_timeouts_and_transport_errors_are_retried() {
        assert!(KafkaError::from_code(41, None).unwrap().is_retriable());
        assert!(KafkaError::from_code(7, None).unwrap().is_retriable());
        assert!(!KafkaError::from_code(31, None).unwrap().is_retriable());
        let unreachable = KafkaError::Unreachable {
            addr: "127.0.0.1:9092".into(),
            error: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        };
        assert!(unreachable.is_retriable());
        assert!(
            unreachable
                .to_string()
                .starts_with("Kafka at 127.0.0.1:9092 is unreachable: ")
        );
        let auth = KafkaError::Authentication {
            message: "bad".into(),
        };
        assert!(auth.is_authentication() && !auth.is_retriable());
        assert_eq!(auth.to_string(), "authentication failed: bad");
    }
}
