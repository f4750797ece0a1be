//! A single-node Kafka broker in KRaft mode (broker and controller in one JVM) per member
//! cluster, run from the jars `build.sh` fetched from Maven Central.

use std::collections::hash_map::RandomState;
use std::fs;
use std::hash::BuildHasher as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;

use crate::binaries::Binaries;
use crate::ports::free_port;
use crate::process::{ProcessId, Supervisor};
use crate::wait::{self, Check};

/// The broker's node id (it is alone in its cluster).
const NODE_ID: u32 = 1;
/// How long formatting the storage directory may take.
const FORMAT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the broker may take to answer metadata requests.
const READY_TIMEOUT: Duration = Duration::from_secs(180);
/// JVM options: a small heap, and start-up speed over peak throughput.
const JVM_OPTIONS: &[&str] = &[
    "-Xms64m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
];

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

/// A running broker.
#[derive(Debug, Clone)]
pub struct KafkaBroker {
    /// `127.0.0.1:<port>` for `bootstrap.servers`.
    pub bootstrap: String,
    /// The supervised JVM.
    pub process: ProcessId,
    /// The broker's configuration file.
    pub config_file: PathBuf,
}

/// Renders `server.properties` for a combined broker and controller.
pub fn render_server_properties(broker_port: u16, controller_port: u16, log_dir: &Path) -> String {
    format!(
        "process.roles=broker,controller
node.id={NODE_ID}
controller.quorum.voters={NODE_ID}@127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{broker_port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={log_dir}
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
",
        log_dir = log_dir.display()
    )
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

/// Formats the storage of and starts the broker for cluster `name`, in `dir`.
pub async fn start(
    supervisor: &Supervisor,
    binaries: &Binaries,
    name: &str,
    dir: &Path,
) -> Result<KafkaBroker> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let broker_port = free_port()?;
    let controller_port = free_port()?;
    let config_file = dir.join("server.properties");
    let log4j = dir.join("log4j2.properties");
    fs::write(
        &config_file,
        render_server_properties(broker_port, controller_port, &dir.join("data")),
    )?;
    fs::write(&log4j, LOG4J2_PROPERTIES)?;

    let java = |main_class: &str| {
        let mut command = Command::new(&binaries.java);
        command
            .args(JVM_OPTIONS)
            .arg(format!("-Dlog4j2.configurationFile={}", log4j.display()))
            .arg(format!("-Dkafka.logs.dir={}", dir.join("logs").display()))
            .arg("-cp")
            .arg(format!("{}/*", binaries.kafka_lib.display()))
            .arg(main_class);
        command
    };

    let mut format = java("kafka.tools.StorageTool");
    format
        .arg("format")
        .arg("--cluster-id")
        .arg(random_cluster_id())
        .arg("--config")
        .arg(&config_file);
    supervisor
        .run_to_completion(&format!("{name}/kafka-format"), format, FORMAT_TIMEOUT)
        .await?;

    let mut broker = java("kafka.Kafka");
    broker.arg(&config_file);
    let process = supervisor.spawn(&format!("{name}/kafka"), broker)?;
    let broker = KafkaBroker {
        bootstrap: format!("127.0.0.1:{broker_port}"),
        process,
        config_file,
    };
    wait_ready(supervisor, &broker).await?;
    Ok(broker)
}

/// Waits until the broker answers a metadata request listing itself.
async fn wait_ready(supervisor: &Supervisor, broker: &KafkaBroker) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &broker.bootstrap)
        .set("reconnect.backoff.ms", "50")
        .set("reconnect.backoff.max.ms", "500")
        .create()
        .context("creating a Kafka admin client")?;
    let admin = std::sync::Arc::new(admin);
    let name = supervisor.info(broker.process).name;
    wait::until(&format!("{name} metadata"), READY_TIMEOUT, || {
        let admin = admin.clone();
        async move {
            supervisor.ensure_running(broker.process)?;
            let metadata = tokio::task::spawn_blocking(move || {
                admin.inner().fetch_metadata(None, Duration::from_secs(1))
            })
            .await?;
            Ok(match metadata {
                Ok(m) if m.brokers().iter().any(|b| b.id() == NODE_ID as i32) => Check::Ready(()),
                Ok(_) => Check::NotYet("broker not in metadata yet".into()),
                Err(e) => Check::NotYet(e.to_string()),
            })
        }
    })
    .await
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
}
