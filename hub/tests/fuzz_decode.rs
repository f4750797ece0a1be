//! Fuzzing on stable Rust with proptest: the hub's decoding of everything an agent sends
//! (every `AgentMessage` body, registration requests) and its translation of status
//! reports, and the Rust-side validation of every Accord kind, from arbitrary bytes and
//! from mutated example objects. Nothing may panic, and a length field may not make the
//! decoder allocate what the input does not hold.
//!
//! The default case count is small, for the default test run. For a bounded long run set
//! `PROPTEST_CASES` (e.g. `PROPTEST_CASES=200000`), as the fault suite does.

use std::time::{Duration, Instant};

use accord_hub::grpc::sync::translate_report;
use accord_proto::v1::{AgentMessage, HubMessage, RegisterRequest, agent_message};
use proptest::prelude::*;
use prost::Message as _;
use serde_json::Value;

/// Cases per property unless `PROPTEST_CASES` says otherwise.
const DEFAULT_CASES: u32 = 256;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    ProptestConfig {
        cases,
        // A failure is minimized, but not for longer than the run is meant to take.
        max_shrink_time: 60_000,
        ..ProptestConfig::default()
    }
}

/// Runs what the hub does with a decoded agent message.
fn handle(message: AgentMessage) {
    // Re-encoding what was decoded always works and decodes to the same message.
    let bytes = message.encode_to_vec();
    assert_eq!(
        AgentMessage::decode(bytes.as_slice()).as_ref(),
        Ok(&message)
    );
    if let Some(agent_message::Body::StatusReport(report)) = message.body
        && let Ok((placed, record)) = translate_report(report)
    {
        assert!(!placed.kind.is_empty() && !placed.name.is_empty());
        // The record is stored as JSON: it must encode.
        serde_json::to_vec(&record).expect("a translated record encodes");
    }
}

/// A protobuf field key (field number, wire type) as a varint.
fn key(field: u32, wire_type: u32) -> Vec<u8> {
    varint(u64::from(field << 3 | wire_type))
}

fn varint(mut value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// Bytes that are mostly well-formed protobuf for the agent's messages: keys of the known
/// fields with arbitrary wire types and payloads, so that decoding gets past the first byte.
fn protobuf_like() -> impl Strategy<Value = Vec<u8>> {
    let field = (1u32..12, 0u32..6, prop::collection::vec(any::<u8>(), 0..48)).prop_map(
        |(field, wire, payload)| {
            let mut out = key(field, wire);
            if wire == 2 {
                out.extend(varint(payload.len() as u64));
            }
            out.extend(payload);
            out
        },
    );
    prop::collection::vec(field, 0..8).prop_map(|fields| fields.concat())
}

/// Arbitrary JSON values, a few levels deep.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
        Just(Value::from("")),
        Just(Value::from(-1)),
        Just(Value::from(u64::MAX)),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// The `spec` of every example under `deploy/examples/`, by kind.
fn example_specs() -> Vec<(String, Value)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("deploy/examples")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut specs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("example readable");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("example is YAML");
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
            specs.push((kind, doc["spec"].clone()));
        }
    }
    for kind in accord_crds::kinds::all() {
        assert!(
            specs.iter().any(|(name, _)| *name == kind.name()),
            "no example of {kind:?} in deploy/examples"
        );
    }
    specs
}

/// Deserializes `spec` as `kind`'s spec and validates it; `true` if it deserialized.
fn validate_as(kind: &str, spec: Value) -> bool {
    accord_crds::kinds::named(kind)
        .unwrap_or_else(|| panic!("an example of unknown kind {kind}"))
        .validate_spec(spec)
        .is_ok()
}

/// Paths (object keys / array indexes) of every node of a JSON tree.
fn paths(value: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    out.push(prefix.clone());
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                prefix.push(k.clone());
                paths(v, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                prefix.push(i.to_string());
                paths(v, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn node_at<'a>(value: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let mut node = value;
    for segment in path {
        node = match node {
            Value::Object(map) => map.get_mut(segment)?,
            Value::Array(items) => items.get_mut(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(node)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic_the_agent_message_decoding_or_translation(
        bytes in prop::collection::vec(any::<u8>(), 0..512)
    ) {
        if let Ok(message) = AgentMessage::decode(bytes.as_slice()) {
            handle(message);
        }
        let _ = RegisterRequest::decode(bytes.as_slice());
        let _ = HubMessage::decode(bytes.as_slice());
    }

    #[test]
    fn protobuf_shaped_bytes_never_panic_the_agent_message_decoding_or_translation(
        bytes in protobuf_like()
    ) {
        if let Ok(message) = AgentMessage::decode(bytes.as_slice()) {
            handle(message);
        }
        // The same bytes as each body, as the hub would meet them inside the oneof.
        for field in 2u32..=7 {
            let mut wrapped = key(field, 2);
            wrapped.extend(varint(bytes.len() as u64));
            wrapped.extend(&bytes);
            if let Ok(message) = AgentMessage::decode(wrapped.as_slice()) {
                handle(message);
            }
        }
        let _ = RegisterRequest::decode(bytes.as_slice());
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_validation_of_any_kind(
        bytes in prop::collection::vec(any::<u8>(), 0..256)
    ) {
        if let Ok(value) = serde_json::from_slice::<Value>(&bytes) {
            for kind in accord_crds::kinds::all() {
                let _ = kind.validate_spec(value.clone());
            }
        }
    }

    #[test]
    fn mutated_examples_never_panic_the_validation_of_any_kind(
        example in any::<prop::sample::Index>(),
        mutations in prop::collection::vec((any::<prop::sample::Index>(), json()), 1..4),
    ) {
        let specs = example_specs();
        let (kind, mut spec) = specs[example.index(specs.len())].clone();
        for (at, replacement) in mutations {
            let mut all = Vec::new();
            paths(&spec, &mut Vec::new(), &mut all);
            let path = &all[at.index(all.len())];
            if let Some(node) = node_at(&mut spec, path) {
                *node = replacement;
            }
        }
        validate_as(&kind, spec);
    }
}

#[test]
fn every_example_deserializes_and_validates_as_its_kind() {
    // The mutation fuzzing starts from these: each must be a valid spec of its kind, or
    // the mutations would only ever exercise the deserializer's error path.
    for (kind, spec) in example_specs() {
        assert!(
            validate_as(&kind, spec),
            "the {kind} example does not deserialize"
        );
    }
}

#[test]
fn a_huge_length_prefix_fails_at_once_without_allocating_it() {
    // Every length-delimited field of AgentMessage, and a StatusReport inside one, claiming
    // up to 2^62 bytes that are not there: the decoder must fail on the missing bytes, not
    // reserve them first.
    let started = Instant::now();
    for field in 1u32..=7 {
        for claimed in [1u64 << 20, 1 << 31, 1 << 40, 1 << 62, u64::MAX >> 1] {
            let mut bytes = key(field, 2);
            bytes.extend(varint(claimed));
            bytes.extend([0u8; 16]);
            assert!(
                AgentMessage::decode(bytes.as_slice()).is_err(),
                "field {field} claiming {claimed} bytes decoded"
            );
            // Nested: a StatusReport whose placed object claims the huge length.
            let mut inner = key(1, 2);
            inner.extend(varint(claimed));
            inner.extend([0u8; 8]);
            let mut outer = key(4, 2);
            outer.extend(varint(inner.len() as u64));
            outer.extend(&inner);
            assert!(AgentMessage::decode(outer.as_slice()).is_err());
        }
    }
    // A repeated field with a huge count of tiny elements needs as many bytes as elements.
    let mut many = Vec::new();
    for _ in 0..100_000 {
        many.extend(key(2, 2));
        many.push(0);
    }
    let _ = AgentMessage::decode(many.as_slice());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "decoding took {:?}",
        started.elapsed()
    );
}

#[test]
fn deeply_nested_json_is_refused_rather_than_overflowing_the_stack() {
    // serde_json stops at its recursion limit (128) with an error, not a crash.
    let deep_json = "[".repeat(100_000);
    assert!(serde_json::from_str::<Value>(&deep_json).is_err());
    for kind in ["CrossClusterScalePolicy", "ManagedCluster"] {
        let deep = format!("{{\"spec\": {}}}", "{\"a\":".repeat(10_000));
        assert!(serde_json::from_str::<Value>(&deep).is_err(), "{kind}");
    }
}
