//! The testbed's etcds: one plain etcd behind every API server (each under its own key
//! prefix), and the hub's own etcd with TLS, client certificates and authentication
//! ([`HubEtcd`]), where the hub keeps its state (under [`HUB_PREFIX`] or a test's prefix).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result};

use crate::binaries::Binaries;
use crate::pki::CertificateAuthority;
use crate::ports::free_port;
use crate::process::{ProcessId, Supervisor};
use crate::wait::{self, Check};

/// Key prefix reserved for the hub's own data.
pub const HUB_PREFIX: &str = "/accord-hub/";

/// How long etcd may take to answer `/health`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running etcd.
#[derive(Debug, Clone)]
pub struct Etcd {
    /// Client URL, `http://127.0.0.1:<port>`.
    pub endpoint: String,
    /// The supervised process.
    pub process: ProcessId,
}

/// Key prefix of a cluster's API server data.
pub fn cluster_prefix(cluster: &str) -> String {
    format!("/clusters/{cluster}")
}

/// The command of a single-member etcd `name` on loopback ports `client_port` and
/// `peer_port` with its data in `data_dir` (fsync disabled: test data only).
pub fn command(
    binaries: &Binaries,
    name: &str,
    data_dir: &Path,
    client_port: u16,
    peer_port: u16,
) -> Command {
    let peer = peer_url(peer_port);
    command_at(
        binaries,
        name,
        data_dir,
        &format!("http://127.0.0.1:{client_port}"),
        &peer,
        &format!("{name}={peer}"),
    )
}

fn peer_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// Like [`command`], with the client URL `endpoint` (`https://…` for TLS), the peer URL
/// `peer` and the whole cluster's `name=peer` list `initial_cluster`.
fn command_at(
    binaries: &Binaries,
    name: &str,
    data_dir: &Path,
    endpoint: &str,
    peer: &str,
    initial_cluster: &str,
) -> Command {
    let mut command = Command::new(&binaries.etcd);
    command
        .arg(format!("--name={name}"))
        .arg(format!("--data-dir={}", data_dir.display()))
        .arg(format!("--listen-client-urls={endpoint}"))
        .arg(format!("--advertise-client-urls={endpoint}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--initial-cluster={initial_cluster}"))
        .arg("--unsafe-no-fsync")
        .arg("--log-level=warn");
    command
}

/// Starts etcd with its data in `data_dir` on free ports.
pub fn spawn(supervisor: &Supervisor, binaries: &Binaries, data_dir: &Path) -> Result<Etcd> {
    let client_port = free_port()?;
    let command = command(binaries, "testbed", data_dir, client_port, free_port()?);
    let process = supervisor.spawn("etcd", command)?;
    Ok(Etcd {
        endpoint: format!("http://127.0.0.1:{client_port}"),
        process,
    })
}

/// Waits until etcd reports itself healthy.
pub async fn wait_ready(
    supervisor: &Supervisor,
    etcd: &Etcd,
    http: &reqwest::Client,
) -> Result<()> {
    let url = format!("{}/health", etcd.endpoint);
    wait::until("etcd /health", READY_TIMEOUT, || async {
        supervisor.ensure_running(etcd.process)?;
        Ok(match http.get(&url).send().await {
            Ok(response) if response.status().is_success() => {
                let body = response.text().await.unwrap_or_default();
                if body.contains("\"health\":\"true\"") {
                    Check::Ready(())
                } else {
                    Check::NotYet(body)
                }
            }
            Ok(response) => Check::NotYet(format!("HTTP {}", response.status())),
            Err(e) => Check::NotYet(e.to_string()),
        })
    })
    .await
}

/// User the hub logs in as on its etcd ([`HubEtcd`]).
pub const HUB_USER: &str = "accord";
/// Role of [`HUB_USER`]: read-write on every key under `/`, where every hub prefix lives.
pub const HUB_ROLE: &str = "accord-hub";
/// Key prefix the hub's role may read and write: every test's `--etcd-prefix` starts
/// with it.
pub const HUB_ROLE_PREFIX: &str = "/";

/// The hub's own etcd, separate from the API servers' one and run as production runs it:
/// client TLS with a server certificate for `127.0.0.1` and `localhost` from a testbed CA,
/// `--client-cert-auth`, and authentication enabled (user `root` and user [`HUB_USER`]
/// with read-write on [`HUB_ROLE_PREFIX`]).
///
/// It runs one member, or several ([`crate::TestbedBuilder::etcd_members`]) forming one
/// cluster, as production runs it for a hub whose store must survive losing a member.
#[derive(Clone)]
pub struct HubEtcd {
    /// Its members (one unless the testbed asked for several).
    pub members: Vec<HubEtcdMember>,
    /// CA certificate (PEM file) that signed etcd's serving certificate and the client
    /// certificates it accepts.
    pub ca: PathBuf,
    /// The hub's client certificate (PEM file).
    pub cert: PathBuf,
    /// The hub's client key (PEM file).
    pub key: PathBuf,
    /// The hub's etcd user.
    pub username: String,
    /// File holding the hub user's password.
    pub password_file: PathBuf,
    /// The hub user's password.
    pub password: String,
    root_password: String,
}

/// One member of the hub's etcd.
#[derive(Debug, Clone)]
pub struct HubEtcdMember {
    /// Member name (`hub`, or `hub-1` … `hub-N` when there are several).
    pub name: String,
    /// Client URL, `https://127.0.0.1:<port>`.
    pub endpoint: String,
    /// The supervised process.
    pub process: ProcessId,
}

impl std::fmt::Debug for HubEtcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubEtcd")
            .field("members", &self.members)
            .field("ca", &self.ca)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("username", &self.username)
            .field("password_file", &self.password_file)
            .finish_non_exhaustive()
    }
}

impl HubEtcd {
    /// Client URL of the first member (the only one unless the testbed runs several).
    pub fn endpoint(&self) -> &str {
        &self.members[0].endpoint
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.endpoint.clone()).collect()
    }

    /// The value of `--etcd-endpoints`: every member's client URL, comma-separated.
    pub fn endpoints_arg(&self) -> String {
        self.endpoints().join(",")
    }

    /// Index in [`HubEtcd::members`] of the member that leads the etcd cluster now, asked
    /// of each member in turn (a stopped member is skipped).
    pub async fn leader(&self) -> Result<usize> {
        let mut errors = Vec::new();
        for member in &self.members {
            let asked = async {
                let client = self
                    .client_of(&member.endpoint, "root", &self.root_password)
                    .await?;
                let leader = client.maintenance_client().status().await?.leader();
                let list = client.cluster_client().member_list().await?;
                let name = list
                    .members()
                    .iter()
                    .find(|m| m.id() == leader)
                    .map(|m| m.name().to_owned())
                    .with_context(|| format!("leader {leader:x} is not a member"))?;
                self.members
                    .iter()
                    .position(|m| m.name == name)
                    .with_context(|| format!("leader {name} is not one of the testbed's"))
            };
            match asked.await {
                Ok(i) => return Ok(i),
                Err(e) => errors.push(format!("{}: {e:#}", member.name)),
            }
        }
        anyhow::bail!("no member of the hub's etcd answers: {}", errors.join("; "))
    }

    /// The `accord-hub` flags that reach this etcd (TLS files and credentials), without
    /// `--etcd-endpoints`.
    pub fn tls_and_auth_args(&self) -> Vec<String> {
        vec![
            "--etcd-ca".into(),
            self.ca.display().to_string(),
            "--etcd-cert".into(),
            self.cert.display().to_string(),
            "--etcd-key".into(),
            self.key.display().to_string(),
            "--etcd-username".into(),
            self.username.clone(),
            "--etcd-password-file".into(),
            self.password_file.display().to_string(),
        ]
    }

    /// Every flag the hub needs for this etcd, `--etcd-endpoints` included.
    pub fn hub_args(&self) -> Vec<String> {
        let mut args = vec!["--etcd-endpoints".into(), self.endpoints_arg()];
        args.extend(self.tls_and_auth_args());
        args
    }

    /// etcd-client TLS options trusting the testbed CA and presenting the hub's client
    /// certificate.
    pub fn tls_options(&self) -> Result<etcd_client::TlsOptions> {
        let ca = std::fs::read(&self.ca)?;
        let cert = std::fs::read(&self.cert)?;
        let key = std::fs::read(&self.key)?;
        Ok(etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(ca))
            .identity(etcd_client::Identity::from_pem(cert, key)))
    }

    /// The hub's own store over this etcd under `prefix`, with the hub's TLS files and user.
    pub async fn store(&self, prefix: &str) -> Result<accord_hub::store::Store> {
        let files = accord_hub::store::EtcdFiles {
            ca: Some(self.ca.clone()),
            cert: Some(self.cert.clone()),
            key: Some(self.key.clone()),
            username: Some(self.username.clone()),
            password_file: Some(self.password_file.clone()),
        };
        let connection = accord_hub::store::EtcdConnection::from_files(self.endpoints(), &files)?;
        Ok(accord_hub::store::Store::connect_with(
            &connection,
            accord_hub::store::Keyspace::new(prefix),
        )
        .await?)
    }

    /// A client logged in as the hub's user.
    pub async fn client(&self) -> Result<etcd_client::Client> {
        self.client_as(&self.username, &self.password).await
    }

    /// A client logged in as `root` (may change users and roles).
    pub async fn root_client(&self) -> Result<etcd_client::Client> {
        self.client_as("root", &self.root_password).await
    }

    async fn client_as(&self, user: &str, password: &str) -> Result<etcd_client::Client> {
        self.client_of(&self.endpoints_arg(), user, password).await
    }

    /// A client of the members in `endpoints` (comma-separated) logged in as `user`.
    async fn client_of(
        &self,
        endpoints: &str,
        user: &str,
        password: &str,
    ) -> Result<etcd_client::Client> {
        let options = etcd_client::ConnectOptions::new()
            .with_tls(self.tls_options()?)
            .with_user(user, password)
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(5));
        let list: Vec<&str> = endpoints.split(',').collect();
        etcd_client::Client::connect(list, Some(options))
            .await
            .with_context(|| format!("connecting to the hub's etcd at {endpoints} as {user}"))
    }
}

/// Starts the hub's etcd (see [`HubEtcd`]) with `members` members, its data and
/// certificates in `dir`, its certificates signed by `ca`. Returns once they are running;
/// [`setup_hub_auth`] then creates the users and enables authentication.
pub fn spawn_hub(
    supervisor: &Supervisor,
    binaries: &Binaries,
    dir: &Path,
    ca: &CertificateAuthority,
    members: usize,
) -> Result<HubEtcd> {
    anyhow::ensure!(members >= 1, "the hub's etcd needs at least one member");
    std::fs::create_dir_all(dir)?;
    let write = |name: &str, text: &str| -> Result<PathBuf> {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    };
    let ca_path = write("ca.crt", &ca.cert_pem())?;
    let server = ca.issue_server("accord-hub-etcd", &["127.0.0.1", "localhost"])?;
    let server_cert = write("server.crt", &server.cert_pem)?;
    let server_key = write("server.key", &server.key_pem)?;
    // The client certificate's common name names no etcd user: the hub is authenticated
    // by its password, and the certificate only passes --client-cert-auth.
    let client = ca.issue_client("accord-hub-client", &[])?;
    let cert = write("client.crt", &client.cert_pem)?;
    let key = write("client.key", &client.key_pem)?;
    let password = random_password();
    let password_file = write("password", &format!("{password}\n"))?;

    // One member keeps the names a single etcd always had (`hub`, `data/`, `etcd-hub`).
    let named = |base: &str, i: usize| {
        if members == 1 {
            base.to_owned()
        } else {
            format!("{base}-{}", i + 1)
        }
    };
    let planned: Vec<(String, String, String)> = (0..members)
        .map(|i| {
            Ok((
                named("hub", i),
                format!("https://127.0.0.1:{}", free_port()?),
                peer_url(free_port()?),
            ))
        })
        .collect::<Result<_>>()?;
    let initial_cluster = planned
        .iter()
        .map(|(name, _, peer)| format!("{name}={peer}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut started = Vec::new();
    for (i, (name, endpoint, peer)) in planned.into_iter().enumerate() {
        let mut command = command_at(
            binaries,
            &name,
            &dir.join(named("data", i)),
            &endpoint,
            &peer,
            &initial_cluster,
        );
        command
            .arg(format!("--cert-file={}", server_cert.display()))
            .arg(format!("--key-file={}", server_key.display()))
            .arg(format!("--trusted-ca-file={}", ca_path.display()))
            .arg("--client-cert-auth");
        if members > 1 {
            command.arg("--initial-cluster-token=accord-testbed-hub-etcd");
        }
        let process = supervisor.spawn(&named("etcd-hub", i), command)?;
        started.push(HubEtcdMember {
            name,
            endpoint,
            process,
        });
    }
    Ok(HubEtcd {
        members: started,
        ca: ca_path,
        cert,
        key,
        username: HUB_USER.into(),
        password_file,
        password,
        root_password: random_password(),
    })
}

/// Waits until the hub's etcd answers over TLS, then creates `root` and the hub's user and
/// role and enables authentication.
pub async fn setup_hub_auth(supervisor: &Supervisor, etcd: &HubEtcd) -> Result<()> {
    let options = etcd_client::ConnectOptions::new()
        .with_tls(etcd.tls_options()?)
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5));
    let client = wait::until("hub etcd answers over TLS", READY_TIMEOUT, || {
        let options = options.clone();
        async move {
            for member in &etcd.members {
                supervisor.ensure_running(member.process)?;
            }
            let client = match etcd_client::Client::connect(etcd.endpoints(), Some(options)).await {
                Ok(client) => client,
                Err(e) => return Ok(Check::NotYet(e.to_string())),
            };
            // A linearizable read: answered only once the members have elected a leader.
            Ok(match client.kv_client().get("/", None).await {
                Ok(_) => Check::Ready(client),
                Err(e) => Check::NotYet(e.to_string()),
            })
        }
    })
    .await?;
    let mut auth = client.auth_client();
    auth.user_add("root", etcd.root_password.as_str(), None)
        .await?;
    auth.user_grant_role("root", "root").await?;
    auth.role_add(HUB_ROLE).await?;
    auth.role_grant_permission(
        HUB_ROLE,
        etcd_client::Permission::read_write(HUB_ROLE_PREFIX).with_prefix(),
    )
    .await?;
    auth.user_add(HUB_USER, etcd.password.as_str(), None)
        .await?;
    auth.user_grant_role(HUB_USER, HUB_ROLE).await?;
    auth.auth_enable().await?;
    Ok(())
}

/// 32 random alphanumeric characters.
fn random_password() -> String {
    use rand::Rng as _;
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(32)
        .map(char::from)
        .collect()
}
