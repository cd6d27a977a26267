//! The admission webhook over real TLS: a CA made per test run, certificates in files laid out like
//! a Kubernetes Secret volume, a real HTTPS client (reqwest on rustls), raw TLS clients for the
//! misbehaving cases, and the real binary for `sandcap run`.

mod support;

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SerialNumber,
};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use sandcap::admin::{self, Readiness};
use sandcap::listener::{self, Limits, Stop};
use sandcap::metrics::Metrics;
use sandcap::tls::{CertFiles, CertSource};
use sandcap::validation::Options;
use sandcap::webhook::{self, Webhook};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

// ---- certificates ------------------------------------------------------------------------------

/// A throwaway CA that issues serving certificates for 127.0.0.1 and localhost.
struct Ca {
    issuer: Issuer<'static, KeyPair>,
    der: CertificateDer<'static>,
}

/// A serving certificate and its key, as PEM, with the serial it was issued with.
struct Leaf {
    cert_pem: String,
    key_pem: String,
    serial: u8,
    not_after: i64,
}

impl Ca {
    fn new() -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "sandcap test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let der = params.self_signed(&key).unwrap().der().clone();
        Ca { issuer: Issuer::new(params, key), der }
    }

    fn leaf(&self, serial: u8) -> Leaf {
        let not_after = rcgen::date_time_ymd(2030 + i32::from(serial % 16), 1, 1);
        self.issue(serial, &[], rcgen::date_time_ymd(1975, 1, 1)..not_after)
    }

    /// A leaf for 127.0.0.1, localhost and `names`, valid over `validity`.
    fn issue(&self, serial: u8, names: &[&str], validity: std::ops::Range<time::OffsetDateTime>) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let names = ["127.0.0.1", "localhost"].iter().chain(names).map(|n| n.to_string()).collect::<Vec<_>>();
        let mut params = CertificateParams::new(names).unwrap();
        params.serial_number = Some(SerialNumber::from_slice(&[serial]));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        (params.not_before, params.not_after) = (validity.start, validity.end);
        let not_after = params.not_after.unix_timestamp();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf { cert_pem: cert.pem(), key_pem: key.serialize_pem(), serial, not_after }
    }

    fn client_config(&self, alpn: &[&[u8]]) -> ClientConfig {
        let mut roots = RootCertStore::empty();
        roots.add(self.der.clone()).unwrap();
        let mut config = ClientConfig::builder_with_provider(sandcap::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        config
    }

    /// The real HTTPS client, trusting only this CA.
    fn https_client(&self) -> reqwest::Client {
        reqwest::Client::builder().use_preconfigured_tls(self.client_config(&[])).build().unwrap()
    }
}

/// A directory laid out like a mounted Secret volume: `tls.crt` and `tls.key` are symlinks into
/// `..data`, itself a symlink to a timestamped directory; updates swap `..data` atomically, as the
/// kubelet does.
struct SecretVolume {
    dir: tempfile::TempDir,
    generation: u32,
}

impl SecretVolume {
    fn new() -> SecretVolume {
        SecretVolume { dir: tempfile::tempdir().unwrap(), generation: 0 }
    }

    fn cert(&self) -> PathBuf {
        self.dir.path().join("tls.crt")
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("tls.key")
    }

    fn source(&self) -> CertSource {
        let called_by = vec![SERVICE_HOST.to_string()];
        CertSource::Files(CertFiles {
            cert: self.cert(),
            key: self.key(),
            interval: Duration::from_millis(50),
            called_by,
        })
    }

    /// Publishes a new pair the way the kubelet does: a fresh directory, then one rename of `..data`.
    fn publish(&mut self, cert_pem: &str, key_pem: &str) {
        self.generation += 1;
        let root = self.dir.path();
        let version = format!("..2025_01_01_00_00_{:02}.{}", self.generation, self.generation);
        std::fs::create_dir(root.join(&version)).unwrap();
        std::fs::write(root.join(&version).join("tls.crt"), cert_pem).unwrap();
        std::fs::write(root.join(&version).join("tls.key"), key_pem).unwrap();
        std::os::unix::fs::symlink(&version, root.join("..data_tmp")).unwrap();
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
        for name in ["tls.crt", "tls.key"] {
            if !root.join(name).exists() {
                std::os::unix::fs::symlink(Path::new("..data").join(name), root.join(name)).unwrap();
            }
        }
    }
}

// ---- the server under test --------------------------------------------------------------------

struct Harness {
    webhook: SocketAddr,
    admin: SocketAddr,
    shutdown: Stop,
    stopped: JoinHandle<Result<(), sandcap::tls::CertLoadError>>,
}

fn test_limits() -> Limits {
    Limits {
        handshake_timeout: Duration::from_secs(1),
        header_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(3),
        drain_timeout: Duration::from_secs(5),
        ..Limits::default()
    }
}

/// Starts the webhook and admin listeners on ephemeral ports, wired as `sandcap run` wires them.
async fn start(certificate: CertSource) -> Harness {
    sandcap::tls::install_default_provider();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (webhook_addr, admin_addr) = (listener.local_addr().unwrap(), admin.local_addr().unwrap());
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    let readiness = Readiness::default();
    let shutdown = Stop::default();
    let admin_app = admin::admin_router(Arc::new(registry), readiness.clone());
    let admin_limits = Limits { max_connections: 4, ..test_limits() };
    tokio::spawn(admin::serve_admin(admin, admin_app, admin_limits, shutdown.clone()));
    let webhook = Webhook { listener, certificate, options: Options::default(), limits: test_limits() };
    let stopped = tokio::spawn(webhook::serve_webhook(webhook, metrics, readiness, shutdown.clone()));
    Harness { webhook: webhook_addr, admin: admin_addr, shutdown, stopped }
}

/// A server with a CA-issued certificate, already serving it, and a client trusting the CA.
async fn serving() -> (Harness, reqwest::Client, Ca, SecretVolume) {
    let ca = Ca::new();
    let mut volume = SecretVolume::new();
    let leaf = ca.leaf(1);
    volume.publish(&leaf.cert_pem, &leaf.key_pem);
    let harness = start(volume.source()).await;
    wait_ready(&harness).await;
    (harness, ca.https_client(), ca, volume)
}

impl Harness {
    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.webhook.port())
    }

    fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    async fn metrics(&self) -> String {
        reqwest::get(self.admin_url("/metrics")).await.unwrap().text().await.unwrap()
    }
}

async fn wait_ready(harness: &Harness) {
    eventually("/readyz to answer 200", || async {
        reqwest::get(harness.admin_url("/readyz")).await.is_ok_and(|r| r.status() == 200)
    })
    .await;
}

/// Polls `check` every 50 ms for up to 10 s.
async fn eventually<F: Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    for _ in 0..200 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The value of one sample line of the metrics text, 0 when absent.
fn sample(metrics: &str, series: &str) -> f64 {
    metrics.lines().find_map(|line| line.strip_prefix(series).and_then(|rest| rest.trim().parse().ok())).unwrap_or(0.0)
}

// ---- AdmissionReviews -------------------------------------------------------------------------

fn example(file: &str) -> Value {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(file)).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

/// A provider the webhook itself denies (an unknown field): what the CRD rejects never reaches it.
fn webhook_denied() -> Value {
    let mut provider = example("provider-full.yaml");
    provider["spec"]["environmentDrivers"][0]["displayname"] = json!("typo");
    provider
}

fn review(operation: &str, object: &Value, old: Option<&Value>) -> Value {
    let kind = object["kind"].as_str().unwrap_or("SandboxProvider");
    let resource = format!("{}s", kind.to_lowercase());
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("uid-{operation}-{}", object["metadata"]["name"].as_str().unwrap_or("x")),
            "kind": {"group": "sandcap.dev", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "sandcap.dev", "version": "v1alpha1", "resource": resource},
            "name": object["metadata"]["name"],
            "namespace": object["metadata"]["namespace"],
            "operation": operation,
            "userInfo": {"username": "admin"},
            "object": object,
            "oldObject": old,
            "dryRun": false
        }
    })
}

async fn post(client: &reqwest::Client, harness: &Harness, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let response = client.post(harness.url("/validate")).body(body).send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

async fn post_review(client: &reqwest::Client, harness: &Harness, review: &Value) -> Value {
    let (status, body) = post(client, harness, serde_json::to_vec(review).unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(body["kind"], "AdmissionReview");
    assert_eq!(body["response"]["uid"], review["request"]["uid"], "the uid is echoed");
    body["response"].clone()
}

/// Reviews the complete example provider, which is allowed.
async fn review_full_provider(client: &reqwest::Client, harness: &Harness) {
    let response = post_review(client, harness, &review("CREATE", &example("provider-full.yaml"), None)).await;
    assert_eq!(response["allowed"], true, "{response}");
}

#[tokio::test]
async fn an_allowed_provider_and_lease() {
    let (harness, client, _ca, _volume) = serving().await;
    for file in ["provider-full.yaml", "provider-legacy.yaml", "lease-reuse.yaml", "lease-job.yaml"] {
        let response = post_review(&client, &harness, &review("CREATE", &example(file), None)).await;
        assert_eq!(response["allowed"], true, "{file}: {response}");
        assert!(response.get("status").is_none());
    }
    let metrics = harness.metrics().await;
    let series = r#"sandcap_admission_requests_total{kind="SandboxProvider",operation="CREATE",verdict="allowed"}"#;
    assert_eq!(sample(&metrics, series), 2.0, "{metrics}");
    assert!(metrics.contains(r#"sandcap_admission_duration_seconds_count{kind="SandboxLease"} 2"#), "{metrics}");
}

#[tokio::test]
async fn a_denied_provider_gets_the_contract_message_and_its_warnings() {
    let (harness, client, _ca, _volume) = serving().await;
    // The removed keys are the CRD's to reject now; an unknown field is still the webhook's.
    let mut provider = example("provider-removed-key.yaml");
    provider["spec"]["environmentDrivers"][0]["sandboxCapabilities"]
        .as_object_mut()
        .unwrap()
        .retain(|k, _| !k.starts_with("concurrent"));
    provider["spec"]["environmentDrivers"][0]["displayname"] = json!("typo");
    let response = post_review(&client, &harness, &review("CREATE", &provider, None)).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(response["status"]["reason"], "Forbidden");
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("spec.environmentDrivers[0].displayname: unknown field"),
        "{response}"
    );
    // Word for word what `sandcap validate` says about the same object.
    let offline = sandcap::validation::review(&provider, None, &Options::default());
    assert_eq!(response["status"]["message"], offline.message());
    assert_eq!(response["warnings"], json!(offline.warnings));
    let metrics = harness.metrics().await;
    let series = r#"sandcap_admission_requests_total{kind="SandboxProvider",operation="CREATE",verdict="denied"}"#;
    assert_eq!(sample(&metrics, series), 1.0, "{metrics}");
}

#[tokio::test]
async fn an_allowed_provider_carries_warnings_each_under_120_characters() {
    let (harness, client, _ca, _volume) = serving().await;
    let mut provider = example("provider-full.yaml");
    provider["spec"]["environmentDrivers"][1]["sandboxCapabilities"] = json!({"nativeSyncIn": true});
    provider["spec"]["environmentDrivers"][0]["supportsReusableLeases"] = json!(true);
    let response = post_review(&client, &harness, &review("CREATE", &provider, None)).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(
        response["warnings"],
        json!([
            "spec.environmentDrivers[0]: supportsReusableLeases=true and sandboxCapabilities.reusableLeases=true; nested wins",
            "spec.environmentDrivers[1]: sandboxCapabilities is never read unless kind is sandbox_provider"
        ])
    );
    let warnings = response["warnings"].as_array().unwrap();
    assert!(warnings.iter().all(|w| w.as_str().unwrap().chars().count() < 120), "{warnings:?}");
}

#[tokio::test]
async fn updates_of_immutable_fields_are_left_to_the_crd() {
    // `self == oldSelf` in the CRD (tests/schema.rs) refuses them before the webhook is asked.
    let (harness, client, _ca, _volume) = serving().await;
    let old = example("provider-full.yaml");
    let mut new = old.clone();
    new["spec"]["pluginKey"] = json!("other.plugin");
    assert_eq!(post_review(&client, &harness, &review("UPDATE", &new, Some(&old))).await["allowed"], true);
}

#[tokio::test]
async fn updates_of_objects_stored_with_problems_are_allowed_with_warnings() {
    let (harness, client, _ca, _volume) = serving().await;
    // Stored while no webhook ran (a typo'd field the CRD keeps): a CREATE of it is denied.
    let stored = webhook_denied();
    let mut labelled = stored.clone();
    labelled["metadata"]["labels"] = json!({"team": "a"});
    let response = post_review(&client, &harness, &review("UPDATE", &labelled, Some(&stored))).await;
    assert_eq!(response["allowed"], true, "{response}");
    let warnings: Vec<&str> = response["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
    let prefix = "already stored, not blocking this update: spec.environmentDrivers[0].displayname: ";
    assert!(warnings.iter().any(|w| w.starts_with(prefix)), "{warnings:?}");
    assert!(warnings.iter().all(|w| w.len() < 120), "{warnings:?}");

    // What the update brings in is denied.
    let mut broken = labelled.clone();
    broken["spec"]["environmentDrivers"][0]["configSchema"] = json!({"type": "strin"});
    let response = post_review(&client, &harness, &review("UPDATE", &broken, Some(&stored))).await;
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.starts_with("spec.environmentDrivers[0].configSchema: ") && !message.contains("; "), "{message}");
}

#[tokio::test]
async fn dry_run_requests_are_reviewed_like_any_other() {
    let (harness, client, _ca, _volume) = serving().await;
    for (object, allowed) in [(example("provider-full.yaml"), true), (webhook_denied(), false)] {
        let mut dry = review("CREATE", &object, None);
        dry["request"]["dryRun"] = json!(true);
        let wet = post_review(&client, &harness, &review("CREATE", &object, None)).await;
        let dry = post_review(&client, &harness, &dry).await;
        assert_eq!(dry["allowed"], allowed);
        assert_eq!(dry, wet);
    }
}

#[tokio::test]
async fn deletes_and_other_kinds_are_allowed_without_review() {
    let (harness, client, _ca, _volume) = serving().await;
    let broken = json!({"apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxProvider", "metadata": {"name": "b"}});
    let mut delete = review("DELETE", &Value::Null, Some(&broken));
    delete["request"]["kind"]["kind"] = json!("SandboxProvider");
    assert_eq!(post_review(&client, &harness, &delete).await["allowed"], true);
    let mut pod = review("CREATE", &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}), None);
    pod["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
    assert_eq!(post_review(&client, &harness, &pod).await["allowed"], true);
}

#[tokio::test]
async fn hostile_bodies_get_a_client_error_with_a_reason() {
    let (harness, client, _ca, _volume) = serving().await;
    let provider = example("provider-full.yaml");
    let mut v1beta1 = review("CREATE", &provider, None);
    v1beta1["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let mut no_request = review("CREATE", &provider, None);
    no_request.as_object_mut().unwrap().remove("request");
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("not JSON", b"{not json".to_vec(), "the body is not JSON"),
        ("empty", Vec::new(), "the body is not JSON"),
        ("binary", vec![0xff, 0x00, 0xfe, 0x01], "the body is not JSON"),
        ("a JSON list", b"[1, 2]".to_vec(), "not an AdmissionReview object"),
        ("another object", br#"{"apiVersion": "v1", "kind": "Pod"}"#.to_vec(), "apiVersion: unsupported"),
        ("v1beta1", serde_json::to_vec(&v1beta1).unwrap(), "apiVersion: unsupported \"admission.k8s.io/v1beta1\""),
        ("no request", serde_json::to_vec(&no_request).unwrap(), "request: required"),
        ("deeply nested", deep.into_bytes(), "recursion limit exceeded"),
    ];
    for (case, body, reason) in cases {
        let (status, answer) = post(&client, &harness, body).await;
        assert_eq!(status, 400, "{case}: {answer}");
        let response = &answer["response"];
        assert_eq!((&response["allowed"], &response["status"]["code"]), (&json!(false), &json!(400)), "{case}");
        assert_eq!(response["status"]["reason"], "BadRequest", "{case}");
        let message = response["status"]["message"].as_str().unwrap();
        assert!(message.contains(reason), "{case}: {message}");
    }
    // Deeply nested inside a well-formed review: within serde_json's 128 levels it reaches the
    // rules (schema compilation included) without exhausting the stack.
    let mut schema = json!({"type": "object"});
    for _ in 0..118 {
        schema = json!({"not": schema});
    }
    let mut deep_schema = provider.clone();
    deep_schema["spec"]["environmentDrivers"][0]["configSchema"] = schema;
    let response = post_review(&client, &harness, &review("CREATE", &deep_schema, None)).await;
    assert!(response["allowed"].is_boolean());
    let metrics = harness.metrics().await;
    assert_eq!(
        sample(&metrics, r#"sandcap_admission_requests_total{kind="other",operation="unknown",verdict="invalid"}"#),
        8.0
    );
}

#[tokio::test]
async fn objects_of_the_wrong_shape_are_denied_with_the_field() {
    let (harness, client, _ca, _volume) = serving().await;
    let mut not_an_object = review("CREATE", &example("provider-full.yaml"), None);
    not_an_object["request"]["object"] = json!("a string");
    let response = post_review(&client, &harness, &not_an_object).await;
    assert_eq!(response["status"]["code"], 400);
    assert_eq!(response["status"]["message"], "request.object: required for CREATE, a JSON object");

    // Wrong types are the CRD's to report (the apiserver asks the webhook only about objects its
    // schema admitted); the webhook skips them and still names the problems that are its own.
    let mut wrong = webhook_denied();
    wrong["spec"]["version"] = json!(14);
    wrong["spec"]["worker"] = json!("svc");
    let response = post_review(&client, &harness, &review("CREATE", &wrong, None)).await;
    assert_eq!(response["status"]["code"], 403);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.starts_with("spec.environmentDrivers[0].displayname: unknown field"), "{message}");
}

#[tokio::test]
async fn oversized_bodies_wrong_paths_and_methods_are_refused() {
    let (harness, client, _ca, _volume) = serving().await;
    let huge = vec![b' '; listener::MAX_BODY + 1];
    assert_eq!(post(&client, &harness, huge).await.0, 413);
    let status = |request: reqwest::RequestBuilder| async move { request.send().await.unwrap().status() };
    assert_eq!(status(client.post(harness.url("/mutate")).body("{}")).await, 404);
    assert_eq!(status(client.get(harness.url("/validate"))).await, 405);
    assert_eq!(status(client.put(harness.url("/validate")).body("{}")).await, 405);
    // Still serving.
    review_full_provider(&client, &harness).await;
}

#[tokio::test]
async fn an_oversized_chunked_body_is_cut_off_while_streaming() {
    let (harness, _client, ca, _volume) = serving().await;
    let tls = tls_connect(&ca, harness.webhook, &[]).await;
    let (mut reader, mut writer) = tokio::io::split(tls);
    // Written concurrently with reading: the server stops reading once the limit is passed.
    tokio::spawn(async move {
        let head = b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        writer.write_all(head).await?;
        let chunk = vec![b' '; 64 * 1024];
        for _ in 0..=listener::MAX_BODY / chunk.len() + 1 {
            writer.write_all(format!("{:x}\r\n", chunk.len()).as_bytes()).await?;
            writer.write_all(&chunk).await?;
            writer.write_all(b"\r\n").await?;
        }
        writer.write_all(b"0\r\n\r\n").await
    });
    let answer = String::from_utf8_lossy(&read_until_closed(&mut reader).await).to_string();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}

// ---- misbehaving clients ------------------------------------------------------------------------

async fn tls_connect(ca: &Ca, addr: SocketAddr, alpn: &[&[u8]]) -> tokio_rustls::client::TlsStream<TcpStream> {
    let connector = TlsConnector::from(Arc::new(ca.client_config(alpn)));
    let tcp = TcpStream::connect(addr).await.unwrap();
    connector.connect(ServerName::IpAddress(addr.ip().into()), tcp).await.unwrap()
}

/// Reads until the server closes the connection (or 5 s pass, which fails the test).
async fn read_until_closed(stream: &mut (impl AsyncReadExt + Unpin)) -> Vec<u8> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    });
    read.await.expect("the server closes the connection");
    received
}

#[tokio::test]
async fn slow_clients_are_cut_off_without_holding_up_others() {
    let (harness, client, ca, _volume) = serving().await;
    // Half the headers, then nothing.
    let mut stalled_headers = tls_connect(&ca, harness.webhook, &[]).await;
    stalled_headers.write_all(b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-").await.unwrap();
    // The headers, then half the body.
    let mut stalled_body = tls_connect(&ca, harness.webhook, &[]).await;
    stalled_body
        .write_all(b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{\"apiVersion\":")
        .await
        .unwrap();
    // A TCP connection that never starts the handshake, and a TLS one that never sends a request.
    let mut silent = TcpStream::connect(harness.webhook).await.unwrap();
    let mut idle = tls_connect(&ca, harness.webhook, &[]).await;

    // Meanwhile another client is served at once.
    let started = std::time::Instant::now();
    review_full_provider(&client, &harness).await;
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());

    let closed = read_until_closed(&mut stalled_headers).await;
    assert!(!String::from_utf8_lossy(&closed).contains("200 OK"));
    let answered = String::from_utf8_lossy(&read_until_closed(&mut stalled_body).await).to_string();
    assert!(answered.starts_with("HTTP/1.1 408"), "{answered}");
    read_until_closed(&mut silent).await;
    read_until_closed(&mut idle).await;
}

#[tokio::test]
async fn the_admin_port_cuts_off_slow_and_idle_clients_too() {
    let (harness, _client, _ca, _volume) = serving().await;
    let mut stalled = TcpStream::connect(harness.admin).await.unwrap();
    stalled.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAcc").await.unwrap();
    let mut silent = TcpStream::connect(harness.admin).await.unwrap();
    let mut idle = TcpStream::connect(harness.admin).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
    assert!(!String::from_utf8_lossy(&read_until_closed(&mut stalled).await).contains("200 OK"));
    read_until_closed(&mut silent).await;
    // Answered, then closed once idle (test limits: 3 s).
    assert!(String::from_utf8_lossy(&read_until_closed(&mut idle).await).starts_with("HTTP/1.1 200"));
}

/// At the connection cap, a newcomer takes the place of the longest-idle connection at once
/// (docs/webhook.md, "Connections"); the silent ones would only close after the first-request
/// timeout (1 s here).
#[tokio::test]
async fn at_the_cap_a_newcomer_takes_the_place_of_the_longest_idle() {
    let (harness, _client, _ca, _volume) = serving().await;
    // The admin port's cap in this harness is 4: four silent connections fill it.
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(harness.admin).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    let answer = reqwest::get(harness.admin_url("/healthz")).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert!(started.elapsed() < Duration::from_millis(800), "{:?}", started.elapsed());
    // The first one made room.
    let started = std::time::Instant::now();
    read_until_closed(&mut silent[0]).await;
    assert!(started.elapsed() < Duration::from_millis(800), "{:?}", started.elapsed());
}

/// Between keep-alive requests only the idle timeout counts (3 s here), not the header timeout
/// (1 s): the apiserver reuses pooled connections after seconds.
#[tokio::test]
async fn a_kept_alive_connection_is_reused_after_the_header_timeout() {
    let (harness, _client, _ca, _volume) = serving().await;
    let mut kept = TcpStream::connect(harness.admin).await.unwrap();
    let request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    let mut answer = [0; 1024];
    for _ in 0..2 {
        kept.write_all(request).await.unwrap();
        let n = kept.read(&mut answer).await.unwrap();
        assert!(answer[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer[..n]));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// HTTP/2 pings are bytes, not requests: a connection that only pings is closed once idle.
#[tokio::test]
async fn an_http2_connection_that_only_pings_is_closed_when_idle() {
    let (harness, _client, ca, _volume) = serving().await;
    let tls = tls_connect(&ca, harness.webhook, &[b"h2"]).await;
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Duration::from_millis(200))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true)
        .handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    let body = serde_json::to_vec(&review("CREATE", &webhook_denied(), None)).unwrap();
    let request = http::Request::post(harness.url("/validate")).body(axum::body::Body::from(body)).unwrap();
    assert_eq!(sender.send_request(request).await.unwrap().status(), 200);
    // Idle timeout 3 s in the test limits; pings every 200 ms meanwhile.
    let closed = tokio::time::timeout(Duration::from_secs(8), connection).await;
    assert!(closed.is_ok(), "the server kept a connection that only pinged");
}

#[tokio::test]
async fn plain_http_on_the_tls_port_fails_the_handshake_only() {
    let (harness, client, _ca, _volume) = serving().await;
    let mut plain = TcpStream::connect(harness.webhook).await.unwrap();
    plain.write_all(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}").await.unwrap();
    let answer = read_until_closed(&mut plain).await;
    assert!(!answer.starts_with(b"HTTP/"), "no HTTP answer in the clear: {answer:?}");
    // Over plain HTTP a real client gets a connection error, not a response.
    assert!(reqwest::get(format!("http://{}/validate", harness.webhook)).await.is_err());
    review_full_provider(&client, &harness).await;
}

#[tokio::test]
async fn http2_is_served_too() {
    let (harness, _client, ca, _volume) = serving().await;
    let tls = tls_connect(&ca, harness.webhook, &[b"h2"]).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(connection);
    let body = serde_json::to_vec(&review("CREATE", &webhook_denied(), None)).unwrap();
    let request = http::Request::post(harness.url("/validate")).body(axum::body::Body::from(body)).unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let bytes = axum::body::to_bytes(axum::body::Body::new(response.into_body()), 1 << 20).await.unwrap();
    let answer: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(answer["response"]["status"]["code"], 403);
}

// ---- admin port, certificates and shutdown ------------------------------------------------------

#[tokio::test]
async fn readyz_waits_for_a_certificate_and_metrics_show_it() {
    let ca = Ca::new();
    let mut volume = SecretVolume::new();
    // The Secret is not mounted yet (an optional volume, filled in later).
    let harness = start(volume.source()).await;
    assert_eq!(reqwest::get(harness.admin_url("/healthz")).await.unwrap().status(), 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let not_ready = reqwest::get(harness.admin_url("/readyz")).await.unwrap();
    assert_eq!(not_ready.status(), 503);

    let leaf = ca.leaf(7);
    volume.publish(&leaf.cert_pem, &leaf.key_pem);
    wait_ready(&harness).await;
    let metrics = reqwest::get(harness.admin_url("/metrics")).await.unwrap();
    assert!(metrics.headers()["content-type"].to_str().unwrap().starts_with("application/openmetrics-text"));
    let metrics = metrics.text().await.unwrap();
    assert_eq!(sample(&metrics, "sandcap_certificate_expiry_timestamp_seconds"), leaf.not_after as f64, "{metrics}");
    assert_eq!(sample(&metrics, r#"sandcap_certificate_reloads_total{result="success"}"#), 1.0, "{metrics}");
    // The missing files were one failure, counted once however many polls saw them.
    assert_eq!(sample(&metrics, r#"sandcap_certificate_reloads_total{result="failure"}"#), 1.0, "{metrics}");
}

async fn wait_serving(ca: &Ca, webhook: SocketAddr, serial: u8) {
    let what = format!("the certificate with serial {serial:#x}");
    eventually(&what, || async { served_serial(ca, webhook).await == serial }).await;
}

/// The serial of the certificate the server presents on a fresh connection.
async fn served_serial(ca: &Ca, addr: SocketAddr) -> u8 {
    let tls = tls_connect(ca, addr, &[]).await;
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    let (_, parsed) = x509_parser::parse_x509_certificate(&leaf).unwrap();
    parsed.raw_serial()[parsed.raw_serial().len() - 1]
}

#[tokio::test]
async fn certificates_rotate_without_a_restart_and_bad_pairs_are_ignored() {
    let (harness, client, ca, mut volume) = serving().await;
    let (a, b) = (ca.leaf(0xA1), ca.leaf(0xB2));
    assert_eq!(served_serial(&ca, harness.webhook).await, 1);
    volume.publish(&a.cert_pem, &a.key_pem);
    wait_serving(&ca, harness.webhook, a.serial).await;

    // A connection opened before the swap keeps working across it.
    review_full_provider(&client, &harness).await;
    volume.publish(&b.cert_pem, &b.key_pem);
    wait_serving(&ca, harness.webhook, b.serial).await;
    review_full_provider(&client, &harness).await;
    let metrics = harness.metrics().await;
    assert_eq!(sample(&metrics, "sandcap_certificate_expiry_timestamp_seconds"), b.not_after as f64);
    let failures = |metrics: &str| sample(metrics, r#"sandcap_certificate_reloads_total{result="failure"}"#);
    assert_eq!(failures(&metrics), 0.0);

    // A certificate with another certificate's key.
    let (c, d) = (ca.leaf(0xC3), ca.leaf(0xD4));
    volume.publish(&c.cert_pem, &d.key_pem);
    eventually("the mismatch to be counted", || async { failures(&harness.metrics().await) == 1.0 }).await;
    assert_eq!(served_serial(&ca, harness.webhook).await, b.serial);

    // A certificate written in place and caught half way.
    std::fs::write(volume.dir.path().join("..data").join("tls.crt"), &c.cert_pem[..c.cert_pem.len() / 2]).unwrap();
    std::fs::write(volume.dir.path().join("..data").join("tls.key"), &c.key_pem).unwrap();
    eventually("the half-written pair to be counted", || async { failures(&harness.metrics().await) >= 2.0 }).await;
    assert_eq!(served_serial(&ca, harness.webhook).await, b.serial);
    let metrics = harness.metrics().await;
    assert_eq!(sample(&metrics, "sandcap_certificate_expiry_timestamp_seconds"), b.not_after as f64);

    // Finished writing: now it loads.
    std::fs::write(volume.dir.path().join("..data").join("tls.crt"), &c.cert_pem).unwrap();
    wait_serving(&ca, harness.webhook, c.serial).await;
}

/// The name the apiserver calls the chart's webhook by, as `sandcap run` derives it below.
const SERVICE_HOST: &str = "sandcap-webhook.sandcap-system.svc";

/// The real binary, given a Secret volume: a replacement that is expired, not valid yet, or no
/// longer valid for the Service's name is refused (counted, logged, the served certificate stays);
/// the early one is served once its time comes; a good one from the next handshake.
#[tokio::test]
async fn sandcap_run_refuses_a_replacement_outside_its_dates_or_without_the_service_name() {
    let ca = Ca::new();
    let mut volume = SecretVolume::new();
    let now = time::OffsetDateTime::now_utc();
    let (hour, day) = (time::Duration::HOUR, time::Duration::DAY);
    let first = ca.issue(1, &[SERVICE_HOST], now - hour..now + day);
    volume.publish(&first.cert_pem, &first.key_pem);
    let (cert, key) = (volume.cert().display().to_string(), volume.key().display().to_string());
    let tls = ["--tls-cert", &cert, "--tls-key", &key, "--tls-reload-interval", "50ms"];
    let mut sandcap = Sandcap::start_with(&tls, |command| {
        command.args(["--service-name", "sandcap-webhook", "--pod-namespace", "sandcap-system"]);
        command.args(["--shutdown-drain-window", "0s"]).stdout(std::process::Stdio::piped());
    });
    let webhook: SocketAddr = ([127, 0, 0, 1], sandcap.webhook).into();
    let count = |result: &str| {
        let metrics = http_get(sandcap.admin, "/metrics").unwrap_or_default();
        sample(&metrics, &format!("sandcap_certificate_reloads_total{{result=\"{result}\"}}"))
    };
    assert_eq!((count("success"), count("failure")), (1.0, 0.0));

    let expired = ca.issue(2, &[SERVICE_HOST], now - 2 * day..now - day);
    let other_names = ca.issue(3, &["sandcap-webhook.elsewhere.svc"], now - hour..now + day);
    for (refused, failures) in [(&expired, 1.0), (&other_names, 2.0)] {
        volume.publish(&refused.cert_pem, &refused.key_pem);
        eventually("the refusal to be counted", || async { count("failure") == failures }).await;
        assert_eq!(served_serial(&ca, webhook).await, first.serial, "serial {:#x} was served", refused.serial);
    }

    // Issued by a clock 3 s ahead: refused now, served once it is valid, with no change of files.
    let early = ca.issue(4, &[SERVICE_HOST], now + 3 * time::Duration::SECOND..now + day);
    volume.publish(&early.cert_pem, &early.key_pem);
    eventually("the refusal to be counted", || async { count("failure") == 3.0 }).await;
    assert_eq!(served_serial(&ca, webhook).await, first.serial, "served before its notBefore");
    wait_serving(&ca, webhook, early.serial).await;
    assert_eq!((count("success"), count("failure")), (2.0, 3.0));

    // A wildcard for the namespace's Services still holds the name.
    let good = ca.issue(5, &["*.sandcap-system.svc"], now - hour..now + day);
    volume.publish(&good.cert_pem, &good.key_pem);
    wait_serving(&ca, webhook, good.serial).await;
    assert_eq!((count("success"), count("failure")), (3.0, 3.0));
    let metrics = http_get(sandcap.admin, "/metrics").unwrap();
    assert_eq!(sample(&metrics, "sandcap_certificate_expiry_timestamp_seconds"), good.not_after as f64);

    sandcap.signal("TERM");
    sandcap.wait(Duration::from_secs(10)).expect("sandcap exits within 10 s of SIGTERM");
    let mut logs = String::new();
    sandcap.child.stdout.take().unwrap().read_to_string(&mut logs).unwrap();
    for why in [
        "the certificate expired at ".to_string(),
        format!("the certificate is not valid for {SERVICE_HOST}, which the webhook is called by"),
        "the certificate is not valid before ".to_string(),
    ] {
        assert!(logs.contains(&why), "{why:?} in {logs}");
    }
}

#[tokio::test]
async fn shutdown_finishes_in_flight_reviews_and_stops_accepting() {
    let (harness, _client, ca, _volume) = serving().await;
    let body = serde_json::to_vec(&review("CREATE", &example("provider-full.yaml"), None)).unwrap();
    let mut in_flight = tls_connect(&ca, harness.webhook, &[]).await;
    let head = format!("POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n", body.len());
    in_flight.write_all(head.as_bytes()).await.unwrap();
    in_flight.write_all(&body[..100]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    harness.shutdown.closing.cancel();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(TcpStream::connect(harness.webhook).await.is_err(), "no new connections after shutdown");
    in_flight.write_all(&body[100..]).await.unwrap();
    let answer = String::from_utf8_lossy(&read_until_closed(&mut in_flight).await).to_string();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.contains(r#""allowed":true"#), "{answer}");
    tokio::time::timeout(Duration::from_secs(5), harness.stopped).await.unwrap().unwrap().unwrap();
}

/// A request whose body the test sends in two halves, so that it is in flight for as long as the
/// test wants: the rest goes with [`Halfway::finish`].
struct Halfway {
    rest: futures::channel::mpsc::UnboundedSender<Result<axum::body::Bytes, std::io::Error>>,
    body: Vec<u8>,
}

impl Halfway {
    fn start(harness: &Harness) -> (Halfway, http::Request<axum::body::Body>) {
        let body = serde_json::to_vec(&review("CREATE", &example("provider-full.yaml"), None)).unwrap();
        let (rest, chunks) = futures::channel::mpsc::unbounded();
        rest.unbounded_send(Ok(body[..100].to_vec().into())).unwrap();
        let request = http::Request::post(harness.url("/validate"))
            .header(http::header::CONTENT_LENGTH, body.len())
            .body(axum::body::Body::from_stream(chunks))
            .unwrap();
        (Halfway { rest, body }, request)
    }

    fn finish(self) {
        self.rest.unbounded_send(Ok(self.body[100..].to_vec().into())).unwrap();
    }
}

fn a_review(harness: &Harness) -> http::Request<axum::body::Body> {
    let body = serde_json::to_vec(&review("CREATE", &example("provider-full.yaml"), None)).unwrap();
    http::Request::post(harness.url("/validate")).body(axum::body::Body::from(body)).unwrap()
}

/// While terminating (the drain window), everything is still answered, new connections included,
/// but each HTTP/1.1 answer closes its connection, so that the client opens a new one (elsewhere,
/// once the Service no longer sends it here) without ever writing to a connection being closed.
#[tokio::test]
async fn while_terminating_http1_answers_close_their_connection() {
    use hyper::client::conn::{http1, http2};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let (harness, _client, ca, _volume) = serving().await;
    let h1 = tls_connect(&ca, harness.webhook, &[]).await;
    let (mut h1, h1_connection) = http1::handshake(TokioIo::new(h1)).await.unwrap();
    let h1_connection = tokio::spawn(h1_connection);
    assert!(h1.send_request(a_review(&harness)).await.unwrap().headers().get(http::header::CONNECTION).is_none());
    let h2 = tls_connect(&ca, harness.webhook, &[b"h2"]).await;
    let (mut h2, h2_connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(h2)).await.unwrap();
    tokio::spawn(h2_connection);

    harness.shutdown.terminating.cancel();
    let answered = h1.send_request(a_review(&harness)).await.unwrap();
    assert_eq!(answered.status(), 200);
    assert_eq!(answered.headers()[http::header::CONNECTION], "close");
    let closed = tokio::time::timeout(Duration::from_secs(2), h1_connection).await;
    assert!(matches!(closed, Ok(Ok(Ok(())))), "closed after its answer: {closed:?}");
    let fresh = tls_connect(&ca, harness.webhook, &[]).await;
    let (mut fresh, fresh_connection) = http1::handshake(TokioIo::new(fresh)).await.unwrap();
    tokio::spawn(fresh_connection);
    let answered = fresh.send_request(a_review(&harness)).await.unwrap();
    assert_eq!(answered.status(), 200);
    assert_eq!(answered.headers()[http::header::CONNECTION], "close", "new connections too");
    for _ in 0..2 {
        let answered = h2.send_request(a_review(&harness)).await.expect("HTTP/2 streams go on until GOAWAY");
        assert_eq!(answered.status(), 200);
    }
}

/// Clients must learn that a connection is going away without losing a request on it: HTTP/2 gets
/// GOAWAY and its streams in flight still finish; HTTP/1.1 is closed at once when idle, and after
/// its answer, which says `Connection: close`, when a request is in flight.
#[tokio::test]
async fn shutdown_closes_connections_gracefully() {
    use hyper::client::conn::{http1, http2};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let (harness, _client, ca, _volume) = serving().await;
    let h2 = tls_connect(&ca, harness.webhook, &[b"h2"]).await;
    let (mut h2, h2_connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(h2)).await.unwrap();
    let h2_connection = tokio::spawn(h2_connection);
    assert_eq!(h2.send_request(a_review(&harness)).await.unwrap().status(), 200);
    let (h2_half, request) = Halfway::start(&harness);
    let h2_in_flight = tokio::spawn(h2.send_request(request));

    let idle = tls_connect(&ca, harness.webhook, &[]).await;
    let (mut idle, idle_connection) = http1::handshake(TokioIo::new(idle)).await.unwrap();
    let idle_connection = tokio::spawn(idle_connection);
    let kept_alive = idle.send_request(a_review(&harness)).await.unwrap();
    assert!(kept_alive.headers().get(http::header::CONNECTION).is_none());
    let h1 = tls_connect(&ca, harness.webhook, &[]).await;
    let (mut h1, h1_connection) = http1::handshake(TokioIo::new(h1)).await.unwrap();
    let h1_connection = tokio::spawn(h1_connection);
    let (h1_half, request) = Halfway::start(&harness);
    let h1_in_flight = tokio::spawn(h1.send_request(request));
    tokio::time::sleep(Duration::from_millis(200)).await;

    harness.shutdown.closing.cancel();
    let closed = tokio::time::timeout(Duration::from_secs(2), idle_connection).await;
    assert!(matches!(closed, Ok(Ok(Ok(())))), "the idle HTTP/1.1 connection is closed cleanly: {closed:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    h2_half.finish();
    h1_half.finish();
    let answered = h2_in_flight.await.unwrap().expect("the HTTP/2 stream in flight is answered");
    assert_eq!(answered.status(), 200);
    let answered = h1_in_flight.await.unwrap().expect("the HTTP/1.1 request in flight is answered");
    assert_eq!(answered.status(), 200);
    assert_eq!(answered.headers()[http::header::CONNECTION], "close");
    for (protocol, connection) in [("HTTP/2", h2_connection), ("HTTP/1.1", h1_connection)] {
        let ended = tokio::time::timeout(Duration::from_secs(2), connection).await;
        assert!(matches!(ended, Ok(Ok(Ok(())))), "the {protocol} connection ends without an error: {ended:?}");
    }
    assert!(h2.send_request(a_review(&harness)).await.is_err(), "no new stream after GOAWAY");
    tokio::time::timeout(Duration::from_secs(5), harness.stopped).await.unwrap().unwrap().unwrap();
}

// ---- the binary -----------------------------------------------------------------------------------

/// `sandcap run --webhook-only` on loopback ports it picks, ready to serve. Killed when dropped, so
/// that a failing test leaves no process behind.
struct Sandcap {
    child: std::process::Child,
    webhook: u16,
    admin: u16,
    /// Holds `listening`, the `--listen-report`.
    dir: tempfile::TempDir,
}

impl Sandcap {
    /// With `--tls-self-signed`; `configure` adds flags and decides where the output goes.
    fn start(configure: impl FnOnce(&mut std::process::Command)) -> Sandcap {
        Sandcap::start_with(&["--tls-self-signed"], configure)
    }

    /// With the certificate flags `tls`.
    fn start_with(tls: &[&str], configure: impl FnOnce(&mut std::process::Command)) -> Sandcap {
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("listening");
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_sandcap"));
        command
            .args(["run", "--webhook-only"])
            .args(tls)
            .args(["--webhook-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--listen-report"])
            .arg(&report)
            .env("RUST_LOG", "info");
        configure(&mut command);
        let mut child = command.spawn().unwrap();
        let listening = support::ports::listening(&report, &mut child).unwrap_or_else(|e| panic!("{e}"));
        let (webhook, admin) = (listening.webhook.expect("a webhook listener").port(), listening.admin.port());
        let sandcap = Sandcap { child, webhook, admin, dir };
        let ready = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            http_get(admin, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
        });
        assert!(ready, "sandcap run never became ready");
        sandcap
    }

    fn signal(&self, name: &str) {
        let kill =
            std::process::Command::new("kill").args([&format!("-{name}"), &self.child.id().to_string()]).status();
        assert!(kill.unwrap().success());
    }

    /// The exit status and how long it took, or `None` if it still runs after `limit`.
    fn wait(&mut self, limit: Duration) -> Option<(std::process::ExitStatus, Duration)> {
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some((status, started.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// Sends one review over TLS (the certificate is made at startup: nothing to trust in advance).
    fn post_review(&self, review: &Value) -> Value {
        let client = reqwest::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let url = format!("https://127.0.0.1:{}/validate", self.webhook);
            let body = serde_json::to_vec(review).unwrap();
            client.post(url).body(body).send().await.unwrap().json().await.unwrap()
        })
    }

    /// A TCP connection that never starts its TLS handshake: shutdown waits for it (up to the
    /// 5 s handshake timeout), which makes a slow shutdown on demand.
    fn stall_shutdown(&self) -> std::net::TcpStream {
        std::net::TcpStream::connect(("127.0.0.1", self.webhook)).unwrap()
    }

    fn stderr(&mut self) -> String {
        let mut text = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut text).unwrap();
        text
    }
}

impl Drop for Sandcap {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn sandcap_run_serves_until_sigterm_and_exits_zero() {
    let mut sandcap = Sandcap::start(|command| {
        command.env("SANDCAP_LOG_FORMAT", "json").env("SANDCAP_SHUTDOWN_DRAIN_WINDOW", "0s");
        command.stdout(std::process::Stdio::piped());
    });
    let answer = sandcap.post_review(&review("CREATE", &webhook_denied(), None));
    assert_eq!(answer["response"]["allowed"], false);
    let mut lease = example("lease-reuse.yaml");
    lease["spec"]["reusePolicy"] = json!("always");
    assert_eq!(sandcap.post_review(&review("CREATE", &lease, None))["response"]["allowed"], false);

    sandcap.signal("TERM");
    let (status, _) = sandcap.wait(Duration::from_secs(10)).expect("sandcap exits within 10 s of SIGTERM");
    assert_eq!(status.code(), Some(0));
    let mut logs = String::new();
    sandcap.child.stdout.take().unwrap().read_to_string(&mut logs).unwrap();
    let lines: Vec<Value> = logs.lines().map(|l| serde_json::from_str(l).expect("JSON logs")).collect();
    assert_eq!(lines[0]["level"], "INFO");
    let denials: Vec<&Value> = lines.iter().filter(|l| l["message"] == "denied").collect();
    assert_eq!(denials.len(), 2, "{logs}");
    let span = |i: usize| &denials[i]["span"];
    assert_eq!(span(0)["name"], "review");
    assert_eq!((&span(0)["kind"], &span(0)["object"]), (&json!("SandboxProvider"), &json!("acme-kubernetes")));
    assert_eq!(span(0)["allowed"], false);
    assert!(span(0).get("namespace").is_none(), "a provider is cluster-scoped: {}", span(0));
    assert_eq!((&span(1)["kind"], &span(1)["object"]), (&json!("SandboxLease"), &json!("run-42")));
    assert_eq!(span(1)["namespace"], "team-a");
    assert!(!logs.contains("acme-worker"), "request bodies are never logged");
}

/// As `sandcap run ... 2>&1 | head -1`: the reader of the logs is gone by the time of the shutdown.
#[test]
fn a_closed_log_pipe_does_not_stop_the_shutdown() {
    let (reader, writer) = std::io::pipe().unwrap();
    let mut sandcap = Sandcap::start(|command| {
        command.arg("--shutdown-drain-window=0s").stdout(writer.try_clone().unwrap()).stderr(writer);
    });
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(reader), &mut first).unwrap();
    assert!(first.contains("INFO"), "{first}");
    // The reader was dropped with the BufReader; the review's log line meets the closed pipe too.
    assert_eq!(sandcap.post_review(&review("CREATE", &webhook_denied(), None))["response"]["allowed"], false);

    sandcap.signal("TERM");
    let (status, took) = sandcap.wait(Duration::from_secs(10)).expect("sandcap exits within 10 s of SIGTERM");
    assert_eq!(status.code(), Some(0));
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[test]
fn a_shutdown_past_its_deadline_exits_non_zero() {
    let mut sandcap = Sandcap::start(|command| {
        command
            .args(["--shutdown-timeout", "1s", "--shutdown-drain-window", "0s"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
    });
    let _stalled = sandcap.stall_shutdown();
    std::thread::sleep(Duration::from_millis(100));
    sandcap.signal("TERM");
    let (status, took) = sandcap.wait(Duration::from_secs(4)).expect("sandcap exits at its deadline");
    assert_eq!(status.code(), Some(1));
    assert!(took >= Duration::from_millis(900), "{took:?}");
    let stderr = sandcap.stderr();
    assert!(stderr.contains("sandcap: shutdown did not finish within 1s"), "{stderr}");
}

#[test]
fn a_second_signal_exits_at_once() {
    let mut sandcap = Sandcap::start(|command| {
        command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    });
    let _stalled = sandcap.stall_shutdown();
    std::thread::sleep(Duration::from_millis(100));
    sandcap.signal("TERM");
    assert!(sandcap.wait(Duration::from_millis(500)).is_none(), "the stalled connection holds up the shutdown");
    sandcap.signal("INT");
    let (status, took) = sandcap.wait(Duration::from_secs(2)).expect("sandcap exits on the second signal");
    assert_eq!(status.code(), Some(1));
    assert!(took < Duration::from_millis(500), "{took:?}");
    let stderr = sandcap.stderr();
    assert!(stderr.contains("sandcap: SIGINT received again during shutdown; exiting at once"), "{stderr}");
}

/// SIGTERM: not ready at once, yet every review is answered through the drain window, on open
/// connections and new ones alike; then the port closes and the process exits 0.
#[test]
fn sigterm_keeps_answering_through_the_drain_window() {
    let mut sandcap = Sandcap::start(|command| {
        command.args(["--shutdown-drain-window", "3s"]).stdout(std::process::Stdio::piped());
    });
    let kept_alive = reqwest::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let allowed = |client: &reqwest::Client| {
        let url = format!("https://127.0.0.1:{}/validate", sandcap.webhook);
        let body = serde_json::to_vec(&review("CREATE", &example("provider-full.yaml"), None)).unwrap();
        let answer: Value = runtime.block_on(async { client.post(url).body(body).send().await?.json().await }).unwrap();
        answer["response"]["allowed"] == true
    };
    assert!(allowed(&kept_alive));

    let signalled = std::time::Instant::now();
    sandcap.signal("TERM");
    std::thread::sleep(Duration::from_millis(200));
    let readyz = http_get(sandcap.admin, "/readyz").unwrap();
    assert!(readyz.starts_with("HTTP/1.1 503") && readyz.ends_with("not ready: shutting down\n"), "{readyz}");
    for _ in 0..10 {
        assert!(allowed(&kept_alive), "the open connection is served");
        let fresh = reqwest::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
        assert!(allowed(&fresh), "a new connection is served");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(signalled.elapsed() < Duration::from_secs(3), "the checks took longer than the window");

    let (status, _) = sandcap.wait(Duration::from_secs(10)).expect("sandcap exits after the window");
    assert_eq!(status.code(), Some(0));
    assert!(signalled.elapsed() >= Duration::from_secs(3), "{:?}", signalled.elapsed());
    assert!(std::net::TcpStream::connect(("127.0.0.1", sandcap.webhook)).is_err());
    let mut logs = String::new();
    sandcap.child.stdout.take().unwrap().read_to_string(&mut logs).unwrap();
    let phases = ["shutting down: not ready", "drain window over", "no longer accepting", "stopped"];
    let mut at = 0;
    for phase in phases {
        at += logs[at..].find(phase).unwrap_or_else(|| panic!("{phase:?}, in this order, in {logs}"));
    }
}

/// Ctrl-C is a person at a terminal, with nothing routing clients to the process: no window.
#[test]
fn sigint_skips_the_drain_window() {
    let mut sandcap = Sandcap::start(|command| {
        command.stdout(std::process::Stdio::null());
    });
    sandcap.signal("INT");
    let (status, took) = sandcap.wait(Duration::from_secs(5)).expect("sandcap exits on SIGINT");
    assert_eq!(status.code(), Some(0));
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[test]
fn a_drain_window_past_the_shutdown_timeout_is_refused() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandcap"))
        .args(["run", "--webhook-only", "--tls-self-signed", "--shutdown-timeout", "5s"])
        .args(["--webhook-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("sandcap: --shutdown-drain-window (10s) must be shorter than --shutdown-timeout (5s)"),
        "{stderr}"
    );
}

/// Port 0 is how every harness starts sandcap: the report names the ports the system picked, whole,
/// and they are the ones served.
#[test]
fn sandcap_run_reports_the_ports_it_bound() {
    let sandcap = Sandcap::start(|command| {
        command.stdout(std::process::Stdio::null());
    });
    let text = std::fs::read_to_string(sandcap.dir.path().join("listening")).unwrap();
    assert_eq!(text, format!("webhook 127.0.0.1:{}\nadmin 127.0.0.1:{}\n", sandcap.webhook, sandcap.admin));
    assert!(sandcap.webhook != 0 && sandcap.admin != 0 && sandcap.webhook != sandcap.admin, "{text}");
    assert_eq!(std::fs::read_dir(sandcap.dir.path()).unwrap().count(), 1, "nothing but the report is left");
    assert!(http_get(sandcap.admin, "/healthz").unwrap().ends_with("ok\n"));
}

/// A minimal HTTP/1.1 GET, so the polling loop needs no runtime.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}
