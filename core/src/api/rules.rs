//! The rules the CRD carries for the apiserver: patterns, bounds, and the schemas written by hand.

use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use regex::Regex;
use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::Value;

use crate::vocabulary::LeasePolicy;
use crate::vocabulary::{Capability, DriverKind, REMOVED_KEYS};

// The apiserver enforces these (the CRD carries them); `sandcap validate` evaluates the same CRD.
// In `spec`, every string has a maxLength (or an enum), every list a maxItems and every object a
// maxProperties, which counts the unknown keys it keeps too: the apiserver refuses an oversized
// object before the webhook is called, and the CEL rules' worst-case cost stays within its budget.

/// Plugin and driver keys.
pub(super) const KEY_PATTERN: &str = "^[a-z0-9][a-z0-9._-]*$";
/// Semantic versioning 2.0.0 (the regular expression semver.org gives, without named groups).
pub(super) const SEMVER_PATTERN: &str = r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-((0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(\+([0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*))?$";
/// One RFC 1123 label, unanchored: the one spelling both patterns below are built from.
macro_rules! dns_label {
    () => {
        "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    };
}
/// An RFC 1123 label (Service names and namespaces), at most [`DNS_LABEL_MAX`] bytes.
pub(super) const DNS_LABEL_PATTERN: &str = concat!("^", dns_label!(), "$");
pub(super) const DNS_LABEL_MAX: u32 = 63;
/// An RFC 1123 subdomain (resource names), at most [`DNS_SUBDOMAIN_MAX`] bytes.
pub(super) const DNS_SUBDOMAIN_PATTERN: &str = concat!("^", dns_label!(), r"(\.", dns_label!(), ")*$");
pub(super) const DNS_SUBDOMAIN_MAX: u32 = 253;

/// Whether `s` is an RFC 1123 label, by the rule the CRD states: the probe checks a Service's
/// name and namespace with it before it builds a URL of them.
pub fn is_dns_label(s: &str) -> bool {
    static LABEL: LazyLock<Regex> = LazyLock::new(|| Regex::new(DNS_LABEL_PATTERN).expect("a valid pattern"));
    s.len() <= DNS_LABEL_MAX as usize && LABEL.is_match(s)
}

/// Whether `s` is an RFC 1123 subdomain, by the rule the CRD states (and the apiserver applies to
/// every object's `metadata.name`).
pub fn is_dns_subdomain(s: &str) -> bool {
    static SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| Regex::new(DNS_SUBDOMAIN_PATTERN).expect("a valid pattern"));
    s.len() <= DNS_SUBDOMAIN_MAX as usize && SUBDOMAIN.is_match(s)
}
/// A Secret data key.
pub(super) const SECRET_KEY_PATTERN: &str = "^[-._a-zA-Z0-9]+$";
/// Most drivers one provider declares, capability keys one driver sets (the six plus room for
/// the typos the CRD must still see to reject), and `configFrom` entries one lease merges.
pub(super) const MAX_DRIVERS: u32 = 64;
pub(super) const MAX_CAPABILITY_KEYS: u32 = 16;
pub(super) const MAX_CONFIG_SOURCES: u32 = 16;
/// Keys of any object in `spec` that has fields (at most eight): its fields plus room for the
/// typos the schema keeps for the webhook to name. A flood of unknown keys (a request may carry
/// 3 MiB of them) is the apiserver's to refuse, before the webhook is called.
pub(super) const MAX_OBJECT_KEYS: u32 = 16;
/// Top-level keys of a lease's `config`, and so the `properties` a `configSchema` may describe.
pub(super) const MAX_CONFIG_KEYS: u32 = 128;
/// Top-level keywords of a `configSchema`: JSON Schema 2020-12 defines about sixty, annotations
/// and `x-` extensions included.
pub(super) const MAX_SCHEMA_KEYWORDS: u32 = 64;

/// A lease's inline config: any JSON object, bounded in its top-level keys only (the apiserver
/// cannot bound what has no schema; the request size bounds the rest).
pub(super) fn lease_config(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "maxProperties": MAX_CONFIG_KEYS})
}

/// A JSON Schema: any object, bounded in its keywords and in the `properties` it describes (a
/// driver's settings are as many as an inline config may hold, [`MAX_CONFIG_KEYS`]).
pub(super) fn driver_config_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "maxProperties": MAX_SCHEMA_KEYWORDS,
        "properties": {
            "properties": {
                "description": format!("The properties the schema describes, at most {MAX_CONFIG_KEYS} (as many as a lease's inline config may hold)."),
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "maxProperties": MAX_CONFIG_KEYS,
            },
        },
    })
}

/// A hand-written enum schema: the derived one of an `Option` lists `null` among the values,
/// which `kubectl explain` shows as `<no value>` and the apiserver's message as `"null"`.
pub(super) fn driver_kind_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "enum": DriverKind::ALL.map(DriverKind::as_str)})
}

/// Status repeats the declaration's kind; its schema has stayed a plain string since the first
/// CRDs, which the typed field does not need to change.
pub(super) fn driver_kind_status_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": ["string", "null"]})
}

/// As [`driver_kind_schema`]; the default makes the requested policy visible (the POLICY column).
pub(super) fn policy_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "enum": LeasePolicy::ALL.map(LeasePolicy::as_str),
        "default": LeasePolicy::default().as_str(),
    })
}

/// A map of booleans rather than an object with six properties: the apiserver's CEL sees a map's
/// keys, but not the unknown fields of an object, and a typo'd or removed key must reach the
/// rules (not be pruned) to be rejected. The values are nullable for the same reason: the
/// apiserver prunes a null it may not keep, and `reusableLeases: null` pruned would hand the
/// decision to the legacy field unseen; kept, the webhook refuses it.
pub(super) fn capabilities_schema(_: &mut SchemaGenerator) -> Schema {
    let keys: Vec<&str> = Capability::ALL.map(Capability::key).into();
    let known = |keys: &[&str]| keys.iter().map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", ");
    let mut rules: Vec<Value> = REMOVED_KEYS
        .iter()
        .map(|key| {
            serde_json::json!({
                "rule": format!("!('{key}' in self)"),
                "message": format!("{key} was removed from the contract (concurrency is no longer declared): delete it"),
            })
        })
        .collect();
    let all: Vec<&str> = keys.iter().chain(&REMOVED_KEYS).copied().collect();
    let listed = format!("the keys are {}", keys.join(", "));
    rules.push(serde_json::json!({
        "rule": format!("self.all(k, k in [{}])", known(&all)),
        "messageExpression": unknown_keys_message(&known(&all), &listed),
        "message": format!("unknown capability key: {listed}"),
    }));
    let meanings: Vec<String> = Capability::ALL.iter().map(|c| format!("{}: {}", c.key(), c.meaning())).collect();
    json_schema!({
        "description": format!(
            "Capabilities the driver declares, each true or false; omitted defers to the worker, except the opt-in keys. Read only for kind sandbox_provider. Keys: {}.",
            meanings.join("; ")
        ),
        "type": "object",
        "additionalProperties": {"type": "boolean", "nullable": true},
        "maxProperties": MAX_CAPABILITY_KEYS,
        "x-kubernetes-validations": rules,
    })
}

/// How many unknown capability keys the message names (the rest are counted), and the characters
/// of each it shows: an admin sees the typo at once, and the message stays short however long or
/// many the keys are.
const NAMED_KEYS: u32 = 3;
const NAMED_KEY_CHARS: u32 = 64;

/// The CEL `messageExpression` that names the unknown keys: `unknown capability key "reuseableLeases":
/// <listed>`, or `keys "a", "b", "c" and 2 more: <listed>`, each key cut to [`NAMED_KEY_CHARS`]
/// characters and quoted (`strings.quote`, so a newline cannot push the message back to the fixed
/// one). The apiserver iterates a map in random order, so the n-th key is the one with n unknown
/// keys below it (byte order). The rule does without `sort()`, which a CRD's new rules may use only
/// from 1.35 on (CEL's lists library v3 came in 1.34, and an apiserver compiles new rules for the
/// minor before its own). `join()` and `string(int)` are avoided: the apiserver's cost estimate
/// cannot bound the strings they build from a map's keys, and refuses the CRD.
fn unknown_keys_message(known: &str, listed: &str) -> String {
    let unknown = |var: &str| format!("!({var} in [{known}])");
    let count = format!("self.filter(k, {}).size()", unknown("k"));
    let nth = |n: u32| {
        format!(
            "self.filter(k, {} && self.filter(j, {} && j < k).size() == {n}).map(k, strings.quote(k.size() > {NAMED_KEY_CHARS} ? k.substring(0, {NAMED_KEY_CHARS}) + '...' : k))[0]",
            unknown("k"),
            unknown("j"),
        )
    };
    let mut parts = vec![format!("({count} == 1 ? 'unknown capability key ' : 'unknown capability keys ')"), nth(0)];
    parts.extend((1..NAMED_KEYS).map(|n| format!("({count} > {n} ? ', ' + {} : '')", nth(n))));
    let more: Vec<String> = (0..=MAX_CAPABILITY_KEYS - NAMED_KEYS).map(|n| format!("'{n}'")).collect();
    parts.push(format!(
        "({count} > {NAMED_KEYS} ? ' and ' + [{}][{count} - {NAMED_KEYS}] + ' more' : '')",
        more.join(", ")
    ));
    parts.push(format!("': {listed}'"));
    parts.join(" + ")
}

/// `metav1.Condition` list keyed by `type`, so server-side apply merges conditions per type.
pub(super) fn conditions_schema(generator: &mut SchemaGenerator) -> Schema {
    let item = generator.subschema_for::<Condition>();
    json_schema!({
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}
