//! The step planner of a progressive rollout, written once for every kind that delivers
//! content: which clusters get the object's new revision now, judged only on reports of
//! that revision, and when the rollout has failed and what the clusters it reached go back
//! to.
//!
//! The planner is pure. Its input is the rules (strategy, concurrency, soak, deadline,
//! failures), each selected cluster with its group and what its agent last said about the
//! new revision, the progress kept in etcd between steps ([`Progress`]) and the time; its
//! output is the next progress (the clusters sent the new revision, with when; those
//! healthy on it, since when; those that failed, with why; the phase) and when to look
//! again. A hub replica that takes over reads the same progress and goes on from the same
//! step: nothing is counted from the replica's own clock but `now`.
//!
//! - `All`: every cluster at once (what every kind did before rollouts).
//! - `Progressive`: clusters in group order (then by name), at most `max_concurrency` of
//!   them updating (sent, not yet succeeded) at a time; with `canary`, the first group
//!   must succeed before any other cluster is sent.
//! - `ProgressivePerGroup`: group by group, at most `max_concurrency` of the group's
//!   clusters at a time (a percent counts the group); the next group starts once every
//!   cluster of this one succeeded or failed.
//!
//! A cluster succeeds once its reports for the new revision have said healthy for
//! `min_success` without an unhealthy report between; it fails when it has not been healthy within
//! `progress_deadline` of being sent (an unreachable cluster sends no report: it fails at
//! the deadline). More failures than `max_failures` stop the rollout: no other cluster is
//! sent the revision, and the clusters that were go back to the last good revision
//! (`RolledBack`) or stay (`Failed`, without `auto_rollback`).

use std::collections::{BTreeMap, BTreeSet};

use accord_crds::rollout::{CountOrPercent, Rollout, RolloutStrategy};
use accord_crds::summary::HasState;
use accord_crds::{PlacedStatus, PlacementState};
use serde::{Deserialize, Serialize};

use super::earliest;
use super::record::{Hold, ShareRecord};

/// How the clusters are stepped through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Every cluster at once.
    #[default]
    All,
    /// In group order, a bounded number updating at a time.
    Progressive,
    /// One group after another, a bounded number of the group updating at a time.
    ProgressivePerGroup,
}

/// A count or a percent of the clusters it is taken of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// This many.
    Count(u32),
    /// This percent of the clusters.
    Percent(u32),
}

impl Limit {
    /// How many clusters `self` lets through at once out of `of`: at least one (a rollout
    /// that lets none through never ends), a percent rounded up.
    pub fn concurrency(self, of: usize) -> usize {
        match self {
            Self::Count(n) => n as usize,
            Self::Percent(p) => (of * p as usize).div_ceil(100),
        }
        .max(1)
    }

    /// How many of `of` clusters may fail before the rollout stops: a percent rounded
    /// down (10 % of 5 clusters tolerates none).
    pub fn failures(self, of: usize) -> usize {
        match self {
            Self::Count(n) => n as usize,
            Self::Percent(p) => of * p as usize / 100,
        }
    }
}

/// The rules of one object's rollout, as its `spec.rollout` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// How the clusters are stepped through.
    pub strategy: Strategy,
    /// Clusters updating at once (per group for `ProgressivePerGroup`).
    pub max_concurrency: Limit,
    /// Failures tolerated, of all selected clusters.
    pub max_failures: Limit,
    /// How long a cluster must stay healthy on the new revision to count as succeeded,
    /// milliseconds.
    pub min_success_ms: i64,
    /// How long a cluster sent the new revision has to become healthy, milliseconds.
    pub progress_deadline_ms: i64,
    /// Holds between steps: no cluster is newly sent the revision.
    pub paused: bool,
    /// Whether a failed rollout takes the clusters it reached back to the last good
    /// revision.
    pub auto_rollback: bool,
    /// Whether the first group must succeed before any other cluster is sent the revision
    /// (`Progressive`; `ProgressivePerGroup` always waits for each group).
    pub canary: bool,
}

impl Default for Rules {
    fn default() -> Self {
        Self {
            strategy: Strategy::All,
            max_concurrency: Limit::Percent(100),
            max_failures: Limit::Count(0),
            min_success_ms: 0,
            progress_deadline_ms: 600_000,
            paused: false,
            auto_rollback: true,
            canary: false,
        }
    }
}

impl Rules {
    /// The rules `spec.rollout` sets (defaults for what it leaves unset; a value the CRD's
    /// rules refuse reads as its default).
    pub fn of(spec: &Rollout) -> Self {
        let limit = |v: Option<&k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
                     min: u32| {
            v.and_then(|v| accord_crds::rollout::count_or_percent(v, min))
                .map(|c| match c {
                    CountOrPercent::Count(n) => Limit::Count(n),
                    CountOrPercent::Percent(p) => Limit::Percent(p),
                })
        };
        let millis = |d: Option<&String>, default: i64| {
            d.and_then(|d| accord_crds::duration::parse(d).ok())
                .map_or(default, |d| {
                    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
                })
        };
        let defaults = Self::default();
        Self {
            strategy: match spec.strategy() {
                RolloutStrategy::All => Strategy::All,
                RolloutStrategy::Progressive => Strategy::Progressive,
                RolloutStrategy::ProgressivePerGroup => Strategy::ProgressivePerGroup,
            },
            max_concurrency: limit(spec.max_concurrency.as_ref(), 1)
                .unwrap_or(defaults.max_concurrency),
            max_failures: limit(spec.max_failures.as_ref(), 0).unwrap_or(defaults.max_failures),
            min_success_ms: millis(spec.min_success_time.as_ref(), defaults.min_success_ms),
            progress_deadline_ms: millis(
                spec.progress_deadline.as_ref(),
                defaults.progress_deadline_ms,
            )
            .max(1),
            paused: spec.paused.unwrap_or(false),
            auto_rollback: spec.auto_rollback.unwrap_or(true),
            canary: spec.canary.unwrap_or(false),
        }
    }
}

/// Each cluster's group (its place in the rollout's order, and the group's name) by
/// `spec.rollout.groups`: by the values of `byLabel` in order, or the first of `ordered`
/// that selects it; clusters in no group come last (named `""`). Without groups, one.
pub fn groups<'a>(
    spec: &Rollout,
    clusters: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
) -> BTreeMap<String, (usize, String)> {
    let clusters: Vec<(&str, &BTreeMap<String, String>)> = clusters.into_iter().collect();
    let groups = spec.groups.as_ref();
    if let Some(key) = groups.and_then(|g| g.by_label.as_ref()) {
        let values: BTreeSet<&str> = clusters
            .iter()
            .filter_map(|(_, labels)| labels.get(key).map(String::as_str))
            .collect();
        let index: BTreeMap<&str, usize> =
            values.iter().enumerate().map(|(i, v)| (*v, i)).collect();
        return clusters
            .iter()
            .map(|(name, labels)| {
                let group = match labels.get(key) {
                    Some(v) => (index[v.as_str()], v.clone()),
                    None => (values.len(), String::new()),
                };
                ((*name).to_owned(), group)
            })
            .collect();
    }
    let named = groups
        .and_then(|g| g.ordered.as_deref())
        .unwrap_or_default();
    clusters
        .iter()
        .map(|(name, labels)| {
            let group = named
                .iter()
                .enumerate()
                .find(|(_, g)| {
                    accord_common::selector::matches(&g.cluster_selector, labels).unwrap_or(false)
                })
                .map_or((named.len(), String::new()), |(i, g)| (i, g.name.clone()));
            ((*name).to_owned(), group)
        })
        .collect()
}

/// The revision of a spec: a hash of it without `rollout` (a change of the rollout's own
/// settings, `paused` say, is no new revision).
pub fn revision_of(spec: Option<&serde_json::Value>) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(without_rollout(spec).to_string().as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// A spec without its `rollout`: what a revision is (and what its history keeps).
pub fn without_rollout(spec: Option<&serde_json::Value>) -> serde_json::Value {
    let mut spec = spec.cloned().unwrap_or_default();
    if let Some(o) = spec.as_object_mut() {
        o.remove("rollout");
    }
    spec
}

/// A placed object's rollout as the hub keeps it between steps, in etcd
/// (`rollouts/<kind>/<ns>/<name>`), so that a replica taking over resumes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutRecord {
    /// The revision rolled out ([`revision_of`]).
    pub revision: String,
    /// The object's generation when the revision was first seen.
    pub generation: i64,
    /// When the rollout started, Unix milliseconds.
    pub started_unix_millis: i64,
    /// Where it is.
    pub progress: Progress,
    /// What each cluster ran of the last revision that succeeded (the rollback target),
    /// as its share of the record then.
    #[serde(default)]
    pub good: BTreeMap<String, ShareRecord>,
    /// What each cluster ran when the rollout started, as its share of the record then:
    /// what a cluster the rollout has not reached keeps (the last good revision, or a
    /// superseded one it was sent before this revision came).
    #[serde(default)]
    pub current: BTreeMap<String, ShareRecord>,
    /// Whether a revision succeeded before this one (without one, a failed rollout has
    /// nothing to go back to and stops as `Failed`).
    #[serde(default)]
    pub has_good: bool,
    /// Steps that sent the revision to more clusters.
    #[serde(default)]
    pub steps: u32,
    /// The revision's number in the object's history (1 for its first rollout).
    #[serde(default)]
    pub number: i64,
    /// The revision of [`Self::good`], when a rollout recorded it (content delivered
    /// before the object rolled out progressively has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub good_revision: Option<String>,
    /// The revision of each share of [`Self::current`], where known.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub current_revisions: BTreeMap<String, String>,
}

impl RolloutRecord {
    /// The rollout of `revision` (generation `generation`) starting at `now`, after the
    /// one kept before (`previous`, of another revision) and with `stored` the shares the
    /// clusters were last sent (none for a new object). It starts from its first step
    /// whatever the previous one did; the clusters it has not reached keep what they run.
    /// The rollback target is what the clusters run when the previous rollout succeeded (or
    /// there was none), else the previous one's target: a superseded revision that never
    /// succeeded everywhere is no rollback target.
    pub fn start(
        revision: String,
        generation: i64,
        previous: Option<&RolloutRecord>,
        stored: Option<&[ShareRecord]>,
        now: i64,
    ) -> Self {
        let running: BTreeMap<String, ShareRecord> = stored
            .unwrap_or_default()
            .iter()
            .filter(|s| s.places())
            .map(|s| (s.cluster.clone(), s.clone()))
            .collect();
        let (good, has_good, good_revision) = match previous {
            None => (running.clone(), stored.is_some(), None),
            Some(p) if p.progress.phase == Phase::Succeeded => {
                (running.clone(), true, Some(p.revision.clone()))
            }
            Some(p) => (p.good.clone(), p.has_good, p.good_revision.clone()),
        };
        let current_revisions = running
            .keys()
            .filter_map(|c| {
                let ran = previous.and_then(|p| p.runs(c))?;
                Some((c.clone(), ran.to_owned()))
            })
            .collect();
        Self {
            revision,
            generation,
            started_unix_millis: now,
            progress: Progress::default(),
            good,
            current: running,
            has_good,
            steps: 0,
            number: previous.map_or(0, |p| p.number) + 1,
            good_revision,
            current_revisions,
        }
    }

    /// Which revision `cluster` runs as [`Self::merge`] sends it: this one once the rollout
    /// reached it; the last good one after a rollback; else what it ran when the rollout
    /// started, or the last good one; `None` when it has none of these.
    fn source(&self, cluster: &str) -> Option<Source> {
        if self.progress.runs_new(cluster) {
            return Some(Source::New);
        }
        let taken_back =
            self.progress.phase == Phase::RolledBack && self.progress.sent.contains_key(cluster);
        if !taken_back && self.current.contains_key(cluster) {
            Some(Source::Current)
        } else {
            (self.has_good && self.good.contains_key(cluster)).then_some(Source::Good)
        }
    }

    /// The revision `cluster` runs as [`Self::merge`] sends it, where known.
    pub fn runs(&self, cluster: &str) -> Option<&str> {
        match self.source(cluster)? {
            Source::New => Some(&self.revision),
            Source::Current => self.current_revisions.get(cluster).map(String::as_str),
            Source::Good => self.good_revision.as_deref(),
        }
    }

    /// The shares to send: `target` (the decision for the new revision) for the clusters
    /// that run it and for shares that place nothing (holds and removals apply whatever
    /// the revision); for a cluster the rollout took back, the last good share; for the
    /// others what they ran when it started (or the last good share). A cluster with none
    /// of these waits for the rollout, held.
    pub fn merge(&self, target: &[ShareRecord]) -> Vec<ShareRecord> {
        target
            .iter()
            .map(|s| {
                if !s.places() {
                    return s.clone();
                }
                match self.source(&s.cluster) {
                    Some(Source::New) => s.clone(),
                    Some(Source::Current) => self.current[&s.cluster].clone(),
                    Some(Source::Good) => self.good[&s.cluster].clone(),
                    None => ShareRecord {
                        since: None,
                        cluster: s.cluster.clone(),
                        assignment: None,
                        held_reason: Some("awaiting its step of the rollout".to_owned()),
                        hold: Some(Hold::AwaitingRollout),
                    },
                }
            })
            .collect()
    }

    /// Takes `step`: its progress, counted as a step when it sent clusters; a rollback
    /// with nothing to go back to stops as `Failed`.
    pub fn advance(&mut self, step: &Step) {
        self.progress = step.progress.clone();
        if self.progress.phase == Phase::RolledBack && !self.has_good {
            self.progress.phase = Phase::Failed;
        }
        if !step.newly_sent.is_empty() {
            self.steps += 1;
        }
    }
}

/// Where the share a cluster is sent during a rollout comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// The revision rolled out.
    New,
    /// What the cluster ran when the rollout started ([`RolloutRecord::current`]).
    Current,
    /// The last revision that succeeded ([`RolloutRecord::good`]).
    Good,
}

/// What a cluster's agent last said about the new revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Heard {
    /// Nothing for this revision yet (no report, one for an older revision, or the agent
    /// is not connected): a stale healthy report of the old revision counts as this.
    Nothing,
    /// Healthy on the new revision, as the kind judges health.
    Healthy,
    /// On the new revision and not healthy, with why.
    Unhealthy(String),
}

/// What each cluster's line of `status` says of the revision its cluster was sent, the
/// status being the kind's own, computed against that revision's record and not cut
/// down to a summary: `healthy` lines (the kind's [`PlacementKind::healthy`]) are
/// [`Heard::Healthy`], lines in `Error`, `Conflict`, `Unavailable` or `TargetNotFound` are
/// [`Heard::Unhealthy`] with their message, as are `Synced` lines not healthy (applied,
/// not yet available), and the rest (`Pending`: nothing for this revision yet, the agent
/// not connected) [`Heard::Nothing`] until the deadline judges them.
///
/// [`PlacementKind::healthy`]: crate::controllers::placement::PlacementKind::healthy
pub fn heard<S: PlacedStatus>(
    status: &S,
    healthy: impl Fn(&S::Placement) -> bool,
) -> BTreeMap<String, Heard> {
    status
        .placements()
        .iter()
        .map(|line| {
            let heard = if healthy(line) {
                Heard::Healthy
            } else {
                match line.state() {
                    PlacementState::Synced => Heard::Unhealthy(
                        line.message()
                            .unwrap_or("applied, not healthy yet")
                            .to_owned(),
                    ),
                    PlacementState::Error
                    | PlacementState::Conflict
                    | PlacementState::Unavailable
                    | PlacementState::TargetNotFound => {
                        Heard::Unhealthy(line.message().unwrap_or_default().to_owned())
                    }
                    _ => Heard::Nothing,
                }
            };
            (line.cluster().to_owned(), heard)
        })
        .collect()
}

/// One selected cluster, as the planner sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The cluster's name.
    pub name: String,
    /// Its group's place in the rollout's order (0 first).
    pub group: usize,
    /// What its agent last said about the new revision.
    pub heard: Heard,
}

/// Where a rollout is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Phase {
    /// Clusters are being sent the revision, or soaking.
    #[default]
    Progressing,
    /// Held between steps by `paused`.
    Paused,
    /// Every cluster succeeded (or failed within `max_failures`).
    Succeeded,
    /// Stopped by failures; the clusters reached keep the revision (`auto_rollback` off).
    Failed,
    /// Stopped by failures; the clusters reached went back to the last good revision.
    RolledBack,
}

impl Phase {
    /// Whether the rollout is over (nothing more is sent until the spec changes).
    pub fn is_stopped(self) -> bool {
        matches!(self, Self::Failed | Self::RolledBack)
    }

    /// Whether the rollout ended, in success or not.
    pub fn has_ended(self) -> bool {
        self == Self::Succeeded || self.is_stopped()
    }
}

/// What the hub keeps of one revision's rollout between steps (in etcd, beside the
/// placements record), so that a replica taking over resumes it.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// The clusters sent the revision, with when (Unix milliseconds).
    #[serde(default)]
    pub sent: BTreeMap<String, i64>,
    /// The clusters healthy on the revision, since when (without an unhealthy report since).
    #[serde(default)]
    pub healthy_since: BTreeMap<String, i64>,
    /// The clusters that failed, with why.
    #[serde(default)]
    pub failed: BTreeMap<String, String>,
    /// Where the rollout is.
    #[serde(default)]
    pub phase: Phase,
}

impl Progress {
    /// Whether `cluster` should run the new revision now: sent it, and the rollout not
    /// rolled back. The others run the last good revision.
    pub fn runs_new(&self, cluster: &str) -> bool {
        self.phase != Phase::RolledBack && self.sent.contains_key(cluster)
    }

    /// Whether `cluster` has succeeded on the revision by `now`.
    pub fn succeeded(&self, cluster: &str, rules: &Rules, now: i64) -> bool {
        self.healthy_since
            .get(cluster)
            .is_some_and(|since| now - since >= rules.min_success_ms)
    }

    /// Whether `cluster` is done with the revision by `now`: succeeded or failed.
    pub fn done(&self, cluster: &str, rules: &Rules, now: i64) -> bool {
        self.failed.contains_key(cluster) || self.succeeded(cluster, rules, now)
    }

    /// The clusters sent the revision that are not done with it by `now`.
    pub fn updating<'a>(&'a self, rules: &'a Rules, now: i64) -> impl Iterator<Item = &'a str> {
        self.sent
            .keys()
            .map(String::as_str)
            .filter(move |c| !self.done(c, rules, now))
    }
}

/// The next progress of a rollout, and when to look again without news.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The progress to keep.
    pub progress: Progress,
    /// The clusters newly sent the revision by this step.
    pub newly_sent: Vec<String>,
    /// When a soak ends or a deadline passes (Unix milliseconds), if anything waits.
    pub recheck_at: Option<i64>,
}

/// The rollout's next step for `members` (every selected cluster) at `now`, from the
/// progress kept after the last one.
pub fn step(rules: &Rules, members: &[Member], kept: &Progress, now: i64) -> Step {
    let present: BTreeSet<&str> = members.iter().map(|m| m.name.as_str()).collect();
    let mut progress = kept.clone();
    // A cluster no longer selected is no longer part of the rollout.
    progress.sent.retain(|c, _| present.contains(c.as_str()));
    progress
        .healthy_since
        .retain(|c, _| present.contains(c.as_str()));
    progress.failed.retain(|c, _| present.contains(c.as_str()));
    if progress.phase.is_stopped() {
        return Step {
            progress,
            newly_sent: Vec::new(),
            recheck_at: None,
        };
    }

    // What the reports say of the clusters sent the revision.
    for m in members {
        let Some(&sent_at) = progress.sent.get(&m.name) else {
            continue;
        };
        match &m.heard {
            Heard::Healthy => {
                progress.healthy_since.entry(m.name.clone()).or_insert(now);
            }
            Heard::Unhealthy(_) => {
                progress.healthy_since.remove(&m.name);
            }
            // No news (a record rewritten for the next step is reported again a moment
            // later) breaks no soak.
            Heard::Nothing => {}
        }
        let late = now - sent_at >= rules.progress_deadline_ms;
        if late && !progress.healthy_since.contains_key(&m.name) {
            let why = match &m.heard {
                Heard::Unhealthy(why) => why.clone(),
                _ => "no healthy report for the revision".to_owned(),
            };
            progress.failed.entry(m.name.clone()).or_insert(format!(
                "not healthy within {}s: {why}",
                rules.progress_deadline_ms / 1000
            ));
        }
    }

    if progress.failed.len() > rules.max_failures.failures(members.len()) {
        progress.phase = if rules.auto_rollback {
            Phase::RolledBack
        } else {
            Phase::Failed
        };
        return Step {
            progress,
            newly_sent: Vec::new(),
            recheck_at: None,
        };
    }

    let newly_sent = if rules.paused {
        Vec::new()
    } else {
        admit(rules, members, &progress, now)
    };
    for c in &newly_sent {
        progress.sent.insert(c.clone(), now);
    }
    progress.phase = if members.iter().all(|m| progress.done(&m.name, rules, now)) {
        Phase::Succeeded
    } else if rules.paused {
        Phase::Paused
    } else {
        Phase::Progressing
    };
    let recheck_at = recheck(rules, &progress, now);
    Step {
        progress,
        newly_sent,
        recheck_at,
    }
}

/// The clusters sent the revision by this step.
fn admit(rules: &Rules, members: &[Member], progress: &Progress, now: i64) -> Vec<String> {
    let mut order: Vec<&Member> = members.iter().collect();
    order.sort_by(|a, b| (a.group, &a.name).cmp(&(b.group, &b.name)));
    let waiting = |m: &&Member| !progress.sent.contains_key(&m.name);
    let done = |m: &Member| progress.done(&m.name, rules, now);
    match rules.strategy {
        Strategy::All => order
            .into_iter()
            .filter(waiting)
            .map(|m| m.name.clone())
            .collect(),
        Strategy::Progressive => {
            let first = order.first().map_or(0, |m| m.group);
            let canary_pending = rules.canary && order.iter().any(|m| m.group == first && !done(m));
            let room = rules
                .max_concurrency
                .concurrency(members.len())
                .saturating_sub(progress.updating(rules, now).count());
            order
                .into_iter()
                .filter(|m| !canary_pending || m.group == first)
                .filter(waiting)
                .take(room)
                .map(|m| m.name.clone())
                .collect()
        }
        Strategy::ProgressivePerGroup => {
            let Some(group) = order.iter().find(|m| !done(m)).map(|m| m.group) else {
                return Vec::new();
            };
            let in_group: Vec<&Member> = order.into_iter().filter(|m| m.group == group).collect();
            let updating = in_group
                .iter()
                .filter(|m| progress.sent.contains_key(&m.name) && !done(m))
                .count();
            let room = rules
                .max_concurrency
                .concurrency(in_group.len())
                .saturating_sub(updating);
            in_group
                .into_iter()
                .filter(waiting)
                .take(room)
                .map(|m| m.name.clone())
                .collect()
        }
    }
}

/// When a soak ends or a deadline passes next.
fn recheck(rules: &Rules, progress: &Progress, now: i64) -> Option<i64> {
    let mut at = None;
    for (cluster, &sent_at) in &progress.sent {
        if progress.failed.contains_key(cluster) {
            continue;
        }
        match progress.healthy_since.get(cluster) {
            Some(since) if now - since < rules.min_success_ms => {
                at = earliest(at, since + rules.min_success_ms);
            }
            Some(_) => {}
            None => at = earliest(at, sent_at + rules.progress_deadline_ms),
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(groups: &[(&str, usize)]) -> Vec<Member> {
        groups
            .iter()
            .map(|(name, group)| Member {
                name: (*name).to_owned(),
                group: *group,
                heard: Heard::Nothing,
            })
            .collect()
    }

    fn hear(members: &mut [Member], name: &str, heard: Heard) {
        members.iter_mut().find(|m| m.name == name).unwrap().heard = heard;
    }

    fn per_group() -> Rules {
        Rules {
            strategy: Strategy::ProgressivePerGroup,
            max_concurrency: Limit::Percent(100),
            min_success_ms: 10_000,
            progress_deadline_ms: 20_000,
            ..Rules::default()
        }
    }

    #[test]
    fn all_sends_every_cluster_at_once() {
        let m = members(&[("a", 0), ("b", 1), ("c", 2)]);
        let s = step(&Rules::default(), &m, &Progress::default(), 0);
        assert_eq!(s.newly_sent, ["a", "b", "c"]);
        assert_eq!(s.progress.phase, Phase::Progressing);
    }

    #[test]
    fn groups_go_in_order_each_after_the_previous_ones_soak() {
        let rules = per_group();
        let mut m = members(&[("a", 0), ("b", 1), ("c", 1), ("d", 2)]);
        let s = step(&rules, &m, &Progress::default(), 0);
        assert_eq!(s.newly_sent, ["a"]);
        assert_eq!(s.recheck_at, Some(20_000), "the deadline");
        hear(&mut m, "a", Heard::Healthy);
        let s = step(&rules, &m, &s.progress, 1_000);
        assert!(s.newly_sent.is_empty(), "soaking");
        assert_eq!(s.recheck_at, Some(11_000), "the soak's end");
        let s = step(&rules, &m, &s.progress, 11_000);
        assert_eq!(s.newly_sent, ["b", "c"]);
        hear(&mut m, "b", Heard::Healthy);
        hear(&mut m, "c", Heard::Healthy);
        let s = step(&rules, &m, &s.progress, 12_000);
        let s = step(&rules, &m, &s.progress, 22_000);
        assert_eq!(s.newly_sent, ["d"]);
        hear(&mut m, "d", Heard::Healthy);
        let s = step(&rules, &m, &s.progress, 23_000);
        assert_eq!(s.progress.phase, Phase::Progressing);
        let s = step(&rules, &m, &s.progress, 33_000);
        assert_eq!(s.progress.phase, Phase::Succeeded);
        assert_eq!(s.recheck_at, None);
    }

    #[test]
    fn a_stale_or_broken_first_group_rolls_back_at_the_deadline() {
        let rules = per_group();
        let mut m = members(&[("a", 0), ("b", 0), ("c", 1)]);
        let s = step(&rules, &m, &Progress::default(), 0);
        assert_eq!(s.newly_sent, ["a", "b"]);
        hear(&mut m, "a", Heard::Unhealthy("0/3 available".into()));
        let s = step(&rules, &m, &s.progress, 19_999);
        assert_eq!(s.progress.phase, Phase::Progressing);
        let s = step(&rules, &m, &s.progress, 20_000);
        assert_eq!(s.progress.phase, Phase::RolledBack);
        assert_eq!(
            s.progress.failed.keys().collect::<Vec<_>>(),
            ["a", "b"],
            "{:?}",
            s.progress.failed
        );
        assert!(s.progress.failed["a"].contains("0/3 available"));
        assert!(!s.progress.runs_new("a") && !s.progress.runs_new("c"));
        // Stopped: nothing more is sent, whatever the reports say now.
        hear(&mut m, "a", Heard::Healthy);
        let again = step(&rules, &m, &s.progress, 60_000);
        assert!(again.newly_sent.is_empty());
        assert_eq!(again.progress.phase, Phase::RolledBack);
    }

    #[test]
    fn without_auto_rollback_the_clusters_reached_keep_the_revision() {
        let rules = Rules {
            auto_rollback: false,
            ..per_group()
        };
        let m = members(&[("a", 0), ("b", 1)]);
        let s = step(&rules, &m, &Progress::default(), 0);
        let s = step(&rules, &m, &s.progress, 20_000);
        assert_eq!(s.progress.phase, Phase::Failed);
        assert!(s.progress.runs_new("a") && !s.progress.runs_new("b"));
    }

    #[test]
    fn paused_holds_between_steps_and_resuming_goes_on() {
        let mut rules = per_group();
        let mut m = members(&[("a", 0), ("b", 1)]);
        let s = step(&rules, &m, &Progress::default(), 0);
        hear(&mut m, "a", Heard::Healthy);
        rules.paused = true;
        let s = step(&rules, &m, &s.progress, 1_000);
        let s = step(&rules, &m, &s.progress, 30_000);
        assert!(s.newly_sent.is_empty());
        assert_eq!(s.progress.phase, Phase::Paused);
        rules.paused = false;
        let s = step(&rules, &m, &s.progress, 31_000);
        assert_eq!(s.newly_sent, ["b"]);
    }

    #[test]
    fn a_healthy_break_restarts_the_soak_and_a_canary_goes_first() {
        let rules = Rules {
            strategy: Strategy::Progressive,
            max_concurrency: Limit::Count(2),
            canary: true,
            ..per_group()
        };
        let mut m = members(&[("a", 0), ("b", 1), ("c", 1)]);
        let s = step(&rules, &m, &Progress::default(), 0);
        assert_eq!(s.newly_sent, ["a"], "the canary alone");
        hear(&mut m, "a", Heard::Healthy);
        let s = step(&rules, &m, &s.progress, 1_000);
        hear(&mut m, "a", Heard::Unhealthy("restarting".into()));
        let s = step(&rules, &m, &s.progress, 5_000);
        hear(&mut m, "a", Heard::Healthy);
        let s = step(&rules, &m, &s.progress, 6_000);
        let s = step(&rules, &m, &s.progress, 12_000);
        assert!(s.newly_sent.is_empty(), "soaking since 6 s");
        let s = step(&rules, &m, &s.progress, 16_000);
        assert_eq!(s.newly_sent, ["b", "c"]);
    }

    #[test]
    fn no_news_breaks_no_soak() {
        let rules = per_group();
        let mut m = members(&[("a", 0), ("b", 1)]);
        let s = step(&rules, &m, &Progress::default(), 0);
        hear(&mut m, "a", Heard::Healthy);
        let s = step(&rules, &m, &s.progress, 1_000);
        hear(&mut m, "a", Heard::Nothing);
        let s = step(&rules, &m, &s.progress, 2_000);
        let s = step(&rules, &m, &s.progress, 11_000);
        assert_eq!(s.newly_sent, ["b"], "soaked since 1 s");
    }

    #[test]
    fn the_progress_survives_a_round_trip_and_limits_round_as_documented() {
        let rules = per_group();
        let m = members(&[("a", 0)]);
        let s = step(&rules, &m, &Progress::default(), 5);
        let json = serde_json::to_value(&s.progress).unwrap();
        assert_eq!(json["sent"]["a"], 5);
        let back: Progress = serde_json::from_value(json).unwrap();
        assert_eq!(back, s.progress);
        assert_eq!(Limit::Percent(10).concurrency(5), 1);
        assert_eq!(Limit::Percent(34).concurrency(3), 2);
        assert_eq!(Limit::Count(0).concurrency(3), 1);
        assert_eq!(Limit::Percent(10).failures(5), 0);
        assert_eq!(Limit::Percent(50).failures(5), 2);
    }

    fn share(cluster: &str, version: &str) -> ShareRecord {
        ShareRecord {
            since: None,
            cluster: cluster.to_owned(),
            assignment: Some(
                accord_common::distribution::AssignmentSpec::FederatedResource(
                    accord_common::distribution::FederatedResourceSpec {
                        namespace: version.to_owned(),
                        ..Default::default()
                    },
                ),
            ),
            held_reason: None,
            hold: None,
        }
    }

    fn versions(shares: &[ShareRecord]) -> Vec<(String, Option<String>)> {
        shares
            .iter()
            .map(|s| {
                let v = match &s.assignment {
                    Some(accord_common::distribution::AssignmentSpec::FederatedResource(f)) => {
                        Some(f.namespace.clone())
                    }
                    _ => None,
                };
                (s.cluster.clone(), v)
            })
            .collect()
    }

    #[test]
    fn the_clusters_not_reached_keep_the_last_good_share_and_a_new_object_waits() {
        let stored = [share("a", "v1"), share("b", "v1")];
        let target = [share("a", "v2"), share("b", "v2"), share("c", "v2")];
        let mut r = RolloutRecord::start("rev2".into(), 2, None, Some(&stored), 0);
        r.progress.sent.insert("a".into(), 0);
        let merged = r.merge(&target);
        assert_eq!(
            versions(&merged),
            [
                ("a".into(), Some("v2".into())),
                ("b".into(), Some("v1".into())),
                ("c".into(), None)
            ]
        );
        assert_eq!(merged[2].hold, Some(Hold::AwaitingRollout));
        // Taken back: every cluster on the good share again.
        r.progress.phase = Phase::RolledBack;
        assert_eq!(
            versions(&r.merge(&target))[0],
            ("a".into(), Some("v1".into()))
        );
        // A new object has nothing to go back to: a rollback stops as Failed.
        let mut first = RolloutRecord::start("rev1".into(), 1, None, None, 0);
        let step = Step {
            progress: Progress {
                phase: Phase::RolledBack,
                ..Progress::default()
            },
            newly_sent: Vec::new(),
            recheck_at: None,
        };
        first.advance(&step);
        assert_eq!(first.progress.phase, Phase::Failed);
    }

    #[test]
    fn a_new_revision_starts_from_its_first_step_and_its_rollback_target_succeeded() {
        let stored = [share("a", "v2"), share("b", "v1")];
        let target = [share("a", "v3"), share("b", "v3")];
        let mut rolling = RolloutRecord::start(
            "rev2".into(),
            2,
            None,
            Some(&[share("a", "v1"), share("b", "v1")]),
            0,
        );
        rolling.progress.sent.insert("a".into(), 0);
        // Superseded while rolling out: nothing is sent v3 yet, a keeps the superseded v2
        // until reached, and the rollback target stays v1.
        let mut next = RolloutRecord::start("rev3".into(), 3, Some(&rolling), Some(&stored), 5);
        assert!(next.progress.sent.is_empty());
        assert_eq!(
            versions(&next.merge(&target)),
            [
                ("a".into(), Some("v2".into())),
                ("b".into(), Some("v1".into()))
            ]
        );
        // The lines name what runs: a the superseded rev2; b and the good v1 came before
        // any rollout, unnamed.
        assert_eq!((next.runs("a"), next.runs("b")), (Some("rev2"), None));
        next.progress.sent.insert("a".into(), 5);
        next.progress.phase = Phase::RolledBack;
        assert_eq!(
            versions(&next.merge(&target))[0],
            ("a".into(), Some("v1".into()))
        );
        assert_eq!(next.runs("a"), None);
        // After a success, what runs is the rollback target.
        rolling.progress.phase = Phase::Succeeded;
        let mut next = RolloutRecord::start("rev3".into(), 3, Some(&rolling), Some(&stored), 5);
        assert_eq!(next.good["a"], share("a", "v2"));
        assert!(next.progress.sent.is_empty());
        assert_eq!(next.runs("a"), Some("rev2"));
        next.progress.sent.insert("a".into(), 5);
        assert_eq!(next.runs("a"), Some("rev3"));
        next.progress.phase = Phase::RolledBack;
        assert_eq!(next.runs("a"), Some("rev2"));
        // Kept in etcd between steps, read back the same.
        let json = serde_json::to_string(&next).unwrap();
        assert_eq!(serde_json::from_str::<RolloutRecord>(&json).unwrap(), next);
    }

    /// The progress is written beside the placements record in one etcd transaction; at
    /// 10,000 clusters its two share maps alone would pass etcd's request limit
    /// (1.5 MiB by default) uncompressed.
    #[test]
    fn a_rollout_of_ten_thousand_clusters_is_kept_within_etcds_request_limit() {
        let stored: Vec<ShareRecord> = (0..10_000)
            .map(|i| share(&format!("cluster-{i:05}"), "v1"))
            .collect();
        let mut r = RolloutRecord::start("rev2".into(), 2, None, Some(&stored), 0);
        for s in stored.iter().step_by(2) {
            r.progress.sent.insert(s.cluster.clone(), 1_700_000_000_000);
        }
        assert!(serde_json::to_vec(&r).unwrap().len() > 1_500_000);
        let value = crate::store::encode_large(&r).unwrap();
        assert!(value.len() < 256 * 1024, "{} bytes", value.len());
        let json = accord_common::compress::gunzip(&value).unwrap();
        assert_eq!(serde_json::from_slice::<RolloutRecord>(&json).unwrap(), r);
    }

    #[test]
    fn rules_and_groups_read_as_the_spec_says() {
        let spec: Rollout = serde_json::from_value(serde_json::json!({
            "strategy": "ProgressivePerGroup", "groups": {"byLabel": "ring"},
            "maxConcurrency": "50%", "maxFailures": 1, "minSuccessTime": "1m",
            "progressDeadline": "90s", "paused": true
        }))
        .unwrap();
        let rules = Rules::of(&spec);
        assert_eq!(rules.strategy, Strategy::ProgressivePerGroup);
        assert_eq!(rules.max_concurrency, Limit::Percent(50));
        assert_eq!(rules.max_failures, Limit::Count(1));
        assert_eq!(
            (rules.min_success_ms, rules.progress_deadline_ms),
            (60_000, 90_000)
        );
        assert!(rules.paused && rules.auto_rollback);
        let labels = |ring: Option<&str>| -> BTreeMap<String, String> {
            ring.map(|r| [("ring".to_owned(), r.to_owned())].into())
                .unwrap_or_default()
        };
        let (a, b, c) = (labels(Some("1")), labels(Some("0")), labels(None));
        let g = groups(&spec, [("a", &a), ("b", &b), ("c", &c)]);
        assert_eq!(g["b"], (0, "0".to_owned()));
        assert_eq!(g["a"], (1, "1".to_owned()));
        assert_eq!(g["c"], (2, String::new()), "no label: last");
        let ordered: Rollout = serde_json::from_value(serde_json::json!({
            "groups": {"ordered": [
                {"name": "canary", "clusterSelector": {"matchLabels": {"ring": "1"}}},
                {"name": "rest", "clusterSelector": {}}]}
        }))
        .unwrap();
        let g = groups(&ordered, [("a", &a), ("b", &b)]);
        assert_eq!((g["a"].0, g["b"].0), (0, 1));
        assert_eq!(
            revision_of(Some(
                &serde_json::json!({"x": 1, "rollout": {"paused": true}})
            )),
            revision_of(Some(&serde_json::json!({"x": 1}))),
            "rollout alone is no revision"
        );
        assert_ne!(
            revision_of(Some(&serde_json::json!({"x": 1}))),
            revision_of(Some(&serde_json::json!({"x": 2})))
        );
    }
}
