//! Identities carried by certificates: cluster names, SPKI hashes, what the hub reads from a
//! verified client certificate, and the agent's key pair and CSR.

use std::fmt;

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, KeyPair,
    KeyUsagePurpose, SanType,
};
use sha2::{Digest, Sha256};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

use super::PkiError;

/// Prefix of the URI SAN that names the cluster in agent certificates:
/// `accord://cluster/<name>`.
pub const CLUSTER_URI_PREFIX: &str = "accord://cluster/";

/// PEM tag of certificates.
pub(crate) const PEM_CERTIFICATE: &str = "CERTIFICATE";

/// The URI SAN naming `cluster`, `accord://cluster/<name>`.
pub fn cluster_uri(cluster: &str) -> String {
    format!("{CLUSTER_URI_PREFIX}{cluster}")
}

/// Checks that `name` is a DNS-1123 label, the form cluster names take everywhere in Accord.
pub fn validate_cluster_name(name: &str) -> Result<(), PkiError> {
    if accord_crds::validate::is_dns1123_label(name) {
        Ok(())
    } else {
        Err(PkiError::InvalidClusterName {
            name: name.to_owned(),
        })
    }
}

/// `sha256:<hex>` of a DER SubjectPublicKeyInfo.
pub(crate) fn sha256_tagged(spki_der: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(spki_der)))
}

/// Parses one DER certificate, refusing trailing bytes.
pub(crate) fn parse_cert<'a>(
    der: &'a [u8],
    what: &'static str,
) -> Result<X509Certificate<'a>, PkiError> {
    let (rest, cert) =
        X509Certificate::from_der(der).map_err(|e| PkiError::MalformedCertificate {
            what,
            reason: format!("not a DER X.509 certificate ({e})"),
        })?;
    if !rest.is_empty() {
        return Err(PkiError::MalformedCertificate {
            what,
            reason: format!("{} trailing bytes after the certificate", rest.len()),
        });
    }
    Ok(cert)
}

/// The DER certificates of a PEM bundle, in order; other PEM blocks are an error.
pub(crate) fn pem_certs(pem_text: &str, what: &'static str) -> Result<Vec<Vec<u8>>, PkiError> {
    let blocks = pem::parse_many(pem_text).map_err(|e| PkiError::MalformedCertificate {
        what,
        reason: format!("not valid PEM ({e})"),
    })?;
    if blocks.is_empty() {
        return Err(PkiError::MalformedCertificate {
            what,
            reason: "no PEM block found (expected -----BEGIN CERTIFICATE-----)".into(),
        });
    }
    blocks
        .into_iter()
        .map(|b| {
            if b.tag() == PEM_CERTIFICATE {
                Ok(b.into_contents())
            } else {
                Err(PkiError::MalformedCertificate {
                    what,
                    reason: format!(
                        "found a {:?} PEM block where a CERTIFICATE was expected",
                        b.tag()
                    ),
                })
            }
        })
        .collect()
}

/// PEM text of one DER object, with `\n` line endings.
pub(crate) fn to_pem(tag: &str, der: &[u8]) -> String {
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    pem::encode_config(&pem::Pem::new(tag, der), config)
}

/// `sha256:<hex>` of the SubjectPublicKeyInfo of a DER certificate. The hub records it as the
/// key identity of a joined cluster.
pub fn spki_sha256(cert_der: &[u8]) -> Result<String, PkiError> {
    let cert = parse_cert(cert_der, "certificate")?;
    Ok(sha256_tagged(cert.tbs_certificate.subject_pki.raw))
}

/// The `--ca-cert-hash` of a PEM CA certificate (its first certificate if a bundle):
/// `sha256:<hex>` of its SubjectPublicKeyInfo, as `kubeadm` computes it and as
/// `openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | sha256sum` prints it.
pub fn ca_cert_hash_of(cert_pem: &str) -> Result<String, PkiError> {
    let ders = pem_certs(cert_pem, "CA certificate")?;
    let first = ders.first().ok_or_else(|| PkiError::MalformedCertificate {
        what: "CA certificate",
        reason: "no certificate found".into(),
    })?;
    spki_sha256(first)
}

/// Parses a `--ca-cert-hash` value (`sha256:` and 64 hex digits, either case) into its
/// canonical form `sha256:<lowercase hex>`.
pub fn parse_ca_cert_hash(given: &str) -> Result<String, PkiError> {
    let invalid = || PkiError::InvalidCaCertHash {
        given: given.to_owned(),
    };
    let trimmed = given.trim();
    let (algo, hex_part) = trimmed.split_once(':').ok_or_else(invalid)?;
    if !algo.eq_ignore_ascii_case("sha256")
        || hex_part.len() != 64
        || !hex_part.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Err(invalid());
    }
    Ok(format!("sha256:{}", hex_part.to_ascii_lowercase()))
}

/// What the hub learns from a verified client certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The cluster the certificate was issued to (its subject CN).
    pub cluster: String,
    /// `sha256:<hex>` of the certificate's SubjectPublicKeyInfo: which key the agent holds.
    pub spki_sha256: String,
}

/// Reads the cluster identity from a client certificate that TLS has already verified
/// against the hub CA. The subject must have exactly one CN, a valid cluster name; when the
/// certificate carries an `accord://cluster/<name>` URI SAN it must name the same cluster.
pub fn peer_identity(cert_der: &[u8]) -> Result<PeerIdentity, PkiError> {
    let cert = parse_cert(cert_der, "client certificate")?;
    let refuse = |reason: String| PkiError::PeerIdentity { reason };

    let mut cns = cert.subject().iter_common_name();
    let cn = cns
        .next()
        .ok_or_else(|| refuse("its subject has no common name".into()))?;
    if cns.next().is_some() {
        return Err(refuse("its subject has more than one common name".into()));
    }
    let cluster = cn
        .as_str()
        .map_err(|_| refuse("its common name is not a text string".into()))?;
    if validate_cluster_name(cluster).is_err() {
        return Err(refuse(format!(
            "its common name {cluster:?} is not a valid cluster name"
        )));
    }

    let sans = cert
        .subject_alternative_name()
        .map_err(|e| refuse(format!("its subjectAltName extension is malformed ({e})")))?;
    for name in sans.iter().flat_map(|ext| ext.value.general_names.iter()) {
        if let GeneralName::URI(uri) = name
            && let Some(named) = uri.strip_prefix(CLUSTER_URI_PREFIX)
            && named != cluster
        {
            return Err(refuse(format!(
                "its URI SAN {uri:?} names cluster {named:?} but its common name is {cluster:?}"
            )));
        }
    }

    Ok(PeerIdentity {
        cluster: cluster.to_owned(),
        spki_sha256: sha256_tagged(cert.tbs_certificate.subject_pki.raw),
    })
}

/// The identity of the agent behind a gRPC request on the hub's mTLS server, for services
/// that must not be called anonymously (Sync). The TLS layer has already verified the
/// certificate against the hub CA; this reads the cluster from it. A request without a client
/// certificate gets `UNAUTHENTICATED` with a message that says how to get one.
pub fn request_peer_identity<T>(
    request: &tonic::Request<T>,
) -> Result<PeerIdentity, tonic::Status> {
    let certs = request.peer_certs();
    let leaf = certs.as_deref().and_then(|c| c.first()).ok_or_else(|| {
        tonic::Status::unauthenticated(
            "this call needs the agent's client certificate (mutual TLS); join the cluster \
             with `accord-agent join` first, then connect with the identity it stored",
        )
    })?;
    peer_identity(leaf).map_err(Into::into)
}

/// An agent's fresh key pair and the CSR made with it. The private key stays with the agent;
/// only `csr_pem` goes to the hub.
#[derive(Clone)]
pub struct AgentCsr {
    /// PEM PKCS#10 certificate signing request, for `RegisterRequest.csr_pem`.
    pub csr_pem: String,
    /// PEM PKCS#8 private key (ECDSA P-256). Secret: store it, never log it.
    pub key_pem: String,
}

impl fmt::Debug for AgentCsr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentCsr")
            .field("csr_pem", &self.csr_pem)
            .field("key_pem", &"[redacted]")
            .finish()
    }
}

/// Agent side of the join: generates a fresh ECDSA P-256 key pair and a CSR for `cluster`.
pub fn agent_csr(cluster: &str) -> Result<AgentCsr, PkiError> {
    validate_cluster_name(cluster)?;
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|source| {
        PkiError::Generate {
            action: "generate the agent key pair",
            source,
        }
    })?;
    let csr_pem = csr_for_key(cluster, &key)?;
    Ok(AgentCsr {
        csr_pem,
        key_pem: key.serialize_pem(),
    })
}

/// A CSR for `cluster` made with an existing PEM PKCS#8 private key, e.g. to renew a
/// certificate without changing the agent's key.
pub fn agent_csr_with_key(cluster: &str, key_pem: &str) -> Result<String, PkiError> {
    validate_cluster_name(cluster)?;
    let key = KeyPair::from_pem(key_pem).map_err(|source| PkiError::MalformedKey {
        what: "agent private key",
        source,
    })?;
    csr_for_key(cluster, &key)
}

fn csr_for_key(cluster: &str, key: &KeyPair) -> Result<String, PkiError> {
    let generate = |source| PkiError::Generate {
        action: "build the certificate signing request",
        source,
    };
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cluster);
    params.distinguished_name = dn;
    // What the agent asks for mirrors what the hub will issue; the hub decides regardless.
    let uri = cluster_uri(cluster).try_into().map_err(generate)?;
    params.subject_alt_names = vec![SanType::URI(uri)];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params
        .serialize_request(key)
        .and_then(|csr| csr.pem())
        .map_err(generate)
}
