//! The connection loop both ports share: accept, admit under per-client and per-port limits
//! (`clients.rs`), TLS or not, HTTP/1 and HTTP/2 with a deadline for every phase (`activity.rs`),
//! and a drain on shutdown. What is served is the caller's [`Router`].

mod activity;
mod clients;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit};
use axum::http::{HeaderValue, StatusCode, Version, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use tower_http::timeout::TimeoutLayer;

use self::activity::{Activity, Deadlines};
use self::clients::{Clients, Ticket};

/// The apiserver's own limit on a request body.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// How long and how much one client may take. The defaults stay under the apiserver's webhook
/// timeout (10 s by default), after which nobody is waiting for the answer anyway.
#[derive(Clone, Debug)]
pub struct Limits {
    pub handshake_timeout: Duration,
    /// Time to receive a connection's first request after the handshake, and an HTTP/1 request
    /// head from its first byte (the first request's too); a slow client is cut off after it.
    pub header_timeout: Duration,
    /// Time from a request's head to the end of its body, waiting for a place included; past it
    /// the client gets 408 and its place is free again. Far below `request_timeout`, so that a
    /// trickled body holds a place for seconds, while an honest body, sent with its head, arrives
    /// in milliseconds.
    pub body_timeout: Duration,
    /// Time to read the body and answer; past it the client gets 408.
    pub request_timeout: Duration,
    /// A connection that has sent nothing for this long is closed. Longer than the apiserver's
    /// own idle timeout for pooled connections (90 s), so that the server never closes a
    /// connection just as the client reuses it. Before its first request a connection gets only
    /// `handshake_timeout` + `header_timeout`.
    pub idle_timeout: Duration,
    pub max_body: usize,
    /// Requests whose bodies are buffered at once: with `max_body`, what bodies may take in memory
    /// (docs/webhook.md, "Memory").
    pub max_in_flight: usize,
    /// Of the `max_in_flight` places, how many one client address may hold at once: a client
    /// past it waits for one of its own places, never for another client's, so one address
    /// flooding requests or trickling bodies leaves the other places to the rest.
    pub per_client_in_flight: usize,
    /// How long a request waits for one of the `max_in_flight` places before it is refused with
    /// 429, well within the apiserver's webhook timeout.
    pub queue_timeout: Duration,
    /// Reviews decoded and judged at once, each on a thread of its own off the async runtime, so a
    /// costly review never delays another connection (or `/healthz`). With the cost of decoding
    /// one body, what reviews may take in memory.
    pub review_threads: usize,
    /// Open connections on the port; at it, a newcomer takes the place of the longest-idle
    /// connection of the client holding the most (`clients.rs`).
    pub max_connections: usize,
    /// Open connections of one client address; past it, the client's own longest-idle
    /// connection makes room.
    pub per_client_connections: usize,
    /// After shutdown starts, how long in-flight requests may still take.
    pub drain_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            handshake_timeout: Duration::from_secs(5),
            header_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            max_body: MAX_BODY,
            max_in_flight: 16,
            // A quarter: it takes four addresses to fill the places, as it takes four to fill
            // the port's connections.
            per_client_in_flight: 4,
            queue_timeout: Duration::from_secs(2),
            review_threads: std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8)),
            max_connections: 256,
            per_client_connections: 64,
            drain_timeout: Duration::from_secs(15),
        }
    }
}

impl Limits {
    /// The admin port's: the webhook's timeouts but a short idle one (the kubelet's probes open a
    /// connection each, a scraper comes back every 15 s or more), fewer connections (a kubelet and
    /// a scraper or two), no review pool.
    pub fn admin() -> Limits {
        Limits {
            idle_timeout: Duration::from_secs(10),
            max_connections: 32,
            per_client_connections: 8,
            max_in_flight: 32,
            max_body: 0,
            ..Limits::default()
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct BindError {
    pub addr: SocketAddr,
    pub source: std::io::Error,
}

pub async fn bind(addr: SocketAddr) -> Result<TcpListener, BindError> {
    TcpListener::bind(addr).await.map_err(|source| BindError { addr, source })
}

/// The two moments of a graceful stop, as tokens.
///
/// From `terminating` on, a listener still accepts connections and answers, but every HTTP/1.1
/// answer closes its connection (`Connection: close`): HTTP/1.1 cannot move an idle client on
/// without racing the request it may be writing at that moment (which the client then reports as
/// `server closed idle connection`), so connections are closed right after an answer, when the
/// client knows. From `closing` on, it accepts nothing, and every connection closes once its
/// requests are answered: HTTP/2 with GOAWAY (no race: a client retries what the server did not
/// take), HTTP/1.1 after its answer or at once when idle. `sandcap run` cancels `terminating` on
/// SIGTERM and `closing` after the drain window.
#[derive(Clone, Debug, Default)]
pub struct Stop {
    pub terminating: CancellationToken,
    pub closing: CancellationToken,
}

/// Serves `app` over TLS until `stop` closes it (see [`Stop`]), then lets open requests finish (up
/// to `limits.drain_timeout`). Each connection runs in its own task, so a slow or broken client (a
/// stalled handshake, plain HTTP, half a request) only ever holds up itself.
pub async fn serve_https(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    limits: &Limits,
    stop: Stop,
) {
    serve_connections(listener, Some(TlsAcceptor::from(tls)), app, limits, stop).await;
}

/// What one connection may hold unread in HTTP/2 flow-control windows (hyper's default is 1 MiB
/// a connection): with the connection cap, what idle uploads may take in memory.
const H2_WINDOW: u32 = 256 * 1024;

/// Requests open at once on one HTTP/2 connection (hyper's default is 200): as many as the
/// webhook has places, past which more requests on a connection could only wait. Each waiting
/// stream holds its head and its handler, so this with the connection caps bounds what streams
/// cost (docs/webhook.md, "Memory"). A client past it waits for a stream, or (Go's, the
/// apiserver's) opens another connection.
const H2_STREAMS: u32 = 16;

/// The largest request head, HTTP/2's header list and HTTP/1's head alike (hyper's HTTP/1 read
/// buffer, which a head must fit): the apiserver's heads are under 1 KiB.
const MAX_HEAD: u32 = 16 * 1024;

/// Streams the client may reset before they are served, at once, and streams the server may
/// reset for the client's errors, in the connection's life, before it is closed with GOAWAY
/// (hyper's defaults: 20 and 1,024): each reset costs the server work and the client nothing (the
/// "rapid reset" attacks). An honest client cancels few streams, and is refused some only when it
/// opens more than [`H2_STREAMS`] before it has read the server's settings (Go's client opens up
/// to 100 then).
const H2_PENDING_RESETS: usize = 16;
const H2_ERROR_RESETS: usize = 256;

pub(crate) async fn serve_connections(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Router,
    limits: &Limits,
    stop: Stop,
) {
    let shutdown = stop.closing;
    let app = app
        .layer(DefaultBodyLimit::max(limits.max_body))
        .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, limits.request_timeout));
    let http = http();
    let handshake = if tls.is_some() { limits.handshake_timeout } else { Duration::ZERO };
    let deadlines = Deadlines {
        first_request: handshake + limits.header_timeout,
        header: limits.header_timeout,
        idle: limits.idle_timeout,
    };
    let clients = Clients::new(limits.max_connections, limits.per_client_connections);
    let connections = TaskTracker::new();
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, typically: wait for connections to close.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let activity = Activity::new();
        let ticket = match clients.admit(peer.ip(), activity.clone()) {
            Ok(ticket) => ticket,
            Err(refused) => {
                tracing::debug!(%peer, %refused, "connection refused");
                continue;
            }
        };
        let connection = Connection {
            tls: tls.clone(),
            http: http.clone(),
            app: app.clone(),
            handshake_timeout: limits.handshake_timeout,
            deadlines,
            activity,
            terminating: stop.terminating.clone(),
        };
        connections.spawn(connection.serve(tcp, peer, ticket, shutdown.clone()));
    }
    drain(listener, connections, limits.drain_timeout).await;
}

/// Stops accepting on `listener`, and waits for `connections` to close, at most `timeout`.
async fn drain(listener: TcpListener, connections: TaskTracker, timeout: Duration) {
    if let Ok(addr) = listener.local_addr() {
        let open = connections.len();
        tracing::info!(%addr, open, "no longer accepting; open connections close once their requests are answered");
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(timeout, connections.wait()).await.is_err() {
        tracing::warn!(open = connections.len(), "connections still open after the drain timeout; closing them");
    }
}

/// HTTP/1.1 and HTTP/2 as every connection serves them, within the limits above.
fn http() -> auto::Builder<TokioExecutor> {
    let mut http = auto::Builder::new(TokioExecutor::new());
    // No hyper header timer: it runs between keep-alive requests too, and would close an idle
    // HTTP/1.1 connection after `header_timeout` instead of `idle_timeout` (`activity.rs` times
    // heads from their first byte instead).
    // At most 100 header fields (hyper's default; setting it moves every head to the heap).
    http.http1().timer(TokioTimer::new()).header_read_timeout(None).max_buf_size(MAX_HEAD as usize);
    http.http2()
        .timer(TokioTimer::new())
        .initial_connection_window_size(H2_WINDOW)
        .initial_stream_window_size(H2_WINDOW)
        .max_concurrent_streams(H2_STREAMS)
        .max_header_list_size(MAX_HEAD)
        .max_pending_accept_reset_streams(H2_PENDING_RESETS)
        .max_local_error_reset_streams(H2_ERROR_RESETS);
    http
}

struct Connection {
    tls: Option<TlsAcceptor>,
    http: auto::Builder<TokioExecutor>,
    app: Router,
    handshake_timeout: Duration,
    deadlines: Deadlines,
    activity: Activity,
    terminating: CancellationToken,
}

impl Connection {
    async fn serve(self, tcp: TcpStream, peer: SocketAddr, ticket: Ticket, shutdown: CancellationToken) {
        tokio::select! {
            () = self.serve_tcp(tcp, peer, shutdown) => {}
            () = ticket.evicted() => tracing::debug!(%peer, "closing an idle connection to make room"),
        }
    }

    async fn serve_tcp(self, tcp: TcpStream, peer: SocketAddr, shutdown: CancellationToken) {
        let _ = tcp.set_nodelay(true);
        let Some(acceptor) = self.tls.clone() else {
            return self.serve_io(tcp, peer, shutdown).await;
        };
        match tokio::time::timeout(self.handshake_timeout, acceptor.accept(tcp)).await {
            Ok(Ok(stream)) => {
                if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                    self.activity.speaks_http2();
                }
                self.serve_io(stream, peer, shutdown).await;
            }
            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
        }
    }

    async fn serve_io<S>(self, io: S, peer: SocketAddr, shutdown: CancellationToken)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = self.activity;
        let service = {
            let (activity, app, terminating) = (activity.clone(), self.app, self.terminating);
            tower::service_fn(move |mut request: axum::extract::Request<Incoming>| {
                // Who asks, for the per-client share of the review places.
                request.extensions_mut().insert(ConnectInfo(peer));
                let http2 = request.version() >= Version::HTTP_2;
                let busy = activity.begin(http2);
                let close = terminating.is_cancelled() && !http2;
                let answer = app.clone().oneshot(request);
                async move {
                    let mut answer = answer.await;
                    if let (true, Ok(answer)) = (close, &mut answer) {
                        answer.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                    }
                    drop(busy);
                    answer
                }
            })
        };
        let io = TokioIo::new(activity.watch(io));
        let connection = self.http.serve_connection(io, TowerToHyperService::new(service));
        tokio::pin!(connection);
        let result = tokio::select! {
            result = connection.as_mut() => result,
            () = activity.quiet(self.deadlines) => {
                return tracing::debug!(%peer, "closing a quiet connection");
            }
            () = shutdown.cancelled() => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        if let Err(e) = result {
            tracing::debug!(%peer, error = %e, "connection closed with an error");
        }
    }
}
