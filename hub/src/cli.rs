//! Command-line interface of `accord-hub`.

use accord_crds::duration::parse_flag;
use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::controllers::ControllerOptions;
use crate::grpc::AgentSettings;
use crate::kinds::KindOptions;
use crate::serve::ServeConfig;

/// The Accord hub: multi-cluster federation control plane.
#[derive(Debug, Parser)]
#[command(name = "accord-hub", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands of `accord-hub`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the CRD YAML of every Accord kind (or write one file per CRD with --out-dir).
    Crds {
        /// Write `<plural>.accord.io.yaml` files into this directory instead of printing.
        #[arg(long)]
        out_dir: Option<PathBuf>,
        /// Namespace of the hub whose Service `accord-hub` serves the conversion webhook
        /// (as `install --namespace`).
        #[arg(long, default_value = accord_crds::versions::DEFAULT_SERVICE_NAMESPACE)]
        namespace: String,
        /// Port of that Service's webhook (as `install --webhook-port`).
        #[arg(long, default_value_t = accord_crds::versions::DEFAULT_SERVICE_PORT as u16)]
        webhook_port: u16,
    },
    /// Install the hub on a management cluster: CRDs, RBAC, Deployment, Services, hub CA.
    Install(crate::install::InstallArgs),
    /// Rewrite every Accord object in the storage version (v1beta1), then trim storedVersions.
    ///
    /// Run after installing the new CRDs, with the hub running (its conversion webhook reads
    /// objects stored as v1alpha1). Sets each CRD's status.storedVersions to [v1beta1] once
    /// every object of its kind is rewritten. Idempotent: run it again to resume.
    MigrateStorage(crate::migrate::MigrateArgs),
    /// Run the hub.
    Serve(ServeArgs),
    /// Bootstrap tokens for joining member clusters.
    Token {
        /// Token operation.
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Member clusters.
    Cluster {
        /// Cluster operation.
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Print every placement of one object, as the leading hub sees it: the full
    /// per-cluster view, which the object's status cuts down above
    /// --status-placements-threshold.
    Placements {
        /// The object: KIND/NAMESPACE/NAME; KIND as in `kubectl get` (e.g.
        /// FederatedKafkaTopic, fkt, ccsp, pfed).
        object: String,
        /// The leading hub replica's HTTP endpoint (its --http-addr), e.g. reached through
        /// `kubectl -n accord-system port-forward POD 8080`.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        hub_http: String,
        /// Print the view as JSON (the status as it would read with every placement).
        #[arg(long)]
        json: bool,
        /// Also list every cluster left out, by reason (the status names at most 20 per
        /// reason).
        #[arg(long)]
        explain: bool,
    },
}

/// Where the hub's state lives.
#[derive(Debug, Args)]
pub struct StateArgs {
    /// Kubeconfig of the management cluster (default: in-cluster or $KUBECONFIG).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// etcd client URLs, comma-separated.
    #[arg(
        long,
        env = "ACCORD_ETCD_ENDPOINTS",
        value_delimiter = ',',
        required = true
    )]
    pub etcd_endpoints: Vec<String>,
    /// Key prefix of the hub's state in etcd.
    #[arg(long, default_value = crate::store::keys::DEFAULT_PREFIX)]
    pub etcd_prefix: String,
    /// CA certificate (PEM) that signed etcd's serving certificate; needed for https://
    /// endpoints.
    #[arg(long, env = "ACCORD_ETCD_CA")]
    pub etcd_ca: Option<PathBuf>,
    /// Client certificate (PEM) presented to etcd (etcd's --client-cert-auth).
    #[arg(long, env = "ACCORD_ETCD_CERT", requires = "etcd_key")]
    pub etcd_cert: Option<PathBuf>,
    /// Private key (PEM) of --etcd-cert.
    #[arg(long, env = "ACCORD_ETCD_KEY", requires = "etcd_cert")]
    pub etcd_key: Option<PathBuf>,
    /// User name for etcd authentication.
    #[arg(long, env = "ACCORD_ETCD_USERNAME", requires = "etcd_password_file")]
    pub etcd_username: Option<String>,
    /// File holding the password of --etcd-username (never given on the command line;
    /// one trailing newline is ignored).
    #[arg(long, env = "ACCORD_ETCD_PASSWORD_FILE", requires = "etcd_username")]
    pub etcd_password_file: Option<PathBuf>,
    /// Namespace of the hub on the management cluster.
    #[arg(long, default_value = "accord-system")]
    pub namespace: String,
}

impl StateArgs {
    /// The etcd connection the flags describe, with the files they name read.
    pub fn etcd_connection(
        &self,
    ) -> Result<crate::store::EtcdConnection, crate::store::ConnectionError> {
        let files = crate::store::EtcdFiles {
            ca: self.etcd_ca.clone(),
            cert: self.etcd_cert.clone(),
            key: self.etcd_key.clone(),
            username: self.etcd_username.clone(),
            password_file: self.etcd_password_file.clone(),
        };
        crate::store::EtcdConnection::from_files(self.etcd_endpoints.clone(), &files)
    }

    /// Connects to the hub's store (see [`crate::store::Store::connect_with`]).
    pub async fn connect_store(&self) -> Result<crate::store::Store, crate::store::StoreError> {
        let connection = self.etcd_connection()?;
        crate::store::Store::connect_with(
            &connection,
            crate::store::Keyspace::new(&self.etcd_prefix),
        )
        .await
    }
}

/// Flags of `accord-hub serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    state: StateArgs,
    /// Address of the agent-facing gRPC server (mTLS).
    #[arg(long, default_value = "0.0.0.0:7443")]
    grpc_addr: SocketAddr,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    http_addr: SocketAddr,
    /// Address of the FederatedKafkaTopic admission webhook (HTTPS, hub CA).
    #[arg(long, env = "ACCORD_WEBHOOK_ADDR", default_value = "0.0.0.0:9443")]
    webhook_addr: SocketAddr,
    /// Name of this replica (default: $POD_NAME, else $HOSTNAME-<pid>).
    #[arg(long)]
    replica_name: Option<String>,
    /// Extra DNS names or IPs for the serving certificate, comma-separated.
    #[arg(long, value_delimiter = ',')]
    tls_san: Vec<String>,
    /// How often the hub checks its agent streams for silence (agents heartbeat every
    /// second by default; see --heartbeat-timeout).
    #[arg(long, default_value = "1s", value_parser = parse_flag)]
    heartbeat_interval: Duration,
    /// Silence after which an agent counts as unavailable.
    #[arg(long, default_value = "3s", value_parser = parse_flag)]
    heartbeat_timeout: Duration,
    /// TTL of this replica's presence lease, on which the `connected/` keys of its agents
    /// hang: when the replica dies, its clusters whose agents do not reconnect elsewhere
    /// count as disconnected once it runs out. Independent of --heartbeat-timeout (a live
    /// replica removes a silent agent's key itself): a TTL as short as the heartbeat
    /// timeout was lost under load whenever etcd answered a refresh late, and with it every
    /// connected cluster at once.
    #[arg(long, default_value = "15s", value_parser = parse_flag)]
    presence_ttl: Duration,
    /// Leader election lease TTL: a crashed leader is replaced within it (a leader that
    /// stops hands over at once). As Kubernetes' own controllers' 15 s lease: a TTL of a few
    /// seconds was lost whenever etcd answered a refresh late, and every loss restarts the
    /// controllers, which re-list everything they watch.
    #[arg(long, default_value = "15s", value_parser = parse_flag)]
    election_ttl: Duration,
    /// Validity of agent client certificates (agents renew before expiry).
    #[arg(long, default_value = "2160h", value_parser = parse_flag)]
    agent_cert_validity: Duration,
    /// An object's status is written at most once per this window, however many member
    /// clusters report within it.
    #[arg(long, default_value = "200ms", value_parser = parse_flag)]
    status_coalesce_window: Duration,
    /// A status that only shows progress (some member clusters have not reported on the
    /// current decision yet) is written at most once per this interval; a new decision and
    /// an outcome (every member reported) are written within the coalescing window.
    #[arg(long, default_value = "5s", value_parser = parse_flag)]
    status_progress_interval: Duration,
    /// Most placements an object's status lists one by one. Above it, `status.placements`
    /// lists only those not Synced (up to --status-placements-listed) and `status.summary`
    /// counts every placement by state, so the object stays small at any fleet size; the
    /// full view is `accord-hub placements KIND/NAMESPACE/NAME`.
    #[arg(long, default_value_t = 100)]
    status_placements_threshold: usize,
    /// Most placements a status lists above --status-placements-threshold (those not
    /// Synced, in placement order).
    #[arg(long, default_value_t = 20)]
    status_placements_listed: usize,
    /// OTLP/gRPC endpoint to export traces to, e.g. `http://jaeger:4317`: each change of a
    /// placed object gets a trace (its decision, record write, fan-out and, from agents that
    /// export too, every member's apply). Off when unset: no exporter, no trace spans.
    #[arg(long, env = "ACCORD_OTLP_ENDPOINT", value_parser = parse_otlp_endpoint)]
    pub otlp_endpoint: Option<String>,
    /// Address of the read-only fleet console (HTTP; off when unset). Every request needs
    /// the user's own Kubernetes bearer token (header or the console's sign-in cookie),
    /// checked with TokenReview and SubjectAccessReview; see docs/operations.md, "Console".
    #[arg(long, env = "ACCORD_CONSOLE_ADDR")]
    console_addr: Option<SocketAddr>,
    /// Link of an object's trace on its console page: a URL in which `{traceID}` is
    /// replaced by the object's `status.traceID` (e.g.
    /// `http://jaeger.example:16686/trace/{traceID}`). Unset: the id is shown without a link.
    #[arg(long, env = "ACCORD_CONSOLE_TRACE_URL", value_parser = parse_trace_url)]
    console_trace_url: Option<String>,
    /// Each kind's own flags.
    #[command(flatten)]
    kinds: KindOptions,
}

fn parse_otlp_endpoint(value: &str) -> Result<String, String> {
    accord_common::telemetry::parse_endpoint(value).map_err(|e| e.to_string())
}

/// A `--console-trace-url`: an http(s) URL naming `{traceID}`.
fn parse_trace_url(s: &str) -> Result<String, String> {
    if !(s.starts_with("http://") || s.starts_with("https://")) {
        return Err(format!("{s:?} is not an http:// or https:// URL"));
    }
    if !s.contains("{traceID}") {
        return Err(format!(
            "{s:?} does not name {{traceID}}, which is replaced by the object's trace id"
        ));
    }
    Ok(s.to_owned())
}

/// Token operations.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a bootstrap token and print a ready `accord-agent join` line.
    Create(TokenCreateArgs),
}

/// Flags of `accord-hub token create`.
#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    #[command(flatten)]
    state: StateArgs,
    /// How long the token stays valid.
    #[arg(long, default_value = "24h", value_parser = parse_flag)]
    ttl: Duration,
    /// The hub's gRPC URL as member clusters reach it.
    #[arg(long, default_value = "https://127.0.0.1:7443")]
    hub_url: String,
    /// Cluster name to put in the printed join line.
    #[arg(long, default_value = "<cluster-name>")]
    cluster_name: String,
    /// Description kept with the token.
    #[arg(long, default_value = "created by accord-hub token create")]
    description: String,
}

/// Cluster operations.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Revoke a member cluster: delete its registry record (every hub replica ends its
    /// stream within a second and refuses its certificate from then on) and, with a
    /// kubeconfig, its ManagedCluster.
    Revoke(ClusterRevokeArgs),
}

/// Flags of `accord-hub cluster revoke`.
#[derive(Debug, Args)]
pub struct ClusterRevokeArgs {
    #[command(flatten)]
    state: StateArgs,
    /// Name of the cluster to revoke.
    name: String,
}

/// Parses arguments and runs the command; the binary's whole `main`.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let otlp_endpoint = match &cli.command {
        Command::Serve(a) => a.otlp_endpoint.clone(),
        _ => None,
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The exporter's channel is made on the runtime.
    let _in_runtime = runtime.enter();
    let telemetry = accord_common::telemetry::init(
        "info,kube=warn,tower=warn,h2=warn",
        "accord-hub",
        otlp_endpoint.as_deref(),
    );
    if let Err(e) = accord_common::telemetry::start(Vec::new()) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let ended = runtime.block_on(async {
        let ended = run(cli).await;
        telemetry.shutdown().await;
        ended
    });
    match ended {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn default_replica_name() -> String {
    std::env::var("POD_NAME").unwrap_or_else(|_| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "accord-hub".into());
        format!("{host}-{}", std::process::id())
    })
}

/// Runs a parsed command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Crds {
            out_dir,
            namespace,
            webhook_port,
        } => {
            let crds = accord_crds::all_crds_served_at(&namespace, i32::from(webhook_port));
            match out_dir {
                Some(dir) => {
                    for path in crate::crdgen::write_crds(&dir, crds)? {
                        println!("wrote {path}");
                    }
                }
                None => print!("{}", accord_crds::render_crds_yaml(&crds)?),
            }
        }
        Command::Install(a) => crate::install::run(a).await?,
        Command::MigrateStorage(a) => crate::migrate::run(a).await?,
        Command::Serve(a) => {
            let replica = a.replica_name.unwrap_or_else(default_replica_name);
            let etcd = a.state.etcd_connection()?;
            crate::serve::serve(ServeConfig {
                kubeconfig: a.state.kubeconfig,
                etcd,
                etcd_prefix: a.state.etcd_prefix,
                grpc_addr: a.grpc_addr,
                http_addr: a.http_addr,
                webhook_addr: a.webhook_addr,
                namespace: a.state.namespace,
                replica: replica.clone(),
                tls_sans: a.tls_san,
                agents: AgentSettings {
                    replica,
                    heartbeat_interval: a.heartbeat_interval,
                    heartbeat_timeout: a.heartbeat_timeout,
                    cert_validity: a.agent_cert_validity,
                },
                console: crate::console::ConsoleOptions {
                    addr: a.console_addr,
                    trace_url: a.console_trace_url,
                },
                election_ttl: a.election_ttl,
                presence_ttl: a.presence_ttl.max(Duration::from_secs(2)),
                kinds: a.kinds,
                controllers: ControllerOptions {
                    status_window: a.status_coalesce_window,
                    status_progress_interval: a.status_progress_interval,
                    status_limits: accord_crds::StatusLimits {
                        threshold: a.status_placements_threshold,
                        listed: a.status_placements_listed,
                    },
                },
            })
            .await?
        }
        Command::Token {
            command: TokenCommand::Create(a),
        } => {
            let line =
                crate::token::create(&a.state, a.ttl, &a.hub_url, &a.cluster_name, &a.description)
                    .await?;
            println!("{line}");
        }
        Command::Placements {
            object,
            hub_http,
            json,
            explain,
        } => crate::placements::print(&hub_http, &object, json, explain).await?,
        Command::Cluster {
            command: ClusterCommand::Revoke(a),
        } => {
            let revoked = crate::cluster_cmd::revoke(&a.state, &a.name).await?;
            for line in revoked.lines() {
                println!("{line}");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `accord-hub crds` names the conversion webhook where `install` puts it for the same
    /// namespace and port.
    #[test]
    fn crds_name_the_conversion_webhook_of_the_namespace_and_port_given() {
        let cli = Cli::try_parse_from([
            "accord-hub",
            "crds",
            "--namespace",
            "platform",
            "--webhook-port",
            "8443",
        ])
        .unwrap();
        let Command::Crds {
            namespace,
            webhook_port,
            ..
        } = cli.command
        else {
            panic!("crds");
        };
        let options = crate::install::InstallOptions {
            namespace: namespace.clone(),
            webhook_port,
            ..crate::install::InstallOptions::default()
        };
        let installed = crate::install::crds(&options, None).unwrap();
        let printed = accord_crds::all_crds_served_at(&namespace, i32::from(webhook_port));
        assert_eq!(installed.len(), printed.len());
        for (installed, printed) in installed.iter().zip(&printed) {
            let printed = serde_json::to_value(printed).unwrap();
            let service = "/spec/conversion/webhook/clientConfig/service";
            assert_eq!(printed.pointer(service), installed.pointer(service));
            assert_eq!(
                printed.pointer(&format!("{service}/namespace")),
                Some(&serde_json::json!("platform"))
            );
        }
    }
}
