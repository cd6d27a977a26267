//! sandcap's probe, served over HTTP as the reference worker serves it: `POST <path>` with a
//! JSON-RPC `initialize` is answered with the cached `InitializeResult` (and the plugin's
//! identity) while a worker is initialized, and with HTTP 503 and the SDK's `WORKER_UNAVAILABLE`
//! otherwise, which sandcap's probe classes as unreachable. `GET /healthz` says the same for a
//! readiness probe. `GET /manifest` answers the manifest the bridge loaded (as the host's
//! validator parsed it, when the package has it), which `sandcap import URL` reads: no plugin
//! code runs where the import runs. Connections go through the webhook's listener, under
//! [`limits`].

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State as Extract;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::rpc::{Envelope, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, WORKER_UNAVAILABLE};
use super::supervisor::State;
use crate::listener::Limits;

/// The probe endpoint's limits: an `initialize` request is a few KiB (the provider's drivers), and
/// its callers are sandcap's replicas and a kubelet.
pub fn limits() -> Limits {
    Limits {
        max_body: 256 * 1024,
        request_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(120),
        max_connections: 64,
        per_client_connections: 16,
        drain_timeout: Duration::from_secs(5),
        ..Limits::default()
    }
}

/// Where the bridge answers the manifest it loaded.
pub const MANIFEST_PATH: &str = "/manifest";

pub fn router(path: &str, state: watch::Receiver<State>, manifest: &serde_json::Map<String, Value>) -> Router {
    let manifest: std::sync::Arc<str> = Value::Object(manifest.clone()).to_string().into();
    let answer_manifest = move || async move { ([(header::CONTENT_TYPE, "application/json")], manifest.to_string()) };
    Router::new()
        .route(path, post(initialize))
        .route("/healthz", get(healthz))
        .route(MANIFEST_PATH, get(answer_manifest))
        .with_state(state)
}

async fn initialize(Extract(state): Extract<watch::Receiver<State>>, body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Envelope>(&body) else {
        return rpc_error(StatusCode::OK, None, PARSE_ERROR, "the request is not a JSON-RPC object".into());
    };
    let id = request.id.filter(|id| id.get() != "null");
    if request.jsonrpc.as_deref() != Some("2.0") || id.is_none() {
        return rpc_error(StatusCode::OK, id, INVALID_REQUEST, "not a JSON-RPC 2.0 request with an id".into());
    }
    if request.method.as_deref() != Some("initialize") {
        let message = "method not found: sandcap bridge answers only initialize (sandcap's probe)".into();
        return rpc_error(StatusCode::OK, id, METHOD_NOT_FOUND, message);
    }
    let current = state.borrow().clone();
    match current {
        State::Ready { result, .. } => {
            // The cached text as it is (no tree is built per probe), under the request's own id.
            let id = id.map_or("null", RawValue::get);
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{}}}"#, result.get());
            ([(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        other => unavailable(id, &other),
    }
}

/// HTTP 503 with a `Retry-After` and the SDK's `WORKER_UNAVAILABLE`.
fn unavailable(id: Option<&RawValue>, state: &State) -> Response {
    let (message, retry) = not_ready(state);
    let mut response = rpc_error(StatusCode::SERVICE_UNAVAILABLE, id, WORKER_UNAVAILABLE, message);
    if let Ok(value) = HeaderValue::from_str(&retry.as_secs().max(1).to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

fn not_ready(state: &State) -> (String, Duration) {
    let restarts = state.restarts();
    match state {
        State::Starting { .. } => (
            format!("the worker is starting and has not answered initialize (restarts: {restarts})"),
            Duration::from_secs(1),
        ),
        State::Down { reason, next_start, .. } => {
            let wait = next_start.saturating_duration_since(Instant::now());
            let secs = wait.as_secs_f64().ceil();
            (format!("{reason}; the next worker starts in {secs} s (restarts: {restarts})"), wait)
        }
        State::Ready { .. } => (String::new(), Duration::ZERO),
    }
}

async fn healthz(Extract(state): Extract<watch::Receiver<State>>) -> Response {
    let current = state.borrow().clone();
    match current {
        State::Ready { restarts, .. } => {
            format!("ok: the worker is initialized (restarts: {restarts})\n").into_response()
        }
        other => (StatusCode::SERVICE_UNAVAILABLE, format!("{}\n", not_ready(&other).0)).into_response(),
    }
}

fn rpc_error(status: StatusCode, id: Option<&RawValue>, code: i64, message: String) -> Response {
    let id = id.map_or(Value::Null, |id| serde_json::from_str(id.get()).unwrap_or(Value::Null));
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tower::ServiceExt;

    async fn ask(state: State, body: &str) -> (StatusCode, Option<String>, Value) {
        let (_keep, receiver) = watch::channel(state);
        let request = axum::http::Request::post("/rpc").body(axum::body::Body::from(body.to_string())).unwrap();
        let response = router("/rpc", receiver, &Default::default()).oneshot(request).await.unwrap();
        let status = response.status();
        let retry = response.headers().get(header::RETRY_AFTER).map(|v| v.to_str().unwrap().to_string());
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, retry, serde_json::from_slice(&bytes).unwrap())
    }

    fn ready() -> State {
        let result = RawValue::from_string(r#"{"ok":true,"supportedMethods":["health"],"plugin":{"id":"a"}}"#.into());
        State::Ready { result: Arc::from(result.unwrap()), restarts: 0 }
    }

    const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":42,"method":"initialize","params":{}}"#;

    #[tokio::test]
    async fn every_probe_gets_the_cached_answer_under_its_own_id() {
        let (status, _, answer) = ask(ready(), INITIALIZE).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            answer,
            json!({"jsonrpc": "2.0", "id": 42, "result": {"ok": true, "supportedMethods": ["health"], "plugin": {"id": "a"}}})
        );
        let (_, _, again) = ask(ready(), &INITIALIZE.replace("42", "\"x\"")).await;
        assert_eq!(again["id"], "x");
    }

    #[tokio::test]
    async fn the_manifest_loaded_is_answered_whatever_the_worker_does() {
        let manifest = json!({"id": "acme.plugin", "version": "1.2.3", "environmentDrivers": []});
        let (_keep, receiver) = watch::channel(State::Starting { restarts: 0 });
        let app = router("/rpc", receiver, manifest.as_object().unwrap());
        let request = axum::http::Request::get(MANIFEST_PATH).body(axum::body::Body::empty()).unwrap();
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap(), manifest);
    }

    #[tokio::test]
    async fn without_an_initialized_worker_the_probe_gets_503() {
        let (status, retry, answer) = ask(State::Starting { restarts: 0 }, INITIALIZE).await;
        assert_eq!((status, retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("1")));
        assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (json!(42), json!(WORKER_UNAVAILABLE)));
        let down = State::Down {
            reason: "the worker exited".into(),
            next_start: Instant::now() + Duration::from_secs(8),
            restarts: 3,
        };
        let (status, retry, answer) = ask(down, INITIALIZE).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(retry.unwrap().parse::<u64>().unwrap() >= 7);
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("the worker exited; the next worker starts in 8 s")
        );
    }

    #[tokio::test]
    async fn other_requests_are_refused_with_json_rpc_errors() {
        assert_eq!(ask(ready(), "not json").await.2["error"]["code"], PARSE_ERROR);
        assert_eq!(
            ask(ready(), r#"{"jsonrpc":"2.0","method":"initialize"}"#).await.2["error"]["code"],
            INVALID_REQUEST
        );
        let health = ask(ready(), r#"{"jsonrpc":"2.0","id":1,"method":"health"}"#).await;
        assert_eq!((health.0, health.2["error"]["code"].clone()), (StatusCode::OK, json!(METHOD_NOT_FOUND)));
    }
}
