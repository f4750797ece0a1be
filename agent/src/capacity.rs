//! Member capacity: every `--capacity-interval` the agent lists its cluster's Nodes and the
//! Pods that have not finished, and counts what the schedulable nodes can still hold —
//! allocatable CPU, memory and pods, and what is left of them once the pods' requests are
//! taken (`unrequested`). The engine sends a count to the hub (`MemberCapacity`) when it
//! differs from the last one sent beyond [`THRESHOLD_PERCENT`] of the allocatable amount
//! (or in the node count), so a steady cluster costs the hub no write and a changing one at
//! most one per interval; the hub shows it in `ManagedCluster.status.capacity`.
//!
//! A node counts when it is Ready, not cordoned (`spec.unschedulable`) and has no
//! `NoSchedule` or `NoExecute` taint: the places an ordinary pod can be scheduled. A pod
//! counts against the node it is bound to with Kubernetes' effective request (the larger of
//! its containers' sum and its largest init container, plus its overhead). Needs `list` on
//! Nodes and Pods, nothing more (the agent's ClusterRole).
//!
//! Each count also keeps its [`Room`] node by node for the scale enforcer, which estimates
//! from it how many replicas of a Deployment fit ([`Room::fits`]) for
//! `weighting: AvailableCapacity`.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use accord_common::runtime::{error_chain, unix_millis};
use accord_proto::v1::MemberCapacity;
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ListParams};
use tracing::{debug, warn};

use crate::engine::EngineHandle;

/// How often the agent counts by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
/// A change smaller than this share of the allocatable amount is not sent.
pub const THRESHOLD_PERCENT: i64 = 5;
/// Objects asked for per list page.
const PAGE: u32 = 500;

/// A resource amount in the unit the protocol carries: millicores, bytes or pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Amounts {
    cpu_millis: i64,
    memory_bytes: i64,
    pods: i64,
}

impl Amounts {
    fn of(list: Option<&BTreeMap<String, Quantity>>) -> Self {
        let get = |name: &str, scale: f64| {
            list.and_then(|l| l.get(name))
                .and_then(|q| accord_common::quantity::parse(&q.0))
                .map_or(0, |v| (v * scale).ceil() as i64)
        };
        Self {
            cpu_millis: get("cpu", 1000.0),
            memory_bytes: get("memory", 1.0),
            pods: get("pods", 1.0),
        }
    }

    fn max(self, other: Self) -> Self {
        Self {
            cpu_millis: self.cpu_millis.max(other.cpu_millis),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
            pods: self.pods.max(other.pods),
        }
    }

    fn plus(self, other: Self) -> Self {
        Self {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
            pods: self.pods.saturating_add(other.pods),
        }
    }

    /// `self` less `other`, never below zero.
    fn less(self, other: Self) -> Self {
        Self {
            cpu_millis: (self.cpu_millis - other.cpu_millis).max(0),
            memory_bytes: (self.memory_bytes - other.memory_bytes).max(0),
            pods: (self.pods - other.pods).max(0),
        }
    }
}

/// Whether an ordinary pod can be scheduled on `node`.
fn schedulable(node: &Node) -> bool {
    let spec = node.spec.as_ref();
    let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
    let repelled = spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute");
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    ready && !cordoned && !repelled
}

fn requests(r: Option<&ResourceRequirements>) -> Amounts {
    Amounts::of(r.and_then(|r| r.requests.as_ref()))
}

/// Kubernetes' effective request of `pod`, one pod included.
fn pod_request(pod: &Pod) -> Amounts {
    pod.spec.as_ref().map(spec_request).unwrap_or_default()
}

/// Kubernetes' effective request of a pod of `spec` (the larger of its containers' sum and
/// its largest init container, plus its overhead), one pod included.
pub fn spec_request(spec: &PodSpec) -> Amounts {
    let containers = spec
        .containers
        .iter()
        .map(|c| requests(c.resources.as_ref()))
        .fold(Amounts::default(), Amounts::plus);
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| requests(c.resources.as_ref()))
        .fold(Amounts::default(), Amounts::max);
    let overhead = Amounts::of(spec.overhead.as_ref());
    containers.max(init).plus(overhead).plus(Amounts {
        pods: 1,
        ..Amounts::default()
    })
}

/// The node `pod` is bound to, unless it has finished.
fn bound_node(pod: &Pod) -> Option<&str> {
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|_| !finished)
}

/// The requests of the unfinished `pods`, by the node each is bound to.
fn used_by_node(pods: &[Pod]) -> BTreeMap<&str, Amounts> {
    let mut used: BTreeMap<&str, Amounts> = BTreeMap::new();
    for pod in pods {
        if let Some(node) = bound_node(pod) {
            let entry = used.entry(node).or_default();
            *entry = entry.plus(pod_request(pod));
        }
    }
    used
}

/// What the schedulable `nodes` hold with `pods` bound to them ([`MemberCapacity`] without
/// its time).
pub fn count(nodes: &[Node], pods: &[Pod]) -> MemberCapacity {
    let used = used_by_node(pods);
    let mut allocatable = Amounts::default();
    let mut unrequested = Amounts::default();
    let mut counted = 0;
    for node in nodes.iter().filter(|n| schedulable(n)) {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let a = Amounts::of(node.status.as_ref().and_then(|s| s.allocatable.as_ref()));
        allocatable = allocatable.plus(a);
        unrequested = unrequested.plus(a.less(used.get(name).copied().unwrap_or_default()));
        counted += 1;
    }
    MemberCapacity {
        nodes: counted,
        allocatable_cpu_millis: allocatable.cpu_millis,
        allocatable_memory_bytes: allocatable.memory_bytes,
        allocatable_pods: allocatable.pods,
        unrequested_cpu_millis: unrequested.cpu_millis,
        unrequested_memory_bytes: unrequested.memory_bytes,
        unrequested_pods: unrequested.pods,
        counted_unix_millis: 0,
    }
}

/// What the last count saw, node by node, to estimate how many pods of a template fit
/// ([`Room::fits`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Room {
    /// Each schedulable node's unrequested amounts, by name.
    free: BTreeMap<String, Amounts>,
    /// The unfinished pods bound to schedulable nodes.
    pods: Vec<BoundPod>,
}

/// A pod as [`Room`] keeps it.
#[derive(Clone, Debug, PartialEq)]
struct BoundPod {
    namespace: String,
    labels: BTreeMap<String, String>,
    node: String,
    request: Amounts,
}

/// The last [`Room`] counted, shared by the counter (which writes it) and the scale
/// enforcer (which reads it); `None` before the first count.
pub type SharedRoom = Arc<RwLock<Option<Arc<Room>>>>;

impl Room {
    /// The schedulable `nodes` with `pods` bound to them, node by node.
    pub fn of(nodes: &[Node], pods: &[Pod]) -> Self {
        let used = used_by_node(pods);
        let free: BTreeMap<String, Amounts> = nodes
            .iter()
            .filter(|n| schedulable(n))
            .map(|node| {
                let name = node.metadata.name.clone().unwrap_or_default();
                let a = Amounts::of(node.status.as_ref().and_then(|s| s.allocatable.as_ref()));
                let free = a.less(used.get(name.as_str()).copied().unwrap_or_default());
                (name, free)
            })
            .collect();
        let pods = pods
            .iter()
            .filter_map(|pod| {
                let node = bound_node(pod).filter(|n| free.contains_key(*n))?;
                Some(BoundPod {
                    namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                    labels: pod.metadata.labels.clone().unwrap_or_default(),
                    node: node.to_owned(),
                    request: pod_request(pod),
                })
            })
            .collect();
        Self { free, pods }
    }

    /// How many pods requesting `per_pod` (an effective request, one pod included) the
    /// schedulable nodes hold, the pods of `namespace` that `selector` matches counted as
    /// room: on each node, the fewest of ⌊(unrequested + those pods' requests) / request⌋
    /// over the resources the pod requests, summed. Counting a workload's own pods as room
    /// makes the figure the same however many replicas it runs here, so a division by it
    /// does not chase its own moves.
    pub fn fits(&self, namespace: &str, selector: &LabelSelector, per_pod: Amounts) -> i64 {
        let mut room = self.free.clone();
        for pod in self.pods.iter().filter(|p| {
            p.namespace == namespace
                && accord_common::selector::matches(selector, &p.labels).unwrap_or(false)
        }) {
            if let Some(free) = room.get_mut(&pod.node) {
                *free = free.plus(pod.request);
            }
        }
        let per = |have: i64, need: i64| (need > 0).then(|| have.max(0) / need);
        room.values()
            .map(|free| {
                [
                    per(free.cpu_millis, per_pod.cpu_millis),
                    per(free.memory_bytes, per_pod.memory_bytes),
                    per(free.pods, per_pod.pods),
                ]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(0)
            })
            .sum()
    }
}

/// Whether `next` is worth sending after `sent`: the first count, another node count, or a
/// value that moved by more than [`THRESHOLD_PERCENT`] of its resource's allocatable
/// amount.
pub fn worth_sending(sent: Option<&MemberCapacity>, next: &MemberCapacity) -> bool {
    let Some(sent) = sent else {
        return true;
    };
    let moved = |before: i64, after: i64, allocatable: i64| {
        before != after
            && (before - after).unsigned_abs().saturating_mul(100)
                > allocatable
                    .unsigned_abs()
                    .saturating_mul(THRESHOLD_PERCENT as u64)
    };
    let cpu = sent.allocatable_cpu_millis.max(next.allocatable_cpu_millis);
    let memory = sent
        .allocatable_memory_bytes
        .max(next.allocatable_memory_bytes);
    let pods = sent.allocatable_pods.max(next.allocatable_pods);
    sent.nodes != next.nodes
        || moved(
            sent.allocatable_cpu_millis,
            next.allocatable_cpu_millis,
            cpu,
        )
        || moved(
            sent.allocatable_memory_bytes,
            next.allocatable_memory_bytes,
            memory,
        )
        || moved(sent.allocatable_pods, next.allocatable_pods, pods)
        || moved(
            sent.unrequested_cpu_millis,
            next.unrequested_cpu_millis,
            cpu,
        )
        || moved(
            sent.unrequested_memory_bytes,
            next.unrequested_memory_bytes,
            memory,
        )
        || moved(sent.unrequested_pods, next.unrequested_pods, pods)
}

/// Every object of `api`, page by page.
async fn list_all<K>(api: &Api<K>, params: ListParams) -> Result<Vec<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut params = params.limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// Counts the member behind `client` once: the totals, and the room node by node.
pub async fn count_once(client: &kube::Client) -> Result<(MemberCapacity, Room), kube::Error> {
    let nodes = list_all(&Api::<Node>::all(client.clone()), ListParams::default()).await?;
    let pods = list_all(
        &Api::<Pod>::all(client.clone()),
        ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed"),
    )
    .await?;
    Ok((count(&nodes, &pods), Room::of(&nodes, &pods)))
}

/// Counts every `interval` and passes each count worth sending to `engine`, for as long as
/// the task runs. A failed count is logged (a warning the first time in a row) and tried
/// again at the next interval.
pub async fn run(client: kube::Client, interval: Duration, room: SharedRoom, engine: EngineHandle) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent: Option<MemberCapacity> = None;
    let mut failing = false;
    loop {
        tick.tick().await;
        match count_once(&client).await {
            Ok((mut next, counted)) => {
                failing = false;
                *room
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(counted));
                if worth_sending(sent.as_ref(), &next) {
                    next.counted_unix_millis = unix_millis();
                    debug!(?next, "member capacity changed");
                    engine.capacity_changed(next).await;
                    sent = Some(next);
                }
            }
            Err(e) if !failing => {
                failing = true;
                warn!(error = %error_chain(&e), "could not count the member's capacity (list nodes and pods); trying again");
            }
            Err(e) => debug!(error = %error_chain(&e), "could not count the member's capacity"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cpu: &str, memory: &str, pods: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "status": {
                "allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }))
        .unwrap()
    }

    fn pod(node: &str, phase: &str, cpu: &str, memory: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": cpu, "memory": memory}}},
                    {"name": "b", "resources": {"requests": {"cpu": cpu}}},
                ],
                "initContainers": [
                    {"name": "i", "resources": {"requests": {"memory": "3Gi"}}},
                ],
            },
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    /// A pod of app `app` in namespace `ns` on `node`, requesting `cpu` and `memory`.
    fn app_pod(ns: &str, app: &str, node: &str, cpu: &str, memory: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": ns, "labels": {"app": app}},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "a", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
            },
            "status": {"phase": "Running"},
        }))
        .unwrap()
    }

    #[test]
    fn what_fits_is_counted_node_by_node_with_the_workloads_own_pods_as_room() {
        let nodes = [
            node("big", "4", "8Gi", "110"),
            node("small", "2", "2Gi", "3"),
        ];
        let web = serde_json::from_value::<LabelSelector>(
            serde_json::json!({"matchLabels": {"app": "web"}}),
        )
        .unwrap();
        let per_pod = spec_request(
            &serde_json::from_value(serde_json::json!({"containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}
            ]}))
            .unwrap(),
        );
        // Empty: big holds 8 (CPU and memory both 8), small 2 (memory), 10 in all.
        assert_eq!(Room::of(&nodes, &[]).fits("prod", &web, per_pod), 10);
        // Someone else's pod takes room; the workload's own pods do not.
        let pods = [
            app_pod("prod", "db", "big", "1", "1Gi"),
            app_pod("prod", "web", "big", "500m", "1Gi"),
            app_pod("prod", "web", "small", "500m", "1Gi"),
            app_pod("other", "web", "small", "500m", "512Mi"),
        ];
        let room = Room::of(&nodes, &pods);
        // big: cpu (4-1)/0.5 = 6, memory (8-1)/1 = 7 → 6; small: memory (2-0.5)/1 = 1,
        // pods (3-1)/1 = 2 → 1.
        assert_eq!(room.fits("prod", &web, per_pod), 7);
        // The same whether the workload runs 2 or 0 pods: its own count as room.
        let without_web = [pods[0].clone(), pods[3].clone()];
        assert_eq!(
            Room::of(&nodes, &without_web).fits("prod", &web, per_pod),
            7
        );
        // A template that requests nothing is bounded by the pods the nodes admit (the
        // others' pods taking one each).
        let bare = spec_request(&PodSpec::default());
        assert_eq!(room.fits("prod", &web, bare), (110 - 1) + (3 - 1));
    }

    #[test]
    fn schedulable_nodes_count_less_the_requests_of_unfinished_pods() {
        let mut cordoned = node("c", "8", "8Gi", "10");
        cordoned.spec =
            Some(serde_json::from_value(serde_json::json!({"unschedulable": true})).unwrap());
        let mut tainted = node("t", "8", "8Gi", "10");
        tainted.spec = Some(
            serde_json::from_value(
                serde_json::json!({"taints": [{"key": "k", "effect": "NoSchedule"}]}),
            )
            .unwrap(),
        );
        let mut not_ready = node("n", "8", "8Gi", "10");
        not_ready.status.as_mut().unwrap().conditions = None;
        let nodes = [
            node("a", "4", "8Gi", "110"),
            node("b", "3500m", "2Gi", "10"),
            cordoned,
            tainted,
            not_ready,
        ];
        let pods = [
            // 2 × 500m CPU; memory: the init container's 3Gi beats the containers' 1Gi.
            pod("a", "Running", "500m", "1Gi"),
            pod("a", "Succeeded", "1", "1Gi"),
            // More than the node has: nothing left, never below zero.
            pod("b", "Pending", "2", "4Gi"),
            pod("c", "Running", "1", "1Gi"),
        ];
        let c = count(&nodes, &pods);
        assert_eq!(c.nodes, 2);
        assert_eq!(c.allocatable_cpu_millis, 7500);
        assert_eq!(c.allocatable_memory_bytes, 10 << 30);
        assert_eq!(c.allocatable_pods, 120);
        assert_eq!(c.unrequested_cpu_millis, 3000);
        assert_eq!(c.unrequested_memory_bytes, 5 << 30);
        assert_eq!(c.unrequested_pods, 109 + 9);
    }

    #[test]
    fn small_changes_are_not_sent_and_large_ones_are() {
        let nodes = [node("a", "10", "10Gi", "100")];
        let before = count(&nodes, &[]);
        assert!(worth_sending(None, &before));
        assert!(!worth_sending(Some(&before), &before));
        let tiny = count(
            &nodes,
            &[serde_json::from_value(serde_json::json!({
                "spec": {"nodeName": "a", "containers": [{"name": "x", "resources": {"requests": {"cpu": "100m"}}}]},
            }))
            .unwrap()],
        );
        assert!(
            !worth_sending(Some(&before), &tiny),
            "1 % of the CPU, 1 % of the pods"
        );
        let big = count(
            &nodes,
            &[serde_json::from_value(serde_json::json!({
                "spec": {"nodeName": "a", "containers": [{"name": "x", "resources": {"requests": {"cpu": "1"}}}]},
            }))
            .unwrap()],
        );
        assert!(worth_sending(Some(&before), &big), "10 % of the CPU");
        let two_nodes = count(
            &[
                node("a", "10", "10Gi", "100"),
                node("b", "100m", "1Ki", "1"),
            ],
            &[],
        );
        assert!(worth_sending(Some(&before), &two_nodes), "another node");
    }
}
