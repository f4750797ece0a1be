//! A Prometheus server per member cluster (the system's `prometheus`), with the lifecycle
//! API enabled so that its configuration can be rewritten and reloaded while it runs; and
//! a Prometheus scraping given targets at a short interval, which a test can stop and start
//! again on the same port and data (the metric source of autoscaling tests).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};

use crate::binaries::Binaries;
use crate::ports::free_port;
use crate::process::{ProcessId, Supervisor};
use crate::testbed::Testbed;
use crate::wait::{self, Check};

/// How long Prometheus may take to report itself ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Scrape and rule evaluation interval: short, so tests see samples quickly.
pub const SCRAPE_INTERVAL: &str = "1s";

/// A running Prometheus.
#[derive(Debug, Clone)]
pub struct Prometheus {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// The configuration file it loads (and reloads).
    pub config_file: PathBuf,
    /// The supervised process.
    pub process: ProcessId,
}

/// Renders a configuration whose global interval is [`SCRAPE_INTERVAL`], with a job
/// `prometheus` scraping the server itself at `self_address`, followed by
/// `extra_scrape_configs` (YAML list items, already indented by two spaces, or empty).
pub fn render_config(self_address: &str, extra_scrape_configs: &str) -> String {
    format!(
        "global:
  scrape_interval: {SCRAPE_INTERVAL}
  evaluation_interval: {SCRAPE_INTERVAL}
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ['{self_address}']
{extra_scrape_configs}"
    )
}

impl Prometheus {
    /// `host:port` the server listens on.
    pub fn address(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// Replaces the configuration file and reloads it; fails if Prometheus rejects it.
    pub async fn reload_with(&self, config: &str, http: &reqwest::Client) -> Result<()> {
        write_and_reload(http, &self.url, &self.config_file, config).await
    }
}

/// Starts Prometheus for cluster `name`, in `dir`, and waits until it is ready.
pub async fn start(
    supervisor: &Supervisor,
    binaries: &Binaries,
    name: &str,
    dir: &Path,
    http: &reqwest::Client,
) -> Result<Prometheus> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let address = format!("127.0.0.1:{}", free_port()?);
    let config_file = dir.join("prometheus.yml");
    fs::write(&config_file, render_config(&address, ""))?;
    let mut command = Command::new(&binaries.prometheus);
    server_args(&mut command, &config_file, dir, &address, "1d", true);
    let process = supervisor.spawn(&format!("{name}/prometheus"), command)?;
    let prometheus = Prometheus {
        url: format!("http://{address}"),
        config_file,
        process,
    };
    let what = format!("{name}/prometheus");
    wait_ready(supervisor, http, process, &prometheus.url, &what).await?;
    Ok(prometheus)
}

/// A Prometheus duration (`250ms`, `1s`) for `interval`, in whole milliseconds.
fn duration_text(interval: Duration) -> String {
    format!("{}ms", interval.as_millis().max(1))
}

/// Renders a configuration scraping the server itself and every target in `targets`
/// (`host:port`, path `/metrics`) every `interval`; the scrape timeout is the interval, as
/// Prometheus requires it to be no longer.
pub fn render_scrape_config(self_address: &str, interval: Duration, targets: &[String]) -> String {
    let interval = duration_text(interval);
    let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    format!(
        "global:
  scrape_interval: {interval}
  scrape_timeout: {interval}
  evaluation_interval: {interval}
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ['{self_address}']
  - job_name: load
    static_configs:
      - targets: [{}]
",
        targets.join(", ")
    )
}

/// A Prometheus scraping test exporters, under the testbed's supervision, that can be
/// stopped (to take the metric source away) and started again on the same port and data
/// directory (so the URL the hub queries stays valid and the history is kept).
#[derive(Debug)]
pub struct ScrapingPrometheus {
    /// `http://127.0.0.1:<port>`, stable across restarts.
    pub url: String,
    name: String,
    address: String,
    dir: std::path::PathBuf,
    process: Option<ProcessId>,
}

impl ScrapingPrometheus {
    /// Writes the configuration into `dir`, starts Prometheus as component
    /// `<name>/prometheus` on a free port and waits until it is ready.
    pub async fn start(
        testbed: &Testbed,
        name: &str,
        dir: &Path,
        interval: Duration,
        targets: &[String],
    ) -> Result<Self> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let address = format!("127.0.0.1:{}", free_port()?);
        fs::write(
            dir.join("prometheus.yml"),
            render_scrape_config(&address, interval, targets),
        )?;
        let mut prometheus = Self {
            url: format!("http://{address}"),
            name: name.to_owned(),
            address,
            dir: dir.to_path_buf(),
            process: None,
        };
        prometheus.resume(testbed).await?;
        Ok(prometheus)
    }

    /// Whether the process is running (as far as this handle knows).
    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// The supervised process while it runs.
    pub fn process(&self) -> Option<ProcessId> {
        self.process
    }

    /// Stops the process (SIGTERM, then SIGKILL after the supervisor's grace period);
    /// queries fail with "connection refused" until [`ScrapingPrometheus::resume`].
    pub fn stop(&mut self, testbed: &Testbed) {
        if let Some(id) = self.process.take() {
            testbed.stop_process(id);
        }
    }

    /// Starts the process again on the same port and data directory (a no-op while it
    /// runs) and waits until it is ready.
    pub async fn resume(&mut self, testbed: &Testbed) -> Result<()> {
        if self.process.is_some() {
            return Ok(());
        }
        let mut command = Command::new(&testbed.binaries().prometheus);
        let config_file = self.dir.join("prometheus.yml");
        server_args(
            &mut command,
            &config_file,
            &self.dir,
            &self.address,
            "1d",
            false,
        );
        let what = format!("{}/prometheus", self.name);
        let process = testbed.spawn(&what, command)?;
        self.process = Some(process);
        wait_ready(
            testbed.supervisor(),
            testbed.http(),
            process,
            &self.url,
            &what,
        )
        .await
    }

    /// Waits until an instant query for `query` returns exactly one sample equal to
    /// `value`, i.e. until the scraped value has reached Prometheus.
    pub async fn wait_for_value(
        &self,
        http: &reqwest::Client,
        query: &str,
        value: f64,
        timeout: Duration,
    ) -> Result<()> {
        let url = format!("{}/api/v1/query", self.url);
        wait::until(&format!("{query} = {value}"), timeout, || async {
            let answer = http.get(&url).query(&[("query", query)]).send().await;
            let body: serde_json::Value = match answer {
                Ok(response) => response.json().await?,
                Err(e) => return Ok(Check::NotYet(e.to_string())),
            };
            let result = &body["data"]["result"];
            let seen = result
                .as_array()
                .filter(|r| r.len() == 1)
                .and_then(|r| r[0]["value"][1].as_str())
                .and_then(|v| v.parse::<f64>().ok());
            Ok(if seen == Some(value) {
                Check::Ready(())
            } else {
                Check::NotYet(format!("result {result}"))
            })
        })
        .await
    }
}

/// The flags every testbed Prometheus runs with: its config file, its data in
/// `<dir>/data`, the address it listens on, how long it keeps samples, and with
/// `lifecycle` the lifecycle API (`/-/reload`).
pub fn server_args(
    command: &mut Command,
    config_file: &Path,
    dir: &Path,
    listen: &str,
    retention: &str,
    lifecycle: bool,
) {
    command
        .arg(format!("--config.file={}", config_file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={listen}"))
        .arg(format!("--storage.tsdb.retention.time={retention}"));
    if lifecycle {
        command.arg("--web.enable-lifecycle");
    }
}

/// Replaces `config_file` with `config` and POSTs `<url>/-/reload`; fails with
/// Prometheus's answer unless it is 2xx.
pub async fn write_and_reload(
    http: &reqwest::Client,
    url: &str,
    config_file: &Path,
    config: &str,
) -> Result<()> {
    fs::write(config_file, config).with_context(|| format!("writing {}", config_file.display()))?;
    let response = http
        .post(format!("{url}/-/reload"))
        .send()
        .await
        .context("POST /-/reload")?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    ensure!(
        status.is_success(),
        "Prometheus rejected its configuration ({status}): {body}"
    );
    Ok(())
}

/// Waits until the Prometheus at `url` (process `process`) says it is ready (`/-/ready`),
/// failing at once if the process exits; `what` names it in the timeout error.
pub async fn wait_ready(
    supervisor: &Supervisor,
    http: &reqwest::Client,
    process: ProcessId,
    url: &str,
    what: &str,
) -> Result<()> {
    let ready = format!("{url}/-/ready");
    wait::until(&format!("{what} /-/ready"), READY_TIMEOUT, || async {
        supervisor.ensure_running(process)?;
        Ok(match http.get(&ready).send().await {
            Ok(response) if response.status().is_success() => Check::Ready(()),
            Ok(response) => Check::NotYet(format!("HTTP {}", response.status())),
            Err(e) => Check::NotYet(e.to_string()),
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendered_configuration_scrapes_the_server_itself_and_keeps_extra_jobs() {
        let config = render_config("127.0.0.1:9999", "  - job_name: extra\n");
        assert!(config.contains("targets: ['127.0.0.1:9999']"));
        assert!(config.ends_with("  - job_name: extra\n"));
    }

    #[test]
    fn a_scrape_configuration_names_each_target_and_a_timeout_no_longer_than_the_interval() {
        let config = render_scrape_config(
            "127.0.0.1:9999",
            Duration::from_millis(250),
            &["127.0.0.1:1".into(), "127.0.0.1:2".into()],
        );
        assert!(config.contains("scrape_interval: 250ms\n  scrape_timeout: 250ms"));
        assert!(config.contains("targets: ['127.0.0.1:1', '127.0.0.1:2']"));
        assert!(config.contains("targets: ['127.0.0.1:9999']"));
    }
}
