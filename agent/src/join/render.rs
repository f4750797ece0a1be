//! The objects `accord-agent join` applies to a member cluster, rendered without I/O.
//!
//! The one source of truth for the agent's footprint: join applies it, `join --dry-run`
//! prints it, `deploy/manifests/accord-agent.yaml` is its output with default options
//! (`agent/tests/manifests.rs`), and the Helm chart `deploy/helm/accord-agent` is checked
//! against that file (`hub/tests/install_helm.rs`).

use std::collections::BTreeMap;

use accord_common::manifest::{
    self, container_port, container_security_context, http_probe, labels, metadata,
    pod_security_context, selector,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use serde_json::{Value, json};

use crate::cli::{DEFAULT_IDENTITY_NAMESPACE, DEFAULT_IDENTITY_SECRET};
use crate::enforce::federated_resource::AGGREGATE_TO_AGENT_LABEL;
use crate::enforce::kafka::DEFAULT_SECRET as DEFAULT_KAFKA_SECRET;
use crate::identity::{
    CA_CERT_KEY, CLUSTER_NAME_KEY, HUB_URL_KEY, TLS_CERT_KEY, TLS_KEY_KEY, TLS_SERVER_NAME_KEY,
};
use crate::lease::DEFAULT_LEASE_NAME;
use crate::persist::CONFIGMAP_NAME;
use accord_common::promfed::CONFIG_MAP_NAME as FEDERATION_CONFIG_MAP;

/// Name of the agent's ServiceAccount, roles, bindings and Deployment.
pub const AGENT_NAME: &str = "accord-agent";
/// Name of the ClusterRole (and its binding) that aggregates what the agent may deliver
/// for FederatedResources.
pub const DELIVERY_ROLE_NAME: &str = "accord-agent-delivery";
/// Name of the ClusterRole with the default set of kinds the agent may deliver.
pub const DELIVERY_DEFAULTS_ROLE_NAME: &str = "accord-agent-delivery-defaults";
/// Port of `/metrics`, `/healthz` and `/readyz` in the agent's pod.
pub const DEFAULT_HTTP_PORT: u16 = 8081;

/// What the rendered objects depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentManifestOptions {
    /// The agent's namespace: identity Secret, assignments ConfigMap, Lease.
    pub namespace: String,
    /// The agent's container image.
    pub image: String,
    /// Port of `/metrics`, `/healthz` and `/readyz`.
    pub http_port: u16,
    /// The Secret (in `namespace`) holding the member's Kafka connection.
    pub kafka_secret: String,
    /// Replicas of the agent Deployment: one is active (holds the Lease), the others
    /// stand by.
    pub replicas: u16,
}

impl Default for AgentManifestOptions {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_IDENTITY_NAMESPACE.to_owned(),
            image: default_image(),
            http_port: DEFAULT_HTTP_PORT,
            kafka_secret: DEFAULT_KAFKA_SECRET.to_owned(),
            replicas: 1,
        }
    }
}

/// `accord-io/accord-agent:<this version>`.
pub fn default_image() -> String {
    format!("accord-io/accord-agent:{}", env!("CARGO_PKG_VERSION"))
}

fn agent_labels() -> Value {
    labels(AGENT_NAME, "agent")
}

/// The agent's cluster-wide permissions: exactly what it calls.
///
/// - `apps` Deployments: `get`/`list`/`watch` (the reflector of the Deployments it manages)
///   and `patch` (server-side apply of `spec.replicas` with field manager `accord-agent`).
/// - HorizontalPodAutoscalers: read only — a member-side HPA on the same Deployment is
///   reported as `Conflict`, never fought.
/// - `events.k8s.io` Events: `create` and `patch` (kube-runtime's recorder creates an Event
///   and patches its series when it repeats).
/// - Services and Namespaces: read only — the federation sources (Services labelled
///   `accord.io/federation-source: "true"`, watched with that label selector) and the tenant
///   namespaces a PrometheusFederation selects by label.
///
/// - Nodes and Pods: `list` only — the capacity count (`crate::capacity`), every
///   `--capacity-interval`.
///
/// No ConfigMap and no Secret anywhere but in its own namespace (see
/// [`agent_namespace_rules`]).
pub fn agent_cluster_rules() -> Value {
    json!([
        { "apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch", "patch"] },
        { "apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["get", "list", "watch"] },
        { "apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"] },
        { "apiGroups": [""], "resources": ["services", "namespaces"], "verbs": ["get", "list", "watch"] },
        { "apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"] },
    ])
}

/// Every verb delivering an object takes: read and watch it (the drift watch), create,
/// server-side apply, delete (removal and pruning).
const DELIVERY_VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];

/// The ClusterRole the agent delivers FederatedResource manifests with: no rules of its
/// own, an aggregation of every ClusterRole labelled `accord.io/aggregate-to-agent: "true"`
/// (the Kubernetes controller manager fills its rules in, so the rendered object names
/// none: an apply of it must not take them over). Bound to the agent's
/// ServiceAccount by a ClusterRoleBinding of the same name.
pub fn delivery_role(labels: &Value) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": metadata(DELIVERY_ROLE_NAME, None, labels.clone()),
        "aggregationRule": {
            "clusterRoleSelectors": [{ "matchLabels": { AGGREGATE_TO_AGENT_LABEL: "true" } }],
        },
    })
}

/// What the agent may deliver by default (FederatedResource manifests), aggregated into
/// [`delivery_role`]: `get`, `list`, `watch`, `create`, `update`, `patch` and `delete` on
///
/// - core: ConfigMaps, Services, ServiceAccounts, PersistentVolumeClaims, Namespaces (also
///   the namespaces it creates for namespaced manifests, and deletes on removal when it
///   created them and they are empty); Pods read only (`get`, `list`, `watch`: to tell
///   whether a namespace it created is empty, and to deliver none);
/// - `apps`: Deployments, StatefulSets, DaemonSets, ReplicaSets;
/// - `batch`: Jobs, CronJobs;
/// - `apiextensions.k8s.io`: CustomResourceDefinitions;
/// - `networking.k8s.io`: Ingresses, NetworkPolicies;
/// - `policy`: PodDisruptionBudgets;
/// - `autoscaling`: HorizontalPodAutoscalers;
/// - core Secrets: the ones a FederatedResource names in `secretRefs` (their data comes on
///   the agent's stream from the management cluster). Delete ClusterRole
///   `accord-agent-delivery-defaults` and grant a narrower one labelled
///   `accord.io/aggregate-to-agent: "true"` where members must not hold that.
///
/// Not Roles or RoleBindings (granting those needs every permission they grant, by RBAC's
/// escalation rules).
/// Anything else is granted by a ClusterRole labelled `accord.io/aggregate-to-agent: "true"`:
/// custom resources of an operator's CRDs (e.g. a MySQLCluster) by the operator's own
/// ClusterRole with that label, with the same verbs. Discovery, which the agent asks which
/// resource serves a manifest's kind, needs no permission beyond the defaults every
/// authenticated user has.
pub fn delivery_default_rules() -> Value {
    json!([
        { "apiGroups": [""], "resources": ["configmaps", "services", "serviceaccounts", "persistentvolumeclaims", "namespaces"], "verbs": DELIVERY_VERBS },
        { "apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"] },
        { "apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"], "verbs": DELIVERY_VERBS },
        { "apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": DELIVERY_VERBS },
        { "apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": DELIVERY_VERBS },
        { "apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "networkpolicies"], "verbs": DELIVERY_VERBS },
        { "apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": DELIVERY_VERBS },
        { "apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": DELIVERY_VERBS },
        { "apiGroups": [""], "resources": ["secrets"], "verbs": DELIVERY_VERBS },
    ])
}

/// The ClusterRole of [`delivery_default_rules`], labelled to be aggregated into
/// [`delivery_role`].
fn delivery_defaults_role(labels: &Value) -> Value {
    let mut labels = labels.clone();
    labels[AGGREGATE_TO_AGENT_LABEL] = json!("true");
    manifest::role(
        DELIVERY_DEFAULTS_ROLE_NAME,
        None,
        &labels,
        delivery_default_rules(),
    )
}

/// The ClusterRoleBinding of [`delivery_role`] to the agent's ServiceAccount in `namespace`.
fn delivery_binding(namespace: &str, labels: &Value) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": metadata(DELIVERY_ROLE_NAME, None, labels.clone()),
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": DELIVERY_ROLE_NAME },
        "subjects": [{ "kind": "ServiceAccount", "name": AGENT_NAME, "namespace": namespace }],
    })
}

/// The agent's permissions in its own namespace, each limited to the one object it uses
/// where Kubernetes allows:
///
/// - ConfigMap `accord-agent-assignments`: the last applied assignments, kept so a restart
///   while the hub is unreachable changes nothing (`get`, and `patch` for server-side
///   apply; `create` for the first write, which cannot be limited to a name).
/// - Its identity Secret `identity_secret`: `get`, at every connection, and `patch` to store a renewed
///   certificate and key (renewal over the stream at two thirds of the certificate's life).
/// - ConfigMap `prometheus-federation`: the federation config it renders (read, server-side
///   apply, and delete once no PrometheusFederation uses it; its watch uses the matching
///   field selector). A PrometheusFederation that keeps its ConfigMap in another namespace
///   (`spec.target.configMapNamespace`) needs the same rule there
///   (`deploy/manifests/prometheus-federation.yaml` grants it in `monitoring`).
///
/// - The Kafka connection Secret `kafka_secret` (bootstrap servers, SASL credentials, CA):
///   read only, by name — `list` and `watch` with the matching field selector, so a
///   changed Secret reconnects without a restart.
///
/// - Lease `lease`: which replica is active; `get` and `update` (a replace carrying
///   the resourceVersion it read), `create` for the first replica ever (not limitable to a
///   name).
pub fn agent_namespace_rules(identity_secret: &str, kafka_secret: &str, lease: &str) -> Value {
    json!([
        { "apiGroups": [""], "resources": ["configmaps"], "resourceNames": [CONFIGMAP_NAME], "verbs": ["get", "patch"] },
        { "apiGroups": [""], "resources": ["configmaps"], "resourceNames": [FEDERATION_CONFIG_MAP], "verbs": ["get", "list", "watch", "patch", "delete"] },
        { "apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"] },
        { "apiGroups": [""], "resources": ["secrets"], "resourceNames": [identity_secret], "verbs": ["get", "patch"] },
        { "apiGroups": [""], "resources": ["secrets"], "resourceNames": [kafka_secret], "verbs": ["get", "list", "watch"] },
        { "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease], "verbs": ["get", "update"] },
        { "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"] },
    ])
}

/// The `accord-agent run` flags of the agent container (no `--kubeconfig`: in-cluster;
/// no `--kafka-secret` when it is the default).
pub fn agent_args(options: &AgentManifestOptions) -> Vec<String> {
    let ns = &options.namespace;
    let mut args = vec![
        "run".to_owned(),
        format!("--identity-secret={ns}/{DEFAULT_IDENTITY_SECRET}"),
        format!("--namespace={ns}"),
        format!("--http-addr=0.0.0.0:{}", options.http_port),
    ];
    if options.kafka_secret != DEFAULT_KAFKA_SECRET {
        args.push(format!("--kafka-secret={}", options.kafka_secret));
    }
    args
}

fn deployment(options: &AgentManifestOptions) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(AGENT_NAME, Some(&options.namespace), agent_labels()),
        "spec": {
            "replicas": options.replicas,
            "selector": { "matchLabels": selector(AGENT_NAME, "agent") },
            "template": {
                "metadata": { "labels": agent_labels() },
                "spec": {
                    "serviceAccountName": AGENT_NAME,
                    "securityContext": pod_security_context(false),
                    "containers": [{
                        "name": "agent",
                        "image": options.image,
                        "imagePullPolicy": "IfNotPresent",
                        "args": agent_args(options),
                        "ports": [container_port("http", options.http_port)],
                        "livenessProbe": http_probe("/healthz", 10, 3),
                        // Ready while standing by, and once the persisted assignments are
                        // loaded and enforced while active.
                        "readinessProbe": http_probe("/readyz", 5, 2),
                        "resources": {
                            "requests": { "cpu": "10m", "memory": "32Mi" },
                            "limits": { "cpu": "500m", "memory": "128Mi" },
                        },
                        "securityContext": container_security_context(),
                    }],
                },
            },
        },
    })
}

/// Every object of the agent's footprint, in the order join applies them: Namespace,
/// ServiceAccount, RBAC (the agent's own ClusterRole, the FederatedResource delivery
/// ClusterRoles, its namespace Role), and the Deployment last so its pod starts with everything in
/// place. The identity Secret is not among them (see [`identity_secret`]).
pub fn render(options: &AgentManifestOptions) -> Vec<Value> {
    let ns = options.namespace.as_str();
    let l = agent_labels();
    vec![
        manifest::namespace(ns),
        manifest::service_account(AGENT_NAME, ns, &l),
        manifest::role(AGENT_NAME, None, &l, agent_cluster_rules()),
        manifest::role_binding(AGENT_NAME, None, ns, &l),
        delivery_role(&l),
        delivery_defaults_role(&l),
        delivery_binding(ns, &l),
        manifest::role(
            AGENT_NAME,
            Some(ns),
            &l,
            agent_namespace_rules(
                DEFAULT_IDENTITY_SECRET,
                &options.kafka_secret,
                DEFAULT_LEASE_NAME,
            ),
        ),
        manifest::role_binding(AGENT_NAME, Some(ns), ns, &l),
        deployment(options),
    ]
}

/// What the agent chart takes from the code rather than copying it, as its
/// `templates/_generated.tpl`: the rules of the agent's ClusterRole
/// (`accord-agent.clusterRules`, [`agent_cluster_rules`]), of the default delivery
/// ClusterRole (`accord-agent.deliveryDefaultRules`, [`delivery_default_rules`]) and of its
/// namespace Role (`accord-agent.namespaceRules`, [`agent_namespace_rules`] with the chart's
/// `identitySecret`, `kafkaSecret` and `leaseName`). Regenerated by `ACCORD_UPDATE_CHARTS=1
/// cargo test -p accord-agent --lib join`.
pub fn helm_generated_template() -> Result<String, manifest::YamlError> {
    const IDENTITY: &str = "@IDENTITY@";
    const KAFKA: &str = "@KAFKA@";
    const LEASE: &str = "@LEASE@";
    manifest::helm_defines(
        "ACCORD_UPDATE_CHARTS=1 cargo test -p accord-agent --lib join",
        "agent/src/join/render.rs",
        &[
            ("accord-agent.clusterRules", agent_cluster_rules()),
            (
                "accord-agent.deliveryDefaultRules",
                delivery_default_rules(),
            ),
            (
                "accord-agent.namespaceRules",
                agent_namespace_rules(IDENTITY, KAFKA, LEASE),
            ),
        ],
        &[
            (IDENTITY, "{{ .Values.identitySecret }}"),
            (KAFKA, "{{ .Values.kafkaSecret }}"),
            (LEASE, "{{ .Values.leaseName }}"),
        ],
    )
}

/// What `join --dry-run` prints: a header, then the YAML of [`render`].
pub fn dry_run_output(options: &AgentManifestOptions) -> Result<String, manifest::YamlError> {
    let header = format!(
        "# Objects applied to a member cluster by `accord-agent join` (accord-agent {version}),\n\
         # printed by --dry-run. deploy/manifests/accord-agent.yaml is this output with default\n\
         # options. Not shown: the identity Secret {ns}/{secret}\n\
         # (hub URL, cluster name, hub CA, the agent's certificate and key), which join creates\n\
         # after registering with the hub.\n",
        version = env!("CARGO_PKG_VERSION"),
        ns = options.namespace,
        secret = DEFAULT_IDENTITY_SECRET,
    );
    Ok(header + &manifest::yaml_stream(&render(options))?)
}

/// What the identity Secret holds, in the layout `accord-agent run` reads.
#[derive(Clone, PartialEq, Eq)]
pub struct IdentityMaterial {
    /// The hub's gRPC URL.
    pub hub_url: String,
    /// The cluster's name on the hub.
    pub cluster: String,
    /// Name the hub's serving certificate must carry, when not the URL's host.
    pub server_name: Option<String>,
    /// The hub CA (PEM).
    pub ca_pem: String,
    /// The agent's client certificate (PEM).
    pub cert_pem: String,
    /// The agent's private key (PEM). Secret.
    pub key_pem: String,
}

/// The identity Secret `NAMESPACE/accord-agent-identity`.
pub fn identity_secret(namespace: &str, id: &IdentityMaterial) -> Secret {
    let mut data = BTreeMap::new();
    let mut put = |key: &str, value: &str| {
        data.insert(key.to_owned(), ByteString(value.as_bytes().to_vec()));
    };
    put(HUB_URL_KEY, &id.hub_url);
    put(CLUSTER_NAME_KEY, &id.cluster);
    put(CA_CERT_KEY, &id.ca_pem);
    put(TLS_CERT_KEY, &id.cert_pem);
    put(TLS_KEY_KEY, &id.key_pem);
    if let Some(name) = &id.server_name {
        put(TLS_SERVER_NAME_KEY, name);
    }
    let mut secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(DEFAULT_IDENTITY_SECRET, Some(namespace), agent_labels()),
        "type": "Opaque",
    }))
    .unwrap_or_default();
    secret.data = Some(data);
    secret
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Identity;

    #[test]
    fn the_identity_secret_is_what_run_reads() {
        let ca = accord_common::pki::HubCa::generate("test CA").unwrap();
        let csr = accord_common::pki::agent_csr("east").unwrap();
        let signed = ca
            .sign_agent_csr(&csr.csr_pem, "east", std::time::Duration::from_secs(3600))
            .unwrap();
        let material = IdentityMaterial {
            hub_url: "https://127.0.0.1:7443".into(),
            cluster: "east".into(),
            server_name: None,
            ca_pem: ca.cert_pem().to_owned(),
            cert_pem: signed.cert_pem.clone(),
            key_pem: csr.key_pem.clone(),
        };
        let secret = identity_secret("accord-system", &material);
        let identity = Identity::from_secret(&secret).unwrap();
        assert_eq!(identity.cluster, "east");
        assert_eq!(identity.hub_url, "https://127.0.0.1:7443");
        assert_eq!(identity.server_name, "localhost");
        assert_eq!(secret.metadata.namespace.as_deref(), Some("accord-system"));
        assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    }

    #[test]
    fn the_deployment_runs_the_agent_in_cluster_with_its_identity_secret() {
        let options = AgentManifestOptions {
            namespace: "accord".into(),
            image: "example/agent:1".into(),
            http_port: 9000,
            kafka_secret: "kafka-prod".into(),
            replicas: 2,
        };
        let objects = render(&options);
        let deployment = objects.last().unwrap();
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "example/agent:1");
        assert_eq!(deployment["spec"]["replicas"], 2);
        assert_eq!(
            container["args"],
            json!([
                "run",
                "--identity-secret=accord/accord-agent-identity",
                "--namespace=accord",
                "--http-addr=0.0.0.0:9000",
                "--kafka-secret=kafka-prod"
            ])
        );
        let role = objects
            .iter()
            .find(|o| o["kind"] == "Role")
            .expect("the namespace Role");
        assert!(
            role["rules"].as_array().unwrap().contains(&json!(
                { "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["kafka-prod"], "verbs": ["get", "list", "watch"] }
            )),
            "{role}"
        );
        assert_eq!(container["ports"][0]["containerPort"], 9000);
        for object in &objects[1..] {
            if object["kind"] != "ClusterRole" && object["kind"] != "ClusterRoleBinding" {
                assert_eq!(object["metadata"]["namespace"], "accord", "{object}");
            }
        }
    }

    #[test]
    fn the_delivery_role_aggregates_labelled_cluster_roles_and_is_bound_to_the_agent() {
        let objects = render(&AgentManifestOptions {
            namespace: "accord".into(),
            ..AgentManifestOptions::default()
        });
        let named = |kind: &str, name: &str| {
            objects
                .iter()
                .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("{kind} {name}"))
                .clone()
        };
        let role = named("ClusterRole", DELIVERY_ROLE_NAME);
        assert_eq!(
            role["aggregationRule"]["clusterRoleSelectors"],
            json!([{ "matchLabels": { "accord.io/aggregate-to-agent": "true" } }])
        );
        assert!(
            role.get("rules").is_none(),
            "the aggregation controller owns its rules: {role}"
        );
        let binding = named("ClusterRoleBinding", DELIVERY_ROLE_NAME);
        assert_eq!(binding["roleRef"]["name"], DELIVERY_ROLE_NAME);
        assert_eq!(
            binding["subjects"],
            json!([{ "kind": "ServiceAccount", "name": AGENT_NAME, "namespace": "accord" }])
        );
        let defaults = named("ClusterRole", DELIVERY_DEFAULTS_ROLE_NAME);
        assert_eq!(
            defaults["metadata"]["labels"]["accord.io/aggregate-to-agent"],
            "true"
        );
        // The roles come before the Deployment, so the agent starts with them.
        let position = |kind: &str, name: &str| {
            objects
                .iter()
                .position(|o| o["kind"] == kind && o["metadata"]["name"] == name)
                .unwrap()
        };
        assert!(
            position("ClusterRoleBinding", DELIVERY_ROLE_NAME) < position("Deployment", AGENT_NAME)
        );
    }

    #[test]
    fn the_default_delivery_set_grants_every_verb_on_common_kinds_and_reads_pods() {
        let rules = delivery_default_rules();
        let verbs = |group: &str, resource: &str| -> Vec<String> {
            rules
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["apiGroups"].as_array().unwrap().contains(&json!(group)))
                .filter(|r| {
                    r["resources"]
                        .as_array()
                        .unwrap()
                        .contains(&json!(resource))
                })
                .flat_map(|r| r["verbs"].as_array().unwrap().clone())
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        };
        let all = [
            "get", "list", "watch", "create", "update", "patch", "delete",
        ];
        for (group, resource) in [
            ("", "configmaps"),
            ("", "services"),
            ("", "serviceaccounts"),
            ("", "persistentvolumeclaims"),
            ("", "namespaces"),
            ("apps", "deployments"),
            ("apps", "statefulsets"),
            ("apps", "daemonsets"),
            ("apps", "replicasets"),
            ("batch", "jobs"),
            ("batch", "cronjobs"),
            ("apiextensions.k8s.io", "customresourcedefinitions"),
            ("networking.k8s.io", "ingresses"),
            ("networking.k8s.io", "networkpolicies"),
            ("policy", "poddisruptionbudgets"),
            ("autoscaling", "horizontalpodautoscalers"),
            ("", "secrets"),
        ] {
            assert_eq!(verbs(group, resource), all, "{resource}.{group}");
        }
        assert_eq!(verbs("", "pods"), ["get", "list", "watch"]);
        assert!(verbs("rbac.authorization.k8s.io", "roles").is_empty());
    }
}
