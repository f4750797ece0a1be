//! CrossClusterScalePolicy: what a scale decision records beside the per-cluster
//! assignments, and the pure planning and status aggregation ([`plan`]). The controller
//! lives in [`crate::controllers::scale`].

pub mod autoscale;
pub mod autoscaler;
pub mod controller;
pub mod division;
pub mod plan;

use serde::{Deserialize, Serialize};

/// A scale policy's decision data (the variant [`Decision::Scale`] of its placements
/// record).
///
/// [`Decision::Scale`]: crate::distribution::Decision::Scale
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleDecision {
    /// The global count divided.
    pub desired_replicas: i32,
    /// Id of the decision, stamped on every member object.
    pub scale_request_id: String,
    /// Why the total could not be placed exactly, if it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infeasible: Option<String>,
    /// Clusters whose share is with the others (failover): unavailable, or back and waiting
    /// out the return cooldown. Each is told to keep what it was last told to run, up to
    /// its share of the whole, instead of 0 — no running pod is killed because its cluster
    /// was away — and those replicas count toward no total.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moved_away: Vec<String>,
}

impl ScaleDecision {
    /// True when `other` decides the same, whatever the ids.
    pub fn same_intent(&self, other: &ScaleDecision) -> bool {
        self.desired_replicas == other.desired_replicas
            && self.infeasible == other.infeasible
            && self.moved_away == other.moved_away
    }
}
