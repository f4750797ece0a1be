//! Test data shared by this crate's tests and the end-to-end tests (feature `testdata`):
//! the example CRs under `deploy/examples/` and the table of invalid CRs in
//! `crds/tests/invalid-cases.yaml`, so that the Rust-side rules and the API server's CEL
//! rules are checked against the very same inputs.

use serde::Deserialize;
use serde_json::Value;
use std::path::PathBuf;

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every example under `deploy/examples/`, as (file name, object).
pub fn examples() -> Vec<(String, Value)> {
    let dir = repo_root().join("deploy/examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, example(&p.file_name().unwrap().to_string_lossy()))
        })
        .collect()
}

/// One example by file name.
pub fn example(file: &str) -> Value {
    let path = repo_root().join("deploy/examples").join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// An invalid CR and the message it must be rejected with.
#[derive(Debug, Clone, Deserialize)]
pub struct InvalidCase {
    /// What is wrong, in words.
    pub name: String,
    /// Example the case starts from.
    pub example: String,
    /// JSON merge patch that breaks it.
    pub patch: Value,
    /// Expected rejection message.
    pub message: String,
    /// The value does not fit the Rust type at all: the Rust side cannot decode the object,
    /// so only the API server can refuse it.
    #[serde(default, rename = "beyondRustType")]
    pub beyond_rust_type: bool,
}

impl InvalidCase {
    /// True when the patch writes `status`: the case goes to the status subresource of the
    /// (created) example, and only the schema's OpenAPI bounds apply to it.
    pub fn is_status(&self) -> bool {
        self.patch.get("status").is_some()
    }

    /// The invalid object: the example with the patch applied.
    pub fn object(&self) -> Value {
        let mut obj = example(&self.example);
        merge_patch(&mut obj, &self.patch);
        obj
    }
}

/// The table in `crds/tests/invalid-cases.yaml`.
pub fn invalid_cases() -> Vec<InvalidCase> {
    let path = repo_root().join("crds/tests/invalid-cases.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// RFC 7386 JSON merge patch: objects merge recursively, `null` deletes, anything else
/// replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let map = target.as_object_mut().expect("just made an object");
    for (k, v) in patch {
        if v.is_null() {
            map.remove(k);
        } else {
            merge_patch(map.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}
