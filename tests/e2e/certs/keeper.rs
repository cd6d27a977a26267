//! The certificate keeper as both certificate scenarios set it up and read it: its options, the
//! chart's webhook configuration reset, and the Secret's material and the caBundle as stored.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams};
use sandcap::certs::{CertOptions, Material};
use serde_json::{Value, json};

use crate::harness::cluster::Cluster;
use crate::harness::install::{self, Install, NAMESPACE};
use crate::harness::waits::eventually;

pub const SECRET: &str = "sandcap-webhook-tls";

pub fn opts() -> CertOptions {
    CertOptions {
        secret_name: SECRET.into(),
        namespace: NAMESPACE.into(),
        service_name: "sandcap-webhook".into(),
        webhook_config_name: "sandcap".into(),
        check_interval: Duration::from_millis(200),
    }
}

pub fn t0() -> SystemTime {
    SystemTime::now()
}

/// The chart's webhook configuration without a caBundle, and somebody else's that sandcap must
/// never touch; no Secret.
pub async fn reset(c: &Cluster, admin: &Client, install: &Install, with_config: bool) {
    let secrets = Api::<Secret>::namespaced(admin.clone(), NAMESPACE);
    let _ = secrets.delete(SECRET, &DeleteParams::default()).await;
    let configs = Api::<ValidatingWebhookConfiguration>::all(admin.clone());
    let _ = configs.delete("sandcap", &DeleteParams::default()).await;
    eventually("the Secret gone", Duration::from_secs(10), || async {
        secrets.get_opt(SECRET).await.ok()?.is_none().then_some(())
    })
    .await;
    if with_config {
        let mut config =
            install.objects.iter().find(|o| o["kind"] == "ValidatingWebhookConfiguration").unwrap().clone();
        // Two webhooks, so the test sees that every one of them gets the bundle.
        let mut second = config["webhooks"][0].clone();
        second["name"] = json!("second.sandcap.dev");
        config["webhooks"].as_array_mut().unwrap().push(second);
        install::apply(c, &[config, other_config()]);
    }
}

fn other_config() -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "e2e-other-webhook"},
        "webhooks": [{
            "name": "validate.example.com",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {"url": "https://127.0.0.1:1/validate"},
            "rules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["things"]}],
        }]
    })
}

pub async fn material(client: &Client) -> Material {
    let secret = Api::<Secret>::namespaced(client.clone(), NAMESPACE).get(SECRET).await.expect("the Secret exists");
    Material::from_secret_data(secret.data.as_ref().expect("data")).expect("usable material")
}

/// Every caBundle of our configuration; they must all be equal.
pub async fn published_bundle(client: &Client) -> String {
    let config = Api::<ValidatingWebhookConfiguration>::all(client.clone()).get("sandcap").await.expect("config");
    let bundles: Vec<String> = config
        .webhooks
        .expect("webhooks")
        .into_iter()
        .map(|w| String::from_utf8(w.client_config.ca_bundle.expect("caBundle set").0).expect("PEM"))
        .collect();
    assert_eq!(bundles.len(), 2);
    assert_eq!(bundles[0], bundles[1], "every webhook gets the same bundle");
    bundles[0].clone()
}
