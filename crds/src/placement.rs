//! `spec.placement`: which member clusters an object goes to, the same shape in every kind.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::messages;

/// The member clusters an object is placed in: by name or by ManagedCluster labels, exactly
/// one of the two.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("has(self.clusters) != has(self.clusterSelector)").message(messages::CLUSTERS_XOR_SELECTOR))]
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
}

impl ClusterPlacement {
    /// A placement in the named clusters.
    pub fn clusters<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            clusters: Some(names.into_iter().map(Into::into).collect()),
            cluster_selector: None,
        }
    }

    /// A placement in the clusters whose labels `selector` matches.
    pub fn selector(selector: LabelSelector) -> Self {
        Self {
            clusters: None,
            cluster_selector: Some(selector),
        }
    }
}
