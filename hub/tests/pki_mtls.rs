//! The hub's mTLS setup against a real tonic server on 127.0.0.1: agents with hub-signed
//! certificates are identified by cluster, anonymous callers get through without an
//! identity, certificates from another CA are refused, and the join-time CA pinning works.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use accord_hub::pki::{
    self, HubCa, KeyPairPem, PkiError, agent_csr, client_tls_config, fetch_pinned_ca,
    fetch_pinned_ca_as, request_peer_identity, server_tls_config,
};
use accord_proto::v1::registration_client::RegistrationClient;
use accord_proto::v1::registration_server::{Registration, RegistrationServer};
use accord_proto::v1::{RegisterRequest, RegisterResponse};
use tokio::sync::oneshot;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};

const DAY: Duration = Duration::from_secs(86_400);
const ANONYMOUS: &str = "<anonymous>";

/// Answers with the cluster named by the caller's verified certificate, if any.
#[derive(Clone, Default)]
struct WhoAmI {
    calls: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl Registration for WhoAmI {
    async fn register(
        &self,
        request: Request<RegisterRequest>,
    ) -> Result<Response<RegisterResponse>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let cluster = match request_peer_identity(&request) {
            Ok(identity) => identity.cluster,
            Err(status) if request.peer_certs().is_none() => {
                format!("{ANONYMOUS} ({:?})", status.code())
            }
            Err(status) => return Err(status),
        };
        Ok(Response::new(RegisterResponse {
            cluster_name: cluster,
            ..RegisterResponse::default()
        }))
    }
}

/// A hub serving WhoAmI over TLS; stops when dropped.
struct Hub {
    ca: HubCa,
    port: u16,
    calls: Arc<AtomicUsize>,
    _stop: oneshot::Sender<()>,
}

impl Hub {
    async fn start() -> Self {
        let ca = HubCa::generate("accord-test-ca").unwrap();
        let serving = serving_cert(&ca);
        Self::start_with(ca.clone(), server_tls_config(&ca, &serving)).await
    }

    async fn start_with(ca: HubCa, tls: ServerTlsConfig) -> Self {
        let incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = incoming.local_addr().unwrap().port();
        let service = WhoAmI::default();
        let calls = service.calls.clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = Server::builder()
            .tls_config(tls)
            .unwrap()
            .add_service(RegistrationServer::new(service));
        tokio::spawn(async move {
            server
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Self {
            ca,
            port,
            calls,
            _stop: stop,
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Calls Register through a fresh channel and returns the cluster the hub saw.
    async fn who_am_i(
        &self,
        ca_pem: &str,
        identity: Option<(&str, &str)>,
    ) -> Result<String, String> {
        let endpoint = Endpoint::from_shared(format!("https://{}", self.addr()))
            .unwrap()
            .connect_timeout(Duration::from_secs(5))
            .tls_config(client_tls_config(ca_pem, identity, "localhost"))
            .map_err(|e| format!("tls config: {e}"))?;
        let channel: Channel = endpoint
            .connect()
            .await
            .map_err(|e| format!("connect: {e:?}"))?;
        let reply = RegistrationClient::new(channel)
            .register(RegisterRequest::default())
            .await
            .map_err(|s| format!("call: {s:?}"))?;
        Ok(reply.into_inner().cluster_name)
    }
}

fn serving_cert(ca: &HubCa) -> KeyPairPem {
    ca.issue_server_cert(
        &[
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "accord-hub.accord-system.svc".to_owned(),
        ],
        DAY,
    )
    .unwrap()
}

/// An agent identity (cert PEM, key PEM) for `cluster`, signed by `ca`.
fn agent_identity(ca: &HubCa, cluster: &str) -> (String, String) {
    let csr = agent_csr(cluster).unwrap();
    let signed = ca.sign_agent_csr(&csr.csr_pem, cluster, DAY).unwrap();
    (signed.cert_pem, csr.key_pem)
}

#[tokio::test]
async fn agent_with_a_hub_signed_certificate_is_identified_by_its_cluster() {
    let hub = Hub::start().await;
    let (cert, key) = agent_identity(&hub.ca, "member-1");
    let seen = hub
        .who_am_i(hub.ca.cert_pem(), Some((&cert, &key)))
        .await
        .unwrap();
    assert_eq!(seen, "member-1");
}

#[tokio::test]
async fn client_without_a_certificate_may_call_but_has_no_identity() {
    let hub = Hub::start().await;
    let seen = hub.who_am_i(hub.ca.cert_pem(), None).await.unwrap();
    // Registration may be called so; a service that needs the identity gets UNAUTHENTICATED.
    assert_eq!(seen, format!("{ANONYMOUS} (Unauthenticated)"));
}

#[tokio::test]
async fn client_certificate_from_another_ca_is_refused_at_the_handshake() {
    let hub = Hub::start().await;
    // Same subject as the hub CA, different key: only the signature tells them apart.
    let impostor_ca = HubCa::generate("accord-test-ca").unwrap();
    let (cert, key) = agent_identity(&impostor_ca, "member-1");
    let err = hub
        .who_am_i(hub.ca.cert_pem(), Some((&cert, &key)))
        .await
        .unwrap_err();
    // With TLS 1.3 the client learns of the refusal when it first uses the connection.
    assert!(
        err.starts_with("connect") || err.starts_with("call"),
        "{err}"
    );
    assert!(
        err.contains("fatal alert"),
        "the server aborted the handshake: {err}"
    );
    assert_eq!(hub.calls.load(Ordering::SeqCst), 0, "the handler never ran");
}

#[tokio::test]
async fn client_that_does_not_trust_the_hub_ca_cannot_connect() {
    let hub = Hub::start().await;
    let other_ca = HubCa::generate("other").unwrap();
    let err = hub.who_am_i(other_ca.cert_pem(), None).await.unwrap_err();
    assert!(err.starts_with("connect"), "{err}");
    assert_eq!(hub.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn fetch_pinned_ca_returns_the_hub_ca_when_the_hash_matches() {
    let hub = Hub::start().await;
    let ca_pem = fetch_pinned_ca(&hub.addr(), &hub.ca.ca_cert_hash())
        .await
        .unwrap();
    assert_eq!(ca_pem, hub.ca.cert_pem());
    assert_eq!(
        pki::ca_cert_hash_of(&ca_pem).unwrap(),
        hub.ca.ca_cert_hash()
    );

    // Also through an https:// URL, as `accord-agent join --hub` takes it.
    let via_url = fetch_pinned_ca(
        &format!("https://{}", hub.addr()),
        &hub.ca
            .ca_cert_hash()
            .to_uppercase()
            .replace("SHA256", "sha256"),
    )
    .await
    .unwrap();
    assert_eq!(via_url, ca_pem);

    // The pinned CA is enough to join and then talk mTLS.
    let (cert, key) = agent_identity(&hub.ca, "member-2");
    let seen = hub.who_am_i(&ca_pem, Some((&cert, &key))).await.unwrap();
    assert_eq!(seen, "member-2");
}

#[tokio::test]
async fn fetch_pinned_ca_refuses_a_hub_whose_ca_does_not_match() {
    let hub = Hub::start().await;
    let other = HubCa::generate("other").unwrap();
    let err = fetch_pinned_ca(&hub.addr(), &other.ca_cert_hash())
        .await
        .unwrap_err();
    assert!(matches!(err, PkiError::CaPinMismatch { .. }), "{err:?}");
    let expected = format!(
        "the hub's CA does not match --ca-cert-hash: expected {}, got {}",
        other.ca_cert_hash(),
        hub.ca.ca_cert_hash()
    );
    assert!(err.to_string().starts_with(&expected), "{err}");
}

#[tokio::test]
async fn fetch_pinned_ca_explains_a_hub_that_does_not_serve_its_ca() {
    let ca = HubCa::generate("accord-test-ca").unwrap();
    let serving = serving_cert(&ca);
    // Only the leaf, no CA behind it.
    let tls = ServerTlsConfig::new().identity(tonic::transport::Identity::from_pem(
        &serving.cert_pem,
        &serving.key_pem,
    ));
    let hub = Hub::start_with(ca, tls).await;
    let err = fetch_pinned_ca(&hub.addr(), &hub.ca.ca_cert_hash())
        .await
        .unwrap_err();
    assert!(matches!(err, PkiError::NoCaInChain { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("presented only its serving certificate"),
        "{err}"
    );
}

#[tokio::test]
async fn fetch_pinned_ca_refuses_a_serving_certificate_for_another_name() {
    let hub = Hub::start().await;
    let err = fetch_pinned_ca_as(&hub.addr(), "hub.elsewhere.example", &hub.ca.ca_cert_hash())
        .await
        .unwrap_err();
    assert!(
        matches!(err, PkiError::ServingCertInvalid { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("holds the pinned CA"), "{msg}");
    assert!(
        msg.contains("not valid for name \"hub.elsewhere.example\""),
        "{msg}"
    );
}

#[tokio::test]
async fn fetch_pinned_ca_reports_an_unreachable_hub_and_a_bad_hash_plainly() {
    // A port nobody listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ca = HubCa::generate("x").unwrap();
    let err = fetch_pinned_ca(&format!("127.0.0.1:{port}"), &ca.ca_cert_hash())
        .await
        .unwrap_err();
    assert!(matches!(err, PkiError::Connect { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("could not complete a TLS handshake")
    );

    let err = fetch_pinned_ca("127.0.0.1:1", "sha256:abc")
        .await
        .unwrap_err();
    assert!(matches!(err, PkiError::InvalidCaCertHash { .. }), "{err:?}");
}
