//! A FederatedResource's status from its placements record and the agents' reports: one
//! placement per selected cluster (its manifests' states and health, the overrides that
//! applied there, feedback values, drift repairs) and the `Applied`, `Available` and
//! `Degraded` conditions.

use std::collections::BTreeMap;

use accord_common::distribution::{Observed, PlacementState, health};
use accord_crds::FederatedResourceStatus;
use accord_crds::conditions::{self, Desired, Status, types};
use accord_crds::federated_resource::{ManifestStatus, ResourcePlacement};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::controller::FederatedResources;
use crate::controllers::placement::{Aggregation, Note};
use crate::controllers::transitions::{self, Meaning};
use crate::distribution::reported;

/// Condition type: every placement has every manifest applied.
pub const APPLIED: &str = "Applied";
/// Condition type: every manifest in every placement is healthy.
pub const AVAILABLE: &str = "Available";
/// Reason of `Available=True`.
pub const ALL_HEALTHY: &str = "AllManifestsHealthy";
/// Reason of `Available=False`.
pub const NOT_ALL_HEALTHY: &str = "NotAllManifestsHealthy";
/// Message of a placement whose cluster's agent is not connected.
pub const AGENT_DISCONNECTED: &str = "the cluster's agent is not connected; the delivered \
     objects stay as they are there (values are as last reported)";

/// The status the object should show.
pub fn aggregate(inputs: &Aggregation<'_, FederatedResources>) -> FederatedResourceStatus {
    let revision = inputs.placed.revision;
    let placements: Vec<ResourcePlacement> = inputs.placed.each(|share, report, cluster| {
        let (mut state, mut message) =
            reported::state(share, revision, report, cluster, AGENT_DISCONNECTED);
        let plan = inputs.facts.get(&share.cluster);
        if let Some(error) = plan.and_then(|p| p.error.as_ref()) {
            state = PlacementState::Error;
            message = Some(format!(
                "{error}; the cluster keeps what it was sent before"
            ));
        } else if let Some(p) = plan.filter(|p| !p.scaled.is_empty()) {
            let scaled = p.scaled.join("; ");
            message = Some(match message {
                Some(m) => format!("{m}; {scaled}"),
                None => scaled,
            });
        }
        let observed = report.and_then(|r| match &r.observed {
            Observed::FederatedResource(o) => Some(o),
            _ => None,
        });
        let mut placement = ResourcePlacement {
            cluster: share.cluster.clone(),
            state,
            applied: None,
            available: None,
            manifests: Vec::new(),
            overrides: plan.map(|p| p.overrides.clone()).unwrap_or_default(),
            feedback: BTreeMap::new(),
            drift_repairs: None,
            last_drift_time: None,
            message,
            revision: None,
        };
        if let Some(o) = observed {
            let count = |f: &dyn Fn(&accord_common::distribution::ManifestObserved) -> bool| {
                i32::try_from(o.manifests.iter().filter(|m| f(m)).count()).unwrap_or(i32::MAX)
            };
            let applied = count(&|m| m.state == PlacementState::Synced);
            let available = count(&|m| m.health == health::HEALTHY);
            let all = i32::try_from(o.manifests.len()).unwrap_or(i32::MAX);
            placement.applied = Some(applied);
            placement.available = Some(available);
            if applied < all || available < all {
                placement.manifests = o
                    .manifests
                    .iter()
                    .map(|m| ManifestStatus {
                        kind: m.object.kind.clone(),
                        name: m.object.name.clone(),
                        namespace: Some(m.object.namespace.clone()).filter(|n| !n.is_empty()),
                        state: m.state,
                        health: m.health.clone(),
                        message: Some(m.message.clone()).filter(|m| !m.is_empty()),
                    })
                    .collect();
            }
            placement.feedback = o.feedback.clone();
            placement.drift_repairs = (o.drift_repairs > 0).then_some(o.drift_repairs);
            placement.last_drift_time = (o.last_drift_unix_millis > 0)
                .then(|| Timestamp::from_millisecond(o.last_drift_unix_millis).ok())
                .flatten()
                .map(Time);
        }
        placement
    });
    let desired = resource_conditions(&placements);
    let old_conditions = inputs
        .old
        .map(|o| o.conditions.as_slice())
        .unwrap_or_default();
    FederatedResourceStatus {
        rollout: None,
        observed_generation: inputs.generation,
        clusters: Some(i32::try_from(placements.len()).unwrap_or(i32::MAX)),
        conditions: conditions::merge(old_conditions, &desired, inputs.generation, inputs.now),
        placements,
        summary: None,
        selection: None,
        trace_id: None,
    }
}

/// Whether every manifest of `p` is healthy, by its last report.
fn healthy(p: &ResourcePlacement) -> bool {
    p.state == PlacementState::Synced && p.applied.is_some() && p.available == p.applied
}

/// `Applied` (every placement Synced), `Available` (and every manifest healthy) and
/// `Degraded` (some placement in trouble, naming each).
pub fn resource_conditions(placements: &[ResourcePlacement]) -> Vec<Desired> {
    let shown = reported::shown(placements);
    let synced = format!(
        "every manifest is applied in {}",
        reported::clusters(placements.len())
    );
    let [mut applied, degraded] = reported::ready_and_degraded(&shown, synced, "not applied yet");
    applied.type_ = APPLIED.to_owned();
    let unhealthy: Vec<String> = placements
        .iter()
        .filter(|p| !healthy(p))
        .map(|p| match (p.available, p.applied) {
            (Some(available), Some(applied)) if p.state == PlacementState::Synced => {
                format!("{} ({available} of {applied} healthy)", p.cluster)
            }
            _ => format!("{} ({})", p.cluster, p.state),
        })
        .collect();
    let available = if placements.is_empty() {
        Desired::new(
            AVAILABLE,
            Status::False,
            NOT_ALL_HEALTHY,
            "no member cluster is selected",
        )
    } else if unhealthy.is_empty() {
        Desired::new(
            AVAILABLE,
            Status::True,
            ALL_HEALTHY,
            format!(
                "every manifest is healthy in {}",
                reported::clusters(placements.len())
            ),
        )
    } else {
        Desired::new(
            AVAILABLE,
            Status::False,
            NOT_ALL_HEALTHY,
            format!("not healthy yet: {}", reported::named(&unhealthy, ", ")),
        )
    };
    debug_assert_eq!(degraded.type_, types::DEGRADED);
    vec![applied, available, degraded]
}

/// What a FederatedResource's conditions say: `Applied` in every cluster, healthy while
/// `Available`.
const MEANING: Meaning = Meaning {
    applied: Some(APPLIED),
    healthy: (types::AVAILABLE, true),
};

/// The Events the move from `old` to `new` tells: every kind's transitions, and each
/// drift repair ([`drift_repairs`]).
pub fn notes(
    old: Option<&FederatedResourceStatus>,
    new: &FederatedResourceStatus,
    generation: Option<i64>,
) -> Vec<Note> {
    let mut notes = transitions::of_statuses(old, new, generation, MEANING);
    notes.extend(
        drift_repairs(old, new)
            .into_iter()
            .map(|n| Note::normal(super::reasons::DRIFT_REPAIRED, n)),
    );
    notes
}

/// What the move from `old` to `new` tells beyond the transitions every kind tells
/// ([`crate::controllers::transitions`]): each cluster whose agent restored owned fields
/// changed out of band, with its count so far.
pub fn drift_repairs(
    old: Option<&FederatedResourceStatus>,
    new: &FederatedResourceStatus,
) -> Vec<String> {
    let before =
        |cluster: &str| old.and_then(|o| o.placements.iter().find(|p| p.cluster == cluster));
    new.placements
        .iter()
        .filter_map(|p| {
            let now = p.drift_repairs.unwrap_or(0);
            let was = before(&p.cluster).and_then(|b| b.drift_repairs).unwrap_or(0);
            (now > was).then(|| {
                format!(
                    "cluster {}: owned fields changed out of band were restored ({} repair{} so far)",
                    p.cluster,
                    now,
                    if now == 1 { "" } else { "s" }
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::reported::Placed;
    use crate::federated_resource::plan::ClusterPlan;
    use accord_common::distribution::{FederatedResourceObserved, ManifestKey, ManifestObserved};
    use std::collections::HashMap;

    use crate::distribution::ShareRecord;
    use crate::distribution::select::available;
    use crate::store::StatusRecord;

    fn share(cluster: &str) -> ShareRecord {
        ShareRecord {
            since: None,
            cluster: cluster.into(),
            assignment: Some(
                accord_common::distribution::AssignmentSpec::FederatedResource(Default::default()),
            ),
            held_reason: None,
            hold: None,
        }
    }

    fn manifest(name: &str, state: PlacementState, health: &str) -> ManifestObserved {
        ManifestObserved {
            object: ManifestKey {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: "team".into(),
                name: name.into(),
            },
            state,
            health: health.into(),
            message: String::new(),
        }
    }

    fn report(state: PlacementState, manifests: Vec<ManifestObserved>) -> StatusRecord {
        StatusRecord {
            resource_version: String::new(),
            generation: 0,
            message: String::new(),
            observed_unix_millis: 0,
            api_server_unavailable: false,
            state,
            applied_revision: 5,
            observed: Observed::FederatedResource(FederatedResourceObserved {
                manifests,
                feedback: [("primary".to_owned(), "db-0".to_owned())].into(),
                drift_repairs: 1,
                last_drift_unix_millis: 1_700_000_000_000,
                removed: false,
            }),
        }
    }

    fn status(
        reports: &HashMap<String, StatusRecord>,
        plans: &BTreeMap<String, ClusterPlan>,
    ) -> FederatedResourceStatus {
        let shares = [share("east"), share("west")];
        let clusters = available(&["east", "west"]);
        let now = Time(Timestamp::from_second(1_700_000_000).unwrap());
        aggregate(&Aggregation {
            placed: Placed {
                shares: &shares,
                revision: 5,
                reports,
                clusters: &clusters,
            },
            decision: None,
            facts: plans,
            generation: Some(2),
            old: None,
            now: &now,
        })
    }

    fn condition<'a>(s: &'a FederatedResourceStatus, t: &str) -> &'a str {
        &s.conditions.iter().find(|c| c.type_ == t).unwrap().status
    }

    #[test]
    fn applied_and_available_everywhere_lists_no_manifests_and_shows_feedback() {
        let healthy = vec![manifest("a", PlacementState::Synced, health::HEALTHY)];
        let reports = HashMap::from([
            (
                "east".into(),
                report(PlacementState::Synced, healthy.clone()),
            ),
            ("west".into(), report(PlacementState::Synced, healthy)),
        ]);
        let s = status(&reports, &BTreeMap::new());
        assert_eq!(condition(&s, APPLIED), "True");
        assert_eq!(condition(&s, AVAILABLE), "True");
        assert_eq!(condition(&s, types::DEGRADED), "False");
        assert_eq!(s.clusters, Some(2));
        let east = &s.placements[0];
        assert_eq!((east.applied, east.available), (Some(1), Some(1)));
        assert!(east.manifests.is_empty());
        assert_eq!(east.feedback["primary"], "db-0");
        assert_eq!(east.drift_repairs, Some(1));
        assert!(east.last_drift_time.is_some());
    }

    #[test]
    fn an_unhealthy_manifest_is_listed_and_keeps_available_false() {
        let reports = HashMap::from([
            (
                "east".into(),
                report(
                    PlacementState::Synced,
                    vec![
                        manifest("a", PlacementState::Synced, health::HEALTHY),
                        manifest("b", PlacementState::Synced, health::PROGRESSING),
                    ],
                ),
            ),
            (
                "west".into(),
                report(
                    PlacementState::Synced,
                    vec![manifest("a", PlacementState::Synced, health::HEALTHY)],
                ),
            ),
        ]);
        let s = status(&reports, &BTreeMap::new());
        assert_eq!(condition(&s, APPLIED), "True");
        assert_eq!(condition(&s, AVAILABLE), "False");
        let message = &s
            .conditions
            .iter()
            .find(|c| c.type_ == AVAILABLE)
            .unwrap()
            .message;
        assert!(message.contains("east (1 of 2 healthy)"), "{message}");
        assert_eq!(s.placements[0].manifests.len(), 2);
        assert!(s.placements[1].manifests.is_empty());
    }

    #[test]
    fn an_override_error_is_that_placement_error_and_an_event_once() {
        let healthy = vec![manifest("a", PlacementState::Synced, health::HEALTHY)];
        let reports = HashMap::from([
            (
                "east".into(),
                report(PlacementState::Synced, healthy.clone()),
            ),
            ("west".into(), report(PlacementState::Synced, healthy)),
        ]);
        let plans = BTreeMap::from([(
            "west".to_owned(),
            ClusterPlan {
                error: Some("spec.overrides[0] on Deployment web: bad path".into()),
                ..ClusterPlan::default()
            },
        )]);
        let s = status(&reports, &plans);
        assert_eq!(s.placements[0].state, PlacementState::Synced);
        assert_eq!(s.placements[1].state, PlacementState::Error);
        assert!(
            s.placements[1]
                .message
                .as_deref()
                .unwrap()
                .starts_with("spec.overrides[0] on Deployment web: bad path")
        );
        assert_eq!(condition(&s, types::DEGRADED), "True");
        assert_eq!(drift_repairs(None, &s).len(), 2);
        assert!(drift_repairs(Some(&s), &s).is_empty());
    }
}
