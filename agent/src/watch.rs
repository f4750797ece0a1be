//! Watches of what the agent manages: per namespace that holds a managed Deployment, one
//! kube-runtime watcher on Deployments and one on HorizontalPodAutoscalers, each feeding a
//! reflector cache the engine reads, and telling the engine what changed.
//!
//! Watching per namespace (not cluster-wide) keeps the cache to the namespaces the agent
//! works in; the cached objects are slimmed to the fields the agent reads.

use std::fmt::Debug;
use std::hash::Hash;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector::store::Writer};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::observe::{slim_deployment, slim_hpa};

/// What a watch is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchedKind {
    /// `apps/v1` Deployments.
    Deployments,
    /// `autoscaling/v2` HorizontalPodAutoscalers.
    Hpas,
}

impl WatchedKind {
    /// Plural resource name, for messages.
    pub fn plural(self) -> &'static str {
        match self {
            Self::Deployments => "deployments",
            Self::Hpas => "horizontalpodautoscalers",
        }
    }
}

/// A change seen by a watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// An object was added, changed or deleted.
    Changed {
        /// What changed.
        kind: WatchedKind,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A (re)list completed: the cache holds the namespace's current objects.
    Synced {
        /// What was listed.
        kind: WatchedKind,
        /// The namespace.
        namespace: String,
    },
    /// The watch failed; it is retried with backoff.
    Failed {
        /// What failed to be watched.
        kind: WatchedKind,
        /// The namespace.
        namespace: String,
        /// The error.
        message: String,
    },
}

/// The watches of one namespace and their caches. Dropping it stops the watches.
pub struct NamespaceWatch {
    /// Cached Deployments.
    pub deployments: Store<Deployment>,
    /// Cached HorizontalPodAutoscalers.
    pub hpas: Store<HorizontalPodAutoscaler>,
    deployments_synced: bool,
    hpas_synced: bool,
    /// The last watch error while not synced, if any.
    pub error: Option<String>,
    tasks: [JoinHandle<()>; 2],
}

impl NamespaceWatch {
    /// Starts watching `namespace`, sending what changes through `tx` (wrapped by `wrap`).
    pub fn start<T: Send + 'static>(
        client: &kube::Client,
        namespace: &str,
        tx: mpsc::Sender<T>,
        wrap: fn(WatchEvent) -> T,
    ) -> Self {
        let (deployments, deployment_writer) = reflector::store();
        let (hpas, hpa_writer) = reflector::store();
        let deployment_task = tokio::spawn(watch_kind(
            Api::<Deployment>::namespaced(client.clone(), namespace),
            deployment_writer,
            slim_deployment,
            WatchedKind::Deployments,
            namespace.to_owned(),
            tx.clone(),
            wrap,
        ));
        let hpa_task = tokio::spawn(watch_kind(
            Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), namespace),
            hpa_writer,
            slim_hpa,
            WatchedKind::Hpas,
            namespace.to_owned(),
            tx,
            wrap,
        ));
        Self {
            deployments,
            hpas,
            deployments_synced: false,
            hpas_synced: false,
            error: None,
            tasks: [deployment_task, hpa_task],
        }
    }

    /// Whether both caches have been filled at least once.
    pub fn synced(&self) -> bool {
        self.deployments_synced && self.hpas_synced
    }

    /// Records that a list of `kind` completed.
    pub fn mark_synced(&mut self, kind: WatchedKind) {
        match kind {
            WatchedKind::Deployments => self.deployments_synced = true,
            WatchedKind::Hpas => self.hpas_synced = true,
        }
        if self.synced() {
            self.error = None;
        }
    }
}

impl Drop for NamespaceWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn watch_kind<K, T>(
    api: Api<K>,
    writer: Writer<K>,
    slim: fn(&mut K),
    kind: WatchedKind,
    namespace: String,
    tx: mpsc::Sender<T>,
    wrap: fn(WatchEvent) -> T,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let stream = watcher(api).modify(slim).default_backoff().reflect(writer);
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        let event = match item {
            Ok(Event::Apply(object) | Event::Delete(object)) => WatchEvent::Changed {
                kind,
                namespace: namespace.clone(),
                name: object.name_any(),
            },
            Ok(Event::InitDone) => WatchEvent::Synced {
                kind,
                namespace: namespace.clone(),
            },
            Ok(Event::Init | Event::InitApply(_)) => continue,
            Err(e) => WatchEvent::Failed {
                kind,
                namespace: namespace.clone(),
                message: format!("watching {} in {namespace}: {e}", kind.plural()),
            },
        };
        if tx.send(wrap(event)).await.is_err() {
            return;
        }
    }
}

fn watcher<K>(
    api: Api<K>,
) -> impl futures::Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher::watcher(api, watcher::Config::default())
}
