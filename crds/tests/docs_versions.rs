//! Every `<resource>.<version>.accord.io` the documentation tells a user to type names the
//! resource by its full plural: kubectl resolves a short name (`fkt`) without the version
//! and silently reads the preferred version, so a check of `fkt.v1alpha1.accord.io` reads
//! v1beta1 and proves nothing.

use std::path::{Path, PathBuf};

fn markdown(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            markdown(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

#[test]
fn documented_versioned_resources_use_the_full_plural() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let plurals: Vec<String> = accord_crds::all_crds()
        .into_iter()
        .map(|crd| crd.spec.names.plural)
        .collect();
    let versions: Vec<String> = accord_crds::all_crds()[0]
        .spec
        .versions
        .iter()
        .map(|v| format!(".{}.accord.io", v.name))
        .collect();
    let mut files = vec![root.join("README.md")];
    markdown(&root.join("docs"), &mut files);
    markdown(&root.join("deploy"), &mut files);
    let mut wrong = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for version in &versions {
            for (at, _) in text.match_indices(version.as_str()) {
                let resource: String = text[..at]
                    .chars()
                    .rev()
                    .take_while(|c| c.is_ascii_lowercase())
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                if !plurals.contains(&resource) {
                    wrong.push(format!("{}: {resource}{version}", file.display()));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "name these by the full plural: {wrong:?}");
}
