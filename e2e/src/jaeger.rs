//! Jaeger, the trace backend of the tracing tests and the sandbox: its all-in-one binary
//! (built by `e2e/testbed/build.sh`) with an OTLP/gRPC receiver, in-memory storage and the
//! query API on free loopback ports, and what its query API shows of one trace.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use serde::Deserialize;

use crate::ports::free_port;
use crate::testbed::Testbed;
use crate::wait::{self, Check};

/// How long Jaeger may take to answer its query API.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a Jaeger listens.
#[derive(Debug, Clone)]
pub struct JaegerAddrs {
    /// OTLP/gRPC receiver, `http://127.0.0.1:<port>` (what `--otlp-endpoint` takes).
    pub otlp_endpoint: String,
    /// Query API (and UI), `http://127.0.0.1:<port>`.
    pub query_url: String,
    /// The configuration to start it with.
    pub config: String,
}

impl JaegerAddrs {
    /// Free loopback ports for the receiver and the query API, and the configuration
    /// using them: memory storage, no telemetry of Jaeger's own on fixed ports.
    pub fn free() -> Result<Self> {
        let otlp = format!("127.0.0.1:{}", free_port()?);
        let query = format!("127.0.0.1:{}", free_port()?);
        let query_grpc = format!("127.0.0.1:{}", free_port()?);
        let config = format!(
            "service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memory
    http:
      endpoint: {query}
    grpc:
      endpoint: {query_grpc}
  jaeger_storage:
    backends:
      memory:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: {otlp}
exporters:
  jaeger_storage_exporter:
    trace_storage: memory
"
        );
        Ok(Self {
            otlp_endpoint: format!("http://{otlp}"),
            query_url: format!("http://{query}"),
            config,
        })
    }

    /// The command that runs `binary` with the configuration, written to `dir`.
    pub fn command(&self, binary: &Path, dir: &Path) -> Result<Command> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let file = dir.join("jaeger.yaml");
        fs::write(&file, &self.config).with_context(|| format!("writing {}", file.display()))?;
        let mut command = Command::new(binary);
        command.arg("--config").arg(&file);
        Ok(command)
    }
}

/// A running Jaeger of a testbed.
#[derive(Debug, Clone)]
pub struct Jaeger {
    /// Its addresses.
    pub addrs: JaegerAddrs,
}

impl Jaeger {
    /// Starts Jaeger under the testbed's supervisor and waits until its query API answers.
    pub async fn start(testbed: &Testbed) -> Result<Self> {
        let addrs = JaegerAddrs::free()?;
        let command = addrs.command(&testbed.binaries().jaeger, &testbed.dir().join("jaeger"))?;
        let process = testbed.spawn("jaeger", command)?;
        let jaeger = Self { addrs };
        let url = format!("{}/api/services", jaeger.addrs.query_url);
        wait::until("jaeger to answer its query API", READY_TIMEOUT, || async {
            testbed.ensure_running(process)?;
            Ok(match testbed.http().get(&url).send().await {
                Ok(r) if r.status().is_success() => Check::Ready(()),
                Ok(r) => Check::NotYet(format!("HTTP {}", r.status())),
                Err(e) => Check::NotYet(e.to_string()),
            })
        })
        .await?;
        Ok(jaeger)
    }

    /// The OTLP endpoint to give `--otlp-endpoint`.
    pub fn otlp_endpoint(&self) -> &str {
        &self.addrs.otlp_endpoint
    }

    /// Trace `trace_id` as the query API shows it now; `None` while it holds no span of it.
    pub async fn trace(&self, http: &reqwest::Client, trace_id: &str) -> Result<Option<Trace>> {
        trace(http, &self.addrs.query_url, trace_id).await
    }
}

/// Trace `trace_id` from the query API at `query_url`; `None` while it holds no span of it.
pub async fn trace(
    http: &reqwest::Client,
    query_url: &str,
    trace_id: &str,
) -> Result<Option<Trace>> {
    let response = http
        .get(format!("{query_url}/api/traces/{trace_id}"))
        .send()
        .await?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !response.status().is_success() {
        bail!(
            "jaeger answered HTTP {} for trace {trace_id}",
            response.status()
        );
    }
    let answer: Answer = response.json().await.context("decoding a jaeger trace")?;
    Ok(answer.data.into_iter().next())
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    data: Vec<Trace>,
}

/// One trace as Jaeger's query API returns it.
#[derive(Debug, Clone, Deserialize)]
pub struct Trace {
    /// Its spans, in no particular order.
    pub spans: Vec<JaegerSpan>,
    /// The processes (resources) the spans name, by id.
    pub processes: HashMap<String, Process>,
}

/// One span.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JaegerSpan {
    /// Its trace id.
    #[serde(rename = "traceID")]
    pub trace_id: String,
    /// Its id.
    #[serde(rename = "spanID")]
    pub span_id: String,
    /// Its name.
    pub operation_name: String,
    /// Its parent (a `CHILD_OF` reference), if any.
    #[serde(default)]
    pub references: Vec<Reference>,
    /// Start, microseconds since the Unix epoch.
    pub start_time: i64,
    /// Duration in microseconds.
    pub duration: i64,
    /// Its attributes.
    #[serde(default)]
    pub tags: Vec<Tag>,
    /// The process that sent it (a key of [`Trace::processes`]).
    #[serde(rename = "processID")]
    pub process_id: String,
}

/// A reference of a span to another.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reference {
    /// `CHILD_OF` or `FOLLOWS_FROM`.
    pub ref_type: String,
    /// The other span's trace.
    #[serde(rename = "traceID")]
    pub trace_id: String,
    /// The other span.
    #[serde(rename = "spanID")]
    pub span_id: String,
}

/// An attribute.
#[derive(Debug, Clone, Deserialize)]
pub struct Tag {
    /// Its key.
    pub key: String,
    /// Its value (a string, number or boolean).
    pub value: serde_json::Value,
}

/// A process (an OpenTelemetry resource).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    /// `service.name`.
    pub service_name: String,
    /// The resource's other attributes.
    #[serde(default)]
    pub tags: Vec<Tag>,
}

/// The string value of attribute `key` in `tags`.
pub fn tag<'a>(tags: &'a [Tag], key: &str) -> Option<&'a str> {
    tags.iter()
        .find(|t| t.key == key)
        .and_then(|t| t.value.as_str())
}

impl JaegerSpan {
    /// The span's parent in its own trace or another (`CHILD_OF`), if any.
    pub fn parent(&self) -> Option<&Reference> {
        self.references.iter().find(|r| r.ref_type == "CHILD_OF")
    }
}

impl Trace {
    /// The process that sent `span`.
    pub fn process(&self, span: &JaegerSpan) -> Option<&Process> {
        self.processes.get(&span.process_id)
    }

    /// The spans named `name`.
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a JaegerSpan> + 'a {
        self.spans.iter().filter(move |s| s.operation_name == name)
    }

    /// The span with id `span_id`.
    pub fn span(&self, span_id: &str) -> Option<&JaegerSpan> {
        self.spans.iter().find(|s| s.span_id == span_id)
    }

    /// The chain of spans from `span` up to its root within the trace (`span` first).
    pub fn ancestry<'a>(&'a self, span: &'a JaegerSpan) -> Vec<&'a JaegerSpan> {
        let mut chain = vec![span];
        let mut at = span;
        while let Some(parent) = at.parent().and_then(|r| self.span(&r.span_id)) {
            if chain.iter().any(|s| s.span_id == parent.span_id) {
                break;
            }
            chain.push(parent);
            at = parent;
        }
        chain
    }
}
