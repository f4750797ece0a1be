//! Status records reported by agents, written with optimistic concurrency: a write names
//! the version (etcd `mod_revision`) of the record it replaces, and a report older than the
//! stored one never replaces it.

use std::cmp::Ordering;

use super::kv::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use accord_common::distribution::{Observed, PlacementState};
use serde::{Deserialize, Serialize};

use super::{Store, StoreError, check_segment, encode};

/// The last status a cluster reported for one placed object.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct StatusRecord {
    /// `metadata.resourceVersion` of the member object the report describes (numeric in
    /// practice; empty when there is no object).
    pub resource_version: String,
    /// `metadata.generation` of the member object.
    pub generation: i64,
    /// The hub assignment revision the agent had applied when it reported.
    pub applied_revision: i64,
    /// Placement state (stored as its name: `Pending`, `Synced`, `TargetNotFound`,
    /// `Conflict`, `Unavailable`, `Error`).
    pub state: PlacementState,
    /// Human-readable detail.
    pub message: String,
    /// When the agent observed the object, in milliseconds since the Unix epoch.
    pub observed_unix_millis: i64,
    /// What the agent observed of the object, one variant per kind (a scaled Deployment's
    /// counts and scale request id, a topic's partitions, ...).
    #[serde(default)]
    pub observed: Observed,
    /// The member's API server failed the agent's `/readyz` probe when the agent observed
    /// this (the state is then `Unavailable`; the message says why, for humans).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub api_server_unavailable: bool,
}

/// The result of [`Store::write_status`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The record was written; `version` is its new `mod_revision`.
    Accepted {
        /// The record's new version.
        version: i64,
    },
    /// Nothing was written: the stored record's version is not the expected one, or the
    /// report is older than the stored record. `current` is the stored version (0 when
    /// there is no record).
    Conflict {
        /// The stored record's version.
        current: i64,
        /// Which of the two it was.
        reason: Refusal,
    },
}

/// Why a report was not written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The expected version is not the stored record's: the sender is to re-read (take
    /// `current`) and send a fresh observation.
    StaleVersion,
    /// The version matched but the stored report is newer than this one: drop it.
    OlderReport,
}

impl Refusal {
    /// The protocol's name for it.
    pub fn to_proto(self) -> accord_proto::v1::RefusalReason {
        match self {
            Refusal::StaleVersion => accord_proto::v1::RefusalReason::StaleVersion,
            Refusal::OlderReport => accord_proto::v1::RefusalReason::OlderReport,
        }
    }

    /// Its metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::StaleVersion => "stale_version",
            Refusal::OlderReport => "older_report",
        }
    }
}

/// What orders two reports of the same object ([`report_order`]). A stream keeps it for
/// each record it wrote, so that the next report about the object is judged without
/// reading the record back (see [`Store::write_status`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportOrder {
    applied_revision: i64,
    generation: i64,
    resource_version: String,
    observed_unix_millis: i64,
}

/// The fields of a report that order it, borrowed: [`report_order`] and a stream's kept
/// [`ReportOrder`] compare through it.
type OrderKey<'a> = (i64, i64, &'a str, i64);

impl ReportOrder {
    fn key(&self) -> OrderKey<'_> {
        (
            self.applied_revision,
            self.generation,
            &self.resource_version,
            self.observed_unix_millis,
        )
    }
}

impl StatusRecord {
    /// The fields that order this report among others of the same object.
    pub fn order(&self) -> ReportOrder {
        ReportOrder {
            applied_revision: self.applied_revision,
            generation: self.generation,
            resource_version: self.resource_version.clone(),
            observed_unix_millis: self.observed_unix_millis,
        }
    }

    fn order_key(&self) -> OrderKey<'_> {
        (
            self.applied_revision,
            self.generation,
            &self.resource_version,
            self.observed_unix_millis,
        )
    }
}

/// Orders by applied assignment revision, then generation, then numeric resource version,
/// then observation time. A report about no object (empty resource version: the object is
/// gone, or not there yet) has no generation to compare: after the revision, the
/// observation time alone orders it against any other report.
fn compare_keys(a: OrderKey<'_>, b: OrderKey<'_>) -> Ordering {
    let revision = a.0.cmp(&b.0);
    if a.2.is_empty() || b.2.is_empty() {
        return revision.then(a.3.cmp(&b.3));
    }
    revision
        .then(a.1.cmp(&b.1))
        .then_with(|| resource_version_order(a.2, b.2))
        .then(a.3.cmp(&b.3))
}

/// Orders two reports of the same object by how recent they are: by applied assignment
/// revision, then generation, then numeric resource version, then observation time.
///
/// Resource versions are compared as numbers when both are numeric and are otherwise
/// treated as equal (Kubernetes calls them opaque; an empty one means "no object"), so the
/// observation time decides.
pub fn report_order(a: &StatusRecord, b: &StatusRecord) -> Ordering {
    compare_keys(a.order_key(), b.order_key())
}

/// Whether `report` may replace `stored`: it is not older.
pub fn supersedes(report: &StatusRecord, stored: &StatusRecord) -> bool {
    report_order(report, stored) != Ordering::Less
}

fn resource_version_order(a: &str, b: &str) -> Ordering {
    match (a.parse::<u128>(), b.parse::<u128>()) {
        (Ok(a), Ok(b)) => a.cmp(&b),
        _ => Ordering::Equal,
    }
}

impl Store {
    /// Writes `status/<cluster>/<kind>/<ns>/<name>` if its version is `expected_version`
    /// (0: there must be no record yet) and the report is not older than the stored one
    /// (see [`report_order`]). Otherwise nothing is written and the answer is
    /// [`WriteOutcome::Conflict`] with the stored version.
    ///
    /// `known` is the order of the record stored at `expected_version` when the caller
    /// knows it (it wrote that version itself): the write is then one transaction instead
    /// of a read and a transaction. The transaction still applies only if the record is
    /// that version, so a wrong guess is refused like any stale one.
    #[expect(
        clippy::too_many_arguments,
        reason = "the record's key parts, the report, its precondition and what the writer knows of it"
    )]
    pub async fn write_status(
        &self,
        cluster: &str,
        kind: &str,
        ns: &str,
        name: &str,
        record: &StatusRecord,
        expected_version: i64,
        known: Option<&ReportOrder>,
    ) -> Result<WriteOutcome, StoreError> {
        let key = self.status_key(cluster, kind, ns, name)?;
        let value = encode(record)?;
        if expected_version != 0 {
            let newer = match known {
                Some(stored) => compare_keys(record.order_key(), stored.key()) != Ordering::Less,
                // The stored record is needed to refuse an older report. Reading it first is
                // safe: the transaction below only applies if the record is still this one.
                None => match self.get_json::<StatusRecord>(&key).await {
                    Ok(Some((_, version))) if version != expected_version => {
                        return Ok(WriteOutcome::Conflict {
                            current: version,
                            reason: Refusal::StaleVersion,
                        });
                    }
                    Ok(Some((stored, _))) => supersedes(record, &stored),
                    Ok(None) => {
                        return Ok(WriteOutcome::Conflict {
                            current: 0,
                            reason: Refusal::StaleVersion,
                        });
                    }
                    // An undecodable record is replaced by any well-formed report.
                    Err(StoreError::Decode { .. }) => true,
                    Err(e) => return Err(e),
                },
            };
            if !newer {
                return Ok(WriteOutcome::Conflict {
                    current: expected_version,
                    reason: Refusal::OlderReport,
                });
            }
        }
        let txn = Txn::new()
            .when(vec![Compare::mod_revision(
                key.as_str(),
                CompareOp::Equal,
                expected_version,
            )])
            .and_then(vec![TxnOp::put(key.as_str(), value, None)])
            .or_else(vec![TxnOp::get(key.as_str())]);
        // Reports from every stream share transactions: one etcd request and apply for many.
        let (response, revision) = self
            .batched_txn(super::Lane::Reports, 0, key.clone(), txn)
            .await?;
        if response.succeeded() {
            return Ok(WriteOutcome::Accepted { version: revision });
        }
        let current = response
            .responses
            .iter()
            .find_map(|op| match op {
                TxnOpResponse::Get(kvs) => Some(kvs.first().map_or(0, |kv| kv.mod_revision())),
                _ => None,
            })
            .unwrap_or_default();
        Ok(WriteOutcome::Conflict {
            current,
            reason: Refusal::StaleVersion,
        })
    }

    /// Reads `status/<cluster>/<kind>/<ns>/<name>` with its version.
    pub async fn read_status(
        &self,
        cluster: &str,
        kind: &str,
        ns: &str,
        name: &str,
    ) -> Result<Option<(StatusRecord, i64)>, StoreError> {
        let key = self.status_key(cluster, kind, ns, name)?;
        self.get_json(&key).await
    }

    /// Deletes every cluster's status record of placed object `kind/ns/name`; returns how many
    /// there were.
    pub async fn delete_placement_status(
        &self,
        kind: &str,
        ns: &str,
        name: &str,
    ) -> Result<usize, StoreError> {
        check_segment("kind", kind)?;
        check_segment("namespace", ns)?;
        check_segment("name", name)?;
        let suffix = format!("/{kind}/{ns}/{name}");
        let (records, _) = self.list_keys(&self.keys().status_prefix()).await?;
        let mut deleted = 0;
        for key in records.iter().filter(|k| k.ends_with(&suffix)) {
            if self.delete(key).await? {
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    fn status_key(
        &self,
        cluster: &str,
        kind: &str,
        ns: &str,
        name: &str,
    ) -> Result<String, StoreError> {
        check_segment("cluster", cluster)?;
        check_segment("kind", kind)?;
        check_segment("namespace", ns)?;
        check_segment("name", name)?;
        Ok(self.keys().status(cluster, kind, ns, name))
    }

    /// The keys under `prefix` (values not fetched), with the listing's revision.
    async fn list_keys(&self, prefix: &str) -> Result<(Vec<String>, i64), StoreError> {
        let (kvs, revision) = self.list_prefix(prefix, true).await?;
        let keys = kvs
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
            .collect();
        Ok((keys, revision))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(applied: i64, generation: i64, rv: &str, millis: i64) -> StatusRecord {
        StatusRecord {
            resource_version: rv.into(),
            generation,
            applied_revision: applied,
            state: PlacementState::Synced,
            message: String::new(),
            observed_unix_millis: millis,
            observed: Observed::Nothing,
            api_server_unavailable: false,
        }
    }

    #[test]
    fn a_record_stored_before_the_api_server_flag_reads_without_it_and_keeps_its_form() {
        let stored = r#"{"resource_version":"5","generation":1,"applied_revision":2,
            "state":"Unavailable","message":"m","observed_unix_millis":3,"observed":"nothing"}"#;
        let record: StatusRecord = serde_json::from_str(stored).unwrap();
        assert!(!record.api_server_unavailable);
        assert!(
            !serde_json::to_string(&record)
                .unwrap()
                .contains("api_server_unavailable")
        );
        let down = StatusRecord {
            api_server_unavailable: true,
            ..record
        };
        let json = serde_json::to_string(&down).unwrap();
        assert!(json.contains(r#""api_server_unavailable":true"#), "{json}");
        assert_eq!(serde_json::from_str::<StatusRecord>(&json).unwrap(), down);
    }

    #[test]
    fn a_later_applied_revision_wins_over_everything_else() {
        let newer = report(2, 1, "5", 0);
        let older = report(1, 9, "900", 9_999);
        assert_eq!(report_order(&newer, &older), Ordering::Greater);
        assert!(!supersedes(&older, &newer));
    }

    #[test]
    fn generation_decides_between_reports_of_one_assignment() {
        assert!(supersedes(&report(3, 4, "1", 0), &report(3, 3, "99", 50)));
        assert!(!supersedes(&report(3, 3, "99", 50), &report(3, 4, "1", 0)));
    }

    #[test]
    fn resource_versions_compare_as_numbers_not_text() {
        assert_eq!(
            report_order(&report(1, 1, "10", 0), &report(1, 1, "9", 0)),
            Ordering::Greater
        );
    }

    #[test]
    fn observation_time_decides_when_everything_else_ties() {
        assert!(supersedes(&report(1, 1, "7", 20), &report(1, 1, "7", 10)));
        assert!(!supersedes(&report(1, 1, "7", 10), &report(1, 1, "7", 20)));
    }

    #[test]
    fn a_non_numeric_resource_version_falls_back_to_observation_time() {
        assert!(supersedes(&report(1, 1, "", 20), &report(1, 1, "7", 10)));
        assert!(!supersedes(
            &report(1, 1, "abc", 10),
            &report(1, 1, "7", 20)
        ));
    }

    #[test]
    fn a_report_that_the_object_is_gone_orders_by_observation_time() {
        // Deleted after a report about its generation 4: the later report of no object
        // supersedes it (it was once refused as older, and the placement kept saying Synced).
        assert!(supersedes(&report(3, 0, "", 50), &report(3, 4, "12", 10)));
        // An earlier report of no object does not replace a later one about the object.
        assert!(!supersedes(&report(3, 0, "", 10), &report(3, 4, "12", 50)));
        // A later revision still wins first.
        assert!(!supersedes(&report(2, 0, "", 90), &report(3, 4, "12", 50)));
    }

    #[test]
    fn an_identical_report_may_be_written_again() {
        let r = report(1, 1, "7", 10);
        assert!(supersedes(&r, &r));
    }
}
