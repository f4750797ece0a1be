//! FederatedKafkaUser as a [`PlacementKind`]: validate → select clusters → read the
//! password from the management cluster's Secret and decide the credential
//! ([`super::credential`]) → resolve user-name conflicts (the older object keeps a name in
//! a cluster) → the one assignment every selected cluster gets ([`super::plan`]).
//!
//! The password Secret is `spec.authentication.passwordSecretRef`, or else the Secret
//! named like the object (key `password`), which the hub creates with a generated
//! 32-character password when it is not there (owned by the object, so it goes with it).
//! A missing Secret sends nothing new (members keep what they hold) and shows
//! `Ready=False`/`WaitingForPassword`. A changed Secret is decided again at once (the
//! Secrets are watched): a new salt and credential go to every member.
//!
//! Deletion with `deletionPolicy: Delete` (the default) holds the finalizer
//! `accord.io/kafka-user`: the record becomes a tombstone and the object goes once every
//! member reported the user removed, or after `--user-deletion-timeout` with a Warning
//! Event naming the members left. `Retain` needs no finalizer: the users stay.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use accord_common::distribution::{
    AssignmentSpec, KafkaUserSpec, Observed, PlacedKind, PlacementState,
};
use accord_crds::kafka_topic::DeletionPolicy;
use accord_crds::kafka_user::{FederatedKafkaUser, FederatedKafkaUserStatus};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::Store as Reflector;
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use super::credential::{self, PasswordRef};
use super::status::{UserFacts, aggregate, notes};
use super::{FINALIZER, KafkaUserDecision, plan, reasons};
use crate::controllers::name_claims::NameClaims;
use crate::controllers::placement::{
    self, DecideInput, Decided, Note, PlacementKind, Reported, Started, StatusInput, Trigger,
    Watched,
};
use crate::controllers::tombstones::{self, Removal, Tombstoned};
use crate::controllers::transitions;
use crate::controllers::{ControllerContext, ReconcileError};
use crate::distribution::claim::{self, Claim};
use crate::distribution::reported as shown;
use crate::distribution::select::Clusters;
use crate::distribution::{PlacementRecord, ShareRecord, deletion, taints};
use crate::store::StatusRecord;

/// The key of a generated password in its Secret.
pub const GENERATED_KEY: &str = "password";

tombstones::deletion_options! {
    /// The FederatedKafkaUser settings of `serve`.
    pub struct KafkaUserOptions;
    /// How long deleting a FederatedKafkaUser with `deletionPolicy: Delete` waits for every
    /// member to remove its credential, ACLs and quotas; after it, the object goes anyway
    /// with a Warning Event naming the members left behind.
    flag = "user-deletion-timeout",
    id = "user_deletion_timeout",
    value_name = "USER_DELETION_TIMEOUT";
}

/// The FederatedKafkaUser plug-in.
pub struct KafkaUsers {
    ctx: Arc<ControllerContext>,
    options: KafkaUserOptions,
    users: Reflector<Watched<Self>>,
    trigger: Trigger<Self>,
    /// Each object's claimed user name and generation, and the objects claiming each.
    seen: NameClaims<KafkaUsers>,
    /// Password Secrets being generated (`namespace/name`), so one is created once.
    generating: Arc<Mutex<HashSet<String>>>,
}

/// The user name a watched object claims, read without decoding the whole object.
fn watched_username(user: &Watched<KafkaUsers>) -> String {
    user.pointer("/spec/username")
        .and_then(serde_json::Value::as_str)
        .map_or_else(|| user.name_any(), str::to_owned)
}

/// Where a watched object's password is: `passwordSecretRef`, or the generated Secret
/// named like the object.
fn watched_password_ref(user: &Watched<KafkaUsers>) -> PasswordRef {
    let reference = user.pointer("/spec/authentication/passwordSecretRef");
    let field = |f: &str| {
        reference
            .and_then(|r| r.get(f))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    match (field("name"), field("key")) {
        (Some(name), Some(key)) => PasswordRef { name, key },
        _ => PasswordRef {
            name: user.name_any(),
            key: GENERATED_KEY.to_owned(),
        },
    }
}

/// The Secret a watched object reads its password from (for the Secret triggers).
fn password_secret(user: &Watched<KafkaUsers>) -> Vec<String> {
    vec![watched_password_ref(user).name]
}

/// The deletion policy of a watched object, read without decoding it (default `Delete`).
fn deletion_policy(user: &Watched<KafkaUsers>) -> DeletionPolicy {
    user.pointer("/spec/deletionPolicy")
        .and_then(|v| serde_json::from_value::<DeletionPolicy>(v.clone()).ok())
        .unwrap_or(DeletionPolicy::Delete)
}

/// `creationTimestamp`-ordered claim of a decoded user on its name in the clusters it
/// selects (`None` when its selection cannot be evaluated).
fn claim(user: &FederatedKafkaUser, clusters: &Clusters) -> Option<Claim> {
    placement::claim_of(user, user.user_name(), &user.spec.placement, clusters)
}

/// What the share of a cluster that left the selection says while its user is removed.
const LEAVING: &str = "no longer selected: removing the user from this cluster's Kafka";

/// The shares of clusters `previous` sent the user to that are no longer `selected`, with
/// `deletionPolicy: Delete`: each is sent `remove: true` until its agent reports the user
/// removed, then it goes (a credential nobody manages any more is a door left open).
fn leaving(
    previous: &PlacementRecord<KafkaUserDecision>,
    selected: &[crate::distribution::select::SelectedCluster],
    reports: &std::collections::HashMap<String, StatusRecord>,
) -> Vec<ShareRecord> {
    previous
        .shares
        .iter()
        .filter(|s| !selected.iter().any(|c| c.name == s.cluster))
        .filter_map(|s| match &s.assignment {
            Some(AssignmentSpec::KafkaUser(spec)) => {
                let done = spec.remove && reports.get(&s.cluster).is_some_and(is_removed);
                (!done).then(|| ShareRecord {
                    since: None,
                    cluster: s.cluster.clone(),
                    assignment: Some(AssignmentSpec::KafkaUser(removal(spec))),
                    held_reason: Some(LEAVING.to_owned()),
                    hold: None,
                })
            }
            _ => None,
        })
        .collect()
}

/// What a cluster that is to remove the user is sent: the user name and `remove`.
fn removal(spec: &KafkaUserSpec) -> KafkaUserSpec {
    KafkaUserSpec {
        username: spec.username.clone(),
        remove: true,
        ..Default::default()
    }
}

/// Whether `report` says the user is gone from the member's Kafka.
fn is_removed(report: &StatusRecord) -> bool {
    report.state == PlacementState::Synced
        && matches!(&report.observed, Observed::KafkaUser(u) if u.removed)
}

impl KafkaUsers {
    /// The claims of every object that names `username`, except those whose deletion has
    /// already released them.
    fn claims(&self, username: &str, clusters: &Clusters) -> Vec<Claim> {
        self.seen
            .live(&self.users, username, |u| claim(u, clusters))
    }

    /// Creates the Secret `namespace/name` with a generated password, owned by `user`, in
    /// the background (once); the Secret watch decides the object again when it is there.
    fn generate_password(&self, user: &FederatedKafkaUser, namespace: &str, name: &str) {
        let key = format!("{namespace}/{name}");
        if !self
            .generating
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone())
        {
            return;
        }
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                owner_references: user.controller_owner_ref(&()).map(|o| vec![o]),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "accord".to_owned(),
                )])),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                GENERATED_KEY.to_owned(),
                ByteString(credential::generate_password().into_bytes()),
            )])),
            ..Default::default()
        };
        let (ctx, generating) = (self.ctx.clone(), self.generating.clone());
        let reference = user.object_ref(&());
        tokio::spawn(async move {
            let api = Api::<Secret>::namespaced(
                ctx.kube.clone(),
                &secret.metadata.namespace.clone().unwrap_or_default(),
            );
            match api.create(&PostParams::default(), &secret).await {
                Ok(_) => {
                    info!(secret = %key, "generated the password of a FederatedKafkaUser");
                    ctx.note(
                        &reference,
                        Note::normal(
                            reasons::PASSWORD_GENERATED,
                            format!("generated a password in Secret {key} (key {GENERATED_KEY})"),
                        ),
                    );
                }
                // Made meanwhile (by another replica's earlier term, or by hand): used as it is.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => {
                    warn!(secret = %key, error = %e, "generating a FederatedKafkaUser's password")
                }
            }
            generating
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&key);
        });
    }
}

/// Shows each member's placement as its agent reports the tombstone.
impl Tombstoned for KafkaUsers {
    const FINALIZER: &'static str = FINALIZER;
    const DELETING: Option<&'static str> = Some("removing the user in every member");

    fn context(&self) -> &ControllerContext {
        &self.ctx
    }

    fn waits(user: &Watched<Self>) -> bool {
        deletion_policy(user) == DeletionPolicy::Delete
    }

    fn is_tombstone(record: &PlacementRecord<KafkaUserDecision>) -> bool {
        record.decision.spec.remove
    }

    /// Every cluster that was sent the user is now sent `remove: true` (without the
    /// credential).
    fn tombstone(
        record: &PlacementRecord<KafkaUserDecision>,
    ) -> Option<PlacementRecord<KafkaUserDecision>> {
        let decision = KafkaUserDecision {
            spec: removal(&record.decision.spec),
            conflicts: BTreeMap::new(),
        };
        deletion::tombstone(record, removal, decision)
    }

    fn is_gone(report: &StatusRecord) -> bool {
        is_removed(report)
    }

    fn deletion_timeout(&self) -> Duration {
        self.options.deletion_timeout
    }

    fn removal(
        &self,
        user: &Watched<Self>,
        _tombstone: &PlacementRecord<KafkaUserDecision>,
    ) -> Removal {
        let name = watched_username(user);
        Removal {
            subject: format!("Kafka user {name} was"),
            gone: "removed",
            it: "the user",
            done: Note::normal(
                transitions::reasons::DELETED,
                format!("Kafka user {name}: credential, ACLs and quotas removed in every member"),
            ),
        }
    }
}

impl PlacementKind for KafkaUsers {
    type Object = FederatedKafkaUser;
    type Status = FederatedKafkaUserStatus;
    type Decision = KafkaUserDecision;
    type Facts = UserFacts;
    type Options = KafkaUserOptions;

    const CONTROLLER: &'static str = "FederatedKafkaUser controller";
    const KIND: PlacedKind = PlacedKind::FederatedKafkaUser;
    const DECISION_TAG: &'static str = "kafkaUser";
    /// Its decision holds tainted and drained clusters itself: a placement taken away
    /// removes the user there under `Delete`.
    const HOLDS_TAINTED: bool = false;

    /// Also follows the password Secrets: a changed one decides its users again.
    fn start(
        ctx: &Arc<ControllerContext>,
        users: Reflector<Watched<Self>>,
        trigger: Trigger<Self>,
        options: &KafkaUserOptions,
    ) -> Started<Self> {
        let secret_changes = crate::controllers::secret_changes::trigger_on_secret_changes::<Self>(
            ctx.clone(),
            users.clone(),
            trigger.clone(),
            password_secret,
        );
        Started {
            kind: Self {
                ctx: ctx.clone(),
                options: options.clone(),
                users,
                trigger,
                seen: NameClaims::new(watched_username, FINALIZER),
                generating: Arc::default(),
            },
            tasks: vec![Box::pin(secret_changes)],
            listed: Box::pin(async { true }),
        }
    }

    fn rollout(object: &FederatedKafkaUser) -> Option<&accord_crds::rollout::Rollout> {
        object.spec.rollout.as_ref()
    }

    fn rollout_status(
        status: &mut FederatedKafkaUserStatus,
    ) -> Option<&mut Option<accord_crds::rollout::RolloutStatus>> {
        Some(&mut status.rollout)
    }

    fn set_revision(line: &mut accord_crds::KafkaUserPlacement, revision: Option<String>) {
        line.revision = revision;
    }

    fn placement(user: &FederatedKafkaUser) -> Option<&accord_crds::ClusterPlacement> {
        Some(&user.spec.placement)
    }

    fn decide(
        &self,
        user: &FederatedKafkaUser,
        input: &DecideInput<'_, KafkaUserDecision>,
    ) -> Decided<Self> {
        let selected = match placement::valid_selection(&user.spec, input) {
            Ok(s) => s,
            Err(why) => return Decided::Invalid(why),
        };
        // Taints and the drain switch first: a cluster whose placement is taken away
        // (NoExecute) leaves as a deselected one does — with `Delete`, the user is removed
        // there, never left behind unmanaged.
        let now_unix = input.now_millis / 1000;
        let sent_before = |cluster: &str| {
            input
                .previous
                .and_then(|p| p.share(cluster))
                .is_some_and(ShareRecord::places)
        };
        let taints::Partition {
            eligible: selected,
            held: tainted,
            recheck_at_unix,
        } = taints::partition(
            selected,
            input.clusters,
            &user.spec.placement.tolerations,
            sent_before,
            now_unix,
        );
        let recheck_after = recheck_at_unix.map(|at| taints::wait_until(at, now_unix));
        let namespace = user.namespace().unwrap_or_default();
        let generated = user.spec.authentication.password_secret_ref.is_none();
        let at = match &user.spec.authentication.password_secret_ref {
            Some(r) => PasswordRef {
                name: r.name.clone(),
                key: r.key.clone(),
            },
            None => PasswordRef {
                name: user.name_any(),
                key: GENERATED_KEY.to_owned(),
            },
        };
        let Some(password) = self.ctx.secrets.value(&namespace, &at.name, &at.key) else {
            let waiting = if generated {
                self.generate_password(user, &namespace, &at.name);
                format!("generating the password in Secret {namespace}/{}", at.name)
            } else {
                format!(
                    "no Secret {namespace}/{} with key {} on the management cluster \
                     (spec.authentication.passwordSecretRef); nothing new is sent",
                    at.name, at.key
                )
            };
            return Decided::Hold {
                shown: claim::held(&selected, &waiting),
                facts: UserFacts {
                    waiting: Some(waiting),
                },
            };
        };
        let previous = input
            .previous
            .map(|r| &r.decision.spec)
            .filter(|s| !s.remove)
            .and_then(|s| s.credential.as_ref());
        let decided = credential::decide(&password, user.iterations(), &at, previous);
        let spec = plan::assignment(user, decided);
        let conflicts = match claim(user, input.clusters) {
            Some(me) => claim::conflicts(&me, &self.claims(&spec.username, input.clusters)),
            None => BTreeMap::new(),
        };
        let (mut shares, decision) = plan::decide(&selected, &spec, &conflicts);
        let mut removing = Vec::new();
        if let Some(previous) = input.previous
            && user.spec.deletion_policy() == DeletionPolicy::Delete
        {
            let reports = placement::reports(&self.ctx, previous);
            removing = leaving(previous, &selected, &reports);
        }
        for mut held in tainted {
            match removing.iter_mut().find(|r| r.cluster == held.cluster) {
                Some(r) => {
                    let why = held.held_reason.take().unwrap_or_default();
                    r.held_reason = Some(format!(
                        "{why}: removing the user from this cluster's Kafka"
                    ));
                }
                None => shares.push(held),
            }
        }
        shares.extend(removing);
        Decided::Record {
            shares,
            decision,
            facts: UserFacts::default(),
            recheck_after,
        }
    }

    fn announce(
        &self,
        _user: &FederatedKafkaUser,
        record: &PlacementRecord<KafkaUserDecision>,
        revision: i64,
    ) -> Option<Note> {
        let sent: Vec<&str> = record
            .shares
            .iter()
            .filter(|s| s.assignment.is_some())
            .map(|s| s.cluster.as_str())
            .collect();
        // The clusters are counted, not named: a user may be sent to thousands.
        info!(user = %record.placed, clusters = sent.len(), revision, "user placements");
        let spec = &record.decision.spec;
        (!sent.is_empty()).then(|| {
            Note::normal(
                transitions::reasons::APPLIED,
                format!(
                    "Kafka user {} ({} ACL bindings, {} quotas, credential {}) sent to {} at \
                     revision {revision}",
                    spec.username,
                    spec.acls.len(),
                    spec.quotas.len(),
                    spec.credential
                        .as_ref()
                        .map_or("", |c| c.hash.get(..12).unwrap_or_default()),
                    shown::named(&sent, ", ")
                ),
            )
        })
    }

    async fn status_of(
        &self,
        user: &FederatedKafkaUser,
        input: StatusInput<'_, Self>,
    ) -> Result<Reported<FederatedKafkaUserStatus>, ReconcileError> {
        Ok(placement::aggregated(user, &input, aggregate, notes))
    }

    tombstones::tombstoned!();

    /// A user's name or generation change, or its deletion, re-checks every other object
    /// of its old and new user name.
    fn on_object(&self, user: &Watched<Self>, gone: bool) {
        for other in self.seen.observe(user, gone).into_iter().flatten() {
            let _ = self.trigger.send(other);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched(value: serde_json::Value) -> Watched<KafkaUsers> {
        Watched::<KafkaUsers>::from_value(value).unwrap()
    }

    #[test]
    fn name_password_and_deletion_policy_are_read_without_decoding_the_object() {
        let broken = watched(serde_json::json!({
            "apiVersion": "accord.io/v1beta1", "kind": "FederatedKafkaUser",
            "metadata": {"name": "writer", "namespace": "team"},
            "spec": {"username": "orders-writer", "authentication": {"type": "kerberos",
                     "passwordSecretRef": {"name": "pw", "key": "k"}}, "deletionPolicy": "Retain"},
        }));
        assert!(broken.decode().is_err(), "the fixture must not decode");
        assert_eq!(watched_username(&broken), "orders-writer");
        assert_eq!(
            watched_password_ref(&broken),
            PasswordRef {
                name: "pw".into(),
                key: "k".into()
            }
        );
        assert_eq!(
            KafkaUsers::finalizer(&broken),
            None,
            "Retain needs no finalizer"
        );
        let plain = watched(serde_json::json!({
            "apiVersion": "accord.io/v1beta1", "kind": "FederatedKafkaUser",
            "metadata": {"name": "writer", "namespace": "team"},
            "spec": {"authentication": {"type": "scram-sha-512"}, "placement": {"clusters": ["a"]}},
        }));
        assert_eq!(watched_username(&plain), "writer");
        assert_eq!(password_secret(&plain), ["writer"]);
        assert_eq!(
            KafkaUsers::finalizer(&plain),
            Some(FINALIZER),
            "Delete is the default"
        );
    }

    #[test]
    fn a_cluster_leaving_the_selection_is_told_to_remove_the_user_until_it_reports_it_gone() {
        use crate::distribution::select::SelectedCluster;
        use accord_common::distribution::{KafkaUserObserved, PlacedRef};
        let sent = |cluster: &str, remove: bool| ShareRecord {
            since: None,
            cluster: cluster.into(),
            assignment: Some(AssignmentSpec::KafkaUser(KafkaUserSpec {
                username: "u".into(),
                remove,
                ..Default::default()
            })),
            held_reason: None,
            hold: None,
        };
        let previous = PlacementRecord {
            placed: PlacedRef::new(PlacedKind::FederatedKafkaUser, "team", "u"),
            generation: 1,
            decided_unix_millis: 0,
            shares: vec![
                sent("east", false),
                sent("west", false),
                ShareRecord {
                    assignment: None,
                    ..sent("ghost", false)
                },
            ],
            decision: KafkaUserDecision::default(),
            traceparent: String::new(),
        };
        let selected = [SelectedCluster {
            name: "east".into(),
            known: true,
        }];
        let reports = std::collections::HashMap::new();
        let left = leaving(&previous, &selected, &reports);
        assert_eq!(
            left.len(),
            1,
            "only west was sent the user and left: {left:?}"
        );
        assert_eq!(left[0].cluster, "west");
        assert!(matches!(
            &left[0].assignment,
            Some(AssignmentSpec::KafkaUser(u)) if u.remove && u.username == "u"
        ));
        // Still removing until west reports the user removed; then it goes.
        let removing = PlacementRecord {
            shares: vec![sent("east", false), left[0].clone()],
            ..previous.clone()
        };
        assert_eq!(leaving(&removing, &selected, &reports).len(), 1);
        let removed = StatusRecord {
            resource_version: String::new(),
            generation: 0,
            applied_revision: 9,
            state: PlacementState::Synced,
            message: String::new(),
            observed_unix_millis: 0,
            observed: Observed::KafkaUser(KafkaUserObserved {
                removed: true,
                ..Default::default()
            }),
            api_server_unavailable: false,
        };
        let reports = std::collections::HashMap::from([("west".to_owned(), removed)]);
        assert!(leaving(&removing, &selected, &reports).is_empty());
    }

    #[test]
    fn the_tombstone_removes_where_the_user_was_sent_and_carries_no_credential() {
        use accord_common::distribution::{PlacedRef, ScramCredential};
        let spec = KafkaUserSpec {
            username: "u".into(),
            credential: Some(ScramCredential {
                hash: "h".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let record = PlacementRecord {
            placed: PlacedRef::new(PlacedKind::FederatedKafkaUser, "team", "u"),
            generation: 1,
            decided_unix_millis: 0,
            shares: vec![
                ShareRecord {
                    since: None,
                    cluster: "east".into(),
                    assignment: Some(AssignmentSpec::KafkaUser(spec.clone())),
                    held_reason: None,
                    hold: None,
                },
                ShareRecord {
                    since: None,
                    cluster: "west".into(),
                    assignment: None,
                    held_reason: Some("Conflict".into()),
                    hold: Some(crate::distribution::Hold::Conflict),
                },
            ],
            decision: KafkaUserDecision {
                spec,
                conflicts: BTreeMap::new(),
            },
            traceparent: String::new(),
        };
        let t = KafkaUsers::tombstone(&record).unwrap();
        assert_eq!(t.shares.len(), 1);
        assert!(t.decision.spec.remove);
        assert!(matches!(
            &t.shares[0].assignment,
            Some(AssignmentSpec::KafkaUser(u)) if u.remove && u.credential.is_none() && u.username == "u"
        ));
    }
}
