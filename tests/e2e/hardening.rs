//! What the chart does against a stolen token or a careless neighbour, through the real apiserver.
//!
//! The scoped-writes policy (templates/writespolicy.yaml), with a token of sandcap's ServiceAccount
//! and exactly the chart's RBAC: the writes RBAC allows but sandcap never makes (a
//! service-account-token Secret, another Lease, an Event about a Pod or in another controller's
//! name) are refused with the policy's message, and what sandcap really writes (its certificate
//! Secret by the certificate keeper, its Lease by the leader election, Events about its own objects
//! by kube's Recorder, a repeated one as a patch) goes through. The admin (Helm) is not bound by it.
//! Its rule for SandboxLeases, the observer's writes, is [`crate::observed_writes`]'s.
//!
//! The pods, sandcap's and the `helm test` one, are admitted by the apiserver's PodSecurity
//! admission into a namespace that enforces the `restricted` standard, as docs/install.md tells admins to
//! label the release namespace.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use sandcap::certs::{self, CertOptions, Rotation};
use sandcap::controller::leader::{Election, Timing, run_elected};
use sandcap::metrics::Metrics;
use sandcap_core::api::{SandboxLease, SandboxProvider};
use sandcap_core::vocabulary::FIELD_MANAGER;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::harness::cluster::{Cluster, client_from};
use crate::harness::install::{self, Install, NAMESPACE};
use crate::harness::waits::eventually;
use crate::support::{lease, ok, provider};

const NS: &str = "e2e-writes";
const POLICY: &str = "sandcap-scoped-writes";
const SECRET: &str = "sandcap-webhook-tls";
const LEADER_LEASE: &str = "sandcap-controller";
const SECRET_ONLY: &str = "may create no Secret but sandcap-system/sandcap-webhook-tls of type kubernetes.io/tls";
const LEASE_ONLY: &str = "may create no Lease but sandcap-system/sandcap-controller";
const OWN_EVENTS_ONLY: &str = "may write only Events about SandboxProviders (in default) and SandboxLeases";

/// The apiserver's refusal of `result`, which must be the policy's: a refusal by RBAC (or anything
/// else) is not taken for it.
pub(crate) fn refused_by_policy<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>, message: &str) {
    match result {
        Err(kube::Error::Api(status)) => assert!(
            status.code == 403 && status.message.contains(message) && status.message.contains(POLICY),
            "{what}: refused, but not by {POLICY} with {message:?}: {}",
            status.message
        ),
        other => panic!("{what}: not refused: {other:?}"),
    }
}

fn secret(name: &str, type_: &str, annotations: Value) -> Secret {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations},
        "type": type_,
        "data": {"tls.crt": "Zm9v", "tls.key": "Zm9v"},
    }))
    .expect("a Secret")
}

/// An Event as kube's Recorder writes it, about `regarding`, in `namespace`, by `controller`.
fn event(namespace: &str, name: &str, regarding: Value, controller: &str) -> K8sEvent {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "regarding": regarding,
        "reason": "ValidTurned",
        "action": "Audit",
        "type": "Warning",
        "note": "e2e",
        "reportingController": controller,
        "reportingInstance": format!("{controller}-0"),
    }))
    .expect("an Event")
}

fn reference<K: Resource<DynamicType = ()>>(object: &K) -> Value {
    serde_json::to_value(object.object_ref(&())).expect("a reference")
}

pub async fn only_sandcaps_own_secret_lease_and_events(c: Arc<Cluster>) {
    install::crds(&c);
    install::namespaces(&c, &[NS]);
    let install = Install::chart(&c, json!({})).await;
    let admin = c.admin().await;
    let sa = client_from(&install.kubeconfig).await;
    no_secret_but_the_certificate_keepers(&c, &admin, &sa).await;
    no_lease_but_the_leader_election(&admin, &sa).await;
    let stored_lease = events_about_its_own_objects(&c, &admin, &sa).await;
    no_event_about_anything_else(&admin, &sa, &stored_lease).await;
    crate::observed_writes::only_observed_leases(&c, &admin, &sa, NS, "e2e-writes").await;

    // Everyone else, e.g. Helm, is unaffected.
    let admin_secrets = Api::<Secret>::namespaced(admin.clone(), NAMESPACE);
    admin_secrets
        .create(&PostParams::default(), &secret("e2e-admins", "Opaque", json!({})))
        .await
        .expect("the admin creates any Secret");
    ok("cleanup", c.kubectl(&["-n", NAMESPACE, "delete", "secret", "e2e-admins", SECRET]));
    ok("cleanup", c.kubectl(&["-n", NS, "delete", "sbl", "e2e-writes"]));
    ok("cleanup", c.kubectl(&["delete", "sbp", "e2e-writes"]));
}
/// A token Secret for another account: the apiserver would fill it with that account's token,
/// which sandcap could read wherever it reads Secrets. What sandcap creates, the certificate
/// keeper's Secret, goes through.
async fn no_secret_but_the_certificate_keepers(c: &Cluster, admin: &Client, sa: &Client) {
    let admin_secrets = Api::<Secret>::namespaced(admin.clone(), NAMESPACE);
    let secrets = Api::<Secret>::namespaced(sa.clone(), NAMESPACE);
    let _ = admin_secrets.delete(SECRET, &DeleteParams::default()).await;
    // A new policy takes effect once the apiserver's informer has it: one created before is
    // deleted and tried again.
    let token = secret(
        "e2e-stolen-token",
        "kubernetes.io/service-account-token",
        json!({"kubernetes.io/service-account.name": "sandcap"}),
    );
    let first = eventually("the policy in effect", Duration::from_secs(30), || async {
        match secrets.create(&PostParams::default(), &token).await {
            Ok(_) => {
                ok("undo", c.kubectl(&["-n", NAMESPACE, "delete", "secret", "e2e-stolen-token"]));
                None
            }
            refused => Some(refused),
        }
    })
    .await;
    refused_by_policy("a service-account-token Secret", first, SECRET_ONLY);
    for (what, wrong) in [
        ("the certificate Secret's name, another type", secret(SECRET, "Opaque", json!({}))),
        ("the type, another name", secret("e2e-other-tls", "kubernetes.io/tls", json!({}))),
        (
            "a token Secret under the certificate Secret's name",
            secret(
                SECRET,
                "kubernetes.io/service-account-token",
                json!({"kubernetes.io/service-account.name": "sandcap"}),
            ),
        ),
    ] {
        refused_by_policy(what, secrets.create(&PostParams::default(), &wrong).await, SECRET_ONLY);
    }
    assert!(admin_secrets.get_opt(SECRET).await.unwrap().is_none(), "nothing was stored");
    // What sandcap creates: the certificate keeper's Secret.
    let opts = CertOptions {
        secret_name: SECRET.into(),
        namespace: NAMESPACE.into(),
        service_name: "sandcap-webhook".into(),
        webhook_config_name: "sandcap".into(),
        check_interval: Duration::from_secs(1),
    };
    let outcome = certs::reconcile(sa, &opts, SystemTime::now()).await.expect("the certificate keeper");
    assert!(matches!(outcome.rotation, Rotation::Create { .. }), "{outcome:?}");
    assert_eq!(admin_secrets.get(SECRET).await.unwrap().type_.as_deref(), Some("kubernetes.io/tls"));
}

/// Leases: another name is refused; the election creates and renews its own.
async fn no_lease_but_the_leader_election(admin: &Client, sa: &Client) {
    let leases = Api::<Lease>::namespaced(sa.clone(), NAMESPACE);
    let squat: Lease = serde_json::from_value(json!({"metadata": {"name": "kube-controller-manager"}})).unwrap();
    refused_by_policy("another Lease", leases.create(&PostParams::default(), &squat).await, LEASE_ONLY);
    let admin_leases = Api::<Lease>::namespaced(admin.clone(), NAMESPACE);
    let _ = admin_leases.delete(LEADER_LEASE, &DeleteParams::default()).await;
    elect_once(sa).await;
    assert!(admin_leases.get_opt(LEADER_LEASE).await.unwrap().is_some(), "the election created its Lease");
}

/// Events: kube's Recorder as the controllers set it up (src/controller/context.rs), about a
/// lease (in its namespace) and a provider (in default), each twice: a create, then a patch of
/// its series count. Returns the lease.
async fn events_about_its_own_objects(c: &Cluster, admin: &Client, sa: &Client) -> SandboxLease {
    let objects =
        [provider("e2e-writes", "http://127.0.0.1:1/rpc", json!({})), lease(NS, "e2e-writes", "e2e-writes", json!({}))];
    install::apply(c, &objects);
    let stored_lease = Api::<SandboxLease>::namespaced(admin.clone(), NS).get("e2e-writes").await.unwrap();
    let stored_provider = Api::<SandboxProvider>::all(admin.clone()).get("e2e-writes").await.unwrap();
    let recorder =
        Recorder::new(sa.clone(), Reporter { controller: FIELD_MANAGER.into(), instance: Some("e2e-writes-0".into()) });
    let note = Event {
        type_: EventType::Warning,
        reason: "ValidTurned".into(),
        note: Some("e2e".into()),
        action: "Audit".into(),
        secondary: None,
    };
    for (namespace, object) in [(NS, stored_lease.object_ref(&())), ("default", stored_provider.object_ref(&()))] {
        for _ in 0..2 {
            recorder.publish(&note, &object).await.unwrap_or_else(|e| panic!("an Event about {object:?}: {e}"));
        }
        let found = Api::<K8sEvent>::namespaced(admin.clone(), namespace).list(&Default::default()).await.unwrap();
        let ours = found
            .items
            .iter()
            .find(|e| e.regarding.as_ref().and_then(|r| r.uid.as_ref()) == object.uid.as_ref())
            .expect("the Event");
        assert_eq!(ours.series.as_ref().map(|s| s.count), Some(2), "the repeat was a patch");
    }
    stored_lease
}

/// Events about anything else, or in another's name, are refused, and somebody else's Event is
/// not sandcap's to patch.
async fn no_event_about_anything_else(admin: &Client, sa: &Client, stored_lease: &SandboxLease) {
    let events = |namespace: &str| Api::<K8sEvent>::namespaced(sa.clone(), namespace);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "namespace": NS, "name": "victim", "uid": "0"});
    let about_lease = reference(stored_lease);
    for (what, namespace, wrong) in [
        ("an Event about a Pod", NS, event(NS, "e2e-pod", pod.clone(), FIELD_MANAGER)),
        ("another reportingController", NS, event(NS, "e2e-kubelet", about_lease.clone(), "kubelet")),
        (
            "a lease's Event in another namespace",
            "default",
            event("default", "e2e-elsewhere", about_lease.clone(), FIELD_MANAGER),
        ),
        (
            "a kind of sandcap's in another group",
            NS,
            event(
                NS,
                "e2e-group",
                json!({"apiVersion": "evil.example/v1", "kind": "SandboxLease", "namespace": NS, "name": "x"}),
                FIELD_MANAGER,
            ),
        ),
    ] {
        refused_by_policy(what, events(namespace).create(&PostParams::default(), &wrong).await, OWN_EVENTS_ONLY);
    }
    // Somebody else's Event is not sandcap's to patch.
    let kubelets = event(NS, "e2e-kubelets", pod, "kubelet");
    Api::<K8sEvent>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &kubelets)
        .await
        .expect("the admin's");
    let series = Patch::Merge(json!({"series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}}));
    // The policy looks at the Event after the write only: what makes an Event sandcap's cannot change.
    let admins_events = Api::<K8sEvent>::namespaced(admin.clone(), NS);
    for (field, value) in [("reportingController", json!(FIELD_MANAGER)), ("regarding", about_lease)] {
        let change = Patch::Merge(json!({ field: value }));
        match admins_events.patch("e2e-kubelets", &PatchParams::default(), &change).await {
            Err(kube::Error::Api(s)) => {
                assert!(s.code == 422 && s.message.contains("field is immutable"), "{}", s.message)
            }
            other => panic!("an Event's {field} changed: {other:?}"),
        }
    }
    refused_by_policy(
        "a patch of the kubelet's Event",
        events(NS).patch("e2e-kubelets", &PatchParams::default(), &series).await,
        OWN_EVENTS_ONLY,
    );
}

/// The leader election with sandcap's token, until it leads once; the Lease is released after.
async fn elect_once(sa: &Client) {
    let election = Election {
        lease_name: LEADER_LEASE.into(),
        namespace: NAMESPACE.into(),
        identity: "e2e-writes-0".into(),
        timing: Timing::default(),
        // Never stamped (`sa` has no stamping layer): the term lapses at once, which is all this
        // test needs of it.
        clock: Default::default(),
    };
    let shutdown = CancellationToken::new();
    let led = shutdown.clone();
    let elected =
        run_elected(sa.clone(), election, Metrics::register(&mut Default::default()), shutdown.clone(), move |_, _| {
            led.cancel();
            async { Ok(()) }
        });
    tokio::time::timeout(Duration::from_secs(30), elected)
        .await
        .expect("elected within 30 s")
        .expect("the election under the policy");
}

/// docs/install.md tells admins to label the release namespace `pod-security.kubernetes.io/enforce=restricted`:
/// both pods must be admitted there, without a warning. With `hostNetwork` (docs/install.md: not under
/// `restricted`) the same pod is refused, so this can fail.
pub async fn the_charts_pods_pass_the_restricted_pod_security_standard(c: Arc<Cluster>) {
    const RESTRICTED: &str = "e2e-restricted";
    install::apply(
        &c,
        &[json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RESTRICTED, "labels": {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
            "pod-security.kubernetes.io/warn": "restricted",
        }}})],
    );
    let pods = |values: Value| -> Vec<Value> {
        let objects = install::render_chart(&values);
        let template = &objects.iter().find(|o| o["kind"] == "Deployment").expect("the Deployment")["spec"]["template"];
        let sandcap =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sandcap"}, "spec": template["spec"]});
        let check = objects.iter().find(|o| o["kind"] == "Pod").expect("the helm test pod").clone();
        [sandcap, check]
            .into_iter()
            .map(|mut pod| {
                pod["metadata"] = json!({"name": pod["metadata"]["name"], "namespace": RESTRICTED});
                pod
            })
            .collect()
    };
    let defaults = pods(json!({}));
    let accounts: Vec<Value> = defaults
        .iter()
        .map(|p| json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": p["spec"]["serviceAccountName"], "namespace": RESTRICTED}}))
        .collect();
    install::apply(&c, &accounts);
    let dry_run = |pod: &Value| c.kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], &pod.to_string());
    for pod in &defaults {
        let output = dry_run(pod);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success() && stderr.trim().is_empty(), "{}: {stderr}", pod["metadata"]["name"]);
    }
    let host_network = pods(json!({"hostNetwork": true, "webhook": {"port": 10260}, "admin": {"port": 10261}}));
    let refused = dry_run(&host_network[0]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("violates PodSecurity \"restricted:latest\""), "{stderr}");
}
