//! The kind-neutral distribution path: a placed object's decision becomes one placements record
//! in etcd ([`record`]), every replica fans it out to the agent streams it holds
//! ([`fanout`]), and the agents' reports come back as status records
//! ([`crate::store::status`]) that the kind's controller aggregates into the CR's status.
//!
//! A kind's decision data is opaque here (a tagged value in the record, [`record`]); adding
//! a kind changes nothing in this module.

pub mod choose;
pub mod claim;
pub mod deletion;
pub mod fanout;
pub mod record;
pub mod reported;
pub mod rollout;
pub mod secrets;
pub mod select;
pub mod taints;

pub use fanout::Fanout;
pub use record::{Hold, PlacementRecord, ShareRecord};

/// The earlier of a time (or wait) already found, if any, and `other`.
pub fn earliest<T: Ord>(found: Option<T>, other: T) -> Option<T> {
    Some(match found {
        Some(f) => f.min(other),
        None => other,
    })
}
