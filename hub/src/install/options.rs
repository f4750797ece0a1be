//! What `accord-hub install` installs: the options [`render`](super::render) turns into
//! objects, their defaults (shared with the Helm chart's `values.yaml`) and their validation.

use std::fmt;

/// Name of the hub's Deployment, ServiceAccount, ClusterRole, Role, bindings and gRPC Service.
pub const HUB_NAME: &str = "accord-hub";
/// Name of the Service exposing the hub's `/metrics`, `/healthz` and `/readyz`.
pub const HUB_METRICS_SERVICE: &str = "accord-hub-metrics";
/// Name of the evaluation etcd's StatefulSet and headless Service (`--with-etcd`).
pub const ETCD_NAME: &str = "accord-etcd";
/// Namespace the hub is installed into unless `--namespace` says otherwise.
pub const DEFAULT_NAMESPACE: &str = "accord-system";
/// Registry and repository of the hub image; the tag is the hub's version.
pub const DEFAULT_IMAGE_REPOSITORY: &str = "accord-io/accord-hub";
/// Image of the evaluation etcd (`--with-etcd`): the release the testbed runs.
pub const DEFAULT_ETCD_IMAGE: &str = "etcd:v3.6.16";
/// Port of the agent-facing gRPC server (mTLS).
pub const DEFAULT_GRPC_PORT: u16 = 7443;
/// Port of `/metrics`, `/healthz` and `/readyz`.
pub const DEFAULT_HTTP_PORT: u16 = 8080;
/// Port of the FederatedKafkaTopic admission webhook (HTTPS), on the pod and the Service.
pub const DEFAULT_WEBHOOK_PORT: u16 = crate::webhook::DEFAULT_PORT;
/// Name of the Secret holding the hub's etcd client TLS files and credentials (keys
/// [`ETCD_SECRET_CA`], [`ETCD_SECRET_CERT`], [`ETCD_SECRET_KEY`], [`ETCD_SECRET_USERNAME`],
/// [`ETCD_SECRET_PASSWORD`]).
pub const ETCD_SECRET_NAME: &str = "accord-hub-etcd";
/// Where the hub container mounts that Secret, read-only.
pub const ETCD_SECRET_MOUNT: &str = "/etc/accord/etcd";
/// Key of the CA certificate that signed etcd's serving certificate.
pub const ETCD_SECRET_CA: &str = "ca.crt";
/// Key of the hub's etcd client certificate.
pub const ETCD_SECRET_CERT: &str = "tls.crt";
/// Key of the client certificate's private key.
pub const ETCD_SECRET_KEY: &str = "tls.key";
/// Key of the etcd user name.
pub const ETCD_SECRET_USERNAME: &str = "username";
/// Key of the etcd user's password.
pub const ETCD_SECRET_PASSWORD: &str = "password";
/// etcd's client port.
pub const ETCD_CLIENT_PORT: u16 = 2379;
/// etcd's peer port.
pub const ETCD_PEER_PORT: u16 = 2380;
/// etcd's `/metrics`, `/livez`, `/readyz` port.
pub const ETCD_METRICS_PORT: u16 = 2381;

/// The hub image of this build: [`DEFAULT_IMAGE_REPOSITORY`] tagged with the crate version.
pub fn default_image() -> String {
    format!("{DEFAULT_IMAGE_REPOSITORY}:{}", env!("CARGO_PKG_VERSION"))
}

/// Where the hub keeps its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdMode {
    /// An etcd the operator runs (production): its client URLs.
    External {
        /// Client URLs, e.g. `https://etcd-0.example:2379`.
        endpoints: Vec<String>,
    },
    /// A single-replica etcd StatefulSet next to the hub, for evaluation only: one member,
    /// plaintext, no backups.
    Bundled {
        /// The etcd image.
        image: String,
        /// Size of its PersistentVolumeClaim, e.g. `1Gi`.
        storage_size: String,
    },
}

impl EtcdMode {
    /// The evaluation etcd with its default image and volume size.
    pub fn bundled() -> Self {
        Self::Bundled {
            image: DEFAULT_ETCD_IMAGE.to_owned(),
            storage_size: "1Gi".to_owned(),
        }
    }
}

/// What the hub takes from its etcd Secret ([`ETCD_SECRET_NAME`]), mounted read-only at
/// [`ETCD_SECRET_MOUNT`]: which of client TLS and authentication the operator's etcd
/// needs. Only names and keys; the files' contents never pass through rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdClientSecret {
    /// The Secret's name.
    pub secret_name: String,
    /// `ca.crt`: the CA of etcd's serving certificate (`--etcd-ca`).
    pub ca: bool,
    /// `tls.crt` and `tls.key`: a client certificate (`--etcd-cert`, `--etcd-key`).
    pub client_certificate: bool,
    /// `username` and `password`: authentication (`ACCORD_ETCD_USERNAME`,
    /// `--etcd-password-file`).
    pub auth: bool,
}

impl Default for EtcdClientSecret {
    fn default() -> Self {
        Self {
            secret_name: ETCD_SECRET_NAME.to_owned(),
            ca: false,
            client_certificate: false,
            auth: false,
        }
    }
}

/// How the hub's gRPC Service is exposed to member clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ServiceType {
    /// Reachable inside the management cluster only (put an Ingress/Gateway or a
    /// TLS-passthrough proxy in front).
    #[default]
    #[value(name = "ClusterIP")]
    ClusterIP,
    /// A port on every node.
    #[value(name = "NodePort")]
    NodePort,
    /// A cloud load balancer.
    #[value(name = "LoadBalancer")]
    LoadBalancer,
}

impl fmt::Display for ServiceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ClusterIP => "ClusterIP",
            Self::NodePort => "NodePort",
            Self::LoadBalancer => "LoadBalancer",
        })
    }
}

/// Requests and limits of a container, as Kubernetes quantities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resources {
    /// CPU request, e.g. `100m`.
    pub cpu_request: String,
    /// Memory request, e.g. `128Mi`.
    pub memory_request: String,
    /// CPU limit, e.g. `1`.
    pub cpu_limit: String,
    /// Memory limit, e.g. `1Gi`.
    pub memory_limit: String,
}

impl Resources {
    /// The hub's defaults: small when idle, room for thousands of agent streams (the
    /// budget is 200 KiB per connected cluster; see docs/benchmarks.md).
    pub fn hub_default() -> Self {
        Self {
            cpu_request: "100m".into(),
            memory_request: "128Mi".into(),
            cpu_limit: "2".into(),
            memory_limit: "2Gi".into(),
        }
    }

    /// The evaluation etcd's defaults.
    pub fn etcd_default() -> Self {
        Self {
            cpu_request: "100m".into(),
            memory_request: "128Mi".into(),
            cpu_limit: "1".into(),
            memory_limit: "1Gi".into(),
        }
    }
}

/// Everything [`render`](super::render) needs. [`Default`] is what the committed
/// `deploy/manifests/accord-hub.yaml` and the Helm chart's `values.yaml` describe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallOptions {
    /// Namespace of the hub (holds the CA Secret, the Deployment, the Services).
    pub namespace: String,
    /// Hub container image.
    pub image: String,
    /// `imagePullPolicy` of every container.
    pub image_pull_policy: String,
    /// Hub replicas: one leader computes placements, every replica serves agents.
    pub replicas: u32,
    /// Where the hub's state lives.
    pub etcd: EtcdMode,
    /// Key prefix of the hub's state in etcd.
    pub etcd_prefix: String,
    /// Client TLS and credentials for an operator's etcd, from a Secret (none by default).
    pub etcd_client: Option<EtcdClientSecret>,
    /// Port of the agent-facing gRPC server.
    pub grpc_port: u16,
    /// Port of `/metrics`, `/healthz`, `/readyz`.
    pub http_port: u16,
    /// Port of the admission webhook (HTTPS) on the pod and the Service `accord-hub`.
    pub webhook_port: u16,
    /// Type of the gRPC Service.
    pub service_type: ServiceType,
    /// Extra DNS names or IPs for the hub's serving certificate (the address members dial).
    pub tls_sans: Vec<String>,
    /// Base URL (`https://HOST[:PORT]`) the API server calls the admission webhook at,
    /// instead of the Service `accord-hub`: for a hub that runs outside the management
    /// cluster (the sandbox runs it as a local process). Each webhook's path is appended.
    pub webhook_url: Option<String>,
    /// Hub container resources.
    pub resources: Resources,
    /// Evaluation etcd container resources (`--with-etcd`).
    pub etcd_resources: Resources,
}

impl Default for InstallOptions {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            image: default_image(),
            image_pull_policy: "IfNotPresent".to_owned(),
            replicas: 1,
            etcd: EtcdMode::bundled(),
            etcd_prefix: crate::store::keys::DEFAULT_PREFIX.to_owned(),
            etcd_client: None,
            grpc_port: DEFAULT_GRPC_PORT,
            http_port: DEFAULT_HTTP_PORT,
            webhook_port: DEFAULT_WEBHOOK_PORT,
            service_type: ServiceType::ClusterIP,
            tls_sans: Vec::new(),
            webhook_url: None,
            resources: Resources::hub_default(),
            etcd_resources: Resources::etcd_default(),
        }
    }
}

/// Options that cannot describe a working installation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// The namespace is not a DNS-1123 label.
    #[error(
        "invalid --namespace {0:?}: must be a DNS-1123 label (lower-case letters, digits and \
         '-', starting and ending with a letter or digit, at most 63 characters)"
    )]
    Namespace(String),
    /// An image reference is empty or contains whitespace.
    #[error("invalid {flag} {value:?}: expected an image reference like {example}")]
    Image {
        /// The flag, e.g. `--image`.
        flag: &'static str,
        /// The value given.
        value: String,
        /// A valid example.
        example: String,
    },
    /// Fewer than one replica.
    #[error("invalid --replicas 0: the hub needs at least one replica")]
    Replicas,
    /// An etcd endpoint is not an `http://` or `https://` URL with a host and port.
    #[error(
        "invalid --etcd-endpoints entry {0:?}: expected a client URL like \
         https://etcd-0.example:2379"
    )]
    EtcdEndpoint(String),
    /// `--etcd-endpoints` was given without any URL.
    #[error("--etcd-endpoints is empty: give at least one etcd client URL, or use --with-etcd")]
    NoEtcdEndpoints,
    /// etcd client TLS or credentials were given for the evaluation etcd, which has
    /// neither.
    #[error(
        "--etcd-ca, --etcd-cert, --etcd-key, --etcd-username and --etcd-password-file are for \
         your own etcd (--etcd-endpoints); the evaluation etcd (--with-etcd) has no TLS or auth"
    )]
    EtcdClientWithBundled,
    /// An `https://` endpoint without the CA to verify it, or TLS files with `http://`.
    #[error("etcd endpoint {endpoint}: {problem}")]
    EtcdTls {
        /// The endpoint.
        endpoint: String,
        /// What does not fit.
        problem: &'static str,
    },
    /// The etcd key prefix does not start and end with `/`.
    #[error("invalid --etcd-prefix {0:?}: must start and end with '/', e.g. /accord/")]
    EtcdPrefix(String),
    /// Two of gRPC, HTTP and the webhook on the same port, or port 0.
    #[error(
        "invalid ports: --grpc-port {grpc}, --http-port {http} and --webhook-port {webhook} \
         must all differ and be non-zero"
    )]
    Ports {
        /// The gRPC port.
        grpc: u16,
        /// The HTTP port.
        http: u16,
        /// The webhook port.
        webhook: u16,
    },
    /// A `--tls-san` entry is empty or has characters no DNS name or IP has.
    #[error("invalid --tls-san {0:?}: expected a DNS name or an IP address")]
    TlsSan(String),
    /// `--webhook-url` is not an `https://HOST[:PORT]` URL.
    #[error(
        "invalid --webhook-url {0:?}: expected https://HOST[:PORT] (no path, query or user), \
         the address the API server calls the webhook at"
    )]
    WebhookUrl(String),
    /// The image pull policy is not one Kubernetes accepts.
    #[error("invalid --image-pull-policy {0:?}: expected Always, IfNotPresent or Never")]
    PullPolicy(String),
}

impl InstallOptions {
    /// Checks the options before anything is rendered or applied.
    pub fn validate(&self) -> Result<(), OptionsError> {
        if !is_dns1123_label(&self.namespace) {
            return Err(OptionsError::Namespace(self.namespace.clone()));
        }
        check_image("--image", &self.image, &default_image())?;
        if !matches!(
            self.image_pull_policy.as_str(),
            "Always" | "IfNotPresent" | "Never"
        ) {
            return Err(OptionsError::PullPolicy(self.image_pull_policy.clone()));
        }
        if self.replicas == 0 {
            return Err(OptionsError::Replicas);
        }
        match &self.etcd {
            EtcdMode::External { endpoints } => {
                if endpoints.is_empty() {
                    return Err(OptionsError::NoEtcdEndpoints);
                }
                if let Some(bad) = endpoints.iter().find(|e| !is_etcd_url(e)) {
                    return Err(OptionsError::EtcdEndpoint(bad.clone()));
                }
                let client = self.etcd_client.clone().unwrap_or_default();
                for endpoint in endpoints {
                    // (An https:// endpoint without --etcd-ca renders, so that manifests
                    // can be prepared before the CA is at hand; `install` warns, and the
                    // hub refuses to start without it.)
                    if endpoint.starts_with("http://") && (client.ca || client.client_certificate) {
                        return Err(OptionsError::EtcdTls {
                            endpoint: endpoint.clone(),
                            problem: "TLS files were given; use https://",
                        });
                    }
                }
            }
            EtcdMode::Bundled { image, .. } => {
                check_image("--etcd-image", image, DEFAULT_ETCD_IMAGE)?;
                if self.etcd_client.is_some() {
                    return Err(OptionsError::EtcdClientWithBundled);
                }
            }
        }
        if !(self.etcd_prefix.starts_with('/') && self.etcd_prefix.ends_with('/')) {
            return Err(OptionsError::EtcdPrefix(self.etcd_prefix.clone()));
        }
        let ports = [self.grpc_port, self.http_port, self.webhook_port];
        if ports.contains(&0)
            || ports[0] == ports[1]
            || ports[0] == ports[2]
            || ports[1] == ports[2]
        {
            return Err(OptionsError::Ports {
                grpc: self.grpc_port,
                http: self.http_port,
                webhook: self.webhook_port,
            });
        }
        if let Some(bad) = self.tls_sans.iter().find(|s| !is_san(s)) {
            return Err(OptionsError::TlsSan(bad.clone()));
        }
        if let Some(url) = &self.webhook_url
            && webhook_url_host(url).is_none()
        {
            return Err(OptionsError::WebhookUrl(url.clone()));
        }
        Ok(())
    }

    /// The etcd client URLs the hub is given: the operator's, or the evaluation etcd's
    /// Service in the hub namespace.
    pub fn etcd_endpoints(&self) -> Vec<String> {
        match &self.etcd {
            EtcdMode::External { endpoints } => endpoints.clone(),
            EtcdMode::Bundled { .. } => vec![format!(
                "http://{ETCD_NAME}.{}.svc:{ETCD_CLIENT_PORT}",
                self.namespace
            )],
        }
    }
}

fn check_image(flag: &'static str, value: &str, example: &str) -> Result<(), OptionsError> {
    if value.is_empty() || value.chars().any(char::is_whitespace) {
        return Err(OptionsError::Image {
            flag,
            value: value.to_owned(),
            example: example.to_owned(),
        });
    }
    Ok(())
}

/// A Kubernetes DNS-1123 label: what namespace names must be.
pub fn is_dns1123_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first() != Some(&b'-')
        && bytes.last() != Some(&b'-')
}

fn is_etcd_url(s: &str) -> bool {
    let Some(rest) = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
    else {
        return false;
    };
    let host_port = rest.trim_end_matches('/');
    match host_port.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|p| p > 0)
        }
        None => false,
    }
}

/// The host of a `--webhook-url`, `https://HOST[:PORT]` with an optional trailing `/`
/// (brackets of an IPv6 literal removed); `None` for anything else. The API server calls
/// the URL with each webhook's path appended, so the URL has none of its own.
pub fn webhook_url_host(url: &str) -> Option<&str> {
    let authority = url.strip_prefix("https://")?;
    let authority = authority.strip_suffix('/').unwrap_or(authority);
    if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
        return None;
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, rest) = v6.split_once(']')?;
        (host, rest.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if port.is_some_and(|p| !p.parse::<u16>().is_ok_and(|p| p > 0)) {
        return None;
    }
    (is_san(host) && !host.contains('*')).then_some(host)
}

fn is_san(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':' | '*'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(InstallOptions::default().validate(), Ok(()));
    }

    #[test]
    fn bad_options_are_refused_with_the_flag_named() {
        let cases: Vec<(InstallOptions, &str)> = vec![
            (
                InstallOptions {
                    namespace: "Accord_System".into(),
                    ..Default::default()
                },
                "--namespace",
            ),
            (
                InstallOptions {
                    replicas: 0,
                    ..Default::default()
                },
                "--replicas",
            ),
            (
                InstallOptions {
                    image: "".into(),
                    ..Default::default()
                },
                "--image",
            ),
            (
                InstallOptions {
                    etcd: EtcdMode::External {
                        endpoints: vec!["etcd:2379".into()],
                    },
                    ..Default::default()
                },
                "--etcd-endpoints",
            ),
            (
                InstallOptions {
                    etcd: EtcdMode::External { endpoints: vec![] },
                    ..Default::default()
                },
                "--etcd-endpoints",
            ),
            (
                InstallOptions {
                    etcd_prefix: "accord".into(),
                    ..Default::default()
                },
                "--etcd-prefix",
            ),
            (
                InstallOptions {
                    http_port: DEFAULT_GRPC_PORT,
                    ..Default::default()
                },
                "--grpc-port",
            ),
            (
                InstallOptions {
                    webhook_port: DEFAULT_HTTP_PORT,
                    ..Default::default()
                },
                "--webhook-port",
            ),
            (
                InstallOptions {
                    webhook_port: 0,
                    ..Default::default()
                },
                "--webhook-port",
            ),
            (
                InstallOptions {
                    tls_sans: vec!["hub example".into()],
                    ..Default::default()
                },
                "--tls-san",
            ),
            (
                InstallOptions {
                    image_pull_policy: "Sometimes".into(),
                    ..Default::default()
                },
                "--image-pull-policy",
            ),
            (
                InstallOptions {
                    webhook_url: Some("http://127.0.0.1:9443".into()),
                    ..Default::default()
                },
                "--webhook-url",
            ),
        ];
        for (options, flag) in cases {
            let err = options.validate().expect_err(flag).to_string();
            assert!(err.contains(flag), "{err:?} does not name {flag}");
        }
    }

    #[test]
    fn etcd_urls_need_a_scheme_a_host_and_a_port() {
        assert!(is_etcd_url("http://127.0.0.1:2379"));
        assert!(is_etcd_url("https://etcd-0.etcd.svc:2379/"));
        assert!(!is_etcd_url("127.0.0.1:2379"));
        assert!(!is_etcd_url("http://etcd"));
        assert!(!is_etcd_url("http://:2379"));
        assert!(!is_etcd_url("grpc://etcd:2379"));
    }

    #[test]
    fn a_webhook_url_is_an_https_host_and_port_without_a_path() {
        for (url, host) in [
            ("https://127.0.0.1:9443", "127.0.0.1"),
            ("https://127.0.0.1:9443/", "127.0.0.1"),
            ("https://hub.example.com", "hub.example.com"),
            ("https://[::1]:9443", "::1"),
        ] {
            assert_eq!(webhook_url_host(url), Some(host), "{url}");
        }
        for url in [
            "http://127.0.0.1:9443",
            "127.0.0.1:9443",
            "https://",
            "https://127.0.0.1:9443/validate",
            "https://127.0.0.1:0",
            "https://127.0.0.1:port",
            "https://user@127.0.0.1:9443",
            "https://127.0.0.1:9443?x=1",
            "https://*.example.com",
        ] {
            assert_eq!(webhook_url_host(url), None, "{url}");
        }
    }

    #[test]
    fn bundled_etcd_is_reached_through_its_service_in_the_hub_namespace() {
        let options = InstallOptions {
            namespace: "fed".into(),
            ..Default::default()
        };
        assert_eq!(
            options.etcd_endpoints(),
            vec!["http://accord-etcd.fed.svc:2379".to_owned()]
        );
    }
}
