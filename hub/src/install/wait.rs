//! `install --wait`: watches until the CRDs are Established and the workloads are ready,
//! printing progress to stderr whenever it changes, and gives up at a deadline with what it
//! saw last and where to look.

use std::fmt::Debug;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

/// Waiting did not end in success.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The deadline passed.
    #[error("timed out after {timeout:?} waiting for {what} (last seen: {last}); {hint}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// The last progress seen.
        last: String,
        /// Where to look next.
        hint: String,
        /// The whole `--timeout`.
        timeout: Duration,
    },
    /// The watch failed.
    #[error("watching {what} failed")]
    Watch {
        /// What was watched.
        what: String,
        /// What the watcher said.
        #[source]
        source: watcher::Error,
    },
}

/// How far a workload or CRD is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Done waiting.
    pub done: bool,
    /// One line for humans, e.g. `0/1 ready`.
    pub summary: String,
}

/// A Deployment is available when the controller has seen its latest spec, every replica is
/// updated and ready, and its `Available` condition is true.
pub fn deployment_progress(d: Option<&Deployment>) -> Progress {
    let Some(d) = d else {
        return Progress {
            done: false,
            summary: "not found".into(),
        };
    };
    let desired = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = d.status.clone().unwrap_or_default();
    let ready = status.ready_replicas.unwrap_or(0);
    let updated = status.updated_replicas.unwrap_or(0);
    let observed = status.observed_generation >= d.metadata.generation;
    let available = status
        .conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Available" && c.status == "True");
    Progress {
        done: observed && available && ready >= desired && updated >= desired,
        summary: format!("{ready}/{desired} ready"),
    }
}

/// A StatefulSet is ready when every replica is ready and current.
pub fn stateful_set_progress(s: Option<&StatefulSet>) -> Progress {
    let Some(s) = s else {
        return Progress {
            done: false,
            summary: "not found".into(),
        };
    };
    let desired = s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = s.status.clone().unwrap_or_default();
    let ready = status.ready_replicas.unwrap_or(0);
    let observed = status.observed_generation >= s.metadata.generation;
    Progress {
        done: observed && ready >= desired,
        summary: format!("{ready}/{desired} ready"),
    }
}

/// A CRD is done once its `Established` condition is true (its API is served).
pub fn crd_progress(c: Option<&CustomResourceDefinition>) -> Progress {
    let established = c
        .and_then(|c| c.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
    Progress {
        done: established,
        summary: if established {
            "Established"
        } else {
            "not Established yet"
        }
        .into(),
    }
}

/// Watches the object `name` through `api` until `progress` says done or `deadline`
/// passes, printing `waiting for {what}: {summary}` to stderr each time the summary changes.
pub async fn until<K>(
    api: Api<K>,
    name: &str,
    what: &str,
    hint: &str,
    progress: fn(Option<&K>) -> Progress,
    deadline: Instant,
    timeout: Duration,
) -> Result<(), WaitError>
where
    K: accord_common::watch::AlwaysDecodes
        + Resource
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(
        accord_common::watch::watcher(api, config)
            .default_backoff()
            .touched_objects()
    );
    let mut last = String::from("nothing yet");
    loop {
        let next = tokio::time::timeout_at(deadline, events.next()).await;
        let object = match next {
            Err(_) | Ok(None) => {
                return Err(WaitError::Timeout {
                    what: what.to_owned(),
                    last,
                    hint: hint.to_owned(),
                    timeout,
                });
            }
            Ok(Some(Err(source))) => {
                return Err(WaitError::Watch {
                    what: what.to_owned(),
                    source,
                });
            }
            Ok(Some(Ok(object))) => object,
        };
        let p = progress(Some(&object));
        if p.summary != last {
            eprintln!("waiting for {what}: {}", p.summary);
            last = p.summary;
        }
        if p.done {
            return Ok(());
        }
    }
}

/// Waits for every CRD to be Established, then the evaluation etcd (if any), then the
/// hub Deployment.
pub async fn installation(
    client: &Client,
    namespace: &str,
    crds: &[String],
    etcd: Option<&str>,
    deployment: &str,
    timeout: Duration,
) -> Result<(), WaitError> {
    let deadline = Instant::now() + timeout;
    let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let established = futures::stream::iter(crds.iter().map(|name| {
        let api = crd_api.clone();
        async move {
            until(
                api,
                name,
                &format!("CustomResourceDefinition {name}"),
                "check `kubectl get crd NAME -o yaml` for a NamesAccepted or NonStructuralSchema condition",
                crd_progress,
                deadline,
                timeout,
            )
            .await
        }
    }))
    .buffer_unordered(crds.len().max(1))
    .try_collect::<Vec<()>>();
    established.await?;
    if let Some(etcd) = etcd {
        until(
            Api::<StatefulSet>::namespaced(client.clone(), namespace),
            etcd,
            &format!("statefulset {namespace}/{etcd}"),
            &format!(
                "check `kubectl -n {namespace} describe statefulset {etcd}` and its \
                 PersistentVolumeClaim (is there a default StorageClass?)"
            ),
            stateful_set_progress,
            deadline,
            timeout,
        )
        .await?;
    }
    until(
        Api::<Deployment>::namespaced(client.clone(), namespace),
        deployment,
        &format!("deployment {namespace}/{deployment}"),
        &format!(
            "check `kubectl -n {namespace} describe deployment {deployment}` and \
             `kubectl -n {namespace} logs deployment/{deployment}`"
        ),
        deployment_progress,
        deadline,
        timeout,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(status: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": { "name": "accord-hub", "generation": 2 },
            "spec": { "replicas": 2, "selector": {}, "template": {} },
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_deployment_is_done_only_when_available_with_every_replica_ready_and_updated() {
        let fresh = deployment(json!({}));
        assert_eq!(
            deployment_progress(Some(&fresh)),
            Progress {
                done: false,
                summary: "0/2 ready".into()
            }
        );
        let ready = json!({
            "observedGeneration": 2, "readyReplicas": 2, "updatedReplicas": 2,
            "conditions": [{ "type": "Available", "status": "True" }],
        });
        assert!(deployment_progress(Some(&deployment(ready.clone()))).done);
        let mut stale = ready.clone();
        stale["observedGeneration"] = json!(1);
        assert!(
            !deployment_progress(Some(&deployment(stale))).done,
            "old generation"
        );
        let mut rolling = ready;
        rolling["updatedReplicas"] = json!(1);
        assert!(
            !deployment_progress(Some(&deployment(rolling))).done,
            "rollout in progress"
        );
        assert_eq!(deployment_progress(None).summary, "not found");
    }

    #[test]
    fn a_crd_is_done_once_established() {
        let crd: CustomResourceDefinition = serde_json::from_value(json!({
            "metadata": { "name": "managedclusters.accord.io" },
            "spec": { "group": "accord.io", "names": { "kind": "ManagedCluster", "plural": "managedclusters" }, "scope": "Cluster", "versions": [] },
            "status": { "conditions": [{ "type": "Established", "status": "True" }] },
        }))
        .unwrap();
        assert!(crd_progress(Some(&crd)).done);
        assert!(!crd_progress(None).done);
    }
}
