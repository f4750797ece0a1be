//! The applied assignments, kept in ConfigMap `accord-agent-assignments` in the agent's
//! namespace, so that an agent restarted while the hub is unreachable enforces exactly what
//! it enforced before.

use accord_crds::AGENT_FIELD_MANAGER;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::{Deserialize, Serialize};

use crate::assignments::{Assigned, AssignmentBook, PolicyKey, ScaleTarget};

/// Name of the ConfigMap.
pub const CONFIGMAP_NAME: &str = "accord-agent-assignments";
/// Key of the ConfigMap holding the JSON document.
pub const DATA_KEY: &str = "assignments.json";

/// Why the assignments could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// Reading the ConfigMap failed.
    #[error("reading ConfigMap {namespace}/{CONFIGMAP_NAME}: {source}")]
    Read {
        /// The agent's namespace.
        namespace: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing the ConfigMap failed.
    #[error("writing ConfigMap {namespace}/{CONFIGMAP_NAME}: {source}")]
    Write {
        /// The agent's namespace.
        namespace: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The ConfigMap holds something that is not a saved state.
    #[error("ConfigMap {namespace}/{CONFIGMAP_NAME} key {DATA_KEY} is not a saved state: {source}")]
    Decode {
        /// The agent's namespace.
        namespace: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// The state could not be encoded.
    #[error("encoding the saved state: {0}")]
    Encode(#[source] serde_json::Error),
}

impl PersistError {
    /// The metric label of the error.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Read { .. } | Self::Write { .. } => "persist",
            Self::Decode { .. } | Self::Encode(_) => "persist_decode",
        }
    }
}

/// One saved policy.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SavedPolicy {
    /// The policy on the hub.
    pub policy: PolicyKey,
    /// Revision of its assignment.
    pub revision: i64,
    /// What it scales.
    pub scale: ScaleTarget,
}

/// The document stored in the ConfigMap.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SavedState {
    /// Cluster the assignments were made for; a different identity ignores them.
    pub cluster: String,
    /// Highest applied hub revision.
    pub last_applied_revision: i64,
    /// Managed policies.
    pub policies: Vec<SavedPolicy>,
}

impl SavedState {
    /// The state of `book` for `cluster`.
    pub fn of(cluster: &str, book: &AssignmentBook) -> Self {
        Self {
            cluster: cluster.to_owned(),
            last_applied_revision: book.last_applied_revision(),
            policies: book
                .policies()
                .iter()
                .map(|(policy, assigned)| SavedPolicy {
                    policy: policy.clone(),
                    revision: assigned.revision,
                    scale: assigned.scale.clone(),
                })
                .collect(),
        }
    }

    /// The book this state describes.
    pub fn into_book(self) -> AssignmentBook {
        AssignmentBook::from_parts(
            self.last_applied_revision,
            self.policies.into_iter().map(|p| {
                (
                    p.policy,
                    Assigned {
                        revision: p.revision,
                        scale: p.scale,
                    },
                )
            }),
        )
    }
}

/// The server-side apply body of the ConfigMap holding `state`.
pub fn configmap_patch(
    namespace: &str,
    state: &SavedState,
) -> Result<serde_json::Value, PersistError> {
    let document = serde_json::to_string(state).map_err(PersistError::Encode)?;
    Ok(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP_NAME,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": AGENT_FIELD_MANAGER},
        },
        "data": { DATA_KEY: document },
    }))
}

/// Reads and writes the saved state.
#[derive(Clone)]
pub struct StateStore {
    api: Api<ConfigMap>,
    namespace: String,
}

impl StateStore {
    /// The store in `namespace` (which must exist).
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
        }
    }

    /// The saved state, if there is one.
    pub async fn load(&self) -> Result<Option<SavedState>, PersistError> {
        let configmap =
            self.api
                .get_opt(CONFIGMAP_NAME)
                .await
                .map_err(|source| PersistError::Read {
                    namespace: self.namespace.clone(),
                    source,
                })?;
        let Some(document) = configmap
            .as_ref()
            .and_then(|cm| cm.data.as_ref())
            .and_then(|data| data.get(DATA_KEY))
        else {
            return Ok(None);
        };
        serde_json::from_str(document)
            .map(Some)
            .map_err(|source| PersistError::Decode {
                namespace: self.namespace.clone(),
                source,
            })
    }

    /// Writes `state`, creating the ConfigMap if needed.
    pub async fn save(&self, state: &SavedState) -> Result<(), PersistError> {
        let body = configmap_patch(&self.namespace, state)?;
        self.api
            .patch(
                CONFIGMAP_NAME,
                &PatchParams::apply(AGENT_FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .map_err(|source| PersistError::Write {
                namespace: self.namespace.clone(),
                source,
            })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assignments::{Incoming, Update, Work};

    #[test]
    fn a_saved_state_round_trips_through_the_configmap_document() {
        let mut book = AssignmentBook::default();
        book.apply(Update {
            revision: 9,
            full: true,
            items: vec![Incoming {
                policy: PolicyKey::new("CrossClusterScalePolicy", "default", "web"),
                revision: 8,
                work: Work::Scale(ScaleTarget {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    namespace: "prod".into(),
                    name: "frontend".into(),
                    replicas: 7,
                    scale_request_id: "01J".into(),
                }),
            }],
            removed: vec![],
        });
        let state = SavedState::of("member-1", &book);
        let patch = configmap_patch("accord-system", &state).unwrap();
        assert_eq!(patch["metadata"]["name"], CONFIGMAP_NAME);
        assert_eq!(patch["metadata"]["namespace"], "accord-system");
        let document = patch["data"][DATA_KEY].as_str().unwrap();
        assert!(document.contains("\"lastAppliedRevision\":9"), "{document}");
        assert!(
            document.contains("\"scaleRequestId\":\"01J\""),
            "{document}"
        );
        let back: SavedState = serde_json::from_str(document).unwrap();
        assert_eq!(back, state);
        assert_eq!(back.into_book(), book);
    }
}
