//! A real Kubernetes control plane with sandcap on this machine, for people (run it through
//! `examples/cluster.sh up`): the end-to-end tests' etcd and kube-apiserver, the CRDs, the
//! reference worker, and `sandcap run` with its webhook registered, all on loopback. It runs
//! until SIGTERM or SIGINT and then stops everything it started.
//!
//!   cargo run --example cluster -- BIN_DIR STATE_DIR
//!
//! BIN_DIR holds etcd, kube-apiserver and kubectl (testcluster/build.sh prints it); STATE_DIR
//! receives the kubeconfig, the logs and a provider manifest whose worker is the reference worker.

#[path = "../tests/e2e/harness/cluster.rs"]
#[allow(dead_code)]
mod cluster;
#[path = "../tests/support/ports.rs"]
#[allow(dead_code)]
mod ports;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use cluster::{Binaries, Cluster, repo_root, spawn_logged};
use sandcap_core::versions::V1;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bin_dir, state] = args.as_slice() else {
        eprintln!("usage: cluster BIN_DIR STATE_DIR");
        std::process::exit(2);
    };
    let (bin_dir, state) = (PathBuf::from(bin_dir), PathBuf::from(state));
    // The cluster's clients (reqwest, kube) use rustls with the process's default crypto provider.
    sandcap::tls::install_default_provider();
    std::fs::create_dir_all(&state).expect("state dir");
    let minor = bin_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let cluster = Cluster::start(Binaries { minor, dir: bin_dir });
    let kubectl = |args: &[&str]| {
        let out = cluster.kubectl(args);
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    kubectl(&["apply", "--server-side", "-f", repo_root().join("crds").to_str().expect("utf-8")]);
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/sandboxproviders.sandcap.dev",
        "crd/sandboxleases.sandcap.dev",
    ]);
    kubectl(&["create", "namespace", "team-a"]);
    kubectl(&["create", "namespace", "sandcap-system"]);

    let profile = std::env::current_exe()
        .expect("path")
        .parent()
        .and_then(|p| p.parent())
        .expect("target/<profile>")
        .to_path_buf();
    // Everything on port 0, the ports read back: see tests/support/ports.rs.
    let mut worker = Command::new(profile.join("examples/reference-worker"));
    worker.args(["--listen", "127.0.0.1:0", "--methods", &V1.worker_methods().join(",")]);
    let worker_log = state.join("worker.log");
    let _ = std::fs::remove_file(&worker_log);
    let mut worker = spawn_logged(worker, &worker_log);
    let worker_addr = ports::wait_for(&mut worker, "the worker's address", || {
        let log = std::fs::read_to_string(&worker_log).ok()?;
        log.lines().find_map(|l| l.strip_prefix("listening on ")?.parse::<SocketAddr>().ok())
    })
    .unwrap_or_else(|e| panic!("the reference worker: {e}"));

    let report = state.join("sandcap.listening");
    let _ = std::fs::remove_file(&report);
    let (cert, key) = cluster.ca.write_serving(&state.join("tls"), &[]);
    let mut sandcap = Command::new(profile.join("sandcap"));
    sandcap
        .args(["run", "--allow-worker-urls", "--worker-url-allowed-cidrs", "127.0.0.0/8"])
        // As the chart runs it: in sandcap-system, with leader election (`kubectl sandcap check`
        // finds the Lease there).
        .args(["--secret-namespaces", "team-a", "--pod-namespace", "sandcap-system"])
        // Registered by URL, not behind a Service: nothing to wait for when it stops.
        .arg("--shutdown-drain-window=0s")
        .args(["--webhook-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--listen-report"])
        .arg(&report)
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .env("KUBECONFIG", &cluster.kubeconfig);
    let mut sandcap = spawn_logged(sandcap, &state.join("sandcap.log"));
    let listening = ports::listening(&report, &mut sandcap).unwrap_or_else(|e| panic!("sandcap: {e}"));
    let webhook_addr = listening.webhook.expect("a webhook listener");

    let webhook = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "sandcap"},
        "webhooks": [{
            "name": "validate.sandcap.dev",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
            "clientConfig": {
                "url": format!("https://{webhook_addr}/validate"),
                "caBundle": base64_encode(&cluster.ca.pem),
            },
            "rules": [{"apiGroups": ["sandcap.dev"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"],
                       "resources": ["sandboxproviders", "sandboxleases"]}],
        }]
    });
    let out = cluster.kubectl_stdin(&["apply", "-f", "-"], &webhook.to_string());
    assert!(out.status.success(), "registering the webhook: {}", String::from_utf8_lossy(&out.stderr));

    // The example providers, with their worker at the reference worker (no cluster DNS here).
    for (example, service, local) in [
        (
            "provider-full.yaml",
            "{namespace: sandbox-system, name: acme-worker, port: 8080, path: /rpc}",
            "provider-local.yaml",
        ),
        (
            "provider-paperclip-kubernetes.yaml",
            "{namespace: sandbox-system, name: paperclip-kubernetes-worker, port: 8080, path: /rpc}",
            "provider-paperclip-local.yaml",
        ),
    ] {
        let provider = std::fs::read_to_string(repo_root().join("examples").join(example)).expect("example");
        let at_worker = provider.replace(&format!("service: {service}"), &format!("url: http://{worker_addr}/rpc"));
        std::fs::write(state.join(local), at_worker).expect("a local provider");
    }
    std::fs::copy(&cluster.kubeconfig, state.join("kubeconfig")).expect("kubeconfig");
    println!("ready {}", state.join("kubeconfig").display());

    // Until SIGTERM or SIGINT; then the children, and the cluster on drop.
    let signals = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    signals.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM");
        tokio::select! { _ = term.recv() => {}, _ = tokio::signal::ctrl_c() => {} }
    });
    cluster::stop(&mut sandcap);
    cluster::stop(&mut worker);
    std::thread::sleep(Duration::from_millis(100));
}

fn base64_encode(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}
