//! Exclusive names, a capability a kind opts into: an object claims a name (a Kafka topic
//! name, a Kafka user) in the clusters it selects, and where two claim the same name in one
//! cluster the older keeps it ([`crate::distribution::claim`]). [`NameClaims`] keeps which
//! object claims which name as the watch saw them, tells the kind's `on_object` whom a
//! change concerns, and gives a decision the live claims on its name.

use std::sync::{Mutex, PoisonError};

use kube::ResourceExt as _;
use kube::runtime::reflector::{ObjectRef, Store as Reflector};

use super::placement::{PlacementKind, Watched, object_name};
use crate::distribution::claim::{Claim, Claimed};

/// The names the objects of kind `K` claim, as last seen.
pub struct NameClaims<K: PlacementKind> {
    seen: Mutex<Claimed<ObjectRef<Watched<K>>>>,
    name_of: fn(&Watched<K>) -> String,
    finalizer: &'static str,
}

impl<K: PlacementKind> NameClaims<K> {
    /// Claims read by `name_of` from the object as stored (so one that does not decode
    /// keeps its claim); an object being deleted keeps its claim while it holds
    /// `finalizer`.
    pub fn new(name_of: fn(&Watched<K>) -> String, finalizer: &'static str) -> Self {
        Self {
            seen: Mutex::default(),
            name_of,
            finalizer,
        }
    }

    /// Records a watch event of `object` (`gone`: it is no more); the other objects to
    /// decide again when its claim changed, ended or is being released (`None`: it did not).
    pub fn observe(&self, object: &Watched<K>, gone: bool) -> Option<Vec<ObjectRef<Watched<K>>>> {
        let now = ((self.name_of)(object), object.metadata.generation);
        let releasing = object.metadata.deletion_timestamp.is_some() && !self.holds(object);
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .observe(
                &ObjectRef::from_obj(object),
                &object_name(object),
                now,
                gone,
                releasing,
            )
    }

    /// The claims on `name` of every object that claims it (and still does, as `objects`
    /// holds it), except those whose deletion already released it; `claim` makes a decoded
    /// object's claim.
    pub fn live(
        &self,
        objects: &Reflector<Watched<K>>,
        name: &str,
        claim: impl Fn(&K::Object) -> Option<Claim>,
    ) -> Vec<Claim> {
        let claiming = self
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .claiming(name);
        claiming
            .iter()
            .filter_map(|object| objects.get(object))
            .filter(|o| (self.name_of)(o) == name)
            .filter(|o| o.metadata.deletion_timestamp.is_none() || self.holds(o))
            .filter_map(|o| o.decode().ok())
            .filter_map(|o| claim(&o))
            .collect()
    }

    fn holds(&self, object: &Watched<K>) -> bool {
        object.finalizers().iter().any(|f| f == self.finalizer)
    }
}
