//! Rust-side validation of a whole Prometheus config before it is written to
//! Prometheus's config file: the mistakes that would make Prometheus refuse it or that
//! Accord must never ship (duplicate jobs, malformed durations and targets).
//!
//! It is a first line, not a replica of Prometheus's parser: what passes here can still be
//! refused by Prometheus (the reloader then restores the last good file), and `promtool
//! check config` is the reference in tests.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

/// What a valid config holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidConfig {
    /// The scrape jobs' names, in file order.
    pub jobs: Vec<String>,
}

/// Checks a whole Prometheus config: it parses as YAML; `scrape_configs` is a list; each
/// job has a non-empty `job_name` unique in the file; every `scrape_interval`,
/// `scrape_timeout` and `evaluation_interval` matches `^([0-9]+(ms|s|m|h|d|w|y))+$`;
/// `scrape_timeout` ≤ `scrape_interval` where both are set; static targets are
/// `host:port`; `honor_labels` is a boolean and `sample_limit` a non-negative integer.
///
/// Deliberately, the order of duration units is **not** checked: `30s1m` passes here (and
/// the CRD's own rule), while Prometheus refuses it ("not a valid duration string"). That is
/// the case the reloader's rollback exists for, and the input its end-to-end test uses.
pub fn validate(yaml: &str) -> Result<ValidConfig, String> {
    let doc: Value = serde_saphyr::from_str(yaml).map_err(|e| format!("not YAML: {e}"))?;
    let root = match &doc {
        Value::Null => return Ok(ValidConfig::default()),
        Value::Object(root) => root,
        _ => return Err("the config is not a YAML mapping".into()),
    };
    if let Some(global) = root.get("global").filter(|g| !g.is_null()) {
        let global = global.as_object().ok_or("global is not a mapping")?;
        check_durations("global", global)?;
    }
    let jobs = match root.get("scrape_configs") {
        None | Some(Value::Null) => return Ok(ValidConfig::default()),
        Some(Value::Array(jobs)) => jobs,
        Some(_) => return Err("scrape_configs is not a list".into()),
    };
    let mut names = Vec::with_capacity(jobs.len());
    let mut seen = BTreeSet::new();
    for (i, job) in jobs.iter().enumerate() {
        let job = job
            .as_object()
            .ok_or_else(|| format!("scrape_configs[{i}] is not a mapping"))?;
        let name = match job.get("job_name") {
            Some(Value::String(name)) if !name.trim().is_empty() => name.clone(),
            _ => return Err(format!("scrape_configs[{i}] has no job_name")),
        };
        let at = format!("job {name:?}");
        if !seen.insert(name.clone()) {
            return Err(format!("{at} is defined twice"));
        }
        check_durations(&at, job)?;
        if let Some(v) = job.get("honor_labels")
            && !v.is_boolean()
        {
            return Err(format!("{at}: honor_labels is not true or false"));
        }
        if let Some(v) = job.get("sample_limit")
            && v.as_u64().is_none()
        {
            return Err(format!("{at}: sample_limit is not a non-negative integer"));
        }
        check_static_configs(&at, job.get("static_configs"))?;
        names.push(name);
    }
    Ok(ValidConfig { jobs: names })
}

fn check_durations(at: &str, section: &serde_json::Map<String, Value>) -> Result<(), String> {
    let parsed = |key: &str| -> Result<Option<Duration>, String> {
        match section.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => parse_duration(text)
                .map(Some)
                .ok_or_else(|| format!("{at}: {key} {text:?} is not a duration like 30s or 1m30s")),
            Some(other) => Err(format!(
                "{at}: {key} {other} is not a duration like 30s or 1m30s"
            )),
        }
    };
    let interval = parsed("scrape_interval")?;
    let timeout = parsed("scrape_timeout")?;
    parsed("evaluation_interval")?;
    if let (Some(interval), Some(timeout)) = (interval, timeout)
        && timeout > interval
    {
        return Err(format!(
            "{at}: scrape_timeout ({timeout:?}) is longer than scrape_interval ({interval:?})"
        ));
    }
    Ok(())
}

/// A duration matching `^([0-9]+(ms|s|m|h|d|w|y))+$`, units in any order (see
/// [`validate`]); `None` when it does not match.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let number: u128 = text[start..i].parse().ok()?;
        let (unit_ms, len) = match &bytes[i..] {
            [b'm', b's', ..] => (1, 2),
            [b's', ..] => (1_000, 1),
            [b'm', ..] => (60_000, 1),
            [b'h', ..] => (3_600_000, 1),
            [b'd', ..] => (86_400_000, 1),
            [b'w', ..] => (7 * 86_400_000, 1),
            [b'y', ..] => (365 * 86_400_000, 1),
            _ => return None,
        };
        i += len;
        total = total.checked_add(number.checked_mul(unit_ms)?)?;
    }
    Some(Duration::from_millis(u64::try_from(total).ok()?))
}

fn check_static_configs(at: &str, configs: Option<&Value>) -> Result<(), String> {
    let configs = match configs {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(configs)) => configs,
        Some(_) => return Err(format!("{at}: static_configs is not a list")),
    };
    for config in configs {
        let targets = match config.get("targets") {
            None | Some(Value::Null) => continue,
            Some(Value::Array(targets)) => targets,
            Some(_) => return Err(format!("{at}: targets is not a list")),
        };
        for target in targets {
            let ok = target.as_str().is_some_and(is_host_port);
            if !ok {
                return Err(format!("{at}: target {target} is not host:port"));
            }
        }
    }
    Ok(())
}

fn is_host_port(target: &str) -> bool {
    let Some((host, port)) = target.rsplit_once(':') else {
        return false;
    };
    let host_ok = match host.strip_prefix('[') {
        Some(v6) => v6.strip_suffix(']').is_some_and(|h| !h.is_empty()),
        None => !host.is_empty() && !host.contains([':', '/', ' ', '@']),
    };
    host_ok && !port.is_empty() && port.len() <= 5 && port.parse::<u16>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
global:
  scrape_interval: 15s
scrape_configs:
  - job_name: a
    honor_labels: true
    scrape_interval: 1m30s
    scrape_timeout: 90s
    sample_limit: 10
    static_configs:
      - targets: ["prom.a.svc:9090", "[::1]:9090", "127.0.0.1:1"]
  - job_name: b
"#;

    #[test]
    fn a_valid_config_lists_its_jobs_in_order() {
        assert_eq!(validate(GOOD).unwrap().jobs, ["a", "b"]);
        assert_eq!(validate("").unwrap(), ValidConfig::default());
        assert_eq!(
            validate("scrape_configs: []").unwrap(),
            ValidConfig::default()
        );
    }

    #[test]
    fn each_kind_of_mistake_is_refused_with_the_job_named() {
        let cases = [
            ("scrape_configs: [", "not YAML"),
            ("- a", "not a YAML mapping"),
            ("scrape_configs: {a: 1}", "not a list"),
            ("scrape_configs: [{honor_labels: true}]", "has no job_name"),
            ("scrape_configs: [{job_name: ''}]", "has no job_name"),
            (
                "scrape_configs: [{job_name: a}, {job_name: a}]",
                "defined twice",
            ),
            (
                "scrape_configs: [{job_name: a, scrape_interval: 30}]",
                "not a duration",
            ),
            (
                "scrape_configs: [{job_name: a, scrape_interval: 30sec}]",
                "not a duration",
            ),
            (
                "scrape_configs: [{job_name: a, scrape_interval: 1.5s}]",
                "not a duration",
            ),
            ("global: {scrape_timeout: 5x}", "global: scrape_timeout"),
            (
                "scrape_configs: [{job_name: a, scrape_interval: 10s, scrape_timeout: 11s}]",
                "longer than scrape_interval",
            ),
            (
                "scrape_configs: [{job_name: a, honor_labels: 'yes'}]",
                "honor_labels",
            ),
            (
                "scrape_configs: [{job_name: a, sample_limit: -1}]",
                "sample_limit",
            ),
            (
                "scrape_configs: [{job_name: a, static_configs: [{targets: [prom]}]}]",
                "not host:port",
            ),
            (
                "scrape_configs: [{job_name: a, static_configs: [{targets: ['http://p:1']}]}]",
                "not host:port",
            ),
            (
                "scrape_configs: [{job_name: a, static_configs: [{targets: ['p:99999']}]}]",
                "not host:port",
            ),
        ];
        for (yaml, expected) in cases {
            let err = validate(yaml).unwrap_err();
            assert!(err.contains(expected), "{yaml}: {err}");
        }
        let err = validate("scrape_configs: [{job_name: x, scrape_interval: 1q}]").unwrap_err();
        assert!(err.contains("job \"x\""), "{err}");
    }

    #[test]
    fn unit_order_is_not_checked_so_prometheus_gets_to_refuse_it() {
        // Prometheus refuses "30s1m"; this validation lets it through on purpose (see
        // `validate`), which is what the reloader's rollback path is tested with.
        let yaml = "scrape_configs: [{job_name: a, scrape_interval: 30s1m, scrape_timeout: 10s}]";
        assert_eq!(validate(yaml).unwrap().jobs, ["a"]);
        assert_eq!(parse_duration("30s1m"), Some(Duration::from_secs(90)));
    }

    #[test]
    fn durations_accept_every_prometheus_unit() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1h1m1s"), Some(Duration::from_secs(3661)));
        assert_eq!(parse_duration("1d"), Some(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("2w"), Some(Duration::from_secs(14 * 86_400)));
        assert_eq!(
            parse_duration("1y"),
            Some(Duration::from_secs(365 * 86_400))
        );
        for bad in ["", "s", "10", "1.5s", "-1s", "1 s", "1S", "1m_"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
