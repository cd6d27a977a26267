//! One table-driven test per admission rule of API.md sections 2 and 5, plus the CRD schema's part
//! of the verdict (no pruning, and never more lenient than the apiserver).

mod common;

use common::*;
use sandcap::validation::{ALREADY_STORED, MAX_WARNING_LEN, Options, REVIEWED, review};
use serde_json::{Value, json};

fn deny(object: &Value) -> String {
    let v = review(object, None, &Options::default());
    assert!(!v.allowed(), "expected a denial for {object}");
    for p in &v.problems {
        assert!(!p.message.contains("; "), "a problem must not contain the separator: {p}");
    }
    v.message()
}

fn allow(object: &Value) -> Vec<String> {
    let v = review(object, None, &Options::default());
    assert!(v.allowed(), "expected allowed, got: {}", v.message());
    v.warnings
}

const D0: &str = "/spec/environmentDrivers/0";

#[test]
fn the_api_md_examples_are_allowed_without_warnings() {
    assert!(allow(&provider_json()).is_empty());
    assert!(allow(&lease_json()).is_empty());
}

#[test]
fn provider_field_rules() {
    let cases: Vec<(Value, &str)> = vec![
        (remove(provider_json(), "/spec/pluginKey"), "spec.pluginKey: required"),
        (
            set(provider_json(), "/spec/pluginKey", json!("Acme.Provider")),
            "spec.pluginKey: \"Acme.Provider\" must match ^[a-z0-9][a-z0-9._-]*$",
        ),
        (set(provider_json(), "/spec/pluginKey", json!("-acme")), "spec.pluginKey: \"-acme\" must match"),
        (set(provider_json(), "/spec/pluginKey", json!(7)), "spec.pluginKey: must be a string, got a number"),
        (remove(provider_json(), "/spec/version"), "spec.version: required"),
        (set(provider_json(), "/spec/version", json!("1.4")), "spec.version: \"1.4\" is not a semantic version"),
        (set(provider_json(), "/spec/version", json!("v1.4.0")), "spec.version: \"v1.4.0\" is not a semantic version"),
        (remove(provider_json(), "/spec/worker"), "spec.worker: required"),
        (set(provider_json(), "/spec/worker", json!({})), "spec.worker: set exactly one of service or url"),
        (
            set(provider_json(), "/spec/worker/url", json!("https://w.example")),
            "spec.worker: set exactly one of service or url, not both",
        ),
        (
            set(provider_json(), "/spec/worker/service/port", json!(0)),
            "spec.worker.service.port: must be an integer from 1 to 65535",
        ),
        (
            set(provider_json(), "/spec/worker/service/port", json!(70000)),
            "spec.worker.service.port: must be an integer from 1 to 65535",
        ),
        (
            set(provider_json(), "/spec/worker/service/namespace", json!("Sandbox_System")),
            "spec.worker.service.namespace: \"Sandbox_System\" is not a valid DNS-1123 label",
        ),
        (remove(provider_json(), "/spec/worker/service/name"), "spec.worker.service.name: required"),
        (
            set(provider_json(), "/spec/worker/service/path", json!("rpc")),
            "spec.worker.service.path: \"rpc\" must start with /",
        ),
        (set(provider_json(), "/spec/worker/service/tls", json!(true)), "spec.worker.service.tls: unknown field"),
        (remove(provider_json(), "/spec/environmentDrivers"), "spec.environmentDrivers: required"),
        (
            set(provider_json(), "/spec/environmentDrivers", json!([])),
            "spec.environmentDrivers: must declare at least one driver",
        ),
        (
            set(provider_json(), "/spec/environmentDrivers", json!({})),
            "spec.environmentDrivers: must be a list, got an object",
        ),
        (
            set(provider_json(), "/spec/pluginkey", json!("typo")),
            "spec.pluginkey: unknown field (allowed fields: pluginKey, version, worker, environmentDrivers)",
        ),
        (remove(provider_json(), "/spec"), "spec: required"),
    ];
    for (object, expected) in cases {
        let message = deny(&object);
        assert!(message.contains(expected), "\n got: {message}\nwant: {expected}");
    }
}

#[test]
fn driver_entry_rules() {
    let cases: Vec<(Value, &str)> = vec![
        (remove(provider_json(), &format!("{D0}/driverKey")), "spec.environmentDrivers[0].driverKey: required"),
        (
            set(provider_json(), &format!("{D0}/driverKey"), json!("Kube rnetes")),
            "spec.environmentDrivers[0].driverKey: \"Kube rnetes\" must match",
        ),
        (
            set(provider_json(), &format!("{D0}/kind"), json!("sandbox-provider")),
            "spec.environmentDrivers[0].kind: \"sandbox-provider\" is not a driver kind",
        ),
        (
            set(provider_json(), &format!("{D0}/displayName"), json!("")),
            "spec.environmentDrivers[0].displayName: must be 1 to 100 characters, got 0",
        ),
        (
            set(provider_json(), &format!("{D0}/displayName"), json!("x".repeat(101))),
            "displayName: must be 1 to 100 characters, got 101",
        ),
        (
            set(provider_json(), &format!("{D0}/description"), json!("é".repeat(501))),
            "description: must be at most 500 characters, got 501",
        ),
        (
            set(provider_json(), &format!("{D0}/configSchema"), json!("object")),
            "configSchema: must be a JSON Schema object, got a string",
        ),
        (
            set(provider_json(), &format!("{D0}/configSchema"), json!({"type": "objekt"})),
            "spec.environmentDrivers[0].configSchema: is not a valid JSON Schema",
        ),
        (
            set(provider_json(), &format!("{D0}/configSchema"), json!({"minLength": -1})),
            "configSchema: is not a valid JSON Schema",
        ),
        (
            set(provider_json(), &format!("{D0}/supportsReusableLeases"), json!("yes")),
            "supportsReusableLeases: must be a boolean",
        ),
        (
            set(provider_json(), &format!("{D0}/displayname"), json!("typo")),
            "spec.environmentDrivers[0].displayname: unknown field",
        ),
        (
            set(provider_json(), &format!("{D0}/nativeSyncIn"), json!(true)),
            "spec.environmentDrivers[0].nativeSyncIn: unknown field (allowed fields: driverKey, kind, displayName, description, configSchema, supportsReusableLeases, sandboxCapabilities) (capability keys belong under spec.environmentDrivers[0].sandboxCapabilities)",
        ),
        (
            set(provider_json(), "/spec/environmentDrivers/0", json!("kubernetes")),
            "spec.environmentDrivers[0]: must be an object, got a string",
        ),
    ];
    for (object, expected) in cases {
        let message = deny(&object);
        assert!(message.contains(expected), "\n got: {message}\nwant: {expected}");
    }
}

#[test]
fn driver_keys_are_unique() {
    let mut p = provider_json();
    let second = p.pointer(D0).unwrap().clone();
    p["spec"]["environmentDrivers"].as_array_mut().unwrap().push(second);
    assert_eq!(
        deny(&p),
        "spec.environmentDrivers[1].driverKey: duplicate driverKey \"kubernetes\" (first declared at spec.environmentDrivers[0])"
    );
}

#[test]
fn config_schema_with_a_remote_ref_is_rejected_not_fetched() {
    let p = set(provider_json(), &format!("{D0}/configSchema"), json!({"$ref": "https://example.invalid/schema.json"}));
    assert!(deny(&p).contains("configSchema: is not a valid JSON Schema"));
}

#[test]
fn sandbox_capabilities_accept_only_the_six_keys_with_boolean_values() {
    let caps = format!("{D0}/sandboxCapabilities");
    for key in [
        "reusableLeases",
        "nativeSyncIn",
        "nativeSyncOut",
        "persistentProcessSessions",
        "independentControlCommands",
        "incrementalSessionOutput",
    ] {
        allow(&set(provider_json(), &format!("{caps}/{key}"), json!(true)));
        let message = deny(&set(provider_json(), &format!("{caps}/{key}"), json!("true")));
        assert_eq!(
            message,
            format!(
                "spec.environmentDrivers[0].sandboxCapabilities.{key}: must be a boolean (true or false), got a string"
            )
        );
    }
    assert!(deny(&set(provider_json(), &format!("{caps}/reusableLease"), json!(true)))
        .starts_with("spec.environmentDrivers[0].sandboxCapabilities.reusableLease: unknown capability key (the keys are reusableLeases,"));
    assert!(
        deny(&set(provider_json(), &caps, json!([]))).contains("sandboxCapabilities: must be an object, got a list")
    );
}

#[test]
fn removed_concurrency_keys_are_rejected_as_removed_from_the_contract() {
    for key in ["concurrentSyncAndExec", "concurrentSyncOperations"] {
        for value in [json!(true), json!(false)] {
            let message = deny(&set(provider_json(), &format!("{D0}/sandboxCapabilities/{key}"), value));
            assert_eq!(
                message,
                format!(
                    "spec.environmentDrivers[0].sandboxCapabilities.{key}: unknown capability key: it was removed from the contract (concurrency is no longer declared), delete it"
                )
            );
        }
    }
}

#[test]
fn every_problem_is_reported_at_once_joined_by_semicolons() {
    let mut p = set(provider_json(), "/spec/version", json!("one"));
    p = set(p, &format!("{D0}/sandboxCapabilities/concurrentSyncAndExec"), json!(true));
    p = set(p, &format!("{D0}/sandboxCapabilities/concurrentSyncOperations"), json!(true));
    p = set(p, "/spec/worker/service/port", json!(-1));
    let v = review(&p, None, &Options::default());
    assert_eq!(v.problems.len(), 4, "{}", v.message());
    let paths: Vec<_> = v.message().split("; ").map(|s| s.split(':').next().unwrap().to_string()).collect();
    assert_eq!(
        paths,
        [
            "spec.version",
            "spec.worker.service.port",
            "spec.environmentDrivers[0].sandboxCapabilities.concurrentSyncAndExec",
            "spec.environmentDrivers[0].sandboxCapabilities.concurrentSyncOperations",
        ]
    );
}

#[test]
fn warnings_for_legacy_and_nested_flags_split_sync_pair_and_unread_capabilities() {
    let both = set(provider_json(), &format!("{D0}/supportsReusableLeases"), json!(true));
    let both = set(both, &format!("{D0}/sandboxCapabilities/reusableLeases"), json!(false));
    assert_eq!(
        allow(&both),
        [
            "spec.environmentDrivers[0]: supportsReusableLeases=true and sandboxCapabilities.reusableLeases=false; nested wins"
        ]
    );
    for (sync_in, sync_out) in [(json!(true), json!(false)), (json!(false), json!(true))] {
        let split = set(provider_json(), &format!("{D0}/sandboxCapabilities/nativeSyncIn"), sync_in);
        let split = set(split, &format!("{D0}/sandboxCapabilities/nativeSyncOut"), sync_out);
        assert_eq!(
            allow(&split),
            [
                "spec.environmentDrivers[0]: nativeSyncIn and nativeSyncOut differ; the worker verifies them only as a pair"
            ]
        );
    }
    let omitted = remove(provider_json(), &format!("{D0}/sandboxCapabilities/nativeSyncOut"));
    assert_eq!(allow(&omitted).len(), 1, "one declared, the other omitted is also a split pair");
    for kind in [Some("environment_driver"), None] {
        let p = match kind {
            Some(k) => set(provider_json(), &format!("{D0}/kind"), json!(k)),
            None => remove(provider_json(), &format!("{D0}/kind")),
        };
        assert_eq!(
            allow(&p),
            ["spec.environmentDrivers[0]: sandboxCapabilities is never read unless kind is sandbox_provider"]
        );
    }
    let legacy_only = remove(
        set(provider_json(), &format!("{D0}/supportsReusableLeases"), json!(true)),
        &format!("{D0}/sandboxCapabilities"),
    );
    assert!(allow(&legacy_only).is_empty());
}

#[test]
fn warnings_stay_under_the_kubernetes_limit_even_for_large_indexes() {
    let mut p = provider_json();
    let mut driver = p.pointer(D0).unwrap().clone();
    driver["kind"] = json!("environment_driver");
    driver["supportsReusableLeases"] = json!(false);
    driver["sandboxCapabilities"] = json!({"reusableLeases": true, "nativeSyncIn": false});
    let drivers = p["spec"]["environmentDrivers"].as_array_mut().unwrap();
    for i in 0..1200 {
        let mut d = driver.clone();
        d["driverKey"] = json!(format!("d{i}"));
        drivers.push(d);
    }
    let warnings = allow(&p);
    assert_eq!(warnings.len(), 1200 * 3);
    assert!(warnings.iter().all(|w| w.len() < MAX_WARNING_LEN), "{:?}", warnings.iter().max_by_key(|w| w.len()));
}

#[test]
fn worker_urls_are_accepted_only_with_allow_worker_urls() {
    let p = set(
        remove(provider_json(), "/spec/worker/service"),
        "/spec/worker/url",
        json!("https://worker.example:8443/rpc"),
    );
    let refused = review(&p, None, &Options::default());
    assert_eq!(
        refused.message(),
        "spec.worker.url: worker URLs are refused because the operator runs without --allow-worker-urls: use spec.worker.service instead"
    );
    let allowed = Options { allow_worker_urls: true };
    assert!(review(&p, None, &allowed).allowed());
    for bad in ["ftp://worker/rpc", "worker:8080", "/rpc"] {
        let p = set(p.clone(), "/spec/worker/url", json!(bad));
        assert!(review(&p, None, &allowed).message().contains("must be an absolute http:// or https:// URL"), "{bad}");
    }
}

#[test]
fn lease_field_rules() {
    let cases: Vec<(Value, &str)> = vec![
        (remove(lease_json(), "/spec/providerRef"), "spec.providerRef: required"),
        (remove(lease_json(), "/spec/providerRef/driverKey"), "spec.providerRef.driverKey: required"),
        (
            set(lease_json(), "/spec/providerRef/name", json!("Acme_K8s")),
            "spec.providerRef.name: \"Acme_K8s\" is not a valid resource name",
        ),
        (
            set(lease_json(), "/spec/policy", json!("Reuse")),
            "spec.policy: \"Reuse\" is not a policy: use Ephemeral or ReuseByEnvironment",
        ),
        (remove(lease_json(), "/spec/environment"), "spec.environment: required when policy is ReuseByEnvironment"),
        (
            set(lease_json(), "/spec/environment", json!("")),
            "spec.environment: required when policy is ReuseByEnvironment",
        ),
        (
            set(lease_json(), "/spec/nativeFileSyncUnsupported", json!("no")),
            "spec.nativeFileSyncUnsupported: must be a boolean",
        ),
        (set(lease_json(), "/spec/config", json!("backend=job")), "spec.config: must be an object, got a string"),
        (set(lease_json(), "/spec/configFrom", json!({})), "spec.configFrom: must be a list"),
        (remove(lease_json(), "/spec/configFrom/0/secretKeyRef/key"), "spec.configFrom[0].secretKeyRef.key: required"),
        (
            set(lease_json(), "/spec/configFrom/0/secretKeyRef/key", json!("a/b")),
            "spec.configFrom[0].secretKeyRef.key: \"a/b\" is not a valid Secret key",
        ),
        (set(lease_json(), "/spec/configFrom/0/secretRef", json!({})), "spec.configFrom[0].secretRef: unknown field"),
        (remove(lease_json(), "/spec/workloadRef/kind"), "spec.workloadRef.kind: required"),
        (
            set(lease_json(), "/spec/nativeFileSyncUnsuported", json!(true)),
            "spec.nativeFileSyncUnsuported: unknown field",
        ),
    ];
    for (object, expected) in cases {
        let message = deny(&object);
        assert!(message.contains(expected), "\n got: {message}\nwant: {expected}");
    }
    allow(&remove(remove(lease_json(), "/spec/policy"), "/spec/environment"));
    allow(&set(lease_json(), "/spec/policy", json!("Ephemeral")));
}

#[test]
fn null_optional_fields_count_as_absent_as_the_nullable_crd_schema_allows() {
    allow(&set(lease_json(), "/spec/workloadRef", Value::Null));
    allow(&set(provider_json(), &format!("{D0}/sandboxCapabilities/nativeSyncIn"), Value::Null));
}

#[test]
fn immutable_fields_on_update_say_what_to_do_instead() {
    let old = provider_json();
    let new = set(old.clone(), "/spec/pluginKey", json!("acme.other"));
    let v = review(&new, Some(&old), &Options::default());
    assert_eq!(
        v.message(),
        "spec.pluginKey: field is immutable (was \"acme.kubernetes-sandbox-provider\"): to register another plugin, create a new SandboxProvider"
    );
    let changed_version = set(old.clone(), "/spec/version", json!("1.5.0"));
    assert!(review(&changed_version, Some(&old), &Options::default()).allowed());

    let old = lease_json();
    let new = set(old.clone(), "/spec/providerRef/driverKey", json!("docker"));
    let v = review(&new, Some(&old), &Options::default());
    assert!(v.message().starts_with("spec.providerRef: field is immutable (was {"), "{}", v.message());
    assert!(v.message().ends_with("to use another provider or driver, create a new SandboxLease"));
}

#[test]
fn updates_deny_only_the_problems_they_bring_in() {
    let options = Options::default();
    // Admitted under an older contract and an operator that allowed worker URLs.
    let stored = set(provider_json(), &format!("{D0}/sandboxCapabilities/concurrentSyncAndExec"), json!(true));
    let stored = set(stored, "/spec/worker", json!({"url": "https://w.example"}));
    let stored = set(stored, &format!("{D0}/displayName"), json!("d".repeat(101)));
    let problems = review(&stored, None, &options).problems;
    assert_eq!(problems.len(), 3, "sandcap validate (CREATE) still denies it");
    let stored_warnings = |warnings: &[String]| {
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        for (warning, problem) in warnings.iter().zip(&problems) {
            assert!(warning.starts_with(&format!("{ALREADY_STORED}{}: ", problem.path)), "{warning}");
            assert!(warning.len() < MAX_WARNING_LEN, "{warning}");
        }
    };

    // Labels, annotations, or a change elsewhere in the spec: allowed, with what to fix.
    let labelled = set(stored.clone(), "/metadata/labels", json!({"team": "a"}));
    let annotated = set(stored.clone(), "/metadata/annotations", json!({"note": "b"}));
    let new_version = set(stored.clone(), "/spec/version", json!("1.5.0"));
    for update in [labelled, annotated, new_version] {
        let v = review(&update, Some(&stored), &options);
        assert!(v.allowed(), "{}", v.message());
        stored_warnings(&v.warnings);
    }
    assert_eq!(
        review(&set(stored.clone(), "/metadata/labels", json!({})), Some(&stored), &options).warnings[1],
        format!("{ALREADY_STORED}spec.environmentDrivers[0].displayName: must be 1 to 100 characters, got 101")
    );

    // A new problem denies the update, alone in the message; the stored ones stay warnings.
    let v = review(&set(stored.clone(), "/spec/version", json!("1.5")), Some(&stored), &options);
    assert!(v.message().starts_with("spec.version: \"1.5\" is not a semantic version"), "{}", v.message());
    assert_eq!(v.problems.len(), 1, "{}", v.message());
    stored_warnings(&v.warnings);
    // Another problem at the same path is a new problem.
    let v = review(&set(stored.clone(), &format!("{D0}/displayName"), json!("d".repeat(102))), Some(&stored), &options);
    assert_eq!(v.message(), "spec.environmentDrivers[0].displayName: must be 1 to 100 characters, got 102");

    // A fixed problem is no longer mentioned.
    let fixed = set(stored.clone(), &format!("{D0}/displayName"), json!("Kubernetes"));
    let v = review(&fixed, Some(&stored), &options);
    assert!(v.allowed());
    assert_eq!(v.warnings.len(), 2, "{:?}", v.warnings);

    // Immutable fields stay immutable, however broken the stored object is.
    let v = review(&set(stored.clone(), "/spec/pluginKey", json!("acme.other")), Some(&stored), &options);
    assert!(v.message().starts_with("spec.pluginKey: field is immutable"), "{}", v.message());
    assert_eq!(v.problems.len(), 1);

    // Leases ratchet the same way.
    let stored = set(lease_json(), "/spec/policy", json!("Sometimes"));
    let v = review(&set(stored.clone(), "/metadata/labels", json!({"a": "b"})), Some(&stored), &options);
    assert!(v.allowed());
    assert_eq!(
        v.warnings,
        [format!("{ALREADY_STORED}spec.policy: \"Sometimes\" is not a policy: use Ephemeral or ReuseByEnvironment")]
    );
    let v = review(&set(stored.clone(), "/spec/backend", json!(7)), Some(&stored), &options);
    assert_eq!(v.message(), "spec.backend: must be a string, got a number");
}

#[test]
fn objects_that_are_not_sandcap_resources_are_denied_with_a_reason() {
    let cases = [
        (json!([1, 2]), "object: must be a JSON object"),
        (
            json!({"apiVersion": "v1", "kind": "Secret"}),
            "apiVersion: unsupported apiVersion \"v1\", expected \"sandcap.dev/v1alpha1\"; metadata.name: required; kind: must be SandboxProvider or SandboxLease",
        ),
        (set(provider_json(), "/apiVersion", json!("sandcap.dev/v1")), "apiVersion: unsupported apiVersion"),
        (set(provider_json(), "/spec", json!("x")), "spec: must be an object, got a string"),
        (remove(provider_json(), "/metadata"), "metadata.name: required"),
        (
            set(lease_json(), "/metadata/name", json!("Run_42")),
            "metadata.name: \"Run_42\" is not a valid resource name",
        ),
    ];
    for (object, expected) in cases {
        assert!(deny(&object).contains(expected), "{object}: {}", deny(&object));
    }
}

// ---- the CRD schema's half of the verdict -------------------------------------------------

fn crd_spec_schema(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> Value {
    let schema = crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap();
    serde_json::to_value(schema).unwrap()["properties"]["spec"].clone()
}

/// Every object node under `spec` that lists properties must keep unknown fields, so a typo'd or
/// removed key reaches the webhook even when a client applies with field validation off.
fn assert_nothing_is_pruned(node: &Value, path: &str) {
    if node.get("properties").is_some() || node.get("type") == Some(&json!("object")) {
        assert_eq!(
            node.get("x-kubernetes-preserve-unknown-fields"),
            Some(&json!(true)),
            "{path} would prune unknown keys"
        );
    }
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            assert_nothing_is_pruned(v, &format!("{path}.{k}"));
        }
    }
    if let Some(items) = node.get("items") {
        assert_nothing_is_pruned(items, &format!("{path}[]"));
    }
}

#[test]
fn crd_schemas_keep_unknown_keys_for_the_webhook_to_reject() {
    use kube::CustomResourceExt;
    let provider = crd_spec_schema(&sandcap::api::SandboxProvider::crd());
    let lease = crd_spec_schema(&sandcap::api::SandboxLease::crd());
    assert_nothing_is_pruned(&provider, "spec");
    assert_nothing_is_pruned(&lease, "spec");
    let caps = &provider["properties"]["environmentDrivers"]["items"]["properties"]["sandboxCapabilities"];
    assert_eq!(caps["x-kubernetes-preserve-unknown-fields"], json!(true));
    // And what is kept is then refused, with the removed-key message.
    let message = deny(&set(provider_json(), &format!("{D0}/sandboxCapabilities/concurrentSyncAndExec"), json!(true)));
    assert!(message.contains("removed from the contract"));
}

/// Reads the CRD's structural schema as JSON Schema (ignoring `nullable`, which JSON Schema lacks).
fn structural_validator(spec_schema: &Value) -> jsonschema::Validator {
    fn strip_nullable(v: &mut Value) {
        match v {
            Value::Object(map) => {
                if map.remove("nullable") == Some(json!(true))
                    && let Some(t) = map.get("type").cloned()
                {
                    map.insert("type".into(), json!([t, "null"]));
                }
                map.values_mut().for_each(strip_nullable);
            }
            Value::Array(items) => items.iter_mut().for_each(strip_nullable),
            _ => {}
        }
    }
    let mut schema = spec_schema.clone();
    strip_nullable(&mut schema);
    jsonschema::draft4::new(&schema).unwrap()
}

#[test]
fn sandcap_validate_is_never_more_lenient_than_the_crd_schema() {
    use kube::CustomResourceExt;
    let provider_schema = structural_validator(&crd_spec_schema(&sandcap::api::SandboxProvider::crd()));
    let lease_schema = structural_validator(&crd_spec_schema(&sandcap::api::SandboxLease::crd()));
    let mutations: Vec<(&str, Value)> = vec![
        ("/spec/pluginKey", json!("UPPER")),
        ("/spec/pluginKey", json!(3)),
        ("/spec/pluginKey", json!("a".repeat(254))),
        ("/spec/version", json!(true)),
        ("/spec/worker", json!("svc")),
        ("/spec/worker/service/port", json!(0)),
        ("/spec/worker/service/port", json!("8080")),
        ("/spec/environmentDrivers", json!([])),
        ("/spec/environmentDrivers/0/driverKey", json!("_x")),
        ("/spec/environmentDrivers/0/kind", json!("plugin")),
        ("/spec/environmentDrivers/0/displayName", json!("")),
        ("/spec/environmentDrivers/0/description", json!("d".repeat(501))),
        ("/spec/environmentDrivers/0/configSchema", json!(1)),
        ("/spec/environmentDrivers/0/supportsReusableLeases", json!(1)),
        ("/spec/environmentDrivers/0/sandboxCapabilities/nativeSyncIn", json!("yes")),
        ("/spec/environmentDrivers/0/sandboxCapabilities", json!(true)),
    ];
    for (pointer, value) in mutations {
        let object = set(provider_json(), pointer, value);
        let by_schema = !provider_schema.is_valid(&object["spec"]);
        let by_webhook = !review(&object, None, &Options::default()).allowed();
        assert!(by_schema, "the CRD schema should reject {pointer} (test premise)");
        assert!(by_webhook, "the CRD schema rejects {pointer} but sandcap would allow it");
    }
    let lease_mutations: Vec<(&str, Value)> = vec![
        ("/spec/providerRef", json!({})),
        ("/spec/policy", json!("Sometimes")),
        ("/spec/nativeFileSyncUnsupported", json!("false")),
        ("/spec/config", json!([])),
        ("/spec/configFrom", json!([{"secretKeyRef": {"name": "x"}}])),
        ("/spec/workloadRef", json!({"kind": "Job"})),
    ];
    for (pointer, value) in lease_mutations {
        let object = set(lease_json(), pointer, value);
        assert!(!lease_schema.is_valid(&object["spec"]), "test premise: schema rejects {pointer}");
        assert!(!review(&object, None, &Options::default()).allowed(), "sandcap allows {pointer}");
    }
    assert!(provider_schema.is_valid(&provider_json()["spec"]));
    assert!(lease_schema.is_valid(&lease_json()["spec"]));
}

#[test]
fn the_webhook_decodes_only_what_the_rules_read_and_keeps_json_semantics() {
    let decode = |json: &str| REVIEWED.decode(json).map_err(|e| e.to_string());
    // Skipped: status, managedFields, annotations; kept: apiVersion, kind, name, generateName, spec.
    let object = r#"{"apiVersion": "v", "kind": "K", "status": {"x": [1, {"y": "\u00e9"}]},
        "metadata": {"name": "n", "generateName": "g", "managedFields": [{}], "annotations": {"a": "b"}},
        "spec": {"a": [1, 2.5, null, true, "s"], "b": {}}}"#;
    let expected = json!({"apiVersion": "v", "kind": "K", "metadata": {"name": "n", "generateName": "g"},
        "spec": {"a": [1, 2.5, null, true, "s"], "b": {}}});
    assert_eq!(decode(object), Ok(expected));
    // Escaped keys are still keys, and the last of duplicate keys wins, as in serde_json's Value.
    assert_eq!(decode(r#"{"\u0073pec": 1, "kind": 1, "kind": 2}"#), Ok(json!({"spec": 1, "kind": 2})));
    // A value that is not an object where keys are named is built whole, so the rules name its type.
    for other in [r#""s""#, "[1, [2]]", "7", "-7", "true", "null"] {
        assert_eq!(decode(&format!(r#"{{"metadata": {other}}}"#)), decode_whole(other).map(|v| json!({"metadata": v})));
        assert_eq!(decode(other), decode_whole(other), "{other}");
    }
    // Skipped parts are still checked for syntax; built parts keep serde_json's nesting limit.
    assert!(decode(r#"{"status": {"x": [1,]}}"#).unwrap_err().contains("expected value"));
    assert!(decode(r#"{"status": {}} trailing"#).unwrap_err().contains("trailing characters"));
    let deep = format!(r#"{{"spec": {}1{}}}"#, "[".repeat(200), "]".repeat(200));
    assert!(decode(&deep).unwrap_err().contains("recursion limit exceeded"));
    let deep_skipped = format!(r#"{{"status": {}1{}}}"#, "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(decode(&deep_skipped), Ok(json!({})));
}

fn decode_whole(json: &str) -> Result<Value, String> {
    serde_json::from_str(json).map_err(|e| e.to_string())
}
