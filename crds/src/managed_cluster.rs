//! `ManagedCluster`: one per member cluster, created when its agent registers.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::{bounds, messages};

/// A member cluster of the federation. Created when the cluster's agent registers with a
/// bootstrap token (or beforehand by an administrator); placed objects select clusters by name or
/// by this object's metadata labels.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "accord.io",
    version = "v1beta1",
    kind = "ManagedCluster",
    shortname = "mcl",
    category = "accord",
    status = "ManagedClusterStatus",
    doc = "A member cluster of the Accord federation. Its agent keeps one mTLS stream to the hub; status shows whether it joined and is available.",
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Available")].status"#
    ),
    printcolumn(
        name = "Joined",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Joined")].status"#
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.kubernetesVersion"
    ),
    printcolumn(
        name = "Last-Heartbeat",
        type_ = "date",
        json_path = ".status.lastHeartbeatTime"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterSpec {
    /// Default share hint for placed objects that select this cluster by label rather than
    /// listing it with a weight. 1 to 10,000; 1 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = bounds::MAX_WEIGHT))]
    #[x_kube(
        validation = Rule::new("self > 0").message(messages::WEIGHT_POSITIVE),
        validation = Rule::new(format!("self <= {}", bounds::MAX_WEIGHT)).message(messages::WEIGHT_MAX)
    )]
    pub weight: Option<i32>,

    /// Drain switch: when true the cluster receives no new placement of any kind (what it
    /// holds stays), and a CrossClusterScalePolicy's share moves to the other clusters,
    /// while its agent stays connected.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unschedulable: bool,

    /// Taints keep placements away from this cluster unless the object's
    /// `spec.placement.tolerations` tolerate them: NoSchedule (no new placement),
    /// NoExecute (existing ones leave too), PreferNoSchedule (replicas only when the other
    /// clusters have no room). The hub sets and clears two of its own from what it
    /// observes: `accord.io/unreachable:NoExecute` (no heartbeat from the agent) and
    /// `accord.io/api-server-unavailable:NoExecute` (the agent reports its API server
    /// down); an object that names neither in its tolerations tolerates them, except a
    /// CrossClusterScalePolicy with failover, which tolerates `accord.io/unreachable` for
    /// 0 seconds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub taints: Vec<ClusterTaint>,

    /// Base URL at which the hub's global Prometheus reaches this cluster's federation
    /// Prometheus (it scrapes `<federationEndpoint>/federate`), e.g.
    /// `https://prometheus-federation.us-central1.example.com`. Clusters without it are
    /// left out of every PrometheusFederation's global tier (its status says which).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new("self.startsWith('http://') || self.startsWith('https://')").message(messages::FEDERATION_ENDPOINT))]
    pub federation_endpoint: Option<String>,
}

/// The taint the hub puts on a cluster whose agent it has no heartbeat from (its
/// `Available` condition is not `True`).
pub const UNREACHABLE_TAINT: &str = "accord.io/unreachable";
/// The taint the hub puts on a cluster whose agent reports its member API server down (its
/// `APIServerAvailable` condition is `False`).
pub const API_SERVER_UNAVAILABLE_TAINT: &str = "accord.io/api-server-unavailable";

/// Whether `key` is one of the taints the hub sets and clears itself.
pub fn is_hub_taint(key: &str) -> bool {
    key == UNREACHABLE_TAINT || key == API_SERVER_UNAVAILABLE_TAINT
}

/// A taint on a member cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTaint {
    /// Taint key, e.g. `accord.io/maintenance`.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
    /// Optional taint value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub value: Option<String>,
    /// What the taint does to placements: NoSchedule (no new shares), PreferNoSchedule
    /// (avoid when possible) or NoExecute (move existing shares away).
    pub effect: TaintEffect,
}

/// Effect of a cluster taint.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaintEffect {
    /// No new placements.
    NoSchedule,
    /// Avoid when another cluster is eligible.
    PreferNoSchedule,
    /// Move existing placements away.
    NoExecute,
}

/// Observed state of a member cluster, written by the hub's leader.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterStatus {
    /// `Joined` (registered with a valid token), `Available` (agent connected and
    /// heartbeating within the timeout), `Degraded` (agent reports a problem).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "bounds::conditions")]
    pub conditions: Vec<Condition>,
    /// Version of the agent, as it reported in its Hello.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// Kubernetes version of the member cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// When the hub last recorded the agent heartbeating over its stream. Refreshed every
    /// 60 s while the cluster stays available (longer in fleets past 300 clusters, to keep
    /// refreshes under 5 writes a second); liveness itself is the `Available` condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,
    /// Hub replica that holds the cluster's stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub_replica: Option<String>,
    /// What the cluster's schedulable nodes (Ready, not cordoned, without NoSchedule or
    /// NoExecute taints) hold, as the agent last counted them: `nodes`,
    /// `allocatable.cpu`, `allocatable.memory`, `allocatable.pods`, and what the requests of
    /// the pods bound to them leave (`unrequested.cpu`, `unrequested.memory`,
    /// `unrequested.pods`), as Kubernetes quantities. Sent when a value moves by more than
    /// 5 % of its allocatable amount, at most once per the agent's `--capacity-interval`
    /// (default 60 s); the last count stays while the agent is away.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, String>,
}

impl ManagedCluster {
    /// Default share hint when `spec.weight` is unset.
    pub const DEFAULT_WEIGHT: i32 = 1;

    /// The cluster's share hint.
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(Self::DEFAULT_WEIGHT)
    }
}
