//! The contract version as an admin switches it: `helm upgrade --set contract.version=...` on the
//! installed chart, there and back.

use serde_json::{Value, json};

use crate::node::{Node, sandcap_binary};
use crate::release::published;
use crate::scenarios::{NS, RELEASE, condition, worker};
use sandcap_core::versions::ContractVersion;

const NINE: &str = "acme-nine";

/// A provider of the example worker declaring every key of v2 true, and a lease on it.
fn nine_keys() -> [Value; 2] {
    let keys: serde_json::Map<String, Value> =
        ContractVersion::V2.contract().capabilities().map(|c| (c.key().to_string(), json!(true))).collect();
    [
        json!({
            "apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxProvider", "metadata": {"name": NINE},
            "spec": {
                "pluginKey": "acme.nine", "version": "2.0.0",
                "worker": {"service": {"namespace": "sandbox-system", "name": "acme-worker", "port": 8080, "path": "/rpc"}},
                "environmentDrivers": [{"driverKey": "kubernetes", "kind": "sandbox_provider", "sandboxCapabilities": keys}]
            }
        }),
        json!({
            "apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxLease",
            "metadata": {"name": "nine-run", "namespace": "team-a"},
            "spec": {"providerRef": {"name": NINE, "driverKey": "kubernetes"}, "policy": "ReuseByEnvironment",
                     "environment": "env-9"}
        }),
    ]
}

/// Upgrades the release to `version` and waits until `sandcap check` and `helm test` pass under it.
fn upgrade(node: &Node, version: ContractVersion) {
    let value = format!("contract.version={version}");
    let upgrade =
        ["helm", "upgrade", RELEASE, "-n", NS, "--reuse-values", "--set", &value, "--wait", "--timeout", "5m"];
    node.ok(&[&upgrade[..], &published(node).chart_args()].concat());
    node.ok(&["kubectl", "rollout", "status", "deployment/sandcap", "-n", NS, "--timeout", "5m"]);
    node.ok(&[&sandcap_binary().display().to_string(), "check", "--contract", version.as_str(), "--wait", "2m"]);
    node.ok(&["helm", "test", RELEASE, "-n", NS, "--timeout", "3m"]);
}

/// Waits until the lease is resolved under `version` and returns it.
fn lease_under(node: &Node, version: ContractVersion) -> Value {
    crate::node::eventually(&format!("nine-run resolved under {version}"), crate::scenarios::WAIT, || {
        let lease = node.kubectl_json(&["get", "sbl", "nine-run", "-n", "team-a"]);
        let current = lease["status"]["observedGeneration"] == lease["metadata"]["generation"];
        (current && lease["status"]["contract"] == version.as_str()).then_some(lease)
    })
}

/// Under v1 (the chart's default) the CRD refuses the nine keys, naming v2; under v2 they are
/// admitted and the lease resolves them; back on v1 the stored provider stays readable and
/// writable (a label update), its `Valid` turns False and its lease grants nothing.
pub fn switch_there_and_back(node: &Node) {
    worker(node);
    let [provider, lease] = nine_keys();
    let refused = node.exec(&["kubectl", "apply", "-f", "-"], &provider.to_string());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("choose contract v2"), "v1 refuses the nine keys: {said}");

    upgrade(node, ContractVersion::V2);
    node.apply(&[provider, lease]);
    let lease = lease_under(node, ContractVersion::V2);
    let caps = &lease["status"]["capabilities"];
    assert_eq!(caps.as_object().map(|c| c.len()), Some(9), "{lease:#}");
    // The example worker advertises v1's methods: the sync pair, not the two methods v2 adds.
    assert_eq!(caps["concurrentSyncOperations"], json!(true), "{lease:#}");
    assert_eq!(caps["duplexCommandStream"], json!(false), "{lease:#}");

    upgrade(node, ContractVersion::V1);
    node.ok(&["kubectl", "label", "--overwrite", "sbp", NINE, "node/contract=v1"]);
    let valid = condition(node, &["sbp", NINE], "Valid", "False");
    assert!(valid["message"].as_str().is_some_and(|m| m.contains("duplexCommandStream")), "{valid:#}");
    let lease = lease_under(node, ContractVersion::V1);
    let caps = lease["status"]["capabilities"].as_object().cloned().unwrap_or_default();
    assert!(caps.len() == 6 && caps.values().all(|on| *on == json!(false)), "{lease:#}");
    node.ok(&["kubectl", "delete", "sbl", "nine-run", "-n", "team-a"]);
    node.ok(&["kubectl", "delete", "sbp", NINE]);
}
