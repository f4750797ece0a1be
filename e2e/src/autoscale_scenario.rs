//! A metric-driven autoscaling scenario on the testbed, shared by the autoscaling
//! end-to-end tests and the autoscaling benchmark: a test-controlled exporter and a real
//! Prometheus scraping it ([`MetricSource`]), a hub with an etcd prefix of its own and one
//! agent per member, CrossClusterScalePolicies with `spec.autoscaling` querying the
//! exporter's gauge, and recorders of what happened.
//!
//! Every poll is seen in the hub's autoscaling state in etcd (`autoscale/<ns>/<name>`, one
//! write per poll, [`accord_hub::scale::autoscale::engine::State`]); the policy's
//! `status.autoscaling` is rendered from it but need not be written on every poll. So
//! [`PolicyRecorder`] keeps both: the polls (from an etcd watch on the state) for
//! everything counted per poll (samples, value, recommendation, failures, the last
//! decision), and the statuses (from a watch on the policy) for what the status and the
//! members are told (scale operations, scale request ids, placements, conditions).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use accord_crds::scale::AutoscalingStatus;
use accord_crds::{
    CrossClusterScalePolicy, CrossClusterScalePolicyStatus, PlacementState,
    SCALE_REQUEST_ANNOTATION,
};
use accord_hub::scale::autoscale::engine::State;
use accord_hub::store::Keyspace;
use anyhow::{Context as _, Result, bail};
use etcd_client::GetOptions;
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::sync::watch;

use crate::exporter::Exporter;
use crate::fleet::{Fleet, ensure_namespace, pause_deployment};
use crate::hub::HubProcess;
use crate::prometheus::ScrapingPrometheus;
use crate::testbed::Testbed;
use crate::wait::{Check, until};

/// Field manager of the scenario's writes.
pub const FIELD_MANAGER: &str = "accord-e2e-autoscale";
/// The gauge the exporter serves and the policies query, one series per policy (label
/// `policy`).
pub const LOAD: &str = "accord_test_load";
/// Generous bound for things that take one or two 1 s polls plus a scrape.
pub const FEW_POLLS: Duration = Duration::from_secs(20);

/// Milliseconds since the Unix epoch, the one clock every recorded moment is put on.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The etcd prefix of scenario `name`'s hub(s): `/e2e-<name>/`.
pub fn etcd_prefix(name: &str) -> String {
    format!("/e2e-{name}/")
}

// ---------------------------------------------------------------------------------------
// The metric source

/// An exporter and a Prometheus scraping it; Prometheus stops with the source.
pub struct MetricSource<'t> {
    testbed: &'t Testbed,
    /// The exporter serving [`LOAD`].
    pub exporter: Exporter,
    /// The Prometheus scraping it (stop and resume it to fail the metric).
    pub prometheus: ScrapingPrometheus,
}

impl Drop for MetricSource<'_> {
    fn drop(&mut self) {
        self.prometheus.stop(self.testbed);
    }
}

impl<'t> MetricSource<'t> {
    /// Starts an exporter and a Prometheus (named `autoscale-<name>`) scraping it every
    /// `scrape_interval`.
    pub async fn start(
        testbed: &'t Testbed,
        name: &str,
        scrape_interval: Duration,
    ) -> Result<Self> {
        let exporter = Exporter::start().await?;
        let dir = testbed.dir().join(format!("autoscale-{name}"));
        let prometheus = ScrapingPrometheus::start(
            testbed,
            &format!("autoscale-{name}"),
            &dir,
            scrape_interval,
            &[exporter.address().to_string()],
        )
        .await?;
        Ok(Self {
            testbed,
            exporter,
            prometheus,
        })
    }

    /// The PromQL query for policy `policy`'s load.
    pub fn query(policy: &str) -> String {
        format!("{LOAD}{{policy=\"{policy}\"}}")
    }

    /// Sets policy `policy`'s load; Prometheus sees it within a scrape.
    pub fn set(&self, policy: &str, value: f64) {
        self.exporter.set(LOAD, &[("policy", policy)], value);
    }

    /// Sets the load and waits until Prometheus answers it, so that the next poll sees it.
    pub async fn set_and_wait(&self, policy: &str, value: f64) -> Result<()> {
        self.set(policy, value);
        self.prometheus
            .wait_for_value(self.testbed.http(), &Self::query(policy), value, FEW_POLLS)
            .await
    }

    /// An autoscaling block for policy `policy` polling every second with the given
    /// target per replica and the CRD's defaults otherwise; callers change fields in place.
    pub fn autoscaling(&self, policy: &str, min: i32, max: i32, target: f64) -> serde_json::Value {
        serde_json::json!({
            "minReplicas": min, "maxReplicas": max,
            "metric": {
                "prometheus": {"url": self.prometheus.url, "query": Self::query(policy)},
                "targetPerReplica": target,
                "pollSeconds": 1
            },
            "dynamicThreshold": {"ewmaAlpha": 0.3, "windowSeconds": 1800, "stddevFactor": 2.0, "floorRatio": 0.8},
            "behavior": {"debounceMillis": 0, "cooldownSeconds": 5, "maxScaleOperationsPerMinute": 30,
                         "failureThreshold": 3, "breakerOpenSeconds": 5}
        })
    }
}

// ---------------------------------------------------------------------------------------
// The scenario

/// How to start a [`Scenario`].
pub struct ScenarioOptions<'a> {
    /// Hub replica name and etcd prefix ([`etcd_prefix`]); unique per test.
    pub name: &'a str,
    /// Namespace of the policies on the management cluster and of the Deployments on the
    /// members.
    pub namespace: &'a str,
    /// Cluster names on the hub; the i-th runs against testbed member i.
    pub clusters: &'a [&'a str],
    /// Extra hub flags.
    pub hub_args: &'a [&'a str],
    /// Deployments created with one replica on every joined member.
    pub deployments: &'a [&'a str],
}

/// A running scenario; dropping it stops the agents, the hub and the metric source.
pub struct Scenario<'t> {
    /// The testbed.
    pub testbed: &'t Testbed,
    /// The metric source the policies query.
    pub source: MetricSource<'t>,
    /// Hub and agents.
    pub fleet: Fleet<'t>,
    /// Namespace of the policies and Deployments.
    pub namespace: String,
    /// Cluster names, in member order (the i-th on testbed member i).
    pub clusters: Vec<String>,
    /// The hub's etcd prefix.
    pub etcd_prefix: String,
}

impl<'t> Scenario<'t> {
    /// Starts the hub and one agent per cluster (each connected on return) and creates the
    /// namespace and the Deployments. Set the source's load first when the first poll
    /// must already see it.
    pub async fn start(
        testbed: &'t Testbed,
        source: MetricSource<'t>,
        options: ScenarioOptions<'_>,
    ) -> Result<Self> {
        let etcd_prefix = etcd_prefix(options.name);
        let agents: Vec<(&str, usize)> = options
            .clusters
            .iter()
            .enumerate()
            .map(|(i, c)| (*c, i))
            .collect();
        let fleet = Fleet::start(
            testbed,
            options.name,
            &etcd_prefix,
            options.hub_args,
            &agents,
        )
        .await?;
        ensure_namespace(testbed.mgmt(), options.namespace).await?;
        let members: Vec<usize> = (0..options.clusters.len()).collect();
        for name in options.deployments {
            apply_deployments(testbed, &members, options.namespace, name).await?;
        }
        Ok(Self {
            testbed,
            source,
            fleet,
            namespace: options.namespace.to_owned(),
            clusters: options.clusters.iter().map(|c| c.to_string()).collect(),
            etcd_prefix,
        })
    }

    /// The hub.
    pub fn hub(&self) -> &HubProcess<'t> {
        &self.fleet.hub
    }

    /// Testbed member indexes of the joined clusters.
    pub fn members(&self) -> Vec<usize> {
        (0..self.clusters.len()).collect()
    }

    /// Cluster name → testbed member index.
    pub fn cluster_members(&self) -> BTreeMap<&str, usize> {
        self.clusters
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect()
    }

    /// [`MetricSource::autoscaling`] of the scenario's source.
    pub fn autoscaling(&self, policy: &str, min: i32, max: i32, target: f64) -> serde_json::Value {
        self.source.autoscaling(policy, min, max, target)
    }

    /// A policy `name` spreading `desired` replicas of Deployment `target` evenly over
    /// every cluster of the scenario.
    pub fn policy(
        &self,
        name: &str,
        target: &str,
        desired: i32,
        autoscaling: serde_json::Value,
        failover: serde_json::Value,
    ) -> serde_json::Value {
        let clusters: Vec<&str> = self.clusters.iter().map(String::as_str).collect();
        policy(
            name,
            &self.namespace,
            target,
            desired,
            &clusters,
            autoscaling,
            failover,
        )
    }

    /// Applies `policy` (server-side apply) in the scenario's namespace.
    pub async fn apply_policy(&self, policy: &serde_json::Value) -> Result<()> {
        apply_policy(self.testbed, &self.namespace, policy).await
    }

    /// Starts recording policy `name`'s polls and statuses.
    pub async fn record(&self, name: &str) -> Result<PolicyRecorder> {
        PolicyRecorder::start(self.testbed, &self.etcd_prefix, &self.namespace, name).await
    }

    /// Starts recording Deployment `name` on every joined member.
    pub fn record_members(&self, name: &str) -> MemberRecorder {
        MemberRecorder::start(self.testbed, &self.members(), &self.namespace, name)
    }

    /// What each member should run according to `status`.
    pub fn expected_members(&self, status: &CrossClusterScalePolicyStatus) -> BTreeMap<usize, i32> {
        expected_members(status, &self.cluster_members())
    }

    /// Waits until a status names scale request `id`, then until every member runs what
    /// that status places on it under `id`; returns that status.
    pub async fn wait_rolled_out(
        &self,
        recorder: &PolicyRecorder,
        members: &MemberRecorder,
        id: &str,
    ) -> Result<Snapshot> {
        let status = recorder.wait_status_of(id).await?;
        members
            .wait_for(&self.expected_members(&status.status), id, FEW_POLLS)
            .await?;
        Ok(status)
    }

    /// The hub's `/metrics` text.
    pub async fn hub_metrics(&self) -> Result<String> {
        hub_metrics(self.testbed, &self.fleet.hub).await
    }

    /// Waits for an Event of `type_` and `reason` about policy `name` whose message
    /// passes `accept`; returns (message, time in ms).
    pub async fn wait_event(
        &self,
        name: &str,
        type_: &str,
        reason: &str,
        accept: impl Fn(&str) -> bool,
    ) -> Result<(String, i64)> {
        wait_event(self.testbed, &self.namespace, name, type_, reason, accept).await
    }

    /// The hub's autoscaling state of policy `name`, once it polled.
    pub async fn engine_state(&self, name: &str) -> Result<Option<State>> {
        engine_state(self.testbed, &self.etcd_prefix, &self.namespace, name).await
    }

    /// The hub's autoscaling state of every policy of the namespace, by policy name.
    pub async fn engine_states(&self) -> Result<BTreeMap<String, State>> {
        engine_states(self.testbed, &self.etcd_prefix, &self.namespace).await
    }
}

/// The etcd key of policy `ns/name`'s autoscaling state under `prefix`.
pub fn state_key(prefix: &str, ns: &str, name: &str) -> String {
    Keyspace::new(prefix).autoscale(ns, name)
}

/// The hub's autoscaling state of policy `ns/name` under etcd prefix `prefix`.
pub async fn engine_state(
    testbed: &Testbed,
    prefix: &str,
    ns: &str,
    name: &str,
) -> Result<Option<State>> {
    let mut client = testbed.hub_etcd_client().await?;
    let response = client.get(state_key(prefix, ns, name), None).await?;
    response
        .kvs()
        .first()
        .map(|kv| serde_json::from_slice(kv.value()).context("parsing the autoscaling state"))
        .transpose()
}

/// The hub's autoscaling state of every policy in `ns` under etcd prefix `prefix`, by
/// policy name.
pub async fn engine_states(
    testbed: &Testbed,
    prefix: &str,
    ns: &str,
) -> Result<BTreeMap<String, State>> {
    let mut client = testbed.hub_etcd_client().await?;
    let dir = state_key(prefix, ns, "");
    let response = client
        .get(dir.as_str(), Some(GetOptions::new().with_prefix()))
        .await?;
    let mut states = BTreeMap::new();
    for kv in response.kvs() {
        let key = kv.key_str()?;
        let name = key.strip_prefix(dir.as_str()).unwrap_or(key).to_owned();
        let state: State = serde_json::from_slice(kv.value())
            .with_context(|| format!("parsing the autoscaling state at {key}"))?;
        states.insert(name, state);
    }
    Ok(states)
}

// ---------------------------------------------------------------------------------------
// Objects

/// A policy spreading `desired` replicas of Deployment `target` evenly over `clusters`.
pub fn policy(
    name: &str,
    ns: &str,
    target: &str,
    desired: i32,
    clusters: &[&str],
    autoscaling: serde_json::Value,
    failover: serde_json::Value,
) -> serde_json::Value {
    let distribution: Vec<_> = clusters
        .iter()
        .map(|c| serde_json::json!({"cluster": c, "weight": 1}))
        .collect();
    serde_json::json!({
        "apiVersion": "accord.io/v1beta1", "kind": "CrossClusterScalePolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"targetRef": {"name": target}, "desiredReplicas": desired,
                 "distribution": distribution, "failover": failover, "autoscaling": autoscaling}
    })
}

/// `spec.failover` turned off.
pub fn no_failover() -> serde_json::Value {
    serde_json::json!({"enabled": false})
}

/// Applies `policy` in `ns` (server-side apply, creating the namespace when missing).
pub async fn apply_policy(testbed: &Testbed, ns: &str, policy: &serde_json::Value) -> Result<()> {
    ensure_namespace(testbed.mgmt(), ns).await?;
    let api: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), ns);
    let name = policy["metadata"]["name"].as_str().context("name")?;
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(policy),
    )
    .await?;
    Ok(())
}

/// Creates Deployment `name` with one replica on each of `members`.
pub async fn apply_deployments(
    testbed: &Testbed,
    members: &[usize],
    ns: &str,
    name: &str,
) -> Result<()> {
    for member in members {
        let cluster = &testbed.members()[*member];
        ensure_namespace(cluster, ns).await?;
        let api: Api<Deployment> = Api::namespaced(cluster.client(), ns);
        let deployment = pause_deployment(name, 1);
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&deployment),
        )
        .await?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Recording a policy: its polls and its statuses

/// One poll, as the hub stored its state.
#[derive(Debug, Clone)]
pub struct Poll {
    /// When the etcd watch delivered it (ms since the epoch).
    pub seen_ms: i64,
    /// The state after the poll.
    pub state: State,
}

impl Poll {
    /// Answered queries so far.
    pub fn samples(&self) -> i64 {
        i64::try_from(self.state.samples).unwrap_or(i64::MAX)
    }
    /// The last value read.
    pub fn value(&self) -> Option<f64> {
        self.state.value
    }
    /// The recommendation of the last answered poll.
    pub fn recommendation(&self) -> Option<i32> {
        self.state.recommendation
    }
    /// The count autoscaling holds, `start` until it decided one.
    pub fn effective(&self, start: i32) -> i32 {
        self.state.effective(start)
    }
    /// The last decision's action (`ScaledUp`, `HeldCooldown`, …).
    pub fn decision(&self) -> &str {
        self.state.last.as_ref().map_or("", |d| d.action.as_str())
    }
    /// The last decision's reason (`Surge`, `ProbeFailed`, …).
    pub fn reason(&self) -> &str {
        self.state.last.as_ref().map_or("", |d| d.reason.as_str())
    }
    /// `Closed`, `Open` or `HalfOpen`.
    pub fn breaker(&self) -> &str {
        self.state.breaker.name()
    }
    /// Consecutive failed queries.
    pub fn failures(&self) -> u32 {
        self.state.failures
    }
    /// One line with the poll's numbers, for failure messages.
    pub fn line(&self) -> String {
        let s = &self.state;
        let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
        format!(
            "samples {} value {} ewma {} σ {} T {} rec {:?} desired {:?} | {} {} | breaker {} failures {}",
            s.samples,
            f(s.value),
            f(s.ewma),
            f(s.stddev),
            f(s.threshold),
            s.recommendation,
            s.desired,
            self.decision(),
            self.reason(),
            self.breaker(),
            s.failures,
        )
    }
}

/// One status the hub wrote, as the watch delivered it.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When the watch delivered it (ms since the epoch).
    pub seen_ms: i64,
    /// The status.
    pub status: CrossClusterScalePolicyStatus,
}

impl Snapshot {
    /// `status.autoscaling`.
    pub fn autoscaling(&self) -> Option<&AutoscalingStatus> {
        self.status.autoscaling.as_ref()
    }
    /// `status.autoscaling.samples` when written (0 otherwise).
    pub fn samples(&self) -> i64 {
        self.autoscaling().and_then(|a| a.samples).unwrap_or(0)
    }
    /// `status.autoscaling.effectiveDesiredReplicas`.
    pub fn effective(&self) -> Option<i32> {
        self.autoscaling()
            .and_then(|a| a.effective_desired_replicas)
    }
    /// `status.autoscaling.lastDecision`.
    pub fn decision(&self) -> &str {
        self.autoscaling()
            .and_then(|a| a.last_decision.as_deref())
            .unwrap_or("")
    }
    /// `status.autoscaling.reason`.
    pub fn reason(&self) -> &str {
        self.autoscaling()
            .and_then(|a| a.reason.as_deref())
            .unwrap_or("")
    }
    /// `status.autoscaling.breakerState`.
    pub fn breaker(&self) -> &str {
        self.autoscaling()
            .and_then(|a| a.breaker_state.as_deref())
            .unwrap_or("")
    }
    /// `status.autoscaling.lastScaleTime` in ms.
    pub fn last_scale_ms(&self) -> Option<i64> {
        self.autoscaling()
            .and_then(|a| a.last_scale_time.as_ref())
            .map(|t| t.0.as_millisecond())
    }
    /// One line with everything autoscaling wrote, for failure messages.
    pub fn line(&self) -> String {
        let Some(a) = self.autoscaling() else {
            return format!(
                "(no autoscaling status) desired {:?}",
                self.status.desired_replicas
            );
        };
        let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
        format!(
            "samples {} value {} ewma {} σ {} T {} rec {:?} eff {:?} | {} {} | breaker {} failures {:?} tokens {:?} | lastScale {:?} id {:?} | {}",
            self.samples(),
            f(a.current_metric_value),
            f(a.ewma),
            f(a.stddev),
            f(a.threshold),
            a.recommendation,
            a.effective_desired_replicas,
            self.decision(),
            self.reason(),
            self.breaker(),
            a.consecutive_failures,
            a.tokens_left,
            a.last_scale_time.as_ref().map(|t| t.0.to_string()),
            self.status.scale_request_id,
            a.message.as_deref().unwrap_or(""),
        )
    }
}

/// A scale operation: the effective count or the last scale time changed between two
/// consecutive statuses.
#[derive(Debug, Clone)]
pub struct Operation {
    /// `status.autoscaling.lastScaleTime` (whole seconds, as Kubernetes stores it).
    pub at_ms: i64,
    /// The count before.
    pub from: i32,
    /// The count after.
    pub to: i32,
    /// The poll that decided it (`status.autoscaling.samples` of the status naming it).
    pub samples: i64,
    /// Why.
    pub reason: String,
    /// Its scale request id.
    pub scale_request_id: Option<String>,
    /// When the watch delivered the status naming it.
    pub seen_ms: i64,
}

/// Every poll (etcd state) and every status of one policy, fed by two watches.
pub struct PolicyRecorder {
    history: watch::Receiver<Vec<Snapshot>>,
    polls: watch::Receiver<Vec<Poll>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    what: String,
}

impl Drop for PolicyRecorder {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

impl PolicyRecorder {
    /// Starts watching policy `ns/name` and its autoscaling state under etcd prefix
    /// `prefix`.
    pub async fn start(testbed: &Testbed, prefix: &str, ns: &str, name: &str) -> Result<Self> {
        let api: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), ns);
        let (tx, history) = watch::channel(Vec::new());
        let selector = format!("metadata.name={name}");
        let statuses = tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default().fields(&selector))
                .default_backoff()
                .applied_objects()
                .boxed();
            let mut last_version = None;
            while let Some(event) = events.next().await {
                let Ok(policy) = event else { continue };
                // A re-list delivers the same object again; record each version once.
                if policy.metadata.resource_version == last_version {
                    continue;
                }
                last_version = policy.metadata.resource_version.clone();
                let Some(status) = policy.status else {
                    continue;
                };
                let snapshot = Snapshot {
                    seen_ms: now_ms(),
                    status,
                };
                tx.send_modify(|h| h.push(snapshot));
            }
        });

        let key = state_key(prefix, ns, name);
        let (tx, polls) = watch::channel(Vec::new());
        let states = testbed
            .watch_hub_key(&key, move |value| {
                if let Ok(state) = serde_json::from_slice::<State>(value) {
                    let poll = Poll {
                        seen_ms: now_ms(),
                        state,
                    };
                    tx.send_modify(|h| h.push(poll));
                }
            })
            .await?;
        Ok(Self {
            history,
            polls,
            tasks: vec![statuses, states],
            what: format!("{ns}/{name}"),
        })
    }

    /// Every status so far.
    pub fn snapshots(&self) -> Vec<Snapshot> {
        self.history.borrow().clone()
    }

    /// The latest status.
    pub fn last(&self) -> Option<Snapshot> {
        self.history.borrow().last().cloned()
    }

    /// Every poll so far.
    pub fn polls(&self) -> Vec<Poll> {
        self.polls.borrow().clone()
    }

    /// The latest poll.
    pub fn last_poll(&self) -> Option<Poll> {
        self.polls.borrow().last().cloned()
    }

    /// Answered queries so far (0 before the first).
    pub fn samples(&self) -> i64 {
        self.last_poll().map_or(0, |p| p.samples())
    }

    /// The last `n` polls and statuses, one per line.
    pub fn dump(&self, n: usize) -> String {
        let mut out = String::from("polls:\n");
        let polls = self.polls.borrow();
        for p in &polls[polls.len().saturating_sub(n)..] {
            let _ = writeln!(out, "  {}", p.line());
        }
        out.push_str("statuses:\n");
        let history = self.history.borrow();
        for s in &history[history.len().saturating_sub(n)..] {
            let _ = writeln!(out, "  {}", s.line());
        }
        out
    }

    fn timed_out(&self, what: &str, timeout: Duration) -> anyhow::Error {
        anyhow::anyhow!(
            "timed out after {timeout:?} waiting for {what} on {}; latest:\n{}",
            self.what,
            self.dump(12)
        )
    }

    /// Waits until `check` finds what it looks for in the statuses, failing after
    /// `timeout` with the latest polls and statuses.
    pub async fn wait<T>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl FnMut(&[Snapshot]) -> Option<T>,
    ) -> Result<T> {
        match watch_history(&self.history, timeout, check).await {
            Ok(Some(t)) => Ok(t),
            Ok(None) => bail!("the watch on {} ended while waiting for {what}", self.what),
            Err(_) => Err(self.timed_out(what, timeout)),
        }
    }

    /// Waits until `check` finds what it looks for in the polls.
    pub async fn wait_polls<T>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl FnMut(&[Poll]) -> Option<T>,
    ) -> Result<T> {
        match watch_history(&self.polls, timeout, check).await {
            Ok(Some(t)) => Ok(t),
            Ok(None) => bail!(
                "the state watch of {} ended while waiting for {what}",
                self.what
            ),
            Err(_) => Err(self.timed_out(what, timeout)),
        }
    }

    /// Waits until a poll with `samples >= n`, and returns the first.
    pub async fn wait_samples(&self, n: i64, timeout: Duration) -> Result<Poll> {
        self.wait_polls(&format!("samples >= {n}"), timeout, |h| {
            h.iter().find(|p| p.samples() >= n).cloned()
        })
        .await
    }

    /// Waits for the next answered poll after the latest, and returns it.
    pub async fn next_poll(&self) -> Result<Poll> {
        self.wait_samples(self.samples() + 1, FEW_POLLS).await
    }

    /// Waits for the latest status naming scale request `id`.
    pub async fn wait_status_of(&self, id: &str) -> Result<Snapshot> {
        self.wait(&format!("a status naming {id}"), FEW_POLLS, |h| {
            h.iter()
                .rev()
                .find(|s| s.status.scale_request_id.as_deref() == Some(id))
                .cloned()
        })
        .await
    }

    /// Waits for the first scale operation to `to` replicas.
    pub async fn wait_operation_to(&self, to: i32, timeout: Duration) -> Result<Operation> {
        self.wait(&format!("the scale operation to {to}"), timeout, |h| {
            operations(h).into_iter().find(|o| o.to == to)
        })
        .await
    }

    /// The scale operations so far.
    pub fn operations(&self) -> Vec<Operation> {
        operations(&self.history.borrow())
    }
}

/// Waits until `check` finds what it looks for in a recorded history: `Ok(None)` when the
/// recording ended first, `Err` when `timeout` passed.
pub async fn watch_history<S, T>(
    history: &watch::Receiver<Vec<S>>,
    timeout: Duration,
    mut check: impl FnMut(&[S]) -> Option<T>,
) -> std::result::Result<Option<T>, tokio::time::error::Elapsed> {
    let mut rx = history.clone();
    tokio::time::timeout(timeout, async {
        loop {
            let found = check(&rx.borrow_and_update());
            if found.is_some() {
                return found;
            }
            if rx.changed().await.is_err() {
                return None;
            }
        }
    })
    .await
}

/// The scale operations in a history of statuses.
pub fn operations(history: &[Snapshot]) -> Vec<Operation> {
    let mut ops = Vec::new();
    let mut previous: Option<(Option<i64>, i32)> = None;
    for s in history {
        let Some(effective) = s.effective() else {
            continue;
        };
        let key = (s.last_scale_ms(), effective);
        if let Some(prev) = previous
            && prev != key
        {
            ops.push(Operation {
                at_ms: key.0.unwrap_or(s.seen_ms),
                from: prev.1,
                to: effective,
                samples: s.samples(),
                reason: s.reason().to_owned(),
                scale_request_id: s.status.scale_request_id.clone(),
                seen_ms: s.seen_ms,
            });
        }
        previous = Some(key);
    }
    ops
}

/// Operations on one line, for messages.
pub fn describe(ops: &[Operation]) -> String {
    ops.iter()
        .map(|o| {
            format!(
                "{}→{} at {} (samples {}, {}, id {:?})",
                o.from, o.to, o.at_ms, o.samples, o.reason, o.scale_request_id
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

// ---------------------------------------------------------------------------------------
// Recording the member Deployments

/// `spec.replicas` and scale request id of one member's Deployment at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberState {
    /// Testbed member index.
    pub member: usize,
    /// `spec.replicas`.
    pub replicas: i32,
    /// The scale request annotation.
    pub scale_request_id: String,
    /// When the watch delivered it.
    pub seen_ms: i64,
}

/// Every version of Deployment `name` on the given members, fed by watches.
pub struct MemberRecorder {
    history: watch::Receiver<Vec<MemberState>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for MemberRecorder {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

impl MemberRecorder {
    /// Starts watching Deployment `ns/name` on `members`.
    pub fn start(testbed: &Testbed, members: &[usize], ns: &str, name: &str) -> Self {
        let (tx, history) = watch::channel(Vec::<MemberState>::new());
        let tx = std::sync::Arc::new(tx);
        let tasks = members
            .iter()
            .map(|&member| {
                let api: Api<Deployment> = Api::namespaced(testbed.members()[member].client(), ns);
                let selector = format!("metadata.name={name}");
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut events = watcher(api, watcher::Config::default().fields(&selector))
                        .default_backoff()
                        .applied_objects()
                        .boxed();
                    while let Some(event) = events.next().await {
                        let Ok(d) = event else { continue };
                        let state = MemberState {
                            member,
                            replicas: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0),
                            scale_request_id: d
                                .metadata
                                .annotations
                                .as_ref()
                                .and_then(|a| a.get(SCALE_REQUEST_ANNOTATION))
                                .cloned()
                                .unwrap_or_default(),
                            seen_ms: now_ms(),
                        };
                        tx.send_modify(|h| {
                            let last = h.iter().rev().find(|s| s.member == member);
                            let same = last.is_some_and(|l| {
                                l.replicas == state.replicas
                                    && l.scale_request_id == state.scale_request_id
                            });
                            if !same {
                                h.push(state);
                            }
                        });
                    }
                })
            })
            .collect();
        Self { history, tasks }
    }

    /// Every change so far.
    pub fn states(&self) -> Vec<MemberState> {
        self.history.borrow().clone()
    }

    /// Latest state per member.
    pub fn current(&self) -> BTreeMap<usize, MemberState> {
        let mut current = BTreeMap::new();
        for s in self.history.borrow().iter() {
            current.insert(s.member, s.clone());
        }
        current
    }

    /// Waits until every member in `expected` (member → replicas) runs that count under
    /// scale request `id`; returns when the last of them got there (ms since the epoch).
    pub async fn wait_for(
        &self,
        expected: &BTreeMap<usize, i32>,
        id: &str,
        timeout: Duration,
    ) -> Result<i64> {
        let reached = |h: &[MemberState]| -> Option<i64> {
            let mut latest = 0;
            for (member, replicas) in expected {
                let last = h.iter().rev().find(|s| s.member == *member)?;
                if last.replicas != *replicas || last.scale_request_id != id {
                    return None;
                }
                latest = latest.max(last.seen_ms);
            }
            Some(latest)
        };
        match watch_history(&self.history, timeout, reached).await {
            Ok(Some(at)) => Ok(at),
            _ => bail!(
                "members never reached {expected:?} under {id} within {timeout:?}: {:?}",
                self.current()
            ),
        }
    }
}

/// What each member should run according to `status` (placements that are not
/// unavailable), by member index through `clusters` (cluster name → member index).
pub fn expected_members(
    status: &CrossClusterScalePolicyStatus,
    clusters: &BTreeMap<&str, usize>,
) -> BTreeMap<usize, i32> {
    status
        .placements
        .iter()
        .filter(|p| p.state != PlacementState::Unavailable)
        .filter_map(|p| {
            clusters
                .get(p.cluster.as_str())
                .map(|m| (*m, p.desired_replicas))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Events, conditions, hub metrics

/// (type, reason, message, time in ms) of every Event about policy `name`.
pub async fn events(
    testbed: &Testbed,
    ns: &str,
    name: &str,
) -> Result<Vec<(String, String, String, i64)>> {
    let api: Api<Event> = Api::namespaced(testbed.mgmt().client(), ns);
    let list = api.list(&Default::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| {
            let at = e
                .event_time
                .as_ref()
                .map(|t| t.0.as_millisecond())
                .or_else(|| e.last_timestamp.as_ref().map(|t| t.0.as_millisecond()))
                .unwrap_or(0);
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
                at,
            )
        })
        .collect())
}

/// Waits for an Event of `type_` and `reason` about policy `name` whose message passes
/// `accept`; returns (message, time).
pub async fn wait_event(
    testbed: &Testbed,
    ns: &str,
    name: &str,
    type_: &str,
    reason: &str,
    accept: impl Fn(&str) -> bool,
) -> Result<(String, i64)> {
    until(
        &format!("a {type_} {reason} Event about {ns}/{name}"),
        FEW_POLLS,
        || async {
            let all = events(testbed, ns, name).await?;
            Ok(
                match all
                    .iter()
                    .find(|(t, r, m, _)| t == type_ && r == reason && accept(m))
                {
                    Some((_, _, m, at)) => Check::Ready((m.clone(), *at)),
                    None => Check::NotYet(format!(
                        "events: {:?}",
                        all.iter().map(|e| (&e.0, &e.1, &e.2)).collect::<Vec<_>>()
                    )),
                },
            )
        },
    )
    .await
}

/// The condition `ScalingActive` of a status, as (status, reason).
pub fn scaling_active(status: &CrossClusterScalePolicyStatus) -> Option<(String, String)> {
    accord_crds::conditions::find(&status.conditions, "ScalingActive")
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// Sum of the samples of metric `name` whose labels include every pair of `labels`.
pub fn labelled_metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (metric, label_text) = series.split_once('{').unwrap_or((series, ""));
        if metric != name {
            continue;
        }
        if labels
            .iter()
            .all(|(k, v)| label_text.contains(&format!("{k}=\"{v}\"")))
            && let Ok(v) = value.parse::<f64>()
        {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// The `/metrics` text of `hub`.
pub async fn hub_metrics(testbed: &Testbed, hub: &HubProcess<'_>) -> Result<String> {
    Ok(testbed
        .http()
        .get(format!("{}/metrics", hub.http))
        .send()
        .await?
        .text()
        .await?)
}
