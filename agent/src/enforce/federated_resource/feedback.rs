//! Feedback: values read back from delivered objects with JSONPath, rendered as text for
//! the FederatedResource's status. Pure.

use jsonpath_rust::JsonPath as _;
use serde_json::Value;

/// The JSONPath of a feedback rule as the query language wants it: kubectl's braces
/// (`{.status.x}`) dropped, and rooted at `$` (`.status.x` → `$.status.x`).
pub fn normalize(path: &str) -> String {
    let path = path.trim();
    let path = path
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(path)
        .trim();
    if path.starts_with('$') {
        path.to_owned()
    } else if path.starts_with('.') || path.starts_with('[') {
        format!("${path}")
    } else {
        format!("$.{path}")
    }
}

/// The value at `path` in `object`, as text: a string as it is, numbers and booleans as
/// JSON text, objects and arrays as compact JSON; several matches as a JSON array. `None`
/// when nothing (or only `null`) is there, or the path does not parse.
pub fn extract(object: &Value, path: &str) -> Option<String> {
    let found: Vec<&Value> = object
        .query(&normalize(path))
        .ok()?
        .into_iter()
        .filter(|v| !v.is_null())
        .collect();
    match found.as_slice() {
        [] => None,
        [Value::String(s)] => Some(s.clone()),
        [one] => Some(one.to_string()),
        many => Some(Value::Array(many.iter().map(|v| (*v).clone()).collect()).to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn db() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db"},
            "spec": {"replicas": 3, "paused": false},
            "status": {
                "readyReplicas": 2,
                "primary": "db-0",
                "endpoints": {"rw": "db-rw:5432"},
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "Available", "status": "True"}
                ]
            }
        })
    }

    #[test]
    fn values_render_as_text_strings_as_they_are() {
        let o = db();
        assert_eq!(extract(&o, ".status.readyReplicas").as_deref(), Some("2"));
        assert_eq!(extract(&o, "$.status.primary").as_deref(), Some("db-0"));
        assert_eq!(extract(&o, ".spec.paused").as_deref(), Some("false"));
        assert_eq!(
            extract(&o, ".status.endpoints").as_deref(),
            Some(r#"{"rw":"db-rw:5432"}"#)
        );
        assert_eq!(
            extract(&o, "{.status.conditions[0].type}").as_deref(),
            Some("Ready")
        );
    }

    #[test]
    fn a_filter_picks_a_condition_as_kubectl_writes_it() {
        assert_eq!(
            extract(
                &db(),
                r#".status.conditions[?(@.type=="Available")].status"#
            )
            .as_deref(),
            Some("True")
        );
    }

    #[test]
    fn several_matches_render_as_a_json_array() {
        assert_eq!(
            extract(&db(), ".status.conditions[*].type").as_deref(),
            Some(r#"["Ready","Available"]"#)
        );
    }

    #[test]
    fn an_absent_value_or_a_bad_path_is_omitted() {
        let o = db();
        assert_eq!(extract(&o, ".status.missing"), None);
        assert_eq!(extract(&json!({"status": {"x": null}}), ".status.x"), None);
        assert_eq!(extract(&o, ".status[[["), None);
    }

    #[test]
    fn paths_are_rooted_at_dollar() {
        assert_eq!(normalize(".status.x"), "$.status.x");
        assert_eq!(normalize("$.status.x"), "$.status.x");
        assert_eq!(normalize("{.status.x}"), "$.status.x");
        assert_eq!(normalize("status.x"), "$.status.x");
    }
}
