//! Progressive rollouts in the generic controller, for every kind whose objects have a
//! `spec.rollout` ([`PlacementKind::rollout`]).
//!
//! A reconcile of such an object (1) decides the shares of the current revision as
//! always (the *target*), (2) sends each cluster its target share only once the rollout
//! reached it, the last good revision's share otherwise ([`RolloutRecord::merge`]), (3)
//! computes the status against the record the clusters were sent, and (4) takes the
//! rollout's next step from what that status says of the clusters sent the revision
//! ([`rollout::heard`], [`rollout::step`]). A step that sends the revision to more
//! clusters, or takes the reached ones back, is one placements record write, with the
//! rollout's progress in the same fenced transaction; progress alone (a soak that
//! started, a failure) is one write of `rollouts/<kind>/<ns>/<name>`, which no agent
//! receives. A replica that takes over reads the same progress and resumes the same
//! step: deadlines and soaks count from times kept there.

use super::*;
use crate::distribution::rollout::{self, Heard, Member, Phase, RolloutRecord, Rules};
use accord_crds::conditions::{Desired, Status};
use accord_crds::rollout::{MAX_NAMED_FAILURES, Rollout, RolloutFailure, RolloutStatus};

/// Condition type while a rollout's revision was taken back.
pub const ROLLED_BACK: &str = "RolledBack";
/// Condition type while a rollout stopped without taking its revision back.
pub const ROLLOUT_FAILED: &str = "RolloutFailed";

/// Event reasons of rollouts.
pub mod reasons {
    /// More clusters were sent the revision.
    pub const ROLLOUT_STEP: &str = "RolloutStep";
    /// Every cluster succeeded on the revision.
    pub const ROLLOUT_SUCCEEDED: &str = "RolloutSucceeded";
    /// The rollout stopped and its clusters went back.
    pub const ROLLED_BACK: &str = "RolledBack";
    /// The rollout stopped, its clusters kept the revision.
    pub const ROLLOUT_FAILED: &str = "RolloutFailed";
    /// Conditions while nothing failed.
    pub const ROLLOUT_HEALTHY: &str = "RolloutHealthy";
}

/// One object's rollout during a reconcile.
pub(super) struct Rolling {
    /// `spec.rollout`.
    spec: Rollout,
    /// Its rules.
    rules: Rules,
    /// Where the rollout is (started now when the revision is new).
    record: RolloutRecord,
    /// As stored, if stored.
    kept: Option<RolloutRecord>,
    /// The spec, when this reconcile started the revision's rollout (its ControllerRevision
    /// is yet to be written).
    started: Option<serde_json::Value>,
    /// The decision for the current revision, before the rollout merged in the last good
    /// shares.
    pub(super) target: Vec<ShareRecord>,
}

impl Rolling {
    /// The shares to send now.
    pub(super) fn merged(&self) -> Vec<ShareRecord> {
        self.record.merge(&self.target)
    }

    /// The rollout's progress to write with a new placements record of `p`, when it
    /// differs from what is stored (then taken as stored).
    pub(super) fn save(
        &mut self,
        ctx: &ControllerContext,
        p: &PlacedRef,
    ) -> Result<Vec<crate::store::TxnOp>, StoreError> {
        if self.kept.as_ref() == Some(&self.record) {
            return Ok(Vec::new());
        }
        let value = crate::store::encode_large(&self.record)?;
        self.kept = Some(self.record.clone());
        Ok(vec![crate::store::TxnOp::put(
            rollout_key(ctx, p),
            value,
            None,
        )])
    }
}

/// `rollouts/<kind>/<ns>/<name>` of `p`.
pub(super) fn rollout_key(ctx: &ControllerContext, p: &PlacedRef) -> String {
    ctx.store
        .keys()
        .rollout(p.kind.as_str(), &p.namespace, &p.name)
}

impl<K: PlacementKind> Placements<K> {
    /// The rollout of `object`'s current revision when its `spec.rollout` is progressive
    /// (`target`: the shares decided for it; `previous`: the shares the clusters were last
    /// sent).
    pub(super) fn rolling(
        &self,
        watched: &Watched<K>,
        object: &K::Object,
        target: &[ShareRecord],
        previous: Option<&[ShareRecord]>,
        now_millis: i64,
    ) -> Option<Rolling> {
        let spec = K::rollout(object).filter(|r| r.is_progressive())?;
        let p = placed_ref::<K>(object);
        let revision = rollout::revision_of(watched.pointer("/spec"));
        let kept = self
            .ctx
            .rollouts
            .get(&rollout_key(&self.ctx, &p))
            .map(|(r, _)| r);
        let started = kept
            .as_ref()
            .is_none_or(|k| k.revision != revision)
            .then(|| watched.pointer("/spec").cloned().unwrap_or_default());
        let record = match &kept {
            Some(r) if r.revision == revision => r.clone(),
            other => RolloutRecord::start(
                revision,
                object.meta().generation.unwrap_or_default(),
                other.as_ref(),
                previous,
                now_millis,
            ),
        };
        Some(Rolling {
            rules: Rules::of(spec),
            spec: spec.clone(),
            record,
            kept,
            started,
            target: target.to_vec(),
        })
    }

    /// Takes the rollout's next step from `status` (computed against `stored`, the record
    /// the clusters were last sent): writes what it sends or its progress, publishes its
    /// Events, and sets `status.rollout` and the rollout's conditions in `status`. Returns
    /// when to look again.
    pub(super) async fn step_rollout(
        &self,
        object: &K::Object,
        mut r: Rolling,
        status: &mut K::Status,
        stored: &PlacementRecord<K::Decision>,
        clusters: &Clusters,
        now: &Time,
    ) -> Result<Option<Duration>, ReconcileError> {
        let ctx = &self.ctx;
        let now_millis = now.0.as_millisecond();
        let p = placed_ref::<K>(object);
        let heard = rollout::heard(&*status, K::healthy);
        let no_labels = std::collections::BTreeMap::new();
        let placing: Vec<&str> = r
            .target
            .iter()
            .filter(|s| s.places())
            .map(|s| s.cluster.as_str())
            .collect();
        let groups = rollout::groups(
            &r.spec,
            placing
                .iter()
                .map(|c| (*c, clusters.get(*c).map_or(&no_labels, |i| &i.labels))),
        );
        let members: Vec<Member> = placing
            .iter()
            .map(|c| Member {
                name: (*c).to_owned(),
                group: groups.get(*c).map_or(0, |g| g.0),
                heard: heard.get(*c).cloned().unwrap_or(Heard::Nothing),
            })
            .collect();
        // Each line names the revision its cluster was sent: the status was computed
        // against that record, which the rollout's progress before this step describes.
        for line in accord_crds::PlacedStatus::placements_mut(status) {
            let runs = r
                .record
                .runs(accord_crds::summary::HasState::cluster(line))
                .map(str::to_owned);
            K::set_revision(line, runs);
        }
        let before = r.record.progress.phase;
        let step = rollout::step(&r.rules, &members, &r.record.progress, now_millis);
        r.record.advance(&step);
        let phase = r.record.progress.phase;
        let took_back = phase == Phase::RolledBack && before != Phase::RolledBack;
        if !step.newly_sent.is_empty() || took_back {
            // Stamped when the step is decided: after the status it is decided from (at a
            // large fleet, computing that status is most of the reconcile).
            let mut record = PlacementRecord {
                shares: r.merged(),
                decided_unix_millis: Timestamp::now().as_millisecond(),
                generation: object.meta().generation.unwrap_or_default(),
                // A step is part of its generation's change.
                traceparent: self.generation_traceparent(
                    &p,
                    object.meta().generation.unwrap_or_default(),
                    Some(stored),
                ),
                ..stored.clone()
            };
            K::name_decision(&mut record, &ulid::Ulid::new().to_string());
            let progress = r.save(ctx, &p)?;
            let revision = write_record_with::<K>(ctx, &mut record, progress).await?;
            debug!(placed = %p, revision, sent = ?step.newly_sent, ?phase, "rollout step written");
        } else if r.kept.as_ref() != Some(&r.record) {
            let fence = ctx.election.fence().ok_or(ReconcileError::NotLeader)?;
            let value = crate::store::encode_large(&r.record)?;
            let key = rollout_key(ctx, &p);
            let revision = ctx.store.fenced_put(&fence, &key, value).await?;
            ctx.rollouts.wait_for_revision(revision).await;
        }
        count(ctx, K::KIND.as_str(), &r, before, &step, now_millis);
        self.history(object, &r, before).await;
        let group_of = |c: &str| groups.get(c).map(|g| g.1.clone()).unwrap_or_default();
        for note in notes(&r.record, before, &step.newly_sent, &group_of) {
            ctx.note(&object.object_ref(&()), note);
        }
        let shown = shown(&r.record, &members, &r.rules, now_millis, &group_of);
        set_conditions::<K>(status, &shown, object.meta().generation, now);
        if let Some(slot) = K::rollout_status(status) {
            *slot = Some(shown);
        }
        let wait = step
            .recheck_at
            .map(|at| Duration::from_millis(u64::try_from(at - now_millis).unwrap_or(0).max(100)));
        // A step just sent: look again once the agents had a moment to report.
        Ok(if step.newly_sent.is_empty() {
            wait
        } else {
            crate::distribution::earliest(wait, Duration::from_secs(1))
        })
    }
}

impl<K: PlacementKind> Placements<K> {
    /// Forgets the rollout kept for `p` once its object no longer rolls out progressively:
    /// made progressive again, it starts afresh from what the clusters run then (a kept
    /// `RolledBack` would take back the clusters the failed rollout reached).
    pub(super) async fn forget_rollout(&self, p: &PlacedRef) -> Result<(), ReconcileError> {
        let ctx = &self.ctx;
        let key = rollout_key(ctx, p);
        if ctx.rollouts.read(&key, |_, _| ()).is_none() {
            return Ok(());
        }
        let fence = ctx.election.fence().ok_or(ReconcileError::NotLeader)?;
        let (_, revision) = ctx
            .store
            .fenced_txn_with_revision(&fence, Vec::new(), vec![crate::store::TxnOp::delete(key)])
            .await?;
        ctx.rollouts.wait_for_revision(revision).await;
        debug!(placed = %p, "rollout forgotten: the object no longer rolls out progressively");
        Ok(())
    }

    /// The revision history: a new revision's ControllerRevision, an ended one's outcome.
    /// A failure is logged and counted; the rollout goes on without it.
    async fn history(&self, object: &K::Object, r: &Rolling, before: Phase) {
        let phase = r.record.progress.phase;
        let written = match &r.started {
            Some(spec) => super::revisions::record::<K>(&self.ctx, object, spec, &r.record).await,
            None => Ok(()),
        };
        let ended = phase != before && phase.has_ended();
        let noted = if ended && written.is_ok() {
            super::revisions::outcome::<K>(&self.ctx, object, &r.record).await
        } else {
            Ok(())
        };
        if let Err(e) = written.and(noted) {
            self.ctx.metrics.error("kubernetes");
            tracing::warn!(
                object = %object_name(object),
                revision = %r.record.revision,
                error = %e,
                "could not keep the revision history"
            );
        }
    }
}

/// The rollout's metrics for a step of `r` (its phase was `before`).
fn count(
    ctx: &ControllerContext,
    kind: &str,
    r: &Rolling,
    before: Phase,
    step: &rollout::Step,
    now: i64,
) {
    let metrics = &ctx.metrics;
    let label = accord_common::metrics::KindLabel::of(kind);
    if !step.newly_sent.is_empty() {
        metrics.rollout_steps.get_or_create(&label).inc();
    }
    let phase = r.record.progress.phase;
    if phase == before || !phase.has_ended() {
        return;
    }
    metrics
        .rollouts_ended
        .get_or_create(&crate::metrics::RolloutEndLabel {
            kind: kind.to_owned(),
            phase: format!("{phase:?}"),
        })
        .inc();
    let seconds = |millis: i64| millis.max(0) as f64 / 1000.0;
    if phase == Phase::Succeeded {
        metrics
            .rollout_seconds
            .get_or_create(&label)
            .observe(seconds(now - r.record.started_unix_millis));
    }
    let progress = &r.record.progress;
    let first_missed = progress
        .failed
        .keys()
        .filter_map(|c| progress.sent.get(c))
        .min()
        .map(|sent| sent + r.rules.progress_deadline_ms);
    if phase == Phase::RolledBack
        && let Some(deadline) = first_missed
    {
        metrics
            .rollback_delay_seconds
            .observe(seconds(now - deadline));
    }
}

/// `status.rollout` of `record` among `members`.
fn shown(
    record: &RolloutRecord,
    members: &[Member],
    rules: &Rules,
    now: i64,
    group_of: &dyn Fn(&str) -> String,
) -> RolloutStatus {
    let progress = &record.progress;
    let count = |f: &dyn Fn(&str) -> bool| -> i32 {
        let n = members.iter().filter(|m| f(&m.name)).count();
        i32::try_from(n).unwrap_or(i32::MAX)
    };
    let updating = count(&|c| progress.sent.contains_key(c) && !progress.done(c, rules, now));
    let succeeded = count(&|c| progress.succeeded(c, rules, now));
    let failed = count(&|c| progress.failed.contains_key(c));
    let waiting = count(&|c| !progress.sent.contains_key(c));
    // The group of the first cluster not done, in rollout order.
    let mut order: Vec<&Member> = members.iter().collect();
    order.sort_by(|a, b| (a.group, &a.name).cmp(&(b.group, &b.name)));
    let current_group = order
        .iter()
        .find(|m| !progress.done(&m.name, rules, now))
        .map(|m| group_of(&m.name))
        .filter(|g| !g.is_empty());
    RolloutStatus {
        revision: record.revision.clone(),
        generation: Some(record.generation),
        phase: format!("{:?}", progress.phase),
        step: i32::try_from(record.steps).unwrap_or(i32::MAX),
        current_group,
        updating,
        succeeded,
        failed,
        waiting,
        failed_clusters: progress
            .failed
            .iter()
            .take(MAX_NAMED_FAILURES)
            .map(|(cluster, reason)| RolloutFailure {
                cluster: cluster.clone(),
                reason: reason.clone(),
            })
            .collect(),
    }
}

/// The failed clusters with why, as one sentence (at most 5 named).
fn failures(record: &RolloutRecord) -> String {
    let failed = &record.progress.failed;
    let mut named: Vec<String> = failed
        .iter()
        .take(5)
        .map(|(c, why)| format!("{c} ({why})"))
        .collect();
    if failed.len() > 5 {
        named.push(format!("and {} more", failed.len() - 5));
    }
    named.join(", ")
}

/// `RolledBack` and `RolloutFailed`, as `shown` says.
fn set_conditions<K: PlacementKind>(
    status: &mut K::Status,
    shown: &RolloutStatus,
    generation: Option<i64>,
    now: &Time,
) {
    let phase = shown.phase.as_str();
    let failed_on = || {
        shown
            .failed_clusters
            .iter()
            .map(|f| format!("{} ({})", f.cluster, f.reason))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let rolled_back = if phase == "RolledBack" {
        Desired::new(
            ROLLED_BACK,
            Status::True,
            reasons::ROLLED_BACK,
            format!(
                "revision {} failed on {}; the clusters it reached are back on the last revision \
                 that succeeded until the spec changes",
                shown.revision,
                failed_on()
            ),
        )
    } else {
        Desired::new(
            ROLLED_BACK,
            Status::False,
            reasons::ROLLOUT_HEALTHY,
            format!("revision {} is {}", shown.revision, phase.to_lowercase()),
        )
    };
    let failed = if phase == "Failed" {
        Desired::new(
            ROLLOUT_FAILED,
            Status::True,
            reasons::ROLLOUT_FAILED,
            format!(
                "revision {} failed on {}; the clusters it reached keep it",
                shown.revision,
                failed_on()
            ),
        )
    } else {
        Desired::new(
            ROLLOUT_FAILED,
            Status::False,
            reasons::ROLLOUT_HEALTHY,
            format!("revision {} is {}", shown.revision, phase.to_lowercase()),
        )
    };
    let conditions = K::conditions(status);
    *conditions =
        accord_crds::conditions::merge(conditions, &[rolled_back, failed], generation, now);
}

/// The Events of a step: clusters sent the revision, the rollout's end.
fn notes(
    record: &RolloutRecord,
    before: Phase,
    newly_sent: &[String],
    group_of: &dyn Fn(&str) -> String,
) -> Vec<Note> {
    let mut notes = Vec::new();
    if !newly_sent.is_empty() {
        let mut groups: Vec<String> = newly_sent.iter().map(|c| group_of(c)).collect();
        groups.dedup();
        groups.retain(|g| !g.is_empty());
        let mut names: Vec<&str> = newly_sent.iter().take(10).map(String::as_str).collect();
        let more = newly_sent.len().saturating_sub(10);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        names.sort_unstable();
        let group = if groups.is_empty() {
            String::new()
        } else {
            format!(" (group {})", groups.join(", "))
        };
        notes.push(Note::normal(
            reasons::ROLLOUT_STEP,
            format!(
                "revision {} step {}: sent to {}{more}{group}",
                record.revision,
                record.steps,
                names.join(", ")
            ),
        ));
    }
    let phase = record.progress.phase;
    if phase != before {
        match phase {
            Phase::Succeeded => notes.push(Note::normal(
                reasons::ROLLOUT_SUCCEEDED,
                format!("revision {} succeeded in every cluster", record.revision),
            )),
            Phase::RolledBack => notes.push(Note::warning(
                reasons::ROLLED_BACK,
                format!(
                    "revision {} failed on {}; no other cluster gets it and those it reached \
                     go back to the last revision that succeeded",
                    record.revision,
                    failures(record)
                ),
            )),
            Phase::Failed => notes.push(Note::warning(
                reasons::ROLLOUT_FAILED,
                format!(
                    "revision {} failed on {}; no other cluster gets it{}",
                    record.revision,
                    failures(record),
                    if record.has_good {
                        " (autoRollback is off: those it reached keep it)"
                    } else {
                        " (no earlier revision succeeded to go back to)"
                    }
                ),
            )),
            Phase::Progressing | Phase::Paused => {}
        }
    }
    notes
}
