//! The leader's controllers and `/readyz`, on the store kept in memory (no testbed) and a
//! management cluster that never answers: a leader whose controllers have not listed their objects is not ready, a
//! follower is, and leadership moving moves the gate with it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use accord_hub::connections::Connections;
use accord_hub::controllers::{self, ControllerDeps, ControllerError};
use accord_hub::http::{Readiness, ReadinessGates};
use accord_hub::metrics::Metrics;
use accord_hub::store::{Backend, Keyspace, LeaderElection, MemoryBackend, PrefixCache, Store};
use tokio::task::JoinHandle;

/// The leader's lease.
const TTL: Duration = Duration::from_secs(2);
/// Deadline for what should happen promptly.
const PROMPTLY: Duration = Duration::from_secs(15);

/// Awaits `future`, panicking with `what` if it takes longer than `timeout`.
async fn within<T>(what: &str, timeout: Duration, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(timeout, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// One hub replica's controllers, with its readiness and metrics.
struct Replica {
    ready: Readiness,
    metrics: Metrics,
    election: Arc<LeaderElection>,
    controllers: JoinHandle<Result<(), ControllerError>>,
}

async fn replica(store: Store, name: &str) -> Replica {
    // Nothing listens there: no watch ever lists, so no controller ever gets ready.
    let kube = kube::Client::try_from(kube::Config::new(
        "http://127.0.0.1:9".parse().expect("a URL"),
    ))
    .expect("a client");
    let ready = Readiness::default();
    let gates = ReadinessGates::new(ready.clone());
    gates.set_serving(true);
    gates.set_store_answers(true);
    let metrics = Metrics::new();
    let election = Arc::new(
        LeaderElection::start(store.clone(), name.to_owned(), TTL)
            .await
            .expect("campaigning"),
    );
    let placements = PrefixCache::start(store.clone(), store.keys().placements_prefix())
        .await
        .expect("following placements");
    let controllers = tokio::spawn(controllers::run(ControllerDeps {
        kube,
        store,
        election: election.clone(),
        connections: Connections::default(),
        metrics: metrics.clone(),
        placements,
        replica: name.to_owned(),
        gates,
        namespace: "accord-system".into(),
        views: Default::default(),
        secrets: accord_hub::distribution::secrets::Secrets::none(),
        kinds: accord_hub::kinds::registered(&Default::default()),
    }));
    Replica {
        ready,
        metrics,
        election,
        controllers,
    }
}

async fn wait_ready(r: &Replica, want: bool, what: &str) {
    within(what, PROMPTLY, async {
        while r.ready.get() != want {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_leader_is_ready_only_once_its_controllers_listed_and_a_follower_is_ready() {
    // Two replicas on one store.
    let backend: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let store = || Store::with_backend(backend.clone(), Keyspace::new("/controllers-ready/"));
    let a = replica(store(), "a").await;
    within("a leads", PROMPTLY, a.election.wait_for_leadership()).await;
    let b = replica(store(), "b").await;

    wait_ready(&a, false, "the leader to wait for its controllers").await;
    assert_eq!(a.metrics.is_leader.get(), 1);
    wait_ready(&b, true, "the follower to be ready").await;
    assert_eq!(b.metrics.is_leader.get(), 0);

    // Leadership moves: the gate moves with it.
    a.election.resign().await;
    within("b leads", PROMPTLY, b.election.wait_for_leadership()).await;
    wait_ready(&b, false, "the new leader to wait for its controllers").await;
    assert_eq!(b.metrics.is_leader.get(), 1);
    let ended = within("a's controllers to stop", PROMPTLY, a.controllers).await;
    assert!(
        matches!(ended, Ok(Err(ControllerError::ElectionEnded))),
        "a replica whose election ended stops its controllers with an error: {ended:?}"
    );
    b.controllers.abort();
}
