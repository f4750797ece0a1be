//! A FederatedKafkaUser's status from its placements record and the agents' reports: one
//! placement per selected cluster (the ACL bindings and quota keys the brokers hold for
//! it, and the first characters of the credential's hash, never the credential), and the
//! `Ready` and `Degraded` conditions.

use accord_common::distribution::{Observed, PlacementState};
use accord_crds::conditions::{self, Desired, Status, types};
use accord_crds::kafka_user::{FederatedKafkaUserStatus, KafkaUserPlacement};

use super::controller::KafkaUsers;
use super::{KafkaUserDecision, plan, reasons};
use crate::controllers::placement::{Aggregation, Note};
use crate::controllers::transitions::{self, Meaning};
use crate::distribution::ShareRecord;
use crate::distribution::reported::{self, shown};
use crate::distribution::select::ClusterInfo;
use crate::store::StatusRecord;

/// Message of a placement whose cluster's agent is not connected.
pub const AGENT_DISCONNECTED: &str =
    "the cluster's agent is not connected; the user is as last reported";
/// Characters of the credential hash a placement shows: enough to tell two apart.
const HASH_SHOWN: usize = 12;

/// What a user's decision leaves for its status.
#[derive(Debug, Default)]
pub struct UserFacts {
    /// Why nothing can be sent yet (the password Secret is missing), if so.
    pub waiting: Option<String>,
}

/// The status a user should show.
pub fn aggregate(inputs: &Aggregation<'_, KafkaUsers>) -> FederatedKafkaUserStatus {
    let revision = inputs.placed.revision;
    let placements: Vec<KafkaUserPlacement> = inputs.placed.each(|share, report, cluster| {
        placement(share, inputs.decision, revision, report, cluster)
    });
    let [mut ready, mut degraded] = reported::ready_and_degraded(
        &shown(&placements),
        format!(
            "the user, its ACLs and quotas are as specified in {}",
            reported::clusters(placements.len())
        ),
        "not synced yet",
    );
    // Brokers without an authorizer: the user works there, its ACLs do not hold. Shown
    // unless something worse already degrades the user.
    let unkept: Vec<(String, String)> = inputs
        .placed
        .each(|share, report, _| match report.map(|r| &r.observed) {
            Some(Observed::KafkaUser(u)) if !u.acls_unkept.is_empty() => {
                Some((share.cluster.clone(), u.acls_unkept.clone()))
            }
            _ => None,
        })
        .into_iter()
        .flatten()
        .collect();
    if let Some((_, why)) = unkept.first()
        && degraded.status != Status::True
    {
        let clusters: Vec<&str> = unkept.iter().map(|(c, _)| c.as_str()).collect();
        degraded = Desired::new(
            types::DEGRADED,
            Status::True,
            reasons::ACLS_UNKEPT,
            format!("in {}: {why}", reported::named(&clusters, ", ")),
        );
    }
    if let Some(why) = inputs.facts.waiting.as_deref() {
        ready = Desired::new(
            types::READY,
            Status::False,
            reasons::WAITING_FOR_PASSWORD,
            why,
        );
    }
    let old_conditions = inputs
        .old
        .map(|o| o.conditions.as_slice())
        .unwrap_or_default();
    FederatedKafkaUserStatus {
        rollout: None,
        observed_generation: inputs.generation,
        conditions: conditions::merge(
            old_conditions,
            &[ready, degraded],
            inputs.generation,
            inputs.now,
        ),
        placements,
        summary: None,
        selection: None,
        trace_id: None,
    }
}

/// One cluster's placement: `Conflict` where an older user owns the name, else what its
/// agent last reported about the current assignment, or why there is nothing to show yet.
pub fn placement(
    share: &ShareRecord,
    decision: Option<&KafkaUserDecision>,
    revision: i64,
    report: Option<&StatusRecord>,
    cluster: Option<&ClusterInfo>,
) -> KafkaUserPlacement {
    let owner = decision.and_then(|d| d.conflicts.get(&share.cluster));
    let (state, message) = match owner {
        Some(owner) => {
            let name = decision.map_or("", |d| d.spec.username.as_str());
            (
                PlacementState::Conflict,
                Some(plan::conflict_message(name, owner)),
            )
        }
        None => reported::state(share, revision, report, cluster, AGENT_DISCONNECTED),
    };
    // A conflicted cluster's user is another object's: show nothing of it.
    let observed = report
        .filter(|_| state != PlacementState::Conflict)
        .and_then(|r| match &r.observed {
            Observed::KafkaUser(u) if !u.removed => Some(u),
            _ => None,
        });
    KafkaUserPlacement {
        cluster: share.cluster.clone(),
        state,
        acls: observed.map(|o| o.acls),
        quotas: observed.map(|o| o.quotas),
        credential_hash: observed
            .map(|o| {
                o.credential_hash
                    .chars()
                    .take(HASH_SHOWN)
                    .collect::<String>()
            })
            .filter(|h| !h.is_empty()),
        message,
        revision: None,
    }
}

/// How the Events read a user's status: `Applied` is told when the user is sent (one Event
/// per change), `Degraded` says whether it is healthy.
const MEANING: Meaning = Meaning {
    applied: None,
    healthy: (types::DEGRADED, false),
};

/// The Events the move from `old` to `new` tells (every kind's transitions: a placement
/// newly in `Error` or `Conflict`, unhealthy and healthy again).
pub fn notes(
    old: Option<&FederatedKafkaUserStatus>,
    new: &FederatedKafkaUserStatus,
    generation: Option<i64>,
) -> Vec<Note> {
    transitions::of_statuses(old, new, generation, MEANING)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::reported::Placed;
    use accord_common::distribution::{AssignmentSpec, KafkaUserObserved, KafkaUserSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use std::collections::HashMap;

    use crate::distribution::select::Clusters;

    fn share(cluster: &str) -> ShareRecord {
        ShareRecord {
            since: None,
            cluster: cluster.into(),
            assignment: Some(AssignmentSpec::KafkaUser(KafkaUserSpec::default())),
            held_reason: None,
            hold: None,
        }
    }

    fn report(state: PlacementState, hash: &str) -> StatusRecord {
        StatusRecord {
            resource_version: String::new(),
            generation: 0,
            applied_revision: 5,
            state,
            message: String::new(),
            observed_unix_millis: 0,
            observed: Observed::KafkaUser(KafkaUserObserved {
                credential_hash: hash.into(),
                acls: 3,
                quotas: 2,
                removed: false,
                acls_unkept: String::new(),
            }),
            api_server_unavailable: false,
        }
    }

    fn available(names: &[&str]) -> Clusters {
        names
            .iter()
            .map(|n| {
                (
                    (*n).to_owned(),
                    ClusterInfo {
                        available: true,
                        ..Default::default()
                    },
                )
            })
            .collect()
    }

    /// The status of `shares` at revision 5 (generation 2) with `reports`.
    fn synced_at_revision_5(
        shares: &[ShareRecord],
        reports: &HashMap<String, StatusRecord>,
        clusters: &Clusters,
    ) -> FederatedKafkaUserStatus {
        let now = Time(Timestamp::now());
        aggregate(&Aggregation {
            placed: Placed {
                shares,
                revision: 5,
                reports,
                clusters,
            },
            decision: None,
            facts: &UserFacts::default(),
            generation: Some(2),
            old: None,
            now: &now,
        })
    }

    #[test]
    fn synced_everywhere_is_ready_and_shows_counts_and_a_short_hash() {
        let shares = [share("east"), share("west")];
        let reports = HashMap::from([
            (
                "east".to_owned(),
                report(PlacementState::Synced, &"ab".repeat(32)),
            ),
            (
                "west".to_owned(),
                report(PlacementState::Synced, &"ab".repeat(32)),
            ),
        ]);
        let clusters = available(&["east", "west"]);
        let status = synced_at_revision_5(&shares, &reports, &clusters);
        assert_eq!(status.placements[0].acls, Some(3));
        assert_eq!(status.placements[0].quotas, Some(2));
        assert_eq!(
            status.placements[0].credential_hash.as_deref(),
            Some("abababababab")
        );
        let ready = conditions::find(&status.conditions, types::READY).unwrap();
        assert_eq!(ready.status, "True", "{ready:?}");
    }

    #[test]
    fn brokers_without_an_authorizer_leave_it_ready_and_degraded_naming_the_clusters() {
        let shares = [share("east"), share("west")];
        let mut unkept = report(PlacementState::Synced, "ab");
        if let Observed::KafkaUser(u) = &mut unkept.observed {
            u.acls_unkept = "the 2 ACL(s) cannot be kept here: SECURITY_DISABLED (54)".into();
        }
        let reports = HashMap::from([
            ("east".to_owned(), unkept),
            ("west".to_owned(), report(PlacementState::Synced, "ab")),
        ]);
        let clusters = available(&["east", "west"]);
        let status = synced_at_revision_5(&shares, &reports, &clusters);
        let ready = conditions::find(&status.conditions, types::READY).unwrap();
        assert_eq!(ready.status, "True", "{ready:?}");
        let degraded = conditions::find(&status.conditions, types::DEGRADED).unwrap();
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", reasons::ACLS_UNKEPT)
        );
        assert!(
            degraded.message.starts_with("in east: "),
            "{}",
            degraded.message
        );
        assert!(
            degraded.message.contains("SECURITY_DISABLED"),
            "{}",
            degraded.message
        );
    }

    #[test]
    fn a_missing_password_keeps_it_not_ready_with_the_reason() {
        let shares = [share("east")];
        let (reports, clusters) = (HashMap::new(), available(&["east"]));
        let now = Time(Timestamp::now());
        let status = aggregate(&Aggregation {
            placed: Placed {
                shares: &shares,
                revision: 0,
                reports: &reports,
                clusters: &clusters,
            },
            decision: None,
            facts: &UserFacts {
                waiting: Some("no Secret team/orders-writer".into()),
            },
            generation: Some(1),
            old: None,
            now: &now,
        });
        let ready = conditions::find(&status.conditions, types::READY).unwrap();
        assert_eq!(ready.reason, reasons::WAITING_FOR_PASSWORD);
        assert_eq!(ready.message, "no Secret team/orders-writer");
    }

    #[test]
    fn a_new_error_is_a_warning_once() {
        let shares = [share("east")];
        let mut failed = report(PlacementState::Error, "");
        failed.message = "the agent's Kafka user needs the Alter ACL on the cluster".into();
        let reports = HashMap::from([("east".to_owned(), failed)]);
        let clusters = available(&["east"]);
        let now = Time(Timestamp::now());
        let inputs = Aggregation {
            placed: Placed {
                shares: &shares,
                revision: 5,
                reports: &reports,
                clusters: &clusters,
            },
            decision: None,
            facts: &UserFacts::default(),
            generation: Some(1),
            old: None,
            now: &now,
        };
        let status = aggregate(&inputs);
        let told = notes(None, &status, Some(1));
        assert_eq!(told.len(), 1);
        assert!(told[0].message.contains("Alter ACL"), "{told:?}");
        assert!(notes(Some(&status), &status, Some(1)).is_empty());
    }
}
