//! Client certificate renewal over the Sync stream (DESIGN section 5): at two thirds of the
//! certificate's lifetime (from its notBefore/notAfter) the agent sends `RenewCertificate`
//! with a CSR for a fresh key; on `CertificateRenewed` it checks the certificate, stores it
//! with the key in its identity (Secret or `--identity-dir`), and the connection reconnects
//! with it. A failure keeps the old certificate (the hub still accepts it) and retries with
//! backoff, so no member has to be joined again because its certificate aged.
//!
//! The connection loop owns one [`Renewal`] across its streams; the timing decisions are
//! pure functions of the certificate's window and the clock, tested without a hub.

use std::fmt;
use std::time::Duration;

use accord_common::pki::{CertValidity, PkiError, agent_csr, cert_facts_pem, peer_identity};
use accord_common::runtime::{Retry, backoff};
use accord_proto::v1::{AgentMessage, CertificateRenewed, RenewCertificate, agent_message};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio::time::Instant;

use crate::identity::{Identity, IdentityError, IdentitySource};

/// How long the hub may take to answer a renewal before the agent gives up on it (the
/// stream stays; the request is retried later).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// Shortest wait before retrying a failed renewal.
pub const MIN_RETRY_DELAY: Duration = Duration::from_secs(1);
/// Longest wait before retrying a failed renewal.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);

/// When a certificate with `validity` is due for renewal, in milliseconds since the Unix
/// epoch: two thirds into its lifetime, leaving a third for retries.
pub fn due_unix_millis(validity: CertValidity) -> i64 {
    let start = validity.not_before_unix.saturating_mul(1000);
    let lifetime = validity
        .not_after_unix
        .saturating_sub(validity.not_before_unix)
        .max(0)
        .saturating_mul(1000);
    start.saturating_add(lifetime / 3 * 2)
}

/// Why a renewal failed; the old certificate stays in use.
#[derive(Debug, thiserror::Error)]
pub enum RenewalError {
    /// The certificate in use could not be read, so its lifetime is unknown.
    #[error("reading the client certificate in use: {0}")]
    Certificate(#[source] PkiError),
    /// No key or CSR could be made.
    #[error("making the certificate signing request: {0}")]
    Csr(#[source] PkiError),
    /// The hub did not answer in time.
    #[error("the hub did not answer the renewal within {}s", .0.as_secs())]
    Timeout(Duration),
    /// The stream ended before the hub answered (the hub refuses with a status saying why).
    #[error("the stream ended before the hub answered the renewal")]
    StreamEnded,
    /// The hub's certificate is not one the agent can use.
    #[error("the renewed certificate is unusable: {0}")]
    Invalid(String),
    /// The certificate and key could not be stored in the identity.
    #[error("storing the renewed certificate: {0}")]
    Store(#[source] IdentityError),
}

impl RenewalError {
    /// The `result` label of `accord_agent_certificate_renewals_total`.
    pub fn result(&self) -> &'static str {
        match self {
            Self::Certificate(_) => "certificate",
            Self::Csr(_) => "csr",
            Self::Timeout(_) => "timeout",
            Self::StreamEnded => "stream_ended",
            Self::Invalid(_) => "invalid",
            Self::Store(_) => "store",
        }
    }
}

/// A renewal request in flight: the fresh key waits for its certificate.
struct Pending {
    key_pem: String,
    deadline: Instant,
}

// The private key never reaches a log line.
impl fmt::Debug for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pending")
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// Renewal state of one agent, kept across its streams.
pub struct Renewal {
    retry: Retry,
    /// After a failure: no new request before this.
    not_before: Option<Instant>,
    pending: Option<Pending>,
}

impl fmt::Debug for Renewal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Renewal")
            .field("not_before", &self.not_before)
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

impl Default for Renewal {
    fn default() -> Self {
        Self::new()
    }
}

impl Renewal {
    /// No renewal in flight, none failed.
    pub fn new() -> Self {
        Self {
            retry: backoff(MIN_RETRY_DELAY, MAX_RETRY_DELAY),
            not_before: None,
            pending: None,
        }
    }

    /// When to send the next request for a certificate with `validity`, given the wall
    /// clock `now_unix_millis` and the monotonic `now`: at its due time, or after the
    /// backoff of a failure, whichever is later. Past either means now.
    pub fn next_request_at(
        &self,
        validity: CertValidity,
        now_unix_millis: i64,
        now: Instant,
    ) -> Instant {
        let until_due = due_unix_millis(validity).saturating_sub(now_unix_millis);
        let due = now + Duration::from_millis(u64::try_from(until_due).unwrap_or(0));
        match self.not_before {
            Some(after) if after > due => after,
            _ => due,
        }
    }

    /// Whether a request waits for its answer.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// When the request in flight times out.
    pub fn deadline(&self) -> Option<Instant> {
        self.pending.as_ref().map(|p| p.deadline)
    }

    /// A request for `cluster` with a fresh key, to send on the stream now; the key stays
    /// here until the answer.
    pub fn start(&mut self, cluster: &str, now: Instant) -> Result<AgentMessage, RenewalError> {
        let csr = agent_csr(cluster).map_err(RenewalError::Csr)?;
        self.pending = Some(Pending {
            key_pem: csr.key_pem,
            deadline: now + ANSWER_TIMEOUT,
        });
        Ok(AgentMessage {
            cluster: cluster.to_owned(),
            body: Some(agent_message::Body::Renew(RenewCertificate {
                csr_pem: csr.csr_pem,
            })),
        })
    }

    /// The identity with the hub's answer: the certificate must name the identity's
    /// cluster, certify the key of the request in flight and not be expired at
    /// `now_unix`. `None` when no request is in flight (an answer to nothing).
    pub fn accept(
        &mut self,
        identity: &Identity,
        renewed: &CertificateRenewed,
        now_unix: i64,
    ) -> Option<Result<Identity, RenewalError>> {
        let pending = self.pending.take()?;
        Some(check(identity, renewed, &pending.key_pem, now_unix))
    }

    /// Records a failure: the request in flight (if any) is dropped and the next one waits
    /// for the backoff.
    pub fn failed(&mut self, now: Instant) {
        self.pending = None;
        self.not_before = Some(now + self.retry.next_delay());
    }

    /// Records a success: the backoff starts over.
    pub fn succeeded(&mut self) {
        self.pending = None;
        self.not_before = None;
        self.retry = backoff(MIN_RETRY_DELAY, MAX_RETRY_DELAY);
    }

    /// Stores an accepted identity's certificate and key where the identity comes from.
    pub async fn store(
        source: &IdentitySource,
        client: &kube::Client,
        renewed: &Identity,
    ) -> Result<(), RenewalError> {
        source
            .store_certificate(client, &renewed.cert_pem, renewed.key_pem())
            .await
            .map_err(RenewalError::Store)
    }
}

fn check(
    identity: &Identity,
    renewed: &CertificateRenewed,
    key_pem: &str,
    now_unix: i64,
) -> Result<Identity, RenewalError> {
    let invalid = |why: String| RenewalError::Invalid(why);
    let facts = cert_facts_pem(&renewed.certificate_pem).map_err(|e| invalid(e.to_string()))?;
    let key_spki =
        accord_common::pki::key_spki_sha256(key_pem).map_err(|e| invalid(e.to_string()))?;
    if facts.spki_sha256 != key_spki {
        return Err(invalid(
            "it certifies another key than the one the agent asked for".into(),
        ));
    }
    if facts.validity.not_after_unix <= now_unix {
        return Err(invalid("it has already expired".into()));
    }
    let leaf = CertificateDer::pem_slice_iter(renewed.certificate_pem.as_bytes())
        .next()
        .ok_or_else(|| invalid("no certificate in the answer".into()))?
        .map_err(|e| invalid(format!("not valid PEM: {e}")))?;
    let named = peer_identity(leaf.as_ref()).map_err(|e| invalid(e.to_string()))?;
    if named.cluster != identity.cluster {
        return Err(invalid(format!(
            "it names cluster {:?}, not {:?}",
            named.cluster, identity.cluster
        )));
    }
    Ok(identity.with_certificate(renewed.certificate_pem.clone(), key_pem.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::pki::HubCa;
    use std::collections::BTreeMap;

    fn window(not_before_unix: i64, not_after_unix: i64) -> CertValidity {
        CertValidity {
            not_before_unix,
            not_after_unix,
        }
    }

    #[test]
    fn a_certificate_is_due_two_thirds_into_its_lifetime() {
        assert_eq!(due_unix_millis(window(1_000, 1_060)), 1_040_000);
        assert_eq!(due_unix_millis(window(0, 90 * 86_400)), 60 * 86_400 * 1000);
        // A window upside down is due at its start, not in the far future.
        assert_eq!(due_unix_millis(window(1_000, 900)), 1_000_000);
    }

    #[tokio::test(start_paused = true)]
    async fn the_request_waits_for_the_due_time_and_a_due_certificate_renews_at_once() {
        let renewal = Renewal::new();
        let now = Instant::now();
        let at = renewal.next_request_at(window(1_000, 1_060), 1_010_000, now);
        assert_eq!(at - now, Duration::from_secs(30));
        let overdue = renewal.next_request_at(window(1_000, 1_060), 1_050_000, now);
        assert_eq!(overdue, now);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_delays_the_next_request_and_a_success_clears_the_delay() {
        let mut renewal = Renewal::new();
        let now = Instant::now();
        renewal.failed(now);
        let after_failure = renewal.next_request_at(window(1_000, 1_060), 1_050_000, now);
        assert!(
            after_failure > now,
            "a due certificate still waits for the backoff"
        );
        assert!(after_failure <= now + MAX_RETRY_DELAY);
        renewal.succeeded();
        assert_eq!(
            renewal.next_request_at(window(1_000, 1_060), 1_050_000, now),
            now
        );
    }

    fn identity(cluster: &str, ca: &HubCa) -> Identity {
        let csr = agent_csr(cluster).unwrap();
        let signed = ca
            .sign_agent_csr(&csr.csr_pem, cluster, Duration::from_secs(60))
            .unwrap();
        let entries: BTreeMap<String, Vec<u8>> = [
            ("hub-url", "https://127.0.0.1:7443"),
            ("cluster-name", cluster),
            ("ca.crt", ca.cert_pem()),
            ("tls.crt", signed.cert_pem.as_str()),
            ("tls.key", csr.key_pem.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.as_bytes().to_vec()))
        .collect();
        Identity::from_entries("test", &entries).unwrap()
    }

    /// Signs the CSR of `request` as the hub would.
    fn answer(ca: &HubCa, request: &AgentMessage, cluster: &str) -> CertificateRenewed {
        let Some(agent_message::Body::Renew(renew)) = &request.body else {
            panic!("not a renewal: {request:?}");
        };
        let signed = ca
            .sign_agent_csr(&renew.csr_pem, cluster, Duration::from_secs(60))
            .unwrap();
        CertificateRenewed {
            certificate_pem: signed.cert_pem,
            ca_certificate_pem: ca.cert_pem().to_owned(),
            not_after_unix: signed.not_after_unix,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_hubs_certificate_for_the_fresh_key_replaces_the_old_one() {
        let ca = HubCa::generate("test-ca").unwrap();
        let old = identity("east", &ca);
        let mut renewal = Renewal::new();
        let request = renewal.start("east", Instant::now()).unwrap();
        assert_eq!(request.cluster, "east");
        assert!(renewal.is_pending());
        let renewed = answer(&ca, &request, "east");
        let fresh = renewal
            .accept(&old, &renewed, accord_common::runtime::unix_millis() / 1000)
            .unwrap()
            .unwrap();
        assert_eq!(fresh.cert_pem, renewed.certificate_pem);
        assert_ne!(fresh.key_pem(), old.key_pem());
        assert_eq!(
            (fresh.cluster.as_str(), &fresh.hub_url),
            ("east", &old.hub_url)
        );
        assert!(!renewal.is_pending());
    }

    #[tokio::test(start_paused = true)]
    async fn a_certificate_for_another_key_or_cluster_or_no_request_is_refused() {
        let ca = HubCa::generate("test-ca").unwrap();
        let old = identity("east", &ca);
        let now_unix = accord_common::runtime::unix_millis() / 1000;
        let mut renewal = Renewal::new();

        // Nothing asked: no answer is taken.
        let stray = answer(
            &ca,
            &Renewal::new().start("east", Instant::now()).unwrap(),
            "east",
        );
        assert!(renewal.accept(&old, &stray, now_unix).is_none());

        // A certificate for a key the agent does not hold.
        renewal.start("east", Instant::now()).unwrap();
        let err = renewal.accept(&old, &stray, now_unix).unwrap().unwrap_err();
        assert!(matches!(err, RenewalError::Invalid(_)), "{err}");
        assert!(err.to_string().contains("another key"), "{err}");

        // A certificate naming another cluster.
        let request = renewal.start("east", Instant::now()).unwrap();
        let west = answer(&ca, &request, "west");
        let err = renewal.accept(&old, &west, now_unix).unwrap().unwrap_err();
        assert!(err.to_string().contains("west"), "{err}");

        // Garbage.
        renewal.start("east", Instant::now()).unwrap();
        let garbage = CertificateRenewed {
            certificate_pem: "not a certificate".into(),
            ..Default::default()
        };
        let err = renewal
            .accept(&old, &garbage, now_unix)
            .unwrap()
            .unwrap_err();
        assert_eq!(err.result(), "invalid");
    }

    #[test]
    fn debug_output_never_shows_the_pending_key() {
        let mut renewal = Renewal::new();
        renewal.pending = Some(Pending {
            key_pem: "-----BEGIN PRIVATE KEY-----secret".into(),
            deadline: Instant::now(),
        });
        assert!(!format!("{renewal:?}").contains("PRIVATE"));
    }
}
