//! The pace of a Kafka enforcer's observer, the same for topics and users: a look every
//! resync interval (or when the target changes or the observer is nudged), a backoff after a
//! failed look, and quick looks while an applied change does not show in Kafka yet.

use std::time::Duration;

use accord_common::runtime::{Retry, backoff};
use tokio::sync::{Notify, watch};

use crate::enforce::{EventSink, WatchEvent};

/// The first retry of a failed look; later ones back off up to the resync interval.
pub const FIRST_RETRY: Duration = Duration::from_millis(500);
/// The interval of looks while an applied change does not show in Kafka yet.
pub const SETTLING: Duration = Duration::from_millis(200);
/// Looks an applied change may take to show before its object is judged anyway (and the
/// same plan may be sent again: a broker that acknowledged a CreateTopics sometimes lists
/// the topic only once the create is sent again, answered `TOPIC_ALREADY_EXISTS`).
pub const SETTLING_LOOKS: u32 = 25;

/// The wait after a failed look: a backoff from [`FIRST_RETRY`] that `retry` keeps until a
/// look succeeds (then set it to `None`), never longer than `resync`.
pub fn after_failure(retry: &mut Option<Retry>, resync: Duration) -> Duration {
    retry
        .get_or_insert_with(|| backoff(FIRST_RETRY, resync.max(FIRST_RETRY)))
        .next_delay()
        .min(resync)
}

/// Tells the engine what a look found; false once the engine is gone.
pub async fn tell(events: &EventSink, found: Vec<WatchEvent>) -> bool {
    for event in found {
        if !events.send(event).await {
            return false;
        }
    }
    true
}

/// Waits for the next look: the target changing, a nudge, or `delay` passing; false once
/// the enforcer that publishes the target is gone.
pub async fn until_next<T>(
    target: &mut watch::Receiver<T>,
    nudge: &Notify,
    delay: Duration,
) -> bool {
    tokio::select! {
        changed = target.changed() => changed.is_ok(),
        () = nudge.notified() => true,
        () = tokio::time::sleep(delay) => true,
    }
}
