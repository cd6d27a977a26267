//! The I/O shell of `sandcap run`: the HTTPS admission listener, the plain-HTTP admin listener,
//! logging, signals and graceful shutdown. Everything here is transport; the answers come from
//! [`admission::handle`].
//!
//! [`run`] wires the pieces from the command line. The pieces are public so that other long-lived
//! tasks (the controllers) can share the same [`Metrics`], [`Readiness`] and shutdown token, and so
//! that tests and the benchmark's trivial server run exactly this stack.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use tower_http::timeout::TimeoutLayer;

use crate::admission::{self, Answer, Decision};
use crate::certs::{self, CertOptions};
use crate::cli::{LogFormat, RunArgs};
use crate::controller::{self, ControllerOptions};
use crate::metrics::{self, AdmissionLabels, ApiLabels, KindLabels, Metrics};
use crate::text;
use crate::tls::{self, CertLoadError, CertResolver, CertSource};
use crate::validation::Options;

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
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("give --tls-cert and --tls-key, or --tls-self-signed")]
    NoCertificate,
    #[error(transparent)]
    Certificate(#[from] CertLoadError),
    #[error("admin listener: {0}")]
    Admin(std::io::Error),
    #[error("no Kubernetes client configuration (in-cluster or kubeconfig): {0}")]
    Kube(kube::Error),
    #[error("controllers: {0}")]
    Controller(Box<crate::controller::Error>),
    #[error("shutdown did not finish within {}; exiting without waiting further", humantime::format_duration(*.0))]
    ShutdownTimeout(Duration),
    #[error("{0} received again during shutdown; exiting at once")]
    SignalAgain(&'static str),
}

/// `/readyz`: ready once the webhook listener is bound and its resolver has a certificate.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    webhook: Arc<OnceLock<Arc<CertResolver>>>,
    no_webhook: bool,
}

impl Readiness {
    /// For `--controllers-only`: there is no listener to wait for.
    pub fn without_webhook() -> Readiness {
        Readiness { webhook: Arc::default(), no_webhook: true }
    }

    pub fn is_ready(&self) -> bool {
        self.no_webhook || self.webhook.get().is_some_and(|resolver| resolver.has_cert())
    }
}

/// Runs `sandcap run` until SIGTERM or SIGINT: the admin port always; the webhook unless
/// `--controllers-only`; the controllers (behind leader election) unless `--webhook-only`; and with
/// `--self-managed-certs`, the certificate keeper on every replica (the webhook's readiness waits
/// for the certificate it writes, so it must not wait for readiness itself).
///
/// A shutdown that outlives `--shutdown-timeout`, or a second signal, ends it with an error at
/// once, whatever is still running: the caller must not wait for the runtime's tasks either.
pub async fn run(args: RunArgs) -> Result<(), ServerError> {
    init_tracing(args.log_format);
    let shutdown = CancellationToken::new();
    // Its own task, so that it fires even while the tasks it cuts short do not yield.
    let mut forced = tokio::spawn(watch_signals(shutdown.clone(), args.shutdown_timeout));
    tokio::select! {
        result = serve(&args, shutdown) => result,
        Ok(forced) = &mut forced => {
            tracing::error!(error = %forced, "shutdown cut short");
            Err(forced)
        }
    }
}

async fn serve(args: &RunArgs, shutdown: CancellationToken) -> Result<(), ServerError> {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let readiness = if args.controllers_only { Readiness::without_webhook() } else { Readiness::default() };

    let admin = bind(args.admin_addr).await?;
    let admin =
        serve_admin(admin, admin_router(Arc::new(registry), readiness.clone()), Limits::admin(), shutdown.clone());
    let needs_cluster = !args.webhook_only || args.self_managed_certs;
    let client = if needs_cluster { Some(kube_client(&metrics).await.map_err(ServerError::Kube)?) } else { None };

    let controllers = async {
        match (&client, args.webhook_only) {
            (Some(client), false) => {
                let options = ControllerOptions {
                    probe_interval: args.probe_interval,
                    probe_timeout: args.probe_timeout,
                    allow_worker_urls: args.allow_worker_urls,
                    worker_url_allowed_cidrs: args.worker_url_allowed_cidrs(),
                    leader_elect: args.leader_elect,
                    lease_name: args.leader_election_name.clone(),
                    lease_namespace: args.leader_election_namespace().to_string(),
                    identity: args.identity(),
                    secret_namespaces: args.secret_namespaces.clone(),
                };
                controller::run(client.clone(), options, metrics.clone(), shutdown.clone())
                    .await
                    .map_err(|e| ServerError::Controller(Box::new(e)))
            }
            _ => Ok(()),
        }
    };
    let certificates = async {
        if let (Some(client), true) = (&client, args.self_managed_certs) {
            let options = CertOptions {
                secret_name: args.cert_secret_name.clone(),
                namespace: args.pod_namespace.clone(),
                service_name: args.service_name.clone(),
                webhook_config_name: args.webhook_config_name.clone(),
                check_interval: CERT_CHECK_INTERVAL,
            };
            certs::run_self_managed(client.clone(), options, shutdown.clone()).await;
        }
        Ok(())
    };
    let webhook = async {
        if args.controllers_only {
            return Ok(());
        }
        let webhook = Webhook {
            listener: bind(args.webhook_addr).await?,
            certificate: cert_source(args)?,
            options: Options {
                allow_worker_urls: args.allow_worker_urls,
                worker_url_allowed_cidrs: args.worker_url_allowed_cidrs(),
            },
            limits: Limits::default(),
        };
        serve_webhook(webhook, metrics.clone(), readiness, shutdown.clone()).await
    };
    tokio::try_join!(admin, webhook, controllers, certificates)?;
    tracing::info!("stopped");
    Ok(())
}

/// The client of every controller and of the certificate keeper: each request it makes is counted
/// in `sandcap_api_requests_total`, so the cost of the controllers is visible.
async fn kube_client(metrics: &Metrics) -> Result<kube::Client, kube::Error> {
    let config = kube::Config::infer().await.map_err(kube::Error::InferConfig)?;
    let requests = metrics.api_requests.clone();
    let count = tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
        requests.get_or_create(&ApiLabels::of(request.method(), request.uri())).inc();
        request
    });
    Ok(kube::client::ClientBuilder::try_from(client_config(config))?.with_layer(&count).build())
}

/// Names sandcap in the User-Agent of every request. A write that names no field manager is
/// recorded under the User-Agent up to its first `/`, and kube sends none (the apiserver then
/// says `unknown`); kube's event Recorder names no field manager and cannot be told one.
pub fn client_config(mut config: kube::Config) -> kube::Config {
    let agent = concat!("sandcap/", env!("CARGO_PKG_VERSION"));
    config.headers.push((header::USER_AGENT, header::HeaderValue::from_static(agent)));
    config
}

/// Two GETs per replica per check; renewal starts months before expiry, so a minute is plenty.
const CERT_CHECK_INTERVAL: Duration = Duration::from_secs(60);

fn cert_source(args: &RunArgs) -> Result<CertSource, ServerError> {
    match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            Ok(CertSource::Files { cert: cert.clone(), key: key.clone(), interval: args.tls_reload_interval })
        }
        _ if args.tls_self_signed => Ok(CertSource::SelfSigned),
        _ => Err(ServerError::NoCertificate),
    }
}

pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr).await.map_err(|source| ServerError::Bind { addr, source })
}

/// Logs to stdout, filtered by `RUST_LOG` (default `info`). A second call keeps the first setup.
fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    // tracing-subscriber reports a failed write with eprintln!, which panics when stderr is the
    // same closed pipe, and a panic in the signal task would leave shutdown waiting forever.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(|| LossyStdout)
        .log_internal_errors(false);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).try_init(),
    };
}

/// Standard output for logs, where a line that cannot be written (EPIPE once the reader of a pipe
/// is gone, a full disk) is dropped: losing log lines is better than failing what was logged.
struct LossyStdout;

impl std::io::Write for LossyStdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::Write::flush(&mut std::io::stdout().lock());
        Ok(())
    }
}

/// Cancels `shutdown` on the first SIGTERM or SIGINT; then returns why the shutdown must be cut
/// short: a second signal, or `deadline` passed. Never returns while neither happens.
pub async fn watch_signals(shutdown: CancellationToken, deadline: Duration) -> ServerError {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    let mut next = async || {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    };
    let name = next().await;
    tracing::info!(
        signal = name,
        deadline = %humantime::format_duration(deadline),
        "shutting down: no new connections, finishing in-flight work; a second signal exits at once"
    );
    shutdown.cancel();
    tokio::select! {
        name = next() => ServerError::SignalAgain(name),
        () = tokio::time::sleep(deadline) => ServerError::ShutdownTimeout(deadline),
    }
}

/// The admission listener's configuration.
pub struct Webhook {
    pub listener: TcpListener,
    pub certificate: CertSource,
    pub options: Options,
    pub limits: Limits,
}

/// Serves admission reviews over HTTPS until `shutdown`, keeping the certificate current meanwhile.
/// Marks `readiness` once listening (it turns ready when the first certificate loads).
pub async fn serve_webhook(
    webhook: Webhook,
    metrics: Metrics,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    let resolver = Arc::new(CertResolver::default());
    let watcher = match webhook.certificate {
        CertSource::SelfSigned => {
            resolver.install(&tls::self_signed()?, &metrics);
            tracing::info!("serving a self-signed certificate for localhost and 127.0.0.1");
            None
        }
        CertSource::Files { cert, key, interval } => {
            let watch = tls::watch_files(cert, key, interval, resolver.clone(), metrics.clone(), shutdown.clone());
            Some(tokio::spawn(watch))
        }
    };
    let _ = readiness.webhook.set(resolver.clone());
    if let Ok(addr) = webhook.listener.local_addr() {
        tracing::info!(%addr, "admission webhook listening (POST /validate)");
    }
    let app = webhook_router(webhook.options, metrics, &webhook.limits);
    serve_https(webhook.listener, tls::server_config(resolver), app, &webhook.limits, shutdown).await;
    if let Some(watcher) = watcher {
        // It ends with the same shutdown token.
        let _ = watcher.await;
    }
    Ok(())
}

struct WebhookState {
    options: Options,
    metrics: Metrics,
    /// One place per buffered body ([`Limits::max_in_flight`]).
    in_flight: Arc<Semaphore>,
    queue_timeout: Duration,
    /// One place per review being decoded and judged ([`Limits::review_threads`]).
    reviews: Arc<Semaphore>,
}

/// `POST /validate`; other paths are 404 and other methods 405.
fn webhook_router(options: Options, metrics: Metrics, limits: &Limits) -> Router {
    let state = WebhookState {
        options,
        metrics,
        in_flight: Arc::new(Semaphore::new(limits.max_in_flight)),
        queue_timeout: limits.queue_timeout,
        reviews: Arc::new(Semaphore::new(limits.review_threads)),
    };
    Router::new().route("/validate", post(validate)).with_state(Arc::new(state))
}

/// Takes a place before reading the body, so that waiting requests hold no body in memory, then
/// reviews on a blocking thread. Past the request timeout the client gets 408 and the review
/// still finishes on its thread, holding its places: its cost is bounded by the review's own
/// budgets (the body limit, [`crate::config_schema::BUDGET`]), not by the timeout.
async fn validate(State(state): State<Arc<WebhookState>>, request: Request) -> Response {
    let started = Instant::now();
    let invalid = || admission::Summary { verdict: Some(Decision::Invalid), ..Default::default() };
    let Ok(Ok(place)) = tokio::time::timeout(state.queue_timeout, state.in_flight.clone().acquire_owned()).await else {
        let outcome = admission::Summary { verdict: Some(Decision::Overloaded), ..Default::default() };
        count(&state.metrics, &outcome, started);
        tracing::warn!(
            in_flight = state.in_flight.available_permits(),
            "refused an admission review: too many in flight"
        );
        let message = "too many admission reviews in flight; retry shortly\n";
        return (StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, "1")], message).into_response();
    };
    let body = match Bytes::from_request(request, &()).await {
        Ok(body) => body,
        // Too large (413) or cut off: a client error, answered by axum's own rejection.
        Err(rejection) => {
            let status = rejection.status();
            tracing::info_span!("review").in_scope(|| tracing::info!(%status, "unreadable request body"));
            count(&state.metrics, &invalid(), started);
            return rejection.into_response();
        }
    };
    let Ok(thread) = state.reviews.clone().acquire_owned().await else {
        // Only a closed semaphore fails, and nothing closes it.
        count(&state.metrics, &invalid(), started);
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let options = state.options.clone();
    let review = tokio::task::spawn_blocking(move || {
        let _places = (place, thread);
        admission::handle(&body, &options)
    });
    let Ok(Answer { status, body, outcome }) = review.await else {
        // handle() does not panic (the fuzz target holds it to that); if it ever did, the client
        // still gets an answer and the process keeps serving.
        count(&state.metrics, &invalid(), started);
        tracing::error!("an admission review panicked");
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    log(&outcome);
    count(&state.metrics, &outcome, started);
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Allowed reviews are logged at debug level only. The span is built after the review and only
/// when its event is enabled, so at the default level an allowed review costs no span (its
/// registration and formatted fields) for a line that is never written.
///
/// The object's name is `object`, not `name`: the JSON format writes the span's own name under
/// `span.name`, and a reader keeps only one of two equal keys.
fn log(outcome: &admission::Summary) {
    let allowed = outcome.allowed();
    if allowed && !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let namespace = (!outcome.namespace.is_empty()).then_some(outcome.namespace.as_str());
    let span = tracing::info_span!(
        "review",
        uid = outcome.uid.as_str(),
        kind = outcome.kind_label(),
        object = outcome.name.as_str(),
        namespace,
        operation = outcome.operation_label(),
        dry_run = outcome.dry_run,
        allowed,
    );
    // The answer carried the whole message; a log line carries its count and its start, quoted
    // (control characters escaped), so a client cannot flood the log or forge lines in it.
    let reason = text::prefix(&outcome.message, LOGGED_REASON);
    span.in_scope(|| match outcome.verdict {
        Some(Decision::Allowed) => tracing::debug!("allowed"),
        Some(Decision::Denied) => tracing::info!(problems = outcome.problems, reason, "denied"),
        _ => tracing::info!(reason, "invalid admission review"),
    });
}

/// How much of a denial message a log line shows.
const LOGGED_REASON: usize = 256;

fn count(metrics: &Metrics, outcome: &admission::Summary, started: Instant) {
    let kind = outcome.kind_label();
    let verdict = outcome.verdict.unwrap_or(Decision::Invalid).as_str();
    metrics
        .admission_requests
        .get_or_create(&AdmissionLabels { kind, operation: outcome.operation_label(), verdict })
        .inc();
    metrics.admission_duration.get_or_create(&KindLabels { kind }).observe(started.elapsed().as_secs_f64());
}

/// Serves `app` over TLS until `shutdown`, then lets open requests finish (up to
/// `limits.drain_timeout`). Each connection runs in its own task, so a slow or broken client
/// (a stalled handshake, plain HTTP, half a request) only ever holds up itself.
pub async fn serve_https(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    limits: &Limits,
    shutdown: CancellationToken,
) {
    serve_connections(listener, Some(TlsAcceptor::from(tls)), app, limits, shutdown).await;
}

/// Serves the admin port over plain HTTP until `shutdown`, with the same timeouts and caps as
/// the webhook port ([`Limits::admin`] in `sandcap run`).
pub async fn serve_admin(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "admin listening (/healthz, /readyz, /metrics)");
    }
    serve_connections(listener, None, app, &limits, shutdown).await;
    Ok(())
}

/// What one connection may hold unread in HTTP/2 flow-control windows (hyper's default is 1 MiB
/// a connection): with the connection cap, what idle uploads may take in memory.
const H2_WINDOW: u32 = 256 * 1024;

async fn serve_connections(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Router,
    limits: &Limits,
    shutdown: CancellationToken,
) {
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
        };
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            connection.serve(tcp, peer, shutdown).await;
            drop(place);
        });
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
            let (activity, app) = (activity.clone(), self.app);
            tower::service_fn(move |request: axum::extract::Request<Incoming>| {
                let busy = activity.begin();
                let answer = app.clone().oneshot(request);
                async move {
                    let answer = answer.await;
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

/// `/healthz` (alive), `/readyz` (see [`Readiness`]) and `/metrics` (Prometheus text).
pub fn admin_router(registry: Arc<Registry>, readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || async move {
                if readiness.is_ready() {
                    (StatusCode::OK, "ready\n")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready: the webhook has no certificate loaded yet\n")
                }
            }),
        )
        .route(
            "/metrics",
            get(move || async move {
                let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
                ([(header::CONTENT_TYPE, content_type)], metrics::encode(&registry))
            }),
        )
}
