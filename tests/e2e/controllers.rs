//! The controllers through the real apiserver, running with exactly the chart's RBAC.

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use sandcap::config_schema::{BUDGET, Limit};
use sandcap::versions::ContractVersion;
use serde_json::{Value, json};

use crate::cluster::Cluster;
use crate::install::{self, Install, Sandcap, eventually, ok};
use crate::support::{Worker, all_true, hostile, lease, provider, secret};

const WAIT: Duration = Duration::from_secs(30);

pub fn resource(kind: &str) -> ApiResource {
    let gvk = match kind {
        "SandboxProvider" | "SandboxLease" => GroupVersionKind::gvk("sandcap.dev", "v1alpha1", kind),
        "Secret" => GroupVersionKind::gvk("", "v1", kind),
        "Event" => GroupVersionKind::gvk("events.k8s.io", "v1", kind),
        other => panic!("no resource for {other}"),
    };
    ApiResource::from_gvk(&gvk)
}

fn api(client: &Client, kind: &str, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource(kind)),
        None => Api::all_with(client.clone(), &resource(kind)),
    }
}

/// The object as JSON, or `None` if it does not exist.
pub async fn get(client: &Client, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
    let object = api(client, kind, namespace).get_opt(name).await.expect("GET answers")?;
    Some(serde_json::to_value(object).expect("JSON"))
}

pub async fn delete(client: &Client, kind: &str, namespace: Option<&str>, name: &str) {
    let _ = api(client, kind, namespace).delete(name, &DeleteParams::default()).await;
}

/// `(reason, message)` of `capability` in a status's explanations.
pub fn explanation(status: &Value, capability: &str) -> Option<(String, String)> {
    status["explanations"].as_array()?.iter().find(|e| e["capability"] == capability).map(|e| {
        (e["reason"].as_str().unwrap_or_default().to_string(), e["message"].as_str().unwrap_or_default().to_string())
    })
}

/// Waits until the lease's `capability` has `reason` (for the lease's current generation).
pub async fn lease_reason(client: &Client, namespace: &str, name: &str, capability: &str, reason: &str) -> Value {
    let what = format!("lease {namespace}/{name}: {capability} {reason}");
    eventually(&what, WAIT, || async {
        let lease = get(client, "SandboxLease", Some(namespace), name).await?;
        let status = &lease["status"];
        (explanation(status, capability)?.0 == reason
            && status["observedGeneration"] == lease["metadata"]["generation"])
            .then(|| status.clone())
    })
    .await
}

pub async fn status_narrowing_and_recovery_with_the_charts_rbac(c: Arc<Cluster>) {
    const NS: &str = "e2e-controllers";
    const OUTSIDE: &str = "e2e-outside";
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

    // Provider status, `kubectl wait`, and the printer columns.
    install::apply(&c, &[provider("e2e-acme", &worker.url, all_true())]);
    ok("wait Ready", c.kubectl(&["wait", "--for=condition=Ready", "--timeout=30s", "sbp/e2e-acme"]));
    let status = get(&admin, "SandboxProvider", None, "e2e-acme").await.expect("provider")["status"].clone();
    assert_eq!(status["worker"]["probe"], "Succeeded", "{status:#}");
    assert_eq!(status["drivers"][0]["capabilities"]["reusableLeases"], true, "{status:#}");
    let columns = ok("get sbp", c.kubectl(&["get", "sbp", "e2e-acme"]));
    assert!(columns.contains("Succeeded") && columns.contains("True"), "{columns}");

    // Every lease narrowing.
    install::apply(
        &c,
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
    lease_reason(&admin, NS, "ephemeral", "reusableLeases", "NarrowedByLeasePolicy").await;
    let reuse = lease_reason(&admin, NS, "reuse", "reusableLeases", "Granted").await;
    assert_eq!(reuse["effectivePolicy"], "ReuseByEnvironment");
    assert_eq!(reuse["pinned"]["pluginKey"], "acme.kubernetes-sandbox-provider");
    lease_reason(&admin, NS, "job", "nativeSyncIn", "NarrowedByJobBackend").await;
    lease_reason(&admin, NS, "workload", "nativeSyncOut", "NarrowedByJobBackend").await;
    lease_reason(&admin, NS, "no-sync", "nativeSyncIn", "NarrowedByNativeFileSyncUnsupported").await;
    lease_reason(&admin, NS, "bad-config", "persistentProcessSessions", "NarrowedByConfigResolution").await;
    lease_reason(&admin, NS, "orphan", "independentControlCommands", "PluginIdentityFailed").await;

    // Secret missing -> narrowed; created -> recovered; broken -> narrowed, never quoted; deleted -> narrowed.
    let missing =
        lease_reason(&admin, NS, "from-secret", "incrementalSessionOutput", "NarrowedByConfigResolution").await;
    assert!(explanation(&missing, "incrementalSessionOutput").unwrap().1.contains("creds"), "{missing:#}");
    install::apply(&c, &[secret(NS, "creds", "config.json", r#"{"apiToken": "s3cr3t-token-value"}"#, true)]);
    lease_reason(&admin, NS, "from-secret", "incrementalSessionOutput", "Granted").await;
    install::apply(&c, &[secret(NS, "creds", "config.json", "s3cr3t-token-value not json", true)]);
    let broken =
        lease_reason(&admin, NS, "from-secret", "persistentProcessSessions", "NarrowedByConfigResolution").await;
    assert!(!broken.to_string().contains("s3cr3t"), "a Secret value reached the status: {broken:#}");
    delete(&admin, "Secret", Some(NS), "creds").await;
    install::apply(&c, &[secret(NS, "creds", "config.json", r#"{"apiToken": "s3cr3t-token-value"}"#, true)]);
    lease_reason(&admin, NS, "from-secret", "persistentProcessSessions", "Granted").await;

    // Secrets by consent: unlabelled, or outside --secret-namespaces, reads as missing (the same
    // message), and sandcap never asks the apiserver for them.
    install::namespaces(&c, &[OUTSIDE]);
    install::apply(
        &c,
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
    let missing_message = explanation(&missing, "persistentProcessSessions").unwrap().1;
    let unlabelled =
        lease_reason(&admin, NS, "unlabelled", "persistentProcessSessions", "NarrowedByConfigResolution").await;
    assert_eq!(
        explanation(&unlabelled, "persistentProcessSessions").unwrap().1,
        missing_message.replace("creds", "plain")
    );
    let outside =
        lease_reason(&admin, OUTSIDE, "outside", "persistentProcessSessions", "NarrowedByConfigResolution").await;
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

    // A config the schema refuses is named by the schema's keyword, never by a key only the
    // Secret holds: whoever may view the lease, its Events or `explain` may not read the Secret.
    const KEY: &str = "zebraQuokkaPrivateKeyName";
    let mut keyed = provider("e2e-keys", &worker.url, all_true());
    keyed["spec"]["environmentDrivers"][0]["configSchema"] =
        json!({"type": "object", "additionalProperties": {"type": "string"}});
    let from_keyed = json!({"configFrom": [{"secretKeyRef": {"name": "keyed", "key": "config.json"}}]});
    install::apply(
        &c,
        &[
            keyed,
            secret(NS, "keyed", "config.json", &format!(r#"{{"{KEY}": 7}}"#), true),
            lease(NS, "keyed", "e2e-keys", from_keyed),
        ],
    );
    let keyed = lease_reason(&admin, NS, "keyed", "persistentProcessSessions", "NarrowedByConfigResolution").await;
    let config = condition(&keyed, "ConfigResolved").expect("ConfigResolved");
    assert_eq!(
        config["message"],
        "the resolved config fails the driver's configSchema at configSchema.additionalProperties.type",
        "{keyed:#}"
    );
    let events = ok("get events", c.kubectl(&["get", "events.events.k8s.io", "-n", NS, "-o", "json"]));
    let explained = self::sandcap(&c, &["explain", "lease", "-n", NS, "keyed", "-o", "json"]);
    assert!(explained.status.success(), "{explained:?}");
    for (what, shown) in [
        ("status", keyed.to_string()),
        ("Events", events),
        ("explain", String::from_utf8_lossy(&explained.stdout).into_owned()),
    ] {
        assert!(!shown.contains(KEY), "the Secret's key reached the lease's {what}: {shown}");
    }
    delete(&admin, "SandboxProvider", None, "e2e-keys").await;

    // A declaration change is published with an Event and reaches the leases.
    install::apply(&c, &[provider("e2e-acme", &worker.url, json!({"reusableLeases": true, "nativeSyncIn": false}))]);
    lease_reason(&admin, NS, "reuse", "nativeSyncIn", "DeclaredFalse").await;
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

    // Provider deleted and re-created: pinned leases stay all-off.
    delete(&admin, "SandboxProvider", None, "e2e-acme").await;
    lease_reason(&admin, NS, "reuse", "persistentProcessSessions", "PluginIdentityFailed").await;
    install::apply(&c, &[provider("e2e-acme", &worker.url, all_true())]);
    ok("wait Ready", c.kubectl(&["wait", "--for=condition=Ready", "--timeout=30s", "sbp/e2e-acme"]));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let recreated = lease_reason(&admin, NS, "reuse", "persistentProcessSessions", "PluginIdentityFailed").await;
    assert!(explanation(&recreated, "persistentProcessSessions").unwrap().1.contains("uid"), "{recreated:#}");
    // A lease created now pins the new provider.
    install::apply(&c, &[lease(NS, "fresh", "e2e-acme", json!({}))]);
    lease_reason(&admin, NS, "fresh", "persistentProcessSessions", "Granted").await;

    // The worker stops: the probe fails, the provider and its leases turn off. The status says
    // only the coarse class; the log says the rest.
    let url = worker.url.clone();
    drop(worker);
    ok("wait probe", c.kubectl(&["wait", "--for=condition=WorkerVerified=false", "--timeout=30s", "sbp/e2e-acme"]));
    lease_reason(&admin, NS, "fresh", "persistentProcessSessions", "WorkerNotVerified").await;
    let status = get(&admin, "SandboxProvider", None, "e2e-acme").await.expect("provider")["status"].clone();
    let said = format!("probe of {url} failed: the worker is unreachable; sandcap's log has the detail");
    assert_eq!(status["worker"]["message"], said, "{status:#}");
    assert_eq!(condition(&status, "WorkerVerified").expect("WorkerVerified")["message"], said);
    let detail = format!("probe of {url} failed: cannot connect: connection refused");
    assert!(sandcap.log_text().contains(&detail), "the log lacks {detail}:\n{}", sandcap.log_text());

    assert!(sandcap.problems().is_empty(), "sandcap logged:\n{}", sandcap.problems().join("\n"));
    delete(&admin, "SandboxProvider", None, "e2e-acme").await;
}

/// Waits until every lease in `names` has `reason` for `capability`.
pub async fn all_leases(client: &Client, namespace: &str, names: &[String], capability: &str, reason: &str) {
    for name in names {
        lease_reason(client, namespace, name, capability, reason).await;
    }
}

/// The holder of the controllers' leader Lease.
pub async fn holder(client: &Client) -> Option<String> {
    let api = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), install::NAMESPACE);
    api.get_opt("sandcap-controller").await.ok()??.spec?.holder_identity
}

const ELECTED: [(&str, &str); 1] = [("SANDCAP_CONTROLLERS_ONLY", "true")];

/// Finding 1 of the end-to-end issue: after a restart, leases stopped following their provider.
pub async fn leases_follow_their_provider_after_a_restart(c: Arc<Cluster>) {
    const NS: &str = "e2e-restart";
    install::crds(&c);
    let install = Install::chart(&c, json!({})).await;
    install::namespaces(&c, &[NS]);
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
    install::crds(&c);
    let install = Install::chart(&c, json!({})).await;
    install::namespaces(&c, &[NS]);
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
    install::crds(&c);
    let install = Install::chart(&c, json!({})).await;
    install::namespaces(&c, &[NS]);
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

/// `sandcap ARGS` as admin.
pub fn sandcap(c: &Cluster, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandcap"))
        .args(args)
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .expect("sandcap runs")
}

/// The condition `kind` of a status, if present.
pub fn condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status["conditions"].as_array()?.iter().find(|c| c["type"] == kind)
}

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
    const NS: &str = "e2e-hostile";
    const PEAK: u64 = 128 * 1024 * 1024;
    install::crds(&c);
    let install = Install::chart(&c, json!({})).await;
    install::namespaces(&c, &[NS]);
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
    for name in ["hostile-plain", "hostile-config"] {
        // Today's rules refuse a schema over budget, so the provider grants nothing (fail closed),
        // and each lease still says what its config came to.
        let narrowed = lease_reason(&admin, NS, name, "persistentProcessSessions", "ProviderNotValid").await;
        let config = condition(&narrowed, "ConfigResolved").expect("ConfigResolved");
        assert_eq!(
            (&config["status"], &config["reason"]),
            (&json!("False"), &json!("SchemaOverBudget")),
            "{narrowed:#}"
        );
        assert!(config["message"].as_str().unwrap_or_default().ends_with(&over), "{narrowed:#}");
        for capability in ["nativeSyncIn", "incrementalSessionOutput"] {
            let (reason, message) = explanation(&narrowed, capability).unwrap_or_default();
            assert_eq!(reason, "ProviderNotValid", "{narrowed:#}");
            assert!(message.contains("exceeds the compile budget"), "{narrowed:#}");
        }
    }
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
