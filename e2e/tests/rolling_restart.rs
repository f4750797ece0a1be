//! A rolling restart of the hub moves no share: two `accord-hub serve` replicas behind one
//! address (a proxy standing in for their Service), agents holding streams through it, and
//! each replica in turn stopped with SIGTERM and started again, as a Deployment rollout
//! does. Every cluster stays `Available` and every agent keeps its share throughout.

mod fault_support;

use accord_e2e::SharedTestbed;
use accord_e2e::faultproxy::FaultProxy;
use accord_e2e::hub::HubProcess;
use anyhow::{Context as _, Result, ensure};
use fault_support::{
    AvailabilityLog, ReconnectingAgent, create_policy, exited, is_leader, join, opts, signal,
};
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};

static TESTBED: SharedTestbed =
    SharedTestbed::new(|b| b.members(0).without_mgmt_controller_manager());

const PREFIX: &str = "/t-rolling/";
const POLICY: &str = "rolling-web";
/// Flags of both replicas: the partition-detection times of the fault suite (2 s
/// heartbeat timeout), so a grace that hid a disconnect would show here as well.
const FLAGS: &[&str] = &["--heartbeat-timeout", "2s", "--election-ttl", "3s"];

#[test]
fn restarting_two_hub_replicas_one_at_a_time_moves_no_share() {
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let a_opts = opts("hub-roll-a", PREFIX, FLAGS);
        let b_opts = opts("hub-roll-b", PREFIX, FLAGS);
        let mut a = HubProcess::start(testbed, &a_opts).await?;
        let mut b = HubProcess::start(testbed, &b_opts).await?;
        let service = FaultProxy::start_to_any(vec![a.grpc.parse()?, b.grpc.parse()?]).await?;
        let via = service.addr().to_string();

        let clusters = ["roll-a", "roll-b"];
        let mut agents = Vec::new();
        let mut availability = Vec::new();
        for cluster in clusters {
            let identity = join(testbed, PREFIX, &via, cluster).await?;
            agents.push(ReconnectingAgent::spawn(
                via.clone(),
                identity,
                Duration::from_millis(300),
            ));
            let log = AvailabilityLog::start(testbed, cluster);
            log.wait_for("True", Instant::now(), Duration::from_secs(30))
                .await?;
            availability.push(log);
        }
        create_policy(testbed, POLICY, 10, &[("roll-a", 60), ("roll-b", 40)]).await?;
        agents[0]
            .wait_replicas(POLICY, 6, Duration::from_secs(30))
            .await?;
        agents[1]
            .wait_replicas(POLICY, 4, Duration::from_secs(30))
            .await?;
        let steady = Instant::now();

        // The rollout: each replica in turn, the next only once the agents are back.
        // The agents start on a (the first target). As a Service drops a terminating
        // pod's endpoint, new connections go to the other replica first: each agent
        // moves a → b, then b → a.
        let (a_addr, b_addr) = (a.grpc.parse()?, b.grpc.parse()?);
        for which in ["a", "b"] {
            let (hub, hub_opts) = if which == "a" {
                service.set_targets(vec![b_addr, a_addr]);
                (&mut a, &a_opts)
            } else {
                service.set_targets(vec![a_addr, b_addr]);
                (&mut b, &b_opts)
            };
            let stopped_at = Instant::now();
            signal(testbed, hub.id, Signal::SIGTERM)?;
            exited(testbed, hub.id, Duration::from_secs(20)).await?;
            let grpc = hub.grpc.clone();
            *hub = HubProcess::start_at(testbed, hub_opts, &grpc).await?;
            println!(
                "rolling restart: {} stopped and ready again in {} ms",
                hub_opts.replica,
                stopped_at.elapsed().as_millis()
            );
            // Every agent whose stream was on the stopped replica reconnected.
            streams_held(testbed, [&a, &b], agents.len()).await?;
        }
        // A leader again (either one).
        accord_e2e::wait::until("a leader", Duration::from_secs(30), || async {
            Ok(
                if is_leader(testbed, &a).await || is_leader(testbed, &b).await {
                    accord_e2e::wait::Check::Ready(())
                } else {
                    accord_e2e::wait::Check::NotYet("no leader".into())
                },
            )
        })
        .await?;
        // The handover grace (5 s) must run out before "nothing expired" means anything.
        tokio::time::sleep(accord_hub::store::presence::RECONNECT_GRACE + Duration::from_secs(3))
            .await;

        for log in &availability {
            let statuses = log.statuses_since(steady);
            ensure!(
                statuses.iter().all(|s| s == "True"),
                "a cluster turned unavailable during the rollout: {statuses:?}"
            );
        }
        for (agent, want) in agents.iter().zip([6, 4]) {
            let moved: Vec<_> = agent
                .shares()
                .into_iter()
                .filter(|(at, s)| *at >= steady && s.policy == POLICY && s.replicas != Some(want))
                .collect();
            ensure!(
                moved.is_empty(),
                "{}'s share moved during the rollout: {moved:?}",
                agent.cluster
            );
            ensure!(agent.replicas(POLICY) == Some(want));
        }
        let reconnects: usize = agents.iter().map(|a| a.connects() - 1).sum();
        ensure!(
            reconnects >= 2 * agents.len(),
            "each agent's replica stopped twice: {reconnects} reconnects"
        );
        println!(
            "rolling restart: {reconnects} reconnects, no cluster unavailable, no share moved"
        );
        Ok(())
    });
}

/// Waits until the two replicas together hold `n` agent streams.
async fn streams_held(
    testbed: &accord_e2e::Testbed,
    hubs: [&HubProcess<'_>; 2],
    n: usize,
) -> Result<()> {
    accord_e2e::wait::until(
        &format!("{n} agent streams on the replicas"),
        Duration::from_secs(20),
        || async {
            let mut held = 0.0;
            for hub in hubs {
                held += hub
                    .metric(testbed.http(), "accord_hub_connected_agents")
                    .await?
                    .unwrap_or(0.0);
            }
            Ok(if held as usize == n {
                accord_e2e::wait::Check::Ready(())
            } else {
                accord_e2e::wait::Check::NotYet(format!("{held} streams"))
            })
        },
    )
    .await
    .context("agents did not reconnect")
}
