//! Accord installed the way its documentation says: `accord-hub install` on the
//! management cluster, the hub running under the installed ServiceAccount, and members
//! joined with `accord-agent join`. The testbed's clusters have no kubelet, so the hub and
//! agents run as local processes with exactly the permissions their ServiceAccounts were
//! given (through impersonation), which also proves those permissions suffice.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use accord_crds::{ManagedCluster, conditions};
use anyhow::{Context as _, Result, ensure};
use kube::Api;

use crate::hub::{HUB_NAMESPACE, accord_binary};
use crate::ports::free_port;
use crate::wait::{Check, until};
use crate::{Cluster, ProcessId, Testbed};

/// The hub's ServiceAccount as the API server names it.
pub const HUB_SERVICE_ACCOUNT: &str = "system:serviceaccount:accord-system:accord-hub";
/// The agent's ServiceAccount as the API server names it.
pub const AGENT_SERVICE_ACCOUNT: &str = "system:serviceaccount:accord-system:accord-agent";
/// The groups every ServiceAccount of `accord-system` is in.
pub const SERVICE_ACCOUNT_GROUPS: [&str; 3] = [
    "system:serviceaccounts",
    "system:serviceaccounts:accord-system",
    "system:authenticated",
];

/// The value after `flag` in a printed command line.
pub fn flag_value(line: &str, flag: &str) -> Result<String> {
    let mut words = line.split_whitespace();
    words
        .find(|w| *w == flag)
        .with_context(|| format!("no {flag} in {line:?}"))?;
    words
        .next()
        .map(str::to_owned)
        .with_context(|| format!("{flag} without a value"))
}

/// The line of `text` that starts (after indentation) with `accord-agent join`.
pub fn join_line(text: &str) -> Result<String> {
    text.lines()
        .map(str::trim)
        .find(|l| l.starts_with("accord-agent join "))
        .map(str::to_owned)
        .with_context(|| format!("no join command in:\n{text}"))
}

/// A copy of `cluster`'s admin kubeconfig that impersonates `user` (in `groups`), written
/// into the testbed directory.
pub fn impersonating_kubeconfig(
    testbed: &Testbed,
    cluster: &Cluster,
    user: &str,
    groups: &[&str],
) -> Result<PathBuf> {
    let admin = std::fs::read_to_string(cluster.kubeconfig_path())?;
    let groups = groups
        .iter()
        .map(|g| format!("{g:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let marker = "  user:\n";
    ensure!(admin.contains(marker), "unexpected admin kubeconfig layout");
    let impersonating = admin.replacen(
        marker,
        &format!("{marker}    as: {user:?}\n    as-groups: [{groups}]\n"),
        1,
    );
    let path = testbed.dir().join(format!(
        "{}-{}.kubeconfig",
        cluster.name(),
        user.replace(':', "-")
    ));
    std::fs::write(&path, impersonating)?;
    Ok(path)
}

/// Runs one of the workspace's binaries with `args` and collects its output.
pub async fn run_binary(name: &str, args: &[&str]) -> Result<Output> {
    run_program(&accord_binary(name)?, args).await
}

/// How long one command (install, token create, join) may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `program` with `args` (without `$KUBECONFIG` or a token from the environment) and
/// collects its output.
pub async fn run_program(program: &Path, args: &[&str]) -> Result<Output> {
    let run = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .env_remove("KUBECONFIG")
        .env_remove("ACCORD_JOIN_TOKEN")
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(COMMAND_TIMEOUT, run)
        .await
        .with_context(|| {
            format!(
                "{} did not finish within {COMMAND_TIMEOUT:?}",
                program.display()
            )
        })?
        .with_context(|| format!("running {}", program.display()))
}

/// Stdout and stderr of a finished command, for messages.
pub fn output_text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// How to install and serve a hub.
#[derive(Debug, Clone)]
pub struct HubSetup {
    /// The `accord-hub` binary.
    pub hub_bin: PathBuf,
    /// The hub's etcd key prefix.
    pub etcd_prefix: String,
    /// The serving replica's name.
    pub replica: String,
    /// Register the admission webhook at the local hub's address (`accord-hub install
    /// --webhook-url https://127.0.0.1:PORT`) instead of the Service `accord-hub`, which
    /// has no pods here: the API server then calls the hub it runs.
    pub webhook_url: bool,
    /// Further flags of `accord-hub serve` (e.g. `--otlp-endpoint`).
    pub serve_args: Vec<String>,
    /// Serve the fleet console (`--console-addr 127.0.0.1:PORT`).
    pub console: bool,
}

impl HubSetup {
    /// The workspace's `accord-hub` (built if needed) with `etcd_prefix`.
    pub fn new(etcd_prefix: &str) -> Result<Self> {
        Ok(Self {
            hub_bin: accord_binary("accord-hub")?,
            etcd_prefix: etcd_prefix.to_owned(),
            replica: "hub-as-sa".to_owned(),
            webhook_url: false,
            serve_args: Vec::new(),
            console: false,
        })
    }
}

/// A hub installed with `accord-hub install` and served as its ServiceAccount.
pub struct InstalledHub {
    /// The `serve` process.
    pub process: ProcessId,
    /// The URL members dial, `https://127.0.0.1:PORT`.
    pub url: String,
    /// HTTP base URL (`/metrics`, `/readyz`).
    pub http: String,
    /// Where the hub serves its admission webhook, `https://127.0.0.1:PORT`.
    pub webhook: String,
    /// The URL the ValidatingWebhookConfiguration names, with
    /// [`HubSetup::webhook_url`] (each webhook's path appended).
    pub webhook_url: Option<String>,
    /// The fleet console's URL, with [`HubSetup::console`].
    pub console: Option<String>,
    /// How it was set up.
    pub setup: HubSetup,
    /// What install printed on stdout (it ends with a join command).
    pub install_output: String,
}

impl InstalledHub {
    /// `accord-hub install --kubeconfig MGMT --etcd-endpoints E --etcd-prefix P --hub-url
    /// https://127.0.0.1:PORT`, then `accord-hub serve` under the installed ServiceAccount on
    /// that port; returns once the hub is ready.
    pub async fn install(testbed: &Testbed, etcd_prefix: &str) -> Result<Self> {
        Self::install_with(testbed, HubSetup::new(etcd_prefix)?).await
    }

    /// [`InstalledHub::install`] with the binary and names of `setup`.
    pub async fn install_with(testbed: &Testbed, setup: HubSetup) -> Result<Self> {
        let etcd_prefix = setup.etcd_prefix.as_str();
        let mgmt = testbed
            .mgmt()
            .kubeconfig_path()
            .to_str()
            .context("UTF-8 path")?;
        let grpc = format!("127.0.0.1:{}", free_port()?);
        let http = format!("127.0.0.1:{}", free_port()?);
        let webhook_addr = format!("127.0.0.1:{}", free_port()?);
        let url = format!("https://{grpc}");
        let webhook = format!("https://{webhook_addr}");
        let webhook_url = setup.webhook_url.then(|| webhook.clone());
        // The hub's own etcd (TLS, a user and password), as a production install names
        // one: its credentials go into Secret accord-hub-etcd.
        let etcd = testbed.hub_etcd().hub_args();
        let mut install = vec!["install", "--kubeconfig", mgmt];
        install.extend(etcd.iter().map(String::as_str));
        install.extend(["--etcd-prefix", etcd_prefix, "--hub-url", &url]);
        if let Some(webhook_url) = &webhook_url {
            install.extend(["--webhook-url", webhook_url]);
        }
        let out = run_program(&setup.hub_bin, &install).await?;
        ensure!(
            out.status.success(),
            "install failed: {}",
            output_text(&out)
        );
        let install_output = String::from_utf8(out.stdout)?;

        let as_sa = impersonating_kubeconfig(
            testbed,
            testbed.mgmt(),
            HUB_SERVICE_ACCOUNT,
            &SERVICE_ACCOUNT_GROUPS,
        )?;
        let mut serve = std::process::Command::new(&setup.hub_bin);
        serve
            .arg("serve")
            .arg("--kubeconfig")
            .arg(&as_sa)
            .args(testbed.hub_etcd().hub_args())
            .args(["--etcd-prefix", etcd_prefix, "--namespace", HUB_NAMESPACE])
            .args(["--grpc-addr", &grpc, "--http-addr", &http])
            .args(["--webhook-addr", &webhook_addr])
            .args(["--replica-name", &setup.replica])
            .args(&setup.serve_args)
            .env_remove("KUBECONFIG")
            .env("RUST_LOG", "info,accord_hub=debug");
        let console = match setup.console {
            true => {
                let addr = format!("127.0.0.1:{}", free_port()?);
                serve.args(["--console-addr", &addr]);
                Some(format!("http://{addr}"))
            }
            false => None,
        };
        let process = testbed.spawn("hub/as-sa", serve)?;
        let http = format!("http://{http}");
        let readyz = format!("{http}/readyz");
        until("hub ready", Duration::from_secs(60), || {
            let url = readyz.clone();
            async move {
                testbed.ensure_running(process)?;
                Ok(match testbed.http().get(&url).send().await {
                    Ok(r) if r.status().is_success() => Check::Ready(()),
                    Ok(r) => Check::NotYet(format!("readyz {}", r.status())),
                    Err(e) => Check::NotYet(e.to_string()),
                })
            }
        })
        .await?;
        Ok(Self {
            process,
            url,
            http,
            webhook,
            webhook_url,
            console,
            setup,
            install_output,
        })
    }

    /// `accord-hub token create` for this hub; returns the join line it printed.
    pub async fn token_create(&self, testbed: &Testbed, args: &[&str]) -> Result<String> {
        let mgmt = testbed
            .mgmt()
            .kubeconfig_path()
            .to_str()
            .context("UTF-8 path")?;
        let etcd = testbed.hub_etcd().hub_args();
        let mut all = vec!["token", "create", "--kubeconfig", mgmt];
        all.extend(etcd.iter().map(String::as_str));
        all.extend([
            "--etcd-prefix",
            &self.setup.etcd_prefix,
            "--hub-url",
            &self.url,
        ]);
        all.extend_from_slice(args);
        let out = run_program(&self.setup.hub_bin, &all).await?;
        ensure!(out.status.success(), "token create: {}", output_text(&out));
        join_line(&String::from_utf8(out.stdout)?)
    }
}

/// Waits until ManagedCluster `cluster` has condition `type_` with `status`.
pub async fn wait_cluster_condition(
    client: &kube::Client,
    cluster: &str,
    type_: &str,
    status: &str,
    timeout: Duration,
) -> Result<()> {
    let api: Api<ManagedCluster> = Api::all(client.clone());
    until(&format!("{cluster} {type_}={status}"), timeout, || {
        let api = api.clone();
        async move {
            let seen = api
                .get_opt(cluster)
                .await?
                .and_then(|m| m.status)
                .and_then(|s| conditions::find(&s.conditions, type_).map(|c| c.status.clone()));
            Ok(if seen.as_deref() == Some(status) {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{type_} is {seen:?}"))
            })
        }
    })
    .await
}

/// The words of a printed command line with the `<placeholders>` of `substitutions`
/// replaced, ready to pass to [`run_binary`] (without the binary's name).
pub fn command_words(line: &str, substitutions: &[(&str, &str)]) -> Vec<String> {
    line.split_whitespace()
        .skip(1)
        .map(|w| {
            substitutions
                .iter()
                .find(|(from, _)| *from == w)
                .map_or_else(|| w.to_owned(), |(_, to)| (*to).to_owned())
        })
        .collect()
}

/// `path` as a `&str`.
pub fn path_str(path: &Path) -> Result<&str> {
    path.to_str().context("UTF-8 path")
}
