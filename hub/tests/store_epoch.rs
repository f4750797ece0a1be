//! The store epoch against a real etcd: created once, replaced when an agent is ahead of
//! the store, and replaced when the store's revisions go backwards because its data
//! directory was restored from an earlier copy (what a volume snapshot or
//! `etcdutl snapshot restore` without `--bump-revision` does).

mod store_support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use accord_hub::store::epoch::StoreEpoch;
use accord_hub::store::{Keyspace, Store};
use store_support::{PROMPTLY, wait_until};

#[tokio::test]
async fn the_first_replica_creates_the_epoch_and_the_others_read_it() {
    let store = store_support::store("epoch-first").await;
    let a = StoreEpoch::start(store.clone()).await.unwrap();
    let b = StoreEpoch::start(store.clone()).await.unwrap();
    assert_ne!(a.current(), 0);
    assert_eq!(a.current(), b.current());
    assert_eq!(
        a.check().await.unwrap(),
        a.current(),
        "nothing went backwards"
    );
}

#[tokio::test]
async fn an_agent_ahead_of_the_store_in_the_current_epoch_makes_a_new_one() {
    let store = store_support::store("epoch-agent").await;
    let a = StoreEpoch::start(store.clone()).await.unwrap();
    let b = StoreEpoch::start(store.clone()).await.unwrap();
    let first = a.current();
    // Behind the store, or holding another epoch: nothing to learn.
    assert_eq!(a.check_agent(first, 1).await.unwrap(), first);
    assert_eq!(a.check_agent(first ^ 1, i64::MAX).await.unwrap(), first);
    assert_eq!(a.check_agent(0, i64::MAX).await.unwrap(), first);
    // Ahead in this epoch: it applied revisions this store never reached.
    let second = a.check_agent(first, i64::MAX).await.unwrap();
    assert_ne!(second, first);
    assert_eq!(a.current(), second);
    // The other replica adopts it at its next check, and does not replace it again.
    let changes = b.subscribe();
    assert_eq!(b.check().await.unwrap(), second);
    assert!(changes.has_changed().unwrap());
    assert_eq!(b.check().await.unwrap(), second);
    // A replica that detects the same agent a moment later keeps the new epoch.
    assert_eq!(b.check_agent(first, i64::MAX).await.unwrap(), second);
}

#[tokio::test]
async fn two_replicas_replacing_the_same_epoch_make_one_new_epoch() {
    let store = store_support::store("epoch-race").await;
    let seen = store.read_or_create_epoch().await.unwrap();
    let (x, y) = tokio::join!(
        store.replace_epoch(&seen, "test"),
        store.replace_epoch(&seen, "test")
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    assert_eq!(x.epoch, y.epoch);
    assert_ne!(x.epoch, seen.epoch);
    assert_eq!(store.read_or_create_epoch().await.unwrap().epoch, x.epoch);
}

// ---- a restored etcd ------------------------------------------------------------------

/// An etcd on fixed loopback ports whose data directory the test copies and puts back.
struct RestorableEtcd {
    binary: PathBuf,
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

impl RestorableEtcd {
    fn new() -> Self {
        let free = || {
            TcpListener::bind(("127.0.0.1", 0))
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        // The same etcd every store test uses: `$ACCORD_TESTBED_BIN` or the testbed's cache,
        // built on first use, so a plain `cargo test` works without the e2e script.
        let binary = store_support::etcd_binary().expect("locating or building the test etcd");
        Self {
            binary,
            dir: tempfile::tempdir().unwrap(),
            client_port: free(),
            peer_port: free(),
            child: None,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    async fn start(&mut self) {
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.dir.path().join("etcd.log")).unwrap();
        let child = Command::new(&self.binary)
            .arg("--name=restored")
            .arg(format!("--data-dir={}", self.data().display()))
            .arg(format!("--listen-client-urls={}", self.endpoint()))
            .arg(format!("--advertise-client-urls={}", self.endpoint()))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=restored={peer}"))
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let endpoint = self.endpoint();
        wait_until("the etcd answers", PROMPTLY, || {
            let endpoint = endpoint.clone();
            async move {
                let store = Store::connect(&[endpoint], Keyspace::new("/probe/"))
                    .await
                    .ok()?;
                store.ping().await.ok()
            }
        })
        .await;
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn copy_data(&self, to: &Path) {
        copy_dir(&self.data(), to);
    }

    fn restore_data(&self, from: &Path) {
        std::fs::remove_dir_all(self.data()).unwrap();
        copy_dir(from, &self.data());
    }
}

impl Drop for RestorableEtcd {
    fn drop(&mut self) {
        self.stop();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

async fn store_on(etcd: &RestorableEtcd) -> Store {
    Store::connect(&[etcd.endpoint()], Keyspace::new("/accord/"))
        .await
        .unwrap()
}

async fn write_some(store: &Store, n: usize) -> i64 {
    let mut revision = 0;
    for i in 0..n {
        revision = store
            .put_json(
                &format!("{}placements/x/ns/p{i}", store.keys().prefix()),
                &i,
            )
            .await
            .unwrap();
    }
    revision
}

#[tokio::test]
async fn a_replica_running_through_a_restore_notices_the_revisions_going_back() {
    let mut etcd = RestorableEtcd::new();
    etcd.start().await;
    let store = store_on(&etcd).await;
    let epoch = StoreEpoch::start(store.clone()).await.unwrap();
    let before = epoch.current();
    write_some(&store, 5).await;
    // The backup.
    etcd.stop();
    let backup = tempfile::tempdir().unwrap();
    etcd.copy_data(backup.path());
    etcd.start().await;
    let ahead = write_some(&store, 30).await;
    assert_eq!(epoch.check().await.unwrap(), before);
    assert!(epoch.high_water() >= ahead);
    // The restore: the same endpoint, the same epoch key, fewer revisions.
    etcd.stop();
    etcd.restore_data(backup.path());
    etcd.start().await;
    let after = wait_until(
        "the epoch check reaches the restored etcd",
        PROMPTLY,
        || async { epoch.check().await.ok() },
    )
    .await;
    assert_ne!(after, before, "a restore makes a new epoch");
    assert!(
        epoch.high_water() < ahead,
        "revisions restart in the new epoch"
    );
    // Later checks keep it, although revisions are still below the old high-water mark.
    write_some(&store, 3).await;
    assert_eq!(epoch.check().await.unwrap(), after);
    // And a replica started after the restore reads it.
    let fresh = StoreEpoch::start(store_on(&etcd).await).await.unwrap();
    assert_eq!(fresh.current(), after);
}

#[tokio::test]
async fn after_a_restore_an_agent_ahead_of_the_store_makes_the_restarted_hub_change_epoch() {
    let mut etcd = RestorableEtcd::new();
    etcd.start().await;
    let store = store_on(&etcd).await;
    let first = StoreEpoch::start(store.clone()).await.unwrap().current();
    etcd.stop();
    let backup = tempfile::tempdir().unwrap();
    etcd.copy_data(backup.path());
    etcd.start().await;
    // An agent applies a revision only the lost history had.
    let agent_revision = write_some(&store, 20).await;
    etcd.stop();
    etcd.restore_data(backup.path());
    etcd.start().await;
    // Hub replicas restarted with the restore: nothing in memory to compare with.
    let epoch = StoreEpoch::start(store_on(&etcd).await).await.unwrap();
    assert_eq!(
        epoch.current(),
        first,
        "the restore brought the old epoch back"
    );
    let now = epoch.check_agent(first, agent_revision).await.unwrap();
    assert_ne!(now, first);
}
