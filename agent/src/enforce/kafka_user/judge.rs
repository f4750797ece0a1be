//! Pure decisions about one Kafka user: what the brokers hold of it against its
//! assignment, what to change (its SCRAM-SHA-512 credential, the ACLs of its principal
//! `User:<name>`, its client quotas) and what to report. No Kafka requests happen here.
//!
//! The rules:
//! - The credential is upserted when the brokers show no SCRAM-SHA-512 credential for the
//!   user (deleted out of band: repaired), when its iteration count differs, or when the
//!   hash this agent last upserted for the user ([`Upserted`], remembered in memory) is not
//!   the assignment's. Kafka never shows a credential's secrets, so that memory is what keeps
//!   a resync from upserting every credential again; after a restart each user's credential
//!   is upserted once. The salted password is never saved: an assignment read back from the
//!   saved state lacks it until the hub sends it again on the stream. Without it an existing
//!   credential is left as it is, and a missing one waits (`Pending`).
//! - ACLs: of the bindings of the user's principal, the missing are created and the extra
//!   deleted. Bindings of any other principal are never looked at.
//! - Quotas: the assignment's keys whose value differs are set; keys set for the user that
//!   the assignment lacks are removed.
//! - `remove`: the credential, every binding of the principal and every quota key go; the
//!   user is reported `removed` once nothing is left.
//!
//! While the member's Kafka fails its liveness [`Probe`], the user is `Unavailable` with the
//! probe's message and nothing is applied because of it.

use std::collections::{BTreeMap, BTreeSet};

use accord_common::distribution::{
    KafkaAcl, KafkaUserObserved, KafkaUserSpec, Observed, PlacementState, SCRAM_SHA_512,
    ScramCredential,
};
use accord_kafka::AclBinding;

use crate::enforce::kafka::probe::Probe;
use crate::enforce::{Action, ApplyError, ApplyErrorKind, Judgement};
use crate::report::Report;

/// What a user's principal starts with.
pub const USER_PRINCIPAL_PREFIX: &str = "User:";
/// The message of a user whose removal completed.
pub const REMOVED_MESSAGE: &str = "removed";
/// The message of a user waiting for its credential's salted password.
pub const WAITING_FOR_CREDENTIAL: &str = "waiting for the credential from the hub (it is never \
                                          saved; the hub sends it on the stream)";

/// The principal of Kafka user `username`.
pub fn principal(username: &str) -> String {
    format!("{USER_PRINCIPAL_PREFIX}{username}")
}

/// What the agent saw of one user in its last look at Kafka.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UserSeen {
    /// The iteration count of its SCRAM-SHA-512 credential, when it has one.
    pub scram_iterations: Option<i32>,
    /// Every ACL binding of its principal.
    pub acls: BTreeSet<AclBinding>,
    /// Its client quotas (user entity), by key.
    pub quotas: BTreeMap<String, f64>,
    /// Why the brokers keep no ACLs at all (no authorizer: `SECURITY_DISABLED`), if so: the
    /// credential and quotas are kept, ACLs are neither read nor written.
    pub acls_unkept: Option<String>,
}

/// The credential this agent last upserted for a user (the brokers never show it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upserted {
    /// Its [`ScramCredential::hash`].
    pub hash: String,
    /// Its iteration count: when the brokers show another, someone replaced it.
    pub iterations: i32,
}

impl Upserted {
    /// What upserting `credential` leaves in place.
    pub fn of(credential: &ScramCredential) -> Self {
        Self {
            hash: credential.hash.clone(),
            iterations: credential.iterations,
        }
    }
}

/// What to change in Kafka for one user; empty when nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Create or replace its SCRAM-SHA-512 credential with this one (whose `Debug` shows
    /// neither salt nor salted password).
    pub upsert: Option<ScramCredential>,
    /// Delete its SCRAM-SHA-512 credential.
    pub delete_credential: bool,
    /// Bindings of its principal to create.
    pub create_acls: Vec<AclBinding>,
    /// Bindings of its principal to delete.
    pub delete_acls: Vec<AclBinding>,
    /// Quota keys to set, with their values.
    pub set_quotas: BTreeMap<String, f64>,
    /// Quota keys to remove.
    pub remove_quotas: Vec<String>,
}

impl Plan {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.upsert.is_none()
            && !self.delete_credential
            && self.create_acls.is_empty()
            && self.delete_acls.is_empty()
            && self.set_quotas.is_empty()
            && self.remove_quotas.is_empty()
    }
}

/// What the agent makes of a user against its assignment.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// What to apply (empty: nothing).
    pub plan: Plan,
    /// The brokers hold no credential for the user and the assignment lacks its salted
    /// password: the hub has to send it first.
    pub awaiting_credential: bool,
}

/// The assignment's ACLs as bindings of the user's principal (sorted, without duplicates),
/// or why one cannot be: its index and field, and what Kafka would accept.
pub fn desired_acls(spec: &KafkaUserSpec) -> Result<BTreeSet<AclBinding>, String> {
    let principal = principal(&spec.username);
    spec.acls
        .iter()
        .enumerate()
        .map(|(i, acl)| binding(&principal, acl).map_err(|e| format!("acls[{i}]: {e}")))
        .collect()
}

/// `acl` as a binding of `principal`; an unparsable field is named.
fn binding(principal: &str, acl: &KafkaAcl) -> Result<AclBinding, String> {
    fn field<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, String>
    where
        T::Err: std::fmt::Display,
    {
        value.parse().map_err(|e| format!("{name}: {e}"))
    }
    Ok(AclBinding {
        resource_type: field("resourceType", &acl.resource_type)?,
        resource_name: acl.resource_name.clone(),
        pattern_type: field("patternType", &acl.pattern_type)?,
        principal: principal.to_owned(),
        // No host is any host.
        host: if acl.host.is_empty() {
            "*".to_owned()
        } else {
            acl.host.clone()
        },
        operation: field("operation", &acl.operation)?,
        permission: field("permission", &acl.permission)?,
    })
}

/// Why the assignment cannot be followed whatever Kafka holds, if it cannot.
pub fn invalid(spec: &KafkaUserSpec) -> Option<String> {
    if spec.username.is_empty() {
        return Some("the assignment names no Kafka user".to_owned());
    }
    if spec.remove {
        return None;
    }
    let Some(credential) = &spec.credential else {
        return Some("the assignment carries no credential for the user".to_owned());
    };
    if credential.mechanism != SCRAM_SHA_512 {
        return Some(format!(
            "the credential's mechanism is {:?}; only {SCRAM_SHA_512} is kept",
            credential.mechanism
        ));
    }
    if !credential.salted_password.is_empty() && !credential.has_salted_password() {
        return Some("the credential's salted password does not match its hash".to_owned());
    }
    if let Some((key, value)) = spec.quotas.iter().find(|(_, v)| !v.is_finite()) {
        return Some(format!(
            "quota {key} is {value}, not a number Kafka can hold"
        ));
    }
    desired_acls(spec).err()
}

/// Judges what Kafka holds of the user (`seen`) against `spec`, knowing what this agent
/// last upserted for it; `Err` when the assignment cannot be followed ([`invalid`]).
pub fn verdict(
    spec: &KafkaUserSpec,
    seen: &UserSeen,
    upserted: Option<&Upserted>,
) -> Result<Verdict, String> {
    if let Some(message) = invalid(spec) {
        return Err(message);
    }
    if spec.remove {
        let plan = Plan {
            delete_credential: seen.scram_iterations.is_some(),
            delete_acls: seen.acls.iter().cloned().collect(),
            remove_quotas: seen.quotas.keys().cloned().collect(),
            ..Plan::default()
        };
        return Ok(Verdict {
            plan,
            awaiting_credential: false,
        });
    }
    let (upsert, awaiting_credential) = match &spec.credential {
        Some(credential) => credential_change(credential, seen, upserted),
        None => (None, false),
    };
    let desired = desired_acls(spec)?;
    let set_quotas = spec
        .quotas
        .iter()
        .filter(|(key, value)| seen.quotas.get(*key) != Some(*value))
        .map(|(key, value)| (key.clone(), *value))
        .collect();
    let remove_quotas = seen
        .quotas
        .keys()
        .filter(|key| !spec.quotas.contains_key(*key))
        .cloned()
        .collect();
    // Brokers without an authorizer keep no ACLs: nothing to create or delete there.
    let keeps_acls = seen.acls_unkept.is_none();
    let plan = Plan {
        upsert,
        delete_credential: false,
        create_acls: desired
            .difference(&seen.acls)
            .filter(|_| keeps_acls)
            .cloned()
            .collect(),
        delete_acls: seen
            .acls
            .difference(&desired)
            .filter(|_| keeps_acls)
            .cloned()
            .collect(),
        set_quotas,
        remove_quotas,
    };
    Ok(Verdict {
        plan,
        awaiting_credential,
    })
}

/// The credential to upsert, if any, and whether the user waits for its salted password.
fn credential_change(
    credential: &ScramCredential,
    seen: &UserSeen,
    upserted: Option<&Upserted>,
) -> (Option<ScramCredential>, bool) {
    if in_place(seen, upserted).is_some_and(|u| u.hash == credential.hash) {
        return (None, false);
    }
    if credential.has_salted_password() {
        return (Some(credential.clone()), false);
    }
    // Without the salted password nothing can be upserted: a credential the brokers hold
    // stays as it is; none at all waits for the hub.
    (None, seen.scram_iterations.is_none())
}

/// What this agent upserted and the brokers still hold (same iteration count), if any.
fn in_place<'a>(seen: &UserSeen, upserted: Option<&'a Upserted>) -> Option<&'a Upserted> {
    upserted.filter(|u| seen.scram_iterations == Some(u.iterations))
}

/// What the status shows of the user: the hash of the credential in place ("" when none
/// or when this agent did not put it there), the principal's bindings the assignment
/// names that the brokers hold, the quota keys set, and whether a removal completed.
pub fn observed(
    spec: &KafkaUserSpec,
    seen: &UserSeen,
    upserted: Option<&Upserted>,
) -> KafkaUserObserved {
    let named = desired_acls(spec).unwrap_or_default();
    KafkaUserObserved {
        credential_hash: in_place(seen, upserted)
            .map(|u| u.hash.clone())
            .unwrap_or_default(),
        acls: count(named.intersection(&seen.acls).count()),
        quotas: count(seen.quotas.len()),
        removed: spec.remove
            && seen.scram_iterations.is_none()
            && seen.acls.is_empty()
            && seen.quotas.is_empty(),
        acls_unkept: acls_unkept(spec, seen).unwrap_or_default(),
    }
}

/// Why the ACLs `spec` names cannot be kept on these brokers, if it names any and they
/// cannot (the placement says so; the rest of the user is kept).
pub fn acls_unkept(spec: &KafkaUserSpec, seen: &UserSeen) -> Option<String> {
    let why = seen.acls_unkept.as_deref()?;
    (!spec.acls.is_empty() && !spec.remove).then(|| {
        format!(
            "the {} ACL(s) cannot be kept here: {why} (the credential and quotas are kept)",
            spec.acls.len()
        )
    })
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Whether what Kafka shows (`seen`) carries the effect of `plan`, applied successfully
/// just before: Kafka's metadata follows a change a moment after the request returns, and
/// until it does, judging again would apply the same plan twice.
pub fn shows(plan: &Plan, seen: &UserSeen) -> bool {
    let credential = match (&plan.upsert, plan.delete_credential) {
        (Some(c), _) => seen.scram_iterations == Some(c.iterations),
        (None, true) => seen.scram_iterations.is_none(),
        (None, false) => true,
    };
    credential
        && plan.create_acls.iter().all(|b| seen.acls.contains(b))
        && !plan.delete_acls.iter().any(|b| seen.acls.contains(b))
        && plan
            .set_quotas
            .iter()
            .all(|(k, v)| seen.quotas.get(k) == Some(v))
        && !plan
            .remove_quotas
            .iter()
            .any(|k| seen.quotas.contains_key(k))
}

/// A short description of what `plan` does, for the `Pending` message.
pub fn describe(plan: &Plan) -> String {
    let mut parts = Vec::new();
    if plan.upsert.is_some() {
        parts.push(format!("upserting the {SCRAM_SHA_512} credential"));
    }
    if plan.delete_credential {
        parts.push(format!("deleting the {SCRAM_SHA_512} credential"));
    }
    if !plan.create_acls.is_empty() {
        parts.push(format!("creating {} ACL(s)", plan.create_acls.len()));
    }
    if !plan.delete_acls.is_empty() {
        parts.push(format!("deleting {} ACL(s)", plan.delete_acls.len()));
    }
    if !plan.set_quotas.is_empty() {
        let keys: Vec<&str> = plan.set_quotas.keys().map(String::as_str).collect();
        parts.push(format!("setting quotas {}", keys.join(", ")));
    }
    if !plan.remove_quotas.is_empty() {
        parts.push(format!("removing quotas {}", plan.remove_quotas.join(", ")));
    }
    parts.join("; ")
}

/// Judges a user assigned at `applied_revision` from the last look at it (`seen`, whose
/// version is `version`), what this agent last upserted for it, the last probe of Kafka
/// and the last apply error (while it stands): what to report and whether to apply.
pub fn judge(
    applied_revision: i64,
    spec: &KafkaUserSpec,
    seen: &UserSeen,
    version: u64,
    upserted: Option<&Upserted>,
    probe: &Probe,
    apply_error: Option<&ApplyError>,
) -> Judgement {
    let observed = Observed::KafkaUser(observed(spec, seen, upserted));
    let report = |state, message: String| Report {
        observed: observed.clone(),
        ..Report::without_object(state, message, applied_revision)
    };
    if let Probe::Failed(message) = probe {
        return Judgement {
            report: report(PlacementState::Unavailable, message.clone()),
            action: Action::Unknown,
        };
    }
    let verdict = match verdict(spec, seen, upserted) {
        Ok(verdict) => verdict,
        Err(message) => {
            return Judgement {
                report: report(PlacementState::Error, message),
                action: Action::Settled,
            };
        }
    };
    if !verdict.plan.is_empty() {
        let (state, message) = match apply_error {
            Some(e) if e.kind == ApplyErrorKind::Unavailable => {
                (PlacementState::Unavailable, e.message.clone())
            }
            Some(e) => (PlacementState::Error, e.message.clone()),
            None if verdict.awaiting_credential => (
                PlacementState::Pending,
                format!("{}; {WAITING_FOR_CREDENTIAL}", describe(&verdict.plan)),
            ),
            None => (PlacementState::Pending, describe(&verdict.plan)),
        };
        return Judgement {
            report: report(state, message),
            action: Action::Apply {
                from_version: version.to_string(),
            },
        };
    }
    let (state, message) = if verdict.awaiting_credential {
        (PlacementState::Pending, WAITING_FOR_CREDENTIAL.to_owned())
    } else if spec.remove {
        (PlacementState::Synced, REMOVED_MESSAGE.to_owned())
    } else {
        (
            PlacementState::Synced,
            acls_unkept(spec, seen).unwrap_or_default(),
        )
    };
    Judgement {
        report: report(state, message),
        action: Action::Settled,
    }
}

#[cfg(test)]
mod tests {
    use accord_kafka::{AclOperation, AclPatternType, AclPermission, AclResourceType};

    use super::*;

    const SALT: &[u8] = b"salt-of-alice";
    const SALTED: &[u8] = b"salted-password-of-alice-64-bytes";

    fn credential(iterations: i32, salted: &[u8]) -> ScramCredential {
        ScramCredential {
            mechanism: SCRAM_SHA_512.into(),
            iterations,
            salt: SALT.to_vec(),
            salted_password: salted.to_vec(),
            hash: ScramCredential::hash_of(SCRAM_SHA_512, iterations, SALT, salted),
            secret_name: "alice-password".into(),
            secret_key: "password".into(),
        }
    }

    fn acl(operation: &str, topic: &str) -> KafkaAcl {
        KafkaAcl {
            resource_type: "Topic".into(),
            resource_name: topic.into(),
            pattern_type: "Literal".into(),
            operation: operation.into(),
            host: "*".into(),
            permission: "Allow".into(),
        }
    }

    fn binding_of(principal: &str, operation: AclOperation, topic: &str) -> AclBinding {
        AclBinding {
            resource_type: AclResourceType::Topic,
            resource_name: topic.into(),
            pattern_type: AclPatternType::Literal,
            principal: principal.into(),
            host: "*".into(),
            operation,
            permission: AclPermission::Allow,
        }
    }

    fn spec() -> KafkaUserSpec {
        KafkaUserSpec {
            username: "alice".into(),
            credential: Some(credential(8192, SALTED)),
            acls: vec![acl("Read", "orders"), acl("Write", "orders")],
            quotas: BTreeMap::from([("producer_byte_rate".to_owned(), 1_048_576.0)]),
            remove: false,
        }
    }

    /// What the brokers hold once `spec()` is in place.
    fn in_sync() -> UserSeen {
        UserSeen {
            scram_iterations: Some(8192),
            acls: BTreeSet::from([
                binding_of("User:alice", AclOperation::Read, "orders"),
                binding_of("User:alice", AclOperation::Write, "orders"),
            ]),
            quotas: BTreeMap::from([("producer_byte_rate".to_owned(), 1_048_576.0)]),
            acls_unkept: None,
        }
    }

    fn upserted() -> Upserted {
        Upserted::of(&credential(8192, SALTED))
    }

    fn judged(seen: &UserSeen, upserted: Option<&Upserted>) -> Judgement {
        judge(7, &spec(), seen, 3, upserted, &Probe::Answered, None)
    }

    #[test]
    fn on_brokers_without_an_authorizer_the_credential_and_quotas_are_kept_and_the_acls_named() {
        let why = "Kafka refused the request: SECURITY_DISABLED (54): No Authorizer is configured";
        let seen = UserSeen {
            acls: BTreeSet::new(),
            acls_unkept: Some(why.to_owned()),
            ..in_sync()
        };
        let j = judged(&seen, Some(&upserted()));
        assert_eq!(j.action, Action::Settled, "no ACL request is sent");
        assert_eq!(j.report.state, PlacementState::Synced);
        assert!(
            j.report
                .message
                .contains("the 2 ACL(s) cannot be kept here"),
            "{}",
            j.report.message
        );
        assert!(
            j.report.message.contains("SECURITY_DISABLED"),
            "{}",
            j.report.message
        );
        let Observed::KafkaUser(o) = &j.report.observed else {
            panic!("{:?}", j.report.observed);
        };
        assert_eq!((o.acls, o.quotas), (0, 1));
        assert!(o.acls_unkept.contains("SECURITY_DISABLED"), "{o:?}");
        // A credential to set is still set there, without ACLs.
        let fresh = UserSeen {
            scram_iterations: None,
            quotas: BTreeMap::new(),
            ..seen.clone()
        };
        let v = verdict(&spec(), &fresh, None).unwrap();
        assert!(v.plan.upsert.is_some() && !v.plan.set_quotas.is_empty());
        assert!(v.plan.create_acls.is_empty() && v.plan.delete_acls.is_empty());
        // A user without ACLs says nothing about them.
        let mut plain = spec();
        plain.acls.clear();
        let j = judge(
            7,
            &plain,
            &seen,
            3,
            Some(&upserted()),
            &Probe::Answered,
            None,
        );
        assert_eq!(
            (j.report.state, j.report.message.as_str()),
            (PlacementState::Synced, "")
        );
    }

    #[test]
    fn a_user_in_place_with_the_credential_this_agent_upserted_is_synced_and_not_upserted_again() {
        let j = judged(&in_sync(), Some(&upserted()));
        assert_eq!(j.action, Action::Settled);
        assert_eq!(j.report.state, PlacementState::Synced);
        assert_eq!(
            j.report.observed,
            Observed::KafkaUser(KafkaUserObserved {
                credential_hash: credential(8192, SALTED).hash,
                acls: 2,
                quotas: 1,
                removed: false,
                acls_unkept: String::new(),
            })
        );
        assert_eq!(j.report.applied_revision, 7);
    }

    #[test]
    fn a_credential_deleted_out_of_band_is_upserted_again() {
        let mut seen = in_sync();
        seen.scram_iterations = None;
        let v = verdict(&spec(), &seen, Some(&upserted())).unwrap();
        assert_eq!(v.plan.upsert, Some(credential(8192, SALTED)));
        assert!(v.plan.create_acls.is_empty() && v.plan.set_quotas.is_empty());
        let j = judged(&seen, Some(&upserted()));
        assert_eq!(
            j.action,
            Action::Apply {
                from_version: "3".into()
            }
        );
        assert_eq!(j.report.state, PlacementState::Pending);
        let Observed::KafkaUser(o) = &j.report.observed else {
            panic!("{:?}", j.report.observed)
        };
        assert_eq!(o.credential_hash, "", "nothing in place");
    }

    #[test]
    fn a_changed_hash_or_iteration_count_or_no_memory_after_a_restart_upserts_once() {
        // The password changed: a new hash.
        let mut changed = spec();
        changed.credential = Some(credential(8192, b"another-salted-password"));
        let v = verdict(&changed, &in_sync(), Some(&upserted())).unwrap();
        assert_eq!(v.plan.upsert, changed.credential);
        // Someone replaced it with another iteration count.
        let mut seen = in_sync();
        seen.scram_iterations = Some(4096);
        let v = verdict(&spec(), &seen, Some(&upserted())).unwrap();
        assert!(v.plan.upsert.is_some());
        // The agent restarted: it does not know what it upserted.
        let v = verdict(&spec(), &in_sync(), None).unwrap();
        assert!(v.plan.upsert.is_some());
        // And once it did, nothing more.
        let v = verdict(&spec(), &in_sync(), Some(&upserted())).unwrap();
        assert!(v.plan.is_empty(), "{:?}", v.plan);
    }

    #[test]
    fn without_the_salted_password_an_existing_credential_is_left_and_a_missing_one_waits() {
        let mut saved = spec();
        if let Some(c) = saved.credential.as_mut() {
            c.salted_password.clear();
        }
        // Read back from the saved state after a restart: the brokers hold a credential.
        let j = judge(7, &saved, &in_sync(), 3, None, &Probe::Answered, None);
        assert_eq!(j.action, Action::Settled);
        assert_eq!(j.report.state, PlacementState::Synced);
        // The brokers hold none: nothing can be upserted yet.
        let mut seen = in_sync();
        seen.scram_iterations = None;
        let j = judge(7, &saved, &seen, 3, None, &Probe::Answered, None);
        assert_eq!(j.action, Action::Settled);
        assert_eq!(j.report.state, PlacementState::Pending);
        assert_eq!(j.report.message, WAITING_FOR_CREDENTIAL);
        assert!(j.report.message.contains("never saved"));
        // ... while the rest is applied.
        seen.acls.clear();
        let j = judge(7, &saved, &seen, 3, None, &Probe::Answered, None);
        assert!(matches!(j.action, Action::Apply { .. }));
        assert_eq!(j.report.state, PlacementState::Pending);
        assert!(
            j.report
                .message
                .starts_with("creating 2 ACL(s); waiting for"),
            "{}",
            j.report.message
        );
        let v = verdict(&saved, &seen, None).unwrap();
        assert_eq!(v.plan.upsert, None);
    }

    #[test]
    fn acls_are_created_and_deleted_for_the_principal_only() {
        let mut seen = in_sync();
        seen.acls
            .remove(&binding_of("User:alice", AclOperation::Write, "orders"));
        seen.acls
            .insert(binding_of("User:alice", AclOperation::Delete, "orders"));
        let v = verdict(&spec(), &seen, Some(&upserted())).unwrap();
        assert_eq!(
            v.plan.create_acls,
            vec![binding_of("User:alice", AclOperation::Write, "orders")]
        );
        assert_eq!(
            v.plan.delete_acls,
            vec![binding_of("User:alice", AclOperation::Delete, "orders")]
        );
        assert!(v.plan.upsert.is_none() && v.plan.set_quotas.is_empty());
        // The plan names no other principal, whatever it asks.
        let mut removing = spec();
        removing.remove = true;
        let v = verdict(&removing, &seen, None).unwrap();
        for b in v.plan.create_acls.iter().chain(&v.plan.delete_acls) {
            assert_eq!(b.principal, "User:alice");
        }
    }

    #[test]
    fn names_are_kafkas_whatever_their_case_and_an_unparsable_field_is_an_error_naming_it() {
        let mut lenient = spec();
        lenient.acls = vec![KafkaAcl {
            operation: "READ".into(),
            ..acl("Read", "orders")
        }];
        let acls = desired_acls(&lenient).unwrap();
        assert!(acls.contains(&binding_of("User:alice", AclOperation::Read, "orders")));

        let mut bad = spec();
        bad.acls.push(KafkaAcl {
            operation: "Wrtie".into(),
            ..acl("Write", "orders")
        });
        let j = judge(7, &bad, &in_sync(), 3, None, &Probe::Answered, None);
        assert_eq!(j.report.state, PlacementState::Error);
        assert_eq!(j.action, Action::Settled, "nothing is applied");
        assert!(
            j.report.message.starts_with("acls[2]: operation: ")
                && j.report.message.contains("Wrtie"),
            "{}",
            j.report.message
        );
    }

    #[test]
    fn quota_keys_differing_are_set_and_keys_the_assignment_lacks_are_removed() {
        let mut seen = in_sync();
        seen.quotas.insert("producer_byte_rate".into(), 1024.0);
        seen.quotas.insert("request_percentage".into(), 50.0);
        let v = verdict(&spec(), &seen, Some(&upserted())).unwrap();
        assert_eq!(
            v.plan.set_quotas,
            BTreeMap::from([("producer_byte_rate".to_owned(), 1_048_576.0)])
        );
        assert_eq!(v.plan.remove_quotas, vec!["request_percentage".to_owned()]);
        assert!(v.plan.create_acls.is_empty() && v.plan.delete_acls.is_empty());
        assert_eq!(
            describe(&v.plan),
            "setting quotas producer_byte_rate; removing quotas request_percentage"
        );
    }

    #[test]
    fn removal_deletes_the_credential_every_binding_and_quota_then_reports_removed() {
        let mut removing = spec();
        removing.remove = true;
        removing.credential = None;
        let mut seen = in_sync();
        seen.acls
            .insert(binding_of("User:alice", AclOperation::Delete, "payments"));
        let v = verdict(&removing, &seen, Some(&upserted())).unwrap();
        assert!(v.plan.delete_credential && v.plan.upsert.is_none());
        assert_eq!(v.plan.delete_acls.len(), 3, "named or not");
        assert_eq!(v.plan.remove_quotas, vec!["producer_byte_rate".to_owned()]);
        let j = judge(7, &removing, &seen, 3, None, &Probe::Answered, None);
        assert!(matches!(j.action, Action::Apply { .. }));
        let Observed::KafkaUser(o) = &j.report.observed else {
            panic!()
        };
        assert!(!o.removed);

        let j = judge(
            7,
            &removing,
            &UserSeen::default(),
            4,
            None,
            &Probe::Answered,
            None,
        );
        assert_eq!(j.action, Action::Settled);
        assert_eq!(j.report.state, PlacementState::Synced);
        assert_eq!(j.report.message, REMOVED_MESSAGE);
        assert_eq!(
            j.report.observed,
            Observed::KafkaUser(KafkaUserObserved {
                removed: true,
                ..KafkaUserObserved::default()
            })
        );
    }

    #[test]
    fn apply_errors_and_a_failing_probe_are_reported_as_kafka_said() {
        let seen = UserSeen::default();
        let forbidden = ApplyError::new(
            ApplyErrorKind::Forbidden,
            "creating ACLs of user alice: CLUSTER_AUTHORIZATION_FAILED: the agent's Kafka \
             user needs the Alter ACL on the cluster",
        );
        let j = judge(
            7,
            &spec(),
            &seen,
            3,
            None,
            &Probe::Answered,
            Some(&forbidden),
        );
        assert_eq!(j.report.state, PlacementState::Error);
        assert_eq!(j.report.message, forbidden.message);
        assert!(matches!(j.action, Action::Apply { .. }));
        let down = ApplyError::new(ApplyErrorKind::Unavailable, "Kafka unreachable: x");
        let j = judge(7, &spec(), &seen, 3, None, &Probe::Answered, Some(&down));
        assert_eq!(j.report.state, PlacementState::Unavailable);
        let probe = Probe::Failed("Kafka unreachable: no answer".into());
        let j = judge(7, &spec(), &seen, 3, None, &probe, None);
        assert_eq!(j.report.state, PlacementState::Unavailable);
        assert_eq!(
            j.action,
            Action::Unknown,
            "nothing applied because of a probe"
        );
    }

    #[test]
    fn an_assignment_that_cannot_be_followed_says_why() {
        let mut s = spec();
        s.username.clear();
        assert!(invalid(&s).unwrap().contains("names no Kafka user"));
        let mut s = spec();
        s.credential = None;
        assert!(invalid(&s).unwrap().contains("no credential"));
        let mut s = spec();
        if let Some(c) = s.credential.as_mut() {
            c.mechanism = "SCRAM-SHA-256".into();
        }
        assert!(invalid(&s).unwrap().contains("SCRAM-SHA-256"));
        let mut s = spec();
        if let Some(c) = s.credential.as_mut() {
            c.salted_password = b"tampered".to_vec();
        }
        assert!(invalid(&s).unwrap().contains("does not match its hash"));
        let mut s = spec();
        s.quotas.insert("consumer_byte_rate".into(), f64::NAN);
        assert!(invalid(&s).unwrap().contains("consumer_byte_rate"));
        assert_eq!(invalid(&spec()), None);
    }

    #[test]
    fn a_plan_shows_once_kafka_holds_its_effect() {
        let mut seen = in_sync();
        seen.scram_iterations = None;
        seen.acls.clear();
        let v = verdict(&spec(), &seen, None).unwrap();
        assert!(!shows(&v.plan, &seen));
        assert!(shows(&v.plan, &in_sync()));
        let mut removing = spec();
        removing.remove = true;
        let v = verdict(&removing, &in_sync(), None).unwrap();
        assert!(!shows(&v.plan, &in_sync()));
        assert!(shows(&v.plan, &UserSeen::default()));
    }

    #[test]
    fn no_message_or_debug_output_holds_the_salted_password() {
        let mut seen = in_sync();
        seen.scram_iterations = None;
        let v = verdict(&spec(), &seen, None).unwrap();
        let debug = format!("{v:?}");
        let salted = String::from_utf8_lossy(SALTED);
        assert!(!debug.contains(salted.as_ref()), "{debug}");
        assert!(!debug.contains(&format!("{:?}", SALTED)), "{debug}");
        assert!(!describe(&v.plan).contains(salted.as_ref()));
    }
}
