//! The `accord-kafka` admin client against a real three-broker Kafka cluster (KRaft,
//! PLAINTEXT between brokers, a SASL_SSL SCRAM-SHA-512 listener on each), checked with an
//! independent client (rdkafka) as well as through its own answers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use accord_e2e::Binaries;
use accord_e2e::kafka::{self, KafkaCluster, KafkaOptions};
use accord_e2e::process::Supervisor;
use accord_e2e::shared::block_on;
use anyhow::{Context as _, Result};
use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use tokio::sync::{Mutex, OnceCell};

/// One cluster shared by every test of this binary (starting three JVMs takes a while).
struct Bed {
    supervisor: Supervisor,
    cluster: Mutex<KafkaCluster>,
}

static BED: OnceCell<Result<Bed, String>> = OnceCell::const_new();

async fn start_bed() -> Result<Bed> {
    let dir: PathBuf = tempfile::Builder::new()
        .prefix("accord-kafka-client-")
        .tempdir()?
        .keep();
    let supervisor = Supervisor::new(&dir.join("logs"), Some(&dir))?;
    let binaries = Binaries::locate()?;
    let cluster = kafka::start_cluster(
        &supervisor,
        &binaries,
        "kafka-client",
        &dir.join("kafka"),
        KafkaOptions {
            brokers: 3,
            sasl_ssl: true,
        },
    )
    .await;
    let cluster = match cluster {
        Ok(cluster) => cluster,
        Err(e) => anyhow::bail!("{e:#}\n{}", supervisor.log_tails(40)),
    };
    Ok(Bed {
        supervisor,
        cluster: Mutex::new(cluster),
    })
}

/// Runs one test against the shared cluster, printing the brokers' log tails on failure.
fn run<F, Fut>(test: F)
where
    F: FnOnce(&'static Bed) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    block_on(async {
        let bed = match BED
            .get_or_init(|| async { start_bed().await.map_err(|e| format!("{e:#}")) })
            .await
        {
            Ok(bed) => bed,
            Err(e) => panic!("the Kafka cluster did not start: {e}"),
        };
        if let Err(e) = test(bed).await {
            panic!("{e:#}\n{}", bed.supervisor.log_tails(30));
        }
    });
}

fn rdkafka_admin(bootstrap: &str) -> Result<Arc<AdminClient<DefaultClientContext>>> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .context("creating an rdkafka admin client")?;
    Ok(Arc::new(admin))
}

/// Client properties for Kafka's tools: SASL_SSL with SCRAM-SHA-512, trusting the CA.
fn sasl_client_properties(cluster: &KafkaCluster, password: &str) -> Result<String> {
    let dir = tempfile::tempdir()?.keep();
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, cluster.ca_pem.as_deref().context("CA")?)?;
    Ok(format!(
        "security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{}\" password=\"{password}\";
ssl.truststore.type=PEM
ssl.truststore.location={}
",
        cluster.username.as_deref().context("user")?,
        ca.display()
    ))
}

/// Runs Kafka's `kafka-configs` tool (same jars as the brokers) to completion.
async fn kafka_configs(
    bed: &Bed,
    component: &str,
    bootstrap: &str,
    client_properties: Option<&str>,
    args: &[&str],
) -> Result<()> {
    let binaries = Binaries::locate()?;
    let mut command = std::process::Command::new(&binaries.java);
    command
        .args([
            "-Xmx128m",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-cp",
        ])
        .arg(format!("{}/*", binaries.kafka_lib.display()))
        .arg("kafka.admin.ConfigCommand")
        .args(["--bootstrap-server", bootstrap]);
    if let Some(properties) = client_properties {
        let file = tempfile::NamedTempFile::new()?.into_temp_path().keep()?;
        std::fs::write(&file, properties)?;
        command.arg("--command-config").arg(file);
    }
    command.args(args);
    bed.supervisor
        .run_to_completion(component, command, Duration::from_secs(120))
        .await
}

#[test]
fn the_testbed_cluster_has_three_brokers_and_a_scram_user() {
    run(|bed| async move {
        let cluster = bed.cluster.lock().await;
        let admin = rdkafka_admin(&cluster.bootstrap)?;
        let metadata = tokio::task::spawn_blocking(move || {
            admin.inner().fetch_metadata(None, Duration::from_secs(10))
        })
        .await??;
        let mut ids: Vec<i32> = metadata.brokers().iter().map(|b| b.id()).collect();
        ids.sort();
        anyhow::ensure!(ids == [1, 2, 3], "brokers {ids:?}");
        let secret: BTreeMap<String, String> = cluster.secret_data(true);
        anyhow::ensure!(secret["security.protocol"] == "SASL_SSL");
        anyhow::ensure!(secret["bootstrap.servers"].split(',').count() == 3);
        anyhow::ensure!(secret["ca.crt"].starts_with("-----BEGIN CERTIFICATE-----"));

        // Kafka's own tool over SASL_SSL: authenticates and trusts the testbed CA.
        let sasl_bootstrap = cluster.sasl_ssl_bootstrap.clone().context("SASL_SSL")?;
        kafka_configs(
            bed,
            "configs-sasl",
            &sasl_bootstrap,
            Some(&sasl_client_properties(
                &cluster,
                cluster.password.as_deref().unwrap_or_default(),
            )?),
            &[
                "--describe",
                "--entity-type",
                "brokers",
                "--entity-name",
                "1",
            ],
        )
        .await?;
        let wrong = kafka_configs(
            bed,
            "configs-wrong-password",
            &sasl_bootstrap,
            Some(&sasl_client_properties(&cluster, "not-the-password")?),
            &[
                "--describe",
                "--entity-type",
                "brokers",
                "--entity-name",
                "1",
            ],
        )
        .await;
        anyhow::ensure!(wrong.is_err(), "a wrong password was accepted");
        Ok(())
    });
}
