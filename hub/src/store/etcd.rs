//! The [`Backend`] kept by a real etcd, through etcd-client.

use etcd_client::{
    Client, GetOptions, LeaseKeepAliveStream, LeaseKeeper, LockOptions, ResignOptions, WatchOptions,
};
use futures::StreamExt;

use super::kv::{
    Backend, Compare, CompareOp, CompareTarget, EventType, KeepAlive, KeyValue, KvFuture,
    LeaderKey, Range, RangeResponse, Txn, TxnOp, TxnOpResponse, TxnResponse, WatchEvent,
    WatchRequest, WatchResponse, WatchStream,
};

/// etcd through two connections: one for reads, writes and watches, one for leases only,
/// so that the keepalives of the election, presence and lock leases never queue behind the
/// thousands of reads and transactions of a connect or report storm (a refresh that comes
/// back late loses the lease, and with it leadership or every connected cluster).
#[derive(Clone)]
pub struct EtcdBackend {
    client: Client,
    leases: Client,
}

impl EtcdBackend {
    /// A backend on `client` for everything and `leases` for leases.
    pub fn new(client: Client, leases: Client) -> Self {
        Self { client, leases }
    }

    /// Both connections (to take a member out of their rotation or put it back).
    pub fn connections(&self) -> [&Client; 2] {
        [&self.client, &self.leases]
    }
}

fn revision(header: Option<&etcd_client::ResponseHeader>) -> i64 {
    header.map(|h| h.revision()).unwrap_or_default()
}

fn key_value(kv: &etcd_client::KeyValue) -> KeyValue {
    KeyValue {
        key: kv.key().to_vec(),
        value: kv.value().to_vec(),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        version: kv.version(),
        lease: kv.lease(),
    }
}

fn compare(c: Compare) -> etcd_client::Compare {
    let op = match c.op {
        CompareOp::Equal => etcd_client::CompareOp::Equal,
        CompareOp::NotEqual => etcd_client::CompareOp::NotEqual,
        CompareOp::Greater => etcd_client::CompareOp::Greater,
        CompareOp::Less => etcd_client::CompareOp::Less,
    };
    match c.target {
        CompareTarget::Version(n) => etcd_client::Compare::version(c.key, op, n),
        CompareTarget::CreateRevision(n) => etcd_client::Compare::create_revision(c.key, op, n),
        CompareTarget::ModRevision(n) => etcd_client::Compare::mod_revision(c.key, op, n),
        CompareTarget::Value(v) => etcd_client::Compare::value(c.key, op, v),
        CompareTarget::Lease(n) => etcd_client::Compare::lease(c.key, op, n),
    }
}

fn op(op: TxnOp) -> etcd_client::TxnOp {
    match op {
        TxnOp::Put {
            key,
            value,
            options,
        } => {
            let mut put = etcd_client::PutOptions::new();
            if options.lease != 0 {
                put = put.with_lease(options.lease);
            }
            if options.ignore_lease {
                put = put.with_ignore_lease();
            }
            etcd_client::TxnOp::put(key, value, Some(put))
        }
        TxnOp::Get { key } => etcd_client::TxnOp::get(key, None),
        TxnOp::Delete { key } => etcd_client::TxnOp::delete(key, None),
        TxnOp::Txn(txn) => etcd_client::TxnOp::txn(request(txn)),
    }
}

fn request(txn: Txn) -> etcd_client::Txn {
    etcd_client::Txn::new()
        .when(txn.compares.into_iter().map(compare).collect::<Vec<_>>())
        .and_then(txn.success.into_iter().map(op).collect::<Vec<_>>())
        .or_else(txn.failure.into_iter().map(op).collect::<Vec<_>>())
}

fn response(r: &etcd_client::TxnResponse) -> TxnResponse {
    TxnResponse {
        succeeded: r.succeeded(),
        revision: revision(r.header()),
        responses: r
            .op_responses()
            .iter()
            .map(|part| match part {
                etcd_client::TxnOpResponse::Put(_) => TxnOpResponse::Put,
                etcd_client::TxnOpResponse::Get(get) => {
                    TxnOpResponse::Get(get.kvs().iter().map(key_value).collect())
                }
                etcd_client::TxnOpResponse::Delete(d) => TxnOpResponse::Delete(d.deleted()),
                etcd_client::TxnOpResponse::Txn(inner) => TxnOpResponse::Txn(response(inner)),
            })
            .collect(),
    }
}

fn watch_response(r: &etcd_client::WatchResponse) -> WatchResponse {
    WatchResponse {
        created: r.created(),
        canceled: r.canceled(),
        compact_revision: r.compact_revision(),
        cancel_reason: r.cancel_reason().to_owned(),
        revision: revision(r.header()),
        events: r
            .events()
            .iter()
            .filter_map(|e| {
                Some(WatchEvent {
                    event_type: match e.event_type() {
                        etcd_client::EventType::Put => EventType::Put,
                        etcd_client::EventType::Delete => EventType::Delete,
                    },
                    kv: key_value(e.kv()?),
                })
            })
            .collect(),
    }
}

struct EtcdKeepAlive {
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
}

impl KeepAlive for EtcdKeepAlive {
    fn refresh(&mut self) -> KvFuture<'_, i64> {
        Box::pin(async move {
            self.keeper.keep_alive().await?;
            match self.stream.message().await? {
                Some(answer) => Ok(answer.ttl()),
                None => Err(etcd_client::Error::LeaseKeepAliveError(
                    "keepalive stream closed".into(),
                )),
            }
        })
    }
}

impl Backend for EtcdBackend {
    fn range(&self, range: Range) -> KvFuture<'_, RangeResponse> {
        Box::pin(async move {
            let mut options = GetOptions::new()
                .with_limit(range.limit)
                .with_revision(range.revision);
            if !range.end.is_empty() {
                options = options.with_range(range.end);
            }
            if range.keys_only {
                options = options.with_keys_only();
            }
            let answer = self
                .client
                .kv_client()
                .get(range.key, Some(options))
                .await?;
            Ok(RangeResponse {
                kvs: answer.kvs().iter().map(key_value).collect(),
                more: answer.more(),
                revision: revision(answer.header()),
            })
        })
    }

    fn txn(&self, txn: Txn) -> KvFuture<'_, TxnResponse> {
        Box::pin(async move {
            let answer = self.client.kv_client().txn(request(txn)).await?;
            Ok(response(&answer))
        })
    }

    fn watch(&self, request: WatchRequest) -> KvFuture<'_, WatchStream> {
        Box::pin(async move {
            let mut options = WatchOptions::new().with_start_revision(request.start_revision);
            if request.prefix {
                options = options.with_prefix();
            }
            if request.progress_notify {
                options = options.with_progress_notify();
            }
            let stream = self
                .client
                .watch_client()
                .watch(request.key, Some(options))
                .await?;
            let messages = futures::stream::unfold(stream, |mut stream| async move {
                match stream.message().await {
                    Ok(Some(message)) => Some((Ok(watch_response(&message)), stream)),
                    Ok(None) => None,
                    Err(e) => Some((Err(e), stream)),
                }
            });
            Ok(messages.boxed())
        })
    }

    fn grant(&self, ttl: i64) -> KvFuture<'_, (i64, i64)> {
        Box::pin(async move {
            let granted = self.leases.lease_client().grant(ttl, None).await?;
            if !granted.error().is_empty() {
                return Err(etcd_client::Error::GRpcStatus(tonic::Status::internal(
                    format!("lease grant failed: {}", granted.error()),
                )));
            }
            Ok((granted.id(), granted.ttl()))
        })
    }

    fn keep_alive(&self, id: i64) -> KvFuture<'_, Box<dyn KeepAlive>> {
        Box::pin(async move {
            let (keeper, stream) = self.leases.lease_client().keep_alive(id).await?;
            Ok(Box::new(EtcdKeepAlive { keeper, stream }) as Box<dyn KeepAlive>)
        })
    }

    fn revoke(&self, id: i64) -> KvFuture<'_, ()> {
        Box::pin(async move {
            self.leases.lease_client().revoke(id).await?;
            Ok(())
        })
    }

    fn campaign(&self, name: Vec<u8>, value: Vec<u8>, lease: i64) -> KvFuture<'_, LeaderKey> {
        Box::pin(async move {
            let mut won = self
                .client
                .election_client()
                .campaign(name, value, lease)
                .await?;
            let leader = won.take_leader().ok_or_else(|| {
                etcd_client::Error::GRpcStatus(tonic::Status::internal(
                    "campaign answered without a leader key",
                ))
            })?;
            Ok(LeaderKey {
                name: leader.name().to_vec(),
                key: leader.key().to_vec(),
                revision: leader.rev(),
                lease: leader.lease(),
            })
        })
    }

    fn leader(&self, name: Vec<u8>) -> KvFuture<'_, Option<KeyValue>> {
        Box::pin(async move {
            match self.client.election_client().leader(name).await {
                Ok(answer) => Ok(answer.kv().map(key_value)),
                Err(etcd_client::Error::GRpcStatus(status))
                    if status.message().contains("no leader") =>
                {
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        })
    }

    fn resign(&self, leader: LeaderKey) -> KvFuture<'_, ()> {
        Box::pin(async move {
            let key = etcd_client::LeaderKey::new()
                .with_name(leader.name)
                .with_key(leader.key)
                .with_rev(leader.revision)
                .with_lease(leader.lease);
            self.client
                .election_client()
                .resign(Some(ResignOptions::new().with_leader(key)))
                .await?;
            Ok(())
        })
    }

    fn lock(&self, name: Vec<u8>, lease: i64) -> KvFuture<'_, Vec<u8>> {
        Box::pin(async move {
            let locked = self
                .client
                .lock_client()
                .lock(name, Some(LockOptions::new().with_lease(lease)))
                .await?;
            Ok(locked.key().to_vec())
        })
    }

    fn unlock(&self, key: Vec<u8>) -> KvFuture<'_, ()> {
        Box::pin(async move {
            self.client.lock_client().unlock(key).await?;
            Ok(())
        })
    }

    fn status(&self) -> KvFuture<'_, ()> {
        Box::pin(async move {
            self.client.maintenance_client().status().await?;
            Ok(())
        })
    }
}
