//! The committed agent manifest is what `accord-agent join --dry-run` prints, and join's
//! flags are checked before anything is contacted. No cluster or hub needed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use accord_agent::join::{AgentManifestOptions, dry_run_output};

const HASH: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

fn manifest_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/manifests/accord-agent.yaml")
}

fn join(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_accord-agent"))
        .arg("join")
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("ACCORD_JOIN_TOKEN")
        .output()
        .expect("running accord-agent")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn committed_agent_manifest_is_the_dry_run_output_with_default_options() {
    let committed = std::fs::read_to_string(manifest_path()).expect("reading the manifest");
    let rendered = dry_run_output(&AgentManifestOptions::default()).expect("rendering");
    assert!(
        committed == rendered,
        "deploy/manifests/accord-agent.yaml differs from `accord-agent join --dry-run`; \
         regenerate it with the command in deploy/manifests/README.md"
    );
}

#[test]
fn dry_run_prints_the_manifest_without_contacting_anything() {
    let out = join(&[
        "--dry-run",
        "--hub",
        "https://hub.invalid:7443",
        "--token",
        "abcdef.0123456789abcdef",
        "--ca-cert-hash",
        HASH,
        "--cluster-name",
        "example",
    ]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let committed = std::fs::read_to_string(manifest_path()).unwrap();
    assert_eq!(text(&out.stdout), committed);
}

#[test]
fn a_malformed_token_is_refused_without_echoing_it_or_contacting_anything() {
    let out = join(&[
        "--hub",
        "https://hub.invalid:7443",
        "--token",
        "abcdef.SECRETSECRETSECR",
        "--ca-cert-hash",
        HASH,
        "--cluster-name",
        "example",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("--token: malformed bootstrap token"), "{err}");
    assert!(err.contains("the bootstrap token was not used"), "{err}");
    // Refused before the kubeconfig was read.
    assert!(!err.contains("kubeconfig"), "{err}");
    assert!(!err.contains("SECRETSECRETSECR"), "the token leaked: {err}");
}
