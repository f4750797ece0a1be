//! What the hub and the agent share beyond the protocol: the PKI of their connection, and
//! applying rendered objects to a cluster (server-side apply with a preflight permission
//! check) for `accord-hub install` and `accord-agent join`.

#![forbid(unsafe_code)]

pub mod apply;
pub mod manifest;
pub mod pki;
pub mod preflight;
