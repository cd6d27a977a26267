//! The worker protocol's `initialize`: the request, and the judgement of its answer.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Error as _, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use sandcap_core::api::{SandboxProviderSpec, WorkerPlugin};

use super::error::ProbeError;
use super::plugin::parse_plugin;

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

/// The answer, its members kept as the text they are in the body (no tree is built of what a
/// worker wrote: a hostile answer costs what its body does, not a `Value` of it).
#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow)]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    error: Option<RpcError>,
}

#[derive(Deserialize)]
struct RpcError {
    code: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeResult<'a> {
    ok: Option<bool>,
    #[serde(borrow)]
    supported_methods: Option<&'a RawValue>,
    #[serde(borrow)]
    plugin: Option<&'a RawValue>,
}

/// What an answer that said `ok: true` holds.
#[derive(Debug)]
pub(super) struct Answered {
    /// `supportedMethods`, sorted and deduplicated.
    pub methods: Vec<String>,
    /// `plugin`, the plugin the worker says it is, if it said.
    pub plugin: Option<WorkerPlugin>,
}

/// Judges the answer body. Errors describe the answer's shape, never quote its values (a JSON-RPC
/// error's message included), so a misbehaving worker can neither fill the status nor tell the
/// provider's author what answered at its address.
pub(super) fn parse_answer(body: &[u8], expected_id: u64) -> Result<Answered, ProbeError> {
    let malformed = |message: &str| ProbeError::Malformed(message.into());
    let answer: Answer =
        serde_json::from_slice(body).map_err(|e| ProbeError::NotJson { line: e.line(), column: e.column() })?;
    if answer.jsonrpc.and_then(|v| serde_json::from_str::<Cow<str>>(v.get()).ok()).as_deref() != Some("2.0") {
        return Err(malformed("the answer is not JSON-RPC 2.0 (jsonrpc is not \"2.0\")"));
    }
    if answer.id.and_then(|v| serde_json::from_str::<u64>(v.get()).ok()) != Some(expected_id) {
        return Err(ProbeError::Malformed(format!("the answer's id does not match the request id {expected_id}")));
    }
    if let Some(error) = answer.error {
        return Err(ProbeError::RpcError(error.code));
    }
    let result = answer.result.ok_or_else(|| malformed("the answer has neither result nor error"))?;
    let result: InitializeResult = serde_json::from_str(result.get())
        .map_err(|_| malformed("the answer's result is not an InitializeResult object"))?;
    match result.ok {
        Some(true) => {}
        Some(false) => return Err(ProbeError::NotOk),
        None => return Err(malformed("the answer's result has no boolean ok")),
    }
    // An answer that lists no methods at all verifies nothing, as an empty list does: it is the
    // worker's claim, not a malformed answer. Anything but a list is malformed.
    let methods = match result.supported_methods.map(RawValue::get) {
        None | Some("null") => Vec::new(),
        Some(list) => serde_json::from_str::<Methods>(list).map_err(|e| Methods::error(&e))?.0,
    };
    Ok(Answered { methods, plugin: parse_plugin(result.plugin)? })
}

/// `supportedMethods`, sorted and deduplicated, read one item at a time: past [`MAX_METHODS`]
/// items, or at the first item that is not a method name, reading stops.
struct Methods(Vec<String>);

/// Why [`Methods`] stopped, as the serde error's text (its only channel).
const NOT_A_LIST: &str = "not a list";
const TOO_MANY: &str = "too many";

impl Methods {
    fn error(e: &serde_json::Error) -> ProbeError {
        let text = e.to_string();
        let message = if text.starts_with(TOO_MANY) {
            format!("the answer lists more than {MAX_METHODS} supportedMethods")
        } else if let Some(index) = text.strip_prefix("item ").and_then(|t| t.split(' ').next()) {
            format!("the answer's result.supportedMethods[{index}] is not a method name")
        } else {
            "the answer's result.supportedMethods is not a list".into()
        };
        ProbeError::Malformed(message)
    }
}

impl<'de> Deserialize<'de> for Methods {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Methods, D::Error> {
        struct List;
        impl<'de> Visitor<'de> for List {
            type Value = Methods;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(NOT_A_LIST)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Methods, A::Error> {
                let mut methods = Vec::new();
                for index in 0.. {
                    let item = items.next_element::<Cow<'de, str>>().map_err(|_| not_a_method(index))?;
                    let Some(item) = item else { break };
                    if !is_method_name(&item) {
                        return Err(not_a_method(index));
                    }
                    if index == MAX_METHODS {
                        return Err(A::Error::custom(TOO_MANY));
                    }
                    methods.push(item.into_owned());
                }
                methods.sort();
                methods.dedup();
                Ok(Methods(methods))
            }
        }
        fn not_a_method<E: de::Error>(index: usize) -> E {
            E::custom(format!("item {index} is not a method name"))
        }
        deserializer.deserialize_seq(List)
    }
}

pub(super) fn is_method_name(m: &str) -> bool {
    !m.is_empty() && m.len() <= MAX_METHOD_LEN && m.chars().all(|c| c.is_ascii_graphic())
}
