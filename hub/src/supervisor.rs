//! Watches every long-running task of `serve`: the first one that ends — returning, failing
//! or panicking — stops the hub, so it never keeps leading or answering `/readyz` with a
//! dead part. The process then exits non-zero and its Deployment restarts it.

use std::collections::HashMap;
use std::future::Future;

use tokio::task::{Id, JoinError, JoinSet};

/// An error a supervised task may end with.
pub type TaskError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why the supervisor stopped the hub: a task ended while it should have run on.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// The task returned although it should run until shutdown.
    #[error("task {task:?} stopped on its own")]
    Ended {
        /// The task's name.
        task: &'static str,
    },
    /// The task returned an error.
    #[error("task {task:?} failed")]
    Failed {
        /// The task's name.
        task: &'static str,
        /// What went wrong.
        #[source]
        source: TaskError,
    },
    /// The task panicked.
    #[error("task {task:?} panicked: {message}")]
    Panicked {
        /// The task's name.
        task: &'static str,
        /// The panic's message, when it carried text.
        message: String,
    },
}

impl SupervisorError {
    /// The name of the task that ended.
    pub fn task(&self) -> &'static str {
        match self {
            Self::Ended { task } | Self::Failed { task, .. } | Self::Panicked { task, .. } => task,
        }
    }
}

/// A set of named tasks that should all run until shutdown.
#[derive(Default)]
pub struct Supervisor {
    tasks: JoinSet<Result<(), TaskError>>,
    names: HashMap<Id, &'static str>,
}

impl Supervisor {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Spawns `task` under `name`; it should run until the hub stops.
    pub fn spawn<F, E>(&mut self, name: &'static str, task: F)
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<TaskError> + 'static,
    {
        let handle = self
            .tasks
            .spawn(async move { task.await.map_err(Into::into) });
        self.names.insert(handle.id(), name);
    }

    /// Spawns a task that has no error of its own: it should simply never return.
    pub fn spawn_forever<F>(&mut self, name: &'static str, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.spawn(name, async move {
            task.await;
            Ok::<(), TaskError>(())
        });
    }

    /// Waits for the first task to end and says which and how. Never completes while the
    /// set is empty.
    pub async fn next_exit(&mut self) -> SupervisorError {
        let Some(joined) = self.tasks.join_next_with_id().await else {
            return std::future::pending().await;
        };
        match joined {
            Ok((id, Ok(()))) => SupervisorError::Ended {
                task: self.name(id),
            },
            Ok((id, Err(source))) => SupervisorError::Failed {
                task: self.name(id),
                source,
            },
            Err(e) => {
                let task = self.name(e.id());
                SupervisorError::Panicked {
                    task,
                    message: panic_message(e),
                }
            }
        }
    }

    /// Runs until `shutdown` completes (`Ok`) or a task ends (`Err` naming it). Either way
    /// `stop` runs first — the hub takes itself out of readiness and gives up leadership
    /// there — and the remaining tasks keep running; drop the supervisor to abort them.
    pub async fn run_until(
        &mut self,
        shutdown: impl Future<Output = ()>,
        stop: impl AsyncFnOnce(Option<&SupervisorError>),
    ) -> Result<(), SupervisorError> {
        let exit = tokio::select! {
            () = shutdown => None,
            exit = self.next_exit() => Some(exit),
        };
        if let Some(exit) = &exit {
            tracing::error!(
                error = %crate::store::error_chain(exit),
                "a hub task ended; stopping the hub"
            );
        }
        stop(exit.as_ref()).await;
        exit.map_or(Ok(()), Err)
    }

    /// Waits up to `grace` for the task `name` to end (e.g. the gRPC server draining
    /// after shutdown); other tasks ending meanwhile are ignored.
    pub async fn wait_for(&mut self, name: &'static str, grace: std::time::Duration) -> bool {
        tokio::time::timeout(grace, async {
            while !self.tasks.is_empty() {
                if self.next_exit().await.task() == name {
                    return;
                }
            }
        })
        .await
        .is_ok()
    }

    fn name(&mut self, id: Id) -> &'static str {
        self.names.remove(&id).unwrap_or("unnamed")
    }
}

fn panic_message(e: JoinError) -> String {
    if e.is_cancelled() {
        return "cancelled".to_owned();
    }
    let payload = e.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::http::Readiness;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A supervisor with one healthy task beside `failing`, run until `failing` ends;
    /// returns the result, whether "resign" ran, and readiness afterwards.
    async fn run_with(
        failing: impl Future<Output = Result<(), TaskError>> + Send + 'static,
    ) -> (Result<(), SupervisorError>, bool, bool) {
        let mut tasks = Supervisor::new();
        tasks.spawn_forever("healthy", std::future::pending());
        tasks.spawn("flaky", failing);
        let ready = Readiness::default();
        ready.set(true);
        let resigned = Arc::new(AtomicBool::new(false));
        let result = tasks
            .run_until(std::future::pending(), async |_| {
                ready.set(false);
                resigned.store(true, Ordering::SeqCst);
            })
            .await;
        (result, resigned.load(Ordering::SeqCst), ready.get())
    }

    #[tokio::test]
    async fn a_task_that_panics_stops_the_hub_naming_the_task() {
        let (result, resigned, ready) = run_with(async { panic!("controller blew up") }).await;
        let err = result.unwrap_err();
        assert_eq!(err.task(), "flaky");
        assert!(matches!(err, SupervisorError::Panicked { .. }), "{err}");
        assert!(err.to_string().contains("controller blew up"), "{err}");
        assert!(resigned, "leadership is given up");
        assert!(!ready, "the replica is not ready any more");
    }

    #[tokio::test]
    async fn a_task_that_returns_stops_the_hub_naming_the_task() {
        let (result, resigned, ready) = run_with(async { Ok(()) }).await;
        let err = result.unwrap_err();
        assert!(
            matches!(err, SupervisorError::Ended { task: "flaky" }),
            "{err}"
        );
        assert!(resigned && !ready);
    }

    #[tokio::test]
    async fn a_task_that_fails_stops_the_hub_with_its_error() {
        let (result, resigned, _) = run_with(async { Err("etcd went away".into()) }).await;
        let err = result.unwrap_err();
        assert_eq!(err.task(), "flaky");
        assert_eq!(
            std::error::Error::source(&err).unwrap().to_string(),
            "etcd went away"
        );
        assert!(resigned);
    }

    #[tokio::test]
    async fn shutdown_stops_the_hub_without_an_error() {
        let mut tasks = Supervisor::new();
        tasks.spawn_forever("healthy", std::future::pending());
        let stopped = AtomicBool::new(false);
        let result = tasks
            .run_until(async {}, async |exit| {
                assert!(exit.is_none());
                stopped.store(true, Ordering::SeqCst);
            })
            .await;
        assert!(result.is_ok());
        assert!(stopped.load(Ordering::SeqCst));
    }
}
