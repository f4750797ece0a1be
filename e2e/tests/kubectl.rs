//! kubectl, same release as the testbed's API servers, works against the management
//! cluster with the testbed's admin kubeconfig and sees Accord's resources: the `accord`
//! category and the schema descriptions `kubectl explain` prints.

use accord_e2e::Testbed;
use anyhow::{Context as _, Result, ensure};

fn normalize_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The description of `spec.distribution` in the CrossClusterScalePolicy CRD.
fn distribution_description() -> Result<String> {
    let crds = accord_e2e::crds::read_dir(&accord_e2e::crds::default_dir())?;
    let crd = crds
        .iter()
        .find(|c| c.spec.names.kind == "CrossClusterScalePolicy")
        .context("no CrossClusterScalePolicy CRD in crds/yaml")?;
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .context("CRD without a schema")?;
    let distribution = schema
        .properties
        .as_ref()
        .and_then(|p| p.get("spec"))
        .and_then(|spec| spec.properties.as_ref())
        .and_then(|p| p.get("distribution"))
        .context("schema without spec.distribution")?;
    distribution
        .description
        .clone()
        .context("spec.distribution has no description")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_accord_and_explain_work() -> Result<()> {
    let description = distribution_description()?;
    let testbed = Testbed::builder()
        .members(0)
        .without_mgmt_controller_manager()
        .start()
        .await?;
    let _logs = testbed.logs_on_panic();
    ensure!(!testbed.crds().is_empty(), "no CRDs were installed");

    let get = testbed
        .kubectl(testbed.mgmt())
        .args(["get", "accord", "--all-namespaces"])
        .output()
        .await?;
    ensure!(
        get.status.success(),
        "kubectl get accord failed: {}",
        String::from_utf8_lossy(&get.stderr)
    );

    let explain = testbed
        .kubectl(testbed.mgmt())
        .args(["explain", "crossclusterscalepolicy.spec.distribution"])
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&explain.stdout);
    ensure!(
        explain.status.success(),
        "kubectl explain failed: {}",
        String::from_utf8_lossy(&explain.stderr)
    );
    ensure!(
        stdout.contains("DESCRIPTION"),
        "no DESCRIPTION in:\n{stdout}"
    );
    ensure!(
        normalize_whitespace(&stdout).contains(&normalize_whitespace(&description)),
        "the schema's description {description:?} is not in:\n{stdout}"
    );
    Ok(())
}
