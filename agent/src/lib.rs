//! The Accord agent: runs in a member cluster, keeps one mTLS stream to the hub, makes the
//! cluster match its assignments and reports status back.
//!
//! The pieces, from the edge inwards: [`cli`] and [`run`] wire everything, [`join`] puts a
//! member cluster under a hub; [`connection`] holds the Sync stream. [`engine`] is the
//! kind-neutral core: it owns the assignments ([`assignments`], pure bookkeeping), saves
//! them before acknowledging ([`persist`], the versioned ConfigMap document), has one
//! enforcer per kind make the cluster match ([`enforce`]: what it watches, a pure judge, an
//! async apply — Deployment scaling in [`enforce::scale`]) and sends debounced reports
//! under optimistic concurrency ([`report`]). [`convert`] translates to and from the
//! protocol, [`identity`] reads the mTLS identity, [`metrics`] and [`http`] serve
//! `/metrics`, `/healthz` and `/readyz`. [`lease`] decides which of several replicas is
//! active.

#![forbid(unsafe_code)]

pub mod assignments;
pub mod capacity;
pub mod cli;
pub mod connection;
pub mod convert;
pub mod enforce;
pub mod engine;
pub mod http;
pub mod identity;
pub mod join;
pub mod lease;
pub mod metrics;
pub mod persist;
pub mod probe;
pub mod reload;
pub mod renewal;
pub mod report;
pub mod run;
