//! Measures how long a testbed takes to start and how much memory its processes use.
//!
//! ```text
//! testbed-bench [--members N] [--with-kafka] [--with-prometheus]
//!               [--without-mgmt-controller-manager] [--without-crds | --crds-dir DIR]
//!               [--settle SECONDS]
//! ```
//! starts a testbed, prints the start-up time, waits `--settle` seconds (default 10) for
//! start-up work to die down, prints each process's resident memory and the total, and
//! stops everything, printing how long stopping took.

use std::path::PathBuf;
use std::time::Duration;

use accord_e2e::Testbed;
use anyhow::Result;
use clap::Parser;
use tracing_subscriber::EnvFilter;

/// Starts a testbed, prints how long it took to start and each process's resident memory
/// once start-up work has died down, then stops it and prints how long stopping took.
#[derive(Debug, Parser)]
#[command(name = "testbed-bench", args_override_self = true)]
struct Args {
    /// Number of member clusters, named member-1 … member-N.
    #[arg(long, value_name = "N", default_value_t = 1)]
    members: usize,
    /// Run a Kafka broker in each member cluster.
    #[arg(long)]
    with_kafka: bool,
    /// Run a Prometheus server in each member cluster.
    #[arg(long)]
    with_prometheus: bool,
    /// Run the management cluster without kube-controller-manager (a faster start).
    #[arg(long)]
    without_mgmt_controller_manager: bool,
    /// Install no CRDs in the management cluster.
    #[arg(long, conflicts_with = "crds_dir")]
    without_crds: bool,
    /// Install the CRDs from this directory instead of crds/yaml/.
    #[arg(long, value_name = "DIR")]
    crds_dir: Option<PathBuf>,
    /// Seconds to wait after the start, for start-up work to die down, before measuring memory.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    settle: u64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("accord_e2e=info")),
        )
        .init();
    let mut builder = Testbed::builder().members(args.members);
    if args.with_kafka {
        builder = builder.with_kafka();
    }
    if args.with_prometheus {
        builder = builder.with_prometheus();
    }
    if args.without_mgmt_controller_manager {
        builder = builder.without_mgmt_controller_manager();
    }
    if args.without_crds {
        builder = builder.without_crds();
    }
    if let Some(dir) = args.crds_dir {
        builder = builder.crds_dir(dir);
    }
    let settle = Duration::from_secs(args.settle);
    let testbed = builder.start().await?;
    println!(
        "started in {:.1} s",
        testbed.startup_duration().as_secs_f64()
    );
    println!("directory: {}", testbed.dir().display());
    tokio::time::sleep(settle).await;
    let mut total = 0;
    println!("resident memory after {} s:", settle.as_secs());
    for (name, bytes) in testbed.memory() {
        total += bytes;
        println!("  {name:<40} {:>7.1} MiB", mib(bytes));
    }
    println!("  {:<40} {:>7.1} MiB", "total", mib(total));
    let stopping = std::time::Instant::now();
    drop(testbed);
    println!("stopped in {:.1} s", stopping.elapsed().as_secs_f64());
    Ok(())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
