//! Deletion that waits for the members, a capability a kind opts into by implementing
//! [`Tombstoned`] and writing `tombstones::tombstoned!();` in its `impl PlacementKind`.
//!
//! The object's placements record becomes a tombstone (written once: every cluster that
//! was sent something is now told to remove it), and the object is released when every such
//! cluster reported it removed for the tombstone's revision, or no longer exists, or the
//! bound from the object's `deletionTimestamp` passed (a Warning Event then names the
//! clusters left behind). Meanwhile the kind may show the deletion in its status
//! ([`Tombstoned::DELETING`]). Reads only metadata and the record, so an object that does
//! not decode is deleted too.

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

/// What a kind whose deletion waits for the members says about it. The kind's
/// [`PlacementKind::finalizer`] and [`PlacementKind::finalize`] are this capability's
/// ([`tombstoned!`](crate::controllers::tombstones::tombstoned) writes them).
pub trait Tombstoned: PlacementKind {
    /// The finalizer an object whose deletion waits holds.
    const FINALIZER: &'static str;

    /// What `Ready` says while the members remove what they were sent (e.g. "deleting the
    /// topic in every member"): the status then shows each member's placement as its agent
    /// reports the tombstone ([`PlacementKind::status_of`] of the tombstone, with the
    /// kind's default facts). `None` leaves the status as it is.
    const DELETING: Option<&'static str> = None;

    /// Conditions the status drops while the deletion waits (what no longer matters).
    const DELETING_DROPS: &'static [&'static str] = &[];

    /// The controller's context (the records, reports and clusters the deletion reads).
    fn context(&self) -> &ControllerContext;

    /// Whether deleting `object` waits for the members (it then holds
    /// [`Self::FINALIZER`]); read from the object as stored. Always, by default.
    fn waits(_object: &Watched<Self>) -> bool {
        true
    }

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

    /// How the Events name what the members were sent and its removal.
    fn removal(
        &self,
        object: &Watched<Self>,
        tombstone: &PlacementRecord<Self::Decision>,
    ) -> Removal;
}

/// The bound a deletion waits for the members by default (its flag's default, `5m`).
pub const DEFAULT_DELETION_TIMEOUT: Duration = Duration::from_secs(300);

/// Declares a [`Tombstoned`] kind's `serve` settings: a clap `Args` struct whose
/// `deletion_timeout` is the flag `--<flag>` (default [`DEFAULT_DELETION_TIMEOUT`]), with
/// the struct's and the flag's documentation (the flag's is its `--help`).
macro_rules! deletion_options {
    (
        $(#[$doc:meta])*
        pub struct $name:ident;
        $(#[$flag_doc:meta])*
        flag = $flag:literal,
        id = $id:literal,
        value_name = $value_name:literal;
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, clap::Args)]
        pub struct $name {
            $(#[$flag_doc])*
            #[arg(
                id = $id,
                value_name = $value_name,
                long = $flag,
                default_value = "5m",
                value_parser = accord_crds::duration::parse_flag
            )]
            pub deletion_timeout: std::time::Duration,
        }

        impl Default for $name {
            fn default() -> Self {
                Self {
                    deletion_timeout: $crate::controllers::tombstones::DEFAULT_DELETION_TIMEOUT,
                }
            }
        }
    };
}
pub(crate) use deletion_options;

/// Writes a [`Tombstoned`] kind's [`PlacementKind::finalizer`] and
/// [`PlacementKind::finalize`], inside its `impl PlacementKind` block.
#[macro_export]
macro_rules! tombstoned {
    () => {
        fn finalizer(
            object: &$crate::controllers::placement::Watched<Self>,
        ) -> Option<&'static str> {
            <Self as $crate::controllers::tombstones::Tombstoned>::waits(object)
                .then_some(<Self as $crate::controllers::tombstones::Tombstoned>::FINALIZER)
        }

        /// The deletion waits for the members
        /// ([`finalize`](crate::controllers::tombstones::finalize)).
        fn finalize(
            &self,
            object: &$crate::controllers::placement::Watched<Self>,
            record: Option<($crate::distribution::PlacementRecord<Self::Decision>, i64)>,
        ) -> impl std::future::Future<
            Output = Result<
                $crate::controllers::placement::Finalized,
                $crate::controllers::ReconcileError,
            >,
        > + Send {
            $crate::controllers::tombstones::finalize(self, object, record)
        }
    };
}
pub use crate::tombstoned;

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
    /// The Event once every member removed what it was sent.
    pub done: Note,
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
fn deleting_condition(doing: &str, left: &[String], recheck: Duration) -> Desired {
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
    object: &Watched<K>,
    record: Option<(PlacementRecord<K::Decision>, i64)>,
) -> Result<Finalized, ReconcileError> {
    let ctx = kind.context();
    let p = placement::placed_ref::<K>(object);
    let reference = object.object_ref(&());
    let sent = match record {
        Some((record, revision)) if K::is_tombstone(&record) => Some((record, revision)),
        Some((record, _)) => match K::tombstone(&record) {
            Some(mut t) => {
                let revision = placement::write_record::<K>(ctx, &mut t).await?;
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
            ctx.note(&reference, kind.removal(object, &tombstone).done);
            Ok(Finalized::Done)
        }
        Progress::Waiting { left, recheck } => {
            debug!(placed = %p, ?left, "waiting for members to remove what they were sent");
            show_deletion(kind, object, &tombstone, revision, &left, recheck).await?;
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

/// Shows a waiting deletion in the status, when the kind does ([`Tombstoned::DELETING`]):
/// the kind's status of the tombstone as the members report it, with `Ready=False`/
/// `Deleting` naming the members `left`; written when anything but the countdown in
/// `Ready`'s message changed. An object that does not decode keeps the status it has.
async fn show_deletion<K: Tombstoned>(
    kind: &K,
    watched: &Watched<K>,
    tombstone: &PlacementRecord<K::Decision>,
    revision: i64,
    left: &[String],
    recheck: Duration,
) -> Result<(), ReconcileError> {
    let Some(doing) = K::DELETING else {
        return Ok(());
    };
    let Ok(object) = watched.decode() else {
        return Ok(());
    };
    let ctx = kind.context();
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now());
    let (reports, clusters) = (placement::reports(ctx, tombstone), placement::clusters(ctx));
    let input = placement::StatusInput {
        record: Some(tombstone),
        revision,
        shares: &tombstone.shares,
        reports: &reports,
        clusters: &clusters,
        facts: K::Facts::default(),
        decided_at: &now,
        now: &now,
    };
    let shown = kind.status_of(&object, input).await?.status;
    let generation = object.meta().generation;
    let mut status =
        with_condition::<K>(shown, deleting_condition(doing, left, recheck), generation);
    K::conditions(&mut status).retain(|c| !K::DELETING_DROPS.contains(&c.type_.as_str()));
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
fn with_condition<K: PlacementKind>(
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

    deletion_options! {
        /// Settings of a test kind.
        pub struct TestOptions;
        /// The test flag.
        flag = "test-deletion-timeout",
        id = "test_deletion_timeout",
        value_name = "T";
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        options: TestOptions,
    }

    #[test]
    fn the_flag_defaults_to_the_default_and_parses_durations() {
        use clap::Parser as _;
        let default = Cli::parse_from(["hub"]).options;
        assert_eq!(
            default.deletion_timeout,
            TestOptions::default().deletion_timeout
        );
        assert_eq!(default.deletion_timeout, DEFAULT_DELETION_TIMEOUT);
        let set = Cli::parse_from(["hub", "--test-deletion-timeout", "90s"]).options;
        assert_eq!(set.deletion_timeout, Duration::from_secs(90));
        assert!(Cli::try_parse_from(["hub", "--test-deletion-timeout", "soon"]).is_err());
    }

    #[test]
    fn the_warning_names_what_was_left_the_clusters_and_the_bound() {
        let removal = Removal {
            subject: "topic events was".into(),
            gone: "deleted",
            it: "the topic",
            done: Note::normal("Deleted", "topic events deleted in every member"),
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
