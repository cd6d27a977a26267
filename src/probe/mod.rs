//! The worker probe (docs/contract.md, "Capabilities": what verifies): one JSON-RPC 2.0
//! `initialize` over HTTP POST.
//!
//! Everything that can go wrong is fail-closed: the outcome is `Failed` with its class
//! ([`ProbeError`]), and the caller verifies nothing. The worker is untrusted input, so the answer
//! is bounded in time and size, redirects are not followed, and messages never quote the answer
//! (its body, a JSON-RPC error's text) or a URL's credentials or query (either may carry a token).
//! What status says is coarser still ([`FailureClass`]): whoever creates a provider chooses where
//! its worker is and reads its status, which must not tell them what answers at an internal
//! address. The finer class, a status or error code and the transport's causes go to the log.
//!
//! A worker URL is chosen by whoever may create a provider, so it may not reach the node's or the
//! cloud's own services ([`sandcap_core::addresses::AddressClass`]) unless the operator allows
//! those addresses (`--worker-url-allowed-cidrs`). The check holds where the connection is made:
//! an IP literal is checked before the request, and a host name's addresses are filtered as it is
//! resolved.

mod answer;
mod endpoint;
mod error;
mod plugin;
mod resolver;
#[cfg(test)]
mod tests;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::Url;
use tracing::Instrument;

use sandcap_core::api::{MAX_CA_BUNDLE_BYTES, SandboxProvider, SandboxProviderSpec, WorkerPlugin, WorkerRef};
use sandcap_core::contract::{Verified, check_worker_plugin};

use answer::{Answered, initialize_request, parse_answer};
pub use endpoint::{WorkerUrlError, endpoint, parse_worker_url, redacted};
pub use error::{FailureClass, MAX_ANSWER_BYTES, ProbeError, ProbeFailure, SetupError};
use resolver::{GuardedResolver, Lookup, ResolveError, system_lookup};
use sandcap_core::addresses::WorkerPolicy;
use sandcap_core::addresses::literal_ip;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// What one probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The worker answered `ok: true`; `methods` is its `supportedMethods`, sorted, without
    /// duplicates; `plugin` the plugin it says it is, when it said (and it is the one named).
    Succeeded { methods: Vec<String>, plugin: Option<WorkerPlugin> },
    /// Nothing is verified; the failure's message is safe to publish.
    Failed(ProbeFailure),
}

impl ProbeOutcome {
    pub fn verified(&self) -> Verified {
        match self {
            ProbeOutcome::Succeeded { methods, .. } => Verified::methods(methods.iter().cloned()),
            ProbeOutcome::Failed(_) => Verified::nothing(),
        }
    }

    /// The plugin the worker said it is: the one named, or ([`ProbeError::OtherPlugin`]) another.
    pub fn plugin(&self) -> Option<&WorkerPlugin> {
        match self {
            ProbeOutcome::Succeeded { plugin, .. } => plugin.as_ref(),
            ProbeOutcome::Failed(ProbeFailure { error: ProbeError::OtherPlugin { reported, .. }, .. }) => {
                Some(reported)
            }
            ProbeOutcome::Failed(_) => None,
        }
    }

    /// Whether this outcome was judged against the identity `spec` names now: one that depends
    /// on the plugin identity (a worker that said which plugin it is) judged against another
    /// `pluginKey` or `version` must be probed again.
    pub fn judged_for(&self, spec: &SandboxProviderSpec) -> bool {
        match self {
            ProbeOutcome::Succeeded { plugin: Some(plugin), .. } => check_worker_plugin(spec, plugin).is_ok(),
            ProbeOutcome::Failed(ProbeFailure { error: ProbeError::OtherPlugin { other, .. }, .. }) => {
                other.named_id == spec.plugin_key && other.named_version == spec.version
            }
            _ => true,
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

/// Probes workers. Cheap to clone: the HTTP connection pool is shared.
#[derive(Clone, Debug)]
pub struct Prober {
    http: reqwest::Client,
    resolver: Arc<GuardedResolver>,
    timeout: Duration,
    policy: WorkerPolicy,
    instance_id: String,
    next_id: Arc<AtomicU64>,
}

/// Where one probe connects, and what it trusts.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    pub url: &'a Url,
    /// Connect here instead of where the URL's host resolves: one endpoint of a Service, whose
    /// certificate is for the Service's name (the URL's host) and not for the endpoint's address.
    pub address: Option<SocketAddr>,
    /// PEM CA certificates an https worker's certificate must chain to, instead of the system's.
    pub ca: Option<&'a [u8]>,
}

impl Prober {
    /// `timeout` bounds connecting and the whole exchange; `policy` is where the operator lets
    /// workers be; `instance_id` is sent as `instanceInfo.instanceId` (the operator's identity).
    ///
    /// The certificates https workers are verified with are the system's (`SSL_CERT_FILE`,
    /// `SSL_CERT_DIR`, the platform store), unless a provider gives its own (`spec.worker.caBundle`).
    /// Where the system's yield none (a missing or empty file, a minimal image), the prober is
    /// built without any: every https probe of a provider without its own CA then fails its
    /// handshake (`tls`, the `Unreachable` class), and http workers are probed as ever. The error
    /// is what no setting here can cause (reqwest refusing a client with no roots).
    pub fn new(timeout: Duration, policy: WorkerPolicy, instance_id: impl Into<String>) -> Result<Prober, SetupError> {
        Prober::with_lookup(timeout, policy, instance_id, system_lookup())
    }

    /// [`Prober::new`] with the host names looked up by `lookup`.
    fn with_lookup(
        timeout: Duration,
        policy: WorkerPolicy,
        instance_id: impl Into<String>,
        lookup: Lookup,
    ) -> Result<Prober, SetupError> {
        crate::tls::install_default_provider();
        let resolver = Arc::new(GuardedResolver { allowed: policy.allowed_cidrs.clone(), lookup });
        let http = match builder(timeout, &resolver).build() {
            Ok(http) => http,
            Err(error) => {
                tracing::warn!(
                    error = %error_chain(&error),
                    "no CA certificates to verify https workers with (SSL_CERT_FILE, SSL_CERT_DIR, the system store): \
                     https probes fail their handshake, http probes work"
                );
                builder(timeout, &resolver).tls_certs_only([]).build().map_err(|e| SetupError(error_chain(&e)))?
            }
        };
        Ok(Prober { http, resolver, timeout, policy, instance_id: instance_id.into(), next_id: Arc::default() })
    }

    /// Where the worker of `worker` answers, under this prober's flags (see [`endpoint::endpoint`]).
    pub fn endpoint(&self, worker: &WorkerRef) -> Result<Url, ProbeError> {
        endpoint(worker, &self.policy)
    }

    /// Probes the provider's worker at the endpoint its spec names, with the CA it gives.
    pub async fn probe(&self, provider: &SandboxProvider) -> ProbeOutcome {
        let ca = match ca_bundle(&provider.spec.worker) {
            Ok(ca) => ca,
            Err(error) => return ProbeOutcome::Failed(error.into()),
        };
        match self.endpoint(&provider.spec.worker) {
            Ok(url) => self.probe_at(Target { url: &url, address: None, ca: ca.as_deref() }, &provider.spec).await,
            Err(error) => ProbeOutcome::Failed(error.into()),
        }
    }

    /// Probes the worker at `url` with the manifest built from `spec`.
    pub async fn probe_url(&self, url: &Url, spec: &SandboxProviderSpec) -> ProbeOutcome {
        self.probe_at(Target { url, address: None, ca: None }, spec).await
    }

    /// Probes the worker at `target` with the manifest built from `spec`, in a span that names
    /// the endpoint (within the provider's reconcile span).
    pub async fn probe_at(&self, target: Target<'_>, spec: &SandboxProviderSpec) -> ProbeOutcome {
        let span =
            tracing::info_span!("probe", url = %target.url, address = target.address.map(tracing::field::display));
        self.probe_in_span(target, spec).instrument(span).await
    }

    async fn probe_in_span(&self, target: Target<'_>, spec: &SandboxProviderSpec) -> ProbeOutcome {
        // An address given or an IP literal is connected to without resolving, so it is checked
        // here; a name is checked by the resolver, on every address it resolves to.
        let ip = target.address.map(|a| a.ip()).or_else(|| literal_ip(target.url));
        let result = match ip.and_then(|ip| self.policy.allowed_cidrs.refuses(ip)) {
            Some(class) => Err(ProbeError::RefusedAddress(class).into()),
            None => match self.client_for(&target) {
                Ok(http) => self.initialize(&http, target.url, spec).await,
                Err(error) => Err(error.into()),
            },
        };
        let result = result.and_then(|Answered { methods, plugin }| {
            // A worker that says it is another plugin, or another version, verifies nothing.
            match plugin.as_ref().map(|reported| check_worker_plugin(spec, reported)) {
                Some(Err(other)) => {
                    let reported = Box::new(plugin.unwrap_or_default());
                    Err(ProbeError::OtherPlugin { other: Box::new(other), reported }.into())
                }
                _ => Ok(ProbeOutcome::Succeeded { methods, plugin }),
            }
        });
        match result {
            Ok(outcome) => outcome,
            Err(failure) => ProbeOutcome::Failed(ProbeFailure { endpoint: Some(redacted(target.url)), ..failure }),
        }
    }

    /// The shared client, or for a target with its own address or CA a client of its own (which
    /// keeps no connection once the probe is done).
    fn client_for(&self, target: &Target<'_>) -> Result<reqwest::Client, ProbeError> {
        if target.address.is_none() && target.ca.is_none() {
            return Ok(self.http.clone());
        }
        let mut builder = builder(self.timeout, &self.resolver).pool_max_idle_per_host(0);
        if let (Some(address), Some(host)) = (target.address, target.url.host_str()) {
            builder = builder.resolve(host, address);
        }
        if let Some(pem) = target.ca {
            let certs = reqwest::Certificate::from_pem_bundle(pem).ok().filter(|c| !c.is_empty());
            let certs = certs.ok_or_else(|| ProbeError::Endpoint(NOT_A_CA_BUNDLE.into()))?;
            builder = builder.tls_certs_only(certs);
        }
        builder.build().map_err(|e| ProbeError::Endpoint(format!("no client for this worker: {}", error_chain(&e))))
    }

    async fn initialize(
        &self,
        http: &reqwest::Client,
        url: &Url,
        spec: &SandboxProviderSpec,
    ) -> Result<Answered, ProbeFailure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let request = initialize_request(id, spec, &self.instance_id);
        let response = http
            .post(url.clone())
            .header(http::header::ACCEPT, "application/json")
            .json(&request)
            .send()
            .await
            .map_err(|e| self.classify_error(&e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(ProbeError::HttpStatus(status).into());
        }
        let body = self.read_bounded(response).await?;
        Ok(parse_answer(&body, id)?)
    }

    /// Reads the body chunk by chunk and gives up as soon as it passes the bound.
    async fn read_bounded(&self, mut response: reqwest::Response) -> Result<Vec<u8>, ProbeFailure> {
        if response.content_length().is_some_and(|n| n > MAX_ANSWER_BYTES as u64) {
            return Err(ProbeError::TooLarge.into());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.classify_error(&e))? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(ProbeError::TooLarge.into());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// The class of a transport error, from its chain of causes, and the causes' own words for
    /// the log ([`ProbeFailure::detail`]). The class does not use their text: a TLS error can carry
    /// the names in the peer's certificate. reqwest's own error names the URL, which may carry
    /// credentials: the causes start below it.
    fn classify_error(&self, e: &reqwest::Error) -> ProbeFailure {
        let causes = causes(e);
        let cause = (!causes.is_empty()).then(|| causes.join(": "));
        ProbeFailure { endpoint: None, error: self.class_of(e), cause }
    }

    fn class_of(&self, e: &reqwest::Error) -> ProbeError {
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

/// The client every probe starts from.
fn builder(timeout: Duration, resolver: &Arc<GuardedResolver>) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(timeout)
        .timeout(timeout)
        // A redirect would let a worker point the operator at another address.
        .redirect(reqwest::redirect::Policy::none())
        // Through a proxy, the proxy would resolve the name and the address check would not hold.
        .no_proxy()
        .dns_resolver(resolver.clone())
        .user_agent(concat!("sandcap/", env!("CARGO_PKG_VERSION")))
}

const NOT_A_CA_BUNDLE: &str =
    "spec.worker.caBundle holds no PEM certificate (base64 of the PEM text, as a webhook's caBundle)";

/// The PEM of `spec.worker.caBundle`, if it gives one.
pub fn ca_bundle(worker: &WorkerRef) -> Result<Option<Vec<u8>>, ProbeError> {
    use base64::Engine as _;
    let Some(encoded) = &worker.ca_bundle else { return Ok(None) };
    let pem = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| ProbeError::Endpoint(NOT_A_CA_BUNDLE.into()))?;
    if pem.len() > MAX_CA_BUNDLE_BYTES {
        return Err(ProbeError::Endpoint(format!(
            "spec.worker.caBundle holds more than {MAX_CA_BUNDLE_BYTES} bytes of PEM"
        )));
    }
    Ok(Some(pem))
}

/// The words of `e`'s causes, outermost first (not `e`'s own).
fn causes(e: &dyn std::error::Error) -> Vec<String> {
    std::iter::successors(e.source(), |c| c.source()).map(|c| c.to_string()).collect()
}

/// `e` and its causes, for a setup error (no URL is involved).
fn error_chain(e: &reqwest::Error) -> String {
    std::iter::once(e.to_string()).chain(causes(e)).collect::<Vec<_>>().join(": ")
}
