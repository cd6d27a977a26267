//! A neighbour hoarding connections of every kind on both ports, and the apiserver's pooled
//! connection reused after the header timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::support::hostile::{self, Sandcap};
use rustls::pki_types::ServerName;
use tokio::io::AsyncReadExt;

use super::{
    APISERVER, KUBELET, NEIGHBOUR, ONE_AT_A_TIME, PEAK, PROBE_WITHIN, REVIEW_WITHIN, addr, apiserver_client,
    connect_from, http1, tls_connector,
};

/// Connections the neighbour keeps trying to hold, per kind and port.
const HOARD: usize = 120;
const FLOOD_FOR: Duration = Duration::from_secs(20);

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
    let apiserver = apiserver_client();
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
