//! One owner per field: which placed object sets a field of an object in a member cluster
//! that another kind's delivery also names, decided in one place from every kind's claims.
//!
//! Today a CrossClusterScalePolicy claims `spec.replicas` of the Deployment it divides, and
//! a FederatedResource delivering that Deployment leaves the field out; without the claim
//! both would apply it and the agent's two field managers would undo each other's writes
//! for ever. Claims are read from the claiming objects as stored (a kind's
//! [`PlacementKind::field_claims`](super::placement::PlacementKind::field_claims) reads its
//! [`Lenient`](super::Lenient) object, so an object whose spec no longer decodes still
//! claims what it names). A kind that reads claims waits until every claiming kind has
//! listed its objects ([`FieldOwners::ready`]): deciding before would take the field back
//! for a moment after every restart.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};

use accord_common::distribution::PlacedKind;
use accord_crds::ClusterPlacement;
use tokio::sync::watch;

use crate::distribution::select::{Clusters, select_clusters};

/// The clusters a claim holds in.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimedClusters {
    /// This cluster.
    Named(String),
    /// Every cluster the placement selects.
    Placement(ClusterPlacement),
}

/// One field of one object in some member clusters.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldClaim {
    /// Where.
    pub clusters: ClaimedClusters,
    /// The object's namespace there.
    pub namespace: String,
    /// The object's kind (`Deployment`).
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// The field, as a dotted path (`spec.replicas`).
    pub field: String,
}

/// (cluster, namespace, kind, name) → the claimant that owns the field asked about, as
/// "Kind namespace/name".
pub type Owned = BTreeMap<(String, String, String, String), String>;

#[derive(Default)]
struct State {
    /// Claimant ("Kind namespace/name") → its kind and claims.
    claims: BTreeMap<String, (PlacedKind, Vec<FieldClaim>)>,
    /// Claiming kinds whose objects have not been listed yet.
    unlisted: BTreeSet<PlacedKind>,
}

/// Every kind's field claims.
pub struct FieldOwners {
    state: Mutex<State>,
    changes: watch::Sender<u64>,
}

impl FieldOwners {
    /// Claims of the kinds `claimants`; [`Self::ready`] once each has listed.
    pub fn new(claimants: &[PlacedKind]) -> Self {
        Self {
            state: Mutex::new(State {
                claims: BTreeMap::new(),
                unlisted: claimants.iter().copied().collect(),
            }),
            changes: watch::channel(0).0,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The claimant's name for an object of `kind` (`namespace/name`).
    pub fn claimant(kind: PlacedKind, object: &str) -> String {
        format!("{} {object}", kind.as_str())
    }

    /// `claimant` (of `kind`) claims exactly `claims` now (none: it claims nothing).
    pub fn claim(&self, kind: PlacedKind, claimant: String, claims: Vec<FieldClaim>) {
        let mut state = self.state();
        let changed = if claims.is_empty() {
            state.claims.remove(&claimant).is_some()
        } else {
            let before = state.claims.insert(claimant, (kind, claims.clone()));
            before.is_none_or(|(_, b)| b != claims)
        };
        drop(state);
        if changed {
            self.changed();
        }
    }

    /// `kind`'s objects were (re)listed and `present` are the claimants among them: claims
    /// of that kind's objects gone meanwhile go.
    pub fn listed(&self, kind: PlacedKind, present: &BTreeSet<String>) {
        let mut state = self.state();
        let before = state.claims.len();
        state
            .claims
            .retain(|claimant, (k, _)| *k != kind || present.contains(claimant));
        let changed = state.unlisted.remove(&kind) || state.claims.len() != before;
        drop(state);
        if changed {
            self.changed();
        }
    }

    /// Whether every claiming kind has listed its objects.
    pub fn ready(&self) -> bool {
        self.state().unlisted.is_empty()
    }

    /// Ticks on every change of the claims (and when they become ready).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Who owns `field` of the objects `wanted` accepts (by kind and name), per cluster of
    /// `clusters`. Of two claimants of one field, the first by name owns it.
    pub fn owners(
        &self,
        field: &str,
        clusters: &Clusters,
        wanted: impl Fn(&str, &str) -> bool,
    ) -> Owned {
        let state = self.state();
        let mut owned = Owned::new();
        for (claimant, (_, claims)) in &state.claims {
            for c in claims
                .iter()
                .filter(|c| c.field == field && wanted(&c.kind, &c.name))
            {
                let names = match &c.clusters {
                    ClaimedClusters::Named(name) => vec![name.clone()],
                    ClaimedClusters::Placement(placement) => select_clusters(placement, clusters)
                        .map(|s| s.into_iter().map(|s| s.name).collect())
                        .unwrap_or_default(),
                };
                for cluster in names {
                    owned
                        .entry((cluster, c.namespace.clone(), c.kind.clone(), c.name.clone()))
                        .or_insert_with(|| claimant.clone());
                }
            }
        }
        owned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replicas(cluster: &str, name: &str) -> FieldClaim {
        FieldClaim {
            clusters: ClaimedClusters::Named(cluster.into()),
            namespace: "prod".into(),
            kind: "Deployment".into(),
            name: name.into(),
            field: "spec.replicas".into(),
        }
    }

    const SCALE: PlacedKind = PlacedKind::CrossClusterScalePolicy;

    #[test]
    fn ready_once_every_claiming_kind_listed() {
        let owners = FieldOwners::new(&[SCALE]);
        let mut changes = owners.subscribe();
        assert!(!owners.ready());
        owners.listed(PlacedKind::FederatedResource, &BTreeSet::new());
        assert!(!owners.ready());
        owners.listed(SCALE, &BTreeSet::new());
        assert!(owners.ready());
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        // Listing again with nothing new changes nothing.
        owners.listed(SCALE, &BTreeSet::new());
        assert!(!changes.has_changed().unwrap());
    }

    #[test]
    fn the_first_claimant_owns_a_field_and_a_relist_drops_the_gone() {
        let owners = FieldOwners::new(&[SCALE]);
        let a = FieldOwners::claimant(SCALE, "prod/a");
        let b = FieldOwners::claimant(SCALE, "prod/b");
        owners.claim(SCALE, b.clone(), vec![replicas("east", "web")]);
        owners.claim(SCALE, a.clone(), vec![replicas("east", "web")]);
        let all = |_: &str, _: &str| true;
        let owned = owners.owners("spec.replicas", &Clusters::default(), all);
        let key = (
            "east".to_owned(),
            "prod".to_owned(),
            "Deployment".to_owned(),
            "web".to_owned(),
        );
        assert_eq!(owned[&key], "CrossClusterScalePolicy prod/a");
        assert!(
            owners
                .owners("spec.template", &Clusters::default(), all)
                .is_empty()
        );
        // a was deleted while the watch was down: the relist does not name it.
        owners.listed(SCALE, &BTreeSet::from([b.clone()]));
        let owned = owners.owners("spec.replicas", &Clusters::default(), all);
        assert_eq!(owned[&key], b);
        owners.claim(SCALE, b, Vec::new());
        assert!(
            owners
                .owners("spec.replicas", &Clusters::default(), all)
                .is_empty()
        );
    }
}
