//! `sandcap bridge`: serves sandcap's probe for a worker built on the host's plugin SDK
//! (docs/provider-authors.md, "Running an SDK worker behind sandcap bridge").
//!
//! An SDK worker speaks JSON-RPC on its stdin and stdout to the host that started it, and accepts
//! `initialize` once per process; sandcap probes over HTTP. The bridge starts the worker as the
//! host does ([`package`]: the package's manifest and worker entrypoint; [`worker`]: one process,
//! its stdio under the budgets), initializes it once with the params the host sends, refuses its
//! calls into the host (it is not a host and grants nothing), restarts it with backoff whenever it
//! ends ([`supervisor`]), and answers every probe with the worker's own `InitializeResult` and the
//! manifest's identity ([`serve`]). Every input is bounded ([`Budgets`]).

mod confine;
mod lines;
mod package;
mod reap;
mod rpc;
mod serve;
mod supervisor;
mod worker;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::listener::{BindError, Stop, bind};
use crate::telemetry::{LogFormat, init_tracing};
pub use confine::Confinement;
pub use package::{Manifest, Package, PackageError, load_manifest};
use supervisor::{State, supervise};
use worker::Spawn;

/// `sandcap bridge`. Durations are written like `15s` or `1m`.
#[derive(Debug, Clone, clap::Args)]
pub struct BridgeArgs {
    /// The plugin package's directory: its package.json names the manifest, the manifest the
    /// worker entrypoint.
    #[arg(long, env = "SANDCAP_BRIDGE_PACKAGE", default_value = ".")]
    pub package: PathBuf,
    /// Address of the plain-HTTP probe endpoint.
    #[arg(long, env = "SANDCAP_BRIDGE_LISTEN", default_value = "0.0.0.0:9000")]
    pub listen: SocketAddr,
    /// The probe endpoint's path (the provider's spec.worker.service.path or URL path).
    #[arg(long, env = "SANDCAP_BRIDGE_PATH", default_value = "/rpc", value_parser = rpc_path)]
    pub path: String,
    /// The node executable the worker (and the manifest) runs under.
    #[arg(long, env = "SANDCAP_BRIDGE_NODE", default_value = "node")]
    pub node: PathBuf,
    /// An environment variable of the bridge's to give the worker too (its credentials, say):
    /// the worker gets only the host's scrubbed environment otherwise. Repeatable.
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Sent as `instanceInfo.instanceId` with `initialize`.
    #[arg(long, env = "SANDCAP_BRIDGE_INSTANCE_ID", default_value = "sandcap-bridge")]
    pub instance_id: String,
    /// Sent as `instanceInfo.hostVersion` with `initialize` (default: sandcap's version).
    #[arg(long, env = "SANDCAP_BRIDGE_HOST_VERSION", default_value = env!("CARGO_PKG_VERSION"))]
    pub host_version: String,
    /// How long a worker may take to answer `initialize` (the host's own timeout is 15 s).
    #[arg(long, env = "SANDCAP_BRIDGE_INITIALIZE_TIMEOUT", value_parser = humantime::parse_duration, default_value = "15s")]
    pub initialize_timeout: Duration,
    /// The first restart's delay; each next one doubles, up to --restart-backoff-max.
    #[arg(long, env = "SANDCAP_BRIDGE_RESTART_BACKOFF", value_parser = humantime::parse_duration, default_value = "1s")]
    pub restart_backoff: Duration,
    #[arg(long, env = "SANDCAP_BRIDGE_RESTART_BACKOFF_MAX", value_parser = humantime::parse_duration, default_value = "60s")]
    pub restart_backoff_max: Duration,
    #[arg(long, env = "SANDCAP_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

fn rpc_path(path: &str) -> Result<String, String> {
    if path.starts_with('/') && !path.contains(['{', '}', '*']) && path != "/healthz" {
        Ok(path.to_string())
    } else {
        Err("a path starting with /, not /healthz, without {, } or *".into())
    }
}

/// What the bridge holds its worker to (docs/provider-authors.md lists them).
#[derive(Clone, Debug)]
pub struct Budgets {
    /// A stdout (or stderr) line longer than this ends the worker.
    pub max_line: usize,
    /// Stdout lines and bytes a second; past either, a flood ends the worker.
    pub lines_per_sec: u32,
    pub bytes_per_sec: u64,
    /// Stdout lines that are not JSON-RPC messages (a stray `console.log`) a worker may write
    /// before one more ends it.
    pub max_garbage_lines: usize,
    /// Lines for the worker's stdin (answers to its calls into the host) waiting to be written;
    /// one more ends a worker that does not read its stdin.
    pub max_queued_answers: usize,
    /// The largest `InitializeResult` kept (sandcap's probe reads at most 1 MiB of answer).
    pub max_result: usize,
    /// The largest manifest, as JSON.
    pub max_manifest: usize,
    pub initialize_timeout: Duration,
    /// After `initialize`, a `health` call this often, answered within `health_timeout`.
    pub health_interval: Duration,
    pub health_timeout: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// Stderr lines logged a second (the rest are counted and dropped), each cut at this length.
    pub stderr_lines_per_sec: u32,
    pub max_stderr_line: usize,
}

impl Default for Budgets {
    fn default() -> Budgets {
        Budgets {
            max_line: 1024 * 1024,
            lines_per_sec: 1000,
            bytes_per_sec: 8 * 1024 * 1024,
            max_garbage_lines: 32,
            max_queued_answers: 64,
            max_result: 256 * 1024,
            max_manifest: 256 * 1024,
            initialize_timeout: Duration::from_secs(15),
            health_interval: Duration::from_secs(30),
            health_timeout: Duration::from_secs(15),
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            stderr_lines_per_sec: 100,
            max_stderr_line: 8 * 1024,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error(transparent)]
    Package(#[from] PackageError),
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("cannot wait for signals: {0}")]
    Signals(std::io::Error),
}

/// Runs the bridge until SIGTERM or SIGINT. Call it on a current-thread runtime: the worker is
/// killed when the thread that started it ends (Linux's parent-death signal).
pub async fn run(args: BridgeArgs) -> Result<(), BridgeError> {
    init_tracing(args.log_format);
    let budgets = Budgets {
        initialize_timeout: args.initialize_timeout,
        backoff_min: args.restart_backoff,
        backoff_max: args.restart_backoff_max.max(args.restart_backoff),
        ..Budgets::default()
    };
    let package = package::load(&args.package, &args.node, &budgets).await?;
    log_loaded(&package);
    let listener = bind(args.listen).await?;
    let mut signals = crate::run::Signals::install().map_err(BridgeError::Signals)?;
    let spawn = Spawn {
        node: args.node.clone(),
        entrypoint: package.worker.clone(),
        env: worker::worker_env(Some(package.id()), &args.pass_env),
        params: Arc::new(rpc::initialize_params(&package.manifest, &args.instance_id, &args.host_version)),
        identity: Arc::new(package.identity()),
        live: reap::Live::default(),
    };
    reap::become_subreaper();
    let reaper = tokio::spawn(reap::reaper(spawn.live.clone()));
    let (state, states) = watch::channel(State::Starting { restarts: 0 });
    let stop = CancellationToken::new();
    let worker = tokio::spawn(supervise(spawn, budgets, state, stop.clone()));
    let served = Stop::default();
    let limits = serve::limits();
    let app = serve::router(&args.path, states, &package.manifest);
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, path = %args.path, "serving sandcap's probe");
        // What tests and scripts wait for (with --listen 127.0.0.1:0 the system picks the port).
        let _ = writeln!(std::io::stdout(), "listening on {addr}");
    }
    let serving = crate::listener::serve_connections(listener, None, app, &limits, served.clone());
    tokio::pin!(serving);
    tokio::select! {
        () = &mut serving => {}
        signal = signals.next() => {
            tracing::info!(signal, "stopping: the worker is killed, open requests are answered");
            served.terminating.cancel();
            served.closing.cancel();
            stop.cancel();
            serving.await;
        }
    }
    stop.cancel();
    let _ = worker.await;
    reaper.abort();
    Ok(())
}

fn log_loaded(package: &package::Package) {
    tracing::info!(
        plugin = package.id(),
        version = package.version(),
        manifest = %package.manifest_path.display(),
        validated = package.validated,
        worker = %package.worker.display(),
        "plugin package loaded"
    );
    if !package.validated {
        tracing::warn!(
            "@paperclipai/shared is not installed in the package: the manifest is sent as it exports it, not as the host's validator parses it"
        );
    }
}
