//! Config resolution: `spec.config` with each `configFrom` Secret merged over it, checked against
//! the driver's `configSchema`, and every way it fails.

use sandcap_core::contract::{self, Capability, Reason, Refusals};
use serde_json::json;

use super::{full_driver, reason, resolve_lease};
use crate::support::*;
use Capability::*;

// ---- config resolution --------------------------------------------------------------------

fn schema_driver(schema: serde_json::Value) -> sandcap_core::api::DriverDeclaration {
    let mut d = full_driver();
    d.config_schema = Some(schema);
    d
}

#[test]
fn config_is_inline_config_with_config_from_objects_merged_over_it_in_order() {
    let mut l = config_from(lease("p", "kubernetes"), &[("a", "k"), ("b", "k")]);
    l.spec.config = Some(json!({"backend": "sandbox-cr", "limits": {"cpu": 1, "mem": 2}, "keep": true}));
    let store = secrets(&[
        ("a", "k", r#"{"backend": "job", "limits": {"cpu": 4}}"#),
        ("b", "k", r#"{"backend": "sandbox-cr", "token": "t"}"#),
    ]);
    let config = contract::resolve_config(&l, &full_driver(), store).unwrap();
    assert_eq!(config, json!({"backend": "sandbox-cr", "limits": {"cpu": 4, "mem": 2}, "keep": true, "token": "t"}));
    let empty = contract::resolve_config(&lease("p", "k"), &full_driver(), no_secrets).unwrap();
    assert_eq!(empty, json!({}));
}

#[test]
fn every_config_resolution_failure_narrows_and_names_the_secret_never_the_value() {
    const SECRET: &str = "hunter2-super-secret";
    let schema = json!({"type": "object", "properties": {"token": {"type": "integer"}, "n": {"maxLength": 3}}});
    type Store = &'static [(&'static str, &'static str, &'static str)];
    let table: Vec<(sandcap_core::api::SandboxLease, Store, &str)> = vec![
        (config_from(lease("p", "kubernetes"), &[("creds", "config.json")]), &[], "Secret creds does not exist"),
        (
            config_from(lease("p", "kubernetes"), &[("creds", "config.json")]),
            &[("creds", "other", "{}")],
            "has no key config.json",
        ),
        (
            config_from(lease("p", "kubernetes"), &[("creds", "config.json")]),
            &[("creds", "config.json", "hunter2-super-secret not json")],
            "is not valid JSON",
        ),
        (
            config_from(lease("p", "kubernetes"), &[("creds", "config.json")]),
            &[("creds", "config.json", "[\"hunter2-super-secret\"]")],
            "does not hold a JSON object",
        ),
        (
            config_from(lease("p", "kubernetes"), &[("creds", "config.json")]),
            &[("creds", "config.json", r#"{"token": "hunter2-super-secret"}"#)],
            "fails the driver's configSchema at configSchema.properties.token.type",
        ),
        (
            config_from(lease("p", "kubernetes"), &[("creds", "config.json")]),
            &[("creds", "config.json", r#"{"n": "hunter2-super-secret"}"#)],
            "at configSchema.properties.n.maxLength",
        ),
    ];
    for (l, store, expect) in table {
        let err = contract::resolve_config(&l, &schema_driver(schema.clone()), secrets(store)).unwrap_err();
        assert!(err.to_string().contains(expect), "{err} should contain {expect}");
        assert!(!err.to_string().contains(SECRET), "secret leaked: {err}");
        let p = provider("p", "u", vec![schema_driver(schema.clone())]);
        let r = resolve_lease(&reuse(l), Some(&p), &all_verified(), &Refusals::default(), secrets(store));
        assert_eq!(reason(&r.resolution, PersistentProcessSessions), Reason::NarrowedByConfigResolution);
        assert_eq!(reason(&r.resolution, IncrementalSessionOutput), Reason::NarrowedByConfigResolution);
        assert!(r.resolution.is_granted(IndependentControlCommands) && r.resolution.is_granted(NativeSyncIn));
        assert!(r.resolution.explanations.iter().all(|e| !e.message.contains(SECRET)));
    }
}

/// A lease's readers may not read its Secrets: a failure names the schema's keyword, never where
/// in the config it failed, which may be a key only the Secret holds.
#[test]
fn a_schema_violation_names_the_keyword_never_a_key_of_the_secret() {
    const KEY: &str = "zebraQuokkaPrivateKeyName";
    const SECRET: &str = r#"{"zebraQuokkaPrivateKeyName": {"nested": [1, "hunter2-super-secret"]}, "plain": {"zebraQuokkaPrivateKeyName": 7}}"#;
    let cases = [
        (json!({"additionalProperties": {"type": "string"}}), "configSchema.additionalProperties.type"),
        (json!({"additionalProperties": false}), "configSchema.additionalProperties"),
        (json!({"patternProperties": {"^z": {"type": "string"}}}), "configSchema.patternProperties[\"^z\"].type"),
        (json!({"propertyNames": {"maxLength": 5}}), "configSchema.propertyNames.maxLength"),
        (json!({"maxProperties": 1}), "configSchema.maxProperties"),
        (json!({"unevaluatedProperties": false}), "configSchema.unevaluatedProperties"),
        (
            json!({"additionalProperties": {"properties": {"nested": {"items": {"type": "integer"}}}}}),
            "configSchema.additionalProperties.properties.nested.items.type",
        ),
        (
            json!({"properties": {"plain": {"additionalProperties": {"type": "string"}}}}),
            "configSchema.properties.plain.additionalProperties.type",
        ),
        (
            json!({"properties": {"plain": {"$ref": "#/$defs/strings"}}, "$defs": {"strings": {"additionalProperties": {"type": "string"}}}}),
            "configSchema.$defs.strings.additionalProperties.type",
        ),
        (
            json!({"allOf": [true, {"additionalProperties": {"type": "string"}}]}),
            "configSchema.allOf[1].additionalProperties.type",
        ),
        (json!({"not": {"type": "object"}}), "configSchema.not"),
        (json!(false), "configSchema"),
    ];
    let l = config_from(lease("p", "kubernetes"), &[("creds", "config.json")]);
    for (schema, at) in cases {
        let err =
            contract::resolve_config(&l, &schema_driver(schema.clone()), secrets(&[("creds", "config.json", SECRET)]));
        let message = err.unwrap_err().to_string();
        assert_eq!(message, format!("the resolved config fails the driver's configSchema at {at}"), "{schema}");
        assert!(!message.contains(KEY) && !message.contains("hunter2"), "{message}");
    }
}

#[test]
fn inline_config_that_is_not_an_object_is_a_config_failure() {
    let mut l = lease("p", "kubernetes");
    l.spec.config = Some(json!(["not", "an", "object"]));
    assert!(
        contract::resolve_config(&l, &full_driver(), no_secrets).unwrap_err().to_string().contains("not a JSON object")
    );
}

#[test]
fn config_schema_defaults_to_draft_2020_12_unless_schema_names_another() {
    let mut l = lease("p", "kubernetes");
    l.spec.config = Some(json!({"pair": [1, "x"]}));
    // prefixItems exists only from draft 2020-12 on.
    let modern =
        json!({"type": "object", "properties": {"pair": {"prefixItems": [{"type": "integer"}, {"type": "integer"}]}}});
    assert!(contract::resolve_config(&l, &schema_driver(modern.clone()), no_secrets).is_err());
    let mut draft7 = modern;
    draft7["$schema"] = json!("http://json-schema.org/draft-07/schema#");
    assert!(contract::resolve_config(&l, &schema_driver(draft7), no_secrets).is_ok(), "draft 7 ignores prefixItems");
}
