//! Verified by every endpoint of a worker Service: the controllers follow its EndpointSlices with
//! the chart's RBAC, probe each serving endpoint at its own address as soon as it appears, and
//! verify what every one advertises. The workers run in a network namespace the scenario creates
//! (the apiserver refuses loopback endpoint addresses), reached over a veth pair.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures::StreamExt;
use kube::api::{Api, DynamicObject, WatchEvent, WatchParams};
use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};

use crate::harness::binary::Sandcap;
use crate::harness::cluster::Cluster;
use crate::harness::install;
use crate::harness::objects::{explanation, get, resource};
use crate::harness::waits::{eventually, lease_reason};
use crate::support::{Worker, all_true, lease, methods_of, provider};

const NS: &str = "e2e-endpoints";
const WAIT: Duration = Duration::from_secs(30);

/// A network namespace with a veth pair to it: the host side `<net>.1`, the namespace's
/// addresses `<net>.2` to `<net>.4`. Deleted, with its end of the pair, on drop.
struct Netns {
    name: String,
    net: String,
}

impl Netns {
    fn new(tag: u32) -> Netns {
        let (name, net) = (format!("sandcap-e2e-{tag}"), format!("10.231.{tag}"));
        let host = format!("sce2e{tag}h");
        let run = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().expect("ip runs");
            assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        let _ = Command::new("ip").args(["link", "del", &host]).output();
        run(&["netns", "add", &name]);
        run(&["link", "add", &host, "type", "veth", "peer", "name", "inner", "netns", &name]);
        run(&["addr", "add", &format!("{net}.1/24"), "dev", &host]);
        run(&["link", "set", &host, "up"]);
        for last in 2..=4 {
            run(&["-n", &name, "addr", "add", &format!("{net}.{last}/24"), "dev", "inner"]);
        }
        run(&["-n", &name, "link", "set", "inner", "up"]);
        run(&["-n", &name, "link", "set", "lo", "up"]);
        Netns { name, net }
    }

    fn address(&self, last: u8) -> String {
        format!("{}.{last}", self.net)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

/// The labels the EndpointSlice controller gives a slice of Service `service` (this cluster runs
/// no controller-manager: the scenario writes the slices the controller would).
fn managed(service: &str) -> Value {
    json!({"kubernetes.io/service-name": service, "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"})
}

/// The Service's one EndpointSlice, listing `endpoints` (address, pod, serving).
fn slice(endpoints: &[(String, &str, bool)]) -> Value {
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|(ip, pod, serving)| {
            json!({"addresses": [ip], "conditions": {"ready": serving, "serving": serving, "terminating": !serving},
                   "targetRef": {"kind": "Pod", "namespace": NS, "name": pod}})
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "acme-worker-1", "namespace": NS, "labels": managed("acme-worker")},
        "addressType": "IPv4",
        "ports": [{"name": "rpc", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    })
}

async fn worker_status(c: &Cluster, wanted: impl Fn(&Value) -> bool) -> Value {
    let admin = c.admin().await;
    eventually("the provider's worker status", WAIT, || async {
        let provider = get(&admin, "SandboxProvider", None, "e2e-endpoints").await?;
        let worker = provider["status"]["worker"].clone();
        wanted(&worker).then_some(worker)
    })
    .await
}

pub async fn every_endpoint_of_a_service_worker_must_advertise_a_method(c: Arc<Cluster>) {
    let minor: u32 = c.bin.version().split('.').nth(1).and_then(|m| m.parse().ok()).expect("a minor");
    let netns = Netns::new(minor);
    let install = install::default_chart(&c, NS).await;
    let full = methods_of(ContractVersion::V1);
    let without_sync_out: Vec<&str> = full.iter().copied().filter(|m| *m != "environmentSyncOut").collect();
    let listen = |last: u8| format!("{}:8080", netns.address(last));
    let _a = Worker::in_netns(&netns.name, &listen(2), &["--methods", &full.join(",")]);
    let _b = Worker::in_netns(&netns.name, &listen(3), &["--methods", &full.join(",")]);
    let _old = Worker::in_netns(&netns.name, &listen(4), &["--methods", &without_sync_out.join(",")]);
    // The default probe interval (5 minutes): every change below is seen through the slices.
    let _sandcap = Sandcap::start(&c, &install, "endpoints", &[("SANDCAP_CONTROLLERS_ONLY", "true")]);

    let mut acme = provider("e2e-endpoints", "unused", all_true());
    acme["spec"]["worker"] = json!({"service": {"namespace": NS, "name": "acme-worker", "port": 80, "path": "/rpc"}});
    let service = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "acme-worker", "namespace": NS},
        "spec": {"ports": [{"name": "rpc", "port": 80, "targetPort": 8080}]}
    });
    // Applied before the worker has an endpoint, as GitOps tools apply a directory.
    install::apply(&c, &[service, acme, lease(NS, "run", "e2e-endpoints", json!({}))]);
    let none = worker_status(&c, |w| w["endpoints"]["serving"] == 0).await;
    assert_eq!(none["probe"], "Failed", "{none:#}");

    let (a, b, old) = (netns.address(2), netns.address(3), netns.address(4));
    let started = Instant::now();
    install::apply(&c, &[slice(&[(a.clone(), "acme-a", true), (b.clone(), "acme-b", true)])]);
    let two = worker_status(&c, |w| w["probe"] == "Succeeded").await;
    println!("endpoints: two endpoints verified {:.1} s after their slice", started.elapsed().as_secs_f64());
    assert_eq!(two["endpoints"], json!({"serving": 2, "answered": 2, "agreeing": 2, "differing": []}), "{two:#}");
    assert_eq!(two["address"], "http://acme-worker.e2e-endpoints.svc:80/rpc", "{two:#}");
    let admin = c.admin().await;
    lease_reason(&admin, NS, "run", "nativeSyncIn", "Granted").await;

    // Endpoints the cluster does not vouch for are not probed: a hand-made slice, and a managed
    // one's endpoint of a Pod in another namespace (both at the endpoint that lacks a method).
    let mut forged = slice(&[(old.clone(), "acme-old", true)]);
    forged["metadata"] =
        json!({"name": "acme-worker-forged", "namespace": NS, "labels": {"kubernetes.io/service-name": "acme-worker"}});
    let mut foreign = slice(&[(old.clone(), "acme-old", true)]);
    foreign["metadata"]["name"] = json!("acme-worker-2");
    foreign["endpoints"][0]["targetRef"]["namespace"] = json!("elsewhere");
    install::apply(&c, &[forged, foreign]);
    let unvouched = worker_status(&c, |w| w["message"].as_str().is_some_and(|m| m.contains("were not probed"))).await;
    println!("endpoints: unvouched endpoints left out: {}", unvouched["message"]);
    assert_eq!(unvouched["endpoints"]["serving"], 2, "{unvouched:#}");
    assert!(unvouched["message"].as_str().unwrap().contains("1 serving endpoint(s)"), "{unvouched:#}");
    assert_eq!(unvouched["probe"], "Succeeded", "{unvouched:#}");
    lease_reason(&admin, NS, "run", "nativeSyncOut", "Granted").await;
    delete_slices(&c, &["acme-worker-forged", "acme-worker-2"]).await;
    worker_status(&c, |w| !w["message"].as_str().unwrap_or_default().contains("were not probed")).await;

    // A third endpoint without environmentSyncOut: the sync pair is off for every run at once.
    let started = Instant::now();
    let three = [(a.clone(), "acme-a", true), (b.clone(), "acme-b", true), (old.clone(), "acme-old", true)];
    install::apply(&c, &[slice(&three)]);
    let lacking = worker_status(&c, |w| w["endpoints"]["serving"] == 3).await;
    println!("endpoints: a lacking endpoint revoked {:.1} s after its slice", started.elapsed().as_secs_f64());
    assert_eq!(lacking["probe"], "Succeeded", "{lacking:#}");
    assert!(!lacking["supportedMethods"].as_array().unwrap().contains(&json!("environmentSyncOut")), "{lacking:#}");
    let named = json!([{"pod": "acme-old", "lacks": ["environmentSyncOut"]}]);
    assert_eq!(lacking["endpoints"]["differing"], named, "{lacking:#}");
    lease_reason(&admin, NS, "run", "nativeSyncOut", "MissingWorkerMethods").await;

    // It terminates and stops serving: granted again once no serving endpoint lacks the method.
    let draining = [(a.clone(), "acme-a", true), (b.clone(), "acme-b", true), (old.clone(), "acme-old", false)];
    install::apply(&c, &[slice(&draining)]);
    worker_status(&c, |w| w["endpoints"]["serving"] == 2).await;
    lease_reason(&admin, NS, "run", "nativeSyncOut", "Granted").await;
    flapping(&c, &three, &draining).await;

    // The same over https: the endpoint's certificate is for the Service's name, and the
    // provider gives the CA it chains to.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (cert, key) = c.ca.write_serving(dir.path(), &["acme-tls.e2e-endpoints.svc".to_string()]);
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let tls_args = ["--methods", &full.join(","), "--tls-cert", &cert, "--tls-key", &key];
    let _tls = Worker::in_netns(&netns.name, &format!("{a}:8443"), &tls_args);
    let mut tls = provider("e2e-endpoints-tls", "unused", all_true());
    tls["spec"]["worker"] = json!({
        "service": {"namespace": NS, "name": "acme-tls", "port": 443, "path": "/rpc", "scheme": "https"},
        "caBundle": base64::engine::general_purpose::STANDARD.encode(&c.ca.pem),
    });
    let mut tls_slice = slice(&[(a.clone(), "acme-a", true)]);
    tls_slice["metadata"] = json!({"name": "acme-tls-1", "namespace": NS, "labels": managed("acme-tls")});
    tls_slice["ports"] = json!([{"name": "https", "port": 8443, "protocol": "TCP"}]);
    let tls_service = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "acme-tls", "namespace": NS},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}]}
    });
    install::apply(&c, &[tls_service, tls_slice, tls]);
    let verified = eventually("the https provider verified", WAIT, || async {
        let provider = get(&admin, "SandboxProvider", None, "e2e-endpoints-tls").await?;
        let worker = provider["status"]["worker"].clone();
        (worker["probe"] == "Succeeded").then_some(worker)
    })
    .await;
    assert_eq!(verified["address"], "https://acme-tls.e2e-endpoints.svc:443/rpc", "{verified:#}");
    assert_eq!(verified["endpoints"]["answered"], 1, "{verified:#}");

    // Scaled to zero: nothing is verified.
    install::apply(&c, &[slice(&[])]);
    let gone = worker_status(&c, |w| w["endpoints"]["serving"] == 0).await;
    assert_eq!((gone["probe"].as_str(), gone["supportedMethods"].as_array().map(Vec::len)), (Some("Failed"), Some(0)));
    lease_reason(&admin, NS, "run", "nativeSyncIn", "WorkerNotVerified").await;
    drop(netns);
}

/// The lacking endpoint's Pod flips between serving and not every 2 s for a minute: the grant is
/// revoked at once and held back while it flaps, so the lease is written at most as often as
/// docs/controller.md's "Flapping endpoints" bounds (7 a minute), and granted again once it stays.
async fn flapping(c: &Cluster, serving: &[(String, &str, bool)], not: &[(String, &str, bool)]) {
    const FLIP: Duration = Duration::from_secs(2);
    let admin = c.admin().await;
    let leases: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NS, &resource("SandboxLease"));
    let version = leases.get("run").await.expect("the lease").metadata.resource_version.expect("a version");
    let params = WatchParams::default().fields("metadata.name=run").timeout(290);
    let mut events = leases.watch(&params, &version).await.expect("a watch of the lease").boxed();
    let started = Instant::now();
    let writes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let watching = {
        let writes = writes.clone();
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                match event {
                    Ok(WatchEvent::Modified(lease)) => {
                        let status = serde_json::to_value(&lease).expect("JSON")["status"].clone();
                        let reason = explanation(&status, "nativeSyncOut").map(|(r, _)| r).unwrap_or_default();
                        writes.lock().unwrap().push((started.elapsed(), reason));
                    }
                    Ok(WatchEvent::Error(e)) => {
                        writes.lock().unwrap().push((started.elapsed(), format!("watch ended: {e}")))
                    }
                    Err(e) => writes.lock().unwrap().push((started.elapsed(), format!("watch failed: {e}"))),
                    Ok(_) => {}
                }
            }
        })
    };
    let mut flips = tokio::time::interval(FLIP);
    for flip in 0..30 {
        flips.tick().await;
        install::apply(c, &[slice(if flip % 2 == 0 { serving } else { not })]);
    }
    let stopped = started.elapsed();
    lease_reason(&admin, NS, "run", "nativeSyncOut", "Granted").await;
    watching.abort();
    let writes = writes.lock().unwrap().clone();
    assert!(!writes.iter().any(|(_, w)| w.starts_with("watch ")), "the watch of the lease went on: {writes:?}");
    println!("endpoints: flipping every 2 s for {stopped:.0?}: the lease written {} time(s): {writes:?}", writes.len());
    let during: Vec<_> = writes.iter().filter(|(at, _)| *at <= stopped).collect();
    assert!(during.len() <= 7, "at most 7 lease writes a minute: {writes:?}");
    let first = during.first().expect("the lease written while it flapped");
    assert_eq!(first.1, "MissingWorkerMethods", "the first write revokes: {writes:?}");
    assert!(first.0 < Duration::from_secs(15), "revoked within seconds of the first flip: {writes:?}");
}

async fn delete_slices(c: &Cluster, names: &[&str]) {
    let admin = c.admin().await;
    let api: kube::Api<k8s_openapi::api::discovery::v1::EndpointSlice> = kube::Api::namespaced(admin, NS);
    for name in names {
        api.delete(name, &Default::default()).await.expect("the slice deleted");
    }
}

/// A probe round that would outlast its reconcile (the longest probe timeout, an endpoint that
/// never answers) is cut at the probe budget: the provider's status says Failed, granting
/// nothing, within the reconcile's deadline, and keeps what the other endpoint answered.
pub async fn a_probe_round_past_its_budget_publishes_a_failed_status(c: Arc<Cluster>) {
    const BUDGETED: &str = "e2e-endpoints-budget";
    let minor: u32 = c.bin.version().split('.').nth(1).and_then(|m| m.parse().ok()).expect("a minor");
    let netns = Netns::new(minor + 100);
    let install = install::default_chart(&c, BUDGETED).await;
    let methods = methods_of(ContractVersion::V1).join(",");
    let (answers, hangs) = (netns.address(2), netns.address(3));
    let _answers = Worker::in_netns(&netns.name, &format!("{answers}:8080"), &["--methods", &methods]);
    let _hangs = Worker::in_netns(&netns.name, &format!("{hangs}:8080"), &["--methods", &methods, "--delay", "10m"]);
    let env = [("SANDCAP_CONTROLLERS_ONLY", "true"), ("SANDCAP_PROBE_TIMEOUT", "1m")];
    let _sandcap = Sandcap::start(&c, &install, "endpoints-budget", &env);

    let mut budgeted = provider(BUDGETED, "unused", all_true());
    budgeted["spec"]["worker"] =
        json!({"service": {"namespace": BUDGETED, "name": "hangs", "port": 80, "path": "/rpc"}});
    let service = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "hangs", "namespace": BUDGETED},
        "spec": {"ports": [{"name": "rpc", "port": 80, "targetPort": 8080}]}
    });
    let mut both = slice(&[(answers, "answers", true), (hangs, "hangs", true)]);
    both["metadata"] = json!({"name": "hangs-1", "namespace": BUDGETED, "labels": managed("hangs")});
    for endpoint in both["endpoints"].as_array_mut().expect("endpoints") {
        endpoint["targetRef"]["namespace"] = json!(BUDGETED);
    }
    let started = Instant::now();
    install::apply(&c, &[service, both, budgeted]);
    let admin = c.admin().await;
    let worker = eventually("the budgeted provider's worker status", Duration::from_secs(120), || async {
        let provider = get(&admin, "SandboxProvider", None, BUDGETED).await?;
        let worker = provider["status"]["worker"].clone();
        (worker["endpoints"]["serving"] == 2).then_some(worker)
    })
    .await;
    let took = started.elapsed();
    println!("endpoints: a round cut at the probe budget published {:.1} s after the slice", took.as_secs_f64());
    assert_eq!(worker["probe"], "Failed", "{worker:#}");
    assert_eq!(worker["endpoints"]["answered"], 1, "the answer received is kept: {worker:#}");
    assert!(worker["supportedMethods"].as_array().is_some_and(Vec::is_empty), "{worker:#}");
    assert!(took < Duration::from_secs(60 + 30), "published within the reconcile's deadline: {took:?}");
    drop(netns);
}
