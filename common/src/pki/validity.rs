//! When a certificate is valid and which key it certifies: what certificate renewal needs
//! to schedule itself (agent) and to remember the key it replaces (hub).

use rcgen::{KeyPair, PublicKeyData};

use super::PkiError;
use super::identity::{parse_cert, pem_certs, sha256_tagged};

/// The validity window of a certificate, in seconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CertValidity {
    /// `notBefore`.
    pub not_before_unix: i64,
    /// `notAfter`.
    pub not_after_unix: i64,
}

/// What is known about one DER certificate: its validity window and the
/// `sha256:<hex>` of its SubjectPublicKeyInfo (which key it certifies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFacts {
    /// Its validity window.
    pub validity: CertValidity,
    /// `sha256:<hex>` of its SubjectPublicKeyInfo.
    pub spki_sha256: String,
}

/// Reads the validity window and key hash of one DER certificate.
pub fn cert_facts(cert_der: &[u8]) -> Result<CertFacts, PkiError> {
    let cert = parse_cert(cert_der, "certificate")?;
    Ok(CertFacts {
        validity: CertValidity {
            not_before_unix: cert.validity().not_before.timestamp(),
            not_after_unix: cert.validity().not_after.timestamp(),
        },
        spki_sha256: sha256_tagged(cert.tbs_certificate.subject_pki.raw),
    })
}

/// [`cert_facts`] of the first (leaf) certificate of a PEM bundle.
pub fn cert_facts_pem(cert_pem: &str) -> Result<CertFacts, PkiError> {
    let ders = pem_certs(cert_pem, "certificate")?;
    let leaf = ders.first().ok_or_else(|| PkiError::MalformedCertificate {
        what: "certificate",
        reason: "no certificate in the PEM bundle".into(),
    })?;
    cert_facts(leaf)
}

/// `sha256:<hex>` of the SubjectPublicKeyInfo of a PEM PKCS#8 private key's public half:
/// equal to a certificate's [`CertFacts::spki_sha256`] exactly when it certifies that key.
pub fn key_spki_sha256(key_pem: &str) -> Result<String, PkiError> {
    let key = KeyPair::from_pem(key_pem).map_err(|source| PkiError::MalformedKey {
        what: "private key",
        source,
    })?;
    Ok(sha256_tagged(&key.subject_public_key_info()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{HubCa, agent_csr};
    use std::time::Duration;

    #[test]
    fn a_signed_certificate_reports_its_window_and_certifies_the_csr_key() {
        let ca = HubCa::generate("test-ca").unwrap();
        let csr = agent_csr("east").unwrap();
        let signed = ca
            .sign_agent_csr(&csr.csr_pem, "east", Duration::from_secs(60))
            .unwrap();
        let facts = cert_facts_pem(&signed.cert_pem).unwrap();
        assert_eq!(facts.validity.not_after_unix, signed.not_after_unix);
        assert!(facts.validity.not_before_unix < facts.validity.not_after_unix);
        assert_eq!(facts.spki_sha256, signed.spki_sha256);
        assert_eq!(key_spki_sha256(&csr.key_pem).unwrap(), facts.spki_sha256);
        let other = agent_csr("east").unwrap();
        assert_ne!(key_spki_sha256(&other.key_pem).unwrap(), facts.spki_sha256);
    }

    #[test]
    fn a_short_lived_certificate_is_backdated_by_a_fraction_of_its_lifetime_only() {
        // Renewal at two thirds of the lifetime needs notBefore near the issue time; a
        // five-minute backdate on a 15 s certificate would make it due at once, forever.
        let ca = HubCa::generate("test-ca").unwrap();
        let csr = agent_csr("east").unwrap();
        let signed = ca
            .sign_agent_csr(&csr.csr_pem, "east", Duration::from_secs(15))
            .unwrap();
        let v = cert_facts_pem(&signed.cert_pem).unwrap().validity;
        assert!(v.not_after_unix - v.not_before_unix <= 17, "{v:?}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(cert_facts(b"not der").is_err());
        assert!(cert_facts_pem("not pem").is_err());
        assert!(key_spki_sha256("not a key").is_err());
    }
}
