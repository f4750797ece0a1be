//! Fans placements of every kind out to the agent streams this replica holds.
//!
//! Every replica watches `placements/` (one key per policy). One policy change is one etcd
//! write; each replica turns the watch event into a delta for the clusters it holds — an
//! upsert for clusters with a share, a removal for clusters that had one and no longer do —
//! and a cluster that connects gets the full set of its assignments.
//!
//! Every message carries the [store epoch](crate::store::epoch). When it changes (the
//! store was restored), every stream this replica holds gets its full set again, so the
//! agents forget the revisions of the old epoch.

use accord_proto::v1::{Assignments, HubMessage, ObjectRef, Removal, hub_message};
use std::collections::{HashMap, HashSet};
use tokio::sync::broadcast::error::RecvError;
use tracing::debug;

use accord_common::distribution::PolicyRef;

use super::record::PlacementRecord;
use crate::connections::Connections;
use crate::store::epoch::StoreEpoch;
use crate::store::{CacheEvent, PrefixCache, Store, StoreError};

/// The placements cache and the fan-out task.
#[derive(Clone)]
pub struct Fanout {
    cache: PrefixCache<PlacementRecord>,
    epoch: StoreEpoch,
}

impl Fanout {
    /// Lists `placements/` and starts following it; [`Fanout::run`] sends the changes.
    pub async fn start(store: Store) -> Result<Self, StoreError> {
        let epoch = StoreEpoch::start(store.clone()).await?;
        let cache = PrefixCache::start(store.clone(), store.keys().placements_prefix()).await?;
        Ok(Self { cache, epoch })
    }

    /// Fans every change out to `connections` (and checks the store epoch); returns only
    /// if the cache stops, so the caller supervises it.
    pub async fn run(self, connections: Connections) {
        let checks = tokio::spawn(self.epoch.clone().run());
        let _checks = accord_common::runtime::AbortOnDrop(checks);
        run(self.cache, self.epoch, connections).await;
    }

    /// This replica's view of the store epoch.
    pub fn epoch(&self) -> &StoreEpoch {
        &self.epoch
    }

    /// The placements cache (also read by the leader's controller).
    pub fn cache(&self) -> &PrefixCache<PlacementRecord> {
        &self.cache
    }

    /// Every assignment of `cluster`, as one full Assignments message.
    pub fn full_for(&self, cluster: &str) -> Assignments {
        full_assignments(&self.cache, self.epoch.current(), cluster)
    }
}

fn full_assignments(
    cache: &PrefixCache<PlacementRecord>,
    store_epoch: u64,
    cluster: &str,
) -> Assignments {
    let revision = cache.revision();
    let items = cache
        .snapshot()
        .into_iter()
        .filter_map(|(_, record, rev)| record.assignment_for(cluster, rev))
        .collect();
    Assignments {
        revision,
        full: true,
        items,
        store_epoch,
        ..Default::default()
    }
}

fn send(connections: &Connections, cluster: &str, assignments: Assignments) {
    let Some(conn) = connections.get(cluster) else {
        return;
    };
    let msg = HubMessage {
        body: Some(hub_message::Body::Assignments(assignments)),
    };
    if let Err(tokio::sync::mpsc::error::TrySendError::Full(msg)) = conn.outbox.try_send(Ok(msg)) {
        // A slow agent: deliver without holding up the other clusters. Agents apply only
        // newer revisions, so a late delivery cannot undo a newer assignment.
        let outbox = conn.outbox.clone();
        tokio::spawn(async move {
            let _ = outbox.send(msg).await;
        });
    }
}

/// Clusters named in a record.
fn clusters_of(record: &PlacementRecord) -> HashSet<String> {
    record.shares.iter().map(|s| s.cluster.clone()).collect()
}

/// Which policy each key holds and which clusters it names, as the cache has them now.
fn known_of(cache: &PrefixCache<PlacementRecord>) -> HashMap<String, (PolicyRef, HashSet<String>)> {
    cache
        .snapshot()
        .into_iter()
        .map(|(k, r, _)| (k, (r.policy.clone(), clusters_of(&r))))
        .collect()
}

async fn run(cache: PrefixCache<PlacementRecord>, epoch: StoreEpoch, connections: Connections) {
    let mut events = cache.subscribe();
    let mut epochs = epoch.subscribe();
    // Which policy each key holds and which clusters it named, to send removals.
    let mut known = known_of(&cache);
    loop {
        let event = tokio::select! {
            event = events.recv() => event,
            changed = epochs.changed() => {
                if changed.is_err() {
                    return;
                }
                let store_epoch = *epochs.borrow_and_update();
                debug!(store_epoch, "store epoch changed; resending full sets");
                for (cluster, _) in connections.all() {
                    send(&connections, &cluster, full_assignments(&cache, store_epoch, &cluster));
                }
                continue;
            }
        };
        let store_epoch = epoch.current();
        match event {
            Ok(CacheEvent::Put {
                key,
                value,
                mod_revision,
            }) => {
                let now: HashSet<String> = clusters_of(&value);
                let before = known.get(&key).map(|(_, c)| c.clone()).unwrap_or_default();
                for cluster in now.union(&before) {
                    let delta = match value.assignment_for(cluster, mod_revision) {
                        Some(item) => Assignments {
                            revision: mod_revision,
                            full: false,
                            items: vec![item],
                            store_epoch,
                            ..Default::default()
                        },
                        None => Assignments {
                            revision: mod_revision,
                            full: false,
                            items: vec![],
                            removed: vec![Removal {
                                policy: Some(value.policy.to_proto()),
                                revision: mod_revision,
                            }],
                            store_epoch,
                        },
                    };
                    send(&connections, cluster, delta);
                }
                known.insert(key, (value.policy.clone(), now));
            }
            Ok(CacheEvent::Delete { key }) => {
                if let Some((policy, clusters)) = known.remove(&key) {
                    let revision = cache.revision();
                    let removed: ObjectRef = policy.to_proto();
                    for cluster in clusters {
                        send(
                            &connections,
                            &cluster,
                            Assignments {
                                revision,
                                full: false,
                                items: vec![],
                                removed: vec![Removal {
                                    policy: Some(removed.clone()),
                                    revision,
                                }],
                                store_epoch,
                            },
                        );
                    }
                }
            }
            Err(RecvError::Lagged(n)) => {
                debug!(missed = n, "placements fan-out lagged; resending full sets");
                known = known_of(&cache);
                for (cluster, _) in connections.all() {
                    send(
                        &connections,
                        &cluster,
                        full_assignments(&cache, store_epoch, &cluster),
                    );
                }
            }
            Err(RecvError::Closed) => return,
        }
    }
}
