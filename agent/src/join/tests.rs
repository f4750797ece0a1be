use super::*;
use clap::Parser as _;

use crate::cli::{Cli, Command};

const HASH: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// `join` with the required flags plus `extra`; a required flag in `extra` replaces its
/// default.
fn parse(extra: &[&str]) -> Result<JoinArgs, clap::Error> {
    let mut argv = vec!["accord-agent", "join"];
    for (flag, value) in [
        ("--hub", "https://127.0.0.1:7443"),
        ("--token", "abcdef.0123456789abcdef"),
        ("--ca-cert-hash", HASH),
        ("--cluster-name", "east"),
    ] {
        if !extra.contains(&flag) {
            argv.extend([flag, value]);
        }
    }
    argv.extend_from_slice(extra);
    match Cli::try_parse_from(argv)?.command {
        Command::Join(args) => Ok(args),
        other => panic!("expected join, got {other:?}"),
    }
}

fn identity_of(cluster: &str, hub: &str) -> Secret {
    let ca = accord_common::pki::HubCa::generate("test CA").unwrap();
    let csr = accord_common::pki::agent_csr(cluster).unwrap();
    let signed = ca
        .sign_agent_csr(&csr.csr_pem, cluster, Duration::from_secs(3600))
        .unwrap();
    identity_secret(
        "accord-system",
        &IdentityMaterial {
            hub_url: hub.into(),
            cluster: cluster.into(),
            server_name: None,
            ca_pem: ca.cert_pem().to_owned(),
            cert_pem: signed.cert_pem,
            key_pem: csr.key_pem,
        },
    )
}

#[test]
fn the_flags_of_the_design_parse_and_the_token_stays_out_of_debug_output() {
    let args = parse(&[
        "--labels",
        "region=eu,tier=prod",
        "--kubeconfig",
        "m.kubeconfig",
    ])
    .unwrap();
    assert_eq!(args.hub, "https://127.0.0.1:7443");
    assert_eq!(args.cluster_name, "east");
    assert_eq!(args.labels.0.get("region").map(String::as_str), Some("eu"));
    assert_eq!(args.labels.0.len(), 2);
    assert!(!args.run && !args.dry_run && !args.force);
    assert_eq!(args.server_name(), "localhost");
    assert!(!format!("{args:?}").contains("0123456789abcdef"));
    assert!(args.token.0.parse::<BootstrapToken>().is_ok());
    assert_eq!(args.manifest_options(), AgentManifestOptions::default());
}

#[test]
fn bad_flags_are_refused_before_anything_is_contacted() {
    for (flags, needle) in [
        (&["--hub", "http://hub:7443"][..], "https://"),
        (&["--ca-cert-hash", "md5:00"][..], "sha256:"),
        (&["--cluster-name", "East_1"][..], "cluster name"),
        (&["--labels", "novalue"][..], "KEY=VALUE"),
        (&["--labels", "a=b,a=c"][..], "given twice"),
        (&["--labels=-bad=x"][..], "label key"),
        (&["--run", "--dry-run"][..], "cannot be used with"),
    ] {
        let err = parse(flags).unwrap_err().to_string();
        assert!(err.contains(needle), "{flags:?}: {err}");
    }
}

#[test]
fn labels_accept_prefixes_and_empty_values() {
    let labels = parse_labels("example.com/team=core, env=").unwrap();
    assert_eq!(labels.0.get("example.com/team").unwrap(), "core");
    assert_eq!(labels.0.get("env").unwrap(), "");
    assert!(parse_labels("").unwrap().0.is_empty());
    assert!(parse_labels(&format!("k={}", "v".repeat(64))).is_err());
}

#[test]
fn an_existing_identity_is_reused_only_for_the_same_name_and_hub() {
    let args = parse(&[]).unwrap();
    let (decision, _) = existing_identity(&args, None).unwrap();
    assert_eq!(decision, Existing::Register);

    let same = identity_of("east", "https://127.0.0.1:7443");
    let (decision, _) = existing_identity(&args, Some(&same)).unwrap();
    assert_eq!(decision, Existing::Reuse);

    let other = identity_of("west", "https://127.0.0.1:7443");
    let err = existing_identity(&args, Some(&other)).unwrap_err();
    assert!(
        matches!(&err, JoinError::AlreadyJoined { cluster, .. } if cluster == "west"),
        "{err}"
    );
    assert!(err.to_string().contains("--force"), "{err}");
    assert!(err.token_still_usable());

    let forced = parse(&["--force"]).unwrap();
    let (decision, previous) = existing_identity(&forced, Some(&other)).unwrap();
    assert_eq!(decision, Existing::Register);
    assert_eq!(previous.unwrap().cluster, "west");

    let mut broken = same.clone();
    broken.data.as_mut().unwrap().remove("tls.key");
    let err = existing_identity(&args, Some(&broken)).unwrap_err();
    assert!(matches!(err, JoinError::BrokenIdentity { .. }), "{err}");
    assert!(existing_identity(&forced, Some(&broken)).is_ok());
}

#[test]
fn join_needs_to_apply_every_object_and_read_its_identity() {
    let objects = render(&AgentManifestOptions::default());
    let needed = required_permissions(&objects, "accord-system");
    for p in [
        Permission::new("rbac.authorization.k8s.io", "clusterroles", "create"),
        Permission::new("apps", "deployments", "patch").in_namespace(Some("accord-system")),
        Permission::new("", "secrets", "get")
            .in_namespace(Some("accord-system"))
            .named(Some("accord-agent-identity")),
    ] {
        assert!(needed.contains(&p), "{p} missing");
    }
    let granted = preflight::granted_permissions(&objects);
    assert!(granted.contains(&Permission::new("apps", "deployments", "patch")));
    // Deletes: the federation ConfigMap it wrote, by name, in its own namespace, and the
    // default set of kinds FederatedResources deliver (removal and pruning), never Secrets.
    let delivered = |p: &Permission| {
        render::delivery_default_rules()
            .as_array()
            .unwrap()
            .iter()
            .any(|rule| {
                rule["apiGroups"][0] == p.group.as_str()
                    && rule["resources"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|r| r == p.resource.as_str())
                    && rule["verbs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|v| v == "delete")
            })
    };
    assert!(
        granted.iter().all(|p| p.resource != "*"
            && (p.verb != "delete"
                || (p.resource == "configmaps"
                    && p.name.as_deref() == Some("prometheus-federation")
                    && p.namespace.as_deref() == Some("accord-system"))
                || (p.namespace.is_none() && p.name.is_none() && delivered(p)))),
        "{granted:?}"
    );
    assert!(
        granted
            .iter()
            .all(|p| p.resource != "secrets" || p.name.is_some() || delivered(p)),
        "{granted:?}"
    );
}

#[test]
fn join_points_the_agent_at_its_kafka_secret_and_may_read_only_that_one() {
    let args = parse(&["--kafka-secret", "kafka-prod", "--namespace", "accord"]).unwrap();
    let options = args.manifest_options();
    assert_eq!(options.kafka_secret, "kafka-prod");
    let objects = render(&options);
    let deployment = objects.last().unwrap();
    let container_args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        container_args
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("--kafka-secret=kafka-prod")),
        "{container_args}"
    );
    assert!(parse(&["--kafka-secret", "ns/name"]).is_err());

    let granted = preflight::granted_permissions(&objects);
    // Named Secrets: its own; unnamed ones only in the delivery defaults (secretRefs).
    let secrets: Vec<&Permission> = granted
        .iter()
        .filter(|p| p.resource == "secrets" && p.name.is_some())
        .collect();
    let mut kafka: Vec<&str> = secrets
        .iter()
        .filter(|p| p.name.as_deref() == Some("kafka-prod"))
        .map(|p| p.verb.as_str())
        .collect();
    kafka.sort_unstable();
    assert_eq!(kafka, ["get", "list", "watch"], "{secrets:?}");
    // Every Secret permission names its Secret and stays in the agent's namespace; the only
    // Secrets are the identity and the Kafka connection, and only the identity may be
    // written (a renewed certificate).
    for p in &secrets {
        assert_eq!(p.namespace.as_deref(), Some("accord"), "{p}");
        assert!(
            matches!(
                p.name.as_deref(),
                Some("kafka-prod" | "accord-agent-identity")
            ),
            "{p}"
        );
        let write_allowed = p.name.as_deref() == Some("accord-agent-identity") && p.verb == "patch";
        assert!(
            write_allowed || matches!(p.verb.as_str(), "get" | "list" | "watch"),
            "{p}"
        );
    }
}

#[test]
fn the_default_kafka_secret_needs_no_flag_and_is_still_granted() {
    let options = AgentManifestOptions::default();
    assert_eq!(options.kafka_secret, "accord-kafka");
    let objects = render(&options);
    let container_args =
        &objects.last().unwrap()["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        !container_args.to_string().contains("--kafka-secret"),
        "{container_args}"
    );
    let granted = preflight::granted_permissions(&objects);
    assert!(
        granted.contains(
            &Permission::new("", "secrets", "watch")
                .in_namespace(Some("accord-system"))
                .named(Some("accord-kafka"))
        )
    );
}

#[test]
fn join_renders_the_replicas_asked_for_and_grants_only_the_agent_lease() {
    let args = parse(&["--replicas", "2"]).unwrap();
    let options = args.manifest_options();
    assert_eq!(options.replicas, 2);
    let objects = render(&options);
    assert_eq!(objects.last().unwrap()["spec"]["replicas"], 2);
    assert_eq!(
        render(&AgentManifestOptions::default()).last().unwrap()["spec"]["replicas"],
        1
    );
    for bad in ["0", "11", "-1", "two"] {
        assert!(parse(&["--replicas", bad]).is_err(), "{bad:?} accepted");
    }
    assert!(parse(&["--replicas", "2", "--run"]).is_err());

    let granted = preflight::granted_permissions(&objects);
    let mut leases: Vec<(Option<&str>, &str)> = granted
        .iter()
        .filter(|p| p.resource == "leases")
        .map(|p| {
            assert_eq!(p.group, "coordination.k8s.io", "{p}");
            assert_eq!(p.namespace.as_deref(), Some("accord-system"), "{p}");
            (p.name.as_deref(), p.verb.as_str())
        })
        .collect();
    leases.sort_unstable();
    // Read and replace the one Lease by name; create cannot be limited to a name.
    assert_eq!(
        leases,
        [
            (None, "create"),
            (Some("accord-agent"), "get"),
            (Some("accord-agent"), "update")
        ]
    );
}

#[test]
fn the_agent_charts_rules_are_generated() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/helm/accord-agent/templates/_generated.tpl");
    accord_common::manifest::assert_generated(
        &path,
        "deploy/helm/accord-agent/templates/_generated.tpl",
        &render::helm_generated_template().unwrap(),
        "cargo test -p accord-agent --lib join",
    );
}
