//! What a reconcile sends to the apiserver, request by request, through a scripted apiserver
//! (`fixtures/apiserver.rs`): the exact status PATCH, the Events once it is written, and nothing
//! when the status is published already. Times are the reconcile's own `now`: they are replaced
//! by `<now>` before the comparison.

use std::time::Duration;

use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use std::sync::Arc;

use crate::controller::cache::LeaseKey;
use crate::controller::cached::CachedLease;
use crate::controller::engine::Next;
use crate::controller::error::Error;
use crate::controller::fixtures::apiserver::{Answer, Request, Requests, apiserver};
use crate::controller::fixtures::{Parts, context_with, lease, provider};
use crate::controller::lease::reconcile_lease;
use crate::controller::provider::reconcile_provider;
use crate::metrics::Metrics;
use prometheus_client::registry::Registry;
use sandcap_core::api::SandboxLease;

/// A context whose client is the scripted apiserver, its Event publisher running until the
/// returned token is cancelled, and the registry of its metrics.
fn scripted(script: impl IntoIterator<Item = Answer>) -> (Parts, Requests, CancellationToken, Registry) {
    let (client, requests) = apiserver(script);
    let mut registry = Registry::default();
    let mut parts = context_with(client, &Metrics::register(&mut registry));
    let stop = CancellationToken::new();
    tokio::spawn(parts.publisher.take().expect("not spawned yet").run(stop.clone()));
    (parts, requests, stop, registry)
}

/// The requests received within a second, at least `expected` of them if they come.
async fn received(requests: &Requests, expected: usize) -> Vec<Request> {
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen.extend(requests.take());
        if seen.len() >= expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    seen
}

/// `request` as the test compares it: each time of the reconcile's replaced by `<now>`, and an
/// Event's generated name by `<name>`.
fn comparable(request: &Request) -> (String, String, Value) {
    let mut body = request.body.clone();
    times(&mut body);
    if let Some(name) = body.pointer_mut("/metadata/name").filter(|_| request.path.contains("/events")) {
        *name = json!("<name>");
    }
    (request.method.clone(), request.path.clone(), body)
}

/// Replaces every RFC 3339 time in `value` by `<now>`.
fn times(value: &mut Value) {
    match value {
        Value::String(s) if s.len() >= 20 && s.as_bytes().get(10) == Some(&b'T') && s.ends_with('Z') => {
            *s = "<now>".into()
        }
        Value::Array(items) => items.iter_mut().for_each(times),
        Value::Object(map) => map.values_mut().for_each(times),
        _ => {}
    }
}

/// What the apiserver stores of a merge patch of the status: its nulls removed.
fn stored(mut patch: Value) -> Value {
    fn drop_nulls(value: &mut Value) {
        if let Value::Object(map) = value {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
    }
    drop_nulls(&mut patch);
    patch["status"].take()
}

/// A lease of a provider that does not exist, with an unknown key today's webhook refuses.
fn breaking() -> SandboxLease {
    let mut l = lease("team-a", "l").of("p", "k").build();
    l.metadata.resource_version = Some("41".into());
    l.spec.extra.insert("typo".into(), json!(1));
    l
}

/// Reconciles `l` as the lease watch brought it.
async fn reconcile(parts: &mut Parts, l: SandboxLease) -> Result<Next, Error> {
    parts.leases.apply(Event::Apply(l.clone().into()));
    let cached = parts.ctx.caches.leases.get(&LeaseKey::of(&CachedLease::from(l))).expect("kept");
    reconcile_lease(cached, parts.ctx.clone()).await
}

const REFUSED: &str = "the webhook would refuse it today: spec.typo: unknown field (allowed fields: providerRef, \
                       policy, environment, backend, workloadRef, nativeFileSyncUnsupported, config, configFrom)";

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "observedGeneration": 1, "lastTransitionTime": "<now>"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_breaks_todays_rules_gets_one_status_patch_then_one_warning_event() {
    let (mut parts, requests, stop, _) = scripted([Answer::Echo, Answer::Echo]);
    reconcile(&mut parts, breaking()).await.expect("written");
    let seen: Vec<_> = received(&requests, 2).await.iter().map(comparable).collect();
    stop.cancel();
    let explanation = |key: &str| {
        let message =
            format!("the lease breaks today's rules, so nothing is granted (see its Valid condition): {REFUSED}");
        json!({"capability": key, "granted": false, "reason": "LeaseNotValid", "message": message})
    };
    let v1 = [
        "reusableLeases",
        "nativeSyncIn",
        "nativeSyncOut",
        "persistentProcessSessions",
        "independentControlCommands",
        "incrementalSessionOutput",
    ];
    let status = json!({
        "capabilities": {
            "reusableLeases": false, "nativeSyncIn": false, "nativeSyncOut": false,
            "persistentProcessSessions": false, "independentControlCommands": false,
            "incrementalSessionOutput": false,
            // The keys of other contract versions, named null so that none stays behind.
            "concurrentSyncOperations": null, "duplexCommandStream": null, "runnerWebSocketIngress": null
        },
        "conditions": [
            condition("Resolved", "False", "LeaseNotValid",
                      "every capability is off: today's rules refuse the lease (see its Valid condition)"),
            condition("ConfigResolved", "Unknown", "PluginIdentityFailed",
                      "config is resolved once the plugin identity check passes"),
            condition("PluginIdentity", "False", "ProviderNotFound",
                      "provider p does not exist (yet); the lease is not pinned"),
            condition("Valid", "False", "BreaksCurrentRules", REFUSED),
        ],
        "contract": "v1",
        "effectivePolicy": "Ephemeral",
        "explanations": v1.map(explanation),
        "observedGeneration": 1,
        "pinned": null
    });
    let path = "/apis/sandcap.dev/v1alpha1/namespaces/team-a/sandboxleases/l/status?&fieldManager=sandcap";
    let event = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "<name>", "namespace": "team-a"},
        "action": "Validate", "reason": "BreaksCurrentRules", "type": "Warning", "note": REFUSED,
        "eventTime": "<now>", "reportingController": "sandcap", "reportingInstance": "test",
        "regarding": {"apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxLease", "name": "l",
                      "namespace": "team-a", "uid": "team-a-l-uid"}
    });
    assert_eq!(
        seen,
        [
            // Written only over the version it was computed from.
            ("PATCH".into(), path.into(), json!({"metadata": {"resourceVersion": "41"}, "status": status})),
            ("POST".into(), "/apis/events.k8s.io/v1/namespaces/team-a/events?".into(), event),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_status_is_published_sends_nothing() {
    let (mut parts, requests, stop, registry) = scripted([Answer::Echo, Answer::Echo]);
    reconcile(&mut parts, breaking()).await.expect("written");
    let patch = received(&requests, 2).await.remove(0).body;
    // The watch brings the write back; the next reconcile (a restart's, or a resync's) computes
    // the same status.
    let written = SandboxLease { status: serde_json::from_value(stored(patch)).unwrap(), ..breaking() };
    reconcile(&mut parts, written).await.expect("nothing to write");
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.cancel();
    assert_eq!(requests.take(), []);
    // Counted once, however often it is published.
    let text = crate::metrics::encode(&registry);
    let counted: f64 = text
        .lines()
        .filter(|l| l.starts_with("sandcap_lease_capabilities{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(counted, 6.0, "each of contract v1's six capabilities, once: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_write_refused_for_a_stale_read_is_retried_and_records_no_event() {
    let (mut parts, requests, stop, _) = scripted([Answer::Refuse(409)]);
    let result = reconcile(&mut parts, breaking()).await;
    assert!(matches!(result, Err(Error::Conflict { kind: "SandboxLease" })), "{result:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.cancel();
    let methods: Vec<String> = requests.take().into_iter().map(|r| r.method).collect();
    assert_eq!(methods, ["PATCH"], "no Event for a status that was not written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_whose_service_is_missing_gets_one_status_patch_at_its_version_and_no_event() {
    let (parts, requests, stop, registry) = scripted([Answer::Refuse(404), Answer::Echo]);
    let mut p = provider("p").driver("k").declares(&["nativeSyncIn"]).build();
    p.metadata.resource_version = Some("7".into());
    reconcile_provider(Arc::new(p), parts.ctx.clone()).await.expect("written");
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.cancel();
    let seen: Vec<_> = requests.take().iter().map(comparable).collect();
    let missing = "the Service sandbox-system/acme does not exist or has no port 8080, so nothing is verified";
    let unverified = "the worker verified no methods (probe failed, answered ok: false, or listed none)";
    let v1 = [
        "reusableLeases",
        "nativeSyncIn",
        "nativeSyncOut",
        "persistentProcessSessions",
        "independentControlCommands",
        "incrementalSessionOutput",
    ];
    let explanation =
        |key: &str| json!({"capability": key, "granted": false, "reason": "WorkerNotVerified", "message": unverified});
    let status = json!({
        "conditions": [
            condition("WorkerVerified", "False", "ProbeFailed", missing),
            condition("Ready", "False", "WorkerNotVerified", "the worker is not verified, so every capability is off"),
            condition("ConfigSchemasCompiled", "True", "Compiled",
                      "0 of 1 drivers declare a configSchema; each compiles within the budget"),
            condition("Valid", "True", "Conforms", "the CRD and the webhook would admit it today"),
        ],
        "contract": "v1",
        "drivers": [{
            "driverKey": "k", "kind": "sandbox_provider",
            "declared": {"nativeSyncIn": true},
            "capabilities": {"reusableLeases": false, "nativeSyncIn": false, "nativeSyncOut": false,
                             "persistentProcessSessions": false, "independentControlCommands": false,
                             "incrementalSessionOutput": false},
            "explanations": v1.map(explanation)
        }],
        "observedGeneration": 1,
        "worker": {"address": "http://acme.sandbox-system.svc:8080/", "endpoints": null, "lastProbeTime": "<now>",
                   "message": missing, "plugin": null, "probe": "Failed", "supportedMethods": []}
    });
    let path = "/apis/sandcap.dev/v1alpha1/sandboxproviders/p/status?&fieldManager=sandcap";
    assert_eq!(
        seen,
        [
            ("GET".into(), "/api/v1/namespaces/sandbox-system/services/acme".into(), Value::Null),
            // Written only over the version it was computed from.
            ("PATCH".into(), path.into(), json!({"metadata": {"resourceVersion": "7"}, "status": status})),
        ],
        "no Event: nothing turned on or off, and a provider first seen conforming has nothing to report"
    );
    let text = crate::metrics::encode(&registry);
    assert!(text.contains("sandcap_providers{ready=\"False\",reason=\"WorkerNotVerified\"} 1\n"), "{text}");
}
