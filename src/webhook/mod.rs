//! The admission listener: HTTPS with a certificate kept current, serving the review
//! handler's `POST /validate` (`handler.rs`, its places shared out per client in `places.rs`).
//! The answers come from [`sandcap_core::admission::handle`].

mod handler;
mod places;

use std::sync::Arc;
use tokio::net::TcpListener;

use crate::admin::Readiness;
use crate::listener::{Limits, Stop, serve_https};
use crate::metrics::Metrics;
use crate::tls::{self, CertLoadError, CertResolver, CertSource};
use sandcap_core::validation::Options;

/// The admission listener's configuration.
pub struct Webhook {
    pub listener: TcpListener,
    pub certificate: CertSource,
    pub options: Options,
    pub limits: Limits,
}

/// Serves admission reviews over HTTPS until `stop` closes the listener (see [`Stop`]), keeping the
/// certificate current meanwhile. Marks `readiness` once listening (it turns ready when the first
/// certificate loads).
pub async fn serve_webhook(
    webhook: Webhook,
    metrics: Metrics,
    readiness: Readiness,
    stop: Stop,
) -> Result<(), CertLoadError> {
    let resolver = Arc::new(CertResolver::default());
    let watcher = match webhook.certificate {
        CertSource::SelfSigned => {
            resolver.install(&tls::self_signed()?, &metrics);
            tracing::info!("serving a self-signed certificate for localhost and 127.0.0.1");
            None
        }
        CertSource::Files(files) => {
            let watch = tls::watch_files(files, resolver.clone(), metrics.clone(), stop.closing.clone());
            Some(tokio::spawn(watch))
        }
    };
    readiness.webhook_listening(resolver.clone());
    if let Ok(addr) = webhook.listener.local_addr() {
        tracing::info!(%addr, "admission webhook listening (POST /validate)");
    }
    let app = handler::webhook_router(webhook.options, metrics, &webhook.limits);
    serve_https(webhook.listener, tls::server_config(resolver), app, &webhook.limits, stop).await;
    if let Some(watcher) = watcher {
        // It ends with the same shutdown token.
        let _ = watcher.await;
    }
    Ok(())
}
