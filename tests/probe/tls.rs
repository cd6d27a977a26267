//! https workers: a handshake that fails, a CA store with no certificate, and a worker behind a
//! Service verified at one endpoint's address for the Service's name with the provider's own CA.

use std::net::SocketAddr;

use reqwest::Url;
use sandcap::probe::{FailureClass, ProbeError, ProbeOutcome, Prober, Target};
use sandcap_core::versions::V1;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use super::ca::TestCa;
use super::support::Worker;
use super::{failed_with, failure, http, loopback, probe, resolve_with_worker_url_and_env, spec};

#[tokio::test]
async fn a_tls_failure_is_named_without_the_peers_words() {
    // A server that answers a ClientHello in plain text: the handshake fails.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}/rpc", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let _ = socket.write_all(http("400 Bad Request", "", "secret-internal-banner").as_bytes()).await;
        let _ = socket.shutdown().await;
    });
    let outcome = probe(&url).await;
    server.await.unwrap();
    assert_eq!(failed_with(&outcome), &ProbeError::Tls);
    let message = failure(outcome);
    assert!(message.contains("failed: the TLS handshake failed") && !message.contains("banner"), "{message}");
}

/// A CA store that yields no certificate (`SSL_CERT_FILE` naming an empty or missing file, as a
/// private worker CA set up wrong) leaves http workers probed as ever and fails https ones at
/// their handshake; before, building the prober panicked.
#[test]
fn an_empty_ca_store_fails_https_probes_and_leaves_http_ones() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let missing = dir.path().join("missing.pem");
    let worker = Worker::with_methods(&V1.worker_methods());
    let https = tls_server();
    for file in [&empty, &missing] {
        let env = [("SSL_CERT_FILE", file.as_path()), ("SSL_CERT_DIR", dir.path())];
        let (record, stderr) = resolve_with_worker_url_and_env(&worker.url, &env);
        assert_eq!(record["capabilities"]["nativeSyncIn"], true, "{record}\n{stderr}");
        let (record, stderr) = resolve_with_worker_url_and_env(&https, &env);
        let explanations = record["explanations"].as_array().unwrap();
        assert!(explanations.iter().all(|e| e["reason"] == "WorkerNotVerified"), "{record}");
        assert!(stderr.contains("the TLS handshake failed"), "{stderr}");
    }
}

/// An https server on loopback with a self-signed certificate, answering handshakes until the
/// test process ends; its URL.
fn tls_server() -> String {
    sandcap::tls::install_default_provider();
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
    let config =
        rustls::ServerConfig::builder().with_no_client_auth().with_single_cert(vec![cert.cert.der().clone()], key);
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config.unwrap()));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}/rpc", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            listener.set_nonblocking(true).unwrap();
            let listener = TcpListener::from_std(listener).unwrap();
            while let Ok((socket, _)) = listener.accept().await {
                let _ = acceptor.accept(socket).await;
            }
        });
    });
    url
}

/// The reference worker serving https with a certificate `ca` signed for `names`; its port.
fn https_worker(ca: &TestCa, names: &[&str], dir: &std::path::Path) -> (Worker, u16) {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let (cert, key) = ca.write_serving(dir, &names);
    let methods = V1.worker_methods().join(",");
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let worker = Worker::start(&["--methods", &methods, "--tls-cert", &cert, "--tls-key", &key]);
    let port = Url::parse(&worker.url).unwrap().port().unwrap();
    (worker, port)
}

/// An endpoint of an https Service worker is connected to at its own address and its certificate
/// verified for the Service's name, with the provider's CA alone: the system's store does not
/// vouch for it, another CA does not, and a certificate for another name does not.
#[tokio::test]
async fn an_https_endpoint_is_verified_for_the_services_name_with_the_providers_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("workers CA");
    let (_worker, port) = https_worker(&ca, &["acme.workers.svc"], dir.path());
    let policy = sandcap_core::addresses::WorkerPolicy { allowed_cidrs: loopback(), ..Default::default() };
    let prober = Prober::new(std::time::Duration::from_secs(5), policy, "test").unwrap();
    let address = Some(SocketAddr::from(([127, 0, 0, 1], port)));
    let (spec, pem) = (spec(), ca.pem.as_bytes());
    let at = |host: &str| Url::parse(&format!("https://{host}:{port}/rpc")).unwrap();
    let (service, other) = (at("acme.workers.svc"), at("other.workers.svc"));

    let ok = prober.probe_at(Target { url: &service, address, ca: Some(pem) }, &spec).await;
    assert!(matches!(&ok, ProbeOutcome::Succeeded { methods, .. } if !methods.is_empty()), "{ok:?}");
    let unknown_ca = prober.probe_at(Target { url: &service, address, ca: None }, &spec).await;
    assert_eq!(failed_with(&unknown_ca), &ProbeError::Tls, "the system store does not know the CA");
    let another = TestCa::new("another CA");
    let wrong_ca = prober.probe_at(Target { url: &service, address, ca: Some(another.pem.as_bytes()) }, &spec).await;
    assert_eq!(failed_with(&wrong_ca), &ProbeError::Tls);
    let wrong_name = prober.probe_at(Target { url: &other, address, ca: Some(pem) }, &spec).await;
    assert_eq!(failed_with(&wrong_name), &ProbeError::Tls, "the certificate is for acme, not other");
    assert_eq!(failed_with(&wrong_name).class(), Some(FailureClass::Unreachable));
    let not_pem = prober.probe_at(Target { url: &service, address, ca: Some(b"not a certificate") }, &spec).await;
    assert!(matches!(failed_with(&not_pem), ProbeError::Endpoint(m) if m.contains("caBundle")), "{not_pem:?}");
}

/// The address an endpoint gives is held to the address policy as a resolved name is.
#[tokio::test]
async fn an_endpoint_address_the_policy_refuses_is_not_connected_to() {
    let prober = Prober::new(std::time::Duration::from_secs(1), Default::default(), "test").unwrap();
    let url = Url::parse("https://acme.workers.svc:443/rpc").unwrap();
    let address = Some(SocketAddr::from(([169, 254, 169, 254], 443)));
    let outcome = prober.probe_at(Target { url: &url, address, ca: None }, &spec()).await;
    assert!(matches!(failed_with(&outcome), ProbeError::RefusedAddress(_)), "{outcome:?}");
}
