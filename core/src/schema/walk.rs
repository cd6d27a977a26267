//! The structural schema: types, required fields, patterns, lengths, enums, bounds, list-map keys.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::crds::Crds;
use super::messages::*;

/// The structural-schema walk: every error is collected; `blocking` records whether one of them
/// keeps the apiserver from running the CEL rules.
pub(super) struct Walk<'e> {
    pub(super) crds: &'e Crds,
    pub(super) errors: &'e mut Vec<String>,
    pub(super) blocking: bool,
}

impl Walk<'_> {
    pub(super) fn error(&mut self, path: &str, detail: String, blocking: bool) {
        self.errors.push(format!("{path}: {detail}"));
        self.blocking |= blocking;
    }

    pub(super) fn node(&mut self, schema: &Value, value: &Value, path: &mut String) {
        if value.is_null() {
            // Only fields marked nullable reach here with null (a non-nullable null is pruned).
            return;
        }
        let Some(expected) = schema.get("type").and_then(Value::as_str) else {
            return;
        };
        let actual = json_type(value);
        let fits = actual == expected || (expected == "number" && actual == "integer");
        if !fits {
            let detail =
                format!("Invalid value: \"{actual}\": {path} in body must be of type {expected}: \"{actual}\"");
            return self.error(path, detail, true);
        }
        match value {
            Value::String(s) => self.string(schema, s, path),
            Value::Number(n) => self.number(schema, n, path),
            Value::Array(items) => self.array(schema, items, path),
            Value::Object(map) => self.object(schema, map, path),
            Value::Bool(_) | Value::Null => {}
        }
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
            && !allowed.contains(value)
        {
            let supported: Vec<String> = allowed.iter().map(go_value).collect();
            let detail = format!("Unsupported value: {}: supported values: {}", go_value(value), supported.join(", "));
            self.error(path, detail, true);
        }
    }

    pub(super) fn string(&mut self, schema: &Value, s: &str, path: &str) {
        let chars = s.chars().count() as u64;
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && chars > max
        {
            self.error(path, format!("Too long: may not be more than {max} bytes"), true);
        }
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && chars < min
        {
            let detail = format!("Invalid value: {}: {path} in body should be at least {min} chars long", go_quote(s));
            self.error(path, detail, false);
        }
        if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
            && !self.crds.matches(pattern, s)
        {
            let detail = format!("Invalid value: {}: {path} in body should match '{pattern}'", go_quote(s));
            self.error(path, detail, false);
        }
    }

    pub(super) fn number(&mut self, schema: &Value, n: &serde_json::Number, path: &str) {
        let (Some(v), shown) = (n.as_f64(), n.to_string()) else { return };
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && v < min
        {
            let detail = format!("Invalid value: {shown}: {path} in body should be greater than or equal to {min}");
            self.error(path, detail, false);
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && v > max
        {
            let detail = format!("Invalid value: {shown}: {path} in body should be less than or equal to {max}");
            self.error(path, detail, false);
        }
    }

    pub(super) fn array(&mut self, schema: &Value, items: &[Value], path: &mut String) {
        let n = items.len() as u64;
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && n > max
        {
            self.error(path, format!("Too many: {n}: must have at most {max} items"), true);
        }
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && n < min
        {
            self.error(path, format!("Invalid value: {n}: {path} in body should have at least {min} items"), false);
        }
        let len = path.len();
        if let Some(item_schema) = schema.get("items") {
            for (i, item) in items.iter().enumerate() {
                let _ = write!(path, "[{i}]");
                self.node(item_schema, item, path);
                path.truncate(len);
            }
        }
        if schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
            self.list_map_keys(schema, items, path);
        }
    }

    /// Items of a list-type map must differ in their keys; the apiserver reports each repeat.
    pub(super) fn list_map_keys(&mut self, schema: &Value, items: &[Value], path: &str) {
        let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
            .as_array()
            .map(|k| k.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let key_of = |item: &Value| -> Option<Map<String, Value>> {
            let item = item.as_object()?;
            keys.iter().map(|k| Some(((*k).to_string(), item.get(*k)?.clone()))).collect()
        };
        let mut seen: Vec<Map<String, Value>> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let Some(key) = key_of(item) else { continue };
            if seen.contains(&key) {
                self.error(&format!("{path}[{i}]"), format!("Duplicate value: {}", Value::Object(key)), false);
            } else {
                seen.push(key);
            }
        }
    }

    pub(super) fn object(&mut self, schema: &Value, map: &Map<String, Value>, path: &mut String) {
        let properties = schema.get("properties").and_then(Value::as_object);
        if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64) {
            // The apiserver counts the keys after pruning and defaulting, unknown ones included:
            // it drops the nulls of the fields that are neither nullable nor defaulted (an unknown
            // key has no schema to say so, and keeps its null), and adds each absent defaulted one.
            let dropped = |(key, value): &(&String, &Value)| {
                let field = properties.and_then(|p| p.get(key.as_str()));
                value.is_null()
                    && field
                        .is_some_and(|f| f.get("nullable") != Some(&Value::Bool(true)) && f.get("default").is_none())
            };
            let defaulted = properties
                .into_iter()
                .flatten()
                .filter(|(key, field)| field.get("default").is_some() && !map.contains_key(key.as_str()))
                .count();
            let keys = map.iter().filter(|entry| !dropped(entry)).count() + defaulted;
            if keys as u64 > max {
                self.error(path, format!("Too many: {keys}: must have at most {max} items"), true);
            }
        }
        let len = path.len();
        for (key, child) in map {
            let child_schema = match (properties.and_then(|p| p.get(key.as_str())), schema.get("additionalProperties"))
            {
                (Some(s), _) => s,
                (None, Some(s)) if s.is_object() => s,
                _ => continue,
            };
            let _ = write!(path, ".{key}");
            self.node(child_schema, child, path);
            path.truncate(len);
        }
        for required in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
            let Some(key) = required.as_str() else { continue };
            if map.get(key).is_none_or(Value::is_null) {
                self.error(&format!("{path}.{key}"), "Required value".into(), true);
            }
        }
    }
}
