//! The audit of stored objects through the real apiserver: objects stored with no webhook
//! registered (only the CRD judged them) get `Valid` False naming the problem, count in
//! `sandcap_nonconforming_objects` and get a Warning Event; fixed, they turn True with a Normal
//! Event; and a restart, which judges everything again, writes no status.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};

use crate::harness::binary::Sandcap;
use crate::harness::cluster::Cluster;
use crate::harness::install::{self, Install};
use crate::harness::objects::{delete, get};
use crate::harness::requests::status_patches;
use crate::harness::waits::{eventually, lease_reason};
use crate::support::{Worker, all_true, lease, ok, provider};

const NS: &str = "e2e-audit";
const WAIT: Duration = Duration::from_secs(30);
const ELECTED: [(&str, &str); 1] = [("SANDCAP_CONTROLLERS_ONLY", "true")];

/// Waits until the object's `Valid` condition has `status` for its current generation.
async fn valid(client: &Client, kind: &str, namespace: Option<&str>, name: &str, status: &str) -> Value {
    eventually(&format!("{kind} {name}: Valid {status}"), WAIT, || async {
        let object = get(client, kind, namespace, name).await?;
        let current = object["status"]["observedGeneration"] == object["metadata"]["generation"];
        let conditions = object["status"]["conditions"].as_array()?;
        conditions.iter().find(|c| c["type"] == "Valid" && c["status"] == status).filter(|_| current).cloned()
    })
    .await
}

/// The Events with `reason` about the object `name` (in `namespace`, where its Events land).
fn events(c: &Cluster, namespace: &str, name: &str, reason: &str) -> Vec<Value> {
    let events = ok("get events", c.kubectl(&["get", "events.events.k8s.io", "-n", namespace, "-o", "json"]));
    let events: Value = serde_json::from_str(&events).expect("JSON");
    let items = events["items"].as_array().cloned().unwrap_or_default();
    items.into_iter().filter(|e| e["reason"] == reason && e["regarding"]["name"] == name).collect()
}

/// `sandcap_nonconforming_objects{kind}` as `sandcap` exports it.
async fn nonconforming(sandcap: &Sandcap, kind: &str) -> Option<i64> {
    let metrics = sandcap.metrics().await;
    let prefix = format!("sandcap_nonconforming_objects{{kind=\"{kind}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|n| n.parse().ok())
}

pub async fn objects_stored_without_the_webhook_are_audited(c: Arc<Cluster>) {
    let install = install::default_chart(&c, NS).await;
    let worker = Worker::of_contract(ContractVersion::V1);
    let admin = c.admin().await;
    let typo = stored_without_the_webhook(&c, &worker);
    let sandcap = Sandcap::start(&c, &install, "audit", &ELECTED);
    sandcap.ready().await;
    each_problem_named(&admin).await;
    what_today_refuses_grants_nothing(&admin).await;
    the_valid_column(&c);
    let counted = counted_and_warned(&c, &sandcap).await;
    fixed_turns_true(&c, &admin, &sandcap, typo, counted).await;
    let sandcap = a_restart_writes_nothing(&c, &install, &admin, sandcap, counted).await;

    assert!(sandcap.problems().is_empty(), "sandcap logged:\n{}", sandcap.problems().join("\n"));
    for name in ["fine", "typo", "still-broken"] {
        delete(&admin, "SandboxLease", Some(NS), name).await;
    }
    for name in ["e2e-audit-fine", "e2e-audit-typo", "e2e-audit-still-broken"] {
        delete(&admin, "SandboxProvider", None, name).await;
    }
}

/// No webhook is registered: the CRD alone admits a misspelt field, which it keeps so that
/// the webhook can name it. The fine provider's worker URL is on loopback, which the webhook
/// refuses unless the operator allows it (as sandcap here runs: the audit must judge so too).
/// Returns the provider with a typo.
fn stored_without_the_webhook(c: &Cluster, worker: &Worker) -> Value {
    let fine = provider("e2e-audit-fine", &worker.url, all_true());
    let mut typo = provider("e2e-audit-typo", &worker.url, all_true());
    typo["spec"]["environmentDrivers"][0]["displayname"] = json!("Typo");
    let leases = [
        lease(NS, "fine", "e2e-audit-fine", json!({})),
        lease(NS, "typo", "e2e-audit-fine", json!({"bakend": "job"})),
        lease(
            NS,
            "still-broken",
            "e2e-audit-fine",
            json!({"workloadRef": {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "x"}}),
        ),
    ];
    let mut still_broken = provider("e2e-audit-still-broken", &worker.url, all_true());
    still_broken["spec"]["labels"] = json!({"team": "a"});
    // Misspellings that, read as absent, would grant what their authors switched off.
    let mut misspelt =
        provider("e2e-audit-misspelt", &worker.url, json!({"nativeSyncIn": true, "nativeSyncOut": true}));
    misspelt["spec"]["environmentDrivers"][0]["supportsReusableLeases"] = json!(true);
    misspelt["spec"]["environmentDrivers"][0]["sandboxCapabilites"] = json!({"reusableLeases": false});
    let reuse = json!({"policy": "ReuseByEnvironment", "environment": "e"});
    let fail_closed = [
        lease(NS, "of-misspelt", "e2e-audit-misspelt", reuse.clone()),
        lease(NS, "nfs-typo", "e2e-audit-fine", json!({"nativeFileSyncUnsuported": true})),
    ];
    let mut objects = vec![fine, typo.clone(), still_broken, misspelt];
    objects.extend(leases.iter().cloned());
    objects.extend(fail_closed.iter().cloned());
    install::apply(c, &objects);
    // A Job backend spelt in capitals or with spaces: the CRD refuses it even without the webhook.
    for backend in ["Job", "JOB", " job"] {
        let job = lease(NS, "job-backend", "e2e-audit-fine", json!({"backend": backend}));
        let list = json!({"apiVersion": "v1", "kind": "List", "items": [job]}).to_string();
        let refused = c.kubectl_stdin(&["apply", "--server-side", "--field-manager", "e2e", "-f", "-"], &list);
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success() && said.contains("spec.backend"), "backend {backend:?}: {said}");
    }
    typo
}

/// Each problem named, for both kinds; the fine objects conform.
async fn each_problem_named(admin: &Client) {
    let broken = valid(admin, "SandboxProvider", None, "e2e-audit-typo", "False").await;
    assert_eq!(broken["reason"], "BreaksCurrentRules", "{broken:#}");
    let message = broken["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("the webhook would refuse it today: spec.environmentDrivers[0].displayname: unknown field"),
        "{broken:#}"
    );
    let broken = valid(admin, "SandboxLease", Some(NS), "typo", "False").await;
    let message = broken["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("the webhook would refuse it today: spec.bakend: unknown field"), "{broken:#}");
    valid(admin, "SandboxLease", Some(NS), "still-broken", "False").await;
    let fine = valid(admin, "SandboxProvider", None, "e2e-audit-fine", "True").await;
    assert_eq!(
        (&fine["reason"], &fine["message"]),
        (&json!("Conforms"), &json!("the CRD and the webhook would admit it today")),
        "{fine:#}"
    );
    valid(admin, "SandboxLease", Some(NS), "fine", "True").await;
}

/// Fail closed: what today's rules refuse grants nothing, every capability saying why.
async fn what_today_refuses_grants_nothing(admin: &Client) {
    for (name, problem) in [("typo", "spec.bakend"), ("nfs-typo", "spec.nativeFileSyncUnsuported")] {
        let status = lease_reason(admin, NS, name, "nativeSyncIn", "LeaseNotValid").await;
        all_off(&status, "LeaseNotValid", problem);
        let resolved =
            status["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Resolved")).cloned();
        assert_eq!(
            resolved.map(|c| (c["status"].clone(), c["reason"].clone())),
            Some((json!("False"), json!("LeaseNotValid")))
        );
    }
    let status = lease_reason(admin, NS, "of-misspelt", "reusableLeases", "ProviderNotValid").await;
    all_off(&status, "ProviderNotValid", "sandboxCapabilites");
    assert_eq!(status["effectivePolicy"], "Ephemeral", "{status:#}");
    let misspelt = valid(admin, "SandboxProvider", None, "e2e-audit-misspelt", "False").await;
    assert!(
        misspelt["message"].as_str().is_some_and(|m| m.contains("sandboxCapabilites: unknown field")),
        "{misspelt:#}"
    );
    let provider = get(admin, "SandboxProvider", None, "e2e-audit-misspelt").await.expect("the provider");
    all_off(&provider["status"]["drivers"][0], "ProviderNotValid", "sandboxCapabilites");
    let ready =
        provider["status"]["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready")).cloned();
    assert_eq!(ready.map(|c| c["reason"].clone()), Some(json!("ProviderNotValid")), "{provider:#}");
    // The worker itself answered: only the refusal keeps it all off.
    assert_eq!(provider["status"]["worker"]["probe"], "Succeeded", "{provider:#}");
}

/// Every capability of `status` off with `reason`, its message naming `problem`.
fn all_off(status: &Value, reason: &str, problem: &str) {
    let explanations = status["explanations"].as_array().cloned().unwrap_or_default();
    assert_eq!(explanations.len(), 6, "{status:#}");
    for e in &explanations {
        assert_eq!((&e["granted"], &e["reason"]), (&json!(false), &json!(reason)), "{status:#}");
        assert!(e["message"].as_str().is_some_and(|m| m.contains(problem)), "{status:#}");
    }
}

/// The column, for both kinds.
fn the_valid_column(c: &Cluster) {
    let columns = ok("get sbp", c.kubectl(&["get", "sbp", "e2e-audit-typo", "e2e-audit-fine"]));
    let header: Vec<&str> = columns.lines().next().unwrap_or_default().split_whitespace().collect();
    let at = header.iter().position(|h| *h == "VALID").unwrap_or_else(|| panic!("no VALID column:\n{columns}"));
    let column = |name: &str| columns.lines().find(|l| l.starts_with(name)).map(|l| l.split_whitespace().nth(at));
    assert_eq!((column("e2e-audit-typo"), column("e2e-audit-fine")), (Some(Some("False")), Some(Some("True"))));
    let columns = ok("get sbl", c.kubectl(&["get", "sbl", "-n", NS]));
    assert!(columns.lines().next().is_some_and(|h| h.contains("VALID")), "{columns}");
}

/// Counted, and a Warning Event for each, where the chart lets sandcap write them. Returns the
/// providers and the leases counted.
async fn counted_and_warned(c: &Cluster, sandcap: &Sandcap) -> (i64, i64) {
    let (providers, leases_before) = (
        nonconforming(sandcap, "SandboxProvider").await.expect("the provider gauge"),
        nonconforming(sandcap, "SandboxLease").await.expect("the lease gauge"),
    );
    assert!(providers >= 2 && leases_before >= 2, "{providers} providers, {leases_before} leases");
    for (namespace, name, path) in [
        ("default", "e2e-audit-typo", "displayname"),
        ("default", "e2e-audit-still-broken", "spec.labels"),
        (NS, "typo", "bakend"),
        (NS, "still-broken", "spec.workloadRef.uid"),
    ] {
        let warning = eventually(&format!("a BreaksCurrentRules Event about {name}"), WAIT, || async {
            events(c, namespace, name, "BreaksCurrentRules").pop()
        })
        .await;
        assert_eq!(warning["type"], "Warning", "{warning:#}");
        assert!(warning["note"].as_str().is_some_and(|n| n.contains(path)), "{warning:#}");
    }
    (providers, leases_before)
}

/// Fixed: True again, a Normal Event, one fewer of each kind counted.
async fn fixed_turns_true(
    c: &Cluster,
    admin: &Client,
    sandcap: &Sandcap,
    mut typo: Value,
    (providers, leases_before): (i64, i64),
) {
    typo["spec"]["environmentDrivers"][0].as_object_mut().expect("driver").remove("displayname");
    install::apply(c, &[typo, lease(NS, "typo", "e2e-audit-fine", json!({}))]);
    valid(admin, "SandboxProvider", None, "e2e-audit-typo", "True").await;
    valid(admin, "SandboxLease", Some(NS), "typo", "True").await;
    for (namespace, name) in [("default", "e2e-audit-typo"), (NS, "typo")] {
        let normal = eventually(&format!("a Conforms Event about {name}"), WAIT, || async {
            events(c, namespace, name, "Conforms").pop()
        })
        .await;
        assert_eq!(normal["type"], "Normal", "{normal:#}");
    }
    assert_eq!(nonconforming(sandcap, "SandboxProvider").await, Some(providers - 1));
    assert_eq!(nonconforming(sandcap, "SandboxLease").await, Some(leases_before - 1));
}

/// A restart judges everything again and finds what it found: no status write, no Event.
/// Returns sandcap restarted.
async fn a_restart_writes_nothing(
    c: &Cluster,
    install: &Install,
    admin: &Client,
    mut sandcap: Sandcap,
    (providers, leases_before): (i64, i64),
) -> Sandcap {
    let names = ["e2e-audit-fine", "e2e-audit-typo", "e2e-audit-still-broken", "fine", "typo", "still-broken"];
    // Let the last writes and Events settle before counting.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (before, patches) = (resource_versions(admin).await, status_patches(c, &names));
    let warned = warnings(c);
    sandcap.signal(libc::SIGTERM);
    assert!(sandcap.wait_exit(Duration::from_secs(20)).is_some_and(|s| s.success()), "{}", sandcap.log_text());
    let sandcap = Sandcap::start(c, install, "audit-again", &ELECTED);
    sandcap.ready().await;
    eventually("everything judged again", WAIT, || async {
        let metrics = sandcap.metrics().await;
        let idle = ["SandboxProvider", "SandboxLease"]
            .iter()
            .all(|kind| metrics.contains(&format!("sandcap_reconcile_queue_depth{{kind=\"{kind}\"}} 0")));
        let counted = nonconforming(&sandcap, "SandboxLease").await == Some(leases_before - 1)
            && nonconforming(&sandcap, "SandboxProvider").await == Some(providers - 1);
        (idle && counted).then_some(())
    })
    .await;
    // The last reconciles started may still be finishing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(resource_versions(admin).await, before, "a status was written");
    assert_eq!(status_patches(c, &names), patches, "the audit log shows a status patch");
    assert_eq!(warnings(c), warned, "an Event was repeated");
    sandcap
}

/// The resourceVersions of this scenario's objects.
async fn resource_versions(admin: &Client) -> Vec<Value> {
    let mut versions = Vec::new();
    for (kind, namespace, name) in [
        ("SandboxProvider", None, "e2e-audit-fine"),
        ("SandboxProvider", None, "e2e-audit-typo"),
        ("SandboxProvider", None, "e2e-audit-still-broken"),
        ("SandboxLease", Some(NS), "fine"),
        ("SandboxLease", Some(NS), "typo"),
        ("SandboxLease", Some(NS), "still-broken"),
    ] {
        let object = get(admin, kind, namespace, name).await.expect("the object");
        versions.push(object["metadata"]["resourceVersion"].clone());
    }
    versions
}

/// The Warning Events about the objects that still break today's rules.
fn warnings(c: &Cluster) -> usize {
    events(c, NS, "still-broken", "BreaksCurrentRules").len()
        + events(c, "default", "e2e-audit-still-broken", "BreaksCurrentRules").len()
}
