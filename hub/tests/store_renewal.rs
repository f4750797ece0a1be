//! The registry write of a certificate renewal against a real etcd: it lands only while the
//! record is unchanged, so a revoke or a `--force` registration in between wins.

mod store_support;

use std::collections::BTreeMap;

use accord_hub::grpc::renewal::{StreamCertificate, renewed_record};
use accord_hub::store::ClusterRecord;

fn record(name: &str, spki: &str) -> ClusterRecord {
    ClusterRecord {
        name: name.into(),
        spki_sha256: spki.into(),
        labels: BTreeMap::new(),
        registered_unix: 1_700_000_000,
        previous: None,
    }
}

fn stream(spki: &str) -> StreamCertificate {
    StreamCertificate {
        spki_sha256: spki.into(),
        not_after_unix: 2_000_000_000,
    }
}

#[tokio::test]
async fn a_renewal_of_an_unchanged_record_is_written_with_the_old_key_as_previous() {
    let store = store_support::store("renewal-ok").await;
    store.put_cluster(&record("east", "k1")).await.unwrap();
    let (current, revision) = store.get_cluster_versioned("east").await.unwrap().unwrap();
    let next = renewed_record(&current, &stream("k1"), "k2", 1_800_000_000).unwrap();
    assert!(store.renew_cluster_key(&next, revision).await.unwrap());
    let stored = store.get_cluster("east").await.unwrap().unwrap();
    assert_eq!(stored, next);
    assert!(stored.accepts("k1", 1_999_999_999) && stored.accepts("k2", 1_999_999_999));
    assert!(!stored.accepts("k1", 2_000_000_000));
}

#[tokio::test]
async fn a_force_registration_between_read_and_write_wins_over_the_renewal() {
    let store = store_support::store("renewal-force").await;
    store.put_cluster(&record("east", "k1")).await.unwrap();
    let (current, revision) = store.get_cluster_versioned("east").await.unwrap().unwrap();
    // `--force` registration of another identity lands first.
    store.put_cluster(&record("east", "forced")).await.unwrap();
    let next = renewed_record(&current, &stream("k1"), "k2", 1_800_000_000).unwrap();
    assert!(!store.renew_cluster_key(&next, revision).await.unwrap());
    let stored = store.get_cluster("east").await.unwrap().unwrap();
    assert_eq!(stored, record("east", "forced"));
    assert!(!stored.accepts("k1", 0) && !stored.accepts("k2", 0));
}

#[tokio::test]
async fn a_revoke_between_read_and_write_is_not_undone_by_the_renewal() {
    let store = store_support::store("renewal-revoke").await;
    store.put_cluster(&record("east", "k1")).await.unwrap();
    let (current, revision) = store.get_cluster_versioned("east").await.unwrap().unwrap();
    assert!(store.delete_cluster("east").await.unwrap());
    let next = renewed_record(&current, &stream("k1"), "k2", 1_800_000_000).unwrap();
    assert!(!store.renew_cluster_key(&next, revision).await.unwrap());
    assert_eq!(store.get_cluster("east").await.unwrap(), None);
}
