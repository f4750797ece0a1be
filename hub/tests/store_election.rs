//! Leader election and fencing against a real etcd.

mod store_support;

use std::time::Duration;

use accord_hub::store::{Fence, LeaderElection, Store, StoreError};
use store_support::{
    HelperProcess, MARGIN, PROMPTLY, TTL, helper_ready_and_wait, helper_store, unique_prefix,
    within,
};

/// The test that helper child processes run; a no-op in a normal run.
#[test]
fn helper_entry_point_does_nothing_outside_a_helper_process() {
    if store_support::helper_mode().is_none() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (mode, store) = helper_store().await.unwrap();
        assert_eq!(mode, "leader");
        let election = LeaderElection::start(store, "child".into(), TTL)
            .await
            .unwrap();
        let fence = election.wait_for_leadership().await;
        helper_ready_and_wait(&format!(
            "{} {} {}",
            hex::encode(&fence.key),
            fence.revision,
            fence.lease
        ))
        .await
    });
}

async fn two_replicas(test: &str) -> (Store, Store) {
    let prefix = unique_prefix(test);
    (
        store_support::store_at(&prefix).await,
        store_support::store_at(&prefix).await,
    )
}

/// Waits until one of `a`, `b` leads; returns which (0 or 1) and its fence.
async fn first_leader(a: &LeaderElection, b: &LeaderElection) -> (usize, Fence) {
    within("a leader to be elected", PROMPTLY, async {
        tokio::select! {
            fence = a.wait_for_leadership() => (0, fence),
            fence = b.wait_for_leadership() => (1, fence),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_two_replicas_leads_and_is_reported_as_leader() {
    let (store_a, store_b) = two_replicas("one-leader").await;
    let a = LeaderElection::start(store_a.clone(), "replica-a".into(), TTL)
        .await
        .unwrap();
    let b = LeaderElection::start(store_b, "replica-b".into(), TTL)
        .await
        .unwrap();
    let (winner, fence) = first_leader(&a, &b).await;
    let (leader, follower) = if winner == 0 { (&a, &b) } else { (&b, &a) };
    assert!(leader.is_leader());
    assert_eq!(leader.fence(), Some(fence));
    assert!(!follower.is_leader(), "both replicas lead");
    assert_eq!(follower.fence(), None);
    assert_eq!(
        LeaderElection::current_leader(&store_a).await.unwrap(),
        Some(leader.identity().to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn there_is_no_current_leader_before_anyone_campaigns() {
    let store = store_support::store("no-leader").await;
    assert_eq!(LeaderElection::current_leader(&store).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_leader_dies_without_resigning_the_other_leads_within_the_ttl_and_old_writes_are_fenced()
 {
    let (store_a, store_b) = two_replicas("leader-dies").await;
    let a = LeaderElection::start(store_a.clone(), "replica-a".into(), TTL)
        .await
        .unwrap();
    let b = LeaderElection::start(store_b.clone(), "replica-b".into(), TTL)
        .await
        .unwrap();
    let (winner, old_fence) = first_leader(&a, &b).await;
    let (dead, survivor, survivor_store) = if winner == 0 {
        (a, b, store_b)
    } else {
        (b, a, store_a)
    };
    let key = format!("{}placements/test", survivor_store.keys().prefix());
    survivor_store
        .fenced_put(&old_fence, &key, b"from the first leader".to_vec())
        .await
        .expect("the current leader's fenced write is applied");

    // Dropping stops the lease keepalive without resigning, as a crash would.
    drop(dead);
    let new_fence = within(
        "the surviving replica to lead after the leader's lease expired",
        TTL + MARGIN,
        survivor.wait_for_leadership(),
    )
    .await;
    assert_ne!(new_fence, old_fence);

    let refused = survivor_store
        .fenced_put(&old_fence, &key, b"from the deposed leader".to_vec())
        .await;
    assert!(
        matches!(refused, Err(StoreError::Fenced)),
        "the deposed leader's write was not fenced: {refused:?}"
    );
    survivor_store
        .fenced_put(&new_fence, &key, b"from the new leader".to_vec())
        .await
        .expect("the new leader's fenced write is applied");
    let stored = survivor_store.get(key.as_str()).await.unwrap().unwrap();
    assert_eq!(stored.value(), b"from the new leader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_the_leaders_lease_deposes_it_and_hands_leadership_to_the_other() {
    let (store_a, store_b) = two_replicas("lease-revoked").await;
    let a = LeaderElection::start(store_a.clone(), "replica-a".into(), TTL)
        .await
        .unwrap();
    let b = LeaderElection::start(store_b, "replica-b".into(), TTL)
        .await
        .unwrap();
    let (winner, old_fence) = first_leader(&a, &b).await;
    let (deposed, other) = if winner == 0 { (&a, &b) } else { (&b, &a) };
    let mut deposed_state = deposed.subscribe();

    store_a
        .backend()
        .revoke(old_fence.lease)
        .await
        .expect("revoking the leader's lease");

    let new_fence = within(
        "the other replica to lead",
        TTL + MARGIN,
        other.wait_for_leadership(),
    )
    .await;
    within(
        "the deposed replica to notice",
        TTL + MARGIN,
        deposed_state.wait_for(|fence| fence.as_ref() != Some(&old_fence)),
    )
    .await
    .unwrap();
    assert!(
        !deposed.is_leader() || deposed.fence() != Some(old_fence.clone()),
        "the deposed replica still claims its old term"
    );
    let refused = store_a.fenced_put(&old_fence, "x", b"late".to_vec()).await;
    assert!(matches!(refused, Err(StoreError::Fenced)), "{refused:?}");
    assert!(
        !(deposed.is_leader() && other.is_leader()),
        "both replicas lead"
    );
    assert_ne!(new_fence, old_fence);
}

/// Two replicas with a long TTL; the leader `steps_down`; the other must lead within
/// [`PROMPTLY`] (it could only wait out the lease otherwise), and the old fence writes
/// nothing.
async fn handed_over_at_once<F, Fut>(test: &str, steps_down: F)
where
    F: FnOnce(LeaderElection) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let long_ttl = Duration::from_secs(60);
    let (store_a, store_b) = two_replicas(test).await;
    let a = LeaderElection::start(store_a, "replica-a".into(), long_ttl)
        .await
        .unwrap();
    let b = LeaderElection::start(store_b.clone(), "replica-b".into(), long_ttl)
        .await
        .unwrap();
    let (winner, old_fence) = first_leader(&a, &b).await;
    let (leader, other) = if winner == 0 { (a, b) } else { (b, a) };
    steps_down(leader).await;
    let new_fence = within(
        "the other replica to lead after the leader stepped down",
        PROMPTLY,
        other.wait_for_leadership(),
    )
    .await;
    assert_ne!(new_fence, old_fence);
    assert_eq!(
        LeaderElection::current_leader(&store_b).await.unwrap(),
        Some(other.identity().to_owned())
    );
    let refused = store_b.fenced_put(&old_fence, "x", b"late".to_vec()).await;
    assert!(matches!(refused, Err(StoreError::Fenced)), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resigning_hands_leadership_over_without_waiting_for_the_lease_to_expire() {
    handed_over_at_once("resign", |leader| async move { leader.resign().await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_leaders_election_resigns_it() {
    handed_over_at_once("drop-resigns", |leader| async move { drop(leader) }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_process_killed_with_sigkill_is_replaced_within_the_ttl() {
    let prefix = unique_prefix("sigkill");
    let child = HelperProcess::spawn(
        "helper_entry_point_does_nothing_outside_a_helper_process",
        "leader",
        &prefix,
    )
    .await;
    let mut parts = child.ready.split_whitespace();
    let child_fence = Fence {
        key: hex::decode(parts.next().unwrap()).unwrap(),
        revision: parts.next().unwrap().parse().unwrap(),
        lease: parts.next().unwrap().parse().unwrap(),
    };

    let store = store_support::store_at(&prefix).await;
    let contender = LeaderElection::start(store.clone(), "parent".into(), TTL)
        .await
        .unwrap();
    assert_eq!(
        LeaderElection::current_leader(&store)
            .await
            .unwrap()
            .as_deref(),
        Some("child")
    );
    assert!(!contender.is_leader(), "two leaders while the child lives");

    child.kill().await;
    let fence = within(
        "the in-process contender to lead after the child was killed",
        TTL + MARGIN,
        contender.wait_for_leadership(),
    )
    .await;
    assert_ne!(fence, child_fence);
    assert_eq!(
        LeaderElection::current_leader(&store)
            .await
            .unwrap()
            .as_deref(),
        Some("parent")
    );
    let refused = store
        .fenced_put(&child_fence, "x", b"from the dead".to_vec())
        .await;
    assert!(matches!(refused, Err(StoreError::Fenced)), "{refused:?}");
}
