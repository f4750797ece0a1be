//! The liveness probe of the member's Kafka, for any Kafka enforcer: while it has work, one
//! cheap request (a Metadata request for no topic, which names the brokers only) every probe
//! interval, through a client of its own, bounded by the probe timeout. Kafka has no watch,
//! and an enforcer's observer looks only every resync interval: without the probe a frozen
//! broker would show only at the next look, up to a resync interval and a request timeout
//! later.
//!
//! A probe that fails (no answer within the timeout, refused credentials) makes what the
//! enforcer keeps `Unavailable` with its message; when Kafka answers again the enforcer's
//! observer is nudged to look afresh ([`ProbeState::take_stale`]) and its judge says what it
//! said before. A probe only changes what is reported: it never applies, and nothing is
//! applied because of it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use accord_kafka::{Admin, KafkaConfig, KafkaError};
use tokio::sync::{Notify, watch};
use tokio::time::MissedTickBehavior;
use tracing::{info, warn};

use super::errors::{UNREACHABLE_PREFIX, failure_message};
use crate::enforce::{EventSink, WatchEvent};
use crate::metrics::Metrics;

/// What the last liveness probe of the member's Kafka said .
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Probe {
    /// No probe has finished through the current connection yet.
    #[default]
    NotYet,
    /// Kafka answered the last probe.
    Answered,
    /// Kafka did not answer the last probe in time, or refused it; the message says why
    /// (`Kafka unreachable: …`, `Kafka authentication failed: …`).
    Failed(String),
}

/// The resource name of the probe's verdict in watch events.
pub const PROBES: &str = "kafkaprobes";
/// The metric label of probe requests (`accord_agent_kafka_requests_total{request="probe"}`).
pub const PROBE_REQUEST: &str = "probe";

/// How often and how patiently the member's Kafka is probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeOptions {
    /// Time between the starts of two probes.
    pub interval: Duration,
    /// Time one probe may take before Kafka counts as unreachable; shorter than the interval.
    pub timeout: Duration,
}

/// Default interval between two probes.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_secs(5);
/// Default time one probe may take.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            interval: DEFAULT_PROBE_INTERVAL,
            timeout: DEFAULT_PROBE_TIMEOUT,
        }
    }
}

/// The status message of a probe that got no answer within `timeout`.
pub fn no_answer_message(timeout: Duration) -> String {
    format!("{UNREACHABLE_PREFIX}no answer to the liveness probe within {timeout:?}")
}

/// The outcome of one probe's result, as the status tells it: a timeout anywhere (the
/// client's own or the probe's bound) reads the same, so a frozen broker gives one message.
pub fn outcome(result: Option<Result<(), KafkaError>>, timeout: Duration) -> Result<(), String> {
    match result {
        Some(Ok(())) => Ok(()),
        None | Some(Err(KafkaError::Timeout { .. })) => Err(no_answer_message(timeout)),
        Some(Err(e)) => Err(failure_message(&e)),
    }
}

/// The probe's client configuration: the connection's, with half the probe timeout as its
/// request timeout, so that a broker that does not answer leaves time to ask the next one
/// (the client goes on to the next broker after a timeout) within the probe timeout.
fn probe_config(config: &KafkaConfig, timeout: Duration) -> KafkaConfig {
    KafkaConfig {
        request_timeout: (timeout / 2).max(Duration::from_millis(1)),
        ..config.clone()
    }
}

/// What the last probes of one connection said, kept in an enforcer's observations. Pure:
/// [`run`] feeds it each probe's result.
#[derive(Debug, Default)]
pub struct ProbeState {
    probe: Probe,
    /// Set when Kafka answers its probe again after failing it: what was seen before may
    /// be stale, so the next look is a full one.
    stale: bool,
    epoch: u64,
}

impl ProbeState {
    /// What the last probe through the current connection said.
    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// Records a probe through connection `epoch` that answered (`Ok`) or failed with a
    /// message; answers whether that changes any judgement (Kafka stopped answering,
    /// answers again, or fails differently).
    pub fn probed(&mut self, epoch: u64, outcome: Result<(), String>) -> bool {
        if epoch != self.epoch {
            // Made through a connection that has been replaced since.
            return false;
        }
        let next = match outcome {
            Ok(()) => Probe::Answered,
            Err(message) => Probe::Failed(message),
        };
        let changes = match (&self.probe, &next) {
            // Judged alike: only a failure changes what is reported.
            (Probe::NotYet | Probe::Answered, Probe::NotYet | Probe::Answered) => false,
            (before, after) => before != after,
        };
        if matches!(self.probe, Probe::Failed(_)) && next == Probe::Answered {
            self.stale = true;
        }
        self.probe = next;
        changes
    }

    /// Forgets every probe: the connection changed to `epoch`.
    pub fn reset(&mut self, epoch: u64) {
        *self = Self {
            epoch,
            ..Self::default()
        };
    }

    /// Whether Kafka answers again after failing its probe since this was last asked
    /// (taken: asked once per look).
    pub fn take_stale(&mut self) -> bool {
        std::mem::take(&mut self.stale)
    }
}

/// What the probe needs of an enforcer's target: the connection to probe (its epoch and
/// configuration), `None` while the enforcer has nothing in Kafka.
pub trait Endpoint {
    /// The connection to probe, if any.
    fn endpoint(&self) -> Option<(u64, Arc<KafkaConfig>)>;
}

/// An enforcer's observations, which keep what its probes said.
pub trait Probed: Send + 'static {
    /// Where the probes' verdict is kept.
    fn probe_state(&mut self) -> &mut ProbeState;
}

/// Probes the target's connection every interval while it has one, records each result in
/// `shared`, tells the engine when that changes a judgement, and nudges the observer when
/// Kafka answers again. Runs until aborted.
pub async fn run<T: Endpoint, O: Probed>(
    target: watch::Receiver<T>,
    shared: Arc<Mutex<O>>,
    nudge: Arc<Notify>,
    events: EventSink,
    options: ProbeOptions,
    metrics: Metrics,
) {
    let mut tick = tokio::time::interval(options.interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // The probe's own client, for the connection of the epoch it was made for.
    let mut client: Option<(u64, Admin)> = None;
    loop {
        tick.tick().await;
        let Some((epoch, config)) = target.borrow().endpoint() else {
            client = None;
            continue;
        };
        let admin = match &client {
            Some((made_for, admin)) if *made_for == epoch => admin.clone(),
            _ => {
                let admin = Admin::new(probe_config(&config, options.timeout));
                client = Some((epoch, admin.clone()));
                admin
            }
        };
        metrics.kafka_request(PROBE_REQUEST);
        let result = tokio::time::timeout(options.timeout, admin.describe_topics(&[]))
            .await
            .ok()
            .map(|r| r.map(drop));
        if result.is_none() {
            // Abandoned mid-request: the state of its connection is unknown, so the next
            // probe starts with a fresh client.
            client = None;
        }
        let outcome = outcome(result, options.timeout);
        if outcome.is_err() {
            metrics.error("kafka_unavailable");
        }
        let (changed, probe) = {
            let mut observations = shared.lock().unwrap_or_else(PoisonError::into_inner);
            let state = observations.probe_state();
            let changed = state.probed(epoch, outcome);
            (changed, state.probe().clone())
        };
        if !changed {
            continue;
        }
        match &probe {
            Probe::Failed(message) => {
                warn!(error = %message, "the member's Kafka fails its liveness probe");
            }
            Probe::Answered | Probe::NotYet => {
                info!("the member's Kafka answers its liveness probe again");
                // What was seen before may be stale: look afresh now rather than at the
                // next resync.
                nudge.notify_one();
            }
        }
        let event = WatchEvent::Changed {
            resource: PROBES,
            namespace: String::new(),
            name: String::new(),
        };
        if !events.send(event).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_reads_the_same_whichever_timer_ends_the_probe() {
        let timeout = Duration::from_secs(2);
        let by_client = outcome(
            Some(Err(KafkaError::Timeout {
                addr: "127.0.0.1:9092".into(),
                after: timeout,
            })),
            timeout,
        );
        assert_eq!(by_client, outcome(None, timeout));
        let message = by_client.unwrap_err();
        assert!(message.starts_with(UNREACHABLE_PREFIX), "{message}");
        assert!(message.contains("2s"), "{message}");
        assert_eq!(outcome(Some(Ok(())), timeout), Ok(()));
    }

    #[test]
    fn other_failures_keep_their_own_message() {
        let e = KafkaError::Authentication {
            message: "invalid credentials".into(),
        };
        let message = outcome(Some(Err(e)), Duration::from_secs(2)).unwrap_err();
        assert!(
            message.starts_with(super::super::errors::AUTHENTICATION_PREFIX),
            "{message}"
        );
    }

    #[test]
    fn the_probe_client_gives_each_broker_half_the_probe_timeout() {
        let config = KafkaConfig::plaintext(["127.0.0.1:9092", "127.0.0.1:9093"]);
        let probe = probe_config(&config, Duration::from_secs(2));
        assert_eq!(probe.request_timeout, Duration::from_secs(1));
        assert_eq!(probe.bootstrap, config.bootstrap);
        assert_eq!(probe.security, config.security);
        let tiny = probe_config(&config, Duration::from_nanos(1));
        assert!(!tiny.request_timeout.is_zero());
    }
}
