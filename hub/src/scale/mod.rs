//! CrossClusterScalePolicy: what a scale decision records beside the per-cluster
//! assignments, the pure planning ([`plan`]) and status aggregation ([`status`]). The
//! controller is [`controller`], the autoscaler [`autoscaler`].

pub mod autoscale;
pub mod autoscaler;
pub mod controller;
pub mod division;
pub mod plan;
pub mod status;

use std::any::Any;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::controllers::ControllerContext;
use crate::store::{PrefixCache, Store, StoreError};

/// Every autoscaled policy's state (`autoscale/`), written by the autoscaler and followed
/// by the scale controller; kept for a leader's term among the controllers' extensions.
pub type AutoscaleStates = PrefixCache<autoscale::engine::State>;

/// Starts the term's [`AutoscaleStates`] (the kind's registered extension).
pub fn start_autoscale_states(
    store: Store,
) -> BoxFuture<'static, Result<Box<dyn Any + Send + Sync>, StoreError>> {
    Box::pin(async move {
        let prefix = store.keys().autoscale_prefix();
        let states = AutoscaleStates::start(store, prefix).await?;
        Ok(Box::new(states) as Box<dyn Any + Send + Sync>)
    })
}

/// The term's [`AutoscaleStates`].
pub fn autoscale_states(ctx: &ControllerContext) -> &AutoscaleStates {
    ctx.extensions
        .get()
        .expect("the CrossClusterScalePolicy kind registers its autoscale states")
}

/// A scale policy's decision data (stored under its tag, `scale`, in its placements record).
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
    /// Why a policy with `weighting: AvailableCapacity` was divided by weight instead (a
    /// cluster has not estimated what fits yet), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weighting: Option<String>,
}

impl ScaleDecision {
    /// True when `other` decides the same, whatever the ids.
    pub fn same_intent(&self, other: &ScaleDecision) -> bool {
        self.desired_replicas == other.desired_replicas
            && self.infeasible == other.infeasible
            && self.moved_away == other.moved_away
            && self.weighting == other.weighting
    }
}
