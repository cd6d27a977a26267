//! A worker of the host's real SDK on the node (issue 44): `examples/bridge/plugin.yaml` as
//! shipped, its image the one `examples/bridge/Dockerfile` builds from the SDK plugin of
//! `tests/bridge/plugin` (testcluster/images/build.sh). Both replicas turn Ready once their worker
//! answered `initialize` through the bridge; sandcap probes each at its own address, verifies the
//! SDK's `supportedMethods` from the plugin the provider names, finds the declarations the
//! manifest's (and says so when an edit makes them differ), and a lease of the driver resolves
//! from it.

use std::time::Instant;

use serde_json::{Value, json};

use crate::node::{Node, eventually, repo_root};
use crate::scenarios::{WAIT, condition, worker};
use crate::support::lease;

/// The image reference examples/bridge/plugin.yaml names, replaced by the node's.
const EXAMPLE_IMAGE: &str = "registry.example.com/sandcap-bridge-test:0.3.1";
const PROVIDER: &str = "bridge-test";

pub fn an_sdk_worker_behind_the_bridge_is_ready_and_a_lease_resolves(node: &Node) {
    worker(node); // the namespaces of the example leases
    let example = std::fs::read_to_string(repo_root().join("examples/bridge/plugin.yaml")).expect("the example");
    assert!(example.contains(EXAMPLE_IMAGE), "examples/bridge/plugin.yaml names {EXAMPLE_IMAGE}");
    let started = Instant::now();
    node.ok_with(&["kubectl", "apply", "-f", "-"], &example.replace(EXAMPLE_IMAGE, &node.bridge_image));
    let rollout = ["kubectl", "rollout", "status", "deployment/bridge-test-worker", "-n", "sandbox-system"];
    node.ok(&[&rollout[..], &["--timeout", "3m"]].concat());
    println!("bridge: both replicas Ready (their SDK workers initialized) {:.1?} after apply", started.elapsed());

    let ready = condition(node, &["sbp", PROVIDER], "Ready", "True");
    println!("bridge: provider Ready {:.1?} after apply: {}", started.elapsed(), ready["message"]);
    // Each replica is probed at its own address once its endpoint serves.
    let provider = eventually("both replicas verified", WAIT, || {
        let provider = node.kubectl_json(&["get", "sbp", PROVIDER]);
        let endpoints = &provider["status"]["worker"]["endpoints"];
        (endpoints["serving"] == 2 && endpoints["answered"] == 2 && endpoints["agreeing"] == 2).then_some(provider)
    });
    println!("bridge: both replicas verified {:.1?} after apply", started.elapsed());
    let worker = &provider["status"]["worker"];
    assert_eq!(
        (&worker["plugin"]["id"], &worker["plugin"]["version"]),
        (&json!("sandcap.bridge-test"), &json!("0.3.1"))
    );
    let methods: Vec<&str> =
        worker["supportedMethods"].as_array().expect("methods").iter().flat_map(Value::as_str).collect();
    for method in ["environmentSyncIn", "environmentSyncOut", "environmentExecute"] {
        assert!(methods.contains(&method), "the SDK's {method} verified: {worker:#}");
    }
    condition(node, &["sbp", PROVIDER], "DeclarationsMatchManifest", "True");

    let mut run = lease("team-a", "bridge-run-1", PROVIDER, json!({}));
    run["spec"]["providerRef"]["driverKey"] = json!("bridge-test");
    node.apply(&[run]);
    condition(node, &["sbl", "bridge-run-1", "-n", "team-a"], "Resolved", "True");
    let resolved = node.kubectl_json(&["get", "sbl", "bridge-run-1", "-n", "team-a"]);
    let capabilities = &resolved["status"]["capabilities"];
    assert_eq!(
        (&capabilities["nativeSyncIn"], &capabilities["nativeSyncOut"], &capabilities["persistentProcessSessions"]),
        (&json!(true), &json!(true), &json!(false)),
        "granted as declared and verified: {resolved:#}"
    );
    println!("bridge: lease team-a/bridge-run-1 resolved {:.1?} after apply", started.elapsed());
    node.ok(&["kubectl", "delete", "sbl", "bridge-run-1", "-n", "team-a"]);

    // Declared otherwise than the manifest the worker reports: the condition says so, and which.
    let differ = r#"[{"op": "replace", "path": "/spec/environmentDrivers/0/sandboxCapabilities/persistentProcessSessions", "value": true}]"#;
    node.ok(&["kubectl", "patch", "sbp", PROVIDER, "--type", "json", "-p", differ]);
    let differs = condition(node, &["sbp", PROVIDER], "DeclarationsMatchManifest", "False");
    assert_eq!(differs["reason"], "DiffersFromManifest", "{differs:#}");
    assert!(differs["message"].as_str().is_some_and(|m| m.contains("persistentProcessSessions")), "{differs:#}");
    println!("bridge: declared otherwise than the manifest: {}", differs["message"]);
    node.ok_with(&["kubectl", "apply", "-f", "-"], &example.replace(EXAMPLE_IMAGE, &node.bridge_image));
    condition(node, &["sbp", PROVIDER], "DeclarationsMatchManifest", "True");
}
