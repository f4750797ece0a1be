//! Every arrow points down: the framework knows no kind, and no kind knows another.
//!
//! The hub's kinds are the folders `hub/src/kinds.rs` registers; the framework is
//! `controllers/`, `distribution/`, `writes/`, `webhook/` and `store/`, and `kafka/` is what
//! the Kafka kinds share. In the agent the kinds are the folders under `enforce/`, the
//! framework is `engine.rs` and `enforce/`'s own files, and `enforce/kafka/` is shared. A
//! path naming a kind (`crate::kafka_topic::…`, `enforce::promfed`, `super::scale`), in code
//! or in a doc link, is an import of it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The hub's framework layers.
const HUB_FRAMEWORK: &[&str] = &["controllers", "distribution", "writes", "webhook", "store"];
/// What several hub kinds share (below the kinds, beside the framework).
const HUB_SHARED: &[&str] = &["kafka"];
/// What several agent kinds share.
const AGENT_SHARED: &[&str] = &["kafka"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

fn sources(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        out.push(path.to_path_buf());
        return;
    }
    for entry in std::fs::read_dir(path).expect("a source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Whether `text` names module `name` right after one of `prefixes` (`crate::`,
/// `enforce::`, `super::`), as a whole path segment.
fn names(text: &str, prefixes: &[&str], name: &str) -> Option<usize> {
    for prefix in prefixes {
        let needle = format!("{prefix}{name}");
        let mut from = 0;
        while let Some(at) = text[from..].find(&needle) {
            let start = from + at;
            let end = start + needle.len();
            let before_ok = start == 0
                || !text[..start]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_');
            let after_ok = !text[end..]
                .chars()
                .next()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
            if before_ok && after_ok {
                return Some(text[..start].lines().count().max(1));
            }
            from = end;
        }
    }
    None
}

/// Every place in `files` (relative to the workspace) that names one of `kinds` but `own`.
fn imports(
    files: &[PathBuf],
    prefixes: &[&str],
    kinds: &[String],
    own: Option<&str>,
) -> Vec<String> {
    let root = root();
    let mut found = Vec::new();
    for file in files {
        let text = read(file);
        for kind in kinds.iter().filter(|k| Some(k.as_str()) != own) {
            if let Some(line) = names(&text, prefixes, kind) {
                let name = file.strip_prefix(&root).unwrap_or(file).display();
                found.push(format!("{name}:{line} names kind {kind}"));
            }
        }
    }
    found
}

/// The hub's kind folders: those `kinds.rs` names that are neither framework nor shared.
fn hub_kinds() -> Vec<String> {
    let src = root().join("hub/src");
    let registration = read(&src.join("kinds.rs"));
    let mut kinds = BTreeSet::new();
    for entry in std::fs::read_dir(&src).expect("hub/src") {
        let path = entry.expect("an entry").path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if path.is_dir()
            && !HUB_FRAMEWORK.contains(&name)
            && !HUB_SHARED.contains(&name)
            && names(&registration, &["crate::"], name).is_some()
        {
            kinds.insert(name.to_owned());
        }
    }
    kinds.into_iter().collect()
}

/// The agent's kind folders: every folder under `enforce/` but the shared ones.
fn agent_kinds() -> Vec<String> {
    let mut kinds = BTreeSet::new();
    for entry in std::fs::read_dir(root().join("agent/src/enforce")).expect("enforce/") {
        let path = entry.expect("an entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() && !AGENT_SHARED.contains(&name) {
            kinds.insert(name.to_owned());
        }
    }
    kinds.into_iter().collect()
}

#[test]
fn the_kinds_are_found_where_they_are_registered() {
    // Those of the first release at least, so that a check that finds nothing fails.
    let first = [
        "federated_resource",
        "kafka_topic",
        "kafka_user",
        "promfed",
        "scale",
    ];
    for kinds in [hub_kinds(), agent_kinds()] {
        assert!(
            first.iter().all(|k| kinds.iter().any(|f| f == k)),
            "{kinds:?}"
        );
    }
}

#[test]
fn the_hubs_framework_and_shared_code_import_no_kind() {
    let src = root().join("hub/src");
    let mut files = Vec::new();
    for layer in HUB_FRAMEWORK.iter().chain(HUB_SHARED) {
        sources(&src.join(layer), &mut files);
    }
    let found = imports(&files, &["crate::"], &hub_kinds(), None);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn no_hub_kind_imports_another() {
    let src = root().join("hub/src");
    let kinds = hub_kinds();
    let mut found = Vec::new();
    for kind in &kinds {
        let mut files = Vec::new();
        sources(&src.join(kind), &mut files);
        found.extend(imports(&files, &["crate::"], &kinds, Some(kind)));
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_agents_engine_and_shared_enforcer_code_import_no_kind() {
    let enforce = root().join("agent/src/enforce");
    let mut files = vec![root().join("agent/src/engine.rs")];
    for entry in std::fs::read_dir(&enforce).expect("enforce/") {
        let path = entry.expect("an entry").path();
        if path.is_file() {
            files.push(path);
        }
    }
    for shared in AGENT_SHARED {
        sources(&enforce.join(shared), &mut files);
    }
    let prefixes = ["enforce::", "super::"];
    let found = imports(&files, &prefixes, &agent_kinds(), None);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn no_agent_kind_imports_another() {
    let enforce = root().join("agent/src/enforce");
    let kinds = agent_kinds();
    let mut found = Vec::new();
    for kind in &kinds {
        let mut files = Vec::new();
        sources(&enforce.join(kind), &mut files);
        found.extend(imports(
            &files,
            &["enforce::", "super::super::"],
            &kinds,
            Some(kind),
        ));
        // From a kind's own mod.rs, `super::` is `enforce::`.
        let own_mod = [enforce.join(kind).join("mod.rs")];
        found.extend(imports(&own_mod, &["super::"], &kinds, Some(kind)));
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
