//! The registry of member clusters: one JSON record per cluster at `clusters/<name>`.

use std::collections::BTreeMap;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
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
        Ok(self.client().kv_client().txn(txn).await?.succeeded())
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
