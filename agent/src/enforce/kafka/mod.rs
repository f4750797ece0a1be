//! What the agent's Kafka enforcers share: how the member's Kafka is reached and told
//! apart from a Kafka that answers "no".
//!
//! Topics and users (the `kafka_topic` and `kafka_user` enforcers) live in the same
//! Kafka, so they read the same connection Secret with the same options
//! ([`KafkaOptions`]: one `--kafka-secret`, one `--kafka-resync`, one probe), and a failure
//! means the same for both: [`errors`] classifies it once. Both are one enforcer,
//! [`resource::KafkaEnforcer`], instantiated per kind ([`resource::KafkaResource`]: the
//! kind's judge, its Kafka requests, its look at the brokers). Each instance keeps its own
//! [`link::KafkaLink`] (its own watch of that one Secret, started only while it has work),
//! its own [`observe`]r, its own liveness [`probe`] and its own applier, whose plans it
//! gathers into few requests with [`batch`]; [`tasks`] runs its observer, applier and probe
//! while it has work.

pub mod batch;
pub mod connection;
pub mod errors;
pub mod link;
pub mod looks;
pub mod observe;
pub mod probe;
pub mod resource;
pub mod tasks;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use accord_common::distribution::{PlacedRef, PlacementState};

pub use self::probe::{DEFAULT_PROBE_INTERVAL, DEFAULT_PROBE_TIMEOUT, PROBES, ProbeOptions};
use super::{Action, Judgement, WatchEvent};
use crate::report::Report;

/// Default name of the connection Secret in the agent's namespace.
pub const DEFAULT_SECRET: &str = "accord-kafka";
/// Default interval between two looks at everything a Kafka enforcer keeps.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(30);
/// Plural name of the Secrets resource, in watch events.
pub const SECRETS: &str = "secrets";

/// How the agent reaches its cluster's Kafka (for topics and users alike).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaOptions {
    /// Name of the connection Secret in the agent's namespace.
    pub secret: String,
    /// Interval between two looks at everything assigned (drift is repaired within it).
    pub resync: Duration,
    /// How often and how patiently Kafka's liveness is probed between looks.
    pub probe: ProbeOptions,
}

impl Default for KafkaOptions {
    fn default() -> Self {
        Self {
            secret: DEFAULT_SECRET.to_owned(),
            resync: DEFAULT_RESYNC,
            probe: ProbeOptions::default(),
        }
    }
}

/// The placed objects naming an object (by name in `after`) whose owner — the first claimant —
/// is not the one it was in `before`: each one's judgement may have changed.
pub fn reowned(
    before: &BTreeMap<String, BTreeSet<PlacedRef>>,
    after: &BTreeMap<String, BTreeSet<PlacedRef>>,
) -> Vec<PlacedRef> {
    after
        .iter()
        .filter(|(name, claimants)| {
            before.get(*name).and_then(BTreeSet::first) != claimants.first()
        })
        .flat_map(|(_, claimants)| claimants.iter().cloned())
        .collect()
}

/// The placed objects a watch event of a Kafka enforcer concerns, when it is about what the
/// enforcer keeps (`resource`, e.g. `kafkatopics`) or the probe: a changed object's
/// `claimants`, every claimant when a look completed or failed or the probe's verdict
/// changed. Any other event (the connection Secret's) is handed back.
pub fn concerned(
    resource: &'static str,
    claimants: &BTreeMap<String, BTreeSet<PlacedRef>>,
    event: WatchEvent,
) -> Result<Vec<PlacedRef>, WatchEvent> {
    let all = || claimants.values().flatten().cloned().collect();
    match event {
        WatchEvent::Changed {
            resource: r, name, ..
        } if r == resource => Ok(claimants
            .get(&name)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()),
        WatchEvent::Synced { resource: r, .. } | WatchEvent::Failed { resource: r, .. }
            if r == resource =>
        {
            Ok(all())
        }
        // The probe's verdict changed: it bears on everything kept.
        WatchEvent::Changed {
            resource: PROBES, ..
        } => Ok(all()),
        other => Err(other),
    }
}

/// The judgement of `placed` when another of the placed objects naming the same Kafka object
/// (`claimants`, in placed object order) got to it first: only the first manages it, the others are
/// `Conflict` naming it and `what` (e.g. `topic orders`), and nothing is applied for them.
pub fn conflict(
    claimants: Option<&BTreeSet<PlacedRef>>,
    placed: &PlacedRef,
    what: &str,
    revision: i64,
) -> Option<Judgement> {
    let owner = claimants?.first().filter(|owner| *owner != placed)?;
    Some(Judgement {
        report: Report::without_object(
            PlacementState::Conflict,
            format!("placed object {owner} already manages {what} in this cluster"),
            revision,
        ),
        action: Action::Settled,
    })
}

#[cfg(test)]
mod tests {
    use accord_common::distribution::PlacedKind;

    use super::*;

    #[test]
    fn a_name_whose_owner_went_has_its_claimants_looked_at_again() {
        let placed = |name: &str| PlacedRef {
            kind: PlacedKind::FederatedKafkaUser,
            namespace: "default".into(),
            name: name.into(),
        };
        let before = BTreeMap::from([
            ("u".to_owned(), BTreeSet::from([placed("a"), placed("b")])),
            ("v".to_owned(), BTreeSet::from([placed("c"), placed("d")])),
        ]);
        let after = BTreeMap::from([
            ("u".to_owned(), BTreeSet::from([placed("b")])),
            ("v".to_owned(), BTreeSet::from([placed("c")])),
        ]);
        assert_eq!(reowned(&before, &after), [placed("b")]);
        assert_eq!(reowned(&after, &after), []);
    }

    #[test]
    fn an_event_concerns_one_names_claimants_every_claimant_or_is_handed_back() {
        let placed = |name: &str| PlacedRef {
            kind: PlacedKind::FederatedKafkaTopic,
            namespace: "default".into(),
            name: name.into(),
        };
        let claimants = BTreeMap::from([
            ("t".to_owned(), BTreeSet::from([placed("a")])),
            ("u".to_owned(), BTreeSet::from([placed("b"), placed("c")])),
        ]);
        let changed = |resource, name: &str| WatchEvent::Changed {
            resource,
            namespace: String::new(),
            name: name.into(),
        };
        let concerned = |event| concerned("kafkatopics", &claimants, event);
        assert_eq!(
            concerned(changed("kafkatopics", "u")).ok(),
            Some(vec![placed("b"), placed("c")])
        );
        assert_eq!(concerned(changed("kafkatopics", "x")).ok(), Some(vec![]));
        let every = Some(vec![placed("a"), placed("b"), placed("c")]);
        assert_eq!(concerned(changed(PROBES, "probe")).ok(), every);
        let synced = WatchEvent::Synced {
            resource: "kafkatopics",
            namespace: String::new(),
        };
        assert_eq!(concerned(synced).ok(), every);
        assert!(concerned(changed("secrets", "kafka")).is_err());
        assert!(concerned(changed("kafkausers", "u")).is_err());
    }

    #[test]
    fn the_first_placed_object_naming_an_object_manages_it_and_the_others_are_conflicts() {
        let placed = |name: &str| PlacedRef {
            kind: PlacedKind::FederatedKafkaUser,
            namespace: "default".into(),
            name: name.into(),
        };
        let claimants = BTreeSet::from([placed("b"), placed("a")]);
        assert_eq!(
            conflict(Some(&claimants), &placed("a"), "Kafka user u", 3),
            None
        );
        let j = conflict(Some(&claimants), &placed("b"), "Kafka user u", 3).unwrap();
        assert_eq!(j.report.state, PlacementState::Conflict);
        assert_eq!(
            j.report.message,
            "placed object FederatedKafkaUser/default/a already manages Kafka user u in this cluster"
        );
        assert_eq!(j.action, Action::Settled);
        assert_eq!(conflict(None, &placed("a"), "Kafka user u", 3), None);
    }
}
