//! The hub's gRPC services: `Registration` (join with a bootstrap token) and `Federation`
//! (the one mTLS stream per agent), and the state they share.

pub mod federation;
pub mod registration;
pub mod renewal;

use std::sync::Arc;
use std::time::Duration;

use crate::connections::Connections;
use crate::distribution::Fanout;
use crate::metrics::Metrics;
use crate::pki::HubCa;
use crate::store::Store;
use crate::store::presence::ReplicaPresence;

/// Settings of the agent-facing services.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// Name of this hub replica, recorded in `connected/<cluster>`.
    pub replica: String,
    /// How often agents heartbeat.
    pub heartbeat_interval: Duration,
    /// Silence after which an agent counts as gone and its stream is closed.
    pub heartbeat_timeout: Duration,
    /// Validity of agent client certificates.
    pub cert_validity: Duration,
}

/// What the agent-facing services (and the stream sweeper) work with: the store, the CA,
/// this replica's streams and presence, and the placements they fan out.
#[derive(Clone)]
pub struct AgentFacing {
    /// etcd state.
    pub store: Store,
    /// Hub CA, which signs agent certificates.
    pub ca: HubCa,
    /// Management cluster client.
    pub kube: kube::Client,
    /// This replica's presence lease.
    pub presence: Arc<ReplicaPresence>,
    /// Streams held by this replica.
    pub connections: Connections,
    /// Metrics.
    pub metrics: Metrics,
    /// Settings.
    pub settings: AgentSettings,
    /// Placements and their fan-out to streams.
    pub fanout: Fanout,
}
