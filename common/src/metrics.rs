//! What the hub's and the agent's Prometheus metrics share: the label of counters broken
//! down by kind, and the text encoding `/metrics` serves.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::registry::Registry;

/// Label of counters broken down by outcome or error kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// Outcome or error category, e.g. `accepted`, `conflict`, `etcd`, `not_found`.
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

/// Every metric of `registry` in the OpenMetrics text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}
