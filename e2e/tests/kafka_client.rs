//! The `accord-kafka` admin client against a real three-broker Kafka cluster (KRaft,
//! PLAINTEXT between brokers, a SASL_SSL SCRAM-SHA-512 listener on each), checked with an
//! independent client (rdkafka) as well as through its own answers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use accord_e2e::Binaries;
use accord_e2e::kafka::{self, KafkaCluster, KafkaOptions, SupervisedKafka};
use accord_e2e::pki::CertificateAuthority;
use accord_e2e::ports::free_port;
use accord_e2e::shared::block_on;
use accord_e2e::wait::{self, Check};
use accord_kafka::{
    Admin, ConfigOp, ConfigSource, KafkaConfig, KafkaError, NewTopic, Password, SaslMechanism,
    Security,
};
use anyhow::{Context as _, Result, ensure};
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use tokio::sync::OnceCell;

/// One cluster shared by every test of this binary (starting three JVMs takes a while).
type Bed = SupervisedKafka;

static BED: OnceCell<Result<Bed, String>> = OnceCell::const_new();

async fn start_bed() -> Result<Bed> {
    let dir: PathBuf = tempfile::Builder::new()
        .prefix("accord-kafka-client-")
        .tempdir()?
        .keep();
    let options = KafkaOptions {
        brokers: 3,
        sasl_ssl: true,
        ..KafkaOptions::default()
    };
    SupervisedKafka::start(&dir, Some(&dir), "kafka-client", options).await
}

/// Runs one test against the shared cluster, printing the brokers' log tails on failure.
fn run<F, Fut>(test: F)
where
    F: FnOnce(&'static Bed) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    block_on(async {
        let bed = match BED
            .get_or_init(|| async { start_bed().await.map_err(|e| format!("{e:#}")) })
            .await
        {
            Ok(bed) => bed,
            Err(e) => panic!("the Kafka cluster did not start: {e}"),
        };
        if let Err(e) = test(bed).await {
            panic!("{e:#}\n{}", bed.supervisor.log_tails(30));
        }
    });
}

fn rdkafka_admin(bootstrap: &str) -> Result<Arc<AdminClient<DefaultClientContext>>> {
    kafka::rdkafka_admin(bootstrap).map(Arc::new)
}

#[test]
fn the_testbed_cluster_has_three_brokers_and_a_scram_user() {
    run(|bed| async move {
        let cluster = bed.cluster.read().await;
        let admin = rdkafka_admin(&cluster.bootstrap)?;
        let metadata = tokio::task::spawn_blocking(move || {
            admin.inner().fetch_metadata(None, Duration::from_secs(10))
        })
        .await??;
        let mut ids: Vec<i32> = metadata.brokers().iter().map(|b| b.id()).collect();
        ids.sort();
        ensure!(ids == [1, 2, 3], "brokers {ids:?}");
        let secret: BTreeMap<String, String> = cluster.secret_data(true);
        ensure!(secret["security.protocol"] == "SASL_SSL");
        ensure!(secret["bootstrap.servers"].split(',').count() == 3);
        ensure!(secret["ca.crt"].starts_with("-----BEGIN CERTIFICATE-----"));

        // Kafka's own tool over SASL_SSL: authenticates and trusts the testbed CA.
        let binaries = Binaries::locate()?;
        let sasl_bootstrap = cluster.sasl_ssl_bootstrap.clone().context("SASL_SSL")?;
        let describe_broker = [
            "--describe",
            "--entity-type",
            "brokers",
            "--entity-name",
            "1",
        ];
        kafka::config_command(
            &binaries,
            &sasl_bootstrap,
            cluster.tool_sasl_properties(None).as_deref(),
            &describe_broker,
        )
        .await?;
        let wrong = kafka::config_command(
            &binaries,
            &sasl_bootstrap,
            cluster
                .tool_sasl_properties(Some("not-the-password"))
                .as_deref(),
            &describe_broker,
        )
        .await;
        ensure!(wrong.is_err(), "a wrong password was accepted");
        Ok(())
    });
}

/// How long the cluster may take to show a change on every broker.
const SETTLE: Duration = Duration::from_secs(30);

fn plaintext_admin(cluster: &KafkaCluster) -> Admin {
    Admin::new(KafkaConfig::plaintext(cluster.bootstrap.split(',')))
}

fn sasl_admin(cluster: &KafkaCluster, password: &str) -> Result<Admin> {
    let mut data = cluster.secret_data(true);
    data.insert("sasl.password".into(), password.into());
    Ok(Admin::new(KafkaConfig::from_properties(&data)?))
}

fn topic(
    name: &str,
    partitions: i32,
    replication_factor: i32,
    config: &[(&str, &str)],
) -> NewTopic {
    NewTopic {
        name: name.into(),
        partitions,
        replication_factor,
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// Partition count and replicas per partition of `name` as rdkafka sees it.
async fn rdkafka_topic(
    admin: &Arc<AdminClient<DefaultClientContext>>,
    name: &str,
) -> Result<Option<(usize, Vec<usize>)>> {
    let admin = admin.clone();
    let name = name.to_string();
    tokio::task::spawn_blocking(move || {
        let metadata = admin
            .inner()
            .fetch_metadata(Some(&name), Duration::from_secs(10))?;
        Ok(metadata
            .topics()
            .iter()
            .find(|t| t.name() == name && t.error().is_none() && !t.partitions().is_empty())
            .map(|t| {
                (
                    t.partitions().len(),
                    t.partitions().iter().map(|p| p.replicas().len()).collect(),
                )
            }))
    })
    .await?
}

/// Waits until rdkafka sees `name` with `partitions` partitions (or absent for `None`).
async fn wait_rdkafka_partitions(
    admin: &Arc<AdminClient<DefaultClientContext>>,
    name: &str,
    partitions: Option<usize>,
) -> Result<Option<(usize, Vec<usize>)>> {
    wait::until(
        &format!("rdkafka to see {name} with {partitions:?} partitions"),
        SETTLE,
        || async {
            let seen = rdkafka_topic(admin, name).await?;
            Ok(if seen.as_ref().map(|(n, _)| *n) == partitions {
                Check::Ready(seen)
            } else {
                Check::NotYet(format!("sees {seen:?}"))
            })
        },
    )
    .await
}

/// Waits until `admin`'s metadata shows every topic of `names`: CreateTopics returns once
/// the controller committed them, and each broker learns of them shortly after.
async fn wait_described(
    admin: &Admin,
    names: &[&str],
) -> Result<BTreeMap<String, accord_kafka::TopicDescription>> {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    wait::until(
        &format!("our metadata to show {names:?}"),
        SETTLE,
        || async {
            let described = admin.describe_topics(&names).await?;
            Ok(if names.iter().all(|n| described.contains_key(n)) {
                Check::Ready(described)
            } else {
                Check::NotYet(format!("shows {:?}", described.keys()))
            })
        },
    )
    .await
}

/// A topic's configs as rdkafka describes them: key → (value, source).
async fn rdkafka_configs(
    admin: &AdminClient<DefaultClientContext>,
    name: &str,
) -> Result<BTreeMap<String, (Option<String>, rdkafka::admin::ConfigSource)>> {
    Ok(kafka::rdkafka_topic_configs(admin, name)
        .await?
        .into_iter()
        .map(|e| (e.name, (e.value, e.source)))
        .collect())
}

#[test]
fn topics_are_created_with_twelve_partitions_three_replicas_and_their_configs_in_one_request() {
    run(|bed| async move {
        let cluster = bed.cluster.read().await;
        let admin = plaintext_admin(&cluster);
        let rdkafka = rdkafka_admin(&cluster.bootstrap)?;
        let configs = [("retention.ms", "3600000"), ("cleanup.policy", "compact")];
        let results = admin
            .create_topics(&[
                topic("k1-orders", 12, 3, &configs),
                topic("k1-payments", 2, 1, &[]),
                topic("k1-bad-rf", 1, 4, &[]),
            ])
            .await?;
        ensure!(results.len() == 3, "{results:?}");
        results["k1-orders"].clone()?;
        results["k1-payments"].clone()?;
        let too_many = results["k1-bad-rf"].clone().expect_err("RF 4 on 3 brokers");
        ensure!(too_many.name == "INVALID_REPLICATION_FACTOR", "{too_many}");

        let (partitions, replicas) = wait_rdkafka_partitions(&rdkafka, "k1-orders", Some(12))
            .await?
            .context("listed")?;
        ensure!(
            partitions == 12 && replicas.iter().all(|r| *r == 3),
            "{replicas:?}"
        );
        let seen = rdkafka_configs(&rdkafka, "k1-orders").await?;
        for (key, value) in configs {
            ensure!(
                seen[key]
                    == (
                        Some(value.to_string()),
                        rdkafka::admin::ConfigSource::DynamicTopic
                    ),
                "{key}: {:?}",
                seen[key]
            );
        }

        wait_described(&admin, &["k1-orders", "k1-payments"]).await?;
        let described = admin
            .describe_topics(&[
                "k1-orders".into(),
                "k1-payments".into(),
                "k1-never-created".into(),
            ])
            .await?;
        ensure!(described.len() == 2, "{described:?}");
        ensure!(described["k1-orders"].partitions == 12);
        ensure!(described["k1-orders"].replication_factor == 3);
        ensure!(described["k1-payments"].replication_factor == 1);
        let mut brokers = admin.brokers();
        brokers.sort();
        let mut expected: Vec<String> = cluster.bootstrap.split(',').map(String::from).collect();
        expected.sort();
        ensure!(brokers == expected, "{brokers:?}");

        let again = admin
            .create_topics(&[topic("k1-orders", 12, 3, &[])])
            .await?;
        let exists = again["k1-orders"].clone().expect_err("exists");
        ensure!(exists.is_already_exists(), "{exists}");
        Ok(())
    });
}

#[test]
fn partitions_are_raised_and_never_lowered() {
    run(|bed| async move {
        let cluster = bed.cluster.read().await;
        let admin = plaintext_admin(&cluster);
        let rdkafka = rdkafka_admin(&cluster.bootstrap)?;
        admin.create_topics(&[topic("k1-grow", 12, 3, &[])]).await?["k1-grow"].clone()?;
        wait_rdkafka_partitions(&rdkafka, "k1-grow", Some(12)).await?;
        wait_described(&admin, &["k1-grow"]).await?;

        let results = admin
            .create_partitions(&[("k1-grow".into(), 24), ("k1-missing".into(), 3)])
            .await?;
        results["k1-grow"].clone()?;
        ensure!(
            results["k1-missing"]
                .as_ref()
                .is_err_and(|e| e.is_unknown_topic()),
            "{results:?}"
        );
        wait_rdkafka_partitions(&rdkafka, "k1-grow", Some(24)).await?;

        let lower = admin.create_partitions(&[("k1-grow".into(), 12)]).await?;
        let refused = lower["k1-grow"].clone().expect_err("lowering is refused");
        ensure!(refused.name == "INVALID_PARTITIONS", "{refused}");
        ensure!(rdkafka_topic(&rdkafka, "k1-grow").await?.map(|t| t.0) == Some(24));
        Ok(())
    });
}

#[test]
fn incremental_changes_set_and_delete_only_the_named_keys() {
    run(|bed| async move {
        let cluster = bed.cluster.read().await;
        let admin = plaintext_admin(&cluster);
        let rdkafka = rdkafka_admin(&cluster.bootstrap)?;
        let name = "k1-configs";
        admin
            .create_topics(&[topic(name, 3, 3, &[("segment.ms", "7200000")])])
            .await?[name]
            .clone()?;
        wait_rdkafka_partitions(&rdkafka, name, Some(3)).await?;
        wait_described(&admin, &[name]).await?;

        // Someone else sets keys with the legacy AlterConfigs (which replaces the whole
        // set): the topic now has exactly these overrides.
        let legacy = AlterConfig::new(ResourceSpecifier::Topic(name))
            .set("max.message.bytes", "2097152")
            .set("segment.ms", "7200000");
        for result in rdkafka
            .alter_configs(&[legacy], &AdminOptions::new())
            .await?
        {
            result.map_err(|(_, code)| anyhow::anyhow!("legacy alter: {code}"))?;
        }

        let results = admin
            .incremental_alter_configs(&[
                (
                    name.to_string(),
                    vec![
                        ConfigOp::Set("retention.ms".into(), "600000".into()),
                        ConfigOp::Delete("segment.ms".into()),
                    ],
                ),
                ("k1-untouched".to_string(), vec![]),
                (
                    "k1-no-such-topic".to_string(),
                    vec![ConfigOp::Set("retention.ms".into(), "1".into())],
                ),
            ])
            .await?;
        results[name].clone()?;
        results["k1-untouched"].clone()?;
        ensure!(results["k1-no-such-topic"].is_err(), "{results:?}");

        use rdkafka::admin::ConfigSource as Rd;
        let seen = wait::until("rdkafka to see the changes", SETTLE, || async {
            let seen = rdkafka_configs(&rdkafka, name).await?;
            Ok(if seen["retention.ms"].0.as_deref() == Some("600000") {
                Check::Ready(seen)
            } else {
                Check::NotYet(format!("retention.ms {:?}", seen["retention.ms"]))
            })
        })
        .await?;
        ensure!(seen["retention.ms"].1 == Rd::DynamicTopic);
        ensure!(
            seen["max.message.bytes"] == (Some("2097152".into()), Rd::DynamicTopic),
            "the key set by someone else was touched: {:?}",
            seen["max.message.bytes"]
        );
        ensure!(
            seen["segment.ms"].1 != Rd::DynamicTopic,
            "{:?}",
            seen["segment.ms"]
        );

        // Kafka's own tool sees the same overrides.
        let overrides =
            kafka::topic_overrides(&Binaries::locate()?, &cluster.bootstrap, None, name).await?;
        ensure!(
            overrides
                == BTreeMap::from([
                    ("max.message.bytes".to_string(), "2097152".to_string()),
                    ("retention.ms".to_string(), "600000".to_string()),
                ]),
            "kafka-configs: {overrides:?}"
        );

        // Our own view agrees, with sources.
        let described = admin
            .describe_configs(&[name.to_string(), "k1-no-such-topic".to_string()])
            .await?;
        let entries = described[name].clone()?;
        ensure!(entries["retention.ms"].value.as_deref() == Some("600000"));
        ensure!(entries["retention.ms"].source == ConfigSource::DynamicTopic);
        ensure!(entries["max.message.bytes"].source == ConfigSource::DynamicTopic);
        ensure!(entries["segment.ms"].source != ConfigSource::DynamicTopic);
        ensure!(entries["segment.ms"].value.as_deref() == Some("604800000"));
        // Kafka 4 formats the cluster with min.insync.replicas as a dynamic cluster default.
        ensure!(
            matches!(
                entries["min.insync.replicas"].source,
                ConfigSource::Default
                    | ConfigSource::StaticBroker
                    | ConfigSource::DynamicDefaultBroker
            ),
            "{:?}",
            entries["min.insync.replicas"]
        );
        ensure!(entries["compression.type"].source == ConfigSource::Default);
        let missing = described["k1-no-such-topic"]
            .clone()
            .expect_err("unknown topic");
        ensure!(missing.is_unknown_topic(), "{missing}");
        Ok(())
    });
}

#[test]
fn deleted_topics_disappear_and_a_second_delete_says_unknown() {
    run(|bed| async move {
        let cluster = bed.cluster.read().await;
        let admin = plaintext_admin(&cluster);
        let rdkafka = rdkafka_admin(&cluster.bootstrap)?;
        let names: Vec<String> = (0..20).map(|i| format!("k1-batch-{i:02}")).collect();
        let topics: Vec<NewTopic> = names.iter().map(|n| topic(n, 1, 1, &[])).collect();
        let created = admin.create_topics(&topics).await?;
        ensure!(created.values().all(Result::is_ok), "{created:?}");
        wait_rdkafka_partitions(&rdkafka, "k1-batch-19", Some(1)).await?;

        let deleted = admin.delete_topics(&names).await?;
        ensure!(
            deleted.len() == 20 && deleted.values().all(Result::is_ok),
            "{deleted:?}"
        );
        wait_rdkafka_partitions(&rdkafka, "k1-batch-19", None).await?;
        wait::until("our metadata to drop the topics", SETTLE, || async {
            let left = admin.describe_topics(&names).await?;
            Ok(if left.is_empty() {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{} left", left.len()))
            })
        })
        .await?;

        let again = admin.delete_topics(&names[..1]).await?;
        ensure!(
            again[&names[0]]
                .as_ref()
                .is_err_and(|e| e.is_unknown_topic()),
            "{again:?}"
        );
        Ok(())
    });
}

#[test]
fn sasl_ssl_with_scram_sha_512_creates_and_describes_topics() {
    run(|bed| async move {
        let cluster = bed.cluster.read().await;
        let admin = sasl_admin(&cluster, cluster.password.as_deref().context("password")?)?;
        admin
            .create_topics(&[topic("k1-secure", 4, 3, &[("retention.ms", "120000")])])
            .await?["k1-secure"]
            .clone()?;
        wait_described(&admin, &["k1-secure"]).await?;
        let configs = admin.describe_configs(&["k1-secure".into()]).await?["k1-secure"].clone()?;
        ensure!(configs["retention.ms"].value.as_deref() == Some("120000"));
        // The brokers advertised on the SASL_SSL listener are the ones reused.
        let brokers = admin.brokers();
        let mut brokers_sorted = brokers.clone();
        brokers_sorted.sort();
        let mut expected: Vec<String> = cluster
            .sasl_ssl_bootstrap
            .clone()
            .context("sasl")?
            .split(',')
            .map(String::from)
            .collect();
        expected.sort();
        ensure!(brokers_sorted == expected, "{brokers:?}");
        let rdkafka = rdkafka_admin(&cluster.bootstrap)?;
        wait_rdkafka_partitions(&rdkafka, "k1-secure", Some(4)).await?;
        Ok(())
    });
}

#[test]
fn a_wrong_password_is_an_authentication_error_that_never_shows_the_password() {
    run(|bed| async move {
        let cluster = bed.cluster.read().await;
        let wrong = "wrong-Pa55word-do-not-print";
        let admin = sasl_admin(&cluster, wrong)?;
        let err = admin
            .describe_topics(&["k1-anything".into()])
            .await
            .expect_err("a wrong password is refused");
        ensure!(err.is_authentication(), "{err:?}");
        let text = format!("{err} {err:?} {:?}", admin);
        ensure!(text.contains("authentication failed: "), "{text}");
        ensure!(!text.contains(wrong), "the password leaked: {text}");
        let real = cluster.password.clone().context("password")?;
        ensure!(!text.contains(&real));

        let config = KafkaConfig::from_properties(&cluster.secret_data(true))?;
        let debug = format!("{config:?} {config:#?}");
        ensure!(!debug.contains(&real), "the password leaked: {debug}");
        Ok(())
    });
}

#[test]
fn a_broker_certificate_from_an_untrusted_ca_is_a_tls_error() {
    run(|bed| async move {
        let cluster = bed.cluster.read().await;
        let other_ca = CertificateAuthority::new("not-the-kafka-ca")?;
        let admin = Admin::new(KafkaConfig {
            bootstrap: cluster
                .sasl_ssl_bootstrap
                .clone()
                .context("sasl")?
                .split(',')
                .map(String::from)
                .collect(),
            security: Security::SaslSsl {
                ca_pem: Some(other_ca.cert_pem()),
                mechanism: SaslMechanism::ScramSha512,
                username: cluster.username.clone().context("user")?,
                password: Password::new(cluster.password.clone().context("password")?),
            },
            request_timeout: Duration::from_secs(10),
        });
        let err = admin.describe_topics(&[]).await.expect_err("untrusted");
        ensure!(matches!(err, KafkaError::Tls { .. }), "{err:?}");
        ensure!(err.to_string().contains("certificate"), "{err}");
        Ok(())
    });
}

#[test]
fn an_address_nobody_listens_on_is_unreachable_and_named() {
    run(|_bed| async move {
        let addr = format!("127.0.0.1:{}", free_port()?);
        let admin = Admin::new(KafkaConfig::plaintext([addr.clone()]));
        let err = admin
            .describe_topics(&[])
            .await
            .expect_err("nobody listens");
        ensure!(matches!(err, KafkaError::Unreachable { .. }), "{err:?}");
        ensure!(
            err.to_string()
                .starts_with(&format!("Kafka at {addr} is unreachable: ")),
            "{err}"
        );
        Ok(())
    });
}

#[test]
fn requests_fail_over_to_another_broker_while_one_is_stopped() {
    run(|bed| async move {
        let mut cluster = bed.cluster.write().await;
        let first = cluster.broker_address(0);
        // Bootstrap with the first broker only: after one metadata request the client
        // knows the others.
        let admin = Admin::new(KafkaConfig::plaintext([first.clone()]));
        admin.describe_topics(&[]).await?;
        ensure!(admin.brokers().len() == 3, "{:?}", admin.brokers());

        cluster.stop(&bed.supervisor, 0);
        let result = async {
            let described = admin.describe_topics(&[]).await;
            ensure!(described.is_ok(), "no failover: {described:?}");
            let created = admin
                .create_topics(&[topic("k1-failover", 2, 2, &[])])
                .await?;
            created["k1-failover"].clone()?;
            // A client that only knows the stopped broker says so.
            let alone = Admin::new(KafkaConfig::plaintext([first.clone()]));
            let err = alone.describe_topics(&[]).await.expect_err("stopped");
            ensure!(err.to_string().contains(&first), "{err}");
            Ok(())
        }
        .await;
        cluster.start(&bed.supervisor, 0).await?;
        result?;
        // The restarted broker serves again, with its data.
        let again = Admin::new(KafkaConfig::plaintext([first.clone()]));
        let described = again.describe_topics(&["k1-failover".into()]).await?;
        ensure!(described.contains_key("k1-failover"), "{described:?}");
        Ok(())
    });
}

#[test]
fn tls_without_sasl_creates_and_describes_topics() {
    run(|bed| async move {
        let cluster = bed.cluster.read().await;
        let admin = Admin::new(KafkaConfig {
            bootstrap: cluster
                .ssl_bootstrap
                .clone()
                .context("SSL listener")?
                .split(',')
                .map(String::from)
                .collect(),
            security: Security::Ssl {
                ca_pem: cluster.ca_pem.clone(),
            },
            request_timeout: Duration::from_secs(10),
        });
        admin.create_topics(&[topic("k1-tls", 2, 3, &[])]).await?["k1-tls"].clone()?;
        let described = wait_described(&admin, &["k1-tls"]).await?;
        ensure!(described["k1-tls"].partitions == 2, "{described:?}");
        ensure!(described["k1-tls"].replication_factor == 3, "{described:?}");
        Ok(())
    });
}

#[test]
fn a_kept_connection_to_a_restarted_lone_broker_is_replaced_without_a_failed_request() {
    run(|bed| async move {
        let dir = tempfile::tempdir()?.keep();
        let mut single = kafka::start_cluster(
            &bed.supervisor,
            &Binaries::locate()?,
            "kafka-single",
            &dir,
            KafkaOptions {
                brokers: 1,
                sasl_ssl: false,
                ..KafkaOptions::default()
            },
        )
        .await?;
        let admin = plaintext_admin(&single);
        admin
            .create_topics(&[topic("k1-single", 2, 1, &[])])
            .await?["k1-single"]
            .clone()?;

        single.stop(&bed.supervisor, 0);
        let down = Admin::new(KafkaConfig::plaintext([single.bootstrap.clone()]));
        let err = down.describe_topics(&[]).await.expect_err("stopped");
        ensure!(matches!(err, KafkaError::Unreachable { .. }), "{err:?}");
        single.start(&bed.supervisor, 0).await?;

        // `admin` still holds its connection from before the restart.
        let described = admin.describe_topics(&["k1-single".into()]).await?;
        ensure!(described["k1-single"].partitions == 2, "{described:?}");
        for process in &single.processes {
            bed.supervisor.stop(*process);
        }
        Ok(())
    });
}
