//! `CrossClusterScalePolicy`: one global replica count divided by weight across clusters.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::{bounds, messages};

/// CEL rule: a DNS-1123 label, as cluster names are.
pub(crate) const CLUSTER_NAME_RULE: &str = "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')";
/// CEL rule: every entry of a list of cluster names is a DNS-1123 label.
pub(crate) const ALL_CLUSTER_NAMES_RULE: &str =
    "self.all(c, c.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))";

/// Holds a global replica count for one workload and divides it across member clusters by
/// weight (Webster/Sainte-Laguë: exact sum, stable under scale-up), moving shares away from
/// clusters that become unavailable when failover is on.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "accord.io",
    version = "v1beta1",
    kind = "CrossClusterScalePolicy",
    namespaced,
    shortname = "ccsp",
    category = "accord",
    status = "CrossClusterScalePolicyStatus",
    doc = "Divides one global replica count for a workload across member clusters by weight, with failover and optional metric-driven autoscaling.",
    printcolumn(name = "Target", type_ = "string", json_path = ".spec.targetRef.name"),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".spec.desiredReplicas"
    ),
    printcolumn(
        name = "Ready-Replicas",
        type_ = "integer",
        json_path = ".status.readyReplicas"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("has(self.placement) || (has(self.distribution) && size(self.distribution) > 0)").message(messages::DISTRIBUTION_NOT_EMPTY))]
#[x_kube(validation = Rule::new("!has(self.weighting) || self.weighting != 'AvailableCapacity' || !has(self.placement) || !has(self.placement.spread) || !has(self.placement.spread.maxSkew)").message(messages::WEIGHTING_NO_MAX_SKEW))]
#[serde(rename_all = "camelCase")]
pub struct CrossClusterScalePolicySpec {
    /// The workload to scale. The same name is used in every member cluster; the namespace
    /// comes from each distribution entry (default: this policy's namespace).
    pub target_ref: TargetRef,

    /// Global replica count, divided across the clusters in `distribution`. With
    /// `autoscaling` set, the hub changes the effective value between its min and max.
    /// 0 to 1,000,000.
    #[schemars(range(min = 0, max = bounds::MAX_REPLICAS))]
    #[x_kube(
        validation = Rule::new("self >= 0").message(messages::DESIRED_NON_NEGATIVE),
        validation = Rule::new(format!("self <= {}", bounds::MAX_REPLICAS)).message(messages::DESIRED_MAX)
    )]
    pub desired_replicas: i32,

    /// The clusters to run the workload in: `clusters` (by name) or `clusterSelector` (by
    /// ManagedCluster labels). Without it, the clusters are those `distribution` lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<crate::ClusterPlacement>,

    /// Each cluster's weight (and optional replica bounds and namespace). Shares are
    /// proportional to weight, clamped to each entry's minReplicas/maxReplicas, and always
    /// add up to desiredReplicas when the bounds allow it. Without `placement` these are the
    /// clusters; with it, an entry applies to a placed cluster of its name and a placed
    /// cluster without an entry has weight 1 (entries may then be left out altogether).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    #[x_kube(
        validation = Rule::new("self.all(a, self.exists_one(b, b.cluster == a.cluster))").message(messages::DISTRIBUTION_UNIQUE)
    )]
    pub distribution: Vec<ClusterShare>,

    /// What the shares are proportional to. `Static` (the default): each cluster's
    /// `weight`. `AvailableCapacity`: the replicas of the target's pod template that fit in
    /// the cluster now, as its agent estimates them from its nodes' unrequested CPU, memory
    /// and pods (the target's own pods counted as room, so moving replicas does not change
    /// the estimate); weights break ties. No cluster gets more than fits while another has
    /// room; once every cluster is full the rest is divided by weight. Until every cluster
    /// has reported an estimate the division is by weight (the ScaleDecision Event says
    /// so). Not with `placement.spread.maxSkew`.
    #[serde(default, skip_serializing_if = "Weighting::is_static")]
    pub weighting: Weighting,

    /// What happens when a cluster becomes unavailable.
    #[serde(default)]
    pub failover: Failover,

    /// Optional metric-driven autoscaling of the global count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,
}

impl CrossClusterScalePolicySpec {
    /// The clusters the workload runs in, each with its entry: `distribution` without a
    /// placement; with one, every cluster in `placed` (the placement's clusters, resolved
    /// by the caller) with its `distribution` entry or weight 1.
    pub fn shares_in(&self, placed: Option<&[String]>) -> Vec<ClusterShare> {
        let Some(placed) = placed.filter(|_| self.placement.is_some()) else {
            return self.distribution.clone();
        };
        placed
            .iter()
            .map(|cluster| {
                self.distribution
                    .iter()
                    .find(|d| &d.cluster == cluster)
                    .cloned()
                    .unwrap_or_else(|| ClusterShare {
                        cluster: cluster.clone(),
                        namespace: None,
                        weight: 1,
                        min_replicas: None,
                        max_replicas: None,
                    })
            })
            .collect()
    }
}

/// Identifies the workload a policy scales.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("self.apiVersion == 'apps/v1' && self.kind == 'Deployment'").message(messages::TARGET_KIND))]
#[serde(rename_all = "camelCase")]
pub struct TargetRef {
    /// API version of the workload; `apps/v1`.
    #[serde(default = "default_api_version")]
    pub api_version: String,
    /// Kind of the workload; `Deployment`.
    #[serde(default = "default_kind")]
    pub kind: String,
    /// Name of the workload, the same in every member cluster.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

fn default_api_version() -> String {
    "apps/v1".into()
}

fn default_kind() -> String {
    "Deployment".into()
}

/// One cluster's entry in a distribution.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas").message(messages::MIN_LE_MAX))]
#[serde(rename_all = "camelCase")]
pub struct ClusterShare {
    /// Name of the ManagedCluster.
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new(CLUSTER_NAME_RULE).message(messages::CLUSTER_NAME))]
    pub cluster: String,
    /// Namespace of the workload in that cluster (default: the policy's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
    /// Relative weight; shares are proportional to it. 1 to 10,000 (weights in basis
    /// points fit).
    #[schemars(range(min = 1, max = bounds::MAX_WEIGHT))]
    #[x_kube(
        validation = Rule::new("self > 0").message(messages::WEIGHT_POSITIVE),
        validation = Rule::new(format!("self <= {}", bounds::MAX_WEIGHT)).message(messages::WEIGHT_MAX)
    )]
    pub weight: i32,
    /// Fewest replicas this cluster runs while it is eligible. 0 to 1,000,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_REPLICAS))]
    #[x_kube(
        validation = Rule::new("self >= 0").message(messages::REPLICAS_NON_NEGATIVE),
        validation = Rule::new(format!("self <= {}", bounds::MAX_REPLICAS)).message(messages::REPLICAS_MAX)
    )]
    pub min_replicas: Option<i32>,
    /// Most replicas this cluster runs, even when others fail over to it. 0 to 1,000,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_REPLICAS))]
    #[x_kube(
        validation = Rule::new("self >= 0").message(messages::REPLICAS_NON_NEGATIVE),
        validation = Rule::new(format!("self <= {}", bounds::MAX_REPLICAS)).message(messages::REPLICAS_MAX)
    )]
    pub max_replicas: Option<i32>,
}

/// What a CrossClusterScalePolicy's shares are proportional to.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum Weighting {
    /// Each cluster's `weight`.
    #[default]
    Static,
    /// The replicas that fit in each cluster, as its agent estimates them.
    AvailableCapacity,
}

impl Weighting {
    /// Whether this is the default, [`Weighting::Static`].
    pub fn is_static(&self) -> bool {
        *self == Weighting::Static
    }
}

/// Failover behaviour.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Failover {
    /// When true (the default), the share of a cluster that becomes unavailable or
    /// unschedulable is divided among the remaining clusters.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Seconds a returning cluster must stay available before its share moves back, so a
    /// flapping cluster does not move replicas back and forth. Default 30; 0 to 86,400
    /// (one day).
    #[serde(default = "default_return_cooldown")]
    #[schemars(range(min = 0, max = bounds::MAX_SECONDS))]
    #[x_kube(
        validation = Rule::new("self >= 0").message(messages::NON_NEGATIVE_NUMBER),
        validation = Rule::new(format!("self <= {}", bounds::MAX_SECONDS)).message(messages::SECONDS_MAX)
    )]
    pub return_cooldown_seconds: i32,
}

impl Default for Failover {
    fn default() -> Self {
        Self {
            enabled: true,
            return_cooldown_seconds: default_return_cooldown(),
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_return_cooldown() -> i32 {
    30
}

/// Metric-driven autoscaling of the global replica count.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("self.minReplicas <= self.maxReplicas").message(messages::MIN_LE_MAX))]
#[serde(rename_all = "camelCase")]
pub struct Autoscaling {
    /// Lowest global count autoscaling may set. 0 to 1,000,000.
    #[schemars(range(min = 0, max = bounds::MAX_REPLICAS))]
    #[x_kube(
        validation = Rule::new("self >= 0").message(messages::REPLICAS_NON_NEGATIVE),
        validation = Rule::new(format!("self <= {}", bounds::MAX_REPLICAS)).message(messages::REPLICAS_MAX)
    )]
    pub min_replicas: i32,
    /// Highest global count autoscaling may set. 0 to 1,000,000.
    #[schemars(range(min = 0, max = bounds::MAX_REPLICAS))]
    #[x_kube(
        validation = Rule::new("self >= 0").message(messages::REPLICAS_NON_NEGATIVE),
        validation = Rule::new(format!("self <= {}", bounds::MAX_REPLICAS)).message(messages::REPLICAS_MAX)
    )]
    pub max_replicas: i32,
    /// The metric that drives the count.
    pub metric: ScaleMetric,
    /// How the scale-up threshold adapts to the metric's recent history.
    #[serde(default)]
    pub dynamic_threshold: DynamicThreshold,
    /// Debounce, cooldown, rate limit and circuit breaker.
    #[serde(default)]
    pub behavior: ScaleBehavior,
}

/// A metric read from Prometheus.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleMetric {
    /// Prometheus to query.
    pub prometheus: PrometheusQuery,
    /// Metric value one replica should carry: desired = ceil(value / targetPerReplica),
    /// unless the value is within `tolerancePercent` of what the current count carries
    /// (then the count holds).
    #[x_kube(validation = Rule::new("self > 0.0").message(messages::TARGET_PER_REPLICA_POSITIVE))]
    pub target_per_replica: f64,
    /// Seconds between two queries. 1 to 3,600; default 15. Each query times out after
    /// the poll interval or 10 s, whichever is shorter.
    #[serde(default = "default_poll_seconds")]
    #[schemars(range(min = 1, max = bounds::MAX_POLL_SECONDS))]
    #[x_kube(
        validation = Rule::new("self >= 1").message(messages::POSITIVE_INTEGER),
        validation = Rule::new(format!("self <= {}", bounds::MAX_POLL_SECONDS)).message(messages::POLL_SECONDS_MAX)
    )]
    pub poll_seconds: i32,
    /// How far the value may be from count × targetPerReplica, in percent, before it asks
    /// for another count: within it the recommendation is the current count, so noise
    /// around a steady load never moves replicas (the HorizontalPodAutoscaler's tolerance,
    /// 0.1, is 10 here). 0 to 50; default 10.
    #[serde(default = "default_tolerance_percent")]
    #[schemars(range(min = 0, max = bounds::MAX_TOLERANCE_PERCENT))]
    #[x_kube(
        validation = Rule::new("self >= 0").message(messages::NON_NEGATIVE_NUMBER),
        validation = Rule::new(format!("self <= {}", bounds::MAX_TOLERANCE_PERCENT)).message(messages::TOLERANCE_PERCENT_MAX)
    )]
    pub tolerance_percent: i32,
}

fn default_poll_seconds() -> i32 {
    15
}

fn default_tolerance_percent() -> i32 {
    10
}

/// A PromQL query against one Prometheus.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusQuery {
    /// Base URL of the Prometheus HTTP API, e.g. `http://prometheus.monitoring:9090`.
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new("self.startsWith('http://') || self.startsWith('https://')").message(messages::HTTP_URL))]
    pub url: String,
    /// Instant query returning one sample, e.g. `sum(rate(http_requests_total[2m]))`.
    #[schemars(length(max = 4096))]
    #[x_kube(validation = Rule::new("size(self) > 0").message(messages::QUERY_NOT_EMPTY))]
    pub query: String,
}

/// Dynamic threshold = max(EWMA × floorRatio, EWMA + stddevFactor × σ) over the window;
/// a scale-up fires only past it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DynamicThreshold {
    /// Smoothing factor of the exponentially weighted moving average, in (0, 1].
    #[serde(default = "default_ewma_alpha")]
    #[schemars(range(min = 0.0, max = 1.0))]
    #[x_kube(validation = Rule::new("self > 0.0 && self <= 1.0").message(messages::EWMA_ALPHA_RANGE))]
    pub ewma_alpha: f64,
    /// Length of the history window, in seconds. 1 to 86,400 (one day); default 1800.
    #[serde(default = "default_window_seconds")]
    #[schemars(range(min = 1, max = bounds::MAX_SECONDS))]
    #[x_kube(
        validation = Rule::new("self >= 1").message(messages::POSITIVE_INTEGER),
        validation = Rule::new(format!("self <= {}", bounds::MAX_SECONDS)).message(messages::SECONDS_MAX)
    )]
    pub window_seconds: i32,
    /// How many standard deviations above the average a value must be to count as a rise.
    /// 0 to 10; default 2.
    #[serde(default = "default_stddev_factor")]
    #[schemars(range(min = 0.0, max = bounds::MAX_FACTOR))]
    #[x_kube(
        validation = Rule::new("self >= 0.0").message(messages::NON_NEGATIVE_NUMBER),
        validation = Rule::new(format!("self <= {:.1}", bounds::MAX_FACTOR)).message(messages::FACTOR_MAX)
    )]
    pub stddev_factor: f64,
    /// The threshold never falls below EWMA × floorRatio. 0 to 10; default 0.8.
    #[serde(default = "default_floor_ratio")]
    #[schemars(range(min = 0.0, max = bounds::MAX_FACTOR))]
    #[x_kube(
        validation = Rule::new("self >= 0.0").message(messages::NON_NEGATIVE_NUMBER),
        validation = Rule::new(format!("self <= {:.1}", bounds::MAX_FACTOR)).message(messages::FACTOR_MAX)
    )]
    pub floor_ratio: f64,
}

impl Default for DynamicThreshold {
    fn default() -> Self {
        Self {
            ewma_alpha: default_ewma_alpha(),
            window_seconds: default_window_seconds(),
            stddev_factor: default_stddev_factor(),
            floor_ratio: default_floor_ratio(),
        }
    }
}

fn default_ewma_alpha() -> f64 {
    0.3
}
fn default_window_seconds() -> i32 {
    1800
}
fn default_stddev_factor() -> f64 {
    2.0
}
fn default_floor_ratio() -> f64 {
    0.8
}

/// Guards against flapping and runaway scaling.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleBehavior {
    /// Changes closer together than this, in milliseconds, are merged into one decision.
    /// 0 to 600,000 (ten minutes); default 500.
    #[serde(default = "default_debounce_millis")]
    #[schemars(range(min = 0, max = bounds::MAX_DEBOUNCE_MILLIS))]
    #[x_kube(
        validation = Rule::new("self >= 0").message(messages::NON_NEGATIVE_NUMBER),
        validation = Rule::new(format!("self <= {}", bounds::MAX_DEBOUNCE_MILLIS)).message(messages::DEBOUNCE_MAX)
    )]
    pub debounce_millis: i64,
    /// After a scale, no other scale happens for this many seconds. 0 to 86,400 (one day);
    /// default 60.
    #[serde(default = "default_cooldown_seconds")]
    #[schemars(range(min = 0, max = bounds::MAX_SECONDS))]
    #[x_kube(
        validation = Rule::new("self >= 0").message(messages::NON_NEGATIVE_NUMBER),
        validation = Rule::new(format!("self <= {}", bounds::MAX_SECONDS)).message(messages::SECONDS_MAX)
    )]
    pub cooldown_seconds: i32,
    /// Token bucket: at most this many scale operations per minute. 1 to 60; default 3.
    #[serde(default = "default_max_ops")]
    #[schemars(range(min = 1, max = bounds::MAX_SCALE_OPERATIONS_PER_MINUTE))]
    #[x_kube(
        validation = Rule::new("self >= 1").message(messages::POSITIVE_INTEGER),
        validation = Rule::new(format!("self <= {}", bounds::MAX_SCALE_OPERATIONS_PER_MINUTE)).message(messages::SCALE_OPERATIONS_MAX)
    )]
    pub max_scale_operations_per_minute: i32,
    /// Consecutive failures (metric query or apply) that open the circuit breaker. 1 to
    /// 100; default 3.
    #[serde(default = "default_failure_threshold")]
    #[schemars(range(min = 1, max = bounds::MAX_FAILURE_THRESHOLD))]
    #[x_kube(
        validation = Rule::new("self >= 1").message(messages::POSITIVE_INTEGER),
        validation = Rule::new(format!("self <= {}", bounds::MAX_FAILURE_THRESHOLD)).message(messages::FAILURE_THRESHOLD_MAX)
    )]
    pub failure_threshold: i32,
    /// Seconds an open breaker blocks scaling before one trial decision. 1 to 86,400 (one
    /// day); default 60.
    #[serde(default = "default_breaker_open_seconds")]
    #[schemars(range(min = 1, max = bounds::MAX_SECONDS))]
    #[x_kube(
        validation = Rule::new("self >= 1").message(messages::POSITIVE_INTEGER),
        validation = Rule::new(format!("self <= {}", bounds::MAX_SECONDS)).message(messages::SECONDS_MAX)
    )]
    pub breaker_open_seconds: i32,
}

impl Default for ScaleBehavior {
    fn default() -> Self {
        Self {
            debounce_millis: default_debounce_millis(),
            cooldown_seconds: default_cooldown_seconds(),
            max_scale_operations_per_minute: default_max_ops(),
            failure_threshold: default_failure_threshold(),
            breaker_open_seconds: default_breaker_open_seconds(),
        }
    }
}

fn default_debounce_millis() -> i64 {
    500
}
fn default_cooldown_seconds() -> i32 {
    60
}
fn default_max_ops() -> i32 {
    3
}
fn default_failure_threshold() -> i32 {
    3
}
fn default_breaker_open_seconds() -> i32 {
    60
}

/// Observed state of a scale policy, aggregated by the hub from its agents' reports.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CrossClusterScalePolicyStatus {
    /// Generation of the spec this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_GENERATION))]
    pub observed_generation: Option<i64>,
    /// Global count currently being divided (differs from spec with autoscaling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub desired_replicas: Option<i32>,
    /// Sum of ready replicas over all placements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub ready_replicas: Option<i32>,
    /// Id of the current scaling decision, stamped on every member object as annotation
    /// `accord.io/scale-request-id`.
    #[serde(
        default,
        rename = "scaleRequestID",
        skip_serializing_if = "Option::is_none"
    )]
    pub scale_request_id: Option<String>,
    /// When the current scaling decision was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
    /// Each cluster's share and what its agent last reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<Placement>,
    /// Every placement counted by state, when there are more than the hub lists in full
    /// (`--status-placements-threshold`, default 100): `placements` then shows only those
    /// not `Synced`, up to `--status-placements-listed`; `accord-hub placements` shows all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<crate::PlacementSummary>,
    /// How many clusters were considered, where the object is placed and why the others
    /// are not: counts by reason, at most 20 clusters named per reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<crate::SelectionSummary>,
    /// Trace id (32 hex) of the latest change's trace: its decision, its record write and
    /// every member's apply, when the hub exports traces (`--otlp-endpoint`). Look it up in
    /// the trace backend; absent when the latest change was not traced.
    #[serde(default, rename = "traceID", skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Autoscaling state, when autoscaling is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingStatus>,
    /// `Ready` (every placement Synced and ready), `Progressing` (a change is rolling
    /// out), `Degraded` (a placement is in Conflict, Error, TargetNotFound or Unavailable).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "bounds::conditions")]
    pub conditions: Vec<Condition>,
}

/// One cluster's share of a scale policy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Member cluster.
    pub cluster: String,
    /// Namespace of the workload there.
    pub namespace: String,
    /// Replicas assigned to this cluster.
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub desired_replicas: i32,
    /// Ready replicas the agent last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub ready_replicas: Option<i32>,
    /// Pending, Synced, TargetNotFound, Conflict, Unavailable or Error.
    pub state: PlacementState,
    /// Detail for the state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// resourceVersion of the member object when last observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_resource_version: Option<String>,
    /// generation of the member object when last observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_GENERATION))]
    pub observed_generation: Option<i64>,
    /// When the agent last reported this placement in sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<Time>,
}

/// State of one placement.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash,
)]
pub enum PlacementState {
    /// Assigned, not yet confirmed by the agent.
    #[default]
    Pending,
    /// The member object has the assigned replicas.
    Synced,
    /// The target workload does not exist in that cluster.
    TargetNotFound,
    /// Something else controls the replicas there (e.g. a HorizontalPodAutoscaler).
    Conflict,
    /// The cluster is unavailable; values are as last seen.
    Unavailable,
    /// Applying failed; see message.
    Error,
}

impl PlacementState {
    /// Parses a state name as agents report it.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "Pending" => Self::Pending,
            "Synced" => Self::Synced,
            "TargetNotFound" => Self::TargetNotFound,
            "Conflict" => Self::Conflict,
            "Unavailable" => Self::Unavailable,
            "Error" => Self::Error,
            _ => return None,
        })
    }

    /// The state's name as it appears in status and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Synced => "Synced",
            Self::TargetNotFound => "TargetNotFound",
            Self::Conflict => "Conflict",
            Self::Unavailable => "Unavailable",
            Self::Error => "Error",
        }
    }
}

impl std::fmt::Display for PlacementState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What autoscaling saw and decided last. Written by the hub only; the effective count it
/// holds is what the placements divide (`spec` is never written).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalingStatus {
    /// Last metric value read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_metric_value: Option<f64>,
    /// When the last query was answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sample_time: Option<Time>,
    /// Queries answered since autoscaling started (continues across hub restarts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_GENERATION))]
    pub samples: Option<i64>,
    /// Exponentially weighted moving average of the metric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ewma: Option<f64>,
    /// Standard deviation of the metric over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stddev: Option<f64>,
    /// Current dynamic threshold: max(EWMA × floorRatio, EWMA + stddevFactor × σ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// The count the last value asks for: the current count while the value is within
    /// `tolerancePercent` of count × targetPerReplica, else ceil(value / targetPerReplica);
    /// clamped to minReplicas..maxReplicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub recommendation: Option<i32>,
    /// The global count autoscaling holds; the placements divide it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub effective_desired_replicas: Option<i32>,
    /// When autoscaling last changed the count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
    /// Last decision: ScaledUp, ScaledDown, Held, HeldDebounce, HeldCooldown,
    /// HeldRateLimit, MetricFailed or BreakerOpen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_decision: Option<String>,
    /// Why, as a code: Surge, Trend, SustainedLow, Steady, Rising, Falling, AtLimit,
    /// QueryFailed, NotConverged, BreakerOpen, ProbeFailed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why, with the numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the last decision was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_decision_time: Option<Time>,
    /// Circuit breaker: Closed, Open or HalfOpen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker_state: Option<String>,
    /// Consecutive failed queries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub consecutive_failures: Option<i32>,
    /// Consecutive scale operations that did not converge in time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub unconverged_operations: Option<i32>,
    /// Scale operations still allowed in the current minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub tokens_left: Option<i32>,
}

crate::placed_status! {
    CrossClusterScalePolicy => CrossClusterScalePolicyStatus, Placement;
}
