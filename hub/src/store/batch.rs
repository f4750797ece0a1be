//! Conditional writes that many callers make at once — the agents' status reports, a
//! thousand or more a second at fleet size — reach etcd as the nested transactions of one
//! outer transaction: one request, one raft entry and one apply for up to [`MAX_BATCH`]
//! writes, each still decided by its own compare (a nested transaction's compare decides
//! only its own branch). A write that finds no batch forming is sent at once; batches only
//! form while [`IN_FLIGHT`] transactions are already on their way, so a quiet store adds no
//! wait.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

use super::kv::{Backend, Txn, TxnOp, TxnOpResponse, TxnResponse};
use super::{StoreError, error_chain};

/// Most writes in one transaction (etcd's `--max-txn-ops` is 128 by default; each write is
/// one op of the outer transaction).
pub const MAX_BATCH: usize = 64;
/// Outer transactions on their way at once.
const IN_FLIGHT: usize = 4;

type Answer = Result<(TxnResponse, i64), StoreError>;

struct Pending {
    key: String,
    /// Only writes of one group share a transaction (the lease leased writes hang on: one
    /// missing lease fails the whole transaction, so writes on other leases stay apart).
    group: i64,
    txn: Txn,
    reply: oneshot::Sender<Answer>,
}

/// Gathers transactions into batches; one task per store (and its clones).
#[derive(Clone, Debug)]
pub(crate) struct Batcher {
    queue: mpsc::UnboundedSender<Pending>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("key", &self.key).finish()
    }
}

impl Batcher {
    /// Starts the batching task on `backend`.
    pub(crate) fn start(backend: Arc<dyn Backend>) -> Self {
        let (queue, pending) = mpsc::unbounded_channel();
        tokio::spawn(run(backend, pending));
        Self { queue }
    }

    /// Applies `txn`, whose writes touch `key` only, in the next batch of its `group`: its
    /// response and the revision of the batch (which every key the batch wrote has as its
    /// mod revision).
    pub(crate) async fn txn(&self, key: String, group: i64, txn: Txn) -> Answer {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Pending {
                key,
                group,
                txn,
                reply,
            })
            .map_err(|_| ended())?;
        answer.await.map_err(|_| ended())?
    }
}

fn ended() -> StoreError {
    StoreError::Unexpected("the etcd write batcher ended".into())
}

async fn run(kv: Arc<dyn Backend>, mut pending: mpsc::UnboundedReceiver<Pending>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    // A write for a key already in the forming batch waits for the next one (etcd refuses a
    // transaction that writes one key twice), as does one of another group.
    let mut deferred: Option<Pending> = None;
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let first = match deferred.take() {
            Some(p) => p,
            None => match pending.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let group = first.group;
        let mut keys = HashSet::from([first.key.clone()]);
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match pending.try_recv() {
                Ok(p) if p.group != group || keys.contains(&p.key) => {
                    deferred = Some(p);
                    break;
                }
                Ok(p) => {
                    keys.insert(p.key.clone());
                    batch.push(p);
                }
                Err(_) => break,
            }
        }
        let kv = kv.clone();
        tokio::spawn(async move {
            apply(kv, batch).await;
            drop(slot);
        });
    }
}

async fn apply(kv: Arc<dyn Backend>, batch: Vec<Pending>) {
    let (ops, replies): (Vec<TxnOp>, Vec<oneshot::Sender<Answer>>) = batch
        .into_iter()
        .map(|p| (TxnOp::txn(p.txn), p.reply))
        .unzip();
    match kv.txn(Txn::new().and_then(ops)).await {
        Ok(response) => {
            let revision = response.revision;
            let mut parts = response.responses.into_iter();
            for reply in replies {
                let answer = match parts.next() {
                    Some(TxnOpResponse::Txn(part)) => Ok((part, revision)),
                    _ => Err(StoreError::Unexpected(
                        "etcd answered a batched transaction without one of its parts".into(),
                    )),
                };
                let _ = reply.send(answer);
            }
        }
        Err(e) => {
            // Every write of the batch failed alike.
            let status = match &e {
                etcd_client::Error::GRpcStatus(status) => status.clone(),
                other => tonic::Status::unavailable(error_chain(other)),
            };
            for reply in replies {
                let _ = reply.send(Err(StoreError::Etcd(etcd_client::Error::GRpcStatus(
                    status.clone(),
                ))));
            }
        }
    }
}
