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
    Ok(tokio::process::Command::new(accord_binary(name)?)
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("ACCORD_JOIN_TOKEN")
        .env("RUST_LOG", "warn")
        .output()
        .await?)
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

/// A hub installed with `accord-hub install` and served as its ServiceAccount.
pub struct InstalledHub {
    /// The `serve` process.
    pub process: ProcessId,
    /// The URL members dial, `https://127.0.0.1:PORT`.
    pub url: String,
    /// HTTP base URL (`/metrics`, `/readyz`).
    pub http: String,
    /// The etcd prefix.
    pub etcd_prefix: String,
    /// What install printed on stdout (it ends with a join command).
    pub install_output: String,
}

impl InstalledHub {
    /// `accord-hub install --kubeconfig MGMT --etcd-endpoints E --etcd-prefix P --hub-url
    /// https://127.0.0.1:PORT`, then `accord-hub serve` under the installed ServiceAccount on
    /// that port; returns once the hub is ready.
    pub async fn install(testbed: &Testbed, etcd_prefix: &str) -> Result<Self> {
        let mgmt = testbed
            .mgmt()
            .kubeconfig_path()
            .to_str()
            .context("UTF-8 path")?;
        let grpc = format!("127.0.0.1:{}", free_port()?);
        let http = format!("127.0.0.1:{}", free_port()?);
        let url = format!("https://{grpc}");
        let out = run_binary(
            "accord-hub",
            &[
                "install",
                "--kubeconfig",
                mgmt,
                "--etcd-endpoints",
                testbed.etcd_endpoint(),
                "--etcd-prefix",
                etcd_prefix,
                "--hub-url",
                &url,
            ],
        )
        .await?;
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
        let mut serve = std::process::Command::new(accord_binary("accord-hub")?);
        serve
            .arg("serve")
            .arg("--kubeconfig")
            .arg(&as_sa)
            .args(["--etcd-endpoints", testbed.etcd_endpoint()])
            .args(["--etcd-prefix", etcd_prefix, "--namespace", HUB_NAMESPACE])
            .args(["--grpc-addr", &grpc, "--http-addr", &http])
            .args(["--replica-name", "hub-as-sa"])
            .env("RUST_LOG", "info,accord_hub=debug");
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
            etcd_prefix: etcd_prefix.to_owned(),
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
        let mut all = vec![
            "token",
            "create",
            "--kubeconfig",
            mgmt,
            "--etcd-endpoints",
            testbed.etcd_endpoint(),
            "--etcd-prefix",
            &self.etcd_prefix,
            "--hub-url",
            &self.url,
        ];
        all.extend_from_slice(args);
        let out = run_binary("accord-hub", &all).await?;
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
