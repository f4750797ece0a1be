//! Member API server health: the agent asks its own kube-apiserver `GET /readyz` through
//! the agent's client, with a short timeout, every few seconds, and keeps the result in a
//! [`watch`] channel. The engine forwards changes to the hub as `MemberHealth`, so a frozen
//! or failing API server shows on the ManagedCluster (condition `APIServerAvailable`)
//! instead of leaving placements silently `Pending`.
//!
//! Only the API server is judged: its workloads keep running while it is down, so nothing
//! is moved because of it.

use std::time::Duration;

use accord_common::runtime::unix_millis;
use accord_proto::v1::MemberHealth;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use crate::engine::EngineHandle;

/// How long one probe may take before the API server counts as unavailable.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the API server is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(3);
/// Longest probe error passed on (the message goes into a Kubernetes condition).
const MAX_MESSAGE_CHARS: usize = 512;

/// Why one probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// No answer within the timeout (a frozen or overloaded API server).
    #[error("GET /readyz did not answer within {0:?}")]
    Timeout(Duration),
    /// The request failed or the server answered that it is not ready.
    #[error("GET /readyz failed")]
    Failed(#[source] kube::Error),
    /// The probe request could not be built.
    #[error("building the /readyz request")]
    Request(#[source] http::Error),
}

/// How the probe runs.
#[derive(Clone, Copy, Debug)]
pub struct ProbeConfig {
    /// Time allowed for one probe.
    pub timeout: Duration,
    /// Time between the starts of two probes.
    pub interval: Duration,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        Self {
            timeout: PROBE_TIMEOUT,
            interval: PROBE_INTERVAL,
        }
    }
}

/// Probes the API server behind `client` once.
pub async fn probe_once(client: &kube::Client, timeout: Duration) -> Result<(), ProbeError> {
    let request = http::Request::get("/readyz")
        .body(Vec::new())
        .map_err(ProbeError::Request)?;
    match tokio::time::timeout(timeout, client.request_text(request)).await {
        Err(_) => Err(ProbeError::Timeout(timeout)),
        Ok(Err(e)) => Err(ProbeError::Failed(e)),
        Ok(Ok(_)) => Ok(()),
    }
}

/// The health after a probe's `outcome`, given the health before (`since` changes only
/// when availability or the message changes).
pub fn next_health(
    before: Option<&MemberHealth>,
    outcome: Result<(), String>,
    now_unix_millis: i64,
) -> MemberHealth {
    let (available, message) = match outcome {
        Ok(()) => (true, String::new()),
        Err(message) => (false, truncate(&message)),
    };
    match before {
        Some(b) if b.api_server_available == available && b.message == message => b.clone(),
        _ => MemberHealth {
            api_server_available: available,
            message,
            since_unix_millis: now_unix_millis,
        },
    }
}

fn truncate(message: &str) -> String {
    match message.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((at, _)) => format!("{}…", &message[..at]),
        None => message.to_owned(),
    }
}

/// Starts probing the API server behind `client`; the receiver holds the latest health
/// (`None` until the first probe finished). The probe stops when every receiver is gone.
pub fn start(client: kube::Client, config: ProbeConfig) -> watch::Receiver<Option<MemberHealth>> {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(config.interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let outcome = probe_once(&client, config.timeout)
                .await
                .map_err(|e| accord_common::runtime::error_chain(&e));
            let next = next_health(tx.borrow().as_ref(), outcome, unix_millis());
            let changed = tx.borrow().as_ref() != Some(&next);
            if changed && tx.send(Some(next)).is_err() {
                return;
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    rx
}

/// Passes every change of `health` to the engine behind `engine`, until the probe stops.
pub async fn forward(mut health: watch::Receiver<Option<MemberHealth>>, engine: EngineHandle) {
    loop {
        let current = health.borrow_and_update().clone();
        if let Some(current) = current {
            engine.health_changed(current).await;
        }
        if health.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_probe_sets_the_time_and_an_unchanged_result_keeps_it() {
        let up = next_health(None, Ok(()), 1_000);
        assert!(up.api_server_available && up.message.is_empty());
        assert_eq!(up.since_unix_millis, 1_000);
        let still = next_health(Some(&up), Ok(()), 4_000);
        assert_eq!(still, up);
        let down = next_health(Some(&up), Err("timed out".into()), 7_000);
        assert!(!down.api_server_available);
        assert_eq!(
            (down.message.as_str(), down.since_unix_millis),
            ("timed out", 7_000)
        );
        let other = next_health(Some(&down), Err("connection refused".into()), 10_000);
        assert_eq!(other.since_unix_millis, 10_000, "a new error is a change");
    }

    #[test]
    fn a_long_error_is_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_MESSAGE_CHARS * 2);
        let health = next_health(None, Err(long), 0);
        assert_eq!(health.message.chars().count(), MAX_MESSAGE_CHARS + 1);
        assert!(health.message.ends_with('…'));
    }
}
