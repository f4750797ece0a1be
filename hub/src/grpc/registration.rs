//! `Registration.Register`: a bootstrap token and a CSR in, a client certificate out.
//!
//! Failed token checks are limited per source address ([`FailureLimiter`]): after
//! [`FAILURES_PER_WINDOW`] bad, expired or used tokens within [`FAILURE_WINDOW`], the
//! address gets `RESOURCE_EXHAUSTED` (without its token being looked at) until the oldest
//! of those failures leaves the window, so guessing tokens costs a minute per handful.
//! Every outcome is counted in `accord_hub_registrations_total{result}`.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use accord_crds::HUB_FIELD_MANAGER;
use accord_crds::validate::is_dns1123_label;
use accord_proto::v1::registration_server::Registration;
use accord_proto::v1::{RegisterRequest, RegisterResponse};
use dashmap::DashMap;
use kube::api::{Api, Patch, PatchParams};
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use super::AgentFacing;
use crate::controllers::ClusterObject;
use crate::controllers::cluster_status::REGISTRATION_FINALIZER;
use crate::store::error_chain;
use crate::store::registry::ClusterRecord;
use crate::store::tokens::TokenError;

/// Failed token checks one source address may make within [`FAILURE_WINDOW`].
pub const FAILURES_PER_WINDOW: usize = 5;
/// The window failed token checks are counted in.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);

/// The Registration service.
pub struct RegistrationService {
    shared: AgentFacing,
    limiter: FailureLimiter,
}

impl RegistrationService {
    /// A service over the hub's shared state.
    pub fn new(shared: AgentFacing) -> Self {
        Self {
            shared,
            limiter: FailureLimiter::new(FAILURES_PER_WINDOW, FAILURE_WINDOW),
        }
    }
}

/// A refused registration: the status for the agent and the `result` label to count.
type Refusal = (Status, &'static str);

/// Maps a token problem to the status an agent shows its user and its result label.
fn token_refusal(e: TokenError) -> Refusal {
    match e {
        TokenError::Store(inner) => (
            Status::unavailable(format!("the hub could not check the token: {inner}")),
            "unavailable",
        ),
        other => (Status::unauthenticated(other.to_string()), "bad_token"),
    }
}

/// Counts failed token checks per source address in a sliding window.
///
/// IPv6 sources count per /64 (one host usually holds a whole /64), IPv4 per address.
/// Memory stays bounded by the sources seen within one window: each keeps at most `limit`
/// timestamps, and sources whose failures all left the window are dropped as the map grows.
#[derive(Debug)]
pub struct FailureLimiter {
    limit: usize,
    window: Duration,
    failures: DashMap<IpAddr, VecDeque<Instant>>,
    /// Map size at which expired sources are dropped next.
    prune_at: AtomicUsize,
}

/// Smallest map size that triggers dropping expired sources.
const PRUNE_FLOOR: usize = 1024;

impl FailureLimiter {
    /// A limiter allowing `limit` failures per source within `window`.
    pub fn new(limit: usize, window: Duration) -> Self {
        Self {
            limit: limit.max(1),
            window,
            failures: DashMap::new(),
            prune_at: AtomicUsize::new(PRUNE_FLOOR),
        }
    }

    /// `Ok` when `source` may try a token at `now`, else how long until it may.
    pub fn check(&self, source: IpAddr, now: Instant) -> Result<(), Duration> {
        let Some(mut entry) = self.failures.get_mut(&source_key(source)) else {
            return Ok(());
        };
        self.forget_expired(&mut entry, now);
        if entry.len() < self.limit {
            return Ok(());
        }
        let oldest = entry.front().copied().unwrap_or(now);
        Err((oldest + self.window).saturating_duration_since(now))
    }

    /// Records a failed token check from `source` at `now`.
    pub fn failed(&self, source: IpAddr, now: Instant) {
        {
            let mut entry = self.failures.entry(source_key(source)).or_default();
            self.forget_expired(&mut entry, now);
            entry.push_back(now);
            while entry.len() > self.limit {
                entry.pop_front();
            }
        }
        if self.failures.len() >= self.prune_at.load(Ordering::Relaxed) {
            self.failures.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|last| now.saturating_duration_since(*last) < self.window)
            });
            let next = (self.failures.len() * 2).max(PRUNE_FLOOR);
            self.prune_at.store(next, Ordering::Relaxed);
        }
    }

    /// Number of sources with failures on record (for tests and debugging).
    pub fn sources(&self) -> usize {
        self.failures.len()
    }

    fn forget_expired(&self, times: &mut VecDeque<Instant>, now: Instant) {
        while times
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= self.window)
        {
            times.pop_front();
        }
    }
}

/// The address failures are counted under: IPv4 as is (also when mapped into IPv6), IPv6
/// by its /64.
fn source_key(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(segments.into())
            }
        },
    }
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn register(
        &self,
        request: Request<RegisterRequest>,
    ) -> Result<Response<RegisterResponse>, Status> {
        let source = request.remote_addr().map(|a| a.ip());
        if let Some(source) = source
            && let Err(wait) = self.limiter.check(source, Instant::now())
        {
            self.shared.metrics.registration("rate_limited");
            warn!(%source, "registration refused: too many failed token checks from this address");
            return Err(Status::resource_exhausted(format!(
                "too many registrations with a bad, expired or used token from this address; \
                 try again in {}s",
                wait.as_secs().max(1)
            )));
        }
        match self.register_once(request.into_inner()).await {
            Ok(response) => {
                self.shared.metrics.registration("ok");
                Ok(Response::new(response))
            }
            Err((status, result)) => {
                if result == "bad_token"
                    && let Some(source) = source
                {
                    self.limiter.failed(source, Instant::now());
                }
                self.shared.metrics.registration(result);
                Err(status)
            }
        }
    }
}

impl RegistrationService {
    async fn register_once(&self, req: RegisterRequest) -> Result<RegisterResponse, Refusal> {
        let s = &self.shared;
        let cluster = req.cluster_name.as_str();
        if !is_dns1123_label(cluster) {
            return Err((
                Status::invalid_argument(format!(
                    "cluster name {cluster:?}: {}",
                    accord_crds::messages::CLUSTER_NAME
                )),
                "invalid",
            ));
        }
        // The token first: a caller without a valid one learns nothing about cluster names
        // and costs no signing work.
        s.store
            .check_token(&req.token)
            .await
            .map_err(token_refusal)?;
        let signed =
            s.ca.sign_agent_csr(&req.csr_pem, cluster, s.settings.cert_validity)
                .map_err(|e| {
                    (
                        Status::invalid_argument(format!("certificate signing request: {e}")),
                        "invalid",
                    )
                })?;

        let existing = s.store.get_cluster(cluster).await.map_err(|e| {
            s.metrics.error(e.kind());
            (
                Status::unavailable(format!(
                    "the hub could not read its cluster registry: {}",
                    error_chain(&e)
                )),
                "unavailable",
            )
        })?;
        if let Some(existing) = &existing
            && existing.spki_sha256 != signed.spki_sha256
            && !req.force
        {
            return Err((
                Status::already_exists(format!(
                    "cluster {cluster:?} is already joined with another identity; to replace it \
                     (the old agent's certificate stops working) join again with --force"
                )),
                "already_exists",
            ));
        }
        // A ManagedCluster on its way out is being revoked; a registration now would be
        // undone by that revocation. The token stays unused.
        let api: Api<ClusterObject> = Api::all(s.kube.clone());
        match api.get_opt(cluster).await {
            Ok(Some(object)) if object.metadata.deletion_timestamp.is_some() => {
                return Err((
                    Status::failed_precondition(format!(
                        "the ManagedCluster {cluster:?} is being deleted (its registration is \
                         being revoked); join again once it is gone"
                    )),
                    "being_deleted",
                ));
            }
            Ok(_) => {}
            Err(e) => {
                s.metrics.error("kubernetes");
                warn!(cluster, error = %e, "could not check whether the ManagedCluster is being deleted");
            }
        }

        s.store
            .consume_token(&req.token, cluster)
            .await
            .map_err(token_refusal)?;

        let record = ClusterRecord {
            name: cluster.to_owned(),
            spki_sha256: signed.spki_sha256.clone(),
            labels: req.labels.clone().into_iter().collect(),
            registered_unix: accord_common::runtime::unix_millis() / 1000,
            previous: None,
        };
        // A replaced identity's stream ends on whichever replica holds it, once this write
        // reaches that replica's registry watch (crate::revocation).
        s.store.put_cluster(&record).await.map_err(|e| {
            s.metrics.error(e.kind());
            (
                Status::unavailable(format!(
                    "the hub could not record the cluster: {}",
                    error_chain(&e)
                )),
                "unavailable",
            )
        })?;

        // The ManagedCluster object, with the finalizer through which deleting it revokes
        // the cluster; its status (Joined, Available) is the leader's to write.
        let object = serde_json::json!({
            "apiVersion": format!("{}/{}", accord_crds::GROUP, accord_crds::VERSION),
            "kind": "ManagedCluster",
            "metadata": {
                "name": cluster,
                "labels": req.labels,
                "finalizers": [REGISTRATION_FINALIZER],
            },
            "spec": {},
        });
        if let Err(e) = api
            .patch(
                cluster,
                &PatchParams::apply(HUB_FIELD_MANAGER),
                &Patch::Apply(&object),
            )
            .await
        {
            s.metrics.error("kubernetes");
            warn!(cluster, error = %e, "ManagedCluster not written; the status controller retries");
        }
        info!(cluster, replaced = existing.is_some(), "cluster registered");
        Ok(RegisterResponse {
            certificate_pem: signed.cert_pem,
            ca_certificate_pem: s.ca.cert_pem().to_owned(),
            not_after_unix: signed.not_after_unix,
            cluster_name: cluster.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const WINDOW: Duration = Duration::from_secs(60);

    fn v4(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    #[test]
    fn a_source_is_limited_after_the_allowed_failures_until_the_oldest_leaves_the_window() {
        let limiter = FailureLimiter::new(5, WINDOW);
        let t0 = Instant::now();
        for i in 0..5 {
            assert_eq!(limiter.check(v4(1), t0 + Duration::from_secs(i)), Ok(()));
            limiter.failed(v4(1), t0 + Duration::from_secs(i));
        }
        let now = t0 + Duration::from_secs(10);
        assert_eq!(limiter.check(v4(1), now), Err(Duration::from_secs(50)));
        // Just before the first failure leaves the window: still limited.
        assert!(
            limiter
                .check(v4(1), t0 + WINDOW - Duration::from_millis(1))
                .is_err()
        );
        // Once it has, one more try is allowed, and a failure limits again.
        assert_eq!(limiter.check(v4(1), t0 + WINDOW), Ok(()));
        limiter.failed(v4(1), t0 + WINDOW);
        assert!(limiter.check(v4(1), t0 + WINDOW).is_err());
    }

    #[test]
    fn other_sources_are_not_affected() {
        let limiter = FailureLimiter::new(2, WINDOW);
        let t0 = Instant::now();
        limiter.failed(v4(1), t0);
        limiter.failed(v4(1), t0);
        assert!(limiter.check(v4(1), t0).is_err());
        assert_eq!(limiter.check(v4(2), t0), Ok(()));
    }

    #[test]
    fn failures_spread_wider_than_the_window_never_limit() {
        let limiter = FailureLimiter::new(3, WINDOW);
        let t0 = Instant::now();
        for i in 0..20u64 {
            let at = t0 + Duration::from_secs(i * 30);
            assert_eq!(limiter.check(v4(1), at), Ok(()), "failure {i}");
            limiter.failed(v4(1), at);
        }
    }

    #[test]
    fn ipv6_sources_count_per_slash_64_and_mapped_ipv4_as_ipv4() {
        let limiter = FailureLimiter::new(2, WINDOW);
        let t0 = Instant::now();
        let a: IpAddr = "2001:db8:1:2::1".parse::<Ipv6Addr>().unwrap().into();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse::<Ipv6Addr>().unwrap().into();
        let other: IpAddr = "2001:db8:1:3::1".parse::<Ipv6Addr>().unwrap().into();
        limiter.failed(a, t0);
        limiter.failed(b, t0);
        assert!(limiter.check(a, t0).is_err());
        assert_eq!(limiter.check(other, t0), Ok(()));
        let mapped: IpAddr = Ipv4Addr::new(10, 0, 0, 7).to_ipv6_mapped().into();
        limiter.failed(mapped, t0);
        limiter.failed(v4(7), t0);
        assert!(limiter.check(v4(7), t0).is_err());
    }

    #[test]
    fn sources_whose_failures_expired_are_dropped_as_the_map_grows() {
        let limiter = FailureLimiter::new(5, WINDOW);
        let t0 = Instant::now();
        for i in 0..PRUNE_FLOOR as u32 {
            limiter.failed(IpAddr::V4(Ipv4Addr::from(i)), t0);
        }
        assert!(limiter.sources() <= PRUNE_FLOOR);
        let later = t0 + WINDOW * 2;
        for i in 0..PRUNE_FLOOR as u32 {
            limiter.failed(IpAddr::V4(Ipv4Addr::from(1_000_000 + i)), later);
        }
        assert!(
            limiter.sources() <= PRUNE_FLOOR + 1,
            "expired sources kept: {}",
            limiter.sources()
        );
        // A source limited now is still limited after the pruning.
        for _ in 0..5 {
            limiter.failed(v4(9), later);
        }
        assert!(limiter.check(v4(9), later).is_err());
    }

    #[test]
    fn a_limit_of_zero_still_allows_one_try() {
        let limiter = FailureLimiter::new(0, WINDOW);
        let t0 = Instant::now();
        assert_eq!(limiter.check(v4(1), t0), Ok(()));
        limiter.failed(v4(1), t0);
        assert!(limiter.check(v4(1), t0).is_err());
    }
}
