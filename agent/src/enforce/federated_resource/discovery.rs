//! Which resource serves each type manifests name, as the member's API server says:
//! asked once per type and cached, asked again on a miss (a CRD may have been added since),
//! shared by the applies and the watches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kube::core::discovery::Scope;
use kube::core::{ApiResource, GroupVersionKind};
use kube::error::DiscoveryError;
use tokio::sync::watch;

use super::manifest::Gvk;

/// What the member's API server says of a type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Served by `resource`.
    Served {
        /// The resource (plural name, group, version).
        resource: ApiResource,
        /// Whether its objects live in namespaces.
        namespaced: bool,
    },
    /// Not served (yet: a CRD may add it).
    NotServed,
}

/// The discovery cache: cheap to clone, shared.
#[derive(Clone)]
pub struct Discovery {
    cache: Arc<Mutex<HashMap<Gvk, Resolution>>>,
    /// Bumped whenever a type starts being served, so watches waiting for it retry.
    served: Arc<watch::Sender<u64>>,
}

impl Default for Discovery {
    fn default() -> Self {
        Self {
            cache: Arc::default(),
            served: Arc::new(watch::channel(0).0),
        }
    }
}

impl Discovery {
    /// What was last found for `gvk`, without asking.
    pub fn cached(&self, gvk: &Gvk) -> Option<Resolution> {
        self.lock().get(gvk).cloned()
    }

    /// Whether `gvk` is namespaced: as the member said, or by the hint when it has not said
    /// yet (any kind is namespaced but the well-known cluster-scoped ones).
    pub fn namespaced(&self, gvk: &Gvk) -> bool {
        match self.cached(gvk) {
            Some(Resolution::Served { namespaced, .. }) => namespaced,
            _ => !gvk.cluster_scoped_by_hint(),
        }
    }

    /// What serves `gvk`: cached when served; asked otherwise (a type not served before may
    /// be now).
    pub async fn resolve(
        &self,
        client: &kube::Client,
        gvk: &Gvk,
    ) -> Result<Resolution, kube::Error> {
        if let Some(served @ Resolution::Served { .. }) = self.cached(gvk) {
            return Ok(served);
        }
        let key = GroupVersionKind::gvk(gvk.group(), gvk.version(), &gvk.kind);
        let resolution = match kube::discovery::pinned_kind(client, &key).await {
            Ok((resource, caps)) => Resolution::Served {
                resource,
                namespaced: caps.scope == Scope::Namespaced,
            },
            Err(kube::Error::Api(status)) if status.code == 404 => Resolution::NotServed,
            Err(kube::Error::Discovery(
                DiscoveryError::MissingKind(_)
                | DiscoveryError::MissingApiGroup(_)
                | DiscoveryError::MissingResource(_)
                | DiscoveryError::EmptyApiGroup(_),
            )) => Resolution::NotServed,
            Err(e) => return Err(e),
        };
        let before = self.lock().insert(gvk.clone(), resolution.clone());
        if matches!(resolution, Resolution::Served { .. })
            && !matches!(before, Some(Resolution::Served { .. }))
        {
            self.served.send_modify(|n| *n += 1);
        }
        Ok(resolution)
    }

    /// Forgets what serves `gvk` (its resource answered 404: a CRD went away).
    pub fn forget(&self, gvk: &Gvk) {
        self.lock().remove(gvk);
    }

    /// Tells the watches waiting for types to be served to ask again (a CRD changed).
    pub fn nudge(&self) {
        self.served.send_modify(|n| *n += 1);
    }

    /// Changes whenever a type may have started being served.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.served.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Gvk, Resolution>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `resource.group` (or `resource` in the core group), as RBAC rules spell it.
pub fn rbac_name(resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

/// What to add to a 403's message: which permission the agent lacks and how to grant it.
pub fn permission_hint(verb: &str, resource: &str) -> String {
    format!(
        "the agent may not {verb} {resource}; grant it with a ClusterRole labelled \
         {}: \"true\"",
        super::AGGREGATE_TO_AGENT_LABEL
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forbidden_apply_says_which_permission_to_grant_and_how() {
        let deployments = ApiResource {
            group: "apps".into(),
            version: "v1".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            plural: "deployments".into(),
        };
        assert_eq!(
            permission_hint("patch", &rbac_name(&deployments)),
            "the agent may not patch deployments.apps; grant it with a ClusterRole labelled \
             accord.io/aggregate-to-agent: \"true\""
        );
        let config_maps = ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        };
        assert_eq!(rbac_name(&config_maps), "configmaps");
    }

    #[test]
    fn scope_falls_back_to_the_hint_until_the_member_answers() {
        let discovery = Discovery::default();
        assert!(!discovery.namespaced(&Gvk::new("v1", "Namespace")));
        assert!(discovery.namespaced(&Gvk::new("example.com/v1", "Widget")));
        let widget = Gvk::new("example.com/v1", "Widget");
        discovery.lock().insert(
            widget.clone(),
            Resolution::Served {
                resource: ApiResource::from_gvk(&GroupVersionKind::gvk(
                    "example.com",
                    "v1",
                    "Widget",
                )),
                namespaced: false,
            },
        );
        assert!(!discovery.namespaced(&widget));
    }
}
