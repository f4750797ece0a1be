//! The `accord-kafka` user APIs (SCRAM credentials, ACLs, client quotas) against a real
//! single-broker Kafka 4.1 (KRaft) that enforces ACLs (`StandardAuthorizer`, nothing
//! allowed that no ACL allows), on its SASL_SSL listener. What our client did is checked
//! from outside with Kafka's own tools: `kafka-acls`, `kafka-configs`, and Kafka's own
//! producer (`kafka-verifiable-producer`) authenticating as the user we created, which
//! proves the salted password we computed is one the broker accepts (our own client
//! shares the derivation code, so it could not tell).
//!
//! Kafka applies credential, ACL and quota changes asynchronously (the controller commits
//! them, then the broker replays its metadata log), so each check first waits, with a
//! deadline, on a cheap view of the change, then asks the independent tool once.

use std::collections::BTreeMap;
use std::time::Duration;

use accord_e2e::Binaries;
use accord_e2e::kafka::{
    self, KafkaCluster, KafkaOptions, SCRAM_USERNAME, SendOutcome, SharedKafka,
};
use accord_e2e::wait::{self, Check};
use accord_kafka::{
    AclBinding, AclFilter, AclOperation, AclPatternType, AclPermission, AclResourceType, Admin,
    ItemError, NewTopic, QuotaAlteration, ScramCredentialInfo, ScramDeletion, ScramMechanism,
    ScramUpsertion, salted_password,
};
use anyhow::{Context as _, Result, ensure};
use rand::Rng as _;

/// One single-broker cluster with the ACL authorizer, shared by every test of this binary;
/// each test works with users of its own.
static KAFKA: SharedKafka = SharedKafka::new("kafka-users", || {
    KafkaOptions {
        sasl_ssl: true,
        ..KafkaOptions::default()
    }
    .with_authorizer()
});

/// How long a committed change may take to reach the broker's authorizer, authenticator
/// and metadata (milliseconds on one broker; generous for a loaded machine).
const PROPAGATION: Duration = Duration::from_secs(15);
/// The iteration count the test credentials are made with.
const ITERATIONS: u32 = 8192;

/// An admin client as the testbed's SCRAM user, a super user.
fn super_admin(cluster: &KafkaCluster) -> Result<Admin> {
    let password = cluster.password.as_deref().context("SASL password")?;
    Ok(Admin::new(
        cluster.sasl_config_as(SCRAM_USERNAME, password)?,
    ))
}

fn random_password() -> String {
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(24)
        .map(char::from)
        .collect()
}

/// A SCRAM-SHA-512 credential for `user` with `password`, a random salt and
/// [`ITERATIONS`].
fn credential(user: &str, password: &str) -> ScramUpsertion {
    let salt: [u8; 16] = rand::random();
    ScramUpsertion {
        user: user.into(),
        mechanism: ScramMechanism::Sha512,
        iterations: ITERATIONS as i32,
        salt: salt.to_vec(),
        salted_password: salted_password(
            ScramMechanism::Sha512,
            password.as_bytes(),
            &salt,
            ITERATIONS,
        ),
    }
}

fn acl(
    principal: &str,
    resource_type: AclResourceType,
    name: &str,
    pattern_type: AclPatternType,
    operation: AclOperation,
) -> AclBinding {
    AclBinding {
        resource_type,
        resource_name: name.into(),
        pattern_type,
        principal: principal.into(),
        host: "*".into(),
        operation,
        permission: AclPermission::Allow,
    }
}

fn all_ok<T: std::fmt::Debug>(results: &[Result<T, ItemError>]) -> Result<()> {
    ensure!(results.iter().all(Result::is_ok), "{results:?}");
    Ok(())
}

/// Waits until `principal`'s ACLs, as the broker's authorizer describes them, are
/// `expected` (in any order).
async fn wait_acls(admin: &Admin, principal: &str, expected: &[AclBinding]) -> Result<()> {
    let mut expected = expected.to_vec();
    expected.sort();
    let filter = AclFilter {
        principal: Some(principal.into()),
    };
    wait::until(
        &format!("the ACLs of {principal} to be {expected:?}"),
        PROPAGATION,
        || async {
            let mut seen = admin.describe_acls(&filter).await?;
            seen.sort();
            Ok(if seen == expected {
                Check::Ready(())
            } else {
                Check::NotYet(format!("describe_acls shows {seen:?}"))
            })
        },
    )
    .await
}

/// Waits until `user` authenticates with `password` (`true`) or is refused (`false`).
async fn wait_authentication(
    cluster: &KafkaCluster,
    user: &str,
    password: &str,
    admitted: bool,
) -> Result<()> {
    let admin = Admin::new(cluster.sasl_config_as(user, password)?);
    wait::until(
        &format!(
            "{user} to be {}",
            if admitted { "admitted" } else { "refused" }
        ),
        PROPAGATION,
        || async {
            Ok(match admin.describe_topics(&[]).await {
                Ok(_) if admitted => Check::Ready(()),
                Err(e) if !admitted && e.is_authentication() => Check::Ready(()),
                Err(e) if admitted && !e.is_authentication() => return Err(e.into()),
                other => Check::NotYet(format!("{other:?}")),
            })
        },
    )
    .await
}

/// What Kafka's own producer gets sending one record to `topic` as `user`.
async fn produce_as(
    cluster: &KafkaCluster,
    user: &str,
    password: &str,
    topic: &str,
) -> Result<SendOutcome> {
    let bootstrap = cluster.sasl_ssl_bootstrap.as_deref().context("SASL_SSL")?;
    let properties = cluster.tool_sasl_properties_as(user, password);
    kafka::produce_one(
        &Binaries::locate()?,
        bootstrap,
        properties.as_deref(),
        topic,
    )
    .await
}

fn refused_with(outcome: &SendOutcome, exception: &str) -> bool {
    matches!(outcome, SendOutcome::Failed { exception: e, .. } if e.ends_with(exception))
}

#[test]
fn a_credential_from_our_salted_password_admits_kafkas_own_producer_where_alices_acls_allow() {
    KAFKA.run(|bed| async move {
        let cluster = bed.cluster.read().await;
        let admin = super_admin(&cluster)?;
        let binaries = Binaries::locate()?;
        let bootstrap = cluster.sasl_ssl_bootstrap.clone().context("SASL_SSL")?;
        let tool = cluster.tool_sasl_properties(None);
        let password = random_password();

        // A SCRAM-SHA-512 credential computed here; Kafka never sees the password.
        let results = admin
            .alter_user_scram_credentials(&[credential("alice", &password)], &[])
            .await?;
        ensure!(results.len() == 1, "{results:?}");
        results["alice"].clone()?;
        let expected = vec![ScramCredentialInfo {
            mechanism: ScramMechanism::Sha512,
            iterations: ITERATIONS as i32,
        }];
        let users = ["alice".to_string(), "nobody".to_string()];
        wait::until(
            "alice's credential to be described",
            PROPAGATION,
            || async {
                let described = admin.describe_user_scram_credentials(Some(&users)).await?;
                Ok(if described.get("alice") == Some(&expected) {
                    Check::Ready(described)
                } else {
                    Check::NotYet(format!("{described:?}"))
                })
            },
        )
        .await
        .and_then(|described| {
            ensure!(
                described.len() == 1,
                "a user without a credential: {described:?}"
            );
            Ok(())
        })?;
        let everyone = admin.describe_user_scram_credentials(None).await?;
        ensure!(
            everyone.contains_key("alice") && everyone.contains_key(SCRAM_USERNAME),
            "{everyone:?}"
        );

        // ACLs: alice may write and describe topics starting with `orders.` and read
        // group `g`; bob has one of his own.
        let alice_acls = vec![
            acl(
                "User:alice",
                AclResourceType::Topic,
                "orders.",
                AclPatternType::Prefixed,
                AclOperation::Write,
            ),
            acl(
                "User:alice",
                AclResourceType::Topic,
                "orders.",
                AclPatternType::Prefixed,
                AclOperation::Describe,
            ),
            acl(
                "User:alice",
                AclResourceType::Group,
                "g",
                AclPatternType::Literal,
                AclOperation::Read,
            ),
        ];
        let bob_acl = acl(
            "User:bob",
            AclResourceType::Topic,
            "payments.x",
            AclPatternType::Literal,
            AclOperation::Read,
        );
        let mut all = alice_acls.clone();
        all.push(bob_acl.clone());
        let created = admin.create_acls(&all).await?;
        ensure!(created.len() == 4, "{created:?}");
        all_ok(&created)?;
        wait_acls(&admin, "User:alice", &alice_acls).await?;
        wait_acls(&admin, "User:bob", std::slice::from_ref(&bob_acl)).await?;
        let listed = kafka::acls_of(&binaries, &bootstrap, tool.as_deref(), "User:alice").await?;
        ensure!(
            listed
                == [
                    "Group:LITERAL:g Read ALLOW *",
                    "Topic:PREFIXED:orders. Describe ALLOW *",
                    "Topic:PREFIXED:orders. Write ALLOW *",
                ],
            "kafka-acls lists {listed:?}"
        );

        // Quotas, key by key; kafka-configs reads the same.
        let quotas = BTreeMap::from([
            ("consumer_byte_rate".to_string(), 4_194_304.0),
            ("controller_mutation_rate".to_string(), 10.0),
            ("producer_byte_rate".to_string(), 2_097_152.0),
            ("request_percentage".to_string(), 200.0),
        ]);
        let altered = admin
            .alter_client_quotas(&[QuotaAlteration {
                user: "alice".into(),
                set: quotas.clone(),
                remove: vec![],
            }])
            .await?;
        altered["alice"].clone()?;
        wait_quotas(&admin, "alice", &quotas).await?;
        let seen = kafka::user_quotas(&binaries, &bootstrap, tool.as_deref(), "alice").await?;
        ensure!(seen == quotas, "kafka-configs shows {seen:?}");
        let altered = admin
            .alter_client_quotas(&[QuotaAlteration {
                user: "alice".into(),
                set: BTreeMap::new(),
                remove: vec!["request_percentage".into()],
            }])
            .await?;
        altered["alice"].clone()?;
        let mut fewer = quotas.clone();
        fewer.remove("request_percentage");
        wait_quotas(&admin, "alice", &fewer).await?;
        let seen = kafka::user_quotas(&binaries, &bootstrap, tool.as_deref(), "alice").await?;
        ensure!(seen == fewer, "kafka-configs shows {seen:?}");

        // Kafka's own producer, as alice with her password.
        let created = admin
            .create_topics(&[topic("orders.x"), topic("payments.x")])
            .await?;
        ensure!(created.values().all(Result::is_ok), "{created:?}");
        wait_topics(&admin, &["orders.x", "payments.x"]).await?;
        wait_authentication(&cluster, "alice", &password, true).await?;
        let allowed = produce_as(&cluster, "alice", &password, "orders.x").await?;
        ensure!(allowed == SendOutcome::Acked, "orders.x: {allowed:?}");
        let denied = produce_as(&cluster, "alice", &password, "payments.x").await?;
        ensure!(
            refused_with(&denied, ".TopicAuthorizationException"),
            "payments.x: {denied:?}"
        );
        let wrong = produce_as(&cluster, "alice", "not-her-password", "orders.x").await?;
        ensure!(
            refused_with(&wrong, ".SaslAuthenticationException"),
            "a wrong password: {wrong:?}"
        );

        // One of alice's ACLs deleted exactly: the other two and bob's stay.
        let deleted = admin.delete_acls(&alice_acls[2..]).await?;
        ensure!(deleted == [Ok(1)], "{deleted:?}");
        wait_acls(&admin, "User:alice", &alice_acls[..2]).await?;
        wait_acls(&admin, "User:bob", std::slice::from_ref(&bob_acl)).await?;
        let listed = kafka::acls_of(&binaries, &bootstrap, tool.as_deref(), "User:alice").await?;
        ensure!(listed.len() == 2, "kafka-acls lists {listed:?}");
        let again = admin.delete_acls(&alice_acls[2..]).await?;
        ensure!(again == [Ok(0)], "deleting it again: {again:?}");

        // Without the credential the right password is refused too.
        let results = admin
            .alter_user_scram_credentials(
                &[],
                &[ScramDeletion {
                    user: "alice".into(),
                    mechanism: ScramMechanism::Sha512,
                }],
            )
            .await?;
        results["alice"].clone()?;
        wait_authentication(&cluster, "alice", &password, false).await?;
        let gone = produce_as(&cluster, "alice", &password, "orders.x").await?;
        ensure!(
            refused_with(&gone, ".SaslAuthenticationException"),
            "a deleted credential: {gone:?}"
        );
        let described = admin
            .describe_user_scram_credentials(Some(&["alice".to_string()]))
            .await?;
        ensure!(described.is_empty(), "{described:?}");
        let missing = admin
            .alter_user_scram_credentials(
                &[],
                &[ScramDeletion {
                    user: "alice".into(),
                    mechanism: ScramMechanism::Sha512,
                }],
            )
            .await?;
        ensure!(
            missing["alice"]
                .as_ref()
                .is_err_and(ItemError::is_resource_not_found),
            "{missing:?}"
        );
        Ok(())
    });
}

fn topic(name: &str) -> NewTopic {
    NewTopic {
        name: name.into(),
        partitions: 1,
        replication_factor: 1,
        config: BTreeMap::new(),
    }
}

/// Waits until the broker's metadata lists every topic of `names`.
async fn wait_topics(admin: &Admin, names: &[&str]) -> Result<()> {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    wait::until(&format!("topics {names:?}"), PROPAGATION, || async {
        let described = admin.describe_topics(&names).await?;
        Ok(if described.len() == names.len() {
            Check::Ready(())
        } else {
            Check::NotYet(format!("{:?}", described.keys()))
        })
    })
    .await
}

/// Waits until `user`'s quotas, as the broker describes them, are `expected`.
async fn wait_quotas(admin: &Admin, user: &str, expected: &BTreeMap<String, f64>) -> Result<()> {
    let users = [user.to_string()];
    wait::until(
        &format!("{user}'s quotas to be {expected:?}"),
        PROPAGATION,
        || async {
            let described = admin.describe_client_quotas(Some(&users)).await?;
            let seen = described.get(user).cloned().unwrap_or_default();
            Ok(if &seen == expected && described.len() == 1 {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{described:?}"))
            })
        },
    )
    .await
}

/// Whether `result` is a refusal by the authorizer whose message says what it `needs`.
fn refused<T: std::fmt::Debug>(result: Option<&Result<T, ItemError>>, needs: &str) -> Result<()> {
    match result {
        Some(Err(err)) => {
            ensure!(
                err.is_cluster_authorization_failed() && err.to_string().contains(needs),
                "{err}"
            );
            Ok(())
        }
        other => anyhow::bail!("not refused: {other:?}"),
    }
}

#[test]
fn a_user_without_cluster_acls_is_told_which_acl_each_api_needs() {
    KAFKA.run(|bed| async move {
        let cluster = bed.cluster.read().await;
        let admin = super_admin(&cluster)?;
        let password = random_password();
        admin
            .alter_user_scram_credentials(&[credential("mallory", &password)], &[])
            .await?["mallory"]
            .clone()?;
        wait_authentication(&cluster, "mallory", &password, true).await?;
        let mallory = Admin::new(cluster.sasl_config_as("mallory", &password)?);

        let alter_acl = "needs the Alter ACL on the cluster \
                         (AlterUserScramCredentials / CreateAcls / DeleteAcls)";
        let describe_acl = "needs the Describe ACL on the cluster \
                            (DescribeAcls / DescribeUserScramCredentials)";
        let scram = mallory
            .alter_user_scram_credentials(&[credential("mallory", "another-password")], &[])
            .await?;
        refused(scram.get("mallory"), alter_acl)?;
        let own = acl(
            "User:mallory",
            AclResourceType::Cluster,
            "kafka-cluster",
            AclPatternType::Literal,
            AclOperation::Alter,
        );
        let created = mallory.create_acls(std::slice::from_ref(&own)).await?;
        refused(created.first(), alter_acl)?;
        let deleted = mallory.delete_acls(std::slice::from_ref(&own)).await?;
        refused(deleted.first(), alter_acl)?;
        let quotas = mallory
            .alter_client_quotas(&[QuotaAlteration {
                user: "mallory".into(),
                set: BTreeMap::from([("producer_byte_rate".to_string(), 1e9)]),
                remove: vec![],
            }])
            .await?;
        refused(
            quotas.get("mallory"),
            "needs the AlterConfigs ACL on the cluster (AlterClientQuotas)",
        )?;

        let err = mallory
            .describe_acls(&AclFilter::default())
            .await
            .expect_err("refused");
        ensure!(err.to_string().contains(describe_acl), "{err}");
        let err = mallory
            .describe_user_scram_credentials(None)
            .await
            .expect_err("refused");
        ensure!(err.to_string().contains(describe_acl), "{err}");
        let err = mallory
            .describe_client_quotas(None)
            .await
            .expect_err("refused");
        ensure!(
            err.to_string()
                .contains("needs the DescribeConfigs ACL on the cluster (DescribeClientQuotas)"),
            "{err}"
        );
        // Nothing changed.
        ensure!(
            admin
                .describe_client_quotas(Some(&["mallory".to_string()]))
                .await?
                .is_empty()
        );
        Ok(())
    });
}

#[test]
fn acls_changed_with_kafkas_own_tool_and_with_ours_are_seen_by_both() {
    KAFKA.run(|bed| async move {
        let cluster = bed.cluster.read().await;
        let admin = super_admin(&cluster)?;
        let binaries = Binaries::locate()?;
        let bootstrap = cluster.sasl_ssl_bootstrap.clone().context("SASL_SSL")?;
        let tool = cluster.tool_sasl_properties(None);
        let principal = "User:dave";

        // Added behind our back with kafka-acls: seen by describe_acls.
        for line in [
            "Topic:LITERAL:dave-topic Read ALLOW *",
            "Cluster:LITERAL:kafka-cluster Describe DENY 10.0.0.1",
        ] {
            kafka::add_acl(&binaries, &bootstrap, tool.as_deref(), principal, line).await?;
        }
        let read = acl(
            principal,
            AclResourceType::Topic,
            "dave-topic",
            AclPatternType::Literal,
            AclOperation::Read,
        );
        let deny = AclBinding {
            host: "10.0.0.1".into(),
            permission: AclPermission::Deny,
            ..acl(
                principal,
                AclResourceType::Cluster,
                "kafka-cluster",
                AclPatternType::Literal,
                AclOperation::Describe,
            )
        };
        wait_acls(&admin, principal, &[read.clone(), deny.clone()]).await?;

        // Created by us: listed by kafka-acls.
        let idempotent = acl(
            principal,
            AclResourceType::TransactionalId,
            "dave-",
            AclPatternType::Prefixed,
            AclOperation::IdempotentWrite,
        );
        all_ok(&admin.create_acls(std::slice::from_ref(&idempotent)).await?)?;
        wait_acls(
            &admin,
            principal,
            &[read.clone(), deny.clone(), idempotent.clone()],
        )
        .await?;
        let listed = kafka::acls_of(&binaries, &bootstrap, tool.as_deref(), principal).await?;
        ensure!(
            listed
                == [
                    "Cluster:LITERAL:kafka-cluster Describe DENY 10.0.0.1",
                    "Topic:LITERAL:dave-topic Read ALLOW *",
                    "TransactionalId:PREFIXED:dave- IdempotentWrite ALLOW *",
                ],
            "kafka-acls lists {listed:?}"
        );

        // Deleted by us, removed with kafka-acls: both gone for both.
        ensure!(admin.delete_acls(std::slice::from_ref(&read)).await? == [Ok(1)]);
        kafka::remove_acl(
            &binaries,
            &bootstrap,
            tool.as_deref(),
            principal,
            "Cluster:LITERAL:kafka-cluster Describe DENY 10.0.0.1",
        )
        .await?;
        wait_acls(&admin, principal, std::slice::from_ref(&idempotent)).await?;
        let listed = kafka::acls_of(&binaries, &bootstrap, tool.as_deref(), principal).await?;
        ensure!(
            listed == ["TransactionalId:PREFIXED:dave- IdempotentWrite ALLOW *"],
            "kafka-acls lists {listed:?}"
        );
        Ok(())
    });
}
