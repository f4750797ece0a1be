//! What the fault suite and the rolling-restart test share: simulated agents that keep
//! reconnecting (as the real agent does) and remember every share they were given, a log
//! of a ManagedCluster's `Available` transitions and one of a member Deployment's states,
//! each fed by a watch, and small helpers around hubs and policies.

#![allow(dead_code)]

use accord_crds::{CrossClusterScalePolicy, ManagedCluster, conditions};
use accord_e2e::Testbed;
use accord_e2e::agent_sim::{self, AgentIdentity, AgentStream, HUB_TLS_NAME};
use accord_e2e::hub::{HUB_NAMESPACE, HubOptions, HubProcess, accord_binary, create_token};
use accord_e2e::installed::flag_value;
use accord_e2e::wait::{Check, until};
use accord_hub::pki::client_tls_config;
use accord_proto::v1::{StatusReport, hub_message};
use anyhow::{Context as _, Result};
use futures::StreamExt as _;
use kube::Api;
use kube::runtime::watcher;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tonic::transport::Endpoint;

/// Hub options from a replica name, a key prefix and extra flags.
pub fn opts(replica: &str, prefix: &str, extra: &[&str]) -> HubOptions {
    HubOptions {
        replica: replica.into(),
        etcd_prefix: prefix.into(),
        extra_args: extra.iter().map(|s| s.to_string()).collect(),
    }
}

/// Joins `cluster` through `via` (`host:port`: a hub, or a proxy in front of hubs).
pub async fn join(
    testbed: &Testbed,
    prefix: &str,
    via: &str,
    cluster: &str,
) -> Result<AgentIdentity> {
    let (token, hash) = create_token(testbed, prefix, "10m").await?;
    Ok(agent_sim::register(via, &token, &hash, cluster, false).await?)
}

/// [`join`] for a hub whose store is the etcd at `etcd` rather than the testbed's.
pub async fn join_with_etcd(
    testbed: &Testbed,
    etcd: &str,
    prefix: &str,
    via: &str,
    cluster: &str,
) -> Result<AgentIdentity> {
    let out = tokio::process::Command::new(accord_binary("accord-hub")?)
        .args(["token", "create"])
        .arg("--kubeconfig")
        .arg(testbed.mgmt().kubeconfig_path())
        .args(["--etcd-endpoints", etcd, "--etcd-prefix", prefix])
        .args(["--namespace", HUB_NAMESPACE, "--ttl", "10m"])
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "token create failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8(out.stdout)?;
    let token = flag_value(&line, "--token")?;
    let hash = flag_value(&line, "--ca-cert-hash")?;
    Ok(agent_sim::register(via, &token, &hash, cluster, false).await?)
}

/// Sends `signal` to a testbed process.
pub fn signal(
    testbed: &Testbed,
    id: accord_e2e::ProcessId,
    signal: nix::sys::signal::Signal,
) -> Result<()> {
    let pid = testbed.process_info(id).pid;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)?;
    Ok(())
}

/// Waits until the process has exited.
pub async fn exited(testbed: &Testbed, id: accord_e2e::ProcessId, timeout: Duration) -> Result<()> {
    until("the process to exit", timeout, || async {
        Ok(match testbed.ensure_running(id) {
            Err(_) => Check::Ready(()),
            Ok(()) => Check::NotYet("still running".into()),
        })
    })
    .await
}

/// Whether `hub` reports itself leader (false when it does not answer).
pub async fn is_leader(testbed: &Testbed, hub: &HubProcess<'_>) -> bool {
    hub.metric(testbed.http(), "accord_hub_is_leader")
        .await
        .ok()
        .flatten()
        == Some(1.0)
}

/// Creates a `CrossClusterScalePolicy` in `default` dividing `total` replicas over
/// `clusters` (name, weight), each into namespace `prod`, with the default 30 s return
/// cooldown.
pub async fn create_policy(
    testbed: &Testbed,
    name: &str,
    total: u32,
    clusters: &[(&str, u32)],
) -> Result<()> {
    create_policy_with_cooldown(testbed, name, total, clusters, 30).await
}

/// [`create_policy`] with a return cooldown of `cooldown` seconds.
pub async fn create_policy_with_cooldown(
    testbed: &Testbed,
    name: &str,
    total: u32,
    clusters: &[(&str, u32)],
    cooldown: u32,
) -> Result<()> {
    let distribution: Vec<_> = clusters
        .iter()
        .map(|(c, w)| serde_json::json!({"cluster": c, "namespace": "prod", "weight": w}))
        .collect();
    let policy: CrossClusterScalePolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": "accord.io/v1beta1", "kind": "CrossClusterScalePolicy",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"targetRef": {"name": name}, "desiredReplicas": total,
                 "distribution": distribution,
                 "failover": {"returnCooldownSeconds": cooldown}}
    }))?;
    let api: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), "default");
    api.create(&Default::default(), &policy).await?;
    Ok(())
}

/// The hub's `/readyz` status code, or why there was none.
pub async fn readyz(testbed: &Testbed, hub: &HubProcess<'_>) -> std::result::Result<u16, String> {
    testbed
        .http()
        .get(format!("{}/readyz", hub.http))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| e.to_string())
}

/// `endpoint` (`scheme://host:port`) with its address replaced by `addr`: the same etcd,
/// reached through a proxy.
pub fn via_proxy(endpoint: &str, addr: std::net::SocketAddr) -> String {
    match endpoint.split_once("://") {
        Some((scheme, _)) => format!("{scheme}://{addr}"),
        None => format!("http://{addr}"),
    }
}

/// Sets `desiredReplicas` of a policy created by [`create_policy`].
pub async fn set_desired(testbed: &Testbed, name: &str, total: u32) -> Result<()> {
    let api: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), "default");
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"spec": {"desiredReplicas": total}})),
    )
    .await?;
    Ok(())
}

/// One share an agent was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenShare {
    /// Policy name.
    pub policy: String,
    /// Replicas for this cluster; `None` when the assignment was removed.
    pub replicas: Option<i32>,
    /// The scale request it belongs to.
    pub scale_request_id: String,
}

#[derive(Default)]
struct AgentLog {
    shares: Vec<(Instant, SeenShare)>,
    connects: usize,
    connected: bool,
    pending_reports: Vec<StatusReport>,
}

/// A simulated agent that holds a stream to `hub`, heartbeats, reconnects whenever the
/// stream ends (detecting a dead path with HTTP/2 keepalive, as the real agent does), and
/// remembers every share it was given.
pub struct ReconnectingAgent {
    /// Cluster it speaks for.
    pub cluster: String,
    log: Arc<Mutex<AgentLog>>,
    task: JoinHandle<()>,
}

impl Drop for ReconnectingAgent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// HTTP/2 keepalive of the simulated agents: a dead path is noticed within about 2 s.
const SIM_KEEPALIVE: Duration = Duration::from_secs(1);
/// Pause before a simulated agent reconnects (the real agent's first delay).
const SIM_RECONNECT_DELAY: Duration = Duration::from_millis(100);

impl ReconnectingAgent {
    /// Starts holding a stream to `hub` as `identity`, heartbeating every `heartbeat`.
    pub fn spawn(hub: String, identity: AgentIdentity, heartbeat: Duration) -> Self {
        let log = Arc::new(Mutex::new(AgentLog::default()));
        let cluster = identity.cluster.clone();
        let task = tokio::spawn(hold(hub, identity, heartbeat, log.clone()));
        Self { cluster, log, task }
    }

    fn log(&self) -> std::sync::MutexGuard<'_, AgentLog> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every share seen, in order, with when it arrived.
    pub fn shares(&self) -> Vec<(Instant, SeenShare)> {
        self.log().shares.clone()
    }

    /// The replicas of the latest share seen for `policy` (`None`: none, or removed).
    pub fn replicas(&self, policy: &str) -> Option<i32> {
        self.log()
            .shares
            .iter()
            .rev()
            .find(|(_, s)| s.policy == policy)
            .and_then(|(_, s)| s.replicas)
    }

    /// How many streams it opened so far.
    pub fn connects(&self) -> usize {
        self.log().connects
    }

    /// Whether a stream is open now.
    pub fn connected(&self) -> bool {
        self.log().connected
    }

    /// Queues a status report; it is sent on the open stream, or on the next one, and
    /// kept until the hub acknowledges it.
    pub fn report(&self, report: StatusReport) {
        self.log().pending_reports.push(report);
    }

    /// Waits until a share for `policy` that arrived after `since` and is the latest says
    /// `replicas`; returns how long after `since` it arrived.
    pub async fn wait_replicas_since(
        &self,
        policy: &str,
        replicas: i32,
        since: Instant,
        timeout: Duration,
    ) -> Result<Duration> {
        until(
            &format!("{} to be told {replicas} of {policy}", self.cluster),
            timeout,
            || async {
                let log = self.log();
                let latest = log.shares.iter().rev().find(|(_, s)| s.policy == policy);
                Ok(match latest {
                    Some((at, s)) if *at >= since && s.replicas == Some(replicas) => {
                        Check::Ready(at.saturating_duration_since(since))
                    }
                    other => Check::NotYet(format!("latest share {other:?}")),
                })
            },
        )
        .await
    }

    /// Waits until its latest share for `policy` is `replicas`; returns how long it took.
    pub async fn wait_replicas(
        &self,
        policy: &str,
        replicas: i32,
        timeout: Duration,
    ) -> Result<Duration> {
        let started = Instant::now();
        until(
            &format!("{} to run {replicas} of {policy}", self.cluster),
            timeout,
            || async {
                let seen = self.replicas(policy);
                Ok(if seen == Some(replicas) {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("latest share {seen:?}"))
                })
            },
        )
        .await?;
        Ok(started.elapsed())
    }

    /// Waits until it has opened more than `connects` streams and holds one.
    pub async fn wait_reconnected(&self, connects: usize, timeout: Duration) -> Result<Duration> {
        let started = Instant::now();
        until(
            &format!("{} to reconnect", self.cluster),
            timeout,
            || async {
                Ok(if self.connects() > connects && self.connected() {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("{} connects", self.connects()))
                })
            },
        )
        .await?;
        Ok(started.elapsed())
    }
}

async fn hold(
    hub: String,
    identity: AgentIdentity,
    heartbeat: Duration,
    log: Arc<Mutex<AgentLog>>,
) {
    loop {
        let _ = session(&hub, &identity, heartbeat, &log).await;
        log.lock().unwrap_or_else(|e| e.into_inner()).connected = false;
        tokio::time::sleep(SIM_RECONNECT_DELAY).await;
    }
}

async fn session(
    hub: &str,
    identity: &AgentIdentity,
    heartbeat: Duration,
    log: &Arc<Mutex<AgentLog>>,
) -> Result<()> {
    let channel = Endpoint::from_shared(format!("https://{hub}"))?
        .tls_config(client_tls_config(
            &identity.ca_pem,
            Some((&identity.cert_pem, &identity.key_pem)),
            HUB_TLS_NAME,
        ))?
        .connect_timeout(Duration::from_secs(2))
        .http2_keep_alive_interval(SIM_KEEPALIVE)
        .keep_alive_timeout(SIM_KEEPALIVE)
        .keep_alive_while_idle(true)
        .connect()
        .await?;
    let stream = tokio::time::timeout(
        Duration::from_secs(5),
        AgentStream::open(channel, &identity.cluster),
    )
    .await
    .context("opening the stream")??;
    {
        let mut l = log.lock().unwrap_or_else(|e| e.into_inner());
        l.connects += 1;
        l.connected = true;
    }
    let _heartbeats = AbortOnDrop(stream.spawn_heartbeats(heartbeat));
    let (tx, mut rx) = stream.split();
    let mut resend = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            msg = rx.message() => {
                let Some(msg) = msg? else { return Ok(()) };
                let mut l = log.lock().unwrap_or_else(|e| e.into_inner());
                match msg.body {
                    Some(hub_message::Body::Assignments(a)) => {
                        let now = Instant::now();
                        for item in a.items {
                            if let Some(accord_proto::v1::assignment::Spec::Scale(s)) = item.spec {
                                let policy = item.placed.map(|p| p.name).unwrap_or_default();
                                l.shares.push((now, SeenShare { policy, replicas: Some(s.replicas), scale_request_id: s.scale_request_id }));
                            }
                        }
                        for removal in a.removed {
                            let policy = removal.placed.map(|p| p.name).unwrap_or_default();
                            l.shares.push((now, SeenShare { policy, replicas: None, scale_request_id: String::new() }));
                        }
                    }
                    Some(hub_message::Body::StatusAck(ack)) => {
                        let acked = ack.placed.as_ref().map(|p| p.name.clone());
                        l.pending_reports.retain(|r| r.placed.as_ref().map(|p| p.name.clone()) != acked);
                    }
                    _ => {}
                }
            }
            _ = resend.tick() => {
                let pending = log.lock().unwrap_or_else(|e| e.into_inner()).pending_reports.clone();
                for report in pending {
                    tx.send(accord_proto::v1::AgentMessage {
                        cluster: identity.cluster.clone(),
                        body: Some(accord_proto::v1::agent_message::Body::StatusReport(report)),
                    })
                    .await?;
                }
            }
        }
    }
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The transitions of one ManagedCluster's `Available` condition, as a watch sees them.
pub struct AvailabilityLog {
    cluster: String,
    seen: Arc<Mutex<Vec<(Instant, String)>>>,
    task: JoinHandle<()>,
}

impl Drop for AvailabilityLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AvailabilityLog {
    /// Starts watching `cluster` on the management cluster.
    pub fn start(testbed: &Testbed, cluster: &str) -> Self {
        let api: Api<ManagedCluster> = Api::all(testbed.mgmt().client());
        let config = watcher::Config::default().fields(&format!("metadata.name={cluster}"));
        let seen = Arc::new(Mutex::new(Vec::<(Instant, String)>::new()));
        let s = seen.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher(api, config).boxed();
            while let Some(event) = events.next().await {
                let objects = match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => vec![o],
                    _ => continue,
                };
                for o in objects {
                    let status = o
                        .status
                        .as_ref()
                        .and_then(|s| conditions::find(&s.conditions, "Available"))
                        .map(|c| c.status.clone())
                        .unwrap_or_else(|| "Unknown".into());
                    let mut seen = s.lock().unwrap_or_else(|e| e.into_inner());
                    if seen.last().map(|(_, v)| v) != Some(&status) {
                        seen.push((Instant::now(), status));
                    }
                }
            }
        });
        Self {
            cluster: cluster.to_owned(),
            seen,
            task,
        }
    }

    /// Every change seen: when, and the new status.
    pub fn transitions(&self) -> Vec<(Instant, String)> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The statuses seen since `since` (the one in force then included).
    pub fn statuses_since(&self, since: Instant) -> Vec<String> {
        let all = self.transitions();
        let before = all
            .iter()
            .rev()
            .find(|(t, _)| *t <= since)
            .map(|(_, s)| s.clone());
        before
            .into_iter()
            .chain(
                all.iter()
                    .filter(|(t, _)| *t > since)
                    .map(|(_, s)| s.clone()),
            )
            .collect()
    }

    /// Waits until the latest status is `status`; returns how long after `since` it
    /// changed to it.
    pub async fn wait_for(
        &self,
        status: &str,
        since: Instant,
        timeout: Duration,
    ) -> Result<Duration> {
        until(
            &format!("{} Available={status}", self.cluster),
            timeout,
            || async {
                let all = self.transitions();
                Ok(match all.last() {
                    Some((at, s)) if s == status => {
                        Check::Ready(at.saturating_duration_since(since))
                    }
                    other => Check::NotYet(format!("Available is {:?}", other.map(|(_, s)| s))),
                })
            },
        )
        .await
    }
}

/// One state of a member Deployment, as a watch saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeploymentState {
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// The scale request it was last set for (`accord.io/scale-request-id`).
    pub scale_request_id: String,
}

/// Every state of one member Deployment a watch sees, from when it starts.
pub struct DeploymentLog {
    seen: Arc<Mutex<Vec<(Instant, DeploymentState)>>>,
    task: JoinHandle<()>,
}

impl Drop for DeploymentLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DeploymentLog {
    /// Starts watching Deployment `ns/name` through `client` (a member cluster's).
    pub fn start(client: kube::Client, ns: &str, name: &str) -> Self {
        let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client, ns);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher(api, config).boxed();
            while let Some(event) = events.next().await {
                let d = match event {
                    Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => d,
                    _ => continue,
                };
                let state = DeploymentState {
                    replicas: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                    ready: d
                        .status
                        .as_ref()
                        .and_then(|s| s.ready_replicas)
                        .unwrap_or(0),
                    scale_request_id: d
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(accord_crds::SCALE_REQUEST_ANNOTATION))
                        .cloned()
                        .unwrap_or_default(),
                };
                let mut seen = s.lock().unwrap_or_else(|e| e.into_inner());
                if seen.last().map(|(_, v)| v) != Some(&state) {
                    seen.push((Instant::now(), state));
                }
            }
        });
        Self { seen, task }
    }

    /// Every state seen, in order, with when.
    pub fn states(&self) -> Vec<(Instant, DeploymentState)> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits (up to a minute) until the latest state seen has `replicas` in its spec and,
    /// if `ready`, as many ready.
    pub async fn wait_replicas(&self, replicas: i32, ready: bool) -> Result<()> {
        let what = format!("{replicas} replicas{}", if ready { ", ready" } else { "" });
        until(&what, Duration::from_secs(60), || async {
            let latest = self.states().last().map(|(_, s)| s.clone());
            Ok(match latest {
                Some(s) if s.replicas == replicas && (!ready || s.ready == replicas) => {
                    Check::Ready(())
                }
                other => Check::NotYet(format!("latest {other:?}")),
            })
        })
        .await
    }
}
