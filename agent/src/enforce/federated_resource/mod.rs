//! The FederatedResource enforcer: delivers any Kubernetes objects to the member cluster
//! with server-side apply (field manager `accord`, forced), keeps them as the manifests say
//! (an owned field another manager changed is restored and counted as drift), reports each
//! object's state and health and the feedback values read back from them, and removes (or
//! orphans) what it delivered when asked, when a manifest goes, or when the
//! FederatedResource leaves this cluster.
//!
//! The pipeline, with I/O only at the ends:
//! - [`objects`]: one watch per type the assignments name, of the objects carrying
//!   Accord's delivery label across all namespaces (types come from [`discovery`], asked
//!   again on a miss, since CRDs get added);
//! - [`manifest`] prepares the manifests (order, namespace, marks, hash) and [`judge`]
//!   decides from the watches' caches and what the last apply recorded ([`health`] and
//!   [`feedback`] read the objects);
//! - [`apply`] applies, per manifest, and records each outcome for the judge.
//!
//! What Accord owns of an object is what its manifest names: fields another manager adds
//! (an HPA's replicas when the manifest has none, a sidecar a webhook injects, labels
//! added with `kubectl label`) are never touched, since server-side apply leaves them be.

pub mod apply;
pub mod discovery;
pub mod feedback;
pub mod health;
pub mod judge;
pub mod manifest;
pub mod objects;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, PoisonError};

use accord_common::distribution::{
    AssignmentSpec, FederatedResourceSpec, KindSpec, ManifestKey, PlacedKind, PlacedRef,
};
use accord_common::runtime::AbortOnDrop;
use futures::future::BoxFuture;
use tokio::sync::Semaphore;
use tracing::{debug, info};

use self::apply::{ApplyJob, KnownNamespaces, SharedMemory, remove_in_background};
use self::discovery::Discovery;
use self::judge::{Look, View, delivered_by};
use self::manifest::{CRD_KIND, Gvk, Prepared, prepare_all};
use self::objects::TypeWatch;
use super::{ApplyError, EventSink, Judgement, KindEnforcer, Mine, WatchEvent};
use crate::assignments::Assigned;

/// The enforcer's name, in logs and watch events.
pub const NAME: &str = "federated_resource";

/// Label of the ClusterRoles whose rules the agent's delivery ClusterRole aggregates: an
/// operator's ClusterRole labelled `accord.io/aggregate-to-agent: "true"` lets the agent
/// deliver that operator's custom resources.
pub const AGGREGATE_TO_AGENT_LABEL: &str = "accord.io/aggregate-to-agent";

/// How many FederatedResources' applies (or removals) run at once. The member API server serves the
/// agent's requests as one flow (API Priority and Fairness queues them together), so
/// without a bound a thousand applies at once put the agent's own Lease renewal behind
/// them: the renewal missed its deadline and every write stopped for 15–20 s at a time.
pub const MAX_CONCURRENT_APPLIES: usize = 16;

/// Delivers FederatedResource manifests.
pub struct FederatedResourceEnforcer {
    client: kube::Client,
    /// Permits for [`MAX_CONCURRENT_APPLIES`].
    applies: Arc<Semaphore>,
    discovery: Discovery,
    namespaces: KnownNamespaces,
    memory: SharedMemory,
    /// The assignments held.
    held: BTreeMap<PlacedRef, Held>,
    /// FederatedResources by the objects they name (delivered or pruned): type, namespace, name.
    interest: HashMap<(Gvk, String, String), BTreeSet<PlacedRef>>,
    /// The objects each held FederatedResource names, with the scopes they were worked out with:
    /// kept while its spec and those scopes stay, so a change to one FederatedResource
    /// prepares only that one's manifests, not every FederatedResource's.
    names: HashMap<PlacedRef, Named>,
    watches: BTreeMap<Gvk, TypeWatch>,
    by_resource: HashMap<&'static str, Gvk>,
    /// Removals of what FederatedResources that left delivered.
    removing: HashMap<PlacedRef, AbortOnDrop>,
}

impl FederatedResourceEnforcer {
    /// An enforcer acting through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            applies: Arc::new(Semaphore::new(MAX_CONCURRENT_APPLIES)),
            discovery: Discovery::default(),
            namespaces: KnownNamespaces::default(),
            memory: SharedMemory::default(),
            held: BTreeMap::new(),
            interest: HashMap::new(),
            names: HashMap::new(),
            watches: BTreeMap::new(),
            by_resource: HashMap::new(),
            removing: HashMap::new(),
        }
    }

    /// The manifests of `spec` prepared with what discovery says now.
    fn prepared(&self, placed: &PlacedRef, spec: &FederatedResourceSpec) -> Vec<Prepared> {
        prepare_all(spec, placed, |gvk| self.discovery.namespaced(gvk))
    }

    /// What the watches show of `keys`; `None` while a watch of their types has not
    /// listed yet (an event follows when it has).
    fn view<'a>(&self, keys: impl IntoIterator<Item = &'a ManifestKey>) -> Option<View> {
        let mut view = View::default();
        let mut by_type: BTreeMap<Gvk, Vec<&ManifestKey>> = BTreeMap::new();
        for key in keys {
            by_type.entry(Gvk::of(key)).or_default().push(key);
        }
        for (gvk, keys) in by_type {
            let cache = self.watches.get(&gvk)?.cache();
            if cache.served == Some(false) {
                view.not_served.insert(gvk);
                continue;
            }
            if !cache.synced {
                view.failed.insert(gvk, cache.error.clone()?);
                continue;
            }
            for key in keys {
                if let Some(object) = cache
                    .objects
                    .get(&(key.namespace.clone(), key.name.clone()))
                {
                    view.objects.insert(key.clone(), object.clone());
                }
            }
        }
        Some(view)
    }

    /// The objects `spec` names: its manifests' and those it prunes.
    fn keys(manifests: &[Prepared], spec: &FederatedResourceSpec) -> Vec<ManifestKey> {
        manifests
            .iter()
            .filter_map(Prepared::valid)
            .map(|d| d.key.clone())
            .chain(spec.prune.iter().cloned())
            .collect()
    }

    fn placed_using(&self, gvk: &Gvk) -> Vec<PlacedRef> {
        self.held
            .iter()
            .filter(|(_, held)| types_of(held.spec()).contains(gvk))
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn job(&self, placed: &PlacedRef, spec: FederatedResourceSpec, view: View) -> ApplyJob {
        let before = self
            .memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(placed)
            .cloned()
            .unwrap_or_default();
        ApplyJob {
            client: self.client.clone(),
            discovery: self.discovery.clone(),
            namespaces: self.namespaces.clone(),
            placed: placed.clone(),
            spec,
            view,
            before,
            memory: Some(self.memory.clone()),
        }
    }
}

/// Drops `placed` from the interest in `keys`.
fn lose_interest(
    interest: &mut HashMap<(Gvk, String, String), BTreeSet<PlacedRef>>,
    placed: &PlacedRef,
    keys: &[ManifestKey],
) {
    for key in keys {
        let entry = (Gvk::of(key), key.namespace.clone(), key.name.clone());
        if let Some(interested) = interest.get_mut(&entry) {
            interested.remove(placed);
            if interested.is_empty() {
                interest.remove(&entry);
            }
        }
    }
}

/// A held assignment: the book's own spec (shared, so an unchanged one is told by pointer,
/// not by comparing a thousand FederatedResources' manifests on every change), which is a
/// FederatedResource's.
#[derive(Clone)]
struct Held(Arc<AssignmentSpec>);

impl Held {
    fn spec(&self) -> &FederatedResourceSpec {
        static NONE: std::sync::LazyLock<FederatedResourceSpec> =
            std::sync::LazyLock::new(FederatedResourceSpec::default);
        // Always some: only FederatedResource assignments are held.
        FederatedResourceSpec::of(&self.0).unwrap_or(&NONE)
    }

    /// Whether `assigned` is this same assignment (`Arc` equality of an `Eq` type looks at
    /// the pointer first).
    fn is(&self, assigned: &Arc<AssignmentSpec>) -> bool {
        self.0 == *assigned
    }
}

/// The objects one FederatedResource names, and the scopes of their types when they were
/// worked out.
struct Named {
    scopes: Vec<(Gvk, bool)>,
    keys: Vec<ManifestKey>,
}

/// The types `spec` names: its manifests', Secrets when it delivers some, and those of
/// the objects it prunes.
fn types_of(spec: &FederatedResourceSpec) -> BTreeSet<Gvk> {
    spec.manifests
        .iter()
        .filter_map(manifest::gvk_of)
        .chain((!spec.secrets.is_empty()).then(|| Gvk::new("v1", "Secret")))
        .chain(spec.prune.iter().map(Gvk::of))
        .collect()
}

/// The FederatedResource a delivered object's annotation names (`<namespace>/<name>`).
fn placed_of(mark: &str) -> Option<PlacedRef> {
    let (namespace, name) = mark.split_once('/')?;
    Some(PlacedRef::new(
        PlacedKind::FederatedResource,
        namespace,
        name,
    ))
}

impl KindEnforcer for FederatedResourceEnforcer {
    type Spec = FederatedResourceSpec;

    const NAME: &'static str = NAME;

    fn assign(&mut self, mine: &Mine<'_, FederatedResourceSpec>, events: &EventSink) {
        // An unchanged spec is moved over, not copied again.
        let mut previous = std::mem::take(&mut self.held);
        let mut changed = HashSet::new();
        let held: BTreeMap<PlacedRef, Held> = mine
            .iter()
            .map(|&(placed, _, a)| {
                let kept = previous
                    .remove_entry(placed)
                    .filter(|(_, held)| held.is(&a.spec));
                kept.unwrap_or_else(|| {
                    changed.insert(placed.clone());
                    (placed.clone(), Held(a.spec.clone()))
                })
            })
            .collect();
        // What is left of the previous ones left this cluster.
        self.held = previous;
        self.removing
            .retain(|placed, task| !held.contains_key(placed) && !task.0.is_finished());
        for (placed, gone) in &self.held {
            if held.contains_key(placed) || self.removing.contains_key(placed) {
                continue;
            }
            let spec = gone.spec();
            info!(%placed, orphan = spec.orphan, "the FederatedResource left this cluster; removing what it delivered");
            let spec = FederatedResourceSpec {
                remove: true,
                ..spec.clone()
            };
            let job = ApplyJob {
                memory: None,
                ..self.job(placed, spec, View::default())
            };
            let task = tokio::spawn(bounded(self.applies.clone(), remove_in_background(job)));
            self.removing.insert(placed.clone(), AbortOnDrop(task));
        }
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|placed, _| held.contains_key(placed));
        self.held = held;
        // Interest changes only for FederatedResources that came, went or changed (or whose types'
        // scope discovery learnt since): an edit of one FederatedResource costs that one.
        let mut scopes: HashMap<Gvk, bool> = HashMap::new();
        let discovery = &self.discovery;
        let mut scope = |gvk: &Gvk| match scopes.get(gvk) {
            Some(namespaced) => *namespaced,
            None => *scopes
                .entry(gvk.clone())
                .or_insert_with(|| discovery.namespaced(gvk)),
        };
        let gone: Vec<PlacedRef> = self
            .names
            .keys()
            .filter(|placed| !self.held.contains_key(*placed))
            .cloned()
            .collect();
        for placed in gone {
            if let Some(named) = self.names.remove(&placed) {
                lose_interest(&mut self.interest, &placed, &named.keys);
            }
        }
        for (placed, held) in &self.held {
            let current = !changed.contains(placed)
                && self.names.get(placed).is_some_and(|named| {
                    named
                        .scopes
                        .iter()
                        .all(|(gvk, namespaced)| scope(gvk) == *namespaced)
                });
            if current {
                continue;
            }
            if let Some(named) = self.names.remove(placed) {
                lose_interest(&mut self.interest, placed, &named.keys);
            }
            let spec = held.spec();
            let manifests = prepare_all(spec, placed, |gvk| discovery.namespaced(gvk));
            let named = Named {
                scopes: types_of(spec)
                    .into_iter()
                    .map(|gvk| {
                        let namespaced = scope(&gvk);
                        (gvk, namespaced)
                    })
                    .collect(),
                keys: Self::keys(&manifests, spec),
            };
            for key in &named.keys {
                self.interest
                    .entry((Gvk::of(key), key.namespace.clone(), key.name.clone()))
                    .or_default()
                    .insert(placed.clone());
            }
            self.names.insert(placed.clone(), named);
        }
        let mut types: BTreeSet<Gvk> = BTreeSet::new();
        for (gvk, _) in self.names.values().flat_map(|named| &named.scopes) {
            if !types.contains(gvk) {
                types.insert(gvk.clone());
            }
        }
        self.watches.retain(|gvk, _| types.contains(gvk));
        for gvk in types {
            if !self.watches.contains_key(&gvk) {
                debug!(%gvk, "watching delivered objects");
                let watch =
                    TypeWatch::start(&self.client, &self.discovery, gvk.clone(), events.clone());
                self.by_resource.insert(watch.resource, gvk.clone());
                self.watches.insert(gvk, watch);
            }
        }
    }

    fn event(&mut self, event: WatchEvent) -> Vec<PlacedRef> {
        match event {
            WatchEvent::Changed {
                resource,
                namespace,
                name,
            } => {
                let Some(gvk) = self.by_resource.get(resource).cloned() else {
                    return Vec::new();
                };
                let mut interested = self
                    .interest
                    .get(&(gvk.clone(), namespace.clone(), name.clone()))
                    .cloned()
                    .unwrap_or_default();
                // The object names its FederatedResource.
                if let Some(watch) = self.watches.get(&gvk)
                    && let Some(object) = watch.cache().objects.get(&(namespace, name))
                    && let Some(placed) = placed_of(delivered_by(object))
                    && self.held.contains_key(&placed)
                {
                    interested.insert(placed);
                }
                if gvk.kind == CRD_KIND {
                    // A CRD changed: the types waiting for one may be served now.
                    self.discovery.nudge();
                    let waiting: BTreeSet<Gvk> = self
                        .watches
                        .iter()
                        .filter(|(_, w)| w.cache().served == Some(false))
                        .map(|(gvk, _)| gvk.clone())
                        .collect();
                    interested.extend(waiting.iter().flat_map(|gvk| self.placed_using(gvk)));
                }
                interested.into_iter().collect()
            }
            WatchEvent::Synced { resource, .. } | WatchEvent::Failed { resource, .. } => self
                .by_resource
                .get(resource)
                .map(|gvk| self.placed_using(gvk))
                .unwrap_or_default(),
        }
    }

    fn look(
        &self,
        placed: &PlacedRef,
        spec: &FederatedResourceSpec,
        assigned: &Assigned,
        apply_error: Option<&ApplyError>,
    ) -> Option<Judgement> {
        let manifests = self.prepared(placed, spec);
        let keys = Self::keys(&manifests, spec);
        let view = self.view(&keys)?;
        let memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        Some(judge::judge(&Look {
            placed,
            spec,
            revision: assigned.revision,
            manifests: &manifests,
            view: &view,
            memory: memory.get(placed),
            apply_error,
        }))
    }

    fn apply(
        &self,
        placed: &PlacedRef,
        spec: &FederatedResourceSpec,
        _assigned: &Assigned,
    ) -> BoxFuture<'static, Result<String, ApplyError>> {
        let manifests = self.prepared(placed, spec);
        let view = self.view(&Self::keys(&manifests, spec)).unwrap_or_default();
        let job = self.job(placed, spec.clone(), view);
        debug!(%placed, manifests = spec.manifests.len(), remove = spec.remove, "applying");
        Box::pin(bounded(self.applies.clone(), job.run()))
    }
}

/// Runs `work` once one of `permits` is free.
async fn bounded<T>(permits: Arc<Semaphore>, work: impl Future<Output = T>) -> T {
    // The semaphore is never closed, so acquiring fails never; without a permit the work
    // would still be right, only unbounded.
    let _permit = permits.acquire_owned().await.ok();
    work.await
}
