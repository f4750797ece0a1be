//! The leader's FederatedKafkaTopic controller and KafkaTopicPolicy status writer.
//!
//! A topic: decode → validate → select clusters → check the KafkaTopicPolicies → resolve
//! name conflicts → (fenced write of the placements key when it changed) → aggregate status
//! → write status only when it changed. A topic that breaks a `Deny` policy sends nothing
//! new (its record stays as it was) and shows `PolicyViolation=True`/`PolicyViolated`; one
//! that breaks only `Audit` policies is propagated with reason `AuditOnly` and a Warning
//! Event. Two topics naming the same topic in the same cluster: the older keeps it, the
//! newer gets `Conflict` there and nothing is sent for it ([`crate::kafka_topic::conflict`]).
//!
//! Deletion goes through the finalizer `accord.io/kafka-topic`, handled here rather than
//! with `kube::runtime::finalizer` because a `Delete` deletion waits for the agents:
//! `Retain` drops the record and the status records at once; `Delete` rewrites the record
//! as a tombstone and releases the object once every member reported the topic gone, or
//! after `--topic-deletion-timeout` with a Warning Event naming the members left.
//!
//! A policy: decode → validate → count the topics that break it → write status only when it
//! changed.
//!
//! Triggers: the topics and policies themselves (each kind's own reflector, shared with the
//! other side: a policy or a namespace label change re-evaluates the topics, a topic's spec
//! change recounts the policies), a topic change re-checks every other topic of the same
//! name (a conflict ends when its owner goes), ManagedCluster changes of labels or
//! availability, and the agents' status records.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use accord_common::distribution::{PolicyKind, PolicyRef};
use accord_crds::conditions::{self, reasons as common_reasons, types};
use accord_crds::kafka_topic::{
    DeletionPolicy, FederatedKafkaTopic, FederatedKafkaTopicStatus, KafkaTopicPolicy,
};
use accord_crds::validate::Validate;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, Store as Reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tracing::info;

use super::{
    ClusterEvents, ClusterObject, ControllerContext, ControllerError, Decoded, Lenient, Listed,
    ReconcileError, decode_or_invalid, error_policy, patch_status, trace_result,
    trigger_on_changes,
};
use crate::distribution::{Decision, PlacementRecord};
use crate::kafka_topic::conflict::{self, Claim};
use crate::kafka_topic::deletion::{self, Progress};
use crate::kafka_topic::status::{StatusInputs, aggregate, new_warnings, policy_status};
use crate::kafka_topic::{FINALIZER, plan, policy, reasons, status};
use crate::promfed::select::{ClusterInfo, SelectedCluster, select_clusters};
use crate::store::{StatusRecord, StoreError};

/// Re-check every topic and policy this often even without events.
const RESYNC: Duration = Duration::from_secs(300);
/// Events a kind's shared reflector buffers for its controller.
const EVENT_BUFFER: usize = 1024;
/// Policies are recounted at most this often while topics keep changing.
const POLICY_DEBOUNCE: Duration = Duration::from_secs(1);
/// Triggers of one topic within this window make one reconcile: the reports of every
/// member, which come in together, make one status write instead of one each.
const TOPIC_DEBOUNCE: Duration = Duration::from_millis(250);
/// What the placements of a topic that breaks a `Deny` policy and was never sent say.
const HELD_BY_POLICY: &str =
    "not propagated: the topic breaks a Deny KafkaTopicPolicy (see condition PolicyViolation)";

/// A topic as watched: it always decodes this far.
type WatchedTopic = Lenient<FederatedKafkaTopic>;
/// A policy as watched: it always decodes this far.
type WatchedPolicy = Lenient<KafkaTopicPolicy>;

/// The controller's state: the shared context and the three reflectors it reads.
struct Kafka {
    ctx: Arc<ControllerContext>,
    topics: Reflector<WatchedTopic>,
    policies: Reflector<WatchedPolicy>,
    namespaces: Reflector<Namespace>,
}

/// What topic selection needs of a ManagedCluster, read field by field so that a cluster
/// whose spec does not decode still counts by its labels and status.
fn cluster_info(mc: &ClusterObject) -> ClusterInfo {
    ClusterInfo {
        labels: mc.labels().clone(),
        available: conditions::is_true(&mc.conditions(), types::AVAILABLE),
        federation_endpoint: None,
    }
}

fn cluster_infos(ctx: &ControllerContext) -> BTreeMap<String, ClusterInfo> {
    ctx.clusters
        .state()
        .iter()
        .map(|mc| (mc.name_any(), cluster_info(mc)))
        .collect()
}

fn object_name(o: &impl ResourceExt) -> String {
    match o.namespace() {
        Some(ns) => format!("{ns}/{}", o.name_any()),
        None => o.name_any(),
    }
}

fn topic_ref(topic: &impl ResourceExt) -> PolicyRef {
    PolicyRef::new(
        PolicyKind::FederatedKafkaTopic,
        &topic.namespace().unwrap_or_default(),
        &topic.name_any(),
    )
}

/// The topic name a watched topic claims, read without decoding the whole object.
fn watched_topic_name(topic: &WatchedTopic) -> String {
    topic
        .pointer("/spec/topicName")
        .and_then(serde_json::Value::as_str)
        .map_or_else(|| topic.name_any(), str::to_owned)
}

fn unix_millis(t: Option<&Time>) -> Option<i64> {
    t.map(|t| t.0.as_millisecond())
}

fn has_finalizer(o: &impl ResourceExt) -> bool {
    o.finalizers().iter().any(|f| f == FINALIZER)
}

/// `creationTimestamp`-ordered claim of a decoded topic on its name in the clusters it
/// selects (`None` when its selection cannot be evaluated).
fn claim(topic: &FederatedKafkaTopic, clusters: &BTreeMap<String, ClusterInfo>) -> Option<Claim> {
    let selected = select_clusters(
        topic.spec.clusters.as_deref(),
        topic.spec.cluster_selector.as_ref(),
        clusters,
    )
    .ok()?;
    Some(Claim {
        object: object_name(topic),
        created_unix_millis: unix_millis(topic.metadata.creation_timestamp.as_ref()),
        topic_name: topic.topic_name().to_owned(),
        clusters: selected.into_iter().map(|c| c.name).collect(),
    })
}

async fn reconcile_topic(
    topic: Arc<WatchedTopic>,
    kafka: Arc<Kafka>,
) -> Result<Action, ReconcileError> {
    let object = object_name(&*topic);
    let action = if topic.metadata.deletion_timestamp.is_some() {
        if has_finalizer(&*topic) {
            kafka.cleanup(&topic).await?
        } else {
            Action::await_change()
        }
    } else if !has_finalizer(&*topic) {
        // Go on with the object the patch returned rather than wait for the watch to bring
        // it back: one round trip less for every new topic.
        let patched = kafka.add_finalizer(&topic).await?;
        kafka.reconcile_live(&patched).await?
    } else {
        kafka.reconcile_live(&topic).await?
    };
    kafka.ctx.succeeded(&object);
    Ok(action)
}

impl Kafka {
    /// Reconciles a topic that carries the finalizer and is not being deleted.
    async fn reconcile_live(&self, topic: &WatchedTopic) -> Result<Action, ReconcileError> {
        match decode_or_invalid(topic, &Time(Timestamp::now())) {
            Decoded::Valid(t) => self.apply(&t).await,
            Decoded::Invalid {
                message,
                status_patch,
            } => self.undecodable(topic, &message, status_patch).await,
        }
    }

    fn topic_api(&self, ns: &str) -> Api<WatchedTopic> {
        Api::namespaced(self.ctx.kube.clone(), ns)
    }

    async fn add_finalizer(&self, topic: &WatchedTopic) -> Result<WatchedTopic, ReconcileError> {
        let patch = if topic.finalizers().is_empty() {
            serde_json::json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
            ])
        } else {
            serde_json::json!([
                {"op": "test", "path": "/metadata/resourceVersion",
                 "value": topic.resource_version()},
                {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
            ])
        };
        self.json_patch(topic, patch).await
    }

    async fn remove_finalizer(&self, topic: &WatchedTopic) -> Result<(), ReconcileError> {
        let Some(i) = topic.finalizers().iter().position(|f| f == FINALIZER) else {
            return Ok(());
        };
        // The test makes the removal fail rather than remove another finalizer if the list
        // changed meanwhile (the change reconciles the topic again).
        let patch = serde_json::json!([
            {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": FINALIZER},
            {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
        ]);
        match self.json_patch(topic, patch).await {
            Err(ReconcileError::Kube(kube::Error::Api(s))) if s.code == 404 => Ok(()),
            other => other.map(drop),
        }
    }

    async fn json_patch(
        &self,
        topic: &WatchedTopic,
        patch: serde_json::Value,
    ) -> Result<WatchedTopic, ReconcileError> {
        let patch =
            serde_json::from_value(patch).map_err(|e| ReconcileError::Finalizer(e.to_string()))?;
        self.topic_api(&topic.namespace().unwrap_or_default())
            .patch(
                &topic.name_any(),
                &PatchParams::default(),
                &Patch::Json::<()>(patch),
            )
            .await
            .map_err(|e| match e {
                // A failed `test` operation: the object changed since the cache saw it (the
                // cache lags behind a write of ours, or someone else's). Retried shortly
                // from the fresher object, never left waiting for a change that already
                // happened.
                kube::Error::Api(s) if s.code == 422 => ReconcileError::Finalizer(format!(
                    "the object changed meanwhile ({})",
                    s.message
                )),
                e => e.into(),
            })
    }

    /// Says in the status and an Event that the object cannot be read; waits for a change.
    async fn undecodable(
        &self,
        topic: &WatchedTopic,
        message: &str,
        status_patch: Option<serde_json::Value>,
    ) -> Result<Action, ReconcileError> {
        let Some(patch) = status_patch else {
            return Ok(Action::await_change());
        };
        self.topic_api(&topic.namespace().unwrap_or_default())
            .patch_status(
                &topic.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await?;
        self.ctx.metrics.error("invalid_spec");
        self.ctx
            .publish(
                &topic.object_ref(&()),
                EventType::Warning,
                common_reasons::INVALID_SPEC,
                message.to_owned(),
            )
            .await;
        Ok(Action::await_change())
    }

    /// `Ready=False`/`InvalidSpec` with `message` (and an Event the first time), for a spec
    /// the hub cannot act on.
    async fn invalid_spec(
        &self,
        topic: &FederatedKafkaTopic,
        message: String,
    ) -> Result<Action, ReconcileError> {
        let old = topic.status.as_ref();
        let mut status = old.cloned().unwrap_or_default();
        let generation = topic.metadata.generation;
        status.observed_generation = generation;
        status.conditions = conditions::merge(
            &status.conditions,
            &[conditions::Desired::new(
                types::READY,
                conditions::Status::False,
                common_reasons::INVALID_SPEC,
                message.clone(),
            )],
            generation,
            &Time(Timestamp::now()),
        );
        if status::status_changed(old, &status) {
            self.ctx.metrics.error("invalid_spec");
            self.ctx
                .publish(
                    &topic.object_ref(&()),
                    EventType::Warning,
                    common_reasons::INVALID_SPEC,
                    message,
                )
                .await;
        }
        self.write_status(topic, &status).await?;
        Ok(Action::await_change())
    }

    async fn write_status(
        &self,
        topic: &FederatedKafkaTopic,
        new: &FederatedKafkaTopicStatus,
    ) -> Result<(), ReconcileError> {
        let old = topic.status.as_ref();
        if !status::status_changed(old, new) {
            return Ok(());
        }
        let api: Api<FederatedKafkaTopic> = Api::namespaced(
            self.ctx.kube.clone(),
            &topic.namespace().unwrap_or_default(),
        );
        patch_status(&api, &topic.name_any(), old, new).await?;
        Ok(())
    }

    /// Every decodable KafkaTopicPolicy (one that does not decode says so in its own
    /// status and governs nothing until it does).
    fn decoded_policies(&self) -> Vec<KafkaTopicPolicy> {
        self.policies
            .state()
            .iter()
            .filter_map(|p| p.decode().ok())
            .collect()
    }

    fn namespace_labels(&self, ns: &str) -> BTreeMap<String, String> {
        self.namespaces
            .get(&ObjectRef::new(ns))
            .map(|n| n.labels().clone())
            .unwrap_or_default()
    }

    /// The claims of every topic that names `topic_name`, except those whose deletion has
    /// already released them.
    fn claims(&self, topic_name: &str, clusters: &BTreeMap<String, ClusterInfo>) -> Vec<Claim> {
        self.topics
            .state()
            .iter()
            .filter(|t| watched_topic_name(t) == topic_name)
            .filter(|t| t.metadata.deletion_timestamp.is_none() || has_finalizer(&***t))
            .filter_map(|t| t.decode().ok())
            .filter_map(|t| claim(&t, clusters))
            .collect()
    }

    fn reports(&self, record: &PlacementRecord) -> HashMap<String, StatusRecord> {
        let p = &record.policy;
        record
            .shares
            .iter()
            .filter_map(|s| {
                let key = self.ctx.store.keys().status(
                    &s.cluster,
                    p.kind.as_str(),
                    &p.namespace,
                    &p.name,
                );
                self.ctx
                    .statuses
                    .get(&key)
                    .map(|(r, _)| (s.cluster.clone(), r))
            })
            .collect()
    }

    /// Writes `record` (fenced) and waits until the cache has it; returns its revision.
    async fn write_record(&self, record: &PlacementRecord) -> Result<i64, ReconcileError> {
        let ctx = &self.ctx;
        let p = &record.policy;
        let key = ctx
            .store
            .keys()
            .placements(p.kind.as_str(), &p.namespace, &p.name);
        let fence = ctx.election.fence().ok_or(ReconcileError::NotLeader)?;
        let value = serde_json::to_vec(record).map_err(StoreError::Encode)?;
        let revision = ctx.store.fenced_put(&fence, &key, value).await?;
        // Read our own write before anything is computed from the cache.
        ctx.placements.wait_for_revision(revision).await;
        Ok(revision)
    }

    async fn apply(&self, topic: &FederatedKafkaTopic) -> Result<Action, ReconcileError> {
        let ctx = &self.ctx;
        let p = topic_ref(topic);
        if let Err(errors) = topic.spec.validate() {
            return self.invalid_spec(topic, errors.to_string()).await;
        }
        let clusters = cluster_infos(ctx);
        let selected = match select_clusters(
            topic.spec.clusters.as_deref(),
            topic.spec.cluster_selector.as_ref(),
            &clusters,
        ) {
            Ok(s) => s,
            Err(e) => return self.invalid_spec(topic, e.to_string()).await,
        };
        let violations = policy::violations(
            topic,
            &self.namespace_labels(&p.namespace),
            &self.decoded_policies(),
        );
        let denied = !policy::denying(&violations).is_empty();

        let key = ctx
            .store
            .keys()
            .placements(p.kind.as_str(), &p.namespace, &p.name);
        let previous = ctx.placements.get(&key);
        let shown: Option<(PlacementRecord, i64)> = if denied {
            // Nothing new is sent: the members keep what they were last sent.
            previous
        } else {
            Some(
                self.decide(topic, &p, &selected, &clusters, previous)
                    .await?,
            )
        };
        let held;
        let (shares, decision, revision) = match &shown {
            Some((record, revision)) => (record.shares.as_slice(), record.topic(), *revision),
            None => {
                held = plan::held(&selected, HELD_BY_POLICY);
                (held.as_slice(), None, 0)
            }
        };
        let reports = shown
            .as_ref()
            .map(|(r, _)| self.reports(r))
            .unwrap_or_default();
        let old = topic.status.as_ref();
        let status = aggregate(&StatusInputs {
            shares,
            decision,
            revision,
            reports: &reports,
            clusters: &clusters,
            violations: &violations,
            generation: topic.metadata.generation,
            old,
            now: &Time(Timestamp::now()),
        });
        for (reason, note) in new_warnings(old, &status) {
            ctx.publish(&topic.object_ref(&()), EventType::Warning, reason, note)
                .await;
        }
        self.write_status(topic, &status).await?;
        Ok(Action::requeue(RESYNC))
    }

    /// The record `topic` calls for now, written when it differs from `previous`.
    async fn decide(
        &self,
        topic: &FederatedKafkaTopic,
        p: &PolicyRef,
        selected: &[SelectedCluster],
        clusters: &BTreeMap<String, ClusterInfo>,
        previous: Option<(PlacementRecord, i64)>,
    ) -> Result<(PlacementRecord, i64), ReconcileError> {
        let before = previous
            .as_ref()
            .and_then(|(r, _)| r.topic())
            .map(|d| &d.spec)
            .filter(|s| !s.delete);
        let spec = plan::assignment(topic, before);
        let conflicts = match claim(topic, clusters) {
            Some(me) => conflict::conflicts(&me, &self.claims(&spec.topic_name, clusters)),
            None => BTreeMap::new(),
        };
        let (shares, decision) = plan::decide(selected, &spec, &conflicts);
        let record = PlacementRecord {
            policy: p.clone(),
            generation: topic.metadata.generation.unwrap_or_default(),
            decided_unix_millis: Timestamp::now().as_millisecond(),
            shares,
            decision: Decision::KafkaTopic(decision),
        };
        if let Some((prev, revision)) = previous
            && prev.same_decision(&record)
        {
            return Ok((prev, revision));
        }
        let revision = self.write_record(&record).await?;
        let sent: Vec<&str> = record
            .shares
            .iter()
            .filter(|s| s.assignment.is_some())
            .map(|s| s.cluster.as_str())
            .collect();
        info!(topic = %p, clusters = ?sent, revision, "topic placements");
        if !sent.is_empty() {
            self.ctx
                .publish(
                    &topic.object_ref(&()),
                    EventType::Normal,
                    reasons::APPLIED,
                    format!(
                        "topic {} ({} partitions, replication factor {}) sent to {} at revision {revision}",
                        spec.topic_name,
                        spec.partitions,
                        spec.replication_factor,
                        sent.join(", ")
                    ),
                )
                .await;
        }
        Ok((record, revision))
    }

    /// Drops the record and the status records, and lets the object go.
    async fn release(&self, topic: &WatchedTopic, p: &PolicyRef) -> Result<(), ReconcileError> {
        let ctx = &self.ctx;
        let fence = ctx.election.fence().ok_or(ReconcileError::NotLeader)?;
        let key = ctx
            .store
            .keys()
            .placements(p.kind.as_str(), &p.namespace, &p.name);
        ctx.store.fenced_delete(&fence, &key).await?;
        ctx.store
            .delete_policy_status(p.kind.as_str(), &p.namespace, &p.name)
            .await?;
        self.remove_finalizer(topic).await
    }

    /// The finalizer's work. Reads only metadata, the record and `spec.deletionPolicy`, so
    /// an object that does not decode is deleted too.
    async fn cleanup(&self, topic: &WatchedTopic) -> Result<Action, ReconcileError> {
        let ctx = &self.ctx;
        let p = topic_ref(topic);
        let key = ctx
            .store
            .keys()
            .placements(p.kind.as_str(), &p.namespace, &p.name);
        let policy = topic
            .pointer("/spec/deletionPolicy")
            .and_then(|v| serde_json::from_value::<DeletionPolicy>(v.clone()).ok())
            .unwrap_or_default();
        let previous = ctx.placements.get(&key);
        let tombstone = match (&policy, previous) {
            (DeletionPolicy::Delete, Some((record, revision)))
                if deletion::is_tombstone(&record) =>
            {
                Some((record, revision))
            }
            (DeletionPolicy::Delete, Some((record, _))) => match deletion::tombstone(&record) {
                Some(t) => {
                    let revision = self.write_record(&t).await?;
                    info!(topic = %p, revision, "deleting the topic in every member");
                    Some((t, revision))
                }
                None => None,
            },
            _ => None,
        };
        let Some((tombstone, revision)) = tombstone else {
            self.release(topic, &p).await?;
            let note = match policy {
                DeletionPolicy::Retain => {
                    "deletionPolicy Retain: the topic is left in every member's Kafka"
                }
                DeletionPolicy::Delete => "the topic was not sent to any member",
            };
            info!(topic = %p, "topic released: {note}");
            ctx.publish(
                &topic.object_ref(&()),
                EventType::Normal,
                reasons::DELETED,
                note.to_owned(),
            )
            .await;
            return Ok(Action::await_change());
        };
        let clusters = cluster_infos(ctx);
        let left = deletion::remaining(&tombstone, revision, &self.reports(&tombstone), |c| {
            clusters.contains_key(c)
        });
        let since = unix_millis(topic.metadata.deletion_timestamp.as_ref())
            .unwrap_or_else(|| Timestamp::now().as_millisecond());
        let topic_name = tombstone
            .topic()
            .map(|d| d.spec.topic_name.clone())
            .unwrap_or_default();
        match deletion::progress(
            left,
            since,
            Timestamp::now().as_millisecond(),
            ctx.topic_deletion_timeout,
        ) {
            Progress::Done => {
                self.release(topic, &p).await?;
                info!(topic = %p, "topic deleted in every member");
                ctx.publish(
                    &topic.object_ref(&()),
                    EventType::Normal,
                    reasons::DELETED,
                    format!("topic {topic_name} deleted in every member"),
                )
                .await;
                Ok(Action::await_change())
            }
            Progress::Waiting { left, recheck } => {
                tracing::debug!(topic = %p, ?left, "waiting for members to delete the topic");
                self.show_deletion(topic, &tombstone, revision, &clusters, &left, recheck)
                    .await?;
                Ok(Action::requeue(recheck.min(RESYNC)))
            }
            Progress::TimedOut { left } => {
                let note =
                    deletion::incomplete_message(&topic_name, &left, ctx.topic_deletion_timeout);
                tracing::warn!(topic = %p, ?left, "{note}");
                ctx.publish(
                    &topic.object_ref(&()),
                    EventType::Warning,
                    reasons::DELETION_INCOMPLETE,
                    note,
                )
                .await;
                self.release(topic, &p).await?;
                Ok(Action::await_change())
            }
        }
    }

    /// Shows a waiting deletion in the status: each member's placement as its agent
    /// reports the tombstone, and `Ready=False`/`Deleting` naming the members left. An
    /// object that does not decode keeps the status it has.
    async fn show_deletion(
        &self,
        watched: &WatchedTopic,
        tombstone: &PlacementRecord,
        revision: i64,
        clusters: &BTreeMap<String, ClusterInfo>,
        left: &[String],
        recheck: Duration,
    ) -> Result<(), ReconcileError> {
        let Ok(topic) = watched.decode() else {
            return Ok(());
        };
        let old = topic.status.as_ref();
        let now = Time(Timestamp::now());
        let mut status = aggregate(&StatusInputs {
            shares: &tombstone.shares,
            decision: tombstone.topic(),
            revision,
            reports: &self.reports(tombstone),
            clusters,
            violations: &[],
            generation: topic.metadata.generation,
            old,
            now: &now,
        });
        status.conditions = conditions::merge(
            &status.conditions,
            &[status::deleting_condition(left, recheck)],
            topic.metadata.generation,
            &now,
        );
        // Whether a policy is broken no longer matters, and the bound's countdown alone
        // is no reason to write.
        status
            .conditions
            .retain(|c| c.type_ != types::POLICY_VIOLATION);
        let unchanged_but_countdown = old.is_some_and(|o| {
            let ready = |s: &FederatedKafkaTopicStatus| {
                conditions::find(&s.conditions, types::READY)
                    .map(|c| (c.reason.clone(), c.status.clone()))
            };
            ready(o) == ready(&status) && o.placements == status.placements
        });
        if unchanged_but_countdown {
            return Ok(());
        }
        self.write_status(&topic, &status).await
    }

    /// Recounts the topics that break `policy` and writes its status when it changed.
    async fn reconcile_policy(&self, policy: &WatchedPolicy) -> Result<Action, ReconcileError> {
        let api: Api<WatchedPolicy> = Api::all(self.ctx.kube.clone());
        let decoded = match decode_or_invalid(policy, &Time(Timestamp::now())) {
            Decoded::Valid(p) => p,
            Decoded::Invalid {
                message,
                status_patch,
            } => {
                if let Some(patch) = status_patch {
                    api.patch_status(
                        &policy.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await?;
                    self.ctx.metrics.error("invalid_spec");
                    self.ctx
                        .publish(
                            &policy.object_ref(&()),
                            EventType::Warning,
                            common_reasons::INVALID_SPEC,
                            message,
                        )
                        .await;
                }
                return Ok(Action::await_change());
            }
        };
        let problem = policy_problem(&decoded);
        let one = std::slice::from_ref(&*decoded);
        let violating = self
            .topics
            .state()
            .iter()
            .filter(|t| t.metadata.deletion_timestamp.is_none())
            .filter_map(|t| t.decode().ok())
            .filter(|t| {
                let labels = self.namespace_labels(&t.namespace().unwrap_or_default());
                !policy::violations(t, &labels, one).is_empty()
            })
            .count();
        let old = decoded.status.as_ref();
        let new = policy_status(
            old,
            decoded.metadata.generation,
            violating,
            problem,
            &Time(Timestamp::now()),
        );
        if status::policy_status_changed(old, &new) {
            let api: Api<KafkaTopicPolicy> = Api::all(self.ctx.kube.clone());
            patch_status(&api, &decoded.name_any(), old, &new).await?;
        }
        Ok(Action::requeue(RESYNC))
    }
}

/// Why `policy` cannot be evaluated as written, if it cannot: its spec fails validation,
/// or its namespace selector uses an operator or values the hub cannot evaluate (such a
/// policy fails closed: every topic it could govern counts as breaking it).
fn policy_problem(policy: &KafkaTopicPolicy) -> Option<String> {
    if let Err(e) = policy.spec.validate() {
        return Some(e.to_string());
    }
    let selector = policy.spec.namespace_selector.as_ref()?;
    crate::promfed::select::matches(selector, &BTreeMap::new(), "spec.namespaceSelector")
        .err()
        .map(|e| e.to_string())
}

async fn reconcile_policy(
    policy: Arc<WatchedPolicy>,
    kafka: Arc<Kafka>,
) -> Result<Action, ReconcileError> {
    let action = kafka.reconcile_policy(&policy).await?;
    kafka.ctx.succeeded(&object_name(&*policy));
    Ok(action)
}

fn topic_error(topic: Arc<WatchedTopic>, error: &ReconcileError, kafka: Arc<Kafka>) -> Action {
    error_policy(&kafka.ctx, &object_name(&*topic), error)
}

fn policy_error(policy: Arc<WatchedPolicy>, error: &ReconcileError, kafka: Arc<Kafka>) -> Action {
    error_policy(&kafka.ctx, &object_name(&*policy), error)
}

/// Whether a watched topic selects `cluster` by name or selects by label (so a label change
/// of any cluster may concern it).
fn may_select(topic: &WatchedTopic, cluster: &str) -> bool {
    let names_it = topic
        .pointer("/spec/clusters")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c == cluster));
    names_it || topic.pointer("/spec/clusterSelector").is_some()
}

/// Sends every object of `store` to `trigger`.
fn trigger_all<K>(store: &Reflector<K>, trigger: &mpsc::UnboundedSender<ObjectRef<K>>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    for o in store.state() {
        let _ = trigger.send(ObjectRef::from_obj(&*o));
    }
}

/// The object an event is about, and whether it is gone.
fn changed<K>(event: &Result<watcher::Event<K>, watcher::Error>) -> Option<(&K, bool)> {
    match event {
        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => Some((o, false)),
        Ok(watcher::Event::Delete(o)) => Some((o, true)),
        _ => None,
    }
}

/// Runs the topic controller and the policy status writer until one fails; `clusters` is
/// the subscription to the shared ManagedCluster reflector, and `listed` is told once the
/// topics and the policies are listed.
pub async fn run(
    ctx: Arc<ControllerContext>,
    clusters: ClusterEvents,
    listed: Listed,
) -> Result<(), ControllerError> {
    let (topic_trigger, topic_triggers) = mpsc::unbounded_channel::<ObjectRef<WatchedTopic>>();
    let (policy_trigger, policy_triggers) = mpsc::unbounded_channel::<ObjectRef<WatchedPolicy>>();
    let (topics, topic_writer) = reflector::store_shared::<WatchedTopic>(EVENT_BUFFER);
    let (policies, policy_writer) = reflector::store_shared::<WatchedPolicy>(EVENT_BUFFER);
    let (namespaces, namespace_writer) = reflector::store::<Namespace>();
    let topic_subscription = topic_writer
        .subscribe()
        .ok_or(ControllerError::Ended("FederatedKafkaTopic reflector"))?;
    let policy_subscription = policy_writer
        .subscribe()
        .ok_or(ControllerError::Ended("KafkaTopicPolicy reflector"))?;

    // Topic events, seen after the store has them: a topic's spec change or deletion
    // re-checks every other topic of its (old or new) name — a conflict ends when its
    // owner goes — and recounts the policies.
    let topic_changes = {
        let (topics, policies) = (topics.clone(), policies.clone());
        let (tt, pt) = (topic_trigger.clone(), policy_trigger.clone());
        // Each topic's name and generation as last seen.
        let mut seen: HashMap<String, (String, Option<i64>)> = HashMap::new();
        watcher(
            Api::<WatchedTopic>::all(ctx.kube.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect_shared(topic_writer)
        .for_each(move |event| {
            if let Some((t, gone)) = changed(&event) {
                let key = object_name(t);
                let now = (watched_topic_name(t), t.metadata.generation);
                let before = if gone {
                    seen.remove(&key)
                } else {
                    seen.insert(key.clone(), now.clone())
                };
                let releasing = t.metadata.deletion_timestamp.is_some() && !has_finalizer(t);
                if gone || releasing || before.as_ref() != Some(&now) {
                    let names = [Some(&now.0), before.as_ref().map(|b| &b.0)];
                    for other in topics.state() {
                        let name = watched_topic_name(&other);
                        if object_name(&*other) != key && names.contains(&Some(&name)) {
                            let _ = tt.send(ObjectRef::from_obj(&*other));
                        }
                    }
                    trigger_all(&policies, &pt);
                }
            }
            futures::future::ready(())
        })
    };

    // Policy events: a new, changed or deleted policy re-evaluates every topic.
    let policy_changes = {
        let topics = topics.clone();
        let tt = topic_trigger.clone();
        let mut seen: HashMap<String, Option<i64>> = HashMap::new();
        watcher(
            Api::<WatchedPolicy>::all(ctx.kube.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect_shared(policy_writer)
        .for_each(move |event| {
            if let Some((p, gone)) = changed(&event) {
                let key = object_name(p);
                let before = if gone {
                    seen.remove(&key)
                } else {
                    seen.insert(key, p.metadata.generation)
                };
                if gone || before != Some(p.metadata.generation) {
                    trigger_all(&topics, &tt);
                }
            }
            futures::future::ready(())
        })
    };

    // Namespace label changes: the topics there and every policy (namespaceSelector).
    let namespace_changes = {
        let (topics, policies) = (topics.clone(), policies.clone());
        let (tt, pt) = (topic_trigger.clone(), policy_trigger.clone());
        let mut seen: HashMap<String, BTreeMap<String, String>> = HashMap::new();
        watcher(
            Api::<Namespace>::all(ctx.kube.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect(namespace_writer)
        .for_each(move |event| {
            if let Some((ns, gone)) = changed(&event) {
                let name = ns.name_any();
                let labels = ns.labels().clone();
                let before = if gone {
                    seen.remove(&name)
                } else {
                    seen.insert(name.clone(), labels.clone())
                };
                if before.as_ref() != Some(&labels) {
                    for t in topics.state() {
                        if t.namespace().as_deref() == Some(name.as_str()) {
                            let _ = tt.send(ObjectRef::from_obj(&*t));
                        }
                    }
                    trigger_all(&policies, &pt);
                }
            }
            futures::future::ready(())
        })
    };

    // ManagedCluster changes that matter here → every topic naming the cluster or
    // selecting by label.
    let cluster_changes = {
        let topics = topics.clone();
        let tt = topic_trigger.clone();
        let mut seen: HashMap<String, ClusterInfo> = HashMap::new();
        clusters.for_each(move |mc| {
            let name = mc.name_any();
            let info = cluster_info(&mc);
            if seen.get(&name) != Some(&info) {
                seen.insert(name.clone(), info);
                for t in topics.state() {
                    if may_select(&t, &name) {
                        let _ = tt.send(ObjectRef::from_obj(&*t));
                    }
                }
            }
            futures::future::ready(())
        })
    };

    // Agents' reports → the topic they are about.
    let report_changes = trigger_on_changes(
        ctx.statuses.subscribe(),
        ctx.store.keys().status_prefix(),
        topic_trigger,
        |rest| match rest.split('/').collect::<Vec<_>>().as_slice() {
            [_cluster, kind, ns, name] if *kind == PolicyKind::FederatedKafkaTopic.as_str() => {
                Some((ns, name))
            }
            _ => None,
        },
    );

    let report_listed = {
        let (topics, policies) = (topics.clone(), policies.clone());
        async move {
            if topics.wait_until_ready().await.is_ok() && policies.wait_until_ready().await.is_ok()
            {
                let _ = listed.send(());
            }
            std::future::pending::<()>().await;
        }
    };

    let kafka = Arc::new(Kafka {
        ctx,
        topics: topics.clone(),
        policies: policies.clone(),
        namespaces,
    });
    let topic_controller = Controller::for_shared_stream(topic_subscription, topics)
        .with_config(ControllerConfig::default().debounce(TOPIC_DEBOUNCE))
        .reconcile_on(UnboundedReceiverStream::new(topic_triggers))
        .run(reconcile_topic, topic_error, kafka.clone())
        .for_each(trace_result);
    let policy_controller = Controller::for_shared_stream(policy_subscription, policies)
        .with_config(ControllerConfig::default().debounce(POLICY_DEBOUNCE))
        .reconcile_on(UnboundedReceiverStream::new(policy_triggers))
        .run(reconcile_policy, policy_error, kafka)
        .for_each(trace_result);
    // One task on purpose, as in the other controllers: a shared-stream subscription that
    // finds its object already deleted returns Pending without a wake-up, and the other
    // branches' activity polls it again.
    tokio::select! {
        () = topic_controller => {}
        () = policy_controller => {}
        () = topic_changes => {}
        () = policy_changes => {}
        () = namespace_changes => {}
        () = cluster_changes => {}
        () = report_changes => {}
        () = report_listed => {}
    }
    Err(ControllerError::Ended("FederatedKafkaTopic controller"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::ErrorCategory as _;

    fn watched(value: serde_json::Value) -> WatchedTopic {
        WatchedTopic::from_value(value).unwrap()
    }

    #[test]
    fn the_claimed_name_is_read_without_decoding_the_object() {
        let named = watched(serde_json::json!({
            "apiVersion": "accord.io/v1alpha1", "kind": "FederatedKafkaTopic",
            "metadata": {"name": "events", "namespace": "team"},
            "spec": {"topicName": "fraud.events", "partitions": 3_000_000_000_i64},
        }));
        assert!(named.decode().is_err(), "the fixture must not decode");
        assert_eq!(watched_topic_name(&named), "fraud.events");
        let unnamed = watched(serde_json::json!({
            "apiVersion": "accord.io/v1alpha1", "kind": "FederatedKafkaTopic",
            "metadata": {"name": "events", "namespace": "team"},
            "spec": {"clusterSelector": {}},
        }));
        assert_eq!(watched_topic_name(&unnamed), "events");
        assert!(may_select(&unnamed, "anything"));
        assert!(!may_select(&named, "a"));
    }

    #[test]
    fn a_topic_claims_its_name_in_the_clusters_it_selects_by_age() {
        let topic: FederatedKafkaTopic = serde_json::from_value(serde_json::json!({
            "apiVersion": "accord.io/v1alpha1", "kind": "FederatedKafkaTopic",
            "metadata": {"name": "events", "namespace": "team",
                         "creationTimestamp": "2026-01-01T00:00:10Z"},
            "spec": {"partitions": 3, "replicationFactor": 1, "clusters": ["a", "mars"]},
        }))
        .unwrap();
        let c = claim(&topic, &BTreeMap::new()).unwrap();
        assert_eq!(c.object, "team/events");
        assert_eq!(c.topic_name, "events");
        assert_eq!(c.clusters, ["a", "mars"], "unknown names still claim");
        assert_eq!(c.created_unix_millis, Some(1_767_225_610_000));
    }

    #[test]
    fn a_policy_that_cannot_be_evaluated_says_why() {
        let policy = |spec: serde_json::Value| -> KafkaTopicPolicy {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "accord.io/v1alpha1", "kind": "KafkaTopicPolicy",
                "metadata": {"name": "p"}, "spec": spec,
            }))
            .unwrap()
        };
        assert_eq!(
            policy_problem(&policy(serde_json::json!({"minPartitions": 12}))),
            None
        );
        let bad_selector = policy(serde_json::json!({"namespaceSelector": {
            "matchExpressions": [{"key": "tier", "operator": "Matches", "values": ["x"]}]}}));
        let problem = policy_problem(&bad_selector).unwrap();
        assert!(
            problem.contains("spec.namespaceSelector") && problem.contains("unknown operator"),
            "{problem}"
        );
        let bad_pattern = policy(serde_json::json!({"topicNamePattern": "("}));
        assert!(
            policy_problem(&bad_pattern)
                .unwrap()
                .contains("spec.topicNamePattern")
        );
    }

    fn api_error(code: u16) -> ReconcileError {
        ReconcileError::Kube(kube::Error::Api(Box::new(
            kube::core::Status::failure("refused", "Test").with_code(code),
        )))
    }

    #[test]
    fn refused_requests_wait_for_a_change_and_passing_trouble_is_retried() {
        assert!(!api_error(403).is_transient());
        assert!(api_error(409).is_transient());
        assert!(api_error(503).is_transient());
        assert!(!ReconcileError::NotLeader.is_transient());
        assert!(ReconcileError::Finalizer("x".into()).is_transient());
        assert_eq!(ReconcileError::NotLeader.category(), "not_leader");
    }
}
