//! The committed plain manifests are what `accord-hub install` renders, and the installer's
//! command line fails clearly on bad flags and unreachable clusters. No cluster needed:
//! these run the real binary only where it stops before touching one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use accord_hub::install::{InstallOptions, dry_run_output};

const REGENERATE: &str = "cargo run -q -p accord-hub -- install --dry-run --with-etcd > deploy/manifests/accord-hub.yaml";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("hub/ has a parent")
        .to_path_buf()
}

fn hub(args: &[&str], kubeconfig: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_accord-hub"))
        .arg("install")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .output()
        .expect("running accord-hub")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn committed_hub_manifest_is_the_dry_run_output_with_default_options() {
    let path = repo_root().join("deploy/manifests/accord-hub.yaml");
    let committed =
        std::fs::read_to_string(&path).expect("reading deploy/manifests/accord-hub.yaml");
    let rendered = dry_run_output(&InstallOptions::default()).expect("rendering");
    assert!(
        committed == rendered,
        "{} differs from `accord-hub install --dry-run --with-etcd`; regenerate it with\n  {REGENERATE}",
        path.display()
    );
}

#[test]
fn dry_run_prints_the_manifest_without_needing_a_cluster() {
    let nowhere = Path::new("/nonexistent/kubeconfig");
    let out = hub(&["--dry-run", "--with-etcd"], nowhere);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let committed =
        std::fs::read_to_string(repo_root().join("deploy/manifests/accord-hub.yaml")).unwrap();
    assert_eq!(text(&out.stdout), committed);
}

#[test]
fn install_without_an_etcd_choice_is_refused_naming_both_ways() {
    let out = hub(&["--dry-run"], Path::new("/nonexistent"));
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = text(&out.stderr);
    assert!(
        err.contains("--etcd-endpoints") && err.contains("--with-etcd"),
        "{err}"
    );
}

#[test]
fn invalid_flag_values_are_refused_before_anything_happens() {
    for (args, needle) in [
        (
            vec!["--dry-run", "--with-etcd", "--namespace", "Accord"],
            "invalid --namespace \"Accord\"",
        ),
        (
            vec!["--dry-run", "--etcd-endpoints", "etcd:2379"],
            "invalid --etcd-endpoints entry \"etcd:2379\"",
        ),
        (
            vec!["--dry-run", "--with-etcd", "--replicas", "0"],
            "--replicas 0",
        ),
        (
            vec!["--dry-run", "--with-etcd", "--hub-url", "hub:7443"],
            "invalid --hub-url \"hub:7443\"",
        ),
    ] {
        let out = hub(&args, Path::new("/nonexistent"));
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(out.stdout.is_empty(), "{args:?} printed objects");
        let err = text(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn an_unreachable_api_server_is_named_in_the_error() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: gone
  cluster: {{server: 'https://127.0.0.1:{port}', insecure-skip-tls-verify: true}}
users:
- name: someone
  user: {{token: abc}}
contexts:
- name: gone
  context: {{cluster: gone, user: someone}}
current-context: gone
"
        ),
    )
    .unwrap();
    let out = hub(&["--etcd-endpoints", "http://127.0.0.1:2379"], &kubeconfig);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "cannot reach the Kubernetes API server at https://127.0.0.1:{port}"
        )),
        "{err}"
    );
}

#[test]
fn a_missing_kubeconfig_is_named_in_the_error() {
    let out = hub(
        &[
            "--with-etcd",
            "--kubeconfig",
            "/nonexistent/mgmt.kubeconfig",
        ],
        Path::new("/nonexistent"),
    );
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("cannot use kubeconfig /nonexistent/mgmt.kubeconfig"),
        "{err}"
    );
}
