//! The audit's tests.

use super::*;
use crate::controller::fixtures::{lease, provider};
use crate::judge::MAX_MESSAGE;
use crate::schema::Rejection;
use crate::validation::MAX_PER_KIND;

fn metrics() -> Metrics {
    Metrics::register(&mut prometheus_client::registry::Registry::default())
}

fn audits(metrics: &Metrics) -> Audits {
    Audits::new(Options::default(), metrics)
}

fn gauge(metrics: &Metrics, kind: Kind) -> i64 {
    metrics.nonconforming.get_or_create(&KindLabels { kind: kind.as_str() }).get()
}

/// A lease with `extra` keys in its spec (kept by the CRD, refused by the webhook).
fn lease_with(extra: Value) -> crate::api::SandboxLease {
    let mut l = lease("team-a", "l").of("p", "k").build();
    l.spec.extra = serde_json::from_value(extra).unwrap();
    l
}

#[tokio::test]
async fn a_conforming_object_is_valid() {
    let metrics = metrics();
    let l = lease("team-a", "l").of("p", "k").build();
    let finding = audits(&metrics).finding(&l, &l.spec).await;
    assert_eq!(*finding, Finding { conforms: true, message: "the CRD and the webhook would admit it today".into() });
    assert_eq!(finding.refusal(), None);
    assert_eq!(gauge(&metrics, Kind::SandboxLease), 0);
}

#[tokio::test]
async fn the_webhooks_problems_are_named_and_bounded_as_its_denials_are() {
    let keys: serde_json::Map<String, Value> = (0..12).map(|i| (format!("typo{i:02}"), json!(1))).collect();
    let l = lease_with(Value::Object(keys));
    let finding = audits(&metrics()).finding(&l, &l.spec).await;
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
    let finding = audits(&metrics()).finding(&p, &p.spec).await;
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

#[tokio::test]
async fn each_generation_is_judged_once_and_counted_until_the_object_is_gone() {
    let metrics = metrics();
    let audits = audits(&metrics);
    let mut l = lease_with(json!({"typo": 1}));
    let first = audits.finding(&l, &l.spec).await;
    assert_eq!(gauge(&metrics, Kind::SandboxLease), 1);
    // The same generation is not judged again: what it found is handed back as it is.
    let mut status_only = l.clone();
    status_only.status = Some(Default::default());
    assert!(Arc::ptr_eq(&first, &audits.finding(&status_only, &status_only.spec).await));
    assert_eq!(gauge(&metrics, Kind::SandboxLease), 1, "counted once");
    // Fixed: the next generation conforms.
    l.spec.extra.clear();
    l.metadata.generation = Some(2);
    assert!(audits.finding(&l, &l.spec).await.conforms);
    assert_eq!(gauge(&metrics, Kind::SandboxLease), 0);
    // Broken again, then deleted.
    l.spec.extra.insert("typo".into(), json!(1));
    l.metadata.generation = Some(3);
    assert!(!audits.finding(&l, &l.spec).await.conforms);
    let p = provider("p").driver("k").build();
    assert!(audits.finding(&p, &p.spec).await.conforms);
    assert_eq!((gauge(&metrics, Kind::SandboxLease), gauge(&metrics, Kind::SandboxProvider)), (1, 0));
    audits.forget(l.metadata.uid.as_deref().unwrap());
    assert_eq!(gauge(&metrics, Kind::SandboxLease), 0);
    audits.forget("never seen");
    assert_eq!(gauge(&metrics, Kind::SandboxLease), 0);
}

#[tokio::test]
async fn an_early_judgment_is_taken_by_the_judge_of_its_generation_only() {
    let audits = audits(&metrics());
    let mut l = lease_with(json!({"typo": 1}));
    audits.judge_early(&l, &l.spec);
    assert!(!audits.judge(&l, &l.spec).await.conforms, "the early judgment of its generation");
    assert!(audits.early.lock().unwrap().is_empty(), "taken");
    // An early judgment of a generation since replaced is not taken for the new one.
    audits.judge_early(&l, &l.spec);
    l.spec.extra.clear();
    l.metadata.generation = Some(2);
    assert!(audits.judge(&l, &l.spec).await.conforms);
    // Nor kept for an object deleted before its reconcile.
    audits.judge_early(&l, &l.spec);
    audits.forget(l.metadata.uid.as_deref().unwrap());
    assert!(audits.early.lock().unwrap().is_empty());
}

#[tokio::test]
async fn at_most_early_max_judgments_wait_for_their_reconciles() {
    let audits = audits(&metrics());
    let leases: Vec<_> = (0..EARLY_MAX + 3).map(|i| lease("team-a", &format!("l{i}")).of("p", "k").build()).collect();
    leases.iter().for_each(|l| audits.judge_early(l, &l.spec));
    assert_eq!(audits.early.lock().unwrap().len(), EARLY_MAX);
    // One over the bound is judged when its reconcile asks, as without early judgments.
    let last = leases.last().unwrap();
    assert!(audits.judge(last, &last.spec).await.conforms);
    // A new generation of one that waits replaces its judgment.
    let mut first = leases[0].clone();
    first.metadata.generation = Some(2);
    audits.judge_early(&first, &first.spec);
    assert_eq!(audits.early.lock().unwrap().len(), EARLY_MAX);
    assert_eq!(audits.early.lock().unwrap()["team-a-l0-uid"].0, Some(2));
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
                Some("SandboxProvider") => {
                    serde_json::from_value::<crate::api::SandboxProvider>(raw.clone()).ok().map(|p| stored(&p, &p.spec))
                }
                Some("SandboxLease") => {
                    serde_json::from_value::<crate::api::SandboxLease>(raw.clone()).ok().map(|l| stored(&l, &l.spec))
                }
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
