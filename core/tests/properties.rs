//! Property tests for the invariants of `effective = verified ∩ declared ∩ narrowing`.

mod support;

use proptest::prelude::*;
use sandcap_core::addresses::WorkerPolicy;
use sandcap_core::api::{DeclaredCapabilities, DriverDeclaration, LeasePolicy};
use sandcap_core::api::{SandboxLease, SandboxProvider};
use sandcap_core::contract::{
    Capability, Contract, Declared, FailedConfig, IdentityFailure, JobBackend, Narrowing, Reason, Refusals, Verified,
    resolve, resolve_driver, resolve_lease,
};
use sandcap_core::judge::{Server, judge};
use sandcap_core::validation::{ALREADY_STORED, MAX_WARNING_LEN, Options, REVIEWED, Shape, identify, review};
use sandcap_core::versions::{ContractVersion, V1, V2};
use sandcap_core::vocabulary::DriverKind;
use serde_json::{Value, json};

fn contract() -> impl Strategy<Value = &'static Contract> {
    prop::sample::select(ContractVersion::ALL.to_vec()).prop_map(ContractVersion::contract)
}

fn verified() -> impl Strategy<Value = Verified> {
    let noise = prop::sample::select(vec!["initialize", "environmentTeleport", "", "environmentexecute"]);
    let methods = V2.worker_methods();
    (prop::sample::subsequence(methods.clone(), 0..=methods.len()), prop::collection::vec(noise, 0..3), any::<bool>())
        .prop_map(
            |(methods, noise, failed)| {
                if failed { Verified::nothing() } else { Verified::methods(methods.into_iter().chain(noise)) }
            },
        )
}

fn driver() -> impl Strategy<Value = DriverDeclaration> {
    (
        prop::array::uniform9(prop::option::of(any::<bool>())),
        prop::option::of(any::<bool>()),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(keys, legacy, has_caps, sandbox)| {
            let mut caps = DeclaredCapabilities::default();
            for (cap, v) in Capability::ALL.into_iter().zip(keys) {
                caps.set(cap, v);
            }
            DriverDeclaration {
                driver_key: "d".into(),
                kind: Some(if sandbox { DriverKind::SandboxProvider } else { DriverKind::EnvironmentDriver }),
                supports_reusable_leases: legacy,
                sandbox_capabilities: has_caps.then_some(caps),
                ..Default::default()
            }
        })
}

fn unrefused_narrowing() -> impl Strategy<Value = Narrowing> {
    (
        any::<bool>(),
        prop::option::of(prop::sample::select(vec![LeasePolicy::Ephemeral, LeasePolicy::ReuseByEnvironment])),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(identity, policy, job, nfs, config)| Narrowing {
            refusals: Refusals::default(),
            identity_failure: identity.then(|| IdentityFailure::ProviderNotFound { name: "identity".into() }),
            policy,
            job_backend: job.then(|| JobBackend::Backend("job".into())),
            native_file_sync_unsupported: nfs,
            config_failure: config.then(|| FailedConfig::Published("config".into())),
        })
}

/// A narrowing, sometimes with one or both objects refused by today's rules.
fn narrowing() -> impl Strategy<Value = Narrowing> {
    (unrefused_narrowing(), any::<bool>(), any::<bool>()).prop_map(|(n, lease, provider)| Narrowing {
        refusals: Refusals {
            lease: lease.then(|| "lease problems".into()),
            provider: provider.then(|| "problems".into()),
        },
        ..n
    })
}

/// What the narrowing lets through, written independently of the implementation.
fn narrowing_allows(n: &Narrowing, cap: Capability) -> bool {
    use Capability::*;
    n.refusals == Refusals::default()
        && n.identity_failure.is_none()
        && match cap {
            ReusableLeases => n.policy.is_none_or(|p| p == LeasePolicy::ReuseByEnvironment),
            NativeSyncIn | NativeSyncOut => n.job_backend.is_none() && !n.native_file_sync_unsupported,
            PersistentProcessSessions | IncrementalSessionOutput => n.config_failure.is_none(),
            IndependentControlCommands | RunnerWebSocketIngress => true,
            ConcurrentSyncOperations => n.job_backend.is_none() && !n.native_file_sync_unsupported,
            DuplexCommandStream => n.config_failure.is_none(),
        }
}

fn worker_verifies(v: &Verified, cap: Capability) -> bool {
    V2.rule(cap).expect("every key is v2's").methods.iter().all(|m| v.has(m.as_str()))
}

proptest! {
    // About a third of the edited objects are not readable as the types and are rejected (the
    // apiserver would never store them): room for that many, so that no run aborts on "Too many
    // global rejects" (the default allows 1024, which 2000 cases exceed about once in 40 runs).
    #![proptest_config(ProptestConfig { cases: 2000, max_global_rejects: 8192, ..ProptestConfig::default() })]

    #[test]
    fn effective_is_exactly_verified_and_declared_and_narrowing(
        c in contract(), v in verified(), d in driver(), n in narrowing(),
    ) {
        let declared = Declared::from_driver(c, &d);
        let r = resolve(c, &v, &declared, &n);
        for rule in c.keys {
            let cap = rule.capability;
            let expected = worker_verifies(&v, cap) && declared.allows(rule) && narrowing_allows(&n, cap);
            prop_assert_eq!(r.is_granted(cap), expected, "{}", cap);
        }
        for cap in Capability::ALL.into_iter().filter(|cap| !c.has(*cap)) {
            prop_assert!(!r.is_granted(cap), "{} is not a key of {}", cap, c.version);
        }
    }

    /// v2 keeps v1's six keys as they are: the same answer and the same explanation for each.
    #[test]
    fn the_six_keys_resolve_alike_in_every_version(v in verified(), d in driver(), n in narrowing()) {
        let v1 = resolve(&V1, &v, &Declared::from_driver(&V1, &d), &n);
        let v2 = resolve(&V2, &v, &Declared::from_driver(&V2, &d), &n);
        prop_assert_eq!(&v1.explanations[..], &v2.explanations[..V1.keys.len()]);
    }

    #[test]
    fn a_declaration_never_grants_what_the_worker_did_not_verify(c in contract(), v in verified(), d in driver()) {
        let r = resolve_driver(c, &v, &d, None);
        for cap in Capability::ALL {
            if r.is_granted(cap) {
                prop_assert!(worker_verifies(&v, cap), "{} granted without its methods", cap);
                prop_assert!(!v.is_nothing());
            }
        }
    }

    #[test]
    fn narrowing_only_removes(c in contract(), v in verified(), d in driver(), n in narrowing()) {
        let declared = Declared::from_driver(c, &d);
        let provider_level = resolve(c, &v, &declared, &Narrowing::default());
        let lease_level = resolve(c, &v, &declared, &n);
        for cap in Capability::ALL {
            prop_assert!(!lease_level.is_granted(cap) || provider_level.is_granted(cap));
        }
    }

    #[test]
    fn fewer_verified_methods_never_grant_more(c in contract(), d in driver(), n in narrowing(), drop in 0usize..8) {
        let declared = Declared::from_driver(c, &d);
        let all = resolve(c, &support::all_verified(), &declared, &n);
        let dropped = V2.worker_methods()[drop];
        let fewer = resolve(c, &support::verified_without(&[dropped]), &declared, &n);
        for cap in Capability::ALL {
            prop_assert!(!fewer.is_granted(cap) || all.is_granted(cap));
        }
    }

    #[test]
    fn every_capability_is_explained_once_and_consistently(
        c in contract(), v in verified(), d in driver(), n in narrowing(),
    ) {
        let r = resolve(c, &v, &Declared::from_driver(c, &d), &n);
        prop_assert_eq!(r.explanations.len(), c.keys.len());
        for (e, cap) in r.explanations.iter().zip(c.capabilities()) {
            prop_assert_eq!(e.capability, cap);
            prop_assert_eq!(e.granted, r.is_granted(cap));
            prop_assert_eq!(e.granted, e.reason == Reason::Granted);
            prop_assert!(!e.message.is_empty());
        }
    }

    #[test]
    fn sync_capabilities_are_verified_together(c in contract(), v in verified(), d in driver(), n in narrowing()) {
        let declared = Declared::from_driver(c, &d);
        let r = resolve(c, &v, &declared, &n);
        let reason = |c| r.explanations.iter().find(|e| e.capability == c).unwrap().reason;
        let worker_gate = |x: Reason| matches!(x, Reason::WorkerNotVerified | Reason::MissingWorkerMethods);
        prop_assert_eq!(worker_gate(reason(Capability::NativeSyncIn)), worker_gate(reason(Capability::NativeSyncOut)));
    }

    /// Fail closed: an object that `validate` denies grants nothing, whatever the other object,
    /// the worker and the rest of the lease say. The objects are honest ones with keys added
    /// (misspelt, unknown or real) and the backend respelt.
    #[test]
    fn an_object_that_validate_denies_grants_nothing(
        provider_edits in edits(),
        lease_edits in edits(),
        v in verified(),
        c in contract(),
    ) {
        let provider = edited(support::provider_json(), &provider_edits, "/spec/environmentDrivers/0");
        let lease = edited(support::lease_json(), &lease_edits, "/spec");
        let options = Options { contract: c.version, ..Options::default() };
        let refusal = |object: &Value| judge(object, &options, Server::default()).refusal();
        let refusals = Refusals { lease: refusal(&lease), provider: refusal(&provider) };
        let (Ok(mut typed_provider), Ok(typed_lease)) = (
            serde_json::from_value::<SandboxProvider>(provider),
            serde_json::from_value::<SandboxLease>(lease),
        ) else {
            return Err(TestCaseError::reject("not readable as the types (never stored: the CRD's types refuse it)"));
        };
        typed_provider.metadata.uid = Some("uid".into());
        let secret = |_: &_| sandcap_core::contract::SecretLookup::Found(b"{}".to_vec());
        let r = resolve_lease(c, &typed_lease, Some(&typed_provider), &v, &refusals, secret);
        if refusals != Refusals::default() {
            for e in &r.resolution.explanations {
                prop_assert!(!e.granted, "{} granted although {:?}", e.capability, refusals);
                // The gates before a provider's refusal may stop it first (the driver's kind).
                let closed = [Reason::LeaseNotValid, Reason::PluginIdentityFailed, Reason::ProviderNotValid];
                prop_assert!(closed.contains(&e.reason), "{:?}", e.reason);
            }
        }
        let driver = &typed_provider.spec.environment_drivers[0];
        let provider_level = resolve_driver(c, &v, driver, refusals.provider.as_deref());
        if refusals.provider.is_some() {
            prop_assert!(Capability::ALL.into_iter().all(|c| !provider_level.is_granted(c)));
        }
    }

    /// The validator answers every JSON value (never panics) and a denial always has a message.
    #[test]
    fn validation_is_total(value in arbitrary_json()) {
        for kind in ["SandboxProvider", "SandboxLease"] {
            let object = json!({"apiVersion": "sandcap.dev/v1alpha1", "kind": kind, "metadata": {"name": "x"}, "spec": value.clone()});
            let v = review(&object, None, &Options::default());
            prop_assert!(v.allowed() || !v.message().is_empty());
        }
    }

    /// The webhook builds only the parts of an object and of the stored object that the rules
    /// read (`REVIEWED`); the verdict and the reported name are those of the whole objects,
    /// whatever their shape.
    #[test]
    fn reviewing_the_decoded_parts_is_reviewing_the_whole(
        object in prop_oneof![object(), arbitrary_json()],
        old in prop_oneof![object(), arbitrary_json()],
        allow_worker_urls in any::<bool>(),
    ) {
        let parts = |shape: Shape, v: &Value| shape.decode(&v.to_string()).unwrap();
        let workers = WorkerPolicy { allow_urls: allow_worker_urls, ..WorkerPolicy::default() };
        let options = Options { workers, ..Options::default() };
        prop_assert_eq!(
            review(&parts(REVIEWED, &object), Some(&parts(REVIEWED, &old)), &options),
            review(&object, Some(&old), &options)
        );
        prop_assert_eq!(identify(&parts(REVIEWED, &object)), identify(&object));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Ratcheting: an update that changes only labels, annotations or status is never denied,
    /// however broken the stored object is, and its problems come back as warnings.
    #[test]
    fn an_update_of_metadata_alone_is_never_denied(stored in object(), allow_worker_urls in any::<bool>()) {
        let mut updated = stored.clone();
        match updated["metadata"].as_object_mut() {
            Some(metadata) => {
                metadata.insert("labels".into(), json!({"team": "a"}));
                metadata.insert("annotations".into(), json!({"note": "b"}));
            }
            None => updated["status"] = json!({"changed": true}),
        }
        let workers = WorkerPolicy { allow_urls: allow_worker_urls, ..WorkerPolicy::default() };
        let options = Options { workers, ..Options::default() };
        let update = review(&updated, Some(&stored), &options);
        prop_assert!(update.allowed(), "{}", update.message());
        let create = review(&updated, None, &options);
        let ratcheted = update.warnings.iter().filter(|w| w.starts_with(ALREADY_STORED)).count();
        prop_assert_eq!(ratcheted, create.problems.len());
        prop_assert!(update.warnings.iter().all(|w| w.len() < MAX_WARNING_LEN));
    }

    /// Ratcheting only forgives what is stored: an update is denied for every problem the object
    /// has that the stored object has not.
    #[test]
    fn an_update_is_denied_for_every_problem_it_brings_in(object in object(), stored in object()) {
        let options = Options::default();
        let create = review(&object, None, &options).problems;
        let stored_problems = review(&stored, None, &options).problems;
        let update = review(&object, Some(&stored), &options).problems;
        for problem in create.iter().filter(|p| !stored_problems.contains(p)) {
            prop_assert!(update.contains(problem), "{} not denied", problem);
        }
        prop_assert!(update.iter().all(|p| create.contains(p)), "ratcheting never adds a problem");
    }
}

/// A sandcap object (or something posing as one) with arbitrary metadata, spec and extra fields.
fn object() -> impl Strategy<Value = Value> {
    let kind = prop::sample::select(vec!["SandboxProvider", "SandboxLease", "Pod"]);
    (kind, arbitrary_json(), prop::option::of("[a-z0-9.-]{0,8}"), arbitrary_json(), arbitrary_json()).prop_map(
        |(kind, mut metadata, name, spec, status)| {
            if let (Some(m), Some(name)) = (metadata.as_object_mut(), name) {
                m.insert("name".into(), name.into());
            }
            json!({"apiVersion": "sandcap.dev/v1alpha1", "kind": kind, "metadata": metadata, "spec": spec, "status": status})
        },
    )
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let keys = prop::sample::select(vec![
        "pluginKey",
        "version",
        "worker",
        "service",
        "url",
        "environmentDrivers",
        "driverKey",
        "kind",
        "sandboxCapabilities",
        "nativeSyncIn",
        "providerRef",
        "policy",
        "configFrom",
        "secretKeyRef",
        "name",
        "generateName",
        "metadata",
        "spec",
        "x",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-zA-Z0-9./_-]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys.clone(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}

/// Keys set on an honest object: real field names, misspellings and strangers, with booleans,
/// strings (the backend's spellings among them) or null.
fn edits() -> impl Strategy<Value = Vec<(&'static str, Value)>> {
    let key = prop::sample::select(vec![
        "backend",
        "nativeFileSyncUnsupported",
        "nativeFileSyncUnsuported",
        "sandboxCapabilites",
        "sandboxCapabilities",
        "supportsReusableLeases",
        "policy",
        "kind",
        "x",
    ]);
    let value = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop::sample::select(vec!["job", "Job", "JOB", " job", "job ", "sandbox-cr", "sandbox_provider", ""])
            .prop_map(|s| Value::String(s.into())),
        Just(json!({"reusableLeases": false})),
    ];
    prop::collection::vec((key, value), 0..3)
}

/// `object` with each edit set on the object at `at`.
fn edited(mut object: Value, edits: &[(&str, Value)], at: &str) -> Value {
    let target = object.pointer_mut(at).and_then(Value::as_object_mut).expect("an object there");
    for (key, value) in edits {
        target.insert((*key).to_string(), value.clone());
    }
    object
}
