//! Replica presence (`connected/` keys on a lease per shard of a replica's clusters) against
//! a real etcd.

mod store_support;

use std::time::Duration;

use accord_hub::store::ReplicaPresence;
use accord_hub::store::presence::ConnectedRecord;
use store_support::{
    MARGIN, PROMPTLY, TTL, connected_holder as holder, connected_key, connected_record,
    replica_holding, wait_until,
};

fn rec(replica: &str) -> ConnectedRecord {
    connected_record(replica, 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connected_key_appears_on_connect_and_disappears_on_disconnect() {
    let store = store_support::store("presence-marks").await;
    let presence = ReplicaPresence::start(store.clone(), "hub-0".into(), TTL)
        .await
        .unwrap();
    assert_eq!(holder(&store, "eu").await, None);
    presence
        .mark_connected("eu", &rec(presence.replica()))
        .await
        .unwrap();
    assert_eq!(holder(&store, "eu").await.as_deref(), Some("hub-0"));
    let kv = connected_key(&store, "eu").await.unwrap();
    assert_eq!(
        kv.lease(),
        presence.lease_of("eu"),
        "not on its shard's lease"
    );
    presence.mark_disconnected("eu").await.unwrap();
    assert_eq!(holder(&store, "eu").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cluster_of_a_replica_hangs_on_one_of_its_few_leases() {
    let names: Vec<String> = (0..200).map(|i| format!("c-{i:03}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (store, presence) = replica_holding("presence-shard-leases", &refs).await;
    let (listed, _) = store
        .list_prefix(&store.keys().connected_prefix(), false)
        .await
        .unwrap();
    assert_eq!(listed.len(), names.len());
    let leases = presence.leases();
    assert_eq!(leases.len(), accord_hub::store::presence::SHARDS);
    let mut used = std::collections::BTreeSet::new();
    for (kv, name) in listed.iter().zip(&names) {
        assert_eq!(kv.lease(), presence.lease_of(name), "{name}");
        assert!(leases.contains(&kv.lease()));
        used.insert(kv.lease());
    }
    // Spread over the shards, so that no lease holds most of the keys.
    assert!(used.len() > leases.len() / 2, "{} leases used", used.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnecting_leaves_a_key_that_another_replica_has_taken_over() {
    let store = store_support::store("presence-takeover").await;
    let old = ReplicaPresence::start(store.clone(), "hub-0".into(), TTL)
        .await
        .unwrap();
    let new = ReplicaPresence::start(store.clone(), "hub-1".into(), TTL)
        .await
        .unwrap();
    old.mark_connected("eu", &rec(old.replica())).await.unwrap();
    new.mark_connected("eu", &rec(new.replica())).await.unwrap();
    // The old replica notices its stream is gone only now.
    old.mark_disconnected("eu").await.unwrap();
    assert_eq!(holder(&store, "eu").await.as_deref(), Some("hub-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_the_replica_lease_removes_all_its_connected_keys_at_once() {
    let store = store_support::store("presence-revoke").await;
    let presence = ReplicaPresence::start(store.clone(), "hub-0".into(), Duration::from_secs(60))
        .await
        .unwrap();
    presence
        .mark_connected("a", &rec(presence.replica()))
        .await
        .unwrap();
    presence
        .mark_connected("b", &rec(presence.replica()))
        .await
        .unwrap();
    presence.revoke().await.unwrap();
    assert_eq!(holder(&store, "a").await, None);
    assert_eq!(holder(&store, "b").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connected_keys_of_a_replica_that_dies_vanish_when_its_lease_expires() {
    let (store, presence) = replica_holding("presence-dies", &["eu"]).await;
    // Dropping stops the keepalive without revoking, as a crash would.
    drop(presence);
    wait_until("the connected key to expire", TTL + MARGIN, || async {
        holder(&store, "eu").await.is_none().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_replica_whose_lease_was_lost_announces_its_clusters_again_on_a_new_lease() {
    let (store, presence) = replica_holding("presence-regrant", &["eu"]).await;
    let old_lease = presence.lease_of("eu");
    store.backend().revoke(old_lease).await.unwrap();
    assert_eq!(holder(&store, "eu").await, None, "revoking left the key");
    let kv = wait_until("the key to be written again", PROMPTLY, || {
        connected_key(&store, "eu")
    })
    .await;
    let value: ConnectedRecord = serde_json::from_slice(kv.value()).unwrap();
    assert_eq!(value.replica, "hub-0");
    assert_ne!(kv.lease(), old_lease);
    assert_eq!(kv.lease(), presence.lease_of("eu"));
    presence.mark_disconnected("eu").await.unwrap();
    assert_eq!(holder(&store, "eu").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cluster_is_written_again_on_its_shards_new_lease_when_every_lease_was_lost() {
    let names: Vec<String> = (0..250).map(|i| format!("c-{i:03}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (store, presence) = replica_holding("presence-regrant-many", &refs).await;
    let old_leases = presence.leases();
    for lease in &old_leases {
        store.backend().revoke(*lease).await.unwrap();
    }
    let prefix = store.keys().connected_prefix();
    wait_until("every key written again", PROMPTLY, || async {
        let (kvs, _) = store.list_prefix(&prefix, false).await.unwrap();
        (kvs.len() == names.len()
            && kvs.iter().zip(&names).all(|(kv, name)| {
                kv.lease() == presence.lease_of(name) && !old_leases.contains(&kv.lease())
            }))
        .then_some(())
    })
    .await;
}
