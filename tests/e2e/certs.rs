//! Self-managed certificates against the real apiserver, with the chart's RBAC: what `reconcile`
//! writes to the Secret and to the webhook's caBundle over a certificate's life (with an injected
//! clock), replicas racing for real, and a review through the apiserver that trusts only the CA
//! sandcap published. Every certificate is also checked as the apiserver would: by a TLS verifier
//! trusting only the published caBundle.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
use sandcap::certs::{
    self, BundleSync, CA_PUBLISH_GRACE, CA_RETIRE_GRACE, CertOptions, Material, Reconciled, Rotation,
};
use serde_json::{Value, json};

use crate::cluster::{Cluster, client_from};
use crate::install::{self, Install, NAMESPACE, Sandcap, eventually, ok};

const SECRET: &str = "sandcap-webhook-tls";
/// The Service's DNS name, which the serving certificate must name.
const SERVICE_HOST: &str = "sandcap-webhook.sandcap-system.svc";
const DAY: Duration = Duration::from_secs(24 * 60 * 60);
const YEAR: Duration = Duration::from_secs(365 * DAY.as_secs());

fn opts() -> CertOptions {
    CertOptions {
        secret_name: SECRET.into(),
        namespace: NAMESPACE.into(),
        service_name: "sandcap-webhook".into(),
        webhook_config_name: "sandcap".into(),
        check_interval: Duration::from_millis(200),
    }
}

fn t0() -> SystemTime {
    SystemTime::now()
}

/// The chart's webhook configuration without a caBundle, and somebody else's that sandcap must
/// never touch; no Secret.
async fn reset(c: &Cluster, admin: &Client, install: &Install, with_config: bool) {
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

async fn material(client: &Client) -> Material {
    let secret = Api::<Secret>::namespaced(client.clone(), NAMESPACE).get(SECRET).await.expect("the Secret exists");
    Material::from_secret_data(secret.data.as_ref().expect("data")).expect("usable material")
}

async fn resource_version<K>(api: &Api<K>, name: &str) -> Option<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get(name).await.expect("exists").meta().resource_version.clone()
}

/// Every caBundle of our configuration; they must all be equal.
async fn published_bundle(client: &Client) -> String {
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

/// What the apiserver does before it sends a review: verify the serving certificate for the
/// Service's DNS name against the caBundle, at time `at`.
fn apiserver_trusts(bundle: &str, serving_pem: &str, at: SystemTime) -> Result<(), rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(bundle.as_bytes()) {
        roots.add(der.expect("PEM")).expect("a CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .expect("verifier");
    let leaf = CertificateDer::from_pem_slice(serving_pem.as_bytes()).expect("PEM");
    let name = ServerName::try_from(SERVICE_HOST).expect("name");
    let at = UnixTime::since_unix_epoch(at.duration_since(SystemTime::UNIX_EPOCH).expect("after 1970"));
    verifier.verify_server_cert(&leaf, &[], &name, &[], at).map(|_| ())
}

pub async fn self_managed_certificates_with_the_charts_rbac(c: Arc<Cluster>) {
    install::crds(&c);
    let install = Install::chart(&c, json!({})).await;
    let admin = c.admin().await;
    // Every write below is made with exactly the chart's RBAC.
    let sa = client_from(&install.kubeconfig).await;
    let reconcile = |now: SystemTime| {
        let sa = sa.clone();
        async move { certs::reconcile(&sa, &opts(), now).await.expect("reconcile") }
    };
    let expected = |rotation: Rotation, ca_bundle: BundleSync| Reconciled { rotation, ca_bundle };
    let secrets = Api::<Secret>::namespaced(admin.clone(), NAMESPACE);
    let configs = Api::<ValidatingWebhookConfiguration>::all(admin.clone());

    // Created and published when absent; nothing else is touched.
    reset(&c, &admin, &install, true).await;
    let outcome = reconcile(t0()).await;
    assert!(matches!(outcome.rotation, Rotation::Create { .. }), "{outcome:?}");
    assert_eq!(outcome.ca_bundle, BundleSync::Patched);
    let stored = secrets.get(SECRET).await.expect("the Secret");
    assert_eq!(stored.type_.as_deref(), Some("kubernetes.io/tls"));
    let keys: Vec<&str> = stored.data.as_ref().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["ca.crt", "ca.key", "tls.crt", "tls.key"]);
    let m = material(&admin).await;
    let bundle = published_bundle(&admin).await;
    assert_eq!(bundle, m.ca.cert().pem());
    apiserver_trusts(&bundle, m.serving.cert().pem(), t0()).unwrap();
    let other = configs.get("e2e-other-webhook").await.unwrap();
    assert!(other.webhooks.unwrap()[0].client_config.ca_bundle.is_none(), "another configuration was changed");

    // Fresh certificates are left alone.
    let (secret_version, config_version) =
        (resource_version(&secrets, SECRET).await, resource_version(&configs, "sandcap").await);
    for later in [Duration::ZERO, DAY, 200 * DAY] {
        assert_eq!(reconcile(t0() + later).await, expected(Rotation::Keep, BundleSync::UpToDate));
    }
    assert_eq!(resource_version(&secrets, SECRET).await, secret_version);
    assert_eq!(resource_version(&configs, "sandcap").await, config_version);

    // The serving certificate is renewed near expiry, the bundle untouched.
    let first = material(&admin).await;
    let now = t0() + 250 * DAY;
    assert!(matches!(reconcile(now).await.rotation, Rotation::RenewServing { .. }));
    let renewed = material(&admin).await;
    assert_eq!(renewed.ca.cert().pem(), first.ca.cert().pem());
    assert_ne!(renewed.serving.cert().pem(), first.serving.cert().pem());
    assert_eq!(published_bundle(&admin).await, bundle);
    apiserver_trusts(&bundle, first.serving.cert().pem(), now).unwrap();
    assert!(apiserver_trusts(&bundle, first.serving.cert().pem(), t0() + YEAR + DAY).is_err());
    apiserver_trusts(&bundle, renewed.serving.cert().pem(), t0() + YEAR + DAY).unwrap();

    // The CA rotates without ever breaking trust: publish, wait, promote, retire.
    let old = material(&admin).await;
    let mut now = t0() + 7 * YEAR;
    assert_eq!(reconcile(now).await, expected(Rotation::PrepareNextCa, BundleSync::Patched));
    let next = material(&admin).await.next_ca.expect("a next CA");
    assert_eq!(published_bundle(&admin).await, format!("{}{}", old.ca.cert().pem(), next.cert().pem()));
    assert!(matches!(reconcile(now).await.rotation, Rotation::RenewServing { .. }));
    let served_before = material(&admin).await.serving;
    assert_eq!(reconcile(now).await.rotation, Rotation::Keep, "not before the publish grace");
    now += CA_PUBLISH_GRACE;
    assert_eq!(reconcile(now).await, expected(Rotation::PromoteNextCa, BundleSync::Patched));
    let promoted = material(&admin).await;
    assert_eq!(promoted.ca.cert().pem(), next.cert().pem());
    let bundle = published_bundle(&admin).await;
    assert_eq!(bundle, format!("{}{}", next.cert().pem(), old.ca.cert().pem()));
    apiserver_trusts(&bundle, served_before.cert().pem(), now).unwrap();
    apiserver_trusts(&bundle, promoted.serving.cert().pem(), now).unwrap();
    now += CA_RETIRE_GRACE;
    assert_eq!(reconcile(now).await, expected(Rotation::DropRetiredCa, BundleSync::Patched));
    let bundle = published_bundle(&admin).await;
    assert_eq!(bundle, next.cert().pem());
    assert!(apiserver_trusts(&bundle, served_before.cert().pem(), now).is_err(), "the old CA is no longer trusted");

    // A caBundle somebody else changed is restored.
    let mut tampered = configs.get("sandcap").await.unwrap();
    tampered.webhooks.as_mut().unwrap()[1].client_config.ca_bundle = Some(ByteString(b"stale".to_vec()));
    configs.replace("sandcap", &PostParams::default(), &tampered).await.unwrap();
    assert_eq!(reconcile(now).await, expected(Rotation::Keep, BundleSync::Patched));
    assert_eq!(published_bundle(&admin).await, material(&admin).await.ca.cert().pem());

    // An unusable Secret is replaced in place (its type is immutable, so it is kept).
    reset(&c, &admin, &install, true).await;
    let broken = Secret {
        metadata: ObjectMeta { name: Some(SECRET.into()), namespace: Some(NAMESPACE.into()), ..ObjectMeta::default() },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([("tls.crt".to_string(), ByteString(b"not a certificate".to_vec()))])),
        ..Secret::default()
    };
    secrets.create(&PostParams::default(), &broken).await.unwrap();
    let outcome = reconcile(t0()).await;
    assert_eq!(outcome.rotation, Rotation::Create { reason: "the Secret is unusable: ca.crt is missing".into() });
    assert_eq!(secrets.get(SECRET).await.unwrap().type_.as_deref(), Some("Opaque"));
    apiserver_trusts(&published_bundle(&admin).await, material(&admin).await.serving.cert().pem(), t0()).unwrap();

    // Without a webhook configuration, a next CA is prepared but never promoted.
    reset(&c, &admin, &install, false).await;
    assert_eq!(reconcile(t0()).await.ca_bundle, BundleSync::ConfigMissing);
    let now = t0() + 7 * YEAR;
    assert_eq!(reconcile(now).await.rotation, Rotation::PrepareNextCa);
    reconcile(now).await;
    assert_eq!(reconcile(now + 30 * DAY).await, expected(Rotation::Keep, BundleSync::ConfigMissing));
    let m = material(&admin).await;
    assert!(m.next_ca.is_some() && m.retired_ca.is_none());

    // Replicas racing for real agree on one certificate.
    reset(&c, &admin, &install, true).await;
    let replicas: Vec<_> = (0..3).map(|_| tokio::spawn(reconcile(t0()))).collect();
    let mut creates = 0;
    for replica in replicas {
        creates += usize::from(matches!(replica.await.unwrap().rotation, Rotation::Create { .. }));
    }
    assert!(creates >= 1);
    let m = material(&admin).await;
    let bundle = published_bundle(&admin).await;
    assert_eq!(bundle, m.ca.cert().pem(), "the published CA is the stored one");
    apiserver_trusts(&bundle, m.serving.cert().pem(), t0()).unwrap();
    assert_eq!(reconcile(t0()).await, expected(Rotation::Keep, BundleSync::UpToDate));

    // The whole loop, as installed: `sandcap run` creates the certificate, a stand-in for the
    // kubelet mounts it, and the apiserver calls the webhook by its Service name (through the
    // test's proxy) trusting only the caBundle that sandcap published.
    reset(&c, &admin, &install, true).await;
    let mounted = c.dir.join("mounted-tls");
    std::fs::create_dir_all(&mounted).unwrap();
    let (cert, key) = (mounted.join("tls.crt"), mounted.join("tls.key"));
    let (cert_env, key_env) = (cert.display().to_string(), key.display().to_string());
    let sandcap = Sandcap::start(
        &c,
        &install,
        "self-managed",
        &[
            ("SANDCAP_WEBHOOK_ONLY", "true"),
            ("SANDCAP_SELF_MANAGED_CERTS", "true"),
            ("SANDCAP_TLS_CERT", &cert_env),
            ("SANDCAP_TLS_KEY", &key_env),
            ("SANDCAP_TLS_RELOAD_INTERVAL", "200ms"),
        ],
    );
    // The apiserver resolves a Service to its ClusterIP and dials that (through the proxy), with
    // the Service's DNS name as the TLS server name.
    c.proxy.route(&install.service_address(&c).await, sandcap.webhook_port);
    let data = eventually("the self-managed Secret", Duration::from_secs(30), || async {
        secrets.get_opt(SECRET).await.ok()?.and_then(|s| s.data)
    })
    .await;
    std::fs::write(&cert, &data["tls.crt"].0).unwrap();
    std::fs::write(&key, &data["tls.key"].0).unwrap();
    sandcap.ready().await;
    let schema_problem = json!({
        "apiVersion": "sandcap.dev/v1alpha1", "kind": "SandboxProvider", "metadata": {"name": "e2e-certs"},
        "spec": {"pluginKey": "acme.provider", "version": "1.0.0", "worker": {"service": {"namespace": "n", "name": "w", "port": 80}},
                 "environmentDrivers": [{"driverKey": "k", "kind": "sandbox_provider", "configSchema": {"type": "strin"}}]}
    });
    let last = std::sync::Mutex::new(String::new());
    let review = || {
        let out = c.kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], &schema_problem.to_string());
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        *last.lock().unwrap() = stderr.clone();
        stderr.contains("denied the request").then_some(stderr)
    };
    let answer = tokio::time::timeout(
        Duration::from_secs(30),
        eventually("a review", Duration::from_secs(60), || async { review() }),
    )
    .await
    .unwrap_or_else(|_| {
        panic!("no review through the apiserver; kubectl said: {}\n{}", last.lock().unwrap(), sandcap.log_text())
    });
    assert!(answer.contains("configSchema"), "{answer}");
    // Every write names its manager.
    let managers = |fields: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry>>| {
        fields.unwrap_or_default().into_iter().filter_map(|m| m.manager).collect::<Vec<String>>()
    };
    let of_secret = managers(secrets.get(SECRET).await.unwrap().metadata.managed_fields);
    assert_eq!(of_secret, ["sandcap"], "the Secret's field managers");
    let of_config = managers(configs.get("sandcap").await.unwrap().metadata.managed_fields);
    assert!(of_config.contains(&"sandcap".to_string()) && !of_config.contains(&"unknown".to_string()), "{of_config:?}");
    assert!(sandcap.problems().is_empty(), "{:?}", sandcap.problems());
    drop(sandcap);
    reset(&c, &admin, &install, false).await;
    ok("delete", c.kubectl(&["delete", "validatingwebhookconfiguration", "e2e-other-webhook", "--ignore-not-found"]));
    ok("delete", c.kubectl(&["delete", "service", "-n", NAMESPACE, "sandcap-webhook", "--ignore-not-found"]));
}

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
    let configs = Api::<ValidatingWebhookConfiguration>::all(admin.clone());
    reset(&c, &admin, &install, true).await;

    let widen = json!([{"op": "replace", "path": "/webhooks/0/rules", "value": [{
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["secrets"], "scope": "*"
    }]}]);
    // A new policy takes effect once the apiserver's informer has it.
    let refusal = eventually("the policy in effect", Duration::from_secs(30), || async {
        match patch_config(&sa, widen.clone()).await {
            Err(message) if message.contains(ONLY_CA_BUNDLE) => Some(message),
            Err(message) => panic!("refused, but not by the policy: {message}"),
            Ok(()) => {
                // Allowed before the policy was seen: put the chart's rules back and try again.
                reset(&c, &admin, &install, true).await;
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
        let refusal = patch_config(&sa, ops).await.expect_err(what);
        assert!(refusal.contains(ONLY_CA_BUNDLE), "{what}: {refusal}");
    }
    let after = configs.get("sandcap").await.unwrap();
    assert_eq!(after.metadata.resource_version, before.metadata.resource_version, "nothing was written");

    // What sandcap writes is allowed: a caBundle by hand, and the certificate loop's own patch.
    patch_config(&sa, json!([{"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": "Zm9v"}]))
        .await
        .expect("a caBundle patch is allowed");
    let outcome = certs::reconcile(&sa, &opts(), t0()).await.expect("reconcile under the policy");
    assert!(matches!(outcome.rotation, Rotation::Create { .. }), "{outcome:?}");
    assert_eq!(outcome.ca_bundle, BundleSync::Patched);
    assert_eq!(published_bundle(&admin).await, material(&admin).await.ca.cert().pem());

    // Even with RBAC to replace and delete it (a careless extra grant), only the caBundle moves.
    let extra = json!([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "e2e-extra-webhook-rights"},
         "rules": [{"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"],
                    "resourceNames": ["sandcap"], "verbs": ["update", "delete"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "e2e-extra-webhook-rights"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-extra-webhook-rights"},
         "subjects": [{"kind": "ServiceAccount", "name": "sandcap", "namespace": NAMESPACE}]},
    ]);
    install::apply(&c, extra.as_array().unwrap());
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

    // Anyone else, e.g. Helm upgrading the chart, may still change everything.
    patch_config(&admin, widen).await.expect("the admin widens the rules");
    configs.delete("sandcap", &DeleteParams::default()).await.expect("the admin deletes it");
    reset(&c, &admin, &install, false).await;
    ok("delete", c.kubectl(&["delete", "validatingwebhookconfiguration", "e2e-other-webhook", "--ignore-not-found"]));
}
