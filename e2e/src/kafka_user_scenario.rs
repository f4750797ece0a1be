//! FederatedKafkaUser on the testbed, for the end-to-end tests and the benchmark: applying
//! users and their password Secrets on the management cluster, waiting on their status,
//! and checking each member's Kafka independently of Accord — Kafka's own `kafka-acls` and
//! `kafka-configs`, and its producer (`kafka-verifiable-producer`), authenticating as the
//! user over SASL_SSL (this build's rdkafka has no TLS).

use std::time::Duration;

use accord_crds::PlacementState;
use accord_crds::kafka_user::{FederatedKafkaUser, KafkaUserPlacement};
use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};

use crate::fleet::ensure_namespace;
use crate::kafka::{self, KafkaCluster, SendOutcome};
use crate::testbed::Testbed;
use crate::wait::{Check, until};

/// Field manager of the scenario's writes.
pub const FIELD_MANAGER: &str = "accord-e2e-kafka-user";

/// Applies FederatedKafkaUser `ns/name` with `spec`.
pub async fn apply_user(
    testbed: &Testbed,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
) -> Result<FederatedKafkaUser> {
    ensure_namespace(testbed.mgmt(), ns).await?;
    let api: Api<FederatedKafkaUser> = Api::namespaced(testbed.mgmt().client(), ns);
    let object = serde_json::json!({
        "apiVersion": "accord.io/v1beta1",
        "kind": "FederatedKafkaUser",
        "metadata": {"name": name},
        "spec": spec,
    });
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .with_context(|| format!("applying FederatedKafkaUser {ns}/{name}"))
}

/// Deletes FederatedKafkaUser `ns/name` (its finalizer may hold it a while).
pub async fn delete_user(testbed: &Testbed, ns: &str, name: &str) -> Result<()> {
    let api: Api<FederatedKafkaUser> = Api::namespaced(testbed.mgmt().client(), ns);
    api.delete(name, &DeleteParams::default()).await?;
    Ok(())
}

/// Waits until FederatedKafkaUser `ns/name` is gone.
pub async fn wait_gone(testbed: &Testbed, ns: &str, name: &str, timeout: Duration) -> Result<()> {
    let api: Api<FederatedKafkaUser> = Api::namespaced(testbed.mgmt().client(), ns);
    until(&format!("{ns}/{name} to be gone"), timeout, || async {
        Ok(match api.get_opt(name).await? {
            None => Check::Ready(()),
            Some(u) => Check::NotYet(format!("{:?}", u.status)),
        })
    })
    .await
}

/// Writes Secret `ns/name` on the management cluster with `password` under key `password`.
pub async fn put_password(testbed: &Testbed, ns: &str, name: &str, password: &str) -> Result<()> {
    ensure_namespace(testbed.mgmt(), ns).await?;
    let api: Api<Secret> = Api::namespaced(testbed.mgmt().client(), ns);
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name}, "stringData": {"password": password}})),
    )
    .await?;
    Ok(())
}

/// The value of key `password` in Secret `ns/name` of the management cluster, if any.
pub async fn read_password(testbed: &Testbed, ns: &str, name: &str) -> Result<Option<String>> {
    let api: Api<Secret> = Api::namespaced(testbed.mgmt().client(), ns);
    Ok(api
        .get_opt(name)
        .await?
        .and_then(|s| s.data)
        .and_then(|d| d.get("password").cloned())
        .map(|v| String::from_utf8_lossy(&v.0).into_owned()))
}

/// Waits until every placement of `ns/name` for its current generation is accepted by
/// `accept`; the user as it was then.
pub async fn wait_placements(
    testbed: &Testbed,
    ns: &str,
    name: &str,
    clusters: &[String],
    what: &str,
    timeout: Duration,
    accept: impl Fn(&KafkaUserPlacement) -> bool,
) -> Result<FederatedKafkaUser> {
    let api: Api<FederatedKafkaUser> = Api::namespaced(testbed.mgmt().client(), ns);
    let accept = &accept;
    until(&format!("{ns}/{name}: {what}"), timeout, || async {
        let user = api.get(name).await?;
        let Some(status) = &user.status else {
            return Ok(Check::NotYet("no status".into()));
        };
        let current = status.observed_generation == user.metadata.generation;
        let all = clusters.iter().all(|c| {
            status
                .placements
                .iter()
                .any(|p| &p.cluster == c && accept(p))
        });
        Ok(if current && all {
            Check::Ready(user.clone())
        } else {
            Check::NotYet(format!("{:?}", status.placements))
        })
    })
    .await
}

/// [`wait_placements`] until every cluster is `Synced`.
pub async fn wait_synced(
    testbed: &Testbed,
    ns: &str,
    name: &str,
    clusters: &[String],
    timeout: Duration,
) -> Result<FederatedKafkaUser> {
    wait_placements(testbed, ns, name, clusters, "Synced", timeout, |p| {
        p.state == PlacementState::Synced
    })
    .await
}

/// What an independent client got when it sent one record as some user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sent {
    /// The broker acknowledged the record.
    Acked,
    /// Authenticated, but the topic's ACLs refuse it (`TOPIC_AUTHORIZATION_FAILED`).
    TopicDenied,
    /// The broker refused the credentials (SASL authentication failed).
    AuthenticationFailed,
    /// Anything else, as the client said it.
    Other(String),
}

/// What an independent client (Kafka's own producer, `kafka-verifiable-producer`)
/// authenticating as `username` with `password` over SASL_SSL gets when it sends one
/// record to `topic` in `kafka`.
pub async fn send_as(
    testbed: &Testbed,
    kafka: &KafkaCluster,
    username: &str,
    password: &str,
    topic: &str,
) -> Result<Sent> {
    let bootstrap = kafka
        .sasl_ssl_bootstrap
        .as_deref()
        .context("the cluster has no SASL_SSL listener")?;
    let outcome = kafka::produce_one(
        testbed.binaries(),
        bootstrap,
        kafka.tool_sasl_properties_as(username, password).as_deref(),
        topic,
    )
    .await?;
    Ok(match outcome {
        SendOutcome::Acked => Sent::Acked,
        SendOutcome::Failed { exception, .. }
            if exception.ends_with("TopicAuthorizationException") =>
        {
            Sent::TopicDenied
        }
        SendOutcome::Failed { exception, .. }
            if exception.ends_with("SaslAuthenticationException") =>
        {
            Sent::AuthenticationFailed
        }
        SendOutcome::Failed { exception, message } => {
            Sent::Other(format!("{exception}: {message}"))
        }
    })
}

/// Waits until a client authenticating as `username` with `password` gets `expected` when
/// sending to `topic` in `kafka`.
pub async fn wait_send(
    testbed: &Testbed,
    kafka: &KafkaCluster,
    username: &str,
    password: &str,
    topic: &str,
    expected: Sent,
    timeout: Duration,
) -> Result<()> {
    let expected = &expected;
    until(
        &format!("{username} sending to {topic}: {expected:?}"),
        timeout,
        || async {
            let sent = send_as(testbed, kafka, username, password, topic).await?;
            Ok(if sent == *expected {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{sent:?}"))
            })
        },
    )
    .await
}

/// The ACLs of `principal` in `kafka` as `kafka-acls --list` prints them (as the super
/// user over SASL_SSL).
pub async fn acls(testbed: &Testbed, kafka: &KafkaCluster, principal: &str) -> Result<Vec<String>> {
    let (bootstrap, props) = admin_tool(kafka)?;
    kafka::acls_of(testbed.binaries(), bootstrap, props.as_deref(), principal).await
}

/// The quotas of `user` in `kafka` as `kafka-configs --describe` prints them.
pub async fn quotas(
    testbed: &Testbed,
    kafka: &KafkaCluster,
    user: &str,
) -> Result<std::collections::BTreeMap<String, f64>> {
    let (bootstrap, props) = admin_tool(kafka)?;
    kafka::user_quotas(testbed.binaries(), bootstrap, props.as_deref(), user).await
}

/// Where Kafka's tools reach `kafka` as its super user: the SASL_SSL listener.
pub fn admin_tool(kafka: &KafkaCluster) -> Result<(&str, Option<String>)> {
    Ok((
        kafka
            .sasl_ssl_bootstrap
            .as_deref()
            .context("the cluster has no SASL_SSL listener")?,
        kafka.tool_sasl_properties(None),
    ))
}
