//! The Accord agent: runs in a member cluster, keeps one mTLS stream to the hub, makes the
//! cluster match its assignments and reports status back.
//!
//! The pieces, from the edge inwards: [`cli`] and [`run`] wire everything, [`join`] puts a
//! member cluster under a hub; [`connection`]
//! holds the Sync stream; [`engine`] owns the assignments and drives the pipeline of
//! [`watch`] (cached Deployments and HPAs) → [`observe`] (pure verdicts, reports, apply
//! patches) → server-side apply → [`report`] (optimistic concurrency of status reports);
//! [`assignments`] is the pure bookkeeping of what is assigned, [`persist`] keeps it in a
//! ConfigMap, [`convert`] translates to and from the protocol, [`identity`] reads the mTLS
//! identity, [`metrics`] and [`http`] serve `/metrics`, `/healthz` and `/readyz`.

#![forbid(unsafe_code)]

pub mod assignments;
pub mod cli;
pub mod connection;
pub mod convert;
pub mod engine;
pub mod http;
pub mod identity;
pub mod join;
pub mod metrics;
pub mod observe;
pub mod persist;
pub mod report;
pub mod run;
pub mod watch;
