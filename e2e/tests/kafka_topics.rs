//! FederatedKafkaTopics end to end: objects on the management kube-apiserver → the real
//! hub (and its admission webhook, called by that kube-apiserver) → real agents → real
//! Kafka clusters of three brokers in three member clusters, one of them reached over
//! SASL_SSL with SCRAM-SHA-512. Every claim about a topic is checked in Kafka itself, with
//! rdkafka and with Kafka's own `ConfigCommand`, as well as through the object's status.
//!
//! The Kafka clusters are started once for the whole binary (nine JVMs); each test runs
//! its own hub and agents against them, one test at a time, with topic names of its own.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use accord_crds::{KafkaTopicPolicy, PlacementState};
use accord_e2e::kafka::{KafkaCluster, KafkaOptions};
use accord_e2e::kafka_topic_scenario::{
    self as ks, ALREADY_MANAGED_REASON, KafkaMember, KafkaProbe, KafkaScenario,
    KafkaScenarioOptions, POLICY_REASON, TopicView,
};
use accord_e2e::kafka_user_scenario as us;
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use anyhow::{Context as _, Result, bail, ensure};
use kube::Api;
use serde_json::json;
use tokio::sync::OnceCell;

static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(3));
/// Three Kafka clusters of three brokers each; the first also has a SASL_SSL listener.
static KAFKAS: OnceCell<Vec<KafkaCluster>> = OnceCell::const_new();
/// One scenario at a time: they share the brokers, and two cores.
static SERIAL: Mutex<()> = Mutex::new(());
/// How long a change may take to reach every member.
const WAIT: Duration = Duration::from_secs(90);
/// The agents' resync interval: out-of-band drift must be repaired within it.
const RESYNC: Duration = Duration::from_secs(5);
/// Generous for a loaded machine.
const STEP: Duration = Duration::from_secs(90);

async fn kafkas(testbed: &'static Testbed) -> Result<&'static [KafkaCluster]> {
    KAFKAS
        .get_or_try_init(|| async {
            let mut clusters = Vec::new();
            // One member after the other: three JVMs starting at once are enough for two
            // cores.
            for member in 0..3 {
                clusters.push(
                    ks::start_kafka(
                        testbed,
                        member,
                        KafkaOptions {
                            brokers: 3,
                            sasl_ssl: member == 0,
                            ..KafkaOptions::default()
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

/// The spec of a topic named `topic` in `clusters`.
fn spec(
    topic: &str,
    partitions: i32,
    rf: i32,
    config: serde_json::Value,
    clusters: &[String],
) -> serde_json::Value {
    json!({
        "topicName": topic,
        "partitions": partitions,
        "replicationFactor": rf,
        "config": config,
        "placement": {"clusters": clusters},
    })
}

/// Waits until every placement is `state` with a message containing every one of `words`.
async fn wait_state(
    s: &KafkaScenario<'_>,
    ns: &str,
    name: &str,
    clusters: &[String],
    state: PlacementState,
    words: &[&str],
) -> Result<()> {
    s.wait_placements(
        ns,
        name,
        clusters,
        &format!("{state:?} saying {words:?}"),
        WAIT,
        |p| {
            let message = p.message.as_deref().unwrap_or_default();
            p.state == state && words.iter().all(|w| message.contains(w))
        },
    )
    .await
    .map(drop)
}

/// Waits until `check` holds for the configs of `topic` in every member's Kafka.
async fn wait_configs(
    s: &KafkaScenario<'_>,
    topic: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&BTreeMap<String, ks::ConfigView>) -> bool,
) -> Result<()> {
    let probes = s.probes()?;
    let check = &check;
    for (i, probe) in probes.iter().enumerate() {
        until(
            &format!("{}: {topic} {what}", s.clusters[i]),
            timeout,
            || async move {
                let configs = probe.configs(topic).await?;
                Ok(if check(&configs) {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("{configs:?}"))
                })
            },
        )
        .await?;
    }
    Ok(())
}

/// Whether `key` is set on the topic itself with `value`.
fn topic_level(configs: &BTreeMap<String, ks::ConfigView>, key: &str, value: &str) -> bool {
    configs
        .get(key)
        .is_some_and(|c| c.topic_level && c.value.as_deref() == Some(value))
}

/// Checks for `window` that every probe keeps seeing `topic` as `view`: for claims that
/// something does not happen.
async fn stays(
    probes: &[KafkaProbe],
    topic: &str,
    view: TopicView,
    window: Duration,
) -> Result<()> {
    let end = Instant::now() + window;
    loop {
        for probe in probes {
            let seen = probe.topic(topic).await?;
            ensure!(
                seen == Some(view),
                "{}: {topic} is {seen:?}, expected it to stay {view:?}",
                probe.bootstrap
            );
        }
        if Instant::now() >= end {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[test]
fn a_topic_reaches_three_members_and_every_change_is_applied_refused_or_repaired_as_kafka_allows() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let kafkas = kafkas(testbed).await?;
        let s = KafkaScenario::start(
            testbed,
            KafkaScenarioOptions {
                name: "kt-main",
                members: (0..3)
                    .map(|i| KafkaMember {
                        member: i,
                        kafka: &kafkas[i],
                        sasl: i == 0,
                    })
                    .collect(),
                resync: RESYNC,
                deletion_timeout: None,
                webhook: false,
            },
        )
        .await?;
        let (ns, name, topic) = ("kt-main", "orders", "kt-main-orders");
        let clusters = s.clusters.clone();
        let probes = s.probes()?;
        ensure_ns(testbed, ns).await?;

        // 12 partitions, RF 3, two configs, in three members (the first over SASL_SSL).
        let configs = json!({"retention.ms": "86400000", "cleanup.policy": "compact"});
        ks::apply_topic(
            testbed,
            ns,
            name,
            spec(topic, 12, 3, configs.clone(), &clusters),
        )
        .await?;
        s.wait_synced(ns, name, 12, 3, WAIT).await?;
        for kafka in kafkas {
            let set = ks::tool_topic_configs(testbed, &kafka.bootstrap, topic).await?;
            ensure!(
                set.get("retention.ms").map(String::as_str) == Some("86400000")
                    && set.get("cleanup.policy").map(String::as_str) == Some("compact"),
                "ConfigCommand at {} lists {set:?}",
                kafka.bootstrap
            );
        }
        ks::wait_condition(testbed, ns, name, "Ready", "True", None, WAIT).await?;

        // Partitions 12 → 24 everywhere; 24 → 12 refused, brokers untouched.
        ks::apply_topic(
            testbed,
            ns,
            name,
            spec(topic, 24, 3, configs.clone(), &clusters),
        )
        .await?;
        s.wait_synced(ns, name, 24, 3, WAIT).await?;
        ks::apply_topic(
            testbed,
            ns,
            name,
            spec(topic, 12, 3, configs.clone(), &clusters),
        )
        .await?;
        wait_state(
            &s,
            ns,
            name,
            &clusters,
            PlacementState::Error,
            &["NotSupported", "24", "12"],
        )
        .await?;
        let kept = TopicView {
            partitions: 24,
            rf: 3,
        };
        stays(&probes, topic, kept, Duration::from_secs(2)).await?;
        ks::wait_condition(testbed, ns, name, "Degraded", "True", None, WAIT).await?;
        // A new replication factor: refused the same way.
        ks::apply_topic(
            testbed,
            ns,
            name,
            spec(topic, 24, 2, configs.clone(), &clusters),
        )
        .await?;
        wait_state(
            &s,
            ns,
            name,
            &clusters,
            PlacementState::Error,
            &["NotSupported", "replication", "3", "2"],
        )
        .await?;
        stays(&probes, topic, kept, Duration::from_secs(2)).await?;
        ks::apply_topic(
            testbed,
            ns,
            name,
            spec(topic, 24, 3, configs.clone(), &clusters),
        )
        .await?;
        s.wait_synced(ns, name, 24, 3, WAIT).await?;

        // Someone else's key on the broker; then an edited key is applied, theirs kept.
        for kafka in kafkas {
            ks::tool_set_config(
                testbed,
                &kafka.bootstrap,
                topic,
                "max.message.bytes",
                "2000000",
            )
            .await?;
        }
        let edited = json!({"retention.ms": "172800000", "cleanup.policy": "compact"});
        ks::apply_topic(
            testbed,
            ns,
            name,
            spec(topic, 24, 3, edited.clone(), &clusters),
        )
        .await?;
        s.wait_synced(ns, name, 24, 3, WAIT).await?;
        wait_configs(&s, topic, "edited, the foreign key kept", WAIT, |c| {
            topic_level(c, "retention.ms", "172800000")
                && topic_level(c, "cleanup.policy", "compact")
                && topic_level(c, "max.message.bytes", "2000000")
        })
        .await?;

        // A managed key changed out of band is restored within the resync interval (plus
        // the time one reconcile takes); the foreign key survives that reconcile as well.
        let drifted = &kafkas[1].bootstrap;
        ks::tool_set_config(testbed, drifted, topic, "retention.ms", "1000").await?;
        let changed = Instant::now();
        until(
            "retention.ms restored in the second member",
            RESYNC * 3 + Duration::from_secs(10),
            || async {
                let c = probes[1].configs(topic).await?;
                Ok(if topic_level(&c, "retention.ms", "172800000") {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("{:?}", c.get("retention.ms")))
                })
            },
        )
        .await?;
        // One resync to notice, a few seconds to apply and observe again.
        let repaired = changed.elapsed();
        ensure!(
            repaired <= RESYNC + Duration::from_secs(5),
            "drift repaired only after {repaired:.1?}, resync interval {RESYNC:?}"
        );
        let set = ks::tool_topic_configs(testbed, drifted, topic).await?;
        ensure!(
            set.get("max.message.bytes").map(String::as_str) == Some("2000000"),
            "the foreign key did not survive the repair: {set:?}"
        );

        // A key removed from the spec goes back to the broker default; the foreign key stays.
        let fewer = json!({"retention.ms": "172800000"});
        ks::apply_topic(
            testbed,
            ns,
            name,
            spec(topic, 24, 3, fewer.clone(), &clusters),
        )
        .await?;
        wait_configs(&s, topic, "cleanup.policy back to the default", WAIT, |c| {
            c.get("cleanup.policy")
                .is_some_and(|v| !v.topic_level && v.value.as_deref() == Some("delete"))
                && topic_level(c, "retention.ms", "172800000")
                && topic_level(c, "max.message.bytes", "2000000")
        })
        .await?;
        s.wait_synced(ns, name, 24, 3, WAIT).await?;

        // The topic deleted out of band is recreated, with its configs, and reported.
        probes[2].delete(topic).await?;
        until(
            "the topic recreated in the third member",
            RESYNC * 3 + WAIT,
            || async {
                Ok(match probes[2].topic(topic).await? {
                    Some(view) if view == kept => Check::Ready(()),
                    other => Check::NotYet(format!("{other:?}")),
                })
            },
        )
        .await?;
        s.wait_synced(ns, name, 24, 3, WAIT).await?;
        until("configs of the recreated topic", WAIT, || async {
            let c = probes[2].configs(topic).await?;
            Ok(if topic_level(&c, "retention.ms", "172800000") {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{:?}", c.get("retention.ms")))
            })
        })
        .await?;

        // Every broker of the second member stopped: Unavailable with the reason; started
        // again: Synced, with the very same agent process.
        let pid = s.agent_pid(1)?;
        let one = [clusters[1].clone()];
        ks::stop_kafka(testbed, &kafkas[1]);
        wait_state(
            &s,
            ns,
            name,
            &one,
            PlacementState::Unavailable,
            &["unreachable"],
        )
        .await?;
        ks::start_kafka_again(testbed, &kafkas[1]).await?;
        s.wait_synced(ns, name, 24, 3, WAIT).await?;
        ensure!(s.agent_pid(1)? == pid, "the agent was restarted");

        // SASL_SSL with SCRAM-SHA-512: a wrong password in the Secret makes the first
        // member Unavailable saying authentication failed; the right one brings it back.
        // Neither password is in any component's log.
        let good = kafkas[0].secret_data(true);
        ensure!(
            good.get("security.protocol").map(String::as_str) == Some("SASL_SSL"),
            "{:?}",
            good.keys()
        );
        let password = good
            .get("sasl.password")
            .context("no password in the Secret")?
            .clone();
        let wrong_password = format!("wrong-{}", std::process::id());
        let mut wrong = good.clone();
        wrong.insert("sasl.password".into(), wrong_password.clone());
        let pid = s.agent_pid(0)?;
        s.set_secret(0, &wrong).await?;
        let first = [clusters[0].clone()];
        wait_state(
            &s,
            ns,
            name,
            &first,
            PlacementState::Unavailable,
            &["authentication failed"],
        )
        .await?;
        s.set_secret(0, &good).await?;
        s.wait_synced(ns, name, 24, 3, WAIT).await?;
        ensure!(s.agent_pid(0)? == pid, "the agent was restarted");
        for secret in [&password, &wrong_password] {
            let leaked = ks::logs_containing(testbed, secret)?;
            ensure!(leaked.is_empty(), "a password is in {leaked:?}");
        }
        let status = serde_json::to_string(&ks::get_topic(testbed, ns, name).await?)?;
        let events = format!("{:?}", ks::events(testbed, ns, name).await?);
        for text in [&status, &events] {
            ensure!(
                !text.contains(&password) && !text.contains(&wrong_password),
                "a password in {text}"
            );
        }
        Ok(())
    });
}

#[test]
fn the_webhook_refuses_what_breaks_a_policy_or_takes_a_topic_already_taken_and_audit_only_warns() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let kafkas = kafkas(testbed).await?;
        let s = plain_scenario(testbed, kafkas, "kt-hook", None, true).await?;
        let clusters = s.clusters.clone();

        // Deny: min 12 partitions and RF 3. A 6-partition RF 1 topic breaks both rules.
        let pci = "kt-hook-pci";
        s.namespace(pci, &[("compliance", "kt-hook-pci")]).await?;
        ks::apply_policy(
            testbed,
            pci,
            json!({
                "namespaceSelector": {"matchLabels": {"compliance": "kt-hook-pci"}},
                "minPartitions": 12,
                "replicationFactor": 3,
            }),
        )
        .await?;
        let small = spec("kt-hook-small", 6, 1, json!({}), &clusters);
        // The hub's reflectors and the API server's webhook registration catch up first.
        let refusal = until("the webhook refusing the small topic", WAIT, || {
            let small = small.clone();
            async move {
                Ok(
                    match ks::try_apply_topic(testbed, pci, "small", small, true).await {
                        Err(kube::Error::Api(e)) if e.reason == POLICY_REASON => Check::Ready(e),
                        other => Check::NotYet(format!("{other:?}")),
                    },
                )
            }
        })
        .await?;
        eprintln!("refused: {refusal:?}");
        let refused = ks::try_apply_topic(testbed, pci, "small", small.clone(), false).await;
        let Err(kube::Error::Api(e)) = refused else {
            bail!("the small topic was admitted: {refused:?}");
        };
        ensure!(e.reason == POLICY_REASON, "{e:?}");
        for rule in [
            "spec.partitions: must be at least 12 (is 6)",
            "spec.replicationFactor: must be 3 (is 1)",
        ] {
            ensure!(
                e.message.contains(rule) && e.message.contains(pci),
                "the refusal does not name {rule:?} of {pci}: {}",
                e.message
            );
        }
        ensure!(
            ks::get_topic(testbed, pci, "small").await?.is_none(),
            "refused, yet stored"
        );
        // What keeps to the policy is admitted.
        ks::apply_topic(
            testbed,
            pci,
            "big",
            spec("kt-hook-big", 12, 3, json!({}), &clusters),
        )
        .await?;
        s.wait_synced(pci, "big", 12, 3, WAIT).await?;

        // Audit: admitted, with a warning kubectl prints, an Event, the condition, and
        // propagated.
        let audit = "kt-hook-audit";
        s.namespace(audit, &[("compliance", "kt-hook-audit")])
            .await?;
        ks::apply_policy(
            testbed,
            audit,
            json!({
                "namespaceSelector": {"matchLabels": {"compliance": "kt-hook-audit"}},
                "minPartitions": 12,
                "enforcement": "Audit",
            }),
        )
        .await?;
        let manifest = testbed.dir().join("kt-hook-audit.yaml");
        std::fs::write(
            &manifest,
            serde_json::to_string(&ks::topic_object(
                audit,
                "small",
                spec("kt-hook-audited", 6, 1, json!({}), &clusters),
            ))?,
        )?;
        let out = until("kubectl apply with the audit warning", WAIT, || {
            let manifest = manifest.clone();
            async move {
                let out = testbed
                    .kubectl(testbed.mgmt())
                    .args(["apply", "--dry-run=server", "-f"])
                    .arg(&manifest)
                    .output()
                    .await?;
                let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                Ok(if out.status.success() && stderr.contains("Warning:") {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("{}: {stderr}", out.status))
                })
            }
        })
        .await;
        out?;
        let out = testbed
            .kubectl(testbed.mgmt())
            .args(["apply", "-f"])
            .arg(&manifest)
            .output()
            .await?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.success(), "kubectl apply failed: {stderr}");
        ensure!(
            stderr.contains("Warning:")
                && stderr.contains("spec.partitions: must be at least 12 (is 6)"),
            "kubectl printed no warning naming the rule: {stderr}"
        );
        ks::wait_event(testbed, audit, "small", "Warning", "PolicyViolation", WAIT).await?;
        ks::wait_condition(
            testbed,
            audit,
            "small",
            "PolicyViolation",
            "True",
            Some("AuditOnly"),
            WAIT,
        )
        .await?;
        s.wait_synced(audit, "small", 6, 1, WAIT).await?;

        // A second topic for a name and cluster already taken is refused, naming the owner;
        // the same name in another cluster is not.
        let dup = "kt-hook-dup";
        s.namespace(dup, &[]).await?;
        ks::apply_topic(
            testbed,
            dup,
            "first",
            spec("kt-hook-shared", 3, 1, json!({}), &clusters[..1]),
        )
        .await?;
        let second = ks::try_apply_topic(
            testbed,
            dup,
            "second",
            spec("kt-hook-shared", 3, 1, json!({}), &clusters),
            false,
        )
        .await;
        let Err(kube::Error::Api(e)) = second else {
            bail!("the duplicate was admitted: {second:?}");
        };
        ensure!(e.reason == ALREADY_MANAGED_REASON, "{e:?}");
        ensure!(
            e.message.contains("first") && e.message.contains(&clusters[0]),
            "the refusal does not name the owner and the cluster: {}",
            e.message
        );
        ks::apply_topic(
            testbed,
            dup,
            "elsewhere",
            spec("kt-hook-shared", 3, 1, json!({}), &clusters[1..]),
        )
        .await?;

        for policy in [pci, audit] {
            ks::delete_policy(testbed, policy).await?;
        }
        s.unregister_webhook().await?;
        Ok(())
    });
}

#[test]
fn the_hub_checks_policies_again_before_propagating_the_older_topic_keeps_a_name_and_labels_choose_clusters()
 {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let kafkas = kafkas(testbed).await?;
        // No webhook: topics get in as they would while it is down.
        let s = plain_scenario(testbed, kafkas, "kt-late", None, false).await?;
        let clusters = s.clusters.clone();
        let probes = s.probes()?;
        let (ns, topic) = ("kt-late", "kt-late-orders");
        s.namespace(ns, &[("tier", "kt-late")]).await?;
        ks::apply_topic(
            testbed,
            ns,
            "orders",
            spec(topic, 6, 1, json!({}), &clusters),
        )
        .await?;
        s.wait_synced(ns, "orders", 6, 1, WAIT).await?;

        // A policy created afterwards: PolicyViolation, and a change is no longer sent.
        ks::apply_policy(
            testbed,
            ns,
            json!({"namespaceSelector": {"matchLabels": {"tier": "kt-late"}}, "minPartitions": 12}),
        )
        .await?;
        let message = ks::wait_condition(
            testbed,
            ns,
            "orders",
            "PolicyViolation",
            "True",
            Some("PolicyViolated"),
            WAIT,
        )
        .await?;
        ensure!(
            message.contains("spec.partitions: must be at least 12 (is 6)"),
            "the condition does not name the rule and its limit: {message}"
        );
        let policies: Api<KafkaTopicPolicy> = Api::all(testbed.mgmt().client());
        until("the policy counting its violating topic", WAIT, || async {
            let status = policies.get(ns).await?.status.unwrap_or_default();
            Ok(if status.violating_topics == Some(1) {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{status:?}"))
            })
        })
        .await?;
        ks::apply_topic(
            testbed,
            ns,
            "orders",
            spec(topic, 8, 1, json!({}), &clusters),
        )
        .await?;
        s.wait_placements(ns, "orders", &clusters, "the edit seen", WAIT, |_| true)
            .await?;
        stays(
            &probes,
            topic,
            TopicView {
                partitions: 6,
                rf: 1,
            },
            RESYNC * 2,
        )
        .await?;
        ks::wait_condition(
            testbed,
            ns,
            "orders",
            "PolicyViolation",
            "True",
            Some("PolicyViolated"),
            WAIT,
        )
        .await?;

        // The policy gone, the change goes through.
        ks::delete_policy(testbed, ns).await?;
        s.wait_synced(ns, "orders", 8, 1, WAIT).await?;

        // A newer object for the same topic in the same clusters: Conflict naming the owner,
        // nothing sent.
        ks::apply_topic(
            testbed,
            ns,
            "orders-again",
            spec(topic, 10, 1, json!({}), &clusters),
        )
        .await?;
        wait_state(
            &s,
            ns,
            "orders-again",
            &clusters,
            PlacementState::Conflict,
            &["kt-late/orders"],
        )
        .await?;
        stays(
            &probes,
            topic,
            TopicView {
                partitions: 8,
                rf: 1,
            },
            Duration::from_secs(2),
        )
        .await?;
        s.wait_synced(ns, "orders", 8, 1, WAIT).await?;

        // The owner deleted (Retain: the topic stays in Kafka), the newer object takes the
        // topic over in every cluster and applies its own spec to it.
        ks::delete_topic(testbed, ns, "orders").await?;
        s.wait_synced(ns, "orders-again", 10, 1, WAIT).await?;
        for probe in &probes {
            let seen = probe.topic(topic).await?.context("the topic is gone")?;
            ensure!(seen.partitions == 10, "{seen:?}");
        }

        // Clusters by ManagedCluster labels, chosen again when the labels change.
        let label = "e2e.accord.io/kt-late-topics";
        ks::label_cluster(testbed, &clusters[0], label, "yes").await?;
        ks::apply_topic(
            testbed,
            ns,
            "selected",
            json!({
                "topicName": "kt-late-selected",
                "partitions": 2,
                "replicationFactor": 1,
                "placement": {"clusterSelector": {"matchLabels": {label: "yes"}}},
            }),
        )
        .await?;
        let status = s
            .wait_placements(ns, "selected", &clusters[..1], "Synced", WAIT, |p| {
                p.state == PlacementState::Synced
            })
            .await?;
        ensure!(
            status.placements.len() == 1,
            "only the labelled cluster is selected: {:?}",
            status.placements
        );
        ensure!(
            probes[1].topic("kt-late-selected").await?.is_none(),
            "the topic reached a cluster without the label"
        );
        ks::label_cluster(testbed, &clusters[1], label, "yes").await?;
        s.wait_synced(ns, "selected", 2, 1, WAIT).await?;

        // A drained cluster gets no new topic (and keeps the ones it has); undrained, it
        // gets it.
        let drain = |on: bool| json!({"spec": {"unschedulable": on}});
        accord_e2e::fleet::patch_managed_cluster(testbed, &clusters[1], drain(true)).await?;
        ks::apply_topic(
            testbed,
            ns,
            "drained",
            spec("kt-late-drained", 1, 1, json!({}), &clusters),
        )
        .await?;
        s.wait_placements(ns, "drained", &clusters[..1], "Synced", WAIT, |p| {
            p.state == PlacementState::Synced
        })
        .await?;
        s.wait_placements(
            ns,
            "drained",
            &clusters[1..],
            "held as drained",
            WAIT,
            |p| {
                p.state == PlacementState::Pending
                    && p.message
                        .as_deref()
                        .is_some_and(|m| m.contains("unschedulable"))
            },
        )
        .await?;
        ensure!(
            probes[1].topic("kt-late-drained").await?.is_none(),
            "the topic reached a drained cluster"
        );
        ensure!(
            probes[1].topic(topic).await?.is_some(),
            "a drain took away a topic the cluster had"
        );
        accord_e2e::fleet::patch_managed_cluster(testbed, &clusters[1], drain(false)).await?;
        s.wait_synced(ns, "drained", 1, 1, WAIT).await?;
        Ok(())
    });
}

#[test]
fn retain_keeps_topics_delete_removes_them_everywhere_and_a_missing_agent_holds_deletion_only_for_the_bound()
 {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let kafkas = kafkas(testbed).await?;
        let bound = Duration::from_secs(20);
        let mut s = plain_scenario(testbed, kafkas, "kt-del", Some(bound), false).await?;
        let clusters = s.clusters.clone();
        let probes = s.probes()?;
        let ns = "kt-del";
        ensure_ns(testbed, ns).await?;
        let with_policy = |topic: &str, policy: Option<&str>| {
            let mut spec = spec(topic, 3, 1, json!({}), &clusters);
            if let Some(policy) = policy {
                spec["deletionPolicy"] = json!(policy);
            }
            spec
        };
        ks::apply_topic(
            testbed,
            ns,
            "retained",
            with_policy("kt-del-retained", None),
        )
        .await?;
        ks::apply_topic(
            testbed,
            ns,
            "deleted",
            with_policy("kt-del-deleted", Some("Delete")),
        )
        .await?;
        ks::apply_topic(
            testbed,
            ns,
            "bounded",
            with_policy("kt-del-bounded", Some("Delete")),
        )
        .await?;
        for name in ["retained", "deleted", "bounded"] {
            s.wait_synced(ns, name, 3, 1, WAIT).await?;
        }

        // Retain (the default): the object goes, the topics stay.
        ks::delete_topic(testbed, ns, "retained").await?;
        ks::wait_topic_gone(testbed, ns, "retained", WAIT).await?;
        stays(
            &probes,
            "kt-del-retained",
            TopicView {
                partitions: 3,
                rf: 1,
            },
            Duration::from_secs(2),
        )
        .await?;

        // Delete: gone from every member before the object goes.
        ks::delete_topic(testbed, ns, "deleted").await?;
        ks::wait_topic_gone(testbed, ns, "deleted", WAIT).await?;
        for probe in &probes {
            let left = probe.topic("kt-del-deleted").await?;
            ensure!(
                left.is_none(),
                "{}: kt-del-deleted is still there: {left:?}",
                probe.bootstrap
            );
        }

        // One member's agent stopped: the other member's topic goes, the object goes after
        // the bound with a Warning naming the member left behind.
        s.fleet.kill_agent(&clusters[1])?;
        let deleting = Instant::now();
        ks::delete_topic(testbed, ns, "bounded").await?;
        until(
            "kt-del-bounded gone from the first member",
            WAIT,
            || async {
                Ok(match probes[0].topic("kt-del-bounded").await? {
                    None => Check::Ready(()),
                    Some(v) => Check::NotYet(format!("{v:?}")),
                })
            },
        )
        .await?;
        ensure!(
            ks::get_topic(testbed, ns, "bounded").await?.is_some() || deleting.elapsed() >= bound,
            "the object went before the bound although a member never confirmed"
        );
        ks::wait_topic_gone(testbed, ns, "bounded", bound + WAIT).await?;
        ensure!(
            deleting.elapsed() >= bound - Duration::from_secs(2),
            "released after {:.1?}, before the bound of {bound:?}",
            deleting.elapsed()
        );
        let warning = ks::wait_event(
            testbed,
            ns,
            "bounded",
            "Warning",
            "DeletionIncomplete",
            WAIT,
        )
        .await?;
        ensure!(
            warning.contains(&clusters[1]),
            "the Warning does not name {}: {warning}",
            clusters[1]
        );
        ensure!(
            probes[1].topic("kt-del-bounded").await?.is_some(),
            "the stopped member's topic should still be there"
        );
        Ok(())
    });
}

/// A scenario of its own hub and agents in members 1 and 2, whose brokers are PLAINTEXT
/// without an authorizer.
async fn plain_scenario(
    testbed: &'static Testbed,
    kafkas: &'static [KafkaCluster],
    name: &'static str,
    deletion_timeout: Option<Duration>,
    webhook: bool,
) -> Result<KafkaScenario<'static>> {
    plain_scenario_in(testbed, kafkas, name, 1..3, deletion_timeout, webhook).await
}

/// A scenario of its own hub and agents in `members`, over PLAINTEXT.
async fn plain_scenario_in(
    testbed: &'static Testbed,
    kafkas: &'static [KafkaCluster],
    name: &'static str,
    members: std::ops::Range<usize>,
    deletion_timeout: Option<Duration>,
    webhook: bool,
) -> Result<KafkaScenario<'static>> {
    KafkaScenario::start(
        testbed,
        KafkaScenarioOptions {
            name,
            members: members
                .map(|i| KafkaMember {
                    member: i,
                    kafka: &kafkas[i],
                    sasl: false,
                })
                .collect(),
            resync: RESYNC,
            deletion_timeout,
            webhook,
        },
    )
    .await
}

async fn ensure_ns(testbed: &Testbed, ns: &str) -> Result<()> {
    accord_e2e::fleet::ensure_namespace(testbed.mgmt(), ns).await
}

/// Brokers without an authorizer (PLAINTEXT, as `sandbox up --with-kafka` runs them)
/// answer every ACL request SECURITY_DISABLED: a FederatedKafkaUser still gets its SCRAM
/// credential and quotas there; with ACLs, each placement and the `Degraded` condition
/// (reason `AclsNotKept`) say the ACLs cannot be kept and why; without, it is simply Ready.
#[test]
fn a_kafka_user_works_on_brokers_without_an_authorizer_and_says_its_acls_cannot_be_kept() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let kafkas = kafkas(testbed).await?;
        let s = plain_scenario(
            testbed,
            kafkas,
            "ku-noauth",
            Some(Duration::from_secs(60)),
            false,
        )
        .await?;
        let clusters = s.clusters.clone();
        let ns = "ku-noauth";
        let user = |name: &str, acls: serde_json::Value| {
            json!({
                "userName": name,
                "authentication": {"type": "scram-sha-512", "iterations": 4096},
                "acls": acls,
                "quotas": {"producerByteRate": 1048576},
                "placement": {"clusters": clusters},
            })
        };
        let with_acls = json!([{"resource": {"type": "topic", "name": "orders"},
                                "operations": ["Write"], "type": "allow"}]);
        us::apply_user(testbed, ns, "writer", user("writer", with_acls)).await?;
        us::apply_user(testbed, ns, "plain", user("plain", json!([]))).await?;
        let unkept = us::wait_placements(
            testbed,
            ns,
            "writer",
            &clusters,
            "Synced, ACLs not kept",
            STEP,
            |p| {
                p.state == PlacementState::Synced
                    && p.message.as_deref().is_some_and(|m| {
                        m.contains("cannot be kept here") && m.contains("SECURITY_DISABLED")
                    })
            },
        )
        .await?;
        let conditions = unkept.status.unwrap_or_default().conditions;
        let degraded =
            accord_crds::conditions::find(&conditions, "Degraded").context("Degraded")?;
        ensure!(
            degraded.status == "True" && degraded.reason == "AclsNotKept",
            "{degraded:?}"
        );
        ensure!(
            accord_crds::conditions::is_true(&conditions, "Ready"),
            "{conditions:?}"
        );
        let plain = us::wait_synced(testbed, ns, "plain", &clusters, STEP).await?;
        let conditions = plain.status.unwrap_or_default().conditions;
        ensure!(
            !accord_crds::conditions::is_true(&conditions, "Degraded"),
            "{conditions:?}"
        );
        // The brokers hold both users' credentials and quotas.
        for kafka in &kafkas[1..3] {
            let admin = accord_kafka::Admin::new(accord_kafka::KafkaConfig::plaintext(
                kafka.bootstrap.split(','),
            ));
            let credentials = admin.describe_user_scram_credentials(None).await?;
            let quotas = admin.describe_client_quotas(None).await?;
            for name in ["writer", "plain"] {
                ensure!(
                    credentials.contains_key(name),
                    "{name}: no credential in {credentials:?}"
                );
                ensure!(
                    quotas.get(name).and_then(|q| q.get("producer_byte_rate"))
                        == Some(&1_048_576.0),
                    "{name}: quotas {quotas:?}"
                );
            }
        }
        Ok(())
    });
}

/// A topic already in three members (delivered at once) takes `spec.rollout`
/// `ProgressivePerGroup` by a `ring` label with a config change: `retention.ms` reaches
/// ring 0, then ring 1 once ring 0 was `Synced` for the soak, then ring 2 — as each
/// member's Kafka shows it, and as Kafka's own `kafka-configs` lists it while the next
/// ring soaks.
#[test]
fn a_config_change_rolls_out_ring_by_ring_as_each_members_kafka_shows_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let kafkas = kafkas(testbed).await?;
        let s = plain_scenario_in(testbed, kafkas, "kt-ring", 0..3, None, false).await?;
        let (ns, name, topic) = ("kt-ring", "events", "kt-ring-events");
        let ring = "ring-kt-ring";
        for (i, cluster) in s.clusters.iter().enumerate() {
            ks::label_cluster(testbed, cluster, ring, &i.to_string()).await?;
        }
        ensure_ns(testbed, ns).await?;
        const SOAK: u64 = 15;
        let object = |retention: &str, rollout: serde_json::Value| {
            json!({
                "topicName": topic, "partitions": 3, "replicationFactor": 3,
                "config": {"retention.ms": retention},
                "placement": {"clusterSelector": {"matchExpressions": [
                    {"key": ring, "operator": "Exists"}]}},
                "rollout": rollout,
            })
        };
        // Delivered at once to every ring the hub selected: it has seen every ring label.
        ks::apply_topic(testbed, ns, name, object("3600000", json!({}))).await?;
        s.wait_synced(ns, name, 3, 3, WAIT).await?;
        wait_configs(&s, topic, "retention.ms 3600000", WAIT, |c| {
            topic_level(c, "retention.ms", "3600000")
        })
        .await?;

        let progressive = json!({
            "strategy": "ProgressivePerGroup", "groups": {"byLabel": ring},
            "minSuccessTime": format!("{SOAK}s"), "progressDeadline": "2m",
        });
        let probes = s.probes()?;
        ks::apply_topic(testbed, ns, name, object("7200000", progressive)).await?;
        // When each member's Kafka first had the new value.
        let mut reached: Vec<Option<Instant>> = vec![None; probes.len()];
        let mut checked_ring0 = false;
        let deadline = Instant::now() + STEP * 3;
        while reached.iter().any(Option::is_none) {
            s.ensure_running()?;
            ensure!(
                Instant::now() < deadline,
                "the rollout did not reach every ring: {reached:?}"
            );
            for (i, probe) in probes.iter().enumerate() {
                if reached[i].is_none()
                    && topic_level(&probe.configs(topic).await?, "retention.ms", "7200000")
                {
                    reached[i] = Some(Instant::now());
                }
            }
            // Ring 0 has it: while it soaks, Kafka's own tool still lists the old value
            // on rings 1 and 2.
            if reached[0].is_some() && !checked_ring0 {
                checked_ring0 = true;
                for (i, kafka) in kafkas.iter().enumerate().skip(1) {
                    let set = ks::tool_topic_configs(testbed, &kafka.bootstrap, topic).await?;
                    ensure!(
                        set.get("retention.ms").map(String::as_str) == Some("3600000"),
                        "ring {i} has the new value while ring 0 soaks: {set:?}"
                    );
                }
                ensure!(
                    reached[1].is_none() && reached[2].is_none(),
                    "rings 1 and 2 were sent the change with ring 0: {reached:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let at: Vec<Instant> = reached.into_iter().flatten().collect();
        let gaps = [
            at[1].saturating_duration_since(at[0]).as_secs_f64(),
            at[2].saturating_duration_since(at[1]).as_secs_f64(),
        ];
        eprintln!(
            "kafka rollout: ring 0 → ring 1 {:.1} s, ring 1 → ring 2 {:.1} s (soak {SOAK} s)",
            gaps[0], gaps[1]
        );
        ensure!(
            gaps.iter().all(|g| *g >= SOAK as f64 - 1.0),
            "a ring got the change before the one before it soaked {SOAK} s: {gaps:?}"
        );
        // Kafka's own tool on every member's broker: the new value everywhere.
        for (i, kafka) in kafkas.iter().enumerate() {
            let set = ks::tool_topic_configs(testbed, &kafka.bootstrap, topic).await?;
            ensure!(
                set.get("retention.ms").map(String::as_str) == Some("7200000"),
                "ring {i}: {set:?}"
            );
        }
        // Succeeded, and each placement names the revision rolled out as the one it runs.
        let rollout = until("the rollout Succeeded", WAIT, || async {
            let status = ks::get_topic(testbed, ns, name)
                .await?
                .and_then(|t| t.status)
                .unwrap_or_default();
            Ok(match &status.rollout {
                Some(r)
                    if r.phase == "Succeeded"
                        && status
                            .placements
                            .iter()
                            .all(|p| p.revision.as_deref() == Some(r.revision.as_str())) =>
                {
                    Check::Ready(r.clone())
                }
                _ => Check::NotYet(format!("{:?} {:?}", status.rollout, status.placements)),
            })
        })
        .await?;
        ensure!(
            rollout.step == 3 && rollout.succeeded == 3 && rollout.failed == 0,
            "one step per ring: {rollout:?}"
        );
        ks::wait_event(testbed, ns, name, "Normal", "RolloutSucceeded", WAIT).await?;
        ks::delete_topic(testbed, ns, name).await?;
        ks::wait_topic_gone(testbed, ns, name, WAIT).await
    });
}
