//! One authenticated connection to one broker: TCP or TLS, size-prefixed frames,
//! ApiVersions negotiation, and SASL/SCRAM. One request at a time.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut as _, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, RequestHeader, ResponseHeader, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::config::{KafkaConfig, Password, SaslMechanism, Security};
use crate::error::{KafkaError, error_name};
use crate::scram::ScramClient;

/// The client id brokers log for our requests.
const CLIENT_ID: &str = "accord-kafka";
/// The largest response we accept (metadata or configs for thousands of topics are a few
/// megabytes); a bound so a confused peer cannot make us allocate gigabytes.
const MAX_FRAME: usize = 64 * 1024 * 1024;
/// Kafka's error code for a SASL mechanism the broker does not enable.
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;

/// A byte stream to a broker, plain or TLS.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// A connection, ready for requests.
pub(crate) struct Connection {
    addr: String,
    io: Box<dyn Io>,
    /// Broker's `(min, max)` version per API key.
    versions: HashMap<i16, (i16, i16)>,
    correlation_id: i32,
    timeout: Duration,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Connects to `addr`, negotiates versions and authenticates, all within the request
    /// timeout.
    pub(crate) async fn open(
        addr: &str,
        config: &KafkaConfig,
        tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> Result<Self, KafkaError> {
        let timeout = config.request_timeout;
        let open = async {
            let tcp = TcpStream::connect(addr)
                .await
                .map_err(|source| unreachable(addr, source))?;
            let _ = tcp.set_nodelay(true);
            let io: Box<dyn Io> = match tls {
                None => Box::new(tcp),
                Some(tls) => {
                    let host = host_of(addr);
                    let name =
                        ServerName::try_from(host.to_string()).map_err(|_| KafkaError::Tls {
                            addr: addr.to_string(),
                            message: format!("{host:?} is not a valid TLS server name"),
                        })?;
                    let stream = tokio_rustls::TlsConnector::from(tls.clone())
                        .connect(name, tcp)
                        .await
                        .map_err(|e| transport_error(addr, e))?;
                    Box::new(stream)
                }
            };
            let mut connection = Self {
                addr: addr.to_string(),
                io,
                versions: HashMap::new(),
                correlation_id: 0,
                timeout,
            };
            connection.negotiate().await?;
            if let Security::SaslSsl {
                mechanism,
                username,
                password,
                ..
            } = &config.security
            {
                connection
                    .authenticate(*mechanism, username, password)
                    .await?;
            }
            Ok(connection)
        };
        tokio::time::timeout(timeout, open)
            .await
            .map_err(|_| KafkaError::Timeout {
                addr: addr.to_string(),
                after: timeout,
            })?
    }

    /// Sends `request` at the highest version both sides support and reads its response,
    /// within the request timeout.
    pub(crate) async fn send<R: Request>(
        &mut self,
        build: impl FnOnce(i16) -> R,
    ) -> Result<R::Response, KafkaError> {
        let version = self.version_of::<R>()?;
        let request = build(version);
        let timeout = self.timeout;
        tokio::time::timeout(timeout, self.round_trip(&request, version))
            .await
            .map_err(|_| KafkaError::Timeout {
                addr: self.addr.clone(),
                after: timeout,
            })?
    }

    /// The version to use for `R`: the highest both the codec and the broker know.
    fn version_of<R: Request>(&self) -> Result<i16, KafkaError> {
        let ours = R::VERSIONS;
        let (min, max) = self.versions.get(&R::KEY).copied().ok_or_else(|| {
            self.protocol(format!("the broker does not offer {}", api_name(R::KEY)))
        })?;
        let version = ours.max.min(max);
        if version < ours.min.max(min) {
            return Err(self.protocol(format!(
                "the broker offers {} versions {min}..={max}; this client needs {}..={}",
                api_name(R::KEY),
                ours.min,
                ours.max
            )));
        }
        Ok(version)
    }

    async fn round_trip<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<R::Response, KafkaError> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let correlation_id = self.correlation_id;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
        let mut frame = BytesMut::new();
        frame.put_i32(0);
        header
            .encode(&mut frame, R::header_version(version))
            .and_then(|()| request.encode(&mut frame, version))
            .map_err(|e| self.protocol(format!("encoding {}: {e}", api_name(R::KEY))))?;
        let size = i32::try_from(frame.len() - 4)
            .map_err(|_| self.protocol("request too large".to_string()))?;
        frame[..4].copy_from_slice(&size.to_be_bytes());
        self.io
            .write_all(&frame)
            .await
            .map_err(|e| transport_error(&self.addr, e))?;
        self.io
            .flush()
            .await
            .map_err(|e| transport_error(&self.addr, e))?;

        let mut body = self.read_frame().await?;
        let response_header =
            ResponseHeader::decode(&mut body, R::Response::header_version(version))
                .map_err(|e| self.protocol(format!("decoding a response header: {e}")))?;
        if response_header.correlation_id != correlation_id {
            return Err(self.protocol(format!(
                "response correlation id {} for request {correlation_id}",
                response_header.correlation_id
            )));
        }
        R::Response::decode(&mut body, version)
            .map_err(|e| self.protocol(format!("decoding a {} response: {e}", api_name(R::KEY))))
    }

    async fn read_frame(&mut self) -> Result<Bytes, KafkaError> {
        let mut size = [0u8; 4];
        self.io
            .read_exact(&mut size)
            .await
            .map_err(|e| transport_error(&self.addr, e))?;
        let size = i32::from_be_bytes(size);
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s <= MAX_FRAME)
            .ok_or_else(|| self.protocol(format!("response frame size {size}")))?;
        let mut body = vec![0u8; size];
        self.io
            .read_exact(&mut body)
            .await
            .map_err(|e| transport_error(&self.addr, e))?;
        Ok(Bytes::from(body))
    }

    /// ApiVersions: which versions of each API the broker speaks (allowed before SASL).
    async fn negotiate(&mut self) -> Result<(), KafkaError> {
        // Version 3 names the client and is spoken by every broker since Kafka 2.4, so
        // Kafka 3.x clusters work too (a broker answers a version it lacks in another
        // format, which would have to be decoded separately).
        let version = 3;
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str(CLIENT_ID))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let response = self.round_trip(&request, version).await?;
        if response.error_code != 0 {
            return Err(self.protocol(format!(
                "ApiVersions failed: {}",
                error_name(response.error_code)
            )));
        }
        self.versions = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(())
    }

    /// SaslHandshake, then the SCRAM exchange in SaslAuthenticate requests.
    async fn authenticate(
        &mut self,
        mechanism: SaslMechanism,
        username: &str,
        password: &Password,
    ) -> Result<(), KafkaError> {
        let handshake = self
            .send(|_| {
                SaslHandshakeRequest::default()
                    .with_mechanism(StrBytes::from_static_str(mechanism.name()))
            })
            .await?;
        match handshake.error_code {
            0 => {}
            UNSUPPORTED_SASL_MECHANISM => {
                let offered: Vec<&str> = handshake.mechanisms.iter().map(|m| m.as_str()).collect();
                return Err(KafkaError::Authentication {
                    message: format!(
                        "the broker at {} does not enable {mechanism} (it offers {})",
                        self.addr,
                        offered.join(", ")
                    ),
                });
            }
            code => {
                return Err(KafkaError::Authentication {
                    message: format!("SASL handshake failed: {}", error_name(code)),
                });
            }
        }

        let scram = ScramClient::new(mechanism, username, password);
        let server_first = self.sasl_step(scram.client_first().into_bytes()).await?;
        let (client_final, last) =
            scram
                .client_final(&server_first)
                .map_err(|e| KafkaError::Authentication {
                    message: e.to_string(),
                })?;
        let server_final = self.sasl_step(client_final.into_bytes()).await?;
        last.verify(&server_final)
            .map_err(|e| KafkaError::Authentication {
                message: e.to_string(),
            })
    }

    async fn sasl_step(&mut self, auth_bytes: Vec<u8>) -> Result<Bytes, KafkaError> {
        let response = self
            .send(|_| SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(auth_bytes)))
            .await?;
        if response.error_code != 0 {
            let message = response
                .error_message
                .map(|m| m.to_string())
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| error_name(response.error_code).to_string());
            return Err(KafkaError::Authentication { message });
        }
        Ok(response.auth_bytes)
    }

    fn protocol(&self, message: String) -> KafkaError {
        KafkaError::Protocol {
            addr: self.addr.clone(),
            message,
        }
    }
}

/// The TLS client configuration for `security`, or `None` for PLAINTEXT.
pub(crate) fn tls_config(
    security: &Security,
) -> Result<Option<Arc<rustls::ClientConfig>>, KafkaError> {
    let ca_pem = match security {
        Security::Plaintext => return Ok(None),
        Security::Ssl { ca_pem } | Security::SaslSsl { ca_pem, .. } => ca_pem,
    };
    let bad = |message: String| KafkaError::Tls {
        addr: "(configuration)".to_string(),
        message,
    };
    let mut roots = rustls::RootCertStore::empty();
    match ca_pem {
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let cert = cert.map_err(|e| bad(format!("ca.crt is not PEM: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| bad(format!("ca.crt holds an unusable certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(bad("ca.crt holds no certificate".to_string()));
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Some(Arc::new(config)))
}

/// The host part of `host:port` (without IPv6 brackets).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

fn unreachable(addr: &str, source: io::Error) -> KafkaError {
    KafkaError::Unreachable {
        addr: addr.to_string(),
        source,
    }
}

/// An I/O error on a connection: a TLS failure when rustls says so, else the broker is
/// (no longer) reachable.
fn transport_error(addr: &str, error: io::Error) -> KafkaError {
    let tls = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .map(ToString::to_string);
    match tls {
        Some(message) => KafkaError::Tls {
            addr: addr.to_string(),
            message,
        },
        None => unreachable(addr, error),
    }
}

/// The API's name for messages, e.g. `CreateTopics`.
fn api_name(key: i16) -> String {
    ApiKey::try_from(key)
        .map(|k| format!("{k:?}"))
        .unwrap_or_else(|_| format!("API {key}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_split_from_ports() {
        assert_eq!(host_of("127.0.0.1:9092"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9092"), "::1");
        assert_eq!(host_of("kafka-0.kafka.svc:9093"), "kafka-0.kafka.svc");
    }

    #[test]
    fn a_ca_that_is_not_pem_is_a_tls_configuration_error() {
        let security = Security::Ssl {
            ca_pem: Some("not a certificate".into()),
        };
        let err = tls_config(&security).unwrap_err();
        assert!(matches!(err, KafkaError::Tls { .. }), "{err}");
        assert!(tls_config(&Security::Plaintext).unwrap().is_none());
        assert!(
            tls_config(&Security::Ssl { ca_pem: None })
                .unwrap()
                .is_some()
        );
    }
}
