//! The member clusters as every kind sees them ([`ClusterInfo`], read field by field from
//! the shared ManagedCluster reflector) and which of them a placed object selects: the clusters
//! by name (in the spec's order, unknown names kept so that status can say so) or a label
//! selector over the ManagedClusters' labels (by name order). Any kind with
//! `spec.placement` (`clusters` or `clusterSelector`) selects this way.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use accord_crds::ClusterPlacement;
use accord_crds::conditions::{self, types};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;

/// ManagedClusters as every controller sees them: metadata typed, the rest as stored, so
/// one malformed cluster object cannot stop the shared watch.
pub type ClusterObject = crate::controllers::lenient::Lenient<accord_crds::ManagedCluster>;

/// What the controllers need of one ManagedCluster, read field by field so that a cluster
/// whose spec does not decode still counts by its labels and status.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterInfo {
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// Whether its `Available` condition is `True` (its agent is connected).
    pub available: bool,
    /// When `Available` last changed, Unix seconds (0 when it has no such condition).
    pub available_since_unix: i64,
    /// Since when its `APIServerAvailable` condition has been `False` (the agent reports
    /// its member API server down), Unix seconds; `None` while it is anything else.
    pub api_server_unavailable_since_unix: Option<i64>,
    /// `spec.unschedulable`: drained, it gets no new share.
    pub unschedulable: bool,
    /// `spec.taints` but the hub's own (which [`super::taints::judge`] takes from the
    /// conditions), with when the [`ClusterIndex`] first saw each.
    pub taints: Vec<super::taints::SeenTaint>,
    /// `spec` as stored, for the fields only one kind reads (e.g. `federationEndpoint`).
    pub spec: serde_json::Value,
}

impl ClusterInfo {
    /// The view of one watched ManagedCluster.
    pub fn of(mc: &ClusterObject) -> Self {
        let conditions = mc.conditions();
        let available = conditions::find(&conditions, types::AVAILABLE)
            .map(|c| (c.status == "True", c.last_transition_time.0.as_second()));
        let api_server_down = conditions::find(
            &conditions,
            crate::controllers::cluster_status::API_SERVER_AVAILABLE,
        )
        .filter(|c| c.status == "False")
        .map(|c| c.last_transition_time.0.as_second());
        Self {
            labels: mc.labels().clone(),
            available: available.is_some_and(|a| a.0),
            available_since_unix: available.map_or(0, |a| a.1),
            api_server_unavailable_since_unix: api_server_down,
            unschedulable: mc
                .pointer("/spec/unschedulable")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
            taints: mc
                .pointer("/spec")
                .map(super::taints::taints_of)
                .unwrap_or_default(),
            spec: mc.pointer("/spec").cloned().unwrap_or_default(),
        }
    }

    /// A string field of the stored spec, e.g. `federationEndpoint`.
    pub fn spec_str(&self, field: &str) -> Option<&str> {
        self.spec.get(field).and_then(serde_json::Value::as_str)
    }
}

/// Every ManagedCluster by name: a persistent map, so a snapshot of the fleet is a pointer
/// copy and a change copies only the path to one entry.
pub type Clusters = imbl::OrdMap<String, ClusterInfo>;

/// Every ManagedCluster as the controllers see it, kept from the watch events as they
/// arrive: a reconcile takes the fleet in O(1) ([`ClusterIndex::snapshot`]) instead of
/// reading every ManagedCluster again (at 10,000 clusters that read was most of a
/// reconcile's CPU, and a fan-out reconciles once per batch of reports).
#[derive(Clone, Default)]
pub struct ClusterIndex {
    shown: Arc<RwLock<Clusters>>,
}

impl ClusterIndex {
    /// The fleet now.
    pub fn snapshot(&self) -> Clusters {
        self.shown
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The writer that keeps this index from one watch stream of ManagedClusters.
    pub fn writer(&self) -> ClusterIndexWriter {
        ClusterIndexWriter {
            index: self.clone(),
            relisted: None,
        }
    }

    /// The view of `mc` to keep, its taints dated from `before` (the cluster as shown).
    fn dated(mc: &ClusterObject, before: Option<&ClusterInfo>) -> ClusterInfo {
        let mut info = ClusterInfo::of(mc);
        super::taints::carry_since(&mut info.taints, before, unix_now());
        info
    }

    fn update(&self, change: impl FnOnce(&mut Clusters)) {
        change(
            &mut self
                .shown
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
    }
}

/// Applies a watch stream's events to a [`ClusterIndex`]. Put it before the reflector so
/// that whatever a reflector event triggers already sees the change here.
pub struct ClusterIndexWriter {
    index: ClusterIndex,
    /// A relist in progress: the clusters listed so far, shown once the list is complete
    /// (and then without those deleted meanwhile), and the fleet as shown when it began
    /// (the listed clusters' taints keep the time they were first seen).
    relisted: Option<(Clusters, Clusters)>,
}

impl ClusterIndexWriter {
    /// Takes one watch event in.
    pub fn apply(&mut self, event: &kube::runtime::watcher::Event<ClusterObject>) {
        use kube::runtime::watcher::Event;
        match event {
            Event::Apply(mc) => self.index.update(|c| {
                let info = ClusterIndex::dated(mc, c.get(&mc.name_any()));
                c.insert(mc.name_any(), info);
            }),
            Event::Delete(mc) => self.index.update(|c| drop(c.remove(&mc.name_any()))),
            Event::Init => self.relisted = Some((Clusters::new(), self.index.snapshot())),
            Event::InitApply(mc) => {
                let index = &self.index;
                let (listed, shown) = self
                    .relisted
                    .get_or_insert_with(|| (Clusters::new(), index.snapshot()));
                let info = ClusterIndex::dated(mc, shown.get(&mc.name_any()));
                listed.insert(mc.name_any(), info);
            }
            Event::InitDone => {
                let (listed, _) = self.relisted.take().unwrap_or_default();
                self.index.update(|c| *c = listed);
            }
        }
    }
}

/// Now, Unix seconds.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// `names` as available clusters, for tests.
#[cfg(test)]
pub fn available(names: &[&str]) -> Clusters {
    names
        .iter()
        .map(|n| {
            let info = ClusterInfo {
                available: true,
                ..ClusterInfo::default()
            };
            ((*n).to_owned(), info)
        })
        .collect()
}

/// One cluster a placed object selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectedCluster {
    /// Its name.
    pub name: String,
    /// Whether a ManagedCluster of that name exists (always, for a label selection).
    pub known: bool,
}

/// Why a named cluster gets nothing: there is no such ManagedCluster.
pub fn unknown_cluster(name: &str) -> String {
    format!("no ManagedCluster {name}")
}

/// A label selector the hub cannot evaluate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct SelectorError {
    /// Which selector, e.g. `spec.placement.clusterSelector`.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The clusters a `spec.placement`'s `clusters` (names) or else `clusterSelector` (labels)
/// selects among `clusters` (by name); neither selects nothing.
pub fn select_clusters(
    placement: &ClusterPlacement,
    clusters: &Clusters,
) -> Result<Vec<SelectedCluster>, SelectorError> {
    if let Some(names) = &placement.clusters {
        let mut seen = BTreeSet::new();
        return Ok(names
            .iter()
            .filter(|n| seen.insert(n.as_str()))
            .map(|n| SelectedCluster {
                name: n.clone(),
                known: clusters.contains_key(n),
            })
            .collect());
    }
    let Some(selector) = &placement.cluster_selector else {
        return Ok(Vec::new());
    };
    let mut selected = Vec::new();
    for (name, info) in clusters {
        if matches(selector, &info.labels, "spec.placement.clusterSelector")? {
            selected.push(SelectedCluster {
                name: name.clone(),
                known: true,
            });
        }
    }
    Ok(selected)
}

/// Whether `labels` satisfy `selector`, with Kubernetes' semantics: every `matchLabels`
/// pair and every `matchExpressions` entry must hold; an empty selector selects everything.
/// An operator other than `In`, `NotIn`, `Exists` and `DoesNotExist`, or values that do
/// not fit the operator, are an error naming `field`.
pub fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
    field: &str,
) -> Result<bool, SelectorError> {
    accord_common::selector::matches(selector, labels).map_err(|reason| SelectorError {
        field: field.to_owned(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    /// Any kind's `spec.placement`.
    fn spec(yaml: &str) -> ClusterPlacement {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn select(
        spec: &ClusterPlacement,
        clusters: &Clusters,
    ) -> Result<Vec<SelectedCluster>, SelectorError> {
        select_clusters(spec, clusters)
    }

    fn clusters(list: &[(&str, &[(&str, &str)])]) -> Clusters {
        list.iter()
            .map(|(name, labels)| {
                (
                    (*name).to_owned(),
                    ClusterInfo {
                        labels: labels
                            .iter()
                            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                            .collect(),
                        ..Default::default()
                    },
                )
            })
            .collect()
    }

    #[test]
    fn a_cluster_whose_spec_does_not_decode_still_counts_by_its_labels_status_and_fields() {
        let mc = ClusterObject::from_value(serde_json::json!({
            "apiVersion": "accord.io/v1beta1", "kind": "ManagedCluster",
            "metadata": {"name": "a", "labels": {"tier": "prod"}},
            "spec": {"weight": 3_000_000_000_i64, "unschedulable": true,
                     "federationEndpoint": "http://a:9090"},
            "status": {"agentVersion": 7, "conditions": [{
                "type": "Available", "status": "True", "reason": "AgentConnected",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:10Z"
            }]}
        }))
        .unwrap();
        assert!(
            mc.decode().is_err(),
            "the fixture must not decode as a whole"
        );
        let info = ClusterInfo::of(&mc);
        assert!(info.available && info.unschedulable);
        assert_eq!(info.available_since_unix, 1_767_225_610);
        assert_eq!(info.labels["tier"], "prod");
        assert_eq!(info.spec_str("federationEndpoint"), Some("http://a:9090"));
        assert_eq!(ClusterInfo::default().available_since_unix, 0);
    }

    fn managed(name: &str, tier: &str) -> ClusterObject {
        ClusterObject::from_value(serde_json::json!({
            "apiVersion": "accord.io/v1beta1", "kind": "ManagedCluster",
            "metadata": {"name": name, "labels": {"tier": tier}},
            "spec": {},
        }))
        .unwrap()
    }

    #[test]
    fn the_index_follows_changes_and_a_relist_drops_what_was_deleted_meanwhile() {
        use kube::runtime::watcher::Event;
        let index = ClusterIndex::default();
        let mut writer = index.writer();
        writer.apply(&Event::Apply(managed("a", "prod")));
        writer.apply(&Event::Apply(managed("b", "prod")));
        let before = index.snapshot();
        writer.apply(&Event::Apply(managed("a", "dev")));
        writer.apply(&Event::Delete(managed("b", "prod")));
        let now = index.snapshot();
        assert_eq!(now.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(now["a"].labels["tier"], "dev");
        assert_eq!(before.len(), 2, "a snapshot taken earlier does not change");
        assert_eq!(before["a"].labels["tier"], "prod");

        // A relist shows the old fleet until it is complete, then exactly what it listed.
        writer.apply(&Event::Init);
        writer.apply(&Event::InitApply(managed("c", "prod")));
        assert_eq!(index.snapshot().keys().collect::<Vec<_>>(), ["a"]);
        writer.apply(&Event::InitDone);
        assert_eq!(index.snapshot().keys().collect::<Vec<_>>(), ["c"]);
    }

    fn names(selected: &[SelectedCluster]) -> Vec<(&str, bool)> {
        selected
            .iter()
            .map(|s| (s.name.as_str(), s.known))
            .collect()
    }

    const TENANTS: &str = "tenantSelector: {namespaces: [a]}\nmatch: ['{job=\"x\"}']\n";

    #[test]
    fn named_clusters_keep_the_spec_order_and_unknown_names_are_kept_as_unknown() {
        let all = clusters(&[("east", &[]), ("west", &[])]);
        let s = spec(&format!("clusters: [west, mars, east, west]\n{TENANTS}"));
        assert_eq!(
            names(&select(&s, &all).unwrap()),
            vec![("west", true), ("mars", false), ("east", true)]
        );
    }

    #[test]
    fn a_label_selector_picks_the_matching_clusters_by_name() {
        let all = clusters(&[
            ("c", &[("tier", "prod"), ("region", "eu")]),
            ("a", &[("tier", "prod"), ("region", "us")]),
            ("b", &[("tier", "dev")]),
        ]);
        let s = spec(&format!(
            "clusterSelector: {{matchLabels: {{tier: prod}}}}\n{TENANTS}"
        ));
        assert_eq!(
            names(&select(&s, &all).unwrap()),
            vec![("a", true), ("c", true)]
        );
        let s = spec(&format!(
            "clusterSelector: {{matchExpressions: [{{key: region, operator: NotIn, values: [us]}}]}}\n{TENANTS}"
        ));
        assert_eq!(
            names(&select(&s, &all).unwrap()),
            vec![("b", true), ("c", true)],
            "NotIn also selects clusters without the label"
        );
    }

    #[test]
    fn every_operator_follows_kubernetes_semantics() {
        let labels: BTreeMap<String, String> = [("tier".to_owned(), "prod".to_owned())].into();
        let expr = |op: &str, values: &[&str]| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: op.into(),
                values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
            }]),
            match_labels: None,
        };
        let m = |s: &LabelSelector| matches(s, &labels, "sel").unwrap();
        assert!(m(&expr("In", &["prod", "dev"])));
        assert!(!m(&expr("In", &["dev"])));
        assert!(!m(&expr("NotIn", &["prod"])));
        assert!(m(&expr("Exists", &[])));
        assert!(!m(&expr("DoesNotExist", &[])));
        assert!(m(&LabelSelector::default()), "empty selects everything");
        let err = matches(&expr("In", &[]), &labels, "spec.placement.clusterSelector").unwrap_err();
        assert_eq!(err.field, "spec.placement.clusterSelector");
        assert!(err.reason.contains("at least one value"), "{err}");
        assert!(matches(&expr("Exists", &["x"]), &labels, "s").is_err());
        assert!(
            matches(&expr("Matches", &["x"]), &labels, "s")
                .unwrap_err()
                .reason
                .contains("unknown operator")
        );
    }

    #[test]
    fn match_labels_and_expressions_must_all_hold() {
        let labels: BTreeMap<String, String> = [
            ("tier".to_owned(), "prod".to_owned()),
            ("r".to_owned(), "eu".to_owned()),
        ]
        .into();
        let s: LabelSelector = serde_saphyr::from_str(
            "{matchLabels: {tier: prod}, matchExpressions: [{key: r, operator: In, values: [us]}]}",
        )
        .unwrap();
        assert!(!matches(&s, &labels, "s").unwrap());
    }
}
