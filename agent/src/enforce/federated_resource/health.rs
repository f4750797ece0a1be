//! Whether a delivered object is healthy, by its kind's rule: pure, from the object as the
//! member's API server holds it.
//!
//! Workloads are healthy once their controller saw the current generation and enough
//! replicas are ready; a Job once it completed; a LoadBalancer Service once it has an
//! ingress; a claim once bound; a CRD once established. Any other kind: its `Ready` (or
//! else `Available`) condition when it has one, else being there.

use accord_common::distribution::health::{HEALTHY, MISSING, PROGRESSING};
use kube::api::DynamicObject;
use serde_json::Value;

/// The health of `object` (`None`: absent), one of [`HEALTHY`], [`PROGRESSING`] and
/// [`MISSING`].
pub fn health(object: Option<&DynamicObject>) -> &'static str {
    match object {
        None => MISSING,
        Some(o) if is_healthy(o) => HEALTHY,
        Some(_) => PROGRESSING,
    }
}

/// Whether `object` is healthy by its kind's rule.
pub fn is_healthy(object: &DynamicObject) -> bool {
    let kind = object.types.as_ref().map_or("", |t| t.kind.as_str());
    let data = &object.data;
    let generation = object.metadata.generation.unwrap_or(0);
    let observed = int(data, "/status/observedGeneration") >= generation;
    let replicas = data
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    match kind {
        "Deployment" => {
            observed
                && int(data, "/status/updatedReplicas") >= replicas
                && int(data, "/status/availableReplicas") >= replicas
        }
        "StatefulSet" => observed && int(data, "/status/readyReplicas") >= replicas,
        "DaemonSet" => {
            observed
                && int(data, "/status/numberReady") >= int(data, "/status/desiredNumberScheduled")
        }
        "ReplicaSet" => int(data, "/status/readyReplicas") >= replicas,
        "Job" => condition(data, "Complete") == Some(true) || int(data, "/status/succeeded") >= 1,
        "Service" => {
            text(data, "/spec/type") != "LoadBalancer"
                || data
                    .pointer("/status/loadBalancer/ingress")
                    .and_then(Value::as_array)
                    .is_some_and(|i| !i.is_empty())
        }
        "PersistentVolumeClaim" => text(data, "/status/phase") == "Bound",
        "Pod" => match text(data, "/status/phase") {
            "Running" => condition(data, "Ready") == Some(true),
            "Succeeded" => true,
            _ => false,
        },
        "CustomResourceDefinition" => condition(data, "Established") == Some(true),
        "Namespace" => text(data, "/status/phase") == "Active",
        _ => condition(data, "Ready")
            .or_else(|| condition(data, "Available"))
            .unwrap_or(true),
    }
}

/// The integer at `pointer` (0 when absent).
fn int(data: &Value, pointer: &str) -> i64 {
    data.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

/// The string at `pointer` ("" when absent).
fn text<'a>(data: &'a Value, pointer: &str) -> &'a str {
    data.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// Whether condition `type_` in `status.conditions` is `True`; `None` when there is none.
fn condition(data: &Value, type_: &str) -> Option<bool> {
    data.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
        .map(|c| c.get("status").and_then(Value::as_str) == Some("True"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(kind: &str, generation: i64, rest: Value) -> DynamicObject {
        let mut v = json!({
            "apiVersion": "v1", "kind": kind,
            "metadata": {"name": "x", "generation": generation},
        });
        if let (Some(o), Value::Object(r)) = (v.as_object_mut(), rest) {
            o.extend(r);
        }
        serde_json::from_value(v).unwrap()
    }

    fn h(kind: &str, generation: i64, rest: Value) -> &'static str {
        health(Some(&object(kind, generation, rest)))
    }

    #[test]
    fn an_absent_object_is_missing() {
        assert_eq!(health(None), MISSING);
    }

    #[test]
    fn a_deployment_is_healthy_once_its_current_generation_is_updated_and_available() {
        let status = |observed, updated, available| {
            json!({"spec": {"replicas": 3},
                   "status": {"observedGeneration": observed, "updatedReplicas": updated,
                              "availableReplicas": available}})
        };
        assert_eq!(h("Deployment", 2, status(2, 3, 3)), HEALTHY);
        assert_eq!(
            h("Deployment", 2, status(1, 3, 3)),
            PROGRESSING,
            "old generation"
        );
        assert_eq!(
            h("Deployment", 2, status(2, 2, 3)),
            PROGRESSING,
            "rolling out"
        );
        assert_eq!(
            h("Deployment", 2, status(2, 3, 2)),
            PROGRESSING,
            "not available"
        );
        // Replicas default to 1.
        assert_eq!(h("Deployment", 1, json!({"status": {}})), PROGRESSING);
        assert_eq!(
            h(
                "Deployment",
                1,
                json!({"status": {"observedGeneration": 1, "updatedReplicas": 1, "availableReplicas": 1}})
            ),
            HEALTHY
        );
        assert_eq!(
            h(
                "Deployment",
                1,
                json!({"spec": {"replicas": 0}, "status": {"observedGeneration": 1}})
            ),
            HEALTHY,
            "scaled to zero"
        );
    }

    #[test]
    fn a_statefulset_is_healthy_once_its_current_generation_is_ready() {
        let s = |observed, ready| {
            json!({"spec": {"replicas": 2},
                   "status": {"observedGeneration": observed, "readyReplicas": ready}})
        };
        assert_eq!(h("StatefulSet", 1, s(1, 2)), HEALTHY);
        assert_eq!(h("StatefulSet", 1, s(1, 1)), PROGRESSING);
        assert_eq!(h("StatefulSet", 2, s(1, 2)), PROGRESSING);
    }

    #[test]
    fn a_daemonset_is_healthy_when_every_scheduled_pod_is_ready() {
        let s = |observed, ready, desired| {
            json!({"status": {"observedGeneration": observed, "numberReady": ready,
                              "desiredNumberScheduled": desired}})
        };
        assert_eq!(h("DaemonSet", 1, s(1, 3, 3)), HEALTHY);
        assert_eq!(h("DaemonSet", 1, s(1, 2, 3)), PROGRESSING);
        assert_eq!(h("DaemonSet", 2, s(1, 3, 3)), PROGRESSING);
    }

    #[test]
    fn a_replicaset_is_healthy_when_its_replicas_are_ready() {
        let s = |ready| json!({"spec": {"replicas": 2}, "status": {"readyReplicas": ready}});
        assert_eq!(h("ReplicaSet", 1, s(2)), HEALTHY);
        assert_eq!(h("ReplicaSet", 1, s(1)), PROGRESSING);
    }

    #[test]
    fn a_job_is_healthy_once_complete_or_succeeded() {
        let complete = json!({"status": {"conditions": [{"type": "Complete", "status": "True"}]}});
        assert_eq!(h("Job", 1, complete), HEALTHY);
        assert_eq!(h("Job", 1, json!({"status": {"succeeded": 1}})), HEALTHY);
        assert_eq!(h("Job", 1, json!({"status": {"active": 1}})), PROGRESSING);
    }

    #[test]
    fn a_load_balancer_service_needs_an_ingress_and_other_services_are_healthy_when_present() {
        assert_eq!(
            h("Service", 0, json!({"spec": {"type": "ClusterIP"}})),
            HEALTHY
        );
        assert_eq!(h("Service", 0, json!({"spec": {}})), HEALTHY);
        let lb = |ingress: Value| json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": ingress}}});
        assert_eq!(h("Service", 0, lb(json!([]))), PROGRESSING);
        assert_eq!(h("Service", 0, lb(json!([{"ip": "1.2.3.4"}]))), HEALTHY);
    }

    #[test]
    fn a_claim_is_healthy_when_bound() {
        assert_eq!(
            h(
                "PersistentVolumeClaim",
                0,
                json!({"status": {"phase": "Bound"}})
            ),
            HEALTHY
        );
        assert_eq!(
            h(
                "PersistentVolumeClaim",
                0,
                json!({"status": {"phase": "Pending"}})
            ),
            PROGRESSING
        );
    }

    #[test]
    fn a_pod_is_healthy_running_and_ready_or_succeeded() {
        let running = |ready: &str| json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]}});
        assert_eq!(h("Pod", 0, running("True")), HEALTHY);
        assert_eq!(h("Pod", 0, running("False")), PROGRESSING);
        assert_eq!(
            h("Pod", 0, json!({"status": {"phase": "Succeeded"}})),
            HEALTHY
        );
        assert_eq!(
            h("Pod", 0, json!({"status": {"phase": "Pending"}})),
            PROGRESSING
        );
    }

    #[test]
    fn a_crd_is_healthy_once_established_and_a_namespace_once_active() {
        let established =
            json!({"status": {"conditions": [{"type": "Established", "status": "True"}]}});
        assert_eq!(h("CustomResourceDefinition", 1, established), HEALTHY);
        assert_eq!(h("CustomResourceDefinition", 1, json!({})), PROGRESSING);
        assert_eq!(
            h("Namespace", 0, json!({"status": {"phase": "Active"}})),
            HEALTHY
        );
        assert_eq!(
            h("Namespace", 0, json!({"status": {"phase": "Terminating"}})),
            PROGRESSING
        );
    }

    #[test]
    fn any_other_kind_follows_its_ready_or_available_condition_or_else_exists() {
        let c = |type_: &str, status: &str| json!({"status": {"conditions": [{"type": type_, "status": status}]}});
        assert_eq!(h("MySQLCluster", 1, c("Ready", "True")), HEALTHY);
        assert_eq!(h("MySQLCluster", 1, c("Ready", "False")), PROGRESSING);
        assert_eq!(h("Widget", 1, c("Available", "False")), PROGRESSING);
        assert_eq!(h("Widget", 1, c("Available", "True")), HEALTHY);
        assert_eq!(h("ConfigMap", 0, json!({"data": {"k": "v"}})), HEALTHY);
    }
}
