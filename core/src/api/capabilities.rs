//! The capability maps of the resources (a driver's declaration, status's effective capabilities,
//! an explanation's key) and their schemas, which depend on the contract version: the derived
//! schema holds a placeholder ([`PLACEHOLDER`]) that [`super::crd()`] fills in for the version the
//! CRD is built for, from its table ([`crate::versions`]).

use std::collections::BTreeMap;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};

use super::rules::MAX_CAPABILITY_KEYS;
use crate::versions::{Contract, ContractVersion};
use crate::vocabulary::Capability;

/// Marks where a version's capability schema goes, and which one, as the `format` of the derived
/// schema: the one place a mark survives kube's conversion to the CRD's types (extension keys
/// are dropped, and the field's documentation replaces a description).
pub(super) const PLACEHOLDER: &str = "x-sandcap-capabilities:";

/// The capabilities of the contract that resolved them, each on or off; a key of another version
/// is absent (and reads as off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities([Option<bool>; Capability::ALL.len()]);

impl Capabilities {
    /// Every key of `contract`, each off.
    pub fn none_of(contract: &Contract) -> Capabilities {
        let mut none = Capabilities::default();
        contract.capabilities().for_each(|cap| none.set(cap, false));
        none
    }

    pub fn get(&self, cap: Capability) -> bool {
        self.0[cap as usize].unwrap_or(false)
    }

    pub fn set(&mut self, cap: Capability, on: bool) {
        self.0[cap as usize] = Some(on);
    }

    /// The keys present, with their values, in the contract's order.
    pub fn entries(&self) -> impl Iterator<Item = (Capability, bool)> + '_ {
        Capability::ALL.into_iter().filter_map(|cap| self.0[cap as usize].map(|on| (cap, on)))
    }
}

impl Serialize for Capabilities {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (cap, on) in self.entries() {
            map.serialize_entry(cap.key(), &on)?;
        }
        map.end()
    }
}

/// Tolerant, as the resources are: a key of no version, or a value that is not a boolean, is
/// skipped (a status written by another version must never stop a watch).
impl<'de> Deserialize<'de> for Capabilities {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Capabilities;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of capability keys to booleans")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Capabilities, A::Error> {
                let mut caps = Capabilities::default();
                while let Some(key) = map.next_key::<String>()? {
                    if let (Some(cap), Value::Bool(on)) = (Capability::from_key(&key), map.next_value::<Value>()?) {
                        caps.set(cap, on);
                    }
                }
                Ok(caps)
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

impl JsonSchema for Capabilities {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Capabilities".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "format": format!("{PLACEHOLDER}effective") })
    }
}

/// The capability keys a driver declares, as written: read only through [`Self::get`], so a key of
/// another version or a value that is not a boolean is never read (the CRD and the webhook refuse
/// them).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(transparent)]
pub struct DeclaredCapabilities(pub BTreeMap<String, Value>);

impl DeclaredCapabilities {
    pub fn get(&self, cap: Capability) -> Option<bool> {
        self.0.get(cap.key()).and_then(Value::as_bool)
    }

    pub fn set(&mut self, cap: Capability, value: Option<bool>) {
        match value {
            Some(on) => self.0.insert(cap.key().to_string(), Value::Bool(on)),
            None => self.0.remove(cap.key()),
        };
    }
}

pub(super) fn declared_placeholder(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "format": format!("{PLACEHOLDER}declared") })
}

pub(super) fn key_placeholder(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "format": format!("{PLACEHOLDER}key") })
}

/// The schema a placeholder stands for, in `version`.
pub(super) fn schema_for(placeholder: &str, version: ContractVersion) -> Value {
    let contract = version.contract();
    match placeholder {
        "declared" => declared_schema(contract),
        "effective" => effective_schema(contract),
        "key" => json!({"type": "string", "enum": contract.capabilities().map(Capability::key).collect::<Vec<_>>()}),
        other => unreachable!("no capability schema is called {other}"),
    }
}

fn effective_schema(contract: &Contract) -> Value {
    let properties: serde_json::Map<String, Value> = contract
        .capabilities()
        .map(|cap| (cap.key().to_string(), json!({"type": "boolean", "description": cap.meaning()})))
        .collect();
    json!({
        "description": format!("The capabilities of contract {}, each on or off.", contract.version),
        "type": "object",
        "properties": properties,
        "required": contract.capabilities().map(Capability::key).collect::<Vec<_>>(),
        "default": Capabilities::none_of(contract),
    })
}

/// A map of booleans rather than an object with a property per key: the apiserver's CEL sees a
/// map's keys, but not the unknown fields of an object, and a typo'd, removed or other version's
/// key must reach the rules (not be pruned) to be rejected. The values are nullable for the same
/// reason: the apiserver prunes a null it may not keep, and `reusableLeases: null` pruned would
/// hand the decision to the legacy field unseen; kept, the webhook refuses it.
fn declared_schema(contract: &Contract) -> Value {
    let keys: Vec<&str> = contract.capabilities().map(Capability::key).collect();
    let refused = contract.refused_keys();
    let quoted = |keys: &[&str]| keys.iter().map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", ");
    let mut rules: Vec<Value> = refused
        .iter()
        .map(|key| {
            let message = contract.refusal(key).expect("a refused key has a refusal");
            json!({"rule": format!("!('{key}' in self)"), "message": message})
        })
        .collect();
    let all: Vec<&str> = keys.iter().chain(&refused).copied().collect();
    let listed = format!("the keys of contract {} are {}", contract.version, keys.join(", "));
    rules.push(json!({
        "rule": format!("self.all(k, k in [{}])", quoted(&all)),
        "messageExpression": unknown_keys_message(&quoted(&all), &listed),
        "message": format!("unknown capability key: {listed}"),
    }));
    let meanings: Vec<String> = contract.capabilities().map(|c| format!("{}: {}", c.key(), c.meaning())).collect();
    json!({
        "description": format!(
            "Capabilities the driver declares, each true or false; omitted defers to the worker, except the opt-in keys. Read only for kind sandbox_provider. Keys of contract {}: {}.",
            contract.version,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_capabilities_keep_the_keys_of_the_version_that_wrote_them() {
        let mut caps = Capabilities::none_of(ContractVersion::V1.contract());
        caps.set(Capability::NativeSyncIn, true);
        let written = serde_json::to_value(caps).unwrap();
        assert_eq!(written.as_object().unwrap().len(), 6);
        assert_eq!(written["nativeSyncIn"], true);
        let read: Capabilities =
            serde_json::from_value(json!({"nativeSyncIn": true, "duplexCommandStream": false, "bogus": 1, "x": true}))
                .unwrap();
        assert_eq!(
            read.entries().collect::<Vec<_>>(),
            [(Capability::NativeSyncIn, true), (Capability::DuplexCommandStream, false)]
        );
    }
}
