//! The global tier: one Prometheus on the management side that federates every member's
//! federation Prometheus for every PrometheusFederation with `spec.global.enabled`. Here:
//! which member endpoints it scrapes for each PrometheusFederation ([`plan`]), its whole config
//! ([`render`]), and what the reloader's answer means for one PrometheusFederation
//! ([`tier_status`]).
//!
//! The hub learns where a member's federation Prometheus is from the ManagedCluster's
//! `spec.federationEndpoint`; a selected cluster without one is left out, and the
//! PrometheusFederation's `status.global.message` says so.

use std::collections::BTreeMap;

use accord_common::distribution::{PlacedRef, PlacementState, PromfedSpec};
use accord_crds::promfed::GlobalTierStatus;

use accord_common::promfed::{self, GlobalTarget, ReloadStatus, RenderError, Rendered};

/// Message while the global Prometheus has not confirmed the current config.
pub const WAITING_FOR_RELOADER: &str = "waiting for the global Prometheus's reloader to confirm";
/// The reloader's state values the hub acts on.
const RELOAD_ERROR: &str = "Error";
const RELOAD_UNAVAILABLE: &str = "Unavailable";

/// One selected member cluster of a global-enabled PrometheusFederation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobalMember {
    /// Cluster name.
    pub cluster: String,
    /// Its ManagedCluster's `spec.federationEndpoint`.
    pub endpoint: Option<String>,
}

/// A PrometheusFederation with `spec.global.enabled` and the member clusters it selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobalPromfed {
    /// The PrometheusFederation.
    pub placed: PlacedRef,
    /// Its assignment (matchers, interval, timeout).
    pub spec: PromfedSpec,
    /// Its selected clusters that exist.
    pub members: Vec<GlobalMember>,
}

/// One PrometheusFederation's part of the global tier.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PromfedPart {
    /// Clusters the global Prometheus federates for it (one job each).
    pub federated: Vec<String>,
    /// Selected clusters left out: no `spec.federationEndpoint`.
    pub without_endpoint: Vec<String>,
    /// Why its jobs could not be rendered (they are left out; the others are not).
    pub error: Option<String>,
}

/// The global tier's inputs, planned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GlobalPlan {
    /// Every job's target, of every PrometheusFederation that renders.
    pub targets: Vec<GlobalTarget>,
    /// Each global-enabled PrometheusFederation's part.
    pub parts: BTreeMap<PlacedRef, PromfedPart>,
}

/// Which members the global Prometheus federates for each PrometheusFederation. A
/// PrometheusFederation whose jobs do not render is left out with its error, so that one
/// bad PrometheusFederation never takes the others' global series away.
pub fn plan(placed: &[GlobalPromfed]) -> GlobalPlan {
    let mut out = GlobalPlan::default();
    for p in placed {
        let mut part = PromfedPart::default();
        let mut targets = Vec::new();
        for m in &p.members {
            match &m.endpoint {
                Some(url) => {
                    part.federated.push(m.cluster.clone());
                    targets.push(GlobalTarget {
                        placed: p.placed.clone(),
                        spec: p.spec.clone(),
                        cluster: m.cluster.clone(),
                        url: url.clone(),
                    });
                }
                None => part.without_endpoint.push(m.cluster.clone()),
            }
        }
        match promfed::render_global(&targets) {
            Ok(_) => out.targets.extend(targets),
            Err(e) => {
                part.error = Some(e.to_string());
                part.federated.clear();
            }
        }
        out.parts.insert(p.placed.clone(), part);
    }
    out
}

/// The global Prometheus's whole config, or `None` when no PrometheusFederation enables the
/// global tier (the ConfigMap is then deleted). A PrometheusFederation with no federated
/// member still keeps the ConfigMap, with no job of its own.
pub fn render(plan: &GlobalPlan) -> Result<Option<Rendered>, RenderError> {
    if plan.parts.is_empty() {
        return Ok(None);
    }
    promfed::render_global(&plan.targets).map(Some)
}

/// One PrometheusFederation's `status.global`, from its part, the hash of the config the hub wants
/// loaded and what the reloader last said: Synced once Prometheus loaded exactly that
/// config, Error or Unavailable when the reloader says so about it, Pending otherwise.
pub fn tier_status(
    placed: &PlacedRef,
    part: &PromfedPart,
    config_hash: &str,
    reload: &ReloadStatus,
) -> GlobalTierStatus {
    let about_this = reload.reload_hash.as_deref() == Some(config_hash);
    let (state, detail) = if let Some(e) = &part.error {
        (
            PlacementState::Error,
            Some(format!(
                "this PrometheusFederation's global jobs cannot be rendered: {e}"
            )),
        )
    } else if reload.loaded_hash.as_deref() == Some(config_hash) {
        (PlacementState::Synced, None)
    } else if about_this && reload.state.as_deref() == Some(RELOAD_ERROR) {
        (PlacementState::Error, reload.message.clone())
    } else if about_this && reload.state.as_deref() == Some(RELOAD_UNAVAILABLE) {
        (PlacementState::Unavailable, reload.message.clone())
    } else {
        (
            PlacementState::Pending,
            Some(WAITING_FOR_RELOADER.to_owned()),
        )
    };
    let mut message: Vec<String> = detail.into_iter().collect();
    for cluster in &part.federated {
        if let Some(err) = reload
            .scrape_errors
            .get(&promfed::global_job_name(placed, cluster))
        {
            message.push(format!("scraping cluster {cluster} fails: {err}"));
        }
    }
    if !part.without_endpoint.is_empty() {
        message.push(format!(
            "not in the global tier (no spec.federationEndpoint on the ManagedCluster): {}",
            crate::distribution::reported::named(&part.without_endpoint, ", ")
        ));
    }
    GlobalTierStatus {
        state,
        jobs: Some(i32::try_from(part.federated.len()).unwrap_or(i32::MAX)),
        config_hash: Some(config_hash.to_owned()),
        message: (!message.is_empty()).then(|| message.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::distribution::PlacedKind;

    fn placed(name: &str, members: &[(&str, Option<&str>)]) -> GlobalPromfed {
        GlobalPromfed {
            placed: PlacedRef::new(PlacedKind::PrometheusFederation, "monitoring", name),
            spec: PromfedSpec {
                matchers: vec!["{job=\"x\"}".into()],
                scrape_interval: "30s".into(),
                scrape_timeout: "10s".into(),
                ..Default::default()
            },
            members: members
                .iter()
                .map(|(c, e)| GlobalMember {
                    cluster: (*c).into(),
                    endpoint: e.map(str::to_owned),
                })
                .collect(),
        }
    }

    fn reload(
        loaded: Option<&str>,
        about: Option<&str>,
        state: Option<&str>,
        msg: &str,
    ) -> ReloadStatus {
        ReloadStatus {
            loaded_hash: loaded.map(str::to_owned),
            reload_hash: about.map(str::to_owned),
            state: state.map(str::to_owned),
            message: Some(msg.to_owned()).filter(|m| !m.is_empty()),
            scrape_errors: BTreeMap::new(),
        }
    }

    #[test]
    fn every_member_with_an_endpoint_is_one_target_and_the_others_are_named() {
        let p = placed("a", &[("east", Some("http://east:9090")), ("west", None)]);
        let planned = plan(std::slice::from_ref(&p));
        assert_eq!(planned.targets.len(), 1);
        assert_eq!(planned.targets[0].cluster, "east");
        assert_eq!(planned.targets[0].url, "http://east:9090");
        let part = &planned.parts[&p.placed];
        assert_eq!(part.federated, vec!["east".to_owned()]);
        assert_eq!(part.without_endpoint, vec!["west".to_owned()]);
        let rendered = render(&planned).unwrap().unwrap();
        assert_eq!(rendered.jobs, 1);
        assert!(rendered.yaml.contains("east"), "{}", rendered.yaml);
    }

    #[test]
    fn no_global_promfed_means_no_config_and_one_without_members_keeps_an_empty_one() {
        assert_eq!(render(&plan(&[])).unwrap(), None);
        let rendered = render(&plan(&[placed("a", &[])])).unwrap().unwrap();
        assert_eq!(rendered.jobs, 0);
    }

    #[test]
    fn the_config_does_not_depend_on_the_order_promfeds_are_listed_in() {
        let a = placed("a", &[("east", Some("http://east:9090"))]);
        let b = placed("b", &[("west", Some("https://west.example/prom"))]);
        let ab = render(&plan(&[a.clone(), b.clone()])).unwrap().unwrap();
        let ba = render(&plan(&[b, a])).unwrap().unwrap();
        assert_eq!(ab.hash, ba.hash);
        assert_eq!(ab.jobs, 2);
    }

    #[test]
    fn a_promfed_that_does_not_render_is_left_out_with_its_error_and_the_others_stay() {
        let good = placed("good", &[("east", Some("http://east:9090"))]);
        let bad = placed("bad", &[("east", Some("not a url"))]);
        let planned = plan(&[good.clone(), bad.clone()]);
        assert_eq!(planned.targets.len(), 1);
        assert_eq!(planned.targets[0].placed, good.placed);
        let part = &planned.parts[&bad.placed];
        assert!(part.error.is_some());
        assert!(part.federated.is_empty());
        let st = tier_status(&bad.placed, part, "h", &ReloadStatus::default());
        assert_eq!(st.state, PlacementState::Error);
        assert_eq!(st.jobs, Some(0));
    }

    #[test]
    fn synced_only_once_the_reloader_confirms_the_current_hash() {
        let p = placed("a", &[("east", Some("http://east:9090"))]);
        let part = &plan(std::slice::from_ref(&p)).parts[&p.placed];
        let st = tier_status(
            &p.placed,
            part,
            "new",
            &reload(Some("old"), Some("old"), Some("Synced"), ""),
        );
        assert_eq!(st.state, PlacementState::Pending);
        assert_eq!(st.message.as_deref(), Some(WAITING_FOR_RELOADER));
        assert_eq!(st.config_hash.as_deref(), Some("new"));
        let st = tier_status(
            &p.placed,
            part,
            "new",
            &reload(Some("new"), Some("new"), Some("Synced"), ""),
        );
        assert_eq!(st.state, PlacementState::Synced);
        assert_eq!(st.jobs, Some(1));
        assert_eq!(st.message, None);
    }

    #[test]
    fn the_reloaders_error_or_unavailability_counts_only_for_the_current_hash() {
        let p = placed("a", &[("east", Some("http://east:9090"))]);
        let part = &plan(std::slice::from_ref(&p)).parts[&p.placed];
        let refused = reload(
            Some("old"),
            Some("new"),
            Some("Error"),
            "bad config: line 3",
        );
        let st = tier_status(&p.placed, part, "new", &refused);
        assert_eq!(st.state, PlacementState::Error);
        assert_eq!(st.message.as_deref(), Some("bad config: line 3"));
        let down = reload(Some("old"), Some("new"), Some("Unavailable"), "unreachable");
        assert_eq!(
            tier_status(&p.placed, part, "new", &down).state,
            PlacementState::Unavailable
        );
        let stale = reload(
            Some("old"),
            Some("older"),
            Some("Error"),
            "about something else",
        );
        assert_eq!(
            tier_status(&p.placed, part, "new", &stale).state,
            PlacementState::Pending
        );
    }

    #[test]
    fn missing_endpoints_and_failing_scrapes_are_in_the_message() {
        let p = placed("a", &[("east", Some("http://east:9090")), ("west", None)]);
        let part = &plan(std::slice::from_ref(&p)).parts[&p.placed];
        let mut r = reload(Some("h"), Some("h"), Some("Synced"), "");
        r.scrape_errors.insert(
            promfed::global_job_name(&p.placed, "east"),
            "connection refused".into(),
        );
        let st = tier_status(&p.placed, part, "h", &r);
        assert_eq!(st.state, PlacementState::Synced);
        let message = st.message.unwrap();
        assert!(
            message.contains("scraping cluster east fails: connection refused"),
            "{message}"
        );
        assert!(message.contains("no spec.federationEndpoint"), "{message}");
        assert!(message.ends_with(": west"), "{message}");
    }
}
