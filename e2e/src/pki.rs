//! A throwaway certificate authority for the testbed's API servers and their clients.
//!
//! One CA per testbed signs each API server's serving certificate (for `127.0.0.1` and
//! `localhost`) and the admin client certificates (`O=system:masters`). Keys are ECDSA
//! P-256 and exist only inside the testbed's directory.

use anyhow::{Context as _, Result};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

/// A certificate with its private key, both PEM encoded.
#[derive(Debug, Clone)]
pub struct KeyMaterial {
    /// The certificate, PEM encoded.
    pub cert_pem: String,
    /// The private key (PKCS#8), PEM encoded.
    pub key_pem: String,
}

/// The testbed's certificate authority.
pub struct CertificateAuthority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl CertificateAuthority {
    /// Creates a new self-signed CA named `common_name`.
    pub fn new(common_name: &str) -> Result<Self> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, &[]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().context("generating the CA key")?;
        let issuer = CertifiedIssuer::self_signed(params, key).context("self-signing the CA")?;
        Ok(Self { issuer })
    }

    /// The CA certificate, PEM encoded.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// Issues a serving certificate for the given DNS names and IP addresses.
    pub fn issue_server(
        &self,
        common_name: &str,
        subject_alt_names: &[&str],
    ) -> Result<KeyMaterial> {
        let mut params = CertificateParams::new(
            subject_alt_names
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
        )
        .context("invalid subject alternative name")?;
        params.distinguished_name = name(common_name, &[]);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params)
    }

    /// Issues a client certificate; Kubernetes reads the user from the common name and the
    /// groups from the organizations.
    pub fn issue_client(&self, common_name: &str, organizations: &[&str]) -> Result<KeyMaterial> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, organizations);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params)
    }

    fn issue(&self, params: CertificateParams) -> Result<KeyMaterial> {
        let key = KeyPair::generate().context("generating a key")?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .context("signing a certificate")?;
        Ok(KeyMaterial {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A fresh ECDSA key for signing service account tokens: the private key (PKCS#8 PEM)
/// and the public key (SubjectPublicKeyInfo PEM).
pub fn service_account_key() -> Result<(String, String)> {
    let key = KeyPair::generate().context("generating the service account key")?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

fn name(common_name: &str, organizations: &[&str]) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    for organization in organizations {
        name.push(DnType::OrganizationName, *organization);
    }
    name.push(DnType::CommonName, common_name);
    name
}
