//! Kubernetes control planes: kube-apiserver for every cluster, and for member clusters
//! kube-controller-manager, kube-scheduler and a fake node (simulated by [`crate::kwok`]),
//! so that Deployments get pods that are scheduled, Running and Ready.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::await_condition;

use crate::binaries::Binaries;
use crate::pki::CertificateAuthority;
use crate::ports::free_port;
use crate::process::{ProcessId, Supervisor};
use crate::wait::{self, Check};

/// Field manager for objects the testbed itself applies.
pub const FIELD_MANAGER: &str = "accord-testbed";
/// Range for Service cluster IPs in every testbed cluster.
const SERVICE_CIDR: &str = "10.0.0.0/24";

/// How long a component may take to report itself healthy (several API servers start at
/// once on few cores).
const HEALTHZ_TIMEOUT: Duration = Duration::from_secs(180);
/// How long kwok may take to mark a fake node Ready.
const NODE_READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Files of one cluster's control plane, in `<testbed dir>/<cluster>/`.
#[derive(Debug, Clone)]
pub struct ClusterFiles {
    /// The cluster's directory.
    pub dir: PathBuf,
    /// CA certificate that signed the serving and client certificates.
    pub ca_cert: PathBuf,
    /// API server serving certificate and key.
    pub serving_cert: PathBuf,
    /// Key of [`ClusterFiles::serving_cert`].
    pub serving_key: PathBuf,
    /// Service account token signing key (private).
    pub sa_private_key: PathBuf,
    /// Service account token verification key (public).
    pub sa_public_key: PathBuf,
    /// Admin kubeconfig (`O=system:masters`), `<testbed dir>/<cluster>.kubeconfig`.
    pub kubeconfig: PathBuf,
}

/// Writes the certificates, keys and admin kubeconfig of cluster `name`, whose API server
/// will listen on `port`.
pub fn write_cluster_files(
    testbed_dir: &Path,
    name: &str,
    ca: &CertificateAuthority,
    port: u16,
) -> Result<ClusterFiles> {
    let dir = testbed_dir.join(name);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let files = ClusterFiles {
        ca_cert: dir.join("ca.crt"),
        serving_cert: dir.join("apiserver.crt"),
        serving_key: dir.join("apiserver.key"),
        sa_private_key: dir.join("sa.key"),
        sa_public_key: dir.join("sa.pub"),
        kubeconfig: testbed_dir.join(format!("{name}.kubeconfig")),
        dir,
    };
    let serving = ca.issue_server("kube-apiserver", &["localhost", "127.0.0.1"])?;
    let admin = ca.issue_client(&format!("{name}-admin"), &["system:masters"])?;
    let (sa_private, sa_public) = crate::pki::service_account_key()?;
    let server = format!("https://127.0.0.1:{port}");
    for (path, contents) in [
        (&files.ca_cert, ca.cert_pem()),
        (&files.serving_cert, serving.cert_pem),
        (&files.serving_key, serving.key_pem),
        (&files.sa_private_key, sa_private),
        (&files.sa_public_key, sa_public),
        (
            &files.kubeconfig,
            crate::kubeconfig::render(name, &server, &ca.cert_pem(), &admin),
        ),
    ] {
        fs::write(path, contents).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(files)
}

/// Starts the API server of cluster `name` on `port`, storing its data in etcd under
/// [`crate::etcd::cluster_prefix`].
pub fn spawn_api_server(
    supervisor: &Supervisor,
    binaries: &Binaries,
    name: &str,
    files: &ClusterFiles,
    etcd_endpoint: &str,
    port: u16,
) -> Result<ProcessId> {
    let mut command = Command::new(&binaries.kube_apiserver);
    command
        .arg(format!("--etcd-servers={etcd_endpoint}"))
        .arg(format!(
            "--etcd-prefix={}",
            crate::etcd::cluster_prefix(name)
        ))
        .arg("--bind-address=127.0.0.1")
        .arg("--advertise-address=127.0.0.1")
        .arg(format!("--secure-port={port}"))
        .arg(format!("--cert-dir={}", files.dir.display()))
        .arg(format!("--tls-cert-file={}", files.serving_cert.display()))
        .arg(format!(
            "--tls-private-key-file={}",
            files.serving_key.display()
        ))
        .arg(format!("--client-ca-file={}", files.ca_cert.display()))
        .arg("--authorization-mode=RBAC")
        .arg(format!("--service-cluster-ip-range={SERVICE_CIDR}"))
        .arg(format!("--service-account-issuer=https://127.0.0.1:{port}"))
        .arg(format!(
            "--service-account-key-file={}",
            files.sa_public_key.display()
        ))
        .arg(format!(
            "--service-account-signing-key-file={}",
            files.sa_private_key.display()
        ))
        // No pods really run, so nothing needs service account tokens mounted or the
        // `kubernetes` Service's endpoints (which may not point at loopback).
        .arg("--disable-admission-plugins=ServiceAccount")
        .arg("--endpoint-reconciler-type=none")
        .arg("--allow-privileged=true")
        .arg("--profiling=false");
    supervisor.spawn(&format!("{name}/kube-apiserver"), command)
}

/// Starts kube-controller-manager for cluster `name`; returns it and its health port.
pub fn spawn_controller_manager(
    supervisor: &Supervisor,
    binaries: &Binaries,
    name: &str,
    files: &ClusterFiles,
) -> Result<(ProcessId, u16)> {
    let port = free_port()?;
    let cert_dir = files.dir.join("kube-controller-manager");
    let mut command = Command::new(&binaries.kube_controller_manager);
    command
        .arg(format!("--kubeconfig={}", files.kubeconfig.display()))
        .arg("--leader-elect=false")
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--secure-port={port}"))
        .arg(format!("--cert-dir={}", cert_dir.display()))
        .arg(format!(
            "--service-account-private-key-file={}",
            files.sa_private_key.display()
        ))
        .arg(format!("--root-ca-file={}", files.ca_cert.display()))
        .arg(format!("--service-cluster-ip-range={SERVICE_CIDR}"))
        // The testbed's clusters are small; answer Deployment changes without client-side
        // throttling.
        .arg("--kube-api-qps=100")
        .arg("--kube-api-burst=200");
    Ok((
        supervisor.spawn(&format!("{name}/kube-controller-manager"), command)?,
        port,
    ))
}

/// Starts kube-scheduler for cluster `name`; returns it and its health port.
pub fn spawn_scheduler(
    supervisor: &Supervisor,
    binaries: &Binaries,
    name: &str,
    files: &ClusterFiles,
) -> Result<(ProcessId, u16)> {
    let port = free_port()?;
    let cert_dir = files.dir.join("kube-scheduler");
    let mut command = Command::new(&binaries.kube_scheduler);
    command
        .arg(format!("--kubeconfig={}", files.kubeconfig.display()))
        .arg("--leader-elect=false")
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--secure-port={port}"))
        .arg(format!("--cert-dir={}", cert_dir.display()))
        .arg("--kube-api-qps=100")
        .arg("--kube-api-burst=200");
    Ok((
        supervisor.spawn(&format!("{name}/kube-scheduler"), command)?,
        port,
    ))
}

/// Waits until a component's health endpoint (`/readyz` of an API server, which anonymous
/// users may read, or `/healthz`) answers with a success status.
pub async fn wait_healthz(
    supervisor: &Supervisor,
    process: ProcessId,
    url: &str,
    http: &reqwest::Client,
) -> Result<()> {
    let name = supervisor.info(process).name;
    wait::until(&format!("{name} {url}"), HEALTHZ_TIMEOUT, || async {
        supervisor.ensure_running(process)?;
        Ok(match http.get(url).send().await {
            Ok(response) if response.status().is_success() => Check::Ready(()),
            Ok(response) => Check::NotYet(format!("HTTP {}", response.status())),
            Err(e) => Check::NotYet(e.to_string()),
        })
    })
    .await
}

/// Registers fake node `node` for kwok to simulate: untainted, so ordinary pods land on it.
pub async fn create_fake_node(client: &kube::Client, node: &str) -> Result<()> {
    create_fake_node_with(client, node, crate::kwok::node_capacity()).await
}

/// [`create_fake_node`] offering `allocatable` (`{"cpu": .., "memory": .., "pods": ..}`,
/// also its capacity).
pub async fn create_fake_node_with(
    client: &kube::Client,
    node: &str,
    allocatable: serde_json::Value,
) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let manifest = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node,
            "annotations": {
                (crate::kwok::NODE_ANNOTATION): "fake",
                "node.alpha.kubernetes.io/ttl": "0",
            },
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": node,
                "kubernetes.io/os": "linux",
                "type": "kwok",
            },
        },
        "status": {
            "allocatable": allocatable.clone(),
            "capacity": allocatable,
            "nodeInfo": {
                "architecture": "amd64",
                "kubeletVersion": "fake",
                "operatingSystem": "linux",
            },
        },
    });
    nodes
        .patch(
            node,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&manifest),
        )
        .await
        .with_context(|| format!("creating fake node {node}"))?;
    Ok(())
}

/// Cordons `node` (`spec.unschedulable`) or uncordons it.
pub async fn cordon(client: &kube::Client, node: &str, cordoned: bool) -> Result<()> {
    Api::<Node>::all(client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"unschedulable": cordoned}})),
        )
        .await
        .with_context(|| format!("cordoning node {node}: {cordoned}"))?;
    Ok(())
}

/// Waits until node `node` reports condition Ready=True.
pub async fn wait_node_ready(client: &kube::Client, node: &str) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let ready = |node: Option<&Node>| {
        node.and_then(|n| n.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
    };
    tokio::time::timeout(NODE_READY_TIMEOUT, await_condition(nodes, node, ready))
        .await
        .with_context(|| format!("node {node} not Ready after {NODE_READY_TIMEOUT:?}"))?
        .with_context(|| format!("watching node {node}"))?;
    Ok(())
}
