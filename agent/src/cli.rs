//! Command-line interface of `accord-agent`: `join`, `run`, `version`.

use accord_crds::duration::parse_positive_flag;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use accord_common::runtime::{error_chain, shutdown_signal};
use clap::{Args, Parser, Subcommand};

use crate::enforce::kafka::{DEFAULT_SECRET, KafkaOptions, ProbeOptions};
use crate::identity::{IdentitySource, SecretRef};
use crate::lease::{DEFAULT_LEASE_NAME, MIN_LEASE_DURATION};
use crate::run::{LeaseOptions, RunConfig};

/// Namespace of the identity Secret when no identity flag is given.
pub const DEFAULT_IDENTITY_NAMESPACE: &str = "accord-system";
/// Name of the identity Secret when no identity flag is given.
pub const DEFAULT_IDENTITY_SECRET: &str = "accord-agent-identity";

/// The Accord agent: joins a member cluster to an Accord hub.
#[derive(Debug, Parser)]
#[command(name = "accord-agent", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands of `accord-agent`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the agent version and the hub protocol package it speaks.
    Version,
    /// Run the agent: hold the stream to the hub, enforce assignments, report status.
    Run(RunArgs),
    /// Join this member cluster to a hub: register with a bootstrap token, store the
    /// identity Secret, apply the agent's RBAC and Deployment (or run it with --run).
    Join(crate::join::JoinArgs),
    /// Run beside a Prometheus: watch its federation ConfigMap, validate, write the config
    /// file atomically, reload Prometheus and confirm the load in the ConfigMap's annotations.
    Reload(crate::reload::ReloadArgs),
}

/// Where the identity comes from: at most one of the two; without either, the Secret
/// `accord-system/accord-agent-identity` that `accord-agent join` writes.
#[derive(Debug, Args)]
#[group(required = false, multiple = false)]
pub struct IdentityArgs {
    /// Directory holding hub-url, cluster-name, ca.crt, tls.crt, tls.key and optionally
    /// tls-server-name.
    #[arg(long, env = "ACCORD_IDENTITY_DIR")]
    pub identity_dir: Option<PathBuf>,
    /// Secret NAMESPACE/NAME in the member cluster holding the same keys (the default when
    /// neither flag is given: accord-system/accord-agent-identity).
    #[arg(long, env = "ACCORD_IDENTITY_SECRET", value_parser = parse_secret_ref)]
    pub identity_secret: Option<SecretRef>,
}

/// Flags of `accord-agent run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Kubeconfig of the member cluster (default: $KUBECONFIG, ~/.kube/config, or the
    /// in-cluster configuration).
    #[arg(long, env = "ACCORD_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    identity: IdentityArgs,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "ACCORD_HTTP_ADDR", default_value = "0.0.0.0:8081")]
    pub http_addr: SocketAddr,
    /// The agent's namespace; holds the ConfigMap of applied assignments.
    #[arg(long, env = "ACCORD_NAMESPACE", default_value = "accord-system")]
    pub namespace: String,
    /// Interval between heartbeats to the hub.
    #[arg(long, env = "ACCORD_HEARTBEAT_INTERVAL", default_value = "1s", value_parser = parse_positive_flag)]
    pub heartbeat_interval: Duration,
    /// Delay between a change and the status report about it (changes within it coalesce).
    #[arg(long, env = "ACCORD_REPORT_DEBOUNCE", default_value = "100ms", value_parser = parse_positive_flag)]
    pub report_debounce: Duration,
    /// Interval between two counts of the member's capacity (Nodes and Pods listed): the
    /// hub is told when it changed by more than 5 % of the allocatable amount, so at most
    /// once per interval.
    #[arg(long, env = "ACCORD_CAPACITY_INTERVAL", default_value = "60s", value_parser = parse_positive_flag)]
    pub capacity_interval: Duration,
    /// Secret in the agent's namespace holding this cluster's Kafka connection
    /// (bootstrap.servers, security.protocol, sasl.mechanism, sasl.username, sasl.password,
    /// ca.crt); read only while Kafka topics or users are assigned.
    #[arg(long, env = "ACCORD_KAFKA_SECRET", default_value = DEFAULT_SECRET, value_parser = parse_secret_name)]
    pub kafka_secret: String,
    /// Interval between two looks at every assigned Kafka topic and user (credentials,
    /// ACLs, quotas); out-of-band changes are repaired within it.
    #[arg(long, env = "ACCORD_KAFKA_RESYNC", default_value = "30s", value_parser = parse_positive_flag)]
    pub kafka_resync: Duration,
    /// Interval between two liveness probes of the member's Kafka (one Metadata request for
    /// no topic) while topics or users are assigned: a Kafka that stops answering makes
    /// them Unavailable within about this interval and --kafka-probe-timeout.
    #[arg(long, env = "ACCORD_KAFKA_PROBE_INTERVAL", default_value = "5s", value_parser = parse_positive_flag)]
    pub kafka_probe_interval: Duration,
    /// How long one liveness probe of the member's Kafka may take before Kafka counts as
    /// unreachable; shorter than --kafka-probe-interval.
    #[arg(long, env = "ACCORD_KAFKA_PROBE_TIMEOUT", default_value = "2s", value_parser = parse_positive_flag)]
    pub kafka_probe_timeout: Duration,
    /// The coordination.k8s.io Lease (in --namespace) that decides which agent replica is
    /// active; only its holder connects to the hub and applies.
    #[arg(long, env = "ACCORD_LEASE_NAME", default_value = DEFAULT_LEASE_NAME, value_parser = parse_lease_name)]
    pub lease_name: String,
    /// How long the Lease stays with a replica that stopped renewing it (whole seconds, at
    /// least 2s); a standby takes over within about this long after the active one dies.
    #[arg(long, env = "ACCORD_LEASE_DURATION", default_value = "15s", value_parser = parse_lease_duration)]
    pub lease_duration: Duration,
    /// OTLP/gRPC endpoint to export traces to, e.g. `http://jaeger:4317`: each assignment
    /// the hub sends with a trace gets an apply span (with the kind's own steps) and a
    /// report span in that trace. Off when unset: no exporter, no trace spans.
    #[arg(long, env = "ACCORD_OTLP_ENDPOINT", value_parser = parse_otlp_endpoint)]
    pub otlp_endpoint: Option<String>,
}

/// Checks `--otlp-endpoint`.
pub(crate) fn parse_otlp_endpoint(value: &str) -> Result<String, String> {
    accord_common::telemetry::parse_endpoint(value).map_err(|e| e.to_string())
}

impl RunArgs {
    /// The run configuration these flags describe.
    pub fn config(self) -> RunConfig {
        let identity = match (self.identity.identity_dir, self.identity.identity_secret) {
            (Some(dir), _) => IdentitySource::Dir(dir),
            (None, Some(secret)) => IdentitySource::Secret {
                namespace: secret.namespace,
                name: secret.name,
            },
            (None, None) => IdentitySource::Secret {
                namespace: DEFAULT_IDENTITY_NAMESPACE.into(),
                name: DEFAULT_IDENTITY_SECRET.into(),
            },
        };
        RunConfig {
            kubeconfig: self.kubeconfig,
            identity,
            http_addr: self.http_addr,
            namespace: self.namespace,
            heartbeat_interval: self.heartbeat_interval,
            report_debounce: self.report_debounce,
            capacity_interval: self.capacity_interval,
            kafka: KafkaOptions {
                secret: self.kafka_secret,
                resync: self.kafka_resync,
                probe: ProbeOptions {
                    interval: self.kafka_probe_interval,
                    timeout: self.kafka_probe_timeout,
                },
            },
            lease: LeaseOptions {
                name: self.lease_name,
                duration: self.lease_duration,
            },
        }
    }
}

impl Cli {
    /// Parses `args` as [`Parser::try_parse_from`] does, then checks what one flag alone
    /// cannot (a probe timeout shorter than its interval).
    pub fn try_parse_checked<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::CommandFactory as _;
        let cli = Self::try_parse_from(args)?;
        if let Command::Run(run) = &cli.command
            && run.kafka_probe_timeout >= run.kafka_probe_interval
        {
            return Err(Self::command().error(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "--kafka-probe-timeout ({:?}) must be shorter than --kafka-probe-interval \
                     ({:?}): one probe ends before the next begins",
                    run.kafka_probe_timeout, run.kafka_probe_interval
                ),
            ));
        }
        Ok(cli)
    }
}

/// A Lease name: a DNS subdomain, like a Secret's.
fn parse_lease_name(s: &str) -> Result<String, String> {
    parse_secret_name(s).map_err(|_| {
        format!(
            "{s:?} is not a Lease name (lowercase letters, digits, '-' and '.', starting and \
             ending with a letter or digit)"
        )
    })
}

/// A lease duration: whole seconds (the Lease records seconds), at least
/// [`MIN_LEASE_DURATION`].
fn parse_lease_duration(s: &str) -> Result<Duration, String> {
    let d = accord_crds::duration::parse(s).map_err(|e| e.to_string())?;
    if d.subsec_nanos() != 0 {
        return Err("must be whole seconds (a Lease records seconds)".to_owned());
    }
    if d < MIN_LEASE_DURATION {
        return Err(format!("must be at least {MIN_LEASE_DURATION:?}"));
    }
    if d.as_secs() > i32::MAX as u64 {
        return Err("is too long".to_owned());
    }
    Ok(d)
}

/// A Secret name: a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253).
pub fn parse_secret_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?} is not a Secret name (lowercase letters, digits, '-' and '.', starting and \
             ending with a letter or digit)"
        ))
    }
}

fn parse_secret_ref(s: &str) -> Result<SecretRef, String> {
    s.parse()
        .map_err(|e: crate::identity::IdentityError| e.to_string())
}

/// Parses arguments and runs the command; the binary's whole `main`.
pub fn main() -> ExitCode {
    let cli = Cli::try_parse_checked(std::env::args_os()).unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::Version => {
            println!(
                "accord-agent {} (protocol accord.v1)",
                env!("CARGO_PKG_VERSION")
            );
            ExitCode::SUCCESS
        }
        Command::Run(args) => {
            let otlp_endpoint = args.otlp_endpoint.clone();
            let config = args.config();
            block_on_traced(
                otlp_endpoint.as_deref(),
                crate::run::run(config, shutdown_signal()),
                |_| {},
            )
        }
        Command::Reload(args) => block_on(crate::reload::run(args, shutdown_signal()), |_| {}),
        Command::Join(args) => {
            let otlp_endpoint = args.otlp_endpoint.clone();
            block_on_traced(
                otlp_endpoint.as_deref(),
                crate::join::join(args, shutdown_signal()),
                |e| {
                    if e.token_still_usable() {
                        eprintln!("(the bootstrap token was not used)");
                    }
                },
            )
        }
    }
}

/// Sets up logging and a single-threaded runtime, runs `future` on it, and on failure
/// prints the error chain and whatever `after_error` adds.
fn block_on<E: std::error::Error>(
    future: impl std::future::Future<Output = Result<(), E>>,
    after_error: impl FnOnce(&E),
) -> ExitCode {
    block_on_traced(None, future, after_error)
}

/// [`block_on`], exporting traces to `otlp_endpoint` when given (the cluster's name is
/// added to the exporter's resource once the identity is read, [`crate::run::run`]).
fn block_on_traced<E: std::error::Error>(
    otlp_endpoint: Option<&str>,
    future: impl std::future::Future<Output = Result<(), E>>,
    after_error: impl FnOnce(&E),
) -> ExitCode {
    // One thread is plenty for an agent that waits on watches and one stream; it keeps the
    // footprint small.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let telemetry = accord_common::telemetry::init(
        "info,kube=warn,tower=warn,h2=warn,hyper=warn",
        "accord-agent",
        otlp_endpoint,
    );
    let ended = runtime.block_on(async {
        let ended = future.await;
        telemetry.shutdown().await;
        ended
    });
    match ended {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            after_error(&e);
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_an_identity_directory_and_durations() {
        let cli = Cli::try_parse_from([
            "accord-agent",
            "run",
            "--kubeconfig",
            "/tmp/member.kubeconfig",
            "--identity-dir",
            "/tmp/id",
            "--heartbeat-interval",
            "500ms",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("expected run");
        };
        let config = args.config();
        assert_eq!(config.identity, IdentitySource::Dir("/tmp/id".into()));
        assert_eq!(config.heartbeat_interval, Duration::from_millis(500));
        assert_eq!(config.namespace, "accord-system");
        assert_eq!(config.http_addr, "0.0.0.0:8081".parse().unwrap());
        assert_eq!(config.kafka, KafkaOptions::default());
        assert_eq!(config.kafka.secret, "accord-kafka");
        assert_eq!(config.kafka.resync, Duration::from_secs(30));
        assert_eq!(config.kafka.probe.interval, Duration::from_secs(5));
        assert_eq!(config.kafka.probe.timeout, Duration::from_secs(2));
        assert_eq!(config.lease, LeaseOptions::default());
        assert_eq!(config.lease.name, "accord-agent");
        assert_eq!(config.lease.duration, Duration::from_secs(15));
    }

    #[test]
    fn run_takes_the_lease_name_and_a_whole_second_duration() {
        let cli = Cli::try_parse_from([
            "accord-agent",
            "run",
            "--lease-name",
            "agent-east",
            "--lease-duration",
            "4s",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("expected run");
        };
        assert_eq!(
            args.config().lease,
            LeaseOptions {
                name: "agent-east".into(),
                duration: Duration::from_secs(4),
            }
        );
        for bad in ["1500ms", "1s", "0s", "x", "100000000000s"] {
            assert!(
                Cli::try_parse_from(["accord-agent", "run", "--lease-duration", bad]).is_err(),
                "{bad:?} accepted"
            );
        }
        for bad in ["Agent", "ns/name", ""] {
            assert!(
                Cli::try_parse_from(["accord-agent", "run", "--lease-name", bad]).is_err(),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn run_takes_the_kafka_secret_and_resync_interval() {
        let cli = Cli::try_parse_from([
            "accord-agent",
            "run",
            "--kafka-secret",
            "kafka-prod",
            "--kafka-resync",
            "2s",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("expected run");
        };
        assert_eq!(
            args.config().kafka,
            KafkaOptions {
                secret: "kafka-prod".into(),
                resync: Duration::from_secs(2),
                probe: ProbeOptions::default(),
            }
        );
        for bad in ["ns/name", "Upper", "", "-x"] {
            assert!(
                Cli::try_parse_from(["accord-agent", "run", "--kafka-secret", bad]).is_err(),
                "{bad:?} accepted"
            );
        }
        assert!(Cli::try_parse_from(["accord-agent", "run", "--kafka-resync", "0s"]).is_err());
    }

    #[test]
    fn run_takes_a_kafka_probe_interval_and_a_shorter_timeout() {
        let cli = Cli::try_parse_checked([
            "accord-agent",
            "run",
            "--kafka-probe-interval",
            "3s",
            "--kafka-probe-timeout",
            "1500ms",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("expected run");
        };
        assert_eq!(
            args.config().kafka.probe,
            ProbeOptions {
                interval: Duration::from_secs(3),
                timeout: Duration::from_millis(1500),
            }
        );
        for (interval, timeout) in [("2s", "2s"), ("2s", "3s"), ("1s", "2s")] {
            let e = Cli::try_parse_checked([
                "accord-agent",
                "run",
                "--kafka-probe-interval",
                interval,
                "--kafka-probe-timeout",
                timeout,
            ])
            .unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
            assert!(
                e.to_string()
                    .contains("must be shorter than --kafka-probe-interval"),
                "{e}"
            );
        }
        // The default timeout (2s) against a shorter interval is refused just the same.
        assert!(
            Cli::try_parse_checked(["accord-agent", "run", "--kafka-probe-interval", "1s"])
                .is_err()
        );
        for bad in ["0s", "x", "-1s"] {
            assert!(
                Cli::try_parse_checked(["accord-agent", "run", "--kafka-probe-interval", bad])
                    .is_err(),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn run_takes_an_identity_secret_reference() {
        let cli = Cli::try_parse_from([
            "accord-agent",
            "run",
            "--identity-secret",
            "accord-system/accord-agent-identity",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("expected run");
        };
        assert_eq!(
            args.config().identity,
            IdentitySource::Secret {
                namespace: "accord-system".into(),
                name: "accord-agent-identity".into()
            }
        );
    }

    #[test]
    fn run_refuses_both_identity_sources_and_a_bad_secret_reference() {
        assert!(
            Cli::try_parse_from([
                "accord-agent",
                "run",
                "--identity-dir",
                "/x",
                "--identity-secret",
                "a/b"
            ])
            .is_err()
        );
        assert!(
            Cli::try_parse_from(["accord-agent", "run", "--identity-secret", "nameonly"]).is_err()
        );
    }
}
