//! Prometheus federation (PrometheusFederation): the config rendered for a member's
//! federation Prometheus and for the hub's global tier, its validation before it is
//! written, and the ConfigMap contract between the writer (agent or hub) and the reloader
//! that runs beside Prometheus (`accord-agent reload`).
//!
//! The writer puts the whole config into data key [`CONFIG_KEY`] of ConfigMap
//! [`CONFIG_MAP_NAME`] (or [`GLOBAL_CONFIG_MAP_NAME`]) with annotation [`ANN_CONFIG_HASH`];
//! the reloader writes only the `loaded-hash`, `reload-hash`, `reload-state`,
//! `reload-message` and `scrape-errors` annotations, which [`ReloadStatus`] reads back.
//! A config is pending while [`ANN_RELOAD_HASH`] differs from [`ANN_CONFIG_HASH`].

pub mod render;
pub mod selector;
pub mod validate;

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

pub use render::{
    GlobalTarget, MemberPromfed, RenderError, Rendered, SourceTarget, TenantSources, empty_config,
    global_job_name, member_job_name, render_global, render_member,
};
pub use selector::{SelectorError, check_selector, narrow, narrow_with};
pub use validate::{ValidConfig, validate};

/// The member ConfigMap holding the federation Prometheus's config.
pub const CONFIG_MAP_NAME: &str = "prometheus-federation";
/// The hub's ConfigMap holding the global-tier Prometheus's config.
pub const GLOBAL_CONFIG_MAP_NAME: &str = "prometheus-federation-global";
/// Data key holding the whole Prometheus config.
pub const CONFIG_KEY: &str = "prometheus.yml";
/// Label marking a Service as a tenant Prometheus to federate; value `"true"`.
pub const SOURCE_LABEL: &str = "accord.io/federation-source";
/// Written by the writer: [`config_hash`] of `data[prometheus.yml]`.
pub const ANN_CONFIG_HASH: &str = "accord.io/config-hash";
/// Written by the reloader: hash of the config Prometheus confirmed loaded.
pub const ANN_LOADED_HASH: &str = "accord.io/loaded-hash";
/// Written by the reloader: hash of the config [`ANN_RELOAD_STATE`] is about.
pub const ANN_RELOAD_HASH: &str = "accord.io/reload-hash";
/// Written by the reloader: one of the `STATE_*` values.
pub const ANN_RELOAD_STATE: &str = "accord.io/reload-state";
/// Written by the reloader: detail of the state (Prometheus's own message on `Error`).
pub const ANN_RELOAD_MESSAGE: &str = "accord.io/reload-message";
/// Written by the reloader: JSON object `{job_name: lastError}` of the jobs with a target
/// down; absent when none is.
pub const ANN_SCRAPE_ERRORS: &str = "accord.io/scrape-errors";

/// Reload state: Prometheus confirmed it loaded the config.
pub const STATE_SYNCED: &str = "Synced";
/// Reload state: the config is invalid or Prometheus refused it; the previous one stays loaded.
pub const STATE_ERROR: &str = "Error";
/// Reload state: Prometheus did not answer; the reloader keeps retrying.
pub const STATE_UNAVAILABLE: &str = "Unavailable";
/// Reload state: the reloader has not finished with this config yet.
pub const STATE_PENDING: &str = "Pending";

/// SHA-256 of the config's bytes, lowercase hex: the value of [`ANN_CONFIG_HASH`] and
/// [`ANN_LOADED_HASH`].
pub fn config_hash(yaml: &str) -> String {
    hex::encode(Sha256::digest(yaml.as_bytes()))
}

/// What the reloader last said about a ConfigMap, read from its annotations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadStatus {
    /// Hash of the config Prometheus confirmed loaded.
    pub loaded_hash: Option<String>,
    /// Hash of the config `state` and `message` are about.
    pub reload_hash: Option<String>,
    /// `Synced`, `Error`, `Unavailable` or `Pending`.
    pub state: Option<String>,
    /// Detail of the state.
    pub message: Option<String>,
    /// Jobs with a target down and that target's last scrape error; empty when none (or
    /// when the annotation is not a JSON object of strings).
    pub scrape_errors: BTreeMap<String, String>,
}

impl ReloadStatus {
    /// Reads the reloader's annotations; missing ones are `None`.
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Self {
        let get = |key: &str| annotations.get(key).cloned();
        Self {
            loaded_hash: get(ANN_LOADED_HASH),
            reload_hash: get(ANN_RELOAD_HASH),
            state: get(ANN_RELOAD_STATE),
            message: get(ANN_RELOAD_MESSAGE),
            scrape_errors: annotations
                .get(ANN_SCRAPE_ERRORS)
                .and_then(|text| serde_json::from_str(text).ok())
                .unwrap_or_default(),
        }
    }

    /// Reads the reloader's annotations on `config_map`.
    pub fn of(config_map: &k8s_openapi::api::core::v1::ConfigMap) -> Self {
        match &config_map.metadata.annotations {
            Some(annotations) => Self::from_annotations(annotations),
            None => Self::default(),
        }
    }

    /// Whether Prometheus confirmed loading exactly the config with hash `config_hash`.
    pub fn is_loaded(&self, config_hash: &str) -> bool {
        self.loaded_hash.as_deref() == Some(config_hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_hash_is_lowercase_sha256_hex_of_the_bytes() {
        assert_eq!(
            config_hash(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_ne!(config_hash("a"), config_hash("a\n"));
    }

    #[test]
    fn reload_status_reads_every_annotation_and_tolerates_bad_scrape_errors() {
        let mut annotations = BTreeMap::from([
            (ANN_LOADED_HASH.to_owned(), "aa".to_owned()),
            (ANN_RELOAD_HASH.to_owned(), "bb".to_owned()),
            (ANN_RELOAD_STATE.to_owned(), STATE_ERROR.to_owned()),
            (ANN_RELOAD_MESSAGE.to_owned(), "refused".to_owned()),
            (
                ANN_SCRAPE_ERRORS.to_owned(),
                r#"{"accord/ns/p/t": "sample limit exceeded"}"#.to_owned(),
            ),
        ]);
        let status = ReloadStatus::from_annotations(&annotations);
        assert_eq!(status.loaded_hash.as_deref(), Some("aa"));
        assert_eq!(status.reload_hash.as_deref(), Some("bb"));
        assert_eq!(status.state.as_deref(), Some("Error"));
        assert_eq!(status.message.as_deref(), Some("refused"));
        assert_eq!(
            status.scrape_errors["accord/ns/p/t"],
            "sample limit exceeded"
        );
        assert!(status.is_loaded("aa") && !status.is_loaded("bb"));

        annotations.insert(ANN_SCRAPE_ERRORS.to_owned(), "not json".to_owned());
        assert!(
            ReloadStatus::from_annotations(&annotations)
                .scrape_errors
                .is_empty()
        );
        assert_eq!(
            ReloadStatus::from_annotations(&BTreeMap::new()),
            ReloadStatus::default()
        );
    }
}
