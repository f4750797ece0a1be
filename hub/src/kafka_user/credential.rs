//! The SCRAM-SHA-512 credential of a FederatedKafkaUser, derived on the hub from the
//! password in the management cluster's Secret. Kafka's AlterUserScramCredentials takes a
//! salt, an iteration count and the salted password `Hi(password, salt, i)`, so the
//! password itself never leaves the management cluster.
//!
//! The leader's decision picks the salt — a fresh random one whenever the password or the
//! iteration count changes, the previous one otherwise (so an unchanged password is never
//! sent as a new credential) — and stores the salt, the iteration count and a hash of the
//! derived credential: never the password, never the salted password. Every hub replica
//! derives the salted password again when it sends the assignment on an agent's stream
//! ([`enclose`]), from the Secret as it sees it; derivations are cached in memory (8,192
//! PBKDF2 rounds cost milliseconds, and a thousand users are sent to every member).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use accord_common::distribution::{SCRAM_SHA_512, ScramCredential};
use accord_crds::kafka_user::GENERATED_PASSWORD_LENGTH;
use accord_kafka::ScramMechanism;
use accord_proto::v1::assignment;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::distribution::secrets::Secrets;

/// Bytes of a fresh salt.
const SALT_BYTES: usize = 32;
/// Derivations kept in memory at most (then the cache starts over).
const CACHE_LIMIT: usize = 100_000;

/// A password's derived credential: the salted password and the hash that names it.
#[derive(Clone)]
struct Derived {
    salted_password: Vec<u8>,
    hash: String,
}

/// What a derivation is cached by: SHA-256 of the password, salt, iterations.
type DerivationKey = ([u8; 32], Vec<u8>, i32);

/// Derivations this replica made: in memory only.
static DERIVED: LazyLock<Mutex<HashMap<DerivationKey, Derived>>> = LazyLock::new(Mutex::default);

/// `Hi(password, salt, iterations)` for SCRAM-SHA-512 and its hash, from the cache when
/// this replica derived it before.
fn derive(password: &[u8], salt: &[u8], iterations: i32) -> Derived {
    let key = (Sha256::digest(password).into(), salt.to_vec(), iterations);
    if let Some(d) = DERIVED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return d.clone();
    }
    let salted_password = accord_kafka::salted_password(
        ScramMechanism::Sha512,
        password,
        salt,
        u32::try_from(iterations).unwrap_or(0),
    );
    let derived = Derived {
        hash: ScramCredential::hash_of(SCRAM_SHA_512, iterations, salt, &salted_password),
        salted_password,
    };
    let mut cache = DERIVED.lock().unwrap_or_else(PoisonError::into_inner);
    if cache.len() >= CACHE_LIMIT {
        cache.clear();
    }
    cache.insert(key, derived.clone());
    derived
}

/// Where the password is: a key of a Secret in the object's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PasswordRef {
    /// The Secret's name.
    pub name: String,
    /// The key holding the password.
    pub key: String,
}

/// The credential a decision stores for `password` (without the salted password): the
/// `previous` decision's salt when it names the same password and iteration count, a fresh
/// random salt otherwise.
pub fn decide(
    password: &[u8],
    iterations: i32,
    at: &PasswordRef,
    previous: Option<&ScramCredential>,
) -> ScramCredential {
    let kept = previous.filter(|p| {
        p.iterations == iterations
            && p.mechanism == SCRAM_SHA_512
            && !p.salt.is_empty()
            && derive(password, &p.salt, iterations).hash == p.hash
    });
    let salt = match kept {
        Some(p) => p.salt.clone(),
        None => {
            let mut salt = vec![0; SALT_BYTES];
            rand::rng().fill_bytes(&mut salt);
            salt
        }
    };
    let derived = derive(password, &salt, iterations);
    ScramCredential {
        mechanism: SCRAM_SHA_512.to_owned(),
        iterations,
        salt,
        salted_password: Vec::new(),
        hash: derived.hash,
        secret_name: at.name.clone(),
        secret_key: at.key.clone(),
    }
}

/// Adds the salted password to a FederatedKafkaUser assignment about to be sent, derived
/// from the Secret as this replica sees it now. Only when it matches the decision's hash:
/// a password changed since the decision brings a new decision (and salt) at once, and the
/// agent keeps what its Kafka holds until then.
pub fn enclose(secrets: &Secrets, namespace: &str, spec: &mut assignment::Spec) {
    let assignment::Spec::KafkaUser(spec) = spec else {
        return;
    };
    let Some(c) = spec.credential.as_mut() else {
        return;
    };
    let Some(password) = secrets.value(namespace, &c.secret_name, &c.secret_key) else {
        return;
    };
    let derived = derive(&password, &c.salt, c.iterations);
    if derived.hash == c.hash {
        c.salted_password = derived.salted_password;
    }
}

/// A generated password: [`GENERATED_PASSWORD_LENGTH`] letters and digits.
pub fn generate_password() -> String {
    use rand::Rng;
    use rand::distr::Alphanumeric;
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(GENERATED_PASSWORD_LENGTH)
        .map(char::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> PasswordRef {
        PasswordRef {
            name: "orders-writer".into(),
            key: "password".into(),
        }
    }

    #[test]
    fn the_same_password_keeps_its_salt_and_a_new_one_gets_a_fresh_salt() {
        let first = decide(b"correct horse", 4096, &at(), None);
        assert_eq!(first.salt.len(), SALT_BYTES);
        assert!(first.salted_password.is_empty(), "never stored");
        let again = decide(b"correct horse", 4096, &at(), Some(&first));
        assert_eq!(again, first, "an unchanged password is the same credential");
        let rotated = decide(b"battery staple", 4096, &at(), Some(&first));
        assert_ne!(rotated.salt, first.salt);
        assert_ne!(rotated.hash, first.hash);
        let more_rounds = decide(b"correct horse", 8192, &at(), Some(&first));
        assert_ne!(more_rounds.salt, first.salt);
    }

    #[test]
    fn the_hash_names_the_salted_password_the_agent_receives() {
        let c = decide(b"pw", 4096, &at(), None);
        let d = derive(b"pw", &c.salt, 4096);
        assert_eq!(d.salted_password.len(), 64, "SHA-512 output");
        let sent = ScramCredential {
            salted_password: d.salted_password,
            ..c
        };
        assert!(sent.has_salted_password());
    }

    #[test]
    fn a_generated_password_is_32_letters_and_digits_and_differs_each_time() {
        let (a, b) = (generate_password(), generate_password());
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
    }
}
