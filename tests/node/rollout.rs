//! A worker Deployment of three replicas behind a Service, followed pod by pod: a provider applied
//! before its worker, a rolling update to a build without `environmentSyncOut`, the rollback and
//! a scale to zero, each timed against what the lease grants. The figures are printed.

use std::time::{Duration, Instant};

use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};

use crate::node::{Node, eventually};
use crate::scenarios::{WAIT, condition};
use crate::support::{all_true, lease, methods_of, provider};

const WORKERS: &str = "sandbox-system";
const NAME: &str = "rolling-worker";
const LEASE_NS: &str = "team-a";
const DROPPED: &str = "environmentSyncOut";
/// How often the scenario looks at the pods and the lease.
const TICK: Duration = Duration::from_millis(250);

fn deployment(node: &Node, methods: &[&str]) -> Value {
    let labels = json!({"app": NAME});
    let mut template = node.worker_template(&labels, methods);
    let worker = &mut template["spec"]["containers"][0];
    worker["ports"][0]["name"] = json!("rpc");
    worker["readinessProbe"] = json!({"tcpSocket": {"port": 8080}, "periodSeconds": 1});
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": WORKERS},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": labels},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": template
        }
    })
}

/// What one look saw: Ready pods lacking the method, pods with it, and whether the lease grants
/// `nativeSyncOut`. The lease is read before and after the pods, and counts as granting only when
/// both reads say so: the reads are not one snapshot, and under load a grant that follows a pod
/// going away (a rollback) or a pod that comes Ready after a grant (an update) would otherwise
/// look like a grant beside that pod. Lacking pods only go during the rollback and only come
/// during the update, so a pod seen Ready between two granting reads was Ready beside a grant.
struct Look {
    ready_lacking: usize,
    with_it: usize,
    granted: bool,
    at: Instant,
}

fn look(node: &Node) -> Look {
    let granted = || {
        let lease = node.kubectl_json(&["get", "sbl", "-n", LEASE_NS, "rolling-run"]);
        lease["status"]["capabilities"]["nativeSyncOut"] == true
    };
    let before = granted();
    let pods = node.kubectl_json(&["get", "pods", "-n", WORKERS, "-l", &format!("app={NAME}")]);
    let (mut ready_lacking, mut with_it) = (0, 0);
    for pod in pods["items"].as_array().into_iter().flatten() {
        let has = pod["spec"]["containers"][0]["args"].to_string().contains(DROPPED);
        let ready = pod["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
        ready_lacking += usize::from(ready && !has);
        with_it += usize::from(has);
    }
    let granted = before && granted();
    Look { ready_lacking, with_it, granted, at: Instant::now() }
}

/// Looks every [`TICK`] until `done` has held for `settle`, and returns every look.
fn watch(node: &Node, settle: Duration, done: impl Fn(&Look) -> bool) -> Vec<Look> {
    let mut looks: Vec<Look> = Vec::new();
    let deadline = Instant::now() + WAIT;
    let mut since: Option<Instant> = None;
    loop {
        let now = look(node);
        since = if done(&now) { since.or(Some(now.at)) } else { None };
        looks.push(now);
        if since.is_some_and(|s| s.elapsed() >= settle) {
            return looks;
        }
        assert!(Instant::now() < deadline, "not settled within {WAIT:?}");
        std::thread::sleep(TICK);
    }
}

/// Seconds the lease granted the method while a Ready pod lacked it, and how often the grant changed.
fn wrongly_granted(looks: &[Look]) -> (f64, usize) {
    let wrong = looks.windows(2).filter(|w| w[0].granted && w[0].ready_lacking > 0);
    let seconds = wrong.map(|w| (w[1].at - w[0].at).as_secs_f64()).sum::<f64>().max(0.0);
    let changes = looks.windows(2).filter(|w| w[0].granted != w[1].granted).count();
    (seconds, changes)
}

/// The first look at which `when` holds, as seconds after `from`.
fn first(looks: &[Look], from: Instant, when: impl Fn(&Look) -> bool) -> Option<f64> {
    looks.iter().find(|l| when(l)).map(|l| l.at.saturating_duration_since(from).as_secs_f64())
}

pub fn a_worker_rollout_is_followed_pod_by_pod(node: &Node) {
    let full = methods_of(ContractVersion::V1);
    let lacking: Vec<&str> = full.iter().copied().filter(|m| *m != DROPPED).collect();
    let mut rolling = provider("rolling", "unused", all_true());
    rolling["spec"]["worker"] = json!({"service": {"namespace": WORKERS, "name": NAME, "port": 80, "path": "/rpc"}});
    node.apply(&[
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": WORKERS}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NS}}),
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": NAME, "namespace": WORKERS},
            "spec": {"selector": {"app": NAME}, "ports": [{"port": 80, "targetPort": "rpc"}]}
        }),
        rolling,
        lease(LEASE_NS, "rolling-run", "rolling", json!({})),
    ]);
    // Applied 30 s before its worker, as `kubectl apply -f dir/` may.
    std::thread::sleep(Duration::from_secs(30));
    node.apply(&[deployment(node, &full)]);
    node.ok(&["kubectl", "rollout", "status", &format!("deployment/{NAME}"), "-n", WORKERS, "--timeout", "3m"]);
    let pods_ready = Instant::now();
    condition(node, &["sbp", "rolling"], "Ready", "True");
    let ready_after = pods_ready.elapsed().as_secs_f64();
    eventually("the lease grants nativeSyncOut", WAIT, || look(node).granted.then_some(()));
    println!("rollout: the provider applied 30 s early was Ready {ready_after:.1} s after its worker's pods");
    assert!(ready_after <= 20.0, "Ready {ready_after:.1} s after the pods");

    // The rolling update to the build without the method.
    let started = Instant::now();
    node.apply(&[deployment(node, &lacking)]);
    let looks = watch(node, Duration::from_secs(10), |l| l.with_it == 0 && !l.granted);
    let (wrong, changes) = wrongly_granted(&looks);
    let ended = looks.iter().find(|l| l.with_it == 0).map(|l| l.at).expect("the rollout ended");
    // The last look that still granted it, after the rollout's end (0 if none did).
    let off =
        looks.iter().rev().find(|l| l.granted).map_or(0.0, |l| l.at.saturating_duration_since(ended).as_secs_f64());
    println!(
        "rollout: granted {wrong:.1} s in all while a Ready pod lacked {DROPPED}; off {off:.1} s after the rollout's \
         end; {changes} change(s) of the grant; the rollout took {:.1} s",
        (ended - started).as_secs_f64()
    );
    assert!(wrong <= 3.0, "granted {wrong:.1} s while a Ready pod lacked the method");
    assert!(off <= 10.0 && changes <= 1, "off {off:.1} s after the end, {changes} changes");

    // The rollback: granted again once the last pod without the method has gone, never before.
    let started = Instant::now();
    node.ok(&["kubectl", "rollout", "undo", &format!("deployment/{NAME}"), "-n", WORKERS]);
    let looks = watch(node, Duration::from_secs(2), |l| l.granted);
    let (wrong, _) = wrongly_granted(&looks);
    let last_lacking_gone = looks.iter().rev().find(|l| l.ready_lacking > 0).map_or(started, |l| l.at);
    let on = first(&looks, last_lacking_gone, |l| l.granted).expect("granted again");
    println!(
        "rollout: rolled back, granted again {on:.1} s after the last Ready pod without {DROPPED}; {wrong:.1} s granted early"
    );
    assert!(wrong == 0.0 && on <= 20.0, "granted {wrong:.1} s early, {on:.1} s after the last one");

    // Scaled to zero: nothing is granted.
    let started = Instant::now();
    node.ok(&["kubectl", "scale", &format!("deployment/{NAME}"), "-n", WORKERS, "--replicas", "0"]);
    eventually("the lease grants nothing", WAIT, || {
        let lease = node.kubectl_json(&["get", "sbl", "-n", LEASE_NS, "rolling-run"]);
        let capabilities = lease["status"]["capabilities"].as_object()?.clone();
        capabilities.values().all(|v| v == false).then_some(())
    });
    let nothing = started.elapsed().as_secs_f64();
    println!("rollout: scaled to zero, nothing granted {nothing:.1} s later");
    assert!(nothing <= 20.0, "{nothing:.1} s");
    node.ok(&["kubectl", "delete", "sbl", "-n", LEASE_NS, "rolling-run", "--wait=false"]);
    node.ok(&["kubectl", "delete", "sbp", "rolling", "--wait=false"]);
    node.ok(&["kubectl", "delete", "deployment,service", NAME, "-n", WORKERS, "--wait=false"]);
}
