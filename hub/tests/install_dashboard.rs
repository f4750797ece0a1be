//! `deploy/grafana/accord-dashboard.json` is a well-formed Grafana dashboard whose queries
//! use only metrics the hub and the agent export, and that shows every hub metric.

use std::collections::BTreeSet;
use std::path::Path;

use accord_hub::metrics::Metrics;
use serde_json::Value;

/// The agent's series (agent/src/metrics.rs, `Registry::with_prefix("accord_agent")`); the
/// hub crate cannot depend on the agent's, so they are listed here.
const AGENT_SERIES: &[&str] = &[
    "accord_agent_connected",
    "accord_agent_reconnects_total",
    "accord_agent_assignments_applied_total",
    "accord_agent_managed_objects",
    "accord_agent_scale_applies_total",
    "accord_agent_apply_errors_total",
    "accord_agent_status_reports_sent_total",
    "accord_agent_status_acks_total",
    "accord_agent_status_reports_pending",
    "accord_agent_change_applied_seconds_bucket",
    "accord_agent_change_applied_seconds_sum",
    "accord_agent_change_applied_seconds_count",
];

fn dashboard() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/accord-dashboard.json");
    let text = std::fs::read_to_string(&path).expect("reading the dashboard");
    serde_json::from_str(&text).expect("the dashboard is valid JSON")
}

/// The series names the hub exposes, from its own text exposition: counters get `_total`,
/// histograms `_bucket`, `_sum` and `_count`.
fn hub_series() -> BTreeSet<String> {
    let metrics = Metrics::new();
    // Labelled families appear in the exposition once they have a child.
    metrics.report("accepted");
    metrics.error("etcd");
    let kind = accord_common::metrics::KindLabel::of("FederatedResource");
    metrics.rollout_steps.get_or_create(&kind).inc();
    metrics.rollout_seconds.get_or_create(&kind).observe(1.0);
    metrics
        .change
        .end_to_end_seconds
        .get_or_create(&kind)
        .observe(1.0, None, None);
    metrics
        .rollouts_ended
        .get_or_create(&accord_hub::metrics::RolloutEndLabel {
            kind: "FederatedResource".into(),
            phase: "RolledBack".into(),
        })
        .inc();
    metrics
        .console_pages
        .get_or_create(&accord_hub::metrics::ConsolePageLabel {
            page: "fleet".into(),
        })
        .inc();
    metrics
        .console_reviews
        .get_or_create(&accord_hub::metrics::ConsoleReviewLabel {
            review: "tokenreview".into(),
        })
        .inc();
    let mut names = BTreeSet::new();
    for line in metrics.encode().lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_owned());
            }
        }
    }
    names
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        out.push(panel);
        if let Some(nested) = panel["panels"].as_array() {
            out.extend(nested);
        }
    }
    out
}

/// `accord_*` identifiers in a PromQL expression.
fn accord_metrics(expr: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(start) = rest.find("accord_") {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        found.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    found
}

fn exprs(dashboard: &Value) -> Vec<String> {
    panels(dashboard)
        .into_iter()
        .filter_map(|p| p["targets"].as_array())
        .flatten()
        .filter_map(|t| t["expr"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn the_dashboard_is_a_well_formed_grafana_dashboard() {
    let d = dashboard();
    assert_eq!(d["uid"], "accord-overview");
    assert!(d["title"].is_string());
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let mut ids = BTreeSet::new();
    for panel in panels(&d) {
        let id = panel["id"].as_u64().expect("every panel has an id");
        assert!(ids.insert(id), "panel id {id} repeats");
        let grid = &panel["gridPos"];
        let x = grid["x"].as_u64().unwrap();
        let w = grid["w"].as_u64().unwrap();
        assert!(x + w <= 24, "panel {} overflows the grid", panel["title"]);
        if panel["type"] != "row" {
            let targets = panel["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "panel {} has no query", panel["title"]);
            for t in targets {
                assert_eq!(
                    t["datasource"]["uid"], "${datasource}",
                    "panel {}",
                    panel["title"]
                );
            }
        }
    }
    let variables = d["templating"]["list"].as_array().unwrap();
    assert!(
        variables
            .iter()
            .any(|v| v["name"] == "datasource" && v["type"] == "datasource")
    );
}

#[test]
fn every_hub_metric_the_dashboard_queries_is_exported_by_the_hub() {
    let exported = hub_series();
    assert!(
        exported.contains("accord_hub_heartbeats_total"),
        "{exported:?}"
    );
    for expr in exprs(&dashboard()) {
        for metric in accord_metrics(&expr)
            .into_iter()
            .filter(|m| m.starts_with("accord_hub_"))
        {
            assert!(
                exported.contains(&metric),
                "{metric} (in `{expr}`) is not exported; the hub has {exported:?}"
            );
        }
    }
}

#[test]
fn every_hub_metric_is_on_the_dashboard() {
    let used: BTreeSet<String> = exprs(&dashboard())
        .iter()
        .flat_map(|e| accord_metrics(e))
        .collect();
    for metric in hub_series() {
        let base = metric
            .trim_end_matches("_bucket")
            .trim_end_matches("_sum")
            .trim_end_matches("_count");
        assert!(
            used.iter().any(|u| u == &metric || u.starts_with(base)),
            "{metric} is not shown on the dashboard"
        );
    }
}

#[test]
fn every_agent_metric_the_dashboard_queries_is_one_the_agent_exports() {
    let mut agent_metrics = 0;
    for expr in exprs(&dashboard()) {
        for metric in accord_metrics(&expr)
            .into_iter()
            .filter(|m| m.starts_with("accord_agent_"))
        {
            agent_metrics += 1;
            assert!(
                AGENT_SERIES.contains(&metric.as_str()),
                "{metric} (in `{expr}`) is not an agent metric"
            );
        }
    }
    assert!(agent_metrics > 0, "the dashboard shows no agent metric");
}
