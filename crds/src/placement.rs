//! `spec.placement`: which member clusters an object goes to, the same shape in every kind.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::managed_cluster::TaintEffect;
use crate::messages;

/// Most tolerations one placement may list.
pub const MAX_TOLERATIONS: usize = 50;

/// Most seconds a NoExecute toleration may keep a placement on a tainted cluster (a day).
pub const MAX_TOLERATION_SECONDS: i64 = 86_400;

/// Most preference groups one placement may list.
pub const MAX_PREFERENCES: usize = 10;

/// Most clusters `numberOfClusters` may ask for.
pub const MAX_NUMBER_OF_CLUSTERS: i32 = 10_000;

/// Most groups a spread constraint may name in `minGroups` or `maxGroups`.
pub const MAX_SPREAD_GROUPS: i32 = 1_000;

/// Largest `spread.maxSkew`.
pub const MAX_SKEW: i32 = 1_000_000;

/// The member clusters an object is placed in: by name or by ManagedCluster labels, exactly
/// one of the two.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("has(self.clusters) != has(self.clusterSelector)").message(messages::CLUSTERS_XOR_SELECTOR))]
#[x_kube(validation = Rule::new("!has(self.numberOfClusters) || !has(self.spread) || !has(self.spread.minGroups) || self.spread.minGroups <= self.numberOfClusters").message(messages::SPREAD_MIN_ABOVE_COUNT))]
#[serde(rename_all = "camelCase")]
pub struct ClusterPlacement {
    /// Member clusters by name. Set this or clusterSelector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(max = 63)))]
    #[x_kube(validation = Rule::new(crate::scale::ALL_CLUSTER_NAMES_RULE).message(messages::CLUSTER_NAME))]
    pub clusters: Option<Vec<String>>,
    /// Member clusters by ManagedCluster labels. Set this or clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// Taints of ManagedClusters (`spec.taints`) this object tolerates. A cluster with a
    /// NoSchedule taint it does not tolerate gets no new placement (one it has stays); a
    /// NoExecute taint also takes an existing placement away, after `tolerationSeconds`
    /// when a toleration gives them; a PreferNoSchedule taint is avoided where another
    /// cluster can take the place (divided replicas) and otherwise ignored. At most 50.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub tolerations: Vec<Toleration>,
    /// Ordered fallback groups among the selected clusters, each a ManagedCluster label
    /// selector: the first group with enough eligible clusters (`numberOfClusters`, or one)
    /// is used and the others are left out; when no group has enough, the first that has
    /// any; when none has any, the first. Eligible: available, not drained, no taint this
    /// object does not tolerate (NoSchedule, NoExecute). A region outage moves the
    /// placement to the next group, and it comes back when a cluster of the first is
    /// eligible again. At most 10.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub preferences: Vec<PlacementPreference>,
    /// How many of the selected clusters to place in (1 to 10,000); unset: every one.
    /// Only eligible clusters are chosen (see `preferences`); a cluster placed stays while
    /// it is eligible, so unrelated fleet changes move nothing; new ones are chosen
    /// PreferNoSchedule-tainted last, then by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_NUMBER_OF_CLUSTERS))]
    #[x_kube(validation = Rule::new(format!("self >= 1 && self <= {MAX_NUMBER_OF_CLUSTERS}")).message(messages::NUMBER_OF_CLUSTERS_RANGE))]
    pub number_of_clusters: Option<i32>,
    /// Spread the chosen clusters over the values of a ManagedCluster label (region,
    /// zone, provider, …). With it only eligible clusters are chosen, as with
    /// `numberOfClusters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<Spread>,
}

/// One fallback group of `spec.placement.preferences`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlacementPreference {
    /// A name the status uses for the group (its index when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub name: Option<String>,
    /// The ManagedClusters of the group, by labels.
    pub cluster_selector: LabelSelector,
}

/// `spec.placement.spread`: the chosen clusters spread over the values of one label.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[x_kube(validation = Rule::new("!has(self.minGroups) || !has(self.maxGroups) || self.minGroups <= self.maxGroups").message(messages::SPREAD_MIN_ABOVE_MAX))]
#[serde(rename_all = "camelCase")]
pub struct Spread {
    /// The ManagedCluster label whose values are the groups (e.g. `region`). A cluster
    /// without it is in no group and is not chosen.
    #[schemars(length(min = 1, max = 317))]
    pub by_label: String,
    /// Fewest groups to place in (1 to 1,000). When the eligible clusters cannot cover
    /// them, nothing new is placed (clusters placed before keep their placement) and the
    /// status says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_SPREAD_GROUPS))]
    #[x_kube(validation = Rule::new(format!("self >= 1 && self <= {MAX_SPREAD_GROUPS}")).message(messages::SPREAD_GROUPS_RANGE))]
    pub min_groups: Option<i32>,
    /// Most groups to place in (1 to 1,000): the groups already placed in first, then
    /// those with the most eligible clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_SPREAD_GROUPS))]
    #[x_kube(validation = Rule::new(format!("self >= 1 && self <= {MAX_SPREAD_GROUPS}")).message(messages::SPREAD_GROUPS_RANGE))]
    pub max_groups: Option<i32>,
    /// For divided replicas (CrossClusterScalePolicy): the most the replica totals of two
    /// groups may differ (1 to 1,000,000); the division by weight is moved as little as
    /// that takes, and the status says so when the clusters' minReplicas and maxReplicas
    /// do not allow it. The other kinds place a whole copy in each cluster and refuse it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_SKEW))]
    #[x_kube(validation = Rule::new(format!("self >= 1 && self <= {MAX_SKEW}")).message(messages::SPREAD_MAX_SKEW_RANGE))]
    pub max_skew: Option<i32>,
}

/// A taint this object tolerates: one with `key` (any key when empty, with `Exists`), the
/// `value` (`Equal`, the default) or any value (`Exists`), and `effect` (any when unset).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[x_kube(validation = Rule::new("!has(self.operator) || self.operator != 'Exists' || !has(self.value)").message(messages::TOLERATION_EXISTS_VALUE))]
#[x_kube(validation = Rule::new("has(self.key) || (has(self.operator) && self.operator == 'Exists')").message(messages::TOLERATION_EMPTY_KEY))]
#[x_kube(validation = Rule::new("!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')").message(messages::TOLERATION_SECONDS_EFFECT))]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// The taint key; unset with `Exists` tolerates every taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub key: Option<String>,
    /// `Equal` (the default: the taint's value must be `value`) or `Exists` (any value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<TolerationOperator>,
    /// The taint value `Equal` compares with (unset matches a taint without a value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub value: Option<String>,
    /// The effect tolerated; unset tolerates every effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
    /// With effect NoExecute: how long a placement stays on a cluster after the hub saw
    /// the taint (unset: for ever). 0 to 86,400.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_TOLERATION_SECONDS))]
    #[x_kube(validation = Rule::new(format!("self >= 0 && self <= {MAX_TOLERATION_SECONDS}")).message(messages::TOLERATION_SECONDS_RANGE))]
    pub toleration_seconds: Option<i64>,
}

/// How a toleration compares the taint's value.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TolerationOperator {
    /// The values are equal.
    Equal,
    /// Any value.
    Exists,
}

impl Toleration {
    /// Whether this toleration tolerates a taint of `key`, `value` and `effect`.
    pub fn tolerates(&self, key: &str, value: Option<&str>, effect: TaintEffect) -> bool {
        if self.effect.is_some_and(|e| e != effect) {
            return false;
        }
        match self.operator.unwrap_or(TolerationOperator::Equal) {
            TolerationOperator::Exists => self.key.as_deref().is_none_or(|k| k == key),
            TolerationOperator::Equal => {
                self.key.as_deref() == Some(key)
                    && self.value.as_deref().unwrap_or("") == value.unwrap_or("")
            }
        }
    }
}

impl ClusterPlacement {
    /// Whether the placement chooses among the selected clusters (`preferences`,
    /// `numberOfClusters` or `spread`) rather than taking every one.
    pub fn chooses(&self) -> bool {
        !self.preferences.is_empty() || self.number_of_clusters.is_some() || self.spread.is_some()
    }

    /// A placement in the named clusters.
    pub fn clusters<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            clusters: Some(names.into_iter().map(Into::into).collect()),
            ..Self::default()
        }
    }

    /// A placement in the clusters whose labels `selector` matches.
    pub fn selector(selector: LabelSelector) -> Self {
        Self {
            cluster_selector: Some(selector),
            ..Self::default()
        }
    }
}
