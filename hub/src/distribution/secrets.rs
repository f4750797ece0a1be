//! The management cluster's Secrets, as every hub replica sees them, for the kinds that
//! deliver Secrets or what derives from them (`secretRefs`, credentials). Their data never
//! rests in etcd: a decision records a Secret's name, type and content hash
//! ([`Secrets::reference`]); every replica adds what is never stored only when it sends an
//! assignment on an agent's mTLS stream, through the enclosers the kinds register
//! ([`Enclose`], [`Secrets::enclose`]). A change of a Secret is published
//! ([`Secrets::subscribe`]) so the objects that name it are decided again
//! (`crate::controllers::secret_changes`).

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

/// Changes a subscriber may fall behind by before it is told it lagged.
const CHANGES: usize = 1024;

/// Adds what is never stored to an assignment of one kind about to be sent (`namespace`
/// is its object's), from the Secrets as this replica sees them now; leaves the
/// assignments of other kinds alone.
pub type Enclose = fn(&Secrets, namespace: &str, spec: &mut assignment::Spec);

/// Every Secret of the management cluster, as this replica last saw it.
#[derive(Clone)]
pub struct Secrets {
    store: Option<Store<Secret>>,
    changes: broadcast::Sender<(String, String)>,
    enclosers: &'static [Enclose],
}

impl Secrets {
    /// No Secrets at all (a hub part that runs without a management cluster, in tests).
    pub fn none() -> Self {
        Self {
            store: None,
            changes: broadcast::channel(1).0,
            enclosers: &[],
        }
    }

    /// Starts following every Secret through `kube`, enclosing with `enclosers`; the
    /// future keeps the watch (run it for as long as the hub serves).
    pub fn start(
        kube: kube::Client,
        enclosers: &'static [Enclose],
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
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
                enclosers,
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

    /// The type and data of Secret `namespace/name`, as this replica sees it now.
    pub fn contents(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<(String, BTreeMap<String, Vec<u8>>)> {
        self.get(namespace, name).map(|s| contents(&s))
    }

    /// Adds what is never stored to an assignment about to be sent, as this replica sees
    /// the Secrets now, through every registered [`Enclose`].
    pub fn enclose(&self, item: &mut Assignment) {
        let (Some(placed), Some(spec)) = (item.placed.as_ref(), item.spec.as_mut()) else {
            return;
        };
        for enclose in self.enclosers {
            enclose(self, &placed.namespace, spec);
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

    #[test]
    fn without_a_store_nothing_is_referenced() {
        let secrets = Secrets::none();
        assert!(secrets.reference("team", "db").is_none());
        assert!(secrets.contents("team", "db").is_none());
        assert!(secrets.value("team", "db", "password").is_none());
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
