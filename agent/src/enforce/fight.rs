//! The fight guard: an agent that keeps restoring the same fields of the same object
//! against the same other writer stops, says so, and backs off.
//!
//! Restoring a field someone changed out of band once is drift repair. Restoring it again
//! within [`FightGuard::WINDOW`] means another writer (an autoscaler that is not an HPA, a
//! person, another controller — or a second Accord object that claims the same field)
//! sets it on purpose: fighting on would rewrite the object, and roll its pods, every few
//! seconds for ever. So the second repair within the window is not made: the placement
//! reports `Conflict` naming the other manager and the fields, and the next repair waits a
//! backoff (doubling from [`FightGuard::FIRST_HOLD`] to [`FightGuard::LONGEST_HOLD`]). The
//! engine consults it for every [`super::Action::Repair`]; enforcers say what a repair is
//! ([`super::Repair`]) and which manager now owns the fields ([`owner_of`]).

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use serde_json::Value;
use tokio::time::Instant;

use super::Repair;

/// What the guard says of a repair the engine is about to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Guard {
    /// Make it.
    Restore,
    /// Do not: the fields are held until `until`; `message` says why (for the report).
    Hold {
        /// No repair before this.
        until: Instant,
        /// The Conflict message.
        message: String,
    },
}

#[derive(Debug)]
struct Fight {
    /// When the last repair was made.
    last_repair: Option<Instant>,
    /// While held: until when, and the message.
    held: Option<(Instant, String)>,
    /// Holds so far (the backoff doubles with each).
    holds: u32,
    /// Last time anything happened (entries idle for long are forgotten).
    seen: Instant,
}

/// Repairs by (placed object, object, fields, other manager).
#[derive(Debug, Default)]
pub struct FightGuard {
    fights: HashMap<(String, Repair), Fight>,
}

impl FightGuard {
    /// A second repair within this window of the first is a fight.
    pub const WINDOW: Duration = Duration::from_secs(60);
    /// The first hold.
    pub const FIRST_HOLD: Duration = Duration::from_secs(60);
    /// The longest hold.
    pub const LONGEST_HOLD: Duration = Duration::from_secs(15 * 60);
    /// A fight quiet for this long is forgotten (the next hold starts short again).
    const FORGET_AFTER: Duration = Duration::from_secs(30 * 60);

    /// Whether `repair` (for `placed`) is held at `now`: the message to report.
    pub fn held(&self, placed: &str, repair: &Repair, now: Instant) -> Option<(Instant, String)> {
        self.fights
            .get(&(placed.to_owned(), repair.clone()))
            .and_then(|f| f.held.clone())
            .filter(|(until, _)| *until > now)
    }

    /// The engine is about to make `repair` for `placed` at `now`: make it, or hold.
    pub fn repair(&mut self, placed: &str, repair: &Repair, now: Instant) -> Guard {
        self.fights
            .retain(|_, f| now.saturating_duration_since(f.seen) < Self::FORGET_AFTER);
        let fight = self
            .fights
            .entry((placed.to_owned(), repair.clone()))
            .or_insert(Fight {
                last_repair: None,
                held: None,
                holds: 0,
                seen: now,
            });
        fight.seen = now;
        if let Some((until, message)) = fight.held.clone() {
            if until > now {
                return Guard::Hold { until, message };
            }
            // Held out: one repair again; a fight right after holds longer.
            fight.held = None;
            fight.last_repair = Some(now);
            return Guard::Restore;
        }
        let again = fight
            .last_repair
            .is_some_and(|at| now.saturating_duration_since(at) < Self::WINDOW);
        if !again {
            fight.last_repair = Some(now);
            return Guard::Restore;
        }
        let hold = Self::FIRST_HOLD
            .saturating_mul(1 << fight.holds.min(8))
            .min(Self::LONGEST_HOLD);
        fight.holds += 1;
        let message = format!(
            "{} of {} changed again by {} within {} s of Accord restoring it; Accord stops \
             restoring it for {} s rather than fight another writer (make one of the two the \
             owner: leave the field out of one of them)",
            repair.fields.join(", "),
            repair.object,
            repair.by,
            Self::WINDOW.as_secs(),
            hold.as_secs(),
        );
        let until = now + hold;
        fight.held = Some((until, message.clone()));
        Guard::Hold { until, message }
    }
}

/// Renders a managedFields path (`["f:spec", "f:replicas"]`) as `spec.replicas`.
pub fn render(path: &[String]) -> String {
    let mut out = String::new();
    for part in path {
        if let Some(field) = part.strip_prefix("f:") {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(field);
        } else if let Some(key) = part.strip_prefix("k:").or(part.strip_prefix("v:")) {
            out.push('[');
            out.push_str(key);
            out.push(']');
        } else if part != "." {
            out.push_str(part);
        }
    }
    out
}

/// The leaf paths of `owned` (a managedFields `fieldsV1` tree) that `now` lacks.
pub fn lost_fields(owned: &Value, now: Option<&Value>) -> Vec<Vec<String>> {
    let mut lost = Vec::new();
    walk(owned, now, &mut Vec::new(), &mut lost);
    lost
}

fn walk(owned: &Value, now: Option<&Value>, path: &mut Vec<String>, lost: &mut Vec<Vec<String>>) {
    let Some(children) = owned.as_object().filter(|c| !c.is_empty()) else {
        if now.is_none() {
            lost.push(path.clone());
        }
        return;
    };
    for (key, child) in children {
        if key == "." {
            continue;
        }
        path.push(key.clone());
        walk(child, now.and_then(|n| n.get(key)), path, lost);
        path.pop();
    }
}

/// The field manager other than `except` whose entry owns `path`, if any.
pub fn owner_of(
    entries: Option<&[ManagedFieldsEntry]>,
    path: &[String],
    except: &str,
) -> Option<String> {
    entries?
        .iter()
        .filter(|e| e.manager.as_deref() != Some(except))
        .find(|e| {
            e.fields_v1
                .as_ref()
                .is_some_and(|f| path.iter().try_fold(&f.0, |v, key| v.get(key)).is_some())
        })
        .and_then(|e| e.manager.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
    use serde_json::json;

    fn repair(by: &str) -> Repair {
        Repair {
            object: "Deployment prod/frontend".into(),
            fields: vec!["spec.replicas".into()],
            by: by.into(),
        }
    }

    #[test]
    fn the_second_repair_within_a_minute_is_held_and_the_holds_double() {
        let mut guard = FightGuard::default();
        let t0 = Instant::now();
        let keda = repair("keda");
        assert_eq!(guard.repair("p", &keda, t0), Guard::Restore);
        // A repair a minute later is drift again, not a fight.
        let t1 = t0 + FightGuard::WINDOW;
        assert_eq!(guard.repair("p", &keda, t1), Guard::Restore);
        let t2 = t1 + Duration::from_secs(3);
        let Guard::Hold { until, message } = guard.repair("p", &keda, t2) else {
            panic!("the second repair within the window must be held");
        };
        assert_eq!(until, t2 + FightGuard::FIRST_HOLD);
        assert!(message.contains("spec.replicas"), "{message}");
        assert!(message.contains("keda"), "{message}");
        assert!(message.contains("Deployment prod/frontend"), "{message}");
        assert_eq!(guard.held("p", &keda, t2).map(|h| h.0), Some(until));
        // Meanwhile: held, whatever is asked.
        assert!(matches!(
            guard.repair("p", &keda, t2 + Duration::from_secs(30)),
            Guard::Hold { .. }
        ));
        // Another manager, placed object or field is another fight.
        assert_eq!(guard.repair("p", &repair("kubectl"), t2), Guard::Restore);
        assert_eq!(guard.repair("q", &keda, t2), Guard::Restore);
        // Held out: one repair; fought again at once: held twice as long.
        assert_eq!(guard.repair("p", &keda, until), Guard::Restore);
        let t3 = until + Duration::from_secs(2);
        let Guard::Hold { until: u2, .. } = guard.repair("p", &keda, t3) else {
            panic!("a fight right after a hold is held again");
        };
        assert_eq!(u2, t3 + 2 * FightGuard::FIRST_HOLD);
        assert_eq!(guard.held("p", &keda, u2), None);
    }

    #[test]
    fn holds_stop_growing_at_the_longest() {
        let mut guard = FightGuard::default();
        let mut now = Instant::now();
        let r = repair("keda");
        let mut last = Duration::ZERO;
        for _ in 0..12 {
            assert_eq!(guard.repair("p", &r, now), Guard::Restore);
            now += Duration::from_secs(1);
            let Guard::Hold { until, .. } = guard.repair("p", &r, now) else {
                panic!("held");
            };
            last = until - now;
            now = until;
        }
        assert_eq!(last, FightGuard::LONGEST_HOLD);
    }

    #[test]
    fn lost_fields_and_their_new_owner() {
        let recorded = json!({"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}}}}}}});
        let now = json!({"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}}}}}}});
        let lost = lost_fields(&recorded, Some(&now));
        assert_eq!(
            lost,
            vec![vec!["f:spec".to_owned(), "f:replicas".to_owned()]]
        );
        assert_eq!(render(&lost[0]), "spec.replicas");
        assert_eq!(
            render(&[
                "f:spec".into(),
                "f:containers".into(),
                "k:{\"name\":\"web\"}".into(),
                "f:image".into()
            ]),
            "spec.containers[{\"name\":\"web\"}].image"
        );
        assert_eq!(
            lost_fields(&recorded, Some(&recorded)),
            Vec::<Vec<String>>::new()
        );
        let entries = vec![
            ManagedFieldsEntry {
                manager: Some("accord".into()),
                fields_v1: Some(FieldsV1(now)),
                ..ManagedFieldsEntry::default()
            },
            ManagedFieldsEntry {
                manager: Some("accord-agent".into()),
                fields_v1: Some(FieldsV1(json!({"f:spec": {"f:replicas": {}}}))),
                ..ManagedFieldsEntry::default()
            },
        ];
        assert_eq!(
            owner_of(Some(&entries), &lost[0], "accord").as_deref(),
            Some("accord-agent")
        );
        assert_eq!(owner_of(Some(&entries), &lost[0], "accord-agent"), None);
    }
}
