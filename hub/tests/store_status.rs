//! Status records with optimistic concurrency against a real etcd.

mod store_support;

use accord_common::distribution::{Observed, PlacementState, ScaleObserved};
use accord_hub::store::{Refusal, StatusRecord, StoreError, WriteOutcome};

const KIND: &str = "CrossClusterScalePolicy";

fn report(applied_revision: i64, generation: i64, resource_version: &str) -> StatusRecord {
    StatusRecord {
        resource_version: resource_version.into(),
        generation,
        applied_revision,
        state: PlacementState::Synced,
        message: format!("rv {resource_version}"),
        observed_unix_millis: 1_700_000_000_000,
        observed: Observed::Scale(ScaleObserved {
            ready: 3,
            scale_request_id: "01JTEST".into(),
            ..ScaleObserved::default()
        }),
        api_server_unavailable: false,
    }
}

fn accepted(outcome: WriteOutcome) -> i64 {
    match outcome {
        WriteOutcome::Accepted { version } => version,
        WriteOutcome::Conflict { current, .. } => panic!("conflict, current version {current}"),
    }
}

#[tokio::test]
async fn the_first_report_is_accepted_with_expected_version_zero_and_reads_back() {
    let store = store_support::store("status-first").await;
    assert_eq!(
        store.read_status("eu", KIND, "ns", "web").await.unwrap(),
        None
    );
    let record = report(1, 1, "100");
    let version = accepted(
        store
            .write_status("eu", KIND, "ns", "web", &record, 0, None)
            .await
            .unwrap(),
    );
    assert!(version > 0);
    assert_eq!(
        store.read_status("eu", KIND, "ns", "web").await.unwrap(),
        Some((record, version))
    );
}

#[tokio::test]
async fn a_stale_expected_version_conflicts_with_the_current_version() {
    let store = store_support::store("status-stale").await;
    let v1 = accepted(
        store
            .write_status("eu", KIND, "ns", "web", &report(1, 1, "100"), 0, None)
            .await
            .unwrap(),
    );
    let v2 = accepted(
        store
            .write_status("eu", KIND, "ns", "web", &report(1, 1, "101"), v1, None)
            .await
            .unwrap(),
    );
    // A writer still holding v1 is told about v2 and changes nothing.
    let outcome = store
        .write_status("eu", KIND, "ns", "web", &report(1, 2, "102"), v1, None)
        .await
        .unwrap();
    assert_eq!(
        outcome,
        WriteOutcome::Conflict {
            current: v2,
            reason: Refusal::StaleVersion
        }
    );
    // So is one that believes there is no record yet.
    let outcome = store
        .write_status("eu", KIND, "ns", "web", &report(1, 2, "102"), 0, None)
        .await
        .unwrap();
    assert_eq!(
        outcome,
        WriteOutcome::Conflict {
            current: v2,
            reason: Refusal::StaleVersion
        }
    );
    let (stored, version) = store
        .read_status("eu", KIND, "ns", "web")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((stored.resource_version.as_str(), version), ("101", v2));
}

#[tokio::test]
async fn expecting_a_record_that_does_not_exist_conflicts_with_version_zero() {
    let store = store_support::store("status-missing").await;
    let outcome = store
        .write_status("eu", KIND, "ns", "web", &report(1, 1, "1"), 42, None)
        .await
        .unwrap();
    assert_eq!(
        outcome,
        WriteOutcome::Conflict {
            current: 0,
            reason: Refusal::StaleVersion
        }
    );
}

#[tokio::test]
async fn the_correct_expected_version_is_accepted_with_a_new_version() {
    let store = store_support::store("status-correct").await;
    let v1 = accepted(
        store
            .write_status("eu", KIND, "ns", "web", &report(1, 1, "100"), 0, None)
            .await
            .unwrap(),
    );
    let newer = report(2, 1, "105");
    let v2 = accepted(
        store
            .write_status("eu", KIND, "ns", "web", &newer, v1, None)
            .await
            .unwrap(),
    );
    assert!(v2 > v1);
    assert_eq!(
        store.read_status("eu", KIND, "ns", "web").await.unwrap(),
        Some((newer, v2))
    );
}

#[tokio::test]
async fn an_older_report_never_overwrites_a_newer_one_even_with_the_right_version() {
    let store = store_support::store("status-older").await;
    let newer = report(5, 3, "900");
    let version = accepted(
        store
            .write_status("eu", KIND, "ns", "web", &newer, 0, None)
            .await
            .unwrap(),
    );
    for older in [
        report(4, 9, "999"),
        report(5, 2, "999"),
        report(5, 3, "899"),
    ] {
        let outcome = store
            .write_status("eu", KIND, "ns", "web", &older, version, None)
            .await
            .unwrap();
        assert_eq!(
            outcome,
            WriteOutcome::Conflict {
                current: version,
                reason: Refusal::OlderReport
            },
            "{older:?}"
        );
    }
    assert_eq!(
        store.read_status("eu", KIND, "ns", "web").await.unwrap(),
        Some((newer, version))
    );
}

#[tokio::test]
async fn records_of_different_clusters_and_policies_are_independent() {
    let store = store_support::store("status-independent").await;
    accepted(
        store
            .write_status("eu", KIND, "ns", "web", &report(1, 1, "1"), 0, None)
            .await
            .unwrap(),
    );
    accepted(
        store
            .write_status("us", KIND, "ns", "web", &report(1, 1, "1"), 0, None)
            .await
            .unwrap(),
    );
    accepted(
        store
            .write_status("eu", KIND, "ns", "api", &report(1, 1, "1"), 0, None)
            .await
            .unwrap(),
    );
    assert_eq!(
        store
            .delete_placement_status(KIND, "ns", "web")
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        store.read_status("eu", KIND, "ns", "web").await.unwrap(),
        None
    );
    assert!(
        store
            .read_status("eu", KIND, "ns", "api")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn names_that_would_escape_their_key_segment_are_refused() {
    let store = store_support::store("status-names").await;
    let refused = store
        .write_status("eu/x", KIND, "ns", "web", &report(1, 1, "1"), 0, None)
        .await;
    assert!(
        matches!(
            refused,
            Err(StoreError::InvalidName {
                what: "cluster",
                ..
            })
        ),
        "{refused:?}"
    );
    let refused = store.read_status("eu", KIND, "", "web").await;
    assert!(
        matches!(refused, Err(StoreError::InvalidName { .. })),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_stale_version_takes_precedence_over_an_older_report() {
    let store = store_support::store("status-stale-and-older").await;
    let v1 = accepted(
        store
            .write_status("eu", KIND, "ns", "web", &report(5, 3, "900"), 0, None)
            .await
            .unwrap(),
    );
    let v2 = accepted(
        store
            .write_status("eu", KIND, "ns", "web", &report(6, 3, "901"), v1, None)
            .await
            .unwrap(),
    );
    // Both stale and older: the sender must re-read first; whether its next report is
    // older is decided against what it then expects.
    let outcome = store
        .write_status("eu", KIND, "ns", "web", &report(4, 1, "1"), v1, None)
        .await
        .unwrap();
    assert_eq!(
        outcome,
        WriteOutcome::Conflict {
            current: v2,
            reason: Refusal::StaleVersion
        }
    );
    assert_eq!(Refusal::StaleVersion.to_proto() as i32, 1);
    assert_eq!(Refusal::OlderReport.to_proto() as i32, 2);
}

/// A writer that knows the order of the record it wrote (a stream's last accepted report)
/// skips the read; the transaction still refuses a version someone else replaced, and an
/// older report is refused without writing.
#[tokio::test]
async fn a_known_stored_order_decides_without_a_read_and_the_version_still_guards() {
    let store = store_support::store("status-known").await;
    let first = report(2, 1, "100");
    let v1 = accepted(
        store
            .write_status("eu", KIND, "ns", "web", &first, 0, None)
            .await
            .unwrap(),
    );
    let known = first.order();
    // Older than what this writer stored: refused, nothing written.
    let outcome = store
        .write_status(
            "eu",
            KIND,
            "ns",
            "web",
            &report(1, 1, "99"),
            v1,
            Some(&known),
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        WriteOutcome::Conflict {
            current: v1,
            reason: Refusal::OlderReport
        }
    );
    // Newer: accepted.
    let second = report(2, 1, "101");
    let v2 = accepted(
        store
            .write_status("eu", KIND, "ns", "web", &second, v1, Some(&known))
            .await
            .unwrap(),
    );
    // Another writer replaced v2 meanwhile; a report naming v2 with v2's order is refused
    // with the current version.
    let v3 = accepted(
        store
            .write_status("eu", KIND, "ns", "web", &report(3, 1, "102"), v2, None)
            .await
            .unwrap(),
    );
    let outcome = store
        .write_status(
            "eu",
            KIND,
            "ns",
            "web",
            &report(4, 1, "103"),
            v2,
            Some(&second.order()),
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        WriteOutcome::Conflict {
            current: v3,
            reason: Refusal::StaleVersion
        }
    );
    let (stored, version) = store
        .read_status("eu", KIND, "ns", "web")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((stored.resource_version.as_str(), version), ("102", v3));
}
