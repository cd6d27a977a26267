//! `kubectl sandcap check` against the real apiserver, with sandcap installed with the chart's RBAC:
//! `--wait` waits, a healthy install passes every check, and each failure is the check that names
//! it (a stale CRD, a caBundle that does not match, the webhook stopped, no leader, a change the
//! controllers never resolved).

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, DeleteParams};
use sandcap_core::versions::ContractVersion;
use serde_json::json;

use super::commands::{ALL, check, fails_at, kubectl_with_plugin, passes, plugin_dir, text};
use crate::harness::binary::Sandcap;
use crate::harness::cluster::{Cluster, TestCa};
use crate::harness::install::{self, Install, NAMESPACE, WebhookRegistration};
use crate::harness::objects::delete;
use crate::support::{lease, ok};

const NS: &str = "e2e-plugin";

pub async fn check_passes_and_names_each_failure(c: Arc<Cluster>) {
    install::crds(&c);
    let install = Install::chart(&c, json!({"secretNamespaces": [NS]})).await;
    install::namespaces(&c, &[NS]);
    let admin = c.admin().await;
    let (webhook, controllers, registration) = wait_waits_until_sandcap_is_up(&c, &install).await;
    healthy_passes_also_through_kubectl(&c, webhook.webhook_port);
    confirm_dry_run_only_as_the_helm_test_runs_it(&c, &install).await;
    drop(registration);
    let registration = install.register_webhook(&c, webhook.webhook_port, &c.ca.pem);
    a_stale_crd_fails_crds(&c);
    let registration = a_foreign_ca_bundle_fails_webhook(&c, &install, webhook.webhook_port, registration);
    let (webhook, registration) = a_stopped_webhook_fails_admission(&c, &install, webhook, registration).await;
    no_leader_fails_leader(&c, controllers);
    a_leader_that_resolves_nothing_fails_controllers(&c, &admin).await;
    drop(registration);
    drop(webhook);
}

/// --wait waits: started before sandcap is, it passes once sandcap is up. Returns the webhook,
/// the controllers and the webhook's registration.
async fn wait_waits_until_sandcap_is_up(c: &Cluster, install: &Install) -> (Sandcap, Sandcap, WebhookRegistration) {
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
    let webhook = Sandcap::start(c, install, "plugin-webhook", &[("SANDCAP_WEBHOOK_ONLY", "true")]);
    let controllers = Sandcap::start(
        c,
        install,
        "plugin-controllers",
        &[&[("SANDCAP_CONTROLLERS_ONLY", "true")][..], &overrides].concat(),
    );
    webhook.ready().await;
    let registration = install.register_webhook(c, webhook.webhook_port, &c.ca.pem);
    let waited = tokio::task::spawn_blocking(move || waiting.join().expect("the waiting check")).await.unwrap();
    assert_eq!(waited.status.code(), Some(0), "{}{}", text(&waited.stdout), text(&waited.stderr));
    assert!(text(&waited.stderr).contains("not yet: "), "it retried: {}", text(&waited.stderr));
    (webhook, controllers, registration)
}

/// Healthy: every check passes, also as `kubectl sandcap`, which `kubectl plugin list` finds.
fn healthy_passes_also_through_kubectl(c: &Cluster, webhook_port: u16) {
    let lines = passes(c, &[]);
    assert!(
        lines[1].2.contains(&format!("served at https://127.0.0.1:{webhook_port}/validate for 127.0.0.1")),
        "{lines:?}"
    );
    assert!(lines[3].2.starts_with("plugin-controllers holds Lease sandcap-system/sandcap-controller"), "{lines:?}");
    let dir = plugin_dir(c);
    let listed = kubectl_with_plugin(c, &dir, &["plugin", "list"]);
    assert!(text(&listed.stdout).contains(&dir.join("kubectl-sandcap").display().to_string()), "{listed:?}");
    let through_kubectl = kubectl_with_plugin(c, &dir, &["sandcap", "check"]);
    assert_eq!(through_kubectl.status.code(), Some(0), "{through_kubectl:?}");
    assert_eq!(text(&through_kubectl.stdout).lines().filter(|l| l.starts_with("ok ")).count(), ALL.len());
}

/// --confirm-dry-run-only, as the helm test runs it: the chart's admission policy (applied
/// with the install, in effect within seconds, which --wait covers) refuses its account a real
/// create before any webhook is called.
async fn confirm_dry_run_only_as_the_helm_test_runs_it(c: &Cluster, install: &Install) {
    let helm_test = install.objects.iter().find(|o| o["kind"] == "Pod").expect("the helm test pod");
    let helm_test = helm_test["spec"]["serviceAccountName"].as_str().expect("its ServiceAccount");
    let helm_test = c.service_account_kubeconfig(NAMESPACE, helm_test).await.display().to_string();
    let lines = passes(c, &["--kubeconfig", &helm_test, "--confirm-dry-run-only", "--wait", "30s"]);
    assert!(
        lines[2].2.contains("a real create was refused first, so this account creates only in dry runs"),
        "{lines:?}"
    );
    assert!(lines[2].2.contains("ValidatingAdmissionPolicy 'sandcap-check-dry-run-only'"), "{lines:?}");
    // No policy limits the admin: the real create reaches the webhook, which refuses it.
    let confirm = ["--confirm-dry-run-only"];
    fails_at(c, &confirm, &["crds", "webhook"], "admission", "was not refused before the webhooks");
    // With no webhook for creates, it is stored, and deleted again.
    let creates_unchecked = r#"[{"op": "replace", "path": "/webhooks/0/rules/0/operations", "value": ["UPDATE"]}]"#;
    let patch = ["patch", "validatingwebhookconfiguration", "sandcap", "--type", "json", "-p", creates_unchecked];
    ok("patch", c.kubectl(&patch));
    fails_at(c, &confirm, &["crds", "webhook"], "admission", "was stored and is deleted again");
    assert!(!c.kubectl(&["get", "sbp", "sandcap-check-dry-run"]).status.success(), "it was deleted");
}

/// A stale CRD: its rules are not this binary's.
fn a_stale_crd_fails_crds(c: &Cluster) {
    let (name, mut stale) = sandcap::cli::crd_values(ContractVersion::V1)
        .into_iter()
        .find(|(n, _)| n.starts_with("sandboxleases"))
        .unwrap();
    let original = stale.clone();
    let max = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/environment/maxLength";
    *stale.pointer_mut(max).expect("environment has a maxLength") = json!(254);
    install::apply(c, &[stale]);
    let message = fails_at(c, &[], &[], "crds", &format!("CRD {name} is not this sandcap's"));
    assert!(
        message.contains(
            "spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.environment.maxLength differs"
        ),
        "{message}"
    );
    install::apply(c, &[original]);
    passes(c, &[]);
}

/// A caBundle that does not verify the serving certificate. Returns the registration again with
/// the right one.
fn a_foreign_ca_bundle_fails_webhook(
    c: &Cluster,
    install: &Install,
    webhook_port: u16,
    registration: WebhookRegistration,
) -> WebhookRegistration {
    drop(registration);
    let registration = install.register_webhook(c, webhook_port, &TestCa::new("another CA").pem);
    fails_at(c, &[], &["crds"], "webhook", "does not verify the serving certificate served at https://127.0.0.1:");
    drop(registration);
    let registration = install.register_webhook(c, webhook_port, &c.ca.pem);
    passes(c, &[]);
    registration
}

/// The webhook stopped: its certificate cannot be seen (a warning), and the dry run fails.
/// Returns the webhook started again and its registration.
async fn a_stopped_webhook_fails_admission(
    c: &Cluster,
    install: &Install,
    webhook: Sandcap,
    registration: WebhookRegistration,
) -> (Sandcap, WebhookRegistration) {
    drop(webhook);
    let (code, lines, all) = check(c, &[]);
    assert_eq!(code, Some(1), "{all}");
    assert_eq!((lines[1].0.as_str(), lines[1].1.as_str()), ("warn", "webhook"), "{all}");
    assert_eq!((lines[2].0.as_str(), lines[2].1.as_str()), ("FAIL", "admission"), "{all}");
    assert!(
        lines[2].2.starts_with("the apiserver cannot call the webhook: ")
            && lines[2].2.contains("failed calling webhook"),
        "{all}"
    );
    // Each line that warns or fails says where the fix is.
    assert!(lines[1].2.ends_with(" (see docs/troubleshooting.md#check-webhook)"), "{all}");
    assert!(lines[2].2.ends_with(" (see docs/troubleshooting.md#check-admission)"), "{all}");
    let webhook = Sandcap::start(c, install, "plugin-webhook", &[("SANDCAP_WEBHOOK_ONLY", "true")]);
    webhook.ready().await;
    drop(registration);
    let registration = install.register_webhook(c, webhook.webhook_port, &c.ca.pem);
    passes(c, &[]);
    (webhook, registration)
}

/// No leader: the only controller stopped and released the Lease (unless leader election is off).
fn no_leader_fails_leader(c: &Cluster, controllers: Sandcap) {
    drop(controllers);
    fails_at(c, &[], &["crds", "webhook", "admission"], "leader", "is held by nobody");
    let (code, lines, all) = check(c, &["--leader-election-name", ""]);
    assert_eq!((code, lines[3].0.as_str(), lines[4].0.as_str()), (Some(0), "warn", "ok"), "{all}");
}

/// A leader that resolves nothing: a stand-in holds the Lease, and a new lease stays unresolved.
async fn a_leader_that_resolves_nothing_fails_controllers(c: &Cluster, admin: &Client) {
    let leases = Api::<Lease>::namespaced(admin.clone(), NAMESPACE);
    let now = serde_json::to_value(MicroTime(k8s_openapi::jiff::Timestamp::now())).expect("a time");
    let stand_in = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "sandcap-controller", "namespace": NAMESPACE},
        "spec": {"holderIdentity": "e2e-stand-in", "leaseDurationSeconds": 20, "renewTime": now}});
    install::apply(c, &[stand_in]);
    install::apply(c, &[lease(NS, "unresolved", "e2e-nobody", json!({}))]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let message = fails_at(
        c,
        &["--resolve-within", "1s"],
        &["crds", "webhook", "admission", "leader"],
        "controllers",
        "not resolved",
    );
    assert!(message.contains(&format!("SandboxLease {NS}/unresolved (generation 1, no status, changed ")), "{message}");
    delete(admin, "SandboxLease", Some(NS), "unresolved").await;
    let _ = leases.delete("sandcap-controller", &DeleteParams::default()).await;
}
