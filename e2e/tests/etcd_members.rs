//! The hub on a three-member etcd cluster whose leader is killed: real etcd members (TLS,
//! client certificates, authentication), real hub, a simulated agent on a real mTLS stream.
//!
//! Killing the leader costs etcd an election; afterwards the hub must lose nothing and
//! fail nothing: an agent stream already open stays counted, every one of a run of status
//! reports is stored (a client that kept sending a share of its requests to the dead
//! member, as the etcd client's balancer does on its own, fails some of them, and each
//! failure ends the agent's stream), a new agent joins and connects, and a placement made
//! after the kill reaches the connected agent.
//!
//! `hub-bench --agents 10000 --fanout --etcd-members 3 --kill-etcd-leader` is the same at
//! size (docs/benchmarks.md); `ACCORD_TESTBED_ETCD_MEMBERS=3` runs any other test on three
//! members.

use accord_crds::{FederatedKafkaTopic, ManagedCluster, conditions};
use accord_e2e::agent_sim::{self, AgentStream, policy};
use accord_e2e::hub::{HubOptions, HubProcess, create_token};
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use accord_proto::v1::{PlacementState, StatusReport, hub_message, status_ack};
use anyhow::{Context as _, Result, bail, ensure};
use kube::Api;
use kube::api::PostParams;
use std::collections::HashMap;
use std::time::Duration;

static TESTBED: SharedTestbed = SharedTestbed::new(|b| {
    b.members(0)
        .without_mgmt_controller_manager()
        .etcd_members(3)
});

const PREFIX: &str = "/t-members/";
const NAMESPACE: &str = "etcd-members";
const LABEL: (&str, &str) = ("etcd-members", "yes");
const STEP: Duration = Duration::from_secs(60);
/// Reports stored one after another after the kill, each of which must be accepted.
const REPORTS: i64 = 30;

async fn join_and_connect(
    testbed: &Testbed,
    hub: &HubProcess<'_>,
    cluster: &str,
) -> Result<AgentStream> {
    let (token, hash) = create_token(testbed, PREFIX, "10m").await?;
    let labels = HashMap::from([(LABEL.0.to_owned(), LABEL.1.to_owned())]);
    let id = agent_sim::register_labelled(&hub.grpc, &token, &hash, cluster, false, labels)
        .await
        .with_context(|| format!("registering {cluster}"))?;
    let stream = AgentStream::open(agent_sim::connect(&hub.grpc, &id).await?, cluster).await?;
    stream.spawn_heartbeats(Duration::from_millis(500));
    Ok(stream)
}

async fn available(testbed: &Testbed, cluster: &str) -> Result<()> {
    let api: Api<ManagedCluster> = Api::all(testbed.mgmt().client());
    until(&format!("{cluster} Available"), STEP, || async {
        let status = api.get_opt(cluster).await?.and_then(|m| m.status);
        Ok(
            match status.map(|s| conditions::is_true(&s.conditions, "Available")) {
                Some(true) => Check::Ready(()),
                other => Check::NotYet(format!("Available {other:?}")),
            },
        )
    })
    .await
}

/// Reads the stream until `want` accepts a message (or the stream ends), within `STEP`.
async fn next_where<T>(
    stream: &mut AgentStream,
    what: &str,
    mut want: impl FnMut(&hub_message::Body) -> Option<T>,
) -> Result<T> {
    tokio::time::timeout(STEP, async {
        loop {
            match stream.next().await {
                Some(Ok(m)) => {
                    if let Some(found) = m.body.as_ref().and_then(&mut want) {
                        return Ok(found);
                    }
                }
                Some(Err(status)) => bail!("the hub ended the stream waiting for {what}: {status}"),
                None => bail!("the stream ended waiting for {what}"),
            }
        }
    })
    .await
    .with_context(|| format!("no {what} within {STEP:?}"))?
}

#[test]
fn a_killed_etcd_leader_costs_no_stream_report_join_or_assignment() {
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let hub = HubProcess::start(
            testbed,
            &HubOptions {
                replica: "hub-members".into(),
                etcd_prefix: PREFIX.into(),
                extra_args: vec![],
            },
        )
        .await?;
        let mut before = join_and_connect(testbed, &hub, "members-before").await?;
        available(testbed, "members-before").await?;

        let etcd = testbed.hub_etcd();
        let leader = etcd.leader().await?;
        accord_e2e::fleet::kill9(testbed, etcd.members[leader].process)?;
        let elected = until("a new etcd leader", STEP, || async {
            Ok(match etcd.leader().await {
                Ok(i) if i != leader => Check::Ready(i),
                Ok(_) => Check::NotYet("the killed member still leads".into()),
                Err(e) => Check::NotYet(format!("{e:#}")),
            })
        })
        .await?;
        ensure!(elected != leader);

        // Reports one after another, each on the version the last ack gave: every one is
        // stored, and the stream stays open.
        let report_on = policy("CrossClusterScalePolicy", NAMESPACE, "after-kill");
        let mut version = 0;
        for revision in 1..=REPORTS {
            before
                .report(StatusReport {
                    placed: Some(report_on.clone()),
                    resource_version: revision.to_string(),
                    generation: 1,
                    expected_version: version,
                    state: PlacementState::Synced as i32,
                    applied_revision: revision,
                    ..Default::default()
                })
                .await?;
            let result = next_where(&mut before, "a status ack", |body| match body {
                hub_message::Body::StatusAck(a) => Some(a.result),
                _ => None,
            })
            .await?;
            match result {
                Some(status_ack::Result::Accepted(v)) => version = v,
                other => bail!("report {revision} of {REPORTS} was not stored: {other:?}"),
            }
        }

        // A cluster joins and connects after the kill.
        let mut after = join_and_connect(testbed, &hub, "members-after").await?;
        available(testbed, "members-after").await?;

        // A placement made after the kill reaches both.
        accord_e2e::fleet::ensure_namespace(testbed.mgmt(), NAMESPACE).await?;
        let topics: Api<FederatedKafkaTopic> = Api::namespaced(testbed.mgmt().client(), NAMESPACE);
        let topic: FederatedKafkaTopic = serde_json::from_value(serde_json::json!({
            "apiVersion": "accord.io/v1beta1", "kind": "FederatedKafkaTopic",
            "metadata": {"name": "after-kill", "namespace": NAMESPACE},
            "spec": {
                "partitions": 1, "replicationFactor": 1,
                "placement": {"clusterSelector": {"matchLabels": {LABEL.0: LABEL.1}}},
            },
        }))?;
        topics.create(&PostParams::default(), &topic).await?;
        for (cluster, stream) in [
            ("members-before", &mut before),
            ("members-after", &mut after),
        ] {
            next_where(
                stream,
                &format!("the topic's assignment on {cluster}"),
                |body| match body {
                    hub_message::Body::Assignments(a) => a
                        .items
                        .iter()
                        .any(|i| i.placed.as_ref().is_some_and(|p| p.name == "after-kill"))
                        .then_some(()),
                    _ => None,
                },
            )
            .await?;
        }
        let connected = hub
            .metric(testbed.http(), "accord_hub_connected_agents")
            .await?
            .unwrap_or(0.0);
        ensure!(
            connected == 2.0,
            "the hub counts {connected} connected agents, not 2"
        );
        Ok(())
    });
}
