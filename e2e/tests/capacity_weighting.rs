//! `weighting: AvailableCapacity` on real clusters: each member's only schedulable nodes are
//! kwok nodes of different sizes (the testbed's large fake node cordoned), real agents
//! estimate how many replicas of the Deployment's pod template fit (its own pods counted as
//! room), and the hub divides 30 replicas by those estimates. The expectation is computed
//! here from the members' Nodes as listed by the test.

use accord_common::quantity::parse as quantity;
use accord_crds::CrossClusterScalePolicy;
use accord_e2e::fleet::{Fleet, deployment_replicas, ensure_namespace};
use accord_e2e::kubernetes::{cordon, create_fake_node_with, wait_node_ready};
use accord_e2e::testbed::{Cluster, FAKE_NODE};
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use accord_hub::scale::division::{Candidate, divide_by_capacity};
use anyhow::{Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use std::time::Duration;

static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(2));
const NS: &str = "capacity-weighting";
const FM: &str = "accord-e2e-capacity-weighting";
/// Generous for a loaded machine; each step normally takes a few seconds.
const STEP: Duration = Duration::from_secs(90);
/// What one pod of the Deployment requests: CPU in millicores, memory in bytes.
const POD_CPU_MILLIS: i64 = 500;
const POD_MEMORY: i64 = 512 * 1024 * 1024;

/// How many pods requesting [`POD_CPU_MILLIS`] and [`POD_MEMORY`] the member's schedulable
/// nodes hold, from their allocatable amounts (the test's pods are the only ones bound).
async fn fits_by_nodes(cluster: &Cluster) -> Result<i64> {
    let nodes = Api::<Node>::all(cluster.client())
        .list(&ListParams::default())
        .await?;
    let mut fits = 0;
    for node in nodes.items {
        let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| {
                t.iter()
                    .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            });
        let status = node.status.unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if cordoned || tainted || !ready {
            continue;
        }
        let get = |name: &str, scale: f64| {
            status
                .allocatable
                .as_ref()
                .and_then(|a| a.get(name))
                .and_then(|q| quantity(&q.0))
                .map_or(0, |v| (v * scale).floor() as i64)
        };
        let by_cpu = get("cpu", 1000.0) / POD_CPU_MILLIS;
        let by_memory = get("memory", 1.0) / POD_MEMORY;
        fits += by_cpu.min(by_memory).min(get("pods", 1.0));
    }
    Ok(fits)
}

async fn member_replicas(testbed: &Testbed, member: usize) -> Result<Option<i32>> {
    deployment_replicas(&testbed.members()[member], NS, "web").await
}

#[test]
fn available_capacity_divides_thirty_replicas_by_what_fits_in_each_member() {
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let members = testbed.members();
        // Each member's only schedulable node is one of its own size.
        for (cluster, node, allocatable) in [
            (
                &members[0],
                "room-small",
                serde_json::json!({"cpu": "6", "memory": "64Gi", "pods": "110"}),
            ),
            (
                &members[1],
                "room-large",
                serde_json::json!({"cpu": "12", "memory": "64Gi", "pods": "110"}),
            ),
        ] {
            create_fake_node_with(&cluster.client(), node, allocatable).await?;
            wait_node_ready(&cluster.client(), node).await?;
            cordon(&cluster.client(), FAKE_NODE, true).await?;
        }
        // A kwok node just made (or one whose heartbeat lags on a loaded machine) can be
        // briefly not Ready or tainted by the node lifecycle controller: wait for both.
        let expected_fits = until("the members' nodes fit 12 and 24", STEP, || async {
            let fits = [
                fits_by_nodes(&members[0]).await?,
                fits_by_nodes(&members[1]).await?,
            ];
            Ok(if fits == [12, 24] {
                Check::Ready(fits)
            } else {
                Check::NotYet(format!("{fits:?}"))
            })
        })
        .await?;
        println!("fits by the members' nodes: {expected_fits:?}");

        // The same Deployment, requesting CPU and memory, in both members.
        for cluster in members {
            ensure_namespace(cluster, NS).await?;
            let deployment = serde_json::json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": NS},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "app", "image": "pause:3.10",
                            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}]},
                    },
                },
            });
            Api::<Deployment>::namespaced(cluster.client(), NS)
                .patch("web", &PatchParams::apply(FM).force(), &Patch::Apply(&deployment))
                .await?;
        }

        let _fed = Fleet::start_with_agent_args(
            testbed,
            "hub-capacity-weighting",
            "/e2e-capacity-weighting/",
            &[],
            &["--capacity-interval", "1s"],
            &[("cw-1", 0), ("cw-2", 1)],
        )
        .await?;
        ensure_namespace(testbed.mgmt(), NS).await?;
        let policy = serde_json::json!({
            "apiVersion": "accord.io/v1beta1", "kind": "CrossClusterScalePolicy",
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"targetRef": {"name": "web"}, "desiredReplicas": 30,
                     "weighting": "AvailableCapacity",
                     "distribution": [{"cluster": "cw-1", "weight": 1}, {"cluster": "cw-2", "weight": 1}]},
        });
        Api::<CrossClusterScalePolicy>::namespaced(testbed.mgmt().client(), NS)
            .patch("web", &PatchParams::apply(FM).force(), &Patch::Apply(&policy))
            .await?;

        // What the hub's own division gives for those fits (12 and 24 of 30: 10 and 20);
        // equal weights alone would give 15 and 15.
        let candidates = [Candidate::new("cw-1", 1), Candidate::new("cw-2", 1)];
        let fits = expected_fits.map(|f| u32::try_from(f).unwrap_or(0));
        let want: Vec<i32> = divide_by_capacity(30, &candidates, &fits)
            .shares()
            .iter()
            .map(|s| i32::try_from(s.replicas).unwrap_or(i32::MAX))
            .collect();
        ensure!(want == [10, 20], "{want:?}");
        until("the members run 10 and 20 replicas", STEP, || async {
            let got = [member_replicas(testbed, 0).await?, member_replicas(testbed, 1).await?];
            Ok(if got == [Some(want[0]), Some(want[1])] {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{got:?}"))
            })
        })
        .await?;
        // Once the pods run, the estimate stays: their own requests count as room, so the
        // division does not move again.
        until("every pod scheduled", STEP, || async {
            let mut running = 0;
            for cluster in members {
                let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(cluster.client(), NS)
                    .list(&ListParams::default().labels("app=web"))
                    .await?;
                running += pods
                    .items
                    .iter()
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                    .count();
            }
            Ok(if running == 30 {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{running} of 30 bound"))
            })
        })
        .await?;
        let api: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), NS);
        let settled = until("the policy Ready with 30", STEP, || async {
            let status = api.get("web").await?.status.unwrap_or_default();
            Ok(if status.ready_replicas == Some(30) {
                Check::Ready(status)
            } else {
                Check::NotYet(format!("{:?}", status.ready_replicas))
            })
        })
        .await?;
        let shares: Vec<(String, i32)> = settled
            .placements
            .iter()
            .map(|p| (p.cluster.clone(), p.desired_replicas))
            .collect();
        println!("divided by capacity: {shares:?}");
        ensure!(
            member_replicas(testbed, 0).await? == Some(10)
                && member_replicas(testbed, 1).await? == Some(20),
            "the division moved after the pods were bound"
        );
        Ok(())
    });
}
