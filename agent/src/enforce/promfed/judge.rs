//! Pure decisions about the federation config of one ConfigMap namespace: which tenant
//! namespaces and sources each PrometheusFederation federates, the whole config rendered
//! from every PrometheusFederation assigned there, whether the ConfigMap holds it, and what
//! Prometheus (through the reloader's annotations) said about it. No API calls happen here.
//!
//! Every PrometheusFederation whose ConfigMap lives in the same namespace shares one config
//! (one federation Prometheus per namespace). A PrometheusFederation that cannot be
//! rendered — a `match[]` selector that cannot be narrowed to its tenants, say — is left
//! out of the shared config and reported as `Error`; the others are rendered without it.

use std::collections::{BTreeMap, BTreeSet};

use accord_common::distribution::PlacedRef;
use accord_common::distribution::{Observed, PlacementState, PromfedObserved, PromfedSpec};
use accord_common::promfed::{
    self, CONFIG_KEY, MemberPromfed, ReloadStatus, Rendered, SOURCE_LABEL, SourceTarget,
    TenantSources,
};
use accord_common::runtime::error_chain;
use accord_crds::OWNED_BY_LABEL;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};

use crate::enforce::ApplyError;
use crate::report::Report;

/// `app.kubernetes.io/managed-by` value on the ConfigMaps the agent writes.
pub const MANAGED_BY: &str = "accord-agent";
/// `accord.io/owned-by` value on the ConfigMaps the agent writes.
pub const OWNED_BY: &str = "prometheusfederation";
/// The standard label naming what manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Service port names taken before the first port, in this order.
const PREFERRED_PORTS: [&str; 4] = ["web", "http-web", "http", "prometheus"];

/// The tenant namespaces `spec` selects, sorted; `namespaces` is every Namespace of the
/// cluster (needed only for a label selector).
pub fn tenants(spec: &PromfedSpec, namespaces: &[&Namespace]) -> Result<Vec<String>, String> {
    if !spec.tenant_namespaces.is_empty() {
        let set: BTreeSet<String> = spec.tenant_namespaces.iter().cloned().collect();
        return Ok(set.into_iter().collect());
    }
    if spec.tenant_labels.is_empty() {
        return Err("the assignment selects no tenant namespaces".to_owned());
    }
    let mut selected: Vec<String> = namespaces
        .iter()
        .filter(|ns| {
            let labels = ns.metadata.labels.as_ref();
            spec.tenant_labels
                .iter()
                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        })
        .filter_map(|ns| ns.metadata.name.clone())
        .collect();
    selected.sort();
    Ok(selected)
}

/// Whether `service` is a federation source (labelled `accord.io/federation-source: "true"`).
pub fn is_source(service: &Service) -> bool {
    service
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SOURCE_LABEL))
        .is_some_and(|v| v == "true")
}

/// The port of `service` that serves `/federate`: the first named like a Prometheus web
/// port, else the first port.
pub fn source_port(service: &Service) -> Option<i32> {
    let ports = service.spec.as_ref()?.ports.as_ref()?;
    PREFERRED_PORTS
        .iter()
        .find_map(|want| {
            ports
                .iter()
                .find(|p| p.name.as_deref() == Some(*want))
                .map(|p| p.port)
        })
        .or_else(|| ports.first().map(|p| p.port))
}

/// The federation targets in tenant namespace `tenant`, sorted by Service name.
pub fn sources_in(tenant: &str, services: &[&Service]) -> Vec<SourceTarget> {
    let mut targets: Vec<SourceTarget> = services
        .iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some(tenant) && is_source(s))
        .filter_map(|s| {
            Some(SourceTarget {
                namespace: tenant.to_owned(),
                service: s.metadata.name.clone()?,
                port: source_port(s)?,
            })
        })
        .collect();
    targets.sort_by(|a, b| a.service.cmp(&b.service));
    targets
}

/// What one PrometheusFederation contributes to its namespace's config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromfedJobs {
    /// Jobs (tenants with at least one source) rendered.
    pub jobs: usize,
    /// Job names, to find this PrometheusFederation's scrape errors.
    pub job_names: Vec<String>,
    /// Tenants without any source, said in the report.
    pub tenants_without_sources: Vec<String>,
}

/// The config of one ConfigMap namespace, rendered from every PrometheusFederation assigned there.
#[derive(Clone, Debug)]
pub struct GroupRender {
    /// The whole config.
    pub rendered: Rendered,
    /// Each PrometheusFederation's part, or why it could not be rendered.
    pub promfeds: BTreeMap<PlacedRef, Result<PromfedJobs, String>>,
}

/// Renders the whole config of one ConfigMap namespace from `promfeds`, given the
/// cluster's Namespaces and federation-source Services. A PrometheusFederation that cannot
/// be rendered is left out.
pub fn render_group(
    promfeds: &BTreeMap<PlacedRef, PromfedSpec>,
    namespaces: &[&Namespace],
    services: &[&Service],
) -> GroupRender {
    let mut parts = BTreeMap::new();
    let mut good = Vec::new();
    for (placed, spec) in promfeds {
        let member = tenants(spec, namespaces).map(|tenants| MemberPromfed {
            placed: placed.clone(),
            spec: spec.clone(),
            tenants: tenants
                .into_iter()
                .map(|namespace| TenantSources {
                    targets: sources_in(&namespace, services),
                    namespace,
                })
                .collect(),
        });
        let part = member.and_then(|member| {
            // The whole chain: the parser's reason is the source of a selector error.
            promfed::render_member(std::slice::from_ref(&member)).map_err(|e| error_chain(&e))?;
            let with_sources: Vec<&TenantSources> = member
                .tenants
                .iter()
                .filter(|t| !t.targets.is_empty())
                .collect();
            let jobs = PromfedJobs {
                jobs: with_sources.len(),
                job_names: with_sources
                    .iter()
                    .map(|t| promfed::member_job_name(placed, &t.namespace))
                    .collect(),
                tenants_without_sources: member
                    .tenants
                    .iter()
                    .filter(|t| t.targets.is_empty())
                    .map(|t| t.namespace.clone())
                    .collect(),
            };
            good.push(member);
            Ok(jobs)
        });
        parts.insert(placed.clone(), part);
    }
    let rendered = match promfed::render_member(&good) {
        Ok(rendered) => rendered,
        Err(e) => {
            // Each rendered alone; together they should too. Say so rather than panic.
            for part in parts.values_mut() {
                if part.is_ok() {
                    *part = Err(format!("rendering the shared config: {}", error_chain(&e)));
                }
            }
            empty_render()
        }
    };
    GroupRender {
        rendered,
        promfeds: parts,
    }
}

fn empty_render() -> Rendered {
    let yaml = promfed::empty_config();
    Rendered {
        hash: promfed::config_hash(&yaml),
        yaml,
        jobs: 0,
    }
}

/// The config the ConfigMap holds, if any.
pub fn stored_config(config_map: &ConfigMap) -> Option<&str> {
    config_map
        .data
        .as_ref()
        .and_then(|d| d.get(CONFIG_KEY))
        .map(String::as_str)
}

/// Whether the agent wrote `config_map` (otherwise it is left alone).
pub fn is_ours(config_map: &ConfigMap) -> bool {
    let labels = config_map.metadata.labels.as_ref();
    labels
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .map(String::as_str)
        == Some(MANAGED_BY)
        && labels
            .and_then(|l| l.get(OWNED_BY_LABEL))
            .map(String::as_str)
            == Some(OWNED_BY)
}

/// What the agent makes of one PrometheusFederation's placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The PrometheusFederation cannot be rendered; the message says why.
    Invalid(String),
    /// A ConfigMap of that name exists and the agent did not write it.
    Foreign,
    /// The ConfigMap does not hold the rendered config: write it.
    NeedsApply,
    /// Written; the reloader has not confirmed it yet.
    Waiting,
    /// Prometheus confirmed it loaded the config.
    Loaded,
    /// The reloader reported a failure for this config.
    Failed(PlacementState, String),
}

/// Judges `placed` against the ConfigMap of its namespace (absent: not written yet).
pub fn verdict(
    render: &GroupRender,
    placed: &PlacedRef,
    config_map: Option<&ConfigMap>,
) -> Verdict {
    match render.promfeds.get(placed) {
        Some(Ok(_)) => {}
        Some(Err(message)) => return Verdict::Invalid(message.clone()),
        None => return Verdict::Invalid("the PrometheusFederation is not rendered".to_owned()),
    }
    let Some(config_map) = config_map else {
        return Verdict::NeedsApply;
    };
    if !is_ours(config_map) {
        return Verdict::Foreign;
    }
    if stored_config(config_map).map(promfed::config_hash) != Some(render.rendered.hash.clone()) {
        return Verdict::NeedsApply;
    }
    let status = ReloadStatus::of(config_map);
    let hash = &render.rendered.hash;
    if status.is_loaded(hash) {
        return Verdict::Loaded;
    }
    if status.reload_hash.as_ref() == Some(hash) {
        let message = status.message.clone().unwrap_or_default();
        match status.state.as_deref() {
            Some("Error") => return Verdict::Failed(PlacementState::Error, message),
            Some("Unavailable") => return Verdict::Failed(PlacementState::Unavailable, message),
            _ => {}
        }
    }
    Verdict::Waiting
}

/// What to tell the hub about `placed` (assigned at `applied_revision`).
pub fn report(
    render: &GroupRender,
    placed: &PlacedRef,
    applied_revision: i64,
    verdict: &Verdict,
    config_map: Option<&ConfigMap>,
    apply_error: Option<&ApplyError>,
) -> Report {
    let short = render.rendered.hash.get(..12).unwrap_or_default();
    let part = render.promfeds.get(placed).and_then(|p| p.as_ref().ok());
    let namespace = config_map
        .and_then(|c| c.metadata.namespace.clone())
        .unwrap_or_default();
    let (state, mut message) = match verdict {
        Verdict::Invalid(message) => (PlacementState::Error, message.clone()),
        Verdict::Foreign => (
            PlacementState::Conflict,
            format!(
                "ConfigMap {namespace}/{} exists and was not written by accord-agent; it is left alone",
                promfed::CONFIG_MAP_NAME
            ),
        ),
        Verdict::NeedsApply => match apply_error {
            Some(error) => (PlacementState::Error, error.message.clone()),
            None => (PlacementState::Pending, format!("writing config {short}")),
        },
        Verdict::Waiting => (
            PlacementState::Pending,
            format!(
                "config {short} written; waiting for the reloader beside Prometheus to confirm it is loaded"
            ),
        ),
        Verdict::Loaded => (PlacementState::Synced, String::new()),
        Verdict::Failed(state, message) => (*state, message.clone()),
    };
    if let Some(part) = part {
        let mut notes = Vec::new();
        if *verdict == Verdict::Loaded
            && let Some(config_map) = config_map
        {
            let status = ReloadStatus::of(config_map);
            for job in &part.job_names {
                if let Some(error) = status.scrape_errors.get(job) {
                    notes.push(format!("scrape of {job} failing: {error}"));
                }
            }
        }
        for tenant in &part.tenants_without_sources {
            notes.push(format!(
                "no Service labelled {SOURCE_LABEL}=true in tenant namespace {tenant}"
            ));
        }
        if !notes.is_empty() {
            if !message.is_empty() {
                message.push_str("; ");
            }
            message.push_str(&notes.join("; "));
        }
    }
    let Some(part) = part else {
        return Report::without_object(state, message, applied_revision);
    };
    Report {
        state,
        message,
        resource_version: config_map
            .and_then(|c| c.metadata.resource_version.clone())
            .unwrap_or_default(),
        generation: 0,
        observed: Observed::Promfed(PromfedObserved {
            config_hash: render.rendered.hash.clone(),
            jobs: i32::try_from(part.jobs).unwrap_or(i32::MAX),
            reloaded: *verdict == Verdict::Loaded,
        }),
        applied_revision,
        api_server_unavailable: false,
    }
}

/// The server-side apply body of the ConfigMap holding `rendered` in `namespace`.
pub fn config_map_patch(namespace: &str, rendered: &Rendered) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": promfed::CONFIG_MAP_NAME,
            "namespace": namespace,
            "labels": {
                MANAGED_BY_LABEL: MANAGED_BY,
                OWNED_BY_LABEL: OWNED_BY,
            },
            "annotations": { promfed::ANN_CONFIG_HASH: rendered.hash },
        },
        "data": { CONFIG_KEY: rendered.yaml },
    })
}

/// Drops what the judge never reads from a Service.
pub fn slim_service(service: &mut Service) {
    service.metadata.managed_fields = None;
    service.metadata.annotations = None;
    service.status = None;
}

/// Drops what the judge never reads from a Namespace.
pub fn slim_namespace(namespace: &mut Namespace) {
    namespace.metadata.managed_fields = None;
    namespace.metadata.annotations = None;
    namespace.spec = None;
    namespace.status = None;
}

/// Drops what the judge never reads from a ConfigMap.
pub fn slim_config_map(config_map: &mut ConfigMap) {
    config_map.metadata.managed_fields = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::distribution::PlacedKind;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn spec(tenants: &[&str], matchers: &[&str]) -> PromfedSpec {
        PromfedSpec {
            tenant_namespaces: tenants.iter().map(|t| (*t).to_owned()).collect(),
            matchers: matchers.iter().map(|m| (*m).to_owned()).collect(),
            scrape_interval: "30s".into(),
            scrape_timeout: "10s".into(),
            ..PromfedSpec::default()
        }
    }

    fn service(ns: &str, name: &str, ports: &[(&str, i32)], source: bool) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                labels: source.then(|| [(SOURCE_LABEL.to_owned(), "true".to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                ports: Some(
                    ports
                        .iter()
                        .map(|(n, p)| ServicePort {
                            name: (!n.is_empty()).then(|| (*n).to_owned()),
                            port: *p,
                            ..ServicePort::default()
                        })
                        .collect(),
                ),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    fn namespace(name: &str, labels: &[(&str, &str)]) -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        }
    }

    fn placed(name: &str) -> PlacedRef {
        PlacedRef::new(PlacedKind::PrometheusFederation, "monitoring", name)
    }

    fn config_map(render: &GroupRender, annotations: &[(&str, &str)]) -> ConfigMap {
        let patch = config_map_patch("accord-system", &render.rendered);
        let mut cm: ConfigMap = serde_json::from_value(patch).unwrap();
        let a = cm.metadata.annotations.get_or_insert_with(BTreeMap::new);
        for (k, v) in annotations {
            a.insert((*k).to_owned(), (*v).to_owned());
        }
        cm.metadata.resource_version = Some("7".into());
        cm
    }

    #[test]
    fn tenants_by_name_are_sorted_once_and_by_label_match_every_label() {
        assert_eq!(
            tenants(&spec(&["b", "a", "b"], &["up"]), &[]).unwrap(),
            ["a", "b"]
        );
        let mut by_label = spec(&[], &["up"]);
        by_label.tenant_labels = [("tier".to_owned(), "gold".to_owned())].into();
        let gold = namespace("team-a", &[("tier", "gold"), ("x", "y")]);
        let silver = namespace("team-b", &[("tier", "silver")]);
        let bare = namespace("team-c", &[]);
        assert_eq!(
            tenants(&by_label, &[&silver, &gold, &bare]).unwrap(),
            ["team-a"]
        );
        assert!(tenants(&spec(&[], &["up"]), &[]).is_err());
    }

    #[test]
    fn a_source_is_a_labelled_service_on_its_web_port_or_its_first() {
        let named = service("a", "prom", &[("metrics", 8080), ("web", 9090)], true);
        let first = service("a", "prom2", &[("", 9091), ("grpc", 10901)], true);
        let unlabelled = service("a", "other", &[("web", 9090)], false);
        let elsewhere = service("b", "prom", &[("web", 9090)], true);
        let targets = sources_in("a", &[&first, &named, &unlabelled, &elsewhere]);
        let got: Vec<(String, i32)> = targets
            .iter()
            .map(|t| (t.service.clone(), t.port))
            .collect();
        assert_eq!(got, [("prom".to_owned(), 9090), ("prom2".to_owned(), 9091)]);
    }

    #[test]
    fn promfeds_of_one_namespace_share_one_config_and_a_bad_one_is_left_out() {
        let s_a = service("team-a", "prom", &[("web", 9090)], true);
        let s_b = service("team-b", "prom", &[("web", 9090)], true);
        let mut promfeds = BTreeMap::new();
        promfeds.insert(placed("one"), spec(&["team-a"], &["{job=\"x\"}"]));
        promfeds.insert(placed("two"), spec(&["team-b", "team-c"], &["up"]));
        let good = render_group(&promfeds, &[], &[&s_a, &s_b]);
        assert_eq!(good.rendered.jobs, 2);
        let two = good.promfeds[&placed("two")].as_ref().unwrap();
        assert_eq!(
            (two.jobs, two.tenants_without_sources.clone()),
            (1, vec!["team-c".to_owned()])
        );

        promfeds.insert(placed("bad"), spec(&["team-a"], &["{job=~\"x\""]));
        let with_bad = render_group(&promfeds, &[], &[&s_a, &s_b]);
        let message = with_bad.promfeds[&placed("bad")].as_ref().unwrap_err();
        // Which selector, and why the parser refused it.
        assert!(
            message.contains(r#"match[] "{job=~\"x\"" cannot be used: invalid series selector"#)
                && message.contains("missing '}'"),
            "{message}"
        );
        assert_eq!(
            with_bad.rendered.hash, good.rendered.hash,
            "the bad PrometheusFederation changes nothing"
        );
        assert!(matches!(
            verdict(&with_bad, &placed("bad"), None),
            Verdict::Invalid(_)
        ));
    }

    #[test]
    fn the_verdict_follows_the_config_map_and_the_reloader() {
        let s_a = service("team-a", "prom", &[("web", 9090)], true);
        let promfeds: BTreeMap<_, _> = [(placed("one"), spec(&["team-a"], &["up"]))].into();
        let render = render_group(&promfeds, &[], &[&s_a]);
        let hash = render.rendered.hash.clone();
        let p = placed("one");
        assert_eq!(verdict(&render, &p, None), Verdict::NeedsApply);

        let written = config_map(&render, &[]);
        assert_eq!(verdict(&render, &p, Some(&written)), Verdict::Waiting);
        let report_waiting = report(&render, &p, 3, &Verdict::Waiting, Some(&written), None);
        assert_eq!(report_waiting.state, PlacementState::Pending);
        assert_eq!(report_waiting.resource_version, "7");

        let mut stale = written.clone();
        stale
            .data
            .as_mut()
            .unwrap()
            .insert(CONFIG_KEY.into(), "scrape_configs: []\n".into());
        assert_eq!(
            verdict(&render, &p, Some(&stale)),
            Verdict::NeedsApply,
            "drift is rewritten"
        );

        let loaded = config_map(
            &render,
            &[
                (promfed::ANN_LOADED_HASH, &hash),
                (
                    promfed::ANN_SCRAPE_ERRORS,
                    &format!(
                        "{{\"{}\":\"sample limit exceeded\"}}",
                        promfed::member_job_name(&p, "team-a")
                    ),
                ),
            ],
        );
        assert_eq!(verdict(&render, &p, Some(&loaded)), Verdict::Loaded);
        let synced = report(&render, &p, 3, &Verdict::Loaded, Some(&loaded), None);
        assert_eq!(synced.state, PlacementState::Synced);
        assert!(
            synced.message.contains("sample limit exceeded"),
            "{}",
            synced.message
        );
        let Observed::Promfed(observed) = &synced.observed else {
            panic!("no federation observation")
        };
        assert_eq!(
            (
                observed.config_hash.as_str(),
                observed.jobs,
                observed.reloaded
            ),
            (hash.as_str(), 1, true)
        );

        let refused = config_map(
            &render,
            &[
                (promfed::ANN_LOADED_HASH, "older"),
                (promfed::ANN_RELOAD_HASH, &hash),
                (promfed::ANN_RELOAD_STATE, "Error"),
                (promfed::ANN_RELOAD_MESSAGE, "not a valid duration string"),
            ],
        );
        assert_eq!(
            verdict(&render, &p, Some(&refused)),
            Verdict::Failed(PlacementState::Error, "not a valid duration string".into())
        );
        let about_older = config_map(
            &render,
            &[
                (promfed::ANN_RELOAD_HASH, "older"),
                (promfed::ANN_RELOAD_STATE, "Error"),
            ],
        );
        assert_eq!(verdict(&render, &p, Some(&about_older)), Verdict::Waiting);

        let mut foreign = written;
        foreign.metadata.labels = None;
        assert_eq!(verdict(&render, &p, Some(&foreign)), Verdict::Foreign);
    }
}
