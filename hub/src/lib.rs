//! The Accord hub: watches accord.io resources on the management cluster, keeps global
//! state in etcd and serves agents over gRPC.

#![forbid(unsafe_code)]

pub mod cli;
pub mod cluster_cmd;
pub mod connections;
pub mod console;
pub mod controllers;
pub mod crdgen;
pub mod distribution;
pub mod federated_resource;
pub mod grpc;
pub mod http;
pub mod install;
pub mod kafka;
pub mod kafka_topic;
pub mod kafka_user;
pub mod kinds;
pub mod kubectl_plugin;
pub mod metrics;
pub mod migrate;
pub mod placements;
pub mod promfed;
pub mod revocation;
pub mod scale;
pub mod serve;
pub mod store;
pub mod supervisor;
pub mod token;
pub mod webhook;
pub mod writes;

/// PKI of the hub–agent connection (shared with the agent in `accord-common`).
pub use accord_common::pki;
