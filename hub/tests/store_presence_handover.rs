//! A stopping replica hands its clusters' presence over for a reconnect grace (rolling
//! restarts move no share), and a stream ended to reconnect with a renewed certificate keeps
//! its cluster for the same grace, against a real etcd.

mod store_support;

use std::time::{Duration, Instant};

use accord_hub::store::ReplicaPresence;
use store_support::{
    MARGIN, PROMPTLY, TTL, connected_holder as holder, connected_key, connected_record as rec,
    replica_holding, wait_until,
};

/// The grace asked for in these tests (etcd's minimum lease TTL is about 2 s).
const GRACE: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_cluster_stays_connected_through_its_stream_ending_until_the_grace_runs_out()
{
    let (store, presence) = replica_holding("handover-expires", &["eu"]).await;
    let handed_at = Instant::now();
    assert_eq!(presence.hand_over(GRACE).await.unwrap(), 1);
    // The stream ends as the replica stops: the key stays, off the replica's lease.
    presence.mark_disconnected("eu").await.unwrap();
    assert_eq!(holder(&store, "eu").await.as_deref(), Some("hub-0"));
    let kv = connected_key(&store, "eu").await.unwrap();
    assert!(!presence.leases().contains(&kv.lease()));
    // The replica dies; its own lease expiring takes nothing with it.
    drop(presence);
    wait_until("the handed-over key to expire", GRACE + MARGIN, || async {
        holder(&store, "eu").await.is_none().then_some(())
    })
    .await;
    assert!(
        handed_at.elapsed() >= GRACE - Duration::from_millis(500),
        "expired after {:?}, before the grace",
        handed_at.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_reconnecting_to_another_replica_within_the_grace_keeps_its_cluster_connected() {
    let store = store_support::store("handover-taken").await;
    let old = ReplicaPresence::start(store.clone(), "hub-0".into(), TTL)
        .await
        .unwrap();
    let new = ReplicaPresence::start(store.clone(), "hub-1".into(), TTL)
        .await
        .unwrap();
    old.mark_connected("eu", &rec("hub-0", 1)).await.unwrap();
    old.mark_connected("us", &rec("hub-0", 1)).await.unwrap();
    assert_eq!(old.hand_over(GRACE).await.unwrap(), 2);
    new.mark_connected("eu", &rec("hub-1", 2)).await.unwrap();
    old.mark_disconnected("eu").await.unwrap();
    old.mark_disconnected("us").await.unwrap();
    drop(old);
    // "us" never came back: gone after the grace. "eu" is hub-1's now and stays.
    wait_until("us to expire", GRACE + MARGIN, || async {
        holder(&store, "us").await.is_none().then_some(())
    })
    .await;
    assert_eq!(holder(&store, "eu").await.as_deref(), Some("hub-1"));
    tokio::time::sleep(TTL).await; // also past the old replica's own lease
    assert_eq!(holder(&store, "eu").await.as_deref(), Some("hub-1"));
    new.mark_disconnected("eu").await.unwrap();
    assert_eq!(holder(&store, "eu").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_another_replica_took_over_before_the_handover_is_left_alone() {
    let store = store_support::store("handover-skip").await;
    let old = ReplicaPresence::start(store.clone(), "hub-0".into(), TTL)
        .await
        .unwrap();
    let new = ReplicaPresence::start(store.clone(), "hub-1".into(), Duration::from_secs(60))
        .await
        .unwrap();
    old.mark_connected("eu", &rec("hub-0", 1)).await.unwrap();
    new.mark_connected("eu", &rec("hub-1", 2)).await.unwrap();
    assert_eq!(old.hand_over(GRACE).await.unwrap(), 0);
    let kv = wait_until("the key", PROMPTLY, || connected_key(&store, "eu")).await;
    assert_eq!(kv.lease(), new.lease_of("eu"), "still on hub-1's lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ended_to_reconnect_with_a_renewed_certificate_keeps_its_cluster_for_the_grace() {
    let (store, presence) = replica_holding("renewal-reconnect", &["eu", "us"]).await;
    // Both agents renewed and their streams ended; only "eu" comes back (here).
    assert!(presence.mark_reconnecting("eu", GRACE).await.unwrap());
    assert!(presence.mark_reconnecting("us", GRACE).await.unwrap());
    assert_eq!(holder(&store, "eu").await.as_deref(), Some("hub-0"));
    assert_eq!(holder(&store, "us").await.as_deref(), Some("hub-0"));
    let kv = connected_key(&store, "us").await.unwrap();
    assert!(
        !presence.leases().contains(&kv.lease()),
        "off the replica's leases"
    );
    presence
        .mark_connected("eu", &rec("hub-0", 2))
        .await
        .unwrap();
    wait_until("us to expire", GRACE + MARGIN, || async {
        holder(&store, "us").await.is_none().then_some(())
    })
    .await;
    // The reconnected cluster is back on the replica's lease and outlives the grace.
    let kv = connected_key(&store, "eu").await.unwrap();
    assert_eq!(kv.lease(), presence.lease_of("eu"));
    // A stream that ends for good still clears its key at once, and a second end of a
    // cluster no longer held is a no-op.
    presence.mark_disconnected("eu").await.unwrap();
    assert_eq!(holder(&store, "eu").await, None);
    assert!(!presence.mark_reconnecting("eu", GRACE).await.unwrap());
}
