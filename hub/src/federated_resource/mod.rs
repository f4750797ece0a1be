//! FederatedResource: any Kubernetes objects delivered to selected member clusters. The
//! pure parts of its controller ([`controller`]): what each cluster is sent — the manifests
//! in dependency order with that cluster's overrides, and what to prune ([`plan`]) — and
//! the status from the agents' reports ([`status`]). Deletion (or `Orphan`) waits for the
//! members: the record becomes a tombstone (`remove: true` for every cluster that was sent
//! something) and the finalizer goes once each reported its objects removed, or after the
//! bound ([`crate::distribution::deletion`]). The admission webhook refuses what CEL cannot
//! see ([`admission`]).

pub mod admission;
pub mod controller;
pub mod plan;
pub mod secrets;
pub mod status;

use serde::{Deserialize, Serialize};

/// The finalizer every FederatedResource holds: its deletion waits for the members.
pub const FINALIZER: &str = "accord.io/federated-resource";

/// Event reasons of FederatedResource alone (those every kind tells are
/// `controllers::transitions::reasons`).
pub mod reasons {
    /// An agent restored owned fields changed out of band.
    pub const DRIFT_REPAIRED: &str = "DriftRepaired";
}

/// A FederatedResource's decision data (beyond the shares, which say what each cluster
/// gets).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FederatedResourceDecision {
    /// The record is a tombstone: every cluster is sent `remove: true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remove: bool,
}
