//! The scoped-writes policy's rule for SandboxLeases (templates/writespolicy.yaml, with
//! workloads.enabled), with a token of sandcap's ServiceAccount and exactly the chart's RBAC: the
//! observer's leases (labelled `sandcap.dev/observed-from`, owned by the workload they are named
//! after) are created, patched and deleted; a hand-made lease is neither created, taken over nor
//! deleted; observed leases are written only in a namespace that opted in, naming their workload
//! and with no config; and the lease controller's status writes, a subresource, are not matched. Run from
//! [`crate::hardening`]'s scenario, which installed the chart.

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use sandcap_core::api::SandboxLease;
use sandcap_core::workloads::{NAMESPACE_ENABLED, NAMESPACE_LABEL, OBSERVED_FROM_LABEL, OBSERVER_FIELD_MANAGER};
use serde_json::{Value, json};

use crate::hardening::refused_by_policy;
use crate::harness::cluster::Cluster;
use crate::support::{lease, ok};

const OBSERVED_ONLY: &str = "may create, change and delete only observed SandboxLeases";
const OBSERVED_WHERE: &str = "may write observed SandboxLeases only in namespaces labelled";

/// `name`'s lease in `ns`, labelled `observed_from` (if any) and owned by `owner` (if any), whose
/// `workloadRef` names the owner as the observer's do (a Job of `name` without one).
fn observed(ns: &str, name: &str, observed_from: Option<&str>, owner: Option<Value>) -> SandboxLease {
    serde_json::from_value(observed_json(ns, name, observed_from, owner)).expect("a lease")
}

fn observed_json(ns: &str, name: &str, observed_from: Option<&str>, owner: Option<Value>) -> Value {
    let workload = owner.clone().unwrap_or_else(|| json!({"apiVersion": "batch/v1", "kind": "Job", "name": name}));
    let workload_ref =
        json!({"apiVersion": workload["apiVersion"], "kind": workload["kind"], "name": workload["name"]});
    let mut object = lease(ns, name, "e2e-writes", json!({"backend": "job", "workloadRef": workload_ref}));
    if let Some(label) = observed_from {
        object["metadata"]["labels"] = json!({ OBSERVED_FROM_LABEL: label });
    }
    if let Some(owner) = owner {
        object["metadata"]["ownerReferences"] = json!([owner]);
    }
    object
}

fn owner(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": true})
}

pub async fn only_observed_leases(c: &Cluster, admin: &Client, sa: &Client, ns: &str, hand_made: &str) {
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "e2e-observed", "namespace": ns, "labels": {"app": "e2e"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .expect("a Job");
    let job = Api::<Job>::namespaced(admin.clone(), ns).create(&PostParams::default(), &job).await.expect("the Job");
    let uid = job.meta().uid.clone().expect("a uid");
    let of_job = owner("batch/v1", "Job", "e2e-observed", &uid);
    let leases = Api::<SandboxLease>::namespaced(sa.clone(), ns);
    let params = PostParams { field_manager: Some(OBSERVER_FIELD_MANAGER.into()), ..Default::default() };
    let patch = PatchParams { field_manager: Some(OBSERVER_FIELD_MANAGER.into()), ..Default::default() };

    // Only in a namespace that opted in.
    let opted = |value: &str| {
        let label = format!("{NAMESPACE_LABEL}={value}");
        ok("label", c.kubectl(&["label", "namespace", ns, &label, "--overwrite"]));
    };
    let first = observed(ns, "e2e-observed", Some("job"), Some(of_job.clone()));
    opted("disabled");
    refused_by_policy("a namespace that did not opt in", leases.create(&params, &first).await, OBSERVED_WHERE);
    opted(NAMESPACE_ENABLED);

    // What the observer writes: created, merge-patched, later deleted.
    leases
        .create(&params, &observed(ns, "e2e-observed", Some("job"), Some(of_job.clone())))
        .await
        .expect("sandcap creates an observed lease");
    leases
        .patch("e2e-observed", &patch, &Patch::Merge(json!({"spec": {"environment": "e2e"}})))
        .await
        .expect("sandcap patches an observed lease");

    // Anything else is refused, by the policy (RBAC allows it): each differs in one thing.
    let job_named = |name: &str| owner("batch/v1", "Job", name, &uid);
    for (what, wrong) in [
        ("a hand-made lease", observed(ns, "e2e-unlabelled", None, None)),
        ("a label without an owner", observed(ns, "e2e-unowned", Some("job"), None)),
        ("an owner without the label", observed(ns, "e2e-unlabelled", None, Some(job_named("e2e-unlabelled")))),
        ("another workload's name", observed(ns, "e2e-renamed", Some("job"), Some(job_named("another")))),
        ("the label of another kind", observed(ns, "e2e-kind", Some("sandbox"), Some(job_named("e2e-kind")))),
        ("another label value", observed(ns, "e2e-value", Some("deployment"), Some(job_named("e2e-value")))),
        (
            "a Job of another group",
            observed(ns, "e2e-evil", Some("job"), Some(owner("evil.example/v1", "Job", "e2e-evil", &uid))),
        ),
    ] {
        refused_by_policy(what, leases.create(&params, &wrong).await, OBSERVED_ONLY);
    }
    // Nor what the observer never writes: config, or a workloadRef to another name.
    let with_spec = |name: &str, spec: Value| {
        let mut object = observed_json(ns, name, Some("job"), Some(job_named(name)));
        object["spec"].as_object_mut().expect("a spec").extend(spec.as_object().expect("an object").clone());
        serde_json::from_value::<SandboxLease>(object).expect("a lease")
    };
    for (what, wrong) in [
        ("inline config", with_spec("e2e-config", json!({"config": {"image": "x"}}))),
        (
            "config from a Secret",
            with_spec("e2e-secret", json!({"configFrom": [{"secretKeyRef": {"name": "s", "key": "k"}}]})),
        ),
        ("no workloadRef", with_spec("e2e-noref", json!({"workloadRef": null}))),
        (
            "a workloadRef to another name",
            with_spec("e2e-other", json!({"workloadRef": {"apiVersion": "batch/v1", "kind": "Job", "name": "other"}})),
        ),
    ] {
        refused_by_policy(what, leases.create(&params, &wrong).await, OBSERVED_WHERE);
    }
    let sandbox = owner("agents.x-k8s.io/v1beta1", "Sandbox", "e2e-sandbox", &uid);
    leases
        .create(&params, &observed(ns, "e2e-sandbox", Some("sandbox"), Some(sandbox)))
        .await
        .expect("sandcap creates a lease observed from a Sandbox");
    let claim = owner("extensions.agents.x-k8s.io/v1beta1", "SandboxClaim", "e2e-claim", &uid);
    leases
        .create(&params, &observed(ns, "e2e-claim", Some("sandboxclaim"), Some(claim)))
        .await
        .expect("sandcap creates a lease observed from a SandboxClaim");

    // A hand-made lease is not sandcap's to take over or delete.
    let takeover = Patch::Merge(json!({"metadata": {
        "labels": { OBSERVED_FROM_LABEL: "job" },
        "ownerReferences": [job_named(hand_made)],
    }}));
    refused_by_policy("taking over a hand-made lease", leases.patch(hand_made, &patch, &takeover).await, OBSERVED_ONLY);
    refused_by_policy(
        "deleting a hand-made lease",
        leases.delete(hand_made, &DeleteParams::default()).await,
        OBSERVED_ONLY,
    );
    // ...nor an observed lease turned hand-made.
    let release = Patch::Merge(json!({"metadata": {"labels": { OBSERVED_FROM_LABEL: null }}}));
    refused_by_policy(
        "unlabelling an observed lease",
        leases.patch("e2e-observed", &patch, &release).await,
        OBSERVED_ONLY,
    );
    // The lease controller's status write of any lease is a subresource the rule does not match.
    let status = Patch::Merge(json!({"status": {"observedGeneration": 1}}));
    let status_params = PatchParams::default();
    leases.patch_status(hand_made, &status_params, &status).await.expect("sandcap writes a hand-made lease's status");

    for name in ["e2e-observed", "e2e-sandbox", "e2e-claim"] {
        leases.delete(name, &DeleteParams::default()).await.unwrap_or_else(|e| panic!("sandcap deletes {name}: {e}"));
    }
    ok("cleanup", c.kubectl(&["-n", ns, "delete", "job", "e2e-observed"]));
    ok("cleanup", c.kubectl(&["label", "namespace", ns, &format!("{NAMESPACE_LABEL}-")]));
}
