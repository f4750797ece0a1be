//! The hub's write budget on the management cluster's API server: every write counted
//! ([`counter`]), Events recorded without losing distinct decisions and with repeats
//! coalesced ([`events`]), and status written at most once per object per window
//! ([`status`]).
//!
//! Wiring: build the management client with [`counted_client`], then one [`Writes`] from
//! it, shared by every controller (it is cheap to clone).

pub mod counter;
pub mod events;
pub mod status;

use std::time::Duration;

pub use counter::{CountWritesLayer, KubeWrite, counted_client};
pub use events::{EventRecorder, EventType, Reporter};
pub use status::{Pace, StatusWriter, merge_patch};

use crate::metrics::Metrics;

/// The Event recorder and the status writer, built from one client.
#[derive(Clone)]
pub struct Writes {
    /// Publishes Kubernetes Events.
    pub events: EventRecorder,
    /// Writes status subresources, coalesced per object.
    pub status: StatusWriter,
}

impl Writes {
    /// Both writers on `client`, with their default intervals (repeats of an Event at most
    /// once per [`events::DEFAULT_REPEAT_INTERVAL`] per object; status at most once per
    /// [`status::DEFAULT_WINDOW`] per object, progress once per
    /// [`status::DEFAULT_PROGRESS_INTERVAL`]). Must be called within a Tokio runtime.
    pub fn new(client: kube::Client, reporter: Reporter, metrics: &Metrics) -> Self {
        Self::with_intervals(
            client,
            reporter,
            metrics,
            events::DEFAULT_REPEAT_INTERVAL,
            status::DEFAULT_WINDOW,
            status::DEFAULT_PROGRESS_INTERVAL,
        )
    }

    /// Both writers on `client`, with the given repeat interval for Events, and coalescing
    /// window and progress interval for status.
    pub fn with_intervals(
        client: kube::Client,
        reporter: Reporter,
        metrics: &Metrics,
        repeat_interval: Duration,
        status_window: Duration,
        status_progress_interval: Duration,
    ) -> Self {
        Self {
            events: EventRecorder::new(client.clone(), reporter)
                .with_repeat_interval(repeat_interval),
            status: StatusWriter::new(
                client,
                status_window,
                status_progress_interval,
                metrics.clone(),
            ),
        }
    }
}

/// A fake API server for tests of the writers and the controllers (shared with the hub's
/// integration tests).
#[cfg(test)]
#[path = "../../tests/fake_api/mod.rs"]
pub(crate) mod fake;
