use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::api::ProviderRef;
use crate::workloads::{Binder, Bound, Workload};

fn desired(uid: &str, driver: &str) -> Desired {
    let labels = BTreeMap::from([("app".to_string(), "run".to_string())]);
    let mut provider = crate::api::SandboxProvider::new("k8s", Default::default());
    provider.metadata.name = Some("k8s".into());
    provider.spec.workloads = vec![
        serde_json::from_value(json!({
            "kind": "Job", "selector": {"matchLabels": {"app": "run"}}, "driverKey": driver
        }))
        .unwrap(),
    ];
    let workload = Workload {
        kind: WorkloadKind::Job,
        api_version: "batch/v1",
        namespace: "ns",
        name: "pc-1",
        uid,
        labels: &labels,
    };
    match Binder::new([&provider]).bind(&workload) {
        Bound::One(desired) => *desired,
        other => panic!("{other:?}"),
    }
}

fn kept_of(desired: &Desired) -> KeptLease {
    KeptLease {
        spec: desired.spec.clone(),
        observed_from: Some("job".into()),
        owners: vec![Owner { api_version: "batch/v1".into(), kind: "Job".into(), uid: desired.owner.uid.clone() }],
        resource_version: Some("7".into()),
    }
}

#[test]
fn a_lease_in_step_is_left_alone_and_a_missing_one_created() {
    let d = desired("u-1", "kubernetes");
    assert_eq!(step(Some(&d), Some(&kept_of(&d))), Step::Nothing);
    assert_eq!(step(Some(&d), None), Step::Create);
    assert_eq!(step(None, None), Step::Nothing);
}

#[test]
fn an_edited_spec_is_reverted_by_a_patch_that_deletes_what_was_added() {
    let d = desired("u-1", "kubernetes");
    let mut kept = kept_of(&d);
    kept.spec.native_file_sync_unsupported = Some(true);
    kept.spec.backend = Some("docker".into());
    assert_eq!(step(Some(&d), Some(&kept)), Step::Update);
    let patch = d.patch(&kept);
    assert_eq!(patch["spec"], json!({"nativeFileSyncUnsupported": null, "backend": "job"}));
    assert_eq!(patch["metadata"]["resourceVersion"], "7");
    assert_eq!(patch["metadata"]["ownerReferences"][0]["uid"], "u-1");
}

#[test]
fn a_lease_of_an_earlier_workload_or_another_driver_is_replaced() {
    let d = desired("u-2", "kubernetes");
    assert_eq!(step(Some(&d), Some(&kept_of(&desired("u-1", "kubernetes")))), Step::Replace);
    assert_eq!(step(Some(&d), Some(&kept_of(&desired("u-2", "other")))), Step::Replace);
}

#[test]
fn a_hand_made_lease_is_never_written_and_an_observed_one_no_longer_desired_is_deleted() {
    let d = desired("u-1", "kubernetes");
    let mut hand_made = kept_of(&d);
    hand_made.observed_from = None;
    assert_eq!(step(Some(&d), Some(&hand_made)), Step::Taken);
    assert_eq!(step(None, Some(&hand_made)), Step::Nothing);
    // The label alone, without an owner of its kind, is not the observer's either.
    let mut labelled = kept_of(&d);
    labelled.owners = vec![Owner { api_version: "apps/v1".into(), kind: "Deployment".into(), uid: "u-1".into() }];
    assert_eq!(step(Some(&d), Some(&labelled)), Step::Taken);
    assert_eq!(step(None, Some(&labelled)), Step::Nothing);
    assert_eq!(step(None, Some(&kept_of(&d))), Step::Delete);
}

/// RFC 7386's application, to check [`merge_patch`] against.
fn apply(target: &Value, patch: &Value) -> Value {
    let Value::Object(patch) = patch else { return patch.clone() };
    let mut out = target.as_object().cloned().unwrap_or_default();
    for (key, value) in patch {
        if value.is_null() {
            out.remove(key);
        } else {
            let next = apply(out.get(key).unwrap_or(&Value::Null), value);
            out.insert(key.clone(), next);
        }
    }
    Value::Object(out)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![any::<bool>().prop_map(Value::from), "[a-c]{0,2}".prop_map(Value::from)];
    leaf.prop_recursive(3, 16, 4, |inner| prop::collection::btree_map("[a-d]", inner, 0..4).prop_map(|m| json!(m)))
}

proptest! {
    /// The patch turns what is stored into what is desired, exactly, for any two objects without nulls.
    #[test]
    fn the_merge_patch_turns_from_into_to(from in json_value(), to in json_value()) {
        prop_assume!(from.is_object() && to.is_object());
        prop_assert_eq!(apply(&from, &merge_patch(&from, &to)), to);
    }
}

#[test]
fn the_provider_ref_is_compared_whole() {
    let d = desired("u-1", "kubernetes");
    let mut kept = kept_of(&d);
    kept.spec.provider_ref = ProviderRef {
        name: "k8s".into(),
        driver_key: "kubernetes".into(),
        extra: BTreeMap::from([("x".into(), json!(1))]),
    };
    assert_eq!(step(Some(&d), Some(&kept)), Step::Replace);
}
