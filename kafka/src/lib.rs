//! A small Kafka admin client for Accord's agent: topic metadata and configs, and
//! creating, growing, reconfiguring and deleting topics, over Kafka's own wire protocol
//! (PLAINTEXT, TLS, or TLS with SASL/SCRAM). Requests are batched (one request for many
//! topics) and report per-topic results; credentials never appear in output.

#![forbid(unsafe_code)]

mod admin;
mod config;
mod conn;
mod error;
mod scram;

pub use admin::{Admin, ConfigEntry, ConfigOp, ConfigSource, NewTopic, TopicDescription};
pub use config::{
    ConfigError, DEFAULT_REQUEST_TIMEOUT, KafkaConfig, Password, SaslMechanism, Security, keys,
};
pub use error::{ItemError, KafkaError, error_name};
