//! End-to-end checks of the Prometheus federation testbed itself (`accord_e2e::promfed`),
//! against one shared testbed with one member cluster: Service names resolve inside a
//! member's Prometheus servers through the member's hosts file, tenant servers serve
//! series labelled with their namespace, and a federation Prometheus keeps its address
//! across a restart.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt as _;
use std::sync::Arc;
use std::time::Duration;

use accord_common::promfed::{ReloadStatus, STATE_SYNCED, STATE_UNAVAILABLE, config_hash};
use accord_e2e::SharedTestbed;
use accord_e2e::fleet::ensure_namespace;
use accord_e2e::promfed::{
    self, CONFIG_MAP_NAME, FederationOptions, FederationPrometheus, GLOBAL_CONFIG_MAP_NAME,
    HostsFile, LEAK_JOB, Promfed, PromfedMember, ReloaderOptions, SOURCE_LABEL, TENANT_JOB,
    TenantPrometheus, TenantSpec,
};
use accord_e2e::reloader_support::{put_config, wait_status};
use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::Api;

static TESTBED: SharedTestbed = SharedTestbed::new(|builder| {
    builder
        .members(1)
        .without_crds()
        .without_mgmt_controller_manager()
});

/// Long enough for a first scrape plus Go's five-second hosts-file cache.
const SERIES_TIMEOUT: Duration = Duration::from_secs(30);
/// Long enough for the reloader's debounce, a reload and its retry backoff (at most 10 s).
const RELOAD_TIMEOUT: Duration = Duration::from_secs(30);

/// A federation job scraping `targets` (`host:port`) at `/federate` for `match`.
fn federate_job(name: &str, targets: &[String], matcher: &str) -> String {
    let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    format!(
        "  - job_name: {name}
    honor_labels: true
    metrics_path: /federate
    params:
      'match[]': ['{matcher}']
    scrape_interval: 1s
    scrape_timeout: 1s
    static_configs:
      - targets: [{}]
",
        targets.join(", ")
    )
}

fn config(jobs: &[String]) -> String {
    format!("scrape_configs:\n{}", jobs.concat())
}

#[test]
fn a_federation_prometheus_scrapes_tenants_through_their_service_names() {
    TESTBED.run(|testbed| async move {
        let member = testbed.member("member-1").context("member-1")?;
        let http = testbed.http();
        let tenants = [
            TenantSpec::new("resolve-a", "metrics"),
            TenantSpec::new("resolve-b", "metrics"),
        ];
        let promfed =
            PromfedMember::start(testbed, member, &tenants, &FederationOptions::default()).await?;

        // The Services exist as the agent will find them: labelled, port 9090, no selector.
        for spec in &tenants {
            let services: Api<Service> = Api::namespaced(member.client(), &spec.namespace);
            let service = services.get(&spec.service).await?;
            let labels = service.metadata.labels.unwrap_or_default();
            ensure!(labels.get(SOURCE_LABEL).map(String::as_str) == Some("true"));
            let spec = service.spec.context("Service without spec")?;
            ensure!(spec.selector.is_none());
            let ports: Vec<i32> = spec
                .ports
                .unwrap_or_default()
                .iter()
                .map(|p| p.port)
                .collect();
            ensure!(
                ports == [promfed::PROMETHEUS_PORT as i32],
                "ports {ports:?}"
            );
        }

        // Both name forms resolve to the right server inside the federation Prometheus.
        let a = promfed.tenant("resolve-a", "metrics").context("tenant a")?;
        let b = promfed.tenant("resolve-b", "metrics").context("tenant b")?;
        ensure!(a.target() == "metrics.resolve-a.svc:9090", "{}", a.target());
        let config = config(&[
            federate_job("short", &[a.target()], r#"{namespace="resolve-a"}"#),
            federate_job(
                "long",
                &["metrics.resolve-b.svc.cluster.local:9090".to_owned()],
                r#"{namespace="resolve-b"}"#,
            ),
        ]);
        promfed.federation.reload_with(http, &config).await?;
        let url = promfed.federation.url();
        for job in ["short", "long"] {
            promfed::wait_for_series(
                http,
                &url,
                &format!(r#"up{{job="{job}"}}"#),
                SERIES_TIMEOUT,
                |s| s.len() == 1 && s[0].1 == 1.0,
            )
            .await?;
        }
        // Federated series came from the right tenant: each job sees only its namespace,
        // and the instance label (kept by honor_labels) is that tenant's own address.
        for (tenant, namespace) in [(a, "resolve-a"), (b, "resolve-b")] {
            let query = format!(r#"up{{job="{TENANT_JOB}",namespace="{namespace}"}}"#);
            let samples =
                promfed::wait_for_series(http, &url, &query, SERIES_TIMEOUT, |s| s.len() == 1)
                    .await?;
            let instance = samples[0].0.get("instance").cloned().unwrap_or_default();
            ensure!(
                instance == format!("{}:9090", tenant.address()),
                "{namespace}: instance {instance}"
            );
        }
        let targets = promfed::active_targets(http, &url).await?;
        let urls: BTreeSet<&str> = targets.iter().map(|t| t.scrape_url.as_str()).collect();
        ensure!(
            urls.iter()
                .any(|u| u.starts_with("http://metrics.resolve-a.svc:9090/federate")),
            "targets {urls:?}"
        );
        Ok(())
    });
}

#[test]
fn a_running_prometheus_resolves_a_name_added_to_the_hosts_file_later() {
    TESTBED.run(|testbed| async move {
        let member = testbed.member("member-1").context("member-1")?;
        let http = testbed.http();
        let promfed =
            PromfedMember::start(testbed, member, &[], &FederationOptions::default()).await?;
        let url = promfed.federation.url();
        let inode = std::fs::metadata(promfed.hosts.path())?.ino();

        // The federation Prometheus already looks the name up (and fails) before the
        // tenant is published.
        let target = "metrics.late.svc:9090".to_owned();
        let job = federate_job("late", &[target], r#"{namespace="late"}"#);
        promfed
            .federation
            .reload_with(http, &config(&[job]))
            .await?;
        promfed::wait_for_series(http, &url, r#"up{job="late"}"#, SERIES_TIMEOUT, |s| {
            s.len() == 1 && s[0].1 == 0.0
        })
        .await?;

        let tenant = TenantPrometheus::start(
            testbed,
            member.name(),
            promfed.hosts.clone(),
            TenantSpec::new("late", "metrics"),
        )
        .await?;
        tenant.publish(member).await?;
        ensure!(
            std::fs::metadata(promfed.hosts.path())?.ino() == inode,
            "the hosts file was replaced, not rewritten in place"
        );
        promfed::wait_for_series(http, &url, r#"up{job="late"}"#, SERIES_TIMEOUT, |s| {
            s.len() == 1 && s[0].1 == 1.0
        })
        .await?;

        // Unpublishing removes the Service and the name again.
        tenant.unpublish(member).await?;
        let services: Api<Service> = Api::namespaced(member.client(), "late");
        ensure!(services.get_opt("metrics").await?.is_none());
        ensure!(
            promfed.hosts.entries().is_empty(),
            "{:?}",
            promfed.hosts.entries()
        );
        Ok(())
    });
}

#[test]
fn tenant_series_carry_the_tenant_namespace_and_leak_series_another() {
    TESTBED.run(|testbed| async move {
        let member = testbed.member("member-1").context("member-1")?;
        let http = testbed.http();
        let dir = testbed.dir().join("promfed-leak-test");
        let hosts = Arc::new(HostsFile::create(&dir.join("hosts"))?);
        let tenant = TenantPrometheus::start(
            testbed,
            member.name(),
            hosts,
            TenantSpec::new("series-a", "metrics").leaking("series-other"),
        )
        .await?;
        let url = tenant.url();
        for (job, namespace) in [(TENANT_JOB, "series-a"), (LEAK_JOB, "series-other")] {
            let query = format!(r#"up{{job="{job}"}}"#);
            let samples =
                promfed::wait_for_series(http, &url, &query, SERIES_TIMEOUT, |s| s.len() == 1)
                    .await?;
            let label = samples[0].0.get("namespace").map(String::as_str);
            ensure!(label == Some(namespace), "{job}: namespace {label:?}");
        }
        // Its own metrics carry the namespace too: known series beyond `up`.
        let build_info = promfed::wait_for_series(
            http,
            &url,
            r#"prometheus_build_info{namespace="series-a"}"#,
            SERIES_TIMEOUT,
            |s| s.len() == 1,
        )
        .await?;
        ensure!(build_info[0].0.get("job").map(String::as_str) == Some(TENANT_JOB));
        Ok(())
    });
}

#[test]
fn a_stopped_federation_prometheus_starts_again_on_the_same_address_and_config() {
    TESTBED.run(|testbed| async move {
        let member = testbed.member("member-1").context("member-1")?;
        let http = testbed.http();
        let hosts = Arc::new(HostsFile::create(
            &testbed.dir().join("promfed-restart-test").join("hosts"),
        )?);
        let mut federation =
            FederationPrometheus::start(testbed, member, hosts, &FederationOptions::default())
                .await?;
        let url = federation.url();
        ensure!(promfed::loaded_job_names(http, &url).await?.is_empty());
        let job = federate_job("kept", &["127.0.0.1:1".to_owned()], "up");
        federation.reload_with(http, &config(&[job])).await?;
        ensure!(promfed::loaded_job_names(http, &url).await? == ["kept"]);

        federation.stop(testbed);
        ensure!(!federation.is_running());
        ensure!(
            promfed::query(http, &url, "up").await.is_err(),
            "a stopped Prometheus still answers at {url}"
        );
        federation.resume(testbed).await?;
        ensure!(federation.url() == url);
        ensure!(promfed::loaded_job_names(http, &url).await? == ["kept"]);
        Ok(())
    });
}

#[test]
fn a_federation_prometheus_without_the_lifecycle_api_refuses_reloads_with_403() {
    TESTBED.run(|testbed| async move {
        let member = testbed.member("member-1").context("member-1")?;
        let hosts = Arc::new(HostsFile::create(
            &testbed.dir().join("promfed-403-test").join("hosts"),
        )?);
        let options = FederationOptions {
            lifecycle: false,
            ..FederationOptions::default()
        };
        let federation = FederationPrometheus::start(testbed, member, hosts, &options).await?;
        let response = testbed
            .http()
            .post(format!("{}/-/reload", federation.url()))
            .send()
            .await?;
        ensure!(
            response.status() == reqwest::StatusCode::FORBIDDEN,
            "POST /-/reload answered {}",
            response.status()
        );
        Ok(())
    });
}

#[test]
fn a_global_prometheus_federates_member_federation_prometheus_servers_by_url() {
    TESTBED.run(|testbed| async move {
        let member = testbed.member("member-1").context("member-1")?;
        let http = testbed.http();
        // Two federation setups stand in for two members (the global tier only sees URLs).
        let mut federations = Vec::new();
        for (cluster, namespace) in [("east", "global-a"), ("west", "global-b")] {
            let tenants = [TenantSpec::new(namespace, "metrics")];
            let promfed =
                PromfedMember::start(testbed, member, &tenants, &FederationOptions::default())
                    .await?;
            let matcher = format!(r#"{{namespace="{namespace}"}}"#);
            let job = federate_job(
                "tenant-federation",
                &[promfed.tenants[0].target()],
                &matcher,
            );
            promfed
                .federation
                .reload_with(http, &config(&[job]))
                .await?;
            federations.push((cluster, promfed));
        }
        let global =
            FederationPrometheus::start_global(testbed, &FederationOptions::default()).await?;
        let jobs: Vec<String> = federations
            .iter()
            .map(|(cluster, promfed)| {
                let host = promfed
                    .federation
                    .url()
                    .trim_start_matches("http://")
                    .to_owned();
                format!(
                    "{}    metric_relabel_configs:
      - {{target_label: cluster, replacement: '{cluster}', action: replace}}
",
                    federate_job(
                        &format!("global-{cluster}"),
                        &[host],
                        r#"{namespace=~"global-.+"}"#
                    )
                )
            })
            .collect();
        global.reload_with(http, &config(&jobs)).await?;

        let samples = promfed::wait_for_series(
            http,
            &global.url(),
            &format!(r#"up{{job="{TENANT_JOB}"}}"#),
            SERIES_TIMEOUT,
            |s| s.len() == 2,
        )
        .await?;
        let seen: BTreeSet<(String, String)> = samples
            .iter()
            .map(|(labels, _)| {
                let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
                (get("cluster"), get("namespace"))
            })
            .collect();
        let expected: BTreeSet<(String, String)> = [("east", "global-a"), ("west", "global-b")]
            .into_iter()
            .map(|(c, n)| (c.to_owned(), n.to_owned()))
            .collect();
        ensure!(
            seen == expected,
            "series {}",
            promfed::format_samples(&samples)
        );
        Ok(())
    });
}

/// Whether the reloader confirmed that Prometheus loaded `config`.
fn synced(config: &str) -> impl Fn(&ReloadStatus) -> bool {
    let hash = config_hash(config);
    move |status| {
        status.loaded_hash.as_deref() == Some(hash.as_str())
            && status.state.as_deref() == Some(STATE_SYNCED)
    }
}

#[test]
fn reloaders_deliver_config_maps_to_the_federation_and_global_prometheus_servers() {
    TESTBED.run(|testbed| async move {
        let member = testbed.member("member-1").context("member-1")?;
        let mgmt = testbed.mgmt();
        let http = testbed.http();
        let reloader = |namespace: &str| ReloaderOptions {
            namespace: namespace.to_owned(),
            debounce: Duration::from_millis(200),
            ..ReloaderOptions::default()
        };

        // Member tier: ConfigMap prometheus-federation in the member; global tier:
        // ConfigMap prometheus-federation-global on the management side.
        ensure_namespace(member, "promfed-reload").await?;
        ensure_namespace(mgmt, "promfed-global").await?;
        let tenants = [TenantSpec::new("reload-a", "metrics")];
        let mut all = Promfed::start(
            testbed,
            &tenants,
            &FederationOptions::with_reloader(reloader("promfed-reload")),
            &FederationOptions::with_reloader(reloader("promfed-global")),
        )
        .await?;
        let endpoints = all.federation_endpoints();
        let global_url = all.global.url();
        let promfed = all.member_mut("member-1").context("member-1's setup")?;
        let member_maps: Api<ConfigMap> = Api::namespaced(member.client(), "promfed-reload");
        let job = "accord/promfed-reload/policy/reload-a";
        let member_config = config(&[federate_job(
            job,
            &[promfed.tenants[0].target()],
            r#"{namespace="reload-a"}"#,
        )]);
        put_config(&member_maps, CONFIG_MAP_NAME, &member_config).await?;
        wait_status(
            &member_maps,
            CONFIG_MAP_NAME,
            "the member config confirmed",
            RELOAD_TIMEOUT,
            synced(&member_config),
        )
        .await?;
        let url = promfed.federation.url();
        ensure!(promfed::loaded_job_names(http, &url).await? == [job]);
        let up = format!(r#"up{{job="{job}"}}"#);
        promfed::wait_for_series(http, &url, &up, SERIES_TIMEOUT, |s| {
            s.len() == 1 && s[0].1 == 1.0
        })
        .await?;

        // The global tier federates the member's federation Prometheus by URL.
        ensure!(
            endpoints.get("member-1") == Some(&url),
            "endpoints {endpoints:?}"
        );
        let global_maps: Api<ConfigMap> = Api::namespaced(mgmt.client(), "promfed-global");
        let federation_host = url.trim_start_matches("http://").to_owned();
        let global_config = config(&[federate_job(
            "accord-global/promfed-reload/policy/member-1",
            &[federation_host],
            r#"{namespace="reload-a"}"#,
        )]);
        put_config(&global_maps, GLOBAL_CONFIG_MAP_NAME, &global_config).await?;
        wait_status(
            &global_maps,
            GLOBAL_CONFIG_MAP_NAME,
            "the global config confirmed",
            RELOAD_TIMEOUT,
            synced(&global_config),
        )
        .await?;
        let tenant_up = format!(r#"up{{job="{TENANT_JOB}",namespace="reload-a"}}"#);
        promfed::wait_for_series(http, &global_url, &tenant_up, SERIES_TIMEOUT, |s| {
            s.len() == 1
        })
        .await?;

        // The member's federation Prometheus stopped during an edit: the reloader (left
        // running) reports it unavailable, then loads the edit once it is back.
        promfed.federation.stop(testbed);
        let edited = config(&[federate_job(
            job,
            &[promfed.tenants[0].target()],
            r#"up{namespace="reload-a"}"#,
        )]);
        put_config(&member_maps, CONFIG_MAP_NAME, &edited).await?;
        wait_status(
            &member_maps,
            CONFIG_MAP_NAME,
            "the edit reported unavailable",
            RELOAD_TIMEOUT,
            |s| s.state.as_deref() == Some(STATE_UNAVAILABLE),
        )
        .await?;
        promfed.federation.resume(testbed).await?;
        wait_status(
            &member_maps,
            CONFIG_MAP_NAME,
            "the edit confirmed after the restart",
            RELOAD_TIMEOUT,
            synced(&edited),
        )
        .await?;
        promfed.federation.ensure_running(testbed)?;
        Ok(())
    });
}
