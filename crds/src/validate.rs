//! Rust-side counterparts of the CEL rules in the CRD schemas.
//!
//! The API server enforces the CEL rules on every write. The hub applies these checks as
//! well before acting on an object, because an object can reach the store without them
//! (validation switched off, an older CRD version, a restore from backup); a spec that
//! fails here is reported in the object's status instead of being acted on. Each check uses
//! the same message as its CEL rule (see [`crate::messages`]).

use std::collections::BTreeSet;
use std::fmt;

use crate::bounds;
use crate::duration;
use crate::kafka_topic::{FederatedKafkaTopicSpec, KafkaTopicPolicySpec};
use crate::managed_cluster::ManagedClusterSpec;
use crate::messages as m;
use crate::placement::ClusterPlacement;
use crate::promfed::PrometheusFederationSpec;
use crate::scale::CrossClusterScalePolicySpec;

/// One failed rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// JSON path of the offending field, e.g. `spec.distribution[1].weight`.
    pub field: String,
    /// What is wrong, in the same words as the API server's message.
    pub message: &'static str,
}

/// Every rule a spec failed.
#[derive(Debug, Clone, PartialEq, Eq, Default, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}: {}", e.field, e.message)?;
        }
        Ok(())
    }
}

impl ValidationErrors {
    /// Messages of every failed rule, for assertions and status text.
    pub fn messages(&self) -> Vec<&'static str> {
        self.0.iter().map(|e| e.message).collect()
    }

    pub(crate) fn check(&mut self, ok: bool, field: impl Into<String>, message: &'static str) {
        if !ok {
            self.0.push(FieldError {
                field: field.into(),
                message,
            });
        }
    }

    pub(crate) fn into_result(self) -> Result<(), Self> {
        if self.0.is_empty() { Ok(()) } else { Err(self) }
    }
}

/// A spec that can check itself against its CRD's rules.
pub trait Validate {
    /// Every rule the spec fails, or `Ok`.
    fn validate(&self) -> Result<(), ValidationErrors>;
}

/// True for a DNS-1123 label (cluster names).
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// True for a topic name Kafka accepts.
pub fn is_valid_topic_name(s: &str) -> bool {
    (1..=249).contains(&s.len())
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

fn is_http_url(s: &str) -> bool {
    s.starts_with("http://") || s.starts_with("https://")
}

/// `minReplicas` / `maxReplicas` at `path`: each 0 to [`bounds::MAX_REPLICAS`], min not
/// above max.
fn check_replica_bounds(
    errs: &mut ValidationErrors,
    path: &str,
    min: Option<i32>,
    max: Option<i32>,
) {
    for (field, value) in [("minReplicas", min), ("maxReplicas", max)] {
        if let Some(v) = value {
            errs.check(v >= 0, format!("{path}.{field}"), m::REPLICAS_NON_NEGATIVE);
            errs.check(
                v <= bounds::MAX_REPLICAS,
                format!("{path}.{field}"),
                m::REPLICAS_MAX,
            );
        }
    }
    if let (Some(lo), Some(hi)) = (min, max) {
        errs.check(lo <= hi, path.to_owned(), m::MIN_LE_MAX);
    }
}

/// `spec.replicationFactor`: 1 to [`bounds::MAX_REPLICATION_FACTOR`].
fn check_replication_factor(errs: &mut ValidationErrors, rf: i32) {
    errs.check(rf >= 1, "spec.replicationFactor", m::REPLICATION_FACTOR_MIN);
    errs.check(
        rf <= bounds::MAX_REPLICATION_FACTOR,
        "spec.replicationFactor",
        m::REPLICATION_FACTOR_MAX,
    );
}

pub(crate) fn check_cluster_selection(errs: &mut ValidationErrors, placement: &ClusterPlacement) {
    errs.check(
        placement.clusters.is_some() != placement.cluster_selector.is_some(),
        "spec.placement",
        m::CLUSTERS_XOR_SELECTOR,
    );
    for (i, c) in placement
        .clusters
        .as_deref()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        errs.check(
            is_dns1123_label(c),
            format!("spec.placement.clusters[{i}]"),
            m::CLUSTER_NAME,
        );
    }
    errs.check(
        placement.tolerations.len() <= crate::placement::MAX_TOLERATIONS,
        "spec.placement.tolerations",
        m::TOLERATIONS_COUNT,
    );
    for (i, t) in placement.tolerations.iter().enumerate() {
        use crate::managed_cluster::TaintEffect;
        use crate::placement::TolerationOperator;
        let path = format!("spec.placement.tolerations[{i}]");
        let exists = t.operator == Some(TolerationOperator::Exists);
        errs.check(
            !exists || t.value.is_none(),
            path.clone(),
            m::TOLERATION_EXISTS_VALUE,
        );
        errs.check(
            t.key.is_some() || exists,
            path.clone(),
            m::TOLERATION_EMPTY_KEY,
        );
        if let Some(seconds) = t.toleration_seconds {
            errs.check(
                t.effect == Some(TaintEffect::NoExecute),
                path.clone(),
                m::TOLERATION_SECONDS_EFFECT,
            );
            errs.check(
                (0..=crate::placement::MAX_TOLERATION_SECONDS).contains(&seconds),
                format!("{path}.tolerationSeconds"),
                m::TOLERATION_SECONDS_RANGE,
            );
        }
    }
    errs.check(
        placement.preferences.len() <= crate::placement::MAX_PREFERENCES,
        "spec.placement.preferences",
        m::PREFERENCES_COUNT,
    );
    if let Some(n) = placement.number_of_clusters {
        errs.check(
            (1..=crate::placement::MAX_NUMBER_OF_CLUSTERS).contains(&n),
            "spec.placement.numberOfClusters",
            m::NUMBER_OF_CLUSTERS_RANGE,
        );
    }
    if let Some(spread) = &placement.spread {
        let groups = 1..=crate::placement::MAX_SPREAD_GROUPS;
        for (field, value) in [
            ("minGroups", spread.min_groups),
            ("maxGroups", spread.max_groups),
        ] {
            if let Some(v) = value {
                errs.check(
                    groups.contains(&v),
                    format!("spec.placement.spread.{field}"),
                    m::SPREAD_GROUPS_RANGE,
                );
            }
        }
        if let (Some(min), Some(max)) = (spread.min_groups, spread.max_groups) {
            errs.check(min <= max, "spec.placement.spread", m::SPREAD_MIN_ABOVE_MAX);
        }
        if let Some(skew) = spread.max_skew {
            errs.check(
                (1..=crate::placement::MAX_SKEW).contains(&skew),
                "spec.placement.spread.maxSkew",
                m::SPREAD_MAX_SKEW_RANGE,
            );
        }
        if let (Some(min), Some(n)) = (spread.min_groups, placement.number_of_clusters) {
            errs.check(min <= n, "spec.placement", m::SPREAD_MIN_ABOVE_COUNT);
        }
    }
}

impl Validate for ManagedClusterSpec {
    fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errs = ValidationErrors::default();
        if let Some(w) = self.weight {
            errs.check(w > 0, "spec.weight", m::WEIGHT_POSITIVE);
            errs.check(w <= bounds::MAX_WEIGHT, "spec.weight", m::WEIGHT_MAX);
        }
        if let Some(url) = &self.federation_endpoint {
            errs.check(
                is_http_url(url),
                "spec.federationEndpoint",
                m::FEDERATION_ENDPOINT,
            );
        }
        errs.into_result()
    }
}

impl Validate for CrossClusterScalePolicySpec {
    fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errs = ValidationErrors::default();
        let t = &self.target_ref;
        errs.check(
            t.api_version == "apps/v1" && t.kind == "Deployment",
            "spec.targetRef",
            m::TARGET_KIND,
        );
        errs.check(
            self.desired_replicas >= 0,
            "spec.desiredReplicas",
            m::DESIRED_NON_NEGATIVE,
        );
        errs.check(
            self.desired_replicas <= bounds::MAX_REPLICAS,
            "spec.desiredReplicas",
            m::DESIRED_MAX,
        );
        errs.check(
            self.placement.is_some() || !self.distribution.is_empty(),
            "spec.distribution",
            m::DISTRIBUTION_NOT_EMPTY,
        );
        if let Some(placement) = &self.placement {
            check_cluster_selection(&mut errs, placement);
        }
        let skewed = self
            .placement
            .as_ref()
            .and_then(|p| p.spread.as_ref())
            .is_some_and(|s| s.max_skew.is_some());
        errs.check(
            self.weighting != crate::scale::Weighting::AvailableCapacity || !skewed,
            "spec.weighting",
            m::WEIGHTING_NO_MAX_SKEW,
        );
        let mut seen = BTreeSet::new();
        for (i, d) in self.distribution.iter().enumerate() {
            let path = format!("spec.distribution[{i}]");
            errs.check(
                is_dns1123_label(&d.cluster),
                format!("{path}.cluster"),
                m::CLUSTER_NAME,
            );
            errs.check(d.weight > 0, format!("{path}.weight"), m::WEIGHT_POSITIVE);
            errs.check(
                d.weight <= bounds::MAX_WEIGHT,
                format!("{path}.weight"),
                m::WEIGHT_MAX,
            );
            check_replica_bounds(&mut errs, &path, d.min_replicas, d.max_replicas);
            if !seen.insert(d.cluster.as_str()) {
                errs.check(false, "spec.distribution", m::DISTRIBUTION_UNIQUE);
            }
        }
        errs.check(
            self.failover.return_cooldown_seconds >= 0,
            "spec.failover.returnCooldownSeconds",
            m::NON_NEGATIVE_NUMBER,
        );
        errs.check(
            self.failover.return_cooldown_seconds <= bounds::MAX_SECONDS,
            "spec.failover.returnCooldownSeconds",
            m::SECONDS_MAX,
        );
        if let Some(a) = &self.autoscaling {
            let p = "spec.autoscaling";
            check_replica_bounds(&mut errs, p, Some(a.min_replicas), Some(a.max_replicas));
            let metric = &a.metric;
            errs.check(
                metric.target_per_replica > 0.0,
                format!("{p}.metric.targetPerReplica"),
                m::TARGET_PER_REPLICA_POSITIVE,
            );
            errs.check(
                metric.poll_seconds >= 1,
                format!("{p}.metric.pollSeconds"),
                m::POSITIVE_INTEGER,
            );
            errs.check(
                metric.poll_seconds <= bounds::MAX_POLL_SECONDS,
                format!("{p}.metric.pollSeconds"),
                m::POLL_SECONDS_MAX,
            );
            errs.check(
                metric.tolerance_percent >= 0,
                format!("{p}.metric.tolerancePercent"),
                m::NON_NEGATIVE_NUMBER,
            );
            errs.check(
                metric.tolerance_percent <= bounds::MAX_TOLERANCE_PERCENT,
                format!("{p}.metric.tolerancePercent"),
                m::TOLERANCE_PERCENT_MAX,
            );
            errs.check(
                is_http_url(&metric.prometheus.url),
                format!("{p}.metric.prometheus.url"),
                m::HTTP_URL,
            );
            errs.check(
                !metric.prometheus.query.is_empty(),
                format!("{p}.metric.prometheus.query"),
                m::QUERY_NOT_EMPTY,
            );
            let t = &a.dynamic_threshold;
            let q = format!("{p}.dynamicThreshold");
            errs.check(
                t.ewma_alpha > 0.0 && t.ewma_alpha <= 1.0,
                format!("{q}.ewmaAlpha"),
                m::EWMA_ALPHA_RANGE,
            );
            errs.check(
                t.window_seconds >= 1,
                format!("{q}.windowSeconds"),
                m::POSITIVE_INTEGER,
            );
            errs.check(
                t.window_seconds <= bounds::MAX_SECONDS,
                format!("{q}.windowSeconds"),
                m::SECONDS_MAX,
            );
            errs.check(
                t.stddev_factor >= 0.0,
                format!("{q}.stddevFactor"),
                m::NON_NEGATIVE_NUMBER,
            );
            errs.check(
                t.stddev_factor <= bounds::MAX_FACTOR,
                format!("{q}.stddevFactor"),
                m::FACTOR_MAX,
            );
            errs.check(
                t.floor_ratio >= 0.0,
                format!("{q}.floorRatio"),
                m::NON_NEGATIVE_NUMBER,
            );
            errs.check(
                t.floor_ratio <= bounds::MAX_FACTOR,
                format!("{q}.floorRatio"),
                m::FACTOR_MAX,
            );
            let b = &a.behavior;
            let q = format!("{p}.behavior");
            errs.check(
                b.debounce_millis >= 0,
                format!("{q}.debounceMillis"),
                m::NON_NEGATIVE_NUMBER,
            );
            errs.check(
                b.debounce_millis <= bounds::MAX_DEBOUNCE_MILLIS,
                format!("{q}.debounceMillis"),
                m::DEBOUNCE_MAX,
            );
            errs.check(
                b.cooldown_seconds >= 0,
                format!("{q}.cooldownSeconds"),
                m::NON_NEGATIVE_NUMBER,
            );
            errs.check(
                b.cooldown_seconds <= bounds::MAX_SECONDS,
                format!("{q}.cooldownSeconds"),
                m::SECONDS_MAX,
            );
            errs.check(
                b.max_scale_operations_per_minute >= 1,
                format!("{q}.maxScaleOperationsPerMinute"),
                m::POSITIVE_INTEGER,
            );
            errs.check(
                b.max_scale_operations_per_minute <= bounds::MAX_SCALE_OPERATIONS_PER_MINUTE,
                format!("{q}.maxScaleOperationsPerMinute"),
                m::SCALE_OPERATIONS_MAX,
            );
            errs.check(
                b.failure_threshold >= 1,
                format!("{q}.failureThreshold"),
                m::POSITIVE_INTEGER,
            );
            errs.check(
                b.failure_threshold <= bounds::MAX_FAILURE_THRESHOLD,
                format!("{q}.failureThreshold"),
                m::FAILURE_THRESHOLD_MAX,
            );
            errs.check(
                b.breaker_open_seconds >= 1,
                format!("{q}.breakerOpenSeconds"),
                m::POSITIVE_INTEGER,
            );
            errs.check(
                b.breaker_open_seconds <= bounds::MAX_SECONDS,
                format!("{q}.breakerOpenSeconds"),
                m::SECONDS_MAX,
            );
        }
        errs.into_result()
    }
}

impl Validate for FederatedKafkaTopicSpec {
    fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errs = ValidationErrors::default();
        if let Some(name) = &self.topic_name {
            errs.check(is_valid_topic_name(name), "spec.topicName", m::TOPIC_NAME);
        }
        errs.check(self.partitions >= 1, "spec.partitions", m::PARTITIONS_MIN);
        errs.check(
            self.partitions <= bounds::MAX_PARTITIONS,
            "spec.partitions",
            m::PARTITIONS_MAX,
        );
        check_replication_factor(&mut errs, self.replication_factor);
        errs.check(
            self.config.len() <= bounds::MAX_TOPIC_CONFIGS,
            "spec.config",
            m::TOPIC_CONFIG_COUNT,
        );
        errs.check(
            self.config.iter().all(|(k, v)| {
                (1..=bounds::MAX_TOPIC_CONFIG_KEY).contains(&k.len())
                    && v.len() <= bounds::MAX_TOPIC_CONFIG_VALUE
            }),
            "spec.config",
            m::TOPIC_CONFIG,
        );
        check_cluster_selection(&mut errs, &self.placement);
        crate::rollout::check_rollout(&mut errs, self.rollout.as_ref());
        errs.into_result()
    }
}

impl Validate for KafkaTopicPolicySpec {
    fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errs = ValidationErrors::default();
        for (field, v, message) in [
            (
                "minPartitions",
                self.min_partitions,
                m::MIN_PARTITIONS_RANGE,
            ),
            (
                "maxPartitions",
                self.max_partitions,
                m::MAX_PARTITIONS_RANGE,
            ),
        ] {
            if let Some(v) = v {
                errs.check(
                    (1..=bounds::MAX_PARTITIONS).contains(&v),
                    format!("spec.{field}"),
                    message,
                );
            }
        }
        if let (Some(lo), Some(hi)) = (self.min_partitions, self.max_partitions) {
            errs.check(lo <= hi, "spec", m::MIN_PARTITIONS_LE_MAX);
        }
        if let Some(rf) = self.replication_factor {
            check_replication_factor(&mut errs, rf);
        }
        if let Some(pattern) = &self.topic_name_pattern {
            errs.check(
                pattern.len() <= 1024 && crate::kafka_topic::compile_topic_pattern(pattern).is_ok(),
                "spec.topicNamePattern",
                m::TOPIC_NAME_PATTERN,
            );
        }
        errs.into_result()
    }
}

impl Validate for PrometheusFederationSpec {
    fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errs = ValidationErrors::default();
        check_cluster_selection(&mut errs, &self.placement);
        crate::rollout::check_rollout(&mut errs, self.rollout.as_ref());
        let t = &self.tenant_selector;
        errs.check(
            t.namespaces.is_some() != t.label_selector.is_some(),
            "spec.tenantSelector",
            m::TENANT_XOR,
        );
        errs.check(!self.match_.is_empty(), "spec.match", m::MATCH_NOT_EMPTY);
        errs.check(
            self.match_.iter().all(|s| !s.is_empty()),
            "spec.match",
            m::MATCH_ENTRY_NOT_EMPTY,
        );
        let interval = duration::parse(&self.scrape_interval);
        let timeout = duration::parse(&self.scrape_timeout);
        errs.check(interval.is_ok(), "spec.scrapeInterval", m::DURATION_FORMAT);
        errs.check(timeout.is_ok(), "spec.scrapeTimeout", m::DURATION_FORMAT);
        if let (Ok(i), Ok(t)) = (interval, timeout) {
            errs.check(t <= i, "spec", m::TIMEOUT_LE_INTERVAL);
        }
        if let Some(limit) = self.sample_limit {
            errs.check(limit >= 0, "spec.sampleLimit", m::SAMPLE_LIMIT_NON_NEGATIVE);
            errs.check(
                limit <= bounds::MAX_SAMPLE_LIMIT,
                "spec.sampleLimit",
                m::SAMPLE_LIMIT_MAX,
            );
        }
        if let Some(url) = self.target.as_ref().and_then(|t| t.reload_url.as_deref()) {
            errs.check(is_http_url(url), "spec.target.reloadURL", m::HTTP_URL);
        }
        errs.into_result()
    }
}
