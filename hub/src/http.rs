//! The hub's HTTP endpoint: `/metrics`, `/healthz`, `/readyz`, `/placements/...` (the
//! leader's full per-cluster views, [`crate::placements`]) — `/readyz` is ready while etcd answers
//! and, on the leader, once every controller has listed what it watches; not ready again
//! from SIGTERM (or a failed task) on. Its body says why it is not ready (one line per closed
//! gate) and what is wrong around a ready replica that it cannot mend itself (warnings, such
//! as a CRD whose conversion webhook does not trust the hub CA): those never make it
//! unready, since taking the replica out of its Service would only make them worse.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub use accord_common::http::Readiness;

use crate::metrics::Metrics;

/// Serves the HTTP endpoint on `listener` until the task is dropped, with the leader's
/// placements views at `/placements/<kind>/<namespace>/<name>`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    ready: Readiness,
    views: crate::placements::Views,
) -> std::io::Result<()> {
    accord_common::http::serve(
        listener,
        move || metrics.encode(),
        ready,
        "not ready",
        views.router(),
    )
    .await
}

/// Binds the HTTP address, so that a port conflict fails start-up with a clear error.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// The conditions `/readyz` combines; each holder sets its own, and [`Readiness`] follows
/// their conjunction.
#[derive(Clone, Default)]
pub struct ReadinessGates {
    ready: Readiness,
    gates: Arc<Gates>,
}

#[derive(Debug, Default)]
struct Gates {
    serving: AtomicBool,
    store_answers: AtomicBool,
    controllers_waiting: AtomicBool,
    stopping: AtomicBool,
    /// Warnings by subject, shown by `/readyz` without changing its verdict.
    warnings: std::sync::Mutex<std::collections::BTreeMap<String, String>>,
}

impl ReadinessGates {
    /// Gates feeding `ready`; not ready until [`ReadinessGates::set_serving`] and
    /// [`ReadinessGates::set_store_answers`] say so.
    pub fn new(ready: Readiness) -> Self {
        let gates = Self {
            ready,
            gates: Arc::default(),
        };
        gates.update();
        gates
    }

    /// The gRPC server listens.
    pub fn set_serving(&self, on: bool) {
        self.gates.serving.store(on, Ordering::SeqCst);
        self.update();
    }

    /// etcd answers (or not).
    pub fn set_store_answers(&self, on: bool) {
        self.gates.store_answers.store(on, Ordering::SeqCst);
        self.update();
    }

    /// Whether etcd answered at the last probe.
    pub fn store_answers(&self) -> bool {
        self.gates.store_answers.load(Ordering::SeqCst)
    }

    /// Every running controller has listed its objects (true, too, when none runs).
    pub fn set_controllers_listed(&self, on: bool) {
        self.gates.controllers_waiting.store(!on, Ordering::SeqCst);
        self.update();
    }

    /// The replica is stopping: never ready again.
    pub fn stop(&self) {
        self.gates.stopping.store(true, Ordering::SeqCst);
        self.update();
    }

    /// Sets (`Some`) or clears (`None`) the warning about `subject` that `/readyz` shows.
    pub fn set_warning(&self, subject: &str, warning: Option<String>) {
        {
            let mut warnings = self
                .gates
                .warnings
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            match warning {
                Some(w) => warnings.insert(subject.to_owned(), w),
                None => warnings.remove(subject),
            };
        }
        self.update();
    }

    fn update(&self) {
        let g = &self.gates;
        let closed = [
            (
                !g.serving.load(Ordering::SeqCst),
                "the gRPC server is not listening yet",
            ),
            (
                !g.store_answers.load(Ordering::SeqCst),
                "etcd does not answer",
            ),
            (
                g.controllers_waiting.load(Ordering::SeqCst),
                "the controllers have not listed their objects yet",
            ),
            (g.stopping.load(Ordering::SeqCst), "stopping"),
        ];
        let mut detail: Vec<String> = closed
            .iter()
            .filter(|(closed, _)| *closed)
            .map(|(_, why)| format!("not ready: {why}"))
            .collect();
        let warnings = g.warnings.lock().unwrap_or_else(|e| e.into_inner());
        detail.extend(
            warnings
                .iter()
                .map(|(subject, w)| format!("warning: {subject}: {w}")),
        );
        drop(warnings);
        self.ready.set_detail(detail.join("\n"));
        self.ready.set(closed.iter().all(|(closed, _)| !closed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_while_every_gate_is_open_and_never_after_stop() {
        let ready = Readiness::default();
        let gates = ReadinessGates::new(ready.clone());
        assert!(!ready.get());
        gates.set_serving(true);
        gates.set_store_answers(true);
        assert!(ready.get());
        gates.set_controllers_listed(false);
        assert!(!ready.get(), "a controller that has not listed yet");
        gates.set_controllers_listed(true);
        assert!(ready.get());
        gates.set_store_answers(false);
        assert!(!ready.get());
        gates.set_store_answers(true);
        gates.stop();
        assert!(!ready.get());
        gates.set_controllers_listed(true);
        assert!(!ready.get(), "stopping is final");
    }

    #[test]
    fn the_detail_names_every_closed_gate_and_warnings_leave_the_verdict_alone() {
        let ready = Readiness::default();
        let gates = ReadinessGates::new(ready.clone());
        assert_eq!(
            ready.detail(),
            "not ready: the gRPC server is not listening yet\nnot ready: etcd does not answer"
        );
        gates.set_serving(true);
        gates.set_store_answers(true);
        assert_eq!(ready.detail(), "");
        gates.set_warning("CustomResourceDefinition a", Some("no CA".into()));
        assert!(ready.get(), "a warning never makes the replica unready");
        assert_eq!(ready.detail(), "warning: CustomResourceDefinition a: no CA");
        gates.set_warning("CustomResourceDefinition a", None);
        assert_eq!(ready.detail(), "");
    }
}
