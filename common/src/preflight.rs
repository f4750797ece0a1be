//! Before anything is applied: which permissions applying a set of rendered objects needs
//! (computed from the objects, no I/O) and which of them the kubeconfig's user lacks (asked
//! with SelfSubjectAccessReviews), so a user without rights gets every missing permission
//! in one message and nothing half-installed. Used by `accord-hub install` and
//! `accord-agent join`.
//!
//! Two kinds are checked: the verbs needed to apply each object, and — because Kubernetes
//! RBAC only lets a user grant permissions they hold themselves (unless they may `escalate`
//! and `bind` roles) — every permission the rendered ClusterRoles and Roles grant.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::Value;

use crate::apply::{api_resource, identity};

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
            "\nMissing to grant the rendered roles their permissions (Kubernetes only lets you \
             grant what you hold yourself, unless you may escalate and bind roles):",
        );
        text.push_str(&bullets(to_grant));
    }
    text
}

/// Permissions a user lacks, and for what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The command, e.g. `accord-hub install`.
    pub command: String,
    /// The API server's URL.
    pub url: String,
    /// What to do about it.
    pub advice: String,
    /// Who the API server says the user is.
    pub user: String,
    /// Missing to apply the objects, sorted.
    pub to_apply: Vec<Permission>,
    /// Granted by the rendered roles but not held by the user, sorted.
    pub to_grant: Vec<Permission>,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "permission denied: {} may not do everything `{}` needs on the cluster at {}; \
             nothing was changed.{}\n{}",
            self.user,
            self.command,
            self.url,
            missing_text(&self.to_apply, &self.to_grant),
            self.advice
        )
    }
}

/// The permission check could not be made, or found permissions missing.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// The user lacks some permissions the command needs.
    #[error("{0}")]
    Missing(Box<Missing>),
    /// A SelfSubjectAccessReview could not be created.
    #[error("checking permissions with a SelfSubjectAccessReview failed")]
    Review(#[source] kube::Error),
}

/// What applying `objects` needs: create and patch each (server-side apply creates what is
/// missing), and with `wait`, list and watch CRDs, Deployments and StatefulSets.
pub fn required_permissions(objects: &[Value], wait: bool) -> Vec<Permission> {
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
/// ClusterRoles, and on Roles in `namespace`.
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

/// Who runs a preflight check, for its error message.
#[derive(Debug, Clone)]
pub struct Asker<'a> {
    /// The command, e.g. `accord-hub install`.
    pub command: &'a str,
    /// The API server's URL.
    pub url: &'a str,
    /// What to do when permissions are missing.
    pub advice: &'a str,
}

/// Asks the API server which of `to_apply` and `to_grant` the current user lacks; fails
/// with [`PreflightError::Missing`] naming all of them. Permissions to grant are not
/// needed when the user may escalate and bind roles in both scopes (cluster-wide and
/// `namespace`).
pub async fn check(
    client: &Client,
    asker: &Asker<'_>,
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
    Err(PreflightError::Missing(Box::new(Missing {
        command: asker.command.to_owned(),
        url: asker.url.to_owned(),
        advice: asker.advice.to_owned(),
        user: who_am_i(client).await,
        to_apply: missing_apply,
        to_grant: missing_grant,
    })))
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

    fn permission(group: &str, resource: &str, verb: &str, ns: Option<&str>) -> Permission {
        Permission::new(group, resource, verb).in_namespace(ns)
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
        let err = PreflightError::Missing(Box::new(Missing {
            command: "accord-hub install".into(),
            url: "https://127.0.0.1:6443/".into(),
            advice: "Ask an administrator.".into(),
            user: "user \"dev\"".into(),
            to_apply: vec![permission(
                "rbac.authorization.k8s.io",
                "clusterroles",
                "create",
                None,
            )],
            to_grant: vec![permission("accord.io", "managedclusters", "list", None)],
        }));
        let text = err.to_string();
        assert!(text.contains("user \"dev\" may not do everything `accord-hub install` needs on the cluster at https://127.0.0.1:6443/"), "{text}");
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
        assert!(text.ends_with("Ask an administrator."), "{text}");
    }
}
