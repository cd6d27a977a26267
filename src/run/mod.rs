//! `sandcap run`: its flags, and the wiring of the admin port, the webhook, the controllers and
//! the certificate keeper under the phases of one graceful stop, with signals and the shutdown
//! deadline. The flags that choose the rules (`rules.rs`) are `validate`'s and `resolve`'s too.

mod client;
mod flags;
mod options;
mod rules;
mod signals;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::ArgAction;
use prometheus_client::registry::Registry;

use crate::admin::{Readiness, admin_router, serve_admin};
use crate::certs;
use crate::controller::{self, SecretScope};
use crate::listener::{BindError, Limits, Stop, bind};
use crate::metrics::Metrics;
use crate::telemetry::{LogFormat, init_tracing};
use crate::tls::{CertFiles, CertLoadError, CertSource};
use crate::webhook::{Webhook, serve_webhook};
use client::Clients;
pub use client::client_config;
pub use flags::secret_scope;
use flags::within;
use options::{cert_options, controller_options};
pub use rules::{EndpointArgs, RulesArgs, WorkerPolicyArgs, contract_version};
pub use signals::Signals;

// Defaults that `explain` and `check` share with `sandcap run`, so they find what it uses.
pub const LEADER_ELECTION_NAME: &str = "sandcap-controller";
/// None: a Secret watch, cluster-wide above all, is granted by choice (the chart's values), not
/// by leaving a flag out.
pub const SECRET_NAMESPACES: &str = "";
pub const CERT_SECRET_NAME: &str = "sandcap-webhook-tls";
pub const WEBHOOK_CONFIG_NAME: &str = "sandcap";

/// `sandcap run`. Every flag can also be set by the environment variable shown in `--help`.
/// Durations are written like `10s`, `5m` or `1h 30m`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Address of the HTTPS admission listener (`POST /validate`).
    #[arg(long, env = "SANDCAP_WEBHOOK_ADDR", default_value = "0.0.0.0:8443")]
    pub webhook_addr: SocketAddr,
    /// Address of the plain-HTTP admin listener: /healthz, /readyz, /metrics.
    #[arg(long, env = "SANDCAP_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    pub admin_addr: SocketAddr,
    /// PEM certificate chain (leaf first) for the webhook; polled and reloaded when it changes. A
    /// pair outside its validity period, or one no longer valid for <svc>.<ns>.svc (see
    /// --service-name) while the served certificate is, is refused: the served one stays.
    #[arg(long, env = "SANDCAP_TLS_CERT", requires = "tls_key", conflicts_with = "tls_self_signed")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key matching --tls-cert.
    #[arg(long, env = "SANDCAP_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve an in-memory self-signed certificate for localhost and 127.0.0.1 (local use).
    #[arg(long, env = "SANDCAP_TLS_SELF_SIGNED")]
    pub tls_self_signed: bool,
    /// How often the certificate files are polled for changes.
    #[arg(long, env = "SANDCAP_TLS_RELOAD_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub tls_reload_interval: Duration,
    /// Run only the admission webhook (no cluster access needed).
    #[arg(long, env = "SANDCAP_WEBHOOK_ONLY", conflicts_with = "controllers_only")]
    pub webhook_only: bool,
    /// Run only the controllers.
    #[arg(long, env = "SANDCAP_CONTROLLERS_ONLY")]
    pub controllers_only: bool,
    #[command(flatten)]
    pub rules: RulesArgs,
    /// How often every provider's worker is probed again, from 1s to 24h.
    #[arg(long, env = "SANDCAP_PROBE_INTERVAL", default_value = "5m", value_parser = within(SECOND, DAY))]
    pub probe_interval: Duration,
    /// Timeout of one worker probe, from 1s to 1m (a hung worker keeps its last answer that long).
    #[arg(long, env = "SANDCAP_PROBE_TIMEOUT", default_value = "5s", value_parser = within(SECOND, MINUTE))]
    pub probe_timeout: Duration,
    #[command(flatten)]
    pub endpoints: EndpointArgs,
    /// How long the controllers wait for their caches' first lists (the CRDs may not be installed
    /// yet, RBAC may be missing). Past it they stop, and the leader steps down and tries again
    /// after a backoff (1 s, doubling to 30 s). From 1s to 1h.
    #[arg(long, env = "SANDCAP_CACHE_SYNC_TIMEOUT", default_value = "2m", value_parser = within(SECOND, HOUR))]
    pub cache_sync_timeout: Duration,
    /// Turn the workloads that providers' `spec.workloads` bind into observed SandboxLeases
    /// (`--observe-workloads=false` to turn off; the chart's `workloads.enabled`).
    #[arg(
        long,
        env = "SANDCAP_OBSERVE_WORKLOADS",
        default_value_t = true,
        num_args = 0..=1,
        default_missing_value = "true",
        require_equals = true,
        action = ArgAction::Set
    )]
    pub observe_workloads: bool,
    /// How often the apiserver's discovery is asked which workload kinds it serves (agent-sandbox
    /// installed or not), from 1s to 1h.
    #[arg(long, env = "SANDCAP_DISCOVERY_INTERVAL", default_value = "1m", value_parser = within(SECOND, HOUR))]
    pub discovery_interval: Duration,
    /// Elect one controller leader through a coordination.k8s.io Lease (`--leader-elect=false` to
    /// turn off).
    #[arg(
        long,
        env = "SANDCAP_LEADER_ELECT",
        default_value_t = true,
        num_args = 0..=1,
        default_missing_value = "true",
        require_equals = true,
        action = ArgAction::Set
    )]
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease [default: --pod-namespace].
    #[arg(long, env = "SANDCAP_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(long, env = "SANDCAP_LEADER_ELECTION_NAME", default_value = LEADER_ELECTION_NAME)]
    pub leader_election_name: String,
    /// The namespace sandcap runs in (set from the downward API).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub pod_namespace: String,
    /// This replica's identity for leader election [default: the hostname].
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// After SIGTERM or SIGINT, how long the shutdown may take, drain window included, before the
    /// process exits non-zero without waiting further (a second signal exits at once).
    #[arg(long, env = "SANDCAP_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub shutdown_timeout: Duration,
    /// After SIGTERM, how long the webhook, no longer ready, keeps accepting connections and
    /// answering reviews before it closes them: the time a pod's removal from its Service takes to
    /// reach every client (the apiserver keeps calling a terminating pod until then). SIGINT
    /// (Ctrl-C) skips it. Shorter than --shutdown-timeout.
    #[arg(long, env = "SANDCAP_SHUTDOWN_DRAIN_WINDOW", default_value = "10s", value_parser = humantime::parse_duration)]
    pub shutdown_drain_window: Duration,
    /// Log format.
    #[arg(long, env = "SANDCAP_LOG_FORMAT", value_enum, default_value_t)]
    pub log_format: LogFormat,
    /// Namespaces whose Secrets leases may read for configFrom, comma-separated; `*` means every
    /// namespace, an empty value none, and then no Secret is watched (give the operator RBAC to
    /// match).
    #[arg(long, env = "SANDCAP_SECRET_NAMESPACES", default_value = SECRET_NAMESPACES, value_parser = secret_scope)]
    pub secret_namespaces: SecretScope,
    /// Keep a CA and serving certificate in a Secret and the webhook configuration's caBundle in
    /// sync with it.
    #[arg(long, env = "SANDCAP_SELF_MANAGED_CERTS")]
    pub self_managed_certs: bool,
    /// The Secret (in --pod-namespace) holding ca.crt, tls.crt and tls.key.
    #[arg(long, env = "SANDCAP_CERT_SECRET_NAME", default_value = CERT_SECRET_NAME)]
    pub cert_secret_name: String,
    /// The ValidatingWebhookConfiguration whose caBundle is kept in sync.
    #[arg(long, env = "SANDCAP_WEBHOOK_CONFIG_NAME", default_value = WEBHOOK_CONFIG_NAME)]
    pub webhook_config_name: String,
    /// The webhook Service: the serving certificate names <svc>, <svc>.<ns> and <svc>.<ns>.svc; the
    /// apiserver calls the webhook by the last.
    #[arg(long, env = "SANDCAP_SERVICE_NAME", default_value = "sandcap-webhook")]
    pub service_name: String,
    /// Once the ports are bound, write their addresses to FILE, a line each: `webhook ADDR` (unless
    /// --controllers-only), then `admin ADDR`. The file appears whole. With port 0 in
    /// --webhook-addr or --admin-addr the system picks a free port: this says which.
    #[arg(long, env = "SANDCAP_LISTEN_REPORT", value_name = "FILE")]
    pub listen_report: Option<PathBuf>,
}

impl RunArgs {
    pub fn leader_election_namespace(&self) -> &str {
        self.leader_election_namespace.as_deref().unwrap_or(&self.pod_namespace)
    }

    /// The drain window that applies: none without a webhook, which has no clients to wait for.
    pub fn drain_window(&self) -> Duration {
        if self.controllers_only { Duration::ZERO } else { self.shutdown_drain_window }
    }

    /// The leader-election identity: --pod-name, else the hostname.
    pub fn identity(&self) -> String {
        self.pod_name.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "sandcap".to_string())
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("give --tls-cert and --tls-key, or --tls-self-signed")]
    NoCertificate,
    #[error(transparent)]
    Certificate(#[from] CertLoadError),
    #[error("no Kubernetes client configuration (in-cluster or kubeconfig): {0}")]
    Kube(kube::Error),
    #[error("controllers: {0}")]
    Controller(Box<crate::controller::Error>),
    #[error(
        "--shutdown-drain-window ({}) must be shorter than --shutdown-timeout ({}), which counts from the \
         signal and covers the drain window and then the reviews in flight",
        humantime::format_duration(*.window),
        humantime::format_duration(*.timeout)
    )]
    DrainWindowPastTimeout { window: Duration, timeout: Duration },
    #[error("shutdown did not finish within {}; exiting without waiting further", humantime::format_duration(*.0))]
    ShutdownTimeout(Duration),
    #[error("{0} received again during shutdown; exiting at once")]
    SignalAgain(&'static str),
    #[error("cannot write --listen-report {}: {source}", .path.display())]
    ListenReport { path: PathBuf, source: std::io::Error },
}

/// Runs `sandcap run` until SIGTERM or SIGINT: the admin port always; the webhook unless
/// `--controllers-only`; the controllers (behind leader election) unless `--webhook-only`; and with
/// `--self-managed-certs`, the certificate keeper on every replica (the webhook's readiness waits
/// for the certificate it writes, so it must not wait for readiness itself).
///
/// On SIGTERM it stops in the phases of [`Stop`]: not ready and the controllers handed over at
/// once, the webhook still answering through the drain window, then closing. A shutdown that
/// outlives `--shutdown-timeout`, or a second signal, ends it with an error at once, whatever is
/// still running: the caller must not wait for the runtime's tasks either.
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    init_tracing(args.log_format);
    let (window, timeout) = (args.drain_window(), args.shutdown_timeout);
    if window >= timeout {
        return Err(RunError::DrainWindowPastTimeout { window, timeout });
    }
    let stop = Stop::default();
    // Its own task, so that it fires even while the tasks it cuts short do not yield.
    let mut forced = tokio::spawn(watch_signals(stop.clone(), window, timeout));
    tokio::select! {
        result = serve(&args, stop) => result,
        Ok(forced) = &mut forced => {
            tracing::error!(error = %forced, "shutdown cut short");
            Err(forced)
        }
    }
}

async fn serve(args: &RunArgs, stop: Stop) -> Result<(), RunError> {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let readiness = if args.controllers_only { Readiness::without_webhook() } else { Readiness::default() };
    let readiness = readiness.until(stop.terminating.clone());

    let admin = bind(args.admin_addr).await?;
    let webhook_listener = if args.controllers_only { None } else { Some(bind(args.webhook_addr).await?) };
    if let Some(path) = &args.listen_report {
        write_listen_report(path, webhook_listener.as_ref(), &admin)
            .map_err(|source| RunError::ListenReport { path: path.clone(), source })?;
    }
    let admin = serve_admin(admin, admin_router(Arc::new(registry), readiness.clone()), Limits::admin(), stop.clone());
    let admin = async {
        admin.await;
        Ok(())
    };
    let needs_cluster = !args.webhook_only || args.self_managed_certs;
    let clients = if needs_cluster { Some(Clients::infer(&metrics).await.map_err(RunError::Kube)?) } else { None };

    let controllers = async {
        match (&clients, args.webhook_only) {
            (Some(clients), false) => {
                // They serve no client, so there is nothing to drain: they stop at the first
                // signal, and the leader releases its Lease at once, so that a standby takes over
                // without waiting for the webhook's drain window.
                let (client, election) = (clients.controllers.clone(), clients.election.clone());
                controller::run(client, election, controller_options(args), metrics.clone(), stop.terminating.clone())
                    .await
                    .map_err(|e| RunError::Controller(Box::new(e)))
            }
            _ => Ok(()),
        }
    };
    let certificates = async {
        if let (Some(clients), true) = (&clients, args.self_managed_certs) {
            certs::run_self_managed(clients.api.clone(), cert_options(args), stop.terminating.clone()).await;
        }
        Ok(())
    };
    let webhook = async {
        let Some(listener) = webhook_listener else {
            return Ok(());
        };
        let webhook = Webhook {
            listener,
            certificate: cert_source(args)?,
            options: args.rules.options(),
            limits: Limits::default(),
        };
        Ok(serve_webhook(webhook, metrics.clone(), readiness, stop.clone()).await?)
    };
    tokio::try_join!(admin, webhook, controllers, certificates)?;
    tracing::info!("stopped");
    Ok(())
}

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// Written to a sibling file and renamed into place, so that a reader polling for `path` never
/// sees half of it.
fn write_listen_report(
    path: &std::path::Path,
    webhook: Option<&tokio::net::TcpListener>,
    admin: &tokio::net::TcpListener,
) -> std::io::Result<()> {
    let mut report = String::new();
    for (name, listener) in [("webhook", webhook), ("admin", Some(admin))] {
        if let Some(listener) = listener {
            report.push_str(&format!("{name} {}\n", listener.local_addr()?));
        }
    }
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    std::fs::write(&partial, report)?;
    std::fs::rename(&partial, path)
}

fn cert_source(args: &RunArgs) -> Result<CertSource, RunError> {
    match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Ok(CertSource::Files(CertFiles {
            cert: cert.clone(),
            key: key.clone(),
            interval: args.tls_reload_interval,
            called_by: vec![certs::service_host(&args.service_name, &args.pod_namespace)],
        })),
        _ if args.tls_self_signed => Ok(CertSource::SelfSigned),
        _ => Err(RunError::NoCertificate),
    }
}

/// Cancels `stop.terminating` on the first SIGTERM or SIGINT, and `stop.closing` after
/// `drain_window` (SIGTERM) or at once (SIGINT: a person at a terminal, with nothing routing
/// traffic to the process); then returns why the shutdown must be cut short: a second signal, or
/// `deadline` (counted from the first signal) passed. Never returns while neither happens.
pub async fn watch_signals(stop: Stop, drain_window: Duration, deadline: Duration) -> RunError {
    let Ok(mut signals) = Signals::install() else {
        tracing::error!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    let name = signals.next().await;
    let deadline_at = tokio::time::Instant::now() + deadline;
    let window = if name == "SIGTERM" { drain_window } else { Duration::ZERO };
    stop.terminating.cancel();
    if !window.is_zero() {
        tracing::info!(
            signal = name,
            drain_window = %humantime::format_duration(window),
            deadline = %humantime::format_duration(deadline),
            "shutting down: not ready, the controllers hand the leader lease over; admission reviews are \
             still answered for the drain window, while the pod's removal from the Service spreads; a second \
             signal exits at once"
        );
        tokio::select! {
            name = signals.next() => return RunError::SignalAgain(name),
            () = tokio::time::sleep(window) => {}
        }
        tracing::info!("drain window over: no new connections; open ones close once their reviews are answered");
    } else {
        tracing::info!(
            signal = name,
            deadline = %humantime::format_duration(deadline),
            "shutting down: no new connections, finishing in-flight work; a second signal exits at once"
        );
    }
    stop.closing.cancel();
    tokio::select! {
        name = signals.next() => RunError::SignalAgain(name),
        () = tokio::time::sleep_until(deadline_at) => RunError::ShutdownTimeout(deadline),
    }
}
