//! Deletion that waits for the members, a capability a kind opts into by implementing
//! [`Tombstoned`] and finishing its [`PlacementKind::finalize`] with [`finalize`].
//!
//! The object's placements record becomes a tombstone (written once: every cluster that
//! was sent something is now told to remove it), and the object is released when every such
//! cluster reported it removed for the tombstone's revision, or no longer exists, or the
//! bound from the object's `deletionTimestamp` passed (a Warning Event then names the
//! clusters left behind). Meanwhile the kind may show the deletion in its status
//! ([`Tombstoned::deleting_status`], with [`deleting_condition`]). Reads only metadata and
//! the record, so an object that does not decode is deleted too.

use std::time::Duration;

use accord_crds::conditions::{self, Desired, Status, types};
use k8s_openapi::jiff::Timestamp;
use kube::Resource as _;
use tracing::{debug, info, warn};

use super::placement::{self, Finalized, Note, PlacementKind, Watched};
use super::{ControllerContext, ReconcileError};
use crate::distribution::PlacementRecord;
use crate::distribution::deletion::Progress;
use crate::store::StatusRecord;
use crate::writes::Pace;

/// What a kind whose deletion waits for the members says about it.
pub trait Tombstoned: PlacementKind {
    /// Whether a stored record is a tombstone already.
    fn is_tombstone(record: &PlacementRecord<Self::Decision>) -> bool;

    /// The tombstone of a record: only the clusters that were sent something, each told to
    /// remove it; `None` when no cluster was sent anything.
    fn tombstone(
        record: &PlacementRecord<Self::Decision>,
    ) -> Option<PlacementRecord<Self::Decision>>;

    /// Whether a member's report says everything it was sent is removed.
    fn is_gone(report: &StatusRecord) -> bool;

    /// The bound after which the object is released anyway.
    fn deletion_timeout(&self) -> Duration;

    /// The Event when no cluster was ever sent anything (none by default).
    fn nothing_sent(&self, _object: &Watched<Self>) -> Option<Note> {
        None
    }

    /// The Event once every member removed what it was sent.
    fn removed(&self, object: &Watched<Self>, tombstone: &PlacementRecord<Self::Decision>) -> Note;

    /// How the Warning once the bound passed names what the members were sent.
    fn removal(
        &self,
        object: &Watched<Self>,
        tombstone: &PlacementRecord<Self::Decision>,
    ) -> Removal;

    /// The status while the deletion waits for `left` (re-checked within `recheck`), or
    /// `None` to leave the status as it is (the default).
    fn deleting_status(
        &self,
        _object: &Self::Object,
        _tombstone: &PlacementRecord<Self::Decision>,
        _revision: i64,
        _left: &[String],
        _recheck: Duration,
    ) -> Option<Self::Status> {
        None
    }
}

/// How a Warning names what the members were sent, e.g. `topic orders was`, `deleted`,
/// `the topic`: "topic orders was not confirmed deleted within 300s in cluster east; the
/// FederatedKafkaTopic is released and the topic may remain there".
pub struct Removal {
    /// The sentence's subject with its verb: `topic orders was`, `the delivered objects
    /// were`.
    pub subject: String,
    /// What removed means for it: `deleted`, `removed`.
    pub gone: &'static str,
    /// How the rest of the sentence names it: `the topic`, `the objects`.
    pub it: &'static str,
}

impl Removal {
    /// The Warning's message once `timeout` passed with the clusters `left` not done, for
    /// an object of `kind`.
    pub fn left_behind(&self, kind: &str, timeout: Duration, left: &[String]) -> String {
        format!(
            "{} not confirmed {} within {}s in cluster{} {}; the {kind} is released and {} may \
             remain there",
            self.subject,
            self.gone,
            timeout.as_secs(),
            if left.len() == 1 { "" } else { "s" },
            crate::distribution::reported::named(left, ", "),
            self.it
        )
    }
}

/// `Ready=False`/`Deleting` while a deletion waits: `doing` (e.g. "deleting the topic in
/// every member") and the clusters `left`, released anyway within `recheck`.
pub fn deleting_condition(doing: &str, left: &[String], recheck: Duration) -> Desired {
    Desired::new(
        types::READY,
        Status::False,
        super::transitions::reasons::DELETING,
        format!(
            "{doing}; waiting for {} (released anyway within {}s)",
            crate::distribution::reported::named(left, ", "),
            recheck.as_secs().max(1)
        ),
    )
}

/// The deletion of `object` that waits for the members: the tombstone is sent once, and
/// the object is released when every member is done or the bound passed.
pub async fn finalize<K: Tombstoned>(
    kind: &K,
    ctx: &ControllerContext,
    object: &Watched<K>,
    record: Option<(PlacementRecord<K::Decision>, i64)>,
) -> Result<Finalized, ReconcileError> {
    let p = placement::placed_ref::<K>(object);
    let reference = object.object_ref(&());
    let sent = match record {
        Some((record, revision)) if K::is_tombstone(&record) => Some((record, revision)),
        Some((record, _)) => match K::tombstone(&record) {
            Some(t) => {
                let revision = placement::write_record::<K>(ctx, &t).await?;
                info!(placed = %t.placed, revision, "removing what the members were sent");
                Some((t, revision))
            }
            None => None,
        },
        None => None,
    };
    let Some((tombstone, revision)) = sent else {
        if let Some(note) = kind.nothing_sent(object) {
            ctx.note(&reference, note);
        }
        return Ok(Finalized::Done);
    };
    let clusters = placement::clusters(ctx);
    let left = crate::distribution::deletion::remaining(
        &tombstone,
        revision,
        &placement::reports(ctx, &tombstone),
        |c| clusters.contains_key(c),
        K::is_gone,
    );
    let since = object.metadata.deletion_timestamp.as_ref().map_or_else(
        || Timestamp::now().as_millisecond(),
        |t| t.0.as_millisecond(),
    );
    let timeout = kind.deletion_timeout();
    match crate::distribution::deletion::progress(
        left,
        since,
        Timestamp::now().as_millisecond(),
        timeout,
    ) {
        Progress::Done => {
            info!(placed = %p, "what the members were sent is removed in every member");
            ctx.note(&reference, kind.removed(object, &tombstone));
            Ok(Finalized::Done)
        }
        Progress::Waiting { left, recheck } => {
            debug!(placed = %p, ?left, "waiting for members to remove what they were sent");
            show_deletion(kind, ctx, object, &tombstone, revision, &left, recheck)?;
            Ok(Finalized::Waiting(recheck))
        }
        Progress::TimedOut { left } => {
            let note =
                kind.removal(object, &tombstone)
                    .left_behind(K::KIND.as_str(), timeout, &left);
            warn!(placed = %p, ?left, "{note}");
            ctx.note(
                &reference,
                Note::warning(super::transitions::reasons::DELETION_INCOMPLETE, note),
            );
            Ok(Finalized::Done)
        }
    }
}

/// Shows a waiting deletion in the status, when the kind does: written when anything but
/// the countdown in `Ready`'s message changed. An object that does not decode keeps the
/// status it has.
fn show_deletion<K: Tombstoned>(
    kind: &K,
    ctx: &ControllerContext,
    watched: &Watched<K>,
    tombstone: &PlacementRecord<K::Decision>,
    revision: i64,
    left: &[String],
    recheck: Duration,
) -> Result<(), ReconcileError> {
    let Ok(object) = watched.decode() else {
        return Ok(());
    };
    let Some(status) = kind.deleting_status(&object, tombstone, revision, left, recheck) else {
        return Ok(());
    };
    let quiet = |s: &K::Status| {
        let mut s = s.clone();
        for c in K::conditions(&mut s)
            .iter_mut()
            .filter(|c| c.type_ == types::READY)
        {
            c.message.clear();
        }
        s
    };
    if K::status(&object).is_some_and(|old| !K::status_changed(Some(&quiet(old)), &quiet(&status)))
    {
        return Ok(());
    }
    let desired = serde_json::to_value(&status).map_err(crate::store::StoreError::Encode)?;
    let current = watched.data.get("status").cloned().unwrap_or_default();
    ctx.submit_status(watched, current, desired, Pace::Prompt);
    Ok(())
}

/// Merges `condition` into `status`'s conditions for `generation`, as of now.
pub fn with_condition<K: PlacementKind>(
    mut status: K::Status,
    condition: Desired,
    generation: Option<i64>,
) -> K::Status {
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now());
    let merged = conditions::merge(K::conditions(&mut status), &[condition], generation, &now);
    *K::conditions(&mut status) = merged;
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warning_names_what_was_left_the_clusters_and_the_bound() {
        let removal = Removal {
            subject: "topic events was".into(),
            gone: "deleted",
            it: "the topic",
        };
        assert_eq!(
            removal.left_behind(
                "FederatedKafkaTopic",
                Duration::from_secs(300),
                &["b".into(), "c".into()]
            ),
            "topic events was not confirmed deleted within 300s in clusters b, c; the \
             FederatedKafkaTopic is released and the topic may remain there"
        );
        assert!(
            removal
                .left_behind("FederatedKafkaTopic", Duration::from_secs(1), &["b".into()])
                .contains("in cluster b;")
        );
    }

    #[test]
    fn a_waiting_deletion_names_the_clusters_left_and_the_bound() {
        let d = deleting_condition(
            "deleting the topic in every member",
            &["b".to_owned(), "c".to_owned()],
            Duration::from_secs(42),
        );
        assert_eq!(d.status, Status::False);
        assert_eq!(d.reason, "Deleting");
        assert!(
            d.message
                .starts_with("deleting the topic in every member; ")
                && d.message.contains("waiting for b, c")
                && d.message.contains("42s"),
            "{}",
            d.message
        );
    }
}
