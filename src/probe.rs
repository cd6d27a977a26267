//! The worker probe (API.md section 4): one JSON-RPC 2.0 `initialize` over HTTP POST.
//!
//! Everything that can go wrong is fail-closed: the outcome is `Failed` with a message, and the
//! caller verifies nothing. The worker is untrusted input, so the answer is bounded in time and
//! size, redirects are not followed, and messages never quote the answer body or a URL's
//! credentials or query (either may carry a token).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::Url;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::{SandboxProvider, SandboxProviderSpec, ServiceRef, WorkerRef};
use crate::contract::Verified;

/// An answer larger than this is refused; a real `initialize` result is a few hundred bytes.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// Bounds on what a worker may write into `status.worker.supportedMethods`.
const MAX_METHODS: usize = 256;
const MAX_METHOD_LEN: usize = 128;
/// The longest piece of worker-supplied text (a JSON-RPC error message) a status message quotes.
const MAX_QUOTED: usize = 200;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
const API_VERSION: u32 = 1;

/// What one probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The worker answered `ok: true`; `methods` is its `supportedMethods`, sorted, without duplicates.
    Succeeded { methods: Vec<String> },
    /// Nothing is verified; `message` says why and is safe to publish.
    Failed { message: String },
}

impl ProbeOutcome {
    pub fn verified(&self) -> Verified {
        match self {
            ProbeOutcome::Succeeded { methods } => Verified::methods(methods.iter().cloned()),
            ProbeOutcome::Failed { .. } => Verified::nothing(),
        }
    }

    /// The `result` label of the probe metric.
    pub fn label(&self) -> &'static str {
        match self {
            ProbeOutcome::Succeeded { .. } => "succeeded",
            ProbeOutcome::Failed { .. } => "failed",
        }
    }
}

/// Probes workers. Cheap to clone: the HTTP connection pool is shared.
#[derive(Clone, Debug)]
pub struct Prober {
    http: reqwest::Client,
    timeout: Duration,
    allow_worker_urls: bool,
    instance_id: String,
    next_id: Arc<AtomicU64>,
}

impl Prober {
    /// `timeout` bounds connecting and the whole exchange; `instance_id` is sent as
    /// `instanceInfo.instanceId` (the operator's identity).
    pub fn new(timeout: Duration, allow_worker_urls: bool, instance_id: impl Into<String>) -> Prober {
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .timeout(timeout)
            // A redirect would let a worker point the operator at another address.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("sandcap/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("a client with these settings always builds");
        Prober { http, timeout, allow_worker_urls, instance_id: instance_id.into(), next_id: Arc::default() }
    }

    /// Whether `spec.worker.url` is probed (`--allow-worker-urls`).
    pub fn allows_urls(&self) -> bool {
        self.allow_worker_urls
    }

    /// Probes the provider's worker at the endpoint its spec names.
    pub async fn probe(&self, provider: &SandboxProvider) -> ProbeOutcome {
        match endpoint(&provider.spec.worker, self.allow_worker_urls) {
            Ok(url) => self.probe_url(&url, &provider.spec).await,
            Err(message) => ProbeOutcome::Failed { message },
        }
    }

    /// Probes the worker at `url` with the manifest built from `spec`.
    pub async fn probe_url(&self, url: &Url, spec: &SandboxProviderSpec) -> ProbeOutcome {
        match self.initialize(url, spec).await {
            Ok(methods) => ProbeOutcome::Succeeded { methods },
            Err(why) => ProbeOutcome::Failed { message: format!("probe of {} failed: {why}", redacted(url)) },
        }
    }

    async fn initialize(&self, url: &Url, spec: &SandboxProviderSpec) -> Result<Vec<String>, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let request = initialize_request(id, spec, &self.instance_id);
        let response = self
            .http
            .post(url.clone())
            .header(http::header::ACCEPT, "application/json")
            .json(&request)
            .send()
            .await
            .map_err(|e| self.describe(&e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("the worker answered HTTP {status}"));
        }
        let body = self.read_bounded(response).await?;
        parse_answer(&body, id)
    }

    /// Reads the body chunk by chunk and gives up as soon as it passes the bound.
    async fn read_bounded(&self, mut response: reqwest::Response) -> Result<Vec<u8>, String> {
        let too_large = || format!("the answer is larger than {MAX_ANSWER_BYTES} bytes");
        if response.content_length().is_some_and(|n| n > MAX_ANSWER_BYTES as u64) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.describe(&e))? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// A transport error in words, without the URL reqwest would put in its own message.
    fn describe(&self, e: &reqwest::Error) -> String {
        if e.is_timeout() {
            return format!("no answer within {}", humantime::format_duration(self.timeout));
        }
        // The innermost cause ("Connection refused", "dns error: ...") says what happened.
        let mut deepest = None;
        let mut cause = std::error::Error::source(e);
        while let Some(c) = cause {
            deepest = Some(c);
            cause = c.source();
        }
        let detail = deepest.map_or_else(|| "the request failed".to_string(), |c| c.to_string());
        if e.is_connect() { format!("cannot connect: {detail}") } else { detail }
    }
}

/// The `initialize` request API.md section 4 specifies.
fn initialize_request(id: u64, spec: &SandboxProviderSpec, instance_id: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "initialize",
        "params": {
            "manifest": {
                "pluginKey": spec.plugin_key,
                "version": spec.version,
                "drivers": spec.environment_drivers,
            },
            "config": {},
            "instanceInfo": {"instanceId": instance_id, "hostVersion": env!("CARGO_PKG_VERSION")},
            "apiVersion": API_VERSION,
        },
    })
}

/// Where the worker answers: its Service's cluster DNS name, or `spec.worker.url` when the
/// operator allows URLs. The error is a message for the status.
pub fn endpoint(worker: &WorkerRef, allow_worker_urls: bool) -> Result<Url, String> {
    match (&worker.service, &worker.url) {
        (Some(service), None) => service_url(service),
        (None, Some(url)) if allow_worker_urls => parse_worker_url(url).map_err(|e| format!("spec.worker.url {e}")),
        (None, Some(_)) => Err("spec.worker.url is set but sandcap runs without --allow-worker-urls, so the \
                                worker is not probed; use spec.worker.service or start sandcap with \
                                --allow-worker-urls"
            .into()),
        (Some(_), Some(_)) => Err("spec.worker sets both service and url; exactly one is allowed".into()),
        (None, None) => Err("spec.worker names neither a service nor a url".into()),
    }
}

/// An absolute `http` or `https` URL. The error does not repeat the URL (it may hold credentials).
pub fn parse_worker_url(url: &str) -> Result<Url, String> {
    let parsed = Url::parse(url).map_err(|e| format!("is not a valid URL: {e}"))?;
    match parsed.scheme() {
        "http" | "https" => Ok(parsed),
        other => Err(format!("has scheme {other}; only http and https are probed")),
    }
}

fn service_url(service: &ServiceRef) -> Result<Url, String> {
    for (field, value) in [("name", &service.name), ("namespace", &service.namespace)] {
        if !is_dns_label(value) {
            return Err(format!("spec.worker.service.{field} is not a DNS label"));
        }
    }
    if !(1..=65535).contains(&service.port) {
        return Err("spec.worker.service.port is not between 1 and 65535".into());
    }
    let path = service.path.as_deref().unwrap_or("/");
    if !path.starts_with('/') {
        return Err("spec.worker.service.path does not start with /".into());
    }
    let url = format!("http://{}.{}.svc:{}{path}", service.name, service.namespace, service.port);
    Url::parse(&url).map_err(|e| format!("spec.worker.service does not make a valid URL: {e}"))
}

/// The URL without credentials, query or fragment: safe to show.
pub fn redacted(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    format!("{}://{host}{port}{}", url.scheme(), url.path())
}

#[derive(Deserialize)]
struct Answer {
    jsonrpc: Option<Value>,
    id: Option<Value>,
    result: Option<Value>,
    error: Option<RpcError>,
}

#[derive(Deserialize)]
struct RpcError {
    code: Option<i64>,
    message: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeResult {
    ok: Option<bool>,
    supported_methods: Option<Value>,
}

/// Judges the answer body. Errors describe the answer's shape, never quote its values (except a
/// JSON-RPC error message, shortened), so a misbehaving worker cannot fill the status.
fn parse_answer(body: &[u8], expected_id: u64) -> Result<Vec<String>, String> {
    let answer: Answer = serde_json::from_slice(body)
        .map_err(|e| format!("the answer is not a JSON-RPC object (line {}, column {})", e.line(), e.column()))?;
    if answer.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
        return Err("the answer is not JSON-RPC 2.0 (jsonrpc is not \"2.0\")".into());
    }
    if answer.id.as_ref().and_then(Value::as_u64) != Some(expected_id) {
        return Err(format!("the answer's id does not match the request id {expected_id}"));
    }
    if let Some(error) = answer.error {
        let code = error.code.map_or_else(|| "without a code".to_string(), |c| c.to_string());
        let message = quoted(error.message.as_deref().unwrap_or(""));
        return Err(format!("the worker answered JSON-RPC error {code}: {message}"));
    }
    let result = answer.result.ok_or("the answer has neither result nor error")?;
    let result: InitializeResult =
        serde_json::from_value(result).map_err(|_| "the answer's result is not an InitializeResult object")?;
    match result.ok {
        Some(true) => {}
        Some(false) => return Err("the worker answered ok: false".into()),
        None => return Err("the answer's result has no boolean ok".into()),
    }
    let Some(Value::Array(list)) = result.supported_methods else {
        return Err("the answer's result.supportedMethods is not a list".into());
    };
    if list.len() > MAX_METHODS {
        return Err(format!("the answer lists more than {MAX_METHODS} supportedMethods"));
    }
    let mut methods = Vec::with_capacity(list.len());
    for (i, item) in list.into_iter().enumerate() {
        match item {
            Value::String(m) if is_method_name(&m) => methods.push(m),
            _ => return Err(format!("the answer's result.supportedMethods[{i}] is not a method name")),
        }
    }
    methods.sort();
    methods.dedup();
    Ok(methods)
}

fn is_method_name(m: &str) -> bool {
    !m.is_empty() && m.len() <= MAX_METHOD_LEN && m.chars().all(|c| c.is_ascii_graphic())
}

/// Worker-supplied text made safe for a one-line status message.
fn quoted(text: &str) -> String {
    let clean: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if clean.chars().count() > MAX_QUOTED {
        format!("{}...", clean.chars().take(MAX_QUOTED).collect::<String>())
    } else {
        clean
    }
}

/// RFC 1123 label, as Service names and namespaces are.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(v: Value) -> Result<Vec<String>, String> {
        parse_answer(v.to_string().as_bytes(), 7)
    }

    #[test]
    fn good_answer_is_sorted_and_deduplicated() {
        let got = answer(json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true,
            "supportedMethods": ["environmentSyncOut", "environmentExecute", "environmentSyncOut"]}}));
        assert_eq!(got.unwrap(), ["environmentExecute", "environmentSyncOut"]);
    }

    #[test]
    fn every_malformed_shape_fails_without_quoting_values() {
        let secret = "s3cr3t-token";
        let cases = [
            json!({"jsonrpc": "1.0", "id": 7, "result": {"ok": true, "supportedMethods": []}}),
            json!({"jsonrpc": "2.0", "id": 8, "result": {"ok": true, "supportedMethods": [secret]}}),
            json!({"jsonrpc": "2.0", "id": "7", "result": {"ok": true, "supportedMethods": []}}),
            json!({"jsonrpc": "2.0", "id": 7}),
            json!({"jsonrpc": "2.0", "id": 7, "result": secret}),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": secret, "supportedMethods": []}}),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"supportedMethods": []}}),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true, "supportedMethods": secret}}),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true, "supportedMethods": [1]}}),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true, "supportedMethods": [format!("a b{secret}")]}}),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true, "supportedMethods": vec!["m"; MAX_METHODS + 1]}}),
        ];
        for case in cases {
            let err = answer(case.clone()).expect_err(&case.to_string());
            assert!(!err.contains(secret), "{err}");
        }
        let err = parse_answer(format!("not json {secret}").as_bytes(), 7).unwrap_err();
        assert!(err.starts_with("the answer is not a JSON-RPC object") && !err.contains(secret), "{err}");
    }

    #[test]
    fn ok_false_and_rpc_errors_are_named() {
        let err = answer(json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": false}})).unwrap_err();
        assert_eq!(err, "the worker answered ok: false");
        let long = "x".repeat(1000);
        let err =
            answer(json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": format!("no\n{long}")}}))
                .unwrap_err();
        assert!(err.starts_with("the worker answered JSON-RPC error -32601: no x"), "{err}");
        assert!(err.len() < 300 && !err.contains('\n'));
    }

    #[test]
    fn service_endpoint_defaults_path_and_rejects_odd_names() {
        let service = |name: &str, path: Option<&str>| WorkerRef {
            service: Some(ServiceRef {
                namespace: "sandbox-system".into(),
                name: name.into(),
                port: 8080,
                path: path.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            endpoint(&service("acme-worker", None), false).unwrap().as_str(),
            "http://acme-worker.sandbox-system.svc:8080/"
        );
        assert_eq!(
            endpoint(&service("acme-worker", Some("/rpc")), false).unwrap().as_str(),
            "http://acme-worker.sandbox-system.svc:8080/rpc"
        );
        for name in ["evil.com:80/x?", "Upper", "", "-x", "a@b"] {
            assert!(endpoint(&service(name, None), false).is_err(), "{name}");
        }
        assert!(endpoint(&service("w", Some("rpc")), false).is_err());
    }

    #[test]
    fn worker_urls_need_the_flag_and_are_redacted() {
        let worker =
            WorkerRef { url: Some("https://user:pw@w.example:9443/rpc?token=abc".into()), ..Default::default() };
        let refused = endpoint(&worker, false).unwrap_err();
        assert!(refused.contains("--allow-worker-urls") && !refused.contains("pw"), "{refused}");
        let url = endpoint(&worker, true).unwrap();
        assert_eq!(redacted(&url), "https://w.example:9443/rpc");
        let bad = WorkerRef { url: Some("file:///etc/passwd".into()), ..Default::default() };
        assert!(endpoint(&bad, true).unwrap_err().contains("only http and https"));
        assert!(endpoint(&WorkerRef::default(), true).is_err());
    }
}
