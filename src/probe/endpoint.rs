//! Where the worker answers.

use reqwest::Url;

pub use sandcap_core::api::redacted;
use sandcap_core::api::{ServiceRef, WorkerRef, is_dns_label};

use super::error::ProbeError;
use sandcap_core::addresses::WorkerPolicy;

/// Why `spec.worker` names no endpoint sandcap may probe: the failed probe's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error(
        "spec.worker.url is set but sandcap runs without --allow-worker-urls, so the worker is not probed; use \
         spec.worker.service or start sandcap with --allow-worker-urls"
    )]
    UrlsNotAllowed,
    #[error("spec.worker sets both service and url; exactly one is allowed")]
    Both,
    #[error("spec.worker names neither a service nor a url")]
    Neither,
    #[error("spec.worker.url {0}")]
    Url(WorkerUrlError),
    /// The field of `spec.worker.service`.
    #[error("spec.worker.service.{0} is not a DNS label")]
    NotADnsLabel(&'static str),
    #[error("spec.worker.service.port is not between 1 and 65535")]
    Port,
    #[error("spec.worker.service.path does not start with /")]
    Path,
    #[error("spec.worker.service does not make a valid URL: {0}")]
    ServiceUrl(url::ParseError),
}

impl From<EndpointError> for ProbeError {
    fn from(error: EndpointError) -> ProbeError {
        ProbeError::Endpoint(error.to_string())
    }
}

/// Why a worker URL is not probed; said after the URL's name, never repeating it (it may hold
/// credentials).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WorkerUrlError {
    #[error("is not a valid URL: {0}")]
    NotAUrl(url::ParseError),
    #[error("has scheme {0}; only http and https are probed")]
    Scheme(String),
}

/// Where the worker answers: its Service's cluster DNS name, or `spec.worker.url` when the
/// operator allows URLs and its host is not refused by name or IP literal.
pub fn endpoint(worker: &WorkerRef, policy: &WorkerPolicy) -> Result<Url, ProbeError> {
    let url = match (&worker.service, &worker.url) {
        (Some(service), None) => return Ok(service_url(service)?),
        (None, Some(url)) if policy.allow_urls => parse_worker_url(url).map_err(EndpointError::Url)?,
        (None, Some(_)) => return Err(EndpointError::UrlsNotAllowed.into()),
        (Some(_), Some(_)) => return Err(EndpointError::Both.into()),
        (None, None) => return Err(EndpointError::Neither.into()),
    };
    match policy.allowed_cidrs.refuses_host(&url) {
        Some(class) => Err(ProbeError::RefusedAddress(class)),
        None => Ok(url),
    }
}

/// An absolute `http` or `https` URL.
pub fn parse_worker_url(url: &str) -> Result<Url, WorkerUrlError> {
    let parsed = Url::parse(url).map_err(WorkerUrlError::NotAUrl)?;
    match parsed.scheme() {
        "http" | "https" => Ok(parsed),
        other => Err(WorkerUrlError::Scheme(other.to_string())),
    }
}

pub(super) fn service_url(service: &ServiceRef) -> Result<Url, EndpointError> {
    for (field, value) in [("name", &service.name), ("namespace", &service.namespace)] {
        if !is_dns_label(value) {
            return Err(EndpointError::NotADnsLabel(field));
        }
    }
    if !(1..=65535).contains(&service.port) {
        return Err(EndpointError::Port);
    }
    if !service.path.as_deref().unwrap_or("/").starts_with('/') {
        return Err(EndpointError::Path);
    }
    Url::parse(&service.url()).map_err(EndpointError::ServiceUrl)
}
