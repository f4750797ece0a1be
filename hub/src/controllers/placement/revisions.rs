//! The revision history of objects that roll out progressively, as Kubernetes keeps a
//! Deployment's: one `ControllerRevision` (apps/v1) per revision in the object's namespace,
//! owned by the object (so it goes with it), readable with a kubeconfig alone
//! (`kubectl get controllerrevisions -l accord.io/owner-uid=UID`, or
//! `kubectl accord rollout history KIND/NAME`).
//!
//! One create per new revision (a user's change of the spec), one patch of its
//! `accord.io/outcome` annotation when its rollout ends, and at most [`KEPT`] revisions per
//! object (older ones deleted when a new one is made). `data.spec` is the spec without
//! `spec.rollout`: what `kubectl accord rollout undo` writes back.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{DeleteParams, ListParams, PostParams};

use super::*;
use crate::distribution::rollout::RolloutRecord;

/// Label naming the uid of the object a revision belongs to.
pub const OWNER_UID_LABEL: &str = "accord.io/owner-uid";
/// Annotation naming the object's kind.
pub const KIND_ANNOTATION: &str = "accord.io/kind";
/// Annotation with the revision's hash (`status.rollout.revision`).
pub const HASH_ANNOTATION: &str = "accord.io/revision";
/// Annotation with the object's generation when the revision was first seen.
pub const GENERATION_ANNOTATION: &str = "accord.io/generation";
/// Annotation with how the revision's rollout ended (`Succeeded`, `RolledBack`, `Failed`).
pub const OUTCOME_ANNOTATION: &str = "accord.io/outcome";
/// Revisions kept per object.
pub const KEPT: usize = 10;

/// The name of `record`'s revision of `object` (`<kind>-<name>-<hash>`, within 253).
pub fn revision_name(kind: &str, object: &str, hash: &str) -> String {
    let mut head = format!("{}-{object}", kind.to_lowercase());
    head.truncate(253 - 1 - hash.len().min(16));
    format!("{head}-{}", &hash[..hash.len().min(16)])
}

/// Creates the ControllerRevision of `record` for `object` (whose spec is `spec`), then
/// deletes the object's oldest beyond [`KEPT`]. A revision of the same content that exists
/// already (an undo) takes `record`'s number.
pub async fn record<K: PlacementKind>(
    ctx: &ControllerContext,
    object: &K::Object,
    spec: &serde_json::Value,
    record: &RolloutRecord,
) -> Result<(), kube::Error> {
    let meta = object.meta();
    let namespace = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let uid = meta.uid.clone().unwrap_or_default();
    let spec = crate::distribution::rollout::without_rollout(Some(spec));
    let revision = ControllerRevision {
        metadata: kube::api::ObjectMeta {
            name: Some(revision_name(K::KIND.as_str(), &name, &record.revision)),
            namespace: Some(namespace.clone()),
            labels: Some([(OWNER_UID_LABEL.to_owned(), uid.clone())].into()),
            annotations: Some(
                [
                    (KIND_ANNOTATION.to_owned(), K::KIND.as_str().to_owned()),
                    (HASH_ANNOTATION.to_owned(), record.revision.clone()),
                    (
                        GENERATION_ANNOTATION.to_owned(),
                        record.generation.to_string(),
                    ),
                ]
                .into(),
            ),
            owner_references: Some(vec![OwnerReference {
                api_version: K::Object::api_version(&()).into_owned(),
                kind: K::Object::kind(&()).into_owned(),
                name: name.clone(),
                uid: uid.clone(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..Default::default()
        },
        data: Some(RawExtension(serde_json::json!({ "spec": spec }))),
        revision: record.number,
    };
    let api: Api<ControllerRevision> = Api::namespaced(ctx.kube.clone(), &namespace);
    match api.create(&PostParams::default(), &revision).await {
        Ok(_) => {}
        // The same content again (an undo, or a spec changed back): as a Deployment's
        // history does, the revision takes the new number, and its old outcome goes.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let again = serde_json::json!({
                "revision": record.number,
                "metadata": {"annotations": {
                    OUTCOME_ANNOTATION: null,
                    GENERATION_ANNOTATION: record.generation.to_string(),
                }},
            });
            let name = revision.metadata.name.clone().unwrap_or_default();
            api.patch(&name, &PatchParams::default(), &Patch::Merge(again))
                .await?;
            return Ok(());
        }
        Err(e) => return Err(e),
    }
    let listed = api
        .list(&ListParams::default().labels(&format!("{OWNER_UID_LABEL}={uid}")))
        .await?;
    let mut kept: Vec<(i64, String)> = listed
        .items
        .into_iter()
        .filter_map(|r| Some((r.revision, r.metadata.name?)))
        .collect();
    kept.sort_unstable();
    let extra = kept.len().saturating_sub(KEPT);
    for (_, old) in kept.into_iter().take(extra) {
        match api.delete(&old, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Notes on `record`'s revision of `object` how its rollout ended.
pub async fn outcome<K: PlacementKind>(
    ctx: &ControllerContext,
    object: &K::Object,
    record: &RolloutRecord,
) -> Result<(), kube::Error> {
    let meta = object.meta();
    let namespace = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(ctx.kube.clone(), &namespace);
    let patch = serde_json::json!({"metadata": {"annotations": {
        OUTCOME_ANNOTATION: format!("{:?}", record.progress.phase)
    }}});
    match api
        .patch(
            &revision_name(K::KIND.as_str(), &name, &record.revision),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revision_is_named_by_kind_object_and_hash_within_the_limit() {
        assert_eq!(
            revision_name("FederatedResource", "web", "80773db19fcff5e3"),
            "federatedresource-web-80773db19fcff5e3"
        );
        let long = "x".repeat(253);
        let name = revision_name("FederatedResource", &long, "80773db19fcff5e3");
        assert_eq!(name.len(), 253);
        assert!(name.ends_with("-80773db19fcff5e3"));
    }
}
