//! The records a decision reads and writes: the placements record in etcd (fenced, under
//! the placed object's lock where the kind asks), the agents' reports on it, and their keys.

use super::*;

/// TTL of a placed object's lock; a hub that dies holding it frees it within this.
pub(super) const LOCK_TTL: Duration = Duration::from_secs(5);
/// Longest wait for a placed object's lock.
pub(super) const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Every ManagedCluster as the controllers see it.
pub fn clusters(ctx: &ControllerContext) -> Clusters {
    ctx.cluster_index.snapshot()
}

/// The stored record of `placed`, read as kind `K`'s, with its revision.
pub fn stored_record<K: PlacementKind>(
    ctx: &ControllerContext,
    placed: &PlacedRef,
) -> Option<(PlacementRecord<K::Decision>, i64)> {
    let key = ctx
        .store
        .keys()
        .placements(placed.kind.as_str(), &placed.namespace, &placed.name);
    let (record, revision) = ctx.placements.get(&key)?;
    record.typed(K::DECISION_TAG).map(|typed| (typed, revision))
}

/// Writes `record` as kind `K`'s, fenced by leadership (and under the placed object's lock where
/// the kind asks for it, [`PlacementKind::DECISION_LOCK`]), and waits until the cache has
/// it; returns its revision. Each share the stored record already sent as it is keeps the
/// revision it was sent at ([`PlacementRecord::sent_since`]), marked in `record` too.
pub async fn write_record<K: PlacementKind>(
    ctx: &ControllerContext,
    record: &mut PlacementRecord<K::Decision>,
) -> Result<i64, ReconcileError> {
    write_record_with::<K>(ctx, record, Vec::new()).await
}

/// [`write_record`], with `more` written in the same transaction: a rollout's progress with
/// the shares it sends, read back from the rollouts cache too.
pub async fn write_record_with<K: PlacementKind>(
    ctx: &ControllerContext,
    record: &mut PlacementRecord<K::Decision>,
    more: Vec<crate::store::TxnOp>,
) -> Result<i64, ReconcileError> {
    let fence = ctx.election.fence().ok_or(ReconcileError::NotLeader)?;
    let p = record.placed.clone();
    let key = ctx
        .store
        .keys()
        .placements(p.kind.as_str(), &p.namespace, &p.name);
    // Read in place: the previous record may name every cluster of a fleet.
    let marked = ctx.placements.read(&key, |previous, revision| {
        record.sent_since(Some((previous, revision)));
    });
    if marked.is_none() {
        record.sent_since(None::<(&PlacementRecord, i64)>);
    }
    let value = crate::store::encode_large(&record.stored(K::DECISION_TAG))?;
    let with_more = !more.is_empty();
    let mut put = vec![crate::store::TxnOp::put(key, value, None)];
    put.extend(more);
    let (response, revision) = if K::DECISION_LOCK {
        let lock = tokio::time::timeout(
            LOCK_WAIT,
            ctx.store
                .lock_placement(p.kind.as_str(), &p.namespace, &p.name, LOCK_TTL),
        )
        .await
        .map_err(|_| ReconcileError::LockTimeout(format!("{}/{}", p.namespace, p.name)))??;
        let written = ctx
            .store
            .fenced_txn_with_revision(&fence, vec![lock.compare()], put)
            .await;
        // The decision does not wait for the release (two more etcd round trips on its
        // path): revoking the lock's lease deletes its key, and a next decision of the same
        // placed object queues behind it until then.
        lock.release_in_background();
        written?
    } else {
        ctx.store
            .fenced_txn_with_revision(&fence, Vec::new(), put)
            .await?
    };
    if !response.succeeded() {
        return Err(ReconcileError::Store(StoreError::Unexpected(format!(
            "the lock of {p} was lost during the write"
        ))));
    }
    // Read our own write before anything is computed from the cache.
    ctx.placements.wait_for_revision(revision).await;
    if with_more {
        // A rollout's progress written with it: read it back too.
        ctx.rollouts.wait_for_revision(revision).await;
    }
    Ok(revision)
}

/// The agents' last reports on `record`'s placed object, by cluster.
pub fn reports<D>(
    ctx: &ControllerContext,
    record: &PlacementRecord<D>,
) -> HashMap<String, StatusRecord> {
    reports_of(ctx, &record.placed, &record.shares)
}

pub(super) fn reports_of(
    ctx: &ControllerContext,
    p: &PlacedRef,
    shares: &[ShareRecord],
) -> HashMap<String, StatusRecord> {
    shares
        .iter()
        .filter_map(|s| {
            let key = ctx
                .store
                .keys()
                .status(&s.cluster, p.kind.as_str(), &p.namespace, &p.name);
            ctx.statuses.get(&key).map(|(r, _)| (s.cluster.clone(), r))
        })
        .collect()
}

/// Removes `placed`'s placements record and every status record about it.
pub async fn remove_records(
    ctx: &ControllerContext,
    placed: &PlacedRef,
) -> Result<(), ReconcileError> {
    let fence = ctx.election.fence().ok_or(ReconcileError::NotLeader)?;
    let key = ctx
        .store
        .keys()
        .placements(placed.kind.as_str(), &placed.namespace, &placed.name);
    ctx.store.fenced_delete(&fence, &key).await?;
    ctx.store
        .fenced_delete(&fence, &super::rollout::rollout_key(ctx, placed))
        .await?;
    ctx.store
        .delete_placement_status(placed.kind.as_str(), &placed.namespace, &placed.name)
        .await?;
    ctx.views.remove(placed);
    Ok(())
}

/// The parts of a status key after its prefix: `<cluster>/<kind>/<namespace>/<name>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusKey<'a> {
    /// The reporting cluster.
    pub cluster: &'a str,
    /// The placed object's kind.
    pub kind: &'a str,
    /// The placed object's namespace.
    pub namespace: &'a str,
    /// The placed object's name.
    pub name: &'a str,
}

impl<'a> StatusKey<'a> {
    /// Parses a status key after its prefix; `None` for anything else.
    pub fn parse(rest: &'a str) -> Option<Self> {
        let mut parts = rest.split('/');
        let key = Self {
            cluster: parts.next()?,
            kind: parts.next()?,
            namespace: parts.next()?,
            name: parts.next()?,
        };
        parts.next().is_none().then_some(key)
    }
}

/// `object`'s claim on `name` in the clusters its `placement` selects, ordered by its
/// `creationTimestamp`; `None` when its selection cannot be evaluated.
pub fn claim_of(
    object: &impl ResourceExt,
    name: &str,
    placement: &accord_crds::ClusterPlacement,
    clusters: &Clusters,
) -> Option<crate::distribution::claim::Claim> {
    let selected = crate::distribution::select::select_clusters(placement, clusters).ok()?;
    Some(crate::distribution::claim::Claim {
        object: object_name(object),
        created_unix_millis: object
            .meta()
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond()),
        name: name.to_owned(),
        clusters: selected.into_iter().map(|c| c.name).collect(),
    })
}
