//! The host's manifest rules' tests.

use serde_json::json;

use super::*;

fn judge(driver: Value) -> Vec<String> {
    let manifest = json!({"id": "acme.k", "version": "1.0.0", "capabilities": ["environment.drivers.register"],
                          "environmentDrivers": [driver]});
    problems(manifest.as_object().unwrap())
}

fn valid() -> Value {
    json!({"driverKey": "k", "kind": "sandbox_provider", "displayName": "K", "configSchema": {"type": "object"}})
}

fn with(field: &str, value: Value) -> Value {
    let mut d = valid();
    d[field] = value;
    d
}

#[test]
fn a_valid_driver_passes_with_every_field_of_the_hosts() {
    assert_eq!(judge(valid()), Vec::<String>::new());
    let caps: Map<String, Value> = Capability::ALL.iter().map(|c| (c.key().to_string(), json!(true))).collect();
    let mut full = with("sandboxCapabilities", Value::Object(caps));
    let every = json!({"description": "d", "supportsReusableLeases": false, "supportsInteractiveSetup": true,
        "interactiveSetupConnectionTypes": ["browser"], "supportsTemplateCapture": true, "templateRefKind": "t",
        "templateConfigBinding": {"field": "template", "unsetFields": ["image"]}, "templateIdentityPaths": ["a"],
        "supportsTemplateDelete": true, "supportsLoginPty": true, "supportsSetupTokenLogin": true});
    full.as_object_mut().unwrap().extend(every.as_object().unwrap().clone());
    assert_eq!(judge(full), Vec::<String>::new());
    assert_eq!(judge(with("configSchema", json!({}))), Vec::<String>::new(), "an empty schema passes");
    assert_eq!(judge(with("configSchema", json!({"$ref": null}))), Vec::<String>::new(), "null is defined");
}

#[test]
fn the_hosts_refusals() {
    let refused = |d: Value, needle: &str| {
        let p = judge(d.clone());
        assert!(p.iter().any(|p| p.contains(needle)), "{d}: {p:?} has no {needle:?}");
    };
    refused(with("sandboxCapabilities", json!({"nativeSyncIn": null})), "sandboxCapabilities.nativeSyncIn");
    refused(with("sandboxCapabilities", json!({"nativeSyncIn": "true"})), "expected boolean");
    refused(with("sandboxCapabilities", json!({"reuseableLeases": true})), "Unrecognized key: \"reuseableLeases\"");
    refused(with("sandboxCapabilities", json!({"concurrentSyncAndExec": true})), "Unrecognized key");
    refused(with("sandboxCapabilities", Value::Null), "expected object, received null");
    refused(with("supportsReusableLeases", Value::Null), "supportsReusableLeases");
    refused(with("supportsLoginPTY", json!(true)), "Unrecognized key: \"supportsLoginPTY\"");
    refused(with("configSchema", json!({"properties": {}})), "requires at least a 'type'");
    refused(with("configSchema", json!([])), "expected record, received array");
    refused(with("displayName", json!("K".repeat(101))), "<=100");
    refused(with("displayName", json!("")), ">=1");
    refused(with("displayName", json!("😀".repeat(51))), "<=100"); // 102 UTF-16 code units
    refused(with("description", json!("d".repeat(501))), "<=500");
    refused(with("driverKey", json!("Kube")), "Environment driver key must start");
    refused(with("kind", json!("plugin")), "Invalid option");
    refused(with("kind", Value::Null), "Invalid option");
    refused(with("templateConfigBinding", json!({"field": "provider"})), "must not replace");
    refused(with("templateConfigBinding", json!({"field": "a", "unsetFields": ["a"]})), "same field");
    refused(with("templateConfigBinding", json!({"field": "a", "unsetFields": ["b", "b"]})), "unique");
    let mut both = with("supportsLoginPty", json!(true));
    both["supportsSetupTokenLogin"] = json!(false);
    refused(both, "deprecated alias");
    let mut bare = valid();
    bare.as_object_mut().unwrap().remove("displayName");
    refused(bare, "displayName: Invalid input: expected string, received undefined");
    assert_eq!(judge(json!(null)), ["environmentDrivers.0: Invalid input: expected object, received null"]);
}

#[test]
fn the_manifests_own_fields() {
    let judge = |m: Value| problems(m.as_object().unwrap());
    assert_eq!(judge(json!({"id": "a", "version": "1.0.0-beta.1+b.2"})), Vec::<String>::new());
    assert!(judge(json!({"id": "A", "version": "1.0.0"}))[0].starts_with("id: Plugin id must start"));
    assert!(judge(json!({"version": "1.0.0"}))[0].contains("received undefined"));
    for bad in ["1.0", "1.0.0-", "1.0.0+", "v1.0.0", "1.0.0-a..b", "1.x.0"] {
        assert!(judge(json!({"id": "a", "version": bad}))[0].contains("semver"), "{bad}");
    }
    let d = valid();
    let undeclared = judge(json!({"id": "a", "version": "1.0.0", "environmentDrivers": [d]}));
    assert_eq!(undeclared.len(), 1);
    assert!(undeclared[0].contains("'environment.drivers.register' is required"));
    let twice = judge(json!({"id": "a", "version": "1.0.0", "capabilities": ["environment.drivers.register"],
                             "environmentDrivers": [d, d, d]}));
    assert_eq!(twice, ["environmentDrivers: Duplicate environment driver keys: k"]);
    assert!(judge(json!({"id": "a", "version": "1.0.0", "environmentDrivers": null}))[0].contains("expected array"));
}
