//! The apiserver's forms of writing a value in a message, which differ between minors.

use serde_json::Value;

/// Which apiserver's message forms to write. They differ in three places, verified on 1.33.13
/// and 1.37.2 (the minors between were not tried):
///
/// | | 1.33 | 1.37 |
/// |---|---|---|
/// | CEL rule failed | `Invalid value: "object": <message>` (the schema type) | `Invalid value: <message>` on an object, `Invalid value: "<the string>": <message>` on a string |
/// | list-map key repeated | `Duplicate value: map[string]interface {}{"driverKey":"k"}` | `Duplicate value: {"driverKey":"k"}` |
/// | CEL rules skipped | `<nil>: Invalid value: "null": some validation rules were not checked ...` | `<nil>: Invalid value: null: ...` |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Server {
    V1_33,
    #[default]
    V1_37,
}

pub(super) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A value as Go's `field.Error` prints it: strings quoted, numbers and booleans bare, anything
/// else as JSON.
pub(super) fn go_value(value: &Value) -> String {
    match value {
        Value::String(s) => go_quote(s),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// Go's `%q`: JSON string escaping matches it for the printable characters names and keys use.
pub(super) fn go_quote(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}
