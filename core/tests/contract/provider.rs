//! Provider level: each version's keys, the worker's methods that verify each, and the driver's
//! declaration (with the legacy flag and the driver's kind).

use sandcap_core::contract::{self, Capability, Declared, Reason, Verified};
use sandcap_core::versions::{ContractVersion, V1};
use sandcap_core::vocabulary::DriverKind;
use serde_json::json;

use super::{acme, declared, full_driver, message, reason, resolve_driver};
use crate::support::*;
use Capability::*;

#[test]
fn each_version_has_its_keys_in_contract_order() {
    let six = [
        "reusableLeases",
        "nativeSyncIn",
        "nativeSyncOut",
        "persistentProcessSessions",
        "independentControlCommands",
        "incrementalSessionOutput",
    ];
    let nine: Vec<&str> = six
        .iter()
        .copied()
        .chain(["concurrentSyncOperations", "duplexCommandStream", "runnerWebSocketIngress"])
        .collect();
    for (version, keys) in [(ContractVersion::V1, six.to_vec()), (ContractVersion::V2, nine)] {
        let contract = version.contract();
        assert_eq!(contract.capabilities().map(Capability::key).collect::<Vec<_>>(), keys, "{version}");
        let r = contract::resolve_driver(contract, &all_verified(), &full_driver(), None);
        assert_eq!(r.explanations.iter().map(|e| e.capability.key()).collect::<Vec<_>>(), keys, "{version}");
        let written = serde_json::to_value(r.capabilities).unwrap();
        assert_eq!(written.as_object().unwrap().len(), keys.len(), "status has exactly the version's keys");
    }
}

#[test]
fn a_version_never_reads_a_key_it_does_not_have() {
    let d = with_caps(driver("k"), &[(DuplexCommandStream, true), (RunnerWebSocketIngress, true)]);
    assert!(Declared::from_driver(&V1, &d).present().is_empty());
    let r = contract::resolve_driver(&V1, &all_verified(), &d, None);
    assert!(!r.is_granted(DuplexCommandStream) && r.explanations.iter().all(|e| V1.has(e.capability)));
}

#[test]
fn each_capability_needs_every_one_of_its_methods() {
    let table: [(Capability, &[&str]); 9] = [
        (ReusableLeases, &["environmentResumeLease", "environmentReleaseLease", "environmentDestroyLease"]),
        (NativeSyncIn, &["environmentSyncIn", "environmentSyncOut"]),
        (NativeSyncOut, &["environmentSyncIn", "environmentSyncOut"]),
        (PersistentProcessSessions, &["environmentExecute"]),
        (IndependentControlCommands, &["environmentExecute"]),
        (IncrementalSessionOutput, &["environmentExecute"]),
        (ConcurrentSyncOperations, &["environmentSyncIn", "environmentSyncOut"]),
        (DuplexCommandStream, &["duplexChannelOpen"]),
        (RunnerWebSocketIngress, &["environmentRunnerIngressEndpoint"]),
    ];
    for (cap, methods) in table {
        assert!(resolve_driver(&all_verified(), &full_driver(), None).is_granted(cap), "{cap} with every method");
        for missing in methods {
            let r = resolve_driver(&verified_without(&[missing]), &full_driver(), None);
            assert!(!r.is_granted(cap), "{cap} granted without {missing}");
            assert_eq!(reason(&r, cap), Reason::MissingWorkerMethods);
            assert!(message(&r, cap).contains(missing), "{cap}: message names {missing}: {}", message(&r, cap));
        }
    }
}

#[test]
fn omitted_keys_follow_the_worker_except_the_opt_in_keys() {
    let d = driver("kubernetes"); // no sandboxCapabilities at all
    let r = resolve_driver(&all_verified(), &d, None);
    for (cap, granted, why) in [
        (ReusableLeases, false, Reason::NotOptedIn),
        (NativeSyncIn, true, Reason::Granted),
        (NativeSyncOut, true, Reason::Granted),
        (PersistentProcessSessions, true, Reason::Granted),
        (IndependentControlCommands, true, Reason::Granted),
        (IncrementalSessionOutput, false, Reason::NotOptedIn),
        (ConcurrentSyncOperations, false, Reason::NotOptedIn),
        (DuplexCommandStream, false, Reason::NotOptedIn),
        (RunnerWebSocketIngress, false, Reason::NotOptedIn),
    ] {
        assert_eq!(r.is_granted(cap), granted, "{cap}");
        assert_eq!(reason(&r, cap), why, "{cap}");
    }
}

#[test]
fn declared_false_means_never_and_true_still_needs_the_worker() {
    for cap in Capability::ALL {
        let r = resolve_driver(&all_verified(), &with_caps(full_driver(), &[(cap, false)]), None);
        assert!(!r.is_granted(cap));
        assert_eq!(reason(&r, cap), Reason::DeclaredFalse, "{cap}");

        let r = resolve_driver(&Verified::methods(["somethingElse"]), &with_caps(driver("k"), &[(cap, true)]), None);
        assert_eq!(reason(&r, cap), Reason::MissingWorkerMethods, "{cap} declared true without methods");
    }
}

#[test]
fn empty_missing_or_failed_worker_lists_verify_nothing() {
    for verified in [Verified::nothing(), Verified::methods(Vec::<String>::new())] {
        let r = resolve_driver(&verified, &full_driver(), None);
        for cap in Capability::ALL {
            assert!(!r.is_granted(cap));
            assert_eq!(reason(&r, cap), Reason::WorkerNotVerified);
        }
    }
}

#[test]
fn unknown_methods_verify_nothing_they_are_not_named_for() {
    let r = resolve_driver(&Verified::methods(["environmentTeleport", "initialize"]), &full_driver(), None);
    assert!(Capability::ALL.iter().all(|c| !r.is_granted(*c)));
    assert!(Capability::ALL.iter().all(|c| reason(&r, *c) == Reason::MissingWorkerMethods));
}

#[test]
fn sync_methods_are_consumed_only_as_a_pair_and_the_status_says_why() {
    for (present, absent) in [("environmentSyncIn", "environmentSyncOut"), ("environmentSyncOut", "environmentSyncIn")]
    {
        let r = resolve_driver(&verified_without(&[absent]), &full_driver(), None);
        for cap in [NativeSyncIn, NativeSyncOut] {
            assert!(!r.is_granted(cap));
            assert_eq!(reason(&r, cap), Reason::MissingWorkerMethods);
            let m = message(&r, cap);
            assert!(m.contains(present) && m.contains(absent) && m.contains("pair"), "{m}");
        }
        assert!(r.is_granted(PersistentProcessSessions));
    }
}

#[test]
fn legacy_reusable_flag_is_read_when_nested_key_is_absent_and_nested_wins() {
    let table = [
        (Some(true), None, true),
        (Some(false), None, false),
        (Some(true), Some(false), false),
        (Some(false), Some(true), true),
        (None, Some(true), true),
        (None, None, false),
    ];
    for (legacy, nested, granted) in table {
        let mut d = driver("k");
        d.supports_reusable_leases = legacy;
        if let Some(n) = nested {
            d = with_caps(d, &[(ReusableLeases, n)]);
        }
        assert_eq!(declared(&d).get(ReusableLeases), nested.or(legacy), "{legacy:?}/{nested:?}");
        assert_eq!(
            resolve_driver(&all_verified(), &d, None).is_granted(ReusableLeases),
            granted,
            "{legacy:?}/{nested:?}"
        );
    }
}

#[test]
fn declared_shows_only_present_keys_with_the_legacy_flag_folded_in() {
    let mut d = with_caps(driver("k"), &[(NativeSyncIn, true)]);
    d.supports_reusable_leases = Some(true);
    let present = declared(&d).present();
    assert_eq!(serde_json::to_value(present).unwrap(), json!({"nativeSyncIn": true, "reusableLeases": true}));
}

#[test]
fn non_sandbox_provider_drivers_are_never_read() {
    for kind in [Some(DriverKind::EnvironmentDriver), None] {
        let mut d = full_driver();
        d.kind = kind;
        let r = resolve_driver(&all_verified(), &d, None);
        assert!(Capability::ALL.iter().all(|c| !r.is_granted(*c) && reason(&r, *c) == Reason::PluginIdentityFailed));
    }
}

#[test]
fn verified_methods_come_from_a_succeeded_probe_in_provider_status_only() {
    use sandcap_core::api::{ProbeResult, SandboxProviderStatus, WorkerStatus};
    let mut p = acme();
    assert!(contract::verified_from_status(&p).is_nothing());
    for (probe, nothing) in [(ProbeResult::Succeeded, false), (ProbeResult::Failed, true)] {
        p.status = Some(SandboxProviderStatus {
            worker: Some(WorkerStatus {
                supported_methods: vec!["environmentExecute".into()],
                probe,
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(contract::verified_from_status(&p).is_nothing(), nothing);
    }
}

#[test]
fn a_worker_answer_verifies_only_while_spec_worker_names_the_worker_that_gave_it() {
    use sandcap_core::api::{ProbeResult, SandboxProviderStatus, WorkerStatus};
    let mut p = acme();
    p.metadata.generation = Some(3);
    let probed = |address: Option<&str>, generation: i64| SandboxProviderStatus {
        observed_generation: Some(generation),
        worker: Some(WorkerStatus {
            supported_methods: vec!["environmentExecute".into()],
            probe: ProbeResult::Succeeded,
            address: address.map(str::to_string),
            ..Default::default()
        }),
        ..Default::default()
    };
    let named_now = p.spec.worker.address().expect("a Service has an address");
    assert_eq!(named_now, "http://acme-worker.sandbox-system.svc:8080/rpc");
    // Probed at an earlier generation, for the same worker: an edit elsewhere keeps it verified.
    p.status = Some(probed(Some(&named_now), 2));
    assert!(contract::verified_from_status(&p).has("environmentExecute"));
    // spec.worker now names another worker: the old answer verifies nothing until it answers.
    let mut moved = p.clone();
    moved.spec.worker.service.as_mut().unwrap().name = "other-worker".into();
    let verified = contract::verified_from_status(&moved);
    assert!(verified.is_nothing());
    let why = verified.why_nothing().unwrap().to_string();
    assert!(why.contains(&named_now) && why.contains("http://other-worker.sandbox-system.svc:8080/rpc"), "{why}");
    let r = resolve_driver(&verified, &full_driver(), None);
    assert!(r.explanations.iter().all(|e| e.reason == Reason::WorkerNotVerified && e.message == why));
    // A status from before addresses were recorded counts only for the generation it observed.
    p.status = Some(probed(None, 3));
    assert!(!contract::verified_from_status(&p).is_nothing());
    p.status = Some(probed(None, 2));
    assert!(contract::verified_from_status(&p).is_nothing());
    // A URL's credentials, query and fragment are never recorded.
    let mut by_url = acme();
    by_url.spec.worker =
        serde_json::from_value(json!({"url": "https://user:s3cret@w.example:9443/rpc?token=s3cret#x"})).unwrap();
    assert_eq!(by_url.spec.worker.address().unwrap(), "https://w.example:9443/rpc");
}
