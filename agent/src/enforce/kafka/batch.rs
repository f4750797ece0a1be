//! How a Kafka applier gathers the plans of many placed objects into one round of requests. The
//! engine applies per placed object; plans queued within a few milliseconds of each other (an
//! Assignments message with a thousand placed objects arrives as a thousand applies back to back)
//! go out together, one request of each kind Kafka's protocol batches.

use std::sync::Arc;
use std::time::Duration;

use accord_kafka::Admin;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::enforce::{ApplyError, ApplyErrorKind};

/// How long after the latest plan the applier waits for another to join its requests
/// (the engine issues the applies of one Assignments message back to back).
pub const COALESCE: Duration = Duration::from_millis(10);
/// How long after the first plan the applier sends its requests at the latest.
pub const COALESCE_MAX: Duration = Duration::from_millis(100);
/// Plans in one round at most (bounds the size of one request).
pub const MAX_BATCH: usize = 2000;

/// One item's plan (a topic's, a user's) and where its result goes.
pub struct Request<P> {
    /// The item's name in Kafka.
    pub name: String,
    /// What to do to it.
    pub plan: P,
    /// The result of the apply.
    pub reply: oneshot::Sender<Result<(), ApplyError>>,
}

/// The applier's loop: each round of `requests` goes to `execute` with the admin of the
/// target published now (`admin_of`), or is answered "no Kafka connection" without one;
/// the observer is nudged after each round. Ends when every sender is gone.
pub async fn apply_rounds<T, P, F>(
    mut requests: mpsc::UnboundedReceiver<Request<P>>,
    target: watch::Receiver<T>,
    admin_of: fn(&T) -> Option<Admin>,
    nudge: Arc<Notify>,
    execute: impl Fn(Admin, Vec<Request<P>>) -> F,
) where
    F: Future<Output = ()>,
{
    while let Some(round) = next_round(&mut requests).await {
        let admin = admin_of(&target.borrow());
        match admin {
            Some(admin) => execute(admin, round).await,
            None => {
                for request in round {
                    let _ = request.reply.send(Err(ApplyError::new(
                        ApplyErrorKind::Unavailable,
                        "no Kafka connection",
                    )));
                }
            }
        }
        nudge.notify_one();
    }
}

/// The next round: waits for a first request, then takes those that follow it within
/// [`COALESCE`] of each other, for [`COALESCE_MAX`] and [`MAX_BATCH`] requests at most.
/// `None` once every sender is gone.
pub async fn next_round<T>(requests: &mut mpsc::UnboundedReceiver<T>) -> Option<Vec<T>> {
    let first = requests.recv().await?;
    let mut batch = vec![first];
    let latest = Instant::now() + COALESCE_MAX;
    while batch.len() < MAX_BATCH {
        let until = latest.min(Instant::now() + COALESCE);
        match tokio::time::timeout_at(until, requests.recv()).await {
            Ok(Some(request)) => batch.push(request),
            Ok(None) | Err(_) => break,
        }
    }
    Some(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn requests_close_together_share_a_round_and_a_gap_starts_the_next() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for i in 0..3 {
            tx.send(i).unwrap();
        }
        let sender = tokio::spawn(async move {
            tokio::time::sleep(COALESCE / 2).await;
            tx.send(3).unwrap();
            // Longer than COALESCE after the last one: the next round.
            tokio::time::sleep(COALESCE * 3).await;
            tx.send(4).unwrap();
        });
        assert_eq!(next_round(&mut rx).await, Some(vec![0, 1, 2, 3]));
        assert_eq!(next_round(&mut rx).await, Some(vec![4]));
        sender.await.unwrap();
        assert_eq!(next_round(&mut rx).await, None, "every sender gone");
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_trickle_is_cut_at_the_longest_wait() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let started = Instant::now();
        let _sender = tokio::spawn(async move {
            for i in 0.. {
                if tx.send(i).is_err() {
                    return;
                }
                tokio::time::sleep(COALESCE / 2).await;
            }
        });
        let round = next_round(&mut rx).await.unwrap();
        let took = started.elapsed();
        assert!(
            took >= COALESCE_MAX && took < COALESCE_MAX + COALESCE,
            "{took:?}"
        );
        // One every COALESCE / 2 for COALESCE_MAX: the one sent right at the end may or
        // may not make it.
        assert!((20..=21).contains(&round.len()), "{}", round.len());
    }
}
