//! The hub's Prometheus metrics, served as text on `/metrics`.

pub use accord_common::metrics::{CategoryLabel, KindLabel, ResultLabel};
use accord_common::metrics::{TracedHistogram, stage_histogram};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// Label of autoscaling decisions: what was done and why.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabel {
    /// ScaledUp, ScaledDown, Held, HeldCooldown, … (`status.autoscaling.lastDecision`).
    pub action: String,
    /// Surge, Trend, SustainedLow, … (`status.autoscaling.reason`).
    pub reason: String,
}

/// Label of per-policy gauges: `namespace/name`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabel {
    /// `namespace/name` of the policy.
    pub policy: String,
}

/// Label of streams ended because the registry no longer accepts their certificate.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RevocationLabel {
    /// `revoked`, `replaced` or `expired`.
    pub reason: String,
}

/// Label of writes to the management cluster's API server (see [`crate::writes::counter`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KubeWriteLabel {
    /// The plural resource, with the subresource appended (`federatedkafkatopics/status`).
    pub resource: String,
    /// `create`, `update`, `patch`, `delete` or `deletecollection`.
    pub verb: String,
    /// `status`, `event`, `finalizer` or `object`.
    pub reason: String,
}

/// Label of rollouts that ended: the kind and how (`Succeeded`, `RolledBack`, `Failed`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutEndLabel {
    /// The kind, as `PlacedKind` names it.
    pub kind: String,
    /// `Succeeded`, `RolledBack` or `Failed`.
    pub phase: String,
}

/// Label of the console's page views: which page (`fleet`, `kind`, `object`, `live`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConsolePageLabel {
    /// The page.
    pub page: String,
}

/// Label of the console's access reviews sent to the management API server.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConsoleReviewLabel {
    /// `tokenreview` or `subjectaccessreview`.
    pub review: String,
}

/// A gauge holding a float.
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// Every metric the hub exports.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    /// Agents with an open, heartbeating stream to this replica.
    pub connected_agents: Gauge,
    /// 1 while this replica is the leader.
    pub is_leader: Gauge,
    /// Tasks alive in the hub's async runtime (a leak shows as steady growth).
    pub runtime_tasks: Gauge,
    /// Heartbeats received.
    pub heartbeats: Counter,
    /// Status reports by result (`accepted`, `conflict`).
    pub status_reports: Family<ResultLabel, Counter>,
    /// Latency of etcd transactions issued for agents' reports.
    pub etcd_txn_seconds: Histogram,
    /// Errors by category.
    pub errors: Family<CategoryLabel, Counter>,
    /// ManagedCluster status writes.
    pub status_writes: Counter,
    /// Reconciles run, by kind.
    pub reconciles: Family<KindLabel, Counter>,
    /// Autoscaling decisions by action and reason.
    pub autoscale_decisions: Family<DecisionLabel, Counter>,
    /// Last metric value read, by policy.
    pub autoscale_value: Family<PolicyLabel, FloatGauge>,
    /// Current dynamic threshold, by policy.
    pub autoscale_threshold: Family<PolicyLabel, FloatGauge>,
    /// 1 while a policy's circuit breaker is open (or half-open), by policy.
    pub autoscale_breaker_open: Family<PolicyLabel, Gauge>,
    /// Registrations by result.
    pub registrations: Family<ResultLabel, Counter>,
    /// Agent streams ended because the registry no longer accepts their certificate.
    pub revoked_streams: Family<RevocationLabel, Counter>,
    /// Certificate renewals over the Sync stream, by result (`ok`, `denied`, `bad_csr`,
    /// `unavailable`, `contended`).
    pub certificate_renewals: Family<ResultLabel, Counter>,
    /// Writes to the management cluster's API server, by resource, verb and reason.
    pub kube_writes: Family<KubeWriteLabel, Counter>,
    /// Steps of progressive rollouts (more clusters sent a revision), by kind.
    pub rollout_steps: Family<KindLabel, Counter>,
    /// Progressive rollouts that ended, by kind and phase.
    pub rollouts_ended: Family<RolloutEndLabel, Counter>,
    /// Seconds from a rollout's start to its success, by kind.
    pub rollout_seconds: Family<KindLabel, Histogram>,
    /// Seconds from the first missed deadline of a rollout to the write that took its
    /// clusters back.
    pub rollback_delay_seconds: Histogram,
    /// Console pages served (and live updates rendered), by page.
    pub console_pages: Family<ConsolePageLabel, Counter>,
    /// Access reviews the console sent to the management API server (the answers are
    /// cached per token), by review.
    pub console_reviews: Family<ConsoleReviewLabel, Counter>,
    /// Where a change spends its time, stage by stage (each with the change's trace as
    /// exemplar when tracing is on).
    pub change: ChangeStages,
}

/// The stages of a change of a placed object, as the hub sees them: decided, persisted,
/// sent to each member, reported back, and end to end. The agent adds its own stage
/// (`accord_agent_change_applied_seconds`).
#[derive(Clone)]
pub struct ChangeStages {
    /// Seconds the kind's decision took (selecting clusters, computing shares).
    pub decision_seconds: TracedHistogram,
    /// Seconds the fenced write of the new placements record took.
    pub persist_seconds: TracedHistogram,
    /// Seconds from the decision to its assignments queued on the members' streams.
    pub fanout_seconds: TracedHistogram,
    /// Seconds from a member's observation to its report stored as the object's status
    /// record.
    pub report_seconds: TracedHistogram,
    /// Seconds from the decision to each member's report that it applied it (Synced at the
    /// decision's revision), by kind.
    pub end_to_end_seconds: Family<KindLabel, TracedHistogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("accord_hub");
        let connected_agents = Gauge::default();
        let is_leader = Gauge::default();
        let runtime_tasks = Gauge::default();
        let heartbeats = Counter::default();
        let status_reports = Family::<ResultLabel, Counter>::default();
        let etcd_txn_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 14));
        let errors = Family::<CategoryLabel, Counter>::default();
        let status_writes = Counter::default();
        let reconciles = Family::<KindLabel, Counter>::default();
        registry.register(
            "connected_agents",
            "Agents with an open, heartbeating stream to this replica",
            connected_agents.clone(),
        );
        registry.register(
            "is_leader",
            "1 while this replica is the leader",
            is_leader.clone(),
        );
        registry.register(
            "runtime_tasks",
            "Tasks alive in the hub's async runtime",
            runtime_tasks.clone(),
        );
        registry.register("heartbeats", "Heartbeats received", heartbeats.clone());
        registry.register(
            "status_reports",
            "Status reports by result (accepted, conflict)",
            status_reports.clone(),
        );
        registry.register(
            "etcd_txn_duration_seconds",
            "Latency of etcd transactions for status reports",
            etcd_txn_seconds.clone(),
        );
        registry.register("errors", "Errors by kind", errors.clone());
        registry.register(
            "managedcluster_status_writes",
            "ManagedCluster status patches written",
            status_writes.clone(),
        );
        registry.register("reconciles", "Reconciles run, by kind", reconciles.clone());
        let autoscale_decisions = Family::<DecisionLabel, Counter>::default();
        let autoscale_value = Family::<PolicyLabel, FloatGauge>::default();
        let autoscale_threshold = Family::<PolicyLabel, FloatGauge>::default();
        let autoscale_breaker_open = Family::<PolicyLabel, Gauge>::default();
        registry.register(
            "autoscale_decisions",
            "Autoscaling decisions by action and reason",
            autoscale_decisions.clone(),
        );
        registry.register(
            "autoscale_metric_value",
            "Last metric value an autoscaled policy read",
            autoscale_value.clone(),
        );
        registry.register(
            "autoscale_threshold",
            "Dynamic scale-up threshold of an autoscaled policy",
            autoscale_threshold.clone(),
        );
        registry.register(
            "autoscale_breaker_open",
            "1 while an autoscaled policy's circuit breaker is open or half-open",
            autoscale_breaker_open.clone(),
        );
        let registrations = Family::<ResultLabel, Counter>::default();
        let revoked_streams = Family::<RevocationLabel, Counter>::default();
        registry.register(
            "registrations",
            "Registrations by result (ok, bad_token, rate_limited, already_exists, invalid, unavailable, being_deleted)",
            registrations.clone(),
        );
        registry.register(
            "revoked_streams",
            "Agent streams ended because the cluster registry no longer accepts their certificate, by reason (revoked, replaced, expired)",
            revoked_streams.clone(),
        );
        let certificate_renewals = Family::<ResultLabel, Counter>::default();
        registry.register(
            "certificate_renewals",
            "Agent certificate renewals over the Sync stream, by result",
            certificate_renewals.clone(),
        );
        let kube_writes = Family::<KubeWriteLabel, Counter>::default();
        registry.register(
            "kube_writes",
            "Writes to the management cluster's API server, by resource, verb and reason (status, event, finalizer, object)",
            kube_writes.clone(),
        );
        let rollout_steps = Family::<KindLabel, Counter>::default();
        let rollouts_ended = Family::<RolloutEndLabel, Counter>::default();
        let rollout_seconds = Family::<KindLabel, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(1.0, 2.0, 14))) as fn() -> Histogram,
        );
        let rollback_delay_seconds = Histogram::new(exponential_buckets(0.05, 2.0, 12));
        registry.register(
            "rollout_steps",
            "Steps of progressive rollouts (more clusters sent a revision), by kind",
            rollout_steps.clone(),
        );
        registry.register(
            "rollouts_ended",
            "Progressive rollouts that ended, by kind and phase (Succeeded, RolledBack, Failed)",
            rollouts_ended.clone(),
        );
        registry.register(
            "rollout_duration_seconds",
            "Seconds from a progressive rollout's start to its success, by kind",
            rollout_seconds.clone(),
        );
        registry.register(
            "rollback_delay_seconds",
            "Seconds from a rollout's first missed deadline to the write that took its clusters back",
            rollback_delay_seconds.clone(),
        );
        let console_pages = Family::<ConsolePageLabel, Counter>::default();
        let console_reviews = Family::<ConsoleReviewLabel, Counter>::default();
        registry.register(
            "console_pages",
            "Console pages served and live updates rendered, by page (fleet, kind, object, live)",
            console_pages.clone(),
        );
        registry.register(
            "console_reviews",
            "Access reviews the console sent to the management API server, by review (tokenreview, subjectaccessreview)",
            console_reviews.clone(),
        );
        let change = ChangeStages {
            decision_seconds: stage_histogram(),
            persist_seconds: stage_histogram(),
            fanout_seconds: stage_histogram(),
            report_seconds: stage_histogram(),
            end_to_end_seconds: Family::new_with_constructor(
                stage_histogram as fn() -> TracedHistogram,
            ),
        };
        registry.register(
            "change_decision_seconds",
            "Seconds a placed object's decision took, per change",
            change.decision_seconds.clone(),
        );
        registry.register(
            "change_persist_seconds",
            "Seconds the fenced write of a change's placements record took",
            change.persist_seconds.clone(),
        );
        registry.register(
            "change_fanout_seconds",
            "Seconds from a change's decision to its assignments queued on the members' streams",
            change.fanout_seconds.clone(),
        );
        registry.register(
            "change_report_seconds",
            "Seconds from a member's observation to its report stored as the object's status record",
            change.report_seconds.clone(),
        );
        registry.register(
            "change_end_to_end_seconds",
            "Seconds from a change's decision to each member's report that it applied it, by kind",
            change.end_to_end_seconds.clone(),
        );
        Self {
            registry: Arc::new(registry),
            change,
            console_pages,
            console_reviews,
            rollout_steps,
            rollouts_ended,
            rollout_seconds,
            rollback_delay_seconds,
            kube_writes,
            registrations,
            revoked_streams,
            certificate_renewals,
            autoscale_decisions,
            autoscale_value,
            autoscale_threshold,
            autoscale_breaker_open,
            connected_agents,
            is_leader,
            runtime_tasks,
            heartbeats,
            status_reports,
            etcd_txn_seconds,
            errors,
            status_writes,
            reconciles,
        }
    }

    /// Counts a status report outcome.
    pub fn report(&self, result: &str) {
        self.status_reports
            .get_or_create(&ResultLabel::of(result))
            .inc();
    }

    /// Counts a certificate renewal outcome.
    pub fn renewal(&self, result: &str) {
        self.certificate_renewals
            .get_or_create(&ResultLabel::of(result))
            .inc();
    }

    /// Counts a registration that ended with `result`.
    pub fn registration(&self, result: &str) {
        self.registrations
            .get_or_create(&ResultLabel::of(result))
            .inc();
    }

    /// Counts a stream ended for `reason` (see [`crate::revocation::Verdict`]).
    pub fn stream_revoked(&self, reason: &str) {
        self.revoked_streams
            .get_or_create(&RevocationLabel {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts one write to the management cluster's API server.
    pub fn kube_write(&self, resource: &str, verb: &str, reason: &str) {
        self.kube_writes
            .get_or_create(&KubeWriteLabel {
                resource: resource.to_owned(),
                verb: verb.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts an error of `category`.
    pub fn error(&self, category: &str) {
        self.errors
            .get_or_create(&CategoryLabel::of(category))
            .inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        accord_common::metrics::encode(&self.registry)
    }
}
