//! Member health as agents report it (`MemberHealth`): one small record per cluster at
//! `<prefix>health/<cluster>` ([`MemberReport`]).

use serde::{Deserialize, Serialize};

use super::reported::MemberReport;

/// What the agent last said about its member's API server.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HealthRecord {
    /// Whether the member's kube-apiserver answered its `/readyz` probe.
    pub api_server_available: bool,
    /// The probe's error, empty when available.
    #[serde(default)]
    pub message: String,
    /// When the probe's result last changed (agent clock), Unix milliseconds.
    #[serde(default)]
    pub since_unix_millis: i64,
}

/// Longest probe message stored (the agent cuts it shorter; this guards the hub).
const MAX_MESSAGE_BYTES: usize = 1024;

impl HealthRecord {
    /// The record of a `MemberHealth` message, its message cut to a bounded length.
    pub fn from_proto(health: &accord_proto::v1::MemberHealth) -> Self {
        let mut message = health.message.clone();
        if message.len() > MAX_MESSAGE_BYTES {
            let mut end = MAX_MESSAGE_BYTES;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        Self {
            api_server_available: health.api_server_available,
            message,
            since_unix_millis: health.since_unix_millis,
        }
    }
}

impl MemberReport for HealthRecord {
    const SEGMENT: &'static str = "health/";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_message_is_cut_on_a_character_boundary() {
        let health = accord_proto::v1::MemberHealth {
            api_server_available: false,
            message: "é".repeat(MAX_MESSAGE_BYTES),
            since_unix_millis: 5,
        };
        let record = HealthRecord::from_proto(&health);
        assert!(record.message.len() <= MAX_MESSAGE_BYTES);
        assert!(record.message.chars().all(|c| c == 'é'));
        assert!(!record.api_server_available);
    }
}
