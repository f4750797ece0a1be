//! End-to-end checks of the testbed itself, against one testbed shared by the tests of
//! this binary: member clusters run Deployments to readiness on kwok's fake node, each
//! member's Kafka broker and Prometheus work, and clusters are isolated from each other
//! while sharing one etcd.

use std::time::Duration;

use accord_e2e::SharedTestbed;
use accord_e2e::wait::{self, Check};
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

static TESTBED: SharedTestbed = SharedTestbed::new(|builder| {
    builder
        .members(2)
        .with_kafka()
        .with_prometheus()
        .without_crds()
});

/// Field manager for objects these tests create.
const FIELD_MANAGER: &str = "accord-e2e-tests";

async fn apply_namespace(client: &kube::Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    namespaces
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&namespace),
        )
        .await
        .with_context(|| format!("applying namespace {name}"))?;
    Ok(())
}

#[test]
fn deployment_with_three_replicas_becomes_ready() {
    TESTBED.run(|testbed| async move {
        let member = testbed.member("member-1").context("member-1")?;
        let client = member.client();
        let namespace = "deployment-readiness";
        apply_namespace(&client, namespace).await?;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
        let deployment = serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "pause:3.10"}]},
                },
            },
        });
        deployments
            .patch(
                "web",
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Apply(&deployment),
            )
            .await?;

        let three_ready = |d: Option<&Deployment>| {
            d.and_then(|d| d.status.as_ref())
                .and_then(|s| s.ready_replicas)
                == Some(3)
        };
        let waited = tokio::time::timeout(
            Duration::from_secs(120),
            await_condition(deployments.clone(), "web", three_ready),
        )
        .await;
        if waited.is_err() {
            let status = deployments.get("web").await?.status;
            let pods: Api<Pod> = Api::namespaced(client, namespace);
            let phases: Vec<String> = pods
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .map(|p| {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
                    let phase = p.status.as_ref().and_then(|s| s.phase.clone());
                    format!("{name} on {node:?}: {phase:?}")
                })
                .collect();
            anyhow::bail!("deployment not ready after 120 s; status {status:?}; pods {phases:?}");
        }
        waited??;
        Ok(())
    });
}

#[test]
fn clusters_are_separate_api_servers_sharing_one_etcd() {
    TESTBED.run(|testbed| async move {
        let namespace = "isolation-check";
        apply_namespace(&testbed.members()[0].client(), namespace).await?;
        let namespaces: Api<Namespace> = Api::all(testbed.members()[1].client());
        ensure!(
            namespaces.get_opt(namespace).await?.is_none(),
            "namespace leaked to member-2"
        );
        let namespaces: Api<Namespace> = Api::all(testbed.mgmt().client());
        ensure!(
            namespaces.get_opt(namespace).await?.is_none(),
            "namespace leaked to mgmt"
        );

        // etcd's JSON gateway: the namespace is stored under member-1's prefix only, and
        // no API server writes under the hub's prefix.
        let count = |prefix: String| async move {
            use base64::Engine as _;
            let b64 = base64::engine::general_purpose::STANDARD;
            let mut end = prefix.clone().into_bytes();
            *end.last_mut().expect("non-empty prefix") += 1;
            let body = serde_json::json!({
                "key": b64.encode(prefix.as_bytes()),
                "range_end": b64.encode(&end),
                "count_only": true,
            });
            let response: serde_json::Value = testbed
                .http()
                .post(format!("{}/v3/kv/range", testbed.etcd_endpoint()))
                .json(&body)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            anyhow::Ok(response["count"].as_str().unwrap_or("0").parse::<u64>()?)
        };
        let member_1 = count(format!("/clusters/member-1/namespaces/{namespace}")).await?;
        let member_2 = count(format!("/clusters/member-2/namespaces/{namespace}")).await?;
        let hub = count(testbed.hub_etcd_prefix().to_string()).await?;
        ensure!(
            member_1 == 1,
            "expected the namespace under member-1's prefix, found {member_1}"
        );
        ensure!(member_2 == 0, "found the namespace under member-2's prefix");
        ensure!(hub == 0, "found {hub} keys under the hub's prefix");
        Ok(())
    });
}

#[test]
fn kafka_topic_created_through_the_admin_client_is_listed_with_its_partitions() {
    TESTBED.run(|testbed| async move {
        let member = testbed.member("member-2").context("member-2")?;
        let bootstrap = member
            .kafka_bootstrap()
            .context("with_kafka gives a broker")?;
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .create()?;
        let topic = "accord-e2e-orders";
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = admin
            .create_topics(
                &[NewTopic::new(topic, 3, TopicReplication::Fixed(1))],
                &options,
            )
            .await?;
        for result in results {
            result.map_err(|(name, code)| anyhow::anyhow!("creating {name}: {code}"))?;
        }

        let admin = std::sync::Arc::new(admin);
        let partitions = wait::until("topic metadata", Duration::from_secs(30), || {
            let admin = admin.clone();
            async move {
                let metadata = tokio::task::spawn_blocking(move || {
                    admin
                        .inner()
                        .fetch_metadata(Some(topic), Duration::from_secs(5))
                })
                .await??;
                let listed = metadata.topics().iter().find(|t| t.name() == topic);
                Ok(match listed {
                    Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
                        Check::Ready(t.partitions().len())
                    }
                    Some(t) => Check::NotYet(format!("topic listed with error {:?}", t.error())),
                    None => Check::NotYet("topic not listed".into()),
                })
            }
        })
        .await?;
        ensure!(
            partitions == 3,
            "topic listed with {partitions} partitions, created with 3"
        );
        Ok(())
    });
}

/// Serves a fixed Prometheus text exposition on a loopback port until aborted.
async fn serve_metrics(body: &'static str) -> Result<(u16, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let port = listener.local_addr()?.port();
    let server = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    Ok((port, server))
}

#[test]
fn prometheus_federates_the_series_of_a_scraped_target() {
    TESTBED.run(|testbed| async move {
        let member = testbed.member("member-1").context("member-1")?;
        let prometheus = member.prometheus().context("with_prometheus gives a server")?;
        let (port, server) = serve_metrics(
            "# TYPE accord_e2e_probe_requests_total counter\n\
             accord_e2e_probe_requests_total{path=\"/checkout\"} 42\n",
        )
        .await?;
        let config = accord_e2e::prometheus::render_config(
            prometheus.address(),
            &format!(
                "  - job_name: e2e-probe\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
            ),
        );
        prometheus.reload_with(&config, testbed.http()).await?;

        let federated = wait::until("the probe's series in /federate", Duration::from_secs(60), || async {
            let body = testbed
                .http()
                .get(format!("{}/federate", prometheus.url))
                .query(&[("match[]", "{job=\"e2e-probe\"}")])
                .send()
                .await?
                .error_for_status()?
                .text()
                .await?;
            Ok(
                match body.lines().find(|l| l.starts_with("accord_e2e_probe_requests_total{")) {
                    Some(line) => Check::Ready(line.to_string()),
                    None => Check::NotYet(format!("federation returned {body:?}")),
                },
            )
        })
        .await;
        server.abort();
        let line = federated?;
        ensure!(line.contains("job=\"e2e-probe\""), "series without its job label: {line}");
        ensure!(line.contains("path=\"/checkout\""), "series without its own label: {line}");
        let value = line.split_whitespace().nth(1).context("sample without a value")?;
        ensure!(value == "42", "federated value {value}, served 42: {line}");
        Ok(())
    });
}
