//! Which object owns a name in a cluster when several of one kind claim it (a Kafka topic
//! name, a Kafka user name): the oldest (by `creationTimestamp`, then
//! `<namespace>/<name>`) keeps it; every newer one gets `Conflict` there and nothing is
//! sent for it. When the owner goes, the next oldest takes over at its next reconcile.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;

use accord_common::distribution::AssignmentSpec;

use super::select::{SelectedCluster, unknown_cluster};
use super::{Hold, ShareRecord};

/// One object's claim on a name in its selected clusters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// `<namespace>/<name>` of the object.
    pub object: String,
    /// `metadata.creationTimestamp` in Unix milliseconds (`None`: not stored yet, which
    /// orders after every stored object).
    pub created_unix_millis: Option<i64>,
    /// The name claimed (e.g. the topic name in Kafka).
    pub name: String,
    /// The clusters it selects.
    pub clusters: Vec<String>,
}

impl Claim {
    /// The order of seniority: older first, then by namespace and name.
    fn seniority(&self) -> (i64, &str) {
        (
            self.created_unix_millis.unwrap_or(i64::MAX),
            self.object.as_str(),
        )
    }
}

/// The clusters where `claim` loses its name to an older claim among `others`, with
/// the owner's `<namespace>/<name>`. `others` may include `claim` itself (ignored).
pub fn conflicts(claim: &Claim, others: &[Claim]) -> BTreeMap<String, String> {
    let mut lost = BTreeMap::new();
    for cluster in &claim.clusters {
        let owner = others
            .iter()
            .filter(|o| o.object != claim.object && o.name == claim.name)
            .filter(|o| o.clusters.contains(cluster))
            .filter(|o| o.seniority() < claim.seniority())
            .min_by(|a, b| a.seniority().cmp(&b.seniority()));
        if let Some(owner) = owner {
            lost.insert(cluster.clone(), owner.object.clone());
        }
    }
    lost
}

/// The names objects claim, as last seen: a decision or a change looks up the objects of
/// one name instead of reading every object's spec (with a thousand topics, that scan per
/// decision was most of the hub's CPU). `O` identifies an object (its reflector key).
pub struct Claimed<O> {
    /// Each object (`namespace/name`): its claimed name and generation.
    by_object: HashMap<String, (String, Option<i64>)>,
    /// Each claimed name: the objects claiming it.
    by_name: HashMap<String, HashSet<O>>,
}

impl<O> Default for Claimed<O> {
    fn default() -> Self {
        Self {
            by_object: HashMap::new(),
            by_name: HashMap::new(),
        }
    }
}

impl<O: Clone + Eq + Hash> Claimed<O> {
    /// Records `object`'s claim (`None`: it is gone); returns the claim it replaces.
    pub fn update(
        &mut self,
        object: O,
        key: &str,
        now: Option<(String, Option<i64>)>,
    ) -> Option<(String, Option<i64>)> {
        let before = match &now {
            Some(now) => self.by_object.insert(key.to_owned(), now.clone()),
            None => self.by_object.remove(key),
        };
        if let Some((name, _)) = &before
            && let Some(objects) = self.by_name.get_mut(name)
        {
            objects.remove(&object);
            if objects.is_empty() {
                self.by_name.remove(name);
            }
        }
        if let Some((name, _)) = now {
            self.by_name.entry(name).or_default().insert(object);
        }
        before
    }

    /// The objects claiming `name`.
    pub fn claiming(&self, name: &str) -> Vec<O> {
        self.by_name
            .get(name)
            .map(|objects| objects.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Records an object's watch event: its claim `now` (`gone`: it is no more;
    /// `releasing`: its deletion no longer holds the name); the other objects to decide
    /// again when the claim changed, ended or is being released (`None`: it did not).
    pub fn observe(
        &mut self,
        object: &O,
        key: &str,
        now: (String, Option<i64>),
        gone: bool,
        releasing: bool,
    ) -> Option<Vec<O>> {
        let before = self.update(object.clone(), key, (!gone).then(|| now.clone()));
        if !(gone || releasing || before.as_ref() != Some(&now)) {
            return None;
        }
        let mut others = self.concerned(&now.0, before.as_ref());
        others.retain(|o| o != object);
        Some(others)
    }

    /// The objects claiming `name` now and, when `before` (the claim an update replaced)
    /// named another, those claiming that: whom a change of one object's claim concerns.
    pub fn concerned(&self, name: &str, before: Option<&(String, Option<i64>)>) -> Vec<O> {
        let mut others = self.claiming(name);
        if let Some((old, _)) = before.filter(|b| b.0 != name) {
            others.extend(self.claiming(old));
        }
        others
    }
}

/// One share per selected cluster, in selection order, for a kind that sends every
/// cluster the same `assignment`: sent to every known cluster where the name is not an
/// older object's; nothing (and why: `conflict_message(owner)`) where it is (`conflicts`:
/// cluster → owner), nothing where there is no ManagedCluster. Also the conflicts among
/// the selected clusters, for the decision data.
pub fn uniform_shares(
    selected: &[SelectedCluster],
    assignment: &AssignmentSpec,
    conflicts: &BTreeMap<String, String>,
    conflict_message: impl Fn(&str) -> String,
) -> (Vec<ShareRecord>, BTreeMap<String, String>) {
    let shares = selected
        .iter()
        .map(|c| {
            let held = match conflicts.get(&c.name) {
                Some(owner) => Some((Hold::Conflict, conflict_message(owner))),
                None if !c.known => Some((Hold::NotRegistered, unknown_cluster(&c.name))),
                None => None,
            };
            ShareRecord {
                since: None,
                cluster: c.name.clone(),
                assignment: held.is_none().then(|| assignment.clone()),
                hold: held.as_ref().map(|(hold, _)| *hold),
                held_reason: held.map(|(_, reason)| reason),
            }
        })
        .collect();
    let conflicts = conflicts
        .iter()
        .filter(|(c, _)| selected.iter().any(|s| &s.name == *c))
        .map(|(c, o)| (c.clone(), o.clone()))
        .collect();
    (shares, conflicts)
}

/// Shares that send nothing, each saying `reason`: what an object that may not (or cannot
/// yet) be propagated and was never propagated shows.
pub fn held(selected: &[SelectedCluster], reason: &str) -> Vec<ShareRecord> {
    selected
        .iter()
        .map(|c| ShareRecord {
            since: None,
            cluster: c.name.clone(),
            assignment: None,
            held_reason: Some(reason.to_owned()),
            hold: Some(Hold::Refused),
        })
        .collect()
}

/// What a conflicted placement says: `what` (e.g. `topic events`) belongs to the older
/// `kind` object `owner`.
pub fn message(what: &str, kind: &str, owner: &str) -> String {
    format!(
        "Conflict: {what} in this cluster belongs to the older {kind} {owner}; nothing is \
         sent for this one"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(object: &str, created: i64, topic: &str, clusters: &[&str]) -> Claim {
        Claim {
            object: object.into(),
            created_unix_millis: Some(created),
            name: topic.into(),
            clusters: clusters.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    #[test]
    fn the_older_topic_keeps_the_name_and_the_newer_loses_it_only_where_both_are() {
        let old = claim("team-a/events", 100, "events", &["a", "b"]);
        let new = claim("team-b/events", 200, "events", &["b", "c"]);
        let all = [old.clone(), new.clone()];
        assert!(conflicts(&old, &all).is_empty());
        assert_eq!(
            conflicts(&new, &all),
            BTreeMap::from([("b".to_owned(), "team-a/events".to_owned())])
        );
    }

    #[test]
    fn equal_ages_are_decided_by_namespace_and_name() {
        let x = claim("a/x", 100, "t", &["c"]);
        let y = claim("b/x", 100, "t", &["c"]);
        let all = [y.clone(), x.clone()];
        assert!(conflicts(&x, &all).is_empty());
        assert_eq!(conflicts(&y, &all)["c"], "a/x");
    }

    #[test]
    fn different_topic_names_never_conflict() {
        let x = claim("ns/x", 100, "one", &["c"]);
        let y = claim("ns/y", 200, "two", &["c"]);
        assert!(conflicts(&y, &[x, y.clone()]).is_empty());
    }

    #[test]
    fn the_oldest_of_several_owners_is_named_and_the_newer_takes_over_when_it_goes() {
        let first = claim("ns/first", 100, "t", &["c"]);
        let second = claim("ns/second", 200, "t", &["c"]);
        let third = claim("ns/third", 300, "t", &["c"]);
        let all = [third.clone(), second.clone(), first.clone()];
        assert_eq!(conflicts(&third, &all)["c"], "ns/first");
        assert_eq!(conflicts(&second, &all)["c"], "ns/first");
        let without_first = [third.clone(), second.clone()];
        assert!(conflicts(&second, &without_first).is_empty());
        assert_eq!(conflicts(&third, &without_first)["c"], "ns/second");
    }

    #[test]
    fn an_object_not_stored_yet_is_the_newest() {
        let stored = claim("ns/stored", 500, "t", &["c"]);
        let unsaved = Claim {
            created_unix_millis: None,
            ..claim("ns/a-unsaved", 0, "t", &["c"])
        };
        let all = [stored.clone(), unsaved.clone()];
        assert!(conflicts(&stored, &all).is_empty());
        assert_eq!(conflicts(&unsaved, &all)["c"], "ns/stored");
    }

    #[test]
    fn claims_are_looked_up_by_name_and_follow_renames_and_deletions() {
        let object = |name: &str| format!("ns/{name}");
        let mut claimed = Claimed::<String>::default();
        assert_eq!(
            claimed.update(object("a"), "ns/a", Some(("orders".into(), Some(1)))),
            None
        );
        claimed.update(object("b"), "ns/b", Some(("orders".into(), Some(1))));
        claimed.update(object("c"), "ns/c", Some(("payments".into(), Some(1))));
        let mut orders = claimed.claiming("orders");
        orders.sort();
        assert_eq!(orders, vec![object("a"), object("b")]);
        // "b" renames its claim: it leaves the old name's claimants.
        let before = claimed.update(object("b"), "ns/b", Some(("payments".into(), Some(2))));
        assert_eq!(before, Some(("orders".into(), Some(1))));
        assert_eq!(claimed.claiming("orders"), vec![object("a")]);
        assert_eq!(claimed.claiming("payments").len(), 2);
        assert_eq!(claimed.concerned("payments", before.as_ref()).len(), 3);
        // "a" is gone: nobody claims "orders" any more.
        claimed.update(object("a"), "ns/a", None);
        assert!(claimed.claiming("orders").is_empty());
        assert!(!claimed.by_name.contains_key("orders"));
    }

    #[test]
    fn the_message_names_the_topic_and_the_owner() {
        let m = message("topic events", "FederatedKafkaTopic", "team-a/events");
        assert!(m.starts_with("Conflict: topic events"), "{m}");
        assert!(m.contains("older FederatedKafkaTopic team-a/events"), "{m}");
    }
}
