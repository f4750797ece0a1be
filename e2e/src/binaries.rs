//! Where the testbed's third-party programs are.
//!
//! etcd, the Kubernetes control-plane binaries, kubectl, kwok and Jaeger are built from their Go
//! modules, and the Kafka broker's jars fetched from Maven Central, by
//! `e2e/testbed/build.sh` into a versioned cache outside the repository. Prometheus and
//! Java come from the system.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::{Context as _, Result, bail, ensure};

/// Environment variable naming an already built bin directory; skips `build.sh`.
pub const BIN_DIR_ENV: &str = "ACCORD_TESTBED_BIN";
/// Environment variable naming the Prometheus binary (default: `prometheus` on `PATH`).
pub const PROMETHEUS_ENV: &str = "ACCORD_PROMETHEUS";

/// Paths of every program the testbed runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// etcd.
    pub etcd: PathBuf,
    /// kube-apiserver.
    pub kube_apiserver: PathBuf,
    /// kube-controller-manager.
    pub kube_controller_manager: PathBuf,
    /// kube-scheduler.
    pub kube_scheduler: PathBuf,
    /// kubectl, same release as the API servers.
    pub kubectl: PathBuf,
    /// kwok, which simulates nodes and their pods.
    pub kwok: PathBuf,
    /// Directory holding the Kafka broker's jars.
    pub kafka_lib: PathBuf,
    /// Prometheus.
    pub prometheus: PathBuf,
    /// The Java launcher for Kafka (17 or newer).
    pub java: PathBuf,
    /// Jaeger's all-in-one binary (OTLP receiver, in-memory store, query API), the trace
    /// backend of the tracing tests and the sandbox.
    pub jaeger: PathBuf,
}

impl Binaries {
    /// Finds the programs, running `e2e/testbed/build.sh` (which builds what is missing
    /// and returns at once when everything is cached) unless `ACCORD_TESTBED_BIN` names the
    /// bin directory. The result is cached for the life of the process.
    pub fn locate() -> Result<Self> {
        static LOCATED: OnceLock<Result<Binaries, String>> = OnceLock::new();
        LOCATED
            .get_or_init(|| Self::locate_uncached().map_err(|e| format!("{e:#}")))
            .clone()
            .map_err(anyhow::Error::msg)
    }

    fn locate_uncached() -> Result<Self> {
        let bin = match env::var_os(BIN_DIR_ENV) {
            Some(dir) => PathBuf::from(dir),
            None => run_build_script()?,
        };
        Self::in_dir(&bin)
    }

    /// The programs in a bin directory produced by `build.sh` (Kafka's jars next to it in
    /// `../kafka/lib`), plus Prometheus and Java from the system.
    pub fn in_dir(bin: &Path) -> Result<Self> {
        let file = |name: &str| -> Result<PathBuf> {
            let path = bin.join(name);
            ensure!(
                path.is_file(),
                "{} is missing; run e2e/testbed/build.sh",
                path.display()
            );
            Ok(path)
        };
        let kafka_lib = bin
            .parent()
            .map(|root| root.join("kafka").join("lib"))
            .unwrap_or_default();
        ensure!(
            kafka_lib.is_dir(),
            "{} is missing; run e2e/testbed/build.sh",
            kafka_lib.display()
        );
        let prometheus = match env::var_os(PROMETHEUS_ENV) {
            Some(path) => PathBuf::from(path),
            None => on_path("prometheus")
                .context("prometheus is not on PATH (Debian: apt-get install prometheus)")?,
        };
        let java = match env::var_os("JAVA_HOME") {
            Some(home) if Path::new(&home).join("bin/java").is_file() => {
                Path::new(&home).join("bin/java")
            }
            _ => on_path("java")
                .context("java (17 or newer) is not on PATH and JAVA_HOME is unset")?,
        };
        Ok(Self {
            etcd: file("etcd")?,
            kube_apiserver: file("kube-apiserver")?,
            kube_controller_manager: file("kube-controller-manager")?,
            kube_scheduler: file("kube-scheduler")?,
            kubectl: file("kubectl")?,
            kwok: file("kwok")?,
            jaeger: file("jaeger")?,
            kafka_lib,
            prometheus,
            java,
        })
    }
}

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ has a parent")
        .to_path_buf()
}

fn run_build_script() -> Result<PathBuf> {
    let script = repo_root().join("e2e/testbed/build.sh");
    // build.sh reports progress on stderr (a cold build takes many minutes) and prints the
    // bin directory on its last stdout line.
    let output = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !output.status.success() {
        bail!("{} failed ({})", script.display(), output.status);
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().map(str::trim).unwrap_or_default();
    ensure!(
        !last.is_empty(),
        "{} printed no bin directory",
        script.display()
    );
    Ok(PathBuf::from(last))
}

fn on_path(program: &str) -> Option<PathBuf> {
    env::split_paths(&env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}
