//! `accord-hub cluster revoke NAME`: takes a member cluster's identity away.
//!
//! Deleting the cluster's registry record is the revocation: every hub replica follows the
//! registry and ends the cluster's stream within a second ([`crate::revocation`]), and the
//! next connect with its certificate is refused. With a kubeconfig (`--kubeconfig` or
//! `$KUBECONFIG`) the ManagedCluster is deleted as well; its finalizer finds the record
//! already gone and lets it go.

use accord_common::runtime::{KubeClientError, kube_client};
use accord_crds::validate::is_dns1123_label;
use kube::Api;
use kube::api::DeleteParams;

use crate::cli::StateArgs;
use crate::controllers::ClusterObject;
use crate::store::StoreError;

/// Why a revoke failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterCmdError {
    /// The name cannot be a cluster's.
    #[error("cluster name {0:?}: {msg}", msg = accord_crds::messages::CLUSTER_NAME)]
    InvalidName(String),
    /// etcd could not be reached or failed.
    #[error("cluster registry at {endpoints}")]
    Store {
        /// The endpoints tried.
        endpoints: String,
        /// What failed.
        #[source]
        source: StoreError,
    },
    /// No Kubernetes client could be built from the kubeconfig.
    #[error("management cluster")]
    KubeClient(#[from] KubeClientError),
    /// The API server refused or failed the deletion.
    #[error("deleting ManagedCluster {name:?}")]
    Kube {
        /// The cluster.
        name: String,
        /// What failed.
        #[source]
        source: kube::Error,
    },
    /// Neither a registry record nor a ManagedCluster has this name.
    #[error(
        "cluster {0:?} is not known to this hub (no registry record{1}); check the name with \
         `kubectl get managedclusters`"
    )]
    Unknown(String, &'static str),
}

/// What a revoke did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoked {
    /// The cluster.
    pub name: String,
    /// Whether a registry record was deleted (false: there was none).
    pub record_deleted: bool,
    /// `Some(true)` when a ManagedCluster was deleted, `Some(false)` when there was none,
    /// `None` when no kubeconfig was given.
    pub object_deleted: Option<bool>,
}

impl Revoked {
    /// The lines the command prints.
    pub fn lines(&self) -> Vec<String> {
        let name = &self.name;
        let mut lines = vec![if self.record_deleted {
            format!(
                "cluster {name:?} revoked: its registry record is deleted; every hub replica \
                 ends its stream within a second and refuses its certificate from now on"
            )
        } else {
            format!(
                "cluster {name:?} has no registry record (never registered, or already revoked)"
            )
        }];
        lines.push(match self.object_deleted {
            Some(true) => format!("ManagedCluster {name:?} deleted"),
            Some(false) => format!("ManagedCluster {name:?} not found"),
            None => format!(
                "ManagedCluster {name:?} left in place (no kubeconfig given); delete it with \
                 `kubectl delete managedcluster {name}` or run this with --kubeconfig"
            ),
        });
        lines.push(format!(
            "to join {name:?} again, create a new token (accord-hub token create) and run \
             accord-agent join on the member"
        ));
        lines
    }
}

/// Revokes cluster `name`: deletes its registry record, and its ManagedCluster when a
/// kubeconfig is given.
pub async fn revoke(state: &StateArgs, name: &str) -> Result<Revoked, ClusterCmdError> {
    if !is_dns1123_label(name) {
        return Err(ClusterCmdError::InvalidName(name.to_owned()));
    }
    let endpoints = state.etcd_endpoints.join(",");
    let store_error = |source| ClusterCmdError::Store {
        endpoints: endpoints.clone(),
        source,
    };
    // With the same TLS files and credentials as every other command that opens the store.
    let store = state.connect_store().await.map_err(store_error)?;
    // The record first: that is the revocation, and it holds even if the API server is
    // unreachable.
    let record_deleted = store.delete_cluster(name).await.map_err(store_error)?;
    let object_deleted = match &state.kubeconfig {
        None => None,
        Some(path) => {
            let client = kube_client(Some(path)).await?;
            let api: Api<ClusterObject> = Api::all(client);
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => Some(true),
                Err(kube::Error::Api(s)) if s.code == 404 => Some(false),
                Err(source) => {
                    return Err(ClusterCmdError::Kube {
                        name: name.to_owned(),
                        source,
                    });
                }
            }
        }
    };
    if !record_deleted && object_deleted != Some(true) {
        let note = if object_deleted.is_some() {
            " and no ManagedCluster"
        } else {
            ""
        };
        return Err(ClusterCmdError::Unknown(name.to_owned(), note));
    }
    Ok(Revoked {
        name: name.to_owned(),
        record_deleted,
        object_deleted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_says_what_was_revoked_and_how_to_join_again() {
        let r = Revoked {
            name: "east".into(),
            record_deleted: true,
            object_deleted: Some(true),
        };
        let text = r.lines().join("\n");
        assert!(text.contains("cluster \"east\" revoked"), "{text}");
        assert!(text.contains("ManagedCluster \"east\" deleted"), "{text}");
        assert!(text.contains("token create"), "{text}");
    }

    #[test]
    fn without_a_kubeconfig_the_output_says_the_object_was_left() {
        let r = Revoked {
            name: "east".into(),
            record_deleted: true,
            object_deleted: None,
        };
        assert!(r.lines()[1].contains("left in place"), "{:?}", r.lines());
    }

    #[tokio::test]
    async fn a_name_that_cannot_be_a_cluster_is_refused_before_anything_is_touched() {
        use clap::Parser;
        // Nothing listens at this endpoint: the name check must come first.
        let cli = crate::cli::Cli::try_parse_from([
            "accord-hub",
            "cluster",
            "revoke",
            "--etcd-endpoints",
            "http://127.0.0.1:1",
            "../other",
        ])
        .unwrap();
        let err = crate::cli::run(cli).await.unwrap_err();
        let err = err.downcast::<ClusterCmdError>().unwrap();
        assert!(matches!(err, ClusterCmdError::InvalidName(_)), "{err}");
        assert!(err.to_string().contains("\"../other\""), "{err}");
    }

    #[test]
    fn an_unknown_cluster_is_an_error_naming_it() {
        let e = ClusterCmdError::Unknown("wset".into(), " and no ManagedCluster");
        let text = e.to_string();
        assert!(text.contains("\"wset\""), "{text}");
        assert!(
            text.contains("no registry record and no ManagedCluster"),
            "{text}"
        );
    }
}
