//! `accord-hub serve`: wires the store, the PKI, the gRPC services, the leader-only
//! controllers and the HTTP endpoint together, and runs until interrupted.

use accord_proto::MAX_MESSAGE_BYTES;
use accord_proto::v1::federation_server::FederationServer;
use accord_proto::v1::registration_server::RegistrationServer;
use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::wrappers::TcpListenerStream;
use tracing::{info, warn};

use crate::connections::Connections;
use crate::grpc::federation::FederationService;
use crate::grpc::registration::RegistrationService;
use crate::grpc::{AgentSettings, Shared};
use crate::http::{self, Readiness};
use crate::metrics::Metrics;
use crate::pki::{self, DEFAULT_CA_SECRET_NAME as CA_SECRET_NAME, HubCa, install_crypto_provider};
use crate::scale::fanout::Fanout;
use crate::store::election::LeaderElection;
use crate::store::presence::ReplicaPresence;
use crate::store::{Keyspace, Store};

/// Everything `serve` needs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Kubeconfig of the management cluster (in-cluster config when `None`).
    pub kubeconfig: Option<PathBuf>,
    /// etcd client URLs.
    pub etcd_endpoints: Vec<String>,
    /// Key prefix in etcd.
    pub etcd_prefix: String,
    /// Address of the agent-facing gRPC server.
    pub grpc_addr: SocketAddr,
    /// Address of `/metrics`, `/healthz`, `/readyz`.
    pub http_addr: SocketAddr,
    /// Namespace of the hub on the management cluster (holds the CA Secret).
    pub namespace: String,
    /// Name of this replica.
    pub replica: String,
    /// Extra DNS names / IPs for the serving certificate.
    pub tls_sans: Vec<String>,
    /// Agent settings.
    pub agents: AgentSettings,
    /// TTL of the leader election lease: a crashed leader is replaced within it.
    pub election_ttl: Duration,
    /// TTL of this replica's presence lease: a crashed replica's agents count as
    /// disconnected within it.
    pub presence_ttl: Duration,
}

/// A kube client from a kubeconfig file, or the in-cluster / default configuration.
pub async fn kube_client(kubeconfig: Option<&PathBuf>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig given and none found")?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// Runs the hub until Ctrl-C / SIGTERM.
pub async fn serve(cfg: ServeConfig) -> anyhow::Result<()> {
    install_crypto_provider();
    let kube = kube_client(cfg.kubeconfig.as_ref()).await?;
    let store = Store::connect(&cfg.etcd_endpoints, Keyspace::new(&cfg.etcd_prefix))
        .await
        .with_context(|| format!("connecting to etcd at {}", cfg.etcd_endpoints.join(",")))?;
    let ca = HubCa::load_or_create(kube.clone(), &cfg.namespace, CA_SECRET_NAME)
        .await
        .context("loading the hub CA")?;
    let mut sans = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    sans.push(format!("accord-hub.{}.svc", cfg.namespace));
    for san in &cfg.tls_sans {
        if !sans.contains(san) {
            sans.push(san.clone());
        }
    }
    let serving = ca
        .issue_server_cert(&sans, Duration::from_secs(365 * 24 * 3600))
        .context("issuing the serving certificate")?;

    let metrics = Metrics::new();
    let ready = Readiness::default();
    let presence = Arc::new(
        ReplicaPresence::start(store.clone(), cfg.replica.clone(), cfg.presence_ttl).await?,
    );
    let election = Arc::new(
        LeaderElection::start(store.clone(), cfg.replica.clone(), cfg.election_ttl).await?,
    );
    let connections = Connections::default();
    let fanout = Fanout::start(store.clone(), connections.clone()).await?;
    let shared = Shared {
        store: store.clone(),
        ca: ca.clone(),
        kube: kube.clone(),
        presence,
        connections,
        metrics: metrics.clone(),
        settings: cfg.agents.clone(),
        fanout: fanout.clone(),
    };

    tokio::spawn(close_silent_streams(shared.clone()));
    tokio::spawn(crate::cluster_status::run(
        store.clone(),
        kube.clone(),
        election.clone(),
        metrics.clone(),
    ));
    tokio::spawn(crate::scale::controller::run(
        store.clone(),
        kube.clone(),
        election.clone(),
        fanout.cache().clone(),
        metrics.clone(),
        cfg.replica.clone(),
    ));

    let http_listener = http::bind(cfg.http_addr)
        .await
        .with_context(|| format!("binding the HTTP address {}", cfg.http_addr))?;
    tokio::spawn(http::serve(http_listener, metrics.clone(), ready.clone()));

    let grpc_listener = tokio::net::TcpListener::bind(cfg.grpc_addr)
        .await
        .with_context(|| format!("binding the gRPC address {}", cfg.grpc_addr))?;
    info!(
        grpc = %grpc_listener.local_addr()?, http = %cfg.http_addr, replica = %cfg.replica,
        ca_cert_hash = %ca.ca_cert_hash(), "accord-hub serving"
    );
    let (stopping_tx, mut stopping) = tokio::sync::watch::channel(false);
    ready.set(true);
    tokio::spawn(follow_store(store.clone(), ready.clone(), stopping.clone()));
    // On SIGTERM: stop taking traffic, hand leadership over, and end every agent stream
    // with UNAVAILABLE so its agent reconnects to another replica at once (an open stream
    // would otherwise hold the graceful shutdown until the process is killed).
    let shutdown = {
        let (ready, election, connections) =
            (ready.clone(), election.clone(), shared.connections.clone());
        async move {
            shutdown_signal().await;
            let _ = stopping_tx.send(true);
            ready.set(false);
            election.resign().await;
            let streams = connections.all();
            info!(
                streams = streams.len(),
                "shutting down: closing agent streams"
            );
            for (_, conn) in streams {
                let _ = conn.outbox.try_send(Err(tonic::Status::unavailable(
                    "this hub replica is shutting down; reconnect",
                )));
            }
        }
    };
    let server = tonic::transport::Server::builder()
        .tls_config(pki::server_tls_config(&ca, &serving))?
        .http2_keepalive_interval(Some(Duration::from_secs(10)))
        .http2_keepalive_timeout(Some(Duration::from_secs(5)))
        .add_service(RegistrationServer::new(RegistrationService::new(
            shared.clone(),
        )))
        .add_service(
            FederationServer::new(FederationService::new(shared.clone()))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
        .serve_with_incoming_shutdown(TcpListenerStream::new(grpc_listener), shutdown);
    // Connections whose clients keep them open after their streams ended get a grace
    // period, not a veto over the shutdown.
    let grace = async {
        let _ = stopping.wait_for(|stopping| *stopping).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        result = server => result?,
        () = grace => warn!(
            grace = ?SHUTDOWN_GRACE,
            "connections still open after the shutdown grace period; exiting"
        ),
    }
    Ok(())
}

/// How often readiness asks etcd whether it answers.
const STORE_PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// `/readyz` follows etcd: a replica that cannot reach its store stops counting as ready
/// (so a Service sends new agents elsewhere) and counts again once etcd answers. Ends when
/// the replica starts stopping.
async fn follow_store(
    store: Store,
    ready: Readiness,
    stopping: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(STORE_PROBE_INTERVAL);
    loop {
        tick.tick().await;
        if *stopping.borrow() {
            return;
        }
        let answered = tokio::time::timeout(STORE_PROBE_INTERVAL, store.ping())
            .await
            .is_ok_and(|r| r.is_ok());
        if *stopping.borrow() {
            return;
        }
        if answered != ready.get() {
            if answered {
                info!("etcd answers again; ready");
            } else {
                warn!("etcd does not answer; not ready");
            }
        }
        ready.set(answered);
    }
}

/// How long a stopping replica waits for clients to close their connections.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Closes streams whose agent went silent past the heartbeat timeout and records them as
/// disconnected.
async fn close_silent_streams(shared: Shared) {
    let period = (shared.settings.heartbeat_interval / 4).max(Duration::from_millis(100));
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        for (cluster, id) in shared.connections.silent(shared.settings.heartbeat_timeout) {
            if let Some(conn) = shared.connections.get(&cluster) {
                let _ = conn
                    .outbox
                    .try_send(Err(tonic::Status::deadline_exceeded(format!(
                        "no heartbeat for {:?}",
                        shared.settings.heartbeat_timeout
                    ))));
            }
            if shared.connections.close(&cluster, id) {
                warn!(
                    cluster,
                    "agent silent past the heartbeat timeout; stream closed"
                );
                if let Err(e) = shared.presence.mark_disconnected(&cluster).await {
                    shared.metrics.error(e.kind());
                }
            }
        }
        shared
            .metrics
            .connected_agents
            .set(shared.connections.len() as i64);
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    info!("shutting down");
}
