//! The agent's view of its Kafka's topics: the Kafka observer
//! ([`kafka::observe`](crate::enforce::kafka::observe)) describes every assigned topic in
//! one Metadata and one DescribeConfigs request ([`look`]) — every resync interval, right
//! after applies, and as soon as the connection or the list of topics changes — and keeps
//! what it saw where the enforcer's judge reads it ([`Observations`]), telling the engine
//! which topics changed through the same [`WatchEvent`](crate::enforce::WatchEvent)s a
//! Kubernetes watch sends.
//!
//! Kafka has no watch for topic metadata or configs, so out-of-band drift (a managed key
//! changed, the topic deleted) is seen at the next resync at the latest. A failed look
//! (unreachable, authentication refused) marks every topic `Unavailable` with the reason
//! and is retried with backoff, bounded by the resync interval.

use std::collections::BTreeMap;
use std::time::Instant;

use accord_kafka::{Admin, KafkaError};
use tracing::debug;

use super::Topics;
use super::judge::{TopicSeen, topic_settings};
pub use crate::enforce::kafka::errors::failure_message;
use crate::enforce::kafka::observe;
pub use crate::enforce::kafka::observe::{Look, lock};
use crate::metrics::Metrics;

/// The resource name of Kafka topics in watch events.
pub const TOPICS: &str = "kafkatopics";

/// What the observer last saw of the topics.
pub type Observations = observe::Observations<Topics>;

/// [`Observations`] shared between the observer, the applier, the probe and the enforcer.
pub type Shared = observe::Shared<Topics>;

/// Describes `topics`: one Metadata request, then one DescribeConfigs for those that exist,
/// asking only for the config keys in `keys` (a topic without keys is not asked about).
pub async fn look(
    admin: &Admin,
    topics: &[String],
    keys: &BTreeMap<String, Vec<String>>,
    metrics: &Metrics,
) -> Result<BTreeMap<String, TopicSeen>, KafkaError> {
    metrics.kafka_request("metadata");
    let started = Instant::now();
    let described = admin.describe_topics(topics).await?;
    let metadata = started.elapsed();
    let present: BTreeMap<String, Vec<String>> = described
        .keys()
        .map(|name| (name.clone(), keys.get(name).cloned().unwrap_or_default()))
        .collect();
    if present.values().any(|keys| !keys.is_empty()) {
        metrics.kafka_request("describe_configs");
    }
    let mut configs = admin.describe_config_keys(&present).await?;
    debug!(
        topics = topics.len(),
        present = present.len(),
        metadata_ms = metadata.as_millis(),
        configs_ms = (started.elapsed() - metadata).as_millis(),
        "described the Kafka topics"
    );
    Ok(described
        .into_iter()
        .filter_map(|(name, d)| {
            let configs = match configs.remove(&name) {
                Some(Ok(entries)) => Ok(topic_settings(&entries)),
                // Deleted between the two requests.
                Some(Err(e)) if e.is_unknown_topic() => return None,
                Some(Err(e)) => Err(e.to_string()),
                None => Err("Kafka described no configs for the topic".to_owned()),
            };
            let seen = TopicSeen::Present {
                partitions: d.partitions,
                replication_factor: d.replication_factor,
                configs,
            };
            Some((name, seen))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enforce::WatchEvent;
    use crate::enforce::kafka::looks::SETTLING_LOOKS;
    use crate::enforce::kafka::observe::testing::{changed, looks_until_told, names};
    use crate::enforce::kafka::probe::Probe;
    use crate::enforce::kafka_topic::judge::Plan;

    fn present(partitions: i32) -> TopicSeen {
        TopicSeen::Present {
            partitions,
            replication_factor: 1,
            configs: Ok(BTreeMap::new()),
        }
    }

    #[test]
    fn the_first_look_reports_every_topic_and_absent_ones_as_absent() {
        let mut o = Observations::default();
        let topics = names(&["a", "b"]);
        let events = o.record(
            0,
            &topics,
            Ok(BTreeMap::from([("a".to_owned(), present(3))])),
            BTreeMap::new(),
        );
        assert!(matches!(events.as_slice(), [WatchEvent::Synced { .. }]));
        assert!(o.looked());
        assert_eq!(o.item("a").unwrap().seen, present(3));
        assert_eq!(o.item("b").unwrap().seen, TopicSeen::Absent);
    }

    #[test]
    fn later_looks_report_only_changed_topics_with_new_versions() {
        let mut o = Observations::default();
        let topics = names(&["a", "b"]);
        let seen = BTreeMap::from([("a".to_owned(), present(3)), ("b".to_owned(), present(1))]);
        o.record(0, &topics, Ok(seen.clone()), BTreeMap::new());
        let (va, vb) = (o.item("a").unwrap().version, o.item("b").unwrap().version);
        let mut next = seen.clone();
        next.insert("b".to_owned(), present(2));
        let events = o.record(0, &topics, Ok(next), BTreeMap::new());
        assert_eq!(changed(&events), vec!["b"]);
        assert_eq!(o.item("a").unwrap().version, va);
        assert_ne!(o.item("b").unwrap().version, vb);
        // Nothing changed: nothing to tell.
        let mut same = seen;
        same.insert("b".to_owned(), present(2));
        assert!(o.record(0, &topics, Ok(same), BTreeMap::new()).is_empty());
    }

    fn create() -> Plan {
        Plan::Create(accord_kafka::NewTopic {
            name: "a".into(),
            partitions: 3,
            replication_factor: 1,
            config: BTreeMap::new(),
        })
    }

    #[test]
    fn an_applied_topic_keeps_its_version_until_kafka_shows_the_change_then_is_reported() {
        let mut o = Observations::default();
        let topics = names(&["a"]);
        o.record(0, &topics, Ok(BTreeMap::new()), BTreeMap::new());
        let before = o.item("a").unwrap().version;
        o.applied("a".into(), create());
        assert!(o.settling());
        // Kafka's metadata does not list the new topic yet.
        let applied = o.begin();
        assert!(o.begin().is_empty(), "taken once");
        let events = o.record(0, &topics, Ok(BTreeMap::new()), applied);
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(o.item("a").unwrap().version, before);
        assert!(o.settling(), "looks again soon");
        // Now it does.
        let applied = o.begin();
        let seen = BTreeMap::from([("a".to_owned(), present(3))]);
        let events = o.record(0, &topics, Ok(seen.clone()), applied);
        assert_eq!(changed(&events), vec!["a"]);
        assert_ne!(o.item("a").unwrap().version, before);
        assert!(!o.settling());
        // A plan whose effect is already there is reported by the next look, unchanged.
        let before = o.item("a").unwrap().version;
        o.applied("a".into(), create());
        let applied = o.begin();
        assert_eq!(changed(&o.record(0, &topics, Ok(seen), applied)), vec!["a"]);
        assert_ne!(o.item("a").unwrap().version, before);
    }

    #[test]
    fn a_look_at_added_topics_reports_them_and_forgets_topics_no_longer_assigned() {
        let mut o = Observations::default();
        let topics = names(&["a", "b"]);
        o.record(
            0,
            &topics,
            Ok(BTreeMap::from([("a".to_owned(), present(1))])),
            BTreeMap::new(),
        );
        let va = o.item("a").unwrap().version;
        // "c" is assigned and "b" is not any more: the look covers only "c".
        let topics = names(&["a", "c"]);
        let look = Look::Added(names(&["c"]));
        assert_eq!(
            look.covers(&topics, &BTreeMap::<String, ()>::new()),
            names(&["c"])
        );
        let events = o.record_look(0, &topics, look, Ok(BTreeMap::new()), BTreeMap::new());
        assert_eq!(changed(&events), vec!["c"]);
        assert_eq!(o.item("c").unwrap().seen, TopicSeen::Absent);
        assert_eq!(o.item("a").unwrap().version, va, "a was not looked at");
        assert!(o.item("b").is_none(), "b is no longer assigned");
        // A topic forgotten (its spec names other keys now) waits for the next look.
        o.forget("a");
        assert!(o.item("a").is_none());
        // Added topics and applied ones are looked at together, each once.
        o.applied("c".into(), create());
        let applied = o.begin();
        assert_eq!(
            Look::Added(names(&["a", "c"])).covers(&topics, &applied),
            names(&["a", "c"])
        );
    }

    #[test]
    fn a_look_at_the_applied_topics_reports_them_and_leaves_every_other_topic_as_it_was() {
        let mut o = Observations::default();
        let topics = names(&["a", "b", "c"]);
        let seen = BTreeMap::from([("b".to_owned(), present(1)), ("c".to_owned(), present(1))]);
        o.record(0, &topics, Ok(seen), BTreeMap::new());
        assert!(!o.wants_every_item(), "a look succeeded");
        let (vb, vc) = (o.item("b").unwrap().version, o.item("c").unwrap().version);
        o.applied("a".into(), create());
        // The look covered only "a": "b" and "c", missing from its answer, are not absent.
        let applied = o.begin();
        let only_a = BTreeMap::from([("a".to_owned(), present(3))]);
        let events = o.record_look(0, &topics, Look::Applied, Ok(only_a), applied);
        assert_eq!(changed(&events), vec!["a"]);
        assert_eq!(o.item("a").unwrap().seen, present(3));
        assert_eq!(o.item("b").unwrap().seen, present(1));
        assert_eq!(
            (o.item("b").unwrap().version, o.item("c").unwrap().version),
            (vb, vc)
        );
        // Not showing yet: it keeps settling, like after a full look.
        o.applied("a".into(), create());
        let applied = o.begin();
        let events = o.record_look(0, &topics, Look::Applied, Ok(BTreeMap::new()), applied);
        assert!(events.is_empty(), "{events:?}");
        assert!(o.settling());
    }

    #[test]
    fn a_failed_look_or_kafka_answering_again_asks_for_a_look_at_every_topic() {
        let mut o = Observations::default();
        let topics = names(&["a"]);
        assert!(o.wants_every_item(), "nothing looked at yet");
        o.record(0, &topics, Ok(BTreeMap::new()), BTreeMap::new());
        assert!(!o.wants_every_item());
        o.record(
            0,
            &topics,
            Err("Kafka unreachable: x".into()),
            BTreeMap::new(),
        );
        assert!(o.wants_every_item(), "the last look failed");
        o.record(0, &topics, Ok(BTreeMap::new()), BTreeMap::new());
        o.probed(0, Err("Kafka unreachable: x".into()));
        assert!(!o.wants_every_item(), "still failing: nothing new to see");
        o.probed(0, Ok(()));
        assert!(
            o.wants_every_item(),
            "answers again: what was seen may be stale"
        );
        assert!(!o.wants_every_item(), "asked once");
    }

    #[test]
    fn an_applied_change_that_never_shows_is_judged_again_after_a_bounded_number_of_looks() {
        let mut o = Observations::default();
        let topics = names(&["a"]);
        o.record(0, &topics, Ok(BTreeMap::new()), BTreeMap::new());
        let (looks, events) = looks_until_told(&mut o, &topics, "a", create(), 100);
        assert_eq!(changed(&events), vec!["a"]);
        assert_eq!(looks, SETTLING_LOOKS);
    }

    #[test]
    fn a_create_that_keeps_not_showing_waits_twice_as_long_each_time_up_to_a_bound() {
        let mut o = Observations::default();
        let topics = names(&["a"]);
        o.record(0, &topics, Ok(BTreeMap::new()), BTreeMap::new());
        // Looks until the topic is judged again, the create sent again each time.
        let until_judged =
            |o: &mut Observations| looks_until_told(o, &topics, "a", create(), 1000).0;
        let bounds: Vec<u32> = (0..6).map(|_| until_judged(&mut o)).collect();
        assert_eq!(bounds, [25, 50, 100, 200, 200, 200]);
        // Shown at last: the next change waits the first bound again.
        o.applied("a".into(), create());
        let applied = o.begin();
        let seen = BTreeMap::from([("a".to_owned(), present(3))]);
        assert_eq!(changed(&o.record(0, &topics, Ok(seen), applied)), vec!["a"]);
        o.applied("a".into(), create());
        let applied = o.begin();
        o.record(0, &topics, Ok(BTreeMap::new()), applied);
        assert_eq!(o.settling_looks("a"), SETTLING_LOOKS);
    }

    #[test]
    fn a_topic_applied_to_during_a_look_waits_for_the_next_look() {
        let mut o = Observations::default();
        let topics = names(&["a"]);
        o.record(0, &topics, Ok(BTreeMap::new()), BTreeMap::new());
        let before = o.item("a").unwrap().version;
        let applied = o.begin();
        o.applied("a".into(), create());
        let seen = BTreeMap::from([("a".to_owned(), present(3))]);
        assert!(o.record(0, &topics, Ok(seen.clone()), applied).is_empty());
        assert_eq!(o.item("a").unwrap().version, before);
        let applied = o.begin();
        assert_eq!(changed(&o.record(0, &topics, Ok(seen), applied)), vec!["a"]);
    }

    #[test]
    fn a_failed_look_is_told_once_and_keeps_what_was_seen_and_what_was_applied() {
        let mut o = Observations::default();
        let topics = names(&["a"]);
        let seen = BTreeMap::from([("a".to_owned(), present(3))]);
        o.record(0, &topics, Ok(seen.clone()), BTreeMap::new());
        o.applied("a".into(), Plan::Delete);
        let applied = o.begin();
        let e = o.record(0, &topics, Err("Kafka unreachable: x".into()), applied);
        assert!(
            matches!(e.as_slice(), [WatchEvent::Failed { message, .. }] if message == "Kafka unreachable: x")
        );
        assert_eq!(o.error().map(String::as_str), Some("Kafka unreachable: x"));
        assert_eq!(o.item("a").unwrap().seen, present(3));
        let applied = o.begin();
        assert_eq!(applied.len(), 1, "the applied topic waits for a good look");
        assert!(
            o.record(0, &topics, Err("Kafka unreachable: x".into()), applied)
                .is_empty()
        );
        // Recovery: every topic is judged again.
        let before = o.item("a").unwrap().version;
        let applied = o.begin();
        let e = o.record(0, &topics, Ok(seen), applied);
        assert!(matches!(e.as_slice(), [WatchEvent::Synced { .. }]));
        assert_eq!(o.error(), None);
        assert_ne!(o.item("a").unwrap().version, before);
    }

    #[test]
    fn a_look_through_a_replaced_connection_is_dropped() {
        let mut o = Observations::default();
        o.reset(2);
        let topics = names(&["a"]);
        let seen = BTreeMap::from([("a".to_owned(), present(3))]);
        assert!(
            o.record(1, &topics, Ok(seen.clone()), BTreeMap::new())
                .is_empty()
        );
        assert!(o.item("a").is_none());
        assert!(!o.record(2, &topics, Ok(seen), BTreeMap::new()).is_empty());
    }

    #[test]
    fn topics_no_longer_assigned_are_forgotten() {
        let mut o = Observations::default();
        let seen = BTreeMap::from([("a".to_owned(), present(3)), ("b".to_owned(), present(3))]);
        o.record(0, &names(&["a", "b"]), Ok(seen.clone()), BTreeMap::new());
        o.record(0, &names(&["a"]), Ok(seen), BTreeMap::new());
        assert!(o.item("b").is_none());
        assert!(o.item("a").is_some());
    }

    #[test]
    fn only_a_failing_probe_or_its_end_changes_a_judgement() {
        let mut o = Observations::default();
        assert_eq!(o.probe(), &Probe::NotYet);
        assert!(
            !o.probed(0, Ok(())),
            "answering from the start changes nothing"
        );
        assert_eq!(o.probe(), &Probe::Answered);
        assert!(!o.probed(0, Ok(())));
        assert!(
            o.probed(0, Err("Kafka unreachable: x".into())),
            "stopped answering"
        );
        assert!(
            !o.probed(0, Err("Kafka unreachable: x".into())),
            "still the same"
        );
        assert!(
            o.probed(0, Err("Kafka unreachable: y".into())),
            "fails differently"
        );
        assert_eq!(o.probe(), &Probe::Failed("Kafka unreachable: y".into()));
        assert!(o.probed(0, Ok(())), "answers again");
        assert_eq!(o.probe(), &Probe::Answered);
        // A first probe that fails is a change too.
        let mut o = Observations::default();
        assert!(o.probed(0, Err("Kafka unreachable: x".into())));
    }

    #[test]
    fn a_probe_through_a_replaced_connection_is_dropped_and_a_new_one_starts_unprobed() {
        let mut o = Observations::default();
        assert!(o.probed(0, Err("Kafka unreachable: x".into())));
        o.reset(1);
        assert_eq!(o.probe(), &Probe::NotYet);
        assert!(!o.probed(0, Err("Kafka unreachable: old".into())));
        assert_eq!(o.probe(), &Probe::NotYet);
        assert!(o.probed(1, Err("Kafka unreachable: new".into())));
    }
}
