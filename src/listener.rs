//! The connection loop both ports share: accept under a cap, TLS or not, HTTP/1 and HTTP/2 with
//! timeouts on every phase, and a drain on shutdown. What is served is the caller's [`Router`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, StatusCode, Version, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use tower_http::timeout::TimeoutLayer;

/// The apiserver's own limit on a request body.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// How long and how much one client may take. The defaults stay under the apiserver's webhook
/// timeout (10 s by default), after which nobody is waiting for the answer anyway.
#[derive(Clone, Debug)]
pub struct Limits {
    pub handshake_timeout: Duration,
    /// Time to receive a request's headers (HTTP/1); a slow client is cut off after it.
    pub header_timeout: Duration,
    /// Time to read the body and answer; past it the client gets 408.
    pub request_timeout: Duration,
    /// A connection that has sent nothing for this long is closed. Longer than the apiserver's
    /// own idle timeout for pooled connections (90 s), so that the server never closes a
    /// connection just as the client reuses it. Before its first request a connection gets only
    /// `header_timeout`.
    pub idle_timeout: Duration,
    pub max_body: usize,
    /// Requests whose bodies are buffered at once: with `max_body`, what bodies may take in memory
    /// (docs/webhook.md, "Memory").
    pub max_in_flight: usize,
    /// How long a request waits for one of the `max_in_flight` places before it is refused with
    /// 429, well within the apiserver's webhook timeout.
    pub queue_timeout: Duration,
    /// Reviews decoded and judged at once, each on a thread of its own off the async runtime, so a
    /// costly review never delays another connection (or `/healthz`). With the cost of decoding
    /// one body, what reviews may take in memory.
    pub review_threads: usize,
    /// Open connections; past it, new connections wait in the listen backlog.
    pub max_connections: usize,
    /// After shutdown starts, how long in-flight requests may still take.
    pub drain_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            handshake_timeout: Duration::from_secs(5),
            header_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            max_body: MAX_BODY,
            max_in_flight: 16,
            queue_timeout: Duration::from_secs(2),
            review_threads: std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8)),
            max_connections: 256,
            drain_timeout: Duration::from_secs(15),
        }
    }
}

impl Limits {
    /// The admin port's: the webhook's timeouts, fewer connections (a kubelet and a scraper or
    /// two), no review pool.
    pub fn admin() -> Limits {
        Limits { max_connections: 32, max_in_flight: 32, max_body: 0, ..Limits::default() }
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
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).max_buf_size(64 * 1024);
    http.http2()
        .timer(TokioTimer::new())
        .initial_connection_window_size(H2_WINDOW)
        .initial_stream_window_size(H2_WINDOW);
    let places = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    loop {
        // A place first: past the cap, connections wait in the kernel's listen backlog and cost
        // this process nothing.
        let place = tokio::select! {
            place = places.clone().acquire_owned() => match place {
                Ok(place) => place,
                Err(_) => break,
            },
            () = shutdown.cancelled() => break,
        };
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
        let connection = Connection {
            tls: tls.clone(),
            http: http.clone(),
            app: app.clone(),
            handshake_timeout: limits.handshake_timeout,
            first_request_timeout: limits.header_timeout,
            idle_timeout: limits.idle_timeout,
            terminating: stop.terminating.clone(),
        };
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            connection.serve(tcp, peer, shutdown).await;
            drop(place);
        });
    }
    if let Ok(addr) = listener.local_addr() {
        let open = connections.len();
        tracing::info!(%addr, open, "no longer accepting; open connections close once their requests are answered");
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(limits.drain_timeout, connections.wait()).await.is_err() {
        tracing::warn!(open = connections.len(), "connections still open after the drain timeout; closing them");
    }
}

struct Connection {
    tls: Option<TlsAcceptor>,
    http: auto::Builder<TokioExecutor>,
    app: Router,
    handshake_timeout: Duration,
    first_request_timeout: Duration,
    idle_timeout: Duration,
    terminating: CancellationToken,
}

impl Connection {
    async fn serve(self, tcp: TcpStream, peer: SocketAddr, shutdown: CancellationToken) {
        let _ = tcp.set_nodelay(true);
        let Some(acceptor) = self.tls.clone() else {
            return self.serve_io(tcp, peer, shutdown).await;
        };
        match tokio::time::timeout(self.handshake_timeout, acceptor.accept(tcp)).await {
            Ok(Ok(stream)) => self.serve_io(stream, peer, shutdown).await,
            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
        }
    }

    async fn serve_io<S>(self, io: S, peer: SocketAddr, shutdown: CancellationToken)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Activity::new();
        let service = {
            let (activity, app, terminating) = (activity.clone(), self.app, self.terminating);
            tower::service_fn(move |request: axum::extract::Request<Incoming>| {
                let busy = activity.begin();
                let close = terminating.is_cancelled() && request.version() < Version::HTTP_2;
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
        let connection = self.http.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
        tokio::pin!(connection);
        let result = tokio::select! {
            result = connection.as_mut() => result,
            () = activity.quiet(self.first_request_timeout, self.idle_timeout) => {
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

/// The requests of one connection: how many are open and when the last one ended. A connection
/// is idle when no request is open, whatever bytes it sends: HTTP/2 pings, window updates or a
/// trickle of headers keep none alive.
#[derive(Clone)]
struct Activity {
    origin: Instant,
    open: Arc<AtomicUsize>,
    /// Milliseconds after `origin` at which the last request ended, plus one; 0 before any.
    ended: Arc<AtomicU64>,
}

/// An open request of an [`Activity`]; it ends when dropped (answered, or its connection gone).
struct Busy(Activity);

impl Drop for Busy {
    fn drop(&mut self) {
        let millis = u64::try_from(self.0.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.ended.store(millis.saturating_add(1), Ordering::Relaxed);
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Activity {
    fn new() -> Activity {
        Activity { origin: Instant::now(), open: Arc::default(), ended: Arc::default() }
    }

    fn begin(&self) -> Busy {
        self.open.fetch_add(1, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// Returns once no request was open for `first` (before any request) or `idle` (after one).
    async fn quiet(&self, first: Duration, idle: Duration) {
        loop {
            let deadline = match (self.open.load(Ordering::Relaxed), self.ended.load(Ordering::Relaxed)) {
                // A request is bounded by the request timeout; look again after it.
                (open, _) if open > 0 => Instant::now() + idle,
                (_, 0) => self.origin + first,
                (_, ended) => self.origin + Duration::from_millis(ended - 1) + idle,
            };
            if Instant::now() >= deadline && self.open.load(Ordering::Relaxed) == 0 {
                return;
            }
            tokio::time::sleep_until(deadline.into()).await;
        }
    }
}
