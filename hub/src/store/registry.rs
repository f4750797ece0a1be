//! The registry of member clusters: one JSON record per cluster at `clusters/<name>`.

use std::collections::BTreeMap;

use super::kv::{Compare, CompareOp, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use super::{Store, StoreError, check_segment, encode};

/// What the hub knows about a registered member cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ClusterRecord {
    /// The cluster's name (also its client certificate's identity).
    pub name: String,
    /// Hex SHA-256 of the public key (SubjectPublicKeyInfo) its client certificate carries.
    pub spki_sha256: String,
    /// Labels given at join time (`--labels`).
    pub labels: BTreeMap<String, String>,
    /// When it registered, in seconds since the Unix epoch.
    pub registered_unix: i64,
    /// The key a renewal replaced, still accepted until its certificate expires (so an
    /// agent that renewed but could not store its new certificate is not locked out).
    /// A `--force` re-registration clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<PreviousKey>,
}

/// A client key replaced by a certificate renewal.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct PreviousKey {
    /// Hex SHA-256 of its SubjectPublicKeyInfo.
    pub spki_sha256: String,
    /// Expiry of the certificate it was issued with, in seconds since the Unix epoch.
    pub not_after_unix: i64,
}

impl ClusterRecord {
    /// Whether a client certificate with this key may speak for the cluster at `now_unix`:
    /// the current key, or the key a renewal replaced until its certificate expires.
    pub fn accepts(&self, spki_sha256: &str, now_unix: i64) -> bool {
        self.spki_sha256 == spki_sha256
            || self
                .previous
                .as_ref()
                .is_some_and(|p| p.spki_sha256 == spki_sha256 && now_unix < p.not_after_unix)
    }
}

impl Store {
    /// The record of cluster `name`.
    pub async fn get_cluster(&self, name: &str) -> Result<Option<ClusterRecord>, StoreError> {
        check_segment("cluster", name)?;
        Ok(self
            .get_json(&self.keys().cluster(name))
            .await?
            .map(|(record, _)| record))
    }

    /// Writes the record of cluster `rec.name`, replacing any earlier one.
    pub async fn put_cluster(&self, rec: &ClusterRecord) -> Result<(), StoreError> {
        check_segment("cluster", &rec.name)?;
        self.put_json(&self.keys().cluster(&rec.name), rec).await?;
        Ok(())
    }

    /// Writes the record of cluster `rec.name` only if there is none yet; returns whether
    /// it did (so two joins racing for one name cannot both win).
    pub async fn create_cluster(&self, rec: &ClusterRecord) -> Result<bool, StoreError> {
        check_segment("cluster", &rec.name)?;
        let key = self.keys().cluster(&rec.name);
        let txn = Txn::new()
            .when(vec![Compare::create_revision(
                key.as_str(),
                CompareOp::Equal,
                0,
            )])
            .and_then(vec![TxnOp::put(key.as_str(), encode(rec)?, None)]);
        Ok(self.txn(txn).await?.succeeded())
    }

    /// The record of cluster `name` with its `mod_revision`, for a conditional update
    /// ([`Store::renew_cluster_key`]).
    pub async fn get_cluster_versioned(
        &self,
        name: &str,
    ) -> Result<Option<(ClusterRecord, i64)>, StoreError> {
        check_segment("cluster", name)?;
        self.get_json(&self.keys().cluster(name)).await
    }

    /// Writes `rec` (a renewal: a new key, the replaced one kept as `previous`) only if the
    /// record is still at `mod_revision`; returns whether it did. A revoke or a `--force`
    /// registration that came in between wins: the renewal is dropped.
    pub async fn renew_cluster_key(
        &self,
        rec: &ClusterRecord,
        mod_revision: i64,
    ) -> Result<bool, StoreError> {
        check_segment("cluster", &rec.name)?;
        let key = self.keys().cluster(&rec.name);
        let txn = Txn::new()
            .when(vec![Compare::mod_revision(
                key.as_str(),
                CompareOp::Equal,
                mod_revision,
            )])
            .and_then(vec![TxnOp::put(key.as_str(), encode(rec)?, None)]);
        Ok(self.txn(txn).await?.succeeded())
    }

    /// Every registered cluster, sorted by name.
    pub async fn list_clusters(&self) -> Result<Vec<ClusterRecord>, StoreError> {
        let (items, _) = self
            .list_json::<ClusterRecord>(&self.keys().clusters_prefix())
            .await?;
        Ok(items.into_iter().map(|(_, record, _)| record).collect())
    }

    /// Removes cluster `name` from the registry; returns whether it was there.
    pub async fn delete_cluster(&self, name: &str) -> Result<bool, StoreError> {
        check_segment("cluster", name)?;
        self.delete(&self.keys().cluster(name)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(previous: Option<PreviousKey>) -> ClusterRecord {
        ClusterRecord {
            name: "east".into(),
            spki_sha256: "new".into(),
            labels: BTreeMap::new(),
            registered_unix: 0,
            previous,
        }
    }

    #[test]
    fn the_current_key_is_accepted_and_an_unknown_one_is_not() {
        let r = record(None);
        assert!(r.accepts("new", 100));
        assert!(!r.accepts("old", 100));
    }

    #[test]
    fn a_renewed_key_is_accepted_until_its_certificate_expires() {
        let r = record(Some(PreviousKey {
            spki_sha256: "old".into(),
            not_after_unix: 100,
        }));
        assert!(r.accepts("old", 99));
        assert!(!r.accepts("old", 100));
        assert!(r.accepts("new", 1_000));
    }

    #[test]
    fn records_written_before_renewal_existed_still_decode() {
        let json = r#"{"name":"east","spki_sha256":"k","labels":{},"registered_unix":1}"#;
        let r: ClusterRecord = serde_json::from_str(json).unwrap();
        assert_eq!(r.previous, None);
        assert!(r.accepts("k", 0));
    }
}
