//! The Helm charts render the same objects as `accord-hub install` (hub) and as the plain
//! agent manifest (agent).
//!
//! Always: the chart's CRD templates are the generated ones
//! (`ACCORD_UPDATE_CHARTS=1 cargo test -p accord-hub --test install_helm` rewrites them), `values.yaml` defaults are
//! [`InstallOptions::default`], and the templates name every object `render` produces.
//! With `helm` available (`$HELM`, else `helm` on `PATH`; built with
//! `GOFLAGS=-mod=mod go install helm.sh/helm/v3/cmd/helm@v3.22.0`): `helm lint`, and
//! `helm template` compared object by object with `render`, for the defaults and for a
//! production-like set of values. Without helm those tests say so on stderr and pass,
//! unless `ACCORD_REQUIRE_HELM=1` makes them fail.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use accord_hub::install::{
    DEFAULT_ETCD_IMAGE, ETCD_SECRET_NAME, EtcdClientSecret, EtcdMode, HELM_KEEP_ANNOTATION,
    InstallOptions, ServiceType, crds, default_image, helm_crd_templates, render,
    webhook_configuration,
};
use serde_json::{Value, json};

/// Labels Helm charts add that `accord-hub install` does not.
const HELM_ONLY_LABELS: [&str; 2] = ["helm.sh/chart", "app.kubernetes.io/managed-by"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("hub/ has a parent")
        .to_path_buf()
}

fn chart(name: &str) -> PathBuf {
    repo_root().join("deploy/helm").join(name)
}

fn yaml_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Documents of a YAML stream, empty ones dropped.
fn documents(yaml: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("valid YAML stream");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// Objects by `Kind namespace/name`, Helm's own labels and annotations removed.
fn by_identity(objects: Vec<Value>) -> BTreeMap<String, Value> {
    objects
        .into_iter()
        .map(|mut o| {
            if let Some(labels) = o["metadata"]
                .get_mut("labels")
                .and_then(Value::as_object_mut)
            {
                for label in HELM_ONLY_LABELS {
                    labels.remove(label);
                }
            }
            if let Some(metadata) = o["metadata"].as_object_mut() {
                let annotations = metadata
                    .get_mut("annotations")
                    .and_then(Value::as_object_mut);
                if let Some(annotations) = annotations {
                    annotations.remove(HELM_KEEP_ANNOTATION);
                    if annotations.is_empty() {
                        metadata.remove("annotations");
                    }
                }
            }
            let key = format!(
                "{} {}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["namespace"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            );
            (key, o)
        })
        .collect()
}

fn assert_same_objects(helm: Vec<Value>, expected: Vec<Value>, what: &str) {
    let helm = by_identity(helm);
    let expected = by_identity(expected);
    assert_eq!(
        helm.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "{what}: different objects"
    );
    for (key, object) in &expected {
        assert!(
            helm[key] == *object,
            "{what}: {key} differs\nhelm:\n{}\nexpected:\n{}",
            serde_json::to_string_pretty(&helm[key]).unwrap(),
            serde_json::to_string_pretty(object).unwrap()
        );
    }
}

/// The helm binary, or `None` (after saying so) when it is not installed.
fn helm() -> Option<PathBuf> {
    let candidate = std::env::var_os("HELM").map_or_else(|| PathBuf::from("helm"), PathBuf::from);
    let found = Command::new(&candidate)
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(candidate);
    }
    let required = std::env::var("ACCORD_REQUIRE_HELM").is_ok_and(|v| v != "0");
    assert!(
        !required,
        "ACCORD_REQUIRE_HELM is set but helm was not found"
    );
    eprintln!("helm not found (set HELM or put it on PATH): only the structural chart checks ran");
    None
}

fn helm_template(
    helm: &Path,
    chart_dir: &Path,
    release: &str,
    args: &[&str],
) -> Result<String, String> {
    let out = Command::new(helm)
        .args(["template", release])
        .arg(chart_dir)
        .args(args)
        .output()
        .expect("running helm template");
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("UTF-8"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// What regenerates the hub chart's generated files (after `ACCORD_UPDATE_CHARTS=1`).
const REGENERATE: &str = "cargo test -p accord-hub --test install_helm";

#[test]
fn the_hub_charts_crd_templates_are_generated() {
    let dir = chart("accord-hub").join("templates/crds");
    let mut expected = Vec::new();
    for (file, text) in helm_crd_templates().unwrap() {
        accord_common::manifest::assert_generated(
            &dir.join(&file),
            &format!("deploy/helm/accord-hub/templates/crds/{file}"),
            &text,
            REGENERATE,
        );
        expected.push(file);
    }
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    present.sort();
    expected.sort();
    assert_eq!(
        present, expected,
        "stray files in deploy/helm/accord-hub/templates/crds"
    );
}

#[test]
fn the_hub_charts_rules_and_webhooks_are_generated() {
    accord_common::manifest::assert_generated(
        &chart("accord-hub").join("templates/_generated.tpl"),
        "deploy/helm/accord-hub/templates/_generated.tpl",
        &accord_hub::install::helm_generated_template().unwrap(),
        REGENERATE,
    );
}

#[test]
fn the_hub_charts_default_values_are_installs_defaults() {
    let values = yaml_file(&chart("accord-hub").join("values.yaml"));
    let chart_yaml = yaml_file(&chart("accord-hub").join("Chart.yaml"));
    let defaults = InstallOptions::default();

    assert_eq!(chart_yaml["appVersion"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart_yaml["version"], env!("CARGO_PKG_VERSION"));
    let image = format!(
        "{}:{}",
        values["image"]["repository"].as_str().unwrap(),
        chart_yaml["appVersion"].as_str().unwrap()
    );
    assert_eq!(values["image"]["tag"], "", "the tag defaults to appVersion");
    assert_eq!(image, default_image());
    assert_eq!(
        values["image"]["pullPolicy"],
        defaults.image_pull_policy.as_str()
    );
    assert_eq!(values["replicas"], defaults.replicas);
    assert_eq!(values["crds"]["install"], true, "install applies the CRDs");
    assert_eq!(values["etcdPrefix"], defaults.etcd_prefix.as_str());
    assert_eq!(values["grpcPort"], defaults.grpc_port);
    assert_eq!(values["httpPort"], defaults.http_port);
    assert_eq!(values["webhookPort"], defaults.webhook_port);
    assert_eq!(
        values["webhook"]["caBundle"], "",
        "the CA comes from its Secret or the hub"
    );
    assert_eq!(values["service"]["type"], defaults.service_type.to_string());
    assert_eq!(values["tlsSans"], json!(defaults.tls_sans));
    let EtcdMode::Bundled {
        image,
        storage_size,
    } = &defaults.etcd
    else {
        panic!("the default installation runs the evaluation etcd");
    };
    assert_eq!(values["etcd"]["enabled"], true);
    assert_eq!(values["etcdEndpoints"], json!([]));
    assert_eq!(values["etcd"]["image"], image.as_str());
    assert_eq!(image, DEFAULT_ETCD_IMAGE);
    assert_eq!(values["etcd"]["storageSize"], storage_size.as_str());
    let resources = |r: &accord_hub::install::Resources| {
        json!({
            "requests": { "cpu": r.cpu_request, "memory": r.memory_request },
            "limits": { "cpu": r.cpu_limit, "memory": r.memory_limit },
        })
    };
    assert_eq!(values["resources"], resources(&defaults.resources));
    assert_eq!(
        values["etcd"]["resources"],
        resources(&defaults.etcd_resources)
    );
    // The namespace comes from the release (`helm install -n accord-system`).
    assert_eq!(values["namespace"], "");
    // No etcd Secret by default; when one is named, it holds a CA and a client certificate
    // unless told otherwise, as `install --etcd-ca --etcd-cert --etcd-key` writes it.
    assert_eq!(defaults.etcd_client, None);
    assert_eq!(values["etcd"]["secretName"], "");
    assert_eq!(values["etcd"]["tls"]["ca"], true);
    assert_eq!(values["etcd"]["tls"]["clientCertificate"], true);
    assert_eq!(values["etcd"]["auth"]["enabled"], false);
    assert_eq!(EtcdClientSecret::default().secret_name, ETCD_SECRET_NAME);
}

/// Without helm, at least every object `render` produces has a template naming its kind
/// and name.
#[test]
fn the_hub_charts_templates_name_every_object_install_renders() {
    let dir = chart("accord-hub").join("templates");
    let templates: String = std::fs::read_dir(&dir)
        .unwrap()
        .chain(std::fs::read_dir(dir.join("crds")).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n");
    let options = InstallOptions {
        replicas: 2,
        ..Default::default()
    };
    for object in render(&options).unwrap() {
        let kind = object["kind"].as_str().unwrap();
        let name = object["metadata"]["name"].as_str().unwrap();
        let found = templates.split("\n---\n").any(|doc| {
            doc.contains(&format!("kind: {kind}\n"))
                && (doc.contains(&format!("name: {name}\n")) || kind == "Namespace")
        });
        assert!(found, "no template renders {kind} {name}");
    }
}

#[test]
fn helm_template_of_the_hub_chart_is_what_install_renders() {
    let Some(helm) = helm() else { return };
    let dir = chart("accord-hub");
    let lint = Command::new(&helm).arg("lint").arg(&dir).output().unwrap();
    assert!(
        lint.status.success(),
        "helm lint: {}",
        String::from_utf8_lossy(&lint.stdout)
    );

    // Defaults (the chart leaves the Namespace to --create-namespace unless asked).
    let yaml = helm_template(
        &helm,
        &dir,
        "accord-hub",
        &[
            "--namespace",
            "accord-system",
            "--set",
            "createNamespace=true",
        ],
    )
    .unwrap();
    assert_same_objects(
        documents(&yaml),
        render(&InstallOptions::default()).unwrap(),
        "defaults",
    );

    // Production-like: external etcd, three replicas, exposed, own namespace and image.
    let yaml = helm_template(
        &helm,
        &dir,
        "hub",
        &[
            "--namespace",
            "federation",
            "--set",
            "createNamespace=true",
            "--set",
            "etcd.enabled=false",
            "--set",
            "etcdEndpoints={https://etcd-0.example:2379,https://etcd-1.example:2379}",
            "--set",
            "etcd.secretName=accord-hub-etcd",
            "--set",
            "etcd.auth.enabled=true",
            "--set",
            "etcdPrefix=/prod/",
            "--set",
            "replicas=3",
            "--set",
            "grpcPort=8443",
            "--set",
            "webhookPort=9444",
            "--set",
            "service.type=LoadBalancer",
            "--set",
            "tlsSans={hub.example.com,203.0.113.7}",
            "--set",
            "image.repository=registry.example/accord-hub",
            "--set",
            "image.tag=dev",
            "--set",
            "image.pullPolicy=Always",
        ],
    )
    .unwrap();
    let options = InstallOptions {
        namespace: "federation".into(),
        etcd: EtcdMode::External {
            endpoints: vec![
                "https://etcd-0.example:2379".into(),
                "https://etcd-1.example:2379".into(),
            ],
        },
        etcd_prefix: "/prod/".into(),
        etcd_client: Some(EtcdClientSecret {
            ca: true,
            client_certificate: true,
            auth: true,
            ..EtcdClientSecret::default()
        }),
        replicas: 3,
        grpc_port: 8443,
        webhook_port: 9444,
        service_type: ServiceType::LoadBalancer,
        tls_sans: vec!["hub.example.com".into(), "203.0.113.7".into()],
        image: "registry.example/accord-hub:dev".into(),
        image_pull_policy: "Always".into(),
        ..Default::default()
    };
    assert_same_objects(
        documents(&yaml),
        render(&options).unwrap(),
        "production values",
    );

    // A Secret for the evaluation etcd, which has neither TLS nor auth, is refused.
    let refused = helm_template(
        &helm,
        &dir,
        "accord-hub",
        &[
            "--namespace",
            "accord-system",
            "--set",
            "etcd.secretName=accord-hub-etcd",
        ],
    )
    .unwrap_err();
    assert!(refused.contains("etcd.secretName"), "{refused}");

    // With crds.install=false and without createNamespace, Helm renders the rest.
    let yaml = helm_template(
        &helm,
        &dir,
        "accord-hub",
        &[
            "--namespace",
            "accord-system",
            "--set",
            "crds.install=false",
        ],
    )
    .unwrap();
    let kinds: Vec<String> = documents(&yaml)
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        !kinds
            .iter()
            .any(|k| k == "Namespace" || k == "CustomResourceDefinition"),
        "{kinds:?}"
    );
}

#[test]
fn a_ca_bundle_value_lands_in_the_webhooks_and_crds_as_install_renders_them() {
    let Some(helm) = helm() else { return };
    let pem = "-----BEGIN CERTIFICATE-----\nMIIBhub\n-----END CERTIFICATE-----\n";
    let expected = webhook_configuration(&InstallOptions::default(), Some(pem));
    let bundle = expected["webhooks"][0]["clientConfig"]["caBundle"]
        .as_str()
        .expect("a caBundle")
        .to_owned();
    let yaml = helm_template(
        &helm,
        &chart("accord-hub"),
        "accord-hub",
        &[
            "--namespace",
            "accord-system",
            "--set",
            &format!("webhook.caBundle={bundle}"),
        ],
    )
    .unwrap();
    let objects = by_identity(documents(&yaml));
    let key = "ValidatingWebhookConfiguration /accord-hub";
    assert!(
        objects[key] == expected,
        "helm:\n{}\nexpected:\n{}",
        serde_json::to_string_pretty(&objects[key]).unwrap(),
        serde_json::to_string_pretty(&expected).unwrap()
    );
    // The CRDs' conversion webhook trusts the same CA.
    for crd in crds(&InstallOptions::default(), Some(pem)).unwrap() {
        let key = format!(
            "CustomResourceDefinition /{}",
            crd["metadata"]["name"].as_str().unwrap()
        );
        assert!(objects[&key] == crd, "{key} differs");
    }
}

#[test]
fn the_hub_chart_refuses_both_or_neither_etcd() {
    let Some(helm) = helm() else { return };
    let dir = chart("accord-hub");
    let both = helm_template(
        &helm,
        &dir,
        "hub",
        &["--set", "etcdEndpoints={https://e:2379}"],
    )
    .unwrap_err();
    assert!(both.contains("set either etcdEndpoints"), "{both}");
    let neither = helm_template(&helm, &dir, "hub", &["--set", "etcd.enabled=false"]).unwrap_err();
    assert!(neither.contains("the hub needs etcd"), "{neither}");
}

#[test]
fn the_agent_manifest_is_the_agent_chart_rendered() {
    let manifest =
        std::fs::read_to_string(repo_root().join("deploy/manifests/accord-agent.yaml")).unwrap();
    let objects = documents(&manifest);
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Deployment"
        ]
    );
    let Some(helm) = helm() else { return };
    let dir = chart("accord-agent");
    let lint = Command::new(&helm).arg("lint").arg(&dir).output().unwrap();
    assert!(
        lint.status.success(),
        "helm lint: {}",
        String::from_utf8_lossy(&lint.stdout)
    );
    let yaml = helm_template(
        &helm,
        &dir,
        "accord-agent",
        &[
            "--namespace",
            "accord-system",
            "--set",
            "createNamespace=true",
        ],
    )
    .unwrap();
    assert_same_objects(
        documents(&yaml),
        objects,
        "agent chart vs deploy/manifests/accord-agent.yaml",
    );

    // Two replicas with another Lease: the Deployment, its flags and the Role follow.
    let yaml = helm_template(
        &helm,
        &dir,
        "accord-agent",
        &[
            "--namespace",
            "accord-system",
            "--set",
            "replicas=2,leaseName=agent-east,leaseDuration=4s",
        ],
    )
    .unwrap();
    let objects = by_identity(documents(&yaml));
    let deployment = &objects["Deployment accord-system/accord-agent"];
    assert_eq!(deployment["spec"]["replicas"], 2);
    let args = strings(&deployment["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(
        args.contains(&"--lease-name=agent-east".to_owned())
            && args.contains(&"--lease-duration=4s".to_owned()),
        "{args:?}"
    );
    let role = &objects["Role accord-system/accord-agent"];
    assert!(
        role["rules"].as_array().unwrap().contains(&json!(
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["agent-east"], "verbs": ["get", "update"]}
        )),
        "{role}"
    );
}

/// Every string anywhere in a JSON value.
fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a.iter().flat_map(strings).collect(),
        Value::Object(o) => o.values().flat_map(strings).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn the_agent_gets_least_privilege_and_a_locked_down_pod() {
    let manifest =
        std::fs::read_to_string(repo_root().join("deploy/manifests/accord-agent.yaml")).unwrap();
    let objects = by_identity(documents(&manifest));
    for object in objects.values() {
        if let Some(rules) = object.get("rules") {
            assert!(
                strings(rules).iter().all(|s| !s.contains('*')),
                "wildcard in {rules}"
            );
            // Deletes: the federation ConfigMap the agent wrote, by name (the namespace
            // Role), and what a FederatedResource delivers, in the aggregated delivery
            // defaults only — never Roles or bindings.
            for rule in rules.as_array().into_iter().flatten() {
                if strings(&rule["verbs"]).iter().any(|v| v == "delete") {
                    let resources = strings(&rule["resources"]);
                    assert!(
                        !resources.iter().any(|r| r.contains("role")),
                        "delete granted: {rule}"
                    );
                    if rule.get("resourceNames").is_some() {
                        assert_eq!(
                            (resources, &rule["resourceNames"]),
                            (
                                vec!["configmaps".to_owned()],
                                &json!(["prometheus-federation"])
                            ),
                            "delete granted: {rule}"
                        );
                    } else {
                        assert_eq!(
                            object["metadata"]["name"], "accord-agent-delivery-defaults",
                            "delete granted: {rule}"
                        );
                    }
                }
            }
            for verb in ["deletecollection", "escalate", "bind", "impersonate"] {
                assert!(
                    !strings(rules).iter().any(|s| s == verb),
                    "{verb} granted: {rules}"
                );
            }
        }
    }
    let cluster_role = &objects["ClusterRole /accord-agent"];
    assert!(
        !cluster_role.to_string().contains("secrets"),
        "no Secrets cluster-wide"
    );
    assert!(
        !cluster_role.to_string().contains("configmaps"),
        "no ConfigMaps cluster-wide"
    );
    let role = &objects["Role accord-system/accord-agent"];
    let secrets = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resources"] == json!(["secrets"]))
        .expect("a Secrets rule");
    assert_eq!(secrets["resourceNames"], json!(["accord-agent-identity"]));

    let pod = &objects["Deployment accord-system/accord-agent"]["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "accord-agent");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    assert_eq!(
        container["args"],
        json!([
            "run",
            "--identity-secret=accord-system/accord-agent-identity",
            "--namespace=accord-system",
            "--http-addr=0.0.0.0:8081"
        ])
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");

    // Leases: the one that decides the active replica, by name, read and replaced; create
    // (which takes no name) in the agent's namespace only; never delete.
    let leases: Vec<&Value> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| strings(&r["resources"]).iter().any(|s| s == "leases"))
        .collect();
    assert_eq!(
        leases,
        [
            &json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["accord-agent"], "verbs": ["get", "update"]}),
            &json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}),
        ],
        "{role}"
    );
    assert!(
        !cluster_role.to_string().contains("leases"),
        "no Leases cluster-wide"
    );
}
