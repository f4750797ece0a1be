//! The client side of joining: pin the hub CA by `--ca-cert-hash`, generate a key and CSR,
//! and call `Registration.Register` with a bootstrap token. Used by `accord-agent join` and
//! by the end-to-end harness's simulated agents, so both join exactly the same way.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use accord_proto::v1::RegisterRequest;
use accord_proto::v1::registration_client::RegistrationClient;
use tonic::transport::Endpoint;

use crate::pki::{PkiError, agent_csr, client_tls_config, fetch_pinned_ca_as};

/// How long connecting to the hub may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the Register call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What to register.
#[derive(Clone)]
pub struct Registration<'a> {
    /// The hub's gRPC URL, `https://HOST:PORT`.
    pub hub_url: &'a str,
    /// Name the hub's serving certificate must carry (the URL's host, or `localhost` for a
    /// loopback address, unless told otherwise).
    pub server_name: &'a str,
    /// `sha256:HEX` of the hub CA's public key.
    pub ca_cert_hash: &'a str,
    /// The bootstrap token, `ID.SECRET`. Secret.
    pub token: &'a str,
    /// The cluster's name on the hub.
    pub cluster: &'a str,
    /// Labels for the ManagedCluster.
    pub labels: HashMap<String, String>,
    /// The agent's version.
    pub agent_version: &'a str,
    /// The member cluster's Kubernetes version.
    pub kubernetes_version: &'a str,
    /// Replace a registration of `cluster` made with another identity.
    pub force: bool,
}

impl fmt::Debug for Registration<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("hub_url", &self.hub_url)
            .field("cluster", &self.cluster)
            .field("force", &self.force)
            .finish_non_exhaustive()
    }
}

/// What the agent holds after joining.
#[derive(Clone, PartialEq, Eq)]
pub struct Registered {
    /// The hub CA (PEM), as pinned and as the hub returned it.
    pub ca_pem: String,
    /// The agent's client certificate (PEM), CN = cluster name.
    pub cert_pem: String,
    /// The agent's private key (PEM PKCS#8). Secret: store it, never log it.
    pub key_pem: String,
    /// The certificate's `notAfter`, Unix seconds.
    pub not_after_unix: i64,
}

impl fmt::Debug for Registered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registered")
            .field("not_after_unix", &self.not_after_unix)
            .finish_non_exhaustive()
    }
}

/// Why registering failed.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// Nothing answered at the hub's address, or the TLS handshake could not complete.
    #[error(
        "cannot reach the hub at {url}: check --hub (scheme https, the hub's gRPC port) and that \
         this machine can connect to it"
    )]
    Unreachable {
        /// The hub URL.
        url: String,
        /// The transport error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The hub's CA does not match `--ca-cert-hash`, or its certificate is unusable.
    #[error(transparent)]
    Pin(PkiError),
    /// The key or CSR could not be generated.
    #[error("generating the agent's key and certificate signing request")]
    Csr(#[source] PkiError),
    /// The hub refused the registration.
    #[error("the hub refused to register cluster {cluster:?}: {}", .status.message())]
    Refused {
        /// The cluster name.
        cluster: String,
        /// The hub's answer; its code says why (`UNAUTHENTICATED`: the token,
        /// `ALREADY_EXISTS`: the name, `INVALID_ARGUMENT`: the request).
        status: tonic::Status,
    },
}

/// Pins the hub CA, sends a fresh CSR with the token, and returns the signed identity.
pub async fn register(r: &Registration<'_>) -> Result<Registered, RegisterError> {
    let ca_pem = fetch_pinned_ca_as(r.hub_url, r.server_name, r.ca_cert_hash)
        .await
        .map_err(|e| match e {
            PkiError::Connect { source, .. } => RegisterError::Unreachable {
                url: r.hub_url.to_owned(),
                source: Box::new(source),
            },
            other => RegisterError::Pin(other),
        })?;
    let unreachable = |source: tonic::transport::Error| RegisterError::Unreachable {
        url: r.hub_url.to_owned(),
        source: Box::new(source),
    };
    let channel = Endpoint::from_shared(r.hub_url.to_owned())
        .map_err(unreachable)?
        .tls_config(client_tls_config(&ca_pem, None, r.server_name))
        .map_err(unreachable)?
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(CALL_TIMEOUT)
        .connect()
        .await
        .map_err(unreachable)?;
    let csr = agent_csr(r.cluster).map_err(RegisterError::Csr)?;
    let response = RegistrationClient::new(channel)
        .register(RegisterRequest {
            token: r.token.to_owned(),
            cluster_name: r.cluster.to_owned(),
            csr_pem: csr.csr_pem,
            labels: r.labels.clone(),
            agent_version: r.agent_version.to_owned(),
            kubernetes_version: r.kubernetes_version.to_owned(),
            force: r.force,
        })
        .await
        .map_err(|status| RegisterError::Refused {
            cluster: r.cluster.to_owned(),
            status,
        })?
        .into_inner();
    Ok(Registered {
        ca_pem: response.ca_certificate_pem,
        cert_pem: response.certificate_pem,
        key_pem: csr.key_pem,
        not_after_unix: response.not_after_unix,
    })
}
