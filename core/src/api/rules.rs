//! The rules the CRD carries for the apiserver: patterns, bounds, and the schemas written by hand.

use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use regex::Regex;
use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::Value;

use crate::vocabulary::{DriverKind, LeasePolicy, WorkloadKind};

use super::workloads::SelectorOperator;

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
/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters
/// (Kubernetes' qualified name).
pub(super) const LABEL_KEY_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
pub(super) const LABEL_KEY_MAX: u32 = 317;
/// A label value: at most 63 characters, empty allowed.
pub(super) const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
pub(super) const LABEL_VALUE_MAX: u32 = 63;
/// A Secret data key.
pub(super) const SECRET_KEY_PATTERN: &str = "^[-._a-zA-Z0-9]+$";
/// Most drivers one provider declares, capability keys one driver sets (the nine of contract v2 plus room for
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
/// The most one config source may hold: `spec.config` as compact JSON, or one `configFrom` Secret
/// value. An honest config is a handful of settings, a few KiB; 64 KiB leaves room for an embedded
/// script or certificate, and keeps what sandcap holds of a lease within a budget
/// (docs/controller.md, "Memory"): 150 leases at the bound cost it about 10 MiB where 150 of 900 KB
/// cost 144 MiB. The apiserver cannot measure it (a value without a schema has no size in the
/// structural schema, and CEL sees no field of it), so the webhook refuses it and the
/// controllers hold it for configs stored without the webhook.
pub const MAX_CONFIG_BYTES: usize = 64 * 1024;
/// What a config source over [`MAX_CONFIG_BYTES`] is told: the webhook after `spec.config: `, the
/// `ConfigResolved` condition after the source's name.
pub const CONFIG_TOO_LARGE: &str = "is over 65536 bytes as JSON, the most a config source may hold";

/// Whether `value`, written as compact JSON, is longer than [`MAX_CONFIG_BYTES`]: counted as it
/// is written, and no further than the bound.
pub fn exceeds_config_bound(value: &Value) -> bool {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            if self.0 > MAX_CONFIG_BYTES { Err(std::io::ErrorKind::FileTooLarge.into()) } else { Ok(bytes.len()) }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // Writing a `Value` fails only where the count stops it.
    serde_json::to_writer(&mut Count(0), value).is_err()
}

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

/// As [`driver_kind_schema`], for a binding's kind.
pub(super) fn workload_kind_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "enum": WorkloadKind::ALL.map(WorkloadKind::as_str)})
}

/// As [`driver_kind_schema`], for a selector requirement's operator.
pub(super) fn selector_operator_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "enum": SelectorOperator::ALL.map(SelectorOperator::as_str)})
}

/// A selector's `matchLabels`: label keys to values, at most [`MAX_OBJECT_KEYS`].
pub(super) fn match_labels_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "maxProperties": MAX_OBJECT_KEYS,
        "additionalProperties": {"type": "string", "pattern": LABEL_VALUE_PATTERN, "maxLength": LABEL_VALUE_MAX},
        "x-kubernetes-validations": [{
            "rule": format!("self.all(k, size(k) <= {LABEL_KEY_MAX} && k.matches({}))", serde_json::to_string(LABEL_KEY_PATTERN).expect("a string")),
            "message": "every key must be a label key (an optional DNS-subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.')"
        }],
    })
}

/// A requirement's values: label values, at most [`MAX_OBJECT_KEYS`].
pub(super) fn label_values_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "maxItems": MAX_OBJECT_KEYS,
        "items": {"type": "string", "pattern": LABEL_VALUE_PATTERN, "maxLength": LABEL_VALUE_MAX},
    })
}
