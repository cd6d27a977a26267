//! What the lease cache keeps of a lease.

use serde_json::json;

use super::*;
use crate::controller::fixtures::{T0, later, lease, time};
use sandcap_core::vocabulary::Capability;

/// A status as sandcap publishes one, with a pin.
fn published() -> SandboxLease {
    let mut l = lease("team-a", "l").of("p", "k").config_from("s", "a").build();
    l.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
    l.metadata.annotations = Some([("note".to_string(), "x".repeat(1000))].into());
    l.metadata.managed_fields = Some(vec![Default::default()]);
    l.status = Some(
        serde_json::from_value(json!({
            "observedGeneration": 1,
            "conditions": [
                {"type": "Resolved", "status": "True", "reason": "Resolved", "message": "1 of 6",
                 "observedGeneration": 1, "lastTransitionTime": T0},
                {"type": "ConfigResolved", "status": "False", "reason": "SecretNotFound", "message": "m",
                 "observedGeneration": 1, "lastTransitionTime": "2030-01-01T00:00:07Z"},
                {"type": "SomeoneElses", "status": "True", "reason": "R", "message": "",
                 "lastTransitionTime": T0}
            ],
            "pinned": {"providerUID": "p-uid", "pluginKey": "acme.sandbox", "driverKey": "k"},
            "effectivePolicy": "Ephemeral",
            "capabilities": {"reusableLeases": false, "nativeSyncIn": false, "nativeSyncOut": false,
                             "persistentProcessSessions": false, "independentControlCommands": true,
                             "incrementalSessionOutput": false},
            "explanations": [{"capability": "nativeSyncIn", "granted": false, "reason": "NarrowedByJobBackend",
                              "message": "the lease is Job-backed (spec.backend: job)"}]
        }))
        .unwrap(),
    );
    l
}

#[test]
fn only_what_a_reconcile_reads_is_kept() {
    let full = published();
    let cached = CachedLease::from(full.clone());
    assert_eq!(cached.spec, full.spec);
    let meta = &cached.metadata;
    assert_eq!((meta.name.as_deref(), meta.namespace.as_deref()), (Some("l"), Some("team-a")));
    assert_eq!((meta.uid.as_deref(), meta.generation), (Some("team-a-l-uid"), Some(1)));
    assert!(meta.labels.is_none() && meta.annotations.is_none() && meta.managed_fields.is_none());
    assert_eq!(cached.pinned(), full.status.as_ref().unwrap().pinned.as_ref());
    assert!(cached.pinned().is_some());
    let kept: Vec<(String, String, Time)> =
        cached.conditions().into_iter().map(|c| (c.type_, c.status, c.last_transition_time)).collect();
    assert_eq!(
        kept,
        [("Resolved".into(), "True".into(), time(T0)), ("ConfigResolved".into(), "False".into(), later(T0, 7))],
        "a condition sandcap does not write is not kept"
    );
}

#[test]
fn the_published_status_compares_equal_and_any_difference_does_not() {
    let full = published();
    let status = full.status.clone().unwrap();
    let cached = CachedLease::from(full);
    assert!(cached.is_published(&status));
    type Change = (&'static str, fn(&mut SandboxLeaseStatus));
    let changes: [Change; 8] = [
        ("observedGeneration", |s| s.observed_generation = Some(2)),
        ("a condition's time", |s| s.conditions[0].last_transition_time = later(T0, 1)),
        ("a condition's message", |s| s.conditions[0].message.push('.')),
        ("a condition's reason", |s| s.conditions[1].reason = "SecretKeyNotFound".into()),
        ("a condition gone", |s| drop(s.conditions.pop())),
        ("the pin", |s| s.pinned = None),
        ("a capability", |s| s.capabilities.set(Capability::NativeSyncIn, true)),
        ("an explanation", |s| s.explanations.clear()),
    ];
    for (what, change) in changes {
        let mut desired = status.clone();
        change(&mut desired);
        assert!(!cached.is_published(&desired), "{what}");
    }
}

#[test]
fn a_lease_without_status_has_nothing_published_and_no_pin() {
    let cached = CachedLease::from(lease("team-a", "l").of("p", "k").build());
    assert!(cached.pinned().is_none() && cached.published.is_none() && cached.conditions().is_empty());
    assert!(!cached.is_published(&SandboxLeaseStatus::default()));
}

#[test]
fn the_kept_form_reads_back_as_the_lease_the_watch_decoded() {
    let mut full = published();
    full.spec.config = Some(json!({"image": "python:3.12", "limits": {"cpu": 2, "ratio": 0.5}, "tags": ["a"]}));
    full.spec.extra = serde_json::from_value(json!({"unknownKey": {"kept": true}})).unwrap();
    let cached = CachedLease::from(full);
    let view = cached.clone().keep().view("team-a", "l").expect("decodes");
    assert_eq!(view, cached);
}

#[test]
fn the_cache_decodes_a_lease_from_the_apiservers_json() {
    let json = serde_json::to_value(published()).unwrap();
    let cached: CachedLease = serde_json::from_value(json).unwrap();
    assert!(cached.is_published(published().status.as_ref().unwrap()));
    assert!(cached.metadata.annotations.is_none());
}

#[test]
fn a_config_stored_over_its_bound_is_not_kept_and_is_judged_as_over_it() {
    use sandcap_core::api::CONFIG_TOO_LARGE;
    use sandcap_core::judge::{Options, Server, judge};

    let mut full = published();
    full.spec.config = Some(json!({"token": "s3cr3t-".repeat(150_000)}));
    let wire = serde_json::to_vec(&full).unwrap();
    let cached: CachedLease = serde_json::from_slice(&wire).unwrap();
    assert!(cached.spec.config.is_none() && cached.spec.config_too_large());
    let kept = cached.keep();
    assert!(kept.spec().len() < 256, "{} bytes kept of a {} byte lease", kept.spec().len(), wire.len());
    let view = kept.view("team-a", "l").expect("decodes");
    assert!(view.spec.config_over_bound, "held across the kept form");
    let judged = judge(&crate::controller::audit::stored(&view, &view.spec), &Options::default(), Server::default());
    let refusal = judged.refusal().expect("refused");
    assert_eq!(refusal, format!("the webhook would refuse it today: spec.config: {CONFIG_TOO_LARGE}"));
}

#[test]
fn of_an_observed_lease_its_label_and_owners_are_kept_as_the_watch_decodes_them_and_of_others_nothing() {
    let mut full = published();
    assert_eq!(CachedLease::from(full.clone()).kept_lease().observed_from, None);
    full.metadata.labels = Some([(OBSERVED_FROM_LABEL.to_string(), "job".to_string())].into());
    full.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        name: "l".into(),
        uid: "job-uid".into(),
        ..Default::default()
    }]);
    let watched: CachedLease = serde_json::from_value(serde_json::to_value(&full).unwrap()).unwrap();
    assert_eq!(watched, CachedLease::from(full.clone()));
    let kept = watched.clone().keep();
    assert!(kept.is_observed());
    let read = kept.view("team-a", "l").unwrap().kept_lease();
    assert_eq!(read.observed(), Some(sandcap_core::workloads::WorkloadKind::Job));
    assert_eq!(read.owners, [Owner { api_version: "batch/v1".into(), kind: "Job".into(), uid: "job-uid".into() }]);
    // A label removed without a new generation is seen: the status event carries the metadata.
    let mut kept = watched.keep();
    full.metadata.labels = None;
    kept.republish(CachedLease::from(full));
    assert!(!kept.is_observed());
}
