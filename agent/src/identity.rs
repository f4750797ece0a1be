//! The agent's identity: which hub to dial, which cluster it speaks for, and the mTLS
//! material to prove it, read from a directory or from a Secret in the member cluster.
//!
//! Both hold the same keys (see the `*_KEY` constants); `accord-agent join` writes the
//! Secret, and a directory is handy for running the agent outside the cluster.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{ClientTlsConfig, Uri};

/// Key holding the hub's gRPC URL, e.g. `https://hub.example.com:7443`.
pub const HUB_URL_KEY: &str = "hub-url";
/// Key holding the name of the cluster the agent speaks for.
pub const CLUSTER_NAME_KEY: &str = "cluster-name";
/// Key holding the hub CA certificate (PEM).
pub const CA_CERT_KEY: &str = "ca.crt";
/// Key holding the agent's client certificate (PEM).
pub const TLS_CERT_KEY: &str = "tls.crt";
/// Key holding the agent's private key (PEM).
pub const TLS_KEY_KEY: &str = "tls.key";
/// Optional key naming what the hub's serving certificate must carry (default: the host
/// of the hub URL, `localhost` for a loopback address).
pub const TLS_SERVER_NAME_KEY: &str = "tls-server-name";

/// Every key an identity may hold.
const KEYS: [&str; 6] = [
    HUB_URL_KEY,
    CLUSTER_NAME_KEY,
    CA_CERT_KEY,
    TLS_CERT_KEY,
    TLS_KEY_KEY,
    TLS_SERVER_NAME_KEY,
];

/// Why an identity could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// A file of the identity directory could not be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The identity Secret could not be read.
    #[error("reading Secret {namespace}/{name}: {source}")]
    Secret {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A required key is absent or empty.
    #[error("{origin} has no {key:?}; re-run `accord-agent join` to write a complete identity")]
    Missing {
        /// Where the identity was read from.
        origin: String,
        /// The missing key.
        key: &'static str,
    },
    /// A key holds bytes that are not UTF-8.
    #[error("{origin}: {key:?} is not UTF-8 text")]
    NotUtf8 {
        /// Where the identity was read from.
        origin: String,
        /// The offending key.
        key: &'static str,
    },
    /// The hub URL is not an `https://HOST:PORT` URL.
    #[error("{origin}: hub-url {url:?} {reason}")]
    HubUrl {
        /// Where the identity was read from.
        origin: String,
        /// The rejected URL.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A certificate or key is not valid PEM of the expected kind.
    #[error("{origin}: {key:?} {reason}")]
    Pem {
        /// Where the identity was read from.
        origin: String,
        /// The offending key.
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A renewed certificate could not be written to the identity directory.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A renewed certificate could not be written to the identity Secret.
    #[error("writing Secret {namespace}/{name} (the agent needs `patch` on it): {source}")]
    SecretWrite {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The `--identity-secret` value is not `NAMESPACE/NAME`.
    #[error("identity secret {0:?} must be NAMESPACE/NAME")]
    SecretRef(String),
}

/// Everything the agent needs to hold its stream to the hub.
#[derive(Clone, PartialEq, Eq)]
pub struct Identity {
    /// The hub's gRPC URL (`https://HOST:PORT`).
    pub hub_url: String,
    /// Cluster the agent speaks for; it must match the name in the client certificate.
    pub cluster: String,
    /// Name the hub's serving certificate is verified against.
    pub server_name: String,
    /// Hub CA certificate (PEM).
    pub ca_pem: String,
    /// Client certificate (PEM).
    pub cert_pem: String,
    key_pem: String,
}

// The private key never reaches a log line.
impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("hub_url", &self.hub_url)
            .field("cluster", &self.cluster)
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// Parses an identity from its keys (`origin` names where they came from, for errors).
    pub fn from_entries(
        origin: &str,
        entries: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Self, IdentityError> {
        let text = |key: &'static str| -> Result<Option<String>, IdentityError> {
            match entries.get(key) {
                None => Ok(None),
                Some(bytes) => {
                    let s = std::str::from_utf8(bytes).map_err(|_| IdentityError::NotUtf8 {
                        origin: origin.to_owned(),
                        key,
                    })?;
                    let s = s.trim();
                    Ok((!s.is_empty()).then(|| s.to_owned()))
                }
            }
        };
        let required = |key: &'static str| -> Result<String, IdentityError> {
            text(key)?.ok_or_else(|| IdentityError::Missing {
                origin: origin.to_owned(),
                key,
            })
        };
        let hub_url = required(HUB_URL_KEY)?;
        let cluster = required(CLUSTER_NAME_KEY)?;
        let ca_pem = required(CA_CERT_KEY)?;
        let cert_pem = required(TLS_CERT_KEY)?;
        let key_pem = required(TLS_KEY_KEY)?;
        let host = hub_host(&hub_url).map_err(|reason| IdentityError::HubUrl {
            origin: origin.to_owned(),
            url: hub_url.clone(),
            reason,
        })?;
        let server_name = match text(TLS_SERVER_NAME_KEY)? {
            Some(name) => name,
            None => default_server_name(&host),
        };
        let pem_error = |key: &'static str, reason: String| IdentityError::Pem {
            origin: origin.to_owned(),
            key,
            reason,
        };
        check_certificates(&ca_pem).map_err(|r| pem_error(CA_CERT_KEY, r))?;
        check_certificates(&cert_pem).map_err(|r| pem_error(TLS_CERT_KEY, r))?;
        PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| pem_error(TLS_KEY_KEY, format!("holds no private key: {e}")))?;
        Ok(Self {
            hub_url,
            cluster,
            server_name,
            ca_pem,
            cert_pem,
            key_pem,
        })
    }

    /// Reads an identity from a directory holding one file per key.
    pub fn from_dir(dir: &Path) -> Result<Self, IdentityError> {
        let mut entries = BTreeMap::new();
        for key in KEYS {
            let path = dir.join(key);
            match std::fs::read(&path) {
                Ok(bytes) => {
                    entries.insert(key.to_owned(), bytes);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(IdentityError::Read { path, source }),
            }
        }
        Self::from_entries(&format!("identity directory {}", dir.display()), &entries)
    }

    /// Parses an identity from a Secret's data.
    pub fn from_secret(secret: &Secret) -> Result<Self, IdentityError> {
        let origin = format!(
            "Secret {}/{}",
            secret.metadata.namespace.as_deref().unwrap_or_default(),
            secret.metadata.name.as_deref().unwrap_or_default()
        );
        let mut entries: BTreeMap<String, Vec<u8>> = secret
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect();
        // stringData is write-only on the API server, but a Secret built in memory may use it.
        for (k, v) in secret.string_data.iter().flatten() {
            entries.insert(k.clone(), v.clone().into_bytes());
        }
        Self::from_entries(&origin, &entries)
    }

    /// The client certificate's private key (PEM). Secret: store it, never log it.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// This identity with a renewed client certificate and its private key.
    pub fn with_certificate(&self, cert_pem: String, key_pem: String) -> Self {
        Self {
            cert_pem,
            key_pem,
            ..self.clone()
        }
    }

    /// The TLS configuration of the channel to the hub: trust only the hub CA, verify the
    /// hub's certificate against [`Identity::server_name`], present the client certificate.
    pub fn client_tls_config(&self) -> ClientTlsConfig {
        accord_common::pki::client_tls_config(
            &self.ca_pem,
            Some((&self.cert_pem, &self.key_pem)),
            &self.server_name,
        )
    }
}

/// The host of a hub URL `https://HOST:PORT` (without IPv6 brackets), or why the URL is
/// not one.
pub fn hub_host(url: &str) -> Result<String, &'static str> {
    let uri: Uri = url.parse().map_err(|_| "is not a URL")?;
    if uri.scheme_str() != Some("https") {
        return Err("must start with https://");
    }
    let host = uri.host().ok_or("has no host")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err("has no host");
    }
    Ok(host.to_owned())
}

/// The name to verify the hub against when the identity names none: the URL's host, or
/// `localhost` for a loopback address (the hub's serving certificate carries both).
pub fn default_server_name(host: &str) -> String {
    match host.parse::<IpAddr>() {
        Ok(ip) if ip.is_loopback() => "localhost".to_owned(),
        _ => host.to_owned(),
    }
}

fn check_certificates(pem: &str) -> Result<(), String> {
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        cert.map_err(|e| format!("is not valid PEM: {e}"))?;
        count += 1;
    }
    if count == 0 {
        return Err("holds no PEM certificate".to_owned());
    }
    Ok(())
}

/// Where the identity comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentitySource {
    /// A directory with one file per key.
    Dir(PathBuf),
    /// A Secret in the member cluster.
    Secret {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
    },
}

impl IdentitySource {
    /// Reads the identity now. It is read again before every connection attempt, so a
    /// renewed certificate is picked up without a restart.
    pub async fn load(&self, client: &kube::Client) -> Result<Identity, IdentityError> {
        match self {
            Self::Dir(dir) => {
                let dir = dir.clone();
                tokio::task::spawn_blocking(move || {
                    // A renewal interrupted half-way is finished first; if the directory
                    // is read-only there is none to finish, and reading goes on.
                    if let Err(e) = finish_interrupted_store(&dir) {
                        tracing::warn!(error = %e, "could not finish storing a renewed certificate");
                    }
                    Identity::from_dir(&dir)
                })
                    .await
                    .map_err(|e| IdentityError::Read {
                        path: PathBuf::new(),
                        source: std::io::Error::other(e),
                    })?
            }
            Self::Secret { namespace, name } => {
                let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
                let secret = api
                    .get(name)
                    .await
                    .map_err(|source| IdentityError::Secret {
                        namespace: namespace.clone(),
                        name: name.clone(),
                        source,
                    })?;
                Identity::from_secret(&secret)
            }
        }
    }
}

impl IdentitySource {
    /// Stores a renewed certificate and its key so that both are replaced together: one
    /// patch of the Secret, or in a directory a roll-forward journal (`tls.key.next` and
    /// `tls.crt.next` written completely first, then renamed over the old files) that
    /// [`IdentitySource::load`] finishes if the agent stopped half-way.
    pub async fn store_certificate(
        &self,
        client: &kube::Client,
        cert_pem: &str,
        key_pem: &str,
    ) -> Result<(), IdentityError> {
        match self {
            Self::Dir(dir) => {
                let dir = dir.clone();
                let (cert, key) = (cert_pem.to_owned(), key_pem.to_owned());
                tokio::task::spawn_blocking(move || store_in_dir(&dir, &cert, &key))
                    .await
                    .map_err(|e| IdentityError::Write {
                        path: PathBuf::new(),
                        source: std::io::Error::other(e),
                    })?
            }
            Self::Secret { namespace, name } => {
                let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
                let patch = serde_json::json!({
                    "data": {
                        TLS_CERT_KEY: ByteString(cert_pem.as_bytes().to_vec()),
                        TLS_KEY_KEY: ByteString(key_pem.as_bytes().to_vec()),
                    }
                });
                api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|source| IdentityError::SecretWrite {
                        namespace: namespace.clone(),
                        name: name.clone(),
                        source,
                    })?;
                Ok(())
            }
        }
    }
}

/// Suffix of the journal files of a renewal being stored in an identity directory.
const NEXT_SUFFIX: &str = ".next";

fn journal(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{key}{NEXT_SUFFIX}"))
}

/// Writes `contents` to `path` through a temporary file and a rename, so that a reader
/// sees the old file or the new one, never a part; the private key is owner-only.
fn write_file_atomically(path: &Path, contents: &str) -> Result<(), IdentityError> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&tmp)?;
        file.write_all(contents.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|source| IdentityError::Write {
        path: path.to_owned(),
        source,
    })
}

fn rename(from: &Path, to: &Path) -> Result<(), IdentityError> {
    std::fs::rename(from, to).map_err(|source| IdentityError::Write {
        path: to.to_owned(),
        source,
    })
}

/// Stores a renewed certificate and key in an identity directory (see
/// [`IdentitySource::store_certificate`]).
fn store_in_dir(dir: &Path, cert_pem: &str, key_pem: &str) -> Result<(), IdentityError> {
    // The key's journal first: a certificate journal exists only beside a complete key.
    write_file_atomically(&journal(dir, TLS_KEY_KEY), key_pem)?;
    write_file_atomically(&journal(dir, TLS_CERT_KEY), cert_pem)?;
    finish_interrupted_store(dir)
}

/// Completes (or discards) a renewal a stopped agent left half-stored in `dir`:
/// - `tls.crt.next` present: the pair is complete; move the key (if still there), then the
///   certificate, into place;
/// - only `tls.key.next`: the certificate was never written; the old pair stands.
pub fn finish_interrupted_store(dir: &Path) -> Result<(), IdentityError> {
    let (key_next, cert_next) = (journal(dir, TLS_KEY_KEY), journal(dir, TLS_CERT_KEY));
    if cert_next.exists() {
        if key_next.exists() {
            rename(&key_next, &dir.join(TLS_KEY_KEY))?;
        }
        rename(&cert_next, &dir.join(TLS_CERT_KEY))?;
    } else if key_next.exists() {
        std::fs::remove_file(&key_next).map_err(|source| IdentityError::Write {
            path: key_next.clone(),
            source,
        })?;
    }
    Ok(())
}

impl fmt::Display for IdentitySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dir(dir) => write!(f, "directory {}", dir.display()),
            Self::Secret { namespace, name } => write!(f, "Secret {namespace}/{name}"),
        }
    }
}

/// A `NAMESPACE/NAME` reference to the identity Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
}

impl FromStr for SecretRef {
    type Err = IdentityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('/') {
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
            {
                Ok(Self {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                })
            }
            _ => Err(IdentityError::SecretRef(s.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh self-signed certificate and its key, as PEM.
    fn cert_and_key() -> (String, String) {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        (ck.cert.pem(), ck.signing_key.serialize_pem())
    }

    fn entries(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    fn complete(hub_url: &str) -> BTreeMap<String, Vec<u8>> {
        let (cert, key) = cert_and_key();
        entries(&[
            (HUB_URL_KEY, hub_url),
            (CLUSTER_NAME_KEY, "member-1\n"),
            (CA_CERT_KEY, &cert),
            (TLS_CERT_KEY, &cert),
            (TLS_KEY_KEY, &key),
        ])
    }

    #[test]
    fn a_complete_identity_parses_and_trims_names() {
        let id =
            Identity::from_entries("test", &complete("https://hub.example.com:7443\n")).unwrap();
        assert_eq!(id.hub_url, "https://hub.example.com:7443");
        assert_eq!(id.cluster, "member-1");
        assert_eq!(id.server_name, "hub.example.com");
    }

    #[test]
    fn a_loopback_hub_is_verified_as_localhost() {
        let id = Identity::from_entries("test", &complete("https://127.0.0.1:7443")).unwrap();
        assert_eq!(id.server_name, "localhost");
        let id = Identity::from_entries("test", &complete("https://[::1]:7443")).unwrap();
        assert_eq!(id.server_name, "localhost");
        let id = Identity::from_entries("test", &complete("https://10.0.0.7:7443")).unwrap();
        assert_eq!(id.server_name, "10.0.0.7");
    }

    #[test]
    fn an_explicit_server_name_wins() {
        let mut e = complete("https://127.0.0.1:7443");
        e.insert(
            TLS_SERVER_NAME_KEY.into(),
            b"hub.accord-system.svc".to_vec(),
        );
        let id = Identity::from_entries("test", &e).unwrap();
        assert_eq!(id.server_name, "hub.accord-system.svc");
    }

    #[test]
    fn a_missing_key_is_named_in_the_error() {
        let mut e = complete("https://hub:7443");
        e.remove(TLS_KEY_KEY);
        let err = Identity::from_entries("Secret a/b", &e).unwrap_err();
        assert!(
            matches!(
                err,
                IdentityError::Missing {
                    key: TLS_KEY_KEY,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("tls.key"), "{err}");
    }

    #[test]
    fn a_plain_http_hub_url_is_refused() {
        let err = Identity::from_entries("test", &complete("http://hub:7443")).unwrap_err();
        assert!(matches!(err, IdentityError::HubUrl { .. }), "{err}");
    }

    #[test]
    fn garbage_instead_of_a_certificate_is_refused() {
        let mut e = complete("https://hub:7443");
        e.insert(CA_CERT_KEY.into(), b"not a certificate".to_vec());
        let err = Identity::from_entries("test", &e).unwrap_err();
        assert!(
            matches!(
                err,
                IdentityError::Pem {
                    key: CA_CERT_KEY,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn debug_output_never_shows_the_key() {
        let id = Identity::from_entries("test", &complete("https://hub:7443")).unwrap();
        let shown = format!("{id:?}");
        assert!(!shown.contains("PRIVATE"), "{shown}");
    }

    #[test]
    fn an_identity_directory_is_read_file_by_file() {
        let dir = tempfile::tempdir().unwrap();
        for (k, v) in complete("https://127.0.0.1:7443") {
            std::fs::write(dir.path().join(k), v).unwrap();
        }
        let id = Identity::from_dir(dir.path()).unwrap();
        assert_eq!(id.cluster, "member-1");
        std::fs::remove_file(dir.path().join(CLUSTER_NAME_KEY)).unwrap();
        let err = Identity::from_dir(dir.path()).unwrap_err();
        assert!(err.to_string().contains("cluster-name"), "{err}");
    }

    #[test]
    fn a_renewed_pair_replaces_both_files_and_leaves_no_journal() {
        let dir = tempfile::tempdir().unwrap();
        for (k, v) in complete("https://127.0.0.1:7443") {
            std::fs::write(dir.path().join(k), v).unwrap();
        }
        let (cert, key) = cert_and_key();
        store_in_dir(dir.path(), &cert, &key).unwrap();
        let id = Identity::from_dir(dir.path()).unwrap();
        assert_eq!(
            (id.cert_pem.as_str(), id.key_pem.as_str()),
            (cert.trim(), key.trim())
        );
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".next") || n.ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_store_interrupted_after_the_key_moved_is_finished_on_the_next_read() {
        let dir = tempfile::tempdir().unwrap();
        for (k, v) in complete("https://127.0.0.1:7443") {
            std::fs::write(dir.path().join(k), v).unwrap();
        }
        let (cert, key) = cert_and_key();
        // Stopped between the two renames: the new key is in place, the certificate is
        // still in its journal.
        std::fs::write(dir.path().join(TLS_KEY_KEY), &key).unwrap();
        std::fs::write(journal(dir.path(), TLS_CERT_KEY), &cert).unwrap();
        finish_interrupted_store(dir.path()).unwrap();
        let id = Identity::from_dir(dir.path()).unwrap();
        assert_eq!(
            (id.cert_pem.as_str(), id.key_pem.as_str()),
            (cert.trim(), key.trim())
        );
    }

    #[test]
    fn a_store_interrupted_before_the_certificate_was_written_keeps_the_old_pair() {
        let dir = tempfile::tempdir().unwrap();
        let old = complete("https://127.0.0.1:7443");
        for (k, v) in &old {
            std::fs::write(dir.path().join(k), v).unwrap();
        }
        let (_, key) = cert_and_key();
        std::fs::write(journal(dir.path(), TLS_KEY_KEY), &key).unwrap();
        finish_interrupted_store(dir.path()).unwrap();
        let id = Identity::from_dir(dir.path()).unwrap();
        let old_key = std::str::from_utf8(&old[TLS_KEY_KEY]).unwrap();
        assert_eq!(id.key_pem, old_key.trim());
        assert!(!journal(dir.path(), TLS_KEY_KEY).exists());
    }

    #[test]
    fn secret_references_are_namespace_slash_name() {
        let r: SecretRef = "accord-system/accord-agent-identity".parse().unwrap();
        assert_eq!(r.namespace, "accord-system");
        assert_eq!(r.name, "accord-agent-identity");
        assert!("nameonly".parse::<SecretRef>().is_err());
        assert!("/x".parse::<SecretRef>().is_err());
        assert!("a/b/c".parse::<SecretRef>().is_err());
    }
}
