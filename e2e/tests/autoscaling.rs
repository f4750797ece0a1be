//! Metric-driven autoscaling end to end: a test-controlled exporter → a real Prometheus
//! (scraping every 250 ms) → real hub(s) polling it every second → real agents → Deployments
//! in three real member clusters.
//!
//! Each test runs its own [`Scenario`]: hub(s) with an etcd prefix of their own, agents with
//! cluster names of its own, its own exporter and Prometheus, in its own namespace, against
//! the shared member clusters. Every poll (the hub's autoscaling state in etcd), every
//! policy status and every member Deployment version are recorded through watches, so that
//! every assertion is made on the whole history rather than on a sample taken at a guessed
//! moment; "N polls" always means the state's `samples` counter advancing by N. Per-poll
//! numbers (value, recommendation, failures, decision) are read from the polls, since the
//! hub need not write `status.autoscaling` on every poll; scale operations, scale request
//! ids, placements and conditions from the statuses.

use accord_e2e::autoscale_scenario::{
    FEW_POLLS, MetricSource, Poll, Scenario, ScenarioOptions, Snapshot, describe, etcd_prefix,
    labelled_metric, no_failover, now_ms, operations, scaling_active,
};
use accord_e2e::fleet::kill9;
use accord_e2e::hub::{HubOptions, HubProcess};
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use anyhow::{Context as _, Result, ensure};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(3));
/// The scenarios are heavy for two cores and time-sensitive; run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());
/// Prometheus scrape interval: a quarter of the 1 s poll, so each poll sees the value set
/// after the previous one.
const SCRAPE_INTERVAL: Duration = Duration::from_millis(250);

/// A metric source named `name` whose load for policy `web` is `load` (Prometheus
/// answers it before this returns).
async fn source(testbed: &'static Testbed, name: &str, load: f64) -> Result<MetricSource<'static>> {
    let source = MetricSource::start(testbed, name, SCRAPE_INTERVAL).await?;
    source.set_and_wait("web", load).await?;
    Ok(source)
}

/// Scenario `autoscale-<name>` (also its namespace) over `clusters` on members 0, 1, 2,
/// with Deployment `web` on each.
async fn scenario(
    testbed: &'static Testbed,
    source: MetricSource<'static>,
    name: &str,
    clusters: &[&str],
    hub_args: &[&str],
) -> Result<Scenario<'static>> {
    let name = format!("autoscale-{name}");
    Scenario::start(
        testbed,
        source,
        ScenarioOptions {
            name: &name,
            namespace: &name,
            clusters,
            hub_args,
            deployments: &["web"],
        },
    )
    .await
}

/// The numbers in a message, commas (thousands separators) removed.
fn numbers_in(message: &str) -> Vec<f64> {
    message
        .replace(',', "")
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|t| t.trim_matches('.').parse::<f64>().ok())
        .collect()
}

// ---------------------------------------------------------------------------------------
// The scenarios

#[test]
fn the_exporter_reaches_prometheus_and_prometheus_comes_back_on_the_same_port() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let mut source = MetricSource::start(testbed, "plumbing", SCRAPE_INTERVAL).await?;
        source.set_and_wait("p", 42.0).await?;
        let url = source.prometheus.url.clone();
        source.prometheus.stop(testbed);
        let refused = testbed.http().get(format!("{url}/-/ready")).send().await;
        ensure!(
            refused.is_err(),
            "a stopped Prometheus answered: {refused:?}"
        );
        source.prometheus.resume(testbed).await?;
        ensure!(
            source.prometheus.url == url,
            "the URL changed across the restart"
        );
        source.set_and_wait("p", 43.5).await?;
        Ok(())
    });
}

#[test]
fn a_fivefold_step_scales_up_within_two_polls_and_the_members_follow_within_three_seconds() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let source = source(testbed, "step", 300.0).await?;
        let s = scenario(testbed, source, "step", &["step-1", "step-2", "step-3"], &[]).await?;
        let recorder = s.record("web").await?;
        let member_log = s.record_members("web");
        let a = s.autoscaling("web", 1, 60, 100.0);
        s.apply_policy(&s.policy("web", "web", 3, a, no_failover())).await?;

        // A steady 300 is the starting count (3): no operation, and a threshold once
        // the window holds enough samples.
        let steady = recorder.wait_samples(5, Duration::from_secs(60)).await?;
        ensure!(recorder.operations().is_empty(), "a steady load at the starting count scaled: {}", describe(&recorder.operations()));
        ensure!(steady.state.threshold.is_some(), "no threshold after 5 samples:\n{}", recorder.dump(6));

        s.source.set_and_wait("web", 1500.0).await?;
        let first = recorder
            .wait_polls("a sample of 1500", FEW_POLLS, |h| h.iter().find(|p| p.value() == Some(1500.0)).cloned())
            .await?;
        let up = recorder.wait_operation_to(15, FEW_POLLS).await?;
        ensure!(up.from == 3, "scaled from {} instead of 3", up.from);
        ensure!(
            up.samples <= first.samples() + 1,
            "the scale-up came at sample {}, more than two polls after the first sample showing the step ({}):\n{}",
            up.samples, first.samples(), recorder.dump(10)
        );
        ensure!(recorder.operations().len() == 1, "{}", describe(&recorder.operations()));

        // The Event names the value and the threshold.
        let (message, event_ms) = s.wait_event("web", "Normal", "ScaledUp", |_| true).await?;
        ensure!(message.contains("threshold"), "the Event does not name the threshold: {message}");
        ensure!(numbers_in(&message).contains(&1500.0), "the Event does not name the value 1500: {message}");
        let threshold = first.state.threshold;
        println!("step: {message:?} (threshold of that poll {threshold:?})");

        // The members run the new division under the operation's scale request id within 3 s.
        let id = up.scale_request_id.clone().context("no scaleRequestID on the operation")?;
        let status = recorder.wait_status_of(&id).await?;
        let expected = s.expected_members(&status.status);
        ensure!(expected.values().sum::<i32>() == 15, "placements {:?}", status.status.placements);
        let members_ms = member_log.wait_for(&expected, &id, Duration::from_secs(10)).await?;
        // The decision's moment: the Event's own time when it has sub-second precision,
        // else when the status naming it arrived; either is at or after the decision.
        let decision_ms = if event_ms > 0 && event_ms % 1000 != 0 { event_ms.min(up.seen_ms) } else { up.seen_ms };
        let lag = members_ms - decision_ms;
        println!("step: decision → all members changed in {lag} ms");
        ensure!(lag <= 3000, "the members changed {lag} ms after the decision (more than 3 s)");

        // The hub's metrics say the same.
        let text = s.hub_metrics().await?;
        let policy_label = format!("{}/web", s.namespace);
        ensure!(labelled_metric(&text, "accord_hub_autoscale_decisions_total", &[("action", "ScaledUp")]).unwrap_or(0.0) >= 1.0, "no ScaledUp decision counted:\n{text}");
        ensure!(labelled_metric(&text, "accord_hub_autoscale_metric_value", &[("policy", &policy_label)]) == Some(1500.0), "metric_value for {policy_label} is not 1500");
        ensure!(labelled_metric(&text, "accord_hub_autoscale_threshold", &[("policy", &policy_label)]).is_some(), "no threshold gauge for {policy_label}");
        drop(s);
        Ok(())
    });
}

#[test]
fn steady_noisy_load_at_the_count_it_wants_makes_no_scale_operation() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        // Mean 1000 ± 10 % against 100 per replica, starting at the 10 replicas the mean
        // wants: a plain ceil(value / target) says 10 or 11 from one poll to the next, and
        // three 11s in a row used to pass for a trend. The default tolerance (10 %) holds 10.
        const MEAN: f64 = 1000.0;
        const TARGET: f64 = 100.0;
        const START: i32 = 10;
        const POLLS: i64 = 60;
        // Seeded, so a noisy load repeats run to run.
        let mut rng = StdRng::seed_from_u64(0x5EED_0013);
        let mut noisy = move || MEAN * (0.9 + 0.2 * rng.random::<f64>());
        let source = source(testbed, "noise", noisy()).await?;
        let s = scenario(testbed, source, "noise", &["noise-1", "noise-2", "noise-3"], &[]).await?;
        let recorder = s.record("web").await?;
        let mut a = s.autoscaling("web", 1, 60, TARGET);
        a["behavior"]["cooldownSeconds"] = 5.into();
        s.apply_policy(&s.policy("web", "web", START, a, no_failover()))
            .await?;

        // A new noisy value every poll, from the first answer on: there is nothing to
        // settle, so every poll counts.
        recorder.wait_samples(1, Duration::from_secs(60)).await?;
        while recorder.samples() < POLLS {
            s.source.set("web", noisy());
            recorder.next_poll().await?;
        }
        let ops = recorder.operations();
        ensure!(
            ops.is_empty(),
            "noise scaled: {}\n{}",
            describe(&ops),
            recorder.dump(20)
        );
        let polls = recorder.polls();
        let moved: Vec<String> = polls
            .iter()
            .filter(|p| p.recommendation().is_some_and(|r| r != START))
            .map(Poll::line)
            .collect();
        ensure!(
            moved.is_empty(),
            "the recommendation left {START} on noise:\n{}",
            moved.join("\n")
        );

        // The numbers were adversarial: a plain ceil would have moved, and said 11 on
        // three polls in a row (what the trend rule follows). One entry per answered poll:
        // a failed one repeats the last answer's numbers.
        let naive: Vec<(i64, i32)> = polls
            .iter()
            .filter_map(|p| p.value().map(|v| (p.samples(), (v / TARGET).ceil() as i32)))
            .collect::<BTreeMap<i64, i32>>()
            .into_iter()
            .collect();
        let flips = naive.windows(2).filter(|w| w[0].1 != w[1].1).count();
        let trends = naive
            .windows(3)
            .filter(|w| w[2].0 - w[0].0 == 2 && w.iter().all(|(_, r)| *r > START))
            .count();
        println!(
            "noise: {} polls, a plain ceil(value/target) changed {flips} times and was above {START} on 3 polls in a row {trends} times; no operation",
            naive.len()
        );
        ensure!(
            naive.len() as i64 >= POLLS - 1,
            "only {} polls recorded",
            naive.len()
        );
        ensure!(
            flips >= 10 && trends >= 1,
            "the noise was too gentle to prove anything ({flips} changes, {trends} runs of three)"
        );
        drop(s);
        Ok(())
    });
}

#[test]
fn a_slow_ramp_is_followed_within_one_step_of_the_recommendation() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        const START: i32 = 10;
        const COOLDOWN: i64 = 2;
        // Polls within which the count must have caught up with a recommendation:
        // three for the trend, the cooldown, and two for the scrape and status latency.
        const LAG: i64 = 3 + COOLDOWN + 2;
        let mut value = 1000.0;
        let source = source(testbed, "ramp", value).await?;
        let s = scenario(testbed, source, "ramp", &["ramp-1", "ramp-2", "ramp-3"], &[]).await?;
        let recorder = s.record("web").await?;
        let mut a = s.autoscaling("web", 1, 100, 100.0);
        a["behavior"]["cooldownSeconds"] = COOLDOWN.into();
        a["behavior"]["maxScaleOperationsPerMinute"] = 60.into();
        s.apply_policy(&s.policy("web", "web", START, a, no_failover())).await?;
        let start = recorder.wait_samples(4, Duration::from_secs(60)).await?.samples();

        // +3 % a poll for 30 polls: 1000 → 2427 (10 → 25 replicas).
        let ramp_from = start + 1;
        for _ in 0..30 {
            value *= 1.03;
            s.source.set("web", value);
            recorder.next_poll().await?;
        }
        // Hold the top until the count has caught up.
        recorder.wait_samples(recorder.samples() + LAG, FEW_POLLS * 2).await?;

        let history: Vec<Poll> = recorder.polls().into_iter().filter(|p| p.samples() >= ramp_from).collect();
        let rec_at: BTreeMap<i64, i32> = history.iter().filter_map(|p| p.recommendation().map(|r| (p.samples(), r))).collect();
        for p in &history {
            let Some(rec) = p.recommendation() else { continue };
            let effective = p.effective(START);
            ensure!(effective <= rec, "the count {effective} overtook the recommendation {rec}: {}", p.line());
            if let Some((_, earlier)) = rec_at.range(..=p.samples() - LAG).next_back()
                && p.samples() - LAG >= ramp_from
            {
                ensure!(
                    effective >= *earlier,
                    "the count {effective} at sample {} is behind the recommendation {earlier} of {LAG} polls earlier:\n{}",
                    p.samples(),
                    recorder.dump(LAG as usize + 4)
                );
            }
        }
        let ops = recorder.operations();
        let last = recorder.last_poll().context("no poll")?;
        println!("ramp: {} operations, {START} → {}: {}", ops.len(), last.effective(START), describe(&ops));
        ensure!(ops.len() >= 3, "the ramp was followed by {} operations only: {}", ops.len(), describe(&ops));
        // At the top (2,427) the count holds once the value is within the default 10 %
        // tolerance of what it carries: 23 replicas (2,300 × 1.1 ≥ 2,427) or more.
        let top_count = (value / 110.0).ceil() as i32;
        ensure!(last.recommendation() == Some(last.effective(START)) && last.effective(START) >= top_count, "the count did not reach the top ({top_count}): {}", last.line());
        ensure!(ops.iter().any(|o| o.reason == "Trend"), "no operation gave Trend as its reason: {}", describe(&ops));
        drop(s);
        Ok(())
    });
}

#[test]
fn a_load_that_flips_every_poll_never_exceeds_the_rate_limit_and_respects_the_cooldown() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        const MAX_OPS: usize = 3;
        let source = source(testbed, "flip", 500.0).await?;
        let s = scenario(testbed, source, "flip", &["flip-1", "flip-2", "flip-3"], &[]).await?;
        let recorder = s.record("web").await?;
        // The threshold is the previous sample and no cooldown: every rise is a surge,
        // every drop a scale-down; only the rate limit holds them back.
        let mut a = s.autoscaling("web", 1, 60, 100.0);
        a["dynamicThreshold"] = serde_json::json!({"ewmaAlpha": 1.0, "windowSeconds": 1800, "stddevFactor": 0.0, "floorRatio": 0.0});
        a["behavior"]["cooldownSeconds"] = 0.into();
        a["behavior"]["maxScaleOperationsPerMinute"] = (MAX_OPS as i32).into();
        s.apply_policy(&s.policy("web", "web", 5, a.clone(), no_failover())).await?;
        let start = recorder.wait_samples(4, Duration::from_secs(60)).await?.samples();

        // 75 polls of 500, 1500, 500, …: more than one sliding minute.
        let mut high = false;
        while recorder.samples() < start + 75 {
            high = !high;
            s.source.set("web", if high { 1500.0 } else { 500.0 });
            recorder.next_poll().await?;
        }
        let history = recorder.snapshots();
        let ops = operations(&history);
        println!("flip: {} operations in 75 polls: {}", ops.len(), describe(&ops));
        ensure!(ops.len() > MAX_OPS, "the flipping load scaled only {} times; it should scale again once a minute has passed: {}", ops.len(), describe(&ops));
        // lastScaleTime has whole seconds, truncated: two operations at least 60 s apart
        // are at least 60 s apart here too, so a window holding more is a real excess.
        for (i, op) in ops.iter().enumerate() {
            let within = ops[i..].iter().take_while(|o| o.at_ms - op.at_ms < 60_000).count();
            ensure!(within <= MAX_OPS, "{within} operations within 60 s from {}: {}", op.at_ms, describe(&ops));
        }
        ensure!(recorder.polls().iter().any(|p| p.decision() == "HeldRateLimit"), "HeldRateLimit never seen:\n{}", recorder.dump(20));
        ensure!(
            history.iter().filter(|s| s.decision() == "HeldRateLimit").all(|s| s.autoscaling().and_then(|a| a.tokens_left) == Some(0)),
            "a poll was held by the rate limit with tokens left"
        );
        ensure!(ops.iter().any(|o| o.to > o.from) && ops.iter().any(|o| o.to < o.from), "both directions should scale: {}", describe(&ops));

        // Now a cooldown, with the rate limit out of the way: operations at least the
        // cooldown apart. Each high is higher than the last, so every one wants a surge.
        const COOLDOWN: i64 = 8;
        a["behavior"]["cooldownSeconds"] = COOLDOWN.into();
        a["behavior"]["maxScaleOperationsPerMinute"] = 60.into();
        s.apply_policy(&s.policy("web", "web", 5, a, no_failover())).await?;
        let phase2 = recorder.next_poll().await?.samples() + 1;
        let mut step = 0.0;
        while recorder.samples() < phase2 + 30 {
            high = !high;
            if high {
                step += 100.0;
            }
            s.source.set("web", if high { 1500.0 + step } else { 500.0 });
            recorder.next_poll().await?;
        }
        let all = recorder.operations();
        let later: Vec<_> = all.iter().filter(|o| o.samples >= phase2).cloned().collect();
        println!("flip with cooldown {COOLDOWN}s: {}", describe(&later));
        ensure!(later.len() >= 2, "with a cooldown the flipping load scaled {} times in 30 polls: {}", later.len(), describe(&later));
        for pair in all.windows(2).filter(|w| w[1].samples >= phase2) {
            let gap = pair[1].at_ms - pair[0].at_ms;
            ensure!(gap >= COOLDOWN * 1000, "two operations {gap} ms apart under a {COOLDOWN} s cooldown: {}", describe(&all));
        }
        ensure!(
            recorder.polls().iter().any(|p| p.samples() >= phase2 && p.decision() == "HeldCooldown"),
            "HeldCooldown never seen:\n{}",
            recorder.dump(20)
        );
        drop(s);
        Ok(())
    });
}

#[test]
fn a_stopped_prometheus_opens_the_breaker_holding_replicas_and_its_return_closes_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        const FAILURES: u32 = 3;
        const OPEN_SECONDS: u64 = 4;
        let source = source(testbed, "breaker", 600.0).await?;
        let mut s = scenario(testbed, source, "breaker", &["brk-1", "brk-2", "brk-3"], &[]).await?;
        let recorder = s.record("web").await?;
        let member_log = s.record_members("web");
        let mut a = s.autoscaling("web", 1, 60, 100.0);
        a["behavior"]["failureThreshold"] = FAILURES.into();
        a["behavior"]["breakerOpenSeconds"] = OPEN_SECONDS.into();
        a["behavior"]["cooldownSeconds"] = 1.into();
        s.apply_policy(&s.policy("web", "web", 6, a, no_failover())).await?;
        let before_poll = recorder.wait_samples(5, Duration::from_secs(60)).await?;
        let before = recorder
            .wait("a status with a scale request id", FEW_POLLS, |h| {
                h.last().filter(|s| s.status.scale_request_id.is_some() && s.effective().is_some()).cloned()
            })
            .await?;
        let id = before.status.scale_request_id.clone().context("no scaleRequestID")?;
        let expected = s.expected_members(&before.status);
        member_log.wait_for(&expected, &id, FEW_POLLS).await?;
        let members_before = member_log.states().len();
        let count_before = before.effective();
        ensure!(count_before == Some(6), "a steady 600 should hold 6: {}", before.line());

        s.source.prometheus.stop(testbed);
        // Meanwhile the load triples; nobody can see it.
        s.source.set("web", 1800.0);
        let open = recorder
            .wait_polls("breaker Open", FEW_POLLS, |h| h.iter().rev().find(|p| p.breaker() == "Open").cloned())
            .await?;
        let polls = recorder.polls();
        let before_open: Vec<_> = polls.iter().filter(|p| p.samples() >= before_poll.samples() && p.breaker() != "Open").collect();
        let max_failures = before_open.iter().map(|p| p.failures()).max().unwrap_or(0);
        let open_failures = open.failures();
        ensure!(
            open_failures >= FAILURES || max_failures == FAILURES - 1,
            "the breaker opened after {open_failures} failures (before: {max_failures}):\n{}",
            recorder.dump(8)
        );
        ensure!(polls.iter().any(|p| p.decision() == "MetricFailed"), "no MetricFailed decision before the breaker opened");
        recorder
            .wait("ScalingActive False/BreakerOpen while the breaker is open", FEW_POLLS, |h| {
                h.iter().rev().find(|s| {
                    s.breaker() == "Open" && scaling_active(&s.status) == Some(("False".into(), "BreakerOpen".into()))
                }).cloned()
            })
            .await?;
        s.wait_event("web", "Warning", "BreakerOpened", |_| true).await?;
        let text = s.hub_metrics().await?;
        ensure!(labelled_metric(&text, "accord_hub_autoscale_breaker_open", &[("policy", &format!("{}/web", s.namespace))]) == Some(1.0), "breaker_open gauge is not 1");

        // Past breakerOpenSeconds a probe runs, fails, and the breaker opens again.
        recorder
            .wait_polls("a failed probe", Duration::from_secs(OPEN_SECONDS * 3 + 10), |h| {
                h.iter().find(|p| p.samples() >= before_poll.samples() && p.reason() == "ProbeFailed").cloned()
            })
            .await?;

        s.source.prometheus.resume(testbed).await?;
        let closed = recorder
            .wait_polls("breaker Closed again", Duration::from_secs(OPEN_SECONDS * 3 + 20), |h| {
                h.iter().rev().find(|p| p.samples() > before_poll.samples() && p.breaker() == "Closed" && p.failures() == 0).cloned()
            })
            .await?;
        s.wait_event("web", "Normal", "BreakerClosed", |_| true).await?;

        // While failing and open, neither the count nor the members moved. (The closing
        // probe's state is stored before the status rendered from it arrives.)
        let history = recorder.snapshots();
        for st in history.iter().filter(|st| st.seen_ms > before.seen_ms && st.seen_ms < closed.seen_ms) {
            ensure!(st.effective() == count_before, "the count moved while the metric failed: {}", st.line());
        }

        // Closed: scaling goes on (the tripled load, then a further step).
        let up = recorder
            .wait("a scale-up after the breaker closed", Duration::from_secs(30), |h| {
                operations(h).into_iter().find(|o| o.seen_ms >= closed.seen_ms && o.to > 6)
            })
            .await?;
        let active = recorder
            .wait("ScalingActive True", FEW_POLLS, |h| h.last().and_then(|s| scaling_active(&s.status)).filter(|c| c.0 == "True"))
            .await?;
        println!("breaker: reopened after a failed probe, closed, then {}→{} ({}), ScalingActive {active:?}", up.from, up.to, up.reason);
        let id = up.scale_request_id.context("no scaleRequestID")?;
        s.wait_rolled_out(&recorder, &member_log, &id).await?;
        // The members ran nothing new until the scale-up that followed the closing probe
        // (the probe's poll decides it, and a member may see it before the status saying
        // Closed reaches this test, so the ids tell, not the clocks of two watches).
        let moved: Vec<_> = member_log.states().into_iter().skip(members_before).filter(|m| m.scale_request_id != id).collect();
        ensure!(moved.is_empty(), "members changed while the breaker was open: {moved:?}");

        // And a later step scales again.
        s.source.set_and_wait("web", 5000.0).await?;
        let later = recorder.wait_operation_to(50, FEW_POLLS).await?;
        let id = later.scale_request_id.context("no scaleRequestID")?;
        s.wait_rolled_out(&recorder, &member_log, &id).await?;
        drop(s);
        Ok(())
    });
}

#[test]
fn a_new_leader_continues_the_samples_and_ewma_and_keeps_the_running_cooldown() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let names = ["lead-1", "lead-2", "lead-3"];
        const COOLDOWN: i64 = 20;
        const ALPHA: f64 = 0.3;
        let source = source(testbed, "leader", 500.0).await?;
        // The leader holds no agent streams, so killing it moves only leadership; the
        // agents stay connected to the other replica.
        let ttl = ["--election-ttl", "2s"];
        let leader = HubProcess::start(testbed, &HubOptions { replica: "autoscale-leader-a".into(), etcd_prefix: etcd_prefix("autoscale-leader"), extra_args: ttl.iter().map(|s| s.to_string()).collect() }).await?;
        until("autoscale-leader-a leads", Duration::from_secs(30), || async {
            Ok(match leader.metric(testbed.http(), "accord_hub_is_leader").await? {
                Some(1.0) => Check::Ready(()),
                other => Check::NotYet(format!("is_leader {other:?}")),
            })
        })
        .await?;
        let s = scenario(testbed, source, "leader", &names, &ttl).await?;
        ensure!(s.hub().metric(testbed.http(), "accord_hub_is_leader").await? != Some(1.0), "the second replica leads");
        let recorder = s.record("web").await?;
        let member_log = s.record_members("web");
        let mut a = s.autoscaling("web", 1, 60, 100.0);
        a["behavior"]["cooldownSeconds"] = COOLDOWN.into();
        a["dynamicThreshold"]["ewmaAlpha"] = ALPHA.into();
        s.apply_policy(&s.policy("web", "web", 5, a, no_failover())).await?;
        recorder.wait_samples(6, Duration::from_secs(60)).await?;

        // A surge starts a cooldown.
        s.source.set_and_wait("web", 1500.0).await?;
        let up = recorder.wait_operation_to(15, FEW_POLLS).await?;
        // Two polls into the cooldown, kill -9 the leader; then the load doubles, which
        // the new leader must hold until the cooldown has passed.
        recorder.wait_samples(up.samples + 2, FEW_POLLS).await?;
        let last_before = recorder.last_poll().context("no poll")?;
        let ewma_before = last_before.state.ewma.context("no EWMA")?;
        kill9(testbed, leader.id)?;
        let killed_ms = now_ms();
        s.source.set_and_wait("web", 3000.0).await?;
        ensure!(killed_ms - up.at_ms < COOLDOWN * 1000 - 5000, "the kill came too late in the cooldown to prove anything");

        let first_after = recorder
            .wait_polls("a poll by the new leader", Duration::from_secs(30), |h| {
                h.iter().find(|p| p.seen_ms > killed_ms && p.samples() > last_before.samples()).cloned()
            })
            .await?;
        let gap = first_after.samples() - last_before.samples();
        ensure!(gap >= 1 && first_after.samples() > 6, "samples went from {} to {}", last_before.samples(), first_after.samples());
        let value = first_after.value().context("no value")?;
        let ewma = first_after.state.ewma.context("no EWMA")?;
        println!("leader: samples {} → {}, EWMA {ewma_before:.1} → {ewma:.1} with value {value}", last_before.samples(), first_after.samples());
        if gap == 1 {
            let expected = ALPHA * value + (1.0 - ALPHA) * ewma_before;
            ensure!((ewma - expected).abs() <= 0.01 * expected, "EWMA {ewma:.1} after the failover, expected {expected:.1} from {ewma_before:.1} and {value}");
        }
        ensure!((ewma - value).abs() > 0.1 * (value - ewma_before).abs(), "EWMA {ewma:.1} jumped to the raw sample {value}: state was not continued");

        // No operation inside the cooldown; the doubled load scales once it has passed.
        let next = recorder
            .wait("the scale-up after the cooldown", Duration::from_secs(COOLDOWN as u64 + 20), |h| {
                operations(h).into_iter().find(|o| o.seen_ms > killed_ms)
            })
            .await?;
        ensure!(next.at_ms - up.at_ms >= COOLDOWN * 1000, "the new leader scaled {} ms after the previous operation, inside the {COOLDOWN} s cooldown", next.at_ms - up.at_ms);
        ensure!(recorder.polls().iter().any(|p| p.seen_ms > killed_ms && p.decision() == "HeldCooldown"), "the new leader never said HeldCooldown");
        ensure!(next.to == 30, "scaled to {} instead of 30", next.to);
        let id = next.scale_request_id.clone().context("no scaleRequestID")?;
        s.wait_rolled_out(&recorder, &member_log, &id).await?;

        // Every scale request id on the members belongs to exactly one operation, and each
        // agent applied each id once.
        let ops = recorder.operations();
        let op_ids: Vec<_> = ops.iter().filter_map(|o| o.scale_request_id.clone()).collect();
        let unique: BTreeSet<_> = op_ids.iter().collect();
        ensure!(unique.len() == op_ids.len(), "two operations share a scale request id: {}", describe(&ops));
        let status_ids: BTreeSet<String> = recorder.snapshots().iter().filter_map(|s| s.status.scale_request_id.clone()).collect();
        for m in member_log.states() {
            ensure!(m.scale_request_id.is_empty() || status_ids.contains(&m.scale_request_id), "member {} ran scale request {} that no status named", m.member, m.scale_request_id);
        }
        for name in names {
            let log_file = testbed.process_info(s.fleet.agents[name].process.context("running")?).log;
            let applied = |log: &str, id: &str| log.lines().filter(|l| l.contains("applied scale request") && l.contains(id)).count();
            // The member's Deployment changes before the agent logs that it did: wait for
            // the line, then count.
            let log = until(&format!("{name} logging every operation"), Duration::from_secs(10), || async {
                let log = std::fs::read_to_string(&log_file)?;
                Ok(if op_ids.iter().all(|id| applied(&log, id) > 0) {
                    Check::Ready(log)
                } else {
                    Check::NotYet(format!("operations {op_ids:?}"))
                })
            })
            .await?;
            for id in &op_ids {
                let n = applied(&log, id);
                ensure!(n == 1, "{name} applied scale request {id} {n} times");
            }
        }
        drop(s);
        drop(leader);
        Ok(())
    });
}

#[test]
fn a_stopped_members_share_moves_and_the_autoscaled_total_is_kept() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let source = source(testbed, "failover", 300.0).await?;
        let mut s = scenario(
            testbed,
            source,
            "failover",
            &["afo-1", "afo-2", "afo-3"],
            &[],
        )
        .await?;
        let recorder = s.record("web").await?;
        let member_log = s.record_members("web");
        let a = s.autoscaling("web", 1, 60, 100.0);
        let failover = serde_json::json!({"enabled": true, "returnCooldownSeconds": 300});
        s.apply_policy(&s.policy("web", "web", 3, a, failover))
            .await?;
        recorder.wait_samples(5, Duration::from_secs(60)).await?;
        s.source.set_and_wait("web", 1200.0).await?;
        let up = recorder.wait_operation_to(12, FEW_POLLS).await?;
        let id = up.scale_request_id.context("no scaleRequestID")?;
        member_log
            .wait_for(&BTreeMap::from([(0, 4), (1, 4), (2, 4)]), &id, FEW_POLLS)
            .await?;

        // A member stops: its share moves to the others; the total stays 12. It is told to
        // keep the 4 it runs (never 0: a return must not kill running pods).
        s.fleet.kill_agent("afo-3")?;
        let moved = |total: i32| {
            move |h: &[Snapshot]| {
                h.last()
                    .filter(|s| {
                        let available: i32 = s
                            .status
                            .placements
                            .iter()
                            .filter(|p| p.state != accord_crds::PlacementState::Unavailable)
                            .map(|p| p.desired_replicas)
                            .sum();
                        let gone = s.status.placements.iter().any(|p| {
                            p.cluster == "afo-3"
                                && p.state == accord_crds::PlacementState::Unavailable
                                && p.desired_replicas == 4
                        });
                        gone && available == total && s.effective() == Some(total)
                    })
                    .cloned()
            }
        };
        let after = recorder
            .wait(
                "afo-3's share on the others, total 12",
                Duration::from_secs(30),
                moved(12),
            )
            .await?;
        let id = after
            .status
            .scale_request_id
            .clone()
            .context("no scaleRequestID")?;
        member_log
            .wait_for(&s.expected_members(&after.status), &id, FEW_POLLS)
            .await?;
        println!(
            "failover: placements {:?}",
            after
                .status
                .placements
                .iter()
                .map(|p| (&p.cluster, p.desired_replicas, p.state))
                .collect::<Vec<_>>()
        );

        // Autoscaling goes on over the two that are left.
        s.source.set_and_wait("web", 1800.0).await?;
        let after = recorder
            .wait(
                "a total of 18 on the two available members",
                Duration::from_secs(30),
                moved(18),
            )
            .await?;
        let id = after
            .status
            .scale_request_id
            .clone()
            .context("no scaleRequestID")?;
        let expected = s.expected_members(&after.status);
        ensure!(
            expected.len() == 2 && expected.values().sum::<i32>() == 18,
            "{expected:?}"
        );
        member_log.wait_for(&expected, &id, FEW_POLLS).await?;
        drop(s);
        Ok(())
    });
}
