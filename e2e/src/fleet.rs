//! The end-to-end harness's fleet on a testbed: one real `accord-hub serve` and one real
//! `accord-agent run` per member, each agent joined through the real token flow. Used by
//! the end-to-end tests, the propagation benchmark and the sandbox.

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use crate::agent_sim::{self, AgentIdentity};
use crate::hub::{HubOptions, HubProcess, accord_binary, create_token};
use crate::ports::free_port;
use crate::{Cluster, ProcessId, Testbed};

/// Namespace the agents run in (and keep their state ConfigMap in) on each member.
pub const AGENT_NAMESPACE: &str = "accord-system";

/// One agent: a cluster name on the hub, bound to one member cluster of the testbed.
pub struct Agent {
    /// Cluster name on the hub.
    pub name: String,
    /// Index of the testbed member it runs against.
    pub member: usize,
    /// Identity directory.
    pub identity_dir: PathBuf,
    /// HTTP address of its `/metrics`.
    pub http: String,
    /// Its process while running.
    pub process: Option<ProcessId>,
}

/// A hub and its agents; dropping it stops them (so the next test's hub does not find
/// this one's still reconciling the same management cluster).
pub struct Fleet<'t> {
    testbed: &'t Testbed,
    /// The hub.
    pub hub: HubProcess<'t>,
    /// Hub options, to restart it.
    pub hub_options: HubOptions,
    /// Agents by cluster name.
    pub agents: BTreeMap<String, Agent>,
    /// Extra flags every agent is started with, e.g. `--kafka-resync 5s`.
    pub agent_args: Vec<String>,
}

/// The `/metrics` text of the agent serving HTTP on `http` (`127.0.0.1:PORT`).
pub async fn agent_metrics(testbed: &Testbed, http: &str) -> Result<String> {
    Ok(testbed
        .http()
        .get(format!("http://{http}/metrics"))
        .send()
        .await?
        .text()
        .await?)
}

/// Merges `patch` into ManagedCluster `cluster` on the management cluster, as an
/// administrator would (e.g. `{"spec": {"taints": [...], "unschedulable": true}}`).
pub async fn patch_managed_cluster(
    testbed: &Testbed,
    cluster: &str,
    patch: serde_json::Value,
) -> Result<()> {
    let api: Api<accord_crds::ManagedCluster> = Api::all(testbed.mgmt().client());
    api.patch(
        cluster,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(patch),
    )
    .await?;
    Ok(())
}

/// `spec.replicas` of Deployment `namespace/name` in `cluster` (`None` while it does not
/// exist).
pub async fn deployment_replicas(
    cluster: &crate::testbed::Cluster,
    namespace: &str,
    name: &str,
) -> Result<Option<i32>> {
    let api: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(cluster.client(), namespace);
    Ok(api
        .get_opt(name)
        .await?
        .and_then(|d| d.spec.and_then(|s| s.replicas)))
}

/// Waits until ManagedCluster `cluster`'s `spec.taints` has the hub's own taint `key`
/// (`present`) or has it no more, within `within`.
pub async fn wait_hub_taint(
    testbed: &Testbed,
    cluster: &str,
    key: &str,
    present: bool,
    within: std::time::Duration,
) -> Result<()> {
    let api: Api<accord_crds::ManagedCluster> = Api::all(testbed.mgmt().client());
    let what = if present { "set" } else { "cleared" };
    crate::wait::until(
        &format!("{cluster}'s taint {key} {what}"),
        within,
        || async {
            let taints: Vec<String> = api
                .get(cluster)
                .await?
                .spec
                .taints
                .iter()
                .map(|t| format!("{}:{:?}", t.key, t.effect))
                .collect();
            let has = taints.iter().any(|t| *t == format!("{key}:NoExecute"));
            Ok(if has == present {
                crate::wait::Check::Ready(())
            } else {
                crate::wait::Check::NotYet(format!("{taints:?}"))
            })
        },
    )
    .await
}

/// Creates `name` on `cluster` if it does not exist.
pub async fn ensure_namespace(cluster: &Cluster, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(cluster.client());
    if api.get_opt(name).await?.is_none() {
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A Deployment `name` of `replicas` pause containers, labelled and selected by
/// `app=<name>`: what kwok's fake nodes "run" in end-to-end tests, benchmarks and the
/// sandbox.
pub fn pause_deployment(name: &str, replicas: i32) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "pause:3.10"}]}
            }
        }
    })
}

/// Writes an identity directory in the layout `accord-agent run --identity-dir` reads.
pub fn write_identity(dir: &std::path::Path, hub: &str, id: &AgentIdentity) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("hub-url"), format!("https://{hub}"))?;
    std::fs::write(dir.join("cluster-name"), &id.cluster)?;
    std::fs::write(dir.join("ca.crt"), &id.ca_pem)?;
    std::fs::write(dir.join("tls.crt"), &id.cert_pem)?;
    std::fs::write(dir.join("tls.key"), &id.key_pem)?;
    std::fs::write(dir.join("tls-server-name"), agent_sim::HUB_TLS_NAME)?;
    Ok(())
}

impl Drop for Fleet<'_> {
    fn drop(&mut self) {
        for agent in self.agents.values_mut() {
            if let Some(id) = agent.process.take() {
                self.testbed.stop_process(id);
            }
        }
    }
}

impl<'t> Fleet<'t> {
    /// Starts a hub (`etcd_prefix` keeps it apart from other tests) and one agent per
    /// `(cluster name, member index)`, each joined with its own token.
    pub async fn start(
        testbed: &'t Testbed,
        replica: &str,
        etcd_prefix: &str,
        hub_args: &[&str],
        agents: &[(&str, usize)],
    ) -> Result<Self> {
        Self::start_with_agent_args(testbed, replica, etcd_prefix, hub_args, &[], agents).await
    }

    /// [`Fleet::start`] with extra flags for every `accord-agent run` (kept for
    /// restarts).
    pub async fn start_with_agent_args(
        testbed: &'t Testbed,
        replica: &str,
        etcd_prefix: &str,
        hub_args: &[&str],
        agent_args: &[&str],
        agents: &[(&str, usize)],
    ) -> Result<Self> {
        let hub_options = HubOptions {
            replica: replica.into(),
            etcd_prefix: etcd_prefix.into(),
            extra_args: hub_args.iter().map(|s| s.to_string()).collect(),
        };
        let hub = HubProcess::start(testbed, &hub_options).await?;
        let mut fed = Self {
            testbed,
            hub,
            hub_options,
            agents: BTreeMap::new(),
            agent_args: agent_args.iter().map(|s| s.to_string()).collect(),
        };
        for (name, member) in agents {
            let hub = fed.hub.grpc.clone();
            fed.join_agent(name, *member, &hub).await?;
        }
        // Each agent takes its Lease before it connects: wait until every one holds its
        // stream, so a policy applied next sees every cluster available.
        for agent in fed.agents.values() {
            wait_connected(testbed, agent).await?;
        }
        Ok(fed)
    }

    /// Joins one more agent, for cluster `name` on testbed member `member`, that reaches
    /// the hub at `via` (`host:port`: the hub, or a proxy in front of it) and starts it;
    /// returns once it holds its stream.
    pub async fn add_agent(&mut self, name: &str, member: usize, via: &str) -> Result<()> {
        self.join_agent(name, member, via).await?;
        wait_connected(self.testbed, &self.agents[name]).await
    }

    async fn join_agent(&mut self, name: &str, member: usize, via: &str) -> Result<()> {
        let testbed = self.testbed;
        let (token, hash) = create_token(testbed, &self.hub_options.etcd_prefix, "10m").await?;
        let id = agent_sim::register(via, &token, &hash, name, true)
            .await
            .map_err(|s| anyhow::anyhow!("registering {name}: {s}"))?;
        let dir = testbed
            .dir()
            .join(format!("identity-{}-{name}", self.hub_options.replica));
        write_identity(&dir, via, &id)?;
        ensure_namespace(&testbed.members()[member], AGENT_NAMESPACE).await?;
        let agent = Agent {
            name: name.to_owned(),
            member,
            identity_dir: dir,
            http: format!("127.0.0.1:{}", free_port()?),
            process: None,
        };
        self.agents.insert(name.to_owned(), agent);
        self.start_agent(name)
    }

    /// Starts (or restarts) the agent of cluster `name`.
    pub fn start_agent(&mut self, name: &str) -> Result<()> {
        let testbed = self.testbed;
        let lease_args = self.lease_args(name);
        let agent = self
            .agents
            .get_mut(name)
            .with_context(|| format!("no agent {name}"))?;
        let member = &testbed.members()[agent.member];
        let mut cmd = Command::new(accord_binary("accord-agent")?);
        cmd.arg("run")
            .arg("--kubeconfig")
            .arg(member.kubeconfig_path())
            .arg("--identity-dir")
            .arg(&agent.identity_dir)
            .args(["--namespace", AGENT_NAMESPACE, "--http-addr", &agent.http])
            .args(lease_args)
            .args(&self.agent_args)
            .env("RUST_LOG", "info,accord_agent=debug");
        agent.process =
            Some(testbed.spawn(&format!("agent/{}-{name}", self.hub_options.replica), cmd)?);
        Ok(())
    }

    /// The agent Lease flags of cluster `name`'s agents, unless the test's agent flags set
    /// them: a Lease of the cluster's own (agents of other tests' clusters share a member
    /// namespace and must not stand by for each other) and a short duration (an agent killed
    /// by one test must not hold the Lease for 15 s against the next test's agent).
    fn lease_args(&self, name: &str) -> Vec<String> {
        let set = |flag: &str| self.agent_args.iter().any(|a| a.starts_with(flag));
        let mut args = Vec::new();
        if !set("--lease-name") {
            args.extend(["--lease-name".to_owned(), format!("accord-agent-{name}")]);
        }
        if !set("--lease-duration") {
            args.extend(["--lease-duration".to_owned(), "2s".to_owned()]);
        }
        args
    }

    /// Starts one more `accord-agent run` for the cluster `name`, as a second replica of
    /// its Deployment would run: same member, identity directory, namespace and flags, its
    /// own HTTP address. It is not among [`Fleet::agents`]: the caller stops it.
    pub fn start_agent_replica(&self, name: &str, replica: &str) -> Result<Agent> {
        let agent = self
            .agents
            .get(name)
            .with_context(|| format!("no agent {name}"))?;
        let member = &self.testbed.members()[agent.member];
        let http = format!("127.0.0.1:{}", free_port()?);
        let mut cmd = Command::new(accord_binary("accord-agent")?);
        cmd.arg("run")
            .arg("--kubeconfig")
            .arg(member.kubeconfig_path())
            .arg("--identity-dir")
            .arg(&agent.identity_dir)
            .args(["--namespace", AGENT_NAMESPACE, "--http-addr", &http])
            .args(self.lease_args(name))
            .args(&self.agent_args)
            .env("RUST_LOG", "info,accord_agent=debug");
        let process = self.testbed.spawn(
            &format!("agent/{}-{name}-{replica}", self.hub_options.replica),
            cmd,
        )?;
        Ok(Agent {
            name: name.to_owned(),
            member: agent.member,
            identity_dir: agent.identity_dir.clone(),
            http,
            process: Some(process),
        })
    }

    /// Kills the agent of cluster `name` with SIGKILL.
    pub fn kill_agent(&mut self, name: &str) -> Result<()> {
        let testbed = self.testbed;
        let agent = self
            .agents
            .get_mut(name)
            .with_context(|| format!("no agent {name}"))?;
        if let Some(id) = agent.process.take() {
            kill9(testbed, id)?;
        }
        Ok(())
    }

    /// Kills the hub with SIGKILL.
    pub fn kill_hub(&mut self) -> Result<()> {
        kill9(self.testbed, self.hub.id)
    }

    /// Starts the hub again with the same options (new ports; agents reconnect through
    /// their identity's hub URL, so the gRPC port is kept).
    pub async fn restart_hub(&mut self) -> Result<()> {
        let grpc = self.hub.grpc.clone();
        self.hub = HubProcess::start_at(self.testbed, &self.hub_options, &grpc).await?;
        Ok(())
    }
}

/// Waits until `agent` reports on its `/metrics` that it holds its stream to the hub.
async fn wait_connected(testbed: &Testbed, agent: &Agent) -> Result<()> {
    crate::wait::until(
        &format!("agent {} connected", agent.name),
        std::time::Duration::from_secs(60),
        || {
            let http = agent.http.clone();
            async move {
                let text = match agent_metrics(testbed, &http).await {
                    Ok(text) => text,
                    Err(e) => return Ok(crate::wait::Check::NotYet(e.to_string())),
                };
                Ok(
                    match crate::hub::parse_metric(&text, "accord_agent_connected") {
                        Some(1.0) => crate::wait::Check::Ready(()),
                        other => crate::wait::Check::NotYet(format!("connected {other:?}")),
                    },
                )
            }
        },
    )
    .await
}

/// SIGKILLs a supervised process and reaps it.
pub fn kill9(testbed: &Testbed, id: ProcessId) -> Result<()> {
    let pid = testbed.process_info(id).pid;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::SIGKILL,
    )?;
    testbed.stop_process(id);
    Ok(())
}

/// The exit status of a supervised process, once it has exited.
pub fn exit_status(testbed: &Testbed, id: ProcessId) -> Result<Option<std::process::ExitStatus>> {
    testbed.supervisor().exit_status(id)
}
