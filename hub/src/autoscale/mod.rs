//! Metric-driven autoscaling of CrossClusterScalePolicy: the pure decision ([`engine`]),
//! the metric's history window ([`window`]) and the Prometheus query ([`query`]). The
//! leader's runner lives in [`crate::controllers::autoscale`]; the scale controller divides
//! the count it decides.

pub mod engine;
pub mod query;
pub mod window;
