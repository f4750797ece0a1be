//! The example CRs of `deploy/examples/`, fitted to a sandbox: their cluster names
//! (`us-central1`, `eu-west1`) become the sandbox's members, Kafka and Prometheus examples
//! are kept only when the sandbox runs Kafka or Prometheus, the Deployments the scale
//! policies target are listed so they can be created in the members (unless a
//! FederatedResource example delivers them), the members are given the labels the
//! examples' selectors expect, the Secrets the FederatedResource examples refer to are
//! listed, and the PrometheusFederation is fitted to the sandbox's Prometheus servers and
//! described so that they can be started for it. Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use accord_crds::FederatedResourceSpec;
use accord_hub::distribution::select::ClusterInfo;
use accord_hub::federated_resource::plan::{key_of, ordered_manifests, overridden};
use anyhow::{Context as _, Result, bail, ensure};
use serde_json::{Value, json};

use crate::fleet::AGENT_NAMESPACE;
use crate::promfed::TENANT_JOB;

/// The example files, embedded so an installed binary needs no checkout.
pub const EXAMPLE_FILES: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/examples.rs"));

/// Kind of the scale policy.
pub const CCSP: &str = "CrossClusterScalePolicy";
/// Kind of the delivery of Kubernetes objects.
pub const FRES: &str = "FederatedResource";

/// Labels the examples take their clusters to have that no ManagedCluster example gives
/// them: `eu-west1` is the EU cluster, whose image the FederatedResource examples'
/// overrides (`clusterSelector: {matchLabels: {region: eu}}`) change. `us-central1`'s
/// labels come with its ManagedCluster example.
const EXAMPLE_CLUSTER_LABELS: &[(&str, &[(&str, &str)])] = &[("eu-west1", &[("region", "eu")])];

/// The key of a generated Secret when no manifest names one (`secretKeyRef.key`).
pub const DEFAULT_SECRET_KEY: &str = "password";

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
    /// Whether that Kafka takes SCRAM users and enforces ACLs (`--with-kafka-sasl`): the
    /// FederatedKafkaUser example is applied only then.
    pub kafka_users: bool,
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

/// A Secret the examples refer to (a FederatedResource's `secretRefs`), which the sandbox
/// creates on the management cluster with a random value per key before applying them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeededSecret {
    /// Namespace on the management cluster (the FederatedResource's).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its keys: those the delivered manifests read (`secretKeyRef.key`), else
    /// [`DEFAULT_SECRET_KEY`].
    pub keys: Vec<String>,
}

/// A FederatedResource example the sandbox waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceExample {
    /// Namespace on the management cluster.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The members it delivers to (its fitted `spec.placement.clusters`).
    pub clusters: Vec<String>,
}

/// The examples fitted to a sandbox.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Objects to apply to the management cluster, in order.
    pub objects: Vec<Value>,
    /// Namespaces those objects need on the management cluster.
    pub mgmt_namespaces: Vec<String>,
    /// Deployments to create in the members: the scale policies' targets that no
    /// FederatedResource example delivers.
    pub deployments: Vec<TargetDeployment>,
    /// Scale policy targets a FederatedResource example delivers (`namespace/name` of the
    /// FederatedResource): not created by the sandbox, or the delivery would find an object
    /// Accord did not create and report `Conflict`.
    pub delivered_targets: Vec<(TargetDeployment, String)>,
    /// Labels to add to members' ManagedClusters so that the examples' cluster selectors
    /// pick the member standing in for the cluster they mean (the member in `eu-west1`'s
    /// place is `region: eu`).
    pub cluster_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// Secrets to create on the management cluster before the examples that refer to them.
    pub secrets: Vec<NeededSecret>,
    /// FederatedResources that must be `Available` in every member they deliver to before
    /// the sandbox counts as ready.
    pub resources: Vec<ResourceExample>,
    /// Scale policies (`namespace`, `name`) whose placements must all be Synced before the
    /// sandbox counts as ready (the plain ones; metric-driven ones are reported only).
    pub wait_for: Vec<(String, String)>,
    /// The PrometheusFederation example, when kept: what the sandbox starts for it.
    pub federation: Option<FederationExample>,
    /// FederatedKafkaTopics (`namespace`, `name`, clusters) whose placements must all be
    /// Synced before the sandbox counts as ready.
    pub topics: Vec<(String, String, Vec<String>)>,
    /// FederatedKafkaUsers (`namespace`, `name`, clusters), likewise.
    pub users: Vec<(String, String, Vec<String>)>,
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
    /// Labels every member's ManagedCluster gets so that `spec.placement.clusterSelector`
    /// selects it.
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
                    let placement = &mut object["spec"]["placement"];
                    let clusters = fit_cluster_list(&placement["clusters"], fit, &rename);
                    placement["clusters"] = json!(clusters);
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
            FRES => {
                let (example, secrets) = fit_resource(&mut object, fit, &rename)?;
                plan.resources.push(example);
                for secret in secrets {
                    match plan
                        .secrets
                        .iter_mut()
                        .find(|s| s.namespace == secret.namespace && s.name == secret.name)
                    {
                        Some(known) => {
                            known.keys.extend(secret.keys);
                            known.keys.sort();
                            known.keys.dedup();
                        }
                        None => plan.secrets.push(secret),
                    }
                }
                true
            }
            "FederatedKafkaUser" => {
                if fit.kafka_users {
                    let placement = &mut object["spec"]["placement"];
                    let clusters = fit_cluster_list(&placement["clusters"], fit, &rename);
                    placement["clusters"] = json!(clusters);
                    let namespace = object["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("default")
                        .to_owned();
                    // The password Secret it names is made like a FederatedResource's
                    // (without one, the hub generates it).
                    let password = &object["spec"]["authentication"]["passwordSecretRef"];
                    if let (Some(name), Some(key)) =
                        (password["name"].as_str(), password["key"].as_str())
                    {
                        plan.secrets.push(NeededSecret {
                            namespace: namespace.clone(),
                            name: name.to_owned(),
                            keys: vec![key.to_owned()],
                        });
                    }
                    plan.users.push((
                        namespace,
                        object["metadata"]["name"]
                            .as_str()
                            .context("a FederatedKafkaUser example without a name")?
                            .to_owned(),
                        clusters,
                    ));
                }
                fit.kafka_users
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
            // Any other placed kind: its clusters become the sandbox's members. A kind whose
            // example needs more (a broker, a Secret, a server) has an arm of its own above.
            _ if object["spec"]["placement"]["clusters"].is_array() => {
                let placement = &mut object["spec"]["placement"];
                placement["clusters"] =
                    json!(fit_cluster_list(&placement["clusters"], fit, &rename));
                true
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
    plan.cluster_labels = member_labels(&renames, fit.members);
    drop_delivered_targets(&mut plan)?;
    Ok(plan)
}

/// Labels for each member from [`EXAMPLE_CLUSTER_LABELS`]: those of the example cluster
/// it stands in for; members beyond the examples' clusters get those of the last one, as
/// they get its share in the scale policies.
fn member_labels(
    renames: &[String],
    members: &[String],
) -> BTreeMap<String, BTreeMap<String, String>> {
    let labels_of = |cluster: &str| -> BTreeMap<String, String> {
        EXAMPLE_CLUSTER_LABELS
            .iter()
            .filter(|(c, _)| *c == cluster)
            .flat_map(|(_, labels)| labels.iter())
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    members
        .iter()
        .enumerate()
        .filter_map(|(i, member)| {
            let example = renames.get(i).or(renames.last())?;
            let labels = labels_of(example);
            (!labels.is_empty()).then(|| (member.clone(), labels))
        })
        .collect()
}

/// Each member's labels once the sandbox is up: its ManagedCluster example's, those
/// [`member_labels`] adds, and the federation's.
fn labels_once_up(plan: &Plan, cluster: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    for object in &plan.objects {
        if object["kind"] == "ManagedCluster" && object["metadata"]["name"] == cluster {
            for (k, v) in object["metadata"]["labels"]
                .as_object()
                .into_iter()
                .flatten()
            {
                labels.insert(k.clone(), v.as_str().unwrap_or_default().to_owned());
            }
        }
    }
    labels.extend(
        plan.cluster_labels
            .get(cluster)
            .cloned()
            .unwrap_or_default(),
    );
    if let Some(federation) = &plan.federation {
        labels.extend(federation.cluster_labels.clone());
    }
    labels
}

/// Moves the scale policies' targets that a FederatedResource example delivers (as the
/// hub plans its delivery: the same overrides, the members' labels once up) from
/// `deployments` to `delivered_targets`.
fn drop_delivered_targets(plan: &mut Plan) -> Result<()> {
    let mut delivered: BTreeMap<(String, String, String), String> = BTreeMap::new();
    for object in plan.objects.iter().filter(|o| o["kind"] == FRES) {
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default");
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let spec: FederatedResourceSpec = serde_json::from_value(object["spec"].clone())
            .with_context(|| format!("FederatedResource example {namespace}/{name}"))?;
        let manifests = ordered_manifests(&spec);
        for cluster in spec.placement.clusters.iter().flatten() {
            let info = ClusterInfo {
                labels: labels_once_up(plan, cluster),
                ..ClusterInfo::default()
            };
            let (out, _) =
                overridden(&spec, &manifests, cluster, Some(&info)).with_context(|| {
                    format!("FederatedResource example {namespace}/{name} in {cluster}")
                })?;
            for m in &out {
                let key = key_of(m, namespace);
                if key.kind == "Deployment" {
                    delivered.insert(
                        (cluster.clone(), key.namespace, key.name),
                        format!("{namespace}/{name}"),
                    );
                }
            }
        }
    }
    let (kept, dropped): (Vec<_>, Vec<_>) = std::mem::take(&mut plan.deployments)
        .into_iter()
        .map(|d| {
            let by = delivered
                .get(&(d.cluster.clone(), d.namespace.clone(), d.name.clone()))
                .cloned();
            (d, by)
        })
        .partition(|(_, by)| by.is_none());
    plan.deployments = kept.into_iter().map(|(d, _)| d).collect();
    plan.delivered_targets = dropped
        .into_iter()
        .filter_map(|(d, by)| Some((d, by?)))
        .collect();
    Ok(())
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
            Some("FederatedKafkaTopic" | "FederatedKafkaUser") => {
                let clusters = &object["spec"]["placement"]["clusters"];
                for cluster in clusters.as_array().into_iter().flatten() {
                    add(cluster.as_str());
                }
            }
            Some(FRES) => {
                let spec = &object["spec"];
                let overrides = spec["overrides"].as_array().into_iter().flatten();
                let lists = std::iter::once(&spec["placement"]["clusters"])
                    .chain(overrides.map(|o| &o["clusters"]));
                for cluster in lists.filter_map(Value::as_array).flatten() {
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
            entry["namespace"] = json!(extra_namespace(member));
        }
        fitted.push(entry);
    }
    object["spec"]["distribution"] = json!(fitted);
    Ok(true)
}

/// The namespace a member beyond the examples' clusters gets where the examples give each
/// cluster one of its own (`prod-us`, `prod-eu`): in scale policies and in the
/// FederatedResource overrides that set it, so that both name the same one.
pub fn extra_namespace(member: &str) -> String {
    format!("prod-{member}")
}

/// The JSON pointer of a manifest's namespace, which per-cluster overrides set.
const NAMESPACE_POINTER: &str = "/metadata/namespace";

/// Fits a FederatedResource to the sandbox: its placement's clusters and every override's clusters
/// renamed (an override left without a cluster is dropped); members beyond the example's
/// clusters are delivered to as the last one is: added to the overrides that name it, or,
/// where such an override sets the namespace, given one of their own that sets
/// [`extra_namespace`]. Returns what to wait for and the Secrets it refers to.
fn fit_resource(
    object: &mut Value,
    fit: &Fit<'_>,
    rename: &impl Fn(&str) -> Option<String>,
) -> Result<(ResourceExample, Vec<NeededSecret>)> {
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_owned();
    let name = object["metadata"]["name"]
        .as_str()
        .context("a FederatedResource example without a name")?
        .to_owned();
    let spec = &mut object["spec"];
    ensure!(
        spec["placement"]["clusters"].is_array(),
        "FederatedResource example {namespace}/{name}: the sandbox fits examples that name \
         their clusters (spec.placement.clusters), not a clusterSelector"
    );
    let last = spec["placement"]["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .rfind(|c| rename(c).is_some())
        .map(str::to_owned);
    let clusters = fit_cluster_list(&spec["placement"]["clusters"], fit, rename);
    let extras: Vec<&String> = fit
        .members
        .iter()
        .filter(|m| {
            !spec["placement"]["clusters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c.as_str().and_then(rename))
                .any(|c| &c == *m)
        })
        .collect();
    spec["placement"]["clusters"] = json!(clusters);

    let mut overrides = Vec::new();
    for o in spec["overrides"].as_array().into_iter().flatten() {
        let Some(names) = o["clusters"].as_array() else {
            overrides.push(o.clone());
            continue;
        };
        let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
        let mut renamed: Vec<String> = names.iter().filter_map(|c| rename(c)).collect();
        let like_last = last.as_deref().is_some_and(|l| names.contains(&l));
        let sets_namespace = o["jsonPatch"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|op| op["path"] == NAMESPACE_POINTER);
        let mut own = Vec::new();
        if like_last {
            if sets_namespace {
                for member in &extras {
                    let mut copy = o.clone();
                    copy["clusters"] = json!([member]);
                    for op in copy["jsonPatch"].as_array_mut().into_iter().flatten() {
                        if op["path"] == NAMESPACE_POINTER && op.get("value").is_some() {
                            op["value"] = json!(extra_namespace(member));
                        }
                    }
                    own.push(copy);
                }
            } else {
                renamed.extend(extras.iter().map(|m| (*m).clone()));
            }
        }
        if !renamed.is_empty() {
            let mut o = o.clone();
            o["clusters"] = json!(renamed);
            overrides.push(o);
        }
        overrides.extend(own);
    }
    if spec.get("overrides").is_some() {
        spec["overrides"] = json!(overrides);
    }

    let secrets = spec["secretRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .map(|secret| {
            let mut keys = BTreeSet::new();
            secret_keys(&spec["manifests"], secret, &mut keys);
            if keys.is_empty() {
                keys.insert(DEFAULT_SECRET_KEY.to_owned());
            }
            NeededSecret {
                namespace: namespace.clone(),
                name: secret.to_owned(),
                keys: keys.into_iter().collect(),
            }
        })
        .collect();
    Ok((
        ResourceExample {
            namespace,
            name,
            clusters,
        },
        secrets,
    ))
}

/// The keys of Secret `name` that `value` reads through `secretKeyRef`s.
fn secret_keys(value: &Value, name: &str, keys: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            if let Some(r) = map.get("secretKeyRef")
                && r["name"] == name
                && let Some(key) = r["key"].as_str()
            {
                keys.insert(key.to_owned());
            }
            for v in map.values() {
                secret_keys(v, name, keys);
            }
        }
        Value::Array(items) => {
            for v in items {
                secret_keys(v, name, keys);
            }
        }
        _ => {}
    }
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
        spec["placement"]["clusterSelector"]["matchExpressions"].is_null(),
        "PrometheusFederation example {name}: the sandbox fits \
         placement.clusterSelector.matchLabels only"
    );
    let cluster_labels: BTreeMap<String, String> =
        spec["placement"]["clusterSelector"]["matchLabels"]
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

    /// The plan for `names` without Kafka or Prometheus.
    fn default_plan(names: &[String]) -> Plan {
        plan(&Fit {
            members: names,
            ..Fit::default()
        })
        .unwrap()
    }

    fn target(cluster: &str, namespace: &str, name: &str) -> TargetDeployment {
        TargetDeployment {
            cluster: cluster.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn example<'p>(plan: &'p Plan, kind: &str, name: &str) -> &'p Value {
        plan.objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in {:?}", kinds(plan)))
    }

    /// The manifests the hub delivers of FederatedResource `name` to `cluster`, the
    /// members labelled as the sandbox labels them, and the overrides that applied.
    fn delivered(plan: &Plan, name: &str, cluster: &str) -> (Vec<Value>, Vec<i32>) {
        let spec: FederatedResourceSpec =
            serde_json::from_value(example(plan, FRES, name)["spec"].clone()).unwrap();
        let info = ClusterInfo {
            labels: labels_once_up(plan, cluster),
            ..ClusterInfo::default()
        };
        overridden(&spec, &ordered_manifests(&spec), cluster, Some(&info)).unwrap()
    }

    fn manifest<'m>(manifests: &'m [Value], kind: &str) -> &'m Value {
        manifests.iter().find(|m| m["kind"] == kind).unwrap()
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
        let plan = default_plan(&names);
        assert_eq!(
            kinds(&plan),
            [
                "CrossClusterScalePolicy \"webapp-global-scale\"",
                "FederatedResource \"mysql\"",
                "FederatedResource \"frontend\"",
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
        assert!(
            plan.deployments.is_empty(),
            "the FederatedResource example delivers the policy's frontend: {:?}",
            plan.deployments
        );
        assert_eq!(
            plan.delivered_targets,
            [
                (
                    target("member-1", "prod-us", "frontend"),
                    "default/frontend".into()
                ),
                (
                    target("member-2", "prod-eu", "frontend"),
                    "default/frontend".into()
                ),
            ]
        );
        assert_eq!(
            plan.wait_for,
            [("default".to_owned(), "webapp-global-scale".to_owned())]
        );
        assert_eq!(plan.mgmt_namespaces, ["databases"]);
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
        assert!(plan3.deployments.is_empty(), "{:?}", plan3.deployments);
        assert_eq!(plan3.delivered_targets.len(), 3);
    }

    #[test]
    fn kafka_and_prometheus_examples_come_with_their_flags() {
        let names = members(&["member-1", "member-2"]);
        let plan = plan(&Fit {
            members: &names,
            kafka: true,
            kafka_users: true,
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
        assert_eq!(
            topic["spec"]["placement"]["clusters"],
            json!(["member-1", "member-2"])
        );
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
        assert_eq!(plan.mgmt_namespaces, ["databases", "monitoring"]);
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
            spec["placement"]["clusterSelector"],
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
    fn a_placed_kind_without_an_arm_of_its_own_gets_the_members_and_anything_else_is_refused() {
        let names = members(&["member-1", "member-2"]);
        let fit = Fit {
            members: &names,
            ..Fit::default()
        };
        let new_kind = json!({
            "apiVersion": "accord.io/v1beta1",
            "kind": "FederatedKafkaGroup",
            "metadata": {"name": "g", "namespace": "team"},
            "spec": {"placement": {"clusters": ["us-central1"]}},
        });
        let plan = plan_objects(vec![new_kind], &fit).unwrap();
        let placed = example(&plan, "FederatedKafkaGroup", "g");
        assert_eq!(
            placed["spec"]["placement"]["clusters"],
            json!(["member-1", "member-2"])
        );
        assert!(plan.mgmt_namespaces.iter().any(|n| n == "team"));

        let unplaced = json!({"apiVersion": "v1", "kind": "Widget", "metadata": {"name": "w"}});
        let err = plan_objects(vec![unplaced], &fit).unwrap_err().to_string();
        assert!(err.contains("unexpected kind \"Widget\""), "{err}");
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
                "apiVersion": "accord.io/v1beta1",
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
            "apiVersion": "accord.io/v1beta1",
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

    #[test]
    fn the_frontend_example_goes_to_each_members_namespace_with_the_eu_image_in_the_eu_member() {
        let names = members(&["member-1", "member-2"]);
        let plan = default_plan(&names);
        let frontend = example(&plan, FRES, "frontend");
        let spec: FederatedResourceSpec = serde_json::from_value(frontend["spec"].clone()).unwrap();
        accord_crds::validate::Validate::validate(&spec).unwrap();
        assert_eq!(
            frontend["spec"]["placement"]["clusters"],
            json!(["member-1", "member-2"])
        );
        let overrides = &frontend["spec"]["overrides"];
        assert_eq!(overrides[0]["clusters"], json!(["member-1"]));
        assert_eq!(overrides[1]["clusters"], json!(["member-2"]));
        assert_eq!(
            overrides[2]["clusterSelector"],
            json!({"matchLabels": {"region": "eu"}}),
            "the EU override keeps its selector; the member in eu-west1's place is labelled"
        );
        assert_eq!(
            plan.cluster_labels,
            BTreeMap::from([(
                "member-2".to_owned(),
                BTreeMap::from([("region".to_owned(), "eu".to_owned())])
            )])
        );
        assert_eq!(
            plan.resources,
            [
                ResourceExample {
                    namespace: "databases".into(),
                    name: "mysql".into(),
                    clusters: names.clone(),
                },
                ResourceExample {
                    namespace: "default".into(),
                    name: "frontend".into(),
                    clusters: names.clone(),
                },
            ],
            "the sandbox waits for both in both members"
        );

        let image = |m: &[Value]| {
            manifest(m, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"].clone()
        };
        let (us, applied) = delivered(&plan, "frontend", "member-1");
        assert_eq!(applied, [0]);
        assert!(us.iter().all(|m| m["metadata"]["namespace"] == "prod-us"));
        assert_eq!(image(&us), "registry.example.com/frontend:1.4");
        let (eu, applied) = delivered(&plan, "frontend", "member-2");
        assert_eq!(applied, [1, 2]);
        assert!(eu.iter().all(|m| m["metadata"]["namespace"] == "prod-eu"));
        assert_eq!(image(&eu), "eu.registry.example.com/frontend:1.4");
    }

    #[test]
    fn a_member_beyond_the_examples_is_delivered_to_like_the_last_in_its_own_namespace() {
        let names = members(&["a", "b", "c"]);
        let plan = default_plan(&names);
        let frontend = example(&plan, FRES, "frontend");
        assert_eq!(
            frontend["spec"]["placement"]["clusters"],
            json!(["a", "b", "c"])
        );
        let overrides = frontend["spec"]["overrides"].as_array().unwrap();
        assert_eq!(overrides.len(), 4);
        assert_eq!(
            overrides[2],
            json!({"clusters": ["c"], "jsonPatch": [
                {"op": "add", "path": "/metadata/namespace", "value": "prod-c"}
            ]}),
            "an override of its own, right after the last cluster's"
        );
        let policy = example(&plan, CCSP, "webapp-global-scale");
        assert_eq!(
            policy["spec"]["distribution"][2]["namespace"], "prod-c",
            "the scale policy names the same namespace"
        );
        assert_eq!(extra_namespace("c"), "prod-c");
        assert_eq!(
            plan.cluster_labels.keys().collect::<Vec<_>>(),
            ["b", "c"],
            "labelled like the last example cluster"
        );
        let (delivered_c, applied) = delivered(&plan, "frontend", "c");
        assert_eq!(applied, [2, 3]);
        assert!(
            delivered_c
                .iter()
                .all(|m| m["metadata"]["namespace"] == "prod-c")
        );
        assert!(
            plan.delivered_targets
                .iter()
                .any(|(d, _)| *d == target("c", "prod-c", "frontend"))
        );
        let mysql = example(&plan, FRES, "mysql");
        assert_eq!(
            mysql["spec"]["placement"]["clusters"],
            json!(["a", "b", "c"])
        );
    }

    #[test]
    fn one_member_drops_the_override_of_the_cluster_it_lacks() {
        let names = members(&["solo"]);
        let plan = default_plan(&names);
        let frontend = example(&plan, FRES, "frontend");
        assert_eq!(frontend["spec"]["placement"]["clusters"], json!(["solo"]));
        let overrides = frontend["spec"]["overrides"].as_array().unwrap();
        assert_eq!(overrides.len(), 2, "{overrides:?}");
        assert_eq!(overrides[0]["clusters"], json!(["solo"]));
        assert!(overrides[1]["clusterSelector"].is_object());
        assert!(
            plan.cluster_labels.is_empty(),
            "no member stands for eu-west1"
        );
        assert_eq!(
            plan.delivered_targets,
            [(
                target("solo", "prod-us", "frontend"),
                "default/frontend".into()
            )]
        );
    }

    #[test]
    fn the_mysql_example_needs_its_credentials_and_runs_the_eu_image_in_the_eu_member() {
        let names = members(&["member-1", "member-2"]);
        let plan = default_plan(&names);
        assert_eq!(
            plan.secrets,
            [NeededSecret {
                namespace: "databases".into(),
                name: "mysql-credentials".into(),
                keys: vec!["password".into()],
            }],
            "the key the StatefulSet reads"
        );
        let mysql = example(&plan, FRES, "mysql");
        let spec: FederatedResourceSpec = serde_json::from_value(mysql["spec"].clone()).unwrap();
        accord_crds::validate::Validate::validate(&spec).unwrap();
        let image = |m: &[Value]| {
            manifest(m, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]["image"].clone()
        };
        let (us, applied) = delivered(&plan, "mysql", "member-1");
        assert!(applied.is_empty());
        assert_eq!(image(&us), "registry.example.com/mysql:8.4");
        let (eu, applied) = delivered(&plan, "mysql", "member-2");
        assert_eq!(applied, [0]);
        assert_eq!(image(&eu), "eu.registry.example.com/mysql:8.4");
    }

    #[test]
    fn a_secret_without_key_references_gets_the_default_key_and_two_references_merge() {
        let names = members(&["east"]);
        let resource = |name: &str, manifests: Value| {
            json!({
                "apiVersion": "accord.io/v1beta1",
                "kind": FRES,
                "metadata": {"name": name, "namespace": "apps"},
                "spec": {
                    "placement": {"clusters": ["east"]},
                    "secretRefs": [{"name": "creds"}],
                    "manifests": manifests,
                },
            })
        };
        let env = |key: &str| {
            json!([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": key},
                "spec": {"containers": [{"name": "c", "env": [{"name": "X",
                    "valueFrom": {"secretKeyRef": {"name": "creds", "key": key}}}]}]}}])
        };
        let plain = json!([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}]);
        let fit = Fit {
            members: &names,
            ..Fit::default()
        };
        let alone = plan_objects(vec![resource("a", plain)], &fit).unwrap();
        assert_eq!(alone.secrets[0].keys, [DEFAULT_SECRET_KEY]);
        let both = plan_objects(
            vec![resource("a", env("user")), resource("b", env("token"))],
            &fit,
        )
        .unwrap();
        assert_eq!(
            both.secrets,
            [NeededSecret {
                namespace: "apps".into(),
                name: "creds".into(),
                keys: vec!["token".into(), "user".into()],
            }]
        );
    }

    #[test]
    fn scale_policy_targets_are_created_unless_a_federated_resource_delivers_them_there() {
        let names = members(&["east"]);
        let policy = |name: &str, target: &str| {
            json!({
                "apiVersion": "accord.io/v1beta1",
                "kind": CCSP,
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                    "desiredReplicas": 2,
                    "distribution": [{"cluster": "east", "namespace": "shop", "weight": 1}],
                },
            })
        };
        let deployment = |name: &str| json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}});
        let delivery = json!({
            "apiVersion": "accord.io/v1beta1",
            "kind": FRES,
            "metadata": {"name": "apps", "namespace": "shop"},
            "spec": {
                "placement": {"clusters": ["east"]},
                // `web` lands in shop (the object's namespace), `api` is moved elsewhere.
                "manifests": [deployment("web"), deployment("api")],
                "overrides": [{"clusters": ["east"], "target": {"kind": "Deployment", "name": "api"},
                    "jsonPatch": [{"op": "add", "path": "/metadata/namespace", "value": "other"}]}],
            },
        });
        let plan = plan_objects(
            vec![
                policy("web-scale", "web"),
                policy("api-scale", "api"),
                policy("cart-scale", "cart"),
                delivery,
            ],
            &Fit {
                members: &names,
                ..Fit::default()
            },
        )
        .unwrap();
        assert_eq!(
            plan.deployments,
            [
                target("east", "shop", "api"),
                target("east", "shop", "cart")
            ]
        );
        assert_eq!(
            plan.delivered_targets,
            [(target("east", "shop", "web"), "shop/apps".into())]
        );
    }

    #[test]
    fn a_federated_resource_example_with_a_cluster_selector_is_refused_with_the_reason() {
        let names = members(&["east"]);
        let object = json!({
            "apiVersion": "accord.io/v1beta1",
            "kind": FRES,
            "metadata": {"name": "r", "namespace": "default"},
            "spec": {"placement": {"clusterSelector": {}}, "manifests": []},
        });
        let err = plan_objects(
            vec![object],
            &Fit {
                members: &names,
                ..Fit::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("name their clusters"), "{err}");
    }
}
