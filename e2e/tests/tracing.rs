//! Tracing end to end: a real hub and three real agents exporting over OTLP to a real
//! Jaeger, three real member clusters, and the trace of one FederatedResource edit read
//! back through Jaeger's own query API — the hub's decision, each member's apply, in
//! causal order, under the user's `traceparent` when the object carries one.

use std::collections::BTreeSet;
use std::time::Duration;

use accord_common::telemetry::TRACEPARENT_ANNOTATION;
use accord_crds::{FederatedResource, FederatedResourceStatus, PlacementState};
use accord_e2e::fleet::{Fleet, ensure_namespace};
use accord_e2e::jaeger::{Jaeger, JaegerSpan, Trace, tag};
use accord_e2e::kafka_topic_scenario::wait_event;
use accord_e2e::resource_scenario::{apply_resource, resource_object};
use accord_e2e::wait::{Check, until};
use accord_e2e::{SharedTestbed, Testbed};
use anyhow::{Context as _, Result, ensure};
use kube::Api;
use serde_json::Value;
use tokio::sync::OnceCell;

static TESTBED: SharedTestbed = SharedTestbed::new(|b| b.members(3));
/// One test at a time: each runs a hub of its own over the shared management cluster, and
/// a hub reconciles (and traces) every object there, the other test's too.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
/// One Jaeger for the binary's tests (each test's trace ids are its own).
static JAEGER: OnceCell<Jaeger> = OnceCell::const_new();
/// Generous for a loaded machine; each step normally takes a second or two.
const STEP: Duration = Duration::from_secs(60);

async fn jaeger(testbed: &Testbed) -> Result<&'static Jaeger> {
    JAEGER.get_or_try_init(|| Jaeger::start(testbed)).await
}

/// A hub and three agents (clusters `<prefix>-0..2` on members 0..2), all exporting
/// traces to Jaeger.
async fn traced_fleet<'t>(testbed: &'t Testbed, prefix: &str) -> Result<(Fleet<'t>, Vec<String>)> {
    let otlp = jaeger(testbed).await?.otlp_endpoint().to_owned();
    let names: Vec<String> = (0..3).map(|i| format!("{prefix}-{i}")).collect();
    let agents: Vec<(&str, usize)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let flags = ["--otlp-endpoint", otlp.as_str()];
    let fleet = Fleet::start_with_agent_args(
        testbed,
        &format!("hub-{prefix}"),
        &format!("/t-{prefix}/"),
        &flags,
        &flags,
        &agents,
    )
    .await?;
    Ok((fleet, names))
}

async fn apply(testbed: &Testbed, ns: &str, object: &Value) -> Result<()> {
    ensure_namespace(testbed.mgmt(), ns).await?;
    apply_resource(&testbed.mgmt().client(), object).await?;
    Ok(())
}

/// Waits until the object's status shows generation `generation` Synced on every one of
/// `clusters` with a trace id that `check` accepts; returns the trace id.
async fn wait_traced_sync(
    testbed: &Testbed,
    ns: &str,
    name: &str,
    generation: i64,
    clusters: &[String],
    check: impl Fn(&str) -> bool,
) -> Result<String> {
    let api: Api<FederatedResource> = Api::namespaced(testbed.mgmt().client(), ns);
    until(
        &format!("{ns}/{name} generation {generation} Synced everywhere with its trace id"),
        STEP,
        || async {
            let status: FederatedResourceStatus = api.get(name).await?.status.unwrap_or_default();
            let synced = status.observed_generation == Some(generation)
                && clusters.iter().all(|c| {
                    status
                        .placements
                        .iter()
                        .any(|p| &p.cluster == c && p.state == PlacementState::Synced)
                });
            Ok(match status.trace_id.as_deref() {
                Some(id) if synced && check(id) => Check::Ready(id.to_owned()),
                _ => Check::NotYet(serde_json::to_string(&status)?),
            })
        },
    )
    .await
}

/// The cluster a span comes from: its process's (resource's) `accord.cluster`.
fn cluster_of<'a>(trace: &'a Trace, span: &JaegerSpan) -> Option<&'a str> {
    tag(&trace.process(span)?.tags, "accord.cluster")
}

/// What the trace must show once complete: the hub's change spans (one per decision of the
/// generation: a later reconcile of the same generation decides within its trace), one with
/// its decision and record write, and an apply span from each of `clusters` descending from
/// a change in causal order (each span starting no earlier than its parent); every span of
/// the trace under a change. Returns the change spans, earliest first.
fn check_trace<'a>(trace: &'a Trace, clusters: &[String]) -> Result<Vec<&'a JaegerSpan>, String> {
    let service = |s: &JaegerSpan| trace.process(s).map(|p| p.service_name.as_str());
    let mut changes: Vec<&JaegerSpan> = trace
        .named("change")
        .filter(|s| service(s) == Some("accord-hub"))
        .collect();
    changes.sort_by_key(|s| s.start_time);
    if changes.is_empty() {
        return Err("no change span of accord-hub".into());
    }
    let is_change = |id: &str| changes.iter().any(|c| c.span_id == id);
    for step in ["decide", "persist"] {
        let found = trace
            .named(step)
            .any(|s| s.parent().is_some_and(|p| is_change(&p.span_id)));
        if !found {
            return Err(format!("no {step} span under a change"));
        }
    }
    let mut applied = BTreeSet::new();
    for apply in trace.named("apply") {
        if service(apply) != Some("accord-agent") {
            return Err(format!("an apply span of {:?}", service(apply)));
        }
        let chain = trace.ancestry(apply);
        let names: Vec<&str> = chain.iter().map(|s| s.operation_name.as_str()).collect();
        if names != ["apply", "send", "fan-out", "change"] {
            return Err(format!("apply's ancestry {names:?}"));
        }
        if chain.windows(2).any(|w| w[0].start_time < w[1].start_time) {
            return Err(format!("a span starts before its parent: {chain:?}"));
        }
        let cluster = cluster_of(trace, apply).ok_or("an apply span without accord.cluster")?;
        applied.insert(cluster.to_owned());
    }
    let wanted: BTreeSet<String> = clusters.iter().cloned().collect();
    if !wanted.is_subset(&applied) {
        return Err(format!("apply spans from {applied:?}, want {wanted:?}"));
    }
    // One trace: every span is a change's or below one. Spans come from four processes, each
    // exporting in batches of its own, so a span (the hub's `report stored`) may arrive
    // before its parent (the agent's `report`): until the parent is there, not yet.
    for span in &trace.spans {
        let root = trace.ancestry(span).last().map(|s| s.span_id.as_str());
        if !root.is_some_and(is_change) {
            return Err(format!(
                "span {} ({}) is not under a change",
                span.span_id, span.operation_name
            ));
        }
    }
    Ok(changes)
}

/// Waits until Jaeger holds trace `trace_id` complete ([`check_trace`]).
async fn wait_trace(testbed: &Testbed, trace_id: &str, clusters: &[String]) -> Result<Trace> {
    let jaeger = jaeger(testbed).await?;
    until(
        &format!("trace {trace_id} in jaeger with every member's apply"),
        STEP,
        || async {
            Ok(match jaeger.trace(testbed.http(), trace_id).await? {
                None => Check::NotYet("not in jaeger yet".into()),
                Some(trace) => match check_trace(&trace, clusters) {
                    Ok(_) => Check::Ready(trace),
                    Err(why) => Check::NotYet(why),
                },
            })
        },
    )
    .await
}

#[test]
fn one_edit_is_one_trace_from_the_hub_decision_to_each_members_apply() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let (fleet, clusters) = traced_fleet(testbed, "trace").await?;
        let ns = "trace-edit";
        apply(testbed, ns, &resource_object(ns, "web", &clusters, "one")).await?;
        let created = wait_traced_sync(testbed, ns, "web", 1, &clusters, |_| true).await?;
        apply(testbed, ns, &resource_object(ns, "web", &clusters, "two")).await?;
        let edited = wait_traced_sync(testbed, ns, "web", 2, &clusters, |id| id != created).await?;
        ensure!(edited.len() == 32, "trace id {edited:?}");

        let trace = wait_trace(testbed, &edited, &clusters).await?;
        let changes = check_trace(&trace, &clusters).map_err(anyhow::Error::msg)?;
        // One trace (check_trace: every span under a change), rooted at the edit's changes.
        for change in changes {
            ensure!(
                change.parent().is_none(),
                "the change has a parent: {change:?}"
            );
            ensure!(
                change
                    .tags
                    .iter()
                    .any(|t| t.key == "accord.generation" && t.value == 2),
                "the change span names generation 2: {:?}",
                change.tags
            );
        }
        for span in &trace.spans {
            ensure!(span.trace_id == edited, "span of another trace: {span:?}");
        }
        // The kind's own step under each apply: the server-side apply of its manifests.
        for apply in trace.named("apply") {
            let steps = trace
                .named("server-side apply")
                .filter(|s| s.parent().is_some_and(|p| p.span_id == apply.span_id))
                .count();
            ensure!(steps > 0, "no server-side apply under {apply:?}");
        }

        // The latency of each stage, with the change's trace as exemplar.
        let url = format!("{}/metrics", fleet.hub.http);
        let text = testbed.http().get(&url).send().await?.text().await?;
        for metric in [
            "accord_hub_change_decision_seconds_count",
            "accord_hub_change_persist_seconds_count",
            "accord_hub_change_fanout_seconds_count",
            "accord_hub_change_report_seconds_count",
            "accord_hub_change_end_to_end_seconds_count{kind=\"FederatedResource\"}",
        ] {
            ensure!(
                text.contains(metric),
                "{metric} missing from the hub's metrics"
            );
        }
        ensure!(
            text.lines().any(
                |l| l.starts_with("accord_hub_change_end_to_end_seconds_bucket")
                    && l.contains(&format!("trace_id=\"{edited}\""))
            ),
            "no end-to-end bucket has the edit's trace as exemplar"
        );
        Ok(())
    });
}

#[test]
fn the_users_traceparent_is_the_parent_of_the_change_and_a_bad_one_is_said_and_ignored() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    TESTBED.run(|testbed| async move {
        let (_fleet, clusters) = traced_fleet(testbed, "tparent").await?;
        let ns = "trace-parent";
        let mut object = resource_object(ns, "api", &clusters, "one");
        object["metadata"]["annotations"] =
            serde_json::json!({TRACEPARENT_ANNOTATION: "00-not-a-traceparent-01"});
        apply(testbed, ns, &object).await?;
        let message = wait_event(
            testbed,
            ns,
            "api",
            "Warning",
            accord_crds::conditions::reasons::INVALID_TRACEPARENT,
            STEP,
        )
        .await?;
        ensure!(message.contains(TRACEPARENT_ANNOTATION), "{message}");
        // Traced all the same, from the hub.
        let own = wait_traced_sync(testbed, ns, "api", 1, &clusters, |_| true).await?;
        let trace = wait_trace(testbed, &own, &clusters).await?;
        for change in check_trace(&trace, &clusters).map_err(anyhow::Error::msg)? {
            ensure!(change.parent().is_none(), "{change:?}");
        }

        // A CI pipeline's span as the parent of the edit.
        let user_trace = format!("{:032x}", rand::random::<u128>() | 1);
        let user_span = format!("{:016x}", rand::random::<u64>() | 1);
        object["metadata"]["annotations"] = serde_json::json!({
            TRACEPARENT_ANNOTATION: format!("00-{user_trace}-{user_span}-01")
        });
        object["spec"]["manifests"] =
            serde_json::json!(accord_e2e::resource_scenario::bundle("api", "two"));
        apply(testbed, ns, &object).await?;
        let edited =
            wait_traced_sync(testbed, ns, "api", 2, &clusters, |id| id == user_trace).await?;
        let trace = wait_trace(testbed, &edited, &clusters).await?;
        for change in check_trace(&trace, &clusters).map_err(anyhow::Error::msg)? {
            let parent = change.parent().context("the change has no parent")?;
            ensure!(
                parent.span_id == user_span && parent.trace_id == user_trace,
                "the change's parent is {parent:?}, want the user's span {user_span}"
            );
        }
        Ok(())
    });
}
