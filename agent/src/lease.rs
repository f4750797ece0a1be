//! Active/standby between agent replicas: a `coordination.k8s.io/v1` Lease in the agent's
//! namespace says which replica is active. Only the holder connects to the hub, watches and
//! applies; the others wait for the Lease to run out.
//!
//! The protocol is client-go's `leaderelection` with a Lease lock: every write is a
//! `replace` carrying the `resourceVersion` that was read, so two replicas racing for the
//! same Lease cannot both win (the API server refuses the second with 409 Conflict).
//! Expiry is judged on the local monotonic clock from the moment a replica *saw* the record
//! change, never by comparing its clock with the writer's `renewTime`, so clock skew
//! between nodes does not shorten a lease.
//!
//! Safety margin: the holder must renew within [`LeaseConfig::renew_deadline`] (two thirds
//! of the lease duration) of the start of its last successful write, or it stops writing. A
//! standby takes over only after it has seen no change for a whole lease duration, counted
//! from after that write, so the holder has stopped writing a third of the duration before
//! the standby could start.
//!
//! A holder past its renew deadline does not exit: when its API server does not answer
//! (down, frozen), no standby can take the Lease either, and exiting would end the hub
//! stream and fail the cluster over although its pods keep running. It keeps the stream
//! with its writes fenced, goes on renewing, resumes once a renewal succeeds and stops as
//! soon as it reads another holder. The hub stream is not opened again while the fence is
//! closed, so a holder cut off from its API server never competes with a standby that took
//! over for the one stream the hub keeps per cluster.
//!
//! Writes are fenced: the active replica's client to its API server ([`fenced_client`])
//! refuses every request that is not a read once the renew deadline of its last successful
//! renewal has passed ([`Fence`]). The check is made when a request is sent, so a replica
//! that was paused (SIGSTOP, a long stall, a frozen VM) and wakes up after its lease ran
//! out cannot write anything, whichever of its tasks runs first.
//!
//! The decisions are pure functions ([`Observer::observe`], [`decide`]); [`Elector`] adds
//! the two API calls (get, then create or replace).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::metrics::kube_error_kind;

/// Name of the Lease when `--lease-name` is not given.
pub const DEFAULT_LEASE_NAME: &str = "accord-agent";
/// Lease duration when `--lease-duration` is not given (client-go's default).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Shortest lease duration accepted: the renew deadline and retry period derived from it
/// must leave room for an API round trip.
pub const MIN_LEASE_DURATION: Duration = Duration::from_secs(2);

/// Which Lease, who is asking, and for how long a holder keeps it without renewing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Name of the Lease.
    pub name: String,
    /// Namespace of the Lease (the agent's namespace).
    pub namespace: String,
    /// This replica's holder identity; unique per process.
    pub identity: String,
    /// How long the Lease stays with a holder that stopped renewing; whole seconds (the
    /// Lease's `leaseDurationSeconds`).
    pub duration: Duration,
}

impl LeaseConfig {
    /// How long after the start of its last successful renewal the holder keeps trying to
    /// renew before it gives the Lease up (two thirds of the duration, as client-go's
    /// 10 s of 15 s).
    pub fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }

    /// Interval between two attempts to renew (holder) or to acquire (standby): a fifth of
    /// the duration, so a holder has several attempts before its deadline.
    pub fn retry_period(&self) -> Duration {
        self.duration / 5
    }

    /// `leaseDurationSeconds` as written into the Lease.
    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// A holder identity for this process: the host name (the pod's name in Kubernetes) and
/// the port of its HTTP endpoint. Two live processes never share it (the second could not
/// bind the port), and a process restarted in the same pod (or on the same address) gets
/// the same one back, so it resumes its own Lease at once instead of waiting it out.
pub fn process_identity(http_port: u16) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "agent".to_owned());
    format!("{host}_{http_port}")
}

/// Until when this replica may write to its API server as the holder. Shared between the
/// [`Elector`], which extends it after each successful renewal, and [`fenced_client`].
#[derive(Debug, Clone, Default)]
pub struct Fence(Arc<Mutex<Option<Instant>>>);

impl Fence {
    /// Allows writes until `until` (never shortens an allowance already given by a later
    /// renewal).
    pub fn extend_to(&self, until: Instant) {
        let mut valid = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if valid.is_none_or(|v| v < until) {
            *valid = Some(until);
        }
    }

    /// Refuses writes from now on.
    pub fn revoke(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Until when writes are allowed, if at all.
    pub fn valid_until(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether writes are allowed at `now`.
    pub fn allows_at(&self, now: Instant) -> bool {
        self.valid_until().is_some_and(|until| now < until)
    }

    /// Waits until writes are allowed (the Lease renewed again), looking every `every`.
    pub async fn allowed(&self, every: Duration) {
        while !self.allows_at(Instant::now()) {
            tokio::time::sleep(every).await;
        }
    }
}

/// A write refused because this replica does not (or no longer safely) hold the Lease.
#[derive(Debug, thiserror::Error)]
#[error("refused {method} {path}: this agent replica does not hold the agent Lease")]
pub struct Fenced {
    /// The request's method.
    pub method: String,
    /// The request's path.
    pub path: String,
}

/// Whether a request only reads (watches are GETs).
fn is_read(method: &http::Method) -> bool {
    matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}

/// `client`, with every request that is not a read refused (with [`Fenced`]) unless
/// `fence` allows writes at the moment it is sent.
pub fn fenced_client(client: &kube::Client, fence: Fence) -> kube::Client {
    let inner = client.clone();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let inner = inner.clone();
        let fence = fence.clone();
        async move {
            if !is_read(request.method()) && !fence.allows_at(Instant::now()) {
                return Err(tower::BoxError::from(Fenced {
                    method: request.method().to_string(),
                    path: request.uri().path().to_owned(),
                }));
            }
            inner.send(request).await.map_err(tower::BoxError::from)
        }
    });
    kube::Client::new(service, client.default_namespace().to_owned())
}

/// Why the Lease could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The API server refused or failed a request on the Lease.
    #[error("{verb} Lease {namespace}/{name}: {source}")]
    Api {
        /// `get`, `create` or `update`.
        verb: &'static str,
        /// The Lease's namespace.
        namespace: String,
        /// The Lease's name.
        name: String,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
    /// No answer within the time left to renew.
    #[error("no answer from the API server before the renew deadline")]
    Timeout,
}

impl LeaseError {
    /// A short label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Api { source, .. } => kube_error_kind(source),
            Self::Timeout => "timeout",
        }
    }
}

/// Why a holder stopped holding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseLost {
    /// Another replica holds the Lease now (this one was paused or partitioned past its
    /// lease).
    #[error("the Lease is held by {holder:?} now")]
    TakenBy {
        /// The new holder.
        holder: String,
    },
}

/// What this replica last saw of the Lease, and when (local monotonic clock).
#[derive(Debug, Default)]
pub struct Observer {
    last: Option<(LeaseSpec, Instant)>,
}

impl Observer {
    /// Records `spec` as seen at `now` (keeping the earlier time when nothing changed) and
    /// says whether its holder's lease has run out by `now`: true when no holder is set, or
    /// when the record has not changed for its `leaseDurationSeconds` (or `fallback` when
    /// the record has none).
    pub fn observe(&mut self, spec: &LeaseSpec, now: Instant, fallback: Duration) -> bool {
        let since = match &self.last {
            Some((seen, at)) if seen == spec => *at,
            _ => {
                self.last = Some((spec.clone(), now));
                now
            }
        };
        if holder_of(spec).is_none() {
            return true;
        }
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
            .unwrap_or(fallback);
        now.duration_since(since) >= duration
    }

    /// Records a record this replica wrote itself, seen at `now`.
    pub fn wrote(&mut self, spec: LeaseSpec, now: Instant) {
        self.last = Some((spec, now));
    }
}

/// The holder named in `spec`, if any (an empty string is no holder, as client-go writes
/// on release).
pub fn holder_of(spec: &LeaseSpec) -> Option<&str> {
    spec.holder_identity.as_deref().filter(|h| !h.is_empty())
}

/// What to do about the Lease as read.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Another replica holds it and its lease has not run out: wait.
    Wait {
        /// The holder.
        holder: String,
    },
    /// Write this record (renewal of our own, or taking over a free or expired one).
    Write(LeaseSpec),
}

/// Decides, from the Lease's current `spec` (`None`: no Lease yet) and whether it has
/// `expired` as this replica observed it, whether `config.identity` may write itself in as
/// the holder, and with what record. `now` is the wall-clock time written as
/// `renewTime`/`acquireTime` (informational: no replica compares it with its own clock).
pub fn decide(
    spec: Option<&LeaseSpec>,
    expired: bool,
    config: &LeaseConfig,
    now: MicroTime,
) -> Decision {
    let current = spec.cloned().unwrap_or_default();
    match holder_of(&current) {
        Some(holder) if holder == config.identity => Decision::Write(LeaseSpec {
            renew_time: Some(now),
            lease_duration_seconds: Some(config.duration_seconds()),
            ..current
        }),
        Some(holder) if !expired => Decision::Wait {
            holder: holder.to_owned(),
        },
        // Free, or held by someone whose lease ran out: take it over.
        _ => Decision::Write(LeaseSpec {
            holder_identity: Some(config.identity.clone()),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_duration_seconds: Some(config.duration_seconds()),
            lease_transitions: Some(
                current
                    .lease_transitions
                    .unwrap_or(0)
                    .saturating_add(i32::from(spec.is_some())),
            ),
            ..current
        }),
    }
}

/// The record client-go writes when a holder lets go: no holder, one second left, so a
/// standby takes over at its next attempt.
pub fn released(current: &LeaseSpec, now: MicroTime) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(String::new()),
        lease_duration_seconds: Some(1),
        renew_time: Some(now.clone()),
        acquire_time: Some(now),
        ..current.clone()
    }
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// The outcome of one attempt to acquire or renew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// This replica holds the Lease (its write went through).
    Holding,
    /// Another replica holds it.
    HeldBy(String),
    /// The Lease changed between the read and the write (409 Conflict): someone else
    /// wrote it; the next attempt reads who.
    Raced,
}

/// Runs the Lease protocol for one replica against the API server.
pub struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    observer: Observer,
    fence: Fence,
}

impl Elector {
    /// An elector for `config` using `client`.
    pub fn new(client: kube::Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observer: Observer::default(),
            fence: Fence::default(),
        }
    }

    /// The fence this elector keeps up to date: writes allowed until the renew deadline of
    /// the last successful acquisition or renewal.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// The configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    fn error(&self, verb: &'static str, source: kube::Error) -> LeaseError {
        LeaseError::Api {
            verb,
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            source,
        }
    }

    /// One round of client-go's `tryAcquireOrRenew`: read the Lease, decide, write with the
    /// read `resourceVersion`. On success the fence allows writes until the renew deadline
    /// counted from the start of this round.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Attempt, LeaseError> {
        let round_start = Instant::now();
        let attempt = self.try_once().await;
        if let Ok(Attempt::Holding) = attempt {
            self.fence
                .extend_to(round_start + self.config.renew_deadline());
        }
        attempt
    }

    async fn try_once(&mut self) -> Result<Attempt, LeaseError> {
        let name = self.config.name.clone();
        let found = self
            .api
            .get_opt(&name)
            .await
            .map_err(|e| self.error("get", e))?;
        let started = Instant::now();
        let Some(lease) = found else {
            let Decision::Write(spec) = decide(None, true, &self.config, now_micro()) else {
                unreachable!("no Lease is never held by another");
            };
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec.clone()),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => {
                    self.observer.wrote(spec, started);
                    Ok(Attempt::Holding)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Raced),
                Err(e) => Err(self.error("create", e)),
            };
        };
        let current = lease.spec.clone().unwrap_or_default();
        let expired = self
            .observer
            .observe(&current, started, self.config.duration);
        match decide(Some(&current), expired, &self.config, now_micro()) {
            Decision::Wait { holder } => Ok(Attempt::HeldBy(holder)),
            Decision::Write(spec) => {
                let mut next = lease;
                next.spec = Some(spec.clone());
                match self.api.replace(&name, &PostParams::default(), &next).await {
                    Ok(_) => {
                        self.observer.wrote(spec, started);
                        Ok(Attempt::Holding)
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Raced),
                    Err(e) => Err(self.error("update", e)),
                }
            }
        }
    }

    /// Waits until this replica holds the Lease, trying every retry period; errors are
    /// logged and retried (a standby that cannot reach its API server stays standby).
    /// `standing_by` is called with the holder each time another replica is seen to hold
    /// it.
    pub async fn acquire(&mut self, mut standing_by: impl FnMut(&str)) {
        let mut last_holder = None;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(Attempt::Holding) => {
                    info!(lease = %self.config.name, identity = %self.config.identity, "acquired the Lease: this replica is active");
                    return;
                }
                Ok(Attempt::HeldBy(holder)) => {
                    standing_by(&holder);
                    if last_holder.as_ref() != Some(&holder) {
                        info!(lease = %self.config.name, %holder, "standing by: another replica holds the Lease");
                        last_holder = Some(holder);
                    }
                }
                // Someone else wrote first; the next attempt reads who holds it now.
                Ok(Attempt::Raced) => {}
                Err(e) => {
                    warn!(error = %e, kind = e.kind(), "cannot read or take the Lease; retrying")
                }
            }
            tokio::time::sleep(self.config.retry_period()).await;
        }
    }

    /// Keeps renewing the Lease this replica holds; returns as soon as another replica
    /// holds it. Past the renew deadline the fence refuses writes until a renewal
    /// succeeds; each attempt is cut off at the renew deadline, so a hung API call cannot
    /// keep writes allowed past it.
    pub async fn hold(&mut self) -> LeaseLost {
        let lost = self.keep_renewing().await;
        self.fence.revoke();
        lost
    }

    async fn keep_renewing(&mut self) -> LeaseLost {
        // When the renew deadline passed without a renewal (the API server did not answer):
        // writes stay refused by the fence, but nobody else can have taken the Lease
        // without this replica seeing it at its next successful read.
        let mut fenced_since: Option<Instant> = None;
        let mut last_error;
        loop {
            let now = Instant::now();
            // While holding, an attempt is cut off at the renew deadline; once fenced, at
            // the retry period.
            let cutoff = self
                .fence
                .valid_until()
                .filter(|deadline| now < *deadline)
                .unwrap_or(now + self.config.retry_period());
            match tokio::time::timeout_at(cutoff, self.try_acquire_or_renew()).await {
                Ok(Ok(Attempt::Holding)) => {
                    if let Some(since) = fenced_since.take() {
                        info!(lease = %self.config.name, fenced_for = ?since.elapsed(), "renewed the Lease again: writes resume");
                    } else {
                        debug!(lease = %self.config.name, "renewed the Lease");
                    }
                    tokio::time::sleep(self.config.retry_period()).await;
                    continue;
                }
                Ok(Ok(Attempt::HeldBy(holder))) => return LeaseLost::TakenBy { holder },
                // Someone wrote the Lease meanwhile (a label, say); read it again soon:
                // if another replica took it, that attempt says so.
                Ok(Ok(Attempt::Raced)) => {
                    last_error = "the Lease changed between read and write".into();
                }
                Ok(Err(e)) => {
                    if fenced_since.is_none() {
                        warn!(error = %e, kind = e.kind(), "renewing the Lease failed; retrying until the renew deadline");
                    }
                    last_error = e.to_string();
                }
                Err(_) => last_error = LeaseError::Timeout.to_string(),
            }
            let now = Instant::now();
            match self.fence.valid_until() {
                // Retry sooner than the renewal interval: the deadline is near.
                Some(deadline) if now < deadline => {
                    tokio::time::sleep((self.config.retry_period() / 2).min(deadline - now)).await;
                }
                _ => {
                    if fenced_since.is_none() {
                        fenced_since = Some(now);
                        warn!(
                            lease = %self.config.name,
                            renew_deadline = ?self.config.renew_deadline(),
                            %last_error,
                            "the Lease was not renewed within the renew deadline: writes to the member stop; \
                             the hub stream stays, renewal goes on, and this replica stops if another one holds the Lease"
                        );
                    }
                    tokio::time::sleep(self.config.retry_period()).await;
                }
            }
        }
    }

    /// Lets go of the Lease if this replica holds it, so a standby takes over at its next
    /// attempt instead of waiting for the lease to run out. Best effort: on failure the
    /// standby waits out the duration.
    pub async fn release(&mut self) {
        self.fence.revoke();
        let name = self.config.name.clone();
        let lease = match self.api.get_opt(&name).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return,
            Err(e) => {
                warn!(error = %self.error("get", e), "cannot release the Lease");
                return;
            }
        };
        let current = lease.spec.clone().unwrap_or_default();
        if holder_of(&current) != Some(self.config.identity.as_str()) {
            return;
        }
        let mut next = lease;
        next.spec = Some(released(&current, now_micro()));
        match self.api.replace(&name, &PostParams::default(), &next).await {
            Ok(_) => info!(lease = %name, "released the Lease"),
            Err(e) => warn!(error = %self.error("update", e), "cannot release the Lease"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(identity: &str) -> LeaseConfig {
        LeaseConfig {
            name: "accord-agent".into(),
            namespace: "accord-system".into(),
            identity: identity.into(),
            duration: Duration::from_secs(15),
        }
    }

    fn at(seconds: i64) -> MicroTime {
        MicroTime(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + seconds).unwrap())
    }

    fn held_by(holder: &str, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            acquire_time: Some(at(0)),
            renew_time: Some(at(0)),
            lease_duration_seconds: Some(15),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn the_first_replica_creates_the_lease_as_its_holder() {
        let Decision::Write(spec) = decide(None, true, &config("a"), at(5)) else {
            panic!("expected a write");
        };
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.acquire_time, Some(at(5)));
        assert_eq!(spec.renew_time, Some(at(5)));
        assert_eq!(spec.lease_transitions, Some(0));
    }

    #[test]
    fn a_standby_waits_while_the_holders_lease_has_not_run_out() {
        assert_eq!(
            decide(Some(&held_by("a", 3)), false, &config("b"), at(5)),
            Decision::Wait { holder: "a".into() }
        );
    }

    #[test]
    fn a_standby_takes_over_an_expired_lease_and_counts_the_transition() {
        let Decision::Write(spec) = decide(Some(&held_by("a", 3)), true, &config("b"), at(20))
        else {
            panic!("expected a write");
        };
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.acquire_time, Some(at(20)));
        assert_eq!(spec.renew_time, Some(at(20)));
        assert_eq!(spec.lease_transitions, Some(4));
    }

    #[test]
    fn the_holder_renews_keeping_its_acquire_time_and_transitions() {
        let Decision::Write(spec) = decide(Some(&held_by("a", 3)), false, &config("a"), at(7))
        else {
            panic!("expected a write");
        };
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.acquire_time, Some(at(0)));
        assert_eq!(spec.renew_time, Some(at(7)));
        assert_eq!(spec.lease_transitions, Some(3));
    }

    #[test]
    fn a_released_lease_is_free_at_once() {
        let free = released(&held_by("a", 3), at(9));
        assert_eq!(holder_of(&free), None);
        let mut observer = Observer::default();
        assert!(observer.observe(&free, Instant::now(), Duration::from_secs(15)));
        let Decision::Write(spec) = decide(Some(&free), true, &config("b"), at(10)) else {
            panic!("expected a write");
        };
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(4));
    }

    #[test]
    fn expiry_counts_from_when_the_record_was_seen_to_change_not_from_its_renew_time() {
        let mut observer = Observer::default();
        let t0 = Instant::now();
        // The writer's clock is far behind: its renewTime says nothing to this replica.
        let mut spec = held_by("a", 0);
        spec.renew_time = Some(at(-86_400));
        let fallback = Duration::from_secs(15);
        assert!(!observer.observe(&spec, t0, fallback));
        assert!(!observer.observe(&spec, t0 + Duration::from_secs(14), fallback));
        assert!(observer.observe(&spec, t0 + Duration::from_secs(15), fallback));
        // A renewal (a changed record) restarts the count.
        spec.renew_time = Some(at(-86_390));
        assert!(!observer.observe(&spec, t0 + Duration::from_secs(16), fallback));
        assert!(!observer.observe(&spec, t0 + Duration::from_secs(30), fallback));
        assert!(observer.observe(&spec, t0 + Duration::from_secs(31), fallback));
    }

    #[test]
    fn expiry_uses_the_records_duration_and_falls_back_to_ours() {
        let mut observer = Observer::default();
        let t0 = Instant::now();
        let mut spec = held_by("a", 0);
        spec.lease_duration_seconds = Some(4);
        assert!(!observer.observe(&spec, t0, Duration::from_secs(15)));
        assert!(observer.observe(&spec, t0 + Duration::from_secs(4), Duration::from_secs(15)));
        let mut observer = Observer::default();
        spec.lease_duration_seconds = None;
        assert!(!observer.observe(&spec, t0, Duration::from_secs(6)));
        assert!(!observer.observe(&spec, t0 + Duration::from_secs(5), Duration::from_secs(6)));
        assert!(observer.observe(&spec, t0 + Duration::from_secs(6), Duration::from_secs(6)));
        // A negative duration in a hand-edited Lease is not a lease for ever.
        spec.lease_duration_seconds = Some(-1);
        let mut observer = Observer::default();
        assert!(!observer.observe(&spec, t0, Duration::from_secs(6)));
        assert!(observer.observe(&spec, t0 + Duration::from_secs(6), Duration::from_secs(6)));
    }

    #[test]
    fn a_holder_gives_up_well_before_a_standby_may_take_over() {
        for seconds in [2, 4, 15, 60] {
            let c = LeaseConfig {
                duration: Duration::from_secs(seconds),
                ..config("a")
            };
            // The holder stops at renew_deadline after its last good write started; a
            // standby waits a whole duration after it saw that write.
            assert!(c.renew_deadline() < c.duration, "{c:?}");
            assert!(c.duration - c.renew_deadline() >= c.duration / 3, "{c:?}");
            // Several attempts fit before the deadline.
            assert!(c.retry_period() * 3 <= c.renew_deadline(), "{c:?}");
        }
    }

    #[test]
    fn the_fence_allows_writes_only_before_its_deadline_and_never_after_a_revoke() {
        let fence = Fence::default();
        let t0 = Instant::now();
        assert!(!fence.allows_at(t0), "a standby may not write");
        fence.extend_to(t0 + Duration::from_secs(10));
        assert!(fence.allows_at(t0 + Duration::from_secs(9)));
        assert!(!fence.allows_at(t0 + Duration::from_secs(10)));
        // A slow, older round finishing late does not shorten a newer allowance.
        fence.extend_to(t0 + Duration::from_secs(5));
        assert!(fence.allows_at(t0 + Duration::from_secs(9)));
        fence.revoke();
        assert!(!fence.allows_at(t0));
    }

    #[tokio::test]
    async fn a_fenced_client_sends_reads_always_and_writes_only_while_the_fence_allows() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let sent = Arc::new(AtomicUsize::new(0));
        let counter = sent.clone();
        let backend = kube::Client::new(
            tower::service_fn(move |_: http::Request<kube::client::Body>| {
                counter.fetch_add(1, Ordering::SeqCst);
                async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(
                        kube::client::Body::from(b"{}".to_vec()),
                    ))
                }
            }),
            "default",
        );
        let fence = Fence::default();
        let client = fenced_client(&backend, fence.clone());
        let request = |method: &str| {
            http::Request::builder()
                .method(method)
                .uri("/apis/apps/v1/namespaces/a/deployments/web")
                .body(kube::client::Body::from(Vec::new()))
                .unwrap()
        };
        assert!(client.send(request("GET")).await.is_ok());
        let refused = client.send(request("PATCH")).await.unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("does not hold the agent Lease"),
            "{refused}"
        );
        assert_eq!(
            sent.load(Ordering::SeqCst),
            1,
            "the PATCH reached the server"
        );
        fence.extend_to(Instant::now() + Duration::from_secs(60));
        assert!(client.send(request("PATCH")).await.is_ok());
        assert!(client.send(request("POST")).await.is_ok());
        fence.revoke();
        assert!(client.send(request("DELETE")).await.is_err());
        assert!(client.send(request("PUT")).await.is_err());
        assert!(client.send(request("GET")).await.is_ok());
        assert_eq!(sent.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn processes_on_other_ports_get_other_identities_and_a_restart_the_same() {
        assert_ne!(process_identity(8081), process_identity(8082));
        assert_eq!(process_identity(8081), process_identity(8081));
        assert!(process_identity(8081).ends_with("_8081"));
    }
}
