//! The agent's view of its Kafka's users: the Kafka observer
//! ([`kafka::observe`](crate::enforce::kafka::observe)) looks at every assigned user in
//! three requests ([`look`]) whatever their number — DescribeUserScramCredentials for every
//! user, DescribeAcls for every principal (grouped by principal here), DescribeClientQuotas for
//! every user entity — each resync interval, right after applies, and as soon as the
//! connection or the set of assigned users changes. It keeps what it saw where the judge
//! reads it ([`Observations`]) and tells the engine which users changed through the same
//! [`WatchEvent`](crate::enforce::WatchEvent)s a Kubernetes watch sends.
//!
//! Kafka has no watch for credentials, ACLs or quotas, so out-of-band drift (an ACL
//! deleted, a credential removed) is seen at the next resync at the latest. A failed look
//! marks every user `Unavailable` (Kafka unreachable, credentials refused) or `Error` (Kafka
//! refused the request: its message names the missing ACL) and is retried with backoff,
//! bounded by the resync interval.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use accord_kafka::{AclBinding, AclFilter, Admin, KafkaError, ScramCredentialInfo, ScramMechanism};
use tracing::debug;

use super::Users;
use super::judge::{Upserted, UserSeen, principal};
use crate::enforce::kafka::observe;
pub use crate::enforce::kafka::observe::lock;
use crate::metrics::Metrics;

/// The resource name of Kafka users in watch events.
pub const USERS: &str = "kafkausers";

/// What the observer last saw of the users, and the credentials this agent upserted.
pub type Observations = observe::Observations<Users>;

/// [`Observations`] shared between the observer, the applier, the probe and the enforcer.
pub type Shared = observe::Shared<Users>;

/// Plans applied to users, with how many looks did not show each yet.
pub type Applied = observe::Applied<Users>;

impl Observations {
    /// The credential this agent last upserted for `user`, if it did through this
    /// connection.
    pub fn upserted(&self, user: &str) -> Option<&Upserted> {
        self.kept().get(user)
    }

    /// Notes that `credential` was upserted for `user`.
    pub fn upserted_now(&mut self, user: &str, credential: Upserted) {
        self.kept_mut().insert(user.to_owned(), credential);
    }

    /// Notes that `user`'s credential was deleted.
    pub fn credential_deleted(&mut self, user: &str) {
        self.kept_mut().remove(user);
    }
}

/// What the brokers hold of each of `users`, from the answers about every user: its
/// SCRAM-SHA-512 credential, the bindings of its principal (no other principal's), its
/// quotas.
pub fn users_seen(
    users: &[String],
    credentials: &BTreeMap<String, Vec<ScramCredentialInfo>>,
    acls: Vec<AclBinding>,
    mut quotas: BTreeMap<String, BTreeMap<String, f64>>,
    acls_unkept: Option<&str>,
) -> BTreeMap<String, UserSeen> {
    let mut by_principal: HashMap<String, BTreeSet<AclBinding>> = HashMap::new();
    for binding in acls {
        by_principal
            .entry(binding.principal.clone())
            .or_default()
            .insert(binding);
    }
    users
        .iter()
        .map(|user| {
            let scram_iterations = credentials
                .get(user)
                .and_then(|all| all.iter().find(|c| c.mechanism == ScramMechanism::Sha512))
                .map(|c| c.iterations);
            let seen = UserSeen {
                scram_iterations,
                acls: by_principal.remove(&principal(user)).unwrap_or_default(),
                quotas: quotas.remove(user).unwrap_or_default(),
                acls_unkept: acls_unkept.map(str::to_owned),
            };
            (user.clone(), seen)
        })
        .collect()
}

/// Looks at every user in three requests (sent together) and answers what the brokers
/// hold of each of `users`.
pub async fn look(
    admin: &Admin,
    users: &[String],
    metrics: &Metrics,
) -> Result<BTreeMap<String, UserSeen>, KafkaError> {
    for kind in [
        "describe_user_scram_credentials",
        "describe_acls",
        "describe_client_quotas",
    ] {
        metrics.kafka_request(kind);
    }
    let every_principal = AclFilter { principal: None };
    let (credentials, acls, quotas) = tokio::join!(
        admin.describe_user_scram_credentials(None),
        admin.describe_acls(&every_principal),
        admin.describe_client_quotas(None),
    );
    let (credentials, quotas) = (credentials?, quotas?);
    // Brokers without an authorizer answer every ACL request SECURITY_DISABLED: they keep
    // no ACLs, and the rest of each user is kept all the same.
    let (acls, acls_unkept) = match acls {
        Ok(acls) => (acls, None),
        Err(e) if e.is_security_disabled() => (Vec::new(), Some(e.to_string())),
        Err(e) => return Err(e),
    };
    debug!(
        users = users.len(),
        credentials = credentials.len(),
        acls = acls.len(),
        quotas = quotas.len(),
        "described the Kafka users"
    );
    Ok(users_seen(
        users,
        &credentials,
        acls,
        quotas,
        acls_unkept.as_deref(),
    ))
}

#[cfg(test)]
mod tests {
    use accord_kafka::{AclOperation, AclPatternType, AclPermission, AclResourceType};

    use super::*;
    use crate::enforce::kafka::looks::SETTLING_LOOKS;
    use crate::enforce::kafka::observe::testing::{changed, looks_until_told, names};
    use crate::enforce::kafka_user::judge::Plan;
    use crate::enforce::{ApplyError, ApplyErrorKind, WatchEvent};

    fn binding(principal: &str, topic: &str) -> AclBinding {
        AclBinding {
            resource_type: AclResourceType::Topic,
            resource_name: topic.into(),
            pattern_type: AclPatternType::Literal,
            principal: principal.into(),
            host: "*".into(),
            operation: AclOperation::Read,
            permission: AclPermission::Allow,
        }
    }

    fn with_credential(iterations: i32) -> UserSeen {
        UserSeen {
            scram_iterations: Some(iterations),
            ..UserSeen::default()
        }
    }

    fn upsert_plan() -> Plan {
        Plan {
            upsert: Some(accord_common::distribution::ScramCredential {
                iterations: 8192,
                ..Default::default()
            }),
            ..Plan::default()
        }
    }

    #[test]
    fn each_user_gets_its_own_principals_bindings_sha512_credential_and_quotas_only() {
        let credentials = BTreeMap::from([
            (
                "alice".to_owned(),
                vec![
                    ScramCredentialInfo {
                        mechanism: ScramMechanism::Sha256,
                        iterations: 4096,
                    },
                    ScramCredentialInfo {
                        mechanism: ScramMechanism::Sha512,
                        iterations: 8192,
                    },
                ],
            ),
            (
                "bob".to_owned(),
                vec![ScramCredentialInfo {
                    mechanism: ScramMechanism::Sha256,
                    iterations: 4096,
                }],
            ),
        ]);
        let acls = vec![
            binding("User:alice", "orders"),
            binding("User:bob", "orders"),
            // Not alice: a group principal, and a user whose name only starts with hers.
            binding("Group:alice", "orders"),
            binding("User:alice2", "orders"),
        ];
        let quotas = BTreeMap::from([
            (
                "alice".to_owned(),
                BTreeMap::from([("producer_byte_rate".to_owned(), 1024.0)]),
            ),
            (
                "carol".to_owned(),
                BTreeMap::from([("producer_byte_rate".to_owned(), 1.0)]),
            ),
        ]);
        let seen = users_seen(
            &names(&["alice", "bob", "dave"]),
            &credentials,
            acls,
            quotas,
            None,
        );
        assert_eq!(seen.len(), 3, "only the assigned users");
        let alice = &seen["alice"];
        assert_eq!(alice.scram_iterations, Some(8192));
        assert_eq!(
            alice.acls,
            BTreeSet::from([binding("User:alice", "orders")])
        );
        assert_eq!(alice.quotas.len(), 1);
        let bob = &seen["bob"];
        assert_eq!(bob.scram_iterations, None, "SHA-256 only");
        assert_eq!(bob.acls, BTreeSet::from([binding("User:bob", "orders")]));
        assert!(bob.quotas.is_empty());
        assert_eq!(seen["dave"], UserSeen::default());
    }

    #[test]
    fn the_first_look_reports_every_user_and_later_ones_only_the_changed() {
        let mut o = Observations::default();
        let users = names(&["alice", "bob"]);
        let first = BTreeMap::from([("alice".to_owned(), with_credential(8192))]);
        let events = o.record(0, &users, Ok(first.clone()), Applied::new());
        assert!(matches!(events.as_slice(), [WatchEvent::Synced { .. }]));
        assert_eq!(o.item("bob").unwrap().seen, UserSeen::default());
        let (va, vb) = (
            o.item("alice").unwrap().version,
            o.item("bob").unwrap().version,
        );
        // Nothing changed: nothing to tell.
        assert!(o.record(0, &users, Ok(first), Applied::new()).is_empty());
        // bob's credential appears.
        let next = BTreeMap::from([
            ("alice".to_owned(), with_credential(8192)),
            ("bob".to_owned(), with_credential(4096)),
        ]);
        assert_eq!(
            changed(&o.record(0, &users, Ok(next), Applied::new())),
            ["bob"]
        );
        assert_eq!(o.item("alice").unwrap().version, va);
        assert_ne!(o.item("bob").unwrap().version, vb);
    }

    #[test]
    fn an_applied_user_keeps_its_version_until_kafka_shows_the_change() {
        let mut o = Observations::default();
        let users = names(&["alice"]);
        o.record(0, &users, Ok(BTreeMap::new()), Applied::new());
        let before = o.item("alice").unwrap().version;
        o.applied("alice".into(), upsert_plan());
        assert!(o.settling());
        let applied = o.begin();
        assert!(o.begin().is_empty(), "taken once");
        assert!(o.record(0, &users, Ok(BTreeMap::new()), applied).is_empty());
        assert_eq!(o.item("alice").unwrap().version, before);
        assert!(o.settling(), "looks again soon");
        let applied = o.begin();
        let shows = BTreeMap::from([("alice".to_owned(), with_credential(8192))]);
        assert_eq!(changed(&o.record(0, &users, Ok(shows), applied)), ["alice"]);
        assert_ne!(o.item("alice").unwrap().version, before);
        assert!(!o.settling());
    }

    #[test]
    fn an_applied_change_that_never_shows_is_judged_again_after_a_bounded_number_of_looks() {
        let mut o = Observations::default();
        let users = names(&["alice"]);
        o.record(0, &users, Ok(BTreeMap::new()), Applied::new());
        let (looks, events) = looks_until_told(&mut o, &users, "alice", upsert_plan(), 100);
        assert_eq!(changed(&events), ["alice"]);
        assert_eq!(looks, SETTLING_LOOKS);
    }

    #[test]
    fn a_failed_look_is_told_once_keeps_what_was_seen_and_recovery_judges_every_user() {
        let mut o = Observations::default();
        let users = names(&["alice"]);
        let seen = BTreeMap::from([("alice".to_owned(), with_credential(8192))]);
        o.record(0, &users, Ok(seen.clone()), Applied::new());
        o.applied("alice".into(), upsert_plan());
        let refused = ApplyError::new(ApplyErrorKind::Forbidden, "CLUSTER_AUTHORIZATION_FAILED");
        let applied = o.begin();
        let events = o.record(0, &users, Err(refused.clone()), applied);
        assert!(
            matches!(events.as_slice(), [WatchEvent::Failed { message, .. }] if message == "CLUSTER_AUTHORIZATION_FAILED")
        );
        assert_eq!(o.error(), Some(&refused));
        assert_eq!(o.item("alice").unwrap().seen, with_credential(8192));
        let applied = o.begin();
        assert_eq!(applied.len(), 1, "the applied user waits for a good look");
        assert!(o.record(0, &users, Err(refused), applied).is_empty());
        let before = o.item("alice").unwrap().version;
        let applied = o.begin();
        let events = o.record(0, &users, Ok(seen), applied);
        assert!(matches!(events.as_slice(), [WatchEvent::Synced { .. }]));
        assert_eq!(o.error(), None);
        assert_ne!(o.item("alice").unwrap().version, before);
    }

    #[test]
    fn a_new_connection_forgets_what_was_seen_and_upserted_and_drops_older_looks() {
        let mut o = Observations::default();
        let users = names(&["alice"]);
        o.record(0, &users, Ok(BTreeMap::new()), Applied::new());
        o.upserted_now(
            "alice",
            Upserted {
                hash: "h".into(),
                iterations: 8192,
            },
        );
        assert!(o.upserted("alice").is_some());
        o.reset(1);
        assert!(o.item("alice").is_none());
        assert!(o.upserted("alice").is_none());
        assert!(
            o.record(0, &users, Ok(BTreeMap::new()), Applied::new())
                .is_empty()
        );
        assert!(o.item("alice").is_none());
        assert!(
            !o.record(1, &users, Ok(BTreeMap::new()), Applied::new())
                .is_empty()
        );
        // Versions keep growing across connections: an apply decided before is not
        // mistaken for one decided after.
        assert!(o.item("alice").unwrap().version > 1);
    }

    #[test]
    fn users_no_longer_assigned_are_forgotten_with_what_was_upserted_for_them() {
        let mut o = Observations::default();
        o.record(
            0,
            &names(&["alice", "bob"]),
            Ok(BTreeMap::new()),
            Applied::new(),
        );
        o.upserted_now(
            "bob",
            Upserted {
                hash: "h".into(),
                iterations: 8192,
            },
        );
        o.record(0, &names(&["alice"]), Ok(BTreeMap::new()), Applied::new());
        assert!(o.item("bob").is_none());
        assert!(o.upserted("bob").is_none());
        assert!(o.item("alice").is_some());
        o.upserted_now(
            "alice",
            Upserted {
                hash: "h".into(),
                iterations: 8192,
            },
        );
        o.credential_deleted("alice");
        assert!(o.upserted("alice").is_none());
    }
}
