//! The Events a placed object's status transitions tell, written once for every kind: a
//! generation applied everywhere, a cluster gone to `Error` or `Conflict`, the object
//! unhealthy and healthy again. A kind passes its old and new status in this shape from
//! its `status_of`; each Event is written only on the transition (the writer aggregates
//! repeats), so a steady object writes none. The reasons of a deletion's Events are here
//! too, so every kind says them alike.

use accord_common::distribution::PlacementState;
use accord_crds::conditions;
use accord_crds::summary::PlacedStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::placement::Note;
use crate::distribution::reported::{Shown, ShowsPlacement, new_trouble, shown};

/// Event reasons.
pub mod reasons {
    /// A generation is applied in every selected cluster.
    pub const APPLIED: &str = "Applied";
    /// A cluster went to `Error`.
    pub const PLACEMENT_ERROR: &str = "PlacementError";
    /// A cluster went to `Conflict` (another owner holds what the object delivers).
    pub const CONFLICT: &str = "Conflict";
    /// The object became unhealthy.
    pub const UNHEALTHY: &str = "Unhealthy";
    /// The object is healthy again.
    pub const HEALTHY: &str = "Healthy";
    /// Ready=False while a deletion waits for the members.
    pub const DELETING: &str = "Deleting";
    /// What the object delivered is removed from every member.
    pub const DELETED: &str = "Deleted";
    /// What the object delivered is left in every member without Accord's marks.
    pub const ORPHANED: &str = "Orphaned";
    /// The deletion's bound passed before every member confirmed it.
    pub const DELETION_INCOMPLETE: &str = "DeletionIncomplete";
}

/// What the transitions read of one status.
#[derive(Clone, Copy, Debug)]
pub struct Seen<'a> {
    /// Every cluster's line.
    pub lines: &'a [Shown<'a>],
    /// The status conditions.
    pub conditions: &'a [Condition],
}

/// Which conditions of the kind say what.
#[derive(Clone, Copy, Debug)]
pub struct Meaning {
    /// True once the generation is applied in every cluster (`Applied`, `Ready`); `None`
    /// for a kind that tells what it sent when it decides (a topic's or a user's
    /// `Applied`, a scale policy's `ScaleDecision`), so a change writes one such Event.
    pub applied: Option<&'static str>,
    /// The condition that says whether the object is healthy, and the status it has then
    /// (`Available` True, `Degraded` False).
    pub healthy: (&'static str, bool),
}

/// [`notes`] from two statuses' placements and conditions.
pub fn of_statuses<S>(
    old: Option<&S>,
    new: &S,
    generation: Option<i64>,
    meaning: Meaning,
) -> Vec<Note>
where
    S: PlacedStatus,
    S::Placement: ShowsPlacement,
{
    let old_lines = old.map(|s| shown(s.placements()));
    let new_lines = shown(new.placements());
    notes(
        old.zip(old_lines.as_deref()).map(|(s, lines)| Seen {
            lines,
            conditions: s.conditions(),
        }),
        Seen {
            lines: &new_lines,
            conditions: new.conditions(),
        },
        generation,
        meaning,
    )
}

/// The Events the move from `old` (none: the object's first status) to `new` tells, for an
/// object at `generation`.
pub fn notes(
    old: Option<Seen<'_>>,
    new: Seen<'_>,
    generation: Option<i64>,
    meaning: Meaning,
) -> Vec<Note> {
    let mut notes: Vec<Note> = new_trouble(
        old.map(|o| o.lines).unwrap_or_default(),
        new.lines,
        reasons::PLACEMENT_ERROR,
        reasons::CONFLICT,
    )
    .into_iter()
    .map(|(reason, message)| Note::warning(reason, message))
    .collect();
    let applied_at = |conditions: &[Condition]| {
        conditions::find(conditions, meaning.applied?)
            .filter(|c| c.status == "True")
            .and_then(|c| c.observed_generation)
    };
    if let Some(g) = applied_at(new.conditions).filter(|g| Some(*g) == generation)
        && old.and_then(|o| applied_at(o.conditions)) != Some(g)
    {
        let clusters: Vec<&str> = new.lines.iter().map(|l| l.name).collect();
        notes.push(Note::normal(
            reasons::APPLIED,
            format!(
                "generation {g} applied in {} cluster{}: {}",
                clusters.len(),
                if clusters.len() == 1 { "" } else { "s" },
                crate::distribution::reported::named(&clusters, ", ")
            ),
        ));
    }
    let (health, healthy_when) = meaning.healthy;
    let healthy = |conditions: &[Condition]| {
        conditions::find(conditions, health)
            .map(|c| ((c.status == "True") == healthy_when, c.message.clone()))
    };
    // Health is told between statuses where nothing is in flight: a change being applied
    // (a placement `Pending`) makes a kind's health condition False until it lands, and
    // every edit would otherwise write Unhealthy and Healthy again.
    let in_flight = |lines: &[Shown<'_>]| lines.iter().any(|l| l.state == PlacementState::Pending);
    // Nor is a generation becoming healthy for the first time after it was applied (a new
    // object's pods starting): "healthy again" is for trouble that began after the apply.
    let trouble_after_apply = |conditions: &[Condition]| {
        let unhealthy_since =
            conditions::find(conditions, health).map(|c| c.last_transition_time.0);
        let applied_since = meaning
            .applied
            .and_then(|a| conditions::find(conditions, a))
            .filter(|c| c.status == "True")
            .map(|c| c.last_transition_time.0);
        match (unhealthy_since, applied_since) {
            (Some(unhealthy), Some(applied)) => unhealthy > applied,
            _ => true,
        }
    };
    if let (Some((before, _)), Some((now, message))) = (
        old.filter(|o| !in_flight(o.lines))
            .and_then(|o| healthy(o.conditions)),
        Some(&new)
            .filter(|n| !in_flight(n.lines))
            .and_then(|n| healthy(n.conditions)),
    ) && before != now
        && (!now || old.is_some_and(|o| trouble_after_apply(o.conditions)))
    {
        notes.push(if now {
            Note::normal(reasons::HEALTHY, "healthy again")
        } else {
            Note::warning(reasons::UNHEALTHY, message)
        });
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::events::EventType;

    const FR: Meaning = Meaning {
        applied: Some("Applied"),
        healthy: ("Available", true),
    };

    fn condition(type_: &str, status: &str, generation: i64, message: &str) -> Condition {
        condition_at(type_, status, generation, message, 0)
    }

    fn condition_at(
        type_: &str,
        status: &str,
        generation: i64,
        message: &str,
        at_unix: i64,
    ) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            observed_generation: Some(generation),
            message: message.into(),
            reason: "R".into(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(at_unix).unwrap(),
            ),
        }
    }

    fn line(name: &str, state: PlacementState) -> Shown<'_> {
        Shown {
            name,
            state,
            message: Some("why"),
        }
    }

    fn reasons_of(notes: &[Note]) -> Vec<(&str, bool)> {
        notes
            .iter()
            .map(|n| (n.reason.as_str(), n.type_ == EventType::Warning))
            .collect()
    }

    #[test]
    fn a_generation_applied_everywhere_is_told_once() {
        let lines = [
            line("east", PlacementState::Synced),
            line("west", PlacementState::Synced),
        ];
        let pending = [
            condition("Applied", "False", 2, ""),
            condition("Available", "True", 2, ""),
        ];
        let applied = [
            condition("Applied", "True", 2, ""),
            condition("Available", "True", 2, ""),
        ];
        let new = Seen {
            lines: &lines,
            conditions: &applied,
        };
        let first = notes(
            Some(Seen {
                lines: &lines,
                conditions: &pending,
            }),
            new,
            Some(2),
            FR,
        );
        assert_eq!(reasons_of(&first), [("Applied", false)]);
        assert_eq!(
            first[0].message,
            "generation 2 applied in 2 clusters: east, west"
        );
        assert!(
            notes(Some(new), new, Some(2), FR).is_empty(),
            "steady: nothing"
        );
        // The status of an older generation says nothing of this one.
        assert!(notes(None, new, Some(3), FR).is_empty());
    }

    #[test]
    fn new_errors_and_conflicts_per_cluster_and_health_both_ways() {
        let healthy = [condition("Available", "True", 1, "")];
        let unhealthy = [condition("Available", "False", 1, "web: 2 of 3 ready")];
        let before = [
            line("east", PlacementState::Synced),
            line("west", PlacementState::Error),
        ];
        let after = [
            line("east", PlacementState::Conflict),
            line("west", PlacementState::Error),
            line("north", PlacementState::Error),
        ];
        let got = notes(
            Some(Seen {
                lines: &before,
                conditions: &healthy,
            }),
            Seen {
                lines: &after,
                conditions: &unhealthy,
            },
            Some(1),
            FR,
        );
        assert_eq!(
            reasons_of(&got),
            [
                ("Conflict", true),
                ("PlacementError", true),
                ("Unhealthy", true)
            ]
        );
        assert_eq!(got[0].message, "cluster east: why");
        assert_eq!(got[1].message, "cluster north: why");
        assert_eq!(got[2].message, "web: 2 of 3 ready");
        let again = notes(
            Some(Seen {
                lines: &after,
                conditions: &unhealthy,
            }),
            Seen {
                lines: &after,
                conditions: &healthy,
            },
            Some(1),
            FR,
        );
        assert_eq!(reasons_of(&again), [("Healthy", false)]);
    }

    #[test]
    fn a_change_in_flight_tells_no_health() {
        let healthy = [condition("Available", "True", 2, "")];
        let waiting = [condition(
            "Available",
            "False",
            2,
            "not healthy yet: east (Pending)",
        )];
        let settled = [line("east", PlacementState::Synced)];
        let in_flight = [line("east", PlacementState::Pending)];
        let seen = |lines, conditions| Seen { lines, conditions };
        // An edit: healthy, being applied, healthy again — no Unhealthy, no Healthy.
        let going = notes(
            Some(seen(&settled, &healthy)),
            seen(&in_flight, &waiting),
            Some(2),
            FR,
        );
        assert!(reasons_of(&going).is_empty(), "{going:?}");
        let landed = notes(
            Some(seen(&in_flight, &waiting)),
            seen(&settled, &healthy),
            Some(2),
            FR,
        );
        assert!(reasons_of(&landed).is_empty(), "{landed:?}");
    }

    #[test]
    fn a_new_generation_becoming_healthy_is_not_healthy_again() {
        let lines = [line("east", PlacementState::Synced)];
        let seen = |conditions| Seen {
            lines: &lines,
            conditions,
        };
        // Applied at 10; its pods were not ready from 10 (or before) and are at 20.
        let starting = [
            condition_at("Applied", "True", 1, "", 10),
            condition_at("Available", "False", 1, "web: 0 of 3 ready", 10),
        ];
        let ready = [
            condition_at("Applied", "True", 1, "", 10),
            condition_at("Available", "True", 1, "", 20),
        ];
        let got = notes(Some(seen(&starting)), seen(&ready), Some(1), FR);
        assert!(reasons_of(&got).is_empty(), "{got:?}");
        // Trouble that began after the apply, over: healthy again.
        let troubled = [
            condition_at("Applied", "True", 1, "", 10),
            condition_at("Available", "False", 1, "web: 2 of 3 ready", 30),
        ];
        let got = notes(Some(seen(&troubled)), seen(&ready), Some(1), FR);
        assert_eq!(reasons_of(&got), [("Healthy", false)]);
    }
}
