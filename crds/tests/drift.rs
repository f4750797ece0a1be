//! The CRD YAML committed under `crds/yaml/` must be exactly what the Rust types generate.
//! Regenerate with `cargo run -p accord-hub -- crds --out-dir crds/yaml`.

use accord_crds::{all_crds, crd_file_name, render_crd_yaml};
use std::collections::BTreeSet;

#[test]
fn committed_crd_yaml_matches_the_rust_types() {
    let dir = accord_crds::testdata::repo_root().join("crds/yaml");
    let mut expected_files = BTreeSet::new();
    for crd in all_crds() {
        let file = crd_file_name(&crd);
        let generated = render_crd_yaml(&crd).unwrap();
        let committed = std::fs::read_to_string(dir.join(&file)).unwrap_or_default();
        assert!(
            generated == committed,
            "crds/yaml/{file} is out of date with the Rust types.\n\
             Regenerate it: cargo run -p accord-hub -- crds --out-dir crds/yaml\n\
             first differing line: {:?}",
            generated
                .lines()
                .zip(committed.lines())
                .find(|(a, b)| a != b)
        );
        expected_files.insert(file);
    }
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        present, expected_files,
        "crds/yaml holds files no type generates"
    );
}
