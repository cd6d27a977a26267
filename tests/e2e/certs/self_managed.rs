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
use kube::api::{Api, ObjectMeta, PostParams};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
use sandcap::certs::{self, BundleSync, CA_PUBLISH_GRACE, CA_RETIRE_GRACE, Reconciled, Rotation};
use serde_json::json;

use super::keeper::{SECRET, material, opts, published_bundle, reset, t0};
use crate::harness::binary::Sandcap;
use crate::harness::cluster::{Cluster, client_from};
use crate::harness::install::{self, Install, NAMESPACE};
use crate::harness::waits::eventually;
use crate::support::ok;

/// The Service's DNS name, which the serving certificate must name.
const SERVICE_HOST: &str = "sandcap-webhook.sandcap-system.svc";
const DAY: Duration = Duration::from_secs(24 * 60 * 60);
const YEAR: Duration = Duration::from_secs(365 * DAY.as_secs());

async fn resource_version<K>(api: &Api<K>, name: &str) -> Option<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get(name).await.expect("exists").meta().resource_version.clone()
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
    let bundle = created_when_absent_and_then_kept(&c, &admin, &install, &sa).await;
    the_serving_certificate_is_renewed(&admin, &sa, &bundle).await;
    let now = the_ca_rotates_without_breaking_trust(&admin, &sa).await;
    a_changed_ca_bundle_is_restored(&admin, &sa, now).await;
    an_unusable_secret_is_replaced(&c, &admin, &install, &sa).await;
    without_a_configuration_no_ca_is_promoted(&c, &admin, &install, &sa).await;
    racing_replicas_agree_on_one_certificate(&c, &admin, &install, &sa).await;
    the_whole_loop_as_installed(&c, &admin, &install).await;
}

/// One reconcile of the certificate keeper with `sa` (the chart's RBAC), at `now`.
fn reconcile(sa: &Client, now: SystemTime) -> impl Future<Output = Reconciled> + Send + 'static {
    let sa = sa.clone();
    async move { certs::reconcile(&sa, &opts(), now).await.expect("reconcile") }
}

fn expected(rotation: Rotation, ca_bundle: BundleSync) -> Reconciled {
    Reconciled { rotation, ca_bundle }
}

/// Created and published when absent, nothing else touched; fresh certificates are left alone.
/// Returns the published bundle.
async fn created_when_absent_and_then_kept(c: &Cluster, admin: &Client, install: &Install, sa: &Client) -> String {
    let secrets = Api::<Secret>::namespaced(admin.clone(), NAMESPACE);
    let configs = Api::<ValidatingWebhookConfiguration>::all(admin.clone());
    reset(c, admin, install, true).await;
    let outcome = reconcile(sa, t0()).await;
    assert!(matches!(outcome.rotation, Rotation::Create { .. }), "{outcome:?}");
    assert_eq!(outcome.ca_bundle, BundleSync::Patched);
    let stored = secrets.get(SECRET).await.expect("the Secret");
    assert_eq!(stored.type_.as_deref(), Some("kubernetes.io/tls"));
    let keys: Vec<&str> = stored.data.as_ref().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["ca.crt", "ca.key", "tls.crt", "tls.key"]);
    let m = material(admin).await;
    let bundle = published_bundle(admin).await;
    assert_eq!(bundle, m.ca.cert().pem());
    apiserver_trusts(&bundle, m.serving.cert().pem(), t0()).unwrap();
    let other = configs.get("e2e-other-webhook").await.unwrap();
    assert!(other.webhooks.unwrap()[0].client_config.ca_bundle.is_none(), "another configuration was changed");

    // Fresh certificates are left alone.
    let (secret_version, config_version) =
        (resource_version(&secrets, SECRET).await, resource_version(&configs, "sandcap").await);
    for later in [Duration::ZERO, DAY, 200 * DAY] {
        assert_eq!(reconcile(sa, t0() + later).await, expected(Rotation::Keep, BundleSync::UpToDate));
    }
    assert_eq!(resource_version(&secrets, SECRET).await, secret_version);
    assert_eq!(resource_version(&configs, "sandcap").await, config_version);
    bundle
}

/// The serving certificate is renewed near expiry, the bundle (`bundle`) untouched.
async fn the_serving_certificate_is_renewed(admin: &Client, sa: &Client, bundle: &str) {
    let first = material(admin).await;
    let now = t0() + 250 * DAY;
    assert!(matches!(reconcile(sa, now).await.rotation, Rotation::RenewServing { .. }));
    let renewed = material(admin).await;
    assert_eq!(renewed.ca.cert().pem(), first.ca.cert().pem());
    assert_ne!(renewed.serving.cert().pem(), first.serving.cert().pem());
    assert_eq!(published_bundle(admin).await, bundle);
    apiserver_trusts(bundle, first.serving.cert().pem(), now).unwrap();
    assert!(apiserver_trusts(bundle, first.serving.cert().pem(), t0() + YEAR + DAY).is_err());
    apiserver_trusts(bundle, renewed.serving.cert().pem(), t0() + YEAR + DAY).unwrap();
}

/// The CA rotates without ever breaking trust: publish, wait, promote, retire. Returns the time
/// it reached.
async fn the_ca_rotates_without_breaking_trust(admin: &Client, sa: &Client) -> SystemTime {
    let old = material(admin).await;
    let mut now = t0() + 7 * YEAR;
    assert_eq!(reconcile(sa, now).await, expected(Rotation::PrepareNextCa, BundleSync::Patched));
    let next = material(admin).await.next_ca.expect("a next CA");
    assert_eq!(published_bundle(admin).await, format!("{}{}", old.ca.cert().pem(), next.cert().pem()));
    assert!(matches!(reconcile(sa, now).await.rotation, Rotation::RenewServing { .. }));
    let served_before = material(admin).await.serving;
    assert_eq!(reconcile(sa, now).await.rotation, Rotation::Keep, "not before the publish grace");
    now += CA_PUBLISH_GRACE;
    assert_eq!(reconcile(sa, now).await, expected(Rotation::PromoteNextCa, BundleSync::Patched));
    let promoted = material(admin).await;
    assert_eq!(promoted.ca.cert().pem(), next.cert().pem());
    let bundle = published_bundle(admin).await;
    assert_eq!(bundle, format!("{}{}", next.cert().pem(), old.ca.cert().pem()));
    apiserver_trusts(&bundle, served_before.cert().pem(), now).unwrap();
    apiserver_trusts(&bundle, promoted.serving.cert().pem(), now).unwrap();
    now += CA_RETIRE_GRACE;
    assert_eq!(reconcile(sa, now).await, expected(Rotation::DropRetiredCa, BundleSync::Patched));
    let bundle = published_bundle(admin).await;
    assert_eq!(bundle, next.cert().pem());
    assert!(apiserver_trusts(&bundle, served_before.cert().pem(), now).is_err(), "the old CA is no longer trusted");
    now
}

/// A caBundle somebody else changed is restored (at `now`).
async fn a_changed_ca_bundle_is_restored(admin: &Client, sa: &Client, now: SystemTime) {
    let configs = Api::<ValidatingWebhookConfiguration>::all(admin.clone());
    let mut tampered = configs.get("sandcap").await.unwrap();
    tampered.webhooks.as_mut().unwrap()[1].client_config.ca_bundle = Some(ByteString(b"stale".to_vec()));
    configs.replace("sandcap", &PostParams::default(), &tampered).await.unwrap();
    assert_eq!(reconcile(sa, now).await, expected(Rotation::Keep, BundleSync::Patched));
    assert_eq!(published_bundle(admin).await, material(admin).await.ca.cert().pem());
}

/// An unusable Secret is replaced in place (its type is immutable, so it is kept).
async fn an_unusable_secret_is_replaced(c: &Cluster, admin: &Client, install: &Install, sa: &Client) {
    let secrets = Api::<Secret>::namespaced(admin.clone(), NAMESPACE);
    reset(c, admin, install, true).await;
    let broken = Secret {
        metadata: ObjectMeta { name: Some(SECRET.into()), namespace: Some(NAMESPACE.into()), ..ObjectMeta::default() },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([("tls.crt".to_string(), ByteString(b"not a certificate".to_vec()))])),
        ..Secret::default()
    };
    secrets.create(&PostParams::default(), &broken).await.unwrap();
    let outcome = reconcile(sa, t0()).await;
    assert_eq!(outcome.rotation, Rotation::Create { reason: "the Secret is unusable: ca.crt is missing".into() });
    assert_eq!(secrets.get(SECRET).await.unwrap().type_.as_deref(), Some("Opaque"));
    apiserver_trusts(&published_bundle(admin).await, material(admin).await.serving.cert().pem(), t0()).unwrap();
}

/// Without a webhook configuration, a next CA is prepared but never promoted.
async fn without_a_configuration_no_ca_is_promoted(c: &Cluster, admin: &Client, install: &Install, sa: &Client) {
    reset(c, admin, install, false).await;
    assert_eq!(reconcile(sa, t0()).await.ca_bundle, BundleSync::ConfigMissing);
    let now = t0() + 7 * YEAR;
    assert_eq!(reconcile(sa, now).await.rotation, Rotation::PrepareNextCa);
    reconcile(sa, now).await;
    assert_eq!(reconcile(sa, now + 30 * DAY).await, expected(Rotation::Keep, BundleSync::ConfigMissing));
    let m = material(admin).await;
    assert!(m.next_ca.is_some() && m.retired_ca.is_none());
}

/// Replicas racing for real agree on one certificate.
async fn racing_replicas_agree_on_one_certificate(c: &Cluster, admin: &Client, install: &Install, sa: &Client) {
    reset(c, admin, install, true).await;
    let replicas: Vec<_> = (0..3).map(|_| tokio::spawn(reconcile(sa, t0()))).collect();
    let mut creates = 0;
    for replica in replicas {
        creates += usize::from(matches!(replica.await.unwrap().rotation, Rotation::Create { .. }));
    }
    assert!(creates >= 1);
    let m = material(admin).await;
    let bundle = published_bundle(admin).await;
    assert_eq!(bundle, m.ca.cert().pem(), "the published CA is the stored one");
    apiserver_trusts(&bundle, m.serving.cert().pem(), t0()).unwrap();
    assert_eq!(reconcile(sa, t0()).await, expected(Rotation::Keep, BundleSync::UpToDate));
}

/// The whole loop, as installed: `sandcap run` creates the certificate, a stand-in for the
/// kubelet mounts it, and the apiserver calls the webhook by its Service name (through the
/// test's proxy) trusting only the caBundle that sandcap published.
async fn the_whole_loop_as_installed(c: &Cluster, admin: &Client, install: &Install) {
    let secrets = Api::<Secret>::namespaced(admin.clone(), NAMESPACE);
    let configs = Api::<ValidatingWebhookConfiguration>::all(admin.clone());
    reset(c, admin, install, true).await;
    let mounted = c.dir.join("mounted-tls");
    std::fs::create_dir_all(&mounted).unwrap();
    let (cert, key) = (mounted.join("tls.crt"), mounted.join("tls.key"));
    let (cert_env, key_env) = (cert.display().to_string(), key.display().to_string());
    let sandcap = Sandcap::start(
        c,
        install,
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
    c.proxy.route(&install.service_address(c).await, sandcap.webhook_port);
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
    reset(c, admin, install, false).await;
    ok("delete", c.kubectl(&["delete", "validatingwebhookconfiguration", "e2e-other-webhook", "--ignore-not-found"]));
    ok("delete", c.kubectl(&["delete", "service", "-n", NAMESPACE, "sandcap-webhook", "--ignore-not-found"]));
}
