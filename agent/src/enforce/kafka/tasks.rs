//! What a Kafka enforcer runs while it has work: its observer, its applier and its probe,
//! which share one target (the connection and what is assigned, published by the enforcer)
//! and one queue of plans (filled by the enforcer's applies, emptied by the applier a round
//! at a time). Dropping [`Tasks`] stops all three.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accord_common::runtime::AbortOnDrop;
use futures::future::BoxFuture;
use tokio::sync::{Notify, mpsc, oneshot, watch};

use super::KafkaOptions;
use super::probe::{self, Endpoint, Probed};
use crate::enforce::{ApplyError, ApplyErrorKind, EventSink};
use crate::metrics::Metrics;

/// Where an applier sends one plan's result.
pub type Reply = oneshot::Sender<Result<(), ApplyError>>;

/// What one enforcer's tasks share besides their target: its observations `O`, the nudge
/// that has its observer look again, its options and its metrics.
pub struct Crew<O> {
    /// The observations the observer writes, the applier notes its plans in, the probe
    /// records its verdict in and the judge reads.
    pub shared: Arc<Mutex<O>>,
    /// Has the observer look now (after applies, when Kafka answers its probe again).
    pub nudge: Arc<Notify>,
    /// The resync interval and the probe's.
    pub options: KafkaOptions,
    /// Where Kafka requests are counted.
    pub metrics: Metrics,
}

/// The running tasks of one Kafka enforcer, for targets `T` and plan requests `R`.
pub struct Tasks<T, R> {
    target: watch::Sender<T>,
    /// Unbounded: at most one plan per assigned placed object is ever waiting (the engine applies
    /// one at a time per placed object), and queuing without waiting lets the applies of one
    /// engine pass join the same requests.
    applies: mpsc::UnboundedSender<R>,
    _observer: AbortOnDrop,
    _applier: AbortOnDrop,
    _prober: AbortOnDrop,
}

impl<T, R> Tasks<T, R>
where
    T: Endpoint + Send + Sync + 'static,
    R: Send + 'static,
{
    /// Starts the enforcer's `observer` and `applier` (its own `run` functions) and the
    /// shared liveness probe, each with its end of the target (first `target`), the applier
    /// with the queue of plans; their events go to `events`.
    pub fn spawn<O, Ob, Ap>(
        target: T,
        events: &EventSink,
        crew: Crew<O>,
        observer: impl FnOnce(
            watch::Receiver<T>,
            Arc<Notify>,
            Arc<Mutex<O>>,
            EventSink,
            Duration,
            Metrics,
        ) -> Ob,
        applier: impl FnOnce(
            mpsc::UnboundedReceiver<R>,
            watch::Receiver<T>,
            Arc<Mutex<O>>,
            Arc<Notify>,
            Metrics,
        ) -> Ap,
    ) -> Self
    where
        O: Probed,
        Ob: Future<Output = ()> + Send + 'static,
        Ap: Future<Output = ()> + Send + 'static,
    {
        let Crew {
            shared,
            nudge,
            options,
            metrics,
        } = crew;
        let (target, target_rx) = watch::channel(target);
        let (applies, applies_rx) = mpsc::unbounded_channel();
        let observer = observer(
            target_rx.clone(),
            nudge.clone(),
            shared.clone(),
            events.clone(),
            options.resync,
            metrics.clone(),
        );
        let prober = probe::run(
            target_rx.clone(),
            shared.clone(),
            nudge.clone(),
            events.clone(),
            options.probe,
            metrics.clone(),
        );
        let applier = applier(applies_rx, target_rx, shared, nudge, metrics);
        Self {
            target,
            applies,
            _observer: AbortOnDrop(tokio::spawn(observer)),
            _applier: AbortOnDrop(tokio::spawn(applier)),
            _prober: AbortOnDrop(tokio::spawn(prober)),
        }
    }

    /// Tells the tasks the current connection and what is assigned.
    pub fn publish(&self, target: T) {
        self.target.send_replace(target);
    }

    /// Queues the plan `request` builds (now, while the engine is still issuing the applies
    /// of its pass) and answers the apply's result: on success a version no look hands out
    /// (`applied-after-<version>`, the version the plan was decided on), so the engine waits
    /// for the observer's next look.
    pub fn apply(
        &self,
        request: impl FnOnce(Reply) -> R,
        version: u64,
    ) -> BoxFuture<'static, Result<String, ApplyError>> {
        let stopped = || ApplyError::new(ApplyErrorKind::Unavailable, "the Kafka applier stopped");
        let (reply, answer) = oneshot::channel();
        if self.applies.send(request(reply)).is_err() {
            return Box::pin(std::future::ready(Err(stopped())));
        }
        Box::pin(async move {
            answer.await.map_err(|_| stopped())??;
            Ok(format!("applied-after-{version}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enforce::kafka::probe::ProbeState;

    /// A target without a connection: the probe has nothing to do.
    struct Unconnected;

    impl Endpoint for Unconnected {
        fn endpoint(&self) -> Option<(u64, Arc<accord_kafka::KafkaConfig>)> {
            None
        }
    }

    #[derive(Default)]
    struct Seen(ProbeState);

    impl Probed for Seen {
        fn probe_state(&mut self) -> &mut ProbeState {
            &mut self.0
        }
    }

    /// Tasks whose applier answers each request with `answer` (dropping it unanswered and
    /// stopping on `None`).
    fn tasks(
        answer: fn(u32) -> Option<Result<(), ApplyError>>,
    ) -> Tasks<Unconnected, (u32, Reply)> {
        let (tx, _rx) = mpsc::channel(1);
        let crew = Crew {
            shared: Arc::new(Mutex::new(Seen::default())),
            nudge: Arc::new(Notify::new()),
            options: KafkaOptions::default(),
            metrics: Metrics::new(),
        };
        Tasks::spawn(
            Unconnected,
            &EventSink::new(tx, "test"),
            crew,
            |_, _, _, _, _, _| std::future::pending(),
            move |mut applies: mpsc::UnboundedReceiver<(u32, Reply)>, _, _, _, _| async move {
                while let Some((n, reply)) = applies.recv().await {
                    let Some(result) = answer(n) else {
                        return;
                    };
                    let _ = reply.send(result);
                }
            },
        )
    }

    #[tokio::test]
    async fn an_apply_answers_the_appliers_result_and_a_version_no_look_hands_out() {
        let tasks = tasks(|n| {
            Some(if n == 0 {
                Err(ApplyError::new(ApplyErrorKind::Invalid, "refused"))
            } else {
                Ok(())
            })
        });
        assert_eq!(
            tasks.apply(|reply| (1, reply), 7).await,
            Ok("applied-after-7".to_owned())
        );
        let e = tasks.apply(|reply| (0, reply), 8).await.unwrap_err();
        assert_eq!(e.kind, ApplyErrorKind::Invalid);
    }

    #[tokio::test]
    async fn an_apply_after_the_applier_stopped_is_unavailable() {
        let tasks = tasks(|_| None);
        for version in [1, 2] {
            // The first is dropped unanswered, the second finds the applier gone.
            let e = tasks.apply(|reply| (0, reply), version).await.unwrap_err();
            assert_eq!(e.kind, ApplyErrorKind::Unavailable);
            assert_eq!(e.message, "the Kafka applier stopped");
        }
    }
}
