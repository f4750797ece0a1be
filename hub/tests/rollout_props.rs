//! Property tests for the rollout step planner (`accord_hub::distribution::rollout`): a
//! fleet of clusters in groups, some of which never become healthy on the new revision,
//! stepped on a simulated clock from each step's own recheck time. At every step: never
//! more than `max_concurrency` updating, clusters sent in group order (a group only after
//! the previous ones are done, per group), the canary first, nothing sent after the stop,
//! and the stop never later than `max_failures` plus what was in flight. Every rollout
//! ends, and a clean fleet always succeeds.

use accord_hub::distribution::rollout::{
    Heard, Limit, Member, Phase, Progress, Rules, Strategy as Steps, step,
};
use proptest::prelude::*;

/// One simulated cluster: its group, and after how long being sent the revision it turns
/// healthy (`None`: never, a bad change there).
#[derive(Clone, Debug)]
struct Cluster {
    group: usize,
    healthy_after: Option<i64>,
}

fn fleet() -> impl Strategy<Value = Vec<Cluster>> {
    let cluster = (
        0..4usize,
        prop_oneof![4 => (0..30_000i64).prop_map(Some), 1 => Just(None)],
    )
        .prop_map(|(group, healthy_after)| Cluster {
            group,
            healthy_after,
        });
    prop::collection::vec(cluster, 1..=24)
}

fn limit() -> impl Strategy<Value = Limit> {
    prop_oneof![
        (0..5u32).prop_map(Limit::Count),
        (1..=100u32).prop_map(Limit::Percent)
    ]
}

fn rules() -> impl Strategy<Value = Rules> {
    (
        prop_oneof![
            Just(Steps::All),
            Just(Steps::Progressive),
            Just(Steps::ProgressivePerGroup)
        ],
        limit(),
        limit(),
        0..20_000i64,
        1_000..40_000i64,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(strategy, max_concurrency, max_failures, soak, deadline, rollback, canary)| Rules {
                strategy,
                max_concurrency,
                max_failures,
                min_success_ms: soak,
                progress_deadline_ms: deadline,
                paused: false,
                auto_rollback: rollback,
                canary,
            },
        )
}

/// What each cluster's agent says at `now`, given what it was sent.
fn members(fleet: &[Cluster], progress: &Progress, now: i64) -> Vec<Member> {
    fleet
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let name = format!("c{i:02}");
            let heard = match (progress.sent.get(&name), c.healthy_after) {
                (Some(sent), Some(after)) if now - sent >= after => Heard::Healthy,
                (Some(_), None) => Heard::Unhealthy("0/3 available".into()),
                _ => Heard::Nothing,
            };
            Member {
                name,
                group: c.group,
                heard,
            }
        })
        .collect()
}

/// The next time anything changes: the planner's recheck, or a sent cluster turning
/// healthy.
fn next(fleet: &[Cluster], progress: &Progress, recheck: Option<i64>, now: i64) -> Option<i64> {
    let turns = fleet.iter().enumerate().filter_map(|(i, c)| {
        let sent = progress.sent.get(&format!("c{i:02}"))?;
        Some(sent + c.healthy_after?).filter(|&t| t > now)
    });
    turns.chain(recheck).filter(|&t| t > now).min()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn every_rollout_keeps_its_bounds_and_ends(fleet in fleet(), rules in rules()) {
        let n = fleet.len();
        let failures = rules.max_failures.failures(n);
        let mut progress = Progress::default();
        let mut now = 0i64;
        let mut stopped_at = None;
        for _ in 0..10_000 {
            let m = members(&fleet, &progress, now);
            let s = step(&rules, &m, &progress, now);
            let before = progress.clone();
            progress = s.progress;

            // Nothing is sent once the rollout stopped.
            if before.phase.is_stopped() {
                prop_assert!(s.newly_sent.is_empty());
            }
            // Bounded concurrency.
            let updating: Vec<&str> = progress.updating(&rules, now).collect();
            match rules.strategy {
                Steps::All => {}
                Steps::Progressive => {
                    prop_assert!(updating.len() <= rules.max_concurrency.concurrency(n),
                        "{} updating: {updating:?}", updating.len());
                }
                Steps::ProgressivePerGroup => {
                    let groups: std::collections::BTreeSet<usize> = updating
                        .iter()
                        .map(|c| m.iter().find(|x| x.name == *c).unwrap().group)
                        .collect();
                    prop_assert!(groups.len() <= 1, "one group at a time: {groups:?}");
                    if let Some(&g) = groups.first() {
                        let size = m.iter().filter(|x| x.group == g).count();
                        prop_assert!(updating.len() <= rules.max_concurrency.concurrency(size));
                    }
                }
            }
            // Order: a newly sent cluster never passes one that waits ahead of it.
            let key = |name: &str| {
                let x = m.iter().find(|x| x.name == name).unwrap();
                (x.group, x.name.clone())
            };
            for sent in &s.newly_sent {
                match rules.strategy {
                    Steps::All => {}
                    Steps::Progressive => {
                        for other in &m {
                            if key(&other.name) < key(sent) {
                                prop_assert!(progress.sent.contains_key(&other.name),
                                    "{sent} sent before {}", other.name);
                            }
                        }
                    }
                    Steps::ProgressivePerGroup => {
                        let group = key(sent).0;
                        for other in m.iter().filter(|x| x.group < group) {
                            prop_assert!(
                                before.failed.contains_key(&other.name)
                                    || before.succeeded(&other.name, &rules, now)
                                    || progress.succeeded(&other.name, &rules, now)
                                    || progress.failed.contains_key(&other.name),
                                "{sent} (group {group}) sent before {} was done", other.name
                            );
                        }
                    }
                }
                if rules.canary && rules.strategy == Steps::Progressive {
                    let first = m.iter().map(|x| x.group).min().unwrap();
                    if key(sent).0 != first {
                        for other in m.iter().filter(|x| x.group == first) {
                            prop_assert!(
                                progress.succeeded(&other.name, &rules, now)
                                    || progress.failed.contains_key(&other.name),
                                "{sent} sent before canary {} succeeded", other.name
                            );
                        }
                    }
                }
            }
            // The stop comes no later than the tolerated failures plus what was in flight.
            if progress.phase.is_stopped() && stopped_at.is_none() {
                stopped_at = Some(now);
                let in_flight = match rules.strategy {
                    Steps::All => n,
                    _ => rules.max_concurrency.concurrency(n),
                };
                prop_assert!(progress.failed.len() > failures);
                prop_assert!(progress.failed.len() <= failures + in_flight,
                    "{} failed, {failures} tolerated, {in_flight} in flight", progress.failed.len());
                let rolled_back = progress.phase == Phase::RolledBack;
                prop_assert_eq!(rolled_back, rules.auto_rollback);
                prop_assert!(m.iter().all(|x| progress.runs_new(&x.name) != rolled_back
                    || !progress.sent.contains_key(&x.name)));
            }
            // Only a cluster that never turns healthy fails.
            for failed in progress.failed.keys() {
                let i: usize = failed[1..].parse().unwrap();
                let c = &fleet[i];
                prop_assert!(c.healthy_after.is_none_or(|after| after >= rules.progress_deadline_ms),
                    "{failed} failed though healthy after {:?}", c.healthy_after);
            }
            if progress.phase.is_stopped() || progress.phase == Phase::Succeeded {
                break;
            }
            match next(&fleet, &progress, s.recheck_at, now) {
                Some(t) => now = t,
                None => prop_assert!(false, "stuck at {now}: {progress:?}"),
            }
        }
        prop_assert!(progress.phase.is_stopped() || progress.phase == Phase::Succeeded,
            "ended: {progress:?}");
        let clean = fleet.iter().all(|c| c.healthy_after.is_some_and(|a| a < rules.progress_deadline_ms));
        if clean {
            prop_assert_eq!(progress.phase, Phase::Succeeded);
            prop_assert_eq!(progress.sent.len(), n);
        }
    }
}
