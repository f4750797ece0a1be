//! Talking to a cluster for `accord-hub install` and `accord-agent join`: connecting (and
//! saying clearly when it cannot), and server-side applying rendered objects.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::{admissionregistration, apps, core, networking, policy, rbac};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::NamespaceResourceScope;
use kube::{Api, Client, Resource};
use serde_json::Value;

/// How long the first request to the API server may take before it counts as unreachable.
const REACH_TIMEOUT: Duration = Duration::from_secs(15);

/// Connecting to, or applying to, a cluster failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The kubeconfig could not be read or used.
    #[error("cannot use kubeconfig {path}")]
    Kubeconfig {
        /// The file (or `$KUBECONFIG`/in-cluster when not given).
        path: String,
        /// What kube said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Nothing answered at the API server's address, or TLS failed.
    #[error(
        "cannot reach the Kubernetes API server at {url}: check that the cluster is running \
         and that --kubeconfig/--context point at it"
    )]
    Unreachable {
        /// The server URL from the kubeconfig.
        url: String,
        /// The transport error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The API server did not answer within [`REACH_TIMEOUT`].
    #[error("the Kubernetes API server at {url} did not answer within {REACH_TIMEOUT:?}")]
    Timeout {
        /// The server URL.
        url: String,
    },
    /// The API server rejected the credentials.
    #[error(
        "the Kubernetes API server at {url} rejected the kubeconfig's credentials (401 \
         Unauthorized): {message}"
    )]
    Unauthorized {
        /// The server URL.
        url: String,
        /// The API server's message.
        message: String,
    },
    /// The API server refused an apply with 403 although the preflight check passed (an
    /// admission policy, or permissions changed meanwhile).
    #[error(
        "permission denied applying {kind} {object} (server-side apply needs create and patch \
         of {resource}{scope}); the API server said: {message}"
    )]
    Forbidden {
        /// Kind of the object.
        kind: String,
        /// `namespace/name` or `name`.
        object: String,
        /// `plural.group`.
        resource: String,
        /// ` in namespace NS` or ` cluster-wide`.
        scope: String,
        /// The API server's message.
        message: String,
    },
    /// Any other refusal of an apply.
    #[error("applying {kind} {object} failed")]
    Apply {
        /// Kind of the object.
        kind: String,
        /// `namespace/name` or `name`.
        object: String,
        /// What kube said.
        #[source]
        source: kube::Error,
    },
    /// A rendered object has a kind this installer does not know how to address (a bug).
    #[error("no API resource known for kind {0}")]
    UnknownKind(String),
}

/// The API resource of a kind `install` or `join` renders, and whether it is namespaced.
pub fn api_resource(kind: &str) -> Option<(ApiResource, bool)> {
    fn namespaced<K: Resource<DynamicType = ()>>() -> (ApiResource, bool)
    where
        K::Scope: 'static,
    {
        let scoped =
            std::any::TypeId::of::<K::Scope>() == std::any::TypeId::of::<NamespaceResourceScope>();
        (ApiResource::erase::<K>(&()), scoped)
    }
    Some(match kind {
        "Namespace" => namespaced::<core::v1::Namespace>(),
        "CustomResourceDefinition" => namespaced::<CustomResourceDefinition>(),
        "ServiceAccount" => namespaced::<core::v1::ServiceAccount>(),
        "Service" => namespaced::<core::v1::Service>(),
        "Secret" => namespaced::<core::v1::Secret>(),
        "ClusterRole" => namespaced::<rbac::v1::ClusterRole>(),
        "ClusterRoleBinding" => namespaced::<rbac::v1::ClusterRoleBinding>(),
        "Role" => namespaced::<rbac::v1::Role>(),
        "RoleBinding" => namespaced::<rbac::v1::RoleBinding>(),
        "Deployment" => namespaced::<apps::v1::Deployment>(),
        "StatefulSet" => namespaced::<apps::v1::StatefulSet>(),
        "NetworkPolicy" => namespaced::<networking::v1::NetworkPolicy>(),
        "PodDisruptionBudget" => namespaced::<policy::v1::PodDisruptionBudget>(),
        "ValidatingWebhookConfiguration" => {
            namespaced::<admissionregistration::v1::ValidatingWebhookConfiguration>()
        }
        _ => return None,
    })
}

/// `plural.group` (or `plural` for the core group), as RBAC and error messages name it.
pub fn resource_name(resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

/// Kind, name and namespace of a rendered object.
pub fn identity(object: &Value) -> (&str, &str, Option<&str>) {
    (
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default(),
        object["metadata"]["namespace"].as_str(),
    )
}

/// `namespace/name` or `name`.
pub fn display_name(name: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

/// A client for the cluster `kubeconfig` (and `context`) points at, and its URL.
pub async fn connect(
    kubeconfig: Option<&PathBuf>,
    context: Option<&str>,
) -> Result<(Client, String), ApplyError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    let described = kubeconfig.map_or_else(
        || "(default: $KUBECONFIG, ~/.kube/config or in-cluster)".to_owned(),
        |p| p.display().to_string(),
    );
    let bad = |source: Box<dyn std::error::Error + Send + Sync>| ApplyError::Kubeconfig {
        path: described.clone(),
        source,
    };
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| bad(Box::new(e)))?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| bad(Box::new(e)))?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| bad(Box::new(e)))?,
        None => kube::Config::infer().await.map_err(|e| bad(Box::new(e)))?,
    };
    let url = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|e| bad(Box::new(e)))?;
    Ok((client, url))
}

/// Fails with [`ApplyError::Unreachable`], [`ApplyError::Timeout`] or
/// [`ApplyError::Unauthorized`] unless the API server answers `/version`.
pub async fn check_reachable(client: &Client, url: &str) -> Result<(), ApplyError> {
    match tokio::time::timeout(REACH_TIMEOUT, client.apiserver_version()).await {
        Err(_) => Err(ApplyError::Timeout {
            url: url.to_owned(),
        }),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kube::Error::Api(status))) if status.code == 401 => Err(ApplyError::Unauthorized {
            url: url.to_owned(),
            message: status.message,
        }),
        // Any other answer from the API server means it is there.
        Ok(Err(kube::Error::Api(_))) => Ok(()),
        Ok(Err(e)) => Err(ApplyError::Unreachable {
            url: url.to_owned(),
            source: Box::new(e),
        }),
    }
}

/// Server-side applies one rendered object with `field_manager`, taking over fields another
/// manager set (what an installer is for); returns the object's `kind namespace/name` for
/// progress output.
pub async fn apply(
    client: &Client,
    field_manager: &str,
    object: &Value,
) -> Result<String, ApplyError> {
    let (kind, name, namespace) = identity(object);
    let (resource, namespaced) =
        api_resource(kind).ok_or_else(|| ApplyError::UnknownKind(kind.to_owned()))?;
    let api: Api<DynamicObject> = match namespace.filter(|_| namespaced) {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let params = PatchParams::apply(field_manager).force();
    let shown = display_name(name, namespace);
    match api.patch(name, &params, &Patch::Apply(object)).await {
        Ok(_) => Ok(format!("{kind} {shown}")),
        Err(kube::Error::Api(status)) if status.code == 403 => Err(ApplyError::Forbidden {
            kind: kind.to_owned(),
            object: shown,
            resource: resource_name(&resource),
            scope: namespace.map_or_else(
                || " cluster-wide".to_owned(),
                |ns| format!(" in namespace {ns}"),
            ),
            message: status.message,
        }),
        Err(source) => Err(ApplyError::Apply {
            kind: kind.to_owned(),
            object: shown,
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_named_as_rbac_names_them() {
        let (crd, _) = api_resource("CustomResourceDefinition").unwrap();
        assert_eq!(
            resource_name(&crd),
            "customresourcedefinitions.apiextensions.k8s.io"
        );
        let (sa, _) = api_resource("ServiceAccount").unwrap();
        assert_eq!(resource_name(&sa), "serviceaccounts");
    }
}
