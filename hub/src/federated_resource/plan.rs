//! What a FederatedResource asks of each selected cluster: its manifests in dependency
//! order with that cluster's overrides applied, the objects earlier specs delivered that
//! this one does not (to prune), and the placements record's shares. Pure.

use std::collections::{BTreeMap, BTreeSet};

use accord_common::distribution::{
    AssignmentSpec, DeliveredSecret, FederatedResourceSpec as ResourceAssignment, FeedbackRule,
    ManifestKey,
};
use accord_crds::FederatedResourceSpec;
use accord_crds::federated_resource::{
    CLUSTER_SCOPED_KINDS, ConflictResolution, Override, ResourceDeletionPolicy,
};
use serde_json::Value;

use crate::distribution::select::{
    ClusterInfo, Clusters, SelectedCluster, matches, unknown_cluster,
};
use crate::distribution::{Hold, PlacementRecord, ShareRecord};

/// Metadata fields a manifest may carry that are the member's to set: dropped before
/// delivery.
const SERVER_SET_METADATA: &[&str] = &[
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "managedFields",
    "selfLink",
];

/// Where a manifest goes in the apply order: CustomResourceDefinitions, then Namespaces,
/// then everything else as written.
fn order(manifest: &Value) -> u8 {
    match manifest.get("kind").and_then(Value::as_str) {
        Some("CustomResourceDefinition") => 0,
        Some("Namespace") => 1,
        _ => 2,
    }
}

/// The manifests as delivered before overrides: in apply order, without `status` and the
/// metadata the member sets.
pub fn ordered_manifests(spec: &FederatedResourceSpec) -> Vec<Value> {
    let mut manifests: Vec<Value> = spec.manifests.iter().map(clean).collect();
    manifests.sort_by_key(order);
    manifests
}

fn clean(manifest: &Value) -> Value {
    let mut m = manifest.clone();
    if let Some(o) = m.as_object_mut() {
        o.remove("status");
        if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in SERVER_SET_METADATA {
                meta.remove(*field);
            }
        }
    }
    m
}

/// The key a manifest is delivered under in a member: its namespace defaults to
/// `namespace` unless its kind is cluster-scoped.
pub fn key_of(manifest: &Value, namespace: &str) -> ManifestKey {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    let meta = manifest.get("metadata");
    let kind = text(manifest.get("kind"));
    let written = text(meta.and_then(|m| m.get("namespace")));
    let namespace = if CLUSTER_SCOPED_KINDS.contains(&kind.as_str()) {
        String::new()
    } else if written.is_empty() {
        namespace.to_owned()
    } else {
        written
    };
    ManifestKey {
        api_version: text(manifest.get("apiVersion")),
        kind,
        namespace,
        name: text(meta.and_then(|m| m.get("name"))),
    }
}

/// The key a delivered Secret has in a member.
fn secret_key(name: &str, namespace: &str) -> ManifestKey {
    ManifestKey {
        api_version: "v1".into(),
        kind: "Secret".into(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

/// An override that could not be applied to a cluster's manifests.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("spec.overrides[{index}] on {kind} {name}: {reason}")]
pub struct OverrideError {
    /// Index of the override in `spec.overrides`.
    pub index: usize,
    /// The manifest it failed on.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// The patch's error (names the operation and the path).
    pub reason: String,
}

/// Whether override `o` applies to `cluster`.
fn selects(o: &Override, cluster: &str, info: Option<&ClusterInfo>) -> bool {
    if let Some(names) = &o.clusters {
        return names.iter().any(|n| n == cluster);
    }
    match (&o.cluster_selector, info) {
        (Some(selector), Some(info)) => {
            matches(selector, &info.labels, "spec.overrides[].clusterSelector").unwrap_or(false)
        }
        _ => false,
    }
}

fn targets(o: &Override, manifest: &Value) -> bool {
    let Some(target) = &o.target else {
        return true;
    };
    let kind = manifest.get("kind").and_then(Value::as_str);
    let name = manifest.pointer("/metadata/name").and_then(Value::as_str);
    kind == Some(target.kind.as_str()) && target.name.as_deref().is_none_or(|n| Some(n) == name)
}

/// `manifests` with the overrides that select `cluster` applied in order; answers them and
/// the indexes of the overrides that applied.
pub fn overridden(
    spec: &FederatedResourceSpec,
    manifests: &[Value],
    cluster: &str,
    info: Option<&ClusterInfo>,
) -> Result<(Vec<Value>, Vec<i32>), OverrideError> {
    let mut out = manifests.to_vec();
    let mut applied = Vec::new();
    for (index, o) in spec.overrides.iter().enumerate() {
        if !selects(o, cluster, info) {
            continue;
        }
        let patch: json_patch::Patch = serde_json::to_value(&o.json_patch)
            .and_then(serde_json::from_value)
            .map_err(|e| OverrideError {
                index,
                kind: String::new(),
                name: String::new(),
                reason: e.to_string(),
            })?;
        for m in out.iter_mut().filter(|m| targets(o, m)) {
            json_patch::patch(m, &patch).map_err(|e| OverrideError {
                index,
                kind: m
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .into(),
                name: m
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .into(),
                reason: e.to_string(),
            })?;
        }
        applied.push(i32::try_from(index).unwrap_or(i32::MAX));
    }
    Ok((out, applied))
}

/// What the plan says of one cluster beyond its share.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterPlan {
    /// Indexes of the overrides applied there.
    pub overrides: Vec<i32>,
    /// The override that failed there (the cluster keeps what it was sent before).
    pub error: Option<String>,
    /// Workloads whose `spec.replicas` was left out because a CrossClusterScalePolicy sets
    /// it there, each saying so.
    pub scaled: Vec<String>,
}

/// The workloads whose `spec.replicas` another object claims (a CrossClusterScalePolicy):
/// (cluster, namespace, kind, name) → the claimant ("Kind namespace/name"), from
/// [`crate::controllers::field_owners`]. A delivery of one leaves the field out, so the
/// two never fight over it.
pub type Scaled = crate::controllers::field_owners::Owned;

/// Whether a manifest of `spec` is an object of `kind` named `name`.
pub fn names_object(spec: &FederatedResourceSpec, kind: &str, name: &str) -> bool {
    spec.manifests.iter().any(|m| {
        m.get("kind").and_then(Value::as_str) == Some(kind)
            && m.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
    })
}

/// Drops `spec.replicas` of the manifests `scaled` names in `cluster`; answers what it
/// dropped, as the placement says it.
fn leave_replicas(
    manifests: &mut [Value],
    cluster: &str,
    namespace: &str,
    scaled: &Scaled,
) -> Vec<String> {
    let mut left = Vec::new();
    for m in manifests.iter_mut() {
        let k = key_of(m, namespace);
        let Some(placed) = scaled.get(&(
            cluster.to_owned(),
            k.namespace.clone(),
            k.kind.clone(),
            k.name.clone(),
        )) else {
            continue;
        };
        if let Some(spec) = m.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("replicas");
        }
        left.push(format!("spec.replicas of {k} is left to {placed}"));
    }
    left
}

/// Every selected cluster's share and plan.
pub struct Planned {
    /// The shares, in selection order.
    pub shares: Vec<ShareRecord>,
    /// Per cluster: overrides applied, or the override error.
    pub clusters: BTreeMap<String, ClusterPlan>,
}

/// Which FederatedResource a plan is for.
#[derive(Clone, Copy, Debug)]
pub struct Origin<'a> {
    /// Its namespace (of namespaced manifests that name none).
    pub namespace: &'a str,
    /// Its `creationTimestamp`, RFC 3339 ("" when unknown): the older of two delivering one
    /// object keeps it.
    pub created: &'a str,
}

/// The assignment each selected cluster gets, for the FederatedResource `origin`;
/// `previous` the stored record, whose delivered objects that this spec no longer names
/// are pruned (and whose assignment a cluster keeps when its override fails).
pub fn plan(
    spec: &FederatedResourceSpec,
    origin: Origin<'_>,
    selected: &[SelectedCluster],
    clusters: &Clusters,
    previous: Option<&PlacementRecord<super::FederatedResourceDecision>>,
    scaled: &Scaled,
    secrets: &[DeliveredSecret],
) -> Planned {
    let namespace = origin.namespace;
    let manifests = ordered_manifests(spec);
    let feedback: Vec<FeedbackRule> = spec
        .feedback
        .iter()
        .map(|f| FeedbackRule {
            kind: f.kind.clone(),
            name: f.name.clone(),
            json_path: f.json_path.clone(),
            as_: f.as_.clone(),
        })
        .collect();
    let mut shares = Vec::with_capacity(selected.len());
    let mut plans = BTreeMap::new();
    for c in selected {
        if !c.known {
            shares.push(ShareRecord {
                since: None,
                cluster: c.name.clone(),
                assignment: None,
                held_reason: Some(unknown_cluster(&c.name)),
                hold: Some(Hold::NotRegistered),
            });
            continue;
        }
        let before = previous
            .and_then(|p| p.share(&c.name))
            .and_then(|s| match &s.assignment {
                Some(AssignmentSpec::FederatedResource(a)) => Some(a),
                _ => None,
            });
        match overridden(spec, &manifests, &c.name, clusters.get(&c.name)) {
            Ok((mut delivered, overrides)) => {
                let left = leave_replicas(&mut delivered, &c.name, namespace, scaled);
                let keys: BTreeSet<ManifestKey> = delivered
                    .iter()
                    .map(|m| key_of(m, namespace))
                    .chain(secrets.iter().map(|s| secret_key(&s.name, namespace)))
                    .collect();
                let prune = before
                    .map(|b| {
                        b.manifests
                            .iter()
                            .map(|m| key_of(m, &b.namespace))
                            .chain(b.secrets.iter().map(|s| secret_key(&s.name, &b.namespace)))
                            .chain(b.prune.iter().cloned())
                            .filter(|k| !keys.contains(k))
                            .collect::<BTreeSet<_>>()
                            .into_iter()
                            .collect()
                    })
                    .unwrap_or_default();
                shares.push(ShareRecord {
                    since: None,
                    cluster: c.name.clone(),
                    assignment: Some(AssignmentSpec::FederatedResource(ResourceAssignment {
                        manifests: delivered,
                        namespace: namespace.to_owned(),
                        adopt: spec.conflict_resolution() == ConflictResolution::Adopt,
                        orphan: spec.deletion_policy() == ResourceDeletionPolicy::Orphan,
                        feedback: feedback.clone(),
                        secrets: secrets.to_vec(),
                        prune,
                        remove: false,
                        created: origin.created.to_owned(),
                    })),
                    held_reason: None,
                    hold: None,
                });
                plans.insert(
                    c.name.clone(),
                    ClusterPlan {
                        overrides,
                        error: None,
                        scaled: left,
                    },
                );
            }
            Err(e) => {
                // The cluster keeps what it was sent: a bad override never removes a
                // running workload.
                shares.push(ShareRecord {
                    since: None,
                    cluster: c.name.clone(),
                    assignment: before.cloned().map(AssignmentSpec::FederatedResource),
                    held_reason: Some(e.to_string()),
                    hold: None,
                });
                plans.insert(
                    c.name.clone(),
                    ClusterPlan {
                        error: Some(e.to_string()),
                        ..ClusterPlan::default()
                    },
                );
            }
        }
    }
    Planned {
        shares,
        clusters: plans,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::select::available;
    use serde_json::json;

    const TEAM: Origin<'static> = Origin {
        namespace: "team",
        created: "2026-01-02T03:04:05Z",
    };

    fn spec(yaml: &str) -> FederatedResourceSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn selected(names: &[&str]) -> Vec<SelectedCluster> {
        names
            .iter()
            .map(|n| SelectedCluster {
                name: (*n).into(),
                known: true,
            })
            .collect()
    }

    fn assignment(share: &ShareRecord) -> &ResourceAssignment {
        match share.assignment.as_ref().unwrap() {
            AssignmentSpec::FederatedResource(a) => a,
            other => panic!("{other:?}"),
        }
    }

    const BUNDLE: &str = "placement: {clusters: [east, west]}\nmanifests:\n\
        - {apiVersion: apps/v1, kind: Deployment, metadata: {name: web, resourceVersion: '7'}, \
           spec: {template: {spec: {containers: [{name: web, image: web:1}]}}}, status: {replicas: 1}}\n\
        - {apiVersion: v1, kind: Namespace, metadata: {name: extra}}\n\
        - {apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, metadata: {name: dbs.example.com}}\n";

    #[test]
    fn definitions_and_namespaces_go_first_and_server_fields_are_dropped() {
        let m = ordered_manifests(&spec(BUNDLE));
        let kinds: Vec<&str> = m.iter().map(|m| m["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["CustomResourceDefinition", "Namespace", "Deployment"]
        );
        assert!(m[2].get("status").is_none());
        assert!(m[2].pointer("/metadata/resourceVersion").is_none());
        assert_eq!(key_of(&m[2], "team").namespace, "team");
        assert_eq!(key_of(&m[1], "team").namespace, "");
        assert_eq!(key_of(&m[0], "team").namespace, "");
    }

    #[test]
    fn an_override_applies_only_where_it_selects_and_only_to_its_target() {
        let s = spec(&format!(
            "{BUNDLE}overrides:\n- clusterSelector: {{matchLabels: {{region: eu}}}}\n  \
             target: {{kind: Deployment, name: web}}\n  jsonPatch:\n  \
             - {{op: replace, path: /spec/template/spec/containers/0/image, value: eu/web:1}}\n"
        ));
        let mut clusters = available(&["east", "west"]);
        let mut west = clusters.get("west").unwrap().clone();
        west.labels.insert("region".into(), "eu".into());
        clusters.insert("west".into(), west);
        let planned = plan(
            &s,
            TEAM,
            &selected(&["east", "west"]),
            &clusters,
            None,
            &Scaled::new(),
            &[],
        );
        let image = |share: &ShareRecord| {
            assignment(share).manifests[2]
                .pointer("/spec/template/spec/containers/0/image")
                .cloned()
        };
        assert_eq!(image(&planned.shares[0]), Some(json!("web:1")));
        assert_eq!(image(&planned.shares[1]), Some(json!("eu/web:1")));
        assert_eq!(planned.clusters["west"].overrides, vec![0]);
        assert!(planned.clusters["east"].overrides.is_empty());
        assert_eq!(assignment(&planned.shares[1]).namespace, "team");
        assert_eq!(assignment(&planned.shares[1]).created, TEAM.created);
    }

    #[test]
    fn a_failing_override_is_named_and_the_cluster_keeps_what_it_had() {
        let good = spec(BUNDLE);
        let clusters = available(&["east", "west"]);
        let first = plan(
            &good,
            TEAM,
            &selected(&["east", "west"]),
            &clusters,
            None,
            &Scaled::new(),
            &[],
        );
        let previous = PlacementRecord {
            placed: accord_common::distribution::PlacedRef::new(
                accord_common::distribution::PlacedKind::FederatedResource,
                "team",
                "app",
            ),
            generation: 1,
            decided_unix_millis: 0,
            shares: first.shares.clone(),
            decision: Default::default(),
            traceparent: String::new(),
        };
        let bad = spec(&format!(
            "{BUNDLE}overrides:\n- clusters: [west]\n  target: {{kind: Deployment}}\n  \
             jsonPatch: [{{op: replace, path: /spec/nothing/here, value: 1}}]\n"
        ));
        let planned = plan(
            &bad,
            TEAM,
            &selected(&["east", "west"]),
            &clusters,
            Some(&previous),
            &Scaled::new(),
            &[],
        );
        let error = planned.clusters["west"].error.as_deref().unwrap();
        assert!(
            error.starts_with("spec.overrides[0] on Deployment web: "),
            "{error}"
        );
        assert!(error.contains("/spec/nothing/here"), "{error}");
        assert_eq!(planned.shares[1].assignment, first.shares[1].assignment);
        assert!(planned.clusters["east"].error.is_none());
    }

    #[test]
    fn objects_no_longer_named_are_pruned_until_named_again() {
        let clusters = available(&["east"]);
        let s1 = spec(BUNDLE);
        let first = plan(
            &s1,
            TEAM,
            &selected(&["east"]),
            &clusters,
            None,
            &Scaled::new(),
            &[],
        );
        let record = |shares: Vec<ShareRecord>| PlacementRecord {
            placed: accord_common::distribution::PlacedRef::new(
                accord_common::distribution::PlacedKind::FederatedResource,
                "team",
                "app",
            ),
            generation: 1,
            decided_unix_millis: 0,
            shares,
            decision: Default::default(),
            traceparent: String::new(),
        };
        let s2 = spec(
            "placement: {clusters: [east]}\nmanifests:\n- {apiVersion: v1, kind: Namespace, metadata: {name: extra}}\n",
        );
        let second = plan(
            &s2,
            TEAM,
            &selected(&["east"]),
            &clusters,
            Some(&record(first.shares)),
            &Scaled::new(),
            &[],
        );
        let prune: Vec<String> = assignment(&second.shares[0])
            .prune
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            prune,
            [
                "CustomResourceDefinition dbs.example.com",
                "Deployment team/web"
            ]
        );
        // Still pruned a decision later; named again, no longer.
        let third = plan(
            &s2,
            TEAM,
            &selected(&["east"]),
            &clusters,
            Some(&record(second.shares.clone())),
            &Scaled::new(),
            &[],
        );
        assert_eq!(assignment(&third.shares[0]).prune.len(), 2);
        let fourth = plan(
            &s1,
            TEAM,
            &selected(&["east"]),
            &clusters,
            Some(&record(third.shares)),
            &Scaled::new(),
            &[],
        );
        assert!(assignment(&fourth.shares[0]).prune.is_empty());
    }

    #[test]
    fn a_workload_a_scale_policy_divides_is_delivered_without_replicas() {
        let s = spec(
            "placement: {clusters: [east, west]}\nmanifests:\n\
             - {apiVersion: apps/v1, kind: Deployment, metadata: {name: web}, spec: {replicas: 3}}\n",
        );
        let scaled = Scaled::from([(
            (
                "east".to_owned(),
                "team".to_owned(),
                "Deployment".to_owned(),
                "web".to_owned(),
            ),
            "CrossClusterScalePolicy team/web-scale".to_owned(),
        )]);
        let clusters = available(&["east", "west"]);
        let planned = plan(
            &s,
            TEAM,
            &selected(&["east", "west"]),
            &clusters,
            None,
            &scaled,
            &[],
        );
        let replicas = |i: usize| {
            assignment(&planned.shares[i]).manifests[0]
                .pointer("/spec/replicas")
                .cloned()
        };
        assert_eq!(replicas(0), None);
        assert_eq!(replicas(1), Some(json!(3)));
        assert_eq!(
            planned.clusters["east"].scaled,
            [
                "spec.replicas of Deployment team/web is left to CrossClusterScalePolicy team/web-scale"
            ]
        );
        assert!(planned.clusters["west"].scaled.is_empty());
    }

    #[test]
    fn an_unknown_cluster_gets_nothing_and_says_why() {
        let planned = plan(
            &spec(BUNDLE),
            TEAM,
            &[SelectedCluster {
                name: "ghost".into(),
                known: false,
            }],
            &available(&[]),
            None,
            &Scaled::new(),
            &[],
        );
        assert!(planned.shares[0].assignment.is_none());
        assert_eq!(
            planned.shares[0].held_reason.as_deref(),
            Some("no ManagedCluster ghost")
        );
    }
}
