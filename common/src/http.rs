//! The HTTP endpoint every Accord process serves: `/metrics` (OpenMetrics text),
//! `/healthz` (the process answers) and `/readyz` (it does its job).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

/// Readiness of the process, as `/readyz` reports it.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Marks the process ready (or not).
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    /// Whether the process is ready.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

type Encode = Arc<dyn Fn() -> String + Send + Sync>;

#[derive(Clone)]
struct AppState {
    encode: Encode,
    ready: Readiness,
    not_ready: &'static str,
}

/// Serves the endpoint on `listener` until the task is dropped: `/metrics` answers with
/// what `encode_metrics` returns, `/readyz` with 503 and `not_ready` until `ready` is set,
/// and `routes` answer what they serve besides.
pub async fn serve(
    listener: tokio::net::TcpListener,
    encode_metrics: impl Fn() -> String + Send + Sync + 'static,
    ready: Readiness,
    not_ready: &'static str,
    routes: Router,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(AppState {
            encode: Arc::new(encode_metrics),
            ready,
            not_ready,
        })
        .merge(routes);
    axum::serve(listener, app).await
}

async fn metrics(State(s): State<AppState>) -> ([(&'static str, &'static str); 1], String) {
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        (s.encode)(),
    )
}

async fn readyz(State(s): State<AppState>) -> (StatusCode, &'static str) {
    if s.ready.get() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, s.not_ready)
    }
}
