//! The client side of SCRAM (RFC 5802) with SHA-512 or SHA-256 (RFC 7677), as Kafka's
//! SASL/SCRAM uses it: no channel binding, no SASLprep beyond escaping the user name; and
//! the salted password a credential is stored as (AlterUserScramCredentials), derived by
//! the same code the client proves itself with.

use std::num::NonZeroU32;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::{digest, hmac, pbkdf2};

use crate::config::{Password, SaslMechanism};
use crate::users::ScramMechanism;

/// The most PBKDF2 iterations we accept from a server (Kafka allows at most 16384); a
/// bound so a hostile server cannot make us spin.
const MAX_ITERATIONS: u32 = 1_000_000;

/// Why a SCRAM exchange failed. Messages never contain the password or derived keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    /// The server's message is not what RFC 5802 allows at this step.
    #[error("malformed SCRAM server message: {0}")]
    Malformed(&'static str),
    /// The server's nonce does not extend ours.
    #[error("the SCRAM server nonce does not extend the client nonce")]
    NonceMismatch,
    /// The server reported an error (`e=`).
    #[error("the server refused the SCRAM proof: {0}")]
    ServerError(String),
    /// The server's signature is wrong: it does not know the password (or is an impostor).
    #[error("the SCRAM server signature does not verify")]
    BadServerSignature,
}

/// The hash functions of one mechanism.
#[derive(Clone, Copy)]
struct Hash {
    pbkdf2: pbkdf2::Algorithm,
    hmac: hmac::Algorithm,
    digest: &'static digest::Algorithm,
}

impl Hash {
    fn of(mechanism: SaslMechanism) -> Self {
        match mechanism {
            SaslMechanism::ScramSha512 => Self {
                pbkdf2: pbkdf2::PBKDF2_HMAC_SHA512,
                hmac: hmac::HMAC_SHA512,
                digest: &digest::SHA512,
            },
            SaslMechanism::ScramSha256 => Self {
                pbkdf2: pbkdf2::PBKDF2_HMAC_SHA256,
                hmac: hmac::HMAC_SHA256,
                digest: &digest::SHA256,
            },
        }
    }

    fn hmac(&self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac, key), data)
            .as_ref()
            .to_vec()
    }

    /// SCRAM's `Hi(password, salt, i)`: PBKDF2 with the mechanism's HMAC, one digest long.
    fn hi(&self, password: &[u8], salt: &[u8], iterations: NonZeroU32) -> Vec<u8> {
        let mut salted = vec![0u8; self.digest.output_len()];
        pbkdf2::derive(self.pbkdf2, iterations, salt, password, &mut salted);
        salted
    }
}

/// The salted password (`Hi(password, salt, iterations)` of RFC 5802) that Kafka's
/// AlterUserScramCredentials takes in place of the password itself: the broker derives the
/// stored and server keys from it, so the password never leaves this process. An iteration
/// count of 0 is taken as 1 (Kafka refuses fewer than 4096 with UNACCEPTABLE_CREDENTIAL).
pub fn salted_password(
    mechanism: ScramMechanism,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Vec<u8> {
    let iterations = NonZeroU32::new(iterations).unwrap_or(NonZeroU32::MIN);
    Hash::of(mechanism.into()).hi(password, salt, iterations)
}

/// A SCRAM exchange in progress, after the client-first message.
pub struct ScramClient {
    hash: Hash,
    password: Password,
    client_nonce: String,
    client_first_bare: String,
}

/// The client, waiting for the server-final message.
pub struct ScramFinal {
    server_signature: Vec<u8>,
}

impl ScramClient {
    /// Starts an exchange with a fresh random nonce.
    pub fn new(mechanism: SaslMechanism, username: &str, password: &Password) -> Self {
        let mut nonce = [0u8; 24];
        // SystemRandom only fails when the OS has no randomness at all; a nonce of zeros
        // would then still be unique enough for one connection's exchange.
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce);
        Self::with_nonce(mechanism, username, password, BASE64.encode(nonce))
    }

    fn with_nonce(
        mechanism: SaslMechanism,
        username: &str,
        password: &Password,
        client_nonce: String,
    ) -> Self {
        let client_first_bare = format!("n={},r={client_nonce}", escape_username(username));
        Self {
            hash: Hash::of(mechanism),
            password: password.clone(),
            client_nonce,
            client_first_bare,
        }
    }

    /// The client-first message (GS2 header `n,,`: no channel binding, no authzid).
    pub fn client_first(&self) -> String {
        format!("n,,{}", self.client_first_bare)
    }

    /// Answers the server-first message with the client-final message (the proof).
    pub fn client_final(self, server_first: &[u8]) -> Result<(String, ScramFinal), ScramError> {
        let server_first =
            std::str::from_utf8(server_first).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for attribute in server_first.split(',') {
            match attribute.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => salt = Some(v),
                Some(("i", v)) => iterations = Some(v),
                Some(("m", _)) => return Err(ScramError::Malformed("mandatory extension")),
                Some(("e", v)) => return Err(ScramError::ServerError(v.to_string())),
                _ => {}
            }
        }
        let nonce = nonce.ok_or(ScramError::Malformed("no nonce"))?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err(ScramError::NonceMismatch);
        }
        let salt = BASE64
            .decode(salt.ok_or(ScramError::Malformed("no salt"))?)
            .map_err(|_| ScramError::Malformed("salt is not base64"))?;
        let iterations: u32 = iterations
            .ok_or(ScramError::Malformed("no iteration count"))?
            .parse()
            .map_err(|_| ScramError::Malformed("iteration count is not a number"))?;
        let iterations = NonZeroU32::new(iterations)
            .filter(|i| i.get() <= MAX_ITERATIONS)
            .ok_or(ScramError::Malformed("iteration count out of range"))?;

        let hash = self.hash;
        let salted = hash.hi(self.password.expose().as_bytes(), &salt, iterations);
        let client_key = hash.hmac(&salted, b"Client Key");
        let stored_key = digest::digest(hash.digest, &client_key);
        // "biws" is base64("n,,"), the GS2 header of the client-first message.
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let client_signature = hash.hmac(stored_key.as_ref(), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = hash.hmac(&salted, b"Server Key");
        let server_signature = hash.hmac(&server_key, auth_message.as_bytes());
        Ok((
            format!("{without_proof},p={}", BASE64.encode(proof)),
            ScramFinal { server_signature },
        ))
    }
}

impl ScramFinal {
    /// Checks the server-final message: the server proves it knows the password too.
    pub fn verify(self, server_final: &[u8]) -> Result<(), ScramError> {
        let server_final =
            std::str::from_utf8(server_final).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        for attribute in server_final.split(',') {
            match attribute.split_once('=') {
                Some(("e", v)) => return Err(ScramError::ServerError(v.to_string())),
                Some(("v", v)) => {
                    let signature = BASE64
                        .decode(v)
                        .map_err(|_| ScramError::Malformed("signature is not base64"))?;
                    return if constant_time_eq(&signature, &self.server_signature) {
                        Ok(())
                    } else {
                        Err(ScramError::BadServerSignature)
                    };
                }
                _ => {}
            }
        }
        Err(ScramError::Malformed("no verifier"))
    }
}

/// Equality whose time does not depend on where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// RFC 5802 `saslname`: `=` and `,` are escaped.
fn escape_username(username: &str) -> String {
    username.replace('=', "=3D").replace(',', "=2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scram_sha_256_matches_the_rfc_7677_example() {
        let client = ScramClient::with_nonce(
            SaslMechanism::ScramSha256,
            "user",
            &Password::new("pencil"),
            "rOprNGfwEbeRWgbNEkqO".into(),
        );
        assert_eq!(client.client_first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let (client_final, last) = client
            .client_final(
                b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            )
            .unwrap();
        assert_eq!(
            client_final,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        last.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
    }

    /// A vector computed independently (Python's hashlib/hmac, checked first against the
    /// RFC 7677 SHA-256 example), with a non-ASCII password.
    #[test]
    fn scram_sha_512_matches_an_independent_computation() {
        let client = ScramClient::with_nonce(
            SaslMechanism::ScramSha512,
            "accord",
            &Password::new("s3cret-pässword"),
            "fyko+d2lbbFgONRv9qkxdawL".into(),
        );
        let (client_final, last) = client
            .client_final(
                b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=UVNYQ1IrUTZzZWs4YmY5Mg==,i=4096",
            )
            .unwrap();
        assert_eq!(
            client_final,
            "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=UcN3EccBbdZUjoAcIIbX7/FAIe6MMCSR+K2ohvUBBakJgda+9QNpiZE6hK5DQ45P+2D3n1rpT1fJX0qUaGk/dw=="
        );
        last.verify(b"v=ecWrvnvqvVjWrDSTuWbIGWWoiLmcFvAzA8jkEkbF4tXba9SVlgRNt1rcQQjrEOpBiQtF4Sc2kL37Ue2DYqPifA==")
            .unwrap();
    }

    /// The server signature of an exchange, from a salted password alone: a check of
    /// [`salted_password`] against the vectors above, whose signatures were computed
    /// elsewhere (RFC 7677, Python).
    fn server_signature(mechanism: ScramMechanism, salted: &[u8], auth_message: &str) -> String {
        let hash = Hash::of(mechanism.into());
        let server_key = hash.hmac(salted, b"Server Key");
        BASE64.encode(hash.hmac(&server_key, auth_message.as_bytes()))
    }

    #[test]
    fn the_stored_salted_password_matches_the_rfc_7677_sha_256_example() {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = salted_password(ScramMechanism::Sha256, b"pencil", &salt, 4096);
        assert_eq!(salted.len(), 32);
        let auth_message = "n=user,r=rOprNGfwEbeRWgbNEkqO,\
            r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,\
            c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        assert_eq!(
            server_signature(ScramMechanism::Sha256, &salted, auth_message),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }

    #[test]
    fn the_stored_salted_password_matches_the_independent_sha_512_vector() {
        let salt = BASE64.decode("UVNYQ1IrUTZzZWs4YmY5Mg==").unwrap();
        let salted = salted_password(
            ScramMechanism::Sha512,
            "s3cret-pässword".as_bytes(),
            &salt,
            4096,
        );
        assert_eq!(salted.len(), 64);
        let auth_message = "n=accord,r=fyko+d2lbbFgONRv9qkxdawL,\
            r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=UVNYQ1IrUTZzZWs4YmY5Mg==,i=4096,\
            c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j";
        assert_eq!(
            server_signature(ScramMechanism::Sha512, &salted, auth_message),
            "ecWrvnvqvVjWrDSTuWbIGWWoiLmcFvAzA8jkEkbF4tXba9SVlgRNt1rcQQjrEOpBiQtF4Sc2kL37Ue2DYqPifA=="
        );
        // A different salt or count gives a different credential; 0 iterations is 1.
        assert_ne!(
            salted,
            salted_password(
                ScramMechanism::Sha512,
                "s3cret-pässword".as_bytes(),
                b"x",
                4096
            )
        );
        assert_eq!(
            salted_password(ScramMechanism::Sha512, b"p", b"s", 0),
            salted_password(ScramMechanism::Sha512, b"p", b"s", 1)
        );
    }

    fn sha512_client() -> ScramClient {
        ScramClient::with_nonce(
            SaslMechanism::ScramSha512,
            "accord",
            &Password::new("s3cret-pässword"),
            "fyko+d2lbbFgONRv9qkxdawL".into(),
        )
    }

    #[test]
    fn a_wrong_server_signature_is_rejected() {
        let (_, last) = sha512_client()
            .client_final(b"r=fyko+d2lbbFgONRv9qkxdawLXYZ,s=UVNYQ1IrUTZzZWs4YmY5Mg==,i=4096")
            .unwrap();
        assert_eq!(
            last.verify(b"v=AAAA").unwrap_err(),
            ScramError::BadServerSignature
        );
    }

    #[test]
    fn hostile_or_malformed_server_messages_are_errors_not_panics() {
        let cases: [&[u8]; 9] = [
            b"",
            b"\xff\xfe",
            b"r=someone-elses-nonce,s=QQ==,i=4096",
            b"r=fyko+d2lbbFgONRv9qkxdawL,s=QQ==,i=4096",
            b"r=fyko+d2lbbFgONRv9qkxdawLX,s=***,i=4096",
            b"r=fyko+d2lbbFgONRv9qkxdawLX,s=QQ==,i=0",
            b"r=fyko+d2lbbFgONRv9qkxdawLX,s=QQ==,i=4000000000",
            b"r=fyko+d2lbbFgONRv9qkxdawLX,s=QQ==",
            b"e=other-error",
        ];
        for case in cases {
            assert!(sha512_client().client_final(case).is_err(), "{case:?}");
        }
        let (_, last) = sha512_client()
            .client_final(b"r=fyko+d2lbbFgONRv9qkxdawLX,s=QQ==,i=4096")
            .unwrap();
        assert_eq!(
            last.verify(b"e=invalid-proof").unwrap_err(),
            ScramError::ServerError("invalid-proof".into())
        );
    }

    #[test]
    fn user_names_are_escaped_and_nonces_are_fresh() {
        let a = ScramClient::new(SaslMechanism::ScramSha512, "a=b,c", &Password::new("p"));
        let b = ScramClient::new(SaslMechanism::ScramSha512, "a=b,c", &Password::new("p"));
        assert!(
            a.client_first().starts_with("n,,n=a=3Db=2Cc,r="),
            "{}",
            a.client_first()
        );
        assert_ne!(a.client_first(), b.client_first());
    }
}
