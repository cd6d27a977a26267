//! The CRD layer (docs/contract.md, "Resources and who enforces what"): one test per rule the CRD
//! carries, through the offline evaluator and through `sandcap validate`'s verdict. The expected
//! texts are what kube-apiserver 1.37.2 answered for the same objects; 1.35.4 answered the same
//! where a minor's forms could differ (`Server::V1_35`, checked on the cases older minors wrote otherwise).

mod support;

use sandcap::judge::judge;
use sandcap::schema::{Rejection, Server};
use sandcap::validation::Options;
use sandcap::versions::ContractVersion;
use serde_json::{Value, json};
use support::fixtures::*;

const D0: &str = "/spec/environmentDrivers/0";
const SEMVER: &str = r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-((0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(\+([0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*))?$";
const SKIPPED: &str = "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

/// Layer 1 of the default contract version (v1); `version_errors` checks another.
fn check(object: &Value, old: Option<&Value>, server: Server) -> Result<(), Rejection> {
    sandcap::schema::check(object, old, server, ContractVersion::V1)
}

fn errors(object: &Value, old: Option<&Value>, server: Server) -> Vec<String> {
    check(object, old, server).expect_err("layer 1 rejects").errors
}

/// The denial `sandcap validate` prints for the object.
fn denial(object: &Value) -> String {
    let judgment = judge(object, &Options::default(), Server::default());
    assert!(!judgment.allowed(), "denied: {judgment:?}");
    judgment.message()
}

fn provider_case(pointer: &str, value: Value) -> Value {
    set(provider_json(), pointer, value)
}

#[test]
fn the_examples_pass_layer_1() {
    assert_eq!(check(&provider_json(), None, Server::default()), Ok(()));
    assert_eq!(check(&lease_json(), None, Server::default()), Ok(()));
}

#[test]
fn one_error_has_no_brackets_several_do_as_the_apiserver_writes_them() {
    let one = provider_case("/spec/version", json!("1.4"));
    assert_eq!(
        denial(&one),
        format!(
            "SandboxProvider.sandcap.dev \"acme-kubernetes\" is invalid: spec.version: Invalid value: \"1.4\": spec.version in body should match '{SEMVER}'"
        )
    );
    let two = remove(provider_case("/spec/pluginKey", json!("Acme.Provider")), "/spec/version");
    assert_eq!(
        denial(&two),
        format!(
            "SandboxProvider.sandcap.dev \"acme-kubernetes\" is invalid: [spec.pluginKey: Invalid value: \"Acme.Provider\": spec.pluginKey in body should match '^[a-z0-9][a-z0-9._-]*$', spec.version: Required value, {SKIPPED}]"
        )
    );
}

#[test]
fn provider_schema_rules() {
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (
            provider_case("/spec/pluginKey", json!(7)),
            vec![
                "spec.pluginKey: Invalid value: \"integer\": spec.pluginKey in body must be of type string: \"integer\"",
                SKIPPED,
            ],
        ),
        (
            provider_case("/spec/pluginKey", json!("a".repeat(254))),
            vec!["spec.pluginKey: Too long: may not be more than 253 bytes", SKIPPED],
        ),
        (
            provider_case("/spec/worker/service/port", json!(0)),
            vec![
                "spec.worker.service.port: Invalid value: 0: spec.worker.service.port in body should be greater than or equal to 1",
            ],
        ),
        (
            provider_case("/spec/worker/service/port", json!(70000)),
            vec![
                "spec.worker.service.port: Invalid value: 70000: spec.worker.service.port in body should be less than or equal to 65535",
            ],
        ),
        (
            provider_case("/spec/worker/service/namespace", json!("Sandbox_System")),
            vec![
                "spec.worker.service.namespace: Invalid value: \"Sandbox_System\": spec.worker.service.namespace in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
            ],
        ),
        (
            provider_case("/spec/worker/service/path", json!("rpc")),
            vec![
                "spec.worker.service.path: Invalid value: \"rpc\": spec.worker.service.path in body should match '^/'",
            ],
        ),
        (
            provider_case("/spec/environmentDrivers", json!([])),
            vec![
                "spec.environmentDrivers: Invalid value: 0: spec.environmentDrivers in body should have at least 1 items",
            ],
        ),
        (
            provider_case("/spec/environmentDrivers", json!({})),
            vec![
                "spec.environmentDrivers: Invalid value: \"object\": spec.environmentDrivers in body must be of type array: \"object\"",
                SKIPPED,
            ],
        ),
        (
            provider_case(
                "/spec/environmentDrivers",
                Value::Array((0..65).map(|i| json!({"driverKey": format!("d{i}")})).collect()),
            ),
            vec!["spec.environmentDrivers: Too many: 65: must have at most 64 items", SKIPPED],
        ),
        (
            provider_case(&format!("{D0}/kind"), json!("sandbox-provider")),
            vec![
                "spec.environmentDrivers[0].kind: Unsupported value: \"sandbox-provider\": supported values: \"sandbox_provider\", \"environment_driver\"",
                SKIPPED,
            ],
        ),
        (
            provider_case(&format!("{D0}/displayName"), json!("")),
            vec![
                "spec.environmentDrivers[0].displayName: Invalid value: \"\": spec.environmentDrivers[0].displayName in body should be at least 1 chars long",
            ],
        ),
        (
            provider_case(&format!("{D0}/description"), json!("é".repeat(501))),
            vec!["spec.environmentDrivers[0].description: Too long: may not be more than 500 bytes", SKIPPED],
        ),
        (
            provider_case(&format!("{D0}/configSchema"), json!("object")),
            vec![
                "spec.environmentDrivers[0].configSchema: Invalid value: \"string\": spec.environmentDrivers[0].configSchema in body must be of type object: \"string\"",
                SKIPPED,
            ],
        ),
        (
            provider_case(&format!("{D0}/supportsReusableLeases"), json!("yes")),
            vec![
                "spec.environmentDrivers[0].supportsReusableLeases: Invalid value: \"string\": spec.environmentDrivers[0].supportsReusableLeases in body must be of type boolean: \"string\"",
                SKIPPED,
            ],
        ),
        (
            remove(provider_json(), "/spec/worker/service/name"),
            vec!["spec.worker.service.name: Required value", SKIPPED],
        ),
        (remove(provider_json(), "/spec"), vec!["spec: Required value", SKIPPED]),
        (
            provider_case("/metadata/name", json!("Acme_1")),
            vec![
                "metadata.name: Invalid value: \"Acme_1\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ],
        ),
    ];
    for (object, expected) in cases {
        assert_eq!(errors(&object, None, Server::V1_37), expected);
        assert!(denial(&object).contains(expected[0]), "{}", denial(&object));
    }
}

#[test]
fn driver_keys_are_unique_as_a_list_map() {
    let mut p = provider_json();
    let first = p.pointer(D0).unwrap().clone();
    p["spec"]["environmentDrivers"].as_array_mut().unwrap().push(first);
    for server in [Server::V1_35, Server::V1_37] {
        assert_eq!(
            errors(&p, None, server),
            ["spec.environmentDrivers[1]: Duplicate value: {\"driverKey\":\"kubernetes\"}"]
        );
    }
}

#[test]
fn exactly_one_of_service_or_url() {
    for (worker, which) in [
        (json!({}), "neither is set"),
        (json!({"service": {"namespace": "n", "name": "w", "port": 1}, "url": "https://w.example"}), "both are set"),
    ] {
        let p = provider_case("/spec/worker", worker);
        for server in [Server::V1_35, Server::V1_37] {
            assert_eq!(
                errors(&p, None, server),
                [format!("spec.worker: Invalid value: set exactly one of service or url: {which}")]
            );
        }
    }
    let url = provider_case("/spec/worker", json!({"url": "ftp://x/rpc"}));
    for server in [Server::V1_35, Server::V1_37] {
        assert_eq!(
            errors(&url, None, server),
            ["spec.worker.url: Invalid value: \"ftp://x/rpc\": must be an absolute http:// or https:// URL"]
        );
    }
    assert_eq!(
        check(&provider_case("/spec/worker", json!({"url": "https://w.example/rpc"})), None, Server::V1_37),
        Ok(())
    );
}

#[test]
fn sandbox_capabilities_are_the_versions_boolean_keys_and_removed_keys_say_so() {
    let caps = format!("{D0}/sandboxCapabilities");
    assert_eq!(
        errors(&provider_case(&format!("{caps}/nativeSyncIn"), json!("true")), None, Server::V1_37),
        [
            "spec.environmentDrivers[0].sandboxCapabilities.nativeSyncIn: Invalid value: \"string\": spec.environmentDrivers[0].sandboxCapabilities.nativeSyncIn in body must be of type boolean: \"string\"",
            SKIPPED
        ]
    );
    assert_eq!(
        errors(&provider_case(&format!("{caps}/reusableLease"), json!(true)), None, Server::V1_37),
        [
            "spec.environmentDrivers[0].sandboxCapabilities: Invalid value: unknown capability key \"reusableLease\": the keys of contract v1 are reusableLeases, nativeSyncIn, nativeSyncOut, persistentProcessSessions, independentControlCommands, incrementalSessionOutput"
        ]
    );
    for (key, v2) in
        [("concurrentSyncAndExec", ""), ("concurrentSyncOperations", ", or choose contract v2, which declares it")]
    {
        for value in [json!(true), json!(false)] {
            assert_eq!(
                errors(&provider_case(&format!("{caps}/{key}"), value), None, Server::V1_37),
                [format!(
                    "spec.environmentDrivers[0].sandboxCapabilities: Invalid value: {key} was removed from the contract (concurrency is no longer declared): delete it{v2}"
                )]
            );
        }
    }
    let many: serde_json::Map<String, Value> = (0..17).map(|i| (format!("k{i}"), json!(true))).collect();
    assert_eq!(
        errors(&provider_case(&caps, Value::Object(many)), None, Server::V1_37),
        ["spec.environmentDrivers[0].sandboxCapabilities: Too many: 17: must have at most 16 items", SKIPPED]
    );
}

/// The unknown-key rule names the keys (its `messageExpression`): the first three in byte order,
/// whatever order the map holds them in, each quoted as `strings.quote` does and cut to 64
/// characters (code points, not bytes), the rest counted; removed keys have their own rule. The
/// texts are what kube-apiserver 1.37.2 and 1.35.4 answered for the same maps.
#[test]
fn unknown_capability_keys_are_named() {
    const KEYS: &str = "the keys of contract v1 are reusableLeases, nativeSyncIn, nativeSyncOut, persistentProcessSessions, independentControlCommands, incrementalSessionOutput";
    let caps = format!("{D0}/sandboxCapabilities");
    let named = |map: Value| {
        let e = errors(&provider_case(&caps, map), None, Server::V1_37);
        assert_eq!(e.len(), 1, "{e:?}");
        let detail =
            e[0].strip_prefix("spec.environmentDrivers[0].sandboxCapabilities: Invalid value: unknown capability ");
        detail.and_then(|d| d.strip_suffix(&format!(": {KEYS}"))).unwrap_or_else(|| panic!("{e:?}")).to_string()
    };
    assert_eq!(named(json!({"reuseableLeases": true, "nativeSyncIn": true})), r#"key "reuseableLeases""#);
    assert_eq!(
        named(json!({"reuseableLeases": true, "nativeSynIn": false})),
        r#"keys "nativeSynIn", "reuseableLeases""#
    );
    assert_eq!(
        named(json!({"zz": true, "aa": true, "mm": true, "bb": true, "cc": true})),
        r#"keys "aa", "bb", "cc" and 2 more"#
    );
    let sixteen: serde_json::Map<String, Value> = (0..16).map(|i| (format!("k{i:02}"), json!(true))).collect();
    assert_eq!(named(Value::Object(sixteen)), r#"keys "k00", "k01", "k02" and 13 more"#);
    assert_eq!(named(json!({"x".repeat(100): true})), format!(r#"key "{}...""#, "x".repeat(64)));
    assert_eq!(named(json!({"é".repeat(64): true})), format!(r#"key "{}""#, "é".repeat(64)));
    assert_eq!(named(json!({"é".repeat(70): true})), format!(r#"key "{}...""#, "é".repeat(64)));
    assert_eq!(named(json!({"a\nb": true, "t\tc": true})), r#"keys "a\nb", "t\tc""#);
    assert_eq!(named(json!({" lead": true, "a\"q\\": true, "": true})), r#"keys "", " lead", "a\"q\\""#);
    let e = errors(
        &provider_case(&caps, json!({"concurrentSyncAndExec": true, "reuseableLeases": true})),
        None,
        Server::V1_35,
    );
    assert_eq!(
        e,
        [
            "spec.environmentDrivers[0].sandboxCapabilities: Invalid value: concurrentSyncAndExec was removed from the contract (concurrency is no longer declared): delete it".to_string(),
            format!("spec.environmentDrivers[0].sandboxCapabilities: Invalid value: unknown capability key \"reuseableLeases\": {KEYS}"),
        ]
    );
}

#[test]
fn schema_errors_come_before_cel_errors_and_skip_them_when_blocking() {
    let p = provider_case("/spec/version", json!("one"));
    let p = set(p, &format!("{D0}/sandboxCapabilities/concurrentSyncAndExec"), json!(true));
    let e = errors(&p, None, Server::V1_37);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].starts_with("spec.version: Invalid value: \"one\""));
    assert!(e[1].contains("concurrentSyncAndExec was removed"));
    let blocked = provider_case("/spec/version", json!(7));
    let blocked = set(blocked, "/spec/worker", json!({}));
    for server in [Server::V1_35, Server::V1_37] {
        assert_eq!(errors(&blocked, None, server)[1], SKIPPED);
    }
}

#[test]
fn lease_schema_rules() {
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (
            set(lease_json(), "/spec/policy", json!("Reuse")),
            vec![
                "spec.policy: Unsupported value: \"Reuse\": supported values: \"Ephemeral\", \"ReuseByEnvironment\"",
                SKIPPED,
            ],
        ),
        (
            remove(lease_json(), "/spec/environment"),
            vec!["spec.environment: Invalid value: environment is required when policy is ReuseByEnvironment"],
        ),
        (
            set(lease_json(), "/spec/environment", json!("")),
            vec!["spec.environment: Invalid value: environment is required when policy is ReuseByEnvironment"],
        ),
        // One problem per field: a wrong type is only a wrong type.
        (
            set(lease_json(), "/spec/environment", json!(7)),
            vec![
                "spec.environment: Invalid value: \"integer\": spec.environment in body must be of type string: \"integer\"",
                SKIPPED,
            ],
        ),
        (
            set(lease_json(), "/spec/providerRef/name", json!("Acme_K8s")),
            vec![
                "spec.providerRef.name: Invalid value: \"Acme_K8s\": spec.providerRef.name in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'",
            ],
        ),
        (
            set(
                lease_json(),
                "/spec/configFrom",
                Value::Array((0..17).map(|i| json!({"secretKeyRef": {"name": format!("s{i}"), "key": "k"}})).collect()),
            ),
            vec!["spec.configFrom: Too many: 17: must have at most 16 items", SKIPPED],
        ),
        (
            set(lease_json(), "/spec/configFrom/0/secretKeyRef/key", json!("a/b")),
            vec![
                "spec.configFrom[0].secretKeyRef.key: Invalid value: \"a/b\": spec.configFrom[0].secretKeyRef.key in body should match '^[-._a-zA-Z0-9]+$'",
            ],
        ),
        (remove(lease_json(), "/spec/workloadRef/kind"), vec!["spec.workloadRef.kind: Required value", SKIPPED]),
        (
            set(lease_json(), "/spec/config", json!("backend=job")),
            vec![
                "spec.config: Invalid value: \"string\": spec.config in body must be of type object: \"string\"",
                SKIPPED,
            ],
        ),
        (
            set(lease_json(), "/spec/nativeFileSyncUnsupported", json!("no")),
            vec![
                "spec.nativeFileSyncUnsupported: Invalid value: \"string\": spec.nativeFileSyncUnsupported in body must be of type boolean: \"string\"",
                SKIPPED,
            ],
        ),
    ];
    for (object, expected) in cases {
        assert_eq!(errors(&object, None, Server::V1_37), expected);
        assert!(denial(&object).starts_with("SandboxLease.sandcap.dev \"run-42\" is invalid: "));
    }
    assert_eq!(check(&remove(remove(lease_json(), "/spec/policy"), "/spec/environment"), None, Server::V1_37), Ok(()));
}

#[test]
fn immutable_fields_are_transition_rules_checked_only_on_update() {
    let old = provider_json();
    let new = provider_case("/spec/pluginKey", json!("acme.other"));
    assert_eq!(check(&new, None, Server::V1_37), Ok(()), "a create has no old object");
    for server in [Server::V1_35, Server::V1_37] {
        assert_eq!(
            errors(&new, Some(&old), server),
            [
                "spec.pluginKey: Invalid value: \"acme.other\": pluginKey is immutable: to register another plugin, create a new SandboxProvider"
            ]
        );
    }
    assert_eq!(check(&provider_case("/spec/version", json!("1.5.0")), Some(&old), Server::V1_37), Ok(()));
    let old = lease_json();
    let new = set(old.clone(), "/spec/providerRef/driverKey", json!("docker"));
    assert_eq!(
        errors(&new, Some(&old), Server::V1_37),
        [
            "spec.providerRef: Invalid value: providerRef is immutable: to use another provider or driver, create a new SandboxLease"
        ]
    );
}

#[test]
fn null_optional_fields_count_as_absent() {
    assert_eq!(check(&set(lease_json(), "/spec/workloadRef", Value::Null), None, Server::V1_37), Ok(()));
    // A null service is no service: the one-of rule names the worker.
    assert_eq!(
        errors(&provider_case("/spec/worker/service", Value::Null), None, Server::V1_37),
        ["spec.worker: Invalid value: set exactly one of service or url: neither is set"]
    );
}

/// `object` with keys `typo0`, `typo1`, ... added at `pointer` until it holds `keys` keys.
fn with_keys(object: Value, pointer: &str, keys: usize) -> Value {
    let mut target = object.pointer(pointer).and_then(Value::as_object).cloned().expect("an object");
    let mut i = 0;
    while target.len() < keys {
        target.insert(format!("typo{i}"), json!(1));
        i += 1;
    }
    set(object, pointer, Value::Object(target))
}

/// Every object in `spec` keeps unknown keys for the webhook to name, and counts them: 16 keys are
/// the webhook's to judge, 17 the apiserver refuses (a flood of unknown keys never reaches the
/// webhook).
#[test]
fn every_spec_object_is_bounded_in_its_keys_unknown_keys_included() {
    let provider_objects = ["/spec", "/spec/worker", "/spec/worker/service", D0];
    let lease_objects =
        ["/spec", "/spec/providerRef", "/spec/workloadRef", "/spec/configFrom/0", "/spec/configFrom/0/secretKeyRef"];
    let cases =
        provider_objects.map(|p| (provider_json(), p)).into_iter().chain(lease_objects.map(|p| (lease_json(), p)));
    for (object, pointer) in cases {
        let path = pointer.trim_start_matches('/').replace("/environmentDrivers/0", ".environmentDrivers[0]");
        let path = path.replace("/configFrom/0", ".configFrom[0]").replace('/', ".");
        assert_eq!(check(&with_keys(object.clone(), pointer, 16), None, Server::V1_37), Ok(()), "{path}");
        assert_eq!(
            errors(&with_keys(object, pointer, 17), None, Server::V1_37),
            [format!("{path}: Too many: 17: must have at most 16 items"), SKIPPED.to_string()],
        );
    }
    // The apiserver counts after defaulting (a lease's `policy`) and after dropping the null of a
    // field that is neither nullable nor defaulted; it keeps a nullable field's null and an
    // unknown key's null, and counts them.
    let lease = json!({"providerRef": {"name": "acme", "driverKey": "kubernetes"}});
    let lease = with_keys(set(lease_json(), "/spec", lease), "/spec", 15);
    for fits in [
        lease.clone(),
        set(lease.clone(), "/spec/config", Value::Null),
        set(lease.clone(), "/spec/policy", Value::Null),
    ] {
        assert_eq!(check(&fits, None, Server::V1_37), Ok(()), "{fits}");
    }
    for counted in ["/spec/environment", "/spec/typo99"] {
        assert_eq!(
            errors(&set(lease.clone(), counted, Value::Null), None, Server::V1_37),
            ["spec: Too many: 17: must have at most 16 items", SKIPPED],
            "{counted}"
        );
    }
    let flood = with_keys(lease_json(), "/spec", 100_000);
    assert_eq!(errors(&flood, None, Server::V1_37)[0], "spec: Too many: 100000: must have at most 16 items");
}

#[test]
fn config_and_config_schema_are_bounded_in_their_keys() {
    let schema = format!("{D0}/configSchema");
    let cases = [
        (lease_json(), "/spec/config".to_string(), "spec.config", 128),
        (provider_json(), schema.clone(), "spec.environmentDrivers[0].configSchema", 64),
        (provider_json(), format!("{schema}/properties"), "spec.environmentDrivers[0].configSchema.properties", 128),
    ];
    for (object, pointer, path, max) in cases {
        assert_eq!(check(&with_keys(object.clone(), &pointer, max), None, Server::V1_37), Ok(()), "{path}");
        assert_eq!(
            errors(&with_keys(object, &pointer, max + 1), None, Server::V1_37),
            [format!("{path}: Too many: {}: must have at most {max} items", max + 1), SKIPPED.to_string()],
        );
    }
    // Below its top level, config is the configSchema's to judge (and the request size's to bound).
    let nested =
        json!({"deep": {"keys": (0..1000).map(|i| (format!("k{i}"), json!(i))).collect::<serde_json::Map<_, _>>()}});
    assert_eq!(check(&set(lease_json(), "/spec/config", nested), None, Server::V1_37), Ok(()));
}

/// The host's first-party manifests declare all nine keys: v2 admits them, v1 refuses each key it
/// does not have and names the version that would admit it.
#[test]
fn nine_keys_are_admitted_under_v2_and_refused_under_v1_naming_v2() {
    let nine: serde_json::Map<String, Value> =
        ContractVersion::V2.contract().capabilities().map(|c| (c.key().to_string(), json!(true))).collect();
    let provider = provider_case(&format!("{D0}/sandboxCapabilities"), Value::Object(nine));
    for server in [Server::V1_35, Server::V1_37] {
        assert_eq!(sandcap::schema::check(&provider, None, server, ContractVersion::V2), Ok(()));
        let refused = check(&provider, None, server).expect_err("v1 refuses the three").errors;
        let at = "spec.environmentDrivers[0].sandboxCapabilities: Invalid value: ";
        assert_eq!(
            refused,
            [
                format!(
                    "{at}concurrentSyncOperations was removed from the contract (concurrency is no longer declared): delete it, or choose contract v2, which declares it"
                ),
                format!(
                    "{at}duplexCommandStream is not a key of contract v1, the one this cluster enforces: delete it, or choose contract v2, which declares it"
                ),
                format!(
                    "{at}runnerWebSocketIngress is not a key of contract v1, the one this cluster enforces: delete it, or choose contract v2, which declares it"
                ),
            ]
        );
    }
    // concurrentSyncAndExec stays removed, and a typo is unknown in v2 too.
    let caps = format!("{D0}/sandboxCapabilities");
    let removed = provider_case(&caps, json!({"concurrentSyncAndExec": true, "duplexCommandStrem": true}));
    let e = sandcap::schema::check(&removed, None, Server::V1_37, ContractVersion::V2).expect_err("refused").errors;
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].ends_with(
        "concurrentSyncAndExec was removed from the contract (concurrency is no longer declared): delete it"
    ));
    assert!(
        e[1].contains(r#"unknown capability key "duplexCommandStrem": the keys of contract v2 are reusableLeases"#),
        "{e:?}"
    );
}
