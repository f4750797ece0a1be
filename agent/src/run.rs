//! `accord-agent run`: wires the engine, the hub connection and the HTTP endpoint
//! together and runs until the shutdown signal.
//!
//! Several replicas may run for one member cluster: each first waits for the agent Lease
//! ([`crate::lease`]). Until it holds it, a replica serves only its HTTP endpoint (ready,
//! `accord_agent_leader 0`): no hub stream, no watches, no writes. The holder runs the
//! engine and the hub connection, writing to its cluster only through a client fenced by
//! the Lease. If it cannot renew the Lease in time its writes stop (the API server is
//! likely down, and the hub stream stays); once another replica holds the Lease it stops
//! with an error, and its Deployment restarts it as a standby.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use accord_common::pki::install_crypto_provider;
use accord_common::runtime::{KubeClientError, kube_client};
use tracing::{error, info};

use crate::connection::{self, ConnectionConfig};
use crate::enforce::kafka::KafkaOptions;
use crate::enforce::{Enforcer, federated_resource, kafka_topic, kafka_user, promfed, scale};
use crate::engine::{self, CoreConfig};
use crate::http::{self, Readiness};
use crate::identity::{Identity, IdentityError, IdentitySource};
use crate::lease::{
    DEFAULT_LEASE_DURATION, DEFAULT_LEASE_NAME, Elector, Fence, LeaseConfig, LeaseLost,
    fenced_client, process_identity,
};
use crate::metrics::Metrics;
use crate::persist::ConfigMapStore;

/// Everything `run` needs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Kubeconfig of the member cluster (`$KUBECONFIG`, `~/.kube/config` or the in-cluster
    /// configuration when `None`).
    pub kubeconfig: Option<PathBuf>,
    /// Where the identity comes from.
    pub identity: IdentitySource,
    /// Address of `/metrics`, `/healthz`, `/readyz`.
    pub http_addr: SocketAddr,
    /// The agent's namespace (holds the ConfigMap of saved assignments).
    pub namespace: String,
    /// Interval between heartbeats.
    pub heartbeat_interval: Duration,
    /// Delay between a change and the report about it.
    pub report_debounce: Duration,
    /// Interval between two counts of the member's capacity ([`crate::capacity`]).
    pub capacity_interval: Duration,
    /// The Kafka connection Secret (in `namespace`) and resync interval.
    pub kafka: KafkaOptions,
    /// The Lease (in `namespace`) that decides which replica is active.
    pub lease: LeaseOptions,
}

/// Which Lease decides the active replica, and for how long it outlives its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseOptions {
    /// Name of the Lease in the agent's namespace.
    pub name: String,
    /// Lease duration (whole seconds).
    pub duration: Duration,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        Self {
            name: DEFAULT_LEASE_NAME.to_owned(),
            duration: DEFAULT_LEASE_DURATION,
        }
    }
}

/// Why the agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No client of the member cluster: the kubeconfig could not be read or loaded, none
    /// was found, or the client could not be built.
    #[error("connecting to the member cluster: {0}")]
    MemberClient(#[source] KubeClientError),
    /// The identity could not be read at start-up.
    #[error("reading the agent identity: {0}")]
    Identity(#[from] IdentityError),
    /// The HTTP address could not be bound.
    #[error("binding the HTTP address {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP server failed.
    #[error("serving HTTP: {0}")]
    Serve(#[source] std::io::Error),
    /// A task of the agent ended unexpectedly.
    #[error("the {0} stopped unexpectedly")]
    Stopped(&'static str),
    /// This replica was active and lost the agent Lease; it stopped applying at once and
    /// exits, to start again as a standby.
    #[error("lost the agent Lease, stopped applying: {0}")]
    LeaseLost(#[source] LeaseLost),
}

/// Runs the agent until `shutdown` completes: waits for the agent Lease, then runs the
/// engine and the hub connection for as long as it holds it.
pub async fn run(config: RunConfig, shutdown: impl Future<Output = ()>) -> Result<(), RunError> {
    install_crypto_provider();
    let client = kube_client(config.kubeconfig.as_deref())
        .await
        .map_err(RunError::MemberClient)?;
    // Read once up front so a broken identity fails at start, on the standby too.
    let identity = config.identity.load(&client).await?;
    // Traces (when on) say which cluster they come from: known from here.
    if let Err(e) = accord_common::telemetry::start(vec![(
        accord_common::telemetry::CLUSTER_ATTRIBUTE,
        identity.cluster.clone(),
    )]) {
        tracing::warn!(error = %e, "not exporting traces");
    }
    let metrics = Metrics::new();
    let ready = Readiness::default();
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .map_err(|source| RunError::Bind {
            addr: config.http_addr,
            source,
        })?;
    // The bound port, not the asked one: two processes asking for port 0 differ.
    let port = listener
        .local_addr()
        .map_or(config.http_addr.port(), |a| a.port());
    let lease = LeaseConfig {
        name: config.lease.name.clone(),
        namespace: config.namespace.clone(),
        identity: process_identity(port),
        duration: config.lease.duration,
    };
    info!(
        cluster = %identity.cluster,
        hub = %identity.hub_url,
        source = %config.identity,
        lease = %format!("{}/{}", lease.namespace, lease.name),
        holder_identity = %lease.identity,
        "starting the agent"
    );
    let http_task = http::serve(listener, metrics.clone(), ready.clone());
    tokio::pin!(http_task);
    tokio::pin!(shutdown);
    let http_error = |result: std::io::Result<()>| match result {
        Ok(()) => RunError::Stopped("HTTP server"),
        Err(e) => RunError::Serve(e),
    };

    let mut elector = Elector::new(client.clone(), lease);
    metrics.leader.set(0);
    // Standing by is this replica's job while another holds the Lease: ready.
    let standby_ready = ready.clone();
    tokio::select! {
        () = &mut shutdown => {
            info!("shutting down (standby)");
            return Ok(());
        }
        result = &mut http_task => return Err(http_error(result)),
        () = elector.acquire(|_| standby_ready.set(true)) => {}
    }
    metrics.leader.set(1);
    ready.set(false);
    // Everything the active replica does to its cluster goes through this client, which
    // refuses writes once the Lease may have passed to another replica.
    let fence = elector.fence();
    let fenced = fenced_client(&client, fence.clone());

    enum Ended {
        Shutdown,
        Failed(RunError),
    }
    let ended = tokio::select! {
        () = &mut shutdown => Ended::Shutdown,
        result = &mut http_task => Ended::Failed(http_error(result)),
        result = active(&config, fenced, fence, identity, metrics.clone(), ready.clone()) => Ended::Failed(result),
        lost = elector.hold() => {
            error!(error = %lost, "lost the agent Lease; stopping at once");
            Ended::Failed(RunError::LeaseLost(lost))
        }
    };
    // Everything the active replica ran is dropped by now (the engine aborts its task).
    metrics.leader.set(0);
    match ended {
        Ended::Shutdown => {
            info!("shutting down");
            // Hand over at once rather than after the lease duration.
            let _ = tokio::time::timeout(Duration::from_secs(2), elector.release()).await;
            Ok(())
        }
        Ended::Failed(e) => Err(e),
    }
}

/// The active replica's work: the engine, the hub connection, readiness once the saved
/// assignments are loaded. Runs until one of them ends, which is always an error.
async fn active(
    config: &RunConfig,
    client: kube::Client,
    fence: Fence,
    identity: Identity,
    metrics: Metrics,
    ready: Readiness,
) -> RunError {
    // The identity may have changed (renewed) while this replica stood by.
    let identity = match config.identity.load(&client).await {
        Ok(fresh) => fresh,
        Err(e) => {
            tracing::warn!(error = %e, "re-reading the identity failed; using the one read at start");
            identity
        }
    };
    let store = std::sync::Arc::new(ConfigMapStore::new(client.clone(), &config.namespace));
    let room = crate::capacity::SharedRoom::default();
    let enforcers = enforcers(&client, &metrics, &config.namespace, &config.kafka, &room);
    let engine = engine::start_with(
        CoreConfig {
            cluster: identity.cluster.clone(),
            report_debounce: config.report_debounce,
        },
        store,
        enforcers,
        metrics.clone(),
    );
    let handle = engine.handle().clone();
    let readiness = async {
        handle.wait_loaded().await;
        ready.set(true);
        std::future::pending::<()>().await;
    };
    let connection = connection::run(
        ConnectionConfig {
            identity: config.identity.clone(),
            initial_identity: identity,
            client,
            heartbeat_interval: config.heartbeat_interval,
            capacity_interval: config.capacity_interval,
            room,
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            fence,
        },
        handle.clone(),
        metrics,
    );
    tokio::select! {
        _ = engine.join() => RunError::Stopped("engine"),
        () = connection => RunError::Stopped("hub connection"),
        () = readiness => RunError::Stopped("readiness"),
    }
}

/// The enforcers of this agent version, one per kind it enforces: the one place a kind is
/// registered in the agent. `namespace` is the agent's own; Kafka topics and users share
/// the connection Secret and resync interval of `kafka` (one Kafka per member); the scale
/// enforcer estimates what fits from the capacity counter's `room`.
pub fn enforcers(
    client: &kube::Client,
    metrics: &Metrics,
    namespace: &str,
    kafka: &KafkaOptions,
    room: &crate::capacity::SharedRoom,
) -> Vec<Box<dyn Enforcer>> {
    vec![
        Box::new(scale::ScaleEnforcer::new(
            client.clone(),
            metrics.clone(),
            room.clone(),
        )),
        Box::new(promfed::PromfedEnforcer::new(
            client.clone(),
            namespace.to_owned(),
        )),
        Box::new(kafka_topic::KafkaTopicEnforcer::new(
            client.clone(),
            namespace.to_owned(),
            kafka.clone(),
            metrics.clone(),
        )),
        Box::new(kafka_user::KafkaUserEnforcer::new(
            client.clone(),
            namespace.to_owned(),
            kafka.clone(),
            metrics.clone(),
        )),
        Box::new(federated_resource::FederatedResourceEnforcer::new(
            client.clone(),
        )),
    ]
}
