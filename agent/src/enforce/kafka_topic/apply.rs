//! The applier: one task that turns the topic plans of many policies into as few Kafka
//! requests as the protocol allows. The engine applies per policy; plans queued within a few
//! milliseconds of each other (an Assignments message with a thousand topics arrives
//! as a thousand applies back to back) go out together — one CreateTopics, one CreatePartitions,
//! one IncrementalAlterConfigs, one DeleteTopics — and each policy's apply gets its own
//! topic's result. Afterwards the observer is nudged to look again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accord_kafka::{Admin, ConfigOp, ItemError, KafkaError, NewTopic};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, info};

use super::judge::Plan;
use super::observe::{self, Shared, Target, failure_message};
use crate::enforce::{ApplyError, ApplyErrorKind};
use crate::metrics::Metrics;

/// How long after the latest plan the applier waits for another to join its requests
/// (the engine issues the applies of one Assignments message back to back).
pub const COALESCE: Duration = Duration::from_millis(10);
/// How long after the first plan the applier sends its requests at the latest.
pub const COALESCE_MAX: Duration = Duration::from_millis(100);
/// Plans in one round at most (bounds the size of one request).
pub const MAX_BATCH: usize = 2000;

/// One topic's plan and where its result goes.
pub struct Request {
    /// The topic.
    pub topic: String,
    /// What to do to it.
    pub plan: Plan,
    /// The result of the apply.
    pub reply: oneshot::Sender<Result<(), ApplyError>>,
}

/// The kind of a failed Kafka request: the whole request failing (`Broker`, with a Kafka
/// error code) or one topic's error inside an answer (`Item`, its code).
///
/// A Kafka that cannot be reached, does not answer, cannot be spoken to (TLS, protocol) or
/// refuses the agent's credentials is `Unavailable`: nothing can be applied there until
/// that changes. Error codes are classified by [`code_kind`].
pub fn error_kind(error: &KafkaError) -> ApplyErrorKind {
    match error {
        KafkaError::Unreachable { .. }
        | KafkaError::Timeout { .. }
        | KafkaError::Tls { .. }
        | KafkaError::Protocol { .. }
        | KafkaError::Authentication { .. } => ApplyErrorKind::Unavailable,
        KafkaError::Broker { code, .. } => code_kind(*code),
    }
}

/// The kind of a Kafka error code (of a whole request or of one topic in an answer).
pub fn code_kind(code: i16) -> ApplyErrorKind {
    match code {
        // UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID
        3 | 100 => ApplyErrorKind::NotFound,
        // TOPIC_, GROUP_, CLUSTER_AUTHORIZATION_FAILED
        29..=31 => ApplyErrorKind::Forbidden,
        // UNSUPPORTED_VERSION, TOPIC_DELETION_DISABLED
        35 | 73 => ApplyErrorKind::NotSupported,
        // TOPIC_ALREADY_EXISTS
        36 => ApplyErrorKind::Conflict,
        // INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
        // INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG, INVALID_REQUEST, POLICY_VIOLATION
        17 | 37..=40 | 42 | 44 => ApplyErrorKind::Invalid,
        _ => ApplyErrorKind::Transient,
    }
}

/// Applies the plans arriving on `requests` through the target's admin until the enforcer
/// is gone.
pub async fn run(
    mut requests: mpsc::UnboundedReceiver<Request>,
    target: watch::Receiver<Target>,
    shared: Shared,
    nudge: Arc<Notify>,
    metrics: Metrics,
) {
    while let Some(first) = requests.recv().await {
        let mut batch = vec![first];
        let latest = Instant::now() + COALESCE_MAX;
        while batch.len() < MAX_BATCH {
            let until = latest.min(Instant::now() + COALESCE);
            match tokio::time::timeout_at(until, requests.recv()).await {
                Ok(Some(request)) => batch.push(request),
                Ok(None) | Err(_) => break,
            }
        }
        let admin = target.borrow().admin.clone();
        match admin {
            Some(admin) => execute(&admin, batch, &shared, &metrics).await,
            None => {
                for request in batch {
                    let _ = request.reply.send(Err(ApplyError::new(
                        ApplyErrorKind::Unavailable,
                        "no Kafka connection",
                    )));
                }
            }
        }
        nudge.notify_one();
    }
}

/// The per-topic outcome of one request: the request failed as a whole, or each topic's
/// result.
type Outcome = Result<BTreeMap<String, Result<(), ItemError>>, ApplyError>;

fn outcome(result: Result<BTreeMap<String, Result<(), ItemError>>, KafkaError>) -> Outcome {
    result.map_err(|e| ApplyError::new(error_kind(&e), failure_message(&e)))
}

/// Sends one request of each kind the batch needs, concurrently, and answers every plan
/// — after noting the plans that succeeded for the observer, whose next look the engine
/// waits for.
async fn execute(admin: &Admin, batch: Vec<Request>, shared: &Shared, metrics: &Metrics) {
    let mut creates: Vec<NewTopic> = Vec::new();
    let mut partitions: Vec<(String, i32)> = Vec::new();
    let mut configs: Vec<(String, Vec<ConfigOp>)> = Vec::new();
    let mut deletes: Vec<String> = Vec::new();
    for request in &batch {
        match &request.plan {
            Plan::Create(topic) => creates.push(topic.clone()),
            Plan::Delete => deletes.push(request.topic.clone()),
            Plan::Alter(alter) => {
                if let Some(p) = alter.partitions {
                    partitions.push((request.topic.clone(), p));
                }
                if !alter.config.is_empty() {
                    configs.push((request.topic.clone(), alter.config.clone()));
                }
            }
        }
    }
    debug!(
        creates = creates.len(),
        partitions = partitions.len(),
        configs = configs.len(),
        deletes = deletes.len(),
        "applying to Kafka"
    );
    let create = async {
        if creates.is_empty() {
            return Ok(BTreeMap::new());
        }
        metrics.kafka_request("create_topics");
        outcome(admin.create_topics(&creates).await)
    };
    let partition = async {
        if partitions.is_empty() {
            return Ok(BTreeMap::new());
        }
        metrics.kafka_request("create_partitions");
        outcome(admin.create_partitions(&partitions).await)
    };
    let config = async {
        if configs.is_empty() {
            return Ok(BTreeMap::new());
        }
        metrics.kafka_request("incremental_alter_configs");
        outcome(admin.incremental_alter_configs(&configs).await)
    };
    let delete = async {
        if deletes.is_empty() {
            return Ok(BTreeMap::new());
        }
        metrics.kafka_request("delete_topics");
        outcome(admin.delete_topics(&deletes).await)
    };
    let (create, partition, config, delete) = tokio::join!(create, partition, config, delete);
    let mut answers = Vec::with_capacity(batch.len());
    for request in batch {
        let topic = &request.topic;
        let result = match &request.plan {
            Plan::Create(t) => topic_result(&create, topic, "creating", |e| e.is_already_exists())
                .inspect(|()| {
                    info!(topic = %topic, partitions = t.partitions, replication_factor = t.replication_factor, "created topic");
                }),
            Plan::Delete => topic_result(&delete, topic, "deleting", ItemError::is_unknown_topic)
                .inspect(|()| info!(topic = %topic, "deleted topic")),
            Plan::Alter(alter) => {
                let raised = match alter.partitions {
                    Some(p) => topic_result(&partition, topic, "raising partitions of", |_| false)
                        .inspect(|()| info!(topic = %topic, partitions = p, "raised partitions")),
                    None => Ok(()),
                };
                let altered = if alter.config.is_empty() {
                    Ok(())
                } else {
                    topic_result(&config, topic, "changing configs of", |_| false)
                        .inspect(|()| info!(topic = %topic, changes = alter.config.len(), "changed configs"))
                };
                raised.and(altered)
            }
        };
        if let Err(e) = &result {
            metrics.error(e.kind.as_str());
        }
        answers.push((request, result));
    }
    {
        let mut observations = observe::lock(shared);
        for (request, result) in &answers {
            if result.is_ok() {
                observations.applied(request.topic.clone(), request.plan.clone());
            }
        }
    }
    for (request, result) in answers {
        let _ = request.reply.send(result);
    }
}

/// `topic`'s result in `outcome`; an item error `fine` accepts counts as done (the topic
/// already exists when creating, is already gone when deleting).
fn topic_result(
    outcome: &Outcome,
    topic: &str,
    doing: &str,
    fine: impl Fn(&ItemError) -> bool,
) -> Result<(), ApplyError> {
    match outcome {
        Err(e) => Err(e.clone()),
        Ok(results) => match results.get(topic) {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) if fine(e) => Ok(()),
            Some(Err(e)) => Err(ApplyError::new(
                code_kind(e.code),
                format!("{doing} topic {topic}: {e}"),
            )),
            None => Err(ApplyError::new(
                ApplyErrorKind::Transient,
                format!("{doing} topic {topic}: Kafka's answer did not mention the topic"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(code: i16) -> ItemError {
        ItemError::from_code(code, Some("detail".into())).unwrap()
    }

    #[test]
    fn an_answered_topic_succeeds_and_an_accepted_item_error_counts_as_done() {
        let outcome: Outcome = Ok(BTreeMap::from([
            ("a".to_owned(), Ok(())),
            ("b".to_owned(), Err(item(36))),
            ("c".to_owned(), Err(item(37))),
        ]));
        assert!(topic_result(&outcome, "a", "creating", |_| false).is_ok());
        assert!(topic_result(&outcome, "b", "creating", ItemError::is_already_exists).is_ok());
        let e = topic_result(&outcome, "c", "creating", ItemError::is_already_exists).unwrap_err();
        assert_eq!(e.kind, ApplyErrorKind::Invalid);
        let m = e.message;
        assert!(m.starts_with("creating topic c: "), "{m}");
        assert!(m.contains("detail"), "{m}");
        let e = topic_result(&outcome, "d", "creating", |_| false).unwrap_err();
        assert!(e.message.contains("did not mention"), "{e}");
    }

    #[test]
    fn a_failed_request_fails_every_topic_with_its_reason() {
        let outcome = outcome(Err(KafkaError::Unreachable {
            addr: "k:9092".into(),
            error: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        }));
        let e = topic_result(&outcome, "a", "creating", |_| true).unwrap_err();
        assert_eq!(e.kind, ApplyErrorKind::Unavailable);
        assert!(
            e.message
                .starts_with("Kafka unreachable: Kafka at k:9092 is unreachable"),
            "{e}"
        );
    }

    #[test]
    fn kafka_errors_are_classified_by_what_they_mean_for_the_placement() {
        let unreachable = KafkaError::Timeout {
            addr: "k:9092".into(),
            after: std::time::Duration::from_secs(1),
        };
        assert_eq!(error_kind(&unreachable), ApplyErrorKind::Unavailable);
        let refused = KafkaError::Authentication {
            message: "bad password".into(),
        };
        assert_eq!(error_kind(&refused), ApplyErrorKind::Unavailable);
        let broker = |code| KafkaError::Broker {
            code,
            name: accord_kafka::error_name(code),
            message: None,
        };
        assert_eq!(error_kind(&broker(31)), ApplyErrorKind::Forbidden);
        assert_eq!(error_kind(&broker(7)), ApplyErrorKind::Transient);
        for (code, kind) in [
            (3, ApplyErrorKind::NotFound),
            (29, ApplyErrorKind::Forbidden),
            (35, ApplyErrorKind::NotSupported),
            (36, ApplyErrorKind::Conflict),
            (37, ApplyErrorKind::Invalid),
            (38, ApplyErrorKind::Invalid),
            (40, ApplyErrorKind::Invalid),
            (41, ApplyErrorKind::Transient),
            (-1, ApplyErrorKind::Transient),
        ] {
            assert_eq!(code_kind(code), kind, "{}", accord_kafka::error_name(code));
        }
    }
}
