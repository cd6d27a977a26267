//! The node suite's scenarios, in the order an admin meets them: install, a provider with a real
//! worker, rollouts under load, switching the contract version (versions.rs), faults, a finished
//! Job's observed lease (observed.rs), an SDK plugin's worker behind the bridge (bridge.rs), uninstall.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};

use crate::node::{Node, eventually, repo_root, sandcap_binary};
use crate::release::published;
use crate::support::methods_of;

pub const NS: &str = "sandcap-system";
pub const RELEASE: &str = "sandcap";
/// The chart's leader-election Lease, and how long a dead holder keeps it (src/controller/leader.rs).
const LEADER_LEASE: &str = "sandcap-controller";
const LEASE_DURATION: Duration = Duration::from_secs(15);
pub const WAIT: Duration = Duration::from_secs(180);

type Scenario = fn(&Node);

pub fn all() -> Vec<(&'static str, Scenario)> {
    vec![
        ("1_install_check_and_helm_test", installed as Scenario),
        ("2_a_worker_by_service_and_the_example_objects", worker_and_examples),
        ("3_a_worker_rollout_is_followed_pod_by_pod", crate::rollout::a_worker_rollout_is_followed_pod_by_pod),
        ("4_rollouts_refuse_nothing", rollouts_refuse_nothing),
        ("5_contract_v2_and_back", crate::versions::switch_there_and_back),
        ("6_faults", faults),
        (
            "7_a_finished_job_takes_its_observed_lease_with_it",
            crate::observed::a_finished_job_takes_its_observed_lease_with_it,
        ),
        (
            "8_an_sdk_worker_behind_the_bridge_is_ready_and_a_lease_resolves",
            crate::bridge::an_sdk_worker_behind_the_bridge_is_ready_and_a_lease_resolves,
        ),
        ("9_uninstall_keeps_the_crds_and_objects", uninstall_keeps_everything),
    ]
}

/// `helm install oci://...` as docs/install.md gives it: the chart the release
/// published to the node's registry, with default values, its image pulled from there by digest;
/// checked once, whichever scenarios a filter selects.
pub fn install(node: &Node) {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        if node.exec(&["helm", "status", RELEASE, "-n", NS], "").status.success() {
            return; // a node kept from an earlier run (SANDCAP_NODE_KEEP=1)
        }
        let published = published(node);
        let started = Instant::now();
        let install = ["helm", "install", RELEASE, "-n", NS, "--create-namespace", "--wait", "--timeout", "5m"];
        node.ok(&[&install[..], &published.chart_args()].concat());
        println!("install: helm install oci://... --wait took {:.0?}", started.elapsed());
        let deployment = node.kubectl_json(&["get", "deployment", RELEASE, "-n", NS]);
        assert_eq!(deployment["status"]["readyReplicas"], json!(2), "both replicas Ready: {deployment:#}");
        // Every pod runs the image the release signed, by digest, and containerd pulled it from the
        // registry: only a pull records that name (the node's own import of the image is named
        // otherwise).
        let listed = node.kubectl_json(&["get", "pods", "-n", NS, "-l", "app.kubernetes.io/name=sandcap"]);
        for pod in listed["items"].as_array().expect("pods") {
            assert_eq!(pod["spec"]["containers"][0]["image"], json!(published.image), "{pod:#}");
        }
        let socket = node.state.join("containerd/containerd.sock").display().to_string();
        let images = node.ok(&["ctr", "--address", &socket, "-n", "k8s.io", "images", "ls", "-q"]);
        assert!(images.lines().any(|i| i == published.image), "{} not pulled:\n{images}", published.image);
        let secret = node.kubectl_json(&["get", "secret", "sandcap-webhook-tls", "-n", NS]);
        assert!(secret["data"]["tls.crt"].as_str().is_some_and(|c| !c.is_empty()), "the certificate Secret");
        eventually("the caBundle written", WAIT, || {
            let webhook = node.kubectl_json(&["get", "validatingwebhookconfiguration", RELEASE]);
            let bundles = webhook["webhooks"].as_array()?;
            bundles.iter().all(|w| w["clientConfig"]["caBundle"].as_str().is_some_and(|b| !b.is_empty())).then_some(())
        });
        leader(node);
        let started = Instant::now();
        node.ok(&[&sandcap_binary().display().to_string(), "check", "--wait", "2m"]);
        println!("install: sandcap check passed after {:.0?}", started.elapsed());
        let started = Instant::now();
        node.ok(&["helm", "test", RELEASE, "-n", NS, "--timeout", "3m"]);
        println!("install: helm test passed in {:.0?}", started.elapsed());
    });
}

fn installed(_: &Node) {}

/// Waits until the rollouts a scenario started are over: sandcap's Deployment (while installed)
/// and the worker's have every replica updated and available, and no pod of an older ReplicaSet
/// is left, terminating or not. The next scenario then starts from a settled cluster, whatever
/// the load made this one leave behind.
pub fn settle(node: &Node) {
    for (deployment, namespace, selector) in
        [(RELEASE, NS, "app.kubernetes.io/name=sandcap"), ("acme-worker", "sandbox-system", "app=acme-worker")]
    {
        let found = node.exec(&["kubectl", "get", "deployment", deployment, "-n", namespace, "-o", "name"], "");
        if !found.status.success() {
            continue; // not installed yet, or uninstalled
        }
        let target = format!("deployment/{deployment}");
        node.ok(&["kubectl", "rollout", "status", &target, "-n", namespace, "--timeout", "5m"]);
        eventually(&format!("{deployment}'s old pods gone"), WAIT, || {
            let wanted =
                node.kubectl_json(&["get", "deployment", deployment, "-n", namespace])["spec"]["replicas"].clone();
            let listed = node.kubectl_json(&["get", "pods", "-n", namespace, "-l", selector]);
            let items = listed["items"].as_array()?;
            let settled = items.iter().all(|p| p["metadata"]["deletionTimestamp"].is_null())
                && wanted.as_u64() == Some(items.len() as u64);
            settled.then_some(())
        });
    }
}

/// The holder of the leader-election Lease: the pod that leads, by name.
fn leader(node: &Node) -> String {
    eventually("one leader", WAIT, || {
        let lease = node.kubectl_json(&["get", "lease", LEADER_LEASE, "-n", NS]);
        let holder = lease["spec"]["holderIdentity"].as_str().filter(|h| !h.is_empty())?.to_string();
        let pods = pods(node);
        pods.iter().find(|p| holder.starts_with(p.as_str())).cloned()
    })
}

fn pods(node: &Node) -> Vec<String> {
    let pods = node.kubectl_json(&["get", "pods", "-n", NS, "-l", "app.kubernetes.io/name=sandcap"]);
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

/// The reference worker as a Deployment behind the Service `examples/provider-full.yaml` names,
/// once.
pub fn worker(node: &Node) {
    static DEPLOYED: OnceLock<()> = OnceLock::new();
    DEPLOYED.get_or_init(|| {
        let labels = json!({"app": "acme-worker"});
        node.apply(&[
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sandbox-system"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "acme-worker", "namespace": "sandbox-system"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": node.worker_template(&labels, &methods_of(ContractVersion::V1)),
                }
            }),
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "acme-worker", "namespace": "sandbox-system"},
                "spec": {"selector": labels, "ports": [{"port": 8080, "targetPort": 8080}]}
            }),
        ]);
        node.ok(&["kubectl", "rollout", "status", "deployment/acme-worker", "-n", "sandbox-system", "--timeout", "3m"]);
        let examples = repo_root().join("examples");
        node.ok(&["kubectl", "apply", "-f", &examples.join("provider-full.yaml").display().to_string()]);
        condition(node, &["sbp", "acme-kubernetes"], "Ready", "True");
    });
}

/// Waits until the object's condition `type_` has `status` for its current generation.
pub fn condition(node: &Node, object: &[&str], type_: &str, status: &str) -> Value {
    let mut args = vec!["get"];
    args.extend_from_slice(object);
    eventually(&format!("{object:?}: {type_} {status}"), WAIT, || {
        let o = node.kubectl_json(&args);
        let current = o["status"]["observedGeneration"] == o["metadata"]["generation"];
        let conditions = o["status"]["conditions"].as_array()?;
        conditions.iter().find(|c| c["type"] == type_ && c["status"] == status).filter(|_| current).cloned()
    })
}

/// The worker by Service, probed at its cluster DNS name; the example provider as shipped turns
/// Ready and the example leases resolve.
fn worker_and_examples(node: &Node) {
    worker(node);
    let provider = node.kubectl_json(&["get", "sbp", "acme-kubernetes"]);
    let worker = &provider["status"]["worker"];
    assert_eq!(worker["probe"], "Succeeded", "{provider:#}");
    assert_eq!(worker["address"], "http://acme-worker.sandbox-system.svc:8080/rpc", "{provider:#}");
    let examples = repo_root().join("examples");
    for file in ["secrets/acme-credentials.yaml", "lease-reuse.yaml", "lease-job.yaml"] {
        node.ok(&["kubectl", "apply", "-f", &examples.join(file).display().to_string()]);
    }
    for lease in ["run-42", "batch-7"] {
        let resolved = condition(node, &["sbl", lease, "-n", "team-a"], "Resolved", "True");
        println!("worker: lease team-a/{lease}: {}", resolved["message"]);
    }
    let job = node.kubectl_json(&["get", "sbl", "batch-7", "-n", "team-a"]);
    assert_eq!(job["status"]["capabilities"]["nativeSyncIn"], json!(false), "a Job-backed lease: {job:#}");
}

/// Creates a lease every 50 ms, from inside the node, until `stop`: (created, refused) names.
async fn create_until(node: &Node, namespace: &str, prefix: &str, stop: &AtomicBool) -> (Vec<String>, Vec<String>) {
    let client = node.client().await;
    let resource = ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk("sandcap.dev", "v1alpha1", "SandboxLease"));
    let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &resource);
    let (mut created, mut refused) = (Vec::new(), Vec::new());
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        i += 1;
        let name = format!("{prefix}-{i}");
        let lease: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxLease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"providerRef": {"name": "acme-kubernetes", "driverKey": "kubernetes"}}
        }))
        .expect("a lease");
        match api.create(&PostParams::default(), &lease).await {
            Ok(_) => created.push(name),
            Err(error) => refused.push(format!("{name}: {error}")),
        }
    }
    (created, refused)
}

/// `kubectl rollout restart` and a `helm upgrade` that changes a value, while a client creates a
/// lease every 50 ms: the kubelet's preStop and grace period and the EndpointSlice controller's own
/// timing, and no create is refused.
fn rollouts_refuse_nothing(node: &Node) {
    worker(node);
    let namespace = "node-rollout";
    node.apply(&[json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})]);
    let chart = published(node).chart_args();
    let rollouts: [(&str, Vec<&str>); 2] = [
        ("restart", vec!["kubectl", "rollout", "restart", "deployment/sandcap", "-n", NS]),
        (
            "upgrade",
            vec![
                "helm",
                "upgrade",
                RELEASE,
                chart[0],
                chart[1],
                chart[2],
                chart[3],
                "-n",
                NS,
                "--reuse-values",
                "--set",
                "controller.probeInterval=4m",
            ],
        ),
    ];
    let mut all_created = Vec::new();
    for (what, command) in rollouts {
        let stop = AtomicBool::new(false);
        let (created, refused) = std::thread::scope(|s| {
            let creator = s.spawn(|| {
                node.inside(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                    runtime.block_on(create_until(node, namespace, what, &stop))
                })
            });
            std::thread::sleep(Duration::from_secs(2));
            let started = Instant::now();
            node.ok(&command);
            node.ok(&["kubectl", "rollout", "status", "deployment/sandcap", "-n", NS, "--timeout", "5m"]);
            // The last replaced pod drains for a while after the rollout reports done.
            std::thread::sleep(Duration::from_secs(15));
            stop.store(true, Ordering::Relaxed);
            let result = creator.join().expect("the creating thread");
            println!("{what}: {:.0?}; {} creates, {} refused", started.elapsed(), result.0.len(), result.1.len());
            result
        });
        assert!(
            refused.is_empty(),
            "{what}: {} of {} creates refused:\n{}",
            refused.len(),
            created.len() + refused.len(),
            refused.join("\n")
        );
        assert!(created.len() > 100, "{what}: only {} creates", created.len());
        all_created.extend(created);
    }
    // Every lease created meanwhile is resolved.
    eventually("every lease created during the rollouts resolved", WAIT, || {
        let leases = node.kubectl_json(&["get", "sbl", "-n", namespace]);
        let items = leases["items"].as_array()?;
        let resolved = items
            .iter()
            .filter(|l| {
                l["status"]["conditions"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["type"] == "Resolved" && c["status"] == "True"))
            })
            .count();
        (resolved == all_created.len()).then_some(())
    });
}

/// The leader deleted gracefully and by force, an eviction the PDB must refuse, and containerd
/// restarted.
fn faults(node: &Node) {
    worker(node);
    for (how, extra) in [("gracefully", vec![]), ("by force", vec!["--grace-period=0", "--force"])] {
        let old = leader(node);
        let mut args = vec!["kubectl", "delete", "pod", old.as_str(), "-n", NS, "--wait=false"];
        args.extend(extra);
        let deleted = Instant::now();
        node.ok(&args);
        let new = eventually("another leader", LEASE_DURATION + Duration::from_secs(30), || {
            let new = leader(node);
            (new != old).then_some(new)
        });
        let took = deleted.elapsed();
        println!("faults: the leader deleted {how}: {new} leads {took:.1?} later");
        assert!(took <= LEASE_DURATION + Duration::from_secs(5), "{how}: the takeover took {took:?}");
        // Status writes resume: a new lease resolves.
        let name = format!("after-{}", how.replace(' ', "-"));
        node.apply(&[json!({
            "apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxLease",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"providerRef": {"name": "acme-kubernetes", "driverKey": "kubernetes"}}
        })]);
        condition(node, &["sbl", &name, "-n", "team-a"], "Resolved", "True");
        node.ok(&["kubectl", "rollout", "status", "deployment/sandcap", "-n", NS, "--timeout", "3m"]);
    }

    // With both replicas up, one eviction is allowed; the second, while the first's replacement
    // is not ready, would leave none and the PodDisruptionBudget refuses it.
    let pods = pods(node);
    assert_eq!(pods.len(), 2, "{pods:?}");
    let evict = |pod: &str| {
        let body = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": NS}});
        let path = format!("/api/v1/namespaces/{NS}/pods/{pod}/eviction");
        node.exec(&["kubectl", "create", "--raw", &path, "-f", "-"], &body.to_string())
    };
    let first = evict(&pods[0]);
    assert!(first.status.success(), "the first eviction: {}", String::from_utf8_lossy(&first.stderr));
    let second = evict(&pods[1]);
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success() && said.contains("disruption budget"), "the second eviction: {said}");
    println!("faults: a second eviction was refused: {}", said.trim());
    node.ok(&["kubectl", "rollout", "status", "deployment/sandcap", "-n", NS, "--timeout", "3m"]);

    // containerd restarted: the pods keep running (their shims do), and sandcap works.
    let restarted = Instant::now();
    let output = std::process::Command::new("bash")
        .arg(repo_root().join("examples/node.sh"))
        .args(["restart", "containerd"])
        .output()
        .expect("node.sh restart");
    assert!(output.status.success(), "restart containerd: {}", String::from_utf8_lossy(&output.stderr));
    node.ok(&[&sandcap_binary().display().to_string(), "check", "--wait", "2m"]);
    println!("faults: containerd restarted; check passed {:.0?} later", restarted.elapsed());
}

/// `helm uninstall`: the CRDs and every SandboxProvider and SandboxLease stay (the keep policy).
fn uninstall_keeps_everything(node: &Node) {
    worker(node);
    node.apply(&[json!({
        "apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxLease",
        "metadata": {"name": "kept", "namespace": "team-a"},
        "spec": {"providerRef": {"name": "acme-kubernetes", "driverKey": "kubernetes"}}
    })]);
    node.ok(&["helm", "uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "3m"]);
    for crd in ["sandboxproviders.sandcap.dev", "sandboxleases.sandcap.dev"] {
        node.ok(&["kubectl", "get", "crd", crd]);
    }
    node.ok(&["kubectl", "get", "sbp", "acme-kubernetes"]);
    node.ok(&["kubectl", "get", "sbl", "kept", "-n", "team-a"]);
    // sandcap's own pods are gone (the `helm test` pod, labelled apart, stays for `helm test --logs`).
    eventually("sandcap's pods gone", WAIT, || pods(node).is_empty().then_some(()));
}
