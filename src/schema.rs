//! The CRD layer of docs/contract.md ("Resources and who enforces what"), offline: what the
//! apiserver itself says about an object of a sandcap kind, from the CRD that [`crate::api`]
//! generates — its structural schema (types, required fields, patterns, lengths, enums, bounds,
//! list-map keys) and its CEL rules (`x-kubernetes-validations`, evaluated with kube-cel) — plus
//! the apiserver's own check of `metadata.name`. A pure function of the object and the CRD: no I/O.
//!
//! The messages are the apiserver's, verified against kube-apiserver 1.37.2 and 1.33.13, which
//! differ in three forms (see [`Server`]; the table shows 1.37's):
//! `<Kind>.sandcap.dev "<name>" is invalid: <error>` for one error and
//! `... is invalid: [<error>, <error>, ...]` for several, each `<path>: <type>: <detail>`:
//!
//! | check | error |
//! |---|---|
//! | required | `spec.version: Required value` |
//! | type | `spec.pluginKey: Invalid value: "integer": spec.pluginKey in body must be of type string: "integer"` |
//! | pattern | `spec.pluginKey: Invalid value: "Acme.Provider": spec.pluginKey in body should match '^[a-z0-9][a-z0-9._-]*$'` |
//! | minLength | `...: Invalid value: "": ... in body should be at least 1 chars long` |
//! | maxLength | `...: Too long: may not be more than 500 bytes` (counted in characters, as go-openapi does) |
//! | enum | `spec.policy: Unsupported value: "Reuse": supported values: "Ephemeral", "ReuseByEnvironment"` |
//! | minimum, maximum | `...: Invalid value: 0: ... in body should be greater than or equal to 1` / `less than or equal to` |
//! | minItems | `...: Invalid value: 0: ... in body should have at least 1 items` |
//! | maxItems, maxProperties | `...: Too many: 65: must have at most 64 items` (maxProperties counts the unknown keys an object keeps, and its defaulted fields) |
//! | list-map key | `spec.environmentDrivers[2]: Duplicate value: {"driverKey":"kubernetes"}` |
//! | CEL on a string | `spec.worker.url: Invalid value: "ftp://x/rpc": <message>` |
//! | CEL on an object | `spec.worker: Invalid value: <message>` (no value shown) |
//!
//! A required, type, enum, maxLength, maxItems or maxProperties error stops the CEL rules (their
//! cost is bounded only for objects that fit the schema), and the apiserver then ends the list
//! with `<nil>: Invalid value: null: some validation rules were not checked because the object
//! was invalid; correct the existing errors to complete validation`. CEL errors follow the
//! schema errors. The apiserver's order among schema errors is not stable (it walks Go maps: the
//! same object gave three different orders in twelve tries), so this module reports them in a
//! fixed order of its own (depth first, keys in the object's order) and comparisons with a real
//! apiserver treat the schema errors as a set.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use kube::CustomResourceExt;
use kube_cel::cel::{self, Context};
use kube_cel::{CompilationResult, CompiledSchema, KubeCelExt};
use serde_json::{Map, Value};

use crate::api::{API_VERSION, GROUP, SandboxLease, SandboxProvider, is_dns_subdomain};
use crate::vocabulary::Kind;

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

/// The apiserver's answer when layer 1 rejects an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub kind: String,
    pub name: String,
    /// Each `<path>: <type>: <detail>`, in the order described in the module documentation.
    pub errors: Vec<String>,
}

impl Rejection {
    /// The apiserver's message: brackets only around more than one error.
    pub fn message(&self) -> String {
        let errors = match self.errors.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        format!("{}.{GROUP} {:?} is invalid: {errors}", self.kind, self.name)
    }
}

/// Judges `object` as the apiserver would before any webhook sees it. `old` is the stored object
/// on UPDATE (the transition rules: immutable fields).
pub fn check(object: &Value, old: Option<&Value>, server: Server) -> Result<(), Rejection> {
    let kind_name = object.get("kind").and_then(Value::as_str).unwrap_or_default();
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
    let reject = |errors| Err(Rejection { kind: kind_name.to_string(), name: name.clone(), errors });
    let Some(kind) = Kind::from_kind(kind_name) else {
        return reject(vec![format!(
            "kind: Unsupported value: {kind_name:?}: supported values: \"SandboxProvider\", \"SandboxLease\""
        )]);
    };
    if object.get("apiVersion").and_then(Value::as_str) != Some(API_VERSION) {
        let found = object.get("apiVersion").map_or_else(|| "null".to_string(), go_value);
        return reject(vec![format!("apiVersion: Unsupported value: {found}: supported values: {API_VERSION:?}")]);
    }
    let mut errors = metadata_errors(object);
    CRDS.with(|crds| {
        let crd = &crds.kinds[kind as usize];
        let mut walk = Walk { crds, server, errors: &mut errors, blocking: false };
        let spec = object.get("spec").filter(|s| !s.is_null());
        let spec_schema = &crd.schema["properties"]["spec"];
        match spec {
            None => walk.error("spec", "Required value".into(), true),
            Some(spec) => walk.node(spec_schema, spec, &mut "spec".to_string()),
        }
        let blocking = walk.blocking;
        if blocking {
            let null = if server == Server::V1_33 { "\"null\"" } else { "null" };
            errors.push(format!("<nil>: Invalid value: {null}: {NOT_CHECKED}"));
        } else if let (Some(spec), Some(compiled)) = (spec, crd.cel.properties.get("spec")) {
            let old_spec = old.and_then(|o| o.get("spec"));
            let mut cel = Cel { crds, server, errors: &mut errors };
            cel.evaluate(compiled, spec_schema, spec, old_spec, &mut "spec".to_string());
        }
    });
    if errors.is_empty() { Ok(()) } else { reject(errors) }
}

const NOT_CHECKED: &str = "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

const DNS_SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// The apiserver's own check of the name, before the CRD's schema.
fn metadata_errors(object: &Value) -> Vec<String> {
    let meta = object.get("metadata");
    let name = meta.and_then(|m| m.get("name")).and_then(Value::as_str);
    let generate = meta.and_then(|m| m.get("generateName")).and_then(Value::as_str);
    match name {
        None if generate.is_none() => vec!["metadata.name: Required value: name or generateName is required".into()],
        Some(name) if !is_dns_subdomain(name) => {
            vec![format!("metadata.name: Invalid value: {}: {DNS_SUBDOMAIN_MESSAGE}", go_quote(name))]
        }
        _ => Vec::new(),
    }
}

/// The CRDs' schemas as JSON and their compiled CEL rules, built once per thread (the compiled
/// programs are not `Sync`), indexed by [`Kind`].
struct Crd {
    schema: Value,
    cel: CompiledSchema,
}

struct Crds {
    kinds: [Crd; 2],
    context: Context<'static>,
    patterns: RefCell<HashMap<String, regex::Regex>>,
}

thread_local! {
    static CRDS: Crds = Crds::new();
}

impl Crds {
    fn new() -> Crds {
        let crd = |kind| {
            let schema = crd_schema(kind);
            let cel = kube_cel::compile_schema(&schema);
            assert!(!cel.has_errors(), "the CRDs' CEL rules compile: {:?}", cel.compilation_errors());
            Crd { schema, cel }
        };
        // In `Kind` order.
        let kinds = Kind::ALL.map(crd);
        Crds { kinds, context: Context::default().with_all(), patterns: RefCell::default() }
    }
}

/// The `openAPIV3Schema` of the CRD of `kind`, as JSON.
pub fn crd_schema(kind: Kind) -> Value {
    let crd = match kind {
        Kind::SandboxProvider => SandboxProvider::crd(),
        Kind::SandboxLease => SandboxLease::crd(),
    };
    let schema = crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref());
    serde_json::to_value(schema.expect("the derived CRDs have a schema")).expect("serializes")
}

/// The CEL walk, over an object that passed the structural schema.
struct Cel<'e> {
    crds: &'e Crds,
    server: Server,
    errors: &'e mut Vec<String>,
}

impl Cel<'_> {
    /// Evaluates the CEL rules of `compiled` and below over `value`; `old` is the stored value at
    /// the same path, for transition rules.
    fn evaluate(
        &mut self,
        compiled: &CompiledSchema,
        schema: &Value,
        value: &Value,
        old: Option<&Value>,
        path: &mut String,
    ) {
        if !compiled.validations.is_empty() {
            let this = cel_value(value);
            let old_cel = old.map(cel_value);
            let mut ctx = self.crds.context.new_inner_scope();
            ctx.add_variable_from_value("self", this);
            if let Some(old) = &old_cel {
                ctx.add_variable_from_value("oldSelf", old.clone());
            }
            for rule in compiled.validations.iter().flatten() {
                if rule.is_transition_rule && old.is_none() {
                    continue;
                }
                if !matches!(rule.program.execute(&ctx), Ok(cel::Value::Bool(true))) {
                    let at = match &rule.rule.field_path {
                        Some(field) => format!("{path}{field}"),
                        None => path.clone(),
                    };
                    let detail = cel_detail(rule, &ctx, value, schema, self.server);
                    self.errors.push(format!("{at}: Invalid value: {detail}"));
                }
            }
        }
        let len = path.len();
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    let (Some(compiled), false) = (compiled.properties.get(key.as_str()), child.is_null()) else {
                        continue;
                    };
                    let _ = write!(path, ".{key}");
                    let old = old.and_then(|o| o.get(key.as_str()));
                    self.evaluate(compiled, &schema["properties"][key.as_str()], child, old, path);
                    path.truncate(len);
                }
            }
            Value::Array(items) => {
                if let Some(compiled) = &compiled.items {
                    for (i, item) in items.iter().enumerate() {
                        let _ = write!(path, "[{i}]");
                        // Transition rules under a list would need the list's keys to pair items;
                        // sandcap's CRDs have none there.
                        self.evaluate(compiled, &schema["items"], item, None, path);
                        path.truncate(len);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The detail of a failed CEL rule: the rule's message, after the node's schema type (1.33) or,
/// from 1.37, after the value of a scalar (and alone for an object or a list).
fn cel_detail(rule: &CompilationResult, ctx: &Context, value: &Value, schema: &Value, server: Server) -> String {
    let message = rule
        .message_program
        .as_ref()
        .and_then(|p| match p.execute(ctx) {
            Ok(cel::Value::String(s)) => Some(s.to_string()),
            _ => None,
        })
        .or_else(|| rule.rule.message.clone())
        .unwrap_or_else(|| format!("failed rule: {}", rule.rule.rule));
    match (server, value) {
        (Server::V1_33, _) => format!("\"{}\": {message}", schema["type"].as_str().unwrap_or_default()),
        (Server::V1_37, Value::Object(_) | Value::Array(_)) => message,
        (Server::V1_37, scalar) => format!("{}: {message}", go_value(scalar)),
    }
}

/// JSON as CEL sees it: a `null` field is absent (`has()` is false), as the apiserver drops it.
fn cel_value(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(f)) => cel::Value::Float(f),
            _ => cel::Value::Null,
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(cel_value).collect())),
        Value::Object(map) => {
            let entries: HashMap<cel::objects::Key, cel::Value> = map
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), cel_value(v)))
                .collect();
            cel::Value::Map(cel::objects::Map { map: Arc::new(entries) })
        }
    }
}

/// The structural-schema walk: every error is collected; `blocking` records whether one of them
/// keeps the apiserver from running the CEL rules.
struct Walk<'e> {
    crds: &'e Crds,
    server: Server,
    errors: &'e mut Vec<String>,
    blocking: bool,
}

impl Walk<'_> {
    fn error(&mut self, path: &str, detail: String, blocking: bool) {
        self.errors.push(format!("{path}: {detail}"));
        self.blocking |= blocking;
    }

    fn node(&mut self, schema: &Value, value: &Value, path: &mut String) {
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

    fn string(&mut self, schema: &Value, s: &str, path: &str) {
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

    fn number(&mut self, schema: &Value, n: &serde_json::Number, path: &str) {
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

    fn array(&mut self, schema: &Value, items: &[Value], path: &mut String) {
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
    fn list_map_keys(&mut self, schema: &Value, items: &[Value], path: &str) {
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
                let key = match self.server {
                    Server::V1_33 => format!("map[string]interface {{}}{}", Value::Object(key)),
                    Server::V1_37 => Value::Object(key).to_string(),
                };
                self.error(&format!("{path}[{i}]"), format!("Duplicate value: {key}"), false);
            } else {
                seen.push(key);
            }
        }
    }

    fn object(&mut self, schema: &Value, map: &Map<String, Value>, path: &mut String) {
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

impl Crds {
    fn matches(&self, pattern: &str, s: &str) -> bool {
        let mut patterns = self.patterns.borrow_mut();
        if !patterns.contains_key(pattern) {
            let re = regex::Regex::new(pattern).expect("the CRDs' patterns compile");
            patterns.insert(pattern.to_string(), re);
        }
        patterns[pattern].is_match(s)
    }
}

fn json_type(value: &Value) -> &'static str {
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
fn go_value(value: &Value) -> String {
    match value {
        Value::String(s) => go_quote(s),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// Go's `%q`: JSON string escaping matches it for the printable characters names and keys use.
fn go_quote(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}
