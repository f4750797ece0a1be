//! Every watch in the hub and the agent, enumerated: each goes through
//! `accord_common::watch::watcher`, which takes only types whose stored objects always
//! decode, so one object that does not fit a Rust type (an int32 holding 3000000000, written
//! while a CRD's schema allowed it) can never empty a cache. A typed watch of an Accord kind
//! once left the FederatedResource controller without the CrossClusterScalePolicies' claims,
//! and the agent's two field managers fought over a Deployment's replicas for ever.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every watch site: file (relative to the workspace) → how many.
fn watch_sites() -> BTreeMap<String, usize> {
    let root = root();
    let mut files = Vec::new();
    for dir in ["hub/src", "agent/src"] {
        sources(&root.join(dir), &mut files);
    }
    let mut sites = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            !text.contains("disallowed_methods"),
            "{name} allows a disallowed method: watch with accord_common::watch::watcher"
        );
        let n = text.matches("accord_common::watch::watcher(").count();
        if n > 0 {
            sites.insert(name, n);
        }
    }
    sites
}

#[test]
fn every_watch_decodes_leniently() {
    // What each watches, and why it always decodes (the bound `AlwaysDecodes` enforces it
    // at compile time; this list makes a new watch a reviewed change).
    let expected: &[(&str, usize, &str)] = &[
        (
            "agent/src/enforce/federated_resource/objects.rs",
            1,
            "DynamicObject",
        ),
        (
            "agent/src/enforce/watch.rs",
            1,
            "built-in kinds (Deployment, HPA, Secret, ConfigMap, Service, Namespace)",
        ),
        ("agent/src/reload/mod.rs", 1, "ConfigMap"),
        (
            "hub/src/console/cache.rs",
            2,
            "DynamicObject (ManagedClusters, every placed kind), Event (the hub's own)",
        ),
        ("hub/src/controllers/mod.rs", 1, "Lenient<ManagedCluster>"),
        (
            "hub/src/controllers/placement/run.rs",
            1,
            "Lenient<every placed kind>",
        ),
        ("hub/src/distribution/secrets.rs", 1, "Secret"),
        (
            "hub/src/install/wait.rs",
            1,
            "CustomResourceDefinition, StatefulSet, Deployment",
        ),
        (
            "hub/src/kafka/admission_cache.rs",
            4,
            "Lenient<FederatedKafkaTopic>, Lenient<KafkaTopicPolicy>, PartialObjectMeta",
        ),
        (
            "hub/src/kafka_topic/controller.rs",
            2,
            "Lenient<KafkaTopicPolicy>, Namespace",
        ),
        ("hub/src/promfed/controller.rs", 1, "ConfigMap"),
        (
            "hub/src/scale/autoscaler.rs",
            1,
            "Lenient<CrossClusterScalePolicy>",
        ),
        (
            "hub/src/webhook/ca_bundle.rs",
            1,
            "ValidatingWebhookConfiguration, CustomResourceDefinition",
        ),
    ];
    let expected: BTreeMap<String, usize> = expected
        .iter()
        .map(|(file, n, _)| ((*file).to_owned(), *n))
        .collect();
    assert_eq!(watch_sites(), expected);
}

#[test]
fn kube_runtimes_watcher_is_disallowed_and_no_accord_kind_always_decodes() {
    let clippy = std::fs::read_to_string(root().join("clippy.toml")).unwrap();
    assert!(
        clippy.contains("\"kube_runtime::watcher::watcher\""),
        "{clippy}"
    );
    let watch = std::fs::read_to_string(root().join("common/src/watch.rs")).unwrap();
    assert!(
        !watch.contains("accord_crds"),
        "an Accord kind must be watched as Lenient<K>, never typed"
    );
    assert_eq!(
        watch.matches("allow(clippy::disallowed_methods)").count(),
        1
    );
}
