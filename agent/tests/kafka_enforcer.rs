//! The Kafka topic enforcer against a real Kafka broker (KRaft, with a SASL_SSL SCRAM-SHA-512
//! listener beside PLAINTEXT) and a real kube-apiserver holding the connection Secret and the
//! saved assignments, driven by a hub the test plays. What the enforcer did is checked in
//! Kafka with an independent client (rdkafka) as well as through its reports. Each test
//! works in its own agent namespace and topic names.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accord_agent::enforce::kafka::KafkaOptions;
use accord_agent::enforce::kafka_topic::KafkaTopicEnforcer;
use accord_agent::engine::{self, CoreConfig, EngineTask};
use accord_agent::metrics::Metrics;
use accord_agent::persist::ConfigMapStore;
use accord_e2e::kafka::{self, KafkaCluster};
use accord_e2e::wait::{self, Check};
use accord_e2e::{SharedTestbed, Testbed};
use accord_kafka::{Admin, ConfigOp, KafkaConfig};
use accord_proto::v1::{
    Assignment, KafkaTopicAssignment, ObjectRef, PlacementState, StatusReport, assignment,
    status_report,
};
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use rdkafka::admin::ConfigSource;
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

/// One broker shared by every test of this binary.
type Bed = kafka::SupervisedKafka;

static KAFKA: OnceCell<Result<Bed, String>> = OnceCell::const_new();

async fn start_kafka(testbed: &Testbed) -> Result<Bed> {
    let dir = testbed.dir().join("kafka-enforcer");
    let options = kafka::KafkaOptions {
        brokers: 1,
        sasl_ssl: true,
        ..kafka::KafkaOptions::default()
    };
    kafka::SupervisedKafka::start(&dir, None, "enforcer", options).await
}

/// Runs one test against the shared testbed and broker, printing the broker's log tail on
/// failure.
fn run<F, Fut>(test: F)
where
    F: FnOnce(&'static Testbed, &'static Bed) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    // The agent's logs go with a failing test's output.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "accord_agent=debug".into()),
        )
        .with_test_writer()
        .try_init();
    TESTBED.run(|testbed| async move {
        let bed = match KAFKA
            .get_or_init(|| async { start_kafka(testbed).await.map_err(|e| format!("{e:#}")) })
            .await
        {
            Ok(bed) => bed,
            Err(e) => anyhow::bail!("the Kafka broker did not start: {e}"),
        };
        test(testbed, bed)
            .await
            .map_err(|e| anyhow::anyhow!("{e:#}\n{}", bed.supervisor.log_tails(20)))
    });
}

/// The Kafka connection Secret `name` in `namespace` with `data`.
async fn put_secret(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    data: &BTreeMap<String, String>,
) -> Result<()> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": data,
    });
    api.patch(
        name,
        &PatchParams::apply(USER_MANAGER).force(),
        &Patch::Apply(&secret),
    )
    .await
    .with_context(|| format!("writing Secret {namespace}/{name}"))?;
    Ok(())
}

/// An engine with only the Kafka enforcer, its state and connection Secret in `agent_ns`.
async fn engine(
    client: &kube::Client,
    agent_ns: &str,
    secret: &str,
) -> Result<(EngineTask, Metrics)> {
    namespace(client, agent_ns).await?;
    engine_as(client, agent_ns, secret).await
}

/// [`engine`] acting through `client`, in the existing namespace `agent_ns`.
async fn engine_as(
    client: &kube::Client,
    agent_ns: &str,
    secret: &str,
) -> Result<(EngineTask, Metrics)> {
    let metrics = Metrics::new();
    let enforcer = KafkaTopicEnforcer::new(
        client.clone(),
        agent_ns.to_owned(),
        KafkaOptions {
            secret: secret.to_owned(),
            resync: RESYNC,
            ..KafkaOptions::default()
        },
        metrics.clone(),
    );
    let task = engine::start_with(
        CoreConfig {
            cluster: "member-1".to_owned(),
            report_debounce: Duration::from_millis(50),
        },
        Arc::new(ConfigMapStore::new(client.clone(), agent_ns)),
        vec![Box::new(enforcer)],
        metrics.clone(),
    );
    tokio::time::timeout(WAIT, task.handle().wait_loaded())
        .await
        .context("the engine did not load its saved state")?;
    Ok((task, metrics))
}

fn topic_policy(name: &str) -> ObjectRef {
    ObjectRef {
        kind: "FederatedKafkaTopic".into(),
        namespace: "default".into(),
        name: name.into(),
    }
}

/// The assignment of FederatedKafkaTopic `name` (topic of the same name).
fn topic_item(
    name: &str,
    revision: i64,
    partitions: i32,
    config: &[(&str, &str)],
    removed: &[&str],
) -> Assignment {
    Assignment {
        placed: Some(topic_policy(name)),
        revision,
        spec: Some(assignment::Spec::KafkaTopic(KafkaTopicAssignment {
            topic_name: name.into(),
            partitions,
            replication_factor: 1,
            config: config
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            removed_config: removed.iter().map(|k| (*k).to_owned()).collect(),
            delete: false,
        })),
        traceparent: String::new(),
    }
}

/// Partitions, replication factor and existence a report observed.
fn observed(report: &StatusReport) -> Option<(i32, i32, bool)> {
    match &report.observed {
        Some(status_report::Observed::KafkaTopic(t)) => {
            Some((t.partitions, t.replication_factor, t.exists))
        }
        _ => None,
    }
}

fn synced_with(report: &StatusReport, partitions: i32) -> bool {
    report.state() == PlacementState::Synced && observed(report) == Some((partitions, 1, true))
}

/// Partition count of `name` as rdkafka sees it (`None`: no such topic).
async fn rdkafka_partitions(bootstrap: &str, name: &str) -> Result<Option<usize>> {
    let bootstrap = bootstrap.to_owned();
    let name = name.to_owned();
    tokio::task::spawn_blocking(move || {
        let admin = kafka::rdkafka_admin(&bootstrap)?;
        // All topics: a Metadata request naming a missing topic would have the broker
        // (auto.create.topics.enable defaults to true) create it.
        let metadata = admin
            .inner()
            .fetch_metadata(None, Duration::from_secs(10))?;
        Ok(metadata
            .topics()
            .iter()
            .find(|t| t.name() == name && t.error().is_none() && !t.partitions().is_empty())
            .map(|t| t.partitions().len()))
    })
    .await?
}

/// The topic's own settings (source `DynamicTopic`) as rdkafka describes them.
async fn rdkafka_topic_settings(bootstrap: &str, name: &str) -> Result<BTreeMap<String, String>> {
    let admin = kafka::rdkafka_admin(bootstrap)?;
    Ok(kafka::rdkafka_topic_configs(&admin, name)
        .await?
        .into_iter()
        .filter(|e| e.source == ConfigSource::DynamicTopic)
        .filter_map(|e| Some((e.name, e.value?)))
        .collect())
}

/// Waits until rdkafka sees `name` with `partitions` partitions (`None`: absent).
async fn until_partitions(bootstrap: &str, name: &str, partitions: Option<usize>) -> Result<()> {
    wait::until(
        &format!("rdkafka to see {name} with {partitions:?} partitions"),
        SETTLE,
        || async {
            let seen = rdkafka_partitions(bootstrap, name).await?;
            Ok(if seen == partitions {
                Check::Ready(())
            } else {
                Check::NotYet(format!("sees {seen:?}"))
            })
        },
    )
    .await
}

/// Waits until the topic's own settings satisfy `matches`.
async fn until_settings(
    bootstrap: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    matches: impl Fn(&BTreeMap<String, String>) -> bool,
) -> Result<BTreeMap<String, String>> {
    wait::until(what, timeout, || async {
        let seen = rdkafka_topic_settings(bootstrap, name).await?;
        Ok(if matches(&seen) {
            Check::Ready(seen)
        } else {
            Check::NotYet(format!("settings {seen:?}"))
        })
    })
    .await
}

/// An admin client acting as someone else changing Kafka by hand.
fn someone_else(cluster: &KafkaCluster) -> Admin {
    Admin::new(KafkaConfig::plaintext(cluster.bootstrap.split(',')))
}

/// Requests of `kind` the agent sent to Kafka (`accord_agent_kafka_requests_total`).
fn kafka_requests(metrics: &Metrics, kind: &str) -> f64 {
    let series = format!("accord_agent_kafka_requests_total{{request=\"{kind}\"}} ");
    metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.parse().ok())
        .unwrap_or(0.0)
}

fn get(map: &BTreeMap<String, String>, key: &str) -> Option<String> {
    map.get(key).cloned()
}

#[test]
fn a_topic_is_created_its_partitions_raised_never_lowered_and_its_configs_changed_incrementally() {
    run(|testbed, bed| async move {
        let cluster = bed.cluster.read().await;
        let client = testbed.mgmt().client();
        let agent_ns = "k-lifecycle";
        namespace(&client, agent_ns).await?;
        put_secret(
            &client,
            agent_ns,
            "accord-kafka",
            &cluster.secret_data(false),
        )
        .await?;
        let (engine, metrics) = engine(&client, agent_ns, "accord-kafka").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        let bootstrap = cluster.bootstrap.as_str();
        let name = "k2-orders";

        hub.assign(
            10,
            true,
            vec![topic_item(
                name,
                10,
                3,
                &[("retention.ms", "100000"), ("cleanup.policy", "delete")],
                &[],
            )],
            vec![],
        )
        .await;
        let synced = hub
            .report_until(name, "Synced with 3 partitions", |r| synced_with(r, 3))
            .await?;
        ensure!(synced.applied_revision == 10, "{synced:?}");
        until_partitions(bootstrap, name, Some(3)).await?;
        let settings = rdkafka_topic_settings(bootstrap, name).await?;
        ensure!(
            get(&settings, "retention.ms").as_deref() == Some("100000")
                && get(&settings, "cleanup.policy").as_deref() == Some("delete"),
            "the spec's configs are the topic's own: {settings:?}"
        );

        // Someone else sets a key no spec names: it must survive every reconcile.
        let results = someone_else(&cluster)
            .incremental_alter_configs(&[(
                name.to_owned(),
                vec![ConfigOp::Set("max.message.bytes".into(), "2000000".into())],
            )])
            .await?;
        ensure!(results[name].is_ok(), "{results:?}");

        // Partitions 3 → 6, retention edited, cleanup.policy removed from the spec.
        hub.assign(
            11,
            false,
            vec![topic_item(
                name,
                11,
                6,
                &[("retention.ms", "200000")],
                &["cleanup.policy"],
            )],
            vec![],
        )
        .await;
        hub.report_until(name, "Synced with 6 partitions", |r| {
            synced_with(r, 6) && r.applied_revision == 11
        })
        .await?;
        until_partitions(bootstrap, name, Some(6)).await?;
        let settings = rdkafka_topic_settings(bootstrap, name).await?;
        ensure!(
            get(&settings, "retention.ms").as_deref() == Some("200000"),
            "the edited key is applied: {settings:?}"
        );
        ensure!(
            !settings.contains_key("cleanup.policy"),
            "the removed key is back to the broker default: {settings:?}"
        );
        ensure!(
            get(&settings, "max.message.bytes").as_deref() == Some("2000000"),
            "the key someone else set survives: {settings:?}"
        );

        // 6 → 3 is refused with both numbers, and Kafka keeps 6.
        hub.assign(
            12,
            false,
            vec![topic_item(name, 12, 3, &[("retention.ms", "200000")], &[])],
            vec![],
        )
        .await;
        let refused = hub
            .report_until(name, "NotSupported for lowering partitions", |r| {
                r.state() == PlacementState::Error && r.applied_revision == 12
            })
            .await?;
        ensure!(
            refused.message
                == "NotSupported: partitions is 6 in Kafka and 3 in the spec; Kafka cannot lower \
                    a partition count",
            "{}",
            refused.message
        );
        ensure!(observed(&refused) == Some((6, 1, true)), "{refused:?}");

        // A replication factor change is refused the same way.
        let mut rf = topic_item(name, 13, 6, &[("retention.ms", "200000")], &[]);
        if let Some(assignment::Spec::KafkaTopic(t)) = rf.spec.as_mut() {
            t.replication_factor = 2;
        }
        hub.assign(13, false, vec![rf], vec![]).await;
        let refused = hub
            .report_until(name, "NotSupported for a replication factor change", |r| {
                r.state() == PlacementState::Error && r.applied_revision == 13
            })
            .await?;
        ensure!(
            refused.message
                == "NotSupported: replicationFactor is 1 in Kafka and 2 in the spec; Kafka \
                    cannot change a topic's replication factor in place",
            "{}",
            refused.message
        );
        // Two more looks (and the reconciles after them) later, Kafka still has what it had.
        let looks = kafka_requests(&metrics, "metadata");
        wait::until("two more looks at Kafka", RESYNC * 4, || async {
            let now = kafka_requests(&metrics, "metadata");
            Ok(if now >= looks + 2.0 {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{now} looks, from {looks}"))
            })
        })
        .await?;
        ensure!(rdkafka_partitions(bootstrap, name).await? == Some(6));
        let settings = rdkafka_topic_settings(bootstrap, name).await?;
        ensure!(
            get(&settings, "max.message.bytes").as_deref() == Some("2000000"),
            "{settings:?}"
        );
        engine.stop().await;
        Ok(())
    });
}

#[test]
fn drift_is_repaired_within_the_resync_interval_and_a_topic_deleted_out_of_band_is_recreated() {
    run(|testbed, bed| async move {
        let cluster = bed.cluster.read().await;
        let client = testbed.mgmt().client();
        let agent_ns = "k-drift";
        namespace(&client, agent_ns).await?;
        put_secret(
            &client,
            agent_ns,
            "accord-kafka",
            &cluster.secret_data(false),
        )
        .await?;
        let (engine, metrics) = engine(&client, agent_ns, "accord-kafka").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        let bootstrap = cluster.bootstrap.as_str();
        let name = "k2-drift";
        hub.assign(
            5,
            true,
            vec![topic_item(name, 5, 2, &[("retention.ms", "300000")], &[])],
            vec![],
        )
        .await;
        hub.report_until(name, "Synced", |r| synced_with(r, 2))
            .await?;

        let admin = someone_else(&cluster);
        let results = admin
            .incremental_alter_configs(&[(
                name.to_owned(),
                vec![ConfigOp::Set("retention.ms".into(), "1".into())],
            )])
            .await?;
        ensure!(results[name].is_ok(), "{results:?}");
        let changed_at = tokio::time::Instant::now();
        // Restored within a resync interval (plus the time one look and one apply take).
        until_settings(
            bootstrap,
            name,
            "the managed key restored",
            RESYNC + Duration::from_secs(5),
            |s| get(s, "retention.ms").as_deref() == Some("300000"),
        )
        .await?;
        let repaired_in = changed_at.elapsed();

        // Deleted out of band: recreated with its partitions and configs (so fast that
        // polling may never see it gone; the agent's CreateTopics count says it did).
        let creates = kafka_requests(&metrics, "create_topics");
        let results = admin.delete_topics(&[name.to_owned()]).await?;
        ensure!(results[name].is_ok(), "{results:?}");
        wait::until("the topic recreated", SETTLE, || async {
            let now = kafka_requests(&metrics, "create_topics");
            Ok(if now > creates {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{now} CreateTopics requests"))
            })
        })
        .await?;
        until_partitions(bootstrap, name, Some(2)).await?;
        until_settings(
            bootstrap,
            name,
            "the configs of the recreated topic",
            SETTLE,
            |s| get(s, "retention.ms").as_deref() == Some("300000"),
        )
        .await?;
        // The recreation may be quicker than the report debounce (nothing new to say then);
        // if the hub was told anything else meanwhile, it is told Synced again.
        while hub.next(Duration::ZERO).await.is_ok() {}
        let last = hub
            .reports
            .iter()
            .rev()
            .find(|r| r.placed.as_ref().is_some_and(|p| p.name == name))
            .cloned()
            .context("no report")?;
        if !synced_with(&last, 2) {
            hub.report_until(name, "Synced after the recreation", |r| synced_with(r, 2))
                .await?;
        }
        eprintln!("drift repaired in {repaired_in:?}");
        engine.stop().await;
        Ok(())
    });
}

#[test]
fn many_topics_are_created_and_deleted_in_a_few_batched_requests() {
    run(|testbed, bed| async move {
        let cluster = bed.cluster.read().await;
        let client = testbed.mgmt().client();
        let agent_ns = "k-batch";
        namespace(&client, agent_ns).await?;
        put_secret(
            &client,
            agent_ns,
            "accord-kafka",
            &cluster.secret_data(false),
        )
        .await?;
        let (engine, metrics) = engine(&client, agent_ns, "accord-kafka").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        let bootstrap = cluster.bootstrap.as_str();
        let names: Vec<String> = (0..40).map(|i| format!("k2-batch-{i:02}")).collect();
        let items = names
            .iter()
            .map(|n| topic_item(n, 20, 1, &[("retention.ms", "400000")], &[]))
            .collect();
        hub.assign(20, true, items, vec![]).await;
        hub.reports_until_each(&names, "Synced", |r| synced_with(r, 1))
            .await?;
        for name in [&names[0], &names[39]] {
            until_partitions(bootstrap, name, Some(1)).await?;
        }
        let requests = |kind: &str| kafka_requests(&metrics, kind);
        // All 40 arrive as 40 applies at once: they go out together (in one request unless
        // the engine's pass is preempted for longer than the applier's window, which on a
        // busy test machine it may be).
        let creates = requests("create_topics");
        ensure!(
            (1.0..=3.0).contains(&creates),
            "40 topics took {creates} CreateTopics requests"
        );
        ensure!(
            requests("incremental_alter_configs") == 0.0,
            "created with their configs, nothing to alter"
        );

        // Deletion: each reports Synced "deleted", exists=false.
        let items = names
            .iter()
            .map(|n| {
                let mut item = topic_item(n, 21, 1, &[("retention.ms", "400000")], &[]);
                if let Some(assignment::Spec::KafkaTopic(t)) = item.spec.as_mut() {
                    t.delete = true;
                }
                item
            })
            .collect();
        hub.assign(21, true, items, vec![]).await;
        let reports = hub
            .reports_until_each(&names, "Synced at revision 21", |r| {
                r.state() == PlacementState::Synced && r.applied_revision == 21
            })
            .await?;
        for r in reports {
            ensure!(r.message == "deleted", "{r:?}");
            ensure!(observed(&r).is_some_and(|o| !o.2), "{r:?}");
        }
        for name in [&names[0], &names[39]] {
            until_partitions(bootstrap, name, None).await?;
        }
        let deletes = requests("delete_topics");
        ensure!(
            (1.0..=3.0).contains(&deletes),
            "40 topics took {deletes} DeleteTopics requests\n{}",
            metrics.encode()
        );
        engine.stop().await;
        Ok(())
    });
}

#[test]
fn a_missing_secret_is_unavailable_and_creating_or_fixing_it_connects_without_a_restart() {
    run(|testbed, bed| async move {
        let cluster = bed.cluster.read().await;
        let client = testbed.mgmt().client();
        let agent_ns = "k-secret";
        let (engine, _metrics) = engine(&client, agent_ns, "kafka-conn").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        let name = "k2-secret";
        hub.assign(3, true, vec![topic_item(name, 3, 1, &[], &[])], vec![])
            .await;
        let r = hub
            .report_until(name, "Unavailable without the Secret", |r| {
                r.state() == PlacementState::Unavailable
            })
            .await?;
        ensure!(
            r.message == "no Kafka connection: Secret k-secret/kafka-conn not found",
            "{}",
            r.message
        );

        // An address nobody listens on: unreachable, named.
        let mut wrong = cluster.secret_data(false);
        let nowhere = format!("127.0.0.1:{}", accord_e2e::ports::free_port()?);
        wrong.insert("bootstrap.servers".into(), nowhere.clone());
        put_secret(&client, agent_ns, "kafka-conn", &wrong).await?;
        let r = hub
            .report_until(name, "Unavailable: unreachable", |r| {
                r.state() == PlacementState::Unavailable
                    && r.message.starts_with("Kafka unreachable: ")
            })
            .await?;
        ensure!(r.message.contains(&nowhere), "{}", r.message);

        put_secret(&client, agent_ns, "kafka-conn", &cluster.secret_data(false)).await?;
        hub.report_until(name, "Synced once the Secret is right", |r| {
            synced_with(r, 1)
        })
        .await?;
        until_partitions(&cluster.bootstrap, name, Some(1)).await?;
        engine.stop().await;
        Ok(())
    });
}

#[test]
fn sasl_ssl_with_scram_works_and_a_wrong_password_is_unavailable_without_showing_it() {
    run(|testbed, bed| async move {
        let cluster = bed.cluster.read().await;
        let client = testbed.mgmt().client();
        let agent_ns = "k-sasl";
        namespace(&client, agent_ns).await?;
        let mut wrong = cluster.secret_data(true);
        ensure!(
            wrong.get("security.protocol").map(String::as_str) == Some("SASL_SSL"),
            "{:?}",
            wrong.keys()
        );
        let bad_password = "not-the-password-0x5eed";
        wrong.insert("sasl.password".into(), bad_password.into());
        put_secret(&client, agent_ns, "accord-kafka", &wrong).await?;
        let (engine, _metrics) = engine(&client, agent_ns, "accord-kafka").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        let name = "k2-sasl";
        hub.assign(
            4,
            true,
            vec![topic_item(name, 4, 2, &[("retention.ms", "500000")], &[])],
            vec![],
        )
        .await;
        let r = hub
            .report_until(name, "Unavailable: authentication failed", |r| {
                r.state() == PlacementState::Unavailable
            })
            .await?;
        ensure!(
            r.message.starts_with("Kafka authentication failed: "),
            "{}",
            r.message
        );
        ensure!(!r.message.contains(bad_password), "{}", r.message);

        put_secret(
            &client,
            agent_ns,
            "accord-kafka",
            &cluster.secret_data(true),
        )
        .await?;
        hub.report_until(name, "Synced over SASL_SSL", |r| synced_with(r, 2))
            .await?;
        until_partitions(&cluster.bootstrap, name, Some(2)).await?;
        let reports = format!("{:?}", hub.reports);
        let password = cluster.password.clone().context("the SCRAM password")?;
        ensure!(
            !reports.contains(&password) && !reports.contains(bad_password),
            "a password reached a report"
        );
        engine.stop().await;
        Ok(())
    });
}

#[test]
fn a_stopped_broker_makes_topics_unavailable_and_they_are_synced_again_once_it_is_back() {
    run(|testbed, bed| async move {
        let client = testbed.mgmt().client();
        let agent_ns = "k-outage";
        namespace(&client, agent_ns).await?;
        let data = bed.cluster.read().await.secret_data(false);
        put_secret(&client, agent_ns, "accord-kafka", &data).await?;
        let (engine, _metrics) = engine(&client, agent_ns, "accord-kafka").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        let name = "k2-outage";
        hub.assign(6, true, vec![topic_item(name, 6, 1, &[], &[])], vec![])
            .await;
        hub.report_until(name, "Synced", |r| synced_with(r, 1))
            .await?;

        let mut cluster = bed.cluster.write().await;
        cluster.stop(&bed.supervisor, 0);
        let r = hub
            .report_until(name, "Unavailable while the broker is down", |r| {
                r.state() == PlacementState::Unavailable
            })
            .await;
        let started = cluster.start(&bed.supervisor, 0).await;
        let r = r?;
        started?;
        ensure!(
            r.message.starts_with("Kafka unreachable: "),
            "{}",
            r.message
        );
        ensure!(
            observed(&r) == Some((1, 1, true)),
            "the last seen values stay: {r:?}"
        );
        hub.report_until(name, "Synced once the broker is back", |r| {
            synced_with(r, 1)
        })
        .await?;
        engine.stop().await;
        Ok(())
    });
}

#[test]
fn a_second_policy_naming_the_same_topic_is_a_conflict_and_changes_nothing() {
    run(|testbed, bed| async move {
        let cluster = bed.cluster.read().await;
        let client = testbed.mgmt().client();
        let agent_ns = "k-conflict";
        namespace(&client, agent_ns).await?;
        put_secret(
            &client,
            agent_ns,
            "accord-kafka",
            &cluster.secret_data(false),
        )
        .await?;
        let (engine, _metrics) = engine(&client, agent_ns, "accord-kafka").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        let first = topic_item("k2-shared", 7, 2, &[], &[]);
        // Another FederatedKafkaTopic (sorting after the first) naming the same topic with
        // more partitions.
        let mut second = topic_item("k2-shared", 7, 4, &[], &[]);
        second.placed = Some(topic_policy("k2-shared-too"));
        hub.assign(7, true, vec![first, second], vec![]).await;
        hub.report_until("k2-shared", "Synced", |r| synced_with(r, 2))
            .await?;
        // It may have come before the first one's Synced.
        let conflict = |r: &StatusReport| {
            r.placed.as_ref().is_some_and(|p| p.name == "k2-shared-too")
                && r.state() == PlacementState::Conflict
        };
        let r = match hub.reports.iter().find(|r| conflict(r)).cloned() {
            Some(r) => r,
            None => {
                hub.report_until("k2-shared-too", "Conflict", conflict)
                    .await?
            }
        };
        ensure!(
            r.message.contains("default/k2-shared") && r.message.contains("topic k2-shared"),
            "{}",
            r.message
        );
        until_partitions(&cluster.bootstrap, "k2-shared", Some(2)).await?;
        engine.stop().await;
        Ok(())
    });
}

/// A client of the testbed's API server acting as ServiceAccount `namespace/name`.
async fn client_as_service_account(
    testbed: &Testbed,
    namespace: &str,
    name: &str,
) -> Result<kube::Client> {
    let path = testbed.mgmt().kubeconfig_path();
    let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    config.proxy_url = None;
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{namespace}:{name}"));
    Ok(kube::Client::try_from(config)?)
}

#[test]
fn the_agent_reads_its_kafka_secret_with_nothing_more_than_the_role_join_renders() {
    run(|testbed, bed| async move {
        let cluster = bed.cluster.read().await;
        let admin = testbed.mgmt().client();
        let agent_ns = "k-rbac";
        let options = accord_agent::join::AgentManifestOptions {
            namespace: agent_ns.into(),
            kafka_secret: "kafka-rbac".into(),
            ..Default::default()
        };
        // The agent's namespace, ServiceAccount and namespace Role as join applies them (the
        // ClusterRole grants nothing in Kafka's business).
        for object in accord_agent::join::render(&options) {
            if matches!(
                object["kind"].as_str(),
                Some("Namespace" | "ServiceAccount" | "Role" | "RoleBinding")
            ) {
                accord_common::apply::apply(&admin, USER_MANAGER, &object)
                    .await
                    .with_context(|| format!("applying {}", object["kind"]))?;
            }
        }
        put_secret(&admin, agent_ns, "kafka-rbac", &cluster.secret_data(false)).await?;
        // A Secret beside it that the agent must not be able to read.
        put_secret(&admin, agent_ns, "other", &BTreeMap::new()).await?;

        let agent = client_as_service_account(testbed, agent_ns, "accord-agent").await?;
        let secrets: Api<Secret> = Api::namespaced(agent.clone(), agent_ns);
        ensure!(
            secrets.get("other").await.is_err(),
            "the agent could read a Secret it was not granted"
        );
        let (engine, _metrics) = engine_as(&agent, agent_ns, "kafka-rbac").await?;
        let mut hub = ScriptedHub::connect(engine.handle()).await;
        let name = "k2-rbac";
        hub.assign(8, true, vec![topic_item(name, 8, 1, &[], &[])], vec![])
            .await;
        hub.report_until(name, "Synced as the agent's ServiceAccount", |r| {
            synced_with(r, 1)
        })
        .await?;
        until_partitions(&cluster.bootstrap, name, Some(1)).await?;
        engine.stop().await;
        Ok(())
    });
}
