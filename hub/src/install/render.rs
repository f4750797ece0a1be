//! The objects `accord-hub install` applies, rendered from [`InstallOptions`] without any I/O.
//!
//! This is the one source of truth: the CLI applies it, `--dry-run` prints it,
//! `deploy/manifests/accord-hub.yaml` is its output with default options, and the Helm
//! chart in `deploy/helm/accord-hub` is checked against it.

use accord_crds::{GROUP, all_crds};
use serde_json::{Value, json};

use accord_common::manifest::{
    self, container_port as port, container_security_context, http_probe as probe, labels,
    metadata, namespace, pod_security_context, selector,
};

use super::options::{
    ETCD_CLIENT_PORT, ETCD_METRICS_PORT, ETCD_NAME, ETCD_PEER_PORT, ETCD_SECRET_CA,
    ETCD_SECRET_CERT, ETCD_SECRET_KEY, ETCD_SECRET_MOUNT, ETCD_SECRET_PASSWORD,
    ETCD_SECRET_USERNAME, EtcdMode, HUB_METRICS_SERVICE, HUB_NAME, InstallOptions, Resources,
};
use crate::kinds::WEBHOOKS;
use crate::pki::DEFAULT_CA_SECRET_NAME as CA_SECRET_NAME;
use crate::webhook::CONFIGURATION_NAME as WEBHOOK_CONFIGURATION;
use accord_common::promfed::GLOBAL_CONFIG_MAP_NAME;

/// Where the evaluation etcd keeps its data (a PersistentVolumeClaim).
const ETCD_DATA_DIR: &str = "/var/lib/etcd";

/// Rendering failed: a value could not be turned into JSON or YAML. Never caused by the
/// options; it would be a bug.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A CRD could not be converted to JSON.
    #[error("converting CRD {name} to JSON")]
    Crd {
        /// The CRD's name.
        name: String,
        /// What serde_json said.
        #[source]
        source: serde_json::Error,
    },
    /// The objects could not be written as YAML.
    #[error("writing the objects as YAML")]
    Yaml(#[source] serde_saphyr::SerializeError),
}

/// Every object of an installation, in the order it is applied: the Namespace, the CRDs,
/// RBAC, the evaluation etcd (with `--with-etcd`), the Services, the Deployment so that its
/// pods start with everything they need in place, and the ValidatingWebhookConfiguration
/// last, without a `caBundle` (the installer applies it again with the hub CA once that
/// exists, and every hub replica keeps it there: see [`crate::webhook::ca_bundle`]).
pub fn render(options: &InstallOptions) -> Result<Vec<Value>, RenderError> {
    let ns = options.namespace.as_str();
    let mut objects = vec![namespace(ns)];
    objects.extend(crds(options, None)?);
    objects.extend([
        service_account(ns),
        cluster_role(),
        cluster_role_binding(ns),
        role(ns),
        role_binding(ns),
    ]);
    if let EtcdMode::Bundled {
        image,
        storage_size,
    } = &options.etcd
    {
        objects.extend([
            etcd_service(ns),
            etcd_network_policy(ns),
            etcd_stateful_set(options, image, storage_size),
        ]);
    }
    objects.extend([grpc_service(options), metrics_service(options)]);
    if options.replicas > 1 {
        objects.push(pod_disruption_budget(ns));
    }
    objects.push(deployment(options));
    objects.push(webhook_configuration(options, None));
    Ok(objects)
}

/// Every Accord CRD, its `spec.conversion` naming the hub's conversion webhook as the
/// validating webhooks are named (the Service `accord-hub` in the installed namespace and
/// webhook port, or `--webhook-url`), trusted by `ca_pem` (the hub CA) when given: the
/// installer applies them again with it once the CA exists, and every hub replica keeps it
/// there ([`crate::webhook::ca_bundle`]).
pub fn crds(options: &InstallOptions, ca_pem: Option<&str>) -> Result<Vec<Value>, RenderError> {
    let service = json!({
        "service": {
            "name": HUB_NAME,
            "namespace": options.namespace,
            "port": options.webhook_port,
            "path": accord_crds::versions::CONVERSION_PATH,
        },
    });
    let client_config = client_config(service, options, ca_pem);
    all_crds()
        .into_iter()
        .map(|crd| {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let mut object =
                serde_json::to_value(&crd).map_err(|source| RenderError::Crd { name, source })?;
            object["spec"]["conversion"]["webhook"]["clientConfig"] = client_config.clone();
            Ok(object)
        })
        .collect()
}

/// The annotation that keeps Helm from deleting a CRD (and with it every object of its kind)
/// on `helm uninstall`; the chart's CRD templates carry it, `accord-hub install` has no use
/// for it.
pub const HELM_KEEP_ANNOTATION: &str = "helm.sh/resource-policy";

/// Placeholders [`helm_crd_templates`] writes and then replaces by template expressions.
const HELM_NAMESPACE: &str = "ACCORD_HELM_NAMESPACE";
const HELM_WEBHOOK_PORT: &str = "ACCORD_HELM_WEBHOOK_PORT";
const HELM_CA_BUNDLE: &str = "ACCORD_HELM_CA_BUNDLE";

/// Every Accord CRD as a template of the hub's Helm chart (file name, text), committed under
/// `deploy/helm/accord-hub/templates/crds/`. Templates rather than Helm's `crds/` directory,
/// which Helm never upgrades and cannot template: the conversion webhook names the Service
/// in the release's namespace and `webhookPort`, with the chart's `caBundle` (as the
/// ValidatingWebhookConfiguration does), and a `helm upgrade` brings new CRD versions.
/// Rendered with `crds.install=false` they are left out; kept on `helm uninstall`.
pub fn helm_crd_templates() -> Result<Vec<(String, String)>, RenderError> {
    let client_config = json!({
        "caBundle": HELM_CA_BUNDLE,
        "service": {
            "name": HUB_NAME,
            "namespace": HELM_NAMESPACE,
            "port": HELM_WEBHOOK_PORT,
            "path": accord_crds::versions::CONVERSION_PATH,
        },
    });
    all_crds()
        .into_iter()
        .map(|crd| {
            let file = accord_crds::crd_file_name(&crd);
            let name = crd.metadata.name.clone().unwrap_or_default();
            let mut object =
                serde_json::to_value(&crd).map_err(|source| RenderError::Crd { name, source })?;
            object["metadata"]["annotations"] = json!({ HELM_KEEP_ANNOTATION: "keep" });
            object["spec"]["conversion"]["webhook"]["clientConfig"] = client_config.clone();
            let body = serde_saphyr::to_string(&object).map_err(RenderError::Yaml)?;
            let mut text = String::from(
                "{{- /* Generated by `ACCORD_UPDATE_CHARTS=1 cargo test -p accord-hub --test \
                 install_helm`; do not edit. */ -}}\n\
                 {{- if .Values.crds.install }}\n\
                 {{- $caBundle := include \"accord-hub.caBundle\" . }}\n",
            );
            for line in body.lines() {
                let indent = &line[..line.len() - line.trim_start().len()];
                match line.trim_start() {
                    l if l == format!("caBundle: {HELM_CA_BUNDLE}") => {
                        text.push_str(&format!(
                            "{{{{- with $caBundle }}}}\n{indent}caBundle: {{{{ . }}}}\n{{{{- end }}}}\n"
                        ));
                    }
                    l if l == format!("namespace: {HELM_NAMESPACE}") => text.push_str(&format!(
                        "{indent}namespace: {{{{ include \"accord-hub.namespace\" . }}}}\n"
                    )),
                    l if l == format!("port: {HELM_WEBHOOK_PORT}") => text.push_str(&format!(
                        "{indent}port: {{{{ .Values.webhookPort }}}}\n"
                    )),
                    _ => {
                        text.push_str(line);
                        text.push('\n');
                    }
                }
            }
            text.push_str("{{- end }}\n");
            Ok((file, text))
        })
        .collect()
}

/// What the hub chart takes from the code rather than copying it, as its
/// `templates/_generated.tpl`: `accord-hub.clusterRules` (the ClusterRole's rules,
/// [`hub_cluster_rules`]) and `accord-hub.webhooks` (every admission webhook,
/// [`webhook_configuration`], with the chart's namespace, port and CA bundle). A new kind's
/// permissions and webhook reach the chart by regenerating it (`ACCORD_UPDATE_CHARTS=1 cargo
/// test -p accord-hub --test install_helm`), never by hand.
pub fn helm_generated_template() -> Result<String, RenderError> {
    const NAMESPACE: &str = "@NAMESPACE@";
    const PORT: &str = "@PORT@";
    const CA: &str = "@CA@";
    let mut webhooks = webhook_configuration(&InstallOptions::default(), None)["webhooks"].take();
    for webhook in webhooks.as_array_mut().into_iter().flatten() {
        let config = &mut webhook["clientConfig"];
        config["service"]["namespace"] = json!(NAMESPACE);
        config["service"]["port"] = json!(PORT);
        config["caBundle"] = json!(CA);
    }
    let text = accord_common::manifest::helm_defines(
        "ACCORD_UPDATE_CHARTS=1 cargo test -p accord-hub --test install_helm",
        "hub_cluster_rules and webhook_configuration (hub/src/install/render.rs)",
        &[
            ("accord-hub.clusterRules", hub_cluster_rules()),
            ("accord-hub.webhooks", webhooks),
        ],
        &[
            (NAMESPACE, "{{ include \"accord-hub.namespace\" . }}"),
            (PORT, "{{ .Values.webhookPort }}"),
        ],
    )
    .map_err(RenderError::Yaml)?;
    // The CA bundle only when the chart has one: its whole line becomes a `with`.
    let lines: Vec<String> = text
        .lines()
        .map(
            |line| match line.find("caBundle: ").filter(|_| line.contains(CA)) {
                Some(at) => {
                    let indent = &line[..at];
                    format!(
                        "{indent}{{{{- with (include \"accord-hub.caBundle\" .) }}}}\n\
                     {indent}caBundle: {{{{ . }}}}\n{indent}{{{{- end }}}}"
                    )
                }
                None => line.to_owned(),
            },
        )
        .collect();
    Ok(lines.join("\n") + "\n")
}

/// A webhook `clientConfig` naming the Service in `service_config`, with `ca_pem` as its
/// `caBundle` when given, turned into a URL one with `--webhook-url`.
fn client_config(
    mut service_config: Value,
    options: &InstallOptions,
    ca_pem: Option<&str>,
) -> Value {
    if let Some(ca) = ca_pem {
        // Bytes, which the API (and k8s-openapi) write as base64.
        service_config["caBundle"] =
            serde_json::to_value(k8s_openapi::ByteString(ca.as_bytes().to_vec()))
                .unwrap_or_default();
    }
    match &options.webhook_url {
        Some(base) => url_client_config(&service_config, base),
        None => service_config,
    }
}

/// The objects as one multi-document YAML stream, each document opened by `---`.
pub fn render_yaml(objects: &[Value]) -> Result<String, RenderError> {
    manifest::yaml_stream(objects).map_err(RenderError::Yaml)
}

/// What `accord-hub install --dry-run` prints: a header saying what this is and how to use
/// it, then [`render_yaml`] of [`render`].
pub fn dry_run_output(options: &InstallOptions) -> Result<String, RenderError> {
    let header = format!(
        "# Objects applied by `accord-hub install` (accord-hub {version}), printed by --dry-run.\n\
         # deploy/manifests/accord-hub.yaml is this output with default options; regenerate it with\n\
         #   cargo run -q -p accord-hub -- install --dry-run --with-etcd > deploy/manifests/accord-hub.yaml\n\
         # Apply with `kubectl apply --server-side --field-manager={manager} -f FILE`. The hub creates\n\
         # its CA Secret on first start and sets it as the caBundle of the ValidatingWebhookConfiguration;\n\
         # `accord-hub token create` then prints a join command.\n",
        version = env!("CARGO_PKG_VERSION"),
        manager = accord_crds::HUB_FIELD_MANAGER,
    );
    Ok(header + &render_yaml(&render(options)?)?)
}

fn hub_labels() -> Value {
    labels(HUB_NAME, "hub")
}

fn etcd_labels() -> Value {
    labels(ETCD_NAME, "etcd")
}

fn service_account(ns: &str) -> Value {
    manifest::service_account(HUB_NAME, ns, &hub_labels())
}

/// Plural names of every Accord resource, from the CRDs themselves.
pub fn accord_plurals() -> Vec<String> {
    all_crds()
        .into_iter()
        .map(|crd| crd.spec.names.plural)
        .collect()
}

/// The hub's cluster-wide permissions: exactly what it calls.
///
/// - Every Accord kind: `list`/`watch` (its controllers' reflectors), `get`, `patch`
///   (server-side apply of ManagedClusters; finalizers are added and removed with JSON
///   patches) and `patch` of `/status` (status is written with merge patches, only when
///   it changed). The hub never replaces whole objects, so there is no `update`.
/// - ManagedClusters: `create`, because registering an agent server-side-applies a
///   ManagedCluster that may not exist yet, which the API server authorises as a create.
/// - `events.k8s.io` Events: `create` and `patch` (kube-runtime's recorder creates an Event
///   and patches its series when it repeats). The hub writes no `core/v1` Events.
///
/// - Namespaces: `list`/`watch`, so the admission webhook knows each namespace's labels
///   for the KafkaTopicPolicies' `namespaceSelector` (every replica runs that reflector).
/// - The ValidatingWebhookConfiguration `accord-hub`, by name: `get`/`list`/`watch` (the
///   replicas watch it with a `metadata.name` field selector) and `patch`, to keep its
///   `caBundle` at the hub CA. Never `create` or `delete`: installing it is the installer's.
/// - Accord's own CustomResourceDefinitions, by name, the same verbs: to keep the
///   `caBundle` of their conversion webhook at the hub CA. No other CRD.
///
/// - Secrets: `list`/`watch`: every replica follows them to deliver those a
///   FederatedResource names in `secretRefs` and to derive FederatedKafkaUsers' SCRAM
///   credentials (their data goes only to the agents' streams; the hub's etcd holds a
///   hash). `create`, for a FederatedKafkaUser without `passwordSecretRef`: the hub
///   creates the Secret with a generated password beside it (owned by it). Never `update`,
///   `patch` or `delete`: a Secret the hub did not create is never changed.
///
/// - ControllerRevisions (`apps`): `create`, `list`, `patch` and `delete`: the revision
///   history of objects that roll out progressively (one per revision, owned by the
///   object, at most ten kept; the outcome noted when the rollout ends).
///
/// - The fleet console (`--console-addr`): `list`/`watch` of core Events (the Events the
///   hub reported, for an object's timeline), and `create` of TokenReviews and
///   SubjectAccessReviews, to check each console user's own token and what it may read.
///
/// No Leases (leader election uses etcd).
pub fn hub_cluster_rules() -> Value {
    let plurals = accord_plurals();
    let crd_names: Vec<String> = all_crds()
        .into_iter()
        .filter_map(|crd| crd.metadata.name)
        .collect();
    let status: Vec<String> = plurals.iter().map(|p| format!("{p}/status")).collect();
    json!([
        { "apiGroups": [GROUP], "resources": plurals, "verbs": ["get", "list", "watch", "patch"] },
        { "apiGroups": [GROUP], "resources": ["managedclusters"], "verbs": ["create"] },
        { "apiGroups": [GROUP], "resources": status, "verbs": ["patch"] },
        { "apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"] },
        { "apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"] },
        { "apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch", "create"] },
        { "apiGroups": ["apps"], "resources": ["controllerrevisions"], "verbs": ["create", "list", "patch", "delete"] },
        { "apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"] },
        { "apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"] },
        { "apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"] },
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations"],
            "resourceNames": [WEBHOOK_CONFIGURATION],
            "verbs": ["get", "list", "watch", "patch"],
        },
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "resourceNames": crd_names,
            "verbs": ["get", "list", "watch", "patch"],
        },
    ])
}

fn cluster_role() -> Value {
    manifest::role(HUB_NAME, None, &hub_labels(), hub_cluster_rules())
}

fn cluster_role_binding(ns: &str) -> Value {
    manifest::role_binding(HUB_NAME, None, ns, &hub_labels())
}

/// The hub's permissions in its own namespace (which is also its federation namespace:
/// `serve --federation-namespace` defaults to `--namespace`):
///
/// - read its CA Secret (by name), and create it on first start (a create cannot be
///   limited to a name). `accord-hub token create` run in the hub's pod needs the same read.
/// - the global federation tier's ConfigMap, by name: `get`, and `list`/`watch` (the
///   leader watches it with a `metadata.name` field selector for the reloader's answers),
///   `patch` (server-side apply) and `delete` (when no PrometheusFederation enables the
///   global tier); `create`, because an apply that creates it is authorised as a create.
pub fn hub_namespace_rules() -> Value {
    json!([
        { "apiGroups": [""], "resources": ["secrets"], "resourceNames": [CA_SECRET_NAME], "verbs": ["get"] },
        { "apiGroups": [""], "resources": ["secrets"], "verbs": ["create"] },
        { "apiGroups": [""], "resources": ["configmaps"], "resourceNames": [GLOBAL_CONFIG_MAP_NAME], "verbs": ["get", "list", "watch", "patch", "delete"] },
        { "apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"] },
    ])
}

fn role(ns: &str) -> Value {
    manifest::role(HUB_NAME, Some(ns), &hub_labels(), hub_namespace_rules())
}

fn role_binding(ns: &str) -> Value {
    manifest::role_binding(HUB_NAME, Some(ns), ns, &hub_labels())
}

fn resources(r: &Resources) -> Value {
    json!({
        "requests": { "cpu": r.cpu_request, "memory": r.memory_request },
        "limits": { "cpu": r.cpu_limit, "memory": r.memory_limit },
    })
}

fn service_port(name: &str, port: u16) -> Value {
    json!({ "name": name, "port": port, "targetPort": name, "protocol": "TCP" })
}

/// `accord-hub serve` flags of the hub container.
pub fn hub_args(options: &InstallOptions) -> Vec<String> {
    let mut args = vec![
        "serve".to_owned(),
        format!("--etcd-endpoints={}", options.etcd_endpoints().join(",")),
        format!("--etcd-prefix={}", options.etcd_prefix),
        format!("--namespace={}", options.namespace),
        format!("--grpc-addr=0.0.0.0:{}", options.grpc_port),
        format!("--http-addr=0.0.0.0:{}", options.http_port),
        format!("--webhook-addr=0.0.0.0:{}", options.webhook_port),
        // Expanded by the kubelet from the env var below (downward API).
        "--replica-name=$(POD_NAME)".to_owned(),
    ];
    if !options.tls_sans.is_empty() {
        args.push(format!("--tls-san={}", options.tls_sans.join(",")));
    }
    if let Some(client) = &options.etcd_client {
        let file = |key: &str| format!("{ETCD_SECRET_MOUNT}/{key}");
        if client.ca {
            args.push(format!("--etcd-ca={}", file(ETCD_SECRET_CA)));
        }
        if client.client_certificate {
            args.push(format!("--etcd-cert={}", file(ETCD_SECRET_CERT)));
            args.push(format!("--etcd-key={}", file(ETCD_SECRET_KEY)));
        }
        if client.auth {
            args.push(format!(
                "--etcd-password-file={}",
                file(ETCD_SECRET_PASSWORD)
            ));
        }
    }
    args
}

/// The hub container's environment: its pod name and, with etcd authentication, the
/// etcd user name from the etcd Secret (a name, not a secret, but kept beside the
/// password so both change together).
fn hub_env(options: &InstallOptions) -> Value {
    let mut env = vec![json!({
        "name": "POD_NAME",
        "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } },
    })];
    if let Some(client) = options.etcd_client.as_ref().filter(|c| c.auth) {
        env.push(json!({
            "name": "ACCORD_ETCD_USERNAME",
            "valueFrom": {
                "secretKeyRef": { "name": client.secret_name, "key": ETCD_SECRET_USERNAME },
            },
        }));
    }
    Value::Array(env)
}

fn deployment(options: &InstallOptions) -> Value {
    let ns = options.namespace.as_str();
    let mut deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(HUB_NAME, Some(ns), hub_labels()),
        "spec": {
            "replicas": options.replicas,
            "selector": { "matchLabels": selector(HUB_NAME, "hub") },
            "template": {
                "metadata": { "labels": hub_labels() },
                "spec": {
                    "serviceAccountName": HUB_NAME,
                    "securityContext": pod_security_context(false),
                    // Replicas on different nodes, so one node failing leaves agents a hub.
                    "topologySpreadConstraints": [{
                        "maxSkew": 1,
                        "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": { "matchLabels": selector(HUB_NAME, "hub") },
                    }],
                    "containers": [{
                        "name": "hub",
                        "image": options.image,
                        "imagePullPolicy": options.image_pull_policy,
                        "args": hub_args(options),
                        "env": hub_env(options),
                        "ports": [
                            port("grpc", options.grpc_port),
                            port("http", options.http_port),
                            port("webhook", options.webhook_port),
                        ],
                        // Connecting to etcd and loading the CA come before /healthz answers.
                        "startupProbe": probe("/healthz", 2, 30),
                        "livenessProbe": probe("/healthz", 10, 3),
                        "readinessProbe": probe("/readyz", 5, 2),
                        "resources": resources(&options.resources),
                        "securityContext": container_security_context(),
                    }],
                },
            },
        },
    });
    if let Some(client) = &options.etcd_client {
        let spec = &mut deployment["spec"]["template"]["spec"];
        spec["volumes"] = json!([{
            "name": "etcd-client",
            "secret": { "secretName": client.secret_name },
        }]);
        spec["containers"][0]["volumeMounts"] = json!([{
            "name": "etcd-client",
            "mountPath": ETCD_SECRET_MOUNT,
            "readOnly": true,
        }]);
    }
    deployment
}

fn grpc_service(options: &InstallOptions) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(HUB_NAME, Some(&options.namespace), hub_labels()),
        "spec": {
            "type": options.service_type.to_string(),
            "selector": selector(HUB_NAME, "hub"),
            "ports": [
                service_port("grpc", options.grpc_port),
                service_port("webhook", options.webhook_port),
            ],
        },
    })
}

/// The ValidatingWebhookConfiguration `accord-hub`: CREATE and UPDATE of each kind in
/// [`WEBHOOKS`] (FederatedKafkaTopic, PrometheusFederation, FederatedResource) go to the
/// hub's webhook on the kind's path through the Service `accord-hub` (or, with
/// `--webhook-url`, at that URL: see [`url_client_config`]), trusted by `ca_pem` (the hub
/// CA) when given. `failurePolicy: Ignore`: a hub that is down must not block the API, and
/// the controllers check again before acting. No side effects a dry run could trigger (the
/// audit Event is skipped for dry runs); 5 s at most.
pub fn webhook_configuration(options: &InstallOptions, ca_pem: Option<&str>) -> Value {
    use kube::Resource as _;
    let version = accord_crds::FederatedResource::version(&());
    let webhooks: Vec<Value> = WEBHOOKS
        .iter()
        .map(|webhook| {
            let service = json!({
                "service": {
                    "name": HUB_NAME,
                    "namespace": options.namespace,
                    "port": options.webhook_port,
                    "path": webhook.path,
                },
            });
            let client_config = client_config(service, options, ca_pem);
            validating_webhook(webhook.name, client_config, &version, webhook.resource)
        })
        .collect();
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": metadata(WEBHOOK_CONFIGURATION, None, hub_labels()),
        "webhooks": webhooks,
    })
}

/// One webhook of the configuration: CREATE and UPDATE of one namespaced Accord resource,
/// ignored when the hub is down, free of side effects, 5 s at most.
fn validating_webhook(name: &str, client_config: Value, version: &str, resource: &str) -> Value {
    json!({
        "name": name,
        "clientConfig": client_config,
        "rules": [{
            "apiGroups": [GROUP],
            "apiVersions": [version],
            "operations": ["CREATE", "UPDATE"],
            "resources": [resource],
            "scope": "Namespaced",
        }],
        "failurePolicy": "Ignore",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
    })
}

/// A webhook's `clientConfig` that names the Service (`service` with its `path`) turned into
/// one that names `base_url` (`https://HOST[:PORT]`) with the same path, the `caBundle`
/// kept: for a hub the API server cannot reach through a Service, such as one running as a
/// local process beside the API server.
pub fn url_client_config(service_config: &Value, base_url: &str) -> Value {
    let path = service_config["service"]["path"].as_str().unwrap_or("/");
    let mut config = json!({ "url": format!("{}{path}", base_url.trim_end_matches('/')) });
    if let Some(ca) = service_config.get("caBundle") {
        config["caBundle"] = ca.clone();
    }
    config
}

/// `/metrics`, `/healthz`, `/readyz`: in-cluster only, whatever the gRPC Service's type.
fn metrics_service(options: &InstallOptions) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(HUB_METRICS_SERVICE, Some(&options.namespace), hub_labels()),
        "spec": {
            "type": "ClusterIP",
            "selector": selector(HUB_NAME, "hub"),
            "ports": [service_port("http", options.http_port)],
        },
    })
}

fn pod_disruption_budget(ns: &str) -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(HUB_NAME, Some(ns), hub_labels()),
        "spec": {
            "maxUnavailable": 1,
            "selector": { "matchLabels": selector(HUB_NAME, "hub") },
        },
    })
}

fn etcd_service(ns: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(ETCD_NAME, Some(ns), etcd_labels()),
        "spec": {
            // Headless: the StatefulSet's pod gets a stable DNS name for its peer URL.
            "clusterIP": "None",
            "publishNotReadyAddresses": true,
            "selector": selector(ETCD_NAME, "etcd"),
            "ports": [
                service_port("client", ETCD_CLIENT_PORT),
                service_port("peer", ETCD_PEER_PORT),
            ],
        },
    })
}

/// Only the hub's pods may reach the evaluation etcd, which has no authentication.
fn etcd_network_policy(ns: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(ETCD_NAME, Some(ns), etcd_labels()),
        "spec": {
            "podSelector": { "matchLabels": selector(ETCD_NAME, "etcd") },
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [{ "podSelector": { "matchLabels": selector(HUB_NAME, "hub") } }],
                "ports": [{ "port": ETCD_CLIENT_PORT, "protocol": "TCP" }],
            }],
        },
    })
}

fn etcd_stateful_set(options: &InstallOptions, image: &str, storage_size: &str) -> Value {
    let ns = options.namespace.as_str();
    let member = format!("{ETCD_NAME}-0");
    let peer_url = format!("http://{member}.{ETCD_NAME}.{ns}.svc:{ETCD_PEER_PORT}");
    let probe = |path: &str| {
        json!({
            "httpGet": { "path": path, "port": "metrics" },
            "periodSeconds": 10,
            "timeoutSeconds": 2,
            "failureThreshold": 3,
        })
    };
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(ETCD_NAME, Some(ns), etcd_labels()),
        "spec": {
            "serviceName": ETCD_NAME,
            // One member: for evaluation. Production runs its own etcd (--etcd-endpoints).
            "replicas": 1,
            "selector": { "matchLabels": selector(ETCD_NAME, "etcd") },
            "template": {
                "metadata": { "labels": etcd_labels() },
                "spec": {
                    "securityContext": pod_security_context(true),
                    "containers": [{
                        "name": "etcd",
                        "image": image,
                        "imagePullPolicy": options.image_pull_policy,
                        "command": ["/usr/local/bin/etcd"],
                        "args": [
                            format!("--name={member}"),
                            format!("--data-dir={ETCD_DATA_DIR}/data"),
                            format!("--listen-client-urls=http://0.0.0.0:{ETCD_CLIENT_PORT}"),
                            format!("--advertise-client-urls=http://{member}.{ETCD_NAME}.{ns}.svc:{ETCD_CLIENT_PORT}"),
                            format!("--listen-peer-urls=http://0.0.0.0:{ETCD_PEER_PORT}"),
                            format!("--initial-advertise-peer-urls={peer_url}"),
                            format!("--initial-cluster={member}={peer_url}"),
                            format!("--listen-metrics-urls=http://0.0.0.0:{ETCD_METRICS_PORT}"),
                            "--auto-compaction-mode=periodic".to_owned(),
                            "--auto-compaction-retention=1h".to_owned(),
                        ],
                        "ports": [
                            port("client", ETCD_CLIENT_PORT),
                            port("peer", ETCD_PEER_PORT),
                            port("metrics", ETCD_METRICS_PORT),
                        ],
                        "livenessProbe": probe("/livez"),
                        "readinessProbe": probe("/readyz"),
                        "resources": resources(&options.etcd_resources),
                        "securityContext": container_security_context(),
                        "volumeMounts": [{ "name": "data", "mountPath": ETCD_DATA_DIR }],
                    }],
                },
            },
            "volumeClaimTemplates": [{
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": { "name": "data" },
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": { "requests": { "storage": storage_size } },
                },
            }],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::options::ServiceType;
    use accord_common::manifest::NON_ROOT_ID;

    fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    }

    fn kinds(objects: &[Value]) -> Vec<String> {
        objects
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect()
    }

    fn external() -> InstallOptions {
        InstallOptions {
            etcd: EtcdMode::External {
                endpoints: vec![
                    "https://etcd-0.example:2379".into(),
                    "https://etcd-1.example:2379".into(),
                ],
            },
            ..Default::default()
        }
    }

    /// Every string anywhere in a JSON value.
    fn strings(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::String(s) => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
            Value::Object(o) => o.values().for_each(|v| strings(v, out)),
            _ => {}
        }
    }

    #[test]
    fn an_installation_has_the_crds_rbac_services_and_deployment_in_apply_order() {
        let objects = render(&external()).unwrap();
        let crds: Vec<String> = all_crds()
            .into_iter()
            .map(|c| format!("CustomResourceDefinition/{}", c.metadata.name.unwrap()))
            .collect();
        let mut expected = vec!["Namespace/accord-system".to_owned()];
        expected.extend(crds);
        expected.extend(
            [
                "ServiceAccount/accord-hub",
                "ClusterRole/accord-hub",
                "ClusterRoleBinding/accord-hub",
                "Role/accord-hub",
                "RoleBinding/accord-hub",
                "Service/accord-hub",
                "Service/accord-hub-metrics",
                "Deployment/accord-hub",
                "ValidatingWebhookConfiguration/accord-hub",
            ]
            .map(String::from),
        );
        assert_eq!(kinds(&objects), expected);
    }

    #[test]
    fn the_crds_are_exactly_those_of_the_crds_crate() {
        let objects = render(&external()).unwrap();
        let rendered: Vec<&Value> = objects
            .iter()
            .filter(|o| o["kind"] == "CustomResourceDefinition")
            .collect();
        let mut expected: Vec<Value> = all_crds()
            .iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .collect();
        assert_eq!(rendered.len(), all_crds().len());
        // Only the conversion webhook's clientConfig depends on the options.
        for (crd, rendered) in expected.iter_mut().zip(&rendered) {
            crd["spec"]["conversion"]["webhook"]["clientConfig"] =
                rendered["spec"]["conversion"]["webhook"]["clientConfig"].clone();
        }
        assert_eq!(rendered.into_iter().cloned().collect::<Vec<_>>(), expected);
        // With the default options they are the crds crate's, as `accord-hub crds` prints.
        let defaults = crds(&InstallOptions::default(), None).unwrap();
        let plain: Vec<Value> = all_crds()
            .iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .collect();
        assert_eq!(defaults, plain);
    }

    #[test]
    fn the_conversion_webhook_is_named_like_the_validating_ones() {
        let mut options = external();
        options.namespace = "federation".into();
        let ca = "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n";
        for crd in crds(&options, Some(ca)).unwrap() {
            let config = &crd["spec"]["conversion"]["webhook"]["clientConfig"];
            assert_eq!(config["service"]["namespace"], "federation");
            assert_eq!(config["service"]["name"], HUB_NAME);
            assert_eq!(config["service"]["port"], options.webhook_port);
            assert_eq!(config["service"]["path"], "/convert");
            assert!(config["caBundle"].as_str().is_some_and(|b| !b.is_empty()));
        }
        options.webhook_url = Some("https://127.0.0.1:9443".into());
        for crd in crds(&options, None).unwrap() {
            let config = &crd["spec"]["conversion"]["webhook"]["clientConfig"];
            assert_eq!(config["url"], "https://127.0.0.1:9443/convert");
            assert!(config.get("service").is_none());
        }
    }

    #[test]
    fn no_rule_grants_a_wildcard_verb_resource_or_group() {
        for options in [external(), InstallOptions::default()] {
            for object in render(&options).unwrap() {
                let Some(rules) = object.get("rules") else {
                    continue;
                };
                for rule in rules.as_array().unwrap() {
                    for field in [
                        "apiGroups",
                        "resources",
                        "verbs",
                        "resourceNames",
                        "nonResourceURLs",
                    ] {
                        let mut found = Vec::new();
                        strings(&rule[field], &mut found);
                        assert!(
                            found.iter().all(|s| !s.contains('*')),
                            "wildcard in {field} of {}: {rule}",
                            object["kind"]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_cluster_role_grants_exactly_what_the_hub_calls() {
        let objects = render(&external()).unwrap();
        let rules = &find(&objects, "ClusterRole", "accord-hub")["rules"];
        // Every kind the crds crate defines, in its order.
        let plurals: Vec<String> = all_crds()
            .iter()
            .map(|c| c.spec.names.plural.clone())
            .collect();
        assert!(
            plurals.len() >= 6 && plurals[0] == "managedclusters",
            "{plurals:?}"
        );
        let all = json!(plurals);
        let status = json!(
            plurals
                .iter()
                .map(|p| format!("{p}/status"))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            *rules,
            json!([
                { "apiGroups": ["accord.io"], "resources": all, "verbs": ["get", "list", "watch", "patch"] },
                { "apiGroups": ["accord.io"], "resources": ["managedclusters"], "verbs": ["create"] },
                { "apiGroups": ["accord.io"], "resources": status, "verbs": ["patch"] },
                { "apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"] },
                { "apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"] },
                { "apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch", "create"] },
                { "apiGroups": ["apps"], "resources": ["controllerrevisions"], "verbs": ["create", "list", "patch", "delete"] },
                { "apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"] },
                { "apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"] },
                { "apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"] },
                {
                    "apiGroups": ["admissionregistration.k8s.io"],
                    "resources": ["validatingwebhookconfigurations"],
                    "resourceNames": ["accord-hub"],
                    "verbs": ["get", "list", "watch", "patch"],
                },
                {
                    "apiGroups": ["apiextensions.k8s.io"],
                    "resources": ["customresourcedefinitions"],
                    "resourceNames": plurals.iter().map(|p| format!("{p}.accord.io")).collect::<Vec<_>>(),
                    "verbs": ["get", "list", "watch", "patch"],
                },
            ])
        );
        // Nothing destructive but the pruning of the revision history the hub itself keeps
        // (ControllerRevisions owned by its objects, at most ten each).
        let mut verbs = Vec::new();
        for rule in rules.as_array().unwrap() {
            if rule["resources"] == json!(["controllerrevisions"]) {
                continue;
            }
            strings(&rule["verbs"], &mut verbs);
        }
        for forbidden in [
            "delete",
            "deletecollection",
            "update",
            "escalate",
            "bind",
            "impersonate",
        ] {
            assert!(!verbs.iter().any(|v| v == forbidden), "{forbidden} granted");
        }
    }

    #[test]
    fn the_webhook_configuration_sends_each_kinds_creates_and_updates_to_the_hub_service() {
        let objects = render(&external()).unwrap();
        let config = find(&objects, "ValidatingWebhookConfiguration", "accord-hub");
        assert!(config["metadata"].get("namespace").is_none());
        assert_eq!(
            config["webhooks"],
            json!([{
                "name": "federatedkafkatopics.accord.io",
                "clientConfig": {
                    "service": {
                        "name": "accord-hub",
                        "namespace": "accord-system",
                        "port": 9443,
                        "path": "/validate-federatedkafkatopics",
                    },
                },
                "rules": [{
                    "apiGroups": ["accord.io"],
                    "apiVersions": ["v1beta1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["federatedkafkatopics"],
                    "scope": "Namespaced",
                }],
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }, {
                "name": "prometheusfederations.accord.io",
                "clientConfig": {
                    "service": {
                        "name": "accord-hub",
                        "namespace": "accord-system",
                        "port": 9443,
                        "path": "/validate-prometheusfederations",
                    },
                },
                "rules": [{
                    "apiGroups": ["accord.io"],
                    "apiVersions": ["v1beta1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["prometheusfederations"],
                    "scope": "Namespaced",
                }],
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }, {
                "name": "federatedresources.accord.io",
                "clientConfig": {
                    "service": {
                        "name": "accord-hub",
                        "namespace": "accord-system",
                        "port": 9443,
                        "path": "/validate-federatedresources",
                    },
                },
                "rules": [{
                    "apiGroups": ["accord.io"],
                    "apiVersions": ["v1beta1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["federatedresources"],
                    "scope": "Namespaced",
                }],
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }, {
                "name": "federatedkafkausers.accord.io",
                "clientConfig": {
                    "service": {
                        "name": "accord-hub",
                        "namespace": "accord-system",
                        "port": 9443,
                        "path": "/validate-federatedkafkausers",
                    },
                },
                "rules": [{
                    "apiGroups": ["accord.io"],
                    "apiVersions": ["v1beta1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["federatedkafkausers"],
                    "scope": "Namespaced",
                }],
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }])
        );
        // The Service it names serves the webhook port, which the pod listens on.
        let service = find(&objects, "Service", "accord-hub");
        assert!(
            service["spec"]["ports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["port"] == 9443 && p["targetPort"] == "webhook")
        );
        let container = &find(&objects, "Deployment", "accord-hub")["spec"]["template"]["spec"]["containers"]
            [0];
        assert!(
            container["args"]
                .as_array()
                .unwrap()
                .contains(&json!("--webhook-addr=0.0.0.0:9443"))
        );
    }

    #[test]
    fn given_the_hub_ca_the_webhook_configuration_trusts_it() {
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let config = webhook_configuration(&external(), Some(pem));
        let mut without = config.clone();
        for webhook in 0..WEBHOOKS.len() {
            let bundle = config["webhooks"][webhook]["clientConfig"]["caBundle"]
                .as_str()
                .unwrap();
            let typed: k8s_openapi::ByteString =
                serde_json::from_value(json!(bundle)).expect("base64");
            assert_eq!(typed.0, pem.as_bytes());
            // Otherwise equal to what render() and the manifests carry.
            without["webhooks"][webhook]["clientConfig"]
                .as_object_mut()
                .unwrap()
                .remove("caBundle");
        }
        assert_eq!(without, webhook_configuration(&external(), None));
    }

    #[test]
    fn with_a_webhook_url_every_webhook_is_called_at_that_url_with_its_path_and_the_ca() {
        let options = InstallOptions {
            webhook_url: Some("https://127.0.0.1:19443/".into()),
            ..external()
        };
        let pem = "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n";
        let config = webhook_configuration(&options, Some(pem));
        let with_service = webhook_configuration(&external(), Some(pem));
        let webhooks = config["webhooks"].as_array().unwrap();
        assert_eq!(
            webhooks.len(),
            with_service["webhooks"].as_array().unwrap().len()
        );
        for (webhook, service) in webhooks
            .iter()
            .zip(with_service["webhooks"].as_array().unwrap())
        {
            let path = service["clientConfig"]["service"]["path"].as_str().unwrap();
            assert_eq!(
                webhook["clientConfig"],
                json!({
                    "url": format!("https://127.0.0.1:19443{path}"),
                    "caBundle": service["clientConfig"]["caBundle"],
                }),
                "no service, the same path and CA"
            );
        }
        assert_eq!(
            webhooks[0]["clientConfig"]["url"],
            "https://127.0.0.1:19443/validate-federatedkafkatopics"
        );
        // Without the CA (the first apply), no caBundle either.
        assert_eq!(
            webhook_configuration(&options, None)["webhooks"][0]["clientConfig"],
            json!({ "url": "https://127.0.0.1:19443/validate-federatedkafkatopics" })
        );
        // What the API server accepts.
        let _: k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration =
            serde_json::from_value(config).unwrap();
    }

    #[test]
    fn the_hub_may_only_read_and_patch_its_own_webhook_configuration() {
        let objects = render(&external()).unwrap();
        let rules = find(&objects, "ClusterRole", "accord-hub")["rules"]
            .as_array()
            .unwrap()
            .clone();
        let admission: Vec<&Value> = rules
            .iter()
            .filter(|r| r["apiGroups"] == json!(["admissionregistration.k8s.io"]))
            .collect();
        assert_eq!(admission.len(), 1, "{admission:?}");
        assert_eq!(admission[0]["resourceNames"], json!(["accord-hub"]));
        assert_eq!(
            admission[0]["resources"],
            json!(["validatingwebhookconfigurations"])
        );
        assert_eq!(
            admission[0]["verbs"],
            json!(["get", "list", "watch", "patch"])
        );
        // Namespaces: read only, for the policies' namespace selectors.
        let namespaces: Vec<&Value> = rules
            .iter()
            .filter(|r| r["resources"] == json!(["namespaces"]))
            .collect();
        assert_eq!(namespaces.len(), 1);
        assert_eq!(namespaces[0]["verbs"], json!(["list", "watch"]));
    }

    #[test]
    fn secrets_are_written_only_in_the_hub_namespace_and_read_elsewhere_only_to_deliver() {
        let objects = render(&external()).unwrap();
        let role = find(&objects, "Role", "accord-hub");
        assert_eq!(role["metadata"]["namespace"], "accord-system");
        assert_eq!(
            role["rules"],
            json!([
                { "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["accord-hub-ca"], "verbs": ["get"] },
                { "apiGroups": [""], "resources": ["secrets"], "verbs": ["create"] },
                { "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["prometheus-federation-global"], "verbs": ["get", "list", "watch", "patch", "delete"] },
                { "apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"] },
            ])
        );
        // Cluster-wide only list, watch and create: the Secrets FederatedResources deliver
        // and FederatedKafkaUsers read their passwords from (or have generated); never
        // changed or deleted.
        let cluster_role = find(&objects, "ClusterRole", "accord-hub");
        let secrets: Vec<&Value> = cluster_role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r.to_string().contains("secrets"))
            .collect();
        assert_eq!(
            secrets,
            [
                &json!({ "apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch", "create"] })
            ]
        );
    }

    #[test]
    fn config_maps_are_granted_only_in_the_hub_namespace_and_only_the_global_tiers_by_name() {
        let objects = render(&external()).unwrap();
        let cluster_role = find(&objects, "ClusterRole", "accord-hub");
        assert!(!cluster_role.to_string().contains("configmaps"));
        let role = find(&objects, "Role", "accord-hub");
        for rule in role["rules"].as_array().unwrap() {
            if rule["resources"] != json!(["configmaps"]) {
                continue;
            }
            // Only a create cannot name its object.
            if rule["verbs"] != json!(["create"]) {
                assert_eq!(
                    rule["resourceNames"],
                    json!(["prometheus-federation-global"]),
                    "{rule}"
                );
            }
        }
    }

    #[test]
    fn the_hub_runs_as_non_root_with_a_read_only_root_and_no_capabilities() {
        let objects = render(&external()).unwrap();
        let pod = &find(&objects, "Deployment", "accord-hub")["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["securityContext"]["runAsUser"], NON_ROOT_ID);
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        assert_eq!(pod["serviceAccountName"], "accord-hub");
        let container = &pod["containers"][0];
        let sc = &container["securityContext"];
        assert_eq!(sc["runAsNonRoot"], true);
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
        assert!(sc.get("privileged").is_none());
        for key in ["requests", "limits"] {
            assert!(container["resources"][key]["cpu"].is_string(), "{key} cpu");
            assert!(
                container["resources"][key]["memory"].is_string(),
                "{key} memory"
            );
        }
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    }

    #[test]
    fn etcd_tls_and_credentials_come_from_the_etcd_secret_mounted_read_only() {
        use crate::install::options::{ETCD_SECRET_NAME, EtcdClientSecret};
        let options = InstallOptions {
            etcd_client: Some(EtcdClientSecret {
                ca: true,
                client_certificate: true,
                auth: true,
                ..EtcdClientSecret::default()
            }),
            ..external()
        };
        let objects = render(&options).unwrap();
        let pod = &find(&objects, "Deployment", "accord-hub")["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .filter(|a| a.starts_with("--etcd-") && !a.starts_with("--etcd-endpoints"))
            .collect();
        assert_eq!(
            args,
            [
                "--etcd-prefix=/accord/",
                "--etcd-ca=/etc/accord/etcd/ca.crt",
                "--etcd-cert=/etc/accord/etcd/tls.crt",
                "--etcd-key=/etc/accord/etcd/tls.key",
                "--etcd-password-file=/etc/accord/etcd/password",
            ]
        );
        assert_eq!(
            pod["volumes"],
            json!([{ "name": "etcd-client", "secret": { "secretName": ETCD_SECRET_NAME } }])
        );
        assert_eq!(
            container["volumeMounts"],
            json!([{ "name": "etcd-client", "mountPath": "/etc/accord/etcd", "readOnly": true }])
        );
        assert_eq!(
            container["env"][1],
            json!({
                "name": "ACCORD_ETCD_USERNAME",
                "valueFrom": { "secretKeyRef": { "name": ETCD_SECRET_NAME, "key": "username" } },
            })
        );
        // The rendered objects never carry the Secret itself (dry-run prints them).
        assert!(!objects.iter().any(|o| o["kind"] == "Secret"));

        // Without the Secret: no volume, no etcd flag beyond endpoints and prefix.
        let plain = render(&external()).unwrap();
        let pod = &find(&plain, "Deployment", "accord-hub")["spec"]["template"]["spec"];
        assert!(pod.get("volumes").is_none());
        assert!(pod["containers"][0].get("volumeMounts").is_none());
        assert_eq!(pod["containers"][0]["env"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn the_hub_is_started_with_its_etcd_namespace_addresses_and_pod_name() {
        let options = InstallOptions {
            namespace: "fed".into(),
            grpc_port: 8443,
            tls_sans: vec!["hub.example.com".into(), "203.0.113.7".into()],
            ..external()
        };
        let objects = render(&options).unwrap();
        let container = &find(&objects, "Deployment", "accord-hub")["spec"]["template"]["spec"]["containers"]
            [0];
        assert_eq!(
            container["args"],
            json!([
                "serve",
                "--etcd-endpoints=https://etcd-0.example:2379,https://etcd-1.example:2379",
                "--etcd-prefix=/accord/",
                "--namespace=fed",
                "--grpc-addr=0.0.0.0:8443",
                "--http-addr=0.0.0.0:8080",
                "--webhook-addr=0.0.0.0:9443",
                "--replica-name=$(POD_NAME)",
                "--tls-san=hub.example.com,203.0.113.7",
            ])
        );
        assert_eq!(
            container["env"][0],
            json!({ "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } })
        );
        let service = find(&objects, "Service", "accord-hub");
        assert_eq!(service["spec"]["ports"][0]["port"], 8443);
        assert_eq!(
            service["spec"]["ports"][1],
            json!({ "name": "webhook", "port": 9443, "targetPort": "webhook", "protocol": "TCP" })
        );
        assert_eq!(
            container["ports"][2],
            json!({ "name": "webhook", "containerPort": 9443, "protocol": "TCP" })
        );
        assert_eq!(service["spec"]["type"], "ClusterIP");
        assert_eq!(
            find(&objects, "Service", "accord-hub-metrics")["spec"]["ports"][0]["port"],
            8080
        );
    }

    #[test]
    fn the_namespace_option_reaches_every_namespaced_object_and_binding() {
        let options = InstallOptions {
            namespace: "federation".into(),
            ..InstallOptions::default()
        };
        let cluster_scoped = [
            "Namespace",
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingWebhookConfiguration",
        ];
        let objects = render(&options).unwrap();
        for object in &objects {
            let kind = object["kind"].as_str().unwrap();
            if cluster_scoped.contains(&kind) {
                assert!(
                    object["metadata"].get("namespace").is_none(),
                    "{kind} is cluster-scoped"
                );
            } else {
                assert_eq!(object["metadata"]["namespace"], "federation", "{kind}");
            }
        }
        assert_eq!(
            find(&objects, "Namespace", "federation")["kind"],
            "Namespace"
        );
        for kind in ["RoleBinding", "ClusterRoleBinding"] {
            assert_eq!(
                find(&objects, kind, "accord-hub")["subjects"][0]["namespace"],
                "federation"
            );
        }
        assert_eq!(
            find(&objects, "ValidatingWebhookConfiguration", "accord-hub")["webhooks"][0]["clientConfig"]
                ["service"]["namespace"],
            "federation"
        );
        // No trace of the default namespace is left anywhere.
        let text = serde_json::to_string(&objects).unwrap();
        assert!(!text.contains("accord-system"));
    }

    #[test]
    fn with_etcd_adds_a_single_member_etcd_reachable_only_from_the_hub() {
        let options = InstallOptions::default();
        let objects = render(&options).unwrap();
        let sts = find(&objects, "StatefulSet", "accord-etcd");
        assert_eq!(sts["spec"]["replicas"], 1);
        assert_eq!(sts["spec"]["serviceName"], "accord-etcd");
        let container = &sts["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["securityContext"], container_security_context());
        assert_eq!(
            sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
            "1Gi"
        );
        assert_eq!(
            find(&objects, "Service", "accord-etcd")["spec"]["clusterIP"],
            "None"
        );
        let policy = find(&objects, "NetworkPolicy", "accord-etcd");
        assert_eq!(
            policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
            "accord-hub"
        );
        let args = &find(&objects, "Deployment", "accord-hub")["spec"]["template"]["spec"]["containers"]
            [0]["args"];
        assert_eq!(
            args[1],
            "--etcd-endpoints=http://accord-etcd.accord-system.svc:2379"
        );
        // And without it, no etcd at all.
        let without = render(&external()).unwrap();
        assert!(
            !serde_json::to_string(&without)
                .unwrap()
                .contains("accord-etcd")
        );
    }

    #[test]
    fn several_replicas_get_a_disruption_budget() {
        let options = InstallOptions {
            replicas: 3,
            service_type: ServiceType::LoadBalancer,
            ..external()
        };
        let objects = render(&options).unwrap();
        assert_eq!(
            find(&objects, "Deployment", "accord-hub")["spec"]["replicas"],
            3
        );
        assert_eq!(
            find(&objects, "PodDisruptionBudget", "accord-hub")["spec"]["maxUnavailable"],
            1
        );
        assert_eq!(
            find(&objects, "Service", "accord-hub")["spec"]["type"],
            "LoadBalancer"
        );
        // Metrics stay inside the cluster even when gRPC is exposed.
        assert_eq!(
            find(&objects, "Service", "accord-hub-metrics")["spec"]["type"],
            "ClusterIP"
        );
    }

    #[test]
    fn selectors_match_the_pod_labels() {
        let objects = render(&InstallOptions::default()).unwrap();
        for object in &objects {
            let spec = &object["spec"];
            let Some(selector) = spec
                .get("selector")
                .map(|s| s.get("matchLabels").unwrap_or(s))
                .and_then(Value::as_object)
            else {
                continue;
            };
            let kind = object["kind"].as_str().unwrap();
            let pods: Vec<&Value> = objects
                .iter()
                .filter_map(|o| o["spec"]["template"]["metadata"].get("labels"))
                .filter(|labels| selector.iter().all(|(k, v)| labels[k] == *v))
                .collect();
            assert_eq!(
                pods.len(),
                1,
                "{kind} {} selects {} pod templates",
                object["metadata"]["name"],
                pods.len()
            );
        }
    }

    /// Each object deserialises into its typed k8s-openapi struct and serialises back to
    /// the same JSON: no misspelt or misplaced field (typed structs drop unknown ones).
    #[test]
    fn every_object_round_trips_through_its_typed_kubernetes_struct() {
        use k8s_openapi::api::{admissionregistration, apps, core, networking, policy, rbac};
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) -> Value {
            serde_json::to_value(serde_json::from_value::<T>(v.clone()).unwrap()).unwrap()
        }
        let options = InstallOptions {
            replicas: 2,
            ..Default::default()
        };
        for object in render(&options).unwrap() {
            let typed = match object["kind"].as_str().unwrap() {
                "Namespace" => round_trip::<core::v1::Namespace>(&object),
                "CustomResourceDefinition" => round_trip::<CustomResourceDefinition>(&object),
                "ServiceAccount" => round_trip::<core::v1::ServiceAccount>(&object),
                "Service" => round_trip::<core::v1::Service>(&object),
                "ClusterRole" => round_trip::<rbac::v1::ClusterRole>(&object),
                "ClusterRoleBinding" => round_trip::<rbac::v1::ClusterRoleBinding>(&object),
                "Role" => round_trip::<rbac::v1::Role>(&object),
                "RoleBinding" => round_trip::<rbac::v1::RoleBinding>(&object),
                "Deployment" => round_trip::<apps::v1::Deployment>(&object),
                "StatefulSet" => round_trip::<apps::v1::StatefulSet>(&object),
                "NetworkPolicy" => round_trip::<networking::v1::NetworkPolicy>(&object),
                "PodDisruptionBudget" => round_trip::<policy::v1::PodDisruptionBudget>(&object),
                "ValidatingWebhookConfiguration" => {
                    round_trip::<admissionregistration::v1::ValidatingWebhookConfiguration>(&object)
                }
                other => panic!("no typed check for {other}"),
            };
            assert_eq!(
                typed, object,
                "{} {}",
                object["kind"], object["metadata"]["name"]
            );
        }
    }

    #[test]
    fn the_yaml_parses_back_to_the_same_objects() {
        for options in [InstallOptions::default(), external()] {
            let objects = render(&options).unwrap();
            let yaml = render_yaml(&objects).unwrap();
            let parsed: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
            assert_eq!(parsed, objects);
        }
    }

    #[test]
    fn the_dry_run_output_opens_with_how_to_regenerate_and_apply_it() {
        let out = dry_run_output(&InstallOptions::default()).unwrap();
        assert!(out.starts_with("# Objects applied by `accord-hub install`"));
        assert!(out.contains("install --dry-run --with-etcd > deploy/manifests/accord-hub.yaml"));
        assert!(out.contains("kubectl apply --server-side"));
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&out).unwrap();
        assert_eq!(parsed, render(&InstallOptions::default()).unwrap());
    }
}
