//! The chart's ValidatingAdmissionPolicy through the real apiserver: sandcap's ServiceAccount may
//! change only the caBundle of its webhook configuration, whatever its RBAC; the admin may change
//! anything.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use sandcap::certs::{self, BundleSync, Rotation};
use serde_json::{Value, json};

use super::keeper::{material, opts, published_bundle, reset, t0};
use crate::harness::cluster::{Cluster, client_from};
use crate::harness::install::{self, Install, NAMESPACE};
use crate::harness::waits::eventually;
use crate::support::ok;

/// What the policy's denial says, so a refusal by RBAC (or anything else) is not taken for it.
const ONLY_CA_BUNDLE: &str = "may change only webhooks[*].clientConfig.caBundle of sandcap";

/// A JSON patch of the chart's webhook configuration by `client`; the apiserver's message if refused.
async fn patch_config(client: &Client, ops: Value) -> Result<(), String> {
    let patch = Patch::Json::<()>(serde_json::from_value(ops).expect("a JSON patch"));
    let configs = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    match configs.patch("sandcap", &PatchParams::default(), &patch).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(format!("{} ({})", status.message, status.code)),
        Err(other) => panic!("patch: {other}"),
    }
}

/// The chart's ValidatingAdmissionPolicy, through the real apiserver: sandcap's ServiceAccount can
/// publish caBundles (and `certs::reconcile` still does), but cannot widen the webhook's rules,
/// repoint its clientConfig, add, remove or rename webhooks, touch metadata, or delete the
/// configuration, even with RBAC that would allow it; the admin (Helm) still changes anything.
pub async fn only_the_ca_bundle_is_sandcaps_to_change(c: Arc<Cluster>) {
    install::crds(&c);
    let install = Install::chart(&c, json!({})).await;
    assert!(install.objects.iter().any(|o| o["kind"] == "ValidatingAdmissionPolicy"), "on by default");
    let admin = c.admin().await;
    let sa = client_from(&install.kubeconfig).await;
    reset(&c, &admin, &install, true).await;
    the_policy_refuses_every_other_change(&c, &admin, &install, &sa).await;
    what_sandcap_writes_is_allowed(&admin, &sa).await;
    an_extra_grant_moves_only_the_ca_bundle(&c, &sa).await;

    // Anyone else, e.g. Helm upgrading the chart, may still change everything.
    patch_config(&admin, widen()).await.expect("the admin widens the rules");
    let configs = Api::<ValidatingWebhookConfiguration>::all(admin.clone());
    configs.delete("sandcap", &DeleteParams::default()).await.expect("the admin deletes it");
    reset(&c, &admin, &install, false).await;
    ok("delete", c.kubectl(&["delete", "validatingwebhookconfiguration", "e2e-other-webhook", "--ignore-not-found"]));
}

/// A patch that widens the webhook's rules to Secrets.
fn widen() -> Value {
    json!([{"op": "replace", "path": "/webhooks/0/rules", "value": [{
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["secrets"], "scope": "*"
    }]}])
}

/// Refused with the policy's message, and nothing written: every change but the caBundle's.
async fn the_policy_refuses_every_other_change(c: &Cluster, admin: &Client, install: &Install, sa: &Client) {
    let configs = Api::<ValidatingWebhookConfiguration>::all(admin.clone());
    let widen = widen();
    // A new policy takes effect once the apiserver's informer has it.
    let refusal = eventually("the policy in effect", Duration::from_secs(30), || async {
        match patch_config(sa, widen.clone()).await {
            Err(message) if message.contains(ONLY_CA_BUNDLE) => Some(message),
            Err(message) => panic!("refused, but not by the policy: {message}"),
            Ok(()) => {
                // Allowed before the policy was seen: put the chart's rules back and try again.
                reset(c, admin, install, true).await;
                None
            }
        }
    })
    .await;
    assert!(refusal.contains("(403)") && refusal.contains("sandcap-cabundle-only"), "{refusal}");
    let before = configs.get("sandcap").await.unwrap();
    let mut second = serde_json::to_value(&before.webhooks.as_ref().unwrap()[1]).unwrap();
    second["name"] = json!("third.sandcap.dev");
    let forbidden = [
        ("rules widened", widen.clone()),
        (
            "service repointed",
            json!([{"op": "replace", "path": "/webhooks/0/clientConfig/service/name", "value": "evil"}]),
        ),
        ("service port", json!([{"op": "replace", "path": "/webhooks/1/clientConfig/service/port", "value": 8443}])),
        (
            "service swapped for a URL",
            json!([{"op": "remove", "path": "/webhooks/0/clientConfig/service"},
                   {"op": "add", "path": "/webhooks/0/clientConfig/url", "value": "https://evil.example/validate"}]),
        ),
        ("failurePolicy", json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}])),
        (
            "namespaceSelector",
            json!([{"op": "add", "path": "/webhooks/0/namespaceSelector", "value": {"matchLabels": {"x": "y"}}}]),
        ),
        (
            "objectSelector",
            json!([{"op": "add", "path": "/webhooks/1/objectSelector", "value": {"matchLabels": {"x": "y"}}}]),
        ),
        ("a webhook added", json!([{"op": "add", "path": "/webhooks/-", "value": second}])),
        ("a webhook removed", json!([{"op": "remove", "path": "/webhooks/1"}])),
        ("a webhook renamed", json!([{"op": "replace", "path": "/webhooks/1/name", "value": "other.sandcap.dev"}])),
        ("a label", json!([{"op": "add", "path": "/metadata/labels/e2e", "value": "x"}])),
        (
            "an annotation",
            json!([{"op": "add", "path": "/metadata/annotations", "value": {"cert-manager.io/inject-ca-from": "x/y"}}]),
        ),
        (
            "a caBundle together with the rules",
            json!([{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "Zm9v"},
                   {"op": "replace", "path": "/webhooks/0/rules/0/operations", "value": ["CREATE", "UPDATE", "DELETE"]}]),
        ),
    ];
    for (what, ops) in forbidden {
        let refusal = patch_config(sa, ops).await.expect_err(what);
        assert!(refusal.contains(ONLY_CA_BUNDLE), "{what}: {refusal}");
    }
    let after = configs.get("sandcap").await.unwrap();
    assert_eq!(after.metadata.resource_version, before.metadata.resource_version, "nothing was written");
}

/// What sandcap writes is allowed: a caBundle by hand, and the certificate loop's own patch.
async fn what_sandcap_writes_is_allowed(admin: &Client, sa: &Client) {
    patch_config(sa, json!([{"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": "Zm9v"}]))
        .await
        .expect("a caBundle patch is allowed");
    let outcome = certs::reconcile(sa, &opts(), t0()).await.expect("reconcile under the policy");
    assert!(matches!(outcome.rotation, Rotation::Create { .. }), "{outcome:?}");
    assert_eq!(outcome.ca_bundle, BundleSync::Patched);
    assert_eq!(published_bundle(admin).await, material(admin).await.ca.cert().pem());
}

/// Even with RBAC to replace and delete it (a careless extra grant), only the caBundle moves.
async fn an_extra_grant_moves_only_the_ca_bundle(c: &Cluster, sa: &Client) {
    let extra = json!([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "e2e-extra-webhook-rights"},
         "rules": [{"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"],
                    "resourceNames": ["sandcap"], "verbs": ["update", "delete"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "e2e-extra-webhook-rights"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-extra-webhook-rights"},
         "subjects": [{"kind": "ServiceAccount", "name": "sandcap", "namespace": NAMESPACE}]},
    ]);
    install::apply(c, extra.as_array().unwrap());
    let sa_configs = Api::<ValidatingWebhookConfiguration>::all(sa.clone());
    let deleted = eventually("the extra grant in effect", Duration::from_secs(30), || async {
        match sa_configs.delete("sandcap", &DeleteParams::default()).await {
            Err(kube::Error::Api(s)) if s.message.contains("may not delete its webhook configuration") => Some(()),
            Err(kube::Error::Api(s)) if s.code == 403 && !s.message.contains("ValidatingAdmissionPolicy") => None,
            other => {
                panic!("sandcap's ServiceAccount deleted its webhook configuration, or failed otherwise: {other:?}")
            }
        }
    });
    deleted.await;
    let mut replaced = sa_configs.get("sandcap").await.unwrap();
    replaced.webhooks.as_mut().unwrap()[0].timeout_seconds = Some(30);
    match sa_configs.replace("sandcap", &PostParams::default(), &replaced).await {
        Err(kube::Error::Api(s)) => assert!(s.message.contains(ONLY_CA_BUNDLE), "{}", s.message),
        other => panic!("an update of timeoutSeconds: {other:?}"),
    }
    let mut replaced = sa_configs.get("sandcap").await.unwrap();
    replaced.webhooks.as_mut().unwrap()[0].client_config.ca_bundle = Some(ByteString(b"bar".to_vec()));
    sa_configs.replace("sandcap", &PostParams::default(), &replaced).await.expect("a caBundle update is allowed");
    ok("delete", c.kubectl(&["delete", "clusterrolebinding,clusterrole", "e2e-extra-webhook-rights"]));
}
