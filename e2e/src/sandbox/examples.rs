//! The example CRs of `deploy/examples/`, fitted to a sandbox: their cluster names
//! (`us-central1`, `eu-west1`) become the sandbox's members, Kafka and Prometheus examples
//! are kept only when the sandbox runs Kafka or Prometheus, the Deployments the scale
//! policies target are listed so they can be created in the members, and the
//! PrometheusFederation is fitted to the sandbox's Prometheus servers and described so that
//! they can be started for it. Pure: no I/O.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::{Value, json};

use crate::fleet::AGENT_NAMESPACE;
use crate::promfed::TENANT_JOB;

/// The example files, embedded so an installed binary needs no checkout.
pub const EXAMPLE_FILES: &[(&str, &str)] = &[
    (
        "crossclusterscalepolicy-autoscaling.yaml",
        include_str!("../../../deploy/examples/crossclusterscalepolicy-autoscaling.yaml"),
    ),
    (
        "crossclusterscalepolicy.yaml",
        include_str!("../../../deploy/examples/crossclusterscalepolicy.yaml"),
    ),
    (
        "federatedkafkatopic.yaml",
        include_str!("../../../deploy/examples/federatedkafkatopic.yaml"),
    ),
    (
        "kafkatopicpolicy.yaml",
        include_str!("../../../deploy/examples/kafkatopicpolicy.yaml"),
    ),
    (
        "managedcluster.yaml",
        include_str!("../../../deploy/examples/managedcluster.yaml"),
    ),
    (
        "prometheusfederation.yaml",
        include_str!("../../../deploy/examples/prometheusfederation.yaml"),
    ),
];

/// Kind of the scale policy.
pub const CCSP: &str = "CrossClusterScalePolicy";

/// The query the sandbox gives autoscaled examples: every target its Prometheus scrapes
/// and finds up counts for 250 requests/s.
pub const SANDBOX_QUERY: &str = "sum(up) * 250";

/// Scrape interval of the sandbox's federation: series show on the global Prometheus within
/// seconds (the example's 30 s is meant for real fleets).
pub const FEDERATION_SCRAPE_INTERVAL: &str = "5s";
/// Scrape timeout of the sandbox's federation (below the interval, as Prometheus requires).
pub const FEDERATION_SCRAPE_TIMEOUT: &str = "4s";
/// The job label the example's first matcher selects (`{job="prometheus"}`, a tenant
/// Prometheus scraping itself); the sandbox's tenant Prometheus servers call that job
/// [`TENANT_JOB`].
const EXAMPLE_TENANT_JOB: &str = r#"job="prometheus""#;

/// What the sandbox runs, as far as the examples care.
#[derive(Debug, Clone, Default)]
pub struct Fit<'a> {
    /// Member cluster names, in order.
    pub members: &'a [String],
    /// Whether each member runs a Kafka broker.
    pub kafka: bool,
    /// The Prometheus autoscaling queries go to, when the sandbox runs Prometheus.
    pub prometheus_url: Option<&'a str>,
}

/// A Deployment a scale policy targets in one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetDeployment {
    /// Member cluster.
    pub cluster: String,
    /// Namespace in the member.
    pub namespace: String,
    /// Deployment name.
    pub name: String,
}

/// The examples fitted to a sandbox.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Objects to apply to the management cluster, in order.
    pub objects: Vec<Value>,
    /// Namespaces those objects need on the management cluster.
    pub mgmt_namespaces: Vec<String>,
    /// Deployments to create in the members.
    pub deployments: Vec<TargetDeployment>,
    /// Scale policies (`namespace`, `name`) whose placements must all be Synced before the
    /// sandbox counts as ready (the plain ones; metric-driven ones are reported only).
    pub wait_for: Vec<(String, String)>,
    /// The PrometheusFederation example, when kept: what the sandbox starts for it.
    pub federation: Option<FederationExample>,
    /// FederatedKafkaTopics (`namespace`, `name`, clusters) whose placements must all be
    /// Synced before the sandbox counts as ready.
    pub topics: Vec<(String, String, Vec<String>)>,
}

/// What the sandbox starts for the PrometheusFederation example: in every member a tenant
/// Prometheus per tenant namespace and a federation Prometheus whose reloader watches the
/// ConfigMap namespace; every member labelled so the example selects it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FederationExample {
    /// Namespace of the PrometheusFederation on the management cluster.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The tenant namespaces it federates (`spec.tenantSelector.namespaces`).
    pub tenants: Vec<String>,
    /// Where the agent writes ConfigMap `prometheus-federation` in each member
    /// (`spec.target.configMapNamespace`, else the agent's namespace).
    pub config_map_namespace: String,
    /// Labels every member's ManagedCluster gets so that `spec.clusterSelector` selects it.
    pub cluster_labels: BTreeMap<String, String>,
    /// Whether the global tier is enabled (`spec.global.enabled`).
    pub global: bool,
}

/// Fits every embedded example to the sandbox.
pub fn plan(fit: &Fit<'_>) -> Result<Plan> {
    let mut objects = Vec::new();
    for (file, yaml) in EXAMPLE_FILES {
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(yaml).with_context(|| format!("parsing {file}"))?;
        objects.extend(docs.into_iter().filter(|d| !d.is_null()));
    }
    plan_objects(objects, fit)
}

/// Fits the given example objects to the sandbox.
pub fn plan_objects(objects: Vec<Value>, fit: &Fit<'_>) -> Result<Plan> {
    let renames = cluster_names(&objects);
    let rename = |name: &str| -> Option<String> {
        let index = renames.iter().position(|n| n == name)?;
        fit.members.get(index).cloned()
    };
    let mut plan = Plan::default();
    for mut object in objects {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let keep = match kind.as_str() {
            CCSP => fit_scale_policy(&mut object, fit, &rename)?,
            "ManagedCluster" => match object["metadata"]["name"].as_str().and_then(rename) {
                Some(name) => {
                    object["metadata"]["name"] = json!(name);
                    // The sandbox sets each member's real federation endpoint itself.
                    if let Some(spec) = object["spec"].as_object_mut() {
                        spec.remove("federationEndpoint");
                    }
                    true
                }
                None => false,
            },
            "FederatedKafkaTopic" => {
                if fit.kafka {
                    let clusters = fit_cluster_list(&object["spec"]["clusters"], fit, &rename);
                    object["spec"]["clusters"] = json!(clusters);
                    // One broker per member: a replication factor above 1 cannot be met.
                    object["spec"]["replicationFactor"] = json!(1);
                    plan.topics.push((
                        object["metadata"]["namespace"]
                            .as_str()
                            .unwrap_or("default")
                            .to_owned(),
                        object["metadata"]["name"]
                            .as_str()
                            .context("a FederatedKafkaTopic example without a name")?
                            .to_owned(),
                        clusters,
                    ));
                }
                fit.kafka
            }
            "KafkaTopicPolicy" => fit.kafka,
            "PrometheusFederation" => {
                if fit.prometheus_url.is_some() {
                    ensure!(
                        plan.federation.is_none(),
                        "more than one PrometheusFederation example: the sandbox runs one \
                         federation Prometheus per member"
                    );
                    plan.federation = Some(fit_federation(&mut object)?);
                }
                fit.prometheus_url.is_some()
            }
            other => bail!("example of unexpected kind {other:?}"),
        };
        if !keep {
            continue;
        }
        if let Some(ns) = object["metadata"]["namespace"].as_str()
            && ns != "default"
            && !plan.mgmt_namespaces.iter().any(|n| n == ns)
        {
            plan.mgmt_namespaces.push(ns.to_owned());
        }
        if kind == CCSP {
            let ns = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned();
            let name = object["metadata"]["name"]
                .as_str()
                .context("a scale policy example without a name")?
                .to_owned();
            let target = object["spec"]["targetRef"]["name"]
                .as_str()
                .with_context(|| format!("scale policy {name} without spec.targetRef.name"))?
                .to_owned();
            for entry in object["spec"]["distribution"]
                .as_array()
                .into_iter()
                .flatten()
            {
                plan.deployments.push(TargetDeployment {
                    cluster: entry["cluster"].as_str().unwrap_or_default().to_owned(),
                    namespace: entry["namespace"].as_str().unwrap_or(&ns).to_owned(),
                    name: target.clone(),
                });
            }
            if object["spec"]["autoscaling"].is_null() {
                plan.wait_for.push((ns, name));
            }
        }
        plan.objects.push(object);
    }
    Ok(plan)
}

/// Distinct cluster names the examples use, in order of first mention.
fn cluster_names(objects: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut add = |name: Option<&str>| {
        if let Some(name) = name
            && !names.iter().any(|n| n == name)
        {
            names.push(name.to_owned());
        }
    };
    for object in objects {
        match object["kind"].as_str() {
            Some(CCSP) => {
                for entry in object["spec"]["distribution"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    add(entry["cluster"].as_str());
                }
            }
            Some("FederatedKafkaTopic") => {
                for cluster in object["spec"]["clusters"].as_array().into_iter().flatten() {
                    add(cluster.as_str());
                }
            }
            Some("ManagedCluster") => add(object["metadata"]["name"].as_str()),
            _ => {}
        }
    }
    names
}

/// Renames a policy's clusters; members beyond the example's clusters get an entry like
/// the last one. Returns whether the policy is kept.
fn fit_scale_policy(
    object: &mut Value,
    fit: &Fit<'_>,
    rename: &impl Fn(&str) -> Option<String>,
) -> Result<bool> {
    let autoscaling = !object["spec"]["autoscaling"].is_null();
    if autoscaling {
        let Some(url) = fit.prometheus_url else {
            return Ok(false);
        };
        object["spec"]["autoscaling"]["metric"]["prometheus"]["url"] = json!(url);
        // The sandbox serves no checkout traffic; a series its Prometheus does have (one
        // `up` per scrape target, standing for 250 requests/s) shows autoscaling at work.
        object["spec"]["autoscaling"]["metric"]["prometheus"]["query"] = json!(SANDBOX_QUERY);
    }
    let Some(entries) = object["spec"]["distribution"].as_array() else {
        return Ok(true);
    };
    let mut fitted: Vec<Value> = Vec::new();
    for entry in entries {
        if let Some(cluster) = entry["cluster"].as_str().and_then(rename) {
            let mut entry = entry.clone();
            entry["cluster"] = json!(cluster);
            fitted.push(entry);
        }
    }
    let template = entries
        .last()
        .cloned()
        .unwrap_or_else(|| json!({"weight": 1}));
    for member in fit.members.iter().skip(fitted.len()) {
        let mut entry = json!({"cluster": member, "weight": template["weight"].clone()});
        if template["namespace"].is_string() {
            entry["namespace"] = json!(format!("prod-{member}"));
        }
        fitted.push(entry);
    }
    object["spec"]["distribution"] = json!(fitted);
    Ok(true)
}

/// Fits a PrometheusFederation to the sandbox: a short scrape interval, and matchers that
/// select what the sandbox's tenant Prometheus servers serve (their self-scrape job is
/// called [`TENANT_JOB`], not `prometheus`); returns what the sandbox must start for it.
fn fit_federation(object: &mut Value) -> Result<FederationExample> {
    let name = object["metadata"]["name"]
        .as_str()
        .context("a PrometheusFederation example without a name")?
        .to_owned();
    let spec = &mut object["spec"];
    spec["scrapeInterval"] = json!(FEDERATION_SCRAPE_INTERVAL);
    spec["scrapeTimeout"] = json!(FEDERATION_SCRAPE_TIMEOUT);
    let tenant_job = format!(r#"job="{TENANT_JOB}""#);
    let mut matchers: Vec<String> = spec["match"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|m| m.replace(EXAMPLE_TENANT_JOB, &tenant_job))
        .collect();
    if !matchers.iter().any(|m| m.contains(&tenant_job)) {
        matchers.push(format!("{{{tenant_job}}}"));
    }
    spec["match"] = json!(matchers);

    let tenants: Vec<String> = spec["tenantSelector"]["namespaces"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    ensure!(
        !tenants.is_empty(),
        "PrometheusFederation example {name} names no tenant namespaces \
         (spec.tenantSelector.namespaces): the sandbox starts a tenant Prometheus per namespace"
    );
    ensure!(
        spec["clusterSelector"]["matchExpressions"].is_null(),
        "PrometheusFederation example {name}: the sandbox fits clusterSelector.matchLabels only"
    );
    let cluster_labels: BTreeMap<String, String> = spec["clusterSelector"]["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    Ok(FederationExample {
        namespace: object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_owned(),
        name,
        tenants,
        config_map_namespace: object["spec"]["target"]["configMapNamespace"]
            .as_str()
            .unwrap_or(AGENT_NAMESPACE)
            .to_owned(),
        cluster_labels,
        global: object["spec"]["global"]["enabled"].as_bool() == Some(true),
    })
}

fn fit_cluster_list(
    list: &Value,
    fit: &Fit<'_>,
    rename: &impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut clusters: Vec<String> = list
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str().and_then(rename))
        .collect();
    for member in fit.members {
        if !clusters.contains(member) {
            clusters.push(member.clone());
        }
    }
    clusters
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    fn kinds(plan: &Plan) -> Vec<String> {
        plan.objects
            .iter()
            .map(|o| format!("{} {}", o["kind"].as_str().unwrap(), o["metadata"]["name"]))
            .collect()
    }

    #[test]
    fn every_example_file_is_embedded() {
        let dir = crate::binaries::repo_root().join("deploy/examples");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml"))
            .collect();
        on_disk.sort();
        let embedded: Vec<&str> = EXAMPLE_FILES.iter().map(|(n, _)| *n).collect();
        assert_eq!(on_disk, embedded);
    }

    #[test]
    fn example_clusters_become_the_sandbox_members() {
        let names = members(&["member-1", "member-2"]);
        let plan = plan(&Fit {
            members: &names,
            ..Fit::default()
        })
        .unwrap();
        assert_eq!(
            kinds(&plan),
            [
                "CrossClusterScalePolicy \"webapp-global-scale\"",
                "ManagedCluster \"member-1\""
            ]
        );
        let policy = &plan.objects[0];
        assert_eq!(
            policy["spec"]["distribution"],
            json!([
                {"cluster": "member-1", "namespace": "prod-us", "weight": 60},
                {"cluster": "member-2", "namespace": "prod-eu", "weight": 40, "minReplicas": 1},
            ])
        );
        assert_eq!(
            plan.deployments,
            [
                TargetDeployment {
                    cluster: "member-1".into(),
                    namespace: "prod-us".into(),
                    name: "frontend".into()
                },
                TargetDeployment {
                    cluster: "member-2".into(),
                    namespace: "prod-eu".into(),
                    name: "frontend".into()
                },
            ]
        );
        assert_eq!(
            plan.wait_for,
            [("default".to_owned(), "webapp-global-scale".to_owned())]
        );
        assert!(plan.mgmt_namespaces.is_empty());
        assert_eq!(plan.federation, None, "no Prometheus, no federation");
        assert!(plan.topics.is_empty(), "no Kafka, no topic to wait for");
    }

    #[test]
    fn one_member_keeps_only_its_share_and_extra_members_get_one() {
        let one = members(&["solo"]);
        let plan1 = plan(&Fit {
            members: &one,
            ..Fit::default()
        })
        .unwrap();
        assert_eq!(
            plan1.objects[0]["spec"]["distribution"],
            json!([{"cluster": "solo", "namespace": "prod-us", "weight": 60}])
        );

        let three = members(&["a", "b", "c"]);
        let plan3 = plan(&Fit {
            members: &three,
            ..Fit::default()
        })
        .unwrap();
        assert_eq!(
            plan3.objects[0]["spec"]["distribution"][2],
            json!({"cluster": "c", "namespace": "prod-c", "weight": 40})
        );
        assert_eq!(plan3.deployments.len(), 3);
    }

    #[test]
    fn kafka_and_prometheus_examples_come_with_their_flags() {
        let names = members(&["member-1", "member-2"]);
        let plan = plan(&Fit {
            members: &names,
            kafka: true,
            prometheus_url: Some("http://127.0.0.1:9090"),
        })
        .unwrap();
        let kinds = kinds(&plan);
        for expected in [
            "CrossClusterScalePolicy \"checkout-autoscaled\"",
            "FederatedKafkaTopic \"fraud-transaction-events\"",
            "KafkaTopicPolicy \"pci-topics\"",
            "PrometheusFederation \"team-a\"",
        ] {
            assert!(kinds.iter().any(|k| k == expected), "{kinds:?}");
        }
        let autoscaled = plan
            .objects
            .iter()
            .find(|o| o["metadata"]["name"] == "checkout-autoscaled")
            .unwrap();
        assert_eq!(
            autoscaled["spec"]["autoscaling"]["metric"]["prometheus"]["url"],
            "http://127.0.0.1:9090"
        );
        assert_eq!(
            autoscaled["spec"]["autoscaling"]["metric"]["prometheus"]["query"], SANDBOX_QUERY,
            "a query the sandbox's Prometheus can answer"
        );
        let topic = plan
            .objects
            .iter()
            .find(|o| o["kind"] == "FederatedKafkaTopic")
            .unwrap();
        assert_eq!(topic["spec"]["clusters"], json!(["member-1", "member-2"]));
        assert_eq!(topic["spec"]["replicationFactor"], 1);
        assert_eq!(
            plan.topics,
            [(
                "default".to_owned(),
                "fraud-transaction-events".to_owned(),
                names.clone()
            )],
            "the sandbox waits for the example topic in every member"
        );
        assert_eq!(plan.mgmt_namespaces, ["monitoring"]);
        // Only the plain policy gates readiness; the metric-driven one is reported.
        assert_eq!(plan.wait_for.len(), 1);
        assert!(
            plan.deployments.iter().any(|d| d.name == "checkout"
                && d.namespace == "default"
                && d.cluster == "member-2")
        );
    }

    #[test]
    fn the_federation_example_scrapes_what_the_sandbox_serves_every_five_seconds() {
        let names = members(&["member-1", "member-2"]);
        let plan = plan(&Fit {
            members: &names,
            prometheus_url: Some("http://127.0.0.1:9090"),
            ..Fit::default()
        })
        .unwrap();
        let federation = plan
            .objects
            .iter()
            .find(|o| o["kind"] == "PrometheusFederation")
            .unwrap();
        let spec = &federation["spec"];
        assert_eq!(spec["scrapeInterval"], FEDERATION_SCRAPE_INTERVAL);
        assert_eq!(spec["scrapeTimeout"], FEDERATION_SCRAPE_TIMEOUT);
        assert_eq!(
            spec["match"],
            json!([r#"{job="tenant"}"#, r#"{__name__=~"job:.*"}"#])
        );
        assert_eq!(
            spec["clusterSelector"],
            json!({"matchLabels": {"tier": "prod"}}),
            "the selector is kept; the members are labelled to match it"
        );
        assert_eq!(spec["global"]["enabled"], true);
        assert_eq!(
            plan.federation,
            Some(FederationExample {
                namespace: "monitoring".into(),
                name: "team-a".into(),
                tenants: vec!["team-a".into()],
                config_map_namespace: "monitoring".into(),
                cluster_labels: [("tier".to_owned(), "prod".to_owned())].into(),
                global: true,
            })
        );
    }

    #[test]
    fn a_federation_example_the_sandbox_cannot_serve_is_refused_with_the_reason() {
        let names = members(&["member-1"]);
        let fit = Fit {
            members: &names,
            prometheus_url: Some("http://127.0.0.1:9090"),
            ..Fit::default()
        };
        let federation = |spec: Value| {
            json!({
                "apiVersion": "accord.io/v1alpha1",
                "kind": "PrometheusFederation",
                "metadata": {"name": "f", "namespace": "monitoring"},
                "spec": spec,
            })
        };
        let by_label = federation(json!({
            "tenantSelector": {"labelSelector": {"matchLabels": {"team": "a"}}},
            "match": ["up"],
        }));
        let err = plan_objects(vec![by_label], &fit).unwrap_err().to_string();
        assert!(err.contains("names no tenant namespaces"), "{err}");

        let twice = federation(json!({"tenantSelector": {"namespaces": ["a"]}, "match": ["up"]}));
        let err = plan_objects(vec![twice.clone(), twice], &fit)
            .unwrap_err()
            .to_string();
        assert!(err.contains("more than one PrometheusFederation"), "{err}");
    }

    #[test]
    fn a_federation_without_a_target_namespace_writes_to_the_agents_and_gets_the_tenant_job() {
        let names = members(&["member-1"]);
        let object = json!({
            "apiVersion": "accord.io/v1alpha1",
            "kind": "PrometheusFederation",
            "metadata": {"name": "f", "namespace": "monitoring"},
            "spec": {"tenantSelector": {"namespaces": ["a"]}, "match": ["up"]},
        });
        let plan = plan_objects(
            vec![object],
            &Fit {
                members: &names,
                prometheus_url: Some("http://127.0.0.1:9090"),
                ..Fit::default()
            },
        )
        .unwrap();
        let federation = plan.federation.unwrap();
        assert_eq!(federation.config_map_namespace, AGENT_NAMESPACE);
        assert!(federation.cluster_labels.is_empty());
        assert!(!federation.global);
        assert_eq!(
            plan.objects[0]["spec"]["match"],
            json!(["up", r#"{job="tenant"}"#])
        );
    }
}
