//! The hub's admission webhooks through a real kube-apiserver: a real `accord-hub serve`
//! serves them on `--webhook-addr`, a ValidatingWebhookConfiguration points the API server
//! at `https://127.0.0.1:PORT/validate-…`, and the hub itself fills in its `caBundle` with
//! the hub CA. Then, as a user sees it: a topic under a Deny policy is refused naming both
//! broken rules, an Audit policy admits with a warning that reaches the client and a
//! Warning Event, and a second topic with a taken name in the same cluster is refused
//! (reason `TOPIC_ALREADY_MANAGED`) naming its owner; a replica that does not lead answers
//! as well. A second test installs the hub with
//! `accord-hub install` and runs it with exactly its ServiceAccount's permissions, proving
//! they suffice for the webhook (Namespaces, the configuration's caBundle, Events). A third
//! registers every webhook, as `accord-hub install` does, and shows `kubectl apply` of a
//! PrometheusFederation with `match: ["{job=}"]` refused with the selector parser's message
//! (reason `INVALID_MATCH_SELECTOR`) while a valid one is admitted, and FederatedResources
//! with duplicate manifests, a patch operation without its value or a spec over 512 KiB
//! refused naming the rule (reason `INVALID_SPEC`). A fourth registers every webhook the
//! same way and shows FederatedKafkaUsers judged at `kubectl apply`: an allow ACL granting
//! `All` on topic `*` is refused by a Deny KafkaTopicPolicy naming the policy and both
//! rules, the same under an Audit policy is admitted with a `Warning:` kubectl prints (but
//! not for the rule the policy's `users` block allows), and `Write` on a group is refused
//! (reason `INVALID_SPEC`) naming the field and the group's operations.

use std::process::Stdio;
use std::time::Duration;

use accord_crds::FederatedResource;
use accord_crds::federated_resource::MAX_SPEC_BYTES;
use accord_crds::kafka_topic::FederatedKafkaTopic;
use accord_crds::kafka_user::FederatedKafkaUser;
use accord_crds::messages;
use accord_e2e::hub::{HUB_NAMESPACE, HubOptions, HubProcess, accord_binary};
use accord_e2e::installed::{
    HUB_SERVICE_ACCOUNT, SERVICE_ACCOUNT_GROUPS, impersonating_kubeconfig, output_text, run_binary,
};
use accord_e2e::ports::free_port;
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use accord_hub::kinds::WEBHOOKS;
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;

static TESTBED: SharedTestbed =
    SharedTestbed::new(|b| b.members(0).without_mgmt_controller_manager());
/// Both tests own the ValidatingWebhookConfiguration `accord-hub` while they run.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const REASON: &str = "TOPIC_CREATION_POLICY_VIOLATION";
const ALREADY_MANAGED: &str = "TOPIC_ALREADY_MANAGED";
const INVALID_MATCH: &str = "INVALID_MATCH_SELECTOR";
const INVALID_SPEC: &str = "INVALID_SPEC";
const WAIT: Duration = Duration::from_secs(60);

fn topic(
    ns: &str,
    name: &str,
    partitions: i32,
    rf: i32,
    clusters: &[&str],
) -> Result<FederatedKafkaTopic> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "accord.io/v1beta1",
        "kind": "FederatedKafkaTopic",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "partitions": partitions, "replicationFactor": rf, "placement": { "clusters": clusters } },
    }))?)
}

async fn labelled_namespace(testbed: &Testbed, name: &str, label: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(testbed.mgmt().client());
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "accord-webhook-test": label } },
    }))?;
    api.create(&PostParams::default(), &ns).await?;
    Ok(())
}

async fn create_policy(testbed: &Testbed, name: &str, spec: Value) -> Result<()> {
    let api: Api<accord_crds::kafka_topic::KafkaTopicPolicy> = Api::all(testbed.mgmt().client());
    let policy = serde_json::from_value(json!({
        "apiVersion": "accord.io/v1beta1", "kind": "KafkaTopicPolicy",
        "metadata": { "name": name }, "spec": spec,
    }))?;
    api.create(&PostParams::default(), &policy).await?;
    Ok(())
}

/// Creates `topic` (or only tries, with `dry_run`); returns the API server's refusal, if any.
async fn try_create(
    testbed: &Testbed,
    topic: &FederatedKafkaTopic,
    dry_run: bool,
) -> Result<Option<kube::core::Status>> {
    let ns = topic.metadata.namespace.as_deref().context("namespace")?;
    let api: Api<FederatedKafkaTopic> = Api::namespaced(testbed.mgmt().client(), ns);
    let params = PostParams {
        dry_run,
        ..PostParams::default()
    };
    match api.create(&params, topic).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(status)) => Ok(Some(*status)),
        Err(e) => Err(e.into()),
    }
}

/// Waits until a dry-run create of `topic` is refused by the webhook with `reason` (its
/// configuration is active in the API server and the hub's caches hold what makes it
/// refuse); returns the refusal.
async fn refused_once_in_effect(
    testbed: &Testbed,
    topic: &FederatedKafkaTopic,
    reason: &str,
) -> Result<kube::core::Status> {
    until("the webhook refuses a dry run", WAIT, || async {
        Ok(match try_create(testbed, topic, true).await? {
            Some(status) if status.reason == reason => Check::Ready(status),
            Some(other) => Check::NotYet(format!("refused otherwise: {other:?}")),
            None => Check::NotYet("admitted".into()),
        })
    })
    .await
}

/// POSTs `topic` through the API server as raw HTTP, so the response's `Warning` headers
/// are visible (what kubectl prints); returns (status, warnings).
async fn create_with_warnings(
    testbed: &Testbed,
    topic: &FederatedKafkaTopic,
    dry_run: bool,
) -> Result<(u16, Vec<String>)> {
    let ns = topic.metadata.namespace.as_deref().context("namespace")?;
    let mut uri = format!("/apis/accord.io/v1beta1/namespaces/{ns}/federatedkafkatopics");
    if dry_run {
        uri.push_str("?dryRun=All");
    }
    let request = http::Request::post(uri)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(serde_json::to_vec(topic)?))?;
    let response = testbed.mgmt().client().send(request).await?;
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect();
    Ok((response.status().as_u16(), warnings))
}

/// The hub CA certificate from its Secret.
async fn hub_ca(testbed: &Testbed) -> Result<k8s_openapi::ByteString> {
    let secrets: Api<Secret> = Api::namespaced(testbed.mgmt().client(), HUB_NAMESPACE);
    secrets
        .get("accord-hub-ca")
        .await?
        .data
        .and_then(|d| d.get("tls.crt").cloned())
        .context("the hub CA Secret has tls.crt")
}

/// Waits until the configuration `accord-hub` carries `ca` as the caBundle of every
/// webhook in it.
async fn ca_bundle_becomes(
    configs: &Api<ValidatingWebhookConfiguration>,
    ca: &k8s_openapi::ByteString,
) -> Result<()> {
    until("the caBundle is the hub CA", WAIT, || async {
        let found = configs.get("accord-hub").await?;
        let bundles: Vec<Option<k8s_openapi::ByteString>> = found
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .map(|w| w.client_config.ca_bundle)
            .collect();
        Ok(
            if !bundles.is_empty() && bundles.iter().all(|b| b.as_ref() == Some(ca)) {
                Check::Ready(())
            } else {
                Check::NotYet(format!(
                    "caBundle bytes per webhook: {:?}",
                    bundles
                        .iter()
                        .map(|b| b.as_ref().map_or(0, |b| b.0.len()))
                        .collect::<Vec<_>>()
                ))
            },
        )
    })
    .await
}

/// Sends a CREATE review of `topic` straight to a hub's webhook on `port`, trusting only
/// the hub CA, once its caches have listed; returns the review's `response`.
async fn review_directly(
    ca: &k8s_openapi::ByteString,
    port: u16,
    topic: &FederatedKafkaTopic,
) -> Result<Value> {
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca.0)?)
        .build()?;
    let base = format!("https://127.0.0.1:{port}");
    until("the webhook's caches listed", WAIT, || async {
        Ok(match client.get(format!("{base}/readyz")).send().await {
            Ok(r) if r.status().is_success() => Check::Ready(()),
            Ok(r) => Check::NotYet(format!("readyz {}", r.status())),
            Err(e) => Check::NotYet(e.to_string()),
        })
    })
    .await?;
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "direct-1",
            "kind": { "group": "accord.io", "version": "v1beta1", "kind": "FederatedKafkaTopic" },
            "operation": "CREATE",
            "object": topic,
        },
    });
    let response = client
        .post(format!("{base}/validate-federatedkafkatopics"))
        .json(&review)
        .send()
        .await?;
    ensure!(response.status().is_success(), "HTTP {}", response.status());
    Ok(response.json::<Value>().await?["response"].clone())
}

/// A hub replica serving its admission webhook on a free port, with its state under
/// `etcd_prefix`; the port is returned with it.
async fn start_webhook_hub<'t>(
    testbed: &'t Testbed,
    replica: &str,
    etcd_prefix: &str,
) -> Result<(HubProcess<'t>, u16)> {
    let port = free_port()?;
    let hub = HubProcess::start(
        testbed,
        &HubOptions {
            replica: replica.into(),
            etcd_prefix: etcd_prefix.into(),
            extra_args: vec!["--webhook-addr".into(), format!("127.0.0.1:{port}")],
        },
    )
    .await?;
    Ok((hub, port))
}

#[test]
fn topic_policies_are_enforced_at_admission_through_the_real_api_server() {
    TESTBED.run(|testbed| async move {
        let _serial = SERIAL.lock().await;
        let (hub, port) = start_webhook_hub(testbed, "webhook-hub", "/kafka-webhook/").await?;
        let client = testbed.mgmt().client();

        // The configuration names the hub by URL and carries no CA: the hub sets it.
        let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": { "name": "accord-hub" },
            "webhooks": [{
                "name": "federatedkafkatopics.accord.io",
                "clientConfig": { "url": format!("https://127.0.0.1:{port}/validate-federatedkafkatopics") },
                "rules": [{
                    "apiGroups": ["accord.io"], "apiVersions": ["v1beta1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["federatedkafkatopics"],
                    "scope": "Namespaced",
                }],
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }],
        }))?;
        // (The other test may have left the installed one behind if it failed.)
        let _ = configs.delete("accord-hub", &Default::default()).await;
        configs.create(&PostParams::default(), &config).await?;
        let ca = hub_ca(testbed).await?;
        ca_bundle_becomes(&configs, &ca).await?;

        // Deny: min 12 partitions and RF 3.
        labelled_namespace(testbed, "wh-deny", "deny").await?;
        create_policy(
            testbed,
            "wh-min-12-rf-3",
            json!({
                "minPartitions": 12, "replicationFactor": 3,
                "namespaceSelector": { "matchLabels": { "accord-webhook-test": "deny" } },
            }),
        )
        .await?;
        let small = topic("wh-deny", "small", 6, 1, &["east"])?;
        refused_once_in_effect(testbed, &small, REASON).await?;
        let refusal = try_create(testbed, &small, false)
            .await?
            .context("a 6-partition, RF 1 topic was admitted under the Deny policy")?;
        eprintln!("refused: {refusal:?}");
        ensure!(refusal.code == 403, "{refusal:?}");
        ensure!(refusal.reason == REASON, "{refusal:?}");
        for rule in [
            "spec.partitions: must be at least 12 (is 6)",
            "spec.replicationFactor: must be 3 (is 1)",
        ] {
            ensure!(refusal.message.contains(rule), "{rule:?} not in {:?}", refusal.message);
        }
        let topics: Api<FederatedKafkaTopic> = Api::namespaced(client.clone(), "wh-deny");
        ensure!(topics.get_opt("small").await?.is_none(), "the refused topic exists");
        ensure!(
            try_create(testbed, &topic("wh-deny", "big", 12, 3, &["east"])?, false).await?.is_none(),
            "a compliant topic was refused"
        );

        // A replica that does not lead serves the webhook just the same.
        let (follower, follower_port) = start_webhook_hub(testbed, "webhook-follower", "/kafka-webhook/").await?;
        ensure!(
            follower.metric(testbed.http(), "accord_hub_is_leader").await? == Some(0.0),
            "the second replica leads"
        );
        let answer = review_directly(&ca, follower_port, &small).await?;
        ensure!(
            answer["allowed"] == false && answer["status"]["reason"] == REASON,
            "the follower answered {answer}"
        );
        drop(follower);

        // Audit: admitted, with a warning the client sees, and a Warning Event.
        labelled_namespace(testbed, "wh-audit", "audit").await?;
        create_policy(
            testbed,
            "wh-audit-min-12",
            json!({
                "minPartitions": 12, "enforcement": "Audit",
                "namespaceSelector": { "matchLabels": { "accord-webhook-test": "audit" } },
            }),
        )
        .await?;
        let audited = topic("wh-audit", "audited", 6, 3, &["east"])?;
        until("the Audit policy warns on a dry run", WAIT, || async {
            let (status, warnings) = create_with_warnings(testbed, &audited, true).await?;
            Ok(if status == 201 && !warnings.is_empty() {
                Check::Ready(())
            } else {
                Check::NotYet(format!("HTTP {status}, warnings {warnings:?}"))
            })
        })
        .await?;
        let (status, warnings) = create_with_warnings(testbed, &audited, false).await?;
        eprintln!("audit warnings: {warnings:?}");
        ensure!(status == 201, "the audited topic was not created: HTTP {status}");
        ensure!(
            warnings.len() == 1
                && warnings[0].contains("spec.partitions: must be at least 12 (is 6)")
                && warnings[0].contains("KafkaTopicPolicy wh-audit-min-12"),
            "{warnings:?}"
        );
        let events: Api<Event> = Api::namespaced(client.clone(), "wh-audit");
        let event = until("a PolicyViolation Event on the audited topic", WAIT, || async {
            let list = events.list(&ListParams::default()).await?;
            Ok(match list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some("PolicyViolation")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("audited")
            }) {
                Some(e) => Check::Ready(e),
                None => Check::NotYet("no Event yet".into()),
            })
        })
        .await?;
        ensure!(event.type_.as_deref() == Some("Warning"), "{event:?}");
        ensure!(
            event.note.as_deref().is_some_and(|n| n.contains("spec.partitions")),
            "{event:?}"
        );
        let stored = Api::<FederatedKafkaTopic>::namespaced(client.clone(), "wh-audit")
            .get("audited")
            .await?;
        ensure!(
            event.regarding.as_ref().and_then(|r| r.uid.as_deref()) == stored.metadata.uid.as_deref(),
            "the Event is bound to the stored topic"
        );

        // A taken topic name in the same cluster is refused, naming the owner.
        for ns in ["wh-dup-a", "wh-dup-b", "wh-dup-c"] {
            labelled_namespace(testbed, ns, "none").await?;
        }
        ensure!(
            try_create(testbed, &topic("wh-dup-a", "orders", 12, 3, &["east"])?, false).await?.is_none(),
            "the first topic was refused"
        );
        let duplicate = topic("wh-dup-b", "orders", 12, 3, &["west", "east"])?;
        refused_once_in_effect(testbed, &duplicate, ALREADY_MANAGED).await?;
        let refusal = try_create(testbed, &duplicate, false)
            .await?
            .context("a second topic named orders in cluster east was admitted")?;
        eprintln!("duplicate refused: {refusal:?}");
        // Its own reason: no KafkaTopicPolicy is involved.
        ensure!(refusal.code == 403 && refusal.reason == ALREADY_MANAGED, "{refusal:?}");
        ensure!(
            refusal.message.contains("FederatedKafkaTopic wh-dup-a/orders in cluster east"),
            "{:?}",
            refusal.message
        );
        ensure!(
            try_create(testbed, &topic("wh-dup-c", "orders", 12, 3, &["west"])?, false).await?.is_none(),
            "the same name in another cluster was refused"
        );

        configs.delete("accord-hub", &Default::default()).await?;
        drop(hub);
        Ok(())
    });
}

#[test]
fn the_webhook_works_with_only_the_permissions_install_grants() {
    TESTBED.run(|testbed| async move {
        let _serial = SERIAL.lock().await;
        let client = testbed.mgmt().client();
        let kubeconfig = testbed
            .mgmt()
            .kubeconfig_path()
            .to_str()
            .context("path")?
            .to_owned();
        let prefix = "/kafka-webhook-installed/";
        let out = run_binary(
            "accord-hub",
            &[
                "install",
                "--kubeconfig",
                &kubeconfig,
                "--etcd-endpoints",
                testbed.etcd_endpoint(),
                "--etcd-prefix",
                prefix,
            ],
        )
        .await?;
        ensure!(
            out.status.success(),
            "install failed: {}",
            output_text(&out)
        );

        // install applied the configuration with the hub CA as its caBundle.
        let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let ca = hub_ca(testbed).await?;
        ca_bundle_becomes(&configs, &ca).await?;
        let installed = configs.get("accord-hub").await?;
        let service = installed.webhooks.clone().unwrap_or_default()[0]
            .client_config
            .service
            .clone()
            .context("the installed webhook names a Service")?;
        ensure!(
            service.name == "accord-hub"
                && service.namespace == HUB_NAMESPACE
                && service.port == Some(9443),
            "{service:?}"
        );

        // A re-applied manifest drops the caBundle...
        let mut webhooks = serde_json::to_value(installed.webhooks.unwrap_or_default())?;
        webhooks[0]["clientConfig"]
            .as_object_mut()
            .context("clientConfig")?
            .remove("caBundle");
        configs
            .patch(
                "accord-hub",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({ "webhooks": webhooks })),
            )
            .await?;

        // ...and the hub, running with its ServiceAccount's permissions only, restores it.
        let as_sa = impersonating_kubeconfig(
            testbed,
            testbed.mgmt(),
            HUB_SERVICE_ACCOUNT,
            &SERVICE_ACCOUNT_GROUPS,
        )?;
        let port = free_port()?;
        let http = format!("127.0.0.1:{}", free_port()?);
        let mut serve = std::process::Command::new(accord_binary("accord-hub")?);
        serve
            .arg("serve")
            .arg("--kubeconfig")
            .arg(&as_sa)
            .args([
                "--etcd-endpoints",
                testbed.etcd_endpoint(),
                "--etcd-prefix",
                prefix,
            ])
            .args([
                "--namespace",
                HUB_NAMESPACE,
                "--replica-name",
                "webhook-as-sa",
            ])
            .args([
                "--grpc-addr",
                &format!("127.0.0.1:{}", free_port()?),
                "--http-addr",
                &http,
            ])
            .args(["--webhook-addr", &format!("127.0.0.1:{port}")])
            .env_remove("KUBECONFIG")
            .env("RUST_LOG", "info,accord_hub=debug");
        let process = testbed.spawn("hub/webhook-as-sa", serve)?;
        let readyz = format!("https://127.0.0.1:{port}/readyz");
        let webhook_client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&ca.0)?)
            .build()?;
        until(
            "the webhook's caches listed with the SA's permissions",
            WAIT,
            || async {
                testbed.ensure_running(process)?;
                Ok(match webhook_client.get(&readyz).send().await {
                    Ok(r) if r.status().is_success() => Check::Ready(()),
                    Ok(r) => Check::NotYet(format!("webhook readyz {}", r.status())),
                    Err(e) => Check::NotYet(e.to_string()),
                })
            },
        )
        .await?;
        ca_bundle_becomes(&configs, &ca).await?;

        // The testbed has no Service endpoints: reach this hub by URL, trusting its CA.
        let by_url: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": { "name": "accord-hub-by-url" },
            "webhooks": [{
                "name": "federatedkafkatopics.accord.io",
                "clientConfig": {
                    "url": format!("https://127.0.0.1:{port}/validate-federatedkafkatopics"),
                    "caBundle": serde_json::to_value(&ca)?,
                },
                "rules": [{
                    "apiGroups": ["accord.io"], "apiVersions": ["v1beta1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["federatedkafkatopics"],
                    "scope": "Namespaced",
                }],
                "failurePolicy": "Ignore", "sideEffects": "None",
                "admissionReviewVersions": ["v1"], "timeoutSeconds": 5,
            }],
        }))?;
        configs.create(&PostParams::default(), &by_url).await?;

        // A namespace-selected Audit policy: the namespace's labels come from the webhook's
        // Namespace watch, the Event from its Events permission.
        labelled_namespace(testbed, "wh-sa", "as-sa").await?;
        create_policy(
            testbed,
            "wh-sa-audit",
            json!({
                "minPartitions": 12, "enforcement": "Audit",
                "namespaceSelector": { "matchLabels": { "accord-webhook-test": "as-sa" } },
            }),
        )
        .await?;
        let audited = topic("wh-sa", "sa-audited", 3, 3, &["east"])?;
        until("the Audit policy warns on a dry run", WAIT, || async {
            let (status, warnings) = create_with_warnings(testbed, &audited, true).await?;
            Ok(
                if status == 201 && warnings.iter().any(|w| w.contains("wh-sa-audit")) {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("HTTP {status}, warnings {warnings:?}"))
                },
            )
        })
        .await?;
        let (status, _) = create_with_warnings(testbed, &audited, false).await?;
        ensure!(status == 201, "HTTP {status}");
        let events: Api<Event> = Api::namespaced(client.clone(), "wh-sa");
        until("the SA records a PolicyViolation Event", WAIT, || async {
            testbed.ensure_running(process)?;
            let list = events.list(&ListParams::default()).await?;
            Ok(
                if list.items.iter().any(|e| {
                    e.reason.as_deref() == Some("PolicyViolation")
                        && e.reporting_controller.as_deref() == Some("accord-hub-webhook")
                }) {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("{} Events", list.items.len()))
                },
            )
        })
        .await?;

        for name in ["accord-hub-by-url", "accord-hub"] {
            configs.delete(name, &Default::default()).await?;
        }
        testbed.stop_process(process);
        Ok(())
    });
}

/// Registers every webhook of [`WEBHOOKS`] as the configuration `accord-hub`, as
/// `accord-hub install` renders them but by URL (the hub on `port`) and without a CA, and
/// waits until the hub has set the caBundle of each.
async fn register_every_webhook(
    testbed: &Testbed,
    port: u16,
) -> Result<Api<ValidatingWebhookConfiguration>> {
    let webhook = |name: &str, path: &str, resource: &str| {
        json!({
            "name": name,
            "clientConfig": { "url": format!("https://127.0.0.1:{port}{path}") },
            "rules": [{
                "apiGroups": ["accord.io"], "apiVersions": ["v1beta1"],
                "operations": ["CREATE", "UPDATE"], "resources": [resource],
                "scope": "Namespaced",
            }],
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        })
    };
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(testbed.mgmt().client());
    let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": { "name": "accord-hub" },
        "webhooks": WEBHOOKS.iter().map(|w| webhook(w.name, w.path, w.resource)).collect::<Vec<_>>(),
    }))?;
    let _ = configs.delete("accord-hub", &Default::default()).await;
    configs.create(&PostParams::default(), &config).await?;
    let ca = hub_ca(testbed).await?;
    ca_bundle_becomes(&configs, &ca).await?;
    Ok(configs)
}

/// A PrometheusFederation `wh-pfed/<name>` with `match`, as JSON.
fn federation(name: &str, matchers: &[&str]) -> Value {
    json!({
        "apiVersion": "accord.io/v1beta1",
        "kind": "PrometheusFederation",
        "metadata": { "name": name, "namespace": "wh-pfed" },
        "spec": {
            "placement": { "clusters": ["east"] },
            "tenantSelector": { "namespaces": ["team-a"] },
            "match": matchers,
        },
    })
}

/// `kubectl apply -f -` (or with `--dry-run=server`) of `object` on the management cluster.
async fn kubectl_apply(
    testbed: &Testbed,
    object: &Value,
    dry_run: bool,
) -> Result<std::process::Output> {
    let mut command = testbed.kubectl(testbed.mgmt());
    command.args(["apply", "-f", "-"]);
    if dry_run {
        command.arg("--dry-run=server");
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().context("kubectl's stdin")?;
    stdin.write_all(&serde_json::to_vec(object)?).await?;
    drop(stdin);
    Ok(child.wait_with_output().await?)
}

#[test]
fn what_cel_cannot_check_is_refused_at_kubectl_apply() {
    TESTBED.run(|testbed| async move {
        let _serial = SERIAL.lock().await;
        let (hub, port) = start_webhook_hub(testbed, "webhook-pfed-hub", "/kafka-webhook-pfed/").await?;
        let client = testbed.mgmt().client();

        let configs = register_every_webhook(testbed, port).await?;

        labelled_namespace(testbed, "wh-pfed", "none").await?;
        let bad = federation("bad-match", &["up", "{job=}"]);
        let expected = accord_common::promfed::check_selector("{job=}")
            .err()
            .context("the parser accepts {job=}")?
            .to_string();
        // The API server's own validation (CEL) lets it through; only the webhook can refuse.
        let refused = until("the webhook refuses a server-side dry run", WAIT, || async {
            let out = kubectl_apply(testbed, &bad, true).await?;
            let text = output_text(&out);
            Ok(if !out.status.success() && text.contains(INVALID_MATCH) {
                Check::Ready(text)
            } else {
                Check::NotYet(text)
            })
        })
        .await?;
        eprintln!("dry run refused: {refused}");

        let out = kubectl_apply(testbed, &bad, false).await?;
        let text = output_text(&out);
        eprintln!("kubectl apply refused: {text}");
        ensure!(!out.status.success(), "kubectl apply of {{job=}} succeeded: {text}");
        ensure!(
            text.contains("prometheusfederations.accord.io")
                && text.contains(&format!("spec.match[1]: {expected}")),
            "the refusal lacks the webhook or the parser's message {expected:?}: {text}"
        );
        let federations: Api<accord_crds::PrometheusFederation> =
            Api::namespaced(client.clone(), "wh-pfed");
        ensure!(federations.get_opt("bad-match").await?.is_none(), "the refused object exists");

        // The reason reaches API clients as the status reason, with HTTP 422.
        let typed: accord_crds::PrometheusFederation = serde_json::from_value(bad.clone())?;
        match federations.create(&PostParams::default(), &typed).await {
            Err(kube::Error::Api(status)) => ensure!(
                status.code == 422 && status.reason == INVALID_MATCH,
                "{status:?}"
            ),
            other => anyhow::bail!("create of {{job=}} was not refused: {other:?}"),
        }

        // A valid one is admitted, and then an update that breaks it is refused.
        let good = federation("good-match", &["up", r#"{job="api"}"#]);
        let out = kubectl_apply(testbed, &good, false).await?;
        ensure!(out.status.success(), "a valid PrometheusFederation was refused: {}", output_text(&out));
        ensure!(federations.get_opt("good-match").await?.is_some(), "the valid object is missing");
        let broken = federation("good-match", &["up", "{job=}"]);
        let out = kubectl_apply(testbed, &broken, false).await?;
        ensure!(
            !out.status.success() && output_text(&out).contains(&expected),
            "an update to {{job=}} was not refused: {}",
            output_text(&out)
        );

        // FederatedResources: what CEL cannot see (embedded metadata, untyped values, the
        // total size) is refused by the webhook with every failed rule named.
        let resources: Api<FederatedResource> = Api::namespaced(client.clone(), "wh-pfed");
        let config_map = |name: &str, data: Value| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
        };
        let resource = |name: &str, manifests: Value, overrides: Value| {
            json!({
                "apiVersion": "accord.io/v1beta1", "kind": "FederatedResource",
                "metadata": {"name": name, "namespace": "wh-pfed"},
                "spec": {"placement": {"clusters": ["east"]}, "manifests": manifests, "overrides": overrides},
            })
        };
        let cases = [
            (
                resource("dup", json!([config_map("a", json!({})), config_map("a", json!({}))]), json!([])),
                messages::MANIFEST_DUPLICATE,
            ),
            (
                resource(
                    "valueless",
                    json!([config_map("a", json!({}))]),
                    json!([{"clusters": ["east"], "jsonPatch": [{"op": "replace", "path": "/data/x"}]}]),
                ),
                messages::PATCH_VALUE,
            ),
            (
                resource(
                    "big",
                    json!([config_map("a", json!({"blob": "x".repeat(MAX_SPEC_BYTES)}))]),
                    json!([]),
                ),
                messages::SPEC_TOO_LARGE,
            ),
        ];
        for (object, message) in &cases {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let typed: FederatedResource = serde_json::from_value(object.clone())?;
            match resources.create(&PostParams::default(), &typed).await {
                Err(kube::Error::Api(status)) => {
                    eprintln!("FederatedResource {name} refused: {}", status.message);
                    ensure!(
                        status.code == 422
                            && status.reason == INVALID_SPEC
                            && status.message.contains("federatedresources.accord.io")
                            && status.message.contains(message),
                        "FederatedResource {name} not refused with {message:?}: {status:?}"
                    );
                }
                other => anyhow::bail!("FederatedResource {name} was not refused: {other:?}"),
            }
            ensure!(resources.get_opt(name).await?.is_none(), "the refused {name} exists");
        }
        // As kubectl prints it (a spec that small fits kubectl's last-applied annotation;
        // a large one needs `kubectl apply --server-side` or `kubectl create`).
        let out = kubectl_apply(testbed, &cases[0].0, false).await?;
        let text = output_text(&out);
        ensure!(
            !out.status.success() && text.contains(messages::MANIFEST_DUPLICATE),
            "kubectl apply of duplicate manifests was not refused: {text}"
        );
        let good = resource("good", json!([config_map("a", json!({"k": "v"}))]), json!([]));
        let out = kubectl_apply(testbed, &good, false).await?;
        ensure!(out.status.success(), "a valid FederatedResource was refused: {}", output_text(&out));
        resources.delete("good", &Default::default()).await?;

        configs.delete("accord-hub", &Default::default()).await?;
        drop(hub);
        Ok(())
    });
}

/// A FederatedKafkaUser `<ns>/<name>` with `acls`, as JSON.
fn kafka_user(ns: &str, name: &str, acls: Value) -> Value {
    json!({
        "apiVersion": "accord.io/v1beta1",
        "kind": "FederatedKafkaUser",
        "metadata": { "name": name, "namespace": ns },
        "spec": {
            "authentication": { "type": "scram-sha-512" },
            "placement": { "clusters": ["east"] },
            "acls": acls,
        },
    })
}

/// Creates `user` through the typed API; returns the API server's refusal, if any.
async fn try_create_user(testbed: &Testbed, user: &Value) -> Result<Option<kube::core::Status>> {
    let ns = user["metadata"]["namespace"]
        .as_str()
        .context("namespace")?;
    let api: Api<FederatedKafkaUser> = Api::namespaced(testbed.mgmt().client(), ns);
    match api
        .create(
            &PostParams::default(),
            &serde_json::from_value(user.clone())?,
        )
        .await
    {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(status)) => Ok(Some(*status)),
        Err(e) => Err(e.into()),
    }
}

#[test]
fn kafka_user_acls_are_judged_by_topic_policies_and_kafka_operations_at_kubectl_apply() {
    TESTBED.run(|testbed| async move {
        let _serial = SERIAL.lock().await;
        let (hub, port) = start_webhook_hub(testbed, "webhook-user-hub", "/kafka-webhook-user/").await?;
        let configs = register_every_webhook(testbed, port).await?;
        let users: Api<FederatedKafkaUser> = Api::namespaced(testbed.mgmt().client(), "wh-user-deny");
        let everything = json!([{ "resource": { "type": "topic", "name": "*" }, "operations": ["All"] }]);
        let all_rule = "forbids operation All in spec.acls[0] (users.allowAllOperations is false)";
        let wildcard_rule = "forbids resource name * in spec.acls[0] (users.allowWildcardResources is false)";

        // Deny: a policy without a `users` block governs users' ACLs as well.
        labelled_namespace(testbed, "wh-user-deny", "user-deny").await?;
        create_policy(
            testbed,
            "wh-user-deny",
            json!({
                "minPartitions": 3,
                "namespaceSelector": { "matchLabels": { "accord-webhook-test": "user-deny" } },
            }),
        )
        .await?;
        let greedy = kafka_user("wh-user-deny", "greedy", everything.clone());
        let refused = until("the Deny policy refuses a server-side dry run", WAIT, || async {
            let out = kubectl_apply(testbed, &greedy, true).await?;
            let text = output_text(&out);
            Ok(if !out.status.success() && text.contains(all_rule) {
                Check::Ready(text)
            } else {
                Check::NotYet(text)
            })
        })
        .await?;
        eprintln!("dry run refused: {refused}");
        let out = kubectl_apply(testbed, &greedy, false).await?;
        let text = output_text(&out);
        eprintln!("kubectl apply refused: {text}");
        ensure!(!out.status.success(), "kubectl apply of a * / All user succeeded: {text}");
        for rule in [all_rule, wildcard_rule] {
            ensure!(
                text.contains("federatedkafkausers.accord.io")
                    && text.contains(&format!("KafkaTopicPolicy wh-user-deny {rule}")),
                "the refusal lacks the webhook, the policy or {rule:?}: {text}"
            );
        }
        let status = try_create_user(testbed, &greedy)
            .await?
            .context("the typed create of a * / All user was admitted")?;
        ensure!(status.code == 403 && status.reason == REASON, "{status:?}");
        ensure!(users.get_opt("greedy").await?.is_none(), "the refused user exists");
        // Naming the operations and a prefix is what the policy wants.
        let modest = kafka_user(
            "wh-user-deny",
            "modest",
            json!([{ "resource": { "type": "topic", "name": "orders.", "patternType": "prefixed" }, "operations": ["Write", "Describe"] }]),
        );
        let out = kubectl_apply(testbed, &modest, true).await?;
        ensure!(out.status.success(), "a compliant user was refused: {}", output_text(&out));

        // INVALID_SPEC: Kafka has no Write on a group; CEL admits it, the webhook names it.
        let writer = kafka_user(
            "wh-user-deny",
            "group-writer",
            json!([{ "resource": { "type": "group", "name": "orders-app" }, "operations": ["Read", "Write"] }]),
        );
        let expected = "spec.acls[0].operations[1]: Write is not an operation on a group (valid: All, Read, Describe, Delete)";
        let status = try_create_user(testbed, &writer)
            .await?
            .context("a user with Write on a group was admitted")?;
        eprintln!("invalid spec refused: {status:?}");
        ensure!(
            status.code == 422
                && status.reason == INVALID_SPEC
                && status.message.contains("federatedkafkausers.accord.io")
                && status.message.contains(expected),
            "not refused with {expected:?}: {status:?}"
        );
        let out = kubectl_apply(testbed, &writer, false).await?;
        ensure!(
            !out.status.success() && output_text(&out).contains(expected),
            "kubectl apply of Write on a group was not refused naming the field: {}",
            output_text(&out)
        );
        ensure!(users.get_opt("group-writer").await?.is_none(), "the refused user exists");

        // Audit: admitted, and kubectl prints the warning.
        labelled_namespace(testbed, "wh-user-audit", "user-audit").await?;
        create_policy(
            testbed,
            "wh-user-audit",
            json!({
                "enforcement": "Audit",
                "users": { "allowWildcardResources": true },
                "namespaceSelector": { "matchLabels": { "accord-webhook-test": "user-audit" } },
            }),
        )
        .await?;
        let audited = kafka_user("wh-user-audit", "audited", everything);
        until("the Audit policy warns on a server-side dry run", WAIT, || async {
            let out = kubectl_apply(testbed, &audited, true).await?;
            let text = output_text(&out);
            Ok(if out.status.success() && text.contains("wh-user-audit") {
                Check::Ready(())
            } else {
                Check::NotYet(text)
            })
        })
        .await?;
        let out = kubectl_apply(testbed, &audited, false).await?;
        let text = output_text(&out);
        eprintln!("kubectl apply audited: {text}");
        ensure!(out.status.success(), "the audited user was refused: {text}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            stderr.contains("Warning:")
                && stderr.contains(&format!("KafkaTopicPolicy wh-user-audit {all_rule} [Audit: admitted]")),
            "kubectl printed no warning naming the rule: {text}"
        );
        // The policy's `users` block allows the wildcard: that rule is not even a warning.
        ensure!(!stderr.contains(wildcard_rule), "the allowed wildcard was warned about: {text}");
        let audited_users: Api<FederatedKafkaUser> = Api::namespaced(testbed.mgmt().client(), "wh-user-audit");
        ensure!(audited_users.get_opt("audited").await?.is_some(), "the audited user is missing");

        configs.delete("accord-hub", &Default::default()).await?;
        drop(hub);
        Ok(())
    });
}
