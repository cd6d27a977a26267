//! The connection limits of docs/webhook.md ("Connections", "Memory"), against the real `sandcap`
//! binary (a debug build) with its default limits. Loopback has many addresses, so each client
//! below is a client address of its own: a neighbour at 127.0.0.2 holds hundreds of connections of
//! every kind on both ports, floods HTTP/2 streams, trickles bodies and heads, while the kubelet
//! (127.0.0.3) probes `/healthz` and the apiserver (127.0.0.4) sends reviews.

mod support;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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

/// The webhook's limits these tests lean on (`Limits::default()`): HTTP/2 streams per connection,
/// the body deadline, the head deadline.
const STREAMS: usize = 16;
/// hyper's own cap of HTTP/2 streams per connection, which sandcap had before it set its own.
const HYPER_STREAMS: usize = 200;
const BODY_TIMEOUT: Duration = Duration::from_secs(3);
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// The tests that measure how fast sandcap answers run one at a time, so that on a small machine
/// none measures another's load.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
    let _alone = ONE_AT_A_TIME.lock().await;
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

/// A TLS connection from `local` speaking `alpn`; after a pause, none if it cannot be had.
async fn tls_from(local: IpAddr, to: SocketAddr, alpn: &[u8]) -> Option<tokio_rustls::client::TlsStream<TcpStream>> {
    let name = ServerName::try_from("localhost").unwrap();
    let connected = match connect_from(local, to).await {
        Ok(tcp) => tls_connector(alpn).connect(name, tcp).await,
        Err(e) => Err(e),
    };
    if connected.is_err() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    connected.ok()
}

/// What the honest apiserver got: a review every 200 ms on pooled keep-alive connections until
/// `until`, each answer's status (0 for none) and how long it took. It runs on a thread and
/// runtime of its own, as the apiserver is a process of its own: the neighbour's tasks in this
/// process must not delay it.
async fn honest_reviews(url: String, until: Instant) -> Vec<(u16, Duration)> {
    let apiserver = async move {
        let apiserver = reqwest::Client::builder()
            .local_address(APISERVER)
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let mut answers = Vec::new();
        while Instant::now() < until {
            let asked = Instant::now();
            let review = apiserver.post(&url).header("content-type", "application/json").body(hostile::honest_review());
            let answer = review.send().await;
            answers.push((answer.map_or(0, |answer| answer.status().as_u16()), asked.elapsed()));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        answers
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    tokio::task::spawn_blocking(move || runtime.block_on(apiserver)).await.unwrap()
}

/// Every honest review answered 200 within [`REVIEW_WITHIN`].
fn all_answered_in_time(answers: &[(u16, Duration)]) {
    assert!(answers.len() >= 10, "only {} reviews were sent", answers.len());
    let refused: Vec<_> = answers.iter().filter(|(status, _)| *status != 200).collect();
    assert!(refused.is_empty(), "honest reviews not answered 200: {refused:?}");
    let slowest = answers.iter().map(|&(_, took)| took).max().unwrap_or_default();
    assert!(slowest < REVIEW_WITHIN, "an honest review took {slowest:?}");
}

/// How often each status answered the neighbour, and the latest a 408 came.
#[derive(Default)]
struct Answered {
    statuses: Mutex<BTreeMap<u16, usize>>,
    slowest_408: Mutex<Duration>,
}

impl Answered {
    fn record(&self, status: u16, took: Duration) {
        *self.statuses.lock().unwrap().entry(status).or_default() += 1;
        if status == 408 {
            let mut slowest = self.slowest_408.lock().unwrap();
            *slowest = (*slowest).max(took);
        }
    }

    fn count(&self, status: u16) -> usize {
        self.statuses.lock().unwrap().get(&status).copied().unwrap_or(0)
    }
}

/// A body that sends its first kilobyte, then nothing, ever.
fn stalled_body() -> axum::body::Body {
    let first = Ok::<_, std::io::Error>(axum::body::Bytes::from(vec![b' '; 1024]));
    axum::body::Body::from_stream(futures::StreamExt::chain(futures::stream::iter([first]), futures::stream::pending()))
}

/// One of the neighbour's HTTP/2 connections, kept full until `until`: as many streams as hyper
/// allowed before sandcap set its own cap, each a review whose body stalls after its first
/// kilobyte, and a new one as soon as one is answered. Past sandcap's cap they wait in the
/// client (or are refused), costing sandcap nothing.
async fn stream_flood(webhook: SocketAddr, until: Instant, answered: Arc<Answered>) {
    while Instant::now() < until {
        let Some(tls) = tls_from(NEIGHBOUR, webhook, b"h2").await else { continue };
        let Ok((sender, connection)) = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake::<_, axum::body::Body>(hyper_util::rt::TokioIo::new(tls))
            .await
        else {
            continue;
        };
        let connection = tokio::spawn(connection);
        let streams = (0..HYPER_STREAMS).map(|_| {
            let (mut sender, answered) = (sender.clone(), answered.clone());
            async move {
                while Instant::now() < until {
                    let request = http::Request::post(format!("https://{webhook}/validate"))
                        .header("content-type", "application/json")
                        .header("content-length", "65536")
                        .body(stalled_body())
                        .unwrap();
                    let asked = Instant::now();
                    match tokio::time::timeout_at(until.into(), sender.send_request(request)).await {
                        Ok(Ok(answer)) => answered.record(answer.status().as_u16(), asked.elapsed()),
                        // Refused, the connection gone, or the flood over.
                        _ => return,
                    }
                }
            }
        });
        futures::future::join_all(streams).await;
        connection.abort();
    }
}

/// A fresh sandcap, `tasks` copies of `neighbour` from [`NEIGHBOUR`] for 7 s, and from the second
/// second on honest reviews from another address: what the neighbour was answered and the honest
/// reviews' answers.
async fn flood_while_reviewing<Fut>(
    tasks: usize,
    neighbour: impl Fn(SocketAddr, Instant, Arc<Answered>) -> Fut,
) -> (Sandcap, Arc<Answered>, Vec<(u16, Duration)>)
where
    Fut: Future<Output = ()> + Send + 'static,
{
    let sandcap = Sandcap::start().await;
    let webhook = addr(&sandcap.webhook);
    let until = Instant::now() + Duration::from_secs(7);
    let answered = Arc::new(Answered::default());
    let flood: Vec<_> = (0..tasks).map(|_| tokio::spawn(neighbour(webhook, until, answered.clone()))).collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let honest = honest_reviews(sandcap.webhook.clone(), until).await;
    for task in flood {
        task.await.unwrap();
    }
    (sandcap, answered, honest)
}

fn summary(answered: &Answered, honest: &[(u16, Duration)]) -> String {
    format!(
        "the neighbour answered {:?}; {} honest reviews, slowest {:?}",
        answered.statuses.lock().unwrap(),
        honest.len(),
        honest.iter().map(|&(_, took)| took).max(),
    )
}

/// HTTP/2 streams are within the budgets: one address opening 64 connections with hundreds of
/// streams each, every stream a review whose body never ends, gets 16 streams a connection and
/// its share of the review places, each for the body deadline; another address's reviews are all
/// answered in time, and the whole flood stays within the memory budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_stream_flood_from_one_address_leaves_the_places_to_others() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let (sandcap, answered, honest) = flood_while_reviewing(64, stream_flood).await;
    let peak = sandcap.peak();
    eprintln!("stream flood: {}; peak {} MiB", summary(&answered, &honest), peak >> 20);
    all_answered_in_time(&honest);
    // Every stream past the flood's share waits the queue timeout (2 s) for a place, then 429.
    assert!(answered.count(429) >= 64 * STREAMS / 2, "the flood never held its streams");
    assert!(answered.count(408) > 0, "no stalled body was cut off at the body deadline");
    assert!(peak <= PEAK, "peak {} MiB", peak >> 20);
}

/// One of the neighbour's HTTP/1.1 connections until `until`: a review head, then its body a
/// byte every half second; once answered, another connection.
async fn trickled_bodies(webhook: SocketAddr, until: Instant, answered: Arc<Answered>) {
    while Instant::now() < until {
        let Some(tls) = tls_from(NEIGHBOUR, webhook, b"http/1.1").await else { continue };
        let (mut reader, mut writer) = tokio::io::split(tls);
        let head = format!("POST /validate HTTP/1.1\r\nHost: {webhook}\r\nContent-Length: 65536\r\n\r\n");
        let asked = Instant::now();
        let trickle = async move {
            let _ = writer.write_all(head.as_bytes()).await;
            while writer.write_all(b" ").await.is_ok() {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            // Closed: the answer is still to be read.
            std::future::pending::<()>().await;
        };
        let mut answer = Vec::new();
        tokio::select! {
            _ = reader.read_to_end(&mut answer) => {}
            () = trickle => {}
            () = tokio::time::sleep_until((until + Duration::from_secs(2)).into()) => return,
        }
        if let Some(status) = String::from_utf8_lossy(&answer).get(9..12).and_then(|status| status.parse().ok()) {
            answered.record(status, asked.elapsed());
        }
    }
}

/// A trickled body holds a review place for the body deadline (3 s), not the request timeout:
/// 48 of them from one address take only that address's share, and another address's reviews
/// are all answered in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_bodies_from_one_address_leave_the_places_to_others() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let (_sandcap, answered, honest) = flood_while_reviewing(48, trickled_bodies).await;
    let slowest_408 = *answered.slowest_408.lock().unwrap();
    eprintln!("trickled bodies: {}; the latest 408 after {slowest_408:?}", summary(&answered, &honest));
    all_answered_in_time(&honest);
    assert!(answered.count(408) > 0, "no trickled body was cut off");
    // The body deadline from the head, not the request timeout (10 s).
    assert!(slowest_408 >= BODY_TIMEOUT / 2 && slowest_408 < BODY_TIMEOUT * 2, "a 408 after {slowest_408:?}");
}

/// Trickles a request head a byte a second on `tls` and returns how long after its first byte
/// sandcap closed the connection (at most 12 s are waited for).
async fn trickled_head(tls: impl tokio::io::AsyncRead + tokio::io::AsyncWrite) -> Duration {
    let (mut reader, mut writer) = tokio::io::split(tls);
    let started = Instant::now();
    let trickle = async move {
        for byte in b"POST /validate HTTP/1.1\r\nHost: localhost\r\n" {
            if writer.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        std::future::pending::<()>().await;
    };
    let mut sink = Vec::new();
    tokio::select! {
        _ = reader.read_to_end(&mut sink) => {}
        () = trickle => {}
        () = tokio::time::sleep(Duration::from_secs(12)) => {}
    }
    started.elapsed()
}

/// The head deadline (5 s from a head's first byte) holds for a connection's first request and
/// for a later one on a kept-alive connection, not only the first-request (10 s) and idle (120 s)
/// deadlines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_head_is_closed_at_the_head_deadline() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let sandcap = Sandcap::start().await;
    let webhook = addr(&sandcap.webhook);
    let first = tls_from(NEIGHBOUR, webhook, b"http/1.1").await.expect("a TLS connection");
    let mut kept = tls_from(NEIGHBOUR, webhook, b"http/1.1").await.expect("a TLS connection");
    let body = hostile::honest_review();
    let head = format!("POST /validate HTTP/1.1\r\nHost: {webhook}\r\nContent-Length: {}\r\n\r\n", body.len());
    assert!(http1(&mut kept, &[head.into_bytes(), body].concat()).await.starts_with("HTTP/1.1 200"));
    let (first, kept) = tokio::join!(trickled_head(first), trickled_head(kept));
    eprintln!("trickled heads closed after {first:?} (first request) and {kept:?} (kept alive)");
    for closed in [first, kept] {
        assert!(closed >= HEADER_TIMEOUT - Duration::from_secs(1) && closed < Duration::from_secs(7), "{closed:?}");
    }
}
