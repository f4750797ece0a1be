//! The applier: one task that turns the topic plans of many policies into as few Kafka
//! requests as the protocol allows. The engine applies per policy; plans queued within a few
//! milliseconds of each other ([`batch`]: an Assignments
//! message with a thousand topics arrives as a thousand applies back to back) go out
//! together — one CreateTopics, one CreatePartitions, one IncrementalAlterConfigs, one
//! DeleteTopics — and each policy's apply gets its own topic's result. Afterwards the
//! observer is nudged to look again. The applier's loop is the Kafka enforcer's; what is
//! here is the topics' round ([`execute`], their
//! [`KafkaResource::execute`](crate::enforce::kafka::resource::KafkaResource::execute)).

use std::collections::BTreeMap;
use tracing::Instrument;

use accord_kafka::{Admin, ConfigOp, ItemError, KafkaError, NewTopic};
use tracing::{debug, info};

use super::judge::Plan;
use super::observe::{self, Shared, failure_message};
use crate::enforce::kafka::batch;
pub use crate::enforce::kafka::batch::{COALESCE, COALESCE_MAX, MAX_BATCH};
pub use crate::enforce::kafka::errors::{code_kind, error_kind};
use crate::enforce::{ApplyError, ApplyErrorKind};
use crate::metrics::Metrics;

/// One topic's plan and where its result goes.
pub type Request = batch::Request<Plan>;

/// The per-topic outcome of one request: the request failed as a whole, or each topic's
/// result.
type Outcome = Result<BTreeMap<String, Result<(), ItemError>>, ApplyError>;

fn outcome(result: Result<BTreeMap<String, Result<(), ItemError>>, KafkaError>) -> Outcome {
    result.map_err(|e| ApplyError::new(error_kind(&e), failure_message(&e)))
}

/// Sends one request of each kind the batch needs, concurrently, and answers every plan
/// — after noting the plans that succeeded for the observer, whose next look the engine
/// waits for.
pub async fn execute(admin: &Admin, batch: Vec<Request>, shared: &Shared, metrics: &Metrics) {
    let mut creates: Vec<NewTopic> = Vec::new();
    let mut partitions: Vec<(String, i32)> = Vec::new();
    let mut configs: Vec<(String, Vec<ConfigOp>)> = Vec::new();
    let mut deletes: Vec<String> = Vec::new();
    for request in &batch {
        match &request.plan {
            Plan::Create(topic) => creates.push(topic.clone()),
            Plan::Delete => deletes.push(request.name.clone()),
            Plan::Alter(alter) => {
                if let Some(p) = alter.partitions {
                    partitions.push((request.name.clone(), p));
                }
                if !alter.config.is_empty() {
                    configs.push((request.name.clone(), alter.config.clone()));
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
        outcome(
            admin
                .create_topics(&creates)
                .instrument(accord_common::telemetry::step("kafka CreateTopics"))
                .await,
        )
    };
    let partition = async {
        if partitions.is_empty() {
            return Ok(BTreeMap::new());
        }
        metrics.kafka_request("create_partitions");
        outcome(
            admin
                .create_partitions(&partitions)
                .instrument(accord_common::telemetry::step("kafka CreatePartitions"))
                .await,
        )
    };
    let config = async {
        if configs.is_empty() {
            return Ok(BTreeMap::new());
        }
        metrics.kafka_request("incremental_alter_configs");
        outcome(
            admin
                .incremental_alter_configs(&configs)
                .instrument(accord_common::telemetry::step(
                    "kafka IncrementalAlterConfigs",
                ))
                .await,
        )
    };
    let delete = async {
        if deletes.is_empty() {
            return Ok(BTreeMap::new());
        }
        metrics.kafka_request("delete_topics");
        outcome(
            admin
                .delete_topics(&deletes)
                .instrument(accord_common::telemetry::step("kafka DeleteTopics"))
                .await,
        )
    };
    let (create, partition, config, delete) = tokio::join!(create, partition, config, delete);
    if let Ok(results) = &create {
        for result in results.values() {
            metrics.topic_create(match result {
                Ok(()) => "created",
                Err(e) if e.is_already_exists() => "already_exists",
                Err(_) => "refused",
            });
        }
    }
    let mut answers = Vec::with_capacity(batch.len());
    for request in batch {
        let topic = &request.name;
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
                observations.applied(request.name.clone(), request.plan.clone());
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
}
