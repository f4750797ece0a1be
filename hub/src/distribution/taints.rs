//! Which selected clusters may hold a placement, for every kind: a ManagedCluster's taints
//! (`spec.taints`) against the object's `spec.placement.tolerations`, and its drain switch
//! (`spec.unschedulable`).
//!
//! - `NoSchedule` (not tolerated) and `unschedulable`: no new placement; a cluster that
//!   holds one keeps it.
//! - `NoExecute` (not tolerated): no placement, and one held is taken away — at once, or
//!   `tolerationSeconds` after the hub first saw the taint when a toleration gives them.
//! - `PreferNoSchedule` (not tolerated): avoided where another cluster can take the place
//!   (divided replicas); a kind that sends every selected cluster its own copy has nothing
//!   to move, so there it changes nothing.
//!
//! The hub's own taints, `accord.io/unreachable` and `accord.io/api-server-unavailable`
//! (both NoExecute), come from the cluster's conditions, not from its spec (where the
//! cluster status controller writes them for people to see): the decision never waits for
//! that write, and the time a toleration counts from is the condition's transition. An
//! object whose tolerations match neither tolerates them for ever: removing what an
//! unreachable cluster runs cannot be done until it is back, and eviction on a heartbeat
//! lost is what Karmada's users learned to turn off. CrossClusterScalePolicy's failover is
//! the exception it asks for itself (a default toleration of 0 seconds, see
//! `scale::plan`).
//!
//! [`judge`] is the one rule; [`hold_tainted`] applies it to the shares of a kind that
//! sends every selected cluster the same content (the framework does that after the kind
//! decided), and CrossClusterScalePolicy's division reads [`judge`] itself.

use accord_crds::managed_cluster::{
    API_SERVER_UNAVAILABLE_TAINT, TaintEffect, UNREACHABLE_TAINT, is_hub_taint,
};
use accord_crds::placement::Toleration;

use super::record::{Hold, ShareRecord};
use super::select::{ClusterInfo, Clusters, SelectedCluster};

/// A ManagedCluster taint as the hub sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenTaint {
    /// Its key.
    pub key: String,
    /// Its value, if any.
    pub value: Option<String>,
    /// Its effect.
    pub effect: TaintEffect,
    /// When this hub first saw it, Unix seconds (0 where not tracked: the reflector's own
    /// view, compared only for changes).
    pub since_unix: i64,
}

impl SeenTaint {
    /// `key=value:Effect`, as kubectl writes a taint.
    pub fn shown(&self) -> String {
        match &self.value {
            Some(v) => format!("{}={v}:{:?}", self.key, self.effect),
            None => format!("{}:{:?}", self.key, self.effect),
        }
    }

    fn same(&self, other: &Self) -> bool {
        self.key == other.key && self.value == other.value && self.effect == other.effect
    }
}

/// The taints of a stored ManagedCluster `spec`, each read on its own so that one that does
/// not decode leaves the others (the CRD's schema keeps such a taint out in the first place).
pub fn taints_of(spec: &serde_json::Value) -> Vec<SeenTaint> {
    spec.get("taints")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| {
            serde_json::from_value::<accord_crds::managed_cluster::ClusterTaint>(t.clone()).ok()
        })
        // The hub's own are read from the conditions they stand for ([`observed`]).
        .filter(|t| !is_hub_taint(&t.key))
        .map(|t| SeenTaint {
            key: t.key,
            value: t.value,
            effect: t.effect,
            since_unix: 0,
        })
        .collect()
}

/// The hub's own taints on `cluster`, from its conditions, each dated from the
/// condition's transition.
pub fn observed(cluster: &ClusterInfo) -> impl Iterator<Item = SeenTaint> {
    let hub_taint = |key: &str, since_unix| SeenTaint {
        key: key.to_owned(),
        value: None,
        effect: TaintEffect::NoExecute,
        since_unix,
    };
    let unreachable =
        (!cluster.available).then(|| hub_taint(UNREACHABLE_TAINT, cluster.available_since_unix));
    let api_server = cluster
        .api_server_unavailable_since_unix
        .map(|since| hub_taint(API_SERVER_UNAVAILABLE_TAINT, since));
    unreachable.into_iter().chain(api_server)
}

/// `taints` with the time each was first seen: from `before` (the same cluster's previous
/// view) where it was there already, `now_unix` where it is new.
pub fn carry_since(taints: &mut [SeenTaint], before: Option<&ClusterInfo>, now_unix: i64) {
    for taint in taints {
        taint.since_unix = before
            .and_then(|b| b.taints.iter().find(|t| t.same(taint)))
            .map_or(now_unix, |t| t.since_unix);
    }
}

/// What a cluster's taints and drain switch allow an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It may hold a placement.
    Eligible,
    /// It may, but only where no other cluster can take the place (PreferNoSchedule).
    Avoid(String),
    /// It may not: no placement (and why).
    Held(Hold, String),
}

/// The verdict on one cluster, and when it changes by itself (a NoExecute toleration's
/// seconds running out), Unix seconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    /// What the cluster is allowed.
    pub verdict: Verdict,
    /// When to judge again without any event.
    pub recheck_at_unix: Option<i64>,
    /// The taint that holds the cluster back or has it avoided (`key=value:Effect`).
    pub taint: Option<String>,
    /// Whether that taint is one the hub set from what it observes ([`observed`]): the
    /// cluster is away, not refused.
    pub observed: bool,
}

/// The one rule: may `cluster` hold a placement of an object with `tolerations`, given
/// whether it `holds` one now?
pub fn judge(
    cluster: &ClusterInfo,
    tolerations: &[Toleration],
    holds: bool,
    now_unix: i64,
) -> Judgement {
    let tolerating = |t: &SeenTaint| {
        tolerations
            .iter()
            .filter(|tol| tol.tolerates(&t.key, t.value.as_deref(), t.effect))
            // The most generous toleration wins: none without seconds means for ever.
            .map(|tol| tol.toleration_seconds)
            .max_by_key(|s| s.map_or(i64::MAX, |s| s))
            // The hub's own taints are tolerated unless the object says otherwise.
            .or_else(|| is_hub_taint(&t.key).then_some(None))
    };
    let mut recheck_at_unix = None;
    let mut avoid = None;
    let mut refused = None;
    // The hub's own, from the conditions: none (no allocation) for a cluster that is up.
    let hubs: Vec<SeenTaint> = observed(cluster).collect();
    for taint in cluster.taints.iter().chain(&hubs) {
        let tolerated = tolerating(taint);
        let observed = is_hub_taint(&taint.key);
        match (taint.effect, tolerated) {
            (TaintEffect::NoExecute, None) => {
                return Judgement {
                    verdict: Verdict::Held(Hold::Tainted, untolerated(taint)),
                    recheck_at_unix: None,
                    taint: Some(taint.shown()),
                    observed,
                };
            }
            (TaintEffect::NoExecute, Some(Some(seconds))) => {
                let ends = taint.since_unix.saturating_add(seconds);
                if now_unix >= ends {
                    return Judgement {
                        verdict: Verdict::Held(
                            Hold::Tainted,
                            format!(
                                "the cluster has taint {}, tolerated for {seconds}s, which ended",
                                taint.shown()
                            ),
                        ),
                        recheck_at_unix: None,
                        taint: Some(taint.shown()),
                        observed,
                    };
                }
                recheck_at_unix = super::earliest(recheck_at_unix, ends);
            }
            (TaintEffect::NoSchedule, None) if !holds => {
                refused.get_or_insert_with(|| (untolerated(taint), taint.shown()));
            }
            (TaintEffect::PreferNoSchedule, None) => {
                avoid.get_or_insert_with(|| (untolerated(taint), taint.shown()));
            }
            _ => {}
        }
    }
    let (verdict, taint) = if let Some((reason, shown)) = refused {
        (Verdict::Held(Hold::Tainted, reason), Some(shown))
    } else if cluster.unschedulable && !holds {
        (
            Verdict::Held(
                Hold::Unschedulable,
                "the cluster is unschedulable (drained): no new placement".to_owned(),
            ),
            None,
        )
    } else if let Some((reason, shown)) = avoid {
        (Verdict::Avoid(reason), Some(shown))
    } else {
        (Verdict::Eligible, None)
    };
    Judgement {
        verdict,
        recheck_at_unix,
        taint,
        observed: false,
    }
}

fn untolerated(taint: &SeenTaint) -> String {
    format!(
        "the cluster has taint {}, which this object does not tolerate",
        taint.shown()
    )
}

/// Whether `cluster` has a taint (its own or the hub's) or its drain switch on: a cluster
/// without any is eligible for any object ([`judge`] need not be asked, nor where the
/// object was placed).
fn restricts(cluster: &ClusterInfo) -> bool {
    !cluster.taints.is_empty()
        || cluster.unschedulable
        || !cluster.available
        || cluster.api_server_unavailable_since_unix.is_some()
}

/// The tolerations of a stored object's `spec.placement` (none when they do not decode:
/// the spec's own validation refuses such an object first).
pub fn tolerations_of(spec_placement: Option<&serde_json::Value>) -> Vec<Toleration> {
    spec_placement
        .and_then(|p| p.get("tolerations"))
        .and_then(|t| serde_json::from_value(t.clone()).ok())
        .unwrap_or_default()
}

/// Holds back the shares of a kind that sends every selected cluster the same content
/// where the cluster's taints or drain switch do not allow a placement ([`judge`]; a share
/// the previous decision sent counts as held now: `held_before`). Returns when to decide
/// again without any event (a NoExecute toleration running out), Unix seconds.
pub fn hold_tainted(
    shares: &mut [ShareRecord],
    clusters: &Clusters,
    tolerations: &[Toleration],
    held_before: impl Fn(&str) -> bool,
    now_unix: i64,
) -> Option<i64> {
    let mut recheck: Option<i64> = None;
    for share in shares.iter_mut().filter(|s| s.assignment.is_some()) {
        let Some(cluster) = clusters.get(&share.cluster).filter(|c| restricts(c)) else {
            continue;
        };
        let judgement = judge(cluster, tolerations, held_before(&share.cluster), now_unix);
        if let Some(at) = judgement.recheck_at_unix {
            recheck = super::earliest(recheck, at);
        }
        if let Verdict::Held(hold, reason) = judgement.verdict {
            share.assignment = None;
            share.hold = Some(hold);
            share.held_reason = Some(reason);
        }
    }
    recheck
}

/// The selected clusters split by [`judge`], for a kind that needs to know before it
/// decides (FederatedKafkaUser removes the user where a placement is taken away).
#[derive(Debug, Default)]
pub struct Partition {
    /// Clusters that may hold a placement (unregistered ones too: the kind says so).
    pub eligible: Vec<SelectedCluster>,
    /// Shares of the clusters held back, each with its hold and reason.
    pub held: Vec<ShareRecord>,
    /// When to decide again without any event, Unix seconds.
    pub recheck_at_unix: Option<i64>,
}

/// Splits `selected` into the clusters that may hold a placement and those held back
/// ([`judge`]; `held_before` says where the previous decision sent something).
pub fn partition(
    selected: Vec<SelectedCluster>,
    clusters: &Clusters,
    tolerations: &[Toleration],
    held_before: impl Fn(&str) -> bool,
    now_unix: i64,
) -> Partition {
    let mut out = Partition::default();
    for c in selected {
        let Some(info) = clusters.get(&c.name).filter(|c| restricts(c)) else {
            out.eligible.push(c);
            continue;
        };
        let judgement = judge(info, tolerations, held_before(&c.name), now_unix);
        if let Some(at) = judgement.recheck_at_unix {
            out.recheck_at_unix = super::earliest(out.recheck_at_unix, at);
        }
        match judgement.verdict {
            Verdict::Held(hold, reason) => out.held.push(ShareRecord {
                since: None,
                cluster: c.name,
                assignment: None,
                held_reason: Some(reason),
                hold: Some(hold),
            }),
            Verdict::Eligible | Verdict::Avoid(_) => out.eligible.push(c),
        }
    }
    out
}

/// `at` (Unix seconds) as a wait from `now_unix`, at least a second.
pub fn wait_until(at: i64, now_unix: i64) -> std::time::Duration {
    std::time::Duration::from_secs(u64::try_from(at - now_unix).unwrap_or(0).max(1))
}

#[cfg(test)]
mod tests {
    use accord_crds::placement::TolerationOperator;
    use proptest::prelude::*;

    use super::*;

    fn cluster(taints: &[(&str, Option<&str>, TaintEffect, i64)], drained: bool) -> ClusterInfo {
        ClusterInfo {
            available: true,
            unschedulable: drained,
            taints: taints
                .iter()
                .map(|(k, v, e, since)| SeenTaint {
                    key: (*k).to_owned(),
                    value: v.map(str::to_owned),
                    effect: *e,
                    since_unix: *since,
                })
                .collect(),
            ..ClusterInfo::default()
        }
    }

    fn toleration(key: &str, effect: Option<TaintEffect>, seconds: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.to_owned()),
            operator: Some(TolerationOperator::Exists),
            effect,
            toleration_seconds: seconds,
            ..Toleration::default()
        }
    }

    use TaintEffect::{NoExecute, NoSchedule, PreferNoSchedule};

    #[test]
    fn no_schedule_keeps_new_placements_out_and_lets_existing_ones_stay() {
        let c = cluster(&[("maintenance", None, NoSchedule, 0)], false);
        let new = judge(&c, &[], false, 10);
        assert!(
            matches!(&new.verdict, Verdict::Held(Hold::Tainted, r) if r.contains("maintenance:NoSchedule")),
            "{new:?}"
        );
        assert_eq!(judge(&c, &[], true, 10).verdict, Verdict::Eligible);
        let tolerated = [toleration("maintenance", Some(NoSchedule), None)];
        assert_eq!(judge(&c, &tolerated, false, 10).verdict, Verdict::Eligible);
    }

    #[test]
    fn the_hubs_own_taints_come_from_the_conditions_and_are_tolerated_unless_the_object_says_otherwise()
     {
        // Written in the spec for people to see, but read from the conditions.
        let spec = serde_json::json!({"taints": [
            {"key": UNREACHABLE_TAINT, "effect": "NoExecute"},
            {"key": "maintenance", "effect": "NoSchedule"},
        ]});
        let read: Vec<String> = taints_of(&spec).iter().map(SeenTaint::shown).collect();
        assert_eq!(read, ["maintenance:NoSchedule"]);

        let mut c = cluster(&[], false);
        assert_eq!(observed(&c).count(), 0);
        assert!(!restricts(&c));
        c.available = false;
        c.available_since_unix = 100;
        assert!(restricts(&c));
        let shown: Vec<String> = observed(&c).map(|t| t.shown()).collect();
        assert_eq!(shown, ["accord.io/unreachable:NoExecute"]);
        // Named by no toleration: tolerated for ever, new placements included.
        assert_eq!(judge(&c, &[], true, 1_000_000).verdict, Verdict::Eligible);
        assert_eq!(judge(&c, &[], false, 1_000_000).verdict, Verdict::Eligible);
        // Named with seconds: counted from the condition's transition.
        let for_30 = [toleration(UNREACHABLE_TAINT, Some(NoExecute), Some(30))];
        let within = judge(&c, &for_30, true, 129);
        assert_eq!(within.verdict, Verdict::Eligible);
        assert_eq!(within.recheck_at_unix, Some(130));
        let after = judge(&c, &for_30, true, 130);
        assert!(
            matches!(after.verdict, Verdict::Held(Hold::Tainted, _)),
            "{after:?}"
        );
        assert!(after.observed);
        // A user's taint that holds the cluster back is not the hub's.
        let mine = cluster(&[("maintenance", None, NoExecute, 0)], false);
        assert!(!judge(&mine, &[], true, 0).observed);

        // The member API server down, the agent connected.
        c.available = true;
        c.api_server_unavailable_since_unix = Some(200);
        let shown: Vec<String> = observed(&c).map(|t| t.shown()).collect();
        assert_eq!(shown, ["accord.io/api-server-unavailable:NoExecute"]);
        assert_eq!(judge(&c, &[], true, 1_000).verdict, Verdict::Eligible);
        let at_once = [toleration(API_SERVER_UNAVAILABLE_TAINT, None, Some(0))];
        let moved = judge(&c, &at_once, true, 200);
        assert!(
            moved.observed && matches!(moved.verdict, Verdict::Held(..)),
            "{moved:?}"
        );
        // An empty Exists toleration tolerates every taint for ever, the hub's too.
        let everything = Toleration {
            operator: Some(TolerationOperator::Exists),
            ..Toleration::default()
        };
        assert_eq!(
            judge(&c, &[everything], true, 1_000).verdict,
            Verdict::Eligible
        );
    }

    #[test]
    fn a_drained_cluster_gets_nothing_new_and_keeps_what_it_has() {
        let c = cluster(&[], true);
        assert!(matches!(
            judge(&c, &[], false, 0).verdict,
            Verdict::Held(Hold::Unschedulable, _)
        ));
        assert_eq!(judge(&c, &[], true, 0).verdict, Verdict::Eligible);
    }

    #[test]
    fn no_execute_takes_placements_away_after_the_tolerated_seconds() {
        let c = cluster(&[("zone-down", Some("eu"), NoExecute, 100)], false);
        assert!(matches!(
            judge(&c, &[], true, 100).verdict,
            Verdict::Held(Hold::Tainted, _)
        ));
        let for_30 = [toleration("zone-down", Some(NoExecute), Some(30))];
        let within = judge(&c, &for_30, true, 129);
        assert_eq!(within.verdict, Verdict::Eligible);
        assert_eq!(within.recheck_at_unix, Some(130));
        let after = judge(&c, &for_30, true, 130);
        assert!(
            matches!(&after.verdict, Verdict::Held(Hold::Tainted, r) if r.contains("tolerated for 30s")),
            "{after:?}"
        );
        let for_ever = [toleration("zone-down", None, None)];
        assert_eq!(
            judge(&c, &for_ever, true, 1_000_000),
            Judgement {
                verdict: Verdict::Eligible,
                recheck_at_unix: None,
                taint: None,
                observed: false,
            }
        );
    }

    #[test]
    fn prefer_no_schedule_is_only_avoided() {
        let c = cluster(&[("spot", None, PreferNoSchedule, 0)], false);
        assert!(matches!(
            judge(&c, &[], false, 0).verdict,
            Verdict::Avoid(_)
        ));
        let tolerated = [toleration("spot", None, None)];
        assert_eq!(judge(&c, &tolerated, false, 0).verdict, Verdict::Eligible);
    }

    #[test]
    fn an_equal_toleration_needs_the_same_value_and_an_empty_exists_tolerates_all() {
        let c = cluster(&[("team", Some("a"), NoSchedule, 0)], false);
        let equal = |v: &str| Toleration {
            key: Some("team".into()),
            value: Some(v.into()),
            ..Toleration::default()
        };
        assert_eq!(
            judge(&c, &[equal("a")], false, 0).verdict,
            Verdict::Eligible
        );
        assert!(matches!(
            judge(&c, &[equal("b")], false, 0).verdict,
            Verdict::Held(..)
        ));
        let everything = Toleration {
            operator: Some(TolerationOperator::Exists),
            ..Toleration::default()
        };
        assert_eq!(
            judge(&c, &[everything], false, 0).verdict,
            Verdict::Eligible
        );
    }

    #[test]
    fn taints_keep_the_time_they_were_first_seen() {
        let before = cluster(&[("a", None, NoExecute, 5)], false);
        let mut now = taints_of(&serde_json::json!({"taints": [
            {"key": "a", "effect": "NoExecute"},
            {"key": "b", "value": "x", "effect": "NoSchedule"},
            {"key": "bad", "effect": "Sometimes"},
        ]}));
        carry_since(&mut now, Some(&before), 50);
        let since: Vec<(&str, i64)> = now.iter().map(|t| (t.key.as_str(), t.since_unix)).collect();
        assert_eq!(since, [("a", 5), ("b", 50)]);
    }

    #[test]
    fn a_partition_keeps_unregistered_clusters_for_the_kind_and_holds_the_tainted() {
        let clusters: Clusters = [
            ("a".to_owned(), cluster(&[], false)),
            ("b".to_owned(), cluster(&[("x", None, NoExecute, 0)], false)),
            ("c".to_owned(), cluster(&[("m", None, NoExecute, 0)], false)),
        ]
        .into_iter()
        .collect();
        let selected = ["a", "b", "c", "ghost"]
            .map(|n| SelectedCluster {
                name: n.to_owned(),
                known: n != "ghost",
            })
            .to_vec();
        let tolerate_c = Toleration {
            key: Some("m".into()),
            operator: Some(TolerationOperator::Exists),
            effect: Some(NoExecute),
            toleration_seconds: Some(60),
            ..Toleration::default()
        };
        // c is tolerated for 60 s from 0: eligible at 10, re-decided at 60.
        let part = partition(selected, &clusters, &[tolerate_c], |_| true, 10);
        let eligible: Vec<&str> = part.eligible.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(eligible, ["a", "c", "ghost"]);
        assert_eq!(part.held.len(), 1);
        assert_eq!(
            (part.held[0].cluster.as_str(), part.held[0].hold),
            ("b", Some(Hold::Tainted))
        );
        assert!(part.held[0].assignment.is_none());
        assert_eq!(part.recheck_at_unix, Some(60));
        assert_eq!(wait_until(60, 10), std::time::Duration::from_secs(50));
        assert_eq!(wait_until(5, 10), std::time::Duration::from_secs(1));
    }

    fn effect() -> impl Strategy<Value = TaintEffect> {
        prop_oneof![Just(NoSchedule), Just(PreferNoSchedule), Just(NoExecute)]
    }

    proptest! {
        /// No placement, new or kept, on a NoExecute taint nothing tolerates; no new
        /// placement on a NoSchedule one; PreferNoSchedule never holds anything back.
        #[test]
        fn untolerated_hard_taints_hold_placements_back(
            taints in proptest::collection::vec(("[ab]", effect()), 0..4),
            tolerated in proptest::collection::vec("[ab]", 0..2),
            holds in any::<bool>(),
            drained in any::<bool>(),
        ) {
            let seen: Vec<(&str, Option<&str>, TaintEffect, i64)> =
                taints.iter().map(|(k, e)| (k.as_str(), None, *e, 0)).collect();
            let c = cluster(&seen, drained);
            let tolerations: Vec<Toleration> =
                tolerated.iter().map(|k| toleration(k, None, None)).collect();
            let untolerated = |effect| taints.iter().any(|(k, e)| *e == effect && !tolerated.contains(k));
            let verdict = judge(&c, &tolerations, holds, 1_000).verdict;
            let hard = untolerated(NoExecute) || (!holds && (untolerated(NoSchedule) || drained));
            prop_assert_eq!(matches!(verdict, Verdict::Held(..)), hard, "{:?}", verdict);
            if !hard {
                prop_assert_eq!(matches!(verdict, Verdict::Avoid(_)), untolerated(PreferNoSchedule));
            }
        }
    }
}
