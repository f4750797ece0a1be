//! A PrometheusFederation's status from its placements record, the agents' reports and the
//! global tier: one placement per selected cluster, and the `Ready` and `Degraded`
//! conditions.

use accord_common::distribution::{Observed, PlacementState};
use accord_crds::PrometheusFederationStatus;
use accord_crds::conditions::{self, Desired};
use accord_crds::promfed::{FederationPlacement, GlobalTierStatus};

use super::controller::Promfed;
use crate::controllers::placement::Aggregation;
use crate::distribution::ShareRecord;
use crate::distribution::reported::{self, Shown};
use crate::distribution::select::ClusterInfo;
use crate::store::StatusRecord;

pub use crate::distribution::reported::{WAITING_FOR_AGENT, WAITING_FOR_CHANGE};
/// Message of a placement whose cluster's agent is not connected.
pub const AGENT_DISCONNECTED: &str = "the cluster's agent is not connected; its federation \
     Prometheus keeps the config it last loaded (values are as last reported)";

/// The status a PrometheusFederation should show.
pub fn aggregate(
    inputs: &Aggregation<'_, Promfed>,
    global: Option<&GlobalTierStatus>,
) -> PrometheusFederationStatus {
    let revision = inputs.placed.revision;
    let placements: Vec<FederationPlacement> = inputs
        .placed
        .each(|share, report, cluster| placement(share, revision, report, cluster));
    let desired = federation_conditions(&placements, global);
    let old_conditions = inputs
        .old
        .map(|o| o.conditions.as_slice())
        .unwrap_or_default();
    PrometheusFederationStatus {
        rollout: None,
        observed_generation: inputs.generation,
        conditions: conditions::merge(old_conditions, &desired, inputs.generation, inputs.now),
        placements,
        summary: None,
        selection: None,
        trace_id: None,
        global: global.cloned(),
    }
}

/// One cluster's placement: what its agent last reported about the current assignment
/// (the record's `revision` or later), or why there is nothing to show yet.
pub fn placement(
    share: &ShareRecord,
    revision: i64,
    report: Option<&StatusRecord>,
    cluster: Option<&ClusterInfo>,
) -> FederationPlacement {
    let observed = report.and_then(|r| match &r.observed {
        Observed::Promfed(f) => Some(f),
        _ => None,
    });
    let (state, message) = reported::state(share, revision, report, cluster, AGENT_DISCONNECTED);
    FederationPlacement {
        cluster: share.cluster.clone(),
        state,
        jobs: observed.map(|o| o.jobs),
        config_hash: observed
            .map(|o| o.config_hash.clone())
            .filter(|h| !h.is_empty()),
        message,
        revision: None,
    }
}

/// `Ready` (every placement Synced, and the global tier too when enabled) and `Degraded`
/// (some placement or the global tier in trouble, naming them).
pub fn federation_conditions(
    placements: &[FederationPlacement],
    global: Option<&GlobalTierStatus>,
) -> Vec<Desired> {
    let mut shown = reported::shown(placements);
    if let Some(g) = global {
        shown.push(Shown {
            name: "global tier",
            state: g.state,
            message: g.message.as_deref(),
        });
    }
    let synced = format!(
        "the federation config is loaded in {}{}",
        reported::clusters(placements.len()),
        if global.is_some() {
            " and the global tier"
        } else {
            ""
        }
    );
    let [ready, degraded] = reported::ready_and_degraded(&shown, synced, "not loaded yet");
    // Only clusters count as selected: a global tier alone is not Ready.
    let ready = if placements.is_empty() {
        let [none_selected, _] = reported::ready_and_degraded(&[], String::new(), "");
        none_selected
    } else {
        ready
    };
    vec![ready, degraded]
}

/// The global tier newly in `Error` between `old` and `new` ("global tier: …"): the one
/// transition beyond those every kind tells ([`crate::controllers::transitions`]).
pub fn global_error(
    old: Option<&PrometheusFederationStatus>,
    new: &PrometheusFederationStatus,
) -> Option<String> {
    let was_error = old
        .and_then(|o| o.global.as_ref())
        .is_some_and(|g| g.state == PlacementState::Error);
    new.global
        .as_ref()
        .filter(|g| g.state == PlacementState::Error && !was_error)
        .map(|g| format!("global tier: {}", g.message.as_deref().unwrap_or("error")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::reported::Placed;
    use crate::distribution::select::Clusters;
    use crate::distribution::select::available;
    use accord_common::distribution::{AssignmentSpec, PromfedObserved, PromfedSpec};
    use accord_crds::conditions::{reasons, types};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use std::collections::HashMap;

    fn share(cluster: &str) -> ShareRecord {
        ShareRecord {
            since: None,
            cluster: cluster.into(),
            assignment: Some(AssignmentSpec::Promfed(PromfedSpec::default())),
            held_reason: None,
            hold: None,
        }
    }

    fn unknown(cluster: &str) -> ShareRecord {
        ShareRecord {
            since: None,
            cluster: cluster.into(),
            assignment: None,
            held_reason: Some(format!("no ManagedCluster {cluster}")),
            hold: Some(crate::distribution::Hold::NotRegistered),
        }
    }

    fn report(state: PlacementState, revision: i64, hash: &str, message: &str) -> StatusRecord {
        StatusRecord {
            resource_version: "1".into(),
            generation: 1,
            applied_revision: revision,
            state,
            message: message.into(),
            observed_unix_millis: 1_000,
            observed: Observed::Promfed(PromfedObserved {
                config_hash: hash.into(),
                jobs: 2,
                reloaded: state == PlacementState::Synced,
            }),
            api_server_unavailable: false,
        }
    }

    fn now() -> Time {
        Time(Timestamp::from_second(1_000).unwrap())
    }

    fn status(
        shares: &[ShareRecord],
        reports: &[(&str, StatusRecord)],
        clusters: &Clusters,
        global: Option<&GlobalTierStatus>,
        old: Option<&PrometheusFederationStatus>,
    ) -> PrometheusFederationStatus {
        let reports: HashMap<String, StatusRecord> = reports
            .iter()
            .map(|(c, r)| ((*c).to_owned(), r.clone()))
            .collect();
        let now = now();
        aggregate(
            &Aggregation {
                placed: Placed {
                    shares,
                    revision: 10,
                    reports: &reports,
                    clusters,
                },
                decision: None,
                facts: &(),
                generation: Some(3),
                old,
                now: &now,
            },
            global,
        )
    }

    fn synced_global() -> GlobalTierStatus {
        GlobalTierStatus {
            state: PlacementState::Synced,
            jobs: Some(2),
            config_hash: Some("g".into()),
            message: None,
        }
    }

    #[test]
    fn every_placement_synced_and_the_global_tier_loaded_make_the_promfed_ready() {
        let clusters = available(&["a", "b"]);
        let reports = [
            ("a", report(PlacementState::Synced, 10, "h1", "")),
            ("b", report(PlacementState::Synced, 11, "h2", "")),
        ];
        let global = synced_global();
        let st = status(
            &[share("a"), share("b")],
            &reports,
            &clusters,
            Some(&global),
            None,
        );
        assert_eq!(st.observed_generation, Some(3));
        assert_eq!(st.placements[0].state, PlacementState::Synced);
        assert_eq!(st.placements[0].config_hash.as_deref(), Some("h1"));
        assert_eq!(st.placements[0].jobs, Some(2));
        assert_eq!(st.placements[0].message, None);
        assert_eq!(st.global, Some(global));
        assert!(conditions::is_true(&st.conditions, types::READY));
        assert!(!conditions::is_true(&st.conditions, types::DEGRADED));
    }

    #[test]
    fn a_global_tier_not_yet_confirmed_keeps_the_promfed_not_ready() {
        let clusters = available(&["a"]);
        let reports = [("a", report(PlacementState::Synced, 10, "h1", ""))];
        let global = GlobalTierStatus {
            state: PlacementState::Pending,
            ..synced_global()
        };
        let st = status(&[share("a")], &reports, &clusters, Some(&global), None);
        let ready = conditions::find(&st.conditions, types::READY).unwrap();
        assert_eq!(ready.status, "False");
        assert!(
            ready.message.contains("global tier (Pending)"),
            "{}",
            ready.message
        );
        assert!(!conditions::is_true(&st.conditions, types::DEGRADED));
    }

    #[test]
    fn a_report_about_an_earlier_assignment_leaves_the_placement_pending() {
        let clusters = available(&["a", "b"]);
        let reports = [("a", report(PlacementState::Synced, 9, "old", ""))];
        let st = status(&[share("a"), share("b")], &reports, &clusters, None, None);
        assert_eq!(st.placements[0].state, PlacementState::Pending);
        assert_eq!(
            st.placements[0].message.as_deref(),
            Some(WAITING_FOR_CHANGE)
        );
        assert_eq!(
            st.placements[0].config_hash.as_deref(),
            Some("old"),
            "as last reported"
        );
        assert_eq!(st.placements[1].state, PlacementState::Pending);
        assert_eq!(st.placements[1].message.as_deref(), Some(WAITING_FOR_AGENT));
        assert!(!conditions::is_true(&st.conditions, types::READY));
    }

    #[test]
    fn errors_and_disconnected_clusters_degrade_the_promfed_and_are_named() {
        let mut clusters = available(&["a", "b"]);
        clusters.insert("c".into(), ClusterInfo::default());
        let reports = [
            (
                "a",
                report(
                    PlacementState::Error,
                    10,
                    "h",
                    "Prometheus refused the config: bad",
                ),
            ),
            ("b", report(PlacementState::Synced, 10, "h", "")),
            ("c", report(PlacementState::Synced, 10, "h", "")),
        ];
        let st = status(
            &[share("a"), share("b"), share("c")],
            &reports,
            &clusters,
            None,
            None,
        );
        assert_eq!(st.placements[0].state, PlacementState::Error);
        assert_eq!(
            st.placements[0].message.as_deref(),
            Some("Prometheus refused the config: bad")
        );
        assert_eq!(st.placements[2].state, PlacementState::Unavailable);
        assert_eq!(
            st.placements[2].message.as_deref(),
            Some(AGENT_DISCONNECTED)
        );
        let degraded = conditions::find(&st.conditions, types::DEGRADED).unwrap();
        assert_eq!(degraded.status, "True");
        assert_eq!(degraded.reason, reasons::PLACEMENT_PROBLEMS);
        assert!(
            degraded.message.contains("a: Error: Prometheus refused"),
            "{}",
            degraded.message
        );
        assert!(
            degraded.message.contains("c: Unavailable"),
            "{}",
            degraded.message
        );
        assert!(!degraded.message.contains("b:"), "{}", degraded.message);
    }

    #[test]
    fn an_unknown_cluster_is_pending_with_the_reason() {
        let st = status(&[unknown("mars")], &[], &available(&[]), None, None);
        assert_eq!(st.placements[0].state, PlacementState::Pending);
        assert_eq!(
            st.placements[0].message.as_deref(),
            Some("no ManagedCluster mars")
        );
        assert!(!conditions::is_true(&st.conditions, types::READY));
    }

    #[test]
    fn no_selected_cluster_is_not_ready() {
        let st = status(&[], &[], &available(&[]), None, None);
        let ready = conditions::find(&st.conditions, types::READY).unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(ready.message, "no member cluster is selected");
    }

    #[test]
    fn an_unchanged_status_is_not_rewritten_and_a_state_change_is() {
        let clusters = available(&["a"]);
        let reports = [("a", report(PlacementState::Synced, 10, "h", ""))];
        let first = status(&[share("a")], &reports, &clusters, None, None);
        let again = status(&[share("a")], &reports, &clusters, None, Some(&first));
        assert!(!conditions::status_changed(Some(&first), &again, |s| {
            &mut s.conditions
        }));
        let reports = [("a", report(PlacementState::Unavailable, 10, "h", "down"))];
        let later = status(&[share("a")], &reports, &clusters, None, Some(&first));
        assert!(conditions::status_changed(Some(&first), &later, |s| &mut s.conditions));
        assert!(conditions::status_changed(None, &first, |s| &mut s.conditions));
    }

    #[test]
    fn only_a_new_error_is_announced() {
        let clusters = available(&["a", "b"]);
        let bad = [
            ("a", report(PlacementState::Error, 10, "h", "refused")),
            ("b", report(PlacementState::Synced, 10, "h", "")),
        ];
        let failed_global = GlobalTierStatus {
            state: PlacementState::Error,
            message: Some("global refused".into()),
            ..synced_global()
        };
        let before = status(&[share("a"), share("b")], &[], &clusters, None, None);
        let after = status(
            &[share("a"), share("b")],
            &bad,
            &clusters,
            Some(&failed_global),
            Some(&before),
        );
        assert_eq!(
            global_error(Some(&before), &after).as_deref(),
            Some("global tier: global refused")
        );
        assert_eq!(global_error(Some(&after), &after), None);
    }
}
