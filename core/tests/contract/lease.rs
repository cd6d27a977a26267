//! Lease level: the Job backend and the other narrowings from a lease's spec, its policy, and the
//! plugin identity it pins.

use sandcap_core::api::{LeasePolicy, Pinned, SandboxLeaseStatus};
use sandcap_core::contract::{self, Capability, Reason, Refusals};
use sandcap_core::vocabulary::DriverKind;

use super::{acme, full_driver, reason, resolve_lease};
use crate::support::*;
use Capability::*;

#[test]
fn job_backed_by_backend_field_or_batch_v1_job_workload_ref_only() {
    let base = reuse(lease("acme-kubernetes", "kubernetes"));
    let mut by_backend = base.clone();
    by_backend.spec.backend = Some("job".into());
    let cases = [
        (by_backend, true),
        (job_workload(base.clone(), "batch/v1", "Job"), true),
        (job_workload(base.clone(), "batch/v1", "CronJob"), false),
        (job_workload(base.clone(), "apps/v1", "Deployment"), false),
        (job_workload(base.clone(), "batch/v1beta1", "Job"), false),
        (base, false),
    ];
    for (l, job) in cases {
        let r = resolve_lease(&l, Some(&acme()), &all_verified(), &Refusals::default(), no_secrets);
        assert_eq!(!r.resolution.is_granted(NativeSyncIn), job, "{:?}", l.spec);
        assert_eq!(!r.resolution.is_granted(NativeSyncOut), job);
        if job {
            assert_eq!(reason(&r.resolution, NativeSyncIn), Reason::NarrowedByJobBackend);
        }
    }
}

#[test]
fn native_file_sync_unsupported_narrows_both_sync_capabilities() {
    let mut l = reuse(lease("acme-kubernetes", "kubernetes"));
    l.spec.native_file_sync_unsupported = Some(true);
    let r = resolve_lease(&l, Some(&acme()), &all_verified(), &Refusals::default(), no_secrets);
    assert_eq!(reason(&r.resolution, NativeSyncIn), Reason::NarrowedByNativeFileSyncUnsupported);
    assert_eq!(reason(&r.resolution, NativeSyncOut), Reason::NarrowedByNativeFileSyncUnsupported);
    l.spec.native_file_sync_unsupported = Some(false);
    assert!(
        resolve_lease(&l, Some(&acme()), &all_verified(), &Refusals::default(), no_secrets)
            .resolution
            .is_granted(NativeSyncIn)
    );
}

#[test]
fn lease_policy_and_effective_policy() {
    let eligible = acme();
    let mut ineligible = acme();
    ineligible.spec.environment_drivers[0] = with_caps(full_driver(), &[(ReusableLeases, false)]);
    let table = [
        (reuse(lease("acme-kubernetes", "kubernetes")), &eligible, LeasePolicy::ReuseByEnvironment, true),
        (lease("acme-kubernetes", "kubernetes"), &eligible, LeasePolicy::Ephemeral, false),
        (reuse(lease("acme-kubernetes", "kubernetes")), &ineligible, LeasePolicy::Ephemeral, false),
    ];
    for (l, p, policy, reusable) in table {
        let r = resolve_lease(&l, Some(p), &all_verified(), &Refusals::default(), no_secrets);
        assert_eq!(r.effective_policy, policy);
        assert_eq!(r.resolution.is_granted(ReusableLeases), reusable);
    }
    // A worker that cannot resume leases makes the provider ineligible too.
    let r = resolve_lease(
        &reuse(lease("acme-kubernetes", "kubernetes")),
        Some(&eligible),
        &verified_without(&["environmentResumeLease"]),
        &Refusals::default(),
        no_secrets,
    );
    assert_eq!(r.effective_policy, LeasePolicy::Ephemeral);
}

fn pinned(uid: &str) -> SandboxLeaseStatus {
    SandboxLeaseStatus {
        pinned: Some(Pinned {
            provider_uid: uid.into(),
            plugin_key: "acme.kubernetes-sandbox-provider".into(),
            driver_key: "kubernetes".into(),
        }),
        ..Default::default()
    }
}

#[test]
fn first_resolution_pins_the_exact_plugin_identity() {
    let l = reuse(lease("acme-kubernetes", "kubernetes"));
    let r = resolve_lease(&l, Some(&acme()), &all_verified(), &Refusals::default(), no_secrets);
    assert_eq!(r.pin, pinned("uid-1").pinned);
    let mut again = l.clone();
    again.status = Some(pinned("uid-1"));
    let r = resolve_lease(&again, Some(&acme()), &all_verified(), &Refusals::default(), no_secrets);
    assert_eq!(r.pin, None, "an already pinned lease is not re-pinned");
    assert!(r.identity.is_ok());
}

#[test]
fn identity_failures_turn_everything_off_whatever_the_worker_says() {
    let base = {
        let mut l = reuse(lease("acme-kubernetes", "kubernetes"));
        l.status = Some(pinned("uid-1"));
        l
    };
    let recreated = provider("acme-kubernetes", "uid-2", vec![full_driver()]);
    let mut driver_gone = acme();
    driver_gone.spec.environment_drivers[0].driver_key = "other".into();
    let mut kind_changed = acme();
    kind_changed.spec.environment_drivers[0].kind = Some(DriverKind::EnvironmentDriver);
    let mut plugin_changed = acme();
    plugin_changed.spec.plugin_key = "evil.plugin".into();
    let table = [
        (None, "no longer exists"),
        (Some(&recreated), "re-created"),
        (Some(&driver_gone), "does not declare driver kubernetes"),
        (Some(&kind_changed), "not sandbox_provider"),
        (Some(&plugin_changed), "pluginKey"),
    ];
    for (p, why) in table {
        let r = resolve_lease(&base, p, &all_verified(), &Refusals::default(), no_secrets);
        assert!(r.identity.as_ref().is_err_and(|e| e.to_string().contains(why)), "{why}: {:?}", r.identity);
        assert_eq!(r.effective_policy, LeasePolicy::Ephemeral);
        for e in &r.resolution.explanations {
            assert!(!e.granted);
            assert_eq!(e.reason, Reason::PluginIdentityFailed);
        }
    }
}

#[test]
fn a_lease_whose_provider_or_driver_does_not_exist_yet_is_all_off_and_unpinned() {
    let l = lease("acme-kubernetes", "kubernetes");
    for p in [None, Some(provider("acme-kubernetes", "uid-1", vec![driver("other")]))] {
        let r = resolve_lease(&l, p.as_ref(), &all_verified(), &Refusals::default(), no_secrets);
        assert_eq!(r.pin, None);
        assert!(r.resolution.explanations.iter().all(|e| e.reason == Reason::PluginIdentityFailed));
    }
}

#[test]
fn a_provider_that_omits_sandbox_capabilities_is_not_an_identity_failure() {
    let l = lease("acme-kubernetes", "kubernetes");
    let p = provider("acme-kubernetes", "uid-1", vec![driver("kubernetes")]);
    let r = resolve_lease(&l, Some(&p), &all_verified(), &Refusals::default(), no_secrets);
    assert!(r.identity.is_ok());
    assert!(r.resolution.is_granted(PersistentProcessSessions), "defers to the worker");
    assert_eq!(reason(&r.resolution, ReusableLeases), Reason::NotOptedIn);
}

#[test]
fn a_job_backend_narrows_in_any_spelling() {
    for spelling in ["job", "Job", "JOB", " job", "job\t"] {
        let mut l = lease("acme-kubernetes", "kubernetes");
        l.spec.backend = Some(spelling.into());
        let why = contract::job_backend(&l).map(|j| j.to_string());
        let why = why.unwrap_or_else(|| panic!("{spelling:?} is a Job backend"));
        assert!(why.contains(&format!("{spelling:?}")), "{why}");
    }
    for other in ["jobs", "sandbox-cr", ""] {
        let mut l = lease("acme-kubernetes", "kubernetes");
        l.spec.backend = Some(other.into());
        assert_eq!(contract::job_backend(&l), None, "{other:?}");
    }
}
