//! PrometheusFederation end to end: `kubectl apply`-style changes on the management cluster
//! → real hub → real agents → ConfigMap `prometheus-federation` in three real member
//! clusters → the reloader beside each real federation Prometheus → series from real tenant
//! Prometheus servers, federated again by a real global Prometheus. Every claim is checked
//! through Prometheus's own HTTP API as well as through the CR's status.

use std::collections::BTreeSet;
use std::time::Duration;

use accord_crds::{PlacementState, PrometheusFederation};
use accord_e2e::fleet::AGENT_NAMESPACE;
use accord_e2e::kafka_topic_scenario::{label_cluster, wait_event};
use accord_e2e::promfed::{self, FederationOptions, ReloaderOptions};
use accord_e2e::promfed_scenario::{self, Scenario, ScenarioOptions, TENANTS};
use accord_e2e::wait::{Check, until};
use accord_e2e::watch::Watched;
use accord_e2e::{SharedTestbed, Testbed};
use anyhow::{Context as _, Result, ensure};
use kube::Api;
use kube::api::DeleteParams;
use std::sync::Mutex;

static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(3));
/// The scenarios run a dozen Prometheus servers; one at a time on two cores.
static SERIAL: Mutex<()> = Mutex::new(());
const WAIT: Duration = Duration::from_secs(60);
/// A rollout's deadline and a step after it, on a loaded machine.
const STEP: Duration = Duration::from_secs(90);

/// A spec over `clusters` federating both tenants with a `match[]` as broad as any (the
/// `edit_N_=""` matcher selects every series — none has that label — and makes each edit's
/// config unique).
fn spec(
    clusters: &[String],
    edit: u32,
    interval: &str,
    extra: serde_json::Value,
) -> serde_json::Value {
    let mut spec = serde_json::json!({
        "placement": {"clusters": clusters},
        "tenantSelector": {"namespaces": TENANTS},
        "match": [format!("{{__name__=~\".+\",edit_{edit}_=\"\"}}")],
        "scrapeInterval": interval,
        "scrapeTimeout": "2s",
        "global": {"enabled": true},
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    spec
}

/// A scenario over members 0..2 with both tenants and a reloader beside each federation
/// Prometheus, and the global tier with `global`.
async fn three_members<'t>(testbed: &'t Testbed, name: &str, global: bool) -> Result<Scenario<'t>> {
    Scenario::start(
        testbed,
        ScenarioOptions {
            name,
            members: &[0, 1, 2],
            tenants: ScenarioOptions::tenant_defaults(),
            federation: FederationOptions::with_reloader(ReloaderOptions::default()),
            global,
        },
    )
    .await
}

/// What identifies edit `edit` in a rendered or loaded config.
fn marker(edit: u32) -> String {
    format!("edit_{edit}_=")
}

/// (cluster, tenant) pairs of the series `promql` returns on the Prometheus at `url`.
async fn cluster_tenants(
    testbed: &Testbed,
    url: &str,
    promql: &str,
) -> Result<BTreeSet<(String, String)>> {
    Ok(promfed::query(testbed.http(), url, promql)
        .await?
        .into_iter()
        .map(|(labels, _)| {
            (
                labels.get("cluster").cloned().unwrap_or_default(),
                labels.get("tenant").cloned().unwrap_or_default(),
            )
        })
        .collect())
}

#[test]
fn three_members_federate_both_tenants_to_the_global_tier_and_every_edit_is_confirmed() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let mut s = three_members(testbed, "pfed-main", true).await?;
        let (ns, name) = ("pfed-main", "tenants");
        let clusters = s.clusters.clone();
        let global_url = s.global.as_ref().context("global")?.url();

        // Both tenants of every member, on the global Prometheus with cluster and tenant.
        promfed_scenario::apply(
            testbed,
            ns,
            name,
            spec(&clusters, 0, "2s", serde_json::json!({})),
        )
        .await?;
        let status = s.wait_confirmed(ns, name, &marker(0), true, WAIT).await?;
        for p in &status.placements {
            ensure!(p.jobs == Some(2), "two jobs in {}: {p:?}", p.cluster);
        }
        let expected: BTreeSet<(String, String)> = clusters
            .iter()
            .flat_map(|c| TENANTS.iter().map(move |t| (c.clone(), (*t).to_owned())))
            .collect();
        until(
            "every member's tenants on the global Prometheus",
            WAIT,
            || async {
                let got = cluster_tenants(testbed, &global_url, "up{job=\"tenant\"}").await?;
                Ok(if got == expected {
                    Check::Ready(())
                } else {
                    Check::NotYet(format!("{got:?}"))
                })
            },
        )
        .await?;
        let ready = testbed.mgmt().client();
        let pfed = Api::<PrometheusFederation>::namespaced(ready, ns)
            .get(name)
            .await?;
        let conditions = pfed.status.unwrap_or_default().conditions;
        ensure!(
            accord_crds::conditions::is_true(&conditions, "Ready"),
            "Ready: {conditions:?}"
        );
        // `kubectl describe` tells it: the generation applied, in every member.
        let applied = wait_event(testbed, ns, name, "Normal", "Applied", WAIT).await?;
        ensure!(applied.contains("applied in 3 clusters"), "{applied}");

        // Isolation: team-a's Prometheus also serves series labelled namespace team-b
        // (job "leak"); a match[] as broad as {__name__=~".+"} still brings only team-a's.
        let tenant_a = s.members[0]
            .tenant(TENANTS[0], "prom")
            .context("tenant a")?
            .url();
        ensure!(
            !promfed::query(testbed.http(), &tenant_a, "up{job=\"leak\"}")
                .await?
                .is_empty(),
            "the leaking source serves the other namespace's series"
        );
        for url in s
            .members
            .iter()
            .map(|m| m.federation.url())
            .chain([global_url.clone()])
        {
            let leaked = promfed::query(testbed.http(), &url, "{job=\"leak\"}").await?;
            ensure!(
                leaked.is_empty(),
                "{url} federated another namespace's series: {leaked:?}"
            );
            let wrong = promfed::query(
                testbed.http(),
                &url,
                "{tenant=\"team-a\",namespace!=\"team-a\"}",
            )
            .await?;
            ensure!(wrong.is_empty(), "{url}: team-a's job returned {wrong:?}");
        }

        // An edit of match[] is loaded by every member and the global tier, and confirmed.
        promfed_scenario::apply(
            testbed,
            ns,
            name,
            spec(&clusters, 1, "2s", serde_json::json!({})),
        )
        .await?;
        let status = s.wait_confirmed(ns, name, &marker(1), true, WAIT).await?;
        // What the waiting said is gone once confirmed (a status field that becomes empty
        // is removed, not left at its old value).
        let global = status.global.context("status.global")?;
        ensure!(global.message.is_none(), "stale message: {global:?}");
        ensure!(
            status.placements.iter().all(|p| p.message.is_none()),
            "{:?}",
            status.placements
        );
        let mut loaded_hashes = Vec::new();
        for m in &s.members {
            let loaded = promfed::loaded_config(testbed.http(), &m.federation.url()).await?;
            ensure!(loaded.contains(&marker(1)), "{} loaded {loaded}", m.cluster);
            loaded_hashes.push(accord_common::promfed::config_hash(&loaded));
        }

        // Valid for the API server, refused by Prometheus ("1s1s"): Error with Prometheus's
        // message, the previous config still loaded, federation still flowing.
        promfed_scenario::apply(
            testbed,
            ns,
            name,
            spec(&clusters, 2, "1s1s", serde_json::json!({})),
        )
        .await?;
        promfed_scenario::wait_placements(
            testbed,
            ns,
            name,
            &clusters,
            PlacementState::Error,
            "not a valid duration string",
            WAIT,
        )
        .await?;
        for (m, before) in s.members.iter().zip(&loaded_hashes) {
            // The very config loaded before, as Prometheus itself reports it.
            let loaded = promfed::loaded_config(testbed.http(), &m.federation.url()).await?;
            ensure!(
                accord_common::promfed::config_hash(&loaded) == *before
                    && !loaded.contains(&marker(2)),
                "{} loaded {loaded}",
                m.cluster
            );
            let url = m.federation.url();
            let newest = |url: String| async move {
                let v = promfed::query(
                    testbed.http(),
                    &url,
                    "max(timestamp(up{tenant=\"team-a\"}))",
                )
                .await?;
                Ok::<f64, anyhow::Error>(v.first().map_or(0.0, |s| s.1))
            };
            let before = newest(url.clone()).await?;
            until(
                &format!("{}: federation still flowing", m.cluster),
                WAIT,
                || async {
                    let now = newest(url.clone()).await?;
                    Ok(if now > before {
                        Check::Ready(())
                    } else {
                        Check::NotYet(format!("{now} <= {before}"))
                    })
                },
            )
            .await?;
        }
        promfed_scenario::apply(
            testbed,
            ns,
            name,
            spec(&clusters, 3, "2s", serde_json::json!({})),
        )
        .await?;
        s.wait_confirmed(ns, name, &marker(3), true, WAIT).await?;

        // Prometheus stopped during an edit: Unavailable, then Synced once it is back.
        s.members[0].federation.stop(testbed);
        promfed_scenario::apply(
            testbed,
            ns,
            name,
            spec(&clusters, 4, "2s", serde_json::json!({})),
        )
        .await?;
        promfed_scenario::wait_placements(
            testbed,
            ns,
            name,
            &clusters[..1],
            PlacementState::Unavailable,
            "unreachable",
            WAIT,
        )
        .await?;
        s.members[0].federation.resume(testbed).await?;
        s.wait_confirmed(ns, name, &marker(4), true, WAIT).await?;

        // A source over sampleLimit: the scrape failure in the placement's message.
        promfed_scenario::apply(
            testbed,
            ns,
            name,
            spec(&clusters, 5, "2s", serde_json::json!({"sampleLimit": 10})),
        )
        .await?;
        s.wait_confirmed(ns, name, &marker(5), true, WAIT).await?;
        promfed_scenario::wait_placements(
            testbed,
            ns,
            name,
            &clusters,
            PlacementState::Synced,
            "sample limit exceeded",
            WAIT,
        )
        .await?;

        // Deleting the policy removes its jobs from every member and the global tier, and the
        // ConfigMaps with the last policy.
        Api::<PrometheusFederation>::namespaced(testbed.mgmt().client(), ns)
            .delete(name, &DeleteParams::default())
            .await?;
        for (i, m) in s.members.iter().enumerate() {
            let cluster = s.member_cluster(i)?;
            let url = m.federation.url();
            until(
                &format!("{}: ConfigMap gone and no job loaded", m.cluster),
                WAIT,
                || async {
                    let data = promfed_scenario::config_map_data(
                        cluster,
                        accord_e2e::fleet::AGENT_NAMESPACE,
                        accord_common::promfed::CONFIG_MAP_NAME,
                    )
                    .await?;
                    let jobs = promfed::loaded_job_names(testbed.http(), &url).await?;
                    Ok(if data.is_none() && jobs.is_empty() {
                        Check::Ready(())
                    } else {
                        Check::NotYet(format!("ConfigMap {}, jobs {jobs:?}", data.is_some()))
                    })
                },
            )
            .await?;
        }
        until("global tier without jobs", WAIT, || async {
            let data = promfed_scenario::config_map_data(
                testbed.mgmt(),
                &s.global_namespace,
                accord_common::promfed::GLOBAL_CONFIG_MAP_NAME,
            )
            .await?;
            let jobs = promfed::loaded_job_names(testbed.http(), &global_url).await?;
            Ok(if data.is_none() && jobs.is_empty() {
                Check::Ready(())
            } else {
                Check::NotYet(format!("ConfigMap {}, jobs {jobs:?}", data.is_some()))
            })
        })
        .await?;
        Ok(())
    });
}

#[test]
fn a_prometheus_without_the_lifecycle_api_is_reported_with_the_flag_to_set() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let s = Scenario::start(
            testbed,
            ScenarioOptions {
                name: "pfed-lifecycle",
                members: &[1],
                tenants: ScenarioOptions::tenant_defaults(),
                federation: FederationOptions {
                    lifecycle: false,
                    ..FederationOptions::with_reloader(ReloaderOptions::default())
                },
                global: false,
            },
        )
        .await?;
        let (ns, name) = ("pfed-lifecycle", "tenants");
        let mut spec = spec(&s.clusters, 0, "2s", serde_json::json!({}));
        spec["global"]["enabled"] = serde_json::json!(false);
        promfed_scenario::apply(testbed, ns, name, spec).await?;
        promfed_scenario::wait_placements(
            testbed,
            ns,
            name,
            &s.clusters,
            PlacementState::Error,
            "--web.enable-lifecycle",
            WAIT,
        )
        .await?;
        Ok(())
    });
}

/// The edit `edit_N_` a federation ConfigMap's config carries (the `match[]` of [`spec`]).
fn edit_of(config_map: &k8s_openapi::api::core::v1::ConfigMap) -> Option<String> {
    let config = config_map
        .data
        .as_ref()?
        .get(accord_common::promfed::CONFIG_KEY)?;
    let rest = &config[config.find("edit_")? + "edit_".len()..];
    Some(rest.chars().take_while(char::is_ascii_digit).collect())
}

/// A policy confirmed in three members (delivered at once) takes `spec.rollout`
/// `ProgressivePerGroup` by a `ring` label with an edit every member's Prometheus refuses:
/// only ring 0's ConfigMap ever carries it (watches on every member), at the deadline it
/// goes back to the config before, confirmed by Prometheus, and `RolledBack` names ring 0.
#[test]
fn an_edit_prometheus_refuses_stops_at_the_first_ring_and_comes_back() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let s = three_members(testbed, "pfed-ring", false).await?;
        let (ns, name) = ("pfed-ring", "tenants");
        let ring = "ring-pfed-ring";
        for (i, cluster) in s.clusters.iter().enumerate() {
            label_cluster(testbed, cluster, ring, &i.to_string()).await?;
        }
        let by_ring = |rollout: serde_json::Value| {
            serde_json::json!({
                "placement": {"clusterSelector": {"matchExpressions": [
                    {"key": ring, "operator": "Exists"}]}},
                "global": {"enabled": false},
                "rollout": rollout,
            })
        };
        // Delivered at once to every ring the hub selected: it has seen every ring label.
        promfed_scenario::apply(
            testbed,
            ns,
            name,
            spec(&s.clusters, 1, "2s", by_ring(serde_json::json!({}))),
        )
        .await?;
        s.wait_confirmed(ns, name, &marker(1), false, WAIT).await?;

        let watches: Vec<Watched> = (0..3)
            .map(|i| {
                let cluster = s.member_cluster(i)?;
                Ok(Watched::start(
                    Api::namespaced(cluster.client(), AGENT_NAMESPACE),
                    accord_common::promfed::CONFIG_MAP_NAME,
                    edit_of,
                ))
            })
            .collect::<Result<_>>()?;
        let progressive = serde_json::json!({
            "strategy": "ProgressivePerGroup", "groups": {"byLabel": ring},
            "minSuccessTime": "2s", "progressDeadline": "20s",
        });
        let edited = std::time::Instant::now();
        promfed_scenario::apply(
            testbed,
            ns,
            name,
            spec(&s.clusters, 2, "1s1s", by_ring(progressive)),
        )
        .await?;
        let status = until("the rollout RolledBack", STEP, || async {
            let status = promfed_scenario::status(testbed, ns, name)
                .await?
                .unwrap_or_default();
            Ok(match &status.rollout {
                Some(r) if r.phase == "RolledBack" => Check::Ready(status),
                other => Check::NotYet(format!("{other:?}")),
            })
        })
        .await?;
        let ring0 = &s.clusters[0];
        let failed: Vec<(&str, &str)> = status
            .rollout
            .iter()
            .flat_map(|r| &r.failed_clusters)
            .map(|f| (f.cluster.as_str(), f.reason.as_str()))
            .collect();
        ensure!(
            failed.len() == 1
                && failed[0].0 == ring0.as_str()
                && failed[0].1.contains("not a valid duration string"),
            "{failed:?}"
        );
        let rolled_back = accord_crds::conditions::find(&status.conditions, "RolledBack")
            .context("the RolledBack condition")?;
        ensure!(
            rolled_back.status == "True" && rolled_back.message.contains(&format!("{ring0} (")),
            "{rolled_back:?}"
        );
        // Ring 0 is back on the config before, loaded and confirmed by its Prometheus.
        s.wait_confirmed(ns, name, &marker(1), false, STEP).await?;
        eprintln!(
            "promfed rollout: edit → ring 0 confirmed on the config before in {:.1} s (deadline 20 s)",
            edited.elapsed().as_secs_f64()
        );
        wait_event(testbed, ns, name, "Warning", "RolledBack", WAIT).await?;
        let one = Some("1".to_owned());
        let two = Some("2".to_owned());
        let seen = watches[0].values();
        ensure!(
            seen.contains(&two) && seen.last() == Some(&one),
            "ring 0's ConfigMap went {seen:?}"
        );
        for (i, watch) in watches.iter().enumerate().skip(1) {
            let seen = watch.values();
            ensure!(
                !seen.contains(&two),
                "ring {i} carried the refused edit: {seen:?}"
            );
        }
        Ok(())
    });
}
