//! The agent's Prometheus metrics, served as text on `/metrics`.

use std::sync::Arc;

pub use accord_common::metrics::{CategoryLabel, RequestLabel, ResultLabel};
use accord_common::metrics::{TracedHistogram, stage_histogram};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Every metric the agent exports (names prefixed `accord_agent_`).
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    /// 1 while the stream to the hub is open.
    pub connected: Gauge,
    /// Connection attempts that failed or streams that ended (each followed by a retry).
    pub reconnects: Counter,
    /// Assignments messages applied (each acknowledged once persisted).
    pub assignments_applied: Counter,
    /// Seconds from an assignment's arrival to its successful apply in the member (the
    /// agent's stage of a change), with the change's trace as exemplar.
    pub change_applied_seconds: TracedHistogram,
    /// Placed objects this cluster enforces.
    pub managed_objects: Gauge,
    /// Server-side applies of replicas that succeeded.
    pub scale_applies: Counter,
    /// Repairs of fields another writer changed, by result (`restored`, or `held` when the
    /// fight guard kept the agent from fighting that writer).
    pub field_repairs: Family<ResultLabel, Counter>,
    /// Failed applies and other errors, by category.
    pub apply_errors: Family<CategoryLabel, Counter>,
    /// Status reports sent to the hub.
    pub reports_sent: Counter,
    /// StatusAcks received, by result (`accepted`, `conflict`).
    pub report_acks: Family<ResultLabel, Counter>,
    /// Placed objects whose latest observation the hub has not accepted yet.
    pub reports_pending: Gauge,
    /// 1 while this replica holds the agent Lease (active), 0 while it stands by.
    pub leader: Gauge,
    /// Requests sent to the member's Kafka, by request (`metadata`, `describe_configs`,
    /// `create_topics`, `create_partitions`, `incremental_alter_configs`, `delete_topics`).
    pub kafka_requests: Family<RequestLabel, Counter>,
    /// Topics named in CreateTopics requests, by Kafka's answer for each (`created`,
    /// `already_exists`: a create sent again while the broker did not list the topic yet,
    /// `refused`).
    pub topic_creates: Family<ResultLabel, Counter>,
    /// Certificate renewals, by result (`ok`, `timeout`, `refused`, `store`, `invalid`, …).
    pub certificate_renewals: Family<ResultLabel, Counter>,
    /// `notAfter` of the client certificate in use, in seconds since the Unix epoch.
    pub certificate_expiry: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("accord_agent");
        let metrics = Self {
            registry: Arc::new(Registry::default()),
            connected: Gauge::default(),
            reconnects: Counter::default(),
            assignments_applied: Counter::default(),
            change_applied_seconds: stage_histogram(),
            managed_objects: Gauge::default(),
            scale_applies: Counter::default(),
            field_repairs: Family::default(),
            apply_errors: Family::default(),
            reports_sent: Counter::default(),
            report_acks: Family::default(),
            reports_pending: Gauge::default(),
            kafka_requests: Family::default(),
            topic_creates: Family::default(),
            certificate_renewals: Family::default(),
            certificate_expiry: Gauge::default(),
            leader: Gauge::default(),
        };
        registry.register(
            "certificate_renewals",
            "Client certificate renewals over the stream, by result",
            metrics.certificate_renewals.clone(),
        );
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "notAfter of the client certificate in use, in seconds since the Unix epoch",
            metrics.certificate_expiry.clone(),
        );
        registry.register(
            "change_applied_seconds",
            "Seconds from an assignment's arrival to its successful apply in the member cluster",
            metrics.change_applied_seconds.clone(),
        );
        registry.register(
            "connected",
            "1 while the stream to the hub is open",
            metrics.connected.clone(),
        );
        registry.register(
            "reconnects",
            "Failed connection attempts and ended streams, each followed by a retry",
            metrics.reconnects.clone(),
        );
        registry.register(
            "assignments_applied",
            "Assignments messages applied",
            metrics.assignments_applied.clone(),
        );
        registry.register(
            "managed_objects",
            "Placed objects this cluster enforces",
            metrics.managed_objects.clone(),
        );
        registry.register(
            "scale_applies",
            "Server-side applies of replicas that succeeded",
            metrics.scale_applies.clone(),
        );
        registry.register(
            "field_repairs",
            "Repairs of fields another writer changed, by result (restored, held)",
            metrics.field_repairs.clone(),
        );
        registry.register(
            "apply_errors",
            "Failed applies and other errors, by kind",
            metrics.apply_errors.clone(),
        );
        registry.register(
            "status_reports_sent",
            "Status reports sent to the hub",
            metrics.reports_sent.clone(),
        );
        registry.register(
            "status_acks",
            "StatusAcks received, by result (accepted, conflict)",
            metrics.report_acks.clone(),
        );
        registry.register(
            "status_reports_pending",
            "Placed objects whose latest observation the hub has not accepted yet",
            metrics.reports_pending.clone(),
        );
        registry.register(
            "kafka_requests",
            "Requests sent to the member's Kafka, by request",
            metrics.kafka_requests.clone(),
        );
        registry.register(
            "kafka_topic_creates",
            "Topics named in CreateTopics requests, by Kafka's answer (created, already_exists, refused)",
            metrics.topic_creates.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the agent Lease and is active, 0 while it stands by",
            metrics.leader.clone(),
        );
        Self {
            registry: Arc::new(registry),
            ..metrics
        }
    }

    /// Counts an error of `category`.
    pub fn error(&self, category: &str) {
        self.apply_errors
            .get_or_create(&CategoryLabel::of(category))
            .inc();
    }

    /// Counts a `request` to the member's Kafka.
    pub fn kafka_request(&self, request: &str) {
        self.kafka_requests
            .get_or_create(&RequestLabel::of(request))
            .inc();
    }

    /// Counts one topic of a CreateTopics request by Kafka's answer for it.
    pub fn topic_create(&self, result: &str) {
        self.topic_creates
            .get_or_create(&ResultLabel::of(result))
            .inc();
    }

    /// Counts a certificate renewal outcome.
    pub fn renewal(&self, result: &str) {
        self.certificate_renewals
            .get_or_create(&ResultLabel::of(result))
            .inc();
    }

    /// Counts a StatusAck with `result`.
    pub fn ack(&self, result: &str) {
        self.report_acks
            .get_or_create(&ResultLabel::of(result))
            .inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        accord_common::metrics::encode(&self.registry)
    }
}

/// The metric label for a Kubernetes API error.
pub fn kube_error_kind(error: &kube::Error) -> &'static str {
    match error {
        kube::Error::Api(status) => match status.code {
            404 => "not_found",
            403 | 401 => "forbidden",
            409 => "conflict",
            422 | 400 => "invalid",
            429 => "throttled",
            500..=599 => "server",
            _ => "api",
        },
        kube::Error::HyperError(_) | kube::Error::Service(_) => "transport",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_exported_with_the_agent_prefix() {
        let m = Metrics::new();
        m.connected.set(1);
        m.reconnects.inc();
        m.error("not_found");
        m.ack("accepted");
        m.kafka_request("create_topics");
        m.topic_create("already_exists");
        m.renewal("ok");
        m.certificate_expiry.set(1_700_000_000);
        accord_common::metrics::observe_traced(
            &m.change_applied_seconds,
            0.02,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        );
        let text = m.encode();
        for name in [
            "accord_agent_connected 1",
            "accord_agent_reconnects_total 1",
            "accord_agent_assignments_applied_total",
            "accord_agent_managed_objects",
            "accord_agent_scale_applies_total",
            "accord_agent_apply_errors_total{category=\"not_found\"} 1",
            "accord_agent_status_reports_sent_total",
            "accord_agent_status_acks_total{result=\"accepted\"} 1",
            "accord_agent_status_reports_pending",
            "accord_agent_kafka_requests_total{request=\"create_topics\"} 1",
            "accord_agent_kafka_topic_creates_total{result=\"already_exists\"} 1",
            "accord_agent_certificate_renewals_total{result=\"ok\"} 1",
            "accord_agent_certificate_expiry_timestamp_seconds 1700000000",
            "accord_agent_leader 0",
            "accord_agent_change_applied_seconds_count 1",
            "trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\"",
        ] {
            assert!(text.contains(name), "{name} missing from\n{text}");
        }
    }
}
