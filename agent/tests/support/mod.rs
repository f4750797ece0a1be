//! Helpers shared by the agent's integration tests: a scripted hub that drives the engine
//! directly, and member-cluster fixtures.

#![allow(dead_code)]

use std::time::Duration;

use accord_agent::engine::EngineHandle;
use accord_proto::v1::{
    AgentMessage, Assignment, Assignments, HubMessage, ObjectRef, Removal, ScaleAssignment,
    StatusAck, StatusReport, agent_message, assignment, hub_message, status_ack,
};
use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::await_condition;
use tokio::sync::mpsc;

/// Field manager of objects the tests create, standing in for a user's `kubectl apply`.
pub const USER_MANAGER: &str = "kubectl-user";
/// How long any single wait in these tests may take.
pub const WAIT: Duration = Duration::from_secs(60);

/// A policy reference.
pub fn policy(name: &str) -> ObjectRef {
    ObjectRef {
        kind: "CrossClusterScalePolicy".into(),
        namespace: "default".into(),
        name: name.into(),
    }
}

/// A scale assignment of `policy` to Deployment `namespace/name`.
pub fn scale_item(
    policy_name: &str,
    revision: i64,
    namespace: &str,
    name: &str,
    replicas: i32,
    request_id: &str,
) -> Assignment {
    Assignment {
        placed: Some(policy(policy_name)),
        revision,
        spec: Some(assignment::Spec::Scale(ScaleAssignment {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: namespace.into(),
            name: name.into(),
            replicas,
            scale_request_id: request_id.into(),
        })),
        traceparent: String::new(),
    }
}

/// A hub played by the test: it receives what the engine sends and answers as told.
pub struct ScriptedHub {
    /// The engine under test.
    pub engine: EngineHandle,
    rx: mpsc::UnboundedReceiver<AgentMessage>,
    /// Id of the current stream.
    pub stream: u64,
    /// Next version to accept reports with.
    pub next_version: i64,
    /// Whether reports are accepted automatically.
    pub auto_accept: bool,
    /// Every report received.
    pub reports: Vec<StatusReport>,
    /// Every acknowledged revision.
    pub acks: Vec<i64>,
}

impl ScriptedHub {
    /// Opens a stream to `engine`.
    pub async fn connect(engine: &EngineHandle) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let stream = engine.connected(tx).await;
        Self {
            engine: engine.clone(),
            rx,
            stream,
            next_version: 100,
            auto_accept: true,
            reports: Vec::new(),
            acks: Vec::new(),
        }
    }

    /// Ends the stream and opens a new one.
    pub async fn reconnect(&mut self) {
        self.engine.disconnected(self.stream).await;
        let (tx, rx) = mpsc::unbounded_channel();
        self.stream = self.engine.connected(tx).await;
        self.rx = rx;
    }

    /// Sends an Assignments message.
    pub async fn assign(
        &self,
        revision: i64,
        full: bool,
        items: Vec<Assignment>,
        removed: Vec<ObjectRef>,
    ) {
        self.engine
            .hub_message(HubMessage {
                body: Some(hub_message::Body::Assignments(Assignments {
                    revision,
                    full,
                    items,
                    removed: removed
                        .into_iter()
                        .map(|policy| Removal {
                            placed: Some(policy),
                            revision,
                        })
                        .collect(),
                    ..Default::default()
                })),
            })
            .await;
    }

    /// Answers a report about `policy`.
    pub async fn answer(&self, policy: &ObjectRef, result: status_ack::Result) {
        self.engine
            .hub_message(HubMessage {
                body: Some(hub_message::Body::StatusAck(StatusAck {
                    placed: Some(policy.clone()),
                    result: Some(result),
                    ..Default::default()
                })),
            })
            .await;
    }

    /// The next message from the engine (recording reports and acks, accepting reports
    /// when `auto_accept`).
    pub async fn next(&mut self, timeout: Duration) -> Result<AgentMessage> {
        let message = tokio::time::timeout(timeout, self.rx.recv())
            .await
            .context("no message from the engine in time")?
            .context("the engine closed the stream")?;
        match &message.body {
            Some(agent_message::Body::StatusReport(report)) => {
                self.reports.push(report.clone());
                if self.auto_accept {
                    let version = self.next_version;
                    self.next_version += 1;
                    let policy = report.placed.clone().context("report without a policy")?;
                    self.answer(&policy, status_ack::Result::Accepted(version))
                        .await;
                }
            }
            Some(agent_message::Body::Ack(ack)) => self.acks.push(ack.revision),
            _ => {}
        }
        Ok(message)
    }

    /// Waits for a report about `policy_name` satisfying `matches`.
    pub async fn report_until(
        &mut self,
        policy_name: &str,
        what: &str,
        matches: impl Fn(&StatusReport) -> bool,
    ) -> Result<StatusReport> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let message = self.next(left).await.with_context(|| {
                format!(
                    "waiting for a report on {policy_name} with {what}; reports so far: {:#?}",
                    self.reports
                        .iter()
                        .map(|r| (r.state(), r.message.clone(), r.observed.clone()))
                        .collect::<Vec<_>>()
                )
            })?;
            if let Some(agent_message::Body::StatusReport(report)) = message.body
                && report
                    .placed
                    .as_ref()
                    .is_some_and(|p| p.name == policy_name)
                && matches(&report)
            {
                return Ok(report);
            }
        }
    }

    /// Waits until every policy in `policy_names` has had a report satisfying `matches`,
    /// in whatever order they come (a report about one policy that arrives while another
    /// is awaited counts); returns them in the order of `policy_names`.
    pub async fn reports_until_each(
        &mut self,
        policy_names: &[String],
        what: &str,
        matches: impl Fn(&StatusReport) -> bool,
    ) -> Result<Vec<StatusReport>> {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut found: std::collections::HashMap<String, StatusReport> = Default::default();
        while found.len() < policy_names.len() {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let message = self.next(left).await.with_context(|| {
                let missing: Vec<_> = policy_names
                    .iter()
                    .filter(|n| !found.contains_key(*n))
                    .collect();
                format!("waiting for reports with {what}; none yet on {missing:?}")
            })?;
            if let Some(agent_message::Body::StatusReport(report)) = message.body
                && let Some(name) = report.placed.as_ref().map(|p| p.name.clone())
                && policy_names.contains(&name)
                && !found.contains_key(&name)
                && matches(&report)
            {
                found.insert(name, report);
            }
        }
        Ok(policy_names
            .iter()
            .filter_map(|n| found.remove(n))
            .collect())
    }

    /// Waits for an Ack of `revision` (or a later one).
    pub async fn ack_until(&mut self, revision: i64) -> Result<()> {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !self.acks.iter().any(|r| *r >= revision) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            self.next(left)
                .await
                .with_context(|| format!("waiting for Ack {revision}; acks {:?}", self.acks))?;
        }
        Ok(())
    }
}

/// Replicas the report observed.
pub fn desired(report: &StatusReport) -> Option<i32> {
    match &report.observed {
        Some(accord_proto::v1::status_report::Observed::Scale(r)) => Some(r.desired_replicas),
        _ => None,
    }
}

/// Scale request id the report observed on the Deployment.
pub fn reported_request_id(report: &StatusReport) -> Option<&str> {
    match &report.observed {
        Some(accord_proto::v1::status_report::Observed::Scale(r)) => {
            Some(r.scale_request_id.as_str())
        }
        _ => None,
    }
}

/// Ready replicas the report observed.
pub fn ready(report: &StatusReport) -> Option<i32> {
    match &report.observed {
        Some(accord_proto::v1::status_report::Observed::Scale(r)) => Some(r.ready_replicas),
        _ => None,
    }
}

/// Creates namespace `name` (idempotent).
pub async fn namespace(client: &kube::Client, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let body =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    api.patch(
        name,
        &PatchParams::apply(USER_MANAGER),
        &Patch::Apply(&body),
    )
    .await
    .with_context(|| format!("applying namespace {name}"))?;
    Ok(())
}

/// Applies Deployment `namespace/name` with `replicas`, as a user's `kubectl apply` would
/// (server-side, field manager [`USER_MANAGER`]).
pub async fn user_deployment(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    replicas: i32,
) -> Result<()> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let body = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "pause:3.10"}]},
            },
        },
    });
    api.patch(
        name,
        &PatchParams::apply(USER_MANAGER),
        &Patch::Apply(&body),
    )
    .await
    .with_context(|| format!("applying Deployment {namespace}/{name}"))?;
    Ok(())
}

/// Sets `spec.replicas` by hand, like `kubectl scale`.
pub async fn scale_by_hand(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    replicas: i32,
) -> Result<()> {
    scale_by_hand_as(client, "by-hand", namespace, name, replicas).await
}

/// Sets `spec.replicas` of Deployment `namespace/name` as field manager `manager` (the
/// agent's fight guard holds a second repair against the same manager within a minute).
pub async fn scale_by_hand_as(
    client: &kube::Client,
    manager: &str,
    namespace: &str,
    name: &str,
    replicas: i32,
) -> Result<()> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    api.patch(
        name,
        &PatchParams {
            field_manager: Some(manager.to_owned()),
            ..PatchParams::default()
        },
        &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
    )
    .await
    .with_context(|| format!("scaling Deployment {namespace}/{name}"))?;
    Ok(())
}

/// Sets annotation `key` of Deployment `namespace/name`: a change the agent sees but that
/// leaves its replicas alone.
pub async fn annotate(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    key: &str,
    value: &str,
) -> Result<()> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {key: value}}})),
    )
    .await
    .with_context(|| format!("annotating Deployment {namespace}/{name}"))?;
    Ok(())
}

/// Waits until Deployment `namespace/name` satisfies `cond`.
pub async fn deployment_until(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    what: &str,
    cond: impl Fn(&Deployment) -> bool,
) -> Result<Deployment> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let waited = tokio::time::timeout(
        WAIT,
        await_condition(api.clone(), name, move |d: Option<&Deployment>| {
            d.is_some_and(&cond)
        }),
    )
    .await;
    match waited {
        Ok(Ok(Some(d))) => Ok(d),
        Ok(Ok(None)) => bail!("Deployment {namespace}/{name} vanished"),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => {
            let seen = api.get_opt(name).await?;
            bail!(
                "Deployment {namespace}/{name} did not reach {what} in {WAIT:?}; spec {:?}, annotations {:?}",
                seen.as_ref()
                    .and_then(|d| d.spec.as_ref())
                    .map(|s| s.replicas),
                seen.as_ref().and_then(|d| d.metadata.annotations.clone())
            )
        }
    }
}

/// `spec.replicas` of a Deployment.
pub fn replicas(d: &Deployment) -> Option<i32> {
    d.spec.as_ref().and_then(|s| s.replicas)
}

/// The scale request id annotation of a Deployment.
pub fn request_id(d: &Deployment) -> Option<&str> {
    d.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(accord_crds::SCALE_REQUEST_ANNOTATION))
        .map(String::as_str)
}

/// Field managers owning `spec.replicas` of a Deployment.
pub fn replicas_owners(d: &Deployment) -> Vec<String> {
    d.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:spec"))
                .and_then(|spec| spec.get("f:replicas"))
                .is_some()
        })
        .filter_map(|m| m.manager.clone())
        .collect()
}
