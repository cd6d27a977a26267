use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::{Harness, example, read_until_closed, review, serving, tls_connect};

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
