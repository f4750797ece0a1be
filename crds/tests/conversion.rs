//! Properties of the v1alpha1 ↔ v1beta1 conversion over generated objects of every kind:
//! round trips are exact in both directions, a conversion to the version an object already
//! has changes nothing, valid objects never fail to convert, and conversion agrees with the
//! two versions' shapes as this file writes them independently of the conversion code.
//!
//! Every object is built from one [`Parts`]: the fields both versions share (including
//! fields unknown to both, which must pass through), the placement, the FederatedKafkaUser
//! user name and v1beta1-only placement keys, so that the same parts give the object in
//! either version. Generated v1alpha1 objects are valid for the frozen schemas in
//! `crds/v1alpha1/` (as the API server would store them: no `spec.placement`, no
//! `spec.userName`, no annotation `accord.io/v1beta1-fields`).
//!
//! 256 cases per property (proptest's default; `PROPTEST_CASES` overrides it).

use std::collections::BTreeMap;

use accord_crds::conversion::{LOSSLESS_ANNOTATION, convert};
use accord_crds::{
    CrossClusterScalePolicy, FederatedKafkaTopic, FederatedKafkaUser, FederatedResource,
    KafkaTopicPolicy, ManagedCluster, PrometheusFederation,
};
use proptest::collection::{btree_map, btree_set, vec};
use proptest::option::of as maybe;
use proptest::prelude::*;
use proptest::sample::{select, subsequence};
use serde_json::{Map, Value, json};

const ALPHA: &str = "accord.io/v1alpha1";
const BETA: &str = "accord.io/v1beta1";

/// Kinds whose `clusters`/`clusterSelector` live in `spec.placement` in v1beta1.
const PLACEMENT_KINDS: [&str; 4] = [
    "FederatedKafkaTopic",
    "PrometheusFederation",
    "FederatedResource",
    "FederatedKafkaUser",
];
const CCSP: &str = "CrossClusterScalePolicy";
const USER: &str = "FederatedKafkaUser";

/// One object, in neither version yet.
#[derive(Clone, Debug)]
struct Parts {
    kind: &'static str,
    metadata: Value,
    /// The spec fields both versions share, with unknown extra fields.
    body: Map<String, Value>,
    /// `{clusters}` or `{clusterSelector}`: always for the placement kinds; for a
    /// CrossClusterScalePolicy only in v1beta1.
    placement: Option<Value>,
    /// Keys of `spec.placement` other than clusters/clusterSelector (v1beta1 only).
    placement_extras: Map<String, Value>,
    /// A FederatedKafkaUser's `username` (v1alpha1) / `userName` (v1beta1).
    user_name: Option<Value>,
    status: Option<Value>,
    /// Unknown fields beside `spec`.
    top_extras: Map<String, Value>,
}

impl Parts {
    fn alpha(&self) -> Value {
        assert!(self.kind != CCSP || self.placement.is_none());
        assert!(self.placement_extras.is_empty());
        let mut spec = self.body.clone();
        if let Some(Value::Object(placement)) = &self.placement {
            spec.extend(placement.clone());
        }
        if let Some(user_name) = &self.user_name {
            spec.insert("username".into(), user_name.clone());
        }
        self.object(ALPHA, spec)
    }

    fn beta(&self) -> Value {
        let mut spec = self.body.clone();
        if let Some(Value::Object(placement)) = &self.placement {
            let mut placement = placement.clone();
            placement.extend(self.placement_extras.clone());
            spec.insert("placement".into(), Value::Object(placement));
        }
        if let Some(user_name) = &self.user_name {
            spec.insert("userName".into(), user_name.clone());
        }
        self.object(BETA, spec)
    }

    fn object(&self, api_version: &str, spec: Map<String, Value>) -> Value {
        let mut object = self.top_extras.clone();
        object.insert("apiVersion".into(), api_version.into());
        object.insert("kind".into(), self.kind.into());
        object.insert("metadata".into(), self.metadata.clone());
        object.insert("spec".into(), Value::Object(spec));
        if let Some(status) = &self.status {
            object.insert("status".into(), status.clone());
        }
        Value::Object(object)
    }
}

// ---------------------------------------------------------------------------------------
// Building blocks
// ---------------------------------------------------------------------------------------

/// An object of the given fields, leaving out those that are `None`.
fn fields<const N: usize>(fields: [(&str, Option<Value>); N]) -> Value {
    Value::Object(
        fields
            .into_iter()
            .filter_map(|(key, value)| Some((key.to_owned(), value?)))
            .collect(),
    )
}

fn string(pattern: &'static str) -> BoxedStrategy<Value> {
    pattern.prop_map(Value::String).boxed()
}

fn int(range: std::ops::RangeInclusive<i64>) -> BoxedStrategy<Value> {
    range.prop_map(Value::from).boxed()
}

fn one_of(values: &[&'static str]) -> BoxedStrategy<Value> {
    select(values.to_vec()).prop_map(Value::from).boxed()
}

/// A number with few binary digits, so that it survives JSON text exactly.
fn number(max_quarters: u32) -> BoxedStrategy<Value> {
    (1..=max_quarters)
        .prop_map(|quarters| json!(f64::from(quarters) / 4.0))
        .boxed()
}

fn dns_label() -> BoxedStrategy<String> {
    "[a-z]([-a-z0-9]{0,8}[a-z0-9])?".boxed()
}

fn string_map(keys: &'static str, values: &'static str, max: usize) -> BoxedStrategy<Value> {
    btree_map(keys, values, 0..max)
        .prop_map(|map: BTreeMap<String, String>| json!(map))
        .boxed()
}

fn label_selector() -> BoxedStrategy<Value> {
    let expression = (
        "[a-z]{1,6}",
        select(vec!["In", "NotIn", "Exists", "DoesNotExist"]),
        maybe(vec("[a-z0-9]{1,6}", 0..3)),
    )
        .prop_map(|(key, operator, values)| {
            fields([
                ("key", Some(json!(key))),
                ("operator", Some(json!(operator))),
                ("values", values.map(|v| json!(v))),
            ])
        });
    (
        maybe(string_map("[a-z]{1,6}", "[a-z0-9]{0,6}", 3)),
        maybe(vec(expression, 0..3)),
    )
        .prop_map(|(labels, expressions)| {
            fields([
                ("matchLabels", labels),
                ("matchExpressions", expressions.map(Value::from)),
            ])
        })
        .boxed()
}

/// `{clusters}` or `{clusterSelector}`, as both versions hold them.
fn placement() -> BoxedStrategy<Value> {
    prop_oneof![
        vec(dns_label(), 1..4).prop_map(|clusters| json!({ "clusters": clusters })),
        label_selector().prop_map(|selector| json!({ "clusterSelector": selector })),
    ]
    .boxed()
}

/// Any small JSON value, numbers limited to those JSON text carries exactly.
fn any_json() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1000i32..1000).prop_map(|n| json!(f64::from(n) / 8.0)),
        ".{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..3).prop_map(Value::from),
            btree_map(".{0,6}", inner, 0..3).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
    .boxed()
}

/// Fields no version of Accord knows (named so that they never meet a known one).
fn unknown_fields(max: usize) -> BoxedStrategy<Map<String, Value>> {
    btree_map("future[A-Z][a-z]{0,5}", any_json(), 0..max)
        .prop_map(|m| m.into_iter().collect())
        .boxed()
}

fn metadata(namespaced: bool) -> BoxedStrategy<Value> {
    (
        dns_label(),
        dns_label(),
        maybe(string_map(
            "[a-z]{1,6}(\\.io/[a-z]{1,6})?",
            "[a-z0-9]{0,6}",
            4,
        )),
        // Never accord.io/v1beta1-fields: its keys have no digits.
        maybe(string_map("[a-z]{1,6}(\\.io/[a-z-]{1,8})?", ".{0,12}", 4)),
        maybe(1i64..100),
        maybe("[0-9a-f]{8}"),
        maybe("[0-9]{1,6}"),
        maybe(Just("2025-03-04T05:06:07Z")),
    )
        .prop_map(
            move |(name, namespace, labels, annotations, generation, uid, version, created)| {
                fields([
                    ("name", Some(json!(name))),
                    ("namespace", namespaced.then(|| json!(namespace))),
                    ("labels", labels),
                    ("annotations", annotations),
                    ("generation", generation.map(Value::from)),
                    ("uid", uid.map(Value::from)),
                    ("resourceVersion", version.map(Value::from)),
                    ("creationTimestamp", created.map(Value::from)),
                ])
            },
        )
        .boxed()
}

fn status() -> BoxedStrategy<Option<Value>> {
    let condition = (
        select(vec!["Ready", "Degraded", "Progressing"]),
        select(vec!["True", "False", "Unknown"]),
        "[A-Z][a-zA-Z]{1,10}",
        ".{0,16}",
        maybe(0i64..50),
    )
        .prop_map(|(kind, status, reason, message, generation)| {
            fields([
                ("type", Some(json!(kind))),
                ("status", Some(json!(status))),
                ("reason", Some(json!(reason))),
                ("message", Some(json!(message))),
                ("lastTransitionTime", Some(json!("2025-03-04T05:06:07Z"))),
                ("observedGeneration", generation.map(Value::from)),
            ])
        });
    maybe(
        (vec(condition, 0..3), maybe(0i64..50), unknown_fields(2)).prop_map(
            |(conditions, generation, mut extra)| {
                extra.insert("conditions".into(), json!(conditions));
                if let Some(generation) = generation {
                    extra.insert("observedGeneration".into(), json!(generation));
                }
                Value::Object(extra)
            },
        ),
    )
    .boxed()
}

// ---------------------------------------------------------------------------------------
// The fields of each kind's spec that both versions share (crds/v1alpha1/*.yaml)
// ---------------------------------------------------------------------------------------

fn managed_cluster() -> BoxedStrategy<Value> {
    let taint = (
        one_of(&["NoSchedule", "PreferNoSchedule", "NoExecute"]),
        string("[a-z]{1,8}(\\.io/[a-z]{1,8})?"),
        maybe(string("[a-z0-9]{0,8}")),
    )
        .prop_map(|(effect, key, value)| {
            fields([
                ("effect", Some(effect)),
                ("key", Some(key)),
                ("value", value),
            ])
        });
    (
        maybe(string("https?://[a-z]{1,10}(\\.[a-z]{1,6})?(:[0-9]{4})?")),
        maybe(vec(taint, 0..3)),
        maybe(any::<bool>()),
        maybe(int(1..=10_000)),
    )
        .prop_map(|(endpoint, taints, unschedulable, weight)| {
            fields([
                ("federationEndpoint", endpoint),
                ("taints", taints.map(Value::from)),
                ("unschedulable", unschedulable.map(Value::from)),
                ("weight", weight),
            ])
        })
        .boxed()
}

fn kafka_topic_policy() -> BoxedStrategy<Value> {
    let users = (maybe(any::<bool>()), maybe(any::<bool>())).prop_map(|(all, wildcard)| {
        fields([
            ("allowAllOperations", all.map(Value::from)),
            ("allowWildcardResources", wildcard.map(Value::from)),
        ])
    });
    (
        maybe(one_of(&["Deny", "Audit"])),
        maybe(vec("[a-z.]{1,20}", 0..3)),
        maybe((1i64..=10_000, 1i64..=10_000)),
        any::<(bool, bool)>(),
        maybe(label_selector()),
        maybe(int(1..=32)),
        maybe(string("\\^?[a-z.-]{1,10}\\*?\\$?")),
        maybe(users),
    )
        .prop_map(
            |(enforcement, forbidden, bounds, (min, max), namespaces, rf, pattern, users)| {
                let (low, high) = bounds.map_or((None, None), |(a, b)| {
                    (Some(json!(a.min(b))), Some(json!(a.max(b))))
                });
                fields([
                    ("enforcement", enforcement),
                    ("forbiddenConfigs", forbidden.map(Value::from)),
                    ("minPartitions", low.filter(|_| min)),
                    ("maxPartitions", high.filter(|_| max)),
                    ("namespaceSelector", namespaces),
                    ("replicationFactor", rf),
                    ("topicNamePattern", pattern),
                    ("users", users),
                ])
            },
        )
        .boxed()
}

/// `min` and `max` with min <= max, each present or not.
fn bounds(max: i64) -> BoxedStrategy<(Option<Value>, Option<Value>)> {
    (0..=max, 0..=max, any::<(bool, bool)>())
        .prop_map(|(a, b, (has_min, has_max))| {
            (
                has_min.then(|| json!(a.min(b))),
                has_max.then(|| json!(a.max(b))),
            )
        })
        .boxed()
}

/// A CrossClusterScalePolicy's shared fields; `distribution` has at least
/// `min_distribution` entries (1 in v1alpha1; 0 in v1beta1 with a placement).
fn scale_policy(min_distribution: usize) -> BoxedStrategy<Value> {
    let entry = (1i64..=10_000, bounds(1_000_000), maybe(dns_label()));
    let distribution = btree_set(dns_label(), min_distribution..4).prop_flat_map(move |clusters| {
        let n = clusters.len();
        (Just(clusters), vec(entry.clone(), n))
    });
    let distribution = distribution.prop_map(|(clusters, entries)| {
        clusters
            .into_iter()
            .zip(entries)
            .map(|(cluster, (weight, (min, max), namespace))| {
                fields([
                    ("cluster", Some(json!(cluster))),
                    ("weight", Some(json!(weight))),
                    ("minReplicas", min),
                    ("maxReplicas", max),
                    ("namespace", namespace.map(Value::from)),
                ])
            })
            .collect::<Vec<_>>()
    });
    let target = (any::<bool>(), "[a-z][-a-z0-9]{0,12}").prop_map(|(explicit, name)| {
        fields([
            ("apiVersion", explicit.then(|| json!("apps/v1"))),
            ("kind", explicit.then(|| json!("Deployment"))),
            ("name", Some(json!(name))),
        ])
    });
    let failover = (maybe(any::<bool>()), maybe(int(0..=86_400))).prop_map(|(on, cooldown)| {
        fields([
            ("enabled", on.map(Value::from)),
            ("returnCooldownSeconds", cooldown),
        ])
    });
    (
        target,
        int(0..=1_000_000),
        distribution,
        maybe(failover),
        maybe(autoscaling()),
    )
        .prop_map(|(target, desired, distribution, failover, autoscaling)| {
            fields([
                ("targetRef", Some(target)),
                ("desiredReplicas", Some(desired)),
                ("distribution", Some(json!(distribution))),
                ("failover", failover),
                ("autoscaling", autoscaling),
            ])
        })
        .boxed()
}

fn autoscaling() -> BoxedStrategy<Value> {
    let metric = (
        string("https?://[a-z]{1,10}:9090"),
        string("sum\\(rate\\([a-z_]{1,12}\\[2m\\]\\)\\)"),
        number(4_000),
        maybe(int(1..=3_600)),
        maybe(int(0..=50)),
    )
        .prop_map(|(url, query, target, poll, tolerance)| {
            fields([
                ("prometheus", Some(json!({"url": url, "query": query}))),
                ("targetPerReplica", Some(target)),
                ("pollSeconds", poll),
                ("tolerancePercent", tolerance),
            ])
        });
    let threshold = (
        maybe(number(4)),
        maybe(int(1..=86_400)),
        maybe(number(40)),
        maybe(number(40)),
    )
        .prop_map(|(alpha, window, stddev, floor)| {
            fields([
                ("ewmaAlpha", alpha),
                ("windowSeconds", window),
                ("stddevFactor", stddev),
                ("floorRatio", floor),
            ])
        });
    let behavior = (
        maybe(int(0..=600_000)),
        maybe(int(0..=86_400)),
        maybe(int(1..=60)),
        maybe(int(1..=100)),
        maybe(int(1..=86_400)),
    )
        .prop_map(|(debounce, cooldown, ops, failures, breaker)| {
            fields([
                ("debounceMillis", debounce),
                ("cooldownSeconds", cooldown),
                ("maxScaleOperationsPerMinute", ops),
                ("failureThreshold", failures),
                ("breakerOpenSeconds", breaker),
            ])
        });
    (
        0i64..=1_000_000,
        0i64..=1_000_000,
        metric,
        maybe(threshold),
        maybe(behavior),
    )
        .prop_map(|(a, b, metric, threshold, behavior)| {
            fields([
                ("minReplicas", Some(json!(a.min(b)))),
                ("maxReplicas", Some(json!(a.max(b)))),
                ("metric", Some(metric)),
                ("dynamicThreshold", threshold),
                ("behavior", behavior),
            ])
        })
        .boxed()
}

fn federated_kafka_topic() -> BoxedStrategy<Value> {
    (
        int(1..=10_000),
        int(1..=32),
        maybe("[a-zA-Z0-9._-]{1,20}".prop_filter("not . or ..", |n| n != "." && n != "..")),
        maybe(string_map("[a-z]{1,8}(\\.[a-z]{1,8})?", "[a-z0-9]{0,8}", 4)),
        maybe(one_of(&["Retain", "Delete"])),
    )
        .prop_map(|(partitions, rf, topic, config, deletion)| {
            fields([
                ("partitions", Some(partitions)),
                ("replicationFactor", Some(rf)),
                ("topicName", topic.map(Value::from)),
                ("config", config),
                ("deletionPolicy", deletion),
            ])
        })
        .boxed()
}

fn prometheus_federation() -> BoxedStrategy<Value> {
    let tenants = prop_oneof![
        vec(dns_label(), 1..3).prop_map(|namespaces| json!({ "namespaces": namespaces })),
        label_selector().prop_map(|selector| json!({ "labelSelector": selector })),
    ];
    let target = (
        maybe(dns_label()),
        maybe(string("http://[a-z]{1,8}:9090/-/reload")),
    )
        .prop_map(|(namespace, reload)| {
            fields([
                ("configMapNamespace", namespace.map(Value::from)),
                ("reloadURL", reload),
            ])
        });
    (
        vec("\\{job=\"[a-z]{1,8}\"\\}", 1..3),
        tenants,
        // Every timeout here is at most every interval, as the CEL rule wants.
        maybe(one_of(&["30s", "1m", "1m30s"])),
        maybe(one_of(&["10s", "5s", "500ms"])),
        maybe(int(0..=10_000_000)),
        maybe(target),
        maybe(maybe(any::<bool>())),
    )
        .prop_map(
            |(matchers, tenants, interval, timeout, limit, target, global)| {
                fields([
                    ("match", Some(json!(matchers))),
                    ("tenantSelector", Some(tenants)),
                    ("scrapeInterval", interval),
                    ("scrapeTimeout", timeout),
                    ("sampleLimit", limit),
                    ("target", target),
                    (
                        "global",
                        global.map(|enabled| fields([("enabled", enabled.map(Value::from))])),
                    ),
                ])
            },
        )
        .boxed()
}

fn federated_resource() -> BoxedStrategy<Value> {
    let manifest = (
        select(vec![
            ("v1", "ConfigMap"),
            ("v1", "Service"),
            ("apps/v1", "Deployment"),
            ("example.com/v1", "Widget"),
        ]),
        dns_label(),
        any_json(),
    )
        .prop_map(|((api_version, kind), name, body)| {
            json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "data": body})
        });
    let patch = (
        select(vec!["add", "replace", "remove"]),
        "/metadata/labels/[a-z]{1,6}",
        any_json(),
    )
        .prop_map(|(op, path, value)| {
            fields([
                ("op", Some(json!(op))),
                ("path", Some(json!(path))),
                ("value", (op != "remove").then_some(value)),
            ])
        });
    let target = (string("[A-Z][a-zA-Z]{1,10}"), maybe(dns_label()))
        .prop_map(|(kind, name)| fields([("kind", Some(kind)), ("name", name.map(Value::from))]));
    // An override's own cluster filter: the same shape as a placement, never moved.
    let over =
        (placement(), vec(patch, 1..3), maybe(target)).prop_map(|(filter, patches, target)| {
            let mut entry = filter.as_object().cloned().unwrap_or_default();
            entry.insert("jsonPatch".into(), json!(patches));
            if let Some(target) = target {
                entry.insert("target".into(), target);
            }
            Value::Object(entry)
        });
    let feedback = (
        "[a-z][a-zA-Z]{0,8}",
        "\\.status\\.[a-z]{1,8}",
        "[A-Z][a-z]{1,8}",
        dns_label(),
    )
        .prop_map(|(alias, path, kind, name)| {
            json!({"as": alias, "jsonPath": path, "kind": kind, "name": name})
        });
    (
        vec(manifest, 1..3),
        maybe(vec(over, 0..3)),
        maybe(vec(
            dns_label().prop_map(|name| json!({ "name": name })),
            0..2,
        )),
        maybe(vec(feedback, 0..2)),
        maybe(one_of(&["Abort", "Adopt"])),
        maybe(one_of(&["Delete", "Orphan"])),
    )
        .prop_map(
            |(manifests, overrides, secrets, feedback, conflicts, deletion)| {
                fields([
                    ("manifests", Some(json!(manifests))),
                    ("overrides", overrides.map(Value::from)),
                    ("secretRefs", secrets.map(Value::from)),
                    ("feedback", feedback.map(Value::from)),
                    ("conflictResolution", conflicts),
                    ("deletionPolicy", deletion),
                ])
            },
        )
        .boxed()
}

/// A FederatedKafkaUser's shared fields (its user name is [`Parts::user_name`]).
fn federated_kafka_user() -> BoxedStrategy<Value> {
    const OPERATIONS: [&str; 6] = ["All", "Read", "Write", "Create", "Describe", "Alter"];
    let resource = prop_oneof![
        (
            "[a-zA-Z0-9._-]{1,12}|\\*",
            maybe(one_of(&["literal", "prefixed"]))
        )
            .prop_map(|(name, pattern)| {
                fields([
                    ("type", Some(json!("topic"))),
                    ("name", Some(json!(name))),
                    ("patternType", pattern),
                ])
            }),
        "[a-z-]{1,12}".prop_map(|name| json!({"type": "group", "name": name})),
        Just(json!({"type": "cluster", "name": "kafka-cluster"})),
    ];
    let acl = (
        resource,
        subsequence(OPERATIONS.to_vec(), 1..4),
        maybe(one_of(&["*", "10.0.0.1", "::1"])),
        maybe(one_of(&["allow", "deny"])),
    )
        .prop_map(|(resource, operations, host, kind)| {
            fields([
                ("resource", Some(resource)),
                ("operations", Some(json!(operations))),
                ("host", host),
                ("type", kind),
            ])
        });
    let authentication = (
        maybe((dns_label(), "[a-z.]{1,10}")),
        maybe(int(4_096..=16_384)),
    )
        .prop_map(|(secret, iterations)| {
            fields([
                ("type", Some(json!("scram-sha-512"))),
                (
                    "passwordSecretRef",
                    secret.map(|(name, key)| json!({"name": name, "key": key})),
                ),
                ("iterations", iterations),
            ])
        });
    let quotas = (
        maybe(int(1..=1_000_000_000_000)),
        maybe(int(1..=1_000_000_000_000)),
        maybe(number(400)),
        maybe(number(400)),
    )
        .prop_map(|(consumer, producer, requests, mutations)| {
            fields([
                ("consumerByteRate", consumer),
                ("producerByteRate", producer),
                ("requestPercentage", requests),
                ("controllerMutationRate", mutations),
            ])
        });
    (
        authentication,
        maybe(vec(acl, 0..3)),
        maybe(quotas),
        maybe(one_of(&["Retain", "Delete"])),
    )
        .prop_map(|(authentication, acls, quotas, deletion)| {
            fields([
                ("authentication", Some(authentication)),
                ("acls", acls.map(Value::from)),
                ("quotas", quotas),
                ("deletionPolicy", deletion),
            ])
        })
        .boxed()
}

// ---------------------------------------------------------------------------------------
// Whole objects
// ---------------------------------------------------------------------------------------

/// What a generated v1beta1 object may carry beyond what v1alpha1 holds.
#[derive(Clone, Copy, Debug)]
struct Beta {
    /// A CrossClusterScalePolicy may have a `spec.placement`.
    scale_placement: bool,
    /// `spec.placement` may have keys other than clusters/clusterSelector.
    placement_extras: bool,
}

/// Objects of every kind: in v1alpha1's shape when `beta` is `None`.
fn parts(beta: Option<Beta>) -> BoxedStrategy<Parts> {
    let scale_placement = beta.is_some_and(|b| b.scale_placement);
    let placement_extras = beta.is_some_and(|b| b.placement_extras);
    let kind = select(vec![
        "ManagedCluster",
        "KafkaTopicPolicy",
        CCSP,
        "FederatedKafkaTopic",
        "PrometheusFederation",
        "FederatedResource",
        USER,
    ]);
    kind.prop_flat_map(move |kind| {
        let namespaced = !matches!(kind, "ManagedCluster" | "KafkaTopicPolicy");
        let placement = match kind {
            k if PLACEMENT_KINDS.contains(&k) => placement().prop_map(Some).boxed(),
            CCSP if scale_placement => maybe(placement()).boxed(),
            _ => Just(None).boxed(),
        };
        (
            Just(kind),
            metadata(namespaced),
            placement,
            unknown_fields(3),
            unknown_fields(if placement_extras { 3 } else { 1 }),
            if kind == USER {
                maybe(string("[a-zA-Z0-9=,.@_-]{1,20}")).boxed()
            } else {
                Just(None).boxed()
            },
            status(),
            unknown_fields(2),
        )
            .prop_flat_map(
                move |(kind, metadata, placement, spec_extras, extras, user, status, top)| {
                    let body = match kind {
                        "ManagedCluster" => managed_cluster(),
                        "KafkaTopicPolicy" => kafka_topic_policy(),
                        CCSP => scale_policy(if placement.is_some() { 0 } else { 1 }),
                        "FederatedKafkaTopic" => federated_kafka_topic(),
                        "PrometheusFederation" => prometheus_federation(),
                        "FederatedResource" => federated_resource(),
                        _ => federated_kafka_user(),
                    };
                    // The four placement kinds may carry extra placement keys in v1beta1;
                    // a scale policy's placement is v1beta1-only altogether.
                    let placement_extras = if placement_extras && placement.is_some() {
                        extras
                    } else {
                        Map::new()
                    };
                    body.prop_map(move |body| {
                        let mut body = body.as_object().cloned().unwrap_or_default();
                        body.extend(spec_extras.clone());
                        Parts {
                            kind,
                            metadata: metadata.clone(),
                            body,
                            placement: placement.clone(),
                            placement_extras: placement_extras.clone(),
                            user_name: user.clone(),
                            status: status.clone(),
                            top_extras: top.clone(),
                        }
                    })
                },
            )
    })
    .boxed()
}

fn alpha_parts() -> BoxedStrategy<Parts> {
    parts(None)
}

fn beta_parts() -> BoxedStrategy<Parts> {
    parts(Some(Beta {
        scale_placement: true,
        placement_extras: true,
    }))
}

/// v1beta1 objects v1alpha1 holds whole: no scale-policy placement, no extra placement keys.
fn plain_beta_parts() -> BoxedStrategy<Parts> {
    parts(Some(Beta {
        scale_placement: false,
        placement_extras: false,
    }))
}

fn converted(object: Value, desired: &str) -> Result<Value, TestCaseError> {
    convert(object, desired).map_err(|e| TestCaseError::fail(format!("conversion failed: {e}")))
}

fn lossless_annotation(object: &Value) -> Option<&Value> {
    object
        .pointer("/metadata/annotations")?
        .get(LOSSLESS_ANNOTATION)
}

/// Whether a v1beta1 object decodes into its kind's Rust type.
fn decodes(object: &Value) -> Result<(), serde_json::Error> {
    fn typed<T: serde::de::DeserializeOwned>(object: &Value) -> Result<(), serde_json::Error> {
        serde_json::from_value::<T>(object.clone()).map(|_| ())
    }
    match object["kind"].as_str() {
        Some("ManagedCluster") => typed::<ManagedCluster>(object),
        Some("KafkaTopicPolicy") => typed::<KafkaTopicPolicy>(object),
        Some("CrossClusterScalePolicy") => typed::<CrossClusterScalePolicy>(object),
        Some("FederatedKafkaTopic") => typed::<FederatedKafkaTopic>(object),
        Some("PrometheusFederation") => typed::<PrometheusFederation>(object),
        Some("FederatedResource") => typed::<FederatedResource>(object),
        _ => typed::<FederatedKafkaUser>(object),
    }
}

proptest! {
    #[test]
    fn v1alpha1_objects_come_back_unchanged_from_v1beta1(parts in alpha_parts()) {
        let alpha = parts.alpha();
        let beta = converted(alpha.clone(), BETA)?;
        prop_assert_eq!(&beta, &parts.beta());
        prop_assert_eq!(converted(beta, ALPHA)?, alpha);
    }

    #[test]
    fn v1beta1_objects_come_back_unchanged_from_v1alpha1(parts in beta_parts()) {
        let beta = parts.beta();
        let alpha = converted(beta.clone(), ALPHA)?;
        prop_assert_eq!(alpha["apiVersion"].as_str(), Some(ALPHA));
        prop_assert!(alpha["spec"].get("placement").is_none(), "{}", alpha);
        prop_assert!(alpha["spec"].get("userName").is_none(), "{}", alpha);
        prop_assert_eq!(converted(alpha, BETA)?, beta);
    }

    #[test]
    fn v1beta1_objects_v1alpha1_can_hold_convert_down_without_the_annotation(
        parts in plain_beta_parts(),
    ) {
        let alpha = converted(parts.beta(), ALPHA)?;
        prop_assert_eq!(lossless_annotation(&alpha), None);
        prop_assert_eq!(alpha, parts.alpha());
    }

    #[test]
    fn converting_to_the_version_an_object_has_changes_nothing(
        alpha in alpha_parts(),
        beta in beta_parts(),
    ) {
        prop_assert_eq!(converted(alpha.alpha(), ALPHA)?, alpha.alpha());
        prop_assert_eq!(converted(beta.beta(), BETA)?, beta.beta());
    }

    #[test]
    fn up_converted_v1alpha1_objects_decode_as_the_v1beta1_types(parts in alpha_parts()) {
        let beta = converted(parts.alpha(), BETA)?;
        prop_assert!(decodes(&beta).is_ok(), "{:?}: {}", decodes(&beta).err(), beta);
    }
}

/// Server-side apply sends the webhook partial objects: only the fields a manager owns, or
/// no spec at all. Each converts both ways, moving what is there and inventing nothing.
#[test]
fn partial_objects_as_server_side_apply_sends_them_convert_both_ways() {
    let kinds = [
        "ManagedCluster",
        CCSP,
        "FederatedKafkaTopic",
        "KafkaTopicPolicy",
        "PrometheusFederation",
        "FederatedResource",
        USER,
    ];
    for kind in kinds {
        for (from, to) in [(ALPHA, BETA), (BETA, ALPHA)] {
            let bare = json!({
                "apiVersion": from, "kind": kind,
                "metadata": { "name": "partial", "namespace": "shop" },
            });
            let out = convert(bare.clone(), to).unwrap_or_else(|e| panic!("{kind} {from}: {e}"));
            let mut expected = bare;
            expected["apiVersion"] = json!(to);
            assert_eq!(out, expected, "{kind} without a spec, {from} → {to}");
        }
    }
    // Only the moved fields.
    let topic = json!({
        "apiVersion": ALPHA, "kind": "FederatedKafkaTopic",
        "metadata": { "name": "orders", "namespace": "shop" },
        "spec": { "clusters": ["east"] },
    });
    let beta = convert(topic.clone(), BETA).unwrap();
    assert_eq!(
        beta["spec"],
        json!({ "placement": { "clusters": ["east"] } })
    );
    assert_eq!(convert(beta, ALPHA).unwrap(), topic);
    let user = json!({
        "apiVersion": BETA, "kind": USER,
        "metadata": { "name": "writer", "namespace": "shop" },
        "spec": { "userName": "orders-writer" },
    });
    let alpha = convert(user.clone(), ALPHA).unwrap();
    assert_eq!(alpha["spec"], json!({ "username": "orders-writer" }));
    assert_eq!(convert(alpha, BETA).unwrap(), user);
}
