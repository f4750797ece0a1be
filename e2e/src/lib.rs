//! Accord's testbed: real etcd, kube-apiservers, kube-controller-managers, kube-schedulers,
//! kwok fake nodes, Kafka brokers and Prometheus servers started as local processes, for
//! end-to-end tests, benchmarks and the sandbox.
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! use accord_e2e::Testbed;
//!
//! let testbed = Testbed::builder().members(3).with_kafka().with_prometheus().start().await?;
//! let member = testbed.member("member-1").expect("member-1 exists");
//! println!("kubeconfig: {}", member.kubeconfig_path().display());
//! println!("kafka: {}", member.kafka_bootstrap().expect("with_kafka"));
//! # Ok(())
//! # }
//! ```
//!
//! Every process runs in its own process group and is stopped when the [`Testbed`] is
//! dropped, also while a test panics; a small watchdog process stops them as well if the
//! test process dies without running destructors. Component logs are kept in the testbed's
//! directory and their tails are printed when a test fails.

pub mod agent_sim;
pub mod apiserver_writes;
pub mod autoscale_scenario;
pub mod binaries;
pub mod browser;
pub mod console;
pub mod crds;
pub mod etcd;
pub mod exporter;
pub mod faultproxy;
pub mod fleet;
pub mod hub;
pub mod installed;
pub mod jaeger;
pub mod kafka;
pub mod kafka_topic_scenario;
pub mod kafka_user_scenario;
pub mod kubeconfig;
pub mod kubernetes;
pub mod kwok;
pub mod leaks;
pub mod load;
pub mod pki;
pub mod placement_record;
pub mod ports;
pub mod process;
pub mod prometheus;
pub mod promfed;
pub mod promfed_scenario;
pub mod reloader_support;
pub mod resource_scenario;
pub mod sandbox;
pub mod shared;
pub mod stats;
pub mod testbed;
pub mod wait;
pub mod watch;

pub use binaries::Binaries;
pub use process::{ProcessId, ProcessInfo};
pub use shared::SharedTestbed;
pub use testbed::{Cluster, LogsOnPanic, Testbed, TestbedBuilder};
