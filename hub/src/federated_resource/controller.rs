//! FederatedResource as a [`PlacementKind`]: validate → select clusters → each cluster's
//! manifests with its overrides ([`plan`]) → the agents' reports → status. Deletion waits
//! for the members (finalizer [`FINALIZER`]): the record becomes a tombstone and the object
//! goes once every member that was sent something reported it removed (or orphaned), or
//! after `--resource-deletion-timeout` with a Warning Event naming who was left.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accord_common::distribution::{FederatedResourceSpec, Observed, PlacedKind, PlacementState};
use accord_crds::federated_resource::ResourcePlacement;
use accord_crds::{FederatedResource, FederatedResourceStatus};
use kube::runtime::reflector::Store as Reflector;
use tracing::info;

use super::plan::{self, ClusterPlan};
use super::status::{aggregate, notes};
use super::{FINALIZER, FederatedResourceDecision};
use crate::controllers::placement::{
    self, DecideInput, Decided, Note, PlacementKind, Reported, Started, StatusInput, Trigger,
    Watched,
};
use crate::controllers::tombstones::{self, Removal, Tombstoned};
use crate::controllers::transitions;
use crate::controllers::{ControllerContext, ReconcileError};
use crate::distribution::{PlacementRecord, deletion};
use crate::store::StatusRecord;

tombstones::deletion_options! {
    /// The FederatedResource settings of `serve`.
    pub struct FederatedResourceOptions;
    /// How long deleting a FederatedResource waits for every member to remove (or orphan)
    /// what it was sent; after it, the object goes anyway with a Warning Event naming the
    /// members left behind.
    flag = "resource-deletion-timeout",
    id = "resource_deletion_timeout",
    value_name = "RESOURCE_DELETION_TIMEOUT";
}

/// The FederatedResource plug-in.
pub struct FederatedResources {
    ctx: Arc<ControllerContext>,
    options: FederatedResourceOptions,
}

impl PlacementKind for FederatedResources {
    type Object = FederatedResource;
    type Status = FederatedResourceStatus;
    type Decision = FederatedResourceDecision;
    type Facts = BTreeMap<String, ClusterPlan>;
    type Options = FederatedResourceOptions;

    const CONTROLLER: &'static str = "FederatedResource controller";
    const KIND: PlacedKind = PlacedKind::FederatedResource;
    const DECISION_TAG: &'static str = "federatedResource";
    // A delivered workload's `spec.replicas` is left to the CrossClusterScalePolicy that
    // claims it.
    const READS_FIELD_CLAIMS: bool = true;

    /// Every FederatedResource is decided again when the field claims change (only those
    /// delivering a claimed object get a new decision), and when Secrets they name change.
    fn start(
        ctx: &Arc<ControllerContext>,
        objects: Reflector<Watched<Self>>,
        trigger: Trigger<Self>,
        options: &FederatedResourceOptions,
    ) -> Started<Self> {
        let claims_changed =
            placement::trigger_on_claims::<Self>(ctx, objects.clone(), trigger.clone());
        let secret_changes = crate::controllers::secret_changes::trigger_on_secret_changes::<Self>(
            ctx.clone(),
            objects,
            trigger,
            secret_names,
        );
        Started {
            kind: Self {
                ctx: ctx.clone(),
                options: options.clone(),
            },
            tasks: vec![Box::pin(claims_changed), Box::pin(secret_changes)],
            listed: Box::pin(async { true }),
        }
    }

    /// A cluster's labels also choose the overrides it gets, so an object with an override
    /// by selector may care about any cluster.
    fn may_select(object: &Watched<Self>, cluster: &str) -> bool {
        let overrides_by_labels = object
            .pointer("/spec/overrides")
            .and_then(serde_json::Value::as_array)
            .is_some_and(|o| o.iter().any(|o| o.get("clusterSelector").is_some()));
        overrides_by_labels || placement::selection_may_include(object, cluster)
    }

    fn rollout(object: &FederatedResource) -> Option<&accord_crds::rollout::Rollout> {
        object.spec.rollout.as_ref()
    }

    fn rollout_status(
        status: &mut FederatedResourceStatus,
    ) -> Option<&mut Option<accord_crds::rollout::RolloutStatus>> {
        Some(&mut status.rollout)
    }

    fn set_revision(line: &mut accord_crds::ResourcePlacement, revision: Option<String>) {
        line.revision = revision;
    }

    fn placement(object: &FederatedResource) -> Option<&accord_crds::ClusterPlacement> {
        Some(&object.spec.placement)
    }

    fn decide(
        &self,
        object: &FederatedResource,
        input: &DecideInput<'_, FederatedResourceDecision>,
    ) -> Decided<Self> {
        let selected = match placement::valid_selection(&object.spec, input) {
            Ok(selected) => selected,
            Err(why) => return Decided::Invalid(why),
        };
        let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
        let mut secrets = Vec::with_capacity(object.spec.secret_refs.len());
        for (i, r) in object.spec.secret_refs.iter().enumerate() {
            match self.ctx.secrets.reference(namespace, &r.name) {
                Some(secret) => secrets.push(secret),
                None => {
                    return Decided::Invalid(format!(
                        "spec.secretRefs[{i}]: there is no Secret {namespace}/{} on the \
                         management cluster",
                        r.name
                    ));
                }
            }
        }
        let created = object
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default();
        let planned = plan::plan(
            &object.spec,
            plan::Origin {
                namespace,
                created: &created,
            },
            &selected,
            input.clusters,
            input.previous,
            &self
                .ctx
                .field_owners
                .owners("spec.replicas", input.clusters, |kind, name| {
                    plan::names_object(&object.spec, kind, name)
                }),
            &secrets,
        );
        Decided::Record {
            shares: planned.shares,
            decision: FederatedResourceDecision::default(),
            facts: planned.clusters,
            recheck_after: None,
        }
    }

    fn announce(
        &self,
        _object: &FederatedResource,
        record: &PlacementRecord<FederatedResourceDecision>,
        revision: i64,
    ) -> Option<Note> {
        let clusters: Vec<&str> = record.shares.iter().map(|s| s.cluster.as_str()).collect();
        info!(placed = %record.placed, ?clusters, revision, "resource placements");
        None
    }

    async fn status_of(
        &self,
        object: &FederatedResource,
        input: StatusInput<'_, Self>,
    ) -> Result<Reported<FederatedResourceStatus>, ReconcileError> {
        Ok(placement::aggregated(object, &input, aggregate, notes))
    }

    tombstones::tombstoned!();

    /// Every manifest applied and healthy.
    fn healthy(line: &ResourcePlacement) -> bool {
        line.state == PlacementState::Synced && line.available == line.applied
    }
}

impl Tombstoned for FederatedResources {
    const FINALIZER: &'static str = FINALIZER;

    fn context(&self) -> &ControllerContext {
        &self.ctx
    }

    fn is_tombstone(record: &PlacementRecord<FederatedResourceDecision>) -> bool {
        record.decision.remove
    }

    /// Every cluster that was sent something is now sent `remove: true`.
    fn tombstone(
        record: &PlacementRecord<FederatedResourceDecision>,
    ) -> Option<PlacementRecord<FederatedResourceDecision>> {
        let remove = |spec: &FederatedResourceSpec| FederatedResourceSpec {
            remove: true,
            ..spec.clone()
        };
        deletion::tombstone(record, remove, FederatedResourceDecision { remove: true })
    }

    /// Everything the cluster was sent is removed (or orphaned).
    fn is_gone(report: &StatusRecord) -> bool {
        report.state == PlacementState::Synced
            && matches!(&report.observed, Observed::FederatedResource(o) if o.removed)
    }

    fn deletion_timeout(&self) -> Duration {
        self.options.deletion_timeout
    }

    fn removal(
        &self,
        object: &Watched<Self>,
        _tombstone: &PlacementRecord<FederatedResourceDecision>,
    ) -> Removal {
        let orphaned = object
            .pointer("/spec/deletionPolicy")
            .and_then(serde_json::Value::as_str)
            == Some("Orphan");
        Removal {
            subject: "the delivered objects were".to_owned(),
            gone: "removed",
            it: "the objects",
            done: if orphaned {
                Note::normal(
                    transitions::reasons::ORPHANED,
                    "the delivered objects are left in every member, without Accord's marks",
                )
            } else {
                Note::normal(
                    transitions::reasons::DELETED,
                    "the delivered objects are removed from every member",
                )
            },
        }
    }
}

/// The Secrets a watched FederatedResource names (`spec.secretRefs[].name`).
fn secret_names(o: &Watched<FederatedResources>) -> Vec<String> {
    o.pointer("/spec/secretRefs")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("name").and_then(|n| n.as_str()).map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::ShareRecord;
    use accord_common::distribution::AssignmentSpec;
    use accord_common::distribution::{FederatedResourceObserved, PlacedRef};

    fn share(cluster: &str, sent: bool) -> ShareRecord {
        ShareRecord {
            since: None,
            cluster: cluster.into(),
            assignment: sent.then(|| AssignmentSpec::FederatedResource(Default::default())),
            held_reason: (!sent).then(|| "no ManagedCluster ghost".into()),
            hold: None,
        }
    }

    #[test]
    fn a_rollout_hears_healthy_only_where_every_manifest_is_applied_and_available() {
        use crate::distribution::rollout::{Heard, heard};
        let line = |cluster: &str, state, applied, available, message: Option<&str>| {
            serde_json::from_value::<ResourcePlacement>(serde_json::json!({
                "cluster": cluster, "state": state, "applied": applied,
                "available": available, "message": message,
            }))
            .unwrap()
        };
        let status = FederatedResourceStatus {
            placements: vec![
                line("east", "Synced", 3, 3, None),
                line("west", "Synced", 3, 2, Some("1 of 3 not available")),
                line("north", "Error", 1, 1, Some("admission webhook denied")),
                line("south", "Pending", 0, 0, Some("waiting for the agent")),
            ],
            ..FederatedResourceStatus::default()
        };
        let heard = heard(&status, FederatedResources::healthy);
        assert_eq!(heard["east"], Heard::Healthy);
        assert_eq!(
            heard["west"],
            Heard::Unhealthy("1 of 3 not available".into()),
            "applied, not healthy: breaks a soak, and is the reason at the deadline"
        );
        assert_eq!(
            heard["north"],
            Heard::Unhealthy("admission webhook denied".into())
        );
        assert_eq!(heard["south"], Heard::Nothing);
    }

    #[test]
    fn the_tombstone_removes_only_where_something_was_sent() {
        let record = PlacementRecord {
            placed: PlacedRef::new(PlacedKind::FederatedResource, "team", "app"),
            generation: 1,
            decided_unix_millis: 0,
            shares: vec![share("east", true), share("ghost", false)],
            decision: FederatedResourceDecision::default(),
            traceparent: String::new(),
        };
        let t = FederatedResources::tombstone(&record).unwrap();
        assert!(t.decision.remove);
        assert_eq!(t.shares.len(), 1);
        assert!(matches!(
            &t.shares[0].assignment,
            Some(AssignmentSpec::FederatedResource(a)) if a.remove
        ));
        let mut nothing = record.clone();
        nothing.shares.retain(|s| s.assignment.is_none());
        assert!(FederatedResources::tombstone(&nothing).is_none());
    }

    #[test]
    fn only_a_synced_report_of_removal_counts() {
        let mut r = StatusRecord {
            resource_version: String::new(),
            generation: 0,
            applied_revision: 3,
            state: PlacementState::Synced,
            message: String::new(),
            observed_unix_millis: 0,
            observed: Observed::FederatedResource(FederatedResourceObserved {
                removed: true,
                ..Default::default()
            }),
            api_server_unavailable: false,
        };
        assert!(FederatedResources::is_gone(&r));
        r.state = PlacementState::Error;
        assert!(!FederatedResources::is_gone(&r));
        r.state = PlacementState::Synced;
        r.observed = Observed::FederatedResource(FederatedResourceObserved::default());
        assert!(!FederatedResources::is_gone(&r));
    }
}
