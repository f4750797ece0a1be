//! What a failed Kafka request means for a placement, the same for every Kafka enforcer:
//! its [`ApplyErrorKind`] (what the judges decide the state from, and the metric label) and
//! its status message. A Kafka that cannot be reached, cannot be spoken to or refuses the
//! agent's credentials is `Unavailable`; a Kafka that answers "no" is an `Error` with its
//! own words (a `CLUSTER_AUTHORIZATION_FAILED` answer names what the agent may not do).

use accord_kafka::KafkaError;

use crate::enforce::ApplyErrorKind;

/// How messages of an unreachable Kafka begin (the status shows them as `Unavailable`).
pub const UNREACHABLE_PREFIX: &str = "Kafka unreachable: ";
/// How messages of a Kafka that refused the agent's credentials begin (`Unavailable`).
pub const AUTHENTICATION_PREFIX: &str = "Kafka authentication failed: ";

/// The kind of a failed Kafka request: the whole request failing (`Broker`, with a Kafka
/// error code) or one item's error inside an answer (`Item`, its code).
///
/// A Kafka that cannot be reached, does not answer, cannot be spoken to (TLS, protocol) or
/// refuses the agent's credentials is `Unavailable`: nothing can be applied there until
/// that changes. Error codes are classified by [`code_kind`].
pub fn error_kind(error: &KafkaError) -> ApplyErrorKind {
    match error {
        KafkaError::Unreachable { .. }
        | KafkaError::Timeout { .. }
        | KafkaError::Tls { .. }
        | KafkaError::Protocol { .. }
        | KafkaError::Authentication { .. } => ApplyErrorKind::Unavailable,
        KafkaError::Broker { code, .. } => code_kind(*code),
    }
}

/// The kind of a Kafka error code (of a whole request or of one item in an answer).
pub fn code_kind(code: i16) -> ApplyErrorKind {
    match code {
        // UNKNOWN_TOPIC_OR_PARTITION, RESOURCE_NOT_FOUND (no such SCRAM credential),
        // UNKNOWN_TOPIC_ID
        3 | 91 | 100 => ApplyErrorKind::NotFound,
        // TOPIC_, GROUP_, CLUSTER_AUTHORIZATION_FAILED
        29..=31 => ApplyErrorKind::Forbidden,
        // UNSUPPORTED_SASL_MECHANISM, UNSUPPORTED_VERSION, SECURITY_DISABLED (no
        // authorizer for ACLs), TOPIC_DELETION_DISABLED
        33 | 35 | 54 | 73 => ApplyErrorKind::NotSupported,
        // TOPIC_ALREADY_EXISTS, DUPLICATE_RESOURCE
        36 | 92 => ApplyErrorKind::Conflict,
        // INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
        // INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG, INVALID_REQUEST, POLICY_VIOLATION,
        // INVALID_PRINCIPAL_TYPE, UNACCEPTABLE_CREDENTIAL
        17 | 37..=40 | 42 | 44 | 67 | 93 => ApplyErrorKind::Invalid,
        _ => ApplyErrorKind::Transient,
    }
}

/// The status message of a failed request: `Unavailable` messages say why Kafka could not
/// be used (`Kafka unreachable: …`, `Kafka authentication failed: …`); a refusal keeps
/// Kafka's own words.
pub fn failure_message(error: &KafkaError) -> String {
    match error {
        KafkaError::Authentication { message } => format!("{AUTHENTICATION_PREFIX}{message}"),
        KafkaError::Broker { .. } => error.to_string(),
        _ => format!("{UNREACHABLE_PREFIX}{error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_errors_are_classified_by_what_they_mean_for_the_placement() {
        let unreachable = KafkaError::Timeout {
            addr: "k:9092".into(),
            after: std::time::Duration::from_secs(1),
        };
        assert_eq!(error_kind(&unreachable), ApplyErrorKind::Unavailable);
        let refused = KafkaError::Authentication {
            message: "bad password".into(),
        };
        assert_eq!(error_kind(&refused), ApplyErrorKind::Unavailable);
        let broker = |code| KafkaError::Broker {
            code,
            name: accord_kafka::error_name(code),
            message: None,
        };
        assert_eq!(error_kind(&broker(31)), ApplyErrorKind::Forbidden);
        assert_eq!(error_kind(&broker(7)), ApplyErrorKind::Transient);
        for (code, kind) in [
            (3, ApplyErrorKind::NotFound),
            (29, ApplyErrorKind::Forbidden),
            (35, ApplyErrorKind::NotSupported),
            (36, ApplyErrorKind::Conflict),
            (37, ApplyErrorKind::Invalid),
            (38, ApplyErrorKind::Invalid),
            (40, ApplyErrorKind::Invalid),
            (41, ApplyErrorKind::Transient),
            (-1, ApplyErrorKind::Transient),
            // The codes of SCRAM credentials and ACLs.
            (33, ApplyErrorKind::NotSupported),
            (54, ApplyErrorKind::NotSupported),
            (67, ApplyErrorKind::Invalid),
            (91, ApplyErrorKind::NotFound),
            (92, ApplyErrorKind::Conflict),
            (93, ApplyErrorKind::Invalid),
        ] {
            assert_eq!(code_kind(code), kind, "{}", accord_kafka::error_name(code));
        }
    }

    #[test]
    fn failure_messages_say_unreachable_or_authentication_failed_or_keep_kafkas_words() {
        let e = KafkaError::Authentication {
            message: "Authentication failed during authentication due to invalid credentials"
                .into(),
        };
        assert!(
            failure_message(&e).starts_with("Kafka authentication failed: Authentication failed"),
            "{}",
            failure_message(&e)
        );
        let e = KafkaError::Unreachable {
            addr: "127.0.0.1:9092".into(),
            error: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        };
        let m = failure_message(&e);
        assert!(
            m.starts_with("Kafka unreachable: Kafka at 127.0.0.1:9092"),
            "{m}"
        );
        let e = KafkaError::Broker {
            code: 31,
            name: accord_kafka::error_name(31),
            message: Some("needs Alter on Cluster:kafka-cluster".into()),
        };
        let m = failure_message(&e);
        assert!(
            m.contains("CLUSTER_AUTHORIZATION_FAILED") && m.contains("Alter on Cluster"),
            "{m}"
        );
    }
}
