//! Bootstrap tokens against a real etcd.

mod store_support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use accord_hub::store::{BootstrapToken, TokenError};
use store_support::wait_until;

const DAY: Duration = Duration::from_secs(24 * 3600);

/// Asserts that neither the `Display` nor the `Debug` form of `err` (with its sources)
/// contains `secret`.
fn assert_secret_not_in(err: &TokenError, secret: &str) {
    let mut texts = vec![err.to_string(), format!("{err:?}")];
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        texts.push(s.to_string());
        source = s.source();
    }
    for text in texts {
        assert!(!text.contains(secret), "the secret leaked into {text:?}");
    }
}

#[tokio::test]
async fn a_valid_token_is_accepted_once_and_then_reported_as_used_by_its_cluster() {
    let store = store_support::store("token-once").await;
    let token = store.create_token(DAY, "for eu-west1").await.unwrap();
    store
        .consume_token(&token.to_string(), "eu-west1")
        .await
        .expect("a fresh token is accepted");

    let record = store.get_token(&token.id).await.unwrap().unwrap();
    assert_eq!(record.used_by.as_deref(), Some("eu-west1"));
    assert_eq!(record.description, "for eu-west1");
    assert_eq!(record.secret_sha256, token.secret_sha256());
    assert!(
        !serde_json::to_string(&record)
            .unwrap()
            .contains(&token.secret),
        "the secret is stored in clear"
    );

    let again = store
        .consume_token(&token.to_string(), "us-central1")
        .await
        .unwrap_err();
    assert!(
        matches!(&again, TokenError::AlreadyUsed { by } if by == "eu-west1"),
        "{again:?}"
    );
    assert_secret_not_in(&again, &token.secret);
}

#[tokio::test]
async fn two_concurrent_joins_with_one_token_cannot_both_succeed() {
    let store = store_support::store("token-race").await;
    let token = store.create_token(DAY, "").await.unwrap().to_string();
    let (a, b) = tokio::join!(
        store.consume_token(&token, "a"),
        store.consume_token(&token, "b")
    );
    assert!(a.is_ok() != b.is_ok(), "a: {a:?}, b: {b:?}");
    let failed = a.err().or(b.err()).unwrap();
    assert!(
        matches!(failed, TokenError::AlreadyUsed { .. }),
        "{failed:?}"
    );
}

#[tokio::test]
async fn an_unknown_token_id_is_reported_as_unknown() {
    let store = store_support::store("token-unknown").await;
    let token = BootstrapToken::generate();
    let err = store
        .consume_token(&token.to_string(), "eu")
        .await
        .unwrap_err();
    assert!(matches!(err, TokenError::Unknown), "{err:?}");
    assert_secret_not_in(&err, &token.secret);
}

#[tokio::test]
async fn a_wrong_secret_is_reported_as_unknown_and_leaves_the_token_usable() {
    let store = store_support::store("token-wrong-secret").await;
    let token = store.create_token(DAY, "").await.unwrap();
    let forged = BootstrapToken {
        id: token.id.clone(),
        secret: BootstrapToken::generate().secret,
    };
    let err = store
        .consume_token(&forged.to_string(), "mallory")
        .await
        .unwrap_err();
    assert!(matches!(err, TokenError::Unknown), "{err:?}");
    assert_secret_not_in(&err, &forged.secret);
    assert_secret_not_in(&err, &token.secret);
    store.consume_token(&token.to_string(), "eu").await.unwrap();
}

#[tokio::test]
async fn a_malformed_token_is_reported_as_malformed_without_echoing_it() {
    let store = store_support::store("token-malformed").await;
    for input in [
        "",
        "nodot",
        "abcdef.tooshort",
        "ABCDEF.0123456789abcdef",
        "abcdef.0123456789abcdefXYZsecret",
    ] {
        let err = store.consume_token(input, "eu").await.unwrap_err();
        assert!(matches!(err, TokenError::Malformed), "{input:?}: {err:?}");
        if let Some((_, secret)) = input.split_once('.') {
            assert_secret_not_in(&err, secret);
        }
    }
}

#[tokio::test]
async fn an_expired_token_is_reported_as_expired_not_unknown() {
    let store = store_support::store("token-expired").await;
    let token = store
        .create_token(Duration::from_secs(1), "short-lived")
        .await
        .unwrap();
    let record = store.get_token(&token.id).await.unwrap().unwrap();
    // Wait (without consuming the token) until the clock is past its expiry.
    wait_until("the token's expiry", Duration::from_secs(10), || async {
        let now_millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis();
        (now_millis >= u128::try_from(record.expires_unix).unwrap() * 1000).then_some(())
    })
    .await;
    let err = store
        .consume_token(&token.to_string(), "eu")
        .await
        .unwrap_err();
    assert!(matches!(err, TokenError::Expired), "{err:?}");
    assert_secret_not_in(&err, &token.secret);
    // The record outlives the expiry (grace period), unused.
    let record = store.get_token(&token.id).await.unwrap().unwrap();
    assert_eq!(record.used_by, None);
}

#[tokio::test]
async fn tokens_can_be_listed_and_deleted() {
    let store = store_support::store("token-list").await;
    let first = store.create_token(DAY, "one").await.unwrap();
    let second = store.create_token(DAY, "two").await.unwrap();
    let mut ids: Vec<String> = store
        .list_tokens()
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    ids.sort();
    let mut expected = vec![first.id.clone(), second.id.clone()];
    expected.sort();
    assert_eq!(ids, expected);
    assert!(store.delete_token(&first.id).await.unwrap());
    let err = store
        .consume_token(&first.to_string(), "eu")
        .await
        .unwrap_err();
    assert!(matches!(err, TokenError::Unknown), "{err:?}");
}
