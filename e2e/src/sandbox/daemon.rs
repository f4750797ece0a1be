//! The sandbox daemon: owns the testbed, the hub and the agents, and keeps them running
//! until SIGTERM or SIGINT.
//!
//! `accord-sandbox up` starts it in a session of its own with stdout and stderr in
//! `DIR/sandbox.log`; lines starting with [`PROGRESS`] are what `up` shows the user. Every
//! process it starts stays in its session, so `down` can find them all; the testbed's
//! watchdog stops them should the daemon itself be killed.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use accord_crds::{
    CrossClusterScalePolicy, FederatedKafkaTopic, KafkaTopicPolicy, ManagedCluster, PlacementState,
    PrometheusFederation, conditions,
};
use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};

use super::examples::{self, Fit, Plan};
use super::state::{self, MemberState, State};
use crate::federation::{ensure_namespace, pause_deployment};
use crate::installed::{HubSetup, InstalledHub};
use crate::ports::free_port;
use crate::wait::{Check, until};
use crate::{Cluster, ProcessId, Testbed};

/// Prefix of the lines `up` relays to the user.
pub const PROGRESS: &str = "[sandbox] ";
/// Field manager of everything the sandbox applies.
pub const FIELD_MANAGER: &str = "accord-sandbox";
/// How long each start-up step may take before the daemon gives up.
const STEP_TIMEOUT: Duration = Duration::from_secs(180);

/// What the daemon starts.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// The sandbox directory (absolute, existing).
    pub dir: PathBuf,
    /// Member cluster names.
    pub members: Vec<String>,
    /// A Kafka broker per member.
    pub kafka: bool,
    /// A Prometheus server per member.
    pub prometheus: bool,
    /// The `accord-hub` binary.
    pub hub_bin: PathBuf,
    /// The `accord-agent` binary.
    pub agent_bin: PathBuf,
}

/// Prints a progress line for `up` to relay.
pub fn progress(message: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{PROGRESS}{message}");
    let _ = out.flush();
}

/// Runs the daemon until a signal arrives; the error, if any, is in the log.
pub async fn run(options: DaemonOptions) -> Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut state = State {
        pid: std::process::id(),
        dir: options.dir.clone(),
        ready: false,
        started_at: k8s_openapi::jiff::Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)?
            .to_string(),
        mgmt_kubeconfig: options.dir.join(state::MGMT_KUBECONFIG),
        hub_grpc_url: String::new(),
        hub_http_url: String::new(),
        hub_pid: 0,
        members: Vec::new(),
        testbed_dir: PathBuf::new(),
        testbed_bin: std::env::var_os(crate::binaries::BIN_DIR_ENV)
            .map(PathBuf::from)
            .unwrap_or_default(),
        examples: Vec::new(),
    };
    state::write(&state)?;

    let started = tokio::select! {
        result = start(&options, &mut state) => Some(result),
        _ = terminate.recv() => None,
        _ = interrupt.recv() => None,
    };
    let result = match started {
        None => {
            progress("stopped during start-up");
            Ok(())
        }
        Some(Err(e)) => {
            progress(format!("start-up failed: {e:#}"));
            Err(e)
        }
        Some(Ok(sandbox)) => {
            state.ready = true;
            state::write(&state)?;
            progress(format!("ready in {:.1?}", sandbox.started.elapsed()));
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
            progress("stopping every process");
            let stopping = Instant::now();
            drop(sandbox);
            progress(format!("stopped in {:.1?}", stopping.elapsed()));
            Ok(())
        }
    };
    state::remove(&options.dir)?;
    result
}

/// A started sandbox; dropping it stops everything (the testbed's processes include the
/// hub and the agents).
struct Sandbox {
    testbed: Testbed,
    started: Instant,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        tracing::info!(dir = %self.testbed.dir().display(), "stopping the testbed");
    }
}

async fn start(options: &DaemonOptions, state: &mut State) -> Result<Sandbox> {
    let started = Instant::now();
    let names = options.members.join(", ");
    let mut extras = String::new();
    if options.kafka {
        extras.push_str(", Kafka");
    }
    if options.prometheus {
        extras.push_str(", Prometheus");
    }
    progress(format!(
        "starting the management cluster and {} member(s) ({names}{extras})",
        options.members.len()
    ));
    let mut builder = Testbed::builder()
        .member_names(options.members.iter().cloned())
        // `accord-hub install` brings the CRDs, as it would on a real cluster.
        .without_crds()
        .keep_dir(false);
    if options.kafka {
        builder = builder.with_kafka();
    }
    if options.prometheus {
        builder = builder.with_prometheus();
    }
    let testbed = builder.start().await?;
    progress(format!(
        "clusters up in {:.1?}; component logs in {}",
        testbed.startup_duration(),
        testbed.dir().join("logs").display()
    ));
    state.testbed_dir = testbed.dir().to_path_buf();
    if state.testbed_bin.as_os_str().is_empty()
        && let Some(bin) = testbed.binaries().kubectl.parent()
    {
        state.testbed_bin = bin.to_path_buf();
    }
    let sandbox = Sandbox { testbed, started };
    if let Err(e) = set_up(options, state, &sandbox.testbed).await {
        // The testbed's directory goes with it: keep what its components said.
        eprintln!(
            "component logs:\n{}",
            sandbox
                .testbed
                .log_tails(crate::process::DEFAULT_TAIL_LINES)
        );
        return Err(e);
    }
    Ok(sandbox)
}

/// Everything after the clusters are up: hub, agents, examples.
async fn set_up(options: &DaemonOptions, state: &mut State, testbed: &Testbed) -> Result<()> {
    let mgmt_kubeconfig = options.dir.join(state::MGMT_KUBECONFIG);
    copy_file(testbed.mgmt().kubeconfig_path(), &mgmt_kubeconfig)?;
    for member in testbed.members() {
        copy_file(
            member.kubeconfig_path(),
            &options.dir.join(format!("{}.kubeconfig", member.name())),
        )?;
    }

    progress("installing the hub (accord-hub install) and serving it as its ServiceAccount");
    let installed = InstalledHub::install_with(
        testbed,
        HubSetup {
            hub_bin: options.hub_bin.clone(),
            etcd_prefix: testbed.hub_etcd_prefix().to_owned(),
            replica: "sandbox-hub".to_owned(),
        },
    )
    .await?;
    let hub = installed.process;
    state.hub_grpc_url = installed.url.clone();
    state.hub_http_url = installed.http.clone();
    state.hub_pid = testbed.process_info(hub).pid;
    state::write(state)?;

    let mut agents = Vec::new();
    for member in testbed.members() {
        let kubeconfig = options.dir.join(format!("{}.kubeconfig", member.name()));
        let http = format!("127.0.0.1:{}", free_port()?);
        let join = installed
            .token_create(testbed, &["--ttl", "1h", "--cluster-name", member.name()])
            .await?;
        let command = agent_command(&join, &options.agent_bin, &kubeconfig, &http)?;
        progress(format!("joining {} through the token flow", member.name()));
        let mut cmd = Command::new(&command[0]);
        cmd.args(&command[1..])
            .env("RUST_LOG", "info,accord_agent=debug");
        let id = testbed.spawn(&format!("agent/{}", member.name()), cmd)?;
        agents.push(id);
        state.members.push(MemberState {
            name: member.name().to_owned(),
            kubeconfig,
            agent_pid: testbed.process_info(id).pid,
            agent_http: http,
            kafka_bootstrap: member.kafka_bootstrap().map(str::to_owned),
            prometheus_url: member.prometheus_url().map(str::to_owned),
        });
    }
    state::write(state)?;
    let running = std::iter::once(hub)
        .chain(agents.iter().copied())
        .collect::<Vec<_>>();
    wait_members_available(testbed, &running, &options.members).await?;
    progress("every member is Joined and Available");

    let plan = examples::plan(&Fit {
        members: &options.members,
        kafka: options.kafka,
        prometheus_url: testbed.members().first().and_then(Cluster::prometheus_url),
    })?;
    apply_examples(testbed, &plan).await?;
    state.examples = plan
        .objects
        .iter()
        .map(|o| {
            let ns = o["metadata"]["namespace"]
                .as_str()
                .map(|ns| format!("{ns}/"))
                .unwrap_or_default();
            format!(
                "{} {ns}{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    wait_policies_synced(testbed, &running, &plan).await
}

fn copy_file(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// The agent command a join line describes: the line's `accord-agent join` flags with the
/// placeholder kubeconfig replaced, plus `--run` and the agent's HTTP address.
pub fn agent_command(
    join_line: &str,
    agent_bin: &Path,
    kubeconfig: &Path,
    http_addr: &str,
) -> Result<Vec<String>> {
    let mut words = join_line.split_whitespace();
    ensure!(
        words.next() == Some("accord-agent") && words.next() == Some("join"),
        "expected a line starting with `accord-agent join`, got {join_line:?}"
    );
    let mut command = vec![agent_bin.to_string_lossy().into_owned(), "join".to_owned()];
    while let Some(word) = words.next() {
        if word == "--kubeconfig" {
            words.next();
            continue;
        }
        command.push(word.to_owned());
    }
    for flag in ["--hub", "--token", "--ca-cert-hash", "--cluster-name"] {
        ensure!(
            command.iter().any(|w| w == flag),
            "the join line has no {flag}: {join_line:?}"
        );
    }
    command.extend([
        "--kubeconfig".to_owned(),
        kubeconfig.to_string_lossy().into_owned(),
        "--run".to_owned(),
        "--http-addr".to_owned(),
        http_addr.to_owned(),
    ]);
    Ok(command)
}

fn ensure_all_running(testbed: &Testbed, running: &[ProcessId]) -> Result<()> {
    running
        .iter()
        .try_for_each(|id| testbed.ensure_running(*id))
}

async fn wait_members_available(
    testbed: &Testbed,
    running: &[ProcessId],
    members: &[String],
) -> Result<()> {
    let api: Api<ManagedCluster> = Api::all(testbed.mgmt().client());
    until(
        "every member to be Joined and Available",
        STEP_TIMEOUT,
        || {
            let api = api.clone();
            async move {
                ensure_all_running(testbed, running)?;
                let mut missing = Vec::new();
                for name in members {
                    let conditions = api
                        .get_opt(name)
                        .await?
                        .and_then(|m| m.status)
                        .map(|s| s.conditions)
                        .unwrap_or_default();
                    for type_ in ["Joined", "Available"] {
                        if !conditions::is_true(&conditions, type_) {
                            missing.push(format!("{name} not {type_}"));
                        }
                    }
                }
                Ok(if missing.is_empty() {
                    Check::Ready(())
                } else {
                    Check::NotYet(missing.join(", "))
                })
            }
        },
    )
    .await
}

/// The API resource of an example's kind.
fn example_resource(kind: &str) -> Result<(ApiResource, bool)> {
    Ok(match kind {
        "CrossClusterScalePolicy" => (ApiResource::erase::<CrossClusterScalePolicy>(&()), true),
        "ManagedCluster" => (ApiResource::erase::<ManagedCluster>(&()), false),
        "FederatedKafkaTopic" => (ApiResource::erase::<FederatedKafkaTopic>(&()), true),
        "KafkaTopicPolicy" => (ApiResource::erase::<KafkaTopicPolicy>(&()), false),
        "PrometheusFederation" => (ApiResource::erase::<PrometheusFederation>(&()), true),
        other => bail!("no API resource known for example kind {other:?}"),
    })
}

async fn apply_examples(testbed: &Testbed, plan: &Plan) -> Result<()> {
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    for target in &plan.deployments {
        let member = testbed
            .member(&target.cluster)
            .with_context(|| format!("no member {}", target.cluster))?;
        ensure_namespace(member, &target.namespace).await?;
        let api: Api<Deployment> = Api::namespaced(member.client(), &target.namespace);
        api.patch(
            &target.name,
            &apply,
            &Patch::Apply(&pause_deployment(&target.name, 1)),
        )
        .await
        .with_context(|| {
            format!(
                "creating Deployment {}/{} in {}",
                target.namespace, target.name, target.cluster
            )
        })?;
    }
    if !plan.deployments.is_empty() {
        progress(format!(
            "created the Deployments the examples target: {}",
            plan.deployments
                .iter()
                .map(|d| format!("{}:{}/{}", d.cluster, d.namespace, d.name))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }

    let mgmt = testbed.mgmt();
    for ns in &plan.mgmt_namespaces {
        ensure_namespace(mgmt, ns).await?;
    }
    for object in &plan.objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"]
            .as_str()
            .context("an example without a name")?;
        let (resource, namespaced) = example_resource(kind)?;
        let api: Api<DynamicObject> = if namespaced {
            let ns = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default");
            Api::namespaced_with(mgmt.client(), ns, &resource)
        } else {
            Api::all_with(mgmt.client(), &resource)
        };
        api.patch(name, &apply, &Patch::Apply(object))
            .await
            .with_context(|| format!("applying example {kind} {name}"))?;
        progress(format!("applied example {kind} {name}"));
    }
    Ok(())
}

async fn wait_policies_synced(testbed: &Testbed, running: &[ProcessId], plan: &Plan) -> Result<()> {
    for (ns, name) in &plan.wait_for {
        let expected: Vec<&str> = plan
            .objects
            .iter()
            .find(|o| o["metadata"]["name"] == name.as_str() && o["kind"] == examples::CCSP)
            .and_then(|o| o["spec"]["distribution"].as_array())
            .into_iter()
            .flatten()
            .filter_map(|d| d["cluster"].as_str())
            .collect();
        let api: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), ns);
        until(
            &format!("CrossClusterScalePolicy {ns}/{name} to be Synced everywhere"),
            STEP_TIMEOUT,
            || {
                let api = api.clone();
                let expected = expected.clone();
                async move {
                    ensure_all_running(testbed, running)?;
                    let placements = api
                        .get_opt(name)
                        .await?
                        .and_then(|p| p.status)
                        .map(|s| s.placements)
                        .unwrap_or_default();
                    let waiting: Vec<String> = expected
                        .iter()
                        .filter_map(|cluster| {
                            match placements.iter().find(|p| p.cluster == *cluster) {
                                Some(p) if p.state == PlacementState::Synced => None,
                                Some(p) => Some(format!("{cluster} is {}", p.state)),
                                None => Some(format!("{cluster} has no placement")),
                            }
                        })
                        .collect();
                    Ok(if waiting.is_empty() {
                        Check::Ready(())
                    } else {
                        Check::NotYet(waiting.join(", "))
                    })
                }
            },
        )
        .await?;
        progress(format!(
            "CrossClusterScalePolicy {ns}/{name} is Synced in {}",
            expected.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_join_line_becomes_a_foreground_agent_with_the_member_kubeconfig() {
        let line = accord_hub::token::join_line(
            "https://127.0.0.1:7443",
            "abcdef.0123456789abcdef",
            "sha256:00ff",
            "member-1",
        );
        let command = agent_command(
            &line,
            Path::new("bin/accord-agent"),
            Path::new("sandbox/member-1.kubeconfig"),
            "127.0.0.1:9000",
        )
        .unwrap();
        assert_eq!(
            command,
            [
                "bin/accord-agent",
                "join",
                "--hub",
                "https://127.0.0.1:7443",
                "--token",
                "abcdef.0123456789abcdef",
                "--ca-cert-hash",
                "sha256:00ff",
                "--cluster-name",
                "member-1",
                "--kubeconfig",
                "sandbox/member-1.kubeconfig",
                "--run",
                "--http-addr",
                "127.0.0.1:9000",
            ]
        );
    }

    #[test]
    fn a_line_that_is_no_join_line_is_refused() {
        let err = agent_command(
            "error: something",
            Path::new("accord-agent"),
            Path::new("k"),
            "127.0.0.1:1",
        )
        .unwrap_err();
        assert!(err.to_string().contains("accord-agent join"), "{err}");
    }
}
