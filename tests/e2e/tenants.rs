//! What a tenant's leases and Secrets cost the leader: many leases with a config at its bound, a
//! few stored over it without the webhook (as before the bound), and labelled Secrets of 1 MiB
//! keep sandcap within the chart's memory limit, and what is over the bound fails closed by name.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use sandcap_core::api::{CONFIG_TOO_LARGE, MAX_CONFIG_BYTES};
use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};

use crate::harness::binary::Sandcap;
use crate::harness::cluster::Cluster;
use crate::harness::install::{self, Install};
use crate::harness::objects::{condition, explanation, resource};
use crate::harness::waits::eventually;
use crate::support::{Worker, all_true, lease, ok, provider, secret};

const NS: &str = "e2e-tenants";
const PROVIDER: &str = "e2e-tenants";
/// Leases with a config at the bound, and leases stored over it.
const AT_BOUND: usize = 150;
const OVER_BOUND: usize = 60;
/// The chart's memory limit (`resources.limits.memory`), and the part of it sandcap may reach here.
const CHART_LIMIT: u64 = 256 * 1024 * 1024;
const PEAK: u64 = CHART_LIMIT / 2;

/// `{"backend":"aa..."}` of `bytes` bytes as JSON, as the provider's `configSchema` admits it.
fn config_of(bytes: usize) -> Value {
    json!({"backend": "a".repeat(bytes - r#"{"backend":""}"#.len())})
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

/// Creates `objects` through the admin's client, eight at a time (no kubectl: its last-applied
/// annotation would repeat each config, and refuse one over 256 KiB).
async fn create(c: &Cluster, objects: Vec<Value>) {
    let admin = c.admin().await;
    futures::stream::iter(objects)
        .map(|object| {
            let kind = object["kind"].as_str().expect("a kind").to_string();
            let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource(&kind));
            async move {
                let object: DynamicObject = serde_json::from_value(object).expect("an object");
                api.create(&PostParams::default(), &object).await.map(drop)
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await
        .expect("every object is created");
}

pub async fn leases_at_the_config_bound_keep_the_leader_within_its_limit(c: Arc<Cluster>) {
    install::crds(&c);
    let install = Install::chart(&c, json!({"secretNamespaces": [NS]})).await;
    install::namespaces(&c, &[NS]);
    let worker = Worker::of_contract(ContractVersion::V1);
    // As the chart runs it: webhook and controllers in one process. The webhook is registered only
    // at the end, so that what is over the bound is stored as it was before the bound.
    let mut sandcap = Sandcap::start(&c, &install, "tenants", &[]);
    sandcap.ready().await;
    install::apply(&c, &[provider(PROVIDER, &worker.url, all_true())]);
    let started = sandcap.rss();

    let big = "7".repeat(1024 * 1024 - 1024);
    let within = "x".repeat(MAX_CONFIG_BYTES);
    let mut secret_many = secret(NS, "many", "k0", &within, true);
    for i in 1..15 {
        secret_many["stringData"][format!("k{i}")] = json!(within);
    }
    create(&c, vec![secret(NS, "big", "config.json", &big, true), secret_many]).await;
    let mut objects: Vec<Value> = (0..AT_BOUND)
        .map(|i| lease(NS, &format!("at-{i}"), PROVIDER, json!({"config": config_of(MAX_CONFIG_BYTES)})))
        .collect();
    let over = json!({"config": {"apiToken": "s3cr3t".repeat(150_000)}});
    objects.extend((0..OVER_BOUND).map(|i| lease(NS, &format!("over-{i}"), PROVIDER, over.clone())));
    let from = |name: &str, key: &str| json!({"configFrom": [{"secretKeyRef": {"name": name, "key": key}}]});
    objects.push(lease(NS, "from-big", PROVIDER, from("big", "config.json")));
    let created = Instant::now();
    create(&c, objects).await;
    let stored = created.elapsed();

    let admin = c.admin().await;
    let leases: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    let all = AT_BOUND + OVER_BOUND + 1;
    let listed = eventually("every lease resolved", Duration::from_secs(60), || async {
        let list = leases.list(&ListParams::default()).await.ok()?;
        let resolved: Vec<Value> = list
            .items
            .into_iter()
            .map(|l| serde_json::to_value(l).expect("JSON"))
            .filter(|l| l["status"]["observedGeneration"] == l["metadata"]["generation"])
            .collect();
        (resolved.len() == all).then_some(resolved)
    })
    .await;
    let resolved = created.elapsed();
    let peak = sandcap.peak_rss();

    println!(
        "tenants: {AT_BOUND} leases of {MAX_CONFIG_BYTES} bytes of config, {OVER_BOUND} of 900 KB and a lease of a \
         1 MiB Secret (with a Secret of 15 values at the bound) stored in {stored:.1?}, all resolved in \
         {resolved:.1?}; sandcap's RSS {:.1} MiB before them, {:.1} MiB after, peak {:.1} MiB",
        mib(started),
        mib(sandcap.rss()),
        mib(peak)
    );
    let name = |l: &Value| l["metadata"]["name"].as_str().unwrap_or_default().to_string();
    for l in &listed {
        let (status, config) = (&l["status"], condition(&l["status"], "ConfigResolved").expect("ConfigResolved"));
        let shown = |capability| explanation(status, capability).unwrap_or_default();
        if name(l).starts_with("at-") {
            assert_eq!(config["reason"], "ConfigResolved", "{}: {status:#}", name(l));
            assert_eq!(shown("persistentProcessSessions").0, "Granted", "{}: {status:#}", name(l));
        } else if name(l).starts_with("over-") {
            // Stored without the webhook: it breaks today's rules, and grants nothing.
            assert_eq!((&config["reason"], &config["status"]), (&json!("ConfigTooLarge"), &json!("False")));
            assert_eq!(config["message"], format!("spec.config: {CONFIG_TOO_LARGE}"));
            let valid = condition(status, "Valid").expect("Valid");
            assert_eq!(valid["message"], format!("the webhook would refuse it today: spec.config: {CONFIG_TOO_LARGE}"));
            assert_eq!(shown("persistentProcessSessions").0, "LeaseNotValid", "{status:#}");
            assert!(!status.to_string().contains("s3cr3t"), "a value of the config is shown: {status:#}");
        } else {
            assert_eq!(config["reason"], "SecretTooLarge", "{status:#}");
            assert_eq!(config["message"], format!("configFrom Secret big key config.json {CONFIG_TOO_LARGE}"));
            assert_eq!(shown("persistentProcessSessions").0, "NarrowedByConfigResolution", "{status:#}");
        }
    }
    assert!(peak <= PEAK, "sandcap peaked at {:.1} MiB, over {:.1} MiB", mib(peak), mib(PEAK));

    // With the webhook registered, a config over the bound is refused before it is stored.
    let _registration = install.register_webhook(&c, sandcap.webhook_port, &c.ca.pem);
    let over = lease(NS, "refused", PROVIDER, json!({"config": config_of(MAX_CONFIG_BYTES + 1)}));
    let refused = c.kubectl_stdin(&["create", "-f", "-"], &over.to_string());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "the webhook admitted a config over the bound");
    assert!(stderr.contains(&format!("denied the request: spec.config: {CONFIG_TOO_LARGE}")), "{stderr}");

    assert!(sandcap.wait_exit(Duration::ZERO).is_none(), "sandcap exited:\n{}", sandcap.log_text());
    assert!(sandcap.problems().is_empty(), "sandcap logged:\n{}", sandcap.problems().join("\n"));
    drop(sandcap);
    ok("delete the leases", c.kubectl(&["-n", NS, "delete", "sbl", "--all", "--wait=false"]));
    ok("delete the Secrets", c.kubectl(&["-n", NS, "delete", "secret", "big", "many"]));
    ok("delete the provider", c.kubectl(&["delete", "sbp", PROVIDER]));
}
