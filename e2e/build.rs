//! Embeds every file of `deploy/examples/` (the sandbox applies them; an installed
//! `accord-sandbox` needs no checkout): `$OUT_DIR/examples.rs` is the list of
//! `(file name, contents)` that `sandbox::examples::EXAMPLE_FILES` includes. A new example
//! is picked up without touching the sandbox's code.

use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut list = String::from("&[\n");
    for path in files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let path = path.canonicalize().unwrap_or(path);
        list.push_str(&format!(
            "    ({name:?}, include_str!({:?})),\n",
            path.display().to_string()
        ));
    }
    list.push_str("]\n");
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("examples.rs");
    std::fs::write(&out, list).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}
