//! The probe client against the real reference worker process over HTTP, plus a one-shot raw HTTP
//! server for what the worker never does (HTTP errors, redirects) and to see the request itself.

#[path = "../support/ca.rs"]
mod ca;
#[path = "../support/mod.rs"]
mod support;
mod tls;

use std::time::Duration;

use sandcap::probe::{FailureClass, MAX_ANSWER_BYTES, ProbeError, ProbeOutcome, Prober, parse_worker_url};
use sandcap_core::addresses::{AddressClass, AllowedCidrs, WorkerPolicy};
use sandcap_core::api::{SandboxProvider, SandboxProviderSpec};
use sandcap_core::versions::V1;
use serde_json::Value;
use support::{Worker, all_true, provider};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn spec() -> SandboxProviderSpec {
    serde_json::from_value::<SandboxProvider>(provider("acme", "http://unused.example", all_true())).unwrap().spec
}

/// The test workers listen on loopback, which worker URLs reach only where allowed.
fn loopback() -> AllowedCidrs {
    AllowedCidrs::new(["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()])
}

async fn probe_allowing(url: &str, timeout: Duration, allowed: AllowedCidrs) -> ProbeOutcome {
    let url = parse_worker_url(url).expect("a valid URL");
    Prober::new(timeout, WorkerPolicy { allow_urls: true, allowed_cidrs: allowed }, "test-instance")
        .unwrap()
        .probe_url(&url, &spec())
        .await
}

async fn probe_with(url: &str, timeout: Duration) -> ProbeOutcome {
    probe_allowing(url, timeout, loopback()).await
}

async fn probe(url: &str) -> ProbeOutcome {
    probe_with(url, Duration::from_secs(5)).await
}

/// What sandcap's log says of a failed probe.
fn failure(outcome: ProbeOutcome) -> String {
    match outcome {
        ProbeOutcome::Failed(failure) => failure.detail(),
        other => panic!("expected a failed probe, got {other:?}"),
    }
}

/// What the provider's status says of a failed probe.
fn status_message(outcome: &ProbeOutcome) -> String {
    match outcome {
        ProbeOutcome::Failed(failure) => failure.to_string(),
        other => panic!("expected a failed probe, got {other:?}"),
    }
}

fn failed_with(outcome: &ProbeOutcome) -> &ProbeError {
    match outcome {
        ProbeOutcome::Failed(failure) => &failure.error,
        other => panic!("expected a failed probe, got {other:?}"),
    }
}

/// The failure message of probing a worker that serves `environmentExecute` in `--mode mode`.
async fn failure_in_mode(mode: &str) -> String {
    let worker = Worker::start(&["--methods", "environmentExecute", "--mode", mode]);
    failure(probe(&worker.url).await)
}

#[tokio::test]
async fn success_verifies_the_advertised_methods() {
    let worker = Worker::start(&["--methods", "environmentSyncOut,environmentExecute,environmentSyncIn"]);
    let outcome = probe(&worker.url).await;
    let expected = ["environmentExecute", "environmentSyncIn", "environmentSyncOut"].map(String::from).to_vec();
    assert_eq!(outcome, ProbeOutcome::Succeeded { methods: expected, plugin: None });
    assert!(outcome.verified().has("environmentSyncIn"));
}

#[tokio::test]
async fn a_worker_listing_nothing_verifies_nothing() {
    let worker = Worker::start(&[]);
    let outcome = probe(&worker.url).await;
    assert_eq!(outcome, ProbeOutcome::Succeeded { methods: vec![], plugin: None });
    assert!(outcome.verified().is_nothing());
}

#[tokio::test]
async fn a_slow_worker_times_out() {
    let worker = Worker::start(&["--methods", "environmentExecute", "--delay", "10s"]);
    let message = failure(probe_with(&worker.url, Duration::from_millis(300)).await);
    assert!(message.contains("failed: no answer within 300ms"), "{message}");
}

#[tokio::test]
async fn a_malformed_answer_fails() {
    let message = failure_in_mode("malformed").await;
    assert!(message.contains("the answer is not a JSON-RPC object"), "{message}");
    assert!(!message.contains("this is not a JSON-RPC answer"), "the body is not quoted: {message}");
}

#[tokio::test]
async fn a_json_rpc_error_fails_with_its_code_only() {
    let message = failure_in_mode("rpc-error").await;
    assert!(message.ends_with("failed: the worker answered JSON-RPC error -32603"), "{message}");
    assert!(!message.contains("fails on purpose"), "the worker's text is not quoted: {message}");
}

#[tokio::test]
async fn whatever_answers_at_the_address_is_not_quoted() {
    // What a metadata service or another internal endpoint might say, if a worker URL reached it.
    let secret = format!("AccessKeyId ASIAXXXXSECRET {}", "SecretAccessKey/".repeat(40));
    let answer =
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": secret, "data": secret}});
    let (url, _) = serve_once(http("200 OK", "content-type: application/json\r\n", &answer.to_string())).await;
    let outcome = probe(&url).await;
    assert_eq!(failed_with(&outcome), &ProbeError::RpcError(Some(-32000)));
    assert_eq!(outcome.reason(), "rpc_error");
    let message = failure(outcome);
    assert!(message.ends_with("failed: the worker answered JSON-RPC error -32000"), "{message}");
    assert!(!message.contains("Secret") && !message.contains("ASIA"), "{message}");

    let (url, _) = serve_once(http("500 Internal Server Error", "", &secret)).await;
    let message = failure(probe(&url).await);
    assert!(message.ends_with("the worker answered HTTP 500 Internal Server Error"), "{message}");
}

#[tokio::test]
async fn a_host_name_resolving_to_loopback_is_refused_unless_allowed() {
    let worker = Worker::with_methods(&V1.worker_methods());
    // `localhost` is not checked by name here: only the addresses it resolves to are.
    let by_name = worker.url.replace("127.0.0.1", "localhost");
    let refused = probe_allowing(&by_name, Duration::from_secs(5), AllowedCidrs::default()).await;
    assert_eq!(failed_with(&refused), &ProbeError::RefusedAddress(AddressClass::Loopback));
    assert_eq!(refused.reason(), "refused_address");
    let message = failure(refused);
    assert!(message.contains("failed: the worker's host is a refused address (loopback)"), "{message}");
    // Allowing only 127.0.0.0/8 drops localhost's ::1 and connects to 127.0.0.1.
    let allowed = probe_allowing(&by_name, Duration::from_secs(5), AllowedCidrs::new(["127.0.0.0/8".parse().unwrap()]));
    assert!(matches!(allowed.await, ProbeOutcome::Succeeded { .. }));
}

#[tokio::test]
async fn refused_ip_literals_are_not_connected_to() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    for url in [
        format!("http://127.0.0.1:{port}/rpc"),
        format!("http://2130706433:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
    ] {
        let outcome = probe_allowing(&url, Duration::from_secs(5), AllowedCidrs::default()).await;
        assert_eq!(failed_with(&outcome), &ProbeError::RefusedAddress(AddressClass::Loopback), "{url}");
    }
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "nothing connected");
    let metadata = probe_allowing("http://169.254.169.254/latest/meta-data/", Duration::from_secs(5), loopback()).await;
    assert_eq!(failed_with(&metadata), &ProbeError::RefusedAddress(AddressClass::Metadata));
}

#[tokio::test]
async fn ok_false_fails() {
    assert!(failure_in_mode("not-ok").await.ends_with("the worker answered ok: false"));
}

#[tokio::test]
async fn an_endless_answer_is_cut_off_at_the_size_bound() {
    let message = failure_in_mode("huge").await;
    assert!(message.ends_with(&format!("the answer is larger than {MAX_ANSWER_BYTES} bytes")), "{message}");
}

#[tokio::test]
async fn an_answer_to_another_request_fails() {
    assert!(failure_in_mode("wrong-id").await.contains("does not match the request id"));
}

#[tokio::test]
async fn connection_refused_fails() {
    let (_held, port) = support::ports::closed_port();
    let outcome = probe(&format!("http://127.0.0.1:{port}/rpc")).await;
    assert_eq!(failed_with(&outcome), &ProbeError::ConnectionRefused);
    assert!(failure(outcome).contains("failed: cannot connect: connection refused"));
}

/// Whoever creates a provider chooses where its worker is and reads its status: the status says
/// no more than the class, whatever answered (or did not) at the address; the log says the rest.
#[tokio::test]
async fn status_names_only_the_coarse_class_and_the_log_has_the_detail() {
    let (not_found, _) = serve_once(http("404 Not Found", "", "no such page")).await;
    let (_held, port) = support::ports::closed_port();
    let closed = format!("http://127.0.0.1:{port}/rpc");
    let slow = Worker::start(&["--methods", "environmentExecute", "--delay", "10s"]);
    let declining = Worker::start(&["--methods", "environmentExecute", "--mode", "rpc-error"]);
    let cases = [
        (not_found, FailureClass::NotTheProtocol, "the worker answered HTTP 404 Not Found"),
        (closed, FailureClass::Unreachable, "cannot connect: connection refused"),
        (slow.url.clone(), FailureClass::Unreachable, "no answer within 300ms"),
        (declining.url.clone(), FailureClass::Declined, "the worker answered JSON-RPC error -32603"),
    ];
    let mut said = Vec::new();
    for (url, class, detail) in cases {
        let outcome = probe_with(&url, Duration::from_millis(300)).await;
        let ProbeOutcome::Failed(failure) = &outcome else { panic!("{url}: {outcome:?}") };
        assert_eq!(failure.error.class(), Some(class), "{url}");
        let status = status_message(&outcome);
        assert_eq!(status, format!("probe of {url} failed: {class}; sandcap's log has the detail"));
        assert!(failure.detail().starts_with(&format!("probe of {url} failed: {detail}")), "{}", failure.detail());
        said.push(status.replace(&url, ""));
    }
    // A refused connection and a timeout read alike.
    assert_eq!(said[1], said[2]);
}

#[tokio::test]
async fn messages_never_show_url_credentials_or_query() {
    let worker = Worker::start(&["--methods", "environmentExecute", "--mode", "not-ok"]);
    let url = worker.url.replace("http://", "http://user:hunter2@") + "?token=s3cr3t";
    let message = failure(probe(&url).await);
    assert!(message.starts_with("probe of http://127.0.0.1:"), "{message}");
    assert!(!message.contains("hunter2") && !message.contains("s3cr3t"), "{message}");
}

/// Answers one request with `response` and hands back the request body.
async fn serve_once(response: String) -> (String, tokio::task::JoinHandle<Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/rpc", listener.local_addr().unwrap());
    let handle = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        let body = loop {
            let n = socket.read(&mut buf).await.unwrap();
            request.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&request).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if body.len() >= length {
                    break body.to_string();
                }
            }
        };
        socket.write_all(response.as_bytes()).await.unwrap();
        socket.shutdown().await.unwrap();
        serde_json::from_str(&body).unwrap()
    });
    (url, handle)
}

fn http(status: &str, headers: &str, body: &str) -> String {
    format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n{body}", body.len())
}

#[tokio::test]
async fn the_request_is_json_rpc_initialize_with_the_manifest() {
    let answer = r#"{"jsonrpc":"2.0","id":1,"result":{"ok":true,"supportedMethods":["environmentExecute"]}}"#;
    let (url, request) = serve_once(http("200 OK", "content-type: application/json\r\n", answer)).await;
    assert!(matches!(probe(&url).await, ProbeOutcome::Succeeded { .. }));
    let request = request.await.unwrap();
    assert_eq!(request["jsonrpc"], "2.0");
    assert_eq!(request["id"], 1);
    assert_eq!(request["method"], "initialize");
    let params = &request["params"];
    assert_eq!(params["manifest"]["pluginKey"], "acme.kubernetes-sandbox-provider");
    assert_eq!(params["manifest"]["version"], "1.4.0");
    assert_eq!(params["manifest"]["drivers"][0]["driverKey"], "kubernetes");
    assert_eq!(params["config"], serde_json::json!({}));
    assert_eq!(params["instanceInfo"]["instanceId"], "test-instance");
    assert_eq!(params["instanceInfo"]["hostVersion"], env!("CARGO_PKG_VERSION"));
    assert_eq!(params["apiVersion"], 1);
}

#[tokio::test]
async fn http_errors_fail_and_redirects_are_not_followed() {
    let (url, _) = serve_once(http("503 Service Unavailable", "", "busy")).await;
    let unavailable = probe(&url).await;
    assert_eq!(failed_with(&unavailable).class(), Some(FailureClass::Unreachable), "nothing serves behind it");
    assert!(failure(unavailable).ends_with("the worker answered HTTP 503 Service Unavailable"));
    let (url, _) = serve_once(http("500 Internal Server Error", "", "oops")).await;
    assert_eq!(failed_with(&probe(&url).await).class(), Some(FailureClass::NotTheProtocol));

    let worker = Worker::with_methods(&V1.worker_methods());
    let (url, _) = serve_once(http("307 Temporary Redirect", &format!("location: {}\r\n", worker.url), "")).await;
    assert!(failure(probe(&url).await).ends_with("the worker answered HTTP 307 Temporary Redirect"));
}

#[tokio::test]
async fn a_worker_url_is_not_probed_without_the_flag() {
    let worker = Worker::with_methods(&V1.worker_methods());
    let provider: SandboxProvider = serde_json::from_value(provider("acme", &worker.url, all_true())).unwrap();
    let refused =
        Prober::new(Duration::from_secs(5), WorkerPolicy { allow_urls: false, allowed_cidrs: loopback() }, "test")
            .unwrap()
            .probe(&provider)
            .await;
    assert_eq!(refused.reason(), "endpoint");
    assert!(failure(refused).contains("without --allow-worker-urls"));
    let loopback_refused =
        Prober::new(Duration::from_secs(5), WorkerPolicy { allow_urls: true, ..WorkerPolicy::default() }, "test")
            .unwrap()
            .probe(&provider)
            .await;
    assert_eq!(failed_with(&loopback_refused), &ProbeError::RefusedAddress(AddressClass::Loopback));
    assert!(!failure(loopback_refused).starts_with("probe of"), "refused before any probe");
    let allowed =
        Prober::new(Duration::from_secs(5), WorkerPolicy { allow_urls: true, allowed_cidrs: loopback() }, "test")
            .unwrap()
            .probe(&provider)
            .await;
    assert!(matches!(allowed, ProbeOutcome::Succeeded { .. }));
}

fn resolve_with_worker_url(url: &str) -> (Value, String) {
    resolve_with_worker_url_and_env(url, &[])
}

fn resolve_with_worker_url_and_env(url: &str, env: &[(&str, &std::path::Path)]) -> (Value, String) {
    let provider = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/provider-full.yaml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandcap"))
        .args(["resolve", "--provider", provider, "--driver", "kubernetes", "--worker-url", url, "-o", "json"])
        .envs(env.iter().copied())
        .output()
        .expect("sandcap runs");
    assert!(out.status.success(), "{out:?}");
    (serde_json::from_slice(&out.stdout).expect("JSON"), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn resolve_probes_a_worker_url_live() {
    let worker = Worker::with_methods(&V1.worker_methods());
    let (record, stderr) = resolve_with_worker_url(&worker.url);
    assert_eq!(record["capabilities"]["nativeSyncIn"], true, "{record}");
    assert_eq!(record["effectivePolicy"], "ReuseByEnvironment");
    assert!(stderr.is_empty(), "{stderr}");

    let (_held, port) = support::ports::closed_port();
    let (record, stderr) = resolve_with_worker_url(&format!("http://127.0.0.1:{port}/rpc"));
    let explanations = record["explanations"].as_array().unwrap();
    assert!(explanations.iter().all(|e| e["reason"] == "WorkerNotVerified"), "{record}");
    assert!(stderr.contains("cannot connect") && stderr.contains("nothing is verified"), "{stderr}");
}
