//! The Accord agent: runs in a member cluster, keeps one mTLS stream to the hub, makes the
//! cluster match its assignments and reports status back.

#![forbid(unsafe_code)]

pub mod cli;
