//! Assignment bookkeeping: which placed objects this cluster holds, at which hub revision, and
//! how a full or delta Assignments message changes that. Pure and kind-neutral: no
//! Kubernetes, no gRPC, and no knowledge of what an assignment asks for.
//!
//! Rules (protocol `accord.v1`, see `docs/architecture.md`):
//! - an item is taken only if its revision is newer than the one held for its placed object;
//! - a full message is the complete set at its revision: a held placed object it does not list
//!   stops being managed, unless what is held is newer than the message;
//! - a delta's `removed` ends management of a placed object only if the removal's revision is
//!   newer than the one held for that placed object;
//! - the agent's last applied revision only grows — within one store epoch. Revisions only
//!   compare within one epoch of the hub's etcd keyspace: a message from another epoch (the
//!   store was restored and its revisions went backwards) makes the book forget every
//!   revision it holds before the message is applied, so a full set from the new epoch
//!   replaces everything.
//!
//! A placed object that stops being managed is simply forgotten: what it made in the cluster stays
//! as it is.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use accord_common::distribution::{AssignmentSpec, PlacedRef};
use serde::{Deserialize, Serialize};

/// One placed object's assignment as held by the agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assigned {
    /// Hub revision at which the assignment last changed.
    pub revision: i64,
    /// What the placed object asks of this cluster: shared, so the enforcers, the saved state and
    /// the book hold one copy, and an unchanged assignment is told by pointer, not by
    /// comparing what it holds (a thousand FederatedResources' manifests on every change).
    pub spec: Arc<AssignmentSpec>,
}

/// One assignment of an incoming message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incoming {
    /// The placed object.
    pub placed: PlacedRef,
    /// Hub revision at which it last changed.
    pub revision: i64,
    /// What it asks for.
    pub spec: AssignmentSpec,
}

/// An Assignments message in domain terms.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Update {
    /// Hub revision of the message.
    pub revision: i64,
    /// Whether `items` is the complete set.
    pub full: bool,
    /// Assignments added or changed.
    pub items: Vec<Incoming>,
    /// Placed objects whose assignment ended (deltas only).
    pub removed: Vec<Removed>,
    /// Store epoch the message's revisions belong to (0: the hub did not say).
    pub store_epoch: u64,
}

/// A placed object whose assignment ended, at `revision`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removed {
    /// The placed object.
    pub placed: PlacedRef,
    /// Hub revision at which its assignment ended.
    pub revision: i64,
}

/// What applying an [`Update`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Placed objects added or changed.
    pub upserted: Vec<PlacedRef>,
    /// Placed objects no longer managed.
    pub removed: Vec<PlacedRef>,
    /// Items skipped because the agent holds the same or a newer revision.
    pub stale: usize,
    /// The message came from another store epoch: every held revision was forgotten
    /// before it was applied.
    pub epoch_changed: bool,
}

impl Applied {
    /// Whether the set of managed placed objects changed.
    pub fn changed(&self) -> bool {
        !self.upserted.is_empty() || !self.removed.is_empty() || self.epoch_changed
    }
}

/// The assignments this cluster enforces.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AssignmentBook {
    last_applied_revision: i64,
    store_epoch: u64,
    placed: BTreeMap<PlacedRef, Assigned>,
}

impl AssignmentBook {
    /// A book holding `placed`, last applied at `last_applied_revision`.
    pub fn from_parts(
        last_applied_revision: i64,
        placed: impl IntoIterator<Item = (PlacedRef, Assigned)>,
    ) -> Self {
        Self {
            last_applied_revision,
            store_epoch: 0,
            placed: placed.into_iter().collect(),
        }
    }

    /// This book, its revisions belonging to store epoch `store_epoch`.
    pub fn with_store_epoch(mut self, store_epoch: u64) -> Self {
        self.store_epoch = store_epoch;
        self
    }

    /// Store epoch of the held revisions (0: not known, e.g. saved by an older agent).
    pub fn store_epoch(&self) -> u64 {
        self.store_epoch
    }

    /// Highest hub revision applied (0: none).
    pub fn last_applied_revision(&self) -> i64 {
        self.last_applied_revision
    }

    /// The managed placed objects.
    pub fn placed(&self) -> &BTreeMap<PlacedRef, Assigned> {
        &self.placed
    }

    /// One placed object's assignment.
    pub fn get(&self, placed: &PlacedRef) -> Option<&Assigned> {
        self.placed.get(placed)
    }

    /// Applies an Assignments message and says what changed.
    pub fn apply(&mut self, update: Update) -> Applied {
        let mut applied = Applied::default();
        if update.store_epoch != 0 && update.store_epoch != self.store_epoch {
            // Revisions of another epoch say nothing about these: keep what is held (it
            // is still enforced until the new epoch's set says otherwise) but let any
            // revision of the new epoch replace it.
            self.store_epoch = update.store_epoch;
            self.last_applied_revision = 0;
            for held in self.placed.values_mut() {
                held.revision = 0;
            }
            applied.epoch_changed = true;
        }
        let mut listed = BTreeSet::new();
        for item in update.items {
            listed.insert(item.placed.clone());
            match self.placed.get(&item.placed) {
                // The same revision again is news only when it brings data that is never
                // saved (a delivered Secret's), which a restart from the saved state lacks.
                Some(held)
                    if held.revision > item.revision
                        || (held.revision == item.revision
                            && (held.spec.encloses_data() || !item.spec.encloses_data())) =>
                {
                    applied.stale += 1
                }
                _ => {
                    self.placed.insert(
                        item.placed.clone(),
                        Assigned {
                            revision: item.revision,
                            spec: Arc::new(item.spec),
                        },
                    );
                    applied.upserted.push(item.placed);
                }
            }
        }
        let ended: Vec<PlacedRef> = if update.full {
            self.placed
                .iter()
                .filter(|(key, held)| !listed.contains(*key) && held.revision <= update.revision)
                .map(|(key, _)| key.clone())
                .collect()
        } else {
            update
                .removed
                .into_iter()
                .filter(|removal| {
                    // A hub that did not say when the assignment ended: the message's.
                    let ended_at = if removal.revision > 0 {
                        removal.revision
                    } else {
                        update.revision
                    };
                    self.placed
                        .get(&removal.placed)
                        .is_some_and(|held| held.revision < ended_at)
                })
                .map(|removal| removal.placed)
                .collect()
        };
        for key in ended {
            if self.placed.remove(&key).is_some() {
                applied.removed.push(key);
            }
        }
        self.last_applied_revision = self.last_applied_revision.max(update.revision);
        applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::distribution::PlacedKind;
    use accord_common::distribution::{KafkaTopicSpec, ScaleSpec};

    fn key(name: &str) -> PlacedRef {
        PlacedRef::new(PlacedKind::CrossClusterScalePolicy, "default", name)
    }

    fn scale(name: &str, replicas: i32) -> AssignmentSpec {
        AssignmentSpec::Scale(ScaleSpec::deployment(
            "prod",
            name,
            replicas,
            &format!("req-{replicas}"),
        ))
    }

    fn replicas(book: &AssignmentBook, name: &str) -> i32 {
        match &*book.get(&key(name)).unwrap().spec {
            AssignmentSpec::Scale(s) => s.replicas,
            other => panic!("not a scale assignment: {other:?}"),
        }
    }

    fn item(name: &str, revision: i64, replicas: i32) -> Incoming {
        Incoming {
            placed: key(name),
            revision,
            spec: scale(name, replicas),
        }
    }

    fn full(revision: i64, items: Vec<Incoming>) -> Update {
        Update {
            revision,
            full: true,
            items,
            removed: Vec::new(),
            store_epoch: 0,
        }
    }

    fn delta(revision: i64, items: Vec<Incoming>, removed: Vec<PlacedRef>) -> Update {
        Update {
            revision,
            full: false,
            items,
            removed: removed
                .into_iter()
                .map(|placed| Removed { placed, revision })
                .collect(),
            store_epoch: 0,
        }
    }

    fn in_epoch(store_epoch: u64, update: Update) -> Update {
        Update {
            store_epoch,
            ..update
        }
    }

    #[test]
    fn a_full_set_on_an_empty_book_takes_every_item() {
        let mut book = AssignmentBook::default();
        let applied = book.apply(full(10, vec![item("a", 7, 3), item("b", 10, 2)]));
        assert_eq!(applied.upserted, vec![key("a"), key("b")]);
        assert_eq!(book.last_applied_revision(), 10);
        assert_eq!(replicas(&book, "a"), 3);
    }

    #[test]
    fn an_item_is_taken_only_when_its_revision_is_newer() {
        let mut book = AssignmentBook::default();
        book.apply(delta(5, vec![item("a", 5, 3)], vec![]));
        let same = book.apply(delta(6, vec![item("a", 5, 9)], vec![]));
        assert_eq!(same.stale, 1);
        assert!(!same.changed());
        let older = book.apply(delta(7, vec![item("a", 4, 9)], vec![]));
        assert_eq!(older.stale, 1);
        assert_eq!(replicas(&book, "a"), 3);
        let newer = book.apply(delta(8, vec![item("a", 8, 9)], vec![]));
        assert_eq!(newer.upserted, vec![key("a")]);
        assert_eq!(replicas(&book, "a"), 9);
        assert_eq!(book.get(&key("a")).unwrap().revision, 8);
    }

    #[test]
    fn the_same_revision_is_taken_again_only_for_data_that_is_never_saved() {
        use accord_common::distribution::{DeliveredSecret, FederatedResourceSpec};
        let secret = |data: &[u8]| {
            AssignmentSpec::FederatedResource(FederatedResourceSpec {
                secrets: vec![DeliveredSecret {
                    name: "db".into(),
                    data: [("password".to_owned(), data.to_vec())].into(),
                    ..Default::default()
                }],
                ..Default::default()
            })
        };
        let incoming = |spec| Incoming {
            placed: key("a"),
            revision: 5,
            spec,
        };
        let mut book = AssignmentBook::default();
        // As read back from the saved state: the Secret without its data.
        let saved: AssignmentSpec =
            serde_json::from_value(serde_json::to_value(secret(b"x")).unwrap()).unwrap();
        book.apply(delta(5, vec![incoming(saved)], vec![]));
        let sent = book.apply(full(5, vec![incoming(secret(b"x"))]));
        assert_eq!(sent.upserted, vec![key("a")]);
        assert!(book.get(&key("a")).unwrap().spec.encloses_data());
        let again = book.apply(full(5, vec![incoming(secret(b"x"))]));
        assert_eq!(again.stale, 1);
    }

    #[test]
    fn a_full_set_ends_management_of_placed_objects_it_does_not_list() {
        let mut book = AssignmentBook::default();
        book.apply(full(5, vec![item("a", 4, 1), item("b", 5, 2)]));
        let applied = book.apply(full(9, vec![item("b", 5, 2)]));
        assert_eq!(applied.removed, vec![key("a")]);
        assert!(applied.upserted.is_empty());
        assert_eq!(book.placed().len(), 1);
    }

    #[test]
    fn a_full_set_older_than_a_held_assignment_keeps_it() {
        let mut book = AssignmentBook::default();
        book.apply(delta(12, vec![item("new", 12, 4)], vec![]));
        let applied = book.apply(full(10, vec![]));
        assert!(applied.removed.is_empty());
        assert!(book.get(&key("new")).is_some());
        assert_eq!(book.last_applied_revision(), 12, "never goes back");
    }

    #[test]
    fn an_empty_full_set_at_the_held_revision_ends_everything() {
        let mut book = AssignmentBook::default();
        book.apply(full(3, vec![item("a", 3, 1)]));
        let applied = book.apply(full(3, vec![]));
        assert_eq!(applied.removed, vec![key("a")]);
        assert!(book.placed().is_empty());
    }

    #[test]
    fn a_delta_removes_what_it_lists_unless_the_held_assignment_is_newer() {
        let mut book = AssignmentBook::default();
        book.apply(delta(5, vec![item("a", 5, 1), item("b", 5, 1)], vec![]));
        book.apply(delta(8, vec![item("b", 8, 2)], vec![]));
        let applied = book.apply(delta(7, vec![], vec![key("a"), key("b"), key("unknown")]));
        assert_eq!(applied.removed, vec![key("a")]);
        assert!(book.get(&key("b")).is_some());
    }

    #[test]
    fn a_delta_leaves_unlisted_assignments_alone() {
        let mut book = AssignmentBook::default();
        book.apply(delta(5, vec![item("a", 5, 1)], vec![]));
        let applied = book.apply(delta(6, vec![item("b", 6, 1)], vec![]));
        assert!(applied.removed.is_empty());
        assert_eq!(book.placed().len(), 2);
    }

    #[test]
    fn assignments_of_every_kind_are_held_alike() {
        let mut book = AssignmentBook::default();
        let topic = PlacedRef::new(PlacedKind::FederatedKafkaTopic, "default", "t");
        let applied = book.apply(full(
            4,
            vec![Incoming {
                placed: topic.clone(),
                revision: 4,
                spec: AssignmentSpec::KafkaTopic(KafkaTopicSpec::default()),
            }],
        ));
        assert_eq!(applied.upserted, vec![topic.clone()]);
        assert_eq!(book.get(&topic).unwrap().spec.work(), "kafka_topic");
        assert_eq!(book.last_applied_revision(), 4);
    }

    #[test]
    fn the_last_applied_revision_never_decreases() {
        let mut book = AssignmentBook::default();
        book.apply(delta(9, vec![], vec![]));
        book.apply(delta(3, vec![], vec![]));
        assert_eq!(book.last_applied_revision(), 9);
    }

    #[test]
    fn a_removal_applies_only_when_its_own_revision_is_newer_than_the_held_one() {
        let mut book = AssignmentBook::default();
        book.apply(delta(5, vec![item("a", 5, 1), item("b", 9, 1)], vec![]));
        let mut update = delta(12, vec![], vec![]);
        update.removed = vec![
            Removed {
                placed: key("a"),
                revision: 6,
            },
            Removed {
                placed: key("b"),
                revision: 8,
            },
        ];
        let applied = book.apply(update);
        assert_eq!(
            applied.removed,
            vec![key("a")],
            "b changed after its removal"
        );
        assert!(book.get(&key("b")).is_some());
    }

    #[test]
    fn a_full_set_from_a_new_epoch_is_taken_even_at_lower_revisions() {
        let mut book = AssignmentBook::default();
        book.apply(in_epoch(
            7,
            full(100, vec![item("a", 90, 3), item("b", 100, 2)]),
        ));
        assert_eq!(book.store_epoch(), 7);
        // The store was restored: revisions start again below what the agent holds.
        let applied = book.apply(in_epoch(8, full(40, vec![item("a", 30, 5)])));
        assert!(applied.epoch_changed);
        assert_eq!(applied.upserted, vec![key("a")]);
        assert_eq!(applied.removed, vec![key("b")]);
        assert_eq!(replicas(&book, "a"), 5);
        assert_eq!(
            book.last_applied_revision(),
            40,
            "the high-water mark restarts"
        );
        assert_eq!(book.store_epoch(), 8);
        // Within the new epoch the usual rules hold again.
        let stale = book.apply(in_epoch(8, delta(41, vec![item("a", 29, 9)], vec![])));
        assert_eq!(stale.stale, 1);
        assert!(!stale.changed());
        assert_eq!(replicas(&book, "a"), 5);
    }

    #[test]
    fn a_message_without_an_epoch_keeps_the_held_revisions() {
        let mut book = AssignmentBook::default();
        book.apply(in_epoch(7, full(100, vec![item("a", 90, 3)])));
        let applied = book.apply(full(40, vec![item("a", 30, 5)]));
        assert!(!applied.epoch_changed);
        assert_eq!(applied.stale, 1);
        assert_eq!(replicas(&book, "a"), 3);
        assert_eq!(book.store_epoch(), 7);
    }
}
