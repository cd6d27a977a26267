//! 100 providers and 10,000 leases (or ten times as many): a cold start until every lease is
//! resolved against a loop of the same status writes, one provider's change, peak RSS, and a quiet
//! restart (see `cluster.rs`, part 3).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use sandcap_core::versions::V1;
use serde_json::{Value, json};

use crate::harness::cluster::{self, Cluster};
use crate::harness::install::{self, Install};
use crate::harness::objects::{explanation, resource};
use crate::harness::waits::eventually;
use crate::support::{Worker, all_true, lease, provider, secret};
use crate::{NS, controllers, providers};

const LEASES_PER_PROVIDER: usize = 100;
/// The lease controller's concurrency: the baseline loop writes as many at once.
const CONCURRENCY: usize = 32;

/// Every lease of the bench, created with bounded concurrency.
async fn create_all(admin: &Client, objects: Vec<Value>) {
    futures::stream::iter(objects)
        .for_each_concurrent(CONCURRENCY, |object| {
            let admin = admin.clone();
            async move {
                let kind = object["kind"].as_str().unwrap().to_string();
                let ns = object["metadata"]["namespace"].as_str().map(String::from);
                let api: Api<DynamicObject> = match &ns {
                    Some(ns) => Api::namespaced_with(admin, ns, &resource(&kind)),
                    None => Api::all_with(admin, &resource(&kind)),
                };
                let object: DynamicObject = serde_json::from_value(object).unwrap();
                api.create(&PostParams::default(), &object).await.expect("create");
            }
        })
        .await;
}

/// `names.len()` status PATCHes, `CONCURRENCY` at a time.
async fn baseline(api: &Api<DynamicObject>, names: &[String], patch: &Patch<Value>, params: PatchParams) -> Duration {
    let started = Instant::now();
    futures::stream::iter(names)
        .for_each_concurrent(CONCURRENCY, |name| {
            let (api, patch, params) = (api.clone(), patch.clone(), params.clone());
            async move {
                api.patch_status(name, &params, &patch).await.expect("patch");
            }
        })
        .await;
    started.elapsed()
}

pub fn lease_reconciles(metrics: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with("sandcap_reconciles_total{kind=\"SandboxLease\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn resolved(admin: &Client, selector: &str, capability: &str, reason: &str) -> usize {
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    let list = api.list(&ListParams::default().labels(selector)).await.expect("list");
    list.items
        .iter()
        .filter(|l| {
            let v = serde_json::to_value(l).unwrap();
            explanation(&v["status"], capability).is_some_and(|(r, _)| r == reason)
        })
        .count()
}

pub async fn controllers_at_scale(c: &Cluster, install: &Install, admin: &Client, status: &Value) {
    let count = providers();
    let worker = Worker::with_methods(&V1.worker_methods());
    let mut objects: Vec<Value> = (0..count).map(|p| provider(&format!("p-{p}"), &worker.url, all_true())).collect();
    objects.push(secret(NS, "creds", "config.json", r#"{"apiToken": "s3cr3t-token-value"}"#, true));
    let from = json!({"configFrom": [{"secretKeyRef": {"name": "creds", "key": "config.json"}}]});
    for p in 0..count {
        for l in 0..LEASES_PER_PROVIDER {
            let spec = if l % 2 == 0 { from.clone() } else { json!({}) };
            let mut lease = lease(NS, &format!("l-{p}-{l}"), &format!("p-{p}"), spec);
            lease["metadata"]["labels"] = json!({"bench/provider": format!("p-{p}")});
            objects.push(lease);
        }
    }
    let started = Instant::now();
    create_all(admin, objects).await;
    println!(
        "created {count} providers and {} leases in {:.1} s",
        count * LEASES_PER_PROVIDER,
        started.elapsed().as_secs_f64()
    );

    // Resolved: every lease pinned and Granted by sandcap (all are: half read a valid
    // `configFrom`), as a watch shows, open from here on, so that the baselines pay for a watcher
    // as sandcap's start does.
    let (granted, watch) = granted_watch(admin).await;

    // Baselines: the same number of status writes, as fast as the apiserver takes them, with
    // sandcap's ServiceAccount token, so that the apiserver's priority and fairness treats them as
    // sandcap's (an admin's requests are exempt from it).
    let as_sandcap = cluster::client_from(&install.kubeconfig).await;
    let api: Api<DynamicObject> = Api::namespaced_with(as_sandcap, NS, &resource("SandboxLease"));
    let names: Vec<String> =
        (0..count).flat_map(|p| (0..LEASES_PER_PROVIDER).map(move |l| format!("l-{p}-{l}"))).collect();
    if count == 100 {
        // Every loop then replaces a status of sandcap's size, as sandcap's cold start does,
        // where the first loop would otherwise write onto leases with no status.
        prime(&api, &names, status).await;
    }
    let before = loops(&api, &names, count, status, "before").await;
    let started = Instant::now();
    let sandcap = controllers(c, install, "bench-controllers", &[]);
    sandcap.ready().await;
    let total = names.len();
    let deadline = Instant::now() + Duration::from_secs(6 * count as u64);
    while granted.load(Ordering::SeqCst) < total {
        assert!(
            Instant::now() < deadline,
            "not every lease was resolved in time:\n{}",
            cluster::tail(&sandcap.log, 20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cold = started.elapsed();
    watch.abort();
    println!(
        "cold start to all {total} leases resolved: {:.2} s ({} reconciles)",
        cold.as_secs_f64(),
        lease_reconciles(&sandcap.metrics().await),
    );

    // One provider's declaration changes: its 100 leases follow.
    let mut changed = provider("p-0", &worker.url, all_true());
    changed["spec"]["environmentDrivers"][0]["sandboxCapabilities"]["persistentProcessSessions"] = json!(false);
    let started = Instant::now();
    install::apply(c, &[changed]);
    while resolved(admin, "bench/provider=p-0", "persistentProcessSessions", "DeclaredFalse").await
        < LEASES_PER_PROVIDER
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "one provider's change to its {LEASES_PER_PROVIDER} leases re-resolved: {:.2} s",
        started.elapsed().as_secs_f64()
    );

    println!("sandcap peak RSS: {:.1} MiB", sandcap.peak_rss() as f64 / 1048576.0);
    drop(sandcap);

    // A restart, then ten probe intervals with nothing changed.
    let by_sandcap = |verb: &str, resource: &str| {
        c.audit()
            .iter()
            .filter(|e| {
                e["verb"] == verb
                    && e["objectRef"]["resource"] == resource
                    && e["user"]["username"].as_str().is_some_and(|u| u.ends_with(":sandcap"))
            })
            .count()
    };
    let (writes, gets) = (by_sandcap("patch", "sandboxleases"), by_sandcap("get", "secrets"));
    let started = Instant::now();
    let sandcap = controllers(c, install, "bench-restart", &[("SANDCAP_PROBE_INTERVAL", "2s")]);
    eventually("the caches listed", Duration::from_secs(300), || async {
        sandcap.log_text().contains("controllers started").then_some(())
    })
    .await;
    let listed = started.elapsed();
    tokio::time::sleep(Duration::from_secs(20)).await;
    println!(
        "a restart (caches listed in {:.2} s), then ten probe intervals (2 s) with nothing changed: {} lease status writes, {} Secret GETs; peak RSS {:.1} MiB",
        listed.as_secs_f64(),
        by_sandcap("patch", "sandboxleases") - writes,
        by_sandcap("get", "secrets") - gets,
        sandcap.peak_rss() as f64 / 1048576.0
    );
    drop(sandcap);

    // The apiserver slows as etcd's history grows: the loops again, after everything sandcap did,
    // and sandcap's cold start against the mean of each loop's two runs, so that neither side gets
    // the fresher apiserver. The target is a ratio to the fastest.
    let after = loops(&api, &names, count, status, "after").await;
    for (name, first) in &before {
        let again = after.iter().find(|(n, _)| n == name).map(|(_, t)| t).expect("each loop ran again");
        let mean = (*first + *again) / 2;
        println!(
            "{name}: {:.2} s before sandcap, {:.2} s after; mean / sandcap's cold start = {:.2} / {:.2} s = {:.2}",
            first.as_secs_f64(),
            again.as_secs_f64(),
            mean.as_secs_f64(),
            cold.as_secs_f64(),
            mean.as_secs_f64() / cold.as_secs_f64()
        );
    }
}

/// Writes `status` to every lease, unmeasured.
async fn prime(api: &Api<DynamicObject>, names: &[String], status: &Value) {
    baseline(api, names, &Patch::Merge(marked(status, "primed")), patch_params()).await;
}

/// `status` with `mark` at the end of its Valid condition's message. Each loop writes its own
/// mark, so that every write changes what the lease holds, as sandcap's does: the apiserver
/// stores nothing for a write that leaves the object as it was, and a loop that wrote the
/// status already there (the priming write's, say) measured no writes at all.
fn marked(status: &Value, mark: &str) -> Value {
    let mut status = status.clone();
    let conditions = status["status"]["conditions"].as_array_mut().expect("conditions");
    let valid = conditions.iter_mut().find(|c| c["type"] == "Valid").expect("a Valid condition");
    valid["message"] = json!(format!("{} {mark}", valid["message"].as_str().unwrap_or_default()));
    status
}

/// The loops' field manager.
fn patch_params() -> PatchParams {
    PatchParams { field_manager: Some("bench".into()), ..PatchParams::default() }
}

/// The baseline loops, each a write of sandcap's `status` (marked with the loop and `run`) to
/// every lease, `CONCURRENCY` at a time: a merge patch (sandcap's write, and the churn part's
/// limit) and a JSON patch that replaces the whole status (sandcap's write before; not at 100,000
/// leases, to keep that run's time). The runs after sandcap take them in the reverse order, so
/// that neither loop always meets the younger etcd. No loop applies: a server-side apply (sandcap's
/// write before that) adds a managed-fields entry of the whole status to every lease, which every
/// later write then carries.
async fn loops(
    api: &Api<DynamicObject>,
    names: &[String],
    providers: usize,
    status: &Value,
    run: &str,
) -> Vec<(&'static str, Duration)> {
    let params = patch_params();
    let mut order = vec![MERGE_LOOP];
    if providers == 100 {
        order.push(JSON_LOOP);
    }
    if run == "after" {
        order.reverse();
    }
    let mut times = Vec::new();
    for name in order {
        let status = marked(status, &format!("{name} {run}"));
        let patch = if name == JSON_LOOP {
            let add = json!([{"op": "add", "path": "/status", "value": status["status"]}]);
            Patch::Json(serde_json::from_value(add).expect("a JSON patch"))
        } else {
            Patch::Merge(status)
        };
        let time = baseline(api, names, &patch, params.clone()).await;
        println!("{name}: {} status writes ({CONCURRENCY} at a time) in {:.2} s", names.len(), time.as_secs_f64());
        times.push((name, time));
    }
    times
}

const MERGE_LOOP: &str = "whole-status merge patch loop";
const JSON_LOOP: &str = "whole-status JSON patch loop";

/// How many leases of the bench a watch shows resolved by sandcap (pinned, with
/// `persistentProcessSessions` Granted); returns once the watch has listed.
async fn granted_watch(admin: &Client) -> (Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    let count = Arc::new(AtomicUsize::new(0));
    let (listed, is_listed) = tokio::sync::oneshot::channel();
    let counter = count.clone();
    let task = tokio::spawn(async move {
        let mut listed = Some(listed);
        let mut granted = std::collections::HashSet::new();
        let mut events = std::pin::pin!(watcher(api, watcher::Config::default().labels("bench/provider")));
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => {
                    let status = serde_json::to_value(&lease).expect("json")["status"].take();
                    let name = lease.metadata.name.unwrap_or_default();
                    // The baselines write sandcap's status without its pin: only sandcap's own
                    // write pins a lease.
                    let on = explanation(&status, "persistentProcessSessions").is_some_and(|(r, _)| r == "Granted");
                    match on && status["pinned"].is_object() {
                        true => granted.insert(name),
                        false => granted.remove(&name),
                    };
                    counter.store(granted.len(), Ordering::SeqCst);
                }
                Ok(watcher::Event::InitDone) => drop(listed.take().map(|l| l.send(()))),
                _ => {}
            }
        }
    });
    is_listed.await.expect("the watch listed");
    (count, task)
}
