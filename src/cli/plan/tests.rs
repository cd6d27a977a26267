//! The plan over objects built as the apiserver hands them over.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::json;

use super::diff::{Admission, CHANGES, Change, REFUSED, Stored, Switch, diff, plan};
use crate::controller::fixtures::{T0, lease, provider, time};
use sandcap_core::addresses::WorkerPolicy;
use sandcap_core::api::{SandboxLease, SandboxLeaseStatus, SandboxProvider, SandboxProviderStatus};
use sandcap_core::contract::{self, Declared, Narrowing, Refusals, Verified};
use sandcap_core::versions::{ContractVersion, V1, V2};
use sandcap_core::vocabulary::{Capability, ConditionType, LeasePolicy, Reason};

const NINE: [&str; 9] = [
    "reusableLeases",
    "nativeSyncIn",
    "nativeSyncOut",
    "persistentProcessSessions",
    "independentControlCommands",
    "incrementalSessionOutput",
    "concurrentSyncOperations",
    "duplexCommandStream",
    "runnerWebSocketIngress",
];

fn switch(target: ContractVersion, from: Option<ContractVersion>) -> Switch {
    Switch { target, from, workers: WorkerPolicy::default() }
}

/// Provider `p` declaring `declares` on driver `k`, its worker verifying every v2 method.
fn declaring(name: &str, declares: &[&str]) -> SandboxProvider {
    provider(name).driver("k").declares(declares).probed_ok(&V2.worker_methods()).build()
}

fn reusing(name: &str, provider: &str) -> SandboxLease {
    let mut l = lease("team-a", name).of(provider, "k").build();
    l.spec.policy = Some(LeasePolicy::ReuseByEnvironment);
    l.spec.environment = Some("env-7".into());
    l
}

fn valid(status: &str, message: &str, generation: i64) -> Condition {
    Condition {
        type_: ConditionType::Valid.as_str().into(),
        status: status.into(),
        reason: "Conforms".into(),
        message: message.into(),
        observed_generation: Some(generation),
        last_transition_time: time(T0),
    }
}

#[test]
fn a_capability_changes_when_it_is_on_under_one_version_only_with_the_reason_where_it_is_off() {
    let driver = declaring("p", &NINE).spec.environment_drivers[0].clone();
    let verified = Verified::methods(V2.worker_methods());
    let resolve = |contract, refusals: Refusals| {
        let declared = Declared::from_driver(contract, &driver);
        contract::resolve(contract, &verified, &declared, &Narrowing { refusals, ..Narrowing::default() })
    };
    let v1 = resolve(&V1, Refusals::default());
    let v2 = resolve(&V2, Refusals::default());
    let gained = diff(&V1, &v1, &V2, &v2);
    let keys: Vec<(Capability, Change)> = gained.iter().map(|c| (c.capability, c.change)).collect();
    assert_eq!(
        keys,
        [
            (Capability::ConcurrentSyncOperations, Change::Gains),
            (Capability::DuplexCommandStream, Change::Gains),
            (Capability::RunnerWebSocketIngress, Change::Gains)
        ],
        "the six are granted under both"
    );
    assert_eq!((gained[0].off_under, gained[0].reason), (ContractVersion::V1, None));
    assert_eq!(gained[0].message, "not a key of contract v1");

    let refused = resolve(&V2, Refusals::provider(Some("the CRD would refuse it today: x".into())));
    let lost = diff(&V2, &v2, &V2, &refused);
    assert_eq!(lost.len(), 9);
    assert!(lost.iter().all(|c| c.change == Change::Loses && c.reason == Some(Reason::ProviderNotValid)), "{lost:?}");
    assert!(lost[0].message.ends_with("the CRD would refuse it today: x"), "{}", lost[0].message);
    assert_eq!(diff(&V2, &v2, &V2, &v2), [], "nothing changes, nothing is listed");
    let back = diff(&V2, &v2, &V1, &v1);
    assert!(back.iter().all(|c| c.change == Change::Loses && c.message == "not a key of contract v1"), "{back:?}");
}

#[test]
fn switching_to_v2_admits_a_nine_key_provider_and_its_leases_gain() {
    let stored = Stored {
        providers: vec![declaring("nine", &NINE), declaring("six", &NINE[..6])],
        leases: vec![reusing("l2", "six"), reusing("l1", "nine")],
    };
    let up = plan(&stored, &switch(ContractVersion::V2, None));
    assert_eq!(up.objects.len(), 1, "{:?}", up.objects);
    let nine = &up.objects[0];
    assert_eq!((nine.name.as_str(), nine.admission, nine.from), ("nine", Admission::Admitted, ContractVersion::V1));
    assert!(nine.message.contains("duplexCommandStream is not a key of contract v1"), "{}", nine.message);
    assert_eq!(up.leases.len(), 1, "the lease of the six-key provider keeps what it has");
    let l1 = &up.leases[0];
    assert_eq!((l1.namespace.as_str(), l1.name.as_str()), ("team-a", "l1"));
    assert_eq!(l1.changes.len(), 9, "everything: under v1 its provider is refused");
    assert_eq!(l1.changes[0].reason, Some(Reason::ProviderNotValid));
    assert_eq!((up.summary.admitted, up.summary.gains, up.summary.leases_changing), (1, 9, 1));
    assert_eq!(up.exit_code(), CHANGES);

    let down = plan(&stored, &switch(ContractVersion::V1, Some(ContractVersion::V2)));
    assert_eq!(down.objects[0].admission, Admission::Refused);
    assert!(down.leases[0].changes.iter().all(|c| c.change == Change::Loses && c.off_under == ContractVersion::V1));
    assert_eq!((down.summary.refused, down.summary.losses), (1, 9));
    assert_eq!(down.exit_code(), REFUSED);

    let same = plan(&stored, &switch(ContractVersion::V2, Some(ContractVersion::V2)));
    assert!(same.objects.is_empty() && same.leases.is_empty(), "{same:?}");
    assert_eq!(same.exit_code(), 0);
}

#[test]
fn an_object_refused_under_both_versions_is_listed_but_changes_nothing() {
    let old = declaring("old", &["concurrentSyncAndExec"]);
    let stored = Stored { providers: vec![old], leases: vec![] };
    let p = plan(&stored, &switch(ContractVersion::V2, None));
    assert_eq!(p.objects[0].admission, Admission::StillRefused);
    assert!(p.objects[0].message.contains("concurrentSyncAndExec was removed"), "{}", p.objects[0].message);
    assert_eq!((p.summary.still_refused, p.exit_code()), (1, 0));
}

#[test]
fn the_valid_condition_stands_for_the_version_and_generation_it_was_written_for() {
    let mut recorded = declaring("p", &NINE[..6]);
    // What the operator concluded with its own flags (say, a worker URL refused), not what the
    // flags given to plan conclude.
    let status = SandboxProviderStatus {
        contract: Some(ContractVersion::V2),
        conditions: vec![valid("False", "the webhook would refuse it today: spec.worker.url", 1)],
        ..recorded.status.clone().unwrap_or_default()
    };
    recorded.status = Some(status);
    let stored = Stored { providers: vec![recorded.clone()], leases: vec![] };
    let p = plan(&stored, &switch(ContractVersion::V1, None));
    assert_eq!(p.objects[0].from, ContractVersion::V2, "from the version status records");
    assert_eq!(p.objects[0].admission, Admission::Admitted, "v1 judged now, v2 as recorded");
    assert_eq!(p.objects[0].message, "the webhook would refuse it today: spec.worker.url");

    recorded.metadata.generation = Some(2);
    let stale = Stored { providers: vec![recorded], leases: vec![] };
    let p = plan(&stale, &switch(ContractVersion::V1, None));
    assert!(p.objects.is_empty(), "a condition of an older generation is judged again: {p:?}");
}

#[test]
fn a_lease_is_compared_from_the_version_that_resolved_it() {
    let nine = declaring("nine", &NINE);
    let mut l1 = reusing("l1", "nine");
    l1.status = Some(SandboxLeaseStatus { contract: Some(ContractVersion::V2), ..SandboxLeaseStatus::default() });
    let stored = Stored { providers: vec![nine], leases: vec![l1] };
    let p = plan(&stored, &switch(ContractVersion::V2, None));
    assert!(p.leases.is_empty(), "resolved under v2 already: {p:?}");
    assert_eq!(p.objects[0].admission, Admission::Admitted, "the provider records no version: v1");
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["objects"][0]["kind"], json!("SandboxProvider"));
    assert_eq!(json["objects"][0].get("namespace"), None);
    assert_eq!(json["summary"]["stillRefused"], json!(0));
}

#[test]
fn a_lease_the_old_version_refused_is_admitted_and_gains_what_its_provider_grants() {
    let six = declaring("six", &NINE[..6]);
    let mut l = reusing("l", "six");
    l.status = Some(SandboxLeaseStatus {
        contract: Some(ContractVersion::V2),
        conditions: vec![valid("False", "the webhook would refuse it today: spec.bakend", 1)],
        ..SandboxLeaseStatus::default()
    });
    let stored = Stored { providers: vec![six], leases: vec![l] };
    let p = plan(&stored, &switch(ContractVersion::V1, None));
    let lease = &p.objects[0];
    assert_eq!((lease.namespace.as_deref(), lease.admission), (Some("team-a"), Admission::Admitted));
    let changes = &p.leases[0].changes;
    assert_eq!(changes.len(), 6, "{changes:?}");
    assert!(changes.iter().all(|c| c.change == Change::Gains && c.reason == Some(Reason::LeaseNotValid)));
    assert_eq!((p.summary.admitted, p.summary.refused, p.exit_code()), (1, 0, CHANGES));
}
