//! The pure judgement of one FederatedResource assignment: from the prepared manifests,
//! what the watches show of their objects and what the enforcer remembers of its last
//! apply, decide each manifest's state and health, the placement's report and whether to
//! apply.
//!
//! An object is Accord's for a FederatedResource when it carries [`OWNED_BY_LABEL`] (the
//! watches see only those) and [`FEDERATED_RESOURCE_ANNOTATION`] naming the
//! FederatedResource. It needs an apply when it is missing, when its
//! [`MANIFEST_HASH_ANNOTATION`] is not the manifest's hash, when nothing was recorded of it
//! since the agent started, or when it drifted: the fields Accord's field manager owns
//! (`managedFields`, `fieldsV1`) are not the ones recorded after the last apply, because
//! another manager took some.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use accord_common::distribution::{
    FederatedResourceObserved, FederatedResourceSpec, ManifestKey, ManifestObserved, Observed,
    PlacedRef, PlacementState, health::MISSING,
};
use accord_crds::{
    DELIVERY_FIELD_MANAGER, FEDERATED_RESOURCE_ANNOTATION, FEDERATED_RESOURCE_CREATED_ANNOTATION,
    MANIFEST_HASH_ANNOTATION, OWNED_BY_LABEL,
};
use k8s_openapi::jiff;
use kube::ResourceExt as _;
use kube::api::DynamicObject;
use serde_json::Value;

use super::feedback;
use super::health::health;
use super::manifest::{Desired, Gvk, Prepared, placed_mark};
use crate::enforce::fight::{lost_fields, owner_of, render};
use crate::enforce::{Action, ApplyError, ApplyErrorKind, Judgement, Repair};
use crate::report::Report;

/// What the last apply did to one object.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Applied; `fields` are the `fieldsV1` Accord's field manager owned right after.
    Applied {
        /// Accord's `fieldsV1` in the API server's answer (`None`: it showed none).
        fields: Option<Value>,
    },
    /// Not applied: the member does not serve the type yet.
    Pending(String),
    /// Not applied: the object exists and is not this FederatedResource's to take.
    Conflict {
        /// Why.
        message: String,
        /// The existing object's health.
        health: &'static str,
    },
    /// The member refused the apply.
    Error(String),
}

/// What the last apply did to one object, for the manifest hash it applied (an outcome of
/// another hash says nothing about the current manifest).
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    /// [`Desired::hash`] of the manifest applied.
    pub hash: String,
    /// What happened.
    pub outcome: Outcome,
}

/// What the enforcer remembers of one FederatedResource between its applies and looks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    /// The last apply's outcome per object.
    pub outcomes: BTreeMap<ManifestKey, Recorded>,
    /// Drift repairs since the agent started.
    pub drift_repairs: i64,
    /// When the last one was made, Unix milliseconds (0: never).
    pub last_drift_unix_millis: i64,
}

/// What the watches show of the objects one FederatedResource names.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// Objects carrying Accord's delivery label, by key.
    pub objects: HashMap<ManifestKey, Arc<DynamicObject>>,
    /// Types the member's API server does not serve.
    pub not_served: BTreeSet<Gvk>,
    /// Types whose watch failed before it listed anything, with the error.
    pub failed: BTreeMap<Gvk, String>,
}

impl View {
    /// The watched object `key`, if there is one.
    pub fn object(&self, key: &ManifestKey) -> Option<&DynamicObject> {
        self.objects.get(key).map(AsRef::as_ref)
    }
}

/// The message of a manifest whose type the member does not serve.
pub fn not_served_message(gvk: &Gvk) -> String {
    format!(
        "the member API server does not serve {} {} yet",
        gvk.api_version, gvk.kind
    )
}

/// The [`FEDERATED_RESOURCE_ANNOTATION`] of `object` ("" when none).
pub fn delivered_by(object: &DynamicObject) -> &str {
    object
        .annotations()
        .get(FEDERATED_RESOURCE_ANNOTATION)
        .map_or("", String::as_str)
}

/// Whether `object` carries Accord's delivery marks for the FederatedResource marked `mark`: the
/// only objects Accord ever deletes or orphans.
pub fn is_marked_for(object: &DynamicObject, mark: &str) -> bool {
    let labelled = object
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(OWNED_BY_LABEL))
        .is_some_and(|v| v == accord_crds::DELIVERED_BY_FEDERATED_RESOURCE);
    labelled && delivered_by(object) == mark
}

/// Whether `object` is being deleted.
pub fn is_deleting(object: &DynamicObject) -> bool {
    object.metadata.deletion_timestamp.is_some()
}

/// The `fieldsV1` Accord's field manager owns in `object` by server-side apply.
pub fn accord_fields(object: &DynamicObject) -> Option<&Value> {
    object
        .metadata
        .managed_fields
        .as_ref()?
        .iter()
        .find(|e| {
            e.manager.as_deref() == Some(DELIVERY_FIELD_MANAGER)
                && e.operation.as_deref() == Some("Apply")
                && e.subresource.as_deref().unwrap_or("").is_empty()
        })
        .and_then(|e| e.fields_v1.as_ref())
        .map(|f| &f.0)
}

/// The field manager other than Accord's that wrote `object` last ("another manager" when
/// it shows none).
fn last_other_manager(object: &DynamicObject) -> String {
    object
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.manager.as_deref() != Some(DELIVERY_FIELD_MANAGER))
        .max_by_key(|e| e.time.clone())
        .and_then(|e| e.manager.clone())
        .unwrap_or_else(|| "another manager".to_owned())
}

/// What one manifest needs.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Applied and unchanged since.
    Synced,
    /// Not there: apply.
    Missing,
    /// The manifest changed since it was applied: apply.
    Changed,
    /// There with the current manifest, but nothing recorded since the agent started:
    /// apply once (it changes nothing) to record what Accord owns.
    Unrecorded,
    /// Another field manager took fields Accord owns: apply to restore them.
    Drifted {
        /// The field manager that now owns fields Accord owned (or wrote the object last).
        by: String,
        /// The fields Accord no longer owns (`spec.replicas`).
        fields: Vec<String>,
    },
    /// Someone else's, and this FederatedResource may take it ([`claim`]): apply.
    Adopt {
        /// The FederatedResource that delivers it now ("" when none: an object Accord
        /// did not create, and the FederatedResource adopts).
        from: String,
    },
    /// The member does not serve its type yet: retried.
    NotServed(String),
    /// Being deleted: re-created once its watch says it is gone.
    Deleting,
    /// Someone else's object.
    Conflict {
        /// Why.
        message: String,
        /// The object's health.
        health: &'static str,
        /// Whether only another apply can tell when it resolves (an object without
        /// Accord's label, which no watch sees).
        retry: bool,
    },
    /// The member refused the last apply: retried with backoff.
    Error(String),
    /// The manifest cannot be applied as it is.
    Invalid(String),
}

impl Verdict {
    /// Whether applying for it repairs drift: what a successful apply of it counts.
    pub fn is_drift(&self) -> bool {
        matches!(self, Self::Drifted { .. })
    }

    /// Whether the engine is to apply for it.
    pub fn needs_apply(&self) -> bool {
        match self {
            Self::Missing
            | Self::Changed
            | Self::Unrecorded
            | Self::Drifted { .. }
            | Self::Adopt { .. }
            | Self::NotServed(_)
            | Self::Error(_) => true,
            Self::Conflict { retry, .. } => *retry,
            Self::Synced | Self::Deleting | Self::Invalid(_) => false,
        }
    }
}

/// The conflict message of an existing object `key` that does not carry `mark`, given its
/// [`FEDERATED_RESOURCE_ANNOTATION`] (`delivered_by`, "" when none).
pub fn conflict_message(key: &ManifestKey, delivered_by: &str) -> String {
    let object = object_name(key);
    if delivered_by.is_empty() {
        format!(
            "{object} exists and Accord did not create it; conflictResolution: Adopt takes it over"
        )
    } else {
        format!(
            "{object} is delivered by FederatedResource {delivered_by}, which is older; one \
             object has one FederatedResource, the older of those delivering it"
        )
    }
}

/// What a FederatedResource may do with an object that exists without its mark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Take it: Accord did not create it and the FederatedResource adopts, or a younger
    /// FederatedResource delivers it (`from`).
    Take {
        /// The FederatedResource delivering it now ("" for none).
        from: String,
    },
    /// Leave it alone, saying why.
    Conflict(String),
}

/// What the FederatedResource marked `mark`, applying `desired`, may do with `existing`, which does
/// not carry that mark. An object Accord did not create is taken only when the FederatedResource
/// adopts. Of two FederatedResources delivering one object, the older (by
/// `creationTimestamp`, then by name) keeps it, whichever applied first: so every member
/// ends with the same owner whatever the order the applies came in. An object whose
/// owner's creation time is unknown (delivered before Accord recorded it) stays with that
/// owner, and a FederatedResource whose own is unknown takes nothing.
pub fn claim(desired: &Desired, existing: &DynamicObject, mark: &str, adopt: bool) -> Claim {
    let by = delivered_by(existing);
    let take = if by.is_empty() {
        adopt
    } else {
        let ours = created(
            desired
                .object
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(FEDERATED_RESOURCE_CREATED_ANNOTATION))
                .and_then(Value::as_str),
        )
        .unwrap_or(jiff::Timestamp::MAX);
        let theirs = created(
            existing
                .annotations()
                .get(FEDERATED_RESOURCE_CREATED_ANNOTATION)
                .map(String::as_str),
        )
        .unwrap_or(jiff::Timestamp::MIN);
        (ours, mark) < (theirs, by)
    };
    if take {
        Claim::Take {
            from: by.to_owned(),
        }
    } else {
        Claim::Conflict(conflict_message(&desired.key, by))
    }
}

/// A [`FEDERATED_RESOURCE_CREATED_ANNOTATION`] value, if it is a time.
fn created(value: Option<&str>) -> Option<jiff::Timestamp> {
    value?.parse().ok()
}

/// `<Kind> <namespace>/<name>` (or `<Kind> <name>` when cluster-scoped).
pub fn object_name(key: &ManifestKey) -> String {
    key.to_string()
}

/// What `desired` needs, from its watched object `live` (one carrying Accord's label),
/// what was recorded of the last apply and the FederatedResource's marks.
pub fn verdict(
    desired: &Desired,
    live: Option<&DynamicObject>,
    recorded: Option<&Recorded>,
    mark: &str,
    adopt: bool,
) -> Verdict {
    let recorded = recorded.filter(|r| r.hash == desired.hash);
    match live {
        Some(object) if delivered_by(object) != mark => match claim(desired, object, mark, adopt) {
            Claim::Take { from } => Verdict::Adopt { from },
            Claim::Conflict(message) => Verdict::Conflict {
                message,
                health: health(Some(object)),
                retry: false,
            },
        },
        Some(object) if is_deleting(object) => Verdict::Deleting,
        Some(object) => {
            let applied_hash = object.annotations().get(MANIFEST_HASH_ANNOTATION);
            match recorded.map(|r| &r.outcome) {
                _ if applied_hash != Some(&desired.hash) => match recorded.map(|r| &r.outcome) {
                    Some(Outcome::Error(message)) => Verdict::Error(message.clone()),
                    _ => Verdict::Changed,
                },
                Some(Outcome::Applied {
                    fields: Some(fields),
                }) => {
                    let now = accord_fields(object);
                    if now == Some(fields) {
                        Verdict::Synced
                    } else {
                        let lost = lost_fields(fields, now);
                        let by = lost
                            .first()
                            .and_then(|path| {
                                owner_of(
                                    object.metadata.managed_fields.as_deref(),
                                    path,
                                    DELIVERY_FIELD_MANAGER,
                                )
                            })
                            .unwrap_or_else(|| last_other_manager(object));
                        Verdict::Drifted {
                            by,
                            fields: lost.iter().map(|p| render(p)).collect(),
                        }
                    }
                }
                Some(Outcome::Error(message)) => Verdict::Error(message.clone()),
                _ => Verdict::Unrecorded,
            }
        }
        None => match recorded.map(|r| &r.outcome) {
            Some(Outcome::Conflict { message, health }) => Verdict::Conflict {
                message: message.clone(),
                health,
                retry: true,
            },
            Some(Outcome::Error(message)) => Verdict::Error(message.clone()),
            Some(Outcome::Pending(message)) => Verdict::NotServed(message.clone()),
            _ => Verdict::Missing,
        },
    }
}

/// One manifest's line in the report.
fn observed(
    key: &ManifestKey,
    verdict: &Verdict,
    live: Option<&DynamicObject>,
) -> ManifestObserved {
    let (state, health, message) = match verdict {
        Verdict::Synced | Verdict::Unrecorded => {
            (PlacementState::Synced, health(live), String::new())
        }
        Verdict::Missing => (
            PlacementState::Pending,
            MISSING,
            "not applied yet".to_owned(),
        ),
        Verdict::Changed => (
            PlacementState::Pending,
            health(live),
            "applying the changed manifest".to_owned(),
        ),
        Verdict::Drifted { by, .. } => (
            PlacementState::Pending,
            health(live),
            format!("fields Accord owns were changed by {by}; restoring them"),
        ),
        Verdict::Adopt { from } => (
            PlacementState::Pending,
            health(live),
            if from.is_empty() {
                "adopting the existing object".to_owned()
            } else {
                format!("taking it over from FederatedResource {from}, which is younger")
            },
        ),
        Verdict::NotServed(message) => (PlacementState::Pending, MISSING, message.clone()),
        Verdict::Deleting => (
            PlacementState::Pending,
            health(live),
            "being deleted; applied again once it is gone".to_owned(),
        ),
        // The object there is not this delivery's: none of its health counts as ours.
        Verdict::Conflict { message, .. } => (PlacementState::Conflict, MISSING, message.clone()),
        Verdict::Error(message) | Verdict::Invalid(message) => {
            (PlacementState::Error, health(live), message.clone())
        }
    };
    ManifestObserved {
        object: key.clone(),
        state,
        health: health.to_owned(),
        message,
    }
}

/// How bad a state is, for the placement's: Error over Conflict over Pending over Synced.
fn severity(state: PlacementState) -> u8 {
    match state {
        PlacementState::Synced => 0,
        PlacementState::Pending => 1,
        PlacementState::Unavailable | PlacementState::TargetNotFound => 2,
        PlacementState::Conflict => 3,
        PlacementState::Error => 4,
    }
}

/// The placement's state and message from its manifests' lines: the worst state, and a
/// summary naming the first manifest in that state.
pub fn summarize(manifests: &[ManifestObserved]) -> (PlacementState, String) {
    let total = manifests.len();
    let applied = manifests
        .iter()
        .filter(|m| m.state == PlacementState::Synced)
        .count();
    let state = manifests
        .iter()
        .map(|m| m.state)
        .max_by_key(|s| severity(*s))
        .unwrap_or(PlacementState::Synced);
    if state == PlacementState::Synced {
        let healthy = manifests
            .iter()
            .filter(|m| m.health == accord_common::distribution::health::HEALTHY)
            .count();
        let noun = if total == 1 { "manifest" } else { "manifests" };
        return (
            state,
            format!("{applied} of {total} {noun} applied, {healthy} healthy"),
        );
    }
    let worst: Vec<&ManifestObserved> = manifests.iter().filter(|m| m.state == state).collect();
    let first = worst[0];
    let more = match worst.len() - 1 {
        0 => String::new(),
        n => format!(" (and {n} more)"),
    };
    (
        state,
        format!(
            "{applied} of {total} manifests applied; {}: {}{more}",
            first.object, first.message
        ),
    )
}

/// One look at a FederatedResource: everything [`judge`] decides from.
pub struct Look<'a> {
    /// The FederatedResource.
    pub placed: &'a PlacedRef,
    /// Its assignment.
    pub spec: &'a FederatedResourceSpec,
    /// Revision of the assignment.
    pub revision: i64,
    /// Its manifests, prepared, in apply order.
    pub manifests: &'a [Prepared],
    /// What the watches show.
    pub view: &'a View,
    /// What the enforcer remembers of it.
    pub memory: Option<&'a Memory>,
    /// The last failed apply, while it stands.
    pub apply_error: Option<&'a ApplyError>,
}

/// The keys of the objects a look's version covers: every valid manifest's, then every
/// pruned one's.
pub fn version_keys<'a>(
    manifests: &'a [Prepared],
    spec: &'a FederatedResourceSpec,
) -> Vec<&'a ManifestKey> {
    let mut keys: Vec<&ManifestKey> = manifests
        .iter()
        .filter_map(Prepared::valid)
        .map(|d| &d.key)
        .collect();
    keys.extend(spec.prune.iter());
    keys
}

/// A version of the objects `keys`, from their `resourceVersion`s ("-" for an absent one):
/// what the engine waits on after an apply that changed something.
pub fn version<'a>(
    versions: impl IntoIterator<Item = (&'a ManifestKey, Option<&'a str>)>,
) -> String {
    let joined: Vec<String> = versions
        .into_iter()
        .map(|(key, rv)| format!("{key}={}", rv.unwrap_or("-")))
        .collect();
    let digest = super::manifest::hash(&Value::String(joined.join(",")));
    digest[..16].to_owned()
}

/// The version of what `view` shows of `keys`.
pub fn view_version(keys: &[&ManifestKey], view: &View) -> String {
    version(keys.iter().map(|k| {
        (
            *k,
            view.object(k)
                .and_then(|o| o.metadata.resource_version.as_deref()),
        )
    }))
}

/// Judges one FederatedResource.
pub fn judge(look: &Look<'_>) -> Judgement {
    let mark = placed_mark(look.placed);
    let spec = look.spec;
    let view = look.view;
    let memory = look.memory;
    let desired_keys: BTreeSet<&ManifestKey> = look
        .manifests
        .iter()
        .filter_map(Prepared::valid)
        .map(|d| &d.key)
        .collect();
    // Objects an earlier spec delivered (or, on removal, every one): still there with
    // this FederatedResource's marks?
    let leaving: Vec<&ManifestKey> = spec
        .prune
        .iter()
        .filter(|k| !desired_keys.contains(k))
        .chain(desired_keys.iter().copied().filter(|_| spec.remove))
        .collect();
    let mut removing = 0;
    let mut removals_wanted = false;
    for key in &leaving {
        if let Some(object) = view.object(key).filter(|o| is_marked_for(o, &mark)) {
            removing += 1;
            removals_wanted |= !is_deleting(object);
        }
    }
    let mut lines = Vec::with_capacity(look.manifests.len());
    let mut wants_apply = removals_wanted;
    // The first object whose fields another writer took; an apply that does nothing else
    // is a repair, which the engine's fight guard may hold.
    let mut repair = None;
    let mut only_repairs = !removals_wanted;
    for prepared in look.manifests {
        let key = prepared.key();
        let live = view.object(key);
        let verdict = match prepared {
            Prepared::Invalid(invalid) => Verdict::Invalid(invalid.message.clone()),
            Prepared::Valid(_) if spec.remove => match live.filter(|o| is_marked_for(o, &mark)) {
                Some(_) => Verdict::Deleting,
                None => Verdict::Synced,
            },
            Prepared::Valid(desired) => {
                let gvk = desired.gvk();
                if let Some(error) = view.failed.get(&gvk) {
                    Verdict::Error(error.clone())
                } else if view.not_served.contains(&gvk) {
                    Verdict::NotServed(not_served_message(&gvk))
                } else {
                    let recorded = memory.and_then(|m| m.outcomes.get(key));
                    verdict(desired, live, recorded, &mark, spec.adopt)
                }
            }
        };
        if let Verdict::Drifted { by, fields } = &verdict {
            repair.get_or_insert_with(|| Repair {
                object: object_name(key),
                fields: fields.clone(),
                by: by.clone(),
            });
        } else if verdict.needs_apply() {
            only_repairs = false;
        }
        wants_apply |= verdict.needs_apply();
        let mut line = observed(key, &verdict, live);
        if spec.remove {
            line.health = health(live.filter(|o| is_marked_for(o, &mark))).to_owned();
            if line.state == PlacementState::Pending {
                line.message = if spec.orphan { "orphaning" } else { "removing" }.to_owned();
            }
        }
        lines.push(line);
    }
    let (mut state, mut message) = summarize(&lines);
    let mut removed = false;
    if spec.remove {
        let left = lines
            .iter()
            .filter(|l| l.state == PlacementState::Pending)
            .count()
            + spec
                .prune
                .iter()
                .filter(|k| !desired_keys.contains(k))
                .filter(|k| view.object(k).is_some_and(|o| is_marked_for(o, &mark)))
                .count();
        let verb = if spec.orphan { "orphaned" } else { "removed" };
        if left == 0 {
            removed = true;
            state = PlacementState::Synced;
            message = format!("every delivered object {verb}");
        } else {
            state = PlacementState::Pending;
            message = format!(
                "{left} delivered object{} not {verb} yet",
                if left == 1 { "" } else { "s" }
            );
        }
    } else if removing > 0 && state == PlacementState::Synced {
        state = PlacementState::Pending;
        message = format!(
            "{message}; removing {removing} object{} an earlier spec delivered",
            if removing == 1 { "" } else { "s" }
        );
    }
    if let Some(error) = look.apply_error
        && wants_apply
        && !matches!(state, PlacementState::Error | PlacementState::Conflict)
    {
        state = match error.kind {
            ApplyErrorKind::Unavailable => PlacementState::Unavailable,
            _ => PlacementState::Error,
        };
        message = error.message.clone();
    }
    let feedback = spec
        .feedback
        .iter()
        .filter_map(|rule| {
            let desired = look
                .manifests
                .iter()
                .filter_map(Prepared::valid)
                .find(|d| d.key.kind == rule.kind && d.key.name == rule.name)?;
            let object = view
                .object(&desired.key)
                .filter(|o| delivered_by(o) == mark)?;
            let value = serde_json::to_value(object).ok()?;
            Some((
                rule.as_.clone(),
                feedback::extract(&value, &rule.json_path)?,
            ))
        })
        .collect();
    let keys = version_keys(look.manifests, spec);
    let from_version = view_version(&keys, view);
    let action = match repair {
        Some(repair) if wants_apply && only_repairs => Action::Repair {
            from_version,
            repair,
        },
        _ if wants_apply => Action::Apply { from_version },
        _ => Action::Settled,
    };
    let observed = FederatedResourceObserved {
        manifests: lines,
        feedback,
        drift_repairs: memory.map_or(0, |m| m.drift_repairs),
        last_drift_unix_millis: memory.map_or(0, |m| m.last_drift_unix_millis),
        removed,
    };
    Judgement {
        report: Report {
            state,
            message,
            resource_version: String::new(),
            generation: 0,
            observed: Observed::FederatedResource(observed),
            applied_revision: look.revision,
            api_server_unavailable: false,
        },
        action,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::distribution::health::{HEALTHY, PROGRESSING};
    use accord_common::distribution::{FeedbackRule, PlacedKind};
    use serde_json::json;

    use crate::enforce::federated_resource::manifest::prepare_all;

    fn placed() -> PlacedRef {
        PlacedRef::new(PlacedKind::FederatedResource, "team", "bundle")
    }

    fn config_map(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
    }

    fn deployment(name: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
               "spec": {"replicas": 2}})
    }

    fn spec(manifests: Vec<Value>) -> FederatedResourceSpec {
        FederatedResourceSpec {
            manifests,
            namespace: "team".into(),
            ..FederatedResourceSpec::default()
        }
    }

    fn prepared(spec: &FederatedResourceSpec) -> Vec<Prepared> {
        prepare_all(spec, &placed(), |gvk| !gvk.cluster_scoped_by_hint())
    }

    fn fields(replicas: bool) -> Value {
        if replicas {
            json!({"f:spec": {"f:replicas": {}}})
        } else {
            json!({"f:spec": {}})
        }
    }

    /// The object `desired` as the API server holds it after Accord applied it, with
    /// Accord owning `fields` and `status`.
    fn live(desired: &Desired, rv: &str, owned: Value, status: Value) -> Arc<DynamicObject> {
        let mut object = desired.object.clone();
        object["metadata"]["resourceVersion"] = json!(rv);
        object["metadata"]["generation"] = json!(1);
        object["metadata"]["managedFields"] = json!([
            {"manager": "accord", "operation": "Apply", "apiVersion": desired.key.api_version,
             "fieldsType": "FieldsV1", "fieldsV1": owned, "time": "2025-01-01T00:00:00Z"},
            {"manager": "kubectl-edit", "operation": "Update", "apiVersion": desired.key.api_version,
             "time": "2025-01-02T00:00:00Z"},
        ]);
        object["status"] = status;
        Arc::new(serde_json::from_value(object).unwrap())
    }

    fn applied(desired: &Desired, owned: Value) -> Recorded {
        Recorded {
            hash: desired.hash.clone(),
            outcome: Outcome::Applied {
                fields: Some(owned),
            },
        }
    }

    fn ready() -> Value {
        json!({"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 2, "readyReplicas": 2})
    }

    fn look(
        spec: &FederatedResourceSpec,
        manifests: &[Prepared],
        view: &View,
        memory: Option<&Memory>,
        apply_error: Option<&ApplyError>,
    ) -> Judgement {
        let placed = placed();
        judge(&Look {
            placed: &placed,
            spec,
            revision: 7,
            manifests,
            view,
            memory,
            apply_error,
        })
    }

    fn lines(j: &Judgement) -> &FederatedResourceObserved {
        match &j.report.observed {
            Observed::FederatedResource(o) => o,
            other => panic!("{other:?}"),
        }
    }

    fn is_apply(j: &Judgement) -> bool {
        matches!(j.action, Action::Apply { .. } | Action::Repair { .. })
    }

    /// Every manifest applied, recorded and unchanged since.
    fn synced(spec: &FederatedResourceSpec) -> (Vec<Prepared>, View, Memory) {
        let manifests = prepared(spec);
        let mut view = View::default();
        let mut memory = Memory::default();
        for (i, d) in manifests.iter().filter_map(Prepared::valid).enumerate() {
            view.objects.insert(
                d.key.clone(),
                live(d, &format!("{}", i + 1), fields(true), ready()),
            );
            memory
                .outcomes
                .insert(d.key.clone(), applied(d, fields(true)));
        }
        (manifests, view, memory)
    }

    #[test]
    fn a_missing_object_is_applied_and_reported_missing() {
        let spec = spec(vec![config_map("a")]);
        let manifests = prepared(&spec);
        let j = look(&spec, &manifests, &View::default(), None, None);
        assert!(is_apply(&j));
        assert_eq!(j.report.state, PlacementState::Pending);
        let line = &lines(&j).manifests[0];
        assert_eq!(line.health, MISSING);
        assert_eq!(line.message, "not applied yet");
        assert_eq!(j.report.applied_revision, 7);
    }

    #[test]
    fn everything_applied_and_unchanged_is_synced_and_settled() {
        let spec = spec(vec![config_map("a"), deployment("web")]);
        let (manifests, view, memory) = synced(&spec);
        let j = look(&spec, &manifests, &view, Some(&memory), None);
        assert_eq!(j.action, Action::Settled);
        assert_eq!(j.report.state, PlacementState::Synced);
        assert_eq!(j.report.message, "2 of 2 manifests applied, 2 healthy");
        assert!(
            lines(&j)
                .manifests
                .iter()
                .all(|m| m.state == PlacementState::Synced && m.health == HEALTHY)
        );
    }

    #[test]
    fn a_changed_manifest_is_applied_again() {
        let before = spec(vec![config_map("a")]);
        let (_, view, memory) = synced(&before);
        let mut changed = config_map("a");
        changed["data"]["k"] = json!("w");
        let after = spec(vec![changed]);
        let manifests = prepared(&after);
        let j = look(&after, &manifests, &view, Some(&memory), None);
        assert!(is_apply(&j));
        assert_eq!(
            lines(&j).manifests[0].message,
            "applying the changed manifest"
        );
    }

    #[test]
    fn after_a_restart_an_object_is_applied_once_to_record_its_fields_and_still_reported_synced() {
        let spec = spec(vec![config_map("a")]);
        let (manifests, view, _) = synced(&spec);
        let j = look(&spec, &manifests, &view, None, None);
        assert!(is_apply(&j));
        assert_eq!(j.report.state, PlacementState::Synced);
    }

    #[test]
    fn a_field_another_manager_took_is_drift_applied_and_counted() {
        let spec = spec(vec![deployment("web")]);
        let (manifests, mut view, mut memory) = synced(&spec);
        let d = manifests[0].valid().unwrap();
        // `kubectl scale` took spec.replicas: Accord's fieldsV1 lost it.
        view.objects
            .insert(d.key.clone(), live(d, "9", fields(false), ready()));
        let j = look(&spec, &manifests, &view, Some(&memory), None);
        assert!(is_apply(&j));
        assert_eq!(j.report.state, PlacementState::Pending);
        assert_eq!(
            lines(&j).manifests[0].message,
            "fields Accord owns were changed by kubectl-edit; restoring them"
        );
        // A repair alone: the engine's fight guard decides whether it is made.
        let Action::Repair { repair, .. } = &j.action else {
            panic!("{:?}", j.action);
        };
        assert_eq!(repair.fields, ["spec.replicas"]);
        assert_eq!(repair.by, "kubectl-edit");
        assert_eq!(repair.object, object_name(&d.key));
        assert!(
            verdict(
                d,
                view.object(&d.key),
                memory.outcomes.get(&d.key),
                "team/bundle",
                false
            )
            .is_drift()
        );
        // What the apply counted is reported.
        memory.drift_repairs = 3;
        memory.last_drift_unix_millis = 42;
        let j = look(&spec, &manifests, &view, Some(&memory), None);
        assert_eq!(lines(&j).drift_repairs, 3);
        assert_eq!(lines(&j).last_drift_unix_millis, 42);
        // Unchanged fields are no drift, whatever else changed (status, other managers).
        let (_, synced_view, _) = synced(&spec);
        assert!(
            !verdict(
                d,
                synced_view.object(&d.key),
                memory.outcomes.get(&d.key),
                "team/bundle",
                false
            )
            .is_drift()
        );
    }

    #[test]
    fn an_object_of_another_federated_resource_is_a_conflict_never_adopted() {
        let mut spec = spec(vec![config_map("a")]);
        spec.adopt = true;
        let manifests = prepared(&spec);
        let d = manifests[0].valid().unwrap();
        let mut other = (*live(d, "1", fields(true), json!(null))).clone();
        other
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(FEDERATED_RESOURCE_ANNOTATION.into(), "ops/shared".into());
        let view = View {
            objects: [(d.key.clone(), Arc::new(other))].into(),
            ..View::default()
        };
        let j = look(&spec, &manifests, &view, None, None);
        assert_eq!(j.report.state, PlacementState::Conflict);
        assert_eq!(
            lines(&j).manifests[0].message,
            "ConfigMap team/a is delivered by FederatedResource ops/shared, which is older; one \
             object has one FederatedResource, the older of those delivering it"
        );
        // Its watch says when it is released.
        assert_eq!(j.action, Action::Settled);
    }

    #[test]
    fn of_two_federated_resources_the_older_takes_the_object_whoever_applied_first() {
        let mut spec = spec(vec![config_map("a")]);
        spec.created = "2026-01-02T00:00:00Z".into();
        let manifests = prepared(&spec);
        let d = manifests[0].valid().unwrap();
        let delivered_by = |mark: &str, created: Option<&str>| {
            let mut other = (*live(d, "1", fields(true), json!(null))).clone();
            let annotations = other.metadata.annotations.as_mut().unwrap();
            annotations.insert(FEDERATED_RESOURCE_ANNOTATION.into(), mark.into());
            annotations.remove(FEDERATED_RESOURCE_CREATED_ANNOTATION);
            if let Some(created) = created {
                annotations.insert(FEDERATED_RESOURCE_CREATED_ANNOTATION.into(), created.into());
            }
            other
        };
        let mark = placed_mark(&placed());
        let take = |other: &DynamicObject| claim(d, other, &mark, false);
        // A younger one delivers it: taken, and reported as being taken over.
        let younger = delivered_by("ops/shared", Some("2026-03-01T00:00:00Z"));
        assert_eq!(
            take(&younger),
            Claim::Take {
                from: "ops/shared".into()
            }
        );
        let view = View {
            objects: [(d.key.clone(), Arc::new(younger))].into(),
            ..View::default()
        };
        let j = look(&spec, &manifests, &view, None, None);
        assert!(is_apply(&j));
        assert_eq!(
            lines(&j).manifests[0].message,
            "taking it over from FederatedResource ops/shared, which is younger"
        );
        // An older one, one of unknown age, or one as old with a smaller name keeps it.
        for keeper in [
            delivered_by("ops/shared", Some("2025-12-31T23:59:59Z")),
            delivered_by("ops/shared", None),
            delivered_by("ops/shared", Some("not a time")),
            delivered_by("aaa/shared", Some("2026-01-02T00:00:00Z")),
        ] {
            assert!(
                matches!(take(&keeper), Claim::Conflict(_)),
                "{:?}",
                keeper.metadata.annotations
            );
        }
        // As old with a greater name: the smaller name (this one) takes it.
        let tie = delivered_by("zzz/shared", Some("2026-01-02T00:00:00Z"));
        assert!(matches!(take(&tie), Claim::Take { .. }));
        // A FederatedResource whose own age is unknown takes nothing.
        let unknown = FederatedResourceSpec {
            created: String::new(),
            ..spec.clone()
        };
        let unknown_manifests = prepared(&unknown);
        let u = unknown_manifests[0].valid().unwrap();
        let younger = delivered_by("ops/shared", Some("2026-03-01T00:00:00Z"));
        assert!(matches!(
            claim(u, &younger, &mark, true),
            Claim::Conflict(_)
        ));
    }

    #[test]
    fn an_existing_object_accord_did_not_create_is_a_conflict_retried_until_it_goes() {
        let spec = spec(vec![config_map("a")]);
        let manifests = prepared(&spec);
        let d = manifests[0].valid().unwrap();
        let message = conflict_message(&d.key, "");
        assert_eq!(
            message,
            "ConfigMap team/a exists and Accord did not create it; conflictResolution: Adopt \
             takes it over"
        );
        let memory = Memory {
            outcomes: [(
                d.key.clone(),
                Recorded {
                    hash: d.hash.clone(),
                    outcome: Outcome::Conflict {
                        message: message.clone(),
                        health: HEALTHY,
                    },
                },
            )]
            .into(),
            ..Memory::default()
        };
        let j = look(&spec, &manifests, &View::default(), Some(&memory), None);
        assert_eq!(j.report.state, PlacementState::Conflict);
        // The healthy object there is someone else's: it is not counted as available.
        assert_eq!(lines(&j).manifests[0].health, MISSING);
        assert!(is_apply(&j), "no watch sees an unlabelled object: retried");
    }

    #[test]
    fn adopting_takes_a_labelled_object_without_accords_annotation() {
        let mut spec = spec(vec![config_map("a")]);
        let manifests = prepared(&spec);
        let d = manifests[0].valid().unwrap();
        let mut unannotated = (*live(d, "1", fields(true), json!(null))).clone();
        unannotated.metadata.annotations = None;
        let view = View {
            objects: [(d.key.clone(), Arc::new(unannotated))].into(),
            ..View::default()
        };
        let j = look(&spec, &manifests, &view, None, None);
        assert_eq!(j.report.state, PlacementState::Conflict);
        spec.adopt = true;
        let j = look(&spec, &manifests, &view, None, None);
        assert!(is_apply(&j));
        assert_eq!(j.report.state, PlacementState::Pending);
    }

    #[test]
    fn a_type_the_member_does_not_serve_is_pending_and_retried() {
        let widget =
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
        let spec = spec(vec![widget]);
        let manifests = prepared(&spec);
        let view = View {
            not_served: [Gvk::new("example.com/v1", "Widget")].into(),
            ..View::default()
        };
        let j = look(&spec, &manifests, &view, None, None);
        assert_eq!(j.report.state, PlacementState::Pending);
        assert_eq!(
            lines(&j).manifests[0].message,
            "the member API server does not serve example.com/v1 Widget yet"
        );
        assert!(is_apply(&j));
    }

    #[test]
    fn a_refused_manifest_is_an_error_and_the_others_still_count() {
        let spec = spec(vec![config_map("a"), deployment("web")]);
        let (manifests, mut view, mut memory) = synced(&spec);
        let web = manifests[1].valid().unwrap();
        view.objects.remove(&web.key);
        memory.outcomes.insert(
            web.key.clone(),
            Recorded {
                hash: web.hash.clone(),
                outcome: Outcome::Error("admission webhook denied the request".into()),
            },
        );
        let j = look(&spec, &manifests, &view, Some(&memory), None);
        assert_eq!(j.report.state, PlacementState::Error);
        assert_eq!(
            j.report.message,
            "1 of 2 manifests applied; Deployment team/web: admission webhook denied the request"
        );
        assert!(is_apply(&j), "retried with backoff");
    }

    #[test]
    fn the_placement_takes_the_worst_state_of_its_manifests() {
        let line = |name: &str, state| ManifestObserved {
            object: ManifestKey {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: "team".into(),
                name: name.into(),
            },
            state,
            health: PROGRESSING.into(),
            message: format!("{name} says so"),
        };
        use PlacementState::*;
        let cases = [
            (vec![Synced, Pending, Conflict, Error, Synced], Error),
            (vec![Synced, Conflict, Pending], Conflict),
            (vec![Pending, Synced], Pending),
            (vec![Synced, Synced], Synced),
        ];
        for (states, expected) in cases {
            let lines: Vec<ManifestObserved> = states
                .iter()
                .enumerate()
                .map(|(i, s)| line(&format!("m{i}"), *s))
                .collect();
            assert_eq!(summarize(&lines).0, expected, "{states:?}");
        }
        let lines = vec![
            line("a", Synced),
            line("b", Error),
            line("c", Synced),
            line("d", Error),
            line("e", Pending),
        ];
        assert_eq!(
            summarize(&lines).1,
            "2 of 5 manifests applied; ConfigMap team/b: b says so (and 1 more)"
        );
    }

    #[test]
    fn feedback_reads_the_delivered_objects_by_kind_and_name() {
        let mut spec = spec(vec![config_map("a"), deployment("web")]);
        spec.feedback = vec![
            FeedbackRule {
                kind: "Deployment".into(),
                name: "web".into(),
                json_path: ".status.readyReplicas".into(),
                as_: "ready".into(),
            },
            FeedbackRule {
                kind: "ConfigMap".into(),
                name: "a".into(),
                json_path: "$.data.k".into(),
                as_: "k".into(),
            },
            FeedbackRule {
                kind: "Deployment".into(),
                name: "web".into(),
                json_path: ".status.absent".into(),
                as_: "absent".into(),
            },
            FeedbackRule {
                kind: "Deployment".into(),
                name: "other".into(),
                json_path: ".status.readyReplicas".into(),
                as_: "other".into(),
            },
        ];
        let (manifests, view, memory) = synced(&spec);
        let j = look(&spec, &manifests, &view, Some(&memory), None);
        assert_eq!(
            lines(&j).feedback,
            [
                ("ready".to_owned(), "2".to_owned()),
                ("k".to_owned(), "v".to_owned())
            ]
            .into()
        );
    }

    #[test]
    fn removal_is_synced_and_removed_once_nothing_carries_the_federated_resources_marks() {
        let mut spec = spec(vec![config_map("a"), deployment("web")]);
        let (manifests, view, memory) = synced(&spec);
        spec.remove = true;
        let j = look(&spec, &manifests, &view, Some(&memory), None);
        assert!(is_apply(&j));
        assert_eq!(j.report.state, PlacementState::Pending);
        assert_eq!(j.report.message, "2 delivered objects not removed yet");
        assert!(!lines(&j).removed);
        let j = look(&spec, &manifests, &View::default(), Some(&memory), None);
        assert_eq!(j.action, Action::Settled);
        assert_eq!(j.report.state, PlacementState::Synced);
        assert!(lines(&j).removed);
        assert!(lines(&j).manifests.iter().all(|m| m.health == MISSING));
        spec.orphan = true;
        let j = look(&spec, &manifests, &View::default(), Some(&memory), None);
        assert_eq!(j.report.message, "every delivered object orphaned");
    }

    #[test]
    fn a_pruned_object_is_removed_only_while_it_carries_the_federated_resources_annotation() {
        let old = spec(vec![config_map("a"), config_map("old")]);
        let (old_manifests, view, memory) = synced(&old);
        let old_key = old_manifests[1].key().clone();
        let mut new = spec(vec![config_map("a")]);
        new.prune = vec![old_key.clone()];
        let manifests = prepared(&new);
        let j = look(&new, &manifests, &view, Some(&memory), None);
        assert!(is_apply(&j));
        assert_eq!(j.report.state, PlacementState::Pending);
        assert_eq!(
            j.report.message,
            "1 of 1 manifest applied, 1 healthy; removing 1 object an earlier spec delivered"
        );
        // Someone else's now: never touched.
        let mut taken = (*view.objects[&old_key]).clone();
        taken
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(FEDERATED_RESOURCE_ANNOTATION.into(), "ops/other".into());
        let mut view = view.clone();
        view.objects.insert(old_key, Arc::new(taken));
        let j = look(&new, &manifests, &view, Some(&memory), None);
        assert_eq!(j.action, Action::Settled);
        assert_eq!(j.report.state, PlacementState::Synced);
    }

    #[test]
    fn a_failed_apply_without_a_manifest_to_blame_says_why() {
        let spec = spec(vec![config_map("a")]);
        let manifests = prepared(&spec);
        let error = ApplyError::new(
            ApplyErrorKind::Unavailable,
            "discovering v1 ConfigMap: timeout",
        );
        let j = look(&spec, &manifests, &View::default(), None, Some(&error));
        assert_eq!(j.report.state, PlacementState::Unavailable);
        assert_eq!(j.report.message, "discovering v1 ConfigMap: timeout");
        // Settled placements ignore a stale error.
        let (manifests, view, memory) = synced(&spec);
        let j = look(&spec, &manifests, &view, Some(&memory), Some(&error));
        assert_eq!(j.report.state, PlacementState::Synced);
    }

    #[test]
    fn a_watch_that_cannot_list_a_type_makes_its_manifests_errors() {
        let spec = spec(vec![config_map("a"), deployment("web")]);
        let manifests = prepared(&spec);
        let view = View {
            failed: [(
                Gvk::new("apps/v1", "Deployment"),
                "watching apps/v1/Deployment: the agent may not list and watch deployments.apps"
                    .to_owned(),
            )]
            .into(),
            ..View::default()
        };
        let j = look(&spec, &manifests, &view, None, None);
        assert_eq!(j.report.state, PlacementState::Error);
        assert_eq!(lines(&j).manifests[0].state, PlacementState::Pending);
        assert!(is_apply(&j), "the ConfigMap is still applied");
    }

    #[test]
    fn the_version_follows_the_objects_resource_versions() {
        let spec = spec(vec![config_map("a"), deployment("web")]);
        let (manifests, view, _) = synced(&spec);
        let keys = version_keys(&manifests, &spec);
        let v = view_version(&keys, &view);
        assert_eq!(v, view_version(&keys, &view.clone()));
        let mut changed = view.clone();
        let d = manifests[0].valid().unwrap();
        changed
            .objects
            .insert(d.key.clone(), live(d, "77", fields(true), ready()));
        assert_ne!(v, view_version(&keys, &changed));
        assert_ne!(v, view_version(&keys, &View::default()));
    }
}
