//! The hub's etcd restored from an earlier copy, end to end: real etcd (the hub's own, so
//! its data directory can be put back), real hub, real agent, real member cluster.
//!
//! The copy is taken, then the store moves far ahead (other writes and policy changes the
//! agent applies), then the hub is stopped, the old data directory put back and the hub
//! started again — what restoring a volume snapshot, or `etcdutl snapshot restore` without
//! `--bump-revision`, does. The store's revisions are now below what the agent applied:
//! without the store epoch it would ignore every later change. The agent's Hello gives it
//! away, the hub makes a new epoch, and a policy change made after the restore, at revisions
//! lower than the agent held, reaches the member.

use accord_e2e::fleet::{AGENT_NAMESPACE, ensure_namespace, pause_deployment, write_identity};
use accord_e2e::hub::{HubOptions, HubProcess, accord_binary};
use accord_e2e::ports::free_port;
use accord_e2e::wait::{Check, until};
use accord_e2e::{ProcessId, SharedTestbed, Testbed, agent_sim};
use accord_hub::store::{Keyspace, Store};
use anyhow::{Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(1));
const FM: &str = "accord-e2e-store-epoch";
const NS: &str = "store-epoch";
const PREFIX: &str = "/e2e-epoch/";
const STEP: Duration = Duration::from_secs(60);

/// The hub's own etcd, on fixed ports, its data directory copied and put back by the test.
struct HubEtcd {
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
    process: Option<ProcessId>,
}

impl HubEtcd {
    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    async fn start(&mut self, testbed: &Testbed) -> Result<()> {
        let command = accord_e2e::etcd::command(
            testbed.binaries(),
            "hub-epoch",
            &self.data(),
            self.client_port,
            self.peer_port,
        );
        let id = testbed.spawn("hub-epoch-etcd", command)?;
        self.process = Some(id);
        let url = format!("{}/health", self.endpoint());
        until("the hub's etcd /health", STEP, || async {
            testbed.ensure_running(id)?;
            Ok(match testbed.http().get(&url).send().await {
                Ok(r) if r.status().is_success() => Check::Ready(()),
                Ok(r) => Check::NotYet(format!("HTTP {}", r.status())),
                Err(e) => Check::NotYet(e.to_string()),
            })
        })
        .await
    }

    fn stop(&mut self, testbed: &Testbed) {
        if let Some(id) = self.process.take() {
            testbed.stop_process(id);
        }
    }

    async fn store(&self) -> Result<Store> {
        Ok(Store::connect(&[self.endpoint()], Keyspace::new(PREFIX)).await?)
    }
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// `accord-hub token create` against the hub's own etcd; (token, ca cert hash).
async fn create_token(testbed: &Testbed, etcd: &HubEtcd) -> Result<(String, String)> {
    let etcd_args = ["--etcd-endpoints".to_owned(), etcd.endpoint()];
    accord_e2e::hub::create_token_with(testbed, &etcd_args, PREFIX, "10m").await
}

async fn apply_policy(testbed: &Testbed, desired: i32) -> Result<()> {
    let api: Api<accord_crds::CrossClusterScalePolicy> =
        Api::namespaced(testbed.mgmt().client(), NS);
    let policy = serde_json::json!({
        "apiVersion": "accord.io/v1beta1", "kind": "CrossClusterScalePolicy",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"targetRef": {"name": "web"}, "desiredReplicas": desired,
                 "distribution": [{"cluster": "epoch-1", "weight": 1}]},
    });
    api.patch(
        "web",
        &PatchParams::apply(FM).force(),
        &Patch::Apply(&policy),
    )
    .await?;
    Ok(())
}

async fn wait_member_replicas(testbed: &Testbed, want: i32) -> Result<()> {
    let api: Api<Deployment> = Api::namespaced(testbed.members()[0].client(), NS);
    until(
        &format!("the member runs {want} replicas"),
        STEP,
        || async {
            let got = api
                .get_opt("web")
                .await?
                .and_then(|d| d.spec.and_then(|s| s.replicas));
            Ok(if got == Some(want) {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{got:?}"))
            })
        },
    )
    .await
}

/// The store epoch the agent saved with its assignments.
async fn agent_epoch(testbed: &Testbed) -> Result<u64> {
    let api: Api<ConfigMap> = Api::namespaced(testbed.members()[0].client(), AGENT_NAMESPACE);
    let document = api
        .get_opt("accord-agent-assignments")
        .await?
        .and_then(|c| c.data)
        .and_then(|mut d| d.remove("assignments.json"))
        .unwrap_or_default();
    let value: serde_json::Value = serde_json::from_str(&document).unwrap_or_default();
    Ok(value["storeEpoch"].as_u64().unwrap_or(0))
}

#[test]
#[ignore = "fault suite: run by e2e/faults.sh"]
fn after_the_hubs_etcd_is_restored_the_agent_takes_changes_at_lower_revisions() {
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let mut etcd = HubEtcd {
            dir: testbed.dir().join("hub-epoch-etcd"),
            client_port: free_port()?,
            peer_port: free_port()?,
            process: None,
        };
        etcd.start(testbed).await?;
        let options = HubOptions {
            replica: "hub-epoch".into(),
            etcd_prefix: PREFIX.into(),
            extra_args: vec![format!("--etcd-endpoints={}", etcd.endpoint())],
        };
        let hub = HubProcess::start(testbed, &options).await?;
        let grpc = hub.grpc.clone();

        // One agent, joined with a token from the hub's own etcd.
        let (token, hash) = create_token(testbed, &etcd).await?;
        let id = agent_sim::register(&grpc, &token, &hash, "epoch-1", true)
            .await
            .map_err(|s| anyhow::anyhow!("registering: {s}"))?;
        let identity = testbed.dir().join("identity-epoch-1");
        write_identity(&identity, &grpc, &id)?;
        let member = &testbed.members()[0];
        ensure_namespace(member, AGENT_NAMESPACE).await?;
        let mut agent = std::process::Command::new(accord_binary("accord-agent")?);
        agent
            .arg("run")
            .arg("--kubeconfig")
            .arg(member.kubeconfig_path())
            .arg("--identity-dir")
            .arg(&identity)
            .args(["--namespace", AGENT_NAMESPACE])
            .args(["--http-addr", &format!("127.0.0.1:{}", free_port()?)])
            .env("RUST_LOG", "info,accord_agent=debug");
        let agent = testbed.spawn("agent/epoch-1", agent)?;

        ensure_namespace(member, NS).await?;
        ensure_namespace(testbed.mgmt(), NS).await?;
        let deployments: Api<Deployment> = Api::namespaced(member.client(), NS);
        deployments
            .patch(
                "web",
                &PatchParams::apply(FM).force(),
                &Patch::Apply(pause_deployment("web", 1)),
            )
            .await?;
        apply_policy(testbed, 3).await?;
        wait_member_replicas(testbed, 3).await?;
        let first_epoch = until("the agent saved the epoch", STEP, || async {
            let e = agent_epoch(testbed).await?;
            Ok(if e != 0 {
                Check::Ready(e)
            } else {
                Check::NotYet("no epoch".into())
            })
        })
        .await?;

        // The backup: the hub's etcd stopped, its data directory copied.
        etcd.stop(testbed);
        let backup = testbed.dir().join("hub-epoch-etcd-backup");
        copy_dir(&etcd.data(), &backup)?;
        etcd.start(testbed).await?;
        let store = etcd.store().await?;
        let backup_revision = store.read_or_create_epoch().await?.store_revision;

        // The store moves far ahead: other writes, then changes the agent applies.
        for i in 0..300 {
            store
                .put_json(&format!("/e2e-epoch-elsewhere/{i}"), &i)
                .await?;
        }
        for desired in [4, 5, 6] {
            apply_policy(testbed, desired).await?;
            wait_member_replicas(testbed, desired).await?;
        }
        let ahead = store.read_or_create_epoch().await?.store_revision;
        println!("backup at revision {backup_revision}, store at {ahead} before the restore");

        // The restore, with the hub restarted on it.
        drop(hub);
        etcd.stop(testbed);
        std::fs::remove_dir_all(etcd.data())?;
        copy_dir(&backup, &etcd.data())?;
        etcd.start(testbed).await?;
        let store = etcd.store().await?;
        let restored = store.read_or_create_epoch().await?;
        ensure!(
            restored.epoch == first_epoch,
            "the restore brought the old epoch back"
        );
        ensure!(restored.store_revision < ahead, "revisions went backwards");
        let restarted = Instant::now();
        let _hub = HubProcess::start_at(testbed, &options, &grpc).await?;

        // The agent's Hello gives the restore away: a new epoch, saved by the agent.
        let second_epoch = until("the agent takes a new epoch", STEP, || async {
            let e = agent_epoch(testbed).await?;
            Ok(if e != first_epoch && e != 0 {
                Check::Ready(e)
            } else {
                Check::NotYet(format!("{e}"))
            })
        })
        .await?;
        println!(
            "new store epoch taken by the agent {:.1} s after the hub restarted",
            restarted.elapsed().as_secs_f64()
        );
        ensure!(store.read_or_create_epoch().await?.epoch == second_epoch);

        // A change after the restore, at revisions below what the agent applied before.
        apply_policy(testbed, 2).await?;
        wait_member_replicas(testbed, 2).await?;
        let now = store.read_or_create_epoch().await?.store_revision;
        ensure!(
            now < ahead,
            "the change was made at lower revisions ({now} < {ahead})"
        );
        testbed.ensure_running(agent)?;
        etcd.stop(testbed);
        Ok(())
    });
}
