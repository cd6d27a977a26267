//! Self-managed certificates against an in-memory Kubernetes API (kube-fake-client): what
//! `reconcile` writes to the Secret and to the webhook's caBundle over a certificate's life, with
//! an injected clock, and what happens when replicas race. Every certificate is checked the way
//! the apiserver would: by a real TLS verifier (rustls/webpki) trusting only the published caBundle.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use kube_fake_client::{ClientBuilder, interceptor};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime, pem::PemObject};
use sandcap::certs::{
    self, Action, BundleSync, CA_PUBLISH_GRACE, CA_RETIRE_GRACE, CertOptions, Material, Outcome, Stored,
};
use tokio_util::sync::CancellationToken;

const NS: &str = "sandcap-system";
const DAY: Duration = Duration::from_secs(24 * 60 * 60);
const YEAR: Duration = Duration::from_secs(365 * 24 * 60 * 60);

fn opts() -> CertOptions {
    CertOptions {
        secret_name: "sandcap-webhook-tls".into(),
        namespace: NS.into(),
        service_name: "sandcap-webhook".into(),
        webhook_config_name: "sandcap".into(),
        check_interval: Duration::from_millis(20),
    }
}

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn webhook(name: &str) -> ValidatingWebhook {
    ValidatingWebhook {
        name: name.into(),
        admission_review_versions: vec!["v1".into()],
        side_effects: "None".into(),
        failure_policy: Some("Fail".into()),
        client_config: WebhookClientConfig {
            service: Some(ServiceReference {
                name: "sandcap-webhook".into(),
                namespace: NS.into(),
                path: Some("/validate".into()),
                port: Some(443),
            }),
            ..WebhookClientConfig::default()
        },
        rules: Some(vec![RuleWithOperations {
            api_groups: Some(vec!["sandcap.dev".into()]),
            api_versions: Some(vec!["v1alpha1".into()]),
            operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
            resources: Some(vec!["sandboxproviders".into()]),
            scope: Some("Cluster".into()),
        }]),
        ..ValidatingWebhook::default()
    }
}

fn config(name: &str, hooks: &[&str]) -> ValidatingWebhookConfiguration {
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
        webhooks: Some(hooks.iter().map(|h| webhook(h)).collect()),
    }
}

/// A cluster as the chart leaves it: our webhook configuration (two webhooks, no caBundle) and
/// somebody else's, which sandcap must never touch.
async fn cluster(funcs: Option<interceptor::Funcs>) -> Client {
    let mut builder = ClientBuilder::new()
        .with_object(config("sandcap", &["validate.sandcap.dev", "second.sandcap.dev"]))
        .with_object(config("other-webhook", &["validate.example.com"]));
    if let Some(funcs) = funcs {
        builder = builder.with_interceptor_funcs(funcs);
    }
    builder.build().await.unwrap()
}

async fn secret(client: &Client) -> Option<Secret> {
    Api::<Secret>::namespaced(client.clone(), NS).get_opt("sandcap-webhook-tls").await.unwrap()
}

async fn material(client: &Client) -> Material {
    let secret = secret(client).await.expect("the Secret exists");
    Material::from_secret_data(secret.data.as_ref().unwrap()).unwrap()
}

async fn webhook_config(client: &Client, name: &str) -> ValidatingWebhookConfiguration {
    Api::<ValidatingWebhookConfiguration>::all(client.clone()).get(name).await.unwrap()
}

/// Every caBundle of our configuration; they must all be equal.
async fn published_bundle(client: &Client) -> String {
    let bundles: Vec<String> = webhook_config(client, "sandcap")
        .await
        .webhooks
        .unwrap()
        .into_iter()
        .map(|w| String::from_utf8(w.client_config.ca_bundle.expect("caBundle set").0).unwrap())
        .collect();
    assert_eq!(bundles.len(), 2);
    assert_eq!(bundles[0], bundles[1], "every webhook gets the same bundle");
    bundles[0].clone()
}

fn expected(action: Action, ca_bundle: BundleSync) -> Outcome {
    Outcome { action, ca_bundle }
}

async fn reconcile(client: &Client, now: SystemTime) -> Outcome {
    certs::reconcile(client, &opts(), now).await.unwrap()
}

/// What the apiserver does before it sends a review: verify the serving certificate for the
/// Service's DNS name against the caBundle, at time `at`.
fn apiserver_trusts(bundle: &str, serving_pem: &str, at: SystemTime) -> Result<(), rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(bundle.as_bytes()) {
        roots.add(der.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap();
    let leaf = CertificateDer::from_pem_slice(serving_pem.as_bytes()).unwrap();
    let name = ServerName::try_from("sandcap-webhook.sandcap-system.svc").unwrap();
    let at = UnixTime::since_unix_epoch(at.duration_since(SystemTime::UNIX_EPOCH).unwrap());
    verifier.verify_server_cert(&leaf, &[], &name, &[], at).map(|_| ())
}

#[tokio::test]
async fn creates_the_secret_and_publishes_the_ca_when_absent() {
    let client = cluster(None).await;
    let outcome = reconcile(&client, t0()).await;
    assert!(matches!(outcome.action, Action::Create { .. }), "{outcome:?}");
    assert_eq!(outcome.ca_bundle, BundleSync::Patched);

    let stored = secret(&client).await.unwrap();
    assert_eq!(stored.type_.as_deref(), Some("kubernetes.io/tls"));
    let keys: Vec<&str> = stored.data.as_ref().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["ca.crt", "ca.key", "tls.crt", "tls.key"]);
    let m = material(&client).await;
    let bundle = published_bundle(&client).await;
    assert_eq!(bundle, m.ca.cert().pem());
    apiserver_trusts(&bundle, m.serving.cert().pem(), t0()).unwrap();

    // Only caBundle changed: the rules are intact, and the other configuration is untouched.
    let ours = webhook_config(&client, "sandcap").await;
    assert_eq!(ours.webhooks.as_ref().unwrap()[0].rules, webhook("x").rules);
    let other = webhook_config(&client, "other-webhook").await;
    assert!(other.webhooks.unwrap()[0].client_config.ca_bundle.is_none());
}

#[tokio::test]
async fn leaves_fresh_certificates_alone() {
    let client = cluster(None).await;
    reconcile(&client, t0()).await;
    let before = secret(&client).await.unwrap();
    let config_version = webhook_config(&client, "sandcap").await.metadata.resource_version;
    for later in [Duration::ZERO, DAY, 200 * DAY] {
        let outcome = reconcile(&client, t0() + later).await;
        assert_eq!(outcome, expected(Action::Keep, BundleSync::UpToDate));
    }
    assert_eq!(secret(&client).await.unwrap().metadata.resource_version, before.metadata.resource_version);
    assert_eq!(webhook_config(&client, "sandcap").await.metadata.resource_version, config_version);
}

#[tokio::test]
async fn renews_the_serving_certificate_near_expiry_without_touching_the_bundle() {
    let client = cluster(None).await;
    reconcile(&client, t0()).await;
    let first = material(&client).await;
    let bundle = published_bundle(&client).await;

    let now = t0() + 250 * DAY;
    let outcome = reconcile(&client, now).await;
    assert!(matches!(outcome.action, Action::RenewServing { .. }), "{outcome:?}");
    assert_eq!(outcome.ca_bundle, BundleSync::UpToDate, "same CA, same bundle");
    let renewed = material(&client).await;
    assert_eq!(renewed.ca.cert().pem(), first.ca.cert().pem());
    assert_ne!(renewed.serving.cert().pem(), first.serving.cert().pem());
    assert_eq!(published_bundle(&client).await, bundle);
    apiserver_trusts(&bundle, renewed.serving.cert().pem(), now).unwrap();
    // The old certificate, still served until the pods reload, is still trusted too.
    apiserver_trusts(&bundle, first.serving.cert().pem(), now).unwrap();
    // Without the renewal the webhook would have broken at the old certificate's expiry.
    assert!(apiserver_trusts(&bundle, first.serving.cert().pem(), t0() + YEAR + DAY).is_err());
    apiserver_trusts(&bundle, renewed.serving.cert().pem(), t0() + YEAR + DAY).unwrap();
}

#[tokio::test]
async fn rotates_the_ca_without_ever_breaking_trust() {
    let client = cluster(None).await;
    reconcile(&client, t0()).await;
    let old = material(&client).await;
    let mut now = t0() + 7 * YEAR;
    let mut served = Vec::new();

    // The CA is in its last third: its successor is created and published first.
    let outcome = reconcile(&client, now).await;
    assert_eq!(outcome, expected(Action::PrepareNextCa, BundleSync::Patched));
    let prepared = material(&client).await;
    let next = prepared.next_ca.clone().unwrap();
    assert_eq!(published_bundle(&client).await, format!("{}{}", old.ca.cert().pem(), next.cert().pem()));
    // (The serving certificate from t0 expired long ago; the next round renews it from the old CA.)
    assert!(matches!(reconcile(&client, now).await.action, Action::RenewServing { .. }));
    served.push(material(&client).await.serving);
    assert_eq!(reconcile(&client, now).await.action, Action::Keep, "not before the publish grace");

    now += CA_PUBLISH_GRACE;
    assert_eq!(reconcile(&client, now).await, expected(Action::PromoteNextCa, BundleSync::Patched));
    let promoted = material(&client).await;
    assert_eq!(promoted.ca.cert().pem(), next.cert().pem());
    served.push(promoted.serving.clone());
    let bundle = published_bundle(&client).await;
    assert_eq!(bundle, format!("{}{}", next.cert().pem(), old.ca.cert().pem()));
    for serving in &served {
        apiserver_trusts(&bundle, serving.cert().pem(), now).unwrap();
    }

    now += CA_RETIRE_GRACE;
    assert_eq!(reconcile(&client, now).await, expected(Action::DropRetiredCa, BundleSync::Patched));
    let bundle = published_bundle(&client).await;
    assert_eq!(bundle, next.cert().pem());
    apiserver_trusts(&bundle, material(&client).await.serving.cert().pem(), now).unwrap();
    assert!(apiserver_trusts(&bundle, served[0].cert().pem(), now).is_err(), "the old CA is no longer trusted");
    assert_eq!(reconcile(&client, now).await.action, Action::Keep);
}

#[tokio::test]
async fn never_promotes_a_ca_the_apiserver_has_not_seen() {
    // No webhook configuration at all: the next CA is prepared but never used.
    let client = ClientBuilder::new().build().await.unwrap();
    assert_eq!(reconcile(&client, t0()).await.ca_bundle, BundleSync::ConfigMissing);
    let now = t0() + 7 * YEAR;
    assert_eq!(reconcile(&client, now).await.action, Action::PrepareNextCa);
    reconcile(&client, now).await;
    let later = now + 30 * DAY;
    assert_eq!(reconcile(&client, later).await, expected(Action::Keep, BundleSync::ConfigMissing));
    let m = material(&client).await;
    assert!(m.next_ca.is_some() && m.retired_ca.is_none());
}

#[tokio::test]
async fn restores_a_ca_bundle_someone_else_changed() {
    let client = cluster(None).await;
    reconcile(&client, t0()).await;
    let api = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    let mut tampered = api.get("sandcap").await.unwrap();
    tampered.webhooks.as_mut().unwrap()[1].client_config.ca_bundle = Some(ByteString(b"stale".to_vec()));
    api.replace("sandcap", &PostParams::default(), &tampered).await.unwrap();

    assert_eq!(reconcile(&client, t0()).await, expected(Action::Keep, BundleSync::Patched));
    assert_eq!(published_bundle(&client).await, material(&client).await.ca.cert().pem());
}

#[tokio::test]
async fn replaces_an_unusable_secret_in_place() {
    let client = cluster(None).await;
    let broken = Secret {
        metadata: ObjectMeta {
            name: Some("sandcap-webhook-tls".into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([("tls.crt".to_string(), ByteString(b"not a certificate".to_vec()))])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), NS).create(&PostParams::default(), &broken).await.unwrap();
    let outcome = reconcile(&client, t0()).await;
    assert_eq!(outcome.action, Action::Create { reason: "the Secret is unusable: ca.crt is missing".into() });
    assert_eq!(secret(&client).await.unwrap().type_.as_deref(), Some("Opaque"), "the type is immutable; kept");
    apiserver_trusts(&published_bundle(&client).await, material(&client).await.serving.cert().pem(), t0()).unwrap();
}

#[tokio::test]
async fn a_replica_that_loses_the_create_race_adopts_the_winners_secret() {
    // Between our read (no Secret) and our create, another replica creates its own.
    let winner = certs::generate(&certs::dns_names("sandcap-webhook", NS), t0()).unwrap();
    let winner_data = winner.to_secret_data();
    let fired = AtomicBool::new(false);
    let funcs = interceptor::Funcs::new().create(move |ctx| {
        if ctx.object["kind"] == "Secret" && !fired.swap(true, Ordering::SeqCst) {
            let theirs = Secret {
                metadata: ObjectMeta { name: Some("sandcap-webhook-tls".into()), ..ObjectMeta::default() },
                type_: Some("kubernetes.io/tls".into()),
                data: Some(winner_data.clone()),
                ..Secret::default()
            };
            ctx.client.create(ctx.namespace, &theirs, &PostParams::default())?;
        }
        Ok(None)
    });
    let client = cluster(Some(funcs)).await;
    let outcome = reconcile(&client, t0()).await;
    assert_eq!(outcome, expected(Action::Keep, BundleSync::Patched));
    assert_eq!(material(&client).await.to_secret_data(), winner.to_secret_data(), "not clobbered");
    assert_eq!(published_bundle(&client).await, winner.ca.cert().pem());
}

#[tokio::test]
async fn a_replica_with_a_stale_read_does_not_clobber_a_renewal() {
    let client = cluster(None).await;
    reconcile(&client, t0()).await;
    let now = t0() + 250 * DAY;
    // Another replica renews first, between our read and our write.
    let Stored::Usable(current) = Stored::from_secret(secret(&client).await.as_ref()) else { panic!() };
    let names = certs::dns_names("sandcap-webhook", NS);
    let action = Action::RenewServing { reason: "test".into() };
    let theirs = certs::carry_out(&Stored::Usable(current), &action, &names, now).unwrap();
    let their_data = theirs.to_secret_data();
    let fired = Arc::new(AtomicBool::new(false));
    let seen = fired.clone();
    let funcs = interceptor::Funcs::new().replace(move |ctx| {
        if ctx.object["kind"] == "Secret" && !fired.swap(true, Ordering::SeqCst) {
            let mut latest: Secret = ctx.client.get(ctx.namespace, ctx.name)?;
            latest.data = Some(their_data.clone());
            ctx.client.update(ctx.namespace, &latest, &PostParams::default())?;
        }
        Ok(None)
    });
    // Same objects, now behind the interceptor.
    let racing = {
        let existing = secret(&client).await.unwrap();
        let mut builder = ClientBuilder::new()
            .with_object(webhook_config(&client, "sandcap").await)
            .with_object(Secret { metadata: ObjectMeta { resource_version: None, ..existing.metadata }, ..existing });
        builder = builder.with_interceptor_funcs(funcs);
        builder.build().await.unwrap()
    };
    let outcome = reconcile(&racing, now).await;
    assert!(seen.load(Ordering::SeqCst), "the race was staged");
    assert_eq!(outcome.action, Action::Keep, "the conflict made us re-read and find their renewal");
    assert_eq!(material(&racing).await.to_secret_data(), theirs.to_secret_data());
}

#[tokio::test]
async fn a_webhook_configuration_changed_meanwhile_is_read_again_not_overwritten() {
    // A `helm upgrade` adds a webhook between our read and our caBundle patch: the patch carries
    // the resourceVersion we read, so it conflicts, and the retry covers the new webhook too.
    let fired = AtomicBool::new(false);
    let funcs = interceptor::Funcs::new().patch(move |ctx| {
        if ctx.name == "sandcap" && !fired.swap(true, Ordering::SeqCst) {
            let mut latest: ValidatingWebhookConfiguration = ctx.client.get("", ctx.name)?;
            latest.webhooks.as_mut().unwrap().push(webhook("third.sandcap.dev"));
            ctx.client.update("", &latest, &PostParams::default())?;
        }
        Ok(None)
    });
    let client = cluster(Some(funcs)).await;
    assert_eq!(reconcile(&client, t0()).await.ca_bundle, BundleSync::Patched);
    let hooks = webhook_config(&client, "sandcap").await.webhooks.unwrap();
    assert_eq!(hooks.len(), 3, "the concurrent change survived");
    let ca = material(&client).await.ca.cert().pem().to_string();
    for hook in hooks {
        assert_eq!(hook.client_config.ca_bundle.map(|b| b.0), Some(ca.clone().into_bytes()), "{}", hook.name);
        assert_eq!(hook.rules, webhook("x").rules);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_replicas_agree_on_one_certificate() {
    let client = cluster(None).await;
    let replicas: Vec<_> = (0..2)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { certs::reconcile(&client, &opts(), t0()).await })
        })
        .collect();
    let mut creates = 0;
    for replica in replicas {
        creates += usize::from(matches!(replica.await.unwrap().unwrap().action, Action::Create { .. }));
    }
    assert!(creates >= 1);
    let m = material(&client).await;
    let bundle = published_bundle(&client).await;
    assert_eq!(bundle, m.ca.cert().pem(), "the published CA is the stored one");
    apiserver_trusts(&bundle, m.serving.cert().pem(), t0()).unwrap();
    assert_eq!(reconcile(&client, t0()).await, expected(Action::Keep, BundleSync::UpToDate));
}

#[tokio::test]
async fn the_loop_keeps_certificates_current_and_stops_on_shutdown() {
    let client = cluster(None).await;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(certs::run_self_managed(client.clone(), opts(), shutdown.clone()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while secret(&client).await.is_none()
        || webhook_config(&client, "sandcap").await.webhooks.unwrap()[0].client_config.ca_bundle.is_none()
    {
        assert!(tokio::time::Instant::now() < deadline, "the loop did not create the certificate");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("stops on shutdown").unwrap();
    apiserver_trusts(&published_bundle(&client).await, material(&client).await.serving.cert().pem(), SystemTime::now())
        .unwrap();
}

/// The files the pod mounts really serve TLS that a client trusting only the caBundle accepts.
#[tokio::test]
async fn the_mounted_pair_serves_tls_to_a_client_trusting_the_bundle() {
    let client = cluster(None).await;
    certs::reconcile(&client, &opts(), SystemTime::now()).await.unwrap();
    let stored = secret(&client).await.unwrap().data.unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());

    let chain = vec![CertificateDer::from_pem_slice(&stored["tls.crt"].0).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(&stored["tls.key"].0).unwrap();
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();

    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(published_bundle(&client).await.as_bytes()) {
        roots.add(der.unwrap()).unwrap();
    }
    let client_config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let serve = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut tls = acceptor.accept(tcp).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut tls, b"ok").await.unwrap();
        tokio::io::AsyncWriteExt::shutdown(&mut tls).await.unwrap();
    });
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("sandcap-webhook.sandcap-system.svc").unwrap();
    let mut tls = connector.connect(name, tcp).await.expect("handshake with the self-managed certificate");
    let mut answer = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut tls, &mut answer).await.unwrap();
    assert_eq!(answer, b"ok");
    serve.await.unwrap();
}
