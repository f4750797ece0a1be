//! The applier: one task that turns the user plans of many policies into as few Kafka
//! requests as the protocol allows. Plans queued within a few milliseconds of each other
//! ([`batch`]) go out together — in one round at most one AlterUserScramCredentials, one
//! CreateAcls, one DeleteAcls and one AlterClientQuotas, sent concurrently, whatever the
//! number of users — and each policy's apply gets its own user's result. Every request is
//! counted in `accord_agent_kafka_requests_total{request}`. Afterwards the observer is nudged
//! to look again. The applier's loop is the Kafka enforcer's; what is here is the users'
//! round ([`execute`], their
//! [`KafkaResource::execute`](crate::enforce::kafka::resource::KafkaResource::execute)).
//!
//! Salts and salted passwords go only into the AlterUserScramCredentials request: never
//! into a log line or a message.

use std::collections::BTreeMap;
use tracing::Instrument;

use accord_kafka::{
    AclBinding, Admin, ItemError, KafkaError, QuotaAlteration, ScramDeletion, ScramMechanism,
    ScramUpsertion,
};
use tracing::{debug, info};

use super::judge::{Plan, Upserted, describe};
use super::observe::{self, Shared};
use crate::enforce::kafka::batch;
use crate::enforce::kafka::errors::{code_kind, error_kind, failure_message};
use crate::enforce::{ApplyError, ApplyErrorKind};
use crate::metrics::Metrics;

/// One user's plan and where its result goes.
pub type Request = batch::Request<Plan>;

/// The requests of one round, gathered from every plan; each item remembers which plan
/// (by index in the round) it came from.
#[derive(Default)]
struct Round {
    upsertions: Vec<ScramUpsertion>,
    deletions: Vec<ScramDeletion>,
    creates: Vec<AclBinding>,
    created_for: Vec<usize>,
    deletes: Vec<AclBinding>,
    deleted_for: Vec<usize>,
    quotas: Vec<QuotaAlteration>,
}

impl Round {
    fn of(requests: &[Request]) -> Self {
        let mut round = Self::default();
        for (
            i,
            Request {
                name: user, plan, ..
            },
        ) in requests.iter().enumerate()
        {
            if let Some(credential) = &plan.upsert {
                round.upsertions.push(ScramUpsertion {
                    user: user.clone(),
                    mechanism: ScramMechanism::Sha512,
                    iterations: credential.iterations,
                    salt: credential.salt.clone(),
                    salted_password: credential.salted_password.clone(),
                });
            }
            if plan.delete_credential {
                round.deletions.push(ScramDeletion {
                    user: user.clone(),
                    mechanism: ScramMechanism::Sha512,
                });
            }
            round.creates.extend(plan.create_acls.iter().cloned());
            round.created_for.extend(plan.create_acls.iter().map(|_| i));
            round.deletes.extend(plan.delete_acls.iter().cloned());
            round.deleted_for.extend(plan.delete_acls.iter().map(|_| i));
            if !plan.set_quotas.is_empty() || !plan.remove_quotas.is_empty() {
                round.quotas.push(QuotaAlteration {
                    user: user.clone(),
                    set: plan.set_quotas.clone(),
                    remove: plan.remove_quotas.clone(),
                });
            }
        }
        round
    }
}

/// A request's answer: failed as a whole, or per item.
type Answer<T> = Result<T, ApplyError>;

fn answer<T>(result: Result<T, KafkaError>) -> Answer<T> {
    result.map_err(|e| ApplyError::new(error_kind(&e), failure_message(&e)))
}

/// Sends one request of each kind the round needs, concurrently, and answers every plan —
/// after noting for the observer what succeeded.
pub async fn execute(admin: &Admin, requests: Vec<Request>, shared: &Shared, metrics: &Metrics) {
    let round = Round::of(&requests);
    debug!(
        users = requests.len(),
        upsertions = round.upsertions.len(),
        deletions = round.deletions.len(),
        create_acls = round.creates.len(),
        delete_acls = round.deletes.len(),
        quotas = round.quotas.len(),
        "applying users to Kafka"
    );
    let scram = async {
        if round.upsertions.is_empty() && round.deletions.is_empty() {
            return Ok(BTreeMap::new());
        }
        metrics.kafka_request("alter_user_scram_credentials");
        answer(
            admin
                .alter_user_scram_credentials(&round.upsertions, &round.deletions)
                .instrument(accord_common::telemetry::step(
                    "kafka AlterUserScramCredentials",
                ))
                .await,
        )
    };
    let create = async {
        if round.creates.is_empty() {
            return Ok(Vec::new());
        }
        metrics.kafka_request("create_acls");
        answer(
            admin
                .create_acls(&round.creates)
                .instrument(accord_common::telemetry::step("kafka CreateAcls"))
                .await,
        )
    };
    let delete = async {
        if round.deletes.is_empty() {
            return Ok(Vec::new());
        }
        metrics.kafka_request("delete_acls");
        answer(
            admin
                .delete_acls(&round.deletes)
                .instrument(accord_common::telemetry::step("kafka DeleteAcls"))
                .await,
        )
    };
    let quota = async {
        if round.quotas.is_empty() {
            return Ok(BTreeMap::new());
        }
        metrics.kafka_request("alter_client_quotas");
        answer(
            admin
                .alter_client_quotas(&round.quotas)
                .instrument(accord_common::telemetry::step("kafka AlterClientQuotas"))
                .await,
        )
    };
    let (scram, create, delete, quota) = tokio::join!(scram, create, delete, quota);
    let created = per_plan(&create, &round.created_for, |r| r.clone().map(drop));
    let deleted = per_plan(&delete, &round.deleted_for, |r| r.clone().map(drop));
    let mut answers = Vec::with_capacity(requests.len());
    for (i, request) in requests.into_iter().enumerate() {
        let Request {
            name: user, plan, ..
        } = &request;
        let credential = if plan.upsert.is_some() || plan.delete_credential {
            user_result(
                &scram,
                user,
                "changing the SCRAM-SHA-512 credential of",
                |e| {
                    // Deleting what is already gone.
                    plan.delete_credential && e.is_resource_not_found()
                },
            )
        } else {
            Ok(())
        };
        let acls = [
            (&created, plan.create_acls.len(), "creating"),
            (&deleted, plan.delete_acls.len(), "deleting"),
        ]
        .into_iter()
        .filter(|(_, n, _)| *n > 0)
        .try_for_each(|(results, _, doing)| acl_result(results, i, user, doing));
        let quotas = if plan.set_quotas.is_empty() && plan.remove_quotas.is_empty() {
            Ok(())
        } else {
            user_result(&quota, user, "changing the quotas of", |_| false)
        };
        let errors: Vec<&ApplyError> = [&credential, &acls, &quotas]
            .into_iter()
            .filter_map(|r| r.as_ref().err())
            .collect();
        let result = match errors.first() {
            None => {
                info!(user = %user, changes = %describe(plan), "applied Kafka user");
                Ok(())
            }
            // Each part's own message; the first part's kind.
            Some(first) => Err(ApplyError::new(
                first.kind,
                errors
                    .iter()
                    .map(|e| e.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; "),
            )),
        };
        if let Err(e) = &result {
            metrics.error(e.kind.as_str());
        }
        answers.push((request, credential.is_ok(), result));
    }
    {
        let mut observations = observe::lock(shared);
        for (request, credential_done, result) in &answers {
            let Request {
                name: user, plan, ..
            } = request;
            if *credential_done {
                if let Some(credential) = &plan.upsert {
                    observations.upserted_now(user, Upserted::of(credential));
                } else if plan.delete_credential {
                    observations.credential_deleted(user);
                }
            }
            if result.is_ok() {
                observations.applied(user.clone(), plan.clone());
            }
        }
    }
    for (request, _, result) in answers {
        let _ = request.reply.send(result);
    }
}

/// The results of one ACL request, regrouped by the plan (index in the round) each binding
/// came from: the first error of each plan's bindings, or `Ok`.
fn per_plan<T>(
    answer: &Answer<Vec<Result<T, ItemError>>>,
    owners: &[usize],
    done: impl Fn(&Result<T, ItemError>) -> Result<(), ItemError>,
) -> Answer<BTreeMap<usize, Result<(), ItemError>>> {
    let results = answer.as_ref().map_err(Clone::clone)?;
    let mut by_plan: BTreeMap<usize, Result<(), ItemError>> = BTreeMap::new();
    for (k, owner) in owners.iter().enumerate() {
        let result = match results.get(k) {
            Some(r) => done(r),
            // Kafka's answer is shorter than the request: the client fills in, but be sure.
            None => Err(ItemError {
                code: -1,
                name: accord_kafka::error_name(-1),
                message: Some("Kafka's answer did not mention the ACL".to_owned()),
            }),
        };
        let entry = by_plan.entry(*owner).or_insert(Ok(()));
        if entry.is_ok() {
            *entry = result;
        }
    }
    Ok(by_plan)
}

/// Plan `index`'s result in a regrouped ACL answer.
fn acl_result(
    results: &Answer<BTreeMap<usize, Result<(), ItemError>>>,
    index: usize,
    user: &str,
    doing: &str,
) -> Result<(), ApplyError> {
    match results {
        Err(e) => Err(e.clone()),
        Ok(by_plan) => match by_plan.get(&index) {
            Some(Ok(())) | None => Ok(()),
            Some(Err(e)) => Err(ApplyError::new(
                code_kind(e.code),
                format!("{doing} ACLs of user {user}: {e}"),
            )),
        },
    }
}

/// `user`'s result in a per-user answer; an item error `fine` accepts counts as done.
fn user_result(
    answer: &Answer<BTreeMap<String, Result<(), ItemError>>>,
    user: &str,
    doing: &str,
    fine: impl Fn(&ItemError) -> bool,
) -> Result<(), ApplyError> {
    match answer {
        Err(e) => Err(e.clone()),
        Ok(results) => match results.get(user) {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) if fine(e) => Ok(()),
            Some(Err(e)) => Err(ApplyError::new(
                code_kind(e.code),
                format!("{doing} user {user}: {e}"),
            )),
            None => Err(ApplyError::new(
                ApplyErrorKind::Transient,
                format!("{doing} user {user}: Kafka's answer did not mention the user"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use accord_common::distribution::ScramCredential;
    use accord_kafka::{AclOperation, AclPatternType, AclPermission, AclResourceType};

    use super::*;

    fn item(code: i16, message: &str) -> ItemError {
        ItemError::from_code(code, Some(message.into())).unwrap()
    }

    fn binding(principal: &str, topic: &str) -> AclBinding {
        AclBinding {
            resource_type: AclResourceType::Topic,
            resource_name: topic.into(),
            pattern_type: AclPatternType::Literal,
            principal: principal.into(),
            host: "*".into(),
            operation: AclOperation::Read,
            permission: AclPermission::Allow,
        }
    }

    fn request(user: &str, plan: Plan) -> Request {
        Request {
            name: user.into(),
            plan,
            reply: tokio::sync::oneshot::channel().0,
        }
    }

    #[test]
    fn a_round_gathers_every_plan_into_one_list_per_request_kind() {
        let credential = ScramCredential {
            mechanism: "SCRAM-SHA-512".into(),
            iterations: 8192,
            salt: b"s".to_vec(),
            salted_password: b"p".to_vec(),
            ..ScramCredential::default()
        };
        let requests = vec![
            request(
                "alice",
                Plan {
                    upsert: Some(credential),
                    create_acls: vec![binding("User:alice", "a"), binding("User:alice", "b")],
                    set_quotas: BTreeMap::from([("producer_byte_rate".to_owned(), 1.0)]),
                    ..Plan::default()
                },
            ),
            request(
                "bob",
                Plan {
                    delete_credential: true,
                    create_acls: vec![binding("User:bob", "a")],
                    delete_acls: vec![binding("User:bob", "c")],
                    remove_quotas: vec!["request_percentage".into()],
                    ..Plan::default()
                },
            ),
        ];
        let round = Round::of(&requests);
        assert_eq!(round.upsertions.len(), 1);
        assert_eq!(round.upsertions[0].user, "alice");
        assert_eq!(round.upsertions[0].mechanism, ScramMechanism::Sha512);
        assert_eq!(round.deletions.len(), 1);
        assert_eq!(round.creates.len(), 3);
        assert_eq!(round.created_for, vec![0, 0, 1]);
        assert_eq!(round.deletes, vec![binding("User:bob", "c")]);
        assert_eq!(round.deleted_for, vec![1]);
        assert_eq!(round.quotas.len(), 2);
        assert!(
            !format!("{:?}", round.upsertions).contains("[112]"),
            "the salted password stays out of Debug"
        );
    }

    #[test]
    fn acl_results_go_back_to_the_plan_their_bindings_came_from() {
        let answer: Answer<Vec<Result<(), ItemError>>> = Ok(vec![
            Ok(()),
            Err(item(
                31,
                "the agent's Kafka user needs the Alter ACL on the cluster",
            )),
            Ok(()),
        ]);
        let by_plan = per_plan(&answer, &[0, 0, 1], |r| r.clone());
        let e = acl_result(&by_plan, 0, "alice", "creating").unwrap_err();
        assert_eq!(e.kind, ApplyErrorKind::Forbidden);
        assert!(
            e.message
                .starts_with("creating ACLs of user alice: CLUSTER_AUTHORIZATION_FAILED")
                && e.message.contains("needs the Alter ACL"),
            "{}",
            e.message
        );
        assert!(acl_result(&by_plan, 1, "bob", "creating").is_ok());
        // A whole request failing fails every plan with its reason.
        let down: Answer<Vec<Result<(), ItemError>>> = answer_of_unreachable();
        let by_plan = per_plan(&down, &[0, 1], |r| r.clone());
        let e = acl_result(&by_plan, 1, "bob", "creating").unwrap_err();
        assert_eq!(e.kind, ApplyErrorKind::Unavailable);
        assert!(
            e.message.starts_with("Kafka unreachable: "),
            "{}",
            e.message
        );
    }

    fn answer_of_unreachable<T>() -> Answer<T> {
        answer(Err(KafkaError::Unreachable {
            addr: "k:9092".into(),
            error: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        }))
    }

    #[test]
    fn a_users_result_is_its_own_and_deleting_a_missing_credential_counts_as_done() {
        let answer: Answer<BTreeMap<String, Result<(), ItemError>>> = Ok(BTreeMap::from([
            ("alice".to_owned(), Ok(())),
            ("bob".to_owned(), Err(item(91, "no credential"))),
            ("carol".to_owned(), Err(item(93, "iterations out of range"))),
        ]));
        assert!(user_result(&answer, "alice", "changing", |_| false).is_ok());
        assert!(user_result(&answer, "bob", "deleting", ItemError::is_resource_not_found).is_ok());
        let e = user_result(&answer, "carol", "changing the credential of", |_| false).unwrap_err();
        assert_eq!(e.kind, ApplyErrorKind::Invalid);
        assert!(
            e.message
                .starts_with("changing the credential of user carol: UNACCEPTABLE_CREDENTIAL"),
            "{}",
            e.message
        );
        let e = user_result(&answer, "dave", "changing", |_| false).unwrap_err();
        assert!(e.message.contains("did not mention"), "{e}");
    }
}
