//! Certificate renewal over the Sync stream: an agent sends `RenewCertificate` with a CSR
//! for a fresh key, the hub signs it for `--agent-cert-validity` and records the new key in
//! the cluster registry, keeping the replaced one (the stream's own) as `previous` until its
//! certificate expires, so an agent that could not store its new certificate is not locked
//! out. The registry write compares the record's `mod_revision`: a revoke or a `--force`
//! registration that lands in between wins, and the renewal is refused.

use accord_common::pki::{PkiError, cert_facts};
use accord_common::runtime::unix_millis;
use accord_proto::v1::{CertificateRenewed, HubMessage, RenewCertificate, hub_message};
use tonic::{Request, Status};
use tracing::{info, warn};

use super::AgentFacing;
use crate::store::StoreError;
use crate::store::registry::{ClusterRecord, PreviousKey};

/// How often a renewal re-reads the record when its conditional write lost to another
/// write that still accepts the stream's key (e.g. a label change); more means contention.
const WRITE_ATTEMPTS: usize = 3;

/// The client certificate a stream was opened with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamCertificate {
    /// `sha256:<hex>` of its SubjectPublicKeyInfo.
    pub spki_sha256: String,
    /// Its `notAfter`, in seconds since the Unix epoch.
    pub not_after_unix: i64,
}

impl StreamCertificate {
    /// The verified client certificate of a Sync request (TLS has checked it against the
    /// hub CA already).
    pub fn of_request<T>(request: &Request<T>) -> Result<Self, Status> {
        let facts = super::read_client_certificate(request, cert_facts)?;
        Ok(Self {
            spki_sha256: facts.spki_sha256,
            not_after_unix: facts.validity.not_after_unix,
        })
    }
}

/// Why a renewal was refused.
#[derive(Debug, thiserror::Error)]
pub enum RenewalError {
    /// The registry no longer accepts the stream's key: the cluster was revoked or joined
    /// again with `--force` (or the stream's certificate already expired).
    #[error(
        "cluster {cluster:?}: this certificate no longer speaks for the cluster (revoked or \
         registered again); it cannot be renewed"
    )]
    Denied {
        /// The stream's cluster.
        cluster: String,
    },
    /// The CSR could not be signed.
    #[error("certificate signing request: {0}")]
    Csr(#[source] PkiError),
    /// The registry could not be read or written.
    #[error("cluster registry: {0}")]
    Store(#[source] StoreError),
    /// Other writes to the record kept winning the race.
    #[error("the cluster's registry record kept changing; try again")]
    Contended,
}

impl RenewalError {
    /// The `result` label of `accord_hub_certificate_renewals_total`.
    pub fn result(&self) -> &'static str {
        match self {
            Self::Denied { .. } => "denied",
            Self::Csr(_) => "bad_csr",
            Self::Store(_) => "unavailable",
            Self::Contended => "contended",
        }
    }

    /// The status that ends the stream.
    pub fn status(&self) -> Status {
        let message = self.to_string();
        match self {
            Self::Denied { .. } => Status::permission_denied(message),
            Self::Csr(_) => Status::invalid_argument(message),
            Self::Store(_) => Status::unavailable(message),
            Self::Contended => Status::aborted(message),
        }
    }
}

/// The record after renewing `stream`'s key to `new_spki`, or `None` when `current` does
/// not accept the stream's key at `now_unix` (revoked, replaced, or expired). The stream's
/// key becomes `previous`, valid until its certificate's expiry; any older `previous` goes.
pub fn renewed_record(
    current: &ClusterRecord,
    stream: &StreamCertificate,
    new_spki: &str,
    now_unix: i64,
) -> Option<ClusterRecord> {
    if !current.accepts(&stream.spki_sha256, now_unix) {
        return None;
    }
    Some(ClusterRecord {
        spki_sha256: new_spki.to_owned(),
        previous: Some(PreviousKey {
            spki_sha256: stream.spki_sha256.clone(),
            not_after_unix: stream.not_after_unix,
        }),
        ..current.clone()
    })
}

/// Serves one `RenewCertificate` of `cluster`'s stream: the `CertificateRenewed` answer, or
/// the status that ends the stream. Counts and logs the outcome.
pub async fn answer(
    shared: &AgentFacing,
    cluster: &str,
    stream: &StreamCertificate,
    request: RenewCertificate,
) -> Result<HubMessage, Status> {
    let outcome = renew(shared, cluster, stream, &request.csr_pem).await;
    match outcome {
        Ok(renewed) => {
            shared.metrics.renewal("ok");
            info!(
                cluster,
                not_after_unix = renewed.not_after_unix,
                "renewed the agent's certificate"
            );
            Ok(HubMessage {
                body: Some(hub_message::Body::Renewed(renewed)),
            })
        }
        Err(e) => {
            shared.metrics.renewal(e.result());
            if let RenewalError::Store(inner) = &e {
                shared.metrics.error(inner.kind());
            }
            warn!(cluster, error = %e, "certificate renewal refused");
            Err(e.status())
        }
    }
}

async fn renew(
    shared: &AgentFacing,
    cluster: &str,
    stream: &StreamCertificate,
    csr_pem: &str,
) -> Result<CertificateRenewed, RenewalError> {
    let store = &shared.store;
    let denied = || RenewalError::Denied {
        cluster: cluster.to_owned(),
    };
    // Authorise before signing, so a revoked identity costs no signing work.
    let (mut current, mut revision) = store
        .get_cluster_versioned(cluster)
        .await
        .map_err(RenewalError::Store)?
        .ok_or_else(denied)?;
    if !current.accepts(&stream.spki_sha256, unix_millis() / 1000) {
        return Err(denied());
    }
    let signed = shared
        .ca
        .sign_agent_csr(csr_pem, cluster, shared.settings.cert_validity)
        .map_err(RenewalError::Csr)?;
    for _ in 0..WRITE_ATTEMPTS {
        let next = renewed_record(&current, stream, &signed.spki_sha256, unix_millis() / 1000)
            .ok_or_else(denied)?;
        if store
            .renew_cluster_key(&next, revision)
            .await
            .map_err(RenewalError::Store)?
        {
            return Ok(CertificateRenewed {
                certificate_pem: signed.cert_pem,
                ca_certificate_pem: shared.ca.cert_pem().to_owned(),
                not_after_unix: signed.not_after_unix,
            });
        }
        (current, revision) = store
            .get_cluster_versioned(cluster)
            .await
            .map_err(RenewalError::Store)?
            .ok_or_else(denied)?;
    }
    Err(RenewalError::Contended)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn record(spki: &str, previous: Option<PreviousKey>) -> ClusterRecord {
        ClusterRecord {
            name: "east".into(),
            spki_sha256: spki.into(),
            labels: BTreeMap::from([("region".to_owned(), "eu".to_owned())]),
            registered_unix: 7,
            previous,
        }
    }

    fn stream(spki: &str, not_after_unix: i64) -> StreamCertificate {
        StreamCertificate {
            spki_sha256: spki.into(),
            not_after_unix,
        }
    }

    #[test]
    fn a_renewal_records_the_new_key_and_keeps_the_streams_key_until_it_expires() {
        let next = renewed_record(&record("k1", None), &stream("k1", 500), "k2", 100).unwrap();
        assert_eq!(next.spki_sha256, "k2");
        assert_eq!(
            next.previous,
            Some(PreviousKey {
                spki_sha256: "k1".into(),
                not_after_unix: 500
            })
        );
        assert_eq!((next.labels.len(), next.registered_unix), (1, 7));
        assert!(next.accepts("k1", 499) && !next.accepts("k1", 500));
        assert!(next.accepts("k2", 10_000));
    }

    #[test]
    fn a_stream_on_the_previous_key_renews_from_it_and_the_unused_key_goes() {
        // The agent renewed (k2) but kept talking with k1, then renewed again: k1, the key
        // it holds, stays accepted; k2, which it never used, does not.
        let current = record(
            "k2",
            Some(PreviousKey {
                spki_sha256: "k1".into(),
                not_after_unix: 500,
            }),
        );
        let next = renewed_record(&current, &stream("k1", 500), "k3", 100).unwrap();
        assert_eq!(next.spki_sha256, "k3");
        assert_eq!(next.previous.as_ref().unwrap().spki_sha256, "k1");
        assert!(!next.accepts("k2", 100));
    }

    #[test]
    fn a_key_the_record_no_longer_accepts_is_not_renewed() {
        // Replaced by --force: the record knows another key and no previous one.
        assert_eq!(
            renewed_record(&record("forced", None), &stream("k1", 500), "k2", 100),
            None
        );
        // The previous key after its certificate expired.
        let current = record(
            "k2",
            Some(PreviousKey {
                spki_sha256: "k1".into(),
                not_after_unix: 500,
            }),
        );
        assert_eq!(
            renewed_record(&current, &stream("k1", 500), "k3", 500),
            None
        );
    }

    #[test]
    fn refusals_end_the_stream_with_a_status_that_says_why() {
        let denied = RenewalError::Denied {
            cluster: "east".into(),
        };
        assert_eq!(denied.status().code(), tonic::Code::PermissionDenied);
        assert_eq!(denied.result(), "denied");
        let bad = RenewalError::Csr(PkiError::CsrSignature);
        assert_eq!(bad.status().code(), tonic::Code::InvalidArgument);
        assert_eq!(
            RenewalError::Contended.status().code(),
            tonic::Code::Aborted
        );
    }
}
