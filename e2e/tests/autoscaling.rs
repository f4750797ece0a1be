//! Metric-driven autoscaling end to end: a test-controlled exporter → a real Prometheus
//! (scraping every 250 ms) → real hub(s) polling it every second → real agents → Deployments
//! in three real member clusters.
//!
//! Each test runs its own hub(s) (own etcd prefix), agents with cluster names of its own,
//! its own exporter and Prometheus, in its own namespace, against the shared member
//! clusters. The policy status and the member Deployments are recorded through watches, so
//! that every assertion is made on the whole history (every poll the hub wrote) rather
//! than on a sample taken at a guessed moment; "N polls" always means the status's
//! `samples` counter advancing by N.

use accord_crds::scale::AutoscalingStatus;
use accord_crds::{
    CrossClusterScalePolicy, CrossClusterScalePolicyStatus, SCALE_REQUEST_ANNOTATION,
};
use accord_e2e::exporter::Exporter;
use accord_e2e::federation::{Federation, ensure_namespace, kill9, pause_deployment};
use accord_e2e::hub::{HubOptions, HubProcess};
use accord_e2e::prometheus::ScrapingPrometheus;
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use anyhow::{Context as _, Result, bail, ensure};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(3));
/// The scenarios are heavy for two cores and time-sensitive; run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());
const FM: &str = "accord-e2e-tests";
/// The gauge the exporter serves and the policies query, one series per policy.
const LOAD: &str = "accord_test_load";
/// Prometheus scrape interval: a quarter of the 1 s poll, so each poll sees the value set
/// after the previous one.
const SCRAPE_INTERVAL: Duration = Duration::from_millis(250);
/// Generous bound for things that take one or two polls plus a scrape.
const FEW_POLLS: Duration = Duration::from_secs(20);

/// Milliseconds since the Unix epoch, the one clock every timestamp here is put on.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

// ---------------------------------------------------------------------------------------
// The metric source

/// An exporter and a Prometheus scraping it; Prometheus stops with the fixture.
struct MetricSource {
    testbed: &'static Testbed,
    exporter: Exporter,
    prometheus: ScrapingPrometheus,
}

impl Drop for MetricSource {
    fn drop(&mut self) {
        self.prometheus.stop(self.testbed);
    }
}

impl MetricSource {
    async fn start(testbed: &'static Testbed, name: &str) -> Result<Self> {
        let exporter = Exporter::start().await?;
        let dir = testbed.dir().join(format!("autoscale-{name}"));
        let prometheus = ScrapingPrometheus::start(
            testbed,
            &format!("autoscale-{name}"),
            &dir,
            SCRAPE_INTERVAL,
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
    fn query(policy: &str) -> String {
        format!("{LOAD}{{policy=\"{policy}\"}}")
    }

    /// Sets policy `policy`'s load; Prometheus sees it within a scrape.
    fn set(&self, policy: &str, value: f64) {
        self.exporter.set(LOAD, &[("policy", policy)], value);
    }

    /// Sets the load and waits until Prometheus answers it, so that the next poll sees it.
    async fn set_and_wait(&self, policy: &str, value: f64) -> Result<()> {
        self.set(policy, value);
        self.prometheus
            .wait_for_value(self.testbed.http(), &Self::query(policy), value, FEW_POLLS)
            .await
    }
}

// ---------------------------------------------------------------------------------------
// Objects

/// An autoscaling block polling every second with the given target per replica and the
/// CRD's defaults otherwise; tests change fields in place.
fn autoscaling(url: &str, policy: &str, min: i32, max: i32, target: f64) -> serde_json::Value {
    serde_json::json!({
        "minReplicas": min, "maxReplicas": max,
        "metric": {
            "prometheus": {"url": url, "query": MetricSource::query(policy)},
            "targetPerReplica": target,
            "pollSeconds": 1
        },
        "dynamicThreshold": {"ewmaAlpha": 0.3, "windowSeconds": 1800, "stddevFactor": 2.0, "floorRatio": 0.8},
        "behavior": {"debounceMillis": 0, "cooldownSeconds": 5, "maxScaleOperationsPerMinute": 30,
                     "failureThreshold": 3, "breakerOpenSeconds": 5}
    })
}

/// A policy spreading `desired` replicas of Deployment `target` evenly over `clusters`,
/// with failover off unless `failover` says otherwise.
fn policy(
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
        "apiVersion": "accord.io/v1alpha1", "kind": "CrossClusterScalePolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"targetRef": {"name": target}, "desiredReplicas": desired,
                 "distribution": distribution, "failover": failover, "autoscaling": autoscaling}
    })
}

fn no_failover() -> serde_json::Value {
    serde_json::json!({"enabled": false})
}

async fn apply_policy(testbed: &Testbed, ns: &str, policy: &serde_json::Value) -> Result<()> {
    ensure_namespace(testbed.mgmt(), ns).await?;
    let api: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), ns);
    let name = policy["metadata"]["name"].as_str().context("name")?;
    api.patch(name, &PatchParams::apply(FM).force(), &Patch::Apply(policy))
        .await?;
    Ok(())
}

/// Creates Deployment `name` with one replica on each of `members`.
async fn apply_deployments(
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
            &PatchParams::apply(FM).force(),
            &Patch::Apply(&deployment),
        )
        .await?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Recording the policy's status

/// One status the hub wrote, as the watch delivered it.
#[derive(Debug, Clone)]
struct Snapshot {
    /// When the watch delivered it (ms since the epoch).
    seen_ms: i64,
    status: CrossClusterScalePolicyStatus,
}

impl Snapshot {
    fn autoscaling(&self) -> Option<&AutoscalingStatus> {
        self.status.autoscaling.as_ref()
    }
    fn samples(&self) -> i64 {
        self.autoscaling().and_then(|a| a.samples).unwrap_or(0)
    }
    fn effective(&self) -> Option<i32> {
        self.autoscaling()
            .and_then(|a| a.effective_desired_replicas)
    }
    fn recommendation(&self) -> Option<i32> {
        self.autoscaling().and_then(|a| a.recommendation)
    }
    fn value(&self) -> Option<f64> {
        self.autoscaling().and_then(|a| a.current_metric_value)
    }
    fn decision(&self) -> &str {
        self.autoscaling()
            .and_then(|a| a.last_decision.as_deref())
            .unwrap_or("")
    }
    fn reason(&self) -> &str {
        self.autoscaling()
            .and_then(|a| a.reason.as_deref())
            .unwrap_or("")
    }
    fn breaker(&self) -> &str {
        self.autoscaling()
            .and_then(|a| a.breaker_state.as_deref())
            .unwrap_or("")
    }
    fn last_scale_ms(&self) -> Option<i64> {
        self.autoscaling()
            .and_then(|a| a.last_scale_time.as_ref())
            .map(|t| t.0.as_millisecond())
    }
    /// One line with everything autoscaling wrote, for failure messages.
    fn line(&self) -> String {
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
struct Operation {
    /// `status.autoscaling.lastScaleTime` (whole seconds, as Kubernetes stores it).
    at_ms: i64,
    from: i32,
    to: i32,
    /// The poll that decided it.
    samples: i64,
    reason: String,
    scale_request_id: Option<String>,
    /// When the watch delivered the status naming it.
    seen_ms: i64,
}

/// Every status of one policy the hub wrote, fed by a watch.
struct PolicyRecorder {
    history: watch::Receiver<Vec<Snapshot>>,
    task: tokio::task::JoinHandle<()>,
    what: String,
}

impl Drop for PolicyRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PolicyRecorder {
    fn start(testbed: &Testbed, ns: &str, name: &str) -> Self {
        let api: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), ns);
        let (tx, history) = watch::channel(Vec::new());
        let selector = format!("metadata.name={name}");
        let task = tokio::spawn(async move {
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
        Self {
            history,
            task,
            what: format!("{ns}/{name}"),
        }
    }

    fn snapshots(&self) -> Vec<Snapshot> {
        self.history.borrow().clone()
    }

    fn last(&self) -> Option<Snapshot> {
        self.history.borrow().last().cloned()
    }

    fn samples(&self) -> i64 {
        self.last().map_or(0, |s| s.samples())
    }

    /// The last `n` statuses, one per line.
    fn dump(&self, n: usize) -> String {
        let history = self.history.borrow();
        let mut out = String::new();
        for s in &history[history.len().saturating_sub(n)..] {
            let _ = writeln!(out, "  {}", s.line());
        }
        out
    }

    /// Waits until `check` finds what it looks for in the history, failing after
    /// `timeout` with the latest statuses.
    async fn wait<T>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl FnMut(&[Snapshot]) -> Option<T>,
    ) -> Result<T> {
        match watch_history(&self.history, timeout, check).await {
            Ok(Some(t)) => Ok(t),
            Ok(None) => bail!("the watch on {} ended while waiting for {what}", self.what),
            Err(_) => bail!(
                "timed out after {timeout:?} waiting for {what} on {}; latest statuses:\n{}",
                self.what,
                self.dump(12)
            ),
        }
    }

    /// Waits until a status with `samples >= n`, and returns it.
    async fn wait_samples(&self, n: i64, timeout: Duration) -> Result<Snapshot> {
        self.wait(&format!("samples >= {n}"), timeout, |h| {
            h.iter().rev().find(|s| s.samples() >= n).cloned()
        })
        .await
    }

    /// Waits for the next poll after the latest status, and returns its status.
    async fn next_poll(&self) -> Result<Snapshot> {
        self.wait_samples(self.samples() + 1, FEW_POLLS).await
    }
}

/// Waits until `check` finds what it looks for in a recorded history: `Ok(None)` when the
/// recording ended first, `Err` when `timeout` passed.
async fn watch_history<S, T>(
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

/// The scale operations in a history.
fn operations(history: &[Snapshot]) -> Vec<Operation> {
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

fn describe(ops: &[Operation]) -> String {
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
struct MemberState {
    member: usize,
    replicas: i32,
    scale_request_id: String,
    seen_ms: i64,
}

/// Every version of Deployment `name` on the given members, fed by watches.
struct MemberRecorder {
    history: watch::Receiver<Vec<MemberState>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for MemberRecorder {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

impl MemberRecorder {
    fn start(testbed: &Testbed, members: &[usize], ns: &str, name: &str) -> Self {
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

    fn states(&self) -> Vec<MemberState> {
        self.history.borrow().clone()
    }

    /// Latest state per member.
    fn current(&self) -> BTreeMap<usize, MemberState> {
        let mut current = BTreeMap::new();
        for s in self.history.borrow().iter() {
            current.insert(s.member, s.clone());
        }
        current
    }

    /// Waits until every member in `expected` (member → replicas) runs that count under
    /// scale request `id`; returns when the last of them got there (ms since the epoch).
    async fn wait_for(
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
                // When it got there: the first of the trailing states equal to the last.
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
fn expected_members(
    status: &CrossClusterScalePolicyStatus,
    clusters: &BTreeMap<&str, usize>,
) -> BTreeMap<usize, i32> {
    status
        .placements
        .iter()
        .filter(|p| p.state != accord_crds::PlacementState::Unavailable)
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
async fn events(
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
async fn wait_event(
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
fn scaling_active(status: &CrossClusterScalePolicyStatus) -> Option<(String, String)> {
    accord_crds::conditions::find(&status.conditions, "ScalingActive")
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// Sum of the samples of metric `name` whose labels include every pair of `labels`.
fn labelled_metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
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

async fn hub_metrics(testbed: &Testbed, hub: &HubProcess<'_>) -> Result<String> {
    Ok(testbed
        .http()
        .get(format!("{}/metrics", hub.http))
        .send()
        .await?
        .text()
        .await?)
}

/// The numbers in a message, commas (thousands separators) removed.
fn numbers_in(message: &str) -> Vec<f64> {
    message
        .replace(',', "")
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|t| t.trim_matches('.').parse::<f64>().ok())
        .collect()
}

/// Cluster names of a test, mapped to the member clusters 0, 1, 2.
fn clusters<'a>(names: &[&'a str]) -> BTreeMap<&'a str, usize> {
    names.iter().enumerate().map(|(i, n)| (*n, i)).collect()
}

// ---------------------------------------------------------------------------------------
// The scenarios

#[test]
fn the_exporter_reaches_prometheus_and_prometheus_comes_back_on_the_same_port() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let mut source = MetricSource::start(testbed, "plumbing").await?;
        source.set_and_wait("p", 42.0).await?;
        let url = source.prometheus.url.clone();
        source.prometheus.stop(testbed);
        let refused = testbed.http().get(format!("{url}/-/ready")).send().await;
        ensure!(
            refused.is_err(),
            "a stopped Prometheus answered: {refused:?}"
        );
        source.prometheus.resume(testbed).await?;
        ensure!(
            source.prometheus.url == url,
            "the URL changed across the restart"
        );
        source.set_and_wait("p", 43.5).await?;
        Ok(())
    });
}

#[test]
fn a_fivefold_step_scales_up_within_two_polls_and_the_members_follow_within_three_seconds() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let ns = "autoscale-step";
        let names = ["step-1", "step-2", "step-3"];
        let members = [0, 1, 2];
        let source = MetricSource::start(testbed, "step").await?;
        source.set_and_wait("web", 300.0).await?;
        let fed = Federation::start(testbed, "hub-step", "/e2e-autoscale-step/", &[], &[("step-1", 0), ("step-2", 1), ("step-3", 2)]).await?;
        apply_deployments(testbed, &members, ns, "web").await?;
        let recorder = PolicyRecorder::start(testbed, ns, "web");
        let member_log = MemberRecorder::start(testbed, &members, ns, "web");
        let a = autoscaling(&source.prometheus.url, "web", 1, 60, 100.0);
        apply_policy(testbed, ns, &policy("web", ns, "web", 3, &names, a, no_failover())).await?;

        // A steady 300 is the starting count (3): no operation, and a threshold once
        // the window holds enough samples.
        let steady = recorder.wait_samples(5, Duration::from_secs(60)).await?;
        ensure!(operations(&recorder.snapshots()).is_empty(), "a steady load at the starting count scaled: {}", describe(&operations(&recorder.snapshots())));
        ensure!(steady.autoscaling().and_then(|a| a.threshold).is_some(), "no threshold after 5 samples:\n{}", recorder.dump(6));

        source.set_and_wait("web", 1500.0).await?;
        let first = recorder
            .wait("a sample of 1500", FEW_POLLS, |h| h.iter().find(|s| s.value() == Some(1500.0)).cloned())
            .await?;
        let up = recorder
            .wait("the scale-up to 15", FEW_POLLS, |h| operations(h).into_iter().find(|o| o.to == 15))
            .await?;
        ensure!(up.from == 3, "scaled from {} instead of 3", up.from);
        ensure!(
            up.samples <= first.samples() + 1,
            "the scale-up came at sample {}, more than two polls after the first sample showing the step ({}):\n{}",
            up.samples, first.samples(), recorder.dump(10)
        );
        ensure!(operations(&recorder.snapshots()).len() == 1, "{}", describe(&operations(&recorder.snapshots())));

        // The Event names the value and the threshold.
        let (message, event_ms) = wait_event(testbed, ns, "web", "Normal", "ScaledUp", |_| true).await?;
        ensure!(message.contains("threshold"), "the Event does not name the threshold: {message}");
        ensure!(numbers_in(&message).contains(&1500.0), "the Event does not name the value 1500: {message}");
        let threshold = first.autoscaling().and_then(|a| a.threshold);
        println!("step: {message:?} (threshold in status {threshold:?})");

        // The members run the new division under the operation's scale request id within 3 s.
        let id = up.scale_request_id.clone().context("no scaleRequestID on the operation")?;
        let status = recorder
            .wait("placements of 15", FEW_POLLS, |h| {
                h.iter().rev().find(|s| s.status.scale_request_id.as_deref() == Some(id.as_str())).cloned()
            })
            .await?;
        let expected = expected_members(&status.status, &clusters(&names));
        ensure!(expected.values().sum::<i32>() == 15, "placements {:?}", status.status.placements);
        let members_ms = member_log.wait_for(&expected, &id, Duration::from_secs(10)).await?;
        // The decision's moment: the Event's own time when it has sub-second precision,
        // else when the status naming it arrived; either is at or after the decision.
        let decision_ms = if event_ms > 0 && event_ms % 1000 != 0 { event_ms.min(up.seen_ms) } else { up.seen_ms };
        let lag = members_ms - decision_ms;
        println!("step: decision → all members changed in {lag} ms");
        ensure!(lag <= 3000, "the members changed {lag} ms after the decision (more than 3 s)");

        // The hub's metrics say the same.
        let text = hub_metrics(testbed, &fed.hub).await?;
        let policy_label = format!("{ns}/web");
        ensure!(labelled_metric(&text, "accord_hub_autoscale_decisions_total", &[("action", "ScaledUp")]).unwrap_or(0.0) >= 1.0, "no ScaledUp decision counted:\n{text}");
        ensure!(labelled_metric(&text, "accord_hub_autoscale_metric_value", &[("policy", &policy_label)]) == Some(1500.0), "metric_value for {policy_label} is not 1500");
        ensure!(labelled_metric(&text, "accord_hub_autoscale_threshold", &[("policy", &policy_label)]).is_some(), "no threshold gauge for {policy_label}");
        drop(fed);
        Ok(())
    });
}

#[test]
fn steady_noisy_load_at_the_count_it_wants_makes_no_scale_operation() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let ns = "autoscale-noise";
        let names = ["noise-1", "noise-2", "noise-3"];
        let members = [0, 1, 2];
        // Mean 1000 ± 10 % against 100 per replica, starting at the 10 replicas the mean
        // wants: a plain ceil(value / target) says 10 or 11 from one poll to the next, and
        // three 11s in a row used to pass for a trend. The default tolerance (10 %) holds 10.
        const MEAN: f64 = 1000.0;
        const TARGET: f64 = 100.0;
        const START: i32 = 10;
        const POLLS: i64 = 60;
        // Seeded, so a noisy load repeats run to run.
        let mut rng = StdRng::seed_from_u64(0x5EED_0013);
        let mut noisy = move || MEAN * (0.9 + 0.2 * rng.random::<f64>());
        let source = MetricSource::start(testbed, "noise").await?;
        source.set_and_wait("web", noisy()).await?;
        let fed = Federation::start(
            testbed,
            "hub-noise",
            "/e2e-autoscale-noise/",
            &[],
            &[("noise-1", 0), ("noise-2", 1), ("noise-3", 2)],
        )
        .await?;
        apply_deployments(testbed, &members, ns, "web").await?;
        let recorder = PolicyRecorder::start(testbed, ns, "web");
        let mut a = autoscaling(&source.prometheus.url, "web", 1, 60, TARGET);
        a["behavior"]["cooldownSeconds"] = 5.into();
        apply_policy(
            testbed,
            ns,
            &policy("web", ns, "web", START, &names, a, no_failover()),
        )
        .await?;

        // A new noisy value every poll, from the first answer on: there is nothing to
        // settle, so every poll counts.
        recorder.wait_samples(1, Duration::from_secs(60)).await?;
        while recorder.samples() < POLLS {
            source.set("web", noisy());
            recorder.next_poll().await?;
        }
        let history = recorder.snapshots();
        let ops = operations(&history);
        ensure!(
            ops.is_empty(),
            "noise scaled: {}\n{}",
            describe(&ops),
            recorder.dump(20)
        );
        let moved: Vec<String> = history
            .iter()
            .filter(|s| s.recommendation().is_some_and(|r| r != START))
            .map(Snapshot::line)
            .collect();
        ensure!(
            moved.is_empty(),
            "the recommendation left {START} on noise:\n{}",
            moved.join("\n")
        );

        // The numbers were adversarial: a plain ceil would have moved, and said 11 on
        // three polls in a row (what the trend rule follows). One entry per poll: a status
        // written for another reason repeats the poll's numbers.
        let naive: Vec<(i64, i32)> = history
            .iter()
            .filter_map(|s| s.value().map(|v| (s.samples(), (v / TARGET).ceil() as i32)))
            .collect::<BTreeMap<i64, i32>>()
            .into_iter()
            .collect();
        let flips = naive.windows(2).filter(|w| w[0].1 != w[1].1).count();
        let trends = naive
            .windows(3)
            .filter(|w| w[2].0 - w[0].0 == 2 && w.iter().all(|(_, r)| *r > START))
            .count();
        println!(
            "noise: {} polls, a plain ceil(value/target) changed {flips} times and was above {START} on 3 polls in a row {trends} times; no operation",
            naive.len()
        );
        ensure!(
            naive.len() as i64 >= POLLS - 1,
            "only {} polls recorded",
            naive.len()
        );
        ensure!(
            flips >= 10 && trends >= 1,
            "the noise was too gentle to prove anything ({flips} changes, {trends} runs of three)"
        );
        drop(fed);
        Ok(())
    });
}

#[test]
fn a_slow_ramp_is_followed_within_one_step_of_the_recommendation() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let ns = "autoscale-ramp";
        let names = ["ramp-1", "ramp-2", "ramp-3"];
        let members = [0, 1, 2];
        const COOLDOWN: i64 = 2;
        // Polls within which the count must have caught up with a recommendation:
        // three for the trend, the cooldown, and two for the scrape and status latency.
        const LAG: i64 = 3 + COOLDOWN + 2;
        let source = MetricSource::start(testbed, "ramp").await?;
        let mut value = 1000.0;
        source.set_and_wait("web", value).await?;
        let fed = Federation::start(testbed, "hub-ramp", "/e2e-autoscale-ramp/", &[], &[("ramp-1", 0), ("ramp-2", 1), ("ramp-3", 2)]).await?;
        apply_deployments(testbed, &members, ns, "web").await?;
        let recorder = PolicyRecorder::start(testbed, ns, "web");
        let mut a = autoscaling(&source.prometheus.url, "web", 1, 100, 100.0);
        a["behavior"]["cooldownSeconds"] = COOLDOWN.into();
        a["behavior"]["maxScaleOperationsPerMinute"] = 60.into();
        apply_policy(testbed, ns, &policy("web", ns, "web", 10, &names, a, no_failover())).await?;
        let start = recorder.wait_samples(4, Duration::from_secs(60)).await?.samples();

        // +3 % a poll for 30 polls: 1000 → 2427 (10 → 25 replicas).
        let ramp_from = start + 1;
        for _ in 0..30 {
            value *= 1.03;
            source.set("web", value);
            recorder.next_poll().await?;
        }
        // Hold the top until the count has caught up.
        recorder.wait_samples(recorder.samples() + LAG, FEW_POLLS * 2).await?;

        let history: Vec<Snapshot> = recorder.snapshots().into_iter().filter(|s| s.samples() >= ramp_from).collect();
        let rec_at: BTreeMap<i64, i32> = history.iter().filter_map(|s| s.recommendation().map(|r| (s.samples(), r))).collect();
        for s in &history {
            let (Some(effective), Some(rec)) = (s.effective(), s.recommendation()) else { continue };
            ensure!(effective <= rec, "the count {effective} overtook the recommendation {rec}: {}", s.line());
            if let Some((_, earlier)) = rec_at.range(..=s.samples() - LAG).next_back()
                && s.samples() - LAG >= ramp_from
            {
                ensure!(
                    effective >= *earlier,
                    "the count {effective} at sample {} is behind the recommendation {earlier} of {LAG} polls earlier:\n{}",
                    s.samples(),
                    recorder.dump(LAG as usize + 4)
                );
            }
        }
        let ops = operations(&recorder.snapshots());
        let last = recorder.last().context("no status")?;
        println!("ramp: {} operations, {} → {:?}: {}", ops.len(), 10, last.effective(), describe(&ops));
        ensure!(ops.len() >= 3, "the ramp was followed by {} operations only: {}", ops.len(), describe(&ops));
        // At the top (2,427) the count holds once the value is within the default 10 %
        // tolerance of what it carries: 23 replicas (2,300 × 1.1 ≥ 2,427) or more.
        let top_count = (value / 110.0).ceil() as i32;
        ensure!(last.effective() == last.recommendation() && last.effective() >= Some(top_count), "the count did not reach the top ({top_count}): {}", last.line());
        ensure!(ops.iter().any(|o| o.reason == "Trend"), "no operation gave Trend as its reason: {}", describe(&ops));
        drop(fed);
        Ok(())
    });
}

#[test]
fn a_load_that_flips_every_poll_never_exceeds_the_rate_limit_and_respects_the_cooldown() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let ns = "autoscale-flip";
        let names = ["flip-1", "flip-2", "flip-3"];
        let members = [0, 1, 2];
        const MAX_OPS: usize = 3;
        let source = MetricSource::start(testbed, "flip").await?;
        source.set_and_wait("web", 500.0).await?;
        let fed = Federation::start(testbed, "hub-flip", "/e2e-autoscale-flip/", &[], &[("flip-1", 0), ("flip-2", 1), ("flip-3", 2)]).await?;
        apply_deployments(testbed, &members, ns, "web").await?;
        let recorder = PolicyRecorder::start(testbed, ns, "web");
        // The threshold is the previous sample and no cooldown: every rise is a surge,
        // every drop a scale-down; only the rate limit holds them back.
        let mut a = autoscaling(&source.prometheus.url, "web", 1, 60, 100.0);
        a["dynamicThreshold"] = serde_json::json!({"ewmaAlpha": 1.0, "windowSeconds": 1800, "stddevFactor": 0.0, "floorRatio": 0.0});
        a["behavior"]["cooldownSeconds"] = 0.into();
        a["behavior"]["maxScaleOperationsPerMinute"] = (MAX_OPS as i32).into();
        apply_policy(testbed, ns, &policy("web", ns, "web", 5, &names, a.clone(), no_failover())).await?;
        let start = recorder.wait_samples(4, Duration::from_secs(60)).await?.samples();

        // 75 polls of 500, 1500, 500, …: more than one sliding minute.
        let mut high = false;
        while recorder.samples() < start + 75 {
            high = !high;
            source.set("web", if high { 1500.0 } else { 500.0 });
            recorder.next_poll().await?;
        }
        let history = recorder.snapshots();
        let ops = operations(&history);
        println!("flip: {} operations in 75 polls: {}", ops.len(), describe(&ops));
        ensure!(ops.len() > MAX_OPS, "the flipping load scaled only {} times; it should scale again once a minute has passed: {}", ops.len(), describe(&ops));
        // lastScaleTime has whole seconds, truncated: two operations at least 60 s apart
        // are at least 60 s apart here too, so a window holding more is a real excess.
        for (i, op) in ops.iter().enumerate() {
            let within = ops[i..].iter().take_while(|o| o.at_ms - op.at_ms < 60_000).count();
            ensure!(within <= MAX_OPS, "{within} operations within 60 s from {}: {}", op.at_ms, describe(&ops));
        }
        ensure!(history.iter().any(|s| s.decision() == "HeldRateLimit"), "HeldRateLimit never seen:\n{}", recorder.dump(20));
        ensure!(
            history.iter().filter(|s| s.decision() == "HeldRateLimit").all(|s| s.autoscaling().and_then(|a| a.tokens_left) == Some(0)),
            "a poll was held by the rate limit with tokens left"
        );
        ensure!(ops.iter().any(|o| o.to > o.from) && ops.iter().any(|o| o.to < o.from), "both directions should scale: {}", describe(&ops));

        // Now a cooldown, with the rate limit out of the way: operations at least the
        // cooldown apart. Each high is higher than the last, so every one wants a surge.
        const COOLDOWN: i64 = 8;
        a["behavior"]["cooldownSeconds"] = COOLDOWN.into();
        a["behavior"]["maxScaleOperationsPerMinute"] = 60.into();
        apply_policy(testbed, ns, &policy("web", ns, "web", 5, &names, a, no_failover())).await?;
        let phase2 = recorder.next_poll().await?.samples() + 1;
        let mut step = 0.0;
        while recorder.samples() < phase2 + 30 {
            high = !high;
            if high {
                step += 100.0;
            }
            source.set("web", if high { 1500.0 + step } else { 500.0 });
            recorder.next_poll().await?;
        }
        let history = recorder.snapshots();
        let all = operations(&history);
        let later: Vec<_> = all.iter().filter(|o| o.samples >= phase2).cloned().collect();
        println!("flip with cooldown {COOLDOWN}s: {}", describe(&later));
        ensure!(later.len() >= 2, "with a cooldown the flipping load scaled {} times in 30 polls: {}", later.len(), describe(&later));
        for pair in all.windows(2).filter(|w| w[1].samples >= phase2) {
            let gap = pair[1].at_ms - pair[0].at_ms;
            ensure!(gap >= COOLDOWN * 1000, "two operations {gap} ms apart under a {COOLDOWN} s cooldown: {}", describe(&all));
        }
        ensure!(
            history.iter().any(|s| s.samples() >= phase2 && s.decision() == "HeldCooldown"),
            "HeldCooldown never seen:\n{}",
            recorder.dump(20)
        );
        drop(fed);
        Ok(())
    });
}

#[test]
fn a_stopped_prometheus_opens_the_breaker_holding_replicas_and_its_return_closes_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let ns = "autoscale-breaker";
        let names = ["brk-1", "brk-2", "brk-3"];
        let members = [0, 1, 2];
        const FAILURES: i32 = 3;
        const OPEN_SECONDS: u64 = 4;
        let mut source = MetricSource::start(testbed, "breaker").await?;
        source.set_and_wait("web", 600.0).await?;
        let fed = Federation::start(testbed, "hub-breaker", "/e2e-autoscale-breaker/", &[], &[("brk-1", 0), ("brk-2", 1), ("brk-3", 2)]).await?;
        apply_deployments(testbed, &members, ns, "web").await?;
        let recorder = PolicyRecorder::start(testbed, ns, "web");
        let member_log = MemberRecorder::start(testbed, &members, ns, "web");
        let mut a = autoscaling(&source.prometheus.url, "web", 1, 60, 100.0);
        a["behavior"]["failureThreshold"] = FAILURES.into();
        a["behavior"]["breakerOpenSeconds"] = OPEN_SECONDS.into();
        a["behavior"]["cooldownSeconds"] = 1.into();
        apply_policy(testbed, ns, &policy("web", ns, "web", 6, &names, a, no_failover())).await?;
        let before = recorder.wait_samples(5, Duration::from_secs(60)).await?;
        let id = before.status.scale_request_id.clone().context("no scaleRequestID")?;
        let expected = expected_members(&before.status, &clusters(&names));
        member_log.wait_for(&expected, &id, FEW_POLLS).await?;
        let members_before = member_log.states().len();
        let count_before = before.effective();
        ensure!(count_before == Some(6), "a steady 600 should hold 6: {}", before.line());

        source.prometheus.stop(testbed);
        // Meanwhile the load triples; nobody can see it.
        source.set("web", 1800.0);
        let open = recorder
            .wait("breaker Open", FEW_POLLS, |h| h.iter().rev().find(|s| s.breaker() == "Open").cloned())
            .await?;
        let history = recorder.snapshots();
        let before_open: Vec<_> = history.iter().filter(|s| s.samples() >= before.samples() && s.breaker() != "Open").collect();
        let max_failures = before_open.iter().filter_map(|s| s.autoscaling().and_then(|a| a.consecutive_failures)).max().unwrap_or(0);
        let open_failures = open.autoscaling().and_then(|a| a.consecutive_failures).unwrap_or(0);
        ensure!(
            open_failures >= FAILURES || max_failures == FAILURES - 1,
            "the breaker opened after {open_failures} failures (before: {max_failures}):\n{}",
            recorder.dump(8)
        );
        ensure!(history.iter().any(|s| s.decision() == "MetricFailed"), "no MetricFailed decision before the breaker opened");
        recorder
            .wait("ScalingActive False/BreakerOpen while the breaker is open", FEW_POLLS, |h| {
                h.iter().rev().find(|s| {
                    s.breaker() == "Open" && scaling_active(&s.status) == Some(("False".into(), "BreakerOpen".into()))
                }).cloned()
            })
            .await?;
        wait_event(testbed, ns, "web", "Warning", "BreakerOpened", |_| true).await?;
        let text = hub_metrics(testbed, &fed.hub).await?;
        ensure!(labelled_metric(&text, "accord_hub_autoscale_breaker_open", &[("policy", &format!("{ns}/web"))]) == Some(1.0), "breaker_open gauge is not 1");

        // Past breakerOpenSeconds a probe runs, fails, and the breaker opens again.
        recorder
            .wait("a failed probe", Duration::from_secs(OPEN_SECONDS * 3 + 10), |h| {
                h.iter().find(|s| s.samples() >= before.samples() && s.reason() == "ProbeFailed").cloned()
            })
            .await?;

        source.prometheus.resume(testbed).await?;
        let closed = recorder
            .wait("breaker Closed again", Duration::from_secs(OPEN_SECONDS * 3 + 20), |h| {
                h.iter().rev().find(|s| s.samples() > before.samples() && s.breaker() == "Closed" && s.autoscaling().and_then(|a| a.consecutive_failures).unwrap_or(0) == 0).cloned()
            })
            .await?;
        wait_event(testbed, ns, "web", "Normal", "BreakerClosed", |_| true).await?;

        // While failing and open, neither the count nor the members moved.
        let history = recorder.snapshots();
        for s in history.iter().filter(|s| s.seen_ms > before.seen_ms && s.seen_ms < closed.seen_ms) {
            ensure!(s.effective() == count_before, "the count moved while the metric failed: {}", s.line());
        }

        // Closed: scaling goes on (the tripled load, then a further step).
        let up = recorder
            .wait("a scale-up after the breaker closed", Duration::from_secs(30), |h| {
                operations(h).into_iter().find(|o| o.seen_ms >= closed.seen_ms && o.to > 6)
            })
            .await?;
        let active = recorder
            .wait("ScalingActive True", FEW_POLLS, |h| h.last().and_then(|s| scaling_active(&s.status)).filter(|c| c.0 == "True"))
            .await?;
        println!("breaker: reopened after a failed probe, closed, then {}→{} ({}), ScalingActive {active:?}", up.from, up.to, up.reason);
        let id = up.scale_request_id.context("no scaleRequestID")?;
        let status = recorder
            .wait("placements of the scale-up", FEW_POLLS, |h| h.iter().rev().find(|s| s.status.scale_request_id.as_deref() == Some(id.as_str())).cloned())
            .await?;
        member_log.wait_for(&expected_members(&status.status, &clusters(&names)), &id, FEW_POLLS).await?;
        // The members ran nothing new until the scale-up that followed the closing probe
        // (the probe's poll decides it, and a member may see it before the status saying
        // Closed reaches this test, so the ids tell, not the clocks of two watches).
        let moved: Vec<_> = member_log.states().into_iter().skip(members_before).filter(|m| m.scale_request_id != id).collect();
        ensure!(moved.is_empty(), "members changed while the breaker was open: {moved:?}");

        // And a later step scales again.
        source.set_and_wait("web", 5000.0).await?;
        let later = recorder
            .wait("the scale-up to 50 after a later step", FEW_POLLS, |h| operations(h).into_iter().find(|o| o.to == 50))
            .await?;
        let id = later.scale_request_id.context("no scaleRequestID")?;
        let status = recorder
            .wait("placements of 50", FEW_POLLS, |h| h.iter().rev().find(|s| s.status.scale_request_id.as_deref() == Some(id.as_str())).cloned())
            .await?;
        member_log.wait_for(&expected_members(&status.status, &clusters(&names)), &id, FEW_POLLS).await?;
        drop(fed);
        Ok(())
    });
}

#[test]
fn a_new_leader_continues_the_samples_and_ewma_and_keeps_the_running_cooldown() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let ns = "autoscale-leader";
        let names = ["lead-1", "lead-2", "lead-3"];
        let members = [0, 1, 2];
        let prefix = "/e2e-autoscale-leader/";
        const COOLDOWN: i64 = 20;
        const ALPHA: f64 = 0.3;
        let source = MetricSource::start(testbed, "leader").await?;
        source.set_and_wait("web", 500.0).await?;
        // The leader holds no agent streams, so killing it moves only leadership; the
        // agents stay connected to the other replica.
        let ttl = ["--election-ttl", "2s"];
        let leader = HubProcess::start(testbed, &HubOptions { replica: "hub-leader-a".into(), etcd_prefix: prefix.into(), extra_args: ttl.iter().map(|s| s.to_string()).collect() }).await?;
        until("hub-leader-a leads", Duration::from_secs(30), || async {
            Ok(match leader.metric(testbed.http(), "accord_hub_is_leader").await? {
                Some(1.0) => Check::Ready(()),
                other => Check::NotYet(format!("is_leader {other:?}")),
            })
        })
        .await?;
        let fed = Federation::start(testbed, "hub-leader-b", prefix, &ttl, &[("lead-1", 0), ("lead-2", 1), ("lead-3", 2)]).await?;
        ensure!(fed.hub.metric(testbed.http(), "accord_hub_is_leader").await? != Some(1.0), "the second replica leads");
        apply_deployments(testbed, &members, ns, "web").await?;
        let recorder = PolicyRecorder::start(testbed, ns, "web");
        let member_log = MemberRecorder::start(testbed, &members, ns, "web");
        let mut a = autoscaling(&source.prometheus.url, "web", 1, 60, 100.0);
        a["behavior"]["cooldownSeconds"] = COOLDOWN.into();
        a["dynamicThreshold"]["ewmaAlpha"] = ALPHA.into();
        apply_policy(testbed, ns, &policy("web", ns, "web", 5, &names, a, no_failover())).await?;
        recorder.wait_samples(6, Duration::from_secs(60)).await?;

        // A surge starts a cooldown.
        source.set_and_wait("web", 1500.0).await?;
        let up = recorder
            .wait("the scale-up to 15", FEW_POLLS, |h| operations(h).into_iter().find(|o| o.to == 15))
            .await?;
        // Two polls into the cooldown, kill -9 the leader; then the load doubles, which
        // the new leader must hold until the cooldown has passed.
        recorder.wait_samples(up.samples + 2, FEW_POLLS).await?;
        let last_before = recorder.last().context("no status")?;
        let ewma_before = last_before.autoscaling().and_then(|a| a.ewma).context("no EWMA")?;
        kill9(testbed, leader.id)?;
        let killed_ms = now_ms();
        source.set_and_wait("web", 3000.0).await?;
        ensure!(killed_ms - up.at_ms < COOLDOWN * 1000 - 5000, "the kill came too late in the cooldown to prove anything");

        let first_after = recorder
            .wait("a poll by the new leader", Duration::from_secs(30), |h| {
                h.iter().find(|s| s.seen_ms > killed_ms && s.samples() > last_before.samples()).cloned()
            })
            .await?;
        let gap = first_after.samples() - last_before.samples();
        ensure!(gap >= 1 && first_after.samples() > 6, "samples went from {} to {}", last_before.samples(), first_after.samples());
        let value = first_after.value().context("no value")?;
        let ewma = first_after.autoscaling().and_then(|a| a.ewma).context("no EWMA")?;
        println!("leader: samples {} → {}, EWMA {ewma_before:.1} → {ewma:.1} with value {value}", last_before.samples(), first_after.samples());
        if gap == 1 {
            let expected = ALPHA * value + (1.0 - ALPHA) * ewma_before;
            ensure!((ewma - expected).abs() <= 0.01 * expected, "EWMA {ewma:.1} after the failover, expected {expected:.1} from {ewma_before:.1} and {value}");
        }
        ensure!((ewma - value).abs() > 0.1 * (value - ewma_before).abs(), "EWMA {ewma:.1} jumped to the raw sample {value}: state was not continued");

        // No operation inside the cooldown; the doubled load scales once it has passed.
        let next = recorder
            .wait("the scale-up after the cooldown", Duration::from_secs(COOLDOWN as u64 + 20), |h| {
                operations(h).into_iter().find(|o| o.seen_ms > killed_ms)
            })
            .await?;
        ensure!(next.at_ms - up.at_ms >= COOLDOWN * 1000, "the new leader scaled {} ms after the previous operation, inside the {COOLDOWN} s cooldown", next.at_ms - up.at_ms);
        ensure!(recorder.snapshots().iter().any(|s| s.seen_ms > killed_ms && s.decision() == "HeldCooldown"), "the new leader never said HeldCooldown");
        ensure!(next.to == 30, "scaled to {} instead of 30", next.to);
        let id = next.scale_request_id.clone().context("no scaleRequestID")?;
        let status = recorder
            .wait("placements of 30", FEW_POLLS, |h| h.iter().rev().find(|s| s.status.scale_request_id.as_deref() == Some(id.as_str())).cloned())
            .await?;
        member_log.wait_for(&expected_members(&status.status, &clusters(&names)), &id, FEW_POLLS).await?;

        // Every scale request id on the members belongs to exactly one operation, and each
        // agent applied each id once.
        let ops = operations(&recorder.snapshots());
        let op_ids: Vec<_> = ops.iter().filter_map(|o| o.scale_request_id.clone()).collect();
        let unique: BTreeSet<_> = op_ids.iter().collect();
        ensure!(unique.len() == op_ids.len(), "two operations share a scale request id: {}", describe(&ops));
        let status_ids: BTreeSet<String> = recorder.snapshots().iter().filter_map(|s| s.status.scale_request_id.clone()).collect();
        for m in member_log.states() {
            ensure!(m.scale_request_id.is_empty() || status_ids.contains(&m.scale_request_id), "member {} ran scale request {} that no status named", m.member, m.scale_request_id);
        }
        for name in names {
            let log_file = testbed.process_info(fed.agents[name].process.context("running")?).log;
            let applied = |log: &str, id: &str| log.lines().filter(|l| l.contains("applied scale request") && l.contains(id)).count();
            // The member's Deployment changes before the agent logs that it did: wait for
            // the line, then count.
            let log = until(&format!("{name} logging every operation"), Duration::from_secs(10), || async {
                let log = std::fs::read_to_string(&log_file)?;
                Ok(if op_ids.iter().all(|id| applied(&log, id) > 0) {
                    Check::Ready(log)
                } else {
                    Check::NotYet(format!("operations {op_ids:?}"))
                })
            })
            .await?;
            for id in &op_ids {
                let n = applied(&log, id);
                ensure!(n == 1, "{name} applied scale request {id} {n} times");
            }
        }
        drop(fed);
        drop(leader);
        Ok(())
    });
}

#[test]
fn a_stopped_members_share_moves_and_the_autoscaled_total_is_kept() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let ns = "autoscale-failover";
        let names = ["afo-1", "afo-2", "afo-3"];
        let members = [0, 1, 2];
        let source = MetricSource::start(testbed, "failover").await?;
        source.set_and_wait("web", 300.0).await?;
        let mut fed = Federation::start(
            testbed,
            "hub-afo",
            "/e2e-autoscale-failover/",
            &[],
            &[("afo-1", 0), ("afo-2", 1), ("afo-3", 2)],
        )
        .await?;
        apply_deployments(testbed, &members, ns, "web").await?;
        let recorder = PolicyRecorder::start(testbed, ns, "web");
        let member_log = MemberRecorder::start(testbed, &members, ns, "web");
        let a = autoscaling(&source.prometheus.url, "web", 1, 60, 100.0);
        let failover = serde_json::json!({"enabled": true, "returnCooldownSeconds": 300});
        apply_policy(
            testbed,
            ns,
            &policy("web", ns, "web", 3, &names, a, failover),
        )
        .await?;
        recorder.wait_samples(5, Duration::from_secs(60)).await?;
        source.set_and_wait("web", 1200.0).await?;
        let up = recorder
            .wait("the scale-up to 12", FEW_POLLS, |h| {
                operations(h).into_iter().find(|o| o.to == 12)
            })
            .await?;
        let id = up.scale_request_id.context("no scaleRequestID")?;
        member_log
            .wait_for(&BTreeMap::from([(0, 4), (1, 4), (2, 4)]), &id, FEW_POLLS)
            .await?;

        // A member stops: its share moves to the others; the total stays 12. It is told to
        // keep the 4 it runs (never 0: a return must not kill running pods).
        fed.kill_agent("afo-3")?;
        let moved = |total: i32| {
            move |h: &[Snapshot]| {
                h.last()
                    .filter(|s| {
                        let available: i32 = s
                            .status
                            .placements
                            .iter()
                            .filter(|p| p.state != accord_crds::PlacementState::Unavailable)
                            .map(|p| p.desired_replicas)
                            .sum();
                        let gone = s.status.placements.iter().any(|p| {
                            p.cluster == "afo-3"
                                && p.state == accord_crds::PlacementState::Unavailable
                                && p.desired_replicas == 4
                        });
                        gone && available == total && s.effective() == Some(total)
                    })
                    .cloned()
            }
        };
        let after = recorder
            .wait(
                "afo-3's share on the others, total 12",
                Duration::from_secs(30),
                moved(12),
            )
            .await?;
        let id = after
            .status
            .scale_request_id
            .clone()
            .context("no scaleRequestID")?;
        member_log
            .wait_for(
                &expected_members(&after.status, &clusters(&names)),
                &id,
                FEW_POLLS,
            )
            .await?;
        println!(
            "failover: placements {:?}",
            after
                .status
                .placements
                .iter()
                .map(|p| (&p.cluster, p.desired_replicas, p.state))
                .collect::<Vec<_>>()
        );

        // Autoscaling goes on over the two that are left.
        source.set_and_wait("web", 1800.0).await?;
        let after = recorder
            .wait(
                "a total of 18 on the two available members",
                Duration::from_secs(30),
                moved(18),
            )
            .await?;
        let id = after
            .status
            .scale_request_id
            .clone()
            .context("no scaleRequestID")?;
        let expected = expected_members(&after.status, &clusters(&names));
        ensure!(
            expected.len() == 2 && expected.values().sum::<i32>() == 18,
            "{expected:?}"
        );
        member_log.wait_for(&expected, &id, FEW_POLLS).await?;
        drop(fed);
        Ok(())
    });
}
