//! The held assignments, kept in ConfigMap `accord-agent-assignments` in the agent's
//! namespace, so that an agent restarted while the hub is unreachable enforces exactly what
//! it enforced before.
//!
//! The document is versioned ([`FORMAT_VERSION`]): `{"version": 2, "cluster",
//! "lastAppliedRevision", "storeEpoch", "policies": [{"policy", "revision", "spec":
//! {"scale": {...}}}]}`, one spec variant per kind. `storeEpoch` (the hub store epoch the
//! revisions belong to) is optional: a document without it was written before epochs
//! existed and holds epoch 0, and agents that do not know it ignore it, so it needs no new
//! version. The first format (no `version`, a `scale` object per placed object) is read and
//! migrated; a version this agent does not know, or a document it cannot read, is ignored with a
//! warning: the hub resends the assignments when the agent connects.
//!
//! Where the document lives is a [`StateStore`]: the ConfigMap in a cluster
//! ([`ConfigMapStore`]), anything else in tests. In the ConfigMap a document up to
//! [`COMPRESS_ABOVE_BYTES`] is kept readable under `data` ([`DATA_KEY`]); a longer one is
//! kept gzip-compressed under `binaryData` ([`COMPRESSED_KEY`]), and only one of the two is
//! there at a time. An agent older than the compressed form finds no document in it, as
//! after a first start: it gets its assignments from the hub when it connects.

use std::sync::Arc;

use accord_common::distribution::{AssignmentSpec, PlacedRef, ScaleSpec};
use accord_crds::AGENT_FIELD_MANAGER;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::{Deserialize, Serialize};

use crate::assignments::{Assigned, AssignmentBook};

/// Name of the ConfigMap.
pub const CONFIGMAP_NAME: &str = "accord-agent-assignments";
/// Key of the ConfigMap holding the JSON document, when it is small.
pub const DATA_KEY: &str = "assignments.json";
/// Key of the ConfigMap's `binaryData` holding the document gzip-compressed, when it is
/// larger than [`COMPRESS_ABOVE_BYTES`].
pub const COMPRESSED_KEY: &str = "assignments.json.gz";
/// Documents longer than this are saved compressed. A thousand topics make about 120 KB
/// of JSON, which an agent rewrote on every change while assignments streamed in (16 MB
/// written to its member's API server for one burst of a thousand topics), and a
/// ConfigMap holds at most 1 MiB (about 8,500 topics uncompressed).
pub const COMPRESS_ABOVE_BYTES: usize = 16 * 1024;
/// Version of the document this agent writes.
pub const FORMAT_VERSION: u64 = 2;

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
    /// The document is not a saved state this agent can read.
    #[error("the saved assignments are not a document this agent can read: {0}")]
    Decode(#[source] serde_json::Error),
    /// The document was written in a format version this agent does not know (by a newer
    /// agent, say).
    #[error(
        "the saved assignments have format version {0}; this agent reads versions 1 and {FORMAT_VERSION}"
    )]
    UnknownVersion(serde_json::Value),
    /// The state could not be encoded.
    #[error("encoding the saved state: {0}")]
    Encode(#[source] serde_json::Error),
    /// A store other than the ConfigMap failed (used by other stores, e.g. in tests).
    #[error("the state store failed: {0}")]
    Store(String),
}

impl PersistError {
    /// The metric label of the error.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Read { .. } | Self::Write { .. } | Self::Store(_) => "persist",
            Self::Decode(_) | Self::UnknownVersion(_) | Self::Encode(_) => "persist_decode",
        }
    }

    /// Whether retrying cannot help: the document is unreadable and is to be ignored.
    pub fn is_unreadable(&self) -> bool {
        matches!(self, Self::Decode(_) | Self::UnknownVersion(_))
    }
}

/// One saved assignment. The document's keys `policy` and `policies` are the names of
/// the first format, kept so that every saved state stays readable.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SavedAssignment {
    /// The placed object on the hub.
    #[serde(rename = "policy")]
    pub placed: PlacedRef,
    /// Revision of its assignment.
    pub revision: i64,
    /// What it asks of this cluster.
    pub spec: Arc<AssignmentSpec>,
}

/// The saved state (the document without its version).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SavedState {
    /// Cluster the assignments were made for; a different identity ignores them.
    pub cluster: String,
    /// Highest applied hub revision.
    pub last_applied_revision: i64,
    /// The assignments of every managed placed object.
    #[serde(rename = "policies")]
    pub assignments: Vec<SavedAssignment>,
}

/// A decoded document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// What it holds.
    pub state: SavedState,
    /// Store epoch of its revisions (0: not recorded).
    pub store_epoch: u64,
    /// It was written in an older format: save it again to migrate it.
    pub migrated: bool,
}

/// The current document: the state and its version.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Document<'a> {
    version: u64,
    #[serde(skip_serializing_if = "is_zero")]
    store_epoch: u64,
    #[serde(flatten)]
    state: &'a SavedState,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// The first format: no version, and every placed object scaled a workload.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LegacyState {
    #[serde(default)]
    cluster: String,
    last_applied_revision: i64,
    #[serde(rename = "policies")]
    assignments: Vec<LegacyAssignment>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LegacyAssignment {
    #[serde(rename = "policy")]
    placed: PlacedRef,
    revision: i64,
    scale: ScaleSpec,
}

impl SavedState {
    /// The state of `book` for `cluster`.
    pub fn of(cluster: &str, book: &AssignmentBook) -> Self {
        Self {
            cluster: cluster.to_owned(),
            last_applied_revision: book.last_applied_revision(),
            assignments: book
                .placed()
                .iter()
                .map(|(placed, assigned)| SavedAssignment {
                    placed: placed.clone(),
                    revision: assigned.revision,
                    spec: assigned.spec.clone(),
                })
                .collect(),
        }
    }

    /// The book this state describes.
    pub fn into_book(self) -> AssignmentBook {
        AssignmentBook::from_parts(
            self.last_applied_revision,
            self.assignments.into_iter().map(|p| {
                (
                    p.placed,
                    Assigned {
                        revision: p.revision,
                        spec: p.spec,
                    },
                )
            }),
        )
    }

    /// The document holding this state, in the current format, without a store epoch.
    pub fn encode(&self) -> Result<String, PersistError> {
        self.encode_with_epoch(0)
    }

    /// The document holding this state, its revisions belonging to `store_epoch`.
    pub fn encode_with_epoch(&self, store_epoch: u64) -> Result<String, PersistError> {
        serde_json::to_string(&Document {
            version: FORMAT_VERSION,
            store_epoch,
            state: self,
        })
        .map_err(PersistError::Encode)
    }

    /// Reads a document of any known format version.
    pub fn decode(document: &str) -> Result<Loaded, PersistError> {
        let value: serde_json::Value =
            serde_json::from_str(document).map_err(PersistError::Decode)?;
        match value.get("version") {
            None => {
                let legacy: LegacyState =
                    serde_json::from_value(value).map_err(PersistError::Decode)?;
                let state = SavedState {
                    cluster: legacy.cluster,
                    last_applied_revision: legacy.last_applied_revision,
                    assignments: legacy
                        .assignments
                        .into_iter()
                        .map(|p| SavedAssignment {
                            placed: p.placed,
                            revision: p.revision,
                            spec: Arc::new(AssignmentSpec::Scale(p.scale)),
                        })
                        .collect(),
                };
                Ok(Loaded {
                    state,
                    store_epoch: 0,
                    migrated: true,
                })
            }
            Some(version) if version.as_u64() == Some(FORMAT_VERSION) => {
                let store_epoch = match value.get("storeEpoch") {
                    None => 0,
                    Some(epoch) => epoch.as_u64().ok_or_else(|| {
                        PersistError::Decode(serde::de::Error::custom(format!(
                            "storeEpoch {epoch} is not an unsigned 64-bit number"
                        )))
                    })?,
                };
                // serde ignores the `version` and `storeEpoch` fields it has no place for.
                let state = serde_json::from_value(value).map_err(PersistError::Decode)?;
                Ok(Loaded {
                    state,
                    store_epoch,
                    migrated: false,
                })
            }
            Some(version) => Err(PersistError::UnknownVersion(version.clone())),
        }
    }
}

/// Where the saved document lives. Kept to raw documents so that the format, and its
/// migration, is the same whatever the store.
pub trait StateStore: Send + Sync + 'static {
    /// The saved document, if there is one.
    fn load(&self) -> BoxFuture<'_, Result<Option<String>, PersistError>>;
    /// Replaces the saved document; done only once the document is durably stored.
    fn save(&self, document: String) -> BoxFuture<'_, Result<(), PersistError>>;
}

/// The server-side apply body of the ConfigMap holding `document`: in `data` when it is
/// short, gzip-compressed in `binaryData` when it is longer than [`COMPRESS_ABOVE_BYTES`]
/// (the other key is left out of the apply, so the API server removes it).
pub fn configmap_patch(namespace: &str, document: &str) -> Result<serde_json::Value, PersistError> {
    let mut body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP_NAME,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": AGENT_FIELD_MANAGER},
        },
    });
    if document.len() > COMPRESS_ABOVE_BYTES {
        let compressed = accord_common::compress::gzip(document.as_bytes())
            .map_err(|e| PersistError::Encode(serde::ser::Error::custom(e)))?;
        body["binaryData"] = serde_json::json!({
            COMPRESSED_KEY: k8s_openapi::ByteString(compressed),
        });
    } else {
        body["data"] = serde_json::json!({ DATA_KEY: document });
    }
    Ok(body)
}

/// The document a ConfigMap holds: compressed in `binaryData` or plain in `data`.
pub fn configmap_document(configmap: ConfigMap) -> Result<Option<String>, PersistError> {
    if let Some(compressed) = configmap
        .binary_data
        .and_then(|mut data| data.remove(COMPRESSED_KEY))
    {
        let json = accord_common::compress::gunzip(&compressed.0).map_err(|e| {
            PersistError::Decode(serde::de::Error::custom(format!(
                "{COMPRESSED_KEY} does not inflate: {e}"
            )))
        })?;
        return String::from_utf8(json).map(Some).map_err(|e| {
            PersistError::Decode(serde::de::Error::custom(format!(
                "{COMPRESSED_KEY} is not UTF-8: {e}"
            )))
        });
    }
    Ok(configmap.data.and_then(|mut data| data.remove(DATA_KEY)))
}

/// The saved document in ConfigMap [`CONFIGMAP_NAME`] of the agent's namespace.
#[derive(Clone)]
pub struct ConfigMapStore {
    api: Api<ConfigMap>,
    namespace: String,
}

impl ConfigMapStore {
    /// The store in `namespace` (which must exist).
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
        }
    }

    /// Writes `state` in the current format (what the engine does on every change).
    pub async fn save_state(&self, state: &SavedState) -> Result<(), PersistError> {
        self.save_document(state.encode()?).await
    }

    async fn load_document(&self) -> Result<Option<String>, PersistError> {
        let configmap =
            self.api
                .get_opt(CONFIGMAP_NAME)
                .await
                .map_err(|source| PersistError::Read {
                    namespace: self.namespace.clone(),
                    source,
                })?;
        match configmap {
            Some(configmap) => configmap_document(configmap),
            None => Ok(None),
        }
    }

    /// Writes `document`, creating the ConfigMap if needed.
    pub async fn save_document(&self, document: String) -> Result<(), PersistError> {
        // Compressing a long document takes milliseconds: off the runtime's workers, so
        // the applies and the engine do not wait behind it.
        let namespace = self.namespace.clone();
        let body = tokio::task::spawn_blocking(move || configmap_patch(&namespace, &document))
            .await
            .map_err(|e| PersistError::Encode(serde::ser::Error::custom(e)))??;
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

impl StateStore for ConfigMapStore {
    fn load(&self) -> BoxFuture<'_, Result<Option<String>, PersistError>> {
        Box::pin(self.load_document())
    }

    fn save(&self, document: String) -> BoxFuture<'_, Result<(), PersistError>> {
        Box::pin(self.save_document(document))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assignments::{Incoming, Update};
    use accord_common::distribution::KafkaTopicSpec;
    use accord_common::distribution::PlacedKind;

    fn web() -> PlacedRef {
        PlacedRef::new(PlacedKind::CrossClusterScalePolicy, "default", "web")
    }

    fn frontend() -> ScaleSpec {
        ScaleSpec::deployment("prod", "frontend", 7, "01J")
    }

    #[test]
    fn a_saved_state_round_trips_through_the_configmap_document() {
        let mut book = AssignmentBook::default();
        book.apply(Update {
            revision: 9,
            full: true,
            items: vec![
                Incoming {
                    placed: web(),
                    revision: 8,
                    spec: AssignmentSpec::Scale(frontend()),
                },
                Incoming {
                    placed: PlacedRef::new(PlacedKind::FederatedKafkaTopic, "default", "events"),
                    revision: 9,
                    spec: AssignmentSpec::KafkaTopic(KafkaTopicSpec {
                        topic_name: "events".into(),
                        partitions: 12,
                        replication_factor: 3,
                        config: Default::default(),
                        ..Default::default()
                    }),
                },
            ],
            removed: vec![],
            store_epoch: 0,
        });
        let state = SavedState::of("member-1", &book);
        let encoded = state.encode().unwrap();
        let patch = configmap_patch("accord-system", &encoded).unwrap();
        assert!(
            patch.get("binaryData").is_none(),
            "a short document stays readable"
        );
        assert_eq!(patch["metadata"]["name"], CONFIGMAP_NAME);
        assert_eq!(patch["metadata"]["namespace"], "accord-system");
        let document = patch["data"][DATA_KEY].as_str().unwrap();
        assert!(document.contains("\"version\":2"), "{document}");
        assert!(document.contains("\"lastAppliedRevision\":9"), "{document}");
        assert!(
            document.contains("\"scaleRequestId\":\"01J\""),
            "{document}"
        );
        let value: serde_json::Value = serde_json::from_str(document).unwrap();
        assert_eq!(value["policies"][0]["spec"]["scale"]["replicas"], 7);
        let back = SavedState::decode(document).unwrap();
        assert!(!back.migrated);
        assert_eq!(back.state, state);
        assert_eq!(back.state.into_book(), book);
    }

    #[test]
    fn a_long_document_is_saved_compressed_and_read_back() {
        let mut book = AssignmentBook::default();
        book.apply(Update {
            revision: 1000,
            full: true,
            items: (0..1000)
                .map(|i| Incoming {
                    placed: PlacedRef::new(
                        PlacedKind::FederatedKafkaTopic,
                        "team",
                        &format!("topic-{i:04}"),
                    ),
                    revision: i + 1,
                    spec: AssignmentSpec::KafkaTopic(KafkaTopicSpec {
                        topic_name: format!("topic-{i:04}"),
                        partitions: 3,
                        replication_factor: 1,
                        ..Default::default()
                    }),
                })
                .collect(),
            removed: vec![],
            store_epoch: 0,
        });
        let document = SavedState::of("member-1", &book).encode().unwrap();
        assert!(document.len() > COMPRESS_ABOVE_BYTES);
        let patch = configmap_patch("accord-system", &document).unwrap();
        assert!(
            patch.get("data").is_none(),
            "applied without it: the API server drops it"
        );
        let configmap: ConfigMap = serde_json::from_value(patch).unwrap();
        let stored = &configmap.binary_data.as_ref().unwrap()[COMPRESSED_KEY].0;
        assert!(
            stored.len() * 5 < document.len(),
            "{} bytes for {} of JSON",
            stored.len(),
            document.len()
        );
        let read = configmap_document(configmap).unwrap().unwrap();
        assert_eq!(read, document);
        assert_eq!(SavedState::decode(&read).unwrap().state.into_book(), book);
    }

    #[test]
    fn a_compressed_document_that_does_not_inflate_is_an_unreadable_document() {
        let configmap = ConfigMap {
            binary_data: Some(
                [(
                    COMPRESSED_KEY.to_owned(),
                    k8s_openapi::ByteString(b"not gzip".to_vec()),
                )]
                .into(),
            ),
            ..ConfigMap::default()
        };
        let err = configmap_document(configmap).unwrap_err();
        assert!(err.to_string().contains(COMPRESSED_KEY), "{err}");
        assert!(
            err.is_unreadable(),
            "ignored with a warning, as any unreadable document"
        );
    }

    #[test]
    fn the_first_format_is_read_as_scale_assignments_and_marked_for_migration() {
        // Written by agents before the format had a version.
        let document = r#"{"cluster":"member-1","lastAppliedRevision":9,"policies":[
            {"policy":{"kind":"CrossClusterScalePolicy","namespace":"default","name":"web"},
             "revision":8,
             "scale":{"apiVersion":"apps/v1","kind":"Deployment","namespace":"prod",
                      "name":"frontend","replicas":7,"scaleRequestId":"01J"}}]}"#;
        let loaded = SavedState::decode(document).unwrap();
        assert!(loaded.migrated);
        assert_eq!(
            loaded.state,
            SavedState {
                cluster: "member-1".into(),
                last_applied_revision: 9,
                assignments: vec![SavedAssignment {
                    placed: web(),
                    revision: 8,
                    spec: AssignmentSpec::Scale(frontend()).into(),
                }],
            }
        );
        let again = SavedState::decode(&loaded.state.encode().unwrap()).unwrap();
        assert!(!again.migrated, "written back in the current format");
        assert_eq!(again.state, loaded.state);
    }

    #[test]
    fn an_unknown_version_or_garbage_is_unreadable_not_a_panic() {
        for document in [
            r#"{"version":3,"cluster":"x","lastAppliedRevision":1,"policies":[]}"#,
            r#"{"version":"two"}"#,
            r#"{"version":2,"policies":"nope"}"#,
            r#"{"version":2,"cluster":"x","lastAppliedRevision":1,"policies":[{"policy":{"kind":"K","namespace":"","name":"n"},"revision":1,"spec":{"crystalBall":{}}}]}"#,
            // A kind this agent does not know (written by a newer one).
            r#"{"version":2,"cluster":"x","lastAppliedRevision":1,"policies":[{"policy":{"kind":"FederatedKafkaGroup","namespace":"","name":"n"},"revision":1,"spec":{"scale":{"apiVersion":"apps/v1","kind":"Deployment","namespace":"d","name":"n","replicas":1,"scaleRequestId":""}}}]}"#,
            "not json",
            "[]",
            "",
        ] {
            let error = SavedState::decode(document).unwrap_err();
            assert!(error.is_unreadable(), "{document}: {error}");
        }
        // The same document with a known kind reads.
        let known = r#"{"version":2,"cluster":"x","lastAppliedRevision":1,"policies":[{"policy":{"kind":"CrossClusterScalePolicy","namespace":"","name":"n"},"revision":1,"spec":{"scale":{"apiVersion":"apps/v1","kind":"Deployment","namespace":"d","name":"n","replicas":1,"scaleRequestId":""}}}]}"#;
        assert_eq!(
            SavedState::decode(known).unwrap().state.assignments.len(),
            1
        );
        assert!(
            SavedState::decode(r#"{"version":3}"#)
                .unwrap_err()
                .to_string()
                .contains("version 3")
        );
    }

    #[test]
    fn the_store_epoch_is_saved_beside_the_state_and_absent_means_zero() {
        let state = SavedState {
            cluster: "member-1".into(),
            last_applied_revision: 9,
            assignments: vec![],
        };
        let epoch = u64::MAX - 5;
        let document = state.encode_with_epoch(epoch).unwrap();
        assert!(document.contains("\"version\":2"), "{document}");
        assert!(
            document.contains(&format!("\"storeEpoch\":{epoch}")),
            "{document}"
        );
        let back = SavedState::decode(&document).unwrap();
        assert_eq!((back.store_epoch, &back.state), (epoch, &state));
        // Written before epochs existed.
        let old = SavedState::decode(&state.encode().unwrap()).unwrap();
        assert_eq!(old.store_epoch, 0);
        assert!(!state.encode().unwrap().contains("storeEpoch"));
        for bad in [r#""7""#, "-1", "1.5"] {
            let document = format!(
                r#"{{"version":2,"storeEpoch":{bad},"cluster":"x","lastAppliedRevision":1,"policies":[]}}"#
            );
            let error = SavedState::decode(&document).unwrap_err();
            assert!(error.is_unreadable(), "{bad}: {error}");
        }
    }
}
