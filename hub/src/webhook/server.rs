//! The webhook's HTTPS server: TLS with the hub's serving certificate (issued by the hub
//! CA, which the ValidatingWebhookConfiguration's `caBundle` trusts), HTTP/1.1 by axum.
//!
//! - `POST` on each admission's path (e.g. `/validate-federatedkafkatopics`): an
//!   AdmissionReview in, an AdmissionReview out; a body that is not a review of the path's
//!   kind is HTTP 400 with the reason, a review whose caches have not listed yet 503.
//! - `POST /convert`: a ConversionReview in, the objects converted between `v1alpha1` and
//!   `v1beta1` out ([`super::conversion`]); needs no cache.
//! - `GET /readyz`: 200 once every cache the admissions read has listed, 503 before;
//!   `GET /healthz`: 200.
//!
//! TLS handshakes run as their own tasks, so one slow client never holds up the others.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::{debug, warn};

use super::review;
use super::{Admission, Answer, WebhookError, WhenListed};
use crate::pki::KeyPairPem;

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The API server sends at most 3 MiB of object, twice for an UPDATE, plus the envelope.
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

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

/// Serves the webhook on `listener` until the task is dropped: each of `admissions` on its
/// path, `/readyz` by `listed`.
pub async fn serve(
    listener: TcpListener,
    tls: rustls::ServerConfig,
    admissions: Vec<Arc<dyn Admission>>,
    listed: WhenListed,
) -> Result<(), WebhookError> {
    let mut app = Router::new();
    for admission in admissions {
        let path = admission.webhook().path;
        app = app.route(
            path,
            post(move |body: Bytes| async move { respond(admission.review(body).await) }),
        );
    }
    let app = app
        .route(accord_crds::versions::CONVERSION_PATH, post(convert))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(move || readyz(listed.clone())))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES));
    let listener = TlsListener {
        tcp: listener,
        acceptor: TlsAcceptor::from(Arc::new(tls)),
        handshakes: JoinSet::new(),
    };
    axum::serve(listener, app)
        .await
        .map_err(WebhookError::Serve)
}

async fn readyz(listed: WhenListed) -> (StatusCode, &'static str) {
    match tokio::time::timeout(Duration::ZERO, listed()).await {
        Ok(()) => (StatusCode::OK, "ok"),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the webhook's caches have not listed yet",
        ),
    }
}

fn respond(answer: Answer) -> Response {
    match answer {
        Answer::Decided { uid, verdict } => (
            [(header::CONTENT_TYPE, "application/json")],
            review::response_body(&uid, &verdict),
        )
            .into_response(),
        Answer::Malformed(e) => {
            let message = accord_common::runtime::error_chain(&e);
            debug!(error = %message, "refusing a malformed admission review");
            (StatusCode::BAD_REQUEST, message).into_response()
        }
        Answer::NotListed => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the webhook's caches have not listed yet",
        )
            .into_response(),
    }
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
