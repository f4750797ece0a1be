//! `DIR/state.json`: what a running sandbox daemon tells `status`, `down` and a second `up`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

/// File name of the state inside the sandbox directory.
pub const STATE_FILE: &str = "state.json";
/// File name of the daemon's log (its stdout and stderr) inside the sandbox directory.
pub const LOG_FILE: &str = "sandbox.log";
/// File name of the management cluster's kubeconfig inside the sandbox directory.
pub const MGMT_KUBECONFIG: &str = "mgmt.kubeconfig";

/// What a sandbox daemon records about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// The daemon's process id; also its session and process group id.
    pub pid: u32,
    /// The sandbox directory (absolute).
    pub dir: PathBuf,
    /// Whether start-up has finished: every member Available, the example policy Synced.
    pub ready: bool,
    /// When the daemon started (RFC 3339).
    pub started_at: String,
    /// Kubeconfig of the management cluster.
    pub mgmt_kubeconfig: PathBuf,
    /// The hub's gRPC URL, as agents dial it (`https://127.0.0.1:PORT`).
    #[serde(default)]
    pub hub_grpc_url: String,
    /// The hub's `/metrics`, `/healthz`, `/readyz` base URL.
    #[serde(default)]
    pub hub_http_url: String,
    /// Where the hub serves its admission webhook (`https://127.0.0.1:PORT`), which the
    /// ValidatingWebhookConfiguration `accord-hub` names with each webhook's path appended.
    #[serde(default)]
    pub hub_webhook_url: String,
    /// The hub's process id.
    #[serde(default)]
    pub hub_pid: u32,
    /// Where the hub keeps its state: its own etcd (TLS, user and password), and the key
    /// prefix there.
    #[serde(default)]
    pub hub_etcd: String,
    /// The member clusters.
    #[serde(default)]
    pub members: Vec<MemberState>,
    /// The testbed's own directory (component logs).
    #[serde(default)]
    pub testbed_dir: PathBuf,
    /// Directory of the testbed's programs (kubectl among them).
    #[serde(default)]
    pub testbed_bin: PathBuf,
    /// The example objects applied to the management cluster (`Kind namespace/name`).
    #[serde(default)]
    pub examples: Vec<String>,
    /// The global tier's Prometheus (`http://ADDRESS:9090`), federating every member's
    /// federation Prometheus, with `--with-prometheus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_prometheus_url: Option<String>,
    /// Jaeger's UI and query API (`http://ADDRESS:PORT`), receiving the hub's and agents'
    /// traces, with `--with-tracing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jaeger_url: Option<String>,
    /// The hub's fleet console.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub console_url: Option<String>,
    /// A file (mode 0600) holding a token to sign in to the console with: ServiceAccount
    /// [`CONSOLE_VIEWER`] in the hub's namespace, which may read every Accord kind and
    /// Events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub console_token_file: Option<PathBuf>,
}

/// The ServiceAccount whose token signs in to the sandbox's console.
pub const CONSOLE_VIEWER: &str = "console-viewer";
/// File name of its token inside the sandbox directory.
pub const CONSOLE_TOKEN_FILE: &str = "console.token";

/// One member cluster of a sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberState {
    /// Cluster name (also its ManagedCluster's name).
    pub name: String,
    /// Admin kubeconfig of the member cluster.
    pub kubeconfig: PathBuf,
    /// The agent's process id.
    pub agent_pid: u32,
    /// The agent's `/metrics` address, `127.0.0.1:PORT`.
    pub agent_http: String,
    /// The member's Kafka bootstrap address, with `--with-kafka` or `--with-kafka-sasl`:
    /// the listener the agent uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka_bootstrap: Option<String>,
    /// `security.protocol` of that listener: `PLAINTEXT`, or `SASL_SSL` (SCRAM-SHA-512)
    /// with `--with-kafka-sasl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka_protocol: Option<String>,
    /// With `--with-kafka-sasl`: client properties for Kafka's tools (`--command-config`)
    /// with the SCRAM user, its password and the brokers' CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka_client_config: Option<PathBuf>,
    /// The member's Prometheus URL, with `--with-prometheus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus_url: Option<String>,
    /// The member's federation Prometheus (its ManagedCluster's `spec.federationEndpoint`),
    /// with `--with-prometheus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub federation_url: Option<String>,
}

/// Path of the state file in `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(STATE_FILE)
}

/// Reads the state in `dir`, `None` when there is none.
pub fn read(dir: &Path) -> Result<Option<State>> {
    let path = path(dir);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a sandbox state file", path.display()))
            .map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Writes the state atomically (a reader never sees half a file).
pub fn write(state: &State) -> Result<()> {
    let path = path(&state.dir);
    let tmp = state.dir.join(format!(".{STATE_FILE}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(state)?)
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
}

/// Removes the state file in `dir`, if present.
pub fn remove(dir: &Path) -> Result<()> {
    let path = path(dir);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_survives_a_round_trip_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        let state = State {
            pid: 42,
            dir: dir.path().to_path_buf(),
            ready: true,
            started_at: "2026-01-01T00:00:00Z".into(),
            mgmt_kubeconfig: dir.path().join(MGMT_KUBECONFIG),
            hub_grpc_url: "https://127.0.0.1:7443".into(),
            hub_http_url: "http://127.0.0.1:8080".into(),
            hub_webhook_url: "https://127.0.0.1:9443".into(),
            hub_pid: 43,
            hub_etcd: "https://127.0.0.1:2379 (prefix /accord/)".into(),
            members: vec![MemberState {
                name: "member-1".into(),
                kubeconfig: dir.path().join("member-1.kubeconfig"),
                agent_pid: 44,
                agent_http: "127.0.0.1:8081".into(),
                kafka_bootstrap: Some("127.0.0.1:9094".into()),
                kafka_protocol: Some("SASL_SSL".into()),
                kafka_client_config: Some(dir.path().join("member-1-kafka.properties")),
                prometheus_url: Some("http://127.0.0.1:9091".into()),
                federation_url: Some("http://127.70.0.2:9090".into()),
            }],
            testbed_dir: dir.path().join("testbed"),
            testbed_bin: PathBuf::from("bin"),
            examples: vec!["CrossClusterScalePolicy default/webapp-global-scale".into()],
            global_prometheus_url: Some("http://127.70.0.1:9090".into()),
            jaeger_url: None,
            console_url: Some("http://127.0.0.1:8090".into()),
            console_token_file: Some(dir.path().join(CONSOLE_TOKEN_FILE)),
        };
        write(&state).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(state));
        remove(dir.path()).unwrap();
        remove(dir.path()).unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
    }
}
