//! The status of a scale policy, pure: aggregated from its decision and the agents'
//! reports (each placement's state and replicas, the policy's conditions).

use accord_crds::conditions::{self, Desired, Status, reasons, types};
use accord_crds::scale::CrossClusterScalePolicyStatus;
use accord_crds::{Placement, PlacementState};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::HashMap;

use super::ScaleDecision;
use super::plan::scale_spec;
use crate::distribution::ShareRecord;
use crate::distribution::select::Clusters;
use crate::store::StatusRecord;

/// Everything the status of a policy is computed from.
#[derive(Debug, Clone, Copy)]
pub struct AggregateInputs<'a> {
    /// The stored decision's shares.
    pub shares: &'a [ShareRecord],
    /// The stored decision.
    pub decision: &'a ScaleDecision,
    /// The agents' last reports, by cluster.
    pub reports: &'a HashMap<String, StatusRecord>,
    /// What the hub knows of each cluster.
    pub clusters: &'a Clusters,
    /// `metadata.generation` of the policy.
    pub generation: Option<i64>,
    /// The status the policy shows now.
    pub old: Option<&'a CrossClusterScalePolicyStatus>,
    /// When the decision was made.
    pub decided_at: &'a Time,
    /// The time to stamp on what changes now.
    pub now: &'a Time,
}

/// The status a policy should show: its placements ([`placements`]) and the conditions
/// built from them ([`scale_conditions`]).
pub fn aggregate(inputs: &AggregateInputs<'_>) -> CrossClusterScalePolicyStatus {
    let placements = placements(inputs);
    let ready = ready_replicas(&placements, inputs.decision);
    let desired_conditions = scale_conditions(&placements, inputs.decision);
    let old = inputs.old;
    let old_conditions = old.map(|o| o.conditions.as_slice()).unwrap_or_default();
    CrossClusterScalePolicyStatus {
        observed_generation: inputs.generation,
        desired_replicas: Some(inputs.decision.desired_replicas),
        ready_replicas: Some(ready),
        scale_request_id: Some(inputs.decision.scale_request_id.clone()),
        last_scale_time: Some(inputs.decided_at.clone()),
        placements,
        summary: None,
        selection: None,
        trace_id: None,
        autoscaling: old.and_then(|o| o.autoscaling.clone()),
        conditions: conditions::merge(
            old_conditions,
            &desired_conditions,
            inputs.generation,
            inputs.now,
        ),
    }
}

/// Each share's placement as the agents' reports show it.
pub fn placements(inputs: &AggregateInputs<'_>) -> Vec<Placement> {
    let old_placements = inputs
        .old
        .map(|o| o.placements.as_slice())
        .unwrap_or_default();
    inputs
        .shares
        .iter()
        .map(|share| placement(share, inputs, old_placements))
        .collect()
}

fn placement(
    share: &ShareRecord,
    inputs: &AggregateInputs<'_>,
    old_placements: &[Placement],
) -> Placement {
    let spec = scale_spec(share);
    let report = inputs.reports.get(&share.cluster);
    let available = inputs
        .clusters
        .get(&share.cluster)
        .is_some_and(|c| c.available);
    let current = report.filter(|r| {
        r.observed
            .scale()
            .is_some_and(|o| o.scale_request_id == inputs.decision.scale_request_id)
    });
    let (state, message) = if !available {
        (
            PlacementState::Unavailable,
            Some(share.held_reason.clone().unwrap_or_else(|| {
                "the cluster is unavailable; values are as last seen".to_owned()
            })),
        )
    } else if let Some(r) = current {
        // A share held back (a failover, a taint, the drain switch) says why it runs what
        // it runs, also once the agent has done it.
        let message = Some(r.message.clone()).filter(|m| !m.is_empty());
        (r.state, message.or_else(|| share.held_reason.clone()))
    } else if let Some(r) = report.filter(|r| is_trouble(r.state)) {
        // The agent could not act on an earlier decision either; say why.
        (r.state, Some(r.message.clone()))
    } else if let Some(r) =
        report.filter(|r| crate::distribution::reported::api_server_unavailable(r))
    {
        // The agent cannot reach its member's API server to apply this decision.
        (PlacementState::Pending, Some(r.message.clone()))
    } else {
        (PlacementState::Pending, share.held_reason.clone())
    };
    let ready = report.and_then(|r| r.observed.scale()).map(|o| o.ready);
    let synced_before = old_placements
        .iter()
        .find(|p| p.cluster == share.cluster)
        .and_then(|p| p.last_sync_time.clone());
    let reported_at = current
        .filter(|r| r.observed_unix_millis >= 1000)
        .and_then(|r| accord_common::runtime::time_from_millis(r.observed_unix_millis));
    Placement {
        cluster: share.cluster.clone(),
        namespace: spec.map(|s| s.namespace.clone()).unwrap_or_default(),
        desired_replicas: spec.map_or(0, |s| s.replicas),
        ready_replicas: ready,
        state,
        message,
        observed_resource_version: report.map(|r| r.resource_version.clone()),
        observed_generation: report.map(|r| r.generation),
        last_sync_time: if state == PlacementState::Synced {
            reported_at
                .or(synced_before)
                .or_else(|| Some(inputs.now.clone()))
        } else {
            synced_before
        },
    }
}

/// States in which the agent could not do what it was asked.
fn is_trouble(state: PlacementState) -> bool {
    matches!(
        state,
        PlacementState::TargetNotFound | PlacementState::Conflict | PlacementState::Error
    )
}

/// The replicas a placement counts toward the total: its share, or 0 for a cluster whose
/// share moved away (what it keeps running meanwhile is over the total, not part of it).
fn counted(placement: &Placement, decision: &ScaleDecision) -> i32 {
    if decision.moved_away.contains(&placement.cluster) {
        0
    } else {
        placement.desired_replicas
    }
}

/// Ready replicas over the available placements, each counted up to its share.
fn ready_replicas(placements: &[Placement], decision: &ScaleDecision) -> i32 {
    placements
        .iter()
        .filter(|p| p.state != PlacementState::Unavailable)
        .map(|p| p.ready_replicas.unwrap_or(0).min(counted(p, decision)))
        .sum()
}

/// `Ready`, `Progressing` and `Degraded` for a policy's placements.
pub fn scale_conditions(placements: &[Placement], decision: &ScaleDecision) -> Vec<Desired> {
    let desired: i32 = placements.iter().map(|p| counted(p, decision)).sum();
    let ready = ready_replicas(placements, decision);
    let troubled: Vec<String> = placements
        .iter()
        .filter(|p| {
            is_trouble(p.state)
                || (p.state == PlacementState::Unavailable && counted(p, decision) > 0)
        })
        .map(|p| format!("{}: {}", p.cluster, p.state.as_str()))
        .collect();
    let pending = placements
        .iter()
        .any(|p| p.state == PlacementState::Pending && counted(p, decision) > 0);
    let all_synced = placements.iter().all(|p| {
        p.state == PlacementState::Synced
            || (counted(p, decision) == 0 && p.state != PlacementState::Conflict)
    });
    let is_ready =
        all_synced && ready >= desired && decision.infeasible.is_none() && troubled.is_empty();
    let ready_condition = if is_ready {
        Desired::new(
            types::READY,
            Status::True,
            reasons::ALL_PLACEMENTS_SYNCED,
            format!("{ready}/{desired} replicas ready in every cluster"),
        )
    } else {
        Desired::new(
            types::READY,
            Status::False,
            reasons::NOT_ALL_PLACEMENTS_READY,
            format!("{ready}/{desired} replicas ready"),
        )
    };
    let progressing = if pending || (ready < desired && troubled.is_empty()) {
        Desired::new(
            types::PROGRESSING,
            Status::True,
            reasons::ROLLING_OUT,
            format!(
                "scale request {} is being applied",
                decision.scale_request_id
            ),
        )
    } else {
        Desired::new(
            types::PROGRESSING,
            Status::False,
            reasons::SETTLED,
            "no change in flight",
        )
    };
    let degraded = match (&decision.infeasible, troubled.is_empty()) {
        (Some(reason), _) => Desired::new(
            types::DEGRADED,
            Status::True,
            reasons::INFEASIBLE,
            reason.clone(),
        ),
        (None, false) => Desired::new(
            types::DEGRADED,
            Status::True,
            reasons::PLACEMENT_PROBLEMS,
            crate::distribution::reported::named(&troubled, "; "),
        ),
        (None, true) => Desired::new(
            types::DEGRADED,
            Status::False,
            reasons::HEALTHY,
            "every placement is healthy",
        ),
    };
    vec![ready_condition, progressing, degraded]
}

/// True when `new` differs from `old` in anything but timestamps.
pub fn status_changed(
    old: Option<&CrossClusterScalePolicyStatus>,
    new: &CrossClusterScalePolicyStatus,
) -> bool {
    let Some(old) = old else { return true };
    let strip = |s: &CrossClusterScalePolicyStatus| {
        let mut s = s.clone();
        s.conditions.clear();
        for p in &mut s.placements {
            p.last_sync_time = None;
        }
        s
    };
    !conditions::equal_ignoring_time(&old.conditions, &new.conditions) || strip(old) != strip(new)
}
