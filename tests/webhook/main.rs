//! The admission webhook over real TLS: a CA made per test run, certificates in files laid out like
//! a Kubernetes Secret volume, a real HTTPS client (reqwest on rustls), raw TLS clients for the
//! misbehaving cases, and the real binary for `sandcap run`.
//!
//! Here the shared pieces (the CA and the Secret volume, the server under test, AdmissionReviews,
//! raw TLS clients); the tests by concern: [`admission`] (reviews and hostile bodies), [`clients`]
//! (misbehaving clients and connection limits), [`certificates`] (readiness and rotation),
//! [`shutdown`] (in-flight requests and connections while stopping), [`run`] (the real binary:
//! certificate replacements, signals, the drain window, the ports it reports).

mod admission;
mod certificates;
mod clients;
mod run;
mod shutdown;
#[path = "../support/mod.rs"]
mod support;

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
use sandcap::listener::{Limits, Stop};
use sandcap::metrics::Metrics;
use sandcap::tls::{CertFiles, CertSource};
use sandcap::webhook::{self, Webhook};
use sandcap_core::validation::Options;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
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

// ---- raw TLS clients ---------------------------------------------------------------------------

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

/// The name the apiserver calls the chart's webhook by, as `sandcap run` derives it in
/// [`run::sandcap_run_refuses_a_replacement_outside_its_dates_or_without_the_service_name`].
const SERVICE_HOST: &str = "sandcap-webhook.sandcap-system.svc";
