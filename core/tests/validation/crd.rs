//! The CRD schema's half of the verdict: the schema keeps what the webhook rejects, the webhook
//! decodes what its rules read, and an update is denied only for the problems it brings in.

use sandcap_core::validation::{ALREADY_STORED, MAX_WARNING_LEN, Options, REVIEWED, review};
use serde_json::{Value, json};

use super::D0;
use crate::support::*;

/// Every object node under `spec` that lists properties must keep unknown fields, so a typo'd or
/// removed key reaches the webhook even when a client applies with field validation off.
fn assert_nothing_is_pruned(node: &Value, path: &str) {
    if node.get("properties").is_some()
        || (node.get("type") == Some(&json!("object")) && node.get("additionalProperties").is_none())
    {
        assert_eq!(
            node.get("x-kubernetes-preserve-unknown-fields"),
            Some(&json!(true)),
            "{path} would prune unknown keys"
        );
    }
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            assert_nothing_is_pruned(v, &format!("{path}.{k}"));
        }
    }
    if let Some(items) = node.get("items") {
        assert_nothing_is_pruned(items, &format!("{path}[]"));
    }
}

#[test]
fn crd_schemas_keep_unknown_keys_for_the_webhook_to_reject() {
    use sandcap_core::versions::ContractVersion;
    use sandcap_core::vocabulary::Kind;
    for version in ContractVersion::ALL {
        let spec = |kind| sandcap_core::api::crd_schema(kind, version)["properties"]["spec"].clone();
        let (provider, lease) = (spec(Kind::SandboxProvider), spec(Kind::SandboxLease));
        assert_nothing_is_pruned(&provider, "spec");
        assert_nothing_is_pruned(&lease, "spec");
        let caps = &provider["properties"]["environmentDrivers"]["items"]["properties"]["sandboxCapabilities"];
        // The capability map keeps every key (it is a map of booleans), so the CRD's rules see a
        // removed, typo'd or other version's key (the schema tests).
        assert_eq!(
            caps["additionalProperties"],
            json!({"type": "boolean", "nullable": true}),
            "booleans, a null kept for the webhook to name"
        );
    }
}

#[test]
fn the_webhook_decodes_only_what_the_rules_read_and_keeps_json_semantics() {
    let decode = |json: &str| REVIEWED.decode(json).map_err(|e| e.to_string());
    // Skipped: apiVersion, status, managedFields, annotations; kept: kind, name, generateName, spec.
    let object = r#"{"apiVersion": "v", "kind": "K", "status": {"x": [1, {"y": "\u00e9"}]},
        "metadata": {"name": "n", "generateName": "g", "managedFields": [{}], "annotations": {"a": "b"}},
        "spec": {"a": [1, 2.5, null, true, "s"], "b": {}}}"#;
    let expected = json!({"kind": "K", "metadata": {"name": "n", "generateName": "g"},
        "spec": {"a": [1, 2.5, null, true, "s"], "b": {}}});
    assert_eq!(decode(object), Ok(expected));
    // Escaped keys are still keys, and the last of duplicate keys wins, as in serde_json's Value.
    assert_eq!(decode(r#"{"\u0073pec": 1, "kind": 1, "kind": 2}"#), Ok(json!({"spec": 1, "kind": 2})));
    // A value that is not an object where keys are named is built whole, so the rules name its type.
    for other in [r#""s""#, "[1, [2]]", "7", "-7", "true", "null"] {
        assert_eq!(decode(&format!(r#"{{"metadata": {other}}}"#)), decode_whole(other).map(|v| json!({"metadata": v})));
        assert_eq!(decode(other), decode_whole(other), "{other}");
    }
    // Skipped parts are still checked for syntax; built parts keep serde_json's nesting limit.
    assert!(decode(r#"{"status": {"x": [1,]}}"#).unwrap_err().contains("expected value"));
    assert!(decode(r#"{"status": {}} trailing"#).unwrap_err().contains("trailing characters"));
    let deep = format!(r#"{{"spec": {}1{}}}"#, "[".repeat(200), "]".repeat(200));
    assert!(decode(&deep).unwrap_err().contains("recursion limit exceeded"));
    let deep_skipped = format!(r#"{{"status": {}1{}}}"#, "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(decode(&deep_skipped), Ok(json!({})));
}

fn decode_whole(json: &str) -> Result<Value, String> {
    serde_json::from_str(json).map_err(|e| e.to_string())
}

#[test]
fn updates_deny_only_the_problems_they_bring_in() {
    let options = Options::default();
    // Stored while the operator allowed worker URLs, with a typo'd field the CRD keeps.
    let stored =
        set(remove(provider_json(), "/spec/worker/service"), "/spec/worker/url", json!("https://w.example/rpc"));
    let stored = set(stored, &format!("{D0}/displayname"), json!("typo"));
    let problems = review(&stored, None, &options).problems;
    assert_eq!(problems.len(), 2, "sandcap validate (CREATE) still denies it");
    let ratcheted = |warnings: &[String]| warnings.iter().filter(|w| w.starts_with(ALREADY_STORED)).count();

    // Labels, annotations, or a change elsewhere in the spec: allowed, with what to fix.
    for (pointer, value) in [
        ("/metadata/labels", json!({"team": "a"})),
        ("/metadata/annotations", json!({"n": "b"})),
        ("/spec/version", json!("1.5.0")),
    ] {
        let v = review(&set(stored.clone(), pointer, value), Some(&stored), &options);
        assert!(v.allowed(), "{pointer}: {}", v.message());
        assert_eq!(ratcheted(&v.warnings), 2, "{:?}", v.warnings);
        assert!(v.warnings.iter().all(|w| w.len() < MAX_WARNING_LEN), "{:?}", v.warnings);
    }
    let v = review(&set(stored.clone(), "/metadata/labels", json!({})), Some(&stored), &options);
    assert!(
        v.warnings.iter().any(|w| w.starts_with(&format!("{ALREADY_STORED}spec.worker.url: worker URLs are refused"))),
        "{:?}",
        v.warnings
    );

    // A new problem denies the update, alone in the message; the stored ones stay warnings.
    let v =
        review(&set(stored.clone(), &format!("{D0}/configSchema"), json!({"type": "strin"})), Some(&stored), &options);
    assert_eq!(v.problems.len(), 1, "{}", v.message());
    assert!(v.message().starts_with("spec.environmentDrivers[0].configSchema: "), "{}", v.message());
    assert_eq!(ratcheted(&v.warnings), 2);

    // A fixed problem is no longer mentioned; a CREATE is judged whole.
    let fixed = remove(stored.clone(), &format!("{D0}/displayname"));
    let v = review(&fixed, Some(&stored), &options);
    assert!(v.allowed());
    assert_eq!(ratcheted(&v.warnings), 1, "{:?}", v.warnings);
    assert!(!review(&fixed, None, &options).allowed());
}
