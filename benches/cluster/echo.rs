//! The reference webhook: sandcap's own transport (`sandcap::listener::serve_https`, rustls,
//! hyper, axum) with a handler that only echoes the review's uid and allows it. What the apiserver
//! adds to a create for calling any webhook at all; sandcap's added latency is measured next to it.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::routing::post;
use sandcap::listener::{Limits, Stop, bind, serve_https};
use sandcap::metrics::Metrics;
use sandcap::tls::{self, CertResolver};
use serde_json::{Value, json};

use crate::harness::cluster::Cluster;

/// Serves on a loopback port it picks with a serving certificate of the cluster's CA until the
/// returned guard is dropped; returns the port.
pub async fn start(c: &Cluster) -> (u16, tokio_util::sync::DropGuard) {
    let (cert, key) = c.ca.serving(&[]);
    let resolver = Arc::new(CertResolver::default());
    let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
    resolver.install(&tls::load_pem(cert.as_bytes(), key.as_bytes(), "echo.crt", "echo.key").expect("pair"), &metrics);
    let app = Router::new().route(
        "/validate",
        post(|body: Bytes| async move {
            let review: Value = serde_json::from_slice(&body).unwrap_or_default();
            let answer = json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": true}
            });
            ([(header::CONTENT_TYPE, "application/json")], answer.to_string())
        }),
    );
    let listener = bind(([127, 0, 0, 1], 0).into()).await.expect("bind");
    let port = listener.local_addr().expect("a bound address").port();
    let stop = Stop::default();
    let closing = stop.closing.clone();
    tokio::spawn(
        async move { serve_https(listener, tls::server_config(resolver), app, &Limits::default(), stop).await },
    );
    (port, closing.drop_guard())
}
