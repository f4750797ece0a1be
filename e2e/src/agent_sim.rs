//! A minimal agent speaking `accord.v1`, for end-to-end tests and benchmarks of the hub: it
//! joins through the real token flow (CA pinning, CSR, Registration) and holds a real mTLS
//! Sync stream. It does not reconcile anything; the real agent is `accord-agent`.

use accord_common::register;
use accord_hub::pki::client_tls_config;
use accord_proto::v1::federation_client::FederationClient;
use accord_proto::v1::{
    AgentMessage, Heartbeat, Hello, HubMessage, ObjectRef, StatusReport, agent_message,
};
use anyhow::{Context as _, Result};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

/// TLS name the hub's serving certificate carries for loopback connections.
pub const HUB_TLS_NAME: &str = "localhost";

/// What an agent holds after joining.
#[derive(Clone)]
pub struct AgentIdentity {
    /// Cluster name in the certificate.
    pub cluster: String,
    /// Client certificate (PEM).
    pub cert_pem: String,
    /// Private key (PEM).
    pub key_pem: String,
    /// Hub CA (PEM).
    pub ca_pem: String,
}

impl std::fmt::Debug for AgentIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentIdentity")
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

/// Joins `cluster` to the hub at `hub` (`host:port`) with a token and the CA pin. A
/// refusal comes back as the hub's `tonic::Status`.
pub async fn register(
    hub: &str,
    token: &str,
    ca_cert_hash: &str,
    cluster: &str,
    force: bool,
) -> std::result::Result<AgentIdentity, tonic::Status> {
    register_labelled(hub, token, ca_cert_hash, cluster, force, Default::default()).await
}

/// [`register`] with the ManagedCluster's `labels`.
pub async fn register_labelled(
    hub: &str,
    token: &str,
    ca_cert_hash: &str,
    cluster: &str,
    force: bool,
    labels: std::collections::HashMap<String, String>,
) -> std::result::Result<AgentIdentity, tonic::Status> {
    let url = format!("https://{hub}");
    let registered = register::register(&register::Registration {
        hub_url: &url,
        server_name: HUB_TLS_NAME,
        ca_cert_hash,
        token,
        cluster,
        labels,
        agent_version: "sim",
        kubernetes_version: "v1.34.4",
        force,
    })
    .await
    .map_err(|e| match e {
        register::RegisterError::Refused { status, .. } => status,
        register::RegisterError::Unreachable { .. } => tonic::Status::unavailable(e.to_string()),
        other => tonic::Status::internal(other.to_string()),
    })?;
    Ok(AgentIdentity {
        cluster: cluster.to_owned(),
        cert_pem: registered.cert_pem,
        key_pem: registered.key_pem,
        ca_pem: registered.ca_pem,
    })
}

/// An mTLS channel to the hub with `identity`'s certificate.
pub async fn connect(hub: &str, identity: &AgentIdentity) -> Result<Channel> {
    Endpoint::from_shared(format!("https://{hub}"))?
        .tls_config(client_tls_config(
            &identity.ca_pem,
            Some((&identity.cert_pem, &identity.key_pem)),
            HUB_TLS_NAME,
        ))?
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await
        .with_context(|| format!("connecting to the hub at {hub}"))
}

/// One open Sync stream.
pub struct AgentStream {
    /// Cluster the agent speaks for.
    pub cluster: String,
    tx: mpsc::Sender<AgentMessage>,
    rx: tonic::Streaming<HubMessage>,
}

impl AgentStream {
    /// Opens Sync on `channel` and sends Hello.
    pub async fn open(channel: Channel, cluster: &str) -> std::result::Result<Self, tonic::Status> {
        let (tx, rx) = mpsc::channel(64);
        let hello = AgentMessage {
            cluster: cluster.to_owned(),
            body: Some(agent_message::Body::Hello(Hello {
                agent_version: "sim".into(),
                k8s_version: "v1.34.4".into(),
                last_applied_revision: 0,
                ..Default::default()
            })),
        };
        tx.send(hello)
            .await
            .map_err(|_| tonic::Status::internal("stream closed"))?;
        let rx = FederationClient::new(channel)
            .sync(ReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok(Self {
            cluster: cluster.to_owned(),
            tx,
            rx,
        })
    }

    /// Sends a message naming `as_cluster` (normally the agent's own).
    pub async fn send_as(&self, as_cluster: &str, body: agent_message::Body) -> Result<()> {
        self.tx
            .send(AgentMessage {
                cluster: as_cluster.to_owned(),
                body: Some(body),
            })
            .await
            .context("stream closed")
    }

    /// Sends a heartbeat.
    pub async fn heartbeat(&self) -> Result<()> {
        self.send_as(
            &self.cluster,
            agent_message::Body::Heartbeat(Heartbeat {
                sent_unix_millis: 0,
            }),
        )
        .await
    }

    /// Heartbeats every `every` in the background until the stream closes.
    pub fn spawn_heartbeats(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let hb = AgentMessage {
                    cluster: String::new(),
                    body: Some(agent_message::Body::Heartbeat(Heartbeat {
                        sent_unix_millis: 0,
                    })),
                };
                if tx.send(hb).await.is_err() {
                    return;
                }
            }
        })
    }

    /// Sends a status report about `policy`.
    pub async fn report(&self, report: StatusReport) -> Result<()> {
        self.send_as(&self.cluster, agent_message::Body::StatusReport(report))
            .await
    }

    /// The next message from the hub; `None` when the stream ended.
    /// Skips messages until the hub ends the stream, within `timeout`; returns the status
    /// code it ended with (`None` for a clean end).
    pub async fn ended(&mut self, timeout: Duration) -> Result<Option<tonic::Code>> {
        tokio::time::timeout(timeout, async {
            loop {
                match self.next().await {
                    Some(Ok(_)) => continue,
                    Some(Err(status)) => return Some(status.code()),
                    None => return None,
                }
            }
        })
        .await
        .with_context(|| format!("the stream stayed open for {timeout:?}"))
    }

    /// The next message from the hub, if the stream has not ended.
    pub async fn next(&mut self) -> Option<std::result::Result<HubMessage, tonic::Status>> {
        self.rx.message().await.transpose()
    }

    /// Splits into the sending and receiving halves.
    pub fn split(self) -> (mpsc::Sender<AgentMessage>, tonic::Streaming<HubMessage>) {
        (self.tx, self.rx)
    }
}

/// A policy reference for reports.
pub fn policy(kind: &str, namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
    }
}
