//! What the hub's and the agent's Prometheus metrics share: the label of counters broken
//! down by kind, and the text encoding `/metrics` serves.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;

// One label name per meaning, in both binaries: `kind` is an Accord kind, `category` what
// went wrong, `result` an outcome, `request` what was asked.

/// Label of counters by Accord kind (`kind="CrossClusterScalePolicy"`, …).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// The kind, as `PlacedKind` names it.
    pub kind: String,
}

impl KindLabel {
    /// The label `kind="<kind>"`.
    pub fn of(kind: &str) -> Self {
        Self {
            kind: kind.to_owned(),
        }
    }
}

/// Exemplar label of a latency histogram: the trace of the observed change
/// (`trace_id="<32 hex>"`), so a slow bucket leads to its trace.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TraceLabel {
    /// The 32-hex W3C trace id.
    pub trace_id: String,
}

/// A latency histogram whose buckets keep the trace of their latest observation.
pub type TracedHistogram = HistogramWithExemplars<TraceLabel>;

/// A [`TracedHistogram`] of seconds with exponential buckets from 1 ms to about 65 s, the
/// range of the stages a change passes through.
pub fn stage_histogram() -> TracedHistogram {
    HistogramWithExemplars::new(exponential_buckets(0.001, 2.0, 17))
}

/// Observes `seconds` in `histogram`, with the trace of `traceparent` as the exemplar when
/// there is one (tracing on).
pub fn observe_traced(histogram: &TracedHistogram, seconds: f64, traceparent: &str) {
    let trace_id = crate::telemetry::trace_id(traceparent);
    let exemplar = (!trace_id.is_empty()).then(|| TraceLabel {
        trace_id: trace_id.to_owned(),
    });
    histogram.observe(seconds, exemplar, None);
}

/// Label of error counters by category (`category="etcd"`, `category="not_found"`, …).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CategoryLabel {
    /// What went wrong, a short stable name.
    pub category: String,
}

impl CategoryLabel {
    /// The label `category="<category>"`.
    pub fn of(category: &str) -> Self {
        Self {
            category: category.to_owned(),
        }
    }
}

/// Label of outcome counters (`result="accepted"`, `result="ok"`, …).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// The outcome.
    pub result: String,
}

impl ResultLabel {
    /// The label `result="<result>"`.
    pub fn of(result: &str) -> Self {
        Self {
            result: result.to_owned(),
        }
    }
}

/// Label of request counters by what was asked (`request="create_topics"`, …).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    /// The request.
    pub request: String,
}

impl RequestLabel {
    /// The label `request="<request>"`.
    pub fn of(request: &str) -> Self {
        Self {
            request: request.to_owned(),
        }
    }
}

/// Every metric of `registry` in the OpenMetrics text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}
