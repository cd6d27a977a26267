//! The admin port, plain HTTP: liveness, readiness and metrics for the kubelet and scrapers.

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::listener::{Limits, serve_connections};
use crate::metrics;
use crate::tls::CertResolver;

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

    /// The webhook's listener is bound and serves with `resolver`'s certificate.
    pub(crate) fn webhook_listening(&self, resolver: Arc<CertResolver>) {
        let _ = self.webhook.set(resolver);
    }
}

/// Serves the admin port over plain HTTP until `shutdown`, with the same timeouts and caps as
/// the webhook port ([`Limits::admin`] in `sandcap run`).
pub async fn serve_admin(listener: TcpListener, app: Router, limits: Limits, shutdown: CancellationToken) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "admin listening (/healthz, /readyz, /metrics)");
    }
    serve_connections(listener, None, app, &limits, shutdown).await;
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
