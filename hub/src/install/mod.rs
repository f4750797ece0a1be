//! `accord-hub install`: puts the hub on a management cluster.
//!
//! A pipeline with I/O only at the ends:
//! `options (validate) → render (pure) → [--dry-run: print] → connect → preflight
//! (SelfSubjectAccessReviews) → server-side apply → hub CA → [--wait] → join line`.
//!
//! [`render`] is the single source of truth for what is installed: the CLI applies it,
//! `--dry-run` prints it, `deploy/manifests/accord-hub.yaml` is its output with default
//! options, and the Helm chart `deploy/helm/accord-hub` is tested against it.

mod join;
mod options;
mod render;
mod wait;

use accord_crds::duration::parse_flag;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

pub use accord_common::apply::{self, ApplyError, resource_name};
pub use accord_common::manifest::NON_ROOT_ID;
pub use accord_common::preflight::{self, Permission, PreflightError, granted_permissions};
pub use join::TokenError;
pub use options::{
    DEFAULT_ETCD_IMAGE, DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT, DEFAULT_IMAGE_REPOSITORY,
    DEFAULT_NAMESPACE, DEFAULT_WEBHOOK_PORT, ETCD_NAME, ETCD_SECRET_CA, ETCD_SECRET_CERT,
    ETCD_SECRET_KEY, ETCD_SECRET_MOUNT, ETCD_SECRET_NAME, ETCD_SECRET_PASSWORD,
    ETCD_SECRET_USERNAME, EtcdClientSecret, EtcdMode, HUB_METRICS_SERVICE, HUB_NAME,
    InstallOptions, OptionsError, Resources, ServiceType, default_image,
};
pub use render::{
    HELM_KEEP_ANNOTATION, RenderError, accord_plurals, crds, dry_run_output, helm_crd_templates,
    helm_generated_template, hub_cluster_rules, hub_namespace_rules, render, render_yaml,
    webhook_configuration,
};
pub use wait::{Progress, WaitError, deployment_progress};

use crate::pki::{DEFAULT_CA_SECRET_NAME as CA_SECRET_NAME, install_crypto_provider};
use crate::pki::{HubCa, PkiError};

/// The API resource of a rendered kind and whether it is namespaced.
pub use apply::api_resource;

/// Server-side applies one rendered object with the hub's field manager.
async fn apply_object(
    client: &kube::Client,
    object: &serde_json::Value,
) -> Result<String, ApplyError> {
    apply::apply(client, accord_crds::HUB_FIELD_MANAGER, object).await
}

/// What `install` needs: create and patch every rendered object (with `wait`, list and
/// watch what it waits on), and read and create the CA Secret in `namespace`.
pub fn required_permissions(
    objects: &[serde_json::Value],
    namespace: &str,
    wait: bool,
) -> Vec<Permission> {
    let mut needed = preflight::required_permissions(objects, wait);
    needed.push(
        Permission::new("", "secrets", "get")
            .in_namespace(Some(namespace))
            .named(Some(CA_SECRET_NAME)),
    );
    needed.push(Permission::new("", "secrets", "create").in_namespace(Some(namespace)));
    needed.sort();
    needed.dedup();
    needed
}

/// Flags of `accord-hub install`.
#[derive(Debug, Clone, Args)]
#[command(group(
    clap::ArgGroup::new("etcd")
        .required(true)
        .args(["etcd_endpoints", "with_etcd"]),
))]
pub struct InstallArgs {
    /// Kubeconfig of the management cluster (default: $KUBECONFIG, which may list several
    /// files, else ~/.kube/config, else in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: its current context).
    #[arg(long)]
    pub context: Option<String>,
    /// Namespace of the hub (created if missing).
    #[arg(long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Client URLs of the etcd that keeps the hub's state, comma-separated (production).
    #[arg(long, value_delimiter = ',', conflicts_with = "with_etcd")]
    pub etcd_endpoints: Vec<String>,
    /// Run a single-replica, unauthenticated etcd next to the hub. For evaluation only:
    /// production points --etcd-endpoints at a real, backed-up etcd cluster.
    #[arg(long)]
    pub with_etcd: bool,
    /// Key prefix of the hub's state in etcd.
    #[arg(long, default_value = crate::store::keys::DEFAULT_PREFIX)]
    pub etcd_prefix: String,
    /// CA certificate (PEM) of your etcd's serving certificate (needed for https://). Goes
    /// into Secret accord-hub-etcd, mounted read-only at /etc/accord/etcd.
    #[arg(long, env = "ACCORD_ETCD_CA", conflicts_with = "with_etcd")]
    pub etcd_ca: Option<PathBuf>,
    /// Client certificate (PEM) the hub presents to etcd; into Secret accord-hub-etcd.
    #[arg(
        long,
        env = "ACCORD_ETCD_CERT",
        requires = "etcd_key",
        conflicts_with = "with_etcd"
    )]
    pub etcd_cert: Option<PathBuf>,
    /// Private key (PEM) of --etcd-cert; into Secret accord-hub-etcd.
    #[arg(
        long,
        env = "ACCORD_ETCD_KEY",
        requires = "etcd_cert",
        conflicts_with = "with_etcd"
    )]
    pub etcd_key: Option<PathBuf>,
    /// etcd user of the hub; into Secret accord-hub-etcd.
    #[arg(
        long,
        env = "ACCORD_ETCD_USERNAME",
        requires = "etcd_password_file",
        conflicts_with = "with_etcd"
    )]
    pub etcd_username: Option<String>,
    /// File holding the password of --etcd-username; into Secret accord-hub-etcd.
    #[arg(
        long,
        env = "ACCORD_ETCD_PASSWORD_FILE",
        requires = "etcd_username",
        conflicts_with = "with_etcd"
    )]
    pub etcd_password_file: Option<PathBuf>,
    /// Image of the evaluation etcd (--with-etcd).
    #[arg(long, default_value = DEFAULT_ETCD_IMAGE)]
    pub etcd_image: String,
    /// Size of the evaluation etcd's PersistentVolumeClaim (--with-etcd).
    #[arg(long, default_value = "1Gi")]
    pub etcd_storage_size: String,
    /// Hub container image (default: accord-io/accord-hub:<this version>).
    #[arg(long)]
    pub image: Option<String>,
    /// imagePullPolicy of the containers.
    #[arg(long, default_value = "IfNotPresent")]
    pub image_pull_policy: String,
    /// Hub replicas: one leader, every replica serves agents.
    #[arg(long, default_value_t = 1)]
    pub replicas: u32,
    /// Port of the agent-facing gRPC server.
    #[arg(long, default_value_t = DEFAULT_GRPC_PORT)]
    pub grpc_port: u16,
    /// Port of /metrics, /healthz and /readyz.
    #[arg(long, default_value_t = DEFAULT_HTTP_PORT)]
    pub http_port: u16,
    /// Port of the FederatedKafkaTopic admission webhook (HTTPS; the API server calls it
    /// through the Service accord-hub).
    #[arg(long, default_value_t = DEFAULT_WEBHOOK_PORT)]
    pub webhook_port: u16,
    /// Type of the hub's gRPC Service.
    #[arg(long, value_enum, default_value_t = ServiceType::ClusterIP)]
    pub service_type: ServiceType,
    /// URL member clusters dial, e.g. https://hub.example.com:7443: printed in the join
    /// line, and its host is added to the hub's serving certificate.
    #[arg(long)]
    pub hub_url: Option<String>,
    /// Extra DNS names or IPs for the hub's serving certificate, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub tls_san: Vec<String>,
    /// Register the admission webhook at this URL, https://HOST[:PORT], instead of the
    /// Service accord-hub: for a hub the API server reaches directly, e.g. one run outside
    /// the cluster with `accord-hub serve --webhook-addr`. The webhook's path is appended and
    /// the host joins the hub's serving certificate.
    #[arg(long)]
    pub webhook_url: Option<String>,
    /// Print the objects as YAML and change nothing (no cluster access needed).
    #[arg(long)]
    pub dry_run: bool,
    /// Wait until the CRDs are Established and the hub Deployment is available.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value = "5m", value_parser = parse_flag)]
    pub timeout: Duration,
    /// Validity of the bootstrap token in the printed join line.
    #[arg(long, default_value = "24h", value_parser = parse_flag)]
    pub token_ttl: Duration,
}

impl InstallArgs {
    /// The connection to the operator's etcd the flags describe, files read (for the
    /// token install creates from here).
    pub fn etcd_connection(&self) -> Result<crate::store::EtcdConnection, InstallError> {
        let files = crate::store::EtcdFiles {
            ca: self.etcd_ca.clone(),
            cert: self.etcd_cert.clone(),
            key: self.etcd_key.clone(),
            username: self.etcd_username.clone(),
            password_file: self.etcd_password_file.clone(),
        };
        if self.with_etcd {
            return Ok(crate::store::EtcdConnection::default());
        }
        let connection =
            crate::store::EtcdConnection::from_files(self.etcd_endpoints.clone(), &files);
        match connection {
            // Without the CA the hub will not start; the objects are still applied (the
            // CA may be added to the Secret later) and the token is left to the hub.
            Err(crate::store::ConnectionError::Inconsistent(problem))
                if self.etcd_ca.is_none() && problem.contains("--etcd-ca") =>
            {
                eprintln!("warning: {problem}");
                Ok(crate::store::EtcdConnection::default())
            }
            other => Ok(other?),
        }
    }
}

/// Secret `accord-hub-etcd` with the files the etcd flags name (keys `ca.crt`, `tls.crt`,
/// `tls.key`, `username`, `password`), or `None` without such flags. Applied, never
/// printed: `--dry-run` shows only the Deployment that mounts it.
fn etcd_secret(
    args: &InstallArgs,
    options: &InstallOptions,
) -> Result<Option<serde_json::Value>, InstallError> {
    let Some(client) = &options.etcd_client else {
        return Ok(None);
    };
    // PEM files and passwords are text: stringData spares an encoding step.
    let read = |what: &'static str, path: &PathBuf| {
        std::fs::read_to_string(path).map_err(|source| crate::store::ConnectionError::Read {
            what,
            path: path.clone(),
            source,
        })
    };
    let mut data = serde_json::Map::new();
    if let Some(path) = &args.etcd_ca {
        data.insert(ETCD_SECRET_CA.into(), read("CA certificate", path)?.into());
    }
    if let (Some(cert), Some(key)) = (&args.etcd_cert, &args.etcd_key) {
        data.insert(
            ETCD_SECRET_CERT.into(),
            read("client certificate", cert)?.into(),
        );
        data.insert(ETCD_SECRET_KEY.into(), read("client key", key)?.into());
    }
    if let (Some(user), Some(password)) = (&args.etcd_username, &args.etcd_password_file) {
        data.insert(ETCD_SECRET_USERNAME.into(), user.clone().into());
        data.insert(
            ETCD_SECRET_PASSWORD.into(),
            read("password file", password)?.into(),
        );
    }
    Ok(Some(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": client.secret_name,
            "namespace": options.namespace,
            "labels": accord_common::manifest::labels(HUB_NAME, "hub"),
        },
        "stringData": data,
    })))
}

/// Everything that can stop an installation.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The flags describe no working installation.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// `--hub-url` is not an https URL with a host.
    #[error(
        "invalid --hub-url {0:?}: expected https://HOST:PORT, the address member clusters dial"
    )]
    HubUrl(String),
    /// Rendering failed (a bug).
    #[error(transparent)]
    Render(#[from] RenderError),
    /// The management cluster could not be reached, or refused an object.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// The etcd TLS files or password file could not be read.
    #[error(transparent)]
    EtcdFiles(#[from] crate::store::ConnectionError),
    /// The user lacks permissions.
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    /// The hub CA could not be loaded or created.
    #[error("setting up the hub CA in Secret {namespace}/{CA_SECRET_NAME}")]
    Ca {
        /// The hub namespace.
        namespace: String,
        /// What the PKI said.
        #[source]
        source: PkiError,
    },
    /// `--wait` gave up.
    #[error(transparent)]
    Wait(#[from] WaitError),
    /// Writing the output failed.
    #[error("writing to stdout")]
    Output(#[source] std::io::Error),
}

/// The host of an `https://HOST[:PORT][/...]` URL (brackets of an IPv6 literal removed).
fn hub_url_host(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split('/').next().unwrap_or_default();
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    (!host.is_empty()).then_some(host)
}

impl InstallArgs {
    /// The [`InstallOptions`] these flags describe, validated. The `--hub-url` host joins
    /// the serving certificate's names.
    pub fn options(&self) -> Result<InstallOptions, InstallError> {
        let mut tls_sans = self.tls_san.clone();
        if let Some(url) = &self.hub_url {
            let host = hub_url_host(url).ok_or_else(|| InstallError::HubUrl(url.clone()))?;
            if !tls_sans.iter().any(|s| s == host) {
                tls_sans.push(host.to_owned());
            }
        }
        if let Some(url) = &self.webhook_url {
            let host = options::webhook_url_host(url)
                .ok_or_else(|| OptionsError::WebhookUrl(url.clone()))?;
            if !tls_sans.iter().any(|s| s == host) {
                tls_sans.push(host.to_owned());
            }
        }
        let etcd = if self.with_etcd {
            EtcdMode::Bundled {
                image: self.etcd_image.clone(),
                storage_size: self.etcd_storage_size.clone(),
            }
        } else {
            EtcdMode::External {
                endpoints: self.etcd_endpoints.clone(),
            }
        };
        let etcd_client =
            (self.etcd_ca.is_some() || self.etcd_cert.is_some() || self.etcd_username.is_some())
                .then(|| EtcdClientSecret {
                    ca: self.etcd_ca.is_some(),
                    client_certificate: self.etcd_cert.is_some(),
                    auth: self.etcd_username.is_some(),
                    ..EtcdClientSecret::default()
                });
        let options = InstallOptions {
            namespace: self.namespace.clone(),
            etcd_client,
            image: self.image.clone().unwrap_or_else(default_image),
            image_pull_policy: self.image_pull_policy.clone(),
            replicas: self.replicas,
            etcd,
            etcd_prefix: self.etcd_prefix.clone(),
            grpc_port: self.grpc_port,
            http_port: self.http_port,
            webhook_port: self.webhook_port,
            service_type: self.service_type,
            tls_sans,
            webhook_url: self.webhook_url.clone(),
            ..InstallOptions::default()
        };
        options.validate()?;
        Ok(options)
    }
}

/// Runs `accord-hub install`: progress on stderr, the YAML (`--dry-run`) or the join
/// instructions on stdout.
pub async fn run(args: InstallArgs) -> Result<(), InstallError> {
    use std::io::Write as _;
    let options = args.options()?;
    let objects = render(&options)?;
    if args.dry_run {
        let yaml = dry_run_output(&options)?;
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(yaml.as_bytes())
            .map_err(InstallError::Output)?;
        return stdout.flush().map_err(InstallError::Output);
    }

    let etcd_connection = args.etcd_connection()?;
    install_crypto_provider();
    let (client, url) = apply::connect(args.kubeconfig.as_ref(), args.context.as_deref()).await?;
    apply::check_reachable(&client, &url).await?;
    eprintln!(
        "installing accord-hub into namespace {} on {url}",
        options.namespace
    );
    let to_apply = required_permissions(&objects, &options.namespace, args.wait);
    let to_grant = granted_permissions(&objects);
    let asker = preflight::Asker {
        command: "accord-hub install",
        url: &url,
        advice: "Run install as a cluster administrator (it creates CRDs, a ClusterRole and a \
                 ClusterRoleBinding), or have one grant these.",
    };
    preflight::check(&client, &asker, &options.namespace, &to_apply, &to_grant).await?;

    // The webhook configuration goes last, with the hub CA as its caBundle, once the CA
    // exists. The CRDs carry it from the start when it exists already (a repeated install),
    // so that they are not changed twice, the second time back.
    let webhook = webhook_configuration(&options, None);
    let existing_ca = HubCa::load(client.clone(), &options.namespace, CA_SECRET_NAME)
        .await
        .map_err(|source| InstallError::Ca {
            namespace: options.namespace.clone(),
            source,
        })?;
    let with_ca = crds(&options, existing_ca.as_ref().map(HubCa::cert_pem))?;
    let first_pass = objects.iter().filter(|o| **o != webhook).map(|o| {
        with_ca
            .iter()
            .find(|crd| o["kind"] == "CustomResourceDefinition" && crd["metadata"] == o["metadata"])
            .unwrap_or(o)
    });
    for object in first_pass {
        // The etcd Secret exists before the hub's pods, which mount it.
        if object["kind"] == "Deployment"
            && let Some(secret) = etcd_secret(&args, &options)?
        {
            let applied = apply_object(&client, &secret).await?;
            eprintln!("applied {applied}");
        }
        let applied = apply_object(&client, object).await?;
        eprintln!("applied {applied}");
    }

    let ca = HubCa::load_or_create(client.clone(), &options.namespace, CA_SECRET_NAME)
        .await
        .map_err(|source| InstallError::Ca {
            namespace: options.namespace.clone(),
            source,
        })?;
    eprintln!(
        "hub CA ready in Secret {}/{CA_SECRET_NAME}",
        options.namespace
    );
    let applied = apply_object(
        &client,
        &webhook_configuration(&options, Some(ca.cert_pem())),
    )
    .await?;
    eprintln!("applied {applied} (caBundle: the hub CA)");
    for crd in crds(&options, Some(ca.cert_pem()))? {
        let applied = apply_object(&client, &crd).await?;
        eprintln!("applied {applied} (conversion caBundle: the hub CA)");
    }

    if args.wait {
        let crds: Vec<String> = objects
            .iter()
            .filter(|o| o["kind"] == "CustomResourceDefinition")
            .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        let etcd = matches!(options.etcd, EtcdMode::Bundled { .. }).then_some(ETCD_NAME);
        wait::installation(
            &client,
            &options.namespace,
            &crds,
            etcd,
            HUB_NAME,
            args.timeout,
        )
        .await?;
    }

    let token = join::create_token(&options, &etcd_connection, args.token_ttl).await;
    if let Err(e) = &token {
        tracing::debug!(error = %crate::store::error_chain(e), "no token created from here");
    }
    let message = join::closing_message(
        &options,
        args.hub_url.as_deref(),
        &ca.ca_cert_hash(),
        token.as_deref(),
        args.token_ttl,
    );
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(message.as_bytes())
        .map_err(InstallError::Output)?;
    stdout.flush().map_err(InstallError::Output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: InstallArgs,
    }

    fn parse(args: &[&str]) -> Result<InstallArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("install").chain(args.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn the_default_manifest_is_what_with_etcd_and_no_other_flag_describes() {
        let args = parse(&["--with-etcd"]).unwrap();
        assert_eq!(args.options().unwrap(), InstallOptions::default());
    }

    #[test]
    fn etcd_must_be_chosen_and_only_one_way() {
        let none = parse(&[]).unwrap_err().to_string();
        assert!(
            none.contains("--etcd-endpoints") && none.contains("--with-etcd"),
            "{none}"
        );
        let both = parse(&["--with-etcd", "--etcd-endpoints", "http://e:2379"]).unwrap_err();
        assert_eq!(both.kind(), clap::error::ErrorKind::ArgumentConflict);
    }

    #[test]
    fn etcd_tls_flags_name_what_the_etcd_secret_holds_and_only_for_your_own_etcd() {
        let args = parse(&[
            "--etcd-endpoints",
            "https://e1:2379",
            "--etcd-ca",
            "ca.crt",
            "--etcd-username",
            "accord",
            "--etcd-password-file",
            "pw",
        ])
        .unwrap();
        assert_eq!(
            args.options().unwrap().etcd_client,
            Some(EtcdClientSecret {
                ca: true,
                client_certificate: false,
                auth: true,
                ..EtcdClientSecret::default()
            })
        );
        let bundled = parse(&["--with-etcd", "--etcd-ca", "ca.crt"]).unwrap_err();
        assert_eq!(bundled.kind(), clap::error::ErrorKind::ArgumentConflict);
        let half = parse(&["--etcd-endpoints", "https://e:2379", "--etcd-cert", "c"]).unwrap_err();
        assert_eq!(half.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        let plain = parse(&["--etcd-endpoints", "http://e:2379", "--etcd-ca", "ca.crt"]).unwrap();
        let e = plain.options().unwrap_err().to_string();
        assert!(e.contains("http://e:2379") && e.contains("https://"), "{e}");
    }

    #[test]
    fn flags_become_options() {
        let args = parse(&[
            "--etcd-endpoints",
            "https://e1:2379,https://e2:2379",
            "--namespace",
            "fed",
            "--replicas",
            "3",
            "--grpc-port",
            "8443",
            "--webhook-port",
            "9444",
            "--service-type",
            "LoadBalancer",
            "--hub-url",
            "https://hub.example.com:9443",
            "--tls-san",
            "10.0.0.7",
            "--image",
            "registry.local/accord-hub:dev",
        ])
        .unwrap();
        let options = args.options().unwrap();
        assert_eq!(
            options.etcd,
            EtcdMode::External {
                endpoints: vec!["https://e1:2379".into(), "https://e2:2379".into()]
            }
        );
        assert_eq!(options.namespace, "fed");
        assert_eq!(options.replicas, 3);
        assert_eq!(options.grpc_port, 8443);
        assert_eq!(options.webhook_port, 9444);
        assert_eq!(options.service_type, ServiceType::LoadBalancer);
        assert_eq!(
            options.tls_sans,
            vec!["10.0.0.7".to_owned(), "hub.example.com".to_owned()]
        );
        assert_eq!(options.image, "registry.local/accord-hub:dev");
    }

    #[test]
    fn a_webhook_url_is_rendered_and_its_host_joins_the_serving_certificate() {
        let args = parse(&["--with-etcd", "--webhook-url", "https://10.0.0.9:19443"]).unwrap();
        let options = args.options().unwrap();
        assert_eq!(
            options.webhook_url.as_deref(),
            Some("https://10.0.0.9:19443")
        );
        assert_eq!(options.tls_sans, vec!["10.0.0.9".to_owned()]);
        let config = webhook_configuration(&options, None);
        assert_eq!(
            config["webhooks"][0]["clientConfig"]["url"],
            "https://10.0.0.9:19443/validate-federatedkafkatopics"
        );
        assert!(
            config["webhooks"][0]["clientConfig"]
                .get("service")
                .is_none()
        );
        for bad in ["http://10.0.0.9:19443", "https://10.0.0.9:19443/validate"] {
            let args = parse(&["--with-etcd", "--webhook-url", bad]).unwrap();
            let e = args.options().unwrap_err().to_string();
            assert!(e.contains("--webhook-url") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn a_hub_url_must_be_https_with_a_host() {
        for bad in ["http://hub:7443", "hub:7443", "https://:7443"] {
            let args = parse(&["--with-etcd", "--hub-url", bad]).unwrap();
            assert!(
                matches!(args.options(), Err(InstallError::HubUrl(_))),
                "{bad}"
            );
        }
        assert_eq!(
            hub_url_host("https://[2001:db8::1]:7443"),
            Some("2001:db8::1")
        );
        assert_eq!(
            hub_url_host("https://hub.example.com"),
            Some("hub.example.com")
        );
    }

    #[test]
    fn invalid_values_are_reported_with_their_flag() {
        let args = parse(&["--with-etcd", "--namespace", "Not_A_Label"]).unwrap();
        let err = args.options().unwrap_err().to_string();
        assert!(err.contains("--namespace"), "{err}");
        assert!(parse(&["--with-etcd", "--service-type", "Ingress"]).is_err());
        assert!(parse(&["--with-etcd", "--timeout", "soon"]).is_err());
    }
}

/// What install renders, checked against the shared apply and preflight code.
#[cfg(test)]
mod rendered_tests {
    use super::*;
    use accord_common::apply::identity;

    fn permission(group: &str, resource: &str, verb: &str, ns: Option<&str>) -> Permission {
        Permission::new(group, resource, verb).in_namespace(ns)
    }

    #[test]
    fn every_rendered_kind_has_an_api_resource_with_the_right_scope() {
        let options = InstallOptions {
            replicas: 2,
            ..Default::default()
        };
        for object in render(&options).unwrap() {
            let (kind, name, namespace) = identity(&object);
            let (resource, namespaced) =
                api_resource(kind).unwrap_or_else(|| panic!("{kind} unknown"));
            assert_eq!(resource.kind, kind);
            assert_eq!(
                resource.api_version,
                object["apiVersion"].as_str().unwrap(),
                "{kind}"
            );
            assert_eq!(namespaced, namespace.is_some(), "{kind} {name}");
        }
    }

    #[test]
    fn install_needs_create_and_patch_of_every_object_and_the_ca_secret() {
        let objects = render(&InstallOptions::default()).unwrap();
        let needed = required_permissions(&objects, "accord-system", false);
        for p in [
            permission(
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "patch",
                None,
            ),
            permission(
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "create",
                None,
            ),
            permission("rbac.authorization.k8s.io", "clusterroles", "patch", None),
            permission(
                "rbac.authorization.k8s.io",
                "clusterrolebindings",
                "create",
                None,
            ),
            permission("apps", "deployments", "patch", Some("accord-system")),
            permission("apps", "statefulsets", "patch", Some("accord-system")),
            permission("", "namespaces", "patch", None),
            permission(
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
                "create",
                None,
            ),
            permission(
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
                "patch",
                None,
            ),
            permission("", "secrets", "get", Some("accord-system")).named(Some("accord-hub-ca")),
            permission("", "secrets", "create", Some("accord-system")),
        ] {
            assert!(needed.contains(&p), "{p} not required");
        }
        assert!(!needed.iter().any(|p| p.verb == "watch"));
        let with_wait = required_permissions(&objects, "accord-system", true);
        assert!(with_wait.contains(&permission(
            "apps",
            "deployments",
            "watch",
            Some("accord-system")
        )));
    }

    #[test]
    fn the_hubs_grants_are_expanded_rule_by_rule() {
        let objects = render(&InstallOptions::default()).unwrap();
        let granted = granted_permissions(&objects);
        assert!(granted.contains(&permission(
            "accord.io",
            "managedclusters/status",
            "patch",
            None
        )));
        assert!(granted.contains(&permission("accord.io", "managedclusters", "create", None)));
        assert!(granted.contains(&permission("events.k8s.io", "events", "create", None)));
        assert!(granted.contains(
            &permission("", "secrets", "get", Some("accord-system")).named(Some("accord-hub-ca"))
        ));
        assert!(
            granted.contains(
                &permission("", "configmaps", "patch", Some("accord-system"))
                    .named(Some("prometheus-federation-global"))
            )
        );
        assert!(granted.contains(&permission(
            "",
            "configmaps",
            "create",
            Some("accord-system")
        )));
        assert!(granted.contains(&permission("", "namespaces", "watch", None)));
        assert!(
            granted.contains(
                &permission(
                    "admissionregistration.k8s.io",
                    "validatingwebhookconfigurations",
                    "patch",
                    None
                )
                .named(Some("accord-hub"))
            )
        );
        assert!(granted.contains(&permission("", "secrets", "watch", None)));
        // Every kind × 4 verbs, 1 create, a status patch per kind, 2 event verbs, 2
        // Namespace verbs, 2 Secret reads and 1 create cluster-wide, 4 verbs on the webhook
        // configuration, 4 verbs on each Accord CRD, 2 Secret rules in its namespace, 5
        // verbs on the global tier's ConfigMap, 1 ConfigMap create and 4 verbs on
        // ControllerRevisions (the rollouts' history); for the console, 2 verbs on core
        // Events and the 2 reviews' creates.
        assert!(granted.contains(&permission(
            "authentication.k8s.io",
            "tokenreviews",
            "create",
            None
        )));
        assert!(granted.contains(&permission(
            "authorization.k8s.io",
            "subjectaccessreviews",
            "create",
            None
        )));
        let kinds = accord_crds::all_crds().len();
        assert_eq!(
            granted.len(),
            kinds * 4 + 1 + kinds + 2 + 2 + 3 + 4 + kinds * 4 + 2 + 5 + 1 + 4 + 2 + 2
        );
    }
}
