//! Scale of the lease controller: 10,000 leases across 100 providers resolved through the
//! reconcile path (`reconcile_lease`: provider store lookup, Secret GET, resolution, status
//! server-side apply over HTTP-shaped requests) against an in-memory API. Prints figures, asserts
//! only that the work was done.
//!
//! ```text
//! cargo bench --bench controller_scale
//! ```
//!
//! Baseline in the same run: the pure `contract::resolve_lease` over the same leases, no API.
//!
//! The in-memory API is the tests' `support::apiserver::MiniApi` (objects kept as JSON bytes), not
//! kube-fake-client: that one keeps every object as a `serde_json::Value` tree plus a
//! server-side-apply field-ownership trie, about 40 KB per lease, so at 10,000 leases it alone
//! would dominate the process's memory. With MiniApi the peak printed is essentially the
//! controller's (its lease and provider stores, the reconciles in flight) plus the stored JSON.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::Store;
use sandcap::api::{ProbeResult, SandboxLease, SandboxProvider, WorkerStatus};
use sandcap::contract::{self, SecretLookup};
use sandcap::controller::{Context, leases_for_provider, provider_status, reconcile_lease};
use sandcap::probe::Prober;
use serde_json::{Value, json};
use support::apiserver::MiniApi;
use support::{ALL_METHODS, all_true, lease, metrics, provider, secret, store_of};

const PROVIDERS: usize = 100;
const LEASES: usize = 10_000;
/// provider-0 carries this many leases; the rest are spread over the other 99.
const BIG_PROVIDER_LEASES: usize = 1_000;
const NAMESPACES: usize = 10;
/// As the controller's `LEASE_CONCURRENCY`.
const CONCURRENCY: usize = 32;
const LEASE_RESOURCE: &str = "sandcap.dev/v1alpha1/sandboxleases";
const SECRET_JSON: &str = r#"{"apiToken": "long-enough-token"}"#;

fn provider_of(i: usize) -> String {
    if i < BIG_PROVIDER_LEASES {
        "provider-0".into()
    } else {
        format!("provider-{}", 1 + (i - BIG_PROVIDER_LEASES) % (PROVIDERS - 1))
    }
}

/// Every fourth lease reads its namespace's Secret; every third asks for reuse; every fifth is Job-backed.
fn lease_spec(i: usize) -> Value {
    let mut spec = json!({"config": {"backend": "sandbox-cr"}});
    if i.is_multiple_of(4) {
        spec["configFrom"] = json!([{"secretKeyRef": {"name": "creds", "key": "config.json"}}]);
    }
    if i.is_multiple_of(3) {
        spec["policy"] = json!("ReuseByEnvironment");
        spec["environment"] = json!(format!("env-{i}"));
    }
    if i.is_multiple_of(5) {
        spec["backend"] = json!("job");
    }
    spec
}

/// A provider as the apiserver would return it, with the status its controller published.
fn published_provider(i: usize, capabilities: Value) -> SandboxProvider {
    let mut p = provider(&format!("provider-{i}"), "http://worker.invalid/rpc", capabilities);
    p.metadata.uid = Some(format!("uid-provider-{i}"));
    p.metadata.generation = Some(1);
    let now = Time(Timestamp::from_second(Timestamp::now().as_second()).expect("in range"));
    let worker = WorkerStatus {
        supported_methods: ALL_METHODS.map(String::from).to_vec(),
        probe: ProbeResult::Succeeded,
        last_probe_time: Some(now.clone()),
        message: "initialize answered ok: true with 6 supportedMethods".into(),
    };
    p.status = Some(provider_status(&p, worker, &now));
    p
}

/// Runs `reconcile_lease` as the controller does: each in its own task, at most `CONCURRENCY` at a
/// time. Returns the elapsed time.
async fn reconcile_all(leases: Vec<Arc<SandboxLease>>, ctx: &Arc<Context>) -> Duration {
    let started = Instant::now();
    let mut results = futures::stream::iter(leases)
        .map(|l| tokio::spawn(reconcile_lease(l, ctx.clone())))
        .buffer_unordered(CONCURRENCY);
    while let Some(result) = results.next().await {
        result.expect("the task ran").expect("the reconcile succeeded");
    }
    started.elapsed()
}

fn context(api: &MiniApi, providers: Store<SandboxProvider>) -> Arc<Context> {
    let client = api.client();
    let prober = Prober::new(Duration::from_secs(5), false, "bench");
    Context::new(client, providers, prober, metrics().0, Duration::from_secs(300), "bench")
}

fn peak_memory_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
    kib.map_or(f64::NAN, |k: f64| k / 1024.0)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    runtime.block_on(run());
}

async fn run() {
    // Setup, not timed: providers with a published status, one Secret per namespace, the leases.
    let providers: Vec<SandboxProvider> = (0..PROVIDERS).map(|i| published_provider(i, all_true())).collect();
    let api = MiniApi::default();
    let client = api.client();
    for ns in 0..NAMESPACES {
        let s = secret(&format!("team-{ns}"), "creds", "config.json", SECRET_JSON);
        Api::<Secret>::namespaced(client.clone(), &format!("team-{ns}"))
            .create(&PostParams::default(), &s)
            .await
            .unwrap();
    }
    for i in 0..LEASES {
        let l = lease(&format!("team-{}", i % NAMESPACES), &format!("run-{i}"), &provider_of(i), lease_spec(i));
        let api = Api::<SandboxLease>::namespaced(client.clone(), l.metadata.namespace.as_deref().unwrap());
        api.create(&PostParams::default(), &l).await.unwrap();
    }
    let leases: Vec<SandboxLease> = api.stored(LEASE_RESOURCE);
    let ctx = context(&api, store_of(providers.clone()));
    println!(
        "controller_scale: {PROVIDERS} providers, {LEASES} leases ({BIG_PROVIDER_LEASES} on provider-0), {} read a \
         configFrom Secret, reconcile concurrency {CONCURRENCY}",
        LEASES / 4
    );

    // Baseline: the pure resolution of the same leases, no API.
    let by_name: HashMap<&str, &SandboxProvider> =
        providers.iter().map(|p| (p.metadata.name.as_deref().unwrap(), p)).collect();
    let started = Instant::now();
    for l in &leases {
        let p = by_name.get(l.spec.provider_ref.name.as_str()).copied();
        let verified = p.map_or_else(contract::Verified::nothing, contract::verified_from_status);
        let secret = |_: &_| SecretLookup::Found(SECRET_JSON.as_bytes().to_vec());
        std::hint::black_box(contract::resolve_lease(l, p, &verified, secret));
    }
    let baseline = started.elapsed();
    print_rate("baseline  contract::resolve_lease, no API", baseline, None);

    // First resolution: every lease resolved and its status written.
    let initial = reconcile_all(leases.into_iter().map(Arc::new).collect(), &ctx).await;
    assert_eq!(api.status_writes(), LEASES, "every lease gets a status");
    print_rate(&format!("initial   reconcile_lease, {LEASES} status writes"), initial, Some(baseline));

    // The watch delivers the written leases; reconciled again, nothing has changed.
    let lease_store = store_of(api.stored::<SandboxLease>(LEASE_RESOURCE));
    let steady = reconcile_all(lease_store.state(), &ctx).await;
    assert_eq!(api.status_writes(), LEASES, "nothing changed, nothing written");
    print_rate("steady    reconcile_lease, nothing changed, 0 writes", steady, Some(baseline));

    // provider-0's declaration changes (nativeSyncIn: false) and its new status is published; the
    // watch maps the provider to its leases, which are re-resolved.
    let mut changed_caps = all_true();
    changed_caps["nativeSyncIn"] = json!(false);
    let mut now_providers = providers;
    now_providers[0] = published_provider(0, changed_caps);
    let ctx = context(&api, store_of(now_providers));
    let started = Instant::now();
    let dependents: Vec<Arc<SandboxLease>> = leases_for_provider(&lease_store, "provider-0")
        .iter()
        .map(|r| lease_store.get(r).expect("in the store"))
        .collect();
    let mapped = dependents.len();
    reconcile_all(dependents, &ctx).await;
    let change = started.elapsed();
    let rewritten = api.status_writes() - LEASES;
    println!(
        "change    provider-0 declaration change -> its {mapped} leases re-resolved: {:.3} s ({rewritten} status writes)",
        change.as_secs_f64()
    );
    println!("peak memory (VmHWM of the whole process, in-memory API included): {:.1} MiB", peak_memory_mib());
}

fn print_rate(what: &str, took: Duration, baseline: Option<Duration>) {
    let ratio = baseline.map(|b| format!(", {:.1}x the baseline's time", took.as_secs_f64() / b.as_secs_f64()));
    println!(
        "{what:<55} {:>8.0} leases/s ({:.3} s{})",
        LEASES as f64 / took.as_secs_f64(),
        took.as_secs_f64(),
        ratio.unwrap_or_default()
    );
}
