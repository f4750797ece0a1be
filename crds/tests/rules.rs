//! The Rust-side validation agrees with the CEL rules: every example is valid, every case
//! in `invalid-cases.yaml` is rejected with the same message the API server gives, and every
//! message the Rust side can produce is one a CEL rule in the CRDs carries. And every
//! integer in every CRD has schema bounds its Rust type can hold.

use accord_crds::kinds::{self, Kind};
use accord_crds::testdata::{InvalidCase, examples, invalid_cases};
use accord_crds::validate::{Validate, ValidationErrors};
use accord_crds::{FederatedKafkaUser, FederatedResource, render_all_crds_yaml};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray,
};
use serde_json::Value;

/// The kind of `obj`, from the one list of kinds.
fn kind_of(obj: &Value) -> Kind {
    let name = obj["kind"].as_str().unwrap_or_default();
    kinds::named(name).unwrap_or_else(|| panic!("unknown kind {name}"))
}

/// Deserialises an object by its kind and runs its Rust-side validation.
fn validate(obj: &Value) -> Result<(), ValidationErrors> {
    kind_of(obj)
        .validate_object(obj)
        .unwrap_or_else(|e| panic!("{e}: {obj}"))
}

/// Whether the object decodes into its kind's Rust type (spec and status).
fn decodes(obj: &Value) -> Result<(), serde_json::Error> {
    kind_of(obj).validate_object(obj).map(|_| ())
}

/// The root schema of the CRD for `kind`.
fn schema_of(kind: &str) -> JSONSchemaProps {
    let crd = accord_crds::all_crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.clone())
        .expect("every version has a schema")
}

fn item_schemas(schema: &JSONSchemaProps) -> Vec<&JSONSchemaProps> {
    match &schema.items {
        Some(JSONSchemaPropsOrArray::Schema(item)) => vec![item.as_ref()],
        Some(JSONSchemaPropsOrArray::Schemas(items)) => items.iter().collect(),
        None => Vec::new(),
    }
}

/// The OpenAPI `minimum`/`maximum` violations in `value`, worded as the API server words
/// them ("should be greater than or equal to 0").
fn bound_violations(schema: &JSONSchemaProps, value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Number(n) => {
            let n = n.as_f64().expect("a JSON number");
            if let Some(min) = schema.minimum.filter(|min| n < *min) {
                out.push(format!("should be greater than or equal to {min}"));
            }
            if let Some(max) = schema.maximum.filter(|max| n > *max) {
                out.push(format!("should be less than or equal to {max}"));
            }
        }
        Value::Object(fields) => {
            for (name, field) in fields {
                if let Some(sub) = schema.properties.as_ref().and_then(|p| p.get(name)) {
                    bound_violations(sub, field, out);
                }
            }
        }
        Value::Array(entries) => {
            for item in item_schemas(schema) {
                for entry in entries {
                    bound_violations(item, entry, out);
                }
            }
        }
        _ => {}
    }
}

/// Checks one invalid case on the Rust side; `Err` says how it was not refused as expected.
fn check_case(case: &InvalidCase) -> Result<(), String> {
    let obj = case.object();
    if case.beyond_rust_type {
        return match decodes(&obj) {
            Err(_) => Ok(()),
            Ok(()) => Err("decodes, but the case says its value is beyond the Rust type".into()),
        };
    }
    if case.is_status() {
        // The bound must lie inside the Rust type: the object still decodes, and it is the
        // schema, not a decode failure, that refuses it.
        decodes(&obj).map_err(|e| format!("does not decode ({e}); the bound is too wide"))?;
        let mut found = Vec::new();
        bound_violations(&schema_of(obj["kind"].as_str().unwrap()), &obj, &mut found);
        return if found.contains(&case.message) {
            Ok(())
        } else {
            Err(format!("schema bounds give {found:?}"))
        };
    }
    match validate(&obj) {
        Ok(()) => Err("accepted".into()),
        Err(err) if err.messages().contains(&case.message.as_str()) => Ok(()),
        Err(err) => Err(format!("got {err}")),
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
fn the_kafka_user_example_delivers_its_password_with_a_valid_federated_resource() {
    // The FederatedResource is shown commented out (an example file holds one object): it
    // must still be one, and deliver the very Secret the user's password is read from.
    let path = accord_crds::testdata::repo_root().join("deploy/examples/federatedkafkauser.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text
        .find("# apiVersion: accord.io/v1beta1")
        .expect("a commented FederatedResource");
    let uncommented: String = text[start..]
        .lines()
        .map(|line| {
            line.strip_prefix("# ")
                .unwrap_or(line.trim_start_matches('#'))
        })
        .collect::<Vec<_>>()
        .join("\n");
    let delivery: FederatedResource = serde_saphyr::from_str(&uncommented).unwrap();
    delivery.spec.validate().unwrap();
    let user: FederatedKafkaUser =
        serde_json::from_value(accord_crds::testdata::example("federatedkafkauser.yaml")).unwrap();
    let password = user
        .spec
        .authentication
        .password_secret_ref
        .as_ref()
        .expect("the example names its password Secret");
    assert_eq!(delivery.metadata.namespace, user.metadata.namespace);
    assert_eq!(
        delivery.spec.placement.clusters,
        user.spec.placement.clusters
    );
    assert!(
        delivery
            .spec
            .secret_refs
            .iter()
            .any(|r| r.name == password.name),
        "{:?} does not deliver {}",
        delivery.spec.secret_refs,
        password.name
    );
    let manifests = serde_json::to_string(&delivery.spec.manifests).unwrap();
    assert!(
        manifests.contains(&format!(
            r#""secretKeyRef":{{"key":"{}","name":"{}"}}"#,
            password.key, password.name
        )),
        "no container reads the password: {manifests}"
    );
}

#[test]
fn every_invalid_case_is_rejected_with_its_message() {
    let cases = invalid_cases();
    assert!(cases.len() >= 12);
    for case in cases {
        if let Err(why) = check_case(&case) {
            panic!("case {:?}: expected {:?}: {why}", case.name, case.message);
        }
    }
}

#[test]
fn every_rust_side_message_is_also_a_cel_message() {
    let yaml = render_all_crds_yaml().unwrap();
    let flat: String = yaml.split_whitespace().collect::<Vec<_>>().join(" ");
    // Status cases carry the API server's own wording for an OpenAPI bound, not a CEL message.
    for case in invalid_cases().into_iter().filter(|c| !c.is_status()) {
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

/// Every integer node of a schema, as (path, schema), depth first.
fn integers<'a>(
    path: &str,
    schema: &'a JSONSchemaProps,
    out: &mut Vec<(String, &'a JSONSchemaProps)>,
) {
    if schema.type_.as_deref() == Some("integer") {
        out.push((path.to_owned(), schema));
    }
    for (name, sub) in schema.properties.iter().flatten() {
        integers(&format!("{path}.{name}"), sub, out);
    }
    for item in item_schemas(schema) {
        integers(&format!("{path}[]"), item, out);
    }
    if let Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrBool::Schema(values)) =
        &schema.additional_properties
    {
        integers(&format!("{path}.*"), values, out);
    }
}

#[test]
fn every_integer_in_every_crd_has_bounds_its_rust_type_can_hold() {
    // The API server ignores `format`; without these bounds it stores integers the hub
    // cannot decode. int64 bounds stay within 2^53 so the API server's float comparison
    // is exact.
    let mut checked = 0;
    for crd in accord_crds::all_crds() {
        let kind = &crd.spec.names.kind;
        let root = schema_of(kind);
        let mut found = Vec::new();
        integers(kind, &root, &mut found);
        for (path, schema) in found {
            let (lo, hi) = match schema.format.as_deref() {
                Some("int32") => (f64::from(i32::MIN), f64::from(i32::MAX)),
                Some("int64") => (-(2f64.powi(53)) + 1.0, 2f64.powi(53) - 1.0),
                other => panic!("{path}: integer with format {other:?}"),
            };
            let min = schema
                .minimum
                .unwrap_or_else(|| panic!("{path} has no minimum"));
            let max = schema
                .maximum
                .unwrap_or_else(|| panic!("{path} has no maximum"));
            assert!(
                lo <= min && min <= max && max <= hi,
                "{path}: bounds {min}..={max} do not fit {lo}..={hi}"
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 30,
        "only {checked} integers found; the walk misses some"
    );
}

#[test]
fn every_integer_field_has_an_out_of_range_case() {
    // One case per integer field: the leaf paths the cases patch must cover every integer
    // in every spec and status (list entries and conditions included).
    let mut covered = std::collections::BTreeSet::new();
    fn leaves(path: &str, v: &Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            Value::Object(m) => m
                .iter()
                .for_each(|(k, v)| leaves(&format!("{path}.{k}"), v, out)),
            Value::Array(a) => a.iter().for_each(|v| leaves(&format!("{path}[]"), v, out)),
            Value::Number(_) => {
                out.insert(path.to_owned());
            }
            _ => {}
        }
    }
    for case in invalid_cases() {
        let kind = case.object()["kind"].as_str().unwrap().to_owned();
        leaves(&kind, &case.patch, &mut covered);
    }
    let mut missing = Vec::new();
    for crd in accord_crds::all_crds() {
        let kind = &crd.spec.names.kind;
        let root = schema_of(kind);
        let mut found = Vec::new();
        integers(kind, &root, &mut found);
        missing.extend(
            found
                .into_iter()
                .map(|(p, _)| p)
                .filter(|p| !covered.contains(p)),
        );
    }
    assert!(
        missing.is_empty(),
        "integer fields without an out-of-range case: {missing:#?}"
    );
}
