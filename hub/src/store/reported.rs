//! What an agent reports of its member cluster, one small record per cluster and kind of
//! report at `<prefix><segment><cluster>` (`health/`, `capacity/`), written by whichever
//! replica holds the cluster's stream and only when it changes, so the leader's
//! ManagedCluster status writer sees it whatever replica the agent is connected to.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Store, StoreError, check_segment};

/// One kind of per-cluster report.
pub trait MemberReport: Serialize + DeserializeOwned + Clone + PartialEq + Send + Sync {
    /// The key segment of its records, with the trailing slash (`health/`).
    const SEGMENT: &'static str;
}

impl Store {
    /// `<prefix><segment>` of the report `R`.
    pub fn report_prefix<R: MemberReport>(&self) -> String {
        format!("{}{}", self.keys().prefix(), R::SEGMENT)
    }

    /// `<prefix><segment><cluster>`.
    pub fn report_key<R: MemberReport>(&self, cluster: &str) -> Result<String, StoreError> {
        check_segment("cluster", cluster)?;
        Ok(format!("{}{cluster}", self.report_prefix::<R>()))
    }

    /// Stores `cluster`'s report `record`.
    pub async fn write_report<R: MemberReport>(
        &self,
        cluster: &str,
        record: &R,
    ) -> Result<(), StoreError> {
        let key = self.report_key::<R>(cluster)?;
        self.put_json(&key, record).await?;
        Ok(())
    }
}
