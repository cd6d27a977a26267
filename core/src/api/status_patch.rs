//! A whole status written as one JSON merge patch (RFC 7386), the status write the apiserver
//! serves fastest (docs/controller.md, "Scale"). A merge patch keeps every member it does not
//! name, where sandcap's status is the whole status: so the patch names null each field the
//! kind's status schema knows, under any contract version, and the new status lacks (another
//! version's key, a pin or a worker no longer there). A list is replaced whole, so only the
//! objects outside lists need it.

use serde_json::{Map, Value, json};

use super::crd::crd_schema;
use crate::versions::ContractVersion;
use crate::vocabulary::Kind;

/// The fields a kind's status may hold outside lists, under any contract version.
pub struct StatusPatch {
    /// The status schemas' objects, reduced to their properties: null for a field that is not an
    /// object with properties of its own.
    fields: Value,
}

impl StatusPatch {
    pub fn new(kind: Kind) -> StatusPatch {
        let mut all = Value::Null;
        for version in ContractVersion::ALL {
            union(&mut all, fields(&crd_schema(kind, version)["properties"]["status"]));
        }
        StatusPatch { fields: all }
    }

    /// `{"status": status}`, with null for each field of the schema `status` lacks.
    pub fn patch(&self, mut status: Value) -> Value {
        absent_as_null(&mut status, &self.fields);
        json!({ "status": status })
    }
}

fn fields(schema: &Value) -> Value {
    match schema.get("properties").and_then(Value::as_object) {
        Some(properties) => {
            Value::Object(properties.iter().map(|(k, s)| (k.clone(), fields(s))).collect::<Map<_, _>>())
        }
        None => Value::Null,
    }
}

fn union(all: &mut Value, more: Value) {
    match (all, more) {
        (Value::Object(all), Value::Object(more)) => {
            for (key, inner) in more {
                union(all.entry(key).or_insert(Value::Null), inner);
            }
        }
        (all, more) if all.is_null() => *all = more,
        _ => {}
    }
}

fn absent_as_null(value: &mut Value, fields: &Value) {
    let (Value::Object(value), Value::Object(fields)) = (value, fields) else { return };
    for (key, inner) in fields {
        match value.get_mut(key) {
            Some(present) => absent_as_null(present, inner),
            None => {
                value.insert(key.clone(), Value::Null);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Capabilities, Pinned, SandboxLeaseStatus, SandboxProviderStatus, WorkerStatus};
    use crate::versions::{V1, V2};
    use crate::vocabulary::Capability;

    /// RFC 7386's merge, as the apiserver applies it.
    fn merge(target: &mut Value, patch: &Value) {
        let (Value::Object(target), Value::Object(patch)) = (&mut *target, patch) else {
            *target = patch.clone();
            return;
        };
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                merge(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }

    fn nine_keys() -> SandboxLeaseStatus {
        let mut capabilities = Capabilities::none_of(&V2);
        capabilities.set(Capability::ReusableLeases, true);
        SandboxLeaseStatus {
            observed_generation: Some(3),
            pinned: Some(Pinned { provider_uid: "u".into(), plugin_key: "p".into(), driver_key: "d".into() }),
            contract: Some(ContractVersion::V2),
            capabilities,
            ..SandboxLeaseStatus::default()
        }
    }

    #[test]
    fn the_patch_leaves_exactly_the_new_status() {
        let patch = StatusPatch::new(Kind::SandboxLease);
        for new in [Capabilities::none_of(&V1), Capabilities::none_of(&V2)] {
            let old = json!({"spec": {"providerRef": {"name": "p"}}, "status": nine_keys()});
            let new = SandboxLeaseStatus { capabilities: new, ..Default::default() };
            let mut written = old.clone();
            merge(&mut written, &patch.patch(serde_json::to_value(&new).unwrap()));
            assert_eq!(written["status"], serde_json::to_value(&new).unwrap());
            assert_eq!(written["spec"], old["spec"]);
        }
        let old = SandboxProviderStatus { worker: Some(WorkerStatus::default()), ..Default::default() };
        let mut written = json!({"status": old});
        let new = serde_json::to_value(SandboxProviderStatus::default()).unwrap();
        merge(&mut written, &StatusPatch::new(Kind::SandboxProvider).patch(new.clone()));
        assert_eq!(written["status"], new);
    }

    /// A map outside lists would keep the keys a merge patch does not name: a status field that
    /// is one needs a write that replaces it.
    #[test]
    fn every_object_outside_lists_has_fixed_fields() {
        fn walk(schema: &Value, path: &str) {
            if schema["type"] != "object" {
                return;
            }
            assert!(schema.get("properties").is_some(), "{path} is an object without fixed fields");
            assert!(schema.get("additionalProperties").is_none(), "{path} is a map");
            assert!(schema.get("x-kubernetes-preserve-unknown-fields").is_none(), "{path} keeps unknown fields");
            for (key, inner) in schema["properties"].as_object().unwrap() {
                walk(inner, &format!("{path}.{key}"));
            }
        }
        for kind in [Kind::SandboxProvider, Kind::SandboxLease] {
            for version in ContractVersion::ALL {
                walk(&crd_schema(kind, version)["properties"]["status"], "status");
            }
        }
    }
}
