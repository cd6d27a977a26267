//! A reference sandbox-provider worker: it answers the JSON-RPC 2.0 `initialize` call that sandcap
//! sends to probe a provider (docs/contract.md, "Capabilities"), and nothing else.
//!
//! ```text
//! cargo run --example reference-worker -- --listen 127.0.0.1:9000 \
//!     --methods environmentExecute,environmentSyncIn,environmentSyncOut [--delay 3s] [--mode ok]
//! ```
//!
//! `--mode` makes it misbehave on purpose, for tests and demos: `not-ok` answers `ok: false`,
//! `rpc-error` a JSON-RPC error, `malformed` a body that is not JSON, `huge` an answer that never
//! ends, `wrong-id` an answer to another request. Once it accepts connections it prints
//! `listening on ADDR` on stdout (with `--listen 127.0.0.1:0` the system picks the port). With
//! `--tls-cert` and `--tls-key` (PEM files) it serves https, as sandcap's webhook does.
//!
//! A real worker answers `initialize` the same way and then serves the methods it listed.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use clap::{Parser, ValueEnum};
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// The methods to advertise in `supportedMethods`, comma-separated.
    #[arg(long, value_delimiter = ',')]
    methods: Vec<String>,
    /// Wait this long before answering (e.g. `3s`).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    delay: Duration,
    #[arg(long, value_enum, default_value_t = Mode::Ok)]
    mode: Mode,
    /// Serve https with this certificate chain (PEM); needs `--tls-key`.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    Ok,
    NotOk,
    RpcError,
    Malformed,
    Huge,
    WrongId,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Arc::new(Args::parse());
    // Any path: the provider's `spec.worker.service.path` chooses one, the worker does not care.
    let app = Router::new().route("/", post(initialize)).route("/{*path}", post(initialize)).with_state(args.clone());
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let stopped = async { tokio::signal::ctrl_c().await.unwrap_or(()) };
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        println!("listening on {}", listener.local_addr()?);
        std::io::stdout().flush()?;
        return axum::serve(listener, app).with_graceful_shutdown(stopped).await;
    };
    sandcap::tls::install_default_provider();
    let (cert_pem, key_pem) = (std::fs::read(cert)?, std::fs::read(key)?);
    let loaded = sandcap::tls::load_pem(&cert_pem, &key_pem, &cert.display().to_string(), &key.display().to_string())
        .map_err(std::io::Error::other)?;
    let resolver = Arc::new(sandcap::tls::CertResolver::default());
    resolver.install(&loaded, &sandcap::metrics::Metrics::register(&mut Default::default()));
    println!("listening on {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    let limits = sandcap::listener::Limits::default();
    let serving = sandcap::listener::serve_https(
        listener,
        sandcap::tls::server_config(resolver),
        app,
        &limits,
        sandcap::listener::Stop::default(),
    );
    tokio::select! {
        () = serving => Ok(()),
        () = stopped => Ok(()),
    }
}

async fn initialize(State(args): State<Arc<Args>>, body: Bytes) -> Response {
    tokio::time::sleep(args.delay).await;
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return rpc_error(Value::Null, -32700, "parse error").into_response();
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    if request.get("method").and_then(Value::as_str) != Some("initialize") {
        return rpc_error(id, -32601, "method not found: this worker answers only initialize").into_response();
    }
    let manifest = &request["params"]["manifest"];
    eprintln!(
        "initialize from sandcap {} for plugin {} {}",
        request["params"]["instanceInfo"]["hostVersion"], manifest["pluginKey"], manifest["version"]
    );
    let result = json!({"ok": true, "supportedMethods": args.methods});
    match args.mode {
        Mode::Ok => answer(id, result).into_response(),
        Mode::NotOk => answer(id, json!({"ok": false, "supportedMethods": args.methods})).into_response(),
        Mode::RpcError => rpc_error(id, -32603, "this worker fails on purpose (--mode rpc-error)").into_response(),
        Mode::Malformed => "this is not a JSON-RPC answer".into_response(),
        Mode::WrongId => answer(json!(id.as_u64().unwrap_or(0) + 1000), result).into_response(),
        Mode::Huge => {
            // A valid beginning followed by a string that never ends: the client must stop reading.
            let head = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"ok":true,"padding":""#);
            let tail = futures::stream::repeat_with(|| Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; 64 * 1024])));
            let stream = futures::StreamExt::chain(futures::stream::once(async { Ok(Bytes::from(head)) }), tail);
            Response::new(Body::from_stream(stream))
        }
    }
}

fn answer(id: Value, result: Value) -> axum::Json<Value> {
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn rpc_error(id: Value, code: i64, message: &str) -> axum::Json<Value> {
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
}
