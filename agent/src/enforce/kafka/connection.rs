//! The member's Kafka connection, read from a Secret in the agent's namespace
//! (`accord-agent run --kafka-secret NAME`): its data keys are the properties of
//! [`KafkaConfig::from_properties`] (`bootstrap.servers`, `security.protocol`,
//! `sasl.mechanism`, `sasl.username`, `sasl.password`, `ca.crt`). Pure: the enforcer's
//! watch of that one Secret feeds it. No message here ever holds a value of the Secret.

use std::collections::BTreeMap;

use accord_kafka::{ConfigError, KafkaConfig};
use k8s_openapi::api::core::v1::Secret;

/// Why there is no usable Kafka connection. Every message begins with
/// `no Kafka connection: ` and names the Secret.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionError {
    /// The Secret does not exist.
    #[error("no Kafka connection: Secret {namespace}/{name} not found")]
    NotFound {
        /// The agent's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
    },
    /// A value of the Secret is not UTF-8 text.
    #[error("no Kafka connection: Secret {namespace}/{name}: the value of {key} is not UTF-8 text")]
    NotText {
        /// The agent's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The key whose value is not text.
        key: String,
    },
    /// The Secret's keys do not describe a connection.
    #[error("no Kafka connection: Secret {namespace}/{name}: {source}")]
    Invalid {
        /// The agent's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// What is wrong with it (names the key, never a value).
        #[source]
        source: ConfigError,
    },
    /// The Secret cannot be watched (e.g. the agent may not read it).
    #[error("no Kafka connection: {message}")]
    Watch {
        /// The watch error.
        message: String,
    },
}

/// The connection Secret `namespace/name` describes (`secret` is `None` when it does not
/// exist).
pub fn config_of(
    namespace: &str,
    name: &str,
    secret: Option<&Secret>,
) -> Result<KafkaConfig, ConnectionError> {
    let Some(secret) = secret else {
        return Err(ConnectionError::NotFound {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
    };
    let mut properties = BTreeMap::new();
    for (key, value) in secret.data.iter().flatten() {
        let text = String::from_utf8(value.0.clone()).map_err(|_| ConnectionError::NotText {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key: key.clone(),
        })?;
        properties.insert(key.clone(), text);
    }
    KafkaConfig::from_properties(&properties).map_err(|source| ConnectionError::Invalid {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        source,
    })
}

/// Drops what the agent never reads from the watched Secret — among it
/// `kubectl.kubernetes.io/last-applied-configuration`, which would hold a second copy of
/// its values.
pub fn slim_secret(secret: &mut Secret) {
    secret.metadata.managed_fields = None;
    secret.metadata.annotations = None;
    secret.metadata.labels = None;
    secret.string_data = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_kafka::{SaslMechanism, Security};
    use k8s_openapi::ByteString;

    fn secret(data: &[(&str, &[u8])]) -> Secret {
        Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_missing_secret_says_which_one() {
        let e = config_of("accord-system", "accord-kafka", None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no Kafka connection: Secret accord-system/accord-kafka not found"
        );
    }

    #[test]
    fn a_plaintext_secret_needs_only_the_bootstrap_servers() {
        let s = secret(&[("bootstrap.servers", b"127.0.0.1:9092,127.0.0.1:9093")]);
        let config = config_of("ns", "kafka", Some(&s)).unwrap();
        assert_eq!(config.bootstrap, vec!["127.0.0.1:9092", "127.0.0.1:9093"]);
        assert_eq!(config.security, Security::Plaintext);
    }

    #[test]
    fn a_sasl_ssl_secret_gives_scram_credentials_and_the_password_stays_out_of_messages() {
        let s = secret(&[
            ("bootstrap.servers", b"kafka:9094"),
            ("security.protocol", b"SASL_SSL"),
            ("sasl.mechanism", b"SCRAM-SHA-512"),
            ("sasl.username", b"accord"),
            ("sasl.password", b"hunter2-very-secret"),
        ]);
        let config = config_of("ns", "kafka", Some(&s)).unwrap();
        let Security::SaslSsl {
            mechanism,
            username,
            password,
            ..
        } = &config.security
        else {
            panic!("expected SASL_SSL");
        };
        assert_eq!(*mechanism, SaslMechanism::ScramSha512);
        assert_eq!(username, "accord");
        assert_eq!(password.expose(), "hunter2-very-secret");
        assert!(!format!("{config:?}").contains("hunter2"));

        // A broken Secret's message names the key, never a value.
        let s = secret(&[
            ("bootstrap.servers", b"kafka:9094"),
            ("security.protocol", b"SASL_SSL"),
            ("sasl.mechanism", b"SCRAM-SHA-512"),
            ("sasl.password", b"hunter2-very-secret"),
        ]);
        let e = config_of("ns", "kafka", Some(&s)).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("no Kafka connection: Secret ns/kafka: "),
            "{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!format!("{e:?}").contains("hunter2"));
    }

    #[test]
    fn a_value_that_is_not_text_is_refused_naming_its_key() {
        let s = secret(&[("bootstrap.servers", b"k:9092"), ("ca.crt", &[0xff, 0xfe])]);
        let e = config_of("ns", "kafka", Some(&s)).unwrap_err();
        assert!(e.to_string().contains("ca.crt"), "{e}");
    }

    #[test]
    fn a_secret_without_bootstrap_servers_is_invalid() {
        let s = secret(&[]);
        assert!(matches!(
            config_of("ns", "kafka", Some(&s)),
            Err(ConnectionError::Invalid { .. })
        ));
    }

    #[test]
    fn slimming_drops_the_last_applied_copy_and_keeps_the_data() {
        let mut s = secret(&[("bootstrap.servers", b"k:9092")]);
        s.metadata.annotations = Some(BTreeMap::from([(
            "kubectl.kubernetes.io/last-applied-configuration".to_owned(),
            "{\"data\":{}}".to_owned(),
        )]));
        slim_secret(&mut s);
        assert_eq!(s.metadata.annotations, None);
        assert!(config_of("ns", "kafka", Some(&s)).is_ok());
    }
}
