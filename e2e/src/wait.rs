//! Waiting on conditions with deadlines.
//!
//! Components report readiness through endpoints (`/readyz`, `/-/ready`, Kafka metadata),
//! so the testbed polls them with a short, growing interval until a deadline, and fails
//! with the last reason it saw rather than guessing a fixed sleep.

use std::future::Future;
use std::time::Duration;

use anyhow::{Result, bail};
use tokio::time::Instant;

/// The outcome of one check of a condition.
#[derive(Debug)]
pub enum Check<T> {
    /// The condition holds; waiting ends with this value.
    Ready(T),
    /// The condition does not hold yet, for the reason given.
    NotYet(String),
}

/// First interval between two checks; it doubles up to [`MAX_INTERVAL`].
const FIRST_INTERVAL: Duration = Duration::from_millis(25);
/// Longest interval between two checks.
const MAX_INTERVAL: Duration = Duration::from_millis(500);

/// Checks `condition` until it is ready or `timeout` has passed.
///
/// An `Err` from the check ends waiting at once (a component exited, say); `NotYet` is
/// retried and its reason is part of the timeout error.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut condition: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Check<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut interval = FIRST_INTERVAL;
    loop {
        let reason = match condition().await? {
            Check::Ready(value) => return Ok(value),
            Check::NotYet(reason) => reason,
        };
        let now = Instant::now();
        if now >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}: {reason}");
        }
        tokio::time::sleep(interval.min(deadline - now)).await;
        interval = (interval * 2).min(MAX_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waiting_returns_the_value_once_the_condition_holds() {
        let mut calls = 0;
        let value = until("three calls", Duration::from_secs(5), || {
            calls += 1;
            let done = calls == 3;
            async move {
                Ok(if done {
                    Check::Ready(calls)
                } else {
                    Check::NotYet("early".into())
                })
            }
        })
        .await
        .unwrap();
        assert_eq!(value, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_times_out_with_the_last_reason() {
        let err = until::<(), _, _>("never", Duration::from_secs(2), || async {
            Ok(Check::NotYet("still starting".into()))
        })
        .await
        .unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("never") && message.contains("still starting"),
            "{message}"
        );
    }
}
