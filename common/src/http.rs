//! The HTTP endpoint every Accord process serves: `/metrics` (OpenMetrics text),
//! `/healthz` (the process answers) and `/readyz` (it does its job).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

/// Readiness of the process, as `/readyz` reports it, with what it has to say: why it is
/// not ready, or what is wrong around it while it is.
#[derive(Clone, Default)]
pub struct Readiness(Arc<Inner>);

#[derive(Default)]
struct Inner {
    ready: AtomicBool,
    detail: std::sync::Mutex<String>,
}

impl Readiness {
    /// Marks the process ready (or not).
    pub fn set(&self, ready: bool) {
        self.0.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether the process is ready.
    pub fn get(&self) -> bool {
        self.0.ready.load(Ordering::Relaxed)
    }

    /// Sets what `/readyz` says besides its verdict, one line per item (empty: nothing).
    pub fn set_detail(&self, detail: String) {
        *self.0.detail.lock().unwrap_or_else(|e| e.into_inner()) = detail;
    }

    /// What `/readyz` says besides its verdict.
    pub fn detail(&self) -> String {
        self.0
            .detail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
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

async fn readyz(State(s): State<AppState>) -> (StatusCode, String) {
    let (status, verdict) = if s.ready.get() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, s.not_ready)
    };
    let detail = s.ready.detail();
    if detail.is_empty() {
        (status, verdict.to_owned())
    } else {
        (status, format!("{verdict}\n{detail}"))
    }
}
