//! The fleet console: a read-only web console served by the hub on `--console-addr` (off by
//! default). Server-rendered pages ([`pages`]) of the fleet, of every placed kind's objects
//! with their state in each cluster, and of one object (revision, rollout by group, state
//! and message per cluster, a timeline of its Events and condition changes, a link to the
//! trace of its latest change); each page follows its changes live over server-sent events.
//!
//! Pages read only the hub process's own caches ([`cache`]: one watch of the
//! ManagedClusters, of each placed kind and of the hub's Events, on every replica — a
//! replica that does not lead serves the same console). The only requests a page view makes
//! to the management API server are the access reviews of [`access`], cached per token for
//! [`access::REVIEW_TTL`]: the console acts with the user's own identity, so a person sees
//! exactly what `kubectl get` would show them.

pub mod access;
pub mod cache;
pub mod pages;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::Stream;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use serde::Deserialize;
use serde_json::Value;

use crate::metrics::{ConsolePageLabel, Metrics};
use access::{Access, AccessError, Ask, Who};
use cache::Caches;
use pages::{NavKind, Rendered};

/// The cookie holding a browser's token (HttpOnly, SameSite=Strict).
pub const TOKEN_COOKIE: &str = "accord_console_token";
/// How long a browser keeps its token cookie.
const COOKIE_MAX_AGE: Duration = Duration::from_secs(8 * 3600);
/// How long a live page waits after a change for more before it renders again.
const LIVE_COALESCE: Duration = Duration::from_millis(100);
/// Headers of every page.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

/// The console's settings.
#[derive(Clone, Debug, Default)]
pub struct ConsoleOptions {
    /// Where to serve it (`None`: off).
    pub addr: Option<SocketAddr>,
    /// The trace link of an object's page: a URL with `{traceID}` (`None`: the trace id
    /// is shown without a link).
    pub trace_url: Option<String>,
}

struct Inner {
    caches: Caches,
    access: Access,
    trace_url: Option<String>,
    metrics: Metrics,
}

#[derive(Clone)]
struct App(Arc<Inner>);

/// Serves the console on `listener` until dropped: starts its caches' watches through
/// `kube` (the hub's client) and answers from them.
pub async fn serve(
    listener: tokio::net::TcpListener,
    kube: kube::Client,
    metrics: Metrics,
    options: ConsoleOptions,
) -> std::io::Result<()> {
    let (caches, watches) = Caches::start(kube.clone());
    let app = App(Arc::new(Inner {
        caches,
        access: Access::new(kube, metrics.clone()),
        trace_url: options.trace_url,
        metrics,
    }));
    tokio::select! {
        served = axum::serve(listener, router(app)) => served,
        () = watches => Ok(()),
    }
}

/// Binds the console's address, so that a conflict fails start-up with a clear error.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

fn router(app: App) -> Router {
    Router::new()
        .route("/", get(fleet_page))
        .route("/kinds/{plural}", get(kind_page))
        .route("/kinds/{plural}/{namespace}/{name}", get(object_page))
        .route("/live", get(live))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route(
            "/static/console.css",
            get(|| async { static_file("text/css; charset=utf-8", pages::CSS) }),
        )
        .route(
            "/static/console.js",
            get(|| async { static_file("text/javascript; charset=utf-8", pages::JS) }),
        )
        .fallback(|| async {
            html(
                StatusCode::NOT_FOUND,
                pages::layout(
                    &pages::message("Not found", "There is no such page."),
                    &[],
                    None,
                    None,
                ),
            )
        })
        .with_state(app)
}

/// A console page.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Page {
    Fleet,
    Kind(String),
    Object(String, String, String),
}

impl Page {
    /// The page at `path` (as the console's URLs name them).
    fn parse(path: &str) -> Option<Self> {
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match parts[..] {
            [""] => Some(Self::Fleet),
            ["kinds", plural] => Some(Self::Kind(decode(plural)?)),
            ["kinds", plural, ns, name] => {
                Some(Self::Object(decode(plural)?, decode(ns)?, decode(name)?))
            }
            _ => None,
        }
    }

    fn path(&self) -> String {
        match self {
            Self::Fleet => "/".into(),
            Self::Kind(p) => format!("/kinds/{}", pages::seg(p)),
            Self::Object(p, ns, name) => format!(
                "/kinds/{}/{}/{}",
                pages::seg(p),
                pages::seg(ns),
                pages::seg(name)
            ),
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Self::Fleet => "fleet",
            Self::Kind(_) => "kind",
            Self::Object(..) => "object",
        }
    }
}

/// A percent-encoded path segment, decoded.
fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn html(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    secure(h);
    response
}

fn secure(h: &mut HeaderMap) {
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

fn static_file(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// The token of a request: `Authorization: Bearer`, else the console's cookie.
fn token_of(headers: &HeaderMap) -> Option<String> {
    if let Some(value) = headers.get(header::AUTHORIZATION)
        && let Ok(value) = value.to_str()
        && let Some(token) = value.strip_prefix("Bearer ")
    {
        let token = token.trim();
        return (!token.is_empty()).then(|| token.to_owned());
    }
    for cookies in headers.get_all(header::COOKIE) {
        let Ok(cookies) = cookies.to_str() else {
            continue;
        };
        for cookie in cookies.split(';') {
            if let Some((name, value)) = cookie.trim().split_once('=')
                && name == TOKEN_COOKIE
                && !value.is_empty()
            {
                return Some(value.to_owned());
            }
        }
    }
    None
}

fn unauthorized(error: Option<&str>) -> Response {
    let mut response = html(
        StatusCode::UNAUTHORIZED,
        pages::layout(&pages::login(error), &[], None, None),
    );
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(r#"Bearer realm="accord-console""#),
    );
    response
}

fn unavailable(e: &AccessError) -> Response {
    html(
        StatusCode::SERVICE_UNAVAILABLE,
        pages::layout(
            &pages::message("Cannot check your access", &e.to_string()),
            &[],
            None,
            None,
        ),
    )
}

impl App {
    fn nav(&self) -> Vec<NavKind<'_>> {
        self.0
            .caches
            .kinds
            .iter()
            .map(|k| NavKind {
                kind: k.kind.as_str(),
                plural: &k.plural,
            })
            .collect()
    }

    /// Who sent `headers`, or the answer that says why nobody.
    async fn who(&self, headers: &HeaderMap) -> Result<Who, Response> {
        let Some(token) = token_of(headers) else {
            return Err(unauthorized(None));
        };
        match self.0.access.who(&token).await {
            Ok(who) => Ok(who),
            Err(e @ AccessError::Rejected(_)) => Err(unauthorized(Some(&e.to_string()))),
            Err(e) => Err(unavailable(&e)),
        }
    }

    async fn allowed(&self, who: &Who, ask: &Ask) -> Result<bool, AccessError> {
        self.0.access.allowed(who, ask).await
    }

    /// `page` as `who` may see it, with its HTTP status.
    async fn render(&self, who: &Who, page: &Page) -> Result<(StatusCode, Rendered), AccessError> {
        self.0
            .metrics
            .console_pages
            .get_or_create(&ConsolePageLabel {
                page: page.label().to_owned(),
            })
            .inc();
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        match page {
            Page::Fleet => {
                let plural = <accord_crds::ManagedCluster as kube::Resource>::plural(&());
                if !self.allowed(who, &Ask::list(&plural, "")).await? {
                    return Ok(forbidden("You may not list ManagedClusters."));
                }
                let clusters = self.0.caches.clusters.state();
                let mut shown: Vec<(&str, &Value)> = clusters
                    .iter()
                    .map(|c| (c.metadata.name.as_deref().unwrap_or_default(), &c.data))
                    .collect();
                shown.sort_by(|a, b| a.0.cmp(b.0));
                Ok((StatusCode::OK, pages::fleet(&shown, now)))
            }
            Page::Kind(plural) => {
                let Some(kind) = self.0.caches.kind(plural) else {
                    return Ok(not_found("There is no such kind."));
                };
                let everywhere = self.allowed(who, &Ask::list(plural, "")).await?;
                let objects = kind.objects.state();
                let mut namespaces: Vec<String> =
                    objects.iter().filter_map(|o| o.namespace()).collect();
                namespaces.sort();
                namespaces.dedup();
                let visible: std::collections::HashSet<String> = if everywhere {
                    namespaces.into_iter().collect()
                } else {
                    let asks = namespaces.iter().map(|ns| async move {
                        (ns, self.allowed(who, &Ask::list(plural, ns)).await)
                    });
                    let mut visible = std::collections::HashSet::new();
                    for (ns, allowed) in futures::future::join_all(asks).await {
                        if allowed? {
                            visible.insert(ns.clone());
                        }
                    }
                    visible
                };
                let mut shown: Vec<(&str, &str, &Value)> = objects
                    .iter()
                    .filter_map(|o| {
                        let ns = o.metadata.namespace.as_deref()?;
                        visible
                            .contains(ns)
                            .then(|| (ns, o.metadata.name.as_deref().unwrap_or_default(), &o.data))
                    })
                    .collect();
                shown.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
                Ok((
                    StatusCode::OK,
                    pages::kind(kind.kind.as_str(), plural, &shown, !everywhere),
                ))
            }
            Page::Object(plural, ns, name) => {
                let Some(kind) = self.0.caches.kind(plural) else {
                    return Ok(not_found("There is no such kind."));
                };
                // Asked before looking: a forbidden object reads the same whether or not
                // it exists.
                if !self.allowed(who, &Ask::get(plural, ns, name)).await? {
                    return Ok(forbidden(&format!("You may not get {plural} {ns}/{name}.")));
                }
                let reference =
                    ObjectRef::<DynamicObject>::new_with(name, kind.resource.clone()).within(ns);
                let Some(object) = kind.objects.get(&reference) else {
                    return Ok(not_found(&format!(
                        "{} {ns}/{name} does not exist (or this replica has not seen it yet).",
                        kind.kind
                    )));
                };
                let events = if self.allowed(who, &Ask::events(ns)).await? {
                    Some(
                        self.0
                            .caches
                            .events_of(kind.kind.as_str(), ns, name)
                            .iter()
                            .map(|e| pages::TimelineEntry {
                                at: cache::event_time(e),
                                source: "Event",
                                type_: e.type_.clone().unwrap_or_default(),
                                reason: e.reason.clone().unwrap_or_default(),
                                message: match e.count {
                                    Some(n) if n > 1 => {
                                        format!("{} (×{n})", e.message.clone().unwrap_or_default())
                                    }
                                    _ => e.message.clone().unwrap_or_default(),
                                },
                            })
                            .collect(),
                    )
                } else {
                    None
                };
                let value = serde_json::to_value(&*object).unwrap_or_default();
                let extras = pages::ObjectExtras {
                    trace_url: self.0.trace_url.as_deref(),
                    events,
                    now,
                };
                Ok((
                    StatusCode::OK,
                    pages::object(kind.kind.as_str(), plural, &value, &extras),
                ))
            }
        }
    }

    async fn page(&self, headers: &HeaderMap, page: Page) -> Response {
        let who = match self.who(headers).await {
            Ok(who) => who,
            Err(response) => return response,
        };
        match self.render(&who, &page).await {
            Ok((status, rendered)) => {
                let live = status.is_success().then(|| page.path());
                html(
                    status,
                    pages::layout(
                        &rendered,
                        &self.nav(),
                        Some(&who.user.name),
                        live.as_deref(),
                    ),
                )
            }
            Err(e) => unavailable(&e),
        }
    }
}

fn forbidden(text: &str) -> (StatusCode, Rendered) {
    (StatusCode::FORBIDDEN, pages::message("Forbidden", text))
}

fn not_found(text: &str) -> (StatusCode, Rendered) {
    (StatusCode::NOT_FOUND, pages::message("Not found", text))
}

async fn fleet_page(State(app): State<App>, headers: HeaderMap) -> Response {
    app.page(&headers, Page::Fleet).await
}

async fn kind_page(
    State(app): State<App>,
    headers: HeaderMap,
    Path(plural): Path<String>,
) -> Response {
    app.page(&headers, Page::Kind(plural)).await
}

async fn object_page(
    State(app): State<App>,
    headers: HeaderMap,
    Path((plural, namespace, name)): Path<(String, String, String)>,
) -> Response {
    app.page(&headers, Page::Object(plural, namespace, name))
        .await
}

#[derive(Deserialize)]
struct LiveQuery {
    page: String,
}

/// The live updates of a page: its `<main>` rendered again after every change of the
/// caches (coalesced over [`LIVE_COALESCE`]), sent when it differs from the last sent.
async fn live(
    State(app): State<App>,
    headers: HeaderMap,
    Query(query): Query<LiveQuery>,
) -> Response {
    let Some(token) = token_of(&headers) else {
        return unauthorized(None);
    };
    if let Err(response) = app.who(&headers).await {
        return response;
    }
    let Some(page) = Page::parse(&query.page) else {
        return (StatusCode::BAD_REQUEST, "no such page\n").into_response();
    };
    let mut response = Sse::new(updates(app, token, page))
        .keep_alive(KeepAlive::default())
        .into_response();
    secure(response.headers_mut());
    response
}

/// The token is reviewed again before every rendering (cached, see [`access::REVIEW_TTL`]):
/// a token that stops being accepted ends the stream.
fn updates(
    app: App,
    token: String,
    page: Page,
) -> impl Stream<Item = Result<SseEvent, std::convert::Infallible>> {
    let changes = app.0.caches.changes.clone();
    futures::stream::unfold(
        (app, token, page, changes, None::<String>, true),
        |(app, token, page, mut changes, mut last, mut first)| async move {
            loop {
                if !first {
                    changes.changed().await.ok()?;
                    tokio::time::sleep(LIVE_COALESCE).await;
                    changes.borrow_and_update();
                }
                first = false;
                let who = match app.0.access.who(&token).await {
                    Ok(who) => who,
                    Err(AccessError::Rejected(_)) => return None,
                    Err(e) => {
                        let main = pages::message("Cannot check your access", &e.to_string()).main;
                        return Some((
                            Ok(SseEvent::default().event("main").data(main)),
                            (app, token, page, changes, None, first),
                        ));
                    }
                };
                let main = match app.render(&who, &page).await {
                    Ok((_, rendered)) => rendered.main,
                    Err(e) => pages::message("Cannot check your access", &e.to_string()).main,
                };
                if last.as_deref() != Some(main.as_str()) {
                    last = Some(main.clone());
                    let event = SseEvent::default().event("main").data(main);
                    return Some((Ok(event), (app, token, page, changes, last, first)));
                }
            }
        },
    )
}

async fn login_page() -> Response {
    html(
        StatusCode::OK,
        pages::layout(&pages::login(None), &[], None, None),
    )
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// Checks the token and keeps it in the browser's cookie.
async fn login(State(app): State<App>, Form(form): Form<LoginForm>) -> Response {
    let token = form.token.trim();
    if token.is_empty()
        || !token
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b';' && b != b',')
    {
        return unauthorized(Some(
            "That is not a bearer token (expected printable characters without spaces).",
        ));
    }
    match app.0.access.who(token).await {
        Ok(_) => {
            let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
            let cookie = format!(
                "{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
                COOKIE_MAX_AGE.as_secs()
            );
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            secure(response.headers_mut());
            response
        }
        Err(e @ AccessError::Rejected(_)) => unauthorized(Some(&e.to_string())),
        Err(e) => unavailable(&e),
    }
}

async fn logout() -> Response {
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/login")]).into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "accord_console_token=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    secure(response.headers_mut());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_known_by_their_paths_and_back() {
        for page in [
            Page::Fleet,
            Page::Kind("federatedresources".into()),
            Page::Object("federatedresources".into(), "team a".into(), "web".into()),
        ] {
            assert_eq!(Page::parse(&page.path()), Some(page.clone()), "{page:?}");
        }
        assert_eq!(Page::parse("/kinds/a/b"), None);
        assert_eq!(Page::parse("/kinds/%zz"), None);
    }

    #[test]
    fn the_token_comes_from_the_header_or_the_cookie() {
        let mut h = HeaderMap::new();
        assert_eq!(token_of(&h), None);
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; accord_console_token=t1"),
        );
        assert_eq!(token_of(&h).as_deref(), Some("t1"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer t2"));
        assert_eq!(token_of(&h).as_deref(), Some("t2"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(token_of(&h), None);
    }
}
