//! Pure decisions of the scale policy controller: which clusters take part in a division
//! (failover and the return cooldown) and the shares in distribution order. The status
//! aggregated from the agents' reports is [`super::status`].

use accord_common::distribution::{AssignmentSpec, ScaleSpec};
use accord_crds::scale::{ClusterShare, CrossClusterScalePolicySpec, Weighting};
use std::collections::HashMap;
use std::time::Duration;

use super::ScaleDecision;
use super::division::{
    Candidate, Division, SkewGroups, divide, divide_by_capacity, divide_with_skew,
};
use crate::distribution::select::{ClusterInfo, Clusters};
use crate::distribution::taints::{self, Verdict};
use crate::distribution::{Hold, PlacementRecord, ShareRecord};
use accord_crds::managed_cluster::{TaintEffect, UNREACHABLE_TAINT};
use accord_crds::placement::{Toleration, TolerationOperator};

/// The outcome of planning one policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Every distribution cluster's share, in distribution order.
    pub shares: Vec<ShareRecord>,
    /// Why the total could not be placed exactly, if so.
    pub infeasible: Option<String>,
    /// Clusters whose share is with the others, in distribution order (see
    /// [`ScaleDecision::moved_away`]).
    pub moved_away: Vec<String>,
    /// When to look again because a returning cluster's cooldown ends.
    pub recheck_after: Option<Duration>,
    /// Why a policy that divides by capacity was divided by weight this time, if it was.
    pub weighting: Option<String>,
}

/// What the reason of a cluster that kept its count while no cluster was available adds.
const KEPT_LAST_COUNT_REASON: &str = "no cluster is available, so it keeps its last count";

/// Why a listed cluster takes no part in the division, and the reason in words.
enum Out {
    /// It gets 0 (not registered, or drained: no placements there is what was asked).
    Held(Hold, String),
    /// Its share is with the others, but it keeps what it runs (see
    /// [`ScaleDecision::moved_away`]).
    MovedAway(Hold, String),
}

/// Divides `spec.desiredReplicas` over the eligible clusters of `spec.distribution`.
///
/// With failover on, a cluster takes part while it is available and schedulable: the hub's
/// `accord.io/unreachable` taint moves its share at once (a default toleration of 0 s that
/// the policy's own toleration of that taint replaces), and `accord.io/api-server-unavailable`
/// moves it only where the policy's tolerations give it seconds. A cluster
/// that had no share in `previous` (it failed, or was drained) takes part again only once it
/// has been available for `returnCooldownSeconds`, so a flapping cluster does not pull
/// replicas back and forth: its share returns once. With failover off every listed cluster
/// keeps its share whatever its state.
///
/// A cluster that is unavailable, or back and waiting out its cooldown, has its share
/// divided among the others but is not told 0: it keeps the count it was last told, up to
/// the share it would have if it took part, so neither its absence nor its return kills a
/// pod it runs. The total runs over `desiredReplicas` by at most that share until the
/// cooldown ends and the others give theirs back. A drained or unregistered cluster gets 0
/// with the reason.
pub fn plan(
    spec: &CrossClusterScalePolicySpec,
    default_namespace: &str,
    clusters: &Clusters,
    previous: Option<&PlacementRecord<ScaleDecision>>,
    now_unix: i64,
) -> Plan {
    plan_with(spec, default_namespace, clusters, previous, now_unix, None)
}

/// [`plan`], dividing by what fits where `spec.weighting` is `AvailableCapacity`: `fits`
/// has each cluster's last estimate ([`divide_by_capacity`]). While a cluster that takes
/// part has none, the division is by weight and [`Plan::weighting`] says why.
pub fn plan_with(
    spec: &CrossClusterScalePolicySpec,
    default_namespace: &str,
    clusters: &Clusters,
    previous: Option<&PlacementRecord<ScaleDecision>>,
    now_unix: i64,
    fits: Option<&HashMap<String, u32>>,
) -> Plan {
    let fits = fits.filter(|_| spec.weighting == Weighting::AvailableCapacity);
    let cooldown = i64::from(spec.failover.return_cooldown_seconds.max(0));
    let mut candidates = Vec::new();
    // Candidates and clusters whose share moved away: the division if everyone came back.
    let mut home = Vec::new();
    let mut held: HashMap<&str, (Hold, String)> = HashMap::new();
    let mut moved_away = Vec::new();
    let mut recheck_after: Option<i64> = None;
    let tolerations = tolerations_with_failover(spec);
    // Clusters with a PreferNoSchedule taint the policy does not tolerate: used only when
    // the others cannot hold the replicas.
    let mut avoided: Vec<(Candidate, String)> = Vec::new();
    // Those of them used: they get what the others have no room for.
    let mut spill: Vec<Candidate> = Vec::new();
    for d in &spec.distribution {
        let view = clusters.get(&d.cluster);
        let holds = previous
            .and_then(|p| p.share(&d.cluster))
            .is_some_and(|s| s.had_share() && scale_spec(s).is_some_and(|a| a.replicas > 0));
        let judged = view.map(|v| taints::judge(v, &tolerations, holds, now_unix));
        if let Some(at) = judged.as_ref().and_then(|j| j.recheck_at_unix) {
            let wait = at - now_unix;
            recheck_after = crate::distribution::earliest(recheck_after, wait);
        }
        let tainted = match view.zip(judged).map(|(v, j)| (v, j.verdict, j.observed)) {
            // The hub's own taint: the cluster is away, so its share moves to the others
            // and it keeps what it runs (failover).
            Some((v, Verdict::Held(_, _), true)) => {
                Some(Out::MovedAway(Hold::Unavailable, away_reason(v)))
            }
            Some((_, Verdict::Held(Hold::Tainted, reason), _)) => {
                Some(Out::Held(Hold::Tainted, reason))
            }
            Some((_, Verdict::Avoid(reason), _)) => {
                avoided.push((candidate_of(d), reason));
                continue;
            }
            _ => None,
        };
        let out = if tainted.is_some() {
            tainted
        } else if !spec.failover.enabled {
            None
        } else {
            match view {
                None => Some(Out::Held(
                    Hold::NotRegistered,
                    "the cluster is not registered with the hub".to_owned(),
                )),
                Some(v) if v.unschedulable => Some(Out::Held(
                    Hold::Unschedulable,
                    "the cluster is unschedulable (drained)".to_owned(),
                )),
                // Unavailable but tolerated (failover off, or within the policy's own
                // toleration of `accord.io/unreachable`): it keeps its share.
                Some(v) if !v.available => None,
                Some(v) => {
                    // A count kept while no cluster was available never moved away: its
                    // cluster has nothing to wait for.
                    let had_share = previous
                        .and_then(|p| p.share(&d.cluster))
                        .is_some_and(ShareRecord::had_share);
                    let ready_at = v.available_since_unix + cooldown;
                    // Only a cluster that came back after its share was moved away waits;
                    // one that was already available when the previous decision was made
                    // (a stale view then) takes part at once.
                    // `lastTransitionTime` has whole seconds: a return in the very second
                    // of the decision (a short partition) reads as up to 1 s earlier, so
                    // that second counts as after the decision.
                    // A cluster the previous decision already held for its cooldown stays
                    // held: that decision came after its return, which says nothing about
                    // a stale view.
                    let held_for_cooldown = previous
                        .and_then(|p| p.share(&d.cluster))
                        .is_some_and(ShareRecord::in_return_cooldown);
                    let returned_since_decision = held_for_cooldown
                        || previous.is_some_and(|p| {
                            v.available_since_unix
                                .saturating_add(1)
                                .saturating_mul(1000)
                                > p.decided_unix_millis
                        });
                    if returned_since_decision && !had_share && now_unix < ready_at {
                        let wait = ready_at - now_unix;
                        recheck_after = crate::distribution::earliest(recheck_after, wait);
                        Some(Out::MovedAway(
                            Hold::ReturnCooldown {
                                until_unix: ready_at,
                            },
                            format!(
                                "the cluster returned; its share moves back after {cooldown}s of availability ({wait}s left)"
                            ),
                        ))
                    } else {
                        None
                    }
                }
            }
        };
        let candidate = candidate_of(d);
        match out {
            Some(Out::Held(hold, r)) => {
                held.insert(d.cluster.as_str(), (hold, r));
            }
            Some(Out::MovedAway(hold, r)) => {
                held.insert(d.cluster.as_str(), (hold, r));
                moved_away.push(d.cluster.clone());
                home.push(candidate);
            }
            None => {
                home.push(candidate.clone());
                candidates.push(candidate);
            }
        }
    }
    let total = u32::try_from(spec.desired_replicas.max(0)).unwrap_or(0);
    let room: Option<u64> = candidates
        .iter()
        .map(|c| c.max.map(u64::from))
        .sum::<Option<u64>>();
    if !candidates.is_empty() && room.is_none_or(|r| r >= u64::from(total)) {
        for (c, reason) in &avoided {
            held.insert(
                c.cluster.as_str(),
                (
                    Hold::Tainted,
                    format!("{reason}; the other clusters have room for every replica"),
                ),
            );
        }
    } else {
        for (c, _) in avoided {
            home.push(c.clone());
            spill.push(c);
        }
    }
    let previous_count = |cluster: &str| -> u32 {
        previous
            .and_then(|p| p.share(cluster))
            .and_then(scale_spec)
            .and_then(|s| u32::try_from(s.replicas).ok())
            .unwrap_or(0)
    };
    // No cluster to move a share to (every one down, e.g. the only cluster while its agent
    // fails over to its standby replica): moving everything to nowhere would scale every
    // cluster to 0 the moment an agent reconnects. Each keeps the count it was last given;
    // pods keep running where they are, and no share moved anywhere.
    let hold_previous =
        spec.failover.enabled && candidates.is_empty() && spill.is_empty() && !held.is_empty();
    if hold_previous {
        moved_away.clear();
        if previous.is_some() {
            for (cluster, (hold, reason)) in held.iter_mut() {
                let kept = previous_count(cluster);
                *hold = Hold::KeptLastCount;
                *reason = format!("{reason}; {KEPT_LAST_COUNT_REASON} ({kept})");
            }
        }
    }
    // `spread.maxSkew`: the replica totals of the label's groups at most that far apart.
    let skew = spec
        .placement
        .as_ref()
        .and_then(|p| p.spread.as_ref())
        .and_then(|s| Some((s.by_label.as_str(), u32::try_from(s.max_skew?).ok()?)));
    // What fits in each of `among`, when the policy divides by it and every one has said.
    let fits_of = |among: &[Candidate]| -> Option<Vec<u32>> {
        let fits = fits?;
        among
            .iter()
            .map(|c| fits.get(&c.cluster).copied())
            .collect()
    };
    let weighting = fits.and_then(|fits| {
        let unknown: Vec<&str> = candidates
            .iter()
            .map(|c| c.cluster.as_str())
            .filter(|c| !fits.contains_key(*c))
            .collect();
        (!unknown.is_empty()).then(|| {
            format!(
                "divided by weight until every cluster has estimated what fits (none yet from {})",
                crate::distribution::reported::named(&unknown, ", ")
            )
        })
    });
    let divide_among = |total: u32, among: &[Candidate]| match skew {
        Some((by_label, max_skew)) => divide_with_skew(
            total,
            among,
            &SkewGroups {
                by_label: by_label.to_owned(),
                max_skew,
                group_of: among
                    .iter()
                    .map(|c| {
                        clusters
                            .get(&c.cluster)
                            .and_then(|v| v.labels.get(by_label))
                            .cloned()
                            .unwrap_or_default()
                    })
                    .collect(),
            },
        ),
        None => match fits_of(among) {
            Some(f) => divide_by_capacity(total, among, &f),
            None => divide(total, among),
        },
    };
    let divided = |total: u32, among: &[Candidate]| match divide_among(total, among) {
        Division::Exact(shares) => (shares, None),
        Division::Infeasible {
            reason,
            best_effort,
        } => (best_effort, Some(reason.to_string())),
    };
    let (division, infeasible) = if spill.is_empty() {
        divided(total, &candidates)
    } else {
        // The others first, up to their room; the avoided clusters the rest.
        let first = u32::try_from(room.unwrap_or(0).min(u64::from(total))).unwrap_or(total);
        let (mut division, infeasible) = divided(first, &candidates);
        let (rest, rest_infeasible) = divided(total - first, &spill);
        division.extend(rest);
        candidates.extend(spill);
        (division, infeasible.or(rest_infeasible))
    };
    // What a cluster whose share moved away keeps: what it was last told to run, but never
    // more than its share if every such cluster were back, so the overshoot of the total is
    // bounded by those shares and the return itself never scales it down.
    let home_division = if moved_away.is_empty() {
        Vec::new()
    } else {
        let home_divided = match fits_of(&home) {
            Some(f) => divide_by_capacity(total, &home, &f),
            None => divide(total, &home),
        };
        match home_divided {
            Division::Exact(shares) => shares,
            Division::Infeasible { best_effort, .. } => best_effort,
        }
    };
    let kept = |cluster: &str| -> Option<u32> {
        if hold_previous {
            return previous.map(|_| previous_count(cluster));
        }
        if !moved_away.iter().any(|c| c == cluster) {
            return None;
        }
        let home_share = home_division
            .iter()
            .find(|s| s.cluster == cluster)
            .map_or(0, |s| s.replicas);
        Some(previous_count(cluster).min(home_share))
    };
    let target = &spec.target_ref;
    let shares = spec
        .distribution
        .iter()
        .map(|d| ShareRecord {
            since: None,
            cluster: d.cluster.clone(),
            // Every listed cluster is told its count, 0 included, so a drained cluster
            // scales down instead of keeping what it had.
            assignment: Some(AssignmentSpec::Scale(ScaleSpec {
                api_version: target.api_version.clone(),
                kind: target.kind.clone(),
                namespace: d
                    .namespace
                    .clone()
                    .unwrap_or_else(|| default_namespace.to_owned()),
                name: target.name.clone(),
                replicas: division
                    .iter()
                    .find(|s| s.cluster == d.cluster)
                    .map(|s| s.replicas)
                    .or_else(|| kept(&d.cluster))
                    .map_or(0, |r| i32::try_from(r).unwrap_or(i32::MAX)),
                // Named once the decision is known to be new (see the controller).
                scale_request_id: String::new(),
            })),
            held_reason: held.get(d.cluster.as_str()).map(|(_, reason)| {
                match kept(&d.cluster).filter(|n| !hold_previous && *n > 0) {
                    Some(n) => format!("{reason}; it keeps running {n} meanwhile"),
                    None => reason.clone(),
                }
            }),
            hold: held.get(d.cluster.as_str()).map(|(hold, _)| *hold),
        })
        .collect();
    Plan {
        shares,
        infeasible,
        moved_away,
        recheck_after: recheck_after.map(|s| Duration::from_secs(s.max(1) as u64)),
        weighting,
    }
}

/// The policy's tolerations, and with failover on the default that makes it: the hub's
/// `accord.io/unreachable` taint tolerated for 0 seconds, unless a toleration of the
/// policy's own matches that taint (it may give the share longer before it moves, or keep
/// it there for ever).
fn tolerations_with_failover(spec: &CrossClusterScalePolicySpec) -> Vec<Toleration> {
    let mut tolerations = spec
        .placement
        .as_ref()
        .map(|p| p.tolerations.clone())
        .unwrap_or_default();
    let named = tolerations
        .iter()
        .any(|t| t.tolerates(UNREACHABLE_TAINT, None, TaintEffect::NoExecute));
    if spec.failover.enabled && !named {
        tolerations.push(Toleration {
            key: Some(UNREACHABLE_TAINT.to_owned()),
            operator: Some(TolerationOperator::Exists),
            value: None,
            effect: Some(TaintEffect::NoExecute),
            toleration_seconds: Some(0),
        });
    }
    tolerations
}

/// Why a cluster the hub's own taint took the share from is away.
fn away_reason(view: &ClusterInfo) -> String {
    if view.available {
        "the member API server is unavailable; its share moved to the others".to_owned()
    } else {
        "the cluster is unavailable; its share moved to the others".to_owned()
    }
}

/// The division's view of a distribution entry.
fn candidate_of(d: &ClusterShare) -> Candidate {
    Candidate {
        cluster: d.cluster.clone(),
        weight: u32::try_from(d.weight.max(1)).unwrap_or(1),
        min: d
            .min_replicas
            .and_then(|m| u32::try_from(m).ok())
            .unwrap_or(0),
        max: d.max_replicas.and_then(|m| u32::try_from(m).ok()),
    }
}

/// A share's scale assignment, if it has one.
pub fn scale_spec(share: &ShareRecord) -> Option<&ScaleSpec> {
    match share.assignment.as_ref()? {
        AssignmentSpec::Scale(s) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scale::status::{AggregateInputs, aggregate, status_changed};
    use crate::store::StatusRecord;
    use accord_common::distribution::{Observed, PlacedKind, PlacedRef, ScaleObserved};
    use accord_crds::PlacementState;
    use accord_crds::conditions;
    use accord_crds::scale::CrossClusterScalePolicyStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn spec(yaml: &str) -> CrossClusterScalePolicySpec {
        serde_json::from_value(serde_saphyr::from_str::<serde_json::Value>(yaml).unwrap()).unwrap()
    }

    fn two_clusters() -> CrossClusterScalePolicySpec {
        spec(
            "targetRef: {name: frontend}\ndesiredReplicas: 12\ndistribution:\n- {cluster: a, weight: 60}\n- {cluster: b, weight: 40}\n",
        )
    }

    fn up(since: i64) -> ClusterInfo {
        ClusterInfo {
            available: true,
            available_since_unix: since,
            ..ClusterInfo::default()
        }
    }

    fn down() -> ClusterInfo {
        ClusterInfo::default()
    }

    fn views(v: &[(&str, ClusterInfo)]) -> Clusters {
        v.iter()
            .map(|(n, c)| ((*n).to_owned(), c.clone()))
            .collect()
    }

    fn replicas(p: &Plan) -> Vec<i32> {
        p.shares
            .iter()
            .map(|s| scale_spec(s).unwrap().replicas)
            .collect()
    }

    fn record_of(p: &Plan) -> PlacementRecord<ScaleDecision> {
        PlacementRecord {
            placed: PlacedRef::new(PlacedKind::CrossClusterScalePolicy, "default", "web"),
            generation: 1,
            decided_unix_millis: 0,
            shares: p.shares.clone(),
            decision: ScaleDecision {
                desired_replicas: 12,
                scale_request_id: "id-1".into(),
                infeasible: p.infeasible.clone(),
                moved_away: p.moved_away.clone(),
                weighting: p.weighting.clone(),
            },
            traceparent: String::new(),
        }
    }

    #[test]
    fn sixty_forty_of_twelve_is_seven_and_five() {
        let p = plan(
            &two_clusters(),
            "default",
            &views(&[("a", up(0)), ("b", up(0))]),
            None,
            100,
        );
        assert_eq!(replicas(&p), vec![7, 5]);
        assert_eq!(scale_spec(&p.shares[0]).unwrap().namespace, "default");
    }

    #[test]
    fn an_unavailable_clusters_share_moves_to_the_others() {
        let p = plan(
            &two_clusters(),
            "default",
            &views(&[("a", up(0)), ("b", down())]),
            None,
            100,
        );
        assert_eq!(replicas(&p), vec![12, 0]);
        assert!(
            p.shares[1]
                .held_reason
                .as_deref()
                .unwrap()
                .contains("unavailable")
        );
    }

    /// Twelve replicas 60/40 over a and b, with `tolerations` (YAML flow list).
    fn tolerating(tolerations: &str) -> CrossClusterScalePolicySpec {
        spec(&format!(
            "targetRef: {{name: frontend}}\ndesiredReplicas: 12\ndistribution:\n- {{cluster: a, weight: 60}}\n- {{cluster: b, weight: 40}}\nplacement:\n  tolerations: {tolerations}\n"
        ))
    }

    #[test]
    fn the_policys_own_toleration_of_the_unreachable_taint_delays_the_failover() {
        let s = tolerating(
            "[{key: accord.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 30}]",
        );
        let both = views(&[("a", up(0)), ("b", up(0))]);
        let previous = record_of(&plan(&s, "default", &both, None, 90));
        let mut b = down();
        b.available_since_unix = 100;
        let cut = views(&[("a", up(0)), ("b", b)]);
        let within = plan(&s, "default", &cut, Some(&previous), 110);
        assert_eq!(replicas(&within), vec![7, 5]);
        assert_eq!(within.recheck_after, Some(Duration::from_secs(20)));
        let after = plan(&s, "default", &cut, Some(&previous), 130);
        // Moved to a; b keeps the 5 it runs meanwhile.
        assert_eq!(replicas(&after), vec![12, 5]);
        assert_eq!(after.moved_away, vec!["b".to_owned()]);
        assert_eq!(after.shares[1].hold, Some(Hold::Unavailable));

        // Tolerated for ever, or failover off: nothing moves.
        let for_ever =
            tolerating("[{key: accord.io/unreachable, operator: Exists, effect: NoExecute}]");
        assert_eq!(
            replicas(&plan(&for_ever, "default", &cut, Some(&previous), 10_000)),
            vec![7, 5]
        );
        let mut off = two_clusters();
        off.failover.enabled = false;
        assert_eq!(
            replicas(&plan(&off, "default", &cut, Some(&previous), 10_000)),
            vec![7, 5]
        );
    }

    #[test]
    fn available_capacity_divides_by_what_fits_once_every_cluster_has_said() {
        let mut s = two_clusters();
        s.weighting = Weighting::AvailableCapacity;
        let both = views(&[("a", up(0)), ("b", up(0))]);
        let divided = |spec: &CrossClusterScalePolicySpec, fits: &[(&str, u32)]| {
            let fits: HashMap<String, u32> =
                fits.iter().map(|(c, n)| ((*c).to_owned(), *n)).collect();
            plan_with(spec, "default", &both, None, 100, Some(&fits))
        };
        // b has not said: by weight, and the decision says why.
        let p = divided(&s, &[("a", 4)]);
        assert_eq!(replicas(&p), vec![7, 5]);
        let why = p.weighting.unwrap();
        assert!(why.contains("none yet from b"), "{why}");
        // Both have: 4 and 20 fit, 12 go 2 and 10.
        let p = divided(&s, &[("a", 4), ("b", 20)]);
        assert_eq!(replicas(&p), vec![2, 10]);
        assert_eq!(p.weighting, None);
        // Only 6 fit in all: each full, the other 6 by weight (60/40).
        assert_eq!(
            replicas(&divided(&s, &[("a", 1), ("b", 5)])),
            vec![1 + 4, 5 + 2]
        );
        // Static weighting ignores the estimates.
        let p = divided(&two_clusters(), &[("a", 4), ("b", 20)]);
        assert_eq!(replicas(&p), vec![7, 5]);
    }

    #[test]
    fn a_member_api_server_down_moves_the_share_only_where_the_policy_asks() {
        let mut frozen = up(0);
        frozen.api_server_unavailable_since_unix = Some(100);
        let both = views(&[("a", up(0)), ("b", up(0))]);
        let cut = views(&[("a", up(0)), ("b", frozen)]);
        // By default it keeps its share (its pods run on; the agent cannot scale them).
        let previous = record_of(&plan(&two_clusters(), "default", &both, None, 90));
        assert_eq!(
            replicas(&plan(
                &two_clusters(),
                "default",
                &cut,
                Some(&previous),
                1_000
            )),
            vec![7, 5]
        );
        let s = tolerating(
            "[{key: accord.io/api-server-unavailable, operator: Exists, tolerationSeconds: 0}]",
        );
        let p = plan(&s, "default", &cut, Some(&previous), 100);
        assert_eq!(replicas(&p), vec![12, 5]);
        let reason = p.shares[1].held_reason.as_deref().unwrap();
        assert!(
            reason.contains("member API server is unavailable"),
            "{reason}"
        );
    }

    #[test]
    fn when_no_cluster_is_available_every_cluster_keeps_its_last_count_and_takes_part_again_at_once()
     {
        let first = plan(
            &two_clusters(),
            "default",
            &views(&[("a", up(0)), ("b", up(0))]),
            None,
            100,
        );
        let previous = record_of(&first);
        let p = plan(
            &two_clusters(),
            "default",
            &views(&[("a", down()), ("b", down())]),
            Some(&previous),
            200,
        );
        assert_eq!(replicas(&p), vec![7, 5]);
        assert!(
            p.shares[0]
                .held_reason
                .as_deref()
                .unwrap()
                .contains("keeps its last count (7)")
        );
        // Back while the policy changed to 6: its count never moved away, so it takes the
        // new count at once, with no return cooldown; the other stays out.
        let mut six = two_clusters();
        six.desired_replicas = 6;
        let mut kept = record_of(&p);
        kept.decided_unix_millis = 200_000;
        let back = plan(
            &six,
            "default",
            &views(&[("a", up(201)), ("b", down())]),
            Some(&kept),
            202,
        );
        // b, still away, keeps what it was last told, up to its share of the new total.
        assert_eq!(replicas(&back), vec![6, 2]);
        assert_eq!(back.moved_away, vec!["b".to_owned()]);
        assert_eq!(back.shares[0].held_reason, None);
        // Without an earlier decision there is nothing to keep.
        let p = plan(
            &two_clusters(),
            "default",
            &views(&[("a", down()), ("b", down())]),
            None,
            200,
        );
        assert_eq!(replicas(&p), vec![0, 0]);
    }

    #[test]
    fn without_failover_an_unavailable_cluster_keeps_its_share() {
        let mut s = two_clusters();
        s.failover.enabled = false;
        let p = plan(
            &s,
            "default",
            &views(&[("a", up(0)), ("b", down())]),
            None,
            100,
        );
        assert_eq!(replicas(&p), vec![7, 5]);
    }

    #[test]
    fn a_returning_cluster_gets_its_share_back_once_after_the_cooldown() {
        let s = two_clusters(); // default cooldown 30 s
        let failed = plan(
            &s,
            "default",
            &views(&[("a", up(0)), ("b", down())]),
            None,
            100,
        );
        let prev = record_of(&failed);
        // b is back at t=200: held for 30 s.
        let during = plan(
            &s,
            "default",
            &views(&[("a", up(0)), ("b", up(200))]),
            Some(&prev),
            210,
        );
        assert_eq!(replicas(&during), vec![12, 0]);
        assert_eq!(during.recheck_after, Some(Duration::from_secs(20)));
        let after = plan(
            &s,
            "default",
            &views(&[("a", up(0)), ("b", up(200))]),
            Some(&record_of(&during)),
            230,
        );
        assert_eq!(replicas(&after), vec![7, 5]);
        assert_eq!(after.recheck_after, None);
        // Once back, it stays: a later plan keeps the same shares.
        let later = plan(
            &s,
            "default",
            &views(&[("a", up(0)), ("b", up(200))]),
            Some(&record_of(&after)),
            231,
        );
        assert_eq!(later.shares, after.shares);
    }

    #[test]
    fn a_returning_cluster_stays_held_through_decisions_made_during_its_cooldown() {
        let s = two_clusters(); // default cooldown 30 s
        let failed = plan(
            &s,
            "default",
            &views(&[("a", up(0)), ("b", down())]),
            None,
            100,
        );
        // The failover decision at 200.3 s; b is back at 200.6 s, which its
        // lastTransitionTime shows as 200: still after the decision, so held.
        let mut prev = record_of(&failed);
        prev.decided_unix_millis = 200_300;
        let first = plan(
            &s,
            "default",
            &views(&[("a", up(0)), ("b", up(200))]),
            Some(&prev),
            200,
        );
        assert_eq!(replicas(&first), vec![12, 0]);
        // Another decision at t=205 (a status change) after the one at 203 that held it:
        // still held, though b has been available since before that decision.
        let mut held = record_of(&first);
        held.decided_unix_millis = 203_000;
        let again = plan(
            &s,
            "default",
            &views(&[("a", up(0)), ("b", up(200))]),
            Some(&held),
            205,
        );
        assert_eq!(replicas(&again), vec![12, 0]);
        assert_eq!(again.recheck_after, Some(Duration::from_secs(25)));
    }

    #[test]
    fn a_cluster_seen_unavailable_only_through_a_stale_view_is_not_held() {
        let s = two_clusters();
        // The first decision (made at t=100) missed that b had been available since t=50.
        let stale = plan(
            &s,
            "default",
            &views(&[("a", up(0)), ("b", down())]),
            None,
            100,
        );
        let mut prev = record_of(&stale);
        prev.decided_unix_millis = 100_000;
        let next = plan(
            &s,
            "default",
            &views(&[("a", up(0)), ("b", up(50))]),
            Some(&prev),
            101,
        );
        assert_eq!(replicas(&next), vec![7, 5]);
    }

    fn three_clusters() -> CrossClusterScalePolicySpec {
        spec(
            "targetRef: {name: frontend}\ndesiredReplicas: 9\ndistribution:\n- {cluster: a, weight: 1}\n- {cluster: b, weight: 1}\n- {cluster: c, weight: 1}\n",
        )
    }

    #[test]
    fn the_return_cooldown_is_read_from_the_hold_not_from_the_message() {
        let s = three_clusters(); // default cooldown 30 s
        let all = views(&[("a", up(0)), ("b", up(0)), ("c", up(0))]);
        let before = plan(&s, "default", &all, None, 100);
        let down = views(&[
            ("a", up(0)),
            ("b", up(0)),
            (
                "c",
                ClusterInfo {
                    available_since_unix: 105,
                    ..ClusterInfo::default()
                },
            ),
        ]);
        let away = plan(&s, "default", &down, Some(&decided_at(&before, 100)), 110);
        let back = views(&[("a", up(0)), ("b", up(0)), ("c", up(200))]);
        let during = plan(&s, "default", &back, Some(&decided_at(&away, 110)), 201);
        // The previous decision, seen after c's return (a stale view would let c take part
        // at once), held c for its cooldown: c stays held whatever its message says.
        let mut reworded = decided_at(&during, 205);
        reworded.shares[2].held_reason = Some("reworded for humans".into());
        let next = plan(&s, "default", &back, Some(&reworded), 210);
        assert_eq!(next.moved_away, vec!["c".to_owned()]);
        // A share kept while no cluster was available had its share: no cooldown for it.
        let mut kept = decided_at(&during, 205);
        kept.shares[2].hold = Some(Hold::KeptLastCount);
        let next = plan(&s, "default", &back, Some(&kept), 210);
        assert!(next.moved_away.is_empty(), "{next:?}");
        assert_eq!(replicas(&next), vec![3, 3, 3]);
    }

    /// `p` as the previous decision, made at `at` seconds.
    fn decided_at(p: &Plan, at: i64) -> PlacementRecord<ScaleDecision> {
        let mut r = record_of(p);
        r.decided_unix_millis = at * 1000;
        r
    }

    #[test]
    fn a_cluster_away_and_back_keeps_what_it_runs_until_its_share_returns() {
        let s = three_clusters(); // default cooldown 30 s
        let all_up = views(&[("a", up(0)), ("b", up(0)), ("c", up(0))]);
        let steady = plan(&s, "default", &all_up, None, 100);
        assert_eq!(replicas(&steady), vec![3, 3, 3]);
        assert!(steady.moved_away.is_empty());

        // c is cut off at t=110: its share goes to a and b, but it is told to keep its 3,
        // so its agent, reconnecting to this decision, kills nothing.
        let cut = views(&[("a", up(0)), ("b", up(0)), ("c", down())]);
        let away = plan(&s, "default", &cut, Some(&decided_at(&steady, 100)), 110);
        assert_eq!(replicas(&away), vec![5, 4, 3]);
        assert_eq!(away.moved_away, vec!["c".to_owned()]);
        let reason = away.shares[2].held_reason.as_deref().unwrap();
        assert!(
            reason.contains("unavailable") && reason.contains("keeps running 3"),
            "{reason}"
        );

        // Back at t=200: held for its cooldown, still with its 3; a and b keep theirs.
        let back = views(&[("a", up(0)), ("b", up(0)), ("c", up(200))]);
        let during = plan(&s, "default", &back, Some(&decided_at(&away, 110)), 201);
        assert_eq!(replicas(&during), vec![5, 4, 3]);
        assert_eq!(during.moved_away, vec!["c".to_owned()]);
        assert_eq!(
            during.shares[2].hold,
            Some(Hold::ReturnCooldown { until_unix: 230 })
        );
        assert!(
            during.shares[2]
                .held_reason
                .as_deref()
                .unwrap()
                .starts_with("the cluster returned;")
        );
        let later = plan(&s, "default", &back, Some(&decided_at(&during, 201)), 215);
        assert_eq!(replicas(&later), vec![5, 4, 3]);

        // After the cooldown the others give back; c never went below 3.
        let after = plan(&s, "default", &back, Some(&decided_at(&later, 215)), 230);
        assert_eq!(replicas(&after), vec![3, 3, 3]);
        assert!(after.moved_away.is_empty());
        assert_eq!(after.shares[2].held_reason, None);
    }

    #[test]
    fn what_a_cluster_away_keeps_is_bounded_by_its_share_of_the_total() {
        let mut s = three_clusters();
        let all_up = views(&[("a", up(0)), ("b", up(0)), ("c", up(0))]);
        let steady = plan(&s, "default", &all_up, None, 100);
        let cut = views(&[("a", up(0)), ("b", up(0)), ("c", down())]);
        // Lowered to 3 while c is away: c keeps 1 (its share of 3), not the 3 it ran, so
        // the total runs over by at most c's own share.
        s.desired_replicas = 3;
        let away = plan(&s, "default", &cut, Some(&decided_at(&steady, 100)), 110);
        assert_eq!(replicas(&away), vec![2, 1, 1]);
        // Raised to 30: c keeps the 3 it was told, not more, until it is back.
        s.desired_replicas = 30;
        let away = plan(&s, "default", &cut, Some(&decided_at(&steady, 100)), 110);
        assert_eq!(replicas(&away), vec![15, 15, 3]);
        // A drained cluster is not away: it gets 0 at once.
        let mut drained = up(0);
        drained.unschedulable = true;
        let cl = views(&[("a", up(0)), ("b", up(0)), ("c", drained)]);
        let p = plan(&s, "default", &cl, Some(&decided_at(&steady, 100)), 110);
        assert_eq!(replicas(&p), vec![15, 15, 0]);
        assert!(p.moved_away.is_empty());
    }

    #[test]
    fn what_a_cluster_away_keeps_counts_toward_no_total_in_the_status() {
        let s = three_clusters();
        let all_up = views(&[("a", up(0)), ("b", up(0)), ("c", up(0))]);
        let steady = plan(&s, "default", &all_up, None, 100);
        let cut = views(&[("a", up(0)), ("b", up(0)), ("c", down())]);
        let away = record_of(&plan(
            &s,
            "default",
            &cut,
            Some(&decided_at(&steady, 100)),
            110,
        ));
        let now = Time(Timestamp::from_second(110).unwrap());
        let mut reports: HashMap<_, _> = [
            ("a".to_owned(), report(PlacementState::Synced, "id-1", 5)),
            ("b".to_owned(), report(PlacementState::Synced, "id-1", 4)),
            ("c".to_owned(), report(PlacementState::Synced, "id-0", 3)),
        ]
        .into();
        let st = status_of(&away, &reports, &cut, None, &now);
        let c = &st.placements[2];
        assert_eq!(
            (c.state, c.desired_replicas),
            (PlacementState::Unavailable, 3)
        );
        assert!(c.message.as_deref().unwrap().contains("keeps running 3"));
        assert_eq!(st.ready_replicas, Some(9));
        assert!(conditions::is_true(&st.conditions, "Ready"));
        assert!(!conditions::is_true(&st.conditions, "Degraded"));

        // Back and in its cooldown: its 3 ready pods do not count toward the 9, and its
        // placement says why it runs them.
        let back = views(&[("a", up(0)), ("b", up(0)), ("c", up(200))]);
        let mut during = record_of(&plan(&s, "default", &back, Some(&away), 201));
        during.decided_unix_millis = 201_000;
        reports.insert("c".to_owned(), report(PlacementState::Synced, "id-1", 3));
        let st = status_of(&during, &reports, &back, None, &now);
        let c = &st.placements[2];
        assert_eq!((c.state, c.desired_replicas), (PlacementState::Synced, 3));
        assert!(
            c.message
                .as_deref()
                .unwrap()
                .starts_with("the cluster returned;")
        );
        assert_eq!(st.ready_replicas, Some(9));
        assert!(conditions::is_true(&st.conditions, "Ready"));
    }

    #[test]
    fn max_skew_keeps_the_regions_totals_close_and_says_when_it_cannot() {
        let in_region = |region: &str| {
            let mut c = up(0);
            c.labels.insert("region".into(), region.into());
            c
        };
        let clusters = views(&[
            ("a", in_region("us")),
            ("b", in_region("us")),
            ("c", in_region("eu")),
        ]);
        let skewed = |extra: &str| {
            spec(&format!(
                "targetRef: {{name: frontend}}\ndesiredReplicas: 10\nplacement: {{clusters: [a, b, c], spread: {{byLabel: region, maxSkew: 2}}}}\ndistribution:\n- {{cluster: a, weight: 8}}\n- {{cluster: b, weight: 8}}\n- {{cluster: c, weight: 1{extra}}}\n"
            ))
        };
        // By weight: 5, 4, 1 (us 9, eu 1); within 2: us 6, eu 4.
        let p = plan(&skewed(""), "default", &clusters, None, 100);
        assert_eq!(replicas(&p), vec![3, 3, 4]);
        assert_eq!(p.infeasible, None);
        // eu capped at 1: no totals within 2 add up to 10; the division by weight stands.
        let p = plan(&skewed(", maxReplicas: 1"), "default", &clusters, None, 100);
        assert_eq!(replicas(&p), vec![5, 4, 1]);
        assert!(
            p.infeasible.as_deref().unwrap().contains("maxSkew 2"),
            "{:?}",
            p.infeasible
        );
    }

    #[test]
    fn a_drained_cluster_gets_nothing() {
        let mut b = up(0);
        b.unschedulable = true;
        let p = plan(
            &two_clusters(),
            "default",
            &views(&[("a", up(0)), ("b", b)]),
            None,
            100,
        );
        assert_eq!(replicas(&p), vec![12, 0]);
    }

    fn tainted(effect: &str, since: i64) -> ClusterInfo {
        let mut c = up(0);
        c.taints = crate::distribution::taints::taints_of(
            &serde_json::json!({"taints": [{"key": "maintenance", "effect": effect}]}),
        );
        c.taints[0].since_unix = since;
        c
    }

    #[test]
    fn an_untolerated_no_execute_taint_moves_the_share_and_a_toleration_delays_it() {
        let views = views(&[("a", up(0)), ("b", tainted("NoExecute", 100))]);
        let p = plan(&two_clusters(), "default", &views, None, 100);
        assert_eq!(replicas(&p), vec![12, 0]);
        assert_eq!(p.shares[1].hold, Some(Hold::Tainted));
        assert!(
            p.shares[1]
                .held_reason
                .as_deref()
                .unwrap()
                .contains("maintenance:NoExecute"),
            "{:?}",
            p.shares[1]
        );

        let mut tolerant = two_clusters();
        tolerant.placement = Some(
            serde_json::from_value(serde_json::json!({"clusters": ["a", "b"],
                "tolerations": [{"key": "maintenance", "operator": "Exists",
                                 "effect": "NoExecute", "tolerationSeconds": 30}]}))
            .unwrap(),
        );
        let within = plan(&tolerant, "default", &views, None, 110);
        assert_eq!(replicas(&within), vec![7, 5]);
        assert_eq!(within.recheck_after, Some(Duration::from_secs(20)));
        let after = plan(&tolerant, "default", &views, None, 130);
        assert_eq!(replicas(&after), vec![12, 0]);
    }

    #[test]
    fn a_no_schedule_taint_keeps_a_new_share_out_but_not_a_running_one() {
        let fleet = views(&[("a", up(0)), ("b", tainted("NoSchedule", 0))]);
        let first = plan(&two_clusters(), "default", &fleet, None, 100);
        assert_eq!(replicas(&first), vec![12, 0]);
        let untainted = views(&[("a", up(0)), ("b", up(0))]);
        let running = plan(&two_clusters(), "default", &untainted, None, 100);
        let record = PlacementRecord {
            placed: accord_common::distribution::PlacedRef::new(
                accord_common::distribution::PlacedKind::CrossClusterScalePolicy,
                "default",
                "web",
            ),
            generation: 1,
            decided_unix_millis: 50_000,
            shares: running.shares,
            decision: ScaleDecision {
                desired_replicas: 12,
                scale_request_id: "r".into(),
                infeasible: None,
                moved_away: Vec::new(),
                weighting: None,
            },
            traceparent: String::new(),
        };
        let kept = plan(&two_clusters(), "default", &fleet, Some(&record), 100);
        assert_eq!(replicas(&kept), vec![7, 5]);
    }

    #[test]
    fn a_prefer_no_schedule_cluster_is_used_only_when_the_others_lack_room() {
        let views = views(&[("a", up(0)), ("b", tainted("PreferNoSchedule", 0))]);
        let p = plan(&two_clusters(), "default", &views, None, 100);
        assert_eq!(replicas(&p), vec![12, 0]);
        let capped = spec(
            "targetRef: {name: frontend}\ndesiredReplicas: 12\ndistribution:\n- {cluster: a, weight: 60, maxReplicas: 8}\n- {cluster: b, weight: 40}\n",
        );
        let p = plan(&capped, "default", &views, None, 100);
        assert_eq!(replicas(&p), vec![8, 4]);
    }

    fn report(state: PlacementState, id: &str, ready: i32) -> StatusRecord {
        StatusRecord {
            resource_version: "1".into(),
            generation: 1,
            applied_revision: 1,
            state,
            message: String::new(),
            observed_unix_millis: 1_000,
            observed: Observed::Scale(ScaleObserved {
                ready,
                scale_request_id: id.into(),
                ..ScaleObserved::default()
            }),
            api_server_unavailable: false,
        }
    }

    fn status_of(
        rec: &PlacementRecord<ScaleDecision>,
        reports: &HashMap<String, StatusRecord>,
        cl: &Clusters,
        old: Option<&CrossClusterScalePolicyStatus>,
        now: &Time,
    ) -> CrossClusterScalePolicyStatus {
        aggregate(&AggregateInputs {
            shares: &rec.shares,
            decision: &rec.decision,
            reports,
            clusters: cl,
            generation: Some(1),
            old,
            decided_at: now,
            now,
        })
    }

    #[test]
    fn status_is_ready_when_every_placement_is_synced_and_ready() {
        let cl = views(&[("a", up(0)), ("b", up(0))]);
        let rec = record_of(&plan(&two_clusters(), "default", &cl, None, 100));
        let reports: HashMap<_, _> = [
            ("a".to_owned(), report(PlacementState::Synced, "id-1", 7)),
            ("b".to_owned(), report(PlacementState::Synced, "id-1", 5)),
        ]
        .into();
        let now = Time(Timestamp::from_second(100).unwrap());
        let st = status_of(&rec, &reports, &cl, None, &now);
        assert_eq!(st.ready_replicas, Some(12));
        assert!(conditions::is_true(&st.conditions, "Ready"));
        assert!(!conditions::is_true(&st.conditions, "Degraded"));
        assert!(
            st.placements
                .iter()
                .all(|p| p.state == PlacementState::Synced)
        );
        assert!(!status_changed(
            Some(&st),
            &status_of(&rec, &reports, &cl, Some(&st), &now)
        ));
    }

    #[test]
    fn reports_for_an_older_decision_leave_the_placement_pending() {
        let cl = views(&[("a", up(0)), ("b", up(0))]);
        let rec = record_of(&plan(&two_clusters(), "default", &cl, None, 100));
        let reports: HashMap<_, _> = [
            ("a".to_owned(), report(PlacementState::Synced, "id-0", 6)),
            ("b".to_owned(), report(PlacementState::Conflict, "id-1", 5)),
        ]
        .into();
        let now = Time(Timestamp::from_second(100).unwrap());
        let st = status_of(&rec, &reports, &cl, None, &now);
        assert_eq!(st.placements[0].state, PlacementState::Pending);
        assert_eq!(st.placements[1].state, PlacementState::Conflict);
        assert!(conditions::is_true(&st.conditions, "Degraded"));
        assert!(!conditions::is_true(&st.conditions, "Ready"));
    }
}
