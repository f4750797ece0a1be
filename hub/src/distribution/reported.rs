//! What a placement shows for kinds that send every selected cluster the same assignment
//! and have no failover (PrometheusFederation, FederatedKafkaTopic): the agent's last
//! report about the current assignment, or why there is nothing to show yet.

use accord_common::distribution::PlacementState;

use super::ShareRecord;
use crate::distribution::select::ClusterInfo;
use crate::store::StatusRecord;

/// Message of a placement no report has been received for.
pub const WAITING_FOR_AGENT: &str = "waiting for the agent";
/// Message of a placement whose last report is about an earlier assignment.
pub const WAITING_FOR_CHANGE: &str = "waiting for the agent to apply the latest change";
/// Whether `report` says the member's API server is unavailable (the agent's `/readyz`
/// probe of it fails).
pub fn api_server_unavailable(report: &StatusRecord) -> bool {
    report.state == PlacementState::Unavailable && report.api_server_unavailable
}

/// The state and message of `share`: `Pending` with the hold reason while it is sent
/// nothing, `Unavailable` with `disconnected` while its cluster's agent is away, else
/// what the agent reported about the record's `revision` (or later), else `Pending` —
/// saying why when the agent's last report is that its API server is unavailable.
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
            Some(r) if api_server_unavailable(r) => (
                PlacementState::Pending,
                Some(format!("{WAITING_FOR_CHANGE}: {}", r.message)),
            ),
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

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::distribution::{AssignmentSpec, KafkaTopicSpec, Observed};

    fn share() -> ShareRecord {
        ShareRecord {
            cluster: "a".into(),
            assignment: Some(AssignmentSpec::KafkaTopic(KafkaTopicSpec::default())),
            held_reason: None,
            hold: None,
        }
    }

    fn report(applied_revision: i64, state: PlacementState, message: &str) -> StatusRecord {
        StatusRecord {
            resource_version: String::new(),
            generation: 0,
            applied_revision,
            state,
            message: message.into(),
            observed_unix_millis: 0,
            observed: Observed::Nothing,
            api_server_unavailable: false,
        }
    }

    fn api_server_down(applied_revision: i64, message: &str) -> StatusRecord {
        StatusRecord {
            api_server_unavailable: true,
            ..report(applied_revision, PlacementState::Unavailable, message)
        }
    }

    fn available() -> ClusterInfo {
        ClusterInfo {
            available: true,
            ..ClusterInfo::default()
        }
    }

    #[test]
    fn a_placement_waiting_on_an_unavailable_member_api_server_says_so() {
        let down = "member API server unavailable: GET /readyz did not answer within 2s";
        let r = api_server_down(7, down);
        // About the current assignment: the agent's own words.
        let (st, message) = super::state(&share(), 7, Some(&r), Some(&available()), "gone");
        assert_eq!(
            (st, message.as_deref()),
            (PlacementState::Unavailable, Some(down))
        );
        // About an earlier one: still waiting, and why.
        let (st, message) = super::state(&share(), 9, Some(&r), Some(&available()), "gone");
        assert_eq!(st, PlacementState::Pending);
        let message = message.unwrap();
        assert!(
            message.starts_with(WAITING_FOR_CHANGE) && message.ends_with(down),
            "{message}"
        );
        // Any other older report only waits, whatever its message says.
        let r = report(7, PlacementState::Synced, "");
        let (_, message) = super::state(&share(), 9, Some(&r), Some(&available()), "gone");
        assert_eq!(message.as_deref(), Some(WAITING_FOR_CHANGE));
        let r = report(7, PlacementState::Unavailable, down);
        let (_, message) = super::state(&share(), 9, Some(&r), Some(&available()), "gone");
        assert_eq!(message.as_deref(), Some(WAITING_FOR_CHANGE));
    }
}
