//! What the console shows, as the hub process keeps it: one watch of the ManagedClusters,
//! one of each placed kind and one of the hub's own Events, each in a reflector. A page
//! reads these caches and nothing else; every change bumps [`Caches::changes`], which the
//! live pages follow.

use std::collections::BTreeMap;
use std::future::Future;

use accord_common::distribution::PlacedKind;
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Event;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store as Reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use tokio::sync::watch;

/// The component that reports the hub's Events (`Reporter::controller` of its writes).
pub const HUB_EVENT_REPORTER: &str = "accord-hub";

/// One placed kind's cache.
#[derive(Clone)]
pub struct KindCache {
    /// The kind.
    pub kind: PlacedKind,
    /// Its plural, as the API and the console's URLs name it.
    pub plural: String,
    /// Its API resource.
    pub resource: ApiResource,
    /// Its objects.
    pub objects: Reflector<DynamicObject>,
}

/// The console's caches; cheap to clone.
#[derive(Clone)]
pub struct Caches {
    /// Every ManagedCluster.
    pub clusters: Reflector<DynamicObject>,
    /// Every placed kind's objects, in [`PlacedKind::ALL`] order.
    pub kinds: Vec<KindCache>,
    /// The Events the hub reported.
    pub events: Reflector<Event>,
    /// Counts changes to any of the caches.
    pub changes: watch::Receiver<u64>,
}

/// The API resource of an Accord kind at the version the hub reads.
pub fn api_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(accord_crds::GROUP, accord_crds::VERSION, kind),
        plural,
    )
}

impl Caches {
    /// Caches filled by the returned future's watches (which run until dropped, retrying
    /// with backoff).
    pub fn start(kube: kube::Client) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (bump, changes) = watch::channel(0u64);
        let mut watches: Vec<BoxFuture<'static, ()>> = Vec::new();
        let cluster_kind = <accord_crds::ManagedCluster as Resource>::kind(&()).into_owned();
        let cluster_plural = <accord_crds::ManagedCluster as Resource>::plural(&()).into_owned();
        let (clusters, future) = dynamic(
            kube.clone(),
            api_resource(&cluster_kind, &cluster_plural),
            bump.clone(),
        );
        watches.push(future);
        let mut kinds = Vec::new();
        for kind in PlacedKind::ALL {
            let plural = crate::placements::plural(kind);
            let resource = api_resource(kind.as_str(), &plural);
            let (objects, future) = dynamic(kube.clone(), resource.clone(), bump.clone());
            watches.push(future);
            kinds.push(KindCache {
                kind,
                plural,
                resource,
                objects,
            });
        }
        let (events, writer) = reflector::store::<Event>();
        let config =
            watcher::Config::default().fields(&format!("reportingComponent={HUB_EVENT_REPORTER}"));
        let bump_events = bump.clone();
        watches.push(Box::pin(
            accord_common::watch::watcher(Api::<Event>::all(kube), config)
                .default_backoff()
                .modify(crate::controllers::without_managed_fields)
                .reflect(writer)
                .for_each(move |_| {
                    bump_events.send_modify(|n| *n += 1);
                    futures::future::ready(())
                }),
        ));
        let run = async move {
            futures::future::join_all(watches).await;
        };
        (
            Self {
                clusters,
                kinds,
                events,
                changes,
            },
            run,
        )
    }

    /// The cache of the kind whose plural is `plural`.
    pub fn kind(&self, plural: &str) -> Option<&KindCache> {
        self.kinds.iter().find(|k| k.plural == plural)
    }

    /// Every cache listed at least once.
    pub async fn wait_until_ready(&self) {
        let _ = self.clusters.wait_until_ready().await;
        for kind in &self.kinds {
            let _ = kind.objects.wait_until_ready().await;
        }
        let _ = self.events.wait_until_ready().await;
    }

    /// The Events about `kind` `namespace/name`, newest first.
    pub fn events_of(&self, kind: &str, namespace: &str, name: &str) -> Vec<std::sync::Arc<Event>> {
        let mut events: Vec<_> = self
            .events
            .state()
            .into_iter()
            .filter(|e| {
                let o = &e.involved_object;
                o.kind.as_deref() == Some(kind)
                    && o.namespace.as_deref() == Some(namespace)
                    && o.name.as_deref() == Some(name)
            })
            .collect();
        events.sort_by_key(|e| std::cmp::Reverse(event_time(e)));
        events
    }
}

/// When an Event last happened, as Unix seconds (0 when it says nothing).
pub fn event_time(e: &Event) -> i64 {
    e.series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0.as_second()))
        .or_else(|| e.last_timestamp.as_ref().map(|t| t.0.as_second()))
        .or_else(|| e.event_time.as_ref().map(|t| t.0.as_second()))
        .or_else(|| {
            e.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second())
        })
        .unwrap_or(0)
}

/// A reflector of `resource`'s objects (all namespaces) and the watch that fills it.
fn dynamic(
    kube: kube::Client,
    resource: ApiResource,
    bump: watch::Sender<u64>,
) -> (Reflector<DynamicObject>, BoxFuture<'static, ()>) {
    let writer = reflector::store::Writer::new(resource.clone());
    let store = writer.as_reader();
    let api = Api::<DynamicObject>::all_with(kube, &resource);
    let run = accord_common::watch::watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(crate::controllers::without_managed_fields)
        .reflect(writer)
        .for_each(move |_| {
            bump.send_modify(|n| *n += 1);
            futures::future::ready(())
        });
    (store, Box::pin(run))
}

/// Counts of `items` by key, for a summary line.
pub fn counts<'a>(items: impl IntoIterator<Item = &'a str>) -> BTreeMap<&'a str, usize> {
    let mut out = BTreeMap::new();
    for i in items {
        *out.entry(i).or_default() += 1;
    }
    out
}
