//! STAND-IN, NOT TO SHIP: a minimal private copy of the parts of
//! `accord_common::federation` the hub uses (constants, `config_hash`, `ReloadStatus`,
//! `render_global`), written against the shared contract while that library is being
//! written. Replaced by the library (one `use` in [`super`]) before this branch merges.

use std::collections::BTreeMap;

use accord_common::distribution::{FederationSpec, PolicyRef};
use sha2::{Digest, Sha256};

/// The hub's ConfigMap holding the global-tier Prometheus's config.
pub const GLOBAL_CONFIG_MAP_NAME: &str = "prometheus-federation-global";
/// Data key holding the whole Prometheus config.
pub const CONFIG_KEY: &str = "prometheus.yml";
/// Written by the writer: [`config_hash`] of `data[prometheus.yml]`.
pub const ANN_CONFIG_HASH: &str = "accord.io/config-hash";
const ANN_LOADED_HASH: &str = "accord.io/loaded-hash";
const ANN_RELOAD_HASH: &str = "accord.io/reload-hash";
const ANN_RELOAD_STATE: &str = "accord.io/reload-state";
const ANN_RELOAD_MESSAGE: &str = "accord.io/reload-message";
const ANN_SCRAPE_ERRORS: &str = "accord.io/scrape-errors";

/// SHA-256 of the config's bytes, lowercase hex.
pub fn config_hash(yaml: &str) -> String {
    hex::encode(Sha256::digest(yaml.as_bytes()))
}

/// What the reloader last said about a ConfigMap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadStatus {
    /// Hash Prometheus confirmed loaded.
    pub loaded_hash: Option<String>,
    /// Hash the state is about.
    pub reload_hash: Option<String>,
    /// `Synced`, `Error`, `Unavailable` or `Pending`.
    pub state: Option<String>,
    /// Detail.
    pub message: Option<String>,
    /// Jobs with a target down and its last error.
    pub scrape_errors: BTreeMap<String, String>,
}

impl ReloadStatus {
    /// Reads the reloader's annotations.
    pub fn from_annotations(a: &BTreeMap<String, String>) -> Self {
        let get = |k: &str| a.get(k).cloned();
        Self {
            loaded_hash: get(ANN_LOADED_HASH),
            reload_hash: get(ANN_RELOAD_HASH),
            state: get(ANN_RELOAD_STATE),
            message: get(ANN_RELOAD_MESSAGE),
            scrape_errors: a
                .get(ANN_SCRAPE_ERRORS)
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or_default(),
        }
    }
}

/// One member federation Prometheus the global tier scrapes for one policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobalTarget {
    /// The policy.
    pub policy: PolicyRef,
    /// Its assignment.
    pub spec: FederationSpec,
    /// Member cluster.
    pub cluster: String,
    /// The cluster's federationEndpoint.
    pub url: String,
}

/// A rendered config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// The whole config.
    pub yaml: String,
    /// [`config_hash`] of `yaml`.
    pub hash: String,
    /// Jobs in it.
    pub jobs: usize,
}

/// Why a config could not be rendered.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RenderError(String);

/// `accord-global/<ns>/<name>/<cluster>`.
pub fn global_job_name(policy: &PolicyRef, cluster: &str) -> String {
    format!(
        "accord-global/{}/{}/{cluster}",
        policy.namespace, policy.name
    )
}

/// Renders the global tier's config: one job per target.
pub fn render_global(targets: &[GlobalTarget]) -> Result<Rendered, RenderError> {
    let mut sorted: Vec<&GlobalTarget> = targets.iter().collect();
    sorted.sort_by(|a, b| (&a.policy, &a.cluster).cmp(&(&b.policy, &b.cluster)));
    let mut yaml = String::from("scrape_configs:");
    if sorted.is_empty() {
        yaml.push_str(" []\n");
    } else {
        yaml.push('\n');
    }
    for t in &sorted {
        let (scheme, rest) = t
            .url
            .split_once("://")
            .ok_or_else(|| RenderError(format!("{}: not a URL", t.url)))?;
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        if t.spec.matchers.iter().any(|m| m.contains('\'')) {
            return Err(RenderError("matcher with a quote".into()));
        }
        let matchers: Vec<String> = t.spec.matchers.iter().map(|m| format!("'{m}'")).collect();
        yaml.push_str(&format!(
            "- job_name: {}\n  honor_labels: true\n  scheme: {scheme}\n  metrics_path: /{}federate\n  params: {{match[]: [{}]}}\n  scrape_interval: {}\n  scrape_timeout: {}\n  static_configs: [{{targets: ['{host}']}}]\n  metric_relabel_configs: [{{target_label: cluster, replacement: {}, action: replace}}]\n",
            global_job_name(&t.policy, &t.cluster),
            if path.is_empty() { String::new() } else { format!("{}/", path.trim_end_matches('/')) },
            matchers.join(", "),
            t.spec.scrape_interval,
            t.spec.scrape_timeout,
            t.cluster,
        ));
    }
    Ok(Rendered {
        hash: config_hash(&yaml),
        jobs: sorted.len(),
        yaml,
    })
}
