//! CrossClusterScalePolicy as a [`PlacementKind`]: the spec's count (or the one the
//! autoscaler holds) divided over `spec.distribution` by [`plan`], with failover and the
//! return cooldown; every decision named by a scale request id and announced in its own
//! Event; the status aggregated from the agents' reports, with `status.autoscaling`
//! written at once when a decision, the recommendation band, the breaker or a condition
//! changes, when only its live figures move at most every
//! [`ScaleOptions::autoscaling_status_interval`], and for poll bookkeeping alone never.
//!
//! Triggers beyond the generic ones: the autoscaler's stored state (`autoscale/<ns>/<name>`).
//! A deleted policy's autoscaling state goes with its records; the member workloads keep
//! their replicas and are no longer managed.

use accord_common::distribution::PlacedKind;
use std::sync::Arc;
use std::time::Duration;

use accord_common::distribution::{AssignmentSpec, Observed};
use accord_crds::conditions::{self, types};
use accord_crds::scale::{
    AutoscalingStatus, CrossClusterScalePolicy, CrossClusterScalePolicyStatus, Weighting,
};
use accord_crds::validate::Validate;
use kube::ResourceExt;
use kube::runtime::reflector::Store as Reflector;
use std::collections::HashMap;
use tracing::info;

use super::ScaleDecision;
use super::autoscale::engine::{Config, State};
use super::plan::{plan_with, scale_spec};
use super::status::{AggregateInputs, aggregate, status_changed};
use crate::controllers::field_owners::{ClaimedClusters, FieldClaim};
use crate::controllers::placement::{
    DecideInput, Decided, Note, PlacementKind, Reported, Started, StatusInput, Trigger, Watched,
    trigger_on_changes,
};
use crate::controllers::transitions::{self, Meaning};
use crate::controllers::{ControllerContext, ReconcileError};
use crate::distribution::PlacementRecord;

/// Default of `--autoscaling-status-interval`.
pub const DEFAULT_AUTOSCALING_STATUS_INTERVAL: Duration = Duration::from_secs(30);

/// The CrossClusterScalePolicy settings of `serve`.
#[derive(Clone, Debug, clap::Args)]
pub struct ScaleOptions {
    /// How often, at most, `status.autoscaling` of a CrossClusterScalePolicy is rewritten
    /// when only its live figures (value, EWMA, deviation, threshold) moved; decisions, the
    /// recommended count, the breaker and conditions are written at once, and poll
    /// bookkeeping alone (samples) never. The live value is on /metrics.
    #[arg(long, default_value = "30s", value_parser = accord_crds::duration::parse_flag)]
    pub autoscaling_status_interval: Duration,
}

impl Default for ScaleOptions {
    fn default() -> Self {
        Self {
            autoscaling_status_interval: DEFAULT_AUTOSCALING_STATUS_INTERVAL,
        }
    }
}

/// The CrossClusterScalePolicy plug-in.
pub struct Scale {
    ctx: Arc<ControllerContext>,
    options: ScaleOptions,
}

/// What the status needs beyond the record: the autoscaling config and state.
#[derive(Default)]
pub struct ScaleFacts {
    autoscaled: Option<(Config, Option<State>)>,
}

impl PlacementKind for Scale {
    type Object = CrossClusterScalePolicy;
    type Status = CrossClusterScalePolicyStatus;
    type Decision = ScaleDecision;
    type Facts = ScaleFacts;
    type Options = ScaleOptions;

    const CONTROLLER: &'static str = "CrossClusterScalePolicy controller";
    const KIND: PlacedKind = PlacedKind::CrossClusterScalePolicy;
    const DECISION_TAG: &'static str = "scale";
    // Scaling decisions are serialised per policy by its etcd lock (DESIGN).
    const DECISION_LOCK: bool = true;
    const LEGACY_FINALIZERS: &'static [&'static str] = &["accord.io/placements"];
    /// The division holds tainted and drained clusters itself (their replicas go to the
    /// others): see `plan`.
    const HOLDS_TAINTED: bool = false;

    fn start(
        ctx: &Arc<ControllerContext>,
        objects: Reflector<Watched<Self>>,
        trigger: Trigger<Self>,
        options: &ScaleOptions,
    ) -> Started<Self> {
        Started {
            kind: Self {
                ctx: ctx.clone(),
                options: options.clone(),
            },
            // The autoscaler's stored state → the policy it is about.
            tasks: vec![Box::pin(trigger_on_changes(
                crate::scale::autoscale_states(ctx).subscribe(),
                ctx.store.keys().autoscale_prefix(),
                objects,
                trigger,
                |rest| rest.split_once('/'),
            ))],
            listed: Box::pin(async { true }),
        }
    }

    fn status_changed(
        old: Option<&CrossClusterScalePolicyStatus>,
        new: &CrossClusterScalePolicyStatus,
    ) -> bool {
        status_changed(old, new)
    }

    /// `spec.replicas` of the target in every cluster the policy may scale it in: each
    /// `distribution` entry's (in its namespace) and, with a placement, every cluster it
    /// selects. Read field by field from the stored object, so a policy whose spec no longer
    /// decodes still claims what it names.
    fn field_claims(object: &Watched<Self>) -> Vec<FieldClaim> {
        let text = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(serde_json::Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let Some(name) = text("/spec/targetRef/name") else {
            return Vec::new();
        };
        let kind = text("/spec/targetRef/kind").unwrap_or("Deployment");
        let own_namespace = object.namespace().unwrap_or_default();
        let claim = |clusters, namespace: Option<&str>| FieldClaim {
            clusters,
            namespace: namespace.unwrap_or(&own_namespace).to_owned(),
            kind: kind.to_owned(),
            name: name.to_owned(),
            field: "spec.replicas".to_owned(),
        };
        let mut claims: Vec<FieldClaim> = object
            .pointer("/spec/distribution")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|share| {
                let cluster = share.get("cluster")?.as_str()?;
                let namespace = share.get("namespace").and_then(serde_json::Value::as_str);
                Some(claim(ClaimedClusters::Named(cluster.to_owned()), namespace))
            })
            .collect();
        if let Some(placement) = object
            .pointer("/spec/placement")
            .and_then(|p| serde_json::from_value(p.clone()).ok())
        {
            claims.push(claim(ClaimedClusters::Placement(placement), None));
        }
        claims
    }

    fn may_select(object: &Watched<Self>, cluster: &str) -> bool {
        object
            .pointer("/spec/distribution")
            .and_then(serde_json::Value::as_array)
            .is_some_and(|d| d.iter().any(|d| d["cluster"] == cluster))
            || crate::controllers::placement::selection_may_include(object, cluster)
    }

    fn placement(policy: &CrossClusterScalePolicy) -> Option<&accord_crds::ClusterPlacement> {
        policy.spec.placement.as_ref()
    }

    fn decide(
        &self,
        policy: &CrossClusterScalePolicy,
        input: &DecideInput<'_, ScaleDecision>,
    ) -> Decided<Self> {
        if let Err(errors) = policy.spec.validate() {
            return Decided::Invalid(errors.to_string());
        }
        let ns = policy.namespace().unwrap_or_default();
        // With autoscaling, the count divided is the one the autoscaler holds (spec is
        // never written); `spec.desiredReplicas` until it has decided one.
        let autoscaled = policy.spec.autoscaling.as_ref().map(|a| {
            let state = crate::scale::autoscale_states(&self.ctx)
                .get(&self.ctx.store.keys().autoscale(&ns, &policy.name_any()))
                .map(|(s, _)| s);
            (Config::from_spec(a), state)
        });
        let mut spec = policy.spec.clone();
        // With a placement, the clusters are the ones it selects, each with its
        // distribution entry or weight 1.
        if policy.spec.placement.is_some() {
            match input.selected() {
                Ok(selected) => {
                    let names: Vec<String> = selected.into_iter().map(|c| c.name).collect();
                    spec.distribution = policy.spec.shares_in(Some(&names));
                }
                Err(e) => return Decided::Invalid(e.to_string()),
            }
        }
        if let Some((cfg, Some(state))) = &autoscaled
            && let Some(count) = state.desired
        {
            spec.desired_replicas = count.clamp(cfg.min, cfg.max);
        }
        // What fits where, from the agents' last reports on the shares decided before.
        let fits = (spec.weighting == Weighting::AvailableCapacity).then(|| {
            input
                .previous
                .map(|r| crate::controllers::placement::reports(&self.ctx, r))
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(cluster, report)| match report.observed {
                    Observed::Scale(s) => {
                        let fit = u32::try_from(s.fitting_replicas?.max(0)).unwrap_or(u32::MAX);
                        Some((cluster, fit))
                    }
                    _ => None,
                })
                .collect::<HashMap<String, u32>>()
        });
        let planned = plan_with(
            &spec,
            &ns,
            input.clusters,
            input.previous,
            input.now_millis / 1000,
            fits.as_ref(),
        );
        Decided::Record {
            shares: planned.shares,
            decision: ScaleDecision {
                desired_replicas: spec.desired_replicas,
                scale_request_id: String::new(),
                infeasible: planned.infeasible,
                moved_away: planned.moved_away,
                weighting: planned.weighting,
            },
            facts: ScaleFacts { autoscaled },
            recheck_after: planned.recheck_after,
        }
    }

    fn same_intent(a: &PlacementRecord<ScaleDecision>, b: &PlacementRecord<ScaleDecision>) -> bool {
        // A new scale request id alone changes nothing in a member cluster.
        let unnamed = |r: &PlacementRecord<ScaleDecision>| {
            let mut r = r.clone();
            Self::name_decision(&mut r, "");
            r
        };
        let (a, b) = (unnamed(a), unnamed(b));
        a.shares == b.shares && a.decision.same_intent(&b.decision)
    }

    fn name_decision(record: &mut PlacementRecord<ScaleDecision>, id: &str) {
        id.clone_into(&mut record.decision.scale_request_id);
        for share in &mut record.shares {
            if let Some(AssignmentSpec::Scale(spec)) = &mut share.assignment {
                id.clone_into(&mut spec.scale_request_id);
            }
        }
    }

    fn announce(
        &self,
        _policy: &CrossClusterScalePolicy,
        record: &PlacementRecord<ScaleDecision>,
        _revision: i64,
    ) -> Option<Note> {
        let decision = &record.decision;
        let counts: Vec<(String, i32)> = record
            .shares
            .iter()
            .map(|s| {
                (
                    s.cluster.clone(),
                    scale_spec(s).map_or(0, |spec| spec.replicas),
                )
            })
            .collect();
        info!(placed = %record.placed, id = %decision.scale_request_id, shares = ?counts, "scaling decision");
        let shares = counts
            .iter()
            .map(|(c, r)| format!("{c}={r}"))
            .collect::<Vec<_>>();
        let shares = crate::distribution::reported::named(&shares, ", ");
        let mut message = format!(
            "{} replicas: {shares} (scale request {})",
            decision.desired_replicas, decision.scale_request_id
        );
        if let Some(weighting) = &decision.weighting {
            message.push_str("; ");
            message.push_str(weighting);
        }
        Some(match &decision.infeasible {
            Some(_) => Note::warning("ScaleDecision", message),
            None => Note::normal("ScaleDecision", message),
        })
    }

    async fn status_of(
        &self,
        policy: &CrossClusterScalePolicy,
        input: StatusInput<'_, Self>,
    ) -> Result<Reported<CrossClusterScalePolicyStatus>, ReconcileError> {
        let Some(record) = input.record else {
            return Err(ReconcileError::Store(crate::store::StoreError::Unexpected(
                format!("no placements record for {}", record_name(policy)),
            )));
        };
        let old = policy.status.as_ref();
        let generation = policy.metadata.generation;
        let mut status = aggregate(&AggregateInputs {
            shares: &record.shares,
            decision: &record.decision,
            reports: input.reports,
            clusters: input.clusters,
            generation,
            old,
            decided_at: input.decided_at,
            now: input.now,
        });
        let autoscaled = input.facts.autoscaled;
        let rendered = autoscaled.as_ref().map(|(cfg, state)| {
            state.as_ref().map_or_else(Default::default, |s| {
                super::autoscale::status(s, cfg, policy.spec.desired_replicas)
            })
        });
        status.autoscaling = throttled(
            old.and_then(|o| o.autoscaling.as_ref()),
            rendered,
            self.options.autoscaling_status_interval,
        );
        status.conditions = match &autoscaled {
            Some((_, state)) => conditions::merge(
                &status.conditions,
                &[super::autoscale::scaling_active(state.as_ref())],
                generation,
                input.now,
            ),
            None => {
                let mut c = status.conditions;
                c.retain(|c| c.type_ != types::SCALING_ACTIVE);
                c
            }
        };
        // `ScaleDecision` tells each division when it is decided; the status tells a
        // cluster newly in trouble, and the policy degraded and healthy again.
        let notes = transitions::of_statuses(
            old,
            &status,
            generation,
            Meaning {
                applied: None,
                healthy: (types::DEGRADED, false),
            },
        );
        Ok(Reported {
            status,
            notes,
            retry: None,
        })
    }

    async fn forget(&self, namespace: &str, name: &str) -> Result<(), ReconcileError> {
        let fence = self.ctx.election.fence().ok_or(ReconcileError::NotLeader)?;
        self.ctx
            .store
            .fenced_delete(&fence, &self.ctx.store.keys().autoscale(namespace, name))
            .await?;
        Ok(())
    }
}

fn record_name(policy: &CrossClusterScalePolicy) -> String {
    crate::controllers::placement::object_name(policy)
}

/// The part of `status.autoscaling` whose change is worth a write at once: the decision,
/// the count asked for (its band), the breaker, the count held.
fn significant(s: &AutoscalingStatus) -> impl PartialEq + '_ {
    (
        (&s.last_decision, &s.reason, &s.breaker_state),
        (
            s.recommendation,
            s.effective_desired_replicas,
            &s.last_scale_time,
        ),
        s.unconverged_operations,
    )
}

/// How far a live figure must move, relative to the metric's magnitude, to be worth a
/// status write: status is read by people (the exact figures are on `/metrics`), and the
/// standard deviation of a constant series is not exactly zero in floating point (its
/// noise is absolute, around 1e-6 for values in the hundreds), so the tolerance is scaled
/// by the value and the EWMA rather than by each figure.
const LIVE_TOLERANCE: f64 = 1e-3;

/// Whether the live figures moved beyond [`LIVE_TOLERANCE`]: written then, at most once
/// per interval.
fn live_moved(a: &AutoscalingStatus, b: &AutoscalingStatus) -> bool {
    let scale = [
        a.current_metric_value,
        b.current_metric_value,
        a.ewma,
        b.ewma,
    ]
    .into_iter()
    .flatten()
    .fold(1.0_f64, |m, x| m.max(x.abs()));
    let moved = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => (x - y).abs() > LIVE_TOLERANCE * scale,
        (x, y) => x.is_some() != y.is_some(),
    };
    moved(a.current_metric_value, b.current_metric_value)
        || moved(a.ewma, b.ewma)
        || moved(a.stddev, b.stddev)
        || moved(a.threshold, b.threshold)
}

/// `status.autoscaling` to write: `rendered` when something significant changed, or when
/// the live figures moved and `interval` has passed since the shown sample; else what is
/// shown. Poll bookkeeping alone (samples, sample and decision times) is never a reason to
/// write: a steady load costs no write at all, and the live value is on `/metrics`.
fn throttled(
    shown: Option<&AutoscalingStatus>,
    rendered: Option<AutoscalingStatus>,
    interval: Duration,
) -> Option<AutoscalingStatus> {
    let (Some(shown), Some(new)) = (shown, &rendered) else {
        return rendered;
    };
    if significant(shown) != significant(new) {
        return rendered;
    }
    let sample_ms =
        |s: &AutoscalingStatus| s.last_sample_time.as_ref().map(|t| t.0.as_millisecond());
    let due = match (sample_ms(shown), sample_ms(new)) {
        (Some(then), Some(now)) => now.saturating_sub(then) >= interval.as_millis() as i64,
        (None, Some(_)) => true,
        _ => false,
    };
    if due && live_moved(shown, new) {
        rendered
    } else {
        Some(shown.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn at(ms: i64, samples: i64, decision: &str) -> AutoscalingStatus {
        AutoscalingStatus {
            current_metric_value: Some(samples as f64),
            last_sample_time: Some(Time(Timestamp::from_millisecond(ms).unwrap())),
            samples: Some(samples),
            last_decision: Some(decision.into()),
            recommendation: Some(10),
            ..AutoscalingStatus::default()
        }
    }

    #[test]
    fn a_policy_claims_replicas_even_when_its_spec_does_not_decode() {
        let policy = |desired: serde_json::Value| {
            Watched::<Scale>::from_value(serde_json::json!({
                "apiVersion": "accord.io/v1beta1",
                "kind": "CrossClusterScalePolicy",
                "metadata": {"name": "web", "namespace": "team"},
                "spec": {
                    "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "frontend"},
                    "desiredReplicas": desired,
                    "distribution": [
                        {"cluster": "east", "weight": 1},
                        {"cluster": "west", "weight": 1, "namespace": "other"}
                    ],
                    "placement": {"clusterSelector": {"matchLabels": {"tier": "prod"}}}
                }
            }))
            .unwrap()
        };
        let undecodable = policy(serde_json::json!(3_000_000_000_u64));
        assert!(undecodable.decode().is_err());
        let claims = Scale::field_claims(&undecodable);
        assert_eq!(claims, Scale::field_claims(&policy(serde_json::json!(12))));
        let described: Vec<(String, &str, &str, &str)> = claims
            .iter()
            .map(|c| {
                let clusters = match &c.clusters {
                    ClaimedClusters::Named(name) => name.clone(),
                    ClaimedClusters::Placement(_) => "placement".to_owned(),
                };
                (
                    clusters,
                    c.namespace.as_str(),
                    c.name.as_str(),
                    c.field.as_str(),
                )
            })
            .collect();
        assert_eq!(
            described,
            [
                ("east".to_owned(), "team", "frontend", "spec.replicas"),
                ("west".to_owned(), "other", "frontend", "spec.replicas"),
                ("placement".to_owned(), "team", "frontend", "spec.replicas"),
            ]
        );
    }

    #[test]
    fn live_figures_alone_are_written_at_most_once_per_interval() {
        let interval = Duration::from_secs(30);
        let shown = at(0, 1, "Held");
        let within = throttled(Some(&shown), Some(at(15_000, 2, "Held")), interval);
        assert_eq!(
            within.as_ref(),
            Some(&shown),
            "15 s later: nothing new to write"
        );
        let after = throttled(Some(&shown), Some(at(30_000, 3, "Held")), interval);
        assert_eq!(
            after.unwrap().samples,
            Some(3),
            "30 s later, a new value: written"
        );
    }

    #[test]
    fn floating_point_noise_is_not_a_move() {
        let interval = Duration::from_secs(30);
        let shown = AutoscalingStatus {
            current_metric_value: Some(200.0),
            ewma: Some(200.0),
            stddev: Some(0.0),
            ..at(0, 1, "Held")
        };
        let noisy = AutoscalingStatus {
            current_metric_value: Some(200.0),
            ewma: Some(200.000_000_000_000_03),
            stddev: Some(2.3e-6),
            ..at(60_000, 5, "Held")
        };
        assert_eq!(
            throttled(Some(&shown), Some(noisy), interval).as_ref(),
            Some(&shown)
        );
    }

    #[test]
    fn a_steady_load_is_never_written_again() {
        let interval = Duration::from_secs(30);
        let steady = |ms: i64, samples: i64| AutoscalingStatus {
            current_metric_value: Some(200.0),
            ..at(ms, samples, "Held")
        };
        let shown = steady(0, 1);
        for later in [15_000, 30_000, 600_000] {
            let next = throttled(Some(&shown), Some(steady(later, later / 1000)), interval);
            assert_eq!(
                next.as_ref(),
                Some(&shown),
                "{later} ms: only bookkeeping moved"
            );
        }
    }

    #[test]
    fn a_new_decision_or_band_is_written_at_once() {
        let interval = Duration::from_secs(30);
        let shown = at(0, 1, "Held");
        let scaled = throttled(Some(&shown), Some(at(1_000, 2, "ScaledUp")), interval);
        assert_eq!(scaled.unwrap().last_decision.as_deref(), Some("ScaledUp"));
        let mut band = at(1_000, 2, "Held");
        band.recommendation = Some(11);
        let moved = throttled(Some(&shown), Some(band), interval);
        assert_eq!(moved.unwrap().recommendation, Some(11));
        assert_eq!(
            throttled(None, Some(at(0, 1, "Held")), interval)
                .unwrap()
                .samples,
            Some(1)
        );
        assert_eq!(
            throttled(Some(&shown), None, interval),
            None,
            "autoscaling turned off"
        );
    }

    #[test]
    fn the_request_id_alone_is_not_a_new_decision() {
        use crate::distribution::ShareRecord;
        use accord_common::distribution::{PlacedRef, ScaleSpec};
        let record = |replicas: i32, id: &str| PlacementRecord {
            placed: PlacedRef::new(PlacedKind::CrossClusterScalePolicy, "default", "web"),
            generation: 1,
            decided_unix_millis: 0,
            shares: vec![ShareRecord {
                since: None,
                cluster: "a".into(),
                assignment: Some(AssignmentSpec::Scale(ScaleSpec::deployment(
                    "prod", "frontend", replicas, id,
                ))),
                held_reason: None,
                hold: None,
            }],
            decision: ScaleDecision {
                desired_replicas: replicas,
                scale_request_id: id.into(),
                infeasible: None,
                moved_away: Vec::new(),
                weighting: None,
            },
            traceparent: String::new(),
        };
        assert!(Scale::same_intent(&record(7, "01A"), &record(7, "01B")));
        assert!(Scale::same_intent(&record(7, ""), &record(7, "01B")));
        assert!(!Scale::same_intent(&record(7, "01A"), &record(8, "01A")));
        let mut named = record(7, "");
        Scale::name_decision(&mut named, "01C");
        assert_eq!(named.decision.scale_request_id, "01C");
        assert_eq!(
            scale_spec(&named.shares[0]).unwrap().scale_request_id,
            "01C"
        );
    }
}
