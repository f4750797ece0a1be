//! Admin kubeconfig files and clients for the testbed's clusters.

use std::path::Path;

use anyhow::{Context as _, Result};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::pki::KeyMaterial;

/// Renders a self-contained kubeconfig (certificates embedded) whose single context,
/// named after the cluster, is the current one.
pub fn render(cluster: &str, server: &str, ca_pem: &str, user: &KeyMaterial) -> String {
    let b64 = |s: &str| STANDARD.encode(s.as_bytes());
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {cluster}
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {cluster}-admin
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: {cluster}
  context:
    cluster: {cluster}
    user: {cluster}-admin
current-context: {cluster}
",
        ca = b64(ca_pem),
        cert = b64(&user.cert_pem),
        key = b64(&user.key_pem),
    )
}

/// A client for the cluster a kubeconfig file points at (its current context).
pub async fn client(path: &Path) -> Result<kube::Client> {
    let kubeconfig =
        Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .with_context(|| format!("loading {}", path.display()))?;
    // Testbed API servers are on loopback; a proxy from the environment never applies.
    config.proxy_url = None;
    kube::Client::try_from(config).context("building a Kubernetes client")
}
