//! The audit's tests.

use super::*;
use crate::controller::fixtures::{lease, provider};
use sandcap_core::judge::MAX_MESSAGE;
use sandcap_core::schema::Rejection;
use sandcap_core::validation::MAX_PER_KIND;

/// What the audit finds of `obj`, whose spec is `spec`.
async fn finding<K: Resource<DynamicType = ()>>(obj: &K, spec: &impl Serialize) -> Arc<Finding> {
    judged(Audits::new(Options::default()).submit(obj, spec)).await
}

/// A lease with `extra` keys in its spec (kept by the CRD, refused by the webhook).
fn lease_with(extra: Value) -> sandcap_core::api::SandboxLease {
    let mut l = lease("team-a", "l").of("p", "k").build();
    l.spec.extra = serde_json::from_value(extra).unwrap();
    l
}

#[tokio::test]
async fn a_conforming_object_is_valid() {
    let l = lease("team-a", "l").of("p", "k").build();
    let finding = finding(&l, &l.spec).await;
    assert_eq!(*finding, Finding { conforms: true, message: "the CRD and the webhook would admit it today".into() });
    assert_eq!(finding.refusal(), None);
}

#[tokio::test]
async fn the_webhooks_problems_are_named_and_bounded_as_its_denials_are() {
    let keys: serde_json::Map<String, Value> = (0..12).map(|i| (format!("typo{i:02}"), json!(1))).collect();
    let l = lease_with(Value::Object(keys));
    let finding = finding(&l, &l.spec).await;
    assert!(!finding.conforms);
    let message = &finding.message;
    assert_eq!(finding.refusal().as_ref(), Some(message));
    assert!(message.starts_with("the webhook would refuse it today: spec.typo00: unknown field"), "{message}");
    assert_eq!(message.matches("unknown field (allowed fields").count(), MAX_PER_KIND, "{message}");
    assert!(message.ends_with("; and 4 more unknown fields"), "{message}");
}

#[tokio::test]
async fn the_crds_errors_come_alone() {
    let mut p = provider("p").driver("k").build();
    p.spec.version = "1.4".into();
    p.spec.extra.insert("typo".into(), json!(1));
    let finding = finding(&p, &p.spec).await;
    assert!(!finding.conforms);
    let message = &finding.message;
    assert!(message.starts_with("the CRD would refuse it today: spec.version: Invalid value: \"1.4\""), "{message}");
    assert!(!message.contains("typo"), "the webhook is not asked: {message}");
}

#[test]
fn the_message_is_at_most_16_kib_whatever_the_problems_are() {
    let errors = (0..20).map(|i| format!("spec.{}{i}: Invalid value: {}", "x".repeat(4000), "y".repeat(4000)));
    let rejection = Rejection { kind: "SandboxProvider".into(), name: "p".into(), errors: errors.collect() };
    let finding = Finding::of(&Judgment::Refused(rejection));
    assert!(!finding.conforms && finding.message.len() <= MAX_MESSAGE, "{}", finding.message.len());
    assert!(finding.message.ends_with("..."));
}

/// The audit judges an object as the cache holds it, typed; the webhook and `sandcap validate`
/// judge the raw object. Every object of the differential corpus and the examples that the
/// types read (only those can be in the cache) gets the same judgment either way.
#[test]
fn an_object_read_into_its_type_is_judged_as_the_raw_object_is() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = ["tests/e2e/corpus/providers.yaml", "tests/e2e/corpus/leases.yaml"].map(|f| root.join(f));
    let examples = std::fs::read_dir(root.join("examples")).unwrap().map(|e| e.unwrap().path());
    let (mut compared, options) = (0, Options::default());
    for path in files.into_iter().chain(examples).filter(|p| p.extension().is_some_and(|e| e == "yaml")) {
        for raw in crate::cli::load_objects(&path).unwrap() {
            let typed = match raw["kind"].as_str() {
                Some("SandboxProvider") => serde_json::from_value::<sandcap_core::api::SandboxProvider>(raw.clone())
                    .ok()
                    .map(|p| stored(&p, &p.spec)),
                Some("SandboxLease") => serde_json::from_value::<sandcap_core::api::SandboxLease>(raw.clone())
                    .ok()
                    .map(|l| stored(&l, &l.spec)),
                _ => None,
            };
            // A `null` reads as absent in the types, and the CRD lets one through only where
            // absent is allowed too; but it counts as a key (maxProperties) to the CRD.
            let Some(typed) = typed.filter(|_| !has_null(&raw["spec"])) else { continue };
            let (raw_judgment, typed_judgment) =
                (judge(&raw, &options, Server::default()), judge(&typed, &options, Server::default()));
            assert_eq!(Finding::of(&typed_judgment), Finding::of(&raw_judgment), "{}: {raw}", path.display());
            compared += 1;
        }
    }
    assert!(compared > 50, "only {compared} objects compared");
}

fn has_null(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.iter().any(has_null),
        Value::Object(map) => map.values().any(has_null),
        _ => false,
    }
}
