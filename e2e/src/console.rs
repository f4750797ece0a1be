//! What the console's tests and benchmark need around the hub: ServiceAccounts with
//! roles of their own and their tokens (TokenRequest on the real management API server),
//! and the console's pages fetched with a token.

use anyhow::{Context, Result};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Field manager of the tests' RBAC objects.
const FM: &str = "accord-e2e-console";

/// Rules of a reader of everything the console shows: every Accord kind, and Events.
pub fn reader_rules() -> Value {
    json!([
        {"apiGroups": ["accord.io"], "resources": ["*"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    ])
}

/// ServiceAccount `namespace/name` (created if missing) and a token of it valid for an hour.
pub async fn service_account_token(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<String> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    api.patch(
        name,
        &PatchParams::apply(FM).force(),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                             "metadata": {"name": name, "namespace": namespace}})),
    )
    .await
    .with_context(|| format!("applying ServiceAccount {namespace}/{name}"))?;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = api
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("requesting a token of {namespace}/{name}"))?;
    answer
        .status
        .map(|s| s.token)
        .context("the TokenRequest came back without a token")
}

/// Grants ServiceAccount `sa_namespace/sa` `rules` everywhere (ClusterRole and
/// ClusterRoleBinding `role`).
pub async fn grant_cluster_wide(
    client: &kube::Client,
    role: &str,
    sa_namespace: &str,
    sa: &str,
    rules: Value,
) -> Result<()> {
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    roles
        .patch(
            role,
            &PatchParams::apply(FM).force(),
            &Patch::Apply(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                 "metadata": {"name": role}, "rules": rules}),
            ),
        )
        .await
        .with_context(|| format!("applying ClusterRole {role}"))?;
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client.clone());
    bindings
        .patch(
            role,
            &PatchParams::apply(FM).force(),
            &Patch::Apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                                 "metadata": {"name": role},
                                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                                 "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_namespace}]})),
        )
        .await
        .with_context(|| format!("applying ClusterRoleBinding {role}"))?;
    Ok(())
}

/// Grants ServiceAccount `sa_namespace/sa` `rules` in `namespace` (Role and RoleBinding
/// `role`).
pub async fn grant_in_namespace(
    client: &kube::Client,
    namespace: &str,
    role: &str,
    sa_namespace: &str,
    sa: &str,
    rules: Value,
) -> Result<()> {
    let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::namespaced(client.clone(), namespace);
    roles
        .patch(
            role,
            &PatchParams::apply(FM).force(),
            &Patch::Apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                 "metadata": {"name": role, "namespace": namespace}, "rules": rules})),
        )
        .await
        .with_context(|| format!("applying Role {namespace}/{role}"))?;
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(client.clone(), namespace);
    bindings
        .patch(
            role,
            &PatchParams::apply(FM).force(),
            &Patch::Apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                                 "metadata": {"name": role, "namespace": namespace},
                                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                                 "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_namespace}]})),
        )
        .await
        .with_context(|| format!("applying RoleBinding {namespace}/{role}"))?;
    Ok(())
}

/// A console page fetched with `token` (none: no Authorization header): its status code
/// and body.
pub async fn fetch(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
) -> Result<(u16, String)> {
    let mut request = http.get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.with_context(|| format!("GET {url}"))?;
    let code = response.status().as_u16();
    Ok((code, response.text().await?))
}
