//! The hub's HTTP endpoint: `/metrics`, `/healthz`, `/readyz`.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::metrics::Metrics;

/// Readiness of the replica: set once the gRPC server listens and etcd answered.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Marks the replica ready (or not).
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    /// Whether the replica is ready.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    ready: Readiness,
}

/// Serves the HTTP endpoint on `listener` until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    ready: Readiness,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(AppState { metrics, ready });
    axum::serve(listener, app).await
}

/// Binds the HTTP address, so that a port conflict fails start-up with a clear error.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

async fn metrics_handler(State(s): State<AppState>) -> ([(&'static str, &'static str); 1], String) {
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

async fn readyz(State(s): State<AppState>) -> (StatusCode, &'static str) {
    if s.ready.get() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}
