//! sandcap through a real kube-apiserver (the end-to-end suite's cluster, newest minor), each
//! figure next to a baseline measured on the same apiserver in the same run:
//!
//! 1. the webhook's added latency: 200 sequential creates of a SandboxLease and of a
//!    SandboxProvider, without a webhook, through a webhook that only echoes the uid, and through
//!    sandcap's, three rounds of each in turn (median, p99);
//! 2. create -> resolved at 20, 100 and 400 creates/s, with and without `configFrom`, next to a
//!    trivial controller's (`cluster/churn.rs`);
//! 3. 100 providers and 10,000 leases (half with a `configFrom` Secret): a cold controller start
//!    until every lease is resolved (as a watch shows it), against a plain loop of 10,000 status
//!    PATCHes with the same concurrency, run before and again at the end (the ratio is to the
//!    mean of the two); one provider's declaration change until its 100 leases are re-resolved;
//!    sandcap's peak RSS; a restart and ten probe intervals with nothing changed (lease status
//!    writes and Secret GETs, from the apiserver's audit log).
//!
//!   cargo build --release --example reference-worker && cargo bench --bench cluster
//!   SANDCAP_BENCH_PROVIDERS=1000 cargo bench --bench cluster   (100,000 leases, part 3 alone)
//!   SANDCAP_BENCH_PARTS=webhook,churn cargo bench --bench cluster   (some parts)
//!   SANDCAP_E2E_SANDCAP=path/to/other/sandcap cargo bench --bench cluster    (another build)

#[path = "cluster/churn.rs"]
mod churn;
#[path = "../tests/e2e/cluster.rs"]
#[allow(dead_code)]
mod cluster;
#[path = "../tests/e2e/controllers.rs"]
#[allow(dead_code)]
mod controllers;
#[path = "cluster/echo.rs"]
mod echo;
#[path = "../tests/e2e/install.rs"]
#[allow(dead_code)]
mod install;
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use sandcap::api::API_VERSION;
use sandcap::versions::V1;
use sandcap::vocabulary::{ConditionType, Kind, LeasePolicy, Reason};
use serde_json::{Value, json};

use cluster::Cluster;
use controllers::{explanation, resource};
use install::{Install, Sandcap};
use support::{Worker, all_true, lease, provider, secret};

const NS: &str = "bench";
/// Whether to run part `name` (`webhook`, `churn`, `scale`): `SANDCAP_BENCH_PARTS` lists them,
/// all by default; the 100,000-lease run is the scale part alone.
fn part(name: &str) -> bool {
    match std::env::var("SANDCAP_BENCH_PARTS") {
        Ok(parts) => parts.split(',').any(|p| p.trim() == name),
        Err(_) => providers() == 100 || name == "scale",
    }
}

/// Providers of the scale part, 100 leases each: 100 unless `SANDCAP_BENCH_PROVIDERS` says
/// otherwise (1000: the 100,000-lease run, which runs the scale part alone).
fn providers() -> usize {
    std::env::var("SANDCAP_BENCH_PROVIDERS").ok().and_then(|v| v.parse().ok()).unwrap_or(100)
}
const LEASES_PER_PROVIDER: usize = 100;
/// The lease controller's concurrency: the baseline loop writes as many at once.
const CONCURRENCY: usize = 32;

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// Sequential creates of each kind in each round of the webhook's latency.
const CREATES: usize = 200;
/// Rounds through each webhook, in turn.
const WEBHOOK_ROUNDS: usize = 3;

/// [`CREATES`] sequential creates of `make(i)`; (median, p99).
async fn creates(
    client: &Client,
    kind: &str,
    namespace: Option<&str>,
    make: impl Fn(usize) -> Value,
) -> (Duration, Duration) {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource(kind)),
        None => Api::all_with(client.clone(), &resource(kind)),
    };
    let mut times = Vec::with_capacity(CREATES);
    for i in 0..CREATES {
        let object: DynamicObject = serde_json::from_value(make(i)).expect("object");
        let started = Instant::now();
        api.create(&PostParams::default(), &object).await.expect("create");
        times.push(started.elapsed());
    }
    times.sort();
    (quantile(&times, 0.5), quantile(&times, 0.99))
}

/// The creates of both kinds without a webhook, through a webhook that only echoes the uid (on
/// sandcap's transport, see `echo`), and through sandcap's, in turn ([`WEBHOOK_ROUNDS`] each): the
/// median of the rounds' medians and p99s, and what each webhook adds to them.
async fn webhook_latency(c: &Cluster, install: &Install, admin: &Client) {
    let worker_url = "http://127.0.0.1:9/rpc";
    let round = |tag: String| {
        let admin = admin.clone();
        async move {
            let leases =
                creates(&admin, "SandboxLease", Some(NS), |i| lease(NS, &format!("{tag}-{i}"), "p-0", json!({}))).await;
            let providers =
                creates(&admin, "SandboxProvider", None, |i| provider(&format!("{tag}-{i}"), worker_url, all_true()))
                    .await;
            [leases, providers]
        }
    };
    let (echo_port, _echo) = echo::start(c).await;
    let webhook = Sandcap::start(c, install, "bench-webhook", &[("SANDCAP_WEBHOOK_ONLY", "true")]);
    webhook.ready().await;
    let mut rounds: [Vec<[(Duration, Duration); 2]>; 3] = Default::default();
    let mut tags = Vec::new();
    for r in 0..WEBHOOK_ROUNDS {
        for (w, port) in [(0, None), (1, Some(echo_port)), (2, Some(webhook.webhook_port))] {
            let _registration = port.map(|port| install.register_webhook(c, port, &c.ca.pem));
            // The apiserver picks a changed registration up within a second or so.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let tag = format!("webhook-{r}-{w}");
            rounds[w].push(round(tag.clone()).await);
            tags.push(tag);
        }
    }
    let median = |w: usize, kind: usize, pick: fn((Duration, Duration)) -> Duration| {
        let mut all: Vec<Duration> = rounds[w].iter().map(|r| pick(r[kind])).collect();
        all.sort();
        all[all.len() / 2]
    };
    println!(
        "creates through the apiserver, {CREATES} sequential each, median of {WEBHOOK_ROUNDS} rounds in turn (median / p99):"
    );
    for (kind, name) in ["SandboxLease", "SandboxProvider"].into_iter().enumerate() {
        let [none, echo, ours] = [0, 1, 2].map(|w| (median(w, kind, |r| r.0), median(w, kind, |r| r.1)));
        let added = |a: Duration, b: Duration| (a.as_secs_f64() - b.as_secs_f64()) * 1000.0;
        println!(
            "  {name:<16} no webhook {} / {} | echo {} / {} | sandcap {} / {} | added by echo {:+.2} / {:+.2} ms, by sandcap {:+.2} / {:+.2} ms (sandcap - echo at p99: {:+.2} ms)",
            ms(none.0),
            ms(none.1),
            ms(echo.0),
            ms(echo.1),
            ms(ours.0),
            ms(ours.1),
            added(echo.0, none.0),
            added(echo.1, none.1),
            added(ours.0, none.0),
            added(ours.1, none.1),
            added(ours.1, echo.1),
        );
    }
    let providers = Api::<DynamicObject>::all_with(admin.clone(), &resource("SandboxProvider"));
    for tag in tags {
        for i in 0..CREATES {
            let _ = providers.delete(&format!("{tag}-{i}"), &Default::default()).await;
        }
    }
    let leases: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    leases.delete_collection(&Default::default(), &ListParams::default()).await.expect("delete leases");
}

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
async fn baseline(
    api: &Api<DynamicObject>,
    names: &[String],
    patch: impl Fn(&str) -> Patch<Value>,
    params: PatchParams,
) -> Duration {
    let started = Instant::now();
    futures::stream::iter(names)
        .for_each_concurrent(CONCURRENCY, |name| {
            let (api, patch, params) = (api.clone(), patch(name), params.clone());
            async move {
                api.patch_status(name, &params, &patch).await.expect("patch");
            }
        })
        .await;
    started.elapsed()
}

/// A lease status as sandcap writes it: six capabilities, their explanations, three conditions
/// (no `pinned`: sandcap keeps a pin it finds, and this one would pin no real provider).
fn typical_status() -> Value {
    let condition = |t: ConditionType| json!({"type": t, "status": "True", "reason": t, "message": "a message of a typical length for this condition", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1});
    let lease_conditions = [ConditionType::Resolved, ConditionType::ConfigResolved, ConditionType::PluginIdentity];
    json!({
        "apiVersion": API_VERSION, "kind": Kind::SandboxLease,
        "status": {
            "observedGeneration": 1,
            "effectivePolicy": LeasePolicy::Ephemeral,
            "capabilities": V1.capabilities().map(|c| (c.to_string(), json!(false))).collect::<serde_json::Map<_, _>>(),
            "explanations": V1.capabilities().map(|c| json!({"capability": c, "granted": false, "reason": Reason::NarrowedByLeasePolicy, "message": "the lease policy is Ephemeral, not ReuseByEnvironment"})).collect::<Vec<_>>(),
            "conditions": lease_conditions.map(condition),
        }
    })
}

fn lease_reconciles(metrics: &str) -> u64 {
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

async fn controllers_at_scale(c: &Cluster, install: &Install, admin: &Client) {
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

    // Resolved: every lease Granted (all are: half read a valid `configFrom`), as a watch shows,
    // open from here on, so that the baselines pay for a watcher as sandcap's start does.
    let (granted, watch) = granted_watch(admin).await;

    // Baselines: the same number of status writes, as fast as the apiserver takes them: a small
    // merge patch, and a server-side apply of a status the size of sandcap's (what sandcap sends),
    // with sandcap's ServiceAccount token, so that the apiserver's priority and fairness treats
    // them as sandcap's (an admin's requests are exempt from it).
    let as_sandcap = cluster::client_from(&install.kubeconfig).await;
    let api: Api<DynamicObject> = Api::namespaced_with(as_sandcap, NS, &resource("SandboxLease"));
    let names: Vec<String> =
        (0..count).flat_map(|p| (0..LEASES_PER_PROVIDER).map(move |l| format!("l-{p}-{l}"))).collect();
    let merge = match count {
        100 => {
            let patch = |_: &str| Patch::Merge(json!({"status": {"observedGeneration": 0}}));
            format!("{:.2} s", baseline(&api, &names, patch, PatchParams::default()).await.as_secs_f64())
        }
        _ => "not measured".to_string(),
    };
    let apply = baseline_apply(&api, &names).await;
    println!(
        "baselines: {} status PATCHes ({CONCURRENCY} at a time): merge patch {merge}, server-side apply of a full status {:.2} s",
        names.len(),
        apply.as_secs_f64()
    );
    let baseline = apply;

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
        "cold start to all {total} leases resolved: {:.2} s ({} reconciles); apply baseline / sandcap = {:.2}",
        cold.as_secs_f64(),
        lease_reconciles(&sandcap.metrics().await),
        baseline.as_secs_f64() / cold.as_secs_f64()
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
    install::eventually("the caches listed", Duration::from_secs(300), || async {
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

    // The apiserver slows as etcd's history grows: the loop again, after everything sandcap did,
    // and sandcap's cold start against the mean of the two loops, so that neither side gets the
    // fresher apiserver.
    let again = baseline_apply(&api, &names).await;
    let mean = (baseline + again) / 2;
    println!(
        "the apply loop again, last: {:.2} s; the two loops' mean / sandcap's cold start = {:.2} / {:.2} s = {:.2}",
        again.as_secs_f64(),
        mean.as_secs_f64(),
        cold.as_secs_f64(),
        mean.as_secs_f64() / cold.as_secs_f64()
    );
}

/// The baseline loop: a server-side apply of a full status to every lease.
async fn baseline_apply(api: &Api<DynamicObject>, names: &[String]) -> Duration {
    baseline(api, names, |_| Patch::Apply(typical_status()), PatchParams::apply("bench").force()).await
}

/// `sandcap run`, the controllers alone, without leader election, with `overrides` and what
/// `SANDCAP_BENCH_ENV` adds to its environment (`K=V,K=V`: an allocator's settings, say).
fn controllers(c: &Cluster, install: &Install, name: &str, overrides: &[(&str, &str)]) -> Sandcap {
    let extra = std::env::var("SANDCAP_BENCH_ENV").unwrap_or_default();
    let mut env = vec![("SANDCAP_CONTROLLERS_ONLY", "true"), ("SANDCAP_LEADER_ELECT", "false")];
    env.extend(overrides.iter().copied());
    env.extend(extra.split(',').filter_map(|kv| kv.split_once('=')));
    Sandcap::start(c, install, name, &env)
}

/// How many leases of the bench a watch shows with `persistentProcessSessions` Granted; returns
/// once the watch has listed.
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
                    match explanation(&status, "persistentProcessSessions").is_some_and(|(r, _)| r == "Granted") {
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

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` only checks that it builds.
    }
    // The cluster's clients (reqwest, kube) use rustls with the process's default crypto provider.
    sandcap::tls::install_default_provider();
    let bin = cluster::build_all().expect("cluster binaries").pop().expect("a minor");
    println!("Kubernetes {}", bin.version());
    let c = Arc::new(Cluster::start(bin));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        install::crds(&c);
        install::namespaces(&c, &[NS]);
        let install = Install::chart(&c, json!({"secretNamespaces": [NS]})).await;
        let admin = c.admin().await;
        if part("webhook") {
            webhook_latency(&c, &install, &admin).await;
        }
        if part("churn") {
            churn::create_to_resolved(&c, &install, &admin).await;
        }
        if part("scale") {
            controllers_at_scale(&c, &install, &admin).await;
        }
    });
}
