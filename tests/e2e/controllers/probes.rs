//! What a probe costs when its answer is the one before: nothing a lease reads changes, so no
//! lease is reconciled or written and no Secret is requested.

use std::sync::Arc;
use std::time::Duration;

use sandcap_core::versions::ContractVersion;
use serde_json::json;

use crate::harness::binary::Sandcap;
use crate::harness::cluster::Cluster;
use crate::harness::install::{self, Install};
use crate::harness::objects::delete;
use crate::harness::waits::all_leases;
use crate::support::{Worker, all_true, lease, provider, secret};

/// A probe that returns what it returned before changes nothing a lease reads: no lease is
/// reconciled or written, and no Secret is requested.
pub async fn a_probe_with_the_same_answer_re_resolves_no_lease(c: Arc<Cluster>) {
    const NS: &str = "e2e-quiet";
    install::crds(&c);
    let install = Install::chart(&c, json!({"secretNamespaces": [NS]})).await;
    let worker = Worker::of_contract(ContractVersion::V1);
    let names: Vec<String> = (0..20).map(|i| format!("lease-{i}")).collect();
    let mut objects = vec![
        provider("e2e-quiet", &worker.url, all_true()),
        secret(NS, "creds", "config.json", r#"{"apiToken": "s3cr3t-token-value"}"#, true),
    ];
    let from = json!({"configFrom": [{"secretKeyRef": {"name": "creds", "key": "config.json"}}]});
    objects.extend(names.iter().map(|n| lease(NS, n, "e2e-quiet", from.clone())));
    install::apply(&c, &objects);
    let sandcap = Sandcap::start(
        &c,
        &install,
        "quiet",
        &[("SANDCAP_CONTROLLERS_ONLY", "true"), ("SANDCAP_PROBE_INTERVAL", "1s")],
    );
    let admin = c.admin().await;
    all_leases(&admin, NS, &names, "incrementalSessionOutput", "Granted").await;

    let count = |verb: &str, resource: &str, sub: Option<&str>| {
        c.audit()
            .iter()
            .filter(|e| {
                e["verb"] == verb
                    && e["objectRef"]["resource"] == resource
                    && e["objectRef"]["subresource"].as_str() == sub
                    && e["user"]["username"].as_str().is_some_and(|u| u.ends_with(":sandcap"))
            })
            .count()
    };
    let reconciles = |metrics: &str| {
        metrics.lines().find(|l| l.starts_with("sandcap_reconciles_total{kind=\"SandboxLease\"}")).map(String::from)
    };
    let (lease_writes, provider_writes) =
        (count("patch", "sandboxleases", Some("status")), count("patch", "sandboxproviders", Some("status")));
    let before = reconciles(&sandcap.metrics().await);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        count("patch", "sandboxproviders", Some("status")) > provider_writes,
        "no probe was published in 5 probe intervals"
    );
    assert_eq!(count("patch", "sandboxleases", Some("status")), lease_writes, "a lease was written");
    assert_eq!(count("get", "secrets", None), 0, "a Secret was fetched");
    let metrics = sandcap.metrics().await;
    assert_eq!(reconciles(&metrics), before, "a lease was reconciled");
    // The cost is visible in sandcap's own metrics too.
    assert!(metrics.contains("sandcap_api_requests_total{verb=\"watch\",resource=\"secrets\"}"), "{metrics}");
    assert!(!metrics.contains("sandcap_api_requests_total{verb=\"get\",resource=\"secrets\"}"), "{metrics}");
    assert!(metrics.contains("sandcap_reconcile_queue_depth{kind=\"SandboxLease\"} 0"), "{metrics}");
    // A deleted lease has nothing left to reconcile: it is not counted as waiting.
    delete(&admin, "SandboxLease", Some(NS), &names[0]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let metrics = sandcap.metrics().await;
    assert!(metrics.contains("sandcap_reconcile_queue_depth{kind=\"SandboxLease\"} 0"), "{metrics}");
    delete(&admin, "SandboxProvider", None, "e2e-quiet").await;
}
