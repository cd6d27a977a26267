//! One table-driven test per rule of docs/contract.md, "Capabilities" (and the reason order of
//! "Status"), for every key of every contract version: the tests resolve under v2, whose keys are
//! v1's six with the same rules (tests/properties.rs checks that the six resolve alike in both)
//! and three more.

mod support;

use sandcap::api::{DriverDeclaration, LeasePolicy, Pinned, SandboxLease, SandboxLeaseStatus, SandboxProvider};
use sandcap::contract::{
    self, Capability, Declared, LeaseResolution, Narrowing, Reason, Refusals, Resolution, SecretLookup, Verified,
};
use sandcap::versions::{ContractVersion, V1, V2};
use sandcap::vocabulary::DriverKind;
use serde_json::json;
use support::fixtures::*;

use Capability::*;

fn reason(r: &contract::Resolution, cap: Capability) -> Reason {
    r.explanations.iter().find(|e| e.capability == cap).expect("every capability is explained").reason
}

fn message(r: &contract::Resolution, cap: Capability) -> String {
    r.explanations.iter().find(|e| e.capability == cap).unwrap().message.clone()
}

fn resolve(verified: &Verified, declared: &Declared, narrowing: &Narrowing) -> Resolution {
    contract::resolve(&V2, verified, declared, narrowing)
}

fn resolve_driver(verified: &Verified, driver: &DriverDeclaration, refused: Option<&str>) -> Resolution {
    contract::resolve_driver(&V2, verified, driver, refused)
}

fn resolve_lease(
    lease: &SandboxLease,
    provider: Option<&SandboxProvider>,
    verified: &Verified,
    refusals: &Refusals,
    secret: impl Fn(&sandcap::api::SecretKeyRef) -> SecretLookup,
) -> LeaseResolution {
    contract::resolve_lease(&V2, lease, provider, verified, refusals, secret)
}

fn declared(driver: &DriverDeclaration) -> Declared {
    Declared::from_driver(&V2, driver)
}

fn full_driver() -> sandcap::api::DriverDeclaration {
    let mut d = driver("kubernetes");
    d.sandbox_capabilities = Some(all_declared_true());
    d
}

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
            Narrowing { job_backend: Some("job".into()), ..narrowing() },
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
            Narrowing { config_failure: Some("bad".into()), ..narrowing() },
            vec![
                (PersistentProcessSessions, Reason::NarrowedByConfigResolution),
                (IncrementalSessionOutput, Reason::NarrowedByConfigResolution),
                (DuplexCommandStream, Reason::NarrowedByConfigResolution),
            ],
        ),
        (
            Narrowing { identity_failure: Some("gone".into()), ..narrowing() },
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
        job_backend: Some("job".into()),
        native_file_sync_unsupported: true,
        config_failure: Some("bad".into()),
    };
    // Identity beats a worker that verified nothing.
    let r = resolve(
        &Verified::nothing(),
        &false_reuse,
        &Narrowing { identity_failure: Some("x".into()), ..everything.clone() },
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

// ---- lease level --------------------------------------------------------------------------

fn acme() -> sandcap::api::SandboxProvider {
    provider("acme-kubernetes", "uid-1", vec![full_driver()])
}

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

// ---- config resolution --------------------------------------------------------------------

fn schema_driver(schema: serde_json::Value) -> sandcap::api::DriverDeclaration {
    let mut d = full_driver();
    d.config_schema = Some(schema);
    d
}

#[test]
fn config_is_inline_config_with_config_from_objects_merged_over_it_in_order() {
    let mut l = config_from(lease("p", "kubernetes"), &[("a", "k"), ("b", "k")]);
    l.spec.config = Some(json!({"backend": "sandbox-cr", "limits": {"cpu": 1, "mem": 2}, "keep": true}));
    let store = secrets(&[
        ("a", "k", r#"{"backend": "job", "limits": {"cpu": 4}}"#),
        ("b", "k", r#"{"backend": "sandbox-cr", "token": "t"}"#),
    ]);
    let config = contract::resolve_config(&l, &full_driver(), store).unwrap();
    assert_eq!(config, json!({"backend": "sandbox-cr", "limits": {"cpu": 4, "mem": 2}, "keep": true, "token": "t"}));
    let empty = contract::resolve_config(&lease("p", "k"), &full_driver(), no_secrets).unwrap();
    assert_eq!(empty, json!({}));
}

#[test]
fn every_config_resolution_failure_narrows_and_names_the_secret_never_the_value() {
    const SECRET: &str = "hunter2-super-secret";
    let schema = json!({"type": "object", "properties": {"token": {"type": "integer"}, "n": {"maxLength": 3}}});
    type Store = &'static [(&'static str, &'static str, &'static str)];
    let table: Vec<(sandcap::api::SandboxLease, Store, &str)> = vec![
        (config_from(lease("p", "kubernetes"), &[("creds", "config.json")]), &[], "Secret creds does not exist"),
        (
            config_from(lease("p", "kubernetes"), &[("creds", "config.json")]),
            &[("creds", "other", "{}")],
            "has no key config.json",
        ),
        (
            config_from(lease("p", "kubernetes"), &[("creds", "config.json")]),
            &[("creds", "config.json", "hunter2-super-secret not json")],
            "is not valid JSON",
        ),
        (
            config_from(lease("p", "kubernetes"), &[("creds", "config.json")]),
            &[("creds", "config.json", "[\"hunter2-super-secret\"]")],
            "does not hold a JSON object",
        ),
        (
            config_from(lease("p", "kubernetes"), &[("creds", "config.json")]),
            &[("creds", "config.json", r#"{"token": "hunter2-super-secret"}"#)],
            "fails the driver's configSchema at configSchema.properties.token.type",
        ),
        (
            config_from(lease("p", "kubernetes"), &[("creds", "config.json")]),
            &[("creds", "config.json", r#"{"n": "hunter2-super-secret"}"#)],
            "at configSchema.properties.n.maxLength",
        ),
    ];
    for (l, store, expect) in table {
        let err = contract::resolve_config(&l, &schema_driver(schema.clone()), secrets(store)).unwrap_err();
        assert!(err.to_string().contains(expect), "{err} should contain {expect}");
        assert!(!err.to_string().contains(SECRET), "secret leaked: {err}");
        let p = provider("p", "u", vec![schema_driver(schema.clone())]);
        let r = resolve_lease(&reuse(l), Some(&p), &all_verified(), &Refusals::default(), secrets(store));
        assert_eq!(reason(&r.resolution, PersistentProcessSessions), Reason::NarrowedByConfigResolution);
        assert_eq!(reason(&r.resolution, IncrementalSessionOutput), Reason::NarrowedByConfigResolution);
        assert!(r.resolution.is_granted(IndependentControlCommands) && r.resolution.is_granted(NativeSyncIn));
        assert!(r.resolution.explanations.iter().all(|e| !e.message.contains(SECRET)));
    }
}

/// A lease's readers may not read its Secrets: a failure names the schema's keyword, never where
/// in the config it failed, which may be a key only the Secret holds.
#[test]
fn a_schema_violation_names_the_keyword_never_a_key_of_the_secret() {
    const KEY: &str = "zebraQuokkaPrivateKeyName";
    const SECRET: &str = r#"{"zebraQuokkaPrivateKeyName": {"nested": [1, "hunter2-super-secret"]}, "plain": {"zebraQuokkaPrivateKeyName": 7}}"#;
    let cases = [
        (json!({"additionalProperties": {"type": "string"}}), "configSchema.additionalProperties.type"),
        (json!({"additionalProperties": false}), "configSchema.additionalProperties"),
        (json!({"patternProperties": {"^z": {"type": "string"}}}), "configSchema.patternProperties[\"^z\"].type"),
        (json!({"propertyNames": {"maxLength": 5}}), "configSchema.propertyNames.maxLength"),
        (json!({"maxProperties": 1}), "configSchema.maxProperties"),
        (json!({"unevaluatedProperties": false}), "configSchema.unevaluatedProperties"),
        (
            json!({"additionalProperties": {"properties": {"nested": {"items": {"type": "integer"}}}}}),
            "configSchema.additionalProperties.properties.nested.items.type",
        ),
        (
            json!({"properties": {"plain": {"additionalProperties": {"type": "string"}}}}),
            "configSchema.properties.plain.additionalProperties.type",
        ),
        (
            json!({"properties": {"plain": {"$ref": "#/$defs/strings"}}, "$defs": {"strings": {"additionalProperties": {"type": "string"}}}}),
            "configSchema.$defs.strings.additionalProperties.type",
        ),
        (
            json!({"allOf": [true, {"additionalProperties": {"type": "string"}}]}),
            "configSchema.allOf[1].additionalProperties.type",
        ),
        (json!({"not": {"type": "object"}}), "configSchema.not"),
        (json!(false), "configSchema"),
    ];
    let l = config_from(lease("p", "kubernetes"), &[("creds", "config.json")]);
    for (schema, at) in cases {
        let err =
            contract::resolve_config(&l, &schema_driver(schema.clone()), secrets(&[("creds", "config.json", SECRET)]));
        let message = err.unwrap_err().to_string();
        assert_eq!(message, format!("the resolved config fails the driver's configSchema at {at}"), "{schema}");
        assert!(!message.contains(KEY) && !message.contains("hunter2"), "{message}");
    }
}

#[test]
fn inline_config_that_is_not_an_object_is_a_config_failure() {
    let mut l = lease("p", "kubernetes");
    l.spec.config = Some(json!(["not", "an", "object"]));
    assert!(
        contract::resolve_config(&l, &full_driver(), no_secrets).unwrap_err().to_string().contains("not a JSON object")
    );
}

#[test]
fn config_schema_defaults_to_draft_2020_12_unless_schema_names_another() {
    let mut l = lease("p", "kubernetes");
    l.spec.config = Some(json!({"pair": [1, "x"]}));
    // prefixItems exists only from draft 2020-12 on.
    let modern =
        json!({"type": "object", "properties": {"pair": {"prefixItems": [{"type": "integer"}, {"type": "integer"}]}}});
    assert!(contract::resolve_config(&l, &schema_driver(modern.clone()), no_secrets).is_err());
    let mut draft7 = modern;
    draft7["$schema"] = json!("http://json-schema.org/draft-07/schema#");
    assert!(contract::resolve_config(&l, &schema_driver(draft7), no_secrets).is_ok(), "draft 7 ignores prefixItems");
}

#[test]
fn verified_methods_come_from_a_succeeded_probe_in_provider_status_only() {
    use sandcap::api::{ProbeResult, SandboxProviderStatus, WorkerStatus};
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
    use sandcap::api::{ProbeResult, SandboxProviderStatus, WorkerStatus};
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
    let why = verified.why_nothing().unwrap();
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

#[test]
fn a_job_backend_narrows_in_any_spelling() {
    for spelling in ["job", "Job", "JOB", " job", "job\t"] {
        let mut l = lease("acme-kubernetes", "kubernetes");
        l.spec.backend = Some(spelling.into());
        let why = contract::job_backend(&l).unwrap_or_else(|| panic!("{spelling:?} is a Job backend"));
        assert!(why.contains(&format!("{spelling:?}")), "{why}");
    }
    for other in ["jobs", "sandbox-cr", ""] {
        let mut l = lease("acme-kubernetes", "kubernetes");
        l.spec.backend = Some(other.into());
        assert_eq!(contract::job_backend(&l), None, "{other:?}");
    }
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
