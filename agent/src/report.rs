//! What the agent tells the hub about one placed object ([`Report`], the same shape for every
//! kind), and the optimistic concurrency of those reports, per placed object. Pure: the engine
//! feeds it what it sent and what the hub answered, and asks whether a fresh observation
//! should go out.
//!
//! The hub keeps one status record per (cluster, placed object) and writes a report only when its
//! `expected_version` is the record's current version and the report is not older than
//! the record. So the agent keeps the last accepted version; on `conflict` it takes the
//! hub's current version and sends a fresh observation. If the hub refused a report whose
//! version was already current, the report was older than the record: the agent sends
//! again only once it has something different to say. Consecutive conflicts are bounded.

use accord_common::distribution::{Observed, PlacementState};

/// One observation of a placed object's object, without the time it was made or the hub record
/// it supersedes; two equal reports say the same thing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Placement state.
    pub state: PlacementState,
    /// Detail for the state.
    pub message: String,
    /// `metadata.resourceVersion` of the object, or the kind's own version ("" when none).
    pub resource_version: String,
    /// `metadata.generation` of the object (0 when there is none).
    pub generation: i64,
    /// What was observed, in the kind's own terms.
    pub observed: Observed,
    /// Revision of the assignment the agent held.
    pub applied_revision: i64,
    /// The member's API server failed its `/readyz` probe when this was observed (the
    /// engine sets it, and the state is then `Unavailable`).
    pub api_server_unavailable: bool,
}

impl Report {
    /// A report about an object the agent cannot look at (or that does not exist).
    pub fn without_object(state: PlacementState, message: String, applied_revision: i64) -> Self {
        Self {
            state,
            message,
            resource_version: String::new(),
            generation: 0,
            observed: Observed::Nothing,
            applied_revision,
            api_server_unavailable: false,
        }
    }
}

/// Consecutive conflicts for one placed object before the agent waits for the next change.
pub const MAX_CONFLICTS: u32 = 5;

/// What to do after a conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterConflict {
    /// The expected version was stale: send a fresh observation now.
    Resend,
    /// The report was older than the hub's record: send again only if a fresh observation
    /// differs from the refused one ([`ReportTracker::wants`] says so).
    ResendIfNewer,
    /// Too many conflicts in a row: wait for the next change.
    GiveUp,
}

/// A report waiting for its StatusAck.
#[derive(Clone, Debug, PartialEq, Eq)]
struct InFlight {
    report: Report,
    expected_version: i64,
}

/// The reporting state of one placed object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportTracker {
    expected_version: i64,
    accepted: Option<Report>,
    refused: Option<Report>,
    in_flight: Option<InFlight>,
    /// The report the conflicts were counted for.
    last_sent: Option<Report>,
    conflicts: u32,
}

impl ReportTracker {
    /// The version of the hub's record the next report supersedes.
    pub fn expected_version(&self) -> i64 {
        self.expected_version
    }

    /// Whether a report is waiting for its StatusAck.
    pub fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// The last report the hub accepted.
    pub fn accepted(&self) -> Option<&Report> {
        self.accepted.as_ref()
    }

    /// Whether `current` says something the hub has not accepted (or refused) yet.
    pub fn wants(&self, current: &Report) -> bool {
        let told = match &self.in_flight {
            Some(flight) => Some(&flight.report),
            None => self.accepted.as_ref(),
        };
        told != Some(current) && self.refused.as_ref() != Some(current)
    }

    /// Records that `report` was sent; returns the expected version to send it with.
    pub fn sent(&mut self, report: Report) -> i64 {
        if self.last_sent.as_ref() != Some(&report) {
            self.conflicts = 0;
            self.last_sent = Some(report.clone());
        }
        self.refused = None;
        self.in_flight = Some(InFlight {
            report,
            expected_version: self.expected_version,
        });
        self.expected_version
    }

    /// The hub stored the report in flight at `version`.
    pub fn accepted_at(&mut self, version: i64) {
        self.expected_version = version;
        self.conflicts = 0;
        self.refused = None;
        if let Some(flight) = self.in_flight.take() {
            self.accepted = Some(flight.report);
        }
    }

    /// The hub refused the report in flight; `current` is its record's version.
    pub fn conflict(&mut self, current: i64) -> AfterConflict {
        let flight = self.in_flight.take();
        let stale = flight
            .as_ref()
            .is_none_or(|f| f.expected_version != current);
        self.expected_version = current;
        self.conflicts += 1;
        // Whatever the hub holds now, it is not known to be what was accepted before.
        self.accepted = None;
        if self.conflicts > MAX_CONFLICTS {
            self.refused = flight.map(|f| f.report);
            return AfterConflict::GiveUp;
        }
        if stale {
            AfterConflict::Resend
        } else {
            self.refused = flight.map(|f| f.report);
            AfterConflict::ResendIfNewer
        }
    }

    /// The stream ended: nothing is in flight any more and the hub (perhaps another hub
    /// replica) is to be told the latest observation again.
    pub fn reconnected(&mut self) {
        self.in_flight = None;
        self.last_sent = None;
        self.accepted = None;
        self.refused = None;
        self.conflicts = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::distribution::ScaleObserved;

    fn report(rv: &str) -> Report {
        Report {
            state: PlacementState::Synced,
            message: String::new(),
            resource_version: rv.into(),
            generation: 1,
            observed: Observed::Scale(ScaleObserved {
                scale_request_id: "r".into(),
                ..Default::default()
            }),
            applied_revision: 3,
            api_server_unavailable: false,
        }
    }

    #[test]
    fn the_first_report_expects_no_record_and_an_accept_sets_the_next_version() {
        let mut t = ReportTracker::default();
        assert!(t.wants(&report("1")));
        assert_eq!(t.sent(report("1")), 0);
        assert!(t.in_flight());
        assert!(!t.wants(&report("1")), "the same report is in flight");
        t.accepted_at(17);
        assert!(!t.in_flight());
        assert_eq!(t.expected_version(), 17);
        assert!(!t.wants(&report("1")), "the hub has it");
        assert!(t.wants(&report("2")));
        assert_eq!(t.sent(report("2")), 17);
    }

    #[test]
    fn a_stale_expected_version_is_replaced_by_the_current_one_and_resent() {
        let mut t = ReportTracker::default();
        t.sent(report("1"));
        assert_eq!(t.conflict(40), AfterConflict::Resend);
        assert_eq!(t.expected_version(), 40);
        assert!(t.wants(&report("1")), "the hub does not have it");
        assert_eq!(t.sent(report("1")), 40);
        t.accepted_at(41);
        assert_eq!(t.expected_version(), 41);
    }

    #[test]
    fn a_report_older_than_the_record_is_resent_only_with_something_newer() {
        let mut t = ReportTracker::default();
        t.accepted_at(40);
        t.sent(report("1"));
        assert_eq!(t.conflict(40), AfterConflict::ResendIfNewer);
        assert!(!t.wants(&report("1")), "nothing new to say");
        assert!(t.wants(&report("2")));
    }

    #[test]
    fn conflicts_in_a_row_are_bounded() {
        let mut t = ReportTracker::default();
        let mut outcomes = Vec::new();
        for v in 1..=(MAX_CONFLICTS as i64 + 1) {
            t.sent(report("1"));
            outcomes.push(t.conflict(v * 10));
        }
        assert_eq!(outcomes.last(), Some(&AfterConflict::GiveUp));
        assert!(
            outcomes[..outcomes.len() - 1]
                .iter()
                .all(|o| *o == AfterConflict::Resend)
        );
        assert!(!t.wants(&report("1")), "gave up on this observation");
        assert!(t.wants(&report("2")), "a change is reported again");
        t.sent(report("2"));
        assert_eq!(t.conflict(1000), AfterConflict::Resend, "a fresh budget");
    }

    #[test]
    fn a_reconnect_forgets_what_was_in_flight_and_accepted() {
        let mut t = ReportTracker::default();
        t.sent(report("1"));
        t.accepted_at(5);
        t.sent(report("2"));
        t.reconnected();
        assert!(!t.in_flight());
        assert!(t.wants(&report("2")));
        assert_eq!(t.sent(report("2")), 5, "the last accepted version is kept");
    }
}
