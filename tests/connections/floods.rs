//! One address flooding HTTP/2 streams, trickling bodies or trickling a head: the others keep
//! their places and their answers in time.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::hostile::{self, Sandcap};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{
    NEIGHBOUR, ONE_AT_A_TIME, PEAK, REVIEW_WITHIN, addr, apiserver_client, connect_from, http1, tls_connector,
};

/// The webhook's limits these tests lean on (`Limits::default()`): HTTP/2 streams per connection,
/// the body deadline, the head deadline.
const STREAMS: usize = 16;
/// hyper's own cap of HTTP/2 streams per connection, which sandcap had before it set its own.
const HYPER_STREAMS: usize = 200;
const BODY_TIMEOUT: Duration = Duration::from_secs(3);
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

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
        let apiserver = apiserver_client();
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
