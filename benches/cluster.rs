//! sandcap through a real kube-apiserver (the end-to-end suite's cluster, newest minor), each
//! figure next to a baseline measured on the same apiserver in the same run:
//!
//! 1. the webhook's added latency: 200 sequential creates of a SandboxLease and of a
//!    SandboxProvider, without a webhook, through a webhook that only echoes the uid, and through
//!    sandcap's, three rounds of each in turn (median, p99);
//! 2. create -> resolved at 20, 100 and 400 creates/s, with and without `configFrom`, next to two
//!    trivial controllers', one writing sandcap's status and one the smallest, and where each
//!    lease's time went by the apiserver's audit log (`cluster/churn.rs`);
//! 3. 100 providers and 10,000 leases (half with a `configFrom` Secret): a cold controller start
//!    until every lease is resolved (as a watch shows it), against a plain loop of 10,000 status
//!    PATCHes with the same concurrency, run before and again at the end (the ratio is to the
//!    mean of the two); one provider's declaration change until its 100 leases are re-resolved;
//!    sandcap's peak RSS; a restart and ten probe intervals with nothing changed (lease status
//!    writes and Secret GETs, from the apiserver's audit log).
//! 4. observed leases: 10,000 Jobs in 10 namespaces opted in and 1,000 labelled Jobs in one that is
//!    not: a cold start until every Job's observed lease is resolved, against the same start with
//!    10,000 hand-made leases, run before and again at the end; peak RSS of both; 100 new Jobs at
//!    50/s until each lease is resolved; a restart with nothing changed (the observer's writes).
//!
//! Part 1 is `cluster/webhook.rs` (with `cluster/echo.rs`), part 2 `cluster/churn.rs` (with
//! `cluster/rounds.rs`), part 3
//! `cluster/scale.rs`, part 4 `cluster/workloads.rs`; this file holds what they share and runs
//! them.
//!
//!   cargo build --release --example reference-worker && cargo bench --bench cluster
//!   SANDCAP_BENCH_PROVIDERS=1000 cargo bench --bench cluster   (100,000 leases, part 3 alone)
//!   SANDCAP_BENCH_PARTS=webhook,churn cargo bench --bench cluster   (some parts)
//!   SANDCAP_BENCH_PARTS=workloads cargo bench --bench cluster   (observed leases alone)
//!   SANDCAP_E2E_SANDCAP=path/to/other/sandcap cargo bench --bench cluster    (another build)

#[path = "cluster/churn.rs"]
mod churn;
#[path = "cluster/echo.rs"]
mod echo;
// The end-to-end suite's harness, of which the benchmarks use a part.
#[path = "../tests/e2e/harness/mod.rs"]
#[allow(dead_code)]
mod harness;
#[path = "cluster/rounds.rs"]
mod rounds;
#[path = "cluster/scale.rs"]
mod scale;
#[path = "../tests/support/mod.rs"]
mod support;
#[path = "cluster/webhook.rs"]
mod webhook;
#[path = "cluster/workloads.rs"]
mod workloads;

use std::sync::Arc;
use std::time::Duration;

use sandcap_core::api::API_VERSION;
use sandcap_core::versions::V1;
use sandcap_core::vocabulary::Kind;
use serde_json::{Value, json};

use harness::binary::Sandcap;
use harness::cluster::{self, Cluster};
use harness::install::{self, Install};

const NS: &str = "bench";
/// Whether to run part `name` (`webhook`, `churn`, `scale`, `workloads`): `SANDCAP_BENCH_PARTS` lists them,
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

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

/// The median of rounds' figures; of an even number, the mean of the middle two.
fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) { (values[middle - 1] + values[middle]) / 2 } else { values[middle] }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// The status sandcap writes for a lease of the bench's (every capability granted, one
/// `configFrom` Secret), as the baselines' payload: taken from sandcap itself, resolving a sample
/// lease before the parts run, so that a baseline writes exactly as much as sandcap does. Its pin
/// is left out (sandcap keeps a pin it finds, and this one would pin the sample's provider), and
/// its bytes go to the `Valid` condition's message instead, so the size stays.
async fn sandcap_status(c: &Cluster, install: &Install, admin: &kube::Client) -> Value {
    let worker = support::Worker::with_methods(&V1.worker_methods());
    let sample = [
        support::provider("sample", &worker.url, support::all_true()),
        support::secret(NS, "sample-creds", "config.json", r#"{"apiToken": "s3cr3t-token-value"}"#, true),
        support::lease(
            NS,
            "sample",
            "sample",
            json!({"configFrom": [{"secretKeyRef": {"name": "sample-creds", "key": "config.json"}}]}),
        ),
    ];
    install::apply(c, &sample);
    let sandcap = controllers(c, install, "bench-sample", &[]);
    let mut status = harness::waits::lease_reason(admin, NS, "sample", "persistentProcessSessions", "Granted").await;
    drop(sandcap);
    let pin = status.as_object_mut().and_then(|s| s.remove("pinned")).expect("a granted lease is pinned");
    let valid = status["conditions"].as_array_mut().and_then(|c| c.iter_mut().find(|c| c["type"] == "Valid"));
    let message = &mut valid.expect("a Valid condition")["message"];
    *message = json!(format!("{} {}", message.as_str().unwrap_or_default(), pin));
    let list = json!({"apiVersion": "v1", "kind": "List", "items": sample});
    let out = c.kubectl_stdin(&["delete", "-f", "-"], &list.to_string());
    assert!(out.status.success(), "kubectl delete the sample: {}", String::from_utf8_lossy(&out.stderr));
    json!({"apiVersion": API_VERSION, "kind": Kind::SandboxLease, "status": status})
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

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` only checks that it builds.
    }
    // The cluster's clients (reqwest, kube) use rustls with the process's default crypto provider.
    sandcap::tls::install_default_provider();
    let newest = cluster::testcluster::minors().expect("the minors").pop().expect("a minor");
    let bin = cluster::testcluster::build(&newest).expect("cluster binaries");
    println!("Kubernetes {}", bin.version());
    let c = Arc::new(Cluster::start(bin));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        install::crds(&c);
        install::namespaces(&c, &[NS]);
        let install = Install::chart(&c, json!({"secretNamespaces": [NS]})).await;
        let admin = c.admin().await;
        if part("webhook") {
            webhook::latency(&c, &install, &admin).await;
        }
        let status = sandcap_status(&c, &install, &admin).await;
        println!(
            "sandcap's status of a granted lease, the baselines' payload: {} bytes",
            status["status"].to_string().len()
        );
        if part("churn") {
            churn::create_to_resolved(&c, &install, &admin, &status).await;
        }
        if part("scale") {
            scale::controllers_at_scale(&c, &install, &admin, &status).await;
        }
        if part("workloads") {
            workloads::observed_at_scale(&c, &install, &admin).await;
        }
    });
}
