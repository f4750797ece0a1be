//! TLS of the hub–agent connection: the hub's server config (serving chain, optional
//! client certificates verified against the CA), the agent's client config, and the
//! bootstrap fetch of the hub CA pinned by `--ca-cert-hash`.

use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientConfig, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

use super::identity::{PEM_CERTIFICATE, parse_ca_cert_hash, spki_sha256, to_pem};
use super::{HubCa, KeyPairPem, PkiError};

/// How long a TLS handshake may take before the connection is dropped, on either side.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Makes ring the process-wide rustls crypto provider. Idempotent: a provider installed
/// earlier (ring, as the whole tree uses) is kept.
pub fn install_crypto_provider() {
    // Err only means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// TLS of the hub's gRPC server: presents `serving` followed by the CA certificate (so a
/// joining agent can pin the CA from the chain), and verifies client certificates against
/// the CA without requiring them — Registration is called before the agent has one; the
/// Sync service insists on a peer certificate itself (see [`super::peer_identity`]).
pub fn server_tls_config(ca: &HubCa, serving: &KeyPairPem) -> ServerTlsConfig {
    install_crypto_provider();
    let ca_pem = ca.cert_pem();
    let chain = if serving.cert_pem.contains(ca_pem.trim()) {
        serving.cert_pem.clone()
    } else {
        format!("{}\n{}", serving.cert_pem.trim_end(), ca_pem)
    };
    ServerTlsConfig::new()
        .identity(Identity::from_pem(chain, &serving.key_pem))
        .client_ca_root(Certificate::from_pem(ca_pem))
        .client_auth_optional(true)
        .timeout(HANDSHAKE_TIMEOUT)
}

/// TLS of an agent's channel to the hub: trusts only the hub CA `ca_pem`, expects the hub's
/// certificate to name `domain`, and presents `identity` (certificate PEM, key PEM) when
/// given.
pub fn client_tls_config(
    ca_pem: &str,
    identity: Option<(&str, &str)>,
    domain: &str,
) -> ClientTlsConfig {
    install_crypto_provider();
    let config = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .domain_name(domain)
        .timeout(HANDSHAKE_TIMEOUT);
    match identity {
        Some((cert_pem, key_pem)) => config.identity(Identity::from_pem(cert_pem, key_pem)),
        None => config,
    }
}

/// Bootstrap step of `accord-agent join`, before the agent trusts anything: connects to the
/// hub at `addr` (`HOST:PORT`, optionally `https://HOST:PORT`), and returns the PEM of the
/// CA certificate in the hub's chain whose SubjectPublicKeyInfo hashes to `ca_cert_hash`
/// (`sha256:HEX`, kubeadm-style). The hub's serving certificate must also verify against
/// that CA for HOST, so the later connections with [`client_tls_config`] will succeed.
pub async fn fetch_pinned_ca(addr: &str, ca_cert_hash: &str) -> Result<String, PkiError> {
    let (host, _) = split_host_port(addr)?;
    fetch_pinned_ca_as(addr, &host, ca_cert_hash).await
}

/// [`fetch_pinned_ca`], expecting the serving certificate to name `server_name` instead of
/// the host of `addr` (for dialling an IP address or a tunnel).
pub async fn fetch_pinned_ca_as(
    addr: &str,
    server_name: &str,
    ca_cert_hash: &str,
) -> Result<String, PkiError> {
    let expected = parse_ca_cert_hash(ca_cert_hash)?;
    let (host, port) = split_host_port(addr)?;
    let name =
        ServerName::try_from(server_name.to_owned()).map_err(|_| PkiError::InvalidAddress {
            addr: server_name.to_owned(),
            reason: "not a valid DNS name or IP address to check the hub's certificate against"
                .into(),
        })?;

    install_crypto_provider();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(PinningVerifier {
        expected: expected.clone(),
        provider: provider.clone(),
        outcome: Mutex::new(None),
    });
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PkiError::Connect {
            addr: addr.to_owned(),
            source: io::Error::other(e),
        })?
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    // The hub speaks only HTTP/2 (gRPC); offer it so the server's ALPN check passes.
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = TlsConnector::from(Arc::new(config));

    let handshake = async {
        let tcp = TcpStream::connect((host.as_str(), port)).await?;
        let mut tls = connector.connect(name, tcp).await?;
        // Say goodbye properly; a failure here changes nothing about what we learned.
        let _ = tls.shutdown().await;
        Ok::<_, io::Error>(())
    };
    let result = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no TLS handshake within {}s", HANDSHAKE_TIMEOUT.as_secs()),
            ))
        });
    let outcome = verifier
        .outcome
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();

    let addr = addr.to_owned();
    match (outcome, result) {
        (Some(PinOutcome::Mismatch { got }), _) => Err(PkiError::CaPinMismatch { expected, got }),
        (Some(PinOutcome::NoCa { serving }), _) => Err(PkiError::NoCaInChain { addr, serving }),
        (Some(PinOutcome::Invalid { reason }), _) => {
            Err(PkiError::ServingCertInvalid { addr, reason })
        }
        (Some(PinOutcome::Pinned { ca_pem }), Ok(())) => Ok(ca_pem),
        (_, Err(source)) => Err(PkiError::Connect { addr, source }),
        (None, Ok(())) => Err(PkiError::Connect {
            addr,
            source: io::Error::other("the handshake ended without the hub's certificate"),
        }),
    }
}

/// What the pinning verifier found in the hub's chain.
#[derive(Debug)]
enum PinOutcome {
    /// The pinned CA was presented and the serving certificate verifies against it.
    Pinned { ca_pem: String },
    /// Several certificates were presented, none with the pinned key; `got` is the hash of
    /// the last one (where the CA belongs).
    Mismatch { got: String },
    /// Only one certificate was presented and it is not the pinned one.
    NoCa { serving: String },
    /// The pinned CA was presented but the serving certificate does not verify against it.
    Invalid { reason: String },
}

/// A verifier that trusts exactly the certificate in the presented chain whose SPKI matches
/// the pin, then verifies the chain against it as webpki would against any root.
#[derive(Debug)]
struct PinningVerifier {
    expected: String,
    provider: Arc<CryptoProvider>,
    outcome: Mutex<Option<PinOutcome>>,
}

impl PinningVerifier {
    fn record(&self, outcome: PinOutcome) {
        *self.outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
    }
}

impl ServerCertVerifier for PinningVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let hash = |c: &CertificateDer<'_>| {
            spki_sha256(c).unwrap_or_else(|e| format!("an unparseable certificate ({e})"))
        };
        let presented: Vec<&CertificateDer<'_>> =
            std::iter::once(end_entity).chain(intermediates).collect();
        let Some(ca) = presented.iter().find(|c| hash(c) == self.expected) else {
            self.record(match intermediates.last() {
                Some(last) => PinOutcome::Mismatch { got: hash(last) },
                None => PinOutcome::NoCa {
                    serving: hash(end_entity),
                },
            });
            return Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ));
        };

        let mut roots = RootCertStore::empty();
        let verified = roots
            .add(CertificateDer::from(ca.to_vec()))
            .map_err(|e| e.to_string())
            .and_then(|()| {
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), self.provider.clone())
                    .build()
                    .map_err(|e| e.to_string())
            })
            .and_then(|webpki| {
                webpki
                    .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
                    .map_err(|e| e.to_string())
            });
        match verified {
            Ok(v) => {
                self.record(PinOutcome::Pinned {
                    ca_pem: to_pem(PEM_CERTIFICATE, ca),
                });
                Ok(v)
            }
            Err(reason) => {
                self.record(PinOutcome::Invalid { reason });
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::ApplicationVerificationFailure,
                ))
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Splits `HOST:PORT`, `[IPv6]:PORT` or `https://HOST:PORT[/]` into host and port.
pub(crate) fn split_host_port(addr: &str) -> Result<(String, u16), PkiError> {
    let invalid = |reason: &str| PkiError::InvalidAddress {
        addr: addr.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = if let Some(r) = addr.strip_prefix("https://") {
        r
    } else if addr.contains("://") {
        return Err(invalid(
            "the hub is reached over TLS: use https://HOST:PORT or HOST:PORT",
        ));
    } else {
        addr
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or_else(|| invalid("unclosed '[' around an IPv6 address"))?;
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| invalid("missing :PORT"))?;
        (host, port)
    } else {
        let (host, port) = authority
            .rsplit_once(':')
            .ok_or_else(|| invalid("missing :PORT, e.g. hub.example.com:7443"))?;
        if host.contains(':') {
            return Err(invalid("write IPv6 addresses in brackets, e.g. [::1]:7443"));
        }
        (host, port)
    };
    if host.is_empty() {
        return Err(invalid("missing host"));
    }
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| invalid("the port must be a number from 1 to 65535"))?;
    Ok((host.to_owned(), port))
}
