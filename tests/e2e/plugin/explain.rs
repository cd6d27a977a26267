//! `sandcap check` by Service with exactly the RBAC docs/contract.md lists, and `explain` of a
//! lease whose Secret sandcap does not read: it says so and how to fix it, and never shows the
//! value.

use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, DeleteParams};
use sandcap::certs::{dns_names, generate};
use sandcap_core::versions::ContractVersion;
use serde_json::{Value, json};

use super::commands::{ALL, fails_at, kubectl_with_plugin, passes, plugin_dir, text};
use crate::harness::binary::{Sandcap, sandcap};
use crate::harness::cluster::Cluster;
use crate::harness::install::{self, Install, NAMESPACE, WebhookRegistration};
use crate::harness::objects::delete;
use crate::harness::waits::lease_reason;
use crate::support::{Worker, all_true, lease, ok, provider, secret};

const NS: &str = "e2e-explain";
/// The Secret's value, which `explain` must never show.
const VALUE: &str = "s3cr3t-explain-value";
/// What sandcap runs with (the chart's secretNamespaces); the default is none.
const SCOPE: [&str; 2] = ["--secret-namespaces", NS];

/// The RBAC that `check` needs (docs/contract.md, "Command line"), bound to ServiceAccount
/// `sandcap-check` in sandcap's namespace.
fn check_rbac() -> Vec<Value> {
    let subject = json!([{"kind": "ServiceAccount", "name": "sandcap-check", "namespace": NAMESPACE}]);
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sandcap-check", "namespace": NAMESPACE}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "e2e-sandcap-check"},
            "rules": [
                {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get"],
                 "resourceNames": ["sandboxproviders.sandcap.dev", "sandboxleases.sandcap.dev"]},
                {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"],
                 "verbs": ["get"], "resourceNames": ["sandcap"]},
                {"apiGroups": ["sandcap.dev"], "resources": ["sandboxproviders"], "verbs": ["create", "list"]},
                {"apiGroups": ["sandcap.dev"], "resources": ["sandboxleases"], "verbs": ["list"]},
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]},
                {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "e2e-sandcap-check"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-sandcap-check"},
            "subjects": subject}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "e2e-sandcap-check", "namespace": NAMESPACE},
            "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"], "resourceNames": ["sandcap-controller"]},
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["sandcap-webhook-tls"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "e2e-sandcap-check", "namespace": NAMESPACE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "e2e-sandcap-check"},
            "subjects": subject}),
    ]
}

pub async fn explain_and_check_by_service_with_the_documented_rbac(c: Arc<Cluster>) {
    install::crds(&c);
    let install = Install::chart(&c, json!({"secretNamespaces": [NS]})).await;
    install::namespaces(&c, &[NS]);
    let admin = c.admin().await;
    let (sandcap_run, registration) = as_the_chart_installs_it(&c, &admin, &install).await;
    check_by_service_with_the_documented_rbac(&c).await;
    // A lease whose Secret sandcap does not read: explain says so and how to fix it, and never
    // shows the value.
    let worker = Worker::of_contract(ContractVersion::V1);
    install::apply(&c, &[provider("e2e-explain", &worker.url, all_true())]);
    explain_names_the_unlabelled_secret(&c, &admin).await;
    explain_once_labelled_and_in_scope(&c, &admin).await;

    // The webhook stopped: the Secret still shows the certificate, the dry run fails.
    drop(sandcap_run);
    let message = fails_at(&c, &[], &["crds", "webhook"], "admission", "failed calling webhook");
    assert!(message.starts_with("the apiserver cannot call the webhook"), "{message}");
    drop(registration);
    for lease_name in ["run-1"] {
        delete(&admin, "SandboxLease", Some(NS), lease_name).await;
    }
    delete(&admin, "SandboxProvider", None, "e2e-explain").await;
    ok("delete", c.kubectl(&["delete", "secret", "-n", NAMESPACE, "sandcap-webhook-tls", "--ignore-not-found"]));
    ok("delete", c.kubectl(&["delete", "service", "-n", NAMESPACE, "sandcap-webhook", "--ignore-not-found"]));
    let _ = Api::<Lease>::namespaced(admin, NAMESPACE).delete("sandcap-controller", &DeleteParams::default()).await;
}

/// As the chart installs it: the webhook by Service, serving the certificate of its Secret.
/// Returns sandcap and the webhook's registration.
async fn as_the_chart_installs_it(c: &Cluster, admin: &Client, install: &Install) -> (Sandcap, WebhookRegistration) {
    let material = generate(&dns_names("sandcap-webhook", NAMESPACE), SystemTime::now()).expect("certificates");
    let tls = c.dir.join("plugin-service-mounted");
    std::fs::create_dir_all(&tls).unwrap();
    std::fs::write(tls.join("tls.crt"), material.serving.cert().pem()).unwrap();
    std::fs::write(tls.join("tls.key"), material.serving.key_pem()).unwrap();
    let (cert, key) = (tls.join("tls.crt").display().to_string(), tls.join("tls.key").display().to_string());
    let sandcap_run = Sandcap::start(
        c,
        install,
        "plugin-service",
        &[("SANDCAP_TLS_CERT", &cert), ("SANDCAP_TLS_KEY", &key), ("SANDCAP_PROBE_INTERVAL", "2s")],
    );
    let service = install.objects.iter().find(|o| o["kind"] == "Service").unwrap().clone();
    install::apply(c, &[service]);
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(admin.clone(), NAMESPACE);
    let cluster_ip = services.get("sandcap-webhook").await.unwrap().spec.unwrap().cluster_ip.expect("a ClusterIP");
    c.proxy.route(&format!("{cluster_ip}:443"), sandcap_run.webhook_port);
    let data: serde_json::Map<String, Value> =
        material.to_secret_data().into_iter().map(|(k, v)| (k, json!(String::from_utf8(v.0).expect("PEM")))).collect();
    install::apply(
        c,
        &[json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "sandcap-webhook-tls", "namespace": NAMESPACE}, "stringData": data})],
    );
    sandcap_run.ready().await;
    let registration = install.register_webhook_by_service(c, &material.ca_bundle());
    (sandcap_run, registration)
}

/// From here the Service's name does not resolve: the certificate is the Secret's. `check` passes
/// with exactly the RBAC docs/contract.md lists.
async fn check_by_service_with_the_documented_rbac(c: &Cluster) {
    let lines = passes(c, &["--wait", "60s"]);
    assert!(lines[1].2.contains("in Secret sandcap-system/sandcap-webhook-tls (Service sandcap-system/sandcap-webhook port 443 is not reachable from here"), "{lines:?}");
    assert!(lines[1].2.contains("for sandcap-webhook.sandcap-system.svc; it expires in 36"), "{lines:?}");
    // With exactly the RBAC docs/contract.md lists.
    install::apply(c, &check_rbac());
    let account = c.service_account_kubeconfig(NAMESPACE, "sandcap-check").await;
    let account = account.display().to_string();
    passes(c, &["--kubeconfig", &account]);
    // kubectl's conventions: the same account by impersonation, no request timeout with `0`,
    // and the same checks as records.
    let as_check = format!("system:serviceaccount:{NAMESPACE}:sandcap-check");
    passes(c, &["--as", &as_check, "--request-timeout", "0"]);
    let refused = fails_at(c, &["--as", "nobody", "--as-group", "nobodies"], &[], "crds", "\"nobody\"");
    assert!(refused.contains("forbidden"), "{refused}");
    let o = sandcap(c, &["check", "--kubeconfig", &account, "-o", "json"]);
    let records: Value = serde_json::from_slice(&o.stdout).expect("check -o json");
    let levels: Vec<(&str, &str)> = records
        .as_array()
        .expect("a record per check")
        .iter()
        .map(|r| (r["check"].as_str().unwrap_or_default(), r["level"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(levels, ALL.map(|check| (check, "ok")), "{records:#}");
}

/// The Secret unlabelled: explain says so and how to fix it, and never shows the value.
async fn explain_names_the_unlabelled_secret(c: &Cluster, admin: &Client) {
    install::apply(c, &[secret(NS, "creds", "config.json", &format!(r#"{{"apiToken": "{VALUE}"}}"#), false)]);
    let spec = json!({"policy": "ReuseByEnvironment", "environment": "e",
                      "configFrom": [{"secretKeyRef": {"name": "creds", "key": "config.json"}}]});
    install::apply(c, &[lease(NS, "run-1", "e2e-explain", spec)]);
    lease_reason(admin, NS, "run-1", "persistentProcessSessions", "NarrowedByConfigResolution").await;
    let dir = plugin_dir(c);
    // kubectl completes the plugin's words through kubectl_complete-sandcap.
    let o = kubectl_with_plugin(c, &dir, &["__complete", "sandcap", "explain", "le"]);
    assert_eq!(
        text(&o.stdout).lines().collect::<Vec<_>>()[..2],
        ["lease\tA SandboxLease (`sbl`): its capabilities, pinned identity, narrowings and configFrom Secrets", ":4"],
        "{}",
        text(&o.stderr)
    );
    for output in ["table", "json", "yaml"] {
        let args = [&["sandcap", "explain", "lease", "-n", NS, "run-1", "-o", output][..], &SCOPE].concat();
        let o = kubectl_with_plugin(c, &dir, &args);
        let all = format!("{}{}", text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "{all}");
        assert!(all.contains("found, but not labelled sandcap.dev/config-source=true"), "{output}: {all}");
        assert!(all.contains(&format!("kubectl label secret -n {NS} creds sandcap.dev/config-source=true")), "{all}");
        assert!(!all.contains(VALUE), "explain -o {output} shows the Secret's value:\n{all}");
    }
    let table = text(&sandcap(c, &[&["explain", "lease", "-n", NS, "run-1"][..], &SCOPE].concat()).stdout);
    assert!(
        table.contains(
            "persistentProcessSessions OFF: NarrowedByConfigResolution: configFrom Secret creds does not exist"
        ),
        "{table}"
    );
    assert!(table.contains("reusableLeases on: Granted"), "{table}");
    let o = sandcap(c, &["explain", "lease", "-n", NS, "run-1", "--secret-namespaces", "team-b"]);
    assert!(text(&o.stdout).contains("found, but not labelled"), "the label is checked first");
}

/// The Secret labelled: granted, and read only where `--secret-namespaces` says.
async fn explain_once_labelled_and_in_scope(c: &Cluster, admin: &Client) {
    install::apply(c, &[secret(NS, "creds", "config.json", &format!(r#"{{"apiToken": "{VALUE}"}}"#), true)]);
    lease_reason(admin, NS, "run-1", "persistentProcessSessions", "Granted").await;
    let o = sandcap(c, &["explain", "lease", "-n", NS, "run-1", "-o", "json"]);
    let report: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(report["configFrom"][0]["sandcapReadsIt"], false, "the default scope is none: {report:#}");
    let o = sandcap(c, &[&["explain", "lease", "-n", NS, "run-1", "-o", "json"][..], &SCOPE].concat());
    let report: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(report["configFrom"][0]["sandcapReadsIt"], true, "{report:#}");
    assert!(
        report["capabilities"].as_array().unwrap().iter().all(|c| c["granted"] == true && c["fix"].is_null()),
        "{report:#}"
    );
    let o = sandcap(c, &["explain", "lease", "-n", NS, "run-1", "--secret-namespaces", "team-b"]);
    assert!(
        text(&o.stdout).contains("sandcap reads Secrets only in team-b (--secret-namespaces), not in e2e-explain"),
        "{}",
        text(&o.stdout)
    );
    let provider_text = text(&sandcap(c, &["explain", "provider", "e2e-explain"]).stdout);
    assert!(provider_text.contains("worker        probe Succeeded at "), "{provider_text}");
    let missing = sandcap(c, &["explain", "lease", "-n", NS, "nope"]);
    assert_eq!(
        (missing.status.code(), text(&missing.stderr)),
        (Some(2), format!("sandcap: SandboxLease {NS}/nope not found\n"))
    );
}
