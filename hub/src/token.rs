//! `accord-hub token create`: a bootstrap token and the join line that uses it.

use anyhow::Context;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use std::time::Duration;

use crate::cli::StateArgs;
use crate::pki::HubCa;
use crate::pki::{DEFAULT_CA_SECRET_NAME as CA_SECRET_NAME, install_crypto_provider};
use accord_common::runtime::kube_client;

/// Reads the hub CA from its Secret; fails clearly when the hub was never started.
pub async fn read_ca(client: kube::Client, namespace: &str) -> anyhow::Result<HubCa> {
    let secrets: Api<Secret> = Api::namespaced(client, namespace);
    let secret = secrets.get_opt(CA_SECRET_NAME).await?.with_context(|| {
        format!(
            "the hub CA Secret {namespace}/{CA_SECRET_NAME} does not exist; \
             start the hub (accord-hub serve or accord-hub install) first"
        )
    })?;
    Ok(HubCa::from_secret(&secret)?)
}

/// The join line for a token.
pub fn join_line(hub_url: &str, token: &str, ca_cert_hash: &str, cluster: &str) -> String {
    format!(
        "accord-agent join --hub {hub_url} --token {token} --ca-cert-hash {ca_cert_hash} \
         --cluster-name {cluster} --kubeconfig <member-kubeconfig>"
    )
}

/// Creates a token and returns the join line.
pub async fn create(
    state: &StateArgs,
    ttl: Duration,
    hub_url: &str,
    cluster: &str,
    description: &str,
) -> anyhow::Result<String> {
    install_crypto_provider();
    let client = kube_client(state.kubeconfig.as_deref()).await?;
    let ca = read_ca(client, &state.namespace).await?;
    let store = state.connect_store().await?;
    let token = store.create_token(ttl, description).await?;
    Ok(join_line(
        hub_url,
        &token.to_string(),
        &ca.ca_cert_hash(),
        cluster,
    ))
}
