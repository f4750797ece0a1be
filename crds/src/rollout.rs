//! `spec.rollout` and `status.rollout`: how a change of the delivered content reaches the
//! selected clusters, the same type in every kind that delivers content
//! (FederatedResource, FederatedKafkaTopic, FederatedKafkaUser, PrometheusFederation).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::messages;
use crate::validate::ValidationErrors;

/// Most named groups a rollout may list.
pub const MAX_ROLLOUT_GROUPS: usize = 10;
/// Largest count `maxConcurrency` and `maxFailures` take.
pub const MAX_ROLLOUT_COUNT: i32 = 10_000;
/// Most failing clusters `status.rollout` names.
pub const MAX_NAMED_FAILURES: usize = 20;

const CONCURRENCY_RULE: &str =
    "type(self) == int ? (self >= 1 && self <= 10000) : self.matches('^([1-9][0-9]?|100)%$')";
const FAILURES_RULE: &str =
    "type(self) == int ? (self >= 0 && self <= 10000) : self.matches('^([0-9]|[1-9][0-9]|100)%$')";
const DURATION_RULE: &str = "self.matches('^([0-9]+(ms|s|m|h))+$')";

/// How a change of the object's content reaches its clusters. Unset, or `strategy: All`:
/// every selected cluster at once. A change of `spec.rollout` alone is not a new revision.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("!has(self.strategy) || self.strategy != 'ProgressivePerGroup' || has(self.groups)").message(messages::ROLLOUT_PER_GROUP_NEEDS_GROUPS))]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// `All` (the default: every cluster at once), `Progressive` (in group order, at most
    /// `maxConcurrency` clusters updating at a time) or `ProgressivePerGroup` (one group
    /// after another, at most `maxConcurrency` of the group at a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RolloutStrategy>,
    /// The clusters' groups, in rollout order: by the values of a ManagedCluster label
    /// (`byLabel`) or an ordered list of named groups (`ordered`). Without it, one group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<RolloutGroups>,
    /// With `Progressive`: the first group is a canary that must succeed before any other
    /// cluster gets the revision (`ProgressivePerGroup` waits for every group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<bool>,
    /// Clusters updating at once (sent the revision, not yet succeeded or failed): a count
    /// (1 to 10,000) or a percent (`25%`, rounded up) of the selected clusters, or of the
    /// group with `ProgressivePerGroup`. Default 100%.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(CONCURRENCY_RULE).message(messages::ROLLOUT_CONCURRENCY))]
    pub max_concurrency: Option<IntOrString>,
    /// Clusters that may fail before the rollout stops: a count (0 to 10,000) or a percent
    /// of the selected clusters (rounded down). Default 0: the first failure stops it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(FAILURES_RULE).message(messages::ROLLOUT_FAILURES))]
    pub max_failures: Option<IntOrString>,
    /// How long a cluster must stay healthy on the new revision to count as succeeded
    /// before the next clusters get it (`30s`, `5m`). Default 0s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(DURATION_RULE).message(messages::DURATION_FORMAT))]
    pub min_success_time: Option<String>,
    /// How long a cluster sent the new revision has to become healthy on it before it
    /// counts as failed (an unreachable cluster fails then too). Default 10m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(DURATION_RULE).message(messages::DURATION_FORMAT))]
    #[x_kube(validation = Rule::new("!self.matches('^([0-9]+(ms|s|m|h))+$') || duration(self) > duration('0s')").message(messages::ROLLOUT_DEADLINE_POSITIVE))]
    pub progress_deadline: Option<String>,
    /// Holds the rollout between steps: no further cluster gets the revision until it is
    /// unset (clusters already sent keep it and are judged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Whether a rollout stopped by failures takes the clusters it reached back to the last
    /// revision that succeeded (default true). With false they keep the failing revision
    /// and the object says `RolloutFailed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_rollback: Option<bool>,
}

/// How the clusters are stepped through.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RolloutStrategy {
    /// Every cluster at once.
    All,
    /// In group order, `maxConcurrency` updating at a time.
    Progressive,
    /// One group after another.
    ProgressivePerGroup,
}

/// How the clusters are grouped: exactly one of `byLabel` and `ordered`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("has(self.byLabel) != has(self.ordered)").message(messages::ROLLOUT_GROUPS_XOR))]
#[serde(rename_all = "camelCase")]
pub struct RolloutGroups {
    /// Groups by the value of this ManagedCluster label, in the values' order (`ring: 0`,
    /// `ring: 1`, …); clusters without the label come last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 317))]
    pub by_label: Option<String>,
    /// Named groups in rollout order, each a ManagedCluster label selector; a cluster
    /// belongs to the first group that selects it, clusters no group selects come last.
    /// At most 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10))]
    #[x_kube(validation = Rule::new("self.all(g, self.exists_one(h, h.name == g.name))").message(messages::ROLLOUT_GROUP_NAMES_UNIQUE))]
    pub ordered: Option<Vec<RolloutGroup>>,
}

/// A named group of clusters.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutGroup {
    /// The group's name, shown in the status and Events.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// The ManagedClusters of the group.
    pub cluster_selector: LabelSelector,
}

/// Where a rollout is, as `status.rollout` shows it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The revision rolled out: a hash of the spec without `spec.rollout`.
    pub revision: String,
    /// The object's generation when the revision was first seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::bounds::MAX_GENERATION))]
    pub generation: Option<i64>,
    /// `Progressing`, `Paused`, `Succeeded`, `Failed` or `RolledBack`.
    pub phase: String,
    /// Steps taken: how many times more clusters were sent the revision.
    #[schemars(range(min = 0, max = crate::bounds::MAX_STATUS_COUNT))]
    pub step: i32,
    /// The group being rolled out (its name, or the label value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_group: Option<String>,
    /// Clusters sent the revision and not done with it.
    #[schemars(range(min = 0, max = crate::bounds::MAX_STATUS_COUNT))]
    pub updating: i32,
    /// Clusters that succeeded on the revision.
    #[schemars(range(min = 0, max = crate::bounds::MAX_STATUS_COUNT))]
    pub succeeded: i32,
    /// Clusters that failed on it.
    #[schemars(range(min = 0, max = crate::bounds::MAX_STATUS_COUNT))]
    pub failed: i32,
    /// Clusters not sent it yet.
    #[schemars(range(min = 0, max = crate::bounds::MAX_STATUS_COUNT))]
    pub waiting: i32,
    /// At most 20 failed clusters, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub failed_clusters: Vec<RolloutFailure>,
}

/// One cluster that failed a rollout.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutFailure {
    /// The cluster.
    pub cluster: String,
    /// Why.
    pub reason: String,
}

impl Rollout {
    /// The strategy (`All` when unset).
    pub fn strategy(&self) -> RolloutStrategy {
        self.strategy.unwrap_or(RolloutStrategy::All)
    }

    /// Whether clusters are stepped through (not `All`).
    pub fn is_progressive(&self) -> bool {
        self.strategy() != RolloutStrategy::All
    }
}

/// A count or a percent of a limit, read from `maxConcurrency` or `maxFailures`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountOrPercent {
    /// This many.
    Count(u32),
    /// This percent.
    Percent(u32),
}

/// Reads `value` as a count or a percent within `min..=10,000` / `min..=100%`.
pub fn count_or_percent(value: &IntOrString, min: u32) -> Option<CountOrPercent> {
    match value {
        IntOrString::Int(n) => u32::try_from(*n)
            .ok()
            .filter(|n| (min..=MAX_ROLLOUT_COUNT as u32).contains(n))
            .map(CountOrPercent::Count),
        IntOrString::String(s) => {
            let digits = s.strip_suffix('%')?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 3
            {
                return None;
            }
            let p: u32 = digits.parse().ok()?;
            (min..=100)
                .contains(&p)
                .then_some(CountOrPercent::Percent(p))
        }
    }
}

/// The Rust side of the CRD's rules on `spec.rollout`.
pub(crate) fn check_rollout(errs: &mut ValidationErrors, rollout: Option<&Rollout>) {
    let Some(r) = rollout else {
        return;
    };
    errs.check(
        r.strategy() != RolloutStrategy::ProgressivePerGroup || r.groups.is_some(),
        "spec.rollout",
        messages::ROLLOUT_PER_GROUP_NEEDS_GROUPS,
    );
    if let Some(groups) = &r.groups {
        errs.check(
            groups.by_label.is_some() != groups.ordered.is_some(),
            "spec.rollout.groups",
            messages::ROLLOUT_GROUPS_XOR,
        );
        let mut names = std::collections::BTreeSet::new();
        errs.check(
            groups
                .ordered
                .iter()
                .flatten()
                .all(|g| names.insert(g.name.as_str())),
            "spec.rollout.groups.ordered",
            messages::ROLLOUT_GROUP_NAMES_UNIQUE,
        );
    }
    if let Some(v) = &r.max_concurrency {
        errs.check(
            count_or_percent(v, 1).is_some(),
            "spec.rollout.maxConcurrency",
            messages::ROLLOUT_CONCURRENCY,
        );
    }
    if let Some(v) = &r.max_failures {
        errs.check(
            count_or_percent(v, 0).is_some(),
            "spec.rollout.maxFailures",
            messages::ROLLOUT_FAILURES,
        );
    }
    if let Some(d) = &r.min_success_time {
        errs.check(
            crate::duration::parse(d).is_ok(),
            "spec.rollout.minSuccessTime",
            messages::DURATION_FORMAT,
        );
    }
    if let Some(d) = &r.progress_deadline {
        let parsed = crate::duration::parse(d);
        errs.check(
            parsed.is_ok(),
            "spec.rollout.progressDeadline",
            messages::DURATION_FORMAT,
        );
        errs.check(
            parsed.map_or(true, |d| !d.is_zero()),
            "spec.rollout.progressDeadline",
            messages::ROLLOUT_DEADLINE_POSITIVE,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_percents_are_read_within_their_bounds() {
        let s = |v: &str| IntOrString::String(v.to_owned());
        assert_eq!(
            count_or_percent(&IntOrString::Int(3), 1),
            Some(CountOrPercent::Count(3))
        );
        assert_eq!(count_or_percent(&IntOrString::Int(0), 1), None);
        assert_eq!(
            count_or_percent(&IntOrString::Int(0), 0),
            Some(CountOrPercent::Count(0))
        );
        assert_eq!(count_or_percent(&IntOrString::Int(10_001), 0), None);
        assert_eq!(
            count_or_percent(&s("25%"), 1),
            Some(CountOrPercent::Percent(25))
        );
        assert_eq!(count_or_percent(&s("0%"), 1), None);
        assert_eq!(count_or_percent(&s("101%"), 0), None);
        assert_eq!(count_or_percent(&s("25"), 0), None);
        assert_eq!(count_or_percent(&s("-5%"), 0), None);
    }
}
