//! Rendering the whole config of a federation Prometheus: one `/federate` job per
//! (PrometheusFederation, tenant) for a member cluster, one per (PrometheusFederation,
//! member) for the global tier.
//!
//! Pure and deterministic: jobs are sorted, targets sorted and deduplicated, and every
//! string is written as a double-quoted (JSON-escaped) YAML scalar, so equal inputs give
//! byte-equal output and therefore the same [`config_hash`](super::config_hash).

use std::fmt::Write as _;

use crate::distribution::{PlacedRef, PromfedSpec};

use super::config_hash;
use super::selector::{SelectorError, narrow, narrow_with};

/// Label every member-tier series gets: the tenant (namespace) it was federated for.
pub const TENANT_LABEL: &str = "tenant";
/// Label every global-tier series gets: the member cluster it came from.
pub const CLUSTER_LABEL: &str = "cluster";
/// Label a tenant's series carry in its own Prometheus (`namespace`), which the member job
/// narrows every `match[]` with.
pub const NAMESPACE_LABEL: &str = "namespace";
/// Body size limit of a member job without a sample limit.
const DEFAULT_BODY_SIZE_LIMIT: u64 = 512 * MIB;
/// Smallest body size limit of a member job with a sample limit.
const MIN_BODY_SIZE_LIMIT: u64 = MIB;
/// Bytes allowed per sample when the limit is derived from the sample limit.
const BYTES_PER_SAMPLE: u64 = KIB;
const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// One tenant Prometheus to federate: a Service port in the tenant's namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SourceTarget {
    /// Namespace of the Service.
    pub namespace: String,
    /// Name of the Service.
    pub service: String,
    /// Port of the Service.
    pub port: i32,
}

impl SourceTarget {
    /// The scrape address a cluster resolves: `<service>.<namespace>.svc:<port>`.
    pub fn address(&self) -> String {
        format!("{}.{}.svc:{}", self.service, self.namespace, self.port)
    }
}

/// The sources found for one tenant (namespace) of a PrometheusFederation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantSources {
    /// The tenant's namespace; its series are the ones with `namespace="<this>"`.
    pub namespace: String,
    /// Its tenant Prometheus servers; a tenant without any renders no job.
    pub targets: Vec<SourceTarget>,
}

/// One PrometheusFederation assigned to a member cluster, with the sources found there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberPromfed {
    /// The PrometheusFederation on the hub.
    pub placed: PlacedRef,
    /// Its assignment.
    pub spec: PromfedSpec,
    /// The tenants and their sources in this cluster.
    pub tenants: Vec<TenantSources>,
}

/// One member's federation Prometheus for the global tier to federate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobalTarget {
    /// The PrometheusFederation on the hub.
    pub placed: PlacedRef,
    /// Its assignment (matchers, interval, timeout).
    pub spec: PromfedSpec,
    /// The member cluster's name, put on every series as label `cluster`.
    pub cluster: String,
    /// Base URL of the member's federation Prometheus (`http(s)://host[:port][/prefix]`);
    /// the job scrapes `<url>/federate`.
    pub url: String,
}

/// A rendered config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// The whole Prometheus config.
    pub yaml: String,
    /// [`config_hash`](super::config_hash) of `yaml`.
    pub hash: String,
    /// Number of scrape jobs in it.
    pub jobs: usize,
}

/// Why a config could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// A `match[]` selector of a PrometheusFederation could not be narrowed.
    #[error("{placed}: match[] {selector:?} cannot be used")]
    Selector {
        /// The PrometheusFederation whose selector it is.
        placed: String,
        /// The selector.
        selector: String,
        /// Why.
        #[source]
        source: SelectorError,
    },
    /// A PrometheusFederation has no `match[]` selector at all (`/federate` would return nothing).
    #[error("{placed}: no match[] selector")]
    NoSelector {
        /// The PrometheusFederation.
        placed: String,
    },
    /// Two jobs would have the same name (the same tenant or cluster twice for a
    /// PrometheusFederation).
    #[error("job {0:?} would be rendered twice")]
    DuplicateJob(String),
    /// A member's federation URL is not `http(s)://host[:port][/path]`.
    #[error("cluster {cluster}: federation URL {url:?} is invalid: {reason}")]
    Url {
        /// The member cluster.
        cluster: String,
        /// The URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Name of the member job of `placed` for `tenant`: `accord/<ns>/<name>/<tenant>`.
pub fn member_job_name(placed: &PlacedRef, tenant: &str) -> String {
    format!("accord/{}/{}/{}", placed.namespace, placed.name, tenant)
}

/// Name of the global job of `placed` for member `cluster`:
/// `accord-global/<ns>/<name>/<cluster>`.
pub fn global_job_name(placed: &PlacedRef, cluster: &str) -> String {
    format!(
        "accord-global/{}/{}/{}",
        placed.namespace, placed.name, cluster
    )
}

/// The config of a Prometheus with nothing to federate.
pub fn empty_config() -> String {
    "scrape_configs: []\n".to_owned()
}

/// One scrape job, before it is written out.
struct Job {
    name: String,
    scheme: Option<String>,
    metrics_path: String,
    matchers: Vec<String>,
    interval: String,
    timeout: String,
    sample_limit: Option<i64>,
    body_size_limit: Option<String>,
    targets: Vec<String>,
    /// (source label, regex) of a `keep` rule.
    keep: Option<(String, String)>,
    /// (target label, value) of a `replace` rule.
    set_label: (String, String),
}

/// Renders the whole config of a member cluster's federation Prometheus: one job per
/// (PrometheusFederation, tenant with at least one source), sorted by PrometheusFederation
/// then tenant.
///
/// Every `match[]` is narrowed with `namespace="<tenant>"`, the job keeps only series
/// whose `namespace` is the tenant, and sets `tenant="<tenant>"` (after `honor_labels`,
/// so a source cannot spoof it).
pub fn render_member(placed: &[MemberPromfed]) -> Result<Rendered, RenderError> {
    let mut sorted: Vec<&MemberPromfed> = placed.iter().collect();
    sorted.sort_by(|a, b| a.placed.cmp(&b.placed));
    let mut jobs = Vec::new();
    for placed in sorted {
        let spec = &placed.spec;
        let mut tenants: Vec<&TenantSources> = placed.tenants.iter().collect();
        tenants.sort_by(|a, b| a.namespace.cmp(&b.namespace));
        for tenant in tenants.into_iter().filter(|t| !t.targets.is_empty()) {
            let matchers = narrowed(&placed.placed, &spec.matchers, |s| {
                narrow(s, NAMESPACE_LABEL, &tenant.namespace)
            })?;
            let limit = (spec.sample_limit > 0).then_some(spec.sample_limit);
            jobs.push(Job {
                name: member_job_name(&placed.placed, &tenant.namespace),
                scheme: None,
                metrics_path: "/federate".to_owned(),
                matchers,
                interval: spec.scrape_interval.clone(),
                timeout: spec.scrape_timeout.clone(),
                sample_limit: limit,
                body_size_limit: Some(body_size_limit(limit)),
                targets: tenant.targets.iter().map(SourceTarget::address).collect(),
                keep: Some((NAMESPACE_LABEL.to_owned(), regex_escape(&tenant.namespace))),
                set_label: (TENANT_LABEL.to_owned(), tenant.namespace.clone()),
            });
        }
    }
    finish(jobs)
}

/// Renders the whole config of the global-tier Prometheus: one job per
/// (PrometheusFederation, member), sorted by PrometheusFederation then cluster, scraping
/// `<url>/federate` with the PrometheusFederation's `match[]` narrowed to tenant series
/// (`tenant!=""`) and setting `cluster="<cluster>"`.
pub fn render_global(targets: &[GlobalTarget]) -> Result<Rendered, RenderError> {
    let mut sorted: Vec<&GlobalTarget> = targets.iter().collect();
    sorted.sort_by(|a, b| (&a.placed, &a.cluster).cmp(&(&b.placed, &b.cluster)));
    let mut jobs = Vec::new();
    for target in sorted {
        let endpoint = parse_url(&target.url).map_err(|reason| RenderError::Url {
            cluster: target.cluster.clone(),
            url: target.url.clone(),
            reason,
        })?;
        let matchers = narrowed(&target.placed, &target.spec.matchers, |s| {
            narrow_with(s, TENANT_LABEL, "!=", "")
        })?;
        jobs.push(Job {
            name: global_job_name(&target.placed, &target.cluster),
            scheme: Some(endpoint.scheme),
            metrics_path: format!("{}/federate", endpoint.path),
            matchers,
            interval: target.spec.scrape_interval.clone(),
            timeout: target.spec.scrape_timeout.clone(),
            sample_limit: None,
            body_size_limit: None,
            targets: vec![endpoint.host_port],
            keep: None,
            set_label: (CLUSTER_LABEL.to_owned(), target.cluster.clone()),
        });
    }
    finish(jobs)
}

fn narrowed(
    placed: &PlacedRef,
    selectors: &[String],
    narrow_one: impl Fn(&str) -> Result<String, SelectorError>,
) -> Result<Vec<String>, RenderError> {
    if selectors.is_empty() {
        return Err(RenderError::NoSelector {
            placed: placed.to_string(),
        });
    }
    let mut out = Vec::new();
    for selector in selectors {
        let narrowed = narrow_one(selector).map_err(|source| RenderError::Selector {
            placed: placed.to_string(),
            selector: selector.clone(),
            source,
        })?;
        // Two selectors equal after narrowing ask for the same series once.
        if !out.contains(&narrowed) {
            out.push(narrowed);
        }
    }
    Ok(out)
}

fn finish(jobs: Vec<Job>) -> Result<Rendered, RenderError> {
    let mut names = std::collections::BTreeSet::new();
    for job in &jobs {
        if !names.insert(job.name.as_str()) {
            return Err(RenderError::DuplicateJob(job.name.clone()));
        }
    }
    let yaml = if jobs.is_empty() {
        empty_config()
    } else {
        let mut yaml = String::from("scrape_configs:\n");
        for job in &jobs {
            write_job(&mut yaml, job);
        }
        yaml
    };
    Ok(Rendered {
        hash: config_hash(&yaml),
        jobs: jobs.len(),
        yaml,
    })
}

/// A YAML double-quoted scalar (JSON string syntax is a subset of it).
fn q(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

fn write_job(out: &mut String, job: &Job) {
    // `write!` into a String cannot fail.
    let _ = writeln!(out, "  - job_name: {}", q(&job.name));
    out.push_str("    honor_labels: true\n");
    if let Some(scheme) = &job.scheme {
        let _ = writeln!(out, "    scheme: {}", q(scheme));
    }
    let _ = writeln!(out, "    metrics_path: {}", q(&job.metrics_path));
    out.push_str("    params:\n      \"match[]\":\n");
    for m in &job.matchers {
        let _ = writeln!(out, "        - {}", q(m));
    }
    let _ = writeln!(out, "    scrape_interval: {}", q(&job.interval));
    let _ = writeln!(out, "    scrape_timeout: {}", q(&job.timeout));
    if let Some(limit) = job.sample_limit {
        let _ = writeln!(out, "    sample_limit: {limit}");
    }
    if let Some(limit) = &job.body_size_limit {
        let _ = writeln!(out, "    body_size_limit: {}", q(limit));
    }
    let mut targets = job.targets.clone();
    targets.sort();
    targets.dedup();
    out.push_str("    static_configs:\n      - targets:\n");
    for t in &targets {
        let _ = writeln!(out, "          - {}", q(t));
    }
    out.push_str("    metric_relabel_configs:\n");
    if let Some((label, regex)) = &job.keep {
        let _ = writeln!(out, "      - source_labels: [{}]", q(label));
        let _ = writeln!(out, "        regex: {}", q(regex));
        out.push_str("        action: \"keep\"\n");
    }
    let (label, value) = &job.set_label;
    let _ = writeln!(out, "      - target_label: {}", q(label));
    let _ = writeln!(out, "        replacement: {}", q(value));
    out.push_str("        action: \"replace\"\n");
}

/// `max(1MiB, sample_limit × 1KiB)` with a sample limit, 512MiB without, in Prometheus's
/// (base-2) size syntax: `64MB` is 64 MiB.
fn body_size_limit(sample_limit: Option<i64>) -> String {
    let bytes = match sample_limit {
        Some(limit) => u64::try_from(limit)
            .unwrap_or(0)
            .saturating_mul(BYTES_PER_SAMPLE)
            .max(MIN_BODY_SIZE_LIMIT),
        None => DEFAULT_BODY_SIZE_LIMIT,
    };
    for (unit, size) in [("GB", 1024 * MIB), ("MB", MIB), ("KB", KIB)] {
        if bytes % size == 0 {
            return format!("{}{unit}", bytes / size);
        }
    }
    format!("{bytes}B")
}

/// Escapes RE2 metacharacters so that the regex matches `s` literally.
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The parts of a federation URL a scrape job needs.
#[derive(Debug, PartialEq, Eq)]
struct Endpoint {
    scheme: String,
    host_port: String,
    /// Path prefix without a trailing `/` (empty for none).
    path: String,
}

fn parse_url(url: &str) -> Result<Endpoint, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or("it has no scheme (http:// or https://)")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return Err(format!("scheme {scheme:?} is not http or https")),
    };
    if rest.contains(['?', '#']) {
        return Err("it has a query or fragment".into());
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    if authority.contains('@') {
        return Err("it carries credentials".into());
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or("unclosed '[' in the host")?;
        (format!("[{host}]"), after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (authority.to_owned(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err("it has no host".into());
    }
    let port: u16 = match port {
        Some(p) => p
            .parse()
            .map_err(|_| format!("port {p:?} is not a number"))?,
        None => default_port,
    };
    Ok(Endpoint {
        scheme,
        host_port: format!("{host}:{port}"),
        path: path.trim_end_matches('/').to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::PlacedKind;
    use crate::promfed::validate::validate;

    fn placed(name: &str) -> PlacedRef {
        PlacedRef::new(PlacedKind::PrometheusFederation, "team", name)
    }

    fn spec(matchers: &[&str]) -> PromfedSpec {
        PromfedSpec {
            matchers: matchers.iter().map(|m| (*m).to_owned()).collect(),
            scrape_interval: "30s".into(),
            scrape_timeout: "10s".into(),
            ..PromfedSpec::default()
        }
    }

    fn tenant(ns: &str, services: &[&str]) -> TenantSources {
        TenantSources {
            namespace: ns.into(),
            targets: services
                .iter()
                .map(|s| SourceTarget {
                    namespace: ns.into(),
                    service: (*s).into(),
                    port: 9090,
                })
                .collect(),
        }
    }

    fn two_promfeds() -> Vec<MemberPromfed> {
        vec![
            MemberPromfed {
                placed: placed("web"),
                spec: PromfedSpec {
                    sample_limit: 5000,
                    ..spec(&[r#"{__name__=~".+"}"#, "up"])
                },
                tenants: vec![tenant("b", &["prom"]), tenant("a", &["prom-2", "prom-1"])],
            },
            MemberPromfed {
                placed: placed("api"),
                spec: spec(&["http_requests_total"]),
                tenants: vec![tenant("a", &["prom"]), tenant("empty", &[])],
            },
        ]
    }

    /// Runs `promtool check config` on `yaml` when promtool is installed.
    fn promtool_accepts(yaml: &str) {
        let Ok(dir) = tempfile::tempdir() else {
            panic!("no temp dir")
        };
        let file = dir.path().join("prometheus.yml");
        std::fs::write(&file, yaml).unwrap();
        match std::process::Command::new("promtool")
            .args(["check", "config", "--syntax-only"])
            .arg(&file)
            .output()
        {
            Ok(out) => assert!(
                out.status.success(),
                "promtool refused:\n{yaml}\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("note: promtool not run ({e}); config not checked by Prometheus"),
        }
    }

    #[test]
    fn a_member_config_has_one_job_per_promfed_and_tenant_with_sources_sorted() {
        let rendered = render_member(&two_promfeds()).unwrap();
        assert_eq!(rendered.jobs, 3);
        assert_eq!(rendered.hash, config_hash(&rendered.yaml));
        let names = validate(&rendered.yaml).unwrap().jobs;
        assert_eq!(
            names,
            [
                "accord/team/api/a",
                "accord/team/web/a",
                "accord/team/web/b"
            ]
        );
        promtool_accepts(&rendered.yaml);
    }

    #[test]
    fn a_member_job_is_rendered_exactly() {
        let rendered = render_member(&two_promfeds()[..1]).unwrap();
        let expected = r#"scrape_configs:
  - job_name: "accord/team/web/a"
    honor_labels: true
    metrics_path: "/federate"
    params:
      "match[]":
        - "{__name__=~\".+\",namespace=\"a\"}"
        - "up{namespace=\"a\"}"
    scrape_interval: "30s"
    scrape_timeout: "10s"
    sample_limit: 5000
    body_size_limit: "5000KB"
    static_configs:
      - targets:
          - "prom-1.a.svc:9090"
          - "prom-2.a.svc:9090"
    metric_relabel_configs:
      - source_labels: ["namespace"]
        regex: "a"
        action: "keep"
      - target_label: "tenant"
        replacement: "a"
        action: "replace"
"#;
        assert!(
            rendered.yaml.starts_with(expected),
            "got:\n{}",
            rendered.yaml
        );
    }

    #[test]
    fn rendering_is_deterministic_whatever_the_input_order() {
        let mut reversed = two_promfeds();
        reversed.reverse();
        for p in &mut reversed {
            p.tenants.reverse();
        }
        assert_eq!(
            render_member(&two_promfeds()).unwrap(),
            render_member(&reversed).unwrap()
        );
    }

    #[test]
    fn nothing_to_federate_renders_the_empty_config() {
        let rendered = render_member(&[]).unwrap();
        assert_eq!(rendered.yaml, "scrape_configs: []\n");
        assert_eq!(rendered.jobs, 0);
        let only_empty = vec![MemberPromfed {
            placed: placed("x"),
            spec: spec(&["up"]),
            tenants: vec![tenant("a", &[])],
        }];
        assert_eq!(render_member(&only_empty).unwrap().yaml, empty_config());
        assert!(validate(&empty_config()).unwrap().jobs.is_empty());
        promtool_accepts(&empty_config());
    }

    #[test]
    fn body_size_limit_follows_the_sample_limit_with_a_floor() {
        assert_eq!(body_size_limit(None), "512MB");
        assert_eq!(body_size_limit(Some(10)), "1MB");
        assert_eq!(body_size_limit(Some(1024)), "1MB");
        assert_eq!(body_size_limit(Some(65536)), "64MB");
        assert_eq!(body_size_limit(Some(1500)), "1500KB");
        assert_eq!(body_size_limit(Some(10_000_000)), "10000000KB");
        let unlimited = MemberPromfed {
            placed: placed("x"),
            spec: spec(&["up"]),
            tenants: vec![tenant("a", &["p"])],
        };
        let yaml = render_member(&[unlimited]).unwrap().yaml;
        assert!(yaml.contains("body_size_limit: \"512MB\""), "{yaml}");
        assert!(!yaml.contains("sample_limit"), "{yaml}");
    }

    #[test]
    fn a_bad_selector_or_a_duplicate_tenant_is_an_error_naming_the_promfed() {
        let bad = MemberPromfed {
            placed: placed("x"),
            spec: spec(&["rate(up[5m])"]),
            tenants: vec![tenant("a", &["p"])],
        };
        let err = render_member(&[bad]).unwrap_err();
        assert!(
            matches!(&err, RenderError::Selector { selector, .. } if selector == "rate(up[5m])"),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("PrometheusFederation/team/x"),
            "{err}"
        );

        let twice = MemberPromfed {
            placed: placed("x"),
            spec: spec(&["up"]),
            tenants: vec![tenant("a", &["p"]), tenant("a", &["q"])],
        };
        assert_eq!(
            render_member(&[twice]).unwrap_err(),
            RenderError::DuplicateJob("accord/team/x/a".into())
        );

        let none = MemberPromfed {
            placed: placed("x"),
            spec: spec(&[]),
            tenants: vec![tenant("a", &["p"])],
        };
        assert!(matches!(
            render_member(&[none]).unwrap_err(),
            RenderError::NoSelector { .. }
        ));
    }

    #[test]
    fn a_tenant_name_with_regex_metacharacters_is_kept_literally() {
        assert_eq!(regex_escape("a.b+c"), r"a\.b\+c");
        assert_eq!(regex_escape("team-a"), "team-a");
    }

    fn global(cluster: &str, url: &str) -> GlobalTarget {
        GlobalTarget {
            placed: placed("web"),
            spec: spec(&[r#"{__name__=~".+"}"#]),
            cluster: cluster.into(),
            url: url.into(),
        }
    }

    #[test]
    fn a_global_config_federates_every_member_with_a_cluster_label() {
        let rendered = render_global(&[
            global("member-2", "https://fed.member-2.example:9443/prom/"),
            global("member-1", "http://127.0.0.2:9090"),
        ])
        .unwrap();
        assert_eq!(rendered.jobs, 2);
        let expected = r#"scrape_configs:
  - job_name: "accord-global/team/web/member-1"
    honor_labels: true
    scheme: "http"
    metrics_path: "/federate"
    params:
      "match[]":
        - "{__name__=~\".+\",tenant!=\"\"}"
    scrape_interval: "30s"
    scrape_timeout: "10s"
    static_configs:
      - targets:
          - "127.0.0.2:9090"
    metric_relabel_configs:
      - target_label: "cluster"
        replacement: "member-1"
        action: "replace"
  - job_name: "accord-global/team/web/member-2"
    honor_labels: true
    scheme: "https"
    metrics_path: "/prom/federate"
"#;
        assert!(
            rendered.yaml.starts_with(expected),
            "got:\n{}",
            rendered.yaml
        );
        assert!(rendered.yaml.contains("\"fed.member-2.example:9443\""));
        assert!(!rendered.yaml.contains("sample_limit"));
        validate(&rendered.yaml).unwrap();
        promtool_accepts(&rendered.yaml);
    }

    #[test]
    fn federation_urls_are_parsed_into_scheme_host_port_and_path() {
        let e = parse_url("http://[::1]:9090").unwrap();
        assert_eq!(e.host_port, "[::1]:9090");
        let e = parse_url("HTTPS://prom.example").unwrap();
        assert_eq!(
            (e.scheme.as_str(), e.host_port.as_str()),
            ("https", "prom.example:443")
        );
        let e = parse_url("http://prom:80/a/b/").unwrap();
        assert_eq!(e.path, "/a/b");
        for bad in [
            "prom:9090",
            "ftp://prom",
            "http://",
            "http://:9090",
            "http://u:p@prom:9090",
            "http://prom:x",
            "http://prom:9090/?q=1",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
        let err = render_global(&[global("m", "prom:9090")]).unwrap_err();
        assert!(err.to_string().contains("cluster m"), "{err}");
    }
}
