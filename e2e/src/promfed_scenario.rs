//! A PrometheusFederation scenario on the testbed, shared by the end-to-end tests and the
//! propagation benchmark: a hub and one agent per member, in each member two tenant
//! Prometheus servers and a federation Prometheus with the reloader beside it, and on the
//! management side a global Prometheus with its reloader; plus the waits that tell when a
//! change is confirmed everywhere.
//!
//! "Confirmed" is checked against what was written, not against the status alone: a member's
//! placement counts once its ConfigMap holds a config containing the change and the
//! placement says `Synced` with that very config's hash (what the reloader confirmed from
//! Prometheus); the same for the global tier and its ConfigMap.

use std::time::Duration;

use accord_common::promfed::{CONFIG_KEY, CONFIG_MAP_NAME, GLOBAL_CONFIG_MAP_NAME, config_hash};
use accord_crds::{
    ManagedCluster, PlacementState, PrometheusFederation, PrometheusFederationStatus,
};
use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::fleet::{AGENT_NAMESPACE, Fleet, ensure_namespace};
use crate::promfed::{
    FederationOptions, FederationPrometheus, PromfedMember, ReloaderOptions, TenantSpec,
};
use crate::testbed::{Cluster, Testbed};
use crate::wait::{Check, until};

/// Field manager of the scenario's writes.
pub const FIELD_MANAGER: &str = "accord-e2e-pfed";
/// The two tenant namespaces of every member.
pub const TENANTS: [&str; 2] = ["team-a", "team-b"];

/// A running scenario.
pub struct Scenario<'t> {
    /// The testbed.
    pub testbed: &'t Testbed,
    /// Hub and agents.
    pub fleet: Fleet<'t>,
    /// Cluster names, in member order.
    pub clusters: Vec<String>,
    /// Each member's Prometheus servers, in member order.
    pub members: Vec<PromfedMember>,
    /// The global Prometheus, when started.
    pub global: Option<FederationPrometheus>,
    /// Namespace of the global tier's ConfigMap on the management cluster.
    pub global_namespace: String,
}

/// A scenario stops what it started when it goes (the agents go with its [`Fleet`]):
/// the next test on the shared testbed must not meet a reloader still watching the same
/// ConfigMap.
impl Drop for Scenario<'_> {
    fn drop(&mut self) {
        for member in &mut self.members {
            member.federation.stop_reloader(self.testbed);
            member.federation.stop(self.testbed);
            for tenant in &mut member.tenants {
                tenant.stop(self.testbed);
            }
        }
        if let Some(global) = &mut self.global {
            global.stop_reloader(self.testbed);
            global.stop(self.testbed);
        }
    }
}

/// How to start a [`Scenario`].
pub struct ScenarioOptions<'a> {
    /// Hub replica name and etcd prefix (unique per test).
    pub name: &'a str,
    /// Member indexes to join.
    pub members: &'a [usize],
    /// Tenants of every member.
    pub tenants: Vec<TenantSpec>,
    /// How each member's federation Prometheus starts.
    pub federation: FederationOptions,
    /// Start the global tier.
    pub global: bool,
}

impl ScenarioOptions<'_> {
    /// Two tenants (`team-a`, whose Prometheus also serves series labelled `team-b`, and
    /// `team-b`), lifecycle API on, a reloader beside every federation Prometheus.
    pub fn tenant_defaults() -> Vec<TenantSpec> {
        vec![
            TenantSpec::new(TENANTS[0], "prom").leaking(TENANTS[1]),
            TenantSpec::new(TENANTS[1], "prom"),
        ]
    }
}

impl<'t> Scenario<'t> {
    /// Starts hub, agents and Prometheus servers, and points every ManagedCluster's
    /// `spec.federationEndpoint` at its member's federation Prometheus.
    pub async fn start(testbed: &'t Testbed, options: ScenarioOptions<'_>) -> Result<Self> {
        let name = options.name;
        let global_namespace = format!("{name}-global");
        ensure_namespace(testbed.mgmt(), &global_namespace).await?;
        let clusters: Vec<String> = options
            .members
            .iter()
            .map(|m| format!("{name}-{m}"))
            .collect();
        let agents: Vec<(&str, usize)> = clusters
            .iter()
            .map(String::as_str)
            .zip(options.members.iter().copied())
            .collect();
        let fleet = Fleet::start(
            testbed,
            name,
            &format!("/e2e-{name}/"),
            &["--federation-namespace", &global_namespace],
            &agents,
        )
        .await?;
        let mut members = Vec::new();
        for m in options.members {
            let cluster = &testbed.members()[*m];
            ensure_namespace(cluster, AGENT_NAMESPACE).await?;
            members.push(
                PromfedMember::start(testbed, cluster, &options.tenants, &options.federation)
                    .await
                    .with_context(|| format!("Prometheus servers of {}", cluster.name()))?,
            );
        }
        let global = if options.global {
            // The members' reloader options, watching the hub's global ConfigMap.
            let reloader = ReloaderOptions {
                namespace: global_namespace.clone(),
                ..options.federation.reloader.clone().unwrap_or_default()
            };
            Some(
                FederationPrometheus::start_global(
                    testbed,
                    &FederationOptions::with_reloader(reloader),
                )
                .await?,
            )
        } else {
            None
        };
        let scenario = Self {
            testbed,
            fleet,
            clusters,
            members,
            global,
            global_namespace,
        };
        for (cluster, member) in scenario.clusters.iter().zip(&scenario.members) {
            set_federation_endpoint(testbed, cluster, &member.federation.url()).await?;
        }
        Ok(scenario)
    }

    /// The member cluster of the `i`-th joined member.
    pub fn member_cluster(&self, i: usize) -> Result<&Cluster> {
        let name = &self.members.get(i).context("no such member")?.cluster;
        self.testbed
            .member(name)
            .with_context(|| format!("no member {name}"))
    }

    /// Waits until every member's federation Prometheus loaded a config containing
    /// `marker` for policy `ns/name` and its placement says so (`Synced` with that config's
    /// hash), and, with `global`, the same for the global tier.
    pub async fn wait_confirmed(
        &self,
        ns: &str,
        name: &str,
        marker: &str,
        global: bool,
        timeout: Duration,
    ) -> Result<PrometheusFederationStatus> {
        until(
            &format!("{ns}/{name} confirmed with {marker} everywhere"),
            timeout,
            || self.confirmed(ns, name, marker, global),
        )
        .await
    }

    /// One check of what [`Scenario::wait_confirmed`] waits for.
    pub async fn confirmed(
        &self,
        ns: &str,
        name: &str,
        marker: &str,
        global: bool,
    ) -> Result<Check<PrometheusFederationStatus>> {
        let status = status(self.testbed, ns, name).await?.unwrap_or_default();
        for (i, cluster) in self.clusters.iter().enumerate() {
            let config =
                config_map_data(self.member_cluster(i)?, AGENT_NAMESPACE, CONFIG_MAP_NAME).await?;
            let Some(config) = config.filter(|c| c.contains(marker)) else {
                return Ok(Check::NotYet(format!("{cluster}: config without {marker}")));
            };
            let hash = config_hash(&config);
            let placement = status.placements.iter().find(|p| &p.cluster == cluster);
            match placement {
                Some(p)
                    if p.state == PlacementState::Synced
                        && p.config_hash.as_deref() == Some(hash.as_str()) => {}
                other => {
                    return Ok(Check::NotYet(format!(
                        "{cluster}: placement {other:?}, config {}",
                        hash.get(..12).unwrap_or_default()
                    )));
                }
            }
        }
        if global {
            let config = config_map_data(
                self.testbed.mgmt(),
                &self.global_namespace,
                GLOBAL_CONFIG_MAP_NAME,
            )
            .await?;
            let Some(config) = config.filter(|c| c.contains(marker)) else {
                return Ok(Check::NotYet(format!("global: config without {marker}")));
            };
            let hash = config_hash(&config);
            match &status.global {
                Some(g)
                    if g.state == PlacementState::Synced
                        && g.config_hash.as_deref() == Some(hash.as_str()) => {}
                other => return Ok(Check::NotYet(format!("global: {other:?}"))),
            }
        }
        Ok(Check::Ready(status))
    }
}

/// Sets `spec.federationEndpoint` of ManagedCluster `cluster` (waiting for it to exist).
pub async fn set_federation_endpoint(testbed: &Testbed, cluster: &str, url: &str) -> Result<()> {
    let api: Api<ManagedCluster> = Api::all(testbed.mgmt().client());
    until(
        &format!("ManagedCluster {cluster}"),
        Duration::from_secs(30),
        || async {
            Ok(match api.get_opt(cluster).await? {
                Some(_) => Check::Ready(()),
                None => Check::NotYet("not registered yet".into()),
            })
        },
    )
    .await?;
    let patch = serde_json::json!({"spec": {"federationEndpoint": url}});
    api.patch(cluster, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("setting the federation endpoint of {cluster}"))?;
    Ok(())
}

/// `data[prometheus.yml]` of ConfigMap `ns/name` in `cluster`, if it exists.
pub async fn config_map_data(cluster: &Cluster, ns: &str, name: &str) -> Result<Option<String>> {
    let api: Api<ConfigMap> = Api::namespaced(cluster.client(), ns);
    Ok(api
        .get_opt(name)
        .await?
        .and_then(|c| c.data)
        .and_then(|mut d| d.remove(CONFIG_KEY)))
}

/// Applies PrometheusFederation `ns/name` with `spec` (server-side apply).
pub async fn apply(testbed: &Testbed, ns: &str, name: &str, spec: serde_json::Value) -> Result<()> {
    ensure_namespace(testbed.mgmt(), ns).await?;
    let api: Api<PrometheusFederation> = Api::namespaced(testbed.mgmt().client(), ns);
    let object = serde_json::json!({
        "apiVersion": "accord.io/v1beta1",
        "kind": "PrometheusFederation",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    });
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .with_context(|| format!("applying PrometheusFederation {ns}/{name}"))?;
    Ok(())
}

/// The status of PrometheusFederation `ns/name`, if it exists.
pub async fn status(
    testbed: &Testbed,
    ns: &str,
    name: &str,
) -> Result<Option<PrometheusFederationStatus>> {
    let api: Api<PrometheusFederation> = Api::namespaced(testbed.mgmt().client(), ns);
    Ok(api
        .get_opt(name)
        .await?
        .map(|p| p.status.unwrap_or_default()))
}

/// Waits until every placement of `ns/name` for `clusters` is in `state` with a message
/// containing `needle`; returns the status.
pub async fn wait_placements(
    testbed: &Testbed,
    ns: &str,
    name: &str,
    clusters: &[String],
    state: PlacementState,
    needle: &str,
    timeout: Duration,
) -> Result<PrometheusFederationStatus> {
    until(
        &format!("{ns}/{name} placements of {clusters:?} {state:?} saying {needle:?}"),
        timeout,
        || async {
            let status = status(testbed, ns, name).await?.unwrap_or_default();
            for cluster in clusters {
                let p = status.placements.iter().find(|p| &p.cluster == cluster);
                let ok = p.is_some_and(|p| {
                    p.state == state && p.message.as_deref().unwrap_or_default().contains(needle)
                });
                if !ok {
                    return Ok(Check::NotYet(format!("{cluster}: {p:?}")));
                }
            }
            Ok(Check::Ready(status))
        },
    )
    .await
}
