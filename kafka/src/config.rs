//! How to reach a Kafka cluster: bootstrap addresses, transport security and SASL
//! credentials, read from the flat key/value form the agent's Secret holds.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// The request timeout when none is configured.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Secret keys read by [`KafkaConfig::from_properties`].
pub mod keys {
    /// Comma-separated `host:port` list.
    pub const BOOTSTRAP_SERVERS: &str = "bootstrap.servers";
    /// `PLAINTEXT` (default), `SSL` or `SASL_SSL`.
    pub const SECURITY_PROTOCOL: &str = "security.protocol";
    /// `SCRAM-SHA-512` (default) or `SCRAM-SHA-256`.
    pub const SASL_MECHANISM: &str = "sasl.mechanism";
    /// The SASL user name.
    pub const SASL_USERNAME: &str = "sasl.username";
    /// The SASL password.
    pub const SASL_PASSWORD: &str = "sasl.password";
    /// PEM certificates trusted for the brokers' TLS certificates (else the web PKI roots).
    pub const CA_CRT: &str = "ca.crt";
}

/// Where the cluster is and how to talk to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    /// `host:port` of brokers to ask for the cluster's metadata first.
    pub bootstrap: Vec<String>,
    /// Transport security and authentication.
    pub security: Security,
    /// How long one request (including connecting) may take.
    pub request_timeout: Duration,
}

/// Transport security and authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Security {
    /// Plain TCP, no authentication.
    Plaintext,
    /// TLS, no SASL.
    Ssl {
        /// PEM certificates to trust; `None` trusts the web PKI roots.
        ca_pem: Option<String>,
    },
    /// TLS, then SASL authentication.
    SaslSsl {
        /// PEM certificates to trust; `None` trusts the web PKI roots.
        ca_pem: Option<String>,
        /// The SASL mechanism.
        mechanism: SaslMechanism,
        /// The SASL user name.
        username: String,
        /// The SASL password.
        password: Password,
    },
}

/// The SASL mechanisms this client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    /// SCRAM with SHA-512 (RFC 5802, RFC 7677).
    ScramSha512,
    /// SCRAM with SHA-256 (RFC 7677).
    ScramSha256,
}

impl SaslMechanism {
    /// The mechanism's name in Kafka's SaslHandshake and in `sasl.mechanism`.
    pub fn name(self) -> &'static str {
        match self {
            Self::ScramSha512 => "SCRAM-SHA-512",
            Self::ScramSha256 => "SCRAM-SHA-256",
        }
    }
}

impl fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A secret that never shows itself in `Debug` or `Display` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// Wraps a password.
    pub fn new(password: impl Into<String>) -> Self {
        Self(password.into())
    }

    /// The password itself, for the one place that needs it (SCRAM key derivation).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Why properties do not describe a usable connection. Messages name the key, never a
/// value (a value may be a password).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A required key is absent or blank.
    #[error("`{key}` is required{why}")]
    Missing {
        /// The key.
        key: &'static str,
        /// Why it is required here (may be empty).
        why: &'static str,
    },
    /// A key has a value this client does not understand.
    #[error("`{key}` must be one of {allowed}, not {value:?}")]
    Unsupported {
        /// The key.
        key: &'static str,
        /// The accepted values.
        allowed: &'static str,
        /// What was given (never used for secrets).
        value: String,
    },
    /// A bootstrap address is not `host:port`.
    #[error("`bootstrap.servers` entry {entry:?} is not host:port with a port in 1..=65535")]
    BadAddress {
        /// The offending entry.
        entry: String,
    },
}

impl KafkaConfig {
    /// A PLAINTEXT configuration for these bootstrap addresses.
    pub fn plaintext(bootstrap: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            bootstrap: bootstrap.into_iter().map(Into::into).collect(),
            security: Security::Plaintext,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// Reads the agent Secret's keys (see [`keys`]); unknown keys are ignored.
    pub fn from_properties(map: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let get = |key: &str| map.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        let servers = get(keys::BOOTSTRAP_SERVERS).ok_or(ConfigError::Missing {
            key: keys::BOOTSTRAP_SERVERS,
            why: "",
        })?;
        let mut bootstrap = Vec::new();
        for entry in servers.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if !is_host_port(entry) {
                return Err(ConfigError::BadAddress {
                    entry: entry.to_string(),
                });
            }
            bootstrap.push(entry.to_string());
        }
        if bootstrap.is_empty() {
            return Err(ConfigError::Missing {
                key: keys::BOOTSTRAP_SERVERS,
                why: "",
            });
        }
        let ca_pem = map
            .get(keys::CA_CRT)
            .filter(|v| !v.trim().is_empty())
            .cloned();
        let protocol = get(keys::SECURITY_PROTOCOL).unwrap_or("PLAINTEXT");
        let security = match protocol.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Security::Plaintext,
            "SSL" => Security::Ssl { ca_pem },
            "SASL_SSL" => {
                let mechanism = match get(keys::SASL_MECHANISM)
                    .unwrap_or("SCRAM-SHA-512")
                    .to_ascii_uppercase()
                    .as_str()
                {
                    "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
                    "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
                    _ => {
                        return Err(ConfigError::Unsupported {
                            key: keys::SASL_MECHANISM,
                            allowed: "SCRAM-SHA-512, SCRAM-SHA-256",
                            value: get(keys::SASL_MECHANISM).unwrap_or_default().to_string(),
                        });
                    }
                };
                let why = " when security.protocol is SASL_SSL";
                let username = get(keys::SASL_USERNAME).ok_or(ConfigError::Missing {
                    key: keys::SASL_USERNAME,
                    why,
                })?;
                // The password is taken as written: spaces may be part of it.
                let password = map
                    .get(keys::SASL_PASSWORD)
                    .filter(|v| !v.is_empty())
                    .ok_or(ConfigError::Missing {
                        key: keys::SASL_PASSWORD,
                        why,
                    })?;
                Security::SaslSsl {
                    ca_pem,
                    mechanism,
                    username: username.to_string(),
                    password: Password::new(password.clone()),
                }
            }
            _ => {
                return Err(ConfigError::Unsupported {
                    key: keys::SECURITY_PROTOCOL,
                    allowed: "PLAINTEXT, SSL, SASL_SSL",
                    value: protocol.to_string(),
                });
            }
        };
        Ok(Self {
            bootstrap,
            security,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        })
    }
}

/// `host:port` with a non-empty host and a port in 1..=65535 (IPv6 hosts in brackets).
fn is_host_port(entry: &str) -> bool {
    let Some((host, port)) = entry.rsplit_once(':') else {
        return false;
    };
    let host_ok = if let Some(inner) = host.strip_prefix('[') {
        inner.strip_suffix(']').is_some_and(|h| !h.is_empty())
    } else {
        !host.is_empty() && !host.contains(':') && !host.contains(char::is_whitespace)
    };
    host_ok && port.parse::<u16>().is_ok_and(|p| p != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn plaintext_is_the_default_and_unknown_keys_are_ignored() {
        let config = KafkaConfig::from_properties(&props(&[
            (
                "bootstrap.servers",
                " 10.0.0.1:9092, kafka-1.example:9093 ,",
            ),
            ("client.id", "whatever"),
        ]))
        .unwrap();
        assert_eq!(config.bootstrap, ["10.0.0.1:9092", "kafka-1.example:9093"]);
        assert_eq!(config.security, Security::Plaintext);
        assert_eq!(config.request_timeout, DEFAULT_REQUEST_TIMEOUT);
    }

    #[test]
    fn sasl_ssl_reads_mechanism_credentials_and_ca() {
        let config = KafkaConfig::from_properties(&props(&[
            ("bootstrap.servers", "127.0.0.1:9093"),
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-256"),
            ("sasl.username", "accord"),
            ("sasl.password", " s3cret "),
            ("ca.crt", "-----BEGIN CERTIFICATE-----"),
        ]))
        .unwrap();
        assert_eq!(
            config.security,
            Security::SaslSsl {
                ca_pem: Some("-----BEGIN CERTIFICATE-----".into()),
                mechanism: SaslMechanism::ScramSha256,
                username: "accord".into(),
                password: Password::new(" s3cret "),
            }
        );
    }

    #[test]
    fn sasl_mechanism_defaults_to_scram_sha_512() {
        let config = KafkaConfig::from_properties(&props(&[
            ("bootstrap.servers", "127.0.0.1:9093"),
            ("security.protocol", "sasl_ssl"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
        ]))
        .unwrap();
        assert!(matches!(
            config.security,
            Security::SaslSsl {
                mechanism: SaslMechanism::ScramSha512,
                ca_pem: None,
                ..
            }
        ));
    }

    #[test]
    fn ssl_without_a_ca_trusts_the_web_roots() {
        let config = KafkaConfig::from_properties(&props(&[
            ("bootstrap.servers", "broker:9093"),
            ("security.protocol", "SSL"),
        ]))
        .unwrap();
        assert_eq!(config.security, Security::Ssl { ca_pem: None });
    }

    #[test]
    fn errors_name_the_key_and_never_the_password() {
        let missing = KafkaConfig::from_properties(&props(&[])).unwrap_err();
        assert_eq!(missing.to_string(), "`bootstrap.servers` is required");

        let no_password = KafkaConfig::from_properties(&props(&[
            ("bootstrap.servers", "b:1"),
            ("security.protocol", "SASL_SSL"),
            ("sasl.username", "u"),
        ]))
        .unwrap_err();
        assert_eq!(
            no_password.to_string(),
            "`sasl.password` is required when security.protocol is SASL_SSL"
        );

        let protocol = KafkaConfig::from_properties(&props(&[
            ("bootstrap.servers", "b:1"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.password", "hunter2"),
        ]))
        .unwrap_err();
        assert!(
            protocol.to_string().contains("security.protocol"),
            "{protocol}"
        );
        assert!(!protocol.to_string().contains("hunter2"));

        let mechanism = KafkaConfig::from_properties(&props(&[
            ("bootstrap.servers", "b:1"),
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "PLAIN"),
        ]))
        .unwrap_err();
        assert!(
            mechanism
                .to_string()
                .starts_with("`sasl.mechanism` must be one of")
        );
    }

    #[test]
    fn bootstrap_entries_must_be_host_and_port() {
        for bad in [
            "broker",
            "broker:",
            ":9092",
            "broker:0",
            "broker:70000",
            "a b:1",
            "::1:9092",
        ] {
            let err =
                KafkaConfig::from_properties(&props(&[("bootstrap.servers", bad)])).unwrap_err();
            assert!(
                matches!(err, ConfigError::BadAddress { .. }),
                "{bad}: {err}"
            );
        }
        for good in ["[::1]:9092", "b-1.kafka.svc:9092", "127.0.0.1:1"] {
            KafkaConfig::from_properties(&props(&[("bootstrap.servers", good)])).unwrap();
        }
    }

    #[test]
    fn debug_of_a_config_never_prints_the_password() {
        let config = KafkaConfig {
            bootstrap: vec!["b:1".into()],
            security: Security::SaslSsl {
                ca_pem: None,
                mechanism: SaslMechanism::ScramSha512,
                username: "accord".into(),
                password: Password::new("correct horse battery staple"),
            },
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        };
        let debug = format!("{config:?} {config:#?}");
        assert!(!debug.contains("correct horse"), "{debug}");
        assert!(debug.contains("<redacted>"));
        assert_eq!(Password::new("x").to_string(), "<redacted>");
    }
}
