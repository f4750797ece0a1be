//! A real headless Chromium driven over WebDriver: Debian's `chromium` and
//! `chromium-driver` (installed by `e2e/prerequisites.sh`, never downloaded), a
//! chromedriver on a free port per [`Browser`], and a fresh profile each time.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use fantoccini::{Client, ClientBuilder};
use serde_json::json;

use crate::ports::free_port;
use crate::wait::{Check, until};

/// The browser Debian's `chromium` package installs.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Its WebDriver, from `chromium-driver`.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Chromium's flags: headless, and nothing that reaches out to the network on its own
/// (without them Chromium stalls on a closed network).
const ARGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
];

/// A chromedriver and one session of a headless Chromium; both end on drop.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

/// Whether the browser tests can run here: `Ok(false)` (skip, with the reason printed)
/// only outside CI when Chromium is missing; in CI (`CI` set) a missing browser fails.
pub fn available() -> Result<bool> {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if missing.is_empty() {
        return Ok(true);
    }
    let what = format!(
        "{} missing: install Debian's chromium and chromium-driver (e2e/prerequisites.sh does)",
        missing.join(" and ")
    );
    if std::env::var_os("CI").is_some() {
        bail!("{what}; CI is set, so the browser tests fail instead of skipping");
    }
    eprintln!("SKIPPED: {what}");
    Ok(false)
}

impl Browser {
    /// Starts chromedriver on a free port and opens a session of a window `width`×`height`.
    pub async fn start(width: u32, height: u32) -> Result<Self> {
        let port = free_port()?;
        let mut driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {CHROMEDRIVER}"))?;
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let ready = until("chromedriver ready", Duration::from_secs(20), || {
            let exited = driver.try_wait();
            let http = http.clone();
            let url = url.clone();
            async move {
                if let Some(status) = exited? {
                    bail!("chromedriver exited: {status}");
                }
                Ok(match http.get(format!("{url}/status")).send().await {
                    Ok(r) if r.status().is_success() => Check::Ready(()),
                    Ok(r) => Check::NotYet(r.status().to_string()),
                    Err(e) => Check::NotYet(e.to_string()),
                })
            }
        })
        .await;
        if let Err(e) = ready {
            let _ = driver.kill();
            return Err(e);
        }
        let profile = tempfile::tempdir()?;
        let mut args: Vec<String> = ARGS.iter().map(|a| a.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        args.push(format!("--window-size={width},{height}"));
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        });
        let serde_json::Value::Object(capabilities) = capabilities else {
            unreachable!("an object")
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = match ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&url)
            .await
        {
            Ok(client) => client,
            Err(e) => {
                let _ = driver.kill();
                bail!("opening a Chromium session: {e}");
            }
        };
        Ok(Self {
            client,
            driver,
            _profile: profile,
        })
    }

    /// Ends the session and the driver.
    pub async fn close(mut self) -> Result<()> {
        let result = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        result.context("closing the browser session")
    }

    /// The text of the first element matching CSS `selector`, or `None` when there is none.
    pub async fn text(&self, selector: &str) -> Result<Option<String>> {
        let found = self
            .client
            .execute(
                "var e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
                vec![json!(selector)],
            )
            .await?;
        Ok(found.as_str().map(str::to_owned))
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Result<Vec<u8>> {
        Ok(self.client.screenshot().await?)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
