//! Certificate renewal end to end: a real hub issuing short-lived agent certificates
//! (`--agent-cert-validity`), real agents renewing them over their Sync streams (one keeping
//! its identity in a directory, one in a Secret on its member cluster), scale changes that
//! still arrive after the renewals, no failed reconnect, and the first certificate refused
//! by the hub once it has expired. A renewal's reconnect is no departure: both clusters stay
//! `Available` throughout, so no share moves and no return cooldown holds them out.

use accord_common::pki::cert_facts_pem;
use accord_common::runtime::unix_millis;
use accord_crds::{CrossClusterScalePolicy, ManagedCluster};
use accord_e2e::agent_sim::{self, AgentIdentity, AgentStream};
use accord_e2e::fleet::{
    AGENT_NAMESPACE, Fleet, agent_metrics, ensure_namespace, pause_deployment,
};
use accord_e2e::hub::{accord_binary, create_token, parse_metric};
use accord_e2e::ports::free_port;
use accord_e2e::wait::{Check, until};
use accord_e2e::{ProcessId, SharedTestbed, Testbed};
use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use std::process::Command;
use std::time::{Duration, Instant};

static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(2));
/// Field manager of the objects this test applies.
const FM: &str = "accord-e2e-renewal";
/// Name of the identity Secret of the agent that keeps its identity in one.
const IDENTITY_SECRET: &str = "accord-agent-identity";
/// Connection failures the agent counts (`accord_agent_apply_errors_total{category}`): a
/// renewal must cause none of them.
const CONNECT_FAILURES: [&str; 4] = ["dial", "refused", "stream", "identity"];

/// What one run of the scenario asks for.
struct Scenario {
    /// etcd prefix and name stem (tests sharing the testbed stay apart).
    name: &'static str,
    /// `--agent-cert-validity`.
    validity: &'static str,
    /// Successful renewals each agent must have made.
    renewals: f64,
    /// The scenario runs at least this long (scale changes keep arriving meanwhile).
    at_least: Duration,
    /// Deadline of waiting for the renewals.
    renewal_deadline: Duration,
}

/// An agent started by this test with `--identity-secret`; stopped when dropped.
struct SecretAgent<'t> {
    testbed: &'t Testbed,
    id: ProcessId,
    http: String,
}

impl Drop for SecretAgent<'_> {
    fn drop(&mut self) {
        self.testbed.stop_process(self.id);
    }
}

/// Writes `identity` into the identity Secret on member `member` and runs an agent with it.
async fn start_secret_agent<'t>(
    testbed: &'t Testbed,
    member: usize,
    hub: &str,
    identity: &AgentIdentity,
) -> Result<SecretAgent<'t>> {
    let cluster = &testbed.members()[member];
    ensure_namespace(cluster, AGENT_NAMESPACE).await?;
    let secrets: Api<Secret> = Api::namespaced(cluster.client(), AGENT_NAMESPACE);
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": IDENTITY_SECRET, "namespace": AGENT_NAMESPACE},
        "stringData": {
            "hub-url": format!("https://{hub}"),
            "cluster-name": identity.cluster,
            "ca.crt": identity.ca_pem,
            "tls.crt": identity.cert_pem,
            "tls.key": identity.key_pem,
            "tls-server-name": agent_sim::HUB_TLS_NAME,
        },
    });
    secrets
        .patch(
            IDENTITY_SECRET,
            &PatchParams::apply(FM).force(),
            &Patch::Apply(&secret),
        )
        .await?;
    let http = format!("127.0.0.1:{}", free_port()?);
    let mut cmd = Command::new(accord_binary("accord-agent")?);
    cmd.arg("run")
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig_path())
        .args([
            "--identity-secret",
            &format!("{AGENT_NAMESPACE}/{IDENTITY_SECRET}"),
        ])
        .args(["--namespace", AGENT_NAMESPACE, "--http-addr", &http])
        .env("RUST_LOG", "info,accord_agent=debug");
    let id = testbed.spawn(&format!("agent/{}", identity.cluster), cmd)?;
    Ok(SecretAgent { testbed, id, http })
}

/// The value of one labelled sample, e.g. `accord_agent_certificate_renewals_total{result="ok"}`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Fails when an agent counted a failed renewal or a failed (re)connection.
async fn ensure_no_failures(testbed: &Testbed, cluster: &str, http: &str) -> Result<()> {
    let text = agent_metrics(testbed, http).await?;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if line.starts_with("accord_agent_certificate_renewals_total")
            && !line.contains("result=\"ok\"")
        {
            bail!("agent {cluster} counted a failed renewal: {line}");
        }
        for kind in CONNECT_FAILURES {
            if line.starts_with(&format!(
                "accord_agent_apply_errors_total{{category=\"{kind}\"}}"
            )) {
                bail!("agent {cluster} counted a failed connection: {line}");
            }
        }
    }
    Ok(())
}

async fn apply_policy(testbed: &Testbed, ns: &str, name: &str, desired: i32) -> Result<()> {
    let api: Api<CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), ns);
    let policy = serde_json::json!({
        "apiVersion": "accord.io/v1beta1", "kind": "CrossClusterScalePolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "targetRef": {"name": name},
            "desiredReplicas": desired,
            "distribution": [
                {"cluster": format!("{name}-dir"), "weight": 50},
                {"cluster": format!("{name}-secret"), "weight": 50},
            ],
        },
    });
    api.patch(
        name,
        &PatchParams::apply(FM).force(),
        &Patch::Apply(&policy),
    )
    .await?;
    Ok(())
}

/// The `Available` condition of a ManagedCluster: (status, last transition time). A
/// renewal's reconnect must leave it alone (no failover, no return cooldown).
async fn availability(testbed: &Testbed, cluster: &str) -> Result<(String, String)> {
    let api: Api<ManagedCluster> = Api::all(testbed.mgmt().client());
    let status = api
        .get(cluster)
        .await?
        .status
        .with_context(|| format!("ManagedCluster {cluster} has no status"))?;
    let available = accord_crds::conditions::find(&status.conditions, "Available")
        .with_context(|| format!("ManagedCluster {cluster} has no Available condition"))?;
    Ok((
        available.status.clone(),
        format!("{:?}", available.last_transition_time),
    ))
}

/// Waits until both members' Deployments have `each` replicas.
async fn wait_replicas(testbed: &Testbed, ns: &str, name: &str, each: i32) -> Result<()> {
    until(
        &format!("{ns}/{name} at {each} replicas on both members"),
        Duration::from_secs(60),
        || async {
            let mut seen = Vec::new();
            for member in testbed.members() {
                let api: Api<Deployment> = Api::namespaced(member.client(), ns);
                let replicas = api
                    .get_opt(name)
                    .await?
                    .and_then(|d| d.spec)
                    .and_then(|s| s.replicas);
                seen.push(replicas);
            }
            Ok(if seen.iter().all(|r| *r == Some(each)) {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{seen:?}"))
            })
        },
    )
    .await
}

/// The hub refuses a stream opened with `identity`: the TLS handshake, the call or its
/// first answer fails.
async fn ensure_refused(hub: &str, identity: &AgentIdentity) -> Result<String> {
    let channel = match agent_sim::connect(hub, identity).await {
        Ok(c) => c,
        Err(e) => return Ok(format!("dial: {e:#}")),
    };
    let mut stream = match AgentStream::open(channel, &identity.cluster).await {
        Ok(s) => s,
        Err(status) => return Ok(format!("open: {status}")),
    };
    match tokio::time::timeout(Duration::from_secs(20), stream.next()).await {
        Ok(Some(Err(status))) => Ok(format!("first answer: {status}")),
        Ok(None) => Ok("stream closed without an answer".into()),
        Ok(Some(Ok(message))) => {
            bail!("the hub accepted the expired certificate and answered {message:?}")
        }
        Err(_) => bail!("the hub neither answered nor refused the expired certificate"),
    }
}

async fn run(testbed: &Testbed, s: Scenario) -> Result<()> {
    // Built before the first certificate is issued: building the agent after registering
    // would let a 15 s certificate expire before the agent first connects.
    accord_binary("accord-hub")?;
    accord_binary("accord-agent")?;
    let started = Instant::now();
    let prefix = format!("/e2e-{}/", s.name);
    let (dir_cluster, secret_cluster) = (format!("{}-dir", s.name), format!("{}-secret", s.name));
    let mut fed = Fleet::start(
        testbed,
        &format!("hub-{}", s.name),
        &prefix,
        &["--agent-cert-validity", s.validity],
        &[(dir_cluster.as_str(), 0)],
    )
    .await?;
    let dir_agent = &fed.agents[&dir_cluster];
    let dir_http = dir_agent.http.clone();
    let identity_dir = dir_agent.identity_dir.clone();
    // The certificate the hub issued at registration, to dial with once it expired.
    let first = AgentIdentity {
        cluster: dir_cluster.clone(),
        cert_pem: std::fs::read_to_string(identity_dir.join("tls.crt"))?,
        key_pem: std::fs::read_to_string(identity_dir.join("tls.key"))?,
        ca_pem: std::fs::read_to_string(identity_dir.join("ca.crt"))?,
    };
    let first_not_after = cert_facts_pem(&first.cert_pem)?.validity.not_after_unix;

    let (token, hash) = create_token(testbed, &prefix, "10m").await?;
    let secret_identity = agent_sim::register(&fed.hub.grpc, &token, &hash, &secret_cluster, true)
        .await
        .map_err(|e| anyhow::anyhow!("registering {secret_cluster}: {e}"))?;
    let secret_agent = start_secret_agent(testbed, 1, &fed.hub.grpc, &secret_identity).await?;

    let ns = format!("{}-ns", s.name);
    for member in testbed.members() {
        ensure_namespace(member, &ns).await?;
        let api: Api<Deployment> = Api::namespaced(member.client(), &ns);
        api.patch(
            s.name,
            &PatchParams::apply(FM).force(),
            &Patch::Apply(&pause_deployment(s.name, 1)),
        )
        .await?;
    }
    ensure_namespace(testbed.mgmt(), &ns).await?;
    apply_policy(testbed, &ns, s.name, 4).await?;
    wait_replicas(testbed, &ns, s.name, 2).await?;
    let mut available = Vec::new();
    for cluster in [&dir_cluster, &secret_cluster] {
        let seen = availability(testbed, cluster).await?;
        ensure!(seen.0 == "True", "{cluster} is not Available: {seen:?}");
        available.push((cluster, seen));
    }

    // Renewals, observed in the agents' metrics and in where they keep their identity.
    let agents = [
        (dir_cluster.as_str(), dir_http.as_str()),
        (secret_cluster.as_str(), secret_agent.http.as_str()),
    ];
    for (cluster, http) in agents {
        until(
            &format!("{} renewals by {cluster}", s.renewals),
            s.renewal_deadline,
            || async {
                let text = agent_metrics(testbed, http).await.unwrap_or_default();
                let ok = sample(
                    &text,
                    "accord_agent_certificate_renewals_total{result=\"ok\"}",
                )
                .unwrap_or(0.0);
                Ok(if ok >= s.renewals {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("{ok} renewals"))
                })
            },
        )
        .await?;
        ensure_no_failures(testbed, cluster, http).await?;
    }
    let stored = std::fs::read_to_string(identity_dir.join("tls.crt"))?;
    ensure!(
        stored != first.cert_pem,
        "the identity directory still holds the first certificate"
    );
    let secrets: Api<Secret> = Api::namespaced(testbed.members()[1].client(), AGENT_NAMESPACE);
    let in_secret = secrets
        .get(IDENTITY_SECRET)
        .await?
        .data
        .and_then(|d| d.get("tls.crt").cloned())
        .context("the identity Secret has no tls.crt")?;
    ensure!(
        in_secret.0 != secret_identity.cert_pem.as_bytes(),
        "the identity Secret still holds the first certificate"
    );
    let hub_renewals = fed
        .hub
        .metric(testbed.http(), "accord_hub_certificate_renewals_total")
        .await?
        .unwrap_or(0.0);
    ensure!(
        hub_renewals >= 2.0 * s.renewals,
        "the hub counted {hub_renewals} renewals"
    );

    // Changes keep arriving, over streams opened with renewed certificates, for as long as
    // the scenario runs.
    let mut desired = 4;
    loop {
        desired = if desired == 4 { 6 } else { 4 };
        apply_policy(testbed, &ns, s.name, desired).await?;
        wait_replicas(testbed, &ns, s.name, desired / 2).await?;
        for (cluster, http) in agents {
            ensure_no_failures(testbed, cluster, http).await?;
        }
        if started.elapsed() >= s.at_least {
            break;
        }
        // Wait for the next renewal before the next change, so changes and renewals
        // interleave.
        let now = sample(
            &agent_metrics(testbed, &dir_http).await?,
            "accord_agent_certificate_renewals_total{result=\"ok\"}",
        )
        .unwrap_or(0.0);
        until("the next renewal", s.renewal_deadline, || async {
            let text = agent_metrics(testbed, &dir_http).await.unwrap_or_default();
            let ok = sample(
                &text,
                "accord_agent_certificate_renewals_total{result=\"ok\"}",
            )
            .unwrap_or(0.0);
            Ok(if ok > now {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{ok} renewals"))
            })
        })
        .await?;
    }

    // Every renewal's reconnect kept its cluster Available: no transition since the start.
    for (cluster, before) in &available {
        let now = availability(testbed, cluster).await?;
        ensure!(
            &now == before,
            "{cluster}'s availability changed during the renewals: {before:?} → {now:?}"
        );
    }

    // The first certificate, once expired, is refused.
    until(
        "the first certificate to expire",
        Duration::from_secs(120),
        || async {
            let now = unix_millis() / 1000;
            Ok(if now > first_not_after {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{}s left", first_not_after - now))
            })
        },
    )
    .await?;
    let refusal = ensure_refused(&fed.hub.grpc, &first).await?;
    eprintln!("the expired first certificate was refused ({refusal})");
    for (cluster, http) in agents {
        ensure_no_failures(testbed, cluster, http).await?;
    }
    let metrics = agent_metrics(testbed, &dir_http).await?;
    ensure!(
        parse_metric(
            &metrics,
            "accord_agent_certificate_expiry_timestamp_seconds"
        )
        .is_some_and(|t| t as i64 > first_not_after),
        "the expiry gauge does not show a renewed certificate"
    );
    drop(secret_agent);
    fed.kill_agent(&dir_cluster)?;
    Ok(())
}

#[test]
fn agents_renew_short_lived_certificates_and_keep_applying_changes() {
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        run(
            testbed,
            Scenario {
                name: "renew15",
                validity: "15s",
                renewals: 2.0,
                at_least: Duration::ZERO,
                renewal_deadline: Duration::from_secs(90),
            },
        )
        .await
    });
}

#[test]
#[ignore = "fault suite: run by e2e/faults.sh"]
fn sixty_second_certificates_renew_for_five_minutes_without_a_failed_reconnect() {
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        run(
            testbed,
            Scenario {
                name: "renew60",
                validity: "60s",
                renewals: 4.0,
                at_least: Duration::from_secs(5 * 60),
                renewal_deadline: Duration::from_secs(180),
            },
        )
        .await
    });
}

#[test]
fn the_hub_signs_a_renewal_for_the_streams_cluster_and_ends_the_stream_on_a_bad_csr() {
    use accord_e2e::hub::{HubOptions, HubProcess};
    use accord_proto::v1::{RenewCertificate, agent_message, hub_message};
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let prefix = "/e2e-renew-sim/";
        let hub = HubProcess::start(
            testbed,
            &HubOptions {
                replica: "hub-renew-sim".into(),
                etcd_prefix: prefix.into(),
                extra_args: vec!["--agent-cert-validity".into(), "10m".into()],
            },
        )
        .await?;
        let (token, hash) = create_token(testbed, prefix, "10m").await?;
        let first = agent_sim::register(&hub.grpc, &token, &hash, "renew-sim", true)
            .await
            .map_err(|e| anyhow::anyhow!("registering: {e}"))?;

        // A CSR asking for another cluster still gets a certificate for the stream's own.
        let mut stream =
            AgentStream::open(agent_sim::connect(&hub.grpc, &first).await?, "renew-sim").await?;
        let csr = accord_common::pki::agent_csr("someone-else")?;
        stream
            .send_as(
                "renew-sim",
                agent_message::Body::Renew(RenewCertificate {
                    csr_pem: csr.csr_pem,
                }),
            )
            .await?;
        let renewed = loop {
            match tokio::time::timeout(Duration::from_secs(30), stream.next()).await? {
                Some(Ok(m)) => match m.body {
                    Some(hub_message::Body::Renewed(r)) => break r,
                    _ => continue,
                },
                Some(Err(status)) => bail!("the hub refused the renewal: {status}"),
                None => bail!("the stream ended without an answer"),
            }
        };
        let leaf = rustls_pem_first(&renewed.certificate_pem)?;
        let named = accord_common::pki::peer_identity(&leaf)?;
        ensure!(
            named.cluster == "renew-sim",
            "issued for {:?}",
            named.cluster
        );
        ensure!(
            renewed.not_after_unix > unix_millis() / 1000 + 500,
            "{}",
            renewed.not_after_unix
        );
        drop(stream);

        // The renewed certificate opens a stream.
        let second = AgentIdentity {
            cluster: "renew-sim".into(),
            cert_pem: renewed.certificate_pem.clone(),
            key_pem: csr.key_pem,
            ca_pem: first.ca_pem.clone(),
        };
        let mut stream =
            AgentStream::open(agent_sim::connect(&hub.grpc, &second).await?, "renew-sim").await?;
        match tokio::time::timeout(Duration::from_secs(30), stream.next()).await? {
            Some(Ok(_)) => {}
            other => bail!("the renewed certificate was not served: {other:?}"),
        }

        // A CSR that is not one ends the stream with INVALID_ARGUMENT.
        stream
            .send_as(
                "renew-sim",
                agent_message::Body::Renew(RenewCertificate {
                    csr_pem: "not a CSR".into(),
                }),
            )
            .await?;
        let code = stream.ended(Duration::from_secs(30)).await?;
        ensure!(code == Some(tonic::Code::InvalidArgument), "{code:?}");
        let counted = hub
            .metric(testbed.http(), "accord_hub_certificate_renewals_total")
            .await?
            .unwrap_or(0.0);
        ensure!(counted == 2.0, "the hub counted {counted} renewals");
        Ok(())
    });
}

/// The DER of the first certificate in a PEM bundle.
fn rustls_pem_first(pem: &str) -> Result<Vec<u8>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let der = CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .context("no certificate in the answer")??;
    Ok(der.to_vec())
}
