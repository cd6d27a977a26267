//! Why a `configSchema` was not compiled ([`SchemaError`]), and where in the schema
//! ([`keyword_path`]), in the form status messages and denials use.

use std::fmt::{self, Write as _};

use serde_json::Value;

use super::Limit;
use crate::text::push_key;

/// Why a `configSchema` was not compiled. `at` is the path inside the schema (`.properties.a.pattern`,
/// empty for the schema as a whole), to follow the schema's own field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchemaError {
    OverBudget { at: String, limit: Limit },
    Invalid { at: String, message: String },
}

impl SchemaError {
    pub fn at(&self) -> &str {
        match self {
            SchemaError::OverBudget { at, .. } | SchemaError::Invalid { at, .. } => at,
        }
    }

    /// The problem without its path.
    pub fn problem(&self) -> String {
        match self {
            SchemaError::OverBudget { limit, .. } => format!("exceeds the compile budget: {limit}"),
            SchemaError::Invalid { message, .. } => format!("is not a valid JSON Schema: {message}"),
        }
    }
}

impl fmt::Display for SchemaError {
    /// `configSchema<at>: <problem>`, the form status messages use.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "configSchema{}: {}", self.at(), self.problem())
    }
}

impl std::error::Error for SchemaError {}

/// A keyword's location in `schema` (a JSON Pointer, as a validation error's `schema_path`) in
/// the form of [`SchemaError::at`] (`.properties.token.type`): a segment is an index where the
/// schema holds a list, else a key. Every segment comes from the schema, never from the instance
/// that failed it.
pub fn keyword_path(schema: &Value, pointer: &str) -> String {
    let mut path = String::new();
    let mut at = Some(schema);
    for segment in pointer.split('/').skip(1) {
        let key = segment.replace("~1", "/").replace("~0", "~");
        at = match (at, key.parse::<usize>()) {
            (Some(Value::Array(items)), Ok(i)) => {
                let _ = write!(path, "[{i}]");
                items.get(i)
            }
            (at, _) => {
                push_key(&mut path, &key);
                at.and_then(|v| v.get(&key))
            }
        };
    }
    path
}
