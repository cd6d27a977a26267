//! Why a probe failed, one class a variant.

use std::fmt;
use std::io;
use std::time::Duration;

use super::addresses::AddressClass;

/// An answer larger than this is refused; a real `initialize` result is a few hundred bytes.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

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
pub(super) fn io_kind(kind: &Option<io::ErrorKind>) -> String {
    kind.map(|k| format!(": {k}")).unwrap_or_default()
}
