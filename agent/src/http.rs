//! The agent's HTTP endpoint: `/metrics`, `/healthz`, `/readyz`.
//!
//! `/readyz` turns ready once the agent has loaded its persisted assignments and enforces
//! them; it does not depend on the hub, which may be unreachable for a long time while the
//! agent keeps doing its job.

pub use accord_common::http::Readiness;

use crate::metrics::Metrics;

/// Serves the endpoint on `listener` until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    ready: Readiness,
) -> std::io::Result<()> {
    accord_common::http::serve(
        listener,
        move || metrics.encode(),
        ready,
        "loading assignments",
        accord_common::http::Router::new(),
    )
    .await
}
