//! The testbed: a management cluster and member clusters on one machine, with optional
//! Kafka brokers and Prometheus servers for the members.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use futures::future::try_join_all;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tempfile::TempDir;

use crate::binaries::Binaries;
use crate::etcd::{self, Etcd, HubEtcd};
use crate::kafka::{self, KafkaBroker};
use crate::kubernetes::{self, ClusterFiles};
use crate::pki::CertificateAuthority;
use crate::ports::free_port;
use crate::process::{DEFAULT_TAIL_LINES, ProcessId, ProcessInfo, Supervisor};
use crate::prometheus::{self, Prometheus};

/// Name of the management cluster.
pub const MGMT: &str = "mgmt";
/// Name of the fake node kwok simulates in every member cluster.
pub const FAKE_NODE: &str = "kwok-node-1";
/// Environment variable that, when set to anything but `0`, keeps the testbed's directory
/// (logs, data, kubeconfigs) after it stops.
pub const KEEP_DIR_ENV: &str = "ACCORD_TESTBED_KEEP";
/// Environment variable naming how many members the hub's etcd has (default 1): `3` runs
/// any test on a three-member etcd cluster.
pub const ETCD_MEMBERS_ENV: &str = "ACCORD_TESTBED_ETCD_MEMBERS";

/// Configures and starts a [`Testbed`].
#[derive(Debug, Clone)]
pub struct TestbedBuilder {
    member_names: Vec<String>,
    kafka: bool,
    prometheus: bool,
    mgmt_controller_manager: bool,
    crds_dir: Option<PathBuf>,
    keep_dir: bool,
    binaries: Option<Binaries>,
    etcd_members: usize,
}

impl Default for TestbedBuilder {
    fn default() -> Self {
        Self {
            member_names: vec!["member-1".into()],
            kafka: false,
            prometheus: false,
            mgmt_controller_manager: true,
            crds_dir: Some(crate::crds::default_dir()),
            keep_dir: std::env::var_os(KEEP_DIR_ENV).is_some_and(|v| v != "0"),
            binaries: None,
            etcd_members: 1,
        }
    }
}

impl TestbedBuilder {
    /// `n` member clusters named `member-1` … `member-n` (default: one).
    pub fn members(mut self, n: usize) -> Self {
        self.member_names = (1..=n).map(|i| format!("member-{i}")).collect();
        self
    }

    /// Member clusters with the given names.
    pub fn member_names<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.member_names = names.into_iter().map(Into::into).collect();
        self
    }

    /// `n` members in the hub's etcd (default: one, or [`ETCD_MEMBERS_ENV`]).
    pub fn etcd_members(mut self, n: usize) -> Self {
        self.etcd_members = n;
        self
    }

    /// A Kafka broker per member cluster.
    pub fn with_kafka(mut self) -> Self {
        self.kafka = true;
        self
    }

    /// A Prometheus server per member cluster.
    pub fn with_prometheus(mut self) -> Self {
        self.prometheus = true;
        self
    }

    /// Runs the management cluster without kube-controller-manager (no garbage collection
    /// or namespace deletion there, but a faster start).
    pub fn without_mgmt_controller_manager(mut self) -> Self {
        self.mgmt_controller_manager = false;
        self
    }

    /// Installs the CRDs from `dir` in the management cluster instead of `crds/yaml/`
    /// (either way serving only their storage version: [`crate::crds::storage_version_only`]).
    pub fn crds_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.crds_dir = Some(dir.into());
        self
    }

    /// Installs no CRDs.
    pub fn without_crds(mut self) -> Self {
        self.crds_dir = None;
        self
    }

    /// Keeps the testbed's directory after it stops (also `ACCORD_TESTBED_KEEP=1`).
    pub fn keep_dir(mut self, keep: bool) -> Self {
        self.keep_dir = keep;
        self
    }

    /// Uses these programs instead of [`Binaries::locate`].
    pub fn binaries(mut self, binaries: Binaries) -> Self {
        self.binaries = Some(binaries);
        self
    }

    /// Starts every component and returns once all are ready: API servers answer
    /// `/readyz`, CRDs are Established, controller managers and schedulers are healthy,
    /// every member's fake node is Ready, brokers answer metadata requests and Prometheus
    /// servers report ready. On failure everything started is stopped again.
    pub async fn start(mut self) -> Result<Testbed> {
        let started = Instant::now();
        if let Some(n) = std::env::var(ETCD_MEMBERS_ENV)
            .ok()
            .filter(|v| !v.is_empty())
        {
            let n: usize = n
                .parse()
                .with_context(|| format!("{ETCD_MEMBERS_ENV}={n} is not a number"))?;
            self.etcd_members = self.etcd_members.max(n);
        }
        if self.member_names.iter().any(|n| n == MGMT) {
            bail!("a member cannot be named {MGMT}");
        }
        let binaries = match self.binaries.clone() {
            Some(binaries) => binaries,
            None => tokio::task::spawn_blocking(Binaries::locate).await??,
        };
        let crds = match &self.crds_dir {
            Some(dir) if dir.is_dir() => {
                crate::crds::storage_version_only(crate::crds::read_dir(dir)?)
            }
            Some(dir) => {
                tracing::warn!("{} does not exist; no CRDs installed", dir.display());
                Vec::new()
            }
            None => Vec::new(),
        };
        let tempdir = tempfile::Builder::new()
            .prefix("accord-testbed-")
            .tempdir()
            .context("creating the testbed directory")?;
        let dir = tempdir.path().to_path_buf();
        let (tempdir, remove_on_abandon) = if self.keep_dir {
            // Detach the directory from the TempDir guard, which would delete it now.
            let _kept = tempdir.keep();
            (None, None)
        } else {
            (Some(tempdir), Some(dir.clone()))
        };
        let supervisor = Supervisor::new(&dir.join("logs"), remove_on_abandon.as_deref())?;
        let http = reqwest::Client::builder()
            .no_proxy()
            // Only for loopback components with self-signed serving certificates.
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(5))
            .build()?;

        let parts = Parts {
            builder: &self,
            binaries: &binaries,
            dir: &dir,
            supervisor: &supervisor,
            http: &http,
        };
        let result = parts.start_all(&crds).await;
        let (etcd, hub_etcd, mgmt, members, crd_names) = match result {
            Ok(started) => started,
            Err(e) => {
                let tails = supervisor.log_tails(15);
                if let Some(tempdir) = tempdir {
                    // Stop first, so nothing writes into the directory while it goes.
                    supervisor.stop_all();
                    drop(tempdir);
                }
                return Err(e.context(format!(
                    "starting the testbed failed; component logs:\n{tails}"
                )));
            }
        };
        let testbed = Testbed {
            mgmt,
            members,
            etcd_endpoint: etcd.endpoint,
            hub_etcd,
            crds: crd_names,
            binaries,
            http,
            startup: started.elapsed(),
            supervisor,
            dir,
            _tempdir: tempdir,
        };
        tracing::info!(
            dir = %testbed.dir.display(),
            members = testbed.members.len(),
            "testbed started in {:.1?}",
            testbed.startup
        );
        Ok(testbed)
    }
}

/// Borrowed state shared by the start-up steps.
struct Parts<'a> {
    builder: &'a TestbedBuilder,
    binaries: &'a Binaries,
    dir: &'a Path,
    supervisor: &'a Supervisor,
    http: &'a reqwest::Client,
}

impl Parts<'_> {
    async fn start_all(
        &self,
        crds: &[CustomResourceDefinition],
    ) -> Result<(Etcd, HubEtcd, Cluster, Vec<Cluster>, Vec<String>)> {
        let ca = CertificateAuthority::new("accord-testbed-ca")?;
        let etcd = etcd::spawn(self.supervisor, self.binaries, &self.dir.join("etcd"))?;
        // The hub's own etcd has a CA of its own: nothing else the testbed signs passes
        // its client-certificate check.
        let hub_etcd_ca = CertificateAuthority::new("accord-testbed-hub-etcd-ca")?;
        let hub_etcd = etcd::spawn_hub(
            self.supervisor,
            self.binaries,
            &self.dir.join("etcd-hub"),
            &hub_etcd_ca,
            self.builder.etcd_members,
        )?;
        let hub_etcd_auth = etcd::setup_hub_auth(self.supervisor, &hub_etcd);

        // Kafka and Prometheus do not depend on Kubernetes: they start alongside it.
        let kafkas = async {
            if !self.builder.kafka {
                return Ok(Vec::new());
            }
            try_join_all(self.builder.member_names.iter().map(|name| async move {
                kafka::start(
                    self.supervisor,
                    self.binaries,
                    name,
                    &self.dir.join(name).join("kafka"),
                )
                .await
            }))
            .await
        };
        let prometheuses = async {
            if !self.builder.prometheus {
                return Ok(Vec::new());
            }
            try_join_all(self.builder.member_names.iter().map(|name| async move {
                let dir = self.dir.join(name).join("prometheus");
                prometheus::start(self.supervisor, self.binaries, name, &dir, self.http).await
            }))
            .await
        };
        let kubernetes = self.start_kubernetes(&ca, &etcd, crds);
        let ((mgmt, mut members, crd_names), kafkas, prometheuses, ()) =
            tokio::try_join!(kubernetes, kafkas, prometheuses, hub_etcd_auth)?;

        for (member, broker) in members.iter_mut().zip(kafkas) {
            member.kafka = Some(broker);
        }
        for (member, prometheus) in members.iter_mut().zip(prometheuses) {
            member.prometheus = Some(prometheus);
        }
        Ok((etcd, hub_etcd, mgmt, members, crd_names))
    }

    async fn start_kubernetes(
        &self,
        ca: &CertificateAuthority,
        etcd: &Etcd,
        crds: &[CustomResourceDefinition],
    ) -> Result<(Cluster, Vec<Cluster>, Vec<String>)> {
        let names: Vec<&str> = std::iter::once(MGMT)
            .chain(self.builder.member_names.iter().map(String::as_str))
            .collect();
        let mut prepared = Vec::new();
        for name in &names {
            let port = free_port()?;
            let files = kubernetes::write_cluster_files(self.dir, name, ca, port)?;
            let client = crate::kubeconfig::client(&files.kubeconfig).await?;
            prepared.push((name.to_string(), port, files, client));
        }

        etcd::wait_ready(self.supervisor, etcd, self.http).await?;
        let mut api_servers = Vec::new();
        for (name, port, files, _) in &prepared {
            api_servers.push(kubernetes::spawn_api_server(
                self.supervisor,
                self.binaries,
                name,
                files,
                &etcd.endpoint,
                *port,
            )?);
        }
        try_join_all(
            prepared
                .iter()
                .zip(&api_servers)
                .map(|((_, port, _, _), process)| {
                    let url = format!("https://127.0.0.1:{port}/readyz");
                    async move {
                        kubernetes::wait_healthz(self.supervisor, *process, &url, self.http).await
                    }
                }),
        )
        .await?;

        let mut clusters = Vec::new();
        let mut crd_names = Vec::new();
        for (name, port, files, client) in prepared {
            let member = name != MGMT;
            let mut healthz = Vec::new();
            if member || self.builder.mgmt_controller_manager {
                let (process, port) = kubernetes::spawn_controller_manager(
                    self.supervisor,
                    self.binaries,
                    &name,
                    &files,
                )?;
                healthz.push((process, format!("https://127.0.0.1:{port}/healthz")));
            }
            if member {
                let (process, port) =
                    kubernetes::spawn_scheduler(self.supervisor, self.binaries, &name, &files)?;
                healthz.push((process, format!("https://127.0.0.1:{port}/healthz")));
                let (process, port) =
                    crate::kwok::spawn(self.supervisor, self.binaries, &name, &files)?;
                healthz.push((process, format!("http://127.0.0.1:{port}/healthz")));
            }
            clusters.push((Cluster::new(name, port, files, client), healthz));
        }

        let (mgmt, _) = &clusters[0];
        let install_crds = async {
            if !crds.is_empty() {
                crd_names = crate::crds::install(&mgmt.client, crds).await?;
            }
            anyhow::Ok(())
        };
        let healthy = try_join_all(clusters.iter().flat_map(|(_, healthz)| healthz.iter()).map(
            |(process, url)| kubernetes::wait_healthz(self.supervisor, *process, url, self.http),
        ));
        let nodes = try_join_all(clusters.iter().skip(1).map(|(cluster, _)| async {
            kubernetes::create_fake_node(&cluster.client, FAKE_NODE).await?;
            kubernetes::wait_node_ready(&cluster.client, FAKE_NODE)
                .await
                .with_context(|| format!("{}: kwok did not make {FAKE_NODE} Ready", cluster.name))
        }));
        tokio::try_join!(install_crds, healthy, nodes)?;

        let mut clusters = clusters.into_iter().map(|(cluster, _)| cluster);
        let mgmt = clusters.next().expect("the management cluster comes first");
        Ok((mgmt, clusters.collect(), crd_names))
    }
}

/// One Kubernetes cluster of the testbed.
#[derive(Clone)]
pub struct Cluster {
    name: String,
    server: String,
    files: ClusterFiles,
    client: kube::Client,
    kafka: Option<KafkaBroker>,
    prometheus: Option<Prometheus>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.name)
            .field("server", &self.server)
            .field("kubeconfig", &self.files.kubeconfig)
            .field("kafka", &self.kafka)
            .field("prometheus", &self.prometheus)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    fn new(name: String, port: u16, files: ClusterFiles, client: kube::Client) -> Self {
        Self {
            name,
            server: format!("https://127.0.0.1:{port}"),
            files,
            client,
            kafka: None,
            prometheus: None,
        }
    }

    /// `mgmt`, `member-1`, …
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The API server's URL.
    pub fn server_url(&self) -> &str {
        &self.server
    }

    /// Admin kubeconfig (client certificate in group `system:masters`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.files.kubeconfig
    }

    /// The CA certificate the API server's serving certificate chains to.
    pub fn ca_cert_path(&self) -> &Path {
        &self.files.ca_cert
    }

    /// An admin client, bound to the Tokio runtime the testbed started on.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// A fresh admin client for the current Tokio runtime.
    pub async fn new_client(&self) -> Result<kube::Client> {
        crate::kubeconfig::client(&self.files.kubeconfig).await
    }

    /// The member's Kafka bootstrap address (`127.0.0.1:<port>`), with Kafka enabled.
    pub fn kafka_bootstrap(&self) -> Option<&str> {
        self.kafka.as_ref().map(|k| k.bootstrap.as_str())
    }

    /// The member's Prometheus, with Prometheus enabled.
    pub fn prometheus(&self) -> Option<&Prometheus> {
        self.prometheus.as_ref()
    }

    /// The member's Prometheus URL (`http://127.0.0.1:<port>`), with Prometheus enabled.
    pub fn prometheus_url(&self) -> Option<&str> {
        self.prometheus.as_ref().map(|p| p.url.as_str())
    }
}

/// A running testbed; dropping it stops every process and removes its directory (unless
/// kept), printing the component log tails first if the thread is panicking.
pub struct Testbed {
    mgmt: Cluster,
    members: Vec<Cluster>,
    etcd_endpoint: String,
    hub_etcd: HubEtcd,
    crds: Vec<String>,
    binaries: Binaries,
    http: reqwest::Client,
    startup: Duration,
    supervisor: Supervisor,
    dir: PathBuf,
    // Declared after `supervisor`: the directory goes only once every process has stopped.
    _tempdir: Option<TempDir>,
}

impl Testbed {
    /// A builder with one member cluster, the management cluster's controller manager and
    /// the repository's CRDs (serving their storage version only).
    pub fn builder() -> TestbedBuilder {
        TestbedBuilder::default()
    }

    /// The management cluster (`mgmt`).
    pub fn mgmt(&self) -> &Cluster {
        &self.mgmt
    }

    /// The member clusters in the order configured.
    pub fn members(&self) -> &[Cluster] {
        &self.members
    }

    /// The member cluster called `name`.
    pub fn member(&self, name: &str) -> Option<&Cluster> {
        self.members.iter().find(|m| m.name == name)
    }

    /// The management cluster followed by the members.
    pub fn clusters(&self) -> impl Iterator<Item = &Cluster> {
        std::iter::once(&self.mgmt).chain(&self.members)
    }

    /// The API servers' etcd client URL (`http://127.0.0.1:<port>`, each API server
    /// under its own prefix). The hub keeps its state in [`Testbed::hub_etcd`] instead.
    pub fn etcd_endpoint(&self) -> &str {
        &self.etcd_endpoint
    }

    /// The hub's own etcd (TLS, client certificates, authentication): endpoint, file
    /// paths and credentials. Every [`crate::hub::HubProcess`] uses it by default.
    pub fn hub_etcd(&self) -> &HubEtcd {
        &self.hub_etcd
    }

    /// A client of [`Testbed::hub_etcd`], logged in as the hub's user, for tests that
    /// read or change the hub's state.
    pub async fn hub_etcd_client(&self) -> Result<etcd_client::Client> {
        self.hub_etcd.client().await
    }

    /// Calls `seen` with the value `key` holds in the hub's etcd now (if any), then with
    /// the value of every later put, until the returned task is aborted.
    pub async fn watch_hub_key(
        &self,
        key: &str,
        mut seen: impl FnMut(&[u8]) + Send + 'static,
    ) -> Result<tokio::task::JoinHandle<()>> {
        use etcd_client::{EventType, WatchOptions};
        let mut client = self.hub_etcd_client().await?;
        let current = client.get(key, None).await?;
        let revision = current.header().map_or(0, |h| h.revision());
        if let Some(kv) = current.kvs().first() {
            seen(kv.value());
        }
        let mut stream = client
            .watch(
                key,
                Some(WatchOptions::new().with_start_revision(revision + 1)),
            )
            .await
            .with_context(|| format!("watching {key}"))?;
        Ok(tokio::spawn(async move {
            let _client = client;
            while let Ok(Some(response)) = stream.message().await {
                for event in response.events() {
                    if event.event_type() == EventType::Put
                        && let Some(kv) = event.kv()
                    {
                        seen(kv.value());
                    }
                }
            }
        }))
    }

    /// The default key prefix of the hub's state in [`Testbed::hub_etcd`].
    pub fn hub_etcd_prefix(&self) -> &str {
        etcd::HUB_PREFIX
    }

    /// Names of the CRDs installed in the management cluster.
    pub fn crds(&self) -> &[String] {
        &self.crds
    }

    /// The testbed's directory: kubeconfigs (`<cluster>.kubeconfig`), data and `logs/`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The programs the testbed runs (kubectl among them).
    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// An HTTP client for the testbed's loopback endpoints (no proxy).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// How long [`TestbedBuilder::start`] took.
    pub fn startup_duration(&self) -> Duration {
        self.startup
    }

    /// A `kubectl` command for `cluster`, using its admin kubeconfig.
    pub fn kubectl(&self, cluster: &Cluster) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.binaries.kubectl);
        command
            .env("KUBECONFIG", &cluster.files.kubeconfig)
            .env("NO_PROXY", "127.0.0.1,localhost")
            // Discovery is cached by host and port; ports are reused across testbeds.
            .env("KUBECACHEDIR", self.dir.join("kubectl-cache"))
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .kill_on_drop(true);
        command
    }

    /// Starts `command` as component `name` under the testbed's supervision (own process
    /// group, log in `logs/`, tail printed on failure, stopped with the testbed); for
    /// Accord's own binaries in end-to-end tests.
    pub fn spawn(&self, name: &str, command: std::process::Command) -> Result<ProcessId> {
        self.supervisor.spawn(name, command)
    }

    /// The supervisor of its processes.
    pub(crate) fn supervisor(&self) -> &crate::process::Supervisor {
        &self.supervisor
    }

    /// Fails with the log tail if a supervised process has exited.
    pub fn ensure_running(&self, id: ProcessId) -> Result<()> {
        self.supervisor.ensure_running(id)
    }

    /// The supervised process started as `name` (e.g. `member-2/kube-apiserver`).
    pub fn process(&self, name: &str) -> Option<ProcessId> {
        self.supervisor.find(name)
    }

    /// Stops one supervised process (SIGTERM, SIGKILL after a grace period), e.g. to
    /// take a member cluster's API server down.
    pub fn stop_process(&self, id: ProcessId) {
        self.supervisor.stop(id);
    }

    /// Name, pid and log of one supervised process.
    pub fn process_info(&self, id: ProcessId) -> ProcessInfo {
        self.supervisor.info(id)
    }

    /// The testbed's processes that are running.
    pub fn processes(&self) -> Vec<ProcessInfo> {
        self.supervisor.running()
    }

    /// Every process id the testbed started, the watchdog included.
    pub fn pids(&self) -> Vec<u32> {
        self.supervisor.all_pids()
    }

    /// Resident memory of every running process, in bytes, by component name.
    pub fn memory(&self) -> Vec<(String, u64)> {
        self.processes()
            .into_iter()
            .map(|p| (p.name, rss_bytes(p.pid)))
            .collect()
    }

    /// The last `lines` lines of every component's log.
    pub fn log_tails(&self, lines: usize) -> String {
        self.supervisor.log_tails(lines)
    }

    /// A guard printing every component's log tail to stderr if the thread panics while
    /// it lives; for testbeds shared between tests, which are never dropped.
    pub fn logs_on_panic(&self) -> LogsOnPanic<'_> {
        LogsOnPanic { testbed: self }
    }

    /// Stops every process now (dropping does the same).
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "testbed logs ({}):\n{}",
                self.dir.display(),
                self.log_tails(DEFAULT_TAIL_LINES)
            );
        }
        self.supervisor.stop_all();
        if self._tempdir.is_none() {
            eprintln!("testbed directory kept: {}", self.dir.display());
        }
    }
}

/// Prints a testbed's component logs to stderr when dropped during a panic.
pub struct LogsOnPanic<'a> {
    testbed: &'a Testbed,
}

impl Drop for LogsOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "testbed logs ({}):\n{}",
                self.testbed.dir.display(),
                self.testbed.log_tails(DEFAULT_TAIL_LINES)
            );
        }
    }
}

/// CPU seconds (user + system) a process has used (0 if it is gone).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of /proc/PID/stat (index 11 and 12 after ')'),
    // in clock ticks of 1/100 s (USER_HZ) as Linux reports them to user space.
    (ticks(11) + ticks(12)) / 100.0
}

/// Resident set size of a process in bytes (0 if it is gone).
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| {
                    value
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
        })
        .map_or(0, |kib| kib * 1024)
}
