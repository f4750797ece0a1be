//! How the hub reaches etcd: endpoints, client TLS (CA, certificate, key) and optional
//! username/password, read from files so that no secret ever appears on a command line.
//!
//! A production etcd runs with client TLS and often with authentication; a connection
//! that etcd refuses must fail with one line that names the endpoint and the cause, and
//! never the password.

use std::path::{Path, PathBuf};

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};

/// Errors reading the etcd connection settings (files named by the `--etcd-*` flags).
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// A file named by a flag could not be read.
    #[error("cannot read the etcd {what} {}", path.display())]
    Read {
        /// What the file holds (CA certificate, client key, password, ...).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// A file holds no PEM block of the expected type.
    #[error("the etcd {what} {} holds no PEM {expected}", path.display())]
    NotPem {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The PEM label looked for (`CERTIFICATE`, `PRIVATE KEY`).
        expected: &'static str,
    },
    /// The flags do not fit together (a certificate without its key, a password without
    /// a user name, TLS settings with an `http://` endpoint, ...).
    #[error("{0}")]
    Inconsistent(String),
}

/// A user name and password for etcd authentication. `Debug` never shows the password.
#[derive(Clone)]
pub struct EtcdUser {
    name: String,
    password: String,
}

impl EtcdUser {
    /// A user `name` with `password`.
    pub fn new(name: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            password: password.into(),
        }
    }

    /// The user name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Debug for EtcdUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdUser")
            .field("name", &self.name)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Client TLS towards etcd: the CA that signed etcd's serving certificate and, for
/// etcd's `--client-cert-auth`, a client certificate and key (all PEM).
#[derive(Clone, Default)]
pub struct EtcdTls {
    ca_pem: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdTls")
            .field("ca", &self.ca_pem.is_some())
            .field("client_certificate", &self.identity.is_some())
            .finish()
    }
}

impl EtcdTls {
    /// Trusts the CA certificate(s) in `ca_pem`.
    pub fn with_ca(mut self, ca_pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(ca_pem.into());
        self
    }

    /// Presents `cert_pem` (with its private key `key_pem`) to etcd.
    pub fn with_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.identity = Some((cert_pem.into(), key_pem.into()));
        self
    }

    fn options(&self) -> TlsOptions {
        let mut tls = TlsOptions::new();
        if let Some(ca) = &self.ca_pem {
            tls = tls.ca_certificate(Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = &self.identity {
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        tls
    }
}

/// Files named by the `--etcd-*` flags (see `accord-hub serve --help`).
#[derive(Debug, Clone, Default)]
pub struct EtcdFiles {
    /// CA certificate(s) that signed etcd's serving certificate (`--etcd-ca`).
    pub ca: Option<PathBuf>,
    /// Client certificate (`--etcd-cert`).
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (`--etcd-key`).
    pub key: Option<PathBuf>,
    /// User name for etcd authentication (`--etcd-username`).
    pub username: Option<String>,
    /// File holding the user's password (`--etcd-password-file`).
    pub password_file: Option<PathBuf>,
}

/// Where etcd is and how to talk to it. Cheap to clone; `Debug` shows no secret.
#[derive(Debug, Clone, Default)]
pub struct EtcdConnection {
    /// Client URLs (`https://host:port` with TLS, else `http://host:port`).
    pub endpoints: Vec<String>,
    /// Client TLS, for `https://` endpoints.
    pub tls: Option<EtcdTls>,
    /// Credentials, when etcd has authentication enabled.
    pub user: Option<EtcdUser>,
}

impl EtcdConnection {
    /// Plain connection to `endpoints`, without TLS or credentials.
    pub fn plain(endpoints: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Reads the files the flags name and checks that the settings fit together.
    pub fn from_files(endpoints: Vec<String>, files: &EtcdFiles) -> Result<Self, ConnectionError> {
        let mut tls = None::<EtcdTls>;
        if let Some(path) = &files.ca {
            let pem = read_pem(path, "CA certificate", "CERTIFICATE")?;
            tls = Some(tls.unwrap_or_default().with_ca(pem));
        }
        match (&files.cert, &files.key) {
            (Some(cert), Some(key)) => {
                let cert = read_pem(cert, "client certificate", "CERTIFICATE")?;
                let key = read_pem(key, "client key", "PRIVATE KEY")?;
                tls = Some(tls.unwrap_or_default().with_client_certificate(cert, key));
            }
            (None, None) => {}
            (Some(_), None) => {
                return Err(ConnectionError::Inconsistent(
                    "--etcd-cert needs --etcd-key (the certificate's private key)".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(ConnectionError::Inconsistent(
                    "--etcd-key needs --etcd-cert (the client certificate)".into(),
                ));
            }
        }
        let user = match (&files.username, &files.password_file) {
            (Some(name), Some(path)) => Some(EtcdUser::new(name.clone(), read_password(path)?)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(ConnectionError::Inconsistent(
                    "--etcd-username needs --etcd-password-file".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(ConnectionError::Inconsistent(
                    "--etcd-password-file needs --etcd-username".into(),
                ));
            }
        };
        let connection = Self {
            endpoints,
            tls,
            user,
        };
        connection.check()?;
        Ok(connection)
    }

    /// The endpoints joined with commas, for messages.
    pub fn endpoints_text(&self) -> String {
        self.endpoints.join(",")
    }

    /// Whether a connection failure should be found at start rather than on first use:
    /// with TLS or credentials a refused handshake or login never heals by waiting.
    pub fn is_secured(&self) -> bool {
        self.tls.is_some() || self.user.is_some()
    }

    /// Checks that every endpoint's scheme fits the TLS settings: etcd-client would
    /// otherwise fail with a message that names neither the endpoint nor the flag.
    pub fn check(&self) -> Result<(), ConnectionError> {
        for endpoint in &self.endpoints {
            let https = endpoint.starts_with("https://");
            let http = endpoint.starts_with("http://");
            // A bare host:port is plain HTTP to etcd-client; with TLS it must say https://.
            if !https && !http && self.tls.is_some() {
                return Err(ConnectionError::Inconsistent(format!(
                    "etcd endpoint {endpoint:?} must start with https:// when TLS flags are given"
                )));
            }
            if https && self.tls.as_ref().is_none_or(|t| t.ca_pem.is_none()) {
                return Err(ConnectionError::Inconsistent(format!(
                    "etcd endpoint {endpoint} uses https:// and needs --etcd-ca \
                     (the CA that signed etcd's serving certificate)"
                )));
            }
            if http && self.tls.is_some() {
                return Err(ConnectionError::Inconsistent(format!(
                    "etcd endpoint {endpoint} uses http:// but TLS flags were given; \
                     use https://"
                )));
            }
        }
        Ok(())
    }

    /// etcd-client's options for this connection, on top of `base` (timeouts,
    /// keepalive).
    pub(crate) fn options(&self, base: ConnectOptions) -> ConnectOptions {
        let mut options = base;
        if let Some(tls) = &self.tls {
            options = options.with_tls(tls.options());
        }
        if let Some(user) = &self.user {
            options = options.with_user(user.name.clone(), user.password.clone());
        }
        options
    }
}

/// Why etcd could not be used, classified from etcd-client's error for a message a
/// person can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectFailure {
    /// etcd rejected the user name or password.
    Authentication,
    /// The user may not read the hub's keys.
    PermissionDenied,
    /// The TLS handshake failed (unknown CA, name mismatch, missing client certificate).
    Tls,
    /// etcd accepted the connection and then closed it: with TLS 1.3 this is how a
    /// server that requires a client certificate refuses a missing or unknown one.
    Closed,
    /// Nothing answered (refused, timed out, name not resolved).
    Unreachable,
    /// Anything else.
    Other,
}

impl ConnectFailure {
    /// Classifies an error by its text (etcd-client flattens tonic's causes into it).
    pub fn classify(error: &etcd_client::Error) -> Self {
        let text = accord_common::runtime::error_chain(error).to_lowercase();
        Self::classify_text(&text)
    }

    fn classify_text(text: &str) -> Self {
        if text.contains("authentication failed") || text.contains("invalid user id or password") {
            Self::Authentication
        } else if text.contains("permission denied") || text.contains("user name is empty") {
            Self::PermissionDenied
        } else if [
            "certificate",
            "tls",
            "handshake",
            "unknownissuer",
            "unknown issuer",
            "alert",
        ]
        .iter()
        .any(|w| text.contains(w))
        {
            Self::Tls
        } else if ["broken pipe", "connection closed", "connection reset"]
            .iter()
            .any(|w| text.contains(w))
        {
            Self::Closed
        } else if [
            "connection refused",
            "timed out",
            "deadline",
            "unavailable",
            "dns",
            "failed to lookup",
            "transport error",
            "tcp connect",
        ]
        .iter()
        .any(|w| text.contains(w))
        {
            Self::Unreachable
        } else {
            Self::Other
        }
    }

    /// What a person should read.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::Authentication => {
                "authentication failed: etcd rejected the user name or password \
                 (--etcd-username, --etcd-password-file)"
            }
            Self::PermissionDenied => {
                "permission denied: the etcd user may not read the hub's key prefix"
            }
            Self::Tls => {
                "TLS handshake failed (check --etcd-ca, --etcd-cert, --etcd-key and that the \
                 endpoint's name is in etcd's serving certificate)"
            }
            Self::Closed => {
                "etcd closed the connection; with https:// it most likely refused the TLS \
                 client certificate (check --etcd-cert and --etcd-key)"
            }
            Self::Unreachable => "unreachable",
            Self::Other => "request failed",
        }
    }
}

impl std::fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

/// Reads a PEM file and checks it holds a block with `label` somewhere in its name
/// (`PRIVATE KEY` matches `EC PRIVATE KEY` and `RSA PRIVATE KEY` too).
fn read_pem(
    path: &Path,
    what: &'static str,
    label: &'static str,
) -> Result<Vec<u8>, ConnectionError> {
    let bytes = std::fs::read(path).map_err(|source| ConnectionError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let has_block = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.contains(label));
    if !has_block {
        return Err(ConnectionError::NotPem {
            what,
            path: path.to_path_buf(),
            expected: label,
        });
    }
    Ok(bytes)
}

/// Reads a password file; one trailing newline (as `echo` writes) is not part of it.
fn read_password(path: &Path) -> Result<String, ConnectionError> {
    let bytes = std::fs::read(path).map_err(|source| ConnectionError::Read {
        what: "password file",
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|_| {
        ConnectionError::Inconsistent(format!(
            "the etcd password file {} is not UTF-8",
            path.display()
        ))
    })?;
    let password = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    if password.is_empty() {
        return Err(ConnectionError::Inconsistent(format!(
            "the etcd password file {} is empty",
            path.display()
        )));
    }
    Ok(password.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n";

    #[test]
    fn debug_output_never_shows_the_password() {
        let dir = tempfile::tempdir().unwrap();
        let files = EtcdFiles {
            username: Some("accord".into()),
            password_file: Some(write(dir.path(), "pw", "s3cr3t-value\n")),
            ..EtcdFiles::default()
        };
        let connection =
            EtcdConnection::from_files(vec!["http://127.0.0.1:2379".into()], &files).unwrap();
        let debug = format!("{connection:?}");
        assert!(debug.contains("accord"), "{debug}");
        assert!(!debug.contains("s3cr3t"), "{debug}");
        assert_eq!(connection.user.unwrap().password, "s3cr3t-value");
    }

    #[test]
    fn https_endpoints_need_a_ca_and_http_endpoints_refuse_tls_flags() {
        let dir = tempfile::tempdir().unwrap();
        let https =
            EtcdConnection::from_files(vec!["https://etcd:2379".into()], &EtcdFiles::default())
                .unwrap_err();
        assert!(https.to_string().contains("--etcd-ca"), "{https}");
        let files = EtcdFiles {
            ca: Some(write(dir.path(), "ca.crt", CERT)),
            ..EtcdFiles::default()
        };
        let http = EtcdConnection::from_files(vec!["http://etcd:2379".into()], &files).unwrap_err();
        assert!(http.to_string().contains("http://etcd:2379"), "{http}");
        let ok = EtcdConnection::from_files(vec!["https://etcd:2379".into()], &files).unwrap();
        assert!(ok.is_secured());
        let with_client_cert = EtcdFiles {
            cert: Some(write(dir.path(), "tls.crt", CERT)),
            key: Some(write(dir.path(), "tls.key", KEY)),
            ..files
        };
        let full = EtcdConnection::from_files(vec!["https://etcd:2379".into()], &with_client_cert)
            .unwrap();
        assert!(format!("{full:?}").contains("client_certificate: true"));
    }

    #[test]
    fn a_certificate_without_its_key_or_a_password_without_a_user_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cert_only = EtcdFiles {
            ca: Some(write(dir.path(), "ca.crt", CERT)),
            cert: Some(write(dir.path(), "tls.crt", CERT)),
            ..EtcdFiles::default()
        };
        let e = EtcdConnection::from_files(vec!["https://e:2379".into()], &cert_only).unwrap_err();
        assert!(e.to_string().contains("--etcd-key"), "{e}");
        let password_only = EtcdFiles {
            password_file: Some(write(dir.path(), "pw", "x")),
            ..EtcdFiles::default()
        };
        let e =
            EtcdConnection::from_files(vec!["http://e:2379".into()], &password_only).unwrap_err();
        assert!(e.to_string().contains("--etcd-username"), "{e}");
    }

    #[test]
    fn files_that_are_missing_or_not_pem_are_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = EtcdFiles {
            ca: Some(dir.path().join("nope.crt")),
            ..EtcdFiles::default()
        };
        let e = EtcdConnection::from_files(vec!["https://e:2379".into()], &missing).unwrap_err();
        assert!(e.to_string().contains("nope.crt"), "{e}");
        let garbage = EtcdFiles {
            ca: Some(write(dir.path(), "ca.crt", "hello")),
            cert: Some(write(dir.path(), "tls.crt", CERT)),
            key: Some(write(dir.path(), "tls.key", CERT)),
            ..EtcdFiles::default()
        };
        let e = EtcdConnection::from_files(vec!["https://e:2379".into()], &garbage).unwrap_err();
        assert!(e.to_string().contains("ca.crt"), "{e}");
        let wrong_key = EtcdFiles {
            ca: Some(write(dir.path(), "ca2.crt", CERT)),
            ..garbage
        };
        let e = EtcdConnection::from_files(vec!["https://e:2379".into()], &wrong_key).unwrap_err();
        assert!(e.to_string().contains("tls.key"), "{e}");
    }

    #[test]
    fn an_empty_password_file_is_refused_and_a_trailing_newline_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let empty = EtcdFiles {
            username: Some("u".into()),
            password_file: Some(write(dir.path(), "pw", "\n")),
            ..EtcdFiles::default()
        };
        assert!(EtcdConnection::from_files(vec!["http://e:2379".into()], &empty).is_err());
        let crlf = EtcdFiles {
            username: Some("u".into()),
            password_file: Some(write(dir.path(), "pw2", "pass\r\n")),
            ..EtcdFiles::default()
        };
        let c = EtcdConnection::from_files(vec!["http://e:2379".into()], &crlf).unwrap();
        assert_eq!(c.user.unwrap().password, "pass");
    }

    #[test]
    fn failures_are_classified_from_etcd_client_messages() {
        let cases = [
            (
                "grpc request error: status: InvalidArgument, message: \"etcdserver: \
                 authentication failed, invalid user ID or password\"",
                ConnectFailure::Authentication,
            ),
            (
                "transport error: tcp connect error: Connection refused (os error 111)",
                ConnectFailure::Unreachable,
            ),
            (
                "transport error: invalid peer certificate: UnknownIssuer",
                ConnectFailure::Tls,
            ),
            (
                "etcdserver: permission denied",
                ConnectFailure::PermissionDenied,
            ),
            (
                "transport error: hyper::error(io, custom { kind: brokenpipe, error: \
                 \"connection closed because of a broken pipe\" })",
                ConnectFailure::Closed,
            ),
            ("something else", ConnectFailure::Other),
        ];
        for (text, expected) in cases {
            assert_eq!(
                ConnectFailure::classify_text(&text.to_lowercase()),
                expected,
                "{text}"
            );
        }
    }
}
