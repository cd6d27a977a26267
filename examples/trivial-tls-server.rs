//! The load test's baseline: the webhook's exact transport (rustls, hyper, axum, the same limits
//! and layers via `sandcap::listener::serve_https`) with a handler that reads the body and returns a
//! fixed AdmissionReview. `benches/webhook-load.sh` compares `sandcap run` against it.
//!
//!     cargo run --release --example trivial-tls-server -- 127.0.0.1:9443

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::routing::post;
use sandcap::listener::{Limits, Stop, bind, serve_https};
use sandcap::metrics::Metrics;
use sandcap::run::watch_signals;
use sandcap::tls::{self, CertResolver};

// The same allocator as the `sandcap` binary, so the comparison measures the handler alone.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const FIXED: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","allowed":true}}"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args().nth(1).as_deref().unwrap_or("127.0.0.1:9443").parse()?;
    let resolver = Arc::new(CertResolver::default());
    let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
    resolver.install(&tls::self_signed()?, &metrics);
    let app = Router::new()
        .route("/validate", post(|_body: Bytes| async { ([(header::CONTENT_TYPE, "application/json")], FIXED) }));
    let listener = bind(addr).await?;
    let stop = Stop::default();
    // With port 0 the system picks one: benches/webhook-load.sh reads it here.
    eprintln!("trivial handler listening on https://{}/validate", listener.local_addr()?);
    let limits = Limits::default();
    tokio::select! {
        () = serve_https(listener, tls::server_config(resolver), app, &limits, stop.clone()) => Ok(()),
        forced = watch_signals(stop, Duration::ZERO, limits.drain_timeout) => Err(forced.into()),
    }
}
