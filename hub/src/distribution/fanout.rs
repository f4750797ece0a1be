//! Fans placements of every kind out to the agent streams this replica holds.
//!
//! Every replica watches `placements/` (one key per placed object). One placed object
//! change is one etcd write; each replica turns the watch event into a delta for the
//! clusters it holds — an upsert for clusters whose share this record changed (a share an
//! earlier record sent as it is, [`super::record::ShareRecord::since`], is not sent again),
//! a removal for clusters that had one and no longer do — and a cluster that connects gets
//! the full set of its assignments.
//!
//! Every message carries the [store epoch](crate::store::epoch). When it changes (the
//! store was restored), every stream this replica holds gets its full set again, so the
//! agents forget the revisions of the old epoch.

use accord_proto::v1::{Assignment, Assignments, HubMessage, ObjectRef, Removal, hub_message};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc};
use tracing::debug;

use accord_common::distribution::PlacedRef;
use accord_common::metrics::observe_traced;
use accord_common::telemetry;

use super::record::PlacementRecord;
use crate::connections::Connections;
use crate::distribution::secrets::Secrets;
use crate::metrics::ChangeStages;
use crate::store::epoch::StoreEpoch;
use crate::store::{CacheEvent, PrefixCache, Store, StoreError};

/// The placements cache and the fan-out task.
#[derive(Clone)]
pub struct Fanout {
    cache: PrefixCache<PlacementRecord>,
    epoch: StoreEpoch,
    secrets: Secrets,
}

impl Fanout {
    /// Lists `placements/` and starts following it; [`Fanout::run`] sends the changes,
    /// each with the data of the Secrets it delivers added from `secrets`.
    pub async fn start(store: Store, secrets: Secrets) -> Result<Self, StoreError> {
        let epoch = StoreEpoch::start(store.clone()).await?;
        let cache = PrefixCache::start(store.clone(), store.keys().placements_prefix()).await?;
        Ok(Self {
            cache,
            epoch,
            secrets,
        })
    }

    /// Fans every change out to `connections` (and checks the store epoch), timing each
    /// change's way from its decision to the streams in `stages`; returns only if the cache
    /// stops, so the caller supervises it.
    pub async fn run(self, connections: Connections, stages: ChangeStages) {
        let checks = tokio::spawn(self.epoch.clone().run());
        let _checks = accord_common::runtime::AbortOnDrop(checks);
        run(self.cache, self.epoch, self.secrets, connections, stages).await;
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
        full_assignments(&self.cache, &self.secrets, self.epoch.current(), cluster)
    }
}

fn full_assignments(
    cache: &PrefixCache<PlacementRecord>,
    secrets: &Secrets,
    store_epoch: u64,
    cluster: &str,
) -> Assignments {
    let revision = cache.revision();
    // Visited, not copied: a record names every cluster it places, and every connect
    // reads them all.
    let mut items = Vec::new();
    cache.visit(|_, record, rev| items.extend(record.assignment_for(cluster, rev)));
    items.iter_mut().for_each(|item| secrets.enclose(item));
    items.sort_by_key(|a: &Assignment| a.revision);
    Assignments {
        revision,
        full: true,
        items,
        store_epoch,
        ..Default::default()
    }
}

/// Where assignments go: this replica's streams, with what a resync reads.
#[derive(Clone, Copy)]
struct Out<'a> {
    connections: &'a Connections,
    cache: &'a PrefixCache<PlacementRecord>,
    secrets: &'a Secrets,
    epoch: &'a StoreEpoch,
}

impl Out<'_> {
    /// Queues `assignments` on `cluster`'s stream without waiting. A slow agent never
    /// holds up the others, and its queue never grows past the outbox's capacity: when the
    /// outbox is full the agent is marked behind, changes for it are dropped while it is,
    /// and once the outbox has room it gets its full set as the cache holds it then (which
    /// covers every dropped change, as the cache took each before its event came).
    fn send(self, cluster: &str, assignments: Assignments) {
        let Some(conn) = self.connections.get(cluster) else {
            return;
        };
        if conn.behind.load(Ordering::Acquire) {
            return;
        }
        let msg = HubMessage {
            body: Some(hub_message::Body::Assignments(assignments)),
        };
        if let Err(mpsc::error::TrySendError::Full(_)) = conn.outbox.try_send(Ok(msg))
            && !conn.behind.swap(true, Ordering::AcqRel)
        {
            debug!(
                cluster,
                "agent behind; its full set follows when it has room"
            );
            let cache = self.cache.clone();
            let secrets = self.secrets.clone();
            let epoch = self.epoch.clone();
            let cluster = cluster.to_owned();
            tokio::spawn(async move {
                let Ok(permit) = conn.outbox.reserve().await else {
                    return;
                };
                // Cleared before the full set is read: a change that sees the flag set is
                // already in the cache the full set is read from.
                conn.behind.store(false, Ordering::Release);
                let full = full_assignments(&cache, &secrets, epoch.current(), &cluster);
                permit.send(Ok(HubMessage {
                    body: Some(hub_message::Body::Assignments(full)),
                }));
            });
        }
    }
}

/// Clusters named in a record.
fn clusters_of(record: &PlacementRecord) -> HashSet<String> {
    record.shares.iter().map(|s| s.cluster.clone()).collect()
}

/// Which placed object each key holds and which clusters it names, as the cache has them now.
fn known_of(cache: &PrefixCache<PlacementRecord>) -> HashMap<String, (PlacedRef, HashSet<String>)> {
    let mut known = HashMap::new();
    cache.visit(|k, r, _| {
        known.insert(k.to_owned(), (r.placed.clone(), clusters_of(r)));
    });
    known
}

/// Changes taken together from the cache: the fan-out drains every event already queued
/// before it sends, so a thousand placements written at once reach each agent as a few
/// messages instead of a thousand (an agent judges and saves once per message).
const MAX_BATCH: usize = 1024;

/// The deltas for each cluster gathered from one batch of cache events, the latest per
/// placed object.
#[derive(Default)]
struct Deltas {
    by_cluster: HashMap<String, HashMap<String, Delta>>,
}

/// One placed object's change for one cluster.
enum Delta {
    Upsert(Box<Assignment>),
    Removed(Removal),
}

impl Deltas {
    fn upsert(&mut self, cluster: &str, key: &str, item: Assignment) {
        self.entry(cluster)
            .insert(key.to_owned(), Delta::Upsert(Box::new(item)));
    }

    fn remove(&mut self, cluster: &str, key: &str, removal: Removal) {
        self.entry(cluster)
            .insert(key.to_owned(), Delta::Removed(removal));
    }

    fn entry(&mut self, cluster: &str) -> &mut HashMap<String, Delta> {
        self.by_cluster.entry(cluster.to_owned()).or_default()
    }

    /// Sends each cluster its [message](Self::messages).
    fn send(self, out: Out<'_>, store_epoch: u64) {
        for (cluster, message) in self.messages(store_epoch) {
            out.send(&cluster, message);
        }
    }

    /// One Assignments message per cluster with its deltas, at the newest revision among
    /// them (every item and removal keeps its own).
    fn messages(self, store_epoch: u64) -> Vec<(String, Assignments)> {
        let mut messages = Vec::with_capacity(self.by_cluster.len());
        for (cluster, deltas) in self.by_cluster {
            let mut message = Assignments {
                full: false,
                store_epoch,
                ..Default::default()
            };
            for delta in deltas.into_values() {
                match delta {
                    Delta::Upsert(item) => {
                        message.revision = message.revision.max(item.revision);
                        message.items.push(*item);
                    }
                    Delta::Removed(removal) => {
                        message.revision = message.revision.max(removal.revision);
                        message.removed.push(removal);
                    }
                }
            }
            message.items.sort_by_key(|item| item.revision);
            message.removed.sort_by_key(|removal| removal.revision);
            messages.push((cluster, message));
        }
        messages
    }
}

async fn run(
    cache: PrefixCache<PlacementRecord>,
    epoch: StoreEpoch,
    secrets: Secrets,
    connections: Connections,
    stages: ChangeStages,
) {
    let mut events = cache.subscribe();
    let mut epochs = epoch.subscribe();
    // Which placed object each key holds and which clusters it named, to send removals.
    let mut known = known_of(&cache);
    let out = Out {
        connections: &connections,
        cache: &cache,
        secrets: &secrets,
        epoch: &epoch,
    };
    loop {
        let first = tokio::select! {
            event = events.recv() => event,
            changed = epochs.changed() => {
                if changed.is_err() {
                    return;
                }
                let store_epoch = *epochs.borrow_and_update();
                debug!(store_epoch, "store epoch changed; resending full sets");
                for (cluster, _) in connections.all() {
                    out.send(&cluster, full_assignments(&cache, &secrets, store_epoch, &cluster));
                }
                continue;
            }
        };
        let store_epoch = epoch.current();
        let mut deltas = Deltas::default();
        // The changes this batch sends: when each was decided and its trace, with the
        // spans of its sends (tracing on), ended once the batch is queued.
        let mut sent: Vec<(i64, String)> = Vec::new();
        let mut send_spans: Vec<tracing::Span> = Vec::new();
        let mut next = Some(first);
        let mut taken = 0;
        while let Some(event) = next.take() {
            taken += 1;
            match event {
                Ok(CacheEvent::Put {
                    key,
                    value,
                    mod_revision,
                }) => {
                    // One pass over the shares (a record may name a whole fleet), for the
                    // clusters this replica holds; a cluster that connects later gets its
                    // full set from the cache.
                    let now: HashSet<String> = clusters_of(&value);
                    let before = known.remove(&key).map(|(_, c)| c).unwrap_or_default();
                    let removal = || Removal {
                        placed: Some(value.placed.to_proto()),
                        revision: mod_revision,
                    };
                    let fanout = fanout_span(&value);
                    let mut sends = false;
                    for share in &value.shares {
                        // A share an earlier record sent as it is: its agent has it.
                        if share.since.is_some() || !connections.holds(&share.cluster) {
                            continue;
                        }
                        match value.assignment_of(share, mod_revision) {
                            Some(mut item) => {
                                sends = true;
                                if !fanout.is_disabled() {
                                    let span = tracing::info_span!(
                                        target: telemetry::TARGET,
                                        parent: &fanout,
                                        "send",
                                        accord.cluster = %share.cluster,
                                        accord.revision = mod_revision,
                                    );
                                    item.traceparent = telemetry::traceparent(&span);
                                    send_spans.push(span);
                                }
                                secrets.enclose(&mut item);
                                deltas.upsert(&share.cluster, &key, item)
                            }
                            None => deltas.remove(&share.cluster, &key, removal()),
                        }
                    }
                    for cluster in before.difference(&now) {
                        if connections.holds(cluster) {
                            deltas.remove(cluster, &key, removal());
                        }
                    }
                    if sends {
                        sent.push((value.decided_unix_millis, value.traceparent.clone()));
                    }
                    known.insert(key, (value.placed.clone(), now));
                }
                Ok(CacheEvent::Delete { key }) => {
                    if let Some((placed, clusters)) = known.remove(&key) {
                        let revision = cache.revision();
                        let removed: ObjectRef = placed.to_proto();
                        for cluster in clusters {
                            deltas.remove(
                                &cluster,
                                &key,
                                Removal {
                                    placed: Some(removed.clone()),
                                    revision,
                                },
                            );
                        }
                    }
                }
                Err(RecvError::Lagged(n)) => {
                    debug!(missed = n, "placements fan-out lagged; resending full sets");
                    // The full sets replace whatever was gathered.
                    deltas = Deltas::default();
                    known = known_of(&cache);
                    for (cluster, _) in connections.all() {
                        out.send(
                            &cluster,
                            full_assignments(&cache, &secrets, store_epoch, &cluster),
                        );
                    }
                }
                Err(RecvError::Closed) => {
                    deltas.send(out, store_epoch);
                    return;
                }
            }
            if taken < MAX_BATCH {
                next = match events.try_recv() {
                    Ok(event) => Some(Ok(event)),
                    Err(broadcast::error::TryRecvError::Lagged(n)) => {
                        Some(Err(RecvError::Lagged(n)))
                    }
                    Err(broadcast::error::TryRecvError::Closed) => Some(Err(RecvError::Closed)),
                    Err(broadcast::error::TryRecvError::Empty) => None,
                };
            }
        }
        deltas.send(out, store_epoch);
        drop(send_spans);
        if !sent.is_empty() {
            let now = accord_common::runtime::unix_millis();
            for (decided, traceparent) in sent {
                let seconds = (now - decided).max(0) as f64 / 1000.0;
                observe_traced(&stages.fanout_seconds, seconds, &traceparent);
            }
        }
    }
}

/// The span of a traced record's fan-out on this replica, child of the change that wrote
/// it; disabled when the record is not traced or tracing is off here.
fn fanout_span(record: &PlacementRecord) -> tracing::Span {
    if record.traceparent.is_empty() || !telemetry::enabled() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: telemetry::TARGET,
        parent: None,
        "fan-out",
        accord.placed = %record.placed,
    );
    telemetry::set_parent(&span, &record.traceparent);
    span
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::distribution::PlacedKind;

    fn placed(name: &str) -> PlacedRef {
        PlacedRef::new(PlacedKind::FederatedKafkaTopic, "default", name)
    }

    fn item(name: &str, revision: i64) -> Assignment {
        Assignment {
            placed: Some(placed(name).to_proto()),
            revision,
            spec: None,
            traceparent: String::new(),
        }
    }

    fn removal(name: &str, revision: i64) -> Removal {
        Removal {
            placed: Some(placed(name).to_proto()),
            revision,
        }
    }

    /// A record that changes one cluster's share sends that cluster its new assignment and
    /// nothing to a cluster whose share an earlier record sent as it is.
    #[tokio::test]
    async fn a_record_sends_only_the_shares_it_changed() {
        use super::super::record::ShareRecord;
        use crate::store::Keyspace;
        use accord_common::distribution::{AssignmentSpec, ScaleSpec};
        let store = Store::in_memory(Keyspace::new("/fanout-test/"));
        let fanout = Fanout::start(store.clone(), Secrets::none()).await.unwrap();
        let connections = Connections::default();
        let (tx_a, mut rx_a) = mpsc::channel(16);
        let (tx_b, mut rx_b) = mpsc::channel(16);
        connections.open("a", "ka", tx_a);
        connections.open("b", "kb", tx_b);
        tokio::spawn(fanout.run(connections.clone(), crate::metrics::Metrics::new().change));
        // The current-thread runtime runs the fan-out until it waits for its first event.
        tokio::task::yield_now().await;
        let placed = PlacedRef::new(PlacedKind::CrossClusterScalePolicy, "default", "web");
        let key = store
            .keys()
            .placements(placed.kind.as_str(), &placed.namespace, &placed.name);
        let share = |cluster: &str, replicas: i32| ShareRecord {
            cluster: cluster.into(),
            assignment: Some(AssignmentSpec::Scale(ScaleSpec::deployment(
                "prod", "web", replicas, "r",
            ))),
            held_reason: None,
            hold: None,
            since: None,
        };
        let mut record = PlacementRecord {
            placed: placed.clone(),
            generation: 1,
            decided_unix_millis: 0,
            shares: vec![share("a", 1), share("b", 1)],
            decision: serde_json::Value::Null,
            traceparent: String::new(),
        };
        let put = async |record: &PlacementRecord| store.put_json(&key, record).await.unwrap();
        let first = put(&record).await;
        let revision_of = |m: Option<Result<HubMessage, tonic::Status>>| match m {
            Some(Ok(HubMessage {
                body: Some(hub_message::Body::Assignments(a)),
            })) => a.items.iter().map(|i| i.revision).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(revision_of(rx_a.recv().await), [first]);
        assert_eq!(revision_of(rx_b.recv().await), [first]);
        // a changes, b is as first sent.
        let previous = record.clone();
        record.shares = vec![share("a", 2), share("b", 1)];
        record.sent_since(Some((&previous, first)));
        let second = put(&record).await;
        assert_eq!(revision_of(rx_a.recv().await), [second]);
        assert!(
            rx_b.try_recv().is_err(),
            "b was sent its unchanged share again"
        );
    }

    #[test]
    fn a_batch_sends_each_cluster_one_message_with_the_latest_change_of_each_placed_object() {
        let mut deltas = Deltas::default();
        deltas.upsert("east", "k/a", item("a", 5));
        deltas.upsert("west", "k/a", item("a", 5));
        deltas.upsert("east", "k/b", item("b", 6));
        // a leaves east at 7; b changes again at 8.
        deltas.remove("east", "k/a", removal("a", 7));
        deltas.upsert("east", "k/b", item("b", 8));
        let mut messages = deltas.messages(3);
        messages.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(messages.len(), 2);
        let (cluster, east) = &messages[0];
        assert_eq!(cluster, "east");
        assert_eq!(east.revision, 8);
        assert!(!east.full);
        assert_eq!(east.store_epoch, 3);
        assert_eq!(east.items, vec![item("b", 8)]);
        assert_eq!(east.removed, vec![removal("a", 7)]);
        let (cluster, west) = &messages[1];
        assert_eq!(cluster, "west");
        assert_eq!(west.revision, 5);
        assert_eq!(west.items, vec![item("a", 5)]);
        assert!(west.removed.is_empty());
    }
}
