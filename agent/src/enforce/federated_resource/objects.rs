//! A watch of the objects of one type that carry Accord's delivery label, across all
//! namespaces, for types known only at run time (`DynamicObject`): it asks discovery what
//! serves the type, waits while none does, and keeps a cache the enforcer reads.
//!
//! Its events go to the engine as [`WatchEvent`]s whose `resource` is the type's name
//! (`<apiVersion>/<kind>`, interned once per type).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use accord_common::runtime::{AbortOnDrop, backoff};
use accord_crds::{DELIVERED_BY_FEDERATED_RESOURCE, DELIVERY_FIELD_MANAGER, OWNED_BY_LABEL};
use futures::StreamExt;
use kube::api::DynamicObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};

use super::discovery::{Discovery, Resolution, permission_hint, rbac_name};
use super::manifest::Gvk;
use crate::enforce::{EventSink, WatchEvent};

/// What one type's watch knows.
#[derive(Debug, Default)]
pub struct TypeCache {
    /// Whether the member serves the type (`None`: not asked yet).
    pub served: Option<bool>,
    /// Whether the cache holds the current objects (or the type is known not served).
    pub synced: bool,
    /// The last error while not synced.
    pub error: Option<String>,
    /// The objects, by (namespace, name).
    pub objects: BTreeMap<(String, String), Arc<DynamicObject>>,
}

/// A running watch of one type; dropping it stops the watch.
pub struct TypeWatch {
    /// The type's name in watch events.
    pub resource: &'static str,
    cache: Arc<Mutex<TypeCache>>,
    _task: AbortOnDrop,
}

impl TypeWatch {
    /// Starts watching the labelled objects of `gvk`.
    pub fn start(
        client: &kube::Client,
        discovery: &Discovery,
        gvk: Gvk,
        events: EventSink,
    ) -> Self {
        let resource = intern(&format!("{}/{}", gvk.api_version, gvk.kind));
        let cache = Arc::new(Mutex::new(TypeCache::default()));
        let task = tokio::spawn(run(
            client.clone(),
            discovery.clone(),
            gvk,
            resource,
            cache.clone(),
            events,
        ));
        Self {
            resource,
            cache,
            _task: AbortOnDrop(task),
        }
    }

    /// What the watch knows now.
    pub fn cache(&self) -> MutexGuard<'_, TypeCache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The one `&'static str` for `name`: watch events carry one, and the set of types is
/// small and bounded by what the assignments name.
pub fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(found) = names.get(name) {
        return found;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}

/// Drops what the judge never reads: the last-applied annotation, and the owned fields of
/// other managers (their names and times stay, to say who changed a field).
fn slim(object: &mut DynamicObject) {
    if let Some(a) = object.metadata.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    for entry in object.metadata.managed_fields.iter_mut().flatten() {
        if entry.manager.as_deref() != Some(DELIVERY_FIELD_MANAGER) {
            entry.fields_v1 = None;
        }
    }
}

fn lock(cache: &Mutex<TypeCache>) -> MutexGuard<'_, TypeCache> {
    cache.lock().unwrap_or_else(PoisonError::into_inner)
}

fn key(object: &DynamicObject) -> (String, String) {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// Resolves the type, then watches it; while it is not served, waits for discovery to
/// find new types (or a timer) and asks again.
async fn run(
    client: kube::Client,
    discovery: Discovery,
    gvk: Gvk,
    resource: &'static str,
    cache: Arc<Mutex<TypeCache>>,
    events: EventSink,
) {
    let mut served_changes = discovery.subscribe();
    let mut retry = backoff(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        served_changes.mark_unchanged();
        let event = match discovery.resolve(&client, &gvk).await {
            Ok(Resolution::Served {
                resource: api_resource,
                ..
            }) => {
                {
                    let mut c = lock(&cache);
                    c.served = Some(true);
                }
                retry = backoff(Duration::from_secs(1), Duration::from_secs(60));
                if !watch(&client, &api_resource, resource, &cache, &events).await {
                    return;
                }
                // The resource went away (its CRD was deleted): ask again.
                discovery.forget(&gvk);
                continue;
            }
            Ok(Resolution::NotServed) => {
                let mut c = lock(&cache);
                c.served = Some(false);
                c.synced = true;
                c.error = None;
                c.objects.clear();
                WatchEvent::Synced {
                    resource,
                    namespace: String::new(),
                }
            }
            Err(e) => {
                let message = format!("discovering {gvk}: {e}");
                let mut c = lock(&cache);
                if !c.synced {
                    c.error = Some(message.clone());
                }
                WatchEvent::Failed {
                    resource,
                    namespace: String::new(),
                    message,
                }
            }
        };
        if !events.send(event).await {
            return;
        }
        let _ = tokio::time::timeout(retry.next_delay(), served_changes.changed()).await;
    }
}

/// Watches the labelled objects of `api_resource` into `cache` until the resource is gone
/// (false once the engine is).
async fn watch(
    client: &kube::Client,
    api_resource: &kube::core::ApiResource,
    resource: &'static str,
    cache: &Mutex<TypeCache>,
    events: &EventSink,
) -> bool {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), api_resource);
    let config = watcher::Config::default().labels(&format!(
        "{OWNED_BY_LABEL}={DELIVERED_BY_FEDERATED_RESOURCE}"
    ));
    let stream = accord_common::watch::watcher(api, config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut listing = BTreeMap::new();
    while let Some(item) = stream.next().await {
        let event = match item {
            Ok(Event::Init) => {
                listing.clear();
                continue;
            }
            Ok(Event::InitApply(mut object)) => {
                slim(&mut object);
                listing.insert(key(&object), Arc::new(object));
                continue;
            }
            Ok(Event::InitDone) => {
                let mut c = lock(cache);
                c.objects = std::mem::take(&mut listing);
                c.synced = true;
                c.error = None;
                WatchEvent::Synced {
                    resource,
                    namespace: String::new(),
                }
            }
            Ok(Event::Apply(mut object)) => {
                slim(&mut object);
                let k = key(&object);
                lock(cache).objects.insert(k.clone(), Arc::new(object));
                WatchEvent::Changed {
                    resource,
                    namespace: k.0,
                    name: k.1,
                }
            }
            Ok(Event::Delete(object)) => {
                let k = key(&object);
                lock(cache).objects.remove(&k);
                WatchEvent::Changed {
                    resource,
                    namespace: k.0,
                    name: k.1,
                }
            }
            Err(e) => {
                let gone = matches!(
                    &e,
                    watcher::Error::InitialListFailed(kube::Error::Api(s))
                        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
                        if s.code == 404
                );
                if gone {
                    return true;
                }
                let forbidden = matches!(
                    &e,
                    watcher::Error::InitialListFailed(kube::Error::Api(s))
                        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
                        if s.code == 403
                );
                let message = if forbidden {
                    format!(
                        "watching {resource}: {}",
                        permission_hint("list and watch", &rbac_name(api_resource))
                    )
                } else {
                    format!("watching {resource}: {e}")
                };
                let mut c = lock(cache);
                if !c.synced {
                    c.error = Some(message.clone());
                }
                WatchEvent::Failed {
                    resource,
                    namespace: String::new(),
                    message,
                }
            }
        };
        if !events.send(event).await {
            return false;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_name_is_interned_once() {
        let a = intern("apps/v1/Deployment");
        let b = intern(&String::from("apps/v1/Deployment"));
        assert!(std::ptr::eq(a, b));
        assert_eq!(a, "apps/v1/Deployment");
    }
}
