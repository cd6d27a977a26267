use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{read_until_closed, review, review_full_provider, serving, tls_connect, webhook_denied};

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
