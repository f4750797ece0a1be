//! What a PrometheusFederation asks of its member clusters: one [`PromfedSpec`], the
//! same for every selected cluster, and the placements record's shares.

use accord_common::distribution::{AssignmentSpec, PromfedSpec};
use accord_crds::PrometheusFederationSpec;

use crate::distribution::select::{SelectedCluster, unknown_cluster};
use crate::distribution::{Hold, ShareRecord};

/// A spec the hub cannot turn into an assignment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The tenant selector uses matchExpressions, which agents do not evaluate.
    #[error(
        "spec.tenantSelector.labelSelector: matchExpressions are not supported for tenants; \
         select tenant namespaces with matchLabels or list them in namespaces"
    )]
    TenantExpressions,
    /// A cluster selector cannot be evaluated.
    #[error(transparent)]
    Selector(#[from] crate::distribution::select::SelectorError),
}

/// The assignment every selected cluster gets.
pub fn assignment(spec: &PrometheusFederationSpec) -> Result<PromfedSpec, PlanError> {
    let tenants = &spec.tenant_selector;
    let tenant_labels = match &tenants.label_selector {
        Some(s) if s.match_expressions.as_ref().is_some_and(|e| !e.is_empty()) => {
            return Err(PlanError::TenantExpressions);
        }
        Some(s) => s.match_labels.clone().unwrap_or_default(),
        None => Default::default(),
    };
    let target = spec.target.clone().unwrap_or_default();
    Ok(PromfedSpec {
        tenant_namespaces: tenants.namespaces.clone().unwrap_or_default(),
        tenant_labels,
        matchers: spec.match_.clone(),
        scrape_interval: spec.scrape_interval.clone(),
        scrape_timeout: spec.scrape_timeout.clone(),
        sample_limit: spec.sample_limit.unwrap_or(0),
        reload_url: target.reload_url.unwrap_or_default(),
        config_map_namespace: target.config_map_namespace.unwrap_or_default(),
    })
}

/// One share per selected cluster, in selection order: the assignment for every known
/// cluster, nothing (and why) for a name with no ManagedCluster.
pub fn shares(selected: &[SelectedCluster], assignment: &PromfedSpec) -> Vec<ShareRecord> {
    selected
        .iter()
        .map(|c| ShareRecord {
            since: None,
            cluster: c.name.clone(),
            assignment: c.known.then(|| AssignmentSpec::Promfed(assignment.clone())),
            held_reason: (!c.known).then(|| unknown_cluster(&c.name)),
            hold: (!c.known).then_some(Hold::NotRegistered),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> PrometheusFederationSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn the_assignment_carries_the_spec_with_defaults_for_what_is_unset() {
        let a = assignment(&spec(
            "placement: {clusters: [a]}\ntenantSelector: {namespaces: [team-a, team-b]}\nmatch: ['{job=\"x\"}']\n",
        ))
        .unwrap();
        assert_eq!(
            a,
            PromfedSpec {
                tenant_namespaces: vec!["team-a".into(), "team-b".into()],
                tenant_labels: Default::default(),
                matchers: vec!["{job=\"x\"}".into()],
                scrape_interval: "30s".into(),
                scrape_timeout: "10s".into(),
                sample_limit: 0,
                reload_url: String::new(),
                config_map_namespace: String::new(),
            }
        );
    }

    #[test]
    fn the_assignment_carries_the_target_and_tenant_labels() {
        let a = assignment(&spec(
            "placement: {clusters: [a]}\ntenantSelector: {labelSelector: {matchLabels: {tenant: 'yes'}}}\n\
             match: ['up']\nscrapeInterval: 15s\nscrapeTimeout: 5s\nsampleLimit: 1000\n\
             target: {reloadURL: 'http://p:9090/-/reload', configMapNamespace: monitoring}\n",
        ))
        .unwrap();
        assert_eq!(a.tenant_labels["tenant"], "yes");
        assert!(a.tenant_namespaces.is_empty());
        assert_eq!(
            (a.scrape_interval.as_str(), a.scrape_timeout.as_str()),
            ("15s", "5s")
        );
        assert_eq!(a.sample_limit, 1000);
        assert_eq!(a.reload_url, "http://p:9090/-/reload");
        assert_eq!(a.config_map_namespace, "monitoring");
    }

    #[test]
    fn tenant_match_expressions_are_refused_with_what_to_use_instead() {
        let err = assignment(&spec(
            "placement: {clusters: [a]}\ntenantSelector: {labelSelector: {matchExpressions: \
             [{key: tenant, operator: Exists}]}}\nmatch: ['up']\n",
        ))
        .unwrap_err();
        assert_eq!(err, PlanError::TenantExpressions);
        assert!(err.to_string().contains("matchLabels"), "{err}");
    }

    #[test]
    fn unknown_clusters_get_no_assignment_and_say_why() {
        let spec = PromfedSpec::default();
        let s = shares(
            &[
                SelectedCluster {
                    name: "a".into(),
                    known: true,
                },
                SelectedCluster {
                    name: "mars".into(),
                    known: false,
                },
            ],
            &spec,
        );
        assert_eq!(s[0].assignment, Some(AssignmentSpec::Promfed(spec)));
        assert_eq!(s[0].held_reason, None);
        assert_eq!(s[1].assignment, None);
        assert_eq!(s[1].held_reason.as_deref(), Some("no ManagedCluster mars"));
    }
}
