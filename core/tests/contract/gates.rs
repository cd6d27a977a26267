//! The gate order: each lease narrowing removes exactly its keys, the first gate that removes a
//! key gives its reason, and a refused object's place in that order.

use sandcap_core::api::LeasePolicy;
use sandcap_core::contract::{
    self, Capability, FailedConfig, GateVerdict, IdentityFailure, JobBackend, Narrowing, Reason, Refusals, Verified,
};
use sandcap_core::versions::V2;
use sandcap_core::vocabulary::Gate;

use super::{acme, declared, full_driver, reason, resolve, resolve_driver, resolve_lease};
use crate::support::*;
use Capability::*;

fn narrowing() -> Narrowing {
    Narrowing { policy: Some(LeasePolicy::ReuseByEnvironment), ..Narrowing::default() }
}

#[test]
fn each_narrowing_removes_exactly_its_capabilities() {
    let declared = declared(&full_driver());
    let table: Vec<(Narrowing, Vec<(Capability, Reason)>)> = vec![
        (
            Narrowing { policy: Some(LeasePolicy::Ephemeral), ..narrowing() },
            vec![(ReusableLeases, Reason::NarrowedByLeasePolicy)],
        ),
        (
            Narrowing { job_backend: Some(JobBackend::Backend("job".into())), ..narrowing() },
            vec![
                (NativeSyncIn, Reason::NarrowedByJobBackend),
                (NativeSyncOut, Reason::NarrowedByJobBackend),
                (ConcurrentSyncOperations, Reason::NarrowedByJobBackend),
            ],
        ),
        (
            Narrowing { native_file_sync_unsupported: true, ..narrowing() },
            vec![
                (NativeSyncIn, Reason::NarrowedByNativeFileSyncUnsupported),
                (NativeSyncOut, Reason::NarrowedByNativeFileSyncUnsupported),
                (ConcurrentSyncOperations, Reason::NarrowedByNativeFileSyncUnsupported),
            ],
        ),
        (
            Narrowing { config_failure: Some(FailedConfig::Published("bad".into())), ..narrowing() },
            vec![
                (PersistentProcessSessions, Reason::NarrowedByConfigResolution),
                (IncrementalSessionOutput, Reason::NarrowedByConfigResolution),
                (DuplexCommandStream, Reason::NarrowedByConfigResolution),
            ],
        ),
        (
            Narrowing {
                identity_failure: Some(IdentityFailure::ProviderNotFound { name: "gone".into() }),
                ..narrowing()
            },
            Capability::ALL.iter().map(|c| (*c, Reason::PluginIdentityFailed)).collect(),
        ),
    ];
    for (n, removed) in table {
        let r = resolve(&all_verified(), &declared, &n);
        for cap in Capability::ALL {
            match removed.iter().find(|(c, _)| *c == cap) {
                Some((_, why)) => {
                    assert!(!r.is_granted(cap), "{cap} under {n:?}");
                    assert_eq!(reason(&r, cap), *why, "{cap} under {n:?}");
                }
                None => assert!(r.is_granted(cap), "{cap} should survive {n:?}"),
            }
        }
    }
}

#[test]
fn reasons_are_the_first_gate_in_contract_order() {
    let false_reuse = declared(&with_caps(full_driver(), &[(ReusableLeases, false), (NativeSyncIn, false)]));
    let everything = Narrowing {
        refusals: Refusals::default(),
        identity_failure: None,
        policy: Some(LeasePolicy::Ephemeral),
        job_backend: Some(JobBackend::Backend("job".into())),
        native_file_sync_unsupported: true,
        config_failure: Some(FailedConfig::Published("bad".into())),
    };
    // Identity beats a worker that verified nothing.
    let r = resolve(
        &Verified::nothing(),
        &false_reuse,
        &Narrowing {
            identity_failure: Some(IdentityFailure::ProviderNotFound { name: "x".into() }),
            ..everything.clone()
        },
    );
    assert_eq!(reason(&r, NativeSyncIn), Reason::PluginIdentityFailed);
    // WorkerNotVerified beats DeclaredFalse.
    assert_eq!(
        reason(&resolve(&Verified::nothing(), &false_reuse, &everything), ReusableLeases),
        Reason::WorkerNotVerified
    );
    // MissingWorkerMethods beats DeclaredFalse.
    let r = resolve(&verified_without(&["environmentSyncOut"]), &false_reuse, &everything);
    assert_eq!(reason(&r, NativeSyncIn), Reason::MissingWorkerMethods);
    // DeclaredFalse beats every narrowing.
    let r = resolve(&all_verified(), &false_reuse, &everything);
    assert_eq!(reason(&r, ReusableLeases), Reason::DeclaredFalse);
    assert_eq!(reason(&r, NativeSyncIn), Reason::DeclaredFalse);
    // NotOptedIn beats the lease policy and config narrowing.
    let r = resolve(&all_verified(), &declared(&driver("k")), &everything);
    assert_eq!(reason(&r, ReusableLeases), Reason::NotOptedIn);
    assert_eq!(reason(&r, IncrementalSessionOutput), Reason::NotOptedIn);
    // Job backend beats nativeFileSyncUnsupported.
    let r = resolve(&all_verified(), &declared(&full_driver()), &everything);
    assert_eq!(reason(&r, NativeSyncOut), Reason::NarrowedByJobBackend);
    assert_eq!(reason(&r, ReusableLeases), Reason::NarrowedByLeasePolicy);
    assert_eq!(reason(&r, PersistentProcessSessions), Reason::NarrowedByConfigResolution);
    assert_eq!(reason(&r, IndependentControlCommands), Reason::Granted);
    assert_eq!(reason(&r, ConcurrentSyncOperations), Reason::NarrowedByJobBackend);
    assert_eq!(reason(&r, DuplexCommandStream), Reason::NarrowedByConfigResolution);
    assert_eq!(reason(&r, RunnerWebSocketIngress), Reason::Granted, "no narrowing removes it");
}

#[test]
fn refused_objects_grant_nothing_and_each_refusal_has_its_place_in_the_gate_order() {
    let refused = |lease: bool, provider: bool| Refusals {
        lease: lease.then(|| "the webhook would refuse it today: spec.nativeFileSyncUnsuported: unknown field".into()),
        provider: provider
            .then(|| "the webhook would refuse it today: spec.environmentDrivers[0].x: unknown field".into()),
    };
    let l = reuse(lease("acme-kubernetes", "kubernetes"));
    for (lease_refused, provider_refused, reason) in [
        (true, false, Reason::LeaseNotValid),
        (true, true, Reason::LeaseNotValid),
        (false, true, Reason::ProviderNotValid),
    ] {
        let r =
            resolve_lease(&l, Some(&acme()), &all_verified(), &refused(lease_refused, provider_refused), no_secrets);
        for e in &r.resolution.explanations {
            assert_eq!((e.granted, e.reason), (false, reason), "{e:?}");
            assert!(
                e.message.contains("breaks today's rules, so nothing is granted")
                    && e.message.contains("unknown field")
            );
        }
    }
    // The lease's own refusal comes before its identity; the provider's after it.
    let r = resolve_lease(&l, None, &all_verified(), &refused(true, false), no_secrets);
    assert!(r.resolution.explanations.iter().all(|e| e.reason == Reason::LeaseNotValid));
    let r = resolve_lease(&l, None, &all_verified(), &refused(false, true), no_secrets);
    assert!(r.resolution.explanations.iter().all(|e| e.reason == Reason::PluginIdentityFailed));
    // Provider level: a refused provider grants nothing to any driver.
    let r = resolve_driver(&all_verified(), &full_driver(), Some("the CRD would refuse it today: x"));
    assert!(r.explanations.iter().all(|e| !e.granted && e.reason == Reason::ProviderNotValid));
    // Bounded: a refusal's explanation quotes at most the first KiB of its problems.
    let long = Refusals { lease: Some("p; ".repeat(5000)), provider: None };
    let r = resolve_lease(&l, Some(&acme()), &all_verified(), &long, no_secrets);
    assert!(r.resolution.explanations.iter().all(|e| e.message.len() <= contract::MAX_REFUSAL_IN_EXPLANATION));
}

#[test]
fn the_walk_yields_each_gate_of_a_key_in_contract_order_and_the_resolution_reads_its_first_removal() {
    let everything = Narrowing {
        refusals: Refusals { lease: Some("l".into()), provider: Some("p".into()) },
        identity_failure: Some(IdentityFailure::ProviderNotFound { name: "gone".into() }),
        policy: Some(LeasePolicy::Ephemeral),
        job_backend: Some(JobBackend::Backend("job".into())),
        native_file_sync_unsupported: true,
        config_failure: Some(FailedConfig::Published("bad".into())),
    };
    let undeclared = declared(&driver("k"));
    let r = resolve(&Verified::nothing(), &undeclared, &everything);
    for rule in V2.keys {
        let walked: Vec<GateVerdict> = contract::gates(rule, &Verified::nothing(), &undeclared, &everything).collect();
        let fixed = [Gate::LeaseValid, Gate::Identity, Gate::ProviderValid, Gate::Worker, Gate::Declaration];
        let order: Vec<Gate> = fixed.into_iter().chain(rule.narrowed_by.iter().map(|n| n.gate())).collect();
        assert_eq!(walked.iter().map(|g| g.gate).collect::<Vec<_>>(), order, "{}", rule.capability);
        let mut reasons = vec![
            Reason::LeaseNotValid,
            Reason::PluginIdentityFailed,
            Reason::ProviderNotValid,
            Reason::WorkerNotVerified,
        ];
        reasons.extend(rule.opt_in.then_some(Reason::NotOptedIn));
        reasons.extend(rule.narrowed_by.iter().map(|n| n.reason()));
        let removed: Vec<Reason> = walked.iter().filter_map(|g| g.removal.as_ref()).map(|r| r.reason).collect();
        assert_eq!(removed, reasons, "{}: every gate but an undeclared key's declaration removes it", rule.capability);
        let first = walked.iter().find_map(|g| g.removal.as_ref()).expect("removed");
        let said = r.explanations.iter().find(|e| e.capability == rule.capability).expect("explained");
        assert_eq!((said.reason, &said.message), (first.reason, &first.message));
    }
}
