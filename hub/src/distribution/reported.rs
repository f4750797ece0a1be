//! What a placement shows for kinds that send every selected cluster the same assignment
//! and have no failover (PrometheusFederation, FederatedKafkaTopic): the agent's last
//! report about the current assignment, or why there is nothing to show yet.

use accord_common::distribution::PlacementState;

use super::ShareRecord;
use crate::federation::select::ClusterInfo;
use crate::store::StatusRecord;

/// Message of a placement no report has been received for.
pub const WAITING_FOR_AGENT: &str = "waiting for the agent";
/// Message of a placement whose last report is about an earlier assignment.
pub const WAITING_FOR_CHANGE: &str = "waiting for the agent to apply the latest change";

/// The state and message of `share`: `Pending` with the hold reason while it is sent
/// nothing, `Unavailable` with `disconnected` while its cluster's agent is away, else
/// what the agent reported about the record's `revision` (or later), else `Pending`.
pub fn state(
    share: &ShareRecord,
    revision: i64,
    report: Option<&StatusRecord>,
    cluster: Option<&ClusterInfo>,
    disconnected: &str,
) -> (PlacementState, Option<String>) {
    if share.assignment.is_none() {
        (PlacementState::Pending, share.held_reason.clone())
    } else if !cluster.is_some_and(|c| c.available) {
        (PlacementState::Unavailable, Some(disconnected.to_owned()))
    } else {
        match report {
            Some(r) if r.applied_revision >= revision => {
                (r.state, Some(r.message.clone()).filter(|m| !m.is_empty()))
            }
            Some(_) => (PlacementState::Pending, Some(WAITING_FOR_CHANGE.to_owned())),
            None => (PlacementState::Pending, Some(WAITING_FOR_AGENT.to_owned())),
        }
    }
}

/// States in which something keeps a placement from its intent.
pub fn is_trouble(state: PlacementState) -> bool {
    matches!(
        state,
        PlacementState::Error
            | PlacementState::Unavailable
            | PlacementState::TargetNotFound
            | PlacementState::Conflict
    )
}
