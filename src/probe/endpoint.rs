//! Where the worker answers.

use reqwest::Url;

pub use sandcap_core::api::redacted;
use sandcap_core::api::{ServiceRef, WorkerRef, is_dns_label};

use super::error::ProbeError;
use sandcap_core::addresses::WorkerPolicy;

/// Where the worker answers: its Service's cluster DNS name, or `spec.worker.url` when the
/// operator allows URLs and its host is not refused by name or IP literal.
pub fn endpoint(worker: &WorkerRef, policy: &WorkerPolicy) -> Result<Url, ProbeError> {
    let endpoint = |message: &str| ProbeError::Endpoint(message.into());
    match (&worker.service, &worker.url) {
        (Some(service), None) => service_url(service).map_err(ProbeError::Endpoint),
        (None, Some(url)) if policy.allow_urls => {
            let url = parse_worker_url(url).map_err(|e| ProbeError::Endpoint(format!("spec.worker.url {e}")))?;
            match policy.allowed_cidrs.refuses_host(&url) {
                Some(class) => Err(ProbeError::RefusedAddress(class)),
                None => Ok(url),
            }
        }
        (None, Some(_)) => Err(endpoint(
            "spec.worker.url is set but sandcap runs without --allow-worker-urls, so the worker is not \
             probed; use spec.worker.service or start sandcap with --allow-worker-urls",
        )),
        (Some(_), Some(_)) => Err(endpoint("spec.worker sets both service and url; exactly one is allowed")),
        (None, None) => Err(endpoint("spec.worker names neither a service nor a url")),
    }
}

/// An absolute `http` or `https` URL. The error does not repeat the URL (it may hold credentials).
pub fn parse_worker_url(url: &str) -> Result<Url, String> {
    let parsed = Url::parse(url).map_err(|e| format!("is not a valid URL: {e}"))?;
    match parsed.scheme() {
        "http" | "https" => Ok(parsed),
        other => Err(format!("has scheme {other}; only http and https are probed")),
    }
}

pub(super) fn service_url(service: &ServiceRef) -> Result<Url, String> {
    for (field, value) in [("name", &service.name), ("namespace", &service.namespace)] {
        if !is_dns_label(value) {
            return Err(format!("spec.worker.service.{field} is not a DNS label"));
        }
    }
    if !(1..=65535).contains(&service.port) {
        return Err("spec.worker.service.port is not between 1 and 65535".into());
    }
    if !service.path.as_deref().unwrap_or("/").starts_with('/') {
        return Err("spec.worker.service.path does not start with /".into());
    }
    Url::parse(&service.url()).map_err(|e| format!("spec.worker.service does not make a valid URL: {e}"))
}
