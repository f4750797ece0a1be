//! A tiny Prometheus exporter whose gauge values a test sets, so that a real Prometheus
//! scrapes a metric the test controls (the load that drives autoscaling end to end).
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! use accord_e2e::exporter::Exporter;
//!
//! let exporter = Exporter::start().await?;
//! exporter.set("accord_test_load", &[("policy", "web")], 1500.0);
//! println!("scrape http://{}/metrics", exporter.address());
//! # Ok(())
//! # }
//! ```
//!
//! It speaks just enough HTTP/1.1 for a scraper: one request per connection, answered with
//! `Connection: close`. The server task lives on the runtime that started it and ends when
//! the [`Exporter`] is dropped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Longest request head the exporter reads; scrapers send a few hundred bytes.
const MAX_REQUEST_HEAD: usize = 16 * 1024;
/// A client that sends nothing for this long is dropped, so a stuck connection never
/// holds a task forever.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Gauges by metric name, then by rendered label set (`{a="1",b="2"}` or empty).
type Gauges = BTreeMap<String, BTreeMap<String, f64>>;

/// A running exporter serving `/metrics` on `127.0.0.1:<free port>`.
pub struct Exporter {
    address: SocketAddr,
    gauges: Arc<Mutex<Gauges>>,
    server: JoinHandle<()>,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Exporter {
    /// Binds a free loopback port and starts serving (no gauges yet).
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let gauges = Arc::new(Mutex::new(Gauges::new()));
        let served = gauges.clone();
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let gauges = served.clone();
                tokio::spawn(async move {
                    // A scraper that hangs up early is not the exporter's problem.
                    let _ = serve(stream, &gauges).await;
                });
            }
        });
        Ok(Self {
            address,
            gauges,
            server,
        })
    }

    /// `127.0.0.1:<port>`, the scrape target.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Sets gauge `name{labels}` to `value`; the next scrape sees it.
    pub fn set(&self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.lock()
            .entry(name.to_owned())
            .or_default()
            .insert(render_labels(labels), value);
    }

    /// Removes gauge `name{labels}`, so that a query for it finds no series.
    pub fn remove(&self, name: &str, labels: &[(&str, &str)]) {
        let mut gauges = self.lock();
        if let Some(series) = gauges.get_mut(name) {
            series.remove(&render_labels(labels));
            if series.is_empty() {
                gauges.remove(name);
            }
        }
    }

    /// The body a scrape gets right now.
    pub fn render(&self) -> String {
        render(&self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Gauges> {
        self.gauges.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `{a="x",b="y"}` with label values escaped as the text format wants; empty for no labels.
fn render_labels(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let mut sorted = labels.to_vec();
    sorted.sort_unstable();
    let pairs: Vec<String> = sorted
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    format!("{{{}}}", pairs.join(","))
}

/// A sample value in the text format, which spells infinities `+Inf`/`-Inf`.
fn render_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value == f64::INFINITY {
        "+Inf".into()
    } else if value == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{value}")
    }
}

/// The Prometheus text exposition of `gauges`.
fn render(gauges: &Gauges) -> String {
    let mut out = String::new();
    for (name, series) in gauges {
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (labels, value) in series {
            let _ = writeln!(out, "{name}{labels} {}", render_value(*value));
        }
    }
    out
}

/// Answers one request on `stream`: the exposition for `GET /metrics`, 404 otherwise.
async fn serve(mut stream: TcpStream, gauges: &Mutex<Gauges>) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0_u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(READ_TIMEOUT, stream.read(&mut buf))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        if n == 0 || head.len() > MAX_REQUEST_HEAD {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let request_line = String::from_utf8_lossy(&head);
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, content_type, body) = if method == "GET" && path == "/metrics" {
        let body = render(&gauges.lock().unwrap_or_else(|e| e.into_inner()));
        ("200 OK", "text/plain; version=0.0.4; charset=utf-8", body)
    } else {
        (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found\n".into(),
        )
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> reqwest::Client {
        reqwest::Client::builder().no_proxy().build().unwrap()
    }

    #[test]
    fn labels_are_sorted_and_escaped() {
        assert_eq!(render_labels(&[]), "");
        assert_eq!(
            render_labels(&[("b", "say \"hi\"\n"), ("a", "c:\\")]),
            r#"{a="c:\\",b="say \"hi\"\n"}"#
        );
    }

    #[test]
    fn special_values_are_spelled_as_the_text_format_wants() {
        assert_eq!(render_value(f64::NAN), "NaN");
        assert_eq!(render_value(f64::INFINITY), "+Inf");
        assert_eq!(render_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(render_value(1500.0), "1500");
        assert_eq!(render_value(0.25), "0.25");
    }

    #[tokio::test]
    async fn a_scrape_sees_the_values_last_set_and_removed_series_disappear() {
        let exporter = Exporter::start().await.unwrap();
        let url = format!("http://{}/metrics", exporter.address());
        exporter.set("accord_test_load", &[("policy", "web")], 100.0);
        exporter.set("accord_test_load", &[("policy", "api")], 7.5);
        exporter.set("accord_test_load", &[("policy", "web")], 1500.0);
        let response = client().get(&url).send().await.unwrap();
        assert!(response.status().is_success());
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain; version=0.0.4")
        );
        let body = response.text().await.unwrap();
        assert_eq!(
            body,
            "# TYPE accord_test_load gauge\n\
             accord_test_load{policy=\"api\"} 7.5\n\
             accord_test_load{policy=\"web\"} 1500\n"
        );

        exporter.remove("accord_test_load", &[("policy", "api")]);
        exporter.remove("accord_test_load", &[("policy", "web")]);
        let body = client().get(&url).send().await.unwrap().text().await;
        assert_eq!(body.unwrap(), "");
    }

    #[tokio::test]
    async fn other_paths_are_not_found() {
        let exporter = Exporter::start().await.unwrap();
        let response = client()
            .get(format!("http://{}/", exporter.address()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn a_dropped_exporter_stops_listening() {
        let exporter = Exporter::start().await.unwrap();
        let url = format!("http://{}/metrics", exporter.address());
        drop(exporter);
        // Aborting the server task drops the listener; let the runtime run the abort.
        tokio::task::yield_now().await;
        let refused = tokio::time::timeout(Duration::from_secs(5), client().get(&url).send())
            .await
            .expect("a closed port answers at once");
        assert!(refused.is_err(), "{refused:?}");
    }
}
