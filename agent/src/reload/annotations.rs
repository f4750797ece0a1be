//! What the reloader says about a ConfigMap, as the annotations it owns, and the JSON
//! merge patch that brings the ConfigMap's annotations there — `None` when nothing
//! changed, so the reloader writes only on change.

use std::collections::BTreeMap;

use accord_common::promfed::{
    ANN_LOADED_HASH, ANN_RELOAD_HASH, ANN_RELOAD_MESSAGE, ANN_RELOAD_STATE, ANN_SCRAPE_ERRORS,
};
use serde_json::{Map, Value, json};

/// Longest message kept in an annotation (Prometheus's errors can be long).
const MAX_MESSAGE_CHARS: usize = 2048;

/// The outcome of handling one config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Hash of the config this is about.
    pub reload_hash: String,
    /// `Synced`, `Error`, `Unavailable` or `Pending`.
    pub state: &'static str,
    /// Detail.
    pub message: String,
}

/// The annotations the reloader owns, as they should be: `Some(value)` to set, `None` to
/// remove. `loaded_hash` is only set (never removed: the last confirmed load stays true
/// until another is confirmed); scrape errors are removed when there are none.
pub fn desired(
    report: Option<&Report>,
    loaded_hash: Option<&str>,
    scrape_errors: &BTreeMap<String, String>,
) -> BTreeMap<&'static str, Option<String>> {
    let mut out = BTreeMap::new();
    if let Some(report) = report {
        out.insert(ANN_RELOAD_HASH, Some(report.reload_hash.clone()));
        out.insert(ANN_RELOAD_STATE, Some(report.state.to_owned()));
        out.insert(ANN_RELOAD_MESSAGE, Some(truncate(&report.message)));
    }
    if let Some(hash) = loaded_hash {
        out.insert(ANN_LOADED_HASH, Some(hash.to_owned()));
    }
    let errors = (!scrape_errors.is_empty()).then(|| {
        let truncated: BTreeMap<&String, String> = scrape_errors
            .iter()
            .map(|(k, v)| (k, truncate(v)))
            .collect();
        serde_json::to_string(&truncated).unwrap_or_default()
    });
    out.insert(ANN_SCRAPE_ERRORS, errors);
    out
}

/// The merge patch taking `current` annotations to `desired`, or `None` when they already
/// agree.
pub fn patch(
    current: &BTreeMap<String, String>,
    desired: &BTreeMap<&'static str, Option<String>>,
) -> Option<Value> {
    let mut changes = Map::new();
    for (key, want) in desired {
        if current.get(*key) != want.as_ref() {
            changes.insert(
                (*key).to_owned(),
                want.clone().map_or(Value::Null, Value::String),
            );
        }
    }
    (!changes.is_empty()).then(|| json!({ "metadata": { "annotations": changes } }))
}

fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_common::promfed::{ReloadStatus, STATE_ERROR, STATE_SYNCED};

    fn synced(hash: &str) -> Report {
        Report {
            reload_hash: hash.into(),
            state: STATE_SYNCED,
            message: "loaded 2 jobs".into(),
        }
    }

    fn apply(current: &mut BTreeMap<String, String>, patch: &Value) {
        for (k, v) in patch["metadata"]["annotations"].as_object().unwrap() {
            match v.as_str() {
                Some(v) => current.insert(k.clone(), v.to_owned()),
                None => current.remove(k),
            };
        }
    }

    #[test]
    fn a_confirmed_load_sets_state_and_loaded_hash_then_nothing_more_is_written() {
        let mut current = BTreeMap::from([("accord.io/config-hash".to_owned(), "h1".to_owned())]);
        let want = desired(Some(&synced("h1")), Some("h1"), &BTreeMap::new());
        let p = patch(&current, &want).unwrap();
        assert_eq!(
            p,
            json!({"metadata": {"annotations": {
                "accord.io/loaded-hash": "h1",
                "accord.io/reload-hash": "h1",
                "accord.io/reload-state": "Synced",
                "accord.io/reload-message": "loaded 2 jobs",
            }}})
        );
        apply(&mut current, &p);
        assert_eq!(patch(&current, &want), None);
        let status = ReloadStatus::from_annotations(&current);
        assert!(status.is_loaded("h1"));
    }

    #[test]
    fn an_error_keeps_the_previous_loaded_hash() {
        let mut current = BTreeMap::new();
        let first = patch(
            &current,
            &desired(Some(&synced("h1")), Some("h1"), &BTreeMap::new()),
        );
        apply(&mut current, &first.unwrap());
        let refused = Report {
            reload_hash: "h2".into(),
            state: STATE_ERROR,
            message: "not a valid duration string".into(),
        };
        let p = patch(
            &current,
            &desired(Some(&refused), Some("h1"), &BTreeMap::new()),
        )
        .unwrap();
        assert!(
            p["metadata"]["annotations"]
                .get("accord.io/loaded-hash")
                .is_none()
        );
        apply(&mut current, &p);
        let status = ReloadStatus::from_annotations(&current);
        assert_eq!(status.loaded_hash.as_deref(), Some("h1"));
        assert_eq!(status.reload_hash.as_deref(), Some("h2"));
        assert_eq!(status.state.as_deref(), Some("Error"));
    }

    #[test]
    fn scrape_errors_are_set_as_json_and_removed_when_gone() {
        let mut current = BTreeMap::new();
        let errors = BTreeMap::from([("job".to_owned(), "sample limit exceeded".to_owned())]);
        let p = patch(&current, &desired(None, None, &errors)).unwrap();
        apply(&mut current, &p);
        assert_eq!(
            ReloadStatus::from_annotations(&current).scrape_errors,
            errors
        );
        let p = patch(&current, &desired(None, None, &BTreeMap::new())).unwrap();
        assert_eq!(
            p["metadata"]["annotations"]["accord.io/scrape-errors"],
            Value::Null
        );
        apply(&mut current, &p);
        assert!(current.is_empty());
        assert_eq!(
            patch(&current, &desired(None, None, &BTreeMap::new())),
            None
        );
    }

    #[test]
    fn long_messages_are_truncated() {
        let long = "x".repeat(MAX_MESSAGE_CHARS + 10);
        assert_eq!(truncate(&long).chars().count(), MAX_MESSAGE_CHARS + 1);
        assert_eq!(truncate("short"), "short");
    }
}
