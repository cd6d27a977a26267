//! A leader that really leads: controllers that stop make their replica step down and stand
//! again; a leader that cannot renew its Lease stops writing before anyone else may lead; an
//! apiserver that throttles every write loses no update.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandcap_core::versions::ContractVersion;
use serde_json::json;

use crate::harness::binary::Sandcap;
use crate::harness::cluster::Cluster;
use crate::harness::install;
use crate::harness::objects::{delete, holder};
use crate::harness::waits::{all_leases, eventually, lease_reason};
use crate::support::{Worker, all_true, lease, ok, provider, sample};

const CONTROLLERS_ONLY: (&str, &str) = ("SANDCAP_CONTROLLERS_ONLY", "true");

async fn gauge(replica: &Sandcap, name: &str) -> f64 {
    sample(&replica.metrics().await, name).unwrap_or_else(|| panic!("{}: no {name}", replica.name))
}

/// The controllers' first lists are refused (their ClusterRoleBinding is gone, as when the RBAC is
/// synced after the operator): the replica takes the Lease, its controllers stop at the cache sync
/// timeout, and it steps down and stands again with backoff, so status writes resume soon after
/// the RBAC comes back. Before, the replica kept the Lease and wrote nothing, ever.
pub async fn a_leader_whose_controllers_stop_steps_down_and_stands_again(c: Arc<Cluster>) {
    const NS: &str = "e2e-stands";
    let install = install::default_chart(&c, NS).await;
    // The controllers' own binding: the chart's other ClusterRoleBindings have a suffix.
    let binding = install
        .objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRoleBinding")
        .min_by_key(|o| o["metadata"]["name"].as_str().map_or(usize::MAX, str::len))
        .cloned()
        .expect("the chart binds the controllers' ClusterRole");
    let name = binding["metadata"]["name"].as_str().expect("a name");
    ok("delete the controllers' binding", c.kubectl(&["delete", "clusterrolebinding", name]));
    let worker = Worker::of_contract(ContractVersion::V1);
    install::apply(&c, &[provider(NS, &worker.url, all_true()), lease(NS, "lease", NS, json!({}))]);
    let sandcap = Sandcap::start(&c, &install, "stands", &[CONTROLLERS_ONLY, ("SANDCAP_CACHE_SYNC_TIMEOUT", "2s")]);
    let admin = c.admin().await;
    eventually("the replica to step down", Duration::from_secs(30), || async {
        sandcap.log_text().contains("the controllers stopped by themselves").then_some(())
    })
    .await;
    assert_eq!(gauge(&sandcap, "sandcap_controllers_running").await, 0.0);

    install::apply(&c, &[binding]);
    let restored = Instant::now();
    lease_reason(&admin, NS, "lease", "nativeSyncIn", "Granted").await;
    let resumed = restored.elapsed();
    println!("    status writes resumed {resumed:.1?} after the controllers' RBAC came back");
    assert!(resumed < Duration::from_secs(30), "resumed only after {resumed:?}");
    assert_eq!(holder(&admin).await.as_deref(), Some("stands"));
    assert_eq!(gauge(&sandcap, "sandcap_controllers_running").await, 1.0);
    delete(&admin, "SandboxProvider", None, NS).await;
}

/// The apiserver hangs for 3 s, which the leader rides out (client-go's renewal schedule: one
/// renewal lost, the next one in time). Then it hangs (SIGSTOP: connections stay open, nothing
/// answers) for longer than the Lease lasts, while status writes are on their way. The leader stops within the renew deadline,
/// while nobody else may lead; after the apiserver resumes exactly one replica leads, and every
/// lease converges on the provider's latest spec.
pub async fn a_hung_apiserver_stops_the_leader_before_a_standby_leads(c: Arc<Cluster>) {
    const NS: &str = "e2e-hung";
    const HANG: Duration = Duration::from_secs(13);
    let install = install::default_chart(&c, NS).await;
    let worker = Worker::of_contract(ContractVersion::V1);
    let mut acme = provider(NS, &worker.url, all_true());
    let names: Vec<String> = (0..10).map(|i| format!("lease-{i}")).collect();
    let mut objects = vec![acme.clone()];
    objects.extend(names.iter().map(|n| lease(NS, n, NS, json!({}))));
    install::apply(&c, &objects);
    let admin = c.admin().await;
    let replicas = [
        Sandcap::start(&c, &install, "hung-a", &[CONTROLLERS_ONLY]),
        Sandcap::start(&c, &install, "hung-b", &[CONTROLLERS_ONLY]),
    ];
    all_leases(&admin, NS, &names, "independentControlCommands", "Granted").await;
    let leader = eventually("a leader", Duration::from_secs(30), || async { holder(&admin).await }).await;
    let old = replicas.iter().position(|r| r.name == leader).expect("a replica leads");
    // First a short hang, longer than the election client's 2 s per request: the renewal due in it
    // fails, the next one succeeds well within the renew deadline, and the leader goes on leading.
    c.signal_apiserver(libc::SIGSTOP);
    let short = Instant::now();
    let mut resumed = false;
    while short.elapsed() < Duration::from_secs(13) {
        if !resumed && short.elapsed() >= Duration::from_secs(3) {
            c.signal_apiserver(libc::SIGCONT);
            resumed = true;
        }
        let leading = [gauge(&replicas[0], "sandcap_leader").await, gauge(&replicas[1], "sandcap_leader").await];
        assert_eq!(leading[old], 1.0, "the leader stopped {:?} after a 3 s hang began", short.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(holder(&admin).await.as_deref(), Some(leader.as_str()), "the Lease kept through a 3 s hang");
    // A renewal comes every 2 s: let the next one be due during the hang.
    tokio::time::sleep(Duration::from_secs(1)).await;

    acme["spec"]["environmentDrivers"][0]["sandboxCapabilities"]["independentControlCommands"] = json!(false);
    install::apply(&c, &[acme.clone()]);
    c.signal_apiserver(libc::SIGSTOP);
    let hung = Instant::now();
    let mut stopped = None;
    while hung.elapsed() < HANG {
        let leading = [gauge(&replicas[0], "sandcap_leader").await, gauge(&replicas[1], "sandcap_leader").await];
        assert!(leading != [1.0, 1.0], "two leaders at {:?} into the hang", hung.elapsed());
        assert_eq!(leading[1 - old], 0.0, "the standby leads while the apiserver hangs");
        if leading[old] == 0.0 && stopped.is_none() {
            stopped = Some(hung.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.signal_apiserver(libc::SIGCONT);
    let stopped = stopped.unwrap_or_else(|| panic!("{leader} still led {HANG:?} into the hang"));
    println!("    the leader stopped {stopped:.1?} into the hang (renew deadline 10 s after its last renewal)");
    // Its last renewal was at most 2 s before the hang; the Lease lasts 15 s after it.
    assert!(stopped < Duration::from_secs(12), "stopped only {stopped:?} into the hang");

    let resumed = Instant::now();
    all_leases(&admin, NS, &names, "independentControlCommands", "DeclaredFalse").await;
    acme["spec"]["environmentDrivers"][0]["sandboxCapabilities"]["independentControlCommands"] = json!(true);
    install::apply(&c, &[acme]);
    all_leases(&admin, NS, &names, "independentControlCommands", "Granted").await;
    println!("    every lease converged {:.1?} after the apiserver resumed", resumed.elapsed());
    let leading = [gauge(&replicas[0], "sandcap_leader").await, gauge(&replicas[1], "sandcap_leader").await];
    assert_eq!(leading.iter().sum::<f64>(), 1.0, "exactly one leader: {leading:?}");
    delete(&admin, "SandboxProvider", None, NS).await;
}

/// The apiserver's own flow control refuses writes past one at a time (429 with `Retry-After`)
/// while a neighbour writes as fast as it can, and leases are created meanwhile. No reconcile runs
/// into its deadline (no request outlives its own), and once the storm is over every lease is
/// resolved, whether or not the leader had to step down meanwhile (its renewals are throttled too).
pub async fn a_throttling_apiserver_loses_no_update(c: Arc<Cluster>) {
    const NS: &str = "e2e-throttled";
    let install = install::default_chart(&c, NS).await;
    let worker = Worker::of_contract(ContractVersion::V1);
    install::apply(&c, &[provider(NS, &worker.url, all_true())]);
    c.stop_apiserver();
    c.start_apiserver_with(&["--max-mutating-requests-inflight=1", "--max-requests-inflight=4"]);
    let sandcap = Sandcap::start(&c, &install, "throttled", &[CONTROLLERS_ONLY]);
    let admin = c.admin().await;
    eventually("a leader", Duration::from_secs(30), || async { holder(&admin).await }).await;
    let noise = tokio::spawn(neighbour(admin.clone(), NS));
    let names: Vec<String> = (0..30).map(|i| format!("lease-{i}")).collect();
    let storm = Instant::now();
    for name in &names {
        install::apply(&c, &[lease(NS, name, NS, json!({}))]);
    }
    tokio::time::sleep(Duration::from_secs(15).saturating_sub(storm.elapsed())).await;
    noise.abort();
    let over = Instant::now();
    all_leases(&admin, NS, &names, "nativeSyncIn", "Granted").await;
    let metrics = sandcap.metrics().await;
    let attempts = sample(&metrics, "sandcap_api_requests_total{verb=\"patch\",resource=\"sandboxleases/status\"}");
    let failed = |error: &str| {
        sample(&metrics, &format!("sandcap_reconcile_failures_total{{kind=\"SandboxLease\",error=\"{error}\"}}"))
            .unwrap_or(0.0)
    };
    println!(
        "    30 leases created in a {:.0?} storm: all resolved {:.1?} after it; {attempts:?} status patch attempts, {} failed writes retried",
        over - storm,
        over.elapsed(),
        failed("write_status"),
    );
    assert_eq!(failed("deadline"), 0.0, "a reconcile ran into its deadline:\n{metrics}");
    c.stop_apiserver();
    c.start_apiserver();
    delete(&c.admin().await, "SandboxProvider", None, NS).await;
}

/// Writes a ConfigMap over and over from 8 tasks, to keep the apiserver's one write place busy.
async fn neighbour(client: kube::Client, namespace: &str) {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, Patch, PatchParams};
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let writers = (0..8).map(|i| {
        let api = api.clone();
        async move {
            let params = PatchParams::apply("e2e-neighbour").force();
            for n in 0u64.. {
                let map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("noise-{i}")},
                    "data": {"n": n.to_string()}});
                let _ = api.patch(&format!("noise-{i}"), &params, &Patch::Apply(&map)).await;
            }
        }
    });
    futures::future::join_all(writers).await;
}
