//! Process plumbing both binaries need once: a Kubernetes client from a kubeconfig, the
//! shutdown signal, the wall clock in Unix milliseconds, a task handle that aborts on drop,
//! and the one retry recipe (exponential with jitter, backon).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio::task::JoinHandle;

/// Why a Kubernetes client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum KubeClientError {
    /// The kubeconfig could not be read or loaded.
    #[error("loading kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// No kubeconfig was given and none was found, in the environment or in-cluster.
    #[error("no --kubeconfig given and none found ($KUBECONFIG, ~/.kube/config, in-cluster): {0}")]
    Infer(#[source] kube::config::InferConfigError),
    /// The client could not be built from the configuration.
    #[error("building the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
}

/// A client from a kubeconfig file, or inferred from the environment (`$KUBECONFIG`,
/// `~/.kube/config`, in-cluster) when `kubeconfig` is `None`.
pub async fn kube_client(kubeconfig: Option<&Path>) -> Result<kube::Client, KubeClientError> {
    let config = kube_config(kubeconfig).await?;
    kube::Client::try_from(config).map_err(KubeClientError::Client)
}

/// The configuration [`kube_client`] builds its client from, for callers that add their
/// own layers to the client.
pub async fn kube_config(kubeconfig: Option<&Path>) -> Result<kube::Config, KubeClientError> {
    Ok(match kubeconfig {
        Some(path) => {
            let wrap =
                |source: Box<dyn std::error::Error + Send + Sync>| KubeClientError::Kubeconfig {
                    path: path.to_owned(),
                    source,
                };
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| wrap(Box::new(e)))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| wrap(Box::new(e)))?
        }
        None => kube::Config::infer()
            .await
            .map_err(KubeClientError::Infer)?,
    })
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Milliseconds since the Unix epoch by the wall clock (0 before it, saturating after).
pub fn unix_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Milliseconds since the Unix epoch as a Kubernetes `Time`; `None` when out of range.
pub fn time_from_millis(ms: i64) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    k8s_openapi::jiff::Timestamp::from_millisecond(ms)
        .ok()
        .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time)
}

/// A spawned task that is aborted when this handle is dropped, so helper tasks end with
/// their owner.
#[derive(Debug)]
pub struct AbortOnDrop<T = ()>(pub JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The one retry recipe: exponential delays from `min` up to `max`, with jitter, never
/// giving up (callers decide when to stop).
pub fn backoff(min: Duration, max: Duration) -> Retry {
    Retry(
        ExponentialBuilder::new()
            .with_min_delay(min)
            .with_max_delay(max)
            .with_jitter()
            .without_max_times()
            .build(),
        max,
    )
}

/// Delays of [`backoff`]; an endless iterator.
#[derive(Debug)]
pub struct Retry(ExponentialBackoff, Duration);

impl Retry {
    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        // Built without a limit, so backon never runs out; the fallback is the ceiling.
        self.0.next().unwrap_or(self.1)
    }
}

impl Iterator for Retry {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.next_delay())
    }
}

/// An error with its causes, `error: cause: cause …`, leaving out a cause whose text the
/// message already holds (many errors repeat their source's message).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_within_their_bounds_and_never_end() {
        let min = Duration::from_millis(10);
        let max = Duration::from_millis(80);
        let delays: Vec<Duration> = backoff(min, max).take(50).collect();
        assert_eq!(delays.len(), 50);
        // Jitter adds up to one more delay on top of the exponential step.
        assert!(
            delays.iter().all(|d| *d >= min && *d <= max * 2),
            "{delays:?}"
        );
        assert!(delays[40..].iter().all(|d| *d >= max), "{delays:?}");
    }

    #[tokio::test]
    async fn a_dropped_handle_aborts_its_task() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let guard = AbortOnDrop(tokio::spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await;
        }));
        drop(guard);
        assert!(rx.await.is_err(), "the task's sender was dropped with it");
    }
}
