//! Per-policy scaling locks against a real etcd.

mod store_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use accord_hub::store::StoreError;
use store_support::{
    HelperProcess, MARGIN, PROMPTLY, TTL, helper_ready_and_wait, helper_store, unique_prefix,
    within,
};

const KIND: &str = "CrossClusterScalePolicy";

/// The test that helper child processes run; a no-op in a normal run.
#[test]
fn helper_entry_point_does_nothing_outside_a_helper_process() {
    if store_support::helper_mode().is_none() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (mode, store) = helper_store().await.unwrap();
        assert_eq!(mode, "lock-holder");
        let lock = store
            .lock_placement(KIND, "default", "web", TTL)
            .await
            .unwrap();
        helper_ready_and_wait(&hex::encode(lock.key())).await
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_contenders_never_hold_one_policy_lock_together() {
    const ROUNDS: usize = 25;
    let prefix = unique_prefix("mutual-exclusion");
    let holders = Arc::new(AtomicUsize::new(0));
    let acquisitions = Arc::new(AtomicUsize::new(0));
    let mut contenders = Vec::new();
    for _ in 0..2 {
        // Each contender has its own client, as two hub replicas would.
        let store = store_support::store_at(&prefix).await;
        let holders = holders.clone();
        let acquisitions = acquisitions.clone();
        contenders.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let lock = store
                    .lock_placement(KIND, "default", "web", TTL)
                    .await
                    .expect("locking");
                let before = holders.fetch_add(1, Ordering::SeqCst);
                assert_eq!(before, 0, "two contenders hold the lock together");
                acquisitions.fetch_add(1, Ordering::SeqCst);
                // Give the other contender every chance to (wrongly) get in.
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                let exists = store.get(lock.key()).await.expect("reading the lock key");
                assert!(exists.is_some(), "the held lock's key is missing");
                holders.fetch_sub(1, Ordering::SeqCst);
                lock.unlock().await.expect("unlocking");
            }
        }));
    }
    within(
        "both contenders to finish",
        Duration::from_secs(120),
        async {
            for contender in contenders {
                contender.await.expect("a contender failed");
            }
        },
    )
    .await;
    assert_eq!(acquisitions.load(Ordering::SeqCst), 2 * ROUNDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_of_different_policies_do_not_block_each_other() {
    let store = store_support::store("independent-locks").await;
    let web = store
        .lock_placement(KIND, "default", "web", TTL)
        .await
        .unwrap();
    let api = within(
        "the lock of another policy",
        PROMPTLY,
        store.lock_placement(KIND, "default", "api", TTL),
    )
    .await
    .unwrap();
    assert_ne!(web.key(), api.key());
    web.unlock().await.unwrap();
    api.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_lease_is_revoked_loses_the_lock_to_the_waiting_contender() {
    let prefix = unique_prefix("lease-revoked");
    let first = store_support::store_at(&prefix).await;
    let second = store_support::store_at(&prefix).await;
    let held = first.lock_placement(KIND, "ns", "p", TTL).await.unwrap();

    let waiting = tokio::spawn(async move { second.lock_placement(KIND, "ns", "p", TTL).await });
    first
        .backend()
        .revoke(held.lease_id())
        .await
        .expect("revoking the holder's lease");

    let taken = within("the waiting contender to get the lock", PROMPTLY, waiting)
        .await
        .unwrap()
        .expect("the contender's lock");
    within(
        "the first holder to learn it lost the lock",
        TTL + MARGIN,
        held.lost(),
    )
    .await;
    assert!(held.is_lost());
    taken.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_with_sigkill_releases_the_lock_when_its_lease_ends() {
    let prefix = unique_prefix("holder-killed");
    let child = HelperProcess::spawn(
        "helper_entry_point_does_nothing_outside_a_helper_process",
        "lock-holder",
        &prefix,
    )
    .await;
    let child_key = hex::decode(&child.ready).unwrap();
    let store = store_support::store_at(&prefix).await;

    let contender = {
        let store = store.clone();
        tokio::spawn(async move { store.lock_placement(KIND, "default", "web", TTL).await })
    };
    // While the child lives the contender waits: the child's key is the only one that
    // counts as holding.
    let owner = store.get(child_key.clone()).await.unwrap();
    assert!(owner.is_some(), "the child's lock key is missing");
    assert!(!contender.is_finished(), "the contender got a held lock");

    child.kill().await;
    let lock = within(
        "the contender to get the lock after the holder was killed",
        TTL + MARGIN,
        contender,
    )
    .await
    .unwrap()
    .expect("the contender's lock");
    let gone = store.get(child_key).await.unwrap();
    assert!(gone.is_none(), "the dead holder's key survived");
    lock.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_held_lock_releases_it_without_waiting_for_its_lease() {
    let long_ttl = Duration::from_secs(60);
    let store = store_support::store("drop-releases").await;
    let held = store
        .lock_placement(KIND, "default", "web", long_ttl)
        .await
        .unwrap();
    drop(held);
    let again = within(
        "the lock to be free again",
        PROMPTLY,
        store.lock_placement(KIND, "default", "web", long_ttl),
    )
    .await
    .unwrap();
    // Released in the background, as a decision does after its write.
    again.release_in_background();
    let third = within(
        "the lock to be free after a release in the background",
        PROMPTLY,
        store.lock_placement(KIND, "default", "web", long_ttl),
    )
    .await
    .unwrap();
    third.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_leaves_the_queue() {
    let long_ttl = Duration::from_secs(60);
    let prefix = unique_prefix("cancelled-wait");
    let store = store_support::store_at(&prefix).await;
    let held = store
        .lock_placement(KIND, "default", "web", long_ttl)
        .await
        .unwrap();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        store.lock_placement(KIND, "default", "web", long_ttl),
    )
    .await;
    assert!(cancelled.is_err(), "got a lock that is held");
    held.unlock().await.unwrap();
    // Were the cancelled waiter still queued (its lease alive), this would block for 60 s.
    let next = within(
        "the lock after the holder released it",
        PROMPTLY,
        store.lock_placement(KIND, "default", "web", long_ttl),
    )
    .await
    .unwrap();
    next.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_names_with_a_slash_are_refused() {
    let store = store_support::store("bad-names").await;
    let refused = store.lock_placement(KIND, "a/b", "web", TTL).await;
    assert!(
        matches!(
            refused,
            Err(StoreError::InvalidName {
                what: "namespace",
                ..
            })
        ),
        "{refused:?}"
    );
}
