//! The hub's side of PrometheusFederation end to end: a real `accord-hub serve` against a
//! real etcd and management kube-apiserver, no agents. The leader writes the placements
//! record, renders the global tier into its ConfigMap (members with a federationEndpoint
//! only), reads the reloader's answer back into `status.global`, and removes everything
//! when the policy is deleted. The reloader itself is played by this test, writing the
//! annotations `accord-agent reload` writes.

use accord_common::distribution::{PlacedKind, PlacedRef, PlacementState};
use accord_common::promfed::{
    ANN_CONFIG_HASH, ANN_LOADED_HASH, ANN_RELOAD_HASH, ANN_RELOAD_STATE, CONFIG_KEY,
    GLOBAL_CONFIG_MAP_NAME, global_job_name,
};
use accord_crds::{ManagedCluster, PrometheusFederation};
use accord_e2e::fleet::ensure_namespace;
use accord_e2e::hub::{HUB_NAMESPACE, HubOptions, HubProcess};
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use accord_hub::store::{Keyspace, Store};
use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::time::Duration;

static TESTBED: SharedTestbed =
    SharedTestbed::new(|b| b.members(0).without_mgmt_controller_manager());

/// Generous for a loaded machine; each step normally takes well under a second.
const STEP: Duration = Duration::from_secs(30);
const NS: &str = "fed-e2e";
const POLICY: &str = "team-a";

async fn managed_cluster(testbed: &Testbed, name: &str, endpoint: Option<&str>) -> Result<()> {
    let api: Api<ManagedCluster> = Api::all(testbed.mgmt().client());
    let mut spec = json!({});
    if let Some(e) = endpoint {
        spec["federationEndpoint"] = e.into();
    }
    api.patch(
        name,
        &PatchParams::apply("e2e").force(),
        &Patch::Apply(json!({
            "apiVersion": "accord.io/v1beta1", "kind": "ManagedCluster",
            "metadata": {"name": name, "labels": {"federation-e2e": "yes"}},
            "spec": spec,
        })),
    )
    .await?;
    Ok(())
}

#[test]
fn the_global_tier_follows_the_policy_and_the_reloaders_answer_and_goes_with_it() {
    TESTBED.run(|testbed| async move {
        let prefix = "/t-federation-hub/";
        let _hub = HubProcess::start(
            testbed,
            &HubOptions {
                replica: "hub-federation".into(),
                etcd_prefix: prefix.into(),
                extra_args: vec![],
            },
        )
        .await?;
        managed_cluster(testbed, "fed-east", Some("http://fed-east.example:9090")).await?;
        managed_cluster(testbed, "fed-west", None).await?;
        ensure_namespace(testbed.mgmt(), NS).await?;
        let client = testbed.mgmt().client();
        let policies: Api<PrometheusFederation> = Api::namespaced(client.clone(), NS);
        let policy: PrometheusFederation = serde_json::from_value(json!({
            "apiVersion": "accord.io/v1beta1", "kind": "PrometheusFederation",
            "metadata": {"name": POLICY, "namespace": NS},
            "spec": {
                "placement": {"clusterSelector": {"matchLabels": {"federation-e2e": "yes"}}},
                "tenantSelector": {"namespaces": ["team-a"]},
                "match": ["{job=\"app\"}"],
                "global": {"enabled": true},
            },
        }))?;
        policies.create(&PostParams::default(), &policy).await?;

        // The global ConfigMap: one job, for the member with an endpoint.
        let policy_ref = PlacedRef::new(PlacedKind::PrometheusFederation, NS, POLICY);
        let east_job = global_job_name(&policy_ref, "fed-east");
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), HUB_NAMESPACE);
        let (hash, yaml) = until("the global tier's ConfigMap", STEP, || async {
            let cm = config_maps.get_opt(GLOBAL_CONFIG_MAP_NAME).await?;
            let hash = cm
                .as_ref()
                .and_then(|c| c.metadata.annotations.as_ref())
                .and_then(|a| a.get(ANN_CONFIG_HASH).cloned());
            let yaml = cm
                .and_then(|c| c.data)
                .and_then(|d| d.get(CONFIG_KEY).cloned())
                .unwrap_or_default();
            Ok(match hash {
                Some(h) if yaml.contains(&east_job) => Check::Ready((h, yaml)),
                _ => Check::NotYet(format!("config: {yaml:?}")),
            })
        })
        .await?;
        ensure!(
            !yaml.contains("fed-west"),
            "a member without an endpoint is scraped: {yaml}"
        );
        ensure!(yaml.contains("fed-east.example:9090"), "{yaml}");

        // Not confirmed yet: Pending, with the member left out named; the members have no
        // agent, so their placements are Unavailable.
        let pending = until("status.global Pending", STEP, || async {
            let status = policies.get(POLICY).await?.status;
            let global = status.as_ref().and_then(|s| s.global.clone());
            Ok(match (global, status) {
                (Some(g), Some(s))
                    if g.state == PlacementState::Pending && s.placements.len() == 2 =>
                {
                    Check::Ready((g, s))
                }
                (g, s) => Check::NotYet(format!("global {g:?}, status {s:?}")),
            })
        })
        .await?;
        let (global, status) = pending;
        ensure!(global.jobs == Some(1), "{global:?}");
        ensure!(
            global.config_hash.as_deref() == Some(hash.as_str()),
            "{global:?}"
        );
        let message = global.message.unwrap_or_default();
        ensure!(
            message.contains("no spec.federationEndpoint") && message.contains("fed-west"),
            "{message}"
        );
        ensure!(
            status
                .placements
                .iter()
                .all(|p| p.state == PlacementState::Unavailable),
            "{:?}",
            status.placements
        );

        // The reloader confirms the load: Synced.
        config_maps
            .patch(
                GLOBAL_CONFIG_MAP_NAME,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    ANN_LOADED_HASH: hash, ANN_RELOAD_HASH: hash, ANN_RELOAD_STATE: "Synced",
                }}})),
            )
            .await?;
        until("status.global Synced", STEP, || async {
            let global = policies.get(POLICY).await?.status.and_then(|s| s.global);
            Ok(match global {
                Some(g) if g.state == PlacementState::Synced => Check::Ready(()),
                g => Check::NotYet(format!("{g:?}")),
            })
        })
        .await?;

        // The placements record names both members.
        let store = Store::from_client(testbed.hub_etcd_client().await?, Keyspace::new(prefix));
        let key = store.keys().placements("PrometheusFederation", NS, POLICY);
        ensure!(
            store.get(key.as_str()).await?.is_some(),
            "no placements record"
        );

        // Deleting the policy removes its record and, as it was the last global one, the
        // global ConfigMap; the finalizer lets the object go.
        policies.delete(POLICY, &DeleteParams::default()).await?;
        until(
            "the policy, its record and the global ConfigMap gone",
            STEP,
            || async {
                let cm = config_maps.get_opt(GLOBAL_CONFIG_MAP_NAME).await?.is_some();
                let policy = policies.get_opt(POLICY).await?.is_some();
                let record = store.get(key.as_str()).await?.is_some();
                Ok(if cm || policy || record {
                    Check::NotYet(format!("config map {cm}, policy {policy}, record {record}"))
                } else {
                    Check::Ready(())
                })
            },
        )
        .await?;
        Ok(())
    });
}
