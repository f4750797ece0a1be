//! FederatedKafkaUsers end to end: objects and Secrets on the management kube-apiserver →
//! the real hub → real agents → three real Kafka clusters whose brokers enforce ACLs
//! (KRaft's `StandardAuthorizer`, nothing allowed without an ACL, the agents' SCRAM user a
//! super user). Every claim is checked in Kafka itself: a producer authenticating as the
//! user (Kafka's own `kafka-verifiable-producer`), `kafka-acls --list` and
//! `kafka-configs --describe`, as well as through the object's status.
//!
//! The Kafka clusters are started once for the whole binary; each test runs its own hub
//! and agents against them, one test at a time, with user and topic names of its own.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use accord_crds::PlacementState;
use accord_e2e::kafka::{ClusterOptions, KafkaCluster, KafkaOptions};
use accord_e2e::kafka_topic_scenario::{
    self as ks, KafkaMember, KafkaScenario, KafkaScenarioOptions,
};
use accord_e2e::kafka_user_scenario::{self as us, Sent};
use accord_e2e::leaks;
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use accord_kafka::{Admin, KafkaConfig, NewTopic};
use anyhow::{Context as _, Result, ensure};
use serde_json::json;
use tokio::sync::OnceCell;

static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(3));
/// Three single-broker Kafka clusters with SASL_SSL and the authorizer.
static KAFKAS: OnceCell<Vec<KafkaCluster>> = OnceCell::const_new();
/// One scenario at a time: they share the brokers, and two cores.
static SERIAL: Mutex<()> = Mutex::new(());
/// How long a change may take to reach every member.
const WAIT: Duration = Duration::from_secs(90);
/// The agents' resync interval: out-of-band changes must be repaired within it.
const RESYNC: Duration = Duration::from_secs(5);
/// How long a client may keep seeing the brokers' previous state (ACLs and credentials
/// reach every broker's cache asynchronously).
const SETTLE: Duration = Duration::from_secs(30);

async fn kafkas(testbed: &'static Testbed) -> Result<&'static [KafkaCluster]> {
    KAFKAS
        .get_or_try_init(|| async {
            let mut clusters = Vec::new();
            for member in 0..3 {
                clusters.push(
                    ks::start_kafka(
                        testbed,
                        member,
                        ClusterOptions {
                            shape: KafkaOptions {
                                brokers: 1,
                                sasl_ssl: true,
                                ..KafkaOptions::default()
                            },
                            authorizer: true,
                        },
                    )
                    .await?,
                );
            }
            anyhow::Ok(clusters)
        })
        .await
        .map(Vec::as_slice)
}

/// Runs `test` with the shared testbed, the Kafka clusters and a scenario of its own.
fn run<F>(name: &'static str, test: F)
where
    F: for<'a> AsyncFnOnce(&'a KafkaScenario<'static>, &'static [KafkaCluster]) -> Result<()>,
{
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(async move |testbed: &'static Testbed| {
        let kafkas = kafkas(testbed).await?;
        let members = kafkas
            .iter()
            .enumerate()
            .map(|(member, kafka)| KafkaMember {
                member,
                kafka,
                sasl: true,
            })
            .collect();
        let scenario = KafkaScenario::start(
            testbed,
            KafkaScenarioOptions {
                name,
                members,
                resync: RESYNC,
                deletion_timeout: Some(Duration::from_secs(120)),
                webhook: false,
            },
        )
        .await?;
        test(&scenario, kafkas).await
    });
}

/// Creates `topics` (1 partition) in every cluster as the super user, if not there yet.
async fn create_topics(kafkas: &[KafkaCluster], topics: &[&str]) -> Result<()> {
    for kafka in kafkas {
        let admin = Admin::new(KafkaConfig::plaintext(kafka.bootstrap.split(',')));
        let new: Vec<NewTopic> = topics
            .iter()
            .map(|t| NewTopic {
                name: (*t).to_owned(),
                partitions: 1,
                replication_factor: 1,
                config: Default::default(),
            })
            .collect();
        let results = admin.create_topics(&new).await?;
        for (topic, result) in results {
            if let Err(e) = result {
                ensure!(e.is_already_exists(), "creating {topic}: {e}");
            }
        }
    }
    Ok(())
}

/// The spec of a user `username` with the contract's example ACLs and quotas.
fn spec(username: &str, secret: Option<&str>, clusters: &[String]) -> serde_json::Value {
    let mut authentication = json!({"type": "scram-sha-512", "iterations": 4096});
    if let Some(secret) = secret {
        authentication["passwordSecretRef"] = json!({"name": secret, "key": "password"});
    }
    json!({
        "userName": username,
        "authentication": authentication,
        "acls": [
            {"resource": {"type": "topic", "name": format!("{username}."), "patternType": "prefixed"},
             "operations": ["Write", "Describe"], "host": "*", "type": "allow"},
            {"resource": {"type": "group", "name": format!("{username}-app")}, "operations": ["Read"]},
        ],
        "quotas": {"producerByteRate": 1048576, "consumerByteRate": 2097152,
                   "requestPercentage": 50, "controllerMutationRate": 10},
        "placement": {"clusters": clusters},
    })
}

/// Waits until, in every cluster, `username` with `password` may write to `allowed` and is
/// refused on `denied` by the topic's ACLs.
async fn wait_access(
    testbed: &Testbed,
    kafkas: &[KafkaCluster],
    username: &str,
    password: &str,
    allowed: &str,
    denied: &str,
) -> Result<()> {
    for kafka in kafkas {
        us::wait_send(
            testbed,
            kafka,
            username,
            password,
            allowed,
            Sent::Acked,
            SETTLE,
        )
        .await?;
        us::wait_send(
            testbed,
            kafka,
            username,
            password,
            denied,
            Sent::TopicDenied,
            SETTLE,
        )
        .await?;
    }
    Ok(())
}

#[test]
fn a_user_writes_where_its_acls_allow_in_every_member_and_a_rotated_password_replaces_the_old() {
    run("fku-access", async |s, kafkas| {
        let testbed = s.testbed;
        let ns = "fku-access";
        let (user, password) = ("orders", "fku-e2e-password-0b7d2c41");
        us::put_password(testbed, ns, "orders-credentials", password).await?;
        us::apply_user(
            testbed,
            ns,
            "orders",
            spec(user, Some("orders-credentials"), &s.clusters),
        )
        .await?;
        let synced = us::wait_synced(testbed, ns, "orders", &s.clusters, WAIT).await?;
        let status = synced.status.context("no status")?;
        for p in &status.placements {
            ensure!(p.acls == Some(3), "{p:?}: 3 bindings (2 operations + 1)");
            ensure!(p.quotas == Some(4), "{p:?}");
            ensure!(
                p.credential_hash.as_deref().is_some_and(|h| h.len() == 12),
                "{p:?}"
            );
        }
        create_topics(kafkas, &["orders.x", "payments.x"]).await?;
        wait_access(testbed, kafkas, user, password, "orders.x", "payments.x").await?;
        for kafka in kafkas {
            let wrong = us::send_as(testbed, kafka, user, "not-the-password", "orders.x").await?;
            ensure!(
                wrong == Sent::AuthenticationFailed,
                "a wrong password: {wrong:?}"
            );
            let acls = us::acls(testbed, kafka, "User:orders").await?;
            ensure!(acls.len() == 3, "kafka-acls lists {acls:?}");
            let quotas = us::quotas(testbed, kafka, user).await?;
            ensure!(
                quotas.get("producer_byte_rate") == Some(&1_048_576.0)
                    && quotas.get("request_percentage") == Some(&50.0)
                    && quotas.len() == 4,
                "kafka-configs shows {quotas:?}"
            );
        }

        // The password is in no key of the hub's etcd, no component's log and no status.
        let dump = leaks::hub_etcd_dump(testbed, &format!("/e2e-{}/", s.name)).await?;
        ensure!(
            dump.iter().any(|(k, _)| k.contains("FederatedKafkaUser")),
            "no record"
        );
        let stored: Vec<&String> = dump
            .iter()
            .filter(|(_, v)| v.contains(password))
            .map(|(k, _)| k)
            .collect();
        ensure!(stored.is_empty(), "the password is stored under {stored:?}");
        let logged = leaks::logged(testbed, password)?;
        ensure!(logged.is_empty(), "the password is logged: {logged:?}");
        ensure!(
            !serde_json::to_string(&status)?.contains(password),
            "the password is in the status"
        );

        // Rotated in the management Secret: the old one refused, the new one accepted, in
        // every member.
        let rotated = "fku-e2e-password-rotated-9e51";
        let started = Instant::now();
        us::put_password(testbed, ns, "orders-credentials", rotated).await?;
        for kafka in kafkas {
            us::wait_send(
                testbed,
                kafka,
                user,
                rotated,
                "orders.x",
                Sent::Acked,
                SETTLE,
            )
            .await?;
        }
        let rotation = started.elapsed();
        for kafka in kafkas {
            let old = us::send_as(testbed, kafka, user, password, "orders.x").await?;
            ensure!(
                old == Sent::AuthenticationFailed,
                "the old password: {old:?}"
            );
        }
        println!("password rotated → new password accepted in all 3 members after {rotation:?}");
        let logged = leaks::logged(testbed, rotated)?;
        ensure!(
            logged.is_empty(),
            "the rotated password is logged: {logged:?}"
        );
        Ok(())
    });
}

#[test]
fn acls_and_quotas_changed_out_of_band_are_repaired_and_other_principals_never_touched() {
    run("fku-repair", async |s, kafkas| {
        let testbed = s.testbed;
        let ns = "fku-repair";
        us::put_password(testbed, ns, "audit-credentials", "fku-e2e-repair-pw").await?;
        us::apply_user(
            testbed,
            ns,
            "audit",
            spec("audit", Some("audit-credentials"), &s.clusters),
        )
        .await?;
        us::wait_synced(testbed, ns, "audit", &s.clusters, WAIT).await?;
        let kafka = &kafkas[0];
        let (bootstrap, props) = us::admin_tool(kafka)?;
        let binaries = testbed.binaries();
        let mine = us::acls(testbed, kafka, "User:audit").await?;
        let taken = mine
            .iter()
            .find(|a| a.contains("Write"))
            .context("no Write ACL")?
            .clone();
        let other = "Topic:LITERAL:audit.shared Read ALLOW *";
        accord_e2e::kafka::add_acl(binaries, bootstrap, props.as_deref(), "User:bob", other)
            .await?;
        // Three rounds: the ACL removed behind the agent's back comes back within the
        // resync interval each time, and bob's, which no FederatedKafkaUser names, stays.
        for round in 0..3 {
            accord_e2e::kafka::remove_acl(
                binaries,
                bootstrap,
                props.as_deref(),
                "User:audit",
                &taken,
            )
            .await?;
            let removed = Instant::now();
            until(
                &format!("round {round}: {taken} restored"),
                RESYNC * 3 + SETTLE,
                || async {
                    let now = us::acls(testbed, kafka, "User:audit").await?;
                    Ok(if now.contains(&taken) {
                        Check::Ready(())
                    } else {
                        Check::NotYet(format!("{now:?}"))
                    })
                },
            )
            .await?;
            println!(
                "round {round}: removed ACL restored after {:?}",
                removed.elapsed()
            );
            let bob = us::acls(testbed, kafka, "User:bob").await?;
            ensure!(bob == [other.to_owned()], "bob's ACLs changed: {bob:?}");
        }

        // A quota removed from the spec is removed on the brokers; the others stay.
        let mut fewer = spec("audit", Some("audit-credentials"), &s.clusters);
        fewer["quotas"] = json!({"producerByteRate": 1048576});
        us::apply_user(testbed, ns, "audit", fewer).await?;
        for kafka in kafkas {
            until("only producer_byte_rate left", SETTLE + RESYNC, || async {
                let q = us::quotas(testbed, kafka, "audit").await?;
                Ok(if q.len() == 1 && q.contains_key("producer_byte_rate") {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("{q:?}"))
                })
            })
            .await?;
        }
        accord_e2e::kafka::remove_acl(binaries, bootstrap, props.as_deref(), "User:bob", other)
            .await?;
        Ok(())
    });
}

#[test]
fn delete_removes_the_user_everywhere_retain_leaves_it_and_a_generated_password_works() {
    run("fku-lifecycle", async |s, kafkas| {
        let testbed = s.testbed;
        let ns = "fku-lifecycle";
        // No passwordSecretRef: the hub generates the Secret named like the object.
        us::apply_user(testbed, ns, "gen", spec("gen", None, &s.clusters)).await?;
        us::wait_synced(testbed, ns, "gen", &s.clusters, WAIT).await?;
        let generated = us::read_password(testbed, ns, "gen")
            .await?
            .context("no generated Secret")?;
        ensure!(
            generated.len() == 32,
            "a 32-character password, not {}",
            generated.len()
        );
        create_topics(kafkas, &["gen.x", "other.x", "kept.x"]).await?;
        wait_access(testbed, kafkas, "gen", &generated, "gen.x", "other.x").await?;
        let leaked = leaks::logged(testbed, &generated)?;
        ensure!(
            leaked.is_empty(),
            "the generated password is logged: {leaked:?}"
        );

        // A cluster leaving the selection (Delete): the user is removed there, kept in the
        // others.
        us::apply_user(testbed, ns, "gen", spec("gen", None, &s.clusters[..2])).await?;
        us::wait_send(
            testbed,
            &kafkas[2],
            "gen",
            &generated,
            "gen.x",
            Sent::AuthenticationFailed,
            SETTLE,
        )
        .await?;
        until("the left cluster's ACLs removed", SETTLE, || async {
            let left = us::acls(testbed, &kafkas[2], "User:gen").await?;
            Ok(if left.is_empty() {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{left:?}"))
            })
        })
        .await?;
        us::wait_placements(
            testbed,
            ns,
            "gen",
            &s.clusters[..2],
            "Synced in the two left",
            WAIT,
            |p| p.state == PlacementState::Synced,
        )
        .await?;
        let kept = us::send_as(testbed, &kafkas[0], "gen", &generated, "gen.x").await?;
        ensure!(
            kept == Sent::Acked,
            "the selected cluster lost the user: {kept:?}"
        );

        // Delete (the default): credential, ACLs and quotas gone in every member.
        us::delete_user(testbed, ns, "gen").await?;
        us::wait_gone(testbed, ns, "gen", WAIT).await?;
        for kafka in &kafkas[..2] {
            ensure!(
                us::acls(testbed, kafka, "User:gen").await?.is_empty(),
                "ACLs left"
            );
            ensure!(
                us::quotas(testbed, kafka, "gen").await?.is_empty(),
                "quotas left"
            );
            us::wait_send(
                testbed,
                kafka,
                "gen",
                &generated,
                "gen.x",
                Sent::AuthenticationFailed,
                SETTLE,
            )
            .await?;
        }

        // Retain: everything stays.
        us::put_password(testbed, ns, "kept-credentials", "fku-e2e-kept-pw").await?;
        let mut kept = spec("kept", Some("kept-credentials"), &s.clusters);
        kept["deletionPolicy"] = json!("Retain");
        us::apply_user(testbed, ns, "kept", kept).await?;
        us::wait_synced(testbed, ns, "kept", &s.clusters, WAIT).await?;
        us::delete_user(testbed, ns, "kept").await?;
        us::wait_gone(testbed, ns, "kept", WAIT).await?;
        for kafka in kafkas {
            ensure!(
                us::acls(testbed, kafka, "User:kept").await?.len() == 3,
                "ACLs removed"
            );
            let outcome = us::send_as(testbed, kafka, "kept", "fku-e2e-kept-pw", "kept.x").await?;
            ensure!(outcome == Sent::Acked, "Retain: {outcome:?}");
        }
        Ok(())
    });
}

#[test]
fn of_two_users_naming_one_kafka_user_the_older_keeps_it() {
    run("fku-conflict", async |s, _kafkas| {
        let testbed = s.testbed;
        let ns = "fku-conflict";
        us::put_password(testbed, ns, "shared-credentials", "fku-e2e-shared-pw").await?;
        us::apply_user(
            testbed,
            ns,
            "first",
            spec("shared", Some("shared-credentials"), &s.clusters),
        )
        .await?;
        us::wait_synced(testbed, ns, "first", &s.clusters, WAIT).await?;
        us::apply_user(
            testbed,
            ns,
            "second",
            spec("shared", Some("shared-credentials"), &s.clusters),
        )
        .await?;
        us::wait_placements(
            testbed,
            ns,
            "second",
            &s.clusters,
            "Conflict naming the first",
            WAIT,
            |p| {
                p.state == PlacementState::Conflict
                    && p.message
                        .as_deref()
                        .is_some_and(|m| m.contains(&format!("{ns}/first")))
            },
        )
        .await?;
        // The older one is untouched by the newer.
        us::wait_synced(testbed, ns, "first", &s.clusters, WAIT).await?;
        // Once the owner goes, the newer takes the name over.
        us::delete_user(testbed, ns, "first").await?;
        us::wait_gone(testbed, ns, "first", WAIT).await?;
        us::wait_synced(testbed, ns, "second", &s.clusters, WAIT).await?;
        Ok(())
    });
}
