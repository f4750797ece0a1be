//! Whether the config Prometheus reports as loaded (`/api/v1/status/config`) is the one
//! the reloader wrote: the same jobs, each with the same `match[]` params, targets,
//! metrics path, interval and timeout.
//!
//! Prometheus answers with its own re-rendering of the config (defaults filled in,
//! durations normalised: `90s` becomes `1m30s`), so the comparison is of meaning, not bytes,
//! and only of what the written config sets.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use accord_common::promfed::validate::parse_duration;
use serde_json::Value;

/// The parts of one scrape job the comparison looks at; `None` where the config leaves
/// them to Prometheus's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobView {
    /// `metrics_path`.
    pub metrics_path: Option<String>,
    /// `params`, each value list as written.
    pub params: BTreeMap<String, Vec<String>>,
    /// Every static target of the job.
    pub targets: BTreeSet<String>,
    /// `scrape_interval`.
    pub interval: Option<Duration>,
    /// `scrape_timeout`.
    pub timeout: Option<Duration>,
}

/// The jobs of a config by name.
pub fn jobs_of(yaml: &str) -> Result<BTreeMap<String, JobView>, String> {
    let doc: Value = serde_saphyr::from_str(yaml).map_err(|e| format!("not YAML: {e}"))?;
    let jobs = match doc.get("scrape_configs") {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Array(jobs)) => jobs,
        Some(_) => return Err("scrape_configs is not a list".into()),
    };
    let mut out = BTreeMap::new();
    for job in jobs {
        let name = job["job_name"]
            .as_str()
            .ok_or("a job has no job_name")?
            .to_owned();
        let duration = |key: &str| -> Result<Option<Duration>, String> {
            match &job[key] {
                Value::Null => Ok(None),
                Value::String(s) => parse_duration(s)
                    .map(Some)
                    .ok_or_else(|| format!("job {name:?}: {key} {s:?} is not a duration")),
                other => Err(format!("job {name:?}: {key} {other} is not a duration")),
            }
        };
        let mut params = BTreeMap::new();
        if let Some(map) = job["params"].as_object() {
            for (key, values) in map {
                let values = values
                    .as_array()
                    .map(|v| {
                        v.iter()
                            .filter_map(|s| s.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                params.insert(key.clone(), values);
            }
        }
        let targets = job["static_configs"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|config| config["targets"].as_array().into_iter().flatten())
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect();
        let view = JobView {
            metrics_path: job["metrics_path"].as_str().map(str::to_owned),
            params,
            targets,
            interval: duration("scrape_interval")?,
            timeout: duration("scrape_timeout")?,
        };
        out.insert(name, view);
    }
    Ok(out)
}

/// `Ok` when `loaded` (Prometheus's answer) has exactly the jobs of `expected` (the
/// written config), each matching in what `expected` sets; otherwise the first difference.
pub fn compare(expected: &str, loaded: &str) -> Result<(), String> {
    let expected = jobs_of(expected).map_err(|e| format!("the written config: {e}"))?;
    let loaded = jobs_of(loaded).map_err(|e| format!("Prometheus's loaded config: {e}"))?;
    let want: BTreeSet<&String> = expected.keys().collect();
    let have: BTreeSet<&String> = loaded.keys().collect();
    if want != have {
        let missing: Vec<_> = want.difference(&have).collect();
        let extra: Vec<_> = have.difference(&want).collect();
        return Err(format!(
            "Prometheus has other jobs loaded (missing {missing:?}, extra {extra:?})"
        ));
    }
    for (name, want) in &expected {
        let have = &loaded[name];
        let differs = |what: &str| Err(format!("job {name:?}: loaded {what} differs"));
        if want.params != have.params {
            return differs("params (match[])");
        }
        if want.targets != have.targets {
            return differs("targets");
        }
        if want.metrics_path.is_some() && want.metrics_path != have.metrics_path {
            return differs("metrics_path");
        }
        if want.interval.is_some() && want.interval != have.interval {
            return differs("scrape_interval");
        }
        if want.timeout.is_some() && want.timeout != have.timeout {
            return differs("scrape_timeout");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRITTEN: &str = r#"scrape_configs:
  - job_name: "accord/team/web/a"
    honor_labels: true
    metrics_path: "/federate"
    params:
      "match[]":
        - "up{namespace=\"a\"}"
    scrape_interval: "90s"
    scrape_timeout: "10s"
    static_configs:
      - targets:
          - "prom-1.a.svc:9090"
          - "prom-2.a.svc:9090"
"#;

    /// What Prometheus 2.x answers for WRITTEN: defaults filled in, durations normalised,
    /// targets possibly split across static configs.
    const LOADED: &str = r#"global:
  scrape_interval: 1m
  scrape_timeout: 10s
  evaluation_interval: 1m
scrape_configs:
- job_name: accord/team/web/a
  honor_labels: true
  honor_timestamps: true
  params:
    match[]:
    - up{namespace="a"}
  scrape_interval: 1m30s
  scrape_timeout: 10s
  metrics_path: /federate
  scheme: http
  follow_redirects: true
  enable_http2: true
  static_configs:
  - targets:
    - prom-2.a.svc:9090
  - targets:
    - prom-1.a.svc:9090
"#;

    #[test]
    fn prometheus_re_rendering_of_the_same_config_matches() {
        assert_eq!(compare(WRITTEN, LOADED), Ok(()));
        assert_eq!(
            compare("scrape_configs: []\n", "global: {}\nscrape_configs: []\n"),
            Ok(())
        );
        assert_eq!(compare("scrape_configs: []\n", "global: {}\n"), Ok(()));
    }

    #[test]
    fn each_difference_is_named() {
        let cases = [
            (
                LOADED.replace("namespace=\"a\"", "namespace=\"b\""),
                "params",
            ),
            (LOADED.replace("prom-1.a.svc", "prom-3.a.svc"), "targets"),
            (LOADED.replace("1m30s", "1m"), "scrape_interval"),
            (
                LOADED.replace("timeout: 10s\n  metrics", "timeout: 5s\n  metrics"),
                "scrape_timeout",
            ),
            (LOADED.replace("/federate", "/metrics"), "metrics_path"),
            (LOADED.replace("accord/team/web/a", "other"), "other jobs"),
        ];
        for (loaded, expected) in cases {
            let err = compare(WRITTEN, &loaded).unwrap_err();
            assert!(err.contains(expected), "{expected}: {err}");
        }
        assert!(compare(WRITTEN, "scrape_configs: []").is_err());
        assert!(compare(WRITTEN, "scrape_configs: [").is_err());
    }
}
