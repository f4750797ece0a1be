//! The hub core end to end: real `accord-hub serve` processes against a real etcd and a real
//! management kube-apiserver, with agents joining through the real token flow and holding
//! real mTLS streams.

use accord_crds::ManagedCluster;
use accord_crds::conditions;
use accord_e2e::agent_sim::{self, AgentStream, policy};
use accord_e2e::faultproxy::{FaultProxy, Mode};
use accord_e2e::hub::{HubOptions, HubProcess, create_token};
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use accord_hub::store::election::Fence;
use accord_hub::store::{Keyspace, Store, StoreError};
use accord_proto::v1::{StatusReport, agent_message, hub_message, status_ack};
use anyhow::{Context as _, Result, bail, ensure};
use kube::Api;
use std::time::{Duration, Instant};

static TESTBED: SharedTestbed =
    SharedTestbed::new(|b| b.members(0).without_mgmt_controller_manager());
/// One hub (or one pair) at a time: every hub's leader writes the status of every
/// ManagedCluster on the management cluster, as the one hub of a real deployment does.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn opts(replica: &str, prefix: &str, extra: &[&str]) -> HubOptions {
    HubOptions {
        replica: replica.into(),
        etcd_prefix: prefix.into(),
        extra_args: extra.iter().map(|s| s.to_string()).collect(),
    }
}

/// Waits until the ManagedCluster's condition `type_` has `status`.
async fn wait_condition(
    testbed: &Testbed,
    cluster: &str,
    type_: &str,
    status: &str,
    timeout: Duration,
) -> Result<Duration> {
    let api: Api<ManagedCluster> = Api::all(testbed.mgmt().client());
    let started = Instant::now();
    until(&format!("{cluster} {type_}={status}"), timeout, || {
        let api = api.clone();
        async move {
            let mc = api.get_opt(cluster).await?;
            let seen = mc
                .as_ref()
                .and_then(|m| m.status.as_ref())
                .and_then(|s| conditions::find(&s.conditions, type_))
                .map(|c| c.status.clone());
            Ok(if seen.as_deref() == Some(status) {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{type_} is {seen:?}"))
            })
        }
    })
    .await?;
    Ok(started.elapsed())
}

/// Waits until `hub` reports itself leader.
async fn leads(testbed: &Testbed, hub: &HubProcess<'_>, timeout: Duration) -> Result<()> {
    until(&format!("{} leads", hub.replica), timeout, || async {
        let l = hub
            .metric(testbed.http(), "accord_hub_is_leader")
            .await?
            .unwrap_or(0.0);
        Ok(if l == 1.0 {
            Check::Ready(())
        } else {
            Check::NotYet("not yet".into())
        })
    })
    .await
}

/// Waits until exactly one of `a` and `b` leads; returns (leader, follower).
async fn leader_and_follower<'h, 't>(
    testbed: &Testbed,
    a: &'h HubProcess<'t>,
    b: &'h HubProcess<'t>,
) -> Result<(&'h HubProcess<'t>, &'h HubProcess<'t>)> {
    let http = testbed.http();
    let a_leads = until("exactly one leader", Duration::from_secs(30), || async {
        let la = a.metric(http, "accord_hub_is_leader").await?.unwrap_or(0.0);
        let lb = b.metric(http, "accord_hub_is_leader").await?.unwrap_or(0.0);
        Ok(match (la as i64, lb as i64) {
            (1, 0) => Check::Ready(true),
            (0, 1) => Check::Ready(false),
            other => Check::NotYet(format!("is_leader = {other:?}")),
        })
    })
    .await?;
    Ok(if a_leads { (a, b) } else { (b, a) })
}

async fn join(
    testbed: &Testbed,
    hub: &HubProcess<'_>,
    prefix: &str,
    cluster: &str,
) -> Result<agent_sim::AgentIdentity> {
    let (token, hash) = create_token(testbed, prefix, "10m").await?;
    Ok(agent_sim::register(&hub.grpc, &token, &hash, cluster, false).await?)
}

#[test]
fn exactly_one_hub_leads_and_a_killed_leader_is_replaced_within_the_election_ttl() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let prefix = "/t-election/";
        let a =
            HubProcess::start(testbed, &opts("hub-a", prefix, &["--election-ttl", "2s"])).await?;
        let b =
            HubProcess::start(testbed, &opts("hub-b", prefix, &["--election-ttl", "2s"])).await?;
        let (old, survivor) = leader_and_follower(testbed, &a, &b).await?;

        // The old leader's fence, read from etcd before it dies.
        let store = Store::from_client(testbed.hub_etcd_client().await?, Keyspace::new(prefix));
        let leader_kv = store
            .backend()
            .leader(store.keys().election().into_bytes())
            .await?
            .context("no election key")?;
        let old_fence = Fence {
            key: leader_kv.key().to_vec(),
            revision: leader_kv.create_revision(),
            lease: leader_kv.lease(),
        };

        let pid = testbed
            .processes()
            .into_iter()
            .find(|p| p.name == format!("hub/{}", old.replica))
            .context("leader process")?
            .pid;
        let killed_at = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::SIGKILL,
        )?;
        leads(testbed, survivor, Duration::from_secs(2 + 3)).await?;
        println!(
            "failover after kill -9: {:?} (election TTL 2s)",
            killed_at.elapsed()
        );

        match store
            .fenced_put(
                &old_fence,
                &store.keys().autoscale("t", "fenced"),
                b"x".to_vec(),
            )
            .await
        {
            Err(StoreError::Fenced) => {}
            other => {
                bail!("a write with the deposed leader's fence must fail as Fenced, got {other:?}")
            }
        }
        Ok(())
    });
}

#[test]
fn a_leader_stopped_with_sigterm_hands_over_at_once_and_exits_despite_open_streams() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let prefix = "/t-sigterm/";
        // A TTL far longer than the waits below: only a resignation can explain a handover.
        let ttl = ["--election-ttl", "60s"];
        let a = HubProcess::start(testbed, &opts("hub-ta", prefix, &ttl)).await?;
        let b = HubProcess::start(testbed, &opts("hub-tb", prefix, &ttl)).await?;
        let (old, survivor) = leader_and_follower(testbed, &a, &b).await?;

        // An agent holding a stream to the replica about to stop.
        let identity = join(testbed, old, prefix, "sigterm-agent").await?;
        let mut stream = AgentStream::open(
            agent_sim::connect(&old.grpc, &identity).await?,
            "sigterm-agent",
        )
        .await?;
        let _heartbeats = stream.spawn_heartbeats(Duration::from_millis(500));

        let pid = testbed.process_info(old.id).pid;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::SIGTERM,
        )?;
        let stopped_at = Instant::now();
        leads(testbed, survivor, Duration::from_secs(15)).await?;
        let handover = stopped_at.elapsed();
        // The open stream ends with UNAVAILABLE, so the agent knows to reconnect.
        let ended = stream.ended(Duration::from_secs(15)).await?;
        ensure!(
            matches!(ended, Some(tonic::Code::Unavailable) | None),
            "the stream ended with {ended:?}"
        );
        until("the stopped hub exits", Duration::from_secs(15), || async {
            Ok(match testbed.ensure_running(old.id) {
                Err(_) => Check::Ready(()),
                Ok(()) => Check::NotYet("still running".into()),
            })
        })
        .await?;
        println!(
            "handover after SIGTERM: {handover:?}, exit after {:?} (election TTL 60s)",
            stopped_at.elapsed()
        );
        Ok(())
    });
}

/// An etcd of the test's own on fixed ports, so it can be stopped and started again.
fn own_etcd(
    testbed: &Testbed,
    dir: &std::path::Path,
    client: u16,
    peer: u16,
) -> Result<accord_e2e::ProcessId> {
    let command = accord_e2e::etcd::command(testbed.binaries(), "own", dir, client, peer);
    testbed.spawn("etcd-own", command)
}

/// The hub's `/readyz` status code, or why there was none.
async fn readyz(testbed: &Testbed, hub: &HubProcess<'_>) -> std::result::Result<u16, String> {
    testbed
        .http()
        .get(format!("{}/readyz", hub.http))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| e.to_string())
}

#[test]
fn readiness_follows_etcd() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let dir = testbed.dir().join("etcd-own");
        let (client, peer) = (
            accord_e2e::ports::free_port()?,
            accord_e2e::ports::free_port()?,
        );
        let endpoint = format!("http://127.0.0.1:{client}");
        let etcd = own_etcd(testbed, &dir, client, peer)?;
        let hub = HubProcess::start(
            testbed,
            &opts("hub-readyz", "/t-readyz/", &["--etcd-endpoints", &endpoint]),
        )
        .await?;
        ensure!(readyz(testbed, &hub).await == Ok(200));

        testbed.stop_process(etcd);
        until(
            "not ready without etcd",
            Duration::from_secs(20),
            || async {
                testbed.ensure_running(hub.id)?;
                Ok(match readyz(testbed, &hub).await {
                    Ok(503) => Check::Ready(()),
                    other => Check::NotYet(format!("readyz {other:?}")),
                })
            },
        )
        .await?;

        let restarted = own_etcd(testbed, &dir, client, peer)?;
        let since = Instant::now();
        until("ready again with etcd", Duration::from_secs(90), || async {
            testbed.ensure_running(hub.id)?;
            testbed.ensure_running(restarted)?;
            Ok(match readyz(testbed, &hub).await {
                Ok(200) => Check::Ready(()),
                other => Check::NotYet(format!("readyz {other:?}")),
            })
        })
        .await?;
        println!("ready again {:?} after etcd restarted", since.elapsed());
        Ok(())
    });
}

#[test]
fn a_valid_token_yields_a_certificate_naming_the_cluster_and_a_joined_managed_cluster() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let prefix = "/t-register/";
        let hub = HubProcess::start(testbed, &opts("hub-reg", prefix, &[])).await?;
        let id = join(testbed, &hub, prefix, "reg-ok").await?;
        let der = rustls_pemfile_first_cert(&id.cert_pem)?;
        let peer = accord_hub::pki::peer_identity(&der)?;
        ensure!(
            peer.cluster == "reg-ok",
            "certificate names {:?}",
            peer.cluster
        );
        wait_condition(testbed, "reg-ok", "Joined", "True", Duration::from_secs(30)).await?;
        Ok(())
    });
}

fn rustls_pemfile_first_cert(pem: &str) -> Result<Vec<u8>> {
    let (_, parsed) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|e| anyhow::anyhow!("certificate PEM: {e}"))?;
    Ok(parsed.contents)
}

#[test]
fn expired_unknown_used_and_conflicting_registrations_are_refused_with_clear_messages() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let prefix = "/t-refuse/";
        let hub = HubProcess::start(testbed, &opts("hub-refuse", prefix, &[])).await?;

        // Expired: the token's TTL is one second, and expiry is kept in whole seconds
        // rounded up, so it is certainly over two seconds after creation.
        let (token, hash) = create_token(testbed, prefix, "1s").await?;
        tokio::time::sleep(Duration::from_millis(2100)).await;
        let err = agent_sim::register(&hub.grpc, &token, &hash, "ref-expired", false)
            .await
            .unwrap_err();
        ensure!(err.code() == tonic::Code::Unauthenticated, "{err:?}");
        ensure!(
            err.message().contains("expired"),
            "message: {}",
            err.message()
        );
        ensure!(
            !err.message().contains(token.split('.').nth(1).unwrap()),
            "the secret leaked"
        );

        // Unknown.
        let err = agent_sim::register(
            &hub.grpc,
            "abcdef.0123456789abcdef",
            &hash,
            "ref-unknown",
            false,
        )
        .await
        .unwrap_err();
        ensure!(err.code() == tonic::Code::Unauthenticated, "{err:?}");
        ensure!(
            err.message().contains("not known"),
            "message: {}",
            err.message()
        );

        // Already used.
        let (token, hash) = create_token(testbed, prefix, "10m").await?;
        agent_sim::register(&hub.grpc, &token, &hash, "ref-used", false).await?;
        let err = agent_sim::register(&hub.grpc, &token, &hash, "ref-used-2", false)
            .await
            .unwrap_err();
        ensure!(err.code() == tonic::Code::Unauthenticated, "{err:?}");
        ensure!(
            err.message().contains("already used"),
            "message: {}",
            err.message()
        );

        // A joined name with another identity: refused, then replaced with --force, after
        // which the old certificate no longer opens a stream.
        let old = join(testbed, &hub, prefix, "ref-dup").await?;
        // Without a valid token, nothing is said about the name.
        let err = agent_sim::register(
            &hub.grpc,
            "abcdef.0123456789abcdef",
            &hash,
            "ref-dup",
            false,
        )
        .await
        .unwrap_err();
        ensure!(err.code() == tonic::Code::Unauthenticated, "{err:?}");
        let (token, hash) = create_token(testbed, prefix, "10m").await?;
        let err = agent_sim::register(&hub.grpc, &token, &hash, "ref-dup", false)
            .await
            .unwrap_err();
        ensure!(err.code() == tonic::Code::AlreadyExists, "{err:?}");
        ensure!(
            err.message().contains("--force"),
            "message: {}",
            err.message()
        );
        // The old identity's open stream ends when the name is registered again.
        let mut open =
            AgentStream::open(agent_sim::connect(&hub.grpc, &old).await?, "ref-dup").await?;
        agent_sim::register(&hub.grpc, &token, &hash, "ref-dup", true).await?;
        let ended = open.ended(Duration::from_secs(10)).await?;
        ensure!(
            ended == Some(tonic::Code::PermissionDenied),
            "the replaced stream ended with {ended:?}"
        );
        let channel = agent_sim::connect(&hub.grpc, &old).await?;
        match AgentStream::open(channel, "ref-dup").await {
            Err(status) => ensure!(status.code() == tonic::Code::PermissionDenied, "{status:?}"),
            Ok(mut stream) => match stream.next().await {
                Some(Err(status)) => {
                    ensure!(status.code() == tonic::Code::PermissionDenied, "{status:?}")
                }
                other => bail!("the replaced certificate still opened a stream: {other:?}"),
            },
        }
        // The bad token kept the hash format's promise: a wrong CA pin is refused too.
        let wrong = format!("sha256:{}", "0".repeat(64));
        let err = agent_sim::register(&hub.grpc, &token, &wrong, "ref-pin", false)
            .await
            .unwrap_err();
        ensure!(
            err.message().contains("does not match"),
            "message: {}",
            err.message()
        );
        Ok(())
    });
}

#[test]
fn an_agent_cannot_speak_for_another_cluster() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let prefix = "/t-identity/";
        let hub = HubProcess::start(testbed, &opts("hub-identity", prefix, &[])).await?;
        let a = join(testbed, &hub, prefix, "ident-a").await?;
        join(testbed, &hub, prefix, "ident-b").await?;
        let mut stream =
            AgentStream::open(agent_sim::connect(&hub.grpc, &a).await?, "ident-a").await?;
        // First the full assignments.
        let first = stream.next().await.context("stream ended")??;
        ensure!(matches!(
            first.body,
            Some(hub_message::Body::Assignments(_))
        ));
        stream
            .send_as(
                "ident-b",
                agent_message::Body::StatusReport(StatusReport {
                    placed: Some(policy("CrossClusterScalePolicy", "default", "web")),
                    ..Default::default()
                }),
            )
            .await?;
        match stream.next().await {
            Some(Err(status)) => {
                ensure!(status.code() == tonic::Code::PermissionDenied, "{status:?}");
                ensure!(status.message().contains("ident-b"), "{status:?}");
            }
            other => bail!("expected PERMISSION_DENIED, got {other:?}"),
        }
        // Nothing was stored for B.
        let store = Store::from_client(testbed.hub_etcd_client().await?, Keyspace::new(prefix));
        ensure!(
            store
                .read_status("ident-b", "CrossClusterScalePolicy", "default", "web")
                .await?
                .is_none()
        );
        Ok(())
    });
}

async fn ack(stream: &mut AgentStream) -> Result<status_ack::Result> {
    loop {
        match stream.next().await.context("stream ended")??.body {
            Some(hub_message::Body::StatusAck(a)) => return a.result.context("ack without result"),
            Some(hub_message::Body::Assignments(_) | hub_message::Body::Renewed(_)) => continue,
            None => bail!("empty hub message"),
        }
    }
}

#[test]
fn status_reports_are_written_with_optimistic_concurrency() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let prefix = "/t-occ/";
        let hub = HubProcess::start(testbed, &opts("hub-occ", prefix, &[])).await?;
        let id = join(testbed, &hub, prefix, "occ-a").await?;
        let mut stream =
            AgentStream::open(agent_sim::connect(&hub.grpc, &id).await?, "occ-a").await?;
        let report = |expected: i64, applied: i64, rv: &str| StatusReport {
            placed: Some(policy("CrossClusterScalePolicy", "default", "web")),
            resource_version: rv.into(),
            generation: 1,
            expected_version: expected,
            state: accord_proto::v1::PlacementState::Synced as i32,
            applied_revision: applied,
            ..Default::default()
        };
        stream.report(report(0, 5, "100")).await?;
        let Ok(status_ack::Result::Accepted(v1)) = ack(&mut stream).await else {
            bail!("first report not accepted")
        };
        // Stale expected_version: conflict with the current version.
        stream.report(report(0, 6, "101")).await?;
        ensure!(ack(&mut stream).await? == status_ack::Result::Conflict(v1));
        // Older than what is stored (applied revision 3 < 5), even with the right version.
        stream.report(report(v1, 3, "90")).await?;
        ensure!(ack(&mut stream).await? == status_ack::Result::Conflict(v1));
        // Newer with the right version: accepted.
        stream.report(report(v1, 6, "101")).await?;
        let status_ack::Result::Accepted(v2) = ack(&mut stream).await? else {
            bail!("newer report refused")
        };
        ensure!(v2 > v1);
        let store = Store::from_client(testbed.hub_etcd_client().await?, Keyspace::new(prefix));
        let (stored, version) = store
            .read_status("occ-a", "CrossClusterScalePolicy", "default", "web")
            .await?
            .context("no record")?;
        ensure!(version == v2 && stored.applied_revision == 6 && stored.resource_version == "101");
        Ok(())
    });
}

#[test]
fn availability_follows_the_agent_stream_and_heartbeats() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let prefix = "/t-avail/";
        let hub = HubProcess::start(
            testbed,
            &opts("hub-avail", prefix, &["--heartbeat-timeout", "2s"]),
        )
        .await?;
        let id = join(testbed, &hub, prefix, "avail-a").await?;

        let open = || async {
            let stream =
                AgentStream::open(agent_sim::connect(&hub.grpc, &id).await?, "avail-a").await?;
            // The heartbeat task holds the only sender: aborting it ends the stream.
            let heartbeats = stream.spawn_heartbeats(Duration::from_millis(500));
            let (_, mut rx) = stream.split();
            let reader = tokio::spawn(async move { while let Ok(Some(_)) = rx.message().await {} });
            Ok::<_, anyhow::Error>((heartbeats, reader))
        };

        // Connected → Available.
        let (hb, reader) = open().await?;
        wait_condition(
            testbed,
            "avail-a",
            "Available",
            "True",
            Duration::from_secs(30),
        )
        .await?;
        // Stream stopped (agent gone) → Available=False within 3 s.
        hb.abort();
        reader.abort();
        let took = wait_condition(
            testbed,
            "avail-a",
            "Available",
            "False",
            Duration::from_secs(3),
        )
        .await?;
        println!("stream closed → Available=False in {took:?}");
        // Back → True.
        let (hb, reader) = open().await?;
        wait_condition(
            testbed,
            "avail-a",
            "Available",
            "True",
            Duration::from_secs(10),
        )
        .await?;
        // Heartbeats stop while the stream stays open → False within the 2 s timeout + 1 s.
        hb.abort();
        let took = wait_condition(
            testbed,
            "avail-a",
            "Available",
            "False",
            Duration::from_secs(3),
        )
        .await?;
        println!("heartbeats stopped → Available=False in {took:?}");
        reader.abort();
        let api: Api<ManagedCluster> = Api::all(testbed.mgmt().client());
        let mc = api.get("avail-a").await?;
        ensure!(
            mc.status.and_then(|s| s.last_heartbeat_time).is_some(),
            "lastHeartbeatTime kept"
        );
        Ok(())
    });
}

#[test]
fn an_agent_that_stops_reading_and_heartbeating_is_ended_not_left_half_open() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let prefix = "/t-half-open/";
        let hub = HubProcess::start(
            testbed,
            &opts("hub-half-open", prefix, &["--heartbeat-timeout", "2s"]),
        )
        .await?;
        let id = join(testbed, &hub, prefix, "half-open").await?;
        let stream =
            AgentStream::open(agent_sim::connect(&hub.grpc, &id).await?, "half-open").await?;
        let (tx, mut rx) = stream.split();
        // Reports the agent never reads the answers to: the answers fill the stream and the
        // hub's queue for it, the hub stops reading, and the agent (which also stops
        // heartbeating) falls silent. The sender stays open, as a stuck agent's would.
        let sending = {
            let tx = tx.clone();
            tokio::spawn(async move {
                // Long names make long answers, and many of them: past what HTTP/2 buffers
                // for the stream (a few hundred KiB on each side).
                let padding = "x".repeat(200);
                for i in 0..20000 {
                    let name = format!("p-{i}-{padding}");
                    let report = StatusReport {
                        placed: Some(policy("CrossClusterScalePolicy", "default", &name)),
                        state: accord_proto::v1::PlacementState::Synced as i32,
                        applied_revision: 1,
                        ..Default::default()
                    };
                    let message = accord_proto::v1::AgentMessage {
                        cluster: "half-open".into(),
                        body: Some(agent_message::Body::StatusReport(report)),
                    };
                    if tx.send(message).await.is_err() {
                        return;
                    }
                }
            })
        };
        wait_condition(
            testbed,
            "half-open",
            "Available",
            "False",
            Duration::from_secs(60),
        )
        .await?;
        // Once the agent reads again, the stream ends with the reason: it is not left
        // serving a cluster the hub counts as gone.
        let code = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                match rx.message().await {
                    Ok(Some(_)) => continue,
                    Ok(None) => return None,
                    Err(status) => return Some(status.code()),
                }
            }
        })
        .await
        .context("the stream stayed open after the hub counted the agent as gone")?;
        ensure!(code == Some(tonic::Code::DeadlineExceeded), "{code:?}");
        sending.abort();
        drop(tx);
        Ok(())
    });
}

/// Waits for the next scale assignment for `policy` on a simulated agent's stream.
async fn next_scale(stream: &mut AgentStream) -> Result<(i64, accord_proto::v1::ScaleAssignment)> {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .context("no assignment within 30 s")?
            .context("stream ended")??;
        if let Some(hub_message::Body::Assignments(a)) = msg.body {
            for item in a.items {
                if let Some(accord_proto::v1::assignment::Spec::Scale(s)) = item.spec {
                    return Ok((item.revision, s));
                }
            }
        }
    }
}

#[test]
fn the_leader_divides_a_policy_and_streams_each_share_to_its_cluster() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let prefix = "/t-assign/";
        let hub = HubProcess::start(testbed, &opts("hub-assign", prefix, &[])).await?;
        let a = join(testbed, &hub, prefix, "assign-a").await?;
        let b = join(testbed, &hub, prefix, "assign-b").await?;
        let mut sa = AgentStream::open(agent_sim::connect(&hub.grpc, &a).await?, "assign-a").await?;
        let mut sb = AgentStream::open(agent_sim::connect(&hub.grpc, &b).await?, "assign-b").await?;
        let _hb = (sa.spawn_heartbeats(Duration::from_millis(500)), sb.spawn_heartbeats(Duration::from_millis(500)));
        // Both must be Available before the policy, or failover gives one everything.
        for c in ["assign-a", "assign-b"] {
            wait_condition(testbed, c, "Available", "True", Duration::from_secs(30)).await?;
        }
        let policy: accord_crds::CrossClusterScalePolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "accord.io/v1beta1", "kind": "CrossClusterScalePolicy",
            "metadata": {"name": "assign-web", "namespace": "default"},
            "spec": {"targetRef": {"name": "frontend"}, "desiredReplicas": 12,
                     "distribution": [{"cluster": "assign-a", "namespace": "prod-us", "weight": 60},
                                      {"cluster": "assign-b", "namespace": "prod-eu", "weight": 40}]}
        }))?;
        let api: Api<accord_crds::CrossClusterScalePolicy> = Api::namespaced(testbed.mgmt().client(), "default");
        api.create(&Default::default(), &policy).await?;
        // Converges to 7/5 (a first decision made from a view that lagged may differ).
        let mut share_a = next_scale(&mut sa).await?.1;
        while share_a.replicas != 7 {
            share_a = next_scale(&mut sa).await?.1;
        }
        let mut share_b = next_scale(&mut sb).await?.1;
        while share_b.scale_request_id != share_a.scale_request_id {
            share_b = next_scale(&mut sb).await?.1;
        }
        ensure!(share_a.namespace == "prod-us", "{share_a:?}");
        ensure!(share_b.replicas == 5 && share_b.namespace == "prod-eu", "{share_b:?}");
        ensure!(share_a.scale_request_id == share_b.scale_request_id && !share_a.scale_request_id.is_empty());
        api.delete("assign-web", &Default::default()).await?;
        Ok(())
    });
}

/// Agents of the connect-storm test.
const STORM_AGENTS: usize = 40;

#[test]
fn every_stream_of_a_connect_storm_through_a_slow_store_is_counted_and_served() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let prefix = "/t-storm/";
        let hub_etcd = testbed.hub_etcd().endpoint();
        let (scheme, etcd) = hub_etcd
            .split_once("://")
            .context("the hub's etcd endpoint has a scheme")?;
        let proxy = FaultProxy::start(etcd.parse().context("the hub's etcd address")?).await?;
        let endpoint = format!("{scheme}://{}", proxy.addr());
        let hub = HubProcess::start(
            testbed,
            &opts(
                "hub-storm",
                prefix,
                &["--heartbeat-timeout", "2s", "--etcd-endpoints", &endpoint],
            ),
        )
        .await?;
        let mut identities = Vec::new();
        for i in 0..STORM_AGENTS {
            identities.push(join(testbed, &hub, prefix, &format!("storm-{i:02}")).await?);
        }
        // Every etcd request of the hub now takes about 100 ms (50 each way), and every
        // agent connects at once, heartbeating every 500 ms from the moment it is open.
        // Each stream's set-up waits on etcd; one that waited for the others' in turn
        // looked silent past the heartbeat timeout and was closed while being set up.
        proxy.set_mode(Mode::Delay(Duration::from_millis(50)));
        let streams = futures::future::try_join_all(identities.iter().map(|id| {
            let grpc = hub.grpc.clone();
            async move {
                let stream =
                    AgentStream::open(agent_sim::connect(&grpc, id).await?, &id.cluster).await?;
                anyhow::Ok(stream.split())
            }
        }))
        .await?;
        let http = testbed.http().clone();
        let mut served = Vec::new();
        for (i, (tx, mut rx)) in streams.into_iter().enumerate() {
            served.push(tokio::spawn(async move {
                let heartbeat = accord_proto::v1::AgentMessage {
                    cluster: String::new(),
                    body: Some(agent_message::Body::Heartbeat(Default::default())),
                };
                let mut tick = tokio::time::interval(Duration::from_millis(500));
                let mut reported = false;
                loop {
                    tokio::select! {
                        _ = tick.tick() => {
                            if tx.send(heartbeat.clone()).await.is_err() {
                                bail!("storm-{i:02}: the stream closed");
                            }
                        }
                        message = rx.message() => match message {
                            Ok(Some(m)) => {
                                if !reported {
                                    // Served: one report, answered with an ack.
                                    reported = true;
                                    let report = StatusReport {
                                        placed: Some(policy("CrossClusterScalePolicy", "default", "storm")),
                                        state: accord_proto::v1::PlacementState::Synced as i32,
                                        applied_revision: 1,
                                        ..Default::default()
                                    };
                                    let message = accord_proto::v1::AgentMessage {
                                        cluster: String::new(),
                                        body: Some(agent_message::Body::StatusReport(report)),
                                    };
                                    if tx.send(message).await.is_err() {
                                        bail!("storm-{i:02}: the stream closed");
                                    }
                                }
                                if matches!(m.body, Some(hub_message::Body::StatusAck(_))) {
                                    return Ok(tx);
                                }
                            }
                            Ok(None) => bail!("storm-{i:02}: the hub ended the stream"),
                            Err(status) => bail!("storm-{i:02}: the hub ended the stream: {status}"),
                        }
                    }
                }
            }));
        }
        let mut kept = Vec::new();
        for task in served {
            kept.push(tokio::time::timeout(Duration::from_secs(60), task).await???);
        }
        let n = until("every stream counted", Duration::from_secs(30), || async {
            let n = hub
                .metric(&http, "accord_hub_connected_agents")
                .await?
                .unwrap_or(0.0) as usize;
            Ok(if n >= STORM_AGENTS {
                Check::Ready(n)
            } else {
                Check::NotYet(format!("{n} of {STORM_AGENTS} counted"))
            })
        })
        .await?;
        ensure!(n == STORM_AGENTS, "{n} streams counted for {STORM_AGENTS} agents");
        drop(kept);
        Ok(())
    });
}
