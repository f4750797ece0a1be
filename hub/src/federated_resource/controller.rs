//! FederatedResource as a [`PlacementKind`]: validate → select clusters → each cluster's
//! manifests with its overrides ([`plan`]) → the agents' reports → status. Deletion waits
//! for the members (finalizer [`FINALIZER`]): the record becomes a tombstone and the object
//! goes once every member that was sent something reported it removed (or orphaned), or
//! after `--resource-deletion-timeout` with a Warning Event naming who was left.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accord_common::distribution::{AssignmentSpec, Observed, PlacedKind, PlacementState};
use accord_crds::{FederatedResource, FederatedResourceStatus};
use kube::runtime::reflector::Store as Reflector;
use tracing::info;

use super::plan::{self, ClusterPlan};
use super::status::{StatusInputs, aggregate, drift_repairs};
use super::{FINALIZER, FederatedResourceDecision, reasons};
use crate::controllers::placement::{
    self, DecideInput, Decided, Finalized, Note, PlacementKind, Reported, Started, StatusInput,
    Trigger, Watched,
};
use crate::controllers::tombstones::{self, Removal, Tombstoned};
use crate::controllers::transitions::{self, Meaning};
use crate::controllers::{ControllerContext, ReconcileError};
use crate::distribution::PlacementRecord;
use crate::store::StatusRecord;

/// Default of `--resource-deletion-timeout`.
pub const DEFAULT_RESOURCE_DELETION_TIMEOUT: Duration = Duration::from_secs(300);

/// The FederatedResource settings of `serve`.
#[derive(Clone, Debug, clap::Args)]
pub struct FederatedResourceOptions {
    /// How long deleting a FederatedResource waits for every member to remove (or orphan)
    /// what it was sent; after it, the object goes anyway with a Warning Event naming the
    /// members left behind.
    #[arg(
        id = "resource_deletion_timeout",
        value_name = "RESOURCE_DELETION_TIMEOUT",
        long = "resource-deletion-timeout",
        default_value = "5m",
        value_parser = accord_crds::duration::parse_flag
    )]
    pub deletion_timeout: Duration,
}

impl Default for FederatedResourceOptions {
    fn default() -> Self {
        Self {
            deletion_timeout: DEFAULT_RESOURCE_DELETION_TIMEOUT,
        }
    }
}

/// What a FederatedResource's conditions say: `Applied` in every cluster, healthy while
/// `Available`.
const MEANING: Meaning = Meaning {
    applied: Some(super::status::APPLIED),
    healthy: (accord_crds::conditions::types::AVAILABLE, true),
};

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
    // Only this controller writes the kind's records (see PlacementKind::DECISION_LOCK).
    const DECISION_LOCK: bool = false;
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
        let old = object.status.as_ref();
        let status = aggregate(&StatusInputs {
            placed: input.placed(),
            plans: &input.facts,
            generation: object.metadata.generation,
            old,
            now: input.now,
        });
        let mut notes = transitions::of_statuses(
            old.map(|o| (o.placements.as_slice(), o.conditions.as_slice())),
            (&status.placements, &status.conditions),
            object.metadata.generation,
            MEANING,
        );
        notes.extend(
            drift_repairs(old, &status)
                .into_iter()
                .map(|n| Note::normal(reasons::DRIFT_REPAIRED, n)),
        );
        Ok(Reported {
            status,
            notes,
            retry: None,
        })
    }

    fn finalizer(_object: &Watched<Self>) -> Option<&'static str> {
        Some(FINALIZER)
    }

    /// The deletion waits for the members ([`tombstones::finalize`]).
    async fn finalize(
        &self,
        object: &Watched<Self>,
        record: Option<(PlacementRecord<FederatedResourceDecision>, i64)>,
    ) -> Result<Finalized, ReconcileError> {
        tombstones::finalize(self, &self.ctx, object, record).await
    }
}

impl Tombstoned for FederatedResources {
    fn is_tombstone(record: &PlacementRecord<FederatedResourceDecision>) -> bool {
        record.decision.remove
    }

    fn tombstone(
        record: &PlacementRecord<FederatedResourceDecision>,
    ) -> Option<PlacementRecord<FederatedResourceDecision>> {
        tombstone(record)
    }

    fn is_gone(report: &StatusRecord) -> bool {
        is_removed(report)
    }

    fn deletion_timeout(&self) -> Duration {
        self.options.deletion_timeout
    }

    fn removed(
        &self,
        object: &Watched<Self>,
        _tombstone: &PlacementRecord<FederatedResourceDecision>,
    ) -> Note {
        let orphaned = object
            .pointer("/spec/deletionPolicy")
            .and_then(serde_json::Value::as_str)
            == Some("Orphan");
        if orphaned {
            Note::normal(
                transitions::reasons::ORPHANED,
                "the delivered objects are left in every member, without Accord's marks",
            )
        } else {
            Note::normal(
                transitions::reasons::DELETED,
                "the delivered objects are removed from every member",
            )
        }
    }

    fn removal(
        &self,
        _object: &Watched<Self>,
        _tombstone: &PlacementRecord<FederatedResourceDecision>,
    ) -> Removal {
        Removal {
            subject: "the delivered objects were".to_owned(),
            gone: "removed",
            it: "the objects",
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

/// Whether `report` says everything the cluster was sent is removed (or orphaned).
fn is_removed(report: &StatusRecord) -> bool {
    report.state == PlacementState::Synced
        && matches!(&report.observed, Observed::FederatedResource(o) if o.removed)
}

/// The tombstone of `record`: only the clusters that were sent something, each now sent
/// `remove: true`. `None` when no cluster was sent anything.
fn tombstone(
    record: &PlacementRecord<FederatedResourceDecision>,
) -> Option<PlacementRecord<FederatedResourceDecision>> {
    let shares: Vec<_> = record
        .shares
        .iter()
        .filter_map(|s| match &s.assignment {
            Some(AssignmentSpec::FederatedResource(spec)) => {
                let mut share = s.clone();
                share.assignment = Some(AssignmentSpec::FederatedResource(
                    accord_common::distribution::FederatedResourceSpec {
                        remove: true,
                        ..spec.clone()
                    },
                ));
                share.held_reason = None;
                Some(share)
            }
            _ => None,
        })
        .collect();
    (!shares.is_empty()).then(|| PlacementRecord {
        shares,
        decision: FederatedResourceDecision { remove: true },
        ..record.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::ShareRecord;
    use accord_common::distribution::{FederatedResourceObserved, PlacedRef};

    fn share(cluster: &str, sent: bool) -> ShareRecord {
        ShareRecord {
            cluster: cluster.into(),
            assignment: sent.then(|| AssignmentSpec::FederatedResource(Default::default())),
            held_reason: (!sent).then(|| "no ManagedCluster ghost".into()),
            hold: None,
        }
    }

    #[test]
    fn the_tombstone_removes_only_where_something_was_sent() {
        let record = PlacementRecord {
            placed: PlacedRef::new(PlacedKind::FederatedResource, "team", "app"),
            generation: 1,
            decided_unix_millis: 0,
            shares: vec![share("east", true), share("ghost", false)],
            decision: FederatedResourceDecision::default(),
        };
        let t = tombstone(&record).unwrap();
        assert!(t.decision.remove);
        assert_eq!(t.shares.len(), 1);
        assert!(matches!(
            &t.shares[0].assignment,
            Some(AssignmentSpec::FederatedResource(a)) if a.remove
        ));
        let mut nothing = record.clone();
        nothing.shares.retain(|s| s.assignment.is_none());
        assert!(tombstone(&nothing).is_none());
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
        assert!(is_removed(&r));
        r.state = PlacementState::Error;
        assert!(!is_removed(&r));
        r.state = PlacementState::Synced;
        r.observed = Observed::FederatedResource(FederatedResourceObserved::default());
        assert!(!is_removed(&r));
    }
}
