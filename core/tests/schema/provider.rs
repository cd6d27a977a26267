//! The provider's rules: its fields, its drivers' keys, where its worker is, and each version's
//! capability keys (removed and unknown ones named).

use sandcap_core::schema::Server;
use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};

use super::{D0, SEMVER, SKIPPED, check, denial, errors, provider_case, skipped};
use crate::support::*;

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
            skipped(
                "spec.pluginKey: Invalid value: \"integer\": spec.pluginKey in body must be of type string: \"integer\"",
            ),
        ),
        (
            provider_case("/spec/pluginKey", json!("a".repeat(254))),
            skipped("spec.pluginKey: Too long: may not be more than 253 bytes"),
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
            skipped(
                "spec.environmentDrivers: Invalid value: \"object\": spec.environmentDrivers in body must be of type array: \"object\"",
            ),
        ),
        (
            provider_case(
                "/spec/environmentDrivers",
                Value::Array((0..65).map(|i| json!({"driverKey": format!("d{i}")})).collect()),
            ),
            skipped("spec.environmentDrivers: Too many: 65: must have at most 64 items"),
        ),
        (
            provider_case(&format!("{D0}/kind"), json!("sandbox-provider")),
            skipped(
                "spec.environmentDrivers[0].kind: Unsupported value: \"sandbox-provider\": supported values: \"sandbox_provider\", \"environment_driver\"",
            ),
        ),
        (
            provider_case(&format!("{D0}/displayName"), json!("")),
            vec![
                "spec.environmentDrivers[0].displayName: Invalid value: \"\": spec.environmentDrivers[0].displayName in body should be at least 1 chars long",
            ],
        ),
        (
            provider_case(&format!("{D0}/description"), json!("é".repeat(501))),
            skipped("spec.environmentDrivers[0].description: Too long: may not be more than 500 bytes"),
        ),
        (
            provider_case(&format!("{D0}/configSchema"), json!("object")),
            skipped(
                "spec.environmentDrivers[0].configSchema: Invalid value: \"string\": spec.environmentDrivers[0].configSchema in body must be of type object: \"string\"",
            ),
        ),
        (
            provider_case(&format!("{D0}/supportsReusableLeases"), json!("yes")),
            skipped(
                "spec.environmentDrivers[0].supportsReusableLeases: Invalid value: \"string\": spec.environmentDrivers[0].supportsReusableLeases in body must be of type boolean: \"string\"",
            ),
        ),
        (remove(provider_json(), "/spec/worker/service/name"), skipped("spec.worker.service.name: Required value")),
        (remove(provider_json(), "/spec"), skipped("spec: Required value")),
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

/// The host's first-party manifests declare all nine keys: v2 admits them, v1 refuses each key it
/// does not have and names the version that would admit it.
#[test]
fn nine_keys_are_admitted_under_v2_and_refused_under_v1_naming_v2() {
    let nine: serde_json::Map<String, Value> =
        ContractVersion::V2.contract().capabilities().map(|c| (c.key().to_string(), json!(true))).collect();
    let provider = provider_case(&format!("{D0}/sandboxCapabilities"), Value::Object(nine));
    for server in [Server::V1_35, Server::V1_37] {
        assert_eq!(sandcap_core::schema::check(&provider, None, server, ContractVersion::V2), Ok(()));
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
    let e =
        sandcap_core::schema::check(&removed, None, Server::V1_37, ContractVersion::V2).expect_err("refused").errors;
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].ends_with(
        "concurrentSyncAndExec was removed from the contract (concurrency is no longer declared): delete it"
    ));
    assert!(
        e[1].contains(r#"unknown capability key "duplexCommandStrem": the keys of contract v2 are reusableLeases"#),
        "{e:?}"
    );
}
