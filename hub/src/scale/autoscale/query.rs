//! One PromQL instant query through Prometheus's HTTP API, read as one number.
//!
//! A scalar or a one-element vector is a value; an HTTP or Prometheus error, a timeout, an
//! empty result, several series, a range result, NaN or ±Inf is a failure with a message
//! that says which, so that status and Events tell the user what to fix.

use serde::Deserialize;
use std::time::Duration;

/// Why a query gave no value.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// No answer (connection refused, timeout, TLS).
    #[error("Prometheus at {url} did not answer: {reason}")]
    Unreachable {
        /// The base URL.
        url: String,
        /// The transport error, in one line.
        reason: String,
    },
    /// Prometheus answered with an error.
    #[error("Prometheus refused the query (HTTP {status}, {kind}): {message}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// Prometheus's `errorType`.
        kind: String,
        /// Prometheus's `error`.
        message: String,
    },
    /// The answer was not Prometheus's JSON.
    #[error("unreadable answer (HTTP {status}): {reason}")]
    Unreadable {
        /// HTTP status.
        status: u16,
        /// What did not parse.
        reason: String,
    },
    /// The query returned no series.
    #[error("the query returned no series")]
    Empty,
    /// The query returned more than one series.
    #[error("the query returned {0} series; it must return one (wrap it in sum(...))")]
    Several(usize),
    /// The query returned a kind of result that is not one number.
    #[error("the query returned a {0}; it must return a scalar or a one-element vector")]
    WrongType(String),
    /// The value is NaN, infinite or beyond ±1e15.
    #[error("the query returned {0}, not a number autoscaling can use (finite, within ±1e15)")]
    NotFinite(String),
}

/// Largest magnitude taken as a value.
pub const MAX_VALUE: f64 = 1e15;

#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    result: serde_json::Value,
}

/// Reads Prometheus's answer (`status` is the HTTP status) as one finite number.
pub fn parse(status: u16, body: &[u8]) -> Result<f64, QueryError> {
    let answer: Answer = serde_json::from_slice(body).map_err(|e| QueryError::Unreadable {
        status,
        reason: e.to_string(),
    })?;
    if answer.status != "success" {
        return Err(QueryError::Refused {
            status,
            kind: answer.error_type.unwrap_or_default(),
            message: answer.error.unwrap_or_default(),
        });
    }
    let data = answer.data.ok_or_else(|| QueryError::Unreadable {
        status,
        reason: "no data".into(),
    })?;
    let sample = match data.result_type.as_str() {
        "scalar" => &data.result,
        "vector" => {
            let series = data.result.as_array().map_or(0, Vec::len);
            match series {
                0 => return Err(QueryError::Empty),
                1 => &data.result[0]["value"],
                n => return Err(QueryError::Several(n)),
            }
        }
        other => return Err(QueryError::WrongType(other.to_owned())),
    };
    // A sample is [unix seconds, "value"]; Prometheus writes the value as a string so that
    // NaN and ±Inf survive JSON.
    let text = sample[1].as_str().ok_or_else(|| QueryError::Unreadable {
        status,
        reason: format!("sample {sample} has no string value"),
    })?;
    let value: f64 = text.parse().map_err(|_| QueryError::Unreadable {
        status,
        reason: format!("value {text:?} is not a number"),
    })?;
    // Beyond ±1e15 the window's squared deviations could overflow to infinity.
    if value.is_finite() && value.abs() <= MAX_VALUE {
        Ok(value)
    } else {
        Err(QueryError::NotFinite(text.to_owned()))
    }
}

/// Runs `query` against the Prometheus at `url` with `timeout`.
pub async fn instant(
    http: &reqwest::Client,
    url: &str,
    query: &str,
    timeout: Duration,
) -> Result<f64, QueryError> {
    let endpoint = format!("{}/api/v1/query", url.trim_end_matches('/'));
    let unreachable = |e: reqwest::Error| QueryError::Unreachable {
        url: url.to_owned(),
        reason: one_line(&e),
    };
    let response = http
        .get(&endpoint)
        .query(&[("query", query)])
        .timeout(timeout)
        .send()
        .await
        .map_err(unreachable)?;
    let status = response.status().as_u16();
    let body = response.bytes().await.map_err(unreachable)?;
    parse(status, &body)
}

/// An error and its sources in one line (the URL is said once, by [`QueryError`]).
fn one_line(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() {
        "timed out".to_owned()
    } else if e.is_connect() {
        "could not connect".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(result_type: &str, result: &str) -> Vec<u8> {
        format!(
            r#"{{"status":"success","data":{{"resultType":"{result_type}","result":{result}}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn a_scalar_and_a_one_element_vector_are_values() {
        assert_eq!(parse(200, &ok("scalar", r#"[1.5,"42"]"#)).unwrap(), 42.0);
        let vector = r#"[{"metric":{"job":"x"},"value":[1.5,"1750.25"]}]"#;
        assert_eq!(parse(200, &ok("vector", vector)).unwrap(), 1750.25);
    }

    #[test]
    fn empty_several_nan_inf_and_matrices_are_failures() {
        assert!(matches!(
            parse(200, &ok("vector", "[]")),
            Err(QueryError::Empty)
        ));
        let two = r#"[{"metric":{},"value":[1,"1"]},{"metric":{},"value":[1,"2"]}]"#;
        assert!(matches!(
            parse(200, &ok("vector", two)),
            Err(QueryError::Several(2))
        ));
        for bad in ["NaN", "+Inf", "-Inf", "1e300"] {
            let v = format!(r#"[{{"metric":{{}},"value":[1,"{bad}"]}}]"#);
            assert!(matches!(
                parse(200, &ok("vector", &v)),
                Err(QueryError::NotFinite(_))
            ));
        }
        assert!(matches!(
            parse(200, &ok("matrix", "[]")),
            Err(QueryError::WrongType(_))
        ));
    }

    #[test]
    fn prometheus_errors_and_garbage_say_what_happened() {
        let refused =
            br#"{"status":"error","errorType":"bad_data","error":"parse error at char 4"}"#;
        let e = parse(400, refused).unwrap_err();
        assert!(e.to_string().contains("parse error at char 4"), "{e}");
        assert!(e.to_string().contains("HTTP 400"), "{e}");
        let e = parse(502, b"<html>bad gateway</html>").unwrap_err();
        assert!(
            matches!(e, QueryError::Unreadable { status: 502, .. }),
            "{e}"
        );
    }
}
