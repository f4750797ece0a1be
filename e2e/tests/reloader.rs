//! `accord-agent reload` against a real kube-apiserver and real Prometheus servers: a
//! config in the ConfigMap is written, loaded and confirmed; a burst of edits is one
//! reload; a config Prometheus refuses is rolled back and reported with Prometheus's own
//! message; a disabled lifecycle API and a stopped Prometheus are reported and recovered
//! from; a job over its sample limit shows up in the scrape-errors annotation.
//!
//! Each test has its own namespace, Prometheus and reloader on one shared management
//! API server.

use std::time::Duration;

use accord_common::distribution::{PlacedKind, PlacedRef, PromfedSpec};
use accord_common::promfed::{
    CONFIG_MAP_NAME, MemberPromfed, STATE_ERROR, STATE_SYNCED, STATE_UNAVAILABLE, SourceTarget,
    TenantSources, config_hash, empty_config, render_member,
};
use accord_e2e::SharedTestbed;
use accord_e2e::fleet::ensure_namespace;
use accord_e2e::reloader_support::{
    ReloadedPrometheus, ReloaderProcess, check, put_config, wait_status,
};
use accord_e2e::wait::{Check, until};
use anyhow::Result;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams};

static TESTBED: SharedTestbed = SharedTestbed::new(|builder| {
    builder
        .member_names(Vec::<String>::new())
        .without_mgmt_controller_manager()
        .without_crds()
});

const TIMEOUT: Duration = Duration::from_secs(60);
/// Short, so tests are quick; the burst test uses a longer one.
const DEBOUNCE: &str = "300ms";
/// The reloader's log line for each `POST /-/reload` of a new config.
const RELOAD_LOG: &str = "POST /-/reload";

/// A member config as the agent renders it: one policy federating `tenants`, each with one
/// source Service, selecting `matcher`, every `interval`.
fn member_config(policy: &str, tenants: &[&str], matcher: &str, interval: &str) -> String {
    let policy = MemberPromfed {
        placed: PlacedRef::new(PlacedKind::PrometheusFederation, "team", policy),
        spec: PromfedSpec {
            matchers: vec![matcher.to_owned()],
            scrape_interval: interval.to_owned(),
            scrape_timeout: "5s".to_owned(),
            sample_limit: 1000,
            ..PromfedSpec::default()
        },
        tenants: tenants
            .iter()
            .map(|t| TenantSources {
                namespace: (*t).to_owned(),
                targets: vec![SourceTarget {
                    namespace: (*t).to_owned(),
                    service: "prometheus".to_owned(),
                    port: 9090,
                }],
            })
            .collect(),
    };
    render_member(&[policy]).expect("renders").yaml
}

struct Setup {
    api: Api<ConfigMap>,
    prometheus: ReloadedPrometheus,
}

async fn setup(testbed: &accord_e2e::Testbed, name: &str, lifecycle: bool) -> Result<Setup> {
    ensure_namespace(testbed.mgmt(), name).await?;
    let api = Api::namespaced(testbed.mgmt().client(), name);
    let prometheus = ReloadedPrometheus::start(
        testbed,
        name,
        &testbed.dir().join(name),
        &empty_config(),
        lifecycle,
    )
    .await?;
    Ok(Setup { api, prometheus })
}

fn synced(hash: &str) -> impl Fn(&accord_common::promfed::ReloadStatus) -> bool + '_ {
    move |s| {
        s.state.as_deref() == Some(STATE_SYNCED)
            && s.reload_hash.as_deref() == Some(hash)
            && s.loaded_hash.as_deref() == Some(hash)
    }
}

#[test]
fn a_valid_config_is_written_loaded_and_confirmed_and_emptied_when_the_config_map_goes() {
    TESTBED.run(|testbed| async move {
        let Setup { api, prometheus } = setup(testbed, "reload-valid", true).await?;
        let config = member_config("web", &["team-a", "team-b"], "up", "30s");
        let hash = config_hash(&config);
        put_config(&api, CONFIG_MAP_NAME, &config).await?;
        let reloader = ReloaderProcess::start(
            testbed,
            "reload-valid",
            "reload-valid",
            CONFIG_MAP_NAME,
            &prometheus,
            &["--debounce", DEBOUNCE],
        )?;
        let status = wait_status(&api, CONFIG_MAP_NAME, "Synced", TIMEOUT, synced(&hash)).await?;
        check(
            status.message.as_deref() == Some("Prometheus loaded 2 jobs"),
            || format!("message: {:?}", status.message),
        )?;
        let on_disk = std::fs::read_to_string(&prometheus.config_file)?;
        check(on_disk == config, || format!("file on disk:\n{on_disk}"))?;
        let jobs = prometheus.loaded_jobs(testbed.http()).await?;
        check(
            jobs == ["accord/team/web/team-a", "accord/team/web/team-b"],
            || format!("Prometheus loaded {jobs:?}"),
        )?;

        // No policy left: the ConfigMap goes and Prometheus is given the empty config.
        api.delete(CONFIG_MAP_NAME, &DeleteParams::default())
            .await?;
        until("Prometheus has no jobs", TIMEOUT, || async {
            let jobs = prometheus.loaded_jobs(testbed.http()).await?;
            Ok(if jobs.is_empty() {
                Check::Ready(())
            } else {
                Check::NotYet(format!("{jobs:?}"))
            })
        })
        .await?;
        check(
            std::fs::read_to_string(&prometheus.config_file)? == empty_config(),
            || "the file is not the empty config".into(),
        )?;
        reloader.ensure_running()
    });
}

#[test]
fn a_burst_of_edits_within_the_debounce_is_one_reload() {
    TESTBED.run(|testbed| async move {
        let Setup { api, prometheus } = setup(testbed, "reload-burst", true).await?;
        let first = member_config("web", &["team-a"], "up", "30s");
        put_config(&api, CONFIG_MAP_NAME, &first).await?;
        let reloader = ReloaderProcess::start(
            testbed,
            "reload-burst",
            "reload-burst",
            CONFIG_MAP_NAME,
            &prometheus,
            &["--debounce", "2s"],
        )?;
        wait_status(
            &api,
            CONFIG_MAP_NAME,
            "first Synced",
            TIMEOUT,
            synced(&config_hash(&first)),
        )
        .await?;
        let before = reloader.log_lines(RELOAD_LOG)?;

        let edits: Vec<String> = (1..=5)
            .map(|i| member_config("web", &["team-a"], &format!("metric_{i}"), "30s"))
            .collect();
        let started = tokio::time::Instant::now();
        for edit in &edits {
            put_config(&api, CONFIG_MAP_NAME, edit).await?;
        }
        let burst = started.elapsed();
        let last = config_hash(&edits[4]);
        wait_status(
            &api,
            CONFIG_MAP_NAME,
            "last edit Synced",
            TIMEOUT,
            synced(&last),
        )
        .await?;
        let reloads = reloader.log_lines(RELOAD_LOG)? - before;
        check(burst < Duration::from_secs(2), || {
            format!("the burst took {burst:?}, longer than the debounce; the test proves nothing")
        })?;
        check(reloads == 1, || {
            format!("{reloads} reloads for a burst of 5 edits (expected 1)")
        })?;
        let loaded = prometheus.loaded_config(testbed.http()).await?;
        check(
            loaded.contains("metric_5") && !loaded.contains("metric_4"),
            || format!("Prometheus did not load the last edit:\n{loaded}"),
        )
    });
}

#[test]
fn a_config_prometheus_refuses_is_rolled_back_and_reported_with_its_message() {
    TESTBED.run(|testbed| async move {
        let Setup { api, prometheus } = setup(testbed, "reload-refused", true).await?;
        let good = member_config("web", &["team-a"], "up", "30s");
        let good_hash = config_hash(&good);
        put_config(&api, CONFIG_MAP_NAME, &good).await?;
        let reloader = ReloaderProcess::start(
            testbed,
            "reload-refused",
            "reload-refused",
            CONFIG_MAP_NAME,
            &prometheus,
            &["--debounce", DEBOUNCE],
        )?;
        wait_status(&api, CONFIG_MAP_NAME, "Synced", TIMEOUT, synced(&good_hash)).await?;

        // Passes the CRD's rule and the reloader's validation; Prometheus refuses the
        // unit order.
        let bad = member_config("other", &["team-a"], "up", "30s1m");
        let bad_hash = config_hash(&bad);
        put_config(&api, CONFIG_MAP_NAME, &bad).await?;
        let status = wait_status(&api, CONFIG_MAP_NAME, "Error", TIMEOUT, |s| {
            s.reload_hash.as_deref() == Some(bad_hash.as_str())
                && s.state.as_deref() == Some(STATE_ERROR)
        })
        .await?;
        let message = status.message.clone().unwrap_or_default();
        check(message.contains("not a valid duration string"), || {
            format!("the message is not Prometheus's: {message}")
        })?;
        check(
            status.loaded_hash.as_deref() == Some(good_hash.as_str()),
            || format!("loaded-hash moved: {status:?}"),
        )?;
        let jobs = prometheus.loaded_jobs(testbed.http()).await?;
        check(jobs == ["accord/team/web/team-a"], || {
            format!("Prometheus has {jobs:?} loaded, not the previous config")
        })?;
        let on_disk = std::fs::read_to_string(&prometheus.config_file)?;
        check(on_disk == good, || {
            format!("the last good file is not back:\n{on_disk}")
        })?;

        // The next good config is loaded as usual.
        let fixed = member_config("other", &["team-a"], "up", "1m30s");
        put_config(&api, CONFIG_MAP_NAME, &fixed).await?;
        wait_status(
            &api,
            CONFIG_MAP_NAME,
            "Synced after the fix",
            TIMEOUT,
            synced(&config_hash(&fixed)),
        )
        .await?;
        reloader.ensure_running()
    });
}

#[test]
fn a_disabled_lifecycle_api_is_reported_with_the_flag_to_set() {
    TESTBED.run(|testbed| async move {
        let Setup { api, prometheus } = setup(testbed, "reload-forbidden", false).await?;
        let config = member_config("web", &["team-a"], "up", "30s");
        let hash = config_hash(&config);
        put_config(&api, CONFIG_MAP_NAME, &config).await?;
        let _reloader = ReloaderProcess::start(
            testbed,
            "reload-forbidden",
            "reload-forbidden",
            CONFIG_MAP_NAME,
            &prometheus,
            &["--debounce", DEBOUNCE],
        )?;
        let status = wait_status(&api, CONFIG_MAP_NAME, "Error", TIMEOUT, |s| {
            s.reload_hash.as_deref() == Some(hash.as_str())
                && s.state.as_deref() == Some(STATE_ERROR)
        })
        .await?;
        let message = status.message.unwrap_or_default();
        check(
            message.contains("403") && message.contains("--web.enable-lifecycle"),
            || format!("message: {message}"),
        )?;
        check(status.loaded_hash.is_none(), || {
            "nothing was confirmed loaded".into()
        })
    });
}

#[test]
fn a_stopped_prometheus_is_unavailable_then_synced_when_it_is_back() {
    TESTBED.run(|testbed| async move {
        let Setup {
            api,
            mut prometheus,
        } = setup(testbed, "reload-stopped", true).await?;
        let first = member_config("web", &["team-a"], "up", "30s");
        put_config(&api, CONFIG_MAP_NAME, &first).await?;
        let reloader = ReloaderProcess::start(
            testbed,
            "reload-stopped",
            "reload-stopped",
            CONFIG_MAP_NAME,
            &prometheus,
            &["--debounce", DEBOUNCE],
        )?;
        wait_status(
            &api,
            CONFIG_MAP_NAME,
            "Synced",
            TIMEOUT,
            synced(&config_hash(&first)),
        )
        .await?;

        prometheus.stop(testbed);
        let second = member_config("web", &["team-a", "team-b"], "up", "30s");
        let second_hash = config_hash(&second);
        put_config(&api, CONFIG_MAP_NAME, &second).await?;
        let status = wait_status(&api, CONFIG_MAP_NAME, "Unavailable", TIMEOUT, |s| {
            s.reload_hash.as_deref() == Some(second_hash.as_str())
                && s.state.as_deref() == Some(STATE_UNAVAILABLE)
        })
        .await?;
        let message = status.message.unwrap_or_default();
        check(
            message.contains(&prometheus.url) && message.contains("unreachable"),
            || format!("message: {message}"),
        )?;

        prometheus.resume(testbed).await?;
        wait_status(
            &api,
            CONFIG_MAP_NAME,
            "Synced again",
            TIMEOUT,
            synced(&second_hash),
        )
        .await?;
        let jobs = prometheus.loaded_jobs(testbed.http()).await?;
        check(jobs.len() == 2, || format!("Prometheus loaded {jobs:?}"))?;
        reloader.ensure_running()
    });
}

#[test]
fn a_job_over_its_sample_limit_is_named_in_scrape_errors() {
    TESTBED.run(|testbed| async move {
        let Setup { api, prometheus } = setup(testbed, "reload-limit", true).await?;
        // Prometheus's own /metrics has hundreds of samples.
        let config = format!(
            "scrape_configs:
  - job_name: \"accord/team/web/over\"
    scrape_interval: \"1s\"
    scrape_timeout: \"1s\"
    sample_limit: 10
    static_configs:
      - targets: [\"{}\"]
",
            prometheus.address()
        );
        put_config(&api, CONFIG_MAP_NAME, &config).await?;
        let _reloader = ReloaderProcess::start(
            testbed,
            "reload-limit",
            "reload-limit",
            CONFIG_MAP_NAME,
            &prometheus,
            &["--debounce", DEBOUNCE, "--targets-interval", "1s"],
        )?;
        let status = wait_status(&api, CONFIG_MAP_NAME, "scrape errors", TIMEOUT, |s| {
            s.scrape_errors
                .get("accord/team/web/over")
                .is_some_and(|e| e.contains("sample limit exceeded"))
        })
        .await?;
        check(status.state.as_deref() == Some(STATE_SYNCED), || {
            format!("{status:?}")
        })
    });
}
