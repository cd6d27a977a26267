//! The lease's rules, its immutable fields (transition rules, on update only), and null optional
//! fields.

use sandcap_core::schema::Server;
use serde_json::{Value, json};

use super::{SKIPPED, check, denial, errors, provider_case};
use crate::support::*;

#[test]
fn lease_schema_rules() {
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (
            set(lease_json(), "/spec/policy", json!("Reuse")),
            vec![
                "spec.policy: Unsupported value: \"Reuse\": supported values: \"Ephemeral\", \"ReuseByEnvironment\"",
                SKIPPED,
            ],
        ),
        (
            remove(lease_json(), "/spec/environment"),
            vec!["spec.environment: Invalid value: environment is required when policy is ReuseByEnvironment"],
        ),
        (
            set(lease_json(), "/spec/environment", json!("")),
            vec!["spec.environment: Invalid value: environment is required when policy is ReuseByEnvironment"],
        ),
        // One problem per field: a wrong type is only a wrong type.
        (
            set(lease_json(), "/spec/environment", json!(7)),
            vec![
                "spec.environment: Invalid value: \"integer\": spec.environment in body must be of type string: \"integer\"",
                SKIPPED,
            ],
        ),
        (
            set(lease_json(), "/spec/providerRef/name", json!("Acme_K8s")),
            vec![
                "spec.providerRef.name: Invalid value: \"Acme_K8s\": spec.providerRef.name in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'",
            ],
        ),
        (
            set(
                lease_json(),
                "/spec/configFrom",
                Value::Array((0..17).map(|i| json!({"secretKeyRef": {"name": format!("s{i}"), "key": "k"}})).collect()),
            ),
            vec!["spec.configFrom: Too many: 17: must have at most 16 items", SKIPPED],
        ),
        (
            set(lease_json(), "/spec/configFrom/0/secretKeyRef/key", json!("a/b")),
            vec![
                "spec.configFrom[0].secretKeyRef.key: Invalid value: \"a/b\": spec.configFrom[0].secretKeyRef.key in body should match '^[-._a-zA-Z0-9]+$'",
            ],
        ),
        (remove(lease_json(), "/spec/workloadRef/kind"), vec!["spec.workloadRef.kind: Required value", SKIPPED]),
        (
            set(lease_json(), "/spec/config", json!("backend=job")),
            vec![
                "spec.config: Invalid value: \"string\": spec.config in body must be of type object: \"string\"",
                SKIPPED,
            ],
        ),
        (
            set(lease_json(), "/spec/nativeFileSyncUnsupported", json!("no")),
            vec![
                "spec.nativeFileSyncUnsupported: Invalid value: \"string\": spec.nativeFileSyncUnsupported in body must be of type boolean: \"string\"",
                SKIPPED,
            ],
        ),
    ];
    for (object, expected) in cases {
        assert_eq!(errors(&object, None, Server::V1_37), expected);
        assert!(denial(&object).starts_with("SandboxLease.sandcap.dev \"run-42\" is invalid: "));
    }
    assert_eq!(check(&remove(remove(lease_json(), "/spec/policy"), "/spec/environment"), None, Server::V1_37), Ok(()));
}

#[test]
fn immutable_fields_are_transition_rules_checked_only_on_update() {
    let old = provider_json();
    let new = provider_case("/spec/pluginKey", json!("acme.other"));
    assert_eq!(check(&new, None, Server::V1_37), Ok(()), "a create has no old object");
    for server in [Server::V1_35, Server::V1_37] {
        assert_eq!(
            errors(&new, Some(&old), server),
            [
                "spec.pluginKey: Invalid value: \"acme.other\": pluginKey is immutable: to register another plugin, create a new SandboxProvider"
            ]
        );
    }
    assert_eq!(check(&provider_case("/spec/version", json!("1.5.0")), Some(&old), Server::V1_37), Ok(()));
    let old = lease_json();
    let new = set(old.clone(), "/spec/providerRef/driverKey", json!("docker"));
    assert_eq!(
        errors(&new, Some(&old), Server::V1_37),
        [
            "spec.providerRef: Invalid value: providerRef is immutable: to use another provider or driver, create a new SandboxLease"
        ]
    );
}

#[test]
fn null_optional_fields_count_as_absent() {
    assert_eq!(check(&set(lease_json(), "/spec/workloadRef", Value::Null), None, Server::V1_37), Ok(()));
    // A null service is no service: the one-of rule names the worker.
    assert_eq!(
        errors(&provider_case("/spec/worker/service", Value::Null), None, Server::V1_37),
        ["spec.worker: Invalid value: set exactly one of service or url: neither is set"]
    );
}
