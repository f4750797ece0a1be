//! The fleet console in a real headless Chromium (Debian's `chromium` and `chromium-driver`
//! over WebDriver), against a real hub serving it (`--console-addr`) with three real member
//! agents, and tokens of real ServiceAccounts of the management API server (RBAC on).
//!
//! One hub, its agents and its objects are shared by the tests of this binary; the tests
//! run one at a time (one browser at a time on a small machine).
//!
//! `ACCORD_UPDATE_SCREENSHOTS=1 cargo test -p accord-e2e --test console` also writes the
//! screenshots under `docs/console/` (the fleet, an object, a rollout in progress).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use accord_e2e::browser::{self, Browser};
use accord_e2e::console::{
    fetch, grant_cluster_wide, grant_in_namespace, reader_rules, service_account_token,
};
use accord_e2e::fleet::{Fleet, ensure_namespace, patch_managed_cluster};
use accord_e2e::ports::free_port;
use accord_e2e::resource_scenario::resource_object;
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use anyhow::{Context as _, Result, ensure};
use fantoccini::Locator;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(3));
static SETUP: OnceCell<Setup> = OnceCell::const_new();
static SERIAL: Mutex<()> = Mutex::new(());

/// Generous for a loaded machine.
const STEP: Duration = Duration::from_secs(60);
/// The acceptance bound of a live update: an edit shows without a reload within it.
const LIVE: Duration = Duration::from_secs(2);
const FM: &str = "accord-e2e-tests";
/// The namespace the limited user may read FederatedResources in, and the one it may not.
const OPEN: &str = "console-open";
const CLOSED: &str = "console-closed";
/// A name that must never reach the limited user.
const SECRET_NAME: &str = "hidden-payroll";
/// The clusters.
const CLUSTERS: [&str; 3] = ["con-0", "con-1", "con-2"];
/// The rollout groups' label.
const RING: &str = "console-ring";

struct Setup {
    /// The hub and its agents, kept running.
    _fleet: Fleet<'static>,
    /// The console's base URL.
    console: String,
    /// A token that reads everything the console shows.
    reader: String,
    /// A token that may list the clusters and read FederatedResources in [`OPEN`] only.
    limited: String,
}

async fn setup(testbed: &'static Testbed) -> Result<&'static Setup> {
    SETUP
        .get_or_try_init(|| async {
            let console = format!("127.0.0.1:{}", free_port()?);
            let args = [
                "--console-addr",
                console.as_str(),
                "--console-trace-url",
                "http://127.0.0.1:16686/trace/{traceID}",
            ];
            let agents: Vec<(&str, usize)> =
                CLUSTERS.iter().enumerate().map(|(i, c)| (*c, i)).collect();
            let fleet = Fleet::start(testbed, "hub-console", "/t-console/", &args, &agents).await?;
            for (i, c) in CLUSTERS.iter().enumerate() {
                let ring = if i == 0 { "canary" } else { "rest" };
                patch_managed_cluster(testbed, c, json!({"metadata": {"labels": {RING: ring}}}))
                    .await?;
            }
            let client = testbed.mgmt().client();
            for ns in ["console-users", OPEN, CLOSED] {
                ensure_namespace(testbed.mgmt(), ns).await?;
            }
            grant_cluster_wide(&client, "console-e2e-reader", "console-users", "reader", reader_rules())
                .await?;
            grant_cluster_wide(
                &client,
                "console-e2e-fleet",
                "console-users",
                "limited",
                json!([{"apiGroups": ["accord.io"], "resources": ["managedclusters"], "verbs": ["get", "list"]}]),
            )
            .await?;
            grant_in_namespace(&client, OPEN, "console-e2e-open", "console-users", "limited", reader_rules())
                .await?;
            let reader = service_account_token(&client, "console-users", "reader").await?;
            let limited = service_account_token(&client, "console-users", "limited").await?;
            let names: Vec<String> = CLUSTERS.iter().map(|c| c.to_string()).collect();
            apply(testbed, OPEN, &resource_object(OPEN, "web", &names, "v1")).await?;
            apply(testbed, CLOSED, &resource_object(CLOSED, SECRET_NAME, &names, "v1")).await?;
            Ok::<_, anyhow::Error>(Setup {
                _fleet: fleet,
                console: format!("http://{console}"),
                reader,
                limited,
            })
        })
        .await
}

async fn apply(testbed: &Testbed, ns: &str, object: &Value) -> Result<()> {
    let api: Api<accord_crds::FederatedResource> = Api::namespaced(testbed.mgmt().client(), ns);
    let name = object["metadata"]["name"].as_str().context("name")?;
    api.patch(name, &PatchParams::apply(FM).force(), &Patch::Apply(object))
        .await?;
    Ok(())
}

/// Runs `test` with the shared setup and, when the browser tests can run here, a browser
/// signed in with `token`.
fn with_browser<F, Fut>(token: fn(&Setup) -> &str, test: F)
where
    F: FnOnce(&'static Testbed, &'static Setup, Browser) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match browser::available() {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => panic!("{e:#}"),
    }
    TESTBED.run(|testbed| async move {
        let setup = setup(testbed).await?;
        let browser = Browser::start(1280, 860).await?;
        sign_in(&browser, &setup.console, token(setup)).await?;
        test(testbed, setup, browser).await
    });
}

/// Signs in through the console's form, as a person would.
async fn sign_in(browser: &Browser, console: &str, token: &str) -> Result<()> {
    let c = &browser.client;
    c.goto(&format!("{console}/login")).await?;
    let field = c.find(Locator::Css("#token")).await?;
    field.send_keys(token).await?;
    c.find(Locator::Css("form.login button[type=submit]"))
        .await?
        .click()
        .await?;
    until("signed in", STEP, || async {
        Ok(match browser.text("form.who strong").await? {
            Some(user) => Check::Ready(user),
            None => Check::NotYet(c.current_url().await?.to_string()),
        })
    })
    .await?;
    Ok(())
}

/// Waits until the page's text at `selector` passes `check`.
async fn wait_text(
    browser: &Browser,
    selector: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&str) -> bool,
) -> Result<String> {
    until(what, timeout, || async {
        Ok(match browser.text(selector).await? {
            Some(t) if check(&t) => Check::Ready(t),
            other => Check::NotYet(format!("{selector}: {other:?}")),
        })
    })
    .await
}

/// Writes `png` as `docs/console/<name>.png` when asked to (ACCORD_UPDATE_SCREENSHOTS=1).
fn keep_screenshot(name: &str, png: &[u8]) -> Result<()> {
    ensure!(
        png.starts_with(b"\x89PNG"),
        "the screenshot of {name} is not a PNG"
    );
    if std::env::var("ACCORD_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/console");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("{name}.png")), png)?;
        println!("wrote docs/console/{name}.png");
    }
    Ok(())
}

#[test]
fn without_a_token_every_page_answers_401_with_the_sign_in_form() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    TESTBED.run(|testbed| async move {
        let setup = setup(testbed).await?;
        let http = testbed.http();
        for path in [
            "/",
            "/kinds/federatedresources",
            "/kinds/federatedresources/console-open/web",
            "/live?page=/",
        ] {
            let (code, body) = fetch(http, &format!("{}{path}", setup.console), None).await?;
            ensure!(code == 401, "{path} without a token: {code}");
            if !path.starts_with("/live") {
                ensure!(
                    body.contains(r#"action="/login""#),
                    "{path}: no sign-in form: {body}"
                );
            }
            ensure!(
                !body.contains(SECRET_NAME) && !body.contains("web</a>"),
                "{path} leaks: {body}"
            );
            let (code, _) = fetch(
                http,
                &format!("{}{path}", setup.console),
                Some("not-a-token"),
            )
            .await?;
            ensure!(code == 401, "{path} with a bad token: {code}");
        }
        Ok(())
    });
}

#[test]
fn the_fleet_page_lists_every_cluster_with_its_agent() {
    with_browser(
        |s| &s.reader,
        |_, setup, browser| async move {
            browser.client.goto(&format!("{}/", setup.console)).await?;
            for c in CLUSTERS {
                let row = format!(r#"#clusters tr[data-cluster="{c}"]"#);
                let text = wait_text(
                    &browser,
                    &row,
                    &format!("{c} available on the fleet page"),
                    STEP,
                    |t| t.contains("Available") && t.contains("ago"),
                )
                .await?;
                println!(
                    "fleet row: {}",
                    text.split_whitespace().collect::<Vec<_>>().join(" ")
                );
            }
            keep_screenshot("fleet", &browser.screenshot().await?)?;
            browser.close().await
        },
    );
}

#[test]
fn an_objects_page_shows_each_cluster_and_follows_an_edit_live_without_a_reload() {
    with_browser(
        |s| &s.reader,
        |testbed, setup, browser| async move {
            let c = &browser.client;
            c.goto(&format!(
                "{}/kinds/federatedresources/{OPEN}/web",
                setup.console
            ))
            .await?;
            for cluster in CLUSTERS {
                wait_text(
                    &browser,
                    &format!(r#"#placements tr[data-cluster="{cluster}"] .state"#),
                    &format!("{cluster} Synced on the object's page"),
                    STEP,
                    |t| t == "Synced",
                )
                .await?;
            }
            wait_text(&browser, "#live-status", "live updates on", STEP, |t| {
                t.starts_with("Live updates: on")
            })
            .await?;
            let before = browser.text("#generation").await?.context("#generation")?;
            // A mark in the page's own JavaScript world: a reload or navigation would drop it.
            c.execute("window.accordNoReload = 'kept';", vec![]).await?;
            let names: Vec<String> = CLUSTERS.iter().map(|c| c.to_string()).collect();
            let edited = Instant::now();
            apply(testbed, OPEN, &resource_object(OPEN, "web", &names, "v2")).await?;
            let after = wait_text(
                &browser,
                "#generation",
                "the edit's generation shown live",
                LIVE,
                |t| t != before,
            )
            .await?;
            let shown = edited.elapsed();
            let kept = c
                .execute("return window.accordNoReload || null;", vec![])
                .await?;
            ensure!(kept == json!("kept"), "the page was reloaded: {kept}");
            println!(
                "console live update: generation {before} -> {after} shown {} ms after the edit, without a reload",
                shown.as_millis()
            );
            wait_text(
                &browser,
                "#observed-generation",
                "the edit observed",
                STEP,
                |t| t == after,
            )
            .await?;
            for cluster in CLUSTERS {
                wait_text(
                    &browser,
                    &format!(r#"#placements tr[data-cluster="{cluster}"] .state"#),
                    &format!("{cluster} Synced again"),
                    STEP,
                    |t| t == "Synced",
                )
                .await?;
            }
            println!(
                "console live update: the edit Synced in every cluster {} ms after it",
                edited.elapsed().as_millis()
            );
            let kept = c
                .execute("return window.accordNoReload || null;", vec![])
                .await?;
            ensure!(kept == json!("kept"), "the page was reloaded: {kept}");
            keep_screenshot("object", &browser.screenshot().await?)?;
            browser.close().await
        },
    );
}

#[test]
fn a_user_who_may_not_read_a_namespace_sees_nothing_of_its_objects() {
    with_browser(
        |s| &s.limited,
        |testbed, setup, browser| async move {
            let c = &browser.client;
            c.goto(&format!("{}/kinds/federatedresources", setup.console))
                .await?;
            wait_text(
                &browser,
                "#objects",
                "web listed for the limited user",
                STEP,
                |t| t.contains("web"),
            )
            .await?;
            let page = c.source().await?;
            ensure!(
                !page.contains(SECRET_NAME) && !page.contains(CLOSED),
                "the list leaks {CLOSED}: {page}"
            );
            // The same page through HTTP, and the object itself: 403, whether it exists or not.
            let http = testbed.http();
            let (code, body) = fetch(
                http,
                &format!("{}/kinds/federatedresources", setup.console),
                Some(&setup.limited),
            )
            .await?;
            ensure!(
                code == 200 && body.contains("web</a>") && !body.contains(SECRET_NAME),
                "{code}: {body}"
            );
            for name in [SECRET_NAME, "does-not-exist"] {
                let url = format!("{}/kinds/federatedresources/{CLOSED}/{name}", setup.console);
                let (code, body) = fetch(http, &url, Some(&setup.limited)).await?;
                ensure!(code == 403, "{url}: {code}");
                ensure!(!body.contains("placements"), "{url} leaks: {body}");
                c.goto(&url).await?;
                wait_text(&browser, "main h1", "Forbidden shown", STEP, |t| {
                    t == "Forbidden"
                })
                .await?;
            }
            // The reader sees both namespaces.
            let (code, body) = fetch(
                http,
                &format!("{}/kinds/federatedresources", setup.console),
                Some(&setup.reader),
            )
            .await?;
            ensure!(
                code == 200 && body.contains(SECRET_NAME) && body.contains("web</a>"),
                "{code}: {body}"
            );
            let (code, _) = fetch(
                http,
                &format!(
                    "{}/kinds/federatedresources/{CLOSED}/{SECRET_NAME}",
                    setup.console
                ),
                Some(&setup.reader),
            )
            .await?;
            ensure!(code == 200, "the reader's {CLOSED}/{SECRET_NAME}: {code}");
            browser.close().await
        },
    );
}

#[test]
fn a_rollout_in_progress_shows_its_groups() {
    with_browser(
        |s| &s.reader,
        |testbed, setup, browser| async move {
            let name = "rollout-demo";
            let mut object = resource_object(OPEN, name, &[], "v1");
            object["spec"]["placement"] = json!({"clusterSelector": {"matchExpressions": [{"key": RING, "operator": "Exists"}]}});
            object["spec"]["rollout"] = json!({
                "strategy": "ProgressivePerGroup",
                "groups": {"ordered": [
                    {"name": "canary", "clusterSelector": {"matchLabels": {RING: "canary"}}},
                    {"name": "rest", "clusterSelector": {"matchLabels": {RING: "rest"}}},
                ]},
                "minSuccessTime": "10m",
                "progressDeadline": "20m",
            });
            // Paused until the hub selects every cluster (it may see the labels one by one).
            let mut paused = object.clone();
            paused["spec"]["rollout"]["paused"] = json!(true);
            apply(testbed, OPEN, &paused).await?;
            let api: Api<accord_crds::FederatedResource> =
                Api::namespaced(testbed.mgmt().client(), OPEN);
            until("every cluster selected", STEP, || async {
                let status = api.get(name).await?.status.unwrap_or_default();
                Ok(if status.clusters == Some(CLUSTERS.len() as i32) {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("{:?}", status.clusters))
                })
            })
            .await?;
            apply(testbed, OPEN, &object).await?;
            browser
                .client
                .goto(&format!(
                    "{}/kinds/federatedresources/{OPEN}/{name}",
                    setup.console
                ))
                .await?;
            // The canary soaks for ten minutes: the rollout stays at its first group, its
            // cluster updating, the others waiting.
            wait_text(
                &browser,
                "#rollout",
                "the canary group updating and the rest waiting",
                STEP,
                |t| {
                    t.contains("current group canary")
                        && t.contains("canary Progressing")
                        && t.contains("rest Waiting")
                        && t.contains("updating 1")
                        && t.contains("waiting 2")
                },
            )
            .await?;
            keep_screenshot("rollout", &browser.screenshot().await?)?;
            browser.close().await
        },
    );
}
