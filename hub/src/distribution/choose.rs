//! Which of the clusters `spec.placement` selects an object is placed in, the same for
//! every kind ([`choose`]), and why each other cluster of the fleet holds no placement
//! ([`explain`]).
//!
//! The filters and scores, in order (docs/architecture.md "Placement" says the same):
//! 1. **Selection**: `clusters` (names) or `clusterSelector` (labels), [`select_clusters`].
//! 2. **Preferences**: the first group with enough eligible clusters (`numberOfClusters`,
//!    or one); when none has enough, the first with any; when none has any, the first.
//! 3. **Eligibility**, only where the placement chooses (`preferences`, `numberOfClusters`
//!    or `spread`): available, not drained, no taint the object does not tolerate
//!    (NoSchedule, NoExecute; [`taints::judge`]).
//! 4. **Spread**: the eligible clusters grouped by the label's value; at most `maxGroups`
//!    groups (those placed in first, then those with the most eligible clusters, then by
//!    value); the first `minGroups` groups get one cluster each before any gets a second.
//! 5. **Count**: clusters placed before first (a placed cluster stays while it is
//!    eligible), then new ones, each to the group with the fewest so far, untainted before
//!    PreferNoSchedule-tainted, then by name; `numberOfClusters` of them (all without it).
//!
//! Without `preferences`, `numberOfClusters` and `spread` every selected cluster is kept
//! and the taints act on its share afterwards ([`taints::hold_tainted`]): a cluster that
//! holds a placement keeps it under NoSchedule and the drain switch, and a cluster whose
//! agent is away gets its placement when it returns.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet};

use accord_crds::{ClusterPlacement, LeftOut, LeftOutReason, SelectionSummary};

use super::record::{Hold, ShareRecord};
use super::select::{Clusters, SelectedCluster, SelectorError, matches, select_clusters};
use super::taints::{self, Verdict};

/// The clusters an object is placed in, and why the selected ones that are not were left
/// out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Choice {
    /// The clusters chosen, in the selection's order.
    pub selected: Vec<SelectedCluster>,
    /// Selected clusters (or named ones that do not exist) left out, each with why.
    pub left_out: Vec<LeftCluster>,
    /// ManagedClusters `spec.placement` does not select (counted, not named: at 10,000
    /// clusters that is most of the fleet).
    pub not_selected: usize,
    /// A constraint the fleet cannot meet now, in words: nothing new is placed.
    pub unsatisfied: Option<String>,
}

/// One cluster left out by the choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftCluster {
    /// Its name.
    pub cluster: String,
    /// Why.
    pub reason: LeftOutReason,
    /// The taint, the group used, or the spread label.
    pub detail: Option<String>,
}

/// Why a cluster cannot be chosen now, or `Ok(avoid)`: it can (last, when `avoid`).
type Eligibility = Result<bool, (LeftOutReason, Option<String>)>;

/// Whether `name` may be chosen for an object with `placement`'s tolerations.
fn eligibility(
    fleet: &Clusters,
    name: &str,
    placement: &ClusterPlacement,
    holds: bool,
    now_unix: i64,
) -> Eligibility {
    let Some(info) = fleet.get(name) else {
        return Err((LeftOutReason::NotFound, None));
    };
    if !info.available {
        return Err((LeftOutReason::Unavailable, None));
    }
    let judged = taints::judge(info, &placement.tolerations, holds, now_unix);
    match judged.verdict {
        Verdict::Eligible => Ok(false),
        Verdict::Avoid(_) => Ok(true),
        Verdict::Held(Hold::Unschedulable, _) => Err((LeftOutReason::Unschedulable, None)),
        Verdict::Held(_, _) => Err((LeftOutReason::Tainted, judged.taint)),
    }
}

/// The clusters `placement` places an object in among `fleet` (`placed_before`: where its
/// previous decision placed it).
pub fn choose(
    placement: &ClusterPlacement,
    fleet: &Clusters,
    placed_before: &dyn Fn(&str) -> bool,
    now_unix: i64,
) -> Result<Choice, SelectorError> {
    let base = select_clusters(placement, fleet)?;
    let mut choice = Choice {
        not_selected: fleet.len() - base.iter().filter(|c| c.known).count(),
        ..Choice::default()
    };
    if !placement.chooses() {
        choice.selected = base;
        return Ok(choice);
    }
    let mut pool: Vec<&str> = Vec::with_capacity(base.len());
    for c in &base {
        if c.known {
            pool.push(&c.name);
        } else {
            choice
                .left_out
                .push(left(&c.name, LeftOutReason::NotFound, None));
        }
    }
    let judged: HashMap<&str, Eligibility> = pool
        .iter()
        .map(|n| {
            let e = eligibility(fleet, n, placement, placed_before(n), now_unix);
            (*n, e)
        })
        .collect();
    let need = placement
        .number_of_clusters
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(1)
        .max(1);
    if !placement.preferences.is_empty() {
        pool = prefer(placement, fleet, pool, &judged, need, &mut choice)?;
    }
    let chosen: HashSet<&str> =
        if placement.number_of_clusters.is_none() && placement.spread.is_none() {
            pool.iter().copied().collect()
        } else {
            count_and_spread(placement, fleet, &pool, &judged, placed_before, &mut choice)
        };
    let keep: Vec<bool> = base
        .iter()
        .map(|c| chosen.contains(c.name.as_str()))
        .collect();
    drop(chosen);
    choice.selected = base
        .into_iter()
        .zip(keep)
        .filter_map(|(c, keep)| keep.then_some(c))
        .collect();
    Ok(choice)
}

fn left(cluster: &str, reason: LeftOutReason, detail: Option<String>) -> LeftCluster {
    LeftCluster {
        cluster: cluster.to_owned(),
        reason,
        detail,
    }
}

/// The clusters of the preference group used; the others go to `choice`.
fn prefer<'a>(
    placement: &ClusterPlacement,
    fleet: &Clusters,
    pool: Vec<&'a str>,
    judged: &HashMap<&str, Eligibility>,
    need: usize,
    choice: &mut Choice,
) -> Result<Vec<&'a str>, SelectorError> {
    let mut groups: Vec<HashSet<&str>> = Vec::with_capacity(placement.preferences.len());
    for (i, preference) in placement.preferences.iter().enumerate() {
        let field = format!("spec.placement.preferences[{i}].clusterSelector");
        let mut members = HashSet::new();
        for name in &pool {
            let labels = fleet.get(*name).map(|c| &c.labels);
            if matches(
                &preference.cluster_selector,
                labels.unwrap_or(&BTreeMap::new()),
                &field,
            )? {
                members.insert(*name);
            }
        }
        groups.push(members);
    }
    let eligible = |g: &HashSet<&str>| g.iter().filter(|n| judged[*n].is_ok()).count();
    let counts: Vec<usize> = groups.iter().map(eligible).collect();
    let used = counts
        .iter()
        .position(|c| *c >= need)
        .or_else(|| counts.iter().position(|c| *c > 0))
        .unwrap_or(0);
    let used_name = placement.preferences[used]
        .name
        .clone()
        .unwrap_or_else(|| format!("preferences[{used}]"));
    let mut kept = Vec::with_capacity(groups[used].len());
    for name in pool {
        if groups[used].contains(name) {
            kept.push(name);
        } else if !groups.iter().any(|g| g.contains(name)) {
            choice.not_selected += 1;
        } else {
            let (reason, detail) = match &judged[name] {
                Err((reason, detail)) => (*reason, detail.clone()),
                Ok(_) => (
                    LeftOutReason::FallbackNotReached,
                    Some(format!("group {used_name} is used")),
                ),
            };
            choice.left_out.push(left(name, reason, detail));
        }
    }
    Ok(kept)
}

/// Chooses among `pool` by `spread` and `numberOfClusters`; the others go to `choice`.
fn count_and_spread<'a>(
    placement: &ClusterPlacement,
    fleet: &Clusters,
    pool: &[&'a str],
    judged: &HashMap<&str, Eligibility>,
    placed_before: &dyn Fn(&str) -> bool,
    choice: &mut Choice,
) -> HashSet<&'a str> {
    let spread = placement.spread.as_ref();
    let by_label = spread.map(|s| s.by_label.as_str());
    // Each group's candidates: (not placed before, avoided, name), best first.
    let mut groups: BTreeMap<&str, Vec<(bool, bool, &'a str)>> = BTreeMap::new();
    for name in pool {
        let avoid = match &judged[name] {
            Ok(avoid) => *avoid,
            Err((reason, detail)) => {
                choice.left_out.push(left(name, *reason, detail.clone()));
                continue;
            }
        };
        let group = match by_label {
            None => "",
            Some(label) => match fleet.get(*name).and_then(|c| c.labels.get(label)) {
                Some(value) => value.as_str(),
                None => {
                    let why = format!("no label {label}");
                    choice
                        .left_out
                        .push(left(name, LeftOutReason::Spread, Some(why)));
                    continue;
                }
            },
        };
        groups
            .entry(group)
            .or_default()
            .push((!placed_before(name), avoid, name));
    }
    for g in groups.values_mut() {
        g.sort_unstable();
    }
    let mut order: Vec<&str> = groups.keys().copied().collect();
    order.sort_by_key(|v| {
        let g = &groups[v];
        let placed = g.iter().filter(|c| !c.0).count();
        (Reverse(placed), Reverse(g.len()), *v)
    });
    let to_usize = |n: Option<i32>| n.and_then(|n| usize::try_from(n).ok());
    let max_groups = to_usize(spread.and_then(|s| s.max_groups)).unwrap_or(usize::MAX);
    let min_groups = to_usize(spread.and_then(|s| s.min_groups)).unwrap_or(0);
    let want = to_usize(placement.number_of_clusters).unwrap_or(usize::MAX);
    if order.len() > max_groups {
        for value in order.split_off(max_groups) {
            let why = format!(
                "{}={value}: maxGroups {max_groups} reached",
                by_label.unwrap_or_default()
            );
            for (_, _, name) in &groups[value] {
                choice
                    .left_out
                    .push(left(name, LeftOutReason::Spread, Some(why.clone())));
            }
        }
    }
    let mut chosen = HashSet::new();
    if order.len() < min_groups {
        let why = format!(
            "spread by {}: minGroups is {min_groups}, but only {} groups have eligible clusters",
            by_label.unwrap_or_default(),
            order.len()
        );
        // Nothing new: the clusters placed before keep their placement.
        for value in &order {
            for (new, _, name) in &groups[value] {
                if *new {
                    choice
                        .left_out
                        .push(left(name, LeftOutReason::Spread, Some(why.clone())));
                } else {
                    chosen.insert(*name);
                }
            }
        }
        choice.unsatisfied = Some(why);
        return chosen;
    }
    let lists: Vec<&[(bool, bool, &'a str)]> = order.iter().map(|v| groups[v].as_slice()).collect();
    let mut taken = vec![0_usize; lists.len()];
    // One cluster in each of the first minGroups groups, then the clusters placed before,
    // then new ones; each time to the group with the fewest so far (a group's list is
    // best first, so its next candidate is at `taken`).
    for (g, list) in lists.iter().enumerate().take(min_groups) {
        if chosen.len() < want {
            chosen.insert(list[0].2);
            taken[g] = 1;
        }
    }
    for placed_only in [true, false] {
        while chosen.len() < want {
            let open = (0..lists.len())
                .filter(|g| {
                    lists[*g]
                        .get(taken[*g])
                        .is_some_and(|c| !(placed_only && c.0))
                })
                .min_by_key(|g| (taken[*g], *g));
            let Some(g) = open else { break };
            chosen.insert(lists[g][taken[g]].2);
            taken[g] += 1;
        }
    }
    for value in &order {
        for (_, _, name) in &groups[value] {
            if !chosen.contains(name) {
                choice
                    .left_out
                    .push(left(name, LeftOutReason::NumberOfClusters, None));
            }
        }
    }
    chosen
}

/// Why a share holds no placement, by its hold.
fn hold_reason(hold: Hold) -> LeftOutReason {
    match hold {
        Hold::NotRegistered => LeftOutReason::NotFound,
        Hold::Unavailable | Hold::KeptLastCount => LeftOutReason::Unavailable,
        Hold::Unschedulable => LeftOutReason::Unschedulable,
        Hold::Tainted => LeftOutReason::Tainted,
        Hold::ReturnCooldown { .. } => LeftOutReason::ReturnCooldown,
        Hold::Conflict => LeftOutReason::Conflict,
        Hold::Refused => LeftOutReason::Refused,
        Hold::AwaitingRollout => LeftOutReason::AwaitingRollout,
    }
}

/// `status.selection`: how many clusters were considered, how many hold a placement and
/// are available, and why each other one does not, from the `choice` (when the kind has a
/// `spec.placement`) and the decided `shares`. Every cluster is named (the status keeps
/// 20 per reason, [`SelectionSummary::bounded`]), except those not selected at all.
pub fn explain(
    choice: Option<&Choice>,
    shares: &[ShareRecord],
    fleet: &Clusters,
    placement: Option<&ClusterPlacement>,
    now_unix: i64,
) -> SelectionSummary {
    let mut groups: BTreeMap<(LeftOutReason, Option<String>), Vec<String>> = BTreeMap::new();
    let mut placed = 0_usize;
    // Shares that place nothing and have no hold (removals) count as not selected.
    let mut not_selected = 0_usize;
    let mut considered = fleet.len();
    let tolerations = placement
        .map(|p| p.tolerations.as_slice())
        .unwrap_or_default();
    for share in shares {
        let info = fleet.get(&share.cluster);
        if info.is_none() {
            considered += 1;
        }
        let reason = match (share.hold, info) {
            (Some(hold), info) => {
                let reason = hold_reason(hold);
                let detail = (reason == LeftOutReason::Tainted)
                    .then(|| {
                        info.and_then(|i| taints::judge(i, tolerations, false, now_unix).taint)
                    })
                    .flatten();
                Some((reason, detail))
            }
            (None, None) => Some((LeftOutReason::NotFound, None)),
            (None, Some(_)) if !share.places() => {
                // Sent nothing, or a removal of what it had: no longer selected.
                not_selected += 1;
                continue;
            }
            (None, Some(info)) if !info.available => Some((LeftOutReason::Unavailable, None)),
            (None, Some(_)) => None,
        };
        match reason {
            Some(key) => groups.entry(key).or_default().push(share.cluster.clone()),
            None => placed += 1,
        }
    }
    not_selected += fleet.len().saturating_sub(
        shares
            .iter()
            .filter(|s| fleet.contains_key(&s.cluster))
            .count(),
    );
    if let Some(choice) = choice {
        let shared: HashSet<&str> = shares.iter().map(|s| s.cluster.as_str()).collect();
        for l in choice
            .left_out
            .iter()
            .filter(|l| !shared.contains(l.cluster.as_str()))
        {
            if fleet.contains_key(&l.cluster) {
                not_selected = not_selected.saturating_sub(1);
            } else {
                considered += 1;
            }
            groups
                .entry((l.reason, l.detail.clone()))
                .or_default()
                .push(l.cluster.clone());
        }
    }
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let mut left_out: Vec<LeftOut> = Vec::with_capacity(groups.len() + 1);
    if not_selected > 0 {
        left_out.push(LeftOut {
            reason: LeftOutReason::NotSelected,
            detail: None,
            count: count(not_selected),
            clusters: Vec::new(),
        });
    }
    for ((reason, detail), clusters) in groups {
        left_out.push(LeftOut {
            reason,
            detail,
            count: count(clusters.len()),
            clusters,
        });
    }
    let unsatisfied = choice.and_then(|c| c.unsatisfied.clone());
    let message = sentence(placed, considered, &left_out, unsatisfied.as_deref());
    SelectionSummary {
        considered: count(considered),
        placed: count(placed),
        left_out,
        unsatisfied,
        message,
    }
}

/// "placed in 1 of 4 clusters: 2 not selected, 1 tainted (k:NoSchedule)".
fn sentence(
    placed: usize,
    considered: usize,
    left_out: &[LeftOut],
    unsatisfied: Option<&str>,
) -> String {
    let mut s = format!("placed in {placed} of {considered} clusters");
    let parts: Vec<String> = left_out
        .iter()
        .map(|l| match &l.detail {
            Some(d) => format!("{} {} ({d})", l.count, l.reason.words()),
            None => format!("{} {}", l.count, l.reason.words()),
        })
        .collect();
    if !parts.is_empty() {
        s.push_str(": ");
        s.push_str(&parts.join(", "));
    }
    if let Some(why) = unsatisfied {
        s.push_str("; ");
        s.push_str(why);
    }
    s
}

#[cfg(test)]
mod tests {
    use accord_crds::managed_cluster::TaintEffect;
    use proptest::prelude::*;

    use super::*;
    use crate::distribution::select::ClusterInfo;
    use crate::distribution::taints::SeenTaint;

    /// A cluster: labels, available, one taint effect (if any), drained.
    fn cluster(
        labels: &[(&str, &str)],
        available: bool,
        taint: Option<TaintEffect>,
    ) -> ClusterInfo {
        ClusterInfo {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            available,
            taints: taint
                .map(|effect| SeenTaint {
                    key: "maintenance".into(),
                    value: None,
                    effect,
                    since_unix: 0,
                })
                .into_iter()
                .collect(),
            ..ClusterInfo::default()
        }
    }

    fn placement(yaml: &str) -> ClusterPlacement {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn names(choice: &Choice) -> Vec<&str> {
        choice.selected.iter().map(|c| c.name.as_str()).collect()
    }

    fn reasons(choice: &Choice) -> Vec<(&str, LeftOutReason)> {
        let mut r: Vec<_> = choice
            .left_out
            .iter()
            .map(|l| (l.cluster.as_str(), l.reason))
            .collect();
        r.sort_unstable();
        r
    }

    fn none(_: &str) -> bool {
        false
    }

    fn regions(us_available: [bool; 2]) -> Clusters {
        [
            ("us-1", cluster(&[("region", "us")], us_available[0], None)),
            ("us-2", cluster(&[("region", "us")], us_available[1], None)),
            ("eu-1", cluster(&[("region", "eu")], true, None)),
            ("ap-1", cluster(&[("region", "ap")], true, None)),
        ]
        .into_iter()
        .map(|(n, c)| (n.to_owned(), c))
        .collect()
    }

    const PREFERENCES: &str = "clusterSelector: {}\npreferences:\n- {name: us, clusterSelector: {matchLabels: {region: us}}}\n- {name: eu, clusterSelector: {matchLabels: {region: eu}}}\n";

    #[test]
    fn without_choosing_every_selected_cluster_is_kept_as_before() {
        let fleet = regions([false, true]);
        let p = placement("clusters: [us-1, mars, eu-1]");
        let choice = choose(&p, &fleet, &none, 0).unwrap();
        assert_eq!(names(&choice), ["us-1", "mars", "eu-1"]);
        assert!(choice.left_out.is_empty());
        assert_eq!(choice.not_selected, 2);
    }

    #[test]
    fn preferences_fall_back_when_the_first_group_has_no_eligible_cluster_and_come_back() {
        let p = placement(PREFERENCES);
        let all_up = choose(&p, &regions([true, true]), &none, 0).unwrap();
        assert_eq!(names(&all_up), ["us-1", "us-2"]);
        assert_eq!(
            reasons(&all_up),
            [("eu-1", LeftOutReason::FallbackNotReached)]
        );
        assert_eq!(all_up.not_selected, 1, "ap-1 is in no group");

        let us_down = choose(&p, &regions([false, false]), &none, 0).unwrap();
        assert_eq!(names(&us_down), ["eu-1"]);
        assert_eq!(
            reasons(&us_down),
            [
                ("us-1", LeftOutReason::Unavailable),
                ("us-2", LeftOutReason::Unavailable)
            ]
        );

        // One us cluster back: us is used again, the one still away waiting for its agent.
        let one_back = choose(&p, &regions([true, false]), &none, 0).unwrap();
        assert_eq!(names(&one_back), ["us-1", "us-2"]);
    }

    #[test]
    fn a_count_keeps_the_clusters_placed_before_and_prefers_untainted_new_ones() {
        let mut fleet: Clusters = ["a", "b", "c", "d"]
            .into_iter()
            .map(|n| (n.to_owned(), cluster(&[], true, None)))
            .collect();
        fleet.insert(
            "a".into(),
            cluster(&[], true, Some(TaintEffect::PreferNoSchedule)),
        );
        let p = placement("clusterSelector: {}\nnumberOfClusters: 2");
        let first = choose(&p, &fleet, &none, 0).unwrap();
        assert_eq!(names(&first), ["b", "c"], "a is avoided");
        assert_eq!(
            reasons(&first),
            [
                ("a", LeftOutReason::NumberOfClusters),
                ("d", LeftOutReason::NumberOfClusters)
            ]
        );

        let placed = |n: &str| n == "c" || n == "d";
        fleet.insert("0-new".into(), cluster(&[], true, None));
        assert_eq!(names(&choose(&p, &fleet, &placed, 0).unwrap()), ["c", "d"]);

        // NoSchedule keeps a placed cluster; NoExecute replaces it.
        fleet.insert(
            "d".into(),
            cluster(&[], true, Some(TaintEffect::NoSchedule)),
        );
        assert_eq!(names(&choose(&p, &fleet, &placed, 0).unwrap()), ["c", "d"]);
        fleet.insert("d".into(), cluster(&[], true, Some(TaintEffect::NoExecute)));
        let moved = choose(&p, &fleet, &placed, 0).unwrap();
        assert_eq!(names(&moved), ["0-new", "c"]);
        assert!(moved.left_out.contains(&LeftCluster {
            cluster: "d".into(),
            reason: LeftOutReason::Tainted,
            detail: Some("maintenance:NoExecute".into()),
        }));
    }

    #[test]
    fn spread_covers_min_groups_caps_max_groups_and_says_when_it_cannot() {
        let fleet = regions([true, true]);
        let p = placement(
            "clusterSelector: {}\nnumberOfClusters: 3\nspread: {byLabel: region, minGroups: 3}",
        );
        let spread = choose(&p, &fleet, &none, 0).unwrap();
        let groups: HashSet<&str> = spread
            .selected
            .iter()
            .map(|c| fleet[&c.name].labels["region"].as_str())
            .collect();
        assert_eq!(groups.len(), 3, "{spread:?}");
        assert_eq!(spread.unsatisfied, None);

        let p = placement("clusterSelector: {}\nspread: {byLabel: region, maxGroups: 1}");
        let one = choose(&p, &fleet, &none, 0).unwrap();
        assert_eq!(
            names(&one),
            ["us-1", "us-2"],
            "the group with the most clusters"
        );
        assert!(
            reasons(&one)
                .iter()
                .all(|(_, r)| *r == LeftOutReason::Spread)
        );

        let p = placement("clusterSelector: {}\nspread: {byLabel: region, minGroups: 4}");
        let placed = |n: &str| n == "eu-1";
        let short = choose(&p, &fleet, &placed, 0).unwrap();
        assert_eq!(
            names(&short),
            ["eu-1"],
            "nothing new; the cluster placed before stays"
        );
        assert!(
            short
                .unsatisfied
                .as_deref()
                .unwrap()
                .contains("minGroups is 4")
        );
    }

    #[test]
    fn the_explanation_counts_every_cluster_by_reason_and_says_it_in_one_line() {
        let mut fleet = regions([true, false]);
        fleet.insert(
            "eu-1".into(),
            cluster(&[("region", "eu")], true, Some(TaintEffect::NoSchedule)),
        );
        let p = placement("clusters: [us-1, us-2, eu-1]");
        let choice = choose(&p, &fleet, &none, 0).unwrap();
        let share = |c: &str, hold: Option<Hold>| ShareRecord {
            since: None,
            cluster: c.into(),
            assignment: hold.is_none().then(|| {
                accord_common::distribution::AssignmentSpec::FederatedResource(Default::default())
            }),
            held_reason: None,
            hold,
        };
        let shares = [
            share("us-1", None),
            share("us-2", None),
            share("eu-1", Some(Hold::Tainted)),
        ];
        let s = explain(Some(&choice), &shares, &fleet, Some(&p), 0);
        assert_eq!((s.considered, s.placed), (4, 1));
        let by: Vec<_> = s
            .left_out
            .iter()
            .map(|l| (l.reason, l.detail.as_deref(), l.count, l.clusters.clone()))
            .collect();
        assert_eq!(
            by,
            [
                (LeftOutReason::NotSelected, None, 1, vec![]),
                (LeftOutReason::Unavailable, None, 1, vec!["us-2".to_owned()]),
                (
                    LeftOutReason::Tainted,
                    Some("maintenance:NoSchedule"),
                    1,
                    vec!["eu-1".to_owned()]
                ),
            ]
        );
        assert_eq!(
            s.message,
            "placed in 1 of 4 clusters: 1 not selected, 1 unavailable, 1 tainted (maintenance:NoSchedule)"
        );
    }

    #[test]
    fn a_removal_is_not_a_placement() {
        let fleet = regions([true, true]);
        let removal = |remove| ShareRecord {
            since: None,
            cluster: "us-1".into(),
            assignment: Some(accord_common::distribution::AssignmentSpec::KafkaUser(
                accord_common::distribution::KafkaUserSpec {
                    remove,
                    ..Default::default()
                },
            )),
            held_reason: None,
            hold: None,
        };
        assert!(removal(false).places() && !removal(true).places());
        let s = explain(None, &[removal(true)], &fleet, None, 0);
        assert_eq!((s.considered, s.placed), (4, 0));
        assert_eq!(s.left_out[0].reason, LeftOutReason::NotSelected);
        assert_eq!(s.left_out[0].count, 4);
    }

    /// Up to 12 clusters over 3 regions, each available or not, with no taint or one.
    fn fleets() -> impl Strategy<Value = Clusters> {
        let effect = prop_oneof![
            Just(None),
            Just(Some(TaintEffect::NoSchedule)),
            Just(Some(TaintEffect::PreferNoSchedule)),
            Just(Some(TaintEffect::NoExecute)),
        ];
        prop::collection::vec((0..4_usize, any::<bool>(), effect), 0..12).prop_map(|cs| {
            cs.into_iter()
                .enumerate()
                .map(|(i, (region, available, taint))| {
                    let labels: &[(&str, &str)] = match region {
                        0 => &[("region", "us")],
                        1 => &[("region", "eu")],
                        2 => &[("region", "ap")],
                        _ => &[],
                    };
                    (format!("c{i:02}"), cluster(labels, available, taint))
                })
                .collect()
        })
    }

    fn eligible_now(info: &ClusterInfo, holds: bool) -> bool {
        info.available
            && info.taints.iter().all(|t| match t.effect {
                TaintEffect::NoExecute => false,
                TaintEffect::NoSchedule => holds,
                TaintEffect::PreferNoSchedule => true,
            })
    }

    proptest! {
        #[test]
        fn a_choice_never_places_on_an_untolerated_taint_and_takes_the_count_it_can(
            fleet in fleets(),
            n in 1..6_i32,
            placed_mask in any::<u16>(),
        ) {
            let p = placement(&format!("clusterSelector: {{}}\nnumberOfClusters: {n}"));
            let placed = |c: &str| {
                let i: u32 = c[1..].parse().unwrap();
                placed_mask & (1 << i) != 0
            };
            let choice = choose(&p, &fleet, &placed, 0).unwrap();
            for c in &choice.selected {
                prop_assert!(eligible_now(&fleet[&c.name], placed(&c.name)), "{c:?} in {choice:?}");
            }
            let eligible = fleet.iter().filter(|(n, i)| eligible_now(i, placed(n))).count();
            prop_assert_eq!(choice.selected.len(), eligible.min(usize::try_from(n).unwrap()));
            prop_assert_eq!(choice.selected.len() + choice.left_out.len(), fleet.len());
        }

        #[test]
        fn prefer_no_schedule_is_used_only_when_the_others_do_not_suffice(
            fleet in fleets(),
            n in 1..6_i32,
        ) {
            let p = placement(&format!("clusterSelector: {{}}\nnumberOfClusters: {n}"));
            let choice = choose(&p, &fleet, &none, 0).unwrap();
            let avoided = |name: &str| fleet[name].taints.iter().any(|t| t.effect == TaintEffect::PreferNoSchedule);
            if choice.selected.iter().any(|c| avoided(&c.name)) {
                let chosen: HashSet<&str> = names(&choice).into_iter().collect();
                for (name, info) in &fleet {
                    prop_assert!(
                        chosen.contains(name.as_str()) || avoided(name) || !eligible_now(info, false),
                        "{name} left out while an avoided cluster was chosen: {choice:?}"
                    );
                }
            }
        }

        #[test]
        fn a_count_is_stable_under_unrelated_fleet_changes(
            fleet in fleets(),
            added in fleets(),
            n in 1..6_i32,
        ) {
            let p = placement(&format!("clusterSelector: {{}}\nnumberOfClusters: {n}"));
            let first = choose(&p, &fleet, &none, 0).unwrap();
            let placed: HashSet<String> = first.selected.iter().map(|c| c.name.clone()).collect();
            let mut grown = fleet.clone();
            for (name, info) in added {
                grown.entry(format!("new-{name}")).or_insert(info);
            }
            let again = choose(&p, &grown, &|c: &str| placed.contains(c), 0).unwrap();
            let kept: HashSet<String> = again.selected.iter().map(|c| c.name.clone()).collect();
            prop_assert!(placed.is_subset(&kept), "{placed:?} then {kept:?}");
        }

        #[test]
        fn spread_holds_whenever_it_can_and_says_so_when_it_cannot(
            fleet in fleets(),
            n in 1..8_i32,
            min in 1..4_i32,
            extra in 0..3_i32,
        ) {
            let max = min + extra;
            let n = n.max(min);
            let p = placement(&format!(
                "clusterSelector: {{}}\nnumberOfClusters: {n}\nspread: {{byLabel: region, minGroups: {min}, maxGroups: {max}}}"
            ));
            let choice = choose(&p, &fleet, &none, 0).unwrap();
            let region = |c: &str| fleet[c].labels.get("region").cloned();
            let possible: HashSet<String> = fleet
                .iter()
                .filter(|(_, i)| eligible_now(i, false))
                .filter_map(|(name, _)| region(name))
                .collect();
            let used: HashSet<String> = choice.selected.iter().filter_map(|c| region(&c.name)).collect();
            prop_assert!(choice.selected.iter().all(|c| region(&c.name).is_some()));
            if possible.len() >= usize::try_from(min).unwrap() {
                prop_assert_eq!(&choice.unsatisfied, &None);
                prop_assert!(used.len() >= usize::try_from(min).unwrap(), "{choice:?}");
                prop_assert!(used.len() <= usize::try_from(max).unwrap(), "{choice:?}");
            } else {
                prop_assert!(choice.unsatisfied.is_some());
                prop_assert!(choice.selected.is_empty(), "nothing was placed before");
            }
        }
    }
}
