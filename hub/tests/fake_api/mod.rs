//! A fake Kubernetes API server: keeps objects by path, answers creates, merge and JSON
//! patches (of objects and of their status), GETs and deletes as the API server does,
//! fails write requests on demand, and records every request.
#![allow(dead_code)]
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub body: Value,
}

#[derive(Default)]
struct State {
    objects: HashMap<String, Value>,
    requests: Vec<Recorded>,
    failures: VecDeque<u16>,
    latency: std::time::Duration,
}

/// The fake; clones share their state.
#[derive(Clone, Default)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
}

impl FakeApi {
    /// A client whose requests this fake answers.
    pub fn client(&self) -> kube::Client {
        let fake = self.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let fake = fake.clone();
            async move { Ok::<_, Infallible>(fake.answer(request).await) }
        });
        kube::Client::new(service, "default")
    }

    /// Stores `object` at `path` (the object's own path, without `/status`).
    pub fn put(&self, path: &str, object: Value) {
        self.state
            .lock()
            .unwrap()
            .objects
            .insert(path.to_owned(), object);
    }

    /// Updates the object at `path` as a real API server does for a write to the main
    /// resource: its `status` stays what it was (only the status subresource changes it).
    pub fn update(&self, path: &str, mut object: Value) {
        let mut state = self.state.lock().unwrap();
        if let Some(status) = state.objects.get(path).map(|o| o["status"].clone()) {
            object["status"] = status;
        }
        state.objects.insert(path.to_owned(), object);
    }

    /// The object at `path`, if any.
    pub fn get(&self, path: &str) -> Option<Value> {
        self.state.lock().unwrap().objects.get(path).cloned()
    }

    /// Every object whose path starts with `prefix`.
    pub fn objects_under(&self, prefix: &str) -> Vec<Value> {
        let state = self.state.lock().unwrap();
        let mut found: Vec<(&String, &Value)> = state
            .objects
            .iter()
            .filter(|(path, _)| path.starts_with(prefix))
            .collect();
        found.sort_by_key(|(path, _)| *path);
        found.into_iter().map(|(_, v)| v.clone()).collect()
    }

    /// Answers the next write requests with these status codes, in order.
    pub fn fail_next(&self, codes: &[u16]) {
        self.state.lock().unwrap().failures.extend(codes);
    }

    /// Answers every later request only after `latency` (of tokio's clock, so a paused
    /// clock makes a slow API server without slowing the test).
    pub fn set_latency(&self, latency: std::time::Duration) {
        self.state.lock().unwrap().latency = latency;
    }

    /// The requests received with `method`.
    pub fn requests(&self, method: Method) -> Vec<Recorded> {
        let state = self.state.lock().unwrap();
        state
            .requests
            .iter()
            .filter(|r| r.method == method)
            .cloned()
            .collect()
    }

    async fn answer(&self, request: Request<Body>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let path = parts.uri.path().to_owned();
        let latency = self.state.lock().unwrap().latency;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut state = self.state.lock().unwrap();
        state.requests.push(Recorded {
            method: parts.method.clone(),
            path: path.clone(),
            body: body.clone(),
        });
        if parts.method != Method::GET
            && let Some(code) = state.failures.pop_front()
        {
            return status(code, "injected failure");
        }
        match parts.method {
            Method::POST => {
                let name = body["metadata"]["name"].as_str().unwrap_or_default();
                let key = format!("{path}/{name}");
                if state.objects.contains_key(&key) {
                    return status(409, "already exists");
                }
                state.objects.insert(key, body.clone());
                respond(StatusCode::CREATED, &body)
            }
            Method::PATCH if is_json_patch(&parts.headers) => {
                let Some(object) = state.objects.get_mut(&path) else {
                    return status(404, "not found");
                };
                // As the API server does, a `test` of `null` passes where there is nothing.
                let ops: Vec<Value> = body
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|op| {
                        let absent = op["path"]
                            .as_str()
                            .is_some_and(|p| object.pointer(p).is_none());
                        !(op["op"] == "test" && op["value"].is_null() && absent)
                    })
                    .collect();
                let Ok(patch) = serde_json::from_value::<json_patch::Patch>(Value::Array(ops))
                else {
                    return status(400, "not a JSON patch");
                };
                let mut patched = object.clone();
                if let Err(e) = json_patch::patch(&mut patched, &patch) {
                    return status(422, &e.to_string());
                }
                *object = patched;
                respond(StatusCode::OK, object)
            }
            Method::PATCH => {
                let (key, sub) = match path.strip_suffix("/status") {
                    Some(object) => (object.to_owned(), true),
                    None => (path.clone(), false),
                };
                let Some(object) = state.objects.get_mut(&key) else {
                    return status(404, "not found");
                };
                if sub {
                    // The status subresource takes only the status.
                    apply_merge_patch(&mut object["status"], &body["status"]);
                } else {
                    apply_merge_patch(object, &body);
                }
                respond(StatusCode::OK, object)
            }
            Method::GET => match state.objects.get(&path) {
                Some(object) => respond(StatusCode::OK, object),
                None => status(404, "not found"),
            },
            _ => status(405, "not supported by the fake"),
        }
    }
}

fn is_json_patch(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json-patch+json"))
}

/// RFC 7386.
fn apply_merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Value::Object(target) = target else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            apply_merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

fn respond(code: StatusCode, body: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

fn status(code: u16, message: &str) -> Response<Body> {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": "", "code": code,
    });
    respond(StatusCode::from_u16(code).unwrap(), &body)
}
