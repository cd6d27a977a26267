//! Workloads as a host's Kubernetes provider makes them, for the observer's scenarios (e2e and
//! node): the agent-sandbox CRD from its pinned Go module, Jobs and Sandboxes labelled as
//! Paperclip's Kubernetes plugin labels them, and a provider binding both kinds.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};

/// The label every workload of the host's plugin carries, and its value: what the bindings select.
pub const MANAGED_BY: (&str, &str) = ("paperclip.io/managed-by", "paperclip-k8s-plugin");
/// The namespace label that opts a namespace's workloads in (sandcap_core::workloads::NAMESPACE_LABEL).
pub const OPTED_IN: (&str, &str) = ("sandcap.dev/workloads", "enabled");
/// agent-sandbox's Sandbox as its CRD serves it.
pub const SANDBOX_API_VERSION: &str = "agents.x-k8s.io/v1beta1";
pub const SANDBOX_CLAIM_API_VERSION: &str = "extensions.agents.x-k8s.io/v1beta1";
pub const SANDBOX_CLAIM_CRD: &str = "sandboxclaims.extensions.agents.x-k8s.io";
pub const SANDBOX_CRD: &str = "sandboxes.agents.x-k8s.io";

/// The path of agent-sandbox's Sandbox CRD in the Go module cache: `testcluster/agent-sandbox.sh`
/// downloads the module testcluster/agent-sandbox/go.mod pins (once per process).
pub fn agent_sandbox_crd() -> PathBuf {
    static CRD: OnceLock<PathBuf> = OnceLock::new();
    CRD.get_or_init(|| agent_sandbox_crd_of("sandboxes")).clone()
}

/// The path of agent-sandbox's SandboxClaim CRD (its extensions), as [`agent_sandbox_crd`].
pub fn sandbox_claim_crd() -> PathBuf {
    static CRD: OnceLock<PathBuf> = OnceLock::new();
    CRD.get_or_init(|| agent_sandbox_crd_of("sandboxclaims")).clone()
}

fn agent_sandbox_crd_of(which: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new("bash")
        .arg(root.join("testcluster/agent-sandbox.sh"))
        .arg(which)
        .output()
        .expect("bash runs testcluster/agent-sandbox.sh");
    PathBuf::from(super::ok("testcluster/agent-sandbox.sh", output).trim())
}

/// A run's workload name and labels, as the plugin gives them: `pc-<ULID>` (lowercased, as a name
/// must be) and the run, agent, company and adapter labels beside `managed-by`.
pub fn run_labels(ulid: &str) -> (String, Value) {
    let labels = json!({
        "paperclip.io/run-id": ulid,
        "paperclip.io/agent-id": "agt-7f3c",
        "paperclip.io/company-id": "acme",
        "paperclip.io/adapter": "claude-code",
        MANAGED_BY.0: MANAGED_BY.1,
    });
    (format!("pc-{}", ulid.to_lowercase()), labels)
}

/// A namespace, opted in to observation or not.
pub fn namespace(name: &str, opted_in: bool) -> Value {
    let labels = if opted_in { json!({OPTED_IN.0: OPTED_IN.1}) } else { json!({}) };
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

/// A batch/v1 Job whose one container runs `image` with `args`; `ttl`: its
/// `ttlSecondsAfterFinished`.
pub fn job(namespace: &str, name: &str, labels: &Value, image: &str, args: &[&str], ttl: Option<i64>) -> Value {
    let mut job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "run",
                        "image": image,
                        "imagePullPolicy": "Never",
                        "args": args,
                        "securityContext": {"runAsNonRoot": true, "readOnlyRootFilesystem": true,
                                            "allowPrivilegeEscalation": false}
                    }]
                }
            }
        }
    });
    if let Some(ttl) = ttl {
        job["spec"]["ttlSecondsAfterFinished"] = json!(ttl);
    }
    job
}

/// An agent-sandbox Sandbox of one container.
pub fn sandbox(namespace: &str, name: &str, labels: &Value) -> Value {
    json!({
        "apiVersion": SANDBOX_API_VERSION,
        "kind": "Sandbox",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "agent", "image": "registry.example/agent:1"}]}}}
    })
}

/// An agent-sandbox SandboxClaim of the warm pool `pool`, labelled `labels`.
pub fn sandbox_claim(namespace: &str, name: &str, labels: &Value, pool: &str) -> Value {
    json!({
        "apiVersion": SANDBOX_CLAIM_API_VERSION,
        "kind": "SandboxClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"warmPoolRef": {"name": pool}}
    })
}

/// `spec.workloads` binding `kinds` (`Job`, `Sandbox`, `SandboxClaim`) of the plugin's workloads to
/// the driver `kubernetes` (the one of [`super::provider`]), with the default policy.
pub fn bindings(kinds: &[&str]) -> Value {
    let binding = |kind: &str| {
        json!({
            "kind": kind,
            "selector": {"matchLabels": {MANAGED_BY.0: MANAGED_BY.1}},
            "driverKey": "kubernetes",
        })
    };
    Value::Array(kinds.iter().map(|k| binding(k)).collect())
}

/// The observed lease's spec for a workload `kind`/`name` of `provider` (docs/contract.md,
/// "Observed leases"): what the stored spec must equal.
pub fn observed_spec(provider: &str, kind: &str, name: &str) -> Value {
    let (api_version, backend) = match kind {
        "Job" => ("batch/v1", "job"),
        "Sandbox" => (SANDBOX_API_VERSION, "sandbox-cr"),
        "SandboxClaim" => (SANDBOX_CLAIM_API_VERSION, "sandbox-cr"),
        other => panic!("no workload kind {other}"),
    };
    json!({
        "providerRef": {"name": provider, "driverKey": "kubernetes"},
        "policy": "Ephemeral",
        "backend": backend,
        "workloadRef": {"apiVersion": api_version, "kind": kind, "name": name},
    })
}
