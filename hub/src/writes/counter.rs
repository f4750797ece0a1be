//! Counts every write the hub makes to the management cluster's API server, as
//! `accord_hub_kube_writes_total{resource,verb,reason}`: a [`tower::Layer`] on the kube
//! client's service stack, so no write path can forget to count itself.
//!
//! The layer sits outside kube's own retry layer, so a request kube retries by itself
//! (429/503/504) counts once: the metric counts the writes the hub asks for.

use std::task::{Context, Poll};

use http::{Method, Request};
use kube::client::ClientBuilder;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tower::{Layer, Service};

use crate::metrics::{KubeWriteLabel, Metrics};

/// The API group of the accord.io CRDs, whose main resource the hub writes only for its
/// finalizers.
const ACCORD_GROUP: &str = "accord.io";

/// One write as the metric labels it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeWrite {
    /// The plural resource, with the subresource appended (`federatedkafkatopics/status`).
    pub resource: String,
    /// `create`, `update`, `patch`, `delete`, or `deletecollection` for a DELETE of a
    /// whole collection.
    pub verb: &'static str,
    /// `status`, `event`, `finalizer` or `object`.
    pub reason: &'static str,
}

impl KubeWrite {
    /// The write a request is, or `None` for a read (any method but POST, PUT, PATCH,
    /// DELETE). `path` is the request URI's path; a prefix before `/api/` or `/apis/` (an
    /// API server behind a path-routing proxy) is skipped.
    pub fn classify(method: &Method, path: &str) -> Option<Self> {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let target = Target::parse(&segments);
        let verb = match *method {
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE if target.as_ref().is_some_and(|t| t.name.is_none()) => {
                "deletecollection"
            }
            Method::DELETE => "delete",
            _ => return None,
        };
        let Some(target) = target else {
            return Some(Self {
                resource: "unknown".to_owned(),
                verb,
                reason: "object",
            });
        };
        let reason = if target.subresource == Some("status") {
            "status"
        } else if target.plural == "events" && matches!(target.group, "" | "events.k8s.io") {
            "event"
        } else if target.group == ACCORD_GROUP
            && target.subresource.is_none()
            && target.name.is_some()
            && matches!(verb, "patch" | "update")
        {
            "finalizer"
        } else {
            "object"
        };
        let resource = match target.subresource {
            Some(sub) => format!("{}/{sub}", target.plural),
            None => target.plural.to_owned(),
        };
        Some(Self {
            resource,
            verb,
            reason,
        })
    }
}

/// What a resource path names.
#[derive(Debug)]
struct Target<'a> {
    /// `""` for the core group.
    group: &'a str,
    plural: &'a str,
    name: Option<&'a str>,
    subresource: Option<&'a str>,
}

impl<'a> Target<'a> {
    /// Parses `/api/v1/…` and `/apis/{group}/{version}/…`, namespaced
    /// (`namespaces/{ns}/{plural}/…`) or cluster-scoped (`{plural}/…`).
    fn parse(segments: &[&'a str]) -> Option<Self> {
        let start = segments.iter().position(|s| *s == "api" || *s == "apis")?;
        let (group, rest) = if segments[start] == "api" {
            ("", segments.get(start + 2..)?)
        } else {
            (*segments.get(start + 1)?, segments.get(start + 3..)?)
        };
        // `namespaces/{ns}/{plural}` is a namespaced resource, except for the Namespace's
        // own subresources (`namespaces/{ns}/status`, `…/finalize`).
        let rest = match rest {
            ["namespaces", _, plural, ..] if !matches!(*plural, "status" | "finalize") => {
                &rest[2..]
            }
            _ => rest,
        };
        let plural = *rest.first()?;
        Some(Self {
            group,
            plural,
            name: rest.get(1).copied(),
            subresource: rest.get(2).copied(),
        })
    }
}

/// A [`Layer`] that counts the writes passing through it in `accord_hub_kube_writes_total`.
#[derive(Clone, Debug)]
pub struct CountWritesLayer {
    writes: Family<KubeWriteLabel, Counter>,
}

impl CountWritesLayer {
    /// Counts into `metrics`' `kube_writes` family.
    pub fn new(metrics: &Metrics) -> Self {
        Self {
            writes: metrics.kube_writes.clone(),
        }
    }
}

impl<S> Layer<S> for CountWritesLayer {
    type Service = CountWrites<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountWrites {
            inner,
            writes: self.writes.clone(),
        }
    }
}

/// The service [`CountWritesLayer`] wraps around the client's stack.
#[derive(Clone, Debug)]
pub struct CountWrites<S> {
    inner: S,
    writes: Family<KubeWriteLabel, Counter>,
}

impl<S, B> Service<Request<B>> for CountWrites<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if let Some(write) = KubeWrite::classify(request.method(), request.uri().path()) {
            self.writes
                .get_or_create(&KubeWriteLabel {
                    resource: write.resource,
                    verb: write.verb.to_owned(),
                    reason: write.reason.to_owned(),
                })
                .inc();
        }
        self.inner.call(request)
    }
}

/// A client for `config` (see [`accord_common::runtime::kube_config`]) whose writes are
/// counted in `metrics`.
pub fn counted_client(
    config: kube::Config,
    metrics: &Metrics,
) -> Result<kube::Client, kube::Error> {
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&CountWritesLayer::new(metrics))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::ServiceExt;

    fn classify(method: Method, path: &str) -> Option<(String, &'static str, &'static str)> {
        KubeWrite::classify(&method, path).map(|w| (w.resource, w.verb, w.reason))
    }

    #[test]
    fn writes_are_labelled_by_resource_verb_and_reason() {
        let table: &[(Method, &str, &str, &str, &str)] = &[
            (
                Method::PATCH,
                "/apis/accord.io/v1beta1/namespaces/x/federatedkafkatopics/y/status",
                "federatedkafkatopics/status",
                "patch",
                "status",
            ),
            (
                Method::PUT,
                "/apis/accord.io/v1beta1/namespaces/x/federatedkafkatopics/y/status",
                "federatedkafkatopics/status",
                "update",
                "status",
            ),
            (
                Method::PATCH,
                "/apis/accord.io/v1beta1/namespaces/x/federatedkafkatopics/y",
                "federatedkafkatopics",
                "patch",
                "finalizer",
            ),
            (
                Method::PATCH,
                "/apis/accord.io/v1beta1/managedclusters/c1/status",
                "managedclusters/status",
                "patch",
                "status",
            ),
            (
                Method::PUT,
                "/apis/accord.io/v1beta1/managedclusters/c1",
                "managedclusters",
                "update",
                "finalizer",
            ),
            (
                Method::DELETE,
                "/apis/accord.io/v1beta1/managedclusters/c1",
                "managedclusters",
                "delete",
                "object",
            ),
            (
                Method::POST,
                "/apis/accord.io/v1beta1/namespaces/x/scalepolicies",
                "scalepolicies",
                "create",
                "object",
            ),
            (
                Method::POST,
                "/api/v1/namespaces/x/events",
                "events",
                "create",
                "event",
            ),
            (
                Method::PATCH,
                "/apis/events.k8s.io/v1/namespaces/x/events/y.17f",
                "events",
                "patch",
                "event",
            ),
            (
                Method::PATCH,
                "/api/v1/namespaces/x/configmaps/global-federation",
                "configmaps",
                "patch",
                "object",
            ),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/x/leases/hub",
                "leases",
                "update",
                "object",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/x/secrets",
                "secrets",
                "deletecollection",
                "object",
            ),
            (
                Method::POST,
                "/api/v1/namespaces",
                "namespaces",
                "create",
                "object",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/x",
                "namespaces",
                "delete",
                "object",
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/x/status",
                "namespaces/status",
                "update",
                "status",
            ),
            (
                Method::POST,
                "/proxy/prefix/api/v1/namespaces/x/configmaps",
                "configmaps",
                "create",
                "object",
            ),
            (Method::POST, "/version", "unknown", "create", "object"),
        ];
        for (method, path, resource, verb, reason) in table {
            assert_eq!(
                classify(method.clone(), path),
                Some(((*resource).to_owned(), *verb, *reason)),
                "{method} {path}"
            );
        }
    }

    #[test]
    fn reads_are_not_writes() {
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert_eq!(
                classify(method, "/apis/accord.io/v1beta1/managedclusters?watch=true"),
                None
            );
        }
    }

    #[tokio::test]
    async fn the_layer_counts_writes_and_lets_reads_pass_uncounted() {
        let metrics = Metrics::new();
        let inner = tower::service_fn(|_: Request<()>| async { Ok::<_, Infallible>(()) });
        let mut service = CountWritesLayer::new(&metrics).layer(inner);
        let request = |method: Method, path: &str| {
            Request::builder()
                .method(method)
                .uri(path)
                .body(())
                .unwrap()
        };
        let status = "/apis/accord.io/v1beta1/namespaces/x/federatedkafkatopics/y/status";
        for (method, path) in [
            (Method::GET, status),
            (Method::PATCH, status),
            (Method::PATCH, status),
            (Method::GET, "/api/v1/namespaces/x/events"),
        ] {
            service
                .ready()
                .await
                .unwrap()
                .call(request(method, path))
                .await
                .unwrap();
        }
        let count = |resource: &str, verb: &str, reason: &str| {
            metrics
                .kube_writes
                .get_or_create(&KubeWriteLabel {
                    resource: resource.to_owned(),
                    verb: verb.to_owned(),
                    reason: reason.to_owned(),
                })
                .get()
        };
        assert_eq!(count("federatedkafkatopics/status", "patch", "status"), 2);
        assert!(metrics.encode().contains(
            r#"accord_hub_kube_writes_total{resource="federatedkafkatopics/status",verb="patch",reason="status"} 2"#
        ));
        assert!(
            !metrics.encode().contains(r#"reason="event""#),
            "a GET of events is not a write"
        );
    }
}
