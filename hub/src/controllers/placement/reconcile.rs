//! One object's reconcile: decode → decide → write the record → aggregate the status,
//! Events, the finalizer and deletion ([`Placements`]).

use super::*;
use crate::distribution::taints;
use accord_common::metrics::observe_traced;
use accord_common::telemetry::{self, TRACEPARENT_ANNOTATION};
use tracing::{Instrument, warn};

/// `note` with the trace of the change it is about (`traceparent`), when traced.
fn traced_note(mut note: Note, traceparent: &str) -> Note {
    let trace_id = telemetry::trace_id(traceparent);
    if !trace_id.is_empty() {
        note.message = format!("{} (trace {trace_id})", note.message);
    }
    note
}

/// The generic controller of kind `K`: its steps, which [`run`] drives from the watches
/// (public so that they can be driven one at a time against a fake API server).
pub struct Placements<K: PlacementKind> {
    pub(super) ctx: Arc<ControllerContext>,
    pub(super) kind: K,
    pub(super) objects: Reflector<Watched<K>>,
    /// The record revision each object's last submitted status showed: a status for a
    /// different one shows a new decision, written promptly.
    pub(super) shown: dashmap::DashMap<(String, String), i64>,
    /// Each object's last reconcile, which paces the ones reports and clusters ask for.
    pub(super) pace: Arc<ReconcilePace<ObjectRef<Watched<K>>>>,
    /// Objects (by uid) whose finalizer this controller added, and when, while the
    /// reflector has not shown it: a reconcile of the older copy meanwhile must not add it
    /// again (the second add fails its test and costs a write and a retry). Trusted for
    /// [`FINALIZER_ADDED_TRUST`], so a finalizer removed by hand before the reflector
    /// caught up is still put back.
    pub(super) finalizer_added: dashmap::DashMap<String, std::time::Instant>,
    /// The generation of each object whose change was last traced (tracing on only): a
    /// generation is traced once, however often it is reconciled before its record is
    /// written (or when its decision changes nothing).
    pub(super) traced: dashmap::DashMap<(String, String), (i64, String)>,
}

/// How long a finalizer this controller added is taken as held while the reflector does
/// not show it yet.
const FINALIZER_ADDED_TRUST: std::time::Duration = std::time::Duration::from_secs(30);

/// The uid in `metadata` ("" when there is none).
fn uid_of(metadata: &kube::api::ObjectMeta) -> &str {
    metadata.uid.as_deref().unwrap_or_default()
}

/// Whether a placement the status shows with an outcome (any state but `Pending`) is
/// `Pending` in `desired`: news to write promptly, not progress (a stale `Synced` must not
/// linger while a member repairs drift).
fn fell_back<K>(watched: &Lenient<K>, desired: &serde_json::Value) -> bool {
    let states = |status: &serde_json::Value| -> HashMap<String, String> {
        status["placements"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p["cluster"].as_str()?.to_owned(),
                    p["state"].as_str()?.to_owned(),
                ))
            })
            .collect()
    };
    let shown = states(&current_status(watched));
    states(desired)
        .iter()
        .any(|(c, st)| st == "Pending" && shown.get(c).is_some_and(|was| was != "Pending"))
}

/// The status as the API server holds it (from the watch), as JSON.
fn current_status<K>(object: &Lenient<K>) -> serde_json::Value {
    object
        .data
        .get("status")
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}))
}

impl<K: PlacementKind> Placements<K> {
    /// The controller of `kind` over `objects` (the reflector the kind was started with).
    pub fn new(ctx: Arc<ControllerContext>, kind: K, objects: Reflector<Watched<K>>) -> Self {
        Self {
            ctx,
            kind,
            objects,
            shown: dashmap::DashMap::new(),
            pace: Arc::default(),
            finalizer_added: dashmap::DashMap::new(),
            traced: dashmap::DashMap::new(),
        }
    }

    /// Sees one watch event of `object` (`gone`: it is no more): its field claims, the
    /// kind's `on_object`, and a gone object's pace forgotten.
    pub fn observe(&self, object: &Watched<K>, gone: bool) {
        let claims = if gone {
            Vec::new()
        } else {
            K::field_claims(object)
        };
        self.ctx.field_owners.claim(
            K::KIND,
            FieldOwners::claimant(K::KIND, &object_name(object)),
            claims,
        );
        self.kind.on_object(object, gone);
        if gone {
            self.pace.forget(&ObjectRef::from_obj(object));
        }
    }

    /// Reconciles one object: its deletion, or its decision, record and status.
    pub async fn reconcile(&self, watched: Arc<Watched<K>>) -> Result<Action, ReconcileError> {
        let holds: Vec<&str> = self.finalizers_held(&watched);
        if watched.metadata.deletion_timestamp.is_some() {
            self.finalizer_added.remove(uid_of(&watched.metadata));
            if holds.is_empty() {
                return Ok(Action::await_change());
            }
            return self.delete(&watched, &holds).await;
        }
        let watched = match K::finalizer(&watched) {
            Some(f) if holds.contains(&f) => {
                self.finalizer_added.remove(uid_of(&watched.metadata));
                watched
            }
            Some(f) => {
                let recently_added = self
                    .finalizer_added
                    .get(uid_of(&watched.metadata))
                    .is_some_and(|at| at.elapsed() < FINALIZER_ADDED_TRUST);
                if recently_added {
                    // The reflector is behind: the stored object holds it.
                    watched
                } else {
                    let added = self.add_finalizer(&watched, f).await?;
                    self.finalizer_added.insert(
                        uid_of(&watched.metadata).to_owned(),
                        std::time::Instant::now(),
                    );
                    Arc::new(added)
                }
            }
            None => watched,
        };
        if K::READS_FIELD_CLAIMS && !self.ctx.field_owners.ready() {
            // Decided once every claiming kind has listed: the kind triggers its objects
            // then (see PlacementKind::READS_FIELD_CLAIMS).
            return Ok(Action::await_change());
        }
        let now = Time(Timestamp::now());
        match decode_or_invalid(&watched, &now) {
            Decoded::Valid(object) => self.apply(&watched, &object, &now).await,
            Decoded::Invalid {
                message,
                status_patch,
            } => self.invalid(&watched, message, status_patch).await,
        }
    }

    /// This kind's finalizers (current and legacy) that `object` holds.
    fn finalizers_held<'a>(&self, object: &'a Watched<K>) -> Vec<&'a str> {
        object
            .finalizers()
            .iter()
            .map(String::as_str)
            .filter(|f| K::finalizer(object) == Some(*f) || K::LEGACY_FINALIZERS.contains(f))
            .collect()
    }

    async fn apply(
        &self,
        watched: &Watched<K>,
        object: &K::Object,
        now: &Time,
    ) -> Result<Action, ReconcileError> {
        let ctx = &self.ctx;
        let p = placed_ref::<K>(object);
        let clusters = clusters(ctx);
        let previous = stored_record::<K>(ctx, &p);
        let now_unix = now.0.as_second();
        // Where the previous decision placed the object, asked once per selected cluster.
        let placed: HashSet<&str> = previous
            .iter()
            .flat_map(|(r, _)| &r.shares)
            .filter(|s| s.places())
            .map(|s| s.cluster.as_str())
            .collect();
        let placed_before = |cluster: &str| placed.contains(cluster);
        let generation = object.meta().generation.unwrap_or_default();
        let change = self.change_span(watched, &p, generation, previous.as_ref().map(|(r, _)| r));
        // This generation's trace: the change's, or the one its first decision started.
        let change_traceparent =
            self.generation_traceparent(&p, generation, previous.as_ref().map(|(r, _)| r));
        let decide_span = telemetry::child(&change, "decide");
        let deciding = std::time::Instant::now();
        let _deciding = decide_span.enter();
        let placement = K::placement(object);
        let choice = placement
            .map(|p| crate::distribution::choose::choose(p, &clusters, &placed_before, now_unix));
        // A kind that places a whole copy in each cluster has no replica totals to skew.
        let skewed = placement
            .and_then(|p| p.spread.as_ref())
            .is_some_and(|s| s.max_skew.is_some());
        let decided = if K::HOLDS_TAINTED && skewed {
            Decided::Invalid(format!(
                "spec.placement.spread.maxSkew: {}",
                accord_crds::messages::SPREAD_MAX_SKEW_DIVIDED_ONLY
            ))
        } else {
            self.kind.decide(
                object,
                &DecideInput {
                    clusters: &clusters,
                    previous: previous.as_ref().map(|(r, _)| r),
                    now_millis: now.0.as_millisecond(),
                    choice: choice.as_ref(),
                },
            )
        };
        let decision_seconds = deciding.elapsed().as_secs_f64();
        drop(_deciding);
        drop(decide_span);
        let (shown, facts, mut recheck, rolling) = match decided {
            Decided::Invalid(message) => {
                let status_patch = invalid_status(watched, &message, now);
                return self.invalid(watched, message, status_patch).await;
            }
            Decided::Hold { shown, facts } => match previous {
                Some(stored) => (Ok(stored), facts, None, None),
                None => (Err(shown), facts, None, None),
            },
            Decided::Record {
                mut shares,
                decision,
                facts,
                mut recheck_after,
            } => {
                if K::HOLDS_TAINTED {
                    let tolerations = taints::tolerations_of(watched.pointer("/spec/placement"));
                    let recheck = taints::hold_tainted(
                        &mut shares,
                        &clusters,
                        &tolerations,
                        placed_before,
                        now_unix,
                    );
                    if let Some(at) = recheck {
                        let wait = taints::wait_until(at, now_unix);
                        recheck_after = crate::distribution::earliest(recheck_after, wait);
                    }
                }
                // A progressive rollout sends the clusters it has not reached the last
                // good revision's shares.
                let mut rolling = self.rolling(
                    watched,
                    object,
                    &shares,
                    previous.as_ref().map(|(r, _)| r.shares.as_slice()),
                    now.0.as_millisecond(),
                );
                match &rolling {
                    Some(r) => shares = r.merged(),
                    None => self.forget_rollout(&p).await?,
                }
                let mut record = PlacementRecord {
                    placed: p.clone(),
                    generation,
                    decided_unix_millis: now.0.as_millisecond(),
                    shares,
                    decision,
                    // A later decision of a generation already traced (a rollout's next
                    // step, a cluster that went away) stays in its trace.
                    traceparent: change_traceparent.clone(),
                };
                let stored = match previous {
                    Some((prev, revision)) if K::same_intent(&prev, &record) => (prev, revision),
                    _ => {
                        K::name_decision(&mut record, &ulid::Ulid::new().to_string());
                        let progress = match &mut rolling {
                            Some(r) => r.save(ctx, &p)?,
                            None => Vec::new(),
                        };
                        let persisting = std::time::Instant::now();
                        let revision = write_record_with::<K>(ctx, &mut record, progress)
                            .instrument(telemetry::child(&change, "persist"))
                            .await?;
                        let stages = &ctx.metrics.change;
                        let traceparent = record.traceparent.as_str();
                        observe_traced(&stages.decision_seconds, decision_seconds, traceparent);
                        observe_traced(
                            &stages.persist_seconds,
                            persisting.elapsed().as_secs_f64(),
                            traceparent,
                        );
                        debug!(placed = %p, revision, "placements written");
                        if let Some(note) = self.kind.announce(object, &record, revision) {
                            ctx.note(&object.object_ref(&()), traced_note(note, traceparent));
                        }
                        (record, revision)
                    }
                };
                (Ok(stored), facts, recheck_after, rolling)
            }
        };
        let (record, revision, shares) = match &shown {
            Ok((record, revision)) => (Some(record), *revision, record.shares.as_slice()),
            Err(held) => (None, 0, held.as_slice()),
        };
        let reports = reports_of(ctx, &p, shares);
        let decided_at = record
            .and_then(|r| accord_common::runtime::time_from_millis(r.decided_unix_millis))
            .unwrap_or_else(|| now.clone());
        let Reported {
            mut status,
            notes,
            retry,
        } = self
            .kind
            .status_of(
                object,
                StatusInput {
                    record,
                    revision,
                    shares,
                    reports: &reports,
                    clusters: &clusters,
                    facts,
                    decided_at: &decided_at,
                    now,
                },
            )
            .await?;
        // The latest change's trace: this generation's when it is traced (also when its
        // decision changed nothing), else the record's.
        let traceparent = if change_traceparent.is_empty() {
            record.map_or("", |r| r.traceparent.as_str())
        } else {
            change_traceparent.as_str()
        };
        for note in notes {
            ctx.note(&object.object_ref(&()), traced_note(note, traceparent));
        }
        if let (Some(r), Some(stored)) = (rolling, record) {
            let at = self
                .step_rollout(object, r, &mut status, stored, &clusters, now)
                .await?;
            if let Some(at) = at {
                recheck = crate::distribution::earliest(recheck, at);
            }
        }
        let choice = choice.as_ref().and_then(|c| c.as_ref().ok());
        let explained =
            crate::distribution::choose::explain(choice, shares, &clusters, placement, now_unix);
        let shown_unsatisfied = K::status(object)
            .and_then(accord_crds::PlacedStatus::selection)
            .and_then(|s| s.unsatisfied.as_ref());
        if let Some(why) = choice
            .and_then(|c| c.unsatisfied.as_ref())
            .filter(|why| shown_unsatisfied != Some(*why))
        {
            ctx.note(
                &object.object_ref(&()),
                Note::warning(
                    accord_crds::conditions::reasons::PLACEMENT_UNSATISFIED,
                    why.clone(),
                ),
            );
        }
        *accord_crds::PlacedStatus::selection_mut(&mut status) = Some(explained);
        // The latest change's trace, as long as its record is the one in force.
        let trace_id = telemetry::trace_id(traceparent);
        *accord_crds::PlacedStatus::trace_id_mut(&mut status) =
            (!trace_id.is_empty()).then(|| trace_id.to_owned());
        ctx.views.set(&p, status.clone());
        K::summarize(&mut status, &ctx.status_limits);
        if K::status_changed(K::status(object), &status) {
            let desired = serde_json::to_value(&status).map_err(StoreError::Encode)?;
            // An outcome, and a decision that replaces one the status showed, are shown
            // within the window; progress towards an outcome (members still working) at
            // most once per progress interval. The first decision of an object is progress
            // too: members that finish within the interval cost one write, not two.
            let key = (p.namespace.clone(), p.name.clone());
            let replaced = self
                .shown
                .insert(key, revision)
                .is_some_and(|shown| shown != revision);
            let settled = || {
                Placed {
                    shares,
                    revision,
                    reports: &reports,
                    clusters: &clusters,
                }
                .settled()
            };
            let pace = if replaced || record.is_none() || fell_back(watched, &desired) || settled()
            {
                Pace::Prompt
            } else {
                Pace::Progress
            };
            ctx.submit_status::<K::Object>(watched, current_status(watched), desired, pace);
        }
        if let Some(e) = retry {
            return Err(e);
        }
        Ok(Action::requeue(recheck.map_or(RESYNC, |r| r.min(RESYNC))))
    }

    /// The span of a change of `watched` at `generation`, the root of its trace (a child of
    /// the user's span when the object names one in [`TRACEPARENT_ANNOTATION`]); a disabled
    /// span when tracing is off, when the stored record is of this generation already, or
    /// when this generation was traced before.
    fn change_span(
        &self,
        watched: &Watched<K>,
        p: &PlacedRef,
        generation: i64,
        previous: Option<&PlacementRecord<K::Decision>>,
    ) -> tracing::Span {
        if !telemetry::enabled() || previous.is_some_and(|r| r.generation == generation) {
            return tracing::Span::none();
        }
        let key = (p.namespace.clone(), p.name.clone());
        if self.traced.get(&key).is_some_and(|t| t.0 == generation) {
            return tracing::Span::none();
        }
        let span = tracing::info_span!(
            target: telemetry::TARGET,
            parent: None,
            "change",
            accord.kind = K::KIND.as_str(),
            accord.namespace = %p.namespace,
            accord.name = %p.name,
            accord.generation = generation,
        );
        if let Some(given) = watched.annotations().get(TRACEPARENT_ANNOTATION) {
            match telemetry::parse_traceparent(given) {
                Ok(_) => {
                    telemetry::set_parent(&span, given);
                }
                Err(e) => {
                    warn!(placed = %p, error = %e, "ignoring the object's {TRACEPARENT_ANNOTATION}");
                    self.ctx.note(
                        &watched.object_ref(&()),
                        Note::warning(
                            accord_crds::conditions::reasons::INVALID_TRACEPARENT,
                            format!("{TRACEPARENT_ANNOTATION}: {e}; traced without it"),
                        ),
                    );
                }
            }
        }
        self.traced
            .insert(key, (generation, telemetry::traceparent(&span)));
        span
    }

    /// The traceparent of generation `generation`'s change: the one traced here, else the
    /// stored record's when it is of that generation (a hub that restarted since); empty
    /// when the generation is not traced.
    pub(super) fn generation_traceparent(
        &self,
        p: &PlacedRef,
        generation: i64,
        previous: Option<&PlacementRecord<K::Decision>>,
    ) -> String {
        if telemetry::enabled()
            && let Some(t) = self
                .traced
                .get(&(p.namespace.clone(), p.name.clone()))
                .filter(|t| t.0 == generation)
        {
            return t.1.clone();
        }
        previous
            .filter(|r| r.generation == generation)
            .map(|r| r.traceparent.clone())
            .unwrap_or_default()
    }

    /// Says in the status (when it does not already) and in an Event that the object
    /// cannot be acted on; waits for a change.
    async fn invalid(
        &self,
        watched: &Watched<K>,
        message: String,
        status_patch: Option<serde_json::Value>,
    ) -> Result<Action, ReconcileError> {
        // Nothing is placed for it any more: no view to serve.
        self.ctx.views.remove(&placed_ref::<K>(watched));
        if let Some(patch) = status_patch {
            let current = current_status(watched);
            let mut desired = current.clone();
            if let (Some(d), Some(p)) = (desired.as_object_mut(), patch["status"].as_object()) {
                d.extend(p.clone());
            }
            self.ctx
                .submit_status::<K::Object>(watched, current, desired, Pace::Prompt);
            self.ctx.metrics.error("invalid_spec");
            self.ctx.note(
                &watched.object_ref(&()),
                Note::warning(accord_crds::conditions::reasons::INVALID_SPEC, message),
            );
        }
        self.kind.invalid(watched).await?;
        Ok(Action::await_change())
    }

    /// An object being deleted that holds one of the kind's finalizers: the kind's work
    /// first (when it asked for the finalizer), then the records, then the release.
    async fn delete(&self, watched: &Watched<K>, holds: &[&str]) -> Result<Action, ReconcileError> {
        let p = placed_ref::<K>(watched);
        if K::finalizer(watched).is_some_and(|f| holds.contains(&f)) {
            let record = stored_record::<K>(&self.ctx, &p);
            if let Finalized::Waiting(after) = self.kind.finalize(watched, record).await? {
                return Ok(Action::requeue(after.min(RESYNC)));
            }
        }
        remove_records(&self.ctx, &p).await?;
        self.kind.forget(&p.namespace, &p.name).await?;
        self.shown.remove(&(p.namespace.clone(), p.name.clone()));
        self.traced.remove(&(p.namespace.clone(), p.name.clone()));
        for f in holds {
            self.remove_finalizer(watched, f).await?;
        }
        info!(placed = %p, "deleted: its placements and reports are removed");
        Ok(Action::await_change())
    }

    /// Removes the records of an object that is gone (and not back under the same name).
    pub async fn forget(&self, namespace: &str, name: &str) -> Result<(), ReconcileError> {
        let back = self
            .objects
            .get(&ObjectRef::new(name).within(namespace))
            .is_some_and(|o| o.metadata.deletion_timestamp.is_none());
        if back {
            return Ok(());
        }
        self.shown.remove(&(namespace.to_owned(), name.to_owned()));
        self.traced.remove(&(namespace.to_owned(), name.to_owned()));
        let p = PlacedRef::new(K::KIND, namespace, name);
        remove_records(&self.ctx, &p).await?;
        self.kind.forget(namespace, name).await?;
        info!(placed = %p, "gone: its placements and reports are removed");
        Ok(())
    }

    /// Forgets every object of the kind that has a placements record but no object.
    pub async fn sweep(&self) {
        let prefix = self
            .ctx
            .store
            .keys()
            .placements(K::KIND.as_str(), "", "")
            .trim_end_matches('/')
            .to_owned();
        let prefix = format!("{prefix}/");
        let orphans: Vec<(String, String)> = self
            .ctx
            .placements
            .snapshot()
            .into_iter()
            .filter_map(|(key, _, _)| {
                let (ns, name) = key.strip_prefix(&prefix)?.split_once('/')?;
                let gone = self.objects.get(&ObjectRef::new(name).within(ns)).is_none();
                gone.then(|| (ns.to_owned(), name.to_owned()))
            })
            .collect();
        for (ns, name) in orphans {
            if let Err(e) = self.forget(&ns, &name).await {
                super::super::report_error(&self.ctx.metrics, &format!("{ns}/{name}"), &e);
            }
        }
    }

    async fn add_finalizer(
        &self,
        object: &Watched<K>,
        finalizer: &str,
    ) -> Result<Watched<K>, ReconcileError> {
        let patch = if object.finalizers().is_empty() {
            serde_json::json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
            ])
        } else {
            serde_json::json!([
                {"op": "test", "path": "/metadata/resourceVersion",
                 "value": object.resource_version()},
                {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
            ])
        };
        self.json_patch(object, patch).await
    }

    async fn remove_finalizer(
        &self,
        object: &Watched<K>,
        finalizer: &str,
    ) -> Result<(), ReconcileError> {
        let Some(i) = object.finalizers().iter().position(|f| f == finalizer) else {
            return Ok(());
        };
        // The test makes the removal fail rather than remove another finalizer if the list
        // changed meanwhile (the change reconciles the object again).
        let patch = serde_json::json!([
            {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": finalizer},
            {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
        ]);
        match self.json_patch(object, patch).await {
            Err(ReconcileError::Kube(kube::Error::Api(s))) if s.code == 404 => Ok(()),
            other => other.map(drop),
        }
    }

    async fn json_patch(
        &self,
        object: &Watched<K>,
        patch: serde_json::Value,
    ) -> Result<Watched<K>, ReconcileError> {
        let patch =
            serde_json::from_value(patch).map_err(|e| ReconcileError::Finalizer(e.to_string()))?;
        let api: Api<Watched<K>> = Api::namespaced(
            self.ctx.kube.clone(),
            &object.namespace().unwrap_or_default(),
        );
        api.patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
        .map_err(|e| match e {
            // A failed `test` operation: the object changed since the cache saw it (the
            // cache lags behind a write of ours, or someone else's). Retried shortly from
            // the fresher object, never left waiting for a change that already happened.
            kube::Error::Api(s) if s.code == 422 => {
                ReconcileError::Finalizer(format!("the object changed meanwhile ({})", s.message))
            }
            e => e.into(),
        })
    }
}
