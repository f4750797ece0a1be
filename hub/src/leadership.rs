//! Runs leader-only work: started when this replica becomes the leader, stopped when it
//! is deposed, restarted (after a pause) if it ends on its own while still leading.

use std::future::Future;
use std::time::Duration;
use tracing::{info, warn};

use crate::store::election::LeaderElection;

/// Pause before leader-only work that ended on its own is started again.
const RESTART_DELAY: Duration = Duration::from_secs(1);

/// Runs `work` whenever this replica leads; `what` names it in logs, and `on_change` is told
/// each time leadership is gained or lost.
pub async fn while_leading<F, Fut>(
    election: &LeaderElection,
    what: &str,
    on_change: impl Fn(bool),
    mut work: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut leadership = election.subscribe();
    loop {
        let leading = leadership.borrow_and_update().is_some();
        on_change(leading);
        if !leading {
            if leadership.changed().await.is_err() {
                return;
            }
            continue;
        }
        info!("leading: {what}");
        let deposed = async {
            while leadership.changed().await.is_ok() {
                if leadership.borrow().is_none() {
                    return;
                }
            }
        };
        tokio::select! {
            result = work() => {
                match result {
                    Ok(()) => warn!("{what} stopped; restarting"),
                    Err(e) => warn!(error = %e, "{what} failed; restarting"),
                }
                tokio::time::sleep(RESTART_DELAY).await;
            }
            () = deposed => info!("no longer leading: {what}"),
        }
    }
}
