//! The single etcd behind every API server of a testbed (each under its own key prefix)
//! and the hub's store (under [`HUB_PREFIX`]).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::Result;

use crate::binaries::Binaries;
use crate::ports::free_port;
use crate::process::{ProcessId, Supervisor};
use crate::wait::{self, Check};

/// Key prefix reserved for the hub's own data.
pub const HUB_PREFIX: &str = "/accord-hub/";

/// How long etcd may take to answer `/health`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running etcd.
#[derive(Debug, Clone)]
pub struct Etcd {
    /// Client URL, `http://127.0.0.1:<port>`.
    pub endpoint: String,
    /// The supervised process.
    pub process: ProcessId,
}

/// Key prefix of a cluster's API server data.
pub fn cluster_prefix(cluster: &str) -> String {
    format!("/clusters/{cluster}")
}

/// The command of a single-member etcd `name` on loopback ports `client_port` and
/// `peer_port` with its data in `data_dir` (fsync disabled: test data only).
pub fn command(
    binaries: &Binaries,
    name: &str,
    data_dir: &Path,
    client_port: u16,
    peer_port: u16,
) -> Command {
    let endpoint = format!("http://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    let mut command = Command::new(&binaries.etcd);
    command
        .arg(format!("--name={name}"))
        .arg(format!("--data-dir={}", data_dir.display()))
        .arg(format!("--listen-client-urls={endpoint}"))
        .arg(format!("--advertise-client-urls={endpoint}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--initial-cluster={name}={peer}"))
        .arg("--unsafe-no-fsync")
        .arg("--log-level=warn");
    command
}

/// Starts etcd with its data in `data_dir` on free ports.
pub fn spawn(supervisor: &Supervisor, binaries: &Binaries, data_dir: &Path) -> Result<Etcd> {
    let client_port = free_port()?;
    let command = command(binaries, "testbed", data_dir, client_port, free_port()?);
    let process = supervisor.spawn("etcd", command)?;
    Ok(Etcd {
        endpoint: format!("http://127.0.0.1:{client_port}"),
        process,
    })
}

/// Waits until etcd reports itself healthy.
pub async fn wait_ready(
    supervisor: &Supervisor,
    etcd: &Etcd,
    http: &reqwest::Client,
) -> Result<()> {
    let url = format!("{}/health", etcd.endpoint);
    wait::until("etcd /health", READY_TIMEOUT, || async {
        supervisor.ensure_running(etcd.process)?;
        Ok(match http.get(&url).send().await {
            Ok(response) if response.status().is_success() => {
                let body = response.text().await.unwrap_or_default();
                if body.contains("\"health\":\"true\"") {
                    Check::Ready(())
                } else {
                    Check::NotYet(body)
                }
            }
            Ok(response) => Check::NotYet(format!("HTTP {}", response.status())),
            Err(e) => Check::NotYet(e.to_string()),
        })
    })
    .await
}
