//! Before anything is applied: which permissions `install` needs (computed from the
//! rendered objects, no I/O) and which of them the kubeconfig's user lacks (asked with
//! SelfSubjectAccessReviews), so a user without rights gets every missing permission in
//! one message and nothing half-installed.
//!
//! Two kinds are checked: the verbs needed to apply each object, and — because Kubernetes
//! RBAC only lets a user grant permissions they hold themselves (unless they may `escalate`
//! and `bind` roles) — every permission the hub's ClusterRole and Role grant.

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
use crate::pki::DEFAULT_CA_SECRET_NAME as CA_SECRET_NAME;

/// One permission: a verb on a resource (or one named object of it, or a subresource),
/// cluster-wide or in a namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Permission {
    /// API group, `""` for core.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
    /// Subresource, e.g. `status`.
    pub subresource: Option<String>,
    /// Verb, e.g. `patch`.
    pub verb: String,
    /// One object's name, when the permission is limited to it.
    pub name: Option<String>,
    /// Namespace, or `None` for cluster-wide.
    pub namespace: Option<String>,
}

impl Permission {
    /// `verb` on `resource` of `group`, cluster-wide.
    pub fn new(group: &str, resource: &str, verb: &str) -> Self {
        let (resource, subresource) = match resource.split_once('/') {
            Some((r, s)) => (r, Some(s.to_owned())),
            None => (resource, None),
        };
        Self {
            group: group.to_owned(),
            resource: resource.to_owned(),
            subresource,
            verb: verb.to_owned(),
            name: None,
            namespace: None,
        }
    }

    /// The same permission in `namespace` (cluster-wide for `None`).
    pub fn in_namespace(mut self, namespace: Option<&str>) -> Self {
        self.namespace = namespace.map(str::to_owned);
        self
    }

    /// The same permission limited to the object `name`.
    pub fn named(mut self, name: Option<&str>) -> Self {
        self.name = name.map(str::to_owned);
        self
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(sub) = &self.subresource {
            write!(f, "/{sub}")?;
        }
        if let Some(name) = &self.name {
            write!(f, " named {name}")?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in namespace {ns}"),
            None => f.write_str(" (cluster-wide)"),
        }
    }
}

fn bullets(permissions: &[Permission]) -> String {
    permissions.iter().map(|p| format!("\n  - {p}")).collect()
}

/// What the user lacks, worded for the error message.
fn missing_text(to_apply: &[Permission], to_grant: &[Permission]) -> String {
    let mut text = String::new();
    if !to_apply.is_empty() {
        text.push_str("\nMissing to apply the objects:");
        text.push_str(&bullets(to_apply));
    }
    if !to_grant.is_empty() {
        text.push_str(
            "\nMissing to grant the hub its permissions (Kubernetes only lets you grant what \
             you hold yourself, unless you may escalate and bind roles):",
        );
        text.push_str(&bullets(to_grant));
    }
    text
}

/// The permission check could not be made, or found permissions missing.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// The user lacks some permissions `install` needs.
    #[error(
        "permission denied: {user} may not do everything `accord-hub install` needs; nothing \
         was changed.{}\nRun install as a cluster administrator (it creates CRDs, a \
         ClusterRole and a ClusterRoleBinding), or have one grant these.",
        missing_text(.to_apply, .to_grant)
    )]
    Missing {
        /// Who the API server says the user is.
        user: String,
        /// Missing to apply the objects, sorted.
        to_apply: Vec<Permission>,
        /// Granted to the hub but not held by the user, sorted.
        to_grant: Vec<Permission>,
    },
    /// A SelfSubjectAccessReview could not be created.
    #[error("checking permissions with a SelfSubjectAccessReview failed")]
    Review(#[source] kube::Error),
}

/// What `install` needs to do with `objects`: create and patch each (server-side apply
/// creates what is missing), read and create the CA Secret, and with `wait`, list and
/// watch CRDs, Deployments and StatefulSets.
pub fn required_permissions(objects: &[Value], namespace: &str, wait: bool) -> Vec<Permission> {
    let mut needed = BTreeSet::new();
    for object in objects {
        let (kind, _, object_ns) = identity(object);
        let Some((resource, namespaced)) = api_resource(kind) else {
            continue;
        };
        let ns = object_ns.filter(|_| namespaced);
        let mut verbs = vec!["create", "patch"];
        if wait
            && matches!(
                kind,
                "CustomResourceDefinition" | "Deployment" | "StatefulSet"
            )
        {
            verbs.extend(["list", "watch"]);
        }
        for verb in verbs {
            needed
                .insert(Permission::new(&resource.group, &resource.plural, verb).in_namespace(ns));
        }
    }
    needed.insert(
        Permission::new("", "secrets", "get")
            .in_namespace(Some(namespace))
            .named(Some(CA_SECRET_NAME)),
    );
    needed.insert(Permission::new("", "secrets", "create").in_namespace(Some(namespace)));
    needed.into_iter().collect()
}

/// Every permission the ClusterRoles (cluster-wide) and Roles (in their namespace) among
/// `objects` grant, one per group × resource × verb × name.
pub fn granted_permissions(objects: &[Value]) -> Vec<Permission> {
    let mut granted = BTreeSet::new();
    for object in objects {
        let namespace = match object["kind"].as_str() {
            Some("ClusterRole") => None,
            Some("Role") => object["metadata"]["namespace"].as_str(),
            _ => continue,
        };
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        for rule in object["rules"].as_array().into_iter().flatten() {
            let names = strings(&rule["resourceNames"]);
            let names: Vec<Option<&str>> = if names.is_empty() {
                vec![None]
            } else {
                names.iter().map(|n| Some(n.as_str())).collect()
            };
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        for name in &names {
                            granted.insert(
                                Permission::new(&group, &resource, &verb)
                                    .in_namespace(namespace)
                                    .named(*name),
                            );
                        }
                    }
                }
            }
        }
    }
    granted.into_iter().collect()
}

/// What lets a user grant permissions they do not hold: `escalate` and `bind` on
/// ClusterRoles, and on Roles in the hub namespace.
fn escalation_permissions(namespace: &str) -> Vec<Permission> {
    let rbac = "rbac.authorization.k8s.io";
    vec![
        Permission::new(rbac, "clusterroles", "escalate"),
        Permission::new(rbac, "clusterroles", "bind"),
        Permission::new(rbac, "roles", "escalate").in_namespace(Some(namespace)),
        Permission::new(rbac, "roles", "bind").in_namespace(Some(namespace)),
    ]
}

async fn allowed(
    reviews: &Api<SelfSubjectAccessReview>,
    p: &Permission,
) -> Result<bool, PreflightError> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(p.group.clone()),
                resource: Some(p.resource.clone()),
                subresource: p.subresource.clone(),
                verb: Some(p.verb.clone()),
                name: p.name.clone(),
                namespace: p.namespace.clone(),
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
    Ok(answer.status.is_some_and(|s| s.allowed))
}

async fn lacking(
    reviews: &Api<SelfSubjectAccessReview>,
    permissions: &[Permission],
) -> Result<Vec<Permission>, PreflightError> {
    let mut missing = Vec::new();
    for p in permissions {
        if !allowed(reviews, p).await? {
            missing.push(p.clone());
        }
    }
    Ok(missing)
}

/// Asks the API server which of `to_apply` and `to_grant` the current user lacks; fails
/// with [`PreflightError::Missing`] naming all of them. Permissions to grant are not
/// needed when the user may escalate and bind roles in both scopes.
pub async fn check(
    client: &Client,
    namespace: &str,
    to_apply: &[Permission],
    to_grant: &[Permission],
) -> Result<(), PreflightError> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let missing_apply = lacking(&reviews, to_apply).await?;
    let mut missing_grant = lacking(&reviews, to_grant).await?;
    if !missing_grant.is_empty()
        && lacking(&reviews, &escalation_permissions(namespace))
            .await?
            .is_empty()
    {
        missing_grant.clear();
    }
    if missing_apply.is_empty() && missing_grant.is_empty() {
        return Ok(());
    }
    Err(PreflightError::Missing {
        user: who_am_i(client).await,
        to_apply: missing_apply,
        to_grant: missing_grant,
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
        Permission::new(group, resource, verb).in_namespace(ns)
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
            permission("", "secrets", "get", Some("accord-system")).named(Some("accord-hub-ca")),
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
    fn the_hubs_grants_are_expanded_rule_by_rule() {
        let objects = render(&InstallOptions::default()).unwrap();
        let granted = granted_permissions(&objects);
        assert!(granted.contains(&permission(
            "accord.io",
            "managedclusters/status",
            "patch",
            None
        )));
        assert!(granted.contains(&permission("accord.io", "managedclusters", "create", None)));
        assert!(granted.contains(&permission("events.k8s.io", "events", "create", None)));
        assert!(granted.contains(
            &permission("", "secrets", "get", Some("accord-system")).named(Some("accord-hub-ca"))
        ));
        // 5 kinds × 4 verbs, 1 create, 5 status patches, 2 event verbs, 2 Secret rules.
        assert_eq!(granted.len(), 20 + 1 + 5 + 2 + 2);
    }

    #[test]
    fn permissions_read_as_kubectl_would_name_them() {
        assert_eq!(
            permission("rbac.authorization.k8s.io", "clusterroles", "patch", None).to_string(),
            "patch clusterroles.rbac.authorization.k8s.io (cluster-wide)"
        );
        assert_eq!(
            permission("", "secrets", "get", Some("accord-system"))
                .named(Some("accord-hub-ca"))
                .to_string(),
            "get secrets named accord-hub-ca in namespace accord-system"
        );
        assert_eq!(
            permission("accord.io", "managedclusters/status", "patch", None).to_string(),
            "patch managedclusters.accord.io/status (cluster-wide)"
        );
    }

    #[test]
    fn the_missing_permissions_message_lists_each_one_under_its_reason() {
        let err = PreflightError::Missing {
            user: "user \"dev\"".into(),
            to_apply: vec![permission(
                "rbac.authorization.k8s.io",
                "clusterroles",
                "create",
                None,
            )],
            to_grant: vec![permission("accord.io", "managedclusters", "list", None)],
        };
        let text = err.to_string();
        assert!(text.contains("user \"dev\" may not"), "{text}");
        assert!(text.contains("nothing was changed"), "{text}");
        assert!(text.contains(
            "Missing to apply the objects:\n  - create clusterroles.rbac.authorization.k8s.io (cluster-wide)\n"
        ), "{text}");
        assert!(
            text.contains(
                "escalate and bind roles):\n  - list managedclusters.accord.io (cluster-wide)\n"
            ),
            "{text}"
        );
    }
}
