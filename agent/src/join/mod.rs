//! `accord-agent join`: puts a member cluster under a hub, as `kubeadm join` puts a node
//! under a control plane.
//!
//! `flags (validate) → [--dry-run: print the objects] → member cluster (reachable?
//! permissions?) → existing identity? → hub (CA pinned by --ca-cert-hash) → Register with
//! the token → identity Secret → agent RBAC + Deployment | --run: the agent in the
//! foreground`.
//!
//! Everything that can be checked without spending the single-use token is checked before
//! registering, so a refused join changes nothing and the token can be used again.

mod render;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use accord_common::apply::{self, ApplyError};
use accord_common::pki::{parse_ca_cert_hash, validate_cluster_name};
use accord_common::preflight::{self, Permission, PreflightError};
use accord_common::register::{self, RegisterError, Registration};
use accord_common::token::{BootstrapToken, MalformedToken};
use accord_crds::AGENT_FIELD_MANAGER;
use clap::Args;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

pub use render::{
    AGENT_NAME, AgentManifestOptions, DEFAULT_HTTP_PORT, IdentityMaterial, agent_args,
    agent_cluster_rules, agent_namespace_rules, default_image, dry_run_output,
    helm_generated_template, identity_secret, render,
};

use crate::cli::{DEFAULT_IDENTITY_SECRET, parse_secret_name};
use crate::enforce::kafka::{DEFAULT_SECRET as DEFAULT_KAFKA_SECRET, KafkaOptions};
use crate::identity::{Identity, IdentitySource, default_server_name, hub_host};
use crate::run::{LeaseOptions, RunConfig, RunError};

/// Flags of `accord-agent join`.
#[derive(Debug, Args)]
pub struct JoinArgs {
    /// The hub's gRPC URL as this machine reaches it, https://HOST:PORT.
    #[arg(long, value_parser = parse_hub_url)]
    pub hub: String,
    /// Bootstrap token ID.SECRET from `accord-hub token create` (single use). May come
    /// from $ACCORD_JOIN_TOKEN instead, to keep it out of process listings.
    #[arg(long, env = "ACCORD_JOIN_TOKEN", hide_env_values = true)]
    pub token: TokenArg,
    /// sha256:HEX of the hub CA's public key, as printed by `accord-hub token create`; the
    /// hub is trusted only if its CA matches.
    #[arg(long, value_parser = parse_hash)]
    pub ca_cert_hash: String,
    /// Name of this member cluster on the hub (a DNS-1123 label); becomes the
    /// ManagedCluster's name.
    #[arg(long, value_parser = parse_cluster_name)]
    pub cluster_name: String,
    /// Kubeconfig of the member cluster (default: $KUBECONFIG, ~/.kube/config or the
    /// in-cluster configuration).
    #[arg(long, env = "ACCORD_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Labels for the ManagedCluster, k=v,k=v (policies select clusters by them).
    #[arg(long, value_parser = parse_labels, default_value = "")]
    pub labels: Labels,
    /// The agent's namespace in the member cluster.
    #[arg(long, default_value = "accord-system")]
    pub namespace: String,
    /// The agent's container image (default: accord-io/accord-agent:<this version>).
    #[arg(long)]
    pub image: Option<String>,
    /// Name the hub's serving certificate carries, when --hub's host is not in it (default:
    /// the host; `localhost` for a loopback address).
    #[arg(long)]
    pub tls_server_name: Option<String>,
    /// Join even if the name is registered with another identity, or this member cluster
    /// already holds an identity (the old agent certificate stops working).
    #[arg(long)]
    pub force: bool,
    /// Run the agent in the foreground with this kubeconfig instead of applying its
    /// Deployment (for clusters whose pods cannot run it, and for trying Accord out).
    #[arg(long, conflicts_with = "dry_run")]
    pub run: bool,
    /// With --run: OTLP/gRPC endpoint to export traces to (as `accord-agent run
    /// --otlp-endpoint`). Off when unset.
    #[arg(long, env = "ACCORD_OTLP_ENDPOINT", requires = "run", value_parser = crate::cli::parse_otlp_endpoint)]
    pub otlp_endpoint: Option<String>,
    /// Print the objects join would apply to the member cluster and change nothing;
    /// contacts neither the hub nor the member cluster, and the token stays unused.
    #[arg(long)]
    pub dry_run: bool,
    /// With --run: address of /metrics, /healthz and /readyz. Otherwise its port is the
    /// Deployment's HTTP port.
    #[arg(long, env = "ACCORD_HTTP_ADDR", default_value = "0.0.0.0:8081")]
    pub http_addr: SocketAddr,
    /// Secret in the agent's namespace holding this cluster's Kafka connection
    /// (bootstrap.servers, security.protocol, sasl.mechanism, sasl.username, sasl.password,
    /// ca.crt); the agent may read that one Secret and no other. Create it in the member
    /// cluster; its values never leave it.
    #[arg(long, default_value = DEFAULT_KAFKA_SECRET, value_parser = parse_secret_name)]
    pub kafka_secret: String,
    /// Replicas of the agent Deployment. With 2 or more, one holds the Lease `accord-agent`
    /// in the agent's namespace and is active; the others stand by and take over within
    /// the lease duration (15s) if it dies.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=10), conflicts_with = "run")]
    pub replicas: u16,
}

/// `--token` as given: checked by [`join`] rather than by the argument parser, whose
/// error message would repeat the secret. `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenArg(pub String);

impl std::str::FromStr for TokenArg {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

impl std::fmt::Debug for TokenArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenArg(<redacted>)")
    }
}

/// ManagedCluster labels given with `--labels`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(pub BTreeMap<String, String>);

impl JoinArgs {
    fn manifest_options(&self) -> AgentManifestOptions {
        AgentManifestOptions {
            namespace: self.namespace.clone(),
            image: self.image.clone().unwrap_or_else(default_image),
            http_port: self.http_addr.port(),
            kafka_secret: self.kafka_secret.clone(),
            replicas: self.replicas,
        }
    }

    fn server_name(&self) -> String {
        self.tls_server_name.clone().unwrap_or_else(|| {
            // The URL was validated by parse_hub_url, so it has a host.
            default_server_name(&hub_host(&self.hub).unwrap_or_default())
        })
    }
}

/// Why a join failed. Every variant before [`JoinError::Register`] leaves the token unused.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// `--token` is not a bootstrap token.
    #[error("--token: {0}")]
    Token(#[from] MalformedToken),
    /// The member cluster could not be reached or used.
    #[error("member cluster: {0}")]
    Member(#[source] ApplyError),
    /// The kubeconfig's user lacks permissions join needs on the member cluster.
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    /// Reading the existing identity Secret failed.
    #[error("reading Secret {namespace}/{DEFAULT_IDENTITY_SECRET} on the member cluster")]
    ReadIdentity {
        /// The agent's namespace.
        namespace: String,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
    /// The member cluster already holds an identity for another name or hub.
    #[error(
        "this member cluster is already joined as cluster {cluster:?} to the hub at {hub} (Secret \
         {namespace}/{DEFAULT_IDENTITY_SECRET}); nothing was changed. To join it again as \
         {wanted:?}, re-run with --force (the old identity stops being used)"
    )]
    AlreadyJoined {
        /// Cluster name in the existing identity.
        cluster: String,
        /// Hub URL in the existing identity.
        hub: String,
        /// The name asked for now.
        wanted: String,
        /// The agent's namespace.
        namespace: String,
    },
    /// The existing identity Secret cannot be read as an identity.
    #[error(
        "Secret {namespace}/{DEFAULT_IDENTITY_SECRET} on the member cluster exists but is not a \
         usable agent identity ({reason}); nothing was changed. Re-run with --force to replace it"
    )]
    BrokenIdentity {
        /// The agent's namespace.
        namespace: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// The hub could not be reached, did not match the pin, or refused.
    #[error(transparent)]
    Register(#[from] RegisterError),
    /// The hub registered the cluster, but storing the identity failed.
    #[error(
        "the hub registered cluster {cluster:?}, but storing its identity in Secret \
         {namespace}/{DEFAULT_IDENTITY_SECRET} failed; the token is spent, so create a new one \
         and re-run join with --force"
    )]
    StoreIdentity {
        /// The cluster name.
        cluster: String,
        /// The agent's namespace.
        namespace: String,
        /// What went wrong.
        #[source]
        source: Box<ApplyError>,
    },
    /// Applying the agent's objects failed after the identity was stored.
    #[error(
        "the cluster is registered and its identity stored, but applying the agent failed; fix \
         the cause and re-run the same join command (it reuses the stored identity)"
    )]
    ApplyAgent(#[source] Box<ApplyError>),
    /// Writing the dry-run output failed.
    #[error("writing the objects")]
    Output(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The agent, run with --run, stopped with an error.
    #[error(transparent)]
    Run(#[from] RunError),
}

impl JoinError {
    /// Whether the token can still be used after this failure: it was well-formed, the hub
    /// did not spend it, and the hub did not refuse the token itself.
    pub fn token_still_usable(&self) -> bool {
        match self {
            Self::Token(_) | Self::StoreIdentity { .. } | Self::ApplyAgent(_) | Self::Run(_) => {
                false
            }
            Self::Register(RegisterError::Refused { status, .. }) => {
                status.code() != tonic::Code::Unauthenticated
            }
            _ => true,
        }
    }
}

/// What join does about an identity found on the member cluster.
#[derive(Debug, PartialEq, Eq)]
enum Existing {
    /// None there (or --force): register.
    Register,
    /// The same cluster name and hub: keep it, do not spend the token.
    Reuse,
}

/// Decides from the member's identity Secret (if any) whether to register.
fn existing_identity(
    args: &JoinArgs,
    secret: Option<&Secret>,
) -> Result<(Existing, Option<Identity>), JoinError> {
    let Some(secret) = secret else {
        return Ok((Existing::Register, None));
    };
    match Identity::from_secret(secret) {
        Ok(id) if args.force => Ok((Existing::Register, Some(id))),
        Ok(id) if id.cluster == args.cluster_name && id.hub_url == args.hub => {
            Ok((Existing::Reuse, Some(id)))
        }
        Ok(id) => Err(JoinError::AlreadyJoined {
            cluster: id.cluster,
            hub: id.hub_url,
            wanted: args.cluster_name.clone(),
            namespace: args.namespace.clone(),
        }),
        Err(_) if args.force => Ok((Existing::Register, None)),
        Err(e) => Err(JoinError::BrokenIdentity {
            namespace: args.namespace.clone(),
            reason: e.to_string(),
        }),
    }
}

/// The permissions join needs on the member cluster: apply `objects` (with the identity
/// Secret among them) and read the identity Secret by name.
fn required_permissions(objects: &[serde_json::Value], namespace: &str) -> Vec<Permission> {
    let mut needed = preflight::required_permissions(objects, false);
    needed.push(
        Permission::new("", "secrets", "get")
            .in_namespace(Some(namespace))
            .named(Some(DEFAULT_IDENTITY_SECRET)),
    );
    needed.sort();
    needed.dedup();
    needed
}

const ADVICE: &str = "Run join with a kubeconfig of a cluster administrator of the member \
                      cluster (it creates a ClusterRole and a ClusterRoleBinding for the agent), \
                      or have one grant these.";
const ADVICE_RUN: &str = "With --run the agent acts as the kubeconfig's user, so that user \
                          needs the agent's permissions too; use a kubeconfig that has them, or \
                          join without --run to run the agent as its own ServiceAccount.";

/// Runs `accord-agent join`; with `--run`, the agent runs until `shutdown` completes.
pub async fn join(args: JoinArgs, shutdown: impl Future<Output = ()>) -> Result<(), JoinError> {
    let token: BootstrapToken = args.token.0.parse()?;
    let options = args.manifest_options();
    let agent_objects = render(&options);
    if args.dry_run {
        use std::io::Write as _;
        let yaml = dry_run_output(&options).map_err(|e| JoinError::Output(Box::new(e)))?;
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(yaml.as_bytes())
            .and_then(|()| stdout.flush())
            .map_err(|e| JoinError::Output(Box::new(e)))?;
        return Ok(());
    }

    accord_common::pki::install_crypto_provider();
    let ns = args.namespace.as_str();
    let (client, url) = apply::connect(args.kubeconfig.as_ref(), None)
        .await
        .map_err(JoinError::Member)?;
    apply::check_reachable(&client, &url)
        .await
        .map_err(JoinError::Member)?;
    eprintln!(
        "joining the member cluster at {url} to the hub at {} as {:?}",
        args.hub, args.cluster_name
    );

    // What will be applied, with a placeholder of the identity Secret for the check.
    let placeholder = serde_json::to_value(identity_secret(
        ns,
        &IdentityMaterial {
            hub_url: String::new(),
            cluster: String::new(),
            server_name: None,
            ca_pem: String::new(),
            cert_pem: String::new(),
            key_pem: String::new(),
        },
    ))
    .map_err(|e| JoinError::Output(Box::new(e)))?;
    let mut to_apply = vec![agent_objects[0].clone(), placeholder];
    if !args.run {
        to_apply.extend(agent_objects.iter().skip(1).cloned());
    }
    let asker = preflight::Asker {
        command: "accord-agent join",
        url: &url,
        advice: if args.run { ADVICE_RUN } else { ADVICE },
    };
    preflight::check(
        &client,
        &asker,
        ns,
        &required_permissions(&to_apply, ns),
        &preflight::granted_permissions(&agent_objects),
    )
    .await?;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let found = match secrets.get_opt(DEFAULT_IDENTITY_SECRET).await {
        Ok(found) => found,
        // Its namespace does not exist yet: nothing there.
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(source) => {
            return Err(JoinError::ReadIdentity {
                namespace: ns.to_owned(),
                source,
            });
        }
    };
    let (decision, previous) = existing_identity(&args, found.as_ref())?;

    match decision {
        Existing::Reuse => eprintln!(
            "already joined as {:?}; keeping the identity in Secret {ns}/{DEFAULT_IDENTITY_SECRET} \
             (the token was not used)",
            args.cluster_name
        ),
        Existing::Register => {
            if let Some(previous) = &previous {
                eprintln!(
                    "--force: replacing the identity of cluster {:?} (hub {}) in Secret \
                     {ns}/{DEFAULT_IDENTITY_SECRET}",
                    previous.cluster, previous.hub_url
                );
            }
            let kubernetes_version = client
                .apiserver_version()
                .await
                .map(|v| v.git_version)
                .unwrap_or_default();
            let server_name = args.server_name();
            let token = token.to_string();
            let registered = register::register(&Registration {
                hub_url: &args.hub,
                server_name: &server_name,
                ca_cert_hash: &args.ca_cert_hash,
                token: &token,
                cluster: &args.cluster_name,
                labels: args.labels.0.clone().into_iter().collect::<HashMap<_, _>>(),
                agent_version: env!("CARGO_PKG_VERSION"),
                kubernetes_version: &kubernetes_version,
                force: args.force,
            })
            .await?;
            eprintln!(
                "registered with the hub as {:?} (hub CA pinned, certificate valid until Unix \
                 time {})",
                args.cluster_name, registered.not_after_unix
            );
            let secret = identity_secret(
                ns,
                &IdentityMaterial {
                    hub_url: args.hub.clone(),
                    cluster: args.cluster_name.clone(),
                    server_name: args.tls_server_name.clone(),
                    ca_pem: registered.ca_pem,
                    cert_pem: registered.cert_pem,
                    key_pem: registered.key_pem,
                },
            );
            let store = async {
                apply::apply(&client, AGENT_FIELD_MANAGER, &agent_objects[0]).await?;
                let value = serde_json::to_value(&secret).map_err(|e| ApplyError::Kubeconfig {
                    path: "(identity Secret)".into(),
                    source: Box::new(e),
                })?;
                apply::apply(&client, AGENT_FIELD_MANAGER, &value).await
            };
            store.await.map_err(|source| JoinError::StoreIdentity {
                cluster: args.cluster_name.clone(),
                namespace: ns.to_owned(),
                source: Box::new(source),
            })?;
            eprintln!("stored the identity in Secret {ns}/{DEFAULT_IDENTITY_SECRET}");
        }
    }

    if args.run {
        eprintln!("running the agent in the foreground (Ctrl-C stops it)");
        let config = RunConfig {
            kubeconfig: args.kubeconfig.clone(),
            identity: IdentitySource::Secret {
                namespace: ns.to_owned(),
                name: DEFAULT_IDENTITY_SECRET.to_owned(),
            },
            http_addr: args.http_addr,
            namespace: ns.to_owned(),
            heartbeat_interval: Duration::from_secs(1),
            report_debounce: Duration::from_millis(100),
            capacity_interval: crate::capacity::DEFAULT_INTERVAL,
            kafka: KafkaOptions {
                secret: args.kafka_secret.clone(),
                ..KafkaOptions::default()
            },
            lease: LeaseOptions::default(),
        };
        return Ok(crate::run::run(config, shutdown).await?);
    }

    for object in &agent_objects {
        let applied = apply::apply(&client, AGENT_FIELD_MANAGER, object)
            .await
            .map_err(|e| JoinError::ApplyAgent(Box::new(e)))?;
        eprintln!("applied {applied}");
    }
    println!(
        "Cluster {name:?} joined the hub at {hub}. The agent runs as Deployment {ns}/{AGENT_NAME} \
         on the member cluster.\nOn the management cluster, watch it become Available:\n  \
         kubectl get managedcluster {name}",
        name = args.cluster_name,
        hub = args.hub,
    );
    Ok(())
}

fn parse_hub_url(s: &str) -> Result<String, String> {
    let s = s.trim().trim_end_matches('/');
    hub_host(s).map_err(|reason| format!("{s:?} {reason} (expected https://HOST:PORT)"))?;
    Ok(s.to_owned())
}

fn parse_hash(s: &str) -> Result<String, String> {
    parse_ca_cert_hash(s)
        .map(|_| s.trim().to_owned())
        .map_err(|e| e.to_string())
}

fn parse_cluster_name(s: &str) -> Result<String, String> {
    validate_cluster_name(s).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}

/// `k=v,k=v` with Kubernetes label syntax: an optional DNS-subdomain prefix and `/`, a name
/// of up to 63 characters; values of up to 63 characters (may be empty).
fn parse_labels(s: &str) -> Result<Labels, String> {
    let mut labels = BTreeMap::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("label {pair:?} is not KEY=VALUE"))?;
        let (prefix, name) = match key.rsplit_once('/') {
            Some((prefix, name)) => (Some(prefix), name),
            None => (None, key),
        };
        if let Some(prefix) = prefix
            && (prefix.len() > 253
                || !prefix
                    .split('.')
                    .all(accord_crds::validate::is_dns1123_label))
        {
            return Err(format!(
                "label key {key:?}: the prefix must be a DNS subdomain"
            ));
        }
        if name.is_empty() || !is_label_word(name) {
            return Err(format!(
                "label key {key:?}: the name must be 1-63 characters of letters, digits, '-', '_' \
                 or '.', starting and ending with a letter or digit"
            ));
        }
        if !value.is_empty() && !is_label_word(value) {
            return Err(format!(
                "label {key:?}: the value {value:?} must be at most 63 characters of letters, \
                 digits, '-', '_' or '.', starting and ending with a letter or digit"
            ));
        }
        if labels.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(format!("label {key:?} is given twice"));
        }
    }
    Ok(Labels(labels))
}

fn is_label_word(s: &str) -> bool {
    let bytes = s.as_bytes();
    s.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests;
