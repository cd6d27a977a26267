//! `sandcap plan` offline: what a switch of contract version refuses, admits, gains and loses.

use serde_json::{Value, json};

use super::{sandcap, stderr, stdout, write};

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
        methods = sandcap_core::versions::V2.worker_methods().join(", ")
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
