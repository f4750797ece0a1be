//! The Secrets FederatedResources deliver (`spec.secretRefs`), as every hub replica sees
//! them. Their data never rests in etcd: the leader's decision records each one's name,
//! type and content hash ([`Secrets::reference`]); every replica adds the data only when it
//! sends an assignment on an agent's mTLS stream ([`Secrets::enclose`]). A change of a
//! Secret is published ([`Secrets::subscribe`]) so the objects that name it are decided
//! again (a new hash: delivered again).

use std::collections::BTreeMap;
use std::sync::Arc;

use accord_common::distribution::DeliveredSecret;
use accord_proto::v1::{Assignment, assignment};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::broadcast;
use tracing::debug;

use crate::controllers::ControllerContext;
use crate::controllers::placement::{PlacementKind, Trigger, Watched};

/// Changes a subscriber may fall behind by before it is told it lagged.
const CHANGES: usize = 1024;

/// Every Secret of the management cluster, as this replica last saw it.
#[derive(Clone)]
pub struct Secrets {
    store: Option<Store<Secret>>,
    changes: broadcast::Sender<(String, String)>,
}

impl Secrets {
    /// No Secrets at all (a hub part that runs without a management cluster, in tests).
    pub fn none() -> Self {
        Self {
            store: None,
            changes: broadcast::channel(1).0,
        }
    }

    /// Starts following every Secret through `kube`; the future keeps the watch (run it
    /// for as long as the hub serves).
    pub fn start(kube: kube::Client) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store::<Secret>();
        let changes = broadcast::channel(CHANGES).0;
        let publish = changes.clone();
        let follow =
            accord_common::watch::watcher(Api::<Secret>::all(kube), watcher::Config::default())
                .default_backoff()
                .modify(|s: &mut Secret| s.metadata.managed_fields = None)
                .reflect(writer)
                .for_each(move |event| {
                    match event {
                        Ok(watcher::Event::Apply(s) | watcher::Event::Delete(s)) => {
                            let key = (
                                s.metadata.namespace.clone().unwrap_or_default(),
                                s.metadata.name.clone().unwrap_or_default(),
                            );
                            let _ = publish.send(key);
                        }
                        Ok(_) => {}
                        Err(e) => debug!(error = %e, "watching Secrets"),
                    }
                    futures::future::ready(())
                });
        (
            Self {
                store: Some(store),
                changes,
            },
            follow,
        )
    }

    /// (namespace, name) of every Secret that changed from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<(String, String)> {
        self.changes.subscribe()
    }

    fn get(&self, namespace: &str, name: &str) -> Option<Arc<Secret>> {
        self.store
            .as_ref()?
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// The reference a decision stores for Secret `namespace/name`: name, type and hash,
    /// without the data; `None` when there is no such Secret.
    pub fn reference(&self, namespace: &str, name: &str) -> Option<DeliveredSecret> {
        let secret = self.get(namespace, name)?;
        let (type_, data) = contents(&secret);
        Some(DeliveredSecret {
            name: name.to_owned(),
            hash: DeliveredSecret::hash_of(&type_, &data),
            type_,
            data: BTreeMap::new(),
        })
    }

    /// The value of `key` in Secret `namespace/name`, as this replica sees it now.
    pub fn value(&self, namespace: &str, name: &str, key: &str) -> Option<Vec<u8>> {
        let secret = self.get(namespace, name)?;
        secret.data.as_ref()?.get(key).map(|v| v.0.clone())
    }

    /// Adds what is never stored to an assignment about to be sent, as this replica sees
    /// the Secrets now: the data of every Secret a FederatedResource assignment names (the
    /// decision's hash stays: a changed Secret brings a new decision), and a
    /// FederatedKafkaUser's salted password ([`crate::kafka_user::credential::enclose`]).
    pub fn enclose(&self, item: &mut Assignment) {
        let namespace = item
            .policy
            .as_ref()
            .map(|p| p.namespace.clone())
            .unwrap_or_default();
        let spec = match item.spec.as_mut() {
            Some(assignment::Spec::FederatedResource(spec)) => spec,
            Some(assignment::Spec::KafkaUser(spec)) => {
                return crate::kafka_user::credential::enclose(self, &namespace, spec);
            }
            _ => return,
        };
        for payload in &mut spec.secrets {
            if let Some(secret) = self.get(&namespace, &payload.name) {
                payload.data = contents(&secret).1.into_iter().collect();
            }
        }
    }
}

/// Decides again the objects of kind `K` that name (`names`) a Secret that changed (all
/// that name any, when the changes came faster than they were read).
pub async fn triggers<K: PlacementKind>(
    ctx: Arc<ControllerContext>,
    objects: Store<Watched<K>>,
    trigger: Trigger<K>,
    names: fn(&Watched<K>) -> Vec<String>,
) {
    let mut changes = ctx.secrets.subscribe();
    loop {
        let changed = match changes.recv().await {
            Ok(changed) => Some(changed),
            Err(broadcast::error::RecvError::Lagged(_)) => None,
            Err(broadcast::error::RecvError::Closed) => {
                // A hub without Secrets (tests): nothing will ever change.
                return std::future::pending().await;
            }
        };
        for o in objects.state() {
            let named = names(&o);
            let concerned = match &changed {
                Some((ns, name)) => {
                    o.metadata.namespace.as_deref() == Some(ns.as_str())
                        && named.iter().any(|n| n == name)
                }
                None => !named.is_empty(),
            };
            if concerned {
                let _ = trigger.send(ObjectRef::from_obj(&*o));
            }
        }
    }
}

/// A Secret's type and data (`stringData` is never stored by the API server).
fn contents(secret: &Secret) -> (String, BTreeMap<String, Vec<u8>>) {
    let data = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    (
        secret.type_.clone().unwrap_or_else(|| "Opaque".into()),
        data,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_proto::v1::{FederatedResourceAssignment, ObjectRef as PolicyObject, SecretPayload};

    #[test]
    fn without_a_store_nothing_is_referenced_or_enclosed() {
        let secrets = Secrets::none();
        assert!(secrets.reference("team", "db").is_none());
        let mut item = Assignment {
            policy: Some(PolicyObject {
                kind: "FederatedResource".into(),
                namespace: "team".into(),
                name: "app".into(),
            }),
            revision: 1,
            spec: Some(assignment::Spec::FederatedResource(
                FederatedResourceAssignment {
                    secrets: vec![SecretPayload {
                        name: "db".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            )),
        };
        secrets.enclose(&mut item);
        let Some(assignment::Spec::FederatedResource(spec)) = item.spec else {
            unreachable!()
        };
        assert!(spec.secrets[0].data.is_empty());
    }

    #[test]
    fn a_secret_without_a_type_is_opaque() {
        let secret = Secret {
            data: Some(
                [(
                    "password".to_owned(),
                    k8s_openapi::ByteString(b"x".to_vec()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        let (type_, data) = contents(&secret);
        assert_eq!(type_, "Opaque");
        assert_eq!(data["password"], b"x");
    }
}
