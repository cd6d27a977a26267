//! Each of the webhook's rules: unknown fields, worker URLs and the address policy, every problem
//! at once, and the warnings.

use sandcap_core::addresses::{AllowedCidrs, WorkerPolicy};
use sandcap_core::validation::{ALREADY_STORED, MAX_WARNING_LEN, MAX_WARNINGS, Options, review};
use serde_json::{Value, json};

use super::{D0, allow, deny};
use crate::support::*;

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
            "spec.pluginkey: unknown field (allowed fields: pluginKey, version, worker, environmentDrivers, workloads)",
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
            set(with_binding(), "/spec/workloads/0/namespace", json!("x")),
            "spec.workloads[0].namespace: unknown field (allowed fields: kind, selector, driverKey, policy, environmentLabel)",
        ),
        (
            set(with_binding(), "/spec/workloads/0/selector/labels", json!({})),
            "spec.workloads[0].selector.labels: unknown field",
        ),
        (
            set(with_binding(), "/spec/workloads/0/selector/matchExpressions/0/value", json!("x")),
            "spec.workloads[0].selector.matchExpressions[0].value: unknown field",
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

/// The example provider with a binding that selects by a label and a requirement.
fn with_binding() -> Value {
    let binding = json!([{
        "kind": "Job",
        "selector": {"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "c", "operator": "Exists"}]},
        "driverKey": "kubernetes",
    }]);
    set(provider_json(), "/spec/workloads", binding)
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
    // Each is layer 1's to report (the schema tests); the webhook only ever sees objects that pass it.
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
