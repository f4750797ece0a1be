//! Keeps the etcd client's requests on the members that answer.
//!
//! The client spreads requests over every endpoint it was given, and its balancer (tonic's)
//! keeps a member that is down in the rotation: each request sent its way fails with a
//! connect error instead of going to another member. With one member of three killed,
//! that was a share of every kind of request for as long as the member stayed down —
//! agent streams refused, reports unstored, the cluster counted disconnected and back,
//! minutes after etcd itself had a new leader (`hub-bench --etcd-members 3
//! --kill-etcd-leader`, docs/benchmarks.md). Here each endpoint is probed every
//! [`PROBE_INTERVAL`] (a TCP connect) and one that does not answer leaves the rotation of
//! both of the store's connections until it answers again. When none answers, all stay: no
//! choice is better than another then. A store connects only to the members that answer
//! when it starts ([`answering`]); the others join the rotation once they answer.

use std::collections::BTreeSet;
use std::time::Duration;

use tracing::{info, warn};

use super::Store;

/// How often each endpoint is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// How long a probe waits for the TCP handshake.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

impl Store {
    /// Probes the endpoints forever, taking those that do not answer out of the rotation
    /// and putting them back once they do. With one endpoint there is nothing to choose:
    /// it waits forever.
    pub async fn follow_members(self) {
        let Some(etcd) = self.etcd.clone().filter(|_| self.endpoints.len() >= 2) else {
            return std::future::pending().await;
        };
        let mut out: BTreeSet<String> = self.unreached.iter().cloned().collect();
        let mut tick = tokio::time::interval(PROBE_INTERVAL);
        loop {
            tick.tick().await;
            let live = answering(&self.endpoints).await;
            for endpoint in self.endpoints.iter() {
                let leave = !live.contains(endpoint);
                if leave && out.insert(endpoint.clone()) {
                    warn!(
                        endpoint,
                        "etcd member does not answer; sending it no requests"
                    );
                    for client in etcd.connections() {
                        if let Err(e) = client.remove_endpoint(endpoint).await {
                            warn!(endpoint, error = %e, "could not take the member out");
                        }
                    }
                } else if !leave && out.remove(endpoint) {
                    info!(endpoint, "etcd member answers again; sending it requests");
                    for client in etcd.connections() {
                        if let Err(e) = client.add_endpoint(endpoint).await {
                            warn!(endpoint, error = %e, "could not put the member back");
                        }
                    }
                }
            }
        }
    }
}

/// The endpoints of `endpoints` that answer now, or all of them when none does (a client
/// connects to those: one given a dead member fails a share of its first requests, which
/// for a one-shot command such as `accord-hub token create` is the whole command).
pub(crate) async fn answering(endpoints: &[String]) -> Vec<String> {
    if endpoints.len() < 2 {
        return endpoints.to_vec();
    }
    let answers = futures::future::join_all(endpoints.iter().map(|e| answers(e))).await;
    let live: Vec<String> = endpoints
        .iter()
        .zip(answers)
        .filter(|(_, answered)| *answered)
        .map(|(e, _)| e.clone())
        .collect();
    if live.is_empty() {
        endpoints.to_vec()
    } else {
        live
    }
}

/// Whether `endpoint` (`scheme://host:port`) accepts a TCP connection within the timeout.
async fn answers(endpoint: &str) -> bool {
    let Some(authority) = authority(endpoint) else {
        return true;
    };
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(authority)).await,
        Ok(Ok(_))
    )
}

/// `host:port` of an endpoint URL.
fn authority(endpoint: &str) -> Option<&str> {
    let rest = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    let authority = rest.split('/').next()?;
    (!authority.is_empty()).then_some(authority)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authority_is_host_and_port_with_or_without_a_scheme_or_path() {
        assert_eq!(authority("https://127.0.0.1:2379"), Some("127.0.0.1:2379"));
        assert_eq!(
            authority("http://etcd-0.etcd:2379/"),
            Some("etcd-0.etcd:2379")
        );
        assert_eq!(authority("127.0.0.1:2379"), Some("127.0.0.1:2379"));
        assert_eq!(authority("https://"), None);
    }

    #[tokio::test]
    async fn a_closed_port_does_not_answer_and_a_listening_one_does() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = format!("https://{}", listener.local_addr().unwrap());
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("https://{}", l.local_addr().unwrap())
        };
        assert!(answers(&open).await);
        assert!(!answers(&closed).await);
    }
}
