//! Support for the store's integration tests: a throwaway etcd on free loopback ports, a
//! unique keyspace per test, waiting on conditions with deadlines, and helper child
//! processes that can be SIGKILLed.
//!
//! One etcd serves every test of a test binary (each test has its own key prefix). It runs
//! from a temporary data directory with fsync off; a watchdog shell kills it and removes
//! the directory when the test process exits, however it exits.

#![allow(dead_code)]

use std::future::Future;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use accord_hub::store::presence::ConnectedRecord;
use accord_hub::store::{KeyValue, Keyspace, ReplicaPresence, Store};
use anyhow::{Context as _, Result, bail};
use tokio::io::{AsyncBufReadExt as _, BufReader};

/// Lease TTL of the elections, locks and presences under test (etcd's minimum lease TTL is
/// about 2 s anyway).
pub const TTL: Duration = Duration::from_secs(2);
/// Slack on top of [`TTL`] for a loaded two-core machine: etcd checks lease expiry every
/// 500 ms, then whoever waits on it has to notice.
pub const MARGIN: Duration = Duration::from_secs(4);
/// Deadline for things that should happen promptly (no TTL involved).
pub const PROMPTLY: Duration = Duration::from_secs(15);

/// Environment variable naming the testbed's bin directory (skips `build.sh`).
pub const BIN_DIR_ENV: &str = "ACCORD_TESTBED_BIN";
/// Environment variable selecting a helper mode in a re-invoked test binary.
pub const HELPER_MODE_ENV: &str = "ACCORD_STORE_HELPER";
const HELPER_ENDPOINT_ENV: &str = "ACCORD_STORE_HELPER_ENDPOINT";
const HELPER_PREFIX_ENV: &str = "ACCORD_STORE_HELPER_PREFIX";
/// What a helper prints once it holds what it was asked to hold.
pub const HELPER_READY: &str = "HELPER-READY";

/// How long etcd may take to start answering.
const ETCD_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts at starting etcd (a port picked as free may be taken before etcd binds it).
const ETCD_START_ATTEMPTS: usize = 3;

/// Kills etcd (argument 1) and removes its data directory (argument 2) once standard input
/// closes: when [`TestEtcd`] is dropped or the test process is gone.
const WATCHDOG_SCRIPT: &str = r#"trap '' INT HUP TERM
cat >/dev/null
kill -s KILL "$1" 2>/dev/null
rm -rf -- "$2"
"#;

/// A throwaway etcd.
pub struct TestEtcd {
    /// Client URL, `http://127.0.0.1:<port>`.
    pub endpoint: String,
    dir: PathBuf,
    etcd: Mutex<Child>,
    watchdog: Mutex<Option<(Child, ChildStdin)>>,
}

impl TestEtcd {
    /// Starts an etcd of its own (most tests share [`etcd`] instead).
    pub fn start() -> Result<Self> {
        let binary = etcd_binary()?;
        let mut last_error = None;
        for _ in 0..ETCD_START_ATTEMPTS {
            match Self::start_once(&binary) {
                Ok(etcd) => return Ok(etcd),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.expect("at least one attempt"))
    }

    fn start_once(binary: &Path) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("accord-store-etcd-")
            .tempdir()?
            .keep();
        let client_port = free_port()?;
        let peer_port = free_port()?;
        let endpoint = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let log = std::fs::File::create(dir.join("etcd.log"))?;
        let etcd = Command::new(binary)
            .arg("--name=store-test")
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls={endpoint}"))
            .arg(format!("--advertise-client-urls={endpoint}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=store-test={peer}"))
            .arg("--unsafe-no-fsync")
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let mut watchdog = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("etcd-watchdog")
            .arg(etcd.id().to_string())
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the etcd watchdog")?;
        let stdin = watchdog.stdin.take().context("watchdog stdin")?;
        let etcd = Self {
            endpoint,
            dir,
            etcd: Mutex::new(etcd),
            watchdog: Mutex::new(Some((watchdog, stdin))),
        };
        etcd.wait_ready(client_port)?;
        Ok(etcd)
    }

    /// Polls `/health` until etcd reports itself healthy, etcd exits, or the deadline passes.
    fn wait_ready(&self, port: u16) -> Result<()> {
        let deadline = Instant::now() + ETCD_READY_TIMEOUT;
        let mut interval = Duration::from_millis(10);
        loop {
            if let Some(status) = self.etcd.lock().unwrap().try_wait()? {
                bail!("etcd exited with {status}: {}", self.log_tail());
            }
            let reason = match health(port) {
                Ok(body) if body.contains(r#""health":"true""#) => return Ok(()),
                Ok(body) => body,
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                bail!(
                    "etcd not healthy after {ETCD_READY_TIMEOUT:?}: {reason}; log: {}",
                    self.log_tail()
                );
            }
            std::thread::sleep(interval);
            interval = (interval * 2).min(Duration::from_millis(200));
        }
    }

    /// The end of etcd's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        if let Ok(mut etcd) = self.etcd.lock() {
            let _ = etcd.kill();
            let _ = etcd.wait();
        }
        if let Ok(mut watchdog) = self.watchdog.lock()
            && let Some((mut child, stdin)) = watchdog.take()
        {
            drop(stdin);
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn health(port: u16) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut body = String::new();
    stream.read_to_string(&mut body)?;
    Ok(body)
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

/// The etcd binary: `$ACCORD_TESTBED_BIN/etcd`, or the one `e2e/testbed/build.sh` built
/// (the script prints its bin directory on its last line and returns at once when cached).
pub fn etcd_binary() -> Result<PathBuf> {
    let bin = match std::env::var_os(BIN_DIR_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../e2e/testbed/build.sh");
            let output = Command::new("bash")
                .arg(&script)
                .stderr(Stdio::inherit())
                .output()
                .with_context(|| format!("running {}", script.display()))?;
            if !output.status.success() {
                bail!("{} failed with {}", script.display(), output.status);
            }
            let stdout = String::from_utf8_lossy(&output.stdout);
            PathBuf::from(
                stdout
                    .lines()
                    .last()
                    .context("build.sh printed nothing")?
                    .trim(),
            )
        }
    };
    let etcd = bin.join("etcd");
    if !etcd.is_file() {
        bail!("{} is missing; run e2e/testbed/build.sh", etcd.display());
    }
    Ok(etcd)
}

/// The etcd shared by every test of this test binary.
pub fn etcd() -> &'static TestEtcd {
    static SHARED: OnceLock<TestEtcd> = OnceLock::new();
    SHARED.get_or_init(|| TestEtcd::start().expect("starting the test etcd"))
}

/// A key prefix no other test (or test run) uses.
pub fn unique_prefix(test: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    format!(
        "/store-test/{test}-{}-{}/",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A store on the shared etcd under a fresh prefix for `test`.
pub async fn store(test: &str) -> Store {
    store_at(&unique_prefix(test)).await
}

/// A store (with a client of its own) on the shared etcd under `prefix`.
pub async fn store_at(prefix: &str) -> Store {
    Store::connect(&[etcd().endpoint.clone()], Keyspace::new(prefix))
        .await
        .expect("connecting to the test etcd")
}

/// A `connected/` record of `replica`, connected at `at` (unix milliseconds).
pub fn connected_record(replica: &str, at: i64) -> ConnectedRecord {
    ConnectedRecord {
        replica: replica.to_owned(),
        agent_version: "test".into(),
        kubernetes_version: "v1.34.4".into(),
        connected_unix_millis: at,
    }
}

/// A store for `test` and a replica `hub-0` on it (lease [`TTL`]) holding `clusters`.
pub async fn replica_holding(test: &str, clusters: &[&str]) -> (Store, ReplicaPresence) {
    let store = store(test).await;
    let presence = ReplicaPresence::start(store.clone(), "hub-0".into(), TTL)
        .await
        .unwrap();
    for cluster in clusters {
        presence
            .mark_connected(cluster, &connected_record("hub-0", 1))
            .await
            .unwrap();
    }
    (store, presence)
}

/// The replica whose `connected/` key holds `cluster`, if any.
pub async fn connected_holder(store: &Store, cluster: &str) -> Option<String> {
    ReplicaPresence::connected_replica(store, cluster)
        .await
        .unwrap()
}

/// `cluster`'s `connected/` key as etcd has it (value and lease), if there is one.
pub async fn connected_key(store: &Store, cluster: &str) -> Option<KeyValue> {
    store.get(store.keys().connected(cluster)).await.unwrap()
}

/// Checks `condition` with a growing interval until it yields a value; panics with `what`
/// once `timeout` has passed.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut condition: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut interval = Duration::from_millis(10);
    loop {
        if let Some(value) = condition().await {
            return value;
        }
        let now = tokio::time::Instant::now();
        assert!(
            now < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(interval.min(deadline - now)).await;
        interval = (interval * 2).min(Duration::from_millis(200));
    }
}

/// Awaits `future`, panicking with `what` if it takes longer than `timeout`.
pub async fn within<T>(what: &str, timeout: Duration, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(timeout, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {timeout:?} waiting for {what}"),
    }
}

/// A copy of this test binary running one helper mode in a child process.
pub struct HelperProcess {
    child: tokio::process::Child,
    /// What the helper printed after [`HELPER_READY`].
    pub ready: String,
}

impl HelperProcess {
    /// Re-runs this test binary's test `entry` (which must call [`helper_mode`]) with
    /// `mode`, the shared etcd and `prefix`, and waits until it prints [`HELPER_READY`].
    pub async fn spawn(entry: &str, mode: &str, prefix: &str) -> Self {
        let exe = std::env::current_exe().expect("test binary path");
        let mut child = tokio::process::Command::new(exe)
            .args([entry, "--exact", "--nocapture", "--test-threads=1"])
            .env(HELPER_MODE_ENV, mode)
            .env(HELPER_ENDPOINT_ENV, &etcd().endpoint)
            .env(HELPER_PREFIX_ENV, prefix)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawning a helper process");
        let stdout = child.stdout.take().expect("helper stdout");
        let mut lines = BufReader::new(stdout).lines();
        let ready = within(
            &format!("helper {mode} to get ready"),
            Duration::from_secs(30),
            async {
                while let Some(line) = lines.next_line().await.expect("reading helper stdout") {
                    // The test harness may have printed `test <name> ... ` on the same line.
                    if let Some(at) = line.find(HELPER_READY) {
                        return line[at + HELPER_READY.len()..].trim().to_owned();
                    }
                }
                panic!("helper {mode} exited before getting ready");
            },
        )
        .await;
        // Keep draining stdout so the helper never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self { child, ready }
    }

    /// SIGKILLs the helper and reaps it.
    pub async fn kill(mut self) {
        self.child.kill().await.expect("killing the helper");
    }
}

/// In a helper child process: the mode it was started with and a store on the parent's
/// etcd and prefix. `None` in a normal test run.
pub async fn helper_store() -> Option<(String, Store)> {
    let mode = std::env::var(HELPER_MODE_ENV).ok()?;
    let endpoint = std::env::var(HELPER_ENDPOINT_ENV).expect("helper endpoint");
    let prefix = std::env::var(HELPER_PREFIX_ENV).expect("helper prefix");
    let store = Store::connect(&[endpoint], Keyspace::new(&prefix))
        .await
        .expect("helper connecting to etcd");
    Some((mode, store))
}

/// Whether this process is a helper child.
pub fn helper_mode() -> Option<String> {
    std::env::var(HELPER_MODE_ENV).ok()
}

/// Tells the parent the helper is ready, then blocks until killed.
pub async fn helper_ready_and_wait(detail: &str) -> ! {
    println!("{HELPER_READY} {detail}");
    std::future::pending::<()>().await;
    unreachable!("pending never resolves")
}
