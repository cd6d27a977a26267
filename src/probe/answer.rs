//! The worker protocol's `initialize`: the request, and the judgement of its answer.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::SandboxProviderSpec;

use super::error::ProbeError;

/// Bounds on what a worker may write into `status.worker.supportedMethods`.
pub(super) const MAX_METHODS: usize = 256;
pub(super) const MAX_METHOD_LEN: usize = 128;
pub(super) const API_VERSION: u32 = 1;

/// The `initialize` request of the worker protocol.
pub(super) fn initialize_request(id: u64, spec: &SandboxProviderSpec, instance_id: &str) -> Value {
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

#[derive(Deserialize)]
pub(super) struct Answer {
    jsonrpc: Option<Value>,
    id: Option<Value>,
    result: Option<Value>,
    error: Option<RpcError>,
}

#[derive(Deserialize)]
pub(super) struct RpcError {
    code: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct InitializeResult {
    ok: Option<bool>,
    supported_methods: Option<Value>,
}

/// Judges the answer body. Errors describe the answer's shape, never quote its values (a JSON-RPC
/// error's message included), so a misbehaving worker can neither fill the status nor tell the
/// provider's author what answered at its address.
pub(super) fn parse_answer(body: &[u8], expected_id: u64) -> Result<Vec<String>, ProbeError> {
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
    // An answer that lists no methods at all verifies nothing, as an empty list does: it is the
    // worker's claim, not a malformed answer. Anything but a list is malformed.
    let list = match result.supported_methods {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(malformed("the answer's result.supportedMethods is not a list")),
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

pub(super) fn is_method_name(m: &str) -> bool {
    !m.is_empty() && m.len() <= MAX_METHOD_LEN && m.chars().all(|c| c.is_ascii_graphic())
}
