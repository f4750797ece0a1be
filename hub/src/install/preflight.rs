//! Before anything is applied: which permissions `install` needs (computed from the
//! rendered objects, no I/O) and which of them the kubeconfig's user lacks (asked with
//! SelfSubjectAccessReviews), so a user without rights gets every missing permission in
//! one message and nothing half-installed.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::Value;

use super::apply::{api_resource, identity};
use crate::serve::CA_SECRET_NAME;

/// One permission: a verb on a resource, cluster-wide or in a namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Permission {
    /// API group, `""` for core.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
    /// Verb, e.g. `patch`.
    pub verb: String,
    /// Namespace, or `None` for cluster-scoped resources.
    pub namespace: Option<String>,
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in namespace {ns}"),
            None => f.write_str(" (cluster-wide)"),
        }
    }
}

/// The permission check could not be made, or found permissions missing.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// The user lacks some permissions `install` needs.
    #[error(
        "permission denied: {user} may not do everything `accord-hub install` needs. Missing:\n{}\n\
         Run install as a cluster administrator (it creates CRDs, a ClusterRole and a \
         ClusterRoleBinding), or have one grant these.",
        .missing.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n")
    )]
    Missing {
        /// Who the API server says the user is.
        user: String,
        /// What is missing, sorted.
        missing: Vec<Permission>,
    },
    /// A SelfSubjectAccessReview could not be created.
    #[error("checking permissions with a SelfSubjectAccessReview failed")]
    Review(#[source] kube::Error),
}

/// What `install` needs to do with `objects`: create and patch each (server-side apply
/// creates what is missing), read and create the CA Secret, and with `wait`, watch CRDs,
/// Deployments and StatefulSets.
pub fn required_permissions(objects: &[Value], namespace: &str, wait: bool) -> Vec<Permission> {
    let mut needed = BTreeSet::new();
    let mut add = |group: &str, resource: &str, verb: &str, ns: Option<&str>| {
        needed.insert(Permission {
            group: group.to_owned(),
            resource: resource.to_owned(),
            verb: verb.to_owned(),
            namespace: ns.map(str::to_owned),
        });
    };
    for object in objects {
        let (kind, _, object_ns) = identity(object);
        if let Some((resource, namespaced)) = api_resource(kind) {
            let ns = object_ns.filter(|_| namespaced);
            add(&resource.group, &resource.plural, "create", ns);
            add(&resource.group, &resource.plural, "patch", ns);
            if wait {
                let waited = matches!(
                    kind,
                    "CustomResourceDefinition" | "Deployment" | "StatefulSet"
                );
                if waited {
                    add(&resource.group, &resource.plural, "list", ns);
                    add(&resource.group, &resource.plural, "watch", ns);
                }
            }
        }
    }
    add("", "secrets", "get", Some(namespace));
    add("", "secrets", "create", Some(namespace));
    needed.into_iter().collect()
}

/// Asks the API server which of `needed` the current user lacks; fails with
/// [`PreflightError::Missing`] naming all of them.
pub async fn check(client: &Client, needed: &[Permission]) -> Result<(), PreflightError> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut missing = Vec::new();
    for permission in needed {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(permission.group.clone()),
                    resource: Some(permission.resource.clone()),
                    verb: Some(permission.verb.clone()),
                    namespace: permission.namespace.clone(),
                    // The CA Secret is read by name; everything else is checked for any name.
                    name: (permission.resource == "secrets" && permission.verb == "get")
                        .then(|| CA_SECRET_NAME.to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(PreflightError::Review)?;
        if !answer.status.is_some_and(|s| s.allowed) {
            missing.push(permission.clone());
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(PreflightError::Missing {
        user: who_am_i(client).await,
        missing,
    })
}

/// `user "NAME"` as the API server knows the kubeconfig's user, or a neutral phrase when it
/// will not say.
async fn who_am_i(client: &Client) -> String {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    match api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
    {
        Ok(review) => review
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .map_or_else(
                || "the kubeconfig's user".to_owned(),
                |u| format!("user {u:?}"),
            ),
        Err(_) => "the kubeconfig's user".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::{InstallOptions, render};

    fn permission(group: &str, resource: &str, verb: &str, ns: Option<&str>) -> Permission {
        Permission {
            group: group.into(),
            resource: resource.into(),
            verb: verb.into(),
            namespace: ns.map(Into::into),
        }
    }

    #[test]
    fn install_needs_create_and_patch_of_every_object_and_the_ca_secret() {
        let objects = render(&InstallOptions::default()).unwrap();
        let needed = required_permissions(&objects, "accord-system", false);
        for p in [
            permission(
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "patch",
                None,
            ),
            permission(
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "create",
                None,
            ),
            permission("rbac.authorization.k8s.io", "clusterroles", "patch", None),
            permission(
                "rbac.authorization.k8s.io",
                "clusterrolebindings",
                "create",
                None,
            ),
            permission("apps", "deployments", "patch", Some("accord-system")),
            permission("apps", "statefulsets", "patch", Some("accord-system")),
            permission("", "namespaces", "patch", None),
            permission("", "secrets", "get", Some("accord-system")),
            permission("", "secrets", "create", Some("accord-system")),
        ] {
            assert!(needed.contains(&p), "{p} not required");
        }
        assert!(!needed.iter().any(|p| p.verb == "watch"));
        let with_wait = required_permissions(&objects, "accord-system", true);
        assert!(with_wait.contains(&permission(
            "apps",
            "deployments",
            "watch",
            Some("accord-system")
        )));
    }

    #[test]
    fn permissions_read_as_kubectl_auth_can_i_would_name_them() {
        assert_eq!(
            permission("rbac.authorization.k8s.io", "clusterroles", "patch", None).to_string(),
            "patch clusterroles.rbac.authorization.k8s.io (cluster-wide)"
        );
        assert_eq!(
            permission("", "secrets", "create", Some("accord-system")).to_string(),
            "create secrets in namespace accord-system"
        );
    }

    #[test]
    fn the_missing_permissions_message_lists_each_one() {
        let err = PreflightError::Missing {
            user: "user \"dev\"".into(),
            missing: vec![
                permission("rbac.authorization.k8s.io", "clusterroles", "create", None),
                permission("", "secrets", "get", Some("accord-system")),
            ],
        };
        let text = err.to_string();
        assert!(text.contains("user \"dev\" may not"));
        assert!(
            text.contains("  - create clusterroles.rbac.authorization.k8s.io (cluster-wide)\n")
        );
        assert!(text.contains("  - get secrets in namespace accord-system\n"));
    }
}
