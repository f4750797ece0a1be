//! `accord-hub serve`: wires the store, the PKI, the gRPC services, the leader-only
//! controllers and the HTTP endpoint together, and runs them under one [`Supervisor`]
//! until interrupted or until one of them ends.

use accord_common::runtime::{kube_config, shutdown_signal};
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
use crate::controllers::{ControllerDeps, ControllerOptions};
use crate::distribution::Fanout;
use crate::distribution::secrets::Secrets;
use crate::grpc::registration::RegistrationService;
use crate::grpc::sync::SyncService;
use crate::grpc::{AgentFacing, AgentSettings};
use crate::http::{self, Readiness, ReadinessGates};
use crate::metrics::Metrics;
use crate::pki::{self, DEFAULT_CA_SECRET_NAME as CA_SECRET_NAME, HubCa, install_crypto_provider};
use crate::store::cache::PrefixCache;
use crate::store::election::LeaderElection;
use crate::store::presence::{RECONNECT_GRACE, ReplicaPresence};
use crate::store::{Keyspace, Store};
use crate::supervisor::Supervisor;
use crate::writes::counted_client;

/// Everything `serve` needs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Kubeconfig of the management cluster (in-cluster config when `None`).
    pub kubeconfig: Option<PathBuf>,
    /// etcd client URLs, TLS and credentials.
    pub etcd: crate::store::EtcdConnection,
    /// Key prefix in etcd.
    pub etcd_prefix: String,
    /// Address of the agent-facing gRPC server.
    pub grpc_addr: SocketAddr,
    /// Address of `/metrics`, `/healthz`, `/readyz`.
    pub http_addr: SocketAddr,
    /// Address of the admission webhook (HTTPS).
    pub webhook_addr: SocketAddr,
    /// Namespace of the hub on the management cluster (holds the CA Secret).
    pub namespace: String,
    /// Name of this replica.
    pub replica: String,
    /// Extra DNS names / IPs for the serving certificate.
    pub tls_sans: Vec<String>,
    /// Agent settings.
    pub agents: AgentSettings,
    /// Each kind's own settings.
    pub kinds: crate::kinds::KindOptions,
    /// TTL of the leader election lease: a crashed leader is replaced within it.
    pub election_ttl: Duration,
    /// TTL of this replica's presence lease: a crashed replica's agents count as
    /// disconnected within it.
    pub presence_ttl: Duration,
    /// The controllers' settings (each kind's own among them).
    pub controllers: ControllerOptions,
    /// The fleet console (off without an address).
    pub console: crate::console::ConsoleOptions,
}

/// Runs the hub until Ctrl-C / SIGTERM, or until one of its tasks ends — then it gives up
/// leadership and returns the error, so the process exits non-zero and is restarted.
pub async fn serve(cfg: ServeConfig) -> anyhow::Result<()> {
    install_crypto_provider();
    let metrics = Metrics::new();
    let kube = counted_client(kube_config(cfg.kubeconfig.as_deref()).await?, &metrics)?;
    let store = Store::connect_with(&cfg.etcd, Keyspace::new(&cfg.etcd_prefix)).await?;
    tokio::select! {
        () = store.wait_until_answering() => {}
        () = shutdown_signal() => return Ok(()),
    }
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

    let ready = Readiness::default();
    let gates = ReadinessGates::new(ready.clone());
    let presence = Arc::new(
        ReplicaPresence::start(store.clone(), cfg.replica.clone(), cfg.presence_ttl).await?,
    );
    let election = Arc::new(
        LeaderElection::start(store.clone(), cfg.replica.clone(), cfg.election_ttl).await?,
    );
    let connections = Connections::default();
    let views = crate::placements::Views::default();
    // The Secrets FederatedResources deliver: every replica adds their data to the
    // assignments it sends; the leader's decisions record only their hashes.
    let (secrets, follow_secrets) = Secrets::start(kube.clone(), crate::kinds::ENCLOSERS);
    let fanout = Fanout::start(store.clone(), secrets.clone()).await?;
    let registry = PrefixCache::start(store.clone(), store.keys().clusters_prefix())
        .await
        .context("following the cluster registry")?;
    let agents = AgentFacing {
        store: store.clone(),
        ca: ca.clone(),
        kube: kube.clone(),
        presence,
        connections: connections.clone(),
        metrics: metrics.clone(),
        settings: cfg.agents.clone(),
        fanout: fanout.clone(),
        registry,
    };

    let http_listener = http::bind(cfg.http_addr)
        .await
        .with_context(|| format!("binding the HTTP address {}", cfg.http_addr))?;
    let grpc_listener = tokio::net::TcpListener::bind(cfg.grpc_addr)
        .await
        .with_context(|| format!("binding the gRPC address {}", cfg.grpc_addr))?;
    let webhook_listener = crate::webhook::bind(cfg.webhook_addr)
        .await
        .with_context(|| format!("binding the webhook address {}", cfg.webhook_addr))?;
    let console_listener = match cfg.console.addr {
        Some(addr) => Some(
            crate::console::bind(addr)
                .await
                .with_context(|| format!("binding the console address {addr}"))?,
        ),
        None => None,
    };
    if let Some(listener) = &console_listener {
        info!(console = %listener.local_addr()?, "serving the fleet console");
    }
    info!(
        webhook = %webhook_listener.local_addr()?,
        grpc = %grpc_listener.local_addr()?, http = %cfg.http_addr, replica = %cfg.replica,
        ca_cert_hash = %ca.ca_cert_hash(), "accord-hub serving"
    );

    let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
    let mut tasks = Supervisor::new();
    tasks.spawn_forever(
        "placements fan-out",
        fanout
            .clone()
            .run(connections.clone(), metrics.change.clone()),
    );
    tasks.spawn_forever("Secrets watch", follow_secrets);
    tasks.spawn_forever("silent-stream closer", close_silent_streams(agents.clone()));
    let revoker = crate::revocation::Revoker::new(agents.clone());
    tasks.spawn_forever("revocation", revoker.run());
    tasks.spawn(
        "controllers",
        crate::controllers::run_with(
            ControllerDeps {
                kube: kube.clone(),
                store: store.clone(),
                election: election.clone(),
                connections: connections.clone(),
                metrics: metrics.clone(),
                placements: fanout.cache().clone(),
                replica: cfg.replica.clone(),
                gates: gates.clone(),
                namespace: cfg.namespace.clone(),
                views: views.clone(),
                secrets,
                kinds: crate::kinds::registered(&cfg.kinds),
            },
            cfg.controllers.clone(),
        ),
    );
    tasks.spawn(
        "HTTP endpoint",
        http::serve(http_listener, metrics.clone(), ready.clone(), views.clone()),
    );
    if let Some(listener) = console_listener {
        tasks.spawn(
            "console",
            crate::console::serve(listener, kube.clone(), metrics.clone(), cfg.console.clone()),
        );
    }
    tasks.spawn(
        "admission webhook",
        crate::webhook::run(
            crate::webhook::WebhookDeps {
                kube: kube.clone(),
                ca_pem: ca.cert_pem().to_owned(),
                serving: serving.clone(),
                replica: cfg.replica.clone(),
                gates: gates.clone(),
            },
            crate::kinds::admissions(
                kube.clone(),
                crate::webhook::recorder(kube.clone(), &cfg.replica),
            ),
            webhook_listener,
        ),
    );
    tasks.spawn_forever(
        "etcd readiness probe",
        follow_store(store.clone(), gates.clone()),
    );
    tasks.spawn_forever("etcd member probe", store.clone().follow_members());
    let server = {
        let mut stopping = stopping.clone();
        tonic::transport::Server::builder()
            .tls_config(pki::server_tls_config(&ca, &serving))?
            .http2_keepalive_interval(Some(Duration::from_secs(10)))
            .http2_keepalive_timeout(Some(Duration::from_secs(5)))
            .add_service(RegistrationServer::new(RegistrationService::new(
                agents.clone(),
            )))
            .add_service(
                FederationServer::new(SyncService::new(agents.clone()))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            .serve_with_incoming_shutdown(TcpListenerStream::new(grpc_listener), async move {
                let _ = stopping.wait_for(|stopping| *stopping).await;
            })
    };
    tasks.spawn(GRPC_SERVER, server);
    gates.set_serving(true);

    // On SIGTERM, or when a task ends: stop taking traffic, hand leadership over, hand the
    // agents' presence over for a reconnect grace (so a rolling restart moves no share), and
    // end every agent stream with UNAVAILABLE so its agent reconnects to another replica at
    // once (an open stream would otherwise hold the graceful shutdown until the process is
    // killed).
    let presence = agents.presence.clone();
    let result = tasks
        .run_until(
            async {
                shutdown_signal().await;
                info!("shutting down");
            },
            async |_| {
                gates.stop();
                let _ = stopping_tx.send(true);
                election.resign().await;
                hand_over(&presence).await;
                let streams = connections.all();
                info!(streams = streams.len(), "stopping: closing agent streams");
                for (_, conn) in streams {
                    let _ = conn.outbox.try_send(Err(tonic::Status::unavailable(
                        "this hub replica is shutting down; reconnect",
                    )));
                }
            },
        )
        .await;
    if let Err(failure) = result {
        return Err(failure.into());
    }
    // Connections whose clients keep them open after their streams ended get a grace
    // period, not a veto over the shutdown.
    if !tasks.wait_for(GRPC_SERVER, SHUTDOWN_GRACE).await {
        warn!(
            grace = ?SHUTDOWN_GRACE,
            "connections still open after the shutdown grace period; exiting"
        );
    }
    Ok(())
}

/// Longest a stopping replica waits for etcd to take its clusters' handover.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(2);

/// Moves this replica's `connected/` keys onto a reconnect grace before its streams end.
/// Bounded: with etcd unreachable the keys simply expire with the replica's lease.
async fn hand_over(presence: &ReplicaPresence) {
    match tokio::time::timeout(HANDOVER_TIMEOUT, presence.hand_over(RECONNECT_GRACE)).await {
        Ok(Ok(handed)) => info!(
            clusters = handed, grace = ?RECONNECT_GRACE,
            "stopping: clusters stay connected for their agents to reconnect elsewhere"
        ),
        Ok(Err(e)) => warn!(
            error = %crate::store::error_chain(&e),
            "stopping: could not hand the connected clusters over; they expire with this replica's lease"
        ),
        Err(_) => warn!(
            timeout = ?HANDOVER_TIMEOUT,
            "stopping: etcd did not take the handover in time; connected clusters expire with this replica's lease"
        ),
    }
}

/// Name of the gRPC server task, which is waited for on shutdown.
const GRPC_SERVER: &str = "gRPC server";

/// How often readiness asks etcd whether it answers.
const STORE_PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// `/readyz` follows etcd: a replica that cannot reach its store stops counting as ready
/// (so a Service sends new agents elsewhere) and counts again once etcd answers.
async fn follow_store(store: Store, gates: ReadinessGates) {
    let mut tick = tokio::time::interval(STORE_PROBE_INTERVAL);
    loop {
        tick.tick().await;
        let answered = tokio::time::timeout(STORE_PROBE_INTERVAL, store.ping())
            .await
            .is_ok_and(|r| r.is_ok());
        if answered != gates.store_answers() {
            if answered {
                info!("etcd answers; ready as far as the store goes");
            } else {
                warn!("etcd does not answer; not ready");
            }
        }
        gates.set_store_answers(answered);
    }
}

/// How long a stopping replica waits for clients to close their connections.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Closes streams whose agent went silent past the heartbeat timeout and records them as
/// disconnected; also samples the runtime's task count for `accord_hub_runtime_tasks`.
async fn close_silent_streams(shared: AgentFacing) {
    let period = (shared.settings.heartbeat_interval / 4).max(Duration::from_millis(100));
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        for (cluster, id) in shared.connections.silent(shared.settings.heartbeat_timeout) {
            // Ended through the session (which stops reading and sends the status when the
            // agent reads again), not by a message into its outbox: a full outbox (an agent
            // that stopped reading) would drop that message and leave the session serving
            // a stream the hub no longer counts as connected.
            if let Some(conn) = shared.connections.get(&cluster) {
                conn.end(tonic::Status::deadline_exceeded(format!(
                    "no heartbeat for {:?}",
                    shared.settings.heartbeat_timeout
                )));
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
        shared.metrics.runtime_tasks.set(
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks() as i64,
        );
    }
}
