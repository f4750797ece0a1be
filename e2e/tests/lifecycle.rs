//! The testbed stops every process it started, whether it is dropped normally or while a
//! test panics, and removes its directory.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;

use accord_e2e::Testbed;
use nix::sys::signal::{kill, killpg};
use nix::unistd::Pid;

fn pid(raw: u32) -> Pid {
    Pid::from_raw(i32::try_from(raw).expect("pids fit in i32"))
}

/// Asserts that neither the processes nor anything left in their process groups exists.
fn assert_gone(pids: &[u32], dir: &PathBuf) {
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
    let running = testbed.processes();
    // etcd, 2 API servers, 2 controller managers, a scheduler, kwok, Kafka and Prometheus.
    assert_eq!(running.len(), 9, "unexpected processes: {running:#?}");
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
