//! Two agent replicas for one member cluster, end to end: a real hub, two real
//! `accord-agent run` processes with the same identity and namespace (as a Deployment with
//! `replicas: 2` runs them), a real member kube-apiserver holding their Lease, and a
//! CrossClusterScalePolicy on the management cluster.
//!
//! Only the Lease holder connects, watches and applies; when it dies (SIGKILL) or freezes
//! (SIGSTOP) past its lease, the standby applies the next change, and a frozen holder that
//! wakes up writes nothing before it exits.

use std::time::{Duration, Instant};

use accord_crds::{CrossClusterScalePolicy, SCALE_REQUEST_ANNOTATION};
use accord_e2e::fleet::{self, Agent, Fleet};
use accord_e2e::hub::parse_metric;
use accord_e2e::wait::{Check, until};
use accord_e2e::{ProcessId, SharedTestbed, Testbed};
use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{Patch, PatchParams};

static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(1));
/// The scenarios share one member cluster and its agent Lease; run them one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
const FM: &str = "accord-e2e-tests";
/// A short lease so the tests take seconds; production runs 15 s.
const LEASE: Duration = Duration::from_secs(4);
/// The standby's polling interval for that lease (a fifth of it).
const RETRY: Duration = Duration::from_millis(800);
/// Connecting to the hub, receiving the assignments and applying them, on a busy machine.
const CONNECT_AND_APPLY: Duration = Duration::from_secs(3);

/// Stops a replica the federation does not know about when the test ends, however it ends.
struct Replica<'t> {
    testbed: &'t Testbed,
    agent: Agent,
}

impl Drop for Replica<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.agent.process.take() {
            self.testbed.stop_process(id);
        }
    }
}

/// One agent process: its HTTP address and process.
#[derive(Clone, Copy)]
struct Proc<'a> {
    label: &'a str,
    http: &'a str,
    id: ProcessId,
}

async fn metrics(testbed: &Testbed, http: &str) -> Result<String> {
    accord_e2e::fleet::agent_metrics(testbed, http).await
}

async fn metric(testbed: &Testbed, http: &str, name: &str) -> Result<f64> {
    let text = metrics(testbed, http).await?;
    parse_metric(&text, name).with_context(|| format!("{name} missing at {http}"))
}

async fn ready(testbed: &Testbed, http: &str) -> Result<bool> {
    Ok(testbed
        .http()
        .get(format!("http://{http}/readyz"))
        .send()
        .await?
        .status()
        .is_success())
}

/// Waits until exactly one of `procs` is active (`accord_agent_leader 1`), every other one
/// stands by, and all are ready; returns the index of the active one.
async fn one_active(testbed: &Testbed, procs: &[Proc<'_>]) -> Result<usize> {
    until(
        "exactly one active agent replica",
        Duration::from_secs(60),
        || async {
            let mut leaders = Vec::new();
            let mut seen = Vec::new();
            for (i, p) in procs.iter().enumerate() {
                testbed.ensure_running(p.id)?;
                // Not listening yet (still starting) is not an answer.
                let (Ok(leader), Ok(ready)) = (
                    metric(testbed, p.http, "accord_agent_leader").await,
                    ready(testbed, p.http).await,
                ) else {
                    return Ok(Check::NotYet(format!("{} not answering yet", p.label)));
                };
                seen.push(format!("{}: leader {leader} ready {ready}", p.label));
                if !ready {
                    return Ok(Check::NotYet(format!("{seen:?}")));
                }
                if leader == 1.0 {
                    leaders.push(i);
                }
            }
            Ok(match leaders.as_slice() {
                [one] => Check::Ready(*one),
                _ => Check::NotYet(format!("{seen:?}")),
            })
        },
    )
    .await
}

async fn apply_deployment(testbed: &Testbed, ns: &str, name: &str) -> Result<()> {
    let cluster = &testbed.members()[0];
    fleet::ensure_namespace(cluster, ns).await?;
    let api: Api<Deployment> = Api::namespaced(cluster.client(), ns);
    let d = fleet::pause_deployment(name, 1);
    api.patch(name, &PatchParams::apply(FM).force(), &Patch::Apply(&d))
        .await?;
    Ok(())
}

async fn apply_policy(testbed: &Testbed, ns: &str, cluster: &str, desired: i32) -> Result<()> {
    fleet::ensure_namespace(testbed.mgmt(), ns).await?;
    let policy = serde_json::json!({
        "apiVersion": "accord.io/v1beta1", "kind": "CrossClusterScalePolicy",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"targetRef": {"name": "web"}, "desiredReplicas": desired,
                 "distribution": [{"cluster": cluster, "weight": 100}]}
    });
    let api: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), ns);
    api.patch(
        "web",
        &PatchParams::apply(FM).force(),
        &Patch::Apply(&policy),
    )
    .await?;
    Ok(())
}

/// (spec.replicas, scale request id, metadata.generation) of the member Deployment.
async fn observe(testbed: &Testbed, ns: &str) -> Result<(i32, String, i64)> {
    let api: Api<Deployment> = Api::namespaced(testbed.members()[0].client(), ns);
    let d = api.get("web").await?;
    let id = d
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SCALE_REQUEST_ANNOTATION))
        .cloned()
        .unwrap_or_default();
    let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    Ok((replicas, id, d.metadata.generation.unwrap_or_default()))
}

/// Waits until the member Deployment has `replicas` under a scale request id other than
/// `not_id`; returns (id, generation).
async fn applied(
    testbed: &Testbed,
    ns: &str,
    replicas: i32,
    not_id: &str,
    timeout: Duration,
) -> Result<(String, i64)> {
    until(
        &format!("{ns}/web at {replicas} replicas"),
        timeout,
        || async {
            let (got, id, generation) = observe(testbed, ns).await?;
            Ok(if got == replicas && !id.is_empty() && id != not_id {
                Check::Ready((id, generation))
            } else {
                Check::NotYet(format!("{got} replicas, request {id:?}"))
            })
        },
    )
    .await
}

fn signal(testbed: &Testbed, id: ProcessId, signal: nix::sys::signal::Signal) -> Result<()> {
    let pid = testbed.process_info(id).pid;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)?;
    Ok(())
}

/// Starts the federation with one agent for `cluster` plus a second replica of it.
async fn two_replicas<'t>(
    testbed: &'t Testbed,
    hub: &str,
    cluster: &str,
) -> Result<(Fleet<'t>, Replica<'t>)> {
    let lease = format!("{}s", LEASE.as_secs());
    let fed = Fleet::start_with_agent_args(
        testbed,
        hub,
        &format!("/e2e-{hub}/"),
        &[],
        &["--lease-duration", &lease],
        &[(cluster, 0)],
    )
    .await?;
    let second = Replica {
        testbed,
        agent: fed.start_agent_replica(cluster, "b")?,
    };
    Ok((fed, second))
}

#[test]
#[ignore = "fault suite: run by e2e/faults.sh"]
fn the_standby_applies_the_next_change_after_the_active_agent_is_killed_and_only_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let (ns, cluster) = ("replicas-kill", "rep-kill");
        let (mut fed, mut second) = two_replicas(testbed, "hub-rep-kill", cluster).await?;
        let first = &fed.agents[cluster];
        let procs = [
            Proc {
                label: "a",
                http: &first.http.clone(),
                id: first.process.context("a")?,
            },
            Proc {
                label: "b",
                http: &second.agent.http.clone(),
                id: second.agent.process.context("b")?,
            },
        ];
        let active = one_active(testbed, &procs).await?;
        let (on, off) = (procs[active], procs[1 - active]);

        apply_deployment(testbed, ns, "web").await?;
        apply_policy(testbed, ns, cluster, 4).await?;
        let (id1, generation1) = applied(testbed, ns, 4, "", Duration::from_secs(60)).await?;
        // The standby holds nothing: no stream to the hub, no apply.
        ensure!(metric(testbed, on.http, "accord_agent_scale_applies_total").await? >= 1.0);
        ensure!(metric(testbed, off.http, "accord_agent_scale_applies_total").await? == 0.0);
        ensure!(metric(testbed, off.http, "accord_agent_connected").await? == 0.0);
        ensure!(metric(testbed, off.http, "accord_agent_leader").await? == 0.0);

        // SIGKILL the active one; the change right after it is the standby's to apply.
        let killed = Instant::now();
        if active == 0 {
            fed.kill_agent(cluster)?;
        } else if let Some(id) = second.agent.process.take() {
            fleet::kill9(testbed, id)?;
        }
        apply_policy(testbed, ns, cluster, 6).await?;
        let (_, generation2) = applied(
            testbed,
            ns,
            6,
            &id1,
            LEASE + RETRY + CONNECT_AND_APPLY + Duration::from_secs(10),
        )
        .await?;
        let took = killed.elapsed();
        println!(
            "agent replicas: the standby applied the change {:.2}s after the active agent was \
             killed (lease duration {}s)",
            took.as_secs_f64(),
            LEASE.as_secs()
        );
        ensure!(
            took <= LEASE + RETRY + CONNECT_AND_APPLY,
            "took {took:?}: more than the lease duration, one polling interval and a connect"
        );
        ensure!(metric(testbed, off.http, "accord_agent_leader").await? == 1.0);
        ensure!(metric(testbed, off.http, "accord_agent_connected").await? == 1.0);
        // The change was applied by the new holder; the old one is gone, and before the
        // kill the standby had applied nothing (above). (How many applies the new holder
        // made is the hub's business: while the only cluster was unavailable the hub may
        // have assigned it another count first.)
        ensure!(
            metric(testbed, off.http, "accord_agent_scale_applies_total").await? >= 1.0,
            "{}",
            metrics(testbed, off.http).await?
        );
        ensure!(
            generation2 > generation1,
            "generation {generation1} -> {generation2}"
        );
        Ok(())
    });
}

#[test]
#[ignore = "fault suite: run by e2e/faults.sh"]
fn a_holder_frozen_past_its_lease_writes_nothing_when_it_wakes_and_exits() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let (ns, cluster) = ("replicas-stop", "rep-stop");
        let (fed, second) = two_replicas(testbed, "hub-rep-stop", cluster).await?;
        let first = &fed.agents[cluster];
        let procs = [
            Proc { label: "a", http: &first.http.clone(), id: first.process.context("a")? },
            Proc { label: "b", http: &second.agent.http.clone(), id: second.agent.process.context("b")? },
        ];
        let active = one_active(testbed, &procs).await?;
        let (on, off) = (procs[active], procs[1 - active]);

        apply_deployment(testbed, ns, "web").await?;
        apply_policy(testbed, ns, cluster, 2).await?;
        let (id1, _) = applied(testbed, ns, 2, "", Duration::from_secs(60)).await?;

        // Freeze the holder. It keeps its stream's socket and its watches open, and still
        // believes the Deployment should have 2 replicas.
        signal(testbed, on.id, nix::sys::signal::Signal::SIGSTOP)?;
        let stopped = Instant::now();
        apply_policy(testbed, ns, cluster, 5).await?;
        let frozen = async {
            let (_, generation) = applied(
                testbed,
                ns,
                5,
                &id1,
                LEASE + RETRY + CONNECT_AND_APPLY + Duration::from_secs(10),
            )
            .await?;
            println!(
                "agent replicas: the standby applied the change {:.2}s after the active agent \
                 froze (lease duration {}s)",
                stopped.elapsed().as_secs_f64(),
                LEASE.as_secs()
            );
            ensure!(metric(testbed, off.http, "accord_agent_leader").await? == 1.0);
            Ok(generation)
        }
        .await;
        // Wake it whatever happened, so the testbed can stop it.
        signal(testbed, on.id, nix::sys::signal::Signal::SIGCONT)?;
        let generation = frozen?;

        // Woken, the old holder finds its lease gone and exits with an error; should its
        // enforcer try to put its 2 replicas back first, the Lease fence refuses the write.
        let status = until("the woken holder to exit", Duration::from_secs(20), || async {
            Ok(match fleet::exit_status(testbed, on.id)? {
                Some(status) => Check::Ready(status),
                None => Check::NotYet("still running".into()),
            })
        })
        .await?;
        ensure!(!status.success(), "the woken holder exited with {status}");
        let log = std::fs::read_to_string(testbed.process_info(on.id).log)?;
        ensure!(log.contains("lost the agent Lease"), "its log does not say why it stopped");
        if log.contains("does not hold the agent Lease") {
            println!("agent replicas: the woken holder's write was refused by its Lease fence");
        }
        // Nothing was written to the Deployment since the standby applied 5: one
        // generation, 5 replicas, the new request id. Checked for a while after the exit,
        // so a write in flight would have landed.
        let (replicas, id, now) = observe(testbed, ns).await?;
        ensure!(replicas == 5 && id != id1 && now == generation, "{replicas} {id} generation {now} (was {generation})");
        let quiet_until = Instant::now() + RETRY * 2;
        until("a quiet Deployment", RETRY * 4, || async {
            let (replicas, _, now) = observe(testbed, ns).await?;
            if replicas != 5 || now != generation {
                bail!("the Deployment changed: {replicas} replicas, generation {now} (was {generation})");
            }
            Ok(if Instant::now() >= quiet_until {
                Check::Ready(())
            } else {
                Check::NotYet("watching".into())
            })
        })
        .await?;
        ensure!(metric(testbed, off.http, "accord_agent_scale_applies_total").await? >= 1.0);
        Ok(())
    });
}
