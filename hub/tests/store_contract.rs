//! The store's contract, held by both backends: every test here runs once on a real etcd
//! (`etcd::…`, the testbed's etcd binary) and once on the memory backend (`memory::…`, no
//! testbed: `cargo test -p accord-hub --test store_contract memory::`). The controllers'
//! tests trust the memory backend because it passes what etcd passes: reads at one
//! revision, fenced and conditional transactions, watches from a revision, leases that
//! expire and take their keys, the election and lock recipes, batched reports.

mod store_support;

use std::time::Duration;

use accord_common::distribution::{Observed, PlacementState, ScaleObserved};
use accord_hub::store::{
    CacheEvent, Compare, CompareOp, Keyspace, LIST_PAGE_KEYS, LeaderElection, PrefixCache, Refusal,
    ReplicaPresence, StatusRecord, Store, StoreError, Txn, TxnOp, TxnOpResponse, WriteOutcome,
};
use serde::{Deserialize, Serialize};
use store_support::{MARGIN, PROMPTLY, TTL, connected_record, wait_until, within};

/// Runs each named contract test on both backends.
macro_rules! contract {
    ($($test:ident),* $(,)?) => {
        mod etcd {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(super::store_support::store(stringify!($test)).await).await;
                }
            )*
        }
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let prefix = super::store_support::unique_prefix(stringify!($test));
                    super::$test(super::Store::in_memory(super::Keyspace::new(&prefix))).await;
                }
            )*
        }
    };
}

contract!(
    reads_writes_and_deletes_carry_their_revisions,
    a_listing_longer_than_a_page_is_whole_sorted_and_at_one_revision,
    fenced_writes_apply_only_while_the_term_lasts,
    a_conditional_write_on_a_stale_revision_changes_nothing_and_reads_the_current,
    a_cache_lists_then_follows_every_change_in_order,
    a_revoked_lease_takes_its_keys_and_its_holder_learns_it,
    a_lease_nobody_refreshes_expires_with_its_keys,
    one_lock_holder_at_a_time_and_the_next_gets_it_on_unlock,
    leadership_passes_to_the_other_candidate_on_resign,
    concurrent_reports_are_batched_and_each_keeps_its_own_precondition,
);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Value {
    n: u32,
}

fn key(store: &Store, name: &str) -> String {
    format!("{}placements/{name}", store.keys().prefix())
}

async fn reads_writes_and_deletes_carry_their_revisions(store: Store) {
    assert_eq!(
        store
            .get_json::<Value>(&key(&store, "a"))
            .await
            .expect("reading"),
        None
    );
    let first = store
        .put_json(&key(&store, "a"), &Value { n: 1 })
        .await
        .unwrap();
    let second = store
        .put_json(&key(&store, "a"), &Value { n: 2 })
        .await
        .unwrap();
    assert!(second > first, "revisions grow: {first} then {second}");
    assert_eq!(
        store.get_json::<Value>(&key(&store, "a")).await.unwrap(),
        Some((Value { n: 2 }, second))
    );
    let kv = store.get(key(&store, "a")).await.unwrap().expect("the key");
    assert_eq!(
        (kv.create_revision(), kv.mod_revision(), kv.version()),
        (first, second, 2)
    );
    assert!(store.delete(&key(&store, "a")).await.unwrap());
    assert!(!store.delete(&key(&store, "a")).await.unwrap());
    assert_eq!(store.get(key(&store, "a")).await.unwrap(), None);
    // Written again, it is a new key: a new create revision, version 1.
    let third = store
        .put_json(&key(&store, "a"), &Value { n: 3 })
        .await
        .unwrap();
    let kv = store.get(key(&store, "a")).await.unwrap().expect("the key");
    assert_eq!((kv.create_revision(), kv.version()), (third, 1));
}

async fn a_listing_longer_than_a_page_is_whole_sorted_and_at_one_revision(store: Store) {
    let count = usize::try_from(LIST_PAGE_KEYS).unwrap() + 7;
    let puts: Vec<TxnOp> = (0..count)
        .map(|i| {
            TxnOp::put(
                key(&store, &format!("k{i:05}")),
                format!("{{\"n\":{i}}}"),
                None,
            )
        })
        .collect();
    let mut written = 0;
    for chunk in puts.chunks(100) {
        let answer = store
            .txn(Txn::new().and_then(chunk.to_vec()))
            .await
            .unwrap();
        written = answer.revision;
    }
    let outside = format!("{}other/x", store.keys().prefix());
    store.put_json(&outside, &Value { n: 0 }).await.unwrap();
    let prefix = format!("{}placements/", store.keys().prefix());
    let (listed, revision) = store.list_json::<Value>(&prefix).await.unwrap();
    assert_eq!(listed.len(), count);
    assert!(
        revision > written,
        "listed at {revision}, written at {written}"
    );
    assert!(
        listed
            .iter()
            .enumerate()
            .all(|(i, (k, v, _))| *k == key(&store, &format!("k{i:05}"))
                && v.n == u32::try_from(i).unwrap()),
        "sorted by key, every value read back"
    );
    let (keys_only, _) = store.list_prefix(&prefix, true).await.unwrap();
    assert_eq!(keys_only.len(), count);
    assert!(keys_only.iter().all(|kv| kv.value().is_empty()));
}

async fn fenced_writes_apply_only_while_the_term_lasts(store: Store) {
    let election = LeaderElection::start(store.clone(), "hub-a".into(), TTL)
        .await
        .unwrap();
    let fence = within("leadership", PROMPTLY, election.wait_for_leadership()).await;
    let key = key(&store, "fenced");
    // The caller's own compares decide the inner transaction only.
    let missing = store
        .fenced_txn(
            &fence,
            vec![Compare::version(key.as_str(), CompareOp::Greater, 0)],
            vec![TxnOp::put(key.as_str(), "never", None)],
        )
        .await
        .unwrap();
    assert!(!missing.succeeded());
    assert_eq!(store.get(key.as_str()).await.unwrap(), None);
    let (created, revision) = store
        .fenced_txn_with_revision(
            &fence,
            vec![Compare::create_revision(key.as_str(), CompareOp::Equal, 0)],
            vec![TxnOp::put(key.as_str(), "v1", None)],
        )
        .await
        .unwrap();
    assert!(created.succeeded());
    let stored = store.get(key.as_str()).await.unwrap().expect("written");
    assert_eq!(
        (stored.value(), stored.mod_revision()),
        (&b"v1"[..], revision)
    );
    assert!(store.fenced_delete(&fence, &key).await.unwrap());

    election.resign().await;
    let refused = store.fenced_put(&fence, &key, b"v2".to_vec()).await;
    assert!(matches!(refused, Err(StoreError::Fenced)), "{refused:?}");
    assert_eq!(store.get(key.as_str()).await.unwrap(), None);
}

async fn a_conditional_write_on_a_stale_revision_changes_nothing_and_reads_the_current(
    store: Store,
) {
    let key = key(&store, "occ");
    let first = store.put_json(&key, &Value { n: 1 }).await.unwrap();
    let second = store.put_json(&key, &Value { n: 2 }).await.unwrap();
    let stale = Txn::new()
        .when(vec![Compare::mod_revision(
            key.as_str(),
            CompareOp::Equal,
            first,
        )])
        .and_then(vec![TxnOp::put(key.as_str(), "{\"n\":3}", None)])
        .or_else(vec![TxnOp::get(key.as_str())]);
    let answer = store.txn(stale).await.unwrap();
    assert!(!answer.succeeded());
    match answer.op_responses().as_slice() {
        [TxnOpResponse::Get(kvs)] => assert_eq!(kvs[0].mod_revision(), second),
        other => panic!("expected the current key, got {other:?}"),
    }
    assert_eq!(
        store.get_json::<Value>(&key).await.unwrap(),
        Some((Value { n: 2 }, second))
    );
    // The status records' optimistic concurrency rests on the same compare.
    let report = StatusRecord {
        resource_version: "1".into(),
        generation: 1,
        applied_revision: 1,
        state: PlacementState::Synced,
        message: String::new(),
        observed_unix_millis: 1,
        observed: Observed::Scale(ScaleObserved::default()),
        api_server_unavailable: false,
    };
    let kind = "CrossClusterScalePolicy";
    let WriteOutcome::Accepted { version } = store
        .write_status("eu", kind, "ns", "web", &report, 0, None)
        .await
        .unwrap()
    else {
        panic!("the first report is accepted");
    };
    let again = store
        .write_status("eu", kind, "ns", "web", &report, 0, None)
        .await
        .unwrap();
    assert_eq!(
        again,
        WriteOutcome::Conflict {
            current: version,
            reason: Refusal::StaleVersion
        }
    );
}

async fn a_cache_lists_then_follows_every_change_in_order(store: Store) {
    let before = store
        .put_json(&key(&store, "before"), &Value { n: 1 })
        .await
        .unwrap();
    let cache: PrefixCache<Value> =
        PrefixCache::start(store.clone(), store.keys().placements_prefix())
            .await
            .unwrap();
    assert_eq!(
        cache.get(&key(&store, "before")),
        Some((Value { n: 1 }, before))
    );
    let mut events = cache.subscribe();
    let put = store
        .put_json(&key(&store, "after"), &Value { n: 2 })
        .await
        .unwrap();
    store
        .put_json(
            &format!("{}other/x", store.keys().prefix()),
            &Value { n: 9 },
        )
        .await
        .unwrap();
    store.delete(&key(&store, "before")).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let event = within("a cache event", PROMPTLY, events.recv())
            .await
            .expect("the cache's events");
        seen.push(event);
    }
    assert_eq!(
        seen,
        vec![
            CacheEvent::Put {
                key: key(&store, "after"),
                value: Value { n: 2 },
                mod_revision: put,
            },
            CacheEvent::Delete {
                key: key(&store, "before"),
            },
        ]
    );
    assert_eq!(cache.len(), 1);
}

async fn a_revoked_lease_takes_its_keys_and_its_holder_learns_it(store: Store) {
    let presence = ReplicaPresence::start(store.clone(), "hub-0".into(), TTL)
        .await
        .unwrap();
    presence
        .mark_connected("eu", &connected_record("hub-0", 1))
        .await
        .unwrap();
    let kv = store
        .get(store.keys().connected("eu"))
        .await
        .unwrap()
        .expect("the connected key");
    assert_eq!(kv.lease(), presence.lease_of("eu"));
    let lock = store
        .lock_placement("CrossClusterScalePolicy", "ns", "web", TTL)
        .await
        .unwrap();
    store.backend().revoke(lock.lease_id()).await.unwrap();
    within("the lock's holder to learn", TTL + MARGIN, lock.lost()).await;
    assert_eq!(store.get(lock.key().to_vec()).await.unwrap(), None);
    // Revoking twice: etcd's "lease not found".
    let again = store.backend().revoke(lock.lease_id()).await.unwrap_err();
    assert!(again.to_string().contains("lease not found"), "{again}");
    presence.revoke().await.unwrap();
    assert_eq!(store.get(store.keys().connected("eu")).await.unwrap(), None);
}

async fn a_lease_nobody_refreshes_expires_with_its_keys(store: Store) {
    let (lease, ttl) = store.backend().grant(1).await.unwrap();
    assert!(ttl >= 1);
    let key = key(&store, "leased");
    store
        .txn(Txn::new().and_then(vec![TxnOp::put(
            key.as_str(),
            "x",
            Some(accord_hub::store::PutOptions::new().with_lease(lease)),
        )]))
        .await
        .unwrap();
    let ttl = Duration::from_secs(u64::try_from(ttl).unwrap());
    wait_until("the lease to expire", ttl + MARGIN, || async {
        store
            .get(key.as_str())
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    // A write on a lease that is gone fails whole.
    let refused = store
        .txn(Txn::new().and_then(vec![
            TxnOp::put(key.as_str(), "y", None),
            TxnOp::put(
                format!("{key}-2"),
                "y",
                Some(accord_hub::store::PutOptions::new().with_lease(lease)),
            ),
        ]))
        .await
        .unwrap_err();
    assert!(
        accord_hub::store::error_chain(&refused).contains("lease not found"),
        "{}",
        accord_hub::store::error_chain(&refused)
    );
    assert_eq!(store.get(key.as_str()).await.unwrap(), None);
}

async fn one_lock_holder_at_a_time_and_the_next_gets_it_on_unlock(store: Store) {
    let held = store.lock_placement("K", "ns", "p", TTL).await.unwrap();
    let waiting = {
        let store = store.clone();
        tokio::spawn(async move { store.lock_placement("K", "ns", "p", TTL).await })
    };
    // The holder's compare holds while it holds the lock.
    let under_lock = Txn::new()
        .when(vec![held.compare()])
        .and_then(vec![TxnOp::put(key(&store, "locked"), "x", None)]);
    assert!(store.txn(under_lock).await.unwrap().succeeded());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "two holders at once");
    let first_key = held.key().to_vec();
    held.unlock().await.unwrap();
    let next = within("the next holder", PROMPTLY, waiting)
        .await
        .unwrap()
        .expect("the second lock");
    assert_ne!(next.key(), first_key.as_slice());
    assert_eq!(store.get(first_key).await.unwrap(), None);
    next.unlock().await.unwrap();
}

async fn leadership_passes_to_the_other_candidate_on_resign(store: Store) {
    let a = LeaderElection::start(store.clone(), "hub-a".into(), TTL)
        .await
        .unwrap();
    within("hub-a to lead", PROMPTLY, a.wait_for_leadership()).await;
    let b = LeaderElection::start(store.clone(), "hub-b".into(), TTL)
        .await
        .unwrap();
    assert_eq!(
        LeaderElection::current_leader(&store).await.unwrap(),
        Some("hub-a".into())
    );
    // Give hub-b's campaign time to queue behind hub-a.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!b.is_leader());
    a.resign().await;
    let fence = within("hub-b to lead", PROMPTLY, b.wait_for_leadership()).await;
    assert_eq!(
        LeaderElection::current_leader(&store).await.unwrap(),
        Some("hub-b".into())
    );
    let kv = store
        .get(fence.key.clone())
        .await
        .unwrap()
        .expect("the key");
    assert_eq!(kv.create_revision(), fence.revision);
    b.resign().await;
    assert_eq!(LeaderElection::current_leader(&store).await.unwrap(), None);
}

async fn concurrent_reports_are_batched_and_each_keeps_its_own_precondition(store: Store) {
    let report = |rv: &str| StatusRecord {
        resource_version: rv.into(),
        generation: 1,
        applied_revision: 1,
        state: PlacementState::Synced,
        message: String::new(),
        observed_unix_millis: 1,
        observed: Observed::Scale(ScaleObserved::default()),
        api_server_unavailable: false,
    };
    // 200 reports at once, each the first of its cluster: every one is accepted.
    let outcomes = report_all(&store, report("first")).await;
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Ok(WriteOutcome::Accepted { .. }))),
        "every first report is accepted"
    );
    // Written again with the same precondition, each is refused on its own.
    let outcomes = report_all(&store, report("again")).await;
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Ok(WriteOutcome::Conflict { .. }))),
        "every stale report is refused"
    );
}

/// `record` written as the first report (expected version 0) of 200 clusters at once.
async fn report_all(store: &Store, record: StatusRecord) -> Vec<Result<WriteOutcome, StoreError>> {
    let writes = (0..200).map(|i| {
        let (store, record) = (store.clone(), record.clone());
        async move {
            store
                .write_status(
                    &format!("c{i}"),
                    "CrossClusterScalePolicy",
                    "ns",
                    "web",
                    &record,
                    0,
                    None,
                )
                .await
        }
    });
    futures::future::join_all(writes).await
}
