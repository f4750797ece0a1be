//! Writes a kube-apiserver served, counted by the API server itself: its `/metrics`
//! counter `apiserver_request_total` by resource (and subresource) and write verb, scraped
//! before and after a benchmark's measured phase and printed as the difference, per
//! object the benchmark created or changed. Beside it the hub's own count of its writes
//! (`accord_hub_kube_writes_total{resource,verb,reason}`), when the hub exports one.
//!
//! The API server counts every client's writes: the benchmark's own (printed apart where
//! the benchmark says what it wrote), the hub's, the controller manager's and its own
//! (Leases), all on the management cluster.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

/// The API server's request counter.
pub const APISERVER_REQUESTS: &str = "apiserver_request_total";
/// The API server's time spent on requests (the sum of its duration histogram), by the
/// same labels as [`APISERVER_REQUESTS`].
pub const APISERVER_REQUEST_SECONDS: &str = "apiserver_request_duration_seconds_sum";
/// The API server's requests to its etcd: count and seconds (histogram `_count`, `_sum`),
/// by `resource` and `operation`.
pub const ETCD_REQUEST_SECONDS: &str = "etcd_request_duration_seconds";
/// The hub's counter of its own Kubernetes writes.
pub const HUB_WRITES: &str = "accord_hub_kube_writes_total";
/// The verbs `apiserver_request_total` gives writes.
pub const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "DELETE",
    "DELETECOLLECTION",
    "APPLY",
];

/// One series of a Prometheus text exposition: its labels and value.
pub type Series = (BTreeMap<String, String>, f64);

/// Every series of metric `name` (exactly that name, no suffix added) in a Prometheus text
/// exposition.
pub fn series(text: &str, name: &str) -> Vec<Series> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || !line.starts_with(name) {
            continue;
        }
        let rest = &line[name.len()..];
        let (labels, rest) = if let Some(inner) = rest.strip_prefix('{') {
            match parse_labels(inner) {
                Some(parsed) => parsed,
                None => continue,
            }
        } else if rest.starts_with(' ') {
            (BTreeMap::new(), rest)
        } else {
            // Another metric whose name starts with `name`.
            continue;
        };
        // The value, then an optional timestamp.
        let Some(value) = rest.split_whitespace().next() else {
            continue;
        };
        if let Ok(value) = value.parse::<f64>() {
            out.push((labels, value));
        }
    }
    out
}

/// Parses `k="v",k2="v2"} rest` into the labels and `rest` (after the `}`).
fn parse_labels(text: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let (key, after) = rest.split_once('=')?;
        let after = after.strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i,
                c => value.push(c),
            }
        };
        labels.insert(key.trim().to_owned(), value);
        rest = &after[end + 1..];
    }
}

/// How much a counter grew from `before` to `after`; a counter lower than before was
/// reset (its process restarted) and counts from zero.
fn increase(before: Option<f64>, after: f64) -> f64 {
    match before {
        Some(b) if b <= after => after - b,
        _ => after,
    }
}

/// The `/metrics` text of the API server `client` talks to (the admin's credentials may
/// read it).
async fn metrics_text(client: &kube::Client) -> Result<String> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .context("building the /metrics request")?;
    client
        .request_text(request)
        .await
        .context("scraping the kube-apiserver's /metrics")
}

/// What a write was made to and how: resource (with `/subresource` when there is one)
/// and verb.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct WriteKind {
    /// `resource` or `resource/subresource`, e.g. `federatedkafkatopics/status`.
    pub resource: String,
    /// `POST`, `PUT`, `PATCH`, `DELETE`, `DELETECOLLECTION` or `APPLY`.
    pub verb: String,
}

impl WriteKind {
    /// `resource` (`resource/subresource`) written with `verb`.
    pub fn new(resource: &str, verb: &str) -> Self {
        Self {
            resource: resource.to_owned(),
            verb: verb.to_owned(),
        }
    }
}

/// Writes an API server counted, by kind (summed over codes, groups, versions, scopes).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Writes(pub BTreeMap<WriteKind, f64>);

impl Writes {
    /// The writes in an API server's `/metrics` text.
    pub fn parse(text: &str) -> Self {
        Self::parse_metric(text, APISERVER_REQUESTS)
    }

    /// Metric `name` (labelled as [`APISERVER_REQUESTS`] is) summed by write kind.
    fn parse_metric(text: &str, name: &str) -> Self {
        Self::parse_verbs(text, name, |verb| WRITE_VERBS.contains(&verb))
    }

    /// Every request in an API server's `/metrics` text, reads as well as writes, by
    /// resource and verb (`GET`, `LIST`, `APPLY`, …), watches apart (a watch is counted
    /// when it ends, so its count says nothing of a phase).
    pub fn parse_requests(text: &str) -> Self {
        Self::parse_verbs(text, APISERVER_REQUESTS, |verb| verb != "WATCH")
    }

    /// Metric `name` summed by resource and verb, for the verbs `keep` keeps.
    fn parse_verbs(text: &str, name: &str, keep: impl Fn(&str) -> bool) -> Self {
        let mut writes = BTreeMap::new();
        for (labels, value) in series(text, name) {
            let label = |k: &str| labels.get(k).map(String::as_str).unwrap_or_default();
            let verb = label("verb");
            if !keep(verb) {
                continue;
            }
            let resource = match label("subresource") {
                "" => label("resource").to_owned(),
                sub => format!("{}/{sub}", label("resource")),
            };
            *writes.entry(WriteKind::new(&resource, verb)).or_insert(0.0) += value;
        }
        Self(writes)
    }

    /// Scrapes the API server `client` talks to (its `/metrics`; the admin's credentials
    /// may read it): the writes it served, the seconds it spent on them, and its requests
    /// to etcd.
    pub async fn scrape(client: &kube::Client) -> Result<(Self, Self, EtcdRequests)> {
        let text = metrics_text(client).await?;
        Ok((
            Self::parse(&text),
            Self::parse_metric(&text, APISERVER_REQUEST_SECONDS),
            EtcdRequests::parse(&text),
        ))
    }

    /// Every request (watches apart) the API server `client` talks to served so far:
    /// [`Writes::parse_requests`] of its `/metrics`.
    pub async fn scrape_requests(client: &kube::Client) -> Result<Self> {
        let text = metrics_text(client).await?;
        Ok(Self::parse_requests(&text))
    }

    /// The writes made since `before` (kinds that did not change are left out).
    pub fn since(&self, before: &Self) -> Self {
        Self(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), increase(before.0.get(k).copied(), *v)))
                .filter(|(_, v)| *v != 0.0)
                .collect(),
        )
    }

    /// Writes of one kind.
    pub fn get(&self, resource: &str, verb: &str) -> f64 {
        self.0
            .get(&WriteKind::new(resource, verb))
            .copied()
            .unwrap_or(0.0)
    }

    /// Every write.
    pub fn total(&self) -> f64 {
        self.0.values().sum()
    }
}

/// The API server's requests to its etcd by (resource, operation): how many, and the
/// seconds they took as the API server saw them. What a write costs beyond the API
/// server's own work: a status PATCH reads the object from etcd and then writes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EtcdRequests(pub BTreeMap<(String, String), (f64, f64)>);

impl EtcdRequests {
    /// The etcd requests in an API server's `/metrics` text.
    pub fn parse(text: &str) -> Self {
        let mut out: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
        for (suffix, seconds) in [("_count", false), ("_sum", true)] {
            for (labels, value) in series(text, &format!("{ETCD_REQUEST_SECONDS}{suffix}")) {
                let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
                let entry = out
                    .entry((label("resource"), label("operation")))
                    .or_default();
                if seconds {
                    entry.1 += value;
                } else {
                    entry.0 += value;
                }
            }
        }
        Self(out)
    }

    /// The requests made since `before` (those that did not change are left out).
    pub fn since(&self, before: &Self) -> Self {
        Self(
            self.0
                .iter()
                .map(|(k, (n, s))| {
                    let (n0, s0) = before.0.get(k).copied().unwrap_or_default();
                    (k.clone(), (increase(Some(n0), *n), increase(Some(s0), *s)))
                })
                .filter(|(_, (n, _))| *n != 0.0)
                .collect(),
        )
    }
}

/// The hub's own count of its writes, by (resource, verb, reason); `None` when the hub
/// does not export [`HUB_WRITES`].
pub fn hub_writes(text: &str) -> Option<BTreeMap<(String, String, String), f64>> {
    let all = series(text, HUB_WRITES);
    if all.is_empty() && !text.contains(HUB_WRITES.trim_end_matches("_total")) {
        return None;
    }
    let mut out = BTreeMap::new();
    for (labels, value) in all {
        let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
        *out.entry((label("resource"), label("verb"), label("reason")))
            .or_insert(0.0) += value;
    }
    Some(out)
}

/// A measurement under way: the API server's (and the hub's) counters at its start.
pub struct Meter {
    client: kube::Client,
    hub_metrics_url: Option<String>,
    http: reqwest::Client,
    before: Writes,
    seconds_before: Writes,
    etcd_before: EtcdRequests,
    hub_before: Option<BTreeMap<(String, String, String), f64>>,
}

/// What a [`Meter`] measured.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// The API server's writes over the phase.
    pub apiserver: Writes,
    /// The seconds the API server spent on them, by the same kinds.
    pub apiserver_seconds: Writes,
    /// The API server's requests to its etcd over the phase.
    pub etcd: EtcdRequests,
    /// The hub's own count over the phase, when it exports one.
    pub hub: Option<BTreeMap<(String, String, String), f64>>,
}

impl Meter {
    /// Scrapes the API server `client` talks to and, when given, the hub's `/metrics`
    /// (`http://host:port/metrics`).
    pub async fn start(
        client: kube::Client,
        http: &reqwest::Client,
        hub_metrics_url: Option<String>,
    ) -> Result<Self> {
        let (before, seconds_before, etcd_before) = Writes::scrape(&client).await?;
        let hub_before = match &hub_metrics_url {
            Some(url) => scrape_hub(http, url).await?,
            None => None,
        };
        Ok(Self {
            client,
            hub_metrics_url,
            http: http.clone(),
            before,
            seconds_before,
            etcd_before,
            hub_before,
        })
    }

    /// The hub restarted and serves `/metrics` at `hub_metrics_url` now: its counters
    /// start from zero there.
    pub fn hub_restarted(&mut self, hub_metrics_url: String) {
        self.hub_metrics_url = Some(hub_metrics_url);
        self.hub_before = Some(BTreeMap::new());
    }

    /// Waits until the hub's own write count has not changed for `quiet` (at most
    /// `bound`), so that writes trailing the measured outcome (an Event or status written
    /// after the bench saw the last one) are counted too; how long that took. Without a
    /// hub count, returns at once.
    pub async fn settle(&self, quiet: Duration, bound: Duration) -> Result<Duration> {
        let Some(url) = &self.hub_metrics_url else {
            return Ok(Duration::ZERO);
        };
        let started = Instant::now();
        let total = |writes: Option<BTreeMap<(String, String, String), f64>>| {
            writes.map_or(0.0, |w| w.values().sum::<f64>())
        };
        let mut last = total(scrape_hub(&self.http, url).await?);
        let mut changed = started;
        while started.elapsed() < bound {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = total(scrape_hub(&self.http, url).await?);
            if now != last {
                last = now;
                changed = Instant::now();
            } else if changed.elapsed() >= quiet {
                break;
            }
        }
        Ok(changed.duration_since(started))
    }

    /// Scrapes again; the differences.
    pub async fn finish(&self) -> Result<Measured> {
        let (writes, seconds, etcd) = Writes::scrape(&self.client).await?;
        let apiserver = writes.since(&self.before);
        let apiserver_seconds = seconds.since(&self.seconds_before);
        let hub = match &self.hub_metrics_url {
            Some(url) => scrape_hub(&self.http, url).await?.map(|after| {
                let before = self.hub_before.clone().unwrap_or_default();
                after
                    .into_iter()
                    .map(|(k, v)| {
                        let by = increase(before.get(&k).copied(), v);
                        (k, by)
                    })
                    .filter(|(_, v)| *v != 0.0)
                    .collect()
            }),
            None => None,
        };
        Ok(Measured {
            apiserver,
            apiserver_seconds,
            etcd: etcd.since(&self.etcd_before),
            hub,
        })
    }
}

async fn scrape_hub(
    http: &reqwest::Client,
    url: &str,
) -> Result<Option<BTreeMap<(String, String, String), f64>>> {
    let text = http
        .get(url)
        .send()
        .await
        .with_context(|| format!("scraping {url}"))?
        .text()
        .await?;
    Ok(hub_writes(&text))
}

/// How to print a [`Measured`].
pub struct Report<'a> {
    /// The phase, e.g. "applying 1000 topics until every placement is Synced".
    pub phase: &'a str,
    /// Objects the phase created or changed (the divisor).
    pub objects: f64,
    /// What one object is called, e.g. "topic".
    pub unit: &'a str,
    /// The phase's length, for writes per second.
    pub seconds: Option<f64>,
    /// The benchmark's own writes in the phase, as the API server counts them.
    pub user: &'a [(WriteKind, f64)],
}

impl Measured {
    /// The figures as lines: every kind, per object (and per second); the benchmark's own
    /// writes and what was written beyond them; the hub's own count.
    pub fn render(&self, report: &Report<'_>) -> String {
        let per = |v: f64| v / report.objects.max(1.0);
        let rate = |v: f64| {
            report
                .seconds
                .map(|s| format!(", {:.2}/s", v / s.max(1e-3)))
                .unwrap_or_default()
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "management kube-apiserver writes while {} ({} {}{}):",
            report.phase,
            report.objects,
            if report.objects == 1.0 {
                report.unit.to_owned()
            } else {
                plural(report.unit)
            },
            report
                .seconds
                .map(|s| format!(", {s:.0} s"))
                .unwrap_or_default()
        );
        for (kind, v) in &self.apiserver.0 {
            // The API server's own time per write: what a write costs it, apart from the
            // time a client waits for a turn.
            let served = self
                .apiserver_seconds
                .0
                .get(kind)
                .map(|s| format!(", {:.1} ms each in the API server", s * 1000.0 / v.max(1.0)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  {:<44} {:<7} {:>8.0}  {:.2}/{}{}{served}",
                kind.resource,
                kind.verb,
                v,
                per(*v),
                report.unit,
                rate(*v)
            );
        }
        let total = self.apiserver.total();
        let _ = writeln!(
            out,
            "  {:<52} {:>8.0}  {:.2}/{}{}",
            "all writes",
            total,
            per(total),
            report.unit,
            rate(total)
        );
        // The etcd requests behind the writes: those of the resources written.
        let written: std::collections::BTreeSet<&str> = self
            .apiserver
            .0
            .keys()
            .map(|k| k.resource.split('/').next().unwrap_or_default())
            .collect();
        let etcd: Vec<String> = self
            .etcd
            .0
            .iter()
            .filter(|((resource, _), (n, _))| written.contains(resource.as_str()) && *n >= 1.0)
            .map(|((resource, operation), (n, s))| {
                format!(
                    "{operation} {resource} {n:.0} × {:.1} ms",
                    s * 1000.0 / n.max(1.0)
                )
            })
            .collect();
        if !etcd.is_empty() {
            let _ = writeln!(
                out,
                "  the API server's etcd requests for them: {}",
                etcd.join(", ")
            );
        }
        if !report.user.is_empty() {
            let user: f64 = report.user.iter().map(|(_, v)| v).sum();
            let named: Vec<String> = report
                .user
                .iter()
                .map(|(k, v)| format!("{} {} {v:.0}", k.resource, k.verb))
                .collect();
            let mut beyond = self.apiserver.clone();
            for (kind, v) in report.user {
                *beyond.0.entry(kind.clone()).or_insert(0.0) -= v;
            }
            let others: Vec<String> = beyond
                .0
                .iter()
                .map(|(k, v)| format!("{} {} {:.2}/{}", k.resource, k.verb, per(*v), report.unit))
                .collect();
            let _ = writeln!(
                out,
                "  the benchmark's own: {} ({}); written beyond them: {:.2}/{}{} — {}",
                user,
                named.join(", "),
                per(beyond.total()),
                report.unit,
                rate(beyond.total()),
                if others.is_empty() {
                    "nothing".to_owned()
                } else {
                    others.join(", ")
                }
            );
        }
        match &self.hub {
            None => {
                let _ = writeln!(out, "  hub's own count ({HUB_WRITES}): not exported");
            }
            Some(hub) => {
                let total: f64 = hub.values().sum();
                let _ = writeln!(
                    out,
                    "  hub's own count ({HUB_WRITES}): {total:.0} ({:.2}/{}{})",
                    per(total),
                    report.unit,
                    rate(total)
                );
                for ((resource, verb, reason), v) in hub {
                    let _ = writeln!(
                        out,
                        "    {resource:<30} {verb:<8} {reason:<24} {v:>8.0}  {:.2}/{}",
                        per(*v),
                        report.unit
                    );
                }
            }
        }
        out
    }
}

/// `policy` → `policies`, `topic` → `topics`.
fn plural(unit: &str) -> String {
    match unit.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{unit}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="GET",version="v1"} 12
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 40
apiserver_request_total{code="201",component="apiserver",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="accord.io",resource="federatedkafkatopics",scope="resource",subresource="status",verb="PATCH",version="v1beta1"} 1000
apiserver_request_total{code="201",component="apiserver",dry_run="",group="accord.io",resource="federatedkafkatopics",scope="resource",subresource="",verb="APPLY",version="v1beta1"} 999
apiserver_request_total{code="409",component="apiserver",dry_run="",group="accord.io",resource="federatedkafkatopics",scope="resource",subresource="",verb="APPLY",version="v1beta1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 7.5e+01
apiserver_request_total_extra{verb="POST",resource="x"} 5
apiserver_request_duration_seconds_bucket{verb="POST",resource="events",le="0.1"} 9
"#;

    #[test]
    fn writes_are_summed_by_resource_subresource_and_verb_and_reads_are_left_out() {
        let writes = Writes::parse(SAMPLE);
        assert_eq!(writes.get("events", "POST"), 42.0);
        assert_eq!(writes.get("events", "GET"), 0.0);
        assert_eq!(writes.get("federatedkafkatopics/status", "PATCH"), 1000.0);
        assert_eq!(writes.get("federatedkafkatopics", "APPLY"), 1000.0);
        assert_eq!(writes.get("leases", "PUT"), 75.0);
        assert_eq!(writes.0.len(), 4);
        assert_eq!(writes.total(), 2117.0);
    }

    #[test]
    fn a_difference_keeps_only_what_changed() {
        let before = Writes::parse(SAMPLE);
        let after = Writes::parse(&SAMPLE.replace("} 40", "} 50"));
        let diff = after.since(&before);
        assert_eq!(diff.0.len(), 1);
        assert_eq!(diff.get("events", "POST"), 10.0);
    }

    #[test]
    fn label_values_may_hold_commas_braces_and_escaped_quotes() {
        let text = r#"m{a="x,y}",b="say \"hi\"",c=""} 3 1700000000000"#;
        let s = series(text, "m");
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].0["a"], "x,y}");
        assert_eq!(s[0].0["b"], "say \"hi\"");
        assert_eq!(s[0].0["c"], "");
        assert_eq!(s[0].1, 3.0);
    }

    #[test]
    fn the_hubs_own_count_is_absent_until_exported() {
        assert_eq!(hub_writes("accord_hub_leader 1\n"), None);
        let text = "# TYPE accord_hub_kube_writes counter\n\
                    accord_hub_kube_writes_total{resource=\"crossclusterscalepolicies/status\",verb=\"patch\",reason=\"changed\"} 4\n";
        let hub = hub_writes(text).expect("exported");
        assert_eq!(
            hub[&(
                "crossclusterscalepolicies/status".to_owned(),
                "patch".to_owned(),
                "changed".to_owned()
            )],
            4.0
        );
    }

    #[test]
    fn the_report_names_the_benchmarks_own_writes_and_what_came_beyond() {
        let measured = Measured {
            apiserver: Writes::parse(SAMPLE),
            apiserver_seconds: Writes::parse_metric(
                "apiserver_request_duration_seconds_sum{resource=\"federatedkafkatopics\",\
                 subresource=\"status\",verb=\"PATCH\"} 12.5\n",
                APISERVER_REQUEST_SECONDS,
            ),
            etcd: EtcdRequests::parse(
                "etcd_request_duration_seconds_count{operation=\"get\",resource=\"federatedkafkatopics\"} 1000\n\
                 etcd_request_duration_seconds_sum{operation=\"get\",resource=\"federatedkafkatopics\"} 62\n\
                 etcd_request_duration_seconds_count{operation=\"get\",resource=\"pods\"} 5\n",
            ),
            hub: None,
        };
        let text = measured.render(&Report {
            phase: "applying",
            objects: 1000.0,
            unit: "topic",
            seconds: None,
            user: &[(WriteKind::new("federatedkafkatopics", "APPLY"), 1000.0)],
        });
        assert!(text.contains("the benchmark's own: 1000"), "{text}");
        assert!(
            text.contains("12.5 ms each in the API server"),
            "the API server's time per status PATCH: {text}"
        );
        assert!(
            text.contains("federatedkafkatopics/status PATCH 1.00/topic"),
            "{text}"
        );
        assert!(
            text.contains("federatedkafkatopics APPLY 0.00/topic"),
            "{text}"
        );
        assert!(text.contains("not exported"), "{text}");
        assert!(
            text.contains("etcd requests for them: get federatedkafkatopics 1000 × 62.0 ms"),
            "the etcd time behind the writes: {text}"
        );
        assert!(
            !text.contains("pods"),
            "resources not written are left out: {text}"
        );
    }

    #[test]
    fn etcd_requests_are_counted_and_timed_by_resource_and_operation() {
        let before = EtcdRequests::parse(
            "etcd_request_duration_seconds_count{group=\"\",operation=\"create\",resource=\"events\"} 10\n\
             etcd_request_duration_seconds_sum{group=\"\",operation=\"create\",resource=\"events\"} 1.5\n\
             etcd_request_duration_seconds_bucket{group=\"\",operation=\"create\",resource=\"events\",le=\"0.1\"} 9\n",
        );
        let after = EtcdRequests::parse(
            "etcd_request_duration_seconds_count{group=\"\",operation=\"create\",resource=\"events\"} 30\n\
             etcd_request_duration_seconds_sum{group=\"\",operation=\"create\",resource=\"events\"} 3.5\n",
        );
        let key = ("events".to_owned(), "create".to_owned());
        assert_eq!(before.0[&key], (10.0, 1.5));
        assert_eq!(after.since(&before).0[&key], (20.0, 2.0));
    }
}
