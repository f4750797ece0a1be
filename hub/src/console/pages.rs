//! The console's pages as HTML, rendered on the server from the objects' JSON (read
//! leniently: a field missing or of another shape shows as "—", never fails the page).
//! Each page is a [`Rendered`]: its title and its `<main>`, which [`layout`] wraps and the
//! live updates send alone.

use std::fmt::Write as _;

use serde_json::Value;

/// A page's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// The `<title>` and heading.
    pub title: String,
    /// The inner HTML of `<main>`.
    pub main: String,
}

/// `s` escaped for HTML text and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `s` escaped for one URL path segment.
pub fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

const DASH: &str = "—";

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => DASH.to_owned(),
        other => other.to_string(),
    }
}

/// A navigation entry: the kind's name and its plural.
pub struct NavKind<'a> {
    /// Kind.
    pub kind: &'a str,
    /// Plural (its URL).
    pub plural: &'a str,
}

/// The whole document around `page`; `live` is the path the live updates follow (none on
/// the login and error pages).
pub fn layout(
    page: &Rendered,
    nav: &[NavKind<'_>],
    user: Option<&str>,
    live: Option<&str>,
) -> String {
    let mut links = String::from(r#"<li><a href="/">Fleet</a></li>"#);
    for k in nav {
        let _ = write!(
            links,
            r#"<li><a href="/kinds/{}">{}</a></li>"#,
            seg(k.plural),
            esc(k.kind)
        );
    }
    let who = match user {
        Some(u) => format!(
            r#"<form class="who" method="post" action="/logout"><span>Signed in as <strong>{}</strong></span> <button type="submit">Sign out</button></form>"#,
            esc(u)
        ),
        None => String::new(),
    };
    let live_attr = live
        .map(|p| format!(r#" data-live="{}""#, esc(p)))
        .unwrap_or_default();
    format!(
        r##"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · Accord console</title>
<link rel="stylesheet" href="/static/console.css">
<script src="/static/console.js" defer></script>
</head>
<body{live_attr}>
<a class="skip" href="#main">Skip to content</a>
<header>
<nav aria-label="Main"><span class="brand">Accord</span><ul>{links}</ul></nav>
{who}
</header>
<main id="main" tabindex="-1">{main}</main>
<footer><p id="live-status" role="status" aria-live="polite">{status}</p></footer>
</body>
</html>
"##,
        title = esc(&page.title),
        main = page.main,
        status = if live.is_some() {
            "Live updates: connecting…"
        } else {
            ""
        },
    )
}

/// The login page, with `error` above the form.
pub fn login(error: Option<&str>) -> Rendered {
    let error = error
        .map(|e| format!(r#"<p class="error" role="alert">{}</p>"#, esc(e)))
        .unwrap_or_default();
    Rendered {
        title: "Sign in".into(),
        main: format!(
            r#"<h1>Sign in</h1>
{error}<p>The console shows what your Kubernetes identity may read on the management cluster, as <code>kubectl get</code> would. Paste a bearer token (for example <code>kubectl create token NAME</code>); it is kept in an HttpOnly cookie of this browser only.</p>
<form method="post" action="/login" class="login">
<label for="token">Bearer token</label>
<input id="token" name="token" type="password" autocomplete="off" required autofocus>
<button type="submit">Sign in</button>
</form>"#
        ),
    }
}

/// A page that only says something (403, 404, 503).
pub fn message(title: &str, text: &str) -> Rendered {
    Rendered {
        title: title.to_owned(),
        main: format!(
            r#"<h1>{}</h1><p role="alert">{}</p>"#,
            esc(title),
            esc(text)
        ),
    }
}

/// How long ago `then` (Unix seconds) was, in words (`3s`, `4m`, `2h`, `5d`).
pub fn age(now: i64, then: i64) -> String {
    let d = (now - then).max(0);
    match d {
        0..60 => format!("{d}s"),
        60..3600 => format!("{}m", d / 60),
        3600..86400 => format!("{}h", d / 3600),
        _ => format!("{}d", d / 86400),
    }
}

/// A JSON RFC 3339 time as Unix seconds.
pub fn seconds(v: &Value) -> Option<i64> {
    v.as_str()?
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(|t| t.as_second())
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn badge(state: &str) -> String {
    let class = match state {
        "Synced" | "True" | "Succeeded" | "Available" => "ok",
        "Pending" | "Progressing" | "Unknown" | "Waiting" | "Paused" => "wait",
        _ => "bad",
    };
    format!(r#"<span class="badge {class}">{}</span>"#, esc(state))
}

/// The fleet page: every cluster of `clusters` (each ManagedCluster's name and its JSON
/// beyond its metadata: `spec`, `status`), in the order given.
pub fn fleet(clusters: &[(&str, &Value)], now: i64) -> Rendered {
    let mut rows = String::new();
    let mut available = 0;
    for &(name, c) in clusters {
        let avail = condition(c, "Available")
            .map(|c| text(&c["status"]))
            .unwrap_or_else(|| "Unknown".into());
        if avail == "True" {
            available += 1;
        }
        let mut taints: Vec<String> = c["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                let value = t["value"]
                    .as_str()
                    .map(|v| format!("={v}"))
                    .unwrap_or_default();
                format!("{}{value}:{}", text(&t["key"]), text(&t["effect"]))
            })
            .collect();
        if c["spec"]["unschedulable"] == true {
            taints.insert(0, "unschedulable".into());
        }
        let cap = &c["status"]["capacity"];
        let capacity = if cap.as_object().is_some_and(|m| !m.is_empty()) {
            format!(
                "{} nodes · cpu {} / {} · memory {} / {} · pods {} / {}",
                text(&cap["nodes"]),
                text(&cap["unrequested.cpu"]),
                text(&cap["allocatable.cpu"]),
                text(&cap["unrequested.memory"]),
                text(&cap["allocatable.memory"]),
                text(&cap["unrequested.pods"]),
                text(&cap["allocatable.pods"]),
            )
        } else {
            DASH.to_owned()
        };
        let heartbeat = seconds(&c["status"]["lastHeartbeatTime"])
            .map(|t| format!("{} ago", age(now, t)))
            .unwrap_or_else(|| DASH.to_owned());
        let _ = write!(
            rows,
            r#"<tr data-cluster="{n}"><th scope="row">{n}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            badge(if avail == "True" {
                "Available"
            } else if avail == "False" {
                "Unavailable"
            } else {
                "Unknown"
            }),
            if taints.is_empty() {
                DASH.to_owned()
            } else {
                esc(&taints.join(", "))
            },
            esc(&capacity),
            esc(&text(&c["status"]["agentVersion"])),
            esc(&text(&c["status"]["kubernetesVersion"])),
            esc(&heartbeat),
            n = esc(name),
        );
    }
    Rendered {
        title: "Fleet".into(),
        main: format!(
            r#"<h1>Fleet</h1>
<p id="fleet-summary">{available} of {total} clusters available.</p>
<table id="clusters">
<caption>Member clusters</caption>
<thead><tr><th scope="col">Cluster</th><th scope="col">Availability</th><th scope="col">Taints</th><th scope="col">Capacity (unrequested / allocatable)</th><th scope="col">Agent</th><th scope="col">Kubernetes</th><th scope="col">Heartbeat</th></tr></thead>
<tbody>{rows}</tbody>
</table>"#,
            total = clusters.len(),
        ),
    }
}

/// Counts of an object's placements by state: its summary's when the status is cut down,
/// else its listed placements'.
fn state_counts(object: &Value) -> Vec<(String, u64)> {
    if let Some(states) = object["status"]["summary"]["states"].as_object() {
        return states
            .iter()
            .map(|(s, n)| {
                let mut chars = s.chars();
                let s: String = chars
                    .next()
                    .map(|c| c.to_ascii_uppercase())
                    .into_iter()
                    .chain(chars)
                    .collect();
                (s, n.as_u64().unwrap_or(0))
            })
            .collect();
    }
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    for p in object["status"]["placements"]
        .as_array()
        .into_iter()
        .flatten()
    {
        *counts.entry(text(&p["state"])).or_default() += 1;
    }
    counts.into_iter().collect()
}

fn conditions_line(object: &Value) -> String {
    let list: Vec<String> = object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                r#"<span class="cond {}">{}={}</span>"#,
                if c["status"] == "True" { "ok" } else { "bad" },
                esc(&text(&c["type"])),
                esc(&text(&c["status"]))
            )
        })
        .collect();
    if list.is_empty() {
        DASH.to_owned()
    } else {
        list.join(" ")
    }
}

/// Most clusters a list row names one by one.
const ROW_CLUSTERS: usize = 8;

/// One kind's page: its objects (those the user may list), sorted by namespace and name;
/// `partial` when the user may not list the kind in every namespace (then only the
/// namespaces they may list it in are shown, and nothing says which others exist). Each
/// object is its namespace, name and JSON beyond its metadata (`spec`, `status`).
pub fn kind(kind: &str, plural: &str, objects: &[(&str, &str, &Value)], partial: bool) -> Rendered {
    let mut rows = String::new();
    for &(ns, name, o) in objects {
        let counts: Vec<String> = state_counts(o)
            .into_iter()
            .map(|(s, n)| format!("{} {n}", badge(&s)))
            .collect();
        let placements: Vec<&Value> = o["status"]["placements"]
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        let mut per_cluster: Vec<String> = placements
            .iter()
            .take(ROW_CLUSTERS)
            .map(|p| format!("{}: {}", esc(&text(&p["cluster"])), esc(&text(&p["state"]))))
            .collect();
        if placements.len() > ROW_CLUSTERS {
            per_cluster.push(format!("and {} more", placements.len() - ROW_CLUSTERS));
        }
        let rollout = &o["status"]["rollout"];
        let rollout = if rollout.is_object() {
            format!(
                "{} (step {})",
                esc(&text(&rollout["phase"])),
                esc(&text(&rollout["step"]))
            )
        } else {
            DASH.to_owned()
        };
        let _ = write!(
            rows,
            r#"<tr data-object="{ns}/{name}"><td>{ns}</td><th scope="row"><a href="/kinds/{p}/{nsu}/{nameu}">{name}</a></th><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            conditions_line(o),
            if counts.is_empty() {
                DASH.to_owned()
            } else {
                counts.join(" ")
            },
            if per_cluster.is_empty() {
                DASH.to_owned()
            } else {
                per_cluster.join(", ")
            },
            rollout,
            ns = esc(ns),
            name = esc(name),
            p = seg(plural),
            nsu = seg(ns),
            nameu = seg(name),
        );
    }
    let hidden = if partial {
        format!(
            r#"<p class="note">Only the namespaces where you may list {} are shown.</p>"#,
            esc(plural)
        )
    } else {
        String::new()
    };
    Rendered {
        title: kind.to_owned(),
        main: format!(
            r#"<h1>{k}</h1>
<p id="kind-summary">{n} object(s).</p>{hidden}
<table id="objects">
<caption>{k} objects and their state in each cluster</caption>
<thead><tr><th scope="col">Namespace</th><th scope="col">Name</th><th scope="col">Conditions</th><th scope="col">Placements by state</th><th scope="col">Per cluster</th><th scope="col">Rollout</th></tr></thead>
<tbody>{rows}</tbody>
</table>"#,
            k = esc(kind),
            n = objects.len(),
        ),
    }
}

/// A line of an object's timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimelineEntry {
    /// Unix seconds.
    pub at: i64,
    /// `Event`, `Condition`, `Rollout`.
    pub source: &'static str,
    /// Normal / Warning / a condition's status.
    pub type_: String,
    /// The reason.
    pub reason: String,
    /// The message.
    pub message: String,
}

/// What an object's page shows besides the object.
pub struct ObjectExtras<'a> {
    /// The trace URL template (`{traceID}` replaced), if any.
    pub trace_url: Option<&'a str>,
    /// The Events about it (`None`: the user may not list Events there).
    pub events: Option<Vec<TimelineEntry>>,
    /// Now, Unix seconds.
    pub now: i64,
}

/// `status.traceID` when it is a 32-hex trace id.
pub fn trace_id(object: &Value) -> Option<&str> {
    object["status"]["traceID"]
        .as_str()
        .filter(|t| t.len() == 32 && t.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// One object's page.
pub fn object(kind: &str, plural: &str, object: &Value, extras: &ObjectExtras<'_>) -> Rendered {
    let ns = text(&object["metadata"]["namespace"]);
    let name = text(&object["metadata"]["name"]);
    let status = &object["status"];
    let mut main = format!(
        r#"<nav aria-label="Breadcrumb" class="crumbs"><a href="/kinds/{p}">{k}</a> / {ns}</nav>
<h1>{k} {ns}/{name}</h1>
<dl class="facts">
<dt>Generation</dt><dd id="generation">{}</dd>
<dt>Observed generation</dt><dd id="observed-generation">{}</dd>
<dt>Revision</dt><dd id="revision">{}</dd>
<dt>Clusters</dt><dd id="cluster-count">{}</dd>
<dt>Conditions</dt><dd>{}</dd>
"#,
        esc(&text(&object["metadata"]["generation"])),
        esc(&text(&status["observedGeneration"])),
        esc(&text(&status["rollout"]["revision"])),
        esc(&text(&status["clusters"])),
        conditions_line(object),
        p = seg(plural),
        k = esc(kind),
        ns = esc(&ns),
        name = esc(&name),
    );
    match (trace_id(object), extras.trace_url) {
        (Some(id), Some(template)) => {
            let _ = write!(
                main,
                r#"<dt>Trace of the latest change</dt><dd><a id="trace" href="{}">{}</a></dd>"#,
                esc(&template.replace("{traceID}", id)),
                esc(id)
            );
        }
        (Some(id), None) => {
            let _ = write!(
                main,
                r#"<dt>Trace of the latest change</dt><dd id="trace"><code>{}</code></dd>"#,
                esc(id)
            );
        }
        _ => {}
    }
    main.push_str("</dl>\n");
    if let Some(message) = status["selection"]["message"].as_str() {
        let _ = write!(main, r#"<p id="selection">{}</p>"#, esc(message));
    }
    main.push_str(&rollout(object));
    main.push_str(&placements(status));
    main.push_str(&timeline(object, extras));
    Rendered {
        title: format!("{kind} {ns}/{name}"),
        main,
    }
}

/// The rollout section: phase, step and counts, and each group of `spec.rollout.groups`
/// (done, current or waiting) when they are listed in order.
fn rollout(object: &Value) -> String {
    let r = &object["status"]["rollout"];
    if !r.is_object() {
        return String::new();
    }
    let n = |f: &str| r[f].as_i64().unwrap_or(0);
    let total = n("updating") + n("succeeded") + n("failed") + n("waiting");
    let mut out = format!(
        r#"<section aria-labelledby="rollout-h" id="rollout"><h2 id="rollout-h">Rollout</h2>
<p>Revision <code>{}</code>: <span id="rollout-phase">{}</span>, step {}, current group <strong>{}</strong>.</p>
<p><label for="rollout-progress">Clusters succeeded</label> <progress id="rollout-progress" max="{max}" value="{value}">{value} of {max}</progress> {value} of {max} · updating {} · failed {} · waiting {}</p>
"#,
        esc(&text(&r["revision"])),
        badge(&text(&r["phase"])),
        esc(&text(&r["step"])),
        esc(&text(&r["currentGroup"])),
        n("updating"),
        n("failed"),
        n("waiting"),
        max = total.max(1),
        value = n("succeeded"),
    );
    let groups: Vec<String> = object["spec"]["rollout"]["groups"]["ordered"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["name"].as_str().map(str::to_owned))
        .collect();
    if !groups.is_empty() {
        let current = r["currentGroup"].as_str();
        let done_phase = r["phase"] == "Succeeded";
        let at = current.and_then(|c| groups.iter().position(|g| g == c));
        out.push_str(r#"<ol class="groups" aria-label="Rollout groups">"#);
        for (i, g) in groups.iter().enumerate() {
            let state = match at {
                _ if done_phase => "Succeeded",
                Some(at) if i < at => "Succeeded",
                Some(at) if i == at => "Progressing",
                _ => "Waiting",
            };
            let _ = write!(out, "<li>{} {}</li>", esc(g), badge(state));
        }
        out.push_str("</ol>");
    }
    let failed: Vec<String> = r["failedClusters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            format!(
                "{}: {}",
                esc(&text(&f["cluster"])),
                esc(&text(&f["reason"]))
            )
        })
        .collect();
    if !failed.is_empty() {
        let _ = write!(out, "<p>Failed: {}</p>", failed.join("; "));
    }
    out.push_str("</section>\n");
    out
}

fn placements(status: &Value) -> String {
    let mut rows = String::new();
    for p in status["placements"].as_array().into_iter().flatten() {
        let cluster = text(&p["cluster"]);
        let counts = match (p["applied"].as_i64(), p["available"].as_i64()) {
            (Some(a), Some(v)) => format!("{a} applied, {v} available"),
            (Some(a), None) => format!("{a} applied"),
            _ => DASH.to_owned(),
        };
        let _ = write!(
            rows,
            r#"<tr data-cluster="{c}"><th scope="row">{c}</th><td class="state">{}</td><td>{}</td><td>{}</td><td class="message">{}</td></tr>"#,
            badge(&text(&p["state"])),
            esc(&text(&p["revision"])),
            esc(&counts),
            esc(p["message"].as_str().unwrap_or("")),
            c = esc(&cluster),
        );
    }
    let cut = match status["summary"]["total"].as_u64() {
        Some(total) => format!(
            r#"<p class="note">{total} placements in all; the status lists only those not Synced (<code>accord-hub placements</code> prints every one).</p>"#
        ),
        None => String::new(),
    };
    format!(
        r#"<section aria-labelledby="placements-h"><h2 id="placements-h">Per cluster</h2>{cut}
<table id="placements"><caption>State in each member cluster</caption>
<thead><tr><th scope="col">Cluster</th><th scope="col">State</th><th scope="col">Revision</th><th scope="col">Manifests</th><th scope="col">Message</th></tr></thead>
<tbody>{rows}</tbody></table></section>
"#
    )
}

/// The timeline: the Events about the object and its conditions' transitions (decisions
/// and rollout steps are reported as both), newest first.
fn timeline(object: &Value, extras: &ObjectExtras<'_>) -> String {
    let mut entries: Vec<TimelineEntry> = object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            Some(TimelineEntry {
                at: seconds(&c["lastTransitionTime"])?,
                source: "Condition",
                type_: format!("{}={}", text(&c["type"]), text(&c["status"])),
                reason: text(&c["reason"]),
                message: c["message"].as_str().unwrap_or("").to_owned(),
            })
        })
        .collect();
    let events_note = match &extras.events {
        Some(events) => {
            entries.extend(events.iter().cloned());
            ""
        }
        None => {
            r#"<p class="note">Events are not shown: you may not list Events in this namespace.</p>"#
        }
    };
    entries.sort_by_key(|e| std::cmp::Reverse(e.at));
    let mut items = String::new();
    for e in &entries {
        let _ = write!(
            items,
            r#"<li><time>{} ago</time> <span class="src">{}</span> {} <strong>{}</strong> {}</li>"#,
            age(extras.now, e.at),
            e.source,
            esc(&e.type_),
            esc(&e.reason),
            esc(&e.message)
        );
    }
    if entries.is_empty() {
        items.push_str("<li>Nothing recorded yet.</li>");
    }
    format!(
        r#"<section aria-labelledby="timeline-h"><h2 id="timeline-h">Timeline</h2>{events_note}<ol id="timeline">{items}</ol></section>"#
    )
}

/// The stylesheet (contrast ≥ 4.5:1 for text, a visible focus ring).
pub const CSS: &str = r#"
:root { color-scheme: light; --fg: #1b1f24; --muted: #4a5460; --bg: #ffffff; --line: #c9d1d9; --accent: #0b57d0; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
.skip { position: absolute; left: -999px; } .skip:focus { left: 8px; top: 8px; background: #fff; padding: 6px; z-index: 9; }
header { display: flex; justify-content: space-between; align-items: center; padding: 8px 20px; background: #12263f; color: #fff; flex-wrap: wrap; }
header a { color: #fff; } .brand { font-weight: 700; margin-right: 16px; }
nav ul { display: inline-flex; gap: 14px; list-style: none; margin: 0; padding: 0; flex-wrap: wrap; }
.who button { margin-left: 8px; }
main { padding: 16px 20px; } main:focus { outline: none; }
a { color: var(--accent); } a:focus-visible, button:focus-visible, input:focus-visible { outline: 3px solid #f29900; outline-offset: 2px; }
table { border-collapse: collapse; width: 100%; margin: 8px 0 20px; } caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line); vertical-align: top; } thead th { background: #eef2f6; }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 13px; font-weight: 600; }
.badge.ok { background: #d7f5dd; color: #0f5323; } .badge.wait { background: #fff0c2; color: #5c4300; } .badge.bad { background: #fddede; color: #8a1111; }
.cond.ok { color: #0f5323; } .cond.bad { color: #8a1111; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; } dt { font-weight: 600; color: var(--muted); } dd { margin: 0; }
.note { color: var(--muted); } .error { color: #8a1111; font-weight: 600; }
ol.groups { display: flex; gap: 12px; list-style: decimal inside; padding: 0; }
#timeline { padding-left: 20px; } #timeline time { color: var(--muted); } .src { color: var(--muted); font-size: 13px; }
footer { padding: 8px 20px; color: var(--muted); font-size: 13px; }
form.login { display: flex; flex-direction: column; gap: 8px; max-width: 480px; } input { font: inherit; padding: 6px; }
button { font: inherit; padding: 4px 12px; cursor: pointer; }
"#;

/// The script: follows the page's live updates (server-sent events) and replaces `<main>`
/// with each new rendering, keeping focus and scroll.
pub const JS: &str = r#"
(function () {
  var path = document.body.getAttribute('data-live');
  if (!path || !window.EventSource) return;
  var status = document.getElementById('live-status');
  var main = document.getElementById('main');
  function connect() {
    var source = new EventSource('/live?page=' + encodeURIComponent(path));
    source.addEventListener('open', function () { status.textContent = 'Live updates: on'; });
    source.addEventListener('main', function (e) {
      if (main.innerHTML === e.data) return;
      var focused = document.activeElement && document.activeElement.id;
      main.innerHTML = e.data;
      if (focused) { var again = document.getElementById(focused); if (again) again.focus(); }
      status.textContent = 'Live updates: on · updated ' + new Date().toLocaleTimeString();
    });
    source.addEventListener('error', function () { status.textContent = 'Live updates: reconnecting…'; });
  }
  connect();
})();
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_is_escaped_and_segments_are_encoded() {
        assert_eq!(
            esc(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(seg("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn ages_read_in_the_largest_unit() {
        assert_eq!(age(100, 97), "3s");
        assert_eq!(age(1000, 100), "15m");
        assert_eq!(age(10_000, 0), "2h");
        assert_eq!(age(0, 100), "0s");
    }

    #[test]
    fn the_fleet_shows_availability_taints_capacity_agent_and_heartbeat() {
        let c = json!({
            "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [{"type": "Available", "status": "True"}],
                "agentVersion": "0.1.0",
                "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                "capacity": {"nodes": "3", "allocatable.cpu": "12"}
            }
        });
        let bad = json!({"spec": 5, "status": "x"});
        let now = seconds(&json!("2026-01-01T00:00:42Z")).unwrap();
        let page = fleet(&[("east", &c), ("<west>", &bad)], now);
        assert!(
            page.main.contains("1 of 2 clusters available"),
            "{}",
            page.main
        );
        assert!(page.main.contains("k=v:NoSchedule"));
        assert!(page.main.contains("3 nodes"));
        assert!(page.main.contains("0.1.0"));
        assert!(page.main.contains("42s ago"));
        assert!(page.main.contains("&lt;west&gt;") && !page.main.contains("<west>"));
    }

    #[test]
    fn an_object_shows_its_rollout_groups_placements_trace_and_timeline() {
        let o = json!({
            "metadata": {"namespace": "team", "name": "web", "generation": 4},
            "spec": {"rollout": {"groups": {"ordered": [{"name": "canary"}, {"name": "rest"}]}}},
            "status": {
                "observedGeneration": 4,
                "traceID": "0af7651916cd43dd8448eb211c80319c",
                "rollout": {"revision": "abc", "phase": "Progressing", "step": 2, "currentGroup": "rest",
                            "succeeded": 1, "updating": 1, "failed": 0, "waiting": 0},
                "placements": [{"cluster": "east", "state": "Synced", "revision": "abc"},
                               {"cluster": "west", "state": "Pending", "message": "applying"}],
                "conditions": [{"type": "Applied", "status": "False", "reason": "Progressing",
                                "lastTransitionTime": "2026-01-01T00:00:00Z"}]
            }
        });
        let extras = ObjectExtras {
            trace_url: Some("http://jaeger/trace/{traceID}"),
            events: Some(vec![TimelineEntry {
                at: 1,
                source: "Event",
                type_: "Normal".into(),
                reason: "RolloutStep".into(),
                message: "step 2".into(),
            }]),
            now: seconds(&json!("2026-01-01T00:01:00Z")).unwrap(),
        };
        let page = object("FederatedResource", "federatedresources", &o, &extras);
        let m = &page.main;
        assert!(
            m.contains(r#"href="http://jaeger/trace/0af7651916cd43dd8448eb211c80319c""#),
            "{m}"
        );
        assert!(
            m.contains("canary <span class=\"badge ok\">Succeeded"),
            "{m}"
        );
        assert!(
            m.contains("rest <span class=\"badge wait\">Progressing"),
            "{m}"
        );
        assert!(m.contains(r#"data-cluster="west""#) && m.contains("applying"));
        assert!(m.contains("RolloutStep") && m.contains("1m ago"), "{m}");
        let no_trace = json!({"metadata": {}, "status": {"traceID": "not-hex"}});
        assert!(!object("K", "ks", &no_trace, &extras).main.contains("Trace"));
        let hidden = ObjectExtras {
            events: None,
            ..extras
        };
        assert!(
            object("K", "ks", &o, &hidden)
                .main
                .contains("may not list Events")
        );
    }

    #[test]
    fn a_cut_down_status_counts_from_its_summary() {
        let o =
            json!({"status": {"summary": {"total": 300, "states": {"synced": 299, "error": 1}}}});
        let page = kind(
            "FederatedResource",
            "federatedresources",
            &[("a", "b", &o)],
            true,
        );
        assert!(page.main.contains("Synced</span> 299"), "{}", page.main);
        assert!(page.main.contains("Only the namespaces where you may list"));
    }
}
