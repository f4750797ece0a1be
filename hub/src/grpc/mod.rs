//! The hub's gRPC services: `Registration` (join with a bootstrap token) and Sync
//! (`Federation.Sync` on the wire: the one mTLS stream per agent), and the state they share.

pub mod registration;
pub mod renewal;
pub mod sync;

use std::sync::Arc;
use std::time::Duration;

use crate::connections::Connections;
use crate::distribution::Fanout;
use crate::metrics::Metrics;
use crate::pki::HubCa;
use crate::store::Store;
use crate::store::cache::PrefixCache;
use crate::store::presence::ReplicaPresence;
use crate::store::registry::ClusterRecord;

/// Reads the verified client certificate of a request (TLS has checked it against the hub
/// CA already) with `read`; no certificate, or one `read` refuses, is `UNAUTHENTICATED`.
pub(crate) fn read_client_certificate<T, R, E: std::fmt::Display>(
    request: &tonic::Request<T>,
    read: impl FnOnce(&[u8]) -> Result<R, E>,
) -> Result<R, tonic::Status> {
    let certs = request.peer_certs().ok_or_else(|| {
        tonic::Status::unauthenticated("a client certificate is required; join the cluster first")
    })?;
    let leaf = certs
        .first()
        .ok_or_else(|| tonic::Status::unauthenticated("empty client chain"))?;
    read(leaf.as_ref())
        .map_err(|e| tonic::Status::unauthenticated(format!("client certificate: {e}")))
}

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
    /// The cluster registry as watched: a stream whose certificate it accepts opens without
    /// a read from etcd (one that it does not accept is decided by etcd).
    pub registry: PrefixCache<ClusterRecord>,
}
