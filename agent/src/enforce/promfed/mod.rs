//! The Prometheus federation enforcer (PrometheusFederation): renders the whole config of
//! each federation Prometheus from every PrometheusFederation assigned to its namespace,
//! keeps it in ConfigMap `prometheus-federation` there, and reports what the reloader
//! beside Prometheus (`accord-agent reload`) confirmed.
//!
//! It watches the federation-source Services of the whole cluster (label
//! `accord.io/federation-source=true`), the Namespaces when a PrometheusFederation selects
//! tenants by label, and ConfigMap `prometheus-federation` (field selector) in its own
//! namespace and in each namespace a PrometheusFederation names — per namespace, because
//! the agent may touch ConfigMaps only where it is granted to (its own namespace by its
//! manifests; another one by a Role there, as `deploy/manifests/prometheus-federation.yaml`
//! grants in `monitoring`). Delivery is the reloader's part: it writes the file, reloads
//! Prometheus, checks what Prometheus loaded and annotates the ConfigMap; those annotations
//! come back here through the ConfigMap watch and become the placement's state. A ConfigMap
//! the agent wrote for a namespace that no PrometheusFederation uses any more is deleted
//! (one left behind in the agent's own namespace while the agent was down, too).

pub mod judge;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use accord_common::distribution::{PlacedRef, PlacementState, PromfedSpec};
use accord_common::promfed::CONFIG_MAP_NAME;
use accord_common::runtime::{AbortOnDrop, backoff};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use kube::api::DeleteParams;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tracing::{debug, info, warn};

use self::judge::{GroupRender, Verdict};
use super::watch::ResourceWatch;
use super::{
    Action, ApplyError, EventSink, Judgement, KindEnforcer, Mine, WatchEvent, server_side_apply,
};
use crate::assignments::Assigned;
use crate::report::Report;

/// Plural name of the Services resource, in watch events.
pub const SERVICES: &str = "services";
/// Plural name of the Namespaces resource, in watch events.
pub const NAMESPACES: &str = "namespaces";
/// Plural name of the ConfigMaps resource, in watch events.
pub const CONFIG_MAPS: &str = "configmaps";

/// A watch and whether it has listed yet.
struct Watched<K: Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    watch: ResourceWatch<K>,
    synced: bool,
    /// The last watch error while not synced, if any.
    error: Option<String>,
}

impl<K> Watched<K>
where
    K: accord_common::watch::AlwaysDecodes
        + Resource
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    fn start(
        api: Api<K>,
        config: watcher::Config,
        resource: &'static str,
        scope: &str,
        slim: fn(&mut K),
        events: &EventSink,
    ) -> Self {
        Self {
            watch: ResourceWatch::start_with(api, config, resource, scope, slim, events.clone()),
            synced: false,
            error: None,
        }
    }

    fn objects(&self) -> Vec<Arc<K>> {
        self.watch.cache.state()
    }
}

/// Renders and delivers federation configs.
pub struct PromfedEnforcer {
    client: kube::Client,
    /// Namespace of the ConfigMap when a PrometheusFederation names none: the agent's.
    agent_namespace: String,
    /// Assigned PrometheusFederations by ConfigMap namespace.
    groups: BTreeMap<String, BTreeMap<PlacedRef, PromfedSpec>>,
    services: Option<Watched<Service>>,
    namespaces: Option<Watched<Namespace>>,
    /// ConfigMap `prometheus-federation` by namespace: the agent's own and every group's.
    config_maps: HashMap<String, Watched<ConfigMap>>,
    /// Deletions of ConfigMaps no PrometheusFederation uses any more, by namespace.
    deleting: HashMap<String, AbortOnDrop>,
    events: Option<EventSink>,
}

impl PromfedEnforcer {
    /// An enforcer acting through `client`; ConfigMaps go to `agent_namespace` unless a
    /// PrometheusFederation names another.
    pub fn new(client: kube::Client, agent_namespace: String) -> Self {
        Self {
            client,
            agent_namespace,
            groups: BTreeMap::new(),
            services: None,
            namespaces: None,
            config_maps: HashMap::new(),
            deleting: HashMap::new(),
            events: None,
        }
    }

    fn group_namespace(&self, spec: &PromfedSpec) -> String {
        if spec.config_map_namespace.is_empty() {
            self.agent_namespace.clone()
        } else {
            spec.config_map_namespace.clone()
        }
    }

    fn all_placed(&self) -> Vec<PlacedRef> {
        self.groups
            .values()
            .flat_map(|g| g.keys().cloned())
            .collect()
    }

    fn by_labels(&self) -> Vec<PlacedRef> {
        self.groups
            .values()
            .flat_map(|g| g.iter())
            .filter(|(_, s)| s.tenant_namespaces.is_empty())
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn needs_namespaces(&self) -> bool {
        !self.by_labels().is_empty()
    }

    /// Renders the config of the group in `namespace` from what the watches hold.
    fn render(&self, namespace: &str) -> Option<GroupRender> {
        let group = self.groups.get(namespace)?;
        let namespaces = self
            .namespaces
            .as_ref()
            .map(Watched::objects)
            .unwrap_or_default();
        let services = self
            .services
            .as_ref()
            .map(Watched::objects)
            .unwrap_or_default();
        let namespaces: Vec<&Namespace> = namespaces.iter().map(AsRef::as_ref).collect();
        let services: Vec<&Service> = services.iter().map(AsRef::as_ref).collect();
        Some(judge::render_group(group, &namespaces, &services))
    }

    /// Why the caches cannot be judged from yet, if they cannot: `Some(None)` while they
    /// are still listing, `Some(Some(error))` when a watch fails before listing.
    fn not_ready(&self, namespace: &str) -> Option<Option<String>> {
        fn state<K: Resource + 'static>(w: Option<&Watched<K>>) -> Option<Option<String>>
        where
            K::DynamicType: Eq + std::hash::Hash + Clone,
        {
            match w {
                Some(w) if w.synced => None,
                Some(w) => Some(w.error.clone()),
                None => Some(None),
            }
        }
        let mut pending = None;
        for s in [
            state(self.services.as_ref()),
            state(self.config_maps.get(namespace)),
            if self.needs_namespaces() {
                state(self.namespaces.as_ref())
            } else {
                None
            },
        ]
        .into_iter()
        .flatten()
        {
            match s {
                Some(error) => return Some(Some(error)),
                None => pending = Some(None),
            }
        }
        pending
    }

    fn config_map(&self, namespace: &str) -> Option<Arc<ConfigMap>> {
        self.config_maps
            .get(namespace)?
            .watch
            .cache
            .get(&ObjectRef::new(CONFIG_MAP_NAME).within(namespace))
    }

    /// Deletes the agent's ConfigMaps in the watched namespaces that no PrometheusFederation uses.
    fn sweep(&mut self) {
        self.deleting.retain(|_, task| !task.0.is_finished());
        let orphans: Vec<String> = self
            .config_maps
            .iter()
            .filter(|(ns, w)| w.synced && !self.groups.contains_key(*ns))
            .filter(|(ns, _)| !self.deleting.contains_key(*ns))
            .filter(|(ns, w)| {
                w.watch
                    .cache
                    .get(&ObjectRef::new(CONFIG_MAP_NAME).within(ns))
                    .is_some_and(|cm| judge::is_ours(&cm))
            })
            .map(|(ns, _)| ns.clone())
            .collect();
        for namespace in orphans {
            info!(%namespace, "deleting ConfigMap {CONFIG_MAP_NAME}: no PrometheusFederation uses it");
            let task = tokio::spawn(delete_config_map(self.client.clone(), namespace.clone()));
            self.deleting.insert(namespace, AbortOnDrop(task));
        }
    }

    /// Has the engine look at every PrometheusFederation of the group in `namespace` again
    /// (its shared config changed because a PrometheusFederation joined or left it).
    fn nudge(&self, namespace: &str) {
        let Some(events) = self.events.clone() else {
            return;
        };
        let namespace = namespace.to_owned();
        tokio::spawn(async move {
            events
                .send(WatchEvent::Changed {
                    resource: CONFIG_MAPS,
                    namespace,
                    name: CONFIG_MAP_NAME.to_owned(),
                })
                .await
        });
    }
}

/// Deletes ConfigMap `prometheus-federation` in `namespace`, retrying with backoff until it
/// is gone (the task is aborted if a PrometheusFederation takes the namespace again).
async fn delete_config_map(client: kube::Client, namespace: String) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let mut retry = backoff(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        match api.delete(CONFIG_MAP_NAME, &DeleteParams::default()).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 404 => return,
            Err(e) => {
                warn!(%namespace, error = %e, "deleting ConfigMap {CONFIG_MAP_NAME} failed; retrying");
                tokio::time::sleep(retry.next_delay()).await;
            }
        }
    }
}

impl KindEnforcer for PromfedEnforcer {
    type Spec = PromfedSpec;

    const NAME: &'static str = "promfed";

    fn assign(&mut self, mine: &Mine<'_, PromfedSpec>, events: &EventSink) {
        self.events = Some(events.clone());
        let before = std::mem::take(&mut self.groups);
        for &(placed, spec, _) in mine {
            let namespace = self.group_namespace(spec);
            self.groups
                .entry(namespace)
                .or_default()
                .insert(placed.clone(), spec.clone());
        }
        // A group whose members changed renders differently for every member.
        let members = |g: &BTreeMap<PlacedRef, PromfedSpec>| -> BTreeSet<PlacedRef> {
            g.keys().cloned().collect()
        };
        for (namespace, group) in &self.groups {
            if before.get(namespace).map(members) != Some(members(group)) {
                self.nudge(namespace);
            }
        }
        // The sweep runs first: it deletes what a group that just went left behind, while
        // that namespace's cache still holds it.
        self.sweep();
        let wanted: BTreeSet<String> = std::iter::once(self.agent_namespace.clone())
            .chain(self.groups.keys().cloned())
            .collect();
        self.config_maps.retain(|ns, _| wanted.contains(ns));
        for namespace in wanted {
            if !self.config_maps.contains_key(&namespace) {
                let config =
                    watcher::Config::default().fields(&format!("metadata.name={CONFIG_MAP_NAME}"));
                let api = Api::namespaced(self.client.clone(), &namespace);
                let watch = Watched::start(
                    api,
                    config,
                    CONFIG_MAPS,
                    &namespace,
                    judge::slim_config_map,
                    events,
                );
                self.config_maps.insert(namespace, watch);
            }
        }
        if self.groups.is_empty() {
            self.services = None;
        } else if self.services.is_none() {
            debug!("watching federation-source Services");
            let config = watcher::Config::default()
                .labels(&format!("{}=true", accord_common::promfed::SOURCE_LABEL));
            self.services = Some(Watched::start(
                Api::all(self.client.clone()),
                config,
                SERVICES,
                "",
                judge::slim_service,
                events,
            ));
        }
        if !self.needs_namespaces() {
            self.namespaces = None;
        } else if self.namespaces.is_none() {
            self.namespaces = Some(Watched::start(
                Api::all(self.client.clone()),
                watcher::Config::default(),
                NAMESPACES,
                "",
                judge::slim_namespace,
                events,
            ));
        }
        let groups = &self.groups;
        self.deleting.retain(|ns, _| !groups.contains_key(ns));
    }

    fn event(&mut self, event: WatchEvent) -> Vec<PlacedRef> {
        match event {
            WatchEvent::Changed {
                resource: CONFIG_MAPS,
                namespace,
                ..
            } => {
                self.sweep();
                self.groups
                    .get(&namespace)
                    .map(|g| g.keys().cloned().collect())
                    .unwrap_or_default()
            }
            WatchEvent::Changed {
                resource: NAMESPACES,
                ..
            } => self.by_labels(),
            WatchEvent::Changed { .. } => self.all_placed(),
            WatchEvent::Synced {
                resource,
                namespace,
            } => {
                match resource {
                    SERVICES => self.services.as_mut().map(|w| w.synced = true),
                    NAMESPACES => self.namespaces.as_mut().map(|w| w.synced = true),
                    _ => self
                        .config_maps
                        .get_mut(&namespace)
                        .map(|w| w.synced = true),
                };
                if resource == CONFIG_MAPS {
                    self.sweep();
                }
                self.all_placed()
            }
            WatchEvent::Failed {
                resource,
                namespace,
                message,
            } => {
                let error = Some(message);
                let changed = match resource {
                    SERVICES => self
                        .services
                        .as_mut()
                        .filter(|w| !w.synced)
                        .map(|w| w.error = error),
                    NAMESPACES => self
                        .namespaces
                        .as_mut()
                        .filter(|w| !w.synced)
                        .map(|w| w.error = error),
                    _ => self
                        .config_maps
                        .get_mut(&namespace)
                        .filter(|w| !w.synced)
                        .map(|w| w.error = error),
                };
                // Once listed, a cache stays valid while its watch retries.
                changed.map(|()| self.all_placed()).unwrap_or_default()
            }
        }
    }

    fn look(
        &self,
        placed: &PlacedRef,
        spec: &PromfedSpec,
        assigned: &Assigned,
        apply_error: Option<&ApplyError>,
    ) -> Option<Judgement> {
        let namespace = self.group_namespace(spec);
        match self.not_ready(&namespace) {
            None => {}
            Some(None) => return None,
            Some(Some(error)) => {
                return Some(Judgement {
                    report: Report::without_object(
                        PlacementState::Unavailable,
                        error,
                        assigned.revision,
                    ),
                    action: Action::Unknown,
                });
            }
        }
        let render = self.render(&namespace)?;
        let config_map = self.config_map(&namespace);
        let verdict = judge::verdict(&render, placed, config_map.as_deref());
        let action = match verdict {
            Verdict::NeedsApply => Action::Apply {
                from_version: config_map
                    .as_ref()
                    .and_then(|c| c.metadata.resource_version.clone())
                    .unwrap_or_default(),
            },
            _ => Action::Settled,
        };
        Some(Judgement {
            report: judge::report(
                &render,
                placed,
                assigned.revision,
                &verdict,
                config_map.as_deref(),
                apply_error,
            ),
            action,
        })
    }

    fn apply(
        &self,
        placed: &PlacedRef,
        spec: &PromfedSpec,
        _assigned: &Assigned,
    ) -> BoxFuture<'static, Result<String, ApplyError>> {
        let namespace = self.group_namespace(spec);
        let current = self
            .config_map(&namespace)
            .and_then(|c| c.metadata.resource_version.clone())
            .unwrap_or_default();
        let Some(render) = self.render(&namespace) else {
            return Box::pin(std::future::ready(Ok(current)));
        };
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &namespace);
        let patch = judge::config_map_patch(&namespace, &render.rendered);
        let placed = placed.clone();
        let hash = render.rendered.hash.clone();
        let jobs = render.rendered.jobs;
        Box::pin(async move {
            let object = format!("ConfigMap {namespace}/{CONFIG_MAP_NAME}");
            let version = server_side_apply(api, CONFIG_MAP_NAME, &patch, object).await?;
            info!(%placed, %namespace, %hash, jobs, "wrote federation config");
            Ok(version)
        })
    }
}
