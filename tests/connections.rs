//! The connection limits of docs/webhook.md ("Connections"), against the real `sandcap` binary (a
//! debug build) with its default limits. Loopback has many addresses, so each client below is a
//! client address of its own: a neighbour at 127.0.0.2 holds hundreds of connections of every
//! kind on both ports while the kubelet (127.0.0.3) probes `/healthz` and the apiserver
//! (127.0.0.4) sends reviews.

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use support::hostile::{self, Sandcap};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const NEIGHBOUR: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const KUBELET: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));
const APISERVER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 4));

/// The budgets this file holds sandcap to (docs/webhook.md).
const PROBE_WITHIN: Duration = Duration::from_secs(1);
const REVIEW_WITHIN: Duration = Duration::from_secs(2);
const PEAK: u64 = 128 * 1024 * 1024;

/// Connections the neighbour keeps trying to hold, per kind and port.
const HOARD: usize = 120;
const FLOOD_FOR: Duration = Duration::from_secs(20);

fn addr(url: &str) -> SocketAddr {
    let host = url.trim_start_matches("https://").trim_start_matches("http://");
    host.split('/').next().unwrap().parse().unwrap()
}

async fn connect_from(local: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(local, 0))?;
    socket.connect(to).await
}

/// sandcap's certificate is self-signed and these clients only need a channel: accept it, and
/// its handshake signatures, unchecked.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn tls_connector(alpn: &[u8]) -> tokio_rustls::TlsConnector {
    let provider = sandcap::tls::provider();
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// What the neighbour does with one connection before it holds it, doing nothing more.
#[derive(Clone, Copy, Debug)]
enum Hold {
    /// Plain TCP that never starts TLS (or, on the admin port, never sends a request).
    Silent,
    /// One HTTP/1.1 request, then kept alive.
    KeptAlive,
    /// One HTTP/2 request, then kept alive with pings every second.
    Http2,
}

/// Writes `request` and reads one whole answer (by its Content-Length); empty if the connection
/// breaks first.
async fn http1(io: &mut (impl AsyncReadExt + AsyncWriteExt + Unpin), request: &[u8]) -> String {
    if io.write_all(request).await.is_err() {
        return String::new();
    }
    let mut answer = Vec::new();
    let mut chunk = [0; 4096];
    loop {
        let text = String::from_utf8_lossy(&answer);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    line.to_ascii_lowercase().strip_prefix("content-length:").map(|n| n.trim().to_string())
                })
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
            if answer.len() >= end + 4 + length {
                return text.into_owned();
            }
        }
        match io.read(&mut chunk).await {
            Ok(n) if n > 0 => answer.extend_from_slice(&chunk[..n]),
            _ => return String::from_utf8_lossy(&answer).into_owned(),
        }
    }
}

/// Sends one HTTP/2 request on `io` and returns once the server closes the connection.
async fn http2_held<S>(io: S, uri: &str)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Ok((mut sender, connection)) = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(1))
        .keep_alive_while_idle(true)
        .handshake::<_, axum::body::Body>(hyper_util::rt::TokioIo::new(io))
        .await
    else {
        return;
    };
    let connection = tokio::spawn(connection);
    let request = http::Request::get(uri).body(axum::body::Body::empty()).unwrap();
    let _ = sender.send_request(request).await;
    let _ = connection.await;
}

/// Waits until the server closes `io` (or it breaks).
async fn held(mut io: impl AsyncReadExt + Unpin) {
    let mut sink = [0; 512];
    while io.read(&mut sink).await.is_ok_and(|n| n > 0) {}
}

/// One of the neighbour's places: opens a connection of `kind`, holds it until sandcap closes it,
/// and opens another two seconds later, until `until`. Counts the connections it opened.
async fn hoard(port: SocketAddr, tls: bool, kind: Hold, until: Instant, opened: Arc<AtomicU64>) {
    let path = if tls { "/validate" } else { "/healthz" };
    while Instant::now() < until {
        let Ok(tcp) = connect_from(NEIGHBOUR, port).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        opened.fetch_add(1, Ordering::Relaxed);
        let request = format!("GET {path} HTTP/1.1\r\nHost: {port}\r\n\r\n");
        let hold = async {
            match (kind, tls) {
                (Hold::Silent, _) => held(tcp).await,
                (Hold::KeptAlive, false) => {
                    let mut tcp = tcp;
                    http1(&mut tcp, request.as_bytes()).await;
                    held(tcp).await;
                }
                (Hold::Http2, false) => http2_held(tcp, &format!("http://{port}{path}")).await,
                (kind, true) => {
                    let alpn: &[u8] = if matches!(kind, Hold::Http2) { b"h2" } else { b"http/1.1" };
                    let name = ServerName::try_from("localhost").unwrap();
                    let Ok(mut stream) = tls_connector(alpn).connect(name, tcp).await else { return };
                    if matches!(kind, Hold::Http2) {
                        http2_held(stream, &format!("https://{port}{path}")).await;
                    } else {
                        http1(&mut stream, request.as_bytes()).await;
                        held(stream).await;
                    }
                }
            }
        };
        let _ = tokio::time::timeout_at((until + Duration::from_secs(1)).into(), hold).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_neighbour_hoarding_connections_starves_neither_port() {
    let sandcap = Sandcap::start().await;
    let (webhook, admin) = (addr(&sandcap.webhook), addr(&sandcap.admin));
    let until = Instant::now() + FLOOD_FOR;
    let opened = Arc::new(AtomicU64::new(0));
    let mut neighbour = Vec::new();
    for (port, tls) in [(webhook, true), (admin, false)] {
        for kind in [Hold::Silent, Hold::KeptAlive, Hold::Http2] {
            for _ in 0..HOARD {
                neighbour.push(tokio::spawn(hoard(port, tls, kind, until, opened.clone())));
            }
        }
    }
    // Let the neighbour take what it can first.
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The kubelet: a new connection for every probe, as its HTTP probes do.
    let kubelet = reqwest::Client::builder()
        .local_address(KUBELET)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let probes = tokio::spawn({
        let url = format!("{}/healthz", sandcap.admin);
        async move {
            let mut slowest = Duration::ZERO;
            let mut count = 0;
            while Instant::now() < until {
                let asked = Instant::now();
                let answer = kubelet.get(&url).send().await.expect("/healthz answers");
                assert_eq!(answer.status(), 200);
                slowest = slowest.max(asked.elapsed());
                count += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            (count, slowest)
        }
    });
    // The apiserver: pooled keep-alive connections, a review twice a second.
    let apiserver = reqwest::Client::builder()
        .local_address(APISERVER)
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let reviews = tokio::spawn({
        let url = sandcap.webhook.clone();
        async move {
            let mut slowest = Duration::ZERO;
            let mut count = 0;
            while Instant::now() < until {
                let asked = Instant::now();
                let answer = apiserver
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(hostile::honest_review())
                    .send()
                    .await
                    .expect("the review is answered");
                assert_eq!(answer.status(), 200);
                slowest = slowest.max(asked.elapsed());
                count += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            (count, slowest)
        }
    });
    let (probes, slowest_probe) = probes.await.unwrap();
    let (reviews, slowest_review) = reviews.await.unwrap();
    for task in neighbour {
        task.await.unwrap();
    }
    let peak = sandcap.peak();
    eprintln!(
        "neighbour opened {} connections; {probes} probes, slowest {slowest_probe:?}; {reviews} reviews, slowest \
         {slowest_review:?}; peak {} MiB",
        opened.load(Ordering::Relaxed),
        peak >> 20
    );
    assert!(slowest_probe < PROBE_WITHIN, "a probe took {slowest_probe:?}");
    assert!(slowest_review < REVIEW_WITHIN, "a review took {slowest_review:?}");
    assert!(peak <= PEAK, "peak {} MiB", peak >> 20);
}

/// The apiserver pools webhook connections for 90 s: one reused after longer than the header
/// timeout (5 s) must still be served, and only the idle timeout (120 s) closes it.
#[tokio::test]
async fn an_idle_http1_connection_is_reused_after_the_header_timeout() {
    let sandcap = Sandcap::start().await;
    let webhook = addr(&sandcap.webhook);
    let tcp = connect_from(APISERVER, webhook).await.unwrap();
    let mut tls = tls_connector(b"http/1.1").connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
    let body = hostile::honest_review();
    let request = [
        format!(
            "POST /validate HTTP/1.1\r\nHost: {webhook}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes(),
        body,
    ]
    .concat();
    assert!(http1(&mut tls, &request).await.starts_with("HTTP/1.1 200"));
    tokio::time::sleep(Duration::from_secs(7)).await;
    let again = http1(&mut tls, &request).await;
    assert!(again.starts_with("HTTP/1.1 200"), "the reused connection got {again:?}");
}
