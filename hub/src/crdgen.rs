//! `accord-hub crds`: prints the CRD YAML, or writes one file per CRD for `crds/yaml/`.

use std::path::Path;

/// Errors of CRD generation.
#[derive(Debug, thiserror::Error)]
pub enum CrdGenError {
    /// A CRD could not be serialised (a bug in the types).
    #[error("cannot render CRD YAML: {0}")]
    Render(#[from] serde_saphyr::SerializeError),
    /// The output directory could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// File that failed.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// Writes `<plural>.accord.io.yaml` for each of `crds` into `dir`, replacing what is there.
pub fn write_crds(
    dir: &Path,
    crds: Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>,
) -> Result<Vec<String>, CrdGenError> {
    std::fs::create_dir_all(dir).map_err(|source| CrdGenError::Write {
        path: dir.display().to_string(),
        source,
    })?;
    let mut written = Vec::new();
    for crd in crds {
        let path = dir.join(accord_crds::crd_file_name(&crd));
        std::fs::write(&path, accord_crds::render_crd_yaml(&crd)?).map_err(|source| {
            CrdGenError::Write {
                path: path.display().to_string(),
                source,
            }
        })?;
        written.push(path.display().to_string());
    }
    Ok(written)
}
