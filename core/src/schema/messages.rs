//! The apiserver's forms of writing a value in a message.

use serde_json::Value;

/// Which Kubernetes minor's message forms to write (`sandcap validate --kubernetes-version`): the
/// oldest and the newest minor the end-to-end tests run, verified on 1.35.4 and 1.37.2 (1.36 was
/// not tried). Both write the same forms, so [`check`](super::check) does not tell them apart; a
/// minor that writes others gets its own variant, and `check` branches on it. Older minors wrote
/// three of them differently (k8s.io/apimachinery's `field.Error` printed a map with `%#v` and a
/// nil value as the string `"null"`, and apiextensions-apiserver gave a failed CEL rule the node's
/// schema type as its value); 1.35 and 1.37 write:
///
/// | | 1.35, 1.37 |
/// |---|---|
/// | CEL rule failed | `Invalid value: <message>` on an object or a list, `Invalid value: "<the string>": <message>` on a string |
/// | list-map key repeated | `Duplicate value: {"driverKey":"k"}` |
/// | CEL rules skipped | `<nil>: Invalid value: null: some validation rules were not checked ...` |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Server {
    V1_35,
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
