//! Unit tests of the PKI module: pure, no network, no cluster.

use std::process::{Command, Stdio};
use std::time::Duration;

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, KeyPair, SanType,
};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

use super::identity::{parse_cert, pem_certs};
use super::tls::split_host_port;
use super::*;

const DAY: Duration = Duration::from_secs(86_400);

fn ca() -> HubCa {
    HubCa::generate("accord-test-ca").unwrap()
}

fn der_of(pem_text: &str) -> Vec<u8> {
    pem_certs(pem_text, "test certificate")
        .unwrap()
        .into_iter()
        .next()
        .unwrap()
}

fn uri_sans(der: &[u8]) -> Vec<String> {
    let cert = parse_cert(der, "test").unwrap();
    cert.subject_alternative_name()
        .unwrap()
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::URI(u) => Some((*u).to_owned()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

fn common_names(der: &[u8]) -> Vec<String> {
    let cert = parse_cert(der, "test").unwrap();
    cert.subject()
        .iter_common_name()
        .map(|cn| cn.as_str().unwrap().to_owned())
        .collect()
}

/// A cert signed by `ca` with whatever subject and SANs the test wants, bypassing the hub's
/// rules, to see what `peer_identity` makes of it.
fn custom_client_cert(ca: &HubCa, cn: Option<&str>, sans: Vec<SanType>) -> Vec<u8> {
    let issuer =
        rcgen::Issuer::from_ca_cert_pem(ca.cert_pem(), KeyPair::from_pem(&ca.key_pem()).unwrap())
            .unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    if let Some(cn) = cn {
        dn.push(DnType::CommonName, cn);
    }
    dn.push(DnType::OrganizationName, "accord-test");
    params.distinguished_name = dn;
    params.subject_alt_names = sans;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.signed_by(&key, &issuer).unwrap().der().to_vec()
}

fn openssl(args: &[&str], stdin: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(stdin).ok()?;
    let out = child.wait_with_output().ok()?;
    out.status.success().then_some(out.stdout)
}

#[test]
fn signed_agent_cert_names_the_cluster_in_cn_and_uri_san_with_client_auth_only() {
    let ca = ca();
    let csr = agent_csr("us-central1").unwrap();
    let signed = ca
        .sign_agent_csr(&csr.csr_pem, "us-central1", 30 * DAY)
        .unwrap();
    let der = der_of(&signed.cert_pem);
    let cert = parse_cert(&der, "test").unwrap();

    assert_eq!(common_names(&der), ["us-central1"]);
    assert_eq!(uri_sans(&der), ["accord://cluster/us-central1"]);
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth);
    assert!(!eku.server_auth && !eku.any && !eku.code_signing && eku.other.is_empty());
    let bc = cert.basic_constraints().unwrap().unwrap().value;
    assert!(!bc.ca);
    assert_eq!(
        cert.issuer().to_string(),
        parse_cert(&der_of(ca.cert_pem()), "ca")
            .unwrap()
            .subject()
            .to_string()
    );
    let lifetime = signed.not_after_unix - cert.validity().not_before.timestamp();
    // 30 days plus the 5-minute backdating.
    assert_eq!(lifetime, 30 * 86_400 + 300);
    assert_eq!(signed.not_after_unix, cert.validity().not_after.timestamp());
}

#[test]
fn signed_cert_carries_the_agents_own_public_key() {
    let ca = ca();
    let csr = agent_csr("eu-west1").unwrap();
    let signed = ca.sign_agent_csr(&csr.csr_pem, "eu-west1", DAY).unwrap();
    let key = KeyPair::from_pem(&csr.key_pem).unwrap();
    let cert = parse_cert(&der_of(&signed.cert_pem), "test")
        .unwrap()
        .tbs_certificate
        .subject_pki
        .raw
        .to_vec();
    assert_eq!(rcgen::PublicKeyData::subject_public_key_info(&key), cert);
    assert_eq!(
        signed.spki_sha256,
        super::identity::sha256_tagged(&rcgen::PublicKeyData::subject_public_key_info(&key))
    );
}

#[test]
fn hub_decides_the_subject_whatever_the_csr_asked_for() {
    let ca = ca();
    // A CSR for cluster "alpha" asking for server auth, a DNS name and another cluster's URI.
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "alpha");
    dn.push(DnType::OrganizationName, "system:masters");
    params.distinguished_name = dn;
    params.subject_alt_names = vec![
        SanType::DnsName("evil.example.com".try_into().unwrap()),
        SanType::URI("accord://cluster/alpha".try_into().unwrap()),
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let csr_pem = params.serialize_request(&key).unwrap().pem().unwrap();

    let signed = ca.sign_agent_csr(&csr_pem, "beta", DAY).unwrap();
    let der = der_of(&signed.cert_pem);
    let cert = parse_cert(&der, "test").unwrap();
    assert_eq!(common_names(&der), ["beta"]);
    assert_eq!(cert.subject().to_string(), "CN=beta");
    assert_eq!(uri_sans(&der), ["accord://cluster/beta"]);
    let sans = cert.subject_alternative_name().unwrap().unwrap().value;
    assert_eq!(sans.general_names.len(), 1, "no DNS SAN from the CSR");
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth && !eku.server_auth);
    assert!(!cert.basic_constraints().unwrap().unwrap().value.ca);
    assert_eq!(peer_identity(&der).unwrap().cluster, "beta");
}

#[test]
fn peer_identity_round_trips_a_signed_certificate() {
    let ca = ca();
    let csr = agent_csr("member-1").unwrap();
    let signed = ca.sign_agent_csr(&csr.csr_pem, "member-1", DAY).unwrap();
    let der = der_of(&signed.cert_pem);
    let identity = peer_identity(&der).unwrap();
    assert_eq!(
        identity,
        PeerIdentity {
            cluster: "member-1".into(),
            spki_sha256: signed.spki_sha256.clone(),
        }
    );
    assert_eq!(spki_sha256(&der).unwrap(), signed.spki_sha256);
}

#[test]
fn renewal_csr_with_the_same_key_keeps_the_key_identity() {
    let ca = ca();
    let first = agent_csr("member-2").unwrap();
    let renewal = agent_csr_with_key("member-2", &first.key_pem).unwrap();
    let a = ca.sign_agent_csr(&first.csr_pem, "member-2", DAY).unwrap();
    let b = ca.sign_agent_csr(&renewal, "member-2", DAY).unwrap();
    assert_eq!(a.spki_sha256, b.spki_sha256);
    assert_ne!(a.cert_pem, b.cert_pem, "fresh serial number each time");
}

#[test]
fn peer_identity_refuses_a_uri_san_naming_another_cluster() {
    let ca = ca();
    let der = custom_client_cert(
        &ca,
        Some("alpha"),
        vec![SanType::URI("accord://cluster/beta".try_into().unwrap())],
    );
    let err = peer_identity(&der).unwrap_err().to_string();
    assert!(
        err.contains("names cluster \"beta\" but its common name is \"alpha\""),
        "{err}"
    );
}

#[test]
fn peer_identity_accepts_a_cn_only_certificate_and_ignores_foreign_uris() {
    let ca = ca();
    let der = custom_client_cert(
        &ca,
        Some("alpha"),
        vec![SanType::URI(
            "spiffe://cluster.local/ns/x".try_into().unwrap(),
        )],
    );
    assert_eq!(peer_identity(&der).unwrap().cluster, "alpha");
}

#[test]
fn peer_identity_refuses_certificates_without_a_valid_cluster_cn() {
    let ca = ca();
    let no_cn = custom_client_cert(&ca, None, vec![]);
    let err = peer_identity(&no_cn).unwrap_err();
    assert!(err.to_string().contains("no common name"), "{err}");
    assert_eq!(
        tonic::Status::from(err).code(),
        tonic::Code::Unauthenticated
    );

    let bad_cn = custom_client_cert(&ca, Some("Not A Cluster"), vec![]);
    let err = peer_identity(&bad_cn).unwrap_err().to_string();
    assert!(err.contains("is not a valid cluster name"), "{err}");

    let err = peer_identity(b"not a certificate").unwrap_err().to_string();
    assert!(err.contains("malformed client certificate"), "{err}");
}

#[test]
fn generated_ca_is_a_p256_ca_valid_for_ten_years_that_may_sign_certificates() {
    let ca = ca();
    let der = der_of(ca.cert_pem());
    let cert = parse_cert(&der, "ca").unwrap();
    let bc = cert.basic_constraints().unwrap().unwrap().value;
    assert!(bc.ca);
    assert_eq!(bc.path_len_constraint, Some(0));
    let ku = cert.key_usage().unwrap().unwrap().value;
    assert!(ku.key_cert_sign() && ku.crl_sign());
    assert_eq!(
        cert.tbs_certificate.subject_pki.algorithm.algorithm,
        x509_parser::oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY
    );
    let years = (ca.not_after_unix() - cert.validity().not_before.timestamp()) / (365 * 86_400);
    assert_eq!(years, 10);
    assert_eq!(ca.common_name(), "accord-test-ca");
    assert_eq!(cert.subject().to_string(), "CN=accord-test-ca");
}

#[test]
fn ca_cert_hash_is_stable_across_a_pem_reload() {
    let ca = ca();
    let reloaded = HubCa::from_pem(ca.cert_pem(), &ca.key_pem()).unwrap();
    assert_eq!(ca.ca_cert_hash(), reloaded.ca_cert_hash());
    assert_eq!(ca.cert_pem(), reloaded.cert_pem());
    // The reloaded CA signs certificates that chain to the same key.
    let csr = agent_csr("member-3").unwrap();
    let signed = reloaded
        .sign_agent_csr(&csr.csr_pem, "member-3", DAY)
        .unwrap();
    let cert_der = der_of(&signed.cert_pem);
    let cert = parse_cert(&cert_der, "leaf").unwrap();
    let ca_der = der_of(ca.cert_pem());
    let ca_cert = parse_cert(&ca_der, "ca").unwrap();
    cert.verify_signature(Some(ca_cert.public_key())).unwrap();
}

#[test]
fn ca_cert_hash_is_the_sha256_of_the_subject_public_key_info_der() {
    use sha2::{Digest, Sha256};
    let ca = ca();
    let der = der_of(ca.cert_pem());
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&der).unwrap();
    let spki_der = cert.tbs_certificate.subject_pki.raw;
    // A P-256 SPKI: SEQUENCE { AlgorithmIdentifier, BIT STRING of 65 bytes } = 91 bytes.
    assert_eq!(spki_der.len(), 91);
    let expected = format!("sha256:{}", hex::encode(Sha256::digest(spki_der)));
    let hash = ca.ca_cert_hash();
    assert_eq!(hash, expected);
    assert_eq!(ca_cert_hash_of(ca.cert_pem()).unwrap(), expected);
    assert_eq!(hash.len(), "sha256:".len() + 64);
    assert_eq!(
        parse_ca_cert_hash(&hash.to_uppercase().replace("SHA256", "sha256")).unwrap(),
        hash
    );
}

#[test]
fn ca_cert_hash_matches_the_openssl_pipeline_kubeadm_documents() {
    // openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | sha256sum
    let ca = ca();
    let Some(pubkey_pem) = openssl(&["x509", "-pubkey", "-noout"], ca.cert_pem().as_bytes()) else {
        eprintln!("openssl not available; skipping");
        return;
    };
    let spki_der = openssl(&["pkey", "-pubin", "-outform", "der"], &pubkey_pem).unwrap();
    use sha2::{Digest, Sha256};
    assert_eq!(
        ca.ca_cert_hash(),
        format!("sha256:{}", hex::encode(Sha256::digest(&spki_der)))
    );
}

#[test]
fn csr_made_by_openssl_is_accepted_and_weak_rsa_refused() {
    let dir = tempfile::tempdir().unwrap();
    let make = |bits: &str| -> Option<String> {
        let key = dir.path().join(format!("k{bits}.pem"));
        let csr = Command::new("openssl")
            .args(["req", "-new", "-newkey", &format!("rsa:{bits}"), "-nodes"])
            .arg("-keyout")
            .arg(&key)
            .args([
                "-subj",
                "/CN=whatever/O=x",
                "-addext",
                "subjectAltName=DNS:x.example",
            ])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        csr.status
            .success()
            .then(|| String::from_utf8(csr.stdout).unwrap())
    };
    let Some(strong) = make("2048") else {
        eprintln!("openssl not available; skipping");
        return;
    };
    let ca = ca();
    let signed = ca.sign_agent_csr(&strong, "rsa-member", DAY).unwrap();
    assert_eq!(common_names(&der_of(&signed.cert_pem)), ["rsa-member"]);

    let weak = make("1024").unwrap();
    let err = ca.sign_agent_csr(&weak, "rsa-member", DAY).unwrap_err();
    assert!(matches!(err, PkiError::UnsupportedKey { .. }), "{err}");
    assert!(err.to_string().contains("RSA key of 1024 bits"), "{err}");
}

#[test]
fn malformed_csrs_are_refused_with_clear_messages() {
    let ca = ca();
    let cases = [
        ("", "not PEM"),
        ("hello", "not PEM"),
        (ca.cert_pem(), "found a \"CERTIFICATE\" PEM block"),
        (
            "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
            "not a DER PKCS#10 request",
        ),
    ];
    for (csr, expected) in cases {
        let err = ca.sign_agent_csr(csr, "member-1", DAY).unwrap_err();
        assert!(matches!(err, PkiError::MalformedCsr { .. }), "{err}");
        assert!(err.is_invalid_input());
        let msg = err.to_string();
        assert!(
            msg.starts_with("malformed certificate signing request"),
            "{msg}"
        );
        assert!(msg.contains(expected), "{msg} should contain {expected}");
        assert_eq!(
            tonic::Status::from(err).code(),
            tonic::Code::InvalidArgument
        );
    }
}

#[test]
fn csr_whose_signature_does_not_verify_is_refused() {
    let ca = ca();
    let csr = agent_csr("alpha").unwrap();
    let block = pem::parse(&csr.csr_pem).unwrap();
    let mut der = block.contents().to_vec();
    // Change the subject CN "alpha" to "alphb": still a well-formed request, but the
    // signature no longer covers what it says.
    let at = der.windows(5).position(|w| w == b"alpha").unwrap();
    der[at + 4] = b'b';
    let tampered = pem::encode(&pem::Pem::new("CERTIFICATE REQUEST", der));
    let err = ca.sign_agent_csr(&tampered, "alpha", DAY).unwrap_err();
    assert!(matches!(err, PkiError::CsrSignature), "{err}");
    assert!(err.to_string().contains("signature does not verify"));
}

#[test]
fn invalid_cluster_names_are_refused_everywhere() {
    let ca = ca();
    let csr = agent_csr("ok").unwrap();
    let long = "a".repeat(64);
    for name in [
        "",
        "UPPER",
        "-lead",
        "trail-",
        "under_score",
        "dot.ted",
        "sp ace",
        &long,
    ] {
        let err = ca.sign_agent_csr(&csr.csr_pem, name, DAY).unwrap_err();
        assert!(
            matches!(err, PkiError::InvalidClusterName { .. }),
            "{name}: {err}"
        );
        assert!(
            err.to_string()
                .contains("lowercase letters, digits and '-'"),
            "{err}"
        );
        assert!(agent_csr(name).is_err(), "{name}");
    }
    assert!(validate_cluster_name(&"a".repeat(63)).is_ok());
    assert!(validate_cluster_name("0-member").is_ok());
}

#[test]
fn leaf_validity_must_be_positive_and_is_capped_by_the_ca() {
    let ca = ca();
    let csr = agent_csr("member-1").unwrap();
    let err = ca
        .sign_agent_csr(&csr.csr_pem, "member-1", Duration::ZERO)
        .unwrap_err();
    assert!(matches!(err, PkiError::InvalidValidity { .. }), "{err}");
    let err = ca
        .sign_agent_csr(&csr.csr_pem, "member-1", 100 * 365 * DAY)
        .unwrap_err();
    assert!(matches!(err, PkiError::InvalidValidity { .. }), "{err}");
    let signed = ca
        .sign_agent_csr(&csr.csr_pem, "member-1", 5 * 365 * DAY)
        .unwrap();
    assert!(signed.not_after_unix <= ca.not_after_unix());
}

#[test]
fn from_pem_refuses_a_leaf_a_foreign_key_and_garbage() {
    let ca = ca();
    let other = HubCa::generate("other").unwrap();
    let err = HubCa::from_pem(ca.cert_pem(), &other.key_pem()).unwrap_err();
    assert!(matches!(err, PkiError::KeyMismatch), "{err}");

    let serving = ca.issue_server_cert(&["localhost".into()], DAY).unwrap();
    let err = HubCa::from_pem(&serving.cert_pem, &serving.key_pem).unwrap_err();
    assert!(matches!(err, PkiError::NotACa), "{err}");

    let err = HubCa::from_pem("garbage", &ca.key_pem()).unwrap_err();
    assert!(
        matches!(err, PkiError::MalformedCertificate { .. }),
        "{err}"
    );
    let err = HubCa::from_pem(ca.cert_pem(), "garbage").unwrap_err();
    assert!(matches!(err, PkiError::MalformedKey { .. }), "{err}");
    assert!(err.to_string().contains("PKCS#8"), "{err}");
}

#[test]
fn serving_cert_has_dns_and_ip_sans_and_server_auth_only() {
    let ca = ca();
    let sans = [
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "accord-hub.accord-system.svc".to_owned(),
        "::1".to_owned(),
    ];
    let serving = ca.issue_server_cert(&sans, 365 * DAY).unwrap();
    let der = der_of(&serving.cert_pem);
    let cert = parse_cert(&der, "serving").unwrap();
    let names: Vec<String> = cert
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(
        names.contains(&"DNSName(localhost)".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"DNSName(accord-hub.accord-system.svc)".to_owned()),
        "{names:?}"
    );
    assert_eq!(common_names(&der), ["localhost"]);
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && !eku.client_auth);
    assert!(serving.key_pem.contains("BEGIN PRIVATE KEY"));
}

#[test]
fn serving_cert_refuses_unusable_names() {
    let ca = ca();
    for san in ["", "has space", "under_score!", "trailing..dots"] {
        let err = ca.issue_server_cert(&[san.to_owned()], DAY).unwrap_err();
        assert!(matches!(err, PkiError::InvalidSan { .. }), "{san}: {err}");
    }
    let err = ca.issue_server_cert(&[], DAY).unwrap_err();
    assert!(matches!(err, PkiError::InvalidSan { .. }), "{err}");
    assert!(
        ca.issue_server_cert(&["*.hub.example.com".into()], DAY)
            .is_ok()
    );
}

#[test]
fn debug_output_never_shows_private_keys() {
    let ca = ca();
    let serving = ca.issue_server_cert(&["localhost".into()], DAY).unwrap();
    let csr = agent_csr("member-1").unwrap();
    for shown in [
        format!("{ca:?}"),
        format!("{serving:?}"),
        format!("{csr:?}"),
    ] {
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    }
    assert!(format!("{ca:?}").contains(&ca.ca_cert_hash()));
    for key in [ca.key_pem(), serving.key_pem.clone(), csr.key_pem.clone()] {
        let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
        for shown in [
            format!("{ca:?}"),
            format!("{serving:?}"),
            format!("{csr:?}"),
        ] {
            assert!(!shown.contains(&body[..32]));
        }
    }
}

#[test]
fn ca_secret_round_trips_and_is_opaque_with_tls_keys() {
    let ca = ca();
    let secret = ca.to_secret("accord-system", DEFAULT_CA_SECRET_NAME);
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    let data = secret.data.as_ref().unwrap();
    assert_eq!(
        data.keys().map(String::as_str).collect::<Vec<_>>(),
        [CA_CERT_KEY, CA_KEY_KEY]
    );
    assert_eq!(
        secret.metadata.annotations.as_ref().unwrap()["accord.io/ca-cert-hash"],
        ca.ca_cert_hash()
    );
    let loaded = HubCa::from_secret(&secret).unwrap();
    assert_eq!(loaded.ca_cert_hash(), ca.ca_cert_hash());

    let mut broken = secret.clone();
    broken.data.as_mut().unwrap().remove(CA_KEY_KEY);
    let err = HubCa::from_secret(&broken).unwrap_err().to_string();
    assert!(
        err.contains("accord-system/accord-hub-ca") && err.contains("\"tls.key\" is missing"),
        "{err}"
    );
}

#[test]
fn ca_cert_hash_values_are_parsed_strictly() {
    let hex64 = "ab".repeat(32);
    assert_eq!(
        parse_ca_cert_hash(&format!("sha256:{}", hex64.to_uppercase())).unwrap(),
        format!("sha256:{hex64}")
    );
    for bad in [
        hex64.clone(),
        format!("sha1:{hex64}"),
        format!("sha256:{}", &hex64[..62]),
        format!("sha256:{}zz", &hex64[..62]),
        String::new(),
    ] {
        let err = parse_ca_cert_hash(&bad).unwrap_err();
        assert!(matches!(err, PkiError::InvalidCaCertHash { .. }), "{bad}");
        assert!(err.to_string().contains("64 hex digits"));
    }
}

#[test]
fn hub_addresses_are_split_into_host_and_port() {
    assert_eq!(
        split_host_port("hub.example.com:7443").unwrap(),
        ("hub.example.com".into(), 7443)
    );
    assert_eq!(
        split_host_port("https://10.0.0.1:7443/").unwrap(),
        ("10.0.0.1".into(), 7443)
    );
    assert_eq!(split_host_port("[::1]:7443").unwrap(), ("::1".into(), 7443));
    for bad in [
        "hub.example.com",
        "http://hub:80",
        "::1:7443",
        ":7443",
        "hub:0",
        "hub:x",
    ] {
        let err = split_host_port(bad).unwrap_err();
        assert!(
            matches!(err, PkiError::InvalidAddress { .. }),
            "{bad}: {err}"
        );
    }
}

#[test]
fn csrs_with_p384_and_ed25519_keys_are_accepted() {
    let ca = ca();
    for alg in [&rcgen::PKCS_ECDSA_P384_SHA384, &rcgen::PKCS_ED25519] {
        let key = KeyPair::generate_for(alg).unwrap();
        let csr_pem = CertificateParams::default()
            .serialize_request(&key)
            .unwrap()
            .pem()
            .unwrap();
        let signed = ca.sign_agent_csr(&csr_pem, "member-4", DAY).unwrap();
        let der = der_of(&signed.cert_pem);
        assert_eq!(peer_identity(&der).unwrap().cluster, "member-4");
        assert_eq!(
            signed.spki_sha256,
            super::identity::sha256_tagged(&rcgen::PublicKeyData::subject_public_key_info(&key))
        );
    }
}
