//! Member capacity as agents report it (`MemberCapacity`): one small record per cluster at
//! `<prefix>capacity/<cluster>` ([`MemberReport`]), shown by the leader in
//! `ManagedCluster.status.capacity`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::reported::MemberReport;

/// What the agent last counted of its member's schedulable nodes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CapacityRecord {
    /// Ready, schedulable nodes counted.
    pub nodes: i64,
    /// Their allocatable CPU, millicores.
    pub allocatable_cpu_millis: i64,
    /// Their allocatable memory, bytes.
    pub allocatable_memory_bytes: i64,
    /// Their allocatable pods.
    pub allocatable_pods: i64,
    /// Allocatable less the requests of the pods running there, millicores.
    pub unrequested_cpu_millis: i64,
    /// The same for memory, bytes.
    pub unrequested_memory_bytes: i64,
    /// The same for pods.
    pub unrequested_pods: i64,
}

impl MemberReport for CapacityRecord {
    const SEGMENT: &'static str = "capacity/";
}

impl CapacityRecord {
    /// The record of a `MemberCapacity` message; negative counts (a broken agent) are read
    /// as zero.
    pub fn from_proto(c: &accord_proto::v1::MemberCapacity) -> Self {
        Self {
            nodes: c.nodes.max(0),
            allocatable_cpu_millis: c.allocatable_cpu_millis.max(0),
            allocatable_memory_bytes: c.allocatable_memory_bytes.max(0),
            allocatable_pods: c.allocatable_pods.max(0),
            unrequested_cpu_millis: c.unrequested_cpu_millis.max(0),
            unrequested_memory_bytes: c.unrequested_memory_bytes.max(0),
            unrequested_pods: c.unrequested_pods.max(0),
        }
    }

    /// `ManagedCluster.status.capacity`: `nodes`, `allocatable.{cpu,memory,pods}` and
    /// `unrequested.{cpu,memory,pods}`, as Kubernetes quantities (`3500m`, `8Gi`).
    pub fn shown(&self) -> BTreeMap<String, String> {
        [
            ("nodes", self.nodes.to_string()),
            ("allocatable.cpu", cpu(self.allocatable_cpu_millis)),
            ("allocatable.memory", memory(self.allocatable_memory_bytes)),
            ("allocatable.pods", self.allocatable_pods.to_string()),
            ("unrequested.cpu", cpu(self.unrequested_cpu_millis)),
            ("unrequested.memory", memory(self.unrequested_memory_bytes)),
            ("unrequested.pods", self.unrequested_pods.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

/// Millicores as a quantity: whole cores when they are (`4`), millicores otherwise (`3500m`).
fn cpu(millis: i64) -> String {
    if millis % 1000 == 0 {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// Bytes as a quantity: the largest binary suffix that divides them (`8Gi`), bytes otherwise.
fn memory(bytes: i64) -> String {
    const SUFFIXES: [(&str, i64); 5] = [
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    SUFFIXES
        .iter()
        .find(|(_, unit)| bytes != 0 && bytes % unit == 0)
        .map_or_else(
            || bytes.to_string(),
            |(s, unit)| format!("{}{s}", bytes / unit),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_shown_as_kubernetes_quantities() {
        let record = CapacityRecord {
            nodes: 2,
            allocatable_cpu_millis: 4000,
            allocatable_memory_bytes: 8 << 30,
            allocatable_pods: 220,
            unrequested_cpu_millis: 3500,
            unrequested_memory_bytes: (8 << 30) - (512 << 20) - 1,
            unrequested_pods: 0,
        };
        let shown = record.shown();
        assert_eq!(shown["nodes"], "2");
        assert_eq!(shown["allocatable.cpu"], "4");
        assert_eq!(shown["allocatable.memory"], "8Gi");
        assert_eq!(shown["allocatable.pods"], "220");
        assert_eq!(shown["unrequested.cpu"], "3500m");
        assert_eq!(shown["unrequested.memory"], "8053063679");
        assert_eq!(shown["unrequested.pods"], "0");
        assert_eq!(memory((1 << 30) + (512 << 20)), "1536Mi");
    }

    #[test]
    fn a_negative_count_from_a_broken_agent_reads_as_zero() {
        let record = CapacityRecord::from_proto(&accord_proto::v1::MemberCapacity {
            nodes: -1,
            unrequested_cpu_millis: -5,
            allocatable_pods: 10,
            ..Default::default()
        });
        assert_eq!(record.nodes, 0);
        assert_eq!(record.unrequested_cpu_millis, 0);
        assert_eq!(record.allocatable_pods, 10);
    }
}
