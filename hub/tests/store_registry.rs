//! The cluster registry against a real etcd.

mod store_support;

use std::collections::BTreeMap;

use accord_hub::store::{ClusterRecord, Txn, TxnOp};

fn record(name: &str, spki: &str) -> ClusterRecord {
    ClusterRecord {
        name: name.into(),
        spki_sha256: spki.into(),
        labels: BTreeMap::from([("region".to_owned(), "eu".to_owned())]),
        registered_unix: 1_700_000_000,
        previous: None,
    }
}

#[tokio::test]
async fn registered_clusters_read_back_and_list_sorted_by_name() {
    let store = store_support::store("registry").await;
    assert_eq!(store.get_cluster("eu-west1").await.unwrap(), None);
    store
        .put_cluster(&record("us-central1", "aa"))
        .await
        .unwrap();
    store.put_cluster(&record("eu-west1", "bb")).await.unwrap();
    assert_eq!(
        store.get_cluster("eu-west1").await.unwrap(),
        Some(record("eu-west1", "bb"))
    );
    let names: Vec<String> = store
        .list_clusters()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["eu-west1", "us-central1"]);
}

#[tokio::test]
async fn only_the_first_of_two_registrations_of_one_name_creates_it() {
    let store = store_support::store("registry-create").await;
    assert!(store.create_cluster(&record("eu", "first")).await.unwrap());
    assert!(!store.create_cluster(&record("eu", "second")).await.unwrap());
    assert_eq!(
        store.get_cluster("eu").await.unwrap().unwrap().spki_sha256,
        "first"
    );
    assert!(store.delete_cluster("eu").await.unwrap());
    assert_eq!(store.get_cluster("eu").await.unwrap(), None);
}

#[tokio::test]
async fn a_malformed_record_does_not_hide_the_others_from_the_listing() {
    let store = store_support::store("registry-malformed").await;
    store.put_cluster(&record("good", "aa")).await.unwrap();
    store
        .txn(Txn::new().and_then(vec![TxnOp::put(
            store.keys().cluster("bad"),
            "not json",
            None,
        )]))
        .await
        .unwrap();
    let listed = store.list_clusters().await.unwrap();
    assert_eq!(listed, [record("good", "aa")]);
}
