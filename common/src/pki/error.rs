//! Errors of the PKI module, worded so that whoever reads them knows what to do.

/// Everything that can go wrong issuing, loading or checking certificates.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// The cluster name is not a DNS-1123 label.
    #[error(
        "invalid cluster name {name:?}: {}",
        accord_crds::messages::CLUSTER_NAME
    )]
    InvalidClusterName {
        /// The name as given.
        name: String,
    },

    /// The CSR could not be read as a PEM-encoded PKCS#10 request.
    #[error("malformed certificate signing request: {reason}")]
    MalformedCsr {
        /// What was wrong with it.
        reason: String,
    },

    /// The CSR's self-signature does not verify against the public key it carries, so whoever
    /// sent it may not hold the private key.
    #[error(
        "the certificate signing request's signature does not verify: it was not signed with the \
         key it contains; generate a fresh key and CSR"
    )]
    CsrSignature,

    /// The public key is of a kind or size the hub does not certify.
    #[error("unsupported public key: {reason}")]
    UnsupportedKey {
        /// Which kind or size, and what is accepted instead.
        reason: String,
    },

    /// A certificate (or a PEM bundle that should hold one) could not be parsed.
    #[error("malformed {what}: {reason}")]
    MalformedCertificate {
        /// Which certificate, e.g. "hub CA certificate".
        what: &'static str,
        /// What was wrong with it.
        reason: String,
    },

    /// A private key could not be parsed.
    #[error(
        "malformed {what}: expected an unencrypted PKCS#8 key (-----BEGIN PRIVATE KEY-----); \
         convert other formats with `openssl pkcs8 -topk8 -nocrypt -in KEY`"
    )]
    MalformedKey {
        /// Which key, e.g. "hub CA private key".
        what: &'static str,
        /// Parser error; it never contains key material.
        #[source]
        source: rcgen::Error,
    },

    /// The certificate given as the hub CA is not a CA certificate.
    #[error("the hub CA certificate is not a CA (basicConstraints CA:TRUE is missing)")]
    NotACa,

    /// The CA private key does not belong to the CA certificate.
    #[error("the hub CA private key does not match the public key of the hub CA certificate")]
    KeyMismatch,

    /// A subject alternative name for a serving certificate is not usable.
    #[error("invalid subject alternative name {san:?}: {reason}")]
    InvalidSan {
        /// The name as given.
        san: String,
        /// Why it was refused.
        reason: String,
    },

    /// A requested certificate lifetime is unusable.
    #[error("invalid certificate validity: {reason}")]
    InvalidValidity {
        /// Why it was refused.
        reason: String,
    },

    /// Key generation or signing failed inside rcgen.
    #[error("could not {action}")]
    Generate {
        /// What was being done, e.g. "sign the agent certificate".
        action: &'static str,
        /// The underlying error.
        #[source]
        source: rcgen::Error,
    },

    /// A verified client certificate does not name a cluster in the way the hub issues them.
    #[error("client certificate does not carry an Accord cluster identity: {reason}")]
    PeerIdentity {
        /// What is missing or inconsistent.
        reason: String,
    },

    /// The `--ca-cert-hash` value is not `sha256:` followed by 64 hex digits.
    #[error(
        "invalid --ca-cert-hash {given:?}: expected \"sha256:\" followed by 64 hex digits, as \
         printed by `accord-hub token create`"
    )]
    InvalidCaCertHash {
        /// The value as given.
        given: String,
    },

    /// The hub's chain holds no CA whose key matches the pinned hash.
    #[error(
        "the hub's CA does not match --ca-cert-hash: expected {expected}, got {got}; check that \
         --hub points at the right hub and that the hash comes from its `accord-hub token create`"
    )]
    CaPinMismatch {
        /// The pinned hash, `sha256:HEX`.
        expected: String,
        /// Hash of the CA certificate the hub presented (the last of its chain).
        got: String,
    },

    /// The hub presented only its serving certificate, so there is no CA to pin.
    #[error(
        "the hub at {addr} presented only its serving certificate ({serving}), no CA \
         certificate to check against --ca-cert-hash; the hub must serve its chain \
         (serving certificate followed by the CA)"
    )]
    NoCaInChain {
        /// The hub address dialled.
        addr: String,
        /// SPKI hash of the one certificate presented.
        serving: String,
    },

    /// The hub's chain holds the pinned CA, but its serving certificate does not verify
    /// against it (wrong name, expired, not signed by it, ...).
    #[error(
        "the hub at {addr} holds the pinned CA but its serving certificate is not valid: {reason}"
    )]
    ServingCertInvalid {
        /// The hub address dialled.
        addr: String,
        /// Why verification failed.
        reason: String,
    },

    /// The hub address is not `HOST:PORT` (optionally with an `https://` scheme).
    #[error("invalid hub address {addr:?}: {reason}")]
    InvalidAddress {
        /// The address as given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The hub could not be reached or the TLS handshake failed for a reason other than the
    /// certificate checks above.
    #[error("could not complete a TLS handshake with the hub at {addr}")]
    Connect {
        /// The hub address dialled.
        addr: String,
        /// The underlying I/O or TLS error.
        #[source]
        source: std::io::Error,
    },

    /// A call to the Kubernetes API failed.
    #[error("could not {action} Secret {namespace}/{name} on the management cluster")]
    Kube {
        /// What was being done, e.g. "create".
        action: &'static str,
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// The underlying error (boxed: it is large, and this path is rare).
        #[source]
        source: Box<kube::Error>,
    },

    /// The CA Secret exists but lacks a key or holds something that is not the hub CA.
    #[error(
        "Secret {namespace}/{name} does not hold a usable hub CA: {reason}; fix or delete it \
         (deleting it issues a new CA, and every agent must then re-join)"
    )]
    BadCaSecret {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// What is missing or wrong.
        reason: String,
    },
}

impl PkiError {
    /// True when the error is the caller's fault (bad CSR, cluster name, hash, address), false
    /// when it is the hub's own (signing, storage). Feeds gRPC status codes and metric labels.
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            Self::InvalidClusterName { .. }
                | Self::MalformedCsr { .. }
                | Self::CsrSignature
                | Self::UnsupportedKey { .. }
                | Self::InvalidSan { .. }
                | Self::PeerIdentity { .. }
                | Self::InvalidCaCertHash { .. }
                | Self::InvalidAddress { .. }
        )
    }

    /// A short, stable name of the error's kind, for metric labels and Kubernetes Events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::InvalidClusterName { .. } => "invalid_cluster_name",
            Self::MalformedCsr { .. } | Self::CsrSignature => "invalid_csr",
            Self::UnsupportedKey { .. } => "unsupported_key",
            Self::MalformedCertificate { .. } | Self::MalformedKey { .. } => "malformed_pem",
            Self::NotACa | Self::KeyMismatch | Self::BadCaSecret { .. } => "bad_ca",
            Self::InvalidSan { .. } => "invalid_san",
            Self::InvalidValidity { .. } | Self::Generate { .. } => "signing",
            Self::PeerIdentity { .. } => "peer_identity",
            Self::InvalidCaCertHash { .. } | Self::InvalidAddress { .. } => "invalid_argument",
            Self::CaPinMismatch { .. } | Self::NoCaInChain { .. } => "ca_pin_mismatch",
            Self::ServingCertInvalid { .. } => "untrusted_hub",
            Self::Connect { .. } => "connect",
            Self::Kube { .. } => "kube",
        }
    }
}

impl From<PkiError> for tonic::Status {
    /// Caller mistakes become `INVALID_ARGUMENT` (or `UNAUTHENTICATED` for a peer without a
    /// cluster identity); the hub's own failures become `INTERNAL`.
    fn from(e: PkiError) -> Self {
        match &e {
            PkiError::PeerIdentity { .. } => tonic::Status::unauthenticated(e.to_string()),
            _ if e.is_invalid_input() => tonic::Status::invalid_argument(e.to_string()),
            _ => tonic::Status::internal(e.to_string()),
        }
    }
}
