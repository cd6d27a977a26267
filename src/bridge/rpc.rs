//! The SDK's wire protocol on the worker's stdio (`@paperclipai/plugin-sdk`'s `protocol.js`):
//! JSON-RPC 2.0, one message a line. What the bridge sends, and the reading of what the worker
//! writes, its members kept as the text they are in the line (no tree is built of what a worker
//! wrote beyond the `InitializeResult` kept).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

/// The SDK's error codes (`JSONRPC_ERROR_CODES`, `PLUGIN_RPC_ERROR_CODES`) the bridge uses.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const WORKER_UNAVAILABLE: i64 = -32000;

/// A method name longer than this is not repeated in the answer to it.
const MAX_QUOTED_METHOD: usize = 128;

/// The params the host sends with `initialize` (`plugin-worker-manager.js`, `startInternal`): the
/// manifest, an empty config (the host's bootstrap config; a company's arrives later through
/// `configChanged`, which the bridge never sends), the instance, the manifest's own `apiVersion`,
/// and `databaseNamespace: null` (no database: the bridge applies no migrations).
pub fn initialize_params(manifest: &Map<String, Value>, instance_id: &str, host_version: &str) -> Value {
    json!({
        "manifest": manifest,
        "config": {},
        "instanceInfo": {"instanceId": instance_id, "hostVersion": host_version},
        "apiVersion": manifest.get("apiVersion").cloned().unwrap_or(Value::Null),
        "databaseNamespace": null,
    })
}

/// One request line (with its `\n`).
pub fn request(id: u64, method: &str, params: &Value) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

/// The answer to a worker's call into the host: the bridge is not a host and grants nothing, so
/// every method is one it does not handle, with the code the host gives an unregistered method.
pub fn not_a_host(id: &RawValue, method: &str) -> Vec<u8> {
    let method: String = method.chars().take(MAX_QUOTED_METHOD).collect();
    let message = format!("sandcap bridge is not a host: method \"{method}\" is not available");
    line(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": METHOD_NOT_FOUND, "message": message}}))
}

fn line(value: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(value).expect("a JSON value serializes");
    bytes.push(b'\n');
    bytes
}

/// A JSON-RPC message's members, borrowed from its text: a worker's line, or a probe's request.
#[derive(Deserialize)]
pub(super) struct Envelope<'a> {
    #[serde(borrow)]
    pub jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub id: Option<&'a RawValue>,
    #[serde(borrow)]
    pub method: Option<Cow<'a, str>>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ErrorObject {
    code: Option<i64>,
}

/// A line the worker wrote, read as the SDK's `isJsonRpc*` functions read it.
#[derive(Debug)]
pub enum Incoming<'a> {
    /// An answer to one of the bridge's requests (only numeric ids are the bridge's).
    Response { id: Option<u64>, outcome: Result<&'a RawValue, Option<i64>> },
    /// A call into the host.
    Request { id: &'a RawValue, method: Cow<'a, str> },
    /// A notification (`log`, stream events): nothing to answer.
    Notification { method: Cow<'a, str> },
}

/// Why a line is not a message.
#[derive(Debug, PartialEq, Eq)]
pub enum NotRpc {
    NotJson,
    NotJsonRpc,
}

impl std::fmt::Display for NotRpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NotRpc::NotJson => "a line that is not JSON",
            NotRpc::NotJsonRpc => "a JSON line that is not a JSON-RPC 2.0 message",
        })
    }
}

pub fn classify(line: &[u8]) -> Result<Incoming<'_>, NotRpc> {
    let envelope: Envelope = serde_json::from_slice(line).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => NotRpc::NotJsonRpc,
        _ => NotRpc::NotJson,
    })?;
    if envelope.jsonrpc.as_deref() != Some("2.0") {
        return Err(NotRpc::NotJsonRpc);
    }
    // An `id` of null reads as none: for a request as the SDK reads it (a request has a non-null
    // id), for a response as one to no request of the bridge's.
    let id = envelope.id.filter(|id| id.get() != "null");
    match (envelope.method, id) {
        (Some(method), Some(id)) => Ok(Incoming::Request { id, method }),
        (Some(method), None) => Ok(Incoming::Notification { method }),
        (None, _) if envelope.result.is_some() || envelope.error.is_some() => {
            let id = id.and_then(|id| serde_json::from_str::<u64>(id.get()).ok());
            let outcome = match (envelope.error.filter(|e| e.get() != "null"), envelope.result) {
                (Some(error), _) => Err(serde_json::from_str::<ErrorObject>(error.get()).ok().and_then(|e| e.code)),
                (None, Some(result)) => Ok(result),
                (None, None) => return Err(NotRpc::NotJsonRpc),
            };
            Ok(Incoming::Response { id, outcome })
        }
        (None, _) => Err(NotRpc::NotJsonRpc),
    }
}

/// Why an `InitializeResult` is not kept.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    NotAnObject,
    NotOk,
    TooLarge(usize),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::NotAnObject => f.write_str("its initialize result is not an object"),
            Refused::NotOk => f.write_str("its initialize result is not ok: true (the host kills such a worker)"),
            Refused::TooLarge(max) => write!(f, "its initialize result is larger than {max} bytes"),
        }
    }
}

/// The probe's `result`: the worker's `InitializeResult` as it wrote it, with the member `plugin`
/// (`identity`) set, as JSON text. The host kills a worker whose result is not `ok`.
pub fn probe_result(result: &RawValue, identity: &Value, max: usize) -> Result<Box<RawValue>, Refused> {
    if result.get().len() > max {
        return Err(Refused::TooLarge(max));
    }
    let Ok(mut members) = serde_json::from_str::<Map<String, Value>>(result.get()) else {
        return Err(Refused::NotAnObject);
    };
    if members.get("ok") != Some(&Value::Bool(true)) {
        return Err(Refused::NotOk);
    }
    members.insert("plugin".into(), identity.clone());
    Ok(serde_json::value::to_raw_value(&members).expect("a JSON object serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.into()).unwrap()
    }

    #[test]
    fn lines_are_read_as_the_sdk_reads_them() {
        let response = classify(br#"{"jsonrpc":"2.0","id":1,"result":{"ok":true}}"#).unwrap();
        let Incoming::Response { id: Some(1), outcome: Ok(result) } = response else { panic!("{response:?}") };
        assert_eq!(result.get(), r#"{"ok":true}"#);
        let error =
            classify(br#"{"jsonrpc":"2.0","id":2,"error":{"code":-32002,"message":"Worker already initialized"}}"#);
        assert!(matches!(error, Ok(Incoming::Response { id: Some(2), outcome: Err(Some(-32002)) })));
        let call = classify(br#"{"jsonrpc":"2.0","id":7,"method":"state.get","params":{}}"#).unwrap();
        assert!(matches!(call, Incoming::Request { ref method, .. } if method == "state.get"));
        let log = classify(br#"{"jsonrpc":"2.0","method":"log","params":{"level":"info"}}"#);
        assert!(matches!(log, Ok(Incoming::Notification { ref method }) if method == "log"));
        let null_id = classify(br#"{"jsonrpc":"2.0","id":null,"method":"log"}"#);
        assert!(matches!(null_id, Ok(Incoming::Notification { ref method }) if method == "log"));
        let parse_error = classify(br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700}}"#);
        assert!(matches!(parse_error, Ok(Incoming::Response { id: None, outcome: Err(Some(-32700)) })));
    }

    #[test]
    fn garbage_is_not_a_message() {
        assert_eq!(classify(b"hello from console.log").unwrap_err(), NotRpc::NotJson);
        assert_eq!(classify(b"{\"jsonrpc\":\"2.0\"").unwrap_err(), NotRpc::NotJson);
        assert_eq!(classify(b"[1,2]").unwrap_err(), NotRpc::NotJsonRpc);
        assert_eq!(classify(br#"{"jsonrpc":"1.0","id":1,"result":1}"#).unwrap_err(), NotRpc::NotJsonRpc);
        assert_eq!(classify(br#"{"jsonrpc":"2.0","id":1}"#).unwrap_err(), NotRpc::NotJsonRpc);
        assert_eq!(classify(br#"{"jsonrpc":"2.0","id":1,"method":7}"#).unwrap_err(), NotRpc::NotJsonRpc);
    }

    #[test]
    fn a_call_into_the_host_is_refused_with_the_hosts_code() {
        let id = raw("\"a\"");
        let answer: Value = serde_json::from_slice(&not_a_host(&id, "secrets.resolve")).unwrap();
        assert_eq!(answer["id"], "a");
        assert_eq!(answer["error"]["code"], METHOD_NOT_FOUND);
        assert!(answer["error"]["message"].as_str().unwrap().contains("\"secrets.resolve\" is not available"));
        let long = "m".repeat(10_000);
        assert!(not_a_host(&id, &long).len() < 400, "a long method name is not repeated whole");
    }

    #[test]
    fn initialize_carries_what_the_host_sends() {
        let manifest = json!({"id": "acme", "version": "1.0.0", "apiVersion": 1}).as_object().cloned().unwrap();
        let params = initialize_params(&manifest, "inst", "0.1.0");
        assert_eq!(
            params,
            json!({"manifest": manifest, "config": {}, "instanceInfo": {"instanceId": "inst", "hostVersion": "0.1.0"},
                "apiVersion": 1, "databaseNamespace": null})
        );
        let line = request(1, "initialize", &params);
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1, "one line");
    }

    #[test]
    fn the_probes_result_is_the_workers_with_the_identity() {
        let identity = json!({"id": "acme", "version": "1.0.0", "environmentDrivers": []});
        let result =
            probe_result(&raw(r#"{"ok":true,"supportedMethods":["health"],"plugin":"forged"}"#), &identity, 1024);
        let result: Value = serde_json::from_str(result.unwrap().get()).unwrap();
        assert_eq!(
            result,
            json!({"ok": true, "supportedMethods": ["health"], "plugin": identity}),
            "the manifest's wins"
        );
        assert_eq!(probe_result(&raw(r#"{"ok":false}"#), &identity, 1024).unwrap_err(), Refused::NotOk);
        assert_eq!(probe_result(&raw("[]"), &identity, 1024).unwrap_err(), Refused::NotAnObject);
        assert_eq!(probe_result(&raw(r#"{"ok":true}"#), &identity, 4).unwrap_err(), Refused::TooLarge(4));
    }
}
