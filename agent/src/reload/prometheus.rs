//! Talking to the Prometheus the reloader runs beside: `POST /-/reload`,
//! `GET /api/v1/status/config`, `GET /metrics` and `GET /api/v1/targets`, with the parsing
//! of each answer kept pure.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

/// Timeout of one request; a reload of a large config can take a while.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Timeout of connecting.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The gauge that says whether the last reload succeeded.
pub const RELOAD_SUCCESS_METRIC: &str = "prometheus_config_last_reload_successful";

/// How Prometheus answered `POST /-/reload`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadAnswer {
    /// 2xx: the new config is loaded.
    Reloaded,
    /// 500: Prometheus refused the config; its message (the response body).
    Refused(String),
    /// 403: the lifecycle API is disabled.
    Forbidden,
    /// Another 4xx: something other than Prometheus's reload endpoint answered.
    Unexpected(String),
    /// No answer, or a 5xx other than 500 (a proxy in front, say): retry later.
    Unreachable(String),
}

/// Classifies the answer to `POST /-/reload`.
pub fn classify_reload(status: u16, body: &str) -> ReloadAnswer {
    let body = body.trim();
    match status {
        200..=299 => ReloadAnswer::Reloaded,
        403 => ReloadAnswer::Forbidden,
        500 => ReloadAnswer::Refused(if body.is_empty() {
            "Prometheus refused the config (HTTP 500)".to_owned()
        } else {
            body.to_owned()
        }),
        501..=599 => ReloadAnswer::Unreachable(format!("HTTP {status}: {body}")),
        _ => ReloadAnswer::Unexpected(format!("HTTP {status}: {body}")),
    }
}

/// The loaded config's YAML from a `/api/v1/status/config` answer.
pub fn parse_status_config(body: &str) -> Result<String, String> {
    let answer: Value =
        serde_json::from_str(body).map_err(|e| format!("status/config is not JSON: {e}"))?;
    if answer["status"] != "success" {
        return Err(format!("status/config answered {}", answer["status"]));
    }
    answer["data"]["yaml"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "status/config has no data.yaml".to_owned())
}

/// The value of an unlabelled sample `name` in Prometheus's text exposition.
pub fn parse_metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let rest = line.strip_prefix(name)?;
            let value = rest.strip_prefix(' ')?;
            value.split_whitespace().next()?.parse().ok()
        })
}

/// Jobs with an active target whose health is `down`, and that target's last error (the
/// first such target by scrape URL, so the answer is stable).
pub fn parse_down_targets(body: &str) -> Result<BTreeMap<String, String>, String> {
    let answer: Value =
        serde_json::from_str(body).map_err(|e| format!("targets is not JSON: {e}"))?;
    let targets = answer["data"]["activeTargets"]
        .as_array()
        .ok_or("targets has no data.activeTargets")?;
    let mut down: Vec<(&str, &str, &str)> = targets
        .iter()
        .filter(|t| t["health"] == "down")
        .filter_map(|t| {
            Some((
                t["scrapePool"].as_str()?,
                t["scrapeUrl"].as_str().unwrap_or_default(),
                t["lastError"].as_str().unwrap_or_default(),
            ))
        })
        .collect();
    down.sort();
    let mut out = BTreeMap::new();
    for (job, _, error) in down {
        out.entry(job.to_owned())
            .or_insert_with(|| error.to_owned());
    }
    Ok(out)
}

/// A client of one Prometheus.
#[derive(Debug, Clone)]
pub struct PrometheusClient {
    base: String,
    http: reqwest::Client,
}

impl PrometheusClient {
    /// A client of the Prometheus at `url` (`http://host:port`, optionally with a path prefix).
    pub fn new(url: &str) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()?;
        Ok(Self {
            base: url.trim_end_matches('/').to_owned(),
            http,
        })
    }

    /// The base URL, for messages.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// `POST /-/reload`.
    pub async fn reload(&self) -> ReloadAnswer {
        let response = match self
            .http
            .post(format!("{}/-/reload", self.base))
            .send()
            .await
        {
            Ok(response) => response,
            Err(e) => return ReloadAnswer::Unreachable(accord_common::runtime::error_chain(&e)),
        };
        let status = response.status().as_u16();
        match response.text().await {
            Ok(body) => classify_reload(status, &body),
            Err(e) => ReloadAnswer::Unreachable(accord_common::runtime::error_chain(&e)),
        }
    }

    /// The YAML of the loaded config.
    pub async fn loaded_config(&self) -> Result<String, String> {
        parse_status_config(&self.get("/api/v1/status/config").await?)
    }

    /// Whether `prometheus_config_last_reload_successful` is 1.
    pub async fn last_reload_successful(&self) -> Result<bool, String> {
        let text = self.get("/metrics").await?;
        parse_metric(&text, RELOAD_SUCCESS_METRIC)
            .map(|v| v == 1.0)
            .ok_or_else(|| format!("/metrics has no {RELOAD_SUCCESS_METRIC}"))
    }

    /// Jobs with a target down and its last error.
    pub async fn down_targets(&self) -> Result<BTreeMap<String, String>, String> {
        parse_down_targets(&self.get("/api/v1/targets?state=active").await?)
    }

    async fn get(&self, path: &str) -> Result<String, String> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .map_err(|e| accord_common::runtime::error_chain(&e))?;
        let status = response.status();
        let body = response
            .text()
            .await
            .map_err(|e| accord_common::runtime::error_chain(&e))?;
        if !status.is_success() {
            return Err(format!("GET {path}: HTTP {status}: {}", body.trim()));
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reload_answers_are_classified_by_status() {
        assert_eq!(classify_reload(200, ""), ReloadAnswer::Reloaded);
        assert_eq!(
            classify_reload(403, "Lifecycle API is not enabled."),
            ReloadAnswer::Forbidden
        );
        assert_eq!(
            classify_reload(
                500,
                "failed to reload config: parsing YAML file p: not a valid duration string: \"30s1m\"\n"
            ),
            ReloadAnswer::Refused(
                "failed to reload config: parsing YAML file p: not a valid duration string: \"30s1m\""
                    .into()
            )
        );
        assert!(matches!(classify_reload(500, ""), ReloadAnswer::Refused(m) if m.contains("500")));
        assert!(
            matches!(classify_reload(503, "busy"), ReloadAnswer::Unreachable(m) if m.contains("503"))
        );
        assert!(
            matches!(classify_reload(404, "nope"), ReloadAnswer::Unexpected(m) if m.contains("404"))
        );
    }

    #[test]
    fn the_loaded_config_is_read_from_the_status_answer() {
        let body = r#"{"status":"success","data":{"yaml":"global: {}\nscrape_configs: []\n"}}"#;
        assert_eq!(
            parse_status_config(body).unwrap(),
            "global: {}\nscrape_configs: []\n"
        );
        assert!(parse_status_config(r#"{"status":"error"}"#).is_err());
        assert!(parse_status_config("<html>").is_err());
        assert!(parse_status_config(r#"{"status":"success","data":{}}"#).is_err());
    }

    #[test]
    fn the_reload_gauge_is_found_among_other_samples() {
        let text = "# HELP prometheus_config_last_reload_successful Whether ...\n\
                    # TYPE prometheus_config_last_reload_successful gauge\n\
                    prometheus_config_last_reload_successful_timestamp_seconds 1.7e+09\n\
                    prometheus_config_last_reload_successful 0\n";
        assert_eq!(parse_metric(text, RELOAD_SUCCESS_METRIC), Some(0.0));
        assert_eq!(
            parse_metric(
                text,
                "prometheus_config_last_reload_successful_timestamp_seconds"
            ),
            Some(1.7e9)
        );
        assert_eq!(parse_metric("", RELOAD_SUCCESS_METRIC), None);
    }

    #[test]
    fn down_targets_give_one_error_per_job() {
        let body = r#"{"status":"success","data":{"activeTargets":[
            {"scrapePool":"a","scrapeUrl":"http://2/federate","health":"down","lastError":"second"},
            {"scrapePool":"a","scrapeUrl":"http://1/federate","health":"down","lastError":"sample limit exceeded"},
            {"scrapePool":"b","scrapeUrl":"http://3/federate","health":"up","lastError":""},
            {"scrapePool":"c","scrapeUrl":"http://4/federate","health":"unknown","lastError":""}
        ],"droppedTargets":[]}}"#;
        let down = parse_down_targets(body).unwrap();
        assert_eq!(
            down,
            BTreeMap::from([("a".to_owned(), "sample limit exceeded".to_owned())])
        );
        assert!(parse_down_targets("{}").is_err());
    }
}
