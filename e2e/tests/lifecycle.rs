//! The testbed stops every process it started, whether it is dropped normally or while a
//! test panics, and removes its directory.

use std::panic::AssertUnwindSafe;
use std::path::Path;

use accord_e2e::Testbed;
use nix::sys::signal::{kill, killpg};
use nix::unistd::Pid;

fn pid(raw: u32) -> Pid {
    Pid::from_raw(i32::try_from(raw).expect("pids fit in i32"))
}

/// Asserts that neither the processes nor anything left in their process groups exists.
fn assert_gone(pids: &[u32], dir: &Path) {
    for &raw in pids {
        assert!(
            kill(pid(raw), None).is_err(),
            "process {raw} is still alive"
        );
        assert!(
            killpg(pid(raw), None).is_err(),
            "process group {raw} still has members"
        );
    }
    assert!(!dir.exists(), "{} was not removed", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_testbed_leaves_no_process_behind() {
    let testbed = Testbed::builder()
        .members(1)
        .with_kafka()
        .with_prometheus()
        .without_crds()
        .keep_dir(false)
        .start()
        .await
        .expect("testbed starts");
    let mut sleep = std::process::Command::new("sleep");
    sleep.arg("300");
    testbed
        .spawn("extra/sleep", sleep)
        .expect("spawning an extra process");
    let running = testbed.processes();
    // etcd, the hub's own etcd, 2 API servers, 2 controller managers, a scheduler, kwok,
    // Kafka, Prometheus and the extra process.
    assert_eq!(running.len(), 11, "unexpected processes: {running:#?}");
    let pids = testbed.pids();
    let dir = testbed.dir().to_path_buf();
    for process in &running {
        assert!(
            kill(pid(process.pid), None).is_ok(),
            "{} is not running",
            process.name
        );
    }

    drop(testbed);
    assert_gone(&pids, &dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_test_still_stops_every_process() {
    let testbed = Testbed::builder()
        .members(0)
        .without_crds()
        .keep_dir(false)
        .start()
        .await
        .expect("testbed starts");
    let pids = testbed.pids();
    let dir = testbed.dir().to_path_buf();

    let outcome = std::panic::catch_unwind(AssertUnwindSafe(move || {
        let _testbed = testbed;
        panic!("a failing assertion");
    }));
    assert!(outcome.is_err());
    assert_gone(&pids, &dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_component_can_be_stopped_while_the_rest_keeps_running() {
    let testbed = Testbed::builder()
        .members(0)
        .without_crds()
        .start()
        .await
        .expect("testbed starts");
    let controller_manager = testbed
        .process("mgmt/kube-controller-manager")
        .expect("mgmt runs a controller manager");
    let api_server = testbed
        .process("mgmt/kube-apiserver")
        .expect("mgmt runs an API server");

    testbed.stop_process(controller_manager);
    assert!(testbed.ensure_running(controller_manager).is_err());
    testbed
        .ensure_running(api_server)
        .expect("the API server keeps running");
    let version = testbed
        .mgmt()
        .client()
        .apiserver_version()
        .await
        .expect("API server answers");
    assert_eq!(version.git_version, "v1.34.4");
}
