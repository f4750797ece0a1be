//! `accord-sandbox` end to end: the real binary brings up a management cluster and two
//! members with joined agents and, with `--with-prometheus`, the example
//! PrometheusFederation working (series of both members on the global Prometheus, with
//! their `cluster` and `tenant` labels); its printed kubeconfigs work, `status` reports it
//! all, the global Prometheus and a query included, and `down` leaves no process behind.
//! The API server calls the sandbox's hub for admission (`kubectl apply` of a topic that
//! breaks a KafkaTopicPolicy is refused, or warned about under `Audit`), and with
//! `--with-kafka-sasl` the example topic reaches `Synced` over SASL_SSL with SCRAM. The
//! example FederatedResources are delivered: the MySQL StatefulSet runs 3 ready replicas in
//! the members with its generated credentials (never printed), the EU member runs the EU
//! images, the scale policy scales the delivered frontend, and `status` shows each
//! delivery in each member.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use accord_crds::{ManagedCluster, conditions};
use accord_e2e::kafka_topic_scenario::{KAFKA_SECRET, POLICY_REASON};
use accord_e2e::promfed;
use accord_e2e::sandbox::status::{FEDERATED_QUERY, query_command};
use accord_e2e::sandbox::{procs, state};
use accord_e2e::wait::{Check, until};
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::Value;

const SANDBOX: &str = env!("CARGO_BIN_EXE_accord-sandbox");

async fn sandbox(args: &[&str], dir: &Path, timeout: Duration) -> Result<Output> {
    let run = tokio::process::Command::new(SANDBOX)
        .args(args)
        .arg("--dir")
        .arg(dir)
        .env_remove("KUBECONFIG")
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(timeout, run)
        .await
        .with_context(|| format!("accord-sandbox {args:?} did not finish within {timeout:?}"))?
        .with_context(|| format!("running accord-sandbox {args:?}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Stops the sandbox if the test fails half-way, and shows its log.
struct DownOnDrop(PathBuf);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.0.join(state::LOG_FILE);
            eprintln!(
                "sandbox log ({}):\n{}",
                log.display(),
                accord_e2e::process::tail(&log, 80)
            );
        }
        let _ = std::process::Command::new(SANDBOX)
            .arg("down")
            .arg("--dir")
            .arg(&self.0)
            .status();
    }
}

/// The URL printed after `label Prometheus` on a line of `up`'s summary.
fn printed_prometheus(summary: &str, label: &str) -> Result<String> {
    summary
        .lines()
        .find_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            match words[..] {
                [first, "Prometheus", url] if first == label => Some(url.to_owned()),
                _ => None,
            }
        })
        .with_context(|| format!("no \"{label} Prometheus URL\" line in:\n{summary}"))
}

/// The path printed after `label` on a line of `up`'s summary.
fn printed_path(summary: &str, label: &str) -> Result<PathBuf> {
    summary
        .lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some(label)).then(|| words.next().map(PathBuf::from))?
        })
        .with_context(|| format!("no {label} line in:\n{summary}"))
}

/// A sandbox brought up in a temporary directory; dropping it takes the sandbox down (and
/// prints its log if the test panicked) before the directory goes.
struct Running {
    down: DownOnDrop,
    _tmp: tempfile::TempDir,
}

impl Running {
    fn dir(&self) -> PathBuf {
        self.down.0.clone()
    }
}

/// `sandbox up ARGS` in a new temporary directory named with `prefix`; fails unless it
/// succeeds, and returns the running sandbox with what `up` printed.
async fn up(prefix: &str, args: &[&str]) -> Result<(Running, String)> {
    let tmp = tempfile::Builder::new().prefix(prefix).tempdir()?;
    let running = Running {
        down: DownOnDrop(tmp.path().join("sandbox")),
        _tmp: tmp,
    };
    let mut command = vec!["up"];
    command.extend_from_slice(args);
    let out = sandbox(&command, &running.dir(), Duration::from_secs(900)).await?;
    let summary = text(&out.stdout);
    eprintln!("up:\n{}{summary}", text(&out.stderr));
    ensure!(out.status.success(), "up failed");
    Ok((running, summary))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_brings_a_joined_federation_with_prometheus_federated_and_down_leaves_no_process_behind()
-> Result<()> {
    let (running, summary) = up(
        "accord-sandbox-test-",
        &["--members", "2", "--with-prometheus"],
    )
    .await?;
    let dir = running.dir();
    ensure!(summary.contains("Accord sandbox ready in"), "{summary}");
    ensure!(
        summary.contains("get mcl"),
        "no commands to try:\n{summary}"
    );

    // The printed kubeconfigs reach the clusters: both members are Joined and Available,
    // and the example policy's Deployment got its share.
    let mgmt = printed_path(&summary, "mgmt")?;
    let client = accord_e2e::kubeconfig::client(&mgmt).await?;
    let clusters: Api<ManagedCluster> = Api::all(client);
    for name in ["member-1", "member-2"] {
        let status = clusters
            .get(name)
            .await?
            .status
            .with_context(|| format!("{name} has no status"))?;
        for condition in ["Joined", "Available"] {
            ensure!(
                conditions::is_true(&status.conditions, condition),
                "{name} is not {condition}: {:?}",
                status.conditions
            );
        }
    }
    let member = printed_path(&summary, "member-1")?;
    let member_client = accord_e2e::kubeconfig::client(&member).await?;
    let deployments: Api<Deployment> = Api::namespaced(member_client.clone(), "prod-us");
    let frontend = deployments.get("frontend").await?;
    let replicas = frontend.spec.as_ref().and_then(|s| s.replicas);
    ensure!(
        replicas == Some(7),
        "frontend in member-1 has {replicas:?} replicas"
    );
    // The scale policy scaled what the example FederatedResource delivered, not a
    // Deployment the sandbox made.
    ensure!(
        frontend
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(accord_crds::FEDERATED_RESOURCE_ANNOTATION)),
        "frontend in member-1 was not delivered by Accord: {:?}",
        frontend.metadata
    );
    let eu: Api<Deployment> = Api::namespaced(
        accord_e2e::kubeconfig::client(&printed_path(&summary, "member-2")?).await?,
        "prod-eu",
    );
    let eu_image = container_image(eu.get("frontend").await?.spec.map(|s| s.template));
    ensure!(
        eu_image.as_deref() == Some("eu.registry.example.com/frontend:1.4"),
        "frontend in member-2 (region=eu) runs {eu_image:?}"
    );

    // The MySQL example runs on member-1's API server: 3 ready replicas (kwok's pods),
    // the credentials Secret delivered from the management cluster, where `up` created it
    // with a value it never printed.
    let statefulsets: Api<StatefulSet> = Api::namespaced(member_client.clone(), "databases");
    until(
        "the MySQL StatefulSet to run 3 ready replicas in member-1",
        Duration::from_secs(60),
        || async {
            let status = statefulsets.get("mysql").await?.status;
            let ready = status.as_ref().and_then(|s| s.ready_replicas);
            Ok(if ready == Some(3) {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{status:?}"))
            })
        },
    )
    .await?;
    let password = |secret: Secret| {
        secret
            .data
            .unwrap_or_default()
            .get("password")
            .map(|v| v.0.clone())
    };
    let mgmt_secrets: Api<Secret> =
        Api::namespaced(accord_e2e::kubeconfig::client(&mgmt).await?, "databases");
    let generated = password(mgmt_secrets.get("mysql-credentials").await?)
        .context("Secret databases/mysql-credentials on the management cluster has no password")?;
    ensure!(generated.len() >= 16, "a short generated password");
    let delivered = password(
        Api::<Secret>::namespaced(member_client, "databases")
            .get("mysql-credentials")
            .await?,
    );
    ensure!(
        delivered.as_ref() == Some(&generated),
        "member-1's mysql-credentials is not the management cluster's"
    );
    let generated = String::from_utf8(generated)?;
    let log = std::fs::read_to_string(dir.join(state::LOG_FILE))?;
    ensure!(
        !summary.contains(&generated) && !log.contains(&generated),
        "the generated password was printed"
    );

    // The example federation works: `up` returned once the global Prometheus had series
    // from both members, each with its cluster label and the tenant's label, and a tenant's
    // series are only its own namespace's.
    let global = printed_prometheus(&summary, "global")?;
    ensure!(
        summary.contains(&query_command(&global, FEDERATED_QUERY)),
        "no query to try:\n{summary}"
    );
    let http = reqwest::Client::new();
    let federated = promfed::query(&http, &global, FEDERATED_QUERY).await?;
    for name in ["member-1", "member-2"] {
        ensure!(
            federated.iter().any(|(labels, value)| {
                labels.get("cluster").map(String::as_str) == Some(name)
                    && labels.get("tenant").map(String::as_str) == Some("team-a")
                    && *value >= 1.0
            }),
            "no team-a series of {name} on the global Prometheus: {}",
            promfed::format_samples(&federated)
        );
    }
    let by_namespace = promfed::query(
        &http,
        &global,
        r#"count by (cluster, tenant, namespace) ({tenant!=""})"#,
    )
    .await?;
    ensure!(
        !by_namespace.is_empty()
            && by_namespace
                .iter()
                .all(|(labels, _)| labels.get("namespace") == labels.get("tenant")),
        "series of another namespace under a tenant: {}",
        promfed::format_samples(&by_namespace)
    );

    // A second `up` finds it running and changes nothing.
    let again = sandbox(&["up"], &dir, Duration::from_secs(120)).await?;
    ensure!(again.status.success(), "second up failed");
    ensure!(
        text(&again.stdout).contains("already running"),
        "{}",
        text(&again.stdout)
    );

    let out = sandbox(&["status", "--json"], &dir, Duration::from_secs(60)).await?;
    ensure!(out.status.success(), "status failed: {}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout)?;
    ensure!(
        report["running"] == true && report["ready"] == true,
        "{report:#}"
    );
    // The hub keeps its state in its own TLS etcd, as a production install would.
    let etcd = report["hub"]["etcd"].as_str().unwrap_or_default();
    ensure!(
        etcd.starts_with("https://") && etcd.contains("(prefix "),
        "{report:#}"
    );
    let members = report["members"].as_array().context("members")?;
    ensure!(members.len() == 2, "{report:#}");
    for m in members {
        ensure!(
            m["agent_alive"] == true && m["available"] == "True" && m["joined"] == "True",
            "{m:#}"
        );
    }
    ensure!(
        report["policies"].as_array().is_some_and(|p| p
            .iter()
            .any(|p| p["name"] == "webapp-global-scale" && p["synced"] == true)),
        "{report:#}"
    );
    ensure!(
        report["global_prometheus"]["url"] == global.as_str(),
        "{report:#}"
    );
    let federation = report["federations"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == "team-a"))
        .with_context(|| format!("no PrometheusFederation team-a in {report:#}"))?;
    ensure!(
        federation["ready"] == true
            && federation["global"]["state"] == "Synced"
            && federation["placements"]
                .as_array()
                .is_some_and(|p| p.len() == 2 && p.iter().all(|p| p["state"] == "Synced")),
        "{federation:#}"
    );
    // Each example FederatedResource, in each member: Synced with every manifest applied
    // and healthy, its feedback, and the EU override only in member-2.
    let resources = report["resources"].as_array().context("no resources")?;
    for (name, manifests, ready) in [("mysql", 6, "3"), ("frontend", 3, "")] {
        let resource = resources
            .iter()
            .find(|r| r["name"] == name)
            .with_context(|| format!("no FederatedResource {name} in {report:#}"))?;
        let placements = resource["placements"].as_array().context("placements")?;
        ensure!(
            resource["applied"] == true
                && resource["available"] == true
                && placements.len() == 2
                && placements.iter().all(|p| p["state"] == "Synced"
                    && p["applied"] == manifests
                    && p["available"] == manifests
                    && p["feedback"]["readyReplicas"].is_string()),
            "{resource:#}"
        );
        if !ready.is_empty() {
            ensure!(
                placements
                    .iter()
                    .all(|p| p["feedback"]["readyReplicas"] == ready),
                "{resource:#}"
            );
        }
        let eu_override = resource["override_selections"]
            .as_array()
            .and_then(|s| s.iter().position(|s| s == "region=eu"))
            .with_context(|| format!("no region=eu override in {resource:#}"))?;
        let applied_eu = |p: &Value| {
            p["overrides"]
                .as_array()
                .is_some_and(|o| o.iter().any(|i| *i == eu_override))
        };
        ensure!(
            placements
                .iter()
                .all(|p| applied_eu(p) == (p["cluster"] == "member-2")),
            "the EU override applies elsewhere than member-2: {resource:#}"
        );
    }
    ensure!(
        !text(&out.stdout).contains(&generated),
        "status --json prints the generated password"
    );

    let out = sandbox(&["status"], &dir, Duration::from_secs(60)).await?;
    let printed = text(&out.stdout);
    ensure!(out.status.success(), "status failed: {}", text(&out.stderr));
    for expected in [
        format!("global   Prometheus {global}"),
        query_command(&global, FEDERATED_QUERY),
        "pfed monitoring/team-a: Ready [member-1 Synced".to_owned(),
        "fres databases/mysql: Applied, Available".to_owned(),
        "member-2 Synced, 6 applied, 6 available, overrides 0 (region=eu), instances=3 \
         readyReplicas=3"
            .to_owned(),
    ] {
        ensure!(
            printed.contains(&expected),
            "status does not print {expected:?}:\n{printed}"
        );
    }

    // The console: its URL and a token to sign in with are printed, and that token shows
    // the fleet (the JSON report names the token's file, never the token).
    let console = report["console"]["url"]
        .as_str()
        .context("no console in status --json")?;
    ensure!(report["console"].get("token").is_none(), "{report:#}");
    let token_file = report["console"]["token_file"]
        .as_str()
        .context("no console token file")?;
    let token = std::fs::read_to_string(token_file)?.trim().to_owned();
    ensure!(
        printed.contains(&format!("console  {console}")) && printed.contains(&token),
        "status does not print the console and its token:\n{printed}"
    );
    let (code, fleet) = accord_e2e::console::fetch(
        &reqwest::Client::new(),
        &format!("{console}/"),
        Some(&token),
    )
    .await?;
    ensure!(
        code == 200 && fleet.contains(r#"data-cluster="member-1""#),
        "{code}: {fleet}"
    );

    // The agents were joined through the real token flow and run in the foreground.
    let recorded = state::read(&dir)?.context("no state.json while running")?;
    for member in &recorded.members {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", member.agent_pid))?;
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        ensure!(
            args.get(1).map(String::as_str) == Some("join")
                && args.iter().any(|a| a == "--run")
                && args.iter().any(|a| a == "--token"),
            "agent of {} runs {args:?}",
            member.name
        );
    }

    // `down` stops the daemon and every process of its session.
    let mut pids = procs::session_members(recorded.pid);
    pids.extend([recorded.pid, recorded.hub_pid]);
    pids.extend(recorded.members.iter().map(|m| m.agent_pid));
    ensure!(pids.len() > 10, "the session holds only {pids:?}");
    let out = sandbox(&["down"], &dir, Duration::from_secs(120)).await?;
    eprintln!("down:\n{}{}", text(&out.stdout), text(&out.stderr));
    ensure!(out.status.success(), "down failed");
    for pid in &pids {
        ensure!(!procs::alive(*pid), "process {pid} survived down");
    }
    ensure!(
        procs::session_members(recorded.pid).is_empty(),
        "the sandbox's session still has processes"
    );
    ensure!(!state::path(&dir).exists(), "state.json is left");

    // Nothing is running any more: status says so and fails; down is idempotent.
    let out = sandbox(&["status"], &dir, Duration::from_secs(60)).await?;
    ensure!(!out.status.success(), "status succeeded without a sandbox");
    let out = sandbox(&["down"], &dir, Duration::from_secs(60)).await?;
    ensure!(out.status.success(), "a second down failed");
    ensure!(
        text(&out.stdout).contains("nothing to stop"),
        "{}",
        text(&out.stdout)
    );
    Ok(())
}

/// The image of a pod template's first container.
fn container_image(
    template: Option<k8s_openapi::api::core::v1::PodTemplateSpec>,
) -> Option<String> {
    template?.spec?.containers.first()?.image.clone()
}

/// Runs the testbed's `kubectl` on the sandbox's management cluster with `stdin` as input.
async fn kubectl(recorded: &state::State, args: &[&str], stdin: &str) -> Result<Output> {
    use tokio::io::AsyncWriteExt as _;
    let mut child = tokio::process::Command::new(recorded.testbed_bin.join("kubectl"))
        .arg("--kubeconfig")
        .arg(&recorded.mgmt_kubeconfig)
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("running kubectl")?;
    let mut input = child.stdin.take().context("kubectl's stdin")?;
    input.write_all(stdin.as_bytes()).await?;
    drop(input);
    tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .context("kubectl did not finish within 60s")?
        .context("waiting for kubectl")
}

fn both(out: &Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

/// A KafkaTopicPolicy for every namespace: at least 12 partitions, under `enforcement`.
fn min_partitions_policy(enforcement: &str) -> String {
    format!(
        "apiVersion: accord.io/v1beta1
kind: KafkaTopicPolicy
metadata:
  name: sandbox-min-12
spec:
  minPartitions: 12
  enforcement: {enforcement}
"
    )
}

/// A 6-partition FederatedKafkaTopic in `default` for member-1.
const SMALL_TOPIC: &str = "apiVersion: accord.io/v1beta1
kind: FederatedKafkaTopic
metadata:
  name: small-topic
  namespace: default
spec:
  topicName: small-topic
  partitions: 6
  replicationFactor: 1
  placement:
    clusters:
    - member-1
";

const PARTITION_RULE: &str = "spec.partitions: must be at least 12 (is 6)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_of_a_topic_breaking_a_policy_is_refused_by_the_sandbox_hubs_webhook()
-> Result<()> {
    // No Kafka: the webhook decides at admission, whatever the members' brokers.
    let (running, summary) = up("accord-sandbox-webhook-", &["--members", "1"]).await?;
    let dir = running.dir();

    // state.json, status and the summary name the webhook's address, and the management
    // cluster's ValidatingWebhookConfiguration sends reviews there.
    let recorded = state::read(&dir)?.context("no state.json while running")?;
    let webhook = recorded.hub_webhook_url.clone();
    ensure!(
        webhook.starts_with("https://127.0.0.1:"),
        "state.json's webhook address is {webhook:?}"
    );
    ensure!(
        summary.contains(&format!("webhook      {webhook}")),
        "up does not print the webhook address:\n{summary}"
    );
    let out = sandbox(&["status", "--json"], &dir, Duration::from_secs(60)).await?;
    ensure!(out.status.success(), "status failed: {}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout)?;
    let registered = format!("{webhook}/validate-federatedkafkatopics");
    ensure!(
        report["hub"]["webhook_url"] == webhook.as_str()
            && report["hub"]["webhook_registered"]
                .as_array()
                .is_some_and(|urls| urls.iter().any(|u| u == registered.as_str())),
        "status does not show the webhook registered at {registered}: {report:#}"
    );
    let out = sandbox(&["status"], &dir, Duration::from_secs(60)).await?;
    ensure!(
        text(&out.stdout).contains(&format!("webhook {webhook} (registered: {registered}")),
        "{}",
        text(&out.stdout)
    );

    // Deny: refused through `kubectl apply`, with the reason and the rule broken.
    // The webhook's caches see each policy shortly after it is stored.
    apply_policy_until(
        &recorded,
        "Deny",
        "the webhook to refuse the small topic",
        |out| !out.status.success(),
    )
    .await?;
    let refused = kubectl(&recorded, &["apply", "-f", "-"], SMALL_TOPIC).await?;
    let said = both(&refused);
    eprintln!("kubectl apply under Deny:\n{said}");
    ensure!(
        !refused.status.success(),
        "the small topic was admitted: {said}"
    );
    for expected in [POLICY_REASON, "denied the request", PARTITION_RULE] {
        ensure!(said.contains(expected), "{expected:?} not in {said:?}");
    }
    let out = kubectl(
        &recorded,
        &["get", "fkt", "-n", "default", "small-topic"],
        "",
    )
    .await?;
    ensure!(
        !out.status.success(),
        "the refused topic exists: {}",
        both(&out)
    );

    // Audit: admitted, with the rule as a warning kubectl prints.
    apply_policy_until(
        &recorded,
        "Audit",
        "the webhook to warn about the small topic",
        |out| out.status.success() && text(&out.stderr).contains("Warning:"),
    )
    .await?;
    let warned = kubectl(&recorded, &["apply", "-f", "-"], SMALL_TOPIC).await?;
    let said = both(&warned);
    eprintln!("kubectl apply under Audit:\n{said}");
    ensure!(
        warned.status.success(),
        "the audited topic was refused: {said}"
    );
    let warning = text(&warned.stderr);
    ensure!(
        warning.contains("Warning:") && warning.contains(PARTITION_RULE),
        "no warning naming the rule: {said}"
    );
    Ok(())
}

/// Applies the `minPartitions: 12` policy with `enforcement`, then waits until a server-side
/// dry run of the small topic answers as `admitted_as` says (the webhook reads policies from
/// its caches, which learn of a new one shortly after it is stored).
async fn apply_policy_until(
    recorded: &state::State,
    enforcement: &str,
    what: &str,
    admitted_as: impl Fn(&Output) -> bool,
) -> Result<()> {
    let applied = kubectl(
        recorded,
        &["apply", "-f", "-"],
        &min_partitions_policy(enforcement),
    )
    .await?;
    ensure!(applied.status.success(), "{}", both(&applied));
    until(what, Duration::from_secs(60), || async {
        let out = kubectl(
            recorded,
            &["apply", "--dry-run=server", "-f", "-"],
            SMALL_TOPIC,
        )
        .await?;
        Ok(if admitted_as(&out) {
            Check::Ready(())
        } else {
            Check::NotYet(both(&out))
        })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_kafka_sasl_the_example_topic_is_synced_over_scram() -> Result<()> {
    // One member is enough: `up` returns once the example topic is Synced in every member.
    let (running, summary) = up(
        "accord-sandbox-sasl-",
        &["--members", "1", "--with-kafka-sasl"],
    )
    .await?;
    let dir = running.dir();
    ensure!(summary.contains("(SASL_SSL, SCRAM-SHA-512"), "{summary}");

    // The agent's Secret is the SASL_SSL listener with the SCRAM user: the topic was
    // reached that way.
    let recorded = state::read(&dir)?.context("no state.json while running")?;
    let member = &recorded.members[0];
    ensure!(
        member.kafka_protocol.as_deref() == Some("SASL_SSL"),
        "{member:?}"
    );
    let secrets: Api<Secret> = Api::namespaced(
        accord_e2e::kubeconfig::client(&member.kubeconfig).await?,
        accord_e2e::fleet::AGENT_NAMESPACE,
    );
    let data = secrets.get(KAFKA_SECRET).await?.data.unwrap_or_default();
    let value = |key: &str| {
        data.get(key)
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    };
    ensure!(
        value("security.protocol").as_deref() == Some("SASL_SSL")
            && value("sasl.mechanism").as_deref() == Some("SCRAM-SHA-512")
            && value("bootstrap.servers") == member.kafka_bootstrap,
        "the agent's Kafka Secret is {:?}",
        data.keys().map(|k| (k, value(k))).collect::<Vec<_>>()
    );
    let client_config = member
        .kafka_client_config
        .as_ref()
        .context("no Kafka client config recorded")?;
    ensure!(
        std::fs::read_to_string(client_config)?.contains("sasl.mechanism=SCRAM-SHA-512"),
        "{}",
        client_config.display()
    );

    let out = sandbox(&["status", "--json"], &dir, Duration::from_secs(60)).await?;
    ensure!(out.status.success(), "status failed: {}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout)?;
    ensure!(
        report["members"][0]["kafka_protocol"] == "SASL_SSL",
        "{report:#}"
    );
    let topic = report["topics"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "fraud-transaction-events"))
        .with_context(|| format!("no example topic in {report:#}"))?;
    ensure!(
        topic["placements"].as_array().is_some_and(|p| p.len() == 1
            && p[0]["cluster"] == "member-1"
            && p[0]["state"] == "Synced"),
        "{topic:#}"
    );
    Ok(())
}

/// `bash e2e/sandbox.sh --help` answers at once on a machine that has built nothing: no
/// cargo (and no prerequisites) is needed to read how to use it.
#[test]
fn the_scripts_help_needs_no_build() -> Result<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("sandbox.sh");
    for (args, code) in [(&["--help"][..], 0), (&["-h"][..], 0), (&[][..], 2)] {
        let out = std::process::Command::new("bash")
            .arg(&script)
            .args(args)
            // No cargo, go or apt on this PATH: a build would fail.
            .env("PATH", "/usr/bin:/bin")
            .output()?;
        let printed = format!("{}{}", text(&out.stdout), text(&out.stderr));
        ensure!(
            out.status.code() == Some(code),
            "{args:?}: {:?}\n{printed}",
            out.status
        );
        ensure!(
            printed.contains("bash e2e/sandbox.sh up [--members N]"),
            "{args:?}: {printed}"
        );
        ensure!(!printed.contains("cargo"), "{args:?}: {printed}");
    }
    Ok(())
}
