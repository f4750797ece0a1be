//! A member's Kafka that stops answering is seen within seconds, not at the next resync:
//! real hub, real agent (its default probe interval and timeout, the default 30 s resync),
//! a real single-broker Kafka. The broker is frozen with SIGSTOP while nothing changes in
//! the spec; the topic's placement turns `Unavailable` within 10 s of the freeze (before
//! the agent's liveness probe the agent saw it only at its next look, up to 30 s later, and
//! then only after that look's 10 s request timeout). After SIGCONT it is `Synced` again,
//! and the probe made the agent apply nothing: no CreateTopics, CreatePartitions,
//! IncrementalAlterConfigs or DeleteTopics request went out from the first sync to the end.

use std::time::{Duration, Instant};

use accord_crds::PlacementState;
use accord_e2e::fleet::agent_metrics;
use accord_e2e::kafka::KafkaOptions;
use accord_e2e::kafka_topic_scenario::{
    self as ks, KafkaMember, KafkaScenario, KafkaScenarioOptions, TopicView,
};
use accord_e2e::process::Frozen;
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use anyhow::{Context as _, Result, ensure};
use serde_json::json;

static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(1));
/// What the issue asks: `Unavailable` within 10 s of the freeze.
const VISIBLE_WITHIN: Duration = Duration::from_secs(10);
/// Generous for a loaded machine; each step normally takes a few seconds.
const STEP: Duration = Duration::from_secs(90);
/// The agent's default resync: a look at the topics alone would come too late.
const RESYNC: Duration = Duration::from_secs(30);
/// The requests that change a topic; none may follow from a probe.
const APPLIES: [&str; 4] = [
    "create_topics",
    "create_partitions",
    "incremental_alter_configs",
    "delete_topics",
];

/// Requests of `kind` the agent sent to Kafka, from its `/metrics`.
async fn kafka_requests(testbed: &Testbed, http: &str, kind: &str) -> Result<u64> {
    let text = agent_metrics(testbed, http).await?;
    let series = format!("accord_agent_kafka_requests_total{{request=\"{kind}\"}} ");
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64))
}

async fn applies(testbed: &Testbed, http: &str) -> Result<Vec<(&'static str, u64)>> {
    let mut counts = Vec::new();
    for kind in APPLIES {
        counts.push((kind, kafka_requests(testbed, http, kind).await?));
    }
    Ok(counts)
}

#[test]
fn a_frozen_broker_makes_the_placement_unavailable_within_ten_seconds_and_synced_again_without_an_apply()
 {
    TESTBED.run(|testbed| async move {
        let kafka = ks::start_kafka(
            testbed,
            0,
            KafkaOptions {
                brokers: 1,
                sasl_ssl: false,
                ..KafkaOptions::default()
            },
        )
        .await?;
        let s = KafkaScenario::start(
            testbed,
            KafkaScenarioOptions {
                name: "kprobe",
                members: vec![KafkaMember {
                    member: 0,
                    kafka: &kafka,
                    sasl: false,
                }],
                resync: RESYNC,
                deletion_timeout: None,
                webhook: false,
            },
        )
        .await?;
        let (ns, name, topic) = ("kprobe", "frozen", "kprobe-frozen");
        let clusters = s.clusters.clone();
        let http = s.fleet.agents[&clusters[0]].http.clone();
        ks::apply_topic(
            testbed,
            ns,
            name,
            json!({
                "topicName": topic,
                "partitions": 3,
                "replicationFactor": 1,
                "config": {"retention.ms": "3600000"},
                "placement": {"clusters": clusters},
            }),
        )
        .await?;
        s.wait_synced(ns, name, 3, 1, STEP).await?;
        let before = applies(testbed, &http).await?;
        // The probe runs (its first tick is at once once topics are assigned).
        until("the agent probes its Kafka", STEP, || async {
            let probes = kafka_requests(testbed, &http, "probe").await?;
            Ok(if probes > 0 {
                Check::Ready(())
            } else {
                Check::NotYet("no probe yet".into())
            })
        })
        .await?;

        // Freeze the broker: its sockets stay open and its port accepts connections, but
        // nothing answers.
        let broker = testbed.process_info(kafka.processes[0]).pid;
        let frozen = Frozen::freeze(broker)?;
        let froze = Instant::now();
        let status = s
            .wait_placements(ns, name, &clusters, "Unavailable", VISIBLE_WITHIN, |p| {
                p.state == PlacementState::Unavailable
            })
            .await
            .context("the frozen broker is not seen within 10 s")?;
        let detected = froze.elapsed();
        let placement = &status.placements[0];
        let message = placement.message.clone().unwrap_or_default();
        println!(
            "broker frozen: placement Unavailable after {:.1} s ({message})",
            detected.as_secs_f64()
        );
        ensure!(
            message.starts_with("Kafka unreachable: "),
            "the probe's message: {message}"
        );
        ensure!(
            placement.partitions == Some(3) && placement.replication_factor == Some(1),
            "what was last seen of the topic stays: {placement:?}"
        );

        // Thaw: Synced again, with no apply.
        let thawed = Instant::now();
        frozen.thaw();
        s.wait_synced(ns, name, 3, 1, STEP).await?;
        println!(
            "broker thawed: placement Synced after {:.1} s",
            thawed.elapsed().as_secs_f64()
        );
        let after = applies(testbed, &http).await?;
        ensure!(
            after == before,
            "a probe made the agent apply: before {before:?}, after {after:?}"
        );
        let seen = s.probe(0)?.topic(topic).await?;
        ensure!(
            seen == Some(TopicView {
                partitions: 3,
                rf: 1
            }),
            "{seen:?}"
        );
        s.ensure_running()?;
        drop(s);
        ks::stop_kafka(testbed, &kafka);
        Ok(())
    });
}
