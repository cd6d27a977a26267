//! What the binary refuses: bad input, a failed write, hostile YAML and durations out of range,
//! each with one line and its exit code, never a crash.

use std::process::Command;

use serde_json::Value;

use super::{ALL, resolve_lease_args, resolve_reuse_lease, sandcap, stderr, stdout, write};

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
