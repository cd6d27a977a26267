//! Create -> resolved: leases created at a steady rate, each timed from its create's response to
//! the watch event that shows it resolved, for sandcap and for "the limit": a trivial controller
//! (in this process, with sandcap's ServiceAccount token, so the apiserver authenticates and
//! authorizes it as it does sandcap) that writes one status per lease from its watch, a merge patch
//! of a status of the same size. Create, watch delivery, one status write, watch delivery: what any
//! controller of this status can approach. Rounds alternate in pairs, the limit first in one
//! pair and sandcap first in the next (sandcap runs only during its own rounds), four pairs per
//! rate below 400/s, each round after one warm-up lease, and each round's leases are deleted
//! after it.

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
use crate::support::{Worker, all_true, lease, provider, secret};
use crate::{NS, median, ms, quantile};

const PROVIDER: &str = "churn";
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
async fn watch_resolved(
    admin: &Client,
    tag: &str,
) -> (Arc<Mutex<HashMap<String, Instant>>>, tokio::task::JoinHandle<()>) {
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let (listed, is_listed) = oneshot::channel();
    let record = seen.clone();
    let config = watcher::Config::default().labels(&format!("bench/round={tag}"));
    let task = tokio::spawn(async move {
        let mut listed = Some(listed);
        let mut events = std::pin::pin!(watcher(api, config));
        while let Some(event) = events.next().await {
            let at = Instant::now();
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

/// The limit: for each new lease of round `tag`, one merge patch of `status`, sandcap's own (the
/// fastest write of a whole status this apiserver serves, and sandcap's own kind of write).
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

/// Lease `name` of round `tag` (labelled so that the round's watches see it), with `spec`.
fn round_lease(tag: &str, name: &str, spec: Value) -> DynamicObject {
    let mut object = lease(NS, name, PROVIDER, spec);
    object["metadata"]["labels"] = json!({"bench/round": tag});
    serde_json::from_value(object).expect("lease")
}

/// Creates `count` leases of round `tag` at `rate` a second (each on time, not after the one
/// before); returns when each create was answered.
async fn create_at_rate(
    admin: &Client,
    tag: &str,
    rate: u32,
    count: usize,
    config_from: bool,
) -> HashMap<String, Instant> {
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
            api.create(&PostParams::default(), &object).await.ok().map(|_| (name, Instant::now()))
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
async fn warm_up(admin: &Client, tag: &str, resolved: &Mutex<HashMap<String, Instant>>) {
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    let name = format!("{tag}-warm-up");
    api.create(&PostParams::default(), &round_lease(tag, &name, json!({}))).await.expect("warm-up lease");
    eventually("the warm-up lease resolved", Duration::from_secs(60), || async {
        resolved.lock().unwrap().contains_key(&name).then_some(())
    })
    .await;
}

/// One round: (p50, p99, leases not resolved within 60 s).
async fn round(admin: &Client, tag: &str, rate: u32, config_from: bool) -> (Duration, Duration, usize) {
    let count = (rate as usize * ROUND.as_millis() as usize / 1000).max(200);
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
        created.iter().filter_map(|(name, at)| Some(resolved.get(name)?.saturating_duration_since(*at))).collect();
    times.sort();
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    let selector = ListParams::default().labels(&format!("bench/round={tag}"));
    api.delete_collection(&DeleteParams::default(), &selector).await.expect("delete the round's leases");
    (quantile(&times, 0.5), quantile(&times, 0.99), count - times.len())
}

/// Pairs of rounds per rate, in the order limit, sandcap, sandcap, limit, limit, ...: the
/// apiserver's heap grows round after round, and with it its garbage collector's mark phases, in
/// which creates and writes wait (docs/controller.md, "Scale"); a side that always ran second
/// would always meet the longer ones. Past this apiserver's capacity (400/s) one pair says what
/// there is to say.
fn pairs(rate: u32) -> usize {
    if rate < 400 { 4 } else { 1 }
}

/// The rates, with and without `configFrom`, in the order they run: the rounds past this
/// apiserver's capacity last, since the heap they leave the apiserver with (about twice the
/// size) lengthens every garbage collection after them, for both sides.
const RATES: [(u32, bool); 6] = [(20, false), (100, false), (20, true), (100, true), (400, false), (400, true)];

/// Prints the table: for each of [`RATES`], sandcap next to the limit, each the median of its
/// rounds' p50s and p99s.
pub async fn create_to_resolved(c: &Cluster, install: &Install, admin: &Client, status: &Value) {
    let worker = Worker::with_methods(&sandcap_core::versions::V1.worker_methods());
    let creds = secret(NS, "churn-creds", "config.json", r#"{"apiToken": "s3cr3t-token-value"}"#, true);
    install::apply(c, &[provider(PROVIDER, &worker.url, all_true()), creds]);
    println!("create -> resolved (ms), leases created at a steady rate for {} s each round:", ROUND.as_secs());
    println!(
        "| creates/s | configFrom | rounds | sandcap p50 / p99 | limit p50 / p99 | ratio p50 / p99 | each pair's p50 ratio |"
    );
    println!("|---|---|---|---|---|---|---|");
    let as_sandcap = cluster::client_from(&install.kubeconfig).await;
    let mut n = 0;
    for (rate, config_from) in RATES {
        let (mut ours, mut limits) = (Vec::new(), Vec::new());
        for pair in 0..pairs(rate) {
            n += 1;
            for sandcaps_turn in [pair % 2 == 1, pair % 2 == 0] {
                if sandcaps_turn {
                    let sandcap = started(c, install, admin, n).await;
                    ours.push(round(admin, &format!("sandcap-{n}"), rate, config_from).await);
                    drop(sandcap);
                } else {
                    let tag = format!("limit-{n}");
                    let controller = trivial_controller(&as_sandcap, &tag, status).await;
                    limits.push(round(admin, &tag, rate, config_from).await);
                    controller.abort();
                }
            }
        }
        let pairs: Vec<String> =
            ours.iter().zip(&limits).map(|(o, l)| format!("{:.2}", o.0.as_secs_f64() / l.0.as_secs_f64())).collect();
        let (ours, limit) = (Medians::of(&ours), Medians::of(&limits));
        let missed = |m: usize| if m > 0 { format!(" ({m} not resolved)") } else { String::new() };
        println!(
            "| {rate} | {} | {} | {} / {}{} | {} / {}{} | {:.2} / {:.2} | {} |",
            if config_from { "yes" } else { "no" },
            pairs.len(),
            ms(ours.p50),
            ms(ours.p99),
            missed(ours.missed),
            ms(limit.p50),
            ms(limit.p99),
            missed(limit.missed),
            ours.p50.as_secs_f64() / limit.p50.as_secs_f64(),
            ours.p99.as_secs_f64() / limit.p99.as_secs_f64(),
            pairs.join(", "),
        );
    }
}

/// The medians of rounds' p50s and p99s, and the leases not resolved in all of them.
struct Medians {
    p50: Duration,
    p99: Duration,
    missed: usize,
}

impl Medians {
    fn of(rounds: &[(Duration, Duration, usize)]) -> Medians {
        Medians {
            p50: median(rounds.iter().map(|r| r.0).collect()),
            p99: median(rounds.iter().map(|r| r.1).collect()),
            missed: rounds.iter().map(|r| r.2).sum(),
        }
    }
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
