//! The CRD of each kind for one contract version: the derived CRD with the version's capability
//! schemas in place of the placeholders and a printer column per capability key.

use kube::CustomResourceExt;
use serde_json::{Value, json};

use super::capabilities::{PLACEHOLDER, schema_for};
use super::{SandboxLease, SandboxProvider};
use crate::versions::{ContractVersion, V1};
use crate::vocabulary::{Capability, Kind};

/// The CRD of `kind` as the apiserver holds it under contract `version`, as JSON.
pub fn crd(kind: Kind, version: ContractVersion) -> Value {
    let derived = match kind {
        Kind::SandboxProvider => SandboxProvider::crd(),
        Kind::SandboxLease => SandboxLease::crd(),
    };
    let mut crd = serde_json::to_value(derived).expect("CRDs serialize");
    fill_placeholders(&mut crd, version);
    let served = &mut crd["spec"]["versions"][0];
    let columns = served["additionalPrinterColumns"].as_array_mut().expect("the CRDs have printer columns");
    // Before the last column, Age.
    let age = columns.pop().expect("the CRDs have printer columns");
    columns.extend(version.contract().capabilities().map(|cap| column(kind, cap)));
    columns.push(json!({"name": "Contract", "type": "string", "priority": 1, "jsonPath": ".status.contract",
        "description": "the contract version that resolved it"}));
    columns.push(age);
    crd
}

/// The `openAPIV3Schema` of the CRD of `kind` under `version`.
pub fn crd_schema(kind: Kind, version: ContractVersion) -> Value {
    crd(kind, version)["spec"]["versions"][0]["schema"]["openAPIV3Schema"].take()
}

/// A provider shows its first driver's capabilities, the first three by default; a lease shows the
/// six of v1 by default. The rest appear with `-o wide`.
fn column(kind: Kind, cap: Capability) -> Value {
    let (path, wide, description) = match kind {
        Kind::SandboxProvider => (".status.drivers[0].capabilities", cap as usize >= 3, Some("first driver")),
        Kind::SandboxLease => (".status.capabilities", !V1.has(cap), None),
    };
    let mut column = json!({"name": cap.column(), "type": "boolean", "jsonPath": format!("{path}.{}", cap.key())});
    if wide {
        column["priority"] = json!(1);
    }
    if let Some(description) = description {
        column["description"] = json!(description);
    }
    column
}

fn fill_placeholders(node: &mut Value, version: ContractVersion) {
    match node {
        Value::Object(map) => {
            let placeholder = map.get("format").and_then(Value::as_str).and_then(|f| f.strip_prefix(PLACEHOLDER));
            if let Some(which) = placeholder.map(str::to_string) {
                map.remove("format");
                for (k, v) in schema_for(&which, version).as_object().expect("a schema is an object") {
                    // The field's own documentation stays, but a derived default is the type's
                    // `Default`, which cannot know the version's keys (an empty map, which the
                    // apiserver refuses against the version's required keys).
                    if k == "default" {
                        map.insert(k.clone(), v.clone());
                    } else {
                        map.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
            }
            map.values_mut().for_each(|v| fill_placeholders(v, version));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| fill_placeholders(v, version)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled_and_each_version_lists_its_keys() {
        for version in ContractVersion::ALL {
            for kind in Kind::ALL {
                let crd = crd(kind, version);
                assert!(!crd.to_string().contains(PLACEHOLDER), "{kind} {version}");
                let columns = crd["spec"]["versions"][0]["additionalPrinterColumns"].as_array().unwrap().clone();
                let shown =
                    version.contract().capabilities().filter(|c| columns.iter().any(|col| col["name"] == c.column()));
                assert_eq!(shown.count(), version.contract().keys.len());
                assert_eq!(columns.last().unwrap()["name"], "Age");
            }
        }
        let lease = crd_schema(Kind::SandboxLease, ContractVersion::V2);
        let effective = &lease["properties"]["status"]["properties"]["capabilities"];
        assert_eq!(effective["required"].as_array().unwrap().len(), 9);
    }
}
