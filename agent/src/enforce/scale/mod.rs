//! The Deployment scaling enforcer (CrossClusterScalePolicy): sets `spec.replicas` of
//! `apps/v1` Deployments with server-side apply and stamps the scale request id, leaves a
//! Deployment alone while a HorizontalPodAutoscaler scales it, and reports the replicas it
//! sees.
//!
//! It watches Deployments and HorizontalPodAutoscalers in every namespace that holds an
//! assigned Deployment; [`judge`] decides from those caches.

pub mod judge;

use std::collections::{BTreeSet, HashMap};

use accord_common::distribution::{PlacedRef, PlacementState, ScaleSpec};
use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::Api;
use kube::runtime::reflector::ObjectRef;
use tracing::{debug, info};

use self::judge::Verdict;
use super::watch::ResourceWatch;
use super::{
    Action, ApplyError, EventSink, Judgement, KindEnforcer, Mine, WatchEvent, server_side_apply,
};
use crate::assignments::Assigned;
use crate::capacity::SharedRoom;
use crate::metrics::Metrics;
use crate::report::Report;

/// Plural name of the Deployments resource, in watch events.
pub const DEPLOYMENTS: &str = "deployments";
/// Plural name of the HorizontalPodAutoscalers resource, in watch events.
pub const HPAS: &str = "horizontalpodautoscalers";

/// The watches of one namespace and whether they have listed yet.
struct NamespaceWatch {
    deployments: ResourceWatch<Deployment>,
    hpas: ResourceWatch<HorizontalPodAutoscaler>,
    deployments_synced: bool,
    hpas_synced: bool,
    /// The last watch error while not synced, if any.
    error: Option<String>,
}

impl NamespaceWatch {
    fn start(client: &kube::Client, namespace: &str, events: &EventSink) -> Self {
        Self {
            deployments: ResourceWatch::start(
                client,
                DEPLOYMENTS,
                namespace,
                judge::slim_deployment,
                events.clone(),
            ),
            hpas: ResourceWatch::start(client, HPAS, namespace, judge::slim_hpa, events.clone()),
            deployments_synced: false,
            hpas_synced: false,
            error: None,
        }
    }

    /// Whether both caches have been filled at least once.
    fn synced(&self) -> bool {
        self.deployments_synced && self.hpas_synced
    }
}

/// Scales Deployments.
pub struct ScaleEnforcer {
    client: kube::Client,
    metrics: Metrics,
    /// The capacity counter's last room, for the replicas that fit ([`judge::fitting`]).
    room: SharedRoom,
    /// Assigned policies by target Deployment (namespace, name); the first one owns it.
    targets: HashMap<(String, String), BTreeSet<PlacedRef>>,
    namespaces: HashMap<String, NamespaceWatch>,
}

impl ScaleEnforcer {
    /// An enforcer acting through `client`, estimating what fits from `room`.
    pub fn new(client: kube::Client, metrics: Metrics, room: SharedRoom) -> Self {
        Self {
            client,
            metrics,
            room,
            targets: HashMap::new(),
            namespaces: HashMap::new(),
        }
    }

    fn in_namespace(&self, namespace: &str) -> Vec<PlacedRef> {
        self.targets
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .flat_map(|(_, set)| set.iter().cloned())
            .collect()
    }
}

/// Whether the agent watches anything for `target` (otherwise the judge refuses it).
fn watched(target: &ScaleSpec) -> bool {
    target.is_deployment() && !target.namespace.is_empty() && !target.name.is_empty()
}

impl KindEnforcer for ScaleEnforcer {
    type Spec = ScaleSpec;

    const NAME: &'static str = "scale";

    fn assign(&mut self, mine: &Mine<'_, ScaleSpec>, events: &EventSink) {
        self.targets.clear();
        for &(policy, s, _) in mine {
            if watched(s) {
                self.targets
                    .entry((s.namespace.clone(), s.name.clone()))
                    .or_default()
                    .insert(policy.clone());
            }
        }
        let needed: BTreeSet<String> = self.targets.keys().map(|(ns, _)| ns.clone()).collect();
        self.namespaces.retain(|ns, _| needed.contains(ns));
        for ns in needed {
            if !self.namespaces.contains_key(&ns) {
                debug!(namespace = %ns, "watching namespace");
                let watch = NamespaceWatch::start(&self.client, &ns, events);
                self.namespaces.insert(ns, watch);
            }
        }
    }

    fn event(&mut self, event: WatchEvent) -> Vec<PlacedRef> {
        match event {
            WatchEvent::Changed {
                resource: DEPLOYMENTS,
                namespace,
                name,
            } => self
                .targets
                .get(&(namespace, name))
                .map(|set| set.iter().cloned().collect())
                .unwrap_or_default(),
            // An HPA may name any Deployment of its namespace.
            WatchEvent::Changed { namespace, .. } => self.in_namespace(&namespace),
            WatchEvent::Synced {
                resource,
                namespace,
            } => {
                let Some(watch) = self.namespaces.get_mut(&namespace) else {
                    return Vec::new();
                };
                match resource {
                    DEPLOYMENTS => watch.deployments_synced = true,
                    _ => watch.hpas_synced = true,
                }
                if !watch.synced() {
                    return Vec::new();
                }
                watch.error = None;
                self.in_namespace(&namespace)
            }
            WatchEvent::Failed {
                namespace, message, ..
            } => match self.namespaces.get_mut(&namespace) {
                // Once listed, the cache stays valid while the watch retries.
                Some(watch) if !watch.synced() => {
                    watch.error = Some(message);
                    self.in_namespace(&namespace)
                }
                _ => Vec::new(),
            },
        }
    }

    fn capacity_counted(&mut self) -> Vec<PlacedRef> {
        self.targets.values().flatten().cloned().collect()
    }

    fn look(
        &self,
        policy: &PlacedRef,
        target: &ScaleSpec,
        assigned: &Assigned,
        apply_error: Option<&ApplyError>,
    ) -> Option<Judgement> {
        if !watched(target) {
            let verdict = judge::verdict(target, None, []);
            return Some(Judgement {
                report: judge::report(target, assigned.revision, &verdict, None, apply_error, None),
                action: Action::Settled,
            });
        }
        let watch = self.namespaces.get(&target.namespace)?;
        if !watch.synced() {
            let message = watch.error.clone()?;
            return Some(Judgement {
                report: Report::without_object(
                    PlacementState::Unavailable,
                    message,
                    assigned.revision,
                ),
                action: Action::Unknown,
            });
        }
        let deployment = watch
            .deployments
            .cache
            .get(&ObjectRef::new(&target.name).within(&target.namespace));
        // Another policy got to this Deployment first: only one may own its replicas.
        let owner = self
            .targets
            .get(&(target.namespace.clone(), target.name.clone()))
            .and_then(|set| set.first())
            .filter(|owner| *owner != policy);
        let verdict = match owner {
            Some(owner) if deployment.is_some() => Verdict::Conflict(format!(
                "policy {owner} already sets the replicas of Deployment {}/{}",
                target.namespace, target.name
            )),
            _ => {
                let hpas = watch.hpas.cache.state();
                judge::verdict(
                    target,
                    deployment.as_deref(),
                    hpas.iter().map(AsRef::as_ref),
                )
            }
        };
        let action = match verdict {
            Verdict::NeedsApply => {
                let from_version = deployment
                    .as_ref()
                    .and_then(|d| d.metadata.resource_version.clone())
                    .unwrap_or_default();
                match deployment.as_deref().and_then(|d| judge::repair(target, d)) {
                    Some(repair) => Action::Repair {
                        from_version,
                        repair,
                    },
                    None => Action::Apply { from_version },
                }
            }
            Verdict::Synced
            | Verdict::TargetNotFound
            | Verdict::Conflict(_)
            | Verdict::Unsupported(_) => Action::Settled,
        };
        let room = self
            .room
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let fitting = deployment
            .as_deref()
            .zip(room)
            .map(|(d, room)| judge::fitting(d, &room));
        Some(Judgement {
            report: judge::report(
                target,
                assigned.revision,
                &verdict,
                deployment.as_deref(),
                apply_error,
                fitting,
            ),
            action,
        })
    }

    fn apply(
        &self,
        policy: &PlacedRef,
        target: &ScaleSpec,
        _assigned: &Assigned,
    ) -> BoxFuture<'static, Result<String, ApplyError>> {
        let target = target.clone();
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &target.namespace);
        let metrics = self.metrics.clone();
        let policy = policy.clone();
        debug!(%policy, namespace = %target.namespace, name = %target.name, replicas = target.replicas, "applying replicas");
        Box::pin(async move {
            let patch = judge::scale_patch(&target);
            let object = format!("Deployment {}/{}", target.namespace, target.name);
            let version = server_side_apply(api, &target.name, &patch, object).await?;
            metrics.scale_applies.inc();
            info!(%policy, namespace = %target.namespace, name = %target.name, replicas = target.replicas, scale_request_id = %target.scale_request_id, "applied scale request");
            Ok(version)
        })
    }
}
