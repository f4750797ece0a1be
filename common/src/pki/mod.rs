//! PKI of the hub–agent connection: the hub CA, agent certificate signing, peer identities
//! and the rustls/tonic TLS configuration of both ends, including kubeadm-style CA pinning
//! for the join.
//!
//! Trust model:
//! - The hub CA (ECDSA P-256, ten years) lives in a Secret on the management cluster; every
//!   hub replica loads the same one ([`HubCa::load_or_create`]).
//! - An agent joins with a bootstrap token and the hash of the CA's SubjectPublicKeyInfo
//!   (`--ca-cert-hash sha256:HEX`). It fetches the hub's chain, accepts it only if it holds a
//!   CA whose key matches the hash ([`fetch_pinned_ca`]), and sends a CSR ([`agent_csr`]).
//! - The hub signs the CSR ([`HubCa::sign_agent_csr`]) with the subject it decided (CN =
//!   cluster name, URI SAN `accord://cluster/<name>`), never the one the CSR asked for.
//! - Afterwards every connection is mutual TLS; the hub reads the cluster from the verified
//!   client certificate ([`peer_identity`]).

mod ca;
mod error;
mod identity;
mod tls;
mod validity;

pub use ca::{
    CA_CERT_KEY, CA_KEY_KEY, DEFAULT_CA_COMMON_NAME, DEFAULT_CA_SECRET_NAME, HubCa, KeyPairPem,
    SignedCert,
};
pub use error::PkiError;
pub use identity::{
    AgentCsr, CLUSTER_URI_PREFIX, PeerIdentity, agent_csr, agent_csr_with_key, ca_cert_hash_of,
    cluster_uri, parse_ca_cert_hash, peer_identity, request_peer_identity, spki_sha256,
    validate_cluster_name,
};
pub use tls::{
    HANDSHAKE_TIMEOUT, client_tls_config, fetch_pinned_ca, fetch_pinned_ca_as,
    install_crypto_provider, server_tls_config,
};
pub use validity::{CertFacts, CertValidity, cert_facts, cert_facts_pem, key_spki_sha256};

#[cfg(test)]
mod tests;
