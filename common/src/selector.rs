//! Kubernetes label selectors, matched with Kubernetes' semantics: the hub selects clusters
//! and namespaces with them, the agent a Deployment's own pods.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `labels` satisfy `selector`: every `matchLabels` pair and every
/// `matchExpressions` entry must hold; an empty selector selects everything. An operator
/// other than `In`, `NotIn`, `Exists` and `DoesNotExist`, or values that do not fit the
/// operator, are an error saying which entry.
pub fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    let mut ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    for (i, e) in selector.match_expressions.iter().flatten().enumerate() {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        let holds = match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(format!(
                    "matchExpressions[{i}]: operator {} needs at least one value",
                    e.operator
                ));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(format!(
                    "matchExpressions[{i}]: operator {} takes no values",
                    e.operator
                ));
            }
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => {
                return Err(format!(
                    "matchExpressions[{i}]: unknown operator {other:?} (use In, NotIn, Exists or DoesNotExist)"
                ));
            }
        };
        ok &= holds;
    }
    Ok(ok)
}
