//! `controller::run` end to end: both controllers with their watches, against the in-memory
//! apiserver (which, unlike kube-fake-client, serves list and watch) and the real reference worker.
//! This is what the reconciler tests cannot show: that a provider, lease or Secret change reaches
//! the leases that depend on it through the watch relations.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use sandcap::api::{ProbeResult, SandboxLease, SandboxLeaseStatus, SandboxProvider};
use sandcap::contract::{Capability, Reason};
use sandcap::controller::{ControllerOptions, run};
use serde_json::json;
use support::apiserver::MiniApi;
use support::{ALL_METHODS, Worker, all_true, eventually, lease, metrics, provider, secret};
use tokio_util::sync::CancellationToken;

async fn lease_status(api: &Api<SandboxLease>, name: &str) -> Option<SandboxLeaseStatus> {
    api.get(name).await.ok()?.status
}

fn reason_of(status: &Option<SandboxLeaseStatus>, cap: Capability) -> Option<Reason> {
    status.as_ref()?.explanations.iter().find(|e| e.capability == cap).map(|e| e.reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_reach_the_dependent_leases_through_the_watches() {
    let worker = Worker::with_methods(&ALL_METHODS);
    let server = MiniApi::default();
    let client = server.client();
    let providers: Api<SandboxProvider> = Api::all(client.clone());
    let leases: Api<SandboxLease> = Api::namespaced(client.clone(), "team-a");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "team-a");
    let pp = PostParams::default();
    providers.create(&pp, &provider("acme", &worker.url, all_true())).await.unwrap();
    secrets
        .create(&pp, &secret("team-a", "creds", "config.json", r#"{"apiToken": "long-enough-token"}"#))
        .await
        .unwrap();
    let from_secret = json!({"configFrom": [{"secretKeyRef": {"name": "creds", "key": "config.json"}}]});
    leases.create(&pp, &lease("team-a", "run-1", "acme", from_secret)).await.unwrap();

    let options = ControllerOptions {
        allow_worker_urls: true,
        leader_elect: false,
        probe_timeout: Duration::from_secs(2),
        identity: "e2e".into(),
        ..ControllerOptions::default()
    };
    let (metrics, _registry) = metrics();
    let shutdown = CancellationToken::new();
    let controllers = tokio::spawn(run(client.clone(), options, metrics.clone(), shutdown.clone()));

    // The provider is probed and published; the lease is resolved against it and pinned.
    eventually("the provider's worker is verified", || async {
        let status = providers.get("acme").await.unwrap().status;
        status.and_then(|s| s.worker).is_some_and(|w| w.probe == ProbeResult::Succeeded)
    })
    .await;
    eventually("the lease is resolved with every capability", || async {
        let status = lease_status(&leases, "run-1").await;
        reason_of(&status, Capability::NativeSyncIn) == Some(Reason::Granted)
            && reason_of(&status, Capability::PersistentProcessSessions) == Some(Reason::Granted)
    })
    .await;
    assert!(lease_status(&leases, "run-1").await.unwrap().pinned.is_some());
    assert_eq!(metrics.leader.get(), 1);

    // The Secret it reads stops holding JSON: config resolution fails and narrows.
    let mut broken = secrets.get("creds").await.unwrap();
    broken.data = secret("team-a", "creds", "config.json", "not json").data;
    secrets.replace("creds", &pp, &broken).await.unwrap();
    eventually("the Secret change narrows the lease", || async {
        reason_of(&lease_status(&leases, "run-1").await, Capability::PersistentProcessSessions)
            == Some(Reason::NarrowedByConfigResolution)
    })
    .await;

    // The provider's declaration changes: it is re-probed, and the lease follows.
    let mut changed = providers.get("acme").await.unwrap();
    changed.spec.environment_drivers[0].sandbox_capabilities.as_mut().unwrap().native_sync_in = Some(false);
    providers.replace("acme", &pp, &changed).await.unwrap();
    eventually("the declaration change reaches the lease", || async {
        reason_of(&lease_status(&leases, "run-1").await, Capability::NativeSyncIn) == Some(Reason::DeclaredFalse)
    })
    .await;

    // The apiserver goes away and comes back; a change made after that still gets through.
    server.set_down(true);
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.set_down(false);
    let mut fixed = secrets.get("creds").await.unwrap();
    fixed.data = secret("team-a", "creds", "config.json", r#"{"apiToken": "another-long-token"}"#).data;
    secrets.replace("creds", &pp, &fixed).await.unwrap();
    eventually("a change after the outage reaches the lease", || async {
        reason_of(&lease_status(&leases, "run-1").await, Capability::PersistentProcessSessions) == Some(Reason::Granted)
    })
    .await;

    // The provider is deleted: its pinned lease turns all-off.
    providers.delete("acme", &DeleteParams::default()).await.unwrap();
    eventually("the deletion turns the lease off", || async {
        let status = lease_status(&leases, "run-1").await;
        status.is_some_and(|s| s.explanations.iter().all(|e| e.reason == Reason::PluginIdentityFailed))
    })
    .await;

    // With nothing changing any more, nothing is written any more.
    let writes = server.status_writes();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(server.status_writes(), writes);

    shutdown.cancel();
    controllers.await.unwrap().unwrap();
    assert_eq!(metrics.leader.get(), 0);
}
