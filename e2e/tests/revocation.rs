//! Revocation end to end: two real `accord-hub serve` replicas on one etcd prefix, agents
//! joining through the real token flow and holding real mTLS streams to both replicas.
//!
//! `accord-hub cluster revoke`, deleting the ManagedCluster, and a `--force`
//! re-registration each end the old identity's streams on every replica within a second
//! (the times are printed) and the old certificate is refused at its next connect. Bad
//! tokens are limited per source address and counted.

use accord_common::pki::{agent_csr, client_tls_config};
use accord_crds::ManagedCluster;
use accord_e2e::SharedTestbed;
use accord_e2e::Testbed;
use accord_e2e::agent_sim::{self, AgentIdentity, AgentStream, HUB_TLS_NAME, policy};
use accord_e2e::hub::{HUB_NAMESPACE, HubOptions, HubProcess, accord_binary, create_token};
use accord_e2e::wait::{Check, until};
use accord_proto::v1::registration_client::RegistrationClient;
use accord_proto::v1::{PlacementState, RegisterRequest, StatusReport, hub_message};
use anyhow::{Context as _, Result, bail, ensure};
use kube::Api;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tonic::Code;
use tonic::transport::Endpoint;

static TESTBED: SharedTestbed =
    SharedTestbed::new(|b| b.members(0).without_mgmt_controller_manager());
/// One hub pair at a time: every hub's leader writes the status of every ManagedCluster on
/// the management cluster, as the one hub of a real deployment does.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The bound the issue sets: a revoked identity's streams end on every replica within it.
const REVOCATION_BOUND: Duration = Duration::from_secs(1);
/// Heartbeats of the simulated agents (the hub's default timeout is 3 s).
const HEARTBEAT: Duration = Duration::from_millis(500);
/// Deadline for things that take a few round trips (joins, leader work).
const WAIT: Duration = Duration::from_secs(30);

fn opts(replica: &str, prefix: &str) -> HubOptions {
    HubOptions {
        replica: replica.into(),
        etcd_prefix: prefix.into(),
        extra_args: Vec::new(),
    }
}

/// Two replicas on one prefix.
async fn two_hubs<'t>(
    testbed: &'t Testbed,
    prefix: &str,
) -> Result<(HubProcess<'t>, HubProcess<'t>)> {
    let a = HubProcess::start(testbed, &opts("hub-a", prefix)).await?;
    let b = HubProcess::start(testbed, &opts("hub-b", prefix)).await?;
    Ok((a, b))
}

async fn join(
    testbed: &Testbed,
    hub: &HubProcess<'_>,
    prefix: &str,
    cluster: &str,
    force: bool,
) -> Result<AgentIdentity> {
    let (token, hash) = create_token(testbed, prefix, "10m").await?;
    Ok(agent_sim::register(&hub.grpc, &token, &hash, cluster, force).await?)
}

/// A heartbeating stream of `identity` to `hub`.
async fn stream(hub: &HubProcess<'_>, identity: &AgentIdentity) -> Result<AgentStream> {
    let channel = agent_sim::connect(&hub.grpc, identity).await?;
    let mut stream = AgentStream::open(channel, &identity.cluster).await?;
    // The first message is the full set of assignments: the hub has registered the stream.
    match stream.next().await {
        Some(Ok(m)) if matches!(m.body, Some(hub_message::Body::Assignments(_))) => {}
        other => bail!(
            "{} to {}: expected Assignments, got {other:?}",
            identity.cluster,
            hub.replica
        ),
    }
    stream.spawn_heartbeats(HEARTBEAT);
    Ok(stream)
}

/// How a watched stream ended and when.
type Ending = JoinHandle<Result<(Option<Code>, Instant)>>;

/// Watches `stream` until the hub ends it (within `WAIT`).
fn watch_end(mut stream: AgentStream) -> Ending {
    tokio::spawn(async move {
        let code = stream.ended(WAIT).await?;
        Ok((code, Instant::now()))
    })
}

/// Waits for every watched stream to end with PERMISSION_DENIED; returns the latest end
/// measured from `since` (taken just before the revocation was issued, so the time is an
/// upper bound of the time from the registry write).
async fn all_denied(
    what: &str,
    endings: Vec<(String, Ending)>,
    since: Instant,
) -> Result<Duration> {
    let mut latest = Duration::ZERO;
    for (name, ending) in endings {
        let (code, at) = ending.await??;
        ensure!(
            code == Some(Code::PermissionDenied),
            "{what}: the stream to {name} ended with {code:?}, not PERMISSION_DENIED"
        );
        let took = at.saturating_duration_since(since);
        println!("{what}: stream to {name} ended {took:?} after the revocation was issued");
        latest = latest.max(took);
    }
    Ok(latest)
}

/// The certificate is refused at the door of `hub`.
async fn refused(hub: &HubProcess<'_>, identity: &AgentIdentity) -> Result<()> {
    let channel = agent_sim::connect(&hub.grpc, identity).await?;
    match AgentStream::open(channel, &identity.cluster).await {
        Err(status) if status.code() == Code::PermissionDenied => Ok(()),
        Err(status) => bail!(
            "{}: refused with {status:?}, not PERMISSION_DENIED",
            hub.replica
        ),
        Ok(mut stream) => match stream.next().await {
            Some(Err(status)) if status.code() == Code::PermissionDenied => Ok(()),
            other => bail!(
                "{}: the revoked certificate opened a stream: {other:?}",
                hub.replica
            ),
        },
    }
}

/// A report on `stream` is answered: the stream is alive and still speaks for its cluster.
async fn answers(stream: &mut AgentStream, applied: i64) -> Result<()> {
    stream
        .report(StatusReport {
            placed: Some(policy("CrossClusterScalePolicy", "default", "web")),
            resource_version: applied.to_string(),
            generation: 1,
            state: PlacementState::Synced as i32,
            applied_revision: applied,
            ..Default::default()
        })
        .await?;
    tokio::time::timeout(WAIT, async {
        loop {
            match stream.next().await {
                Some(Ok(m)) => {
                    // Accepted or a version conflict: either way the hub took the report
                    // as this cluster's.
                    if let Some(hub_message::Body::StatusAck(ack)) = m.body {
                        ensure!(ack.result.is_some(), "{ack:?}");
                        return Ok(());
                    }
                }
                other => bail!("{}: the stream ended: {other:?}", stream.cluster),
            }
        }
    })
    .await
    .context("no answer to a report")?
}

/// The ManagedCluster `name` as it is now.
async fn managed_cluster(testbed: &Testbed, name: &str) -> Result<Option<ManagedCluster>> {
    let api: Api<ManagedCluster> = Api::all(testbed.mgmt().client());
    Ok(api.get_opt(name).await?)
}

/// Waits until the ManagedCluster `name` exists with the registration finalizer.
async fn has_finalizer(testbed: &Testbed, name: &str) -> Result<()> {
    until(
        &format!("ManagedCluster {name} with its finalizer"),
        WAIT,
        || async {
            let finalizers = managed_cluster(testbed, name)
                .await?
                .and_then(|mc| mc.metadata.finalizers)
                .unwrap_or_default();
            Ok(
                if finalizers
                    .iter()
                    .any(|f| f == "accord.io/cluster-registration")
                {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("finalizers {finalizers:?}"))
                },
            )
        },
    )
    .await
}

/// Waits until the ManagedCluster `name` is gone.
async fn gone(testbed: &Testbed, name: &str) -> Result<()> {
    until(&format!("ManagedCluster {name} gone"), WAIT, || async {
        Ok(match managed_cluster(testbed, name).await? {
            None => Check::Ready(()),
            Some(mc) => Check::NotYet(format!(
                "still there (deletionTimestamp {:?}, finalizers {:?})",
                mc.metadata.deletion_timestamp, mc.metadata.finalizers
            )),
        })
    })
    .await
}

/// `accord-hub cluster revoke NAME` against the hubs' store, with the management
/// kubeconfig; returns what it printed.
async fn revoke_command(testbed: &Testbed, prefix: &str, cluster: &str) -> Result<String> {
    let out = tokio::process::Command::new(accord_binary("accord-hub")?)
        .args(["cluster", "revoke", cluster])
        .arg("--kubeconfig")
        .arg(testbed.mgmt().kubeconfig_path())
        .args(testbed.hub_etcd().hub_args())
        .args(["--etcd-prefix", prefix, "--namespace", HUB_NAMESPACE])
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure!(
        out.status.success(),
        "cluster revoke failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(stdout)
}

/// The value of `name{label}` in `hub`'s `/metrics` (0 when absent).
async fn labelled_metric(
    testbed: &Testbed,
    hub: &HubProcess<'_>,
    name: &str,
    label: &str,
) -> Result<f64> {
    let text = testbed
        .http()
        .get(format!("{}/metrics", hub.http))
        .send()
        .await?
        .text()
        .await?;
    let series = format!("{name}{{{label}}} ");
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0))
}

#[test]
fn cluster_revoke_ends_the_streams_on_every_replica_within_a_second_and_refuses_the_certificate() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let prefix = "/t-revoke-cmd/";
        let (a, b) = two_hubs(testbed, prefix).await?;
        let revoked = join(testbed, &a, prefix, "rv-cmd-gone", false).await?;
        let kept = join(testbed, &b, prefix, "rv-cmd-kept", false).await?;
        has_finalizer(testbed, "rv-cmd-gone").await?;
        // The revoked cluster holds a stream on each replica (an agent and its reconnect
        // racing, or two agent replicas); the kept one too.
        let endings = vec![
            ("hub-a".to_owned(), watch_end(stream(&a, &revoked).await?)),
            ("hub-b".to_owned(), watch_end(stream(&b, &revoked).await?)),
        ];
        let mut kept_a = stream(&a, &kept).await?;
        let mut kept_b = stream(&b, &kept).await?;

        let started = Instant::now();
        let printed = revoke_command(testbed, prefix, "rv-cmd-gone").await?;
        let written = Instant::now();
        println!("cluster revoke took {:?}:\n{printed}", written - started);
        ensure!(printed.contains("\"rv-cmd-gone\" revoked"), "{printed}");
        ensure!(
            printed.contains("ManagedCluster \"rv-cmd-gone\" deleted"),
            "{printed}"
        );

        let latest = all_denied("cluster revoke", endings, started).await?;
        println!(
            "cluster revoke: every stream ended within {latest:?} (bound {REVOCATION_BOUND:?})"
        );
        ensure!(
            latest <= REVOCATION_BOUND,
            "a stream outlived the revocation by {latest:?}"
        );
        refused(&a, &revoked).await?;
        refused(&b, &revoked).await?;
        // The other cluster's streams were not touched.
        answers(&mut kept_a, 1).await?;
        answers(&mut kept_b, 2).await?;
        // The ManagedCluster went (its finalizer let it) and is not recreated.
        gone(testbed, "rv-cmd-gone").await?;
        for hub in [&a, &b] {
            let ended = labelled_metric(
                testbed,
                hub,
                "accord_hub_revoked_streams_total",
                "reason=\"revoked\"",
            )
            .await?;
            ensure!(ended == 1.0, "{}: revoked_streams {ended}", hub.replica);
        }
        // Revoking it again says there is nothing left.
        let out = tokio::process::Command::new(accord_binary("accord-hub")?)
            .args(["cluster", "revoke", "rv-cmd-gone"])
            .arg("--kubeconfig")
            .arg(testbed.mgmt().kubeconfig_path())
            .args(testbed.hub_etcd().hub_args())
            .args(["--etcd-prefix", prefix])
            .output()
            .await?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(!out.status.success(), "a second revoke succeeded");
        ensure!(stderr.contains("not known to this hub"), "{stderr}");
        ensure!(managed_cluster(testbed, "rv-cmd-gone").await?.is_none());
        Ok(())
    });
}

#[test]
fn deleting_the_managed_cluster_revokes_it_on_every_replica_and_the_object_goes_away() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let prefix = "/t-revoke-delete/";
        let (a, b) = two_hubs(testbed, prefix).await?;
        let revoked = join(testbed, &a, prefix, "rv-del-gone", false).await?;
        has_finalizer(testbed, "rv-del-gone").await?;
        let endings = vec![
            ("hub-a".to_owned(), watch_end(stream(&a, &revoked).await?)),
            ("hub-b".to_owned(), watch_end(stream(&b, &revoked).await?)),
        ];

        let api: Api<ManagedCluster> = Api::all(testbed.mgmt().client());
        let deleting = Instant::now();
        api.delete("rv-del-gone", &Default::default()).await?;
        let latest = all_denied("ManagedCluster deletion", endings, deleting).await?;
        println!(
            "ManagedCluster deletion: every stream ended within {latest:?} of the delete call \
             (bound {REVOCATION_BOUND:?})"
        );
        ensure!(
            latest <= REVOCATION_BOUND,
            "a stream outlived the deletion by {latest:?}"
        );
        gone(testbed, "rv-del-gone").await?;
        refused(&a, &revoked).await?;
        refused(&b, &revoked).await?;
        // The leader did not bring the object back for the revoked cluster: a cluster that
        // joins afterwards gets its object, and the revoked one's is still gone.
        join(testbed, &b, prefix, "rv-del-later", false).await?;
        has_finalizer(testbed, "rv-del-later").await?;
        ensure!(
            managed_cluster(testbed, "rv-del-gone").await?.is_none(),
            "the revoked cluster's ManagedCluster came back"
        );
        Ok(())
    });
}

#[test]
fn a_forced_registration_ends_the_old_identitys_stream_on_the_other_replica() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let prefix = "/t-revoke-force/";
        let (a, b) = two_hubs(testbed, prefix).await?;
        let old = join(testbed, &a, prefix, "rv-force", false).await?;
        // The old identity is connected to replica B only.
        let ending = vec![("hub-b".to_owned(), watch_end(stream(&b, &old).await?))];

        // A new identity for the name, registered through replica A.
        // The token is made first, so the time measured is the registration's.
        let (token, hash) = create_token(testbed, prefix, "10m").await?;
        let started = Instant::now();
        let new = agent_sim::register(&a.grpc, &token, &hash, "rv-force", true).await?;
        println!("--force registration took {:?}", started.elapsed());
        let latest = all_denied("--force re-registration", ending, started).await?;
        ensure!(
            latest <= REVOCATION_BOUND,
            "the replaced stream outlived the re-registration by {latest:?}"
        );
        refused(&a, &old).await?;
        refused(&b, &old).await?;
        // The new identity connects to either replica and stays.
        let mut on_b = stream(&b, &new).await?;
        answers(&mut on_b, 1).await?;
        let ended = labelled_metric(
            testbed,
            &b,
            "accord_hub_revoked_streams_total",
            "reason=\"replaced\"",
        )
        .await?;
        ensure!(ended == 1.0, "hub-b: replaced streams {ended}");
        Ok(())
    });
}

/// Registers `cluster` with `token` straight through `Registration.Register`, from
/// `source` (a loopback address of the caller's choosing).
async fn register_from(
    hub: &HubProcess<'_>,
    ca_pem: &str,
    source: Ipv4Addr,
    token: &str,
    cluster: &str,
) -> std::result::Result<(), tonic::Status> {
    let channel = Endpoint::from_shared(format!("https://{}", hub.grpc))
        .map_err(|e| tonic::Status::internal(e.to_string()))?
        .tls_config(client_tls_config(ca_pem, None, HUB_TLS_NAME))
        .map_err(|e| tonic::Status::internal(e.to_string()))?
        .local_address(Some(IpAddr::V4(source)))
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let csr = agent_csr(cluster).map_err(|e| tonic::Status::internal(e.to_string()))?;
    RegistrationClient::new(channel)
        .register(RegisterRequest {
            token: token.to_owned(),
            cluster_name: cluster.to_owned(),
            csr_pem: csr.csr_pem,
            ..Default::default()
        })
        .await
        .map(drop)
}

#[test]
fn ten_bad_tokens_from_one_address_are_rate_limited_and_counted_and_other_addresses_are_not() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let prefix = "/t-revoke-limit/";
        let hub = HubProcess::start(testbed, &opts("hub-a", prefix)).await?;
        let first = join(testbed, &hub, prefix, "rv-limit-ok", false).await?;
        let home = Ipv4Addr::LOCALHOST;

        let mut codes = Vec::new();
        for i in 0..10 {
            let bad = format!("abcdef.{i:016}");
            let code = match register_from(&hub, &first.ca_pem, home, &bad, "rv-limit-bad").await {
                Ok(()) => bail!("a made-up token registered"),
                Err(status) => status.code(),
            };
            codes.push(code);
        }
        println!("10 bad tokens from {home}: {codes:?}");
        let expected: Vec<Code> = [Code::Unauthenticated; 5]
            .into_iter()
            .chain([Code::ResourceExhausted; 5])
            .collect();
        ensure!(codes == expected, "{codes:?}");

        // While limited, even a good token from that address is refused unread (and stays
        // unused) ...
        let (token, _) = create_token(testbed, prefix, "10m").await?;
        let limited = register_from(&hub, &first.ca_pem, home, &token, "rv-limit-good")
            .await
            .expect_err("a limited address registered");
        ensure!(limited.code() == Code::ResourceExhausted, "{limited:?}");
        ensure!(limited.message().contains("try again in"), "{limited:?}");
        // ... and another address is not limited: it registers with that same token.
        register_from(&hub, &first.ca_pem, Ipv4Addr::new(127, 0, 0, 2), &token, "rv-limit-good")
            .await
            .context("registering from another address")?;

        let metric = "accord_hub_registrations_total";
        let count = |result: &'static str| {
            let hub = &hub;
            async move { labelled_metric(testbed, hub, metric, &format!("result=\"{result}\"")).await }
        };
        let (ok, bad, limited) = (count("ok").await?, count("bad_token").await?, count("rate_limited").await?);
        println!("{metric}: ok {ok}, bad_token {bad}, rate_limited {limited}");
        ensure!((ok, bad, limited) == (2.0, 5.0, 6.0), "ok {ok}, bad_token {bad}, rate_limited {limited}");
        Ok(())
    });
}
