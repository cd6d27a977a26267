//! `kubectl sandcap check` and `kubectl sandcap explain` against the real apiserver, with sandcap
//! installed with the chart's RBAC: a healthy install passes every check, and each failure is the
//! check that names it (a stale CRD, a caBundle that does not match, the webhook stopped, no
//! leader, a change the controllers never resolved); `--wait` waits; `check` needs no more than
//! the RBAC docs/contract.md lists; `explain` names an unlabelled Secret without its value.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::DeleteParams;
use sandcap::certs::{dns_names, generate};
use sandcap::versions::ContractVersion;
use serde_json::{Value, json};

use crate::cluster::{Cluster, TestCa};
use crate::controllers::{delete, lease_reason, sandcap};
use crate::install::{self, Install, NAMESPACE, Sandcap, ok};
use crate::support::{Worker, all_true, lease, provider, secret};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `check` with `args`: its exit code and its lines as `(level, check, message)`.
fn check(c: &Cluster, args: &[&str]) -> (Option<i32>, Vec<(String, String, String)>, String) {
    let o = sandcap(c, &[&["check"], args].concat());
    let lines = text(&o.stdout)
        .lines()
        .map(|l| {
            let mut words = l.splitn(2, ' ');
            let level = words.next().unwrap_or_default().to_string();
            let rest = words.next().unwrap_or_default().trim_start();
            let (check, message) = rest.split_once(' ').unwrap_or((rest, ""));
            (level, check.to_string(), message.trim_start().to_string())
        })
        .collect();
    (o.status.code(), lines, format!("{}{}", text(&o.stdout), text(&o.stderr)))
}

/// Asserts that `check` passes every check up to `passing`, then fails `failing` with `words`.
fn fails_at(c: &Cluster, args: &[&str], passing: &[&str], failing: &str, words: &str) -> String {
    let (code, lines, all) = check(c, args);
    assert_eq!(code, Some(1), "{all}");
    let levels: Vec<(&str, &str)> = lines.iter().map(|(l, c, _)| (l.as_str(), c.as_str())).collect();
    let mut want: Vec<(&str, &str)> = passing.iter().map(|p| ("ok", *p)).collect();
    want.push(("FAIL", failing));
    assert_eq!(levels, want, "{all}");
    let message = lines.last().map(|l| l.2.clone()).unwrap_or_default();
    assert!(message.contains(words), "{failing} should say {words:?}:\n{all}");
    message
}

const ALL: [&str; 5] = ["crds", "webhook", "admission", "leader", "controllers"];

fn passes(c: &Cluster, args: &[&str]) -> Vec<(String, String, String)> {
    let (code, lines, all) = check(c, args);
    assert_eq!(code, Some(0), "{all}");
    let names: Vec<&str> = lines.iter().map(|l| l.1.as_str()).collect();
    assert_eq!(names, ALL, "{all}");
    assert!(lines.iter().all(|l| l.0 == "ok"), "{all}");
    lines
}

/// A directory holding `kubectl-sandcap` and `kubectl_complete-sandcap` links to the built
/// binary, for kubectl to find.
fn plugin_dir(c: &Cluster) -> PathBuf {
    let dir = c.dir.join("plugin-path");
    let _ = std::fs::create_dir_all(&dir);
    for name in [sandcap::cli::PLUGIN_NAME, sandcap::cli::HELPER_NAME] {
        let link = dir.join(name);
        if !link.exists() {
            std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sandcap"), &link).expect("symlink");
        }
    }
    dir
}

/// `kubectl ARGS` with the plugin on the PATH.
fn kubectl_with_plugin(c: &Cluster, dir: &Path, args: &[&str]) -> Output {
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    Command::new(c.bin.path("kubectl")).args(args).env("PATH", path).env("KUBECONFIG", &c.kubeconfig).output().unwrap()
}

pub async fn check_passes_and_names_each_failure(c: Arc<Cluster>) {
    const NS: &str = "e2e-plugin";
    install::crds(&c);
    let install = Install::chart(&c, json!({"secretNamespaces": [NS]})).await;
    install::namespaces(&c, &[NS]);
    let admin = c.admin().await;

    // --wait waits: started before sandcap is, it passes once sandcap is up.
    let waiting = {
        let kubeconfig = c.kubeconfig.clone();
        std::thread::spawn(move || {
            Command::new(env!("CARGO_BIN_EXE_sandcap"))
                .args(["check", "--wait", "90s", "--kubeconfig"])
                .arg(kubeconfig)
                .output()
                .expect("sandcap runs")
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    let overrides = [("SANDCAP_PROBE_INTERVAL", "2s"), ("SANDCAP_PROBE_TIMEOUT", "1s")];
    let mut webhook = Sandcap::start(&c, &install, "plugin-webhook", &[("SANDCAP_WEBHOOK_ONLY", "true")]);
    let controllers = Sandcap::start(
        &c,
        &install,
        "plugin-controllers",
        &[&[("SANDCAP_CONTROLLERS_ONLY", "true")][..], &overrides].concat(),
    );
    webhook.ready().await;
    let mut registration = install.register_webhook(&c, webhook.webhook_port, &c.ca.pem);
    let waited = tokio::task::spawn_blocking(move || waiting.join().expect("the waiting check")).await.unwrap();
    assert_eq!(waited.status.code(), Some(0), "{}{}", text(&waited.stdout), text(&waited.stderr));
    assert!(text(&waited.stderr).contains("not yet: "), "it retried: {}", text(&waited.stderr));

    // Healthy: every check passes, also as `kubectl sandcap`, which `kubectl plugin list` finds.
    let lines = passes(&c, &[]);
    assert!(
        lines[1].2.contains(&format!("served at https://127.0.0.1:{}/validate for 127.0.0.1", webhook.webhook_port)),
        "{lines:?}"
    );
    assert!(lines[3].2.starts_with("plugin-controllers holds Lease sandcap-system/sandcap-controller"), "{lines:?}");
    let dir = plugin_dir(&c);
    let listed = kubectl_with_plugin(&c, &dir, &["plugin", "list"]);
    assert!(text(&listed.stdout).contains(&dir.join("kubectl-sandcap").display().to_string()), "{listed:?}");
    let through_kubectl = kubectl_with_plugin(&c, &dir, &["sandcap", "check"]);
    assert_eq!(through_kubectl.status.code(), Some(0), "{through_kubectl:?}");
    assert_eq!(text(&through_kubectl.stdout).lines().filter(|l| l.starts_with("ok ")).count(), 5);

    // --confirm-dry-run-only, as the helm test runs it: the chart's admission policy (applied
    // with the install, in effect within seconds, which --wait covers) refuses its account a real
    // create before any webhook is called.
    let helm_test = install.objects.iter().find(|o| o["kind"] == "Pod").expect("the helm test pod");
    let helm_test = helm_test["spec"]["serviceAccountName"].as_str().expect("its ServiceAccount");
    let helm_test = c.service_account_kubeconfig(NAMESPACE, helm_test).await.display().to_string();
    let lines = passes(&c, &["--kubeconfig", &helm_test, "--confirm-dry-run-only", "--wait", "30s"]);
    assert!(
        lines[2].2.contains("a real create was refused first, so this account creates only in dry runs"),
        "{lines:?}"
    );
    assert!(lines[2].2.contains("ValidatingAdmissionPolicy 'sandcap-check-dry-run-only'"), "{lines:?}");
    // No policy limits the admin: the real create reaches the webhook, which refuses it.
    let confirm = ["--confirm-dry-run-only"];
    fails_at(&c, &confirm, &["crds", "webhook"], "admission", "was not refused before the webhooks");
    // With no webhook for creates, it is stored, and deleted again.
    let creates_unchecked = r#"[{"op": "replace", "path": "/webhooks/0/rules/0/operations", "value": ["UPDATE"]}]"#;
    let patch = ["patch", "validatingwebhookconfiguration", "sandcap", "--type", "json", "-p", creates_unchecked];
    ok("patch", c.kubectl(&patch));
    fails_at(&c, &confirm, &["crds", "webhook"], "admission", "was stored and is deleted again");
    assert!(!c.kubectl(&["get", "sbp", "sandcap-check-dry-run"]).status.success(), "it was deleted");
    drop(registration);
    registration = install.register_webhook(&c, webhook.webhook_port, &c.ca.pem);

    // A stale CRD: its rules are not this binary's.
    let (name, mut stale) = sandcap::cli::crd_values(ContractVersion::V1)
        .into_iter()
        .find(|(n, _)| n.starts_with("sandboxleases"))
        .unwrap();
    let original = stale.clone();
    let max = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/environment/maxLength";
    *stale.pointer_mut(max).expect("environment has a maxLength") = json!(254);
    install::apply(&c, &[stale]);
    let message = fails_at(&c, &[], &[], "crds", &format!("CRD {name} is not this sandcap's"));
    assert!(
        message.contains(
            "spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.environment.maxLength differs"
        ),
        "{message}"
    );
    install::apply(&c, &[original]);
    passes(&c, &[]);

    // A caBundle that does not verify the serving certificate.
    drop(registration);
    registration = install.register_webhook(&c, webhook.webhook_port, &TestCa::new("another CA").pem);
    fails_at(&c, &[], &["crds"], "webhook", "does not verify the serving certificate served at https://127.0.0.1:");
    drop(registration);
    registration = install.register_webhook(&c, webhook.webhook_port, &c.ca.pem);
    passes(&c, &[]);

    // The webhook stopped: its certificate cannot be seen (a warning), and the dry run fails.
    drop(webhook);
    let (code, lines, all) = check(&c, &[]);
    assert_eq!(code, Some(1), "{all}");
    assert_eq!((lines[1].0.as_str(), lines[1].1.as_str()), ("warn", "webhook"), "{all}");
    assert_eq!((lines[2].0.as_str(), lines[2].1.as_str()), ("FAIL", "admission"), "{all}");
    assert!(
        lines[2].2.starts_with("the apiserver cannot call the webhook: ")
            && lines[2].2.contains("failed calling webhook"),
        "{all}"
    );
    webhook = Sandcap::start(&c, &install, "plugin-webhook", &[("SANDCAP_WEBHOOK_ONLY", "true")]);
    webhook.ready().await;
    drop(registration);
    registration = install.register_webhook(&c, webhook.webhook_port, &c.ca.pem);
    passes(&c, &[]);

    // No leader: the only controller stopped and released the Lease (unless leader election is off).
    drop(controllers);
    fails_at(&c, &[], &["crds", "webhook", "admission"], "leader", "is held by nobody");
    let (code, lines, all) = check(&c, &["--leader-election-name", ""]);
    assert_eq!((code, lines[3].0.as_str(), lines[4].0.as_str()), (Some(0), "warn", "ok"), "{all}");

    // A leader that resolves nothing: a stand-in holds the Lease, and a new lease stays unresolved.
    let leases = Api::<Lease>::namespaced(admin.clone(), NAMESPACE);
    let now = serde_json::to_value(MicroTime(k8s_openapi::jiff::Timestamp::now())).expect("a time");
    let stand_in = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "sandcap-controller", "namespace": NAMESPACE},
        "spec": {"holderIdentity": "e2e-stand-in", "leaseDurationSeconds": 20, "renewTime": now}});
    install::apply(&c, &[stand_in]);
    install::apply(&c, &[lease(NS, "unresolved", "e2e-nobody", json!({}))]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let message = fails_at(
        &c,
        &["--resolve-within", "1s"],
        &["crds", "webhook", "admission", "leader"],
        "controllers",
        "not resolved",
    );
    assert!(message.contains(&format!("SandboxLease {NS}/unresolved (generation 1, no status, changed ")), "{message}");
    delete(&admin, "SandboxLease", Some(NS), "unresolved").await;
    let _ = leases.delete("sandcap-controller", &DeleteParams::default()).await;
    drop(registration);
    drop(webhook);
}

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
                {"apiGroups": ["sandcap.dev"], "resources": ["sandboxleases"], "verbs": ["list"]}]}),
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
    const NS: &str = "e2e-explain";
    const VALUE: &str = "s3cr3t-explain-value";
    install::crds(&c);
    let install = Install::chart(&c, json!({"secretNamespaces": [NS]})).await;
    install::namespaces(&c, &[NS]);
    let admin = c.admin().await;

    // As the chart installs it: the webhook by Service, serving the certificate of its Secret.
    let material = generate(&dns_names("sandcap-webhook", NAMESPACE), SystemTime::now()).expect("certificates");
    let tls = c.dir.join("plugin-service-mounted");
    std::fs::create_dir_all(&tls).unwrap();
    std::fs::write(tls.join("tls.crt"), material.serving.cert().pem()).unwrap();
    std::fs::write(tls.join("tls.key"), material.serving.key_pem()).unwrap();
    let (cert, key) = (tls.join("tls.crt").display().to_string(), tls.join("tls.key").display().to_string());
    let sandcap_run = Sandcap::start(
        &c,
        &install,
        "plugin-service",
        &[("SANDCAP_TLS_CERT", &cert), ("SANDCAP_TLS_KEY", &key), ("SANDCAP_PROBE_INTERVAL", "2s")],
    );
    let service = install.objects.iter().find(|o| o["kind"] == "Service").unwrap().clone();
    install::apply(&c, &[service]);
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(admin.clone(), NAMESPACE);
    let cluster_ip = services.get("sandcap-webhook").await.unwrap().spec.unwrap().cluster_ip.expect("a ClusterIP");
    c.proxy.route(&format!("{cluster_ip}:443"), sandcap_run.webhook_port);
    let data: serde_json::Map<String, Value> =
        material.to_secret_data().into_iter().map(|(k, v)| (k, json!(String::from_utf8(v.0).expect("PEM")))).collect();
    install::apply(
        &c,
        &[json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "sandcap-webhook-tls", "namespace": NAMESPACE}, "stringData": data})],
    );
    sandcap_run.ready().await;
    let registration = install.register_webhook_by_service(&c, &material.ca_bundle());

    // From here the Service's name does not resolve: the certificate is the Secret's.
    let lines = passes(&c, &["--wait", "60s"]);
    assert!(lines[1].2.contains("in Secret sandcap-system/sandcap-webhook-tls (Service sandcap-system/sandcap-webhook port 443 is not reachable from here"), "{lines:?}");
    assert!(lines[1].2.contains("for sandcap-webhook.sandcap-system.svc; it expires in 36"), "{lines:?}");
    // With exactly the RBAC docs/contract.md lists.
    install::apply(&c, &check_rbac());
    let account = c.service_account_kubeconfig(NAMESPACE, "sandcap-check").await;
    let account = account.display().to_string();
    passes(&c, &["--kubeconfig", &account]);
    // kubectl's conventions: the same account by impersonation, no request timeout with `0`,
    // and the same checks as records.
    let as_check = format!("system:serviceaccount:{NAMESPACE}:sandcap-check");
    passes(&c, &["--as", &as_check, "--request-timeout", "0"]);
    let refused = fails_at(&c, &["--as", "nobody", "--as-group", "nobodies"], &[], "crds", "\"nobody\"");
    assert!(refused.contains("forbidden"), "{refused}");
    let o = sandcap(&c, &["check", "--kubeconfig", &account, "-o", "json"]);
    let records: Value = serde_json::from_slice(&o.stdout).expect("check -o json");
    let levels: Vec<(&str, &str)> = records
        .as_array()
        .expect("a record per check")
        .iter()
        .map(|r| (r["check"].as_str().unwrap_or_default(), r["level"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(levels, ALL.map(|check| (check, "ok")), "{records:#}");

    // A lease whose Secret sandcap does not read: explain says so and how to fix it, and never
    // shows the value.
    let worker = Worker::of_contract(ContractVersion::V1);
    install::apply(&c, &[provider("e2e-explain", &worker.url, all_true())]);
    install::apply(&c, &[secret(NS, "creds", "config.json", &format!(r#"{{"apiToken": "{VALUE}"}}"#), false)]);
    let spec = json!({"policy": "ReuseByEnvironment", "environment": "e",
                      "configFrom": [{"secretKeyRef": {"name": "creds", "key": "config.json"}}]});
    install::apply(&c, &[lease(NS, "run-1", "e2e-explain", spec)]);
    lease_reason(&admin, NS, "run-1", "persistentProcessSessions", "NarrowedByConfigResolution").await;
    let dir = plugin_dir(&c);
    // kubectl completes the plugin's words through kubectl_complete-sandcap.
    let o = kubectl_with_plugin(&c, &dir, &["__complete", "sandcap", "explain", "le"]);
    assert_eq!(
        text(&o.stdout).lines().collect::<Vec<_>>()[..2],
        ["lease\tA SandboxLease (`sbl`): its capabilities, pinned identity, narrowings and configFrom Secrets", ":4"],
        "{}",
        text(&o.stderr)
    );
    // What sandcap runs with (the chart's secretNamespaces); the default is none.
    let scope = ["--secret-namespaces", NS];
    for output in ["table", "json", "yaml"] {
        let args = [&["sandcap", "explain", "lease", "-n", NS, "run-1", "-o", output][..], &scope].concat();
        let o = kubectl_with_plugin(&c, &dir, &args);
        let all = format!("{}{}", text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "{all}");
        assert!(all.contains("found, but not labelled sandcap.dev/config-source=true"), "{output}: {all}");
        assert!(all.contains(&format!("kubectl label secret -n {NS} creds sandcap.dev/config-source=true")), "{all}");
        assert!(!all.contains(VALUE), "explain -o {output} shows the Secret's value:\n{all}");
    }
    let table = text(&sandcap(&c, &[&["explain", "lease", "-n", NS, "run-1"][..], &scope].concat()).stdout);
    assert!(
        table.contains(
            "persistentProcessSessions OFF: NarrowedByConfigResolution: configFrom Secret creds does not exist"
        ),
        "{table}"
    );
    assert!(table.contains("reusableLeases on: Granted"), "{table}");
    let o = sandcap(&c, &["explain", "lease", "-n", NS, "run-1", "--secret-namespaces", "team-b"]);
    assert!(text(&o.stdout).contains("found, but not labelled"), "the label is checked first");
    install::apply(&c, &[secret(NS, "creds", "config.json", &format!(r#"{{"apiToken": "{VALUE}"}}"#), true)]);
    lease_reason(&admin, NS, "run-1", "persistentProcessSessions", "Granted").await;
    let o = sandcap(&c, &["explain", "lease", "-n", NS, "run-1", "-o", "json"]);
    let report: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(report["configFrom"][0]["sandcapReadsIt"], false, "the default scope is none: {report:#}");
    let o = sandcap(&c, &[&["explain", "lease", "-n", NS, "run-1", "-o", "json"][..], &scope].concat());
    let report: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(report["configFrom"][0]["sandcapReadsIt"], true, "{report:#}");
    assert!(
        report["capabilities"].as_array().unwrap().iter().all(|c| c["granted"] == true && c["fix"].is_null()),
        "{report:#}"
    );
    let o = sandcap(&c, &["explain", "lease", "-n", NS, "run-1", "--secret-namespaces", "team-b"]);
    assert!(
        text(&o.stdout).contains("sandcap reads Secrets only in team-b (--secret-namespaces), not in e2e-explain"),
        "{}",
        text(&o.stdout)
    );
    let provider_text = text(&sandcap(&c, &["explain", "provider", "e2e-explain"]).stdout);
    assert!(provider_text.contains("worker        probe Succeeded at "), "{provider_text}");
    let missing = sandcap(&c, &["explain", "lease", "-n", NS, "nope"]);
    assert_eq!(
        (missing.status.code(), text(&missing.stderr)),
        (Some(2), format!("sandcap: SandboxLease {NS}/nope not found\n"))
    );

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
