//! Pure decisions about one scaled Deployment: whether it matches its assignment, whether a
//! HorizontalPodAutoscaler owns its replicas, what to report, and the server-side apply
//! patch that sets it. No API calls happen here.

use accord_common::distribution::{Observed, PlacementState, ScaleObserved, ScaleSpec};
use accord_crds::SCALE_REQUEST_ANNOTATION;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::ResourceExt as _;

use accord_crds::AGENT_FIELD_MANAGER;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;

use crate::capacity::{Room, spec_request};
use crate::enforce::fight::owner_of;
use crate::enforce::{ApplyError, Repair};
use crate::report::Report;
use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};

/// What the agent makes of a Deployment against its assignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Replicas and scale request id match; nothing to do.
    Synced,
    /// The Deployment needs the assignment applied.
    NeedsApply,
    /// No such Deployment.
    TargetNotFound,
    /// A HorizontalPodAutoscaler scales the Deployment; the message names it.
    Conflict(String),
    /// The assignment names a workload the agent cannot scale.
    Unsupported(String),
}

/// `spec.replicas` with the API's default of 1.
pub fn spec_replicas(deployment: &Deployment) -> i32 {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1)
}

/// The scale request id stamped on a Deployment ("" when none).
pub fn stamped_request_id(deployment: &Deployment) -> &str {
    deployment
        .annotations()
        .get(SCALE_REQUEST_ANNOTATION)
        .map_or("", String::as_str)
}

/// The HorizontalPodAutoscaler among `hpas` that scales Deployment `name`, if any.
pub fn scaling_hpa<'a>(
    name: &str,
    hpas: impl IntoIterator<Item = &'a HorizontalPodAutoscaler>,
) -> Option<&'a HorizontalPodAutoscaler> {
    hpas.into_iter().find(|hpa| {
        hpa.spec.as_ref().is_some_and(|spec| {
            let target = &spec.scale_target_ref;
            target.kind == "Deployment" && target.name == name
        })
    })
}

/// Judges `deployment` (absent: not found) against `target`, given the namespace's HPAs.
pub fn verdict<'a>(
    target: &ScaleSpec,
    deployment: Option<&Deployment>,
    hpas: impl IntoIterator<Item = &'a HorizontalPodAutoscaler>,
) -> Verdict {
    if !target.is_deployment() {
        return Verdict::Unsupported(format!(
            "the agent scales apps/v1 Deployments; {} {} is not supported",
            target.api_version, target.kind
        ));
    }
    if target.namespace.is_empty() || target.name.is_empty() {
        return Verdict::Unsupported("the assignment names no namespace or no name".to_owned());
    }
    let Some(deployment) = deployment else {
        return Verdict::TargetNotFound;
    };
    if let Some(hpa) = scaling_hpa(&target.name, hpas) {
        return Verdict::Conflict(format!(
            "HorizontalPodAutoscaler {}/{} scales Deployment {}; the agent leaves its replicas alone",
            hpa.metadata
                .namespace
                .as_deref()
                .unwrap_or(&target.namespace),
            hpa.metadata.name.as_deref().unwrap_or_default(),
            target.name,
        ));
    }
    if spec_replicas(deployment) == target.replicas
        && stamped_request_id(deployment) == target.scale_request_id
    {
        Verdict::Synced
    } else {
        Verdict::NeedsApply
    }
}

/// How many replicas of `deployment`'s pod template fit in the member, by `room` (the
/// capacity counter's last count), its own pods counted as room.
pub fn fitting(deployment: &Deployment, room: &Room) -> i64 {
    let Some(spec) = deployment.spec.as_ref() else {
        return 0;
    };
    let namespace = deployment.metadata.namespace.as_deref().unwrap_or_default();
    let per_pod = spec_request(&spec.template.spec.clone().unwrap_or_default());
    room.fits(namespace, &spec.selector, per_pod)
}

/// What to tell the hub about `target` (assigned at `applied_revision`), from the verdict,
/// the Deployment it was made on, the last apply error (if the last apply failed), and
/// the replicas that fit ([`fitting`], `None` before the first count).
pub fn report(
    target: &ScaleSpec,
    applied_revision: i64,
    verdict: &Verdict,
    deployment: Option<&Deployment>,
    apply_error: Option<&ApplyError>,
    fitting_replicas: Option<i64>,
) -> Report {
    let (state, message) = match verdict {
        Verdict::Synced => (PlacementState::Synced, String::new()),
        Verdict::NeedsApply => match apply_error {
            Some(error) => (PlacementState::Error, error.message.clone()),
            None => (
                PlacementState::Pending,
                format!("setting {} replicas", target.replicas),
            ),
        },
        Verdict::TargetNotFound => (
            PlacementState::TargetNotFound,
            format!(
                "Deployment {}/{} does not exist in this cluster",
                target.namespace, target.name
            ),
        ),
        Verdict::Conflict(message) => (PlacementState::Conflict, message.clone()),
        Verdict::Unsupported(message) => (PlacementState::Error, message.clone()),
    };
    let Some(deployment) = deployment else {
        return Report::without_object(state, message, applied_revision);
    };
    let status = deployment.status.as_ref();
    Report {
        state,
        message,
        resource_version: deployment
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default(),
        generation: deployment.metadata.generation.unwrap_or_default(),
        observed: Observed::Scale(ScaleObserved {
            desired: spec_replicas(deployment),
            ready: status.and_then(|s| s.ready_replicas).unwrap_or_default(),
            updated: status.and_then(|s| s.updated_replicas).unwrap_or_default(),
            observed_generation: status
                .and_then(|s| s.observed_generation)
                .unwrap_or_default(),
            scale_request_id: stamped_request_id(deployment).to_owned(),
            fitting_replicas,
        }),
        applied_revision,
        api_server_unavailable: false,
    }
}

/// The server-side apply patch that sets `target`'s replicas and scale request id — and
/// nothing else, so the agent's field manager owns exactly these two fields.
pub fn scale_patch(target: &ScaleSpec) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": target.name,
            "namespace": target.namespace,
            "annotations": { SCALE_REQUEST_ANNOTATION: target.scale_request_id },
        },
        "spec": { "replicas": target.replicas },
    })
}

/// `spec.replicas` as a managedFields path.
fn replicas_path() -> [String; 2] {
    ["f:spec".to_owned(), "f:replicas".to_owned()]
}

/// The repair an apply of `target` makes to `deployment`, if it is one: the agent set this
/// scale request before (the Deployment carries its id) and another writer changed the
/// replicas since.
pub fn repair(target: &ScaleSpec, deployment: &Deployment) -> Option<Repair> {
    (stamped_request_id(deployment) == target.scale_request_id
        && spec_replicas(deployment) != target.replicas)
        .then(|| Repair {
            object: format!("Deployment {}/{}", target.namespace, target.name),
            fields: vec!["spec.replicas".to_owned()],
            by: owner_of(
                deployment.metadata.managed_fields.as_deref(),
                &replicas_path(),
                AGENT_FIELD_MANAGER,
            )
            .unwrap_or_else(|| "another manager".to_owned()),
        })
}

/// Drops what the agent never reads from a watched Deployment, to keep its cache small:
/// of its managed fields, only who owns `spec.replicas` stays.
pub fn slim_deployment(deployment: &mut Deployment) {
    let path = replicas_path();
    if let Some(entries) = deployment.metadata.managed_fields.as_mut() {
        entries.retain(|e| owner_of(Some(std::slice::from_ref(e)), &path, "").is_some());
        for e in entries.iter_mut() {
            e.fields_v1 = Some(FieldsV1(serde_json::json!({"f:spec": {"f:replicas": {}}})));
        }
    }
    if let Some(annotations) = deployment.metadata.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    if let Some(spec) = deployment.spec.as_mut() {
        // Of the pod template, only what a pod requests ([`fitting`]).
        let requests = |c: &Container| Container {
            name: c.name.clone(),
            resources: c.resources.as_ref().map(|r| ResourceRequirements {
                requests: r.requests.clone(),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        };
        let template = std::mem::take(&mut spec.template);
        spec.template.spec = template.spec.map(|pod| PodSpec {
            containers: pod.containers.iter().map(requests).collect(),
            init_containers: pod
                .init_containers
                .map(|init| init.iter().map(requests).collect()),
            overhead: pod.overhead,
            ..PodSpec::default()
        });
    }
    if let Some(status) = deployment.status.as_mut() {
        status.conditions = None;
    }
}

/// Drops what the agent never reads from a watched HorizontalPodAutoscaler.
pub fn slim_hpa(hpa: &mut HorizontalPodAutoscaler) {
    hpa.metadata.managed_fields = None;
    hpa.metadata.annotations = None;
    hpa.status = None;
    if let Some(spec) = hpa.spec.as_mut() {
        spec.metrics = None;
        spec.behavior = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(replicas: i32) -> ScaleSpec {
        ScaleSpec::deployment("prod", "frontend", replicas, "01JREQ")
    }

    fn deployment(replicas: i32, request_id: Option<&str>) -> Deployment {
        let mut annotations = serde_json::Map::new();
        if let Some(id) = request_id {
            annotations.insert(SCALE_REQUEST_ANNOTATION.into(), id.into());
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "frontend", "namespace": "prod", "resourceVersion": "881",
                         "generation": 5, "annotations": annotations},
            "spec": {"replicas": replicas, "selector": {}, "template": {}},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "observedGeneration": 4},
        }))
        .unwrap()
    }

    fn hpa(name: &str, kind: &str, target: &str) -> HorizontalPodAutoscaler {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "prod"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target},
                     "maxReplicas": 10},
        }))
        .unwrap()
    }

    #[test]
    fn matching_replicas_and_request_id_are_synced() {
        let d = deployment(7, Some("01JREQ"));
        assert_eq!(verdict(&target(7), Some(&d), []), Verdict::Synced);
        let r = report(&target(7), 42, &Verdict::Synced, Some(&d), None, None);
        assert_eq!(r.state, PlacementState::Synced);
        assert_eq!(r.resource_version, "881");
        assert_eq!(r.generation, 5);
        assert_eq!(
            r.observed,
            Observed::Scale(ScaleObserved {
                desired: 7,
                ready: 2,
                updated: 3,
                observed_generation: 4,
                scale_request_id: "01JREQ".into(),
                fitting_replicas: None,
            })
        );
        assert_eq!(r.applied_revision, 42);
    }

    #[test]
    fn other_replicas_or_an_old_request_id_need_an_apply() {
        assert_eq!(
            verdict(&target(7), Some(&deployment(3, Some("01JREQ"))), []),
            Verdict::NeedsApply
        );
        assert_eq!(
            verdict(&target(7), Some(&deployment(7, Some("older"))), []),
            Verdict::NeedsApply
        );
        assert_eq!(
            verdict(&target(7), Some(&deployment(7, None)), []),
            Verdict::NeedsApply
        );
    }

    #[test]
    fn replicas_another_manager_changed_after_this_request_are_a_repair_naming_it() {
        let mut d = deployment(3, Some("01JREQ"));
        d.metadata.managed_fields = Some(
            serde_json::from_value(serde_json::json!([
                {"manager": "accord-agent", "operation": "Apply",
                 "fieldsV1": {"f:metadata": {"f:annotations": {}}}},
                {"manager": "keda", "operation": "Update",
                 "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                {"manager": "kube-controller-manager", "operation": "Update",
                 "fieldsV1": {"f:status": {"f:replicas": {}}}}
            ]))
            .unwrap(),
        );
        slim_deployment(&mut d);
        let managers: Vec<_> = d
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|e| e.manager.as_deref())
            .collect();
        assert_eq!(managers, ["keda"], "only who owns spec.replicas is kept");
        let r = repair(&target(7), &d).unwrap();
        assert_eq!(r.by, "keda");
        assert_eq!(r.fields, ["spec.replicas"]);
        assert_eq!(r.object, "Deployment prod/frontend");
        // A new request, or replicas as assigned, is no repair.
        assert_eq!(repair(&target(3), &d), None);
        assert_eq!(repair(&target(7), &deployment(3, Some("older"))), None);
        assert_eq!(
            repair(&target(7), &deployment(3, Some("01JREQ")))
                .unwrap()
                .by,
            "another manager"
        );
    }

    #[test]
    fn a_pending_apply_reports_pending_and_a_failed_one_reports_the_error() {
        let d = deployment(3, None);
        let r = report(&target(7), 42, &Verdict::NeedsApply, Some(&d), None, None);
        assert_eq!(r.state, PlacementState::Pending);
        let r = report(
            &target(7),
            42,
            &Verdict::NeedsApply,
            Some(&d),
            Some(&crate::enforce::ApplyError::new(
                crate::enforce::ApplyErrorKind::Forbidden,
                "admission webhook denied",
            )),
            None,
        );
        assert_eq!(r.state, PlacementState::Error);
        assert_eq!(r.message, "admission webhook denied");
    }

    #[test]
    fn an_hpa_on_the_deployment_is_a_conflict_naming_the_hpa() {
        let d = deployment(3, None);
        let hpas = [
            hpa("other", "Deployment", "backend"),
            hpa("web-hpa", "Deployment", "frontend"),
        ];
        let v = verdict(&target(7), Some(&d), &hpas);
        let Verdict::Conflict(message) = &v else {
            panic!("expected a conflict, got {v:?}");
        };
        assert!(message.contains("prod/web-hpa"), "{message}");
        let r = report(&target(7), 42, &v, Some(&d), None, None);
        assert_eq!(r.state, PlacementState::Conflict);
        assert_eq!(r.observed.scale().unwrap().desired, 3);
    }

    #[test]
    fn an_hpa_on_another_kind_with_the_same_name_is_no_conflict() {
        let d = deployment(3, None);
        let hpas = [hpa("ss", "StatefulSet", "frontend")];
        assert_eq!(verdict(&target(7), Some(&d), &hpas), Verdict::NeedsApply);
    }

    #[test]
    fn a_missing_deployment_is_target_not_found_even_with_an_hpa() {
        let hpas = [hpa("web-hpa", "Deployment", "frontend")];
        let v = verdict(&target(7), None, &hpas);
        assert_eq!(v, Verdict::TargetNotFound);
        let r = report(&target(7), 42, &v, None, None, None);
        assert_eq!(r.state, PlacementState::TargetNotFound);
        assert!(r.message.contains("prod/frontend"), "{}", r.message);
        assert_eq!(r.observed, Observed::Nothing);
        assert_eq!(r.resource_version, "");
    }

    #[test]
    fn other_workload_kinds_are_an_error() {
        let mut t = target(2);
        t.kind = "StatefulSet".into();
        let v = verdict(&t, None, []);
        assert!(matches!(v, Verdict::Unsupported(_)), "{v:?}");
        assert_eq!(
            report(&t, 1, &v, None, None, None).state,
            PlacementState::Error
        );
    }

    #[test]
    fn an_unset_replica_count_counts_as_one() {
        let mut d = deployment(1, Some("01JREQ"));
        d.spec.as_mut().unwrap().replicas = None;
        assert_eq!(verdict(&target(1), Some(&d), []), Verdict::Synced);
    }

    #[test]
    fn the_apply_patch_holds_only_replicas_and_the_annotation() {
        let patch = scale_patch(&target(7));
        assert_eq!(
            patch,
            serde_json::json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": "frontend",
                    "namespace": "prod",
                    "annotations": {"accord.io/scale-request-id": "01JREQ"},
                },
                "spec": {"replicas": 7},
            })
        );
    }

    #[test]
    fn slimming_keeps_what_verdicts_and_reports_read() {
        let mut d = deployment(7, Some("01JREQ"));
        let before = report(&target(7), 42, &Verdict::Synced, Some(&d), None, None);
        slim_deployment(&mut d);
        assert_eq!(verdict(&target(7), Some(&d), []), Verdict::Synced);
        assert_eq!(
            report(&target(7), 42, &Verdict::Synced, Some(&d), None, None),
            before
        );
        let mut h = hpa("web-hpa", "Deployment", "frontend");
        slim_hpa(&mut h);
        assert!(scaling_hpa("frontend", [&h]).is_some());
    }

    #[test]
    fn slimming_keeps_what_a_pod_of_the_template_requests() {
        let mut d: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "frontend", "namespace": "prod"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [{"name": "web", "image": "nginx", "env": [{"name": "A", "value": "1"}],
                                    "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "1"}}}],
                    "initContainers": [{"name": "init", "image": "busybox",
                                        "resources": {"requests": {"memory": "1Gi"}}}],
                    "overhead": {"cpu": "50m"},
                },
            }},
        }))
        .unwrap();
        let full = spec_request(d.spec.as_ref().unwrap().template.spec.as_ref().unwrap());
        slim_deployment(&mut d);
        let template = &d.spec.as_ref().unwrap().template;
        assert!(template.metadata.is_none());
        let pod = template.spec.as_ref().unwrap();
        assert_eq!(pod.containers[0].image, None);
        assert_eq!(pod.containers[0].env, None);
        assert_eq!(spec_request(pod), full);
        // Room for it: one node of 1 CPU and 4Gi holds 3 (CPU: 1000 / 300).
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "status": {"allocatable": {"cpu": "1", "memory": "4Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
        assert_eq!(fitting(&d, &Room::of(&[node], &[])), 3);
    }
}
