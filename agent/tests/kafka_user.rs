//! The Kafka user enforcer against a real Kafka broker (KRaft, a SASL_SSL SCRAM-SHA-512
//! listener, and the ACL authorizer: only ACLs let a user do anything) and a real
//! kube-apiserver holding the connection Secret and the saved assignments, driven by a hub
//! the test plays. What the enforcer did is checked in Kafka by another client (the
//! PLAINTEXT listener, whose anonymous principal is a super user), by the users themselves
//! logging in with their passwords, and by Kafka's own `kafka-configs`. Each test works in
//! its own agent namespace and user names.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use accord_agent::enforce::kafka::KafkaOptions;
use accord_agent::enforce::kafka_user::KafkaUserEnforcer;
use accord_agent::engine::{self, CoreConfig, EngineTask};
use accord_agent::metrics::Metrics;
use accord_agent::persist::ConfigMapStore;
use accord_common::distribution::{
    AssignmentSpec, KafkaAcl, KafkaUserSpec, SCRAM_SHA_512, ScramCredential,
};
use accord_e2e::binaries::Binaries;
use accord_e2e::kafka::{self, KafkaCluster};
use accord_e2e::wait::{self, Check};
use accord_e2e::{SharedTestbed, Testbed};
use accord_kafka::{
    AclBinding, AclFilter, AclOperation, AclPatternType, AclPermission, AclResourceType, Admin,
    KafkaConfig, NewTopic, QuotaAlteration, ScramDeletion, ScramMechanism, ScramUpsertion,
};
use accord_proto::v1::{
    Assignment, KafkaUserStatus, ObjectRef, PlacementState, StatusReport, status_report,
};
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use support::*;
use tokio::sync::OnceCell;

static TESTBED: SharedTestbed = SharedTestbed::new(|b| {
    b.members(0)
        .without_crds()
        .without_mgmt_controller_manager()
});

/// The resync interval of these tests: drift must be repaired within it.
const RESYNC: Duration = Duration::from_secs(2);
/// How long Kafka may take to show what the enforcer did.
const SETTLE: Duration = Duration::from_secs(30);
/// PBKDF2 iterations of the credentials the test hub sends.
const ITERATIONS: i32 = 8192;

/// One broker with the ACL authorizer, shared by every test of this binary.
static KAFKA: OnceCell<Result<kafka::SupervisedKafka, String>> = OnceCell::const_new();

/// Runs one test against the shared testbed and broker, printing the broker's log tail on
/// failure.
fn run<F, Fut>(test: F)
where
    F: FnOnce(&'static Testbed, &'static kafka::SupervisedKafka) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "accord_agent=debug".into()),
        )
        .with_test_writer()
        .try_init();
    TESTBED.run(|testbed| async move {
        let started = KAFKA
            .get_or_init(|| async {
                let options = kafka::KafkaOptions {
                    brokers: 1,
                    sasl_ssl: true,
                    ..kafka::KafkaOptions::default()
                };
                let dir = testbed.dir().join("kafka-users");
                kafka::SupervisedKafka::start(&dir, None, "users", options.with_authorizer())
                    .await
                    .map_err(|e| format!("{e:#}"))
            })
            .await;
        let bed = match started {
            Ok(bed) => bed,
            Err(e) => anyhow::bail!("the Kafka broker did not start: {e}"),
        };
        test(testbed, bed)
            .await
            .map_err(|e| anyhow::anyhow!("{e:#}\n{}", bed.supervisor.log_tails(20)))
    });
}

/// Writes the Kafka connection Secret `accord-kafka` in `namespace`.
async fn connection_secret(
    client: &kube::Client,
    namespace: &str,
    data: BTreeMap<String, String>,
) -> Result<()> {
    let secret = Secret {
        metadata: kube::core::ObjectMeta {
            name: Some("accord-kafka".into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        string_data: Some(data),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), namespace)
        .patch(
            "accord-kafka",
            &PatchParams::apply(USER_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        .context("writing the Kafka connection Secret")?;
    Ok(())
}

/// An engine with only the Kafka user enforcer, its state and connection Secret in
/// `agent_ns` (which must exist).
async fn user_engine(client: &kube::Client, agent_ns: &str) -> Result<(EngineTask, Metrics)> {
    let metrics = Metrics::new();
    let options = KafkaOptions {
        resync: RESYNC,
        ..KafkaOptions::default()
    };
    let enforcer = KafkaUserEnforcer::new(
        client.clone(),
        agent_ns.to_owned(),
        options,
        metrics.clone(),
    );
    let core = CoreConfig {
        cluster: "member-1".to_owned(),
        report_debounce: Duration::from_millis(50),
    };
    let store = Arc::new(ConfigMapStore::new(client.clone(), agent_ns));
    let task = engine::start_with(core, store, vec![Box::new(enforcer)], metrics.clone());
    tokio::time::timeout(WAIT, task.handle().wait_loaded())
        .await
        .context("the engine did not load its saved state")?;
    Ok((task, metrics))
}

/// The agent's requests of `kind` to Kafka so far.
fn requests(metrics: &Metrics, kind: &str) -> f64 {
    let text = metrics.encode();
    let series = format!("accord_agent_kafka_requests_total{{request=\"{kind}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(series.as_str()))
        .and_then(|value| value.parse().ok())
        .unwrap_or(0.0)
}

/// The credential of `username` with `password` as the hub derives it (salted password
/// included, as on the stream).
fn credential(username: &str, password: &str) -> ScramCredential {
    let salt = format!("salt-of-{username}").into_bytes();
    let salted = accord_kafka::salted_password(
        ScramMechanism::Sha512,
        password.as_bytes(),
        &salt,
        ITERATIONS as u32,
    );
    ScramCredential {
        mechanism: SCRAM_SHA_512.into(),
        iterations: ITERATIONS,
        hash: ScramCredential::hash_of(SCRAM_SHA_512, ITERATIONS, &salt, &salted),
        salt,
        salted_password: salted,
        secret_name: format!("{username}-password"),
        secret_key: "password".into(),
    }
}

/// A literal ACL allowing `operation` on `resource_type` `name`, from any host.
fn allow(resource_type: &str, name: &str, operation: &str) -> KafkaAcl {
    KafkaAcl {
        resource_type: resource_type.into(),
        resource_name: name.into(),
        pattern_type: "Literal".into(),
        operation: operation.into(),
        host: "*".into(),
        permission: "Allow".into(),
    }
}

/// The binding of `acl` for `principal`, as Kafka holds it.
fn binding(principal: &str, acl: &KafkaAcl) -> AclBinding {
    AclBinding {
        resource_type: acl.resource_type.parse().unwrap(),
        resource_name: acl.resource_name.clone(),
        pattern_type: acl.pattern_type.parse().unwrap(),
        principal: principal.into(),
        host: acl.host.clone(),
        operation: acl.operation.parse().unwrap(),
        permission: acl.permission.parse().unwrap(),
    }
}

fn user(
    username: &str,
    password: &str,
    acls: Vec<KafkaAcl>,
    quotas: &[(&str, f64)],
) -> KafkaUserSpec {
    KafkaUserSpec {
        username: username.into(),
        credential: Some(credential(username, password)),
        acls,
        quotas: quotas.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        remove: false,
    }
}

/// The assignment of FederatedKafkaUser `default/<username>` at `revision`.
fn item(revision: i64, spec: &KafkaUserSpec) -> Assignment {
    Assignment {
        placed: Some(ObjectRef {
            kind: "FederatedKafkaUser".into(),
            namespace: "default".into(),
            name: spec.username.clone(),
        }),
        revision,
        spec: Some(AssignmentSpec::KafkaUser(spec.clone()).to_proto()),
        traceparent: String::new(),
    }
}

fn observed(report: &StatusReport) -> Option<&KafkaUserStatus> {
    match &report.observed {
        Some(status_report::Observed::KafkaUser(u)) => Some(u),
        _ => None,
    }
}

/// Synced with everything `spec` asks for in place (its credential put there by this
/// agent).
fn synced_as(report: &StatusReport, spec: &KafkaUserSpec) -> bool {
    let hash = spec.credential.as_ref().map(|c| c.hash.as_str());
    report.state() == PlacementState::Synced
        && observed(report).is_some_and(|o| {
            Some(o.credential_hash.as_str()) == hash
                && o.acls as usize == spec.acls.len()
                && o.quotas as usize == spec.quotas.len()
        })
}

/// An admin client acting as someone else changing Kafka by hand (the PLAINTEXT listener's
/// principal is a super user).
fn someone_else(cluster: &KafkaCluster) -> Admin {
    Admin::new(KafkaConfig::plaintext(cluster.bootstrap.split(',')))
}

/// What the brokers hold of `username`: its SCRAM-SHA-512 iterations, its principal's
/// bindings, its quotas.
async fn held(
    admin: &Admin,
    username: &str,
) -> Result<(Option<i32>, BTreeSet<AclBinding>, BTreeMap<String, f64>)> {
    let name = [username.to_owned()];
    let iterations = admin
        .describe_user_scram_credentials(Some(&name))
        .await?
        .remove(username)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.mechanism == ScramMechanism::Sha512)
        .map(|c| c.iterations);
    let acls = admin
        .describe_acls(&AclFilter {
            principal: Some(format!("User:{username}")),
        })
        .await?
        .into_iter()
        .collect();
    let quotas = admin
        .describe_client_quotas(Some(&name))
        .await?
        .remove(username)
        .unwrap_or_default();
    Ok((iterations, acls, quotas))
}

/// Waits until what the brokers hold of `username` satisfies `ok`.
async fn until_held(
    admin: &Admin,
    username: &str,
    what: &str,
    ok: impl Fn(&(Option<i32>, BTreeSet<AclBinding>, BTreeMap<String, f64>)) -> bool,
) -> Result<()> {
    wait::until(what, SETTLE, || async {
        let now = held(admin, username).await?;
        Ok(if ok(&now) {
            Check::Ready(())
        } else {
            Check::NotYet(format!("Kafka holds {now:?}"))
        })
    })
    .await
}

/// Whether `username` logging in with `password` sees `topic` in the metadata (it needs an
/// ACL on the topic for that).
async fn sees_topic(
    cluster: &KafkaCluster,
    username: &str,
    password: &str,
    topic: &str,
) -> Result<bool> {
    let admin = Admin::new(cluster.sasl_config_as(username, password)?);
    Ok(admin
        .describe_topics(&[topic.to_owned()])
        .await
        .with_context(|| format!("{username} logging in"))?
        .contains_key(topic))
}

/// Waits until the agent has looked at Kafka `looks` more times.
async fn more_looks(metrics: &Metrics, looks: f64) -> Result<()> {
    let from = requests(metrics, "describe_acls");
    wait::until(
        "more looks at Kafka",
        RESYNC * (looks as u32 + 2),
        || async {
            let now = requests(metrics, "describe_acls");
            Ok(if now >= from + looks {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{now} looks, from {from}"))
            })
        },
    )
    .await
}

#[test]
fn users_get_credentials_acls_and_quotas_drift_is_repaired_and_other_principals_are_untouched() {
    run(|testbed, bed| async move {
        let cluster = bed.cluster.read().await;
        let client = testbed.mgmt().client();
        let agent_ns = "ku-users";
        namespace(&client, agent_ns).await?;
        connection_secret(&client, agent_ns, cluster.secret_data(true)).await?;
        let admin = someone_else(&cluster);
        let topic = "ku-orders";
        let created = admin
            .create_topics(&[NewTopic {
                name: topic.into(),
                partitions: 1,
                replication_factor: 1,
                config: BTreeMap::new(),
            }])
            .await?;
        ensure!(created[topic].is_ok(), "{created:?}");
        // Someone else's principal, and a binding of alice's that no assignment names.
        let bystander = binding("User:ku-bystander", &allow("Topic", topic, "Read"));
        let stray = binding("User:ku-alice", &allow("Topic", "ku-payments", "Write"));
        let added = admin
            .create_acls(&[bystander.clone(), stray.clone()])
            .await?;
        ensure!(added.iter().all(Result::is_ok), "{added:?}");

        let alice = user(
            "ku-alice",
            "alice-secret-0x5eed",
            vec![
                allow("Topic", topic, "Read"),
                KafkaAcl {
                    pattern_type: "Prefixed".into(),
                    ..allow("Group", "ku-alice-", "Read")
                },
            ],
            &[
                ("producer_byte_rate", 1_048_576.0),
                ("consumer_byte_rate", 2_097_152.0),
            ],
        );
        let bob = user(
            "ku-bob",
            "bob-secret-0x5eed",
            vec![allow("Topic", "ku-other", "Write")],
            &[("request_percentage", 50.0)],
        );
        let (engine, metrics) = user_engine(&client, agent_ns).await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        hub.assign(10, true, vec![item(10, &alice), item(10, &bob)], vec![])
            .await;
        hub.report_until("ku-alice", "alice Synced", |r| synced_as(r, &alice))
            .await?;
        hub.report_until("ku-bob", "bob Synced", |r| synced_as(r, &bob))
            .await?;

        let (iterations, acls, quotas) = held(&admin, "ku-alice").await?;
        ensure!(iterations == Some(ITERATIONS), "{iterations:?}");
        let wanted: BTreeSet<AclBinding> = alice
            .acls
            .iter()
            .map(|a| binding("User:ku-alice", a))
            .collect();
        ensure!(
            acls == wanted,
            "alice's bindings, the stray one gone: {acls:#?}"
        );
        ensure!(quotas == alice.quotas, "{quotas:?}");
        let (iterations, _, quotas) = held(&admin, "ku-bob").await?;
        ensure!(
            iterations == Some(ITERATIONS) && quotas == bob.quotas,
            "{quotas:?}"
        );
        // Kafka's own tool reads the same quotas.
        let binaries = Binaries::locate()?;
        let by_tool = kafka::user_quotas(&binaries, &cluster.bootstrap, None, "ku-alice").await?;
        ensure!(by_tool == alice.quotas, "kafka-configs says {by_tool:?}");
        // The users log in with their passwords; alice's ACL lets her see the topic, bob
        // (no ACL on it) does not.
        wait::until("alice to see her topic", SETTLE, || async {
            Ok(
                if sees_topic(&cluster, "ku-alice", "alice-secret-0x5eed", topic).await? {
                    Check::Ready(())
                } else {
                    Check::NotYet("not in alice's metadata".into())
                },
            )
        })
        .await?;
        ensure!(
            !sees_topic(&cluster, "ku-bob", "bob-secret-0x5eed", topic).await?,
            "bob sees a topic no ACL allows him"
        );

        // Nothing changes: looks go on, and nothing is applied again.
        let changes = [
            "alter_user_scram_credentials",
            "create_acls",
            "delete_acls",
            "alter_client_quotas",
        ];
        let before: Vec<f64> = changes.iter().map(|k| requests(&metrics, k)).collect();
        more_looks(&metrics, 2.0).await?;
        let after: Vec<f64> = changes.iter().map(|k| requests(&metrics, k)).collect();
        ensure!(
            before == after,
            "something was applied again:\n{}",
            metrics.encode()
        );
        for kind in ["describe_user_scram_credentials", "describe_client_quotas"] {
            ensure!(
                requests(&metrics, kind) == requests(&metrics, "describe_acls"),
                "one look, three requests:\n{}",
                metrics.encode()
            );
        }

        // Out of band: one of alice's bindings deleted, a quota key set for bob, bob's
        // credential deleted. Each is repaired within a resync interval or so.
        let read = binding("User:ku-alice", &alice.acls[0]);
        let deleted = admin.delete_acls(std::slice::from_ref(&read)).await?;
        ensure!(matches!(deleted.as_slice(), [Ok(1)]), "{deleted:?}");
        let set = admin
            .alter_client_quotas(&[QuotaAlteration {
                user: "ku-bob".into(),
                set: BTreeMap::from([("consumer_byte_rate".to_owned(), 1.0)]),
                remove: Vec::new(),
            }])
            .await?;
        ensure!(set["ku-bob"].is_ok(), "{set:?}");
        let gone = admin
            .alter_user_scram_credentials(
                &[],
                &[ScramDeletion {
                    user: "ku-bob".into(),
                    mechanism: ScramMechanism::Sha512,
                }],
            )
            .await?;
        ensure!(gone["ku-bob"].is_ok(), "{gone:?}");
        let changed_at = tokio::time::Instant::now();
        until_held(
            &admin,
            "ku-alice",
            "alice's binding restored",
            |(_, acls, _)| acls.contains(&read),
        )
        .await?;
        until_held(
            &admin,
            "ku-bob",
            "bob repaired",
            |(iterations, _, quotas)| *iterations == Some(ITERATIONS) && *quotas == bob.quotas,
        )
        .await?;
        let repaired_in = changed_at.elapsed();
        // Within a resync interval, plus what a look, an apply and these checks take.
        ensure!(
            repaired_in < RESYNC + Duration::from_secs(5),
            "repaired in {repaired_in:?}, resync {RESYNC:?}"
        );
        ensure!(
            sees_topic(&cluster, "ku-bob", "bob-secret-0x5eed", "ku-other")
                .await
                .is_ok(),
            "bob logs in with the credential upserted again"
        );
        // Another principal's binding is never touched.
        let theirs = admin
            .describe_acls(&AclFilter {
                principal: Some("User:ku-bystander".into()),
            })
            .await?;
        ensure!(theirs == vec![bystander], "{theirs:?}");
        let reports = format!("{:?}", hub.reports);
        ensure!(
            !reports.contains("alice-secret") && !reports.contains("bob-secret"),
            "a password reached a report"
        );
        eprintln!("drift repaired in {repaired_in:?}");
        engine.stop().await;
        Ok(())
    });
}

#[test]
fn twenty_users_take_one_request_of_each_kind_and_are_removed_the_same_way() {
    run(|testbed, bed| async move {
        let cluster = bed.cluster.read().await;
        let client = testbed.mgmt().client();
        let agent_ns = "ku-batch";
        namespace(&client, agent_ns).await?;
        connection_secret(&client, agent_ns, cluster.secret_data(true)).await?;
        let (engine, metrics) = user_engine(&client, agent_ns).await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        let specs: Vec<KafkaUserSpec> = (0..20)
            .map(|i| {
                let name = format!("ku-batch-{i:02}");
                let acl = allow("Topic", &name, "Read");
                user(
                    &name,
                    "batch-secret",
                    vec![acl],
                    &[("producer_byte_rate", 1024.0)],
                )
            })
            .collect();
        let names: Vec<String> = specs.iter().map(|s| s.username.clone()).collect();
        hub.assign(
            20,
            true,
            specs.iter().map(|s| item(20, s)).collect(),
            vec![],
        )
        .await;
        let spec_of = |r: &StatusReport| {
            let name = r.placed.as_ref().map(|p| p.name.clone());
            specs.iter().find(|s| Some(&s.username) == name.as_ref())
        };
        hub.reports_until_each(&names, "Synced", |r| {
            spec_of(r).is_some_and(|s| synced_as(r, s))
        })
        .await?;
        let count = |kind: &str| requests(&metrics, kind);
        // 20 users arrive as 20 applies at once: they go out together (in one request of
        // each kind unless the engine's pass is preempted for longer than the applier's
        // window, which on a busy test machine it may be).
        let report = format!(
            "AlterUserScramCredentials {}, CreateAcls {}, AlterClientQuotas {}, DeleteAcls {}",
            count("alter_user_scram_credentials"),
            count("create_acls"),
            count("alter_client_quotas"),
            count("delete_acls"),
        );
        eprintln!("20 users: {report}");
        for kind in [
            "alter_user_scram_credentials",
            "create_acls",
            "alter_client_quotas",
        ] {
            ensure!((1.0..=3.0).contains(&count(kind)), "{report}");
        }
        ensure!(count("delete_acls") == 0.0, "nothing to delete: {report}");
        let admin = someone_else(&cluster);
        let credentials = admin.describe_user_scram_credentials(Some(&names)).await?;
        ensure!(credentials.len() == 20, "{:?}", credentials.keys());

        // Removal: credential, bindings and quotas of every user, in a round again.
        let before = (
            count("alter_user_scram_credentials"),
            count("delete_acls"),
            count("alter_client_quotas"),
        );
        let removals = names
            .iter()
            .map(|name| {
                item(
                    21,
                    &KafkaUserSpec {
                        username: name.clone(),
                        remove: true,
                        ..KafkaUserSpec::default()
                    },
                )
            })
            .collect();
        hub.assign(21, true, removals, vec![]).await;
        let reports = hub
            .reports_until_each(&names, "removed", |r| {
                r.state() == PlacementState::Synced
                    && r.applied_revision == 21
                    && observed(r).is_some_and(|o| o.removed)
            })
            .await?;
        ensure!(
            reports.iter().all(|r| r.message == "removed"),
            "{reports:?}"
        );
        let after = (
            count("alter_user_scram_credentials"),
            count("delete_acls"),
            count("alter_client_quotas"),
        );
        ensure!(
            (1.0..=3.0).contains(&(after.0 - before.0))
                && (1.0..=3.0).contains(&(after.1 - before.1))
                && (1.0..=3.0).contains(&(after.2 - before.2)),
            "removing 20 users took {before:?} -> {after:?} requests"
        );
        for name in [&names[0], &names[19]] {
            let now = held(&admin, name).await?;
            ensure!(
                now == (None, BTreeSet::new(), BTreeMap::new()),
                "{name}: {now:?}"
            );
        }
        engine.stop().await;
        Ok(())
    });
}

#[test]
fn an_agent_kafka_user_without_cluster_acls_is_told_which_acl_it_lacks() {
    run(|testbed, bed| async move {
        let cluster = bed.cluster.read().await;
        let client = testbed.mgmt().client();
        let agent_ns = "ku-acl";
        namespace(&client, agent_ns).await?;
        let (engine, _metrics) = user_engine(&client, agent_ns).await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        let carol = user(
            "ku-carol",
            "carol-secret",
            vec![allow("Topic", "ku-c", "Read")],
            &[("producer_byte_rate", 1.0)],
        );
        hub.assign(5, true, vec![item(5, &carol)], vec![]).await;
        let r = hub
            .report_until("ku-carol", "Unavailable without the Secret", |r| {
                r.state() == PlacementState::Unavailable
            })
            .await?;
        ensure!(
            r.message == "no Kafka connection: Secret ku-acl/accord-kafka not found",
            "{}",
            r.message
        );

        // The agent logs in as a user of its own, whom no ACL allows anything yet.
        let admin = someone_else(&cluster);
        let limited = credential("ku-limited", "limited-secret");
        let made = admin
            .alter_user_scram_credentials(
                &[ScramUpsertion {
                    user: "ku-limited".into(),
                    mechanism: ScramMechanism::Sha512,
                    iterations: limited.iterations,
                    salt: limited.salt.clone(),
                    salted_password: limited.salted_password.clone(),
                }],
                &[],
            )
            .await?;
        ensure!(made["ku-limited"].is_ok(), "{made:?}");
        let mut data = cluster.secret_data(true);
        data.insert("sasl.username".into(), "ku-limited".into());
        data.insert("sasl.password".into(), "limited-secret".into());
        connection_secret(&client, agent_ns, data).await?;
        let r = hub
            .report_until("ku-carol", "Error: looking needs an ACL", |r| {
                r.state() == PlacementState::Error
            })
            .await?;
        ensure!(
            r.message.contains("CLUSTER_AUTHORIZATION_FAILED")
                && r.message.contains("ACL on the cluster"),
            "{}",
            r.message
        );

        // Allowed to look, not to change: the apply's error names what is missing.
        let grant = |operation: AclOperation| AclBinding {
            resource_type: AclResourceType::Cluster,
            resource_name: "kafka-cluster".into(),
            pattern_type: AclPatternType::Literal,
            principal: "User:ku-limited".into(),
            host: "*".into(),
            operation,
            permission: AclPermission::Allow,
        };
        let granted = admin
            .create_acls(&[
                grant(AclOperation::Describe),
                grant(AclOperation::DescribeConfigs),
            ])
            .await?;
        ensure!(granted.iter().all(Result::is_ok), "{granted:?}");
        let r = hub
            .report_until("ku-carol", "Error: applying needs an ACL", |r| {
                r.state() == PlacementState::Error && r.message.contains("needs the Alter")
            })
            .await?;
        ensure!(
            r.message.contains("CLUSTER_AUTHORIZATION_FAILED"),
            "{}",
            r.message
        );

        let granted = admin
            .create_acls(&[
                grant(AclOperation::Alter),
                grant(AclOperation::AlterConfigs),
            ])
            .await?;
        ensure!(granted.iter().all(Result::is_ok), "{granted:?}");
        hub.report_until("ku-carol", "Synced once allowed", |r| synced_as(r, &carol))
            .await?;
        until_held(
            &admin,
            "ku-carol",
            "carol in Kafka",
            |(iterations, acls, _)| iterations.is_some() && acls.len() == 1,
        )
        .await?;
        engine.stop().await;
        Ok(())
    });
}

#[test]
fn after_a_restart_a_credential_is_left_until_the_hub_sends_it_and_a_missing_one_waits() {
    run(|testbed, bed| async move {
        let cluster = bed.cluster.read().await;
        let client = testbed.mgmt().client();
        let agent_ns = "ku-restart";
        namespace(&client, agent_ns).await?;
        connection_secret(&client, agent_ns, cluster.secret_data(true)).await?;
        let dave = user("ku-dave", "dave-secret", vec![], &[]);
        let (engine, _metrics) = user_engine(&client, agent_ns).await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        hub.assign(3, true, vec![item(3, &dave)], vec![]).await;
        hub.report_until("ku-dave", "Synced", |r| synced_as(r, &dave))
            .await?;
        hub.ack_until(3).await?;
        engine.stop().await;

        // Restarted from the saved state, which never holds the salted password.
        let (engine, metrics) = user_engine(&client, agent_ns).await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        let r = hub
            .report_until("ku-dave", "Synced from the saved state", |r| {
                r.state() == PlacementState::Synced
            })
            .await?;
        ensure!(
            observed(&r).is_some_and(|o| o.credential_hash.is_empty()),
            "this agent has not put the credential there: {r:?}"
        );
        more_looks(&metrics, 1.0).await?;
        ensure!(
            requests(&metrics, "alter_user_scram_credentials") == 0.0,
            "nothing to upsert with"
        );

        // Deleted out of band: nothing to upsert it with until the hub sends it.
        let admin = someone_else(&cluster);
        let gone = admin
            .alter_user_scram_credentials(
                &[],
                &[ScramDeletion {
                    user: "ku-dave".into(),
                    mechanism: ScramMechanism::Sha512,
                }],
            )
            .await?;
        ensure!(gone["ku-dave"].is_ok(), "{gone:?}");
        let r = hub
            .report_until("ku-dave", "Pending for the credential", |r| {
                r.state() == PlacementState::Pending
            })
            .await?;
        ensure!(
            r.message
                .starts_with("waiting for the credential from the hub"),
            "{}",
            r.message
        );

        // The hub sends the same revision with the salted password.
        hub.assign(3, true, vec![item(3, &dave)], vec![]).await;
        hub.report_until("ku-dave", "Synced with the credential", |r| {
            synced_as(r, &dave)
        })
        .await?;
        ensure!(requests(&metrics, "alter_user_scram_credentials") == 1.0);
        until_held(
            &admin,
            "ku-dave",
            "dave's credential back",
            |(iterations, _, _)| *iterations == Some(ITERATIONS),
        )
        .await?;
        engine.stop().await;
        Ok(())
    });
}
