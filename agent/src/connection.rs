//! The one Sync stream to the hub: connect over mTLS, say Hello, heartbeat, pass the hub's
//! messages to the engine, and reconnect with exponential backoff and jitter when the
//! stream ends. The client certificate is renewed over the stream ([`crate::renewal`]);
//! a renewed one ends the stream, and the next one is opened with it at once. For as long
//! as it runs it also probes the member's API server ([`crate::probe`]) and hands the
//! results to the engine, which tells the hub.

use std::time::Duration;

use accord_common::pki::{CertValidity, cert_facts_pem};
use accord_common::runtime::{Retry, backoff, unix_millis};
use accord_proto::MAX_MESSAGE_BYTES;
use accord_proto::v1::federation_client::FederationClient;
use accord_proto::v1::{AgentMessage, Heartbeat, Hello, HubMessage, agent_message, hub_message};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use crate::lease::Fence;
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};
use tonic::transport::{Channel, Endpoint};
use tracing::{debug, info, warn};

use crate::engine::EngineHandle;
use crate::identity::{Identity, IdentityError, IdentitySource};
use crate::metrics::Metrics;
use crate::renewal::{Renewal, RenewalError};

/// Shortest wait before reconnecting.
pub const MIN_RECONNECT_DELAY: Duration = Duration::from_millis(100);
/// Longest wait before reconnecting.
pub const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(5);
/// A stream that stayed up this long was healthy: the next reconnect starts from the
/// shortest delay again.
pub const HEALTHY_AFTER: Duration = Duration::from_secs(10);
/// How long dialling the hub (TCP and TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 keep-alive: how often to ping a silent hub, and how long to wait for the answer.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a connection attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The identity could not be read.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The hub URL or TLS material was refused by the transport.
    #[error("configuring the channel to {url}: {source}")]
    Configure {
        /// The hub URL.
        url: String,
        /// The transport error.
        #[source]
        source: tonic::transport::Error,
    },
    /// Dialling the hub failed (network, TLS handshake).
    #[error("connecting to the hub at {url}: {source}")]
    Dial {
        /// The hub URL.
        url: String,
        /// The transport error.
        #[source]
        source: tonic::transport::Error,
    },
    /// The hub refused the stream.
    #[error("the hub refused the stream: {0}")]
    Refused(#[source] tonic::Status),
    /// The open stream failed.
    #[error("the stream to the hub failed: {0}")]
    Broken(#[source] tonic::Status),
}

impl ConnectError {
    /// The metric label of the error.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Identity(_) => "identity",
            Self::Configure { .. } => "tls_config",
            Self::Dial { .. } => "dial",
            Self::Refused(_) => "refused",
            Self::Broken(_) => "stream",
        }
    }
}

/// What the connection needs.
#[derive(Clone)]
pub struct ConnectionConfig {
    /// Where the identity comes from (read before every attempt).
    pub identity: IdentitySource,
    /// The identity read at start-up, used when re-reading fails.
    pub initial_identity: Identity,
    /// Client of the member cluster (for the identity Secret and `/version`).
    pub client: kube::Client,
    /// Interval between heartbeats.
    pub heartbeat_interval: Duration,
    /// Interval between two counts of the member's capacity.
    pub capacity_interval: Duration,
    /// Where each count's room node by node goes, for the scale enforcer's estimates.
    pub room: crate::capacity::SharedRoom,
    /// Agent version for Hello.
    pub agent_version: String,
    /// The agent Lease's write fence: no new stream is opened while it is closed (this
    /// replica could not renew the Lease, and a standby may be taking over).
    pub fence: Fence,
}

/// How often a replica whose Lease renewal is overdue looks whether it may reconnect.
const FENCE_POLL: Duration = Duration::from_millis(100);

fn reconnect_backoff() -> Retry {
    backoff(MIN_RECONNECT_DELAY, MAX_RECONNECT_DELAY)
}

/// An mTLS channel to the hub named by `identity`.
pub async fn dial(identity: &Identity) -> Result<Channel, ConnectError> {
    let url = identity.hub_url.clone();
    let endpoint = Endpoint::from_shared(url.clone())
        .and_then(|e| e.tls_config(identity.client_tls_config()))
        .map_err(|source| ConnectError::Configure {
            url: url.clone(),
            source,
        })?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    endpoint
        .connect()
        .await
        .map_err(|source| ConnectError::Dial { url, source })
}

/// How a stream ended without an error.
#[derive(Debug)]
enum Ended {
    /// The hub (or the network) closed it.
    Closed,
    /// The certificate was renewed and stored: reconnect with this identity now.
    Renewed(Box<Identity>),
}

/// Holds the stream to the hub for as long as the task runs: connects once the engine
/// has loaded its saved assignments, and reconnects whenever the stream ends.
pub async fn run(config: ConnectionConfig, engine: EngineHandle, metrics: Metrics) {
    // The member API server's health goes to the engine, and from there to the hub, for as
    // long as this agent talks to the hub.
    let health = crate::probe::start(config.client.clone(), crate::probe::ProbeConfig::default());
    let _probe = accord_common::runtime::AbortOnDrop(tokio::spawn(crate::probe::forward(
        health,
        engine.clone(),
    )));
    // So does its capacity.
    let _capacity = accord_common::runtime::AbortOnDrop(tokio::spawn(crate::capacity::run(
        config.client.clone(),
        config.capacity_interval,
        config.room.clone(),
        engine.clone(),
    )));
    engine.wait_loaded().await;
    let mut identity = config.initial_identity.clone();
    let mut k8s_version = String::new();
    let mut retry = reconnect_backoff();
    let mut renewal = Renewal::new();
    loop {
        match config.identity.load(&config.client).await {
            Ok(fresh) => {
                if fresh != identity {
                    info!(identity = ?fresh, "identity changed; using it from now on");
                }
                identity = fresh;
            }
            Err(e) => {
                metrics.error("identity");
                warn!(error = %e, "could not re-read the identity; using the one read before");
            }
        }
        match config.client.apiserver_version().await {
            Ok(info) => k8s_version = info.git_version,
            Err(e) => debug!(error = %e, "could not read the member's Kubernetes version"),
        }
        let started = Instant::now();
        let outcome = session(
            &config,
            &identity,
            &k8s_version,
            &engine,
            &metrics,
            &mut renewal,
        )
        .await;
        metrics.connected.set(0);
        metrics.reconnects.inc();
        match outcome {
            Ok(Ended::Renewed(fresh)) => {
                info!(hub = %identity.hub_url, "reconnecting with the renewed certificate");
                identity = *fresh;
                // A planned reconnect: no backoff, and none inherited by the next failure.
                retry = reconnect_backoff();
                continue;
            }
            Ok(Ended::Closed) => {
                info!(hub = %identity.hub_url, "stream to the hub ended; reconnecting")
            }
            Err(e) => {
                metrics.error(e.kind());
                warn!(hub = %identity.hub_url, error = %e, "no stream to the hub; retrying");
            }
        }
        if started.elapsed() >= HEALTHY_AFTER {
            retry = reconnect_backoff();
        }
        let delay = retry.next_delay();
        tokio::time::sleep(delay).await;
        if !config.fence.allows_at(Instant::now()) {
            info!("not reconnecting until the agent Lease is renewed");
            config.fence.allowed(FENCE_POLL).await;
        }
    }
}

/// The validity window of the identity's certificate (exported as the expiry gauge), or
/// `None` when it cannot be read: then the agent cannot schedule a renewal and says so.
fn certificate_window(identity: &Identity, metrics: &Metrics) -> Option<CertValidity> {
    match cert_facts_pem(&identity.cert_pem) {
        Ok(facts) => {
            metrics
                .certificate_expiry
                .set(facts.validity.not_after_unix);
            Some(facts.validity)
        }
        Err(e) => {
            metrics.renewal(RenewalError::Certificate(e).result());
            warn!("cannot read the client certificate's validity; it will not be renewed");
            None
        }
    }
}

/// One stream, from dialling to its end.
async fn session(
    config: &ConnectionConfig,
    identity: &Identity,
    k8s_version: &str,
    engine: &EngineHandle,
    metrics: &Metrics,
    renewal: &mut Renewal,
) -> Result<Ended, ConnectError> {
    let window = certificate_window(identity, metrics);
    let channel = dial(identity).await?;
    let hello = AgentMessage {
        cluster: identity.cluster.clone(),
        body: Some(agent_message::Body::Hello(Hello {
            agent_version: config.agent_version.clone(),
            k8s_version: k8s_version.to_owned(),
            last_applied_revision: engine.last_applied_revision(),
            store_epoch: engine.store_epoch(),
            member_health: engine.member_health(),
        })),
    };
    // The engine's messages are few (one report in flight per placed object, acks), so their
    // queue is unbounded and the engine never waits on the hub; heartbeats queue at most
    // one, so a stalled stream does not pile them up.
    let (outbox, outbox_rx) = mpsc::unbounded_channel();
    let (heartbeats, heartbeats_rx) = mpsc::channel(1);
    let outbound = futures::stream::once(async { hello }).chain(futures::stream::select(
        UnboundedReceiverStream::new(outbox_rx),
        ReceiverStream::new(heartbeats_rx),
    ));
    let mut client = FederationClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let mut inbound = client
        .sync(outbound)
        .await
        .map_err(ConnectError::Refused)?
        .into_inner();
    let renewals = outbox.clone();
    let id = engine.connected(outbox).await;
    metrics.connected.set(1);
    info!(hub = %identity.hub_url, cluster = %identity.cluster, "connected to the hub");

    let mut ticker = tokio::time::interval(config.heartbeat_interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticker.tick().await; // the first tick is immediate; Hello just went out
    let result = loop {
        let now = Instant::now();
        let renew_at = window.map(|w| renewal.next_request_at(w, unix_millis(), now));
        let answer_deadline = renewal.deadline();
        tokio::select! {
            message = inbound.message() => match message {
                Ok(Some(HubMessage { body: Some(hub_message::Body::Renewed(renewed)) })) => {
                    if let Some(fresh) =
                        renewed_identity(config, identity, renewal, metrics, &renewed).await
                    {
                        break Ok(Ended::Renewed(Box::new(fresh)));
                    }
                }
                Ok(Some(message)) => engine.hub_message(message).await,
                Ok(None) => break Ok(Ended::Closed),
                Err(status) => break Err(ConnectError::Broken(status)),
            },
            _ = tokio::time::sleep_until(renew_at.unwrap_or(now)),
                if renew_at.is_some() && answer_deadline.is_none() =>
            {
                match renewal.start(&identity.cluster, Instant::now()) {
                    Ok(request) => {
                        info!(cluster = %identity.cluster, "asking the hub to renew the client certificate");
                        let _ = renewals.send(request);
                    }
                    Err(e) => {
                        metrics.renewal(e.result());
                        warn!(error = %e, "certificate renewal failed; keeping the current certificate");
                        renewal.failed(Instant::now());
                    }
                }
            }
            _ = tokio::time::sleep_until(answer_deadline.unwrap_or(now)),
                if answer_deadline.is_some() =>
            {
                let e = RenewalError::Timeout(crate::renewal::ANSWER_TIMEOUT);
                metrics.renewal(e.result());
                warn!(error = %e, "certificate renewal failed; keeping the current certificate");
                renewal.failed(Instant::now());
            }
            _ = ticker.tick() => {
                let heartbeat = AgentMessage {
                    cluster: identity.cluster.clone(),
                    body: Some(agent_message::Body::Heartbeat(Heartbeat {
                        sent_unix_millis: unix_millis(),
                    })),
                };
                // A full queue means the previous heartbeat has not gone out yet.
                let _ = heartbeats.try_send(heartbeat);
            }
        }
    };
    engine.disconnected(id).await;
    if renewal.is_pending() {
        let e = RenewalError::StreamEnded;
        metrics.renewal(e.result());
        warn!(error = %e, "certificate renewal failed; keeping the current certificate");
        renewal.failed(Instant::now());
    }
    result
}

/// The hub's answer to a renewal, checked and stored: the identity to reconnect with, or
/// `None` (counted and logged) when it cannot be used; the old certificate stays then.
async fn renewed_identity(
    config: &ConnectionConfig,
    identity: &Identity,
    renewal: &mut Renewal,
    metrics: &Metrics,
    renewed: &accord_proto::v1::CertificateRenewed,
) -> Option<Identity> {
    let checked = renewal.accept(identity, renewed, unix_millis() / 1000);
    let outcome = match checked {
        None => {
            warn!("the hub sent a renewed certificate nobody asked for; ignoring it");
            return None;
        }
        Some(Err(e)) => Err(e),
        Some(Ok(fresh)) => Renewal::store(&config.identity, &config.client, &fresh)
            .await
            .map(|()| fresh),
    };
    match outcome {
        Ok(fresh) => {
            metrics.renewal("ok");
            renewal.succeeded();
            info!(
                cluster = %fresh.cluster,
                not_after_unix = renewed.not_after_unix,
                source = %config.identity,
                "stored the renewed client certificate"
            );
            Some(fresh)
        }
        Err(e) => {
            metrics.renewal(e.result());
            warn!(error = %e, "certificate renewal failed; keeping the current certificate");
            renewal.failed(Instant::now());
            None
        }
    }
}
