//! The Rust-side validation agrees with the CEL rules: every example is valid, every case
//! in `invalid-cases.yaml` is rejected with the same message the API server gives, and every
//! message the Rust side can produce is one a CEL rule in the CRDs carries.

use accord_crds::testdata::{examples, invalid_cases};
use accord_crds::validate::{Validate, ValidationErrors};
use accord_crds::{
    CrossClusterScalePolicy, FederatedKafkaTopic, KafkaTopicPolicy, ManagedCluster,
    PrometheusFederation, render_all_crds_yaml,
};
use serde_json::Value;

/// Deserialises an object by its kind and runs its Rust-side validation.
fn validate(obj: &Value) -> Result<(), ValidationErrors> {
    fn typed<T: serde::de::DeserializeOwned>(obj: &Value) -> T {
        serde_json::from_value(obj.clone()).unwrap_or_else(|e| panic!("{e}: {obj}"))
    }
    match obj["kind"].as_str().unwrap() {
        "ManagedCluster" => typed::<ManagedCluster>(obj).spec.validate(),
        "CrossClusterScalePolicy" => typed::<CrossClusterScalePolicy>(obj).spec.validate(),
        "FederatedKafkaTopic" => typed::<FederatedKafkaTopic>(obj).spec.validate(),
        "KafkaTopicPolicy" => typed::<KafkaTopicPolicy>(obj).spec.validate(),
        "PrometheusFederation" => typed::<PrometheusFederation>(obj).spec.validate(),
        other => panic!("unknown kind {other}"),
    }
}

#[test]
fn every_example_is_valid() {
    let all = examples();
    assert!(all.len() >= 5, "an example for every kind");
    for (file, obj) in all {
        validate(&obj).unwrap_or_else(|e| panic!("{file}: {e}"));
    }
}

#[test]
fn every_kind_has_an_example() {
    let kinds: std::collections::BTreeSet<String> = examples()
        .iter()
        .map(|(_, o)| o["kind"].as_str().unwrap().to_owned())
        .collect();
    for crd in accord_crds::all_crds() {
        assert!(
            kinds.contains(&crd.spec.names.kind),
            "no example of {}",
            crd.spec.names.kind
        );
    }
}

#[test]
fn every_invalid_case_is_rejected_with_its_message() {
    let cases = invalid_cases();
    assert!(cases.len() >= 12);
    for case in cases {
        let err = validate(&case.object())
            .err()
            .unwrap_or_else(|| panic!("case {:?} was accepted", case.name));
        assert!(
            err.messages().contains(&case.message.as_str()),
            "case {:?}: expected {:?}, got {err}",
            case.name,
            case.message
        );
    }
}

#[test]
fn every_rust_side_message_is_also_a_cel_message() {
    let yaml = render_all_crds_yaml().unwrap();
    let flat: String = yaml.split_whitespace().collect::<Vec<_>>().join(" ");
    for case in invalid_cases() {
        let needle: String = case
            .message
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            flat.contains(&needle),
            "no CEL rule carries {:?}",
            case.message
        );
    }
}
