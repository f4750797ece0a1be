//! The Prometheus federation testbed: real Prometheus servers standing in for a member
//! cluster's tenant Prometheus servers, its federation Prometheus (with Accord's config
//! reloader beside it) and the management side's global Prometheus.
//!
//! The testbed has no cluster DNS, yet the agent renders scrape targets as a real cluster
//! needs them (`<service>.<namespace>.svc:<port>`). So every server gets a loopback address
//! of its own ([`loopback_address`]) and listens on the well-known port
//! [`PROMETHEUS_PORT`], like a Service; and each member's Prometheus servers run in a mount
//! namespace of their own whose `/etc/hosts` is the member's [`HostsFile`], which maps each
//! published Service's name to its server's address:
//!
//! ```text
//! unshare --user --map-root-user --mount -- \
//!   sh -c 'mount --bind <member hosts file> /etc/hosts && exec prometheus …'
//! ```
//!
//! ```no_run
//! # async fn example(testbed: &accord_e2e::Testbed) -> anyhow::Result<()> {
//! use accord_e2e::promfed::{self, FederationOptions, PromfedMember, TenantSpec};
//!
//! let member = testbed.member("member-1").expect("member-1 exists");
//! let tenants = [TenantSpec::new("team-a", "metrics"), TenantSpec::new("team-b", "metrics")];
//! let promfed = PromfedMember::start(testbed, member, &tenants, &FederationOptions::default()).await?;
//! // The tenants' Services exist in member-1 and resolve inside the federation Prometheus.
//! let up = promfed::query(testbed.http(), &promfed.federation.url(), "up").await?;
//! # let _ = up;
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Write as _};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use futures::future::try_join_all;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde::Deserialize;

use crate::fleet::{AGENT_NAMESPACE, ensure_namespace};
use crate::hub::accord_binary;
use crate::process::ProcessId;
use crate::testbed::{Cluster, Testbed};
use crate::wait::{self, Check};

/// The port every testbed Prometheus listens on, each on its own loopback address, as
/// behind a Service.
pub const PROMETHEUS_PORT: u16 = 9090;
/// The ConfigMap contract's names (re-exported): the member ConfigMap
/// ([`CONFIG_MAP_NAME`]) and the management-side one ([`GLOBAL_CONFIG_MAP_NAME`]) the
/// reloaders watch, and the label marking a Service as a federation source
/// ([`SOURCE_LABEL`], value `"true"`).
pub use accord_common::promfed::{CONFIG_MAP_NAME, GLOBAL_CONFIG_MAP_NAME, SOURCE_LABEL};
/// Job of a tenant Prometheus scraping itself with its own namespace as label.
pub const TENANT_JOB: &str = "tenant";
/// Job of a tenant Prometheus scraping itself labelled with another namespace.
pub const LEAK_JOB: &str = "leak";
/// Field manager of the Services the testbed applies.
pub const FIELD_MANAGER: &str = "accord-e2e-promfed";
/// Scrape interval of tenant Prometheus servers: their series only need to exist, and
/// `/federate` serves the latest sample, so a modest interval spares the two cores.
pub const TENANT_SCRAPE_INTERVAL: &str = "2s";

/// Enough history for any test; keeps the TSDB small.
const RETENTION: &str = "1h";
/// Loopback addresses per test process (the last octet, 1–254).
const ADDRESSES_PER_PROCESS: u32 = 254;

/// Last octets handed out by this process.
static HANDED_OUT: LazyLock<Mutex<HashSet<Ipv4Addr>>> =
    LazyLock::new(|| Mutex::new(HashSet::new()));
/// The next last octet to try, minus one.
static NEXT_OCTET: AtomicU32 = AtomicU32::new(0);

/// The block of loopback addresses reserved for the process with id `pid`:
/// `127.<64 + (pid / 256) % 128>.<pid % 256>.0/24`. Process ids are below 32768 on most
/// machines, so two live test processes never share a block; where `pid_max` is larger,
/// the bind check in [`loopback_address`] catches the rare clash. 127.0.0.0/16 (where
/// `127.0.0.1` lives) is never used.
fn block_of(pid: u32) -> [u8; 3] {
    let block = pid % (128 * 256);
    [127, 64 + (block / 256) as u8, (block % 256) as u8]
}

/// Returns a loopback address, unique among the test processes running on this machine,
/// on which `port` was free a moment ago; never the same address twice in one process.
///
/// Every address of 127.0.0.0/8 reaches the loopback interface on Linux, so servers on
/// distinct addresses can all listen on the same port (see [`PROMETHEUS_PORT`]).
pub fn loopback_address(port: u16) -> io::Result<Ipv4Addr> {
    let [a, b, c] = block_of(std::process::id());
    for _ in 0..ADDRESSES_PER_PROCESS {
        let octet = NEXT_OCTET.fetch_add(1, Ordering::Relaxed) % ADDRESSES_PER_PROCESS + 1;
        let address = Ipv4Addr::new(a, b, c, octet as u8);
        if !HANDED_OUT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(address)
        {
            continue;
        }
        match TcpListener::bind((address, port)) {
            Ok(_) => return Ok(address),
            // Taken by a process whose block overlaps ours: try the next one.
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("binding {address}:{port}: {e}"),
                ));
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("all {ADDRESSES_PER_PROCESS} loopback addresses of this process are used"),
    ))
}

/// The DNS names a Service has inside a cluster, the short form the agent renders first:
/// `<service>.<namespace>.svc` and `<service>.<namespace>.svc.cluster.local`.
pub fn service_names(service: &str, namespace: &str) -> [String; 2] {
    [
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// A member's replacement for `/etc/hosts`, bind-mounted over it in the mount namespace of
/// each of the member's Prometheus servers (see [`HostsFile::command`]).
///
/// Every change rewrites the file in place: the bind mount pins the inode, so a new file
/// renamed over it would never be seen. Go's resolver, which Prometheus uses, re-reads
/// the file when its modification time or size changed, at most every five seconds, so a
/// running Prometheus resolves a new name within about five seconds.
#[derive(Debug)]
pub struct HostsFile {
    path: PathBuf,
    entries: Mutex<BTreeMap<String, Ipv4Addr>>,
}

impl HostsFile {
    /// Creates (or empties) the file at `path`, mapping only `localhost`.
    pub fn create(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let hosts = Self {
            path: path.to_path_buf(),
            entries: Mutex::new(BTreeMap::new()),
        };
        hosts.write(&BTreeMap::new())?;
        Ok(hosts)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The names mapped so far (besides `localhost`).
    pub fn entries(&self) -> BTreeMap<String, Ipv4Addr> {
        self.lock().clone()
    }

    /// Maps `name` to `address`, replacing an earlier mapping of `name`.
    pub fn insert(&self, name: &str, address: Ipv4Addr) -> Result<()> {
        self.update(|entries| {
            entries.insert(name.to_owned(), address);
        })
    }

    /// Maps both names of Service `service` in `namespace` ([`service_names`]) to
    /// `address`.
    pub fn insert_service(&self, service: &str, namespace: &str, address: Ipv4Addr) -> Result<()> {
        self.update(|entries| {
            for name in service_names(service, namespace) {
                entries.insert(name, address);
            }
        })
    }

    /// Removes both names of Service `service` in `namespace`.
    pub fn remove_service(&self, service: &str, namespace: &str) -> Result<()> {
        self.update(|entries| {
            for name in service_names(service, namespace) {
                entries.remove(&name);
            }
        })
    }

    /// A command running `program` in a new user and mount namespace in which this file
    /// is mounted over `/etc/hosts`; add the program's arguments to it. The user namespace
    /// (root inside, the caller's user outside) lets the same command work without root.
    pub fn command(&self, program: &Path) -> Command {
        let mut command = Command::new("unshare");
        command
            .args(["--user", "--map-root-user", "--mount", "--", "sh", "-c"])
            // Paths are positional parameters, so no quoting can go wrong; `exec` keeps
            // one process, which the supervisor stops with its group.
            .arg(r#"mount --bind "$0" /etc/hosts && exec "$@""#)
            .arg(&self.path)
            .arg(program);
        command
    }

    fn update(&self, change: impl FnOnce(&mut BTreeMap<String, Ipv4Addr>)) -> Result<()> {
        let mut entries = self.lock();
        change(&mut entries);
        self.write(&entries)
    }

    /// Rewrites the file in place (same inode), in one write so a reader sees either the
    /// old or the new size, never a half-written line.
    fn write(&self, entries: &BTreeMap<String, Ipv4Addr>) -> Result<()> {
        let text = render_hosts(entries);
        let mut file = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        file.write_all(text.as_bytes())
            .with_context(|| format!("writing {}", self.path.display()))?;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Ipv4Addr>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `/etc/hosts` text: `localhost`, then one line per address with all its names.
fn render_hosts(entries: &BTreeMap<String, Ipv4Addr>) -> String {
    let mut by_address: BTreeMap<Ipv4Addr, Vec<&str>> = BTreeMap::new();
    for (name, address) in entries {
        by_address.entry(*address).or_default().push(name);
    }
    let mut text = String::from("127.0.0.1 localhost\n::1 localhost\n");
    for (address, names) in by_address {
        let _ = writeln!(text, "{address} {}", names.join(" "));
    }
    text
}

/// A Prometheus duration for `duration` in whole milliseconds (`1500ms`), or seconds when
/// whole (`2s`); also what `accord-agent reload` accepts for its durations.
pub fn duration_text(duration: Duration) -> String {
    let millis = duration.as_millis().max(1);
    if millis.is_multiple_of(1000) {
        format!("{}s", millis / 1000)
    } else {
        format!("{millis}ms")
    }
}

/// One Prometheus process on its own loopback address, which can be stopped and started
/// again on the same address, configuration and data.
#[derive(Debug)]
struct Server {
    /// Supervisor component name, e.g. `member-1/prometheus-federation`.
    component: String,
    address: Ipv4Addr,
    dir: PathBuf,
    config_file: PathBuf,
    lifecycle: bool,
    hosts: Option<Arc<HostsFile>>,
    process: Option<ProcessId>,
}

impl Server {
    /// Picks a fresh loopback address and prepares directory `<parent>/<role>-<address>`
    /// with the configuration `config` renders for the server's own `address:port`;
    /// nothing runs yet.
    fn prepare(
        component: String,
        parent: &Path,
        role: &str,
        config: impl FnOnce(&str) -> String,
        lifecycle: bool,
        hosts: Option<Arc<HostsFile>>,
    ) -> Result<Self> {
        let address = loopback_address(PROMETHEUS_PORT)
            .context("finding a loopback address for Prometheus")?;
        let dir = parent.join(format!("{role}-{address}"));
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let config_file = dir.join("prometheus.yml");
        fs::write(
            &config_file,
            config(&format!("{address}:{PROMETHEUS_PORT}")),
        )
        .with_context(|| format!("writing {}", config_file.display()))?;
        Ok(Self {
            component,
            address,
            dir,
            config_file,
            lifecycle,
            hosts,
            process: None,
        })
    }

    fn url(&self) -> String {
        format!("http://{}:{PROMETHEUS_PORT}", self.address)
    }

    fn command(&self, testbed: &Testbed) -> Command {
        let prometheus = &testbed.binaries().prometheus;
        let mut command = match &self.hosts {
            Some(hosts) => hosts.command(prometheus),
            None => Command::new(prometheus),
        };
        let listen = format!("{}:{PROMETHEUS_PORT}", self.address);
        crate::prometheus::server_args(
            &mut command,
            &self.config_file,
            &self.dir,
            &listen,
            RETENTION,
            self.lifecycle,
        );
        command
    }

    /// Starts Prometheus unless it runs, and waits until it reports ready.
    async fn start(&mut self, testbed: &Testbed) -> Result<()> {
        if self.process.is_some() {
            return Ok(());
        }
        let process = testbed.spawn(&self.component, self.command(testbed))?;
        self.process = Some(process);
        let (supervisor, http) = (testbed.supervisor(), testbed.http());
        crate::prometheus::wait_ready(supervisor, http, process, &self.url(), &self.component).await
    }

    fn stop(&mut self, testbed: &Testbed) {
        if let Some(id) = self.process.take() {
            testbed.stop_process(id);
        }
    }
}

/// What a tenant Prometheus serves and under which Service it is published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantSpec {
    /// The tenant's namespace: the Service's namespace and the `namespace` label of the
    /// series of job [`TENANT_JOB`].
    pub namespace: String,
    /// The Service's name.
    pub service: String,
    /// With `Some(other)`, a second job [`LEAK_JOB`] labels the same series with namespace
    /// `other`: a source serving several namespaces, to prove that a tenant's federation
    /// job returns only its own.
    pub leak_namespace: Option<String>,
}

impl TenantSpec {
    /// A tenant Prometheus for `namespace` published as Service `service`, without a leak
    /// job.
    pub fn new(namespace: &str, service: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            service: service.to_owned(),
            leak_namespace: None,
        }
    }

    /// The same with a [`LEAK_JOB`] labelled with namespace `other`.
    pub fn leaking(mut self, other: &str) -> Self {
        self.leak_namespace = Some(other.to_owned());
        self
    }
}

/// Renders a tenant Prometheus's configuration: it scrapes itself (at `self_target`)
/// every [`TENANT_SCRAPE_INTERVAL`] as job [`TENANT_JOB`] labelled `namespace: <ns>`,
/// and with a leak namespace also as job [`LEAK_JOB`] labelled with that one.
pub fn render_tenant_config(self_target: &str, spec: &TenantSpec) -> String {
    let job = |name: &str, namespace: &str| {
        format!(
            "  - job_name: {name}
    static_configs:
      - targets: ['{self_target}']
        labels:
          namespace: '{namespace}'
"
        )
    };
    let mut config = format!(
        "global:
  scrape_interval: {TENANT_SCRAPE_INTERVAL}
  scrape_timeout: {TENANT_SCRAPE_INTERVAL}
scrape_configs:
{}",
        job(TENANT_JOB, &spec.namespace)
    );
    if let Some(other) = &spec.leak_namespace {
        config.push_str(&job(LEAK_JOB, other));
    }
    config
}

/// A real Prometheus standing in for one tenant's Prometheus in a member cluster, on its
/// own loopback address and port [`PROMETHEUS_PORT`], serving known series: its own
/// metrics (`up`, `prometheus_*`, …) labelled `namespace="<tenant namespace>"` under job
/// [`TENANT_JOB`], and optionally the same labelled with another namespace under job
/// [`LEAK_JOB`].
#[derive(Debug)]
pub struct TenantPrometheus {
    /// What it serves and how it is published.
    pub spec: TenantSpec,
    server: Server,
    hosts: Arc<HostsFile>,
}

impl TenantPrometheus {
    /// Starts a tenant Prometheus for member `member` (its component is
    /// `<member>/prometheus-tenant-<namespace>-<service>`), in the member's mount namespace
    /// (`hosts`), and waits until it is ready. It is not published yet (see
    /// [`TenantPrometheus::publish`]).
    pub async fn start(
        testbed: &Testbed,
        member: &str,
        hosts: Arc<HostsFile>,
        spec: TenantSpec,
    ) -> Result<Self> {
        let mut tenant = Self::prepare(testbed, member, hosts, spec)?;
        tenant.server.start(testbed).await?;
        Ok(tenant)
    }

    fn prepare(
        testbed: &Testbed,
        member: &str,
        hosts: Arc<HostsFile>,
        spec: TenantSpec,
    ) -> Result<Self> {
        let role = format!("tenant-{}-{}", spec.namespace, spec.service);
        let server = Server::prepare(
            format!("{member}/prometheus-{role}"),
            &member_dir(testbed, member),
            &role,
            |self_target| render_tenant_config(self_target, &spec),
            false,
            Some(hosts.clone()),
        )?;
        Ok(Self {
            spec,
            server,
            hosts,
        })
    }

    /// `http://<address>:9090`.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Its loopback address.
    pub fn address(&self) -> Ipv4Addr {
        self.server.address
    }

    /// The scrape target a rendered federation job names: `<service>.<namespace>.svc:9090`.
    pub fn target(&self) -> String {
        format!(
            "{}.{}.svc:{PROMETHEUS_PORT}",
            self.spec.service, self.spec.namespace
        )
    }

    /// The running process, if it runs.
    pub fn process(&self) -> Option<ProcessId> {
        self.server.process
    }

    /// Publishes it in member cluster `cluster` as a real cluster would: creates the
    /// namespace if needed, applies Service `<service>` in `<namespace>` labelled
    /// [`SOURCE_LABEL`]` = "true"` with port 9090 (headless, no selector), and maps the
    /// Service's names to this server's address in the member's hosts file.
    pub async fn publish(&self, cluster: &Cluster) -> Result<()> {
        let TenantSpec {
            namespace, service, ..
        } = &self.spec;
        ensure_namespace(cluster, namespace)
            .await
            .with_context(|| format!("creating namespace {namespace} in {}", cluster.name()))?;
        let services: Api<Service> = Api::namespaced(cluster.client(), namespace);
        services
            .patch(
                service,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(source_service(service, namespace)),
            )
            .await
            .with_context(|| {
                format!(
                    "applying Service {namespace}/{service} in {}",
                    cluster.name()
                )
            })?;
        self.hosts
            .insert_service(service, namespace, self.server.address)
    }

    /// Deletes the Service from `cluster` (if it exists) and its names from the hosts file.
    pub async fn unpublish(&self, cluster: &Cluster) -> Result<()> {
        let TenantSpec {
            namespace, service, ..
        } = &self.spec;
        let services: Api<Service> = Api::namespaced(cluster.client(), namespace);
        match services.delete(service, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "deleting Service {namespace}/{service} in {}",
                        cluster.name()
                    )
                });
            }
        }
        self.hosts.remove_service(service, namespace)
    }

    /// Stops the process; the address stays reserved for [`TenantPrometheus::resume`].
    pub fn stop(&mut self, testbed: &Testbed) {
        self.server.stop(testbed);
    }

    /// Starts it again on the same address and data (a no-op while it runs).
    pub async fn resume(&mut self, testbed: &Testbed) -> Result<()> {
        self.server.start(testbed).await
    }
}

/// A federation source Service: headless, without selector, port 9090.
pub fn source_service(service: &str, namespace: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service,
            "namespace": namespace,
            "labels": {SOURCE_LABEL: "true"},
        },
        "spec": {
            "clusterIP": "None",
            "ports": [{"name": "http", "port": PROMETHEUS_PORT, "targetPort": PROMETHEUS_PORT}],
        },
    })
}

/// How a federation or global Prometheus is started.
#[derive(Debug, Clone)]
pub struct FederationOptions {
    /// Start Prometheus with `--web.enable-lifecycle` (default); without it `/-/reload`
    /// answers 403.
    pub lifecycle: bool,
    /// Start the reloader (`accord-agent reload`) beside it; `None` (the default) starts
    /// Prometheus alone.
    pub reloader: Option<ReloaderOptions>,
}

impl Default for FederationOptions {
    fn default() -> Self {
        Self {
            lifecycle: true,
            reloader: None,
        }
    }
}

impl FederationOptions {
    /// The defaults plus a reloader with `reloader`'s options.
    pub fn with_reloader(reloader: ReloaderOptions) -> Self {
        Self {
            reloader: Some(reloader),
            ..Self::default()
        }
    }
}

/// Options of `accord-agent reload`. The kubeconfig, ConfigMap name, config file and
/// Prometheus URL follow from the Prometheus it runs beside.
#[derive(Debug, Clone)]
pub struct ReloaderOptions {
    /// Namespace of the watched ConfigMap (`--namespace`): the agent's for a member
    /// (default [`AGENT_NAMESPACE`]), the hub's federation namespace for the global tier.
    pub namespace: String,
    /// `--debounce` (default 1 s).
    pub debounce: Duration,
    /// `--targets-interval` (default 1 s, so scrape errors show quickly in tests).
    pub targets_interval: Duration,
    /// `RUST_LOG` of the reloader (default `info,accord_agent=debug`).
    pub log_filter: String,
    /// The `accord-agent` binary (default: built from this workspace).
    pub agent_bin: Option<PathBuf>,
    /// The kubeconfig it uses (default: the cluster's admin kubeconfig), e.g. one of a
    /// ServiceAccount with only the reloader's Role.
    pub kubeconfig: Option<PathBuf>,
}

impl Default for ReloaderOptions {
    fn default() -> Self {
        Self {
            namespace: AGENT_NAMESPACE.to_owned(),
            debounce: Duration::from_secs(1),
            targets_interval: Duration::from_secs(1),
            log_filter: "info,accord_agent=debug".to_owned(),
            agent_bin: None,
            kubeconfig: None,
        }
    }
}

/// Which tier a [`FederationPrometheus`] serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tier {
    /// A member's federation Prometheus (ConfigMap [`CONFIG_MAP_NAME`] in the member).
    Member(String),
    /// The management side's global Prometheus (ConfigMap [`GLOBAL_CONFIG_MAP_NAME`] in
    /// the management cluster).
    Global,
}

impl Tier {
    /// `member-1`, …, or `mgmt` for the global tier.
    pub fn cluster_name(&self) -> &str {
        match self {
            Self::Member(name) => name,
            Self::Global => crate::testbed::MGMT,
        }
    }

    /// The ConfigMap its reloader watches.
    pub fn config_map(&self) -> &'static str {
        match self {
            Self::Member(_) => CONFIG_MAP_NAME,
            Self::Global => GLOBAL_CONFIG_MAP_NAME,
        }
    }

    fn role(&self) -> &'static str {
        match self {
            Self::Member(_) => "federation",
            Self::Global => "global",
        }
    }
}

/// A federation Prometheus of a member (or, as [`GlobalPrometheus`], the global one) with
/// its configuration file in a directory of its own (starting as
/// [`accord_common::promfed::empty_config`], what the reloader writes when no policy is
/// left),
/// listening on its own loopback address at port [`PROMETHEUS_PORT`], and optionally the
/// reloader beside it: `accord-agent reload --kubeconfig <cluster kubeconfig> --namespace
/// <ns> --config-map <tier's ConfigMap> --config-file <file> --prometheus-url <url>
/// --debounce <d> --targets-interval <t>`.
///
/// A member's federation Prometheus runs in the member's mount namespace, so the rendered
/// targets (`<service>.<namespace>.svc:9090`) resolve to the tenants' servers. The global
/// one needs no hosts file: it reaches members by URL (`http://<address>:9090`).
#[derive(Debug)]
pub struct FederationPrometheus {
    tier: Tier,
    server: Server,
    kubeconfig: PathBuf,
    reloader_options: Option<ReloaderOptions>,
    reloader: Option<ProcessId>,
}

/// The global tier's Prometheus: a [`FederationPrometheus`] started with
/// [`FederationPrometheus::start_global`].
pub type GlobalPrometheus = FederationPrometheus;

impl FederationPrometheus {
    /// Starts the federation Prometheus of member `cluster` in the member's mount
    /// namespace (`hosts`), waits until it is ready, then starts the reloader if
    /// `options` asks for one.
    pub async fn start(
        testbed: &Testbed,
        cluster: &Cluster,
        hosts: Arc<HostsFile>,
        options: &FederationOptions,
    ) -> Result<Self> {
        let mut federation = Self::prepare(
            testbed,
            Tier::Member(cluster.name().to_owned()),
            cluster.kubeconfig_path(),
            Some(hosts),
            options,
        )?;
        federation.start_all(testbed).await?;
        Ok(federation)
    }

    /// Starts the global Prometheus on the management side (no mount namespace), waits
    /// until it is ready, then starts the reloader, watching ConfigMap
    /// [`GLOBAL_CONFIG_MAP_NAME`] in the management cluster, if `options` asks for one.
    pub async fn start_global(testbed: &Testbed, options: &FederationOptions) -> Result<Self> {
        let mut global = Self::prepare(
            testbed,
            Tier::Global,
            testbed.mgmt().kubeconfig_path(),
            None,
            options,
        )?;
        global.start_all(testbed).await?;
        Ok(global)
    }

    fn prepare(
        testbed: &Testbed,
        tier: Tier,
        kubeconfig: &Path,
        hosts: Option<Arc<HostsFile>>,
        options: &FederationOptions,
    ) -> Result<Self> {
        let cluster = tier.cluster_name();
        let server = Server::prepare(
            format!("{cluster}/prometheus-{}", tier.role()),
            &member_dir(testbed, cluster),
            tier.role(),
            |_| accord_common::promfed::empty_config(),
            options.lifecycle,
            hosts,
        )?;
        Ok(Self {
            tier,
            server,
            kubeconfig: kubeconfig.to_path_buf(),
            reloader_options: options.reloader.clone(),
            reloader: None,
        })
    }

    async fn start_all(&mut self, testbed: &Testbed) -> Result<()> {
        self.server.start(testbed).await?;
        if let Some(options) = self.reloader_options.clone() {
            self.start_reloader(testbed, options)?;
        }
        Ok(())
    }

    /// Which tier it serves.
    pub fn tier(&self) -> &Tier {
        &self.tier
    }

    /// `http://<address>:9090`, stable across restarts; for the global tier's targets
    /// this is the member's federation endpoint (`spec.federationEndpoint`).
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Its loopback address.
    pub fn address(&self) -> Ipv4Addr {
        self.server.address
    }

    /// The configuration file Prometheus loads and the reloader writes.
    pub fn config_file(&self) -> &Path {
        &self.server.config_file
    }

    /// The Prometheus process while it runs.
    pub fn process(&self) -> Option<ProcessId> {
        self.server.process
    }

    /// Whether Prometheus runs (as far as this handle knows).
    pub fn is_running(&self) -> bool {
        self.server.process.is_some()
    }

    /// Stops Prometheus only (SIGTERM, SIGKILL after the grace period); the reloader keeps
    /// running and finds it unreachable until [`FederationPrometheus::resume`].
    pub fn stop(&mut self, testbed: &Testbed) {
        self.server.stop(testbed);
    }

    /// Starts Prometheus again on the same address, configuration file and data (a no-op
    /// while it runs) and waits until it is ready.
    pub async fn resume(&mut self, testbed: &Testbed) -> Result<()> {
        self.server.start(testbed).await
    }

    /// Starts the reloader (component `<cluster>/reloader-<federation|global>`) with
    /// `options`, building `accord-agent` first if needed; stops a running one first.
    pub fn start_reloader(
        &mut self,
        testbed: &Testbed,
        options: ReloaderOptions,
    ) -> Result<ProcessId> {
        self.stop_reloader(testbed);
        let program = match &options.agent_bin {
            Some(bin) => bin.clone(),
            None => accord_binary("accord-agent")?,
        };
        let mut command = Command::new(program);
        command
            .arg("reload")
            .arg("--kubeconfig")
            .arg(options.kubeconfig.as_ref().unwrap_or(&self.kubeconfig))
            .args(["--namespace", &options.namespace])
            .args(["--config-map", self.tier.config_map()])
            .arg("--config-file")
            .arg(&self.server.config_file)
            .args(["--prometheus-url", &self.url()])
            .args(["--debounce", &duration_text(options.debounce)])
            .args([
                "--targets-interval",
                &duration_text(options.targets_interval),
            ])
            .env("RUST_LOG", &options.log_filter);
        let component = format!("{}/reloader-{}", self.tier.cluster_name(), self.tier.role());
        let id = testbed.spawn(&component, command)?;
        self.reloader = Some(id);
        self.reloader_options = Some(options);
        Ok(id)
    }

    /// The reloader process while it runs.
    pub fn reloader(&self) -> Option<ProcessId> {
        self.reloader
    }

    /// Stops the reloader, if it runs.
    pub fn stop_reloader(&mut self, testbed: &Testbed) {
        if let Some(id) = self.reloader.take() {
            testbed.stop_process(id);
        }
    }

    /// Fails with the log tail if Prometheus or the reloader has exited unexpectedly.
    pub fn ensure_running(&self, testbed: &Testbed) -> Result<()> {
        for id in self.server.process.iter().chain(&self.reloader) {
            testbed.ensure_running(*id)?;
        }
        Ok(())
    }

    /// Replaces the configuration file and POSTs `/-/reload`, bypassing the reloader;
    /// fails with Prometheus's answer unless it is 2xx.
    pub async fn reload_with(&self, http: &reqwest::Client, config: &str) -> Result<()> {
        crate::prometheus::write_and_reload(http, &self.url(), &self.server.config_file, config)
            .await
    }
}

/// Where a cluster's Prometheus servers keep their directories.
fn member_dir(testbed: &Testbed, cluster: &str) -> PathBuf {
    testbed.dir().join("promfed").join(cluster)
}

/// The federation setup of one member: its hosts file, its tenants' Prometheus servers
/// (published as Services) and its federation Prometheus (with the reloader if asked).
#[derive(Debug)]
pub struct PromfedMember {
    /// The member cluster's name.
    pub cluster: String,
    /// The member's hosts file, mounted over `/etc/hosts` for its Prometheus servers.
    pub hosts: Arc<HostsFile>,
    /// The member's federation Prometheus.
    pub federation: FederationPrometheus,
    /// The tenant Prometheus servers, in the order given.
    pub tenants: Vec<TenantPrometheus>,
}

/// Sequence number of hosts files, so that several setups of one member in one testbed
/// never share a file.
static HOSTS_FILES: AtomicU32 = AtomicU32::new(0);

impl PromfedMember {
    /// Starts a tenant Prometheus per entry of `tenants` and the federation Prometheus of
    /// `cluster`, all in parallel, publishes each tenant's Service (and hosts entry), then
    /// starts the reloader if `options` asks for one. Returns once every Prometheus is
    /// ready and every Service exists.
    pub async fn start(
        testbed: &Testbed,
        cluster: &Cluster,
        tenants: &[TenantSpec],
        options: &FederationOptions,
    ) -> Result<Self> {
        let name = cluster.name();
        let sequence = HOSTS_FILES.fetch_add(1, Ordering::Relaxed);
        let hosts = Arc::new(HostsFile::create(
            &member_dir(testbed, name).join(format!("hosts-{sequence}")),
        )?);
        let mut prepared = tenants
            .iter()
            .map(|spec| TenantPrometheus::prepare(testbed, name, hosts.clone(), spec.clone()))
            .collect::<Result<Vec<_>>>()?;
        let mut federation = FederationPrometheus::prepare(
            testbed,
            Tier::Member(name.to_owned()),
            cluster.kubeconfig_path(),
            Some(hosts.clone()),
            options,
        )?;
        let tenants_ready = try_join_all(prepared.iter_mut().map(|tenant| async move {
            tenant.server.start(testbed).await?;
            tenant.publish(cluster).await
        }));
        tokio::try_join!(tenants_ready, federation.server.start(testbed))?;
        if let Some(reloader) = options.reloader.clone() {
            federation.start_reloader(testbed, reloader)?;
        }
        Ok(Self {
            cluster: name.to_owned(),
            hosts,
            federation,
            tenants: prepared,
        })
    }

    /// The tenant Prometheus publishing Service `service` in `namespace`.
    pub fn tenant(&self, namespace: &str, service: &str) -> Option<&TenantPrometheus> {
        self.tenants
            .iter()
            .find(|t| t.spec.namespace == namespace && t.spec.service == service)
    }
}

/// The whole federation testbed: a [`PromfedMember`] for every member cluster of the
/// testbed, each with the same tenants (tenants span members, as in real fleets), and the
/// [`GlobalPrometheus`] on the management side.
#[derive(Debug)]
pub struct Promfed {
    /// One per member cluster, in the testbed's order.
    pub members: Vec<PromfedMember>,
    /// The global tier's Prometheus.
    pub global: GlobalPrometheus,
}

impl Promfed {
    /// Starts everything in parallel: for every member cluster a tenant Prometheus per
    /// entry of `tenants` (published as Services) and the federation Prometheus started
    /// with `member_options`, and the global Prometheus started with `global_options`.
    /// Reloaders' ConfigMap namespaces must exist (a missing ConfigMap is fine).
    pub async fn start(
        testbed: &Testbed,
        tenants: &[TenantSpec],
        member_options: &FederationOptions,
        global_options: &FederationOptions,
    ) -> Result<Self> {
        let members = try_join_all(
            testbed
                .members()
                .iter()
                .map(|cluster| PromfedMember::start(testbed, cluster, tenants, member_options)),
        );
        let global = FederationPrometheus::start_global(testbed, global_options);
        let (members, global) = tokio::try_join!(members, global)?;
        Ok(Self { members, global })
    }

    /// The setup of member cluster `cluster`.
    pub fn member(&self, cluster: &str) -> Option<&PromfedMember> {
        self.members.iter().find(|m| m.cluster == cluster)
    }

    /// The setup of member cluster `cluster`, to stop or resume its servers.
    pub fn member_mut(&mut self, cluster: &str) -> Option<&mut PromfedMember> {
        self.members.iter_mut().find(|m| m.cluster == cluster)
    }

    /// Each member's federation endpoint (`http://<address>:9090`, what
    /// `ManagedCluster.spec.federationEndpoint` names), by cluster name.
    pub fn federation_endpoints(&self) -> BTreeMap<String, String> {
        self.members
            .iter()
            .map(|m| (m.cluster.clone(), m.federation.url()))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// Prometheus HTTP API helpers.

/// A series' labels.
pub type Labels = BTreeMap<String, String>;
/// One sample of an instant query: the series' labels and its value.
pub type Sample = (Labels, f64);

#[derive(Deserialize)]
struct ApiResponse<T> {
    status: String,
    // A missing Option is None without `default` (which would demand `T: Default`).
    data: Option<T>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

async fn api_get<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
    query: &[(&str, &str)],
) -> Result<T> {
    let response = http
        .get(url)
        .query(query)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .with_context(|| format!("reading the answer of GET {url}"))?;
    let parsed: ApiResponse<T> = serde_json::from_str(&body)
        .with_context(|| format!("GET {url} answered {status}: {body}"))?;
    if parsed.status != "success" {
        bail!(
            "GET {url} failed ({status}, {}): {}",
            parsed.error_type.unwrap_or_default(),
            parsed.error.unwrap_or_default()
        );
    }
    parsed
        .data
        .with_context(|| format!("GET {url} answered without data"))
}

#[derive(Deserialize)]
struct QueryData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct VectorSample {
    metric: Labels,
    value: (f64, String),
}

/// Runs instant query `promql` on the Prometheus at `url` (`http://host:port`) and
/// returns the samples of the resulting vector (a scalar becomes one sample without
/// labels). Values such as `NaN` and `+Inf` parse as the matching `f64`.
pub async fn query(http: &reqwest::Client, url: &str, promql: &str) -> Result<Vec<Sample>> {
    let data: QueryData = api_get(http, &format!("{url}/api/v1/query"), &[("query", promql)])
        .await
        .with_context(|| format!("query {promql}"))?;
    parse_query_result(&data.result_type, data.result)
        .with_context(|| format!("query {promql} on {url}"))
}

fn parse_query_result(result_type: &str, result: serde_json::Value) -> Result<Vec<Sample>> {
    let value = |text: &str| -> Result<f64> {
        text.parse::<f64>()
            .with_context(|| format!("sample value {text:?}"))
    };
    match result_type {
        "vector" => {
            let samples: Vec<VectorSample> = serde_json::from_value(result)?;
            samples
                .into_iter()
                .map(|s| Ok((s.metric, value(&s.value.1)?)))
                .collect()
        }
        "scalar" => {
            let (_, text): (f64, String) = serde_json::from_value(result)?;
            Ok(vec![(Labels::new(), value(&text)?)])
        }
        other => bail!("expected a vector or scalar result, got {other}"),
    }
}

#[derive(Deserialize)]
struct ConfigData {
    yaml: String,
}

/// The configuration the Prometheus at `url` has loaded, as it reports it
/// (`/api/v1/status/config`, YAML).
pub async fn loaded_config(http: &reqwest::Client, url: &str) -> Result<String> {
    let data: ConfigData = api_get(http, &format!("{url}/api/v1/status/config"), &[]).await?;
    Ok(data.yaml)
}

#[derive(Deserialize)]
struct LoadedConfig {
    #[serde(default)]
    scrape_configs: Option<Vec<LoadedJob>>,
}

#[derive(Deserialize)]
struct LoadedJob {
    job_name: String,
}

/// The names of the scrape jobs in a configuration (YAML), in file order.
pub fn job_names(yaml: &str) -> Result<Vec<String>> {
    let config: LoadedConfig =
        serde_saphyr::from_str(yaml).context("parsing a Prometheus configuration")?;
    Ok(config
        .scrape_configs
        .unwrap_or_default()
        .into_iter()
        .map(|job| job.job_name)
        .collect())
}

/// The scrape job names the Prometheus at `url` has loaded, in its order.
pub async fn loaded_job_names(http: &reqwest::Client, url: &str) -> Result<Vec<String>> {
    job_names(&loaded_config(http, url).await?)
        .with_context(|| format!("the configuration loaded by {url}"))
}

/// One active scrape target, as `/api/v1/targets` reports it.
#[derive(Debug, Clone, Deserialize)]
pub struct ActiveTarget {
    /// The target's job (`scrapePool`).
    #[serde(rename = "scrapePool")]
    pub job: String,
    /// The URL scraped, with the rendered host name (`http://metrics.team-a.svc:9090/federate?…`).
    #[serde(rename = "scrapeUrl")]
    pub scrape_url: String,
    /// `up`, `down` or `unknown` (not scraped yet).
    pub health: String,
    /// The last scrape's error, empty when it succeeded.
    #[serde(rename = "lastError", default)]
    pub last_error: String,
    /// The target's labels after relabelling.
    #[serde(default)]
    pub labels: Labels,
}

#[derive(Deserialize)]
struct TargetsData {
    #[serde(rename = "activeTargets", default)]
    active_targets: Vec<ActiveTarget>,
}

/// The active scrape targets of the Prometheus at `url`.
pub async fn active_targets(http: &reqwest::Client, url: &str) -> Result<Vec<ActiveTarget>> {
    let data: TargetsData = api_get(
        http,
        &format!("{url}/api/v1/targets"),
        &[("state", "active")],
    )
    .await?;
    Ok(data.active_targets)
}

/// Waits until instant query `promql` on the Prometheus at `url` returns samples that
/// satisfy `predicate`, and returns them; fails after `timeout` with the last result (or
/// query error) seen. Query errors (Prometheus restarting, say) are retried.
pub async fn wait_for_series<P>(
    http: &reqwest::Client,
    url: &str,
    promql: &str,
    timeout: Duration,
    predicate: P,
) -> Result<Vec<Sample>>
where
    P: Fn(&[Sample]) -> bool,
{
    wait::until(&format!("{promql} on {url}"), timeout, || async {
        Ok(match query(http, url, promql).await {
            Ok(samples) if predicate(&samples) => Check::Ready(samples),
            Ok(samples) => Check::NotYet(format!("result {}", format_samples(&samples))),
            Err(e) => Check::NotYet(format!("{e:#}")),
        })
    })
    .await
}

/// Samples as `name{a="1"} = 2` lines, for failure messages.
pub fn format_samples(samples: &[Sample]) -> String {
    if samples.is_empty() {
        return "(empty)".to_owned();
    }
    samples
        .iter()
        .map(|(labels, value)| {
            let name = labels.get("__name__").map(String::as_str).unwrap_or("");
            let labels: Vec<String> = labels
                .iter()
                .filter(|(k, _)| *k != "__name__")
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect();
            format!("{name}{{{}}} = {value}", labels.join(","))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt as _;

    #[test]
    fn loopback_addresses_are_distinct_bindable_and_never_127_0_0_1() {
        let addresses: Vec<Ipv4Addr> = (0..20)
            .map(|_| loopback_address(PROMETHEUS_PORT).unwrap())
            .collect();
        let unique: HashSet<&Ipv4Addr> = addresses.iter().collect();
        assert_eq!(unique.len(), addresses.len());
        for address in &addresses {
            assert!(address.is_loopback(), "{address}");
            assert_ne!(address.octets()[1], 0, "{address} is in 127.0.0.0/16");
            let listener = TcpListener::bind((*address, PROMETHEUS_PORT)).unwrap();
            drop(listener);
        }
    }

    #[test]
    fn processes_with_different_ids_get_disjoint_blocks() {
        let blocks: HashSet<[u8; 3]> = (0..32768).map(block_of).collect();
        assert_eq!(blocks.len(), 32768);
        assert!(blocks.iter().all(|b| (64..192).contains(&b[1])));
    }

    #[test]
    fn an_address_taken_by_another_process_is_skipped() {
        let [a, b, c] = block_of(std::process::id());
        let next = NEXT_OCTET.load(Ordering::Relaxed) % ADDRESSES_PER_PROCESS + 1;
        let taken = Ipv4Addr::new(a, b, c, next as u8);
        // Port 9091 keeps this test apart from the others' port 9090.
        let _listener = TcpListener::bind((taken, 9091)).unwrap();
        let address = loopback_address(9091).unwrap();
        assert_ne!(address, taken);
    }

    #[test]
    fn hosts_file_is_rewritten_in_place_with_both_service_names() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = HostsFile::create(&dir.path().join("hosts")).unwrap();
        let inode = fs::metadata(hosts.path()).unwrap().ino();
        let address = Ipv4Addr::new(127, 70, 1, 2);
        hosts.insert_service("metrics", "team-a", address).unwrap();
        let text = fs::read_to_string(hosts.path()).unwrap();
        assert!(text.starts_with("127.0.0.1 localhost\n"), "{text}");
        assert!(
            text.contains("127.70.1.2 metrics.team-a.svc metrics.team-a.svc.cluster.local\n"),
            "{text}"
        );
        hosts.remove_service("metrics", "team-a").unwrap();
        let text = fs::read_to_string(hosts.path()).unwrap();
        assert!(!text.contains("metrics.team-a"), "{text}");
        assert_eq!(fs::metadata(hosts.path()).unwrap().ino(), inode);
    }

    #[test]
    fn hosts_command_mounts_the_file_then_execs_the_program() {
        let hosts = HostsFile {
            path: PathBuf::from("/x/hosts"),
            entries: Mutex::default(),
        };
        let command = hosts.command(Path::new("/usr/bin/prometheus"));
        assert_eq!(command.get_program(), "unshare");
        let args: Vec<_> = command.get_args().map(|a| a.to_string_lossy()).collect();
        assert_eq!(
            args[..5],
            ["--user", "--map-root-user", "--mount", "--", "sh"]
        );
        assert_eq!(args[args.len() - 2..], ["/x/hosts", "/usr/bin/prometheus"]);
    }

    #[test]
    fn tenant_configuration_labels_its_jobs_with_their_namespaces() {
        let spec = TenantSpec::new("team-a", "metrics").leaking("team-b");
        let config = render_tenant_config("127.70.0.1:9090", &spec);
        assert_eq!(job_names(&config).unwrap(), [TENANT_JOB, LEAK_JOB]);
        assert!(config.contains("namespace: 'team-a'"), "{config}");
        assert!(config.contains("namespace: 'team-b'"), "{config}");
        let plain = render_tenant_config("127.70.0.1:9090", &TenantSpec::new("team-a", "m"));
        assert_eq!(job_names(&plain).unwrap(), [TENANT_JOB]);
    }

    #[test]
    fn tenant_configuration_passes_promtool() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("prometheus.yml");
        let spec = TenantSpec::new("team-a", "metrics").leaking("team-b");
        fs::write(&file, render_tenant_config("127.70.0.1:9090", &spec)).unwrap();
        let output = Command::new("promtool")
            .args(["check", "config", "--syntax-only"])
            .arg(&file)
            .output()
            .expect("promtool (Debian package prometheus) is installed");
        assert!(
            output.status.success(),
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    #[test]
    fn the_empty_configuration_has_no_jobs() {
        assert!(
            job_names(&accord_common::promfed::empty_config())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn durations_render_in_seconds_when_whole() {
        assert_eq!(duration_text(Duration::from_secs(1)), "1s");
        assert_eq!(duration_text(Duration::from_millis(250)), "250ms");
        assert_eq!(duration_text(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn query_results_parse_vectors_scalars_and_special_values() {
        let vector = serde_json::json!([
            {"metric": {"__name__": "up", "job": "a"}, "value": [1.5, "1"]},
            {"metric": {"job": "b"}, "value": [1.5, "NaN"]},
            {"metric": {}, "value": [1.5, "+Inf"]},
        ]);
        let samples = parse_query_result("vector", vector).unwrap();
        assert_eq!(samples[0].0["job"], "a");
        assert_eq!(samples[0].1, 1.0);
        assert!(samples[1].1.is_nan());
        assert_eq!(samples[2].1, f64::INFINITY);
        let scalar = parse_query_result("scalar", serde_json::json!([1.5, "3"])).unwrap();
        assert_eq!(scalar, vec![(Labels::new(), 3.0)]);
        assert!(parse_query_result("matrix", serde_json::json!([])).is_err());
    }
}
