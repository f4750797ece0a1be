//! Building blocks of the objects `accord-hub install` and `accord-agent join` render:
//! the labels, metadata, RBAC and pod security every Accord component shares, and the
//! multi-document YAML both commands print with `--dry-run`.

use serde_json::{Value, json};

/// Why objects could not be written as YAML (a bug, never bad input).
pub use serde_saphyr::SerializeError as YamlError;

/// UID and GID the containers run as: the conventional "nonroot" user of distroless images.
pub const NON_ROOT_ID: i64 = 65532;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Labels of every object of the component `component` (`hub`, `etcd`, `agent`).
pub fn labels(name: &str, component: &str) -> Value {
    json!({
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "accord",
    })
}

/// The immutable pod selector of a workload: a subset of [`labels`].
pub fn selector(name: &str, component: &str) -> Value {
    json!({
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/component": component,
    })
}

/// `metadata` with a name, labels and, for namespaced objects, a namespace.
pub fn metadata(name: &str, namespace: Option<&str>, labels: Value) -> Value {
    let mut m = json!({ "name": name, "labels": labels });
    if let Some(ns) = namespace {
        m["namespace"] = json!(ns);
    }
    m
}

/// The Namespace an Accord component lives in.
pub fn namespace(ns: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata(ns, None, json!({ "app.kubernetes.io/part-of": "accord" })),
    })
}

/// A component's ServiceAccount `name` in `ns`.
pub fn service_account(name: &str, ns: &str, labels: &Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(name, Some(ns), labels.clone()),
    })
}

/// A Role (`namespace` given) or ClusterRole named `name` granting `rules`.
pub fn role(name: &str, namespace: Option<&str>, labels: &Value, rules: Value) -> Value {
    json!({
        "apiVersion": format!("{RBAC_GROUP}/v1"),
        "kind": if namespace.is_some() { "Role" } else { "ClusterRole" },
        "metadata": metadata(name, namespace, labels.clone()),
        "rules": rules,
    })
}

/// A RoleBinding (`namespace` given) or ClusterRoleBinding of the role `name` to the
/// ServiceAccount of the same name in `sa_namespace`.
pub fn role_binding(
    name: &str,
    namespace: Option<&str>,
    sa_namespace: &str,
    labels: &Value,
) -> Value {
    let (kind, role_kind) = match namespace {
        Some(_) => ("RoleBinding", "Role"),
        None => ("ClusterRoleBinding", "ClusterRole"),
    };
    json!({
        "apiVersion": format!("{RBAC_GROUP}/v1"),
        "kind": kind,
        "metadata": metadata(name, namespace, labels.clone()),
        "roleRef": { "apiGroup": RBAC_GROUP, "kind": role_kind, "name": name },
        "subjects": [{ "kind": "ServiceAccount", "name": name, "namespace": sa_namespace }],
    })
}

/// Pod-level security: non-root with a fixed UID, the runtime's default seccomp profile.
pub fn pod_security_context(fs_group: bool) -> Value {
    let mut sc = json!({
        "runAsNonRoot": true,
        "runAsUser": NON_ROOT_ID,
        "runAsGroup": NON_ROOT_ID,
        "seccompProfile": { "type": "RuntimeDefault" },
    });
    if fs_group {
        sc["fsGroup"] = json!(NON_ROOT_ID);
    }
    sc
}

/// Container-level security: what Pod Security "restricted" asks, plus a read-only root.
pub fn container_security_context() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "runAsNonRoot": true,
        "capabilities": { "drop": ["ALL"] },
    })
}

/// A named TCP container port.
pub fn container_port(name: &str, port: u16) -> Value {
    json!({ "name": name, "containerPort": port, "protocol": "TCP" })
}

/// An HTTP GET probe of `path` on the container port named `http`.
pub fn http_probe(path: &str, period_seconds: u32, failure_threshold: u32) -> Value {
    json!({
        "httpGet": { "path": path, "port": "http" },
        "periodSeconds": period_seconds,
        "timeoutSeconds": 2,
        "failureThreshold": failure_threshold,
    })
}

/// The objects as one multi-document YAML stream, each document opened by `---`.
pub fn yaml_stream(objects: &[Value]) -> Result<String, YamlError> {
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(object)?);
    }
    Ok(out)
}

/// A chart's template file of `define`s generated from code, so that a chart never copies
/// by hand what `install` or `join` renders: each `(name, value)` becomes
/// `{{- define "name" -}}` holding `value` as YAML, and each string `placeholder` in it
/// (written with `@`s, which YAML quotes) becomes its template `expression`, e.g.
/// `{{ .Values.kafkaSecret }}`. `command` regenerates the file; `source` says where the
/// values come from (and why each entry is there).
pub fn helm_defines(
    command: &str,
    source: &str,
    defines: &[(&str, Value)],
    expressions: &[(&str, &str)],
) -> Result<String, YamlError> {
    let mut out = format!(
        "{{{{- /* Generated by `{command}` from {source}, which says why each entry is there; \
         do not edit. */ -}}}}\n"
    );
    for (name, value) in defines {
        let mut yaml = serde_saphyr::to_string(value)?;
        for (placeholder, expression) in expressions {
            for written in [
                format!("'{placeholder}'"),
                format!("\"{placeholder}\""),
                (*placeholder).to_owned(),
            ] {
                yaml = yaml.replace(&written, expression);
            }
        }
        out.push_str(&format!(
            "{{{{- define \"{name}\" -}}}}\n{yaml}{{{{- end }}}}\n"
        ));
    }
    Ok(out)
}

/// For the tests that keep a generated chart file current: with `ACCORD_UPDATE_CHARTS=1`
/// writes `text` to `path` first; then panics unless the committed file is `text`, naming
/// the file (`shown`, relative to the repository) and the command that regenerates it.
pub fn assert_generated(path: &std::path::Path, shown: &str, text: &str, regenerate: &str) {
    if std::env::var("ACCORD_UPDATE_CHARTS").is_ok_and(|v| v == "1") {
        std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {shown}: {e}"));
    }
    let committed = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(
        committed == text,
        "{shown} is stale; regenerate with `ACCORD_UPDATE_CHARTS=1 {regenerate}`"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_and_binding_pick_the_cluster_or_namespaced_kind() {
        let l = labels("x", "agent");
        assert_eq!(role("x", None, &l, json!([]))["kind"], "ClusterRole");
        assert_eq!(role("x", Some("ns"), &l, json!([]))["kind"], "Role");
        let b = role_binding("x", None, "ns", &l);
        assert_eq!(b["kind"], "ClusterRoleBinding");
        assert_eq!(b["roleRef"]["kind"], "ClusterRole");
        assert!(b["metadata"].get("namespace").is_none());
        let b = role_binding("x", Some("ns"), "ns", &l);
        assert_eq!(b["kind"], "RoleBinding");
        assert_eq!(b["metadata"]["namespace"], "ns");
        assert_eq!(b["subjects"][0]["namespace"], "ns");
    }

    #[test]
    fn helm_defines_hold_yaml_with_template_expressions_for_placeholders() {
        let text = helm_defines(
            "make",
            "here",
            &[("x.rules", json!([{ "resourceNames": ["@NAME@", "fixed"] }]))],
            &[("@NAME@", "{{ .Values.name }}")],
        )
        .unwrap();
        assert!(
            text.starts_with("{{- /* Generated by `make` from here"),
            "{text}"
        );
        assert!(text.contains("{{- define \"x.rules\" -}}\n"), "{text}");
        assert!(text.contains("{{ .Values.name }}"), "{text}");
        assert!(!text.contains("@NAME@"), "{text}");
        assert!(text.contains("fixed"), "{text}");
        assert!(text.ends_with("{{- end }}\n"), "{text}");
    }

    #[test]
    fn yaml_streams_open_every_document() {
        let text = yaml_stream(&[namespace("a"), namespace("b")]).unwrap();
        assert_eq!(text.matches("---\n").count(), 2);
        assert!(text.contains("name: b"));
    }
}
