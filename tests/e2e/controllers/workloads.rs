//! The observer (issue 43, "Leases from the workloads that run"): a provider's `spec.workloads`
//! binds the Jobs and agent-sandbox Sandboxes that the host's Kubernetes plugin labels, in
//! namespaces opted in, and each gets an observed SandboxLease kept by sandcap: its fields, its
//! resolution, an admin's edit reverted, relabelled or deleted workloads and a namespace opted out
//! losing theirs, a name taken by hand left alone, `WorkloadsObserved` (the Sandbox kind served
//! late), and a restart that writes nothing.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, ListParams};
use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};

use crate::harness::binary::Sandcap;
use crate::harness::cluster::Cluster;
use crate::harness::install::{self, Install, path_str};
use crate::harness::objects::{condition, get, resource};
use crate::harness::requests::lease_writes;
use crate::harness::waits::{WAIT, eventually, lease_reason};
use crate::support::workloads::{
    SANDBOX_CRD, agent_sandbox_crd, bindings, job, namespace, observed_spec, run_labels, sandbox,
};
use crate::support::{Worker, all_true, lease, ok, provider};

const NS: &str = "paperclip-acme";
const OTHER: &str = "paperclip-elsewhere";
const PROVIDER: &str = "e2e-paperclip";
/// The runs, by ULID: a Job and a Sandbox observed, a Job without the plugin's label, a Sandbox
/// in a namespace not opted in, and a Job whose name a hand-made lease already has.
const JOB: &str = "01JEF3K6M8X9V2N4P7Q5R0T1WZ";
const SANDBOX: &str = "01JEF3K7A2B3C4D5E6F7G8H9JK";
const UNLABELLED: &str = "01JEF3K8QRSTVWXYZ0123456AB";
const ELSEWHERE: &str = "01JEF3K9CDEFGHJKMNPQRSTVWX";
const TAKEN: &str = "01JEF3KAYZ0123456789ABCDEF";
/// Controllers only (no webhook registered here), rediscovering the served kinds every 2 s.
const OBSERVING: [(&str, &str); 2] = [("SANDCAP_CONTROLLERS_ONLY", "true"), ("SANDCAP_DISCOVERY_INTERVAL", "2s")];

fn name(ulid: &str) -> String {
    run_labels(ulid).0
}

pub async fn workloads_get_observed_leases_kept_by_sandcap(c: Arc<Cluster>) {
    let started = std::time::Instant::now();
    install::crds(&c);
    let install = Install::chart(&c, json!({})).await;
    install::apply(&c, &[namespace(NS, true), namespace(OTHER, false)]);
    let worker = Worker::of_contract(ContractVersion::V1);
    let sandcap = Sandcap::start(&c, &install, "observer", &OBSERVING);
    let admin = c.admin().await;

    the_sandbox_kind_served_late(&c, &admin, &worker).await;
    let taken = workloads_of_the_plugin(&c, &admin).await;
    let (job_lease, _) = leases_with_their_workloads_fields(&admin).await;
    they_resolve(&admin).await;
    an_edit_is_reverted(&c, &admin, &job_lease).await;
    let sandcap = a_restart_writes_nothing(&c, &install, &admin, sandcap).await;
    none_for_the_others(&admin).await;
    gone_with_their_workloads(&c, &admin, &sandcap).await;
    a_namespace_opted_in_and_out(&c, &admin).await;
    the_taken_name_was_never_written(&c, &admin, &taken).await;
    super::refused::a_refused_write_backs_off_and_is_reported(&c, &admin, PROVIDER).await;
    super::claims::a_claim_is_the_run(&c, &admin, &worker, NS, PROVIDER).await;
    println!("workloads: the scenario took {:.1?}", started.elapsed());

    // The quota's refusals are warned of, as they should be; nothing else is.
    let problems: Vec<String> = sandcap.problems().into_iter().filter(|p| !super::refused::expected(p)).collect();
    assert!(problems.is_empty(), "sandcap logged:\n{}", problems.join("\n"));
    drop(sandcap);
    for (kind, namespace) in [("jobs", NS), ("jobs", OTHER), ("sandboxes", NS), ("sandboxes", OTHER), ("sbl", NS)] {
        ok("clean up", c.kubectl(&["delete", kind, "--all", "-n", namespace, "--wait=false"]));
    }
    ok("clean up", c.kubectl(&["delete", "sbp", PROVIDER, "--wait=false"]));
    ok("clean up", c.kubectl(&["delete", "crd", SANDBOX_CRD, "--wait=false"]));
}

/// Waits until the provider's `WorkloadsObserved` has `status` and `reason`.
async fn workloads_observed(admin: &Client, status: &str, reason: &str) -> Value {
    eventually(&format!("{PROVIDER}: WorkloadsObserved {status} {reason}"), WAIT, || async {
        let provider = get(admin, "SandboxProvider", None, PROVIDER).await?;
        let observed = condition(&provider["status"], "WorkloadsObserved")?;
        (observed["status"] == status && observed["reason"] == reason).then(|| observed.clone())
    })
    .await
}

/// The provider binds Jobs and Sandboxes before agent-sandbox is installed: `KindNotServed`,
/// naming the kind; its CRD installed, sandcap's next discovery finds it: `Observing`.
async fn the_sandbox_kind_served_late(c: &Cluster, admin: &Client, worker: &Worker) {
    let mut paperclip = provider(PROVIDER, &worker.url, all_true());
    paperclip["spec"]["workloads"] = bindings(&["Job", "Sandbox"]);
    install::apply(c, &[paperclip]);
    let not_served = workloads_observed(admin, "False", "KindNotServed").await;
    let message = not_served["message"].as_str().unwrap_or_default();
    assert!(message.contains("Sandbox") || message.contains("sandboxes"), "{not_served:#}");
    let crd = agent_sandbox_crd();
    ok("install agent-sandbox's CRD", c.kubectl(&["apply", "--server-side", "-f", path_str(&crd)]));
    // Polled: `kubectl wait` right after the create fails on a CRD without conditions yet.
    let established = r#"jsonpath={.status.conditions[?(@.type=="Established")].status}"#;
    eventually("the Sandbox CRD established", WAIT, || async {
        let said = c.kubectl(&["get", "crd", SANDBOX_CRD, "-o", established]);
        (String::from_utf8_lossy(&said.stdout) == "True").then_some(())
    })
    .await;
    let started = std::time::Instant::now();
    workloads_observed(admin, "True", "Observing").await;
    println!("workloads: the Sandbox kind observed {:.1?} after its CRD was established", started.elapsed());
}

/// What the plugin creates, and a lease made by hand under the name of a run's Job (before the
/// Job: the name is the hand-made lease's). Returns that lease as stored.
async fn workloads_of_the_plugin(c: &Cluster, admin: &Client) -> Value {
    install::apply(c, &[lease(NS, &name(TAKEN), PROVIDER, json!({}))]);
    let taken = get(admin, "SandboxLease", Some(NS), &name(TAKEN)).await.expect("the hand-made lease");
    let image = "registry.example/agent:1";
    let (unlabelled, mut bare) = run_labels(UNLABELLED);
    bare.as_object_mut().expect("labels").remove(crate::support::workloads::MANAGED_BY.0);
    let objects = [
        job(NS, &name(JOB), &run_labels(JOB).1, image, &[], None),
        sandbox(NS, &name(SANDBOX), &run_labels(SANDBOX).1),
        job(NS, &unlabelled, &bare, image, &[], None),
        sandbox(OTHER, &name(ELSEWHERE), &run_labels(ELSEWHERE).1),
        job(NS, &name(TAKEN), &run_labels(TAKEN).1, image, &[], None),
    ];
    install::apply(c, &objects);
    let event = eventually("a LeaseNameTaken Event", WAIT, || async {
        events(admin, &name(TAKEN), "LeaseNameTaken").await.pop()
    })
    .await;
    assert_eq!(event["regarding"]["kind"], "SandboxLease", "{event:#}");
    assert_eq!(event["type"], "Warning", "{event:#}");
    taken
}

/// The hand-made lease under a run's name: never written by the observer, its spec, labels and
/// owners as its author left them.
async fn the_taken_name_was_never_written(c: &Cluster, admin: &Client, taken: &Value) {
    let name = name(TAKEN);
    let now = get(admin, "SandboxLease", Some(NS), &name).await.expect("the hand-made lease");
    for field in ["labels", "ownerReferences"] {
        assert_eq!(now["metadata"][field], taken["metadata"][field], "{now:#}");
    }
    assert_eq!(now["spec"], taken["spec"], "{now:#}");
    let writes = lease_writes(c, NS);
    assert!(!writes.iter().any(|w| w.ends_with(&format!(" {name}"))), "{writes:?}");
}

/// The Events about `name` in NS with `reason`.
async fn events(admin: &Client, name: &str, reason: &str) -> Vec<Value> {
    let api = Api::<kube::api::DynamicObject>::namespaced_with(admin.clone(), NS, &resource("Event"));
    let listed = api.list(&ListParams::default()).await.expect("Events listed");
    let all = listed.items.into_iter().map(|e| serde_json::to_value(e).expect("JSON"));
    all.filter(|e| e["reason"] == reason && e["regarding"]["name"] == name).collect()
}

/// Each observed lease: the workload's name and namespace, the `observed-from` label, one owner
/// reference to the workload (neither controller nor blocking), the spec the binding gives, and
/// `sandcap-observer` the one writer of its spec. Returns the Job's and the Sandbox's leases.
async fn leases_with_their_workloads_fields(admin: &Client) -> (Value, Value) {
    let mut found = Vec::new();
    for (ulid, kind, resource, label, api_version) in [
        (JOB, "Job", "jobs", "job", "batch/v1"),
        (SANDBOX, "Sandbox", "sandboxes", "sandbox", crate::support::workloads::SANDBOX_API_VERSION),
    ] {
        let name = name(ulid);
        let lease = eventually(&format!("the observed lease {name}"), WAIT, || async {
            get(admin, "SandboxLease", Some(NS), &name).await
        })
        .await;
        let uid = workload_uid(admin, resource, &name).await;
        let meta = &lease["metadata"];
        assert_eq!(meta["labels"], json!({"sandcap.dev/observed-from": label}), "{lease:#}");
        let owner = json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
                            "controller": false, "blockOwnerDeletion": false}]);
        assert_eq!(meta["ownerReferences"], owner, "{lease:#}");
        assert_eq!(lease["spec"], observed_spec(PROVIDER, kind, &name), "{lease:#}");
        let writers: Vec<&Value> = meta["managedFields"]
            .as_array()
            .expect("managedFields")
            .iter()
            .filter(|m| m["fieldsV1"].get("f:spec").is_some())
            .collect();
        assert!(writers.len() == 1 && writers[0]["manager"] == "sandcap-observer", "{:#}", meta["managedFields"]);
        found.push(lease);
    }
    let sandbox = found.pop().expect("two");
    (found.pop().expect("two"), sandbox)
}

/// The uid of the workload `resource`/`name` in NS, as stored.
async fn workload_uid(admin: &Client, resource: &str, name: &str) -> String {
    let (group, version, kind) = match resource {
        "jobs" => ("batch", "v1", "Job"),
        _ => ("agents.x-k8s.io", "v1beta1", "Sandbox"),
    };
    let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
    let api =
        Api::<kube::api::DynamicObject>::namespaced_with(admin.clone(), NS, &kube::core::ApiResource::from_gvk(&gvk));
    api.get(name).await.expect("the workload").metadata.uid.expect("a uid")
}

/// The Job's lease is Job-backed (native sync off); the Sandbox's narrows no sync.
async fn they_resolve(admin: &Client) {
    for capability in ["nativeSyncIn", "nativeSyncOut"] {
        lease_reason(admin, NS, &name(JOB), capability, "NarrowedByJobBackend").await;
        lease_reason(admin, NS, &name(SANDBOX), capability, "Granted").await;
    }
    lease_reason(admin, NS, &name(SANDBOX), "reusableLeases", "NarrowedByLeasePolicy").await;
}

/// The Job without the plugin's label and the Sandbox of a namespace not opted in got none (they
/// were created with the others, two sandcap processes ago).
async fn none_for_the_others(admin: &Client) {
    assert_eq!(get(admin, "SandboxLease", Some(NS), &name(UNLABELLED)).await, None);
    assert_eq!(get(admin, "SandboxLease", Some(OTHER), &name(ELSEWHERE)).await, None);
}

/// An admin's edit of an observed lease's spec is reverted, the key it added removed.
async fn an_edit_is_reverted(c: &Cluster, admin: &Client, stored: &Value) {
    let name = name(JOB);
    let edit = r#"{"spec": {"backend": "pod", "nativeFileSyncUnsupported": true}}"#;
    ok("edit the observed lease", c.kubectl(&["-n", NS, "patch", "sbl", &name, "--type=merge", "-p", edit]));
    let reverted = eventually("the edit reverted", WAIT, || async {
        let lease = get(admin, "SandboxLease", Some(NS), &name).await?;
        (lease["spec"] == stored["spec"]
            && lease["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"])
            .then_some(lease)
    })
    .await;
    assert_eq!(reverted["metadata"]["uid"], stored["metadata"]["uid"], "patched in place, not replaced");
    lease_reason(admin, NS, &name, "nativeSyncIn", "NarrowedByJobBackend").await;
}

/// Restarted, sandcap finds every lease as it should be and writes none: the same
/// resourceVersions, no lease write in the audit log, its writes counter at zero. Returns the
/// restarted process.
async fn a_restart_writes_nothing(c: &Cluster, install: &Install, admin: &Client, mut sandcap: Sandcap) -> Sandcap {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (before, writes) = (versions(admin).await, lease_writes(c, NS));
    // The quota's refusals are warned of, as they should be; nothing else is.
    let problems: Vec<String> = sandcap.problems().into_iter().filter(|p| !super::refused::expected(p)).collect();
    assert!(problems.is_empty(), "sandcap logged:\n{}", problems.join("\n"));
    sandcap.signal(libc::SIGTERM);
    assert!(sandcap.wait_exit(Duration::from_secs(20)).is_some_and(|s| s.success()), "{}", sandcap.log_text());
    let sandcap = Sandcap::start(c, install, "observer-again", &OBSERVING);
    sandcap.ready().await;
    eventually("the restarted sandcap leads", WAIT, || async {
        (crate::harness::objects::holder(admin).await.as_deref() == Some("observer-again")).then_some(())
    })
    .await;
    workloads_observed(admin, "True", "Observing").await;
    // Its first passes (the counters below show, once it has written, that it wrote nothing else).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(versions(admin).await, before, "a lease was written");
    assert_eq!(lease_writes(c, NS), writes, "the audit log shows a lease write");
    assert_eq!(observer_writes(&sandcap).await, 0.0, "{}", sandcap.metrics().await);
    sandcap
}

/// The resourceVersion of every lease in NS, by name.
async fn versions(admin: &Client) -> Vec<(String, String)> {
    let api = Api::<kube::api::DynamicObject>::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    let listed = api.list(&ListParams::default()).await.expect("leases listed");
    let mut versions: Vec<(String, String)> = listed
        .items
        .iter()
        .map(|l| (l.metadata.name.clone().unwrap_or_default(), l.metadata.resource_version.clone().unwrap_or_default()))
        .collect();
    versions.sort();
    versions
}

/// `sandcap_observer_writes_total`, summed over its operations (0 before any write).
async fn observer_writes(sandcap: &Sandcap) -> f64 {
    let metrics = sandcap.metrics().await;
    let samples = metrics.lines().filter(|l| l.starts_with("sandcap_observer_writes_total"));
    samples.filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok()).sum()
}

/// The Job relabelled out of every binding loses its lease; the Sandbox deleted loses its (no
/// garbage collector runs here: sandcap deletes it). Exactly those two deletes.
async fn gone_with_their_workloads(c: &Cluster, admin: &Client, sandcap: &Sandcap) {
    let writes = lease_writes(c, NS).len();
    let relabel = r#"{"metadata": {"labels": {"paperclip.io/managed-by": "someone-else"}}}"#;
    ok("relabel the Job", c.kubectl(&["-n", NS, "patch", "job", &name(JOB), "--type=merge", "-p", relabel]));
    ok("delete the Sandbox", c.kubectl(&["-n", NS, "delete", "sandbox", &name(SANDBOX), "--wait=false"]));
    for gone in [name(JOB), name(SANDBOX)] {
        eventually(&format!("lease {gone} deleted"), WAIT, || async {
            get(admin, "SandboxLease", Some(NS), &gone).await.is_none().then_some(())
        })
        .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut deletes = lease_writes(c, NS).split_off(writes);
    deletes.sort();
    assert_eq!(deletes, [format!("delete {}", name(JOB)), format!("delete {}", name(SANDBOX))]);
    let metrics = sandcap.metrics().await;
    let deleted = crate::support::sample(&metrics, "sandcap_observer_writes_total{operation=\"delete\"}");
    assert_eq!((deleted, observer_writes(sandcap).await), (Some(2.0), 2.0), "{metrics}");
}

/// The namespace not opted in, labelled: its Sandbox gets a lease; un-labelled: it loses it.
async fn a_namespace_opted_in_and_out(c: &Cluster, admin: &Client) {
    let name = name(ELSEWHERE);
    let writes = lease_writes(c, OTHER).len();
    install::apply(c, &[namespace(OTHER, true)]);
    let lease = eventually("a lease once the namespace opts in", WAIT, || async {
        get(admin, "SandboxLease", Some(OTHER), &name).await
    })
    .await;
    assert_eq!(lease["spec"], observed_spec(PROVIDER, "Sandbox", &name), "{lease:#}");
    ok("opt out", c.kubectl(&["label", "namespace", OTHER, "sandcap.dev/workloads-"]));
    eventually("the lease gone once the namespace opts out", WAIT, || async {
        get(admin, "SandboxLease", Some(OTHER), &name).await.is_none().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(lease_writes(c, OTHER).split_off(writes), [format!("create {name}"), format!("delete {name}")]);
}
