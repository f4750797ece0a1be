//! The Sync stream (`Federation.Sync` on the wire): the one long-lived mTLS stream per agent.
//!
//! The cluster's identity comes from the verified client certificate and must match the
//! cluster registry (a re-registration with `--force` retires the old certificate). A
//! message naming another cluster ends the stream with `PERMISSION_DENIED`.
//!
//! Hello's store epoch and revision are checked against the store (an agent ahead of a
//! restored store makes a new epoch, see [`crate::store::epoch`]); the member health it
//! and later `MemberHealth` messages carry is stored at `health/<cluster>` when it changes,
//! `MemberCapacity` at `capacity/<cluster>`.

use accord_proto::v1::federation_server::Federation;
use accord_proto::v1::{
    AgentMessage, HubMessage, MemberHealth, ObjectRef, StatusAck, StatusReport, agent_message,
    hub_message, status_ack,
};
use futures::Stream;
use futures::stream::FuturesUnordered;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument, debug, info, warn};

use super::AgentFacing;
use super::renewal::{self, StreamCertificate};
use accord_common::distribution::PlacementState;
use accord_common::distribution::{Observed, PlacedKind, state_from_proto};
use accord_common::metrics::{KindLabel, observe_traced};
use accord_common::runtime::{error_chain, unix_millis};
use accord_common::telemetry;

use crate::connections::Connection;
use crate::pki::peer_identity;
use crate::store::capacity::CapacityRecord;
use crate::store::health::HealthRecord;
use crate::store::presence::{ConnectedRecord, RECONNECT_GRACE};
use crate::store::reported::MemberReport;
use crate::store::status::{ReportOrder, StatusRecord, WriteOutcome};

/// Status reports of one stream stored at once.
const MAX_REPORTS_IN_FLIGHT: usize = 64;

/// Outgoing messages buffered per stream before the hub waits on a slow agent.
const OUTBOX_CAPACITY: usize = 64;

/// The Sync service (gRPC service `Federation`, its wire name).
pub struct SyncService {
    /// Shared by every session through one pointer: by value it is about 15 KiB, and each
    /// of 10,000 sessions held a copy (twice over, in its task).
    shared: Arc<AgentFacing>,
}

impl SyncService {
    /// A service over the hub's shared state.
    pub fn new(shared: AgentFacing) -> Self {
        Self {
            shared: Arc::new(shared),
        }
    }
}

type HubStream = Pin<Box<dyn Stream<Item = Result<HubMessage, Status>> + Send>>;

/// The verified cluster behind a request, and its certificate's key: accepted by the
/// watched registry without a read (the revoker's sweep ends a stream opened in the
/// moment a revocation takes to reach the watch), else by etcd's record, which a fresh
/// registration may be in before the watch delivers it.
async fn authenticate<T>(
    shared: &AgentFacing,
    request: &Request<T>,
) -> Result<(String, String), Status> {
    let identity = super::read_client_certificate(request, peer_identity)?;
    let now = unix_millis() / 1000;
    let cached = shared
        .registry
        .get(&shared.store.keys().cluster(&identity.cluster));
    if cached.is_some_and(|(r, _)| r.accepts(&identity.spki_sha256, now)) {
        return Ok((identity.cluster, identity.spki_sha256));
    }
    let record = shared
        .store
        .get_cluster(&identity.cluster)
        .await
        .map_err(|e| {
            shared.metrics.error(e.kind());
            Status::unavailable(format!("cluster registry unavailable: {}", error_chain(&e)))
        })?;
    match record {
        Some(r) if r.accepts(&identity.spki_sha256, now) => {
            Ok((identity.cluster, identity.spki_sha256))
        }
        Some(_) => Err(Status::permission_denied(format!(
            "this certificate for cluster {:?} was replaced by a newer registration",
            identity.cluster
        ))),
        None => Err(Status::permission_denied(format!(
            "cluster {:?} is not registered with this hub",
            identity.cluster
        ))),
    }
}

#[tonic::async_trait]
impl Federation for SyncService {
    type SyncStream = HubStream;

    async fn sync(
        &self,
        request: Request<Streaming<AgentMessage>>,
    ) -> Result<Response<Self::SyncStream>, Status> {
        let (cluster, spki_sha256) = authenticate(&self.shared, &request).await?;
        let certificate = StreamCertificate::of_request(&request)?;
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(OUTBOX_CAPACITY);
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let session = Session {
                shared,
                cluster,
                spki_sha256,
                certificate,
                tx,
                written: Default::default(),
            };
            session.run(inbound).await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// The member's reports this stream stored last (each is stored only when it changes).
#[derive(Default)]
struct Reported {
    health: Option<HealthRecord>,
    capacity: Option<CapacityRecord>,
}

/// One agent stream, from Hello to close.
struct Session {
    shared: Arc<AgentFacing>,
    cluster: String,
    /// Key of the client certificate the stream was opened with.
    spki_sha256: String,
    /// The client certificate the stream was opened with (the key a renewal replaces).
    certificate: StreamCertificate,
    tx: mpsc::Sender<Result<HubMessage, Status>>,
    /// Per placed object (`kind/namespace/name`), the version and order of the record this stream
    /// wrote last: the agent's next report names that version, and is then stored in one
    /// etcd transaction without reading the record back.
    written: std::sync::Mutex<HashMap<String, (i64, ReportOrder)>>,
}

impl Session {
    /// Every etcd write and other rare step is awaited boxed: a session spends its life
    /// waiting for the agent's next message, and an inline step makes that resting state
    /// as large as the step's future (6 KiB of every stream, measured with a heap profiler
    /// at 2,000 agents, before they were boxed; docs/benchmarks.md "Memory per stream").
    async fn run(self, mut inbound: Streaming<AgentMessage>) {
        let s = &self.shared;
        // The first message must be Hello.
        let hello = match inbound.next().await {
            Some(Ok(AgentMessage {
                cluster,
                body: Some(agent_message::Body::Hello(h)),
            })) => {
                if !cluster.is_empty() && cluster != self.cluster {
                    Box::pin(self.refuse_other_cluster(&cluster)).await;
                    return;
                }
                h
            }
            Some(Ok(_)) => {
                let _ = self
                    .tx
                    .send(Err(Status::failed_precondition(
                        "the first message must be Hello",
                    )))
                    .await;
                return;
            }
            Some(Err(e)) => {
                debug!(cluster = %self.cluster, error = %e, "stream failed before Hello");
                return;
            }
            None => return,
        };

        let (conn, replaced) =
            s.connections
                .open(&self.cluster, &self.spki_sha256, self.tx.clone());
        if let Some(old) = replaced {
            old.end(Status::aborted("replaced by a newer stream"));
        }
        let record = ConnectedRecord {
            replica: s.settings.replica.clone(),
            agent_version: hello.agent_version.clone(),
            kubernetes_version: hello.k8s_version.clone(),
            connected_unix_millis: unix_millis(),
        };
        if let Err(e) = Box::pin(s.presence.mark_connected(&self.cluster, &record)).await {
            s.metrics.error(e.kind());
            warn!(cluster = %self.cluster, error = %error_chain(&e), "could not record the connection");
            let _ = self
                .tx
                .send(Err(Status::unavailable(format!(
                    "hub store: {}",
                    error_chain(&e)
                ))))
                .await;
            s.connections.close(&self.cluster, conn.id);
            return;
        }
        s.metrics.connected_agents.set(s.connections.len() as i64);
        info!(cluster = %self.cluster, agent = %hello.agent_version, "agent connected");

        let mut reported = Reported::default();
        if let Some(health) = hello.member_health.as_ref() {
            Box::pin(self.record_health(&mut reported.health, health)).await;
        }
        // An agent ahead of the store in the same epoch proves the store was restored:
        // the check makes a new epoch before the full set goes out with it.
        if let Err(e) = Box::pin(
            s.fanout
                .epoch()
                .check_agent(hello.store_epoch, hello.last_applied_revision),
        )
        .await
        {
            s.metrics.error(e.kind());
            warn!(cluster = %self.cluster, error = %error_chain(&e), "could not check the store epoch");
        }

        // Assignments start with the full set; deltas follow as placements change. The
        // stream was registered first, so no change can fall between the two. It carries
        // the store epoch: an agent holding another one takes it instead of what it holds.
        let full = s.fanout.full_for(&self.cluster);
        let _ = self
            .tx
            .send(Ok(HubMessage {
                body: Some(hub_message::Body::Assignments(full)),
            }))
            .await;

        // The agent's silence is counted from here: until now the session was recording
        // the connection in etcd, not reading the heartbeats the agent sent meanwhile, and
        // a store slow under a connect storm must not make its streams look silent.
        conn.touch();

        // A revoked or replaced identity (crate::revocation) stops being read at once.
        // Set once a renewed certificate went out on this stream: its agent then reconnects
        // with it, and the end of this stream is that switch, not a departure.
        let mut renewed = false;
        let outcome = tokio::select! {
            outcome = self.serve(&conn, &mut inbound, &mut reported, &mut renewed) => outcome,
            status = conn.ended() => Err(status),
        };
        if let Err(status) = outcome {
            let _ = self.tx.send(Err(status)).await;
        }
        if s.connections.close(&self.cluster, conn.id) {
            let cleared = if renewed {
                Box::pin(s.presence.mark_reconnecting(&self.cluster, RECONNECT_GRACE))
                    .await
                    .map(|_| ())
            } else {
                Box::pin(s.presence.mark_disconnected(&self.cluster)).await
            };
            if let Err(e) = cleared {
                s.metrics.error(e.kind());
                warn!(cluster = %self.cluster, error = %error_chain(&e), "could not clear the connection");
            }
            if renewed {
                info!(
                    cluster = %self.cluster, grace = ?RECONNECT_GRACE,
                    "agent disconnected to reconnect with its renewed certificate; kept connected meanwhile"
                );
            } else {
                info!(cluster = %self.cluster, "agent disconnected");
            }
        }
        s.metrics.connected_agents.set(s.connections.len() as i64);
    }

    /// Handles messages until the stream ends; `Err` carries the status to end it with.
    async fn serve(
        &self,
        conn: &Arc<Connection>,
        inbound: &mut Streaming<AgentMessage>,
        reported: &mut Reported,
        renewed: &mut bool,
    ) -> Result<(), Status> {
        let s = &self.shared;
        // Reports are stored concurrently: an agent has at most one report per placed object in
        // flight, so reports about different placed objects are independent, and storing them
        // one after another would bound a member's reports by etcd's round trip.
        let mut stored = FuturesUnordered::new();
        loop {
            let msg = tokio::select! {
                Some(ack) = stored.next(), if !stored.is_empty() => {
                    if self.tx.send(Ok(ack?)).await.is_err() {
                        return Ok(());
                    }
                    continue;
                }
                msg = inbound.next(), if stored.len() < MAX_REPORTS_IN_FLIGHT => msg,
            };
            let Some(msg) = msg else { break };
            let msg = match msg {
                Ok(m) => m,
                Err(e) => {
                    debug!(cluster = %self.cluster, error = %e, "stream ended with an error");
                    return Ok(());
                }
            };
            if !msg.cluster.is_empty() && msg.cluster != self.cluster {
                Box::pin(self.refuse_other_cluster(&msg.cluster)).await;
                return Ok(());
            }
            conn.touch();
            match msg.body {
                Some(agent_message::Body::Heartbeat(_)) => {
                    s.metrics.heartbeats.inc();
                }
                Some(agent_message::Body::StatusReport(report)) => {
                    // Boxed: the set keeps a stub task as large as its future type.
                    stored.push(Box::pin(self.store_report(report)));
                }
                Some(agent_message::Body::Ack(ack)) => {
                    conn.acked_revision
                        .fetch_max(ack.revision, Ordering::Relaxed);
                }
                Some(agent_message::Body::Hello(_)) => {
                    return Err(Status::failed_precondition("Hello may only be sent once"));
                }
                Some(agent_message::Body::Renew(request)) => {
                    let answer = Box::pin(renewal::answer(
                        s,
                        &self.cluster,
                        &self.certificate,
                        request,
                    ))
                    .await?;
                    if self.tx.send(Ok(answer)).await.is_err() {
                        return Ok(());
                    }
                    *renewed = true;
                }
                Some(agent_message::Body::MemberHealth(health)) => {
                    Box::pin(self.record_health(&mut reported.health, &health)).await;
                }
                Some(agent_message::Body::MemberCapacity(capacity)) => {
                    let record = CapacityRecord::from_proto(&capacity);
                    if Box::pin(self.record_report(&mut reported.capacity, record, "capacity"))
                        .await
                    {
                        debug!(cluster = %self.cluster, ?capacity, "member capacity stored");
                    }
                }
                None => return Err(Status::invalid_argument("empty message")),
            }
        }
        // The stream ended: answer what is being stored, if anyone still listens.
        while let Some(ack) = stored.next().await {
            if self.tx.send(Ok(ack?)).await.is_err() {
                break;
            }
        }
        Ok(())
    }

    /// Stores the member's health if it differs from `last` (what this stream stored
    /// before), and logs the change.
    async fn record_health(&self, last: &mut Option<HealthRecord>, reported: &MemberHealth) {
        let record = HealthRecord::from_proto(reported);
        let available = record.api_server_available;
        let message = record.message.clone();
        if Box::pin(self.record_report(last, record, "health")).await {
            if available {
                info!(cluster = %self.cluster, "member API server available");
            } else {
                warn!(cluster = %self.cluster, error = %message, "member API server unavailable");
            }
        }
    }

    /// Stores `record`, one of the member's reports, if it differs from `last` (what this
    /// stream stored before); true when it was stored. A failed write is logged and retried
    /// with the next message.
    async fn record_report<R: MemberReport>(
        &self,
        last: &mut Option<R>,
        record: R,
        what: &'static str,
    ) -> bool {
        if last.as_ref() == Some(&record) {
            return false;
        }
        let s = &self.shared;
        match s.store.write_report(&self.cluster, &record).await {
            Ok(()) => {
                *last = Some(record);
                true
            }
            Err(e) => {
                s.metrics.error(e.kind());
                warn!(cluster = %self.cluster, what, error = %error_chain(&e), "could not store the member's report");
                false
            }
        }
    }

    async fn refuse_other_cluster(&self, named: &str) {
        self.shared.metrics.error("permission_denied");
        warn!(cluster = %self.cluster, named, "agent tried to speak for another cluster");
        let _ = self
            .tx
            .send(Err(Status::permission_denied(format!(
                "this stream belongs to cluster {:?}; it cannot speak for {named:?}",
                self.cluster
            ))))
            .await;
    }

    /// Writes one report with optimistic concurrency and builds the answer.
    async fn store_report(&self, mut report: StatusReport) -> Result<HubMessage, Status> {
        let s = &self.shared;
        let expected_version = report.expected_version;
        let traceparent = std::mem::take(&mut report.traceparent);
        let (placed, record) = translate_report(report)?;
        let span = if traceparent.is_empty() || !telemetry::enabled() {
            tracing::Span::none()
        } else {
            let span = tracing::info_span!(
                target: telemetry::TARGET,
                parent: None,
                "report stored",
                accord.cluster = %self.cluster,
                accord.state = %record.state,
                accord.applied_revision = record.applied_revision,
            );
            telemetry::set_parent(&span, &traceparent);
            span
        };
        let written_key = format!("{}/{}/{}", placed.kind, placed.namespace, placed.name);
        let known = self
            .written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&written_key)
            .filter(|(version, _)| *version == expected_version)
            .map(|(_, order)| order.clone());
        let started = Instant::now();
        let outcome = s
            .store
            .write_status(
                &self.cluster,
                &placed.kind,
                &placed.namespace,
                &placed.name,
                &record,
                expected_version,
                known.as_ref(),
            )
            .instrument(span)
            .await;
        s.metrics
            .etcd_txn_seconds
            .observe(started.elapsed().as_secs_f64());
        let (result, reason) = match outcome {
            Ok(WriteOutcome::Accepted { version }) => {
                s.metrics.report("accepted");
                self.observe_change(&placed, &record, &traceparent);
                self.written
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(written_key, (version, record.order()));
                (status_ack::Result::Accepted(version), None)
            }
            Ok(WriteOutcome::Conflict { current, reason }) => {
                s.metrics.report("conflict");
                debug!(cluster = %self.cluster, current, reason = reason.label(), "report refused");
                (status_ack::Result::Conflict(current), Some(reason))
            }
            Err(e) => {
                s.metrics.error(e.kind());
                return Err(Status::unavailable(format!(
                    "hub store: {}",
                    error_chain(&e)
                )));
            }
        };
        Ok(HubMessage {
            body: Some(hub_message::Body::StatusAck(StatusAck {
                placed: Some(placed),
                result: Some(result),
                reason: reason.map_or(0, |r| r.to_proto() as i32),
            })),
        })
    }
}

impl Session {
    /// Times a stored report's stages: from the member's observation to its record, and,
    /// for a report that the member applied the decision in force, from that decision.
    fn observe_change(&self, placed: &ObjectRef, record: &StatusRecord, traceparent: &str) {
        let stages = &self.shared.metrics.change;
        let now = unix_millis();
        let since = |millis: i64| (now - millis).max(0) as f64 / 1000.0;
        observe_traced(
            &stages.report_seconds,
            since(record.observed_unix_millis),
            traceparent,
        );
        if record.state != PlacementState::Synced {
            return;
        }
        let key =
            self.shared
                .store
                .keys()
                .placements(&placed.kind, &placed.namespace, &placed.name);
        let decided = self.shared.fanout.cache().read(&key, |r, revision| {
            let current = r
                .share(&self.cluster)
                .is_some_and(|share| record.applied_revision >= share.current_from(revision));
            current.then(|| (r.decided_unix_millis, r.traceparent.clone()))
        });
        if let Some(Some((decided, change))) = decided {
            let traceparent = if traceparent.is_empty() {
                &change
            } else {
                traceparent
            };
            observe_traced(
                &stages
                    .end_to_end_seconds
                    .get_or_create(&KindLabel::of(&placed.kind)),
                since(decided),
                traceparent,
            );
        }
    }
}

/// A report's placed object and the status record to store, or `INVALID_ARGUMENT` saying what is
/// missing: a placed object with a known kind and a name, and a known placement state.
pub fn translate_report(report: StatusReport) -> Result<(ObjectRef, StatusRecord), Status> {
    let placed = report
        .placed
        .ok_or_else(|| Status::invalid_argument("status report without a placed object"))?;
    if placed.kind.is_empty() || placed.name.is_empty() {
        return Err(Status::invalid_argument(
            "status report placed object needs a kind and a name",
        ));
    }
    if let Err(e) = placed.kind.parse::<PlacedKind>() {
        return Err(Status::invalid_argument(format!(
            "status report about an {e}"
        )));
    }
    let state = state_from_proto(report.state).ok_or_else(|| {
        Status::invalid_argument(format!(
            "status report with an unset or unknown placement state ({})",
            report.state
        ))
    })?;
    let record = StatusRecord {
        resource_version: report.resource_version,
        generation: report.generation,
        applied_revision: report.applied_revision,
        state,
        message: report.message,
        observed_unix_millis: report.observed_unix_millis,
        observed: Observed::from_proto(report.observed),
        api_server_unavailable: report.api_server_unavailable,
    };
    Ok((placed, record))
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::distribution::{PlacementState, ScaleObserved, state_to_proto};
    use accord_proto::v1::{ScaleStatus, status_report};

    fn report(state: i32) -> StatusReport {
        StatusReport {
            placed: Some(ObjectRef {
                kind: "CrossClusterScalePolicy".into(),
                namespace: "default".into(),
                name: "web".into(),
            }),
            state,
            resource_version: "12".into(),
            generation: 3,
            applied_revision: 40,
            observed_unix_millis: 1_000,
            observed: Some(status_report::Observed::Scale(ScaleStatus {
                desired_replicas: 7,
                ready_replicas: 6,
                updated_replicas: 7,
                observed_generation: 3,
                scale_request_id: "01J".into(),
                fitting_replicas: None,
            })),
            ..StatusReport::default()
        }
    }

    #[test]
    fn a_report_becomes_a_typed_record_with_the_request_id_in_its_observation() {
        let (placed, record) =
            translate_report(report(state_to_proto(PlacementState::Synced) as i32)).unwrap();
        assert_eq!(placed.name, "web");
        assert_eq!(record.state, PlacementState::Synced);
        assert_eq!(
            record.observed.scale(),
            Some(&ScaleObserved {
                desired: 7,
                ready: 6,
                updated: 7,
                observed_generation: 3,
                scale_request_id: "01J".into(),
                fitting_replicas: None,
            })
        );
        assert_eq!((record.applied_revision, record.generation), (40, 3));
    }

    #[test]
    fn a_report_of_an_unavailable_member_api_server_is_recorded_as_such() {
        let mut down = report(state_to_proto(PlacementState::Unavailable) as i32);
        down.api_server_unavailable = true;
        down.message = "member API server unavailable: GET /readyz timed out".into();
        let (_, record) = translate_report(down).unwrap();
        assert!(record.api_server_unavailable);
        let (_, record) =
            translate_report(report(state_to_proto(PlacementState::Unavailable) as i32)).unwrap();
        assert!(!record.api_server_unavailable);
    }

    #[test]
    fn a_report_without_a_known_state_is_an_invalid_argument() {
        for state in [0, 99] {
            let err = translate_report(report(state)).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{state}");
        }
        let mut nameless = report(state_to_proto(PlacementState::Synced) as i32);
        nameless.placed = None;
        assert_eq!(
            translate_report(nameless).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        let mut unknown = report(state_to_proto(PlacementState::Synced) as i32);
        unknown.placed.as_mut().unwrap().kind = "FederatedKafkaGroup".into();
        let err = translate_report(unknown).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("FederatedKafkaGroup"), "{err}");
    }
}
