//! A FederatedKafkaTopic scenario on the testbed, shared by the end-to-end tests, the
//! benchmark and the sandbox: the real hub (optionally serving its admission webhook,
//! registered with the management kube-apiserver) and, per member, a Kafka cluster, the
//! agent's Kafka Secret and the real agent; plus what tells whether a topic is what it
//! should be — the FederatedKafkaTopic's status on the one side, and on the other each
//! member's Kafka read independently of Accord, with rdkafka and with Kafka's own
//! `kafka.admin.ConfigCommand`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use accord_crds::{
    FederatedKafkaTopic, FederatedKafkaTopicStatus, KafkaTopicPolicy, PlacementState,
    TopicPlacement,
};
use anyhow::{Context as _, Result, ensure};
use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Event, Namespace, Secret};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, ConfigSource, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

use crate::fleet::{AGENT_NAMESPACE, Fleet, ensure_namespace};
use crate::kafka::{self, KafkaCluster};
use crate::ports::free_port;
use crate::testbed::Testbed;
use crate::wait::{Check, until};

/// How long an independent client may see a topic differently from what the agent
/// reported (another broker's metadata catching up).
const KAFKA_METADATA_LAG: Duration = Duration::from_secs(15);

/// Field manager of the scenario's writes.
pub const FIELD_MANAGER: &str = "accord-e2e-kafka";
/// Name of the agent's Kafka Secret in each member (the agent's default).
pub const KAFKA_SECRET: &str = "accord-kafka";
/// Path the hub serves its FederatedKafkaTopic admission webhook on.
pub const WEBHOOK_PATH: &str = "/validate-federatedkafkatopics";
/// Namespace label a test's webhook registration selects (its value is the scenario name),
/// so that one test's webhook never sees another test's topics.
pub const WEBHOOK_NAMESPACE_LABEL: &str = "e2e.accord.io/webhook";
/// The reason the webhook refuses a topic that breaks a `Deny` policy with.
pub const POLICY_REASON: &str = "TOPIC_CREATION_POLICY_VIOLATION";
/// The reason the webhook refuses a topic whose name is taken in one of its clusters with.
pub const ALREADY_MANAGED_REASON: &str = "TOPIC_ALREADY_MANAGED";

/// Starts a Kafka cluster for testbed member `member` (its processes are named after the
/// member and stop with the testbed).
pub async fn start_kafka(
    testbed: &Testbed,
    member: usize,
    options: impl Into<kafka::ClusterOptions>,
) -> Result<KafkaCluster> {
    let cluster = testbed
        .members()
        .get(member)
        .with_context(|| format!("no member {member}"))?;
    let dir = testbed.dir().join(cluster.name()).join("kafka-cluster");
    kafka::start_cluster(
        testbed.supervisor(),
        testbed.binaries(),
        cluster.name(),
        &dir,
        options,
    )
    .await
    .with_context(|| format!("the Kafka cluster of {}", cluster.name()))
}

/// Stops every broker of `kafka` (their data stays).
pub fn stop_kafka(testbed: &Testbed, kafka: &KafkaCluster) {
    for broker in 0..kafka.brokers() {
        kafka.stop(testbed.supervisor(), broker);
    }
}

/// Starts every broker of `kafka` again on its data, all at once (one alone has no
/// controller quorum to register with), and waits until the cluster lists them all; the
/// cluster with its new processes.
pub async fn start_kafka_again(testbed: &Testbed, kafka: &KafkaCluster) -> Result<KafkaCluster> {
    let supervisor = testbed.supervisor();
    let started = futures::future::try_join_all((0..kafka.brokers()).map(|broker| {
        let mut one = kafka.clone();
        async move {
            one.start(supervisor, broker).await?;
            anyhow::Ok((broker, one.processes[broker]))
        }
    }))
    .await?;
    let mut restarted = kafka.clone();
    for (broker, process) in started {
        restarted.processes[broker] = process;
    }
    Ok(restarted)
}

/// One member of a scenario: a testbed member and the Kafka its agent manages.
#[derive(Clone, Copy)]
pub struct KafkaMember<'k> {
    /// Index of the testbed member.
    pub member: usize,
    /// Its Kafka cluster.
    pub kafka: &'k KafkaCluster,
    /// Whether the agent's Secret points at the SASL_SSL (SCRAM-SHA-512) listener rather
    /// than the PLAINTEXT one.
    pub sasl: bool,
}

/// How to start a [`KafkaScenario`].
pub struct KafkaScenarioOptions<'a> {
    /// Hub replica name, etcd prefix and cluster-name prefix (unique per test).
    pub name: &'a str,
    /// The members, in order; member `i` joins as cluster `<name>-<i>`.
    pub members: Vec<KafkaMember<'a>>,
    /// The agents' `--kafka-resync`.
    pub resync: Duration,
    /// The hub's `--topic-deletion-timeout`, when not its default.
    pub deletion_timeout: Option<Duration>,
    /// Serve the hub's admission webhook and register it with the management cluster for
    /// namespaces labelled [`WEBHOOK_NAMESPACE_LABEL`]`=<name>`.
    pub webhook: bool,
}

/// The hub's webhook, as registered for one scenario.
#[derive(Debug, Clone)]
pub struct Webhook {
    /// `127.0.0.1:<port>`.
    pub addr: String,
    /// Name of the ValidatingWebhookConfiguration.
    pub configuration: String,
}

/// A running scenario; dropping it stops the hub and the agents.
pub struct KafkaScenario<'t> {
    /// The testbed.
    pub testbed: &'t Testbed,
    /// Hub and agents.
    pub fleet: Fleet<'t>,
    /// Cluster names on the hub, in member order.
    pub clusters: Vec<String>,
    /// The members, in the same order.
    pub members: Vec<KafkaMember<'t>>,
    /// The webhook, when served.
    pub webhook: Option<Webhook>,
    /// The scenario's name.
    pub name: String,
}

impl<'t> KafkaScenario<'t> {
    /// Writes every member's Kafka Secret, starts the hub (with its webhook, if asked) and
    /// the agents, and registers the webhook.
    pub async fn start(testbed: &'t Testbed, options: KafkaScenarioOptions<'t>) -> Result<Self> {
        let name = options.name;
        for m in &options.members {
            let cluster = &testbed.members()[m.member];
            ensure_namespace(cluster, AGENT_NAMESPACE).await?;
            write_secret(testbed, m.member, &m.kafka.secret_data(m.sasl)).await?;
        }
        let clusters: Vec<String> = (0..options.members.len())
            .map(|i| format!("{name}-{i}"))
            .collect();
        let webhook_addr = if options.webhook {
            Some(format!("127.0.0.1:{}", free_port()?))
        } else {
            None
        };
        let mut hub_args: Vec<String> = Vec::new();
        if let Some(addr) = &webhook_addr {
            hub_args.extend(["--webhook-addr".to_owned(), addr.clone()]);
        }
        if let Some(timeout) = options.deletion_timeout {
            hub_args.extend([
                "--topic-deletion-timeout".to_owned(),
                format!("{}s", timeout.as_secs()),
            ]);
        }
        let resync = format!("{}s", options.resync.as_secs().max(1));
        let agent_args = ["--kafka-secret", KAFKA_SECRET, "--kafka-resync", &resync];
        let agents: Vec<(&str, usize)> = clusters
            .iter()
            .map(String::as_str)
            .zip(options.members.iter().map(|m| m.member))
            .collect();
        let hub_args: Vec<&str> = hub_args.iter().map(String::as_str).collect();
        let fleet = Fleet::start_with_agent_args(
            testbed,
            name,
            &format!("/e2e-{name}/"),
            &hub_args,
            &agent_args,
            &agents,
        )
        .await?;
        let webhook = match webhook_addr {
            Some(addr) => Some(register_webhook(testbed, name, &addr).await?),
            None => None,
        };
        Ok(Self {
            testbed,
            fleet,
            clusters,
            members: options.members,
            webhook,
            name: name.to_owned(),
        })
    }

    /// A namespace on the management cluster with `labels` (and, with the webhook, the
    /// label its registration selects).
    pub async fn namespace(&self, ns: &str, labels: &[(&str, &str)]) -> Result<()> {
        let mut all: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        if self.webhook.is_some() {
            all.insert(WEBHOOK_NAMESPACE_LABEL.to_owned(), self.name.clone());
        }
        label_namespace(self.testbed, ns, &all).await
    }

    /// An independent client for member `i`'s Kafka (its PLAINTEXT listener).
    pub fn probe(&self, i: usize) -> Result<KafkaProbe> {
        KafkaProbe::new(
            &self
                .members
                .get(i)
                .context("no such member")?
                .kafka
                .bootstrap,
        )
    }

    /// Independent clients for every member's Kafka, in member order.
    pub fn probes(&self) -> Result<Vec<KafkaProbe>> {
        (0..self.members.len()).map(|i| self.probe(i)).collect()
    }

    /// Fails with the log tail when the hub or a running agent has exited.
    pub fn ensure_running(&self) -> Result<()> {
        self.testbed.ensure_running(self.fleet.hub.id)?;
        for agent in self.fleet.agents.values() {
            if let Some(id) = agent.process {
                self.testbed.ensure_running(id)?;
            }
        }
        Ok(())
    }

    /// [`wait_placements`] for this scenario's topic `ns/name`, failing at once when the
    /// hub or an agent exits.
    pub async fn wait_placements(
        &self,
        ns: &str,
        name: &str,
        clusters: &[String],
        what: &str,
        timeout: Duration,
        accept: impl Fn(&TopicPlacement) -> bool,
    ) -> Result<FederatedKafkaTopicStatus> {
        wait_placements_while(
            self.testbed,
            &|| self.ensure_running(),
            ns,
            name,
            clusters,
            what,
            timeout,
            accept,
        )
        .await
    }

    /// Waits until every member's placement of `ns/name` for the current generation is
    /// `Synced` with `partitions`/`rf`, and every member's Kafka, read independently, has
    /// the topic with those numbers.
    pub async fn wait_synced(
        &self,
        ns: &str,
        name: &str,
        partitions: i32,
        rf: i32,
        timeout: Duration,
    ) -> Result<FederatedKafkaTopicStatus> {
        let status = self
            .wait_placements(
                ns,
                name,
                &self.clusters,
                &format!("Synced {partitions}/{rf}"),
                timeout,
                |p| {
                    p.state == PlacementState::Synced
                        && p.partitions == Some(partitions)
                        && p.replication_factor == Some(rf)
                },
            )
            .await?;
        let topic = topic_name(self.testbed, ns, name).await?;
        let probes = self.probes()?;
        let expected = Some(TopicView { partitions, rf });
        // The agent saw it so; the independent client asks whichever broker it reaches,
        // whose metadata may lag a moment or answer a transient error for the topic.
        until(
            &format!("every member's Kafka, read independently, has {topic} at {partitions}/{rf}"),
            KAFKA_METADATA_LAG,
            || async {
                for (i, probe) in probes.iter().enumerate() {
                    let seen = probe.topic(&topic).await?;
                    if seen != expected {
                        return Ok(Check::NotYet(format!(
                            "{}: Kafka has {topic} as {seen:?}, the status says Synced {partitions}/{rf}",
                            self.clusters[i]
                        )));
                    }
                }
                Ok(Check::Ready(()))
            },
        )
        .await?;
        Ok(status)
    }

    /// Replaces member `i`'s Kafka Secret data.
    pub async fn set_secret(&self, i: usize, data: &BTreeMap<String, String>) -> Result<()> {
        let m = self.members.get(i).context("no such member")?;
        write_secret(self.testbed, m.member, data).await
    }

    /// Process id of the running agent of member `i`.
    pub fn agent_pid(&self, i: usize) -> Result<u32> {
        let agent = self
            .fleet
            .agents
            .get(&self.clusters[i])
            .context("no such agent")?;
        let id = agent.process.context("the agent is not running")?;
        self.testbed.ensure_running(id)?;
        Ok(self.testbed.process_info(id).pid)
    }

    /// Removes the webhook registration (the hub stops with the scenario).
    pub async fn unregister_webhook(&self) -> Result<()> {
        if let Some(webhook) = &self.webhook {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(self.testbed.mgmt().client());
            match api
                .delete(&webhook.configuration, &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// Writes Secret [`KAFKA_SECRET`] in the agent namespace of testbed member `member`.
pub async fn write_secret(
    testbed: &Testbed,
    member: usize,
    data: &BTreeMap<String, String>,
) -> Result<()> {
    let cluster = &testbed.members()[member];
    ensure_namespace(cluster, AGENT_NAMESPACE).await?;
    let api: Api<Secret> = Api::namespaced(cluster.client(), AGENT_NAMESPACE);
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": KAFKA_SECRET, "namespace": AGENT_NAMESPACE},
        "type": "Opaque",
        "stringData": data,
    });
    // Replace, not merge: a key left out (say, the password) must go.
    match api.delete(KAFKA_SECRET, &DeleteParams::default()).await {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let secret: Secret = serde_json::from_value(secret)?;
    api.create(&Default::default(), &secret)
        .await
        .with_context(|| format!("writing Secret {KAFKA_SECRET} in {}", cluster.name()))?;
    Ok(())
}

/// Creates or relabels namespace `ns` on the management cluster (labels are merged).
pub async fn label_namespace(
    testbed: &Testbed,
    ns: &str,
    labels: &BTreeMap<String, String>,
) -> Result<()> {
    ensure_namespace(testbed.mgmt(), ns).await?;
    let api: Api<Namespace> = Api::all(testbed.mgmt().client());
    let patch = serde_json::json!({"metadata": {"labels": labels}});
    api.patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("labelling namespace {ns}"))?;
    Ok(())
}

/// Sets label `key=value` on ManagedCluster `cluster` (a merge patch: other labels stay).
pub async fn label_cluster(testbed: &Testbed, cluster: &str, key: &str, value: &str) -> Result<()> {
    let api: Api<accord_crds::ManagedCluster> = Api::all(testbed.mgmt().client());
    let patch = serde_json::json!({"metadata": {"labels": {key: value}}});
    api.patch(cluster, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("labelling ManagedCluster {cluster}"))?;
    Ok(())
}

/// The hub CA's certificate (PEM), from its Secret on the management cluster.
pub async fn hub_ca_pem(testbed: &Testbed) -> Result<Vec<u8>> {
    Ok(
        crate::hub::hub_ca(&testbed.mgmt().client(), Duration::from_secs(60))
            .await?
            .0,
    )
}

/// Registers the hub's webhook at `addr` with the management kube-apiserver, as
/// `accord-hub install` does but for the namespaces of scenario `name` only, and waits
/// until the hub answers on it.
pub async fn register_webhook(testbed: &Testbed, name: &str, addr: &str) -> Result<Webhook> {
    let ca = hub_ca_pem(testbed).await?;
    let configuration = format!("accord-e2e-{name}");
    let object = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": configuration},
        "webhooks": [{
            "name": "federatedkafkatopics.accord.io",
            "clientConfig": {
                "url": format!("https://{addr}{WEBHOOK_PATH}"),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(&ca),
            },
            "rules": [{
                "apiGroups": ["accord.io"],
                "apiVersions": ["v1beta1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["federatedkafkatopics"],
                "scope": "Namespaced",
            }],
            "namespaceSelector": {"matchLabels": {WEBHOOK_NAMESPACE_LABEL: name}},
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
            // Fail, unlike the installed Ignore: a test must see a webhook that is not
            // answering, not have its topics admitted silently.
            "failurePolicy": "Fail",
        }],
    });
    let api: Api<ValidatingWebhookConfiguration> = Api::all(testbed.mgmt().client());
    api.patch(
        &configuration,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .context("registering the webhook")?;
    let url = format!("https://{addr}{WEBHOOK_PATH}");
    until(
        &format!("the hub's webhook at {url}"),
        Duration::from_secs(60),
        || async {
            Ok(match testbed.http().get(&url).send().await {
                Ok(_) => Check::Ready(()),
                Err(e) => Check::NotYet(e.to_string()),
            })
        },
    )
    .await?;
    Ok(Webhook {
        addr: addr.to_owned(),
        configuration,
    })
}

/// A FederatedKafkaTopic object for server-side apply.
pub fn topic_object(ns: &str, name: &str, spec: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "accord.io/v1beta1",
        "kind": "FederatedKafkaTopic",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

/// Applies FederatedKafkaTopic `ns/name` with `spec` (server-side apply); the API
/// server's answer as it came, so that a refusal can be inspected.
pub async fn try_apply_topic(
    testbed: &Testbed,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
    dry_run: bool,
) -> std::result::Result<FederatedKafkaTopic, kube::Error> {
    let api: Api<FederatedKafkaTopic> = Api::namespaced(testbed.mgmt().client(), ns);
    let mut params = PatchParams::apply(FIELD_MANAGER).force();
    params.dry_run = dry_run;
    api.patch(name, &params, &Patch::Apply(&topic_object(ns, name, spec)))
        .await
}

/// Applies FederatedKafkaTopic `ns/name` with `spec`, creating `ns` if needed.
pub async fn apply_topic(
    testbed: &Testbed,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
) -> Result<FederatedKafkaTopic> {
    ensure_namespace(testbed.mgmt(), ns).await?;
    try_apply_topic(testbed, ns, name, spec, false)
        .await
        .with_context(|| format!("applying FederatedKafkaTopic {ns}/{name}"))
}

/// Applies KafkaTopicPolicy `name` with `spec`.
pub async fn apply_policy(testbed: &Testbed, name: &str, spec: serde_json::Value) -> Result<()> {
    let api: Api<KafkaTopicPolicy> = Api::all(testbed.mgmt().client());
    let object = serde_json::json!({
        "apiVersion": "accord.io/v1beta1",
        "kind": "KafkaTopicPolicy",
        "metadata": {"name": name},
        "spec": spec,
    });
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .with_context(|| format!("applying KafkaTopicPolicy {name}"))?;
    Ok(())
}

/// Deletes KafkaTopicPolicy `name` if it exists.
pub async fn delete_policy(testbed: &Testbed, name: &str) -> Result<()> {
    delete_if_present(&Api::<KafkaTopicPolicy>::all(testbed.mgmt().client()), name).await
}

/// Deletes object `name` through `api`; one that is not there is fine.
async fn delete_if_present<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// FederatedKafkaTopic `ns/name`, if it exists.
pub async fn get_topic(
    testbed: &Testbed,
    ns: &str,
    name: &str,
) -> Result<Option<FederatedKafkaTopic>> {
    let api: Api<FederatedKafkaTopic> = Api::namespaced(testbed.mgmt().client(), ns);
    Ok(api.get_opt(name).await?)
}

/// The Kafka topic name of FederatedKafkaTopic `ns/name`.
pub async fn topic_name(testbed: &Testbed, ns: &str, name: &str) -> Result<String> {
    Ok(get_topic(testbed, ns, name)
        .await?
        .with_context(|| format!("FederatedKafkaTopic {ns}/{name} does not exist"))?
        .topic_name()
        .to_owned())
}

/// Deletes FederatedKafkaTopic `ns/name` (its finalizer may hold it a while).
pub async fn delete_topic(testbed: &Testbed, ns: &str, name: &str) -> Result<()> {
    delete_if_present(
        &Api::<FederatedKafkaTopic>::namespaced(testbed.mgmt().client(), ns),
        name,
    )
    .await
}

/// Waits until FederatedKafkaTopic `ns/name` is gone (finalizer released).
pub async fn wait_topic_gone(
    testbed: &Testbed,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> Result<()> {
    until(
        &format!("FederatedKafkaTopic {ns}/{name} gone"),
        timeout,
        || async {
            Ok(match get_topic(testbed, ns, name).await? {
                None => Check::Ready(()),
                Some(t) => Check::NotYet(format!(
                    "finalizers {:?}, status {:?}",
                    t.metadata.finalizers,
                    t.status.map(|s| s.placements)
                )),
            })
        },
    )
    .await
}

/// Waits until `ns/name`'s status reflects its current generation and every placement
/// of `clusters` passes `accept` (`what` describes it for the timeout message).
pub async fn wait_placements(
    testbed: &Testbed,
    ns: &str,
    name: &str,
    clusters: &[String],
    what: &str,
    timeout: Duration,
    accept: impl Fn(&TopicPlacement) -> bool,
) -> Result<FederatedKafkaTopicStatus> {
    wait_placements_while(
        testbed,
        &|| Ok(()),
        ns,
        name,
        clusters,
        what,
        timeout,
        accept,
    )
    .await
}

/// [`wait_placements`], failing at once when `running` does (a component exited).
#[allow(clippy::too_many_arguments)]
async fn wait_placements_while(
    testbed: &Testbed,
    running: &(dyn Fn() -> Result<()> + Sync),
    ns: &str,
    name: &str,
    clusters: &[String],
    what: &str,
    timeout: Duration,
    accept: impl Fn(&TopicPlacement) -> bool,
) -> Result<FederatedKafkaTopicStatus> {
    let accept = &accept;
    until(
        &format!("{ns}/{name} placements of {clusters:?}: {what}"),
        timeout,
        || async move {
            running()?;
            let Some(topic) = get_topic(testbed, ns, name).await? else {
                return Ok(Check::NotYet("the topic does not exist".into()));
            };
            let status = topic.status.clone().unwrap_or_default();
            if status.observed_generation != topic.metadata.generation {
                return Ok(Check::NotYet(format!(
                    "observedGeneration {:?} of {:?}",
                    status.observed_generation, topic.metadata.generation
                )));
            }
            for cluster in clusters {
                let p = status.placements.iter().find(|p| &p.cluster == cluster);
                if !p.is_some_and(accept) {
                    return Ok(Check::NotYet(format!("{cluster}: {p:?}")));
                }
            }
            Ok(Check::Ready(status))
        },
    )
    .await
}

/// Waits until condition `type_` of `ns/name` has `status` (and `reason`, if given);
/// returns its message.
pub async fn wait_condition(
    testbed: &Testbed,
    ns: &str,
    name: &str,
    type_: &str,
    status: &str,
    reason: Option<&str>,
    timeout: Duration,
) -> Result<String> {
    until(
        &format!("{ns}/{name} condition {type_}={status} {reason:?}"),
        timeout,
        || async {
            let topic = get_topic(testbed, ns, name).await?;
            let conditions = topic
                .and_then(|t| t.status)
                .map(|s| s.conditions)
                .unwrap_or_default();
            let found = accord_crds::conditions::find(&conditions, type_);
            Ok(match found {
                Some(c) if c.status == status && reason.is_none_or(|r| c.reason == r) => {
                    Check::Ready(c.message.clone())
                }
                other => Check::NotYet(format!("{other:?}")),
            })
        },
    )
    .await
}

/// (type, reason, message) of every Event about object `name` in `ns` on the management
/// cluster.
pub async fn events(
    testbed: &Testbed,
    ns: &str,
    name: &str,
) -> Result<Vec<(String, String, String)>> {
    let api: Api<Event> = Api::namespaced(testbed.mgmt().client(), ns);
    Ok(api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect())
}

/// Waits for an Event of `type_` and `reason` about `ns/name`; returns its message.
pub async fn wait_event(
    testbed: &Testbed,
    ns: &str,
    name: &str,
    type_: &str,
    reason: &str,
    timeout: Duration,
) -> Result<String> {
    until(
        &format!("a {type_} {reason} Event about {ns}/{name}"),
        timeout,
        || async {
            let all = events(testbed, ns, name).await?;
            Ok(
                match all.iter().find(|(t, r, _)| t == type_ && r == reason) {
                    Some((_, _, m)) => Check::Ready(m.clone()),
                    None => Check::NotYet(format!("events: {all:?}")),
                },
            )
        },
    )
    .await
}

/// Log files under the testbed's directory that contain `needle`.
pub fn logs_containing(testbed: &Testbed, needle: &str) -> Result<Vec<PathBuf>> {
    fn walk(dir: &Path, needle: &[u8], found: &mut Vec<PathBuf>) -> Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                walk(&path, needle, found)?;
            } else if path.extension().is_some_and(|e| e == "log") {
                let bytes = std::fs::read(&path).unwrap_or_default();
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    found.push(path);
                }
            }
        }
        Ok(())
    }
    ensure!(!needle.is_empty(), "an empty needle matches everything");
    let mut found = Vec::new();
    walk(&testbed.dir().join("logs"), needle.as_bytes(), &mut found)?;
    Ok(found)
}

/// A topic as Kafka reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicView {
    /// Partition count.
    pub partitions: i32,
    /// Replicas of partition 0.
    pub rf: i32,
}

/// A topic config as Kafka reports it: value and whether it is set on the topic itself
/// (source `DYNAMIC_TOPIC_CONFIG`) rather than inherited from the broker or a default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigView {
    /// The value in effect.
    pub value: Option<String>,
    /// Set on the topic.
    pub topic_level: bool,
}

/// A Kafka admin client independent of Accord's (rdkafka), on a PLAINTEXT listener.
#[derive(Clone)]
pub struct KafkaProbe {
    admin: Arc<AdminClient<DefaultClientContext>>,
    /// Its bootstrap servers.
    pub bootstrap: String,
}

impl KafkaProbe {
    /// A client for `bootstrap`.
    pub fn new(bootstrap: &str) -> Result<Self> {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            // Reading a topic must never create it.
            .set("allow.auto.create.topics", "false")
            .set("reconnect.backoff.ms", "50")
            .set("reconnect.backoff.max.ms", "500")
            .create()
            .context("creating an rdkafka admin client")?;
        Ok(Self {
            admin: Arc::new(admin),
            bootstrap: bootstrap.to_owned(),
        })
    }

    /// Every topic (internal ones left out) with its partitions and replication factor,
    /// from one metadata request for all topics (which never creates one).
    pub async fn topics(&self) -> Result<BTreeMap<String, TopicView>> {
        let admin = self.admin.clone();
        let metadata = tokio::task::spawn_blocking(move || {
            admin.inner().fetch_metadata(None, Duration::from_secs(10))
        })
        .await?
        .with_context(|| format!("metadata from {}", self.bootstrap))?;
        Ok(metadata
            .topics()
            .iter()
            .filter(|t| !t.name().starts_with("__") && t.error().is_none())
            .map(|t| {
                let rf = t
                    .partitions()
                    .iter()
                    .find(|p| p.id() == 0)
                    .map_or(0, |p| p.replicas().len() as i32);
                (
                    t.name().to_owned(),
                    TopicView {
                        partitions: t.partitions().len() as i32,
                        rf,
                    },
                )
            })
            .collect())
    }

    /// Topic `name`, if it exists.
    pub async fn topic(&self, name: &str) -> Result<Option<TopicView>> {
        Ok(self.topics().await?.remove(name))
    }

    /// Every config of topic `name`.
    pub async fn configs(&self, name: &str) -> Result<BTreeMap<String, ConfigView>> {
        Ok(crate::kafka::rdkafka_topic_configs(&self.admin, name)
            .await?
            .into_iter()
            .map(|e| {
                (
                    e.name,
                    ConfigView {
                        value: e.value,
                        topic_level: e.source == ConfigSource::DynamicTopic,
                    },
                )
            })
            .collect())
    }

    /// Deletes topic `name` behind Accord's back.
    pub async fn delete(&self, name: &str) -> Result<()> {
        let results = self
            .admin
            .delete_topics(&[name], &AdminOptions::new())
            .await?;
        for r in results {
            r.map_err(|(topic, e)| anyhow::anyhow!("deleting {topic}: {e}"))?;
        }
        Ok(())
    }

    /// Creates every topic in `names` in one CreateTopics request (as the agent batches
    /// them), each with `partitions` partitions, replication factor 1 and `configs`.
    pub async fn create_all(
        &self,
        names: &[String],
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> Result<()> {
        let topics: Vec<NewTopic<'_>> = names
            .iter()
            .map(|name| {
                configs.iter().fold(
                    NewTopic::new(name, partitions, TopicReplication::Fixed(1)),
                    |topic, (key, value)| topic.set(key, value),
                )
            })
            .collect();
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(60)));
        for r in self.admin.create_topics(&topics, &options).await? {
            r.map_err(|(topic, e)| anyhow::anyhow!("creating {topic}: {e}"))?;
        }
        Ok(())
    }

    /// Deletes every topic in `names` in one DeleteTopics request.
    pub async fn delete_all(&self, names: &[String]) -> Result<()> {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(60)));
        for r in self.admin.delete_topics(&names, &options).await? {
            r.map_err(|(topic, e)| anyhow::anyhow!("deleting {topic}: {e}"))?;
        }
        Ok(())
    }
}

/// The configs set on topic `topic` itself, as Kafka's own `ConfigCommand --describe`
/// lists them (over PLAINTEXT).
pub async fn tool_topic_configs(
    testbed: &Testbed,
    bootstrap: &str,
    topic: &str,
) -> Result<BTreeMap<String, String>> {
    kafka::topic_overrides(testbed.binaries(), bootstrap, None, topic).await
}

/// Sets `key=value` on topic `topic` with `ConfigCommand --alter --add-config`, as an
/// operator would.
pub async fn tool_set_config(
    testbed: &Testbed,
    bootstrap: &str,
    topic: &str,
    key: &str,
    value: &str,
) -> Result<()> {
    kafka::config_command(
        testbed.binaries(),
        bootstrap,
        None,
        &[
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--add-config",
            &format!("{key}={value}"),
        ],
    )
    .await
    .map(drop)
}
