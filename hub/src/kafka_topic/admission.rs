//! FederatedKafkaTopic admission (served by [`crate::webhook`]).
//!
//! The webhook's decision, pure: a [`TopicReview`] and a [`TopicSnapshot`] of what the caches
//! hold in, a [`Verdict`] out. No I/O, so every rule is tested without a cluster.
//!
//! - A CREATE, or an UPDATE that changes the spec, is checked against every
//!   KafkaTopicPolicy ([`policy::violations`]): `Deny` violations refuse it (reason
//!   [`DENY_REASON`]), `Audit` violations admit it with one warning each, an audit
//!   annotation and an Event.
//! - It is refused (reason [`ALREADY_MANAGED_REASON`]) when its topic name is already taken
//!   in one of its clusters by an older FederatedKafkaTopic (the one the controller lets
//!   keep it: creation time, then namespace/name). A new object is younger than every
//!   stored one.
//! - When both apply, the reason is [`DENY_REASON`] and the message has both parts: the
//!   policy has to be met whatever the topic is called, so it is the first thing to fix.
//! - An UPDATE that leaves the spec alone (labels, annotations, finalizers — the controller
//!   removing its finalizer) and any change to an object being deleted are always allowed,
//!   so a topic admitted before a policy existed can still be cleaned up.

use std::collections::{BTreeMap, BTreeSet};

use accord_crds::kafka_topic::{
    Enforcement, FederatedKafkaTopic, FederatedKafkaTopicSpec, KafkaTopicPolicy,
};
use kube::ResourceExt as _;

use crate::distribution::select::matches;
use crate::kafka_topic::policy::{self, Violation};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tracing::debug;

use crate::kafka::admission_cache::Caches;
use crate::webhook::review::{Operation, Refusal, Review, Verdict};
use crate::webhook::{Admission, Answer, EVENT_REASON, Webhook, decode_once_listed};
use crate::writes::{EventRecorder, EventType};

use crate::kafka::{AUDIT_ANNOTATION, DENY_REASON};

/// A review of a FederatedKafkaTopic.
pub type TopicReview = Review<FederatedKafkaTopic>;

/// `status.reason` of a refusal for a Kafka topic name an older FederatedKafkaTopic
/// already has in one of the same clusters (and no `Deny` policy broken).
pub const ALREADY_MANAGED_REASON: &str = "TOPIC_ALREADY_MANAGED";

/// HTTP-like code of a refusal.
const FORBIDDEN: u16 = 403;

/// What the caches hold that a decision needs.
#[derive(Clone, Debug, Default)]
pub struct TopicSnapshot {
    /// Every KafkaTopicPolicy.
    pub policies: Vec<KafkaTopicPolicy>,
    /// Labels of the topic's namespace (empty when the namespace is not cached yet).
    pub namespace_labels: BTreeMap<String, String>,
    /// The stored FederatedKafkaTopics with the same Kafka topic name (the reviewed object
    /// itself may be among them; it is skipped).
    pub same_name: Vec<FederatedKafkaTopic>,
    /// ManagedCluster labels by cluster name (to resolve cluster selectors).
    pub clusters: BTreeMap<String, BTreeMap<String, String>>,
}

/// What the webhook answers, and the Event to record for an audited topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicDecision {
    /// The answer.
    pub verdict: Verdict,
    /// A Warning Event `PolicyViolation` with this note is due on the topic (audited
    /// violations of an admitted, non-dry-run request).
    pub event: Option<String>,
}

/// One cluster in which the reviewed topic's name is already taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    /// The owner, `namespace/name`.
    pub owner: String,
    /// The cluster.
    pub cluster: String,
}

/// Decides one review.
pub fn decide_topic(review: &TopicReview, snapshot: &TopicSnapshot) -> TopicDecision {
    let allow = TopicDecision {
        verdict: Verdict::allow(),
        event: None,
    };
    let Some(topic) = &review.object else {
        return allow;
    };
    match &review.operation {
        Operation::Other(_) => return allow,
        Operation::Update
            if topic.metadata.deletion_timestamp.is_some()
                || review
                    .old
                    .as_ref()
                    .is_some_and(|old| old.spec == topic.spec) =>
        {
            return allow;
        }
        Operation::Create | Operation::Update => {}
    }

    let violations = policy::violations(topic, &snapshot.namespace_labels, &snapshot.policies);
    let denying = policy::denying(&violations);
    let audited: Vec<Violation> = violations
        .into_iter()
        .filter(|v| v.enforcement == Enforcement::Audit)
        .collect();
    let taken = taken(topic, &snapshot.same_name, &snapshot.clusters);

    let mut reasons = Vec::new();
    if !denying.is_empty() {
        reasons.push(policy::message(&denying));
    }
    if !taken.is_empty() {
        reasons.push(taken_message(topic.topic_name(), &taken));
    }
    if !reasons.is_empty() {
        let reason = if denying.is_empty() {
            ALREADY_MANAGED_REASON
        } else {
            DENY_REASON
        };
        return TopicDecision {
            verdict: Verdict {
                refusal: Some(Refusal {
                    code: FORBIDDEN,
                    reason: reason.to_owned(),
                    message: reasons.join("; "),
                }),
                ..Verdict::default()
            },
            event: None,
        };
    }
    if audited.is_empty() {
        return allow;
    }
    let message = policy::message(&audited);
    TopicDecision {
        verdict: Verdict {
            refusal: None,
            warnings: audited
                .iter()
                .map(|v| format!("{v} [Audit: admitted]"))
                .collect(),
            audit_annotations: [(AUDIT_ANNOTATION.to_owned(), message.clone())].into(),
        },
        event: (!review.dry_run).then_some(message),
    }
}

/// The clusters `spec` names, or those whose labels its selector matches. A selector the
/// hub cannot evaluate selects nothing (the controller reports it on the object).
pub fn clusters_of(
    spec: &FederatedKafkaTopicSpec,
    clusters: &BTreeMap<String, BTreeMap<String, String>>,
) -> BTreeSet<String> {
    if let Some(names) = &spec.placement.clusters {
        return names.iter().cloned().collect();
    }
    let Some(selector) = &spec.placement.cluster_selector else {
        return BTreeSet::new();
    };
    clusters
        .iter()
        .filter(|(_, labels)| {
            matches(selector, labels, "spec.placement.clusterSelector").unwrap_or(false)
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// Whether `other` keeps a contested topic name against `topic`: the older one does
/// (creation time, then namespace/name). An object not created yet is the youngest.
fn owns_against(other: &FederatedKafkaTopic, topic: &FederatedKafkaTopic) -> bool {
    let key = |t: &FederatedKafkaTopic| {
        (
            t.metadata.creation_timestamp.as_ref().map(|c| c.0),
            t.namespace().unwrap_or_default(),
            t.name_any(),
        )
    };
    match (
        &topic.metadata.creation_timestamp,
        &other.metadata.creation_timestamp,
    ) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(_), Some(_)) => key(other) < key(topic),
    }
}

/// The clusters in which an older FederatedKafkaTopic among `same_name` already has
/// `topic`'s Kafka topic name, by owner then cluster.
pub fn taken(
    topic: &FederatedKafkaTopic,
    same_name: &[FederatedKafkaTopic],
    clusters: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<Taken> {
    let mine = clusters_of(&topic.spec, clusters);
    let me = (topic.namespace(), topic.name_any());
    let mut found = Vec::new();
    for other in same_name {
        if (other.namespace(), other.name_any()) == me
            || other.topic_name() != topic.topic_name()
            || !owns_against(other, topic)
        {
            continue;
        }
        let owner = format!(
            "{}/{}",
            other.namespace().unwrap_or_default(),
            other.name_any()
        );
        for cluster in clusters_of(&other.spec, clusters).intersection(&mine) {
            found.push(Taken {
                owner: owner.clone(),
                cluster: cluster.clone(),
            });
        }
    }
    found.sort_by(|a, b| (&a.owner, &a.cluster).cmp(&(&b.owner, &b.cluster)));
    found
}

/// E.g. `Kafka topic "events" is already managed by FederatedKafkaTopic team-a/events in
/// cluster east`.
fn taken_message(topic_name: &str, taken: &[Taken]) -> String {
    let mut by_owner: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for t in taken {
        by_owner.entry(&t.owner).or_default().push(&t.cluster);
    }
    let parts: Vec<String> = by_owner
        .into_iter()
        .map(|(owner, clusters)| {
            let noun = if clusters.len() == 1 {
                "cluster"
            } else {
                "clusters"
            };
            format!(
                "FederatedKafkaTopic {owner} in {noun} {}",
                crate::distribution::reported::named(&clusters, ", ")
            )
        })
        .collect();
    format!(
        "Kafka topic {topic_name:?} is already managed by {}",
        parts.join(" and by ")
    )
}

/// The FederatedKafkaTopic webhook.
pub const WEBHOOK: Webhook = Webhook {
    name: "federatedkafkatopics.accord.io",
    path: "/validate-federatedkafkatopics",
    resource: "federatedkafkatopics",
};

/// How long after admitting an audited topic its Event waits for the topic to be stored.
const EVENT_WAIT: Duration = Duration::from_secs(30);

/// The FederatedKafkaTopic admission: decided over a snapshot of the webhook's caches; an
/// audited topic gets a Warning Event once it is stored.
pub struct TopicAdmission {
    caches: Caches,
    recorder: Arc<EventRecorder>,
}

impl TopicAdmission {
    /// The admission reading `caches`, recording Events through `recorder`.
    pub fn new(caches: Caches, recorder: Arc<EventRecorder>) -> Self {
        Self { caches, recorder }
    }
}

impl Admission for TopicAdmission {
    fn webhook(&self) -> Webhook {
        WEBHOOK
    }

    fn review(&self, body: axum::body::Bytes) -> BoxFuture<'_, Answer> {
        Box::pin(async move {
            let review = match decode_once_listed::<FederatedKafkaTopic>(
                &body,
                self.caches.wait_until_ready(),
            )
            .await
            {
                Ok(review) => review,
                Err(answer) => return answer,
            };
            let snapshot = match (&review.operation, &review.object) {
                (Operation::Create | Operation::Update, Some(topic)) => {
                    snapshot(&self.caches, topic)
                }
                _ => TopicSnapshot::default(),
            };
            let decision = decide_topic(&review, &snapshot);
            if let (Some(note), Some(topic)) = (decision.event, &review.object) {
                // Best effort and off the request path: the topic is not stored until
                // admission ends, so the Event waits for the reflector to see it.
                let caches = self.caches.clone();
                let recorder = self.recorder.clone();
                let namespace = topic.namespace().unwrap_or_default();
                let name = topic.name_any();
                tokio::spawn(async move {
                    record_violation(&caches, &recorder, &namespace, &name, note).await;
                });
            }
            Answer::Decided {
                verdict: decision.verdict,
                uid: review.uid,
            }
        })
    }
}

/// What deciding a review of `topic` needs from `caches`: every policy that decodes, the
/// labels of the topic's namespace, the stored topics with the same Kafka topic name, and
/// the ManagedClusters' labels (only when a selector has to be resolved).
fn snapshot(caches: &Caches, topic: &FederatedKafkaTopic) -> TopicSnapshot {
    let same_name = caches.topics_named(topic.topic_name());
    let selectors = topic.spec.placement.cluster_selector.is_some()
        || same_name
            .iter()
            .any(|t| t.spec.placement.cluster_selector.is_some());
    let clusters = if selectors && !same_name.is_empty() {
        caches.cluster_labels()
    } else {
        BTreeMap::new()
    };
    TopicSnapshot {
        policies: caches.policies(),
        namespace_labels: caches.namespace_labels(topic.metadata.namespace.as_deref()),
        same_name,
        clusters,
    }
}

/// Records the Warning Event `PolicyViolation` on the admitted topic once it is stored.
async fn record_violation(
    caches: &Caches,
    recorder: &EventRecorder,
    namespace: &str,
    name: &str,
    note: String,
) {
    let Some(stored) = caches.wait_for_topic(namespace, name, EVENT_WAIT).await else {
        debug!(namespace, name, "audited topic never appeared; no Event");
        return;
    };
    let reference = kube::Resource::object_ref(stored.as_ref(), &());
    recorder.publish(&reference, EventType::Warning, EVENT_REASON, "Admit", note);
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_crds::kafka_topic::KafkaTopicPolicySpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

    fn topic(
        ns: &str,
        name: &str,
        partitions: i32,
        rf: i32,
        clusters: &[&str],
    ) -> FederatedKafkaTopic {
        let mut t = FederatedKafkaTopic::new(
            name,
            FederatedKafkaTopicSpec {
                rollout: None,
                topic_name: None,
                partitions,
                replication_factor: rf,
                config: BTreeMap::new(),
                placement: accord_crds::ClusterPlacement::clusters(clusters.iter().copied()),
                deletion_policy: None,
            },
        );
        t.metadata.namespace = Some(ns.to_owned());
        t
    }

    fn created(mut t: FederatedKafkaTopic, seconds: i64) -> FederatedKafkaTopic {
        t.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + seconds).unwrap(),
        ));
        t
    }

    fn by_selector(mut t: FederatedKafkaTopic, key: &str, value: &str) -> FederatedKafkaTopic {
        t.spec.placement.clusters = None;
        t.spec.placement.cluster_selector = Some(LabelSelector {
            match_labels: Some([(key.to_owned(), value.to_owned())].into()),
            ..Default::default()
        });
        t
    }

    fn create(topic: FederatedKafkaTopic) -> TopicReview {
        TopicReview {
            uid: "u".into(),
            operation: Operation::Create,
            dry_run: false,
            object: Some(topic),
            old: None,
        }
    }

    fn update(old: FederatedKafkaTopic, new: FederatedKafkaTopic) -> TopicReview {
        TopicReview {
            uid: "u".into(),
            operation: Operation::Update,
            dry_run: false,
            object: Some(new),
            old: Some(old),
        }
    }

    fn policy(name: &str, enforcement: Enforcement) -> KafkaTopicPolicy {
        KafkaTopicPolicy::new(
            name,
            KafkaTopicPolicySpec {
                min_partitions: Some(12),
                replication_factor: Some(3),
                enforcement: Some(enforcement),
                ..Default::default()
            },
        )
    }

    fn with_policies(policies: Vec<KafkaTopicPolicy>) -> TopicSnapshot {
        TopicSnapshot {
            policies,
            ..TopicSnapshot::default()
        }
    }

    fn refusal(d: &TopicDecision) -> &Refusal {
        d.verdict.refusal.as_ref().expect("refused")
    }

    #[test]
    fn a_deny_policy_refuses_a_small_topic_naming_both_rules() {
        let d = decide_topic(
            &create(topic("a", "events", 6, 1, &["east"])),
            &with_policies(vec![policy("strict", Enforcement::Deny)]),
        );
        let r = refusal(&d);
        assert_eq!(r.code, 403);
        assert_eq!(r.reason, "TOPIC_CREATION_POLICY_VIOLATION");
        assert!(
            r.message
                .contains("spec.partitions: must be at least 12 (is 6)"),
            "{}",
            r.message
        );
        assert!(
            r.message
                .contains("spec.replicationFactor: must be 3 (is 1)"),
            "{}",
            r.message
        );
        assert!(d.event.is_none());
        assert!(d.verdict.warnings.is_empty());
    }

    #[test]
    fn a_compliant_topic_is_allowed_without_warnings() {
        let d = decide_topic(
            &create(topic("a", "events", 12, 3, &["east"])),
            &with_policies(vec![policy("strict", Enforcement::Deny)]),
        );
        assert_eq!(d.verdict, Verdict::allow());
        assert!(d.event.is_none());
    }

    #[test]
    fn an_audit_policy_admits_with_one_warning_per_rule_an_annotation_and_an_event() {
        let d = decide_topic(
            &create(topic("a", "events", 6, 1, &["east"])),
            &with_policies(vec![policy("watch", Enforcement::Audit)]),
        );
        assert!(d.verdict.allowed());
        assert_eq!(d.verdict.warnings.len(), 2, "{:?}", d.verdict.warnings);
        assert!(d.verdict.warnings[0].contains("spec.partitions: must be at least 12 (is 6)"));
        assert!(d.verdict.warnings[1].contains("KafkaTopicPolicy watch"));
        let note = d.event.expect("an Event");
        assert!(
            note.starts_with("topic breaks 2 KafkaTopicPolicy rules"),
            "{note}"
        );
        assert_eq!(d.verdict.audit_annotations[AUDIT_ANNOTATION], note);
    }

    #[test]
    fn a_dry_run_records_no_event_but_still_warns() {
        let mut review = create(topic("a", "events", 6, 3, &["east"]));
        review.dry_run = true;
        let d = decide_topic(
            &review,
            &with_policies(vec![policy("watch", Enforcement::Audit)]),
        );
        assert!(d.verdict.allowed());
        assert_eq!(d.verdict.warnings.len(), 1);
        assert!(d.event.is_none());
    }

    #[test]
    fn deny_wins_over_audit_and_names_only_the_denying_rules() {
        let mut lenient = policy("lenient", Enforcement::Audit);
        lenient.spec.min_partitions = Some(100);
        let d = decide_topic(
            &create(topic("a", "events", 6, 3, &["east"])),
            &with_policies(vec![policy("strict", Enforcement::Deny), lenient]),
        );
        let r = refusal(&d);
        assert!(
            r.message.contains("KafkaTopicPolicy strict"),
            "{}",
            r.message
        );
        assert!(!r.message.contains("lenient"), "{}", r.message);
    }

    #[test]
    fn an_update_that_keeps_the_spec_is_allowed_even_when_it_breaks_a_policy() {
        let old = topic("a", "events", 6, 1, &["east"]);
        let mut new = old.clone();
        new.metadata.finalizers = Some(vec![]);
        let d = decide_topic(
            &update(old, new),
            &with_policies(vec![policy("strict", Enforcement::Deny)]),
        );
        assert!(d.verdict.allowed());
    }

    #[test]
    fn an_update_of_an_object_being_deleted_is_allowed() {
        let old = topic("a", "events", 6, 1, &["east"]);
        let mut new = topic("a", "events", 7, 1, &["east"]);
        new.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let d = decide_topic(
            &update(old, new),
            &with_policies(vec![policy("strict", Enforcement::Deny)]),
        );
        assert!(d.verdict.allowed());
    }

    #[test]
    fn an_update_that_changes_the_spec_is_checked() {
        let old = topic("a", "events", 12, 3, &["east"]);
        let new = topic("a", "events", 12, 1, &["east"]);
        let d = decide_topic(
            &update(old, new),
            &with_policies(vec![policy("strict", Enforcement::Deny)]),
        );
        assert!(refusal(&d).message.contains("spec.replicationFactor"));
    }

    #[test]
    fn other_operations_are_allowed_without_looking() {
        let review = TopicReview {
            uid: "u".into(),
            operation: Operation::Other("DELETE".into()),
            dry_run: false,
            object: None,
            old: None,
        };
        assert!(
            decide_topic(
                &review,
                &with_policies(vec![policy("s", Enforcement::Deny)])
            )
            .verdict
            .allowed()
        );
    }

    #[test]
    fn a_second_topic_with_the_same_name_in_the_same_cluster_is_refused_naming_the_owner() {
        let owner = created(topic("team-a", "events", 12, 3, &["east", "west"]), 0);
        let snapshot = TopicSnapshot {
            same_name: vec![owner],
            ..TopicSnapshot::default()
        };
        let d = decide_topic(
            &create(topic("team-b", "events", 12, 3, &["west", "north"])),
            &snapshot,
        );
        let r = refusal(&d);
        assert_eq!(r.code, 403);
        assert_eq!(r.reason, "TOPIC_ALREADY_MANAGED");
        assert_eq!(
            r.message,
            "Kafka topic \"events\" is already managed by FederatedKafkaTopic team-a/events in cluster west"
        );
    }

    #[test]
    fn the_same_name_in_other_clusters_is_fine() {
        let owner = created(topic("team-a", "events", 12, 3, &["east"]), 0);
        let snapshot = TopicSnapshot {
            same_name: vec![owner],
            ..TopicSnapshot::default()
        };
        assert!(
            decide_topic(
                &create(topic("team-b", "events", 12, 3, &["west"])),
                &snapshot
            )
            .verdict
            .allowed()
        );
    }

    #[test]
    fn selectors_that_resolve_to_a_common_cluster_collide() {
        let clusters: BTreeMap<String, BTreeMap<String, String>> = [
            (
                "east".to_owned(),
                [
                    ("region".to_owned(), "eu".to_owned()),
                    ("tier".to_owned(), "prod".to_owned()),
                ]
                .into(),
            ),
            (
                "west".to_owned(),
                [
                    ("region".to_owned(), "us".to_owned()),
                    ("tier".to_owned(), "prod".to_owned()),
                ]
                .into(),
            ),
        ]
        .into();
        let owner = created(
            by_selector(topic("team-a", "events", 12, 3, &[]), "region", "eu"),
            0,
        );
        let snapshot = TopicSnapshot {
            same_name: vec![owner.clone()],
            clusters: clusters.clone(),
            ..TopicSnapshot::default()
        };
        let newcomer = by_selector(topic("team-b", "events", 12, 3, &[]), "tier", "prod");
        let r = decide_topic(&create(newcomer), &snapshot);
        assert!(
            refusal(&r)
                .message
                .ends_with("team-a/events in cluster east"),
            "{r:?}"
        );
        // An explicit list against a selector, too.
        let listed = topic("team-c", "events", 12, 3, &["west"]);
        assert!(decide_topic(&create(listed), &snapshot).verdict.allowed());
        let listed = topic("team-c", "events", 12, 3, &["east"]);
        assert!(!decide_topic(&create(listed), &snapshot).verdict.allowed());
    }

    #[test]
    fn a_topic_name_set_in_the_spec_is_what_collides() {
        let mut owner = created(topic("team-a", "orders", 12, 3, &["east"]), 0);
        owner.spec.topic_name = Some("shared".into());
        let mut newcomer = topic("team-b", "other", 12, 3, &["east"]);
        newcomer.spec.topic_name = Some("shared".into());
        let snapshot = TopicSnapshot {
            same_name: vec![owner],
            ..TopicSnapshot::default()
        };
        let d = decide_topic(&create(newcomer), &snapshot);
        assert!(
            refusal(&d)
                .message
                .contains("\"shared\" is already managed by FederatedKafkaTopic team-a/orders")
        );
    }

    #[test]
    fn the_older_topic_may_still_change_its_spec_while_the_younger_may_not() {
        let older = created(topic("team-a", "events", 12, 3, &["east"]), 0);
        let younger = created(topic("team-b", "events", 12, 3, &["east"]), 10);
        let snapshot = TopicSnapshot {
            same_name: vec![older.clone(), younger.clone()],
            ..TopicSnapshot::default()
        };
        let mut raised = older.clone();
        raised.spec.partitions = 24;
        assert!(
            decide_topic(&update(older, raised), &snapshot)
                .verdict
                .allowed()
        );
        let mut raised = younger.clone();
        raised.spec.partitions = 24;
        let d = decide_topic(&update(younger, raised), &snapshot);
        assert!(refusal(&d).message.contains("team-a/events"));
    }

    #[test]
    fn an_update_does_not_collide_with_itself() {
        let me = created(topic("team-a", "events", 12, 3, &["east"]), 0);
        let snapshot = TopicSnapshot {
            same_name: vec![me.clone()],
            ..TopicSnapshot::default()
        };
        let mut raised = me.clone();
        raised.spec.partitions = 24;
        assert!(
            decide_topic(&update(me, raised), &snapshot)
                .verdict
                .allowed()
        );
    }

    #[test]
    fn ties_in_creation_time_go_to_the_first_namespace_and_name() {
        let a = created(topic("a", "events", 12, 3, &["east"]), 5);
        let b = created(topic("b", "events", 12, 3, &["east"]), 5);
        assert!(owns_against(&a, &b));
        assert!(!owns_against(&b, &a));
    }

    #[test]
    fn a_policy_violation_and_a_duplicate_are_reported_together_under_the_policy_reason() {
        let owner = created(topic("team-a", "events", 12, 3, &["east"]), 0);
        let snapshot = TopicSnapshot {
            same_name: vec![owner],
            policies: vec![policy("strict", Enforcement::Deny)],
            ..TopicSnapshot::default()
        };
        let d = decide_topic(
            &create(topic("team-b", "events", 6, 3, &["east"])),
            &snapshot,
        );
        let r = refusal(&d);
        assert_eq!(r.reason, "TOPIC_CREATION_POLICY_VIOLATION");
        let m = &r.message;
        assert!(
            m.contains("spec.partitions") && m.contains("team-a/events"),
            "{m}"
        );
    }

    #[test]
    fn several_clusters_and_owners_are_all_named() {
        let t = vec![
            Taken {
                owner: "a/x".into(),
                cluster: "east".into(),
            },
            Taken {
                owner: "a/x".into(),
                cluster: "west".into(),
            },
            Taken {
                owner: "b/y".into(),
                cluster: "north".into(),
            },
        ];
        assert_eq!(
            taken_message("events", &t),
            "Kafka topic \"events\" is already managed by FederatedKafkaTopic a/x in clusters east, west and by FederatedKafkaTopic b/y in cluster north"
        );
    }
}
