//! Self-managed webhook certificates (`sandcap run --self-managed-certs`): sandcap keeps its own CA
//! and serving certificate in one Secret shared by every replica, renews them long before they
//! expire and keeps the `caBundle` of its ValidatingWebhookConfiguration in sync, so the chart
//! carries no key material (identical renders, no GitOps drift) and the webhook never lapses.
//!
//! The pure core decides ([`decide`]) and produces the next Secret contents ([`carry_out`]); the
//! thin shell ([`reconcile`], [`run_self_managed`]) reads the Secret and the webhook configuration,
//! and writes with resourceVersion preconditions, so any number of replicas can run it at once:
//! a replica that loses a race gets a conflict, re-reads, and finds the winner's work.
//!
//! Lifecycle, with the apiserver trusting the published bundle at every step:
//! 1. no Secret: create a CA and a serving certificate; publish the CA;
//! 2. serving certificate in its last third: issue a new one from the same CA (bundle unchanged);
//! 3. CA in its last third: create the next CA and publish it next to the current one;
//! 4. once the next CA has been in every webhook's caBundle for [`CA_PUBLISH_GRACE`]: it signs a new
//!    serving certificate and becomes the CA; the old CA stays in the bundle (retired) because
//!    pods keep serving the old certificate until the kubelet refreshes the mounted Secret;
//! 5. [`CA_RETIRE_GRACE`] after that switch the retired CA leaves the bundle.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use x509_parser::pem::Pem;

use crate::vocabulary::FIELD_MANAGER;

const HOUR: Duration = Duration::from_secs(60 * 60);

/// Lifetime of a CA sandcap creates. Long, because replacing a CA takes a publish-then-switch dance.
pub const CA_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);
/// Lifetime of a serving certificate (capped at its CA's expiry).
pub const SERVING_LIFETIME: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// A next CA must sit in every webhook's caBundle this long before it signs anything: apiservers
/// watch webhook configurations, so a few seconds would do; an hour leaves room for a lagging one.
pub const CA_PUBLISH_GRACE: Duration = HOUR;
/// A retired CA stays in the caBundle this long after the switch: the kubelet takes up to a minute
/// or two to refresh a mounted Secret, and the file reloader polls every few seconds after that.
pub const CA_RETIRE_GRACE: Duration = HOUR;
/// Certificates start this long before "now", so a node whose clock is a little behind accepts them.
const BACKDATE: Duration = HOUR;
/// Renew a certificate once less than 1/RENEW_DIVISOR of its lifetime is left.
const RENEW_DIVISOR: u32 = 3;
/// How soon a failed round is retried (capped by the check interval).
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// Rounds of read-decide-write lost to other replicas before one reconcile gives up until next time.
const MAX_ATTEMPTS: u32 = 5;

/// Keys of the Secret. `tls.crt`/`tls.key` (the only keys the pod mounts) and `ca.crt` follow the
/// kubernetes.io/tls and cert-manager conventions.
pub const TLS_CRT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const CA_CRT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const NEXT_CA_CRT: &str = "next-ca.crt";
pub const NEXT_CA_KEY: &str = "next-ca.key";
pub const RETIRED_CA_CRT: &str = "retired-ca.crt";

/// One parsed X.509 certificate, with what the decisions need.
#[derive(Clone, Debug)]
pub struct Cert {
    pem: String,
    der: Vec<u8>,
    not_before: SystemTime,
    not_after: SystemTime,
    subject: Vec<u8>,
    issuer: Vec<u8>,
    common_name: String,
    dns_names: Vec<String>,
    public_key: Vec<u8>,
}

fn unix(seconds: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(seconds.max(0).unsigned_abs())
}

fn rfc3339(t: SystemTime) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_seconds(t)
}

impl Cert {
    /// Parses exactly one PEM `CERTIFICATE`.
    pub fn from_pem(text: &str) -> Result<Cert, String> {
        let mut blocks = Pem::iter_from_buffer(text.as_bytes());
        let pem = match (blocks.next(), blocks.next()) {
            (Some(Ok(pem)), None) if pem.label == "CERTIFICATE" => pem,
            (Some(Ok(_)), Some(_)) => return Err("holds more than one PEM block".into()),
            _ => return Err("is not a PEM certificate".into()),
        };
        let x509 = pem.parse_x509().map_err(|e| format!("is not a valid X.509 certificate ({e})"))?;
        let dns_names = match x509.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    x509_parser::extensions::GeneralName::DNSName(dns) => Some(dns.to_string()),
                    _ => None,
                })
                .collect(),
            Ok(None) => Vec::new(),
            Err(e) => return Err(format!("has an unreadable subjectAltName ({e})")),
        };
        let cert = Cert {
            pem: text.to_string(),
            not_before: unix(x509.validity().not_before.timestamp()),
            not_after: unix(x509.validity().not_after.timestamp()),
            subject: x509.subject().as_raw().to_vec(),
            issuer: x509.issuer().as_raw().to_vec(),
            common_name: x509
                .subject()
                .iter_common_name()
                .next()
                .and_then(|cn| cn.as_str().ok())
                .unwrap_or_default()
                .to_string(),
            dns_names,
            public_key: x509.public_key().subject_public_key.data.to_vec(),
            der: pem.contents.clone(),
        };
        Ok(cert)
    }

    pub fn pem(&self) -> &str {
        &self.pem
    }

    pub fn not_before(&self) -> SystemTime {
        self.not_before
    }

    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    pub fn dns_names(&self) -> &[String] {
        &self.dns_names
    }

    fn issued_by(&self, ca: &Cert) -> bool {
        self.issuer == ca.subject
    }

    /// True once less than a third of the lifetime is left (or the certificate is not valid now).
    fn due_for_renewal(&self, now: SystemTime) -> bool {
        let lifetime = self.not_after.duration_since(self.not_before).unwrap_or_default();
        match self.not_after.duration_since(now) {
            Ok(left) => now < self.not_before || left < lifetime / RENEW_DIVISOR,
            Err(_) => true,
        }
    }
}

/// A certificate with its private key (PKCS#8 PEM). `Debug` never prints the key.
#[derive(Clone)]
pub struct KeyedCert {
    cert: Cert,
    key_pem: String,
}

impl fmt::Debug for KeyedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCert").field("cert", &self.cert.common_name).field("key_pem", &"<redacted>").finish()
    }
}

impl KeyedCert {
    fn parse(cert: &str, key: &str) -> Result<KeyedCert, String> {
        let parsed = Cert::from_pem(cert)?;
        let pair = KeyPair::from_pem(key).map_err(|_| "private key is not a PKCS#8 PEM key".to_string())?;
        if pair.public_key_raw() != parsed.public_key.as_slice() {
            return Err("private key does not belong to the certificate".into());
        }
        Ok(KeyedCert { cert: parsed, key_pem: key.to_string() })
    }

    fn generated(cert: rcgen::Certificate, key: &KeyPair) -> Result<KeyedCert, rcgen::Error> {
        let parsed = Cert::from_pem(&cert.pem()).map_err(|_| rcgen::Error::CouldNotParseCertificate)?;
        Ok(KeyedCert { cert: parsed, key_pem: key.serialize_pem() })
    }

    pub fn cert(&self) -> &Cert {
        &self.cert
    }

    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }
}

/// Everything the Secret holds, parsed and checked for consistency.
#[derive(Clone, Debug)]
pub struct Material {
    pub ca: KeyedCert,
    pub next_ca: Option<KeyedCert>,
    pub retired_ca: Option<Cert>,
    pub serving: KeyedCert,
}

/// What the Secret currently holds.
#[derive(Clone, Debug)]
pub enum Stored {
    Absent,
    /// Present but not usable; the reason names keys and problems, never contents.
    Unusable(String),
    Usable(Box<Material>),
}

impl Stored {
    pub fn from_secret(secret: Option<&Secret>) -> Stored {
        let Some(secret) = secret else {
            return Stored::Absent;
        };
        let empty = BTreeMap::new();
        match Material::from_secret_data(secret.data.as_ref().unwrap_or(&empty)) {
            Ok(material) => Stored::Usable(Box::new(material)),
            Err(reason) => Stored::Unusable(reason),
        }
    }
}

fn text<'a>(data: &'a BTreeMap<String, ByteString>, key: &str) -> Result<Option<&'a str>, String> {
    data.get(key).map(|value| std::str::from_utf8(&value.0).map_err(|_| format!("{key} is not UTF-8 text"))).transpose()
}

fn required<'a>(data: &'a BTreeMap<String, ByteString>, key: &str) -> Result<&'a str, String> {
    text(data, key)?.ok_or_else(|| format!("{key} is missing"))
}

fn keyed(data: &BTreeMap<String, ByteString>, cert_key: &str, key_key: &str) -> Result<KeyedCert, String> {
    KeyedCert::parse(required(data, cert_key)?, required(data, key_key)?).map_err(|e| format!("{cert_key}: {e}"))
}

impl Material {
    pub fn from_secret_data(data: &BTreeMap<String, ByteString>) -> Result<Material, String> {
        let ca = keyed(data, CA_CRT, CA_KEY)?;
        let serving = keyed(data, TLS_CRT, TLS_KEY)?;
        let next_ca = match text(data, NEXT_CA_CRT)? {
            Some(_) => Some(keyed(data, NEXT_CA_CRT, NEXT_CA_KEY)?),
            None => None,
        };
        let retired_ca = text(data, RETIRED_CA_CRT)?
            .map(Cert::from_pem)
            .transpose()
            .map_err(|e| format!("{RETIRED_CA_CRT}: {e}"))?;
        Ok(Material { ca, next_ca, retired_ca, serving })
    }

    pub fn to_secret_data(&self) -> BTreeMap<String, ByteString> {
        let mut data = BTreeMap::new();
        let mut put = |key: &str, value: &str| {
            data.insert(key.to_string(), ByteString(value.as_bytes().to_vec()));
        };
        put(CA_CRT, self.ca.cert.pem());
        put(CA_KEY, self.ca.key_pem());
        put(TLS_CRT, self.serving.cert.pem());
        put(TLS_KEY, self.serving.key_pem());
        if let Some(next) = &self.next_ca {
            put(NEXT_CA_CRT, next.cert.pem());
            put(NEXT_CA_KEY, next.key_pem());
        }
        if let Some(retired) = &self.retired_ca {
            put(RETIRED_CA_CRT, retired.pem());
        }
        data
    }

    /// The PEM bundle every webhook's `caBundle` must hold: the CA, then the next or retired one.
    pub fn ca_bundle(&self) -> String {
        let mut bundle = String::new();
        let certs = [Some(&self.ca.cert), self.next_ca.as_ref().map(|n| &n.cert), self.retired_ca.as_ref()];
        for cert in certs.into_iter().flatten() {
            bundle.push_str(cert.pem().trim_end());
            bundle.push('\n');
        }
        bundle
    }
}

/// `<svc>`, `<svc>.<ns>` and `<svc>.<ns>.svc`: the names the apiserver may use for the Service.
pub fn dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![service.to_string(), format!("{service}.{namespace}"), format!("{service}.{namespace}.svc")]
}

/// Whether a PEM bundle (a webhook's `caBundle`) contains this certificate.
fn bundle_contains(bundle: &[u8], cert: &Cert) -> bool {
    Pem::iter_from_buffer(bundle).any(|pem| pem.is_ok_and(|pem| pem.contents == cert.der))
}

/// What one round does to the Secret. Reasons are for logs: names and dates, never key material.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rotation {
    Keep,
    /// Start over with a new CA and serving certificate (no usable Secret, or its CA expired).
    Create {
        reason: String,
    },
    /// New serving certificate from the same CA; the caBundle does not change.
    RenewServing {
        reason: String,
    },
    /// The CA is in its last third: create its successor and publish it next to it.
    PrepareNextCa,
    /// The next CA has been published long enough: it signs a new serving certificate and takes over.
    PromoteNextCa,
    /// The switch is long enough ago that no pod serves a certificate of the retired CA any more.
    DropRetiredCa,
}

impl fmt::Display for Rotation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rotation::Keep => write!(f, "certificates are current"),
            Rotation::Create { reason } => {
                write!(f, "created a new CA and serving certificate ({reason})")
            }
            Rotation::RenewServing { reason } => {
                write!(f, "renewed the serving certificate ({reason})")
            }
            Rotation::PrepareNextCa => write!(f, "created the next CA and published it next to the current one"),
            Rotation::PromoteNextCa => write!(f, "switched to the next CA; the old one stays trusted for a while"),
            Rotation::DropRetiredCa => write!(f, "removed the retired CA from the caBundle"),
        }
    }
}

/// Decides the next step. `next_ca_published`: every webhook's caBundle already holds the next CA
/// (see [`bundle_contains`]); a CA is never used before the apiservers trust it.
fn decide(stored: &Stored, dns_names: &[String], next_ca_published: bool, now: SystemTime) -> Rotation {
    let m = match stored {
        Stored::Absent => {
            return Rotation::Create { reason: "no certificate Secret yet".into() };
        }
        Stored::Unusable(reason) => {
            return Rotation::Create { reason: format!("the Secret is unusable: {reason}") };
        }
        Stored::Usable(m) => m,
    };
    if now >= m.ca.cert.not_after {
        return Rotation::Create { reason: format!("the CA expired at {}", rfc3339(m.ca.cert.not_after)) };
    }
    if let Some(next) = &m.next_ca
        && next_ca_published
        && now >= next.cert.not_before + BACKDATE + CA_PUBLISH_GRACE
    {
        return Rotation::PromoteNextCa;
    }
    if m.next_ca.is_none() && m.ca.cert.due_for_renewal(now) {
        return Rotation::PrepareNextCa;
    }
    let serving = &m.serving.cert;
    if !serving.issued_by(&m.ca.cert) {
        return Rotation::RenewServing { reason: "it was not issued by the current CA".into() };
    }
    let (mut have, mut want) = (serving.dns_names.clone(), dns_names.to_vec());
    have.sort();
    want.sort();
    if have != want {
        return Rotation::RenewServing { reason: format!("its DNS names should be {}", want.join(", ")) };
    }
    if serving.due_for_renewal(now) {
        return Rotation::RenewServing { reason: format!("it expires at {}", rfc3339(serving.not_after)) };
    }
    if let Some(retired) = &m.retired_ca
        && (now >= retired.not_after || now >= serving.not_before + BACKDATE + CA_RETIRE_GRACE)
    {
        return Rotation::DropRetiredCa;
    }
    Rotation::Keep
}

/// The Secret contents after `action`. Material that cannot be built upon is replaced whatever
/// the action (decide never asks for that, but a fresh start is the only safe answer).
pub fn carry_out(
    stored: &Stored,
    action: &Rotation,
    dns_names: &[String],
    now: SystemTime,
) -> Result<Material, rcgen::Error> {
    let Stored::Usable(current) = stored else {
        return generate(dns_names, now);
    };
    let mut next = Material::clone(current);
    match action {
        Rotation::Keep => {}
        Rotation::Create { .. } => return generate(dns_names, now),
        Rotation::RenewServing { .. } => next.serving = issue_serving(&current.ca, dns_names, now)?,
        Rotation::PrepareNextCa => next.next_ca = Some(new_ca(now)?),
        Rotation::PromoteNextCa => {
            let Some(ca) = next.next_ca.take() else {
                return generate(dns_names, now);
            };
            next.serving = issue_serving(&ca, dns_names, now)?;
            next.retired_ca = Some(std::mem::replace(&mut next.ca, ca).cert);
        }
        Rotation::DropRetiredCa => next.retired_ca = None,
    }
    Ok(next)
}

/// A new CA and a serving certificate from it.
pub fn generate(dns_names: &[String], now: SystemTime) -> Result<Material, rcgen::Error> {
    let ca = new_ca(now)?;
    let serving = issue_serving(&ca, dns_names, now)?;
    Ok(Material { ca, next_ca: None, retired_ca: None, serving })
}

/// The CA's identity: used to create it and, from its common name, to sign with it later (the
/// issuer name and key identifier in a serving certificate must match the CA's exactly).
fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, common_name);
    // Path length 0: this CA signs serving certificates only, never another CA.
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params
}

/// A new self-signed CA (ECDSA P-256) valid for [`CA_LIFETIME`].
fn new_ca(now: SystemTime) -> Result<KeyedCert, rcgen::Error> {
    let key = KeyPair::generate()?;
    let created = now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
    // Unique per CA (time and key), so the CAs in one caBundle are told apart by name too.
    let tail = key.public_key_raw().iter().rev().take(4).map(|b| format!("{b:02x}")).collect::<String>();
    let mut params = ca_params(&format!("sandcap-webhook-ca@{created}-{tail}"));
    params.not_before = (now - BACKDATE).into();
    params.not_after = (now + CA_LIFETIME).into();
    KeyedCert::generated(params.self_signed(&key)?, &key)
}

/// A serving certificate for `dns_names` signed by `ca`, valid for [`SERVING_LIFETIME`] or until
/// the CA expires, whichever is sooner.
fn issue_serving(ca: &KeyedCert, dns_names: &[String], now: SystemTime) -> Result<KeyedCert, rcgen::Error> {
    let issuer = Issuer::new(ca_params(&ca.cert.common_name), KeyPair::from_pem(&ca.key_pem)?);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(dns_names.to_vec())?;
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, dns_names.last().map(String::as_str).unwrap_or("sandcap"));
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = (now - BACKDATE).into();
    params.not_after = (now + SERVING_LIFETIME).min(ca.cert.not_after).into();
    KeyedCert::generated(params.signed_by(&key, &issuer)?, &key)
}

// ---- the I/O shell ----------------------------------------------------------------------------

/// Where the certificates live; see the `--cert-secret-name`, `--webhook-config-name` and
/// `--service-name` flags of `sandcap run`.
#[derive(Clone, Debug)]
pub struct CertOptions {
    /// Secret (in `namespace`) holding the CA and serving certificate.
    pub secret_name: String,
    /// sandcap's own namespace (POD_NAMESPACE).
    pub namespace: String,
    /// The webhook Service; its DNS names go into the serving certificate.
    pub service_name: String,
    /// The ValidatingWebhookConfiguration whose caBundle sandcap keeps in sync (and no other).
    pub webhook_config_name: String,
    /// How often the Secret and caBundle are checked.
    pub check_interval: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    #[error("could not generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("other replicas kept changing the Secret or webhook configuration ({MAX_ATTEMPTS} conflicts in a row)")]
    Contended,
}

/// What happened to the webhook configuration's caBundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BundleSync {
    UpToDate,
    Patched,
    /// The ValidatingWebhookConfiguration does not exist (yet): nothing to keep in sync, and a
    /// next CA is never promoted because no apiserver could have seen it.
    ConfigMissing,
}

/// One reconcile's result: what this replica wrote to the Secret, if anything, and the caBundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconciled {
    pub rotation: Rotation,
    pub ca_bundle: BundleSync,
}

/// Both 409s mean another writer got there first: `AlreadyExists` on create, `Conflict` on a
/// stale resourceVersion.
fn lost_race(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// Without a field manager the apiserver records the write under `unknown`, and `kubectl get
/// --show-managed-fields` cannot tell who owns the certificates.
fn post_params() -> PostParams {
    PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() }
}

/// Writes `material` into the Secret as read (`current`), guarded by its resourceVersion.
/// `Ok(false)`: another replica wrote first.
async fn write_secret(
    api: &Api<Secret>,
    opts: &CertOptions,
    current: Option<&Secret>,
    material: &Material,
) -> Result<bool, kube::Error> {
    let result = match current {
        Some(existing) => {
            let mut secret = existing.clone();
            secret.data = Some(material.to_secret_data());
            secret.string_data = None;
            api.replace(&opts.secret_name, &post_params(), &secret).await
        }
        None => {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(opts.secret_name.clone()),
                    namespace: Some(opts.namespace.clone()),
                    labels: Some(BTreeMap::from([
                        ("app.kubernetes.io/managed-by".to_string(), "sandcap".to_string()),
                        ("app.kubernetes.io/component".to_string(), "webhook-certificate".to_string()),
                    ])),
                    ..ObjectMeta::default()
                },
                type_: Some("kubernetes.io/tls".into()),
                data: Some(material.to_secret_data()),
                ..Secret::default()
            };
            api.create(&post_params(), &secret).await
        }
    };
    match result {
        Ok(_) => Ok(true),
        Err(e) if lost_race(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sets every webhook's caBundle to `bundle` with one JSON patch that only touches those fields,
/// guarded by the resourceVersion read. `Ok(None)`: someone changed the configuration meanwhile.
async fn sync_ca_bundle(
    api: &Api<ValidatingWebhookConfiguration>,
    opts: &CertOptions,
    config: Option<&ValidatingWebhookConfiguration>,
    bundle: &str,
) -> Result<Option<BundleSync>, kube::Error> {
    let Some(config) = config else {
        return Ok(Some(BundleSync::ConfigMissing));
    };
    let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bundle);
    let mut ops = vec![json!({
        "op": "replace",
        "path": "/metadata/resourceVersion",
        "value": config.metadata.resource_version,
    })];
    for (i, webhook) in config.webhooks.iter().flatten().enumerate() {
        if webhook.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(bundle.as_bytes()) {
            ops.push(json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": encoded}));
        }
    }
    if ops.len() == 1 {
        return Ok(Some(BundleSync::UpToDate));
    }
    let patch = Patch::Json::<()>(serde_json::from_value(json!(ops)).expect("a JSON patch built above"));
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
    match api.patch(&opts.webhook_config_name, &params, &patch).await {
        Ok(_) => Ok(Some(BundleSync::Patched)),
        Err(e) if lost_race(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

fn next_ca_published(stored: &Stored, config: Option<&ValidatingWebhookConfiguration>) -> bool {
    let (Stored::Usable(material), Some(config)) = (stored, config) else {
        return false;
    };
    let Some(next) = &material.next_ca else {
        return false;
    };
    let webhooks = config.webhooks.as_deref().unwrap_or_default();
    !webhooks.is_empty()
        && webhooks
            .iter()
            .all(|w| w.client_config.ca_bundle.as_ref().is_some_and(|b| bundle_contains(&b.0, &next.cert)))
}

/// One round at time `now`: read the Secret and the webhook configuration, write what [`decide`]
/// says, then bring the caBundle in line with the Secret. Safe to run on every replica at once.
pub async fn reconcile(client: &Client, opts: &CertOptions, now: SystemTime) -> Result<Reconciled, RotationError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &opts.namespace);
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let names = dns_names(&opts.service_name, &opts.namespace);
    let mut written = Rotation::Keep;
    for _ in 0..MAX_ATTEMPTS {
        let secret = secrets.get_opt(&opts.secret_name).await?;
        let config = configs.get_opt(&opts.webhook_config_name).await?;
        let stored = Stored::from_secret(secret.as_ref());
        let action = decide(&stored, &names, next_ca_published(&stored, config.as_ref()), now);
        let material = carry_out(&stored, &action, &names, now)?;
        if action != Rotation::Keep {
            if !write_secret(&secrets, opts, secret.as_ref(), &material).await? {
                continue;
            }
            written = action;
        }
        if let Some(ca_bundle) = sync_ca_bundle(&configs, opts, config.as_ref(), &material.ca_bundle()).await? {
            return Ok(Reconciled { rotation: written, ca_bundle });
        }
    }
    Err(RotationError::Contended)
}

/// Keeps the certificates current until `shutdown`: a [`reconcile`] every `check_interval`, sooner
/// after a failure. Errors are logged and retried; they never end the loop.
pub async fn run_self_managed(client: Client, opts: CertOptions, shutdown: CancellationToken) {
    tracing::info!(
        secret = %opts.secret_name, namespace = %opts.namespace, webhook_config = %opts.webhook_config_name,
        "managing the webhook certificates"
    );
    loop {
        let wait = match reconcile(&client, &opts, SystemTime::now()).await {
            Ok(outcome) => {
                if outcome.rotation != Rotation::Keep {
                    tracing::info!(secret = %opts.secret_name, "{}", outcome.rotation);
                }
                match outcome.ca_bundle {
                    BundleSync::Patched => {
                        tracing::info!(webhook_config = %opts.webhook_config_name, "caBundle updated")
                    }
                    BundleSync::ConfigMissing => tracing::warn!(
                        webhook_config = %opts.webhook_config_name,
                        "ValidatingWebhookConfiguration not found: its caBundle cannot be kept in sync"
                    ),
                    BundleSync::UpToDate => {}
                }
                opts.check_interval
            }
            Err(error) => {
                tracing::warn!(%error, "self-managed certificates: will retry");
                RETRY_AFTER.min(opts.check_interval)
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 60 * 60);
    const YEAR: Duration = Duration::from_secs(365 * 24 * 60 * 60);

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn names() -> Vec<String> {
        dns_names("sandcap-webhook", "sandcap-system")
    }

    fn fresh() -> Material {
        generate(&names(), t0()).unwrap()
    }

    fn usable(m: &Material) -> Stored {
        Stored::Usable(Box::new(m.clone()))
    }

    fn step(m: &Material, action: &Rotation, now: SystemTime) -> Material {
        carry_out(&usable(m), action, &names(), now).unwrap()
    }

    #[test]
    fn absent_or_unusable_secret_is_created() {
        assert!(matches!(decide(&Stored::Absent, &names(), false, t0()), Rotation::Create { .. }));
        let mut data = fresh().to_secret_data();
        data.insert(TLS_KEY.into(), ByteString(b"garbage".to_vec()));
        let Stored::Unusable(reason) = Stored::from_secret(Some(&Secret { data: Some(data), ..Secret::default() }))
        else {
            panic!("a garbage key must make the Secret unusable");
        };
        assert_eq!(reason, "tls.crt: private key is not a PKCS#8 PEM key");
        let action = decide(&Stored::Unusable(reason), &names(), false, t0());
        assert_eq!(
            action,
            Rotation::Create { reason: "the Secret is unusable: tls.crt: private key is not a PKCS#8 PEM key".into() }
        );
    }

    #[test]
    fn unusable_reasons_name_the_problem() {
        let m = fresh();
        let other = fresh();
        let cases: [(&str, &[u8], &str); 4] = [
            (CA_CRT, b"", "ca.crt: is not a PEM certificate"),
            (CA_KEY, other.ca.key_pem().as_bytes(), "ca.crt: private key does not belong to the certificate"),
            (TLS_CRT, &[0xff, 0xfe], "tls.crt is not UTF-8 text"),
            (NEXT_CA_CRT, m.ca.cert.pem().as_bytes(), "next-ca.key is missing"),
        ];
        for (key, value, expected) in cases {
            let mut data = m.to_secret_data();
            data.insert(key.into(), ByteString(value.to_vec()));
            assert_eq!(Material::from_secret_data(&data).unwrap_err(), expected, "{key}");
        }
        let mut data = m.to_secret_data();
        data.remove(TLS_KEY);
        assert_eq!(Material::from_secret_data(&data).unwrap_err(), "tls.key is missing");
    }

    #[test]
    fn generated_material_is_consistent_and_round_trips() {
        let m = fresh();
        assert!(m.serving.cert.issued_by(&m.ca.cert));
        assert_eq!(m.serving.cert.dns_names(), names().as_slice());
        assert_eq!(m.serving.cert.not_after().duration_since(t0()).unwrap(), SERVING_LIFETIME);
        assert_eq!(m.ca.cert.not_after().duration_since(t0()).unwrap(), CA_LIFETIME);
        assert_eq!(t0().duration_since(m.ca.cert.not_before()).unwrap(), BACKDATE);
        let back = Material::from_secret_data(&m.to_secret_data()).unwrap();
        assert_eq!(back.to_secret_data(), m.to_secret_data());
        assert_eq!(m.ca_bundle(), m.ca.cert.pem());
        assert!(bundle_contains(m.ca_bundle().as_bytes(), &m.ca.cert));
        assert!(!bundle_contains(m.ca_bundle().as_bytes(), &m.serving.cert));
    }

    #[test]
    fn debug_output_never_shows_keys() {
        let m = fresh();
        let shown = format!("{m:?}");
        assert!(!shown.contains("PRIVATE KEY") && shown.contains("<redacted>"));
    }

    #[test]
    fn fresh_material_is_kept() {
        let m = fresh();
        for later in [Duration::ZERO, DAY, 200 * DAY] {
            assert_eq!(decide(&usable(&m), &names(), false, t0() + later), Rotation::Keep, "{later:?}");
        }
    }

    #[test]
    fn serving_certificate_is_renewed_in_its_last_third_with_the_same_ca() {
        let m = fresh();
        let now = t0() + 250 * DAY;
        let action = decide(&usable(&m), &names(), false, now);
        assert!(
            matches!(&action, Rotation::RenewServing { reason } if reason.starts_with("it expires at ")),
            "{action:?}"
        );
        let renewed = step(&m, &action, now);
        assert_eq!(renewed.ca.cert.pem(), m.ca.cert.pem(), "the CA (and so the caBundle) must not change");
        assert_eq!(renewed.ca_bundle(), m.ca_bundle());
        assert_ne!(renewed.serving.cert.pem(), m.serving.cert.pem());
        assert!(renewed.serving.cert.issued_by(&m.ca.cert));
        assert_eq!(decide(&usable(&renewed), &names(), false, now), Rotation::Keep);
    }

    #[test]
    fn serving_certificate_is_renewed_when_names_change_or_the_ca_differs() {
        let m = fresh();
        let other_names = dns_names("renamed", "sandcap-system");
        assert!(matches!(decide(&usable(&m), &other_names, false, t0()), Rotation::RenewServing { .. }));
        let foreign = Material { serving: fresh().serving, ..m.clone() };
        assert_eq!(
            decide(&usable(&foreign), &names(), false, t0()),
            Rotation::RenewServing { reason: "it was not issued by the current CA".into() }
        );
    }

    #[test]
    fn serving_certificate_never_outlives_its_ca() {
        let m = fresh();
        let late = t0() + CA_LIFETIME - 100 * DAY;
        let serving = issue_serving(&m.ca, &names(), late).unwrap();
        assert_eq!(serving.cert.not_after(), m.ca.cert.not_after());
    }

    #[test]
    fn expired_ca_starts_over() {
        let m = fresh();
        let action = decide(&usable(&m), &names(), false, t0() + CA_LIFETIME);
        assert!(matches!(action, Rotation::Create { ref reason } if reason.starts_with("the CA expired at ")));
    }

    #[test]
    fn ca_rotation_publishes_before_it_switches_and_retires_after() {
        let names = names();
        let m = fresh();
        // Keep the serving certificate young so that only the CA drives the decisions.
        let mut now = t0() + 7 * YEAR;
        let m = Material { serving: issue_serving(&m.ca, &names, now).unwrap(), ..m };

        assert_eq!(decide(&usable(&m), &names, false, now), Rotation::PrepareNextCa);
        let prepared = step(&m, &Rotation::PrepareNextCa, now);
        let next = prepared.next_ca.clone().unwrap();
        assert_eq!(prepared.ca_bundle(), format!("{}{}", m.ca.cert.pem(), next.cert.pem()));
        assert_eq!(prepared.serving.cert.pem(), m.serving.cert.pem(), "nothing is signed by the next CA yet");

        // Published, but not for long enough; or old enough, but not published: wait.
        now += CA_PUBLISH_GRACE / 2;
        assert_eq!(decide(&usable(&prepared), &names, true, now), Rotation::Keep);
        now += CA_PUBLISH_GRACE;
        assert_eq!(decide(&usable(&prepared), &names, false, now), Rotation::Keep);
        assert_eq!(decide(&usable(&prepared), &names, true, now), Rotation::PromoteNextCa);

        let promoted = step(&prepared, &Rotation::PromoteNextCa, now);
        assert_eq!(promoted.ca.cert.pem(), next.cert.pem());
        assert!(promoted.serving.cert.issued_by(&next.cert));
        assert!(promoted.next_ca.is_none());
        assert_eq!(promoted.retired_ca.as_ref().unwrap().pem(), m.ca.cert.pem());
        assert_eq!(promoted.ca_bundle(), format!("{}{}", next.cert.pem(), m.ca.cert.pem()));

        assert_eq!(decide(&usable(&promoted), &names, false, now + CA_RETIRE_GRACE / 2), Rotation::Keep);
        let later = now + CA_RETIRE_GRACE;
        assert_eq!(decide(&usable(&promoted), &names, false, later), Rotation::DropRetiredCa);
        let done = step(&promoted, &Rotation::DropRetiredCa, later);
        assert_eq!(done.ca_bundle(), next.cert.pem());
        assert_eq!(decide(&usable(&done), &names, false, later), Rotation::Keep);
    }

    #[test]
    fn next_ca_does_not_block_serving_renewals_meanwhile() {
        let names = names();
        let now = t0() + 7 * YEAR;
        let m = step(&fresh(), &Rotation::PrepareNextCa, now);
        // The serving certificate from t0 expired long ago; the unpublished next CA must not wait.
        assert!(matches!(decide(&usable(&m), &names, false, now), Rotation::RenewServing { .. }));
        let renewed = step(&m, &decide(&usable(&m), &names, false, now), now);
        assert!(renewed.serving.cert.issued_by(&m.ca.cert), "still signed by the published CA");
        assert_eq!(renewed.next_ca.unwrap().cert.pem(), m.next_ca.unwrap().cert.pem());
    }

    #[test]
    fn bundle_contains_compares_certificates_not_text() {
        let m = fresh();
        let other = fresh();
        let bundle = format!("{}\n\n{}", other.ca.cert.pem(), m.ca.cert.pem().replace('\n', "\r\n"));
        assert!(bundle_contains(bundle.as_bytes(), &m.ca.cert));
        assert!(!bundle_contains(other.ca.cert.pem().as_bytes(), &m.ca.cert));
        assert!(!bundle_contains(b"not pem", &m.ca.cert));
    }
}
