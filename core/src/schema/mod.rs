//! The CRD layer of docs/contract.md ("Resources and who enforces what"), offline: what the
//! apiserver itself says about an object of a sandcap kind, from the CRD that [`crate::api`]
//! generates — its structural schema (types, required fields, patterns, lengths, enums, bounds,
//! list-map keys) and its CEL rules (`x-kubernetes-validations`, evaluated with kube-cel) — plus
//! the apiserver's own check of `metadata.name`. A pure function of the object and the CRD: no I/O.
//!
//! The messages are the apiserver's, verified against kube-apiserver 1.37.2 and 1.35.4, which
//! write the same forms (see [`Server`]):
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

mod crds;
mod messages;
mod rules;
mod walk;

use serde_json::Value;

use crate::api::{API_VERSION, GROUP, is_dns_subdomain};
use crate::versions::ContractVersion;
use crate::vocabulary::Kind;

use crds::CRDS;
pub use messages::Server;
use messages::{go_quote, go_value};
use rules::Cel;
use walk::Walk;

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

/// Compiles the CRD of `kind` under `version` on this thread now, not on the first [`check`]: a
/// thread that judges only that kind is ready before its first object arrives.
pub fn prepare(kind: Kind, version: ContractVersion) {
    CRDS.with(|crds| {
        crds.crd(version, kind);
    });
}

/// Judges `object` as the apiserver would before any webhook sees it. `old` is the stored object
/// on UPDATE (the transition rules: immutable fields). `server` names the minor whose message
/// forms to write; the minors sandcap supports all write the same ones (see [`Server`]).
/// `version` chooses the CRD: the one the chart installs for that contract version.
pub fn check(object: &Value, old: Option<&Value>, server: Server, version: ContractVersion) -> Result<(), Rejection> {
    // Irrefutable while every variant writes the same forms: a variant that writes others is to
    // be told apart below, as older minors' once were.
    let (Server::V1_35 | Server::V1_37) = server;
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
        let crd = crds.crd(version, kind);
        let mut walk = Walk { crds, errors: &mut errors, blocking: false };
        let spec = object.get("spec").filter(|s| !s.is_null());
        let spec_schema = &crd.schema["properties"]["spec"];
        match spec {
            None => walk.error("spec", "Required value".into(), true),
            Some(spec) => walk.node(spec_schema, spec, &mut "spec".to_string()),
        }
        let blocking = walk.blocking;
        if blocking {
            errors.push(format!("<nil>: Invalid value: null: {NOT_CHECKED}"));
        } else if let (Some(spec), Some(compiled)) = (spec, crd.cel.properties.get("spec")) {
            let old_spec = old.and_then(|o| o.get("spec"));
            let mut cel = Cel { crds, errors: &mut errors };
            cel.evaluate(compiled, spec, old_spec, &mut "spec".to_string());
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
