//! PrometheusFederation: the pure decisions of its controller
//! ([`controller`]) — which member clusters a PrometheusFederation selects
//! ([`crate::distribution::select`]), the one assignment every selected cluster gets
//! ([`plan`]), the PrometheusFederation's status from the agents' reports ([`status`]), and
//! the hub's global tier: which member federation Prometheus servers the global Prometheus
//! scrapes and what its reloader's answer means for each PrometheusFederation ([`global`]).
//!
//! Unlike scaling, federation has no failover: every selected cluster gets the same
//! assignment, and a disconnected cluster keeps it.

pub mod admission;
pub mod controller;
pub mod global;
pub mod plan;
pub mod status;

use serde::{Deserialize, Serialize};

/// A PrometheusFederation's decision data (stored under its tag in its placements
/// record). Every selected cluster gets the same assignment, so the shares say
/// everything; this is where data about the decision as a whole would go.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PromfedDecision {}
