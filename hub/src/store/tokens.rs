//! Bootstrap tokens for joining clusters: `<id>.<secret>` in the style of kubeadm, stored
//! as `tokens/<id>` with only a SHA-256 of the secret, single-use, on a lease that outlives
//! the token's expiry by a grace period so that a late join is told "expired", not
//! "unknown".

use std::time::Duration;

use accord_common::runtime::unix_millis;

use super::kv::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

pub use accord_common::token::{BootstrapToken, MalformedToken, TOKEN_ID_LEN, TOKEN_SECRET_LEN};

use super::{Store, StoreError, decode, encode, ttl_seconds};

/// How long a record outlives its token's expiry, so late joins are told "expired".
pub const EXPIRED_TOKEN_GRACE: Duration = Duration::from_secs(3600);
/// Attempts at consuming a token whose record changes under us.
const CONSUME_ATTEMPTS: usize = 3;
/// Attempts at finding an unused id.
const CREATE_ATTEMPTS: usize = 5;

/// What the hub stores for a token at `tokens/<id>`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct TokenRecord {
    /// Hex SHA-256 of the secret.
    pub secret_sha256: String,
    /// When the token stops being accepted, in seconds since the Unix epoch.
    pub expires_unix: i64,
    /// The cluster that used the token, once used.
    pub used_by: Option<String>,
    /// When it was used, in seconds since the Unix epoch.
    #[serde(default)]
    pub used_unix: Option<i64>,
    /// Free text from whoever created it.
    pub description: String,
    /// When it was created, in seconds since the Unix epoch.
    #[serde(default)]
    pub created_unix: i64,
}

impl TokenRecord {
    /// Whether the token is past its expiry at `now_millis` (milliseconds since the epoch).
    pub fn is_expired_at(&self, now_millis: i64) -> bool {
        now_millis >= self.expires_unix.saturating_mul(1000)
    }
}

/// Why a token was not accepted. Messages say what to do and never contain the secret.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The string is not of the form `<id>.<secret>`.
    #[error(
        "the bootstrap token is malformed: expected <id>.<secret> with a 6-character id and \
         a 16-character secret, both of lowercase letters and digits"
    )]
    Malformed,
    /// No token has this id, or the secret does not match.
    #[error(
        "the bootstrap token is not known to this hub (wrong or deleted token); create a new \
         one with `accord-hub token create`"
    )]
    Unknown,
    /// The token existed but its TTL has run out.
    #[error("the bootstrap token has expired; create a new one with `accord-hub token create`")]
    Expired,
    /// The token was already used; tokens are single-use.
    #[error(
        "the bootstrap token was already used to register cluster {by:?}; tokens are \
         single-use, create a new one with `accord-hub token create`"
    )]
    AlreadyUsed {
        /// The cluster that used it.
        by: String,
    },
    /// The store failed while checking the token.
    #[error("the bootstrap token could not be checked")]
    Store(#[source] StoreError),
}

impl TokenError {
    /// A short, stable category for metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            TokenError::Malformed => "malformed",
            TokenError::Unknown => "unknown",
            TokenError::Expired => "expired",
            TokenError::AlreadyUsed { .. } => "already_used",
            TokenError::Store(_) => "store",
        }
    }
}

impl From<StoreError> for TokenError {
    fn from(e: StoreError) -> Self {
        TokenError::Store(e)
    }
}

impl From<etcd_client::Error> for TokenError {
    fn from(e: etcd_client::Error) -> Self {
        TokenError::Store(e.into())
    }
}

/// Compares two byte strings in time that depends only on their length.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

impl Store {
    /// Creates a token valid for `ttl`, stored as `tokens/<id>` with the hash of its secret
    /// on a lease of `ttl` plus [`EXPIRED_TOKEN_GRACE`].
    pub async fn create_token(
        &self,
        ttl: Duration,
        description: &str,
    ) -> Result<BootstrapToken, StoreError> {
        let lease_ttl = Duration::from_secs(
            u64::try_from(ttl_seconds(ttl.saturating_add(EXPIRED_TOKEN_GRACE))).unwrap_or(u64::MAX),
        );
        for _ in 0..CREATE_ATTEMPTS {
            let token = BootstrapToken::generate();
            let now = unix_millis();
            let ttl_millis = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
            let record = TokenRecord {
                secret_sha256: token.secret_sha256(),
                // Rounded up: the token is good for at least `ttl`.
                expires_unix: now.saturating_add(ttl_millis).saturating_add(999) / 1000,
                used_by: None,
                used_unix: None,
                description: description.to_owned(),
                created_unix: now / 1000,
            };
            let (lease, _) = self.backend().grant(ttl_seconds(lease_ttl)).await?;
            let key = self.keys().token(&token.id);
            let txn = Txn::new()
                .when(vec![Compare::create_revision(
                    key.as_str(),
                    CompareOp::Equal,
                    0,
                )])
                .and_then(vec![TxnOp::put(
                    key.as_str(),
                    encode(&record)?,
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            if self.txn(txn).await?.succeeded() {
                return Ok(token);
            }
            // The id is taken (one chance in ~2 billion); the lease is not needed.
            let _ = self.backend().revoke(lease).await;
        }
        Err(StoreError::Unexpected(
            "could not find an unused bootstrap token id".into(),
        ))
    }

    /// Checks `token` without using it: the secret matches (in constant time), and it is
    /// unused and unexpired. Returns the record and its `mod_revision`.
    async fn valid_token(&self, token: &BootstrapToken) -> Result<(TokenRecord, i64), TokenError> {
        let key = self.keys().token(&token.id);
        let presented = Sha256::digest(token.secret.as_bytes());
        let Some(kv) = self.get(key.as_str()).await? else {
            return Err(TokenError::Unknown);
        };
        let record: TokenRecord = decode(&kv)?;
        let stored = hex::decode(&record.secret_sha256).unwrap_or_default();
        if !constant_time_eq(&stored, &presented) {
            return Err(TokenError::Unknown);
        }
        if let Some(by) = record.used_by {
            return Err(TokenError::AlreadyUsed { by });
        }
        if record.is_expired_at(unix_millis()) {
            return Err(TokenError::Expired);
        }
        Ok((record, kv.mod_revision()))
    }

    /// Whether `token` would be accepted now, without using it: Registration asks this
    /// before doing any work or saying anything about cluster names, so a caller without a
    /// valid token learns nothing.
    pub async fn check_token(&self, token: &str) -> Result<(), TokenError> {
        let token: BootstrapToken = token.parse().map_err(|_| TokenError::Malformed)?;
        self.valid_token(&token).await.map(|_| ())
    }

    /// Accepts `token` once, for `cluster`: checks it as [`Store::check_token`] does, and
    /// marks it used with a transaction that only applies if the record did not change
    /// meanwhile — so two concurrent joins cannot both use it.
    pub async fn consume_token(&self, token: &str, cluster: &str) -> Result<(), TokenError> {
        let token: BootstrapToken = token.parse().map_err(|_| TokenError::Malformed)?;
        let key = self.keys().token(&token.id);
        for _ in 0..CONSUME_ATTEMPTS {
            let (mut record, mod_revision) = self.valid_token(&token).await?;
            record.used_by = Some(cluster.to_owned());
            record.used_unix = Some(unix_millis() / 1000);
            let txn = Txn::new()
                .when(vec![Compare::mod_revision(
                    key.as_str(),
                    CompareOp::Equal,
                    mod_revision,
                )])
                .and_then(vec![TxnOp::put(
                    key.as_str(),
                    encode(&record)?,
                    // Keep the record on its lease, so it still disappears after the grace.
                    Some(PutOptions::new().with_ignore_lease()),
                )]);
            if self.txn(txn).await?.succeeded() {
                return Ok(());
            }
        }
        Err(StoreError::Unexpected("the bootstrap token record kept changing".into()).into())
    }

    /// The stored record of token `id`.
    pub async fn get_token(&self, id: &str) -> Result<Option<TokenRecord>, StoreError> {
        if id.is_empty() || id.contains('/') {
            return Ok(None);
        }
        Ok(self
            .get_json::<TokenRecord>(&self.keys().token(id))
            .await?
            .map(|(record, _)| record))
    }

    /// Every stored token record by id.
    pub async fn list_tokens(&self) -> Result<Vec<(String, TokenRecord)>, StoreError> {
        let prefix = self.keys().token("");
        let (items, _) = self.list_json::<TokenRecord>(&prefix).await?;
        Ok(items
            .into_iter()
            .map(|(key, record, _)| (key[prefix.len()..].to_owned(), record))
            .collect())
    }

    /// Deletes token `id`; returns whether it existed.
    pub async fn delete_token(&self, id: &str) -> Result<bool, StoreError> {
        if id.is_empty() || id.contains('/') {
            return Ok(false);
        }
        self.delete(&self.keys().token(id)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_parse_back() {
        let token = BootstrapToken::generate();
        assert_eq!(token.to_string().parse::<BootstrapToken>().unwrap(), token);
    }

    #[test]
    fn debug_hides_the_secret() {
        let token = BootstrapToken::generate();
        let debug = format!("{token:?}");
        assert!(debug.contains(&token.id));
        assert!(!debug.contains(&token.secret), "{debug}");
    }

    #[test]
    fn malformed_tokens_say_what_is_wrong_without_echoing_the_input() {
        for input in [
            "",
            "abcdef",
            "abcdef.0123456789abcde",
            "ABCDEF.0123456789abcdef",
            "abc.0123456789abcdef",
            "abcdef.0123456789abcdef.x",
            "abcdef.0123456789ABCDEF",
        ] {
            let err = input.parse::<BootstrapToken>().unwrap_err();
            let message = err.to_string();
            assert!(message.contains("expected <id>.<secret>"), "{message}");
            if let Some((_, secret)) = input.split_once('.') {
                assert!(!message.contains(secret), "{message}");
            }
        }
    }

    #[test]
    fn a_token_expires_at_its_expiry_second() {
        let record = TokenRecord {
            secret_sha256: String::new(),
            expires_unix: 100,
            used_by: None,
            used_unix: None,
            description: String::new(),
            created_unix: 0,
        };
        assert!(!record.is_expired_at(99_999));
        assert!(record.is_expired_at(100_000));
    }

    #[test]
    fn constant_time_eq_compares_contents_and_lengths() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
