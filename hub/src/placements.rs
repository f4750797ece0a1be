//! The full per-cluster view of every object the leader places — its status as it would
//! read without the bound on listed placements (`--status-placements-threshold`) — served at
//! `/placements/<kind>/<namespace>/<name>` on the HTTP endpoint and printed by
//! `accord-hub placements KIND/NAMESPACE/NAME`.

use std::str::FromStr;
use std::sync::Arc;

use accord_common::distribution::{PlacedKind, PlacedRef};
use anyhow::{Context, bail};
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use dashmap::DashMap;
use serde::Serialize;

/// Every placed object's full status, by `kind/namespace/name`; kept by the leader's
/// controllers and emptied when the term ends (a follower serves none). A view is kept as
/// the status value and rendered as JSON only when asked for: an object placed in 10,000
/// clusters is reconciled many times a second during a fan-out, and rendering its whole
/// status each time cost more than the reconcile.
#[derive(Clone, Default)]
pub struct Views(Arc<DashMap<String, Arc<dyn View>>>);

/// A status kept as a view.
pub trait View: Send + Sync {
    /// The status as JSON.
    fn json(&self) -> serde_json::Result<String>;
}

impl<T: Serialize + Send + Sync> View for T {
    fn json(&self) -> serde_json::Result<String> {
        serde_json::to_string(self)
    }
}

fn key(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

impl Views {
    /// Keeps `status` (the whole of it) as `placed`'s view.
    pub fn set(&self, placed: &PlacedRef, status: impl View + 'static) {
        self.0.insert(
            key(placed.kind.as_str(), &placed.namespace, &placed.name),
            Arc::new(status),
        );
    }

    /// Forgets `placed`'s view.
    pub fn remove(&self, placed: &PlacedRef) {
        self.0
            .remove(&key(placed.kind.as_str(), &placed.namespace, &placed.name));
    }

    /// Forgets every view (the term ended).
    pub fn clear(&self) {
        self.0.clear();
    }

    /// The view of `kind/namespace/name`.
    pub fn get(&self, kind: PlacedKind, namespace: &str, name: &str) -> Option<Arc<dyn View>> {
        self.0
            .get(&key(kind.as_str(), namespace, name))
            .map(|v| v.clone())
    }

    /// The HTTP route serving the views.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/placements/{kind}/{namespace}/{name}", get(serve_view))
            .with_state(self.clone())
    }
}

async fn serve_view(
    State(views): State<Views>,
    Path((kind, namespace, name)): Path<(String, String, String)>,
) -> Response {
    let kind = match parse_kind(&kind) {
        Ok(kind) => kind,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e:#}\n")).into_response(),
    };
    match views.get(kind, &namespace, &name).map(|view| view.json()) {
        Some(Ok(json)) => ([("content-type", "application/json")], json).into_response(),
        Some(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{kind} {namespace}/{name}: its status does not render as JSON: {e}\n"),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!(
                "{kind} {namespace}/{name} is not placed by this replica: it does not exist, or \
                 this replica does not lead (only the leader, accord_hub_is_leader 1, \
                 computes placements)\n"
            ),
        )
            .into_response(),
    }
}

/// A kind as users name it: the kind (any case), its plural or its short names, as its
/// CRD declares them.
pub fn parse_kind(s: &str) -> anyhow::Result<PlacedKind> {
    if let Ok(kind) = PlacedKind::from_str(s) {
        return Ok(kind);
    }
    let lower = s.to_ascii_lowercase();
    let crds = accord_crds::all_crds();
    let names_of = |kind: PlacedKind| {
        crds.iter()
            .find(|c| c.spec.names.kind == kind.as_str())
            .map(|c| {
                let mut names = c.spec.names.short_names.clone().unwrap_or_default();
                names.push(c.spec.names.plural.clone());
                names.push(c.spec.names.kind.to_ascii_lowercase());
                names
            })
            .unwrap_or_default()
    };
    if let Some(kind) = PlacedKind::ALL
        .into_iter()
        .find(|k| names_of(*k).contains(&lower))
    {
        return Ok(kind);
    }
    let known: Vec<&str> = PlacedKind::ALL.iter().map(|k| k.as_str()).collect();
    let short: Vec<String> = PlacedKind::ALL
        .into_iter()
        .filter_map(|k| names_of(k).into_iter().next())
        .collect();
    bail!(
        "unknown kind {s:?}: one of {} (or their short names {})",
        known.join(", "),
        short.join(", ")
    )
}

/// `KIND/NAMESPACE/NAME` as `accord-hub placements` takes it.
pub fn parse_object(s: &str) -> anyhow::Result<(PlacedKind, String, String)> {
    let parts: Vec<&str> = s.split('/').collect();
    let [kind, namespace, name] = parts[..] else {
        bail!("expected KIND/NAMESPACE/NAME, e.g. FederatedKafkaTopic/default/orders; got {s:?}")
    };
    if namespace.is_empty() || name.is_empty() {
        bail!("expected KIND/NAMESPACE/NAME with a namespace and a name; got {s:?}");
    }
    Ok((parse_kind(kind)?, namespace.to_owned(), name.to_owned()))
}

/// `accord-hub placements`: fetches the view from the hub at `hub` (its HTTP endpoint) and
/// prints it as a table (or as JSON).
pub async fn print(hub: &str, object: &str, json: bool, explain: bool) -> anyhow::Result<()> {
    let (kind, namespace, name) = parse_object(object)?;
    let url = format!(
        "{}{}",
        hub.trim_end_matches('/'),
        view_path(kind, &namespace, &name)
    );
    let body = fetch_view(&url).await?;
    if json {
        println!("{body}");
        return Ok(());
    }
    let status: serde_json::Value =
        serde_json::from_str(&body).with_context(|| format!("{url} answered with no JSON"))?;
    print!("{}", render(&status, explain));
    Ok(())
}

/// The view at `url` (a hub's `/placements/...`), as its JSON text; an answer other than
/// 2xx is an error with the hub's words.
pub async fn fetch_view(url: &str) -> anyhow::Result<String> {
    let response = reqwest::get(url)
        .await
        .with_context(|| format!("asking the hub at {url}"))?;
    let code = response.status();
    let body = response
        .text()
        .await
        .with_context(|| format!("reading the answer of {url}"))?;
    if !code.is_success() {
        bail!("{url}: {code}: {}", body.trim());
    }
    Ok(body)
}

/// A status's placements as a table, and with `explain` every cluster left out by reason.
pub fn render(status: &serde_json::Value, explain: bool) -> String {
    let mut out = table(status);
    if explain {
        out.push_str(&explanation(status));
    }
    out
}

/// The plural (`federatedkafkatopics`) of an Accord kind, as its CRD names it.
pub fn plural(kind: PlacedKind) -> String {
    accord_crds::all_crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind.as_str())
        .map(|c| c.spec.names.plural)
        .unwrap_or_else(|| format!("{}s", kind.as_str().to_ascii_lowercase()))
}

/// The path of `kind/namespace/name`'s view on the hub's HTTP endpoint.
pub fn view_path(kind: PlacedKind, namespace: &str, name: &str) -> String {
    format!("/placements/{kind}/{namespace}/{name}")
}

/// `status.selection` in lines: the decision's sentence, then every reason with its
/// clusters.
fn explanation(status: &serde_json::Value) -> String {
    let selection = &status["selection"];
    let Some(message) = selection["message"].as_str() else {
        return "no selection is recorded for this object\n".to_owned();
    };
    let mut out = format!("\n{message}\n");
    for l in selection["leftOut"].as_array().into_iter().flatten() {
        let reason = l["reason"].as_str().unwrap_or_default();
        let detail = l["detail"]
            .as_str()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default();
        let clusters: Vec<&str> = l["clusters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_str)
            .collect();
        out.push_str(&format!("{reason}{detail}: {}", l["count"]));
        if !clusters.is_empty() {
            out.push_str(&format!(": {}", clusters.join(", ")));
        }
        out.push('\n');
    }
    out
}

/// The placements of a status as a table: cluster, state, message; a count per state first.
fn table(status: &serde_json::Value) -> String {
    let placements = status["placements"].as_array().cloned().unwrap_or_default();
    let field = |p: &serde_json::Value, f: &str| p[f].as_str().unwrap_or("").to_owned();
    let mut states = std::collections::BTreeMap::<String, usize>::new();
    for p in &placements {
        *states.entry(field(p, "state")).or_default() += 1;
    }
    let counts: Vec<String> = states.iter().map(|(s, n)| format!("{s} {n}")).collect();
    let mut out = match status.get("summary").and_then(serde_json::Value::as_object) {
        // A status cut down above the threshold: its counts, and what it lists.
        Some(summary) => {
            let counts: Vec<String> = summary
                .get("states")
                .and_then(serde_json::Value::as_object)
                .into_iter()
                .flatten()
                .map(|(state, n)| {
                    let mut chars = state.chars();
                    let state: String = chars
                        .next()
                        .map(|c| c.to_ascii_uppercase())
                        .into_iter()
                        .chain(chars)
                        .collect();
                    format!("{state} {n}")
                })
                .collect();
            format!(
                "{} placements: {} (the status lists {} of those not Synced)\n",
                summary.get("total").unwrap_or(&serde_json::Value::Null),
                counts.join(", "),
                placements.len()
            )
        }
        None => format!("{} placements: {}\n", placements.len(), counts.join(", ")),
    };
    let width = placements
        .iter()
        .map(|p| field(p, "cluster").len())
        .max()
        .unwrap_or(0)
        .max("CLUSTER".len());
    out.push_str(&format!("{:width$}  {:14}  MESSAGE\n", "CLUSTER", "STATE"));
    for p in &placements {
        out.push_str(&format!(
            "{:width$}  {:14}  {}\n",
            field(p, "cluster"),
            field(p, "state"),
            field(p, "message")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_explanation_lists_every_reason_with_all_its_clusters() {
        let status = serde_json::json!({"selection": {
            "considered": 30, "placed": 1, "message": "placed in 1 of 30 clusters: ...",
            "leftOut": [
                {"reason": "NotSelected", "count": 5},
                {"reason": "Tainted", "detail": "k:NoSchedule", "count": 2, "clusters": ["a", "b"]},
            ]
        }});
        assert_eq!(
            explanation(&status),
            "\nplaced in 1 of 30 clusters: ...\nNotSelected: 5\nTainted (k:NoSchedule): 2: a, b\n"
        );
        assert!(explanation(&serde_json::json!({})).contains("no selection"));
    }

    #[test]
    fn a_cut_down_status_is_counted_from_its_summary() {
        let status = serde_json::json!({
            "summary": {"total": 3, "states": {"synced": 2, "unavailable": 1}, "listed": 1},
            "placements": [{"cluster": "a", "state": "Unavailable"}],
        });
        let shown = table(&status);
        assert!(
            shown.starts_with(
                "3 placements: Synced 2, Unavailable 1 (the status lists 1 of those not Synced)"
            ),
            "{shown}"
        );
    }

    #[test]
    fn kinds_are_known_by_name_plural_and_short_name_and_others_are_refused() {
        for s in ["FederatedKafkaTopic", "federatedkafkatopics", "fkt", "FKT"] {
            assert_eq!(
                parse_kind(s).unwrap(),
                PlacedKind::FederatedKafkaTopic,
                "{s}"
            );
        }
        assert_eq!(
            parse_kind("ccsp").unwrap(),
            PlacedKind::CrossClusterScalePolicy
        );
        assert_eq!(
            parse_kind("pfed").unwrap(),
            PlacedKind::PrometheusFederation
        );
        assert_eq!(parse_kind("fres").unwrap(), PlacedKind::FederatedResource);
        let e = parse_kind("Deployment").unwrap_err().to_string();
        assert!(e.contains("unknown kind") && e.contains("fkt"), "{e}");
    }

    #[test]
    fn an_object_needs_a_kind_a_namespace_and_a_name() {
        let (kind, ns, name) = parse_object("fkt/default/orders").unwrap();
        assert_eq!(
            (kind, ns.as_str(), name.as_str()),
            (PlacedKind::FederatedKafkaTopic, "default", "orders")
        );
        for bad in ["fkt/orders", "fkt//orders", "fkt/default/orders/x", ""] {
            let e = parse_object(bad).unwrap_err().to_string();
            assert!(e.contains("KIND/NAMESPACE/NAME"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_view_is_kept_per_object_until_removed_or_the_term_ends() {
        let views = Views::default();
        let a = PlacedRef::new(PlacedKind::FederatedKafkaTopic, "ns", "a");
        let b = PlacedRef::new(PlacedKind::PrometheusFederation, "ns", "a");
        views.set(&a, serde_json::json!({"placements": [{"cluster": "c1"}]}));
        views.set(&b, serde_json::json!({}));
        assert!(
            views
                .get(PlacedKind::FederatedKafkaTopic, "ns", "a")
                .unwrap()
                .json()
                .unwrap()
                .contains("c1")
        );
        views.remove(&a);
        assert!(
            views
                .get(PlacedKind::FederatedKafkaTopic, "ns", "a")
                .is_none()
        );
        assert!(
            views
                .get(PlacedKind::PrometheusFederation, "ns", "a")
                .is_some()
        );
        views.clear();
        assert!(
            views
                .get(PlacedKind::PrometheusFederation, "ns", "a")
                .is_none()
        );
    }

    #[test]
    fn the_table_counts_states_and_lists_every_placement() {
        let status = serde_json::json!({"placements": [
            {"cluster": "member-1", "state": "Synced"},
            {"cluster": "m2", "state": "Error", "message": "refused"},
        ]});
        let t = table(&status);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "2 placements: Error 1, Synced 1");
        assert!(lines[1].starts_with("CLUSTER "), "{t}");
        assert!(lines[2].starts_with("member-1  Synced"), "{t}");
        assert!(
            lines[3].starts_with("m2        Error") && lines[3].ends_with("refused"),
            "{t}"
        );
    }
}
