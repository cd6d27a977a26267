//! The controllers across a restart, a handover to a standby and an apiserver outage: every lease
//! keeps following its provider.

use std::sync::Arc;
use std::time::Duration;

use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};

use crate::harness::binary::Sandcap;
use crate::harness::cluster::Cluster;
use crate::harness::install;
use crate::harness::objects::{delete, holder};
use crate::harness::waits::{WAIT, all_leases, eventually, lease_reason};
use crate::support::{Worker, all_true, lease, ok, provider};

const ELECTED: [(&str, &str); 1] = [("SANDCAP_CONTROLLERS_ONLY", "true")];

/// Finding 1 of the end-to-end issue: after a restart, leases stopped following their provider.
pub async fn leases_follow_their_provider_after_a_restart(c: Arc<Cluster>) {
    const NS: &str = "e2e-restart";
    let install = install::default_chart(&c, NS).await;
    let worker = Worker::of_contract(ContractVersion::V1);
    let mut providers: Vec<Value> =
        (0..300).map(|i| provider(&format!("e2e-r{i:03}"), &worker.url, all_true())).collect();
    let names: Vec<String> = (0..6).map(|i| format!("lease-{i}")).collect();
    let mut objects = providers.clone();
    objects.extend(names.iter().map(|n| lease(NS, n, "e2e-r000", json!({}))));
    install::apply(&c, &objects);
    let admin = c.admin().await;
    let mut sandcap = Sandcap::start(&c, &install, "restart-a", &ELECTED);
    all_leases(&admin, NS, &names, "persistentProcessSessions", "Granted").await;

    for round in 0..2 {
        sandcap.signal(libc::SIGTERM);
        assert!(sandcap.wait_exit(Duration::from_secs(20)).is_some_and(|s| s.success()), "{}", sandcap.log_text());
        sandcap = Sandcap::start(&c, &install, &format!("restart-{round}"), &ELECTED);
        let off = if round == 0 { json!({"persistentProcessSessions": false}) } else { all_true() };
        providers[0]["spec"]["environmentDrivers"][0]["sandboxCapabilities"] = off;
        install::apply(&c, &providers[..1]);
        let reason = if round == 0 { "DeclaredFalse" } else { "Granted" };
        all_leases(&admin, NS, &names, "persistentProcessSessions", reason).await;
    }
    assert!(sandcap.problems().is_empty(), "{:?}", sandcap.problems());
    ok("delete", c.kubectl(&["delete", "sbp", "--all", "--wait=false"]));
}

/// Two replicas: SIGTERM of the holder, then SIGKILL of the next, and every lease follows a
/// provider change made after each handover.
pub async fn a_standby_takes_over_and_every_lease_follows(c: Arc<Cluster>) {
    const NS: &str = "e2e-leader";
    let install = install::default_chart(&c, NS).await;
    let worker = Worker::of_contract(ContractVersion::V1);
    let mut acme = provider("e2e-leader", &worker.url, all_true());
    let names: Vec<String> = (0..5).map(|i| format!("lease-{i}")).collect();
    let mut objects = vec![acme.clone()];
    objects.extend(names.iter().map(|n| lease(NS, n, "e2e-leader", json!({}))));
    install::apply(&c, &objects);
    let admin = c.admin().await;
    let mut replicas =
        vec![Sandcap::start(&c, &install, "replica-a", &ELECTED), Sandcap::start(&c, &install, "replica-b", &ELECTED)];
    all_leases(&admin, NS, &names, "independentControlCommands", "Granted").await;

    for (round, signal) in [libc::SIGTERM, libc::SIGKILL].into_iter().enumerate() {
        let leader = eventually("a leader", WAIT, || async { holder(&admin).await }).await;
        let index = replicas.iter().position(|r| r.name == leader).unwrap_or_else(|| panic!("unknown holder {leader}"));
        // The standby says that it waits, and for whom.
        let standby = &replicas[1 - index];
        let waiting = format!("holder={leader}");
        eventually("the standby's log line", WAIT, || async {
            standby
                .log_text()
                .lines()
                .any(|l| l.contains("waiting for the leader lease") && l.contains(&waiting))
                .then_some(())
        })
        .await;
        let mut old = replicas.remove(index);
        old.signal(signal);
        assert!(old.wait_exit(Duration::from_secs(20)).is_some(), "{} did not exit", old.name);
        // The other replica takes over: at once after a release, within the lease duration after a kill.
        let next = eventually("a new leader", Duration::from_secs(40), || async {
            holder(&admin).await.filter(|h| *h != leader)
        })
        .await;
        assert_eq!(next, replicas[0].name);
        let value = round % 2 == 1;
        acme["spec"]["environmentDrivers"][0]["sandboxCapabilities"]["independentControlCommands"] = json!(value);
        install::apply(&c, &[acme.clone()]);
        let reason = if value { "Granted" } else { "DeclaredFalse" };
        all_leases(&admin, NS, &names, "independentControlCommands", reason).await;
        replicas.push(Sandcap::start(&c, &install, &format!("replica-{round}"), &ELECTED));
    }
    for replica in &replicas {
        assert!(replica.problems().is_empty(), "{}: {:?}", replica.name, replica.problems());
    }
    delete(&admin, "SandboxProvider", None, "e2e-leader").await;
}

/// The apiserver goes away for 20 s and comes back over the same etcd: sandcap recovers without a
/// restart and converges a change made afterwards.
pub async fn recovers_from_an_apiserver_outage(c: Arc<Cluster>) {
    const NS: &str = "e2e-outage";
    let install = install::default_chart(&c, NS).await;
    let worker = Worker::of_contract(ContractVersion::V1);
    let mut acme = provider("e2e-outage", &worker.url, all_true());
    install::apply(&c, &[acme.clone(), lease(NS, "lease", "e2e-outage", json!({}))]);
    let mut sandcap = Sandcap::start(&c, &install, "outage", &ELECTED);
    let admin = c.admin().await;
    lease_reason(&admin, NS, "lease", "nativeSyncIn", "Granted").await;

    c.stop_apiserver();
    tokio::time::sleep(Duration::from_secs(20)).await;
    c.start_apiserver();
    assert!(sandcap.wait_exit(Duration::ZERO).is_none(), "sandcap exited during the outage:\n{}", sandcap.log_text());
    acme["spec"]["environmentDrivers"][0]["sandboxCapabilities"]["nativeSyncIn"] = json!(false);
    install::apply(&c, &[acme]);
    let admin = c.admin().await;
    lease_reason(&admin, NS, "lease", "nativeSyncIn", "DeclaredFalse").await;
    assert!(!sandcap.log_text().contains("panicked"), "{}", sandcap.log_text());
    delete(&admin, "SandboxProvider", None, "e2e-outage").await;
}
