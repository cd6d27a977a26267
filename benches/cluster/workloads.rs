//! Observed leases at scale: 10,000 Jobs in 10 namespaces opted in, and 1,000 labelled Jobs in a
//! namespace that is not (they must cost nothing). A cold start until a watch shows every Job's
//! observed lease resolved, against the same start with 10,000 hand-made leases of the same names
//! and spec (no observer work), run before the Jobs exist and again at the end with the namespaces
//! opted out (the ratio is to the mean of the two); the peak RSS of each and the difference per
//! workload; 100 new Jobs at 50 a second, each until its lease is resolved; a restart with nothing
//! changed, which must write no lease (see `cluster.rs`, part 4). No controller-manager runs
//! here, so the Jobs never start a pod: only their metadata matters to the observer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;
use sandcap_core::versions::V1;
use sandcap_core::workloads::{NAMESPACE_ENABLED, NAMESPACE_LABEL, OBSERVED_FROM_LABEL};
use serde_json::{Value, json};

use crate::churn::is_resolved;
use crate::harness::binary::Sandcap;
use crate::harness::cluster::{self, Cluster};
use crate::harness::install::{self, Install};
use crate::harness::objects::resource;
use crate::harness::waits::eventually;
use crate::scale::lease_reconciles;
use crate::support::{self, Worker, all_true, provider};
use crate::{NS, controllers, ms, quantile};

const NAMESPACES: usize = 10;
const PER_NAMESPACE: usize = 1000;
const WORKLOADS: usize = NAMESPACES * PER_NAMESPACE;
/// A namespace not opted in, and its labelled Jobs.
const OFF_NAMESPACE: &str = "bench-off";
const OFF: usize = 1000;
/// New Jobs while sandcap runs, and their rate a second.
const CHURN: usize = 100;
const CHURN_RATE: f64 = 50.0;
/// Creates at once, as the scale part creates its leases.
const CONCURRENCY: usize = 32;
const PROVIDER: &str = "observing";
/// The label the provider's binding selects: every Job of the bench carries it.
const SELECTED: &str = "bench/workload";
/// The label of the baseline's hand-made leases.
const HAND_MADE: &str = "bench/hand-made";
const WAIT: Duration = Duration::from_secs(600);

fn namespace(i: usize) -> String {
    format!("bench-w{i}")
}

/// The (namespace, name) of every Job in the namespaces opted in.
fn names() -> impl Iterator<Item = (String, String)> {
    (0..NAMESPACES).flat_map(|n| (0..PER_NAMESPACE).map(move |j| (namespace(n), format!("job-{j}"))))
}

/// A Job the binding selects; without a controller-manager it stays as created.
fn job(namespace: &str, name: &str) -> Value {
    let pod = json!({"restartPolicy": "Never", "containers": [{"name": "agent", "image": "registry.example/agent:1"}]});
    let metadata = json!({"name": name, "namespace": namespace, "labels": {SELECTED: "yes"}});
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": {"template": {"spec": pod}}})
}

/// A hand-made lease of Job `name`'s name and with the spec the observer gives it (no owner).
fn hand_made(namespace: &str, name: &str) -> Value {
    let workload = json!({"apiVersion": "batch/v1", "kind": "Job", "name": name});
    let spec = json!({"policy": "Ephemeral", "backend": "job", "workloadRef": workload});
    let mut lease = support::lease(namespace, name, PROVIDER, spec);
    lease["metadata"]["labels"] = json!({HAND_MADE: "true"});
    lease
}

fn api_of(admin: &Client, object: &Value) -> Api<DynamicObject> {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().expect("kind");
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(admin.clone(), ns, &resource),
        None => Api::all_with(admin.clone(), &resource),
    }
}

/// Creates `object` as admin.
async fn create(admin: &Client, object: Value) {
    let api = api_of(admin, &object);
    let object: DynamicObject = serde_json::from_value(object).expect("an object");
    api.create(&PostParams::default(), &object).await.expect("create");
}

/// Creates `objects` as admin, `CONCURRENCY` at a time.
async fn create_all(admin: &Client, objects: Vec<Value>) {
    futures::stream::iter(objects).for_each_concurrent(CONCURRENCY, |object| create(admin, object)).await;
}

/// Deletes the leases `selector` selects in the namespaces opted in (or once opted in).
async fn delete_leases(admin: &Client, selector: &str) {
    for n in 0..NAMESPACES {
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &namespace(n), &resource("SandboxLease"));
        api.delete_collection(&DeleteParams::default(), &ListParams::default().labels(selector)).await.expect("delete");
    }
}

/// Labels the namespaces opted in, or takes the label off (the apply owns it).
fn opt_in(c: &Cluster, enabled: bool) {
    let labels = if enabled { json!({NAMESPACE_LABEL: NAMESPACE_ENABLED}) } else { json!({}) };
    let namespaces: Vec<Value> = (0..NAMESPACES)
        .map(|n| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace(n), "labels": labels}}))
        .collect();
    install::apply(c, &namespaces);
}

/// A watch of the leases `selector` selects, in every namespace: when it first showed each one
/// resolved (the `Resolved` condition of its generation, as the churn part reads it).
struct Resolved {
    seen: Arc<Mutex<HashMap<(String, String), Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Resolved {
    /// Returns once the watch has listed.
    async fn watch(admin: &Client, selector: &str) -> Resolved {
        let api: Api<DynamicObject> = Api::all_with(admin.clone(), &resource("SandboxLease"));
        let seen: Arc<Mutex<HashMap<(String, String), Instant>>> = Arc::default();
        let (listed, is_listed) = tokio::sync::oneshot::channel();
        let (record, config) = (seen.clone(), watcher::Config::default().labels(selector));
        let task = tokio::spawn(async move {
            let mut listed = Some(listed);
            let mut events = std::pin::pin!(watcher(api, config));
            while let Some(event) = events.next().await {
                let at = Instant::now();
                match event {
                    Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease))
                        if is_resolved(&serde_json::to_value(&lease).expect("json")) =>
                    {
                        let name = lease.metadata.name.unwrap_or_default();
                        let key = (lease.metadata.namespace.unwrap_or_default(), name);
                        record.lock().unwrap().entry(key).or_insert(at);
                    }
                    Ok(watcher::Event::InitDone) => drop(listed.take().map(|l| l.send(()))),
                    _ => {}
                }
            }
        });
        is_listed.await.expect("the watch listed");
        Resolved { seen, task }
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    fn at(&self, namespace: &str, name: &str) -> Option<Instant> {
        self.seen.lock().unwrap().get(&(namespace.to_string(), name.to_string())).copied()
    }

    /// Waits until `count` leases are resolved.
    async fn until(&self, count: usize, sandcap: &Sandcap) {
        let deadline = Instant::now() + WAIT;
        while self.count() < count {
            assert!(
                Instant::now() < deadline,
                "{} of {count} leases resolved in time:\n{}",
                self.count(),
                cluster::tail(&sandcap.log, 20)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Resolved {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A cold start of sandcap `name` until the watch of `selector` shows `WORKLOADS` leases
/// resolved: the time from the start, sandcap still running, and the watch still open.
async fn cold_start(
    c: &Cluster,
    install: &Install,
    admin: &Client,
    name: &str,
    selector: &str,
) -> (Duration, Sandcap, Resolved) {
    let watch = Resolved::watch(admin, selector).await;
    let started = Instant::now();
    let sandcap = controllers(c, install, name, &[]);
    watch.until(WORKLOADS, &sandcap).await;
    (started.elapsed(), sandcap, watch)
}

/// The baseline: 10,000 hand-made leases of the Jobs' names and spec, and a cold start until all
/// are resolved; then sandcap stops and the leases go. Its time and peak RSS.
async fn hand_made_start(c: &Cluster, install: &Install, admin: &Client, run: &str) -> (Duration, u64) {
    create_all(admin, names().map(|(ns, name)| hand_made(&ns, &name)).collect()).await;
    let (time, sandcap, _watch) = cold_start(c, install, admin, &format!("bench-hand-made-{run}"), HAND_MADE).await;
    let rss = sandcap.peak_rss();
    println!(
        "hand-made leases ({run}): cold start to all {WORKLOADS} resolved {:.2} s ({} reconciles), peak RSS {}",
        time.as_secs_f64(),
        lease_reconciles(&sandcap.metrics().await),
        mib(rss)
    );
    drop(sandcap);
    delete_leases(admin, HAND_MADE).await;
    (time, rss)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

fn metric(metrics: &str, name: &str) -> u64 {
    support::sample(metrics, name).unwrap_or(0.0) as u64
}

fn observer_writes(metrics: &str) -> [u64; 3] {
    ["create", "update", "delete"]
        .map(|op| metric(metrics, &format!("sandcap_observer_writes_total{{operation=\"{op}\"}}")))
}

pub async fn observed_at_scale(c: &Cluster, install: &Install, admin: &Client) {
    // Every start here would list what the parts before left (the scale part's 10,000 leases).
    let leases: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    leases.delete_collection(&DeleteParams::default(), &ListParams::default()).await.expect("delete");
    let providers: Api<DynamicObject> = Api::all_with(admin.clone(), &resource("SandboxProvider"));
    providers.delete_collection(&DeleteParams::default(), &ListParams::default()).await.expect("delete");
    let worker = Worker::with_methods(&V1.worker_methods());
    let mut observing = provider(PROVIDER, &worker.url, all_true());
    let binding = json!({"kind": "Job", "selector": {"matchLabels": {SELECTED: "yes"}}, "driverKey": "kubernetes"});
    observing["spec"]["workloads"] = json!([binding]);
    install::apply(c, &[observing]);
    let mut all: Vec<String> = (0..NAMESPACES).map(namespace).collect();
    all.push(OFF_NAMESPACE.to_string());
    install::namespaces(c, &all.iter().map(String::as_str).collect::<Vec<_>>());

    let before = hand_made_start(c, install, admin, "before").await;

    let started = Instant::now();
    let jobs = names().map(|(ns, name)| job(&ns, &name));
    create_all(admin, jobs.chain((0..OFF).map(|j| job(OFF_NAMESPACE, &format!("job-{j}")))).collect()).await;
    println!(
        "created {WORKLOADS} Jobs in {NAMESPACES} namespaces and {OFF} in {OFF_NAMESPACE} (not opted in) in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    opt_in(c, true);
    let selector = format!("{OBSERVED_FROM_LABEL}=job");
    let (observed, sandcap, watch) = cold_start(c, install, admin, "bench-observer", &selector).await;
    let rss = sandcap.peak_rss();
    let metrics = sandcap.metrics().await;
    let off: Api<DynamicObject> = Api::namespaced_with(admin.clone(), OFF_NAMESPACE, &resource("SandboxLease"));
    let off = off.list(&ListParams::default()).await.expect("list").items.len();
    let [creates, updates, deletes] = observer_writes(&metrics);
    println!(
        "observed leases: cold start to all {WORKLOADS} resolved {:.2} s (the observer's writes: {creates} creates, {updates} updates, {deletes} deletes; {} reconciles; {} Jobs observed); leases in {OFF_NAMESPACE}: {off}; peak RSS {}",
        observed.as_secs_f64(),
        lease_reconciles(&metrics),
        metric(&metrics, "sandcap_observed_workloads{kind=\"Job\"}"),
        mib(rss)
    );
    churn(admin, &watch, &sandcap).await;
    drop((watch, sandcap));
    restart(c, install).await;

    // The baseline again, on the older etcd: the namespaces opted out (their Jobs and the one
    // not opted in are dropped as they arrive), the observed leases gone.
    opt_in(c, false);
    delete_leases(admin, &selector).await;
    let after = hand_made_start(c, install, admin, "after").await;

    let (time, base) = ((before.0 + after.0) / 2, (before.1 + after.1) / 2);
    println!(
        "observed / hand-made, time to all resolved: {:.2} / {:.2} s = {:.2} (hand-made {:.2} s before, {:.2} s after)",
        observed.as_secs_f64(),
        time.as_secs_f64(),
        observed.as_secs_f64() / time.as_secs_f64(),
        before.0.as_secs_f64(),
        after.0.as_secs_f64()
    );
    println!(
        "peak RSS: observed {}, hand-made {} (before, no Job: {}; after, {} Jobs none opted in: {}); observed - hand-made = {} bytes a workload",
        mib(rss),
        mib(base),
        mib(before.1),
        WORKLOADS + CHURN + OFF,
        mib(after.1),
        (rss as i64 - base as i64) / WORKLOADS as i64
    );
}

/// `CHURN` new Jobs at `CHURN_RATE` a second in one namespace opted in, each timed from its
/// create's answer to the watch event that shows its lease resolved.
async fn churn(admin: &Client, watch: &Resolved, sandcap: &Sandcap) {
    let ns = namespace(0);
    let started = tokio::time::Instant::now();
    let mut creates = Vec::with_capacity(CHURN);
    for i in 0..CHURN {
        tokio::time::sleep_until(started + Duration::from_secs_f64(i as f64 / CHURN_RATE)).await;
        let (name, object, admin) = (format!("churn-{i}"), job(&ns, &format!("churn-{i}")), admin.clone());
        creates.push(tokio::spawn(async move {
            create(&admin, object).await;
            (name, Instant::now())
        }));
    }
    let mut answered = Vec::with_capacity(CHURN);
    for create in creates {
        answered.push(create.await.expect("create task"));
    }
    watch.until(WORKLOADS + CHURN, sandcap).await;
    let mut times: Vec<Duration> = answered
        .iter()
        .map(|(name, at)| watch.at(&ns, name).expect("resolved").saturating_duration_since(*at))
        .collect();
    times.sort();
    println!(
        "{CHURN} new Jobs at {CHURN_RATE}/s: create -> observed lease resolved p50 {}, p99 {}",
        ms(quantile(&times, 0.5)),
        ms(quantile(&times, 0.99))
    );
}

/// A restart with nothing changed: once the observer's pass has counted every Job, 10 s more,
/// and what sandcap wrote of leases meanwhile, in the apiserver's audit log and its own metrics.
async fn restart(c: &Cluster, install: &Install) {
    let writes = || {
        let (mut observer, mut statuses) = (0, 0);
        for e in c.audit() {
            let by_sandcap = e["user"]["username"].as_str().is_some_and(|u| u.ends_with(":sandcap"));
            if !by_sandcap || e["objectRef"]["resource"] != "sandboxleases" {
                continue;
            }
            match (e["verb"].as_str(), e["objectRef"]["subresource"].as_str()) {
                (Some("create" | "patch" | "update" | "delete"), None) => observer += 1,
                (Some("patch"), Some("status")) => statuses += 1,
                _ => {}
            }
        }
        (observer, statuses)
    };
    let (observer, statuses) = writes();
    let started = Instant::now();
    let sandcap = controllers(c, install, "bench-observer-restart", &[]);
    let workloads = (WORKLOADS + CHURN) as u64;
    eventually("the observer's pass over every Job", WAIT, || async {
        (metric(&sandcap.metrics().await, "sandcap_observed_workloads{kind=\"Job\"}") == workloads).then_some(())
    })
    .await;
    let passed = started.elapsed();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (observer_after, statuses_after) = writes();
    let [creates, updates, deletes] = observer_writes(&sandcap.metrics().await);
    println!(
        "a restart with nothing changed: the observer's pass over all {workloads} Jobs {:.2} s after the start, then 10 s: {} lease writes by the observer (audit log; its metric: {creates} creates, {updates} updates, {deletes} deletes), {} lease status writes; peak RSS {}",
        passed.as_secs_f64(),
        observer_after - observer,
        statuses_after - statuses,
        mib(sandcap.peak_rss())
    );
}
