//! The built `sandcap` binary on `examples/` and on bad input (docs/contract.md, "Command line").

mod support;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::LazyLock;

use sandcap::versions::V1;
use serde_json::{Value, json};

/// Every worker method, as `--worker-methods` takes them.
static ALL: LazyLock<String> = LazyLock::new(|| V1.worker_methods().join(","));

fn sandcap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandcap"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("sandcap runs")
}

/// `resolve --provider examples/provider-full.yaml --lease <lease> [--secret <secret>]`.
fn resolve_lease_args<'a>(lease: &'a str, secret: Option<&'a str>) -> Vec<&'a str> {
    let mut args = vec!["resolve", "--provider", "examples/provider-full.yaml", "--lease", lease];
    args.extend(secret.into_iter().flat_map(|s| ["--secret", s]));
    args
}

/// `sandcap resolve` of examples/lease-reuse.yaml against examples/provider-full.yaml with every
/// worker method verified and `secret` as its configFrom Secret.
fn resolve_reuse_lease(secret: &str, extra: &[&str]) -> Output {
    let args = resolve_lease_args("examples/lease-reuse.yaml", Some(secret));
    sandcap(&[&args[..], &["--worker-methods", &ALL], extra].concat())
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn validate_examples_prints_one_verdict_per_object_and_exits_1_on_a_denial() {
    let o = sandcap(&[
        "validate",
        "examples/provider-full.yaml",
        "examples/provider-legacy.yaml",
        "examples/provider-removed-key.yaml",
        "examples/lease-reuse.yaml",
        "examples/lease-job.yaml",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let expected = "\
ALLOWED SandboxProvider/acme-kubernetes
ALLOWED SandboxProvider/legacy-vm
DENIED SandboxProvider/old-style: SandboxProvider.sandcap.dev \"old-style\" is invalid: spec.environmentDrivers[0].sandboxCapabilities: Invalid value: concurrentSyncAndExec was removed from the contract (concurrency is no longer declared): delete it
ALLOWED SandboxLease/run-42
ALLOWED SandboxLease/batch-7
";
    assert_eq!(stdout(&o), expected);
}

#[test]
fn validate_exits_0_when_everything_is_allowed_and_json_has_the_contract_shape() {
    let o = sandcap(&["validate", "-o", "json", "examples/provider-full.yaml", "examples/provider-removed-key.yaml"]);
    assert_eq!(o.status.code(), Some(1));
    let records: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        records[0],
        json!({"kind": "SandboxProvider", "name": "acme-kubernetes", "allowed": true, "message": "", "warnings": []})
    );
    assert_eq!(records[1]["allowed"], json!(false));
    assert!(records[1]["message"].as_str().unwrap().contains("concurrentSyncAndExec"));
    // The CRD rejects it, so the webhook (and its warnings) is never asked.
    assert_eq!(records[1]["warnings"], json!([]));

    let o = sandcap(&["validate", "examples/provider-full.yaml", "examples/lease-job.yaml"]);
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn validate_knows_the_message_forms_of_1_35_and_1_37_only() {
    let default = sandcap(&["validate", "examples/provider-removed-key.yaml"]);
    for minor in ["1.35", "1.37"] {
        let o = sandcap(&["validate", "--kubernetes-version", minor, "examples/provider-removed-key.yaml"]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert_eq!(stdout(&o), stdout(&default), "1.35 and 1.37 write the same forms");
    }
    for minor in ["1.34", "1.36", "1.38", "v1.37"] {
        let o = sandcap(&["validate", "--kubernetes-version", minor, "examples/provider-removed-key.yaml"]);
        assert_eq!(o.status.code(), Some(2), "{minor}");
        assert!(stderr(&o).contains("the message forms are known for 1.35 and 1.37"), "{}", stderr(&o));
    }
}

#[test]
fn validate_reads_multi_document_yaml_json_and_lists() {
    let dir = tempfile::tempdir().unwrap();
    let provider = std::fs::read_to_string("examples/provider-legacy.yaml").unwrap();
    let lease = std::fs::read_to_string("examples/lease-job.yaml").unwrap();
    let multi = write(dir.path(), "multi.yaml", &format!("---\n{provider}\n---\n{lease}\n---\n"));
    let o = sandcap(&["validate", &multi]);
    assert_eq!(stdout(&o), "ALLOWED SandboxProvider/legacy-vm\nALLOWED SandboxLease/batch-7\n");

    let object: Value = serde_saphyr::from_str(&lease).unwrap();
    let json_file = write(dir.path(), "lease.json", &serde_json::to_string(&object).unwrap());
    assert_eq!(stdout(&sandcap(&["validate", &json_file])), "ALLOWED SandboxLease/batch-7\n");

    let list = json!({"apiVersion": "v1", "kind": "List", "items": [object.clone(), object]});
    let list_file = write(dir.path(), "list.json", &list.to_string());
    assert_eq!(
        stdout(&sandcap(&["validate", &list_file])),
        "ALLOWED SandboxLease/batch-7\nALLOWED SandboxLease/batch-7\n"
    );
}

#[test]
fn validate_denies_worker_urls_to_refused_addresses_unless_the_cidrs_allow_them() {
    let dir = tempfile::tempdir().unwrap();
    let provider = std::fs::read_to_string("examples/provider-legacy.yaml").unwrap();
    let mut object: Value = serde_saphyr::from_str(&provider).unwrap();
    object["spec"]["worker"] = json!({"url": "http://169.254.169.254/latest/meta-data/"});
    let metadata = write(dir.path(), "metadata.json", &object.to_string());
    let o = sandcap(&["validate", "--allow-worker-urls", &metadata]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        stdout(&o).starts_with(
            "DENIED SandboxProvider/legacy-vm: spec.worker.url: host 169.254.169.254 is a refused address (cloud metadata)"
        ),
        "{}",
        stdout(&o)
    );
    let o =
        sandcap(&["validate", "--allow-worker-urls", "--worker-url-allowed-cidrs", "127.0.0.0/8,::1/128", &metadata]);
    assert_eq!(o.status.code(), Some(1), "loopback allowed, metadata still refused");
    object["spec"]["worker"] = json!({"url": "http://[64:ff9b::7f00:1]/"});
    let nat64 = write(dir.path(), "nat64.json", &object.to_string());
    let o = sandcap(&["validate", "--allow-worker-urls", "--worker-url-allowed-cidrs", "127.0.0.0/8", &nat64]);
    assert!(
        stdout(&o).starts_with(
            "DENIED SandboxProvider/legacy-vm: spec.worker.url: host [64:ff9b::7f00:1] is a refused address (loopback)"
        ),
        "the NAT64 gateway's loopback is not sandcap's: {}",
        stdout(&o)
    );
    let o =
        sandcap(&["validate", "--allow-worker-urls", "--worker-url-allowed-cidrs", "169.254.169.254/32", &metadata]);
    assert_eq!(stdout(&o), "ALLOWED SandboxProvider/legacy-vm\n");
    let o = sandcap(&["validate", "--allow-worker-urls", "--worker-url-allowed-cidrs", "localhost", &metadata]);
    assert_eq!(o.status.code(), Some(2), "a bad CIDR is a usage error: {o:?}");
    assert!(stderr(&o).contains("--worker-url-allowed-cidrs"), "{}", stderr(&o));
}

#[test]
fn resolve_provider_level_table_and_json() {
    let o = sandcap(&[
        "resolve",
        "--provider",
        "examples/provider-full.yaml",
        "--driver",
        "kubernetes",
        "--worker-methods",
        &ALL,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let table = stdout(&o);
    assert!(table.starts_with("DRIVER kubernetes  EFFECTIVE POLICY ReuseByEnvironment\nCAPABILITY"), "{table}");
    assert!(table.contains("reusableLeases               true     Granted"));

    let o = sandcap(&[
        "resolve",
        "--provider",
        "examples/provider-full.yaml",
        "--driver",
        "kubernetes",
        "-o",
        "json",
        "--worker-methods",
        "environmentSyncIn,environmentExecute",
    ]);
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

/// Every bad input: one line on stderr naming the file and the problem, exit 2, no panic.
#[test]
fn bad_input_gets_a_one_line_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let malformed_yaml = write(d, "bad.yaml", "spec: [unclosed\n  - x: {");
    let malformed_json = write(d, "bad.json", "{\"apiVersion\": \"sandcap.dev/v1alpha1\",");
    let unknown_kind = write(d, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n");
    let scalar = write(d, "scalar.yaml", "just a string\n");
    let third = write(d, "third.yaml", "---\n---\n# nothing\n---\njust a string\n");
    let not_json_secret = write(
        d,
        "s.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: acme-credentials}\nstringData: {config.json: 'nope: [x'}\n",
    );
    let bad_base64 = write(
        d,
        "b.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: acme-credentials}\ndata: {config.json: '!!!'}\n",
    );
    let no_drivers = write(
        d,
        "nodrivers.yaml",
        "apiVersion: sandcap.dev/v1alpha1\nkind: SandboxProvider\nmetadata: {name: empty}\nspec: {pluginKey: a, version: 1.0.0, worker: {service: {namespace: n, name: w, port: 80}}, environmentDrivers: []}\n",
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["validate", &malformed_yaml], "bad.yaml: document 1: not valid YAML or JSON"),
        (vec!["validate", &malformed_json], "bad.json: document 1: not valid YAML or JSON"),
        (vec!["validate", &unknown_kind], "cm.yaml: ConfigMap/cm: unknown kind"),
        (vec!["validate", &scalar], "scalar.yaml: document 1: expected a Kubernetes object, got a string"),
        (vec!["validate", &third], "third.yaml: document 3: expected a Kubernetes object, got a string"),
        (vec!["validate", "/nonexistent/p.yaml"], "/nonexistent/p.yaml: cannot read"),
        (vec!["resolve", "--provider", &no_drivers], "nodrivers.yaml: the provider declares no driver at all"),
        (
            vec!["resolve", "--provider", "examples/lease-job.yaml"],
            "lease-job.yaml: SandboxLease/batch-7: expected a SandboxProvider",
        ),
        (
            vec!["resolve", "--provider", "examples/provider-full.yaml", "--driver", "nope"],
            "the provider declares no driver nope",
        ),
        (
            resolve_lease_args("examples/lease-reuse.yaml", Some(&bad_base64)),
            "b.yaml: Secret/acme-credentials: data.config.json is not valid base64",
        ),
    ];
    for (args, expected) in cases {
        let o = sandcap(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(expected), "{args:?}:\n got: {err}\nwant: {expected}");
        assert!(!err.contains("panicked"));
    }
    // A Secret whose key holds non-JSON is a config-resolution failure of the lease, not a crash.
    let o = resolve_reuse_lease(&not_json_secret, &["-o", "json"]);
    assert_eq!(o.status.code(), Some(0));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["explanations"][3]["message"].as_str().unwrap().contains("key config.json is not valid JSON"));
    // A provider without drivers is a denial under validate.
    let o = sandcap(&["validate", &no_drivers]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stdout(&o),
        "DENIED SandboxProvider/empty: SandboxProvider.sandcap.dev \"empty\" is invalid: spec.environmentDrivers: Invalid value: 0: spec.environmentDrivers in body should have at least 1 items\n"
    );
}

/// A full disk or a closed pipe must not pass for a complete output: every offline command
/// exits 2 with one line on stderr.
#[test]
#[cfg(target_os = "linux")]
fn a_failed_write_exits_2_with_one_line() {
    let commands: [&[&str]; 3] = [
        &["crds"],
        &["validate", "examples/provider-full.yaml"],
        &["resolve", "--provider", "examples/provider-full.yaml", "--worker-methods", &ALL],
    ];
    for args in commands {
        let full = std::fs::File::create("/dev/full").expect("/dev/full opens");
        let o = Command::new(env!("CARGO_BIN_EXE_sandcap"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(full)
            .output()
            .expect("sandcap runs");
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("sandcap: cannot write the output: "), "{args:?}: {err}");
    }
}

#[test]
fn hostile_yaml_is_refused_without_exhausting_memory() {
    let dir = tempfile::tempdir().unwrap();
    // The "billion laughs": aliases that would expand exponentially.
    let mut bomb = String::from("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    for i in 1..10 {
        let prev = (b'a' + i - 1) as char;
        let cur = (b'a' + i) as char;
        bomb.push_str(&format!(
            "{cur}: &{cur} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
        ));
    }
    let file = write(dir.path(), "bomb.yaml", &bomb);
    let o = sandcap(&["validate", &file]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let deep = write(dir.path(), "deep.json", &format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)));
    let o = sandcap(&["validate", &deep]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
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

/// A provider declaring all nine keys, whose worker verified every method, and a lease of it that
/// asks to reuse its sandbox; `status` is the provider's and the lease's recorded contract, if any.
fn nine_keys(status: &str) -> String {
    format!(
        "apiVersion: sandcap.dev/v1alpha1
kind: SandboxProvider
metadata: {{name: nine}}
spec:
  pluginKey: acme.nine
  version: 1.0.0
  worker:
    service: {{namespace: sandbox-system, name: nine-worker, port: 8080}}
  environmentDrivers:
  - driverKey: k
    kind: sandbox_provider
    sandboxCapabilities: {{reusableLeases: true, nativeSyncIn: true, nativeSyncOut: true,
      persistentProcessSessions: true, independentControlCommands: true, incrementalSessionOutput: true,
      concurrentSyncOperations: true, duplexCommandStream: true, runnerWebSocketIngress: true}}
status:
  {status}
  worker: {{probe: Succeeded, message: ok, supportedMethods: [{methods}]}}
---
apiVersion: sandcap.dev/v1alpha1
kind: SandboxLease
metadata: {{name: l1, namespace: team-a}}
spec:
  providerRef: {{name: nine, driverKey: k}}
  policy: ReuseByEnvironment
  environment: env-7
status:
  {status}
  conditions: []
",
        methods = sandcap::versions::V2.worker_methods().join(", ")
    )
}

#[test]
fn plan_offline_lists_what_a_switch_refuses_admits_gains_and_loses_with_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let unrecorded = write(dir.path(), "nine.yaml", &nine_keys(""));
    // v1 refuses the provider, so under v1 its lease has nothing; under v2 it has every key.
    let up = sandcap(&["plan", "--contract", "v2", "-f", &unrecorded, "-f", "examples/provider-full.yaml"]);
    assert_eq!(up.status.code(), Some(1), "changes, nothing refused: {}", stderr(&up));
    let lines: Vec<String> = stdout(&up).lines().map(str::to_string).collect();
    assert!(lines[0].starts_with("provider nine admitted under v2 (refused under v1: the CRD would refuse it today: "));
    assert!(lines[0].contains("duplexCommandStream is not a key of contract v1"), "{}", lines[0]);
    assert!(
        lines[1].starts_with("lease team-a/l1 gains reusableLeases (under v1: ProviderNotValid (the provider breaks")
    );
    assert_eq!(lines[8], "lease team-a/l1 gains duplexCommandStream (under v1: not a key of contract v1)");
    assert_eq!(
        lines.last().unwrap(),
        "summary: contract v2, providers 2, leases 1, refused 0, still refused 0, admitted 1, leases changing 1, gains \
         9, losses 0"
    );
    let json = sandcap(&["plan", "--contract", "v2", "-f", &unrecorded, "-o", "json"]);
    assert_eq!(json.status.code(), Some(1));
    let plan: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(plan["contract"], json!("v2"));
    let provider = &plan["objects"][0];
    assert_eq!(
        [&provider["kind"], &provider["name"], &provider["from"], &provider["admission"]],
        [&json!("SandboxProvider"), &json!("nine"), &json!("v1"), &json!("admitted")]
    );
    let lease = &plan["leases"][0];
    assert_eq!([&lease["namespace"], &lease["name"], &lease["from"]], [&json!("team-a"), &json!("l1"), &json!("v1")]);
    assert_eq!(
        lease["changes"][7],
        json!({"capability": "duplexCommandStream", "change": "gains", "offUnder": "v1", "reason": null,
               "message": "not a key of contract v1"})
    );
    assert_eq!(
        plan["summary"],
        json!({"providers": 1, "leases": 1, "refused": 0, "stillRefused": 0, "admitted": 1, "leasesChanging": 1,
               "gains": 9, "losses": 0})
    );

    // Back to v1 from the v2 the status records (or that --from names): refused, and all is lost.
    let recorded = write(dir.path(), "recorded.yaml", &nine_keys("contract: v2"));
    for args in [vec!["-f", &recorded], vec!["-f", &unrecorded, "--from", "v2"]] {
        let down = sandcap(&[&["plan", "--contract", "v1"], &args[..]].concat());
        assert_eq!(down.status.code(), Some(3), "an object is newly refused: {}", stderr(&down));
        let text = stdout(&down);
        assert!(text.starts_with("provider nine refused under v1: the CRD would refuse it today: "), "{text}");
        assert!(
            text.contains("\nlease team-a/l1 loses reusableLeases: ProviderNotValid (the provider breaks"),
            "{text}"
        );
        assert!(text.contains("\nlease team-a/l1 loses runnerWebSocketIngress: not a key of contract v1\n"), "{text}");
        assert!(text.ends_with("admitted 0, leases changing 1, gains 0, losses 9\n"), "{text}");
    }
    // Staying where the status is: nothing changes.
    let same = sandcap(&["plan", "--contract", "v2", "-f", &recorded]);
    assert_eq!(same.status.code(), Some(0), "{}", stdout(&same));
    assert_eq!(
        stdout(&same),
        "summary: contract v2, providers 1, leases 1, refused 0, still refused 0, admitted 0, leases changing 0, gains \
         0, losses 0\n"
    );
}

#[test]
fn plan_lists_what_stays_refused_and_fails_as_every_command_does() {
    let still = sandcap(&["plan", "--contract", "v2", "-f", "examples/provider-removed-key.yaml"]);
    assert_eq!(still.status.code(), Some(0), "refused before and after: the switch changes nothing");
    assert!(stdout(&still).starts_with("provider old-style still refused under v2: the CRD would refuse it today: "));
    for (args, error) in [
        (&["plan", "--contract", "v3", "-f", "examples/provider-full.yaml"][..], "unknown contract version \"v3\""),
        (&["plan", "--contract", "v2", "-f", "examples/missing.yaml"][..], "examples/missing.yaml: cannot read"),
        (&["plan", "--contract", "v2", "-f", "examples/secrets"][..], "Secret/acme-credentials: unknown kind"),
    ] {
        let o = sandcap(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(error), "{args:?}: {}", stderr(&o));
    }
}

/// A zero probe interval would be a hot loop, a timeout of hours would keep a hung worker's
/// grants that long: `sandcap run` refuses both before it starts anything, naming the range.
#[test]
fn run_refuses_probe_durations_outside_their_ranges() {
    for (flag, value, range) in [
        ("--probe-interval", "0s", "1s to 1day"),
        ("--probe-timeout", "2h", "1s to 1m"),
        ("--probe-timeout", "500ms", "1s to 1m"),
        ("--cache-sync-timeout", "0s", "1s to 1h"),
    ] {
        let o = sandcap(&["run", "--webhook-only", "--tls-self-signed", flag, value]);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}: {}", stderr(&o));
        assert!(stderr(&o).contains(&format!("{value} is outside {range}")), "{}", stderr(&o));
    }
}
