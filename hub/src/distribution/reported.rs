//! What a placement shows for kinds that send every selected cluster the same assignment
//! and have no failover (PrometheusFederation, FederatedKafkaTopic): the agent's last
//! report about the current assignment, or why there is nothing to show yet.

use accord_common::distribution::PlacementState;
use accord_crds::conditions::{Desired, Status, reasons, types};

use super::ShareRecord;
use std::collections::HashMap;

use crate::distribution::select::{ClusterInfo, Clusters};
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
/// what the agent reported about the record's `revision` (or later; for a share an earlier
/// record sent as it is, about that one's), else `Pending` —
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
            Some(r) if r.applied_revision >= share.current_from(revision) => {
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

/// What a kind's placements are shown from: the shares, the revision of the record they
/// were sent at (a report that applied it or later is current), the agents' reports and
/// the ManagedClusters.
#[derive(Clone, Copy, Debug)]
pub struct Placed<'a> {
    /// The shares to show (the stored record's, or held ones when nothing was stored).
    pub shares: &'a [ShareRecord],
    /// The record's etcd revision.
    pub revision: i64,
    /// The agents' last reports, by cluster.
    pub reports: &'a HashMap<String, StatusRecord>,
    /// The ManagedClusters, by name.
    pub clusters: &'a Clusters,
}

impl Placed<'_> {
    /// `show` of each share with its cluster's report and ManagedCluster, in share order.
    pub fn each<T>(
        &self,
        show: impl Fn(&ShareRecord, Option<&StatusRecord>, Option<&ClusterInfo>) -> T,
    ) -> Vec<T> {
        self.shares
            .iter()
            .map(|s| {
                show(
                    s,
                    self.reports.get(&s.cluster),
                    self.clusters.get(&s.cluster),
                )
            })
            .collect()
    }

    /// Whether every placement has an outcome: none is `Pending` (waiting for its agent,
    /// for a report on this revision, or held), so the status shows where things ended up
    /// rather than how far they got.
    pub fn settled(&self) -> bool {
        self.each(|share, report, cluster| {
            state(share, self.revision, report, cluster, "").0 != PlacementState::Pending
        })
        .into_iter()
        .all(|settled| settled)
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

/// One placement (or a placement-like part, such as a global tier) as the `Ready` and
/// `Degraded` conditions see it.
#[derive(Clone, Copy, Debug)]
pub struct Shown<'a> {
    /// The cluster, or what the part is called.
    pub name: &'a str,
    /// Its state.
    pub state: PlacementState,
    /// Its message, if any.
    pub message: Option<&'a str>,
}

/// A kind's per-cluster status line, as [`Shown`].
pub trait ShowsPlacement {
    /// The line.
    fn shown(&self) -> Shown<'_>;
}

macro_rules! shows_placement {
    ($($ty:ty),* $(,)?) => {
        $(impl ShowsPlacement for $ty {
            fn shown(&self) -> Shown<'_> {
                Shown {
                    name: &self.cluster,
                    state: self.state,
                    message: self.message.as_deref(),
                }
            }
        })*
    };
}

shows_placement!(
    accord_crds::federated_resource::ResourcePlacement,
    accord_crds::kafka_topic::TopicPlacement,
    accord_crds::kafka_user::KafkaUserPlacement,
    accord_crds::promfed::FederationPlacement,
    accord_crds::scale::Placement,
);

/// How the `Ready` and `Degraded` conditions and the Events see `placements`.
pub fn shown<P: ShowsPlacement>(placements: &[P]) -> Vec<Shown<'_>> {
    placements.iter().map(ShowsPlacement::shown).collect()
}

/// The Warning Events a new status calls for that the `old` one did not: each placement
/// of `new` newly in `Error` (reason `error`) or `Conflict` (reason `conflict`), noted as
/// `cluster <name>: <message>`.
pub fn new_trouble(
    old: &[Shown<'_>],
    new: &[Shown<'_>],
    error: &'static str,
    conflict: &'static str,
) -> Vec<(&'static str, String)> {
    new.iter()
        .filter_map(|p| {
            let reason = match p.state {
                PlacementState::Error => error,
                PlacementState::Conflict => conflict,
                _ => return None,
            };
            let was = old.iter().any(|o| o.name == p.name && o.state == p.state);
            (!was).then(|| {
                (
                    reason,
                    format!("cluster {}: {}", p.name, p.message.unwrap_or("error")),
                )
            })
        })
        .collect()
}

/// `Ready` (every placement `Synced`: `synced` says what holds; `False` while none is
/// selected, or naming what is `not_yet` and in which state) and `Degraded` (some placement
/// in trouble, naming each with its state and message).
pub fn ready_and_degraded(shown: &[Shown<'_>], synced: String, not_yet: &str) -> [Desired; 2] {
    let not_synced: Vec<String> = shown
        .iter()
        .filter(|p| p.state != PlacementState::Synced)
        .map(|p| format!("{} ({})", p.name, p.state))
        .collect();
    let ready = if shown.is_empty() {
        Desired::new(
            types::READY,
            Status::False,
            reasons::NOT_ALL_PLACEMENTS_READY,
            "no member cluster is selected",
        )
    } else if not_synced.is_empty() {
        Desired::new(
            types::READY,
            Status::True,
            reasons::ALL_PLACEMENTS_SYNCED,
            synced,
        )
    } else {
        Desired::new(
            types::READY,
            Status::False,
            reasons::NOT_ALL_PLACEMENTS_READY,
            format!("{not_yet}: {}", named(&not_synced, ", ")),
        )
    };
    let troubled: Vec<String> = shown
        .iter()
        .filter(|p| is_trouble(p.state))
        .map(|p| match p.message {
            // A message that already names its state is not prefixed with it again.
            Some(m) if m.starts_with(&format!("{}:", p.state)) => format!("{}: {m}", p.name),
            Some(m) => format!("{}: {}: {m}", p.name, p.state),
            None => format!("{}: {}", p.name, p.state),
        })
        .collect();
    let degraded = if troubled.is_empty() {
        Desired::new(types::DEGRADED, Status::False, reasons::HEALTHY, "")
    } else {
        Desired::new(
            types::DEGRADED,
            Status::True,
            reasons::PLACEMENT_PROBLEMS,
            named(&troubled, "; "),
        )
    };
    [ready, degraded]
}

/// Most clusters a condition message names; the rest are counted.
pub const NAMED_IN_MESSAGES: usize = 20;

/// `items` joined by `separator`, the first [`NAMED_IN_MESSAGES`] of them and a count of
/// the rest: a condition's message stays readable (and under the API server's limit) at
/// any fleet size.
pub fn named(items: &[impl AsRef<str>], separator: &str) -> String {
    let first: Vec<&str> = items
        .iter()
        .take(NAMED_IN_MESSAGES)
        .map(AsRef::as_ref)
        .collect();
    let joined = first.join(separator);
    match items.len().checked_sub(NAMED_IN_MESSAGES) {
        Some(rest) if rest > 0 => format!("{joined}{separator}and {rest} more"),
        _ => joined,
    }
}

/// `count` cluster(s), for condition messages.
pub fn clusters(count: usize) -> String {
    format!("{count} cluster{}", if count == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::distribution::{AssignmentSpec, KafkaTopicSpec, Observed};

    fn share() -> ShareRecord {
        ShareRecord {
            since: None,
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
    fn messages_name_the_first_clusters_and_count_the_rest() {
        let few: Vec<String> = (0..NAMED_IN_MESSAGES).map(|i| format!("c{i}")).collect();
        assert_eq!(named(&few, ", "), few.join(", "));
        let many: Vec<String> = (0..NAMED_IN_MESSAGES + 7)
            .map(|i| format!("c{i}"))
            .collect();
        let m = named(&many, "; ");
        assert!(m.starts_with("c0; c1; "), "{m}");
        assert!(
            m.ends_with(&format!("c{}; and 7 more", NAMED_IN_MESSAGES - 1)),
            "{m}"
        );
        assert!(!m.contains(&format!("c{NAMED_IN_MESSAGES};")), "{m}");
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

    #[test]
    fn a_report_of_the_record_that_sent_an_unchanged_share_is_current() {
        let kept = ShareRecord {
            since: Some(7),
            ..share()
        };
        let r = report(7, PlacementState::Synced, "");
        let (st, _) = super::state(&kept, 9, Some(&r), Some(&available()), "gone");
        assert_eq!(st, PlacementState::Synced);
        let older = report(6, PlacementState::Synced, "");
        let (st, _) = super::state(&kept, 9, Some(&older), Some(&available()), "gone");
        assert_eq!(st, PlacementState::Pending);
    }

    #[test]
    fn placements_are_settled_once_none_is_pending_on_the_current_revision() {
        let shares = [
            share(),
            ShareRecord {
                cluster: "b".into(),
                ..share()
            },
        ];
        let clusters: Clusters = [("a".to_owned(), available()), ("b".to_owned(), available())]
            .into_iter()
            .collect();
        let settled = |reports: &[(&str, StatusRecord)]| {
            let reports: HashMap<String, StatusRecord> = reports
                .iter()
                .map(|(c, r)| ((*c).to_owned(), r.clone()))
                .collect();
            Placed {
                shares: &shares,
                revision: 9,
                reports: &reports,
                clusters: &clusters,
            }
            .settled()
        };
        let synced = report(9, PlacementState::Synced, "");
        assert!(!settled(&[]), "nobody reported");
        assert!(!settled(&[("a", synced.clone())]), "b has not reported");
        assert!(
            !settled(&[
                ("a", synced.clone()),
                ("b", report(9, PlacementState::Pending, "creating"))
            ]),
            "b is still working"
        );
        assert!(
            !settled(&[
                ("a", synced.clone()),
                ("b", report(8, PlacementState::Synced, ""))
            ]),
            "b reported on an earlier revision"
        );
        assert!(settled(&[
            ("a", synced.clone()),
            ("b", report(9, PlacementState::Error, "refused"))
        ]));
        let gone: Clusters = [("a".to_owned(), available())].into_iter().collect();
        let none = HashMap::from([("a".to_owned(), synced)]);
        let placed = Placed {
            shares: &shares,
            revision: 9,
            reports: &none,
            clusters: &gone,
        };
        assert!(placed.settled(), "an unavailable cluster is an outcome");
    }
}
