//! The one placement controller: every kind that places something in member clusters is a
//! [`PlacementKind`] plug-in, and this module does the rest once.
//!
//! For each object of the kind: lenient decode (one that does not decode gets
//! `Ready=False`/`InvalidSpec` and never stops the others) → the kind's pure decision from
//! the spec, the ManagedClusters and the stored record → same-decision check → a new
//! decision written fenced by leadership and under the placed object's lock, then read back from
//! the cache → the agents' reports → the kind's status aggregation → one coalesced status
//! write when it changed, and Events on transitions only.
//!
//! Deletion needs no finalizer unless the kind says so for an object
//! ([`PlacementKind::finalizer`]): when an object is gone, its placements record, the
//! agents' status records and whatever the kind keeps ([`PlacementKind::forget`]) are
//! removed, and every (re)list sweeps the records of objects that went while no replica
//! led. A kind whose deletion must wait for the members (a Kafka topic with
//! `deletionPolicy: Delete`) asks for a finalizer and finishes in
//! [`PlacementKind::finalize`]; finalizers earlier hub versions put on every object
//! ([`PlacementKind::LEGACY_FINALIZERS`]) are released at deletion.
//!
//! Triggers: the objects themselves, ManagedCluster changes of labels, availability,
//! schedulability or spec (every object that may select the cluster), the agents' status
//! records of the kind, and whatever the kind adds ([`Started::tasks`] send to its
//! [`Trigger`]).

use accord_common::distribution::PlacedKind;
use accord_crds::StatusLimits;
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use accord_common::distribution::PlacedRef;
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, Store as Reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tracing::{debug, info};

use super::field_owners::FieldOwners;
use super::lenient::invalid_status;
use super::reconcile_pace::ReconcilePace;
use super::{
    ClusterEvents, ControllerContext, ControllerError, Decoded, Lenient, Listed, ReconcileError,
    decode_or_invalid, error_policy, trace_result,
};
use crate::distribution::choose::Choice;
use crate::distribution::reported::Placed;
use crate::distribution::select::{ClusterInfo, Clusters, SelectedCluster, SelectorError};
use crate::distribution::{PlacementRecord, ShareRecord};
use crate::store::{StatusRecord, StoreError};
use crate::writes::Pace;
use accord_common::metrics::KindLabel;
use accord_crds::ClusterPlacement;

mod kind;
mod reconcile;
mod records;
pub mod revisions;
pub mod rollout;
mod run;

pub use kind::*;
pub use reconcile::*;
pub use records::*;
pub use run::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_key_names_its_cluster_kind_and_object_and_nothing_else_parses() {
        assert_eq!(
            StatusKey::parse("east/FederatedKafkaTopic/team/events"),
            Some(StatusKey {
                cluster: "east",
                kind: "FederatedKafkaTopic",
                namespace: "team",
                name: "events"
            })
        );
        assert_eq!(StatusKey::parse("east/FederatedKafkaTopic/team"), None);
        assert_eq!(StatusKey::parse("east/K/ns/name/extra"), None);
    }
}
