//! The webhook's rules (docs/contract.md, "Resources and who enforces what": the webhook layer),
//! one test each: what the apiserver cannot check from the CRD. Layer 1 (the CRD itself) is
//! tests/schema.rs.

mod support;

use sandcap::addresses::{AllowedCidrs, WorkerPolicy};
use sandcap::api::{CONFIG_TOO_LARGE, MAX_CONFIG_BYTES};
use sandcap::contract::ConfigFailure;
use sandcap::validation::{ALREADY_STORED, MAX_PER_KIND, MAX_WARNING_LEN, MAX_WARNINGS, Options, REVIEWED, review};
use serde_json::{Value, json};
use support::fixtures::*;

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
fn unknown_fields_the_schema_keeps_are_rejected_at_every_level() {
    let cases: Vec<(Value, &str)> = vec![
        (
            set(provider_json(), "/spec/pluginkey", json!("typo")),
            "spec.pluginkey: unknown field (allowed fields: pluginKey, version, worker, environmentDrivers)",
        ),
        (set(provider_json(), "/spec/worker/tls", json!(true)), "spec.worker.tls: unknown field"),
        (set(provider_json(), "/spec/worker/service/tls", json!(true)), "spec.worker.service.tls: unknown field"),
        (
            set(provider_json(), &format!("{D0}/displayname"), json!("typo")),
            "spec.environmentDrivers[0].displayname: unknown field",
        ),
        (
            set(provider_json(), &format!("{D0}/nativeSyncIn"), json!(true)),
            "spec.environmentDrivers[0].nativeSyncIn: unknown field (allowed fields: driverKey, kind, displayName, description, configSchema, supportsReusableLeases, sandboxCapabilities) (capability keys belong under spec.environmentDrivers[0].sandboxCapabilities)",
        ),
        (
            set(lease_json(), "/spec/nativeFileSyncUnsuported", json!(true)),
            "spec.nativeFileSyncUnsuported: unknown field",
        ),
        (set(lease_json(), "/spec/providerRef/namespace", json!("x")), "spec.providerRef.namespace: unknown field"),
        (set(lease_json(), "/spec/workloadRef/uid", json!("x")), "spec.workloadRef.uid: unknown field"),
        (set(lease_json(), "/spec/configFrom/0/secretRef", json!({})), "spec.configFrom[0].secretRef: unknown field"),
        (
            set(lease_json(), "/spec/configFrom/0/secretKeyRef/optional", json!(true)),
            "spec.configFrom[0].secretKeyRef.optional: unknown field",
        ),
    ];
    for (object, expected) in cases {
        let message = deny(&object);
        assert!(message.starts_with(expected), "\n got: {message}\nwant: {expected}");
    }
}

#[test]
fn config_schema_must_compile_and_is_never_fetched() {
    for schema in
        [json!({"type": "objekt"}), json!({"minLength": -1}), json!({"$ref": "https://example.invalid/s.json"})]
    {
        let message = deny(&set(provider_json(), &format!("{D0}/configSchema"), schema));
        assert!(
            message.starts_with("spec.environmentDrivers[0].configSchema: is not a valid JSON Schema"),
            "{message}"
        );
    }
}

#[test]
fn worker_urls_are_refused_without_allow_worker_urls() {
    let p = set(
        remove(provider_json(), "/spec/worker/service"),
        "/spec/worker/url",
        json!("https://worker.example:8443/rpc"),
    );
    assert_eq!(
        review(&p, None, &Options::default()).message(),
        "spec.worker.url: worker URLs are refused because the operator runs without --allow-worker-urls: use spec.worker.service instead"
    );
    assert!(
        review(
            &p,
            None,
            &Options { workers: WorkerPolicy { allow_urls: true, ..WorkerPolicy::default() }, ..Options::default() }
        )
        .allowed()
    );
}

fn with_worker_url(url: &str) -> Value {
    set(remove(provider_json(), "/spec/worker/service"), "/spec/worker/url", json!(url))
}

fn allowing(cidrs: &[&str]) -> Options {
    let allowed_cidrs = AllowedCidrs::new(cidrs.iter().map(|c| c.parse().unwrap()));
    Options { workers: WorkerPolicy { allow_urls: true, allowed_cidrs }, ..Options::default() }
}

#[test]
fn worker_urls_to_refused_addresses_are_denied_even_with_allow_worker_urls() {
    let cases = [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254", "cloud metadata"),
        ("http://metadata.google.internal/computeMetadata/v1/", "metadata.google.internal", "cloud metadata"),
        ("http://[fd00:ec2::254]/", "[fd00:ec2::254]", "cloud metadata"),
        ("http://100.100.100.200/", "100.100.100.200", "cloud metadata"),
        ("http://168.63.129.16/machine", "168.63.129.16", "cloud metadata"),
        ("http://[fd00:ec2::23]/v1/credentials", "[fd00:ec2::23]", "cloud metadata"),
        ("http://[64:ff9b::169.254.169.254]/", "[64:ff9b::a9fe:a9fe]", "cloud metadata"),
        ("http://[2002:7f00:1::1]/rpc", "[2002:7f00:1::1]", "loopback"),
        ("http://[::127.0.0.1]/rpc", "[::7f00:1]", "loopback"),
        ("http://169.254.10.1:8080/rpc", "169.254.10.1", "link-local"),
        ("http://[fe80::1]/rpc", "[fe80::1]", "link-local"),
        ("http://127.0.0.1:9/rpc", "127.0.0.1", "loopback"),
        ("http://2130706433/rpc", "127.0.0.1", "loopback"),
        ("http://[::ffff:127.0.0.1]/rpc", "[::ffff:7f00:1]", "loopback"),
        ("https://localhost:8443/rpc", "localhost", "loopback"),
        ("http://[::1]/rpc", "[::1]", "loopback"),
        ("http://0.0.0.0:80/rpc", "0.0.0.0", "unspecified"),
        ("http://[::]/rpc", "[::]", "unspecified"),
    ];
    for (url, host, class) in cases {
        let message = review(&with_worker_url(url), None, &allowing(&[])).message();
        assert_eq!(
            message,
            format!(
                "spec.worker.url: host {host} is a refused address ({class}): worker URLs may not reach loopback, \
                 link-local, cloud metadata or unspecified addresses unless the operator allows them with \
                 --worker-url-allowed-cidrs; use spec.worker.service or another address"
            ),
            "{url}"
        );
    }
    for url in ["https://worker.example:8443/rpc", "http://10.96.0.12:8080/rpc", "http://[2001:db8::7]/"] {
        assert!(review(&with_worker_url(url), None, &allowing(&[])).allowed(), "{url}");
    }
}

#[test]
fn worker_url_allowed_cidrs_admit_exactly_what_they_cover() {
    let loopback = allowing(&["127.0.0.0/8", "::1/128"]);
    for url in ["http://127.0.0.1:9/rpc", "http://localhost:9/rpc", "http://[::1]/", "http://[::ffff:127.0.0.1]/"] {
        assert!(review(&with_worker_url(url), None, &loopback).allowed(), "{url}");
    }
    let denied = review(&with_worker_url("http://169.254.169.254/"), None, &loopback);
    assert!(denied.message().contains("(cloud metadata)"), "{}", denied.message());
    // Without --allow-worker-urls the allow list changes nothing.
    let off = Options { workers: WorkerPolicy { allow_urls: false, ..loopback.workers }, ..Options::default() };
    assert!(
        review(&with_worker_url("http://127.0.0.1:9/rpc"), None, &off)
            .message()
            .contains("without --allow-worker-urls")
    );
}

#[test]
fn a_stored_refused_worker_url_does_not_block_updates() {
    let stored = with_worker_url("http://169.254.169.254/");
    let updated = set(stored.clone(), "/metadata/labels", json!({"team": "a"}));
    let verdict = review(&updated, Some(&stored), &allowing(&[]));
    assert!(verdict.allowed(), "{}", verdict.message());
    assert!(verdict.warnings.iter().any(|w| w.starts_with(&format!("{ALREADY_STORED}spec.worker.url: host"))));
}

#[test]
fn every_problem_is_reported_at_once_joined_by_semicolons() {
    let p = set(provider_json(), "/spec/pluginkey", json!("typo"));
    let p = set(p, &format!("{D0}/configSchema"), json!({"type": "objekt"}));
    let p = set(remove(p, "/spec/worker/service"), "/spec/worker/url", json!("https://w.example"));
    let v = review(&p, None, &Options::default());
    let paths: Vec<_> = v.message().split("; ").map(|s| s.split(':').next().unwrap().to_string()).collect();
    assert_eq!(paths, ["spec.pluginkey", "spec.worker.url", "spec.environmentDrivers[0].configSchema"]);
}

#[test]
fn rules_the_crd_enforces_are_not_repeated_by_the_webhook() {
    // Each is layer 1's to report (tests/schema.rs); the webhook only ever sees objects that pass it.
    for (pointer, value) in [
        ("/spec/pluginKey", json!("Acme")),
        ("/spec/version", json!("1.4")),
        ("/spec/worker/service/port", json!(0)),
        ("/spec/environmentDrivers/0/sandboxCapabilities/concurrentSyncAndExec", json!(true)),
        ("/spec/environmentDrivers/0/sandboxCapabilities/nativeSyncIn", json!("yes")),
    ] {
        assert!(review(&set(provider_json(), pointer, value), None, &Options::default()).allowed(), "{pointer}");
    }
    assert!(review(&remove(lease_json(), "/spec/environment"), None, &Options::default()).allowed());
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
        let split = set(provider_json(), &format!("{D0}/sandboxCapabilities/nativeSyncIn"), sync_in.clone());
        let split = set(split, &format!("{D0}/sandboxCapabilities/nativeSyncOut"), sync_out.clone());
        let shown = format!(
            "spec.environmentDrivers[0]: nativeSyncIn is {sync_in}, nativeSyncOut {sync_out}; declare both alike (a pair)"
        );
        assert_eq!(allow(&split), [shown]);
    }
    let omitted = remove(provider_json(), &format!("{D0}/sandboxCapabilities/nativeSyncOut"));
    assert_eq!(
        allow(&omitted),
        ["spec.environmentDrivers[0]: nativeSyncIn is true, nativeSyncOut omitted; declare both alike (a pair)"],
        "one declared, the other omitted is also a split pair"
    );
    // A driver that is not a sandbox provider is never read: that is its only warning.
    let split = remove(provider_json(), &format!("{D0}/sandboxCapabilities/nativeSyncOut"));
    for kind in [Some("environment_driver"), None] {
        let p = match kind {
            Some(k) => set(split.clone(), &format!("{D0}/kind"), json!(k)),
            None => remove(split.clone(), &format!("{D0}/kind")),
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
    driver["supportsReusableLeases"] = json!(false);
    driver["sandboxCapabilities"] = json!({"reusableLeases": true, "nativeSyncIn": false});
    let drivers = p["spec"]["environmentDrivers"].as_array_mut().unwrap();
    for i in 0..1200 {
        let mut d = driver.clone();
        d["driverKey"] = json!(format!("d{i}"));
        drivers.push(d);
    }
    let warnings = allow(&p);
    // 2,400 warnings are found; an answer carries a bounded number of them.
    assert_eq!(warnings.len(), MAX_WARNINGS);
    assert_eq!(warnings.last().unwrap(), &format!("and more warnings (at most {MAX_WARNINGS} are shown)"));
    assert!(warnings.iter().all(|w| w.len() < MAX_WARNING_LEN), "{:?}", warnings.iter().max_by_key(|w| w.len()));
}

#[test]
fn objects_that_are_not_sandcap_kinds_are_denied_with_a_reason() {
    assert_eq!(deny(&json!([1, 2])), "kind: is missing, not SandboxProvider or SandboxLease");
    assert_eq!(
        deny(&json!({"apiVersion": "v1", "kind": "Secret"})),
        "kind: is \"Secret\", not SandboxProvider or SandboxLease"
    );
    let long = "K".repeat(1000);
    let shown = deny(&json!({"kind": long}));
    assert!(shown.len() < 120 && shown.starts_with("kind: is \"KKK") && shown.contains("KKK..., not"), "{shown}");
}

// ---- the CRD schema's half of the verdict -------------------------------------------------

/// Every object node under `spec` that lists properties must keep unknown fields, so a typo'd or
/// removed key reaches the webhook even when a client applies with field validation off.
fn assert_nothing_is_pruned(node: &Value, path: &str) {
    if node.get("properties").is_some()
        || (node.get("type") == Some(&json!("object")) && node.get("additionalProperties").is_none())
    {
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
    use sandcap::versions::ContractVersion;
    use sandcap::vocabulary::Kind;
    for version in ContractVersion::ALL {
        let spec = |kind| sandcap::api::crd_schema(kind, version)["properties"]["spec"].clone();
        let (provider, lease) = (spec(Kind::SandboxProvider), spec(Kind::SandboxLease));
        assert_nothing_is_pruned(&provider, "spec");
        assert_nothing_is_pruned(&lease, "spec");
        let caps = &provider["properties"]["environmentDrivers"]["items"]["properties"]["sandboxCapabilities"];
        // The capability map keeps every key (it is a map of booleans), so the CRD's rules see a
        // removed, typo'd or other version's key (tests/schema.rs).
        assert_eq!(
            caps["additionalProperties"],
            json!({"type": "boolean", "nullable": true}),
            "booleans, a null kept for the webhook to name"
        );
    }
}

#[test]
fn the_webhook_decodes_only_what_the_rules_read_and_keeps_json_semantics() {
    let decode = |json: &str| REVIEWED.decode(json).map_err(|e| e.to_string());
    // Skipped: apiVersion, status, managedFields, annotations; kept: kind, name, generateName, spec.
    let object = r#"{"apiVersion": "v", "kind": "K", "status": {"x": [1, {"y": "\u00e9"}]},
        "metadata": {"name": "n", "generateName": "g", "managedFields": [{}], "annotations": {"a": "b"}},
        "spec": {"a": [1, 2.5, null, true, "s"], "b": {}}}"#;
    let expected = json!({"kind": "K", "metadata": {"name": "n", "generateName": "g"},
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

#[test]
fn updates_deny_only_the_problems_they_bring_in() {
    let options = Options::default();
    // Stored while the operator allowed worker URLs, with a typo'd field the CRD keeps.
    let stored =
        set(remove(provider_json(), "/spec/worker/service"), "/spec/worker/url", json!("https://w.example/rpc"));
    let stored = set(stored, &format!("{D0}/displayname"), json!("typo"));
    let problems = review(&stored, None, &options).problems;
    assert_eq!(problems.len(), 2, "sandcap validate (CREATE) still denies it");
    let ratcheted = |warnings: &[String]| warnings.iter().filter(|w| w.starts_with(ALREADY_STORED)).count();

    // Labels, annotations, or a change elsewhere in the spec: allowed, with what to fix.
    for (pointer, value) in [
        ("/metadata/labels", json!({"team": "a"})),
        ("/metadata/annotations", json!({"n": "b"})),
        ("/spec/version", json!("1.5.0")),
    ] {
        let v = review(&set(stored.clone(), pointer, value), Some(&stored), &options);
        assert!(v.allowed(), "{pointer}: {}", v.message());
        assert_eq!(ratcheted(&v.warnings), 2, "{:?}", v.warnings);
        assert!(v.warnings.iter().all(|w| w.len() < MAX_WARNING_LEN), "{:?}", v.warnings);
    }
    let v = review(&set(stored.clone(), "/metadata/labels", json!({})), Some(&stored), &options);
    assert!(
        v.warnings.iter().any(|w| w.starts_with(&format!("{ALREADY_STORED}spec.worker.url: worker URLs are refused"))),
        "{:?}",
        v.warnings
    );

    // A new problem denies the update, alone in the message; the stored ones stay warnings.
    let v =
        review(&set(stored.clone(), &format!("{D0}/configSchema"), json!({"type": "strin"})), Some(&stored), &options);
    assert_eq!(v.problems.len(), 1, "{}", v.message());
    assert!(v.message().starts_with("spec.environmentDrivers[0].configSchema: "), "{}", v.message());
    assert_eq!(ratcheted(&v.warnings), 2);

    // A fixed problem is no longer mentioned; a CREATE is judged whole.
    let fixed = remove(stored.clone(), &format!("{D0}/displayname"));
    let v = review(&fixed, Some(&stored), &options);
    assert!(v.allowed());
    assert_eq!(ratcheted(&v.warnings), 1, "{:?}", v.warnings);
    assert!(!review(&fixed, None, &options).allowed());
}

// ---- bounded answers ------------------------------------------------------------------------

/// A spec flooded with unknown keys: the verdict lists a few, counts the rest, and stays small.
#[test]
fn a_flood_of_unknown_fields_is_listed_in_part_and_counted() {
    let mut p = provider_json();
    let spec = p["spec"].as_object_mut().unwrap();
    for i in 0..300_000 {
        spec.insert(format!("k{i}"), json!(0));
    }
    let v = review(&p, None, &Options::default());
    assert_eq!(v.problems.len(), MAX_PER_KIND);
    assert_eq!(v.problem_count(), 300_000);
    let message = v.message();
    assert!(message.ends_with(&format!("; and {} more unknown fields", 300_000 - MAX_PER_KIND)), "{message}");
    assert!(message.len() < 4096, "{} bytes", message.len());
}

/// Every kind of problem is shown however many problems of another kind there are.
#[test]
fn every_kind_of_problem_is_shown_next_to_a_flood() {
    let mut p = set(provider_json(), "/spec/worker/url", json!("http://worker.example/rpc"));
    p = set(p, &format!("{D0}/configSchema"), json!({"type": "strin"}));
    let spec = p["spec"].as_object_mut().unwrap();
    for i in 0..1000 {
        spec.insert(format!("k{i}"), json!(0));
    }
    let message = deny(&p);
    assert!(message.contains("spec.worker.url: worker URLs are refused"), "{message}");
    assert!(message.contains("spec.environmentDrivers[0].configSchema: is not a valid JSON Schema"), "{message}");
    assert!(message.contains(&format!("and {} more unknown fields", 1000 - MAX_PER_KIND)), "{message}");
}

/// A key of a megabyte is named by its start, quoted, and no problem text is longer than a line.
#[test]
fn huge_and_strange_keys_are_cut_and_quoted_in_paths() {
    let key = format!("x\n{}", "y".repeat(1 << 20));
    let message = deny(&set(provider_json(), &format!("/spec/{}", key.replace('/', "~1")), json!(1)));
    assert!(message.starts_with("spec[\"x\\ny"), "{}", &message[..80]);
    assert!(message.len() < 1024, "{} bytes", message.len());
}

/// Ratcheting counts omitted problems too: an update that keeps a stored flood is allowed with a
/// warning; one that adds to it is denied.
#[test]
fn ratcheting_counts_omitted_problems() {
    let flood = |n: usize| {
        let mut p = provider_json();
        for i in 0..n {
            p["spec"].as_object_mut().unwrap().insert(format!("k{i}"), json!(0));
        }
        p
    };
    let stored = flood(100);
    let same = review(&set(flood(100), "/metadata/labels", json!({"a": "b"})), Some(&stored), &Options::default());
    assert!(same.allowed(), "{}", same.message());
    assert!(same.warnings.iter().any(|w| w.contains(&format!("and {} more unknown fields", 100 - MAX_PER_KIND))));
    let more = review(&flood(101), Some(&stored), &Options::default());
    assert!(!more.allowed());
}

/// A null capability declares nothing, and pruned it would let the legacy field decide unseen: the
/// CRD keeps it (nullable) and the webhook names it, whatever the key.
#[test]
fn a_null_capability_is_refused_by_name() {
    let d0 = "/spec/environmentDrivers/0";
    let null = set(provider_json(), &format!("{d0}/sandboxCapabilities/reusableLeases"), Value::Null);
    let null = set(null, &format!("{d0}/supportsReusableLeases"), json!(true));
    assert_eq!(
        deny(&null),
        "spec.environmentDrivers[0].sandboxCapabilities.reusableLeases: null declares nothing: write true or false, or \
         delete the key"
    );
    let odd = set(provider_json(), &format!("{d0}/sandboxCapabilities/nativeSyncIn"), Value::Null);
    assert!(deny(&odd).starts_with("spec.environmentDrivers[0].sandboxCapabilities.nativeSyncIn: null declares"));
}

/// `{"blob":"xx..."}` of `bytes` bytes as JSON.
fn config_of(bytes: usize) -> Value {
    json!({"blob": "x".repeat(bytes - r#"{"blob":""}"#.len())})
}

#[test]
fn a_lease_config_over_its_bound_is_refused_without_its_values() {
    allow(&set(lease_json(), "/spec/config", config_of(MAX_CONFIG_BYTES)));
    let message = deny(&set(lease_json(), "/spec/config", config_of(MAX_CONFIG_BYTES + 1)));
    assert_eq!(message, format!("spec.config: {CONFIG_TOO_LARGE}"));
    // The status of a lease stored without the webhook says the same words.
    assert_eq!(message, ConfigFailure::ConfigTooLarge.to_string());
    assert!(CONFIG_TOO_LARGE.contains(&MAX_CONFIG_BYTES.to_string()), "{CONFIG_TOO_LARGE}");
    // Nested values and many keys count alike: the bound is the whole config's.
    let nested = json!({"a": {"b": [{"c": "x".repeat(MAX_CONFIG_BYTES)}]}});
    assert_eq!(deny(&set(lease_json(), "/spec/config", nested)), message);
    let keys: serde_json::Map<String, Value> = (0..128).map(|i| (format!("k{i}"), json!("y".repeat(600)))).collect();
    assert_eq!(deny(&set(lease_json(), "/spec/config", Value::Object(keys))), message);
}

#[test]
fn a_stored_config_over_its_bound_does_not_block_updates() {
    let stored = set(lease_json(), "/spec/config", config_of(MAX_CONFIG_BYTES + 1));
    let relabelled = set(stored.clone(), "/metadata/labels", json!({"team": "a"}));
    let v = review(&relabelled, Some(&stored), &Options::default());
    assert!(v.allowed(), "{}", v.message());
    assert_eq!(v.warnings, [format!("{ALREADY_STORED}spec.config: {CONFIG_TOO_LARGE}")]);
}
