//! The hub's HTTP endpoint: `/metrics`, `/healthz`, `/readyz` (ready once the gRPC server
//! listens and etcd answered; not ready again from SIGTERM on).

use std::net::SocketAddr;

pub use accord_common::http::Readiness;

use crate::metrics::Metrics;

/// Serves the HTTP endpoint on `listener` until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    ready: Readiness,
) -> std::io::Result<()> {
    accord_common::http::serve(listener, move || metrics.encode(), ready, "not ready").await
}

/// Binds the HTTP address, so that a port conflict fails start-up with a clear error.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
