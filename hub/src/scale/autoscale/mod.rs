//! Metric-driven autoscaling of CrossClusterScalePolicy: the pure decision ([`engine`]),
//! the metric's history window ([`window`]) and the Prometheus query ([`query`]). The
//! leader's runner lives in [`crate::scale::autoscaler`]; the scale controller divides
//! the count it decides.

pub mod engine;
pub mod query;
pub mod window;

use accord_common::runtime::time_from_millis as time;
use accord_crds::conditions::{Desired, Status, reasons, types};
use accord_crds::scale::AutoscalingStatus;

use engine::{Breaker, Config, State};

/// `status.autoscaling` as the stored state shows it. Everything is read from the state
/// (tokens as of the last decision), so the status changes only when a poll changed it.
pub fn status(state: &State, cfg: &Config, start: i32) -> AutoscalingStatus {
    let last = state.last.as_ref();
    AutoscalingStatus {
        current_metric_value: state.value,
        last_sample_time: state.last_sample_ms.and_then(time),
        samples: Some(i64::try_from(state.samples).unwrap_or(i64::MAX)),
        ewma: state.ewma,
        stddev: state.stddev,
        threshold: state.threshold,
        recommendation: state.recommendation,
        effective_desired_replicas: Some(state.effective(start)),
        last_scale_time: state.last_scale_ms.and_then(time),
        last_decision: last.map(|d| d.action.clone()),
        reason: last.map(|d| d.reason.clone()),
        message: last.map(|d| d.message.clone()),
        last_decision_time: last.and_then(|d| time(d.at_ms)),
        breaker_state: Some(state.breaker.name().to_owned()),
        consecutive_failures: Some(i32::try_from(state.failures).unwrap_or(i32::MAX)),
        unconverged_operations: Some(i32::try_from(state.unconverged).unwrap_or(i32::MAX)),
        tokens_left: last.map(|d| i32::try_from(state.tokens_left(cfg, d.at_ms)).unwrap_or(0)),
    }
}

/// The `ScalingActive` condition: True while the metric answers, False (with why) while it
/// fails or the breaker is open, Unknown before the first poll.
pub fn scaling_active(state: Option<&State>) -> Desired {
    let last_message = state
        .and_then(|s| s.last.as_ref())
        .map(|d| d.message.clone())
        .unwrap_or_default();
    match state {
        None => Desired::new(
            types::SCALING_ACTIVE,
            Status::Unknown,
            reasons::AWAITING_METRIC,
            "waiting for the first query",
        ),
        Some(s) if s.breaker != Breaker::Closed => Desired::new(
            types::SCALING_ACTIVE,
            Status::False,
            reasons::BREAKER_OPEN,
            last_message,
        ),
        Some(s) if s.failures > 0 => Desired::new(
            types::SCALING_ACTIVE,
            Status::False,
            reasons::METRIC_FAILED,
            last_message,
        ),
        Some(s) if s.samples == 0 => Desired::new(
            types::SCALING_ACTIVE,
            Status::Unknown,
            reasons::AWAITING_METRIC,
            "waiting for the first answer",
        ),
        Some(_) => Desired::new(
            types::SCALING_ACTIVE,
            Status::True,
            reasons::METRIC_AVAILABLE,
            "the metric answers; decisions are made every poll",
        ),
    }
}
