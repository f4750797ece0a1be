//! The agent's view of its Kafka's users: one task that looks at every assigned user in
//! three requests whatever their number — DescribeUserScramCredentials for every user,
//! DescribeAcls for every principal (grouped by principal here), DescribeClientQuotas for
//! every user entity — each resync interval, right after applies, and as soon as the
//! connection or the set of assigned users changes. It keeps what it saw where the judge
//! reads it ([`Observations`]) and tells the engine which users changed through the same
//! [`WatchEvent`]s a Kubernetes watch sends.
//!
//! Kafka has no watch for credentials, ACLs or quotas, so out-of-band drift (an ACL
//! deleted, a credential removed) is seen at the next resync at the latest. A failed look
//! marks every user `Unavailable` (Kafka unreachable, credentials refused) or `Error` (Kafka
//! refused the request: its message names the missing ACL) and is retried with backoff,
//! bounded by the resync interval.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accord_common::runtime::Retry;
use accord_kafka::{
    AclBinding, AclFilter, Admin, KafkaConfig, KafkaError, ScramCredentialInfo, ScramMechanism,
};
use tokio::sync::{Notify, watch};
use tracing::debug;

use super::judge::{Plan, Upserted, UserSeen, principal, shows};
use crate::enforce::kafka::errors::{error_kind, failure_message};
use crate::enforce::kafka::looks::{self, SETTLING, SETTLING_LOOKS};
use crate::enforce::kafka::probe::{Endpoint, Probe, ProbeState, Probed};
use crate::enforce::{ApplyError, ApplyErrorKind, EventSink, WatchEvent};
use crate::metrics::Metrics;

/// The resource name of Kafka users in watch events.
pub const USERS: &str = "kafkausers";

/// What the observer looks at: the connection and the assigned users.
#[derive(Clone, Default)]
pub struct Target {
    /// The admin client, when there is a connection.
    pub admin: Option<Admin>,
    /// The connection's configuration, when there is one (the probe's own client).
    pub config: Option<Arc<KafkaConfig>>,
    /// Every assigned user name, sorted.
    pub users: Arc<Vec<String>>,
    /// Bumped when the connection changes: looks made through an older one are dropped.
    pub epoch: u64,
}

impl Endpoint for Target {
    /// The connection, while users are assigned.
    fn endpoint(&self) -> Option<(u64, Arc<KafkaConfig>)> {
        let config = self.config.clone().filter(|_| !self.users.is_empty())?;
        Some((self.epoch, config))
    }
}

/// One user as last seen.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    /// Changes whenever what was seen changes, or an apply to the user completed and shows:
    /// the version an apply is decided on.
    pub version: u64,
    /// What was seen.
    pub seen: UserSeen,
}

/// A plan applied to a user, and how many looks did not show it yet.
type Applied = BTreeMap<String, (Plan, u32)>;

/// What the observer last saw, shared with the enforcer and the applier (locked only
/// briefly, never across an await).
#[derive(Debug, Default)]
pub struct Observations {
    users: HashMap<String, Seen>,
    /// Why the last look failed, while it stands.
    error: Option<ApplyError>,
    /// Whether a look through the current connection succeeded yet.
    looked: bool,
    probe: ProbeState,
    epoch: u64,
    next_version: u64,
    /// Users applied to since the last look began. A look that shows the plan's effect
    /// reports the user (even if nothing else changed, so the engine stops waiting for the
    /// apply's result); until then the user keeps its version, so the engine does not apply
    /// the same plan again, and the observer looks again soon.
    applied: Applied,
    /// The credential this agent last upserted for each user, through this connection.
    upserted: HashMap<String, Upserted>,
}

impl Probed for Observations {
    fn probe_state(&mut self) -> &mut ProbeState {
        &mut self.probe
    }
}

/// [`Observations`] shared between the observer, the applier, the probe and the enforcer.
pub type Shared = Arc<Mutex<Observations>>;

/// Locks the observations; a panic elsewhere while holding the lock leaves them usable.
pub fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Observations> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Observations {
    /// What was last seen of `user` (`None` before the first look since it was assigned).
    pub fn user(&self, user: &str) -> Option<&Seen> {
        self.users.get(user)
    }

    /// The credential this agent last upserted for `user`, if it did through this
    /// connection.
    pub fn upserted(&self, user: &str) -> Option<&Upserted> {
        self.upserted.get(user)
    }

    /// Why the last look failed, while it stands.
    pub fn error(&self) -> Option<&ApplyError> {
        self.error.as_ref()
    }

    /// What the last probe through the current connection said.
    pub fn probe(&self) -> &Probe {
        self.probe.probe()
    }

    /// Forgets everything: the connection changed to `epoch` (another Kafka, perhaps, where
    /// nothing this agent upserted is known to be in place).
    pub fn reset(&mut self, epoch: u64) {
        *self = Self {
            epoch,
            next_version: self.next_version,
            ..Self::default()
        };
        self.probe.reset(epoch);
    }

    /// Notes that `credential` was upserted for `user`.
    pub fn upserted_now(&mut self, user: &str, credential: Upserted) {
        self.upserted.insert(user.to_owned(), credential);
    }

    /// Notes that `user`'s credential was deleted.
    pub fn credential_deleted(&mut self, user: &str) {
        self.upserted.remove(user);
    }

    /// Notes that `plan` was applied to `user`.
    pub fn applied(&mut self, user: String, plan: Plan) {
        self.applied.insert(user, (plan, 0));
    }

    /// A look begins: takes the users applied to so far.
    pub fn begin(&mut self) -> Applied {
        std::mem::take(&mut self.applied)
    }

    /// Whether an applied change waits to show in Kafka (the next look comes soon).
    pub fn settling(&self) -> bool {
        !self.applied.is_empty()
    }

    fn bump(&mut self) -> u64 {
        self.next_version += 1;
        self.next_version
    }

    /// Records a look at every user in `users` (all assigned) through connection `epoch`,
    /// begun with `applied` (from [`Self::begin`]); answers what to tell the engine.
    pub fn record(
        &mut self,
        epoch: u64,
        users: &[String],
        outcome: Result<BTreeMap<String, UserSeen>, ApplyError>,
        mut applied: Applied,
    ) -> Vec<WatchEvent> {
        if epoch != self.epoch {
            // Made through a connection that has been replaced since.
            return Vec::new();
        }
        let mut seen = match outcome {
            Ok(seen) => seen,
            Err(error) => {
                for (user, entry) in applied {
                    // A plan applied while this look ran is the newer one.
                    self.applied.entry(user).or_insert(entry);
                }
                if self.error.as_ref() == Some(&error) {
                    return Vec::new();
                }
                let message = error.message.clone();
                self.error = Some(error);
                return vec![WatchEvent::Failed {
                    resource: USERS,
                    namespace: String::new(),
                    message,
                }];
            }
        };
        let recovered = self.error.take().is_some() || !self.looked;
        self.looked = true;
        // Users no longer assigned are forgotten, so one assigned again is looked at anew.
        let assigned: BTreeSet<&String> = users.iter().collect();
        self.users.retain(|user, _| assigned.contains(user));
        self.upserted.retain(|user, _| assigned.contains(user));
        let mut changed = Vec::new();
        for user in users {
            let now = seen.remove(user).unwrap_or_default();
            if self.applied.contains_key(user) {
                // Applied to while this look ran: it may not show that yet; the next look
                // (soon) tells.
                continue;
            }
            let news = match applied.remove(user) {
                Some((plan, looks))
                    if !recovered && !shows(&plan, &now) && looks + 1 < SETTLING_LOOKS =>
                {
                    // Not visible yet: keep the version the apply was decided on.
                    if let Some(s) = self.users.get_mut(user) {
                        s.seen = now;
                    }
                    self.applied.insert(user.clone(), (plan, looks + 1));
                    continue;
                }
                // Shows (or never will): the engine waits for this user's next version.
                Some(_) => true,
                None => recovered || self.users.get(user).map(|s| &s.seen) != Some(&now),
            };
            if news {
                let version = self.bump();
                self.users.insert(user.clone(), Seen { version, seen: now });
                changed.push(user.clone());
            }
        }
        if recovered {
            // Every user is to be judged again (each got a new version).
            return vec![WatchEvent::Synced {
                resource: USERS,
                namespace: String::new(),
            }];
        }
        changed
            .into_iter()
            .map(|name| WatchEvent::Changed {
                resource: USERS,
                namespace: String::new(),
                name,
            })
            .collect()
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

/// Looks at the target's users whenever `resync` passes, `nudge` is notified or the target
/// changes, until the engine is gone.
pub async fn run(
    mut target: watch::Receiver<Target>,
    nudge: Arc<Notify>,
    shared: Shared,
    events: EventSink,
    resync: Duration,
    metrics: Metrics,
) {
    let mut retry: Option<Retry> = None;
    loop {
        let t = target.borrow_and_update().clone();
        let mut delay = resync;
        if let Some(admin) = t.admin.as_ref().filter(|_| !t.users.is_empty()) {
            let applied = lock(&shared).begin();
            let outcome = look(admin, &t.users, &metrics).await.map_err(|e| {
                let kind = error_kind(&e);
                metrics.error(match kind {
                    ApplyErrorKind::Unavailable => "kafka_unavailable",
                    other => other.as_str(),
                });
                ApplyError::new(kind, failure_message(&e))
            });
            if outcome.is_ok() {
                retry = None;
            } else {
                delay = looks::after_failure(&mut retry, resync);
            }
            let (out, settling) = {
                let mut observations = lock(&shared);
                let out = observations.record(t.epoch, &t.users, outcome, applied);
                (out, observations.settling())
            };
            if settling {
                delay = delay.min(SETTLING);
            }
            if !looks::tell(&events, out).await {
                return;
            }
        }
        if !looks::until_next(&mut target, &nudge, delay).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use accord_kafka::{AclOperation, AclPatternType, AclPermission, AclResourceType};

    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

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

    fn changed(events: &[WatchEvent]) -> Vec<String> {
        events
            .iter()
            .filter_map(|e| match e {
                WatchEvent::Changed { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect()
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
        assert_eq!(o.user("bob").unwrap().seen, UserSeen::default());
        let (va, vb) = (
            o.user("alice").unwrap().version,
            o.user("bob").unwrap().version,
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
        assert_eq!(o.user("alice").unwrap().version, va);
        assert_ne!(o.user("bob").unwrap().version, vb);
    }

    #[test]
    fn an_applied_user_keeps_its_version_until_kafka_shows_the_change() {
        let mut o = Observations::default();
        let users = names(&["alice"]);
        o.record(0, &users, Ok(BTreeMap::new()), Applied::new());
        let before = o.user("alice").unwrap().version;
        o.applied("alice".into(), upsert_plan());
        assert!(o.settling());
        let applied = o.begin();
        assert!(o.begin().is_empty(), "taken once");
        assert!(o.record(0, &users, Ok(BTreeMap::new()), applied).is_empty());
        assert_eq!(o.user("alice").unwrap().version, before);
        assert!(o.settling(), "looks again soon");
        let applied = o.begin();
        let shows = BTreeMap::from([("alice".to_owned(), with_credential(8192))]);
        assert_eq!(changed(&o.record(0, &users, Ok(shows), applied)), ["alice"]);
        assert_ne!(o.user("alice").unwrap().version, before);
        assert!(!o.settling());
    }

    #[test]
    fn an_applied_change_that_never_shows_is_judged_again_after_a_bounded_number_of_looks() {
        let mut o = Observations::default();
        let users = names(&["alice"]);
        o.record(0, &users, Ok(BTreeMap::new()), Applied::new());
        o.applied("alice".into(), upsert_plan());
        let mut looks = 0;
        loop {
            looks += 1;
            let applied = o.begin();
            let events = o.record(0, &users, Ok(BTreeMap::new()), applied);
            if !events.is_empty() {
                assert_eq!(changed(&events), ["alice"]);
                break;
            }
            assert!(looks < 100, "never reported");
        }
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
        assert_eq!(o.user("alice").unwrap().seen, with_credential(8192));
        let applied = o.begin();
        assert_eq!(applied.len(), 1, "the applied user waits for a good look");
        assert!(o.record(0, &users, Err(refused), applied).is_empty());
        let before = o.user("alice").unwrap().version;
        let applied = o.begin();
        let events = o.record(0, &users, Ok(seen), applied);
        assert!(matches!(events.as_slice(), [WatchEvent::Synced { .. }]));
        assert_eq!(o.error(), None);
        assert_ne!(o.user("alice").unwrap().version, before);
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
        assert!(o.user("alice").is_none());
        assert!(o.upserted("alice").is_none());
        assert!(
            o.record(0, &users, Ok(BTreeMap::new()), Applied::new())
                .is_empty()
        );
        assert!(o.user("alice").is_none());
        assert!(
            !o.record(1, &users, Ok(BTreeMap::new()), Applied::new())
                .is_empty()
        );
        // Versions keep growing across connections: an apply decided before is not
        // mistaken for one decided after.
        assert!(o.user("alice").unwrap().version > 1);
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
        assert!(o.user("bob").is_none());
        assert!(o.upserted("bob").is_none());
        assert!(o.user("alice").is_some());
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
