//! The validating admission webhooks of the kinds that have one (`--webhook-addr`), each
//! an [`Admission`] the kind registers (`crate::kinds`); this module knows no kind.
//!
//! Every hub replica serves them over HTTPS with its serving certificate from the hub CA,
//! each a pipeline of [`review::decode`] → the kind's pure decision →
//! [`review::response_body`]. A decision that reads the webhook's own caches waits a moment
//! for their first list ([`decode_once_listed`]) and is answered 503 otherwise; one that reads
//! the object alone is answered from the first moment.
//!
//! The ValidatingWebhookConfiguration ([`CONFIGURATION_NAME`], rendered by
//! `accord-hub install`, the Helm chart and the plain manifests) holds one webhook per
//! kind, each with `failurePolicy: Ignore`: a hub that is down never blocks the API; the
//! controllers check every spec again before acting on it. [`ca_bundle`] keeps the
//! `caBundle` of each equal to the hub CA.

pub mod ca_bundle;
pub mod conversion;
pub mod review;
pub mod server;

use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::writes::{EventRecorder, Reporter};

use crate::pki::KeyPairPem;

/// Name of the ValidatingWebhookConfiguration.
pub const CONFIGURATION_NAME: &str = "accord-hub";
/// One webhook of the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Webhook {
    /// Its name in the configuration.
    pub name: &'static str,
    /// The path it is served on.
    pub path: &'static str,
    /// The (plural) resource whose CREATE and UPDATE it reviews.
    pub resource: &'static str,
}

impl Webhook {
    /// Whether a webhook of the configuration, by `name`, is one of Accord's (they are
    /// all named `<plural>.accord.io`).
    pub fn is_accords(name: &str) -> bool {
        name.ends_with(".accord.io")
    }
}

/// What one review comes to.
pub enum Answer {
    /// The decision on the review with this `uid`.
    Decided {
        /// `request.uid`, echoed.
        uid: String,
        /// The decision.
        verdict: review::Verdict,
    },
    /// The body is not a review this webhook answers (HTTP 400 with the reason).
    Malformed(review::ReviewError),
    /// The caches the decision reads have not listed yet (HTTP 503; with
    /// `failurePolicy: Ignore` the API server then admits, and the controller's own check
    /// still applies).
    NotListed,
}

impl Answer {
    /// The answer of a decision that reads the object alone: `body` decoded as a review of
    /// `K`, decided by `decide`.
    pub fn of<K>(body: &[u8], decide: impl FnOnce(&review::Review<K>) -> review::Verdict) -> Self
    where
        K: serde::de::DeserializeOwned + kube::Resource<DynamicType = ()>,
    {
        match review::decode::<K>(body) {
            Ok(review) => Self::Decided {
                verdict: decide(&review),
                uid: review.uid,
            },
            Err(e) => Self::Malformed(e),
        }
    }
}

/// A kind's validating admission webhook.
pub trait Admission: Send + Sync + 'static {
    /// Its webhook in the configuration.
    fn webhook(&self) -> Webhook;
    /// Answers one review (`body`, an AdmissionReview as the API server sent it).
    fn review(&self, body: axum::body::Bytes) -> BoxFuture<'_, Answer>;
}

/// Resolves once every cache some admission reads has listed.
pub type WhenListed = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// Every kind's admission webhook and the caches they read.
pub struct Admissions {
    /// The webhooks, in the configuration's order.
    pub reviews: Vec<Arc<dyn Admission>>,
    /// Resolves once every cache the reviews read has listed (`/readyz`).
    pub listed: WhenListed,
    /// Keeps the caches' watches; resolves only when one of them stops, with why.
    pub caches: BoxFuture<'static, String>,
}

/// How long a review waits for the caches' first list after a start; past it the webhook
/// answers 503.
const READY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// `body` decoded as a review of `K` once the caches a decision reads have `listed`
/// (waiting a moment for their first list); otherwise the answer to give instead
/// ([`Answer::Malformed`], [`Answer::NotListed`]).
pub async fn decode_once_listed<K>(
    body: &[u8],
    listed: impl Future<Output = ()>,
) -> Result<review::Review<K>, Answer>
where
    K: serde::de::DeserializeOwned + kube::Resource<DynamicType = ()>,
{
    let review = review::decode::<K>(body).map_err(Answer::Malformed)?;
    if tokio::time::timeout(READY_WAIT, listed).await.is_err() {
        return Err(Answer::NotListed);
    }
    Ok(review)
}

/// Default port of `--webhook-addr` and of the Service port.
pub const DEFAULT_PORT: u16 = 9443;
/// Reason of the Warning Event on an audited topic.
pub const EVENT_REASON: &str = "PolicyViolation";

/// What stops the webhook (and with it the hub).
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The serving certificate or key could not be used for TLS.
    #[error("the webhook's serving certificate: {0}")]
    Certificate(String),
    /// The HTTPS server failed.
    #[error("the webhook's HTTPS server failed")]
    Serve(#[source] std::io::Error),
    /// One of the webhook's caches stopped.
    #[error("{0}")]
    Cache(String),
    /// The `caBundle` keeper stopped.
    #[error("the webhook's caBundle keeper stopped")]
    CaBundle,
}

/// What the webhook needs from `serve`.
#[derive(Clone)]
pub struct WebhookDeps {
    /// Client of the management cluster.
    pub kube: kube::Client,
    /// The hub CA certificate, PEM (sent after the serving certificate; the `caBundle`).
    pub ca_pem: String,
    /// The serving certificate and key.
    pub serving: KeyPairPem,
    /// This replica's name (Events say which replica recorded them).
    pub replica: String,
    /// The replica's readiness, whose `/readyz` warns about a webhook the API server cannot
    /// trust.
    pub gates: crate::http::ReadinessGates,
}

/// Binds the webhook's address, so that a port conflict fails start-up with a clear error.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// The recorder of the Events the webhook publishes (e.g. about an audited object).
pub fn recorder(kube: kube::Client, replica: &str) -> EventRecorder {
    EventRecorder::new(
        kube,
        Reporter {
            controller: "accord-hub-webhook".into(),
            instance: Some(replica.to_owned()),
        },
    )
}

/// Runs the webhook on `listener`: the admissions' caches, the `caBundle` keeper and the
/// HTTPS server. Returns only when one of them ends.
pub async fn run(
    deps: WebhookDeps,
    admissions: Admissions,
    listener: tokio::net::TcpListener,
) -> Result<(), WebhookError> {
    let tls = server::tls_config(&deps.ca_pem, &deps.serving)?;
    let Admissions {
        reviews,
        listed,
        caches,
    } = admissions;
    tokio::select! {
        why = caches => Err(WebhookError::Cache(why)),
        () = ca_bundle::keep_ca_bundle(deps.kube.clone(), deps.ca_pem.clone(), deps.gates.clone()) => Err(WebhookError::CaBundle),
        () = ca_bundle::keep_crd_ca_bundles(deps.kube.clone(), deps.ca_pem.clone(), deps.gates.clone()) => Err(WebhookError::CaBundle),
        r = server::serve(listener, tls, reviews, listed) => r,
    }
}
