//! What the hub's and the agent's Prometheus metrics share: the label of counters broken
//! down by kind, and the text encoding `/metrics` serves.

use prometheus_client::encoding::EncodeLabelSet;
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
