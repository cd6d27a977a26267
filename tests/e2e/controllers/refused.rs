//! An observed lease the apiserver refuses (a ResourceQuota that allows no SandboxLease in the
//! namespace): the observer writes it again per name after a delay that doubles from 5 ms, however
//! often its passes run, reports it with a Warning Event on the provider once it was refused
//! three times in a row, and creates the lease once the quota is gone. Run from the workloads
//! scenario, whose sandcap observes and whose provider binds Jobs.

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::harness::cluster::Cluster;
use crate::harness::install;
use crate::harness::objects::{get, resource};
use crate::harness::waits::eventually;
use crate::support::ok;
use crate::support::workloads::{job, namespace, run_labels};

const QUOTA_NS: &str = "paperclip-quota";
const RUN: &str = "01JEF3KB0123456789ABCDEFGH";
/// How long the observer is kept busy: a pass every 200 ms or so, each of which would send the
/// refused create again without the backoff.
const BUSY: Duration = Duration::from_secs(15);

pub async fn a_refused_write_backs_off_and_is_reported(c: &Cluster, admin: &Client, provider: &str) {
    let quota = json!({
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-leases", "namespace": QUOTA_NS},
        "spec": {"hard": {"count/sandboxleases.sandcap.dev": "0"}},
    });
    install::apply(c, &[namespace(QUOTA_NS, true), quota]);
    // No controller-manager here to fill the quota's status: the admin sets it, as its controller would.
    let status = r#"{"status": {"hard": {"count/sandboxleases.sandcap.dev": "0"}, "used": {"count/sandboxleases.sandcap.dev": "0"}}}"#;
    ok(
        "the quota's status",
        c.kubectl(&[
            "patch",
            "resourcequota",
            "no-leases",
            "-n",
            QUOTA_NS,
            "--subresource=status",
            "--type=merge",
            "-p",
            status,
        ]),
    );
    let (name, labels) = run_labels(RUN);
    install::apply(c, &[job(QUOTA_NS, &name, &labels, "registry.example/agent:1", &[], None)]);

    // Keep the observer busy: each annotation of the Job wakes a pass.
    let jobs: Api<Job> = Api::namespaced(admin.clone(), QUOTA_NS);
    let started = Instant::now();
    let mut tick = 0u32;
    while started.elapsed() < BUSY {
        let touch = json!({"metadata": {"annotations": {"e2e/tick": tick.to_string()}}});
        jobs.patch(&name, &PatchParams::default(), &Patch::Merge(touch)).await.expect("the Job annotated");
        tick += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let refused = refused_creates(c, &name);
    println!(
        "workloads: a lease refused by a quota was sent {refused} times in {BUSY:?} of {tick} passes' worth of changes"
    );
    // 5 ms doubling: 13 tries reach 20 s. Without the backoff, one per pass.
    assert!((3..=14).contains(&refused), "{refused} creates in {BUSY:?}");

    let event = eventually("an ObservedLeaseRefused Event", Duration::from_secs(30), || async {
        let api = Api::<kube::api::DynamicObject>::namespaced_with(admin.clone(), "default", &resource("Event"));
        let listed = api.list(&ListParams::default()).await.expect("Events listed");
        let mut all = listed.items.into_iter().map(|e| serde_json::to_value(e).expect("JSON"));
        all.find(|e| e["reason"] == "ObservedLeaseRefused" && e["regarding"]["name"] == provider)
    })
    .await;
    assert!(event["note"].as_str().is_some_and(|n| n.contains(&name) && n.contains("quota")), "{event:#}");

    ok("remove the quota", c.kubectl(&["delete", "resourcequota", "no-leases", "-n", QUOTA_NS]));
    let removed = Instant::now();
    eventually("the lease once the quota is gone", Duration::from_secs(90), || async {
        get(admin, "SandboxLease", Some(QUOTA_NS), &name).await
    })
    .await;
    println!("workloads: the lease created {:.1?} after the quota went", removed.elapsed());
    ok("clean up", c.kubectl(&["delete", "namespace", QUOTA_NS, "--wait=false"]));
}

/// Whether sandcap's log line `line` is one this step makes it write: the refused writes' warnings.
pub fn expected(line: &str) -> bool {
    line.contains("observed lease write failed") && line.contains(&format!("namespace=\"{QUOTA_NS}\""))
}

/// sandcap's creates of lease `name` that the apiserver refused, by its audit log.
fn refused_creates(c: &Cluster, name: &str) -> usize {
    c.audit()
        .iter()
        .filter(|e| {
            e["verb"] == "create"
                && e["stage"] == "ResponseComplete"
                && e["objectRef"]["resource"] == "sandboxleases"
                && e["objectRef"]["namespace"] == QUOTA_NS
                && e["objectRef"]["name"] == name
                && e["responseStatus"]["code"] == 403
                && e["user"]["username"].as_str().is_some_and(|u| u.ends_with(":sandcap"))
        })
        .count()
}
