//! The fields each object of a `spec` may have ([`FIELDS`]), for the unknown-field rule.

use std::fmt;
use std::sync::LazyLock;

use serde::de::DeserializeOwned;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::api::{
    ConfigSource, DriverDeclaration, ProviderRef, Requirement, SandboxLeaseSpec, SandboxProviderSpec, SecretKeyRef,
    ServiceRef, WorkerRef, WorkloadBinding, WorkloadRef, WorkloadSelector,
};
use crate::versions::ContractVersion;
use crate::vocabulary::Kind;

/// The fields of each object in `spec` that has fields, in the order [`crate::api`] declares
/// them (the order a denial lists them in). Derived once, so that a field added to a type is
/// known here: the CRD's schema of the object gives a sample with every field set, which the type
/// reads and writes back, in declaration order, minus nothing but what the type keeps as unknown.
pub(super) struct Fields {
    pub(super) provider_spec: Known,
    pub(super) worker: Known,
    pub(super) service: Known,
    pub(super) driver: Known,
    pub(super) binding: Known,
    pub(super) selector: Known,
    pub(super) requirement: Known,
    pub(super) lease_spec: Known,
    pub(super) provider_ref: Known,
    pub(super) workload_ref: Known,
    pub(super) config_source: Known,
    pub(super) secret_key_ref: Known,
}

const PROVIDER: Kind = Kind::SandboxProvider;
const LEASE: Kind = Kind::SandboxLease;

const BINDING: &str = "/properties/spec/properties/workloads/items";
const SELECTOR: &str = "/properties/spec/properties/workloads/items/properties/selector";
const REQUIREMENT: &str =
    "/properties/spec/properties/workloads/items/properties/selector/properties/matchExpressions/items";

pub(super) static FIELDS: LazyLock<Fields> = LazyLock::new(|| Fields {
    provider_spec: Known::of::<SandboxProviderSpec>(PROVIDER, "/properties/spec"),
    worker: Known::of::<WorkerRef>(PROVIDER, "/properties/spec/properties/worker"),
    service: Known::of::<ServiceRef>(PROVIDER, "/properties/spec/properties/worker/properties/service"),
    driver: Known::of::<DriverDeclaration>(PROVIDER, "/properties/spec/properties/environmentDrivers/items"),
    binding: Known::of::<WorkloadBinding>(PROVIDER, BINDING),
    selector: Known::of::<WorkloadSelector>(PROVIDER, SELECTOR),
    requirement: Known::of::<Requirement>(PROVIDER, REQUIREMENT),
    lease_spec: Known::of::<SandboxLeaseSpec>(LEASE, "/properties/spec"),
    provider_ref: Known::of::<ProviderRef>(LEASE, "/properties/spec/properties/providerRef"),
    workload_ref: Known::of::<WorkloadRef>(LEASE, "/properties/spec/properties/workloadRef"),
    config_source: Known::of::<ConfigSource>(LEASE, "/properties/spec/properties/configFrom/items"),
    secret_key_ref: Known::of::<SecretKeyRef>(
        LEASE,
        "/properties/spec/properties/configFrom/items/properties/secretKeyRef",
    ),
});

/// The fields of one object, and where the CRD of `kind` describes it (a JSON pointer).
pub(super) struct Known {
    #[cfg_attr(not(test), allow(dead_code))]
    kind: Kind,
    #[cfg_attr(not(test), allow(dead_code))]
    pointer: &'static str,
    pub(super) fields: Vec<String>,
}

impl Known {
    /// The fields of `T`, in declaration order.
    fn of<T: DeserializeOwned + Serialize>(kind: Kind, pointer: &'static str) -> Known {
        let crd = crate::api::crd_schema(kind, ContractVersion::default());
        let schema = crd.pointer(pointer).expect("the CRD describes the object");
        let value: T = serde_json::from_value(sample(schema)).expect("the schema's sample fits its type");
        let json = serde_json::to_string(&value).expect("serializes");
        let OrderedKeys(fields) = serde_json::from_str(&json).expect("a type with fields writes an object");
        Known { kind, pointer, fields }
    }
}

/// A value that `schema` admits with every property set (patterns aside: the types do not check
/// them).
fn sample(schema: &Value) -> Value {
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        return properties.iter().map(|(key, schema)| (key.clone(), sample(schema))).collect();
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        return Value::Object(Map::from_iter([("key".to_string(), sample(values))]));
    }
    if let Some(first) = schema.get("enum").and_then(|e| e.get(0)) {
        return first.clone();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => Value::from(""),
        Some("integer" | "number") => Value::from(1),
        Some("boolean") => Value::from(true),
        Some("array") => Value::Array(vec![sample(&schema["items"])]),
        _ => Value::Object(Map::new()),
    }
}

/// The keys of a JSON object, in the order they are written.
struct OrderedKeys(Vec<String>);

impl<'de> Deserialize<'de> for OrderedKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeysInOrder;
        impl<'de> Visitor<'de> for KeysInOrder {
            type Value = OrderedKeys;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedKeys, A::Error> {
                let mut keys = Vec::new();
                while let Some(key) = map.next_key()? {
                    map.next_value::<IgnoredAny>()?;
                    keys.push(key);
                }
                Ok(OrderedKeys(keys))
            }
        }
        deserializer.deserialize_map(KeysInOrder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The derivation may lose no field the CRD has, and invent none.
    #[test]
    fn the_known_fields_are_the_crds_properties() {
        let f = &*FIELDS;
        let all = [
            &f.provider_spec,
            &f.worker,
            &f.service,
            &f.driver,
            &f.binding,
            &f.selector,
            &f.requirement,
            &f.lease_spec,
            &f.provider_ref,
            &f.workload_ref,
            &f.config_source,
            &f.secret_key_ref,
        ];
        for known in all {
            let crd = crate::api::crd_schema(known.kind, ContractVersion::default());
            let properties = crd.pointer(known.pointer).and_then(|s| s["properties"].as_object()).expect("properties");
            let mut fields = known.fields.clone();
            fields.sort();
            assert_eq!(fields, properties.keys().cloned().collect::<Vec<_>>(), "{}", known.pointer);
        }
    }
}
