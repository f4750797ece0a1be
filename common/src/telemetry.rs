//! Logging and tracing, set up once by each binary: the log lines on stderr and, with an
//! OTLP endpoint (`--otlp-endpoint`, off by default), a trace per change exported over
//! OTLP/gRPC.
//!
//! Trace spans are ordinary `tracing` spans of the target [`TARGET`], made only when
//! tracing is on ([`enabled`]): with it off there is no OpenTelemetry layer, no exporter,
//! and no span made for a trace, and a change carries an empty `traceparent`. With it on,
//! only spans of [`TARGET`] reach the exporter (a library's own spans do not).
//!
//! Across processes a trace travels as a W3C `traceparent`
//! (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`): stored with a placements record,
//! sent with each assignment and report ([`traceparent`], [`set_parent`]).
//!
//! Sampling follows the OpenTelemetry SDK's environment (`OTEL_TRACES_SAMPLER`,
//! `OTEL_TRACES_SAMPLER_ARG`; parent-based always-on when unset).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanProcessor,
};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The `tracing` target of every span that belongs to a change's trace.
pub const TARGET: &str = "accord::trace";

/// The annotation a user puts on a placed object to make a trace of theirs the parent of
/// the change's trace (the W3C `traceparent` shape).
pub const TRACEPARENT_ANNOTATION: &str = "accord.io/traceparent";

/// The resource attribute (and agent span attribute) naming a member cluster.
pub const CLUSTER_ATTRIBUTE: &str = "accord.cluster";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// The exporting half, built by [`start`] once the process knows what it is (an agent
/// learns its cluster from its identity after start-up).
static EXPORT: OnceLock<Export> = OnceLock::new();

#[derive(Debug)]
struct Export {
    endpoint: String,
    service: &'static str,
    processor: Arc<OnceLock<BatchSpanProcessor>>,
}

/// Whether traces are exported (an OTLP endpoint was given): callers make trace spans and
/// carry `traceparent`s only then.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP endpoint is not an `http://` or `https://` URL with a host.
    #[error(
        "--otlp-endpoint {0:?}: expected an http:// or https:// URL with a host, e.g. http://localhost:4317"
    )]
    Endpoint(String),
    /// The exporter could not be built.
    #[error("building the OTLP exporter: {0}")]
    Exporter(String),
}

/// Checks an OTLP endpoint given on the command line.
pub fn parse_endpoint(value: &str) -> Result<String, TelemetryError> {
    let bad = || TelemetryError::Endpoint(value.to_owned());
    let uri: http::Uri = value.parse().map_err(|_| bad())?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(host)) if !host.is_empty() => Ok(value.to_owned()),
        _ => Err(bad()),
    }
}

/// The exporter of a process that traces; [`Telemetry::shutdown`] exports what is left.
#[derive(Debug)]
#[must_use = "shut it down at the end to export the last spans"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports what is left and stops the exporter, off the runtime's threads (the export
    /// itself runs on the runtime, which must keep going meanwhile).
    pub async fn shutdown(mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = tokio::task::spawn_blocking(move || {
                let _ = provider.force_flush();
                let _ = provider.shutdown_with_timeout(Duration::from_secs(3));
            })
            .await;
        }
    }
}

/// Installs the process's subscriber: log lines on stderr filtered by `RUST_LOG` (else
/// `default_filter`) and, with `otlp_endpoint`, the OpenTelemetry layer for spans of
/// [`TARGET`] of service `service`. Spans are exported once [`start`] ran.
pub fn init(default_filter: &str, service: &'static str, otlp_endpoint: Option<&str>) -> Telemetry {
    let Some(endpoint) = otlp_endpoint else {
        tracing_subscriber::registry()
            .with(log_lines(default_filter))
            .init();
        return Telemetry { provider: None };
    };
    let processor = Arc::new(OnceLock::new());
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Deferred(processor.clone()))
        .build();
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(service))
        .with_filter(Targets::new().with_target(TARGET, tracing::Level::TRACE));
    tracing_subscriber::registry()
        .with(otel)
        .with(log_lines(default_filter))
        .init();
    let _ = EXPORT.set(Export {
        endpoint: endpoint.to_owned(),
        service,
        processor,
    });
    ENABLED.store(true, Ordering::Relaxed);
    Telemetry {
        provider: Some(provider),
    }
}

/// The log lines on stderr, filtered by `RUST_LOG` (else `default_filter`).
fn log_lines<S>(default_filter: &str) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into());
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter)
}

/// Starts exporting, the process's resource carrying `attributes` beside its service name
/// (the agent names its cluster, [`CLUSTER_ATTRIBUTE`]); a no-op when tracing is off or
/// already started. Call from within the Tokio runtime.
pub fn start(attributes: Vec<(&'static str, String)>) -> Result<(), TelemetryError> {
    let Some(export) = EXPORT.get() else {
        return Ok(());
    };
    if export.processor.get().is_some() {
        return Ok(());
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(&export.endpoint)
        .with_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    // Spans leave within a second: a trace is looked at while the change is fresh.
    let config = BatchConfigBuilder::default()
        .with_scheduled_delay(Duration::from_secs(1))
        .build();
    let mut processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(config)
        .build();
    processor.set_resource(
        &Resource::builder()
            .with_service_name(export.service)
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .with_attributes(attributes.into_iter().map(|(k, v)| KeyValue::new(k, v)))
            .build(),
    );
    let _ = export.processor.set(processor);
    tracing::info!(endpoint = %export.endpoint, "exporting traces over OTLP");
    Ok(())
}

/// The span processor of the provider: hands ended spans to the batch exporter once
/// [`start`] built it, drops them before (there are none: trace spans come with work).
#[derive(Debug)]
struct Deferred(Arc<OnceLock<BatchSpanProcessor>>);

impl SpanProcessor for Deferred {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        if let Some(p) = self.0.get() {
            p.on_start(span, cx);
        }
    }

    fn on_end(&self, span: SpanData) {
        if let Some(p) = self.0.get() {
            p.on_end(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.get().map_or(Ok(()), SpanProcessor::force_flush)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0
            .get()
            .map_or(Ok(()), |p| p.shutdown_with_timeout(timeout))
    }
}

/// A span of one step of the current span's work (a server-side apply, a Kafka request),
/// named `name`; a disabled span when tracing is off. Instrument the step's future with it.
pub fn step(name: &'static str) -> Span {
    if !enabled() {
        return Span::none();
    }
    tracing::info_span!(target: TARGET, "step", otel.name = name)
}

/// A child span of `parent` named `name`; a disabled span when `parent` is (tracing off,
/// or the work is not traced).
pub fn child(parent: &Span, name: &'static str) -> Span {
    if parent.is_disabled() {
        return Span::none();
    }
    tracing::info_span!(target: TARGET, parent: parent, "step", otel.name = name)
}

/// Why a `traceparent` was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a W3C traceparent (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, ids not all zero)"
)]
pub struct InvalidTraceparent(pub String);

/// The span context a W3C `traceparent` names.
pub fn parse_traceparent(value: &str) -> Result<SpanContext, InvalidTraceparent> {
    let value = value.trim();
    // The propagator takes shorter ids too; the W3C shape does not.
    let lengths: Vec<usize> = value.split('-').map(str::len).collect();
    let hex = value
        .bytes()
        .all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if lengths != [2, 32, 16, 2] || !hex {
        return Err(InvalidTraceparent(value.to_owned()));
    }
    let carrier = HashMap::from([("traceparent".to_owned(), value.to_owned())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    let span = cx.span();
    let sc = span.span_context();
    if sc.is_valid() {
        Ok(sc.clone())
    } else {
        Err(InvalidTraceparent(value.to_owned()))
    }
}

/// Makes the span `traceparent` names the parent of `span` (made but not yet entered);
/// `false` when it names none (empty or invalid) or tracing is off.
pub fn set_parent(span: &Span, traceparent: &str) -> bool {
    if traceparent.is_empty() || !enabled() {
        return false;
    }
    match parse_traceparent(traceparent) {
        Ok(sc) => span
            .set_parent(Context::new().with_remote_span_context(sc))
            .is_ok(),
        Err(_) => false,
    }
}

/// The W3C `traceparent` of `span` ("" when tracing is off or the span is disabled).
pub fn traceparent(span: &Span) -> String {
    if !enabled() || span.is_disabled() {
        return String::new();
    }
    let cx = span.context();
    let otel = cx.span();
    let sc = otel.span_context();
    if !sc.is_valid() {
        return String::new();
    }
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}

/// The 32-hex trace id of a `traceparent` ("" for an empty or malformed one).
pub fn trace_id(traceparent: &str) -> &str {
    let mut parts = traceparent.split('-');
    match (parts.next(), parts.next()) {
        (Some("00"), Some(id)) if id.len() == 32 => id,
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_parses_and_anything_else_is_refused_with_a_reason() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let sc = parse_traceparent(ok).unwrap();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert_eq!(trace_id(ok), "4bf92f3577b34da6a3ce929d0e0e4736");
        for bad in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            let e = parse_traceparent(bad).unwrap_err();
            assert!(e.to_string().contains("not a W3C traceparent"), "{e}");
        }
        assert_eq!(trace_id(""), "");
        assert_eq!(trace_id("01-x"), "");
    }

    #[test]
    fn endpoints_must_be_http_urls() {
        assert!(parse_endpoint("http://127.0.0.1:4317").is_ok());
        assert!(parse_endpoint("https://otel.example:4317").is_ok());
        for bad in ["", "127.0.0.1:4317", "ftp://x:1", "http://"] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn with_tracing_off_nothing_is_carried() {
        assert!(!enabled());
        let span = tracing::info_span!(target: TARGET, "change");
        assert_eq!(traceparent(&span), "");
        assert!(!set_parent(
            &span,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
    }
}
