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

use std::time::Duration;

use accord_e2e::Testbed;
use anyhow::{Context as _, Result, bail};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("accord_e2e=info")),
        )
        .init();
    let mut builder = Testbed::builder();
    let mut settle = Duration::from_secs(10);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--members" => {
                builder = builder.members(args.next().context("--members needs a number")?.parse()?)
            }
            "--with-kafka" => builder = builder.with_kafka(),
            "--with-prometheus" => builder = builder.with_prometheus(),
            "--without-mgmt-controller-manager" => {
                builder = builder.without_mgmt_controller_manager()
            }
            "--without-crds" => builder = builder.without_crds(),
            "--crds-dir" => {
                builder = builder.crds_dir(args.next().context("--crds-dir needs a directory")?)
            }
            "--settle" => {
                settle =
                    Duration::from_secs(args.next().context("--settle needs seconds")?.parse()?)
            }
            other => bail!("unknown argument {other}"),
        }
    }
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
