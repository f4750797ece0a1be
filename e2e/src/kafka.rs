//! Kafka clusters in KRaft mode for the testbed, run from the jars `build.sh` fetched from
//! Maven Central: one or three nodes per member cluster, each node a combined broker and
//! controller (three voters when three nodes), brokers talking to each other over
//! PLAINTEXT, and optionally a SASL_SSL listener per broker with a SCRAM-SHA-512 user
//! created when the storage is formatted and a serving certificate from a throwaway CA.

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::fs;
use std::hash::BuildHasher as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::future::try_join_all;
use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;

use crate::binaries::Binaries;
use crate::pki::CertificateAuthority;
use crate::ports::free_port;
use crate::process::{ProcessId, Supervisor};
use crate::wait::{self, Check};

/// How long formatting the storage directory may take.
const FORMAT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the brokers may take to answer metadata requests listing each other.
const READY_TIMEOUT: Duration = Duration::from_secs(180);
/// The SCRAM-SHA-512 user created at format time on clusters with a SASL_SSL listener.
pub const SCRAM_USERNAME: &str = "accord";
/// JVM options besides the heap: start-up speed over peak throughput.
const JVM_OPTIONS: &[&str] = &["-Xms64m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"];

/// The heap of a test's broker: small, since up to nine brokers share the machine with
/// everything else and a test creates a few topics.
pub const TEST_HEAP_MIB: u32 = 384;

/// The heap `kafka-server-start.sh` gives a broker unless told otherwise (1 GiB), which the
/// benchmarks use: a broker holding thousands of partitions in the tests' heap spends its
/// time in full collections (old generation 92–100 % full, one stop-the-world collection
/// after another, in a `kafka-bench --topics 1000` run).
pub const KAFKA_DEFAULT_HEAP_MIB: u32 = 1024;

/// Stops the JIT at its first tier: a broker starts and answers a test's few requests
/// sooner, but works several times slower under sustained load.
const QUICK_START_JIT: &str = "-XX:TieredStopAtLevel=1";

const LOG4J2_PROPERTIES: &str = "\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.state-change.name = state.change.logger
logger.state-change.level = WARN
";

/// A running single-broker cluster, as [`start`] gives it.
#[derive(Debug, Clone)]
pub struct KafkaBroker {
    /// `127.0.0.1:<port>` for `bootstrap.servers`.
    pub bootstrap: String,
    /// The supervised JVM.
    pub process: ProcessId,
    /// The broker's configuration file.
    pub config_file: PathBuf,
}

/// The shape of a cluster [`start_cluster`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KafkaOptions {
    /// Number of nodes, each a broker and a controller: 1 or 3.
    pub brokers: usize,
    /// Whether every broker also listens for SASL_SSL with SCRAM-SHA-512 (and for SSL
    /// without SASL, with the same certificate).
    pub sasl_ssl: bool,
    /// The JVM's full JIT, as in production (benchmarks); tests start quicker without it.
    pub full_jit: bool,
    /// Each broker's maximum heap, in MiB.
    pub heap_mib: u32,
}

impl Default for KafkaOptions {
    fn default() -> Self {
        Self {
            brokers: 1,
            sasl_ssl: false,
            full_jit: false,
            heap_mib: TEST_HEAP_MIB,
        }
    }
}

/// One node's ports and files.
#[derive(Debug, Clone)]
struct Node {
    id: u32,
    component: String,
    broker_port: u16,
    controller_port: u16,
    sasl_ssl_port: Option<u16>,
    ssl_port: Option<u16>,
    config_file: PathBuf,
}

/// A running Kafka cluster.
#[derive(Clone)]
pub struct KafkaCluster {
    /// Every broker's PLAINTEXT address, comma separated, for `bootstrap.servers`.
    pub bootstrap: String,
    /// Every broker's SASL_SSL address, comma separated, when enabled.
    pub sasl_ssl_bootstrap: Option<String>,
    /// Every broker's SSL (TLS without SASL) address, comma separated, with SASL_SSL.
    pub ssl_bootstrap: Option<String>,
    /// The CA certificate (PEM) the SASL_SSL listeners' certificates chain to.
    pub ca_pem: Option<String>,
    /// The SCRAM-SHA-512 user name, when SASL_SSL is enabled.
    pub username: Option<String>,
    /// That user's password (random per cluster), when SASL_SSL is enabled.
    pub password: Option<String>,
    /// The supervised JVM of each broker, in node id order (node `i + 1`); kept current by
    /// [`KafkaCluster::start`].
    pub processes: Vec<ProcessId>,
    nodes: Vec<Node>,
    launcher: Arc<Launcher>,
    /// The CA certificate's file, for Kafka's tools (`ssl.truststore.location`).
    ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for KafkaCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaCluster")
            .field("bootstrap", &self.bootstrap)
            .field("sasl_ssl_bootstrap", &self.sasl_ssl_bootstrap)
            .field("username", &self.username)
            .field("processes", &self.processes)
            .finish_non_exhaustive()
    }
}

/// How to run Kafka's JVM for one cluster.
struct Launcher {
    java: PathBuf,
    full_jit: bool,
    heap_mib: u32,
    kafka_lib: PathBuf,
    log4j: PathBuf,
    logs_dir: PathBuf,
}

impl Launcher {
    fn command(&self, main_class: &str) -> Command {
        let mut command = Command::new(&self.java);
        command
            .args(JVM_OPTIONS)
            .arg(format!("-Xmx{}m", self.heap_mib));
        if !self.full_jit {
            command.arg(QUICK_START_JIT);
        }
        command
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                self.log4j.display()
            ))
            .arg(format!("-Dkafka.logs.dir={}", self.logs_dir.display()))
            .arg("-cp")
            .arg(format!("{}/*", self.kafka_lib.display()))
            .arg(main_class);
        command
    }
}

/// What goes into one node's `server.properties`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeProperties<'a> {
    /// This node's id (1-based).
    pub node_id: u32,
    /// Every voter as `(node id, controller port)`.
    pub voters: &'a [(u32, u16)],
    /// The PLAINTEXT broker port.
    pub broker_port: u16,
    /// The controller port.
    pub controller_port: u16,
    /// The SASL_SSL port, the SSL port and the PEM keystore file (key and certificate
    /// chain) both use, if any.
    pub sasl_ssl: Option<(u16, u16, &'a Path)>,
    /// The data directory.
    pub log_dir: &'a Path,
}

/// Renders `server.properties` for a combined broker and controller.
pub fn render_node_properties(node: &NodeProperties<'_>) -> String {
    let NodeProperties {
        node_id,
        voters,
        broker_port,
        controller_port,
        sasl_ssl,
        log_dir,
    } = node;
    let voters_list = voters
        .iter()
        .map(|(id, port)| format!("{id}@127.0.0.1:{port}"))
        .collect::<Vec<_>>()
        .join(",");
    // Internal topics as replicated as the cluster allows.
    let replication = voters.len();
    let mut listeners =
        format!("PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}");
    let mut advertised = format!("PLAINTEXT://127.0.0.1:{broker_port}");
    let mut protocol_map = String::from("CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT");
    let mut sasl = String::new();
    if let Some((port, ssl_port, keystore)) = sasl_ssl {
        let extra = format!(",SASL_SSL://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}");
        listeners.push_str(&extra);
        advertised.push_str(&extra);
        protocol_map.push_str(",SASL_SSL:SASL_SSL,SSL:SSL");
        sasl = format!(
            "sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location={keystore}
listener.name.ssl.ssl.keystore.type=PEM
listener.name.ssl.ssl.keystore.location={keystore}
",
            keystore = keystore.display()
        );
    }
    format!(
        "process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={voters_list}
listeners={listeners}
advertised.listeners={advertised}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map={protocol_map}
{sasl}log.dirs={log_dir}
num.partitions=1
offsets.topic.replication.factor={replication}
transaction.state.log.replication.factor={replication}
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor={replication}
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
",
        log_dir = log_dir.display()
    )
}

/// Renders `server.properties` for a lone combined broker and controller (node 1).
pub fn render_server_properties(broker_port: u16, controller_port: u16, log_dir: &Path) -> String {
    render_node_properties(&NodeProperties {
        node_id: 1,
        voters: &[(1, controller_port)],
        broker_port,
        controller_port,
        sasl_ssl: None,
        log_dir,
    })
}

/// A fresh Kafka cluster id: 16 random bytes, base64url without padding, never starting
/// with `-` (the storage tool would read the id as a flag, as Kafka's own generator knows).
fn random_cluster_id() -> String {
    let mut bytes = [0u8; 16];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        let value = RandomState::new().hash_one(i);
        chunk.copy_from_slice(&value.to_le_bytes());
    }
    // The first character encodes the top six bits; below 32 it is a letter (A–f).
    bytes[0] &= 0x7F;
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A random password of letters and digits (nothing the `--add-scram` syntax would
/// need quoted).
fn random_password() -> String {
    let mut bytes = [0u8; 24];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&RandomState::new().hash_one(i).to_le_bytes());
    }
    URL_SAFE_NO_PAD
        .encode(bytes)
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect()
}

/// Formats the storage of and starts a one-broker PLAINTEXT cluster for member `name`,
/// in `dir`.
pub async fn start(
    supervisor: &Supervisor,
    binaries: &Binaries,
    name: &str,
    dir: &Path,
) -> Result<KafkaBroker> {
    let cluster = start_cluster(supervisor, binaries, name, dir, KafkaOptions::default()).await?;
    Ok(KafkaBroker {
        bootstrap: cluster.bootstrap.clone(),
        process: cluster.processes[0],
        config_file: cluster.nodes[0].config_file.clone(),
    })
}

/// Formats the storage of and starts a cluster for member `name`, in `dir`: every node
/// formatted and started at once, ready when the PLAINTEXT metadata lists every broker.
pub async fn start_cluster(
    supervisor: &Supervisor,
    binaries: &Binaries,
    name: &str,
    dir: &Path,
    options: KafkaOptions,
) -> Result<KafkaCluster> {
    ensure!(
        matches!(options.brokers, 1 | 3),
        "a testbed Kafka cluster has 1 or 3 brokers, not {}",
        options.brokers
    );
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let log4j = dir.join("log4j2.properties");
    fs::write(&log4j, LOG4J2_PROPERTIES)?;
    let launcher = Arc::new(Launcher {
        java: binaries.java.clone(),
        full_jit: options.full_jit,
        heap_mib: options.heap_mib,
        kafka_lib: binaries.kafka_lib.clone(),
        log4j,
        logs_dir: dir.join("logs"),
    });

    let (ca_pem, keystore) = if options.sasl_ssl {
        let ca = CertificateAuthority::new(&format!("accord-testbed-kafka-{name}"))?;
        let serving = ca.issue_server("kafka", &["127.0.0.1", "localhost"])?;
        let keystore = dir.join("keystore.pem");
        // Kafka's PEM key store: the (unencrypted PKCS#8) key and the certificate chain.
        fs::write(
            &keystore,
            format!("{}{}", serving.key_pem, serving.cert_pem),
        )?;
        fs::write(dir.join("ca.crt"), ca.cert_pem())?;
        (Some(ca.cert_pem()), Some(keystore))
    } else {
        (None, None)
    };
    let ca_file = ca_pem.as_ref().map(|_| dir.join("ca.crt"));
    let password = options.sasl_ssl.then(random_password);

    let single = options.brokers == 1;
    let mut nodes = Vec::new();
    for id in 1..=options.brokers as u32 {
        let node_dir = if single {
            dir.to_path_buf()
        } else {
            dir.join(format!("node-{id}"))
        };
        fs::create_dir_all(&node_dir)?;
        nodes.push(Node {
            id,
            component: if single {
                format!("{name}/kafka")
            } else {
                format!("{name}/kafka-{id}")
            },
            broker_port: free_port()?,
            controller_port: free_port()?,
            sasl_ssl_port: options.sasl_ssl.then(free_port).transpose()?,
            ssl_port: options.sasl_ssl.then(free_port).transpose()?,
            config_file: node_dir.join("server.properties"),
        });
    }
    let voters: Vec<(u32, u16)> = nodes.iter().map(|n| (n.id, n.controller_port)).collect();
    for node in &nodes {
        let log_dir = node.config_file.with_file_name("data");
        let properties = render_node_properties(&NodeProperties {
            node_id: node.id,
            voters: &voters,
            broker_port: node.broker_port,
            controller_port: node.controller_port,
            sasl_ssl: match (node.sasl_ssl_port, node.ssl_port, keystore.as_deref()) {
                (Some(port), Some(ssl_port), Some(keystore)) => Some((port, ssl_port, keystore)),
                _ => None,
            },
            log_dir: &log_dir,
        });
        fs::write(&node.config_file, properties)?;
    }

    let cluster_id = random_cluster_id();
    try_join_all(nodes.iter().map(|node| {
        let mut format = launcher.command("kafka.tools.StorageTool");
        format
            .arg("format")
            .arg("--cluster-id")
            .arg(&cluster_id)
            .arg("--config")
            .arg(&node.config_file);
        if let Some(password) = &password {
            format.arg("--add-scram").arg(format!(
                "SCRAM-SHA-512=[name={SCRAM_USERNAME},password={password}]"
            ));
        }
        let component = format!("{}-format", node.component);
        async move {
            supervisor
                .run_to_completion(&component, format, FORMAT_TIMEOUT)
                .await
        }
    }))
    .await?;

    let mut processes = Vec::new();
    for node in &nodes {
        processes.push(spawn_node(supervisor, &launcher, node)?);
    }
    let join = |addr: fn(&Node) -> Option<String>| {
        let list: Option<Vec<String>> = nodes.iter().map(addr).collect();
        list.map(|l| l.join(","))
    };
    let cluster = KafkaCluster {
        bootstrap: join(|n| Some(format!("127.0.0.1:{}", n.broker_port))).unwrap_or_default(),
        sasl_ssl_bootstrap: join(|n| n.sasl_ssl_port.map(|p| format!("127.0.0.1:{p}"))),
        ssl_bootstrap: join(|n| n.ssl_port.map(|p| format!("127.0.0.1:{p}"))),
        ca_pem,
        username: options.sasl_ssl.then(|| SCRAM_USERNAME.to_string()),
        password,
        processes,
        nodes,
        launcher,
        ca_file,
    };
    let all: Vec<u32> = cluster.nodes.iter().map(|n| n.id).collect();
    cluster.wait_listed(supervisor, &all).await?;
    Ok(cluster)
}

fn spawn_node(supervisor: &Supervisor, launcher: &Launcher, node: &Node) -> Result<ProcessId> {
    let mut broker = launcher.command("kafka.Kafka");
    broker.arg(&node.config_file);
    supervisor.spawn(&node.component, broker)
}

impl KafkaCluster {
    /// Number of brokers.
    pub fn brokers(&self) -> usize {
        self.nodes.len()
    }

    /// Broker `index`'s (0-based; node id `index + 1`) PLAINTEXT address.
    pub fn broker_address(&self, index: usize) -> String {
        format!("127.0.0.1:{}", self.nodes[index].broker_port)
    }

    /// Stops broker `index` (0-based); its data stays for [`KafkaCluster::start`].
    pub fn stop(&self, supervisor: &Supervisor, index: usize) {
        supervisor.stop(self.processes[index]);
    }

    /// Starts broker `index` (0-based) again on its data and ports, and waits until the
    /// cluster's metadata lists it.
    pub async fn start(&mut self, supervisor: &Supervisor, index: usize) -> Result<()> {
        let node = &self.nodes[index];
        ensure!(
            supervisor.exit_status(self.processes[index])?.is_some(),
            "{} is still running",
            node.component
        );
        self.processes[index] = spawn_node(supervisor, &self.launcher, node)?;
        let id = node.id;
        self.wait_listed(supervisor, &[id]).await
    }

    /// The agent Secret's data for this cluster (see `accord_kafka::KafkaConfig::
    /// from_properties`): PLAINTEXT, or SASL_SSL with SCRAM-SHA-512, the user and the CA.
    pub fn secret_data(&self, sasl: bool) -> BTreeMap<String, String> {
        let mut data = BTreeMap::new();
        match (sasl, &self.sasl_ssl_bootstrap) {
            (true, Some(bootstrap)) => {
                data.insert("bootstrap.servers".into(), bootstrap.clone());
                data.insert("security.protocol".into(), "SASL_SSL".into());
                data.insert("sasl.mechanism".into(), "SCRAM-SHA-512".into());
                data.insert(
                    "sasl.username".into(),
                    self.username.clone().unwrap_or_default(),
                );
                data.insert(
                    "sasl.password".into(),
                    self.password.clone().unwrap_or_default(),
                );
                data.insert("ca.crt".into(), self.ca_pem.clone().unwrap_or_default());
            }
            _ => {
                data.insert("bootstrap.servers".into(), self.bootstrap.clone());
                data.insert("security.protocol".into(), "PLAINTEXT".into());
            }
        }
        data
    }

    /// Client properties for Kafka's own tools (`--command-config`) on the SASL_SSL
    /// listener: SCRAM-SHA-512 as the cluster's user with `password` (the real one when
    /// `None`), trusting the cluster's CA. `None` without SASL_SSL.
    pub fn tool_sasl_properties(&self, password: Option<&str>) -> Option<String> {
        let ca_file = self.ca_file.as_ref()?;
        let username = self.username.as_deref()?;
        let password = password.or(self.password.as_deref())?;
        Some(format!(
            "security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{username}\" password=\"{password}\";
ssl.truststore.type=PEM
ssl.truststore.location={}
",
            ca_file.display()
        ))
    }

    /// Waits until a PLAINTEXT metadata request (by an independent client) lists every
    /// broker in `ids`, failing early when one of their JVMs exits.
    async fn wait_listed(&self, supervisor: &Supervisor, ids: &[u32]) -> Result<()> {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("reconnect.backoff.ms", "50")
            .set("reconnect.backoff.max.ms", "500")
            .create()
            .context("creating a Kafka admin client")?;
        let admin = Arc::new(admin);
        let watched: Vec<ProcessId> = self
            .nodes
            .iter()
            .zip(&self.processes)
            .filter(|(n, _)| ids.contains(&n.id))
            .map(|(_, p)| *p)
            .collect();
        let name = supervisor.info(watched[0]).name;
        wait::until(
            &format!("{name}: brokers {ids:?} in the metadata"),
            READY_TIMEOUT,
            || {
                let admin = admin.clone();
                let watched = &watched;
                async move {
                    for process in watched {
                        supervisor.ensure_running(*process)?;
                    }
                    let metadata = tokio::task::spawn_blocking(move || {
                        admin.inner().fetch_metadata(None, Duration::from_secs(1))
                    })
                    .await?;
                    Ok(match metadata {
                        Ok(m) => {
                            let listed: Vec<i32> = m.brokers().iter().map(|b| b.id()).collect();
                            if ids.iter().all(|id| listed.contains(&(*id as i32))) {
                                Check::Ready(())
                            } else {
                                Check::NotYet(format!("metadata lists brokers {listed:?}"))
                            }
                        }
                        Err(e) => Check::NotYet(e.to_string()),
                    })
                }
            },
        )
        .await
    }
}

/// How long one run of a Kafka tool may take (a JVM start and one request).
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs Kafka's own `kafka-configs` tool (`kafka.admin.ConfigCommand`, from the brokers'
/// jars) against `bootstrap`, with `client_properties` as its `--command-config` if given,
/// and returns its standard output; fails with its output when it fails. An independent
/// check of what the brokers hold.
pub async fn config_command(
    binaries: &Binaries,
    bootstrap: &str,
    client_properties: Option<&str>,
    args: &[&str],
) -> Result<String> {
    let properties = match client_properties {
        Some(text) => {
            let file = tempfile::NamedTempFile::new()?;
            fs::write(file.path(), text)?;
            Some(file)
        }
        None => None,
    };
    let mut command = tokio::process::Command::new(&binaries.java);
    command
        .args([
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
        ])
        .arg(format!("{}/*", binaries.kafka_lib.display()))
        .arg("kafka.admin.ConfigCommand")
        .args(["--bootstrap-server", bootstrap]);
    if let Some(file) = &properties {
        command.arg("--command-config").arg(file.path());
    }
    command.args(args).kill_on_drop(true);
    let output = tokio::time::timeout(TOOL_TIMEOUT, command.output())
        .await
        .with_context(|| format!("kafka-configs {args:?} took over {TOOL_TIMEOUT:?}"))?
        .context("running kafka-configs (java)")?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    ensure!(
        output.status.success(),
        "kafka-configs {args:?} failed ({}): {stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(stdout)
}

/// A topic's dynamic (topic-level) configs as `kafka-configs --describe --entity-type
/// topics --entity-name NAME` prints them (`  key=value sensitive=… synonyms={…}`).
pub async fn topic_overrides(
    binaries: &Binaries,
    bootstrap: &str,
    client_properties: Option<&str>,
    topic: &str,
) -> Result<BTreeMap<String, String>> {
    let stdout = config_command(
        binaries,
        bootstrap,
        client_properties,
        &[
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
        ],
    )
    .await?;
    Ok(parse_config_command_describe(&stdout))
}

/// The `key=value` pairs of a `kafka-configs --describe` output.
pub fn parse_config_command_describe(stdout: &str) -> BTreeMap<String, String> {
    stdout
        .lines()
        .filter(|line| line.starts_with("  "))
        .filter_map(|line| {
            let entry = line.trim_start();
            let entry = entry.split(" sensitive=").next()?;
            let (key, value) = entry.split_once('=')?;
            Some((key.to_string(), value.to_string()))
        })
        .collect()
}

/// An rdkafka admin client for `bootstrap` (PLAINTEXT): the independent client tests check
/// Accord's work with.
pub fn rdkafka_admin(bootstrap: &str) -> Result<AdminClient<DefaultClientContext>> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .context("creating an rdkafka admin client")
}

/// Every config entry of topic `name` as rdkafka describes it.
pub async fn rdkafka_topic_configs(
    admin: &AdminClient<DefaultClientContext>,
    name: &str,
) -> Result<Vec<rdkafka::admin::ConfigEntry>> {
    let results = admin
        .describe_configs(
            &[rdkafka::admin::ResourceSpecifier::Topic(name)],
            &rdkafka::admin::AdminOptions::new().request_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .with_context(|| format!("describing the configs of {name}"))?;
    let resource = results
        .into_iter()
        .next()
        .context("no result")?
        .map_err(|e| anyhow::anyhow!("describing the configs of {name}: {e}"))?;
    Ok(resource.entries)
}

/// A Kafka cluster with a supervisor of its own, shared by the tests of one binary: tests
/// that need every broker take the cluster shared, a test that stops a broker takes it
/// exclusively.
pub struct SupervisedKafka {
    /// Supervises the brokers (and holds their logs).
    pub supervisor: Supervisor,
    /// The cluster.
    pub cluster: tokio::sync::RwLock<KafkaCluster>,
}

impl SupervisedKafka {
    /// Starts cluster `name` in `dir` (logs in `dir/logs`); `remove_on_abandon` is removed
    /// when the test process goes. A failed start says why with the brokers' log tails.
    pub async fn start(
        dir: &Path,
        remove_on_abandon: Option<&Path>,
        name: &str,
        options: KafkaOptions,
    ) -> Result<Self> {
        let supervisor = Supervisor::new(&dir.join("logs"), remove_on_abandon)?;
        let binaries = Binaries::locate()?;
        match start_cluster(&supervisor, &binaries, name, &dir.join("kafka"), options).await {
            Ok(cluster) => Ok(Self {
                supervisor,
                cluster: tokio::sync::RwLock::new(cluster),
            }),
            Err(e) => anyhow::bail!("{e:#}\n{}", supervisor.log_tails(40)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ids_never_start_with_a_dash() {
        for _ in 0..2000 {
            let id = random_cluster_id();
            assert!(id.starts_with(|c: char| c.is_ascii_alphabetic()), "{id}");
            assert_eq!(id.len(), 22);
        }
    }

    #[test]
    fn three_nodes_render_three_voters_and_fully_replicated_internal_topics() {
        let voters = [(1, 9101), (2, 9102), (3, 9103)];
        let keystore = Path::new("/tb/keystore.pem");
        let properties = render_node_properties(&NodeProperties {
            node_id: 2,
            voters: &voters,
            broker_port: 9002,
            controller_port: 9102,
            sasl_ssl: Some((9202, 9302, keystore)),
            log_dir: Path::new("/tb/node-2/data"),
        });
        let lines: Vec<&str> = properties.lines().collect();
        for expected in [
            "node.id=2",
            "controller.quorum.voters=1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103",
            "listeners=PLAINTEXT://127.0.0.1:9002,CONTROLLER://127.0.0.1:9102,SASL_SSL://127.0.0.1:9202,SSL://127.0.0.1:9302",
            "advertised.listeners=PLAINTEXT://127.0.0.1:9002,SASL_SSL://127.0.0.1:9202,SSL://127.0.0.1:9302",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL",
            "listener.name.ssl.ssl.keystore.location=/tb/keystore.pem",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "listener.name.sasl_ssl.ssl.keystore.location=/tb/keystore.pem",
            "offsets.topic.replication.factor=3",
            "log.dirs=/tb/node-2/data",
        ] {
            assert!(
                lines.contains(&expected),
                "missing {expected:?} in\n{properties}"
            );
        }
    }

    #[test]
    fn a_lone_node_has_no_sasl_listener() {
        let properties = render_server_properties(9092, 9093, Path::new("/d"));
        assert!(properties.contains("controller.quorum.voters=1@127.0.0.1:9093\n"));
        assert!(properties.contains("offsets.topic.replication.factor=1\n"));
        assert!(!properties.contains("SASL"), "{properties}");
    }

    #[test]
    fn scram_passwords_are_long_and_need_no_quoting() {
        let password = random_password();
        assert!(password.len() >= 24, "{password}");
        assert!(password.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(password, random_password());
    }

    #[test]
    fn config_command_output_is_read_as_key_value_pairs() {
        let stdout = "Dynamic configs for topic orders are:
  retention.ms=600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=600000, STATIC_BROKER_CONFIG:log.retention.ms=1}
  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete}
";
        let parsed = parse_config_command_describe(stdout);
        assert_eq!(parsed.len(), 2, "{parsed:?}");
        assert_eq!(parsed["retention.ms"], "600000");
        assert_eq!(parsed["cleanup.policy"], "compact,delete");
    }
}
