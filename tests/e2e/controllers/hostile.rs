//! A provider whose `configSchema` is over the compile budget, stored without the webhook: the
//! controllers pay no more than the budget for it, and every other provider and lease resolves as
//! before.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use sandcap_core::config_schema::{BUDGET, Limit};
use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};

use crate::harness::binary::Sandcap;
use crate::harness::cluster::Cluster;
use crate::harness::install;
use crate::harness::objects::{condition, delete, explanation, get};
use crate::harness::waits::{WAIT, eventually, lease_reason};
use crate::support::{Worker, all_true, hostile, lease, provider};

const NS: &str = "e2e-hostile";

/// Waits until provider `name`'s `ConfigSchemasCompiled` has `status` (for its current generation).
async fn schemas_compiled(client: &Client, name: &str, status: &str) -> Value {
    eventually(&format!("provider {name}: ConfigSchemasCompiled {status}"), WAIT, || async {
        let provider = get(client, "SandboxProvider", None, name).await?;
        let current = provider["status"]["observedGeneration"] == provider["metadata"]["generation"];
        condition(&provider["status"], "ConfigSchemasCompiled").filter(|c| current && c["status"] == status).cloned()
    })
    .await
}

/// A provider whose `configSchema` is over the compile budget, stored while the webhook
/// is not registered (the CRD alone admits it), costs the controllers no more than the budget: it
/// is told why, its leases narrow with that reason, sandcap stays up within 128 MiB, and every
/// other provider and lease resolves as before. Registered again, the webhook refuses the schema.
pub async fn a_hostile_provider_stored_without_the_webhook(c: Arc<Cluster>) {
    const PEAK: u64 = 128 * 1024 * 1024;
    let install = install::default_chart(&c, NS).await;
    let worker = Worker::of_contract(ContractVersion::V1);
    // As the chart runs it: webhook and controllers in one process, whose memory is the point.
    let mut sandcap = Sandcap::start(&c, &install, "hostile", &[]);
    sandcap.ready().await;
    let admin = c.admin().await;

    install::apply(
        &c,
        &[provider("e2e-honest", &worker.url, all_true()), lease(NS, "honest-before", "e2e-honest", json!({}))],
    );
    schemas_compiled(&admin, "e2e-honest", "True").await;
    lease_reason(&admin, NS, "honest-before", "persistentProcessSessions", "Granted").await;

    // The same verified worker, so that the schema is all that is wrong with it.
    let mut hostile_provider = provider("e2e-hostile", &worker.url, all_true());
    hostile_provider["spec"]["environmentDrivers"][0]["configSchema"] = hostile::costly_schema();
    let stored = Instant::now();
    install::apply(
        &c,
        &[
            hostile_provider.clone(),
            lease(NS, "hostile-plain", "e2e-hostile", json!({})),
            lease(NS, "hostile-config", "e2e-hostile", json!({"config": {"p0": "a"}})),
        ],
    );
    let compiled = schemas_compiled(&admin, "e2e-hostile", "False").await;
    let message = compiled["message"].as_str().unwrap_or_default();
    assert_eq!(compiled["reason"], "SchemaOverBudget", "{compiled:#}");
    // The first of the schema's patterns in compile order is over the per-pattern limit.
    let over = format!("exceeds the compile budget: {}", Limit::PatternSize { max: BUDGET.pattern_bytes });
    assert!(
        message.starts_with("driver kubernetes: configSchema.patternProperties[") && message.ends_with(&over),
        "the message does not name the path and the limit: {compiled:#}"
    );
    let status = get(&admin, "SandboxProvider", None, "e2e-hostile").await.expect("provider")["status"].clone();
    assert_eq!(condition(&status, "WorkerVerified").map(|c| &c["status"]), Some(&json!("True")), "{status:#}");
    its_leases_grant_nothing(&admin, &over).await;
    let narrowed_after = stored.elapsed();

    // The honest provider and its leases are unaffected, a lease created now included.
    schemas_compiled(&admin, "e2e-honest", "True").await;
    lease_reason(&admin, NS, "honest-before", "persistentProcessSessions", "Granted").await;
    let created = Instant::now();
    install::apply(&c, &[lease(NS, "honest-after", "e2e-honest", json!({"config": {"apiToken": "long-enough"}}))]);
    lease_reason(&admin, NS, "honest-after", "persistentProcessSessions", "Granted").await;
    let resolved_after = created.elapsed();
    assert!(resolved_after < Duration::from_secs(10), "an honest lease took {resolved_after:?} to resolve");

    assert!(sandcap.wait_exit(Duration::ZERO).is_none(), "sandcap exited:\n{}", sandcap.log_text());
    assert!(sandcap.problems().is_empty(), "sandcap logged:\n{}", sandcap.problems().join("\n"));
    let peak = sandcap.peak_rss();
    println!("hostile provider: ConfigSchemasCompiled False: {message}");
    println!(
        "hostile provider: leases narrowed {narrowed_after:.1?} after it was stored, an honest lease resolved in \
         {resolved_after:.1?}; sandcap peak RSS {:.1} MiB",
        peak as f64 / 1048576.0
    );
    assert!(peak <= PEAK, "sandcap peaked at {peak} bytes, over {PEAK}");

    // With the webhook registered, the same schema is refused before it is stored.
    let _registration = install.register_webhook(&c, sandcap.webhook_port, &c.ca.pem);
    hostile_provider["metadata"]["name"] = json!("e2e-hostile-again");
    let created = c.kubectl_stdin(&["create", "-f", "-"], &hostile_provider.to_string());
    let stderr = String::from_utf8_lossy(&created.stderr);
    assert!(!created.status.success(), "the webhook admitted the hostile provider");
    assert!(
        stderr.contains("denied the request")
            && stderr.contains(".configSchema.patternProperties[")
            && stderr.contains(&over),
        "{stderr}"
    );
    assert!(get(&admin, "SandboxProvider", None, "e2e-hostile-again").await.is_none());
    assert!(sandcap.problems().is_empty(), "sandcap logged:\n{}", sandcap.problems().join("\n"));
    for name in ["e2e-hostile", "e2e-honest"] {
        delete(&admin, "SandboxProvider", None, name).await;
    }
}

/// Each of the hostile provider's leases grants nothing, saying why (`over`: the budget's words).
async fn its_leases_grant_nothing(admin: &Client, over: &str) {
    for name in ["hostile-plain", "hostile-config"] {
        // Today's rules refuse a schema over budget, so the provider grants nothing (fail closed),
        // and each lease still says what its config came to.
        let narrowed = lease_reason(admin, NS, name, "persistentProcessSessions", "ProviderNotValid").await;
        let config = condition(&narrowed, "ConfigResolved").expect("ConfigResolved");
        assert_eq!(
            (&config["status"], &config["reason"]),
            (&json!("False"), &json!("SchemaOverBudget")),
            "{narrowed:#}"
        );
        assert!(config["message"].as_str().unwrap_or_default().ends_with(over), "{narrowed:#}");
        for capability in ["nativeSyncIn", "incrementalSessionOutput"] {
            let (reason, message) = explanation(&narrowed, capability).unwrap_or_default();
            assert_eq!(reason, "ProviderNotValid", "{narrowed:#}");
            assert!(message.contains("exceeds the compile budget"), "{narrowed:#}");
        }
    }
}
