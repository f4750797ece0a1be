//! The hub CA: generating it, keeping it in a Secret of the management cluster, and issuing
//! agent client certificates and the hub's serving certificate with it.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber, SubjectPublicKeyInfo,
};
use time::OffsetDateTime;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::prelude::FromDer;
use x509_parser::public_key::PublicKey;

use super::PkiError;
use super::identity::{
    PEM_CERTIFICATE, cluster_uri, parse_cert, pem_certs, sha256_tagged, to_pem,
    validate_cluster_name,
};

/// Key of the CA certificate (PEM) in the CA Secret.
pub const CA_CERT_KEY: &str = "tls.crt";
/// Key of the CA private key (PEM PKCS#8) in the CA Secret.
pub const CA_KEY_KEY: &str = "tls.key";
/// Name of the CA Secret in the hub's namespace unless configured otherwise.
pub const DEFAULT_CA_SECRET_NAME: &str = "accord-hub-ca";
/// Subject CN of a CA created by [`HubCa::load_or_create`].
pub const DEFAULT_CA_COMMON_NAME: &str = "accord-hub-ca";

/// Annotation on the CA Secret with the CA's `--ca-cert-hash`, for operators.
const CA_CERT_HASH_ANNOTATION: &str = "accord.io/ca-cert-hash";
/// Lifetime of a generated CA. Long, because replacing it means re-joining every agent.
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// How far `notBefore` is moved into the past, so that an agent whose clock is slightly
/// behind the hub's accepts a certificate issued a moment ago.
const BACKDATE: Duration = Duration::from_secs(5 * 60);
/// Longest lifetime the hub puts on a leaf certificate.
const MAX_LEAF_VALIDITY: Duration = Duration::from_secs(5 * 365 * 24 * 3600);
/// Smallest RSA modulus accepted in a CSR.
const MIN_RSA_BITS: usize = 2048;
/// What to say when a CSR's key is refused.
const SUPPORTED_KEYS: &str =
    "use ECDSA P-256 (as `accord-agent` does), ECDSA P-384, Ed25519 or RSA of 2048+ bits";
/// A CA this close to expiry is reported loudly at load time.
const CA_EXPIRY_WARNING: Duration = Duration::from_secs(365 * 24 * 3600);

/// The hub's certificate authority: its certificate and signing key. Cheap to clone (shared).
///
/// `Debug` shows the subject, hash and expiry, never the key.
#[derive(Clone)]
pub struct HubCa {
    inner: Arc<Inner>,
}

struct Inner {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
    ca_cert_hash: String,
    common_name: String,
    not_after_unix: i64,
}

impl fmt::Debug for HubCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HubCa")
            .field("common_name", &self.inner.common_name)
            .field("ca_cert_hash", &self.inner.ca_cert_hash)
            .field("not_after_unix", &self.inner.not_after_unix)
            .finish_non_exhaustive()
    }
}

/// A certificate the hub signed for an agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedCert {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its `notAfter`, Unix seconds. The agent renews before it.
    pub not_after_unix: i64,
    /// `sha256:<hex>` of its SubjectPublicKeyInfo: which key the agent holds.
    pub spki_sha256: String,
}

/// A certificate and its private key, PEM. `Debug` never prints the key.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyPairPem {
    /// The certificate, PEM (the leaf only, not the chain).
    pub cert_pem: String,
    /// The private key, PEM PKCS#8. Secret.
    pub key_pem: String,
}

impl fmt::Debug for KeyPairPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyPairPem")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"[redacted]")
            .finish()
    }
}

impl HubCa {
    /// Generates a new CA: ECDSA P-256, ten years, `CA:TRUE` with path length 0 (it signs
    /// leaves only), key usages keyCertSign, cRLSign and digitalSignature.
    pub fn generate(common_name: &str) -> Result<Self, PkiError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|source| {
            PkiError::Generate {
                action: "generate the hub CA key",
                source,
            }
        })?;
        let now = OffsetDateTime::now_utc();
        let mut params = CertificateParams::default();
        params.distinguished_name = common_name_dn(common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = now - BACKDATE;
        params.not_after = now + CA_VALIDITY;
        params.serial_number = Some(random_serial());
        let cert = params
            .self_signed(&key)
            .map_err(|source| PkiError::Generate {
                action: "self-sign the hub CA certificate",
                source,
            })?;
        Self::from_parts(cert.der(), key)
    }

    /// Loads a CA from PEM: the certificate (the first of a bundle) and its PKCS#8 private key.
    /// Refuses a certificate that is not a CA and a key that does not belong to it.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, PkiError> {
        let ders = pem_certs(cert_pem, "hub CA certificate")?;
        let der = ders.first().ok_or_else(|| PkiError::MalformedCertificate {
            what: "hub CA certificate",
            reason: "no certificate found".into(),
        })?;
        let key = KeyPair::from_pem(key_pem).map_err(|source| PkiError::MalformedKey {
            what: "hub CA private key",
            source,
        })?;
        Self::from_parts(der, key)
    }

    fn from_parts(cert_der: &[u8], key: KeyPair) -> Result<Self, PkiError> {
        let what = "hub CA certificate";
        let cert = parse_cert(cert_der, what)?;
        let is_ca = cert
            .basic_constraints()
            .map_err(|e| PkiError::MalformedCertificate {
                what,
                reason: format!("bad basicConstraints ({e})"),
            })?
            .is_some_and(|bc| bc.value.ca);
        let may_sign = cert
            .key_usage()
            .map_err(|e| PkiError::MalformedCertificate {
                what,
                reason: format!("bad keyUsage ({e})"),
            })?
            .is_none_or(|ku| ku.value.key_cert_sign());
        if !is_ca || !may_sign {
            return Err(PkiError::NotACa);
        }
        let spki = cert.tbs_certificate.subject_pki.raw;
        if rcgen::PublicKeyData::subject_public_key_info(&key) != spki {
            return Err(PkiError::KeyMismatch);
        }
        let common_name = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .unwrap_or_default()
            .to_owned();
        let not_after_unix = cert.validity().not_after.timestamp();
        let ca_cert_hash = sha256_tagged(spki);
        let issuer = Issuer::from_ca_cert_der(&cert_der.to_vec().into(), key).map_err(|e| {
            PkiError::MalformedCertificate {
                what,
                reason: e.to_string(),
            }
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                cert_pem: to_pem(PEM_CERTIFICATE, cert_der),
                issuer,
                ca_cert_hash,
                common_name,
                not_after_unix,
            }),
        })
    }

    /// Loads the CA from Secret `secret_name` in `namespace` of the management cluster, or
    /// `None` when there is no such Secret (or namespace).
    pub async fn load(
        client: kube::Client,
        namespace: &str,
        secret_name: &str,
    ) -> Result<Option<Self>, PkiError> {
        let api: Api<Secret> = Api::namespaced(client, namespace);
        let secret = api
            .get_opt(secret_name)
            .await
            .map_err(|source| PkiError::Kube {
                action: "read",
                namespace: namespace.to_owned(),
                name: secret_name.to_owned(),
                source: Box::new(source),
            })?;
        secret.as_ref().map(Self::from_secret).transpose()
    }

    /// Loads the CA from Secret `secret_name` in `namespace` of the management cluster, or
    /// creates it there. Creation races between hub replicas are settled by the API server:
    /// whoever loses gets 409 AlreadyExists and reads back the winner's CA, so every replica
    /// ends with the same one. An existing Secret that does not hold a usable CA is an error,
    /// never overwritten (that would orphan every joined agent).
    pub async fn load_or_create(
        client: kube::Client,
        namespace: &str,
        secret_name: &str,
    ) -> Result<Self, PkiError> {
        if let Some(ca) = Self::load(client.clone(), namespace, secret_name).await? {
            ca.log_loaded("loaded hub CA", namespace, secret_name);
            return Ok(ca);
        }
        let api: Api<Secret> = Api::namespaced(client, namespace);
        let kube_err = |action: &'static str| {
            move |source| PkiError::Kube {
                action,
                namespace: namespace.to_owned(),
                name: secret_name.to_owned(),
                source: Box::new(source),
            }
        };

        let ca = Self::generate(DEFAULT_CA_COMMON_NAME)?;
        match api
            .create(
                &PostParams::default(),
                &ca.to_secret(namespace, secret_name),
            )
            .await
        {
            Ok(_) => {
                ca.log_loaded("created hub CA", namespace, secret_name);
                Ok(ca)
            }
            Err(kube::Error::Api(status)) if status.is_already_exists() => {
                // Another replica created it between our read and our create: use theirs.
                let secret = api.get(secret_name).await.map_err(kube_err("read back"))?;
                let theirs = Self::from_secret(&secret)?;
                theirs.log_loaded(
                    "loaded hub CA created concurrently by another replica",
                    namespace,
                    secret_name,
                );
                Ok(theirs)
            }
            Err(e) => Err(kube_err("create")(e)),
        }
    }

    /// Reads the CA from a Secret with keys [`CA_CERT_KEY`] and [`CA_KEY_KEY`].
    pub fn from_secret(secret: &Secret) -> Result<Self, PkiError> {
        let namespace = secret.metadata.namespace.clone().unwrap_or_default();
        let name = secret.metadata.name.clone().unwrap_or_default();
        let bad = |reason: String| PkiError::BadCaSecret {
            namespace: namespace.clone(),
            name: name.clone(),
            reason,
        };
        let field = |key: &str| -> Result<String, PkiError> {
            let bytes = secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .ok_or_else(|| bad(format!("key {key:?} is missing")))?;
            String::from_utf8(bytes.0.clone()).map_err(|_| bad(format!("key {key:?} is not text")))
        };
        let cert_pem = field(CA_CERT_KEY)?;
        let key_pem = field(CA_KEY_KEY)?;
        Self::from_pem(&cert_pem, &key_pem).map_err(|e| bad(e.to_string()))
    }

    /// The Secret that stores this CA (type Opaque, keys [`CA_CERT_KEY`], [`CA_KEY_KEY`]),
    /// annotated with the CA's `--ca-cert-hash`.
    pub fn to_secret(&self, namespace: &str, name: &str) -> Secret {
        let labels = BTreeMap::from([
            ("app.kubernetes.io/name".to_owned(), "accord-hub".to_owned()),
            ("app.kubernetes.io/component".to_owned(), "ca".to_owned()),
            (
                "app.kubernetes.io/managed-by".to_owned(),
                "accord-hub".to_owned(),
            ),
        ]);
        let annotations =
            BTreeMap::from([(CA_CERT_HASH_ANNOTATION.to_owned(), self.ca_cert_hash())]);
        let data = BTreeMap::from([
            (
                CA_CERT_KEY.to_owned(),
                ByteString(self.cert_pem().as_bytes().to_vec()),
            ),
            (
                CA_KEY_KEY.to_owned(),
                ByteString(self.key_pem().into_bytes()),
            ),
        ]);
        Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                labels: Some(labels),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(data),
            ..Secret::default()
        }
    }

    fn log_loaded(&self, what: &str, namespace: &str, name: &str) {
        let now = OffsetDateTime::now_utc().unix_timestamp();
        let left = self.inner.not_after_unix - now;
        tracing::info!(
            secret = %format!("{namespace}/{name}"),
            ca_cert_hash = %self.inner.ca_cert_hash,
            not_after_unix = self.inner.not_after_unix,
            "{what}"
        );
        if left <= 0 {
            tracing::error!(
                not_after_unix = self.inner.not_after_unix,
                "the hub CA has expired: agents cannot verify the hub or renew their \
                 certificates; replace the CA and re-join the agents"
            );
        } else if i64::try_from(CA_EXPIRY_WARNING.as_secs()).is_ok_and(|w| left < w) {
            tracing::warn!(
                not_after_unix = self.inner.not_after_unix,
                days_left = left / 86_400,
                "the hub CA expires within a year; plan its replacement"
            );
        }
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.inner.cert_pem
    }

    /// The CA private key, PEM PKCS#8. Secret: for storing the CA, never for logs.
    pub fn key_pem(&self) -> String {
        self.inner.issuer.key().serialize_pem()
    }

    /// The CA's subject common name.
    pub fn common_name(&self) -> &str {
        &self.inner.common_name
    }

    /// The CA certificate's `notAfter`, Unix seconds.
    pub fn not_after_unix(&self) -> i64 {
        self.inner.not_after_unix
    }

    /// `sha256:<hex>` of the CA certificate's SubjectPublicKeyInfo DER — the value of
    /// `accord-agent join --ca-cert-hash`, computed exactly as kubeadm's
    /// `--discovery-token-ca-cert-hash`.
    pub fn ca_cert_hash(&self) -> String {
        self.inner.ca_cert_hash.clone()
    }

    /// Signs an agent's CSR (PEM PKCS#10) for `cluster`.
    ///
    /// The hub decides the subject: CN = `cluster` and URI SAN `accord://cluster/<cluster>`;
    /// whatever subject, SANs or extensions the CSR asked for are ignored. Only the CSR's
    /// public key is used, after its self-signature is verified. The certificate has the
    /// clientAuth EKU only, `CA:FALSE`, and lives `validity` (at most five years, and never
    /// past the CA's own expiry).
    pub fn sign_agent_csr(
        &self,
        csr_pem: &str,
        cluster: &str,
        validity: Duration,
    ) -> Result<SignedCert, PkiError> {
        validate_cluster_name(cluster)?;
        let public_key = verified_csr_public_key(csr_pem)?;

        let mut params = self.leaf_params(validity)?;
        params.distinguished_name = common_name_dn(cluster);
        let uri = cluster_uri(cluster)
            .try_into()
            .map_err(|source| PkiError::Generate {
                action: "encode the cluster URI SAN",
                source,
            })?;
        params.subject_alt_names = vec![SanType::URI(uri)];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];

        let cert = params
            .signed_by(&public_key, &self.inner.issuer)
            .map_err(|source| PkiError::Generate {
                action: "sign the agent certificate",
                source,
            })?;
        let parsed = parse_cert(cert.der(), "signed agent certificate")?;
        Ok(SignedCert {
            cert_pem: cert.pem(),
            not_after_unix: parsed.validity().not_after.timestamp(),
            spki_sha256: sha256_tagged(parsed.tbs_certificate.subject_pki.raw),
        })
    }

    /// Issues the serving certificate of the hub's gRPC endpoint, with a fresh ECDSA P-256
    /// key: DNS and IP SANs from `sans` (e.g. `localhost`, `127.0.0.1`,
    /// `accord-hub.accord-system.svc`), serverAuth EKU, CN = the first DNS name.
    pub fn issue_server_cert(
        &self,
        sans: &[String],
        validity: Duration,
    ) -> Result<KeyPairPem, PkiError> {
        if sans.is_empty() {
            return Err(PkiError::InvalidSan {
                san: String::new(),
                reason: "a serving certificate needs at least one DNS name or IP address".into(),
            });
        }
        let mut names = Vec::with_capacity(sans.len());
        for san in sans {
            names.push(server_san(san)?);
        }
        let common_name = sans
            .iter()
            .find(|s| s.parse::<IpAddr>().is_err())
            .map_or("accord-hub", String::as_str);

        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|source| {
            PkiError::Generate {
                action: "generate the serving key",
                source,
            }
        })?;
        let mut params = self.leaf_params(validity)?;
        params.distinguished_name = common_name_dn(common_name);
        params.subject_alt_names = names;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params
            .signed_by(&key, &self.inner.issuer)
            .map_err(|source| PkiError::Generate {
                action: "sign the serving certificate",
                source,
            })?;
        Ok(KeyPairPem {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Parameters shared by every leaf: random serial, backdated `notBefore`, `notAfter`
    /// capped by the CA's, `CA:FALSE`, authority key identifier.
    fn leaf_params(&self, validity: Duration) -> Result<CertificateParams, PkiError> {
        if validity.is_zero() || validity > MAX_LEAF_VALIDITY {
            return Err(PkiError::InvalidValidity {
                reason: format!(
                    "{}s requested; it must be more than 0 and at most {} days",
                    validity.as_secs(),
                    MAX_LEAF_VALIDITY.as_secs() / 86_400
                ),
            });
        }
        let now = OffsetDateTime::now_utc();
        let ca_not_after =
            OffsetDateTime::from_unix_timestamp(self.inner.not_after_unix).map_err(|e| {
                PkiError::InvalidValidity {
                    reason: format!("the CA's notAfter is out of range ({e})"),
                }
            })?;
        if ca_not_after <= now {
            return Err(PkiError::InvalidValidity {
                reason: "the hub CA has expired; replace it before issuing certificates".into(),
            });
        }
        let mut params = CertificateParams::default();
        params.serial_number = Some(random_serial());
        // At most a tenth of the lifetime: an agent renews at two thirds of the window it
        // sees, so a long backdate on a short-lived certificate would make it due at once.
        params.not_before = now - BACKDATE.min(validity / 10);
        params.not_after = (now + validity).min(ca_not_after);
        params.is_ca = IsCa::ExplicitNoCa;
        params.use_authority_key_identifier_extension = true;
        Ok(params)
    }
}

/// Parses a PEM CSR, verifies its self-signature and returns its public key, refusing key
/// kinds and sizes the hub does not certify.
fn verified_csr_public_key(csr_pem: &str) -> Result<SubjectPublicKeyInfo, PkiError> {
    let malformed = |reason: String| PkiError::MalformedCsr { reason };
    let block = pem::parse(csr_pem.trim()).map_err(|e| {
        malformed(format!(
            "not PEM ({e}); expected -----BEGIN CERTIFICATE REQUEST-----"
        ))
    })?;
    if block.tag() != "CERTIFICATE REQUEST" && block.tag() != "NEW CERTIFICATE REQUEST" {
        return Err(malformed(format!(
            "found a {:?} PEM block, expected CERTIFICATE REQUEST",
            block.tag()
        )));
    }
    let (rest, csr) = X509CertificationRequest::from_der(block.contents())
        .map_err(|e| malformed(format!("not a DER PKCS#10 request ({e})")))?;
    if !rest.is_empty() {
        return Err(malformed(format!(
            "{} trailing bytes after the request",
            rest.len()
        )));
    }

    let spki = &csr.certification_request_info.subject_pki;
    let unsupported = |reason: String| PkiError::UnsupportedKey { reason };
    let is_ed25519 = spki.algorithm.algorithm == x509_parser::oid_registry::OID_SIG_ED25519;
    if !is_ed25519 {
        match spki.parsed() {
            Ok(PublicKey::RSA(rsa)) if rsa.key_size() < MIN_RSA_BITS => {
                return Err(unsupported(format!(
                    "RSA key of {} bits; use ECDSA P-256 or RSA of at least {MIN_RSA_BITS} bits",
                    rsa.key_size()
                )));
            }
            Ok(PublicKey::RSA(_) | PublicKey::EC(_)) => {}
            _ => {
                return Err(unsupported(format!(
                    "key algorithm {}; {SUPPORTED_KEYS}",
                    spki.algorithm.algorithm
                )));
            }
        }
    }
    // Checked after the key kind, so a key too weak to verify with is reported as such.
    csr.verify_signature().map_err(|_| PkiError::CsrSignature)?;
    SubjectPublicKeyInfo::from_der(spki.raw)
        .map_err(|e| unsupported(format!("{e}; {SUPPORTED_KEYS}")))
}

/// One SAN of a serving certificate: an IP address or a DNS name rustls accepts.
fn server_san(san: &str) -> Result<SanType, PkiError> {
    if let Ok(ip) = san.parse::<IpAddr>() {
        return Ok(SanType::IpAddress(ip));
    }
    let invalid = |reason: String| PkiError::InvalidSan {
        san: san.to_owned(),
        reason,
    };
    // Wildcards are allowed in the leftmost label only; check the rest as a DNS name.
    let checked = san.strip_prefix("*.").unwrap_or(san);
    rustls::pki_types::DnsName::try_from(checked)
        .map_err(|_| invalid("not an IP address or a valid DNS name".into()))?;
    let ia5 = san
        .to_owned()
        .try_into()
        .map_err(|e: rcgen::Error| invalid(e.to_string()))?;
    Ok(SanType::DnsName(ia5))
}

fn common_name_dn(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

/// A random positive 128-bit serial number (RFC 5280 allows up to 20 octets).
fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    // Positive, and never shorter than 16 octets once DER-encoded.
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    SerialNumber::from_slice(&bytes)
}
