//! A kube-runtime watch of one resource in one namespace, feeding a reflector cache its
//! enforcer reads and telling the engine what changed. Kind-neutral: enforcers start one per
//! resource and namespace they need.
//!
//! Watching per namespace (not cluster-wide) keeps caches to the namespaces the agent works
//! in; where an enforcer must look across namespaces it narrows the watch with a label or
//! field selector instead ([`ResourceWatch::start_with`]). `slim` drops what the enforcer
//! never reads before an object is cached.

use std::fmt::Debug;
use std::hash::Hash;

use accord_common::runtime::AbortOnDrop;
use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::{EventSink, WatchEvent};

/// A running watch and its cache; dropping it stops the watch.
pub struct ResourceWatch<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    /// The cached objects.
    pub cache: Store<K>,
    _task: AbortOnDrop,
}

impl<K> ResourceWatch<K>
where
    K: accord_common::watch::AlwaysDecodes
        + Resource
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    /// Starts watching `resource` (its plural name, for events and messages) in
    /// `namespace`.
    pub fn start(
        client: &kube::Client,
        resource: &'static str,
        namespace: &str,
        slim: fn(&mut K),
        events: EventSink,
    ) -> Self
    where
        K: Resource<Scope = NamespaceResourceScope>,
    {
        let api = Api::<K>::namespaced(client.clone(), namespace);
        Self::start_with(
            api,
            watcher::Config::default(),
            resource,
            namespace,
            slim,
            events,
        )
    }

    /// Starts watching what `api` and `config` select. `scope` names what is watched in
    /// [`WatchEvent::Synced`] and [`WatchEvent::Failed`] (the namespace, or "" for a watch
    /// across namespaces); [`WatchEvent::Changed`] carries each object's own namespace.
    pub fn start_with(
        api: Api<K>,
        config: watcher::Config,
        resource: &'static str,
        scope: &str,
        slim: fn(&mut K),
        events: EventSink,
    ) -> Self {
        let (cache, writer) = reflector::store();
        let scope = scope.to_owned();
        let task = tokio::spawn(async move {
            let stream = accord_common::watch::watcher(api, config)
                .modify(slim)
                .default_backoff()
                .reflect(writer);
            let mut stream = std::pin::pin!(stream);
            let place = if scope.is_empty() {
                "the cluster".to_owned()
            } else {
                scope.clone()
            };
            while let Some(item) = stream.next().await {
                let event = match item {
                    Ok(Event::Apply(object) | Event::Delete(object)) => WatchEvent::Changed {
                        resource,
                        namespace: object.namespace().unwrap_or_default(),
                        name: object.name_any(),
                    },
                    Ok(Event::InitDone) => WatchEvent::Synced {
                        resource,
                        namespace: scope.clone(),
                    },
                    Ok(Event::Init | Event::InitApply(_)) => continue,
                    Err(e) => WatchEvent::Failed {
                        resource,
                        namespace: scope.clone(),
                        message: format!("watching {resource} in {place}: {e}"),
                    },
                };
                if !events.send(event).await {
                    return;
                }
            }
        });
        Self {
            cache,
            _task: AbortOnDrop(task),
        }
    }
}
