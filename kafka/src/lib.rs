//! A small Kafka admin client for Accord's agent: topic metadata and configs, and
//! creating, growing, reconfiguring and deleting topics; users' SCRAM credentials, ACLs and
//! client quotas; over Kafka's own wire protocol (PLAINTEXT, TLS, or TLS with SASL/SCRAM).
//! Requests are batched (one request for many topics or users) and report per-item
//! results; credentials never appear in output.

#![forbid(unsafe_code)]

mod admin;
mod config;
mod conn;
mod error;
mod scram;
mod users;

pub use admin::{Admin, ConfigEntry, ConfigOp, ConfigSource, NewTopic, TopicDescription};
pub use config::{
    ConfigError, DEFAULT_REQUEST_TIMEOUT, KafkaConfig, Password, SaslMechanism, Security, keys,
};
pub use error::{ItemError, KafkaError, error_name};
pub use scram::salted_password;
pub use users::{
    AclBinding, AclFilter, AclOperation, AclPatternType, AclPermission, AclResourceType,
    QuotaAlteration, ScramCredentialInfo, ScramDeletion, ScramMechanism, ScramUpsertion,
    UnknownName,
};
