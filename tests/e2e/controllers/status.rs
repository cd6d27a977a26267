//! A provider's and its leases' status through the real apiserver, with exactly the chart's RBAC:
//! every narrowing, a `configFrom` Secret's life, Secrets by consent, a refused config named
//! without the Secret's keys, a declaration change published, a provider re-created, and a worker
//! that stops.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};

use crate::harness::binary::{Sandcap, sandcap};
use crate::harness::cluster::Cluster;
use crate::harness::install::{self, Install};
use crate::harness::objects::{condition, delete, explanation, get};
use crate::harness::waits::{WAIT, eventually, lease_reason};
use crate::support::{Worker, all_true, lease, ok, provider, secret};

const NS: &str = "e2e-controllers";
const OUTSIDE: &str = "e2e-outside";

pub async fn status_narrowing_and_recovery_with_the_charts_rbac(c: Arc<Cluster>) {
    install::crds(&c);
    let install = Install::chart(&c, json!({"secretNamespaces": [NS]})).await;
    let worker = Worker::of_contract(ContractVersion::V1);
    let sandcap = Sandcap::start(
        &c,
        &install,
        "controllers",
        &[("SANDCAP_CONTROLLERS_ONLY", "true"), ("SANDCAP_PROBE_INTERVAL", "2s"), ("SANDCAP_PROBE_TIMEOUT", "1s")],
    );
    let admin = c.admin().await;

    provider_status_and_columns(&c, &admin, &worker).await;
    every_lease_narrowing(&c, &admin).await;
    let missing = a_config_secrets_life(&c, &admin).await;
    secrets_by_consent(&c, &admin, &missing).await;
    a_refused_config_names_no_key_of_the_secret(&c, &admin, &worker).await;
    a_declaration_change_is_published(&c, &admin, &worker).await;
    a_recreated_provider_is_not_the_pinned_one(&c, &admin, &worker).await;
    a_stopped_worker_turns_everything_off(&c, &admin, worker, &sandcap).await;

    assert!(sandcap.problems().is_empty(), "sandcap logged:\n{}", sandcap.problems().join("\n"));
    delete(&admin, "SandboxProvider", None, "e2e-acme").await;
}

/// Provider status, `kubectl wait`, and the printer columns.
async fn provider_status_and_columns(c: &Cluster, admin: &Client, worker: &Worker) {
    install::apply(c, &[provider("e2e-acme", &worker.url, all_true())]);
    ok("wait Ready", c.kubectl(&["wait", "--for=condition=Ready", "--timeout=30s", "sbp/e2e-acme"]));
    let status = get(admin, "SandboxProvider", None, "e2e-acme").await.expect("provider")["status"].clone();
    assert_eq!(status["worker"]["probe"], "Succeeded", "{status:#}");
    assert_eq!(status["drivers"][0]["capabilities"]["reusableLeases"], true, "{status:#}");
    let columns = ok("get sbp", c.kubectl(&["get", "sbp", "e2e-acme"]));
    assert!(columns.contains("Succeeded") && columns.contains("True"), "{columns}");
}

/// Every lease narrowing.
async fn every_lease_narrowing(c: &Cluster, admin: &Client) {
    install::apply(
        c,
        &[
            lease(NS, "ephemeral", "e2e-acme", json!({})),
            lease(NS, "reuse", "e2e-acme", json!({"policy": "ReuseByEnvironment", "environment": "env-7"})),
            lease(NS, "job", "e2e-acme", json!({"backend": "job"})),
            lease(
                NS,
                "workload",
                "e2e-acme",
                json!({"workloadRef": {"apiVersion": "batch/v1", "kind": "Job", "name": "j"}}),
            ),
            lease(NS, "no-sync", "e2e-acme", json!({"nativeFileSyncUnsupported": true})),
            lease(NS, "bad-config", "e2e-acme", json!({"config": {"apiToken": "short"}})),
            lease(
                NS,
                "from-secret",
                "e2e-acme",
                json!({"configFrom": [{"secretKeyRef": {"name": "creds", "key": "config.json"}}]}),
            ),
            lease(NS, "orphan", "e2e-nobody", json!({})),
        ],
    );
    lease_reason(admin, NS, "ephemeral", "reusableLeases", "NarrowedByLeasePolicy").await;
    let reuse = lease_reason(admin, NS, "reuse", "reusableLeases", "Granted").await;
    assert_eq!(reuse["effectivePolicy"], "ReuseByEnvironment");
    assert_eq!(reuse["pinned"]["pluginKey"], "acme.kubernetes-sandbox-provider");
    lease_reason(admin, NS, "job", "nativeSyncIn", "NarrowedByJobBackend").await;
    lease_reason(admin, NS, "workload", "nativeSyncOut", "NarrowedByJobBackend").await;
    lease_reason(admin, NS, "no-sync", "nativeSyncIn", "NarrowedByNativeFileSyncUnsupported").await;
    lease_reason(admin, NS, "bad-config", "persistentProcessSessions", "NarrowedByConfigResolution").await;
    lease_reason(admin, NS, "orphan", "independentControlCommands", "PluginIdentityFailed").await;
}

/// A `configFrom` Secret missing -> narrowed; created -> recovered; broken -> narrowed, never
/// quoted; deleted -> narrowed. Returns the status that said it was missing.
async fn a_config_secrets_life(c: &Cluster, admin: &Client) -> Value {
    let missing =
        lease_reason(admin, NS, "from-secret", "incrementalSessionOutput", "NarrowedByConfigResolution").await;
    assert!(explanation(&missing, "incrementalSessionOutput").unwrap().1.contains("creds"), "{missing:#}");
    install::apply(c, &[secret(NS, "creds", "config.json", r#"{"apiToken": "s3cr3t-token-value"}"#, true)]);
    lease_reason(admin, NS, "from-secret", "incrementalSessionOutput", "Granted").await;
    install::apply(c, &[secret(NS, "creds", "config.json", "s3cr3t-token-value not json", true)]);
    let broken =
        lease_reason(admin, NS, "from-secret", "persistentProcessSessions", "NarrowedByConfigResolution").await;
    assert!(!broken.to_string().contains("s3cr3t"), "a Secret value reached the status: {broken:#}");
    delete(admin, "Secret", Some(NS), "creds").await;
    install::apply(c, &[secret(NS, "creds", "config.json", r#"{"apiToken": "s3cr3t-token-value"}"#, true)]);
    lease_reason(admin, NS, "from-secret", "persistentProcessSessions", "Granted").await;
    missing
}

/// Secrets by consent: unlabelled, or outside --secret-namespaces, reads as missing (the same
/// message as `missing`), and sandcap never asks the apiserver for them.
async fn secrets_by_consent(c: &Cluster, admin: &Client, missing: &Value) {
    install::namespaces(c, &[OUTSIDE]);
    install::apply(
        c,
        &[
            secret(NS, "plain", "config.json", r#"{"apiToken": "s3cr3t-token-value"}"#, false),
            secret(OUTSIDE, "creds", "config.json", r#"{"apiToken": "s3cr3t-token-value"}"#, true),
            lease(
                NS,
                "unlabelled",
                "e2e-acme",
                json!({"configFrom": [{"secretKeyRef": {"name": "plain", "key": "config.json"}}]}),
            ),
            lease(
                OUTSIDE,
                "outside",
                "e2e-acme",
                json!({"configFrom": [{"secretKeyRef": {"name": "creds", "key": "config.json"}}]}),
            ),
        ],
    );
    let missing_message = explanation(missing, "persistentProcessSessions").unwrap().1;
    let unlabelled =
        lease_reason(admin, NS, "unlabelled", "persistentProcessSessions", "NarrowedByConfigResolution").await;
    assert_eq!(
        explanation(&unlabelled, "persistentProcessSessions").unwrap().1,
        missing_message.replace("creds", "plain")
    );
    let outside =
        lease_reason(admin, OUTSIDE, "outside", "persistentProcessSessions", "NarrowedByConfigResolution").await;
    assert_eq!(explanation(&outside, "persistentProcessSessions").unwrap().1, missing_message);
    let secret_requests: Vec<String> = c
        .audit()
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "secrets"
                && e["user"]["username"].as_str().is_some_and(|u| u.ends_with(":sandcap"))
        })
        .map(|e| format!("{} {} {}", e["verb"], e["objectRef"]["namespace"], e["requestURI"]))
        .collect();
    assert!(!secret_requests.is_empty(), "the audit log shows no Secret watch at all");
    for request in &secret_requests {
        assert!(
            request.contains(&format!("\"{NS}\"")) && request.contains("sandcap.dev%2Fconfig-source%3Dtrue"),
            "{request}"
        );
        assert!(!request.starts_with("\"get\""), "a Secret was fetched: {request}");
    }
}

/// A config the schema refuses is named by the schema's keyword, never by a key only the
/// Secret holds: whoever may view the lease, its Events or `explain` may not read the Secret.
async fn a_refused_config_names_no_key_of_the_secret(c: &Cluster, admin: &Client, worker: &Worker) {
    const KEY: &str = "zebraQuokkaPrivateKeyName";
    let mut keyed = provider("e2e-keys", &worker.url, all_true());
    keyed["spec"]["environmentDrivers"][0]["configSchema"] =
        json!({"type": "object", "additionalProperties": {"type": "string"}});
    let from_keyed = json!({"configFrom": [{"secretKeyRef": {"name": "keyed", "key": "config.json"}}]});
    install::apply(
        c,
        &[
            keyed,
            secret(NS, "keyed", "config.json", &format!(r#"{{"{KEY}": 7}}"#), true),
            lease(NS, "keyed", "e2e-keys", from_keyed),
        ],
    );
    let keyed = lease_reason(admin, NS, "keyed", "persistentProcessSessions", "NarrowedByConfigResolution").await;
    let config = condition(&keyed, "ConfigResolved").expect("ConfigResolved");
    assert_eq!(
        config["message"],
        "the resolved config fails the driver's configSchema at configSchema.additionalProperties.type",
        "{keyed:#}"
    );
    let events = ok("get events", c.kubectl(&["get", "events.events.k8s.io", "-n", NS, "-o", "json"]));
    let explained = sandcap(c, &["explain", "lease", "-n", NS, "keyed", "-o", "json"]);
    assert!(explained.status.success(), "{explained:?}");
    for (what, shown) in [
        ("status", keyed.to_string()),
        ("Events", events),
        ("explain", String::from_utf8_lossy(&explained.stdout).into_owned()),
    ] {
        assert!(!shown.contains(KEY), "the Secret's key reached the lease's {what}: {shown}");
    }
    delete(admin, "SandboxProvider", None, "e2e-keys").await;
}

/// A declaration change is published with an Event and reaches the leases.
async fn a_declaration_change_is_published(c: &Cluster, admin: &Client, worker: &Worker) {
    install::apply(c, &[provider("e2e-acme", &worker.url, json!({"reusableLeases": true, "nativeSyncIn": false}))]);
    lease_reason(admin, NS, "reuse", "nativeSyncIn", "DeclaredFalse").await;
    let event = eventually("a CapabilitiesRevoked Event", WAIT, || async {
        let events =
            ok("get events", c.kubectl(&["get", "events.events.k8s.io", "-A", "-o", "json", "--show-managed-fields"]));
        let events: Value = serde_json::from_str(&events).expect("JSON");
        events["items"]
            .as_array()?
            .iter()
            .find(|e| e["reason"] == "CapabilitiesRevoked" && e["regarding"]["name"] == "e2e-acme")
            .cloned()
    })
    .await;
    assert!(event["note"].as_str().unwrap_or_default().contains("nativeSyncIn"), "{event:#}");
    // Where kube's Recorder puts a cluster-scoped object's Events, and the one namespace in which
    // the chart grants them.
    assert_eq!(event["metadata"]["namespace"], "default", "{event:#}");
    let managers: Vec<&str> =
        event["metadata"]["managedFields"].as_array().unwrap().iter().filter_map(|m| m["manager"].as_str()).collect();
    assert_eq!(managers, ["sandcap"], "the Event's field managers");
}

/// Provider deleted and re-created: pinned leases stay all-off; a lease created now pins the new
/// provider.
async fn a_recreated_provider_is_not_the_pinned_one(c: &Cluster, admin: &Client, worker: &Worker) {
    delete(admin, "SandboxProvider", None, "e2e-acme").await;
    lease_reason(admin, NS, "reuse", "persistentProcessSessions", "PluginIdentityFailed").await;
    install::apply(c, &[provider("e2e-acme", &worker.url, all_true())]);
    ok("wait Ready", c.kubectl(&["wait", "--for=condition=Ready", "--timeout=30s", "sbp/e2e-acme"]));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let recreated = lease_reason(admin, NS, "reuse", "persistentProcessSessions", "PluginIdentityFailed").await;
    assert!(explanation(&recreated, "persistentProcessSessions").unwrap().1.contains("uid"), "{recreated:#}");
    // A lease created now pins the new provider.
    install::apply(c, &[lease(NS, "fresh", "e2e-acme", json!({}))]);
    lease_reason(admin, NS, "fresh", "persistentProcessSessions", "Granted").await;
}

/// The worker stops: the probe fails, the provider and its leases turn off. The status says
/// only the coarse class; the log says the rest.
async fn a_stopped_worker_turns_everything_off(c: &Cluster, admin: &Client, worker: Worker, sandcap: &Sandcap) {
    let url = worker.url.clone();
    drop(worker);
    ok("wait probe", c.kubectl(&["wait", "--for=condition=WorkerVerified=false", "--timeout=30s", "sbp/e2e-acme"]));
    lease_reason(admin, NS, "fresh", "persistentProcessSessions", "WorkerNotVerified").await;
    let status = get(admin, "SandboxProvider", None, "e2e-acme").await.expect("provider")["status"].clone();
    let said = format!("probe of {url} failed: the worker is unreachable; sandcap's log has the detail");
    assert_eq!(status["worker"]["message"], said, "{status:#}");
    assert_eq!(condition(&status, "WorkerVerified").expect("WorkerVerified")["message"], said);
    let detail = format!("probe of {url} failed: cannot connect: connection refused");
    assert!(sandcap.log_text().contains(&detail), "the log lacks {detail}:\n{}", sandcap.log_text());
}
