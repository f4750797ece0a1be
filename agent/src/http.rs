//! The agent's HTTP endpoint: `/metrics`, `/healthz`, `/readyz`.
//!
//! `/readyz` turns ready once the agent has loaded its persisted assignments and enforces
//! them; it does not depend on the hub, which may be unreachable for a long time while the
//! agent keeps doing its job.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::metrics::Metrics;

/// Readiness of the agent.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Marks the agent ready (or not).
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    /// Whether the agent is ready.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    ready: Readiness,
}

/// Serves the endpoint on `listener` until the task is dropped.
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
        (StatusCode::SERVICE_UNAVAILABLE, "loading assignments")
    }
}
