//! Installing the repository's CustomResourceDefinitions (`crds/yaml/*.yaml`) into a
//! cluster and waiting until the API server serves them.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};

use crate::kubernetes::FIELD_MANAGER;

/// How long the API server may take to establish a CRD.
const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(60);

/// The directory holding the generated CRD manifests.
pub fn default_dir() -> PathBuf {
    crate::binaries::repo_root().join("crds").join("yaml")
}

/// Reads every CRD in the `*.yaml` files of `dir` (several documents per file allowed),
/// in file name order.
pub fn read_dir(dir: &Path) -> Result<Vec<CustomResourceDefinition>> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml")
        })
        .collect();
    files.sort();
    let mut crds = Vec::new();
    for file in files {
        let text =
            fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
            .with_context(|| format!("parsing {}", file.display()))?;
        for document in documents.into_iter().filter(|d| !d.is_null()) {
            let crd: CustomResourceDefinition = serde_json::from_value(document)
                .with_context(|| format!("{} holds something other than a CRD", file.display()))?;
            crds.push(crd);
        }
    }
    Ok(crds)
}

/// Applies `crds` (server-side apply) and waits until each is Established; returns their
/// names.
pub async fn install(
    client: &kube::Client,
    crds: &[CustomResourceDefinition],
) -> Result<Vec<String>> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut names = Vec::new();
    for crd in crds {
        let name = crd
            .metadata
            .name
            .clone()
            .context("a CRD without metadata.name")?;
        api.patch(&name, &params, &Patch::Apply(crd))
            .await
            .with_context(|| format!("applying CRD {name}"))?;
        names.push(name);
    }
    for name in &names {
        tokio::time::timeout(
            ESTABLISHED_TIMEOUT,
            await_condition(api.clone(), name, conditions::is_crd_established()),
        )
        .await
        .with_context(|| format!("CRD {name} not Established after {ESTABLISHED_TIMEOUT:?}"))?
        .with_context(|| format!("watching CRD {name}"))?;
    }
    Ok(names)
}
