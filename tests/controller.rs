//! The reconcilers against an in-memory Kubernetes API (kube-fake-client), with the real reference
//! worker process behind the provider probes. kube-fake-client has no watch, so the tests call
//! `reconcile_provider` / `reconcile_lease` directly with hand-filled reflector stores, and check
//! the dependency mappers the watches use on their own.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use sandcap::api::{
    LeasePolicy, Pinned, ProbeResult, SandboxLease, SandboxLeaseStatus, SandboxProvider, SandboxProviderStatus,
    WorkerStatus,
};
use sandcap::contract::{Capability, Reason, SecretLookup};
use sandcap::controller::{
    Context, LeaseSecrets, leases_for_provider, leases_for_secret, provider_status, reconcile_lease, reconcile_provider,
};
use serde_json::{Value, json};
use support::{ALL_METHODS, FakeApi, Worker, all_true, context, lease, metrics, provider, secret, store_of};

fn cond<'a>(conditions: &'a [Condition], type_: &str) -> &'a Condition {
    conditions.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_} condition in {conditions:?}"))
}

fn reasons(explanations: &[sandcap::api::Explanation]) -> Vec<(Capability, Reason)> {
    explanations.iter().map(|e| (e.capability, e.reason)).collect()
}

// ---------------------------------------------------------------------------------------------
// Provider controller

async fn reconcile_stored_provider(api: &FakeApi, ctx: &Arc<Context>, name: &str) -> SandboxProviderStatus {
    let stored = api.providers().get(name).await.unwrap();
    reconcile_provider(Arc::new(stored), ctx.clone()).await.expect("reconcile");
    api.providers().get(name).await.unwrap().status.expect("a status")
}

#[tokio::test]
async fn provider_status_after_a_good_probe() {
    let worker = Worker::with_methods(&ALL_METHODS);
    let api = FakeApi::new().await;
    api.create_provider(&provider("acme", &worker.url, json!({"reusableLeases": true, "nativeSyncIn": false}))).await;
    let (metrics, registry) = metrics();
    let ctx = context(&api, store_of([]), metrics);

    let status = reconcile_stored_provider(&api, &ctx, "acme").await;

    assert_eq!(status.observed_generation, Some(1));
    let w = status.worker.as_ref().unwrap();
    assert_eq!(
        (w.probe, w.supported_methods.clone()),
        (ProbeResult::Succeeded, ALL_METHODS.map(String::from).to_vec())
    );
    assert!(w.last_probe_time.is_some());
    let driver = &status.drivers[0];
    assert_eq!(driver.declared, [("nativeSyncIn".into(), false), ("reusableLeases".into(), true)].into());
    assert_eq!(
        reasons(&driver.explanations),
        [
            (Capability::ReusableLeases, Reason::Granted),
            (Capability::NativeSyncIn, Reason::DeclaredFalse),
            (Capability::NativeSyncOut, Reason::Granted),
            (Capability::PersistentProcessSessions, Reason::Granted),
            (Capability::IndependentControlCommands, Reason::Granted),
            (Capability::IncrementalSessionOutput, Reason::NotOptedIn),
        ]
    );
    assert!(driver.capabilities.reusable_leases && !driver.capabilities.native_sync_in);
    for (type_, reason) in [("WorkerVerified", "ProbeSucceeded"), ("Ready", "CapabilitiesResolved")] {
        let c = cond(&status.conditions, type_);
        assert_eq!((c.status.as_str(), c.reason.as_str(), c.observed_generation), ("True", reason, Some(1)));
    }

    let writes = api.writes.lock().unwrap().clone();
    assert_eq!(writes.len(), 1);
    assert!(writes[0].server_side_apply && writes[0].force, "{writes:?}");
    assert_eq!(writes[0].field_manager.as_deref(), Some("sandcap"));
    let exported = sandcap::metrics::encode(&registry);
    assert!(exported.contains(r#"sandcap_worker_probes_total{result="succeeded"} 1"#), "{exported}");
    assert!(exported.contains(r#"sandcap_reconciles_total{kind="SandboxProvider"} 1"#), "{exported}");
}

#[tokio::test]
async fn provider_status_after_a_failed_probe_turns_everything_off() {
    let worker = Worker::start(&["--methods", &ALL_METHODS.join(","), "--mode", "not-ok"]);
    let api = FakeApi::new().await;
    api.create_provider(&provider("acme", &worker.url, all_true())).await;
    let ctx = context(&api, store_of([]), metrics().0);

    let status = reconcile_stored_provider(&api, &ctx, "acme").await;

    let w = status.worker.as_ref().unwrap();
    assert_eq!(w.probe, ProbeResult::Failed);
    assert!(w.supported_methods.is_empty());
    assert!(w.message.ends_with("the worker answered ok: false"), "{}", w.message);
    let verified = cond(&status.conditions, "WorkerVerified");
    assert_eq!((verified.status.as_str(), verified.reason.as_str()), ("False", "ProbeFailed"));
    assert_eq!(verified.message, w.message);
    let ready = cond(&status.conditions, "Ready");
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "WorkerNotVerified"));
    assert!(status.drivers[0].explanations.iter().all(|e| !e.granted && e.reason == Reason::WorkerNotVerified));
}

#[tokio::test]
async fn a_declaration_change_re_probes_and_records_the_capabilities_that_turned_off() {
    let worker = Worker::with_methods(&ALL_METHODS);
    let api = FakeApi::new().await;
    api.create_provider(&provider("acme", &worker.url, all_true())).await;
    let (metrics, registry) = metrics();
    let ctx = context(&api, store_of([]), metrics);
    let first = reconcile_stored_provider(&api, &ctx, "acme").await;
    assert!(first.drivers[0].capabilities.native_sync_in);

    let mut changed = api.providers().get("acme").await.unwrap();
    let caps = changed.spec.environment_drivers[0].sandbox_capabilities.as_mut().unwrap();
    caps.native_sync_in = Some(false);
    caps.incremental_session_output = None;
    api.providers().replace("acme", &PostParams::default(), &changed).await.unwrap();
    let second = reconcile_stored_provider(&api, &ctx, "acme").await;

    assert_eq!(second.observed_generation, Some(2));
    assert!(cond(&second.conditions, "WorkerVerified").observed_generation == Some(2));
    let driver = &second.drivers[0];
    assert_eq!(driver.declared.get("nativeSyncIn"), Some(&false));
    assert!(!driver.capabilities.native_sync_in && !driver.capabilities.incremental_session_output);
    assert!(sandcap::metrics::encode(&registry).contains(r#"sandcap_worker_probes_total{result="succeeded"} 2"#));

    let events = Api::<Event>::namespaced(api.client.clone(), "default").list(&Default::default()).await.unwrap();
    let notes: Vec<(String, String, String)> = events
        .items
        .iter()
        .map(|e| (e.type_.clone().unwrap(), e.reason.clone().unwrap(), e.note.clone().unwrap()))
        .collect();
    assert_eq!(
        notes,
        [(
            "Warning".to_string(),
            "CapabilitiesRevoked".to_string(),
            "driver kubernetes: nativeSyncIn (DeclaredFalse), incrementalSessionOutput (NotOptedIn) now off"
                .to_string()
        )]
    );
}

/// A published status as an earlier reconcile wrote it, probed `probed_ago` ago, with conditions
/// that last transitioned in 2020.
fn seeded_status(p: &SandboxProvider, methods: &[&str], probed_ago: SignedDuration) -> SandboxProviderStatus {
    let long_ago = Time(Timestamp::from_second(1_577_836_800).unwrap());
    let probed = Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap() - probed_ago);
    let worker = WorkerStatus {
        supported_methods: methods.iter().map(|m| m.to_string()).collect(),
        probe: ProbeResult::Succeeded,
        last_probe_time: Some(probed.clone()),
        message: "initialize answered ok: true with 6 supportedMethods".into(),
    };
    let mut status = provider_status(p, worker, &probed);
    status.conditions.iter_mut().for_each(|c| c.last_transition_time = long_ago.clone());
    status
}

#[tokio::test]
async fn nothing_is_written_or_probed_when_nothing_changed() {
    let worker = Worker::with_methods(&ALL_METHODS);
    let api = FakeApi::new().await;
    let p = api.create_provider(&provider("acme", &worker.url, all_true())).await;
    api.set_provider_status("acme", &seeded_status(&p, &ALL_METHODS, SignedDuration::from_secs(60))).await;
    let (metrics, registry) = metrics();
    let ctx = context(&api, store_of([]), metrics);

    let stored = api.providers().get("acme").await.unwrap();
    let action = reconcile_provider(Arc::new(stored.clone()), ctx.clone()).await.unwrap();

    assert_eq!(api.write_count(), 0);
    assert!(!sandcap::metrics::encode(&registry).contains("sandcap_worker_probes_total{"));
    assert_eq!(api.providers().get("acme").await.unwrap().status, stored.status);
    // The next probe is due when the interval (300s) since the last one has passed (60s ago, or
    // 61s if a second boundary passed since the seed).
    let after =
        |secs| format!("{:?}", kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(secs)));
    assert!([after(240), after(239)].contains(&format!("{action:?}")), "{action:?}");
}

#[tokio::test]
async fn an_expired_probe_is_repeated_and_keeps_the_condition_transition_times() {
    let worker = Worker::with_methods(&ALL_METHODS);
    let api = FakeApi::new().await;
    let p = api.create_provider(&provider("acme", &worker.url, all_true())).await;
    api.set_provider_status("acme", &seeded_status(&p, &ALL_METHODS, SignedDuration::from_hours(1))).await;
    let (metrics, registry) = metrics();
    let ctx = context(&api, store_of([]), metrics);

    let status = reconcile_stored_provider(&api, &ctx, "acme").await;

    assert!(sandcap::metrics::encode(&registry).contains(r#"sandcap_worker_probes_total{result="succeeded"} 1"#));
    let probed = status.worker.unwrap().last_probe_time.unwrap().0;
    assert!(Timestamp::now().duration_since(probed) < SignedDuration::from_secs(60));
    for c in &status.conditions {
        assert_eq!(c.last_transition_time.0.as_second(), 1_577_836_800, "{c:?}");
    }
    assert_eq!(api.write_count(), 1);
}

// ---------------------------------------------------------------------------------------------
// Lease controller

/// A provider whose published status verifies `methods`, and a context whose store holds it.
struct Fixture {
    api: FakeApi,
    provider: SandboxProvider,
    ctx: Arc<Context>,
}

async fn fixture(methods: &[&str], capabilities: Value) -> Fixture {
    let api = FakeApi::new().await;
    let provider = publish_provider(&api, "acme", methods, capabilities).await;
    let ctx = context(&api, store_of([provider.clone()]), metrics().0);
    Fixture { api, provider, ctx }
}

async fn publish_provider(api: &FakeApi, name: &str, methods: &[&str], capabilities: Value) -> SandboxProvider {
    let p = api.create_provider(&provider(name, "http://worker.invalid/rpc", capabilities)).await;
    api.set_provider_status(name, &seeded_status(&p, methods, SignedDuration::from_secs(1))).await
}

async fn reconcile_stored_lease(api: &FakeApi, ctx: &Arc<Context>, namespace: &str, name: &str) -> SandboxLeaseStatus {
    let stored = api.leases(namespace).get(name).await.unwrap();
    reconcile_lease(Arc::new(stored), ctx.clone()).await.expect("reconcile");
    api.leases(namespace).get(name).await.unwrap().status.expect("a status")
}

impl Fixture {
    async fn resolve(&self, lease: SandboxLease) -> SandboxLeaseStatus {
        let created = self.api.create_lease(&lease).await;
        let (ns, name) = (created.metadata.namespace.clone().unwrap(), created.metadata.name.clone().unwrap());
        reconcile_stored_lease(&self.api, &self.ctx, &ns, &name).await
    }
}

fn reason(status: &SandboxLeaseStatus, cap: Capability) -> Reason {
    status.explanations.iter().find(|e| e.capability == cap).unwrap().reason
}

#[tokio::test]
async fn an_ephemeral_lease_loses_reuse_and_pins_its_provider() {
    let f = fixture(&ALL_METHODS, all_true()).await;
    let status = f.resolve(lease("team-a", "run-1", "acme", json!({}))).await;

    assert_eq!(reason(&status, Capability::ReusableLeases), Reason::NarrowedByLeasePolicy);
    assert!(status.explanations.iter().filter(|e| e.capability != Capability::ReusableLeases).all(|e| e.granted));
    assert_eq!(status.effective_policy, Some(LeasePolicy::Ephemeral));
    assert_eq!(
        status.pinned,
        Some(Pinned {
            provider_uid: f.provider.metadata.uid.clone().unwrap(),
            plugin_key: "acme.kubernetes-sandbox-provider".into(),
            driver_key: "kubernetes".into(),
        })
    );
    assert_eq!(status.observed_generation, Some(1));
    for (type_, reason) in
        [("Resolved", "Resolved"), ("ConfigResolved", "ConfigResolved"), ("PluginIdentity", "Pinned")]
    {
        let c = cond(&status.conditions, type_);
        assert_eq!((c.status.as_str(), c.reason.as_str(), c.observed_generation), ("True", reason, Some(1)));
    }
    let writes = f.api.writes.lock().unwrap().clone();
    assert!(writes.len() == 1 && writes[0].server_side_apply && writes[0].force);
}

#[tokio::test]
async fn reuse_is_granted_only_when_the_provider_is_eligible() {
    let reuse = json!({"policy": "ReuseByEnvironment", "environment": "env-7"});
    let f = fixture(&ALL_METHODS, all_true()).await;
    let status = f.resolve(lease("team-a", "run-1", "acme", reuse.clone())).await;
    assert_eq!(reason(&status, Capability::ReusableLeases), Reason::Granted);
    assert_eq!(status.effective_policy, Some(LeasePolicy::ReuseByEnvironment));

    let not_opted_in = fixture(&ALL_METHODS, json!({})).await;
    let status = not_opted_in.resolve(lease("team-a", "run-1", "acme", reuse)).await;
    assert_eq!(reason(&status, Capability::ReusableLeases), Reason::NotOptedIn);
    assert_eq!(status.effective_policy, Some(LeasePolicy::Ephemeral));
}

#[tokio::test]
async fn job_backed_leases_and_unsupported_file_sync_lose_native_sync() {
    let f = fixture(&ALL_METHODS, all_true()).await;
    let cases = [
        ("backend-job", json!({"backend": "job"}), Reason::NarrowedByJobBackend),
        (
            "job-workload",
            json!({"workloadRef": {"apiVersion": "batch/v1", "kind": "Job", "name": "j"}}),
            Reason::NarrowedByJobBackend,
        ),
        (
            "deployment-workload",
            json!({"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}}),
            Reason::Granted,
        ),
        ("no-file-sync", json!({"nativeFileSyncUnsupported": true}), Reason::NarrowedByNativeFileSyncUnsupported),
    ];
    for (name, spec, expected) in cases {
        let status = f.resolve(lease("team-a", name, "acme", spec)).await;
        for cap in [Capability::NativeSyncIn, Capability::NativeSyncOut] {
            assert_eq!(reason(&status, cap), expected, "{name} {cap}");
        }
        assert_eq!(reason(&status, Capability::PersistentProcessSessions), Reason::Granted, "{name}");
    }
}

const SECRET_VALUE: &str = "s3cr3t";

#[tokio::test]
async fn config_failures_narrow_sessions_and_never_show_the_secret() {
    let f = fixture(&ALL_METHODS, all_true()).await;
    let cases = [
        ("missing-secret", None, "configFrom Secret creds-missing-secret does not exist"),
        ("missing-key", Some(("other.json", "{}".to_string())), "has no key config.json"),
        ("not-json", Some(("config.json", format!("apiToken={SECRET_VALUE}"))), "is not valid JSON"),
        ("not-object", Some(("config.json", format!("[\"{SECRET_VALUE}\"]"))), "does not hold a JSON object"),
        (
            "schema",
            Some(("config.json", format!("{{\"apiToken\": \"{SECRET_VALUE}\"}}"))),
            "fails the driver's configSchema at /apiToken (minLength)",
        ),
    ];
    for (name, stored, expected) in cases {
        let secret_name = format!("creds-{name}");
        if let Some((key, value)) = stored {
            f.api.create_secret(&secret("team-a", &secret_name, key, &value)).await;
        }
        let spec = json!({"configFrom": [{"secretKeyRef": {"name": secret_name, "key": "config.json"}}]});
        let status = f.resolve(lease("team-a", name, "acme", spec)).await;

        for cap in [Capability::PersistentProcessSessions, Capability::IncrementalSessionOutput] {
            assert_eq!(reason(&status, cap), Reason::NarrowedByConfigResolution, "{name} {cap}");
        }
        assert_eq!(reason(&status, Capability::IndependentControlCommands), Reason::Granted, "{name}");
        let config = cond(&status.conditions, "ConfigResolved");
        assert_eq!((config.status.as_str(), config.reason.as_str()), ("False", "ConfigResolutionFailed"), "{name}");
        assert!(config.message.contains(expected), "{name}: {}", config.message);
        assert!(cond(&status.conditions, "Resolved").status == "True", "{name}: config narrows, it does not fail");
        let written = serde_json::to_string(&status).unwrap();
        assert!(!written.contains(SECRET_VALUE), "{name}: {written}");
    }
}

#[tokio::test]
async fn config_from_a_good_secret_resolves() {
    let f = fixture(&ALL_METHODS, all_true()).await;
    f.api.create_secret(&secret("team-a", "creds", "config.json", r#"{"apiToken": "long-enough-token"}"#)).await;
    let spec = json!({"config": {"backend": "sandbox-cr"},
                      "configFrom": [{"secretKeyRef": {"name": "creds", "key": "config.json"}}]});
    let status = f.resolve(lease("team-a", "run-1", "acme", spec)).await;
    assert_eq!(cond(&status.conditions, "ConfigResolved").status, "True");
    assert_eq!(reason(&status, Capability::PersistentProcessSessions), Reason::Granted);
}

#[test]
fn a_forbidden_secret_is_unreadable_and_other_errors_are_retried() {
    let api_error = |code: u16| {
        Err(kube::Error::Api(Box::new(kube::core::Status { code, message: "nope".into(), ..Default::default() })))
    };
    let mut secrets = LeaseSecrets::default();
    secrets.record("creds", api_error(403)).expect("403 is an answer");
    let creds = sandcap::api::SecretKeyRef { name: "creds".into(), key: "config.json".into(), ..Default::default() };
    assert_eq!(
        secrets.lookup(&creds),
        SecretLookup::Unreadable("sandcap is not allowed to get it (403 Forbidden)".into())
    );
    assert!(secrets.record("other", api_error(500)).is_err(), "a 500 must fail the reconcile, not narrow");
    secrets.record("gone", Ok(None)).unwrap();
    let gone = sandcap::api::SecretKeyRef { name: "gone".into(), key: "k".into(), ..Default::default() };
    assert_eq!(secrets.lookup(&gone), SecretLookup::MissingSecret);
}

#[tokio::test]
async fn identity_pins_once_then_fails_when_the_provider_is_deleted_or_re_created() {
    let api = FakeApi::new().await;
    api.create_lease(&lease("team-a", "run-1", "acme", json!({}))).await;
    let all_off = |s: &SandboxLeaseStatus| s.explanations.iter().all(|e| e.reason == Reason::PluginIdentityFailed);

    // No provider yet: all off, not pinned.
    let ctx = context(&api, store_of([]), metrics().0);
    let status = reconcile_stored_lease(&api, &ctx, "team-a", "run-1").await;
    assert!(all_off(&status) && status.pinned.is_none());
    assert_eq!(cond(&status.conditions, "PluginIdentity").status, "False");
    assert_eq!(cond(&status.conditions, "Resolved").reason, "PluginIdentityFailed");
    assert_eq!(cond(&status.conditions, "ConfigResolved").status, "Unknown");

    // The provider appears: resolved and pinned to its uid.
    let first = publish_provider(&api, "acme", &ALL_METHODS, all_true()).await;
    let ctx = context(&api, store_of([first.clone()]), metrics().0);
    let status = reconcile_stored_lease(&api, &ctx, "team-a", "run-1").await;
    let pinned = status.pinned.clone().expect("pinned");
    assert_eq!(Some(&pinned.provider_uid), first.metadata.uid.as_ref());
    assert_eq!(reason(&status, Capability::NativeSyncIn), Reason::Granted);

    // Deleted: all off, still pinned to the first uid.
    api.providers().delete("acme", &DeleteParams::default()).await.unwrap();
    let ctx = context(&api, store_of([]), metrics().0);
    let status = reconcile_stored_lease(&api, &ctx, "team-a", "run-1").await;
    assert!(all_off(&status), "{status:?}");
    assert!(cond(&status.conditions, "PluginIdentity").message.contains("no longer exists"));
    assert_eq!(status.pinned.as_ref(), Some(&pinned));

    // Re-created under the same name (another uid): still all off.
    let second = publish_provider(&api, "acme", &ALL_METHODS, all_true()).await;
    assert_ne!(second.metadata.uid, first.metadata.uid);
    let ctx = context(&api, store_of([second]), metrics().0);
    let status = reconcile_stored_lease(&api, &ctx, "team-a", "run-1").await;
    assert!(all_off(&status));
    assert!(cond(&status.conditions, "PluginIdentity").message.contains("re-created"));
    assert_eq!(status.pinned, Some(pinned));
}

#[tokio::test]
async fn a_lease_is_written_once_when_nothing_changes() {
    let f = fixture(&ALL_METHODS, all_true()).await;
    f.api.create_secret(&secret("team-a", "creds", "config.json", r#"{"apiToken": "long-enough-token"}"#)).await;
    let spec = json!({"configFrom": [{"secretKeyRef": {"name": "creds", "key": "config.json"}}]});
    let first = f.resolve(lease("team-a", "run-1", "acme", spec)).await;
    let second = reconcile_stored_lease(&f.api, &f.ctx, "team-a", "run-1").await;
    let third = reconcile_stored_lease(&f.api, &f.ctx, "team-a", "run-1").await;
    assert_eq!(f.api.write_count(), 1);
    assert_eq!((&first, &second), (&third, &third));
}

fn names(refs: Vec<ObjectRef<SandboxLease>>) -> BTreeSet<String> {
    refs.into_iter().map(|r| format!("{}/{}", r.namespace.unwrap(), r.name)).collect()
}

#[test]
fn provider_and_secret_changes_map_to_exactly_the_dependent_leases() {
    let from = |secret: &str| json!({"configFrom": [{"secretKeyRef": {"name": secret, "key": "config.json"}}]});
    let leases = store_of([
        lease("team-a", "a", "acme", from("creds")),
        lease("team-a", "b", "acme", json!({})),
        lease("team-b", "c", "acme", from("creds")),
        lease("team-a", "d", "other", from("creds2")),
    ]);
    let set = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(names(leases_for_provider(&leases, "acme")), set(&["team-a/a", "team-a/b", "team-b/c"]));
    assert_eq!(names(leases_for_provider(&leases, "other")), set(&["team-a/d"]));
    assert!(leases_for_provider(&leases, "missing").is_empty());
    assert_eq!(names(leases_for_secret(&leases, "team-a", "creds")), set(&["team-a/a"]));
    assert_eq!(names(leases_for_secret(&leases, "team-b", "creds")), set(&["team-b/c"]));
    assert_eq!(names(leases_for_secret(&leases, "team-a", "creds2")), set(&["team-a/d"]));
    assert!(leases_for_secret(&leases, "team-a", "unrelated").is_empty());
}

#[tokio::test]
async fn a_provider_status_change_re_resolves_its_leases() {
    let f = fixture(&ALL_METHODS, all_true()).await;
    for name in ["run-1", "run-2"] {
        let status = f.resolve(lease("team-a", name, "acme", json!({}))).await;
        assert_eq!(reason(&status, Capability::NativeSyncOut), Reason::Granted);
    }
    // The worker drops environmentSyncOut; the provider controller publishes it.
    let without_sync_out: Vec<&str> = ALL_METHODS.into_iter().filter(|m| *m != "environmentSyncOut").collect();
    let changed =
        f.api.set_provider_status("acme", &seeded_status(&f.provider, &without_sync_out, SignedDuration::ZERO)).await;
    let ctx = context(&f.api, store_of([changed]), metrics().0);
    let lease_store = store_of(f.api.leases("team-a").list(&Default::default()).await.unwrap().items);

    for r in leases_for_provider(&lease_store, "acme") {
        let status = reconcile_stored_lease(&f.api, &ctx, "team-a", &r.name).await;
        for cap in [Capability::NativeSyncIn, Capability::NativeSyncOut] {
            assert_eq!(reason(&status, cap), Reason::MissingWorkerMethods, "{} {cap}", r.name);
        }
    }
    assert_eq!(f.api.write_count(), 4);
}
