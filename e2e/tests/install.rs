//! `accord-hub install` against a real management kube-apiserver: the dry run touches
//! nothing, the install applies every object idempotently, the RBAC it installs is enough
//! for a real hub running under it, and a user without rights is told exactly which ones
//! are missing. The testbed starts without CRDs, so the install is what brings them.
//!
//! There is no kubelet on the management cluster, so no image runs: the hub's Deployment
//! never becomes available (`--wait` is tested for its timeout), and the RBAC is exercised
//! by running `accord-hub serve` locally as the installed ServiceAccount (impersonation).

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use accord_crds::CrossClusterScalePolicy;
use accord_e2e::Testbed;
use accord_e2e::agent_sim::{self, AgentStream};
use accord_e2e::hub::accord_binary;
use accord_e2e::installed::{
    InstalledHub, flag_value, impersonating_kubeconfig, join_line, wait_cluster_condition,
};
use accord_e2e::wait::{Check, until};
use accord_hub::install::{
    EtcdMode, InstallOptions, Permission, api_resource, granted_permissions, hub_cluster_rules,
    render, required_permissions,
};
use accord_hub::pki::HubCa;
use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, PostParams};
use kube::runtime::wait::{await_condition, conditions as kube_conditions};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

const NS: &str = "accord-system";

async fn testbed() -> Result<Testbed> {
    Testbed::builder()
        .members(0)
        .without_crds()
        .without_mgmt_controller_manager()
        .start()
        .await
}

/// Runs `accord-hub install ARGS`.
async fn install(args: &[&str]) -> Result<Output> {
    Ok(tokio::process::Command::new(accord_binary("accord-hub")?)
        .arg("install")
        .args(args)
        .env_remove("KUBECONFIG")
        .env("RUST_LOG", "warn")
        .output()
        .await?)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

async fn namespace_exists(client: &kube::Client) -> Result<bool> {
    Ok(Api::<Namespace>::all(client.clone())
        .get_opt(NS)
        .await?
        .is_some())
}

async fn accord_crds_present(client: &kube::Client) -> Result<Vec<String>> {
    let crds = Api::<CustomResourceDefinition>::all(client.clone())
        .list(&Default::default())
        .await?;
    Ok(crds
        .items
        .into_iter()
        .filter(|c| c.spec.group == "accord.io")
        .map(|c| c.name_any())
        .collect())
}

/// The installed object of the same kind, namespace and name as `object`, if any.
async fn installed(client: &kube::Client, object: &Value) -> Result<Option<DynamicObject>> {
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let (resource, namespaced) = api_resource(kind).with_context(|| format!("kind {kind}"))?;
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) if namespaced => Api::namespaced_with(client.clone(), ns, &resource),
        _ => Api::all_with(client.clone(), &resource),
    };
    Ok(api.get_opt(name).await?)
}

fn options_for(testbed: &Testbed, prefix: &str) -> InstallOptions {
    InstallOptions {
        etcd: EtcdMode::External {
            endpoints: vec![testbed.etcd_endpoint().to_owned()],
        },
        etcd_prefix: prefix.to_owned(),
        tls_sans: vec!["127.0.0.1".to_owned()],
        ..InstallOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_applies_every_object_idempotently_after_a_dry_run_that_changes_nothing()
-> Result<()> {
    let testbed = testbed().await?;
    let _logs = testbed.logs_on_panic();
    let client = testbed.mgmt().client();
    let kubeconfig = testbed
        .mgmt()
        .kubeconfig_path()
        .to_str()
        .context("UTF-8 path")?
        .to_owned();
    let prefix = "/install-idempotent/";
    let flags = [
        "--kubeconfig",
        kubeconfig.as_str(),
        "--etcd-endpoints",
        testbed.etcd_endpoint(),
        "--etcd-prefix",
        prefix,
        "--hub-url",
        "https://127.0.0.1:7443",
    ];
    let expected = render(&options_for(&testbed, prefix))?;

    // --dry-run prints the objects install would apply, and applies none of them.
    let out = install(&[&flags[..], &["--dry-run"]].concat()).await?;
    ensure!(out.status.success(), "dry run failed: {}", stderr(&out));
    let printed: Vec<Value> = serde_saphyr::from_multiple(&stdout(&out))?;
    ensure!(
        printed == expected,
        "the dry run printed other objects than render()"
    );
    ensure!(
        !namespace_exists(&client).await?,
        "the dry run created the namespace"
    );
    let crds = accord_crds_present(&client).await?;
    ensure!(crds.is_empty(), "the dry run created CRDs: {crds:?}");

    // The install applies everything, sets up the CA and prints a join line with a token.
    let out = install(&flags).await?;
    ensure!(out.status.success(), "install failed: {}", stderr(&out));
    eprintln!("install:\n{}{}", stderr(&out), stdout(&out));
    ensure!(
        stderr(&out).contains("applied Deployment accord-system/accord-hub"),
        "no progress on stderr: {}",
        stderr(&out)
    );
    let printed = stdout(&out);
    let join = printed
        .lines()
        .find(|l| l.trim_start().starts_with("accord-agent join"))
        .with_context(|| format!("no join line in {printed:?}"))?;
    ensure!(flag_value(join, "--hub")? == "https://127.0.0.1:7443");
    let token = flag_value(join, "--token")?;
    let hash = flag_value(join, "--ca-cert-hash")?;

    for object in &expected {
        let found = installed(&client, object).await?.with_context(|| {
            format!(
                "{} {} was not installed",
                object["kind"], object["metadata"]["name"]
            )
        })?;
        let applied_by_install = found.managed_fields().iter().any(|m| {
            m.manager.as_deref() == Some("accord-hub") && m.operation.as_deref() == Some("Apply")
        });
        ensure!(
            applied_by_install,
            "{} {} not applied by field manager accord-hub",
            object["kind"],
            found.name_any()
        );
    }
    let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in accord_crds::all_crds() {
        let name = crd.name_any();
        tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(
                crd_api.clone(),
                &name,
                kube_conditions::is_crd_established(),
            ),
        )
        .await
        .with_context(|| format!("{name} not Established within 30 s"))??;
    }
    let role = Api::<ClusterRole>::all(client.clone())
        .get("accord-hub")
        .await?;
    ensure!(
        serde_json::to_value(&role.rules)? == hub_cluster_rules(),
        "ClusterRole rules differ"
    );

    // The CA is the one the join line pins, and the token is in the hub's etcd.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let ca_secret = secrets.get("accord-hub-ca").await?;
    ensure!(
        HubCa::from_secret(&ca_secret)?.ca_cert_hash() == hash,
        "join line pins another CA"
    );
    let (id, _) = token.split_once('.').context("token is ID.SECRET")?;
    let mut etcd = etcd_client::Client::connect([testbed.etcd_endpoint()], None).await?;
    let key = accord_hub::store::Keyspace::new(prefix).token(id);
    ensure!(
        !etcd.get(key.as_str(), None).await?.kvs().is_empty(),
        "token {id} not stored at {key}"
    );

    // Again: nothing changes — same objects, same revisions, same CA.
    let mut before = Vec::new();
    for object in &expected {
        before.push(
            installed(&client, object)
                .await?
                .context("installed")?
                .resource_version(),
        );
    }
    let out = install(&flags).await?;
    ensure!(
        out.status.success(),
        "second install failed: {}",
        stderr(&out)
    );
    for (object, version) in expected.iter().zip(&before) {
        let now = installed(&client, object)
            .await?
            .context("still installed")?;
        ensure!(
            now.resource_version() == *version,
            "{} {} changed on the second install",
            object["kind"],
            now.name_any()
        );
    }
    let again = secrets.get("accord-hub-ca").await?;
    ensure!(
        again.uid() == ca_secret.uid() && again.resource_version() == ca_secret.resource_version(),
        "CA replaced"
    );
    ensure!(flag_value(stdout(&out).trim(), "--ca-cert-hash")? == hash);

    // --wait reports progress and gives up at its deadline: no pod runs without a kubelet.
    let out = install(&[&flags[..], &["--wait", "--timeout", "3s"]].concat()).await?;
    ensure!(!out.status.success(), "--wait succeeded without a kubelet");
    let err = stderr(&out);
    eprintln!("install --wait:\n{err}");
    ensure!(
        err.contains("waiting for CustomResourceDefinition managedclusters.accord.io: Established"),
        "{err}"
    );
    ensure!(
        err.contains("waiting for deployment accord-system/accord-hub: 0/1 ready"),
        "{err}"
    );
    ensure!(
        err.contains("timed out after 3s waiting for deployment accord-system/accord-hub"),
        "{err}"
    );
    ensure!(
        err.contains("kubectl -n accord-system describe deployment accord-hub"),
        "{err}"
    );
    Ok(())
}

/// Waits until the ManagedCluster's condition `type_` is `status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_running_as_the_installed_service_account_registers_agents_and_runs_policies()
-> Result<()> {
    let testbed = testbed().await?;
    let _logs = testbed.logs_on_panic();
    let admin = testbed.mgmt().client();
    let hub = InstalledHub::install(&testbed, "/install-rbac/").await?;
    let join = join_line(&hub.install_output)?;
    let token = flag_value(&join, "--token")?;
    let hash = flag_value(&join, "--ca-cert-hash")?;
    let grpc = hub.url.trim_start_matches("https://").to_owned();

    // Registration creates the ManagedCluster; the leader writes its status.
    let identity = agent_sim::register(&grpc, &token, &hash, "rbac-member", false).await?;
    let mut stream =
        AgentStream::open(agent_sim::connect(&grpc, &identity).await?, "rbac-member").await?;
    let _heartbeats = stream.spawn_heartbeats(Duration::from_millis(500));
    let minute = Duration::from_secs(60);
    wait_cluster_condition(&admin, "rbac-member", "Joined", "True", minute).await?;
    wait_cluster_condition(&admin, "rbac-member", "Available", "True", minute).await?;

    // A policy gets a status and an assignment (no finalizer: its records go once it is
    // gone); deleting it lets go.
    let policies: Api<CrossClusterScalePolicy> = Api::namespaced(admin.clone(), "default");
    let policy: CrossClusterScalePolicy = serde_json::from_value(json!({
        "apiVersion": "accord.io/v1beta1", "kind": "CrossClusterScalePolicy",
        "metadata": {"name": "rbac-web", "namespace": "default"},
        "spec": {"targetRef": {"name": "frontend"}, "desiredReplicas": 3,
                 "distribution": [{"cluster": "rbac-member", "namespace": "prod", "weight": 1}]}
    }))?;
    policies.create(&PostParams::default(), &policy).await?;
    // The hub's first decision may come before its view of the clusters holds the new one
    // (then its share is 0, "not registered"); the decision that counts is the one with it.
    let mut seen = Vec::new();
    let assigned = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(message) = stream.next().await {
            if let Some(accord_proto::v1::hub_message::Body::Assignments(a)) = message?.body {
                for item in a.items {
                    if let Some(accord_proto::v1::assignment::Spec::Scale(s)) = item.spec {
                        seen.push(s.replicas);
                        if s.replicas == 3 {
                            return Ok(());
                        }
                    }
                }
            }
        }
        bail!("stream ended")
    })
    .await;
    ensure!(
        matches!(assigned, Ok(Ok(()))),
        "no assignment of 3 replicas within 30 s ({assigned:?}); assigned so far: {seen:?}"
    );
    until("policy status written", Duration::from_secs(30), || {
        let policies = policies.clone();
        async move {
            let p = policies.get("rbac-web").await?;
            Ok(match &p.status {
                Some(s) if s.observed_generation.is_some() => Check::Ready(()),
                other => Check::NotYet(format!("status: {other:?}")),
            })
        }
    })
    .await?;
    policies.delete("rbac-web", &Default::default()).await?;
    until("policy deleted", Duration::from_secs(30), || {
        let policies = policies.clone();
        async move {
            Ok(match policies.get_opt("rbac-web").await? {
                None => Check::Ready(()),
                Some(p) => Check::NotYet(format!("finalizers {:?}", p.finalizers())),
            })
        }
    })
    .await?;

    testbed.ensure_running(hub.process)?;
    let log = std::fs::read_to_string(testbed.dir().join("logs/hub-as-sa.log"))?;
    ensure!(
        !log.to_lowercase().contains("forbidden"),
        "the hub was refused something:\n{log}"
    );
    Ok(())
}

/// A ClusterRole granting `permissions` (namespaced ones cluster-wide).
fn cluster_role(name: &str, permissions: &[Permission]) -> Result<ClusterRole> {
    let rules: Vec<Value> = permissions
        .iter()
        .map(|p| {
            let resource = match &p.subresource {
                Some(sub) => format!("{}/{sub}", p.resource),
                None => p.resource.clone(),
            };
            let mut rule =
                json!({ "apiGroups": [p.group], "resources": [resource], "verbs": [p.verb] });
            if let Some(name) = &p.name {
                rule["resourceNames"] = json!([name]);
            }
            rule
        })
        .collect();
    Ok(serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": name }, "rules": rules,
    }))?)
}

async fn grant(admin: &kube::Client, user: &str, permissions: &[Permission]) -> Result<()> {
    let name = format!("test-{user}");
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let role = cluster_role(&name, permissions)?;
    roles
        .patch(
            &name,
            &kube::api::PatchParams::apply("install-test").force(),
            &kube::api::Patch::Apply(&role),
        )
        .await?;
    let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }],
    }))?;
    Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(admin.clone())
        .patch(
            &name,
            &kube::api::PatchParams::apply("install-test").force(),
            &kube::api::Patch::Apply(&binding),
        )
        .await?;
    Ok(())
}

/// The bullet lines under `heading` in an error message.
fn section(text: &str, heading: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| !l.starts_with(heading))
        .skip(1)
        .take_while(|l| l.starts_with("  - "))
        .map(|l| l.trim_start_matches("  - ").to_owned())
        .collect()
}

async fn install_as(testbed: &Testbed, kubeconfig: &Path) -> Result<Output> {
    install(&[
        "--kubeconfig",
        kubeconfig.to_str().context("UTF-8 path")?,
        "--etcd-endpoints",
        testbed.etcd_endpoint(),
        "--etcd-prefix",
        "/install-restricted/",
    ])
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_lacking_permissions_is_told_each_missing_one_and_nothing_is_applied() -> Result<()>
{
    let testbed = testbed().await?;
    let _logs = testbed.logs_on_panic();
    let admin = testbed.mgmt().client();
    let options = options_for(&testbed, "/install-restricted/");
    let objects = render(&options)?;
    let to_apply = required_permissions(&objects, NS, false);
    let to_grant = granted_permissions(&objects);

    // A user with no rights at all hears about every one, and nothing is applied.
    let nobody = impersonating_kubeconfig(
        &testbed,
        testbed.mgmt(),
        "accord-test-nobody",
        &["system:authenticated"],
    )?;
    let out = install_as(&testbed, &nobody).await?;
    ensure!(
        !out.status.success(),
        "install succeeded without permissions"
    );
    let err = stderr(&out);
    eprintln!("as a user without rights:\n{err}");
    ensure!(
        err.contains("permission denied: user \"accord-test-nobody\""),
        "{err}"
    );
    ensure!(err.contains("nothing was changed"), "{err}");
    let listed = section(&err, "Missing to apply the objects:");
    let expected: Vec<String> = to_apply.iter().map(ToString::to_string).collect();
    ensure!(
        listed == expected,
        "listed {listed:#?}\nexpected {expected:#?}"
    );
    ensure!(listed.contains(
        &"patch customresourcedefinitions.apiextensions.k8s.io (cluster-wide)".to_owned()
    ));
    ensure!(
        listed.contains(&"get secrets named accord-hub-ca in namespace accord-system".to_owned())
    );
    ensure!(
        section(
            &err,
            "Missing to grant the rendered roles their permissions"
        )
        .len()
            == to_grant.len(),
        "{err}"
    );
    ensure!(!namespace_exists(&admin).await?, "namespace created");
    ensure!(
        accord_crds_present(&admin).await?.is_empty(),
        "CRDs created"
    );

    // An operator who may apply everything but cluster-wide RBAC, and does not hold what
    // the hub is granted, is told exactly that.
    let operator = impersonating_kubeconfig(
        &testbed,
        testbed.mgmt(),
        "accord-test-operator",
        &["system:authenticated"],
    )?;
    let without_cluster_rbac: Vec<Permission> = to_apply
        .iter()
        .filter(|p| !matches!(p.resource.as_str(), "clusterroles" | "clusterrolebindings"))
        .cloned()
        .collect();
    grant(&admin, "accord-test-operator", &without_cluster_rbac).await?;
    let out = install_as(&testbed, &operator).await?;
    ensure!(
        !out.status.success(),
        "install succeeded without cluster RBAC rights"
    );
    let err = stderr(&out);
    eprintln!("as an operator without cluster RBAC rights:\n{err}");
    let listed = section(&err, "Missing to apply the objects:");
    ensure!(
        listed
            == [
                "create clusterrolebindings.rbac.authorization.k8s.io (cluster-wide)",
                "patch clusterrolebindings.rbac.authorization.k8s.io (cluster-wide)",
                "create clusterroles.rbac.authorization.k8s.io (cluster-wide)",
                "patch clusterroles.rbac.authorization.k8s.io (cluster-wide)",
            ],
        "{err}"
    );
    let ungrantable = section(
        &err,
        "Missing to grant the rendered roles their permissions",
    );
    ensure!(
        ungrantable.contains(&"patch managedclusters.accord.io/status (cluster-wide)".to_owned()),
        "{err}"
    );
    ensure!(!namespace_exists(&admin).await?, "namespace created");
    ensure!(
        accord_crds_present(&admin).await?.is_empty(),
        "CRDs created"
    );

    // Exactly the permissions listed are enough: with them the operator installs.
    let everything: Vec<Permission> = to_apply.iter().chain(&to_grant).cloned().collect();
    grant(&admin, "accord-test-operator", &everything).await?;
    let out = install_as(&testbed, &operator).await?;
    ensure!(
        out.status.success(),
        "install with the listed permissions failed: {}",
        stderr(&out)
    );
    ensure!(
        stdout(&out).contains("accord-agent join"),
        "{}",
        stdout(&out)
    );
    ensure!(accord_crds_present(&admin).await?.len() == accord_crds::all_crds().len());
    Ok(())
}
