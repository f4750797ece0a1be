//! A status that stays small at any fleet size: above the hub's threshold a kind's
//! `status.placements` lists only the placements that are not `Synced` (at most the hub's
//! bound, in placement order) and `status.summary` counts every placement by state. The
//! full per-cluster view is served by the hub (`accord-hub placements`).

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::PlacementState;
use crate::bounds;

/// Every placement of an object counted by state, shown when there are more placements than
/// the status lists.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSummary {
    /// Placements in all (one per selected cluster).
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub total: i32,
    /// Placements per state; states no placement is in are left out.
    #[serde(default)]
    pub states: StateCounts,
    /// Placements `status.placements` shows: those not `Synced`, in placement order, up to
    /// the hub's bound (`--status-placements-listed`).
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub listed: i32,
}

/// Placements per state.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StateCounts {
    /// Placements `Synced`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub synced: Option<i32>,
    /// Placements `Pending`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub pending: Option<i32>,
    /// Placements `TargetNotFound`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub target_not_found: Option<i32>,
    /// Placements `Conflict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub conflict: Option<i32>,
    /// Placements `Unavailable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub unavailable: Option<i32>,
    /// Placements `Error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub error: Option<i32>,
}

impl StateCounts {
    /// Counts one more placement in `state`.
    pub fn add(&mut self, state: PlacementState) {
        let count = match state {
            PlacementState::Synced => &mut self.synced,
            PlacementState::Pending => &mut self.pending,
            PlacementState::TargetNotFound => &mut self.target_not_found,
            PlacementState::Conflict => &mut self.conflict,
            PlacementState::Unavailable => &mut self.unavailable,
            PlacementState::Error => &mut self.error,
        };
        *count = Some(count.unwrap_or(0).saturating_add(1));
    }
}

/// A per-cluster placement as a status lists it.
pub trait HasState {
    /// Its state.
    fn state(&self) -> PlacementState;

    /// Its cluster.
    fn cluster(&self) -> &str;

    /// The detail for its state, if any.
    fn message(&self) -> Option<&str>;
}

/// How many placements a status lists: all of them up to `threshold`; above it, only those
/// not `Synced`, at most `listed`, with a [`PlacementSummary`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusLimits {
    /// Most placements listed in full.
    pub threshold: usize,
    /// Most placements listed above the threshold.
    pub listed: usize,
}

impl Default for StatusLimits {
    fn default() -> Self {
        Self {
            threshold: 100,
            listed: 20,
        }
    }
}

/// The status of a kind that places something in member clusters: its conditions, and
/// its placements with their summary ([`StatusLimits::apply`]).
pub trait PlacedStatus {
    /// One cluster's line.
    type Placement: HasState;

    /// The conditions, as read.
    fn conditions(&self) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition];

    /// The per-cluster lines, as read.
    fn placements(&self) -> &[Self::Placement];

    /// The per-cluster lines.
    fn placements_mut(&mut self) -> &mut Vec<Self::Placement>;

    /// The conditions.
    fn conditions_mut(
        &mut self,
    ) -> &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>;

    /// The explanation of the clusters left out (`status.selection`).
    fn selection(&self) -> Option<&SelectionSummary>;

    /// The same, to set.
    fn selection_mut(&mut self) -> &mut Option<SelectionSummary>;

    /// The trace id of the latest change (`status.traceID`).
    fn trace_id_mut(&mut self) -> &mut Option<String>;

    /// Cuts the placements down to what `limits` lets the status list, setting the summary,
    /// and the clusters named in `status.selection` to [`MAX_NAMED_LEFT_OUT`] per reason.
    fn summarize(&mut self, limits: &StatusLimits);
}

/// An object of a kind that places something, with its [`PlacedStatus`].
pub trait HasPlacedStatus {
    /// Its status.
    type Status: PlacedStatus;

    /// Its status, as read.
    fn placed_status(&self) -> Option<&Self::Status>;
}

/// Makes a kind's status a [`PlacedStatus`], its object a [`HasPlacedStatus`] and its
/// per-cluster line a [`HasState`]: `placed_status! { Object => Status, Placement; }`, in
/// the kind's own file. The status has `conditions`, `placements`, `summary`, `selection` and
/// `trace_id`; the line
/// has `cluster`, `state` and `message`.
#[macro_export]
macro_rules! placed_status {
    ($($object:ty => $status:ty, $placement:ty;)*) => {
        $(
            impl $crate::summary::HasState for $placement {
                fn state(&self) -> $crate::PlacementState {
                    self.state
                }

                fn cluster(&self) -> &str {
                    &self.cluster
                }

                fn message(&self) -> Option<&str> {
                    self.message.as_deref()
                }
            }

            impl $crate::summary::PlacedStatus for $status {
                type Placement = $placement;

                fn conditions(
                    &self,
                ) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
                    &self.conditions
                }

                fn placements(&self) -> &[$placement] {
                    &self.placements
                }

                fn placements_mut(&mut self) -> &mut Vec<$placement> {
                    &mut self.placements
                }

                fn conditions_mut(
                    &mut self,
                ) -> &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
                    &mut self.conditions
                }

                fn selection(&self) -> Option<&$crate::SelectionSummary> {
                    self.selection.as_ref()
                }

                fn selection_mut(&mut self) -> &mut Option<$crate::SelectionSummary> {
                    &mut self.selection
                }

                fn trace_id_mut(&mut self) -> &mut Option<String> {
                    &mut self.trace_id
                }

                fn summarize(&mut self, limits: &$crate::summary::StatusLimits) {
                    self.summary = limits.apply(&mut self.placements);
                    self.selection = self.selection.take().map($crate::SelectionSummary::bounded);
                }
            }

            impl $crate::summary::HasPlacedStatus for $object {
                type Status = $status;

                fn placed_status(&self) -> Option<&$status> {
                    self.status.as_ref()
                }
            }
        )*
    };
}

impl StatusLimits {
    /// Cuts `placements` down to what the status lists; the summary when it was cut (None,
    /// and the list unchanged, at or below the threshold).
    pub fn apply<P: HasState>(&self, placements: &mut Vec<P>) -> Option<PlacementSummary> {
        if placements.len() <= self.threshold {
            return None;
        }
        let mut states = StateCounts::default();
        for p in placements.iter() {
            states.add(p.state());
        }
        let total = count(placements.len());
        let mut kept = 0;
        placements.retain(|p| {
            let keep = p.state() != PlacementState::Synced && kept < self.listed;
            kept += usize::from(keep);
            keep
        });
        Some(PlacementSummary {
            total,
            states,
            listed: count(placements.len()),
        })
    }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TopicPlacement;

    fn placement(i: usize, state: PlacementState) -> TopicPlacement {
        TopicPlacement {
            cluster: format!("c{i}"),
            state,
            partitions: None,
            replication_factor: None,
            message: None,
            revision: None,
        }
    }

    fn fleet(n: usize, not_synced_every: usize) -> Vec<TopicPlacement> {
        (0..n)
            .map(|i| {
                let state = if i % not_synced_every == 0 {
                    PlacementState::Pending
                } else {
                    PlacementState::Synced
                };
                placement(i, state)
            })
            .collect()
    }

    #[test]
    fn a_fleet_at_the_threshold_is_listed_in_full_without_a_summary() {
        let limits = StatusLimits {
            threshold: 10,
            listed: 2,
        };
        let mut placements = fleet(10, 3);
        let before = placements.clone();
        assert_eq!(limits.apply(&mut placements), None);
        assert_eq!(placements, before);
    }

    #[test]
    fn above_the_threshold_only_the_first_unsynced_placements_are_listed_and_all_are_counted() {
        let limits = StatusLimits {
            threshold: 10,
            listed: 3,
        };
        let mut placements = fleet(11, 2);
        placements[3].state = PlacementState::Error;
        let summary = limits
            .apply(&mut placements)
            .expect("a summary above the threshold");
        let listed: Vec<(&str, PlacementState)> = placements
            .iter()
            .map(|p| (p.cluster.as_str(), p.state))
            .collect();
        assert_eq!(
            listed,
            [
                ("c0", PlacementState::Pending),
                ("c2", PlacementState::Pending),
                ("c3", PlacementState::Error),
            ]
        );
        assert_eq!(summary.total, 11);
        assert_eq!(summary.listed, 3);
        assert_eq!(
            summary.states,
            StateCounts {
                error: Some(1),
                pending: Some(6),
                synced: Some(4),
                ..StateCounts::default()
            }
        );
    }

    #[test]
    fn a_fleet_all_synced_above_the_threshold_lists_none() {
        let limits = StatusLimits {
            threshold: 1,
            listed: 5,
        };
        let mut placements: Vec<_> = (0..4)
            .map(|i| placement(i, PlacementState::Synced))
            .collect();
        let summary = limits.apply(&mut placements).unwrap();
        assert!(placements.is_empty());
        assert_eq!(summary.listed, 0);
        assert_eq!(
            summary.states,
            StateCounts {
                synced: Some(4),
                ..StateCounts::default()
            }
        );
    }
}

/// Most clusters a status names for each reason in `status.selection.leftOut`
/// (`accord-hub placements KIND/NAMESPACE/NAME --explain` names them all).
pub const MAX_NAMED_LEFT_OUT: usize = 20;

/// How many clusters an object considered, where it is placed, and why the others are
/// not: `status.selection`, the same in every kind.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SelectionSummary {
    /// Clusters considered: every ManagedCluster, and clusters named in
    /// `spec.placement.clusters` that do not exist.
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub considered: i32,
    /// Clusters placed in and available.
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub placed: i32,
    /// The other clusters, counted by reason (and taint).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
    /// What the placement asks for that the fleet cannot give now (a spread's
    /// `minGroups`): nothing new is placed until it can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsatisfied: Option<String>,
    /// The decision in one line.
    pub message: String,
}

/// Clusters left out for one reason.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LeftOut {
    /// Why.
    pub reason: LeftOutReason,
    /// The taint (`key=value:Effect`) for `Tainted`, the group used for
    /// `FallbackNotReached`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// How many clusters.
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub count: i32,
    /// The clusters by name, at most 20 (none for `NotSelected`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
}

/// Why a cluster holds no placement of an object (or one it cannot use yet).
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord,
)]
pub enum LeftOutReason {
    /// `spec.placement` does not select it (not named, labels do not match, or in no
    /// preference group).
    NotSelected,
    /// Named in `spec.placement.clusters`, but there is no such ManagedCluster.
    NotFound,
    /// In a preference group after the one used.
    FallbackNotReached,
    /// Its agent is not connected: a placement waits for it, or (where the placement
    /// chooses) it is not chosen.
    Unavailable,
    /// Drained (`spec.unschedulable`).
    Unschedulable,
    /// A taint the object does not tolerate.
    Tainted,
    /// Eligible, but `numberOfClusters` were chosen elsewhere.
    NumberOfClusters,
    /// Left out by `spec.placement.spread` (a group not chosen, or no value of its label).
    Spread,
    /// Another object owns what this one would write there.
    Conflict,
    /// A policy of the hub refuses it.
    Refused,
    /// Returned after a failover; waits out the return cooldown.
    ReturnCooldown,
    /// Selected, but a progressive rollout has not reached it and it ran no earlier
    /// revision that succeeded.
    AwaitingRollout,
}

impl LeftOutReason {
    /// How the reason reads in a sentence ("2 tainted").
    pub fn words(self) -> &'static str {
        match self {
            Self::NotSelected => "not selected",
            Self::NotFound => "not found",
            Self::FallbackNotReached => "in a fallback group not reached",
            Self::Unavailable => "unavailable",
            Self::Unschedulable => "unschedulable",
            Self::Tainted => "tainted",
            Self::NumberOfClusters => "beyond numberOfClusters",
            Self::Spread => "left out by spread",
            Self::Conflict => "in conflict",
            Self::Refused => "refused by policy",
            Self::ReturnCooldown => "in return cooldown",
            Self::AwaitingRollout => "awaiting the rollout",
        }
    }
}

impl SelectionSummary {
    /// The summary as a status shows it: at most [`MAX_NAMED_LEFT_OUT`] clusters named per
    /// reason.
    pub fn bounded(mut self) -> Self {
        for l in &mut self.left_out {
            l.clusters.truncate(MAX_NAMED_LEFT_OUT);
        }
        self
    }
}
