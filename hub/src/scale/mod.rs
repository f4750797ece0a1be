//! CrossClusterScalePolicy: placements records in etcd, their fan-out to agents, the pure
//! planning and status aggregation, and the leader's controller.

pub mod controller;
pub mod fanout;
pub mod plan;
pub mod record;
