//! sandcap installed as the chart installs it, minus what needs a kubelet: the chart's own RBAC and
//! ServiceAccount applied, and the real `sandcap` binary run as a local process with the
//! Deployment's environment (pod-only parts such as mounted certificates and `0.0.0.0` replaced by
//! loopback equivalents) and a token of the chart's ServiceAccount.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sandcap::versions::ContractVersion;
use serde_json::{Value, json};

use crate::cluster::{self, Cluster, repo_root, spawn_logged};

pub const NAMESPACE: &str = "sandcap-system";

pub use crate::support::ok;

/// Server-side applies `objects` as admin, taking over fields other writers set (the tests'
/// objects are the admin's intent).
pub fn apply(cluster: &Cluster, objects: &[Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let args = ["apply", "--server-side", "--force-conflicts", "--field-manager", "e2e", "-f", "-"];
    ok("kubectl apply", cluster.kubectl_stdin(&args, &list.to_string()));
}

/// Applies the CRDs of contract v1, the default (crds/), and waits until both are served.
pub fn crds(cluster: &Cluster) {
    crds_of(cluster, ContractVersion::V1);
}

/// Applies the CRDs of contract `version` as crds/ holds them and waits until both are served.
pub fn crds_of(cluster: &Cluster, version: ContractVersion) {
    crds_from(cluster, &repo_root().join("crds").join(sandcap::cli::crd_dir(version)));
}

/// Applies the CRDs in `dir` as an admin following docs/install.md's `kubectl apply --server-side -f crds/`
/// would, and waits until both are served. Forced: earlier scenarios of the same cluster change
/// the CRDs under their own field manager (a stale CRD for `sandcap check`), and the admin's apply
/// takes the fields back, as kubectl's own conflict message advises.
pub fn crds_from(cluster: &Cluster, dir: &Path) {
    let args = ["apply", "--server-side", "--force-conflicts", "-f", path_str(dir)];
    ok("apply the CRDs", cluster.kubectl(&args));
    ok(
        "wait for the CRDs",
        cluster.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/sandboxproviders.sandcap.dev",
            "crd/sandboxleases.sandcap.dev",
        ]),
    );
}

/// Namespaces, created if missing (no namespace controller runs here, so none is ever deleted).
pub fn namespaces(cluster: &Cluster, names: &[&str]) {
    let objects: Vec<Value> =
        names.iter().map(|n| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}})).collect();
    apply(cluster, &objects);
}

/// The chart rendered by real Helm (tests/chart/render.py in the chart tests' venv).
pub fn render_chart(values: &Value) -> Vec<Value> {
    let output = Command::new(chart_python())
        .arg(repo_root().join("tests/chart/render.py"))
        .arg(values.to_string())
        .output()
        .expect("python runs");
    serde_json::from_str(&ok("helm render", output)).expect("render.py prints JSON")
}

/// The Python of the chart tests' venv, which holds real Helm (its Go SDK).
pub fn chart_python() -> PathBuf {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    let venv = VENV.get_or_init(|| {
        let root = repo_root();
        let status = Command::new("bash")
            .arg(root.join(".ci/chart.sh"))
            .arg("--venv-only")
            .status()
            .expect("bash runs .ci/chart.sh");
        assert!(
            status.success(),
            ".ci/chart.sh --venv-only failed: the chart tests' venv is needed to render the chart"
        );
        std::env::var_os("SANDCAP_CHART_VENV").map_or_else(|| root.join("target/chart-venv"), PathBuf::from)
    });
    venv.join("bin/python")
}

/// What an install leaves behind: the rendered chart and a kubeconfig of its ServiceAccount.
pub struct Install {
    pub objects: Vec<Value>,
    pub kubeconfig: PathBuf,
}

impl Install {
    /// Renders the chart with `values`, applies its RBAC, ServiceAccount and admission policies
    /// (and the namespaces they live in) and returns a kubeconfig with a token of that
    /// ServiceAccount.
    pub async fn chart(cluster: &Cluster, values: Value) -> Install {
        let objects = render_chart(&values);
        let rbac: Vec<Value> = objects
            .iter()
            .filter(|o| {
                matches!(
                    o["kind"].as_str(),
                    Some(
                        "ServiceAccount"
                            | "ClusterRole"
                            | "ClusterRoleBinding"
                            | "Role"
                            | "RoleBinding"
                            | "ValidatingAdmissionPolicy"
                            | "ValidatingAdmissionPolicyBinding"
                    )
                )
            })
            .cloned()
            .collect();
        let mut names: Vec<&str> = rbac.iter().filter_map(|o| o["metadata"]["namespace"].as_str()).collect();
        names.push(NAMESPACE);
        names.sort();
        names.dedup();
        namespaces(cluster, &names);
        apply(cluster, &rbac);
        // The Deployment's: the chart also renders the `helm test` pod's ServiceAccount.
        let account = objects
            .iter()
            .find(|o| o["kind"] == "Deployment")
            .and_then(|o| o["spec"]["template"]["spec"]["serviceAccountName"].as_str())
            .expect("the chart's Deployment names its ServiceAccount")
            .to_string();
        let kubeconfig = cluster.service_account_kubeconfig(NAMESPACE, &account).await;
        Install { objects, kubeconfig }
    }

    pub fn of_kind(&self, kind: &str) -> &Value {
        self.objects.iter().find(|o| o["kind"] == kind).unwrap_or_else(|| panic!("the chart renders no {kind}"))
    }

    /// The Deployment's container environment, as the kubelet would resolve it for pod `pod`.
    pub fn env(&self, pod: &str) -> Vec<(String, String)> {
        let container = &self.of_kind("Deployment")["spec"]["template"]["spec"]["containers"][0];
        container["env"]
            .as_array()
            .expect("env")
            .iter()
            .map(|e| {
                let name = e["name"].as_str().expect("name").to_string();
                let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                    Some("metadata.name") => pod.to_string(),
                    Some("metadata.namespace") => NAMESPACE.to_string(),
                    Some(other) => panic!("unexpected fieldRef {other}"),
                    None => e["value"].as_str().unwrap_or_default().to_string(),
                };
                (name, value)
            })
            .collect()
    }

    /// The DNS names of the chart's webhook Service, which its serving certificate must hold.
    pub fn service_names(&self) -> Vec<String> {
        let name = self.of_kind("Service")["metadata"]["name"].as_str().expect("name");
        vec![name.to_string(), format!("{name}.{NAMESPACE}"), format!("{name}.{NAMESPACE}.svc")]
    }

    /// Applies the chart's webhook Service and returns the address the apiserver dials for it
    /// (`ClusterIP:port`, through the test's proxy), which [`crate::cluster::Proxy`] routes.
    pub async fn service_address(&self, cluster: &Cluster) -> String {
        let service = self.of_kind("Service");
        apply(cluster, std::slice::from_ref(service));
        let services = kube::Api::<k8s_openapi::api::core::v1::Service>::namespaced(cluster.admin().await, NAMESPACE);
        let name = service["metadata"]["name"].as_str().expect("name");
        let spec = services.get(name).await.expect("the Service").spec.expect("spec");
        let port = spec.ports.expect("ports").iter().find(|p| p.name.as_deref() == Some("https")).expect("https").port;
        format!("{}:{port}", spec.cluster_ip.expect("a ClusterIP"))
    }

    /// Applies every rendered object as `helm install` or `helm upgrade` would (the apiserver
    /// stores them all; without a kubelet no pod runs), the webhook configuration calling the
    /// Service with `ca_pem` in its caBundle, where sandcap's certificate keeper would have put its
    /// own CA.
    pub fn release(&self, cluster: &Cluster, ca_pem: &str) -> WebhookRegistration {
        use base64::Engine;
        let mut objects = self.objects.clone();
        let config = objects.iter_mut().find(|o| o["kind"] == "ValidatingWebhookConfiguration").expect("a webhook");
        let name = config["metadata"]["name"].as_str().expect("name").to_string();
        for hook in config["webhooks"].as_array_mut().expect("webhooks") {
            hook["clientConfig"]["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(ca_pem));
        }
        apply(cluster, &objects);
        WebhookRegistration { kubeconfig: cluster.kubeconfig.clone(), kubectl: cluster.bin.path("kubectl"), name }
    }

    /// The chart's ValidatingWebhookConfiguration, registered by URL on loopback with `ca_pem`
    /// (the apiserver calls the local process directly: there is no Service to route through).
    pub fn register_webhook(&self, cluster: &Cluster, port: u16, ca_pem: &str) -> WebhookRegistration {
        use base64::Engine;
        let mut config = self.of_kind("ValidatingWebhookConfiguration").clone();
        let name = config["metadata"]["name"].as_str().expect("name").to_string();
        for hook in config["webhooks"].as_array_mut().expect("webhooks") {
            hook["clientConfig"] = json!({
                "url": format!("https://127.0.0.1:{port}/validate"),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
            });
        }
        if let Some(annotations) = config["metadata"]["annotations"].as_object_mut() {
            annotations.remove("cert-manager.io/inject-ca-from");
        }
        apply(cluster, &[config]);
        WebhookRegistration { kubeconfig: cluster.kubeconfig.clone(), kubectl: cluster.bin.path("kubectl"), name }
    }

    /// The chart's ValidatingWebhookConfiguration as rendered (by Service), with `ca_pem` as its
    /// caBundle: the apiserver reaches it through the cluster's proxy (see [`crate::cluster::Proxy`]).
    pub fn register_webhook_by_service(&self, cluster: &Cluster, ca_pem: &str) -> WebhookRegistration {
        use base64::Engine;
        let mut config = self.of_kind("ValidatingWebhookConfiguration").clone();
        let name = config["metadata"]["name"].as_str().expect("name").to_string();
        for hook in config["webhooks"].as_array_mut().expect("webhooks") {
            hook["clientConfig"]["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(ca_pem));
        }
        apply(cluster, &[config]);
        WebhookRegistration { kubeconfig: cluster.kubeconfig.clone(), kubectl: cluster.bin.path("kubectl"), name }
    }
}

/// Removes the webhook registration when dropped, so a later scenario never meets a webhook
/// whose process is gone (`failurePolicy: Fail` would refuse every sandcap object).
pub struct WebhookRegistration {
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    name: String,
}

impl Drop for WebhookRegistration {
    fn drop(&mut self) {
        let _ = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["delete", "validatingwebhookconfiguration", &self.name, "--ignore-not-found", "--wait=false"])
            .output();
    }
}

/// One `sandcap run` process; killed when dropped.
pub struct Sandcap {
    child: Child,
    pub name: String,
    pub webhook_port: u16,
    pub admin_port: u16,
    pub log: PathBuf,
}

impl Sandcap {
    /// Starts `sandcap run` with the chart's environment for pod `name`, the given kubeconfig,
    /// loopback addresses, and `overrides` (replacing or adding variables) on top; returns once it
    /// listens.
    pub fn start(cluster: &Cluster, install: &Install, name: &str, overrides: &[(&str, &str)]) -> Sandcap {
        let report = cluster.dir.join(format!("{name}.listening"));
        let tls = cluster.dir.join(format!("{name}-tls"));
        let (cert, key) = cluster.ca.write_serving(&tls, &install.service_names());
        let mut env = install.env(name);
        let loopback = [
            ("SANDCAP_WEBHOOK_ADDR", "127.0.0.1:0".to_string()),
            ("SANDCAP_ADMIN_ADDR", "127.0.0.1:0".to_string()),
            ("SANDCAP_LISTEN_REPORT", report.display().to_string()),
            ("SANDCAP_TLS_CERT", cert.display().to_string()),
            ("SANDCAP_TLS_KEY", key.display().to_string()),
            // The Secret would be mounted by the kubelet; here the webhook serves the test CA's pair.
            ("SANDCAP_SELF_MANAGED_CERTS", "false".to_string()),
            // Workers listen on loopback URLs, which must be allowed explicitly; a Service would
            // need cluster DNS.
            ("SANDCAP_ALLOW_WORKER_URLS", "true".to_string()),
            ("SANDCAP_WORKER_URL_ALLOWED_CIDRS", "127.0.0.0/8".to_string()),
            ("SANDCAP_LOG_FORMAT", "text".to_string()),
        ];
        for (k, v) in loopback.iter().map(|(k, v)| (*k, v.as_str())).chain(overrides.iter().copied()) {
            env.retain(|(name, _)| name != k);
            env.push((k.to_string(), v.to_string()));
        }
        let log = cluster.dir.join(format!("{name}.log"));
        let _ = std::fs::remove_file(&log);
        let _ = std::fs::remove_file(&report);
        // SANDCAP_E2E_SANDCAP runs another build (an older commit, to see a test fail first).
        let binary = std::env::var_os("SANDCAP_E2E_SANDCAP").unwrap_or_else(|| env!("CARGO_BIN_EXE_sandcap").into());
        let mut command = Command::new(binary);
        command.arg("run").env_clear().envs(env).env("KUBECONFIG", &install.kubeconfig).env("RUST_LOG", "info");
        let mut child = spawn_logged(command, &log);
        let listening = crate::support::ports::listening(&report, &mut child)
            .unwrap_or_else(|e| panic!("{name}: {e}:\n{}", cluster::tail(&log, 30)));
        // 0 without a webhook (SANDCAP_CONTROLLERS_ONLY).
        let webhook_port = listening.webhook.map_or(0, |addr| addr.port());
        Sandcap { child, name: name.to_string(), webhook_port, admin_port: listening.admin.port(), log }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `/readyz` on the admin port answers 200.
    pub async fn ready(&self) {
        let url = format!("http://127.0.0.1:{}/readyz", self.admin_port);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if reqwest::get(&url).await.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("sandcap {} not ready within 30s:\n{}", self.name, cluster::tail(&self.log, 30));
    }

    pub async fn metrics(&self) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.admin_port);
        reqwest::get(&url).await.expect("metrics answer").text().await.expect("metrics text")
    }

    /// The process's peak resident memory so far, in bytes.
    pub fn peak_rss(&self) -> u64 {
        crate::support::peak_rss(self.child.id())
    }

    /// Resident memory now (`VmRSS`), in bytes.
    pub fn rss(&self) -> u64 {
        let kib = crate::support::proc_status(self.child.id(), "VmRSS").expect("VmRSS in /proc/<pid>/status");
        kib.trim_end_matches("kB").trim().parse::<u64>().expect("VmRSS in kB") * 1024
    }

    pub fn signal(&self, signal: i32) {
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// Waits up to `timeout` for the process to exit (`Duration::ZERO`: whether it has).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Lines of the log that no healthy run writes.
    pub fn problems(&self) -> Vec<String> {
        self.log_text()
            .lines()
            .filter(|l| l.contains("panicked") || l.to_lowercase().contains("forbidden"))
            .map(String::from)
            .collect()
    }
}

impl Drop for Sandcap {
    fn drop(&mut self) {
        // SIGINT skips the drain window: a scenario that is over has no clients left to wait for.
        cluster::stop_with(&mut self.child, libc::SIGINT);
    }
}

/// Polls `check` until it returns `Some` or `timeout` passes; panics naming `what`.
pub async fn eventually<T, F: Future<Output = Option<T>>>(what: &str, timeout: Duration, check: impl Fn() -> F) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}
