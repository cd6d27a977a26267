//! Every write names its field manager. A recording stand-in for the apiserver on loopback answers
//! just the requests of the certificate keeper and the event recorder, and keeps what they sent:
//! the `fieldManager` of each write, and the User-Agent the apiserver falls back to without one.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use sandcap::certs::{self, CertOptions};
use serde_json::{Value, json};

const SECRET: &str = "/api/v1/namespaces/sandcap-system/secrets";
const CONFIG: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/sandcap";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

/// One request as the apiserver would see it.
#[derive(Clone, Debug)]
struct Seen {
    method: Method,
    path: String,
    query: String,
    user_agent: String,
}

impl Seen {
    /// The manager the apiserver records: `fieldManager`, else the User-Agent up to its first `/`.
    fn manager(&self) -> &str {
        let named = self.query.split('&').find_map(|pair| pair.strip_prefix("fieldManager="));
        named.unwrap_or_else(|| self.user_agent.split('/').next().unwrap_or_default())
    }
}

#[derive(Default)]
struct Apiserver {
    seen: Mutex<Vec<Seen>>,
    secret: Mutex<Option<Value>>,
}

async fn answer(
    State(api): State<Arc<Apiserver>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let user_agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let path = uri.path().to_string();
    api.seen.lock().unwrap().push(Seen {
        method: method.clone(),
        path: path.clone(),
        query: uri.query().unwrap_or_default().to_string(),
        user_agent: user_agent.to_string(),
    });
    let sent = || serde_json::from_slice::<Value>(&body).unwrap();
    let secret_path = format!("{SECRET}/sandcap-webhook-tls");
    let (status, body) = match (method, path.as_str()) {
        (Method::GET, p) if p == secret_path => match api.secret.lock().unwrap().clone() {
            Some(secret) => (StatusCode::OK, secret),
            None => (StatusCode::NOT_FOUND, not_found()),
        },
        (Method::POST, SECRET) => store(&api, sent(), StatusCode::CREATED),
        (Method::PUT, p) if p == secret_path => store(&api, sent(), StatusCode::OK),
        (Method::GET | Method::PATCH, CONFIG) => (StatusCode::OK, webhook_config()),
        (Method::POST, EVENTS) => (StatusCode::CREATED, sent()),
        _ => (StatusCode::NOT_FOUND, not_found()),
    };
    (status, body.to_string())
}

fn store(api: &Apiserver, mut secret: Value, status: StatusCode) -> (StatusCode, Value) {
    secret["metadata"]["resourceVersion"] = json!("1");
    *api.secret.lock().unwrap() = Some(secret.clone());
    (status, secret)
}

fn not_found() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"})
}

fn webhook_config() -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "sandcap", "resourceVersion": "5"},
        "webhooks": [{"name": "providers.sandcap.dev", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                      "clientConfig": {"service": {"namespace": "sandcap-system", "name": "sandcap-webhook"}}}]
    })
}

/// The stand-in on a loopback port, and a client configured as `sandcap run` configures its own.
async fn start() -> (Arc<Apiserver>, kube::Client) {
    let api = Arc::new(Apiserver::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = Router::new().fallback(answer).with_state(api.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let config = sandcap::server::client_config(kube::Config::new(url.parse().unwrap()));
    (api, kube::Client::try_from(config).unwrap())
}

fn writes(api: &Apiserver) -> Vec<Seen> {
    api.seen.lock().unwrap().iter().filter(|s| s.method != Method::GET).cloned().collect()
}

#[tokio::test]
async fn the_certificate_secret_and_the_ca_bundle_are_written_by_sandcap() {
    let (api, client) = start().await;
    let opts = CertOptions {
        secret_name: "sandcap-webhook-tls".into(),
        namespace: "sandcap-system".into(),
        service_name: "sandcap-webhook".into(),
        webhook_config_name: "sandcap".into(),
        check_interval: Duration::from_secs(60),
    };
    let now = SystemTime::now();
    certs::reconcile(&client, &opts, now).await.unwrap();
    // Late in the serving certificate's year: renewed in place.
    certs::reconcile(&client, &opts, now + Duration::from_secs(300 * 24 * 60 * 60)).await.unwrap();

    let writes = writes(&api);
    let kinds: Vec<(Method, &str)> = writes.iter().map(|w| (w.method.clone(), w.path.as_str())).collect();
    let secret = format!("{SECRET}/sandcap-webhook-tls");
    assert_eq!(
        kinds,
        [(Method::POST, SECRET), (Method::PATCH, CONFIG), (Method::PUT, secret.as_str()), (Method::PATCH, CONFIG)]
    );
    for write in &writes {
        assert!(write.query.split('&').any(|p| p == "fieldManager=sandcap"), "{write:?}");
    }
}

#[tokio::test]
async fn events_are_written_by_sandcap() {
    let (api, client) = start().await;
    let recorder = Recorder::new(client, Reporter { controller: "sandcap".into(), instance: Some("pod-0".into()) });
    let event = Event {
        type_: EventType::Normal,
        reason: "CapabilitiesGranted".into(),
        note: Some("driver k: reusableLeases now on".into()),
        action: "Resolve".into(),
        secondary: None,
    };
    let reference = ObjectReference {
        api_version: Some("sandcap.dev/v1alpha1".into()),
        kind: Some("SandboxProvider".into()),
        name: Some("p".into()),
        ..ObjectReference::default()
    };
    recorder.publish(&event, &reference).await.unwrap();
    let writes = writes(&api);
    assert_eq!(writes.len(), 1, "{writes:?}");
    // kube's Recorder sends no fieldManager: the User-Agent names the manager.
    assert_eq!(writes[0].manager(), "sandcap", "{writes:?}");
    assert!(writes[0].user_agent.starts_with("sandcap/"), "{writes:?}");
}
