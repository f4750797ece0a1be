//! `kubectl accord`, the kubectl plugin (installed as `kubectl-accord` on the `PATH`): what a
//! person asks of Accord with their own kubeconfig and identity, in kubectl's conventions
//! (`-n`, `--context`, `--kubeconfig`, `-o json`, exit code 1 on an error).
//!
//! `kubectl accord placements KIND/NAME [--explain]` prints where one object is placed,
//! cluster by cluster, and with `--explain` why every other cluster is not. It reads the
//! object through the API server; the full view (every cluster, where the status lists at
//! most 20 per reason) comes from the leading hub's HTTP endpoint through the API server's
//! service proxy (`--hub-service`, which needs `get` on `services/proxy` there) or straight
//! from `--hub-http`. When neither answers, the object's status is shown and the output says
//! so.

use std::path::PathBuf;

use accord_common::distribution::PlacedKind;
use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand, ValueEnum};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};

use crate::placements::{fetch_view, parse_kind, plural, render, view_path};

/// `kubectl accord`.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl accord",
    version,
    about = "Accord, from kubectl: where objects are placed and why"
)]
pub struct Cli {
    /// Path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The object's namespace (default: the context's).
    #[arg(short, long, global = true)]
    pub namespace: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// The status (or the hub's full view) as JSON.
    Json,
}

/// `kubectl accord` commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print where one object is placed, cluster by cluster.
    Placements {
        /// KIND/NAME; KIND as in `kubectl get` (FederatedResource, fres, fkt, fku, ccsp,
        /// pfed, ...).
        object: String,
        /// Also list every cluster left out, by reason.
        #[arg(long)]
        explain: bool,
        /// Output format.
        #[arg(short, long, value_enum)]
        output: Option<Output>,
        /// The hub's HTTP Service, NAMESPACE/NAME:PORT, reached through the API server's
        /// service proxy for the full view.
        #[arg(long, default_value = "accord-system/accord-hub-metrics:http")]
        hub_service: String,
        /// The leading hub's HTTP endpoint, asked directly instead of through
        /// --hub-service (e.g. after `kubectl port-forward`).
        #[arg(long)]
        hub_http: Option<String>,
    },
    /// Follow or steer an object's progressive rollout (`spec.rollout`).
    Rollout {
        /// What to do with the rollout.
        #[command(subcommand)]
        command: RolloutCommand,
    },
}

/// `kubectl accord rollout` commands.
#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Print where the rollout is; with -w, a line per change until it ends (exit code 1
    /// when it failed or was rolled back).
    Status {
        /// KIND/NAME.
        object: String,
        /// Watch until the rollout ends.
        #[arg(short, long)]
        watch: bool,
        /// Output format.
        #[arg(short, long, value_enum)]
        output: Option<Output>,
    },
    /// Hold the rollout before its next step (`spec.rollout.paused: true`).
    Pause {
        /// KIND/NAME.
        object: String,
    },
    /// Let a paused rollout go on.
    Resume {
        /// KIND/NAME.
        object: String,
    },
    /// List the object's revisions (its ControllerRevisions, at most ten).
    History {
        /// KIND/NAME.
        object: String,
        /// Output format.
        #[arg(short, long, value_enum)]
        output: Option<Output>,
    },
    /// Write an earlier revision's spec back into the object (spec.rollout kept): your
    /// change, rolled out as any other.
    Undo {
        /// KIND/NAME.
        object: String,
        /// The revision to go back to (default: the one before the current).
        #[arg(long)]
        to_revision: Option<i64>,
    },
}

/// `KIND/NAME` as `kubectl accord placements` takes it.
pub fn parse_kind_name(s: &str) -> anyhow::Result<(PlacedKind, String)> {
    match s.split('/').collect::<Vec<_>>()[..] {
        [kind, name] if !kind.is_empty() && !name.is_empty() => {
            Ok((parse_kind(kind)?, name.to_owned()))
        }
        _ => bail!("expected KIND/NAME, e.g. fkt/orders (the namespace comes from -n); got {s:?}"),
    }
}

/// Where a status shown came from.
#[derive(Debug, PartialEq, Eq)]
pub enum Source {
    /// The leading hub's full view.
    Hub,
    /// The object's status; the hub's view could not be had, for this reason.
    Status(String),
}

/// Runs `cli`; the text to print.
pub async fn run(cli: Cli) -> anyhow::Result<String> {
    let (client, _) =
        accord_common::apply::connect(cli.kubeconfig.as_ref(), cli.context.as_deref()).await?;
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    match cli.command {
        Command::Rollout { command } => rollout(&client, &namespace, command).await,
        Command::Placements {
            object,
            explain,
            output,
            hub_service,
            hub_http,
        } => {
            let named = Named::parse(&client, &namespace, &object)?;
            let found = named.get().await?;
            let path = view_path(named.kind, &namespace, &named.name);
            let view = match &hub_http {
                Some(url) => hub_view(&format!("{}{path}", url.trim_end_matches('/'))).await,
                None => proxied_view(&client, &hub_service, &path).await,
            };
            let (status, source) = match view {
                Ok(full) => (full, Source::Hub),
                Err(e) => (
                    found.data.get("status").cloned().unwrap_or_default(),
                    Source::Status(format!("{e:#}")),
                ),
            };
            Ok(match output {
                Some(Output::Json) => format!("{}\n", serde_json::to_string_pretty(&status)?),
                None => shown(&status, &source, explain),
            })
        }
    }
}

/// One object a command names (KIND/NAME in a namespace), read as the user.
struct Named {
    api: Api<DynamicObject>,
    kind: PlacedKind,
    namespace: String,
    name: String,
}

impl Named {
    /// `object` (KIND/NAME) in `namespace`.
    fn parse(client: &kube::Client, namespace: &str, object: &str) -> anyhow::Result<Self> {
        let (kind, name) = parse_kind_name(object)?;
        let gvk = GroupVersionKind::gvk("accord.io", "v1beta1", kind.as_str());
        let resource = ApiResource::from_gvk_with_plural(&gvk, &plural(kind));
        Ok(Self {
            api: Api::namespaced_with(client.clone(), namespace, &resource),
            kind,
            namespace: namespace.to_owned(),
            name,
        })
    }

    /// The object as it is now; an error naming it when it is not there.
    async fn get(&self) -> anyhow::Result<DynamicObject> {
        let (kind, namespace, name) = (self.kind, &self.namespace, &self.name);
        self.api
            .get_opt(name)
            .await
            .with_context(|| format!("reading {kind} {namespace}/{name}"))?
            .with_context(|| format!("{kind} {namespace}/{name} not found"))
    }

    /// `KIND NAMESPACE/NAME`, for messages.
    fn said(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
}

async fn rollout(
    client: &kube::Client,
    namespace: &str,
    command: RolloutCommand,
) -> anyhow::Result<String> {
    match command {
        RolloutCommand::Status {
            object,
            watch,
            output,
        } => {
            let named = Named::parse(client, namespace, &object)?;
            let read = || async {
                let found = named.get().await?;
                anyhow::Ok(found.data.pointer("/status/rollout").cloned())
            };
            let mut last = None;
            loop {
                let status = read().await?;
                let line = rollout_line(status.as_ref());
                let phase = status
                    .as_ref()
                    .and_then(|s| s["phase"].as_str())
                    .unwrap_or_default()
                    .to_owned();
                if !watch {
                    return Ok(match output {
                        Some(Output::Json) => format!(
                            "{}\n",
                            serde_json::to_string_pretty(&status.unwrap_or_default())?
                        ),
                        None => format!("{line}\n"),
                    });
                }
                if last.as_ref() != Some(&line) {
                    println!("{line}");
                    last = Some(line.clone());
                }
                match phase.as_str() {
                    "Succeeded" => return Ok(String::new()),
                    "RolledBack" | "Failed" => {
                        bail!("the rollout of {} ended {phase}", named.said())
                    }
                    _ => tokio::time::sleep(std::time::Duration::from_secs(1)).await,
                }
            }
        }
        RolloutCommand::History { object, output } => {
            let (found, revisions) = history(client, namespace, &object).await?;
            let current = found
                .data
                .pointer("/status/rollout/revision")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned();
            Ok(match output {
                Some(Output::Json) => format!(
                    "{}\n",
                    serde_json::to_string_pretty(
                        &revisions.iter().map(Revision::json).collect::<Vec<_>>()
                    )?
                ),
                None => history_table(&revisions, &current),
            })
        }
        RolloutCommand::Undo {
            object,
            to_revision,
        } => undo(client, namespace, &object, to_revision).await,
        RolloutCommand::Pause { object } => set_paused(client, namespace, &object, true).await,
        RolloutCommand::Resume { object } => set_paused(client, namespace, &object, false).await,
    }
}

/// One revision of an object, as its ControllerRevision keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Revision {
    /// Its number.
    pub number: i64,
    /// Its hash (`status.rollout.revision`).
    pub hash: String,
    /// The object's generation when it was first seen.
    pub generation: String,
    /// When it was made.
    pub created: String,
    /// How its rollout ended (empty while it runs).
    pub outcome: String,
    /// The spec it delivered (without `spec.rollout`).
    pub spec: serde_json::Value,
}

impl Revision {
    fn of(r: &k8s_openapi::api::apps::v1::ControllerRevision) -> Self {
        use crate::controllers::placement::revisions as names;
        let annotation = |k: &str| {
            r.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(k).cloned())
                .unwrap_or_default()
        };
        Self {
            number: r.revision,
            hash: annotation(names::HASH_ANNOTATION),
            generation: annotation(names::GENERATION_ANNOTATION),
            created: r
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
            outcome: annotation(names::OUTCOME_ANNOTATION),
            spec: r
                .data
                .as_ref()
                .map(|d| d.0["spec"].clone())
                .unwrap_or_default(),
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "revision": self.number, "hash": self.hash, "generation": self.generation,
            "created": self.created, "outcome": self.outcome, "spec": self.spec,
        })
    }
}

/// The object and its revisions, oldest first.
async fn history(
    client: &kube::Client,
    namespace: &str,
    object: &str,
) -> anyhow::Result<(DynamicObject, Vec<Revision>)> {
    let named = Named::parse(client, namespace, object)?;
    let found = named.get().await?;
    let uid = found.metadata.uid.clone().unwrap_or_default();
    let revisions: Api<k8s_openapi::api::apps::v1::ControllerRevision> =
        Api::namespaced(client.clone(), namespace);
    let listed = revisions
        .list(&kube::api::ListParams::default().labels(&format!(
            "{}={uid}",
            crate::controllers::placement::revisions::OWNER_UID_LABEL
        )))
        .await
        .with_context(|| format!("listing the ControllerRevisions of {}", named.said()))?;
    let mut out: Vec<Revision> = listed.items.iter().map(Revision::of).collect();
    out.sort_by_key(|r| r.number);
    Ok((found, out))
}

/// `history` as a table, the current revision marked.
pub fn history_table(revisions: &[Revision], current: &str) -> String {
    if revisions.is_empty() {
        return "no revisions (the object has no progressive spec.rollout, or none was rolled out yet)\n"
            .to_owned();
    }
    let mut out = format!(
        "{:<9} {:<17} {:<11} {:<26} OUTCOME\n",
        "REVISION", "HASH", "GENERATION", "CREATED"
    );
    for r in revisions {
        let outcome = match (r.outcome.as_str(), r.hash == current) {
            ("", true) => "(current, rolling out)".to_owned(),
            (o, true) => format!("{o} (current)"),
            (o, false) => o.to_owned(),
        };
        out.push_str(&format!(
            "{:<9} {:<17} {:<11} {:<26} {outcome}\n",
            r.number, r.hash, r.generation, r.created
        ));
    }
    out
}

/// Writes revision `to` (default: the one before the current) back into `object`'s spec,
/// keeping its `spec.rollout`, as the user.
async fn undo(
    client: &kube::Client,
    namespace: &str,
    object: &str,
    to: Option<i64>,
) -> anyhow::Result<String> {
    let (found, revisions) = history(client, namespace, object).await?;
    let named = Named::parse(client, namespace, object)?;
    let (api, kind, name) = (&named.api, named.kind, &named.name);
    let current = found
        .data
        .pointer("/status/rollout/revision")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let current_number = revisions
        .iter()
        .find(|r| r.hash == current)
        .map_or(i64::MAX, |r| r.number);
    let chosen = match to {
        Some(n) => revisions
            .iter()
            .find(|r| r.number == n)
            .with_context(|| format!("{kind} {namespace}/{name} has no revision {n}"))?,
        None => revisions
            .iter()
            .rev()
            .find(|r| r.number < current_number)
            .with_context(|| {
                format!("{kind} {namespace}/{name} has no revision before the current one")
            })?,
    };
    let mut spec = chosen.spec.clone();
    if let (Some(o), Some(rollout)) = (spec.as_object_mut(), found.data.pointer("/spec/rollout")) {
        o.insert("rollout".to_owned(), rollout.clone());
    }
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/metadata/resourceVersion",
         "value": found.metadata.resource_version},
        {"op": "replace", "path": "/spec", "value": spec},
    ]))?;
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Json::<()>(patch),
    )
    .await
    .with_context(|| {
        format!(
            "writing revision {} back into {kind} {namespace}/{name}",
            chosen.number
        )
    })?;
    Ok(format!(
        "{kind} {namespace}/{name} rolled back to revision {} ({})\n",
        chosen.number, chosen.hash
    ))
}

/// Sets or clears `spec.rollout.paused` of `object`, as the user.
async fn set_paused(
    client: &kube::Client,
    namespace: &str,
    object: &str,
    paused: bool,
) -> anyhow::Result<String> {
    let named = Named::parse(client, namespace, object)?;
    let found = named.get().await?;
    let (api, kind, name) = (&named.api, named.kind, &named.name);
    if found.data.pointer("/spec/rollout").is_none() {
        bail!(
            "{kind} {namespace}/{name} has no spec.rollout: its changes reach every cluster at once"
        );
    }
    let value = if paused {
        serde_json::json!(true)
    } else {
        serde_json::Value::Null
    };
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"spec": {"rollout": {"paused": value}}})),
    )
    .await
    .with_context(|| format!("patching {kind} {namespace}/{name}"))?;
    Ok(format!(
        "{kind} {namespace}/{name} rollout {}\n",
        if paused { "paused" } else { "resumed" }
    ))
}

/// One line of `status.rollout`.
pub fn rollout_line(status: Option<&serde_json::Value>) -> String {
    let Some(r) = status else {
        return "no progressive rollout (spec.rollout unset or strategy All)".to_owned();
    };
    let n = |k: &str| r[k].as_i64().unwrap_or_default();
    let group = r["currentGroup"]
        .as_str()
        .map(|g| format!(" (group {g})"))
        .unwrap_or_default();
    let mut line = format!(
        "revision {}: {}, step {}{group}: {} updating, {} succeeded, {} failed, {} waiting",
        r["revision"].as_str().unwrap_or_default(),
        r["phase"].as_str().unwrap_or_default(),
        n("step"),
        n("updating"),
        n("succeeded"),
        n("failed"),
        n("waiting"),
    );
    for f in r["failedClusters"].as_array().into_iter().flatten() {
        line.push_str(&format!(
            "\n  failed: {}: {}",
            f["cluster"].as_str().unwrap_or_default(),
            f["reason"].as_str().unwrap_or_default()
        ));
    }
    line
}

/// The text of `status` from `source`.
pub fn shown(status: &serde_json::Value, source: &Source, explain: bool) -> String {
    let mut out = render(status, explain);
    if let Source::Status(why) = source {
        out.push_str(&format!(
            "\n(from the object's status, which names at most 20 clusters per reason; the hub's \
             full view: {why})\n"
        ));
    }
    out
}

async fn hub_view(url: &str) -> anyhow::Result<serde_json::Value> {
    let body = fetch_view(url).await?;
    serde_json::from_str(&body).with_context(|| format!("{url} answered with no JSON"))
}

/// The view at `path` on the hub's HTTP Service `service` (NAMESPACE/NAME:PORT), through the
/// API server's service proxy.
async fn proxied_view(
    client: &kube::Client,
    service: &str,
    path: &str,
) -> anyhow::Result<serde_json::Value> {
    let Some((namespace, name_port)) = service.split_once('/') else {
        bail!("--hub-service {service:?}: expected NAMESPACE/NAME:PORT");
    };
    let url = format!("/api/v1/namespaces/{namespace}/services/{name_port}/proxy{path}");
    let request = http::Request::get(&url).body(Vec::new())?;
    let text = client.request_text(request).await.map_err(|e| match e {
        // The API server's own words, not the whole Status.
        kube::Error::Api(s) => {
            anyhow::anyhow!("the service proxy of {service}: {} {}", s.code, s.message)
        }
        e => anyhow::Error::new(e).context(format!("the service proxy of {service}")),
    })?;
    serde_json::from_str(&text).with_context(|| format!("{url} answered with no JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_a_kind_and_a_name() {
        assert_eq!(
            parse_kind_name("fkt/orders").unwrap(),
            (PlacedKind::FederatedKafkaTopic, "orders".to_owned())
        );
        for bad in ["fkt", "fkt/", "/orders", "fkt/default/orders"] {
            let e = parse_kind_name(bad).unwrap_err().to_string();
            assert!(e.contains("KIND/NAME"), "{bad}: {e}");
        }
        assert!(parse_kind_name("deploy/x").is_err());
    }

    #[test]
    fn a_status_read_instead_of_the_hubs_view_says_so() {
        let status = serde_json::json!({"placements": [{"cluster": "a", "state": "Synced"}]});
        let from_hub = shown(&status, &Source::Hub, false);
        assert!(from_hub.contains("Synced") && !from_hub.contains("full view"));
        let from_status = shown(&status, &Source::Status("403 Forbidden".into()), false);
        assert!(from_status.contains("403 Forbidden") && from_status.contains("at most 20"));
    }

    #[test]
    fn kubectls_flags_parse() {
        let cli = Cli::try_parse_from([
            "kubectl-accord",
            "placements",
            "fkt/orders",
            "-n",
            "team",
            "--explain",
            "-o",
            "json",
        ])
        .unwrap();
        assert_eq!(cli.namespace.as_deref(), Some("team"));
        assert!(matches!(
            cli.command,
            Command::Placements {
                explain: true,
                output: Some(Output::Json),
                ..
            }
        ));
    }

    #[test]
    fn rollout_commands_parse_and_print_as_kubectl_would() {
        let cli = Cli::try_parse_from([
            "kubectl-accord",
            "rollout",
            "undo",
            "fres/web",
            "--to-revision",
            "2",
            "-n",
            "shop",
        ])
        .unwrap();
        assert!(matches!(
            cli.command,
            Command::Rollout {
                command: RolloutCommand::Undo {
                    to_revision: Some(2),
                    ..
                }
            }
        ));
        assert!(
            Cli::try_parse_from(["kubectl-accord", "rollout", "status", "-w", "fres/web"]).is_ok()
        );
        let line = rollout_line(Some(&serde_json::json!({
            "revision": "abc", "phase": "RolledBack", "step": 1, "updating": 0,
            "succeeded": 0, "failed": 1, "waiting": 2, "currentGroup": "0",
            "failedClusters": [{"cluster": "east", "reason": "not healthy within 20s"}]
        })));
        assert_eq!(
            line,
            "revision abc: RolledBack, step 1 (group 0): 0 updating, 0 succeeded, 1 failed, 2 waiting\n  failed: east: not healthy within 20s"
        );
        assert!(rollout_line(None).starts_with("no progressive rollout"));
        let revision = |number, hash: &str, outcome: &str| Revision {
            number,
            hash: hash.into(),
            generation: number.to_string(),
            created: "2026-12-07T10:00:00Z".into(),
            outcome: outcome.into(),
            spec: serde_json::Value::Null,
        };
        let table = history_table(
            &[revision(1, "aaa", "Succeeded"), revision(2, "bbb", "")],
            "bbb",
        );
        let rows: Vec<&str> = table.lines().collect();
        assert!(rows[0].starts_with("REVISION"), "{table}");
        assert!(rows[1].ends_with("Succeeded"), "{table}");
        assert!(rows[2].ends_with("(current, rolling out)"), "{table}");
    }
}
