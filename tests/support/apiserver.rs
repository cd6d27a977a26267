//! A small in-memory apiserver, as a tower service behind a real `kube::Client`: enough of the
//! Kubernetes REST API for sandcap's controllers to run unmodified: list and watch (what
//! kube-fake-client lacks), get, create, replace, delete, and status server-side apply.
//!
//! Objects are kept as JSON bytes, as etcd keeps them, so 10,000 leases cost tens of megabytes, not
//! hundreds. Simplifications, none of which the controllers depend on: every object of every
//! resource is accepted (no schemas), a replace bumps `generation` and keeps `status`, a status
//! apply replaces the whole status (sandcap always applies its whole status), and the watch log
//! keeps the last few thousand events (an older `resourceVersion` gets 410 Gone, as from etcd
//! compaction, and the watcher re-lists).

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body as StreamBody;
use futures::future::BoxFuture;
use futures::{StreamExt, stream};
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::broadcast;

const LOG_LEN: usize = 4096;

/// group/version/resource, e.g. `sandcap.dev/v1alpha1/sandboxleases` or `v1/secrets`.
type Resource = String;
type Key = (Resource, String, String);

#[derive(Clone)]
struct Change {
    rv: u64,
    resource: Resource,
    namespace: String,
    kind: &'static str,
    object: Arc<Vec<u8>>,
}

#[derive(Default)]
struct State {
    objects: BTreeMap<Key, Vec<u8>>,
    rv: u64,
    next_uid: u64,
    log: VecDeque<Change>,
}

#[derive(Clone)]
pub struct MiniApi {
    state: Arc<Mutex<State>>,
    changes: broadcast::Sender<Change>,
    status_writes: Arc<AtomicUsize>,
    /// While true every request gets 503, as from an apiserver that went away.
    down: Arc<AtomicBool>,
    /// Bumped when the apiserver goes down: every open watch stream ends.
    outages: tokio::sync::watch::Sender<u64>,
}

impl Default for MiniApi {
    fn default() -> Self {
        MiniApi {
            state: Arc::default(),
            changes: broadcast::channel(LOG_LEN).0,
            status_writes: Arc::default(),
            down: Arc::default(),
            outages: tokio::sync::watch::channel(0).0,
        }
    }
}

/// What a request path names.
struct Target {
    resource: Resource,
    /// Empty for cluster-scoped objects and for lists across all namespaces.
    namespace: String,
    name: Option<String>,
    status: bool,
}

fn parse(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group_version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => (version.to_string(), rest),
        ["apis", group, version, rest @ ..] => (format!("{group}/{version}"), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (ns.to_string(), rest),
        _ => (String::new(), rest),
    };
    let (resource, name, status) = match rest {
        [resource] => (resource, None, false),
        [resource, name] => (resource, Some(name.to_string()), false),
        [resource, name, "status"] => (resource, Some(name.to_string()), true),
        _ => return None,
    };
    Some(Target { resource: format!("{group_version}/{resource}"), namespace, name, status })
}

impl MiniApi {
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.clone(), "default")
    }

    pub fn status_writes(&self) -> usize {
        self.status_writes.load(Ordering::Relaxed)
    }

    /// Takes the apiserver away (open watches end, every request fails) or brings it back.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
        if down {
            self.outages.send_modify(|n| *n += 1);
        }
    }

    async fn answer(&self, request: Request<Body>) -> Response<StreamBody> {
        if self.down.load(Ordering::SeqCst) {
            return status(StatusCode::SERVICE_UNAVAILABLE, "the apiserver is down");
        }
        let (parts, body) = request.into_parts();
        let Some(target) = parse(parts.uri.path()) else { return status(StatusCode::NOT_FOUND, "no such path") };
        let query = parts.uri.query().unwrap_or_default();
        let param = |key: &str| query.split('&').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='));
        let body = body.collect_bytes().await.unwrap_or_default();
        match (&parts.method, &target.name) {
            (&Method::GET, None) if matches!(param("watch"), Some("true" | "1")) => {
                self.watch(target, param("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0))
            }
            (&Method::GET, None) => self.list(&target),
            (&Method::GET, Some(name)) => match self.state.lock().unwrap().objects.get(&key(&target, name)) {
                Some(object) => json_response(StatusCode::OK, object.clone()),
                None => status(StatusCode::NOT_FOUND, "not found"),
            },
            (&Method::POST, None) => self.create(&target, &body),
            (&Method::PUT, Some(name)) => self.replace(&target, name, &body),
            (&Method::PATCH, Some(name)) if target.status => self.apply_status(&target, name, &body),
            (&Method::DELETE, Some(name)) => self.delete(&target, name),
            _ => status(StatusCode::METHOD_NOT_ALLOWED, "not supported by the in-memory apiserver"),
        }
    }

    /// The list is spliced from the stored bytes: no object is parsed to answer it.
    fn list(&self, target: &Target) -> Response<StreamBody> {
        let state = self.state.lock().unwrap();
        let items = state
            .objects
            .iter()
            .filter(|((resource, ns, _), _)| *resource == target.resource && in_scope(target, ns))
            .map(|(_, object)| object.as_slice());
        let mut body =
            format!(r#"{{"kind":"List","apiVersion":"v1","metadata":{{"resourceVersion":"{}"}},"items":["#, state.rv)
                .into_bytes();
        for (i, item) in items.enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(item);
        }
        body.extend_from_slice(b"]}");
        json_response(StatusCode::OK, body)
    }

    /// The stored objects of one resource, straight from their bytes (for benchmarks: no list).
    pub fn stored<K: serde::de::DeserializeOwned>(&self, resource: &str) -> Vec<K> {
        let state = self.state.lock().unwrap();
        state
            .objects
            .iter()
            .filter(|((r, _, _), _)| r == resource)
            .map(|(_, object)| serde_json::from_slice(object).expect("stored JSON"))
            .collect()
    }

    /// Replays the logged changes after `since`, then streams new ones, one JSON event per line.
    fn watch(&self, target: Target, since: u64) -> Response<StreamBody> {
        let (replay, live) = {
            let state = self.state.lock().unwrap();
            if state.log.front().is_some_and(|c| c.rv > since + 1) && since < state.rv {
                let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                  "reason": "Expired", "code": 410, "message": "too old resource version"}});
                return stream_response(stream::iter([Ok(line(&gone))]).boxed());
            }
            let replay: Vec<Change> = state.log.iter().filter(|c| c.rv > since).cloned().collect();
            (replay, self.changes.subscribe())
        };
        let live = stream::unfold(live, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(change) => return Some((change, rx)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        let mut outages = self.outages.subscribe();
        let outage = async move {
            let _ = outages.changed().await;
        };
        let events = stream::iter(replay)
            .chain(live)
            .take_until(outage)
            .filter(move |c| std::future::ready(c.resource == target.resource && in_scope(&target, &c.namespace)))
            .map(|c| {
                let mut event = format!(r#"{{"type":"{}","object":"#, c.kind).into_bytes();
                event.extend_from_slice(&c.object);
                event.extend_from_slice(b"}\n");
                Ok::<_, Infallible>(event)
            });
        stream_response(events.boxed())
    }

    fn create(&self, target: &Target, body: &[u8]) -> Response<StreamBody> {
        let Ok(mut object) = serde_json::from_slice::<Value>(body) else {
            return status(StatusCode::BAD_REQUEST, "not JSON");
        };
        let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str).map(str::to_string) else {
            return status(StatusCode::UNPROCESSABLE_ENTITY, "metadata.name is required");
        };
        let mut state = self.state.lock().unwrap();
        let key = key(target, &name);
        if state.objects.contains_key(&key) {
            return status(StatusCode::CONFLICT, "already exists");
        }
        state.next_uid += 1;
        let meta = &mut object["metadata"];
        meta["uid"] = json!(format!("uid-{}", state.next_uid));
        meta["generation"] = json!(1);
        meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        if !target.namespace.is_empty() {
            meta["namespace"] = json!(target.namespace);
        }
        self.store(&mut state, key, object, "ADDED")
    }

    fn replace(&self, target: &Target, name: &str, body: &[u8]) -> Response<StreamBody> {
        let Ok(mut object) = serde_json::from_slice::<Value>(body) else {
            return status(StatusCode::BAD_REQUEST, "not JSON");
        };
        let mut state = self.state.lock().unwrap();
        let key = key(target, name);
        let Some(old) = state.objects.get(&key).map(|o| serde_json::from_slice::<Value>(o).expect("stored JSON"))
        else {
            return status(StatusCode::NOT_FOUND, "not found");
        };
        for field in ["uid", "namespace", "creationTimestamp"] {
            object["metadata"][field] = old["metadata"][field].clone();
        }
        object["metadata"]["generation"] = json!(old["metadata"]["generation"].as_i64().unwrap_or(0) + 1);
        if let Some(map) = object.as_object_mut() {
            match old.get("status") {
                Some(s) => map.insert("status".into(), s.clone()),
                None => map.remove("status"),
            };
        }
        self.store(&mut state, key, object, "MODIFIED")
    }

    fn apply_status(&self, target: &Target, name: &str, body: &[u8]) -> Response<StreamBody> {
        let Ok(patch) = serde_json::from_slice::<Value>(body) else {
            return status(StatusCode::BAD_REQUEST, "not JSON");
        };
        let mut state = self.state.lock().unwrap();
        let key = key(target, name);
        let Some(mut object) =
            state.objects.get(&key).map(|o| serde_json::from_slice::<Value>(o).expect("stored JSON"))
        else {
            return status(StatusCode::NOT_FOUND, "not found");
        };
        object["status"] = patch["status"].clone();
        self.status_writes.fetch_add(1, Ordering::Relaxed);
        self.store(&mut state, key, object, "MODIFIED")
    }

    fn delete(&self, target: &Target, name: &str) -> Response<StreamBody> {
        let mut state = self.state.lock().unwrap();
        let Some(object) = state.objects.remove(&key(target, name)) else {
            return status(StatusCode::NOT_FOUND, "not found");
        };
        state.rv += 1;
        self.log(&mut state, target.resource.clone(), target.namespace.clone(), "DELETED", object.clone());
        json_response(StatusCode::OK, object)
    }

    fn store(&self, state: &mut State, key: Key, mut object: Value, kind: &'static str) -> Response<StreamBody> {
        state.rv += 1;
        object["metadata"]["resourceVersion"] = json!(state.rv.to_string());
        let bytes = serde_json::to_vec(&object).expect("serializes");
        state.objects.insert(key.clone(), bytes.clone());
        self.log(state, key.0, key.1, kind, bytes.clone());
        json_response(StatusCode::OK, bytes)
    }

    fn log(&self, state: &mut State, resource: Resource, namespace: String, kind: &'static str, object: Vec<u8>) {
        let change = Change { rv: state.rv, resource, namespace, kind, object: Arc::new(object) };
        if state.log.len() == LOG_LEN {
            state.log.pop_front();
        }
        state.log.push_back(change.clone());
        let _ = self.changes.send(change);
    }
}

impl tower::Service<Request<Body>> for MiniApi {
    type Response = Response<StreamBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<StreamBody>, Infallible>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let api = self.clone();
        Box::pin(async move { Ok(api.answer(request).await) })
    }
}

fn key(target: &Target, name: &str) -> Key {
    (target.resource.clone(), target.namespace.clone(), name.to_string())
}

fn in_scope(target: &Target, namespace: &str) -> bool {
    target.namespace.is_empty() || target.namespace == namespace
}

fn line(event: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(event).expect("serializes");
    bytes.push(b'\n');
    bytes
}

fn json_response(code: StatusCode, body: Vec<u8>) -> Response<StreamBody> {
    Response::builder().status(code).header("content-type", "application/json").body(body.into()).expect("a response")
}

fn stream_response(events: futures::stream::BoxStream<'static, Result<Vec<u8>, Infallible>>) -> Response<StreamBody> {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(StreamBody::from_stream(events))
        .expect("a response")
}

fn status(code: StatusCode, message: &str) -> Response<StreamBody> {
    let reason = code.canonical_reason().unwrap_or_default().replace(' ', "");
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code.as_u16(),
                      "reason": reason, "message": message});
    json_response(code, serde_json::to_vec(&body).expect("serializes"))
}
