//! A Prometheus server per member cluster (the system's `prometheus`), with the lifecycle
//! API enabled so that its configuration can be rewritten and reloaded while it runs.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};

use crate::binaries::Binaries;
use crate::ports::free_port;
use crate::process::{ProcessId, Supervisor};
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
        fs::write(&self.config_file, config)
            .with_context(|| format!("writing {}", self.config_file.display()))?;
        let response = http
            .post(format!("{}/-/reload", self.url))
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
    command
        .arg(format!("--config.file={}", config_file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={address}"))
        .arg("--web.enable-lifecycle")
        .arg("--storage.tsdb.retention.time=1d");
    let process = supervisor.spawn(&format!("{name}/prometheus"), command)?;
    let prometheus = Prometheus {
        url: format!("http://{address}"),
        config_file,
        process,
    };
    let ready = format!("{}/-/ready", prometheus.url);
    wait::until(
        &format!("{name}/prometheus /-/ready"),
        READY_TIMEOUT,
        || async {
            supervisor.ensure_running(process)?;
            Ok(match http.get(&ready).send().await {
                Ok(response) if response.status().is_success() => Check::Ready(()),
                Ok(response) => Check::NotYet(format!("HTTP {}", response.status())),
                Err(e) => Check::NotYet(e.to_string()),
            })
        },
    )
    .await?;
    Ok(prometheus)
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
}
