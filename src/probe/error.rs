//! Why a probe failed, one class a variant.

use std::fmt;
use std::io;
use std::time::Duration;

use sandcap_core::addresses::AddressClass;
use sandcap_core::api::WorkerPlugin;
use sandcap_core::contract::OtherPlugin;
use sandcap_core::vocabulary::words;

/// The prober could not be built (see [`crate::probe::Prober::new`]).
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the worker probe: {0}")]
pub struct SetupError(pub(super) String);

/// An answer larger than this is refused; a real `initialize` result is a few hundred bytes.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

words! {
    /// What a provider's status says of a failed probe: a small fixed set. The provider's author
    /// reads that status and chooses where the worker is, so finer words (an HTTP status, refused
    /// or timed out, which address class) would tell them what answers at an internal address:
    /// those stay in sandcap's log ([`ProbeFailure::detail`]).
    pub enum FailureClass (as_str, parse) {
        /// No HTTP answer: the name does not resolve, no connection, no TLS session, no answer
        /// within the timeout, the exchange broken off; or HTTP 503, what a proxy (or `sandcap
        /// bridge`) answers while nothing serves behind it.
        Unreachable = "the worker is unreachable",
        /// Every address of the worker's host is one the address policy refuses.
        RefusedAddress = "the worker's address is refused by the address policy",
        /// An HTTP answer that is not a JSON-RPC answer to `initialize`: an HTTP error (but 503)
        /// or redirect, a body too large, not JSON, of the wrong shape or for another request.
        NotTheProtocol = "the worker answered something that is not the worker protocol",
        /// A JSON-RPC error, or `ok: false`.
        Declined = "the worker declined initialize",
        /// A worker that says (`result.plugin`) it is another plugin, or another version of it,
        /// than the provider names.
        OtherPlugin = "the worker is another plugin or version than the provider names",
    }
}

/// A failed probe: the endpoint it tried (redacted), if it got as far as one, why it failed and,
/// for the log, the transport error's causes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeFailure {
    pub endpoint: Option<String>,
    pub error: ProbeError,
    pub cause: Option<String>,
}

impl ProbeFailure {
    /// Everything sandcap knows of the failure, in its own words and the transport's: for its log
    /// and for `sandcap resolve --worker-url` (whose caller chose the URL), never for status.
    pub fn detail(&self) -> String {
        let cause = self.cause.as_ref().map(|c| format!(" ({c})")).unwrap_or_default();
        match &self.endpoint {
            Some(endpoint) => format!("probe of {endpoint} failed: {}{cause}", self.error),
            None => format!("{}{cause}", self.error),
        }
    }
}

impl From<ProbeError> for ProbeFailure {
    fn from(error: ProbeError) -> ProbeFailure {
        ProbeFailure { endpoint: None, error, cause: None }
    }
}

impl fmt::Display for ProbeFailure {
    /// What status says: the spec's own problem, or the failure's [`FailureClass`]; for a worker
    /// of another plugin, both identities (docs/contract.md, "The plugin is the one named").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let ProbeError::OtherPlugin { other, .. } = &self.error {
            return match &self.endpoint {
                Some(endpoint) => write!(f, "probe of {endpoint}: {other}, so nothing is verified"),
                None => write!(f, "{other}, so nothing is verified"),
            };
        }
        let Some(class) = self.error.class() else { return self.error.fmt(f) };
        match &self.endpoint {
            Some(endpoint) => write!(f, "probe of {endpoint} failed: {class}; sandcap's log has the detail"),
            None => write!(f, "{class}; sandcap's log has the detail"),
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
    /// The worker answered `ok: true` as another plugin (`result.plugin`): both identities, each
    /// a plugin key and version characters ([`sandcap_core::api::is_plugin_key`]).
    #[error("{other}")]
    OtherPlugin { other: Box<OtherPlugin>, reported: Box<WorkerPlugin> },
}

impl ProbeError {
    /// What status may say of this failure; `None` for a spec the probe cannot use, whose words
    /// come from the spec and the operator's flags alone.
    pub fn class(&self) -> Option<FailureClass> {
        Some(match self {
            ProbeError::Endpoint(_) => return None,
            ProbeError::RefusedAddress(_) => FailureClass::RefusedAddress,
            ProbeError::Timeout(_)
            | ProbeError::Dns
            | ProbeError::ConnectionRefused
            | ProbeError::Connect(_)
            | ProbeError::Tls
            | ProbeError::Transport(_) => FailureClass::Unreachable,
            ProbeError::HttpStatus(status) if *status == http::StatusCode::SERVICE_UNAVAILABLE => {
                FailureClass::Unreachable
            }
            ProbeError::HttpStatus(_)
            | ProbeError::TooLarge
            | ProbeError::NotJson { .. }
            | ProbeError::Malformed(_) => FailureClass::NotTheProtocol,
            ProbeError::RpcError(_) | ProbeError::NotOk => FailureClass::Declined,
            ProbeError::OtherPlugin { .. } => FailureClass::OtherPlugin,
        })
    }

    /// The finer class as a metric label value: a fixed, small set, for the operator.
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
            ProbeError::OtherPlugin { .. } => "other_plugin",
        }
    }
}

/// The operating system's name for an I/O failure ("connection reset", ...): a fixed word list,
/// unlike an error's own text.
pub(super) fn io_kind(kind: &Option<io::ErrorKind>) -> String {
    kind.map(|k| format!(": {k}")).unwrap_or_default()
}
