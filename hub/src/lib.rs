//! The Accord hub: watches accord.io resources on the management cluster, keeps global
//! state in etcd and serves agents over gRPC.

#![forbid(unsafe_code)]

pub mod cli;
pub mod crdgen;
pub mod pki;
pub mod store;
