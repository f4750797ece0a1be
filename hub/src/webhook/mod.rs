//! The validating admission webhooks for FederatedKafkaTopics, PrometheusFederations,
//! FederatedResources and FederatedKafkaUsers (`--webhook-addr`), listed in [`WEBHOOKS`].
//!
//! Every hub replica serves them over HTTPS with its serving certificate from the hub CA,
//! each a pipeline of [`review::decode`] → a pure decision → [`review::response_body`]:
//!
//! - FederatedKafkaTopics on [`PATH`], decided by [`decide`](crate::kafka_topic::admission::decide) over a snapshot of the
//!   webhook's own reflectors (so no API call is on the request path). It refuses topics
//!   that break a `Deny` KafkaTopicPolicy (reason [`DENY_REASON`]) and topics whose Kafka
//!   name an older FederatedKafkaTopic already has in one of their clusters (reason
//!   [`ALREADY_MANAGED_REASON`]; [`DENY_REASON`] with both messages when both apply); it
//!   admits topics that break an `Audit` policy with a warning per rule, an audit
//!   annotation and a Warning Event `PolicyViolation`.
//! - PrometheusFederations on [`FEDERATION_PATH`], decided by
//!   [`decide_federation`](crate::promfed::admission::decide_federation) from the object alone: a `match[]` entry the agent's
//!   selector parser refuses is refused with the parser's message (reason
//!   [`INVALID_MATCH_REASON`]).
//! - FederatedResources on [`RESOURCE_PATH`], decided by
//!   [`decide_resource`](crate::federated_resource::admission::decide_resource) from the
//!   object alone: a spec that fails the checks CEL cannot express (duplicate manifests, a
//!   patch operation without its value, more than 512 KiB) is refused naming every failed
//!   rule (reason [`INVALID_SPEC_REASON`]).
//! - FederatedKafkaUsers on [`USER_PATH`], decided by
//!   [`decide_user`](crate::kafka_user::admission::decide_user) over the KafkaTopicPolicies
//!   and namespace labels of the same caches: a spec that fails its own checks (an
//!   operation its resource type does not have) is refused naming every failed rule
//!   (reason [`INVALID_SPEC_REASON`]); an `allow` ACL granting `All` or naming resource
//!   `*` under a policy whose `users` block does not allow it is refused (`Deny`, reason
//!   [`DENY_REASON`]) or admitted with a warning and an audit annotation (`Audit`).
//!
//! The ValidatingWebhookConfiguration ([`CONFIGURATION_NAME`], rendered by
//! `accord-hub install`, the Helm chart and the plain manifests) holds one webhook per
//! kind, each with `failurePolicy: Ignore`: a hub that is down never blocks the API; the
//! controller checks every topic, FederatedResource and FederatedKafkaUser spec again
//! before acting on it, and the agent reports a selector it cannot use on the
//! PrometheusFederation. [`ca_bundle`] keeps
//! the `caBundle` of each equal to the hub CA.

pub mod ca_bundle;
pub mod conversion;
pub mod review;
pub mod server;

use std::net::SocketAddr;

use crate::writes::{EventRecorder, Reporter};

pub use crate::federated_resource::admission::INVALID_SPEC_REASON;
pub use crate::kafka_topic::admission::{ALREADY_MANAGED_REASON, AUDIT_ANNOTATION, DENY_REASON};
pub use crate::promfed::admission::INVALID_MATCH_REASON;

use crate::pki::KeyPairPem;

/// Name of the ValidatingWebhookConfiguration.
pub const CONFIGURATION_NAME: &str = "accord-hub";
/// Name of the FederatedKafkaTopic webhook in it.
pub const WEBHOOK_NAME: &str = "federatedkafkatopics.accord.io";
/// Path the FederatedKafkaTopic webhook is served on.
pub const PATH: &str = "/validate-federatedkafkatopics";
/// Name of the PrometheusFederation webhook in it.
pub const FEDERATION_WEBHOOK_NAME: &str = "prometheusfederations.accord.io";
/// Path the PrometheusFederation webhook is served on.
pub const FEDERATION_PATH: &str = "/validate-prometheusfederations";
/// Name of the FederatedResource webhook in it.
pub const RESOURCE_WEBHOOK_NAME: &str = "federatedresources.accord.io";
/// Path the FederatedResource webhook is served on.
pub const RESOURCE_PATH: &str = "/validate-federatedresources";
/// Name of the FederatedKafkaUser webhook in it.
pub const USER_WEBHOOK_NAME: &str = "federatedkafkausers.accord.io";
/// Path the FederatedKafkaUser webhook is served on.
pub const USER_PATH: &str = "/validate-federatedkafkausers";

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

/// Every webhook of the configuration, in its order.
pub const WEBHOOKS: [Webhook; 4] = [
    Webhook {
        name: WEBHOOK_NAME,
        path: PATH,
        resource: "federatedkafkatopics",
    },
    Webhook {
        name: FEDERATION_WEBHOOK_NAME,
        path: FEDERATION_PATH,
        resource: "prometheusfederations",
    },
    Webhook {
        name: RESOURCE_WEBHOOK_NAME,
        path: RESOURCE_PATH,
        resource: "federatedresources",
    },
    Webhook {
        name: USER_WEBHOOK_NAME,
        path: USER_PATH,
        resource: "federatedkafkausers",
    },
];

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
    /// One of the webhook's reflectors stopped.
    #[error(transparent)]
    Cache(#[from] crate::kafka_topic::admission_cache::CacheStopped),
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

/// Runs the webhook on `listener`: its reflectors, the `caBundle` keeper and the HTTPS
/// server. Returns only when one of them ends.
pub async fn run(deps: WebhookDeps, listener: tokio::net::TcpListener) -> Result<(), WebhookError> {
    let tls = server::tls_config(&deps.ca_pem, &deps.serving)?;
    let (caches, reflectors) = crate::kafka_topic::admission_cache::Caches::new(deps.kube.clone());
    let recorder = EventRecorder::new(
        deps.kube.clone(),
        Reporter {
            controller: "accord-hub-webhook".into(),
            instance: Some(deps.replica.clone()),
        },
    );
    tokio::select! {
        r = reflectors => r.map_err(WebhookError::from),
        () = ca_bundle::keep_ca_bundle(deps.kube.clone(), deps.ca_pem.clone(), deps.gates.clone()) => Err(WebhookError::CaBundle),
        () = ca_bundle::keep_crd_ca_bundles(deps.kube.clone(), deps.ca_pem.clone(), deps.gates.clone()) => Err(WebhookError::CaBundle),
        r = server::serve(listener, tls, caches, recorder) => r,
    }
}
