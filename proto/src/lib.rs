//! The hub–agent protocol of Accord: protobuf package `accord.v1`, generated at build time
//! from `proto/accord/v1/*.proto` (see `proto/README.md`).
//!
//! This crate knows nothing of Kubernetes; translation between these messages and the CRD
//! types lives in the gRPC modules of the hub and the agent.

#![forbid(unsafe_code)]

pub mod codec;

/// Package `accord.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("accord.v1");
}

/// Largest message either side accepts on the Sync stream (4 MiB): enough for a full
/// Assignments message of a few thousand placed objects, small enough that a misbehaving peer
/// cannot make the other allocate without bound.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
