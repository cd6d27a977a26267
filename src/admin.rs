//! The admin port, plain HTTP: liveness, readiness and metrics for the kubelet and scrapers.

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::listener::{Limits, Stop, serve_connections};
use crate::metrics;
use crate::tls::CertResolver;

/// `/readyz`: ready once the webhook listener is bound and its resolver has a certificate, until
/// the shutdown begins.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    webhook: Arc<OnceLock<Arc<CertResolver>>>,
    no_webhook: bool,
    terminating: CancellationToken,
}

impl Readiness {
    /// For `--controllers-only`: there is no listener to wait for.
    pub fn without_webhook() -> Readiness {
        Readiness { no_webhook: true, ..Readiness::default() }
    }

    /// Not ready from the moment `terminating` is cancelled: while the webhook still answers during
    /// the drain window, nothing should send it new clients.
    pub fn until(self, terminating: CancellationToken) -> Readiness {
        Readiness { terminating, ..self }
    }

    /// Why `/readyz` answers 503, if it does.
    fn not_ready(&self) -> Option<&'static str> {
        if self.terminating.is_cancelled() {
            Some("shutting down")
        } else if self.no_webhook || self.webhook.get().is_some_and(|resolver| resolver.has_cert()) {
            None
        } else {
            Some("the webhook has no certificate loaded yet")
        }
    }

    /// The webhook's listener is bound and serves with `resolver`'s certificate.
    pub(crate) fn webhook_listening(&self, resolver: Arc<CertResolver>) {
        let _ = self.webhook.set(resolver);
    }
}

/// Serves the admin port over plain HTTP until `stop` closes it, with the same timeouts and caps
/// as the webhook port ([`Limits::admin`] in `sandcap run`).
pub async fn serve_admin(listener: TcpListener, app: Router, limits: Limits, stop: Stop) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "admin listening (/healthz, /readyz, /metrics)");
    }
    serve_connections(listener, None, app, &limits, stop).await;
}

/// `/healthz` (alive), `/readyz` (see [`Readiness`]) and `/metrics` (Prometheus text).
pub fn admin_router(registry: Arc<Registry>, readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || async move {
                match readiness.not_ready() {
                    None => (StatusCode::OK, "ready\n".to_string()),
                    Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
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
