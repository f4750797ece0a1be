//! The real API server enforces Accord's CRD schemas: every example under
//! `deploy/examples/` is accepted, and every invalid CR in `crds/tests/invalid-cases.yaml`
//! is rejected with the message the table expects (the same table the Rust-side
//! validation is tested against). Cases that write `status` go, as a dry run, to the status
//! subresource of the example created first; the others are dry-run creates.

use accord_crds::testdata::{examples, invalid_cases};
use accord_e2e::Testbed;
use anyhow::{Context as _, Result, bail, ensure};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

/// The API for an object of one of Accord's kinds, in its namespace when namespaced.
fn api_for(client: &kube::Client, obj: &Value) -> Result<Api<DynamicObject>> {
    let kind = obj["kind"].as_str().context("object without kind")?;
    let crd = accord_crds::all_crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .with_context(|| format!("no CRD for kind {kind}"))?;
    let gvk = GroupVersionKind::gvk(accord_crds::GROUP, accord_crds::VERSION, kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
    Ok(match obj["metadata"]["namespace"].as_str() {
        Some(ns) if crd.spec.scope == "Namespaced" => {
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        _ => Api::all_with(client.clone(), &resource),
    })
}

/// Creates `obj` for real (valid examples) or as a dry run (invalid cases).
async fn create(client: &kube::Client, obj: &Value, dry_run: bool) -> Result<(), kube::Error> {
    let api = api_for(client, obj).expect("known kind");
    let object: DynamicObject = serde_json::from_value(obj.clone()).expect("object shape");
    let params = PostParams {
        dry_run,
        ..Default::default()
    };
    api.create(&params, &object).await.map(|_| ())
}

/// Merge-patches the status of the (already created) object `obj` names with `patch`, as a
/// dry run.
async fn patch_status(
    client: &kube::Client,
    obj: &Value,
    patch: &Value,
) -> Result<(), kube::Error> {
    let api = api_for(client, obj).expect("known kind");
    let name = obj["metadata"]["name"]
        .as_str()
        .expect("examples have names");
    let params = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    api.patch_status(name, &params, &Patch::Merge(patch))
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn examples_are_accepted_and_invalid_crs_are_rejected_with_clear_messages() -> Result<()> {
    let testbed = Testbed::builder()
        .members(0)
        .without_mgmt_controller_manager()
        .start()
        .await?;
    let _logs = testbed.logs_on_panic();
    let client = testbed.mgmt().client();

    let all = examples();
    for (_, obj) in &all {
        if let Some(ns) = obj["metadata"]["namespace"].as_str() {
            accord_e2e::fleet::ensure_namespace(testbed.mgmt(), ns).await?;
        }
    }
    for (file, obj) in &all {
        create(&client, obj, false)
            .await
            .with_context(|| format!("example {file} was rejected by the API server"))?;
    }

    let cases = invalid_cases();
    ensure!(
        cases.len() >= 12,
        "the table must hold at least 12 invalid CRs"
    );
    let mut failures = Vec::new();
    for case in &cases {
        let outcome = if case.is_status() {
            patch_status(&client, &case.object(), &case.patch).await
        } else {
            create(&client, &case.object(), true).await
        };
        match outcome {
            Ok(()) => failures.push(format!("{:?}: accepted", case.name)),
            Err(kube::Error::Api(status)) => {
                if status.code != 422 || !status.message.contains(&case.message) {
                    failures.push(format!(
                        "{:?}: expected 422 with {:?}, got {} {:?}",
                        case.name, case.message, status.code, status.message
                    ));
                }
            }
            Err(other) => failures.push(format!("{:?}: unexpected error {other}", case.name)),
        }
    }
    if !failures.is_empty() {
        bail!(
            "{} of {} invalid CRs were not rejected as expected:\n{}",
            failures.len(),
            cases.len(),
            failures.join("\n")
        );
    }
    Ok(())
}
