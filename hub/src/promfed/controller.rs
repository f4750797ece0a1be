//! PrometheusFederation as a [`PlacementKind`]: validate → select clusters → the one
//! assignment every selected cluster gets. There is no failover: a disconnected cluster
//! keeps its assignment and its placement shows `Unavailable`.
//!
//! The global tier is one ConfigMap (`prometheus-federation-global` in the hub's
//! federation namespace) rendered from every PrometheusFederation with `spec.global.enabled`. Any
//! PrometheusFederation's status aggregation renders it again from the stores
//! ([`Promfed::sync_global`], serialised, written with server-side apply only when its
//! hash changed, deleted when no global-enabled PrometheusFederation is left) and reads the
//! reloader's annotations back into its own `status.global`; so do an invalid
//! PrometheusFederation (its jobs go) and a deleted one.
//!
//! Triggers beyond the generic ones: any change of the global ConfigMap (every
//! global-enabled PrometheusFederation).

use accord_common::distribution::PlacedKind;
use std::collections::BTreeMap;
use std::sync::Arc;

use accord_common::distribution::{PlacedRef, PlacementState};
use accord_crds::conditions::types;
use accord_crds::promfed::GlobalTierStatus;
use accord_crds::validate::Validate;
use accord_crds::{HUB_FIELD_MANAGER, PrometheusFederation, PrometheusFederationStatus};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store as Reflector};
use kube::runtime::{WatchStreamExt, watcher};
use std::time::Duration;
use tokio::sync::Mutex;
use tracing::{debug, info};

use super::PromfedDecision;
use super::global::{self, GlobalMember, GlobalPromfed, PromfedPart};
use super::plan::{self, PlanError};
use super::status::{aggregate, global_error};
use crate::controllers::placement::{
    self, DecideInput, Decided, Note, PlacementKind, Reported, Started, StatusInput, Trigger,
    Watched,
};
use crate::controllers::transitions::{self, Meaning};
use crate::controllers::{ControllerContext, ReconcileError};
use crate::distribution::select::{Clusters, select_clusters};
use accord_common::promfed::{self, ReloadStatus};

/// Labels of the global ConfigMap.
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "accord-hub");
const OWNED_BY: (&str, &str) = ("accord.io/owned-by", "prometheusfederation");
/// Event reason of a placement (or the global tier) going to `Error`.
/// What a PrometheusFederation's conditions say: `Ready` once every member confirmed the
/// generation's config, healthy while not `Degraded`.
const MEANING: Meaning = Meaning {
    applied: Some(types::READY),
    healthy: (types::DEGRADED, false),
};

/// The PrometheusFederation settings of `serve`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct PromfedOptions {
    /// Namespace of ConfigMap prometheus-federation-global, the global federation tier's
    /// config (default: --namespace).
    #[arg(
        id = "federation_namespace",
        value_name = "FEDERATION_NAMESPACE",
        long = "federation-namespace"
    )]
    pub namespace: Option<String>,
}

/// The PrometheusFederation plug-in: its PrometheusFederations, the global ConfigMap as
/// watched, and the lock that serialises renderings of the global tier.
pub struct Promfed {
    ctx: Arc<ControllerContext>,
    namespace: String,
    placed: Reflector<Watched<Self>>,
    global: Reflector<ConfigMap>,
    global_lock: Mutex<()>,
}

/// The global tier as one rendering left it.
struct GlobalView {
    /// Hash of the config written (`None`: no global-enabled PrometheusFederation, no ConfigMap).
    hash: Option<String>,
    /// Each global-enabled PrometheusFederation's part.
    parts: BTreeMap<PlacedRef, PromfedPart>,
    /// What the reloader last said.
    reload: ReloadStatus,
}

fn global_enabled(placed: &Watched<Promfed>) -> bool {
    placed
        .pointer("/spec/global/enabled")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

impl PlacementKind for Promfed {
    type Object = PrometheusFederation;
    type Status = PrometheusFederationStatus;
    type Decision = PromfedDecision;
    type Facts = ();
    type Options = PromfedOptions;

    const CONTROLLER: &'static str = "PrometheusFederation controller";
    const KIND: PlacedKind = PlacedKind::PrometheusFederation;
    // The stored name of this kind's decision data (records written by earlier versions
    // carry it).
    const DECISION_TAG: &'static str = "federation";
    const LEGACY_FINALIZERS: &'static [&'static str] = &["accord.io/placements"];

    fn start(
        ctx: &Arc<ControllerContext>,
        placed: Reflector<Watched<Self>>,
        trigger: Trigger<Self>,
        options: &PromfedOptions,
    ) -> Started<Self> {
        let namespace = options
            .namespace
            .clone()
            .unwrap_or_else(|| ctx.namespace.clone());
        // The global ConfigMap, watched by name: the reloader's answers arrive here.
        let (global, global_writer) = reflector::store::<ConfigMap>();
        let ps = placed.clone();
        let global_changes = accord_common::watch::watcher(
            Api::<ConfigMap>::namespaced(ctx.kube.clone(), &namespace),
            watcher::Config::default().fields(&format!(
                "metadata.name={}",
                promfed::GLOBAL_CONFIG_MAP_NAME
            )),
        )
        .default_backoff()
        .reflect(global_writer)
        .for_each(move |event| {
            match event {
                Ok(
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone,
                ) => {
                    for p in ps.state().iter().filter(|p| global_enabled(p)) {
                        let _ = trigger.send(ObjectRef::from_obj(&**p));
                    }
                }
                Ok(_) => {}
                Err(e) => debug!(error = %e, "watching the global tier's ConfigMap"),
            }
            futures::future::ready(())
        });
        Started {
            kind: Self {
                ctx: ctx.clone(),
                namespace,
                placed,
                global,
                global_lock: Mutex::new(()),
            },
            tasks: vec![Box::pin(global_changes)],
            listed: Box::pin(async { true }),
        }
    }

    fn rollout(object: &PrometheusFederation) -> Option<&accord_crds::rollout::Rollout> {
        object.spec.rollout.as_ref()
    }

    fn rollout_status(
        status: &mut PrometheusFederationStatus,
    ) -> Option<&mut Option<accord_crds::rollout::RolloutStatus>> {
        Some(&mut status.rollout)
    }

    fn set_revision(line: &mut accord_crds::FederationPlacement, revision: Option<String>) {
        line.revision = revision;
    }

    fn placement(placed: &PrometheusFederation) -> Option<&accord_crds::ClusterPlacement> {
        Some(&placed.spec.placement)
    }

    fn decide(
        &self,
        placed: &PrometheusFederation,
        input: &DecideInput<'_, PromfedDecision>,
    ) -> Decided<Self> {
        if let Err(errors) = placed.spec.validate() {
            return Decided::Invalid(errors.to_string());
        }
        let planned = input
            .selected()
            .map_err(PlanError::from)
            .and_then(|selected| Ok((selected, plan::assignment(&placed.spec)?)));
        match planned {
            Ok((selected, assignment)) => Decided::Record {
                shares: plan::shares(&selected, &assignment),
                decision: PromfedDecision::default(),
                facts: (),
                recheck_after: None,
            },
            Err(e) => Decided::Invalid(e.to_string()),
        }
    }

    fn announce(
        &self,
        _placed: &PrometheusFederation,
        record: &crate::distribution::PlacementRecord<PromfedDecision>,
        revision: i64,
    ) -> Option<Note> {
        let clusters: Vec<&str> = record.shares.iter().map(|s| s.cluster.as_str()).collect();
        info!(placed = %record.placed, ?clusters, revision, "federation placements");
        None
    }

    async fn status_of(
        &self,
        placed: &PrometheusFederation,
        input: StatusInput<'_, Self>,
    ) -> Result<Reported<PrometheusFederationStatus>, ReconcileError> {
        let p = placement::placed_ref::<Self>(placed);
        let global = self.sync_global().await;
        let enabled = placed.spec.global.as_ref().is_some_and(|g| g.enabled);
        let global_status = enabled.then(|| match &global {
            Ok(view) => view_status(&p, view),
            Err(e) => GlobalTierStatus {
                state: PlacementState::Error,
                jobs: None,
                config_hash: None,
                message: Some(format!(
                    "the hub cannot write ConfigMap {}/{}: {}",
                    self.namespace,
                    promfed::GLOBAL_CONFIG_MAP_NAME,
                    crate::store::error_chain(e)
                )),
            },
        });
        let inputs = input.of(placed);
        let (old, status) = (inputs.old, aggregate(&inputs, global_status.as_ref()));
        let mut notes = transitions::of_statuses(old, &status, placed.metadata.generation, MEANING);
        notes.extend(
            global_error(old, &status)
                .map(|note| Note::warning(transitions::reasons::PLACEMENT_ERROR, note)),
        );
        Ok(Reported {
            status,
            notes,
            retry: global.err(),
        })
    }

    async fn invalid(&self, _placed: &Watched<Self>) -> Result<(), ReconcileError> {
        // Its global jobs, if an earlier version had any, go.
        self.sync_global().await.map(drop)
    }

    async fn forget(&self, _namespace: &str, _name: &str) -> Result<(), ReconcileError> {
        // The PrometheusFederation is gone (or being deleted), so this rendering leaves its
        // jobs out.
        self.sync_global().await.map(drop)
    }
}

impl Promfed {
    /// Renders the global tier from every global-enabled PrometheusFederation in the store
    /// (skipping any being deleted or that the hub cannot act on), writes the ConfigMap
    /// when its hash changed, deletes it when no such PrometheusFederation is left, and
    /// returns what the reloader last said about it.
    async fn sync_global(&self) -> Result<GlobalView, ReconcileError> {
        let _serialised = self.global_lock.lock().await;
        let clusters = placement::clusters(&self.ctx);
        let placed: Vec<GlobalPromfed> = self
            .placed
            .state()
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && global_enabled(p))
            .filter_map(|p| global_promfed(p, &clusters))
            .collect();
        let planned = global::plan(&placed);
        let rendered = global::render(&planned).map_err(|e| ReconcileError::Kind {
            category: "render",
            message: format!("rendering the global tier: {e}"),
        })?;
        let api: Api<ConfigMap> = Api::namespaced(self.ctx.kube.clone(), &self.namespace);
        let current = self.current_global(&api).await?;
        let Some(rendered) = rendered else {
            if current.is_some() {
                match api
                    .delete(promfed::GLOBAL_CONFIG_MAP_NAME, &DeleteParams::default())
                    .await
                {
                    Ok(_) => info!(
                        "no PrometheusFederation enables the global tier: its ConfigMap is deleted"
                    ),
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
            return Ok(GlobalView {
                hash: None,
                parts: planned.parts,
                reload: ReloadStatus::default(),
            });
        };
        let annotations = current
            .as_ref()
            .and_then(|cm| cm.metadata.annotations.clone())
            .unwrap_or_default();
        let labelled = current.as_ref().is_some_and(|cm| {
            let labels = cm.labels();
            labels.get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1)
                && labels.get(OWNED_BY.0).map(String::as_str) == Some(OWNED_BY.1)
        });
        if annotations.get(promfed::ANN_CONFIG_HASH) != Some(&rendered.hash) || !labelled {
            api.patch(
                promfed::GLOBAL_CONFIG_MAP_NAME,
                &PatchParams::apply(HUB_FIELD_MANAGER).force(),
                &Patch::Apply(global_config_map(&self.namespace, &rendered)),
            )
            .await?;
            info!(hash = %rendered.hash, jobs = rendered.jobs, "global tier config written");
        }
        Ok(GlobalView {
            hash: Some(rendered.hash),
            parts: planned.parts,
            reload: ReloadStatus::from_annotations(&annotations),
        })
    }

    /// The global ConfigMap as last seen: from the watch once it has listed, read directly
    /// until then (so that a watch that cannot list never stalls the PrometheusFederations).
    async fn current_global(&self, api: &Api<ConfigMap>) -> Result<Option<ConfigMap>, kube::Error> {
        // Polled once: ready at once when the watch has listed.
        let listed = tokio::time::timeout(Duration::ZERO, self.global.wait_until_ready())
            .await
            .is_ok_and(|r| r.is_ok());
        if listed {
            let key = ObjectRef::new(promfed::GLOBAL_CONFIG_MAP_NAME).within(&self.namespace);
            return Ok(self.global.get(&key).map(|cm| (*cm).clone()));
        }
        api.get_opt(promfed::GLOBAL_CONFIG_MAP_NAME).await
    }
}

/// A global-enabled PrometheusFederation as the global tier needs it; `None` for one the
/// hub cannot act on (its own reconcile says why in its status).
fn global_promfed(placed: &Watched<Promfed>, clusters: &Clusters) -> Option<GlobalPromfed> {
    let decoded: PrometheusFederation = placed.decode().ok()?;
    decoded.spec.validate().ok()?;
    let selected = select_clusters(&decoded.spec.placement, clusters).ok()?;
    let spec = plan::assignment(&decoded.spec).ok()?;
    Some(GlobalPromfed {
        placed: placement::placed_ref::<Promfed>(placed),
        spec,
        members: selected
            .into_iter()
            .filter(|c| c.known)
            .map(|c| GlobalMember {
                endpoint: clusters
                    .get(&c.name)
                    .and_then(|i| i.spec_str("federationEndpoint"))
                    .map(str::to_owned),
                cluster: c.name,
            })
            .collect(),
    })
}

/// A global-enabled PrometheusFederation's `status.global` from one rendering.
fn view_status(placed: &PlacedRef, view: &GlobalView) -> GlobalTierStatus {
    match (view.parts.get(placed), &view.hash) {
        (Some(part), Some(hash)) => global::tier_status(placed, part, hash, &view.reload),
        // The store has not caught up with this PrometheusFederation yet; its next reconcile will.
        _ => GlobalTierStatus {
            state: PlacementState::Pending,
            jobs: None,
            config_hash: None,
            message: Some(global::WAITING_FOR_RELOADER.to_owned()),
        },
    }
}

/// The global ConfigMap as server-side applied: the config, its hash, the owner labels.
fn global_config_map(namespace: &str, rendered: &promfed::Rendered) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(promfed::GLOBAL_CONFIG_MAP_NAME.to_owned());
    cm.metadata.namespace = Some(namespace.to_owned());
    cm.metadata.labels = Some(BTreeMap::from([
        (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
        (OWNED_BY.0.to_owned(), OWNED_BY.1.to_owned()),
    ]));
    cm.metadata.annotations = Some(BTreeMap::from([(
        promfed::ANN_CONFIG_HASH.to_owned(),
        rendered.hash.clone(),
    )]));
    cm.data = Some(BTreeMap::from([(
        promfed::CONFIG_KEY.to_owned(),
        rendered.yaml.clone(),
    )]));
    cm
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::select::ClusterInfo;

    #[test]
    fn only_decodable_valid_global_promfeds_join_the_global_tier() {
        let clusters: Clusters = [
            (
                "east".to_owned(),
                ClusterInfo {
                    spec: serde_json::json!({"federationEndpoint": "http://east:9090"}),
                    ..Default::default()
                },
            ),
            ("west".to_owned(), ClusterInfo::default()),
        ]
        .into_iter()
        .collect();
        let object = |spec: serde_json::Value| {
            Watched::<Promfed>::from_value(serde_json::json!({
                "apiVersion": "accord.io/v1beta1", "kind": "PrometheusFederation",
                "metadata": {"name": "p", "namespace": "monitoring"},
                "spec": spec,
            }))
            .unwrap()
        };
        let good = object(serde_json::json!({
            "placement": {"clusters": ["east", "west", "mars"]},
            "tenantSelector": {"namespaces": ["a"]},
            "match": ["up"],
            "global": {"enabled": true},
        }));
        assert!(global_enabled(&good));
        let g = global_promfed(&good, &clusters).unwrap();
        assert_eq!(
            g.placed,
            PlacedRef::new(PlacedKind::PrometheusFederation, "monitoring", "p")
        );
        assert_eq!(
            g.members,
            vec![
                GlobalMember {
                    cluster: "east".into(),
                    endpoint: Some("http://east:9090".into())
                },
                GlobalMember {
                    cluster: "west".into(),
                    endpoint: None
                },
            ],
            "unknown clusters are left out"
        );
        let invalid = object(serde_json::json!({
            "placement": {"clusters": ["east"]},
            "tenantSelector": {"namespaces": ["a"]},
            "match": [],
            "global": {"enabled": true},
        }));
        assert!(global_promfed(&invalid, &clusters).is_none());
        let undecodable = object(serde_json::json!({
            "placement": {"clusters": ["east"]}, "match": ["up"], "global": {"enabled": true},
        }));
        assert!(global_promfed(&undecodable, &clusters).is_none());
    }

    #[test]
    fn the_global_config_map_carries_the_config_its_hash_and_the_owner_labels() {
        let rendered = promfed::Rendered {
            yaml: "scrape_configs: []\n".into(),
            hash: "abc".into(),
            jobs: 0,
        };
        let cm = global_config_map("accord-system", &rendered);
        assert_eq!(
            cm.metadata.name.as_deref(),
            Some(promfed::GLOBAL_CONFIG_MAP_NAME)
        );
        assert_eq!(cm.metadata.namespace.as_deref(), Some("accord-system"));
        assert_eq!(cm.annotations()[promfed::ANN_CONFIG_HASH], "abc");
        assert_eq!(cm.labels()["app.kubernetes.io/managed-by"], "accord-hub");
        assert_eq!(cm.labels()["accord.io/owned-by"], "prometheusfederation");
        assert_eq!(
            cm.data.unwrap()[promfed::CONFIG_KEY],
            "scrape_configs: []\n"
        );
    }
}
