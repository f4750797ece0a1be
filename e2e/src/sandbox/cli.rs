//! Command line of `accord-sandbox`: `up`, `status`, `down`, and the hidden daemon.

use accord_crds::duration::parse_flag;
use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use clap::{Args, Parser, Subcommand};
use nix::sys::signal::Signal;

use super::daemon::{self, DaemonOptions, PROGRESS};
use super::procs::{self, DAEMON_SUBCOMMAND};
use super::state::{self, LOG_FILE, State};
use super::status;
use crate::binaries::{BIN_DIR_ENV, Binaries};
use crate::testbed::MGMT;

/// A local Accord federation: a management cluster with the hub, member clusters with
/// joined agents, and the example policies.
#[derive(Debug, Parser)]
#[command(name = "accord-sandbox", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: SandboxCommand,
}

/// Subcommands of `accord-sandbox`.
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Start a sandbox in the background and return once it is ready.
    Up(UpArgs),
    /// Report the daemon, the hub, each member and the examples' state in each member.
    Status(StatusArgs),
    /// Stop everything the sandbox started.
    Down(DirArgs),
    /// The background process `up` starts (internal).
    #[command(name = DAEMON_SUBCOMMAND, hide = true)]
    Daemon(DaemonArgs),
}

/// The sandbox directory.
#[derive(Debug, Clone, Args)]
pub struct DirArgs {
    /// Directory of the sandbox: kubeconfigs, state.json, sandbox.log.
    #[arg(long, default_value = ".accord-sandbox")]
    pub dir: PathBuf,
}

/// Flags of `up`.
#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Number of member clusters, named member-1 … member-N.
    #[arg(long, default_value_t = 2, conflicts_with = "member_names")]
    members: usize,
    /// Names of the member clusters, comma-separated (instead of --members).
    #[arg(long, value_delimiter = ',')]
    member_names: Vec<String>,
    /// Run a Kafka broker in each member and apply the Kafka examples.
    #[arg(long)]
    with_kafka: bool,
    /// Like --with-kafka, but each broker also listens for SASL_SSL with a SCRAM-SHA-512
    /// user, and each agent's Kafka Secret uses that listener (user, password and the
    /// brokers' CA); the client properties for Kafka's tools go into the sandbox directory.
    #[arg(long)]
    with_kafka_sasl: bool,
    /// Run Prometheus servers and apply the Prometheus examples: in each member one for
    /// the autoscaling example, and for the example PrometheusFederation a tenant
    /// Prometheus and a federation Prometheus with its reloader; on the management side the
    /// global Prometheus federating every member.
    #[arg(long)]
    with_prometheus: bool,
    /// Run Jaeger (built by the testbed from its Go module) and point the hub and every
    /// agent at it (`--otlp-endpoint`): each change gets a trace, found by the object's
    /// `status.traceID`.
    #[arg(long)]
    with_tracing: bool,
    /// How long to wait for the sandbox to become ready (testbed build not included).
    #[arg(long, default_value = "10m", value_parser = parse_flag)]
    timeout: Duration,
}

/// Flags of `status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Flags of the daemon.
#[derive(Debug, Clone, Args)]
pub struct DaemonArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long, value_delimiter = ',', required = true)]
    member_names: Vec<String>,
    #[arg(long)]
    with_kafka: bool,
    #[arg(long)]
    with_kafka_sasl: bool,
    #[arg(long)]
    with_prometheus: bool,
    #[arg(long)]
    with_tracing: bool,
    #[arg(long)]
    hub_bin: PathBuf,
    #[arg(long)]
    agent_bin: PathBuf,
}

/// Parses arguments and runs the command; the binary's whole `main`.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let SandboxCommand::Daemon(args) = cli.command {
        return run_daemon(args);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            SandboxCommand::Up(args) => up(args).await,
            SandboxCommand::Status(args) => status_command(args).await,
            SandboxCommand::Down(args) => down(&args.dir),
            SandboxCommand::Daemon(_) => unreachable!("handled above"),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_daemon(args: DaemonArgs) -> ExitCode {
    // A session of its own: no terminal signals reach it, and every process it starts
    // can be found by session id.
    if let Err(e) = nix::unistd::setsid() {
        eprintln!("warning: setsid failed ({e}); the daemon stays in the caller's session");
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn,tower=warn,h2=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let options = DaemonOptions {
        dir: args.dir,
        members: args.member_names,
        kafka: args.with_kafka || args.with_kafka_sasl,
        kafka_sasl: args.with_kafka_sasl,
        prometheus: args.with_prometheus,
        tracing: args.with_tracing,
        hub_bin: args.hub_bin,
        agent_bin: args.agent_bin,
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            daemon::progress(format!("cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(daemon::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The member names `up` was given, checked.
fn member_names(args: &UpArgs) -> Result<Vec<String>> {
    let names: Vec<String> = if args.member_names.is_empty() {
        ensure!(args.members >= 1, "--members must be at least 1");
        (1..=args.members).map(|i| format!("member-{i}")).collect()
    } else {
        args.member_names
            .iter()
            .map(|n| n.trim().to_owned())
            .collect()
    };
    for (i, name) in names.iter().enumerate() {
        ensure!(
            accord_crds::validate::is_dns1123_label(name),
            "invalid member name {name:?}: use lower-case letters, digits and '-', starting \
             and ending with a letter or digit, at most 63 characters"
        );
        ensure!(
            name != MGMT,
            "a member cannot be named {MGMT:?}: that is the management cluster"
        );
        ensure!(
            !names[..i].contains(name),
            "member name {name:?} is given twice"
        );
    }
    Ok(names)
}

/// Creates `dir` if needed and returns its absolute path.
fn sandbox_dir(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    dir.canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))
}

/// An existing directory's absolute path, or the path as given.
fn existing_dir(dir: &Path) -> PathBuf {
    dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf())
}

/// The testbed's bin directory, running `e2e/testbed/build.sh` if it is not known.
fn testbed_bin() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV) {
        return Ok(PathBuf::from(dir));
    }
    eprintln!(
        "checking the testbed binaries (e2e/testbed/build.sh; the first run builds etcd, \
         Kubernetes and kwok from source, about 10 minutes, then they are cached)"
    );
    let binaries = Binaries::locate()?;
    binaries
        .kubectl
        .parent()
        .map(Path::to_path_buf)
        .context("kubectl without a directory")
}

/// `accord-hub` or `accord-agent`: built with cargo when run from a checkout, else the
/// one next to this executable.
fn accord_program(name: &str) -> Result<PathBuf> {
    match crate::hub::accord_binary(name) {
        Ok(path) => Ok(path),
        Err(e) => {
            let sibling = std::env::current_exe()?
                .parent()
                .map(|d| d.join(name))
                .filter(|p| p.is_file());
            match sibling {
                Some(path) => {
                    eprintln!(
                        "warning: could not build {name} ({e:#}); using {}",
                        path.display()
                    );
                    Ok(path)
                }
                None => Err(e),
            }
        }
    }
}

async fn up(args: UpArgs) -> Result<ExitCode> {
    let started = Instant::now();
    let names = member_names(&args)?;
    let dir = sandbox_dir(&args.dir.dir)?;
    if let Some(existing) = state::read(&dir)? {
        if procs::is_daemon(existing.pid) {
            println!("a sandbox is already running in {}", dir.display());
            print!("{}", status::render(&status::gather(&dir).await?));
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!(
            "removing the state of a sandbox that is no longer running (pid {})",
            existing.pid
        );
        stop_session(existing.pid, Duration::from_secs(10));
        state::remove(&dir)?;
    }

    let checking = Instant::now();
    let bin = tokio::task::spawn_blocking(testbed_bin).await??;
    eprintln!("  testbed binaries ready in {:.1?}", checking.elapsed());
    eprintln!("building accord-hub and accord-agent (cargo build)");
    let building = Instant::now();
    let (hub_bin, agent_bin) = tokio::task::spawn_blocking(|| {
        anyhow::Ok((
            accord_program("accord-hub")?,
            accord_program("accord-agent")?,
        ))
    })
    .await??;
    eprintln!("  built in {:.1?}", building.elapsed());

    let log_path = dir.join(LOG_FILE);
    let log =
        File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let mut daemon = Command::new(std::env::current_exe().context("locating accord-sandbox")?);
    daemon
        .arg(DAEMON_SUBCOMMAND)
        .arg("--dir")
        .arg(&dir)
        .arg("--member-names")
        .arg(names.join(","))
        .arg("--hub-bin")
        .arg(&hub_bin)
        .arg("--agent-bin")
        .arg(&agent_bin)
        .env(BIN_DIR_ENV, &bin)
        // The testbed's own directory (data, component logs) goes inside the sandbox's.
        .env("TMPDIR", &dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    if args.with_kafka {
        daemon.arg("--with-kafka");
    }
    if args.with_kafka_sasl {
        daemon.arg("--with-kafka-sasl");
    }
    if args.with_prometheus {
        daemon.arg("--with-prometheus");
    }
    if args.with_tracing {
        daemon.arg("--with-tracing");
    }
    let mut child = daemon.spawn().context("starting the sandbox daemon")?;
    eprintln!(
        "started the sandbox daemon (pid {}); log: {}",
        child.id(),
        log_path.display()
    );

    let ready = follow(&log_path, &dir, &mut child, args.timeout)?;
    println!("{}", summary(&ready, &bin, started.elapsed()));
    Ok(ExitCode::SUCCESS)
}

/// Relays the daemon's progress until it is ready; fails with the log's tail if it exits
/// or the timeout passes (then stopping it).
fn follow(
    log_path: &Path,
    dir: &Path,
    child: &mut std::process::Child,
    timeout: Duration,
) -> Result<State> {
    let deadline = Instant::now() + timeout;
    let mut log = File::open(log_path)?;
    let mut offset = 0u64;
    let mut pending = String::new();
    loop {
        log.seek(SeekFrom::Start(offset))?;
        let mut fresh = String::new();
        offset += log.read_to_string(&mut fresh)? as u64;
        pending.push_str(&fresh);
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            if let Some(message) = line.trim_end().strip_prefix(PROGRESS) {
                eprintln!("  {message}");
            }
        }
        if let Some(state) = state::read(dir)?
            && state.pid == child.id()
            && state.ready
        {
            return Ok(state);
        }
        if let Some(status) = child.try_wait()? {
            if status.success() {
                bail!(
                    "the sandbox was stopped (accord-sandbox down) before it was ready; \
                     log: {}",
                    log_path.display()
                );
            }
            bail!(
                "the sandbox daemon exited ({status}) before it was ready; last lines of {}:\n{}",
                log_path.display(),
                crate::process::tail(log_path, 40)
            );
        }
        if Instant::now() >= deadline {
            let pid = child.id();
            stop_session(pid, Duration::from_secs(30));
            let _ = child.wait();
            let _ = state::remove(dir);
            bail!(
                "the sandbox was not ready within {timeout:?} and was stopped; last lines of \
                 {}:\n{}",
                log_path.display(),
                crate::process::tail(log_path, 40)
            );
        }
        // The log is a plain file: nothing announces new lines, so look again shortly.
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What `up` prints once the sandbox is ready.
fn summary(state: &State, bin: &Path, took: Duration) -> String {
    let mgmt = state.mgmt_kubeconfig.display().to_string();
    let kubectl = if on_path("kubectl") {
        "kubectl".to_owned()
    } else {
        bin.join("kubectl").display().to_string()
    };
    let mut out = format!(
        "\nAccord sandbox ready in {took:.1?} ({}).\n\n",
        state.dir.display()
    );
    out.push_str(&format!(
        "  hub          {} (gRPC), {} (metrics)\n",
        state.hub_grpc_url, state.hub_http_url
    ));
    out.push_str(&format!(
        "  webhook      {} (the API server calls the hub here)\n",
        state.hub_webhook_url
    ));
    out.push_str(&format!("  hub etcd     {}\n", state.hub_etcd));
    if let Some(console) = &state.console_url {
        let token = state
            .console_token_file
            .as_ref()
            .map(|f| {
                format!(
                    " (sign in with the token in {}; `status` prints it)",
                    f.display()
                )
            })
            .unwrap_or_default();
        out.push_str(&format!("  console      {console}{token}\n"));
    }
    out.push_str(&format!(
        "               {}\n",
        status::IN_CLUSTER_SERVICES_NOTE
    ));
    out.push_str(&format!("  mgmt         {mgmt}\n"));
    for m in &state.members {
        out.push_str(&format!("  {:<12} {}\n", m.name, m.kubeconfig.display()));
        if let Some(kafka) = &m.kafka_bootstrap {
            out.push_str(&format!(
                "  {:<12} Kafka {kafka}{}\n",
                "",
                status::kafka_detail(
                    m.kafka_protocol.as_deref(),
                    m.kafka_client_config.as_deref()
                )
            ));
        }
        if let Some(prometheus) = &m.prometheus_url {
            out.push_str(&format!("  {:<12} Prometheus {prometheus}\n", ""));
        }
        if let Some(federation) = &m.federation_url {
            out.push_str(&format!(
                "  {:<12} federation Prometheus {federation}\n",
                ""
            ));
        }
    }
    if let Some(global) = &state.global_prometheus_url {
        out.push_str(&format!("  {:<12} Prometheus {global}\n", "global"));
    }
    if let Some(jaeger) = &state.jaeger_url {
        out.push_str(&format!(
            "  jaeger       {jaeger} (traces: {jaeger}/api/traces/<status.traceID>)\n"
        ));
    }
    out.push_str(&format!(
        "  logs         {} and {}\n",
        state.dir.join(LOG_FILE).display(),
        state.testbed_dir.join("logs").display()
    ));
    out.push_str("\nTry:\n");
    let k = |kubeconfig: &str| format!("{kubectl} --kubeconfig {kubeconfig}");
    out.push_str(&format!("  {} get accord\n", k(&mgmt)));
    out.push_str(&format!("  {} get mcl\n", k(&mgmt)));
    let policy = "webapp-global-scale";
    if state.examples.iter().any(|e| e.ends_with(policy)) {
        out.push_str(&format!("  {} describe ccsp {policy}\n", k(&mgmt)));
        if let Some(first) = state.members.first() {
            let member = first.kubeconfig.display().to_string();
            out.push_str(&format!(
                "  {} get deploy -A -l app=frontend -w     # in another terminal\n",
                k(&member)
            ));
        }
        out.push_str(&format!(
            "  {} patch ccsp {policy} --type merge -p '{{\"spec\":{{\"desiredReplicas\":20}}}}'\n",
            k(&mgmt)
        ));
    }
    let autoscaled = "checkout-autoscaled";
    if let Some(example) = state.examples.iter().find(|e| e.ends_with(autoscaled)) {
        let ns = example.rsplit_once('/').map_or("default", |(head, _)| {
            head.rsplit(' ').next().unwrap_or("default")
        });
        out.push_str(&format!(
            "  {} -n {ns} get ccsp {autoscaled} -o jsonpath='{{.status.autoscaling}}'   # metric-driven\n",
            k(&mgmt)
        ));
    }
    if let Some(example) = state
        .examples
        .iter()
        .find_map(|e| e.strip_prefix("FederatedKafkaTopic "))
    {
        let (ns, name) = example.split_once('/').unwrap_or(("default", example));
        out.push_str(&format!(
            "  {} -n {ns} get fkt {name} -o jsonpath='{{.status.placements}}'\n",
            k(&mgmt)
        ));
    }
    let resources: Vec<(&str, &str)> = state
        .examples
        .iter()
        .filter_map(|e| e.strip_prefix("FederatedResource "))
        .map(|e| e.split_once('/').unwrap_or(("default", e)))
        .collect();
    if !resources.is_empty() {
        out.push_str(&format!("  {} get fres -A\n", k(&mgmt)));
    }
    for (ns, name) in resources {
        out.push_str(&format!("  {} -n {ns} describe fres {name}\n", k(&mgmt)));
    }
    if let Some(global) = &state.global_prometheus_url {
        out.push_str(&format!(
            "  {}   # federated series of every member\n",
            status::query_command(global, status::FEDERATED_QUERY)
        ));
        if let Some(example) = state
            .examples
            .iter()
            .find_map(|e| e.strip_prefix("PrometheusFederation "))
        {
            let (ns, name) = example.split_once('/').unwrap_or(("default", example));
            out.push_str(&format!("  {} -n {ns} get pfed {name}\n", k(&mgmt)));
        }
    }
    // How the user started us, when a wrapper script says (e2e/sandbox.sh does).
    let sandbox = if let Ok(command) = std::env::var("ACCORD_SANDBOX_COMMAND") {
        command
    } else if on_path("accord-sandbox") {
        "accord-sandbox".to_owned()
    } else {
        std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "accord-sandbox".to_owned())
    };
    let dir_flag = if is_default_dir(&state.dir) {
        String::new()
    } else {
        format!(" --dir {}", state.dir.display())
    };
    out.push('\n');
    for command in ["status", "down"] {
        out.push_str(&format!("  {sandbox} {command}{dir_flag}\n"));
    }
    out
}

fn is_default_dir(dir: &Path) -> bool {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| cwd.join(".accord-sandbox").canonicalize().ok())
        .is_some_and(|default| default == dir)
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

async fn status_command(args: StatusArgs) -> Result<ExitCode> {
    let dir = existing_dir(&args.dir.dir);
    let report = status::gather(&dir).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", status::render(&report));
    }
    Ok(if report.running {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// SIGTERM to the daemon, then waits for its whole session to go; SIGKILLs what is left
/// after `grace`. Returns how many processes the session held.
fn stop_session(pid: u32, grace: Duration) -> usize {
    if procs::alive(pid) && !procs::is_daemon(pid) {
        // The daemon is gone and its pid now belongs to another program: whatever runs in
        // a session of that id is not the sandbox's.
        return 0;
    }
    let members = procs::session_members(pid).len();
    if procs::is_daemon(pid) {
        let _ = procs::signal(pid, Signal::SIGTERM);
    }
    if !procs::wait_for(grace, || procs::session_members(pid).is_empty()) {
        procs::kill_session(pid);
        procs::wait_for(Duration::from_secs(10), || {
            procs::session_members(pid).is_empty()
        });
    }
    members
}

fn down(dir: &Path) -> Result<ExitCode> {
    let dir = existing_dir(dir);
    let Some(state) = state::read(&dir)? else {
        println!("no sandbox in {}; nothing to stop", dir.display());
        return Ok(ExitCode::SUCCESS);
    };
    let started = Instant::now();
    let was_running = procs::is_daemon(state.pid);
    let count = stop_session(state.pid, Duration::from_secs(60));
    let left = procs::session_members(state.pid);
    ensure!(
        left.is_empty(),
        "processes of the sandbox survived SIGKILL: {left:?}"
    );
    state::remove(&dir)?;
    if was_running {
        println!(
            "stopped the sandbox in {} ({count} processes) in {:.1?}",
            dir.display(),
            started.elapsed()
        );
    } else {
        println!(
            "the sandbox in {} was no longer running; removed its state",
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up_args(members: usize, names: &[&str]) -> UpArgs {
        UpArgs {
            dir: DirArgs {
                dir: ".accord-sandbox".into(),
            },
            members,
            member_names: names.iter().map(|s| (*s).to_owned()).collect(),
            with_kafka: false,
            with_kafka_sasl: false,
            with_prometheus: false,
            with_tracing: false,
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn members_are_numbered_unless_named() {
        assert_eq!(
            member_names(&up_args(3, &[])).unwrap(),
            ["member-1", "member-2", "member-3"]
        );
        assert_eq!(
            member_names(&up_args(2, &["us", "eu"])).unwrap(),
            ["us", "eu"]
        );
    }

    #[test]
    fn bad_member_names_are_refused_with_the_reason() {
        for (names, expected) in [
            (&["Us"][..], "invalid member name"),
            (&["mgmt"][..], "management cluster"),
            (&["a", "a"][..], "given twice"),
        ] {
            let err = member_names(&up_args(2, names)).unwrap_err().to_string();
            assert!(err.contains(expected), "{names:?}: {err}");
        }
        let err = member_names(&up_args(0, &[])).unwrap_err().to_string();
        assert!(err.contains("at least 1"), "{err}");
    }

    #[test]
    fn the_cli_parses() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }
}
