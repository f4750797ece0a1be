//! `PrometheusFederation`: per-tenant federation config rendered, applied and reloaded in
//! each selected member cluster, plus an optional global tier on the hub.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::{bounds, messages};

/// CEL rule: a duration in the units both Prometheus and CEL understand.
const DURATION_RULE: &str = "self.matches('^([0-9]+(ms|s|m|h))+$')";

/// Federates tenants' Prometheus servers: in each selected member cluster the agent
/// renders one `/federate` job per tenant Prometheus (Services labelled
/// `accord.io/federation-source: "true"` in the tenant namespaces) into ConfigMap
/// `prometheus-federation` and reloads the federation Prometheus; with `global.enabled` the
/// hub renders a global tier that federates the members.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "accord.io",
    version = "v1beta1",
    kind = "PrometheusFederation",
    namespaced,
    shortname = "pfed",
    category = "accord",
    status = "PrometheusFederationStatus",
    doc = "Per-tenant Prometheus federation rendered and reloaded in each selected member cluster, with an optional global tier on the hub.",
    printcolumn(
        name = "Interval",
        type_ = "string",
        json_path = ".spec.scrapeInterval"
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
#[x_kube(
    // Guarded so that a malformed duration is reported once, by its own field's rule.
    validation = Rule::new(format!("!{interval} || !{timeout} || duration(self.scrapeTimeout) <= duration(self.scrapeInterval)",
        interval = DURATION_RULE.replace("self.", "self.scrapeInterval."),
        timeout = DURATION_RULE.replace("self.", "self.scrapeTimeout."))).message(messages::TIMEOUT_LE_INTERVAL)
)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusFederationSpec {
    /// The member clusters it goes to: `clusters` (by name) or `clusterSelector` (by
    /// ManagedCluster labels).
    pub placement: crate::ClusterPlacement,
    /// How a change reaches the clusters: every cluster at once (unset, `All`) or step by
    /// step with health checks and automatic rollback (`Progressive`,
    /// `ProgressivePerGroup`). Changing only this field is not a new revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::Rollout>,
    /// Which tenants' Prometheus servers are federated.
    pub tenant_selector: TenantSelector,
    /// Series selectors passed as `match[]` to `/federate`; at least one. Each must be a
    /// series selector (`name`, `name{...}` or `{...}` with `=`, `!=`, `=~`, `!~` matchers
    /// on quoted strings); the hub's admission webhook refuses any other with the parser's
    /// message (reason `INVALID_MATCH_SELECTOR`).
    #[serde(rename = "match")]
    #[schemars(length(max = 64))]
    #[x_kube(
        validation = Rule::new("size(self) > 0").message(messages::MATCH_NOT_EMPTY),
        validation = Rule::new("self.all(m, size(m) > 0)").message(messages::MATCH_ENTRY_NOT_EMPTY)
    )]
    pub match_: Vec<String>,
    /// How often the federation Prometheus scrapes each tenant (default 30s).
    #[serde(default = "default_scrape_interval")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(DURATION_RULE).message(messages::DURATION_FORMAT))]
    pub scrape_interval: String,
    /// Timeout of one federation scrape (default 10s); at most scrapeInterval.
    #[serde(default = "default_scrape_timeout")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(DURATION_RULE).message(messages::DURATION_FORMAT))]
    pub scrape_timeout: String,
    /// Most samples one federation scrape may pull (0: no limit). Bounds the cost of a
    /// tenant exposing far more series than expected. 0 to 10,000,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_SAMPLE_LIMIT))]
    #[x_kube(
        validation = Rule::new("self >= 0").message(messages::SAMPLE_LIMIT_NON_NEGATIVE),
        validation = Rule::new(format!("self <= {}", bounds::MAX_SAMPLE_LIMIT)).message(messages::SAMPLE_LIMIT_MAX)
    )]
    pub sample_limit: Option<i64>,
    /// The federation Prometheus in each member cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<FederationTarget>,
    /// The global tier on the hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global: Option<GlobalTier>,
}

fn default_scrape_interval() -> String {
    "30s".into()
}

fn default_scrape_timeout() -> String {
    "10s".into()
}

/// Selects tenants by namespace name or by namespace labels.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("has(self.namespaces) != has(self.labelSelector)").message(messages::TENANT_XOR))]
#[serde(rename_all = "camelCase")]
pub struct TenantSelector {
    /// Tenant namespaces by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(max = 63)))]
    pub namespaces: Option<Vec<String>>,
    /// Tenant namespaces by label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// Where the rendered config goes in a member cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FederationTarget {
    /// URL the agent POSTs to after writing a new config, e.g.
    /// `http://prometheus-federation.monitoring:9090/-/reload`.
    #[serde(default, rename = "reloadURL", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new("self.startsWith('http://') || self.startsWith('https://')").message(messages::HTTP_URL))]
    pub reload_url: Option<String>,
    /// Namespace of ConfigMap `prometheus-federation` (default: the agent's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_namespace: Option<String>,
}

/// The global federation tier on the hub.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GlobalTier {
    /// Render the global tier.
    #[serde(default)]
    pub enabled: bool,
}

/// Observed state of a federation.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusFederationStatus {
    /// Generation of the spec this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_GENERATION))]
    pub observed_generation: Option<i64>,
    /// The rendered config in each selected cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<FederationPlacement>,
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
    /// The rollout of the latest revision, with `spec.rollout` progressive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::RolloutStatus>,
    /// The global tier on the hub, when `spec.global.enabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global: Option<GlobalTierStatus>,
    /// `Ready`, `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "bounds::conditions")]
    pub conditions: Vec<Condition>,
}

/// The global tier's config as the global Prometheus's reloader last confirmed it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GlobalTierStatus {
    /// Pending, Synced, Unavailable or Error.
    pub state: crate::PlacementState,
    /// Global federation jobs of this PrometheusFederation (one per member cluster with a
    /// federationEndpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub jobs: Option<i32>,
    /// SHA-256 of the whole global config the hub wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// Detail for the state, and which selected clusters have no federationEndpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The federation config as one cluster's agent last applied it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FederationPlacement {
    /// Member cluster.
    pub cluster: String,
    /// Pending, Synced, Unavailable or Error.
    pub state: crate::PlacementState,
    /// Federation jobs (tenants) rendered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = bounds::MAX_STATUS_COUNT))]
    pub jobs: Option<i32>,
    /// SHA-256 of the rendered config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// Detail for the state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The revision the cluster runs, while `spec.rollout` is progressive: the one
    /// `status.rollout.revision` names once the rollout reached the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub revision: Option<String>,
}

crate::placed_status! {
    PrometheusFederation => PrometheusFederationStatus, FederationPlacement;
}
