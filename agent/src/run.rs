//! `accord-agent run`: wires the engine, the hub connection and the HTTP endpoint
//! together and runs until the shutdown signal.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use accord_common::pki::install_crypto_provider;
use accord_common::runtime::{KubeClientError, kube_client};
use tracing::info;

use crate::connection::{self, ConnectionConfig};
use crate::enforce::{self, kafka::KafkaOptions};
use crate::engine::{self, CoreConfig};
use crate::http::{self, Readiness};
use crate::identity::{IdentityError, IdentitySource};
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
    /// The Kafka connection Secret (in `namespace`) and resync interval.
    pub kafka: KafkaOptions,
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
}

/// Runs the agent until `shutdown` completes.
pub async fn run(config: RunConfig, shutdown: impl Future<Output = ()>) -> Result<(), RunError> {
    install_crypto_provider();
    let client = kube_client(config.kubeconfig.as_deref())
        .await
        .map_err(RunError::MemberClient)?;
    let identity = config.identity.load(&client).await?;
    info!(
        cluster = %identity.cluster,
        hub = %identity.hub_url,
        source = %config.identity,
        "starting the agent"
    );
    let metrics = Metrics::new();
    let ready = Readiness::default();
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .map_err(|source| RunError::Bind {
            addr: config.http_addr,
            source,
        })?;
    let http_task = http::serve(listener, metrics.clone(), ready.clone());

    let store = std::sync::Arc::new(ConfigMapStore::new(client.clone(), &config.namespace));
    let enforcers = enforce::enforcers_with(&client, &metrics, &config.namespace, &config.kafka);
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
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        },
        handle.clone(),
        metrics,
    );
    tokio::select! {
        () = shutdown => {
            info!("shutting down");
            Ok(())
        }
        result = http_task => Err(match result {
            Ok(()) => RunError::Stopped("HTTP server"),
            Err(e) => RunError::Serve(e),
        }),
        _ = engine.join() => Err(RunError::Stopped("engine")),
        () = connection => Err(RunError::Stopped("hub connection")),
        () = readiness => Err(RunError::Stopped("readiness")),
    }
}
