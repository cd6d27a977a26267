//! The observer on a real node (issue 43): a Job of the host's plugin runs to completion as a pod,
//! the TTL-after-finished controller deletes it, and its observed SandboxLease goes with it, the
//! real garbage collector (and sandcap) acting on the lease's owner reference.

use std::time::Instant;

use sandcap_core::workloads::OBSERVER_FIELD_MANAGER;
use serde_json::json;

use crate::node::{Node, eventually};
use crate::scenarios::{NS, WAIT, worker};
use crate::support::workloads::{bindings, job, namespace, run_labels};
use crate::support::{all_true, provider};

const WORKLOADS: &str = "node-paperclip";
const PROVIDER: &str = "node-paperclip";
const RUN: &str = "01JEF4N0DE5QW8Y3ZK2M7R9T6B";
const TTL: i64 = 5;

/// A Job labelled as the plugin labels it, whose pod (the worker image, `--help`) exits 0 at once,
/// with `ttlSecondsAfterFinished: 5`: its lease appears, the Job completes, is deleted by the TTL
/// controller, and the lease is gone with it. The times are printed.
pub fn a_finished_job_takes_its_observed_lease_with_it(node: &Node) {
    worker(node);
    let mut paperclip = provider(PROVIDER, "http://unused.invalid/", all_true());
    paperclip["spec"]["worker"] =
        json!({"service": {"namespace": "sandbox-system", "name": "acme-worker", "port": 8080, "path": "/rpc"}});
    paperclip["spec"]["workloads"] = bindings(&["Job"]);
    node.apply(&[namespace(WORKLOADS, true), paperclip]);
    let (name, labels) = run_labels(RUN);
    node.apply(&[job(WORKLOADS, &name, &labels, &node.worker_image, &["--help"], Some(TTL))]);
    let created = Instant::now();
    let uid = node.kubectl_json(&["get", "job", &name, "-n", WORKLOADS])["metadata"]["uid"].clone();

    let lease = eventually("the Job's observed lease", WAIT, || get(node, "sbl", &name));
    println!("observed: the lease appeared {:.1?} after the Job", created.elapsed());
    assert_eq!(lease["metadata"]["labels"]["sandcap.dev/observed-from"], "job", "{lease:#}");
    let owner = json!([{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
                        "controller": false, "blockOwnerDeletion": false}]);
    assert_eq!(lease["metadata"]["ownerReferences"], owner, "{lease:#}");
    // sandcap's observer created it: the apiserver records the field manager of every write
    // (kubectl shows them only when asked).
    let managed = node.kubectl_json(&["get", "sbl", &name, "-n", WORKLOADS, "--show-managed-fields"]);
    let managers = managed["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
    assert!(
        managers.iter().any(|m| m["manager"] == OBSERVER_FIELD_MANAGER && m["operation"] == "Update"),
        "the lease was not written by {OBSERVER_FIELD_MANAGER}: {lease:#}"
    );
    eventually("the lease resolved Job-backed", WAIT, || {
        let lease = get(node, "sbl", &name)?;
        (lease["status"]["capabilities"]["nativeSyncIn"] == false
            && lease["status"]["observedGeneration"] == lease["metadata"]["generation"])
            .then_some(())
    });

    eventually("the Job complete", WAIT, || {
        let job = get(node, "job", &name)?;
        (job["status"]["succeeded"] == 1).then_some(())
    });
    let completed = created.elapsed();
    // The TTL controller deletes the Job; the lease and the Job's pod go through the garbage
    // collector (sandcap, seeing the Job gone, deletes the lease too, whichever comes first).
    let (mut job_gone, mut lease_gone) = (None, None);
    eventually("the Job and its lease deleted", WAIT, || {
        if job_gone.is_none() && get(node, "job", &name).is_none() {
            job_gone = Some(created.elapsed());
        }
        if lease_gone.is_none() && get(node, "sbl", &name).is_none() {
            lease_gone = Some(created.elapsed());
        }
        job_gone.zip(lease_gone)
    });
    let (job_gone, lease_gone) = (job_gone.expect("gone"), lease_gone.expect("gone"));
    let by = who_deleted(node, &name);
    println!(
        "observed: Job complete at {completed:.1?}, deleted at {job_gone:.1?}, its lease at {lease_gone:.1?} by {by}"
    );
    eventually("the Job's pod collected", WAIT, || {
        let pods = node.kubectl_json(&["get", "pods", "-n", WORKLOADS, "-l", &format!("job-name={name}")]);
        pods["items"].as_array().is_some_and(|p| p.is_empty()).then_some(())
    });

    node.ok(&["kubectl", "delete", "sbp", PROVIDER, "--wait=false"]);
    node.ok(&["kubectl", "delete", "namespace", WORKLOADS, "--wait=false"]);
}

/// Who deleted the lease `name`, as the apiserver recorded it (`examples/node.sh` audits the
/// deletes of SandboxLeases): sandcap's ServiceAccount, or the garbage collector's. Not a pod's
/// log: a rollout before this scenario may have replaced the pod that wrote it.
fn who_deleted(node: &Node, name: &str) -> &'static str {
    let audit = std::fs::read_to_string(node.state.join("audit.log")).expect("the node's audit log");
    let deleted_by = |user: &str| {
        audit.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).any(|event| {
            event["objectRef"]["name"] == name
                && event["objectRef"]["namespace"] == WORKLOADS
                && event["responseStatus"]["code"].as_u64().is_some_and(|code| code < 300)
                && event["user"]["username"] == user
        })
    };
    if deleted_by(&format!("system:serviceaccount:{NS}:sandcap")) {
        "sandcap"
    } else if deleted_by("system:serviceaccount:kube-system:generic-garbage-collector") {
        "the garbage collector"
    } else {
        panic!("the audit log records no successful delete of {WORKLOADS}/{name}:\n{audit}")
    }
}

/// The object `kind`/`name` in the scenario's namespace, `None` once it is gone.
fn get(node: &Node, kind: &str, name: &str) -> Option<serde_json::Value> {
    let output = node.exec(&["kubectl", "get", kind, name, "-n", WORKLOADS, "-o", "json", "--ignore-not-found"], "");
    assert!(output.status.success(), "kubectl get {kind} {name}: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    (!text.trim().is_empty()).then(|| serde_json::from_str(&text).expect("kubectl prints JSON"))
}
