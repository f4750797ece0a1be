//! One testbed shared by the tests of a test binary.
//!
//! Starting API servers takes a while on a small machine, so the tests of one binary can
//! share a testbed, each working in its own namespaces and object names. Tests run as
//! plain `#[test]` functions on one process-wide Tokio runtime, because the testbed's
//! Kubernetes clients are bound to the runtime they were created on. A `static` is never
//! dropped: the testbed's watchdog stops its processes when the test binary exits.
//!
//! ```no_run
//! use accord_e2e::SharedTestbed;
//!
//! static TESTBED: SharedTestbed = SharedTestbed::new(|builder| builder.members(2).with_kafka());
//!
//! #[test]
//! fn a_member_has_a_kafka_broker() {
//!     TESTBED.run(|testbed| async move {
//!         assert!(testbed.members()[0].kafka_bootstrap().is_some());
//!         Ok(())
//!     });
//! }
//! ```

use std::future::Future;
use std::sync::LazyLock;

use tokio::runtime::Runtime;
use tokio::sync::OnceCell;

use crate::testbed::{Testbed, TestbedBuilder};

static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("testbed-shared")
        .build()
        .expect("building the shared Tokio runtime")
});

/// A testbed started on first use and shared by every test of the binary.
pub struct SharedTestbed {
    configure: fn(TestbedBuilder) -> TestbedBuilder,
    testbed: OnceCell<Result<Testbed, String>>,
}

impl SharedTestbed {
    /// A shared testbed configured by `configure` from [`Testbed::builder`].
    pub const fn new(configure: fn(TestbedBuilder) -> TestbedBuilder) -> Self {
        Self {
            configure,
            testbed: OnceCell::const_new(),
        }
    }

    /// The testbed, started by the first caller; if starting failed, every caller gets
    /// the same error.
    pub async fn get(&'static self) -> anyhow::Result<&'static Testbed> {
        let testbed = self
            .testbed
            .get_or_init(|| async {
                (self.configure)(Testbed::builder())
                    .start()
                    .await
                    .map_err(|e| format!("{e:#}"))
            })
            .await;
        testbed
            .as_ref()
            .map_err(|e| anyhow::anyhow!("the shared testbed did not start: {e}"))
    }

    /// Runs one test against the shared testbed on the shared runtime. Panics (failing
    /// the test) if the testbed does not start or `test` fails, printing every component's
    /// log tail first.
    pub fn run<F, Fut>(&'static self, test: F)
    where
        F: FnOnce(&'static Testbed) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let testbed = match block_on(self.get()) {
            Ok(testbed) => testbed,
            Err(e) => panic!("{e:#}"),
        };
        let _logs = testbed.logs_on_panic();
        if let Err(e) = block_on(test(testbed)) {
            panic!("{e:#}");
        }
    }
}

/// Runs `future` to completion on the process-wide runtime shared testbeds live on.
pub fn block_on<F: Future>(future: F) -> F::Output {
    RUNTIME.block_on(future)
}
