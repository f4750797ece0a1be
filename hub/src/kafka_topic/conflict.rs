//! Which FederatedKafkaTopic owns a topic name in a cluster when several name it: the
//! oldest (by `creationTimestamp`, then `<namespace>/<name>`) keeps it; every newer one
//! gets `Conflict` there and nothing is sent for it. When the owner goes, the next oldest
//! takes over at its next reconcile.

use std::collections::BTreeMap;

/// One FederatedKafkaTopic's claim on a topic name in its selected clusters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// `<namespace>/<name>` of the object.
    pub object: String,
    /// `metadata.creationTimestamp` in Unix milliseconds (`None`: not stored yet, which
    /// orders after every stored object).
    pub created_unix_millis: Option<i64>,
    /// The topic name in Kafka.
    pub topic_name: String,
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

/// The clusters where `claim` loses its topic name to an older claim among `others`, with
/// the owner's `<namespace>/<name>`. `others` may include `claim` itself (ignored).
pub fn conflicts(claim: &Claim, others: &[Claim]) -> BTreeMap<String, String> {
    let mut lost = BTreeMap::new();
    for cluster in &claim.clusters {
        let owner = others
            .iter()
            .filter(|o| o.object != claim.object && o.topic_name == claim.topic_name)
            .filter(|o| o.clusters.contains(cluster))
            .filter(|o| o.seniority() < claim.seniority())
            .min_by(|a, b| a.seniority().cmp(&b.seniority()));
        if let Some(owner) = owner {
            lost.insert(cluster.clone(), owner.object.clone());
        }
    }
    lost
}

/// What a conflicted placement says.
pub fn message(topic_name: &str, owner: &str) -> String {
    format!(
        "Conflict: topic {topic_name} in this cluster belongs to the older FederatedKafkaTopic \
         {owner}; nothing is sent for this one"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(object: &str, created: i64, topic: &str, clusters: &[&str]) -> Claim {
        Claim {
            object: object.into(),
            created_unix_millis: Some(created),
            topic_name: topic.into(),
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
    fn the_message_names_the_topic_and_the_owner() {
        let m = message("events", "team-a/events");
        assert!(m.starts_with("Conflict: topic events"), "{m}");
        assert!(m.contains("team-a/events"), "{m}");
    }
}
