//! Placement: divides a `CrossClusterScalePolicy`'s global replica count across the
//! eligible member clusters by weight, within each cluster's `minReplicas`/`maxReplicas`.
//!
//! # Method
//!
//! Webster / Sainte-Laguë with bounds, defined as sequential seat assignment:
//!
//! 1. every cluster first gets its `min`;
//! 2. the remaining replicas go one at a time to the cluster, among those below their
//!    `max`, with the highest priority `weight / (2·s + 1)`, where `s` is the number of
//!    replicas the cluster already holds — **its `min` included**.
//!
//! Counting the `min` in `s` makes this the standard bounded divisor method: the result is
//! `share = clamp(round(weight / D), min, max)` for some divisor `D`, so a cluster whose
//! floor already covers its proportional share gets nothing more, and everyone else is
//! proportional among themselves. (Not counting it would hand a cluster its floor *plus* a
//! full proportional cut of the rest.)
//!
//! Equivalently, the replicas above the mins are the best `total - Σmin` *claims* in one
//! fixed order, where cluster `i`'s claim on its `(s+1)`-th replica (for `min ≤ s < max`)
//! ranks by priority `weight/(2s+1)`, then larger weight, then smaller cluster name. That
//! view gives the invariants, each of which holds **with** bounds and is checked by the
//! property tests in `hub/tests/placement_props.rs`:
//! - raising the total by one adds one claim, so no share drops (house monotone — no
//!   Alabama paradox), and exactly one cluster gains one replica;
//! - raising a cluster's weight only raises its claims in the order, so its share never
//!   drops;
//! - removing a cluster removes its claims and frees its `min` for others, so no other
//!   share drops (when the division is feasible before and after).
//!
//! Priorities are compared exactly, `w_a·(2s_b+1)` against `w_b·(2s_a+1)` in `u128`; no
//! floating point anywhere.
//!
//! # Infeasible input
//!
//! The division is exact when `Σmin ≤ total ≤ Σmax` (`max` absent = unbounded). Otherwise
//! [`Division::Infeasible`] says why and still carries a best effort:
//! - mins add up to more than the total: **every cluster at its `min`** (more replicas than
//!   desired). Mins are availability floors, so we keep them rather than pick a cluster to
//!   starve; the status reports the excess.
//! - maxes add up to less than the total: **every cluster at its `max`**.
//! - no candidate at all and a total above 0: nothing to place on.
//!
//! The CRD rejects weight 0, `minReplicas > maxReplicas` and a cluster listed twice. Should
//! such a candidate arrive anyway, the division is `Infeasible` naming the first offender,
//! and the best effort treats it as follows: a weight-0 cluster or one whose `min` exceeds
//! its `max` is held at its `min` (floors win, as above); duplicate entries are divided as
//! separate candidates, their remaining ties broken by input position.
//!
//! # Cost
//!
//! Replicas are not placed one by one (a total of 2³¹ would take seconds). A binary search
//! finds a priority threshold `T` such that "every claim above `T`" is at most the number
//! needed; a short heap walk places the rest in priority order. The threshold walk is
//! `O(n · 94)`, the heap walk `O(n log n)` with at most a few steps per cluster.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashSet};

/// A cluster that may receive replicas. The caller has already filtered out clusters that
/// are unavailable, unschedulable or waiting out a return cooldown.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Candidate {
    /// Name of the `ManagedCluster`; unique among the candidates. Breaks the last tie.
    pub cluster: String,
    /// Relative weight; shares are proportional to it. Must be greater than 0.
    pub weight: u32,
    /// Fewest replicas this cluster runs (`minReplicas`, default 0).
    pub min: u32,
    /// Most replicas this cluster runs (`maxReplicas`); `None` for no limit.
    pub max: Option<u32>,
}

impl Candidate {
    /// An unbounded candidate: `min` 0, no `max`.
    pub fn new(cluster: impl Into<String>, weight: u32) -> Self {
        Self {
            cluster: cluster.into(),
            weight,
            min: 0,
            max: None,
        }
    }

    /// The same candidate with `min` set.
    pub fn with_min(mut self, min: u32) -> Self {
        self.min = min;
        self
    }

    /// The same candidate with `max` set.
    pub fn with_max(mut self, max: u32) -> Self {
        self.max = Some(max);
        self
    }
}

/// The replicas one cluster gets.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Share {
    /// Name of the `ManagedCluster`.
    pub cluster: String,
    /// Replicas to run there.
    pub replicas: u32,
}

/// The outcome of [`divide`]. Shares are in the same order as the candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Division {
    /// The shares add up to the total and each lies within its cluster's bounds.
    Exact(Vec<Share>),
    /// The bounds (or the candidates) make the total impossible.
    Infeasible {
        /// Why; its `Display` is the status message, [`Infeasibility::reason`] the
        /// condition reason.
        reason: Infeasibility,
        /// What to run meanwhile; see the module docs for what each case gives.
        best_effort: Vec<Share>,
    },
}

impl Division {
    /// The shares to apply: the exact ones, or the best effort.
    pub fn shares(&self) -> &[Share] {
        match self {
            Division::Exact(shares) => shares,
            Division::Infeasible { best_effort, .. } => best_effort,
        }
    }

    /// Whether the shares add up to the total within every bound.
    pub fn is_exact(&self) -> bool {
        matches!(self, Division::Exact(_))
    }
}

/// Why a division cannot be exact.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Infeasibility {
    /// Replicas are wanted but no cluster is eligible.
    #[error("no eligible cluster to place {total} replicas on")]
    NoEligibleCluster {
        /// The desired total.
        total: u32,
    },
    /// The floors alone exceed the total.
    #[error(
        "the eligible clusters' minReplicas add up to {sum_min}, more than the {total} \
         desired replicas"
    )]
    MinReplicasExceedTotal {
        /// Sum of `minReplicas` over the eligible clusters.
        sum_min: u64,
        /// The desired total.
        total: u32,
    },
    /// Every cluster at its ceiling still falls short of the total.
    #[error(
        "the eligible clusters' maxReplicas add up to {sum_max}, fewer than the {total} \
         desired replicas"
    )]
    MaxReplicasBelowTotal {
        /// Sum of `maxReplicas` over the eligible clusters (all of which have one).
        sum_max: u64,
        /// The desired total.
        total: u32,
    },
    /// The clusters' bounds keep the groups' totals further apart than `maxSkew` allows.
    #[error(
        "spread.maxSkew {max_skew} cannot hold: the clusters' minReplicas and maxReplicas \
         keep the replica totals of the {by_label} groups further apart; divided by weight"
    )]
    MaxSkew {
        /// The most two groups' totals may differ.
        max_skew: u32,
        /// The label whose values are the groups.
        by_label: String,
    },
    /// A candidate has weight 0, which the CRD forbids.
    #[error("cluster {cluster} has weight 0; weights must be greater than 0")]
    ZeroWeight {
        /// The offending cluster.
        cluster: String,
    },
    /// A candidate's floor is above its ceiling, which the CRD forbids.
    #[error("cluster {cluster} has minReplicas {min} above maxReplicas {max}")]
    MinAboveMax {
        /// The offending cluster.
        cluster: String,
        /// Its `minReplicas`.
        min: u32,
        /// Its `maxReplicas`.
        max: u32,
    },
    /// A cluster appears twice among the candidates, which the CRD forbids.
    #[error("cluster {cluster} is listed more than once")]
    DuplicateCluster {
        /// The repeated cluster.
        cluster: String,
    },
}

impl Infeasibility {
    /// A CamelCase reason for a status condition, an Event or a metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Infeasibility::NoEligibleCluster { .. } => "NoEligibleCluster",
            Infeasibility::MinReplicasExceedTotal { .. } => "MinReplicasExceedTotal",
            Infeasibility::MaxReplicasBelowTotal { .. } => "MaxReplicasBelowTotal",
            Infeasibility::MaxSkew { .. } => "MaxSkewUnsatisfiable",
            Infeasibility::ZeroWeight { .. }
            | Infeasibility::MinAboveMax { .. }
            | Infeasibility::DuplicateCluster { .. } => "InvalidDistribution",
        }
    }
}

/// Divides `total` replicas across `candidates` by bounded Webster / Sainte-Laguë.
///
/// Exact whenever `Σmin ≤ total ≤ Σmax`; deterministic; independent of candidate order
/// (up to the order of the output, which follows the input). See the module docs.
pub fn divide(total: u32, candidates: &[Candidate]) -> Division {
    let invalid = first_invalid(candidates);
    let bounds: Vec<Bounds> = candidates.iter().map(Bounds::usable).collect();
    let outcome = divide_bounded(total, candidates, &bounds);
    let shares = |replicas: Vec<u32>| shares_of(candidates, replicas);
    match (invalid, outcome) {
        (None, Ok(replicas)) => Division::Exact(shares(replicas)),
        (None, Err((reason, replicas))) | (Some(reason), Ok(replicas) | Err((_, replicas))) => {
            Division::Infeasible {
                reason,
                best_effort: shares(replicas),
            }
        }
    }
}

/// The most replicas [`divide_by_capacity`] weighs a fit by: a larger fit weighs the same
/// (no cluster runs that many pods), which keeps a fit's weight, tie-break included, within
/// `u32`.
pub const MAX_FIT_WEIGHED: u32 = 400_000;

/// Divides `total` by what fits: `fits[i]` replicas of the workload fit in candidate `i`
/// now (its agent's estimate).
///
/// Each candidate's room is its fit within its bounds (`min` wins over the fit). Up to the
/// rooms' sum, the shares are proportional to the fits — no share above its room, so no
/// cluster gets more than fits while another has room — the candidates' weights breaking
/// ties between equal fits; beyond it every candidate holds its room and the rest is
/// divided by weight within the `max`es. Both parts are the bounded Webster division of
/// [`divide`], and at the rooms' sum the first is forced to exactly the rooms, so the whole
/// is house-monotone: raising the total never lowers a share. Invalid candidates (what
/// [`divide`] refuses) are divided by [`divide`] as they are.
pub fn divide_by_capacity(total: u32, candidates: &[Candidate], fits: &[u32]) -> Division {
    if first_invalid(candidates).is_some() || fits.len() != candidates.len() {
        return divide(total, candidates);
    }
    let room = |c: &Candidate, fit: u32| fit.clamp(c.min, c.max.unwrap_or(u32::MAX).max(c.min));
    let by_fit: Vec<Candidate> = candidates
        .iter()
        .zip(fits)
        .map(|(c, &fit)| Candidate {
            cluster: c.cluster.clone(),
            // Proportional to the fit; among equal fits, the weight decides. At least 1.
            weight: fit
                .min(MAX_FIT_WEIGHED)
                .saturating_mul(MAX_WEIGHT_TIE + 1)
                .saturating_add(c.weight.min(MAX_WEIGHT_TIE))
                .max(1),
            min: c.min,
            max: Some(room(c, fit)),
        })
        .collect();
    let rooms: u64 = by_fit.iter().filter_map(|c| c.max).map(u64::from).sum();
    let first = u32::try_from(rooms.min(u64::from(total))).unwrap_or(total);
    let filled = divide(first, &by_fit);
    if first == total {
        return filled;
    }
    // Every cluster is full: the rest by weight, above the rooms.
    let beyond: Vec<Candidate> = candidates
        .iter()
        .zip(&by_fit)
        .map(|(c, f)| Candidate {
            cluster: c.cluster.clone(),
            weight: c.weight,
            min: 0,
            max: c.max.map(|m| m.saturating_sub(f.max.unwrap_or(0))),
        })
        .collect();
    let rest = divide(total - first, &beyond);
    let replicas = filled
        .shares()
        .iter()
        .zip(rest.shares())
        .map(|(a, b)| a.replicas + b.replicas)
        .collect();
    let shares = shares_of(candidates, replicas);
    match (filled, rest) {
        (Division::Exact(_), Division::Exact(_)) => Division::Exact(shares),
        // The reason as the division by weight words it (the bounds' own sums).
        _ => match divide(total, candidates) {
            Division::Infeasible { reason, .. } => Division::Infeasible {
                reason,
                best_effort: shares,
            },
            Division::Exact(_) => Division::Exact(shares),
        },
    }
}

/// The most a weight counts as a tie-break in [`divide_by_capacity`] (the CRD's bound).
const MAX_WEIGHT_TIE: u32 = 10_000;

/// Groups of candidates for [`divide_with_skew`]: the label whose values are the groups,
/// the most two groups' totals may differ, and each candidate's group (by index).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkewGroups {
    /// The ManagedCluster label whose values are the groups.
    pub by_label: String,
    /// The most the replica totals of two groups may differ.
    pub max_skew: u32,
    /// Each candidate's group (its label value), in candidate order.
    pub group_of: Vec<String>,
}

/// [`divide`], then, when the totals of the groups differ by more than `groups.max_skew`,
/// moved as little as it takes to bring every group's total within a window
/// `[L, L + max_skew]`; each group's total is then divided among its clusters by weight.
///
/// The window: its lowest start `L` at which the groups' division totals, each clamped into
/// the window, add up to the total — the smallest change that holds the skew — moved where
/// the clusters' bounds require. Each group's total is its clamped one, then raised (the
/// smallest groups first) or lowered (the largest first) one at a time within the window and
/// its bounds until they add up to the total. When no window fits every group's bounds
/// (`Σmin` and `Σmax` of its clusters) the division by weight stands and
/// [`Infeasibility::MaxSkew`] says so.
pub fn divide_with_skew(total: u32, candidates: &[Candidate], groups: &SkewGroups) -> Division {
    let base = divide(total, candidates);
    let Division::Exact(shares) = &base else {
        return base;
    };
    // Each group's division total and bounds.
    let mut names: Vec<&str> = groups.group_of.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    let index = |g: &str| names.binary_search(&g).unwrap_or(0);
    let n = names.len();
    let (mut given, mut lo, mut hi) = (vec![0u64; n], vec![0u64; n], vec![Some(0u64); n]);
    for ((c, share), group) in candidates.iter().zip(shares).zip(&groups.group_of) {
        let g = index(group);
        given[g] += u64::from(share.replicas);
        lo[g] += u64::from(c.min);
        hi[g] = hi[g].zip(c.max).map(|(h, m)| h + u64::from(m));
    }
    let skew = u64::from(groups.max_skew);
    let spread = given.iter().max().unwrap_or(&0) - given.iter().min().unwrap_or(&0);
    if spread <= skew {
        return base;
    }
    let total64 = u64::from(total);
    let hi_of = |g: usize| hi[g].unwrap_or(u64::MAX);
    let clamped_sum = |l: u64| -> u64 { given.iter().map(|&t| t.clamp(l, l + skew)).sum() };
    let least_sum = |l: u64| -> u64 { (0..n).map(|g| lo[g].max(l)).fold(0, u64::saturating_add) };
    let most_sum = |l: u64| -> u64 {
        (0..n)
            .map(|g| hi_of(g).min(l + skew))
            .fold(0, u64::saturating_add)
    };
    // The lowest L in [from, to] where `reached(L)` holds (it holds from some L on), or
    // `to + 1`.
    let lowest = |from: u64, to: u64, reached: &dyn Fn(u64) -> bool| {
        let (mut a, mut b) = (from, to.saturating_add(1));
        while a < b {
            let mid = a + (b - a) / 2;
            if reached(mid) {
                b = mid;
            } else {
                a = mid + 1;
            }
        }
        a
    };
    // The projection's start: the lowest L whose clamped totals reach the total.
    let preferred = lowest(0, total64, &|l| clamped_sum(l) >= total64);
    // The starts that fit: every group's bounds meet the window, and the groups' least
    // totals do not pass the total while their most reach it. Both sums grow with L.
    let lo_max = lo.iter().copied().max().unwrap_or(0);
    let hi_min = (0..n).map(hi_of).min().unwrap_or(0);
    let first = lo_max
        .saturating_sub(skew)
        .max(lowest(0, total64, &|l| most_sum(l) >= total64));
    let last = hi_min
        .min(total64)
        .min(lowest(0, total64, &|l| least_sum(l) > total64).saturating_sub(1));
    if first > last || least_sum(first) > total64 {
        return Division::Infeasible {
            reason: Infeasibility::MaxSkew {
                max_skew: groups.max_skew,
                by_label: groups.by_label.clone(),
            },
            best_effort: shares.clone(),
        };
    }
    let l = preferred.clamp(first, last);
    let window = |g: usize| (lo[g].max(l), hi_of(g).min(l + skew));
    let mut wanted: Vec<u64> = (0..n)
        .map(|g| {
            let (w_lo, w_hi) = window(g);
            given[g].clamp(w_lo, w_hi)
        })
        .collect();
    let mut sum: u64 = wanted.iter().sum();
    while sum > total64 {
        // The largest group that can give one (ties: the later name).
        let Some(g) = (0..n)
            .filter(|&g| wanted[g] > window(g).0)
            .max_by_key(|&g| (wanted[g], g))
        else {
            break;
        };
        wanted[g] -= 1;
        sum -= 1;
    }
    while sum < total64 {
        // The smallest group that can take one (ties: the earlier name).
        let Some(g) = (0..n)
            .filter(|&g| wanted[g] < window(g).1)
            .min_by_key(|&g| (wanted[g], g))
        else {
            break;
        };
        wanted[g] += 1;
        sum += 1;
    }
    // Each group's total among its clusters, by weight.
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, group) in groups.group_of.iter().enumerate() {
        members[index(group)].push(i);
    }
    let mut replicas = vec![0u32; candidates.len()];
    for (members, &group_total) in members.iter().zip(&wanted) {
        let among: Vec<Candidate> = members.iter().map(|&i| candidates[i].clone()).collect();
        let divided = divide(u32::try_from(group_total).unwrap_or(u32::MAX), &among);
        for (&i, share) in members.iter().zip(divided.shares()) {
            replicas[i] = share.replicas;
        }
    }
    Division::Exact(shares_of(candidates, replicas))
}

/// Each candidate's share of `replicas`, in candidate order.
fn shares_of(candidates: &[Candidate], replicas: Vec<u32>) -> Vec<Share> {
    candidates
        .iter()
        .zip(replicas)
        .map(|(c, replicas)| Share {
            cluster: c.cluster.clone(),
            replicas,
        })
        .collect()
}

/// The first candidate the CRD would have rejected, in input order.
fn first_invalid(candidates: &[Candidate]) -> Option<Infeasibility> {
    let mut seen = HashSet::new();
    candidates.iter().find_map(|c| {
        if c.weight == 0 {
            Some(Infeasibility::ZeroWeight {
                cluster: c.cluster.clone(),
            })
        } else if let Some(max) = c.max.filter(|&max| c.min > max) {
            Some(Infeasibility::MinAboveMax {
                cluster: c.cluster.clone(),
                min: c.min,
                max,
            })
        } else if !seen.insert(c.cluster.as_str()) {
            Some(Infeasibility::DuplicateCluster {
                cluster: c.cluster.clone(),
            })
        } else {
            None
        }
    })
}

/// A candidate's numbers with `weight ≥ 1` and `min ≤ max` guaranteed.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    weight: u32,
    min: u32,
    max: Option<u32>,
}

impl Bounds {
    /// The candidate as given when valid; an invalid one is held at its `min`.
    fn usable(c: &Candidate) -> Self {
        let held = c.weight == 0 || c.max.is_some_and(|max| c.min > max);
        Self {
            weight: c.weight.max(1),
            min: c.min,
            max: if held { Some(c.min) } else { c.max },
        }
    }

    /// Replicas this cluster can take above its `min`; `None` when unbounded.
    fn room(&self) -> Option<u32> {
        self.max.map(|max| max - self.min)
    }
}

/// Fixed-point scale of the priority threshold: `T = x / SCALE`. Priorities of claims on
/// one cluster differ by at least ~2⁻⁶⁵ (weight ≥ 1, seats < 2³²), so a threshold step of
/// 2⁻⁶² separates all but a handful per cluster, which the heap walk then places.
/// Products stay below 2¹²⁷: weight·SCALE < 2⁹⁴ and x·(2s+1) < 2⁹⁴·2³³.
const SCALE: u128 = 1 << 62;

/// The division for valid bounds, or why it is infeasible and the best effort.
fn divide_bounded(
    total: u32,
    candidates: &[Candidate],
    bounds: &[Bounds],
) -> Result<Vec<u32>, (Infeasibility, Vec<u32>)> {
    if candidates.is_empty() {
        return if total == 0 {
            Ok(Vec::new())
        } else {
            Err((Infeasibility::NoEligibleCluster { total }, Vec::new()))
        };
    }
    let sum_min: u64 = bounds.iter().map(|b| u64::from(b.min)).sum();
    if sum_min > u64::from(total) {
        let mins = bounds.iter().map(|b| b.min).collect();
        return Err((
            Infeasibility::MinReplicasExceedTotal { sum_min, total },
            mins,
        ));
    }
    let sum_max: Option<u64> = bounds.iter().map(|b| b.max.map(u64::from)).sum();
    if let Some(sum_max) = sum_max.filter(|&m| m < u64::from(total)) {
        let maxes = bounds.iter().map(|b| b.max.unwrap_or(b.min)).collect();
        return Err((
            Infeasibility::MaxReplicasBelowTotal { sum_max, total },
            maxes,
        ));
    }
    // Fits: sum_min ≤ total.
    let extra = u128::from(total) - u128::from(sum_min);
    Ok(apportion(extra, candidates, bounds))
}

/// Places `extra` replicas above the mins: the best `extra` claims in priority order.
/// Requires `extra ≤ Σ(max - min)`.
fn apportion(extra: u128, candidates: &[Candidate], bounds: &[Bounds]) -> Vec<u32> {
    // Jump: the smallest threshold x whose claims strictly above x/SCALE number ≤ extra.
    // Claims above a threshold are an upper set of the claim order, so walking on from
    // there in order yields exactly the best `extra`.
    let max_weight = bounds.iter().map(|b| b.weight).max().unwrap_or(1);
    let (mut lo, mut hi) = (0u128, u128::from(max_weight) * SCALE);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let placed = bounds
            .iter()
            .fold(0u128, |sum, b| sum.saturating_add(extra_above(b, mid)));
        if placed <= extra {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    // Each is at most their sum, which is at most `extra` ≤ u32::MAX.
    let jumped: Vec<u32> = bounds
        .iter()
        .map(|b| u32::try_from(extra_above(b, lo)).unwrap_or(u32::MAX))
        .collect();
    let mut remaining = extra - jumped.iter().copied().map(u128::from).sum::<u128>();
    // min + jumped ≤ Σmin + extra = total.
    let mut seats: Vec<u32> = bounds
        .iter()
        .zip(&jumped)
        .map(|(b, &j)| b.min + j)
        .collect();

    // Step: the rest one by one, best claim first.
    let claim = |i: usize, seats: u32| Claim {
        weight: bounds[i].weight,
        seats,
        cluster: &candidates[i].cluster,
        index: Reverse(i),
    };
    let below_max = |i: usize, s: u32| bounds[i].max.is_none_or(|max| s < max);
    let mut heap: BinaryHeap<Claim> = (0..bounds.len())
        .filter(|&i| below_max(i, seats[i]))
        .map(|i| claim(i, seats[i]))
        .collect();
    while remaining > 0 {
        let Some(best) = heap.pop() else {
            debug_assert!(false, "apportion called with more extra seats than room");
            break;
        };
        let i = best.index.0;
        seats[i] += 1;
        remaining -= 1;
        if below_max(i, seats[i]) {
            heap.push(claim(i, seats[i]));
        }
    }
    seats
}

/// Claims on `b` above its `min` whose priority `weight/(2s+1)` is strictly above
/// `x / SCALE`, capped at its room.
fn extra_above(b: &Bounds, x: u128) -> u128 {
    // Seat s qualifies iff (2s+1)·x < weight·SCALE, i.e. 2s+1 ≤ (weight·SCALE − 1)/x:
    // count the odd numbers up to that bound. Threshold 0: every seat qualifies.
    let webster = (u128::from(b.weight) * SCALE - 1)
        .checked_div(x)
        .map_or(u128::MAX, |largest_divisor| largest_divisor.div_ceil(2));
    let above_min = webster.saturating_sub(u128::from(b.min));
    b.room()
        .map_or(above_min, |room| above_min.min(u128::from(room)))
}

/// A cluster's claim on one more replica, ordered best first: higher priority
/// `weight/(2·seats+1)`, then larger weight, then smaller cluster name, then earlier input.
#[derive(Debug)]
struct Claim<'a> {
    weight: u32,
    seats: u32,
    cluster: &'a str,
    index: Reverse<usize>,
}

impl Claim<'_> {
    fn divisor(&self) -> u128 {
        2 * u128::from(self.seats) + 1
    }
}

impl Ord for Claim<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        (u128::from(self.weight) * other.divisor())
            .cmp(&(u128::from(other.weight) * self.divisor()))
            .then(self.weight.cmp(&other.weight))
            .then_with(|| other.cluster.cmp(self.cluster))
            .then(self.index.cmp(&other.index))
    }
}

impl PartialOrd for Claim<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Claim<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Claim<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn replicas(division: &Division) -> Vec<u32> {
        division.shares().iter().map(|s| s.replicas).collect()
    }

    fn exact(total: u32, candidates: &[Candidate]) -> Vec<u32> {
        let division = divide(total, candidates);
        assert!(division.is_exact(), "{division:?}");
        replicas(&division)
    }

    fn weights(ws: &[u32]) -> Vec<Candidate> {
        ws.iter()
            .enumerate()
            .map(|(i, &w)| Candidate::new(format!("c{i}"), w))
            .collect()
    }

    #[test]
    fn sixty_forty_of_twelve_is_seven_and_five() {
        let candidates = [
            Candidate::new("us-central1", 60),
            Candidate::new("eu-west1", 40).with_min(1),
        ];
        assert_eq!(
            divide(12, &candidates),
            Division::Exact(vec![
                Share {
                    cluster: "us-central1".into(),
                    replicas: 7
                },
                Share {
                    cluster: "eu-west1".into(),
                    replicas: 5
                },
            ])
        );
    }

    #[test]
    fn scaling_six_six_two_from_ten_to_eleven_lowers_no_cluster() {
        // Largest remainder gives 4/4/2 at 10 and 5/5/1 at 11 (the Alabama paradox).
        // Webster: at divisor 4/3 all three quotients are exactly x.5, so the 10th, 11th
        // and 12th replicas are ties, settled by larger weight, then name.
        let candidates = [
            Candidate::new("a", 6),
            Candidate::new("b", 6),
            Candidate::new("c", 2),
        ];
        let at_9 = exact(9, &candidates);
        let at_10 = exact(10, &candidates);
        let at_11 = exact(11, &candidates);
        let at_12 = exact(12, &candidates);
        assert_eq!(at_9, [4, 4, 1]);
        assert_eq!(at_10, [5, 4, 1]);
        assert_eq!(at_11, [5, 5, 1]);
        assert_eq!(at_12, [5, 5, 2]);
        for (before, after) in [(&at_9, &at_10), (&at_10, &at_11), (&at_11, &at_12)] {
            assert!(before.iter().zip(after.iter()).all(|(b, a)| a >= b));
        }
    }

    #[test]
    fn a_capped_cluster_leaves_the_rest_to_the_others_by_weight() {
        // Unbounded 5/3/2; with the first capped at 2, 8 remain for weights 3 and 2: 5/3.
        assert_eq!(exact(10, &weights(&[5, 3, 2])), [5, 3, 2]);
        let mut candidates = weights(&[5, 3, 2]);
        candidates[0].max = Some(2);
        assert_eq!(exact(10, &candidates), [2, 5, 3]);
    }

    #[test]
    fn a_floor_counts_towards_the_clusters_share() {
        // Unbounded 9/1. With min 3 the small cluster holds 3, and its 4th replica
        // (priority 10/7) loses to all of the big one's first 7 (the 7th: 90/13).
        let candidates = [
            Candidate::new("big", 90),
            Candidate::new("small", 10).with_min(3),
        ];
        assert_eq!(exact(10, &candidates[..1]), [10]);
        assert_eq!(exact(10, &weights(&[90, 10])), [9, 1]);
        assert_eq!(exact(10, &candidates), [7, 3]);
        // A floor below the proportional share changes nothing.
        let candidates = [Candidate::new("a", 50), Candidate::new("b", 50).with_min(2)];
        assert_eq!(exact(10, &candidates), [5, 5]);
    }

    #[test]
    fn equal_priorities_go_to_the_larger_weight_then_the_smaller_name() {
        // Weights 3 and 1 at 2 replicas: quotients 3, 1, 1 — the tie for the second goes
        // to the weight 3 cluster (its second claim 3/3 against the other's first 1/1).
        assert_eq!(exact(2, &weights(&[1, 3])), [0, 2]);
        // Equal weights: the smaller name wins, whatever the input order.
        let candidates = [Candidate::new("b", 1), Candidate::new("a", 1)];
        assert_eq!(exact(1, &candidates), [0, 1]);
        let candidates = [
            Candidate::new("z", 2),
            Candidate::new("m", 2),
            Candidate::new("a", 2),
        ];
        assert_eq!(exact(5, &candidates), [1, 2, 2]);
    }

    #[test]
    fn mins_above_the_total_keep_every_cluster_at_its_min() {
        let candidates = [
            Candidate::new("a", 1).with_min(3),
            Candidate::new("b", 1).with_min(3),
            Candidate::new("c", 5),
        ];
        let division = divide(5, &candidates);
        let Division::Infeasible { reason, .. } = &division else {
            panic!("{division:?}");
        };
        assert_eq!(
            *reason,
            Infeasibility::MinReplicasExceedTotal {
                sum_min: 6,
                total: 5
            }
        );
        assert_eq!(reason.reason(), "MinReplicasExceedTotal");
        let message = reason.to_string();
        assert!(message.contains("minReplicas add up to 6") && message.contains("5 desired"));
        assert_eq!(replicas(&division), [3, 3, 0]);
    }

    #[test]
    fn maxes_below_the_total_put_every_cluster_at_its_max() {
        let candidates = [
            Candidate::new("a", 1).with_max(2),
            Candidate::new("b", 9).with_min(1).with_max(2),
        ];
        let division = divide(5, &candidates);
        let Division::Infeasible { reason, .. } = &division else {
            panic!("{division:?}");
        };
        assert_eq!(
            *reason,
            Infeasibility::MaxReplicasBelowTotal {
                sum_max: 4,
                total: 5
            }
        );
        assert!(reason.to_string().contains("maxReplicas add up to 4"));
        assert_eq!(replicas(&division), [2, 2]);
        // Exactly at the sum of maxes is fine; one unbounded cluster lifts the limit.
        assert_eq!(exact(4, &candidates), [2, 2]);
        let mut unbounded = candidates.to_vec();
        unbounded.push(Candidate::new("c", 1));
        assert_eq!(exact(5, &unbounded), [2, 2, 1]);
    }

    #[test]
    fn zero_replicas_are_all_zeros_unless_a_floor_demands_more() {
        assert_eq!(exact(0, &weights(&[3, 1, 7])), [0, 0, 0]);
        let candidates = [Candidate::new("a", 1).with_min(1), Candidate::new("b", 1)];
        let division = divide(0, &candidates);
        assert!(matches!(
            division,
            Division::Infeasible {
                reason: Infeasibility::MinReplicasExceedTotal {
                    sum_min: 1,
                    total: 0
                },
                ..
            }
        ));
        assert_eq!(replicas(&division), [1, 0]);
    }

    #[test]
    fn no_candidates_can_hold_zero_replicas_but_not_more() {
        assert_eq!(divide(0, &[]), Division::Exact(Vec::new()));
        let division = divide(3, &[]);
        assert_eq!(
            division,
            Division::Infeasible {
                reason: Infeasibility::NoEligibleCluster { total: 3 },
                best_effort: Vec::new(),
            }
        );
        assert_eq!(
            division.shares().len(),
            0,
            "nothing to place on, nothing placed"
        );
    }

    #[test]
    fn candidates_the_crd_forbids_are_reported_and_held_at_their_min() {
        let zero = [Candidate::new("a", 0).with_min(1), Candidate::new("b", 1)];
        let division = divide(4, &zero);
        assert_eq!(division.shares().iter().map(|s| s.replicas).sum::<u32>(), 4);
        assert!(matches!(
            &division,
            Division::Infeasible { reason: Infeasibility::ZeroWeight { cluster }, .. } if cluster == "a"
        ));
        assert_eq!(replicas(&division), [1, 3]);

        let inverted = [
            Candidate::new("a", 1).with_min(3).with_max(1),
            Candidate::new("b", 1),
        ];
        let division = divide(10, &inverted);
        assert!(matches!(
            &division,
            Division::Infeasible {
                reason: Infeasibility::MinAboveMax { min: 3, max: 1, .. },
                ..
            }
        ));
        assert_eq!(replicas(&division), [3, 7]);

        let twice = [Candidate::new("a", 1), Candidate::new("a", 1)];
        let division = divide(3, &twice);
        assert_eq!(
            division,
            Division::Infeasible {
                reason: Infeasibility::DuplicateCluster {
                    cluster: "a".into()
                },
                best_effort: vec![
                    Share {
                        cluster: "a".into(),
                        replicas: 2
                    },
                    Share {
                        cluster: "a".into(),
                        replicas: 1
                    },
                ],
            }
        );
        assert_eq!(division.clone(), divide(3, &twice), "still deterministic");
        if let Division::Infeasible { reason, .. } = division {
            assert_eq!(reason.reason(), "InvalidDistribution");
        }
    }

    #[test]
    fn huge_totals_and_weights_are_divided_exactly_without_overflow() {
        assert_eq!(exact(u32::MAX, &weights(&[1, 1, 1])), [1_431_655_765; 3]);
        let candidates = [
            Candidate::new("a", u32::MAX),
            Candidate::new("b", 1).with_max(5),
            Candidate::new("c", u32::MAX - 1).with_min(u32::MAX / 4),
        ];
        // Priority exactly 1 is reached by a's claim at s = 2^31 - 1 ((2^32-1)/(2^32-1))
        // and b's first claim (1/1); above 1 lie 2^31 - 1 claims of a and 2^31 - 1 of c
        // (its floor included). The last replica is that tie, and the larger weight wins.
        assert_eq!(exact(u32::MAX, &candidates), [1 << 31, 0, (1 << 31) - 1]);
        // 1 : 3 at 2^32 - 1: quotas 1073741823.75 and 3221225471.25.
        assert_eq!(
            exact(u32::MAX, &weights(&[1, 3])),
            [1_073_741_824, 3_221_225_471]
        );
    }
}
