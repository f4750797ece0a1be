//! The hub on an etcd run as production runs it: client TLS, `--client-cert-auth` and
//! authentication (the testbed's hub etcd). The hub serves and leads there; wrong
//! credentials, a wrong CA, a missing client certificate or an unreachable endpoint end
//! `serve` at once with one error line naming the endpoint and the cause.

use accord_e2e::hub::{HUB_NAMESPACE, HubOptions, HubProcess, accord_binary, create_token};
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use anyhow::{Context as _, Result, ensure};
use std::time::Duration;

static TESTBED: SharedTestbed =
    SharedTestbed::new(|b| b.members(0).without_mgmt_controller_manager());
/// One hub at a time: every hub's leader writes to the same management cluster.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How long a refused `serve` may take to exit (the connect timeout is 5 s).
const EXIT_DEADLINE: Duration = Duration::from_secs(30);

/// Runs `accord-hub serve` with `etcd_args` and waits for it to exit; returns whether it
/// succeeded and its stderr.
async fn serve_until_exit(testbed: &Testbed, etcd_args: &[String]) -> Result<(bool, String)> {
    accord_e2e::hub::ensure_hub_namespace(testbed).await?;
    let port = |_: ()| accord_e2e::ports::free_port().map(|p| format!("127.0.0.1:{p}"));
    let mut command = tokio::process::Command::new(accord_binary("accord-hub")?);
    command
        .arg("serve")
        .arg("--kubeconfig")
        .arg(testbed.mgmt().kubeconfig_path())
        .args([
            "--etcd-prefix",
            "/t-etcd-refused/",
            "--namespace",
            HUB_NAMESPACE,
        ])
        .args(["--replica-name", "refused"])
        .args(["--grpc-addr", &port(())?, "--http-addr", &port(())?])
        .args(["--webhook-addr", &port(())?])
        .args(etcd_args)
        .kill_on_drop(true);
    let out = tokio::time::timeout(EXIT_DEADLINE, command.output())
        .await
        .context("serve kept running although etcd refused it")??;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// The `error:` lines of a hub's stderr (tracing lines carry no such prefix).
fn error_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.starts_with("error:")).collect()
}

/// The hub's etcd flags with `replace` swapped in for one flag's value.
fn args_with(testbed: &Testbed, flag: &str, value: &str) -> Vec<String> {
    let mut args = testbed.hub_etcd().hub_args();
    let at = args.iter().position(|a| a == flag).expect("flag present") + 1;
    args[at] = value.to_owned();
    args
}

#[test]
fn the_hub_serves_and_leads_on_an_etcd_with_tls_and_authentication() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let _logs = testbed.logs_on_panic();
        let prefix = "/t-etcd-tls/";
        let hub = HubProcess::start(
            testbed,
            &HubOptions {
                replica: "hub-tls".into(),
                etcd_prefix: prefix.into(),
                extra_args: Vec::new(),
            },
        )
        .await?;
        until("the hub leads", Duration::from_secs(30), || async {
            testbed.ensure_running(hub.id)?;
            Ok(
                match hub.metric(testbed.http(), "accord_hub_is_leader").await? {
                    Some(1.0) => Check::Ready(()),
                    other => Check::NotYet(format!("is_leader = {other:?}")),
                },
            )
        })
        .await?;
        // token create goes through the same flags.
        let (token, _) = create_token(testbed, prefix, "10m").await?;
        ensure!(!token.is_empty());

        // The hub's state is in its own etcd, read here as the hub's user...
        let client = testbed.hub_etcd_client().await?;
        let keys = client
            .kv_client()
            .get(
                prefix,
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_keys_only(),
                ),
            )
            .await?;
        ensure!(
            keys.kvs().len() >= 2,
            "expected the leader, presence and token keys under {prefix}, found {:?}",
            keys.kvs()
                .iter()
                .map(|kv| kv.key_str().unwrap_or("?").to_owned())
                .collect::<Vec<_>>()
        );
        // ...and none of it in the API servers' etcd.
        let mut plain = etcd_client::Client::connect([testbed.etcd_endpoint()], None).await?;
        let stray = plain
            .get(
                prefix,
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_count_only(),
                ),
            )
            .await?;
        ensure!(
            stray.count() == 0,
            "the hub wrote into the API servers' etcd"
        );

        // Without a password, etcd refuses the hub's user (the role check is real).
        let anonymous =
            etcd_client::ConnectOptions::new().with_tls(testbed.hub_etcd().tls_options()?);
        let mut anonymous =
            etcd_client::Client::connect([testbed.hub_etcd().endpoint()], Some(anonymous)).await?;
        ensure!(
            anonymous.get(prefix, None).await.is_err(),
            "the hub's etcd answered a client without credentials"
        );
        Ok(())
    });
}

#[test]
fn a_wrong_password_ends_serve_with_one_line_naming_the_endpoint_and_authentication() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let wrong = testbed.dir().join("wrong-etcd-password");
        let secret = "not-the-password-4711";
        std::fs::write(&wrong, secret)?;
        let args = args_with(
            testbed,
            "--etcd-password-file",
            &wrong.display().to_string(),
        );
        let (ok, stderr) = serve_until_exit(testbed, &args).await?;
        ensure!(!ok, "serve succeeded with a wrong password:\n{stderr}");
        let errors = error_lines(&stderr);
        ensure!(errors.len() == 1, "expected one error line:\n{stderr}");
        let endpoint = testbed.hub_etcd().endpoint();
        ensure!(
            errors[0].contains(endpoint) && errors[0].contains("authentication failed"),
            "the error names neither {endpoint} nor the cause:\n{stderr}"
        );
        ensure!(
            !stderr.contains(secret),
            "the password was printed:\n{stderr}"
        );
        ensure!(
            !stderr.contains(&testbed.hub_etcd().password),
            "the real password was printed"
        );
        Ok(())
    });
}

#[test]
fn a_wrong_ca_ends_serve_with_one_line_naming_the_endpoint_and_tls() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let other_ca = accord_e2e::pki::CertificateAuthority::new("some-other-ca")?;
        let path = testbed.dir().join("other-ca.crt");
        std::fs::write(&path, other_ca.cert_pem())?;
        let args = args_with(testbed, "--etcd-ca", &path.display().to_string());
        let (ok, stderr) = serve_until_exit(testbed, &args).await?;
        ensure!(!ok, "serve succeeded with a wrong CA:\n{stderr}");
        let errors = error_lines(&stderr);
        ensure!(errors.len() == 1, "expected one error line:\n{stderr}");
        let endpoint = testbed.hub_etcd().endpoint();
        ensure!(
            errors[0].contains(endpoint) && errors[0].contains("TLS"),
            "the error names neither {endpoint} nor TLS:\n{stderr}"
        );
        Ok(())
    });
}

#[test]
fn without_a_client_certificate_serve_ends_naming_tls() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let etcd = testbed.hub_etcd();
        let args: Vec<String> = vec![
            "--etcd-endpoints".into(),
            etcd.endpoint().to_owned(),
            "--etcd-ca".into(),
            etcd.ca.display().to_string(),
            "--etcd-username".into(),
            etcd.username.clone(),
            "--etcd-password-file".into(),
            etcd.password_file.display().to_string(),
        ];
        let (ok, stderr) = serve_until_exit(testbed, &args).await?;
        ensure!(
            !ok,
            "serve succeeded without a client certificate:\n{stderr}"
        );
        let errors = error_lines(&stderr);
        ensure!(errors.len() == 1, "expected one error line:\n{stderr}");
        ensure!(
            errors[0].contains(etcd.endpoint()) && errors[0].contains("TLS"),
            "the error names neither the endpoint nor TLS:\n{stderr}"
        );
        Ok(())
    });
}

#[test]
fn an_unreachable_etcd_ends_serve_naming_the_endpoint() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let nowhere = format!("https://127.0.0.1:{}", accord_e2e::ports::free_port()?);
        let args = args_with(testbed, "--etcd-endpoints", &nowhere);
        let (ok, stderr) = serve_until_exit(testbed, &args).await?;
        ensure!(!ok, "serve succeeded without etcd:\n{stderr}");
        let errors = error_lines(&stderr);
        ensure!(errors.len() == 1, "expected one error line:\n{stderr}");
        ensure!(
            errors[0].contains(nowhere.as_str()) && errors[0].contains("unreachable"),
            "the error names neither {nowhere} nor the cause:\n{stderr}"
        );
        Ok(())
    });
}
