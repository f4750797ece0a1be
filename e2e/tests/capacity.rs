//! Member capacity on real clusters: real agents count their member's kwok nodes (each
//! member with nodes of its own sizes, one cordoned) and the pods bound to them, and the hub
//! shows the count in `ManagedCluster.status.capacity`; the expectation is computed here
//! from the members' Nodes and Pods as listed by the test.

use accord_common::quantity::parse as quantity;
use accord_crds::ManagedCluster;
use accord_e2e::fleet::{Fleet, ensure_namespace};
use accord_e2e::kubernetes::{create_fake_node_with, wait_node_ready};
use accord_e2e::testbed::Cluster;
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use anyhow::Result;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use std::collections::BTreeMap;
use std::time::Duration;

static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(2));
const NS: &str = "capacity";
/// Generous for a loaded machine; each step normally takes a few seconds.
const STEP: Duration = Duration::from_secs(60);

/// (nodes, allocatable cpu millicores, memory bytes, pods, unrequested cpu, memory, pods).
type Counted = [i64; 7];

/// What the member's schedulable nodes hold, from its Nodes and Pods: Ready, not cordoned,
/// untainted nodes; each unfinished pod bound to one takes its containers' requests and
/// one pod.
async fn expected(cluster: &Cluster) -> Result<Counted> {
    let amount = |list: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
                  name: &str,
                  scale: f64| {
        list.and_then(|l| l.get(name))
            .and_then(|q| quantity(&q.0))
            .map_or(0, |v| (v * scale).ceil() as i64)
    };
    let nodes = Api::<Node>::all(cluster.client())
        .list(&ListParams::default())
        .await?;
    let pods = Api::<Pod>::all(cluster.client())
        .list(&ListParams::default())
        .await?;
    let mut out = [0i64; 7];
    for node in &nodes.items {
        let spec = node.spec.clone().unwrap_or_default();
        let status = node.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let tainted = spec
            .taints
            .iter()
            .flatten()
            .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute");
        if !ready || spec.unschedulable == Some(true) || tainted {
            continue;
        }
        let alloc = status.allocatable.as_ref();
        let allocatable = [
            amount(alloc, "cpu", 1000.0),
            amount(alloc, "memory", 1.0),
            amount(alloc, "pods", 1.0),
        ];
        let mut requested = [0i64; 3];
        for pod in &pods.items {
            let pod_spec = pod.spec.clone().unwrap_or_default();
            let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
            if pod_spec.node_name.as_deref() != node.metadata.name.as_deref()
                || matches!(phase.as_deref(), Some("Succeeded" | "Failed"))
            {
                continue;
            }
            for c in &pod_spec.containers {
                let r = c.resources.as_ref().and_then(|r| r.requests.as_ref());
                requested[0] += amount(r, "cpu", 1000.0);
                requested[1] += amount(r, "memory", 1.0);
            }
            requested[2] += 1;
        }
        out[0] += 1;
        for i in 0..3 {
            out[1 + i] += allocatable[i];
            out[4 + i] += (allocatable[i] - requested[i]).max(0);
        }
    }
    Ok(out)
}

/// `status.capacity` of ManagedCluster `name`, read back into numbers.
async fn shown(testbed: &Testbed, name: &str) -> Result<Option<Counted>> {
    let api: Api<ManagedCluster> = Api::all(testbed.mgmt().client());
    let Some(status) = api.get_opt(name).await?.and_then(|c| c.status) else {
        return Ok(None);
    };
    let c = &status.capacity;
    let get = |key: &str, scale: f64| {
        c.get(key)
            .and_then(|v| quantity(v))
            .map(|v| (v * scale).round() as i64)
    };
    let values = [
        get("nodes", 1.0),
        get("allocatable.cpu", 1000.0),
        get("allocatable.memory", 1.0),
        get("allocatable.pods", 1.0),
        get("unrequested.cpu", 1000.0),
        get("unrequested.memory", 1.0),
        get("unrequested.pods", 1.0),
    ];
    Ok(values
        .iter()
        .all(Option::is_some)
        .then(|| values.map(Option::unwrap_or_default)))
}

/// Waits until `name`'s status.capacity is what the member's Nodes and Pods say, with
/// `nodes` schedulable nodes (a kwok node whose heartbeat lags on a loaded machine is briefly
/// not Ready, and counts for neither side meanwhile).
async fn wait_shown(testbed: &Testbed, name: &str, member: usize, nodes: i64) -> Result<Counted> {
    let cluster = &testbed.members()[member];
    until(
        &format!("{name}'s status.capacity with {nodes} nodes"),
        STEP,
        || async {
            let want = expected(cluster).await?;
            Ok(match shown(testbed, name).await? {
                Some(got) if got == want && got[0] == nodes => Check::Ready(got),
                other => Check::NotYet(format!("shown {other:?}, expected {want:?}")),
            })
        },
    )
    .await
}

async fn bind_pod(
    cluster: &Cluster,
    name: &str,
    node: &str,
    cpu: &str,
    memory: &str,
) -> Result<()> {
    ensure_namespace(cluster, NS).await?;
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        },
    }))?;
    Api::<Pod>::namespaced(cluster.client(), NS)
        .create(&PostParams::default(), &pod)
        .await?;
    Ok(())
}

async fn cordon(cluster: &Cluster, node: &str, cordoned: bool) -> Result<()> {
    accord_e2e::kubernetes::cordon(&cluster.client(), node, cordoned).await
}

#[test]
fn agents_count_their_nodes_and_pods_into_the_managed_cluster_capacity() {
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let [one, two] = [&testbed.members()[0], &testbed.members()[1]];
        // Nodes of different sizes in each member, beside the testbed's large fake node.
        for (cluster, node, allocatable) in [
            (
                one,
                "small",
                serde_json::json!({"cpu": "4", "memory": "8Gi", "pods": "20"}),
            ),
            (
                two,
                "large",
                serde_json::json!({"cpu": "16", "memory": "64Gi", "pods": "110"}),
            ),
            (
                two,
                "spare",
                serde_json::json!({"cpu": "8", "memory": "32Gi", "pods": "50"}),
            ),
        ] {
            create_fake_node_with(&cluster.client(), node, allocatable).await?;
            wait_node_ready(&cluster.client(), node).await?;
        }
        bind_pod(one, "busy", "small", "1500m", "2Gi").await?;
        bind_pod(two, "busy", "large", "3", "10Gi").await?;
        // Cordoned: its allocatable does not count.
        cordon(two, "spare", true).await?;

        let _fed = Fleet::start_with_agent_args(
            testbed,
            "hub-capacity",
            "/e2e-capacity/",
            &[],
            &["--capacity-interval", "1s"],
            &[("cap-1", 0), ("cap-2", 1)],
        )
        .await?;
        // cap-1: the testbed's node and the small one; cap-2: the same, the cordoned node
        // not counted.
        let first = wait_shown(testbed, "cap-1", 0, 2).await?;
        let second = wait_shown(testbed, "cap-2", 1, 2).await?;
        println!("capacity shown: cap-1 {first:?}, cap-2 {second:?}");
        assert!(first[4] < first[1], "the busy pod's request is taken");
        assert_ne!(first[1], second[1], "the members' nodes differ");

        // Uncordon: the count follows within the interval.
        cordon(two, "spare", false).await?;
        let after = wait_shown(testbed, "cap-2", 1, 3).await?;
        assert_eq!(after[1], second[1] + 8000, "the spare node's 8 CPUs");
        Ok(())
    });
}
