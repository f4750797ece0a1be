//! The testbed's fake nodes take the pods load tests need: a kubelet's default of 110
//! pods would leave the rest Pending with "Too many pods".

use std::time::Duration;

use accord_common::quantity::parse as quantity;
use accord_e2e::SharedTestbed;
use accord_e2e::kwok::{NODE_CPU, NODE_MEMORY, NODE_PODS};
use accord_e2e::testbed::FAKE_NODE;
use accord_e2e::wait::{Check, until};
use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};

static TESTBED: SharedTestbed = SharedTestbed::new(|b| {
    b.members(1)
        .without_crds()
        .without_mgmt_controller_manager()
});

/// More pods than a kubelet's default of 110.
const REPLICAS: usize = 150;

#[test]
fn the_fake_node_reports_capacity_for_thousands_of_pods_and_takes_more_than_110() {
    TESTBED.run(|testbed| async move {
        let client = testbed.member("member-1").context("member-1")?.client();
        let node = Api::<Node>::all(client.clone()).get(FAKE_NODE).await?;
        let status = node.status.context("node status")?;
        for (what, quantities) in [
            ("capacity", status.capacity.unwrap_or_default()),
            ("allocatable", status.allocatable.unwrap_or_default()),
        ] {
            // The API server canonicalizes quantities (10000 → 10k): compare values.
            let get = |k: &str| quantities.get(k).and_then(|q| quantity(&q.0));
            ensure!(
                get("pods") == quantity(NODE_PODS)
                    && get("cpu") == quantity(NODE_CPU)
                    && get("memory") == quantity(NODE_MEMORY)
                    && get("pods").is_some(),
                "{what} of {FAKE_NODE}: {quantities:?}"
            );
        }

        let namespace = "kwok-capacity";
        let manager = PatchParams::apply("accord-e2e-tests");
        Api::<Namespace>::all(client.clone())
            .patch(
                namespace,
                &manager,
                &Patch::Apply(serde_json::json!({
                    "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": namespace },
                })),
            )
            .await?;
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(client.clone(), namespace);
        deployments
            .patch(
                "many",
                &manager,
                &Patch::Apply(serde_json::json!({
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": { "name": "many" },
                    "spec": {
                        "replicas": REPLICAS,
                        "selector": { "matchLabels": { "app": "many" } },
                        "template": {
                            "metadata": { "labels": { "app": "many" } },
                            "spec": { "containers": [{
                                "name": "c",
                                "image": "pause:3.10",
                                "resources": { "requests": { "cpu": "100m", "memory": "64Mi" } },
                            }] },
                        },
                    },
                })),
            )
            .await?;
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        until(
            &format!("{REPLICAS} pods bound to {FAKE_NODE}"),
            Duration::from_secs(180),
            || {
                let pods = pods.clone();
                async move {
                    let list = pods.list(&ListParams::default()).await?.items;
                    let bound = list
                        .iter()
                        .filter(|p| {
                            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(FAKE_NODE)
                        })
                        .count();
                    Ok(if bound == REPLICAS {
                        Check::Ready(())
                    } else {
                        Check::NotYet(format!("{bound} of {} pods bound", list.len()))
                    })
                }
            },
        )
        .await?;
        Ok(())
    });
}
