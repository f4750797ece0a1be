//! Bounds of every number in Accord's CRDs, in one place.
//!
//! The API server does not enforce `format: int32` or `int64`: without an explicit
//! `minimum`/`maximum` it stores any integer, and an object holding one the Rust types
//! cannot represent can no longer be decoded by the hub. So every integer field carries a
//! schema `minimum` and `maximum` within its Rust type, and spec fields carry a tighter
//! bound a platform engineer would call sane, with a CEL rule whose message says what the
//! bound is (the messages live in [`crate::messages`]; [`crate::validate`] refuses the same
//! values with the same words). The numbers here are the single source for the schema
//! attributes, the CEL rules and the Rust-side checks.

use schemars::{Schema, SchemaGenerator};

/// Most replicas a policy may ask for, globally or in one cluster: far beyond any real
/// workload, low enough that sums over many clusters never overflow an `i32`.
pub const MAX_REPLICAS: i32 = 1_000_000;
/// Largest weight: 10,000 lets weights be given in basis points (100.00 % = 10,000).
pub const MAX_WEIGHT: i32 = 10_000;
/// Most partitions a topic may have (and a topic policy may demand): a guard against
/// typos well above what any Kafka cluster serves well for one topic.
pub const MAX_PARTITIONS: i32 = 10_000;
/// Largest replication factor: beyond any broker count a replicated topic uses.
pub const MAX_REPLICATION_FACTOR: i32 = 32;
/// Most config keys one topic may set (Kafka knows about 35 topic configs).
pub const MAX_TOPIC_CONFIGS: usize = 100;
/// Longest topic config key.
pub const MAX_TOPIC_CONFIG_KEY: usize = 255;
/// Longest topic config value.
pub const MAX_TOPIC_CONFIG_VALUE: usize = 4_096;
/// Longest cooldown, breaker-open time or history window, in seconds: one day.
pub const MAX_SECONDS: i32 = 86_400;
/// Longest debounce, in milliseconds: ten minutes (longer pauses are what cooldowns are for).
/// Longest autoscaling poll interval, seconds (one hour).
pub const MAX_POLL_SECONDS: i32 = 3_600;
/// Longest debounce, milliseconds.
pub const MAX_DEBOUNCE_MILLIS: i64 = 600_000;
/// Widest autoscaling tolerance band, in percent: a wider one would hold the count while
/// the load halves.
pub const MAX_TOLERANCE_PERCENT: i32 = 50;
/// Most scale operations per minute: one a second.
pub const MAX_SCALE_OPERATIONS_PER_MINUTE: i32 = 60;
/// Most consecutive failures before the circuit breaker opens.
pub const MAX_FAILURE_THRESHOLD: i32 = 100;
/// Largest sampleLimit of one federation scrape: ten million samples, more than one
/// Prometheus usually holds in total.
pub const MAX_SAMPLE_LIMIT: i64 = 10_000_000;
/// Largest multiplier of the dynamic threshold (stddevFactor, floorRatio).
pub const MAX_FACTOR: f64 = 10.0;
/// Fewest PBKDF2 iterations of a SCRAM credential: Kafka refuses fewer.
pub const MIN_SCRAM_ITERATIONS: i32 = 4_096;
/// Most PBKDF2 iterations of a SCRAM credential: Kafka refuses more.
pub const MAX_SCRAM_ITERATIONS: i32 = 16_384;
/// Most ACL entries one FederatedKafkaUser may list (each expands to one binding per
/// operation, at most 1,300 in all).
pub const MAX_USER_ACLS: usize = 100;
/// Largest byte-rate quota (producer or consumer), bytes a second: a terabyte, beyond any
/// broker's network, so the bound only catches typos; no quota is set by leaving it out.
pub const MAX_BYTE_RATE: i64 = 1_000_000_000_000;
/// Largest request-percentage quota: Kafka counts 100 per request handler and network
/// thread, so this is a thousand threads' worth.
pub const MAX_REQUEST_PERCENTAGE: f64 = 100_000.0;
/// Largest controller-mutation-rate quota, partition mutations a second: beyond what any
/// controller performs.
pub const MAX_CONTROLLER_MUTATION_RATE: f64 = 1_000_000.0;
/// Largest count in a status field (written by the hub): what an `i32` holds.
pub const MAX_STATUS_COUNT: i32 = i32::MAX;
/// Largest generation in a status field: 2⁵³ − 1, the largest integer that every JSON
/// client (and the API server's float comparison of bounds) reads exactly.
pub const MAX_GENERATION: i64 = (1 << 53) - 1;

/// Schema of a `conditions` list: Kubernetes' `Condition`, with `observedGeneration`
/// bounded to 0..=[`MAX_GENERATION`] like every other generation in Accord's status.
pub fn conditions(generator: &mut SchemaGenerator) -> Schema {
    let mut schema =
        generator.subschema_for::<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>();
    if let Some(generation) = schema
        .get_mut("items")
        .and_then(|items| items.get_mut("properties"))
        .and_then(|properties| properties.get_mut("observedGeneration"))
        .and_then(|generation| generation.as_object_mut())
    {
        generation.insert("minimum".into(), 0.into());
        generation.insert("maximum".into(), MAX_GENERATION.into());
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages as m;

    /// Each message must state the number its rule enforces, written as the message
    /// writes it (with thousands separators where the message uses them).
    #[test]
    fn every_bound_message_names_its_bound() {
        let with_commas = |n: i64| {
            let digits = n.to_string();
            let mut out = String::new();
            for (i, c) in digits.chars().enumerate() {
                if i > 0 && (digits.len() - i).is_multiple_of(3) {
                    out.push(',');
                }
                out.push(c);
            }
            out
        };
        for (message, bound) in [
            (m::DESIRED_MAX, i64::from(MAX_REPLICAS)),
            (m::REPLICAS_MAX, i64::from(MAX_REPLICAS)),
            (m::WEIGHT_MAX, i64::from(MAX_WEIGHT)),
            (m::PARTITIONS_MAX, i64::from(MAX_PARTITIONS)),
            (m::MIN_PARTITIONS_RANGE, i64::from(MAX_PARTITIONS)),
            (m::MAX_PARTITIONS_RANGE, i64::from(MAX_PARTITIONS)),
            (m::REPLICATION_FACTOR_MAX, i64::from(MAX_REPLICATION_FACTOR)),
            (m::SECONDS_MAX, i64::from(MAX_SECONDS)),
            (m::DEBOUNCE_MAX, MAX_DEBOUNCE_MILLIS),
            (
                m::SCALE_OPERATIONS_MAX,
                i64::from(MAX_SCALE_OPERATIONS_PER_MINUTE),
            ),
            (m::FAILURE_THRESHOLD_MAX, i64::from(MAX_FAILURE_THRESHOLD)),
            (m::TOLERANCE_PERCENT_MAX, i64::from(MAX_TOLERANCE_PERCENT)),
            (m::SAMPLE_LIMIT_MAX, MAX_SAMPLE_LIMIT),
            (m::ITERATIONS_RANGE, i64::from(MIN_SCRAM_ITERATIONS)),
            (m::ITERATIONS_RANGE, i64::from(MAX_SCRAM_ITERATIONS)),
            (m::BYTE_RATE_RANGE, MAX_BYTE_RATE),
            (m::REQUEST_PERCENTAGE_RANGE, MAX_REQUEST_PERCENTAGE as i64),
            (
                m::CONTROLLER_MUTATION_RATE_RANGE,
                MAX_CONTROLLER_MUTATION_RATE as i64,
            ),
        ] {
            assert!(
                message.contains(&with_commas(bound)),
                "{message:?} does not name its bound {bound}"
            );
        }
        assert!(m::FACTOR_MAX.ends_with(&format!("{MAX_FACTOR}")));
    }

    #[test]
    fn bounds_fit_their_rust_types_and_json_numbers() {
        // A bound the API server compares as a float must be exact as one.
        assert_eq!(MAX_GENERATION as f64 as i64, MAX_GENERATION);
        assert_eq!(f64::from(MAX_STATUS_COUNT) as i32, MAX_STATUS_COUNT);
        // Sums of per-cluster maxima over the largest distribution still fit an i32.
        assert!(i64::from(MAX_REPLICAS) * 100 < i64::from(i32::MAX));
        assert_eq!(MAX_BYTE_RATE as f64 as i64, MAX_BYTE_RATE);
        // The float bounds are whole numbers, so their messages can name them exactly.
        for bound in [MAX_REQUEST_PERCENTAGE, MAX_CONTROLLER_MUTATION_RATE] {
            assert_eq!(bound.fract(), 0.0);
        }
    }
}
