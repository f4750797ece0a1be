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
use crate::wait::{self, Check};

/// How long the API server may take to establish a CRD, and to publish it.
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

/// Applies `crds` (server-side apply) and waits until each is Established and published
/// in discovery and OpenAPI; returns their names.
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
    for crd in crds {
        wait_published(client, crd).await?;
    }
    Ok(names)
}

/// Waits until a CRD's served versions are in discovery and in the OpenAPI v3 document of
/// their group version, where `kubectl get` and `kubectl explain` look. Both are updated
/// asynchronously, shortly after the CRD is Established.
async fn wait_published(client: &kube::Client, crd: &CustomResourceDefinition) -> Result<()> {
    let group = &crd.spec.group;
    let plural = &crd.spec.names.plural;
    let kind = &crd.spec.names.kind;
    // The OpenAPI schema name reverses the group's DNS labels: accord.io -> io.accord.
    let reversed_group: Vec<&str> = group.split('.').rev().collect();
    for version in crd.spec.versions.iter().filter(|v| v.served) {
        let group_version = format!("{group}/{}", version.name);
        let schema = format!("\"{}.{}.{kind}\"", reversed_group.join("."), version.name);
        let what = format!("{plural}.{group_version} in discovery and OpenAPI");
        wait::until(&what, ESTABLISHED_TIMEOUT, || async {
            match client.list_api_group_resources(&group_version).await {
                Ok(list) if list.resources.iter().any(|r| &r.name == plural) => {}
                Ok(_) => return Ok(Check::NotYet("not in discovery yet".into())),
                Err(e) => return Ok(Check::NotYet(format!("discovery: {e}"))),
            }
            let request =
                http::Request::get(format!("/openapi/v3/apis/{group_version}")).body(Vec::new())?;
            Ok(match client.request_text(request).await {
                Ok(document) if document.contains(&schema) => Check::Ready(()),
                Ok(_) => Check::NotYet("schema not in OpenAPI v3 yet".into()),
                Err(e) => Check::NotYet(format!("OpenAPI v3: {e}")),
            })
        })
        .await?;
    }
    Ok(())
}

/// `crds` serving only their storage version, with no conversion: how a shared testbed
/// installs them. Its hubs come and go with their tests and no Service points at any of
/// them, so a conversion webhook would be unreachable; the API server keeps a watch cache
/// per served version and converts every write for the others, so with the webhook
/// unreachable each write fails that cache and makes it list the resource from etcd again,
/// about once a second for as long as objects are written (a `kafka-bench` run logged
/// hundreds of such failures). Tests and benchmarks of the older versions install the CRDs
/// themselves, with [`converting_at`] and a hub serving `/convert`.
pub fn storage_version_only(
    mut crds: Vec<CustomResourceDefinition>,
) -> Vec<CustomResourceDefinition> {
    for crd in &mut crds {
        crd.spec.versions.retain(|version| version.storage);
        crd.spec.conversion = None;
    }
    crds
}

/// `crds` with their conversion webhook reached at `url` (the hub's `/convert` on
/// loopback) and trusting `ca` (the hub CA, PEM): how a test or benchmark wires the API
/// server to a hub it started. Fails for a CRD without a conversion webhook.
pub fn converting_at(
    mut crds: Vec<CustomResourceDefinition>,
    url: &str,
    ca: &k8s_openapi::ByteString,
) -> Result<Vec<CustomResourceDefinition>> {
    for crd in &mut crds {
        let webhook = crd
            .spec
            .conversion
            .as_mut()
            .and_then(|c| c.webhook.as_mut())
            .with_context(|| format!("{:?} has no conversion webhook", crd.metadata.name))?;
        webhook.client_config = Some(
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::WebhookClientConfig {
                url: Some(url.to_owned()),
                ca_bundle: Some(ca.clone()),
                service: None,
            },
        );
    }
    Ok(crds)
}
