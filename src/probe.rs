//! The worker probe (docs/contract.md, "Capabilities": what verifies): one JSON-RPC 2.0
//! `initialize` over HTTP POST.
//!
//! Everything that can go wrong is fail-closed: the outcome is `Failed` with its class
//! ([`ProbeError`]), and the caller verifies nothing. The worker is untrusted input, so the answer
//! is bounded in time and size, redirects are not followed, and messages never quote the answer
//! (its body, a JSON-RPC error's text, a peer certificate's names) or a URL's credentials or query
//! (either may carry a token): only the class, a status or error code, and sandcap's own words.
//!
//! A worker URL is chosen by whoever may create a provider, so it may not reach the node's or the
//! cloud's own services ([`AddressClass`]) unless the operator allows those addresses
//! (`--worker-url-allowed-cidrs`). The check holds where the connection is made: an IP literal is
//! checked before the request, and a host name's addresses are filtered as it is resolved.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ipnet::IpNet;
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::{SandboxProvider, SandboxProviderSpec, ServiceRef, WorkerRef, is_dns_label};
use crate::contract::Verified;
use crate::vocabulary::words;

/// An answer larger than this is refused; a real `initialize` result is a few hundred bytes.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// Bounds on what a worker may write into `status.worker.supportedMethods`.
const MAX_METHODS: usize = 256;
const MAX_METHOD_LEN: usize = 128;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
const API_VERSION: u32 = 1;

/// What one probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The worker answered `ok: true`; `methods` is its `supportedMethods`, sorted, without duplicates.
    Succeeded { methods: Vec<String> },
    /// Nothing is verified; the failure's message is safe to publish.
    Failed(ProbeFailure),
}

impl ProbeOutcome {
    pub fn verified(&self) -> Verified {
        match self {
            ProbeOutcome::Succeeded { methods } => Verified::methods(methods.iter().cloned()),
            ProbeOutcome::Failed(_) => Verified::nothing(),
        }
    }

    /// The `result` label of the probe metric.
    pub fn label(&self) -> &'static str {
        match self {
            ProbeOutcome::Succeeded { .. } => "succeeded",
            ProbeOutcome::Failed(_) => "failed",
        }
    }

    /// The `reason` label of the probe metric: the failure's class, empty on success.
    pub fn reason(&self) -> &'static str {
        match self {
            ProbeOutcome::Succeeded { .. } => "",
            ProbeOutcome::Failed(failure) => failure.error.reason(),
        }
    }
}

/// A failed probe: the endpoint it tried (redacted), if it got as far as one, and why it failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeFailure {
    pub endpoint: Option<String>,
    pub error: ProbeError,
}

impl fmt::Display for ProbeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.endpoint {
            Some(endpoint) => write!(f, "probe of {endpoint} failed: {}", self.error),
            None => self.error.fmt(f),
        }
    }
}

/// Why a probe failed, one variant per class. The words are sandcap's own: nothing the worker
/// (or whatever answered at its address) wrote is carried, only numbers (an HTTP status, a
/// JSON-RPC error code, a position in the answer).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// The spec names no endpoint sandcap may probe: a URL without `--allow-worker-urls`, both or
    /// neither of `service` and `url`, a URL or Service that does not make a URL.
    #[error("{0}")]
    Endpoint(String),
    #[error(
        "the worker's host is a refused address ({0}); worker URLs reach one only where the operator's \
         --worker-url-allowed-cidrs allows it"
    )]
    RefusedAddress(AddressClass),
    #[error("no answer within {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    #[error("cannot resolve the worker's host name")]
    Dns,
    #[error("cannot connect: connection refused")]
    ConnectionRefused,
    #[error("cannot connect{}", io_kind(.0))]
    Connect(Option<io::ErrorKind>),
    #[error("the TLS handshake failed")]
    Tls,
    #[error("the exchange failed{}", io_kind(.0))]
    Transport(Option<io::ErrorKind>),
    #[error("the worker answered HTTP {0}")]
    HttpStatus(http::StatusCode),
    #[error("the answer is larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
    #[error("the answer is not a JSON-RPC object (line {line}, column {column})")]
    NotJson { line: usize, column: usize },
    #[error("the worker answered JSON-RPC error {}", .0.map_or_else(|| "without a code".to_string(), |c| c.to_string()))]
    RpcError(Option<i64>),
    #[error("the worker answered ok: false")]
    NotOk,
    /// The answer is JSON of the wrong shape; the text describes the shape, never a value.
    #[error("{0}")]
    Malformed(String),
}

impl ProbeError {
    /// The class as a metric label value: a fixed, small set.
    pub fn reason(&self) -> &'static str {
        match self {
            ProbeError::Endpoint(_) => "endpoint",
            ProbeError::RefusedAddress(_) => "refused_address",
            ProbeError::Timeout(_) => "timeout",
            ProbeError::Dns => "dns",
            ProbeError::ConnectionRefused => "connection_refused",
            ProbeError::Connect(_) => "connect",
            ProbeError::Tls => "tls",
            ProbeError::Transport(_) => "transport",
            ProbeError::HttpStatus(_) => "http_status",
            ProbeError::TooLarge => "too_large",
            ProbeError::NotJson { .. } => "not_json",
            ProbeError::RpcError(_) => "rpc_error",
            ProbeError::NotOk => "not_ok",
            ProbeError::Malformed(_) => "malformed",
        }
    }
}

/// The operating system's name for an I/O failure ("connection reset", ...): a fixed word list,
/// unlike an error's own text.
fn io_kind(kind: &Option<io::ErrorKind>) -> String {
    kind.map(|k| format!(": {k}")).unwrap_or_default()
}

words! {
    /// The addresses a worker URL may not reach unless the operator allows them: each reaches the
    /// node sandcap runs on, or the cloud's instance metadata service (credentials, among other
    /// things), rather than a worker.
    pub enum AddressClass (as_str, parse) {
        /// 127.0.0.0/8, ::1: sandcap's own pod.
        Loopback = "loopback",
        /// 169.254.0.0/16, fe80::/10: the node's link.
        LinkLocal = "link-local",
        /// The metadata services of the major clouds.
        Metadata = "cloud metadata",
        /// 0.0.0.0/8, `::`: connecting there reaches the local host.
        Unspecified = "unspecified",
    }
}

const GCE_AWS_AZURE_METADATA: IpAddr = IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254));
const METADATA: [IpAddr; 3] = [
    GCE_AWS_AZURE_METADATA,
    // AWS over IPv6 (Nitro instances).
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
    // Alibaba Cloud.
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
];

/// The class of `ip`, if worker URLs may not reach it. An IPv4-mapped IPv6 address
/// (`::ffff:127.0.0.1`) reaches the IPv4 address, so it is classed as that.
pub fn classify(ip: IpAddr) -> Option<AddressClass> {
    let ip = ip.to_canonical();
    if METADATA.contains(&ip) {
        return Some(AddressClass::Metadata);
    }
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => Some(AddressClass::Loopback),
        IpAddr::V4(v4) if v4.is_link_local() => Some(AddressClass::LinkLocal),
        IpAddr::V4(v4) if v4.octets()[0] == 0 => Some(AddressClass::Unspecified),
        IpAddr::V6(v6) if v6.is_loopback() => Some(AddressClass::Loopback),
        IpAddr::V6(v6) if v6.is_unicast_link_local() => Some(AddressClass::LinkLocal),
        IpAddr::V6(v6) if v6.is_unspecified() => Some(AddressClass::Unspecified),
        _ => None,
    }
}

/// Host names that always stand for a refused address, and the address each stands for. They are
/// refused by name as well, so that the webhook, which resolves nothing, can deny them.
fn named_address(name: &str) -> Option<IpAddr> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name == "localhost" || name.ends_with(".localhost") {
        // RFC 6761: every name under localhost is loopback.
        return Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    const METADATA_NAMES: [&str; 5] =
        ["metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal"];
    METADATA_NAMES.contains(&name).then_some(GCE_AWS_AZURE_METADATA)
}

/// `--worker-url-allowed-cidrs`: the refused addresses worker URLs may reach nonetheless (a worker
/// on loopback in a test, say). Addresses outside every class are always allowed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedCidrs(Arc<[IpNet]>);

impl AllowedCidrs {
    pub fn new(cidrs: impl IntoIterator<Item = IpNet>) -> AllowedCidrs {
        AllowedCidrs(cidrs.into_iter().collect())
    }

    /// Every address: for `sandcap resolve --worker-url`, whose URL is its caller's own.
    pub fn any() -> AllowedCidrs {
        AllowedCidrs::new([IpNet::V4(Default::default()), IpNet::V6(Default::default())])
    }

    /// The class that refuses `ip`, if it has one and no CIDR allows it (in either of its forms).
    pub fn refuses(&self, ip: IpAddr) -> Option<AddressClass> {
        let allowed = |ip: IpAddr| self.0.iter().any(|net| net.contains(&ip));
        classify(ip).filter(|_| !allowed(ip) && !allowed(ip.to_canonical()))
    }

    /// The class that refuses a URL's host as written (an IP literal, or a name from
    /// [`named_address`]); other names are checked as they are resolved.
    pub fn refuses_host(&self, url: &Url) -> Option<AddressClass> {
        let ip = literal_ip(url).or_else(|| named_address(url.host_str()?))?;
        self.refuses(ip)
    }
}

/// The URL's host if it is an IP address. The URL parser writes every IPv4 spelling
/// (2130706433, 0x7f.1, 0177.0.0.1) as dotted decimal, and an IPv6 one in brackets.
fn literal_ip(url: &Url) -> Option<IpAddr> {
    url.host_str()?.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

/// Resolves host names for the probe and keeps only the addresses worker URLs may reach, so the
/// check holds for the address actually connected to, whatever the name (one that rebinds
/// between checks included). A Service's name resolves to its cluster IP, which no class holds.
#[derive(Debug)]
struct GuardedResolver {
    allowed: AllowedCidrs,
}

/// Why [`GuardedResolver`] gave no address; found again in the request error's causes.
#[derive(Debug, thiserror::Error)]
enum ResolveError {
    #[error("the name does not resolve")]
    Lookup,
    #[error("the name resolves only to {0} addresses")]
    Refused(AddressClass),
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allowed = self.allowed.clone();
        Box::pin(async move {
            let found = tokio::net::lookup_host((name.as_str(), 0)).await.map_err(|_| ResolveError::Lookup)?;
            let mut refused = None;
            let kept: Vec<SocketAddr> = found
                .filter(|addr| match allowed.refuses(addr.ip()) {
                    Some(class) => {
                        refused.get_or_insert(class);
                        false
                    }
                    None => true,
                })
                .collect();
            match refused {
                Some(class) if kept.is_empty() => Err(ResolveError::Refused(class).into()),
                _ if kept.is_empty() => Err(ResolveError::Lookup.into()),
                _ => Ok(Box::new(kept.into_iter()) as Addrs),
            }
        })
    }
}

/// Probes workers. Cheap to clone: the HTTP connection pool is shared.
#[derive(Clone, Debug)]
pub struct Prober {
    http: reqwest::Client,
    timeout: Duration,
    allow_worker_urls: bool,
    allowed_cidrs: AllowedCidrs,
    instance_id: String,
    next_id: Arc<AtomicU64>,
}

impl Prober {
    /// `timeout` bounds connecting and the whole exchange; `allow_worker_urls` and
    /// `allowed_cidrs` are the operator's flags of the same names; `instance_id` is sent as
    /// `instanceInfo.instanceId` (the operator's identity).
    pub fn new(
        timeout: Duration,
        allow_worker_urls: bool,
        allowed_cidrs: AllowedCidrs,
        instance_id: impl Into<String>,
    ) -> Prober {
        crate::tls::install_default_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .timeout(timeout)
            // A redirect would let a worker point the operator at another address.
            .redirect(reqwest::redirect::Policy::none())
            // Through a proxy, the proxy would resolve the name and the address check would not hold.
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver { allowed: allowed_cidrs.clone() }))
            .user_agent(concat!("sandcap/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("a client with these settings always builds");
        Prober {
            http,
            timeout,
            allow_worker_urls,
            allowed_cidrs,
            instance_id: instance_id.into(),
            next_id: Arc::default(),
        }
    }

    /// Where the worker of `worker` answers, under this prober's flags (see [`endpoint`]).
    pub fn endpoint(&self, worker: &WorkerRef) -> Result<Url, ProbeError> {
        endpoint(worker, self.allow_worker_urls, &self.allowed_cidrs)
    }

    /// Probes the provider's worker at the endpoint its spec names.
    pub async fn probe(&self, provider: &SandboxProvider) -> ProbeOutcome {
        match self.endpoint(&provider.spec.worker) {
            Ok(url) => self.probe_url(&url, &provider.spec).await,
            Err(error) => ProbeOutcome::Failed(ProbeFailure { endpoint: None, error }),
        }
    }

    /// Probes the worker at `url` with the manifest built from `spec`.
    pub async fn probe_url(&self, url: &Url, spec: &SandboxProviderSpec) -> ProbeOutcome {
        // An IP literal is connected to without resolving, so it is checked here; a name is
        // checked by the resolver, on every address it resolves to.
        let result = match literal_ip(url).and_then(|ip| self.allowed_cidrs.refuses(ip)) {
            Some(class) => Err(ProbeError::RefusedAddress(class)),
            None => self.initialize(url, spec).await,
        };
        match result {
            Ok(methods) => ProbeOutcome::Succeeded { methods },
            Err(error) => ProbeOutcome::Failed(ProbeFailure { endpoint: Some(redacted(url)), error }),
        }
    }

    async fn initialize(&self, url: &Url, spec: &SandboxProviderSpec) -> Result<Vec<String>, ProbeError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let request = initialize_request(id, spec, &self.instance_id);
        let response = self
            .http
            .post(url.clone())
            .header(http::header::ACCEPT, "application/json")
            .json(&request)
            .send()
            .await
            .map_err(|e| self.classify_error(&e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(ProbeError::HttpStatus(status));
        }
        let body = self.read_bounded(response).await?;
        parse_answer(&body, id)
    }

    /// Reads the body chunk by chunk and gives up as soon as it passes the bound.
    async fn read_bounded(&self, mut response: reqwest::Response) -> Result<Vec<u8>, ProbeError> {
        if response.content_length().is_some_and(|n| n > MAX_ANSWER_BYTES as u64) {
            return Err(ProbeError::TooLarge);
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.classify_error(&e))? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(ProbeError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// The class of a transport error, from its chain of causes. Their text is not used: a TLS
    /// error can carry the names in the peer's certificate, and reqwest's own names the URL.
    fn classify_error(&self, e: &reqwest::Error) -> ProbeError {
        if e.is_timeout() {
            return ProbeError::Timeout(self.timeout);
        }
        let mut kind = None;
        let mut cause = std::error::Error::source(e);
        while let Some(c) = cause {
            match c.downcast_ref::<ResolveError>() {
                Some(ResolveError::Refused(class)) => return ProbeError::RefusedAddress(*class),
                Some(ResolveError::Lookup) => return ProbeError::Dns,
                None if c.is::<rustls::Error>() => return ProbeError::Tls,
                None => {}
            }
            cause = match c.downcast_ref::<io::Error>() {
                Some(io) if io.kind() == io::ErrorKind::ConnectionRefused => return ProbeError::ConnectionRefused,
                Some(io) => {
                    // The innermost kind is the most precise. An io::Error's source() skips the
                    // error it wraps (a TLS error, another io::Error), so the walk goes through it.
                    kind = Some(io.kind());
                    io.get_ref().map(|inner| inner as &(dyn std::error::Error + 'static))
                }
                None => c.source(),
            };
        }
        if e.is_connect() { ProbeError::Connect(kind) } else { ProbeError::Transport(kind) }
    }
}

/// The `initialize` request of the worker protocol.
fn initialize_request(id: u64, spec: &SandboxProviderSpec, instance_id: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "initialize",
        "params": {
            "manifest": {
                "pluginKey": spec.plugin_key,
                "version": spec.version,
                "drivers": spec.environment_drivers,
            },
            "config": {},
            "instanceInfo": {"instanceId": instance_id, "hostVersion": env!("CARGO_PKG_VERSION")},
            "apiVersion": API_VERSION,
        },
    })
}

/// Where the worker answers: its Service's cluster DNS name, or `spec.worker.url` when the
/// operator allows URLs and its host is not refused by name or IP literal (`allowed_cidrs`).
pub fn endpoint(worker: &WorkerRef, allow_worker_urls: bool, allowed_cidrs: &AllowedCidrs) -> Result<Url, ProbeError> {
    let endpoint = |message: &str| ProbeError::Endpoint(message.into());
    match (&worker.service, &worker.url) {
        (Some(service), None) => service_url(service).map_err(ProbeError::Endpoint),
        (None, Some(url)) if allow_worker_urls => {
            let url = parse_worker_url(url).map_err(|e| ProbeError::Endpoint(format!("spec.worker.url {e}")))?;
            match allowed_cidrs.refuses_host(&url) {
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

fn service_url(service: &ServiceRef) -> Result<Url, String> {
    for (field, value) in [("name", &service.name), ("namespace", &service.namespace)] {
        if !is_dns_label(value) {
            return Err(format!("spec.worker.service.{field} is not a DNS label"));
        }
    }
    if !(1..=65535).contains(&service.port) {
        return Err("spec.worker.service.port is not between 1 and 65535".into());
    }
    let path = service.path.as_deref().unwrap_or("/");
    if !path.starts_with('/') {
        return Err("spec.worker.service.path does not start with /".into());
    }
    let url = format!("http://{}.{}.svc:{}{path}", service.name, service.namespace, service.port);
    Url::parse(&url).map_err(|e| format!("spec.worker.service does not make a valid URL: {e}"))
}

/// The URL without credentials, query or fragment: safe to show.
pub fn redacted(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    format!("{}://{host}{port}{}", url.scheme(), url.path())
}

#[derive(Deserialize)]
struct Answer {
    jsonrpc: Option<Value>,
    id: Option<Value>,
    result: Option<Value>,
    error: Option<RpcError>,
}

#[derive(Deserialize)]
struct RpcError {
    code: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeResult {
    ok: Option<bool>,
    supported_methods: Option<Value>,
}

/// Judges the answer body. Errors describe the answer's shape, never quote its values (a JSON-RPC
/// error's message included), so a misbehaving worker can neither fill the status nor tell the
/// provider's author what answered at its address.
fn parse_answer(body: &[u8], expected_id: u64) -> Result<Vec<String>, ProbeError> {
    let malformed = |message: &str| ProbeError::Malformed(message.into());
    let answer: Answer =
        serde_json::from_slice(body).map_err(|e| ProbeError::NotJson { line: e.line(), column: e.column() })?;
    if answer.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
        return Err(malformed("the answer is not JSON-RPC 2.0 (jsonrpc is not \"2.0\")"));
    }
    if answer.id.as_ref().and_then(Value::as_u64) != Some(expected_id) {
        return Err(ProbeError::Malformed(format!("the answer's id does not match the request id {expected_id}")));
    }
    if let Some(error) = answer.error {
        return Err(ProbeError::RpcError(error.code));
    }
    let result = answer.result.ok_or_else(|| malformed("the answer has neither result nor error"))?;
    let result: InitializeResult = serde_json::from_value(result)
        .map_err(|_| malformed("the answer's result is not an InitializeResult object"))?;
    match result.ok {
        Some(true) => {}
        Some(false) => return Err(ProbeError::NotOk),
        None => return Err(malformed("the answer's result has no boolean ok")),
    }
    let Some(Value::Array(list)) = result.supported_methods else {
        return Err(malformed("the answer's result.supportedMethods is not a list"));
    };
    if list.len() > MAX_METHODS {
        return Err(ProbeError::Malformed(format!("the answer lists more than {MAX_METHODS} supportedMethods")));
    }
    let mut methods = Vec::with_capacity(list.len());
    for (i, item) in list.into_iter().enumerate() {
        match item {
            Value::String(m) if is_method_name(&m) => methods.push(m),
            _ => {
                return Err(ProbeError::Malformed(format!(
                    "the answer's result.supportedMethods[{i}] is not a method name"
                )));
            }
        }
    }
    methods.sort();
    methods.dedup();
    Ok(methods)
}

fn is_method_name(m: &str) -> bool {
    !m.is_empty() && m.len() <= MAX_METHOD_LEN && m.chars().all(|c| c.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(v: Value) -> Result<Vec<String>, ProbeError> {
        parse_answer(v.to_string().as_bytes(), 7)
    }

    fn cidrs(list: &[&str]) -> AllowedCidrs {
        AllowedCidrs::new(list.iter().map(|c| c.parse().unwrap()))
    }

    fn host_class(url: &str, allowed: &AllowedCidrs) -> Option<AddressClass> {
        allowed.refuses_host(&Url::parse(url).unwrap())
    }

    #[test]
    fn good_answer_is_sorted_and_deduplicated() {
        let got = answer(json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true,
            "supportedMethods": ["environmentSyncOut", "environmentExecute", "environmentSyncOut"]}}));
        assert_eq!(got.unwrap(), ["environmentExecute", "environmentSyncOut"]);
    }

    #[test]
    fn every_malformed_shape_fails_without_quoting_values() {
        let secret = "s3cr3t-token";
        let cases = [
            json!({"jsonrpc": "1.0", "id": 7, "result": {"ok": true, "supportedMethods": []}}),
            json!({"jsonrpc": "2.0", "id": 8, "result": {"ok": true, "supportedMethods": [secret]}}),
            json!({"jsonrpc": "2.0", "id": "7", "result": {"ok": true, "supportedMethods": []}}),
            json!({"jsonrpc": "2.0", "id": 7}),
            json!({"jsonrpc": "2.0", "id": 7, "result": secret}),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": secret, "supportedMethods": []}}),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"supportedMethods": []}}),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true, "supportedMethods": secret}}),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true, "supportedMethods": [1]}}),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true, "supportedMethods": [format!("a b{secret}")]}}),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": true, "supportedMethods": vec!["m"; MAX_METHODS + 1]}}),
        ];
        for case in cases {
            let err = answer(case.clone()).expect_err(&case.to_string());
            assert_eq!(err.reason(), "malformed", "{case}");
            assert!(!err.to_string().contains(secret), "{err}");
        }
        let err = parse_answer(format!("not json {secret}").as_bytes(), 7).unwrap_err();
        assert_eq!(err, ProbeError::NotJson { line: 1, column: 2 });
        assert_eq!(err.to_string(), "the answer is not a JSON-RPC object (line 1, column 2)");
    }

    #[test]
    fn ok_false_and_rpc_errors_are_named_by_class_and_code_only() {
        let err = answer(json!({"jsonrpc": "2.0", "id": 7, "result": {"ok": false}})).unwrap_err();
        assert_eq!(err.to_string(), "the worker answered ok: false");
        let secret = "ami-role AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG";
        let err = answer(json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": secret}})).unwrap_err();
        assert_eq!(err.to_string(), "the worker answered JSON-RPC error -32601");
        let err = answer(json!({"jsonrpc": "2.0", "id": 7, "error": {"message": secret, "data": secret}})).unwrap_err();
        assert_eq!(err.to_string(), "the worker answered JSON-RPC error without a code");
        assert_eq!(err.reason(), "rpc_error");
    }

    #[test]
    fn every_refused_class_is_recognised_in_each_form() {
        use AddressClass::*;
        let cases = [
            ("127.0.0.1", Loopback),
            ("127.255.0.9", Loopback),
            ("::1", Loopback),
            ("::ffff:127.0.0.1", Loopback),
            ("169.254.0.1", LinkLocal),
            ("169.254.170.2", LinkLocal),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("::ffff:169.254.3.4", LinkLocal),
            ("169.254.169.254", Metadata),
            ("::ffff:169.254.169.254", Metadata),
            ("fd00:ec2::254", Metadata),
            ("100.100.100.200", Metadata),
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("::", Unspecified),
            ("::ffff:0.0.0.0", Unspecified),
        ];
        for (ip, class) in cases {
            assert_eq!(classify(ip.parse().unwrap()), Some(class), "{ip}");
        }
        for ip in ["10.96.0.10", "192.168.1.1", "8.8.8.8", "100.100.100.201", "fd00:ec2::253", "fec0::1", "2001:db8::1"]
        {
            assert_eq!(classify(ip.parse().unwrap()), None, "{ip}");
        }
    }

    #[test]
    fn url_hosts_are_classed_after_the_parser_normalises_them() {
        use AddressClass::*;
        let none = AllowedCidrs::default();
        let cases = [
            ("http://2130706433/rpc", Loopback),
            ("http://0x7f.1/rpc", Loopback),
            ("http://0177.0.0.1/rpc", Loopback),
            ("http://127.1/rpc", Loopback),
            ("http://[::1]:8080/rpc", Loopback),
            ("http://[::ffff:7f00:1]/rpc", Loopback),
            ("http://[0:0:0:0:0:ffff:127.0.0.1]/", Loopback),
            ("http://LOCALHOST./rpc", Loopback),
            ("http://worker.localhost/rpc", Loopback),
            ("http://user:pw@[fe80::1]/", LinkLocal),
            ("http://2852039166/latest/meta-data/", Metadata),
            ("http://169.254.169.254/", Metadata),
            ("http://metadata.google.internal/computeMetadata/v1/", Metadata),
            ("http://Metadata/", Metadata),
            ("http://instance-data/", Metadata),
            ("http://[fd00:ec2::254]/", Metadata),
            ("http://0/", Unspecified),
            ("http://[::]/", Unspecified),
        ];
        for (url, class) in cases {
            assert_eq!(host_class(url, &none), Some(class), "{url}");
        }
        for url in ["http://worker.example/rpc", "http://10.0.0.7:8080/", "http://acme.sandbox-system.svc:8080/"] {
            assert_eq!(host_class(url, &none), None, "{url}");
        }
    }

    #[test]
    fn allowed_cidrs_let_through_exactly_what_they_cover() {
        let loopback = cidrs(&["127.0.0.0/8", "::1/128"]);
        assert_eq!(host_class("http://127.0.0.1:9/rpc", &loopback), None);
        assert_eq!(host_class("http://localhost:9/rpc", &loopback), None);
        assert_eq!(host_class("http://[::ffff:127.0.0.1]/", &loopback), None, "the mapped form of an allowed address");
        assert_eq!(host_class("http://169.254.169.254/", &loopback), Some(AddressClass::Metadata));
        assert_eq!(host_class("http://metadata/", &loopback), Some(AddressClass::Metadata));
        let one = cidrs(&["127.0.0.2/32"]);
        assert_eq!(host_class("http://127.0.0.1/", &one), Some(AddressClass::Loopback));
        assert_eq!(host_class("http://127.0.0.2/", &one), None);
        let any = AllowedCidrs::any();
        assert_eq!(host_class("http://169.254.169.254/", &any), None);
        assert_eq!(host_class("http://[fe80::1]/", &any), None);
    }

    #[test]
    fn service_endpoint_defaults_path_and_rejects_odd_names() {
        let service = |name: &str, path: Option<&str>| WorkerRef {
            service: Some(ServiceRef {
                namespace: "sandbox-system".into(),
                name: name.into(),
                port: 8080,
                path: path.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        };
        let none = AllowedCidrs::default();
        assert_eq!(
            endpoint(&service("acme-worker", None), false, &none).unwrap().as_str(),
            "http://acme-worker.sandbox-system.svc:8080/"
        );
        assert_eq!(
            endpoint(&service("acme-worker", Some("/rpc")), false, &none).unwrap().as_str(),
            "http://acme-worker.sandbox-system.svc:8080/rpc"
        );
        for name in ["evil.com:80/x?", "Upper", "", "-x", "a@b"] {
            assert!(endpoint(&service(name, None), false, &none).is_err(), "{name}");
        }
        assert!(endpoint(&service("w", Some("rpc")), false, &none).is_err());
        // A Service named like a refused host is still a cluster name under its namespace.
        assert!(endpoint(&service("localhost", None), false, &none).is_ok());
        assert!(endpoint(&service("metadata", None), false, &none).is_ok());
    }

    #[test]
    fn worker_urls_need_the_flag_and_are_redacted() {
        let none = AllowedCidrs::default();
        let worker =
            WorkerRef { url: Some("https://user:pw@w.example:9443/rpc?token=abc".into()), ..Default::default() };
        let refused = endpoint(&worker, false, &none).unwrap_err();
        assert_eq!(refused.reason(), "endpoint");
        assert!(refused.to_string().contains("--allow-worker-urls") && !refused.to_string().contains("pw"));
        let url = endpoint(&worker, true, &none).unwrap();
        assert_eq!(redacted(&url), "https://w.example:9443/rpc");
        let bad = WorkerRef { url: Some("file:///etc/passwd".into()), ..Default::default() };
        assert!(endpoint(&bad, true, &none).unwrap_err().to_string().contains("only http and https"));
        assert!(endpoint(&WorkerRef::default(), true, &none).is_err());
    }

    #[test]
    fn refused_worker_urls_fail_closed_with_their_class() {
        let metadata = WorkerRef { url: Some("http://169.254.169.254/latest/meta-data/".into()), ..Default::default() };
        let error = endpoint(&metadata, true, &AllowedCidrs::default()).unwrap_err();
        assert_eq!(error, ProbeError::RefusedAddress(AddressClass::Metadata));
        assert_eq!(error.reason(), "refused_address");
        assert_eq!(
            error.to_string(),
            "the worker's host is a refused address (cloud metadata); worker URLs reach one only where the \
             operator's --worker-url-allowed-cidrs allows it"
        );
        assert!(endpoint(&metadata, true, &cidrs(&["169.254.169.254/32"])).is_ok());
    }
}
