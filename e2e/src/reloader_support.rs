//! Helpers of the reloader's end-to-end test (`e2e/tests/reloader.rs`): a Prometheus that
//! can be stopped and started again on the same port, with or without the lifecycle API,
//! and `accord-agent reload` run as a supervised process beside it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use accord_common::promfed::{CONFIG_KEY, ReloadStatus};
use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};

use crate::hub::accord_binary;
use crate::ports::free_port;
use crate::wait::{self, Check};
use crate::{ProcessId, Testbed};
use crate::{prometheus, promfed};

/// Field manager of the test's own ConfigMap writes.
const TEST_MANAGER: &str = "reloader-e2e";

/// A Prometheus whose config file the reloader rewrites.
#[derive(Debug)]
pub struct ReloadedPrometheus {
    /// `http://127.0.0.1:<port>`, stable across restarts.
    pub url: String,
    /// Its `--config.file`.
    pub config_file: PathBuf,
    name: String,
    address: String,
    dir: PathBuf,
    lifecycle: bool,
    process: Option<ProcessId>,
}

impl ReloadedPrometheus {
    /// Starts Prometheus `name` in `dir` with `initial` as its config file, with the
    /// lifecycle API (`/-/reload`) enabled or not, and waits until it is ready.
    pub async fn start(
        testbed: &Testbed,
        name: &str,
        dir: &Path,
        initial: &str,
        lifecycle: bool,
    ) -> Result<Self> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let address = format!("127.0.0.1:{}", free_port()?);
        let config_file = dir.join("prometheus.yml");
        fs::write(&config_file, initial)?;
        let mut prometheus = Self {
            url: format!("http://{address}"),
            config_file,
            name: name.to_owned(),
            address,
            dir: dir.to_path_buf(),
            lifecycle,
            process: None,
        };
        prometheus.resume(testbed).await?;
        Ok(prometheus)
    }

    /// `host:port` it listens on.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Stops the process; requests fail with "connection refused" until [`Self::resume`].
    pub fn stop(&mut self, testbed: &Testbed) {
        if let Some(id) = self.process.take() {
            testbed.stop_process(id);
        }
    }

    /// Starts the process again on the same port and data (a no-op while it runs) and
    /// waits until it is ready.
    pub async fn resume(&mut self, testbed: &Testbed) -> Result<()> {
        if self.process.is_some() {
            return Ok(());
        }
        let mut command = Command::new(&testbed.binaries().prometheus);
        let (file, dir) = (&self.config_file, &self.dir);
        prometheus::server_args(&mut command, file, dir, &self.address, "1d", self.lifecycle);
        let what = format!("{}/prometheus", self.name);
        let id = testbed.spawn(&what, command)?;
        self.process = Some(id);
        prometheus::wait_ready(testbed.supervisor(), testbed.http(), id, &self.url, &what).await
    }

    /// The YAML of the config it has loaded (`/api/v1/status/config`).
    pub async fn loaded_config(&self, http: &reqwest::Client) -> Result<String> {
        promfed::loaded_config(http, &self.url).await
    }

    /// The scrape jobs it has loaded, by name.
    pub async fn loaded_jobs(&self, http: &reqwest::Client) -> Result<Vec<String>> {
        promfed::loaded_job_names(http, &self.url).await
    }
}

/// `accord-agent reload` running beside a Prometheus; stopped when dropped.
pub struct ReloaderProcess<'t> {
    testbed: &'t Testbed,
    /// The supervised process.
    pub id: ProcessId,
    /// Its log (stdout and stderr).
    pub log: PathBuf,
}

impl<'t> ReloaderProcess<'t> {
    /// Starts the reloader for ConfigMap `namespace/config_map` of the management cluster
    /// and `prometheus`, with `extra` flags (`--debounce 2s`, …).
    pub fn start(
        testbed: &'t Testbed,
        name: &str,
        namespace: &str,
        config_map: &str,
        prometheus: &ReloadedPrometheus,
        extra: &[&str],
    ) -> Result<Self> {
        let mut command = Command::new(accord_binary("accord-agent")?);
        command
            .arg("reload")
            .arg("--config-file")
            .arg(&prometheus.config_file)
            .arg("--kubeconfig")
            .arg(testbed.mgmt().kubeconfig_path())
            .args(["--namespace", namespace, "--config-map", config_map])
            .args(["--prometheus-url", &prometheus.url])
            .args(extra)
            .env("RUST_LOG", "info");
        let id = testbed.spawn(&format!("{name}/reloader"), command)?;
        let log = testbed.process_info(id).log;
        Ok(Self { testbed, id, log })
    }

    /// Lines of its log containing `needle`.
    pub fn log_lines(&self, needle: &str) -> Result<usize> {
        let text = fs::read_to_string(&self.log)
            .with_context(|| format!("reading {}", self.log.display()))?;
        Ok(text.lines().filter(|l| l.contains(needle)).count())
    }

    /// Fails with the log tail if the reloader has exited.
    pub fn ensure_running(&self) -> Result<()> {
        self.testbed.ensure_running(self.id)
    }
}

impl Drop for ReloaderProcess<'_> {
    fn drop(&mut self) {
        self.testbed.stop_process(self.id);
    }
}

/// Creates or replaces ConfigMap `name` with `config` as its `prometheus.yml`.
pub async fn put_config(api: &Api<ConfigMap>, name: &str, config: &str) -> Result<()> {
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {CONFIG_KEY: config},
    }))?;
    api.patch(
        name,
        &PatchParams::apply(TEST_MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await
    .with_context(|| format!("applying ConfigMap {name}"))?;
    Ok(())
}

/// Waits until the reloader's annotations on ConfigMap `name` satisfy `done`, returning
/// them; the timeout error shows the last annotations seen.
pub async fn wait_status(
    api: &Api<ConfigMap>,
    name: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&ReloadStatus) -> bool,
) -> Result<ReloadStatus> {
    wait::until(what, timeout, || async {
        let Some(cm) = api.get_opt(name).await? else {
            return Ok(Check::NotYet(format!("no ConfigMap {name}")));
        };
        let status = ReloadStatus::of(&cm);
        Ok(if done(&status) {
            Check::Ready(status)
        } else {
            Check::NotYet(format!("{status:?}"))
        })
    })
    .await
}

/// Fails unless `condition` holds, with `message`.
pub fn check(condition: bool, message: impl FnOnce() -> String) -> Result<()> {
    if !condition {
        bail!("{}", message());
    }
    Ok(())
}
