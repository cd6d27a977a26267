//! `sandcap resolve`: provider and lease level, the worker's methods, Secrets (never their
//! values), and nothing granted to what `validate` denies.

use std::process::Output;

use sandcap_core::versions::V1;
use serde_json::{Value, json};

use super::{ALL, resolve_lease_args, resolve_reuse_lease, sandcap, stderr, stdout, write};

/// `resolve` of examples/provider-full.yaml's driver `kubernetes`, provider level, with `extra`.
fn resolve_kubernetes_driver(extra: &[&str]) -> Output {
    let driver = ["resolve", "--provider", "examples/provider-full.yaml", "--driver", "kubernetes"];
    sandcap(&[&driver[..], extra].concat())
}

#[test]
fn resolve_provider_level_table_and_json() {
    let o = resolve_kubernetes_driver(&["--worker-methods", &ALL]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let table = stdout(&o);
    assert!(table.starts_with("DRIVER kubernetes  EFFECTIVE POLICY ReuseByEnvironment\nCAPABILITY"), "{table}");
    assert!(table.contains("reusableLeases               true     Granted"));

    let o = resolve_kubernetes_driver(&["-o", "json", "--worker-methods", "environmentSyncIn,environmentExecute"]);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["driverKey"], "kubernetes");
    assert_eq!(r["effectivePolicy"], "Ephemeral");
    assert_eq!(
        r["capabilities"],
        json!({"reusableLeases": false, "nativeSyncIn": false, "nativeSyncOut": false, "persistentProcessSessions": true, "independentControlCommands": true, "incrementalSessionOutput": true})
    );
    assert_eq!(r["explanations"][1]["reason"], "MissingWorkerMethods");
    assert!(r["explanations"][1]["message"].as_str().unwrap().contains("pair"));
    assert_eq!(r["explanations"].as_array().unwrap().len(), 6);
}

#[test]
fn resolve_without_worker_methods_verifies_nothing_unless_the_provider_status_says_so() {
    let o = sandcap(&["resolve", "--provider", "examples/provider-legacy.yaml", "-o", "json"]);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["explanations"].as_array().unwrap().iter().all(|e| e["reason"] == "WorkerNotVerified"));

    let dir = tempfile::tempdir().unwrap();
    let mut provider: Value =
        serde_saphyr::from_str(&std::fs::read_to_string("examples/provider-legacy.yaml").unwrap()).unwrap();
    provider["status"] =
        json!({"worker": {"probe": "Succeeded", "supportedMethods": V1.worker_methods(), "message": ""}});
    let file = write(dir.path(), "p.json", &provider.to_string());
    let r: Value = serde_json::from_slice(&sandcap(&["resolve", "--provider", &file, "-o", "json"]).stdout).unwrap();
    assert_eq!(r["capabilities"]["reusableLeases"], true, "legacy flag read as reusableLeases");
    assert_eq!(r["capabilities"]["incrementalSessionOutput"], false, "opt-in");
    assert_eq!(r["effectivePolicy"], "ReuseByEnvironment");
}

#[test]
fn resolve_lease_with_secret_config_and_narrowing() {
    let base = ["resolve", "--provider", "examples/provider-full.yaml", "-o", "json", "--worker-methods", &ALL];
    let with = |extra: &[&str]| -> Value {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let o = sandcap(&args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let r = with(&["--lease", "examples/lease-reuse.yaml", "--secret", "examples/secrets/acme-credentials.yaml"]);
    assert_eq!(r["effectivePolicy"], "ReuseByEnvironment");
    assert!(r["capabilities"].as_object().unwrap().values().all(|v| v == true), "{r}");

    // Without the Secret, config resolution fails: sessions and incremental output are narrowed.
    let r = with(&["--lease", "examples/lease-reuse.yaml"]);
    assert_eq!(r["capabilities"]["persistentProcessSessions"], false);
    assert_eq!(r["explanations"][3]["reason"], "NarrowedByConfigResolution");
    assert!(r["explanations"][3]["message"].as_str().unwrap().contains("acme-credentials"));

    let r = with(&["--lease", "examples/lease-job.yaml"]);
    assert_eq!(r["effectivePolicy"], "Ephemeral");
    assert_eq!(r["explanations"][0]["reason"], "NarrowedByLeasePolicy");
    assert_eq!(r["explanations"][1]["reason"], "NarrowedByJobBackend");
}

#[test]
fn resolve_never_prints_a_secret_value() {
    let dir = tempfile::tempdir().unwrap();
    let secret = write(
        dir.path(),
        "s.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: acme-credentials}\nstringData:\n  config.json: '{\"apiToken\": 12345678901}'\n",
    );
    let o = resolve_reuse_lease(&secret, &[]);
    let out = stdout(&o);
    assert!(out.contains("configSchema.properties.apiToken.type"), "{out}");
    assert!(!out.contains("12345678901"));
}

#[test]
fn resolve_lease_whose_driver_or_pin_does_not_match_is_all_off_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut lease: Value =
        serde_saphyr::from_str(&std::fs::read_to_string("examples/lease-job.yaml").unwrap()).unwrap();
    lease["spec"]["providerRef"]["driverKey"] = json!("local-shell");
    let other_driver = write(dir.path(), "l1.json", &lease.to_string());
    lease["spec"]["providerRef"]["driverKey"] = json!("kubernetes");
    lease["status"] = json!({"pinned": {"providerUID": "old-uid", "pluginKey": "acme.kubernetes-sandbox-provider", "driverKey": "kubernetes"}});
    let stale_pin = write(dir.path(), "l2.json", &lease.to_string());
    for (file, why) in [(other_driver, "not sandbox_provider"), (stale_pin, "re-created")] {
        let o = sandcap(&[&resolve_lease_args(&file, None)[..], &["-o", "json", "--worker-methods", &ALL]].concat());
        assert_eq!(o.status.code(), Some(0));
        let r: Value = serde_json::from_slice(&o.stdout).unwrap();
        for e in r["explanations"].as_array().unwrap() {
            assert_eq!(e["reason"], "PluginIdentityFailed");
            assert!(e["message"].as_str().unwrap().contains(why), "{e}");
        }
    }
}

/// Fail closed offline too: what today's rules refuse grants nothing, each capability saying
/// why, and `resolve` answers (exit 0) rather than refusing its input.
#[test]
fn resolve_grants_nothing_to_what_validate_denies() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let provider = std::fs::read_to_string("examples/provider-full.yaml").unwrap();
    let lease = std::fs::read_to_string("examples/lease-reuse.yaml").unwrap();
    // A misspelt key that would have switched reusable leases off, next to the legacy field.
    let misspelt = provider.replace(
        "    sandboxCapabilities:\n      reusableLeases: true",
        "    supportsReusableLeases: true\n    sandboxCapabilites: {reusableLeases: false}\n    sandboxCapabilities:",
    );
    assert_ne!(misspelt, provider);
    let misspelt = write(d, "misspelt.yaml", &misspelt);
    let secret = "examples/secrets/acme-credentials.yaml";
    let resolve = |provider: &str, lease: Option<&str>| {
        let mut args = vec!["resolve", "--provider", provider, "--worker-methods", &ALL, "-o", "json"];
        args.extend(lease.into_iter().flat_map(|l| ["--lease", l, "--secret", secret]));
        let o = sandcap(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    let all_off = |r: &Value, reason: &str, problem: &str| {
        let r = if r.is_array() { &r[0] } else { r };
        for e in r["explanations"].as_array().unwrap() {
            assert_eq!((e["granted"].as_bool(), e["reason"].as_str()), (Some(false), Some(reason)), "{e}");
            assert!(e["message"].as_str().unwrap().contains(problem), "{e}");
        }
    };
    let validated = sandcap(&["validate", &misspelt]);
    assert_eq!(validated.status.code(), Some(1), "validate denies it: {}", stdout(&validated));
    all_off(&resolve(&misspelt, None), "ProviderNotValid", "sandboxCapabilites");
    all_off(&resolve(&misspelt, Some("examples/lease-reuse.yaml")), "ProviderNotValid", "sandboxCapabilites");
    // The lease's own misspelt key, and a Job backend spelt in capitals: the lease is refused.
    for (name, edited, problem) in [
        (
            "typo.yaml",
            lease.replace("backend: sandbox-cr\n", "backend: sandbox-cr\n  nativeFileSyncUnsuported: true\n"),
            "nativeFileSyncUnsuported",
        ),
        ("job.yaml", lease.replace("backend: sandbox-cr\n", "backend: Job\n"), "spec.backend"),
    ] {
        assert_ne!(edited, lease, "{name}");
        let path = write(d, name, &edited);
        all_off(&resolve("examples/provider-full.yaml", Some(&path)), "LeaseNotValid", problem);
    }
    // As the cluster does, resolve judges a worker URL by the operator's flags.
    let by_url = write(
        d,
        "url.yaml",
        &provider.replace(
            "service: {namespace: sandbox-system, name: acme-worker, port: 8080, path: /rpc}",
            "url: https://worker.example:9443/rpc",
        ),
    );
    all_off(&resolve(&by_url, None), "ProviderNotValid", "--allow-worker-urls");
    let o = sandcap(&["resolve", "--provider", &by_url, "--worker-methods", &ALL, "-o", "json", "--allow-worker-urls"]);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r[0]["capabilities"]["nativeSyncIn"], json!(true), "{r}");
}
