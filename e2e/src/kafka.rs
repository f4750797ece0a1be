//! Kafka clusters in KRaft mode for the testbed, run from the jars `build.sh` fetched from
//! Maven Central: one or three nodes per member cluster, each node a combined broker and
//! controller (three voters when three nodes), brokers talking to each other over
//! PLAINTEXT, and optionally a SASL_SSL listener per broker with a SCRAM-SHA-512 user
//! created when the storage is formatted and a serving certificate from a throwaway CA, and
//! optionally KRaft's ACL authorizer. Kafka's own tools (kafka-configs, kafka-acls, the
//! verifiable producer) check from outside what the brokers hold.

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::fs;
use std::hash::BuildHasher as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use accord_kafka::KafkaConfig;
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

impl KafkaOptions {
    /// These options with KRaft's ACL authorizer on (see [`ClusterOptions::authorizer`]).
    pub fn with_authorizer(self) -> ClusterOptions {
        ClusterOptions {
            shape: self,
            authorizer: true,
        }
    }
}

/// Everything [`start_cluster`] takes: the cluster's shape and whether its brokers enforce
/// ACLs. Kept apart from [`KafkaOptions`] so that code spelling out every field of that
/// (`kafka-bench`) need not change for a switch only the ACL tests use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterOptions {
    /// Brokers, listeners, JIT and heap.
    pub shape: KafkaOptions,
    /// Whether the brokers run KRaft's `StandardAuthorizer` and refuse whatever no ACL
    /// allows (requires `sasl_ssl`). The SCRAM user ([`SCRAM_USERNAME`]) is a super user,
    /// and so is `User:ANONYMOUS`, the principal of the PLAINTEXT controller and
    /// inter-broker listeners, without which the cluster could not run: so only clients on
    /// the SASL_SSL listener meet the ACLs (the PLAINTEXT and SSL listeners stay open).
    pub authorizer: bool,
}

impl From<KafkaOptions> for ClusterOptions {
    fn from(shape: KafkaOptions) -> Self {
        Self {
            shape,
            authorizer: false,
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
    /// Whether KRaft's ACL authorizer runs (see [`ClusterOptions::authorizer`]).
    pub authorizer: bool,
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
        authorizer,
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
    // Super users: the testbed's SCRAM user (the agent's), and the unauthenticated
    // principal of the PLAINTEXT controller and inter-broker listeners, without which the
    // brokers could neither register nor replicate.
    let authorization = if *authorizer {
        format!(
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:ANONYMOUS;User:{SCRAM_USERNAME}
"
        )
    } else {
        String::new()
    };
    format!(
        "process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={voters_list}
listeners={listeners}
advertised.listeners={advertised}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map={protocol_map}
{sasl}{authorization}log.dirs={log_dir}
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
        authorizer: false,
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
/// `options` is [`KafkaOptions`], or [`ClusterOptions`] for the ACL authorizer.
pub async fn start_cluster(
    supervisor: &Supervisor,
    binaries: &Binaries,
    name: &str,
    dir: &Path,
    options: impl Into<ClusterOptions>,
) -> Result<KafkaCluster> {
    let ClusterOptions {
        shape: options,
        authorizer,
    } = options.into();
    ensure!(
        matches!(options.brokers, 1 | 3),
        "a testbed Kafka cluster has 1 or 3 brokers, not {}",
        options.brokers
    );
    ensure!(
        options.sasl_ssl || !authorizer,
        "the ACL authorizer needs the SASL_SSL listener: elsewhere every client is a super user"
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
            authorizer,
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

    /// An `accord-kafka` configuration for the SASL_SSL listener as SCRAM-SHA-512 user
    /// `username` with `password` (the agent Secret's data with another user). Fails
    /// without SASL_SSL.
    pub fn sasl_config_as(&self, username: &str, password: &str) -> Result<KafkaConfig> {
        ensure!(
            self.sasl_ssl_bootstrap.is_some(),
            "the cluster has no SASL_SSL listener"
        );
        let mut data = self.secret_data(true);
        data.insert("sasl.username".into(), username.into());
        data.insert("sasl.password".into(), password.into());
        Ok(KafkaConfig::from_properties(&data)?)
    }

    /// Client properties for Kafka's own tools (`--command-config`) on the SASL_SSL
    /// listener: SCRAM-SHA-512 as the cluster's user with `password` (the real one when
    /// `None`), trusting the cluster's CA. `None` without SASL_SSL.
    pub fn tool_sasl_properties(&self, password: Option<&str>) -> Option<String> {
        let username = self.username.as_deref()?;
        let password = password.or(self.password.as_deref())?;
        self.tool_sasl_properties_as(username, password)
    }

    /// Client properties for Kafka's own tools on the SASL_SSL listener as another SCRAM-
    /// SHA-512 user (one a test created), trusting the cluster's CA. `None` without
    /// SASL_SSL. The user name and password must need no quoting.
    pub fn tool_sasl_properties_as(&self, username: &str, password: &str) -> Option<String> {
        let ca_file = self.ca_file.as_ref()?;
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

/// One of Kafka's command-line tools, run from the jars with `java -cp`.
struct Tool {
    /// The script's name, for messages.
    name: &'static str,
    /// Its main class in Kafka 4.1.
    main_class: &'static str,
    /// The flag naming a client properties file.
    config_flag: &'static str,
    /// Whether it lives in `kafka-tools-*.jar`, which the brokers themselves do not need.
    in_tools_jar: bool,
}

/// `kafka-configs`: still in the broker's own jar in Kafka 4.
const KAFKA_CONFIGS: Tool = Tool {
    name: "kafka-configs",
    main_class: "kafka.admin.ConfigCommand",
    config_flag: "--command-config",
    in_tools_jar: false,
};

/// `kafka-acls`: moved from `kafka.admin.AclCommand` to `kafka-tools` in Kafka 4.
const KAFKA_ACLS: Tool = Tool {
    name: "kafka-acls",
    main_class: "org.apache.kafka.tools.AclCommand",
    config_flag: "--command-config",
    in_tools_jar: true,
};

/// `kafka-verifiable-producer`: Kafka's own producer, reporting each send as a JSON line.
const KAFKA_VERIFIABLE_PRODUCER: Tool = Tool {
    name: "kafka-verifiable-producer",
    main_class: "org.apache.kafka.tools.VerifiableProducer",
    config_flag: "--producer.config",
    in_tools_jar: true,
};

/// Runs `tool` against `bootstrap`, with `client_properties` as its properties file if
/// given, and returns its standard output; fails with its output when it exits non-zero.
async fn run_tool(
    tool: &Tool,
    binaries: &Binaries,
    bootstrap: &str,
    client_properties: Option<&str>,
    args: &[&str],
) -> Result<String> {
    let name = tool.name;
    if tool.in_tools_jar {
        let has_tools = fs::read_dir(&binaries.kafka_lib)
            .with_context(|| format!("listing {}", binaries.kafka_lib.display()))?
            .filter_map(|entry| entry.ok())
            .any(|entry| {
                let file = entry.file_name();
                let file = file.to_string_lossy();
                file.starts_with("kafka-tools-") && !file.starts_with("kafka-tools-api")
            });
        ensure!(
            has_tools,
            "{name} ({}) is in org.apache.kafka:kafka-tools, whose jar is not in {}: \
             e2e/testbed/build.sh must fetch it next to the broker's jars",
            tool.main_class,
            binaries.kafka_lib.display()
        );
    }
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
        .arg(tool.main_class)
        .args(["--bootstrap-server", bootstrap]);
    if let Some(file) = &properties {
        command.arg(tool.config_flag).arg(file.path());
    }
    command.args(args).kill_on_drop(true);
    let output = tokio::time::timeout(TOOL_TIMEOUT, command.output())
        .await
        .with_context(|| format!("{name} {args:?} took over {TOOL_TIMEOUT:?}"))?
        .with_context(|| format!("running {name} (java)"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    ensure!(
        output.status.success(),
        "{name} {args:?} failed ({}): {stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(stdout)
}

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
    run_tool(&KAFKA_CONFIGS, binaries, bootstrap, client_properties, args).await
}

/// Runs Kafka's own `kafka-acls` tool (`org.apache.kafka.tools.AclCommand`, from the
/// `kafka-tools` jar) like [`config_command`].
pub async fn acl_command(
    binaries: &Binaries,
    bootstrap: &str,
    client_properties: Option<&str>,
    args: &[&str],
) -> Result<String> {
    run_tool(&KAFKA_ACLS, binaries, bootstrap, client_properties, args).await
}

/// What Kafka's own producer saw of one send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// The broker acknowledged the record.
    Acked,
    /// The send failed.
    Failed {
        /// The Java exception's class, e.g.
        /// `org.apache.kafka.common.errors.TopicAuthorizationException`.
        exception: String,
        /// Its message.
        message: String,
    },
}

/// Sends one record to `topic` with Kafka's own producer (`kafka-verifiable-producer`,
/// `org.apache.kafka.tools.VerifiableProducer`), as the client `client_properties`
/// describes: an independent client's view of what a user may do.
pub async fn produce_one(
    binaries: &Binaries,
    bootstrap: &str,
    client_properties: Option<&str>,
    topic: &str,
) -> Result<SendOutcome> {
    let stdout = run_tool(
        &KAFKA_VERIFIABLE_PRODUCER,
        binaries,
        bootstrap,
        client_properties,
        &["--topic", topic, "--max-messages", "1"],
    )
    .await?;
    parse_send_outcome(&stdout)
}

/// The outcome of the one send in a `kafka-verifiable-producer` output (a JSON event per
/// line: `startup_complete`, `producer_send_success` or `producer_send_error`, ...).
pub fn parse_send_outcome(stdout: &str) -> Result<SendOutcome> {
    for line in stdout.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let text = |key: &str| event[key].as_str().unwrap_or_default().to_string();
        match event["name"].as_str() {
            Some("producer_send_success") => return Ok(SendOutcome::Acked),
            Some("producer_send_error") => {
                let exception = text("exception");
                return Ok(SendOutcome::Failed {
                    exception: exception
                        .strip_prefix("class ")
                        .unwrap_or(&exception)
                        .to_string(),
                    message: text("message"),
                });
            }
            _ => {}
        }
    }
    anyhow::bail!("kafka-verifiable-producer reported no send: {stdout}")
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

/// A user's client quotas as `kafka-configs --describe --entity-type users --entity-name
/// USER` prints them (`Quota configs for user-principal 'USER' are k=v, k=v`); empty when
/// the user has none.
pub async fn user_quotas(
    binaries: &Binaries,
    bootstrap: &str,
    client_properties: Option<&str>,
    user: &str,
) -> Result<BTreeMap<String, f64>> {
    let stdout = config_command(
        binaries,
        bootstrap,
        client_properties,
        &[
            "--describe",
            "--entity-type",
            "users",
            "--entity-name",
            user,
        ],
    )
    .await?;
    parse_user_quotas(&stdout, user)
}

/// The quotas in a `kafka-configs --describe --entity-type users` output for `user`.
pub fn parse_user_quotas(stdout: &str, user: &str) -> Result<BTreeMap<String, f64>> {
    let prefix = format!("Quota configs for user-principal '{user}' are ");
    let mut quotas = BTreeMap::new();
    for line in stdout.lines() {
        let Some(pairs) = line.strip_prefix(&prefix) else {
            continue;
        };
        for pair in pairs.split(", ").filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .with_context(|| format!("{pair:?} in {line:?} is not key=value"))?;
            let value: f64 = value
                .trim()
                .parse()
                .with_context(|| format!("{pair:?} in {line:?}: not a number"))?;
            quotas.insert(key.to_string(), value);
        }
    }
    Ok(quotas)
}

/// The ACLs of `principal` (e.g. `User:alice`) as `kafka-acls --list --principal` prints
/// them, one normalised line per ACL, sorted: `Type:PATTERN:name Operation PERMISSION host`,
/// e.g. `Topic:PREFIXED:orders. Write ALLOW *` (the resource as Kafka's older tools wrote
/// it, the operation as `--operation` takes it).
pub async fn acls_of(
    binaries: &Binaries,
    bootstrap: &str,
    client_properties: Option<&str>,
    principal: &str,
) -> Result<Vec<String>> {
    let stdout = acl_command(
        binaries,
        bootstrap,
        client_properties,
        &["--list", "--principal", principal],
    )
    .await?;
    parse_acl_list(&stdout)
}

/// The normalised lines of a `kafka-acls --list` output (see [`acls_of`]):
///
/// ```text
/// Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders., patternType=PREFIXED)`:
///     (principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)
/// ```
pub fn parse_acl_list(stdout: &str) -> Result<Vec<String>> {
    let mut resource: Option<String> = None;
    let mut acls = Vec::new();
    for line in stdout.lines() {
        if let Some(pattern) = line
            .strip_prefix("Current ACLs for resource `ResourcePattern(")
            .and_then(|rest| rest.strip_suffix(")`:"))
        {
            let (kind, rest) = pattern
                .strip_prefix("resourceType=")
                .and_then(|p| p.split_once(", name="))
                .with_context(|| format!("resource pattern {pattern:?}"))?;
            let (name, pattern_type) = rest
                .rsplit_once(", patternType=")
                .with_context(|| format!("resource pattern {pattern:?}"))?;
            resource = Some(format!("{}:{pattern_type}:{name}", camel_case(kind)));
        } else if let Some(acl) = line
            .trim()
            .strip_prefix("(principal=")
            .and_then(|rest| rest.strip_suffix(')'))
        {
            let resource = resource
                .as_deref()
                .with_context(|| format!("ACL {line:?} before any resource"))?;
            let field = |name: &str| -> Result<&str> {
                acl.split(", ")
                    .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                    .with_context(|| format!("no {name} in {line:?}"))
            };
            acls.push(format!(
                "{resource} {} {} {}",
                camel_case(field("operation")?),
                field("permissionType")?,
                field("host")?
            ));
        }
    }
    acls.sort();
    Ok(acls)
}

/// `TRANSACTIONAL_ID` → `TransactionalId`: Kafka's enum constant as its tools' flags and
/// its documentation spell it.
fn camel_case(constant: &str) -> String {
    constant
        .split('_')
        .map(|word| {
            let lower = word.to_ascii_lowercase();
            let mut chars = lower.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// Adds, with `kafka-acls`, the ACL `acl` (a line as [`acls_of`] prints it) for
/// `principal`: a change made behind the back of whatever manages the ACLs.
pub async fn add_acl(
    binaries: &Binaries,
    bootstrap: &str,
    client_properties: Option<&str>,
    principal: &str,
    acl: &str,
) -> Result<()> {
    let mut args = vec!["--add".to_string()];
    args.extend(acl_tool_args(principal, acl)?);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    acl_command(binaries, bootstrap, client_properties, &args).await?;
    Ok(())
}

/// Removes, with `kafka-acls`, the ACL `acl` (a line as [`acls_of`] prints it) of
/// `principal`.
pub async fn remove_acl(
    binaries: &Binaries,
    bootstrap: &str,
    client_properties: Option<&str>,
    principal: &str,
    acl: &str,
) -> Result<()> {
    let mut args = vec!["--remove".to_string(), "--force".to_string()];
    args.extend(acl_tool_args(principal, acl)?);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    acl_command(binaries, bootstrap, client_properties, &args).await?;
    Ok(())
}

/// The `kafka-acls` arguments naming exactly `principal`'s ACL `acl` (a line as
/// [`acls_of`] prints it), for `--add` or `--remove`.
pub fn acl_tool_args(principal: &str, acl: &str) -> Result<Vec<String>> {
    let mut fields = acl.rsplitn(4, ' ');
    let (Some(host), Some(permission), Some(operation), Some(resource)) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        anyhow::bail!("{acl:?} is not `Type:PATTERN:name Operation PERMISSION host`");
    };
    let mut resource_parts = resource.splitn(3, ':');
    let (Some(kind), Some(pattern_type), Some(name)) = (
        resource_parts.next(),
        resource_parts.next(),
        resource_parts.next(),
    ) else {
        anyhow::bail!("{resource:?} is not `Type:PATTERN:name`");
    };
    let who = match permission {
        "ALLOW" => "allow",
        "DENY" => "deny",
        other => anyhow::bail!("{other:?} is neither ALLOW nor DENY"),
    };
    let mut args = vec![
        format!("--{who}-principal"),
        principal.to_string(),
        format!("--{who}-host"),
        host.to_string(),
        "--operation".to_string(),
        operation.to_string(),
        "--resource-pattern-type".to_string(),
        pattern_type.to_ascii_lowercase(),
    ];
    let flag = match kind {
        "Topic" => "--topic",
        "Group" => "--group",
        "TransactionalId" => "--transactional-id",
        "DelegationToken" => "--delegation-token",
        "User" => "--user-principal",
        "Cluster" => {
            args.push("--cluster".to_string());
            return Ok(args);
        }
        other => anyhow::bail!("kafka-acls has no flag for resource type {other:?}"),
    };
    args.push(flag.to_string());
    args.push(name.to_string());
    Ok(args)
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
    /// `options` is [`KafkaOptions`], or [`ClusterOptions`] for the ACL authorizer.
    pub async fn start(
        dir: &Path,
        remove_on_abandon: Option<&Path>,
        name: &str,
        options: impl Into<ClusterOptions>,
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

/// A Kafka cluster started on first use and shared by every test of a test binary (on the
/// runtime [`crate::shared::block_on`] runs), in a directory removed when the binary exits.
pub struct SharedKafka {
    name: &'static str,
    options: fn() -> ClusterOptions,
    kafka: tokio::sync::OnceCell<Result<SupervisedKafka, String>>,
}

impl SharedKafka {
    /// A cluster named `name` (logs and component names), started with `options()`.
    pub const fn new(name: &'static str, options: fn() -> ClusterOptions) -> Self {
        Self {
            name,
            options,
            kafka: tokio::sync::OnceCell::const_new(),
        }
    }

    /// The cluster, started by the first caller; if starting failed, every caller gets the
    /// same error.
    pub async fn get(&'static self) -> Result<&'static SupervisedKafka> {
        let kafka = self
            .kafka
            .get_or_init(|| async {
                let start = async {
                    let dir = tempfile::Builder::new()
                        .prefix(&format!("accord-{}-", self.name))
                        .tempdir()?
                        .keep();
                    SupervisedKafka::start(&dir, Some(&dir), self.name, (self.options)()).await
                };
                start.await.map_err(|e: anyhow::Error| format!("{e:#}"))
            })
            .await;
        kafka
            .as_ref()
            .map_err(|e| anyhow::anyhow!("the Kafka cluster did not start: {e}"))
    }

    /// Runs one test against the shared cluster on the shared runtime. Panics (failing the
    /// test) if the cluster does not start or `test` fails, with the brokers' log tails.
    pub fn run<F, Fut>(&'static self, test: F)
    where
        F: FnOnce(&'static SupervisedKafka) -> Fut,
        Fut: std::future::Future<Output = Result<()>>,
    {
        crate::shared::block_on(async {
            let kafka = match self.get().await {
                Ok(kafka) => kafka,
                Err(e) => panic!("{e:#}"),
            };
            if let Err(e) = test(kafka).await {
                panic!("{e:#}\n{}", kafka.supervisor.log_tails(30));
            }
        });
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
            authorizer: false,
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
        assert!(!properties.contains("authorizer"), "{properties}");
    }

    #[test]
    fn the_authorizer_denies_by_default_and_trusts_the_scram_user_and_the_cluster_itself() {
        let properties = render_node_properties(&NodeProperties {
            node_id: 1,
            voters: &[(1, 9101)],
            broker_port: 9001,
            controller_port: 9101,
            sasl_ssl: Some((9201, 9301, Path::new("/tb/keystore.pem"))),
            authorizer: true,
            log_dir: Path::new("/tb/data"),
        });
        let lines: Vec<&str> = properties.lines().collect();
        for expected in [
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found=false",
            "super.users=User:ANONYMOUS;User:accord",
        ] {
            assert!(
                lines.contains(&expected),
                "missing {expected:?} in\n{properties}"
            );
        }
        assert!(
            KafkaOptions::default().with_authorizer().authorizer
                && !ClusterOptions::from(KafkaOptions::default()).authorizer
        );
    }

    #[test]
    fn user_quotas_are_read_from_kafka_configs() {
        let stdout = "Quota configs for user-principal 'alice' are request_percentage=12.5, producer_byte_rate=1024.0
SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-512=iterations=8192
";
        let quotas = parse_user_quotas(stdout, "alice").unwrap();
        assert_eq!(
            quotas,
            BTreeMap::from([
                ("producer_byte_rate".to_string(), 1024.0),
                ("request_percentage".to_string(), 12.5)
            ])
        );
        assert!(parse_user_quotas(stdout, "bob").unwrap().is_empty());
        assert!(parse_user_quotas("", "alice").unwrap().is_empty());
        assert!(
            parse_user_quotas("Quota configs for user-principal 'alice' are x=y", "alice").is_err()
        );
    }

    #[test]
    fn acl_lists_are_normalised_to_one_sorted_line_per_acl() {
        let stdout = "ACLs for principal `User:alice`
Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders., patternType=PREFIXED)`:
\t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)
\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)

Current ACLs for resource `ResourcePattern(resourceType=TRANSACTIONAL_ID, name=a, b, patternType=LITERAL)`:
\t(principal=User:alice, host=10.0.0.1, operation=IDEMPOTENT_WRITE, permissionType=DENY)

";
        assert_eq!(
            parse_acl_list(stdout).unwrap(),
            [
                "Topic:PREFIXED:orders. Describe ALLOW *",
                "Topic:PREFIXED:orders. Write ALLOW *",
                "TransactionalId:LITERAL:a, b IdempotentWrite DENY 10.0.0.1",
            ]
        );
        assert!(
            parse_acl_list("ACLs for principal `User:bob`\n")
                .unwrap()
                .is_empty()
        );
        assert!(
            parse_acl_list("\t(principal=User:x, host=*, operation=READ, permissionType=ALLOW)")
                .is_err()
        );
    }

    #[test]
    fn an_acl_line_becomes_the_kafka_acls_flags_naming_it() {
        assert_eq!(
            acl_tool_args("User:alice", "Topic:PREFIXED:orders. Write ALLOW *").unwrap(),
            [
                "--allow-principal",
                "User:alice",
                "--allow-host",
                "*",
                "--operation",
                "Write",
                "--resource-pattern-type",
                "prefixed",
                "--topic",
                "orders."
            ]
        );
        assert_eq!(
            acl_tool_args(
                "User:bob",
                "Cluster:LITERAL:kafka-cluster Alter DENY 10.0.0.1"
            )
            .unwrap(),
            [
                "--deny-principal",
                "User:bob",
                "--deny-host",
                "10.0.0.1",
                "--operation",
                "Alter",
                "--resource-pattern-type",
                "literal",
                "--cluster"
            ]
        );
        assert!(acl_tool_args("User:x", "Topic:LITERAL:t Read MAYBE *").is_err());
        assert!(acl_tool_args("User:x", "Topic Read ALLOW *").is_err());
        assert!(acl_tool_args("User:x", "Read ALLOW").is_err());
        assert_eq!(camel_case("CLUSTER_ACTION"), "ClusterAction");
    }

    #[test]
    fn the_verifiable_producers_events_say_whether_the_send_was_acked() {
        let acked = r#"{"timestamp":1,"name":"startup_complete"}
{"timestamp":2,"name":"producer_send_success","key":null,"value":"0","offset":0,"topic":"orders.x","partition":0}
{"timestamp":3,"name":"shutdown_complete"}
"#;
        assert_eq!(parse_send_outcome(acked).unwrap(), SendOutcome::Acked);
        let refused = r#"{"timestamp":1,"name":"startup_complete"}
{"timestamp":2,"name":"producer_send_error","topic":"payments.x","key":null,"value":"0","exception":"class org.apache.kafka.common.errors.TopicAuthorizationException","message":"Not authorized to access topics: [payments.x]"}
"#;
        assert_eq!(
            parse_send_outcome(refused).unwrap(),
            SendOutcome::Failed {
                exception: "org.apache.kafka.common.errors.TopicAuthorizationException".into(),
                message: "Not authorized to access topics: [payments.x]".into()
            }
        );
        assert!(parse_send_outcome("SLF4J: no binder\n").is_err());
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
