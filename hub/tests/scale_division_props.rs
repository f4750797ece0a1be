//! Property tests for `accord_hub::scale::division`: exact sums, bounds, determinism and
//! the monotonicity invariants DESIGN.md section 2 promises, all with min/max bounds; the
//! skew (`divide_with_skew`) and the division by capacity (`divide_by_capacity`).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use accord_hub::scale::division::{
    Candidate, Division, Infeasibility, SkewGroups, divide, divide_by_capacity, divide_with_skew,
};
use proptest::prelude::*;
use proptest::sample::Index;

/// 0..=8 candidates named `c0`, `c1`, … in shuffled order, so name order and input order
/// are unrelated. Weights are 1..=100, half the time 1..=4 so equal priorities (ties)
/// come up often. A quarter have a min, a third a max (never below the min).
fn candidates() -> impl Strategy<Value = Vec<Candidate>> {
    let weight = prop_oneof![1..=100u32, 1..=4u32];
    let min = prop_oneof![3 => Just(0u32), 1 => 0..=20u32];
    let room = prop_oneof![2 => Just(None), 1 => (0..=40u32).prop_map(Some)];
    prop::collection::vec((weight, min, room), 0..=8)
        .prop_map(|specs| {
            specs
                .into_iter()
                .enumerate()
                .map(|(i, (weight, min, room))| Candidate {
                    cluster: format!("c{i}"),
                    weight,
                    min,
                    max: room.map(|r| min + r),
                })
                .collect::<Vec<_>>()
        })
        .prop_shuffle()
}

fn sum_min(candidates: &[Candidate]) -> u64 {
    candidates.iter().map(|c| u64::from(c.min)).sum()
}

/// `None` when some cluster is unbounded.
fn sum_max(candidates: &[Candidate]) -> Option<u64> {
    candidates.iter().map(|c| c.max.map(u64::from)).sum()
}

fn feasible(total: u32, candidates: &[Candidate]) -> bool {
    sum_min(candidates) <= u64::from(total)
        && sum_max(candidates).is_none_or(|m| u64::from(total) <= m)
}

fn replicas(division: &Division) -> Vec<u32> {
    division.shares().iter().map(|s| s.replicas).collect()
}

fn by_cluster(division: &Division) -> BTreeMap<String, u32> {
    division
        .shares()
        .iter()
        .map(|s| (s.cluster.clone(), s.replicas))
        .collect()
}

/// The definition, literally: mins first, then one replica at a time to the cluster below
/// its max with the highest weight/(2s+1), ties to larger weight, then smaller name.
/// `None` when infeasible.
fn seat_by_seat(total: u32, candidates: &[Candidate]) -> Option<Vec<u32>> {
    let mut seats: Vec<u32> = candidates.iter().map(|c| c.min).collect();
    let floor = sum_min(candidates);
    let extra = u64::from(total).checked_sub(floor)?;
    let better = |a: usize, b: usize, seats: &[u32]| -> Ordering {
        let (ca, cb) = (&candidates[a], &candidates[b]);
        let pa = u128::from(ca.weight) * (2 * u128::from(seats[b]) + 1);
        let pb = u128::from(cb.weight) * (2 * u128::from(seats[a]) + 1);
        pa.cmp(&pb)
            .then(ca.weight.cmp(&cb.weight))
            .then(cb.cluster.cmp(&ca.cluster))
    };
    for _ in 0..extra {
        let best = (0..candidates.len())
            .filter(|&i| candidates[i].max.is_none_or(|max| seats[i] < max))
            .max_by(|&a, &b| better(a, b, &seats))?;
        seats[best] += 1;
    }
    Some(seats)
}

proptest! {
    // The monotonicity properties skip infeasible inputs; allow for that.
    #![proptest_config(ProptestConfig {
        cases: 1000,
        max_global_rejects: 10_000,
        ..ProptestConfig::default()
    })]

    /// The jump-and-step implementation gives exactly what placing replicas one by one
    /// gives, and is infeasible exactly when that is.
    #[test]
    fn agrees_with_placing_replicas_one_at_a_time(
        total in 0..=500u32,
        candidates in candidates(),
    ) {
        let division = divide(total, &candidates);
        match seat_by_seat(total, &candidates) {
            Some(seats) => {
                prop_assert!(division.is_exact());
                prop_assert_eq!(replicas(&division), seats);
            }
            None => prop_assert!(!division.is_exact()),
        }
    }

    /// Property 1: exact iff Σmin ≤ total ≤ Σmax (max absent = ∞); an exact division adds
    /// up to the total; an infeasible one names the right cause and the documented best
    /// effort (everyone at min, or everyone at max).
    #[test]
    fn exact_exactly_when_the_bounds_allow_the_total(
        total in 0..=500u32,
        candidates in candidates(),
    ) {
        let division = divide(total, &candidates);
        prop_assert_eq!(division.is_exact(), feasible(total, &candidates));
        match &division {
            Division::Exact(shares) => {
                let sum: u64 = shares.iter().map(|s| u64::from(s.replicas)).sum();
                prop_assert_eq!(sum, u64::from(total));
            }
            Division::Infeasible { reason, best_effort } => match reason {
                Infeasibility::NoEligibleCluster { total: t } => {
                    prop_assert!(candidates.is_empty() && total > 0 && *t == total);
                    prop_assert!(best_effort.is_empty());
                }
                Infeasibility::MinReplicasExceedTotal { sum_min: s, total: t } => {
                    prop_assert_eq!(*s, sum_min(&candidates));
                    prop_assert!(*s > u64::from(*t) && *t == total);
                    let mins: Vec<u32> = candidates.iter().map(|c| c.min).collect();
                    prop_assert_eq!(replicas(&division), mins);
                }
                Infeasibility::MaxReplicasBelowTotal { sum_max: s, total: t } => {
                    prop_assert_eq!(Some(*s), sum_max(&candidates));
                    prop_assert!(*s < u64::from(*t) && *t == total);
                    let maxes: Vec<u32> = candidates.iter().filter_map(|c| c.max).collect();
                    prop_assert_eq!(replicas(&division), maxes);
                }
                other => prop_assert!(false, "valid candidates reported as {other:?}"),
            },
        }
    }

    /// Property 2: every share, exact or best effort, lies within [min, max].
    #[test]
    fn every_share_lies_within_its_bounds(
        total in 0..=500u32,
        candidates in candidates(),
    ) {
        let division = divide(total, &candidates);
        prop_assert_eq!(division.shares().len(), candidates.len());
        for (share, c) in division.shares().iter().zip(&candidates) {
            prop_assert_eq!(&share.cluster, &c.cluster);
            prop_assert!(share.replicas >= c.min);
            prop_assert!(c.max.is_none_or(|max| share.replicas <= max));
        }
    }

    /// Property 3: the same input gives the same output, and reordering the candidates
    /// gives every cluster the same share.
    #[test]
    fn deterministic_and_independent_of_candidate_order(
        total in 0..=500u32,
        (candidates, shuffled) in candidates()
            .prop_flat_map(|c| (Just(c.clone()), Just(c).prop_shuffle())),
    ) {
        let division = divide(total, &candidates);
        prop_assert_eq!(&division, &divide(total, &candidates));
        let other = divide(total, &shuffled);
        prop_assert_eq!(division.is_exact(), other.is_exact());
        prop_assert_eq!(by_cluster(&division), by_cluster(&other));
    }

    /// Property 4 (house monotonicity): one more replica goes to exactly one cluster and
    /// takes none from any other; one fewer comes from exactly one cluster.
    #[test]
    fn one_more_replica_raises_exactly_one_share_by_one(
        total in 0..=499u32,
        candidates in candidates(),
    ) {
        prop_assume!(feasible(total, &candidates) && feasible(total + 1, &candidates));
        let before = replicas(&divide(total, &candidates));
        let after = replicas(&divide(total + 1, &candidates));
        let raised: Vec<usize> = (0..before.len()).filter(|&i| after[i] != before[i]).collect();
        prop_assert_eq!(raised.len(), 1, "{:?} -> {:?}", before, after);
        prop_assert_eq!(after[raised[0]], before[raised[0]] + 1);
    }

    /// Property 4, any distance: between two feasible totals, no share moves against the
    /// total (raising never lowers one, lowering never raises one).
    #[test]
    fn shares_follow_the_total_in_both_directions(
        a in 0..=500u32,
        b in 0..=500u32,
        candidates in candidates(),
    ) {
        let (low, high) = (a.min(b), a.max(b));
        prop_assume!(feasible(low, &candidates) && feasible(high, &candidates));
        let at_low = replicas(&divide(low, &candidates));
        let at_high = replicas(&divide(high, &candidates));
        for (l, h) in at_low.iter().zip(&at_high) {
            prop_assert!(l <= h, "{} -> {}: {:?} -> {:?}", low, high, at_low, at_high);
        }
    }

    /// Property 5: raising one cluster's weight never lowers its share.
    #[test]
    fn a_heavier_weight_never_lowers_the_clusters_share(
        total in 0..=500u32,
        candidates in candidates(),
        which in any::<Index>(),
        raise in 1..=100u32,
    ) {
        prop_assume!(!candidates.is_empty() && feasible(total, &candidates));
        let i = which.index(candidates.len());
        let mut heavier = candidates.clone();
        heavier[i].weight += raise;
        let before = replicas(&divide(total, &candidates))[i];
        let after = replicas(&divide(total, &heavier))[i];
        prop_assert!(after >= before, "{} -> {}", before, after);
    }

    /// Property 6: removing a cluster never lowers another's share, when the division is
    /// feasible with and without it.
    #[test]
    fn removing_a_cluster_never_lowers_another_share(
        total in 0..=500u32,
        candidates in candidates(),
        which in any::<Index>(),
    ) {
        prop_assume!(!candidates.is_empty());
        let i = which.index(candidates.len());
        let mut fewer = candidates.clone();
        fewer.remove(i);
        prop_assume!(feasible(total, &candidates) && feasible(total, &fewer));
        let before = by_cluster(&divide(total, &candidates));
        let after = by_cluster(&divide(total, &fewer));
        for (cluster, replicas) in &after {
            prop_assert!(*replicas >= before[cluster], "{}: {:?} -> {:?}", cluster, before, after);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Larger totals, where the threshold search does most of the work, still agree with
    /// placing replicas one at a time.
    #[test]
    fn agrees_with_placing_replicas_one_at_a_time_for_large_totals(
        total in 0..=20_000u32,
        candidates in candidates(),
    ) {
        let division = divide(total, &candidates);
        match seat_by_seat(total, &candidates) {
            Some(seats) => prop_assert_eq!(replicas(&division), seats),
            None => prop_assert!(!division.is_exact()),
        }
    }
}

/// Each candidate's group: one of up to four region names, by a drawn index.
fn groups_of(candidates: &[Candidate], picks: &[usize]) -> Vec<String> {
    (0..candidates.len())
        .map(|i| format!("r{}", picks.get(i).copied().unwrap_or(0) % 4))
        .collect()
}

/// Whether some group totals within [min, max] of each group, at most `skew` apart, add up
/// to `total`: a window start L where every group's bounds meet [L, L + skew] and the
/// groups' least and most totals there enclose the total.
fn skew_feasible(total: u32, candidates: &[Candidate], group_of: &[String], skew: u32) -> bool {
    let mut bounds: BTreeMap<&str, (u64, Option<u64>)> = BTreeMap::new();
    for (c, g) in candidates.iter().zip(group_of) {
        let b = bounds.entry(g.as_str()).or_insert((0, Some(0)));
        b.0 += u64::from(c.min);
        b.1 = b.1.zip(c.max).map(|(h, m)| h + u64::from(m));
    }
    let (total, skew) = (u64::from(total), u64::from(skew));
    (0..=total).any(|l| {
        let meets = bounds
            .values()
            .all(|&(lo, hi)| lo <= l + skew && hi.is_none_or(|h| h >= l));
        let least: u64 = bounds.values().map(|&(lo, _)| lo.max(l)).sum();
        let most: u64 = bounds
            .values()
            .map(|&(_, hi)| hi.unwrap_or(u64::MAX).min(l + skew))
            .fold(0, u64::saturating_add);
        meets && least <= total && total <= most
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// `spread.maxSkew`: whenever the bounds allow the total and some group totals within
    /// them are at most `maxSkew` apart, the division is exact, within every bound, and its
    /// groups' totals are at most `maxSkew` apart; when no such totals exist it says so
    /// (MaxSkew) and keeps the division by weight.
    #[test]
    fn group_totals_stay_within_max_skew_whenever_the_bounds_allow(
        total in 0..=300u32,
        candidates in candidates(),
        picks in prop::collection::vec(0..4usize, 8),
        skew in 1..=5u32,
    ) {
        let group_of = groups_of(&candidates, &picks);
        let groups = SkewGroups { by_label: "region".into(), max_skew: skew, group_of: group_of.clone() };
        let division = divide_with_skew(total, &candidates, &groups);
        if !feasible(total, &candidates) {
            prop_assert_eq!(&division, &divide(total, &candidates));
            return Ok(());
        }
        let possible = skew_feasible(total, &candidates, &group_of, skew);
        match &division {
            Division::Exact(shares) => {
                prop_assert!(possible, "exact although no group totals fit: {shares:?}");
                let sum: u64 = shares.iter().map(|s| u64::from(s.replicas)).sum();
                prop_assert_eq!(sum, u64::from(total));
                let mut totals: BTreeMap<&str, u64> = BTreeMap::new();
                for ((share, c), g) in shares.iter().zip(&candidates).zip(&group_of) {
                    prop_assert!(share.replicas >= c.min);
                    prop_assert!(c.max.is_none_or(|max| share.replicas <= max));
                    *totals.entry(g.as_str()).or_default() += u64::from(share.replicas);
                }
                let spread = totals.values().max().unwrap_or(&0) - totals.values().min().unwrap_or(&0);
                prop_assert!(spread <= u64::from(skew), "{totals:?} more than {skew} apart");
            }
            Division::Infeasible { reason, best_effort } => {
                prop_assert!(!possible, "said {reason} although group totals fit");
                let named_skew = matches!(reason, Infeasibility::MaxSkew { max_skew, .. } if *max_skew == skew);
                prop_assert!(named_skew, "{reason:?}");
                let by_weight = divide(total, &candidates);
                prop_assert_eq!(best_effort.as_slice(), by_weight.shares());
            }
        }
    }

    /// Without anything to correct (the division by weight already within maxSkew) the
    /// division is the division by weight.
    #[test]
    fn a_division_within_max_skew_is_left_as_it_is(
        total in 0..=300u32,
        candidates in candidates(),
        picks in prop::collection::vec(0..4usize, 8),
    ) {
        let group_of = groups_of(&candidates, &picks);
        let groups = SkewGroups { by_label: "region".into(), max_skew: u32::MAX / 4, group_of };
        prop_assert_eq!(divide_with_skew(total, &candidates, &groups), divide(total, &candidates));
    }
}

/// What fits in each of `candidates` (0..=30 each, ties frequent).
fn fits_for(candidates: &[Candidate], picks: &[u32]) -> Vec<u32> {
    (0..candidates.len()).map(|i| picks[i]).collect()
}

/// A candidate's room by capacity: its fit within its bounds, its `min` winning.
fn room(c: &Candidate, fit: u32) -> u32 {
    fit.clamp(c.min, c.max.unwrap_or(u32::MAX).max(c.min))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// `weighting: AvailableCapacity`: exact exactly when the bounds allow the total, every
    /// share within its bounds, and never more into a cluster than fits (its room) while
    /// another cluster has room left.
    #[test]
    fn capacity_never_overfills_a_cluster_while_another_has_room(
        total in 0..=300u32,
        candidates in candidates(),
        picks in prop::collection::vec(prop_oneof![0..=30u32, 0..=3u32], 8),
    ) {
        let fits = fits_for(&candidates, &picks);
        let division = divide_by_capacity(total, &candidates, &fits);
        prop_assert_eq!(division.is_exact(), feasible(total, &candidates));
        let shares = replicas(&division);
        if division.is_exact() {
            prop_assert_eq!(shares.iter().map(|&r| u64::from(r)).sum::<u64>(), u64::from(total));
            for (c, &r) in candidates.iter().zip(&shares) {
                prop_assert!(r >= c.min && c.max.is_none_or(|m| r <= m));
            }
            let over = candidates.iter().zip(&fits).zip(&shares).any(|((c, &f), &r)| r > room(c, f));
            let room_left = candidates.iter().zip(&fits).zip(&shares).any(|((c, &f), &r)| r < room(c, f));
            prop_assert!(!(over && room_left), "overfilled while room is left: {shares:?}, fits {fits:?}");
        }
    }

    /// House-monotone: one more replica never lowers a share (feasible totals).
    #[test]
    fn capacity_division_is_house_monotone(
        total in 0..=300u32,
        candidates in candidates(),
        picks in prop::collection::vec(prop_oneof![0..=30u32, 0..=3u32], 8),
    ) {
        let fits = fits_for(&candidates, &picks);
        prop_assume!(feasible(total, &candidates) && feasible(total + 1, &candidates));
        let before = replicas(&divide_by_capacity(total, &candidates, &fits));
        let after = replicas(&divide_by_capacity(total + 1, &candidates, &fits));
        for (b, a) in before.iter().zip(&after) {
            prop_assert!(a >= b, "{before:?} → {after:?} (fits {fits:?})");
        }
        let gained: u32 = after.iter().zip(&before).map(|(a, b)| a - b).sum();
        prop_assert_eq!(gained, 1);
    }

    /// Where nothing bounds the clusters and everything fits, shares follow the fits: a
    /// cluster with more room never gets fewer replicas than one with less.
    #[test]
    fn more_room_never_means_fewer_replicas(
        candidates in candidates(),
        picks in prop::collection::vec(0..=30u32, 8),
    ) {
        let free: Vec<Candidate> = candidates.iter().map(|c| Candidate::new(c.cluster.clone(), c.weight)).collect();
        let fits = fits_for(&free, &picks);
        let total = fits.iter().sum::<u32>() / 2;
        let shares = replicas(&divide_by_capacity(total, &free, &fits));
        for i in 0..free.len() {
            for j in 0..free.len() {
                if fits[i] > fits[j] {
                    prop_assert!(shares[i] >= shares[j], "fits {fits:?} → {shares:?}");
                }
            }
        }
    }
}

#[test]
fn equal_fits_are_broken_by_weight_and_a_full_fleet_takes_the_rest_by_weight() {
    let candidates = [Candidate::new("a", 1), Candidate::new("b", 3)];
    // Both fit 10: the heavier gets the odd replica.
    assert_eq!(
        replicas(&divide_by_capacity(1, &candidates, &[10, 10])),
        [0, 1]
    );
    assert_eq!(
        replicas(&divide_by_capacity(20, &candidates, &[10, 10])),
        [10, 10]
    );
    // Beyond what fits: 4 more, 1:3 by weight.
    assert_eq!(
        replicas(&divide_by_capacity(24, &candidates, &[10, 10])),
        [11, 13]
    );
    // Proportional to what fits: 30 over fits 20 and 10 is 20 and 10, and half is 10 and 5.
    assert_eq!(
        replicas(&divide_by_capacity(30, &candidates, &[20, 10])),
        [20, 10]
    );
    assert_eq!(
        replicas(&divide_by_capacity(15, &candidates, &[20, 10])),
        [10, 5]
    );
}
