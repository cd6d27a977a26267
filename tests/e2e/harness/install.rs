//! sandcap installed as the chart installs it, minus what needs a kubelet: the CRDs, the chart
//! rendered by real Helm with its own RBAC and ServiceAccount applied and a token of that
//! ServiceAccount, and its webhook registered. The real `sandcap` binary runs with the
//! Deployment's environment as [`crate::harness::binary::Sandcap`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};

use crate::harness::cluster::{Cluster, repo_root};
use crate::support::ok;

pub const NAMESPACE: &str = "sandcap-system";

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

/// Applies the CRDs of contract `version` as crds/ holds them and waits until both are served;
/// they apply without a warning (an unknown `format` makes `kubectl apply` print one).
pub fn crds_of(cluster: &Cluster, version: ContractVersion) {
    let warnings = crds_from(cluster, &repo_root().join("crds").join(sandcap::cli::crd_dir(version)));
    assert!(!warnings.contains("Warning:"), "the CRDs apply without a warning: {warnings}");
}

/// Applies the CRDs in `dir` as an admin following docs/install.md's `kubectl apply --server-side -f crds/`
/// would, and waits until both are served. Forced: earlier scenarios of the same cluster change
/// the CRDs under their own field manager (a stale CRD for `sandcap check`), and the admin's apply
/// takes the fields back, as kubectl's own conflict message advises. Returns what the apply
/// printed on stderr.
pub fn crds_from(cluster: &Cluster, dir: &Path) -> String {
    let args = ["apply", "--server-side", "--force-conflicts", "-f", path_str(dir)];
    let applied = cluster.kubectl(&args);
    let stderr = String::from_utf8_lossy(&applied.stderr).into_owned();
    ok("apply the CRDs", applied);
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
    stderr
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

/// How most scenarios begin: the CRDs of contract v1, the chart with its default values (see
/// [`Install::chart`]), and the scenario's `namespace`.
pub async fn default_chart(cluster: &Cluster, namespace: &str) -> Install {
    crds(cluster);
    let install = Install::chart(cluster, json!({})).await;
    namespaces(cluster, &[namespace]);
    install
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
    /// (`ClusterIP:port`, through the test's proxy), which [`crate::harness::cluster::Proxy`]
    /// routes.
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
    /// caBundle: the apiserver reaches it through the cluster's proxy (see
    /// [`crate::harness::cluster::Proxy`]).
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

pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}
