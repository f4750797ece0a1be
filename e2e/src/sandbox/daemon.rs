//! The sandbox daemon: owns the testbed, the hub and the agents, and keeps them running
//! until SIGTERM or SIGINT.
//!
//! `accord-sandbox up` starts it in a session of its own with stdout and stderr in
//! `DIR/sandbox.log`; lines starting with [`PROGRESS`] are what `up` shows the user. Every
//! process it starts stays in its session, so `down` can find them all; the testbed's
//! watchdog stops them should the daemon itself be killed.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use accord_crds::{
    CrossClusterScalePolicy, FederatedKafkaTopic, FederatedKafkaUser, FederatedResource,
    FederatedResourceStatus, ManagedCluster, PlacementState, PrometheusFederation,
    PrometheusFederationStatus, conditions,
};
use anyhow::{Context as _, Result, bail, ensure};
use futures::future::try_join_all;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};

use super::examples::{self, FederationExample, Fit, NeededSecret, Plan, ResourceExample};
use super::state::{self, MemberState, State};
use super::status::FEDERATED_QUERY;
use crate::fleet::{ensure_namespace, pause_deployment};
use crate::hub::HUB_NAMESPACE;
use crate::installed::{HubSetup, InstalledHub, impersonating_kubeconfig};
use crate::ports::free_port;
use crate::promfed::{
    self, FederationOptions, FederationPrometheus, GlobalPrometheus, PromfedMember,
    ReloaderOptions, TenantSpec,
};
use crate::wait::{Check, until};
use crate::{Cluster, ProcessId, Testbed};

/// Prefix of the lines `up` relays to the user.
pub const PROGRESS: &str = "[sandbox] ";
/// Field manager of everything the sandbox applies.
pub const FIELD_MANAGER: &str = "accord-sandbox";
/// How long each start-up step may take before the daemon gives up.
const STEP_TIMEOUT: Duration = Duration::from_secs(180);
/// Length of the random value of each key of a Secret the examples refer to.
const SECRET_VALUE_LEN: usize = 24;
/// Name of the Service each tenant's Prometheus is published as, in the tenant's namespace.
pub const TENANT_SERVICE: &str = "prometheus";
/// The manifest of a member's federation Prometheus. The sandbox runs Prometheus itself and
/// applies only the reloader's identity and least-privilege Role from it
/// ([`RELOADER_RBAC_KINDS`]), so each member's reloader runs with exactly those rights.
const FEDERATION_MANIFEST: &str =
    include_str!("../../../deploy/manifests/prometheus-federation.yaml");
/// The kinds of [`FEDERATION_MANIFEST`] the sandbox applies.
const RELOADER_RBAC_KINDS: [&str; 4] = ["Namespace", "ServiceAccount", "Role", "RoleBinding"];

/// What the daemon starts.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// The sandbox directory (absolute, existing).
    pub dir: PathBuf,
    /// Member cluster names.
    pub members: Vec<String>,
    /// A Kafka broker per member.
    pub kafka: bool,
    /// The brokers also listen for SASL_SSL with SCRAM-SHA-512, and the agents use that
    /// listener (implies [`DaemonOptions::kafka`]).
    pub kafka_sasl: bool,
    /// A Prometheus server per member.
    pub prometheus: bool,
    /// Jaeger, with the hub and agents exporting traces to it.
    pub tracing: bool,
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
        hub_webhook_url: String::new(),
        hub_pid: 0,
        hub_etcd: String::new(),
        members: Vec::new(),
        testbed_dir: PathBuf::new(),
        testbed_bin: std::env::var_os(crate::binaries::BIN_DIR_ENV)
            .map(PathBuf::from)
            .unwrap_or_default(),
        examples: Vec::new(),
        global_prometheus_url: None,
        jaeger_url: None,
        console_url: None,
        console_token_file: None,
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
/// hub, the agents and the example federation's Prometheus servers and reloaders).
struct Sandbox {
    testbed: Testbed,
    /// Handles of the example federation's servers, kept while the testbed runs them.
    _federation: Option<FederationServers>,
    started: Instant,
}

/// The Prometheus servers the example PrometheusFederation works with: in every member the
/// tenants' servers (published as Services) and the federation Prometheus, and the global
/// Prometheus on the management side; each federation and global Prometheus has an
/// `accord-agent reload` beside it.
struct FederationServers {
    members: Vec<PromfedMember>,
    global: Option<GlobalPrometheus>,
    reloaders: Vec<ProcessId>,
}

impl FederationServers {
    /// Every process that must keep running.
    fn processes(&self) -> Vec<ProcessId> {
        let members = self.members.iter().flat_map(|m| {
            m.tenants
                .iter()
                .filter_map(|t| t.process())
                .chain(m.federation.process())
        });
        members
            .chain(self.global.iter().filter_map(FederationPrometheus::process))
            .chain(self.reloaders.iter().copied())
            .collect()
    }
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
    if options.kafka_sasl {
        extras.push_str(", Kafka with SASL_SSL/SCRAM");
    } else if options.kafka {
        extras.push_str(", Kafka");
    }
    if options.prometheus {
        extras.push_str(", Prometheus");
    }
    if options.tracing {
        extras.push_str(", Jaeger");
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
    // With SASL the daemon starts the brokers itself (a listener the testbed's default
    // broker lacks), once the clusters are up.
    if options.kafka && !options.kafka_sasl {
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
    let mut sandbox = Sandbox {
        testbed,
        _federation: None,
        started,
    };
    match set_up(options, state, &sandbox.testbed).await {
        Ok(federation) => sandbox._federation = federation,
        Err(e) => {
            // The testbed's directory goes with it: keep what its components said.
            eprintln!(
                "component logs:\n{}",
                sandbox
                    .testbed
                    .log_tails(crate::process::DEFAULT_TAIL_LINES)
            );
            return Err(e);
        }
    }
    Ok(sandbox)
}

/// Everything after the clusters are up: hub, agents, the example federation's Prometheus
/// servers, examples.
async fn set_up(
    options: &DaemonOptions,
    state: &mut State,
    testbed: &Testbed,
) -> Result<Option<FederationServers>> {
    let mgmt_kubeconfig = options.dir.join(state::MGMT_KUBECONFIG);
    copy_file(testbed.mgmt().kubeconfig_path(), &mgmt_kubeconfig)?;
    for member in testbed.members() {
        copy_file(
            member.kubeconfig_path(),
            &options.dir.join(format!("{}.kubeconfig", member.name())),
        )?;
    }

    progress(
        "installing the hub (accord-hub install --webhook-url, the API server calling the \
         hub on this host) and serving it as its ServiceAccount",
    );
    // The hub exports traces and links each object's console page to its trace in Jaeger's
    // query API (the binary built from Jaeger's Go module carries no UI assets).
    let mut hub_args = Vec::new();
    let otlp = if options.tracing {
        let jaeger = crate::jaeger::Jaeger::start(testbed).await?;
        hub_args.extend([
            "--console-trace-url".to_owned(),
            format!("{}/api/traces/{{traceID}}", jaeger.addrs.query_url),
        ]);
        progress(format!(
            "Jaeger receives traces at {} (UI and query API {})",
            jaeger.otlp_endpoint(),
            jaeger.addrs.query_url
        ));
        state.jaeger_url = Some(jaeger.addrs.query_url.clone());
        vec![
            "--otlp-endpoint".to_owned(),
            jaeger.otlp_endpoint().to_owned(),
        ]
    } else {
        Vec::new()
    };
    let install = InstalledHub::install_with(
        testbed,
        HubSetup {
            hub_bin: options.hub_bin.clone(),
            etcd_prefix: testbed.hub_etcd_prefix().to_owned(),
            replica: "sandbox-hub".to_owned(),
            webhook_url: true,
            serve_args: otlp.iter().cloned().chain(hub_args).collect(),
            console: true,
        },
    );
    let (installed, kafkas) = tokio::try_join!(install, member_kafkas(options, testbed))?;
    let hub = installed.process;
    state.hub_grpc_url = installed.url.clone();
    state.hub_http_url = installed.http.clone();
    state.hub_webhook_url = installed.webhook.clone();
    if let Some(console) = &installed.console {
        state.console_token_file = Some(console_viewer(testbed, &options.dir).await?);
        state.console_url = Some(console.clone());
        progress(format!("the fleet console serves {console}"));
    }
    progress(format!(
        "the hub's admission webhook is registered at {}",
        installed
            .webhook_url
            .as_deref()
            .unwrap_or(&installed.webhook)
    ));
    state.hub_pid = testbed.process_info(hub).pid;
    state.hub_etcd = format!(
        "{} (prefix {})",
        testbed.hub_etcd().endpoints_arg(),
        testbed.hub_etcd_prefix()
    );
    state::write(state)?;

    let mut agents = Vec::new();
    for (i, member) in testbed.members().iter().enumerate() {
        let kafka = kafkas.get(i);
        let kubeconfig = options.dir.join(format!("{}.kubeconfig", member.name()));
        let http = format!("127.0.0.1:{}", free_port()?);
        let join = installed
            .token_create(testbed, &["--ttl", "1h", "--cluster-name", member.name()])
            .await?;
        let command = agent_command(&join, &options.agent_bin, &kubeconfig, &http)?;
        progress(format!("joining {} through the token flow", member.name()));
        let mut cmd = Command::new(&command[0]);
        cmd.args(&command[1..])
            .args(&otlp)
            .env("RUST_LOG", "info,accord_agent=debug");
        let id = testbed.spawn(&format!("agent/{}", member.name()), cmd)?;
        agents.push(id);
        state.members.push(MemberState {
            name: member.name().to_owned(),
            kubeconfig,
            agent_pid: testbed.process_info(id).pid,
            agent_http: http,
            kafka_bootstrap: kafka.map(|k| k.bootstrap.clone()),
            kafka_protocol: kafka.map(|k| k.protocol().to_owned()),
            kafka_client_config: kafka.and_then(|k| k.client_config.clone()),
            prometheus_url: member.prometheus_url().map(str::to_owned),
            federation_url: None,
        });
    }
    state::write(state)?;
    let mut running = std::iter::once(hub)
        .chain(agents.iter().copied())
        .collect::<Vec<_>>();
    wait_members_available(testbed, &running, &options.members).await?;
    progress("every member is Joined and Available");
    if options.kafka {
        write_kafka_secrets(testbed, &kafkas).await?;
    }

    let plan = examples::plan(&Fit {
        members: &options.members,
        kafka: options.kafka,
        kafka_users: options.kafka_sasl,
        prometheus_url: testbed.members().first().and_then(Cluster::prometheus_url),
    })?;
    let federation = match &plan.federation {
        Some(example) => {
            let servers = start_federation(testbed, &options.agent_bin, example).await?;
            running.extend(servers.processes());
            for member in &mut state.members {
                member.federation_url = servers
                    .members
                    .iter()
                    .find(|m| m.cluster == member.name)
                    .map(|m| m.federation.url());
            }
            state.global_prometheus_url = servers.global.as_ref().map(FederationPrometheus::url);
            state::write(state)?;
            Some(servers)
        }
        None => None,
    };
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
    wait_policies_synced(testbed, &running, &plan).await?;
    wait_topics_synced(testbed, &running, &plan).await?;
    wait_resources_available(testbed, &running, &plan).await?;
    if let Some(example) = &plan.federation {
        wait_federation_ready(
            testbed,
            &running,
            example,
            &options.members,
            state.global_prometheus_url.as_deref(),
        )
        .await?;
    }
    Ok(federation)
}

/// Starts what the example federation needs: in every member its ConfigMap namespace, a
/// tenant Prometheus per tenant namespace (published as Service [`TENANT_SERVICE`]) and the
/// federation Prometheus; the global Prometheus when the global tier is enabled; a reloader
/// beside each federation and global Prometheus. Then labels every member's ManagedCluster
/// so the example selects it and points its `spec.federationEndpoint` at its federation
/// Prometheus.
async fn start_federation(
    testbed: &Testbed,
    agent_bin: &Path,
    example: &FederationExample,
) -> Result<FederationServers> {
    progress(format!(
        "starting the Prometheus servers of PrometheusFederation {}/{}: per member a tenant \
         Prometheus for {} and a federation Prometheus{}",
        example.namespace,
        example.name,
        example.tenants.join(", "),
        if example.global {
            "; the global Prometheus"
        } else {
            ""
        }
    ));
    let tenants: Vec<TenantSpec> = example
        .tenants
        .iter()
        .map(|ns| TenantSpec::new(ns, TENANT_SERVICE))
        .collect();
    // The reloaders are started here, with the agent binary the sandbox was given (the
    // testbed's own would build one with cargo, which an installed sandbox cannot).
    let plain = FederationOptions::default();
    let members = try_join_all(testbed.members().iter().map(|cluster| {
        let tenants = &tenants;
        let plain = &plain;
        async move {
            ensure_namespace(cluster, &example.config_map_namespace).await?;
            PromfedMember::start(testbed, cluster, tenants, plain)
                .await
                .with_context(|| format!("Prometheus servers of {}", cluster.name()))
        }
    }));
    let global = async {
        if !example.global {
            return Ok(None);
        }
        FederationPrometheus::start_global(testbed, &plain)
            .await
            .map(Some)
            .context("the global Prometheus")
    };
    let (mut members, mut global) = tokio::try_join!(members, global)?;

    let rbac = reloader_rbac(&example.config_map_namespace)?;
    let reloader = |namespace: &str, kubeconfig: Option<PathBuf>| ReloaderOptions {
        namespace: namespace.to_owned(),
        log_filter: "info".to_owned(),
        agent_bin: Some(agent_bin.to_path_buf()),
        kubeconfig,
        ..ReloaderOptions::default()
    };
    let mut reloaders = Vec::new();
    for member in &mut members {
        let cluster = testbed
            .member(&member.cluster)
            .with_context(|| format!("no member {}", member.cluster))?;
        let kubeconfig = apply_reloader_rbac(testbed, cluster, &rbac).await?;
        let options = reloader(&example.config_map_namespace, Some(kubeconfig));
        reloaders.push(member.federation.start_reloader(testbed, options)?);
    }
    if let Some(global) = &mut global {
        // The hub installed by the sandbox keeps the global tier's ConfigMap in its own
        // namespace (`accord-hub serve --federation-namespace` defaults to it).
        reloaders.push(global.start_reloader(testbed, reloader(HUB_NAMESPACE, None))?);
    }

    for member in &members {
        fit_managed_cluster(
            testbed,
            &member.cluster,
            &example.cluster_labels,
            &member.federation.url(),
        )
        .await?;
    }
    progress(format!(
        "federation Prometheus servers: {}{}; members labelled {} and their federationEndpoint set",
        members
            .iter()
            .map(|m| format!("{} {}", m.cluster, m.federation.url()))
            .collect::<Vec<_>>()
            .join(", "),
        global
            .as_ref()
            .map(|g| format!("; global {}", g.url()))
            .unwrap_or_default(),
        example
            .cluster_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    ));
    Ok(FederationServers {
        members,
        global,
        reloaders,
    })
}

/// The reloader's objects of [`FEDERATION_MANIFEST`] moved to `namespace`, and the user
/// name of its ServiceAccount (`system:serviceaccount:<namespace>:<name>`).
pub fn reloader_rbac(namespace: &str) -> Result<(Vec<serde_json::Value>, String)> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(FEDERATION_MANIFEST)
        .context("parsing deploy/manifests/prometheus-federation.yaml")?;
    let mut objects = Vec::new();
    let mut account = None;
    for mut doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        // The agent's Role there is not the reloader's: the sandbox's agents act as the
        // member's admin.
        let agents = doc["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("accord-agent"));
        if !RELOADER_RBAC_KINDS.contains(&kind.as_str()) || agents {
            continue;
        }
        if kind == "Namespace" {
            doc["metadata"]["name"] = serde_json::json!(namespace);
        } else {
            doc["metadata"]["namespace"] = serde_json::json!(namespace);
        }
        // `get_mut`, not indexing: indexing would add `subjects: null` to every object.
        let subjects = doc
            .get_mut("subjects")
            .and_then(serde_json::Value::as_array_mut);
        for subject in subjects.into_iter().flatten() {
            subject["namespace"] = serde_json::json!(namespace);
        }
        if kind == "ServiceAccount" {
            account = doc["metadata"]["name"].as_str().map(str::to_owned);
        }
        objects.push(doc);
    }
    let account = account.context("the federation manifest has no ServiceAccount")?;
    Ok((
        objects,
        format!("system:serviceaccount:{namespace}:{account}"),
    ))
}

/// Applies the reloader's objects ([`reloader_rbac`]) to member `cluster` and returns a
/// kubeconfig acting as its ServiceAccount.
async fn apply_reloader_rbac(
    testbed: &Testbed,
    cluster: &Cluster,
    (objects, user): &(Vec<serde_json::Value>, String),
) -> Result<PathBuf> {
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    for object in objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let resource = match kind {
            "Namespace" => ApiResource::erase::<Namespace>(&()),
            "ServiceAccount" => ApiResource::erase::<ServiceAccount>(&()),
            "Role" => ApiResource::erase::<Role>(&()),
            "RoleBinding" => ApiResource::erase::<RoleBinding>(&()),
            other => bail!("no API resource known for {other}"),
        };
        let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(cluster.client(), ns, &resource),
            None => Api::all_with(cluster.client(), &resource),
        };
        api.patch(name, &apply, &Patch::Apply(object))
            .await
            .with_context(|| format!("applying {kind} {name} in {}", cluster.name()))?;
    }
    let namespace = user.split(':').nth(2).unwrap_or_default();
    impersonating_kubeconfig(
        testbed,
        cluster,
        user,
        &[
            "system:serviceaccounts",
            &format!("system:serviceaccounts:{namespace}"),
            "system:authenticated",
        ],
    )
}

/// Adds `labels` to ManagedCluster `cluster` and sets its `spec.federationEndpoint` to
/// `endpoint` (a merge patch: what the agent and the examples set stays).
async fn fit_managed_cluster(
    testbed: &Testbed,
    cluster: &str,
    labels: &BTreeMap<String, String>,
    endpoint: &str,
) -> Result<()> {
    let api: Api<ManagedCluster> = Api::all(testbed.mgmt().client());
    let patch = serde_json::json!({
        "metadata": {"labels": labels},
        "spec": {"federationEndpoint": endpoint},
    });
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    api.patch(cluster, &params, &Patch::Merge(&patch))
        .await
        .with_context(|| {
            format!("labelling ManagedCluster {cluster} and setting its federationEndpoint")
        })?;
    Ok(())
}

/// What keeps a PrometheusFederation from being ready in a sandbox with `members`: a
/// member whose placement is not Synced, and, with `global`, a global tier that is not
/// Synced with a job for every member. Empty when it is ready.
pub fn federation_waiting(
    status: &PrometheusFederationStatus,
    members: &[String],
    global: bool,
) -> Vec<String> {
    let mut waiting: Vec<String> = members
        .iter()
        .filter_map(|cluster| {
            let placement = status.placements.iter().find(|p| &p.cluster == cluster);
            match placement {
                Some(p) if p.state == PlacementState::Synced => None,
                Some(p) => Some(format!(
                    "{cluster} is {}{}",
                    p.state,
                    p.message
                        .as_deref()
                        .map(|m| format!(" ({m})"))
                        .unwrap_or_default()
                )),
                None => Some(format!("{cluster} has no placement")),
            }
        })
        .collect();
    if global {
        let expected = i32::try_from(members.len()).unwrap_or(i32::MAX);
        match &status.global {
            Some(g) if g.state == PlacementState::Synced && g.jobs == Some(expected) => {}
            Some(g) => waiting.push(format!(
                "the global tier is {} with {} of {expected} jobs{}",
                g.state,
                g.jobs.unwrap_or(0),
                g.message
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            )),
            None => waiting.push("the global tier has no status".to_owned()),
        }
    }
    waiting
}

/// Waits until the example federation is confirmed in every member and the global tier
/// (its status), then until the global Prometheus answers [`FEDERATED_QUERY`] with series
/// from every member, so that the query `status` prints shows them at once.
async fn wait_federation_ready(
    testbed: &Testbed,
    running: &[ProcessId],
    example: &FederationExample,
    members: &[String],
    global_url: Option<&str>,
) -> Result<()> {
    let FederationExample {
        namespace, name, ..
    } = example;
    let api: Api<PrometheusFederation> = Api::namespaced(testbed.mgmt().client(), namespace);
    wait_object(
        testbed,
        running,
        &api,
        name,
        &format!("PrometheusFederation {namespace}/{name} to be Synced everywhere"),
        |p| {
            let status = p.and_then(|p| p.status).unwrap_or_default();
            ready_unless(federation_waiting(&status, members, example.global))
        },
    )
    .await?;
    progress(format!(
        "PrometheusFederation {namespace}/{name} is Synced in {}{}",
        members.join(", "),
        if example.global {
            " and the global tier"
        } else {
            ""
        }
    ));
    if let Some(url) = global_url {
        promfed::wait_for_series(
            testbed.http(),
            url,
            FEDERATED_QUERY,
            STEP_TIMEOUT,
            |samples| members_missing(samples, members).is_empty(),
        )
        .await?;
        progress(format!(
            "the global Prometheus {url} has federated series from {}",
            members.join(", ")
        ));
    }
    Ok(())
}

/// The members of which `samples` hold no series with a `tenant` label.
pub fn members_missing<'a>(samples: &[promfed::Sample], members: &'a [String]) -> Vec<&'a str> {
    members
        .iter()
        .filter(|member| {
            !samples.iter().any(|(labels, _)| {
                labels.get("cluster") == Some(*member)
                    && labels.get("tenant").is_some_and(|t| !t.is_empty())
            })
        })
        .map(String::as_str)
        .collect()
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

/// ServiceAccount [`state::CONSOLE_VIEWER`] in the hub's namespace, allowed to read every
/// Accord kind and Events, and a token of it (valid a week) in `dir`'s
/// [`state::CONSOLE_TOKEN_FILE`], readable by its owner only; returns the file.
async fn console_viewer(testbed: &Testbed, dir: &Path) -> Result<PathBuf> {
    use crate::console::{grant_cluster_wide, reader_rules, service_account_token};
    let client = testbed.mgmt().client();
    let ns = crate::hub::HUB_NAMESPACE;
    grant_cluster_wide(
        &client,
        "accord-sandbox-console-viewer",
        ns,
        state::CONSOLE_VIEWER,
        reader_rules(),
    )
    .await?;
    let token = service_account_token(&client, ns, state::CONSOLE_VIEWER).await?;
    let path = dir.join(state::CONSOLE_TOKEN_FILE);
    let mut file = std::fs::OpenOptions::new();
    file.write(true).create(true).truncate(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut file, 0o600);
    std::io::Write::write_all(&mut file.open(&path)?, token.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
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
                Ok(ready_unless(missing))
            }
        },
    )
    .await
}

/// The API resource of an example's kind (any of Accord's kinds, from its CRD) and whether
/// it is namespaced.
fn example_resource(kind: &str) -> Result<(ApiResource, bool)> {
    let crd = accord_crds::all_crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .with_context(|| format!("no API resource known for example kind {kind:?}"))?;
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.clone())
        .with_context(|| format!("the CRD of {kind} has no storage version"))?;
    let group = crd.spec.group.clone();
    Ok((
        ApiResource {
            api_version: format!("{group}/{version}"),
            group,
            version,
            kind: kind.to_owned(),
            plural: crd.spec.names.plural.clone(),
        },
        crd.spec.scope == "Namespaced",
    ))
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
    if !plan.delivered_targets.is_empty() {
        progress(format!(
            "not creating the Deployments a FederatedResource example delivers: {}",
            plan.delivered_targets
                .iter()
                .map(|(d, by)| format!("{}:{}/{} ({by})", d.cluster, d.namespace, d.name))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }

    let mgmt = testbed.mgmt();
    label_members(testbed, &plan.cluster_labels).await?;
    for ns in &plan.mgmt_namespaces {
        ensure_namespace(mgmt, ns).await?;
    }
    for secret in &plan.secrets {
        create_secret(testbed, secret).await?;
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

/// Adds `labels` to the members' ManagedClusters (a merge patch: what the agent and the
/// examples set stays), so that the examples' cluster selectors pick them.
async fn label_members(
    testbed: &Testbed,
    labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<()> {
    let api: Api<ManagedCluster> = Api::all(testbed.mgmt().client());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    for (cluster, labels) in labels {
        let patch = serde_json::json!({"metadata": {"labels": labels}});
        api.patch(cluster, &params, &Patch::Merge(&patch))
            .await
            .with_context(|| format!("labelling ManagedCluster {cluster}"))?;
        progress(format!(
            "labelled ManagedCluster {cluster} {}, as the examples' cluster selectors expect",
            labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    Ok(())
}

/// Creates Secret `secret` on the management cluster with a random value for each key.
/// The values are never printed: `kubectl get secret` shows them to whoever needs them.
async fn create_secret(testbed: &Testbed, secret: &NeededSecret) -> Result<()> {
    use rand::Rng as _;
    let data: BTreeMap<&str, String> = secret
        .keys
        .iter()
        .map(|key| {
            let value: String = rand::rng()
                .sample_iter(rand::distr::Alphanumeric)
                .take(SECRET_VALUE_LEN)
                .map(char::from)
                .collect();
            (key.as_str(), value)
        })
        .collect();
    let api: Api<Secret> = Api::namespaced(testbed.mgmt().client(), &secret.namespace);
    let object = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret.name},
        "stringData": data,
    });
    api.patch(
        &secret.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .with_context(|| format!("creating Secret {}/{}", secret.namespace, secret.name))?;
    progress(format!(
        "created Secret {}/{} (key {}, a random value) for the examples' secretRefs",
        secret.namespace,
        secret.name,
        secret.keys.join(", ")
    ));
    Ok(())
}

/// How one member's agent reaches its Kafka.
#[derive(Debug, Clone)]
struct MemberKafka {
    /// The listener the agent uses.
    bootstrap: String,
    /// The agent's Secret: `bootstrap.servers`, `security.protocol` and, with SASL, the
    /// mechanism, the SCRAM user, its password and the brokers' CA.
    secret: BTreeMap<String, String>,
    /// Client properties for Kafka's tools, with SASL.
    client_config: Option<PathBuf>,
}

impl MemberKafka {
    /// The Secret's `security.protocol`.
    fn protocol(&self) -> &str {
        self.secret
            .get("security.protocol")
            .map_or("PLAINTEXT", String::as_str)
    }
}

/// Each member's Kafka, in member order (none without `--with-kafka`): the testbed's
/// PLAINTEXT broker, or with `--with-kafka-sasl` a broker started here that also listens for
/// SASL_SSL with a SCRAM-SHA-512 user, whose client properties (user, password, CA) are
/// written into the sandbox directory for Kafka's tools.
async fn member_kafkas(options: &DaemonOptions, testbed: &Testbed) -> Result<Vec<MemberKafka>> {
    if !options.kafka {
        return Ok(Vec::new());
    }
    if !options.kafka_sasl {
        return testbed
            .members()
            .iter()
            .map(|member| {
                let bootstrap = member
                    .kafka_bootstrap()
                    .with_context(|| format!("{} has no Kafka broker", member.name()))?;
                Ok(MemberKafka {
                    bootstrap: bootstrap.to_owned(),
                    secret: BTreeMap::from([
                        ("bootstrap.servers".to_owned(), bootstrap.to_owned()),
                        ("security.protocol".to_owned(), "PLAINTEXT".to_owned()),
                    ]),
                    client_config: None,
                })
            })
            .collect();
    }
    progress("starting a Kafka broker with a SASL_SSL listener (SCRAM-SHA-512) in each member");
    // The brokers enforce ACLs (the agents' user and the PLAINTEXT listener are super
    // users), so the FederatedKafkaUser example's ACLs mean what they say.
    let sasl = crate::kafka::ClusterOptions {
        shape: crate::kafka::KafkaOptions {
            sasl_ssl: true,
            ..crate::kafka::KafkaOptions::default()
        },
        authorizer: true,
    };
    let clusters = try_join_all(
        (0..testbed.members().len())
            .map(|i| crate::kafka_topic_scenario::start_kafka(testbed, i, sasl)),
    )
    .await?;
    testbed
        .members()
        .iter()
        .zip(clusters)
        .map(|(member, cluster)| {
            let name = member.name();
            let (Some(bootstrap), Some(properties)) = (
                cluster.sasl_ssl_bootstrap.clone(),
                cluster.tool_sasl_properties(None),
            ) else {
                bail!("the Kafka of {name} has no SASL_SSL listener");
            };
            let client_config = options.dir.join(format!("{name}-kafka.properties"));
            std::fs::write(&client_config, properties)
                .with_context(|| format!("writing {}", client_config.display()))?;
            Ok(MemberKafka {
                bootstrap,
                secret: cluster.secret_data(true),
                client_config: Some(client_config),
            })
        })
        .collect()
}

/// Gives every member's agent its Kafka connection: Secret
/// [`KAFKA_SECRET`](crate::kafka_topic_scenario::KAFKA_SECRET) in the agent's namespace, pointing
/// at the member's broker.
async fn write_kafka_secrets(testbed: &Testbed, kafkas: &[MemberKafka]) -> Result<()> {
    let mut written = Vec::new();
    for (i, (member, kafka)) in testbed.members().iter().zip(kafkas).enumerate() {
        crate::kafka_topic_scenario::write_secret(testbed, i, &kafka.secret).await?;
        written.push(format!(
            "{} → {} ({})",
            member.name(),
            kafka.bootstrap,
            kafka.protocol()
        ));
    }
    progress(format!(
        "wrote the agents' Kafka Secret {}/{}: {}",
        crate::fleet::AGENT_NAMESPACE,
        crate::kafka_topic_scenario::KAFKA_SECRET,
        written.join(", ")
    ));
    Ok(())
}

/// Ready when every cluster of `expected` has a `Synced` placement among `placements`
/// (cluster, state, message); else which are not, and why.
fn all_synced<'a>(
    expected: impl IntoIterator<Item = &'a str>,
    placements: &[(&str, PlacementState, Option<&str>)],
) -> Check<()> {
    let waiting: Vec<String> = expected
        .into_iter()
        .filter_map(|cluster| match placements.iter().find(|p| p.0 == cluster) {
            Some((_, PlacementState::Synced, _)) => None,
            Some((_, state, message)) => Some(format!(
                "{cluster} is {state}{}",
                message.map(|m| format!(" ({m})")).unwrap_or_default()
            )),
            None => Some(format!("{cluster} has no placement")),
        })
        .collect();
    ready_unless(waiting)
}

/// Ready when nothing is `waiting`; otherwise not yet, saying what is.
fn ready_unless(waiting: Vec<String>) -> Check<()> {
    if waiting.is_empty() {
        Check::Ready(())
    } else {
        Check::NotYet(waiting.join(", "))
    }
}

/// Waits until `check` passes on object `name` of `api` (`None` while it does not exist),
/// every sandbox process still running.
async fn wait_object<K>(
    testbed: &Testbed,
    running: &[ProcessId],
    api: &Api<K>,
    name: &str,
    what: &str,
    check: impl Fn(Option<K>) -> Check<()>,
) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    until(what, STEP_TIMEOUT, || async {
        ensure_all_running(testbed, running)?;
        Ok(check(api.get_opt(name).await?))
    })
    .await
}

/// Waits until every placement of the example FederatedKafkaTopics is Synced.
async fn wait_topics_synced(testbed: &Testbed, running: &[ProcessId], plan: &Plan) -> Result<()> {
    wait_placements_synced::<FederatedKafkaTopic>(testbed, running, &plan.topics, |t| {
        t.status
            .map(|s| {
                s.placements
                    .into_iter()
                    .map(|p| (p.cluster, p.state, p.message))
                    .collect()
            })
            .unwrap_or_default()
    })
    .await?;
    wait_placements_synced::<FederatedKafkaUser>(testbed, running, &plan.users, |u| {
        u.status
            .map(|s| {
                s.placements
                    .into_iter()
                    .map(|p| (p.cluster, p.state, p.message))
                    .collect()
            })
            .unwrap_or_default()
    })
    .await
}

/// Each placement of an object as (cluster, state, message).
type Placements = Vec<(String, PlacementState, Option<String>)>;

/// Waits until every placement of each object `(namespace, name, clusters)` of kind `K`
/// is Synced in its clusters; `placements` reads (cluster, state, message) from one.
async fn wait_placements_synced<K>(
    testbed: &Testbed,
    running: &[ProcessId],
    objects: &[(String, String, Vec<String>)],
    placements: fn(K) -> Placements,
) -> Result<()>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let kind = K::kind(&());
    for (ns, name, clusters) in objects {
        let api: Api<K> = Api::namespaced(testbed.mgmt().client(), ns);
        wait_object(
            testbed,
            running,
            &api,
            name,
            &format!("{kind} {ns}/{name} to be Synced everywhere"),
            |o| {
                let shown = o.map(placements).unwrap_or_default();
                let seen: Vec<_> = shown
                    .iter()
                    .map(|(cluster, state, message)| (cluster.as_str(), *state, message.as_deref()))
                    .collect();
                all_synced(clusters.iter().map(String::as_str), &seen)
            },
        )
        .await?;
        progress(format!(
            "{kind} {ns}/{name} is Synced in {}",
            clusters.join(", ")
        ));
    }
    Ok(())
}

/// What keeps a FederatedResource from being Available in each of `clusters`: a cluster
/// without a placement, one not Synced, one with a manifest not healthy; and the
/// `Available` condition not True. Empty when it is Available everywhere.
pub fn resource_waiting(status: &FederatedResourceStatus, clusters: &[String]) -> Vec<String> {
    let mut waiting: Vec<String> = clusters
        .iter()
        .filter_map(|cluster| {
            let placement = status.placements.iter().find(|p| &p.cluster == cluster);
            match placement {
                None => Some(format!("{cluster} has no placement")),
                Some(p) if p.state != PlacementState::Synced => Some(format!(
                    "{cluster} is {}{}",
                    p.state,
                    p.message
                        .as_deref()
                        .map(|m| format!(" ({m})"))
                        .unwrap_or_default()
                )),
                Some(p) if p.applied.is_none() || p.available != p.applied => {
                    let unhealthy: Vec<String> = p
                        .manifests
                        .iter()
                        .filter(|m| m.health != accord_common::distribution::health::HEALTHY)
                        .map(|m| format!("{} {} {}", m.kind, m.name, m.health))
                        .collect();
                    Some(format!(
                        "{cluster} has {} of {} manifests healthy{}",
                        p.available.unwrap_or(0),
                        p.applied.unwrap_or(0),
                        if unhealthy.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", unhealthy.join(", "))
                        }
                    ))
                }
                Some(_) => None,
            }
        })
        .collect();
    if waiting.is_empty()
        && !conditions::is_true(
            &status.conditions,
            accord_hub::federated_resource::status::AVAILABLE,
        )
    {
        waiting.push("the Available condition is not True yet".to_owned());
    }
    waiting
}

/// Waits until every FederatedResource example is Available in every member it delivers
/// to.
async fn wait_resources_available(
    testbed: &Testbed,
    running: &[ProcessId],
    plan: &Plan,
) -> Result<()> {
    for ResourceExample {
        namespace,
        name,
        clusters,
    } in &plan.resources
    {
        let api: Api<FederatedResource> = Api::namespaced(testbed.mgmt().client(), namespace);
        wait_object(
            testbed,
            running,
            &api,
            name,
            &format!("FederatedResource {namespace}/{name} to be Available everywhere"),
            |r| {
                let status = r.and_then(|r| r.status).unwrap_or_default();
                ready_unless(resource_waiting(&status, clusters))
            },
        )
        .await?;
        progress(format!(
            "FederatedResource {namespace}/{name} is Available in {}",
            clusters.join(", ")
        ));
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
        wait_object(
            testbed,
            running,
            &api,
            name,
            &format!("CrossClusterScalePolicy {ns}/{name} to be Synced everywhere"),
            |p| {
                let placements = p
                    .and_then(|p| p.status)
                    .map(|s| s.placements)
                    .unwrap_or_default();
                let seen: Vec<_> = placements
                    .iter()
                    .map(|p| (p.cluster.as_str(), p.state, None))
                    .collect();
                all_synced(expected.iter().copied(), &seen)
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
    fn every_kind_of_ours_has_its_api_resource_for_the_examples() {
        for crd in accord_crds::all_crds() {
            let kind = crd.spec.names.kind.clone();
            let (resource, namespaced) = example_resource(&kind).unwrap();
            assert_eq!(resource.group, "accord.io", "{kind}");
            assert_eq!(resource.plural, crd.spec.names.plural, "{kind}");
            assert_eq!(
                namespaced,
                kind != "ManagedCluster" && kind != "KafkaTopicPolicy"
            );
        }
        assert!(example_resource("Deployment").is_err());
    }

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

    fn placement(
        cluster: &str,
        state: PlacementState,
    ) -> accord_crds::promfed::FederationPlacement {
        serde_json::from_value(serde_json::json!({
            "cluster": cluster,
            "state": state.as_str(),
            "message": "detail",
        }))
        .unwrap()
    }

    fn global(state: PlacementState, jobs: i32) -> Option<accord_crds::promfed::GlobalTierStatus> {
        serde_json::from_value(serde_json::json!({"state": state.as_str(), "jobs": jobs})).unwrap()
    }

    #[test]
    fn a_federation_is_ready_once_every_member_and_the_global_tier_with_every_job_are_synced() {
        let members = vec!["member-1".to_owned(), "member-2".to_owned()];
        let mut status = PrometheusFederationStatus {
            placements: vec![
                placement("member-1", PlacementState::Synced),
                placement("member-2", PlacementState::Pending),
            ],
            ..PrometheusFederationStatus::default()
        };
        assert_eq!(
            federation_waiting(&status, &members, true),
            [
                "member-2 is Pending (detail)",
                "the global tier has no status"
            ]
        );
        assert_eq!(
            federation_waiting(&status, &members, false),
            ["member-2 is Pending (detail)"]
        );
        status.placements[1] = placement("member-2", PlacementState::Synced);
        status.global = global(PlacementState::Synced, 1);
        assert_eq!(
            federation_waiting(&status, &members, true),
            ["the global tier is Synced with 1 of 2 jobs"],
            "a member left out of the global tier is waited for"
        );
        status.global = global(PlacementState::Synced, 2);
        assert!(federation_waiting(&status, &members, true).is_empty());
        status.placements.pop();
        assert_eq!(
            federation_waiting(&status, &members, true),
            ["member-2 has no placement"]
        );
    }

    #[test]
    fn a_member_counts_as_federated_only_with_tenant_labelled_series() {
        let members = vec!["member-1".to_owned(), "member-2".to_owned()];
        let sample = |cluster: &str, tenant: &str| -> promfed::Sample {
            (
                [
                    ("cluster".to_owned(), cluster.to_owned()),
                    ("tenant".to_owned(), tenant.to_owned()),
                ]
                .into(),
                3.0,
            )
        };
        assert_eq!(members_missing(&[], &members), ["member-1", "member-2"]);
        assert_eq!(
            members_missing(
                &[sample("member-1", "team-a"), sample("member-2", "")],
                &members
            ),
            ["member-2"]
        );
        assert!(
            members_missing(
                &[sample("member-1", "team-a"), sample("member-2", "team-a")],
                &members
            )
            .is_empty()
        );
    }

    #[test]
    fn member_reloaders_get_only_the_manifests_service_account_and_config_map_role() {
        let (objects, user) = reloader_rbac("observability").unwrap();
        let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            ["Namespace", "ServiceAccount", "Role", "RoleBinding"]
        );
        assert_eq!(
            user,
            "system:serviceaccount:observability:prometheus-federation"
        );
        assert_eq!(objects[0]["metadata"]["name"], "observability");
        for object in &objects[1..] {
            assert_eq!(object["metadata"]["namespace"], "observability", "{object}");
        }
        assert_eq!(objects[3]["subjects"][0]["namespace"], "observability");
        for object in &objects[..3] {
            assert!(object.get("subjects").is_none(), "{object}");
        }
        assert_eq!(
            objects[2]["rules"],
            serde_json::json!([{
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [accord_common::promfed::CONFIG_MAP_NAME],
                "verbs": ["get", "list", "watch", "patch"],
            }])
        );
    }

    #[test]
    fn a_federated_resource_is_ready_once_every_member_is_synced_and_healthy_and_available() {
        let members = vec!["member-1".to_owned(), "member-2".to_owned()];
        let status = |placements: serde_json::Value, available: &str| -> FederatedResourceStatus {
            serde_json::from_value(serde_json::json!({
                "placements": placements,
                "conditions": [{"type": "Available", "status": available, "reason": "R",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            }))
            .unwrap()
        };
        let synced = |cluster: &str, available: i32| {
            serde_json::json!({"cluster": cluster, "state": "Synced", "applied": 6,
                "available": available})
        };
        let waiting = status(
            serde_json::json!([
                synced("member-1", 5),
                {"cluster": "member-2", "state": "Conflict", "message": "exists"},
            ]),
            "False",
        );
        assert_eq!(
            resource_waiting(&waiting, &members),
            [
                "member-1 has 5 of 6 manifests healthy",
                "member-2 is Conflict (exists)"
            ]
        );
        let mut progressing = status(serde_json::json!([synced("member-1", 5)]), "False");
        progressing.placements[0].manifests = serde_json::from_value(serde_json::json!([
            {"kind": "StatefulSet", "name": "mysql", "state": "Synced", "health": "Progressing"},
            {"kind": "Service", "name": "mysql", "state": "Synced", "health": "Healthy"},
        ]))
        .unwrap();
        assert_eq!(
            resource_waiting(&progressing, &members),
            [
                "member-1 has 5 of 6 manifests healthy (StatefulSet mysql Progressing)",
                "member-2 has no placement"
            ]
        );
        let healthy = serde_json::json!([synced("member-1", 6), synced("member-2", 6)]);
        assert_eq!(
            resource_waiting(&status(healthy.clone(), "False"), &members),
            ["the Available condition is not True yet"]
        );
        assert!(resource_waiting(&status(healthy, "True"), &members).is_empty());
    }
}
