//! Create -> resolved: leases created at a steady rate, each timed from its create's response to
//! the watch event that shows it resolved, for sandcap and for two baselines: trivial controllers
//! (in this process, with sandcap's ServiceAccount token, so the apiserver authenticates and
//! authorizes them as it does sandcap) that write one status per lease from their watch, a merge
//! patch. "The limit" writes a status of sandcap's size (what any controller of this status can
//! approach); "the smallest" writes the smallest status a watch counts as resolved (one condition
//! and the generation: what any controller at all can approach). Rounds rotate in triples, the
//! limit, sandcap and the smallest in one and the reverse in the next (each controller runs only
//! during its own rounds), four triples per rate below 400/s, each round after one warm-up lease,
//! and each round's leases are deleted after it. A provider that binds Jobs is present throughout,
//! so sandcap's workload observer runs as it does in a cluster that uses it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::harness::binary::Sandcap;
use crate::harness::cluster::{self, Cluster};
use crate::harness::install::{self, Install};
use crate::harness::objects::resource;
use crate::harness::waits::eventually;
use crate::rounds::{At, Medians, Parts, Round, now, parts};
use crate::support::{Worker, all_true, lease, provider, secret};
use crate::{NS, quantile};

const PROVIDER: &str = "churn";
/// A provider that binds Jobs (none runs): sandcap's observer watches them all along.
const JOBS_PROVIDER: &str = "churn-jobs";
/// Each rate runs this long (at least 200 leases).
const ROUND: Duration = Duration::from_secs(5);

/// Whether a lease's status shows it resolved: the `Resolved` condition of its generation.
pub fn is_resolved(lease: &Value) -> bool {
    let status = &lease["status"];
    status["observedGeneration"] == lease["metadata"]["generation"]
        && status["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Resolved"))
}

/// Watches the leases of round `tag` until dropped; records when each was first seen resolved.
/// Returns once the watch has listed.
async fn watch_resolved(admin: &Client, tag: &str) -> (Arc<Mutex<HashMap<String, At>>>, tokio::task::JoinHandle<()>) {
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    let seen: Arc<Mutex<HashMap<String, At>>> = Arc::default();
    let (listed, is_listed) = oneshot::channel();
    let record = seen.clone();
    let config = watcher::Config::default().labels(&format!("bench/round={tag}"));
    let task = tokio::spawn(async move {
        let mut listed = Some(listed);
        let mut events = std::pin::pin!(watcher(api, config));
        while let Some(event) = events.next().await {
            let at = now();
            match event {
                Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                    let value = serde_json::to_value(&obj).expect("json");
                    if is_resolved(&value) {
                        record.lock().unwrap().entry(obj.metadata.name.clone().unwrap_or_default()).or_insert(at);
                    }
                }
                Ok(watcher::Event::InitDone) => drop(listed.take().map(|l| l.send(()))),
                _ => {}
            }
        }
    });
    is_listed.await.expect("the watch listed");
    (seen, task)
}

/// A baseline: for each new lease of round `tag`, one merge patch of `status` (sandcap's own for
/// the limit, [`smallest`] for the smallest).
async fn trivial_controller(admin: &Client, tag: &str, status: &Value) -> tokio::task::JoinHandle<()> {
    let status = Arc::new(status.clone());
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    let config = watcher::Config::default().labels(&format!("bench/round={tag}"));
    let (listed, is_listed) = oneshot::channel();
    let task = tokio::spawn(async move {
        let mut listed = Some(listed);
        let mut events = std::pin::pin!(watcher(api.clone(), config));
        let params = PatchParams { field_manager: Some("limit".into()), ..PatchParams::default() };
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(obj)) if obj.data.get("status").is_none_or(Value::is_null) => {
                    let (api, params, name) = (api.clone(), params.clone(), obj.metadata.name.clone().unwrap());
                    let status = status.clone();
                    tokio::spawn(async move {
                        let _ = api.patch_status(&name, &params, &Patch::Merge(&*status)).await;
                    });
                }
                Ok(watcher::Event::InitDone) => drop(listed.take().map(|l| l.send(()))),
                _ => {}
            }
        }
    });
    is_listed.await.expect("the watch listed");
    task
}

/// The smallest status [`is_resolved`] accepts of a new lease (generation 1): what a controller
/// that wrote nothing else would write.
fn smallest() -> Value {
    json!({"status": {"observedGeneration": 1, "conditions": [{
        "type": "Resolved", "status": "True", "reason": "Resolved", "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1,
    }]}})
}

/// Lease `name` of round `tag` (labelled so that the round's watches see it), with `spec`.
fn round_lease(tag: &str, name: &str, spec: Value) -> DynamicObject {
    let mut object = lease(NS, name, PROVIDER, spec);
    object["metadata"]["labels"] = json!({"bench/round": tag});
    serde_json::from_value(object).expect("lease")
}

/// Creates `count` leases of round `tag` at `rate` a second (each on time, not after the one
/// before); returns when each create was answered.
async fn create_at_rate(admin: &Client, tag: &str, rate: u32, count: usize, config_from: bool) -> HashMap<String, At> {
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    let spec = if config_from {
        json!({"configFrom": [{"secretKeyRef": {"name": "churn-creds", "key": "config.json"}}]})
    } else {
        json!({})
    };
    let started = tokio::time::Instant::now();
    let mut creates = Vec::with_capacity(count);
    for i in 0..count {
        tokio::time::sleep_until(started + Duration::from_secs_f64(i as f64 / f64::from(rate))).await;
        let name = format!("{tag}-{i}");
        let object = round_lease(tag, &name, spec.clone());
        let api = api.clone();
        creates.push(tokio::spawn(async move {
            // An apiserver past its capacity may drop a connection: that lease counts as not resolved.
            api.create(&PostParams::default(), &object).await.ok().map(|_| (name, now()))
        }));
    }
    let mut answered = HashMap::new();
    for create in creates {
        answered.extend(create.await.expect("create task"));
    }
    answered
}

/// One lease of round `tag`, created and seen resolved before the round's: the controller under
/// test is past its own start (sandcap's first reconciles after `controllers started` share the
/// CPU with what its start still does; the limit's first writes open its connections), so that
/// the round measures a running controller, as the cold start bench measures a starting one.
async fn warm_up(admin: &Client, tag: &str, resolved: &Mutex<HashMap<String, At>>) {
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    let name = format!("{tag}-warm-up");
    api.create(&PostParams::default(), &round_lease(tag, &name, json!({}))).await.expect("warm-up lease");
    eventually("the warm-up lease resolved", Duration::from_secs(60), || async {
        resolved.lock().unwrap().contains_key(&name).then_some(())
    })
    .await;
}

/// One round, its leases deleted after it.
async fn round(c: &Cluster, admin: &Client, tag: &str, rate: u32, config_from: bool) -> Round {
    let count = (rate as usize * ROUND.as_millis() as usize / 1000).max(200);
    collect_garbage(admin).await;
    let (resolved, watch) = watch_resolved(admin, tag).await;
    warm_up(admin, tag, &resolved).await;
    let created = create_at_rate(admin, tag, rate, count, config_from).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    // The round's leases and the warm-up lease.
    while resolved.lock().unwrap().len() < count + 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watch.abort();
    let resolved = resolved.lock().unwrap().clone();
    let mut times: Vec<Duration> =
        created.iter().filter_map(|(name, at)| Some(resolved.get(name)?.0.saturating_duration_since(at.0))).collect();
    times.sort();
    let (parts, writes) = parts(&c.audit(), &created, &resolved);
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    let selector = ListParams::default().labels(&format!("bench/round={tag}"));
    api.delete_collection(&DeleteParams::default(), &selector).await.expect("delete the round's leases");
    Round { total: (quantile(&times, 0.5), quantile(&times, 0.99)), missed: count - times.len(), parts, writes }
}

/// Has the apiserver collect its heap (Go's profiling handler runs the collector first when asked,
/// `gc=1`; the apiserver serves it to the admin by default), so that each round starts from a heap
/// without the garbage of what ran before it: a controller's start (sandcap's lists and watches,
/// once per round of its own) would otherwise be collected during its round, in pauses the
/// creates and writes of that round wait through.
async fn collect_garbage(admin: &Client) {
    let request = http::Request::get("/debug/pprof/heap?gc=1&debug=1").body(Vec::new()).expect("a request");
    admin.request_text(request).await.expect("the apiserver collects its heap");
}

/// Triples of rounds per rate, in the order limit, sandcap, smallest, then smallest, sandcap,
/// limit, and so on: the apiserver's heap grows round after round, and with it its garbage
/// collector's mark phases, in which creates and writes wait (docs/controller.md, "Scale"); a
/// side that always ran later would always meet the longer ones. Past this apiserver's capacity
/// (400/s) one triple says what there is to say.
fn triples(rate: u32) -> usize {
    if rate < 400 { 4 } else { 1 }
}

/// The rates, with and without `configFrom`, in the order they run: the rounds past this
/// apiserver's capacity last, since the heap they leave the apiserver with (about twice the
/// size) lengthens every garbage collection after them, for all sides.
const RATES: [(u32, bool); 6] = [(20, false), (100, false), (20, true), (100, true), (400, false), (400, true)];

/// Who writes the statuses of a round.
#[derive(Clone, Copy, PartialEq)]
enum Side {
    Limit,
    Sandcap,
    Smallest,
}

/// Prints the table: for each of [`RATES`], sandcap next to both baselines, each the median of
/// its rounds' p50s and p99s.
pub async fn create_to_resolved(c: &Cluster, install: &Install, admin: &Client, status: &Value) {
    let worker = Worker::with_methods(&sandcap_core::versions::V1.worker_methods());
    let creds = secret(NS, "churn-creds", "config.json", r#"{"apiToken": "s3cr3t-token-value"}"#, true);
    let mut jobs = provider(JOBS_PROVIDER, &worker.url, all_true());
    jobs["spec"]["workloads"] =
        json!([{"kind": "Job", "selector": {"matchLabels": {"bench/observed": "yes"}}, "driverKey": "kubernetes"}]);
    install::apply(c, &[provider(PROVIDER, &worker.url, all_true()), jobs, creds]);
    println!(
        "create -> resolved (ms), leases created at a steady rate for {} s each round, a provider binding Jobs present:",
        ROUND.as_secs()
    );
    println!(
        "| creates/s | configFrom | rounds | sandcap p50 / p99 | limit p50 / p99 | smallest p50 / p99 | to the limit p50 / p99 | to the smallest p50 / p99 | each triple's p50 ratio to the limit |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let as_sandcap = cluster::client_from(&install.kubeconfig).await;
    let small = smallest();
    let mut parts = Vec::new();
    let mut n = 0;
    for (rate, config_from) in RATES {
        let (mut ours, mut limits, mut smalls) = (Vec::new(), Vec::new(), Vec::new());
        for triple in 0..triples(rate) {
            n += 1;
            let mut order = [Side::Limit, Side::Sandcap, Side::Smallest];
            if triple % 2 == 1 {
                order.reverse();
            }
            for side in order {
                if side == Side::Sandcap {
                    let sandcap = started(c, install, admin, n).await;
                    ours.push(round(c, admin, &format!("sandcap-{n}"), rate, config_from).await);
                    drop(sandcap);
                    continue;
                }
                let (name, payload, rounds) = if side == Side::Limit {
                    ("limit", status, &mut limits)
                } else {
                    ("smallest", &small, &mut smalls)
                };
                let tag = format!("{name}-{n}");
                let controller = trivial_controller(&as_sandcap, &tag, payload).await;
                rounds.push(round(c, admin, &tag, rate, config_from).await);
                controller.abort();
            }
        }
        let triples: Vec<String> = ours
            .iter()
            .zip(&limits)
            .map(|(o, l)| format!("{:.2}", o.total.0.as_secs_f64() / l.total.0.as_secs_f64()))
            .collect();
        parts.push(format!(
            "| {rate} | {} | {} | {} | {} |",
            if config_from { "yes" } else { "no" },
            Parts::of(&ours).show(),
            Parts::of(&limits).show(),
            Parts::of(&smalls).show(),
        ));
        let (ours, limit, small) = (Medians::of(&ours), Medians::of(&limits), Medians::of(&smalls));
        println!(
            "| {rate} | {} | {} | {} | {} | {} | {} | {} | {} |",
            if config_from { "yes" } else { "no" },
            triples.len(),
            ours.show(),
            limit.show(),
            small.show(),
            ours.ratios(&limit),
            ours.ratios(&small),
            triples.join(", "),
        );
    }
    println!(
        "where each lease's time goes (ms, p50 / p99; the apiserver's audit log): create answered to its status write received (the controller's watch and the controller), the write, written to seen resolved (the bench's watch); status writes per lease"
    );
    println!("| creates/s | configFrom | sandcap | limit | smallest |");
    println!("|---|---|---|---|---|");
    parts.iter().for_each(|row| println!("{row}"));
}

/// sandcap's controllers, started, listed and with the provider probed, for round `n`.
async fn started(c: &Cluster, install: &Install, admin: &Client, n: usize) -> Sandcap {
    let sandcap = crate::controllers(c, install, &format!("bench-churn-{n}"), &[]);
    sandcap.ready().await;
    eventually("sandcap's controllers started", Duration::from_secs(60), || async {
        sandcap.log_text().contains("controllers started").then_some(())
    })
    .await;
    let providers: Api<DynamicObject> = Api::all_with(admin.clone(), &resource("SandboxProvider"));
    eventually("the provider probed", Duration::from_secs(60), || async {
        let p = providers.get(PROVIDER).await.ok()?;
        p.data["status"]["worker"].is_object().then_some(())
    })
    .await;
    sandcap
}
