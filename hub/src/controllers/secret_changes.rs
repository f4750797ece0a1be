//! Objects decided again when a Secret they name changes (a new hash: delivered again).

use std::sync::Arc;

use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::broadcast;

use super::ControllerContext;
use super::placement::{PlacementKind, Trigger, Watched};

/// Decides again the objects of kind `K` that name (`names`) a Secret that changed (all
/// that name any, when the changes came faster than they were read).
pub async fn trigger_on_secret_changes<K: PlacementKind>(
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
