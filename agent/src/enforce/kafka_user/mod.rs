//! The Kafka user enforcer (FederatedKafkaUser): keeps each assigned user in the member's
//! Kafka as its assignment says — its SCRAM-SHA-512 credential, the ACLs of its principal
//! `User:<name>`, its client quotas; all of them removed when asked — and reports what the
//! brokers hold.
//!
//! It is the Kafka enforcer ([`KafkaEnforcer`]) of [`Users`]: what is here is only what users
//! have of their own. It reaches Kafka as the topic enforcer does, through the same
//! connection Secret and options ([`KafkaOptions`](super::kafka::KafkaOptions),
//! [`KafkaLink`](super::kafka::link::KafkaLink)), with its own watch of that Secret, its own
//! liveness [`probe`](super::kafka::probe) and its own client. The parts: the observer
//! ([`observe`]) looks at every user in three requests whatever their number, each resync
//! and right after applies, and feeds a cache; [`judge`] decides from it, purely; the
//! applier ([`apply`]) gathers the plans of many users into at most one request of each
//! kind per round. Nothing runs — no watch, no connection, no probe, no look — while no user
//! is assigned.
//!
//! One policy per user name: a second policy naming a user another already manages in this
//! cluster is `Conflict`, as for topics.

pub mod apply;
pub mod judge;
pub mod observe;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use accord_common::distribution::{KafkaUserSpec, Observed, PlacementState};
use accord_kafka::{Admin, KafkaError};

use self::judge::{Plan, Upserted, UserSeen};
use super::kafka::batch::Request;
use super::kafka::observe::{Seen, Shared};
use super::kafka::probe::Probe;
use super::kafka::resource::{KafkaEnforcer, KafkaResource};
use super::{Action, ApplyError, Judgement, Mine};
use crate::metrics::Metrics;
use crate::report::Report;

/// Keeps Kafka users.
pub type KafkaUserEnforcer = KafkaEnforcer<Users>;

/// Kafka users, as the Kafka enforcer keeps them.
#[derive(Debug)]
pub struct Users;

impl KafkaResource for Users {
    type Spec = KafkaUserSpec;
    type Seen = UserSeen;
    type Plan = Plan;
    type Ask = ();
    /// Kafka unreachable (`Unavailable`) or refusing the request (`Error`: its message
    /// names the missing ACL).
    type Failure = ApplyError;
    /// The credential this agent last upserted for each user, through this connection.
    type Kept = HashMap<String, Upserted>;

    const NAME: &'static str = "kafka_user";
    const RESOURCE: &'static str = observe::USERS;
    const ITEM: &'static str = "user";
    const WHAT: &'static str = "Kafka user";
    /// A look asks about every user in three requests whatever their number.
    const PARTIAL_LOOKS: bool = false;
    const MAX_DOUBLINGS: u32 = 0;

    fn name(spec: &KafkaUserSpec) -> &str {
        &spec.username
    }

    /// Spec changes need no look (every binding and quota of an assigned user is in the
    /// cache); a user added or gone does.
    fn asks(_mine: &Mine<'_, KafkaUserSpec>) -> BTreeMap<String, ()> {
        BTreeMap::new()
    }

    fn invalid(spec: &KafkaUserSpec, revision: i64) -> Option<Judgement> {
        Some(Judgement {
            report: Report::without_object(PlacementState::Error, judge::invalid(spec)?, revision),
            action: Action::Settled,
        })
    }

    fn observed(spec: &KafkaUserSpec, seen: &UserSeen, kept: &Self::Kept) -> Observed {
        Observed::KafkaUser(judge::observed(spec, seen, kept.get(&spec.username)))
    }

    fn judge(
        revision: i64,
        spec: &KafkaUserSpec,
        seen: &Seen<UserSeen>,
        kept: &Self::Kept,
        probe: &Probe,
        apply_error: Option<&ApplyError>,
    ) -> Judgement {
        let upserted = kept.get(&spec.username);
        judge::judge(
            revision,
            spec,
            &seen.seen,
            seen.version,
            upserted,
            probe,
            apply_error,
        )
    }

    fn plan(spec: &KafkaUserSpec, seen: &UserSeen, kept: &Self::Kept) -> Option<Plan> {
        judge::verdict(spec, seen, kept.get(&spec.username))
            .ok()
            .map(|verdict| verdict.plan)
            .filter(|plan| !plan.is_empty())
    }

    fn shows(plan: &Plan, seen: &UserSeen) -> bool {
        judge::shows(plan, seen)
    }

    /// What was upserted for a user no longer assigned is forgotten with it.
    fn retain(kept: &mut Self::Kept, assigned: &BTreeSet<&String>) {
        kept.retain(|user, _| assigned.contains(user));
    }

    fn noticed(_name: &str, _before: Option<&UserSeen>, _now: &UserSeen) {}

    async fn look(
        admin: &Admin,
        names: &[String],
        _asks: &BTreeMap<String, ()>,
        metrics: &Metrics,
    ) -> Result<BTreeMap<String, UserSeen>, KafkaError> {
        observe::look(admin, names, metrics).await
    }

    async fn execute(
        admin: &Admin,
        round: Vec<Request<Plan>>,
        shared: &Shared<Self>,
        metrics: &Metrics,
    ) {
        apply::execute(admin, round, shared, metrics).await;
    }
}
