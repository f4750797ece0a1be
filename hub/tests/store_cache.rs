//! The watch-fed prefix cache against a real etcd.

mod store_support;

use accord_hub::store::{CacheEvent, PrefixCache, Store, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use store_support::{PROMPTLY, within};
use tokio::sync::broadcast;

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Placement {
    replicas: u32,
}

fn key(store: &Store, name: &str) -> String {
    store
        .keys()
        .placements("CrossClusterScalePolicy", "ns", name)
}

async fn next_event(
    events: &mut broadcast::Receiver<CacheEvent<Placement>>,
) -> CacheEvent<Placement> {
    within("a cache event", PROMPTLY, events.recv())
        .await
        .expect("the event stream")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_starts_with_the_existing_contents() {
    let store = store_support::store("cache-initial").await;
    let a = store
        .put_json(&key(&store, "a"), &Placement { replicas: 1 })
        .await
        .unwrap();
    let b = store
        .put_json(&key(&store, "b"), &Placement { replicas: 2 })
        .await
        .unwrap();
    // Outside the prefix: not cached.
    store
        .put_json(&store.keys().cluster("x"), &Placement { replicas: 9 })
        .await
        .unwrap();

    let cache: PrefixCache<Placement> =
        PrefixCache::start(store.clone(), store.keys().placements_prefix())
            .await
            .unwrap();
    assert_eq!(
        cache.get(&key(&store, "a")),
        Some((Placement { replicas: 1 }, a))
    );
    assert_eq!(
        cache.snapshot(),
        vec![
            (key(&store, "a"), Placement { replicas: 1 }, a),
            (key(&store, "b"), Placement { replicas: 2 }, b),
        ]
    );
    assert!(cache.revision() >= b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_sees_puts_and_deletes_made_after_it_started() {
    let store = store_support::store("cache-follows").await;
    let cache: PrefixCache<Placement> =
        PrefixCache::start(store.clone(), store.keys().placements_prefix())
            .await
            .unwrap();
    assert!(cache.is_empty());
    let mut events = cache.subscribe();

    let created = store
        .put_json(&key(&store, "a"), &Placement { replicas: 1 })
        .await
        .unwrap();
    assert_eq!(
        next_event(&mut events).await,
        CacheEvent::Put {
            key: key(&store, "a"),
            value: Placement { replicas: 1 },
            mod_revision: created,
        }
    );
    let updated = store
        .put_json(&key(&store, "a"), &Placement { replicas: 4 })
        .await
        .unwrap();
    assert_eq!(
        next_event(&mut events).await,
        CacheEvent::Put {
            key: key(&store, "a"),
            value: Placement { replicas: 4 },
            mod_revision: updated,
        }
    );
    assert_eq!(
        cache.get(&key(&store, "a")),
        Some((Placement { replicas: 4 }, updated))
    );
    assert!(cache.revision() >= updated);

    assert!(store.delete(&key(&store, "a")).await.unwrap());
    assert_eq!(
        next_event(&mut events).await,
        CacheEvent::Delete {
            key: key(&store, "a")
        }
    );
    assert_eq!(cache.get(&key(&store, "a")), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_the_revision_of_a_write_makes_it_visible() {
    let store = store_support::store("cache-revision").await;
    let cache: PrefixCache<Placement> =
        PrefixCache::start(store.clone(), store.keys().placements_prefix())
            .await
            .unwrap();
    let revision = store
        .put_json(&key(&store, "a"), &Placement { replicas: 3 })
        .await
        .unwrap();
    within(
        "the cache to reach the write",
        PROMPTLY,
        cache.wait_for_revision(revision),
    )
    .await;
    assert_eq!(
        cache.get(&key(&store, "a")),
        Some((Placement { replicas: 3 }, revision))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_value_is_skipped_without_stalling_the_watch() {
    let store = store_support::store("cache-malformed").await;
    let cache: PrefixCache<Placement> =
        PrefixCache::start(store.clone(), store.keys().placements_prefix())
            .await
            .unwrap();
    let mut events = cache.subscribe();
    store
        .txn(Txn::new().and_then(vec![TxnOp::put(key(&store, "bad"), "not json", None)]))
        .await
        .unwrap();
    let good = store
        .put_json(&key(&store, "good"), &Placement { replicas: 2 })
        .await
        .unwrap();
    assert_eq!(
        next_event(&mut events).await,
        CacheEvent::Put {
            key: key(&store, "good"),
            value: Placement { replicas: 2 },
            mod_revision: good,
        }
    );
    assert_eq!(cache.get(&key(&store, "bad")), None);
    assert_eq!(cache.len(), 1);
}
