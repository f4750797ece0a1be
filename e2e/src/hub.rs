//! Runs the real `accord-hub` binary against a testbed: `serve` processes, `token create`,
//! and reading their `/metrics`.

use anyhow::{Context as _, Result, bail};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::installed::flag_value;
use crate::ports::free_port;
use crate::wait::{Check, until};
use crate::{ProcessId, Testbed};

/// Namespace the hub keeps its CA Secret in, in tests.
pub const HUB_NAMESPACE: &str = "accord-system";
/// The hub CA's Secret in [`HUB_NAMESPACE`] (certificate under `tls.crt`).
pub const HUB_CA_SECRET: &str = "accord-hub-ca";

/// Names a directory holding `accord-hub` and `accord-agent` to run instead of the workspace's
/// own: a benchmark then measures another build (say, the commit before a change) with the
/// same bench code, in alternating runs.
pub const BINARIES_ENV: &str = "ACCORD_BINARIES";

/// Path of one of the workspace's binaries (`accord-hub`, `accord-agent`), brought up to
/// date with `cargo build` once per process so a test never runs a stale binary — or, with
/// [`BINARIES_ENV`] set, the one in that directory, as it is.
pub fn accord_binary(name: &str) -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(BINARIES_ENV) {
        let path = PathBuf::from(dir).join(name);
        if !path.is_file() {
            bail!(
                "{BINARIES_ENV} names no {name} (looked for {})",
                path.display()
            );
        }
        return Ok(path);
    }
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    // Test and bench executables live in target/<profile>/deps or target/<profile>.
    let exe = std::env::current_exe()?;
    let mut dir = exe
        .parent()
        .context("executable without a directory")?
        .to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join(name);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.iter().any(|b| b == name) {
        let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cargo
            .args(["build", "--quiet", "--bin", name])
            .current_dir(crate::binaries::repo_root());
        if dir.ends_with("release") {
            cargo.arg("--release");
        }
        let status = cargo
            .status()
            .with_context(|| format!("running cargo build --bin {name}"))?;
        if !status.success() || !path.exists() {
            bail!("could not build {name} (expected at {})", path.display());
        }
        built.push(name.to_owned());
    }
    Ok(path)
}

/// A running `accord-hub serve`; dropping it stops the process, so that tests sharing one
/// management cluster never have two unrelated hubs writing the same objects' status.
pub struct HubProcess<'t> {
    testbed: &'t Testbed,
    /// Supervised process.
    pub id: ProcessId,
    /// Replica name.
    pub replica: String,
    /// gRPC address, `127.0.0.1:PORT`.
    pub grpc: String,
    /// HTTP base URL.
    pub http: String,
}

/// Options of a test hub.
#[derive(Debug, Clone)]
pub struct HubOptions {
    /// Replica name.
    pub replica: String,
    /// etcd key prefix (use one per test so tests sharing etcd stay apart).
    pub etcd_prefix: String,
    /// Extra flags, e.g. `--election-ttl 2s`.
    pub extra_args: Vec<String>,
}

/// Creates the hub's namespace on the management cluster if needed.
pub async fn ensure_hub_namespace(testbed: &Testbed) -> Result<()> {
    crate::fleet::ensure_namespace(testbed.mgmt(), HUB_NAMESPACE).await
}

impl Drop for HubProcess<'_> {
    fn drop(&mut self) {
        self.testbed.stop_process(self.id);
    }
}

impl<'t> HubProcess<'t> {
    /// Starts `accord-hub serve` on free ports and waits until `/readyz` answers.
    pub async fn start(testbed: &'t Testbed, opts: &HubOptions) -> Result<Self> {
        Self::start_at(testbed, opts, &format!("127.0.0.1:{}", free_port()?)).await
    }

    /// Starts `accord-hub serve` with its gRPC server on `grpc` (e.g. to restart a hub
    /// where its agents expect it).
    pub async fn start_at(testbed: &'t Testbed, opts: &HubOptions, grpc: &str) -> Result<Self> {
        ensure_hub_namespace(testbed).await?;
        let grpc = grpc.to_owned();
        let http_addr = format!("127.0.0.1:{}", free_port()?);
        let mut cmd = Command::new(accord_binary("accord-hub")?);
        cmd.arg("serve")
            .arg("--kubeconfig")
            .arg(testbed.mgmt().kubeconfig_path())
            .args(["--etcd-prefix", &opts.etcd_prefix])
            .args(["--namespace", HUB_NAMESPACE])
            .args(["--grpc-addr", &grpc, "--http-addr", &http_addr])
            .args(["--replica-name", &opts.replica])
            .args(&opts.extra_args)
            .env("RUST_LOG", "info,accord_hub=debug");
        // A webhook port of its own, so that several hubs (replicas, parallel tests) never
        // contend for the default one.
        if !opts
            .extra_args
            .iter()
            .any(|a| a.starts_with("--webhook-addr"))
        {
            cmd.args(["--webhook-addr", &format!("127.0.0.1:{}", free_port()?)]);
        }
        cmd.args(hub_etcd_args(testbed, &opts.extra_args));
        let id = testbed.spawn(&format!("hub/{}", opts.replica), cmd)?;
        let hub = Self {
            testbed,
            id,
            replica: opts.replica.clone(),
            grpc,
            http: format!("http://{http_addr}"),
        };
        let http = testbed.http().clone();
        let url = format!("{}/readyz", hub.http);
        until(
            &format!("hub {} ready", opts.replica),
            Duration::from_secs(60),
            || {
                let http = http.clone();
                let url = url.clone();
                async move {
                    testbed.ensure_running(id)?;
                    Ok(match http.get(&url).send().await {
                        Ok(r) if r.status().is_success() => Check::Ready(()),
                        Ok(r) => Check::NotYet(format!("readyz {}", r.status())),
                        Err(e) => Check::NotYet(e.to_string()),
                    })
                }
            },
        )
        .await?;
        Ok(hub)
    }

    /// Value of an unlabelled metric (or the sum over its labels) from `/metrics`.
    pub async fn metric(&self, http: &reqwest::Client, name: &str) -> Result<Option<f64>> {
        let text = http
            .get(format!("{}/metrics", self.http))
            .send()
            .await?
            .text()
            .await?;
        Ok(parse_metric(&text, name))
    }
}

/// The etcd flags of a test hub with `extra_args`: the testbed's hub etcd
/// ([`Testbed::hub_etcd`]) with its TLS files and credentials. An `--etcd-endpoints` in
/// `extra_args` replaces only the endpoint (e.g. a fault proxy in front of the hub's
/// etcd); when it names a plain `http://` etcd, no TLS flag or credential is passed.
pub fn hub_etcd_args(testbed: &Testbed, extra_args: &[String]) -> Vec<String> {
    let hub_etcd = testbed.hub_etcd();
    let mut endpoint_given = false;
    let mut plain = false;
    for (i, arg) in extra_args.iter().enumerate() {
        let value = if let Some(value) = arg.strip_prefix("--etcd-endpoints=") {
            Some(value)
        } else if arg == "--etcd-endpoints" {
            extra_args.get(i + 1).map(String::as_str)
        } else {
            None
        };
        if let Some(value) = value {
            endpoint_given = true;
            plain = value.starts_with("http://");
        }
    }
    let mut args = Vec::new();
    if !endpoint_given {
        args.extend(["--etcd-endpoints".to_owned(), hub_etcd.endpoints_arg()]);
    }
    if !plain {
        args.extend(hub_etcd.tls_and_auth_args());
    }
    args
}

/// Sum of the samples of metric `name` in a Prometheus text exposition.
pub fn parse_metric(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ')?;
        let metric = series.split('{').next().unwrap_or_default();
        if metric == name {
            *found.get_or_insert(0.0) += value.parse::<f64>().ok()?;
        }
    }
    found
}

/// `accord-hub token create` against the testbed; returns (token, ca_cert_hash).
pub async fn create_token(
    testbed: &Testbed,
    etcd_prefix: &str,
    ttl: &str,
) -> Result<(String, String)> {
    create_token_with(testbed, &testbed.hub_etcd().hub_args(), etcd_prefix, ttl).await
}

/// `accord-hub token create` against the store `etcd_args` (the `--etcd-*` flags) name.
pub async fn create_token_with(
    testbed: &Testbed,
    etcd_args: &[String],
    etcd_prefix: &str,
    ttl: &str,
) -> Result<(String, String)> {
    let out = tokio::process::Command::new(accord_binary("accord-hub")?)
        .args(["token", "create"])
        .arg("--kubeconfig")
        .arg(testbed.mgmt().kubeconfig_path())
        .args(etcd_args)
        .args([
            "--etcd-prefix",
            etcd_prefix,
            "--namespace",
            HUB_NAMESPACE,
            "--ttl",
            ttl,
        ])
        .output()
        .await?;
    if !out.status.success() {
        bail!(
            "token create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = String::from_utf8(out.stdout)?;
    Ok((
        flag_value(&line, "--token")?,
        flag_value(&line, "--ca-cert-hash")?,
    ))
}

/// The hub CA certificate (PEM) from its Secret `accord-hub-ca`, once the hub has created it
/// (within `bound`).
pub async fn hub_ca(client: &kube::Client, bound: Duration) -> Result<k8s_openapi::ByteString> {
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client.clone(), HUB_NAMESPACE);
    until("the hub CA Secret", bound, || async {
        Ok(match secrets.get_opt(HUB_CA_SECRET).await? {
            Some(secret) => match secret.data.and_then(|d| d.get("tls.crt").cloned()) {
                Some(cert) => Check::Ready(cert),
                None => Check::NotYet("no tls.crt".into()),
            },
            None => Check::NotYet("no Secret yet".into()),
        })
    })
    .await
}

/// A hub that serves only its webhooks — conversion and admission — on loopback, as the
/// CRD upgrade test and the conversion benchmark need it: the caller's election
/// ([`WebhookOnlyHub::holder`]) holds the leadership under the hub's etcd prefix, so its
/// controllers never write. Dropping `holder` lets the hub lead.
pub struct WebhookOnlyHub<'t> {
    /// The election that keeps the hub from leading.
    pub holder: accord_hub::store::LeaderElection,
    /// How the hub was started (start it again with these to keep its address).
    pub options: HubOptions,
    /// The hub.
    pub process: HubProcess<'t>,
    /// Base URL of its webhook server, `https://127.0.0.1:PORT`.
    pub url: String,
    /// The hub CA (PEM), which the webhook's certificate chains to.
    pub ca: k8s_openapi::ByteString,
}

impl<'t> WebhookOnlyHub<'t> {
    /// Takes the leadership under `etcd_prefix`, starts replica `replica` with its webhook
    /// on a free loopback port, and reads its CA once it has made it.
    pub async fn start(testbed: &'t Testbed, etcd_prefix: &str, replica: &str) -> Result<Self> {
        let holder = accord_hub::store::LeaderElection::start(
            testbed.hub_etcd().store(etcd_prefix).await?,
            format!("{replica}-holder"),
            Duration::from_secs(15),
        )
        .await?;
        holder.wait_for_leadership().await;
        let port = free_port()?;
        let options = HubOptions {
            replica: replica.into(),
            etcd_prefix: etcd_prefix.into(),
            extra_args: vec!["--webhook-addr".into(), format!("127.0.0.1:{port}")],
        };
        let process = HubProcess::start(testbed, &options).await?;
        let ca = hub_ca(&testbed.mgmt().client(), Duration::from_secs(60)).await?;
        Ok(Self {
            holder,
            options,
            process,
            url: format!("https://127.0.0.1:{port}"),
            ca,
        })
    }
}
