//! `accord-agent join` end to end, as docs/quickstart.md ("Join your own clusters") tells a
//! user to do it: `accord-hub install` prints a join command, `accord-hub token create`
//! prints more, and each member joins with one of them — one with the agent's Deployment,
//! one with `--run`. Then every refusal the issue names, each with its message, and the
//! proof that a refused join spent nothing.
//!
//! The testbed has no kubelet: where the docs' Deployment would start a pod, the test runs
//! `accord-agent run` locally as the agent's ServiceAccount (impersonation), which also
//! proves the RBAC join applied is enough.

use std::process::Output;
use std::time::Duration;

use accord_crds::{CrossClusterScalePolicy, ManagedCluster, PrometheusFederation};
use accord_e2e::fleet::{ensure_namespace, pause_deployment};
use accord_e2e::hub::accord_binary;
use accord_e2e::installed::{
    AGENT_SERVICE_ACCOUNT, InstalledHub, SERVICE_ACCOUNT_GROUPS, command_words,
    impersonating_kubeconfig, join_line, output_text, path_str, run_binary, wait_cluster_condition,
};
use accord_e2e::ports::free_port;
use accord_e2e::wait::{Check, until};
use accord_e2e::{Cluster, Testbed};
use accord_hub::pki::HubCa;
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

const MINUTE: Duration = Duration::from_secs(60);
const NS: &str = "accord-system";

/// Runs `accord-agent` with the words of a printed join line (placeholders substituted)
/// plus `extra`.
async fn join(line: &str, substitutions: &[(&str, &str)], extra: &[&str]) -> Result<Output> {
    let mut words = command_words(line, substitutions);
    words.extend(extra.iter().map(|s| (*s).to_owned()));
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    run_binary("accord-agent", &words).await
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts a join failed with `needle` in its message and left the token unused.
fn refused(out: &Output, needle: &str) -> Result<()> {
    let err = stderr(out);
    ensure!(
        !out.status.success(),
        "expected a refusal: {}",
        output_text(out)
    );
    ensure!(err.contains(needle), "expected {needle:?} in:\n{err}");
    ensure!(
        err.contains("the bootstrap token was not used"),
        "the refusal should say the token was not used:\n{err}"
    );
    Ok(())
}

async fn deployment_replicas(client: &kube::Client, ns: &str, name: &str) -> Result<Option<i32>> {
    Ok(Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await?
        .and_then(|d| d.spec)
        .and_then(|s| s.replicas))
}

async fn create_frontend(member: &Cluster, ns: &str) -> Result<()> {
    ensure_namespace(member, ns).await?;
    let client = member.client();
    let deployment: Deployment = serde_json::from_value(pause_deployment("frontend", 1))?;
    Api::<Deployment>::namespaced(client, ns)
        .create(&PostParams::default(), &deployment)
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_join_as_the_quickstart_says_and_run_a_policy() -> Result<()> {
    let testbed = Testbed::builder()
        .member_names(["east", "west"])
        .without_crds()
        .start()
        .await?;
    let _logs = testbed.logs_on_panic();
    let admin = testbed.mgmt().client();
    let hub = InstalledHub::install(&testbed, "/join-flow/").await?;
    let east = testbed.member("east").context("east")?;
    let west = testbed.member("west").context("west")?;

    // 1. The command install printed, for the first member, with labels.
    let line = join_line(&hub.install_output)?;
    let out = join(
        &line,
        &[
            ("<cluster-name>", "east"),
            ("<member-kubeconfig>", path_str(east.kubeconfig_path())?),
        ],
        &["--labels", "region=us,tier=prod"],
    )
    .await?;
    ensure!(out.status.success(), "join east: {}", output_text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    ensure!(said.contains("kubectl get managedcluster east"), "{said}");

    // What join left on the member: its identity, its ServiceAccount, its RBAC, its
    // Deployment.
    let member = east.client();
    let secret = Api::<Secret>::namespaced(member.clone(), NS)
        .get("accord-agent-identity")
        .await?;
    let keys: Vec<&String> = secret.data.iter().flatten().map(|(k, _)| k).collect();
    for key in ["hub-url", "cluster-name", "ca.crt", "tls.crt", "tls.key"] {
        ensure!(
            keys.iter().any(|k| *k == key),
            "identity lacks {key}: {keys:?}"
        );
    }
    Api::<ServiceAccount>::namespaced(member.clone(), NS)
        .get("accord-agent")
        .await?;
    Api::<ClusterRole>::all(member.clone())
        .get("accord-agent")
        .await?;
    let deployment = Api::<Deployment>::namespaced(member.clone(), NS)
        .get("accord-agent")
        .await?;
    let args = deployment
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers[0].args.clone().unwrap_or_default())
        .unwrap_or_default();
    ensure!(
        args.contains(&"--identity-secret=accord-system/accord-agent-identity".to_owned()),
        "{args:?}"
    );

    // The Deployment's pod, played by a local process with the agent's ServiceAccount.
    let as_agent = impersonating_kubeconfig(
        &testbed,
        east,
        AGENT_SERVICE_ACCOUNT,
        &SERVICE_ACCOUNT_GROUPS,
    )?;
    let mut pod = std::process::Command::new(accord_binary("accord-agent")?);
    pod.arg("run")
        .arg("--kubeconfig")
        .arg(&as_agent)
        .args(["--identity-secret", "accord-system/accord-agent-identity"])
        .args(["--http-addr", &format!("127.0.0.1:{}", free_port()?)]);
    let east_agent = testbed.spawn("agent/east", pod)?;

    // 2. A fresh token for the second member, which runs the agent in the foreground.
    let line = hub
        .token_create(&testbed, &["--cluster-name", "west", "--ttl", "1h"])
        .await?;
    let mut words = command_words(
        &line,
        &[("<member-kubeconfig>", path_str(west.kubeconfig_path())?)],
    );
    words.extend(
        [
            "--run",
            "--http-addr",
            &format!("127.0.0.1:{}", free_port()?),
        ]
        .map(str::to_owned),
    );
    let mut foreground = std::process::Command::new(accord_binary("accord-agent")?);
    foreground.args(&words);
    let west_agent = testbed.spawn("agent/west", foreground)?;

    // Both clusters joined, available, labelled.
    for cluster in ["east", "west"] {
        wait_cluster_condition(&admin, cluster, "Joined", "True", MINUTE).await?;
        wait_cluster_condition(&admin, cluster, "Available", "True", MINUTE).await?;
    }
    let east_mc = Api::<ManagedCluster>::all(admin.clone())
        .get("east")
        .await?;
    let labels = east_mc.metadata.labels.unwrap_or_default();
    ensure!(
        labels.get("region").map(String::as_str) == Some("us")
            && labels.get("tier").map(String::as_str) == Some("prod"),
        "labels {labels:?}"
    );

    // And they do their job: a policy's shares land on both members.
    for member in [east, west] {
        create_frontend(member, "prod").await?;
    }
    let policy: CrossClusterScalePolicy = serde_json::from_value(json!({
        "apiVersion": "accord.io/v1beta1", "kind": "CrossClusterScalePolicy",
        "metadata": {"name": "frontend", "namespace": "default"},
        "spec": {"targetRef": {"name": "frontend"}, "desiredReplicas": 5,
                 "distribution": [{"cluster": "east", "namespace": "prod", "weight": 3},
                                  {"cluster": "west", "namespace": "prod", "weight": 2}]}
    }))?;
    Api::<CrossClusterScalePolicy>::namespaced(admin.clone(), "default")
        .patch(
            "frontend",
            &PatchParams::apply("join-test"),
            &Patch::Apply(&policy),
        )
        .await?;
    let tb = &testbed;
    for (member, want) in [(east, 3), (west, 2)] {
        let client = member.client();
        until(
            &format!("{} runs {want} replicas", member.name()),
            MINUTE,
            || {
                let client = client.clone();
                async move {
                    tb.ensure_running(east_agent)?;
                    tb.ensure_running(west_agent)?;
                    let seen = deployment_replicas(&client, "prod", "frontend").await?;
                    Ok(if seen == Some(want) {
                        Check::Ready(())
                    } else {
                        Check::NotYet(format!("replicas {seen:?}"))
                    })
                }
            },
        )
        .await?;
    }

    // The installed hub and the agent with exactly its rendered RBAC render a federation:
    // the agent reads the tenant's source Service and writes ConfigMap prometheus-federation
    // (no reloader runs here, so the placement waits for one, saying so).
    ensure_namespace(east, "team-a").await?;
    Api::<Service>::namespaced(east.client(), "team-a")
        .patch(
            "prometheus",
            &PatchParams::apply("join-test"),
            &Patch::Apply(accord_e2e::promfed::source_service("prometheus", "team-a")),
        )
        .await?;
    let federation: PrometheusFederation = serde_json::from_value(json!({
        "apiVersion": "accord.io/v1beta1", "kind": "PrometheusFederation",
        "metadata": {"name": "team-a", "namespace": "default"},
        "spec": {"placement": {"clusters": ["east"]}, "tenantSelector": {"namespaces": ["team-a"]},
                 "match": ["{job=\"prometheus\"}"]}
    }))?;
    Api::<PrometheusFederation>::namespaced(admin.clone(), "default")
        .patch(
            "team-a",
            &PatchParams::apply("join-test"),
            &Patch::Apply(&federation),
        )
        .await?;
    let configs = Api::<ConfigMap>::namespaced(east.client(), "accord-system");
    until(
        "the agent writes the federation config as its ServiceAccount",
        MINUTE,
        || async {
            tb.ensure_running(east_agent)?;
            let config = configs
                .get_opt(accord_common::promfed::CONFIG_MAP_NAME)
                .await?
                .and_then(|c| c.data)
                .and_then(|d| d.get(accord_common::promfed::CONFIG_KEY).cloned());
            let status = Api::<PrometheusFederation>::namespaced(admin.clone(), "default")
                .get("team-a")
                .await?
                .status
                .unwrap_or_default();
            let placement = status.placements.first().cloned();
            Ok(match (config, placement) {
                (Some(config), Some(p))
                    if config.contains("prometheus.team-a.svc:9090")
                        && p.message
                            .as_deref()
                            .is_some_and(|m| m.contains("waiting for the reloader")) =>
                {
                    Check::Ready(())
                }
                (config, placement) => {
                    Check::NotYet(format!("config {config:?}, placement {placement:?}"))
                }
            })
        },
    )
    .await?;

    // The foreground agent restarted with the very same command (its token now spent)
    // keeps its identity and comes back.
    testbed.stop_process(west_agent);
    wait_cluster_condition(&admin, "west", "Available", "False", MINUTE).await?;
    let mut again = std::process::Command::new(accord_binary("accord-agent")?);
    again.args(&words);
    let west_again = testbed.spawn("agent/west-again", again)?;
    wait_cluster_condition(&admin, "west", "Available", "True", MINUTE).await?;
    testbed.ensure_running(west_again)?;
    let log = std::fs::read_to_string(testbed.dir().join("logs/agent-west-again.log"))?;
    ensure!(
        log.contains("already joined as \"west\""),
        "the restarted agent did not reuse its identity:\n{log}"
    );

    // Re-running the first join changes nothing and needs no token.
    let line = join_line(&hub.install_output)?;
    let out = join(
        &line,
        &[
            ("<cluster-name>", "east"),
            ("<member-kubeconfig>", path_str(east.kubeconfig_path())?),
        ],
        &[],
    )
    .await?;
    ensure!(out.status.success(), "re-join east: {}", output_text(&out));
    ensure!(
        stderr(&out).contains("already joined as \"east\""),
        "{}",
        output_text(&out)
    );

    // The agent as its ServiceAccount was never refused anything.
    let log = std::fs::read_to_string(testbed.dir().join("logs/agent-east.log"))?;
    ensure!(
        !log.to_lowercase().contains("forbidden"),
        "the agent was refused something:\n{log}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refused_join_says_why_and_spends_nothing() -> Result<()> {
    let testbed = Testbed::builder()
        .member_names(["alpha"])
        .without_crds()
        .start()
        .await?;
    let _logs = testbed.logs_on_panic();
    let hub = InstalledHub::install(&testbed, "/join-errors/").await?;
    let member = testbed.member("alpha").context("alpha")?;
    let kubeconfig = path_str(member.kubeconfig_path())?.to_owned();
    let line = hub
        .token_create(&testbed, &["--cluster-name", "alpha"])
        .await?;
    let mk = ("<member-kubeconfig>", kubeconfig.as_str());

    // Hub unreachable: nothing listens on the port.
    let nowhere = format!("https://127.0.0.1:{}", free_port()?);
    let out = join(&line, &[(&hub.url, &nowhere), mk], &[]).await?;
    refused(&out, &format!("cannot reach the hub at {nowhere}"))?;

    // CA hash mismatch: the hash of some other CA.
    let other = HubCa::generate("another hub")?.ca_cert_hash();
    let hash = accord_e2e::installed::flag_value(&line, "--ca-cert-hash")?;
    let out = join(&line, &[(&hash, &other), mk], &[]).await?;
    refused(&out, "the hub's CA does not match --ca-cert-hash")?;

    // Missing permissions on the member: a user with no rights there. Nothing is created.
    let nobody = impersonating_kubeconfig(
        &testbed,
        member,
        "accord-test-nobody",
        &["system:authenticated"],
    )?;
    let out = join(
        &line,
        &[("<member-kubeconfig>", path_str(&nobody)?)],
        &["--namespace", "accord-denied"],
    )
    .await?;
    refused(
        &out,
        "permission denied: user \"accord-test-nobody\" may not do everything `accord-agent join` needs",
    )?;
    let err = stderr(&out);
    for needed in [
        "create clusterroles.rbac.authorization.k8s.io (cluster-wide)",
        "patch deployments.apps in namespace accord-denied",
        "create secrets in namespace accord-denied",
    ] {
        ensure!(err.contains(needed), "{needed:?} not listed:\n{err}");
    }
    ensure!(
        Api::<Namespace>::all(member.client())
            .get_opt("accord-denied")
            .await?
            .is_none(),
        "a refused join created its namespace"
    );

    // After all that, the same token still joins.
    let out = join(&line, &[mk], &[]).await?;
    ensure!(out.status.success(), "join alpha: {}", output_text(&out));

    // A used token: a second identity (another namespace of the member) presents it again.
    let second = ["--namespace", "accord-second"];
    let out = join(&line, &[("alpha", "beta"), mk], &second).await?;
    ensure!(!out.status.success(), "{}", output_text(&out));
    ensure!(
        stderr(&out).contains("already used"),
        "{}",
        output_text(&out)
    );

    // An expired token: valid for one second, presented after it ran out.
    let short = hub
        .token_create(&testbed, &["--cluster-name", "beta", "--ttl", "1s"])
        .await?;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let out = join(&short, &[mk], &second).await?;
    ensure!(!out.status.success(), "{}", output_text(&out));
    ensure!(stderr(&out).contains("expired"), "{}", output_text(&out));

    // The name is taken by another identity: refused, token unused, until --force.
    let fresh = hub
        .token_create(&testbed, &["--cluster-name", "alpha"])
        .await?;
    let out = join(&fresh, &[mk], &second).await?;
    refused(&out, "already joined with another identity")?;
    ensure!(stderr(&out).contains("--force"), "{}", output_text(&out));

    // This member already holds another cluster's identity: refused before the hub.
    let out = join(&fresh, &[("alpha", "gamma"), mk], &[]).await?;
    refused(
        &out,
        "this member cluster is already joined as cluster \"alpha\"",
    )?;

    // --force replaces the registration with the same, still unused token.
    let mut forced = second.to_vec();
    forced.push("--force");
    let out = join(&fresh, &[mk], &forced).await?;
    ensure!(out.status.success(), "forced join: {}", output_text(&out));
    let id = Api::<Secret>::namespaced(member.client(), "accord-second")
        .get("accord-agent-identity")
        .await?;
    let name = id
        .data
        .and_then(|d| d.get("cluster-name").cloned())
        .context("cluster-name")?;
    ensure!(
        name.0 == b"alpha",
        "identity names {:?}",
        String::from_utf8_lossy(&name.0)
    );
    Ok(())
}
