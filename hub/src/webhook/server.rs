//! The webhook's HTTPS server: TLS with the hub's serving certificate (issued by the hub
//! CA, which the ValidatingWebhookConfiguration's `caBundle` trusts), HTTP/1.1 by axum.
//!
//! - `POST /validate-federatedkafkatopics`, `POST /validate-prometheusfederations`,
//!   `POST /validate-federatedresources` and `POST /validate-federatedkafkausers`: an
//!   AdmissionReview in, an AdmissionReview out; a body that is not a review of the path's
//!   kind is HTTP 400 with the reason. The PrometheusFederation and FederatedResource
//!   decisions need no cache, so they do not wait for the reflectors; the topic and user
//!   decisions read the KafkaTopicPolicies and namespaces from them.
//! - `POST /convert`: a ConversionReview in, the objects converted between `v1alpha1` and
//!   `v1beta1` out ([`super::conversion`]); needs no cache.
//! - `GET /readyz`: 200 once every reflector has listed, 503 before; `GET /healthz`: 200.
//!
//! TLS handshakes run as their own tasks, so one slow client never holds up the others.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::writes::{EventRecorder, EventType};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kube::ResourceExt as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::{debug, warn};

use accord_crds::kafka_topic::FederatedKafkaTopic;
use accord_crds::{FederatedKafkaUser, FederatedResource, PrometheusFederation};

use super::review::{self, Operation};
use super::{FEDERATION_PATH, PATH, RESOURCE_PATH, USER_PATH, WebhookError};
use crate::federated_resource::admission::decide_resource;
use crate::kafka_topic::admission::decide;
use crate::kafka_topic::admission_cache::Caches;
use crate::kafka_user::admission::{Snapshot as UserSnapshot, decide_user};
use crate::pki::KeyPairPem;
use crate::promfed::admission::decide_federation;

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The API server sends at most 3 MiB of object, twice for an UPDATE, plus the envelope.
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// How long a review waits for the reflectors' first list after a start; past it the
/// webhook answers 503 (with `failurePolicy: Ignore` the API server then admits, and the
/// controller's own check still applies).
const READY_WAIT: Duration = Duration::from_secs(2);

/// How long after admitting an audited topic its Event waits for the topic to be stored.
const EVENT_WAIT: Duration = Duration::from_secs(30);

/// The rustls server config of the webhook: `serving` followed by the CA certificate.
pub fn tls_config(
    ca_pem: &str,
    serving: &KeyPairPem,
) -> Result<rustls::ServerConfig, WebhookError> {
    crate::pki::install_crypto_provider();
    let mut chain = Vec::new();
    for pem in [serving.cert_pem.as_str(), ca_pem] {
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            chain.push(cert.map_err(|e| WebhookError::Certificate(e.to_string()))?);
        }
    }
    let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes())
        .map_err(|e| WebhookError::Certificate(format!("the serving key: {e}")))?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| WebhookError::Certificate(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Accepts TCP connections and hands out those whose TLS handshake completed.
struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Option<(TlsStream<TcpStream>, SocketAddr)>>,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            tokio::select! {
                accepted = self.tcp.accept() => match accepted {
                    Ok((stream, addr)) => {
                        let acceptor = self.acceptor.clone();
                        self.handshakes.spawn(async move {
                            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                                Ok(Ok(tls)) => Some((tls, addr)),
                                Ok(Err(e)) => {
                                    debug!(%addr, error = %e, "webhook TLS handshake failed");
                                    None
                                }
                                Err(_) => {
                                    debug!(%addr, "webhook TLS handshake timed out");
                                    None
                                }
                            }
                        });
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        warn!(error = %e, "webhook accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    if let Ok(Some(connection)) = done {
                        return connection;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

#[derive(Clone)]
struct AppState {
    caches: Caches,
    recorder: Arc<EventRecorder>,
}

/// Serves the webhook on `listener` until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    tls: rustls::ServerConfig,
    caches: Caches,
    recorder: EventRecorder,
) -> Result<(), WebhookError> {
    let app = Router::new()
        .route(PATH, post(validate))
        .route(FEDERATION_PATH, post(validate_federation))
        .route(RESOURCE_PATH, post(validate_resource))
        .route(USER_PATH, post(validate_user))
        .route(accord_crds::versions::CONVERSION_PATH, post(convert))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(AppState {
            caches,
            recorder: Arc::new(recorder),
        });
    let listener = TlsListener {
        tcp: listener,
        acceptor: TlsAcceptor::from(Arc::new(tls)),
        handshakes: JoinSet::new(),
    };
    axum::serve(listener, app)
        .await
        .map_err(WebhookError::Serve)
}

async fn readyz(State(s): State<AppState>) -> (StatusCode, &'static str) {
    match tokio::time::timeout(Duration::ZERO, s.caches.wait_until_ready()).await {
        Ok(()) => (StatusCode::OK, "ok"),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the webhook's caches have not listed yet",
        ),
    }
}

/// HTTP 400 for a body that is not a review this path answers.
fn malformed(e: &review::ReviewError) -> Response {
    let message = accord_common::runtime::error_chain(e);
    debug!(error = %message, "refusing a malformed admission review");
    (StatusCode::BAD_REQUEST, message).into_response()
}

fn answer(uid: &str, verdict: &review::Verdict) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        review::response_body(uid, verdict),
    )
        .into_response()
}

/// A ConversionReview: needs no cache, so it is answered from the first moment, on every
/// replica, leader or not.
async fn convert(body: Bytes) -> Response {
    match super::conversion::review(&body) {
        Ok(review) => (
            [(header::CONTENT_TYPE, "application/json")],
            review.to_string(),
        )
            .into_response(),
        Err(e) => {
            let message = accord_common::runtime::error_chain(&e);
            debug!(error = %message, "refusing a malformed conversion review");
            (StatusCode::BAD_REQUEST, message).into_response()
        }
    }
}

async fn validate_federation(body: Bytes) -> Response {
    match review::decode::<PrometheusFederation>(&body) {
        Ok(review) => answer(&review.uid, &decide_federation(&review)),
        Err(e) => malformed(&e),
    }
}

async fn validate_resource(body: Bytes) -> Response {
    match review::decode::<FederatedResource>(&body) {
        Ok(review) => answer(&review.uid, &decide_resource(&review)),
        Err(e) => malformed(&e),
    }
}

/// HTTP 503 after waiting [`READY_WAIT`] for the reflectors' first list, or `None` once
/// they have listed.
async fn unless_listed(caches: &Caches) -> Option<Response> {
    match tokio::time::timeout(READY_WAIT, caches.wait_until_ready()).await {
        Ok(()) => None,
        Err(_) => Some(
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the webhook's caches have not listed yet",
            )
                .into_response(),
        ),
    }
}

async fn validate_user(State(s): State<AppState>, body: Bytes) -> Response {
    let review = match review::decode::<FederatedKafkaUser>(&body) {
        Ok(r) => r,
        Err(e) => return malformed(&e),
    };
    if let Some(unavailable) = unless_listed(&s.caches).await {
        return unavailable;
    }
    let snapshot = match &review.object {
        Some(user) => UserSnapshot {
            policies: s.caches.policies(),
            namespace_labels: s
                .caches
                .namespace_labels(user.metadata.namespace.as_deref()),
        },
        None => UserSnapshot::default(),
    };
    answer(&review.uid, &decide_user(&review, &snapshot))
}

async fn validate(State(s): State<AppState>, body: Bytes) -> Response {
    let review = match review::decode::<FederatedKafkaTopic>(&body) {
        Ok(r) => r,
        Err(e) => return malformed(&e),
    };
    if let Some(unavailable) = unless_listed(&s.caches).await {
        return unavailable;
    }
    let snapshot = match (&review.operation, &review.object) {
        (Operation::Create | Operation::Update, Some(topic)) => s.caches.snapshot(topic),
        _ => Default::default(),
    };
    let decision = decide(&review, &snapshot);
    if let (Some(note), Some(topic)) = (decision.event, &review.object) {
        // Best effort and off the request path: the topic is not stored until admission
        // ends, so the Event waits for the reflector to see it.
        let caches = s.caches.clone();
        let recorder = s.recorder.clone();
        let namespace = topic.namespace().unwrap_or_default();
        let name = topic.name_any();
        tokio::spawn(async move {
            record_violation(&caches, &recorder, &namespace, &name, note).await;
        });
    }
    answer(&review.uid, &decision.verdict)
}

/// Records the Warning Event `PolicyViolation` on the admitted topic once it is stored.
async fn record_violation(
    caches: &Caches,
    recorder: &EventRecorder,
    namespace: &str,
    name: &str,
    note: String,
) {
    let Some(stored) = caches.wait_for_topic(namespace, name, EVENT_WAIT).await else {
        debug!(namespace, name, "audited topic never appeared; no Event");
        return;
    };
    let reference = kube::Resource::object_ref(stored.as_ref(), &());
    recorder.publish(
        &reference,
        EventType::Warning,
        super::EVENT_REASON,
        "Admit",
        note,
    );
}
