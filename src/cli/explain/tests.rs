//! `explain` over objects with the statuses the controllers write for them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::lease::{LeaseFacts, LeaseReport, lease_report};
use super::provider::provider_report;
use super::report::Gate;
use super::secret::{Lookup, SecretReport};
use super::table;
use crate::controller::fixtures::{T0, lease, provider, time};
use crate::controller::{lease_status, provider_status};
use sandcap_core::api::{SandboxLease, SandboxProvider};
use sandcap_core::contract::{self, SecretLookup};
use sandcap_core::versions::V1;
use sandcap_core::vocabulary::{Capability, Reason, WorkerMethod};

/// A provider with one driver `k` declaring `declares`, whose worker verified `methods`, with
/// the status the provider controller writes.
fn probed(declares: &[&str], methods: &[&str]) -> SandboxProvider {
    let mut p = provider("p").driver("k").declares(declares).probed_ok(methods).build();
    let worker = p.status.as_ref().and_then(|s| s.worker.clone()).expect("probed");
    p.status = Some(provider_status(&V1, &p, worker, None, &time(T0)));
    p
}

/// The lease with the status the lease controller writes, sandcap seeing only `seen` Secrets.
fn resolved(mut lease: SandboxLease, provider: Option<&SandboxProvider>, seen: &[&str]) -> SandboxLease {
    let verified = provider.map_or_else(contract::Verified::nothing, contract::verified_from_status);
    let r = contract::resolve_lease(&V1, &lease, provider, &verified, &contract::Refusals::default(), |r| {
        if seen.contains(&r.name.as_str()) { SecretLookup::Found(b"{}".to_vec()) } else { SecretLookup::MissingSecret }
    });
    // The status is computed from the lease as the lease cache keeps it.
    lease.status = Some(lease_status(&lease.clone().into(), &r, &time(T0)));
    lease
}

fn report(lease: &SandboxLease, provider: Option<&SandboxProvider>, secrets: Vec<SecretReport>) -> LeaseReport {
    lease_report(&LeaseFacts { lease, provider, secrets })
}

fn capability(r: &LeaseReport, cap: Capability) -> &super::report::CapabilityReport {
    r.capabilities.iter().find(|c| c.capability == cap).expect("every capability")
}

fn stopping(r: &LeaseReport, cap: Capability) -> Vec<(Gate, String)> {
    capability(r, cap).gates.iter().filter(|g| !g.passes).map(|g| (g.gate, g.detail.clone())).collect()
}

fn secret(name: &str, lookup: Lookup, in_scope: bool) -> SecretReport {
    SecretReport::new(name, "config.json", "team-a", &lookup, in_scope, "team-b")
}

#[test]
fn every_capability_carries_status_its_gates_and_what_to_change() {
    let p = probed(&["reusableLeases", "nativeSyncIn", "nativeSyncOut"], &V1.worker_methods());
    let mut l = lease("team-a", "batch-7").of("p", "k").build();
    l.spec.backend = Some("job".into());
    let l = resolved(l, Some(&p), &[]);
    let r = report(&l, Some(&p), vec![]);
    let reuse = capability(&r, Capability::ReusableLeases);
    assert_eq!(
        (reuse.granted, reuse.reason, reuse.reason_now),
        (Some(false), Some(Reason::NarrowedByLeasePolicy), Reason::NarrowedByLeasePolicy)
    );
    let order: Vec<Gate> = reuse.gates.iter().map(|g| g.gate).collect();
    assert_eq!(
        order,
        [Gate::LeaseValid, Gate::Identity, Gate::ProviderValid, Gate::Worker, Gate::Declaration, Gate::Policy]
    );
    assert_eq!(
        stopping(&r, Capability::ReusableLeases),
        [(Gate::Policy, "the lease policy is Ephemeral, not ReuseByEnvironment".into())]
    );
    assert_eq!(
        reuse.fix.as_deref(),
        Some("set spec.policy: ReuseByEnvironment and spec.environment on lease team-a/batch-7")
    );
    assert_eq!(
        stopping(&r, Capability::NativeSyncIn),
        [(Gate::JobBackend, "the lease is Job-backed (spec.backend: \"job\")".into())]
    );
    let sessions = capability(&r, Capability::PersistentProcessSessions);
    assert_eq!((sessions.reason, &sessions.fix), (Some(Reason::Granted), &None));
    assert!(sessions.gates.iter().any(|g| g.gate == Gate::Config && g.passes), "{:?}", sessions.gates);
    let output = capability(&r, Capability::IncrementalSessionOutput);
    assert_eq!(
        stopping(&r, Capability::IncrementalSessionOutput),
        [(Gate::Declaration, "not declared, and incrementalSessionOutput is opt-in".into())]
    );
    assert_eq!(
        output.fix.as_deref(),
        Some("set sandboxCapabilities.incrementalSessionOutput: true on driver k of provider p")
    );
    assert!(r.notes.is_empty(), "{:?}", r.notes);
    assert_eq!(r.pinned.as_ref().map(|p| p.provider_uid.as_str()), Some("p-uid"));
}

#[test]
fn a_secret_sandcap_does_not_read_is_named_with_the_fix_and_never_its_value() {
    let p = probed(&[], &V1.worker_methods());
    let l = resolved(lease("team-a", "run-42").of("p", "k").config_from("creds", "config.json").build(), Some(&p), &[]);
    let fix = |secrets| {
        let r = report(&l, Some(&p), secrets);
        assert_eq!(
            capability(&r, Capability::PersistentProcessSessions).reason,
            Some(Reason::NarrowedByConfigResolution)
        );
        let stop = stopping(&r, Capability::IncrementalSessionOutput);
        assert_eq!(stop[0].0, Gate::Declaration, "opt-in first: {stop:?}");
        let stop = stopping(&r, Capability::PersistentProcessSessions);
        assert_eq!(
            stop,
            [(Gate::Config, "ConfigResolved False (SecretNotFound): configFrom Secret creds does not exist".into())]
        );
        capability(&r, Capability::PersistentProcessSessions).fix.clone().unwrap()
    };
    let unlabelled = secret("creds", Lookup::Found { labelled: false }, true);
    assert!(!unlabelled.sandcap_reads_it && unlabelled.detail.contains("not labelled sandcap.dev/config-source=true"));
    assert_eq!(
        fix(vec![unlabelled]),
        "label the Secret: kubectl label secret -n team-a creds sandcap.dev/config-source=true"
    );
    let outside = secret("creds", Lookup::Found { labelled: true }, false);
    assert!(outside.detail.contains("sandcap reads Secrets only in team-b (--secret-namespaces), not in team-a"));
    assert!(fix(vec![outside]).starts_with("add namespace team-a to the namespaces sandcap reads Secrets in"));
    assert_eq!(
        fix(vec![secret("creds", Lookup::NotFound, true)]),
        "create Secret team-a/creds with key config.json, labelled sandcap.dev/config-source=true"
    );
    let unknown = fix(vec![secret("creds", Lookup::Unknown("forbidden".into()), true)]);
    assert!(
        unknown.ends_with("whether Secret team-a/creds exists: cannot tell whether it exists: forbidden"),
        "{unknown}"
    );
    let readable = fix(vec![secret("creds", Lookup::Found { labelled: true }, true)]);
    assert!(readable.contains("yet every configFrom Secret is found, labelled and in scope"), "{readable}");
    let json =
        serde_json::to_string(&report(&l, Some(&p), vec![secret("creds", Lookup::Found { labelled: false }, true)]))
            .unwrap();
    assert!(json.contains(r#""configFrom":[{"name":"creds","key":"config.json","found":true,"labelled":false,"inScope":true,"sandcapReadsIt":false,"#), "{json}");
}

#[test]
fn the_declaration_says_which_field_decided_and_the_worker_which_method_is_missing() {
    let mut p = probed(&[], &[WorkerMethod::SyncIn.as_str(), "environmentExecute"]);
    p.spec.environment_drivers[0].supports_reusable_leases = Some(true);
    let l = resolved(lease("team-a", "l").of("p", "k").build(), Some(&p), &[]);
    let r = report(&l, Some(&p), vec![]);
    let declaration = r.declaration.as_ref().unwrap();
    assert!(declaration.legacy_decides && declaration.supports_reusable_leases == Some(true));
    let gate = |cap| capability(&r, cap).gates.iter().find(|g| g.gate == Gate::Declaration).unwrap().detail.clone();
    assert_eq!(
        gate(Capability::ReusableLeases),
        "declared true (the legacy supportsReusableLeases, as sandboxCapabilities.reusableLeases is absent)"
    );
    assert_eq!(
        stopping(&r, Capability::NativeSyncOut),
        [(Gate::Worker, "the worker advertises environmentSyncIn but not environmentSyncOut".into())]
    );
    assert_eq!(
        capability(&r, Capability::NativeSyncOut).fix.as_deref(),
        Some("the worker of provider p must list environmentSyncOut in initialize's supportedMethods")
    );
    p.spec.environment_drivers[0].sandbox_capabilities =
        Some(sandcap_core::api::DeclaredCapabilities([("reusableLeases".to_string(), false.into())].into()));
    let r = report(&l, Some(&p), vec![]);
    assert!(!r.declaration.as_ref().unwrap().legacy_decides);
    let detail = capability(&r, Capability::ReusableLeases)
        .gates
        .iter()
        .find(|g| g.gate == Gate::Declaration)
        .unwrap()
        .detail
        .clone();
    assert_eq!(
        detail,
        "declared false (sandboxCapabilities.reusableLeases; the legacy supportsReusableLeases: true is ignored)"
    );
}

#[test]
fn identity_failures_name_their_fix() {
    let p = probed(&[], &V1.worker_methods());
    let l = resolved(lease("team-a", "l").of("p", "k").build(), Some(&p), &[]);
    let recreated = probed(&[], &V1.worker_methods());
    let recreated = SandboxProvider {
        metadata: kube::api::ObjectMeta { uid: Some("new-uid".into()), ..recreated.metadata.clone() },
        ..recreated
    };
    let r = report(&l, Some(&recreated), vec![]);
    let c = capability(&r, Capability::PersistentProcessSessions);
    assert_eq!((c.reason, c.reason_now), (Some(Reason::Granted), Reason::PluginIdentityFailed));
    assert_eq!(
        stopping(&r, Capability::PersistentProcessSessions),
        [(Gate::Identity, "provider p was re-created: pinned uid p-uid, found uid new-uid".into())]
    );
    assert!(c.fix.as_deref().unwrap().starts_with("the lease stays pinned to the provider it was first resolved with"));
    assert!(r.notes[0].contains("give other reasons for reusableLeases, nativeSyncIn"), "{:?}", r.notes);
    let orphan = resolved(lease("team-a", "o").of("gone", "k").build(), None, &[]);
    let r = report(&orphan, None, vec![]);
    assert!(!r.provider.found && r.declaration.is_none() && r.worker.is_none());
    let c = capability(&r, Capability::NativeSyncIn);
    assert_eq!(c.gates.len(), 4, "the lease's validity, identity and its own narrowings: {:?}", c.gates);
    assert!(c.fix.as_deref().unwrap().starts_with("create SandboxProvider gone"));
}

#[test]
fn a_status_missing_or_behind_is_said_and_every_condition_shown() {
    let p = probed(&[], &V1.worker_methods());
    let fresh = lease("team-a", "l").of("p", "k").build();
    let r = report(&fresh, Some(&p), vec![]);
    assert!(r.notes[0].starts_with("sandcap has not resolved it yet (no status)"));
    assert!(r.capabilities.iter().all(|c| c.reason.is_none()));
    let mut l = resolved(fresh, Some(&p), &[]);
    l.metadata.generation = Some(2);
    let condition = Condition {
        type_: "Valid".into(),
        status: "False".into(),
        reason: "StoredInvalid".into(),
        message: "m".into(),
        observed_generation: Some(1),
        last_transition_time: time(T0),
    };
    l.status.as_mut().unwrap().conditions.push(condition);
    let r = report(&l, Some(&p), vec![]);
    assert_eq!(
        r.notes,
        ["status is for generation 1, the lease is at generation 2: sandcap has not resolved its latest change yet"]
    );
    assert!(r.conditions.iter().any(|c| c.type_ == "Valid"), "every condition, whatever its type");
    let mut text = Vec::new();
    table::lease(&mut text, &r).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("Valid                    False    StoredInvalid"), "{text}");
    assert!(text.starts_with("SandboxLease team-a/l (generation 2, status for generation 1)\n"), "{text}");
}

#[test]
fn a_provider_explains_each_driver() {
    let mut p = provider("p")
        .driver("k")
        .driver("other")
        .probe_failed("probe of http://w:80/ failed: no answer within 5s")
        .build();
    p.spec.environment_drivers[1].kind = Some(sandcap_core::vocabulary::DriverKind::EnvironmentDriver);
    let worker = p.status.as_ref().and_then(|s| s.worker.clone()).unwrap();
    p.status = Some(provider_status(&V1, &p, worker, None, &time(T0)));
    let r = provider_report(&p);
    assert_eq!(r.worker_at, "http://acme.sandbox-system.svc:8080/");
    let k = &r.drivers[0].capabilities[0];
    assert_eq!(k.reason, Some(Reason::WorkerNotVerified));
    assert!(
        k.gates[2].detail.starts_with("the worker verified nothing: probe Failed at 2030-01-01T00:00:00Z: probe of"),
        "{:?}",
        k.gates
    );
    assert!(k.fix.as_deref().unwrap().contains("(last probe: probe of http://w:80/ failed: no answer within 5s)"));
    let other = &r.drivers[1].capabilities[0];
    assert_eq!(other.reason, Some(Reason::PluginIdentityFailed));
    assert_eq!(other.fix.as_deref(), Some("set kind: sandbox_provider on driver other of provider p"));
    assert!(r.notes.is_empty(), "{:?}", r.notes);
    let mut text = Vec::new();
    table::provider(&mut text, &r).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("stop identity        driver other is declared with kind environment_driver"), "{text}");
}

/// The fix of `cap` on a lease of a provider whose driver `k` declares `caps` (JSON), every
/// method verified.
fn fix_of(caps: serde_json::Value, legacy: Option<bool>, cap: Capability) -> (Option<Reason>, String) {
    let mut p = probed(&[], &V1.worker_methods());
    p.spec.environment_drivers[0].sandbox_capabilities = serde_json::from_value(caps).unwrap();
    p.spec.environment_drivers[0].supports_reusable_leases = legacy;
    let worker = p.status.as_ref().and_then(|s| s.worker.clone()).unwrap();
    p.status = Some(provider_status(&V1, &p, worker, None, &time(T0)));
    let mut l = lease("team-a", "l").of("p", "k").build();
    l.spec.policy = Some(sandcap_core::api::LeasePolicy::ReuseByEnvironment);
    l.spec.environment = Some("e".into());
    let l = resolved(l, Some(&p), &[]);
    let r = report(&l, Some(&p), vec![]);
    let c = capability(&r, cap);
    (c.reason, c.fix.clone().unwrap_or_default())
}

#[test]
fn a_declared_false_is_fixed_by_the_field_that_decided_it_and_an_opt_in_key_is_never_removed() {
    use serde_json::json;
    for cap in [Capability::ReusableLeases, Capability::IncrementalSessionOutput] {
        let (reason, fix) = fix_of(json!({cap.key(): false}), None, cap);
        assert_eq!(reason, Some(Reason::DeclaredFalse));
        assert_eq!(
            fix,
            format!(
                "set sandboxCapabilities.{cap}: true on driver k of provider p ({cap} is opt-in: removing it leaves it off)"
            )
        );
        assert!(!fix.contains("or remove it"), "{fix}");
    }
    let (reason, fix) = fix_of(json!(null), Some(false), Capability::ReusableLeases);
    assert_eq!(reason, Some(Reason::DeclaredFalse));
    assert_eq!(
        fix,
        "set sandboxCapabilities.reusableLeases: true (it wins over the legacy supportsReusableLeases: false) on \
         driver k of provider p"
    );
    for cap in V1.keys.iter().filter(|r| !r.opt_in).map(|r| r.capability) {
        let (reason, fix) = fix_of(json!({cap.key(): false}), None, cap);
        assert_eq!(reason, Some(Reason::DeclaredFalse));
        assert_eq!(
            fix,
            format!(
                "set sandboxCapabilities.{cap}: true, or remove it to follow the worker, on driver k of provider p"
            )
        );
    }
    // And the fix works: what it says to set grants the capability.
    for cap in V1.capabilities() {
        assert_eq!(fix_of(json!({cap.key(): true}), Some(false), cap).0, Some(Reason::Granted), "{cap}");
    }
}

#[test]
fn every_reason_but_granted_has_a_fix_for_every_capability() {
    use super::fix::{FixContext, fix};
    let verified = contract::Verified::nothing();
    let refusals = contract::Refusals { lease: Some("l problems".into()), provider: Some("p problems".into()) };
    let ctx = FixContext {
        provider: "p",
        driver: "k",
        lease: Some(("team-a", "l")),
        identity: None,
        refusals: &refusals,
        declaration: None,
        worker: None,
        verified: &verified,
        config: None,
        secrets: &[],
    };
    for rule in sandcap_core::versions::V2.keys {
        for reason in Reason::ALL {
            let text = fix(rule, reason, &ctx);
            assert_eq!(text.is_none(), reason == Reason::Granted, "{} {reason}: {text:?}", rule.capability);
        }
    }
    let sync_in = V1.rule(Capability::NativeSyncIn).unwrap();
    let lease_fix = fix(sync_in, Reason::LeaseNotValid, &ctx).unwrap();
    assert!(
        lease_fix.starts_with("change lease team-a/l so that today's rules admit it")
            && lease_fix.ends_with("l problems")
    );
    let provider_fix = fix(sync_in, Reason::ProviderNotValid, &ctx).unwrap();
    assert!(provider_fix.starts_with("change provider p so that") && provider_fix.ends_with("p problems"));
}

#[test]
fn a_refused_lease_or_provider_stops_at_its_validity_gate() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    let refused = |message: &str| Condition {
        type_: "Valid".into(),
        status: "False".into(),
        reason: "BreaksCurrentRules".into(),
        message: message.into(),
        last_transition_time: time(T0),
        observed_generation: Some(1),
    };
    let mut p = probed(&["nativeSyncIn", "nativeSyncOut"], &V1.worker_methods());
    let mut l = resolved(lease("team-a", "l").of("p", "k").build(), Some(&p), &[]);
    l.status
        .as_mut()
        .unwrap()
        .conditions
        .push(refused("the webhook would refuse it today: spec.bakend: unknown field"));
    let r = report(&l, Some(&p), vec![]);
    let sync = capability(&r, Capability::NativeSyncIn);
    assert_eq!(sync.reason_now, Reason::LeaseNotValid);
    assert_eq!(stopping(&r, Capability::NativeSyncIn)[0].0, Gate::LeaseValid);
    assert!(sync.fix.as_deref().unwrap().ends_with("spec.bakend: unknown field"), "{:?}", sync.fix);
    let l = resolved(lease("team-a", "l2").of("p", "k").build(), Some(&p), &[]);
    p.status.as_mut().unwrap().conditions.push(refused("the CRD would refuse it today: spec.version: Required value"));
    let r = report(&l, Some(&p), vec![]);
    assert_eq!(capability(&r, Capability::NativeSyncIn).reason_now, Reason::ProviderNotValid);
    assert_eq!(stopping(&r, Capability::NativeSyncIn)[0].0, Gate::ProviderValid);
    let provider = provider_report(&p);
    assert!(provider.drivers[0].capabilities.iter().all(|c| c.reason_now == Reason::ProviderNotValid));
}
