//! The autoscaling decision as a pure function: (state, configuration, poll outcome, time)
//! → (state, decision). No clock, no I/O: the runner queries Prometheus, calls [`step`],
//! stores the state in etcd and applies the decision. `docs/architecture.md` explains the
//! rules and why each is there.

use accord_crds::scale::Autoscaling;
use serde::{Deserialize, Serialize};

use super::window::Window;

/// Samples the window must hold before a threshold exists (and a surge can be told from
/// noise).
pub const MIN_HISTORY: u64 = 3;
/// Consecutive polls whose recommendation is above the count before a slow rise is
/// followed.
pub const TREND_POLLS: u32 = 3;
/// Shortest time a scale operation has to converge (placements Synced) before it counts
/// as a failure; longer when three polls take longer.
pub const MIN_CONVERGE_MS: i64 = 30_000;
/// The rate limit's window.
const MINUTE_MS: i64 = 60_000;

/// A policy's autoscaling settings, in milliseconds and plain numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Lowest count.
    pub min: i32,
    /// Highest count.
    pub max: i32,
    /// Metric one replica carries.
    pub target_per_replica: f64,
    /// How far, in percent, the value may be from count × target before it asks for
    /// another count.
    pub tolerance_percent: f64,
    /// EWMA smoothing factor.
    pub alpha: f64,
    /// History window.
    pub window_ms: i64,
    /// σ factor of the threshold.
    pub stddev_factor: f64,
    /// Threshold floor as a ratio of the EWMA.
    pub floor_ratio: f64,
    /// No operation within this of the previous one.
    pub debounce_ms: i64,
    /// No operation within this of the previous one; also how long a lower
    /// recommendation must last before a scale-down.
    pub cooldown_ms: i64,
    /// Operations allowed in any 60 s.
    pub max_ops_per_minute: u32,
    /// Consecutive failures that open the breaker.
    pub failure_threshold: u32,
    /// How long the breaker stays open.
    pub breaker_open_ms: i64,
    /// Poll interval.
    pub poll_ms: i64,
}

impl Config {
    /// The settings of `spec.autoscaling`.
    pub fn from_spec(a: &Autoscaling) -> Self {
        let t = &a.dynamic_threshold;
        let b = &a.behavior;
        Self {
            min: a.min_replicas.max(0),
            max: a.max_replicas.max(a.min_replicas.max(0)),
            target_per_replica: a.metric.target_per_replica,
            tolerance_percent: f64::from(a.metric.tolerance_percent.max(0)),
            alpha: t.ewma_alpha.clamp(f64::MIN_POSITIVE, 1.0),
            window_ms: i64::from(t.window_seconds.max(1)) * 1000,
            stddev_factor: t.stddev_factor.max(0.0),
            floor_ratio: t.floor_ratio.max(0.0),
            debounce_ms: b.debounce_millis.max(0),
            cooldown_ms: i64::from(b.cooldown_seconds.max(0)) * 1000,
            max_ops_per_minute: u32::try_from(b.max_scale_operations_per_minute.max(1))
                .unwrap_or(1),
            failure_threshold: u32::try_from(b.failure_threshold.max(1)).unwrap_or(1),
            breaker_open_ms: i64::from(b.breaker_open_seconds.max(1)) * 1000,
            poll_ms: i64::from(a.metric.poll_seconds.max(1)) * 1000,
        }
    }

    /// How long an operation may take to converge before it counts as a failure.
    pub fn converge_ms(&self) -> i64 {
        MIN_CONVERGE_MS.max(3 * self.poll_ms)
    }

    /// True when `value` is within the tolerance of what `current` replicas carry: noise,
    /// not a reason to change the count (the HorizontalPodAutoscaler's rule).
    pub fn within_tolerance(&self, value: f64, current: i32) -> bool {
        let carried = f64::from(current) * self.target_per_replica;
        // In percent rather than as a ratio, so that a band edge such as 110 against 100
        // is not lost to 0.1 having no exact binary form.
        (value - carried).abs() * 100.0 <= self.tolerance_percent * carried
    }

    /// What `value` asks for while the count is `current`: `current` within the
    /// tolerance, else ceil(value / targetPerReplica); clamped to min..max (NaN-free input
    /// assumed).
    pub fn recommend(&self, value: f64, current: i32) -> i32 {
        let raw = if self.within_tolerance(value, current) {
            f64::from(current)
        } else {
            (value / self.target_per_replica).ceil()
        };
        if raw >= f64::from(self.max) {
            self.max
        } else if raw <= f64::from(self.min) {
            self.min
        } else {
            // Between min and max, so it fits.
            raw as i32
        }
    }
}

/// The circuit breaker's state.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum Breaker {
    /// Queries and decisions as normal.
    #[default]
    Closed,
    /// No query until `until_ms`.
    #[serde(rename_all = "camelCase")]
    Open {
        /// When it opened.
        since_ms: i64,
        /// When the half-open probe may run.
        until_ms: i64,
    },
    /// The next query is the probe.
    HalfOpen,
}

impl Breaker {
    /// `Closed`, `Open` or `HalfOpen`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Closed => "Closed",
            Self::Open { .. } => "Open",
            Self::HalfOpen => "HalfOpen",
        }
    }
}

/// A run of polls recommending more than the count.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rise {
    /// Consecutive polls so far.
    pub polls: u32,
}

/// A run of polls recommending less than the count.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Low {
    /// First poll of the run.
    pub since_ms: i64,
    /// Highest recommendation in the run.
    pub highest: i32,
}

/// A scale operation waiting for its placements to converge.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InFlight {
    /// The count it set.
    pub to: i32,
    /// When.
    pub since_ms: i64,
}

/// What was decided last, for status and Events.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// ScaledUp, ScaledDown, Held, HeldDebounce, HeldCooldown, HeldRateLimit,
    /// MetricFailed or BreakerOpen.
    pub action: String,
    /// Surge, Trend, SustainedLow, Steady, Rising, Falling, AtLimit, QueryFailed,
    /// NotConverged, BreakerOpen, ProbeFailed, Starting.
    pub reason: String,
    /// The sentence with the numbers.
    pub message: String,
    /// When.
    pub at_ms: i64,
    /// The count before.
    pub from: i32,
    /// The count after (equal to `from` unless it scaled).
    pub to: i32,
}

impl Decision {
    /// True when the count changed.
    pub fn scaled(&self) -> bool {
        self.from != self.to
    }
}

/// Everything autoscaling remembers about one policy; stored in etcd at
/// `autoscale/<ns>/<name>` so that a new leader continues it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct State {
    /// The effective count, once autoscaling has decided one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired: Option<i32>,
    /// Answered queries so far.
    #[serde(default)]
    pub samples: u64,
    /// Last value read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// Exponentially weighted moving average.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ewma: Option<f64>,
    /// σ over the window after the last sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stddev: Option<f64>,
    /// The threshold the last sample was compared with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// The last recommendation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommendation: Option<i32>,
    /// The history window.
    #[serde(default)]
    pub window: Window,
    /// When the last query was made (answered or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_poll_ms: Option<i64>,
    /// When the last answered query was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sample_ms: Option<i64>,
    /// Operations of the last minute (for the rate limit), oldest first.
    #[serde(default)]
    pub operations_ms: Vec<i64>,
    /// When the count last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_ms: Option<i64>,
    /// A rise being confirmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rise: Option<Rise>,
    /// A fall being waited out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low: Option<Low>,
    /// The operation not yet converged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<InFlight>,
    /// The circuit breaker.
    #[serde(default)]
    pub breaker: Breaker,
    /// Consecutive failed queries.
    #[serde(default)]
    pub failures: u32,
    /// Consecutive operations that did not converge in time.
    #[serde(default)]
    pub unconverged: u32,
    /// The last decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Decision>,
}

impl State {
    /// The count autoscaling holds: its own once decided, else `start`
    /// (`spec.desiredReplicas`).
    pub fn effective(&self, start: i32) -> i32 {
        self.desired.unwrap_or(start)
    }

    /// Operations still allowed in the 60 s before `now_ms`.
    pub fn tokens_left(&self, cfg: &Config, now_ms: i64) -> u32 {
        let recent = self
            .operations_ms
            .iter()
            .filter(|t| now_ms - **t < MINUTE_MS)
            .count();
        cfg.max_ops_per_minute
            .saturating_sub(u32::try_from(recent).unwrap_or(u32::MAX))
    }

    /// True when the runner should query now; false while the breaker is open.
    pub fn wants_query(&self, now_ms: i64) -> bool {
        !matches!(self.breaker, Breaker::Open { until_ms, .. } if now_ms < until_ms)
    }
}

/// How the last operation's rollout stands, as the policy's status shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rollout {
    /// Every available placement is Synced with the count the state holds.
    Converged,
    /// Not yet.
    Pending,
}

/// What one poll brought.
#[derive(Clone, Debug, PartialEq)]
pub enum Poll {
    /// The query answered this value (finite).
    Value(f64),
    /// The query failed; why.
    Failed(String),
    /// No query was made: the breaker is open.
    Skipped,
}

/// One poll: updates the statistics, the breaker and the guards, and decides.
///
/// `start` is `spec.desiredReplicas`, the count held until autoscaling has decided one.
pub fn step(
    state: &State,
    cfg: &Config,
    start: i32,
    poll: Poll,
    rollout: Rollout,
    now_ms: i64,
) -> (State, Decision) {
    let mut s = state.clone();
    half_open_if_due(&mut s, now_ms);
    s.operations_ms.retain(|t| now_ms - *t < MINUTE_MS);
    let current = s.effective(start);
    let hold = |action: &str, reason: &str, message: String| Decision {
        action: action.to_owned(),
        reason: reason.to_owned(),
        message,
        at_ms: now_ms,
        from: current,
        to: current,
    };

    // The operation in flight: converged, or too late (a failure of its own kind).
    if let Some(op) = s.in_flight {
        if rollout == Rollout::Converged && s.desired == Some(op.to) {
            s.in_flight = None;
            s.unconverged = 0;
        } else if now_ms - op.since_ms >= cfg.converge_ms() {
            s.in_flight = None;
            s.unconverged += 1;
            if s.unconverged >= cfg.failure_threshold && s.breaker == Breaker::Closed {
                open(&mut s, cfg, now_ms);
                let d = hold(
                    "BreakerOpen",
                    "NotConverged",
                    format!(
                        "{} scale operations in a row did not converge within {}s; holding {current} replicas for {}s",
                        s.unconverged,
                        cfg.converge_ms() / 1000,
                        cfg.breaker_open_ms / 1000
                    ),
                );
                s.last = Some(d.clone());
                return (s, d);
            }
        }
    }

    let value = match poll {
        Poll::Skipped => {
            let until = match s.breaker {
                Breaker::Open { until_ms, .. } => until_ms,
                _ => now_ms,
            };
            let d = hold(
                "BreakerOpen",
                "BreakerOpen",
                format!(
                    "circuit breaker open; holding {current} replicas, next probe in {}s",
                    ((until - now_ms).max(0) + 999) / 1000
                ),
            );
            s.last = Some(d.clone());
            return (s, d);
        }
        Poll::Failed(why) => {
            s.last_poll_ms = Some(now_ms);
            s.failures = s.failures.saturating_add(1);
            let probe = s.breaker == Breaker::HalfOpen;
            let d = if probe || s.failures >= cfg.failure_threshold {
                open(&mut s, cfg, now_ms);
                hold(
                    "BreakerOpen",
                    if probe { "ProbeFailed" } else { "QueryFailed" },
                    format!(
                        "{} consecutive failed queries (last: {why}); breaker open for {}s, holding {current} replicas",
                        s.failures,
                        cfg.breaker_open_ms / 1000
                    ),
                )
            } else {
                hold(
                    "MetricFailed",
                    "QueryFailed",
                    format!(
                        "query failed ({} of {} before the breaker opens): {why}; holding {current} replicas",
                        s.failures, cfg.failure_threshold
                    ),
                )
            };
            s.last = Some(d.clone());
            return (s, d);
        }
        Poll::Value(v) => v,
    };

    // An answer: the probe (if any) succeeded.
    s.last_poll_ms = Some(now_ms);
    s.last_sample_ms = Some(now_ms);
    s.failures = 0;
    if s.breaker != Breaker::Closed {
        s.breaker = Breaker::Closed;
        s.unconverged = 0;
    }

    // The threshold comes from the history before this sample: a surge is judged against
    // what was normal until now.
    s.window.expire(now_ms, cfg.window_ms);
    let before = s.window.moments();
    let threshold = match s.ewma {
        Some(e) if before.n >= MIN_HISTORY => {
            Some((e * cfg.floor_ratio).max(e + cfg.stddev_factor * before.stddev()))
        }
        _ => None,
    };
    let ewma = s
        .ewma
        .map_or(value, |e| cfg.alpha * value + (1.0 - cfg.alpha) * e);
    s.ewma = Some(ewma);
    s.window.push(now_ms, cfg.window_ms, value);
    s.stddev = Some(s.window.moments().stddev());
    s.threshold = threshold;
    s.value = Some(value);
    s.samples = s.samples.saturating_add(1);
    let rec = cfg.recommend(value, current);
    s.recommendation = Some(rec);
    let threshold_text = match threshold {
        Some(t) => format!(
            "threshold {} (EWMA {} + {}σ)",
            num(t),
            num(state.ewma.unwrap_or(ewma)),
            num(cfg.stddev_factor)
        ),
        None => "no threshold yet".to_owned(),
    };

    // What the numbers ask for.
    let wanted: Result<(i32, &str, String), Decision> = if rec > current {
        s.low = None;
        let rise = s.rise.get_or_insert(Rise { polls: 0 });
        rise.polls += 1;
        let polls = rise.polls;
        if threshold.is_some_and(|t| value > t) {
            Ok((rec, "Surge", format!("{} > {threshold_text}", num(value))))
        } else if polls >= TREND_POLLS {
            Ok((
                rec,
                "Trend",
                format!(
                    "{} wants {rec} for {polls} polls in a row ({threshold_text})",
                    num(value)
                ),
            ))
        } else {
            Err(hold(
                "Held",
                "Rising",
                format!(
                    "{} wants {rec} > {current}, {polls} of {TREND_POLLS} polls; {threshold_text}",
                    num(value)
                ),
            ))
        }
    } else if rec < current {
        s.rise = None;
        let low = s.low.get_or_insert(Low {
            since_ms: now_ms,
            highest: rec,
        });
        low.highest = low.highest.max(rec);
        let (since, highest) = (low.since_ms, low.highest);
        if now_ms - since >= cfg.cooldown_ms {
            Ok((
                highest,
                "SustainedLow",
                format!(
                    "{} wants {rec}; at most {highest} for {}s",
                    num(value),
                    (now_ms - since) / 1000
                ),
            ))
        } else {
            Err(hold(
                "Held",
                "Falling",
                format!(
                    "{} wants {rec} < {current} for {}s of {}s before scaling down",
                    num(value),
                    (now_ms - since) / 1000,
                    cfg.cooldown_ms / 1000
                ),
            ))
        }
    } else {
        s.rise = None;
        s.low = None;
        let at_limit = (rec == cfg.max && value / cfg.target_per_replica > f64::from(cfg.max))
            || (rec == cfg.min && value / cfg.target_per_replica < f64::from(cfg.min));
        let why = if !at_limit && cfg.within_tolerance(value, current) {
            format!(
                "{} is within {}% of {} ({current} × {}); {threshold_text}",
                num(value),
                num(cfg.tolerance_percent),
                num(f64::from(current) * cfg.target_per_replica),
                num(cfg.target_per_replica)
            )
        } else {
            format!("{} wants {rec} = {current}; {threshold_text}", num(value))
        };
        Err(hold(
            "Held",
            if at_limit { "AtLimit" } else { "Steady" },
            why,
        ))
    };

    let decision = match wanted {
        Err(held) => held,
        Ok((to, reason, why)) => {
            let since_scale = s.last_scale_ms.map(|t| now_ms - t);
            if since_scale.is_some_and(|d| d < cfg.debounce_ms) {
                hold(
                    "HeldDebounce",
                    reason,
                    format!("{why}; within the {}ms debounce", cfg.debounce_ms),
                )
            } else if since_scale.is_some_and(|d| d < cfg.cooldown_ms) {
                hold(
                    "HeldCooldown",
                    reason,
                    format!(
                        "{why}; cooldown until {}s after the last scale",
                        cfg.cooldown_ms / 1000
                    ),
                )
            } else if s.tokens_left(cfg, now_ms) == 0 {
                hold(
                    "HeldRateLimit",
                    reason,
                    format!(
                        "{why}; {} operations in the last minute",
                        cfg.max_ops_per_minute
                    ),
                )
            } else {
                s.operations_ms.push(now_ms);
                s.last_scale_ms = Some(now_ms);
                s.desired = Some(to);
                s.in_flight = Some(InFlight {
                    to,
                    since_ms: now_ms,
                });
                s.rise = None;
                s.low = None;
                Decision {
                    action: if to > current {
                        "ScaledUp"
                    } else {
                        "ScaledDown"
                    }
                    .to_owned(),
                    reason: reason.to_owned(),
                    message: format!("scaled {current} → {to}: {why}"),
                    at_ms: now_ms,
                    from: current,
                    to,
                }
            }
        }
    };
    s.last = Some(decision.clone());
    (s, decision)
}

fn open(s: &mut State, cfg: &Config, now_ms: i64) {
    s.breaker = Breaker::Open {
        since_ms: now_ms,
        until_ms: now_ms + cfg.breaker_open_ms,
    };
    // Nothing is being confirmed across an outage.
    s.rise = None;
    s.low = None;
}

/// Half-opens a breaker whose time is up (the next query is the probe).
fn half_open_if_due(state: &mut State, now_ms: i64) {
    if let Breaker::Open { until_ms, .. } = state.breaker
        && now_ms >= until_ms
    {
        state.breaker = Breaker::HalfOpen;
    }
}

/// A number as people read it in a message: thousands separated by commas, two decimals,
/// none when both are zero. What rounds to a whole number at two decimals reads as one, so
/// floating-point noise (200.000004) does not change a message.
pub fn num(x: f64) -> String {
    let text = format!("{x:.2}");
    let text = match text.strip_suffix(".00") {
        Some(whole) if whole != "-0" => whole.to_owned(),
        Some(_) => "0".to_owned(),
        None => text,
    };
    let (sign, rest) = text.split_at(usize::from(text.starts_with('-')));
    let (int, frac) = rest.split_at(rest.find('.').unwrap_or(rest.len()));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("{sign}{grouped}{frac}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cfg() -> Config {
        Config {
            min: 2,
            max: 60,
            target_per_replica: 100.0,
            tolerance_percent: 10.0,
            alpha: 0.3,
            window_ms: 1_800_000,
            stddev_factor: 2.0,
            floor_ratio: 0.8,
            debounce_ms: 500,
            cooldown_ms: 60_000,
            max_ops_per_minute: 3,
            failure_threshold: 3,
            breaker_open_ms: 60_000,
            poll_ms: 15_000,
        }
    }

    /// Runs `values` (None = a failed query) a poll apart, as the runner would.
    fn run(
        cfg: &Config,
        start: i32,
        polls: &[Option<f64>],
        poll_ms: i64,
    ) -> Vec<(State, Decision)> {
        let mut state = State::default();
        let mut out = Vec::new();
        for (i, v) in polls.iter().enumerate() {
            let now = 1_000_000 + i as i64 * poll_ms;
            let poll = if !state.wants_query(now) {
                Poll::Skipped
            } else {
                match v {
                    Some(v) => Poll::Value(*v),
                    None => Poll::Failed("connection refused".into()),
                }
            };
            let (next, d) = step(&state, cfg, start, poll, Rollout::Converged, now);
            out.push((next.clone(), d));
            state = next;
        }
        out
    }

    fn arb_cfg() -> impl Strategy<Value = Config> {
        (
            0i32..20,
            0i32..200,
            1.0f64..500.0,
            0.01f64..1.0,
            1i64..600,
            0.0f64..4.0,
            0.0f64..2.0,
            (
                0i64..5_000,
                0i64..120,
                1u32..10,
                1u32..6,
                1i64..120,
                0u32..=50,
            ),
        )
            .prop_map(
                |(
                    min,
                    extra,
                    target,
                    alpha,
                    window_s,
                    k,
                    floor,
                    (debounce, cooldown_s, ops, failures, open_s, tolerance),
                )| Config {
                    min,
                    max: min + extra,
                    target_per_replica: target,
                    tolerance_percent: f64::from(tolerance),
                    alpha,
                    window_ms: window_s * 1000,
                    stddev_factor: k,
                    floor_ratio: floor,
                    debounce_ms: debounce,
                    cooldown_ms: cooldown_s * 1000,
                    max_ops_per_minute: ops,
                    failure_threshold: failures,
                    breaker_open_ms: open_s * 1000,
                    poll_ms: 1000,
                },
            )
    }

    fn arb_polls() -> impl Strategy<Value = Vec<Option<f64>>> {
        prop::collection::vec(prop::option::weighted(0.9, 0.0f64..50_000.0), 1..300)
    }

    proptest! {
        #[test]
        fn the_count_stays_within_bounds_and_only_moves_on_an_answer(
            cfg in arb_cfg(), start in 0i32..300, polls in arb_polls(), poll_ms in 200i64..20_000,
        ) {
            let mut before = start;
            for (state, d) in run(&cfg, start, &polls, poll_ms) {
                if d.scaled() {
                    prop_assert!(d.to >= cfg.min && d.to <= cfg.max, "{d:?}");
                    prop_assert!(matches!(d.action.as_str(), "ScaledUp" | "ScaledDown"));
                } else {
                    prop_assert_eq!(state.effective(start), before);
                }
                if matches!(d.action.as_str(), "MetricFailed" | "BreakerOpen") {
                    prop_assert!(!d.scaled(), "a failure never moves the count: {:?}", d);
                }
                before = state.effective(start);
            }
        }

        #[test]
        fn no_sixty_seconds_hold_more_operations_than_allowed_and_operations_respect_cooldown_and_debounce(
            cfg in arb_cfg(), polls in arb_polls(), poll_ms in 200i64..5_000,
        ) {
            let ops: Vec<i64> = run(&cfg, 10, &polls, poll_ms)
                .iter()
                .filter(|(_, d)| d.scaled())
                .map(|(_, d)| d.at_ms)
                .collect();
            for (i, t) in ops.iter().enumerate() {
                let in_minute = ops[i..].iter().take_while(|u| **u - t < 60_000).count();
                prop_assert!(in_minute <= cfg.max_ops_per_minute as usize, "{ops:?}");
                if let Some(next) = ops.get(i + 1) {
                    prop_assert!(next - t >= cfg.cooldown_ms.max(cfg.debounce_ms), "{ops:?}");
                }
            }
        }

        #[test]
        fn the_ewma_matches_a_direct_computation(
            values in prop::collection::vec(0.0f64..1e6, 1..200), alpha in 0.01f64..1.0,
        ) {
            let c = Config { alpha, ..cfg() };
            let polls: Vec<Option<f64>> = values.iter().copied().map(Some).collect();
            let last = run(&c, 10, &polls, 15_000).pop().unwrap().0;
            let mut reference = values[0];
            for v in &values[1..] {
                reference = alpha * v + (1.0 - alpha) * reference;
            }
            prop_assert!((last.ewma.unwrap() - reference).abs() <= 1e-6 * (1.0 + reference));
            prop_assert_eq!(last.samples, values.len() as u64);
        }

        #[test]
        fn the_state_survives_a_round_trip_through_json(
            cfg in arb_cfg(), polls in arb_polls(),
        ) {
            for (state, _) in run(&cfg, 5, &polls, 1_000) {
                let back: State = serde_json::from_slice(&serde_json::to_vec(&state).unwrap()).unwrap();
                prop_assert_eq!(back.desired, state.desired);
                prop_assert_eq!(back.breaker, state.breaker);
                prop_assert_eq!(back.window.moments().n, state.window.moments().n);
            }
        }
    }

    /// `polls` samples of uniform noise within ±`spread` (a ratio) around `mean`, drawn
    /// from `seed`.
    fn noise(seed: u64, mean: f64, spread: f64, polls: usize) -> Vec<Option<f64>> {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..polls)
            .map(|_| Some(mean * (1.0 + spread * rng.random_range(-1.0..1.0))))
            .collect()
    }

    /// Mean 100 at 10 per replica: the count the load wants is 10, and ±10 % of noise
    /// makes a plain ceil(value / target) say 10 or 11 from one poll to the next.
    fn noisy_cfg() -> Config {
        Config {
            min: 1,
            max: 100,
            target_per_replica: 10.0,
            ..cfg()
        }
    }

    fn scale_operations(out: &[(State, Decision)]) -> Vec<&Decision> {
        out.iter().map(|(_, d)| d).filter(|d| d.scaled()).collect()
    }

    proptest! {
        #[test]
        fn steady_noise_within_the_tolerance_never_moves_the_count_it_wants(seed in any::<u64>()) {
            let out = run(&noisy_cfg(), 10, &noise(seed, 100.0, 0.1, 200), 15_000);
            let ops = scale_operations(&out);
            prop_assert!(ops.is_empty(), "noise scaled: {ops:#?}");
        }

        #[test]
        fn from_any_start_steady_noise_settles_in_at_most_two_operations_and_then_holds(
            seed in any::<u64>(), start in 1i32..=60,
        ) {
            let out = run(&noisy_cfg(), start, &noise(seed, 100.0, 0.1, 200), 15_000);
            let ops = scale_operations(&out);
            // The first operation lands within the tolerance of the mean (10 or 11: 100
            // is within 10 % of 110). From 11 the noise can still dip below 99 (10 % under
            // 110) long enough to go down to 10; from 10 nothing moves it.
            prop_assert!(ops.len() <= 2, "{ops:#?}");
            prop_assert!(ops.iter().all(|d| d.to == 10 || d.to == 11), "{ops:#?}");
            if let [_, second] = ops.as_slice() {
                prop_assert_eq!((second.from, second.to), (11, 10), "{:#?}", ops);
            }
        }
    }

    #[test]
    fn failures_open_the_breaker_which_holds_then_probes_once_and_closes() {
        let c = cfg();
        let mut polls = vec![Some(1000.0); 4];
        polls.extend([None, None, None]);
        // Four polls while open (15 s apart, open for 60 s), then a successful probe.
        polls.extend([Some(5000.0); 8]);
        let out = run(&c, 10, &polls, 15_000);
        let held = out[3].0.effective(10);
        assert_eq!(out[4].1.action, "MetricFailed");
        assert_eq!(out[5].1.action, "MetricFailed");
        assert_eq!(out[6].1.action, "BreakerOpen");
        assert_eq!(out[6].0.breaker.name(), "Open");
        for (state, d) in &out[7..10] {
            assert_eq!(d.action, "BreakerOpen", "{d:?}");
            assert_eq!(state.effective(10), held, "never min, never zero");
            assert_eq!(state.samples, 4, "no query while open");
        }
        let (after_probe, d) = &out[10];
        assert_eq!(after_probe.breaker, Breaker::Closed, "{d:?}");
        assert_eq!(after_probe.samples, 5);
    }

    #[test]
    fn a_failed_probe_opens_the_breaker_again() {
        let c = Config {
            failure_threshold: 1,
            ..cfg()
        };
        let out = run(&c, 10, &[Some(1.0), None, None, None, None, None], 15_000);
        assert_eq!(out[1].0.breaker.name(), "Open");
        let (state, d) = &out[5];
        assert_eq!(d.reason, "ProbeFailed", "{d:?}");
        assert_eq!(state.breaker.name(), "Open");
    }

    #[test]
    fn a_surge_scales_up_at_once_and_noise_does_not() {
        let c = cfg();
        let mut polls: Vec<Option<f64>> = (0..40)
            .map(|i| Some(1000.0 + if i % 2 == 0 { 60.0 } else { -60.0 }))
            .collect();
        polls.push(Some(5000.0));
        let out = run(&c, 11, &polls, 15_000);
        let ops: Vec<&Decision> = out.iter().map(|(_, d)| d).filter(|d| d.scaled()).collect();
        assert_eq!(ops.len(), 1, "{ops:?}");
        assert_eq!((ops[0].reason.as_str(), ops[0].to), ("Surge", 50));
        assert!(
            ops[0].message.contains("5,000 > threshold"),
            "{}",
            ops[0].message
        );
    }

    #[test]
    fn a_slow_ramp_is_followed_even_though_it_never_crosses_the_threshold() {
        let c = Config {
            cooldown_ms: 15_000,
            max_ops_per_minute: 10,
            max: 1000,
            ..cfg()
        };
        let polls: Vec<Option<f64>> = (0..60).map(|i| Some(1000.0 * 1.03f64.powi(i))).collect();
        let out = run(&c, 10, &polls, 15_000);
        let (last, _) = out.last().unwrap();
        let rec = last.recommendation.unwrap();
        assert!(
            last.effective(10) >= rec - rec / 10,
            "{} vs {rec}",
            last.effective(10)
        );
        assert!(out.iter().any(|(_, d)| d.reason == "Trend" && d.scaled()));
    }

    #[test]
    fn a_scale_down_waits_for_the_cooldown_and_goes_to_the_highest_recommendation_seen() {
        let c = Config {
            cooldown_ms: 60_000,
            ..cfg()
        };
        let polls = [
            Some(2000.0),
            Some(2000.0),
            Some(2000.0),
            Some(800.0),
            Some(1200.0),
            Some(700.0),
            Some(900.0),
            Some(600.0),
        ];
        let out = run(&c, 20, &polls, 15_000);
        let downs: Vec<&Decision> = out
            .iter()
            .map(|(_, d)| d)
            .filter(|d| d.action == "ScaledDown")
            .collect();
        assert_eq!(downs.len(), 1, "{downs:?}");
        assert_eq!(downs[0].to, 12, "the highest recommendation of the low run");
        assert_eq!(downs[0].at_ms - out[3].1.at_ms, 60_000);
    }

    #[test]
    fn a_constant_load_says_the_same_thing_every_poll() {
        // Every decision's message is shown in a condition: one that changes with floating-
        // point noise (a deviation of 1e-6 around a whole number) rewrites the status.
        let polls = vec![Some(200.0); 120];
        let out = run(&cfg(), 2, &polls, 15_000);
        let messages: std::collections::BTreeSet<&str> =
            out[10..].iter().map(|(_, d)| d.message.as_str()).collect();
        assert_eq!(messages.len(), 1, "{messages:#?}");
    }

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(
            num(200.000_004),
            "200",
            "what rounds to a whole number reads as one"
        );
        assert_eq!(num(1750.0), "1,750");
        assert_eq!(num(1_234_567.891), "1,234,567.89");
        assert_eq!(num(-1400.0), "-1,400");
        assert_eq!(num(999.0), "999");
        assert_eq!(num(0.5), "0.50");
    }

    #[test]
    fn recommendations_round_up_and_clamp() {
        let c = Config {
            tolerance_percent: 0.0,
            ..cfg()
        };
        assert_eq!(c.recommend(1001.0, 10), 11);
        assert_eq!(c.recommend(999.0, 10), 10);
        assert_eq!(c.recommend(0.0, 10), 2);
        assert_eq!(c.recommend(-5.0, 10), 2);
        assert_eq!(c.recommend(1e300, 10), 60);
    }

    #[test]
    fn recommendations_hold_the_count_within_the_tolerance_and_follow_the_value_beyond_it() {
        let c = cfg();
        // 10 replicas at 100 each carry 1,000; 10 % either side is noise.
        assert_eq!(c.recommend(1100.0, 10), 10, "the upper edge is inside");
        assert_eq!(c.recommend(1063.8, 10), 10);
        assert_eq!(c.recommend(900.0, 10), 10, "the lower edge is inside");
        assert_eq!(c.recommend(1100.5, 10), 12);
        assert_eq!(c.recommend(899.0, 10), 9);
        // The band is the current count's: 1,050 holds 11 as it holds 10.
        assert_eq!(c.recommend(1050.0, 11), 11);
        // Held counts are clamped too: a count above max comes down to it.
        assert_eq!(c.recommend(7000.0, 70), 60);
        // Nothing carried, nothing to tolerate: any load asks for replicas.
        let from_zero = Config { min: 0, ..cfg() };
        assert_eq!(from_zero.recommend(1.0, 0), 1);
        assert_eq!(from_zero.recommend(0.0, 0), 0);
    }

    #[test]
    fn a_value_within_the_tolerance_holds_as_steady_and_says_why() {
        let out = run(&noisy_cfg(), 10, &[Some(106.38); 6], 15_000);
        for (state, d) in &out {
            assert_eq!((d.action.as_str(), d.reason.as_str()), ("Held", "Steady"));
            assert_eq!(state.recommendation, Some(10));
            assert!(state.rise.is_none(), "{state:?}");
        }
        let message = &out[5].1.message;
        assert!(
            message.starts_with("106.38 is within 10% of 100 (10 × 10)"),
            "{message}"
        );
    }
}
