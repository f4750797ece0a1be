//! What the hub and the agent share beyond the protocol: the PKI of their connection, the
//! bootstrap token format, their HTTP endpoint and metrics encoding, and rendering and
//! applying objects to a cluster (server-side apply after a preflight permission check)
//! for `accord-hub install` and `accord-agent join`.

#![forbid(unsafe_code)]

pub mod apply;
pub mod compress;
pub mod distribution;
pub mod http;
pub mod manifest;
pub mod metrics;
pub mod pki;
pub mod preflight;
pub mod promfed;
pub mod quantity;
pub mod register;
pub mod runtime;
pub mod selector;
pub mod telemetry;
pub mod token;
pub mod watch;
