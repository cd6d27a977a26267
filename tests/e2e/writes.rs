//! What sandcap's status writes look like to the apiserver and to `kubectl` users: a merge patch of the
//! whole status per change (no server-side apply), recorded under the `sandcap` field manager, and a new lease of
//! a provider not probed yet written once, when the probe is published.

use std::sync::Arc;
use std::time::Duration;

use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::harness::binary::Sandcap;
use crate::harness::cluster::Cluster;
use crate::harness::install;
use crate::harness::objects::{delete, get};
use crate::harness::requests::status_patches;
use crate::harness::waits::{eventually, lease_reason};
use crate::support::{Worker, all_true, lease, ok, provider};

const NS: &str = "e2e-status-writes";
const WAIT: Duration = Duration::from_secs(30);

/// Who owns the status of `object`, by its `managedFields`: (manager, operation, subresource) of
/// every entry whose fields include `status`.
fn status_owners(object: &Value) -> Vec<(String, String, String)> {
    let entries = object["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    entries
        .iter()
        .filter(|m| m["fieldsV1"].get("f:status").is_some())
        .map(|m| (text(&m["manager"]), text(&m["operation"]), text(&m["subresource"])))
        .collect()
}

pub async fn a_status_is_one_merge_patch_written_once_per_new_lease(c: Arc<Cluster>) {
    let install = install::default_chart(&c, NS).await;
    let worker = Worker::of_contract(ContractVersion::V1);
    // A worker that accepts the probe's connection and never answers: the provider stays unprobed
    // for the probe's timeout, and the test knows when the probe started (so the provider is in
    // sandcap's cache).
    let silent = TcpListener::bind("127.0.0.1:0").await.expect("a loopback listener");
    let silent_url = format!("http://{}/", silent.local_addr().expect("its address"));
    let overrides = [("SANDCAP_CONTROLLERS_ONLY", "true"), ("SANDCAP_PROBE_TIMEOUT", "3s")];
    let sandcap = Sandcap::start(&c, &install, "writes", &overrides);
    let admin = c.admin().await;

    install::apply(&c, &[provider("e2e-status-writes-silent", &silent_url, all_true())]);
    let (_held, _) = tokio::time::timeout(WAIT, silent.accept()).await.expect("probed within 30 s").expect("accept");
    install::apply(&c, &[lease(NS, "waits", "e2e-status-writes-silent", json!({}))]);
    lease_reason(&admin, NS, "waits", "nativeSyncIn", "WorkerNotVerified").await;

    // A provider and its lease created together, the usual way.
    install::apply(
        &c,
        &[provider("e2e-status-writes", &worker.url, all_true()), lease(NS, "granted", "e2e-status-writes", json!({}))],
    );
    lease_reason(&admin, NS, "granted", "nativeSyncIn", "Granted").await;
    // The last writes may still be in the audit log's buffer.
    tokio::time::sleep(Duration::from_secs(2)).await;

    assert_eq!(status_patches(&c, &["waits"]), 1, "the waiting lease's status writes");
    assert!(status_patches(&c, &["e2e-status-writes"]) >= 1, "the provider's status writes");
    // `Update`, not `Apply`: a patch replaced the status, no server-side apply.
    let sandcaps = ("sandcap".to_string(), "Update".to_string(), "status".to_string());
    for (kind, namespace, name) in [
        ("SandboxLease", Some(NS), "granted"),
        ("SandboxLease", Some(NS), "waits"),
        ("SandboxProvider", None, "e2e-status-writes"),
    ] {
        let object = get(&admin, kind, namespace, name).await.expect("stored");
        assert_eq!(status_owners(&object), std::slice::from_ref(&sandcaps), "{kind} {name}: {:#}", object["metadata"]);
    }

    // A status somebody else changes is sandcap's again at the next write, and the managed fields
    // say who wrote what meanwhile.
    let tampered = r#"{"status": {"capabilities": {"nativeSyncIn": false}}}"#;
    ok(
        "patch the status",
        c.kubectl(&["-n", NS, "patch", "sbl", "granted", "--subresource=status", "--type=merge", "-p", tampered]),
    );
    let object = get(&admin, "SandboxLease", Some(NS), "granted").await.expect("stored");
    let owners: Vec<String> = status_owners(&object).into_iter().map(|o| o.0).collect();
    assert!(owners.contains(&"kubectl-patch".to_string()), "{owners:?}");
    // A change to the lease's spec re-resolves it; the tampered field is rewritten with the rest.
    ok(
        "change the spec",
        c.kubectl(&["-n", NS, "patch", "sbl", "granted", "--type=merge", "-p", r#"{"spec": {"config": {}}}"#]),
    );
    eventually("the lease granted again", WAIT, || async {
        let lease = get(&admin, "SandboxLease", Some(NS), "granted").await?;
        (lease["status"]["capabilities"]["nativeSyncIn"] == true
            && lease["status"]["observedGeneration"] == lease["metadata"]["generation"])
            .then_some(())
    })
    .await;

    assert!(sandcap.problems().is_empty(), "sandcap logged:\n{}", sandcap.problems().join("\n"));
    drop(sandcap);
    for name in ["waits", "granted"] {
        delete(&admin, "SandboxLease", Some(NS), name).await;
    }
    for name in ["e2e-status-writes-silent", "e2e-status-writes"] {
        delete(&admin, "SandboxProvider", None, name).await;
    }
}
